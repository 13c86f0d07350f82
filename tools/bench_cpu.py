#!/usr/bin/python3
"""bench_cpu.py — one table of training-step img/s on this CPU at the papers' shape (ResNet-18
width 64, ImageNet stem, 3x224x224, 1000 classes; b = 16 and 32; 2 threads by default): dsgd-run
(build/bench_model) in fp32 and bf16, PyTorch (tools/bench_torch.py) in fp32 and bf16 autocast,
and optionally other bench_model builds (e.g. one linked against another oneDNN) — all side by
side in one run: the programs alternate round by round, so drift of the machine (other load,
clocks) spreads over all of them; each cell is the median over rounds of each run's median.

    make bench-paper                       (this build and PyTorch, 2 rounds)
    /usr/bin/python3 tools/bench_cpu.py [--rounds N] [--threads 2] [--batch 16,32]
        [--other LABEL=PATH/TO/bench_model ...] [--no-torch] [--shape imagenet|fmnist]

Ratios printed: bf16 / fp32 of each program, and every fp32 column / dsgd-run's fp32. Exit 1 if
a program fails.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROW = re.compile(r"^\s*(fp32|bf16)\s+(\d+)\s+(\d+)\s+([0-9.]+)\s")


def run(label, cmd):
    print(f"== {label}: {' '.join(cmd)}", flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.exit(f"bench_cpu: {label} exited {p.returncode}")
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[(m.group(1), int(m.group(2)), int(m.group(3)))] = float(m.group(4))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--batch", default="16,32")
    ap.add_argument("--shape", default="imagenet", choices=("imagenet", "fmnist"))
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bench_model"))
    ap.add_argument("--other", action="append", default=[], help="LABEL=PATH of another bench_model build")
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    common = ["--shape", a.shape, "--batch", a.batch, "--threads", a.threads]
    progs = [("dsgd-run", [a.bench] + common + ["--precision", "fp32,bf16"])]
    for o in a.other:
        label, _, path = o.partition("=")
        if not path:
            ap.error("--other LABEL=PATH")
        progs.append((label, [path] + common + ["--precision", "fp32"]))
    if not a.no_torch:
        progs.append(("PyTorch", ["/usr/bin/python3", os.path.join(HERE, "bench_torch.py")] + common +
                      ["--precision", "fp32,bf16"]))
    got = {label: {} for label, _ in progs}
    for r in range(a.rounds):
        for label, cmd in progs:
            for key, v in run(f"round {r + 1}/{a.rounds}, {label}", cmd).items():
                got[label].setdefault(key, []).append(v)

    keys = sorted({(t, b) for rows in got.values() for (_, t, b) in rows})
    cols = [(label, prec) for label, _ in progs for prec in ("fp32", "bf16")
            if any(k[0] == prec for k in got[label])]
    print(f"\nimg/s, training step, {a.shape} shape; median over {a.rounds} round(s) of each run's median\n")
    head = "| threads | b | " + " | ".join(f"{lab} {prec}" for lab, prec in cols)
    head += " | " + " | ".join(f"{lab} bf16/fp32" for lab, _ in progs if any(k[0] == "bf16" for k in got[lab]))
    head += " | " + " | ".join(f"{lab} fp32 / dsgd-run fp32" for lab, _ in progs[1:]) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    med = lambda lab, prec, t, b: statistics.median(got[lab][(prec, t, b)]) if (prec, t, b) in got[lab] else None
    for t, b in keys:
        cells = [med(lab, prec, t, b) for lab, prec in cols]
        line = f"| {t} | {b} | " + " | ".join("—" if v is None else f"{v:.1f}" for v in cells)
        ratios = []
        for lab, _ in progs:
            if any(k[0] == "bf16" for k in got[lab]):
                f, h = med(lab, "fp32", t, b), med(lab, "bf16", t, b)
                ratios.append(f"{h / f:.2f}×" if f and h else "—")
        base = med("dsgd-run", "fp32", t, b)
        for lab, _ in progs[1:]:
            f = med(lab, "fp32", t, b)
            ratios.append(f"{f / base:.2f}×" if f and base else "—")
        print(line + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
