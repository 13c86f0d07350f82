#!/bin/sh
# run-one.sh DIR NAME CMD... — one test of make check (a make target each, so that `make -j check`
# runs several at once): CMD under a timeout (TEST_TIMEOUT seconds, default 600; the MPI tests
# bound each mpiexec too), its output in DIR/NAME.log, "ok SECONDS" or "FAILED SECONDS EXIT" in
# DIR/NAME.result. Prints one line when it starts and one when it ends, and the log if it failed.
# Exits 0 either way, so that every test runs; test/check-summary.sh reports and fails.
dir=$1 name=$2
shift 2
log="$dir/$name.log"
mkdir -p "$(dirname "$log")"
echo "== $name"
t0=$(date +%s.%N)
timeout -k 10 "${TEST_TIMEOUT:-600}" "$@" >"$log" 2>&1
rc=$?
secs=$(echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
if [ $rc -eq 0 ]; then
    echo "ok $secs" > "$dir/$name.result"
    echo "ok: $name ($secs s)"
else
    echo "FAILED $secs $rc" > "$dir/$name.result"
    { echo "FAILED: $name (exit $rc$( [ $rc -ge 124 ] && echo ": timed out or killed"), $secs s); its output ($log):"
      cat "$log"; echo "(end of $name)"; }
fi
exit 0
