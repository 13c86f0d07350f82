#!/usr/bin/python3
"""sweep.py — a node-count / method sweep: one experiment file per point, then one batch job per
point (or one job array per world size), submitted or printed.

    tools/sweep.py BASE.cfg --vary p=8,16,32,64,128 --vary method=allreduce,gossip_pull,easgd \\
        --m 256 --name s1 [--set KEY=VALUE ...] [--scheduler slurm|pbs] [--array] [--dry-run]
    tools/sweep.py configs/paper/fig1-*.cfg --name fig1 --array --time 24:00:00 --chain 3
    tools/sweep.py --continue sweeps/fig1                              # resubmit unfinished points

- `--vary KEY=V1,V2,...` (repeatable): the points are every combination of the lists (and of the
  experiment files, when several are given: each file is a point of its own, crossed with the
  --vary lists; with several files --vary may be left out).
- `--m M` holds the aggregate minibatch m = p·b: each point gets b = M / p (Jin et al. hold m = 256
  while p grows); a p that does not divide M is an error, before anything is written.
- `--set KEY=VALUE` (repeatable): fixed overrides for every point.
- Each point's experiment is resolved and validated by dsgd-run itself (`dsgd-run --print-config`,
  with every --set applied) and written to sweeps/<name>/<name>-<key><value>-....cfg with
  `name` set to that file's stem (s1-allreduce-p8 for method=allreduce, p=8), so that the run files (runs/<stem>.<job id>.h5) and the plot
  tool (tools/plot_runs.py) group runs by sweep, method and p. With several experiment files the
  stem is <name>-<method>-p<p> (then the other --vary parts), or <name>-<file stem>-<parts>
  where that would not be unique.
- Jobs: jobs/slurm/dsgd.sbatch or jobs/pbs/dsgd.pbs, one MPI rank per node; W = the point's MPI
  ranks (p, plus the servers of ps, easgd and backup). `--ranks-per-node R` packs R ranks per node
  (GPU nodes: R = GPUs per node; Slurm jobs ask for --ntasks = the point's ranks, so the last node
  may hold fewer; PBS needs R to divide them), `--job-args` passes more options to sbatch/qsub.
  Whole nodes (L1, L2): a CPU job asks for `--exclusive --mem=0` (PBS: chunks of
  `ncpus=<cores per node>` with `-l place=scatter:excl`), or with `--cpus-per-rank C` for C cores
  per rank (Slurm --cpus-per-task=C, PBS ncpus = R·C, place=scatter). `--gpus-per-node G` asks for G
  GPUs per node (Slurm --gpus-per-node, PBS ngpus in the chunk) and `--cores-per-node N` / G cores
  per GPU rank for its JPEG decoder (Slurm --cpus-per-task, PBS ncpus); a GPU point whose ranks do
  not fill whole nodes (a server rank) asks for `--ntasks=W --gpus-per-task=1` without --nodes, so
  no GPU stays idle (L7). `--cores-per-node` defaults to DSGD_CORES_PER_NODE of the job script's
  site block (or the environment). `--job-set KEY=VALUE`
  (repeatable) is given to each job's dsgd-run (`--set` after the experiment; PBS: ARGS) without
  being resolved here: for what this build cannot resolve, e.g. device=cuda on a login node whose
  dsgd-run was built without CUDA (the jobs' dsgd-run checks it before training). `--array`: one job array per world size, the job script
  picking its point from a list file (sweeps/<name>/ranksW.list) by the array index.
- Time (T1, T2): `--time T` is each job's wall-time limit (Slurm --time=T, PBS -l walltime=T);
  `--chain K` submits K links per job: link k > 0 depends on link k − 1 (afterany) and continues
  link 0's run (DSGD_RUN_ID = link 0's id), so a point longer than the site's maximum wall time
  runs to the end unattended; `--chain auto`: K from the largest point's estimated time × 1.25.
  Every point's estimated cost is printed (node-hours; see `estimate` for where the numbers come
  from; `--rank-img-s R` puts in your own img/s per worker rank from a scaling sweep).
  `--require-time` (tools/paper.py) refuses a submission without a time limit.
- `--runs-dir DIR` (default: DSGD_RUNS_DIR of the job script's site block, else runs): where the
  jobs write run files and checkpoints (exported as DSGD_RUNS_DIR; relative to the submission
  directory). Put it on scratch.
- `--dry-run` writes the experiment files and sweep.json but prints the commands instead of
  running them. Otherwise the job ids are recorded in sweeps/<name>/sweep.json.
- `--local` (no scheduler; tools/paper.py --simulate): the points are run here, one after another,
  each as `timeout -k 10 S mpiexec -n W dsgd-run --set output=... <point>.cfg` (S: --local-timeout,
  default 1800 s; the launcher: --mpiexec, default $MPIEXEC or mpiexec), into
  <runs dir>/<stem>.<run id>.h5 with run id <UTC start YYYYmmddTHHMMSS>_<point index> (a run file is
  never replaced) and the output in sweeps/<name>/<stem>.<run id>.log; sweep.json says "scheduler":
  "local" and holds each point's record ("local": state PENDING/RUNNING/COMPLETED/FAILED/TIMEOUT/
  INTERRUPTED, exit, elapsed), written before the first point and after each, which tools/report.py
  reads as a scheduler's accounting. INTERRUPTED: the point exited 3 (dsgd-run stopped by a signal
  or stop_at with a checkpoint written, docs/checkpoint.md; --continue resumes it, or runs it afresh
  where sim mode cannot resume it), or a Ctrl-C / SIGTERM to sweep.py ended it (exit 128+signal). `--meta JSON` is kept in sweep.json as "meta".
- `tools/sweep.py --continue sweeps/NAME` (T3): every point whose run is not completed gets one
  more job with its own resources (its submit line, for one point) and DSGD_RUN_ID, appended to
  sweep.json's "jobs" (run it once the sweep's jobs have ended; `--dry-run` shows the jobs).
  A --local sweep (`--continue` with or without `--local`): its points are run here again, one
  after another, except those with a completed run file: a point whose last run was interrupted
  with a checkpoint (dsgd-run --status exit 3) is resumed into that run file (`--resume`, job
  <run id>_r<link>), any other (no run file, stopped, killed by the timeout) runs afresh under a
  new run id; no run file is replaced. `--local-timeout` and `--mpiexec` as for --local (the
  sweep's own limit by default); the new jobs are appended to sweep.json's "jobs".

sweep.json: name, submit_dir, base, vary, set, job_set, m, scheduler, dry_run, runs_dir, time (the
per-link limit as given, or null), chain (K), points, and jobs: one entry per submitted job (or
job array) with command, points (stems, in array-index order), link (0..K-1), job_id (as sbatch /
qsub printed it) or error, run_ids ({stem: run id}: link 0's id, <id>_<index> in an array).

An existing sweeps/<name>/ is never overwritten (choose another --name), except the output of a
--dry-run, or of a submission whose every job the scheduler refused: running the same command
again replaces it.
"""
import argparse
import itertools
import json
import math
import os
import re
import shlex
import signal
import shutil
import subprocess
import sys
import time

# More links per point than this is refused (a --time read in other units than meant, a
# --rank-img-s far too small): it would flood the scheduler's queue.
MAX_CHAIN = 100
SERVER_METHODS = ("ps", "easgd", "backup")
SCRIPTS = {"slurm": "jobs/slurm/dsgd.sbatch", "pbs": "jobs/pbs/dsgd.pbs"}
# The cost estimate (docs/reproduce.md §4, "Cost of Figure 1"): ResNet-18 width 64 at 224² trains
# at 8.5 img/s per core in fp32 (measured on the 2-core development VM, docs/data.md "Loading"),
# at a scaling efficiency of 0.8, on 32-core nodes when the cores per node are not given. No GPU
# rate has been measured: GPU points get an estimate only from --rank-img-s.
IMG_S_PER_CORE, EFFICIENCY, CORES_DEFAULT = 8.5, 0.8, 32


def die(msg):
    print(f"sweep.py: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_kv(s, what):
    if "=" not in s:
        die(f"{what} {s!r}: expected KEY=VALUE")
    k, v = s.split("=", 1)
    if not k:
        die(f"{what} {s!r}: empty KEY")
    return k, v


def resolve(dsgd, base, sets):
    """The point's resolved experiment text, or die with dsgd-run's own message."""
    cmd = [dsgd, "--print-config"]
    for s in sets:
        cmd += ["--set", s]
    cmd.append(base)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode < 0:  # e.g. SIGILL: a binary built with -march=native on another CPU (B4)
        sig = r.returncode
        try:
            import signal
            sig = signal.Signals(-r.returncode).name
        except ValueError:
            pass
        die(f"point {' '.join(sets)}: {dsgd} --print-config died of signal {sig}"
            + (" (an instruction this CPU lacks: build dsgd-run for the login node's CPU too, e.g. "
               "make OPT='-O3 -march=x86-64-v2')" if sig == "SIGILL" else "")
            + (f": {r.stderr.strip()}" if r.stderr.strip() else ""))
    if r.returncode != 0:
        die(f"point {' '.join(sets)}: {r.stderr.strip() or 'dsgd-run --print-config failed'}")
    return r.stdout


def setting(text, key):
    """A top-level scalar of a resolved experiment (as --print-config writes it: `key = value;`)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(key + " =") and line.endswith(";"):
            return line[len(key) + 2:-1].strip().strip('"')
    die(f"resolved experiment has no key {key!r}")


def group_setting(text, group, key):
    """A scalar of a group of a resolved experiment (`group = {` ... `key = value;` ... `};`), or None."""
    inside = False
    for line in text.splitlines():
        t = line.strip()
        if t == group + " = {":
            inside = True
        elif inside and t == "};":
            return None
        elif inside and t.startswith(key + " =") and t.endswith(";"):
            return t[len(key) + 2:-1].strip().strip('"')
    return None


def site_default(script, var):
    """The default of `VAR=${VAR:-default}` in a job script's site block (os.environ first), or ''."""
    if os.environ.get(var):
        return os.environ[var]
    try:
        text = open(script).read()
    except OSError:
        return ""
    m = re.search(r"^" + var + r"=\$\{" + var + r":-([^}]*)\}\s*$", text, re.M)
    return os.path.expandvars(m.group(1)) if m else ""


def time_seconds(t, scheduler):
    """A wall time as sbatch --time / qsub -l walltime take it, in seconds (None if unreadable).
    Slurm: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; PBS: S or H:M:S (a bare number is seconds)."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", t.strip())
    if not m:
        return None
    d, a, b, c = (int(x) if x else None for x in m.groups())
    if d is not None:  # D-H[:M[:S]]
        return ((d * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
    if c is not None:  # H:M:S
        return (a * 60 + b) * 60 + c
    if b is not None:  # Slurm M:S; PBS M:S too
        return a * 60 + b
    return a * 60 if scheduler == "slurm" else a


def job_args_time(extra, scheduler):
    """A time limit given in --job-args (--time=T, --time T, -t T; -l walltime=T), or None."""
    for i, x in enumerate(extra):
        nxt = extra[i + 1] if i + 1 < len(extra) else ""
        if scheduler == "slurm":
            if x.startswith("--time="):
                return x[7:]
            if x in ("--time", "-t"):
                return nxt
            if x.startswith("-t") and len(x) > 2:
                return x[2:]
        else:
            for part in ([nxt] if x == "-l" else [x[2:]] if x.startswith("-l") else []):
                for kv in part.split(","):
                    if kv.startswith("walltime="):
                        return kv[9:]
    return None


def estimate(pt, rpn, cores_per_node, cpus_per_rank, gpu, rank_img_s):
    """A point's estimated wall time (hours) and cost, and the basis; (None, None, why) without one.
    Every worker rank trains iterations × b images at R img/s: R = --rank-img-s, else (CPU,
    ResNet-18 width 64 at 224², the paper's network) cores per rank × 8.5 img/s × 0.8
    (docs/reproduce.md §4). Cost: nodes × hours (GPU points: GPU-hours = ranks × hours)."""
    if rank_img_s:
        r, basis = rank_img_s, f"{rank_img_s:g} img/s per worker rank (--rank-img-s)"
    elif gpu:
        return None, None, "no GPU rate measured (docs/reproduce.md §4): give --rank-img-s from a scaling sweep"
    elif not pt["paper_net"]:
        return None, None, "the 8.5 img/s per core is ResNet-18 width 64 at 224² (docs/reproduce.md §4): --rank-img-s R"
    else:
        cores = cpus_per_rank or (cores_per_node or CORES_DEFAULT) // rpn
        r = cores * IMG_S_PER_CORE * EFFICIENCY
        basis = (f"{cores} core(s) per rank{'' if cpus_per_rank or cores_per_node else ' (32 per node assumed: --cores-per-node)'}"
                 f" × {IMG_S_PER_CORE} img/s × efficiency {EFFICIENCY}, docs/reproduce.md §4")
    hours = pt["iterations"] * pt["b"] / r / 3600
    nodes = -(-pt["ranks"] // rpn)
    cost = f"{pt['ranks'] * hours:,.0f} GPU-hours" if gpu else f"{nodes * hours:,.0f} node-hours"
    return hours, cost, basis


def fmt_hours(h):
    return f"{h:.1f} h" if h < 48 else f"{h / 24:.1f} days"


def numeric_id(job_id):
    """The run-id part of a job id as sbatch / qsub print it: 1234, 1234;cluster, 400.srv, 400[].srv -> 400."""
    m = re.match(r"\d+", job_id or "")
    return m.group(0) if m else None


def with_link(cmd, scheduler, run_id, after=None):
    """A submit line of sweep.json for a continuation: DSGD_RUN_ID=run_id exported, and (after) a
    dependency afterany on job `after`."""
    cmd = list(cmd)
    script = SCRIPTS[scheduler]
    k = cmd.index(script) if scheduler == "slurm" else len(cmd) - 1
    if scheduler == "slurm":
        ex = [i for i in range(k) if cmd[i].startswith("--export=")]
        if ex:
            cmd[ex[0]] += f",DSGD_RUN_ID={run_id}"
        else:
            cmd.insert(k, f"--export=ALL,DSGD_RUN_ID={run_id}")
            k += 1
        if after:
            cmd.insert(k, f"--dependency=afterany:{after}")
    else:
        v = cmd.index("-v") + 1
        cmd[v] += f",DSGD_RUN_ID={run_id}"
        if after:
            cmd[k:k] = ["-W", f"depend=afterany:{after}"]
    return cmd


def one_point(cmd, scheduler, point_file):
    """A submit line of sweep.json for one point of it: no array, no dependency, the point's file."""
    out, skip = [], False
    for i, x in enumerate(cmd):
        if skip:
            skip = False
            continue
        if scheduler == "slurm" and (x.startswith("--array=") or x.startswith("--dependency=")):
            continue
        if scheduler == "pbs" and x in ("-J", "-W") and (x == "-J" or cmd[i + 1].startswith("depend=")):
            skip = True
            continue
        out.append(x)
    if scheduler == "slurm":
        k = out.index(SCRIPTS["slurm"])
        out[k + 1] = point_file
    else:
        v = out.index("-v") + 1
        out[v] = ",".join(f"EXP={point_file}" if kv.startswith("EXP=") else kv
                          for kv in out[v].split(",") if not kv.startswith("DSGD_RUN_ID="))
    return out


def submit(cmd, env):
    """Runs a submit line; (job id, None) or (None, error)."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0 or not r.stdout.strip():
        err = r.stderr.strip() or f"exit status {r.returncode}, no job id"
        print(f"sweep.py: {shlex.join(cmd)} failed: {err}", file=sys.stderr)
        return None, err
    return r.stdout.strip().split(";")[0], None


def submit_env():
    """The environment of sbatch / qsub: without a DSGD_RUN_ID of the user's shell (Slurm's
    --export=ALL and PBS -V would pass it on and make link 0 continue another run)."""
    env = dict(os.environ)
    env.pop("DSGD_RUN_ID", None)
    return env


def run_status(dsgd, path):
    """dsgd-run --status of a run file: 0 completed, 3 interrupted, 1 stopped/killed, 2 unreadable; None: no file."""
    if not os.path.exists(path):
        return None, "no run file"
    r = subprocess.run([dsgd, "--status", path], capture_output=True, text=True)
    return r.returncode, (r.stdout.strip() or r.stderr.strip())


def continue_sweep(a):
    """--continue sweeps/NAME: one more link for every point whose run is not completed (T3)."""
    path = os.path.join(a.cont, "sweep.json")
    try:
        with open(path) as f:
            sw = json.load(f)
    except (OSError, ValueError) as e:
        die(f"--continue {a.cont}: cannot read {path}: {e}")
    if sw.get("dry_run"):
        die(f"--continue {a.cont}: a dry run, nothing was submitted")
    sched = sw["scheduler"]
    os.chdir(sw["submit_dir"])  # the submit lines are relative to it
    runs_dir = sw.get("runs_dir", "runs")
    files = {pt["stem"]: pt["file"] for pt in sw["points"]}
    first, maxlink = {}, {}  # stem -> (run id, its link-0 entry); stem -> its last link
    for j in sw["jobs"]:
        for stem, rid in (j.get("run_ids") or {}).items():
            if j.get("link", 0) == 0 and j.get("job_id") and rid:
                first[stem] = (rid, j)
            maxlink[stem] = max(maxlink.get(stem, 0), j.get("link", 0))
    new, env = [], submit_env()
    for pt in sw["points"]:
        stem = pt["stem"]
        if stem not in first:
            print(f"sweep.py: {stem}: no submitted job in sweep.json: nothing to continue (submit it afresh)")
            continue
        rid, j0 = first[stem]
        rf = os.path.join(runs_dir, f"{stem}.{rid}.h5")
        st, what = run_status(a.dsgd, rf)
        if st == 0:
            print(f"sweep.py: {stem}: {rf} completed")
            continue
        if st is None:
            print(f"sweep.py: {stem}: {rf}: no run file: nothing to continue (the job failed before its "
                  f"first publication; submit the point afresh)")
            continue
        cmd = with_link(one_point(j0["command"], sched, files[stem]), sched, rid)
        print(f"sweep.py: {stem}: {rf}: {what}")
        print(("(dry run) " if a.dry_run else "") + shlex.join(cmd))
        entry = {"command": cmd, "points": [stem], "link": maxlink[stem] + 1, "run_ids": {stem: rid}}
        if not a.dry_run:
            jid, err = submit(cmd, env)
            entry.update({"job_id": jid} if jid else {"error": err})
            if jid:
                print(f"  job {jid}")
            new.append(entry)
    if new:
        sw["jobs"] += new
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(sw, f, indent=1)
        os.replace(tmp, path)
    print(f"sweep.py: {len(new)} continuation(s) of {a.cont}" + (" (dry run: nothing submitted)" if a.dry_run else ""))
    return 1 if any("error" in j for j in new) else 0


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def hms(s):
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def run_local(a, out, points, axes, runs_dir, meta):
    """--local: every point run here, one after another: `timeout -k 10 S mpiexec -n W dsgd-run
    --set output="<runs dir>/<stem>.<run id>.h5" <point>.cfg`, its output in <out>/<stem>.<run id>.log.
    The run id is the sweep's start (UTC, YYYYmmddTHHMMSS) and the point's index, as an array
    task's: <id>_<k>; an existing run file is never replaced (dsgd-run refuses it too). sweep.json
    ("scheduler": "local") is written before the first point and after each, each job with its
    record "local": {state (PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, INTERRUPTED), exit, elapsed,
    wall_s}, which tools/report.py reads instead of a scheduler's accounting."""
    rid = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    os.makedirs(runs_dir, exist_ok=True)
    jobs = []
    for k, pt in enumerate(points):
        run_id = f"{rid}_{k}"
        rf = os.path.join(runs_dir, f"{pt['stem']}.{run_id}.h5")
        if os.path.exists(rf):
            die(f"{rf} exists: a run file is never replaced (start the sweep again in a second)")
        cmd = ["timeout", "-k", "10", f"{a.local_timeout:g}", a.mpiexec, "-n", str(pt["ranks"]), a.dsgd,
               "--set", f'output="{rf}"', pt["file"]]
        jobs.append(local_job(cmd, pt["stem"], run_id, run_id, 0, os.path.join(out, f"{pt['stem']}.{run_id}.log")))
    doc = {"name": a.name, "submit_dir": os.getcwd(), "base": a.base[0] if len(a.base) == 1 else a.base,
           "vary": {k: v for k, v in axes}, "set": a.set, "job_set": [], "m": a.m, "scheduler": "local", "dry_run": False,
           "runs_dir": runs_dir, "time": None, "chain": 1, "local_timeout_s": a.local_timeout, "points": points, "jobs": jobs}
    if meta is not None:
        doc["meta"] = meta
    path = os.path.join(out, "sweep.json")
    with open(path, "x") as f:
        json.dump(doc, f, indent=1)
    unfinished = run_jobs(doc, path, jobs)
    print(f"sweep.py: {len(points)} point(s) in {out}/ run here (--local), {ended_text(jobs, out)}")
    return 1 if unfinished else 0


def ended_text(jobs, out):
    """'1 completed, 1 interrupted (tools/sweep.py --continue OUT goes on)': the --local jobs' states."""
    n = {}
    for j in jobs:
        n[j["local"]["state"]] = n.get(j["local"]["state"], 0) + 1
    s = ", ".join(f"{n[k]} {k.lower().replace('timeout', 'timed out')}" for k in ("COMPLETED", "INTERRUPTED", "TIMEOUT", "FAILED") if k in n)
    return (s or "none run") + (f" (tools/sweep.py --continue {out} goes on)" if set(n) - {"COMPLETED"} else "")


def local_job(cmd, stem, job_id, run_id, link, log):
    """A job of a --local sweep as sweep.json holds it (record "local" PENDING)."""
    return {"command": cmd, "points": [stem], "link": link, "job_id": job_id, "run_ids": {stem: run_id}, "log": log,
            "local": {"state": "PENDING", "exit": "", "elapsed": "", "wall_s": None}}


class Interrupted(Exception):
    """SIGINT or SIGTERM to a --local sweep: args (signal name, number)."""


def on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name, signum)


def stop_child(child, grace=60.0):
    """Ends a --local point: SIGTERM to its `timeout`, which passes it to mpiexec and so to the
    ranks (they write a checkpoint and exit 3, docs/checkpoint.md); SIGKILL after `grace` seconds.
    Returns its exit status. (`timeout` runs in its own process group, so a Ctrl-C at the
    terminal reaches sweep.py alone: without this the point would go on, orphaned.)"""
    child.send_signal(signal.SIGTERM)
    try:
        return child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


def run_jobs(doc, path, jobs):
    """Runs the --local jobs (entries of doc["jobs"]) one after another, each job's record and
    sweep.json (path) written before and after it; returns how many did not complete."""
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        return run_jobs_here(doc, path, jobs)
    except Interrupted as e:  # between two points (none running): the one about to start is recorded so
        for j in jobs:
            if j["local"]["state"] == "RUNNING":
                j["local"]["state"] = "INTERRUPTED"
        write_json(path, doc)
        print(f"sweep.py: interrupted by {e.args[0]} between two points; sweep.json updated: "
              f"tools/sweep.py --continue {os.path.dirname(path)} goes on", file=sys.stderr, flush=True)
        sys.exit(128 + e.args[1])


def run_jobs_here(doc, path, jobs):
    """run_jobs' loop; an Interrupted while a point runs ends that point (stop_child) and exits."""
    failed = 0
    for j in jobs:
        rec = j["local"]
        rec["state"] = "RUNNING"
        write_json(path, doc)
        print(shlex.join(j["command"]) + f"  > {j['log']}", flush=True)
        t0 = time.monotonic()
        with open(j["log"], "x") as log:
            child = subprocess.Popen(j["command"], stdout=log, stderr=subprocess.STDOUT)
            try:
                rc = child.wait()
            except Interrupted as e:  # Ctrl-C or SIGTERM to sweep.py: end the point, record it, stop
                rc = stop_child(child)
                wall = time.monotonic() - t0
                rec.update({"state": "INTERRUPTED", "exit": f"{rc}:0", "elapsed": hms(wall), "wall_s": round(wall, 2)})
                write_json(path, doc)
                print(f"  {j['points'][0]}: interrupted by {e.args[0]} (the point's exit {rc}, after {wall:.1f} s); "
                      f"sweep.json updated: tools/sweep.py --continue {os.path.dirname(path)} goes on", file=sys.stderr, flush=True)
                sys.exit(128 + e.args[1])
        wall = time.monotonic() - t0
        # exit 3: dsgd-run stopped by a signal (not sweep.py's) or stop_at, its checkpoint written
        rec.update({"state": "COMPLETED" if rc == 0 else "TIMEOUT" if rc in (124, 137) else "INTERRUPTED" if rc == 3 else "FAILED",
                    "exit": f"{rc}:0", "elapsed": hms(wall), "wall_s": round(wall, 2)})
        write_json(path, doc)
        print(f"  {j['points'][0]}: {rec['state']} (exit {rc}" + (": stopped by a signal or stop_at, checkpoint written"
                                                                   if rc == 3 else "") + f") in {wall:.1f} s", flush=True)
        if rc != 0:
            failed += 1
            with open(j["log"]) as log:
                tail = log.read().strip().splitlines()[-3:]
            print("    | " + "\n    | ".join(tail), file=sys.stderr)
    return failed


def continue_local(a, path, sw):
    """--continue on a --local sweep (sweep.json "scheduler": "local"): every point whose run files
    include a completed one is left alone; a point whose last run is interrupted with a checkpoint
    (dsgd-run --status exit 3) is resumed into that run file (dsgd-run --resume, a new link with the
    same run id); any other point (no run file, stopped, killed, unreadable) runs afresh under a new
    run id <UTC start>_<point index>, so no run file is ever replaced. The new jobs are appended to
    sweep.json's "jobs" and run here one after another, as --local runs them."""
    os.chdir(sw["submit_dir"])  # the points' files and the runs directory are relative to it
    runs_dir, out = sw.get("runs_dir", "runs"), os.path.dirname(path)
    timeout = a.local_timeout if a.local_timeout is not None else sw.get("local_timeout_s", 1800)
    rid = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    new = []
    for k, pt in enumerate(sw["points"]):
        stem = pt["stem"]
        mine = [j for j in sw["jobs"] if stem in j.get("points", []) and (j.get("run_ids") or {}).get(stem)]
        runs = [(j, os.path.join(runs_dir, f"{stem}.{j['run_ids'][stem]}.h5")) for j in mine]
        done = next((rf for _, rf in runs if run_status(a.dsgd, rf)[0] == 0), None)
        if done:
            print(f"sweep.py: {stem}: {done} completed")
            continue
        last = runs[-1] if runs else None
        st, what = run_status(a.dsgd, last[1]) if last else (None, "never run")
        base = ["timeout", "-k", "10", f"{timeout:g}", a.mpiexec, "-n", str(pt["ranks"]), a.dsgd]
        if st == 3 and "cannot resume" not in what:  # interrupted with a checkpoint: continue that run file
            # (sim mode's server and asynchronous gossip runs say they cannot resume: run afresh)
            run_id, link = last[0]["run_ids"][stem], max(j.get("link", 0) for j in mine) + 1
            job_id, rf, mode = f"{run_id}_r{link}", last[1], ["--resume"]
        else:
            run_id, link = f"{rid}_{k}", 0
            job_id, rf, mode = run_id, os.path.join(runs_dir, f"{stem}.{run_id}.h5"), []
            if os.path.exists(rf):
                die(f"{rf} exists: a run file is never replaced (continue the sweep again in a second)")
        print(f"sweep.py: {stem}: {last[1] + ': ' if last else ''}{what}: " + ("resumed" if mode else "run afresh"))
        cmd = base + mode + ["--set", f'output="{rf}"', pt["file"]]
        new.append(local_job(cmd, stem, job_id, run_id, link, os.path.join(out, f"{stem}.{job_id}.log")))
    if a.dry_run:
        for j in new:
            print("(dry run) " + shlex.join(j["command"]))
        print(f"sweep.py: {len(new)} point(s) of {out} to run (dry run: nothing run)")
        return 0
    sw["jobs"] += new
    write_json(path, sw)
    unfinished = run_jobs(sw, path, new)
    print(f"sweep.py: {len(new)} point(s) of {out}/ continued here (--local), {ended_text(new, out)}")
    return 1 if unfinished else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", nargs="*", help="base experiment file(s); several: one point per file (crossed with --vary)")
    ap.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,...")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--m", type=int, help="hold m = p*b: b = M/p at every point")
    ap.add_argument("--name", help="sweep name: letters, digits, ._+- (required)")
    ap.add_argument("--dir", default="sweeps", help="where sweeps/<name>/ goes (default sweeps)")
    ap.add_argument("--scheduler", choices=("slurm", "pbs"), default="slurm")
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--job-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for the jobs' dsgd-run only (not resolved here)")
    ap.add_argument("--gpus-per-node", type=int, default=0, metavar="G", help="GPUs per node to ask for (0: none)")
    ap.add_argument("--cpus-per-rank", type=int, default=0, metavar="C", help="cores per rank to ask for (0: the default)")
    ap.add_argument("--array", action="store_true", help="one job array per world size")
    ap.add_argument("--job-args", default="", metavar="'OPTIONS'",
                    help="more options for sbatch / qsub, one string; write it with '=' since it starts "
                         "with '-': --job-args='--time=30 --partition=gpu'")
    ap.add_argument("--dsgd", default="./dsgd-run",
                    help="the dsgd-run binary (default ./dsgd-run), also given to the jobs (DSGD_BIN)")
    ap.add_argument("--cores-per-node", type=int, default=None, metavar="N",
                    help="cores per node (PBS CPU chunks; GPU ranks get N/G; default: DSGD_CORES_PER_NODE of the job script)")
    ap.add_argument("--time", metavar="T", help="wall-time limit of each job (Slurm --time, PBS -l walltime)")
    ap.add_argument("--chain", default="1", metavar="K|auto",
                    help="K jobs per point, each continuing the last (afterany); auto: from the estimated time (default 1)")
    ap.add_argument("--require-time", action="store_true", help="refuse to submit without a time limit (tools/paper.py)")
    ap.add_argument("--rank-img-s", type=float, default=0, metavar="R",
                    help="measured img/s per worker rank, for the cost estimate (default: docs/reproduce.md's CPU figures)")
    ap.add_argument("--runs-dir", metavar="DIR", help="where the jobs write run files and checkpoints (DSGD_RUNS_DIR; "
                                                       "default: the job script's site block, else runs)")
    ap.add_argument("--continue", dest="cont", metavar="sweeps/NAME",
                    help="submit one more job for every point of that sweep whose run is not completed (a --local "
                         "sweep: run those points here, resumed or afresh)")
    ap.add_argument("--dry-run", action="store_true", help="print the submit commands, run none")
    ap.add_argument("--local", action="store_true",
                    help="no scheduler: run the points here, one after another, with mpiexec (sim mode kits, tools/paper.py --simulate)")
    ap.add_argument("--local-timeout", type=float, default=None, metavar="S",
                    help="--local: each point's limit in seconds (timeout -k 10 S; default 1800, or the sweep's with --continue)")
    ap.add_argument("--mpiexec", default=os.environ.get("MPIEXEC") or "mpiexec", help="--local: the MPI launcher (default $MPIEXEC or mpiexec)")
    ap.add_argument("--meta", metavar="JSON", help="a JSON object recorded in sweep.json as \"meta\" (tools/paper.py: what a kit left out)")
    a = ap.parse_args()

    if a.cont:
        if a.base or a.name:
            die("--continue takes a sweep directory only (its sweep.json holds the points and their submit lines)")
        if not os.access(a.dsgd, os.X_OK):
            die(f"{a.dsgd} not found or not executable (build it with make, or --dsgd PATH)")
        a.dsgd = os.path.abspath(a.dsgd)
        a.cont = os.path.abspath(a.cont)
        if a.local_timeout is not None and not a.local_timeout > 0:
            die(f"--local-timeout {a.local_timeout}: expected seconds > 0")
        path = os.path.join(a.cont, "sweep.json")
        try:
            with open(path) as f:
                sw = json.load(f)
        except (OSError, ValueError) as e:
            die(f"--continue {a.cont}: cannot read {path}: {e}")
        if sw.get("scheduler") == "local":
            return continue_local(a, path, sw)
        if a.local:
            die(f"--local --continue {a.cont}: a sweep submitted to {sw.get('scheduler')} (sweep.json): continue it "
                "without --local (one more job per unfinished point)")
        return continue_sweep(a)
    if not a.base:
        die("no base experiment file given")
    if a.name is None:
        die("--name is required")

    if not a.name or any(not (c.isalnum() or c in "._+-") for c in a.name):
        die(f"--name {a.name!r}: use letters, digits and ._+-")
    for base in a.base:
        if not os.path.isfile(base):
            die(f"base experiment {base!r} not found")
    if len(set(a.base)) != len(a.base):
        die("an experiment file is given twice")
    if not os.access(a.dsgd, os.X_OK):
        die(f"{a.dsgd} not found or not executable (build it with make, or --dsgd PATH)")
    if a.ranks_per_node < 1:
        die("--ranks-per-node must be >= 1")
    if a.gpus_per_node < 0 or a.cpus_per_rank < 0:
        die("--gpus-per-node and --cpus-per-rank must be >= 0")
    if a.m is not None and a.m < 1:
        die("--m must be >= 1")
    axes = []
    for v in a.vary:
        k, vals = parse_kv(v, "--vary")
        vals = [x.strip() for x in vals.split(",") if x.strip()]
        if not vals:
            die(f"--vary {v!r}: no values")
        if k in [ax[0] for ax in axes]:
            die(f"--vary {k} given twice")
        if len(set(vals)) != len(vals):
            die(f"--vary {v!r}: a value is listed twice")
        axes.append((k, vals))
    if not axes and len(a.base) == 1:
        die("nothing to sweep: give --vary KEY=V1,V2,..., or several experiment files")
    if a.m is not None and "b" in [k for k, _ in axes]:
        die("--m sets b = m/p at every point: do not also --vary b")
    fixed = [parse_kv(s, "--set") and s for s in a.set]
    if a.m is not None and any(parse_kv(x, "--set")[0] == "b" for x in a.set):
        die("--m sets b = m/p at every point: do not also --set b")
    job_script = SCRIPTS[a.scheduler]
    meta = None
    if a.meta is not None:
        try:
            meta = json.loads(a.meta)
        except ValueError as ex:
            die(f"--meta: not JSON ({ex})")
    if a.local and (a.array or a.time or a.job_set or a.gpus_per_node or a.chain != "1"):
        die("--local runs every point here, once: --array, --time, --chain, --job-set and --gpus-per-node are for schedulers")
    if a.local_timeout is None:
        a.local_timeout = 1800.0
    if a.local and not a.local_timeout > 0:
        die(f"--local-timeout {a.local_timeout}: expected seconds > 0")
    if not a.dry_run and not a.local and not os.path.isfile(job_script):
        die(f"{job_script} not found: run sweep.py from the repository root (jobs are submitted from here)")
    if a.cores_per_node is None:
        c = site_default(job_script, "DSGD_CORES_PER_NODE")
        if c and not c.isdigit():
            die(f"DSGD_CORES_PER_NODE={c!r} ({job_script} or the environment): expected a number of cores")
        a.cores_per_node = int(c) if c else 0
    if a.cores_per_node < 0 or a.rank_img_s < 0:
        die("--cores-per-node and --rank-img-s must be >= 0")
    runs_dir = a.runs_dir or (site_default(job_script, "DSGD_RUNS_DIR") if not a.local else "") or "runs"
    if any(c in runs_dir for c in ",\n'\"") or not runs_dir.strip():
        die(f"--runs-dir {runs_dir!r}: a directory name without commas or quotes")
    extra = shlex.split(a.job_args)
    if a.time is not None and time_seconds(a.time, a.scheduler) is None:
        die(f"--time {a.time!r}: expected a wall time such as 24:00:00, 1-00:00:00 or (Slurm) minutes")
    limit = a.time or job_args_time(extra, a.scheduler)
    if a.chain != "auto" and not (a.chain.isdigit() and int(a.chain) >= 1):
        die(f"--chain {a.chain!r}: expected K >= 1 or auto")
    if (a.chain == "auto" or int(a.chain) > 1) and not limit:
        die("--chain needs --time T: each link runs until the time limit and the next continues it")
    if a.gpus_per_node and not (a.cpus_per_rank or a.cores_per_node):
        die(f"--gpus-per-node {a.gpus_per_node}: give --cores-per-node N (each GPU rank asks for N/{a.gpus_per_node} cores "
            "for its JPEG decoder; or set DSGD_CORES_PER_NODE in the job script's site block), or --cpus-per-rank C")
    if a.scheduler == "pbs" and not a.gpus_per_node and not (a.cpus_per_rank or a.cores_per_node):
        die("--scheduler pbs: give --cores-per-node N (CPU chunks ask for whole nodes: ncpus=N, place=scatter:excl; or "
            "set DSGD_CORES_PER_NODE in jobs/pbs/dsgd.pbs's site block), or --cpus-per-rank C")

    out = os.path.join(a.dir, a.name)
    replace_dry_run = False
    if os.path.exists(out):
        try:
            with open(os.path.join(out, "sweep.json")) as f:
                old = json.load(f)
            # a dry run, or a submission of which no job was accepted, is replaced
            replace_dry_run = old.get("dry_run") is True or not any("job_id" in j for j in old.get("jobs", []))
        except (OSError, ValueError):
            pass
        if not replace_dry_run:
            die(f"{out} exists: an earlier sweep is never overwritten; choose another --name")

    # 1. every point resolved and validated before anything is written
    def part(k, v):
        return v if k == "method" else f"{k.replace('.', '_')}{v}"

    def safe(stem):
        return "".join(c if (c.isalnum() or c in "._+-") else "_" for c in stem)

    # Several files: a first pass finds each point's method and p for its stem.
    multi = len(a.base) > 1
    combos = [(base, list(zip([k for k, _ in axes], combo)))
              for base in a.base for combo in itertools.product(*[vals for _, vals in axes])]
    stems = []
    for base, vary in combos:
        if not multi:
            stems.append(safe(a.name + "-" + "-".join(part(k, v) for k, v in vary)))
            continue
        text = resolve(a.dsgd, base, list(fixed) + [f"{k}={v}" for k, v in vary])
        rest = [part(k, v) for k, v in vary if k not in ("method", "p")]
        stems.append(safe("-".join([a.name, setting(text, "method"), "p" + setting(text, "p")] + rest)))
    if multi and len(set(stems)) != len(stems):  # two files of one method and p: name by file
        stems = [safe("-".join([a.name, os.path.splitext(os.path.basename(base))[0]] + [part(k, v) for k, v in vary]))
                 for base, vary in combos]
    if len(set(stems)) != len(stems):
        die("two points would share a name: " + ", ".join(sorted({x for x in stems if stems.count(x) > 1})))

    points = []
    for (base, vary), stem in zip(combos, stems):
        sets = list(fixed) + [f"{k}={v}" for k, v in vary]
        if a.m is not None:
            text = resolve(a.dsgd, base, sets)
            p = int(setting(text, "p"))
            if a.m % p:
                die(f"point {' '.join(f'{k}={v}' for k, v in vary)}: p = {p} does not divide m = {a.m}")
            sets.append(f"b={a.m // p}")
        sets.append(f'name="{stem}"')
        sets.append(f'output="runs/{stem}.h5"')  # run by hand; a job names its run file by job id
        text = resolve(a.dsgd, base, sets)
        p, method = int(setting(text, "p")), setting(text, "method")
        servers = int(setting(text, "servers")) if method in SERVER_METHODS else 0
        paper_net = (group_setting(text, "model", "arch") == "resnet18" and group_setting(text, "model", "width") == "64"
                     and (group_setting(text, "data", "crop") == "224" if group_setting(text, "data", "format") != "synthetic"
                          else group_setting(text, "data", "shape") == "[3, 224, 224]"))
        points.append({"file": os.path.join(out, stem + ".cfg"), "stem": stem, "base": base, "vary": dict(vary),
                       "p": p, "b": int(setting(text, "b")), "method": method, "ranks": p + servers,
                       "iterations": int(setting(text, "iterations")), "paper_net": paper_net,
                       "device": setting(text, "device"), "text": text})

    rpn = a.ranks_per_node
    if a.scheduler == "pbs":
        for pt in points:
            if pt["ranks"] % rpn:
                die(f"point {pt['stem']}: {pt['ranks']} ranks do not fill PBS chunks of --ranks-per-node {rpn}")
    for s in a.job_set:
        parse_kv(s, "--job-set")
        if "," in s and a.scheduler == "pbs":
            die(f"--job-set {s!r}: PBS's -v cannot carry a comma")

    # Each point's estimated time and cost (T1); the time limit and the chain.
    gpu = bool(a.gpus_per_node) or any(pt["device"] == "cuda" for pt in points) or "device=cuda" in a.job_set
    longest = 0.0
    for pt in (points if not a.local else []):  # --local: no node-hours to estimate
        hours, cost, basis = estimate(pt, rpn, a.cores_per_node, a.cpus_per_rank, gpu, a.rank_img_s)
        pt["estimate_h"] = round(hours, 2) if hours is not None else None
        if hours is None:
            print(f"sweep.py: {pt['stem']}: {pt['ranks']} rank(s), {pt['iterations']} iterations of b = {pt['b']}: "
                  f"no cost estimate ({basis})")
        else:
            longest = max(longest, hours)
            print(f"sweep.py: {pt['stem']}: {pt['ranks']} rank(s), {pt['iterations']} iterations of b = {pt['b']}: "
                  f"about {fmt_hours(hours)}, {cost} ({basis})")
    if a.require_time and not limit:
        worst = max(points, key=lambda pt: pt["estimate_h"] or 0)
        die("no time limit: give --time T (each job's wall time; with --chain K or tools/paper.py --max-time for "
            "points longer than the site's maximum): the scheduler's default is often 1 hour"
            + (f"; the longest point, {worst['stem']}, needs about {fmt_hours(worst['estimate_h'])} (above)"
               if worst["estimate_h"] else ""))
    limit_s = time_seconds(limit, a.scheduler) if limit else None
    if limit and limit_s == 0:
        die(f"--time {limit}: a zero time limit (Slurm reads it as no limit at all): give each job's wall time")
    if limit and a.scheduler == "pbs" and "-" in limit:
        die(f"--time {limit}: PBS takes a walltime as [[H:]M:]S (e.g. 72:00:00), not D-H:M:S")
    if a.chain == "auto":
        chain = max(1, math.ceil(1.25 * longest * 3600 / limit_s)) if longest and limit_s else 1
        print(f"sweep.py: --chain auto: {chain} job(s) per point " +
              (f"(the longest point's estimate × 1.25 / {limit})" if longest else
               "(no estimate: give --chain K, tools/paper.py --max-time, or --rank-img-s; or tools/sweep.py --continue later)"))
    else:
        chain = int(a.chain)
    if chain > MAX_CHAIN:
        die(f"a chain of {chain} jobs per point ({limit} = {limit_s} s each, as {a.scheduler} reads it"
            + (": a bare number is seconds for PBS, minutes for Slurm" if limit and limit.isdigit() else "")
            + f"): more than {MAX_CHAIN} is almost certainly a wrong --time, --max-time or --rank-img-s; "
            "give a longer --time (or --chain K)")
    if longest and limit_s and longest * 3600 > chain * limit_s:
        print(f"sweep.py: warning: the longest point's estimate, {fmt_hours(longest)}, exceeds {chain} job(s) × {limit}: "
              f"it will need more (--chain, or tools/sweep.py --continue later)", file=sys.stderr)

    # 2. the experiment files (a dry run of the same name is replaced)
    if replace_dry_run:
        print(f"sweep.py: replacing {out}/ (a dry run, or no job of it was accepted)")
        shutil.rmtree(out)
    os.makedirs(out)
    for pt in points:
        with open(pt["file"], "x") as f:
            f.write(pt.pop("text"))
    if a.local:
        return run_local(a, out, points, axes, runs_dir, meta)

    # 3. the jobs: link 0 of each job (or job array); links 1..K-1 continue it
    job_sets = [x for s in a.job_set for x in ("--set", s)]
    exports = [f"DSGD_RUNS_DIR={runs_dir}"] + ([f"DSGD_BIN={a.dsgd}"] if a.dsgd != "./dsgd-run" else [])
    firsts = []
    groups = {}
    for pt in points:
        groups.setdefault(pt["ranks"], []).append(pt)
    for ranks, pts in sorted(groups.items()):
        nodes = (ranks + rpn - 1) // rpn  # Slurm: the last node may hold fewer (--ntasks = ranks)
        if ranks % rpn and a.scheduler == "pbs":
            die(f"{ranks} ranks do not fill nodes of --ranks-per-node {rpn} (PBS: choose R dividing every point's ranks)")
        if a.array and len(pts) > 1:
            lst = os.path.join(out, f"ranks{ranks}.list")
            with open(lst, "x") as f:
                f.write("".join(pt["file"] + "\n" for pt in pts))
            targets = [(lst, pts)]
        else:
            targets = [(pt["file"], [pt]) for pt in pts]
        for exp, members in targets:
            n = len(members)
            gpn = a.gpus_per_node
            per_gpu = a.cpus_per_rank or (a.cores_per_node // gpn if gpn else 0)
            if a.scheduler == "slurm":
                cmd = ["sbatch", "--parsable"]
                if gpn and rpn == gpn and ranks % rpn:
                    # a server rank: tasks anywhere, one GPU each, no node left with idle GPUs (L7)
                    cmd += [f"--ntasks={ranks}", "--gpus-per-task=1", f"--cpus-per-task={per_gpu}"]
                elif gpn:
                    cmd += [f"--nodes={nodes}", f"--ntasks={ranks}", f"--ntasks-per-node={rpn}",
                            f"--gpus-per-node={gpn}", f"--cpus-per-task={per_gpu}"]
                else:
                    cmd += [f"--nodes={nodes}", f"--ntasks={ranks}", f"--ntasks-per-node={rpn}"]
                    cmd += [f"--cpus-per-task={a.cpus_per_rank}"] if a.cpus_per_rank else ["--exclusive", "--mem=0"]
                if a.time:
                    cmd.append(f"--time={a.time}")
                cmd.append("--export=ALL," + ",".join(exports))
                if n > 1:
                    cmd.append(f"--array=0-{n - 1}")
                cmd += extra + [SCRIPTS["slurm"], exp] + job_sets
            else:
                env = ",".join([f"EXP={exp}"] + exports)
                if job_sets:
                    env += ",ARGS=" + shlex.join(job_sets)
                if gpn:
                    chunk, place = f"select={nodes}:ncpus={rpn * per_gpu}:mpiprocs={rpn}:ngpus={gpn}", None
                elif a.cpus_per_rank:
                    chunk, place = f"select={nodes}:ncpus={rpn * a.cpus_per_rank}:mpiprocs={rpn}", "place=scatter"
                else:
                    chunk, place = f"select={nodes}:ncpus={a.cores_per_node}:mpiprocs={rpn}", "place=scatter:excl"
                cmd = ["qsub", "-l", chunk] + (["-l", place] if place else [])
                if a.time:
                    cmd += ["-l", f"walltime={a.time}"]
                cmd += ["-v", env]
                if n > 1:
                    cmd += ["-J", f"0-{n - 1}"]
                cmd += extra + [SCRIPTS["pbs"]]
            firsts.append({"command": cmd, "points": [m["stem"] for m in members], "link": 0})

    jobs, env = [], submit_env()
    for j0 in firsts:
        prev, rid = None, None
        for link in range(chain):
            if link == 0:
                j = j0
            else:
                # dry run: placeholders for the ids that sbatch / qsub would print
                j = {"command": with_link(j0["command"], a.scheduler, rid or "<link-0 id>", prev or f"<link-{link - 1} id>"),
                     "points": j0["points"], "link": link}
            n = len(j["points"])
            j["run_ids"] = {stem: (f"{rid}_{k}" if n > 1 else rid) if rid else None for k, stem in enumerate(j["points"])}
            jobs.append(j)
            print(("(dry run) " if a.dry_run else "") + shlex.join(j["command"]))
            if a.dry_run:
                continue
            if link and not prev:
                j["error"] = "not submitted: the link before it was refused"
                continue
            jid, err = submit(j["command"], env)
            if not jid:
                j["error"] = err
                prev = None
                continue
            j["job_id"] = jid
            print(f"  job {jid}")
            prev = jid
            if link == 0:
                rid = numeric_id(jid)
                j["run_ids"] = {stem: (f"{rid}_{k}" if n > 1 else rid) for k, stem in enumerate(j["points"])}
    with open(os.path.join(out, "sweep.json"), "x") as f:
        json.dump({"name": a.name, "submit_dir": os.getcwd(), "base": a.base[0] if len(a.base) == 1 else a.base, "vary": {k: v for k, v in axes}, "set": a.set, "job_set": a.job_set, "m": a.m,
                   "scheduler": a.scheduler, "dry_run": a.dry_run, "runs_dir": runs_dir, "time": limit, "chain": chain,
                   "points": points, "jobs": jobs, **({"meta": meta} if meta is not None else {})}, f, indent=1)
    print(f"sweep.py: {len(points)} point(s) in {out}/, {len(jobs)} job(s)"
          + (f" ({len(firsts)} × a chain of {chain})" if chain > 1 else "")
          + (" (dry run: nothing submitted)" if a.dry_run else ""))
    return 1 if any("error" in j for j in jobs) else 0

if __name__ == "__main__":
    sys.exit(main())
