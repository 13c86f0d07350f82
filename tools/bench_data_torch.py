#!/usr/bin/python3
"""bench_data_torch.py — `make bench-data`: decode + augment images/s on one core, dsgd-run
(build/bench_data) against torchvision's two CPU paths with the same transforms on the same
JPEGs, run one after the other and printed as one table:
  - the PIL path: Image.open + transforms (v1) in a DataLoader with num_workers = 0, batch 32;
  - the fast path: torchvision.io.decode_jpeg (libjpeg-turbo) + transforms.v2 on uint8
    tensors (antialiased resize), sample by sample in a plain loop (no DataLoader, no collation:
    the most favourable way to time it).
One torch thread (torch.set_num_threads(1)). Each rate is given per second of wall time and per
second of the thread's CPU time (time.thread_time / CLOCK_THREAD_CPUTIME_ID): on a shared
machine the CPU rate is what one core feeds.

    /usr/bin/python3 tools/bench_data_torch.py [--dir build/bench-data] [--n 200] [--passes 5]
        [--venv build/torch-venv] [--rate 3000] [--rounds 2]

torchvision runs in the virtual environment --venv (`make bench-data` makes it: a current torch
and torchvision from PyPI — Debian's torchvision 0.14 predates the v2 tensor path); it is never
a dependency of dsgd-run and never used by CI. --rate: a GPU rank's training rate (images/s) for
the closing line, which states how many cores of decode that rate needs.

The JPEGs: ImageNet-like photos made from scikit-image's sample photos (python3-skimage:
astronaut, chelsea, coffee, rocket, stereo_motorcycle left/right), random crops of aspect 3:4 to 16:9,
rescaled so that the largest side is 480 (as the paper stores ImageNet), quality 90, 4:2:0.
A missing python3-skimage is installed with apt-get when run as root; never a runtime
dependency of dsgd-run.

Cases (crop 224, ImageNet mean/std; "scale" = He et al.: shorter side U{256..480} with the
longer side rounded as fb.resnet.torch, random crop, flip, PCA lighting σ = 0.1):
  decode          Image.open(...).convert("RGB")  vs  image_decode_rgb: the whole image on both sides
  decode_rect_CASE  the decode one sample of CASE costs in each pipeline: dsgd-run decodes only the
                  rows and columns the sample's output reads (aug_sample's decode alone, with the
                  same draws: build/bench_data's decode_rect_CASE); torchvision has no region
                  decode, so for every sample it decodes the whole image — its columns in these
                  rows are its whole-image decode (the decode row's rates). The label gives the
                  share of the image's pixels dsgd-run's decode reads and inverse-transforms.
  scale_bicubic   the paper's augmentation, bicubic (fb.resnet.torch)
  scale_bilinear  the same, bilinear
  rrc_bilinear    RandomResizedCrop(224) + RandomHorizontalFlip (torchvision's reference)
  eval_bilinear   Resize(256) + CenterCrop(224)
(v2: "scale" is RandomShortestSize(256..480) + RandomCrop(224) + flip + lighting + Normalize;
RandomShortestSize rounds the longer side with int(), fb.resnet.torch with floor(x + 0.5):
at most one pixel apart.)
"""
import argparse
import io
import math
import os
import random
import subprocess
import sys
import time


def need(module, package):
    try:
        __import__(module)
    except ImportError:
        if os.geteuid() != 0:
            sys.exit("bench-data needs %s: apt-get install %s" % (package, package))
        subprocess.run(["apt-get", "install", "-y", package], check=True, stdout=subprocess.DEVNULL)


def make_images(outdir, n):
    from PIL import Image
    from skimage import data

    if os.path.isdir(outdir):
        have = os.listdir(outdir)
        if len([f for f in have if f.endswith(".jpg")]) >= n:
            return
        # never write into a folder of the user's: only an empty one or one of our img%04d.jpg
        other = [f for f in have if not (f.startswith("img") and f.endswith(".jpg"))]
        if other:
            sys.exit("bench-data: --dir %s holds fewer than %d .jpg files and files this bench did not make "
                     "(%s); it writes its photos only into a new or empty folder" % (outdir, n, other[0]))
    elif os.path.dirname(os.path.abspath(outdir)) and not os.path.isdir(os.path.dirname(os.path.abspath(outdir))):
        sys.exit("bench-data: --dir %s: its parent folder does not exist" % outdir)
    os.makedirs(outdir, exist_ok=True)
    photos = [Image.fromarray(getattr(data, k)()).convert("RGB") for k in ("astronaut", "chelsea", "coffee", "rocket")]
    photos += [Image.fromarray(a) for a in data.stereo_motorcycle()[:2]]
    rng = random.Random(2016)
    for i in range(n):
        p = photos[i % len(photos)]
        W, H = p.size
        aspect = rng.choice([4 / 3, 4 / 3, 4 / 3, 3 / 2, 16 / 9, 3 / 4, 1.0])
        cw = int(min(W, H * aspect) * rng.uniform(0.6, 1.0))
        ch = int(cw / aspect)
        x0, y0 = rng.randint(0, W - cw), rng.randint(0, H - ch)
        im = p.crop((x0, y0, x0 + cw, y0 + ch))
        s = 480 / max(cw, ch)
        im = im.resize((max(1, round(cw * s)), max(1, round(ch * s))), Image.LANCZOS)
        if rng.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        im.save(os.path.join(outdir, "img%04d.jpg" % i), "JPEG", quality=90)


EIGVAL = [0.2175, 0.0188, 0.0045]
EIGVEC = [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]


def torch_cases():
    import torch
    import torchvision.transforms as T
    import torchvision.transforms.functional as TF
    from torchvision.transforms import InterpolationMode as IM

    class RandomScale:
        """fb.resnet.torch RandomScale(256, 480)."""

        def __init__(self, interp):
            self.interp = interp

        def __call__(self, img):
            w, h = img.size
            s = random.randint(256, 480)
            size = [int(math.floor(h / w * s + 0.5)), s] if w < h else [s, int(math.floor(w / h * s + 0.5))]
            return TF.resize(img, size, self.interp)

    eigval, eigvec = torch.tensor(EIGVAL), torch.tensor(EIGVEC)

    def lighting(x):
        alpha = torch.randn(3) * 0.1
        return x + (eigvec * alpha * eigval).sum(1).view(3, 1, 1)

    norm = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

    def scale(interp):
        return T.Compose([RandomScale(interp), T.RandomCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Lambda(lighting), norm])

    return {
        "decode": None,
        "scale_bicubic": scale(IM.BICUBIC),
        "scale_bilinear": scale(IM.BILINEAR),
        "rrc_bilinear": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm]),
        "eval_bilinear": T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm]),
    }


def timed(run, n, passes):
    """Best of passes (after one warm-up) of run(): (images/s wall, images/s thread CPU)."""
    best = best_cpu = 0.0
    for p in range(passes + 1):
        t0, c0 = time.perf_counter(), time.thread_time()
        run()
        t1, c1 = time.perf_counter(), time.thread_time()
        if p > 0:
            best, best_cpu = max(best, n / (t1 - t0)), max(best_cpu, n / max(c1 - c0, 1e-9))
    return best, best_cpu


def bench_torch(blobs, passes):
    import torch
    from PIL import Image

    torch.set_num_threads(1)
    res = {}
    for name, tf in torch_cases().items():

        class DS(torch.utils.data.Dataset):
            def __len__(self):
                return len(blobs)

            def __getitem__(self, i):
                img = Image.open(io.BytesIO(blobs[i])).convert("RGB")
                return torch.zeros(1) if tf is None else tf(img)

        loader = torch.utils.data.DataLoader(DS(), batch_size=32, num_workers=0)

        def run():
            for _ in loader:
                pass

        res[name] = timed(run, len(blobs), passes)
    return res


def v2_cases():
    import torch
    from torchvision.transforms import v2
    from torchvision.transforms import InterpolationMode as IM

    eigval, eigvec = torch.tensor(EIGVAL), torch.tensor(EIGVEC)

    def lighting(x):
        alpha = torch.randn(3) * 0.1
        return x + (eigvec * alpha * eigval).sum(1).view(3, 1, 1)

    f32 = v2.ToDtype(torch.float32, scale=True)
    norm = v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

    def scale(interp):
        return v2.Compose([v2.RandomShortestSize(list(range(256, 481)), interpolation=interp, antialias=True),
                           v2.RandomCrop(224), v2.RandomHorizontalFlip(), f32, v2.Lambda(lighting), norm])

    return {
        "decode": None,
        "scale_bicubic": scale(IM.BICUBIC),
        "scale_bilinear": scale(IM.BILINEAR),
        "rrc_bilinear": v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), f32, norm]),
        "eval_bilinear": v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224), f32, norm]),
    }


def bench_v2(blobs, passes):
    import torch
    from torchvision.io import decode_jpeg, ImageReadMode

    torch.set_num_threads(1)
    datas = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    res = {}
    for name, tf in v2_cases().items():

        def run():
            for d in datas:
                img = decode_jpeg(d, mode=ImageReadMode.RGB)
                if tf is not None:
                    tf(img)

        res[name] = timed(run, len(blobs), passes)
    return res


def torch_json(a):
    """In the venv: both torchvision paths on the JPEGs of a.dir, as one JSON line."""
    import json
    import torch
    import torchvision
    import PIL

    blobs = load_blobs(a.dir)
    print(json.dumps({"versions": "torch %s, torchvision %s, PIL %s, libjpeg-turbo (torchvision's own)" %
                                  (torch.__version__, torchvision.__version__, PIL.__version__),
                      "pil": bench_torch(blobs, a.passes), "v2": bench_v2(blobs, a.passes)}))


def load_blobs(d):
    files = sorted(f for f in os.listdir(d) if f.endswith(".jpg"))
    return [open(os.path.join(d, f), "rb").read() for f in files]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="build/bench-data")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--bin", default="build/bench_data")
    ap.add_argument("--venv", default="build/torch-venv")
    ap.add_argument("--rate", type=float, default=3000.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--torch-json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_json:
        return torch_json(a)
    import json
    import platform

    need("skimage", "python3-skimage")
    make_images(a.dir, a.n)
    blobs = load_blobs(a.dir)
    from PIL import Image

    sizes = [Image.open(io.BytesIO(b)).size for b in blobs]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    print("%d JPEGs in %s: mean %.0f x %.0f px, mean %.1f KB; one core each, best of %d passes" %
          (len(blobs), a.dir, sum(s[0] for s in sizes) / len(sizes), sum(s[1] for s in sizes) / len(sizes),
           sum(map(len, blobs)) / len(blobs) / 1024, a.passes))
    print("machine: %s, %d cores; load average before: %s" % (cpu, os.cpu_count(), open("/proc/loadavg").read().split()[:3]))
    py = os.path.join(a.venv, "bin", "python")
    if not os.path.exists(py):
        sys.exit("no %s: make bench-data makes it (python3 -m venv %s; %s/bin/pip install torch torchvision)" %
                 (py, a.venv, a.venv))
    # rounds alternate dsgd-run and torchvision, and each rate is the best over the rounds, so
    # that a burst of load on a shared machine does not fall on one side only
    ours, shares, t = {}, {}, {"pil": {}, "v2": {}}
    for _ in range(a.rounds):
        out = subprocess.run([a.bin, a.dir, str(a.passes)], check=True, capture_output=True, text=True).stdout
        for l in out.splitlines():
            f = l.split()
            if not f:
                continue
            if f[0].endswith("_share"):  # rect, decoded, entropy-decoded shares (the same each round)
                shares[f[0][:-len("_share")]] = tuple(map(float, f[1:4]))
                continue
            k, w, c = f
            o = ours.get(k, (0.0, 0.0))
            ours[k] = (max(o[0], float(w)), max(o[1], float(c)))
        r = subprocess.run([py, sys.argv[0], "--torch-json", "--dir", a.dir, "--passes", str(a.passes)], check=True,
                           capture_output=True, text=True).stdout
        got = json.loads(r.strip().splitlines()[-1])
        t["versions"] = got["versions"]
        for side in ("pil", "v2"):
            for k, (w, c) in got[side].items():
                o = t[side].get(k, (0.0, 0.0))
                t[side][k] = (max(o[0], w), max(o[1], c))
    print("load average after: %s; torchvision: %s" % (open("/proc/loadavg").read().split()[:3], t["versions"]))
    print("images/s per second of wall time, and [per second of the thread's CPU time]; best of %d rounds" % a.rounds)
    print("decode: the whole image on every side. \"decode per sample\" rows: what one sample of the case"
          " decodes — dsgd-run only the rows and columns its output reads (aug_sample's decode alone, same"
          " draws; the label gives the share of the image's pixels it reads and inverse-transforms); torchvision"
          " has no region decode (decode_jpeg and PIL decode the whole image for every sample), so its"
          " columns there are its whole-image decode")
    print()
    print("| case | dsgd-run | torchvision PIL path | torchvision decode_jpeg + v2 | ratio to v2 (wall) [CPU] |")
    print("|---|---|---|---|---|")
    # the whole-image decode, then each case's decode per sample, then the augmentation cases
    rect = [k for k in ours if k.startswith("decode_rect_")]
    for k in ["decode"] + rect + [k for k in ours if k != "decode" and k not in rect]:
        if k not in ours:
            continue
        o = ours[k]
        tk = "decode" if k in rect else k
        p, v = t["pil"][tk], t["v2"][tk]
        label = k
        if k == "decode":
            label = "decode only (whole image, both sides)"
        elif k in rect:
            sh = shares.get(k, (float("nan"),) * 3)
            label = ("decode per sample: `%s`'s rows/columns (reads %.0f %%, inverse-transforms %.0f %% of the "
                     "pixels; torchvision: whole image)" % (k[len("decode_rect_"):], 100 * sh[0], 100 * sh[1]))
        print("| %s | %.0f [%.0f] | %.0f [%.0f] | %.0f [%.0f] | %.2f [%.2f] |" %
              (label, o[0], o[1], p[0], p[1], v[0], v[1], o[0] / v[0], o[1] / v[1]))
    print()
    for k in rect:
        if k in shares:
            sh = shares[k]
            print("%s: dsgd-run's decode of a sample reads %.1f %% of the image's pixels, inverse-transforms "
                  "%.1f %% (jpeg_crop_scanline's iMCU-aligned columns, from one iMCU row above), entropy-decodes "
                  "%.1f %% (every column of the rows down to the last read)" %
                  (k[len("decode_rect_"):], 100 * sh[0], 100 * sh[1], 100 * sh[2]))
    print()
    for k in ("rrc_bilinear", "eval_bilinear", "scale_bicubic"):
        c = ours[k][1]
        print("one core feeds %.0f images/s of %s (CPU-time rate): a GPU rank training at %.0f images/s needs %.1f "
              "decode cores" % (c, k, a.rate, a.rate / c))


if __name__ == "__main__":
    main()
