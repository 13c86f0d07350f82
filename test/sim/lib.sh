# test/sim/lib.sh — the common part of the sim-mode test scripts (test/test_sim_*.sh), sourced
# by them from the repository root after `set -u`:
#     SIM_TAG=simg . test/sim/lib.sh
# It sets PY (/usr/bin/python3: h5py, numpy), T (each mpiexec's limit in s: TEST_MPI_TIMEOUT,
# default 240), DSGD (the binary, ./dsgd-run or $DSGD, made absolute), CFG (configs/linear.cfg,
# absolute), SAME (test/sim/h5same.py), dir (a fresh /tmp/dsgd-$SIM_TAG.XXXXXX, removed at exit),
# load (the busy loops' pids, killed at exit), fail=0, and defines:
#   ok TEXT / bad TEXT        print "ok: TEXT" / "FAIL: TEXT" (bad sets fail=1)
#   sim_run N NAME ARGS...    timeout -k 5 $T mpiexec -n N $DSGD $CFG --set sim.enabled=true
#                             --set output="$dir/NAME.h5" ARGS..., output in $dir/NAME.log; its
#                             exit status (each script's sim() adds its method's keys)
#   same A.h5 B.h5 WHAT [h5same options]
#                             the two run files are the same run (test/sim/h5same.py: every
#                             dataset but wall_s bit for bit, the final attributes; options
#                             --attr NAME, --time-increasing): ok WHAT, or bad WHAT with why
#   busy_start / busy_stop    two busy loops beside a run (determinism under load), and their end
# Every mpiexec runs under `timeout`.
PY=/usr/bin/python3
T=${TEST_MPI_TIMEOUT:-240}
DSGD=${DSGD:-./dsgd-run}
case $DSGD in /*) ;; *) DSGD=$(pwd)/$DSGD ;; esac
CFG=$(pwd)/configs/linear.cfg
SAME=$(pwd)/test/sim/h5same.py
dir=$(mktemp -d "/tmp/dsgd-${SIM_TAG:-sim}.XXXXXX")
load=
trap 'for j in $load; do kill $j 2>/dev/null; done; rm -rf "$dir"' EXIT INT TERM
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
sim_run() {
    sim_n=$1 sim_name=$2
    shift 2
    timeout -k 5 $T mpiexec -n "$sim_n" "$DSGD" "$CFG" --set sim.enabled=true --set "output=\"$dir/$sim_name.h5\"" "$@" \
        >"$dir/$sim_name.log" 2>&1
}
same() {
    same_a=$1 same_b=$2 same_what=$3
    shift 3
    if same_out=$($PY "$SAME" "$@" "$same_a" "$same_b" 2>&1); then ok "$same_what ($same_out)"
    else bad "$same_what: $(echo "$same_out" | tail -n 2)"; fi
}
busy_start() {
    for j in 1 2; do sh -c 'while :; do :; done' & load="$load $!"; done
}
busy_stop() {
    for j in $load; do kill $j 2>/dev/null; done
    load=
}
