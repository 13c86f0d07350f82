#!/usr/bin/python3
"""make_jpeg_learn_reference.py — the torchvision twin of test/test_jpeg_learn.c: train the same
ResNet-18 with the same recipe on the very same JPEG bytes and store its top-1 error in
test/data/jpeg_learn_ref.h5, which `make check` compares dsgd-run's against (within 0.03).

Run from the repository root with the Debian interpreter (python3-torch, python3-torchvision,
python3-h5py; never a dependency of dsgd-run or of make check):

    make dsgd-run build/test/test_jpeg_learn
    /usr/bin/python3 tools/make_jpeg_learn_reference.py [--seeds 3] [--threads 2] [--out test/data/jpeg_learn_ref.h5]

What it does:
  1. `build/test/test_jpeg_learn --make-tree T/tree`: Fashion-MNIST as an ImageFolder tree of
     JPEGs (10 classes, sizes in [40, 70]², drawn from the index), exactly what the test makes;
  2. `./dsgd-run --pack T/tree T/pack --shard-images 2000`, as the test does;
  3. reads the packed JPEG bytes with h5py (sample i of a split = shards in index order,
     samples in shard order, as dsgd-run numbers them) and trains torchvision's ResNet-18
     (BasicBlock [2, 2, 2, 2], width w, CIFAR stem: tools/make_reference.py's ResNetW) with
     dsgd-run's recipe at p = 2:
       - every step a minibatch of m = p·b = 64 samples of a fresh per-epoch permutation,
         forwarded as p halves of b (each with its own batch-norm statistics, as each rank's)
         and the loss averaged over the halves (allreduce averages the ranks' gradients);
       - augmentation "scale" (He et al. / fb.resnet.torch): shorter side S uniform in
         {scale_min..scale_max} with the longer side rounded half up, bicubic (PIL), random
         crop, horizontal flip p = 0.5, PCA lighting σ = 0.1 on [0, 1] (ImageNet's eigenvectors),
         ImageNet mean/std; evaluation: Resize(eval_resize, bicubic) + CenterCrop(crop);
       - Nesterov SGD µ = 0.9, λ = 1e-4, α linear warm-up from α/warmup then cosine to 0;
  4. stores, per seed, the top-1 error on the validation split after the last step, their mean
     (`top1_error`, what the test compares with), min and max, the recipe and the CRC-32 of
     each split's JPEG bytes (so the test knows its pack is this one) as attributes.
The recipe constants below must equal test/test_jpeg_learn.c's (the test checks them).
"""
import argparse
import io
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms as T
import torchvision.transforms.functional as TF
from PIL import Image
from torchvision.transforms import InterpolationMode as IM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import ResNetW  # noqa: E402

RECIPE = dict(n_train=6000, n_val=2000, p=2, b=32, epochs=4, width=16, crop=32, scale_min=32, scale_max=44,
              eval_resize=36, warmup=20, alpha=0.1)
RECIPE["iterations"] = RECIPE["epochs"] * (RECIPE["n_train"] // (RECIPE["p"] * RECIPE["b"]))
EIGVAL = torch.tensor([0.2175, 0.0188, 0.0045])
EIGVEC = torch.tensor([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])
NORM = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def read_split(pack, split):
    """The split's JPEG bytes and labels in dsgd-run's sample order, and their CRC-32."""
    with h5py.File(os.path.join(pack, "index.h5"), "r") as ix:
        names = [s.decode() if isinstance(s, bytes) else s for s in ix[split]["shards"][:]]
    blobs, labels, crc = [], [], 0
    for name in names:
        with h5py.File(os.path.join(pack, name), "r") as f:
            jpeg, off, lab = f["jpeg"][:], f["offset"][:], f["label"][:]
        for i in range(len(lab)):
            b = jpeg[off[i]:off[i + 1]].tobytes()
            crc = zlib.crc32(b, crc)
            blobs.append(b)
            labels.append(int(lab[i]))
    return blobs, labels, crc


class RandomScale:
    """fb.resnet.torch RandomScale(lo, hi): shorter side S, longer torch.round(long / short * S)."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def __call__(self, img):
        w, h = img.size
        s = random.randint(self.lo, self.hi)
        size = [int(math.floor(h / w * s + 0.5)), s] if w < h else [s, int(math.floor(w / h * s + 0.5))]
        return TF.resize(img, size, IM.BICUBIC)


def lighting(x):
    alpha = torch.randn(3) * 0.1
    return x + (EIGVEC * alpha * EIGVAL).sum(1).view(3, 1, 1)


def train_one(blobs, labels, vblobs, vlabels, seed, threads):
    r = RECIPE
    torch.manual_seed(seed)
    random.seed(seed)
    torch.set_num_threads(threads)
    train_tf = T.Compose([RandomScale(r["scale_min"], r["scale_max"]), T.RandomCrop(r["crop"]), T.RandomHorizontalFlip(),
                          T.ToTensor(), T.Lambda(lighting), NORM])
    eval_tf = T.Compose([T.Resize(r["eval_resize"], IM.BICUBIC), T.CenterCrop(r["crop"]), T.ToTensor(), NORM])
    imgs = [Image.open(io.BytesIO(b)).convert("RGB") for b in blobs]
    vimgs = [Image.open(io.BytesIO(b)).convert("RGB") for b in vblobs]
    vx = torch.stack([eval_tf(im) for im in vimgs])
    vy = torch.tensor(vlabels)
    net = ResNetW(r["width"], 3, 10, "cifar")
    opt = torch.optim.SGD(net.parameters(), lr=r["alpha"], momentum=0.9, nesterov=True, weight_decay=1e-4)
    p, b, iters, warm = r["p"], r["b"], r["iterations"], r["warmup"]
    m, steps_per_epoch = p * b, r["n_train"] // (p * b)
    y_all = torch.tensor(labels)
    t0 = time.time()
    for s in range(iters):
        if s % steps_per_epoch == 0:
            perm = torch.randperm(len(imgs))
        # dsgd-run's schedule: warm-up α·(s+1)/warmup, then cosine over the remaining steps
        lr = r["alpha"] * (s + 1) / warm if s < warm else \
            r["alpha"] * 0.5 * (1 + math.cos(math.pi * (s - warm) / (iters - warm)))
        for g in opt.param_groups:
            g["lr"] = lr
        net.train()
        i = perm[(s % steps_per_epoch) * m:(s % steps_per_epoch + 1) * m]
        x = torch.stack([train_tf(imgs[j]) for j in i.tolist()])
        y = y_all[i]
        loss = sum(F.cross_entropy(net(x[k * b:(k + 1) * b]), y[k * b:(k + 1) * b]) for k in range(p)) / p
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        correct = sum((net(vx[j:j + 250]).argmax(1) == vy[j:j + 250]).sum().item() for j in range(0, len(vx), 250))
    err = 1 - correct / len(vx)
    print("seed %d: top-1 error %.4f after %d steps (%.0f s)" % (seed, err, iters, time.time() - t0), flush=True)
    return err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="test/data/jpeg_learn_ref.h5")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jpeg_learn_") as tmp:
        tree, pack = os.path.join(tmp, "tree"), os.path.join(tmp, "pack")
        subprocess.run(["build/test/test_jpeg_learn", "--make-tree", tree], check=True)
        subprocess.run(["./dsgd-run", "--pack", tree, pack, "--shard-images", "2000"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        blobs, labels, tcrc = read_split(pack, "train")
        vblobs, vlabels, vcrc = read_split(pack, "val")
    assert len(blobs) == RECIPE["n_train"] and len(vblobs) == RECIPE["n_val"]
    errs = [train_one(blobs, labels, vblobs, vlabels, seed, a.threads) for seed in range(1, a.seeds + 1)]
    import torchvision
    with h5py.File(a.out, "w") as f:
        f.create_dataset("top1_errors", data=np.array(errs))
        f.attrs.update({k: float(v) for k, v in RECIPE.items()})
        f.attrs.update(top1_error=float(np.mean(errs)), top1_error_min=float(min(errs)), top1_error_max=float(max(errs)),
                       seeds=float(a.seeds), train_crc32=float(tcrc), val_crc32=float(vcrc),
                       torch=str(torch.__version__), torchvision=str(torchvision.__version__),
                       made_by="tools/make_jpeg_learn_reference.py")
    print("%s: top-1 error %.4f (mean of %d seeds: %s)" % (a.out, np.mean(errs), a.seeds, ", ".join("%.4f" % e for e in errs)))


if __name__ == "__main__":
    main()
