#!/bin/sh
# tests/e2e/npm_install.sh - installs the pinned `openai`, `@anthropic-ai/sdk`, `zod` and
# `playwright-core` npm packages (package.json, package-lock.json) into tests/e2e/node_modules once. Both SDK
# suites call it, and meson may start them at the same moment: `npm ci`
# deletes and rewrites node_modules, so two at once fail (ENOTEMPTY, seen on a
# clean clone). The lock makes the second wait and then find the first's
# install.
set -eu
cd "$(dirname "$0")"
exec 9>.npm-install.lock
flock 9
# Each pinned version, as package.json has it.
installed() {
    [ -f "node_modules/$1/package.json" ] &&
        grep -q "\"version\": \"$2\"" "node_modules/$1/package.json"
}
if ! installed openai 4.95.0 || ! installed @anthropic-ai/sdk 1.16.0 || ! installed zod 3.25.76 ||
    ! installed playwright-core 1.65.2; then
    npm ci --no-audit --no-fund --loglevel=error
fi
