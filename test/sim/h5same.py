#!/usr/bin/python3
"""h5same.py A.h5 B.h5 — two sim-mode run files are the same run: every dataset equal bit for bit
(NaN equal to NaN) except the real-time wall_s columns, and the final attributes equal.
Exit 0 and 'N datasets equal', or an AssertionError naming the first difference (for the sim
tests: test_sim_gossip_async.sh)."""
import sys

import h5py
import numpy as np

a, b = h5py.File(sys.argv[1], 'r'), h5py.File(sys.argv[2], 'r')


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
for k in ('status', 'steps_completed', 'train_time_s', 'images_per_s', 'time_axis'):
    assert a.attrs.get(k) == b.attrs.get(k), f"attribute {k}: {a.attrs.get(k)!r} vs {b.attrs.get(k)!r}"
print(f"{n} datasets equal")
