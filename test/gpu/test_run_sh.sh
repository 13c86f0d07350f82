#!/bin/bash
# test_run_sh.sh — test/gpu/run.sh on a fake GPU machine, in seconds and without a GPU: a stub
# nvidia-smi that shows an H200, a bundle whose dsgd-run, mpiexec.hydra, test programs and
# bench_gpu are shell scripts that log each call (arguments and the DSGD_* variables they get) to
# a trace, and a python stub (PYTHON=) for torch, h5py and the benchmark. run.sh thus takes its
# GPU-machine path (have_gpu = 1), and the checks below hold it to what protects the one GPU call
# (issue 23, N3–N8):
#   1. order: b. test_gpu_ops, c. the cuda run, d. bench_gpu then PyTorch, the throughput table on
#      stdout before step e; e. test_gpu_comm (with DSGD_REQUIRE_NCCL=1) and the comm = nccl run
#      before f. the JPEG pack and g. test_gpu_model; the benchmark's shape (2 warm-ups, 3
#      timings of 5 steps, at most 4 s of timings a row), its rows in the order most needed
#      (bench_gpu: fp32 and bf16 at b = 32 and 256 first, each switch in bf16 after, det, tf32 and
#      all last; PyTorch: fp32 and bf16 channels_last first), each program's --budget (90 s, 35 s)
#      and step limit (+ 20 s, + 15 s); rows a budget left out (status=notrun) and a row announced
#      (PLAN) but not reached show NOT RUN (budget) / NOT RUN (cut) in the table and the step's
#      note; dsgd-run --version called once, under a timeout
#   2. dsgd-run --version hangs: recorded as TIMEOUT after GPUCHECK_CMD_TIMEOUT, the check goes on
#   3. a test program fails ("0%: Checks"): run once, not again
#   4. SIGTERM to run.sh during step e: the step is stopped (its process gone), recorded as CUT,
#      summary.md with the throughput table printed, exit 1, within seconds
#   5. build/bench_gpu itself on the CPU (make check builds it): --rows in order behind PLAN lines,
#      --budget spent (NOT RUN with the reason, exit 0), --max-seconds ending a row's timings after one
# Prints ok/FAIL per check; exit 1 if one failed. Run by `make check` (test/run-one.sh).
set -u
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
w=$(mktemp -d /tmp/dsgd-runsh.XXXXXX) || exit 1
trap 'rm -rf "$w"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# ---- the fake machine ------------------------------------------------------------------------
P=$w/path B=$w/bundle
mkdir -p "$P" "$B/bin" "$B/test" "$B/data" "$B/lib"
cat > "$P/nvidia-smi" << 'EOF'
#!/bin/sh
case "$*" in
*-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-fake)" ;;
*query-gpu=name*) echo "NVIDIA H200" ;;
*query-gpu=driver*) echo "570.00" ;;
*) echo "| NVIDIA-SMI 570.00    Driver Version: 570.00    CUDA Version: 13.0 |" ;;
esac
EOF
# PLAN and BENCH lines for --rows as given (PREC:B[:VARIANT] for dsgd-run, PREC:B[:cl] for torch):
# bench IMPL ARGS... The last row of dsgd-run says status=notrun (its --budget), the row before it
# has a PLAN line only (cut); PyTorch's rows are all ok.
cat > "$P/benchlines" << 'EOF'
#!/bin/bash
impl=$1; shift
rows=fp32:32
while [ $# -gt 0 ]; do case $1 in --rows) rows=$2; shift ;; esac; shift; done
echo "INFO impl=$impl gpu=NVIDIA_H200 backend=stub"
IFS=, read -r -a R <<< "$rows"
common() {
    local p=${1%%:*} rest=${1#*:} b x=""
    b=${rest%%:*}; [ "$b" = "$rest" ] || x=${rest#*:}
    if [ "$impl" = torch ]; then
        echo "impl=torch width=64 stem=imagenet input=3x224x224 classes=1000 batch=$b precision=$p layout=$([ "$x" = cl ] && echo channels_last || echo nchw)"
    else
        echo "impl=dsgd-run width=64 stem=imagenet input=3x224x224 classes=1000 batch=$b precision=$p variant=${x:-base}"
    fi
}
for r in "${R[@]}"; do echo "PLAN $(common "$r")"; done
n=${#R[@]}
echo "INFO impl=$impl budget=90 rows=$n"
for i in "${!R[@]}"; do
    if [ "$impl" = dsgd-run ] && [ "$i" = $((n - 2)) ]; then continue; fi # cut: PLAN only
    if [ "$impl" = dsgd-run ] && [ "$i" = $((n - 1)) ]; then echo "BENCH $(common "${R[$i]}") status=notrun reason=budget"; continue; fi
    echo "BENCH $(common "${R[$i]}") status=ok img_s_med=1000.0 img_s_min=990.0 img_s_max=1010.0 ms_step=1.0 reps=3 steps=5"
done
EOF
cat > "$P/python" << 'EOF'
#!/bin/bash
echo "python $*" >> "$TRACE"
case $1 in
-c) case $2 in *torch.__version__*) echo "2.11.0+cu130, CUDA 13.0, cuDNN 91900, GPU visible: True" ;; esac; exit 0 ;;
-) cat > /dev/null; echo; exit 0 ;;
*report.py) exec python3 "$@" ;;
*bench_torch_gpu.py) shift; exec benchlines torch "$@" ;;
*check_runs.py) echo "ok: (stub)"; exit 0 ;;
*) exit 0 ;;
esac
EOF
cat > "$B/bin/dsgd-run" << 'EOF'
#!/bin/bash
echo "dsgd-run $* | REQUIRE_NCCL=${DSGD_REQUIRE_NCCL:-} ALGO=${DSGD_CUDNN_ALGO:-}" >> "$TRACE"
case " $* " in
*" --version "*) [ "${STUB_HANG:-}" = version ] && exec sleep 1000
    echo "dsgd-run 0.1.0 (stub)   backend: cuda: CUDA runtime 13.0, cuDNN 9.19.0   MPI: MPICH (CUDA-aware: no)"; exit 0 ;;
*" --help "*) echo "  precision   fp32 | tf32 | bf16"; exit 0 ;;
*" --pack "*) exit 0 ;;
*comm=nccl*p=2*) echo "dsgd-run: key 'comm': the ranks share GPU 0"; exit 2 ;;
esac
echo "done: 20 steps (stub)"
EOF
cat > "$B/bin/mpiexec.hydra" << 'EOF'
#!/bin/bash
while [ $# -gt 0 ] && [ "$1" != -n ]; do shift; done
shift 2
exec "$@"
EOF
printf '#!/bin/sh\nexit 0\n' > "$B/bin/hydra_pmi_proxy"
cat > "$B/test/stubtest" << 'EOF'
#!/bin/bash
name=$(basename "$0")
echo "$name | REQUIRE_NCCL=${DSGD_REQUIRE_NCCL:-} ALGO=${DSGD_CUDNN_ALGO:-} REQUIRE_GPU=${DSGD_REQUIRE_GPU:-}" >> "$TRACE"
if [ "${STUB_SLEEP_TEST:-}" = "$name" ]; then echo $$ > "$TRACE.sleeper"; exec sleep 1000; fi
if [ "${STUB_FAIL_TEST:-}" = "$name" ]; then echo "0%: Checks: 1, Failures: 1, Errors: 0"; exit 1; fi
echo "100%: Checks: 1, Failures: 0, Errors: 0"
EOF
for t in test_gpu_ops test_gpu_model test_gpu_device test_gpu_comm test_gpu_overlap; do cp "$B/test/stubtest" "$B/test/$t"; done
rm "$B/test/stubtest"
cat > "$B/test/bench_gpu" << 'EOF'
#!/bin/bash
echo "bench_gpu $* | ALGO=${DSGD_CUDNN_ALGO:-}" >> "$TRACE"
exec benchlines dsgd-run "$@"
EOF
chmod +x "$P"/* "$B"/bin/* "$B"/test/*

# fake_run NAME [VAR=VALUE...]: run.sh on the fake machine; its stdout in $w/NAME.out, the trace
# in $w/NAME.trace, the exit status in $w/NAME.rc, the seconds in $w/NAME.secs.
fake_run() {
    local name=$1 t0
    shift
    t0=$(date +%s)
    env "PATH=$P:$PATH" "PYTHON=$P/python" "TRACE=$w/$name.trace" "$@" \
        timeout -k 5 120 bash "$here/run.sh" "$w/$name.results" --bundle "$B" > "$w/$name.out" 2>&1
    echo $? > "$w/$name.rc"
    echo $(( $(date +%s) - t0 )) > "$w/$name.secs"
}
# line NAME PATTERN: the first line of the trace matching PATTERN (0 if none).
line() { grep -n -m1 -E -- "$2" "$w/$1.trace" | cut -d: -f1 | grep . || echo 0; }

# ---- 1. a whole run: order, environment, shapes ---------------------------------------------------
fake_run full
if [ "$(cat "$w/full.rc")" = 124 ]; then bad "run.sh on the fake machine did not finish in 120 s"; fi
ops=$(line full '^test_gpu_ops ') c=$(line full '^dsgd-run .*cuda_p1\.h5') bg=$(line full '^bench_gpu ')
bt=$(line full 'bench_torch_gpu\.py') comm=$(line full '^test_gpu_comm ') nccl=$(line full '^dsgd-run .*nccl_p1\.h5.*comm=nccl')
jpeg=$(line full 'make_jpeg_tree\.py') model=$(line full '^test_gpu_model ')
if [ "$ops" -gt 0 ] && [ "$ops" -lt "$c" ] && [ "$c" -lt "$bg" ] && [ "$bg" -lt "$bt" ] && [ "$bt" -lt "$comm" ] &&
    [ "$comm" -lt "$nccl" ] && [ "$nccl" -lt "$jpeg" ] && [ "$jpeg" -lt "$model" ]; then
    ok "order: ops, cuda run, bench_gpu, PyTorch, test_gpu_comm, the NCCL run, JPEG, test_gpu_model (trace lines $ops $c $bg $bt $comm $nccl $jpeg $model)"
else
    bad "order (trace lines: ops $ops, run $c, bench_gpu $bg, torch $bt, test_gpu_comm $comm, nccl run $nccl, jpeg $jpeg, test_gpu_model $model)"
    cat "$w/full.trace"
fi
if grep -q '^test_gpu_comm | REQUIRE_NCCL=1 ' "$w/full.trace"; then ok "test_gpu_comm gets DSGD_REQUIRE_NCCL=1 on a GPU machine"
else bad "test_gpu_comm without DSGD_REQUIRE_NCCL=1: $(grep '^test_gpu_comm' "$w/full.trace")"; fi
if grep -q '^bench_gpu .*--reps 3 --steps 5 --warmup 2 --max-seconds 4 ' "$w/full.trace" &&
    grep -q 'bench_torch_gpu\.py .*--reps 3 --steps 5 --warmup 2 --max-seconds 4 ' "$w/full.trace"; then
    ok "benchmark: 2 warm-ups, 3 x 5 steps, at most 4 s of timings a row, in both programs"
else bad "benchmark shape: $(grep -E '^bench_gpu|bench_torch' "$w/full.trace")"; fi
drows="fp32:32,fp32:256,bf16:32,bf16:256"
for v in nhwc nhwcbn nhwcadd graph sync1 cast1 nccl ncclov det; do drows+=",bf16:32:$v,bf16:256:$v"; done
drows+=",tf32:32,tf32:256,bf16:32:all,bf16:256:all"
trows="fp32:32,fp32:256,bf16:32:cl,bf16:256:cl,bf16:32,bf16:256,tf32:32,tf32:256"
if grep -q "^bench_gpu .*--rows $drows --budget 90 " "$w/full.trace" &&
    grep -q "bench_torch_gpu\.py .*--rows $trows --budget 35\( \|\$\)" "$w/full.trace"; then
    ok "benchmark rows in the order most needed (goal rows first; det, tf32, all last), budgets 90 s and 35 s"
else bad "benchmark rows / budgets: $(grep -E '^bench_gpu|bench_torch' "$w/full.trace")"; fi
if grep -q 'run      d\. bench_gpu (dsgd-run) *up to 110 s' "$w/full.out" &&
    grep -q 'run      d\. bench_torch_gpu\.py (PyTorch) *up to 50 s' "$w/full.out"; then
    ok "step d's limits: bench_gpu 90 + 20 s, PyTorch 35 + 15 s"
else bad "step d's limits: $(grep -E 'run +d\.' "$w/full.out")"; fi
# The stub's last dsgd-run row (bf16 b = 256 all) is left out by the budget, the one before it
# (bf16 b = 32 all) cut: the table and the step's note say so; the goal rows are there.
sm=$w/full.results/summary.md
if grep -q '^| 256 | bf16, dsgd-run sync=step + casts=one | NOT RUN (budget) |' "$sm" &&
    grep -q '^| 32 | bf16, dsgd-run sync=step + casts=one | NOT RUN (cut) |' "$sm" &&
    grep -q '^| 256 | bf16, PyTorch channels_last | 1,000 (990–1,010) | 1,000 (990–1,010) | 1.00 |' "$sm" &&
    grep -q '^| d\. bench_gpu (dsgd-run) | PASS | [0-9]* | 26 rows: 24 ok, 0 not built, 0 failed, 1 NOT RUN (budget), 1 NOT RUN (cut) |' "$sm" &&
    grep -q 'dsgd-run: 26 rows planned; NOT RUN: 1 left out by the benchmark.s --budget' "$sm" &&
    grep -q '^- dsgd-run ?: stub; NVIDIA H200$' "$sm"; then
    ok "rows not run: NOT RUN (budget) and NOT RUN (cut) in the table and the step's note; the INFO lines merged"
else bad "rows not run: $(grep -E 'NOT RUN|d\. bench|sync=step' "$sm")"; fi
tbl=$(grep -n -m1 '^## Throughput (step d)' "$w/full.out" | cut -d: -f1)
e1=$(grep -n -m1 'e\. test_gpu_comm' "$w/full.out" | cut -d: -f1)
if [ -n "$tbl" ] && [ -n "$e1" ] && [ "$tbl" -lt "$e1" ] && sed -n "$tbl,\$p" "$w/full.out" | grep -q '| 256 '; then
    ok "the throughput table is on stdout (line $tbl) before step e starts (line $e1)"
else bad "throughput table on stdout at line ${tbl:-none}, step e at ${e1:-none}"; fi
nv=$(grep -c '^dsgd-run --version' "$w/full.trace")
if [ "$nv" = 1 ]; then ok "dsgd-run --version called once"; else bad "dsgd-run --version called $nv times"; fi
echo "   (the fake run took $(cat "$w/full.secs") s, exit $(cat "$w/full.rc"))"

# ---- 2. dsgd-run --version hangs ------------------------------------------------------------------
fake_run hang STUB_HANG=version GPUCHECK_CMD_TIMEOUT=2
if [ "$(cat "$w/hang.rc")" != 124 ] && grep -qE 'TIMEOUT +a\. dsgd-run --version' "$w/hang.out" &&
    grep -q '^test_gpu_model ' "$w/hang.trace"; then
    ok "a hanging dsgd-run --version: TIMEOUT after 2 s, the check went on (whole run $(cat "$w/hang.secs") s)"
else bad "a hanging dsgd-run --version (exit $(cat "$w/hang.rc"), $(cat "$w/hang.secs") s): $(grep -- '--version' "$w/hang.out" | head -n 2)"; fi

# ---- 3. a failing test program runs once -----------------------------------------------------------
fake_run failing STUB_FAIL_TEST=test_gpu_ops
n=$(grep -c '^test_gpu_ops ' "$w/failing.trace")
if [ "$n" = 1 ] && grep -qE 'FAIL \(1\) +b\. test_gpu_ops' "$w/failing.out"; then ok "a failing test_gpu_ops: FAIL, run once"
else bad "a failing test_gpu_ops ran $n times: $(grep 'test_gpu_ops' "$w/failing.out" | head -n 3)"; fi

# ---- 4. SIGTERM during step e --------------------------------------------------------------------
(
    env "PATH=$P:$PATH" "PYTHON=$P/python" "TRACE=$w/term.trace" STUB_SLEEP_TEST=test_gpu_comm \
        bash "$here/run.sh" "$w/term.results" --bundle "$B" > "$w/term.out" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do [ -s "$w/term.trace.sleeper" ] && break; sleep 0.1; done
    sleep 0.3
    t0=$(date +%s%N)
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2> /dev/null; then echo "still running" > "$w/term.rc"; kill -KILL "$pid"; exit; fi
    wait "$pid"
    echo $? > "$w/term.rc"
    echo $(( ($(date +%s%N) - t0) / 1000000 )) > "$w/term.ms"
)
sleeper=$(cat "$w/term.trace.sleeper" 2> /dev/null)
if [ "$(cat "$w/term.rc")" = 1 ] && grep -q '^| e\. test_gpu_comm | CUT |' "$w/term.out" &&
    grep -q '^## Throughput (step d)' "$w/term.out" && grep -q '^# dsgd-run GPU check' "$w/term.out" &&
    [ -n "$sleeper" ] && ! kill -0 "$sleeper" 2> /dev/null && ! grep -q '^test_gpu_model' "$w/term.trace"; then
    ok "SIGTERM during test_gpu_comm: CUT, summary with the table printed, step stopped, exit 1 in $(cat "$w/term.ms") ms"
else
    bad "SIGTERM during test_gpu_comm: exit $(cat "$w/term.rc"), sleeper ${sleeper:-?} $(kill -0 "${sleeper:-0}" 2> /dev/null && echo alive || echo gone)"
    tail -n 30 "$w/term.out"
fi
[ -n "$sleeper" ] && kill "$sleeper" 2> /dev/null

# ---- 5. build/bench_gpu itself (make check builds it; --device cpu): --rows, PLAN, --budget ------
BG=$here/../../build/bench_gpu
small=(--device cpu --width 4 --stem cifar --input 1x8x8 --classes 10 --reps 3 --steps 2 --warmup 1)
if [ ! -x "$BG" ]; then
    bad "no $BG (make build/bench_gpu; make check builds it)"
else
    # The rows in the order given, each announced first; bf16 on the CPU unsupported; every ok
    # row with its 3 timings, create_s and row_s; no budget: nothing left out.
    timeout 120 "$BG" "${small[@]}" --rows fp32:4,bf16:4,fp32:8:sync1,fp32:4:nhwc > "$w/bg1.out" 2>&1
    rc=$?
    plan=$(sed -n 's/^PLAN .* batch=\([0-9]*\) precision=\([a-z0-9]*\) variant=\([a-z0-9]*\)$/\2:\1:\3/p' "$w/bg1.out" | paste -sd, -)
    got=$(sed -n 's/^BENCH .* batch=\([0-9]*\) precision=\([a-z0-9]*\) variant=\([a-z0-9]*\) status=\([a-z]*\).*/\2:\1:\3=\4/p' "$w/bg1.out" | paste -sd, -)
    if [ $rc = 0 ] && [ "$plan" = "fp32:4:base,bf16:4:base,fp32:8:sync1,fp32:4:nhwc" ] &&
        [ "$got" = "fp32:4:base=ok,bf16:4:base=unsupported,fp32:8:sync1=ok,fp32:4:nhwc=ok" ] &&
        [ "$(grep -c '^BENCH .*status=ok .* reps=3 steps=2 create_s=[0-9.]* row_s=[0-9.]*$' "$w/bg1.out")" = 3 ] &&
        [ "$(grep -n -m1 '^PLAN ' "$w/bg1.out" | cut -d: -f1)" -lt "$(grep -n -m1 '^BENCH ' "$w/bg1.out" | cut -d: -f1)" ]; then
        ok "bench_gpu --rows: PLAN lines first, the rows in the given order (bf16 unsupported on the CPU), 3 timings, create_s, row_s"
    else bad "bench_gpu --rows (exit $rc): plan $plan; rows $got"; cat "$w/bg1.out"; fi
    # A budget already spent: every row that would run says NOT RUN (budget), exit 0.
    timeout 120 "$BG" "${small[@]}" --rows fp32:4,bf16:4,fp32:8:det --budget 0.000001 > "$w/bg2.out" 2>&1
    rc=$?
    got=$(sed -n 's/^BENCH .* batch=\([0-9]*\) precision=\([a-z0-9]*\) variant=\([a-z0-9]*\) status=\([a-z]*\).*/\2:\1:\3=\4/p' "$w/bg2.out" | paste -sd, -)
    if [ $rc = 0 ] && [ "$got" = "fp32:4:base=notrun,bf16:4:base=unsupported,fp32:8:det=notrun" ] &&
        [ "$(grep -c '^BENCH .*status=notrun reason=budget$' "$w/bg2.out")" = 2 ] &&
        grep -q '^     fp32      4  not run: --budget 1e-06 s: .* spent, the row needs ~0.0 s (no row done at this batch)$' "$w/bg2.out"; then
        ok "bench_gpu --budget spent: the rows say NOT RUN (budget) with the reason, exit 0"
    else bad "bench_gpu --budget 0.000001 (exit $rc): $got"; cat "$w/bg2.out"; fi
    # The row's cap: 100 timings asked, --max-seconds 1e-6: the timings stop after the first (one
    # at least; before, three at least).
    timeout 120 "$BG" "${small[@]}" --reps 100 --max-seconds 0.000001 --rows fp32:8 > "$w/bg3.out" 2>&1
    rc=$?
    reps=$(sed -n 's/^BENCH .*status=ok .* reps=\([0-9]*\) .*/\1/p' "$w/bg3.out")
    if [ $rc = 0 ] && [ "$reps" = 1 ]; then
        ok "bench_gpu --max-seconds: a row's timings stop once that many seconds are done, after one (1 of 100)"
    else bad "bench_gpu --max-seconds 0.000001 (exit $rc): reps ${reps:-none}, expected 1"; cat "$w/bg3.out"; fi
fi

exit $fail
