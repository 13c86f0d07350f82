#!/usr/bin/python3
"""bench_e2e_data.py — `make bench-e2e-data`: ResNet-18 at 224² on the CPU through
data.format = "jpeg" next to data.format = "synthetic" (issue 11, Performance: "data wait
<= 2 % of step time with the default threads"), printed as one table.

    /usr/bin/python3 tools/bench_e2e_data.py [--p 2] [--b 8] [--steps 16] [--repeat 2] [--dir build/bench-e2e]

The JPEGs: the ImageNet-like photos of `make bench-data` (tools/bench_data_torch.py: crops of
scikit-image's sample photos, largest side 480, q90) as an ImageFolder tree of 4 classes
(train: all of them, val: the first 16), packed with `./dsgd-run --pack` (the paper's 480 px).
Both runs: allreduce, p ranks under mpiexec, b per rank, ResNet-18 width 64 with the ImageNet
stem, 1000 → 4 classes, data.augment "scale" (S in [256, 480], crop 224, flip, lighting), the
default threads (`threads` and `data.threads` unset: dsgd-run's budget), log_every 4, the
evaluation at the end only. From each run file:
  img/s       images_per_s (training, evaluation excluded)
  step s      mean of /ranks/step_time_s over the rows after the first (warm-up) and the ranks
  data s      mean of /ranks/data_s over the same rows: the wait for the decode threads
  data %      data s / step s
Runs alternate jpeg, synthetic, jpeg, ... so that both see the same machine load. Needs
./dsgd-run (make), mpiexec, h5py; python3-skimage for the photos (apt-get when root).
"""
import argparse
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_data_torch import make_images, need  # noqa: E402

CFG = """name = "bench_e2e_{fmt}";
seed = 1;
p = {p};
b = {b};
iterations = {steps};
model = {{ arch = "resnet18"; width = 64; stem = "imagenet"; }};
data = {data};
eval = {{ every = {steps}; batch = 8; at_start = false; }};
log_every = 4;
output = "{out}";
overwrite = true;
"""


def make_pack(d, n):
    src, pack = os.path.join(d, "tree"), os.path.join(d, "pack")
    if os.path.exists(os.path.join(pack, "index.h5")):
        return pack
    photos = os.path.join(d, "photos")
    make_images(photos, n)
    files = sorted(f for f in os.listdir(photos) if f.endswith(".jpg"))[:n]
    shutil.rmtree(src, ignore_errors=True)
    for split, sel in (("train", files), ("val", files[:16])):
        for i, f in enumerate(sel):
            c = os.path.join(src, split, "c%d" % (i % 4))
            os.makedirs(c, exist_ok=True)
            shutil.copy(os.path.join(photos, f), os.path.join(c, f))
    subprocess.run(["./dsgd-run", "--pack", src, pack, "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    return pack


def run(fmt, pack, a, tag):
    out = os.path.join(a.dir, "%s_%d.h5" % (fmt, tag))
    data = ('{ format = "jpeg"; dir = "%s"; }' % pack if fmt == "jpeg" else
            '{ format = "synthetic"; shape = [3, 224, 224]; classes = 4; }')
    cfg = os.path.join(a.dir, "%s.cfg" % fmt)
    with open(cfg, "w") as f:
        f.write(CFG.format(fmt=fmt, p=a.p, b=a.b, steps=a.steps, data=data, out=out))
    r = subprocess.run(["timeout", "-k", "5", "900", "mpiexec", "-n", str(a.p), "./dsgd-run", cfg], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("bench_e2e_data.py: %s run failed (exit %d):\n%s" % (fmt, r.returncode, (r.stdout + r.stderr)[-3000:]))
    budget = next((l for l in r.stdout.splitlines() if l.startswith("threads per rank")), "")
    with h5py.File(out, "r") as f:
        st, ds = f["ranks/step_time_s"][1:], f["ranks/data_s"][1:]
        return dict(ips=float(f.attrs["images_per_s"]), step=float(np.mean(st)), data=float(np.mean(ds)), budget=budget)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--p", type=int, default=2)
    ap.add_argument("--b", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--dir", default="build/bench-e2e")
    a = ap.parse_args()
    need("skimage", "python3-skimage")
    os.makedirs(a.dir, exist_ok=True)
    pack = make_pack(a.dir, a.n)
    res = {"jpeg": [], "synthetic": []}
    for k in range(a.repeat):
        for fmt in ("jpeg", "synthetic"):
            res[fmt].append(run(fmt, pack, a, k))
    load = open("/proc/loadavg").read().split()[:3]
    print("ResNet-18 (width 64, ImageNet stem) at 224², p = %d, b = %d, %d steps per run (first /ranks row "
          "dropped), %d runs each, alternating; load average %s; %d cores" % (a.p, a.b, a.steps, a.repeat, " ".join(load),
                                                                         os.cpu_count()))
    print(res["jpeg"][0]["budget"])
    print("| data.format | img/s | step (s) | data wait (s per step) | data wait, % of step |")
    print("|---|---|---|---|---|")
    for fmt in ("jpeg", "synthetic"):
        rr = res[fmt]
        print("| %s | %s | %s | %s | %s |" % (fmt, ", ".join("%.1f" % r["ips"] for r in rr), ", ".join("%.3f" % r["step"] for r in rr),
                                              ", ".join("%.4f" % r["data"] for r in rr),
                                              ", ".join("%.2f" % (100 * r["data"] / r["step"]) for r in rr)))


if __name__ == "__main__":
    main()
