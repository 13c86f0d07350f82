"""accounting.py — what the batch scheduler knows about a sweep's jobs, for tools/report.py.

    jobs, note = query("slurm" | "pbs", ["1234", "1240_3", ...], timeout=60)

jobs: {job id as the scheduler names it ("1234", an array task "1240_3"; PBS "400" or "400_3"
for 400[3].server): Job}, every array task under its own id. A Job is a dict:
  id       that id;  raw: Slurm's JobIDRaw (the task's own numeric id), else the id
  state    Slurm's state names (PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED,
           OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, REQUEUED, SUSPENDED, ...);
           PBS states and exit statuses are mapped onto them (see _pbs_state)
  exit     "code:signal" as sacct prints it (Slurm), the Exit_status (PBS), or "" when unknown
  elapsed  "[D-]HH:MM:SS" or ""
  detail   e.g. "by 1000" (CANCELLED by uid 1000), PBS's comment, or ""
note: None when the scheduler answered, else one line saying why not (the command is not on
PATH, it failed: its message), so that the caller falls back to the run files alone.

Sources: Slurm `sacct -n -P -X -j IDS -o JobID,JobIDRaw,State,ExitCode,Elapsed` (Slurm 22.05
sacct(1): -X allocations only, -P "|"-separated; with -j the start time defaults to the epoch,
so old jobs are found; pending array tasks come as one record "1240_[2-5%2]"). Where sacct cannot
answer (no slurmdbd: "Slurm accounting storage is disabled"), `sacct -c` (the same fields from the
job completion log, JobCompType=jobcomp/filetxt: finished jobs only) and `squeue --states=all -h
-r -j IDS -o "%i|%A|%T|%r"` (the jobs the controller still holds: pending, running, and finished
ones for MinJobAge, 300 s by default; no exit codes) answer together, squeue's record winning
for a job it shows queued or running (a requeued job). PBS (OpenPBS / PBS Pro):
`qstat -x -t -f -F json IDS` (history: finished jobs need the server's job_history_enable), else
the text of `qstat -x -t -f IDS`. Every command runs under a timeout; nothing here raises.
"""
import json
import re
import shutil
import subprocess

ACTIVE = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RUNNING", "COMPLETING", "CONFIGURING",
          "STAGE_OUT", "SIGNALING", "RESIZING", "SUSPENDED"}
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}


def is_active(job):
    return job["state"] in ACTIVE


def is_queued(job):
    return job["state"] in QUEUED


def _run(cmd, timeout):
    """(stdout, None) or (None, why it failed)."""
    if shutil.which(cmd[0]) is None:
        return None, f"{cmd[0]} not on PATH"
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"{cmd[0]} did not answer within {timeout} s"
    except OSError as ex:
        return None, f"{cmd[0]}: {ex}"
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        return r.stdout, f"{cmd[0]} failed: {msg}"
    return r.stdout, None


def expand_array(jobid):
    """'1240_[0-2,5%2]' -> ['1240_0', '1240_1', '1240_2', '1240_5']; any other id -> [id]."""
    m = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", jobid)
    if not m:
        return [jobid]
    out = []
    for part in m.group(2).split(","):
        a, _, b = part.partition("-")
        if a.isdigit() and (b.isdigit() or not b):
            out += [f"{m.group(1)}_{i}" for i in range(int(a), int(b or a) + 1)]
    return out


def _slurm_state(text):
    """'CANCELLED by 1000' -> ('CANCELLED', 'by 1000'); 'RUNNING' -> ('RUNNING', '')."""
    s, _, rest = text.strip().partition(" ")
    return s.upper(), rest.strip()


def parse_sacct(text):
    jobs = {}
    for line in text.splitlines():
        f = line.split("|")
        if len(f) < 5 or not f[0]:
            continue
        state, detail = _slurm_state(f[2])
        for jid in expand_array(f[0]):
            raw = f[1] if jid == f[0] else jid
            jobs[jid] = {"id": jid, "raw": raw or jid, "state": state, "exit": f[3], "elapsed": f[4], "detail": detail}
    return jobs


def parse_squeue(text):
    jobs = {}
    for line in text.splitlines():
        f = line.split("|")
        if len(f) < 4 or not f[0]:
            continue
        state, _ = _slurm_state(f[2])
        reason = f[3].strip() if f[3].strip() not in ("None", "(null)") else ""
        for jid in expand_array(f[0]):
            jobs[jid] = {"id": jid, "raw": f[1] if jid == f[0] else jid, "state": state, "exit": "", "elapsed": "",
                         "detail": reason}
    return jobs


# PBS job_state letters (qstat(1B)): Q queued, H held, W waiting for its execution time, T in
# transit, S suspended, U suspended (workstation busy), R running, E exiting, B array begun,
# X finished subjob, F finished (history), M moved.
_PBS_ACTIVE = {"Q": "PENDING", "H": "PENDING", "W": "PENDING", "T": "PENDING", "S": "SUSPENDED", "U": "SUSPENDED",
               "R": "RUNNING", "E": "COMPLETING", "B": "RUNNING"}


def _pbs_state(letter, exit_status, comment):
    """Map a PBS job onto Slurm's state names. Exit_status (OpenPBS job.h, pbs_job_attributes(7B)):
    0 completed; > 0 the job script's exit status (> 256: killed by signal Exit_status - 256);
    -29 JOB_EXEC_KILL_WALLTIME, -26/-27 JOB_EXEC_KILL_VMEM/_MEM, -24/-25/-28 other resource limits;
    other negatives: PBS could not run the job (JOB_EXEC_FAIL*, a prologue, a bad node)."""
    if letter in _PBS_ACTIVE:
        return _PBS_ACTIVE[letter]
    if letter not in ("F", "X"):
        return "UNKNOWN"
    if exit_status is None:
        return "CANCELLED" if "deleted" in comment.lower() else "UNKNOWN"
    if exit_status == 0:
        return "COMPLETED"
    if exit_status == -29 or re.search(r"walltime \S+ exceeded", comment):
        return "TIMEOUT"
    if exit_status in (-26, -27):
        return "OUT_OF_MEMORY"
    if exit_status in (-24, -25, -28) or exit_status > 256:
        return "CANCELLED" if "deleted" in comment.lower() else "KILLED"
    if exit_status < 0:
        return "BOOT_FAIL"
    return "FAILED"


def _pbs_id(full):
    """'400[3].server' -> '400_3'; '401.server' -> '401'; '400[].server' -> '400'."""
    base = full.split(".", 1)[0]
    m = re.fullmatch(r"(\d+)\[(\d*)\]", base)
    if m:
        return m.group(1) + (f"_{m.group(2)}" if m.group(2) else "")
    return base


def _pbs_job(full, a):
    try:
        es = int(a.get("Exit_status")) if a.get("Exit_status") not in (None, "") else None
    except (TypeError, ValueError):
        es = None
    comment = str(a.get("comment", ""))
    state = _pbs_state(str(a.get("job_state", "")), es, comment)
    used = a.get("resources_used", {})
    return {"id": _pbs_id(full), "raw": _pbs_id(full), "state": state, "exit": "" if es is None else str(es),
            "elapsed": used.get("walltime", "") if isinstance(used, dict) else "", "detail": comment}


def parse_qstat_json(text):
    data = json.loads(text)
    return {j["id"]: j for j in (_pbs_job(full, a) for full, a in (data.get("Jobs") or {}).items())}


def parse_qstat_text(text):
    """`qstat -f` text: 'Job Id: 400[3].server' then '    key = value' lines (a value continued
    on lines starting with a tab); resources_used.walltime as a dotted key."""
    jobs, cur, key = {}, None, None
    for line in text.splitlines():
        m = re.match(r"Job Id:\s*(\S+)", line)
        if m:
            cur = {}
            jobs[m.group(1)] = cur
            continue
        if cur is None:
            continue
        if line.startswith("\t") and key:
            cur[key] += line.strip()
            continue
        m = re.match(r"\s+([\w.]+) = (.*)$", line)
        if m:
            key = m.group(1)
            cur[key] = m.group(2)
    out = {}
    for full, a in jobs.items():
        a = dict(a)
        a["resources_used"] = {"walltime": a.get("resources_used.walltime", "")}
        j = _pbs_job(full, a)
        out[j["id"]] = j
    return out


def _sacct(ids, extra, timeout):
    jobs = {}
    for k in range(0, len(ids), 200):
        out, err = _run(["sacct"] + extra + ["-n", "-P", "-X", "-j", ",".join(ids[k:k + 200]),
                                             "-o", "JobID,JobIDRaw,State,ExitCode,Elapsed"], timeout)
        if err:
            return {}, err
        jobs.update(parse_sacct(out))
    return jobs, None


def query(scheduler, ids, timeout=60):
    ids = sorted({str(i) for i in ids if i})
    if not ids:
        return {}, None
    jobs, note = {}, None
    if scheduler == "slurm":
        jobs, note = _sacct(ids, [], timeout)
        if note is None:
            return jobs, None
        # No accounting database: the job completion log (finished jobs, with exit codes) and the
        # controller's queue (pending and running jobs, and finished ones for MinJobAge).
        done, note_c = _sacct(ids, ["-c"], timeout)
        out, note_q = _run(["squeue", "--states=all", "-h", "-r", "-j", ",".join(ids), "-o", "%i|%A|%T|%r"], timeout)
        queue = parse_squeue(out or "")  # (squeue fails for a single job id it no longer holds)
        jobs = dict(done)
        for jid, j in queue.items():
            if jid not in jobs or is_active(j):
                jobs[jid] = j
        used = [x for x, ok in (("sacct -c (finished jobs)", not note_c), ("squeue (jobs the controller holds)", queue)) if ok]
        why = [note_c.replace("sacct failed:", "sacct -c failed:", 1) if note_c else None, None if queue else note_q]
        note = "; ".join([note] + [w for w in why if w] + ([" and ".join(used) + " used instead"] if used else []))
        return jobs, note
    if scheduler == "pbs":
        qids = []
        for i in ids:  # 400_3 -> 400[3]; an array job id alone -> 400[] (all its subjobs with -t)
            m = re.fullmatch(r"(\d+)_(\d+)_?", i)
            qids.append(f"{m.group(1)}[{m.group(2)}]" if m else i)
        out, err = _run(["qstat", "-x", "-t", "-f", "-F", "json"] + qids, timeout)
        if out and out.lstrip().startswith("{"):
            try:
                return parse_qstat_json(out), (f"{err} (some jobs unknown to PBS)" if err else None)
            except (ValueError, AttributeError) as ex:
                err = f"qstat -F json: unreadable output ({ex})"
        out2, err2 = _run(["qstat", "-x", "-t", "-f"] + qids, timeout)
        if out2 and "Job Id:" in out2:
            return parse_qstat_text(out2), (f"{err2} (some jobs unknown to PBS)" if err2 else None)
        return {}, err2 or err or "qstat gave no job records"
    return {}, f"scheduler {scheduler!r}: no accounting known"
