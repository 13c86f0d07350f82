"""check_runs.py — checks on the HDF5 run files of the GPU check's short training runs
(test/gpu/run.sh; layout: docs/output.md). Needs numpy and h5py. Exit 0 pass, 1 fail, 2 usage or
unreadable file.

  python3 test/gpu/check_runs.py final RUN.h5 [--max-top1 0.35]
      the run completed (attribute status) and its last /eval row has top1_error < max.
  python3 test/gpu/check_runs.py compare A.h5 B.h5 [--steps 10] [--rtol 1e-3]
      the /train loss of A and B (one row per step: log_every = 1) agree over the first `steps`
      rows: |a - b| / |b| <= rtol for each, B the reference (the CPU run). Prints both curves.
"""
import argparse
import sys

import h5py
import numpy as np


def attr_str(f, name):
    v = f.attrs.get(name)
    if v is None:
        return "?"
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.item()
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def final(args):
    with h5py.File(args.run, "r") as f:
        status = attr_str(f, "status")
        steps = attr_str(f, "steps_completed")
        ips = attr_str(f, "images_per_s")
        top1 = np.asarray(f["eval/top1_error"][:], dtype=np.float64)
        estep = np.asarray(f["eval/step"][:])
        loss = np.asarray(f["eval/loss"][:], dtype=np.float64)
    print(f"{args.run}: status '{status}', steps {steps}, {ips} img/s")
    for s, e, l in zip(estep, top1, loss):
        print(f"  eval step {int(s):5d}  loss {l:.4f}  top-1 error {e:.4f}")
    ok = True
    if not status.startswith("completed"):
        print(f"FAIL: status is '{status}', not 'completed'")
        ok = False
    if top1.size == 0:
        print("FAIL: no /eval rows")
        return 1
    if not np.isfinite(top1[-1]) or top1[-1] >= args.max_top1:
        print(f"FAIL: final top-1 error {top1[-1]:.4f} >= {args.max_top1}")
        ok = False
    else:
        print(f"ok: final top-1 error {top1[-1]:.4f} < {args.max_top1}")
    return 0 if ok else 1


def compare(args):
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        sa, la = np.asarray(fa["train/step"][:]), np.asarray(fa["train/loss"][:], dtype=np.float64)
        sb, lb = np.asarray(fb["train/step"][:]), np.asarray(fb["train/loss"][:], dtype=np.float64)
    n = min(args.steps, la.size, lb.size)
    if n < args.steps:
        print(f"FAIL: only {n} /train rows to compare (A {la.size}, B {lb.size}), {args.steps} wanted")
        return 1
    if not np.array_equal(sa[:n], sb[:n]):
        print(f"FAIL: /train/step differ: A {sa[:n].tolist()}, B {sb[:n].tolist()} (log_every must be the same)")
        return 1
    rel = np.abs(la[:n] - lb[:n]) / np.maximum(np.abs(lb[:n]), 1e-30)
    print(f"A = {args.a}\nB = {args.b}")
    print(f"{'step':>6} {'loss A':>12} {'loss B':>12} {'rel diff':>10}")
    for i in range(n):
        print(f"{int(sa[i]):6d} {la[i]:12.7f} {lb[i]:12.7f} {rel[i]:10.2e}")
    m = min(la.size, lb.size)
    if m > n:
        tail = np.abs(la[:m] - lb[:m]) / np.maximum(np.abs(lb[:m]), 1e-30)
        print(f"(not checked) over all {m} rows: max rel diff {np.nanmax(tail):.2e}, "
              f"last loss A {la[m - 1]:.4f} B {lb[m - 1]:.4f}")
    worst = int(np.nanargmax(rel)) if np.all(np.isfinite(rel)) else int(np.argmax(~np.isfinite(rel)))
    if not np.all(np.isfinite(rel)) or rel[worst] > args.rtol:
        print(f"FAIL: step {int(sa[worst])}: relative loss difference {rel[worst]:.3e} > {args.rtol}")
        return 1
    print(f"ok: first {n} steps agree, max relative difference {rel[worst]:.2e} <= {args.rtol}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pf = sub.add_parser("final")
    pf.add_argument("run")
    pf.add_argument("--max-top1", type=float, default=0.35)
    pc = sub.add_parser("compare")
    pc.add_argument("a")
    pc.add_argument("b")
    pc.add_argument("--steps", type=int, default=10)
    pc.add_argument("--rtol", type=float, default=1e-3)
    args = p.parse_args()
    try:
        return final(args) if args.cmd == "final" else compare(args)
    except (OSError, KeyError) as e:
        print(f"FAIL: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
