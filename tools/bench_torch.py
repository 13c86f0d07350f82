#!/usr/bin/python3
"""bench_torch.py — the PyTorch counterpart of tools/bench_model.c: img/s of one SGD training
step (zero_grad, forward, cross-entropy, backward, SGD with momentum) of the same ResNet-18
(torchvision's ResNet/BasicBlock at width 16, CIFAR stem, 1x28x28 input, 10 classes; the class
from tools/make_reference.py), b = 32 and 64, torch.set_num_threads(1) and (2). Warm-up steps
excluded, median (min, max) of several timings of a few steps each.

    /usr/bin/python3 tools/bench_torch.py [reps] [steps] [width] [hw]
"""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import ResNetW  # noqa: E402


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    width = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    hw = int(sys.argv[4]) if len(sys.argv) > 4 else 28
    warmup = 3
    print(f"bench_torch: PyTorch {torch.__version__} ResNet-18 width {width}, CIFAR stem, 1x{hw}x{hw}, 10 classes;"
          f" SGD step, {warmup} warm-up steps, median of {reps} timings of {steps} steps")
    print(f"mkldnn enabled: {torch.backends.mkldnn.is_available()}\n")
    print(f"{'threads':>8} {'batch':>8} {'img/s(med)':>12} {'img/s(min)':>12} {'img/s(max)':>12} {'ms/step':>12}")
    for nt in (1, 2):
        torch.set_num_threads(nt)
        for b in (32, 64):
            torch.manual_seed(0)
            net = ResNetW(width, 1, 10, "cifar")
            net.train()
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
            x = torch.rand(b, 1, hw, hw)
            y = torch.randint(0, 10, (b,))

            def step():
                opt.zero_grad(set_to_none=True)
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
            print(f"{nt:8d} {b:8d} {med:12.1f} {min(rates):12.1f} {max(rates):12.1f} {1e3 * b / med:12.2f}", flush=True)


if __name__ == "__main__":
    main()
