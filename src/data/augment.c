/* augment.c — the training and evaluation transforms (see augment.h; constants and sources in
 * docs/data.md, "Augmentation").
 *
 * Draw numbers (k of draw_u64): 0 the shorter side S, 1 the crop row, 2 the crop column, 3 the
 * flip, 4..9 the three normals of α (Box–Muller on pairs), 16 + 4t .. 19 + 4t the RRC attempt t
 * (area, log-aspect, row, column). tools/make_image_reference.py recomputes them. */
#include "data/augment.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "util/util.h"

const float aug_eigval[3] = {0.2175f, 0.0188f, 0.0045f};
const float aug_eigvec[3][3] = {
    {-0.5675f, 0.7192f, 0.4009f},
    {-0.5808f, -0.0045f, -0.8140f},
    {-0.5836f, -0.6948f, 0.4203f},
};

void aug_default(aug_cfg *c, int kind) {
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->crop = 224;
    c->scale_min = 256;
    c->scale_max = 480;
    c->eval_resize = 256;
    c->interp = kind == AUG_RRC ? IMAGE_BILINEAR : IMAGE_BICUBIC;
    c->lighting = kind == AUG_SCALE ? 0.1f : 0.0f;
    memcpy(c->mean, mean, sizeof mean);
    memcpy(c->std, std, sizeof std);
}

/* ---- counter-based draws ---- */

static uint64_t draw_u64(uint64_t key, int k) { return seed_mix(key, (uint64_t)k); }

/* Uniform in [0, 1) with 53 bits. */
static double draw_unif(uint64_t key, int k) { return (double)(draw_u64(key, k) >> 11) * 0x1.0p-53; }

/* Uniform integer in [lo, hi] (multiply-shift; bias below 2^-40 for ranges < 2^24). */
static int draw_int(uint64_t key, int k, int lo, int hi) {
    unsigned __int128 m = (unsigned __int128)draw_u64(key, k) * (uint64_t)(hi - lo + 1);
    return lo + (int)(uint64_t)(m >> 64);
}

/* N(0, 1) by Box–Muller from draws k and k + 1. */
static double draw_normal(uint64_t key, int k) {
    double u1 = draw_unif(key, k), u2 = draw_unif(key, k + 1);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

/* Python's round() of x >= 0 to an int: half to even (rint in the default rounding mode). */
static int round_even(double x) { return (int)rint(x); }

/* torchvision's centre offset int(round((n − crop) / 2.0)). */
static int centre_offset(int n, int crop) { return round_even((n - crop) / 2.0); }

/* torchvision Resize(s) of an h × w image: shorter side s, longer int(s · long / short). */
static void resize_short(int h, int w, int s, int *rh, int *rw) {
    if (w <= h) {
        *rw = s;
        *rh = (int)((double)((long long)s * h) / w);
    } else {
        *rh = s;
        *rw = (int)((double)((long long)s * w) / h);
    }
}

/* torchvision RandomResizedCrop.get_params (scale (0.08, 1), ratio (3/4, 4/3)). */
static void draw_rrc(uint64_t key, int h, int w, aug_draw *p) {
    double area = (double)h * w;
    double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    for (int t = 0; t < 10; t++) {
        int k = 16 + 4 * t;
        double target = area * (0.08 + (1.0 - 0.08) * draw_unif(key, k));
        double aspect = exp(lr0 + (lr1 - lr0) * draw_unif(key, k + 1));
        int cw = round_even(sqrt(target * aspect)), ch = round_even(sqrt(target / aspect));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            p->y0 = draw_int(key, k + 2, 0, h - ch);
            p->x0 = draw_int(key, k + 3, 0, w - cw);
            p->ch = ch;
            p->cw = cw;
            p->tries = t + 1;
            return;
        }
    }
    double in_ratio = (double)w / h;
    int cw = w, ch = h;
    if (in_ratio < 3.0 / 4.0) ch = round_even(cw / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0) cw = round_even(ch * (4.0 / 3.0));
    p->y0 = (h - ch) / 2;
    p->x0 = (w - cw) / 2;
    p->ch = ch;
    p->cw = cw;
    p->tries = 0;
}

void aug_draw_params(const aug_cfg *c, uint64_t seed, uint64_t epoch, uint64_t index, int h, int w, aug_draw *p) {
    uint64_t key = seed_mix(seed_mix(seed, epoch), index);
    memset(p, 0, sizeof *p);
    p->h = h;
    p->w = w;
    p->ch = p->cw = c->crop;
    switch (c->kind) {
    case AUG_SCALE: {
        int s = draw_int(key, 0, c->scale_min, c->scale_max);
        /* fb.resnet.torch RandomScale: the longer side torch.round(long / short · S) */
        if (w < h) {
            p->rw = s;
            p->rh = (int)floor((double)h / w * s + 0.5);
        } else {
            p->rh = s;
            p->rw = (int)floor((double)w / h * s + 0.5);
        }
        p->y0 = draw_int(key, 1, 0, p->rh - c->crop);
        p->x0 = draw_int(key, 2, 0, p->rw - c->crop);
        p->flip = draw_unif(key, 3) < 0.5;
        break;
    }
    case AUG_RRC:
        p->rh = h;
        p->rw = w;
        draw_rrc(key, h, w, p);
        p->flip = draw_unif(key, 3) < 0.5;
        break;
    default: /* AUG_NONE, AUG_EVAL */
        resize_short(h, w, c->kind == AUG_EVAL ? c->eval_resize : c->crop, &p->rh, &p->rw);
        p->y0 = centre_offset(p->rh, c->crop);
        p->x0 = centre_offset(p->rw, c->crop);
        break;
    }
    if (c->lighting > 0 && c->kind != AUG_EVAL && c->kind != AUG_NONE)
        for (int j = 0; j < 3; j++) p->alpha[j] = (float)(c->lighting * draw_normal(key, 4 + 2 * j));
}

/* data.dct_scale's margin: the scaled source keeps at least this many pixels per output pixel
 * (2: --pack's margin and Pillow's thumbnail default, reducing_gap = 2; docs/data.md, DCT
 * scaling, has what 1 would give). tools/make_image_reference.py's dct_denom has the same. */
#define AUG_DCT_MARGIN 2

int aug_dct_denom(const aug_cfg *c, const aug_draw *p) {
    if (!c->dct_scale) return 1;
    /* the source extent the output is resampled from, and the size it is resampled to */
    const long sh = c->kind == AUG_RRC ? p->ch : p->h, sw = c->kind == AUG_RRC ? p->cw : p->w;
    const long th = c->kind == AUG_RRC ? c->crop : p->rh, tw = c->kind == AUG_RRC ? c->crop : p->rw;
    for (int k = 8; k >= 2; k /= 2)
        if (sh >= (long)AUG_DCT_MARGIN * k * th && sw >= (long)AUG_DCT_MARGIN * k * tw) return k;
    return 1;
}

/* Pillow's draft box of a 1/k decode: (0, 0, w / k, h / k) in the scaled image (exact in float). */
static void draft_box(const aug_draw *p, int k, float box[4]) {
    box[0] = box[1] = 0.f;
    box[2] = (float)((double)p->w / k);
    box[3] = (float)((double)p->h / k);
}

/* The rows [r[0], r[1]) and columns [r[2], r[3]) of the image decoded at 1/k (k = 1: the
 * full-size image) that p's output reads. rrc at k > 1: the scaled pixels that overlap the box. */
void aug_source_rect(const aug_cfg *c, const aug_draw *p, int k, int r[4]) {
    if (c->kind == AUG_RRC) {
        r[0] = p->y0 / k;
        r[1] = (p->y0 + p->ch + k - 1) / k;
        r[2] = p->x0 / k;
        r[3] = (p->x0 + p->cw + k - 1) / k;
    } else if (k == 1) {
        image_window_taps(p->h, p->w, p->rh, p->rw, p->y0, p->x0, c->crop, c->crop, c->interp, r);
    } else {
        float box[4];
        draft_box(p, k, box);
        image_window_taps_box((p->h + k - 1) / k, (p->w + k - 1) / k, p->rh, p->rw, p->y0, p->x0, c->crop, c->crop,
                              c->interp, box, r);
    }
}

void aug_crop_u8(image_dec *d, const aug_cfg *c, const aug_draw *p, const image_view *src, uint8_t *out) {
    const int k = aug_dct_denom(c, p);
    if (c->kind == AUG_RRC && k == 1) {
        /* torchvision crops, then resizes the crop alone: a view whose whole image is the box */
        const uint8_t *px = src->px + (size_t)(p->y0 - src->y0) * src->stride + (size_t)(p->x0 - src->x0) * 3;
        image_view box = {px, p->ch, p->cw, 0, 0, src->stride};
        image_resize_window(d, out, c->crop, c->crop, &box, c->crop, c->crop, 0, 0, c->interp);
    } else if (c->kind == AUG_RRC) {
        /* the scaled pixels that overlap the box are the whole image (taps clamped to them), the
         * box itself is a fractional box of it */
        int r[4];
        aug_source_rect(c, p, k, r);
        const uint8_t *px = src->px + (size_t)(r[0] - src->y0) * src->stride + (size_t)(r[2] - src->x0) * 3;
        image_view v = {px, r[1] - r[0], r[3] - r[2], 0, 0, src->stride};
        const float box[4] = {(float)((double)p->x0 / k - r[2]), (float)((double)p->y0 / k - r[0]),
                              (float)((double)(p->x0 + p->cw) / k - r[2]), (float)((double)(p->y0 + p->ch) / k - r[0])};
        image_resize_window_box(d, out, c->crop, c->crop, &v, c->crop, c->crop, 0, 0, c->interp, box);
    } else if (k == 1) {
        image_resize_window(d, out, c->crop, c->crop, src, p->rh, p->rw, p->y0, p->x0, c->interp);
    } else {
        float box[4];
        draft_box(p, k, box);
        image_resize_window_box(d, out, c->crop, c->crop, src, p->rh, p->rw, p->y0, p->x0, c->interp, box);
    }
}

/* One output value of aug_finish: (v / 255 + light − mean) / std, each operation rounded to float
 * in this order (the scalar table and the AVX2 path's tail both use it). */
static inline float finish_value(int v, float light, float mean, float std) {
    return ((float)v / 255.f + light - mean) / std;
}

/* aug_finish with AVX2 (chosen at run time by image_simd; the table loop in aug_finish is the
 * reference and runs when image_simd(-1) is 0). Per 8 output pixels, the 24 source bytes (8
 * pixels, in reverse order when flipped) are split into the three channels by two byte shuffles
 * each and widened to int32; each channel then computes finish_value's expression with the same
 * IEEE operations in the same order — exact int → float conversion, vdivps by 255, vaddps light,
 * vsubps mean, vdivps std, each correctly rounded like the scalar ones — so the values are the
 * table's bits (test_image, finish_simd_matches_scalar), and 8 floats are stored per plane.
 * (A gather from the table was slower than the scalar loop on an AMD EPYC Zen 3 core: 75 µs
 * against 57 µs for a 224 crop; this takes 40 µs there.) The last n mod 8 columns run
 * finish_value. */
__attribute__((target("avx2"))) static void finish_avx2(const float light[3], const float mean[3], const float std[3],
                                                         const uint8_t *in, int n, int flip, float *out) {
    /* byte masks: output pixel j of a block takes source pixel j (flip: 7 − j) of the block's 8,
     * channel c at byte 3·pixel + c: from the first 16 bytes (ma) or the last 8 (mb) */
    uint8_t ma[3][16], mb[3][16];
    for (int c = 0; c < 3; c++)
        for (int j = 0; j < 16; j++) {
            int b = j < 8 ? 3 * (flip ? 7 - j : j) + c : -1;
            ma[c][j] = (uint8_t)(b >= 0 && b < 16 ? b : 0x80);
            mb[c][j] = (uint8_t)(b >= 16 ? b - 16 : 0x80);
        }
    __m128i sa[3], sb[3];
    __m256 vl[3], vm[3], vs[3];
    for (int c = 0; c < 3; c++) {
        sa[c] = _mm_loadu_si128((const __m128i *)ma[c]);
        sb[c] = _mm_loadu_si128((const __m128i *)mb[c]);
        vl[c] = _mm256_set1_ps(light[c]);
        vm[c] = _mm256_set1_ps(mean[c]);
        vs[c] = _mm256_set1_ps(std[c]);
    }
    const __m256 k255 = _mm256_set1_ps(255.f);
    const int n8 = n - n % 8;
    const size_t plane = (size_t)n * n;
    for (int y = 0; y < n; y++) {
        const uint8_t *row = in + (size_t)y * n * 3;
        float *o[3] = {out + (size_t)y * n, out + plane + (size_t)y * n, out + 2 * plane + (size_t)y * n};
        for (int x = 0; x < n8; x += 8) {
            /* the block's first source pixel: x, or n − 8 − x when flipped (outputs x .. x + 7
             * read pixels n − 1 − x down to n − 8 − x); 16 + 8 bytes, nothing past the row */
            const uint8_t *q = row + (size_t)(flip ? n - 8 - x : x) * 3;
            const __m128i a = _mm_loadu_si128((const __m128i *)q), b = _mm_loadl_epi64((const __m128i *)(q + 16));
            for (int c = 0; c < 3; c++) {
                __m128i v = _mm_or_si128(_mm_shuffle_epi8(a, sa[c]), _mm_shuffle_epi8(b, sb[c]));
                __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
                f = _mm256_div_ps(_mm256_sub_ps(_mm256_add_ps(_mm256_div_ps(f, k255), vl[c]), vm[c]), vs[c]);
                _mm256_storeu_ps(o[c] + x, f);
            }
        }
        for (int x = n8; x < n; x++) {
            const uint8_t *q = row + (size_t)(flip ? n - 1 - x : x) * 3;
            for (int c = 0; c < 3; c++) o[c][x] = finish_value(q[c], light[c], mean[c], std[c]);
        }
    }
}

void aug_finish(const aug_cfg *c, const aug_draw *p, const uint8_t *in, float *out) {
    float light[3];
    for (int ch = 0; ch < 3; ch++) {
        light[ch] = 0.f;
        for (int j = 0; j < 3; j++) light[ch] += aug_eigvec[ch][j] * p->alpha[j] * aug_eigval[j];
    }
    int n = c->crop;
    if (image_simd(-1) > 0) {
        finish_avx2(light, c->mean, c->std, in, n, p->flip, out);
        return;
    }
    /* a table per channel: the same expression for each of the 256 values a pixel can take */
    float lut[3][256];
    for (int ch = 0; ch < 3; ch++)
        for (int v = 0; v < 256; v++) lut[ch][v] = finish_value(v, light[ch], c->mean[ch], c->std[ch]);
    size_t plane = (size_t)n * n;
    for (int y = 0; y < n; y++) {
        const uint8_t *row = in + (size_t)y * n * 3;
        float *o0 = out + (size_t)y * n, *o1 = o0 + plane, *o2 = o1 + plane;
        const uint8_t *q = p->flip ? row + (size_t)(n - 1) * 3 : row; /* source pixel of output column 0 */
        const ptrdiff_t step = p->flip ? -3 : 3;
        for (int x = 0; x < n; x++, q += step) {
            o0[x] = lut[0][q[0]];
            o1[x] = lut[1][q[1]];
            o2[x] = lut[2][q[2]];
        }
    }
}

int aug_sample(image_dec *d, const aug_cfg *c, uint64_t seed, uint64_t epoch, uint64_t index, const uint8_t *jpeg,
               size_t nbytes, float *out, aug_draw *p, int *warnings, char *err, size_t errlen) {
    aug_draw local;
    if (!p) p = &local;
    *warnings = 0;
    int h, w;
    if (image_open(d, jpeg, nbytes, &h, &w, err, errlen)) return -1; /* the header, read once */
    aug_draw_params(c, seed, epoch, index, h, w, p);
    const int k = aug_dct_denom(c, p);
    int r[4];
    aug_source_rect(c, p, k, r);
    const uint8_t *px;
    size_t stride;
    if (image_decode_rect_scaled_open(d, k, r[0], r[1], r[2], r[3], &px, &stride, warnings, err, errlen))
        return -1;
    uint8_t *crop = image_scratch(d, (size_t)c->crop * c->crop * 3);
    if (!crop) return seterr(err, errlen, "out of memory for a %d x %d crop", c->crop, c->crop), -1;
    image_view v = {px, (h + k - 1) / k, (w + k - 1) / k, r[0], r[2], stride};
    aug_crop_u8(d, c, p, &v, crop);
    aug_finish(c, p, crop, out);
    return 0;
}
