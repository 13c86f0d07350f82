#!/bin/sh
# test_tools.sh — the batch-job workflow without a scheduler: tools/sweep.py (points, b = m/p,
# names, errors, never over an earlier sweep), the Slurm and PBS job scripts run as the scheduler
# would run them (SLURM_* / PBS_* set by hand, the ranks started by mpiexec), and
# tools/plot_runs.py on their run files and on a run that is still going. Runs from the
# repository root with ./dsgd-run built (make check). Every mpiexec under a timeout.
set -u
T=${TEST_MPI_TIMEOUT:-120}
PY=/usr/bin/python3
dir=$(mktemp -d /tmp/dsgd-tools.XXXXXX)
trap 'kill $bg 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
bg=
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# 1. sweep: 2 methods x 2 node counts, m held at 64; every point resolved by dsgd-run.
out=$($PY tools/sweep.py configs/linear.cfg --vary method=allreduce,ps --vary p=2,4 --m 64 --name t1 \
      --dir "$dir/sweeps" --set iterations=60 --set eval.every=30 --dry-run 2>&1) || bad "sweep --dry-run: $out"
n=$(ls "$dir/sweeps/t1"/*.cfg 2>/dev/null | wc -l)
[ "$n" = 4 ] && ok "sweep wrote 4 experiment files" || bad "sweep wrote $n experiment files, expected 4"
f="$dir/sweeps/t1/t1-ps-p4.cfg"
if grep -q '^p = 4;' "$f" && grep -q '^b = 16;' "$f" && grep -q '^name = "t1-ps-p4";' "$f" && grep -q '^iterations = 60;' "$f"; then
    ok "point t1-ps-p4: p = 4, b = m/p = 16, its own name, the fixed --set"
else bad "point $f: wrong p, b, name or iterations"; fi
echo "$out" | grep -q -- "--nodes=5 .*t1-ps-p4.cfg" && ok "ps at p = 4 asks for 5 nodes (a server)" || bad "submit line for t1-ps-p4: $out"
$PY tools/sweep.py configs/linear.cfg --vary p=3 --m 64 --name t2 --dir "$dir/sweeps" --dry-run >"$dir/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "p = 3 does not divide m = 64" "$dir/log" && [ ! -e "$dir/sweeps/t2" ] \
    && ok "p not dividing m: exit 2, nothing written" || bad "p = 3, m = 64: exit $rc, $(cat "$dir/log")"
# A dry run is replaced by the same command again; a sweep with a submitted job is never replaced.
$PY tools/sweep.py configs/linear.cfg --vary p=2,4 --name t4 --dir "$dir/sweeps" --dry-run >"$dir/log" 2>&1
$PY tools/sweep.py configs/linear.cfg --vary p=2 --name t4 --dir "$dir/sweeps" --dry-run >"$dir/log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "replacing" "$dir/log" && [ ! -e "$dir/sweeps/t4/t4-p4.cfg" ] && [ -f "$dir/sweeps/t4/t4-p2.cfg" ] \
    && ok "a dry run is replaced by the same sweep again" || bad "dry run again: exit $rc, $(cat "$dir/log")"
$PY -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); d['dry_run']=False; d['jobs'][0]['job_id']='77'; json.dump(d,open(p,'w'))" \
    "$dir/sweeps/t4/sweep.json"
$PY tools/sweep.py configs/linear.cfg --vary p=2 --name t4 --dir "$dir/sweeps" --dry-run >"$dir/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "never overwritten" "$dir/log" && ok "a sweep with a submitted job is never replaced" || bad "sweep t4 again: exit $rc"
$PY tools/sweep.py configs/linear.cfg --vary p=2 --vary alpha.bse=1 --name t3 --dir "$dir/sweeps" --dry-run >"$dir/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "unknown key 'alpha.bse'" "$dir/log" && ok "a bad key is reported by dsgd-run's own message" || bad "bad key: exit $rc, $(cat "$dir/log")"

# 2. the job scripts as the schedulers run them.
cp "$dir/sweeps/t1/t1-allreduce-p2.cfg" "$dir/sweeps/t1/t1-ps-p2.cfg" "$dir/"
(cd "$dir" && mkdir -p jobs && cp -r "$OLDPWD/jobs/slurm" "$OLDPWD/jobs/pbs" jobs/ && ln -s "$OLDPWD/dsgd-run" dsgd-run)
(cd "$dir" && SLURM_SUBMIT_DIR="$dir" SLURM_JOB_ID=101 SLURM_NTASKS=2 DSGD_LAUNCH="timeout -k 5 $T mpiexec -n 2" \
    bash jobs/slurm/dsgd.sbatch t1-allreduce-p2.cfg) >"$dir/slurm.log" 2>&1
rc=$?
[ $rc = 0 ] && [ -f "$dir/runs/t1-allreduce-p2.101.h5" ] && ok "dsgd.sbatch: runs/t1-allreduce-p2.101.h5" || bad "dsgd.sbatch: exit $rc: $(tail -3 "$dir/slurm.log")"
# The same job id again (Slurm requeued a finished job): resume = "auto" finds the run finished,
# says so and exits 0 without touching the run file.
sum1=$(md5sum <"$dir/runs/t1-allreduce-p2.101.h5")
(cd "$dir" && SLURM_SUBMIT_DIR="$dir" SLURM_JOB_ID=101 SLURM_NTASKS=2 DSGD_LAUNCH="timeout -k 5 $T mpiexec -n 2" \
    bash jobs/slurm/dsgd.sbatch t1-allreduce-p2.cfg) >"$dir/slurm2.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "already finished" "$dir/slurm2.log" && [ "$(md5sum <"$dir/runs/t1-allreduce-p2.101.h5")" = "$sum1" ] \
    && ok "the same job id again: the finished run is left as it is (exit 0)" || bad "rerun: exit $rc: $(tail -3 "$dir/slurm2.log")"
# PBS: 3 ranks from the node file; ps at p = 2 with its server (p from the allocation).
printf 'localhost\nlocalhost\nlocalhost\n' > "$dir/nodes"
(cd "$dir" && PBS_O_WORKDIR="$dir" PBS_JOBID=202.pbsserver PBS_NODEFILE="$dir/nodes" EXP=t1-ps-p2.cfg \
    DSGD_MPIEXEC="timeout -k 5 $T mpiexec" bash jobs/pbs/dsgd.pbs) >"$dir/pbs.log" 2>&1
rc=$?
[ $rc = 0 ] && [ -f "$dir/runs/t1-ps-p2.202.h5" ] && ok "dsgd.pbs: runs/t1-ps-p2.202.h5 (3 ranks from PBS_NODEFILE)" || bad "dsgd.pbs: exit $rc: $(tail -3 "$dir/pbs.log")"

# 3. plot_runs: both finished runs, then one that is still going.
timeout -k 5 $T mpiexec -n 2 ./dsgd-run --set p=2 --set iterations=400 --set eval.every=20 --set log_every=10 \
    --set 'inject.slow_ranks=[1]' --set inject.delay_ms=15 --set "output=\"$dir/runs/going.h5\"" configs/linear.cfg \
    >"$dir/going.log" 2>&1 &
bg=$!
i=0
while [ $i -lt 100 ] && ! grep -q "eval step 60" "$dir/going.log" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
$PY tools/plot_runs.py "$dir"/runs/*.h5 --out "$dir/plots/fig" --target 0.5 >"$dir/table.md" 2>"$dir/plot.log"
rc=$?
for s in .png .pdf -steptime.png -steptime.pdf; do
    [ -s "$dir/plots/fig$s" ] || { bad "plot_runs: no fig$s ($(cat "$dir/plot.log"))"; rc=1; }
done
[ $rc = 0 ] && ok "plot_runs wrote the curves and the step-time distributions (PNG, PDF)"
grep -q "| going.h5 | allreduce | 2 | 32 | 64 | .*/400 | .* running (or killed) |" "$dir/table.md" \
    && ok "a run in progress is read and marked running" || bad "running run not in the table: $(cat "$dir/table.md")"
want=$($PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f'{f[\"eval/top1_error\"][-1]:.4f}')" "$dir/runs/t1-ps-p2.202.h5")
grep -q "| t1-ps-p2.202.h5 | ps | 2 | 32 | 64 | 60/60 | $want | .* | completed |" "$dir/table.md" \
    && ok "summary row of t1-ps-p2: final top-1 error $want from the run file" || bad "summary row: $(cat "$dir/table.md")"
$PY tools/plot_runs.py "$dir"/runs/t1-*.h5 --out "$dir/plots/fig" >/dev/null 2>"$dir/plot2.log"
rc=$?
[ $rc = 2 ] && grep -q "exists" "$dir/plot2.log" && ok "existing plots are not replaced" || bad "plot again: exit $rc"
wait $bg 2>/dev/null
bg=

# 4. configs/paper/, tools/paper.py and tools/report.py (test/test_paper.sh).
sh test/test_paper.sh || fail=1
exit $fail
