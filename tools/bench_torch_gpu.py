#!/usr/bin/env python3
"""bench_torch_gpu.py — the PyTorch twin of tools/bench_gpu.c: img/s of one SGD training step of
ResNet-18 on a GPU, doing the same work per step as dsgd-run's device mode (model_train_step +
model_sgd_update with model_set_host_sync(m, 0)):

    minibatch copied from page-locked host memory to the GPU, forward, mean cross-entropy,
    backward, SGD update (Nesterov momentum 0.9, weight decay 1e-4), loss read back to the host.

Precisions (--precision, comma-separated):
    fp32   IEEE fp32: TF32 off for cuDNN convolutions and cuBLAS matmuls
    tf32   TF32 tensor cores for convolutions and matmuls, fp32 storage
    bf16   torch.autocast(bfloat16), TF32 for what stays fp32, in two layouts, two rows each
           batch: layout=nchw (model and input contiguous NCHW: dsgd-run's layout, the like-for-like
           comparison) and layout=channels_last (NHWC, what PyTorch's mixed-precision recipes use)
cudnn.benchmark = True in every case (as dsgd-run's cudnnFind at model creation).

Network: torchvision.models.resnet18(num_classes=K) for width 64, 3 input channels and the
ImageNet stem (the paper's network); otherwise tools/make_reference.py's ResNetW (torchvision's
ResNet/BasicBlock with width, channels and stem as parameters). Timing as tools/bench_torch.py:
warm-up steps excluded, then `reps` timings of `steps` steps each (fewer when --max-seconds is
reached, at least 3), median (min, max) img/s. Rows run batch by batch, the most needed first
(fp32, bf16 channels_last, bf16 NCHW, tf32); --budget S starts no row after S seconds, so that a
run under a time limit ends between rows. Every row also goes out as one machine-readable
line that test/gpu/report.py reads:

    BENCH impl=torch width=64 stem=imagenet input=3x224x224 classes=1000 batch=32 precision=fp32
          layout=nchw status=ok img_s_med=... img_s_min=... img_s_max=... ms_step=... reps=5 steps=8

    python3 tools/bench_torch_gpu.py                              # the run.sh shapes, on cuda
    python3 tools/bench_torch_gpu.py --device cpu --width 4 --input 1x16x16 --classes 10 \
        --batch 4 --precision fp32,bf16 --stem cifar               # the logic, without a GPU
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--stem", choices=("imagenet", "cifar"), default="imagenet")
    p.add_argument("--input", default="3x224x224", help="CxHxW")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--batch", default="32,64,128", help="comma-separated minibatch sizes")
    p.add_argument("--precision", default="fp32,tf32,bf16", help="comma-separated: fp32, tf32, bf16")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--max-seconds", type=float, default=30.0, help="timed seconds per row (after warm-up)")
    p.add_argument("--budget", type=float, default=0.0,
                   help="seconds from the start after which no further row is started (0: no limit)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (to test this script)")
    a = p.parse_args()
    try:
        c, h, w = (int(v) for v in a.input.lower().split("x"))
        batches = [int(v) for v in a.batch.split(",") if v]
    except ValueError:
        p.error(f"--input {a.input!r} / --batch {a.batch!r}: expected CxHxW and comma-separated integers")
    precs = [v for v in a.precision.split(",") if v]
    for v in precs:
        if v not in ("fp32", "tf32", "bf16"):
            p.error(f"--precision: unknown {v!r} (fp32, tf32, bf16)")
    if min(c, h, w, a.width, a.classes, a.reps, a.steps, *batches) < 1 or a.warmup < 0:
        p.error("sizes, reps and steps must be >= 1")
    a.c, a.h, a.w, a.batches, a.precs = c, h, w, batches, precs
    return a


def make_net(a):
    if a.width == 64 and a.c == 3 and a.stem == "imagenet":
        import torchvision
        return torchvision.models.resnet18(num_classes=a.classes), "torchvision.models.resnet18"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_reference import ResNetW  # torchvision's ResNet with width/channels/stem as parameters
    return ResNetW(a.width, a.c, a.classes, a.stem), "make_reference.ResNetW"


def set_tf32(on):
    """TF32 for cuDNN convolutions and cuBLAS matmuls on (True) or off; returns what is in force.
    PyTorch >= 2.9 has fp32_precision ('ieee' / 'tf32') and deprecates allow_tf32; the two APIs
    must not be mixed in one process, so use the new one where it exists."""
    mode = "tf32" if on else "ieee"
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(torch.backends.cuda.matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = mode
        conv.fp32_precision = mode
        return f"matmul.fp32_precision={torch.backends.cuda.matmul.fp32_precision} " \
               f"cudnn.conv.fp32_precision={conv.fp32_precision}"
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    return f"matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32} cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}"


def bench_row(a, dev, b, prec, channels_last):
    """Median, min, max img/s, reps done, and the settings in force, for one (batch, precision,
    layout)."""
    torch.manual_seed(0)
    cuda = dev.type == "cuda"
    settings = ""
    if cuda:
        settings = set_tf32(prec != "fp32")
        torch.backends.cudnn.benchmark = True
    net, _ = make_net(a)
    net.train()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net = net.to(dev, memory_format=fmt)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
    x_host = torch.rand(b, a.c, a.h, a.w)
    y_host = torch.randint(0, a.classes, (b,), dtype=torch.int64)
    if cuda:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()

    def step():
        x = x_host.to(dev, non_blocking=True, memory_format=fmt)
        y = y_host.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # the loss to the host, every step (synchronises)

    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    rates, t_start = [], time.perf_counter()
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        rates.append(b * a.steps / (time.perf_counter() - t0))
        if len(rates) >= 3 and time.perf_counter() - t_start > a.max_seconds:
            break
    if loss != loss:
        settings += " (loss is NaN)"
    del net, opt
    if cuda:
        torch.cuda.empty_cache()
    return statistics.median(rates), min(rates), max(rates), len(rates), settings


def main():
    a = parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("bench_torch_gpu: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(dev) if cuda else "cpu"
    cudnn = torch.backends.cudnn.version() if cuda else None
    _, net_name = make_net(a)
    print(f"bench_torch_gpu: PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {cudnn}) on {gpu}")
    print(f"ResNet-18 width {a.width} ({net_name}), {a.stem} stem, {a.c}x{a.h}x{a.w} input, {a.classes} classes;"
          f" per step: pinned host -> GPU copy, forward, cross-entropy, backward, SGD Nesterov 0.9 wd 1e-4,"
          f" loss.item(); {a.warmup} warm-up steps, median of up to {a.reps} timings of {a.steps} steps\n")
    print(f"INFO impl=torch torch={torch.__version__} cuda={torch.version.cuda} cudnn={cudnn} gpu={gpu.replace(' ', '_')}")
    print(f"{'precision':>9} {'layout':>13} {'batch':>6} {'img/s(med)':>11} {'img/s(min)':>11} {'img/s(max)':>11}"
          f" {'ms/step':>9}  settings")
    failed = 0
    # The rows most needed first, batch by batch (a run cut short keeps them): fp32, bf16
    # channels_last (PyTorch's usual bf16 layout), bf16 NCHW (dsgd-run's layout), tf32.
    order = (("fp32", "nchw"), ("bf16", "channels_last"), ("bf16", "nchw"), ("tf32", "nchw"))
    rows = [(b, prec, layout) for b in a.batches for prec, layout in order if prec in a.precs]
    t_begin = time.perf_counter()
    for k, (b, prec, layout) in enumerate(rows):
        if a.budget > 0 and time.perf_counter() - t_begin > a.budget:
            print(f"INFO impl=torch budget={a.budget:g}s reached: {len(rows) - k} rows not run", flush=True)
            break
        common = (f"impl=torch width={a.width} stem={a.stem} input={a.c}x{a.h}x{a.w} classes={a.classes}"
                  f" batch={b} precision={prec} layout={layout}")
        try:
            med, lo, hi, n, settings = bench_row(a, dev, b, prec, layout == "channels_last")
        except Exception as e:  # e.g. out of memory: record the row, go on with the next
            failed += 1
            print(f"{prec:>9} {layout:>13} {b:6d}  error: {type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}")
            print(f"BENCH {common} status=error", flush=True)
            if cuda:
                torch.cuda.empty_cache()
            continue
        print(f"{prec:>9} {layout:>13} {b:6d} {med:11.1f} {lo:11.1f} {hi:11.1f} {1e3 * b / med:9.2f}  {settings}")
        print(f"BENCH {common} status=ok img_s_med={med:.1f} img_s_min={lo:.1f} img_s_max={hi:.1f}"
              f" ms_step={1e3 * b / med:.3f} reps={n} steps={a.steps}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
