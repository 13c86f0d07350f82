/* augment.h — the training and evaluation transforms of the ImageNet input path (issue 11;
 * constants and sources: docs/data.md, "Augmentation").
 *
 * Every transform is: resize the whole decoded image to (rh, rw), take the box (y0, x0, ch, cw)
 * of it, resize the box to crop × crop, flip horizontally, add the PCA lighting offset, normalise
 * per channel. Each kind leaves one of the two resizes the identity:
 *  - AUG_SCALE (He et al. 2015 §3.4, as fb.resnet.torch's RandomScale + RandomCrop + Lighting +
 *    ColorNormalize + HorizontalFlip): shorter side S uniform in the integers [scale_min,
 *    scale_max], longer side round(long / short · S) (torch.round: half away from zero); a
 *    uniform crop × crop box; flip with p = 1/2; α ~ N(0, σ²)³ lighting; normalise.
 *  - AUG_RRC (torchvision RandomResizedCrop + RandomHorizontalFlip, transforms.py 0.14): no
 *    first resize (rh, rw = h, w); the box from area U(0.08, 1)·h·w and log-uniform aspect in
 *    [3/4, 4/3], 10 tries, then torchvision's central fallback; the box alone resized to crop ×
 *    crop (torchvision crops, then resizes: taps clamped to the box); flip p = 1/2.
 *  - AUG_NONE: shorter side to crop (longer side int(crop · long / short), torchvision Resize),
 *    centre crop; no randomness.
 *  - AUG_EVAL: shorter side to eval_resize (torchvision Resize), centre crop with torchvision's
 *    offsets int(round((H − crop) / 2)) (round half to even); no randomness.
 * The second resize and the crop of AUG_SCALE / NONE / EVAL are computed together as a window of
 * the first resize (image_resize_window), bit-identical to resize-then-crop; only the JPEG rows
 * and columns that feed the window are decoded (image_decode_rect). So the work per sample is
 * bounded by crop² and the source span the crop reads, whatever the aspect ratio: a 5000 × 20
 * image at S = 480 has a 120,000-pixel-wide virtual resize of which only 224 columns are made.
 *
 * Randomness: every draw is a pure function of (seed, epoch, sample index, draw number)
 * (splitmix64 mixing, util.h seed_mix), so a batch does not depend on threads or timing, and a
 * test can recompute the draws (tools/make_image_reference.py does, in Python). */
#ifndef DSGD_AUGMENT_H
#define DSGD_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "data/image.h"

enum { AUG_SCALE = 0, AUG_RRC = 1, AUG_NONE = 2, AUG_EVAL = 3 };

typedef struct {
    int kind;                  /* AUG_* */
    int crop;                  /* output side (224) */
    int scale_min, scale_max;  /* AUG_SCALE: range of the shorter side (256, 480), crop <= scale_min */
    int eval_resize;           /* AUG_EVAL: shorter side (256), >= crop */
    int interp;                /* IMAGE_BILINEAR or IMAGE_BICUBIC */
    float lighting;            /* σ of the PCA lighting α (0.1 for AUG_SCALE, 0 = none) */
    float mean[3], std[3];     /* per channel on [0, 1] RGB */
    int dct_scale;             /* 1: decode at 1/2, 1/4 or 1/8 where the resize allows (aug_dct_denom; data.dct_scale) */
} aug_cfg;

/* The defaults of kind: crop 224, scale [256, 480], eval_resize 256, bicubic (fb.resnet.torch's
 * image.scale) for AUG_SCALE / NONE / EVAL and bilinear (torchvision's default) for AUG_RRC,
 * lighting 0.1 for AUG_SCALE else 0, mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225),
 * dct_scale 0 (Pillow's bits of the full-size decode). */
void aug_default(aug_cfg *c, int kind);

/* Krizhevsky et al. 2012 §4.1 lighting with fb.resnet.torch's ImageNet PCA (datasets/imagenet.lua):
 * eigenvalues and eigenvectors (row = R, G, B; column = component) of the RGB covariance on [0, 1]. */
extern const float aug_eigval[3];
extern const float aug_eigvec[3][3];

/* One sample's draws: the whole image (h, w) is resized to (rh, rw) (AUG_RRC: rh, rw = h, w),
 * the box rows [y0, y0 + ch) × columns [x0, x0 + cw) of that is resized to crop × crop
 * (AUG_SCALE / NONE / EVAL: ch = cw = crop), then mirrored when flip, and alpha gives the
 * lighting offset. tries: AUG_RRC, the attempt (1..10) that fitted, 0 = the fallback. */
typedef struct {
    int h, w;
    int rh, rw;
    int y0, x0, ch, cw;
    int flip;
    int tries;
    float alpha[3];
} aug_draw;

/* The draws of sample index in epoch of a run seeded seed, for an image of h × w (h, w >= 1). */
void aug_draw_params(const aug_cfg *c, uint64_t seed, uint64_t epoch, uint64_t index, int h, int w, aug_draw *p);

/* The JPEG's DCT-domain scale 1/k for sample p (docs/data.md, "DCT scaling"): 1 unless
 * c->dct_scale; else the largest k in {8, 4, 2} for which the source extent the output is
 * resampled from still has at least 2 pixels per output pixel on both axes at 1/k — AUG_SCALE /
 * NONE / EVAL: h >= 2k·rh and w >= 2k·rw; AUG_RRC: ch >= 2k·crop and cw >= 2k·crop — so the
 * antialiased resampler still reduces by 2× or more after the DCT's 8/k-point inverse
 * transform (the margin --pack uses); 1 when none does. A function of the draws only: the draws
 * themselves do not depend on dct_scale. */
int aug_dct_denom(const aug_cfg *c, const aug_draw *p);

/* The rows [r[0], r[1]) and columns [r[2], r[3]) of the image decoded at 1/k (k = 1: the
 * full-size h × w image; k > 1: ceil(h / k) × ceil(w / k)) that sample p's output reads: for
 * AUG_RRC at k = 1 the box itself, [y0, y0 + ch) × [x0, x0 + cw), at k > 1 the scaled pixels
 * that overlap it, [y0 / k, ceil((y0 + ch) / k)) × [x0 / k, ceil((x0 + cw) / k)); for AUG_SCALE
 * / NONE / EVAL the span of the resampler's taps for the crop × crop window (y0, x0) of the
 * resize to (rh, rw) (image_window_taps, image_window_taps_box with draft's box at k > 1), which
 * widens with the filter's support (bicubic more than bilinear). Always within the image, never
 * empty. aug_sample decodes this rect and no other (image_decode_rect_scaled at k =
 * aug_dct_denom(c, p), which adds one iMCU of margin for the upsampler and entropy-decodes the
 * rows above), and aug_crop_u8 reads nothing outside it: on a view holding only the rect it
 * gives the crop of the whole decode (test_image: source_rect_is_what_sample_decodes).
 * tools/bench_data.c times this decode alone. */
void aug_source_rect(const aug_cfg *c, const aug_draw *p, int k, int r[4]);

/* The crop before flip and colour: (crop, crop, 3) u8 into out, from src holding at least the
 * rows and columns of the decoded image that p's output reads. Pillow's bits: equal to
 * img.resize((rw, rh), f).crop((x0, y0, x0 + crop, y0 + crop)) (AUG_SCALE / NONE / EVAL) or
 * img.crop((x0, y0, x0 + cw, y0 + ch)).resize((crop, crop), f) (AUG_RRC).
 * With k = aug_dct_denom(c, p) > 1, src is the image decoded at 1/k (ceil(h / k) × ceil(w / k),
 * Pillow's img.draft("RGB", (w // k, h // k))) and the result is Pillow's on that image with
 * draft's box B = (0, 0, w / k, h / k): img.resize((rw, rh), f, box=B).crop(...) (AUG_SCALE /
 * NONE / EVAL); for AUG_RRC, with I = (x0 // k, y0 // k, ceil((x0 + cw) / k), ceil((y0 + ch) /
 * k)) the scaled pixels that overlap the box, img.crop(I).resize((crop, crop), f, box=(x0 / k −
 * I0, y0 / k − I1, (x0 + cw) / k − I0, (y0 + ch) / k − I1)). */
void aug_crop_u8(image_dec *d, const aug_cfg *c, const aug_draw *p, const image_view *src, uint8_t *out);

/* Flip, lighting and normalisation: out (3, crop, crop) float, CHW, from the u8 crop in (crop,
 * crop, 3): out[c][y][x] = (in[y][x'][c] / 255 + Σ_j eigvec[c][j]·α_j·eigval[j] − mean[c]) /
 * std[c], x' = crop − 1 − x when flip. The lighting offset is the same for every pixel of a
 * channel and nothing is clamped, as fb.resnet.torch's Lighting (datasets/transforms.lua).
 * Each value is ((float)v / 255.f + light[c] − mean[c]) / std[c] in float, rounded after each
 * operation in that order. With AVX2 (image_simd(-1) = 1) 8 values per channel are computed at
 * a time with the same operations, else through a table of the 256 values per channel: the
 * same bits either way (test_image, finish_simd_matches_scalar). */
void aug_finish(const aug_cfg *c, const aug_draw *p, const uint8_t *in, float *out);

/* Decode, draw, crop and finish one sample: out (3, crop, crop) float. p (may be NULL) receives
 * the draws; *warnings libjpeg's warnings. Returns 0, or -1 with err (image_decode_rgb's
 * errors); out is then untouched. No allocation once d has seen the largest image and crop. */
int aug_sample(image_dec *d, const aug_cfg *c, uint64_t seed, uint64_t epoch, uint64_t index, const uint8_t *jpeg,
               size_t nbytes, float *out, aug_draw *p, int *warnings, char *err, size_t errlen);

#endif
