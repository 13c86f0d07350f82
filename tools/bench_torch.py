#!/usr/bin/python3
"""bench_torch.py — the PyTorch counterpart of tools/bench_model.c: img/s of one SGD training
step (zero_grad, forward, cross-entropy, backward, SGD with momentum) of the same ResNet-18
(torchvision's ResNet/BasicBlock, the class from tools/make_reference.py) at the same shapes:
  fmnist   (default): width 16, CIFAR stem, 1x28x28, 10 classes, b = 32 and 64, 1 and 2 threads;
  imagenet: width 64, ImageNet stem, 3x224x224, 1000 classes, b = 16 and 32, 2 threads.
Precisions: fp32; bf16 = torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss
(PyTorch's CPU mixed precision: convolutions and linear layers in bf16, fp32 weights).
Warm-up steps excluded, median (min, max) of several timings of a few steps each.

    /usr/bin/python3 tools/bench_torch.py [--shape fmnist|imagenet] [--precision fp32,bf16]
        [--batch 16,32] [--threads 1,2] [--reps N] [--steps N] [--width W] [--hw HW]
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import ResNetW  # noqa: E402


def ints(s):
    return [int(v) for v in s.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("fmnist", "imagenet"), default="fmnist")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--batch", type=ints)
    ap.add_argument("--threads", type=ints)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--hw", type=int)
    a = ap.parse_args()
    inet = a.shape == "imagenet"
    reps = a.reps or (5 if inet else 7)
    steps = a.steps or (2 if inet else 5)
    width = a.width or (64 if inet else 16)
    hw = a.hw or (224 if inet else 28)
    batches = a.batch or ([16, 32] if inet else [32, 64])
    threads = a.threads or ([2] if inet else [1, 2])
    in_c, classes, warmup = (3, 1000, 2) if inet else (1, 10, 3)
    precs = a.precision.split(",")
    if any(p not in ("fp32", "bf16") for p in precs):
        ap.error("--precision: fp32, bf16 or both")
    print(f"bench_torch: PyTorch {torch.__version__} ResNet-18 width {width}, {'ImageNet' if inet else 'CIFAR'} stem,"
          f" {in_c}x{hw}x{hw}, {classes} classes; SGD step, {warmup} warm-up steps, median of {reps} timings of"
          f" {steps} steps")
    print(f"mkldnn enabled: {torch.backends.mkldnn.is_available()}\n")
    print(f"{'precision':>9} {'threads':>8} {'batch':>8} {'img/s(med)':>12} {'img/s(min)':>12} {'img/s(max)':>12}"
          f" {'ms/step':>12}")
    for prec in precs:
        for nt in threads:
            torch.set_num_threads(nt)
            for b in batches:
                torch.manual_seed(0)
                net = ResNetW(width, in_c, classes, "imagenet" if inet else "cifar")
                net.train()
                opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
                x = torch.rand(b, in_c, hw, hw)
                y = torch.randint(0, classes, (b,))

                def step():
                    opt.zero_grad(set_to_none=True)
                    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if prec == "bf16" else contextlib.nullcontext()
                    with ctx:
                        loss = F.cross_entropy(net(x), y)
                    loss.backward()
                    opt.step()

                for _ in range(warmup):
                    step()
                rates = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        step()
                    rates.append(b * steps / (time.perf_counter() - t0))
                med = statistics.median(rates)
                print(f"{prec:>9} {nt:8d} {b:8d} {med:12.1f} {min(rates):12.1f} {max(rates):12.1f}"
                      f" {1e3 * b / med:12.2f}", flush=True)


if __name__ == "__main__":
    main()
