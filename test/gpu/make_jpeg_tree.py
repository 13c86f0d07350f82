#!/usr/bin/env python3
"""make_jpeg_tree.py — the GPU check's tiny ImageFolder tree for its JPEG run (test/gpu/run.sh,
step d2): the first N_TRAIN / N_VAL images of the truncated Fashion-MNIST (test/gpu/make_data.sh,
IDX .gz) as JPEGs of 40–64 px (nearest or bilinear upscale, size and filter from the index),
RGB, quality 90, in DIR/train/cK_<name>/ and DIR/val/cK_<name>/. Needs numpy and Pillow (the
check's PyTorch interpreter has both).

    make_jpeg_tree.py DATA_DIR OUT_DIR [N_TRAIN] [N_VAL]
"""
import gzip
import os
import sys

import numpy as np
from PIL import Image

NAMES = ["tshirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle_boot"]


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    if int.from_bytes(data[0:4], "big") == 0x803:
        n, r, c = (int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(3))
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, r, c)
    return np.frombuffer(data, np.uint8, offset=8)


def split(data, out, name, prefix, n):
    x, y = idx(os.path.join(data, prefix + "-images.gz")), idx(os.path.join(data, prefix + "-labels.gz"))
    if len(x) < n:
        sys.exit("make_jpeg_tree.py: %s has %d images, fewer than %d" % (prefix, len(x), n))
    for c, cname in enumerate(NAMES):
        os.makedirs(os.path.join(out, name, "c%d_%s" % (c, cname)), exist_ok=True)
    for i in range(n):
        h, w = 40 + (7 * i) % 25, 40 + (13 * i + 5) % 25
        im = Image.fromarray(x[i]).resize((w, h), Image.BILINEAR if i % 2 else Image.NEAREST).convert("RGB")
        im.save(os.path.join(out, name, "c%d_%s" % (y[i], NAMES[y[i]]), "%05d.jpg" % i), "JPEG", quality=90)


def main():
    if len(sys.argv) not in (3, 4, 5):
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    data, out = sys.argv[1], sys.argv[2]
    ntr = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    nva = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    split(data, out, "train", "train", ntr)
    split(data, out, "val", "val", nva)
    print("make_jpeg_tree.py: %d training and %d validation JPEGs in %s" % (ntr, nva, out))


if __name__ == "__main__":
    main()
