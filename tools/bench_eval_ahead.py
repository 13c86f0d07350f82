#!/usr/bin/python3
"""bench_eval_ahead.py — evaluation decode-ahead (issue 26, docs/data.md "Threads") on and off,
side by side in one run: the seconds each evaluation takes through data.format = "jpeg" with the
next evaluation batch decoded while the network evaluates the current one (the default) and with
DSGD_EVAL_AHEAD=0 (one batch at a time), and a check that both evaluate bit for bit alike.

    /usr/bin/python3 tools/bench_eval_ahead.py [--val 800] [--batch 50] [--repeat 2]
        [--models linear,resnet18:16] [--dir build/bench-eval-ahead]

The JPEGs: the ImageNet-like photos of `make bench-data` (tools/bench_data_torch.py: crops of
scikit-image's sample photos, largest side 480, q90) as an ImageFolder tree of 4 classes (val:
--val of them, train: the first 16), packed with `./dsgd-run --pack`. Each run: p = 1, b = 4,
2 steps, an evaluation at the start and after each step (3 per run, --val images each, centre
crop 224 of the shorter side resized to 256, bicubic), data.threads = 1 and threads = 1 unless
given (--data-threads, --threads). Each evaluation's time is the "(N images, X s)" of its
progress line (0.1 s resolution); the table gives the mean and the best over all evaluations of
all repeats (the best is the least disturbed on a shared machine). Runs alternate ahead, off, off, ahead, ahead, ... so that both see the same machine load
(a load that falls or rises during the run favours neither).
Needs ./dsgd-run (make), mpiexec, h5py; python3-skimage for the photos.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_data_torch import make_images, need  # noqa: E402

CFG = """name = "bench_eval_ahead";
seed = 1;
p = 1;
b = 4;
iterations = 2;
model = {model};
data = {{ format = "jpeg"; dir = "{pack}"; threads = {dthreads}; }};
eval = {{ every = 1; batch = {batch}; at_start = true; }};
log_every = 1;
threads = {threads};
output = "{out}";
overwrite = true;
"""


def make_pack(d, n_val):
    src, pack = os.path.join(d, "tree"), os.path.join(d, "pack-%d" % n_val)
    if os.path.exists(os.path.join(pack, "index.h5")):
        return pack
    photos = os.path.join(d, "photos")
    make_images(photos, n_val)
    files = sorted(f for f in os.listdir(photos) if f.endswith(".jpg"))[:n_val]
    shutil.rmtree(src, ignore_errors=True)
    for split, sel in (("train", files[:16]), ("val", files)):
        for i, f in enumerate(sel):
            c = os.path.join(src, split, "c%d" % (i % 4))
            os.makedirs(c, exist_ok=True)
            shutil.copy(os.path.join(photos, f), os.path.join(c, f))
    subprocess.run(["./dsgd-run", "--pack", src, pack, "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    return pack


def model_text(m):
    if m == "linear":
        return '{ arch = "linear"; }'
    arch, width = m.split(":")
    return '{ arch = "%s"; width = %s; stem = "imagenet"; }' % (arch, width)


def run(m, ahead, pack, a, tag):
    out = os.path.join(a.dir, "%s_%s_%d.h5" % (m.replace(":", "w"), "ahead" if ahead else "off", tag))
    cfg = os.path.join(a.dir, "run.cfg")
    with open(cfg, "w") as f:
        f.write(CFG.format(model=model_text(m), pack=pack, batch=a.batch, out=out, dthreads=a.data_threads, threads=a.threads))
    env = dict(os.environ)
    env.pop("DSGD_EVAL_AHEAD", None)
    if not ahead:
        env["DSGD_EVAL_AHEAD"] = "0"
    r = subprocess.run(["timeout", "-k", "5", "900", "mpiexec", "-n", "1", "./dsgd-run", cfg], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("bench_eval_ahead.py: run failed (exit %d):\n%s" % (r.returncode, (r.stdout + r.stderr)[-3000:]))
    secs = [float(s) for _, s in re.findall(r"^eval step .*\((\d+) images, ([0-9.]+) s\)$", r.stdout, re.M)]
    if len(secs) != 3:
        sys.exit("bench_eval_ahead.py: %d evaluation lines, expected 3:\n%s" % (len(secs), r.stdout[-3000:]))
    budget = next((l for l in r.stdout.splitlines() if l.startswith("threads per rank")), "")
    with h5py.File(out, "r") as f:
        ev = np.stack([f["eval/loss"][:], f["eval/top1_error"][:], f["eval/top5_error"][:]])
    return secs, ev, budget


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--val", type=int, default=800)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--models", default="linear,resnet18:16")
    ap.add_argument("--data-threads", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dir", default="build/bench-eval-ahead")
    a = ap.parse_args()
    need("skimage", "python3-skimage")
    os.makedirs(a.dir, exist_ok=True)
    pack = make_pack(a.dir, a.val)
    rows, budget = [], ""
    for m in a.models.split(","):
        res = {True: [], False: []}
        ref = None
        for k in range(a.repeat):
            for ahead in ((True, False) if k % 2 == 0 else (False, True)):
                secs, ev, budget = run(m, ahead, pack, a, k)
                if ref is None:
                    ref = ev
                elif ev.tobytes() != ref.tobytes():
                    sys.exit("bench_eval_ahead.py: %s: the evaluations differ between runs (ahead %s)" % (m, ahead))
                res[ahead] += secs
        rows.append((m, res[False], res[True]))
    load = open("/proc/loadavg").read().split()[:3]
    print("evaluation of %d val images (centre crop 224), eval.batch %d, p = 1; %d runs each, ABBA order; load average %s; "
          "%d cores" % (a.val, a.batch, a.repeat, " ".join(load), os.cpu_count()))
    print(budget)
    print("| model | one batch at a time: s per evaluation, mean (best) | decode-ahead | mean ratio (best) | evaluations | same bits |")
    print("|---|---|---|---|---|---|")
    for m, off, on in rows:
        print("| %s | %.2f (%.1f) | %.2f (%.1f) | %.2f× (%.2f×) | %d + %d | yes |" % (m, np.mean(off), min(off), np.mean(on), min(on),
                                                                          np.mean(off) / np.mean(on), min(off) / min(on), len(off), len(on)))
    for m, off, on in rows:
        print("%s: one at a time %s; ahead %s" % (m, " ".join("%.1f" % x for x in off), " ".join("%.1f" % x for x in on)))


if __name__ == "__main__":
    main()
