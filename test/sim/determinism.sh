#!/bin/sh
# determinism.sh — issue 25's determinism check: each of the six methods (allreduce, ps, easgd,
# backup, gossip_pull, gossip_push; and synchronous easgd) in sim mode at p = P (default 16) with
# sim.jitter = 0.3, a slow worker and random stragglers, run twice, the second while two busy
# loops load the machine: every dataset but wall_s must be equal bit for bit (test/sim/h5same.py).
# `make check-sim-determinism` (not in make check: 14 runs of 16+ ranks, several minutes on 2
# cores). Runs from the repository root with ./dsgd-run built and mpiexec on PATH; every mpiexec
# under a timeout.
#     P=16 sh test/sim/determinism.sh
set -u
P=${P:-16}
T=${TEST_MPI_TIMEOUT:-600}
DSGD=${DSGD:-./dsgd-run}
case $DSGD in /*) ;; *) DSGD=$(pwd)/$DSGD ;; esac
CFG=$(pwd)/configs/linear.cfg
SAME=$(pwd)/test/sim/h5same.py
dir=$(mktemp -d /tmp/dsgd-simdet.XXXXXX)
load=
trap 'for j in $load; do kill $j 2>/dev/null; done; rm -rf "$dir"' EXIT INT TERM
fail=0
# every run: 200 steps, evaluations every 100, jitter, worker 1 slow (30 ms), 10 % random stragglers
D="--set p=$P --set iterations=200 --set eval.every=100 --set log_every=20 --set sim.enabled=true --set sim.jitter=0.3
   --set inject.slow_ranks=[1] --set inject.delay_ms=30 --set inject.random_slow=0.1"
run() {  # run NAME RANKS ARGS...
    rn=$1 rnp=$2
    shift 2
    timeout -k 5 "$T" mpiexec -n "$rnp" "$DSGD" "$CFG" $D "$@" --set "output=\"$dir/$rn.h5\"" >"$dir/$rn.log" 2>&1 ||
        { echo "FAIL: $rn: exit $? ($(tail -n 2 "$dir/$rn.log"))"; fail=1; return 1; }
}
for c in "allreduce $P allreduce" "ps $((P + 2)) ps --set servers=2" "easgd $((P + 2)) easgd --set servers=2 --set tau=2" \
         "easgdsync $((P + 2)) easgd --set servers=2 --set tau=2 --set synchronous=true" \
         "backup $((P + 2)) backup --set servers=2 --set backups=1" "gossip_pull $P gossip_pull" "gossip_push $P gossip_push"; do
    set -- $c
    name=$1 np=$2 m=$3
    shift 3
    t0=$(date +%s)
    run "$name-1" "$np" --set "method=\"$m\"" "$@" || continue
    for j in 1 2; do (while :; do :; done) & load="$load $!"; done
    run "$name-2" "$np" --set "method=\"$m\"" "$@"
    rc=$?
    for j in $load; do kill $j 2>/dev/null; done
    load=
    [ $rc = 0 ] || continue
    if out=$(/usr/bin/python3 "$SAME" "$dir/$name-1.h5" "$dir/$name-2.h5" 2>&1); then
        echo "ok: $name at p = $P: two runs (the second loaded) the same: $out ($(($(date +%s) - t0)) s)"
    else
        echo "FAIL: $name at p = $P: $out"; fail=1
    fi
done
exit $fail
