#!/bin/sh
# tests/e2e/run_sdk_tls.sh - the `openai` SDK against the daemon over HTTPS:
# makes a test CA and a server certificate for 127.0.0.1 with openssl, points
# node at the CA (NODE_EXTRA_CA_CERTS, read when node starts) and runs
# openai_sdk_tls.mjs. Needs node >= 18, npm and openssl.
set -eu
cd "$(dirname "$0")"
./npm_install.sh
dir=$(mktemp -d "${TMPDIR:-/tmp}/gs-sdk-tls.XXXXXX")
trap 'rm -rf "$dir"' EXIT
k="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $k -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 -subj '/CN=gs sdk CA' 2>/dev/null
openssl req $k -keyout "$dir/srv.key" -out "$dir/srv.csr" -subj '/CN=localhost' 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$dir/san.cnf"
openssl x509 -req -in "$dir/srv.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -out "$dir/srv.pem" -days 2 -extfile "$dir/san.cnf" 2>/dev/null
NODE_EXTRA_CA_CERTS="$dir/ca.pem" node --test-reporter=spec openai_sdk_tls.mjs \
    "$GS_BUILD_DIR/server/graphserve" "$GS_SHARED_DIR" "$dir"
