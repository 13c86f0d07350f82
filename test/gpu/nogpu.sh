#!/bin/sh
# nogpu.sh — device = "cuda" where it cannot run: every rank stops before training with a message
# that says why, exit status non-zero on every rank, no run file, no hang. Two cases:
#   - a CPU-only build (plain `make`): the message says to rebuild with `make CUDA=1`;
#   - a `make CUDA=1` build on a machine without a GPU (CI): the message says no GPU is visible.
# On a machine with a GPU the CUDA build would train, so the test says so and passes (the GPU
# check test/gpu/run.sh covers that machine). With comm = "nccl" too (2 ranks): the device is
# refused before NCCL is touched. Usage: sh test/gpu/nogpu.sh [./dsgd-run]
set -u
BIN=${1:-./dsgd-run}
T=${TEST_MPI_TIMEOUT:-120}
dir=$(mktemp -d /tmp/dsgd-nogpu.XXXXXX)
trap 'rm -rf "$dir"' EXIT INT TERM
if "$BIN" --version | grep -q "cuda: GPU backend not built"; then
    want='rebuild with `make CUDA=1`'
    build=cpu
else
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo "nogpu.sh: a GPU is visible here: nothing to test (test/gpu/run.sh checks GPU machines)"
        exit 0
    fi
    want='no CUDA GPU'
    build=cuda
fi
fail=0
for run in 1 2 2nccl; do
    np=${run%nccl}
    comm=mpi
    [ "$run" = "${np}nccl" ] && comm=nccl
    out="$dir/run$run.h5"
    timeout -k 10 "$T" mpiexec -n $np "$BIN" --set p=$np --set device=cuda --set comm=$comm --set "output=\"$out\"" \
        configs/quickstart.cfg >"$dir/log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
        echo "FAIL ($build build, $np ranks, comm $comm): exit status $rc, expected a clean non-zero exit"; fail=1
    fi
    if ! grep -qF "$want" "$dir/log"; then
        echo "FAIL ($build build, $np ranks, comm $comm): no message containing '$want':"; cat "$dir/log"; fail=1
    fi
    if ! grep -qF "key 'device'" "$dir/log"; then
        echo "FAIL ($build build, $np ranks, comm $comm): the message does not name key 'device':"; cat "$dir/log"; fail=1
    fi
    if [ -e "$out" ]; then echo "FAIL ($build build, $np ranks, comm $comm): a run file was created"; fail=1; fi
    [ $fail -eq 0 ] && echo "ok ($build build, $np ranks, comm $comm, exit $rc): $(head -1 "$dir/log")"
done
# A CPU-only build refuses device = "cuda" already under --check (a login node checking a GPU job).
if [ "$build" = cpu ]; then
    "$BIN" --check --set device=cuda configs/quickstart.cfg >"$dir/log" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -qF "$want" "$dir/log"; then echo "ok (cpu build, --check): exit 2, $(head -1 "$dir/log")"
    else echo "FAIL (cpu build, --check): exit $rc: $(cat "$dir/log")"; fail=1; fi
fi
exit $fail
