#!/bin/sh
# tests/e2e/run_sdk.sh - installs the pinned `openai` npm package (package.json,
# package-lock.json) into tests/e2e/node_modules once, then runs the SDK test
# against the daemon built in $GS_BUILD_DIR. Needs node >= 18 and npm.
set -eu
cd "$(dirname "$0")"
if [ ! -f node_modules/openai/package.json ] ||
   ! grep -q '"version": "4.95.0"' node_modules/openai/package.json; then
    npm ci --no-audit --no-fund --loglevel=error
fi
exec node --test-reporter=spec openai_sdk.mjs "$GS_BUILD_DIR/server/graphserve" "$GS_SHARED_DIR"
