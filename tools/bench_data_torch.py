#!/usr/bin/python3
"""bench_data_torch.py — `make bench-data`: decode + augment images/s on one core, dsgd-run
(build/bench_data) against torchvision (PIL backend, DataLoader with num_workers = 0, one
torch thread) with the same transforms on the same JPEGs, run one after the other and printed
as one table.

    /usr/bin/python3 tools/bench_data_torch.py [--dir build/bench-data] [--n 200] [--passes 5]

The JPEGs: ImageNet-like photos made from scikit-image's sample photos (python3-skimage:
astronaut, chelsea, coffee, rocket, stereo_motorcycle left/right), random crops of aspect 3:4 to 16:9,
rescaled so that the largest side is 480 (as the paper stores ImageNet), quality 90, 4:2:0.
Missing Python packages (python3-torchvision, python3-skimage) are installed with apt-get when
run as root; they are never runtime dependencies of dsgd-run.

Cases (crop 224, ImageNet mean/std; "scale" = He et al.: shorter side U{256..480} with the
longer side rounded as fb.resnet.torch, random crop, flip, PCA lighting σ = 0.1):
  decode          Image.open(...).convert("RGB")  vs  image_decode_rgb
  scale_bicubic   the paper's augmentation, bicubic (fb.resnet.torch)
  scale_bilinear  the same, bilinear
  rrc_bilinear    RandomResizedCrop(224) + RandomHorizontalFlip (torchvision's reference)
  eval_bilinear   Resize(256) + CenterCrop(224)
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

    os.makedirs(outdir, exist_ok=True)
    have = [f for f in os.listdir(outdir) if f.endswith(".jpg")]
    if len(have) >= n:
        return
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
        best = 0.0
        for p in range(passes + 1):
            t0 = time.perf_counter()
            for _ in loader:
                pass
            rate = len(blobs) / (time.perf_counter() - t0)
            if p > 0:
                best = max(best, rate)
        res[name] = best
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="build/bench-data")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--bin", default="build/bench_data")
    a = ap.parse_args()
    need("skimage", "python3-skimage")
    need("torchvision", "python3-torchvision")
    make_images(a.dir, a.n)
    files = sorted(f for f in os.listdir(a.dir) if f.endswith(".jpg"))
    blobs = [open(os.path.join(a.dir, f), "rb").read() for f in files]
    from PIL import Image

    sizes = [Image.open(io.BytesIO(b)).size for b in blobs]
    print("%d JPEGs in %s: mean %.0f x %.0f px, mean %.1f KB; one core each, best of %d passes" %
          (len(blobs), a.dir, sum(s[0] for s in sizes) / len(sizes), sum(s[1] for s in sizes) / len(sizes),
           sum(map(len, blobs)) / len(blobs) / 1024, a.passes))
    out = subprocess.run([a.bin, a.dir, str(a.passes)], check=True, capture_output=True, text=True).stdout
    ours = {l.split()[0]: float(l.split()[1]) for l in out.splitlines() if l.strip()}
    tv = bench_torch(blobs, a.passes)
    import torch
    import torchvision
    import PIL

    print("| case | dsgd-run img/s | torchvision %s (PIL %s, torch %s) img/s | ratio |" %
          (torchvision.__version__, PIL.__version__, torch.__version__))
    print("|---|---|---|---|")
    for k in tv:
        print("| %s | %.0f | %.0f | %.2f |" % (k, ours[k], tv[k], ours[k] / tv[k]))


if __name__ == "__main__":
    main()
