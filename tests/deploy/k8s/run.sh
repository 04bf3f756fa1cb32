#!/bin/sh
# tests/deploy/k8s/run.sh - installs the pinned validator packages
# (package.json, package-lock.json: kubernetes-models, whose bundled schemas
# are generated from the Kubernetes OpenAPI spec, and js-yaml) into
# tests/deploy/k8s/node_modules once, then validates deploy/kubernetes/
# offline. Needs node >= 18 and npm.
set -eu
cd "$(dirname "$0")"
if [ ! -f node_modules/kubernetes-models/package.json ] ||
   ! grep -q '"version": "4.5.1"' node_modules/kubernetes-models/package.json; then
    npm ci --no-audit --no-fund --loglevel=error
fi
exec node validate.mjs "$GS_SOURCE_DIR" "$GS_BUILD_DIR/server/graphserve"
