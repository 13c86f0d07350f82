"""runfiles.py — reading dsgd-run run files (HDF5, docs/output.md) for the tools that plot and
report them (tools/plot_runs.py, tools/report.py): a run as a dict of its attributes and curves.
A run still going is read like a finished one: dsgd-run replaces the file whole at each
publication, so an open sees the last one; its status is None (the status attribute is empty).
Needs h5py and numpy (Debian: python3-h5py)."""
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
             "images_per_s": attr(f, "images_per_s", None), "device": attr(f, "device", "")}
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
        r["step_time"] = r["wait"] = None
        if "ranks" in f and "step_time_s" in f["ranks"] and "wait_s" in f["ranks"]:
            st, wt = columns(f["ranks"], ["step_time_s", "wait_s"])
            r["step_time"], r["wait"] = np.asarray(st), np.asarray(wt)
    return r


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
