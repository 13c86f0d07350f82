#!/usr/bin/python3
"""h5same.py [--attr NAME]... [--time-increasing] A.h5 B.h5 — two sim-mode run files are the same
run: every dataset equal bit for bit (NaN equal to NaN) except the real-time wall_s columns, and
the final attributes equal (status, steps_completed, train_time_s, images_per_s, time_axis, and
each --attr NAME, e.g. sim_allreduce_s). --time-increasing: also /train/time_s has more than 5
rows and increases strictly (a run that logged, on a clock that moved).
Exit 0 and 'N datasets equal; train time T s simulated', or an AssertionError naming the first
difference (for the sim tests: test/sim/lib.sh's `same`, test/sim/determinism.sh)."""
import argparse

import h5py
import numpy as np

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("a")
ap.add_argument("b")
ap.add_argument("--attr", action="append", default=[], metavar="NAME", help="one more root attribute that must be equal")
ap.add_argument("--time-increasing", action="store_true", help="/train/time_s: more than 5 rows, strictly increasing")
opt = ap.parse_args()
a, b = h5py.File(opt.a, 'r'), h5py.File(opt.b, 'r')


def names(f):
    out = []
    f.visit(lambda n: out.append(n) if isinstance(f[n], h5py.Dataset) else None)
    return sorted(out)


na, nb = names(a), names(b)
assert na == nb, f"datasets differ: {set(na) ^ set(nb)}"
n = 0
for k in na:
    if k.split('/')[-1] == 'wall_s':
        continue
    x, y = a[k][()], b[k][()]
    assert x.shape == y.shape and x.dtype == y.dtype, f"{k}: {x.shape} vs {y.shape}"
    assert (np.array_equal(x, y, equal_nan=True) if x.dtype.kind == 'f' else np.array_equal(x, y)), \
        f"{k} differs first at {np.argwhere(x != y)[:1].tolist()}: {x.ravel()[:4]} vs {y.ravel()[:4]}"
    n += 1
for k in ['status', 'steps_completed', 'train_time_s', 'images_per_s', 'time_axis'] + opt.attr:
    assert k in a.attrs or k not in opt.attr, f"attribute {k}: not in {opt.a}"
    assert a.attrs.get(k) == b.attrs.get(k), f"attribute {k}: {a.attrs.get(k)!r} vs {b.attrs.get(k)!r}"
if opt.time_increasing:
    t = a['train/time_s'][()]
    assert t.shape[0] > 5 and np.all(np.diff(t) > 0), f"/train/time_s: {t.shape[0]} rows, not strictly increasing: {t[:8]}"
print(f"{n} datasets equal; train time {a.attrs.get('train_time_s', float('nan')):.6f} s simulated")
