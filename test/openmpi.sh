#!/bin/sh
# openmpi.sh — make check-openmpi: dsgd-run built against Open MPI, and the MPI integration tests
# run under Open MPI's mpiexec as make check runs them under MPICH's:
#   test_mpi         bad input on every rank, launcher check, run file, killed run, full disk
#   test_methods     the six methods, p = 1, 2, 4 ranks (+ servers), BN averaging
#   test_checkpoint  SIGTERM -> checkpoint -> --resume bitwise, checkpoint refusals
#   test_faults      hung workers and servers (SIGSTOP), comm_timeout_s, signals per method
# and then each MPI's build started by the other MPI's real mpiexec (refused: exit 2).
#
# Open MPI is Debian's libopenmpi-dev (4.1), installed beside MPICH when missing (as root; as
# another user this step says SKIPPED and exits 0). Installing it switches Debian's `mpi` and
# `mpirun` alternatives (mpicc, mpiexec) to Open MPI: this script puts back what they were, so
# `make`, `make run` and `make check` keep using MPICH. The build is a copy of the tree in
# build/openmpi (the tests run ./dsgd-run from the tree they are in), compiled with
# CC=mpicc.openmpi and the main tree's oneDNN (ONEDNN_PREFIX); its build/bin/mpiexec wrapper is Open MPI's
# mpiexec with the flags Open MPI needs here (Makefile, build/bin/mpiexec: oversubscription,
# run as root). Exit 1 if a test fails.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/build/openmpi"

if ! command -v mpicc.openmpi >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "SKIPPED: Open MPI (mpicc.openmpi) is not installed; run as root to install libopenmpi-dev, or apt-get install libopenmpi-dev"
        exit 0
    fi
    # Every MPI alternative as it is now (mpi: mpicc & co., mpirun: mpiexec, mpi-<triplet>:
    # headers, libmpi.so, mpi.pc), to be put back after the install.
    before=$(update-alternatives --get-selections 2>/dev/null | grep '^mpi' || true)
    echo "installing Open MPI (libopenmpi-dev openmpi-bin) beside MPICH"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin >/dev/null
    # Debian points the alternatives at the MPI installed last: back to what they were.
    printf '%s\n' "$before" | while read -r name mode path; do
        if [ -n "$name" ] && [ -n "$path" ]; then update-alternatives --quiet --set "$name" "$path"; fi
    done
    echo "mpicc is $(readlink -f "$(command -v mpicc)"), mpiexec is $(readlink -f "$(command -v mpiexec)") (as before)"
fi

# A copy of the tracked (and new, not ignored) files; build outputs stay behind.
rm -rf "$dest"
mkdir -p "$dest"
if [ -d "$root/.git" ] && command -v git >/dev/null 2>&1; then
    (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 tar cf -) | (cd "$dest" && tar xf -)
else
    (cd "$root" && tar cf - --exclude=./build --exclude=./dsgd-run --exclude=./runs --exclude=./plots .) | (cd "$dest" && tar xf -)
fi

tests="build/test/test_mpi build/test/test_methods build/test/test_checkpoint build/test/test_faults"
cd "$dest"
make --no-print-directory CC=mpicc.openmpi ONEDNN_ROOT="${ONEDNN_PREFIX:-$root/build/onednn}" -j"$(nproc)" dsgd-run $tests build/bin/mpiexec
./dsgd-run --version | sed -n '1p;/MPI:/p'
./dsgd-run --version | grep -q "MPI: Open MPI" || { echo "openmpi.sh: dsgd-run is not on Open MPI" >&2; exit 1; }
echo "MPI launcher for the tests: $(tail -1 build/bin/mpiexec)"
status=0
PATH="$dest/build/bin:$PATH" sh test/run-tests.sh $tests || status=1

# A foreign launcher, both ways, with the real launchers (test_mpi fakes their environment): the
# MPICH build started by Open MPI's mpiexec, and this Open MPI build by MPICH's, must each stop
# with exit status 2 and the launcher named, writing nothing.
foreign() { # label, directory of the binary, launcher command, expected words
    out="$dest/foreign.h5"
    rm -f "$out"
    rc=0
    log=$(cd "$2" && eval "timeout -k 5 60 $3 -n 2 ./dsgd-run --set 'output=\"$out\"' configs/linear.cfg" 2>&1) || rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$log" | grep -q "$4" && printf '%s' "$log" | grep -q "sees a world of 1 rank" && [ ! -e "$out" ]; then
        echo "ok: $1: exit 2, '$4', no run file"
    else
        echo "FAILED: $1: exit $rc (expected 2 with '$4' and no run file):"; printf '%s\n' "$log" | tail -5; status=1
    fi
}
if [ -x "$root/dsgd-run" ] && "$root/dsgd-run" --version | grep -q "MPI: MPICH" && command -v mpiexec.mpich >/dev/null; then
    foreign "the MPICH build under Open MPI's mpiexec" "$root" "$(sed -n 's/^export \(.*\); exec .*/env \1/p' build/bin/mpiexec) mpiexec.openmpi" \
        "Open MPI's mpiexec/mpirun started 2 processes"
    foreign "the Open MPI build under MPICH's mpiexec" "$dest" mpiexec.mpich "a PMI launcher"
else
    echo "SKIPPED: the foreign-launcher check (no MPICH build of dsgd-run at $root)"
fi
exit $status
