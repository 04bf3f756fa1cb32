#!/bin/sh
# tests/e2e/run_sdk.sh [TEST.mjs] - installs the pinned SDK npm packages once
# (npm_install.sh), then runs an SDK test (openai_sdk.mjs unless named) against
# the daemon built in $GS_BUILD_DIR. Needs node >= 18 and npm.
set -eu
cd "$(dirname "$0")"
./npm_install.sh
exec node --test-reporter=spec "${1:-openai_sdk.mjs}" "$GS_BUILD_DIR/server/graphserve" "$GS_SHARED_DIR"
