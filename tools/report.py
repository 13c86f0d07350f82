#!/usr/bin/python3
"""report.py — which method is fastest at each p: the papers' comparison from dsgd-run run files.

    /usr/bin/python3 tools/report.py RUNS_OR_SWEEP_DIRS... --out PREFIX [--targets 0.5,0.4,0.35]
                                     [--title T] [--overwrite] [--stale-after S] [--no-accounting]

Arguments: run files (*.h5), directories of run files, or sweep directories (sweeps/<name>/ of
tools/sweep.py or tools/paper.py: their points' run files <runs dir>/<stem>.<run id>.h5 are found
in sweep.json's runs_dir (relative to its submit_dir), else in runs/ of the submit directory,
beside the sweeps/ folder, or in the current directory).

Training runs give, for every p, each method's time to each target top-1 error (with the
speed-up against all-reduce at that p), final top-1 error, img/s, scaling efficiency against
the same method at the smallest p it ran, and the winner (the least time to the tightest target
some method at that p reached); and the paper's figure (Jin et al. 2016, Figures 1 and 2):
validation loss and top-1 error against wall-clock time, one row of panels per p.
Synthetic-data runs (tools/paper.py scaling) give img/s and scaling efficiency against p per
method, table and plot (PREFIX-scaling.* when training runs are reported too).

Runs of the same point (the same experiment but for its name, output, seed, resume and
checkpoint keys) are repeats: combined as the median, with the spread (min-max) in brackets,
over the completed runs only; while none has completed, over the runs so far ("(so far)"). A
point with completed runs and others (a run cut off and restarted afresh under another run id)
is flagged with ⚠ and its numbers come from the completed runs. A run continued from its
checkpoint (requeued, chained, tools/sweep.py --continue) is one run: the same file. For `backup`,
p is N = p - backups, the workers whose gradients make each step (Chen et al.), so it sits beside
the other methods at that p.

The state of every run ("Runs and jobs": one row per run, with its jobs) comes from its run file's
status (docs/output.md) and, for sweeps, from the scheduler's record of the jobs in sweep.json
(each link of a chain; run files of other job ids under a point's name are looked up too):
Slurm's sacct (without a database: sacct -c, the job completion log, and squeue), PBS's qstat -x
(tools/accounting.py). States:
completed; running (the job runs); pending (queued, no run file yet); chained (stopped with a
checkpoint, its next link queued: link k of K, counted from 1); interrupted (checkpoint written:
resumable, `tools/sweep.py --continue SWEEP`; a sim run of a method sim mode cannot resume yet,
whose status says so: "not resumable (sim mode)", --continue runs it afresh); timed out (TIMEOUT, with the checkpoint if any);
killed (no status and the job is over: OUT_OF_MEMORY, NODE_FAIL, CANCELLED, ...; with its last
checkpoint if any); failed (a status "stopped: ..."); failed before a run file (the job ended,
no file: its id and exit code); unreadable (a truncated or foreign file: named and skipped, the
rest reported). Without the scheduler's record (no sacct/qstat, it fails, --no-accounting, or run
files given directly) a run without a status is "running" while its file is being published and
"stale (no publication for N s)" once the file is older than --stale-after S (default 10 times
its publication interval: the longest gap between its logged rows, at least 80 s; a live run
publishes at least that often, docs/output.md). Running runs are drawn dashed, ended ones
(failed, killed, stale, timed out) with a cross at their end.

Exit status 0 when something was reported (also with unreadable files among the others), 2 when
nothing could be (no run file readable and no sweep given), on bad arguments, or when an output
exists.

Writes PREFIX.md (the tables), PREFIX.png, PREFIX.pdf and prints the tables. An existing output
is never replaced unless --overwrite. Needs h5py, numpy, matplotlib (Debian python3-h5py,
python3-matplotlib).
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys
import textwrap
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import accounting  # noqa: E402  (tools/accounting.py)
from runfiles import (PUBLICATION_FLOOR_S, STALE_MULTIPLE, checkpoint_step, config_value, img_per_s, last_step,  # noqa: E402
                      read_run, stale, time_to)  # (tools/runfiles.py)

# Keys that do not make two runs different points (docs/config.md, "What makes two runs identical").
NOT_THE_POINT = ("name", "output", "overwrite", "resume", "stop_at", "seed", "comm_timeout_s", "log_every", "threads")


def die(msg):
    print(f"report.py: {msg}", file=sys.stderr)
    sys.exit(2)


def point_key(config):
    """The resolved experiment without the keys that repeats may differ in."""
    out, group = [], []
    for line in config.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"(\w+) = \{$", s)
        if m:
            group.append(m.group(1))
            continue
        if s == "};":
            group.pop() if group else None
            continue
        m = re.match(r"(\w+) = ", s)
        k = ".".join(group + [m.group(1)]) if m else s
        if k in NOT_THE_POINT or k.startswith("checkpoint.") or k == "data.threads":
            continue
        out.append(f"{k}: {s}")
    return "\n".join(out)


JOB_ID = re.compile(r"\d+(?:_\d+_?)?")  # what a run id made of a job id looks like (INTERFACES: 1234, 1234_0; PBS 400_3_)


def load_sweep(a):
    """A sweep directory's sweep.json, with what the report needs, tolerant of the fields that
    older sweep.py versions did not write (runs_dir, time, chain, a job's link and run_ids)."""
    path = os.path.join(a, "sweep.json")
    try:
        with open(path) as f:
            sw = json.load(f)
        points = [pt["stem"] for pt in sw["points"]]
    except (OSError, ValueError, KeyError, TypeError) as ex:
        die(f"{path}: not a sweep.json of tools/sweep.py ({ex})")
    roots = []
    submit = sw.get("submit_dir") or ""
    if sw.get("runs_dir"):
        roots.append(os.path.join(submit, sw["runs_dir"]))
    for root in ([submit] if submit else []) + [os.path.dirname(os.path.dirname(os.path.abspath(a).rstrip("/"))), os.getcwd()]:
        roots.append(os.path.join(root, "runs"))
    return {"dir": a, "name": sw.get("name") or os.path.basename(os.path.abspath(a).rstrip("/")), "points": points,
            "jobs": [j for j in sw.get("jobs", []) if isinstance(j, dict)], "scheduler": sw.get("scheduler", "slurm"),
            "chain": int(sw.get("chain") or 1), "roots": roots, "dry_run": sw.get("dry_run"),
            "meta": sw.get("meta") if isinstance(sw.get("meta"), dict) else {}}


def run_files_of(sweep, stem):
    """The run files <stem>.<run id>.h5 of a sweep's point, from the first runs directory holding any."""
    for root in sweep["roots"]:
        found = sorted(x for x in glob.glob(os.path.join(root, glob.escape(stem) + ".*.h5"))
                       if re.fullmatch(re.escape(stem) + r"\.[0-9A-Za-z_]+\.h5", os.path.basename(x)))
        if found:
            return found
    return []


def job_links(sweep, stem):
    """The jobs (links) of a sweep's point: [{"link", "id" (the id the scheduler's accounting names:
    a job, or an array task <array id>_<index>), "run_ids" (what the run file may be named by, best
    first), "query" (what to ask the scheduler)}]."""
    out = []
    for j in sweep["jobs"]:
        if stem not in j.get("points", []) or not j.get("job_id"):
            continue
        jid = str(j["job_id"]).split(";")[0]
        base = re.sub(r"\[\]$", "", jid.split(".", 1)[0])  # PBS: 400[].server -> 400, 401.server -> 401
        array = len(j["points"]) > 1
        aid = f"{base}_{j['points'].index(stem)}" if array else base
        rid = (j.get("run_ids") or {}).get(stem)
        # run ids: the sweep's own (INTERFACES.md); else today's job scripts: the job id, an array
        # task's own SLURM_JOB_ID (sacct's JobIDRaw, filled in later) or PBS's 400_3_.
        cands = [str(rid)] if rid else ([aid, aid + "_"] if array else [aid])
        out.append({"link": int(j.get("link") or 0), "id": aid, "run_ids": cands, "query": jid, "array": array})
    return out


def collect(args):
    """(runs, sweeps): runs = [{"path" (None: no run file), "point", "run_id", "sweep", "links"}],
    one per run file found, and per sweep point a placeholder holding its jobs (attach_jobs)."""
    sweeps, runs, seen = [], [], set()

    def add_file(path, point, run_id, sweep):
        rp = os.path.realpath(path)
        if rp in seen:
            return None
        seen.add(rp)
        run = {"path": path, "point": point, "run_id": run_id, "sweep": sweep, "links": []}
        runs.append(run)
        return run

    # sweeps first, so that a run file also reached through a directory argument keeps its sweep's jobs
    for a in sorted(args, key=lambda x: not os.path.isfile(os.path.join(x, "sweep.json"))):
        if os.path.isfile(os.path.join(a, "sweep.json")):
            sw = load_sweep(a)
            sweeps.append(sw)
            for stem in sw["points"]:
                for path in run_files_of(sw, stem):
                    add_file(path, stem, os.path.basename(path)[len(stem) + 1:-3], sw)
                errs = [j["error"] for j in sw["jobs"] if stem in j.get("points", []) and j.get("error") and not j.get("job_id")]
                runs.append({"path": None, "point": stem, "run_id": None, "sweep": sw, "links": job_links(sw, stem),
                             "submit_error": errs[0] if errs else None})
        elif os.path.isfile(a):
            add_file(a, None, None, None)
        elif os.path.isdir(a):
            for path in sorted(glob.glob(os.path.join(a, "*.h5"))):
                add_file(path, None, None, None)
        else:
            die(f"{a}: not a run file, a directory of run files or a sweep directory")
    return runs, sweeps


def attach_jobs(runs, acct):
    """Give each sweep run file the job links that wrote it (by run id), drop the placeholders whose
    jobs wrote a run file, and give a run file named by a job id that no link names that job."""
    by_file = {}
    for r in runs:
        if r["path"] is not None and r["sweep"] is not None:
            by_file[(id(r["sweep"]), r["point"], r["run_id"])] = r
    with_file = {(id(r["sweep"]), r["point"]) for r in runs if r["path"] is not None and r["sweep"] is not None}
    out = []
    for r in runs:
        if r["path"] is not None:
            out.append(r)
            continue
        if not r["links"] and (id(r["sweep"]), r["point"]) not in with_file:
            out.append(r)  # a point without a job (dry run) or a run file
            continue
        rest = {}
        for ln in r["links"]:
            ln["job"] = acct.get(ln["id"])
            cands = list(ln["run_ids"])
            if ln["job"] is not None and ln["array"] and ln["job"]["raw"] not in cands:
                cands.insert(1, ln["job"]["raw"])  # today's array tasks: the run file has the task's own job id
            target = next((by_file[k] for k in ((id(r["sweep"]), r["point"], c) for c in cands) if k in by_file), None)
            if target is not None:
                target["links"].append(ln)
            else:
                rest.setdefault(cands[0], []).append(ln)
        for rid, lns in rest.items():
            out.append({"path": None, "point": r["point"], "run_id": rid, "sweep": r["sweep"], "links": lns})
    for r in out:
        jid = (r["run_id"] or "").rstrip("_")
        if r["path"] is not None and r["sweep"] is not None and not r["links"] and jid in acct:
            # a run submitted by hand under this point's name (another job id)
            r["links"].append({"link": 0, "id": jid, "run_ids": [r["run_id"]], "query": jid, "array": False, "job": acct[jid],
                               "by_hand": True})
        r["links"].sort(key=lambda ln: ln["link"])
    return out


def ask_schedulers(runs, sweeps, enabled):
    """{scheduler: (jobs, note)} for the schedulers of the sweeps given (accounting.py)."""
    res = {}
    for sched in sorted({sw["scheduler"] for sw in sweeps}):
        ids, named, files = set(), set(), set()
        for r in runs:
            if r["sweep"] is None or r["sweep"]["scheduler"] != sched:
                continue
            ids.update(ln["query"] for ln in r["links"])
            named.update(ln["id"] for ln in r["links"])
            if r["run_id"] and JOB_ID.fullmatch(r["run_id"]):
                files.add(r["run_id"].rstrip("_"))
        ids |= files - named  # run files of jobs that sweep.json does not name (submitted by hand)
        if not ids:
            continue
        if sched == "local":  # tools/sweep.py --local: the points ran here; sweep.json holds each one's record
            jobs = {}
            for sw in sweeps:
                for j in sw["jobs"]:
                    rec = j.get("local") if sw["scheduler"] == "local" else None
                    if isinstance(rec, dict) and j.get("job_id"):
                        jid = str(j["job_id"])
                        jobs[jid] = {"id": jid, "raw": jid, "state": rec.get("state") or "PENDING", "exit": rec.get("exit") or "",
                                     "elapsed": rec.get("elapsed") or "", "detail": ""}
            res[sched] = (jobs, None)
            continue
        res[sched] = accounting.query(sched, ids) if enabled else ({}, "not asked (--no-accounting)")
    return res


def step_text(r):
    return f"step {last_step(r)} of {r['iterations']}"


def file_text(r, status, ckpt_s):
    """What the run file says of a run that is not completed."""
    if status is None:
        return f"no status (killed) at {step_text(r)}; {ckpt_s}"
    if status.startswith("interrupted"):
        why = re.match(r"interrupted: (.*?) after step", status)
        return f"interrupted ({why.group(1) if why else status}) at {step_text(r)}, checkpoint written"
    return f"failed at {step_text(r)}: {status}"


def job_text(ln, chain, with_state=True):
    """'job 1007, link 2 of 3: FAILED, exit 3:0' (links counted from 1: sweep.json's link + 1)."""
    j = ln.get("job")
    s = f"job {ln['id']}"
    if chain > 1 or ln["link"] > 0:
        s += f", link {ln['link'] + 1} of {max(chain, ln['link'] + 1)}"
    if j is not None and not with_state:
        return s + (f": {j['detail']}" if j["detail"] else "")
    if j is not None:
        s += f": {j['state']}" + (f" {j['detail']}" if j["detail"] and j["state"] == "CANCELLED" else "")
        if j["exit"] and j["state"] not in accounting.ACTIVE:
            s += f", exit {j['exit']}"
    return s


def never_ran(job):
    return job["state"] == "CANCELLED" and job["elapsed"] in ("", "00:00:00", "0:00")


def run_state(run, now, stale_after):
    """(kind, text) of a run: kind one of completed, running, pending, chained, interrupted,
    timed out, killed, stale, failed, failed before a run file, unreadable; text says it all, with
    the job (and link) that decides it. Sources: the run file's status (docs/output.md), the
    scheduler's record of the run's jobs when there is one, else the file's age (runfiles.stale)."""
    r, links = run.get("r"), run["links"]
    sw = run["sweep"]
    chain = max([sw["chain"] if sw and not any(ln.get("by_hand") for ln in links) else 1] + [ln["link"] + 1 for ln in links])
    known = [ln for ln in links if ln.get("job") is not None]
    going = [ln for ln in known if accounting.is_active(ln["job"]) and not accounting.is_queued(ln["job"])]
    queued = [ln for ln in known if accounting.is_queued(ln["job"])]
    done = [ln for ln in known if not accounting.is_active(ln["job"])]
    # the link that decides: the last one that ran (a later link cancelled before it started, e.g.
    # the rest of a chain after a failure, says nothing about the run)
    ran = [ln for ln in done if not never_ran(ln["job"])]
    last = max(ran or done, key=lambda ln: ln["link"]) if done else None
    cont = f"resumable: tools/sweep.py --continue {sw['dir'].rstrip('/')}" if sw else "resumable: DSGD_RUN_ID=<its run id> (jobs/README.md)"
    if run.get("error"):
        return "unreadable", f"unreadable run file ({run['error']})" + (f"; {job_text(links[-1], chain)}" if links else "")
    status = r["status"] if r else None
    if status and "cannot resume" in status:  # sim mode's server methods and asynchronous gossip (docs/checkpoint.md)
        cont = "not resumable (sim mode): " + (f"tools/sweep.py --continue {sw['dir'].rstrip('/')} runs it afresh" if sw
                                               else "start it again under another output")
    if status == "completed":
        return "completed", f"completed ({step_text(r)})"
    ckpt = checkpoint_step(run["path"]) if r else None
    ckpt_s = f"checkpoint step-{ckpt}: {cont}" if ckpt is not None else "no checkpoint"
    if going:
        ln = going[-1]
        s = f"running ({job_text(ln, chain, False)}" + (f", {step_text(r)})" if r else ", no run file yet)")
        age = stale(r, now, stale_after) if r else None
        if age is not None:
            s += f", but no publication for {age:.0f} s"
        return "running", s
    if queued:
        ln = min(queued, key=lambda x: x["link"])
        if r is None:
            return "pending", f"pending ({job_text(ln, chain, False)})"
        return "chained", f"{file_text(r, status, ckpt_s)}; next: {job_text(ln, chain, False)}, pending"
    if r is not None and status is not None and status.startswith("interrupted"):
        if last is not None and last["job"]["state"] == "TIMEOUT":
            return "timed out", f"timed out at {step_text(r)}, checkpoint written ({job_text(last, chain)}); {cont}"
        return "interrupted", file_text(r, status, ckpt_s) + (f" ({job_text(last, chain)})" if last else "") + f"; {cont}"
    if r is not None and status is not None:
        return "failed", file_text(r, status, ckpt_s) + (f" ({job_text(last, chain)})" if last else "")
    if r is not None:  # no status: running, or killed
        if last is not None:
            kind = "timed out" if last["job"]["state"] == "TIMEOUT" else "killed"
            return kind, f"{kind} at {step_text(r)}, no status ({job_text(last, chain)}); {ckpt_s}"
        age = stale(r, now, stale_after)
        if age is not None:
            return "stale", f"stale (no publication for {age:.0f} s) at {step_text(r)}; {ckpt_s}"
        return "running", "running" + (f" ({step_text(r)})" if len(r["t_step"]) else "")
    if last is not None:
        j = last["job"]
        if never_ran(j):
            return "failed before a run file", f"cancelled before it started ({job_text(last, chain)})"
        return "failed before a run file", f"failed before a run file ({job_text(last, chain)})"
    if links:
        return "pending", f"no run file yet ({job_text(links[-1], chain)}, unknown to the scheduler's accounting)"
    if run.get("submit_error"):
        return "failed before a run file", f"not submitted: {run['submit_error']}"
    return "pending", "pending (no run file yet)"


def state(r):
    return r["kind"]


def median_spread(vals, fmt):
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    if not vals:
        return None, "-"
    med = statistics.median(vals)
    s = fmt(med)
    if len(vals) > 1 and fmt(min(vals)) != fmt(max(vals)):
        s += f" [{fmt(min(vals))}–{fmt(max(vals))}]"
    return med, s


def fmt_time(t):
    if t >= 3600:
        return f"{t / 3600:.2f} h"
    if t >= 120:
        return f"{t / 60:.1f} min"
    return f"{t:.3g} s"


def group_runs(runs):
    groups = {}
    for r in runs:
        groups.setdefault(point_key(r["config"]), []).append(r)
    out = []
    for key, rs in groups.items():
        r0 = rs[0]
        backups = int(config_value(r0, "backups") or 0) if r0["method"] == "backup" else 0
        g = {"runs": rs, "method": r0["method"], "p": r0["p"] - backups, "ranks_p": r0["p"], "backups": backups,
             "b": r0["b"], "synthetic": r0["synthetic"]}
        g["label"] = r0["method"] + (f"+{backups} backup" + ("s" if backups != 1 else "") if r0["method"] == "backup" else "")
        out.append(g)
    # two different points of one method and p: tell them apart by their names
    base = [(g["p"], g["label"]) for g in out]
    for i, g in enumerate(out):
        same = [j for j, k in enumerate(base) if k == base[i]]
        if len(same) > 1:
            names = {out[j]["runs"][0]["name"] for j in same}
            g["label"] += f" ({g['runs'][0]['name']})" if len(names) == len(same) else f" (#{same.index(i) + 1})"
    return sorted(out, key=lambda g: (g["p"], g["method"] != "allreduce", g["label"]))


def states_text(g):
    """The status cell of a point: the state of its one run, or the count of each state; a point
    with completed runs and others is flagged (only the completed ones make its numbers: R2)."""
    c = {}
    for r in g["runs"]:
        c[state(r)] = c.get(state(r), 0) + 1
    n = len(g["runs"])
    if len(c) == 1 and n == 1:
        return next(iter(c))
    s = ", ".join(f"{v} {k}" for k, v in sorted(c.items()))
    if "completed" in c and len(c) > 1:
        s = f"⚠ {s}: numbers from the completed run{'s' if c['completed'] > 1 else ''} only"
    return s


def basis(g):
    """The runs a point's numbers come from: its completed runs, or, while none has completed, all
    of them (their values so far)."""
    done = [r for r in g["runs"] if state(r) == "completed"]
    return (done, "") if done else (g["runs"], " (so far)")


def cfg_group_value(config, group, key):
    """A scalar of a group of the resolved experiment text, or None."""
    inside = False
    for line in config.splitlines():
        t = line.strip()
        if t == group + " = {":
            inside = True
        elif inside and t == "};":
            return None
        elif inside and t.startswith(key + " = ") and t.endswith(";"):
            return t[len(key) + 3:-1].strip().strip('"')
    return None


def proxy_task(r):
    """What a run really trains: 'linear model on fashion-mnist (idx)', 'ResNet-18 width 4 (cifar stem) on ...'."""
    arch = cfg_group_value(r["config"], "model", "arch") or "?"
    model = ("linear model" if arch == "linear" else
             f"ResNet-18 width {cfg_group_value(r['config'], 'model', 'width')} ({cfg_group_value(r['config'], 'model', 'stem')} stem)"
             if arch == "resnet18" else arch)
    fmt = cfg_group_value(r["config"], "data", "format") or "?"
    if fmt == "idx":
        data = os.path.basename(os.path.dirname(cfg_group_value(r["config"], "data", "train_images") or "")) or "IDX data"
        data = {"fashion-mnist": "Fashion-MNIST", "mnist": "MNIST"}.get(data.lower(), data)
    elif fmt == "jpeg":
        data = f"the pack {cfg_group_value(r['config'], 'data', 'dir')}"
    else:
        data = "synthetic data"
    return f"{model} on {data}"


def sim_key(r):
    """What makes simulated runs comparable on one time axis: the models and the proxy task (None: a real run)."""
    sm = r.get("sim")
    if not sm:
        return None
    # the network's numbers too (a custom network's, or a preset's if it ever changes) and the jitter
    return (sm.get("sim_device"), sm.get("sim_device_source"), sm.get("sim_network"), sm.get("sim_network_source"),
            sm.get("sim_topology"), sm.get("sim_allreduce"), sm.get("sim_model_bytes"), proxy_task(r),
            sm.get("sim_link_latency_s"), sm.get("sim_bandwidth_Bps"), sm.get("sim_jitter"))


def sim_banner(key, short=False):
    """'simulated: k80 (estimate: ...), 10gbe (...), flat, ring all-reduce of 46,758,048 bytes; proxy task: ...'
    (short: each source cut to its first 60 characters, for a figure's title)."""
    dev, dsrc, net, nsrc, topo, alg, nbytes, proxy, lat, bw, jitter = key

    def cut(x):
        x = str(x or "no source")
        return x if not short or len(x) <= 60 else x[:59].rstrip() + "…"
    nb = f"{int(nbytes):,} bytes" if nbytes is not None else "? bytes"
    nums = f"{float(lat) * 1e6:g} µs per link, {float(bw) * 8e-9:g} Gbit/s" if lat is not None and bw is not None else ""
    jit = f", compute jitter CV {float(jitter):g}" if jitter else ""
    return (f"simulated: {dev} ({cut(dsrc)}){jit}, {net} ({cut(nsrc)}{'; ' + nums if nums else ''}), {topo}, "
            f"{alg} all-reduce of {nb}; proxy task: {proxy} (docs/simulate.md)")


def training_report(groups, targets, sim=False):
    """The per-p table and the winners. sim: the runs' time is a virtual clock (docs/simulate.md);
    two more columns, the simulated seconds per iteration (m / img/s) and the real training wall
    clock (wall_train_time_s: what the simulation cost here)."""
    lines = []
    by_p = {}
    for g in groups:
        by_p.setdefault(g["p"], []).append(g)
    # img/s and time to each target per group
    for g in groups:
        runs, so_far = basis(g)
        g["ips"], g["ips_s"] = median_spread([img_per_s(r) for r in runs], lambda v: f"{v:.0f}")
        g["final"], g["final_s"] = median_spread([float(r["e_top1"][-1]) if len(r["e_top1"]) else None for r in runs],
                                                 lambda v: f"{v:.4f}")
        if g["final"] is not None:
            g["final_s"] += so_far
        if g["ips"] is not None:
            g["ips_s"] += so_far
        g["tt"] = []
        for t in targets:
            ts = [time_to(r, t) for r in runs]
            med, s = median_spread(ts, fmt_time)
            hit = sum(x is not None for x in ts)
            if 0 < hit < len(ts):
                s += f" ({hit}/{len(ts)} reached)"
            g["tt"].append((med, s))
    # scaling efficiency against the same point at its smallest p (method and b-independent key)
    smallest = {}
    for g in groups:
        k = g["label"]
        if g["ips"] is not None and (k not in smallest or g["p"] < smallest[k]["p"]):
            smallest[k] = g
    hdr = (["p", "method", "runs", "status", "b"] + [f"time to top-1 ≤ {t:g} (speed-up vs allreduce)" for t in targets]
           + ["final top-1", "img/s", "scaling eff.", "winner"])
    if sim:
        hdr = (["p", "method", "runs", "status", "b"]
               + [f"simulated time to top-1 ≤ {t:g} (speed-up vs allreduce)" for t in targets]
               + ["final top-1", "img/s (simulated)", "s per iteration (simulated)", "real wall clock here (wall_train_time_s)", "scaling eff.", "winner"])
    lines.append("| " + " | ".join(hdr) + " |")
    lines.append("|" + "---|" * len(hdr))
    winners = []
    for p in sorted(by_p):
        gs = by_p[p]
        ref = next((g for g in gs if g["method"] == "allreduce"), None)
        # the winner: least time to the tightest target some method reached; ties by final error
        win, win_t = None, None
        for i in reversed(range(len(targets))):
            cand = [g for g in gs if g["tt"][i][0] is not None]
            if cand:
                win = min(cand, key=lambda g: (g["tt"][i][0], g["final"] if g["final"] is not None else 1))
                win_t = i
                break
        for g in gs:
            cells = []
            for i, (med, s) in enumerate(g["tt"]):
                if med is not None and ref is not None and ref is not g and ref["tt"][i][0] is not None:
                    s += f" ({ref['tt'][i][0] / med:.2f}×)"
                elif med is not None and ref is g:
                    s += " (1.00×)"
                cells.append(s)
            s0 = smallest.get(g["label"])
            eff = "-"
            if s0 is not None and g["ips"] is not None:
                eff = f"{(g['ips'] / s0['ips']) / (g['ranks_p'] / s0['ranks_p']):.2f} (vs p={s0['p']})"
            row = [str(p), g["label"], str(len(g["runs"])), states_text(g), str(g["b"])] + cells + [g["final_s"], g["ips_s"], eff,
                                                                                                   "**winner**" if g is win else ""]
            if sim:
                runs, so_far = basis(g)
                _, it_s = median_spread([r["m"] / img_per_s(r) if img_per_s(r) > 0 else None for r in runs], fmt_time)
                _, wall_s = median_spread([(r["sim"] or {}).get("wall_train_time_s") for r in runs], fmt_time)
                row[-2:-2] = [it_s, wall_s + (so_far if wall_s != "-" else "")]
            lines.append("| " + " | ".join(row) + " |")
        if win is not None:
            t = targets[win_t]
            vs = ""
            if ref is not None and ref is not win and ref["tt"][win_t][0] is not None:
                vs = f", {ref['tt'][win_t][0] / win['tt'][win_t][0]:.2f}× faster than allreduce"
            elif ref is not None and ref is not win:
                vs = ", allreduce did not reach it"
            winners.append(f"- p = {p}: **{win['label']}** reaches top-1 error ≤ {t:g} first, in {fmt_time(win['tt'][win_t][0])}"
                           f"{' (simulated)' if sim else ''}{vs}.")
        else:
            winners.append(f"- p = {p}: no method reached top-1 error ≤ {targets[0]:g} yet.")
    lines.append("")
    lines += winners
    return lines


ENDED = ("failed", "killed", "stale", "timed out", "unreadable")  # drawn with a cross at their end


def training_figure(groups, targets, out, title, sim=None):
    """The paper's layout; sim: the banner of simulated runs (sim_banner): every curve, axis and the
    title say so."""
    ps = sorted({g["p"] for g in groups})
    tmax = max((float(r["e_time"][-1]) for g in groups for r in g["runs"] if len(r["e_time"])), default=0.0)
    unit, scale = ("hours", 3600.0) if tmax >= 7200 else ("minutes", 60.0) if tmax >= 120 else ("seconds", 1.0)
    fig, ax = plt.subplots(len(ps), 2, figsize=(12, 3.8 * len(ps)), squeeze=False)
    labels = sorted({g["label"] for g in groups})
    cmap = plt.get_cmap("tab10")
    colour = {lab: cmap(i % 10) for i, lab in enumerate(labels)}
    for row, p in enumerate(ps):
        for g in [g for g in groups if g["p"] == p]:
            first = True
            for r in g["runs"]:
                st = state(r)
                lab = None
                if first:
                    lab = g["label"] + (f" ×{len(g['runs'])}" if len(g["runs"]) > 1 else "") + (" (simulated)" if sim else "")
                    sts = {state(x) for x in g["runs"]} - {"completed"}
                    if sts:
                        lab += " (" + ", ".join(sorted(sts)) + ")"
                first = False
                wall = np.asarray(r["e_time"], dtype=float) / scale
                kw = dict(color=colour[g["label"]], linewidth=1.3, marker=".", markersize=3, label=lab,
                          linestyle="-" if st == "completed" or st in ENDED else "--")
                ax[row, 0].plot(wall, r["e_loss"], **kw)
                kw["label"] = None
                ax[row, 1].plot(wall, r["e_top1"], **kw)
                if st in ENDED and len(wall):
                    for j, y in ((0, r["e_loss"][-1]), (1, r["e_top1"][-1])):
                        ax[row, j].plot(wall[-1], y, "x", color=colour[g["label"]], markersize=9, mew=2)
        for t in targets:
            ax[row, 1].axhline(t, color="grey", linewidth=0.7, linestyle=":")
        for j, yl in enumerate(("validation loss (nats)", "validation top-1 error")):
            ax[row, j].set_title(f"p = {p}: {yl.split(' (')[0]}", fontsize=10)
            ax[row, j].set_xlabel(f"simulated time ({unit}, virtual clock)" if sim else f"wall-clock time ({unit})")
            ax[row, j].set_ylabel(yl)
            ax[row, j].grid(True, alpha=0.3)
        ax[row, 0].legend(fontsize=8)
    if sim:
        fig.suptitle((title + "\n" if title else "validation loss and top-1 error against simulated time (Jin et al. 2016, "
                      "Figures 1 and 2)\n") + textwrap.fill(sim, 140), fontsize=9)
    else:
        fig.suptitle(title or "validation loss and top-1 error against wall-clock time (Jin et al. 2016, Figures 1 and 2)")
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=110)
    fig.savefig(out + ".pdf")
    plt.close(fig)


def scaling_report(groups):
    lines = []
    smallest = {}
    for g in groups:
        runs, so_far = basis(g)
        g["ips"], g["ips_s"] = median_spread([img_per_s(r) for r in runs], lambda v: f"{v:.0f}")
        if g["ips"] is not None:
            g["ips_s"] += so_far
        if g["ips"] is not None and (g["label"] not in smallest or g["ranks_p"] < smallest[g["label"]]["ranks_p"]):
            smallest[g["label"]] = g
    for g in groups:
        s0 = smallest.get(g["label"])
        g["eff"] = (g["ips"] / s0["ips"]) / (g["ranks_p"] / s0["ranks_p"]) if s0 and g["ips"] is not None else None
    lines.append("| method | p | b | runs | status | img/s | img/s per worker | scaling eff. (vs smallest p) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for g in sorted(groups, key=lambda g: (g["label"], g["ranks_p"])):
        per = f"{g['ips'] / g['ranks_p']:.1f}" if g["ips"] is not None else "-"
        eff = f"{g['eff']:.2f}" if g["eff"] is not None else "-"
        lines.append(f"| {g['label']} | {g['ranks_p']} | {g['b']} | {len(g['runs'])} | {states_text(g)} | {g['ips_s']} | {per} | {eff} |")
    return lines


def scaling_figure(groups, out, title):
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    for lab in sorted({g["label"] for g in groups}):
        gs = sorted([g for g in groups if g["label"] == lab and g["ips"] is not None], key=lambda g: g["ranks_p"])
        if not gs:
            continue
        ps = [g["ranks_p"] for g in gs]
        ax[0].plot(ps, [g["ips"] for g in gs], "o-", label=lab)
        ax[1].plot(ps, [g["eff"] for g in gs], "o-", label=lab)
    allp = sorted({g["ranks_p"] for g in groups})
    ideal = [g for g in groups if g["ranks_p"] == allp[0] and g["ips"] is not None]
    if ideal:
        base = max(g["ips"] for g in ideal)
        ax[0].plot(allp, [base * p / allp[0] for p in allp], ":", color="grey", label="linear (best at smallest p)")
    for x, yl in ((ax[0], "img/s (training throughput)"), (ax[1], "scaling efficiency")):
        x.set_xscale("log", base=2)
        x.set_xticks(allp)
        x.set_xticklabels([str(p) for p in allp])
        x.set_xlabel("p (workers)")
        x.set_ylabel(yl)
        x.grid(True, alpha=0.3)
        x.legend(fontsize=8)
    ax[0].set_yscale("log")
    ax[1].axhline(1.0, color="grey", linewidth=0.7, linestyle=":")
    fig.suptitle(title or "throughput against p on synthetic data")
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=110)
    fig.savefig(out + ".pdf")
    plt.close(fig)


def jobs_table(runs, sched, stale_after):
    """One row per run: its point, run id, jobs (each link's id, state, exit code, elapsed time)
    and state; then where the states came from."""
    lines = ["| point | run | jobs | state |", "|---|---|---|---|"]
    order = {k: i for i, k in enumerate(("running", "chained", "pending", "interrupted", "timed out", "killed", "stale",
                                          "failed", "failed before a run file", "unreadable", "completed"))}
    for run in sorted(runs, key=lambda x: (x["sweep"]["name"] if x["sweep"] else "", x["point"] or "", str(x["run_id"]))):
        jobs = "; ".join(f"{ln['id']}" + (f" (link {ln['link'] + 1})" if len(run["links"]) > 1 or ln["link"] else "")
                         + (f" {ln['job']['state']}" + (f" {ln['job']['exit']}" if ln["job"]["exit"] else "")
                            + (f" {ln['job']['elapsed']}" if ln["job"]["elapsed"] else "") if ln.get("job") else " (no record)")
                         for ln in run["links"]) or "-"
        lines.append(f"| {run['point']} | {run['run_id'] or '-'} | {jobs} | {run['text']} |")
    counts = {}
    for run in runs:
        counts[run["kind"]] = counts.get(run["kind"], 0) + 1
    lines += ["", "States: " + ", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=lambda k: order.get(k, 99))) + "."]
    for name, (jobs, note) in sorted(sched.items()):
        src = {"slurm": "sacct", "pbs": "qstat -x", "local": "run here by tools/sweep.py --local (sweep.json)"}.get(name, name)
        lines.append(f"Scheduler ({name}): " + (f"{src}, {len(jobs)} job record(s)." if note is None else
                                                f"{note}{'' if jobs else '; states from the run files alone'}."))
    if any(run["kind"] == "stale" for run in runs) or not sched or any(n for _, n in sched.values()):
        lines.append("A run without a status is called stale when its file has not been published for "
                     + (f"{stale_after:g} s" if stale_after else f"{STALE_MULTIPLE}× its publication interval (the longest "
                                                                    f"gap between its logged rows, at least {PUBLICATION_FLOOR_S:.0f} s: docs/output.md)")
                     + "; --stale-after S to change it.")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("inputs", nargs="+", metavar="RUNS_OR_SWEEP_DIRS")
    ap.add_argument("--out", required=True, metavar="PREFIX")
    ap.add_argument("--targets", default="0.5,0.4,0.35", help="top-1 error targets, loosest first (default: the paper's 0.5,0.4,0.35)")
    ap.add_argument("--title")
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--stale-after", type=float, metavar="S",
                    help="without the scheduler's accounting, call a run without a status stale when its file is older than S "
                         f"seconds (default: {STALE_MULTIPLE} x its publication interval, at least {STALE_MULTIPLE * PUBLICATION_FLOOR_S:.0f} s)")
    ap.add_argument("--no-accounting", action="store_true", help="do not ask the scheduler (sacct, squeue, qstat) about the jobs")
    a = ap.parse_args()
    if a.stale_after is not None and not a.stale_after > 0:
        die(f"--stale-after {a.stale_after}: expected seconds > 0")
    try:
        targets = sorted({float(x) for x in a.targets.split(",") if x.strip()}, reverse=True)
    except ValueError:
        die(f"--targets {a.targets!r}: expected numbers like 0.5,0.4,0.35")
    if not targets:
        die("--targets: none given")

    runs, sweeps = collect(a.inputs)
    sched = ask_schedulers(runs, sweeps, not a.no_accounting)
    acct = {}
    for jobs, _ in sched.values():
        acct.update(jobs)
    runs = attach_jobs(runs, acct)
    now = time.time()
    read, skipped = [], []
    for run in runs:
        if run["path"] is not None:
            try:
                run["r"] = read_run(run["path"])
            except (OSError, KeyError, ValueError, TypeError, IndexError) as ex:
                run["r"], run["error"] = None, f"{type(ex).__name__}: {ex}"
                skipped.append(f"{run['path']}: {run['error']}")
                print(f"report.py: skipped {run['path']}: {run['error']}", file=sys.stderr)
        run["kind"], run["text"] = run_state(run, now, a.stale_after)
        if run.get("r") is not None:
            run["r"]["kind"], run["r"]["text"] = run["kind"], run["text"]
            if run["point"] is None:
                run["point"] = run["r"]["name"]
            read.append(run["r"])
    if not read and not any(run["sweep"] is not None for run in runs):
        die("no run file could be read" + (": " + "; ".join(skipped) if skipped else " (none found)"))
    # Simulated runs (docs/simulate.md) never share a table or a figure with real ones, nor with
    # simulated runs of other models or proxy task: one section each, its own figure.
    train = group_runs([r for r in read if not r["synthetic"] and not r.get("sim")])
    synth = group_runs([r for r in read if r["synthetic"]])
    sim_keys = []
    for r in read:
        if not r["synthetic"] and r.get("sim") and sim_key(r) not in sim_keys:
            sim_keys.append(sim_key(r))
    sims = []  # (key, groups, figure prefix)
    for i, k in enumerate(sim_keys):
        gs = group_runs([r for r in read if not r["synthetic"] and r.get("sim") and sim_key(r) == k])
        prefix = a.out if not train and len(sim_keys) == 1 else a.out + "-sim" + (f"{i + 1}" if len(sim_keys) > 1 else "")
        sims.append((k, gs, prefix))
    outs = []
    for _, _, prefix in sims:
        outs += [prefix + ".png", prefix + ".pdf"]
    if train:
        outs += [a.out + ".png", a.out + ".pdf"]
    if synth:
        sp = a.out + ("-scaling" if train else "")
        outs += [sp + ".png", sp + ".pdf"]
    outs.append(a.out + ".md")
    if not a.overwrite:
        for o in outs:
            if os.path.exists(o):
                die(f"{o} exists; use --overwrite or another --out")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)

    nofile = [run for run in runs if run["path"] is None]
    pending = [run for run in nofile if run["kind"] == "pending"]
    md = [f"# {a.title or 'dsgd-run report'}", "",
          f"{len(read)} run file(s)" + (f", {len(pending)} point(s) pending" if pending else "")
          + (f", {len(skipped)} unreadable (skipped)" if skipped else "") + "; repeats combined as "
          "median [min–max] over completed runs (while a point has none, over its runs so far); time is the run's "
          "wall clock (docs/methods.md)" + ("; a simulated run's, the virtual clock of its simulated cluster (docs/simulate.md)"
                                            if sims else "") + "; scaling efficiency = (img/s ÷ img/s at the method's smallest p) ÷ (p ÷ that p).", ""]
    not_sim = [(sw, x) for sw in sweeps for x in sw["meta"].get("not_simulated", []) if isinstance(x, dict)]
    if sims and (train or len(sims) > 1):
        md += [f"**Reported apart**: {sum(len(g['runs']) for _, gs, _ in sims for g in gs)} simulated run(s) in {len(sims)} "
               f"simulation setting(s)" + (f" and {sum(len(g['runs']) for g in train)} real run(s)" if train else "")
               + ": a virtual clock and the wall clock (or two simulated clusters) are not one time axis, so each has its own "
               "table and figure below.", ""]
    for k, gs, prefix in sims:
        md += ["## Simulated: time to target top-1 error, per p", "", f"**{sim_banner(k)}**", "",
               "Times are the virtual clock of the simulated cluster (the run files' `time_s`); the real cost of each "
               "simulation here is the real wall clock column (`wall_train_time_s`, evaluation excluded).", ""]
        md += training_report(gs, targets, sim=True) + [""]
        training_figure(gs, targets, prefix, a.title, sim=sim_banner(k, short=True))
        md += [f"![simulated validation loss and top-1 error against simulated time]({os.path.basename(prefix)}.png)", ""]
    if not_sim:
        by, whys = {}, {}
        for sw, x in not_sim:
            by.setdefault(str(x.get("method")), set()).add(x.get("p"))
            whys.setdefault(str(x.get("method")), str(x.get("why") or "").strip())
        md += ["Not simulated (docs/simulate.md): "
               + "; ".join(f"{m} at p = {', '.join(str(p) for p in sorted(ps, key=lambda v: (len(str(v)), str(v))))}"
                           + (f" ({whys[m]})" if whys[m] else "") for m, ps in sorted(by.items()))
               + " — sim mode refuses these methods with the sweep's settings (`dsgd-run --check` exits 2); "
               "`tools/paper.py --simulate` with settings it accepts runs them.", ""]
    if train or not (synth or sims):
        md += ["## Time to target top-1 error, per p", ""] + training_report(train, targets) + [""]
        if train:
            training_figure(train, targets, a.out, a.title)
            md += [f"![validation loss and top-1 error against wall-clock time]({os.path.basename(a.out)}.png)", ""]
    if synth:
        scaling_report_lines = scaling_report(synth)
        md += ["## Throughput against p (synthetic data)", ""] + scaling_report_lines + [""]
        sp = a.out + ("-scaling" if train else "")
        scaling_figure(synth, sp, None)
        md += [f"![img/s and scaling efficiency against p]({os.path.basename(sp)}.png)", ""]
    md += ["## Runs and jobs", ""] + jobs_table(runs, sched, a.stale_after) + [""]
    if pending:
        md += ["Pending (no run file yet): " + ", ".join(run["point"] for run in pending), ""]
    failed = [run for run in nofile if run["kind"] == "failed before a run file"]
    if failed:
        why = [re.sub(r"^failed before a run file [(](.*)[)]$", r"\1", run["text"]) for run in failed]
        md += ["Failed before a run file: " + "; ".join(f"{run['point']} ({w})" for run, w in zip(failed, why)), ""]
    if skipped:
        md += ["Unreadable run files (skipped): " + "; ".join(skipped), ""]
    text = "\n".join(md)
    with open(a.out + ".md", "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {', '.join(outs)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
