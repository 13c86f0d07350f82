#!/usr/bin/python3
"""make_image_reference.py — write test/data/image_ref.h5, what test/test_image.c compares
src/data/image.c (JPEG decode, resize) and src/data/augment.c (draws, crops, flip, lighting,
normalisation) against: Pillow on the same JPEG bytes.

Run with the Debian interpreter (python3-pil, python3-numpy, python3-h5py, python3-skimage for
the photos; python3-torchvision, if installed, is used to cross-check the replayed transforms):

    /usr/bin/python3 tools/make_image_reference.py [outdir]      # default: test/data

The JPEGs are made here by Pillow (libjpeg-turbo 2.1.5, the library dsgd-run links) from
scikit-image's sample photos, cropped and rescaled. Layout:

  /jpeg/<name>       uint8 bytes of each test JPEG (and "png": a PNG's bytes);
                     attrs: kind (how it was made)
  /decode/<name>     Pillow's Image.open(...).convert("RGB"), (h, w, 3) uint8 (junk_eoi: none,
                     Pillow decodes it as rgb420)
  /draft/<name>_<d>  the same after Image.draft(mode, size / d): libjpeg's DCT scaling 1/d
  /resize/<i>        src (name of a /decode entry), out (h, w, 3) uint8 = Image.resize((w, h),
                     filter, box); attrs filter (0 bilinear, 1 bicubic), box (4 floats, or none)
  /aug/<i>           one augmented sample: attrs jpeg, kind (0 scale, 1 rrc, 2 none, 3 eval),
                     interp, crop, scale_min, scale_max, eval_resize, lighting, seed, epoch,
                     index; draws int32 [h, w, rh, rw, y0, x0, ch, cw, flip, tries], alpha
                     float32[3] (the draws recomputed here from the same hash as augment.c),
                     crop uint8 (crop, crop, 3) before flip and colour, and out float32 (3, crop,
                     crop) when stored (small crops only, to keep the file small).

The draws: key = seed_mix(seed_mix(seed, epoch), index) and draw k = seed_mix(key, k), with
util.c's seed_mix(a, b) = splitmix64(splitmix64(a) ^ b); see augment.c for the draw numbers.
"""
import io
import math
import os
import sys

import h5py
import numpy as np
from PIL import Image, ImageOps

M64 = (1 << 64) - 1

# ---- augment.c's draws, recomputed ----


def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def seed_mix(a, b):
    return splitmix(splitmix(a) ^ b)


def unif(key, k):
    return (seed_mix(key, k) >> 11) * 2.0**-53


def dint(key, k, lo, hi):
    return lo + ((seed_mix(key, k) * (hi - lo + 1)) >> 64)


def normal(key, k):
    u1, u2 = unif(key, k), unif(key, k + 1)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


SCALE, RRC, NONE, EVAL = 0, 1, 2, 3
EIGVAL = np.array([0.2175, 0.0188, 0.0045], np.float32)
EIGVEC = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]], np.float32)
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def resize_short(h, w, s):
    """torchvision Resize(s): shorter side s, longer int(s * long / short)."""
    return (int(s * h / w), s) if w <= h else (s, int(s * w / h))


def draws(cfg, seed, epoch, index, h, w):
    key = seed_mix(seed_mix(seed, epoch), index)
    crop = cfg["crop"]
    d = dict(h=h, w=w, rh=0, rw=0, y0=0, x0=0, ch=crop, cw=crop, flip=0, tries=0)
    kind = cfg["kind"]
    if kind == SCALE:
        s = dint(key, 0, cfg["scale_min"], cfg["scale_max"])
        if w < h:  # fb.resnet.torch RandomScale: torch.round(long / short * S)
            d["rw"], d["rh"] = s, int(math.floor(h / w * s + 0.5))
        else:
            d["rh"], d["rw"] = s, int(math.floor(w / h * s + 0.5))
        d["y0"] = dint(key, 1, 0, d["rh"] - crop)
        d["x0"] = dint(key, 2, 0, d["rw"] - crop)
        d["flip"] = int(unif(key, 3) < 0.5)
    elif kind == RRC:  # torchvision RandomResizedCrop.get_params
        d["rh"], d["rw"] = h, w
        area = float(h * w)
        lr0, lr1 = math.log(3.0 / 4.0), math.log(4.0 / 3.0)
        for t in range(10):
            k = 16 + 4 * t
            target = area * (0.08 + (1.0 - 0.08) * unif(key, k))
            aspect = math.exp(lr0 + (lr1 - lr0) * unif(key, k + 1))
            cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                d.update(y0=dint(key, k + 2, 0, h - ch), x0=dint(key, k + 3, 0, w - cw), ch=ch, cw=cw, tries=t + 1)
                break
        else:
            r = w / h
            if r < 3.0 / 4.0:
                cw, ch = w, int(round(w / (3.0 / 4.0)))
            elif r > 4.0 / 3.0:
                ch, cw = h, int(round(h * (4.0 / 3.0)))
            else:
                cw, ch = w, h
            d.update(y0=(h - ch) // 2, x0=(w - cw) // 2, ch=ch, cw=cw, tries=0)
        d["flip"] = int(unif(key, 3) < 0.5)
    else:
        d["rh"], d["rw"] = resize_short(h, w, cfg["eval_resize"] if kind == EVAL else crop)
        d["y0"] = int(round((d["rh"] - crop) / 2.0))  # torchvision center_crop
        d["x0"] = int(round((d["rw"] - crop) / 2.0))
    alpha = np.zeros(3, np.float32)
    if cfg["lighting"] > 0 and kind in (SCALE, RRC):
        sigma = float(np.float32(cfg["lighting"]))
        alpha = np.array([sigma * normal(key, 4 + 2 * j) for j in range(3)], np.float32)
    return d, alpha


def crop_u8(img, cfg, d):
    f = Image.BICUBIC if cfg["interp"] == 1 else Image.BILINEAR
    c = cfg["crop"]
    if cfg["kind"] == RRC:  # torchvision resized_crop: crop, then resize the crop alone
        out = img.crop((d["x0"], d["y0"], d["x0"] + d["cw"], d["y0"] + d["ch"])).resize((c, c), f)
    else:
        out = img.resize((d["rw"], d["rh"]), f).crop((d["x0"], d["y0"], d["x0"] + c, d["y0"] + c))
    return np.asarray(out)


def dct_denom(cfg, d):
    """augment.c's aug_dct_denom: the largest k in (8, 4, 2) that leaves >= 2 source pixels per
    output pixel on both axes of the scaled image, else 1."""
    if cfg["kind"] == RRC:
        sh, sw, th, tw = d["ch"], d["cw"], cfg["crop"], cfg["crop"]
    else:
        sh, sw, th, tw = d["h"], d["w"], d["rh"], d["rw"]
    for k in (8, 4, 2):
        if sh >= 2 * k * th and sw >= 2 * k * tw:
            return k
    return 1


def draft_rgb(b, k):
    """Pillow's decode at 1/k: Image.draft with the size W // k, H // k (JpegImagePlugin picks
    scale k for it), then RGB."""
    img = Image.open(io.BytesIO(b))
    W, H = img.size
    img.draft("CMYK" if img.mode == "CMYK" else img.mode, (W // k, H // k))
    assert img.size == ((W + k - 1) // k, (H + k - 1) // k), (img.size, W, H, k)
    return img.convert("RGB")


def crop_u8_dct(img, cfg, d, k):
    """crop_u8 on the image decoded at 1/k (img), with draft's box (0, 0, w / k, h / k) mapping it
    onto the full-size one; rrc: the scaled pixels that overlap the box, resized with the box."""
    f = Image.BICUBIC if cfg["interp"] == 1 else Image.BILINEAR
    c = cfg["crop"]
    if cfg["kind"] == RRC:
        x0, y0, x1, y1 = d["x0"], d["y0"], d["x0"] + d["cw"], d["y0"] + d["ch"]
        ib = (x0 // k, y0 // k, -(-x1 // k), -(-y1 // k))
        box = (x0 / k - ib[0], y0 / k - ib[1], x1 / k - ib[0], y1 / k - ib[1])
        out = img.crop(ib).resize((c, c), f, box=box)
    else:
        box = (0.0, 0.0, d["w"] / k, d["h"] / k)
        out = img.resize((d["rw"], d["rh"]), f, box=box).crop((d["x0"], d["y0"], d["x0"] + c, d["y0"] + c))
    return np.asarray(out)


def finish(u8, d, alpha):
    """fb.resnet.torch order: [0, 1], + lighting (no clamp), normalise; then the flip."""
    x = u8.astype(np.float64) / 255.0
    light = (EIGVEC.astype(np.float64) * alpha.astype(np.float64) * EIGVAL.astype(np.float64)).sum(axis=1)
    x = (x + light - MEAN.astype(np.float64)) / STD.astype(np.float64)
    if d["flip"]:
        x = x[:, ::-1]
    return np.ascontiguousarray(x.transpose(2, 0, 1)).astype(np.float32)


def torchvision_check(img, cfg, d, u8):
    """The same transform through torchvision's own functions (PIL backend), where installed."""
    try:
        import torchvision.transforms.functional as TF
        from torchvision.transforms import InterpolationMode
    except Exception:
        return False
    mode = InterpolationMode.BICUBIC if cfg["interp"] == 1 else InterpolationMode.BILINEAR
    c = cfg["crop"]
    if cfg["kind"] == RRC:
        ref = TF.resized_crop(img, d["y0"], d["x0"], d["ch"], d["cw"], [c, c], mode)
    elif cfg["kind"] in (NONE, EVAL):
        s = cfg["eval_resize"] if cfg["kind"] == EVAL else c
        ref = TF.center_crop(TF.resize(img, s, mode), c)
    else:
        ref = TF.crop(TF.resize(img, [d["rh"], d["rw"]], mode), d["y0"], d["x0"], c, c)
    assert np.array_equal(np.asarray(ref), u8), "torchvision disagrees with the replay"
    return True


# ---- the test JPEGs ----


def photo(name):
    from skimage import data

    return Image.fromarray(getattr(data, name)())


def jpeg_bytes(img, **kw):
    b = io.BytesIO()
    img.save(b, "JPEG", **kw)
    return b.getvalue()


def strip_app14(b):
    """Remove the Adobe APP14 marker (FF EE): a 4-component JPEG without the Adobe flag."""
    i = 2
    out = bytearray(b[:2])
    while i < len(b):
        assert b[i] == 0xFF
        m, n = b[i + 1], (b[i + 2] << 8) | b[i + 3]
        if m != 0xEE:
            out += b[i:i + 2 + n]
        if m == 0xDA:
            out += b[i + 2 + n:]
            break
        i += 2 + n
    return bytes(out)


def make_jpegs():
    coffee, chelsea, astro = photo("coffee"), photo("chelsea"), photo("astronaut")
    j = {}
    j["rgb420"] = (jpeg_bytes(coffee.resize((200, 133), Image.LANCZOS), quality=90), "coffee 200x133 q90 4:2:0")
    j["rgb444"] = (jpeg_bytes(chelsea.resize((180, 120), Image.LANCZOS), quality=90, subsampling=0),
                   "chelsea 180x120 q90 4:4:4")
    j["rgb422"] = (jpeg_bytes(astro.resize((150, 150), Image.LANCZOS), quality=85, subsampling=1),
                   "astronaut 150x150 q85 4:2:2")
    j["gray"] = (jpeg_bytes(chelsea.resize((160, 106), Image.LANCZOS).convert("L"), quality=90), "chelsea grey 160x106")
    cm = jpeg_bytes(coffee.resize((120, 80), Image.LANCZOS).convert("CMYK"), quality=90)
    j["cmyk"] = (cm, "coffee 120x80 CMYK, Pillow-written (Adobe marker, inverted)")
    j["cmyk_noadobe"] = (strip_app14(cm), "the same with the Adobe APP14 marker removed")
    j["progressive"] = (jpeg_bytes(astro.crop((100, 0, 400, 300)).resize((170, 170), Image.LANCZOS), quality=90,
                                   progressive=True), "astronaut crop 170x170 progressive")
    b = j["rgb420"][0]
    assert b[-2:] == b"\xff\xd9"
    j["junk_eoi"] = (b[:-2] + b"\x7f\x00\x11\x7f" + b[-2:], "rgb420 with 4 junk bytes before EOI")
    j["one"] = (jpeg_bytes(chelsea.crop((100, 100, 101, 101)), quality=90), "1x1")
    j["wide"] = (jpeg_bytes(coffee.crop((0, 150, 600, 190)).resize((500, 33), Image.LANCZOS), quality=90),
                 "coffee strip 500x33")
    j["tall"] = (jpeg_bytes(chelsea.crop((200, 0, 220, 300)), quality=90), "chelsea strip 20x300")
    j["odd"] = (jpeg_bytes(astro.resize((17, 13), Image.LANCZOS), quality=90), "astronaut 17x13")
    j["paper"] = (jpeg_bytes(photo("rocket").crop((0, 60, 427, 380)).resize((480, 360), Image.LANCZOS), quality=90),
                  "rocket 480x360 q90: ImageNet as stored for the paper (largest side 480)")
    j["big"] = (jpeg_bytes(coffee, quality=90), "coffee 600x400 q90 4:2:0 (data.dct_scale cases)")
    b = io.BytesIO()
    chelsea.resize((40, 30)).save(b, "PNG")
    j["png"] = (b.getvalue(), "a PNG (must be refused: not a JPEG)")
    return j


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "test/data"
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "image_ref.h5")
    jpegs = make_jpegs()
    gz = dict(compression="gzip", compression_opts=9)
    with h5py.File(path, "w") as f:
        import PIL

        f.attrs["pillow"] = PIL.__version__
        for name, (b, kind) in jpegs.items():
            ds = f.create_dataset("jpeg/" + name, data=np.frombuffer(b, np.uint8))
            ds.attrs["kind"] = kind
        images = {}
        for name, (b, _) in jpegs.items():
            if name in ("png", "paper", "big"):
                continue
            img = Image.open(io.BytesIO(b)).convert("RGB")
            images[name] = img
            if name == "junk_eoi":  # the test compares it with decode/rgb420
                assert np.array_equal(np.asarray(img), np.asarray(images["rgb420"]))
                continue
            f.create_dataset("decode/" + name, data=np.asarray(img), **gz)
        for name in ("rgb420", "gray", "cmyk", "progressive"):
            for dn in (2, 4, 8):
                img = Image.open(io.BytesIO(jpegs[name][0]))
                img.draft("CMYK" if img.mode == "CMYK" else img.mode, (img.size[0] // dn, img.size[1] // dn))
                f.create_dataset("draft/%s_%d" % (name, dn), data=np.asarray(img.convert("RGB")), **gz)
        images["paper"] = Image.open(io.BytesIO(jpegs["paper"][0])).convert("RGB")
        images["big"] = Image.open(io.BytesIO(jpegs["big"][0])).convert("RGB")

        resizes = [("rgb444", 120, 120, 1, None), ("rgb444", 90, 90, 0, None), ("rgb444", 96, 64, 1, None),
                   ("rgb444", 96, 64, 0, None), ("rgb444", 130, 90, 1, None), ("rgb420", 37, 5, 1, None),
                   ("rgb420", 7, 90, 0, None), ("rgb444", 64, 64, 1, (10.5, 3.25, 150.75, 100.0)),
                   ("rgb444", 80, 50, 0, (0.0, 0.0, 60.0, 40.0)), ("wide", 150, 100, 1, None),
                   ("tall", 30, 200, 0, (2.0, 50.5, 18.0, 250.0)), ("one", 9, 5, 1, None),
                   ("rgb420", 100, 66, 1, (1.0, 1.0, 199.5, 132.0))]
        for i, (src, w, h, filt, box) in enumerate(resizes):
            out = images[src].resize((w, h), Image.BICUBIC if filt else Image.BILINEAR, box=box)
            g = f.create_group("resize/%d" % i)
            g.attrs["src"] = src
            g.attrs["filter"] = filt
            g.attrs["box"] = np.array(box if box else [-1, -1, -1, -1], np.float32)
            g.create_dataset("out", data=np.asarray(out), **gz)

        small = dict(crop=64, scale_min=72, scale_max=128, eval_resize=80)
        cases = []
        for idx in (0, 1, 2, 3):
            cases.append(("rgb420", dict(small, kind=SCALE, interp=1, lighting=0.1), 7, 0, idx))
        cases += [("rgb444", dict(small, kind=SCALE, interp=0, lighting=0.1), 7, 3, 11),
                  ("gray", dict(small, kind=SCALE, interp=1, lighting=0.1), 1, 0, 5),
                  ("wide", dict(small, kind=SCALE, interp=1, lighting=0.1), 7, 1, 2),
                  ("tall", dict(small, kind=SCALE, interp=0, lighting=0.1), 7, 1, 3),
                  ("one", dict(small, kind=SCALE, interp=1, lighting=0.1), 7, 0, 4),
                  ("cmyk", dict(small, kind=SCALE, interp=1, lighting=0.1), 9, 2, 8),
                  ("progressive", dict(small, kind=SCALE, interp=1, lighting=0.1), 9, 2, 9)]
        for idx in (0, 1, 2):
            cases.append(("rgb420", dict(small, kind=RRC, interp=0, lighting=0.0), 5, 1, idx))
        cases += [("progressive", dict(small, kind=RRC, interp=1, lighting=0.1), 5, 0, 7),
                  ("wide", dict(small, kind=RRC, interp=0, lighting=0.0), 5, 0, 1),
                  ("rgb444", dict(small, kind=NONE, interp=1, lighting=0.0), 0, 0, 0),
                  ("rgb420", dict(small, kind=EVAL, interp=0, lighting=0.0), 0, 0, 0),
                  ("wide", dict(small, kind=EVAL, interp=1, lighting=0.0), 0, 0, 0),
                  ("odd", dict(crop=13, scale_min=13, scale_max=20, eval_resize=15, kind=EVAL, interp=1,
                               lighting=0.0), 0, 0, 0)]
        paper = dict(crop=224, scale_min=256, scale_max=480, eval_resize=256)
        cases += [("paper", dict(paper, kind=SCALE, interp=1, lighting=0.1), 2016, 3, 12345),
                  ("paper", dict(paper, kind=SCALE, interp=0, lighting=0.1), 2016, 4, 99),
                  ("paper", dict(paper, kind=RRC, interp=0, lighting=0.0), 2016, 0, 1),
                  ("paper", dict(paper, kind=EVAL, interp=1, lighting=0.0), 0, 0, 0)]
        # data.dct_scale: crops small enough against the images that the rule picks 1/2 .. 1/8
        dct = dict(dct=1)
        cases += [("big", dict(crop=32, scale_min=40, scale_max=100, eval_resize=40, kind=SCALE, interp=1,
                               lighting=0.1, **dct), 3, 0, i) for i in range(4)]
        cases += [("big", dict(crop=32, scale_min=40, scale_max=100, eval_resize=40, kind=RRC, interp=0,
                               lighting=0.0, **dct), 3, 1, i) for i in range(4)]
        cases += [("big", dict(crop=24, scale_min=24, scale_max=30, eval_resize=24, kind=EVAL, interp=0, lighting=0.0,
                               **dct), 0, 0, 0),
                  ("big", dict(crop=32, scale_min=40, scale_max=100, eval_resize=48, kind=EVAL, interp=1, lighting=0.0,
                               **dct), 0, 0, 0),
                  ("big", dict(crop=64, scale_min=64, scale_max=100, eval_resize=64, kind=NONE, interp=1, lighting=0.0,
                               **dct), 0, 0, 0),
                  ("paper", dict(crop=64, scale_min=72, scale_max=128, eval_resize=80, kind=SCALE, interp=0,
                                 lighting=0.1, **dct), 4, 2, 6),
                  ("progressive", dict(crop=16, scale_min=16, scale_max=24, eval_resize=20, kind=EVAL, interp=1,
                                       lighting=0.0, **dct), 0, 0, 0),
                  ("gray", dict(crop=12, scale_min=12, scale_max=20, eval_resize=16, kind=SCALE, interp=1,
                                lighting=0.1, **dct), 1, 0, 3),
                  ("cmyk", dict(crop=8, scale_min=8, scale_max=12, eval_resize=10, kind=EVAL, interp=1, lighting=0.0,
                                **dct), 0, 0, 0),
                  ("rgb422", dict(crop=8, scale_min=8, scale_max=12, eval_resize=10, kind=RRC, interp=1, lighting=0.0,
                                  **dct), 2, 0, 5),
                  ("rgb444", dict(crop=12, scale_min=12, scale_max=16, eval_resize=14, kind=EVAL, interp=0,
                                  lighting=0.0, **dct), 0, 0, 0),
                  ("wide", dict(crop=8, scale_min=8, scale_max=8, eval_resize=8, kind=SCALE, interp=1, lighting=0.1,
                                **dct), 7, 0, 1),
                  ("odd", dict(crop=1, scale_min=1, scale_max=1, eval_resize=3, kind=EVAL, interp=1, lighting=0.0,
                               **dct), 0, 0, 0)]
        n_tv = 0
        dct_used = {}
        for i, (src, cfg, seed, epoch, index) in enumerate(cases):
            img = images[src]
            d, alpha = draws(cfg, seed, epoch, index, img.size[1], img.size[0])
            if cfg.get("dct"):
                cfg = dict(cfg)
                k = cfg["dct"] = dct_denom(cfg, d)
                dct_used[k] = dct_used.get(k, 0) + 1
                u8 = crop_u8_dct(draft_rgb(jpegs[src][0], k), cfg, d, k) if k > 1 else crop_u8(img, cfg, d)
            else:
                u8 = crop_u8(img, cfg, d)
                n_tv += torchvision_check(img, cfg, d, u8)
            g = f.create_group("aug/%d" % i)
            g.attrs.update(jpeg=src, seed=seed, epoch=epoch, index=index, **cfg)
            g.create_dataset("draws", data=np.array([d[k] for k in ("h", "w", "rh", "rw", "y0", "x0", "ch", "cw",
                                                                 "flip", "tries")], np.int32))
            g.create_dataset("alpha", data=alpha)
            g.create_dataset("crop", data=u8, **gz)
            if cfg["crop"] <= 64:
                g.create_dataset("out", data=finish(u8, d, alpha), **gz)
        f.attrs["torchvision_checked"] = n_tv
        assert all(dct_used.get(k) for k in (2, 4, 8)), dct_used
    print("wrote %s (%d bytes; %d of %d augmentation cases also checked against torchvision; dct_scale cases by "
          "scale: %s)" % (path, os.path.getsize(path), n_tv, len(cases), dct_used))


if __name__ == "__main__":
    main()
