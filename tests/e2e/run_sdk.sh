#!/bin/sh
# tests/e2e/run_sdk.sh - installs the pinned `openai` npm package once
# (npm_install.sh), then runs the SDK test against the daemon built in
# $GS_BUILD_DIR. Needs node >= 18 and npm.
set -eu
cd "$(dirname "$0")"
./npm_install.sh
exec node --test-reporter=spec openai_sdk.mjs "$GS_BUILD_DIR/server/graphserve" "$GS_SHARED_DIR"
