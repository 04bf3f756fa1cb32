#!/bin/sh
# tests/e2e/npm_install.sh - installs the pinned `openai` npm package
# (package.json, package-lock.json) into tests/e2e/node_modules once. Both SDK
# suites call it, and meson may start them at the same moment: `npm ci`
# deletes and rewrites node_modules, so two at once fail (ENOTEMPTY, seen on a
# clean clone). The lock makes the second wait and then find the first's
# install.
set -eu
cd "$(dirname "$0")"
exec 9>.npm-install.lock
flock 9
if [ ! -f node_modules/openai/package.json ] ||
   ! grep -q '"version": "4.95.0"' node_modules/openai/package.json; then
    npm ci --no-audit --no-fund --loglevel=error
fi
