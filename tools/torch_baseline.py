#!/usr/bin/python3
"""torch_baseline.py — the PyTorch yardstick for `make run`: the same experiment as
configs/quickstart.cfg (ResNet-18 width 16, CIFAR stem, Fashion-MNIST, one epoch, Nesterov SGD
µ=0.9, λ=1e-4, cosine α with warm-up) in one process, to compare img/s and top-1 error with
dsgd-run on the same machine at the same time. Never a runtime dependency of dsgd-run.

    /usr/bin/python3 tools/torch_baseline.py [--batch 64] [--threads 2] [--alpha 0.1]
"""
import argparse, gzip, math, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import ResNet, BasicBlock

D = "/usr/share/datasets/fashion-mnist/"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic == 0x803:
        n, r, c = (int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(3))
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, r, c)
    n = int.from_bytes(data[4:8], "big")
    return np.frombuffer(data, np.uint8, offset=8)


def resnet18(width, in_c, classes):
    """torchvision's ResNet-18 with stage widths w, 2w, 4w, 8w and the CIFAR stem."""
    net = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=classes, width_per_group=64)
    # Rebuild with width w (torchvision fixes 64): same structure, scaled channels.
    net.inplanes = width
    net.conv1 = nn.Conv2d(in_c, width, 3, 1, 1, bias=False)
    net.bn1 = nn.BatchNorm2d(width)
    net.maxpool = nn.Identity()
    net.layer1 = net._make_layer(BasicBlock, width, 2)
    net.layer2 = net._make_layer(BasicBlock, 2 * width, 2, stride=2)
    net.layer3 = net._make_layer(BasicBlock, 4 * width, 2, stride=2)
    net.layer4 = net._make_layer(BasicBlock, 8 * width, 2, stride=2)
    net.fc = nn.Linear(8 * width, classes)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return net


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = idx(D + "train-images-idx3-ubyte.gz"), idx(D + "train-labels-idx1-ubyte.gz")
    xte, yte = idx(D + "t10k-images-idx3-ubyte.gz"), idx(D + "t10k-labels-idx1-ubyte.gz")
    xtr = torch.tensor(xtr, dtype=torch.float32) / 255
    mean, std = xtr.mean().item(), xtr.std(unbiased=False).item()
    xtr = (xtr - mean) / std
    xte = (torch.tensor(xte, dtype=torch.float32) / 255 - mean) / std
    ytr, yte = torch.tensor(ytr, dtype=torch.long), torch.tensor(yte, dtype=torch.long)
    net = resnet18(a.width, 1, 10)
    opt = torch.optim.SGD(net.parameters(), lr=a.alpha, momentum=0.9, nesterov=True, weight_decay=1e-4)
    steps = len(xtr) // a.batch
    perm = torch.randperm(len(xtr))
    net.train()
    t0 = time.time()
    for s in range(steps):
        lr = a.alpha * (s + 1) / a.warmup if s < a.warmup else \
            a.alpha * 0.5 * (1 + math.cos(math.pi * (s - a.warmup) / (steps - a.warmup)))
        for g in opt.param_groups:
            g["lr"] = lr
        i = perm[s * a.batch:(s + 1) * a.batch]
        loss = F.cross_entropy(net(xtr[i]), ytr[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (s + 1) % 100 == 0:
            print(f"step {s + 1}/{steps} loss {loss.item():.4f} {((s + 1) * a.batch) / (time.time() - t0):.0f} img/s", flush=True)
    train_s = time.time() - t0
    net.eval()
    correct = 0
    with torch.no_grad():
        for j in range(0, len(xte), 500):
            correct += (net(xte[j:j + 500]).argmax(1) == yte[j:j + 500]).sum().item()
    print(f"pytorch {torch.__version__}: width {a.width} batch {a.batch} threads {a.threads}: "
          f"{steps} steps in {train_s:.1f} s = {steps * a.batch / train_s:.0f} img/s, "
          f"top-1 error {1 - correct / len(xte):.4f}")


if __name__ == "__main__":
    main()
