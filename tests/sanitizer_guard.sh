#!/bin/sh
# Runs a test executable and fails if a sanitizer reported anything.
# Criterion reports a test's result before its worker process exits, so a leak
# found by LeakSanitizer at exit would otherwise leave the run green.
log=$(mktemp)
"$@" 2>"$log"
rc=$?
cat "$log" >&2
if grep -qE 'ERROR: (LeakSanitizer|AddressSanitizer)|WARNING: ThreadSanitizer|runtime error:' "$log"; then
    echo "sanitizer_guard: sanitizer report in $1" >&2
    rc=1
fi
rm -f "$log"
exit $rc
