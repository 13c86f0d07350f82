#!/bin/sh
# check-summary.sh DIR NAME... — the end of make check: the result of every test that
# test/run-one.sh ran (DIR/NAME.result), the failed ones named, wall-clock time since DIR/.start
# against the tests' summed time. Exit 1 if a test failed or has no result (it did not run).
dir=$1
shift
n=0 nfailed=0 failed="" sum=0
for name in "$@"; do
    n=$((n + 1))
    if [ -f "$dir/$name.result" ]; then
        read -r st secs rc < "$dir/$name.result"
        sum=$(echo "$sum $secs" | awk '{print $1 + $2}')
        [ "$st" = ok ] && continue
        failed="$failed FAILED: $name (exit $rc; log $dir/$name.log)
"
    else
        failed="$failed FAILED: $name (did not run)
"
    fi
    nfailed=$((nfailed + 1))
done
wall=$(( $(date +%s) - $(cat "$dir/.start" 2>/dev/null || date +%s) ))
echo "make check: $n tests, $nfailed failed; $(printf '%.0f' "$sum") s of test time in $wall s (logs: $dir/)"
if [ $nfailed -gt 0 ]; then
    printf '%s' "$failed" | sed 's/^ //'
    echo "some tests FAILED"
    exit 1
fi
echo "all tests passed"
