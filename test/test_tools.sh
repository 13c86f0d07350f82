#!/bin/sh
# test_tools.sh — the batch-job workflow without a scheduler: tools/sweep.py (points, b = m/p,
# names, errors, never over an earlier sweep), the Slurm and PBS job scripts run as the scheduler
# would run them (SLURM_* / PBS_* set by hand, the ranks started by mpiexec), and
# tools/plot_runs.py on their run files and on a run that is still going; the batch side of
# issue 22: run ids (arrays, DSGD_RUN_ID), continuations (--resume, the world size, exit
# statuses), stop_at, the site block's environment, the PBS host file, sweep.py's resources,
# chains (fake sbatch / qsub on PATH), --continue and --runs-dir, --local and its --continue. Runs from the repository root
# with ./dsgd-run built (make check). Every mpiexec under a timeout.
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

# 2. the job scripts as the schedulers run them. Fake squeue / qstat on PATH (no scheduler here);
#    SLURM_JOB_END_TIME an hour away, so a dsgd-run that knows stop_at gets it.
cp "$dir/sweeps/t1/t1-allreduce-p2.cfg" "$dir/sweeps/t1/t1-ps-p2.cfg" "$dir/"
mkdir -p "$dir/fakebin"
# Asked for the bare id of an array (FAKE_SQUEUE_ARRAY) it lists one line per running task, as squeue does.
cat >"$dir/fakebin/squeue" <<'FAKE'
#!/bin/sh
[ -n "${FAKE_SQUEUE_EMPTY:-}" ] && exit 1   # squeue that fails: no output
echo "${FAKE_SQUEUE_END:-N/A}"
case " $* " in *" -j ${FAKE_SQUEUE_ARRAY:-none} "*) echo "${FAKE_SQUEUE_END:-N/A}" ;; esac
FAKE
cat >"$dir/fakebin/qstat" <<'FAKE'
#!/bin/sh
[ -n "${FAKE_QSTAT:-}" ] || { echo "qstat: fake: no such job" >&2; exit 1; }
if [ -n "${FAKE_QSTAT_NOSTIME:-}" ]; then printf 'Job Id: %s\n    Resource_List.walltime = 02:00:00\n' "$2"
else printf 'Job Id: %s\n    Resource_List.walltime = 02:00:00\n    stime = Tue Jan  1 00:00:00 2030\n' "$2"; fi
FAKE
chmod +x "$dir/fakebin"/*
PATH="$dir/fakebin:$PATH"
export SLURM_JOB_END_TIME=$(($(date +%s) + 3600))
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
ls "${TMPDIR:-/tmp}"/dsgd-hosts.* >/dev/null 2>&1 && bad "dsgd.pbs left its sorted host file behind" || ok "dsgd.pbs removed its host file"
$PY -c "import h5py,sys; c=h5py.File(sys.argv[1],'r').attrs['config']; c=c.decode() if isinstance(c,bytes) else c; sys.exit(0 if 'bitwise = false;' in c else 1)" \
    "$dir/runs/t1-ps-p2.202.h5" && ok "the job ran with checkpoint.bitwise = false (T5; the run file's config)" || bad "no checkpoint.bitwise = false in the run file's config"

# 2b. run ids, continuations and exit statuses (T3, T4, T6), as the job scripts see them. sb LOG
#     [dsgd-run options]: dsgd.sbatch on t1-allreduce-p2.cfg (600 iterations, a checkpoint every
#     100) with the SLURM_* / DSGD_* variables the caller exported (2 tasks unless SLURM_NTASKS).
sb() {
    log=$1
    shift
    (cd "$dir" && SLURM_SUBMIT_DIR="$dir" SLURM_NTASKS=${SLURM_NTASKS:-2} DSGD_LAUNCH=${DSGD_LAUNCH:-timeout -k 5 $T mpiexec -n 2} \
        bash jobs/slurm/dsgd.sbatch t1-allreduce-p2.cfg --set iterations=600 --set checkpoint.every=100 "$@") >"$dir/$log" 2>&1
}
# An array task: run id <array job id>_<task index>, the experiment from the point list.
printf 't1-ps-p2.cfg\nt1-allreduce-p2.cfg\n' >"$dir/pts.list"
(cd "$dir" && SLURM_SUBMIT_DIR="$dir" SLURM_JOB_ID=311 SLURM_ARRAY_JOB_ID=310 SLURM_ARRAY_TASK_ID=1 SLURM_NTASKS=2 \
    DSGD_LAUNCH="timeout -k 5 $T mpiexec -n 2" bash jobs/slurm/dsgd.sbatch pts.list) >"$dir/array.log" 2>&1
rc=$?
[ $rc = 0 ] && [ -f "$dir/runs/t1-allreduce-p2.310_1.h5" ] && [ ! -e "$dir/runs/t1-allreduce-p2.311.h5" ] \
    && ok "array task 1 of job 310: runs/t1-allreduce-p2.310_1.h5 (T6: the id squeue shows)" || bad "array task: exit $rc: $(tail -3 "$dir/array.log")"
# DSGD_RUN_ID of a completed run: exit 0 at once, nothing touched (a chain's spare link).
sum=$(md5sum <"$dir/runs/t1-allreduce-p2.101.h5")
(export SLURM_JOB_ID=120 DSGD_RUN_ID=101; sb cont-done.log)
rc=$?
[ $rc = 0 ] && grep -q "completed: nothing to continue" "$dir/cont-done.log" && [ "$(md5sum <"$dir/runs/t1-allreduce-p2.101.h5")" = "$sum" ] \
    && [ ! -e "$dir/runs/t1-allreduce-p2.120.h5" ] && ok "DSGD_RUN_ID of a completed run: exit 0, run file untouched" \
    || bad "continuing a completed run: exit $rc: $(tail -3 "$dir/cont-done.log")"
# An unknown DSGD_RUN_ID: --resume refuses (exit 2) instead of starting afresh; a malformed one too.
(export SLURM_JOB_ID=121 DSGD_RUN_ID=999; sb cont-none.log)
rc=$?
[ $rc = 2 ] && [ ! -e "$dir/runs/t1-allreduce-p2.999.h5" ] && grep -q "no checkpoint" "$dir/cont-none.log" \
    && ok "unknown DSGD_RUN_ID=999: refused, exit 2, no run started (T6)" || bad "unknown DSGD_RUN_ID: exit $rc: $(tail -3 "$dir/cont-none.log")"
(export SLURM_JOB_ID=122 DSGD_RUN_ID=12x; sb cont-bad.log)
rc=$?
[ $rc = 2 ] && grep -q "is not a run id" "$dir/cont-bad.log" && ok "DSGD_RUN_ID=12x: not a run id, exit 2" || bad "DSGD_RUN_ID=12x: exit $rc"
# A run interrupted by SIGTERM at step 300 (checkpoint written): the job exits 3.
(export SLURM_JOB_ID=130 DSGD_TEST_SIGNAL=TERM@300; sb int.log)
rc=$?
[ $rc = 3 ] && ./dsgd-run --status "$dir/runs/t1-allreduce-p2.130.h5" | grep -q "^interrupted" && ok "job 130 interrupted at step 300: exit 3" \
    || bad "interrupted job: exit $rc: $(tail -3 "$dir/int.log")"
cp "$dir/runs/t1-allreduce-p2.130.h5" "$dir/interrupted.h5"
sum=$(md5sum <"$dir/runs/t1-allreduce-p2.130.h5")
# Its continuation on an allocation of another size: p from the allocation, refused by dsgd-run
# against the checkpoint's p (key 'p'), exit 2, run file untouched.
(export SLURM_JOB_ID=131 DSGD_RUN_ID=130 SLURM_NTASKS=3 DSGD_LAUNCH="timeout -k 5 $T mpiexec -n 3"; sb cont-world.log)
rc=$?
[ $rc = 2 ] && grep -q "says 2 rank(s) (method allreduce, p = 2), this allocation has 3" "$dir/cont-world.log" \
    && grep -q "key 'p': the checkpoint was written with p = 2" "$dir/cont-world.log" \
    && [ "$(md5sum <"$dir/runs/t1-allreduce-p2.130.h5")" = "$sum" ] \
    && ok "continuation on 3 tasks of a p = 2 run: refused, exit 2, run file untouched (T3)" || bad "world-size check: exit $rc: $(tail -3 "$dir/cont-world.log")"
# A run whose p came from its allocation (3 tasks, the experiment says p = 2) continues on 3 tasks.
(export SLURM_JOB_ID=132 SLURM_NTASKS=3 DSGD_LAUNCH="timeout -k 5 $T mpiexec -n 3" DSGD_TEST_SIGNAL=TERM@300; sb w3.log)
rc1=$?
(export SLURM_JOB_ID=133 DSGD_RUN_ID=132 SLURM_NTASKS=3 DSGD_LAUNCH="timeout -k 5 $T mpiexec -n 3"; sb w3c.log)
rc=$?
[ $rc1 = 3 ] && [ $rc = 0 ] && ./dsgd-run --status "$dir/runs/t1-allreduce-p2.132.h5" | grep -q "^completed" \
    && ok "a run with p = 3 from its allocation (experiment p = 2), interrupted, continues with DSGD_RUN_ID on 3 tasks to completion" \
    || bad "p-from-world continuation: exit $rc1 then $rc: $(tail -3 "$dir/w3.log") $(tail -3 "$dir/w3c.log")"
printf 'localhost\nlocalhost\nlocalhost\n' > "$dir/nodes3"
(cd "$dir" && PBS_O_WORKDIR="$dir" PBS_JOBID=402.srv PBS_NODEFILE="$dir/nodes3" EXP=t1-allreduce-p2.cfg DSGD_RUN_ID=130 \
    DSGD_MPIEXEC="timeout -k 5 $T mpiexec" bash jobs/pbs/dsgd.pbs) >"$dir/pbs-world.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "this allocation has 3" "$dir/pbs-world.log" && grep -q "key .p.: the checkpoint was written with p = 2" "$dir/pbs-world.log" && ok "dsgd.pbs: the same continuation on 3 MPI processes refused, exit 2" \
    || bad "dsgd.pbs world-size check: exit $rc: $(tail -3 "$dir/pbs-world.log")"
# A continuation that dsgd-run refuses (another experiment: b = 16) exits 2, not the old run file's 3 (T4).
(export SLURM_JOB_ID=132 DSGD_RUN_ID=130; sb cont-refused.log --set b=16)
rc=$?
[ $rc = 2 ] && grep -q "not written by this job: exit 2" "$dir/cont-refused.log" && [ "$(md5sum <"$dir/runs/t1-allreduce-p2.130.h5")" = "$sum" ] \
    && ok "a continuation dsgd-run refuses (b changed): exit 2, not the old run's 3 (T4)" || bad "refused continuation: exit $rc: $(tail -3 "$dir/cont-refused.log")"
# The continuation itself: the same run file, to the end (exit 0).
(export SLURM_JOB_ID=133 DSGD_RUN_ID=130; sb cont.log)
rc=$?
[ $rc = 0 ] && ./dsgd-run --status "$dir/runs/t1-allreduce-p2.130.h5" | grep -q "^completed" && [ ! -e "$dir/runs/t1-allreduce-p2.133.h5" ] \
    && grep -q "resuming from runs/t1-allreduce-p2.130.ckpt/step-300: 300 of 600" "$dir/cont.log" \
    && ok "DSGD_RUN_ID=130: run 130 continued from its checkpoint to the end in its own file, exit 0" || bad "continuation: exit $rc: $(tail -3 "$dir/cont.log")"
# stop_at: passed only by a dsgd-run that knows the key (before and after it exists).
if ./dsgd-run --help | grep -q '^  stop_at '; then
    grep -q "stop_at" "$dir/slurm.log" && ok "this dsgd-run knows stop_at: the job passed it" || bad "stop_at known but not passed: $(head -3 "$dir/slurm.log")"
else
    grep -q "stop_at" "$dir/slurm.log" && bad "stop_at passed to a dsgd-run without the key" || ok "this dsgd-run has no stop_at key: not passed"
fi

# 2c. the scripts' computed arguments and environment, through a dsgd-run stand-in that knows
#     stop_at and logs what it gets (L4, L5, L8, L11, P3, stop_at), and a logging mpiexec (PBS).
cat >"$dir/fake-dsgd" <<'FAKE'
#!/bin/sh
case "$1" in
--help) echo "  stop_at            int64      s          0            >= 0"; exit 0 ;;
--status) exit 2 ;;
esac
echo "args: $*" >>"$FAKE_LOG"
echo "env: MPICH_MAX_THREAD_SAFETY=${MPICH_MAX_THREAD_SAFETY-unset} HYDRA_LAUNCHER_EXTRA_ARGS=${HYDRA_LAUNCHER_EXTRA_ARGS-unset} SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK-unset} SLURM_GPUS_PER_TASK=${SLURM_GPUS_PER_TASK-unset}" >>"$FAKE_LOG"
FAKE
cat >"$dir/fake-mpiexec" <<'FAKE'
#!/bin/sh
echo "mpiexec: $*" >>"$FAKE_LOG"
while [ $# -gt 0 ]; do
    case $1 in -f | --hostfile) echo "hosts: $(tr '\n' ' ' <"$2")" >>"$FAKE_LOG"; shift ;; esac
    shift
done
FAKE
chmod +x "$dir/fake-dsgd" "$dir/fake-mpiexec"
export FAKE_LOG="$dir/fake.log"
: >"$FAKE_LOG"
printf '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n' >"$dir/fakebin/srun"   # srun OPTIONS CMD: runs CMD
chmod +x "$dir/fakebin/srun"
(cd "$dir" && SLURM_SUBMIT_DIR="$dir" SLURM_JOB_ID=140 SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=8 SLURM_GPUS_PER_TASK=1 SLURM_JOB_END_TIME=2000000000 DSGD_LAUNCH="srun --mpi=pmi2" \
    DSGD_BIN="$dir/fake-dsgd" DSGD_RUNS_DIR=scr/r bash jobs/slurm/dsgd.sbatch t1-allreduce-p2.cfg) >"$dir/fake1.log" 2>&1
grep -q "^args: --p-from-world --set resume=\"auto\" --set output=\"scr/r/t1-allreduce-p2.140.h5\" --set checkpoint.bitwise=false --set stop_at=1999999880 t1-allreduce-p2.cfg" "$FAKE_LOG" \
    && ok "dsgd.sbatch: output in DSGD_RUNS_DIR, checkpoint.bitwise=false, stop_at = SLURM_JOB_END_TIME - 120" || bad "dsgd.sbatch arguments: $(cat "$FAKE_LOG")"
grep -q "^env: MPICH_MAX_THREAD_SAFETY=multiple HYDRA_LAUNCHER_EXTRA_ARGS=--cpu-bind=none SRUN_CPUS_PER_TASK=8 SLURM_GPUS_PER_TASK=1$" "$FAKE_LOG" \
    && ok "dsgd.sbatch: MPICH_MAX_THREAD_SAFETY=multiple, HYDRA_LAUNCHER_EXTRA_ARGS=--cpu-bind=none, srun launch: SRUN_CPUS_PER_TASK from --cpus-per-task" \
    || bad "dsgd.sbatch environment: $(cat "$FAKE_LOG")"
: >"$FAKE_LOG"
end=$(date -d 2030-01-01T00:00:00 +%s)
(cd "$dir" && SLURM_SUBMIT_DIR="$dir" SLURM_JOB_ID=141 SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=8 SLURM_GPUS_PER_TASK=1 DSGD_LAUNCH=env DSGD_BIN="$dir/fake-dsgd" DSGD_STOP_MARGIN_S=300 \
    FAKE_SQUEUE_END=2030-01-01T00:00:00 SLURM_JOB_END_TIME= bash jobs/slurm/dsgd.sbatch t1-allreduce-p2.cfg) >"$dir/fake2.log" 2>&1
grep -q -- "--set stop_at=$((end - 300)) " "$FAKE_LOG" && grep -q "SRUN_CPUS_PER_TASK=unset SLURM_GPUS_PER_TASK=unset$" "$FAKE_LOG" \
    && ok "dsgd.sbatch: stop_at from squeue's end time - DSGD_STOP_MARGIN_S; a launcher other than srun (Hydra's proxies): no SRUN_CPUS_PER_TASK, no per-task GPU request (L7)" \
    || bad "dsgd.sbatch with squeue: $(cat "$FAKE_LOG") $(cat "$dir/fake2.log")"
# The last task of an array has the array's job id; its end time is asked under its own id <array>_<task>.
: >"$FAKE_LOG"
(cd "$dir" && SLURM_SUBMIT_DIR="$dir" SLURM_JOB_ID=142 SLURM_ARRAY_JOB_ID=142 SLURM_ARRAY_TASK_ID=1 SLURM_NTASKS=2 DSGD_LAUNCH=env \
    DSGD_BIN="$dir/fake-dsgd" DSGD_STOP_MARGIN_S=300 FAKE_SQUEUE_END=2030-01-01T00:00:00 FAKE_SQUEUE_ARRAY=142 SLURM_JOB_END_TIME= \
    bash jobs/slurm/dsgd.sbatch pts.list) >"$dir/fake3a.log" 2>&1
grep -q -- "--set stop_at=$((end - 300)) " "$FAKE_LOG" \
    && ok "dsgd.sbatch: an array's last task (job id = array id) asks squeue for its own end time (<array>_<task>): stop_at set" \
    || bad "dsgd.sbatch, array task 142_1: no stop_at: $(cat "$FAKE_LOG") $(cat "$dir/fake3a.log")"
# No end time to be had (squeue fails, SLURM_JOB_END_TIME unset: the job script run by hand), or one
# within the margin: no stop_at (date -d "" is today's midnight, which dsgd-run refused as past: exit 2).
for case_ in "FAKE_SQUEUE_EMPTY=1 SLURM_JOB_END_TIME=" "SLURM_JOB_END_TIME=$(($(date +%s) + 60))"; do
    : >"$FAKE_LOG"
    (cd "$dir" && env $case_ SLURM_SUBMIT_DIR="$dir" SLURM_JOB_ID=143 SLURM_NTASKS=2 DSGD_LAUNCH=env DSGD_BIN="$dir/fake-dsgd" \
        bash jobs/slurm/dsgd.sbatch t1-allreduce-p2.cfg) >"$dir/fake3b.log" 2>&1
    grep -q "^args: " "$FAKE_LOG" && ! grep -q "stop_at" "$FAKE_LOG" && grep -q "no stop_at" "$dir/fake3b.log" \
        && ok "dsgd.sbatch ($case_): no end time or one within the margin: started without stop_at, said so" \
        || bad "dsgd.sbatch ($case_): $(cat "$FAKE_LOG") $(cat "$dir/fake3b.log")"
done
: >"$FAKE_LOG"
printf 'nodeB\nnodeA\nnodeB\n' >"$dir/nodes-il"
start=$(date -d "2030-01-01 00:00:00" +%s)
(cd "$dir" && PBS_O_WORKDIR="$dir" PBS_JOBID='400[1].srv' PBS_ARRAY_INDEX=1 PBS_NODEFILE="$dir/nodes-il" EXP=pts.list FAKE_QSTAT=1 \
    DSGD_MPIEXEC="$dir/fake-mpiexec" DSGD_BIN="$dir/fake-dsgd" bash jobs/pbs/dsgd.pbs) >"$dir/fake3.log" 2>&1
grep -q "^hosts: nodeA nodeB nodeB $" "$FAKE_LOG" && grep -q "^mpiexec: -n 3 -f .* --set output=\"runs/t1-allreduce-p2.400_1.h5\" --set checkpoint.bitwise=false --set stop_at=$((start + 7200 - 120)) t1-allreduce-p2.cfg" "$FAKE_LOG" \
    && ok "dsgd.pbs: host file sorted (L11), array task 400[1] -> run id 400_1, stop_at = stime + walltime - 120" || bad "dsgd.pbs: $(cat "$FAKE_LOG") $(cat "$dir/fake3.log")"
: >"$FAKE_LOG"
now=$(date +%s)
(cd "$dir" && PBS_O_WORKDIR="$dir" PBS_JOBID=403.srv PBS_NODEFILE="$dir/nodes-il" EXP=t1-allreduce-p2.cfg FAKE_QSTAT=1 FAKE_QSTAT_NOSTIME=1 \
    DSGD_MPIEXEC="$dir/fake-mpiexec" DSGD_BIN="$dir/fake-dsgd" bash jobs/pbs/dsgd.pbs) >"$dir/fake3c.log" 2>&1
sa=$(sed -n 's/.*--set stop_at=\([0-9]*\).*/\1/p' "$FAKE_LOG")
[ -n "$sa" ] && [ "$sa" -ge $((now + 7200 - 120)) ] && [ "$sa" -le $((now + 7200 - 120 + 60)) ] \
    && ok "dsgd.pbs: no stime in qstat: stop_at from this script's start + walltime - 120 (not today's midnight)" \
    || bad "dsgd.pbs without stime: stop_at '$sa', now $now: $(cat "$FAKE_LOG") $(cat "$dir/fake3c.log")"
: >"$FAKE_LOG"
(cd "$dir" && PBS_O_WORKDIR="$dir" PBS_JOBID=401.srv PBS_NODEFILE="$dir/nodes-il" EXP=t1-allreduce-p2.cfg DSGD_HOSTFILE_UNIQ=1 \
    DSGD_MPIEXEC="$dir/fake-mpiexec" DSGD_BIN="$dir/fake-dsgd" bash jobs/pbs/dsgd.pbs) >"$dir/fake4.log" 2>&1
grep -q "^hosts: nodeA nodeB $" "$FAKE_LOG" && ok "dsgd.pbs: DSGD_HOSTFILE_UNIQ=1 (PALS): one line per host" || bad "dsgd.pbs uniq: $(cat "$FAKE_LOG")"
for f in jobs/slurm/dsgd.sbatch jobs/pbs/dsgd.pbs; do
    grep -q '^export MPICH_MAX_THREAD_SAFETY=${MPICH_MAX_THREAD_SAFETY:-multiple}$' "$f" || bad "$f: no MPICH_MAX_THREAD_SAFETY=multiple (L8)"
done
grep -q "^#PBS -V$" jobs/pbs/dsgd.pbs && grep -q "^#PBS -l place=scatter:excl$" jobs/pbs/dsgd.pbs \
    && ok "dsgd.pbs site block: #PBS -V (B2), place=scatter:excl (L2)" || bad "dsgd.pbs site block: no -V or place"

# 2d. sweep.py: resources, time, chains, --continue, --runs-dir, a binary that dies of a signal.
#     Fake sbatch / qsub on PATH print job ids and log their arguments.
cat >"$dir/fakebin/sbatch" <<'FAKE'
#!/bin/sh
n=$(cat "$FAKE_IDS" 2>/dev/null || echo 500); echo $((n + 1)) >"$FAKE_IDS"; echo "$*" >>"$FAKE_SUBMITS"; echo "$n"
FAKE
cat >"$dir/fakebin/qsub" <<'FAKE'
#!/bin/sh
n=$(cat "$FAKE_IDS" 2>/dev/null || echo 700); echo $((n + 1)) >"$FAKE_IDS"; echo "$*" >>"$FAKE_SUBMITS"
case " $* " in *" -J "*) echo "$n[].srv" ;; *) echo "$n.srv" ;; esac
FAKE
chmod +x "$dir/fakebin"/*
export FAKE_SUBMITS="$dir/submits" FAKE_IDS="$dir/ids"
repo=$(pwd)
(cd "$dir" && $PY "$repo/tools/sweep.py" "$repo/configs/linear.cfg" --vary method=allreduce,gossip_pull --vary p=2 --name ch \
    --array --time 10 --chain 3 --runs-dir scr/runs) >"$dir/ch.log" 2>&1
rc=$?
$PY - "$dir/sweeps/ch/sweep.json" <<'PYEOF' >"$dir/ch.check" 2>&1 && [ $rc = 0 ] && ok "sweep.py --array --time 10 --chain 3 --runs-dir: 3 links, afterany on the link before, DSGD_RUN_ID = link 0's id, run ids 500_0/500_1, sweep.json runs_dir/time/chain" || bad "sweep chain: exit $rc: $(cat "$dir/ch.check" "$dir/ch.log")"
import json, sys
s = json.load(open(sys.argv[1]))
assert (s["runs_dir"], s["time"], s["chain"]) == ("scr/runs", "10", 3), (s["runs_dir"], s["time"], s["chain"])
j = s["jobs"]
assert [x["link"] for x in j] == [0, 1, 2] and [x["job_id"] for x in j] == ["500", "501", "502"], j
for x in j:
    assert x["run_ids"] == {"ch-allreduce-p2": "500_0", "ch-gossip_pull-p2": "500_1"}, x["run_ids"]
c0, c1, c2 = (x["command"] for x in j)
assert "--time=10" in c0 and "--exclusive" in c0 and "--mem=0" in c0 and "--array=0-1" in c0, c0
assert "--export=ALL,DSGD_RUNS_DIR=scr/runs" in c0 and not any("DSGD_RUN_ID" in a or "dependency" in a for a in c0), c0
assert "--export=ALL,DSGD_RUNS_DIR=scr/runs,DSGD_RUN_ID=500" in c1 and "--dependency=afterany:500" in c1 and "--array=0-1" in c1, c1
assert "--dependency=afterany:501" in c2 and "--export=ALL,DSGD_RUNS_DIR=scr/runs,DSGD_RUN_ID=500" in c2, c2
PYEOF
# --continue: point 0's run completed, point 1's interrupted: one more job, for point 1 alone.
mkdir -p "$dir/scr/runs"
cp "$dir/runs/t1-allreduce-p2.101.h5" "$dir/scr/runs/ch-allreduce-p2.500_0.h5"
cp "$dir/interrupted.h5" "$dir/scr/runs/ch-gossip_pull-p2.500_1.h5"
: >"$FAKE_SUBMITS"
(cd /tmp && $PY "$repo/tools/sweep.py" --continue "$dir/sweeps/ch" --dsgd "$repo/dsgd-run") >"$dir/cont-sweep.log" 2>&1
rc=$?
$PY - "$dir/sweeps/ch/sweep.json" <<'PYEOF' >"$dir/cs.check" 2>&1 && [ $rc = 0 ] && [ "$(wc -l <"$FAKE_SUBMITS")" = 1 ] && ok "sweep.py --continue: the interrupted point alone resubmitted (link 3, DSGD_RUN_ID=500_1, its own file, no array), the completed one not (T3)" || bad "sweep --continue: exit $rc: $(cat "$dir/cs.check" "$dir/cont-sweep.log")"
import json, sys
s = json.load(open(sys.argv[1]))
j = s["jobs"]
assert len(j) == 4, j
x = j[3]
assert x["link"] == 3 and x["points"] == ["ch-gossip_pull-p2"] and x["run_ids"] == {"ch-gossip_pull-p2": "500_1"} and x["job_id"] == "503", x
c = x["command"]
assert "--export=ALL,DSGD_RUNS_DIR=scr/runs,DSGD_RUN_ID=500_1" in c and not any(a.startswith(("--array", "--dependency")) for a in c), c
assert c[-1].endswith("sweeps/ch/ch-gossip_pull-p2.cfg") and "--time=10" in c and "--nodes=2" in c, c
PYEOF
# PBS: chunks of whole nodes (ncpus = --cores-per-node, place=scatter:excl), walltime, depend on the array id.
rm -f "$FAKE_IDS"
(cd "$dir" && $PY "$repo/tools/sweep.py" "$repo/configs/linear.cfg" --vary method=allreduce,gossip_pull --vary p=2 --name chp \
    --array --time 00:10:00 --chain 2 --scheduler pbs --cores-per-node 8) >"$dir/chp.log" 2>&1
rc=$?
$PY - "$dir/sweeps/chp/sweep.json" <<'PYEOF' >"$dir/chp.check" 2>&1 && [ $rc = 0 ] && ok "sweep.py --scheduler pbs --chain 2: select=2:ncpus=8, place=scatter:excl, walltime, depend=afterany:700[].srv, DSGD_RUN_ID=700, run ids 700_0/700_1" || bad "sweep pbs chain: exit $rc: $(cat "$dir/chp.check" "$dir/chp.log")"
import json, sys
s = json.load(open(sys.argv[1]))
j = s["jobs"]
c0, c1 = j[0]["command"], j[1]["command"]
assert c0[:9] == ["qsub", "-l", "select=2:ncpus=8:mpiprocs=1", "-l", "place=scatter:excl", "-l", "walltime=00:10:00", "-v", c0[8]], c0
assert ",DSGD_RUNS_DIR=runs" in c0[8] and "-J" in c0, c0
assert ["-W", "depend=afterany:700[].srv"] == c1[c1.index("-W"):c1.index("-W") + 2] and c1[8].endswith(",DSGD_RUN_ID=700"), c1
assert j[1]["run_ids"] == {"chp-allreduce-p2": "700_0", "chp-gossip_pull-p2": "700_1"}, j[1]
PYEOF
cp "$dir/interrupted.h5" "$dir/runs/chp-allreduce-p2.700_0.h5" && cp "$dir/runs/t1-allreduce-p2.101.h5" "$dir/runs/chp-gossip_pull-p2.700_1.h5"
: >"$FAKE_SUBMITS"
(cd "$dir" && $PY "$repo/tools/sweep.py" --continue sweeps/chp --dsgd "$repo/dsgd-run") >"$dir/cont-pbs.log" 2>&1
rc=$?
$PY - "$dir/sweeps/chp/sweep.json" <<'PYEOF' >"$dir/cp.check" 2>&1 && [ $rc = 0 ] && [ "$(wc -l <"$FAKE_SUBMITS")" = 1 ] && ok "sweep.py --continue (PBS): qsub for the interrupted point alone, EXP its own file, DSGD_RUN_ID=700_0, no -J / -W" || bad "sweep --continue pbs: exit $rc: $(cat "$dir/cp.check" "$dir/cont-pbs.log")"
import json, sys
j = json.load(open(sys.argv[1]))["jobs"]
x = j[-1]
assert len(j) == 3 and x["link"] == 2 and x["points"] == ["chp-allreduce-p2"] and x["run_ids"] == {"chp-allreduce-p2": "700_0"}, x
c = x["command"]
assert "-J" not in c and "-W" not in c and c[:7] == ["qsub", "-l", "select=2:ncpus=8:mpiprocs=1", "-l", "place=scatter:excl", "-l", "walltime=00:10:00"], c
env = c[c.index("-v") + 1].split(",")
assert env[0] == "EXP=sweeps/chp/chp-allreduce-p2.cfg" and env[-1] == "DSGD_RUN_ID=700_0", env
PYEOF
$PY tools/sweep.py configs/linear.cfg --vary p=2 --name t5 --dir "$dir/sweeps" --scheduler pbs --dry-run >"$dir/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "give --cores-per-node" "$dir/log" && ok "PBS CPU points without --cores-per-node: refused (L2)" || bad "pbs without cores: exit $rc: $(cat "$dir/log")"
$PY tools/sweep.py configs/linear.cfg --vary p=2 --name t6 --dir "$dir/sweeps" --cpus-per-rank 4 --dry-run >"$dir/log" 2>&1
grep -q -- "--cpus-per-task=4 " "$dir/log" && ! grep -q -- "--exclusive" "$dir/log" && ok "--cpus-per-rank 4: --cpus-per-task=4 instead of --exclusive (L1)" || bad "cpus-per-rank: $(cat "$dir/log")"
$PY tools/sweep.py configs/linear.cfg --vary p=2 --name t7 --dir "$dir/sweeps" --require-time --dry-run >"$dir/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "no time limit: give --time" "$dir/log" && [ ! -e "$dir/sweeps/t7" ] && ok "--require-time without a time limit: refused, nothing written (T1)" || bad "require-time: exit $rc: $(cat "$dir/log")"
$PY tools/sweep.py configs/linear.cfg --vary p=2 --name t8 --dir "$dir/sweeps" --chain 2 --dry-run >"$dir/log" 2>&1
[ $? = 2 ] && grep -q "chain needs --time" "$dir/log" && ok "--chain without --time: refused" || bad "chain without time: $(cat "$dir/log")"
printf '#!/bin/sh\nkill -ILL $$\n' >"$dir/sigill-dsgd"
chmod +x "$dir/sigill-dsgd"
$PY tools/sweep.py configs/linear.cfg --vary p=2 --name t9 --dir "$dir/sweeps" --dsgd "$dir/sigill-dsgd" --dry-run >"$dir/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "died of signal SIGILL (an instruction this CPU lacks" "$dir/log" && ok "a dsgd-run that dies of SIGILL is named as such (B4)" || bad "SIGILL: exit $rc: $(cat "$dir/log")"

# 2e. sweep.py --local, then --continue of that sweep: both points stopped by SIGTERM at step 20
# (DSGD_TEST_SIGNAL, exit 3 with a checkpoint: INTERRUPTED); p1's run file kept, p2's removed. --continue
# resumes p1 into its own run file (--resume, a new link of the same run id) and runs p2 afresh
# under a new run id; once both are completed a second --continue (--local) runs nothing; a
# scheduled sweep is not continued --local.
L="--set iterations=40 --set eval.every=20 --set log_every=10"
env DSGD_TEST_SIGNAL=TERM@20 timeout 300 $PY tools/sweep.py configs/linear.cfg --vary p=1,2 --name lc --dir "$dir/sweeps" \
    --runs-dir "$dir/lruns" --local --local-timeout 120 $L >"$dir/lc1.log" 2>&1
rc=$?
r1=$(ls "$dir/lruns"/lc-p1.*.h5 2>/dev/null) r2=$(ls "$dir/lruns"/lc-p2.*.h5 2>/dev/null)
./dsgd-run --status "$r1" >/dev/null 2>&1
s1=$?
if [ $rc = 1 ] && [ $s1 = 3 ] && [ -n "$r2" ]; then
    # a point that exits 3 (stopped with a checkpoint) is INTERRUPTED, not FAILED: in sweep.json, the
    # sweep's summary and the report's jobs, as a Slurm point's run is "interrupted ... resumable"
    $PY tools/report.py "$dir/sweeps/lc" --out "$dir/lcrep" >"$dir/lcrep.txt" 2>&1
    $PY - "$dir/sweeps/lc/sweep.json" "$dir/lcrep.md" "$dir/sweeps/lc" <<'PYEOF' >"$dir/lc0.check" 2>&1 \
        && grep -q "^sweep.py: 2 point(s) in $dir/sweeps/lc/ run here (--local), 2 interrupted (tools/sweep.py --continue $dir/sweeps/lc goes on)$" "$dir/lc1.log" \
        && ok "--local points that exit 3: INTERRUPTED 3:0 in sweep.json and the report, 'interrupted (SIGTERM) at step 20 of 40, checkpoint written; resumable'" \
        || bad "--local exit 3 shown: $(cat "$dir/lc0.check" "$dir/lc1.log")"
import json, sys
sw, md, d = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), sys.argv[3]
assert [(j["local"]["state"], j["local"]["exit"]) for j in sw["jobs"]] == [("INTERRUPTED", "3:0")] * 2, [j["local"] for j in sw["jobs"]]
for j in sw["jobs"]:
    stem, jid = j["points"][0], j["job_id"]
    row = next(l for l in md.splitlines() if l.startswith(f"| {stem} | {jid} | "))
    assert f" | {jid} INTERRUPTED 3:0 " in row and "FAILED" not in row, row
    assert row.endswith(f"| interrupted (SIGTERM) at step 20 of 40, checkpoint written (job {jid}: INTERRUPTED, exit 3:0); "
                        f"resumable: tools/sweep.py --continue {d} |"), row
assert "States: 2 interrupted." in md, md
PYEOF
    rm -f "$r2"
    timeout 300 $PY tools/sweep.py --continue "$dir/sweeps/lc" >"$dir/lc2.log" 2>&1
    rc=$?
    $PY - "$dir/sweeps/lc/sweep.json" "$r1" "$r2" "$dir/lruns" <<'PYEOF' >"$dir/lc.check" 2>&1 && [ $rc = 0 ] && ./dsgd-run --status "$r1" >/dev/null \
        && ok "sweep.py --continue of a --local sweep: p1 resumed into its run file (link 1, --resume), p2 run afresh under a new run id, both completed" \
        || bad "--continue --local sweep: exit $rc: $(cat "$dir/lc.check" "$dir/lc2.log")"
import sys, json, glob, os, h5py
sw, r1, r2, runs = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
j = sw["jobs"]
assert len(j) == 4 and all(x["local"]["state"] == "COMPLETED" for x in j[2:]), [(x["job_id"], x["local"]) for x in j]
rid1 = j[0]["run_ids"]["lc-p1"]
assert j[2]["points"] == ["lc-p1"] and j[2]["link"] == 1 and j[2]["run_ids"] == {"lc-p1": rid1} and j[2]["job_id"] == rid1 + "_r1", j[2]
assert "--resume" in j[2]["command"] and f'output="{r1}"' in j[2]["command"], j[2]["command"]
assert j[3]["points"] == ["lc-p2"] and j[3]["link"] == 0 and "--resume" not in j[3]["command"], j[3]
new2 = os.path.join(runs, f"lc-p2.{j[3]['run_ids']['lc-p2']}.h5")
assert new2 != r2 and not os.path.exists(r2) and os.path.exists(new2), (new2, r2)
for f in (r1, new2):
    h = h5py.File(f, "r")
    st = h.attrs["status"]
    st = st.decode() if isinstance(st, bytes) else st
    assert st.startswith("completed") and h["train/step"][-1] == 40, (f, st)
assert sorted(glob.glob(os.path.join(runs, "*.h5"))) == sorted([r1, new2]), glob.glob(os.path.join(runs, "*.h5"))
PYEOF
    m1=$(stat -c %Y "$r1")
    timeout 120 $PY tools/sweep.py --local --continue "$dir/sweeps/lc" >"$dir/lc3.log" 2>&1
    rc=$?
    n=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['jobs']))" "$dir/sweeps/lc/sweep.json")
    [ $rc = 0 ] && [ "$n" = 4 ] && [ "$(grep -c ' completed$' "$dir/lc3.log")" = 2 ] && [ "$(stat -c %Y "$r1")" = "$m1" ] \
        && ok "--local --continue of a completed sweep: both points skipped, nothing run" || bad "continue completed: exit $rc, $n jobs: $(cat "$dir/lc3.log")"
else bad "sweep --local with SIGTERM at step 20: exit $rc, p1 status $s1, files '$r1' '$r2': $(cat "$dir/lc1.log")"; fi
$PY tools/sweep.py --local --continue "$dir/sweeps/ch" --dsgd "$repo/dsgd-run" >"$dir/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "a sweep submitted to slurm" "$dir/log" && ok "--local --continue of a scheduled sweep: refused" || bad "--local --continue ch: exit $rc: $(cat "$dir/log")"

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
