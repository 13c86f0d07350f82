#!/usr/bin/python3
"""bench_methods.py — every method on the quickstart experiment at p = 4, with and without one
injected straggler: images per second and wall-clock time to a target top-1 error, as a
Markdown table (docs/methods.md). Runs ./dsgd-run under mpiexec; reads the run files with h5py.

    /usr/bin/python3 tools/bench_methods.py [--out DIR] [--bin ./dsgd-run] [--target 0.15] [--delay-ms 300]
                                            [--methods allreduce,ps,...] [--set KEY=VALUE ...]

Each run: configs/quickstart.cfg with p = 4, b = 16 (m = 64, as the quickstart), eval.every
= 100; methods with servers run one server (5 ranks). The straggler is worker 1, delayed by
--delay-ms per step (fixed). time_s of the first evaluation at or below --target is reported
("not reached" if none). Evaluation time: excluded for allreduce and gossip (every rank stops
for it); for the server methods the center is evaluated on server 0 concurrently with
training, so on a machine with fewer cores than ranks evaluation slows training too.
"""
import argparse
import os
import subprocess
import sys
import time

import h5py

METHODS = {
    "allreduce": ([], 4),
    "ps": ([], 5),
    "easgd": ([], 5),
    "gossip_pull": ([], 4),
    "gossip_push": ([], 4),
    "backup": (["backups=1"], 5),
}


def run(method, slow, args):
    extra, np_ = METHODS[method]
    tag = f"{method}_{'slow' if slow else 'base'}"
    out = os.path.join(args.out, tag + ".h5")
    sets = ["method=" + method, "p=4", "b=16", "eval.every=100", "output=" + out] + extra + args.set
    if slow:
        sets += ["inject.slow_ranks=[1]", f"inject.delay_ms={args.delay_ms}"]
    cmd = ["timeout", "3600", "mpiexec", "-n", str(np_), args.bin]
    for s in sets:
        cmd += ["--set", s]
    cmd.append("configs/quickstart.cfg")
    t0 = time.time()
    log = os.path.join(args.out, tag + ".log")
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    if rc != 0:
        return dict(tag=tag, rc=rc, log=log)
    with h5py.File(out, "r") as h:
        ips = float(h.attrs["images_per_s"])
        train_s = float(h.attrs["train_time_s"])
        top1 = h["eval/top1_error"][:]
        ts = h["eval/time_s"][:]
        steps = h["eval/step"][:]
    reach = [(t, s) for t, s, e in zip(ts, steps, top1) if e <= args.target]
    return dict(tag=tag, rc=0, ips=ips, train_s=train_s, final=float(top1[-1]), reach=reach[0] if reach else None, wall=wall)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/bench_methods")
    ap.add_argument("--target", type=float, default=0.15)
    ap.add_argument("--delay-ms", type=float, default=300.0)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--bin", default="./dsgd-run", help="the dsgd-run binary (default ./dsgd-run)")
    ap.add_argument("--set", action="append", default=[], help="extra KEY=VALUE for every run")
    args = ap.parse_args()
    if os.path.exists(args.out) and os.listdir(args.out):
        sys.exit(f"bench_methods: {args.out} exists and is not empty; choose another --out (runs are never overwritten)")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for m in args.methods.split(","):
        for slow in (False, True):
            r = run(m, slow, args)
            rows.append((m, slow, r))
            if r["rc"]:
                print(f"{r['tag']}: exit {r['rc']}, see {r['log']}", flush=True)
            else:
                reach = f"{r['reach'][0]:.0f} s (it. {r['reach'][1]})" if r["reach"] else "—"
                print(f"{r['tag']}: {r['ips']:.0f} img/s, top-1 {r['final']:.4f}, to {args.target}: {reach}", flush=True)
    print()
    print(f"| method | straggler | img/s | time to top-1 ≤ {args.target} | final top-1 error | training time |")
    print("|---|---|---|---|---|---|")
    for m, slow, r in rows:
        strag = f"worker 1 +{args.delay_ms:.0f} ms/step" if slow else "none"
        if r["rc"]:
            print(f"| {m} | {strag} | failed (exit {r['rc']}) | | | |")
            continue
        reach = f"{r['reach'][0]:.0f} s (iteration {r['reach'][1]})" if r["reach"] else "not reached"
        print(f"| {m} | {strag} | {r['ips']:.0f} | {reach} | {r['final']:.4f} | {r['train_s']:.0f} s |")


if __name__ == "__main__":
    main()
