#!/bin/sh
# run-tests.sh — run every test binary under a timeout; a hang or a failure fails the suite.
# TEST_TIMEOUT (seconds, default 600) bounds each binary; MPI tests bound each mpiexec too.
status=0
for t in "$@"; do
    echo "== $t"
    if ! timeout -k 10 "${TEST_TIMEOUT:-600}" "$t"; then
        echo "FAILED: $t"
        status=1
    fi
done
[ $status -eq 0 ] && echo "all tests passed" || echo "some tests FAILED"
exit $status
