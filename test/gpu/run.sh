#!/bin/bash
# run.sh — the GPU check of dsgd-run, in one call, within a time budget (default 400 s: with a
# machine's start and the transfers, one call fits a 15-minute GPU allocation; give it a time
# limit of at least the budget + 40 s). The steps most needed come first, so that a run cut
# short by the budget still has them:
#
#   a. the machine: nvidia-smi, driver, CUDA, cuDNN, PyTorch, glibc; the binaries' libraries
#      (or the build); an MPI smoke test (2 ranks, the linear model on the CPU)
#   b. test_gpu_ops     every GPU op against the CPU backend
#   c. one short Fashion-MNIST run of dsgd-run (test/gpu/fmnist_short.cfg: ResNet-18 width 16,
#      150 steps of b = 64, allreduce), device = cuda, p = 1: exits 0, writes its run file, final
#      top-1 error < 0.35
#   d. throughput: build/bench_gpu and tools/bench_torch_gpu.py, ResNet-18 width 64, ImageNet
#      stem, 3x224x224, 1000 classes, b = 32 and 256; the rows in the order most needed, each
#      program under its own budget (90 s and 35 s: a row starts only if predicted to end in it;
#      the rows left out are the last, least needed, and say NOT RUN): dsgd-run fp32 and bf16
#      (issue 23's goals), its switches of the step in bf16 (docs/gpu.md, "Switches": NHWC, with
#      BN+ReLU and BN+add+ReLU fused, the CUDA graph, one synchronisation per step, the casts in
#      one launch, a one-rank NCCL all-reduce after the backward pass and per gradient group
#      during it, deterministic algorithms), tf32; PyTorch fp32 and bf16 channels_last, bf16
#      NCHW, tf32. 2 warm-up steps, 3 timings of 5 steps, at most 4 s of timings a row; the
#      table goes into summary.md and to stdout at once (test/gpu/README.md, "Time budget")
#   e. NCCL: test_gpu_comm (device vectors, the CUDA-aware path's scaling, a one-rank NCCL
#      all-reduce; DSGD_REQUIRE_NCCL=1 on a GPU machine: an NCCL that cannot be loaded fails),
#      then comm = "nccl" at p = 1 (20 steps, loss curve as step c's MPI run's)
#   f. a short JPEG run: a tiny ImageFolder tree (make_jpeg_tree.py: 2,000 + 500 Fashion-MNIST
#      images as JPEGs of 40–64 px) packed with dsgd-run --pack, then test/gpu/jpeg_short.cfg
#      (data.format = "jpeg", 100 steps of b = 64 at 32 px), device = cuda, p = 1: final top-1 < 0.35
#   g. optional, as the budget allows: test_gpu_model (the GPU network against the CPU model),
#      test_gpu_device (the same through model.h), test_gpu_overlap (copies and all-reduce
#      overlapped with the GPU's work, also under mpiexec -n 2 and -n 3); more runs: device = cpu
#      at p = 1 (cuda and cpu loss curves agree over the first 10 steps, rel <= 1e-3, fp32), cuda
#      at p = 2 (both ranks on one GPU); comm = "nccl" at p = 2 (with one GPU: refused at start,
#      exit 2, naming key 'comm'; with two: trained and checked); with a CUDA-aware MPI also p = 2
#      with DSGD_CUDA_AWARE=0 (the host path) against the default; p = 2 with DSGD_OVERLAP=0 (no
#      overlap) against the default; comm = "nccl" at p = 1 with DSGD_NCCL_OVERLAP=0 against e.'s
#   summary.md: every step with its status and time, and img/s dsgd-run vs PyTorch
#
# Tests and runs choose cuDNN's convolution algorithms by its heuristics (DSGD_CUDNN_ALGO=heuristic:
# the same choice in every process, so runs compare at tight tolerances); the throughput steps by
# timing (the default).
#
#   test/gpu/run.sh RESULTS_DIR [--bundle DIR] [--budget SECONDS]
#
#   --bundle DIR   run the binaries that test/gpu/bundle.sh packed (for a GPU machine without
#                  MPI, oneDNN, HDF5, libconfig, Check); without it, build here with
#                  `make CUDA=1 dsgd-run gpu-tests` and use the system's mpiexec
#   --budget S     stop starting steps when S seconds have passed (each step's timeout is cut to
#                  what is left); default 400
#
# RESULTS_DIR gets at most six files: summary.md (also printed at the end), env.log, checks.log
# (tests), runs.log (training runs and their checks), bench.log, runs.tar.gz (the HDF5 run
# files). Every step runs under `timeout` (and every other call of dsgd-run under `timeout
# $GPUCHECK_CMD_TIMEOUT`, default 60 s); a failing step is recorded and the script goes on.
# summary.md is rewritten after every step, so a killed run still leaves one; SIGTERM or SIGINT
# (the call cut from outside) stops the running step, records it as CUT, and prints summary.md
# (with the throughput table if step d has run) before exiting 1.
#
# Exit status: 0 every check passed; 1 a check failed or timed out; 2 no GPU here (nothing run)
# or bad arguments.
#
# Environment: PYTHON (an interpreter with torch, torchvision, h5py; default: the first of
# python3, /opt/torch/.venv/bin/python3, /usr/bin/python3 that has them), MPIEXEC_FLAGS (more
# mpiexec options), GPUCHECK_SIMULATE=1 (test this script where there is no GPU: the "cuda"
# runs and the benchmarks run on the CPU with small shapes, and the checks are loosened; the
# test programs are a CPU bundle's, built over test/gpu/mock; one missing there, and PyTorch
# missing, are SKIP instead of FAIL),
# GPUCHECK_D_BUDGET / GPUCHECK_T_BUDGET (step d's budgets for bench_gpu and PyTorch, default 90
# and 35 s).
set -u
export LC_ALL=C

usage() { sed -n '/^#   test\/gpu\/run.sh RESULTS_DIR/,/^# RESULTS_DIR gets/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
results=
bundle=
budget=400
while [ $# -gt 0 ]; do
    case $1 in
    --bundle) [ $# -ge 2 ] || { usage >&2; exit 2; }; bundle=$2; shift 2 ;;
    --bundle=*) bundle=${1#--bundle=}; shift ;;
    --budget) [ $# -ge 2 ] || { usage >&2; exit 2; }; budget=$2; shift 2 ;;
    --budget=*) budget=${1#--budget=}; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *)
        [ -z "$results" ] || { echo "run.sh: more than one RESULTS_DIR ('$results', '$1')" >&2; exit 2; }
        results=$1; shift ;;
    esac
done
[ -n "$results" ] || { echo "run.sh: no RESULTS_DIR" >&2; usage >&2; exit 2; }
case $budget in '' | *[!0-9]*) echo "run.sh: --budget $budget: expected whole seconds" >&2; exit 2 ;; esac
if [ -n "$bundle" ] && [ ! -d "$bundle" ]; then echo "run.sh: --bundle $bundle: no such directory" >&2; exit 2; fi
mkdir -p "$results" || exit 2
results=$(cd "$results" && pwd)
[ -n "$bundle" ] && bundle=$(cd "$bundle" && pwd)
cd "$root" || exit 2

simulate=${GPUCHECK_SIMULATE:-0}
T0=$(date +%s)
deadline=$(( T0 + budget ))
reserve=15 # seconds kept for the report at the end
qt=${GPUCHECK_CMD_TIMEOUT:-60} # dsgd-run --version / --help: a singleton MPI_Init that hangs costs this, not the call
case $qt in '' | *[!0-9]*) echo "run.sh: GPUCHECK_CMD_TIMEOUT=$qt: expected whole seconds" >&2; exit 2 ;; esac
tmp=$(mktemp -d /tmp/dsgd-gpucheck.XXXXXX) || exit 2
trap 'rm -rf "$tmp"' EXIT

ENV_LOG=$results/env.log
CHECKS_LOG=$results/checks.log
RUNS_LOG=$results/runs.log
BENCH_LOG=$results/bench.log
SUMMARY=$results/summary.md
: > "$ENV_LOG"; : > "$CHECKS_LOG"; : > "$RUNS_LOG"; : > "$BENCH_LOG"
rm -f "$results/runs.tar.gz"

# ---- bookkeeping ----------------------------------------------------------------------------
S_NAME=(); S_STATUS=(); S_SECS=(); S_NOTE=(); S_LOG=()
GPU_NAME="?"; DRIVER="?"; CUDA_DRV="?"; BACKEND="?"; TORCH_INFO="?"; MPI_MODE="?"
BENCH_MD=""
now() { date +%s; }
elapsed() { echo $(( $(now) - T0 )); }

write_summary() {
    local i n_pass=0 n_fail=0 n_skip=0
    for i in "${!S_NAME[@]}"; do
        case ${S_STATUS[$i]} in PASS) n_pass=$((n_pass + 1)) ;; SKIP* | INFO) n_skip=$((n_skip + 1)) ;; *) n_fail=$((n_fail + 1)) ;; esac
    done
    {
        echo "# dsgd-run GPU check — $(date -u +'%Y-%m-%d %H:%M UTC')"
        echo
        [ "$simulate" = 1 ] && echo "**SIMULATED (GPUCHECK_SIMULATE=1): no GPU was used; device = cpu everywhere.**" && echo
        echo "| | |"
        echo "|---|---|"
        echo "| GPU | $GPU_NAME |"
        echo "| driver / CUDA (driver) | $DRIVER / $CUDA_DRV |"
        echo "| dsgd-run GPU backend | $BACKEND |"
        echo "| PyTorch | $TORCH_INFO |"
        echo "| binaries | ${bundle:-built here (make CUDA=1)} |"
        echo "| commit | $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?') |"
        echo "| mpiexec | $MPI_MODE |"
        echo "| result | **$n_pass passed, $n_fail failed, $n_skip skipped/info** in $(elapsed) s (budget $budget s) |"
        echo
        echo "## Checks"
        echo
        echo "| step | status | s | note | log |"
        echo "|---|---|---:|---|---|"
        for i in "${!S_NAME[@]}"; do
            echo "| ${S_NAME[$i]} | ${S_STATUS[$i]} | ${S_SECS[$i]} | ${S_NOTE[$i]//|//} | ${S_LOG[$i]} |"
        done
        if [ -n "$BENCH_MD" ]; then
            echo
            echo "## Throughput (step d), $GPU_NAME"
            echo
            echo "$BENCH_MD"
        fi
    } > "$SUMMARY.tmp" && mv "$SUMMARY.tmp" "$SUMMARY"
}

# record NAME STATUS SECONDS NOTE LOGFILE
record() {
    S_NAME+=("$1"); S_STATUS+=("$2"); S_SECS+=("$3"); S_NOTE+=("$4"); S_LOG+=("$(basename "$5")")
    printf '[%4d s] %-8s %-34s %5s s  %s\n' "$(elapsed)" "$2" "$1" "$3" "$4"
    write_summary
}

# The line that says how a step ended: a Check summary, an ok/FAIL line, or the last line.
step_note() {
    local f=$1 l
    if grep -qE '^(BENCH|PLAN) ' "$f"; then # a benchmark: count its rows (PLAN: announced; a BENCH line each when done)
        local nb np
        nb=$(grep -c '^BENCH ' "$f") np=$(grep -c '^PLAN ' "$f")
        [ "$np" -ge "$nb" ] || np=$nb
        printf '%s rows: %s ok, %s not built, %s failed, %s NOT RUN (budget), %s NOT RUN (cut)' "$np" \
            "$(grep -c '^BENCH .*status=ok' "$f")" "$(grep -c '^BENCH .*status=unsupported' "$f")" \
            "$(grep -c '^BENCH .*status=error' "$f")" "$(grep -c '^BENCH .*status=notrun' "$f")" $(( np - nb ))
        return
    fi
    l=$(grep -E '^[0-9]+%: Checks|^(ok|FAIL)[: ]|skipped|^done:' "$f" | tail -n 1)
    [ -n "$l" ] || l=$(grep -v '^[[:space:]]*$' "$f" | tail -n 1)
    if grep -qE '^[0-9]+%: Checks' <<< "$l"; then # add the first failure of a Check run
        local first
        first=$(grep -E ':[EF]:' "$f" | head -n 1 | sed 's/^[^:]*:[0-9]*:[EF]:[^:]*:[^:]*:[0-9]*: //')
        [ -n "$first" ] && l="$l — $first"
    fi
    printf '%s' "${l:0:240}"
}

# run_step NAME LOG LIMIT CMD... — run CMD under timeout (LIMIT, cut to the budget left), its
# output appended to LOG; records PASS / FAIL (rc) / TIMEOUT / SKIP; returns CMD's status.
LAST_NOTE=""
run_step() {
    local name=$1 log=$2 limit=$3
    shift 3
    rm -f "$tmp/step.out"
    local left=$(( deadline - reserve - $(now) ))
    [ "$limit" -le "$left" ] || limit=$left
    if [ "$limit" -lt 10 ]; then
        record "$name" "NOT RUN" 0 "time budget spent (--budget $budget)" "$log"
        return 125
    fi
    printf '[%4d s] %-8s %-34s up to %d s\n' "$(elapsed)" "run" "$name" "$limit"
    {
        echo
        echo "==== $name  ($(date -u +%H:%M:%S), timeout $limit s)"
        printf '$'; printf ' %q' "$@"; echo
    } >> "$log"
    local t rc out=$tmp/step.out
    t=$(now)
    # In the background, so that a SIGTERM / SIGINT to this script runs its trap (on_signal) at
    # once instead of after the step.
    timeout -k 10 "$limit" "$@" > "$out" 2>&1 &
    CUR_PID=$! CUR_NAME=$name CUR_LOG=$log CUR_T=$t
    wait "$CUR_PID"
    rc=$?
    CUR_PID=
    cat "$out" >> "$log"
    local secs=$(( $(now) - t )) st
    LAST_NOTE=$(step_note "$out")
    case $rc in
    0) st=PASS ;;
    124 | 137) st=TIMEOUT; LAST_NOTE="killed after $limit s; $LAST_NOTE" ;;
    *) st="FAIL ($rc)" ;;
    esac
    echo "==== $name: $st in $secs s" >> "$log"
    record "$name" "$st" "$secs" "$LAST_NOTE" "$log"
    return $rc
}

finish() {
    [ -z "${FINISHING:-}" ] || return 0
    FINISHING=1
    trap '' TERM INT
    if [ -d "$tmp/runs" ] && [ -n "$(ls -A "$tmp/runs" 2>/dev/null)" ]; then
        tar -C "$tmp" -czf "$results/runs.tar.gz" runs 2>> "$RUNS_LOG"
    fi
    write_summary
    echo
    cat "$SUMMARY"
    local i bad=0
    for i in "${!S_STATUS[@]}"; do
        case ${S_STATUS[$i]} in PASS | SKIP* | INFO) ;; *) bad=1 ;; esac
    done
    exit $bad
}

# The call cut from outside (its time limit, ^C): stop the running step, record it, and print what
# there is (finish) instead of dying with nothing on stdout.
CUR_PID=
on_signal() {
    trap '' TERM INT
    echo "run.sh: SIG$1 after $(elapsed) s: stopping" >&2
    if [ -n "$CUR_PID" ]; then
        # timeout passes SIGTERM on to the step's process group (mpiexec passes it on to the
        # ranks, which stop at their next agreement point); after 5 s the group gets SIGKILL.
        kill -TERM "$CUR_PID" 2> /dev/null
        local i
        for i in $(seq 1 25); do kill -0 "$CUR_PID" 2> /dev/null || break; sleep 0.2; done
        kill -KILL -- "-$CUR_PID" 2> /dev/null || kill -KILL "$CUR_PID" 2> /dev/null
        [ -f "$tmp/step.out" ] && cat "$tmp/step.out" >> "$CUR_LOG"
        echo "==== $CUR_NAME: CUT by SIG$1" >> "$CUR_LOG"
        record "$CUR_NAME" "CUT" $(( $(now) - CUR_T )) "SIG$1 to run.sh: stopped; $(step_note "$tmp/step.out" 2> /dev/null)" "$CUR_LOG"
        CUR_PID=
    fi
    record "run.sh stopped" "CUT" 0 "SIG$1 after $(elapsed) s: the steps after this were not run" "$ENV_LOG"
    finish
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

# ---- a. the machine -----------------------------------------------------------------------------
echo "run.sh: results in $results; budget $budget s"
for d in /usr/local/nvidia/bin /usr/local/cuda/bin; do
    [ -d "$d" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH=$PATH:$d ;; esac
done
export PATH
{
    echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host:      $(uname -a)"
    echo "os:        $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}")"
    echo "glibc:     $(getconf GNU_LIBC_VERSION 2>&1)"
    echo "cpus:      $(nproc)"
    echo "user:      uid $(id -u)"
    echo "LD_LIBRARY_PATH (given): ${LD_LIBRARY_PATH:-}"
    echo
} >> "$ENV_LOG"

have_gpu=0
if command -v nvidia-smi > /dev/null 2>&1; then
    { echo "==== nvidia-smi -L"; timeout 30 nvidia-smi -L 2>&1; echo; echo "==== nvidia-smi"; timeout 30 nvidia-smi 2>&1; } >> "$ENV_LOG"
    if timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then
        have_gpu=1
        GPU_NAME=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
        DRIVER=$(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
        CUDA_DRV=$(timeout 30 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
    fi
else
    echo "nvidia-smi: not found (PATH=$PATH)" >> "$ENV_LOG"
fi
if [ $have_gpu = 0 ]; then
    if [ "$simulate" = 1 ]; then
        GPU_NAME="none (simulated)"
        record "a. GPU" INFO 0 "no GPU: GPUCHECK_SIMULATE=1, everything on the CPU" "$ENV_LOG"
    else
        why="no NVIDIA GPU visible: $(command -v nvidia-smi > /dev/null 2>&1 && timeout 30 nvidia-smi -L 2>&1 | head -n 1 || echo 'nvidia-smi not found')"
        echo "run.sh: $why — nothing to check here (run this on a machine with a GPU)" >&2
        record "a. GPU" "FAIL" 0 "$why" "$ENV_LOG"
        echo
        cat "$SUMMARY"
        exit 2
    fi
else
    record "a. GPU" PASS 0 "$GPU_NAME, driver $DRIVER, CUDA $CUDA_DRV" "$ENV_LOG"
fi

# Python: one with torch + h5py for the benchmark and the run-file checks.
# One import of torch (cold on a fresh machine: the slowest part of step a), which also says
# what PyTorch sees; PY_IMG (numpy, Pillow) makes step f's JPEG tree, also without torch.
PY=""
PY_H5=""
PY_IMG=""
for c in ${PYTHON:-} python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    command -v "$c" > /dev/null 2>&1 || continue
    if info=$(timeout 120 "$c" -c 'import torch, torchvision, h5py, numpy, PIL.Image; c = torch.cuda.is_available(); print(f"{torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version() if c else None}, GPU visible: {c}")' 2> /dev/null); then
        PY=$c PY_H5=$c PY_IMG=$c
        TORCH_INFO=$(tail -n 1 <<< "$info")
        break
    fi
    if [ -z "$PY_H5" ] && timeout 60 "$c" -c 'import h5py, numpy' > /dev/null 2>&1; then PY_H5=$c; fi
    if [ -z "$PY_IMG" ] && timeout 60 "$c" -c 'import numpy, PIL.Image' > /dev/null 2>&1; then PY_IMG=$c; fi
done
{
    echo
    echo "python (torch): ${PY:-none}"
    echo "python (h5py):  ${PY_H5:-none}"
    echo "python (Pillow): ${PY_IMG:-none}"
    echo "torch:          $TORCH_INFO"
    echo "nvcc:           $(nvcc --version 2>/dev/null | tail -n 1 || echo none)"
} >> "$ENV_LOG"

# ---- binaries, libraries, data ----------------------------------------------------------------
BENV=(env)
MPIEXEC=(mpiexec)
if [ -n "$bundle" ]; then
    if [ -f "$bundle/payload.tar.xz" ]; then
        B=$tmp/bundle
        mkdir -p "$B"
        t=$(now)
        if command -v xz > /dev/null 2>&1 && tar -C "$B" -xJf "$bundle/payload.tar.xz" 2>> "$ENV_LOG"; then
            :
        elif [ -n "$PY_H5" ] && "$PY_H5" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$bundle/payload.tar.xz" "$B" 2>> "$ENV_LOG"; then
            :
        else
            record "a. unpack bundle" "FAIL" $(( $(now) - t )) "cannot unpack $bundle/payload.tar.xz (no xz, no python lzma)" "$ENV_LOG"
            finish
        fi
        echo "unpacked $bundle/payload.tar.xz to $B in $(( $(now) - t )) s" >> "$ENV_LOG"
    else
        B=$bundle
    fi
    BIN=$B/bin/dsgd-run
    TDIR=$B/test
    BENCH=$B/test/bench_gpu
    DATA=$bundle/data
    CFG=$DATA/fmnist_short.cfg
    [ -f "$CFG" ] || CFG=$here/fmnist_short.cfg
    MPIEXEC=("$B/bin/mpiexec.hydra" -launcher fork)
    [ -f "$bundle/MANIFEST.txt" ] && { echo; echo "==== bundle MANIFEST.txt"; head -n 12 "$bundle/MANIFEST.txt"; } >> "$ENV_LOG"

    # The machine's CUDA libraries: pip's nvidia-* packages (what PyTorch uses), then the toolkit.
    cuda_dirs=""
    if [ -n "$PY_H5" ]; then
        cuda_dirs=$("$PY_H5" - 2>> "$ENV_LOG" << 'PYEOF'
import glob, os
dirs = []
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
for r in roots:
    for pat in ("libcudnn.so*", "libcublas.so*", "libcublasLt.so*", "libcudart.so*", "libnvrtc.so*", "libnvJitLink.so*",
                "libnccl.so*"):
        for f in sorted(glob.glob(os.path.join(r, "**", pat), recursive=True)):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
PYEOF
        )
    fi
    LDP=$B/lib${cuda_dirs:+:$cuda_dirs}
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && LDP=$LDP:$d; done
    LDP=$LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

    bins=("$BIN" "$B/bin/mpiexec.hydra" "$B/bin/hydra_pmi_proxy")
    for f in "$TDIR"/*; do [ -f "$f" ] && bins+=("$f"); done
    lib_missing() { # the libraries the loader cannot find (or find too old) for "$@", with LD_LIBRARY_PATH=$1
        local ldp=$1 f
        shift
        for f in "$@"; do
            [ -f "$f" ] || continue
            if command -v ldd > /dev/null 2>&1; then
                env LD_LIBRARY_PATH="$ldp" ldd "$f" 2>&1
            else
                env LD_LIBRARY_PATH="$ldp" LD_TRACE_LOADED_OBJECTS=1 "$f" 2>&1
            fi | grep 'not found' | sed "s|^|$(basename "$f"): |"
        done
    }
    miss=$(lib_missing "$LDP" "${bins[@]}")
    fb_note=""
    if [ -n "$miss" ]; then
        # The machine's libstdc++ or libgomp missing or older than the build machine's: the
        # bundle's own (only these: they would replace PyTorch's and cuDNN's too).
        { echo; echo "==== missing with the machine's libstdc++ / libgomp:"; echo "$miss"; } >> "$ENV_LOG"
        if grep -qE 'libstdc\+\+|GLIBCXX|CXXABI' <<< "$miss" && [ -d "$B/lib/fallback/stdc++" ]; then
            LDP=$LDP:$B/lib/fallback/stdc++
            fb_note="libstdc++"
        fi
        if grep -qE 'libgomp|GOMP_|OMP_' <<< "$miss" && [ -d "$B/lib/fallback/gomp" ]; then
            LDP=$LDP:$B/lib/fallback/gomp
            fb_note="${fb_note:+$fb_note and }libgomp"
        fi
        [ -n "$fb_note" ] && fb_note=" (with the bundle's $fb_note)"
        miss=$(lib_missing "$LDP" "${bins[@]}")
    fi
    {
        echo
        echo "LD_LIBRARY_PATH for the binaries: $LDP"
        for f in "${bins[@]}"; do
            [ -f "$f" ] || continue
            echo "==== ldd $f"
            env LD_LIBRARY_PATH="$LDP" ldd "$f" 2>&1
        done
    } >> "$ENV_LOG"
    if [ -n "$(cat "$bundle/requires.txt" 2>/dev/null)" ]; then
        need=$(sed -n 's/^glibc_need=GLIBC_2\.\([0-9]*\)$/\1/p' "$bundle/requires.txt")
        have=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed -n 's/^glibc 2\.\([0-9]*\).*/\1/p')
        if [ -n "$need" ] && [ -n "$have" ] && [ "$have" -lt "$need" ]; then
            miss="${miss:+$miss; }glibc 2.$have here, the bundle needs 2.$need (build it on an older system)"
        fi
    fi
    if [ -n "$miss" ]; then
        record "a. libraries" "FAIL" 0 "$(echo "$miss" | sort -u | head -n 5 | tr '\n' ';')" "$ENV_LOG"
    else
        record "a. libraries" PASS 0 "every library of the bundle found$fb_note" "$ENV_LOG"
    fi
    # UCX transports and hwloc plugins from the bundle only, never the machine's own (another
    # version's modules would be loaded into ours).
    mkdir -p "$tmp/no-hwloc-plugins"
    BENV=(env "LD_LIBRARY_PATH=$LDP" "PATH=$B/bin:$PATH" "UCX_MODULE_DIR=$B/lib/ucx" "UCX_WARN_UNUSED_ENV_VARS=n"
          "HWLOC_PLUGINS_PATH=$tmp/no-hwloc-plugins")
else
    BIN=./dsgd-run
    TDIR=build/test/gpu
    BENCH=build/bench_gpu
    DATA=$tmp/data
    CFG=$here/fmnist_short.cfg
    if [ "$simulate" = 1 ]; then
        run_step "a. build (make)" "$CHECKS_LOG" 600 make -j"$(nproc)" dsgd-run
    else
        run_step "a. build (make CUDA=1)" "$CHECKS_LOG" 600 make -j"$(nproc)" CUDA=1 dsgd-run gpu-tests
    fi
    run_step "a. data (make_data.sh)" "$RUNS_LOG" 120 "$here/make_data.sh" "$DATA" 10000 2000
fi
# shellcheck disable=SC2206
MPIEXEC+=(${MPIEXEC_FLAGS:-})
BENV+=("CK_DEFAULT_TIMEOUT=300")

# dsgd-run --version, once (an MPI singleton: under a timeout, as every dsgd-run here).
VERSION_OUT=""
if [ -x "$BIN" ]; then
    t=$(now)
    # under mpiexec: dsgd-run started by hand answers --version without MPI_Init, so without asking
    # whether the MPI is CUDA-aware (step g reads that line)
    VERSION_OUT=$(timeout -k 5 "$qt" "${BENV[@]}" "${MPIEXEC[@]}" -n 1 "$BIN" --version 2>&1)
    rc=$?
    { echo; echo "==== dsgd-run --version (exit $rc)"; echo "$VERSION_OUT"; } >> "$ENV_LOG"
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        record "a. dsgd-run --version" "TIMEOUT" $(( $(now) - t )) "killed after $qt s (MPI_Init of a singleton hangs?)" "$ENV_LOG"
    elif [ $rc != 0 ]; then
        record "a. dsgd-run --version" "FAIL ($rc)" $(( $(now) - t )) "$(echo "$VERSION_OUT" | tail -n 1 | cut -c1-200)" "$ENV_LOG"
    fi
    BACKEND=$(echo "$VERSION_OUT" | grep -iE 'cuda|gpu' | head -n 1)
    [ -n "$BACKEND" ] || BACKEND="none in --version: $(echo "$VERSION_OUT" | grep -i backend | head -n 1)"
    BACKEND=$(echo "$BACKEND" | sed 's/^[[:space:]]*//')
fi

# MPI smoke test: 2 ranks, the linear model, a few steps on the CPU. If the launcher or MPI_Init
# fails, try the usual remedies for a bare machine in turn and keep the first that works.
DSETS=(--set "data.train_images=$DATA/train-images.gz" --set "data.train_labels=$DATA/train-labels.gz"
       --set "data.val_images=$DATA/val-images.gz" --set "data.val_labels=$DATA/val-labels.gz" --set overwrite=true)
mkdir -p "$tmp/runs"
smoke_ok=0
if [ -x "$BIN" ]; then
    variants=("" "-localhost 127.0.0.1" "-localhost 127.0.0.1 UCX_TLS=self,sm" "-localhost 127.0.0.1 MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp")
    [ -n "$bundle" ] || variants=("")
    t=$(now)
    for v in "${variants[@]}"; do
        flags=(); envs=()
        for w in $v; do case $w in *=*) envs+=("$w") ;; *) flags+=("$w") ;; esac; done
        echo "==== MPI smoke test: mpiexec ${flags[*]} ${envs[*]}" >> "$RUNS_LOG"
        if timeout -k 5 60 "${BENV[@]}" ${envs[@]+"${envs[@]}"} "${MPIEXEC[@]}" ${flags[@]+"${flags[@]}"} -n 2 "$BIN" \
            "${DSETS[@]}" --set p=2 --set b=32 --set iterations=30 --set log_every=10 --set eval.every=30 \
            --set device=cpu --set "output=$tmp/smoke.h5" configs/linear.cfg >> "$RUNS_LOG" 2>&1; then
            smoke_ok=1
            MPIEXEC+=(${flags[@]+"${flags[@]}"})
            [ ${#envs[@]} -gt 0 ] && BENV+=("${envs[@]}")
            MPI_MODE="${MPIEXEC[*]##*/} ${envs[*]:-}"
            break
        fi
        [ $(( $(now) - t )) -lt 150 ] || break
    done
    if [ $smoke_ok = 1 ]; then
        record "a. MPI smoke test (2 ranks, cpu)" PASS $(( $(now) - t )) "mpiexec ${v:-(no extra options)}" "$RUNS_LOG"
    else
        record "a. MPI smoke test (2 ranks, cpu)" "FAIL" $(( $(now) - t )) "every mpiexec variant failed; see runs.log" "$RUNS_LOG"
    fi
    rm -f "$tmp/smoke.h5"
else
    record "a. dsgd-run" "FAIL" 0 "no $BIN" "$ENV_LOG"
fi

# ---- tests ---------------------------------------------------------------------------------------
# Change the status (and note) of the last recorded step.
amend_last() {
    local i=$(( ${#S_STATUS[@]} - 1 ))
    S_STATUS[i]=$1
    S_NOTE[i]="$2 ${S_NOTE[i]}"
    echo "           -> $1 $2"
    write_summary
}
gpu_test() { # NAME BINARY LIMIT [VAR=VALUE...]
    local name=$1 bin=$2 limit=$3 rc
    shift 3
    if [ ! -x "$bin" ]; then
        if [ "$simulate" = 1 ]; then # a CPU bundle has the test programs over test/gpu/mock only where make check built them
            record "$name" "SKIP" 0 "simulated: no $(basename "$bin") in this CPU bundle (bundle.sh --cpu after make check packs the ones over test/gpu/mock)" "$CHECKS_LOG"
        else
            record "$name" "FAIL" 0 "not built: no $bin" "$CHECKS_LOG"
        fi
        return
    fi
    run_step "$name" "$CHECKS_LOG" "$limit" "${BENV[@]}" "$@" "$bin"
    rc=$?
    # A test that skips itself on a machine with a GPU has not tested anything.
    [ -f "$tmp/step.out" ] || return # not run (time budget)
    if [ $rc = 0 ] && [ $have_gpu = 1 ] && grep -qiE 'no GPU.*skip' "$tmp/step.out"; then
        amend_last "FAIL" "(skipped itself on a GPU machine)"
    fi
    # No rerun on failure: every test program already runs in one process (CK_NOFORK,
    # testgpu.h's run_suite_nofork, which CK_FORK cannot override), so a rerun would repeat it.
}
# On the GPU machine a test that cannot start CUDA fails instead of skipping; the chosen
# convolution algorithms go to the logs; test_gpu_model adds ResNet-18 at 224x224. Tests and
# comparison runs choose convolution algorithms by cuDNN's heuristics, without timing
# (DSGD_CUDNN_ALGO=heuristic: the same in every process, docs/gpu.md); the throughput steps time
# them (DSGD_CUDNN_ALGO=find, the default).
[ "$simulate" = 1 ] || BENV+=("DSGD_REQUIRE_GPU=1" "DSGD_GPU_VERBOSE=1" "DSGD_GPU_TEST_FULL=1")
BENV+=("DSGD_CUDNN_ALGO=heuristic")
gpu_test "b. test_gpu_ops" "$TDIR/test_gpu_ops" 120

# ---- c. one short training run (the others in e.) ---------------------------------------------------
dev=cuda
extra=()
max_top1=0.35
if [ "$simulate" = 1 ]; then
    dev=cpu
    extra=(--set iterations=40 --set eval.every=20)
    max_top1=0.9
fi
if [ -x "$BIN" ] && timeout -k 5 "$qt" "${BENV[@]}" "$BIN" --help 2>/dev/null | grep -qE '^  precision[[:space:]]'; then
    cuda_prec=(--set precision=fp32)
else
    cuda_prec=()
fi
# train NAME NP DEVICE OUT.h5 [more --set]
declare -A RUN_OK=()
train() {
    local name=$1 np=$2 device=$3 out=$4
    shift 4
    local -a dset=(--set "device=$device")
    [ "$device" = cuda ] && dset+=(${cuda_prec[@]+"${cuda_prec[@]}"})
    if [ ! -x "$BIN" ]; then record "$name" "FAIL" 0 "no $BIN" "$RUNS_LOG"; return; fi
    if run_step "$name" "$RUNS_LOG" 180 "${BENV[@]}" "${MPIEXEC[@]}" -n "$np" "$BIN" "${DSETS[@]}" \
        --set "p=$np" --set "output=$out" "${dset[@]}" ${extra[@]+"${extra[@]}"} "$@" "$CFG"; then
        RUN_OK[$out]=1
    fi
}
check_final() { # NAME RUN.h5
    if [ -z "$PY_H5" ]; then record "$1" "FAIL" 0 "no python3 with h5py" "$RUNS_LOG"; return; fi
    if [ -z "${RUN_OK[$2]:-}" ]; then record "$1" "SKIP" 0 "its run failed" "$RUNS_LOG"; return; fi
    run_step "$1" "$RUNS_LOG" 60 "$PY_H5" "$here/check_runs.py" final "$2" --max-top1 "$max_top1"
}
R=$tmp/runs
train "c. run cuda p=1" 1 "$dev" "$R/cuda_p1.h5"
check_final "c. check cuda p=1: top-1 < $max_top1" "$R/cuda_p1.h5"

# ---- d. throughput (the number most needed: right after one run has shown training works) ------------
# The rows in the order the first GPU most needs them, each program under a budget of its own
# (test/gpu/README.md, "Time budget", has the estimate per row): bench_gpu starts a row only if
# it is predicted to end within D_BUDGET s of the program's start, PyTorch within T_BUDGET s; a
# row left out says NOT RUN (budget), a row not reached when the step's limit (budget + slack)
# ends the program NOT RUN (cut). The rows left out first are the last in these lists.
#   dsgd-run (d_rows): issue 23's goal rows first, fp32 and bf16 at b = 32 and 256 (against
#   PyTorch's fp32 and bf16 channels_last); then each switch of the step (docs/gpu.md,
#   "Switches") at bf16, b = 32 and 256, against the bf16 base row, by the gain expected toward
#   the goal: NHWC (N12: DSGD_GPU_LAYOUT=nhwc), with BN+ReLU fused (nhwcbn: DSGD_GPU_BNRELU=fused),
#   with each block's BN+add+ReLU fused too (nhwcadd: fused_add), the step as a CUDA graph (graph:
#   DSGD_GPU_GRAPH=1, N13), one host synchronisation per step (sync1: DSGD_GPU_SYNC=step, N10), the
#   bf16 casts in one launch (cast1: DSGD_GPU_CASTS=one, N16), a one-rank NCCL all-reduce of the
#   gradient after the backward pass (nccl) and per gradient group during it (ncclov:
#   DSGD_NCCL_OVERLAP=1, N14); last, the least needed: deterministic algorithms (det:
#   DSGD_CUDNN_DETERMINISTIC=1, N11), tf32 (no goal), and sync1 + cast1 together (all).
#   PyTorch: fp32 and bf16 channels_last (the goals), then bf16 NCHW (dsgd-run's base layout), tf32.
# Each row: 2 warm-up steps (kernel loading, cudnn.benchmark's search in PyTorch; the graph row's
# capture), then 3 timings of 5 steps, stopping once 4 s of timings are done (after one at least).
d_rows() { # B1 B2: bench_gpu's --rows
    local r="fp32:$1,fp32:$2,bf16:$1,bf16:$2" v
    for v in nhwc nhwcbn nhwcadd graph sync1 cast1 nccl ncclov det; do r+=",bf16:$1:$v,bf16:$2:$v"; done
    echo "$r,tf32:$1,tf32:$2,bf16:$1:all,bf16:$2:all"
}
t_rows() { echo "fp32:$1,fp32:$2,bf16:$1:cl,bf16:$2:cl,bf16:$1,bf16:$2,tf32:$1,tf32:$2"; }
D_BUDGET=${GPUCHECK_D_BUDGET:-90} # bench_gpu's --budget (s); its step's limit: + 20 s
T_BUDGET=${GPUCHECK_T_BUDGET:-35} # bench_torch_gpu.py's --budget (s); its step's limit: + 15 s
case $D_BUDGET$T_BUDGET in *[!0-9]*) echo "run.sh: GPUCHECK_D_BUDGET / GPUCHECK_T_BUDGET: expected whole seconds" >&2; exit 2 ;; esac
if [ "$simulate" = 1 ]; then
    # The CPU computes fp32 only: the base fp32 rows and the switch rows at fp32 (the switches
    # do nothing on the CPU; the rows test the order, the budget and the table).
    SHAPE=(--width 8 --stem cifar --input 1x28x28 --classes 10 --reps 3 --steps 2 --warmup 1 --max-seconds 3)
    DROWS=$(d_rows 8 16 | tr ',' '\n' | grep -v -E '^(bf16|tf32):[0-9]+$' | sed 's/^bf16:/fp32:/' | paste -sd, -)
    TROWS=$(t_rows 8 16)
    DEVARG=(--device cpu)
else
    SHAPE=(--width 64 --stem imagenet --input 3x224x224 --classes 1000 --reps 3 --steps 5 --warmup 2 --max-seconds 4)
    DROWS=$(d_rows 32 256)
    TROWS=$(t_rows 32 256)
    DEVARG=()
fi
# budget_for WANTED SLACK: WANTED, or less where the call's budget has less left (>= 5)
budget_for() {
    local left=$(( deadline - reserve - $(now) - $2 ))
    [ "$left" -lt "$1" ] || left=$1
    [ "$left" -ge 5 ] || left=5
    echo "$left"
}
if [ -x "$BENCH" ]; then
    db=$(budget_for "$D_BUDGET" 20)
    run_step "d. bench_gpu (dsgd-run)" "$BENCH_LOG" $(( db + 20 )) "${BENV[@]}" DSGD_CUDNN_ALGO=find "$BENCH" "${SHAPE[@]}" \
        --rows "$DROWS" --budget "$db" ${DEVARG[@]+"${DEVARG[@]}"}
else
    record "d. bench_gpu (dsgd-run)" "FAIL" 0 "not built: no $BENCH" "$BENCH_LOG"
fi
if [ -n "$PY" ]; then
    tb=$(budget_for "$T_BUDGET" 15)
    run_step "d. bench_torch_gpu.py (PyTorch)" "$BENCH_LOG" $(( tb + 15 )) env PYTHONUNBUFFERED=1 "$PY" "$root/tools/bench_torch_gpu.py" \
        "${SHAPE[@]}" --rows "$TROWS" --budget "$tb" ${DEVARG[@]+"${DEVARG[@]}"}
elif [ "$simulate" = 1 ]; then
    record "d. bench_torch_gpu.py (PyTorch)" "SKIP" 0 "simulated: no python3 with torch, torchvision, h5py here" "$BENCH_LOG"
else
    record "d. bench_torch_gpu.py (PyTorch)" "FAIL" 0 "no python3 with torch, torchvision, h5py" "$BENCH_LOG"
fi

# The table, into summary.md now (the optional steps below may run out of time).
py_any=${PY_H5:-$(command -v python3 || true)}
if [ -n "$py_any" ] && grep -q '^BENCH ' "$BENCH_LOG"; then
    BENCH_MD=$("$py_any" "$here/report.py" "$BENCH_LOG" 2>&1)
    BACKEND_B=$(sed -n 's/^INFO impl=dsgd-run .*backend=\([^ ]*\).*/\1/p' "$BENCH_LOG" | head -n 1 | tr '_' ' ')
    [ -n "$BACKEND_B" ] && BACKEND=$BACKEND_B
else
    BENCH_MD="No throughput table: $( [ -n "$py_any" ] && echo 'no BENCH lines in bench.log' || echo 'no python3')."
fi
write_summary
# ... and to stdout now: whatever happens to the rest of the call, the table is out.
printf '\n## Throughput (step d), %s\n\n%s\n\n' "$GPU_NAME" "$BENCH_MD"

# ---- e. NCCL (docs/gpu.md, "Communication"): the only checks of the NCCL wait loop, before the
# longer tests. On a GPU machine NCCL must load (DSGD_REQUIRE_NCCL=1: fails instead of skipping).
# compare_runs NAME A.h5 B.h5: the first 10 losses.
compare_runs() {
    if [ -n "${RUN_OK[$2]:-}" ] && [ -n "${RUN_OK[$3]:-}" ] && [ -n "$PY_H5" ]; then
        run_step "$1" "$RUNS_LOG" 60 "$PY_H5" "$here/check_runs.py" compare "$2" "$3" --steps 10 --rtol 1e-3
    else
        record "$1" "SKIP" 0 "a run failed (or no h5py)" "$RUNS_LOG"
    fi
}
if [ $have_gpu = 1 ]; then
    gpu_test "e. test_gpu_comm" "$TDIR/test_gpu_comm" 120 DSGD_REQUIRE_NCCL=1
else
    gpu_test "e. test_gpu_comm" "$TDIR/test_gpu_comm" 120
fi
if [ "$simulate" = 1 ]; then
    record "e. comm = nccl" "SKIP" 0 "simulated: comm = nccl needs device = cuda" "$RUNS_LOG"
else
    # p = 1: a one-rank NCCL communicator, its all-reduce run every step (changing nothing):
    # the first 10 losses as the MPI run's (the same arithmetic; cuDNN may pick other algorithms).
    train "e. run cuda p=1 comm=nccl (20 steps)" 1 cuda "$R/nccl_p1.h5" --set comm=nccl --set iterations=20 --set eval.every=20
    compare_runs "e. loss curves nccl vs mpi, p=1" "$R/nccl_p1.h5" "$R/cuda_p1.h5"
fi

# ---- f. a short JPEG run (data.format = "jpeg", docs/data.md): a tiny ImageFolder tree made from
# the truncated Fashion-MNIST (make_jpeg_tree.py), packed with dsgd-run --pack, trained with the
# decode threads feeding the GPU (the next minibatch staged during each step) -------------------------
JT=$tmp/jpeg
jextra=(--set "data.dir=\"$JT/pack\"")
[ "$simulate" = 1 ] && jextra+=(--set iterations=30 --set eval.every=15 --set threads=1 --set data.threads=1)
[ "$dev" = cuda ] && jextra+=(${cuda_prec[@]+"${cuda_prec[@]}"})
if [ -z "$PY_IMG" ]; then
    record "f. jpeg: tree + pack" "FAIL" 0 "no python3 with numpy and Pillow" "$RUNS_LOG"
elif [ ! -x "$BIN" ]; then
    record "f. jpeg: tree + pack" "FAIL" 0 "no $BIN" "$RUNS_LOG"
else
    rm -rf "$JT"
    if run_step "f. jpeg: tree + pack" "$RUNS_LOG" 120 bash -c '"$1" "$2" "$3" "$4/tree" 2000 500 && shift 4 && "$@"' _ \
        "$PY_IMG" "$here/make_jpeg_tree.py" "$DATA" "$JT" "${BENV[@]}" "$BIN" --pack "$JT/tree" "$JT/pack" --shard-images 1000; then
        if run_step "f. run jpeg $dev p=1" "$RUNS_LOG" 180 "${BENV[@]}" "${MPIEXEC[@]}" -n 1 "$BIN" --set p=1 \
            --set "output=$R/jpeg_p1.h5" --set overwrite=true --set "device=$dev" "${jextra[@]}" "$here/jpeg_short.cfg"; then
            RUN_OK[$R/jpeg_p1.h5]=1
        fi
        check_final "f. check jpeg $dev p=1: top-1 < $max_top1" "$R/jpeg_p1.h5"
    fi
fi

# ---- g. the optional checks, as time allows: the other tests, then more runs -------------------------
# Simulated with a CPU bundle's test programs over test/gpu/mock (bundle.sh --cpu: then
# test/dsgd-run-mock is there too): they run as on a GPU machine, test_gpu_overlap's dsgd-run
# case with dsgd-run over the mock. Without them a simulated test_gpu_device compares the CPU
# model with itself (DSGD_TEST_GPU_AS_CPU=1) if it is there at all.
obin=$BIN
[ "$simulate" = 1 ] && [ -x "$TDIR/dsgd-run-mock" ] && obin=$TDIR/dsgd-run-mock
gpu_test "g. test_gpu_model" "$TDIR/test_gpu_model" 180
if [ "$simulate" = 1 ] && [ ! -x "$TDIR/dsgd-run-mock" ]; then
    gpu_test "g. test_gpu_device" "$TDIR/test_gpu_device" 120 DSGD_TEST_GPU_AS_CPU=1
else
    gpu_test "g. test_gpu_device" "$TDIR/test_gpu_device" 120
fi
# Its MPI cases re-run the test under this script's mpiexec; its dsgd-run case needs the full
# Fashion-MNIST under /usr/share/datasets (else it says skipped).
gpu_test "g. test_gpu_overlap" "$TDIR/test_gpu_overlap" 180 "DSGD_TEST_MPIEXEC=${MPIEXEC[*]}" "DSGD_TEST_BIN=$obin"

train "g. run cpu p=1" 1 cpu "$R/cpu_p1.h5"
check_final "g. check cpu p=1: top-1 < $max_top1" "$R/cpu_p1.h5"
if [ -n "${RUN_OK[$R/cuda_p1.h5]:-}" ] && [ -n "${RUN_OK[$R/cpu_p1.h5]:-}" ] && [ -n "$PY_H5" ]; then
    run_step "g. loss curves cuda vs cpu (10 steps)" "$RUNS_LOG" 60 "$PY_H5" "$here/check_runs.py" compare \
        "$R/cuda_p1.h5" "$R/cpu_p1.h5" --steps 10 --rtol 1e-3
else
    record "g. loss curves cuda vs cpu (10 steps)" "SKIP" 0 "a run failed (or no h5py)" "$RUNS_LOG"
fi
train "g. run cuda p=2 (one GPU)" 2 "$dev" "$R/cuda_p2.h5"
check_final "g. check cuda p=2: top-1 < $max_top1" "$R/cuda_p2.h5"

# comm = "nccl" at p = 2 (p = 1 ran in e.).
if [ "$simulate" != 1 ]; then
    ngpu=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && ngpu=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    if [ "${ngpu:-0}" -ge 2 ]; then
        train "g. run cuda p=2 comm=nccl" 2 cuda "$R/nccl_p2.h5" --set comm=nccl
        check_final "g. check cuda p=2 comm=nccl: top-1 < $max_top1" "$R/nccl_p2.h5"
        compare_runs "g. loss curves nccl vs mpi, p=2" "$R/nccl_p2.h5" "$R/cuda_p2.h5"
    elif [ -x "$BIN" ]; then
        # Two workers on one GPU: NCCL refuses them ("Duplicate GPU detected"), so dsgd-run stops
        # every rank before training: exit 2, a message naming key 'comm', no run file.
        run_step "g. cuda p=2 comm=nccl on one GPU: refused" "$RUNS_LOG" 120 bash -c '
            out=$1; shift
            "$@" > "$out.log" 2>&1; rc=$?
            cat "$out.log"
            if [ $rc -ne 2 ]; then echo "FAIL: exit status $rc, expected 2 (refused before training)"; exit 1; fi
            if ! grep -q "key '"'"'comm'"'"'.*share GPU" "$out.log"; then echo "FAIL: no message naming key '"'"'comm'"'"' and the shared GPU"; exit 1; fi
            if [ -e "$out" ]; then echo "FAIL: a run file was created"; exit 1; fi
            echo "ok: refused, exit 2: $(grep -m1 "key '"'"'comm'"'"'" "$out.log" | cut -c1-160)"
        ' _ "$R/nccl_p2_refused.h5" "${BENV[@]}" "${MPIEXEC[@]}" -n 2 "$BIN" "${DSETS[@]}" --set p=2 --set device=cuda \
            ${cuda_prec[@]+"${cuda_prec[@]}"} --set comm=nccl --set "output=$R/nccl_p2_refused.h5" "$CFG"
        rm -f "$R/nccl_p2_refused.h5.log"
    fi
    # A CUDA-aware MPI moves the gradients on device memory (reducer_mean, src/comm/reduce.h); DSGD_CUDA_AWARE=0
    # forces the host path, which must train the same.
    if [ -x "$BIN" ] && grep -q 'CUDA-aware: yes' <<< "$VERSION_OUT"; then
        benv_saved=("${BENV[@]}")
        BENV+=("DSGD_CUDA_AWARE=0")
        train "g. run cuda p=2 DSGD_CUDA_AWARE=0 (host path)" 2 cuda "$R/cuda_p2_host.h5" --set iterations=20 --set eval.every=20
        BENV=("${benv_saved[@]}")
        compare_runs "g. loss curves CUDA-aware vs host path, p=2" "$R/cuda_p2.h5" "$R/cuda_p2_host.h5"
    else
        record "g. CUDA-aware MPI path" INFO 0 "MPI is not CUDA-aware: p = 2 ran the host path (DSGD_CUDA_AWARE has nothing to turn off)" "$RUNS_LOG"
    fi
fi

# The overlap of the gradient's copies and all-reduce with the backward pass, and the staging of the
# next minibatch (docs/gpu.md, "Overlap"): DSGD_OVERLAP=0 turns both off; the losses must be the
# same (bit for bit when cuDNN picks the same algorithms in both runs).
if [ "$simulate" != 1 ]; then
    benv_saved=("${BENV[@]}")
    BENV+=("DSGD_OVERLAP=0")
    train "g. run cuda p=2 DSGD_OVERLAP=0 (20 steps)" 2 cuda "$R/cuda_p2_nooverlap.h5" --set iterations=20 --set eval.every=20
    BENV=("${benv_saved[@]}")
    if [ -n "${RUN_OK[$R/cuda_p2_nooverlap.h5]:-}" ] && [ -n "${RUN_OK[$R/cuda_p2.h5]:-}" ] && [ -n "$PY_H5" ]; then
        run_step "g. loss curves overlapped vs DSGD_OVERLAP=0, p=2" "$RUNS_LOG" 60 "$PY_H5" "$here/check_runs.py" compare \
            "$R/cuda_p2.h5" "$R/cuda_p2_nooverlap.h5" --steps 10 --rtol 1e-5
    else
        record "g. loss curves overlapped vs DSGD_OVERLAP=0, p=2" "SKIP" 0 "a run failed (or no h5py)" "$RUNS_LOG"
    fi
    # comm = "nccl": the all-reduce per gradient group during the backward pass (the default, step
    # e's run) against DSGD_NCCL_OVERLAP=0 (after it): at p = 1 the same losses (docs/gpu.md).
    BENV+=("DSGD_NCCL_OVERLAP=0")
    train "g. run cuda p=1 comm=nccl DSGD_NCCL_OVERLAP=0 (20 steps)" 1 cuda "$R/nccl_p1_after.h5" --set comm=nccl \
        --set iterations=20 --set eval.every=20
    BENV=("${benv_saved[@]}")
    if [ -n "${RUN_OK[$R/nccl_p1_after.h5]:-}" ] && [ -n "${RUN_OK[$R/nccl_p1.h5]:-}" ] && [ -n "$PY_H5" ]; then
        run_step "g. loss curves nccl per group vs DSGD_NCCL_OVERLAP=0, p=1" "$RUNS_LOG" 60 "$PY_H5" "$here/check_runs.py" \
            compare "$R/nccl_p1.h5" "$R/nccl_p1_after.h5" --steps 10 --rtol 1e-5
    else
        record "g. loss curves nccl per group vs DSGD_NCCL_OVERLAP=0, p=1" "SKIP" 0 "a run failed (or no h5py)" "$RUNS_LOG"
    fi
fi

finish
