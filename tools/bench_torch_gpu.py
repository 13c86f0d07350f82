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
warm-up steps excluded (the first runs cudnn.benchmark's search and makes the optimizer's state),
then `reps` timings of `steps` steps each, stopping once --max-seconds of timings are done (after
at least one: a row costs at most the network's set-up + (warmup + steps) steps + --max-seconds),
median (min, max) img/s.

Rows, the most needed first: --rows PRECISION:BATCH[:cl], comma-separated (cl: channels_last; bf16
without it: NCHW); without --rows, batch by batch: fp32, bf16 channels_last, bf16 NCHW, tf32.
--budget S: a row starts only if the seconds since this program started (the import of torch
included) plus the row's predicted cost (the longest row done at the same batch, precision and
layout, else at the same batch, else 0) stay within S; a row that does not fit is not run (its line
says why, status=notrun reason=budget) and the rows after it are still tried. Every row is first
announced by a PLAN line, so that a run cut from outside leaves the rows it did not reach named
(test/gpu/report.py: NOT RUN). Every row also goes out as one machine-readable line that
test/gpu/report.py reads:

    BENCH impl=torch width=64 stem=imagenet input=3x224x224 classes=1000 batch=32 precision=fp32
          layout=nchw status=ok img_s_med=... img_s_min=... img_s_max=... ms_step=... reps=3 steps=5
          first_s=... row_s=...

(first_s: the first warm-up step, cudnn.benchmark's search included; row_s: the whole row.)

    python3 tools/bench_torch_gpu.py                              # the run.sh shapes, on cuda
    python3 tools/bench_torch_gpu.py --device cpu --width 4 --input 1x16x16 --classes 10 \
        --batch 4 --precision fp32,bf16 --stem cifar               # the logic, without a GPU
"""
import time

T_START = time.perf_counter()  # --budget counts from here: the import of torch included

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
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
                   help="seconds from the program's start within which every row started must be predicted to end"
                        " (0: no limit)")
    p.add_argument("--rows", default="",
                   help="the rows in order: PRECISION:BATCH[:cl] (cl: channels_last), comma-separated")
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
    a.row_list = []  # (batch, precision, layout) in order
    for item in (v for v in a.rows.split(",") if v):
        f = item.split(":")
        if len(f) not in (2, 3) or f[0] not in ("fp32", "tf32", "bf16") or not f[1].isdigit() or int(f[1]) < 1 \
                or (len(f) == 3 and f[2] != "cl"):
            p.error(f"--rows: {item!r}: expected PRECISION:BATCH[:cl], e.g. bf16:256:cl")
        a.row_list.append((int(f[1]), f[0], "channels_last" if len(f) == 3 else "nchw"))
    return a


def torchvision_net(a):
    """True where the network is torchvision's resnet18 itself (the paper's shape)."""
    return a.width == 64 and a.c == 3 and a.stem == "imagenet"


def make_net(a):
    if torchvision_net(a):
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

    first_s = 0.0
    for i in range(a.warmup):
        t0 = time.perf_counter()
        step()
        if i == 0:
            first_s = time.perf_counter() - t0
    if cuda:
        torch.cuda.synchronize()
    rates, t_start = [], time.perf_counter()
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        rates.append(b * a.steps / (time.perf_counter() - t0))
        if time.perf_counter() - t_start > a.max_seconds:  # the row's cap, after at least one timing
            break
    if loss != loss:
        settings += " (loss is NaN)"
    del net, opt
    if cuda:
        torch.cuda.empty_cache()
    return statistics.median(rates), min(rates), max(rates), len(rates), settings, first_s


def main():
    a = parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("bench_torch_gpu: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(dev) if cuda else "cpu"
    cudnn = torch.backends.cudnn.version() if cuda else None
    net_name = "torchvision.models.resnet18" if torchvision_net(a) else "make_reference.ResNetW"
    print(f"bench_torch_gpu: PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {cudnn}) on {gpu}")
    print(f"ResNet-18 width {a.width} ({net_name}), {a.stem} stem, {a.c}x{a.h}x{a.w} input, {a.classes} classes;"
          f" per step: pinned host -> GPU copy, forward, cross-entropy, backward, SGD Nesterov 0.9 wd 1e-4,"
          f" loss.item(); {a.warmup} warm-up steps, median of up to {a.reps} timings of {a.steps} steps\n")
    print(f"INFO impl=torch torch={torch.__version__} cuda={torch.version.cuda} cudnn={cudnn} gpu={gpu.replace(' ', '_')}")
    failed = 0
    # The rows most needed first: --rows as given; else batch by batch fp32, bf16 channels_last
    # (PyTorch's usual bf16 layout), bf16 NCHW (dsgd-run's layout), tf32.
    order = (("fp32", "nchw"), ("bf16", "channels_last"), ("bf16", "nchw"), ("tf32", "nchw"))
    rows = a.row_list or [(b, prec, layout) for b in a.batches for prec, layout in order if prec in a.precs]
    common = [f"impl=torch width={a.width} stem={a.stem} input={a.c}x{a.h}x{a.w} classes={a.classes}"
              f" batch={b} precision={prec} layout={layout}" for b, prec, layout in rows]
    for c in common:
        print(f"PLAN {c}")
    if a.budget > 0:
        print(f"INFO impl=torch budget={a.budget:g} rows={len(rows)}")
    print(f"{'precision':>9} {'layout':>13} {'batch':>6} {'img/s(med)':>11} {'img/s(min)':>11} {'img/s(max)':>11}"
          f" {'ms/step':>9}  settings", flush=True)
    done = {}  # (batch, precision, layout) -> the row's seconds
    for (b, prec, layout), com in zip(rows, common):
        if a.budget > 0:
            same = [t for (b2, p2, l2), t in done.items() if (b2, p2, l2) == (b, prec, layout)]
            same_b = [t for (b2, _, _), t in done.items() if b2 == b]
            pred = max(same or same_b or [0.0])
            spent = time.perf_counter() - T_START
            if spent + pred > a.budget:
                why = ("as this row done before" if same else "as the longest row done at this batch" if same_b
                       else "no row done at this batch")
                print(f"{prec:>9} {layout:>13} {b:6d}  not run: --budget {a.budget:g} s: {spent:.1f} s spent,"
                      f" the row needs ~{pred:.1f} s ({why})")
                print(f"BENCH {com} status=notrun reason=budget", flush=True)
                continue
        t_row = time.perf_counter()
        try:
            med, lo, hi, n, settings, first_s = bench_row(a, dev, b, prec, layout == "channels_last")
        except Exception as e:  # e.g. out of memory: record the row, go on with the next
            failed += 1
            print(f"{prec:>9} {layout:>13} {b:6d}  error: {type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}")
            print(f"BENCH {com} status=error", flush=True)
            if cuda:
                torch.cuda.empty_cache()
            continue
        row_s = time.perf_counter() - t_row
        done[(b, prec, layout)] = max(row_s, done.get((b, prec, layout), 0.0))
        print(f"{prec:>9} {layout:>13} {b:6d} {med:11.1f} {lo:11.1f} {hi:11.1f} {1e3 * b / med:9.2f}  {settings}")
        print(f"BENCH {com} status=ok img_s_med={med:.1f} img_s_min={lo:.1f} img_s_max={hi:.1f}"
              f" ms_step={1e3 * b / med:.3f} reps={n} steps={a.steps} first_s={first_s:.2f} row_s={row_s:.2f}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
