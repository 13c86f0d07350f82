"""runfiles.py — reading dsgd-run run files (HDF5, docs/output.md) for the tools that plot and
report them (tools/plot_runs.py, tools/report.py): a run as a dict of its attributes and curves.
A run still going is read like a finished one: dsgd-run replaces the file whole at each
publication, so an open sees the last one; its status is None (the status attribute is empty),
as it is for a run that was killed: stale() tells them apart by the file's age when no scheduler
can be asked. Needs h5py and numpy (Debian: python3-h5py)."""
import os
import re

import h5py
import numpy as np


def attr(f, name, default=None):
    v = f.attrs.get(name, default)
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.generic):
        v = v.item()
    return v


def columns(group, names):
    """The named datasets of group, cut to their common length (files written in SWMR mode by
    earlier dsgd-run versions may have one more row in some datasets than in others when killed)."""
    ds = [group[n] for n in names]
    n = min(len(d) for d in ds)
    return [d[:n] for d in ds]


def read_run(path):
    with h5py.File(path, "r") as f:
        r = {"path": path, "method": attr(f, "method", "?"), "p": attr(f, "p", 0), "b": attr(f, "b", 0),
             "m": attr(f, "m", 0), "iterations": attr(f, "iterations", 0), "status": attr(f, "status", None) or None,
             "images_per_s": attr(f, "images_per_s", None), "device": attr(f, "device", ""),
             "mtime": os.stat(path).st_mtime}
        r["config"] = attr(f, "config", "") or ""
        r["synthetic"] = attr(f, "data_synthetic", None) is not None
        mt = re.search(r'^name = "(.*)";$', r["config"], re.M)
        r["name"] = mt.group(1) if mt else os.path.splitext(os.path.basename(path))[0]
        if "eval" not in f or "train" not in f:
            raise ValueError("not a dsgd-run run file (no /eval or /train)")
        r["e_step"], r["e_time"], r["e_loss"], r["e_top1"] = columns(f["eval"], ["step", "time_s", "loss", "top1_error"])
        r["t_step"], r["t_time"] = columns(f["train"], ["step", "time_s"])
        # Resumes from checkpoints (docs/checkpoint.md): "step S at <UTC> (checkpoint <dir>/step-<N>)"
        # per line, S the last logged step; the checkpoint's own step N where the note names it.
        r["resumed"] = [int(c or s) for s, c in
                        re.findall(r"^step (\d+) at [^(\n]*(?:\(checkpoint .*/step-(\d+)\))?", attr(f, "resumed_at", "") or "", re.M)]
        # sim mode (docs/simulate.md): time_s is a virtual clock; the models and the real wall clock
        r["sim"] = None
        if attr(f, "time_axis", "").startswith("simulated"):
            r["sim"] = {k: attr(f, k) for k in ("time_axis", "sim_device", "sim_device_source", "sim_network", "sim_network_source",
                                                "sim_topology", "sim_allreduce", "sim_model_bytes", "sim_step_s", "sim_allreduce_s",
                                                "sim_link_latency_s", "sim_bandwidth_Bps", "sim_jitter",
                                                "wall_train_time_s", "train_time_s")}
            r["e_wall"] = f["eval"]["wall_s"][:len(r["e_step"])] if "wall_s" in f["eval"] else None
        r["step_time"] = r["wait"] = None
        if "ranks" in f and "step_time_s" in f["ranks"] and "wait_s" in f["ranks"]:
            st, wt = columns(f["ranks"], ["step_time_s", "wait_s"])
            r["step_time"], r["wait"] = np.asarray(st), np.asarray(wt)
    return r


# How often a run file is published (docs/output.md, "When data reaches the file"): at every
# evaluation, at every checkpoint, and between evaluations at the first /train row logged 5 s or
# more after the previous publication, stretched to 100 times the cost of a publication (measured
# 25-80 s at p = 128). So a run that is alive publishes at least every max(80 s, the time between
# two of its /train rows); the time between evaluation rows bounds it too, for the methods whose
# clock excludes evaluation (plus the evaluation itself, which the file cannot show).
PUBLICATION_FLOOR_S = 80.0
STALE_MULTIPLE = 10


def publication_interval(r):
    """Seconds: the longest a live run r should go without publishing its file (see above)."""
    gap = PUBLICATION_FLOOR_S
    for t in (r["t_time"], r["e_time"]):
        t = np.asarray(t, dtype=float)
        if len(t) > 1:
            gap = max(gap, float(np.max(np.diff(t))))
    return gap


def stale(r, now, after=None):
    """For a run whose status is empty: the seconds since its file was last published (its
    mtime) when that is more than `after` seconds (default STALE_MULTIPLE x
    publication_interval(r)), i.e. the run is no longer writing (killed, or hung); else None."""
    if r["status"] is not None:
        return None
    age = now - r["mtime"]
    limit = after if after is not None else STALE_MULTIPLE * publication_interval(r)
    return age if age > limit else None


def checkpoint_step(path):
    """The step of the committed checkpoint beside run file `path` (the default checkpoint.path:
    runs/x.h5 -> runs/x.ckpt/, whose `latest` names step-<N>: docs/checkpoint.md), or None."""
    try:
        with open(os.path.splitext(path)[0] + ".ckpt/latest") as f:
            m = re.fullmatch(r"step-(\d+)", f.read().strip())
    except OSError:
        return None
    return int(m.group(1)) if m else None


def last_step(r):
    """The last logged training step (from /train, else /eval), 0 for none."""
    for s in (r["t_step"], r["e_step"]):
        if len(s):
            return int(s[-1])
    return 0


def time_to(r, target):
    """Training seconds at the first evaluation with top-1 error <= target, or None."""
    hit = np.nonzero(np.asarray(r["e_top1"]) <= target)[0]
    return float(r["e_time"][hit[0]]) if len(hit) else None


def img_per_s(r):
    if r["images_per_s"] is not None:
        return float(r["images_per_s"])
    if len(r["t_step"]) and r["t_time"][-1] > 0:  # a running run: from its last /train row
        return float(r["m"] * r["t_step"][-1] / r["t_time"][-1])
    return float("nan")


def config_value(r, key):
    """A top-level scalar of the run's resolved experiment (`key = value;`), as a string, or None."""
    mt = re.search(r"^" + re.escape(key) + r' = "?(.*?)"?;$', r["config"], re.M)
    return mt.group(1) if mt else None
