#!/usr/bin/python3
"""bench_stragglers.py — `make bench-stragglers`: how much one straggler slows each method, on the
linear model at p = 4, as one table. The wall-clock half of what test_methods' test_stragglers
checked until the test suite moved it here (docs/testing.md): on a 2-core machine shared with
other work, a ratio of step times is a measurement, not an invariant; the test keeps what holds
however the machine is loaded (every step done and counted, all-reduce at least the delay per
iteration, its curve unchanged by the delay).

    /usr/bin/python3 tools/bench_stragglers.py [--methods allreduce,ps,...] [--iterations 150]
                                              [--delay-ms MS] [--bin ./dsgd-run] [--dir build/bench-stragglers]

Each method runs twice under mpiexec (p = 4; ps, easgd and backup with one server, 5 ranks;
backup with backups = 1): undisturbed, then with worker 1 delayed on every step
(inject.slow_ranks = [1]) by --delay-ms, by default 10 × the undisturbed step time just measured
and at least 40 ms. The model and data are test_methods' (model.arch = "linear", b = 32,
α = 0.02 cosine, log_every = 10, make's Fashion-MNIST subset build/test-data). Time per step:
  allreduce, backup   per iteration: /train/time_s / /train/step at the end
  ps, easgd, gossip   the fast workers' (0, 2, 3) mean of /ranks/step_time_s
Expected: all-reduce slows to the straggler's pace (≥ 0.9 × the delay per iteration); the other
methods do not wait for it (≤ 0.25 × the delay: waiting would cost a whole delay per step).
Exit status 1 if a method misses its expectation (meaningful on an otherwise idle machine), 2 if a
run fails. Needs ./dsgd-run and build/test-data (make bench-stragglers makes both), mpiexec, h5py.
"""
import argparse
import math
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

METHODS = {  # name: (extra keys, ranks)
    "allreduce": ("", 4),
    "ps": ("", 5),
    "easgd": ("", 5),
    "backup": ("backups = 1;\n", 5),
    "gossip_pull": ("", 4),
    "gossip_push": ("", 4),
}
PER_ITERATION = ("allreduce", "backup")
DATA = "build/test-data"

CFG = """name = "strag";
seed = 3;
method = "{method}";
p = 4;
b = 32;
iterations = {iterations};
log_every = 10;
alpha = {{ base = 0.02; schedule = "cosine"; }};
eval = {{ every = 400; batch = 500; at_start = false; }};
model = {{ arch = "linear"; }};
data = {{ train_images = "{data}/train-images"; train_labels = "{data}/train-labels";
  val_images = "{data}/val-images"; val_labels = "{data}/val-labels"; }};
{extra}{inject}output = "{out}";
overwrite = true;
"""


def step_time(method, h5):
    """Seconds per step as test_stragglers measured it (module docstring)."""
    with h5py.File(h5, "r") as f:
        if method in PER_ITERATION:
            return float(f["train/time_s"][-1]) / float(f["train/step"][-1])
        st = f["ranks/step_time_s"][:]
    fast = st[:, [0, 2, 3]]
    return float(np.nanmean(fast[np.isfinite(fast)]))


def run(args, method, tag, delay_ms):
    extra, np_ = METHODS[method]
    inject = f"inject = {{ slow_ranks = [1]; delay_ms = {delay_ms:.3f}; }};\n" if delay_ms else ""
    cfg, out, log = (os.path.join(args.dir, tag + s) for s in (".cfg", ".h5", ".log"))
    with open(cfg, "w") as f:
        f.write(CFG.format(method=method, iterations=args.iterations, data=DATA, extra=extra, inject=inject, out=out))
    with open(log, "w") as f:
        rc = subprocess.call(["timeout", "-k", "5", "600", "mpiexec", "-n", str(np_), args.bin, cfg],
                             stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"bench_stragglers: {tag}: exit {rc}, see {log}")
    return step_time(method, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="the straggler's delay (default: 10 × undisturbed, ≥ 40 ms)")
    ap.add_argument("--bin", default="./dsgd-run")
    ap.add_argument("--dir", default="build/bench-stragglers", help="run files and logs (replaced)")
    args = ap.parse_args()
    methods = args.methods.split(",")
    for m in methods:
        if m not in METHODS:
            sys.exit(f"bench_stragglers: unknown method {m!r}; one of {', '.join(METHODS)}")
    if not os.path.exists(os.path.join(DATA, "val-labels")):
        sys.exit(f"bench_stragglers: no {DATA}: run `make {DATA}/val-labels` (make bench-stragglers does it)")
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    print("| method | undisturbed ms/step | straggler delay ms | one straggler ms/step | ÷ delay | expected | |")
    print("|---|---|---|---|---|---|---|")
    missed = 0
    for m in methods:
        v0 = run(args, m, m + "_0", 0.0)
        delay_ms = args.delay_ms or max(40.0, 10.0 * 1e3 * v0)
        v1 = run(args, m, m + "_1", delay_ms)
        ratio = 1e3 * v1 / delay_ms
        if m == "allreduce":
            want, ok = "≥ 0.9 (waits)", ratio >= 0.9
        else:
            want, ok = "≤ 0.25 (does not wait)", ratio <= 0.25
        missed += not ok
        unit = " per iteration" if m in PER_ITERATION else ""
        print(f"| {m}{unit} | {1e3 * v0:.3f} | {delay_ms:.1f} | {1e3 * v1:.3f} | {ratio:.3f} | {want} | "
              f"{'ok' if ok and math.isfinite(ratio) else 'MISSED'} |", flush=True)
    if missed:
        print(f"bench_stragglers: {missed} method(s) missed the expectation (a loaded machine slows the fast workers too)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
