#!/usr/bin/python3
"""idx_to_tree.py — an IDX image set (MNIST, Fashion-MNIST) as the ImageFolder tree that
`dsgd-run --pack` reads (SRC/train/<class>/<i>.png, SRC/val/<class>/<i>.png), so that the
ImageNet path (data.format = "jpeg") can be tried end to end on small data (docs/reproduce.md,
"A small Figure 1"). PNGs are written with the standard library only (zlib); --pack re-encodes
them as JPEGs.

    /usr/bin/python3 tools/idx_to_tree.py OUT [--train N] [--val N] [--idx-dir DIR]

Classes are folders 00-<name> ... 09-<name>, so that their sorted order is the label order. The
first N images of each split are taken (Fashion-MNIST's are in no class order). OUT must not
exist.
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

FASHION = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def png_gray(w, h, pixels):
    """A grayscale 8-bit PNG of h rows of w bytes."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    raw = b"".join(b"\0" + pixels[r * w:(r + 1) * w] for r in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--idx-dir", default="/usr/share/datasets/fashion-mnist", help="IDX files (default: Debian's Fashion-MNIST)")
    ap.add_argument("--train", type=int, default=60000, help="training images (default all)")
    ap.add_argument("--val", type=int, default=10000, help="validation images (default all)")
    a = ap.parse_args()
    if os.path.exists(a.out):
        print(f"idx_to_tree.py: {a.out} exists", file=sys.stderr)
        return 2
    for split, prefix, n in (("train", "train", a.train), ("val", "t10k", a.val)):
        (count, h, w), img = read_idx(os.path.join(a.idx_dir, f"{prefix}-images-idx3-ubyte.gz"))
        (lcount,), lab = read_idx(os.path.join(a.idx_dir, f"{prefix}-labels-idx1-ubyte.gz"))
        n = min(n, count, lcount)
        names = FASHION if "fashion" in a.idx_dir else [str(k) for k in range(10)]
        for k in range(max(lab[:n]) + 1):
            os.makedirs(os.path.join(a.out, split, f"{k:02d}-{names[k] if k < len(names) else k}"))
        for i in range(n):
            k = lab[i]
            d = os.path.join(a.out, split, f"{k:02d}-{names[k] if k < len(names) else k}")
            with open(os.path.join(d, f"{i:05d}.png"), "wb") as f:
                f.write(png_gray(w, h, img[i * h * w:(i + 1) * h * w]))
        print(f"idx_to_tree.py: {split}: {n} images of {h}x{w} in {a.out}/{split}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
