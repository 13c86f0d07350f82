#!/bin/sh
# test_report.sh — tools/report.py names the state of every point of a sweep from sweep.json's job
# ids and the scheduler's accounting (issue 22, R1-R3): fake `sacct`, `squeue` and `qstat` on PATH
# answer with canned records (formats of Slurm 22.05 sacct(1) -n -P -X and OpenPBS qstat -x -f
# [-F json]); the run files come from real short runs of configs/linear.cfg on 2 ranks: completed,
# a status removed (running), rank 0 SIGKILLed mid-run (killed), SIGTERM with a checkpoint (timed
# out; the first link of a chain of 3; a fresh restart beside a completed run), and a truncated
# copy. Then the same without accounting (stale by the file's age) and PBS. Runs from the
# repository root with ./dsgd-run built (DSGD=... for another binary); every mpiexec under a timeout.
#     sh test/test_report.sh
set -u
PY=/usr/bin/python3
T=${TEST_MPI_TIMEOUT:-120}
DSGD=${DSGD:-./dsgd-run}
case $DSGD in /*) ;; *) DSGD=$(pwd)/$DSGD ;; esac
REPO=$(pwd)
dir=$(mktemp -d /tmp/dsgd-report.XXXXXX)
bg=
trap '[ -n "$bg" ] && kill $bg 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
row() { grep -F -- "$1" "$dir/rep.md" >/dev/null; }  # a fixed string in the report

# 1. a sweep of 9 points (3 methods x 3 b), written but not submitted; the run files by hand.
mkdir -p "$dir/r/runs"
(cd "$dir/r" && $PY "$REPO/tools/sweep.py" "$REPO/configs/linear.cfg" --vary method=allreduce,gossip_pull,gossip_push --vary b=16,32,64 \
    --dsgd "$DSGD" --set iterations=200 --set eval.every=20 --set log_every=10 --name s --dry-run >"$dir/sweep.log" 2>&1) \
    || { echo "FAIL: sweep.py: $(tail -n 3 "$dir/sweep.log")"; exit 1; }
S="$dir/r/sweeps/s"
run() {  # run POINT ID [dsgd-run args...]: mpiexec -n 2 of the point's experiment into runs/POINT.ID.h5
    pt=$1 id=$2
    shift 2
    timeout -k 5 $T mpiexec -n 2 "$DSGD" "$@" --set "output=\"$dir/r/runs/s-$pt.$id.h5\"" "$S/s-$pt.cfg" >"$dir/run-$pt.$id.log" 2>&1
}
run allreduce-b16 1001 || bad "run allreduce-b16: $(tail -n 2 "$dir/run-allreduce-b16.1001.log")"
run allreduce-b32 1002 || bad "run allreduce-b32"
run gossip_push-b64 1011 || bad "run gossip_push-b64"
# SIGTERM at step 120 (a time limit's signal): checkpoint, status "interrupted", exit 3.
for spec in gossip_pull-b64:1006 gossip_push-b16:1007 gossip_push-b64:1012; do
    DSGD_TEST_SIGNAL=TERM@120 run "${spec%:*}" "${spec#*:}"
    rc=$?
    [ $rc = 3 ] || bad "run $spec with SIGTERM: exit $rc, expected 3: $(tail -n 2 "$dir/run-${spec%:*}.${spec#*:}.log")"
done
# Killed: rank 0 (the run file's writer) SIGKILLed after a checkpoint at step 100, mid-run.
timeout -k 5 $T mpiexec -n 2 "$DSGD" --set iterations=100000 --set checkpoint.every=100 \
    --set "output=\"$dir/r/runs/s-gossip_pull-b32.1005.h5\"" "$S/s-gossip_pull-b32.cfg" >"$dir/kill.log" 2>&1 &
bg=$!
i=0
while [ $i -lt 600 ] && ! grep -q "checkpoint: step 100 written" "$dir/kill.log" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kids() { for c in $(ps -o pid= --ppid "$1"); do echo "$c"; kids "$c"; done; }
rank0=
for c in $(kids $bg); do
    [ "$(cat /proc/$c/comm 2>/dev/null)" = dsgd-run ] && tr '\0' '\n' </proc/$c/environ 2>/dev/null | grep -qx 'PMI_RANK=0' && rank0=$c
done
if [ -n "$rank0" ]; then
    sleep 1
    kill -KILL "$rank0"
    for c in $(kids $bg); do kill -KILL "$c" 2>/dev/null; done
else
    bad "no rank 0 found to kill: $(tail -n 3 "$dir/kill.log")"
fi
wait $bg 2>/dev/null
bg=
# The status of 1002 removed (a run still going); a truncated copy of 1001 (an interrupted copy).
$PY - "$dir/r/runs" <<'EOF' || bad "cannot prepare the run files"
import h5py, os, sys
d = sys.argv[1]
with h5py.File(os.path.join(d, "s-allreduce-b32.1002.h5"), "r+") as f:
    del f.attrs["status"]
with h5py.File(os.path.join(d, "s-gossip_pull-b32.1005.h5"), "r") as f:
    assert f.attrs["status"].decode().strip("\0") == "", "the killed run has a status"
data = open(os.path.join(d, "s-allreduce-b16.1001.h5"), "rb").read()
open(os.path.join(d, "s-gossip_push-b32.1010.h5"), "wb").write(data[: len(data) * 2 // 5])
EOF
ck=$(cat "$dir/r/runs/s-gossip_pull-b32.1005.ckpt/latest" 2>/dev/null)
[ -n "$ck" ] && ok "killed run: checkpoint $ck, empty status" || bad "killed run: no checkpoint"

# 2. sweep.json: as submitted (today's format: job_id per entry) plus, for gossip_push-b16, a chain
#    of 3 links (INTERFACES.md: chain, link, run_ids); 1012 was submitted by hand (not in sweep.json).
$PY - "$S/sweep.json" <<'EOF' || bad "cannot write sweep.json"
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["dry_run"] = False
ids = {"allreduce-b16": "1001", "allreduce-b32": "1002", "allreduce-b64": "1003", "gossip_pull-b16": "1004",
       "gossip_pull-b32": "1005", "gossip_pull-b64": "1006", "gossip_push-b16": "1007", "gossip_push-b32": "1010",
       "gossip_push-b64": "1011"}
for j in d["jobs"]:
    j["job_id"] = ids[j["points"][0][2:]]
d["chain"], d["time"], d["runs_dir"] = 3, "00:10:00", "runs"
chain = next(j for j in d["jobs"] if j["job_id"] == "1007")
for j in d["jobs"]:
    j["link"], j["run_ids"] = 0, {j["points"][0]: j["job_id"]}
for k, jid in ((1, "1008"), (2, "1009")):
    d["jobs"].append(dict(chain, link=k, job_id=jid))
json.dump(d, open(p, "w"), indent=1)
EOF

# 3. fake sacct: the records of Slurm 22.05 `sacct -n -P -X -j IDS -o JobID,JobIDRaw,State,ExitCode,Elapsed`.
mkdir -p "$dir/bin"
cat >"$dir/bin/sacct" <<EOF
#!/bin/sh
echo "\$*" >>"$dir/sacct.args"
cat <<'REC'
1001|1001|COMPLETED|0:0|00:00:09
1002|1002|RUNNING|0:0|00:00:31
1003|1003|PENDING|0:0|00:00:00
1004|1004|FAILED|2:0|00:00:01
1005|1005|OUT_OF_MEMORY|0:125|00:00:20
1006|1006|TIMEOUT|0:0|00:10:02
1007|1007|FAILED|3:0|00:09:58
1008|1008|PENDING|0:0|00:00:00
1009|1009|PENDING|0:0|00:00:00
1010|1010|COMPLETED|0:0|00:00:08
1011|1011|COMPLETED|0:0|00:00:09
1012|1012|CANCELLED by 1000|0:15|00:00:12
REC
EOF
chmod +x "$dir/bin/sacct"
PATH="$dir/bin:$PATH" $PY tools/report.py "$S" --out "$dir/rep" --targets 0.3,0.2 >"$dir/rep.txt" 2>"$dir/rep.err"
rc=$?
[ $rc = 0 ] && [ -s "$dir/rep.md" ] && [ -s "$dir/rep.png" ] && ok "report with sacct: exit 0, rep.md and rep.png written" \
    || bad "report.py: exit $rc: $(tail -n 5 "$dir/rep.err")"
grep -q -- "-n -P -X -j 1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012 -o JobID,JobIDRaw,State,ExitCode,Elapsed" "$dir/sacct.args" \
    && ok "sacct asked once for the sweep's 11 jobs and the hand-submitted run 1012" || bad "sacct arguments: $(cat "$dir/sacct.args")"
chk() {  # chk DESCRIPTION FIXED-STRING
    row "$2" && ok "$1" || { bad "$1: no '$2' in: $(grep -F "| s-" "$dir/rep.md")"; }
}
chk "completed" "| s-allreduce-b16 | 1001 | 1001 COMPLETED 0:0 00:00:09 | completed (step 200 of 200) |"
chk "running (sacct RUNNING, empty status)" "| s-allreduce-b32 | 1002 | 1002 RUNNING 0:0 00:00:31 | running (job 1002, link 1 of 3, step 200 of 200) |"
chk "pending (no run file, sacct PENDING)" "| s-allreduce-b64 | 1003 | 1003 PENDING 0:0 00:00:00 | pending (job 1003, link 1 of 3) |"
chk "failed before a run file (exit 2)" "| s-gossip_pull-b16 | 1004 | 1004 FAILED 2:0 00:00:01 | failed before a run file (job 1004, link 1 of 3: FAILED, exit 2:0) |"
chk "killed (SIGKILL, OUT_OF_MEMORY), with its checkpoint" "| s-gossip_pull-b32 | 1005 | 1005 OUT_OF_MEMORY 0:125 00:00:20 | killed at step"
chk "killed: the checkpoint and the continue command" "(job 1005, link 1 of 3: OUT_OF_MEMORY, exit 0:125); checkpoint $ck: resumable: tools/sweep.py --continue $S |"
chk "timed out with a checkpoint" "| s-gossip_pull-b64 | 1006 | 1006 TIMEOUT 0:0 00:10:02 | timed out at step 120 of 200, checkpoint written (job 1006, link 1 of 3: TIMEOUT, exit 0:0); resumable: tools/sweep.py --continue $S |"
chk "chained: link 1 of 3 interrupted, link 2 of 3 pending" "| s-gossip_push-b16 | 1007 | 1007 (link 1) FAILED 3:0 00:09:58; 1008 (link 2) PENDING 0:0 00:00:00; 1009 (link 3) PENDING 0:0 00:00:00 | interrupted (SIGTERM) at step 120 of 200, checkpoint written; next: job 1008, link 2 of 3, pending |"
chk "truncated run file: named, skipped" "| s-gossip_push-b32 | 1010 | 1010 COMPLETED 0:0 00:00:08 | unreadable run file (OSError: Unable to"
chk "a completed run" "| s-gossip_push-b64 | 1011 | 1011 COMPLETED 0:0 00:00:09 | completed (step 200 of 200) |"
chk "and its fresh restart by hand (another run id): its own row" "| s-gossip_push-b64 | 1012 | 1012 CANCELLED 0:15 00:00:12 | interrupted (SIGTERM) at step 120 of 200, checkpoint written (job 1012: CANCELLED by 1000, exit 0:15); resumable: tools/sweep.py --continue $S |"
grep -q "skipped $dir/r/runs/s-gossip_push-b32.1010.h5: OSError" "$dir/rep.err" && row "Unreadable run files (skipped): $dir/r/runs/s-gossip_push-b32.1010.h5: OSError" \
    && ok "the truncated file named on stderr and in the report" || bad "truncated file not named: $(cat "$dir/rep.err")"
chk "pending line" "Pending (no run file yet): s-allreduce-b64"
chk "failed-before line" "Failed before a run file: s-gossip_pull-b16 (job 1004, link 1 of 3: FAILED, exit 2:0)"
chk "the state counts" "States: 1 running, 1 chained, 1 pending, 1 interrupted, 1 timed out, 1 killed, 1 failed before a run file, 1 unreadable, 2 completed."
# R2: the completed run and the interrupted restart of gossip_push-b64 are flagged, not averaged:
# the final top-1 error is the completed run's.
want=$($PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f'{f[\"eval/top1_error\"][-1]:.4f}')" "$dir/r/runs/s-gossip_push-b64.1011.h5")
other=$($PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f'{f[\"eval/top1_error\"][-1]:.4f}')" "$dir/r/runs/s-gossip_push-b64.1012.h5")
grep -q "^| 2 | gossip_push (s-gossip_push-b64) | 2 | ⚠ 1 completed, 1 interrupted: numbers from the completed run only | 64 | .* | $want | " "$dir/rep.md" \
    && [ "$want" != "$other" ] && ok "R2: completed + interrupted restart flagged; final top-1 $want is the completed run's (the restart's: $other)" \
    || bad "R2 row: $(grep 'gossip_push (s-gossip_push-b64)' "$dir/rep.md") (want $want, other $other)"
grep -q "^| 2 | gossip_pull (s-gossip_pull-b32) | 1 | killed | 32 | " "$dir/rep.md" && ok "the main table: killed" || bad "main table killed row"
grep -q "^| 2 | allreduce (s-allreduce-b32) | 1 | running | 32 | .* (so far) | " "$dir/rep.md" && ok "the main table: running, numbers so far" \
    || bad "main table running row: $(grep 's-allreduce-b32' "$dir/rep.md")"

# The runs directory given too, before the sweep: each file still reported once, with its jobs.
PATH="$dir/bin:$PATH" $PY tools/report.py "$dir/r/runs" "$S" --out "$dir/rep2" --targets 0.3,0.2 >/dev/null 2>&1
[ "$(grep -c '^| s-' "$dir/rep2.md")" = 10 ] && grep -q "^| s-gossip_push-b16 | 1007 | 1007 (link 1) FAILED" "$dir/rep2.md" \
    && ok "runs directory and sweep together: 10 rows, the jobs kept" || bad "runs dir + sweep: $(grep '^| s-' "$dir/rep2.md")"
[ -n "${TEST_REPORT_KEEP:-}" ] && cp "$dir/rep.md" "$dir/rep.png" "$TEST_REPORT_KEEP/"  # a sample of the report (a directory)

# 4. no accounting (sacct fails as without slurmdbd; squeue fails too): states from the run files.
#    The killed run's file is an hour old: stale; the one without a status and a fresh file: running.
mkdir -p "$dir/bin2"
printf '#!/bin/sh\necho "sacct: error: Slurm accounting storage is disabled" >&2\nexit 1\n' >"$dir/bin2/sacct"
printf '#!/bin/sh\necho "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2\nexit 1\n' >"$dir/bin2/squeue"
chmod +x "$dir/bin2/sacct" "$dir/bin2/squeue"
touch -d '1 hour ago' "$dir/r/runs/s-gossip_pull-b32.1005.h5"
PATH="$dir/bin2:$PATH" $PY tools/report.py "$S" --out "$dir/rep" --targets 0.3,0.2 --overwrite >"$dir/rep.txt" 2>"$dir/rep.err"
rc=$?
[ $rc = 0 ] && ok "report without accounting: exit 0" || bad "report without accounting: exit $rc: $(tail -n 3 "$dir/rep.err")"
chk "no accounting: said so" "Scheduler (slurm): sacct failed: sacct: error: Slurm accounting storage is disabled; sacct -c failed: sacct: error: Slurm accounting storage is disabled; squeue failed: slurm_load_jobs error: Unable to contact slurm controller (connect failure); states from the run files alone."
grep -q "^| s-gossip_pull-b32 | 1005 | 1005 (no record) | stale (no publication for 36[0-9][0-9] s) at step [0-9]* of 100000; checkpoint $ck: resumable" "$dir/rep.md" \
    && ok "no accounting: the killed run is stale (no publication for ~3600 s)" || bad "stale row: $(grep 's-gossip_pull-b32 ' "$dir/rep.md")"
chk "no accounting: a fresh file without a status is running" "| s-allreduce-b32 | 1002 | 1002 (no record) | running (step 200 of 200) |"
chk "no accounting: no run file" "| s-allreduce-b64 | 1003 | 1003 (no record) | no run file yet (job 1003, link 1 of 3, unknown to the scheduler's accounting) |"
PATH="$dir/bin2:$PATH" $PY tools/report.py "$S" --out "$dir/rep" --targets 0.3,0.2 --overwrite --stale-after 5 >/dev/null 2>&1
chk "--stale-after 5: the same file called stale sooner... (the killed run)" "stale (no publication for 36"

# 4b. sacct without a database, squeue (`--states=all -h -r -j IDS -o "%i|%A|%T|%r"`) answering for
#     the jobs the controller holds: running, pending with its reason, the chain's next link.
mkdir -p "$dir/bin3"
cp "$dir/bin2/sacct" "$dir/bin3/sacct"
cat >"$dir/bin3/squeue" <<EOF
#!/bin/sh
echo "\$*" >>"$dir/squeue.args"
printf '1002|1002|RUNNING|None\n1003|1003|PENDING|Priority\n1008|1008|PENDING|Dependency\n1009|1009|PENDING|Dependency\n1006|1006|TIMEOUT|TimeLimit\n'
EOF
chmod +x "$dir/bin3/squeue"
PATH="$dir/bin3:$PATH" $PY tools/report.py "$S" --out "$dir/rep" --targets 0.3,0.2 --overwrite >"$dir/rep.txt" 2>"$dir/rep.err"
rc=$?
[ $rc = 0 ] || bad "report with squeue: exit $rc: $(tail -n 3 "$dir/rep.err")"
grep -q -- "--states=all -h -r -j 1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012 -o %i|%A|%T|%r" "$dir/squeue.args" \
    || bad "squeue arguments: $(cat "$dir/squeue.args")"
chk "squeue: running" "| s-allreduce-b32 | 1002 | 1002 RUNNING | running (job 1002, link 1 of 3, step 200 of 200) |"
chk "squeue: pending, with the reason" "| s-allreduce-b64 | 1003 | 1003 PENDING | pending (job 1003, link 1 of 3: Priority) |"
chk "squeue: the chain's next link" "next: job 1008, link 2 of 3: Dependency, pending |"
chk "squeue: timed out" "| s-gossip_pull-b64 | 1006 | 1006 TIMEOUT | timed out at step 120 of 200, checkpoint written (job 1006, link 1 of 3: TIMEOUT); resumable"
chk "squeue: a job it no longer holds: from the run file" "| s-gossip_pull-b32 | 1005 | 1005 (no record) | stale (no publication for 36"
chk "squeue: said so" "Scheduler (slurm): sacct failed: sacct: error: Slurm accounting storage is disabled; sacct -c failed: sacct: error: Slurm accounting storage is disabled; squeue (jobs the controller holds) used instead."

# 4b'. Slurm's own sacct (Debian's slurm-client) without a database: `sacct -c` reads the job
#     completion log (JobCompType=jobcomp/filetxt, records as slurmctld writes them); squeue (the
#     fake of 4b) the queue. Skipped where sacct is not installed.
if command -v sacct >/dev/null 2>&1; then
    mkdir -p "$dir/slurm" "$dir/bin5"
    cp "$dir/bin3/squeue" "$dir/bin5/squeue"
    printf 'ClusterName=t\nSlurmctldHost=localhost\nAccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/filetxt\nJobCompLoc=%s\nNodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=test Nodes=localhost Default=YES\n' \
        "$dir/slurm/jobcomp.txt" >"$dir/slurm/slurm.conf"
    for rec in 1001:COMPLETED:0:0 1004:FAILED:2:0 1005:OUT_OF_MEMORY:0:125 1006:TIMEOUT:0:0 1007:FAILED:3:0; do
        IFS=: read -r id st ec sg <<EOF
$rec
EOF
        echo "JobId=$id UserId=root(0) GroupId=root(0) Name=dsgd JobState=$st Partition=test TimeLimit=10 StartTime=2026-12-03T19:00:00 EndTime=2026-12-03T19:00:07 NodeList=n[1-2] NodeCnt=2 ProcCnt=2 WorkDir=$dir/r ReservationName= Tres=cpu=2,node=2,billing=2 Account= QOS= WcKey= Cluster=t SubmitTime=2026-12-03T18:59:59 EligibleTime=2026-12-03T18:59:59 DerivedExitCode=0:0 ExitCode=$ec:$sg "
    done >"$dir/slurm/jobcomp.txt"
    touch "$dir/r/runs/s-gossip_pull-b32.1005.h5"
    SLURM_CONF="$dir/slurm/slurm.conf" PATH="$dir/bin5:$PATH" $PY tools/report.py "$S" --out "$dir/rep" --targets 0.3,0.2 --overwrite >"$dir/rep.txt" 2>"$dir/rep.err"
    rc=$?
    n=0
    for want in "| s-allreduce-b16 | 1001 | 1001 COMPLETED 0:0 00:00:07 | completed (step 200 of 200) |" \
                "| s-allreduce-b32 | 1002 | 1002 RUNNING | running (job 1002, link 1 of 3, step 200 of 200) |" \
                "| s-gossip_pull-b16 | 1004 | 1004 FAILED 2:0 00:00:07 | failed before a run file (job 1004, link 1 of 3: FAILED, exit 2:0) |" \
                "| s-gossip_pull-b32 | 1005 | 1005 OUT_OF_MEMORY 0:125 00:00:07 | killed at step" \
                "| s-gossip_pull-b64 | 1006 | 1006 TIMEOUT 0:0 00:00:07 | timed out at step 120 of 200, checkpoint written" \
                "| s-gossip_push-b16 | 1007 | 1007 (link 1) FAILED 3:0 00:00:07; 1008 (link 2) PENDING; 1009 (link 3) PENDING | interrupted (SIGTERM) at step 120 of 200, checkpoint written; next: job 1008, link 2 of 3: Dependency, pending |" \
                "Scheduler (slurm): sacct failed: Slurm accounting storage is disabled; sacct -c (finished jobs) and squeue (jobs the controller holds) used instead."; do
        row "$want" && n=$((n + 1)) || bad "sacct -c: no '$want' in: $(grep -F -e '| s-' -e 'Scheduler' "$dir/rep.md")"
    done
    [ $rc = 0 ] && [ $n = 7 ] && ok "Slurm's sacct -c (jobcomp/filetxt) and squeue: finished jobs with exit codes, queued and running ones"
    touch -d '1 hour ago' "$dir/r/runs/s-gossip_pull-b32.1005.h5"
else
    echo "skipped: Slurm's sacct -c (no sacct installed)"
fi


# 4c. plot_runs.py (same runfiles.stale): the hour-old killed run is stale, the fresh one running (or killed).
$PY tools/plot_runs.py "$dir/r/runs/s-gossip_pull-b32.1005.h5" "$dir/r/runs/s-allreduce-b32.1002.h5" --out "$dir/pl" >"$dir/pl.md" 2>"$dir/pl.err"
grep -q "^| s-gossip_pull-b32.1005.h5 | .* | stale (no publication for 36[0-9][0-9] s) |$" "$dir/pl.md" \
    && grep -q "^| s-allreduce-b32.1002.h5 | .* | running (or killed) |$" "$dir/pl.md" \
    && ok "plot_runs: the killed run stale, the fresh one running (or killed)" || bad "plot_runs table: $(cat "$dir/pl.md" "$dir/pl.err")"

# 5. only the truncated file: nothing to report, exit 2 naming it.
$PY tools/report.py "$dir/r/runs/s-gossip_push-b32.1010.h5" --out "$dir/t" >"$dir/t.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "no run file could be read: $dir/r/runs/s-gossip_push-b32.1010.h5: OSError" "$dir/t.log" && [ ! -e "$dir/t.md" ] \
    && ok "only an unreadable file: exit 2, named" || bad "only the truncated file: exit $rc: $(cat "$dir/t.log")"

# 6. PBS: the same run files under PBS job ids; qstat -x -t -f -F json (OpenPBS), then the text
#    of qstat -x -t -f where -F json is refused. Exit_status -29 = walltime, -27 = memory limit;
#    an array 1020[] of the pending and the failed point (subjobs 1020[0], 1020[1]).
cp -r "$S" "$dir/r/sweeps/q"
Q="$dir/r/sweeps/q"
$PY - "$Q/sweep.json" <<'EOF' || bad "cannot write the PBS sweep.json"
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["scheduler"], d["name"] = "pbs", "q"
for k in ("chain", "time", "runs_dir"):
    del d[k]  # today's sweep.json
jobs = []
for j in d["jobs"]:
    j.pop("link"), j.pop("run_ids")
    if j["job_id"] in ("1003", "1004"):
        continue
    if j["job_id"] not in ("1008", "1009"):
        j["job_id"] += ".pbs01"
        jobs.append(j)
pts = ["s-allreduce-b64", "s-gossip_pull-b16"]
jobs.append({"command": ["qsub"], "points": pts, "job_id": "1020[].pbs01"})
d["jobs"] = jobs
json.dump(d, open(p, "w"), indent=1)
EOF
cat >"$dir/bin/qstat.json" <<'EOF'
{"timestamp": 1764790000, "pbs_version": "22.05.11", "pbs_server": "pbs01", "Jobs": {
 "1001.pbs01": {"Job_Name": "dsgd", "job_state": "F", "Exit_status": 0, "resources_used": {"walltime": "00:00:09"}},
 "1002.pbs01": {"Job_Name": "dsgd", "job_state": "R", "resources_used": {"walltime": "00:00:31"}},
 "1005.pbs01": {"Job_Name": "dsgd", "job_state": "F", "Exit_status": -27, "comment": "Job run at Thu Dec 03 at 19:00 on (n1:ncpus=1) and failed", "resources_used": {"walltime": "00:00:20"}},
 "1006.pbs01": {"Job_Name": "dsgd", "job_state": "F", "Exit_status": -29, "resources_used": {"walltime": "00:10:02"}},
 "1007.pbs01": {"Job_Name": "dsgd", "job_state": "F", "Exit_status": 3, "resources_used": {"walltime": "00:09:58"}},
 "1010.pbs01": {"Job_Name": "dsgd", "job_state": "F", "Exit_status": 0},
 "1011.pbs01": {"Job_Name": "dsgd", "job_state": "F", "Exit_status": 0},
 "1020[].pbs01": {"Job_Name": "dsgd", "job_state": "B", "array": "True"},
 "1020[0].pbs01": {"Job_Name": "dsgd", "job_state": "Q"},
 "1020[1].pbs01": {"Job_Name": "dsgd", "job_state": "X", "Exit_status": 2, "resources_used": {"walltime": "00:00:01"}}}}
EOF
cat >"$dir/bin/qstat" <<EOF
#!/bin/sh
echo "\$*" >>"$dir/qstat.args"
case "\$*" in
*-F\ json*) [ -n "\${FAKE_QSTAT_NO_JSON:-}" ] && { echo "qstat: invalid option -- 'F'" >&2; exit 2; }
           cat "$dir/bin/qstat.json"; exit 0 ;;
esac
$PY -c '
import json, sys
for jid, a in json.load(open(sys.argv[1]))["Jobs"].items():
    print("Job Id: " + jid)
    for k, v in a.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                print(f"    {k}.{k2} = {v2}")
        else:
            print(f"    {k} = {v}")
    print()' "$dir/bin/qstat.json"
EOF
chmod +x "$dir/bin/qstat"
touch "$dir/r/runs/s-gossip_pull-b32.1005.h5"
for fmt in json text; do
    [ $fmt = text ] && export FAKE_QSTAT_NO_JSON=1
    PATH="$dir/bin:$PATH" $PY tools/report.py "$Q" --out "$dir/rep" --targets 0.3,0.2 --overwrite >"$dir/rep.txt" 2>"$dir/rep.err"
    rc=$?
    [ $rc = 0 ] || bad "PBS ($fmt): exit $rc: $(tail -n 3 "$dir/rep.err")"
    n=0
    for want in "| s-allreduce-b16 | 1001 | 1001 COMPLETED 0 00:00:09 | completed (step 200 of 200) |" \
                "| s-allreduce-b32 | 1002 | 1002 RUNNING 00:00:31 | running (job 1002, step 200 of 200) |" \
                "| s-allreduce-b64 | 1020_0 | 1020_0 PENDING | pending (job 1020_0) |" \
                "| s-gossip_pull-b16 | 1020_1 | 1020_1 FAILED 2 00:00:01 | failed before a run file (job 1020_1: FAILED, exit 2) |" \
                "| s-gossip_pull-b32 | 1005 | 1005 OUT_OF_MEMORY -27 00:00:20 | killed at step" \
                "| s-gossip_pull-b64 | 1006 | 1006 TIMEOUT -29 00:10:02 | timed out at step 120 of 200, checkpoint written (job 1006: TIMEOUT, exit -29)" \
                "| s-gossip_push-b16 | 1007 | 1007 FAILED 3 00:09:58 | interrupted (SIGTERM) at step 120 of 200, checkpoint written (job 1007: FAILED, exit 3); resumable: tools/sweep.py --continue $Q |"; do
        row "$want" && n=$((n + 1)) || bad "PBS ($fmt): no '$want' in: $(grep -F '| s-' "$dir/rep.md")"
    done
    [ $n = 7 ] && ok "PBS, qstat $fmt: completed, running, pending and failed array subjobs, OOM (-27), walltime (-29), interrupted"
done
unset FAKE_QSTAT_NO_JSON
grep -q -- "-x -t -f -F json 1001.pbs01 1002.pbs01 1005.pbs01 1006.pbs01 1007.pbs01 1010.pbs01 1011.pbs01 1012 1020\[\].pbs01" "$dir/qstat.args" \
    && ok "qstat asked for the sweep's jobs with -x -t (history, subjobs)" || bad "qstat arguments: $(head -n 1 "$dir/qstat.args")"

# 7. today's job scripts in a Slurm array: run files named by each task's own SLURM_JOB_ID (sacct's
#    JobIDRaw), sweep.json naming only the array job 1030; the pending task as sacct's 1030_[2].
mkdir -p "$dir/r/runs2"
cp "$dir/r/runs/s-allreduce-b16.1001.h5" "$dir/r/runs2/s-allreduce-b16.1031.h5"
cp "$dir/r/runs/s-allreduce-b32.1002.h5" "$dir/r/runs2/s-allreduce-b32.1032.h5"
cp -r "$S" "$dir/r/sweeps/arr"
$PY - "$dir/r/sweeps/arr/sweep.json" "$dir/r/runs2" <<'EOF' || bad "cannot write the array sweep.json"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("chain", "time"):
    del d[k]
d["name"], d["runs_dir"] = "arr", sys.argv[2]
d["jobs"] = [{"command": ["sbatch"], "points": ["s-allreduce-b16", "s-allreduce-b32", "s-allreduce-b64"], "job_id": "1030"},
             {"command": ["sbatch"], "points": ["s-gossip_pull-b16"], "error": "sbatch: error: Batch job submission failed: Invalid account"},
             {"command": ["sbatch"], "points": ["s-gossip_push-b16"], "job_id": "1033", "link": 0, "run_ids": {"s-gossip_push-b16": "1033"}},
             {"command": ["sbatch"], "points": ["s-gossip_push-b16"], "job_id": "1034", "link": 1, "run_ids": {"s-gossip_push-b16": "1033"}}]
json.dump(d, open(sys.argv[1], "w"), indent=1)
EOF
mkdir -p "$dir/bin4"
printf '#!/bin/sh\nprintf "1030_0|1031|COMPLETED|0:0|00:00:09\\n1030_1|1032|RUNNING|0:0|00:00:31\\n1030_[2]|1030|PENDING|0:0|00:00:00\\n1033|1033|FAILED|2:0|00:00:01\\n1034|1034|CANCELLED by 0|0:0|00:00:00\\n"\n' >"$dir/bin4/sacct"
chmod +x "$dir/bin4/sacct"
PATH="$dir/bin4:$PATH" $PY tools/report.py "$dir/r/sweeps/arr" --out "$dir/rep" --targets 0.3,0.2 --overwrite >"$dir/rep.txt" 2>"$dir/rep.err"
rc=$?
n=0
for want in "| s-allreduce-b16 | 1031 | 1030_0 COMPLETED 0:0 00:00:09 | completed (step 200 of 200) |" \
            "| s-allreduce-b32 | 1032 | 1030_1 RUNNING 0:0 00:00:31 | running (job 1030_1, step 200 of 200) |" \
            "| s-allreduce-b64 | 1030_2 | 1030_2 PENDING 0:0 00:00:00 | pending (job 1030_2) |" \
            "| s-gossip_pull-b16 | - | - | not submitted: sbatch: error: Batch job submission failed: Invalid account |" \
            "| s-gossip_push-b16 | 1033 | 1033 (link 1) FAILED 2:0 00:00:01; 1034 (link 2) CANCELLED 0:0 00:00:00 | failed before a run file (job 1033, link 1 of 2: FAILED, exit 2:0) |"; do
    row "$want" && n=$((n + 1)) || bad "array: no '$want' in: $(grep -F '| s-' "$dir/rep.md")"
done
[ $rc = 0 ] && [ $n = 5 ] && ok "a Slurm array of today's scripts: tasks matched to run files by JobIDRaw, the pending task named; a job sbatch refused; a chain whose first link failed (exit 2), the next cancelled"
exit $fail
