/* image.c — JPEG decoding with libjpeg(-turbo) and Pillow's resampler (see image.h).
 *
 * Decoding: libjpeg reports errors through error_exit, which must not return; ours longjmps
 * back into the image_decode_* call that set the jump buffer, which aborts the decompression
 * (the object stays reusable) and returns -1. Warnings (emit_message level −1) are counted.
 *
 * Resampling follows Pillow's src/libImaging/Resample.c (precompute_coeffs,
 * normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc / Vertical_8bpc) operation by
 * operation, in double for the coefficients and int32 for the sums, so that the results are
 * Pillow's bits. The coefficient arithmetic must not be contracted into fused multiply-adds
 * (-march=native enables FMA; Debian's Pillow is built without it), hence the pragma. */
#pragma GCC optimize("fp-contract=off")
#include "data/image.h"

#include <immintrin.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "util/util.h"

struct dec_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;
};

struct image_dec {
    struct jpeg_decompress_struct cinfo;
    struct dec_err jerr;
    int opened;         /* image_open read a header that image_decode_rect_scaled_open has not used yet */
    uint8_t *out;       /* decoded pixels */
    size_t out_cap;
    uint8_t *line;      /* one CMYK scanline */
    size_t line_cap;
    uint8_t *tmp;       /* resize: the horizontal pass's output */
    size_t tmp_cap;
    int32_t *acc;       /* resize: one row of vertical sums */
    size_t acc_cap;
    int32_t *kx, *ky;   /* resize: fixed-point coefficients per output column / row */
    int16_t *kx16;      /* resize, AVX2: kx split into 16-bit halves laid out for madd (kx_split) */
    size_t kx16_cap;
    int32_t *ky16;      /* resize, AVX2: ky split into 16-bit halves, tap pairs for madd (ky_split) */
    size_t ky16_cap;
    size_t kx_cap, ky_cap;
    int *bx, *by;       /* resize: (first tap, tap count) per output column / row */
    size_t bx_cap, by_cap;
    double *w;          /* resize: one output's weights before normalisation */
    size_t w_cap;
    uint8_t *scratch;   /* image_scratch */
    size_t scratch_cap;
};

/* Grow *p to at least need bytes (never shrinks). Returns 0 or -1 when out of memory. */
static int grow(void *p, size_t *cap, size_t need) {
    void **pp = p;
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need) n *= 2;
    void *q = realloc(*pp, n);
    if (!q) return -1;
    *pp = q;
    *cap = n;
    return 0;
}

static void grow_or_die(void *p, size_t *cap, size_t need) {
    if (grow(p, cap, need)) DIE("image: out of memory (%zu bytes)", need);
}

uint8_t *image_scratch(image_dec *d, size_t nbytes) {
    return grow(&d->scratch, &d->scratch_cap, nbytes) ? NULL : d->scratch;
}

/* ---- libjpeg error manager ---- */

static void dec_error_exit(j_common_ptr c) { longjmp(((struct dec_err *)c->err)->jb, 1); }

static void dec_emit_message(j_common_ptr c, int level) {
    if (level < 0) {
        ((struct dec_err *)c->err)->warnings++;
        c->err->num_warnings++;
    }
}

static void dec_output_message(j_common_ptr c) { (void)c; }

/* The message of the error that was just raised, with a plainer wording for the common ones. */
static void dec_message(image_dec *d, char *err, size_t errlen) {
    struct jpeg_error_mgr *e = &d->jerr.pub;
    if (e->msg_code == JERR_NO_SOI) {
        seterr(err, errlen, "not a JPEG (starts with 0x%02x 0x%02x)", e->msg_parm.i[0] & 0xff,
               e->msg_parm.i[1] & 0xff);
        return;
    }
    char msg[JMSG_LENGTH_MAX];
    e->format_message((j_common_ptr)&d->cinfo, msg);
    seterr(err, errlen, "corrupt or unsupported JPEG: %s", msg);
}

/* Abandon the image being decoded (the object stays reusable); returns -1. */
static int dec_abort(image_dec *d) {
    jpeg_abort_decompress(&d->cinfo);
    d->opened = 0;
    return -1;
}

/* jpeg_create_decompress fails only when out of memory (through error_exit). */
static int dec_create(image_dec *d) {
    if (setjmp(d->jerr.jb)) return -1;
    jpeg_create_decompress(&d->cinfo);
    return 0;
}

image_dec *image_dec_new(void) {
    image_dec *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = dec_error_exit;
    d->jerr.pub.emit_message = dec_emit_message;
    d->jerr.pub.output_message = dec_output_message;
    if (dec_create(d)) {
        free(d);
        return NULL;
    }
    return d;
}

void image_dec_free(image_dec *d) {
    if (!d) return;
    jpeg_destroy_decompress(&d->cinfo);
    free(d->out);
    free(d->line);
    free(d->tmp);
    free(d->acc);
    free(d->kx);
    free(d->ky);
    free(d->kx16);
    free(d->ky16);
    free(d->bx);
    free(d->by);
    free(d->w);
    free(d->scratch);
    free(d);
}

/* Read the header of buf and choose the output colour space; warnings are counted from here.
 * An image that image_open left open is abandoned first. Must run under the caller's setjmp.
 * Returns 0 or -1 with err (empty input, an unsupported colour space). */
static int dec_header(image_dec *d, const uint8_t *buf, size_t nbytes, char *err, size_t errlen) {
    j_decompress_ptr ci = &d->cinfo;
    if (d->opened) {
        jpeg_abort_decompress(ci);
        d->opened = 0;
    }
    if (!buf || nbytes == 0) return seterr(err, errlen, "empty input (0 bytes)"), -1;
    d->jerr.warnings = 0;
    jpeg_mem_src(ci, buf, (unsigned long)nbytes);
    jpeg_read_header(ci, TRUE);
    switch (ci->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        ci->out_color_space = JCS_RGB;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        ci->out_color_space = JCS_CMYK;
        break;
    default:
        seterr(err, errlen, "unsupported JPEG colour space (%d components)", ci->num_components);
        return -1;
    }
    return 0;
}

/* Pillow's CMYK;I unpacking (C = 255 − stored) followed by cmyk2rgb (Convert.c) with
 * MULDIV255(a, b) = ((a·b + 128) >> 8 + a·b + 128) >> 8. */
static void cmyk_to_rgb(uint8_t *out, const uint8_t *in, int n) {
    for (int x = 0; x < n; x++, in += 4, out += 3) {
        int nk = in[3]; /* 255 − K with K = 255 − stored */
        for (int c = 0; c < 3; c++) {
            int t = (255 - in[c]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            out[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* Read rows into out (row stride bytes), converting CMYK through d->line. Under setjmp. */
static void dec_read_rows(image_dec *d, uint8_t *out, size_t stride, int nrows) {
    j_decompress_ptr ci = &d->cinfo;
    int width = (int)ci->output_width;
    for (int r = 0; r < nrows;) {
        if (ci->out_color_space == JCS_CMYK) {
            JSAMPROW row = d->line;
            if (jpeg_read_scanlines(ci, &row, 1) != 1) ERREXIT(ci, JERR_BAD_STATE);
            cmyk_to_rgb(out + (size_t)r * stride, d->line, width);
            r++;
        } else {
            JSAMPROW rows[8];
            int k = nrows - r < 8 ? nrows - r : 8;
            for (int i = 0; i < k; i++) rows[i] = out + (size_t)(r + i) * stride;
            JDIMENSION got = jpeg_read_scanlines(ci, rows, (JDIMENSION)k);
            if (got == 0) ERREXIT(ci, JERR_BAD_STATE);
            r += (int)got;
        }
    }
}

/* libjpeg's DCT scaling takes 1/1, 1/2, 1/4 and 1/8 here: 0, or 1 with err. */
static int bad_denom(int denom, char *err, size_t errlen) {
    if (denom == 1 || denom == 2 || denom == 4 || denom == 8) return 0;
    seterr(err, errlen, "scale 1/%d: denom must be 1, 2, 4 or 8", denom);
    return 1;
}

int image_decode_rgb(image_dec *d, const uint8_t *buf, size_t nbytes, int denom, const uint8_t **rgb, int *h, int *w,
                     int *warnings, char *err, size_t errlen) {
    j_decompress_ptr ci = &d->cinfo;
    *warnings = 0;
    if (bad_denom(denom, err, errlen)) return -1;
    if (setjmp(d->jerr.jb)) return dec_message(d, err, errlen), dec_abort(d);
    if (dec_header(d, buf, nbytes, err, errlen)) return dec_abort(d);
    ci->scale_num = 1;
    ci->scale_denom = (unsigned)denom;
    jpeg_start_decompress(ci);
    size_t stride = (size_t)ci->output_width * 3;
    if (grow(&d->out, &d->out_cap, stride * ci->output_height) ||
        grow(&d->line, &d->line_cap, (size_t)ci->output_width * 4))
        return seterr(err, errlen, "out of memory for a %u x %u image", ci->output_width, ci->output_height), dec_abort(d);
    dec_read_rows(d, d->out, stride, (int)ci->output_height);
    *h = (int)ci->output_height;
    *w = (int)ci->output_width;
    jpeg_finish_decompress(ci);
    *rgb = d->out;
    *warnings = d->jerr.warnings;
    return 0;
}

int image_read_size(image_dec *d, const uint8_t *buf, size_t nbytes, int *h, int *w, char *err, size_t errlen) {
    j_decompress_ptr ci = &d->cinfo;
    if (setjmp(d->jerr.jb)) return dec_message(d, err, errlen), dec_abort(d);
    if (dec_header(d, buf, nbytes, err, errlen)) return dec_abort(d);
    *h = (int)ci->image_height;
    *w = (int)ci->image_width;
    jpeg_abort_decompress(ci);
    return 0;
}

int image_decode_rect(image_dec *d, const uint8_t *buf, size_t nbytes, int y0, int y1, int x0, int x1,
                      const uint8_t **rgb, size_t *stride, int *warnings, char *err, size_t errlen) {
    return image_decode_rect_scaled(d, buf, nbytes, 1, y0, y1, x0, x1, rgb, stride, warnings, err, errlen);
}

int image_open(image_dec *d, const uint8_t *buf, size_t nbytes, int *h, int *w, char *err, size_t errlen) {
    j_decompress_ptr ci = &d->cinfo;
    if (setjmp(d->jerr.jb)) return dec_message(d, err, errlen), dec_abort(d);
    if (dec_header(d, buf, nbytes, err, errlen)) return dec_abort(d);
    *h = (int)ci->image_height;
    *w = (int)ci->image_width;
    d->opened = 1;
    return 0;
}

/* The body of image_decode_rect_scaled once the header is read (denom checked). Must run under
 * the caller's setjmp. Returns 0 (the image finished or abandoned, the object idle), or -1 with
 * err (the caller abandons the image). */
static int dec_rect(image_dec *d, int denom, int y0, int y1, int x0, int x1, const uint8_t **rgb, size_t *stride,
                    char *err, size_t errlen) {
    j_decompress_ptr ci = &d->cinfo;
    ci->scale_num = 1;
    ci->scale_denom = (unsigned)denom;
    jpeg_calc_output_dimensions(ci);
    int H = (int)ci->output_height, W = (int)ci->output_width;
    if (y0 < 0 || y1 > H || y0 >= y1 || x0 < 0 || x1 > W || x0 >= x1)
        return seterr(err, errlen, "rows [%d, %d) x columns [%d, %d) outside the %d x %d image (scale 1/%d)", y0, y1, x0, x1,
                      H, W, denom), -1;
    jpeg_start_decompress(ci);
    /* One iMCU of margin on each side (in output pixels: the samples per iMCU times the scaled
     * DCT block, 8 / denom): fancy upsampling of the span's edge columns then reads the same
     * neighbours as in a whole decode. */
    int imcu_w = ci->max_h_samp_factor * ci->min_DCT_scaled_size, imcu_h = ci->max_v_samp_factor * ci->min_DCT_scaled_size;
    JDIMENSION cx = (JDIMENSION)(x0 > imcu_w ? x0 - imcu_w : 0);
    JDIMENSION cend = (JDIMENSION)(x1 + imcu_w < W ? x1 + imcu_w : W);
    JDIMENSION cw = cend - cx;
    if (cx > 0 || cw < (JDIMENSION)W) jpeg_crop_scanline(ci, &cx, &cw);
    /* Rows: start one iMCU row above y0 (the upsampler's context), stop at y1. */
    int ry = y0 > imcu_h ? y0 - imcu_h : 0;
    size_t st = (size_t)ci->output_width * 3;
    int nrows = y1 - ry;
    if (grow(&d->out, &d->out_cap, st * (size_t)nrows) || grow(&d->line, &d->line_cap, (size_t)ci->output_width * 4))
        return seterr(err, errlen, "out of memory for rows [%d, %d) of a %d x %d image", y0, y1, H, W), -1;
    if (ry > 0 && jpeg_skip_scanlines(ci, (JDIMENSION)ry) != (JDIMENSION)ry) ERREXIT(ci, JERR_BAD_STATE);
    dec_read_rows(d, d->out, st, nrows);
    if (ci->output_scanline == ci->output_height)
        jpeg_finish_decompress(ci);
    else
        jpeg_abort_decompress(ci);
    d->opened = 0;
    *rgb = d->out + (size_t)(y0 - ry) * st + (size_t)(x0 - (int)cx) * 3;
    *stride = st;
    return 0;
}

int image_decode_rect_scaled(image_dec *d, const uint8_t *buf, size_t nbytes, int denom, int y0, int y1, int x0, int x1,
                             const uint8_t **rgb, size_t *stride, int *warnings, char *err, size_t errlen) {
    *warnings = 0;
    if (bad_denom(denom, err, errlen)) return -1;
    if (setjmp(d->jerr.jb)) return dec_message(d, err, errlen), dec_abort(d);
    if (dec_header(d, buf, nbytes, err, errlen)) return dec_abort(d);
    if (dec_rect(d, denom, y0, y1, x0, x1, rgb, stride, err, errlen)) return dec_abort(d);
    *warnings = d->jerr.warnings;
    return 0;
}

int image_decode_rect_scaled_open(image_dec *d, int denom, int y0, int y1, int x0, int x1, const uint8_t **rgb,
                                  size_t *stride, int *warnings, char *err, size_t errlen) {
    *warnings = 0;
    if (!d->opened) return seterr(err, errlen, "no JPEG open (image_open first)"), -1;
    if (bad_denom(denom, err, errlen)) return dec_abort(d);
    if (setjmp(d->jerr.jb)) return dec_message(d, err, errlen), dec_abort(d);
    if (dec_rect(d, denom, y0, y1, x0, x1, rgb, stride, err, errlen)) return dec_abort(d);
    *warnings = d->jerr.warnings;
    return 0;
}

/* ---- resampling (Pillow's Resample.c) ---- */

enum { PRECISION_BITS = 32 - 8 - 2 };

static double bilinear_filter(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

/* Keys' cubic convolution with a = −0.5 (Pillow's bicubic_filter). */
static double bicubic_filter(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static int filter_ksize(double scale, int interp) {
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = (interp == IMAGE_BICUBIC ? 2.0 : 1.0) * filterscale;
    return (int)ceil(support) * 2 + 1;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for the outputs o0 .. o0 + n − 1 of a
 * resize of in_size samples to outputs spaced scale apart from in0: bounds[2i] = first tap,
 * bounds[2i + 1] = tap count, kk[i·ksize + t] the 22-bit coefficients. */
static void coeffs(image_dec *d, int in_size, double in0, double scale, int o0, int n, int interp, int ksize,
                   int *bounds, int32_t *kk) {
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = (interp == IMAGE_BICUBIC ? 2.0 : 1.0) * filterscale;
    double (*filter)(double) = interp == IMAGE_BICUBIC ? bicubic_filter : bilinear_filter;
    grow_or_die(&d->w, &d->w_cap, (size_t)ksize * sizeof(double));
    double *k = d->w;
    for (int i = 0; i < n; i++) {
        int xx = o0 + i;
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        double ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        int x;
        for (x = 0; x < xmax; x++) {
            double wt = filter((x + xmin - center + 0.5) * ss);
            k[x] = wt;
            ww += wt;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) k[x] /= ww;
        int32_t *q = kk + (size_t)i * ksize;
        for (x = 0; x < xmax; x++)
            q[x] = k[x] < 0 ? (int32_t)(-0.5 + k[x] * (1 << PRECISION_BITS)) : (int32_t)(0.5 + k[x] * (1 << PRECISION_BITS));
        for (; x < ksize; x++) q[x] = 0;
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = xmax > 0 ? xmax : 0;
    }
}

static inline uint8_t clip8(int32_t s) {
    int32_t v = s >> PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Make every output use exactly kuse taps (kuse <= ksize, the coefficients' stride in kk):
 * outputs with fewer taps are moved to start earlier (at the right edge) with zero coefficients
 * in front, within the span [lo, hi) that the outputs' taps cover already, so no pixel outside it
 * is read; the coefficients from kuse to ksize are zero. Integer sums with zero terms are
 * unchanged: the result is the same bits. Returns 0 (nothing changed) when the span is shorter
 * than kuse. */
static int pad_taps(int *bounds, int32_t *kk, int n, int ksize, int kuse) {
    int lo = bounds[0], hi = bounds[2 * (n - 1)] + bounds[2 * (n - 1) + 1];
    if (hi - lo < kuse) return 0;
    for (int i = 0; i < n; i++) {
        int xmin = bounds[2 * i], cnt = bounds[2 * i + 1];
        if (cnt == kuse) continue;
        int xs = xmin < hi - kuse ? xmin : hi - kuse, sh = xmin - xs;
        int32_t *q = kk + (size_t)i * ksize;
        memmove(q + sh, q, (size_t)cnt * sizeof(int32_t));
        for (int t = 0; t < sh; t++) q[t] = 0;
        for (int t = sh + cnt; t < ksize; t++) q[t] = 0;
        bounds[2 * i] = xs;
        bounds[2 * i + 1] = kuse;
    }
    return 1;
}

/* The most taps any of the n outputs has (<= ksize: the filter's support rounds up on both
 * sides, so most resizes use fewer than ksize). */
static int max_taps(const int *bounds, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m = bounds[2 * i + 1] > m ? bounds[2 * i + 1] : m;
    return m;
}

/* One row of the horizontal pass: o (n, 3) from row (pixel x at row + 3·(x − x0)). */
static inline void hpass_row(uint8_t *o, const uint8_t *row, int x0, const int *bounds, const int32_t *kk, int n,
                             int ksize, int fixed) {
    for (int xx = 0; xx < n; xx++) {
        int xmin = bounds[2 * xx], xn = fixed ? ksize : bounds[2 * xx + 1];
        const int32_t *k = kk + (size_t)xx * ksize;
        const uint8_t *p = row + (size_t)(xmin - x0) * 3;
        int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
        for (int t = 0; t < xn; t++) {
            s0 += p[3 * t] * k[t];
            s1 += p[3 * t + 1] * k[t];
            s2 += p[3 * t + 2] * k[t];
        }
        o[3 * xx] = clip8(s0);
        o[3 * xx + 1] = clip8(s1);
        o[3 * xx + 2] = clip8(s2);
    }
}

#define HPASS(K)                                                                                                   \
    static void hpass_##K(uint8_t *o, const uint8_t *row, int x0, const int *bounds, const int32_t *kk, int n) {    \
        hpass_row(o, row, x0, bounds, kk, n, K, 1);                                                                 \
    }
HPASS(3)
HPASS(5)
HPASS(7)
HPASS(9)

/* ---- the two passes with AVX2 (chosen at run time; the scalar passes above are the reference) ----
 *
 * The same integer arithmetic as the scalar passes: u8 × coefficient products summed in int32
 * lanes, each 22-bit coefficient split exactly into two 16-bit halves for _mm256_madd_epi16 (the
 * sums of the scalar code, in another order: integer addition is exact, so the bits are the
 * same), then >> 22 (arithmetic) and clipping to [0, 255] by saturating packs.
 * test_image compares these passes with the scalar ones bit for bit on random sizes. */

static int simd_level = -1; /* -1: not chosen yet; 0 scalar; 1 AVX2 (relaxed atomics: threads may race to choose) */

int image_simd(int want) {
    int v = __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
    if (want == 0) v = 0;
    else if (want > 0 || v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    __atomic_store_n(&simd_level, v, __ATOMIC_RELAXED);
    return v;
}

/* The horizontal pass with 16-bit multiplies and no loss of precision: each 22-bit coefficient
 * k is split as k = kh·2^11 + kl (kh = k >> 11 arithmetic, kl = k & 2047, both fit int16), so
 * Σ p·k = 2^11·Σ p·kh + Σ p·kl with each sum exact in int32 (|Σ p·k| < 2^31 as in Pillow); two
 * _mm256_madd_epi16 (pixel pairs × coefficient pairs) then give the same integer sum as the
 * scalar pass. kx_split lays the coefficients out per output in groups of 4 taps (kuse padded
 * to a multiple of 4 with zeros): per group 16 int16 of kh then 16 of kl, the 128-bit lane 0
 * holding (k_t, k_t+1) four times, lane 1 (k_t+2, k_t+3). */
static void kx_split(int16_t *o, const int32_t *kk, int n, int ksize, int kuse) {
    int ng = (kuse + 3) / 4;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < ng; g++, o += 32)
            for (int j = 0; j < 16; j++) {
                int t = 4 * g + (j >= 8 ? 2 : 0) + (j & 1);
                int32_t k = t < kuse ? kk[(size_t)i * ksize + t] : 0;
                o[j] = (int16_t)(k >> 11);
                o[16 + j] = (int16_t)(k & 2047);
            }
}

/* One row of the horizontal pass for outputs that all have the same number of taps (pad_taps),
 * in ng groups (kx_split; coefficients of output i at kk + i·ksize for the scalar tail), four taps per
 * step: the 16 bytes from the group's first pixel broadcast to both lanes and spread by one
 * shuffle into (R_t, R_t+1, G_t, G_t+1, B_t, B_t+1, 0, 0) as int16 (lane 1: taps t+2, t+3).
 * Each group reads 16 bytes from its first pixel, so outputs whose reads would pass the last
 * column the taps cover (hi) are left to the scalar code, as is the last output (its 4-byte
 * store would pass the row's end). */
__attribute__((target("avx2"))) static inline void hpass_row_avx2(uint8_t *o, const uint8_t *row, int x0,
                                                                   const int *bounds, const int16_t *k16, const int32_t *kk,
                                                                   int n, int ksize, int ng, int hi) {
    const __m256i spread = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                            6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
    const __m256i half2 = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    const __m256i gather = _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0);
    const __m128i pack12 = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);

    /* the int32 sums (R, G, B, 0 in each lane, lanes to be added) of output xx */
#define HSUM(xx, a)                                                                                                    \
    do {                                                                                                               \
        const uint8_t *p_ = row + (size_t)(bounds[2 * (xx)] - x0) * 3;                                                 \
        const __m256i *k_ = (const __m256i *)(k16 + (size_t)(xx) * ng * 32);                                           \
        __m256i ah_ = _mm256_setzero_si256(), al_ = _mm256_setzero_si256();                                            \
        for (int g = 0; g < ng; g++) {                                                                                 \
            __m256i px_ = _mm256_shuffle_epi8(                                                                         \
                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p_ + 12 * g))), spread);                 \
            ah_ = _mm256_add_epi32(ah_, _mm256_madd_epi16(px_, _mm256_loadu_si256(k_ + 2 * g)));                       \
            al_ = _mm256_add_epi32(al_, _mm256_madd_epi16(px_, _mm256_loadu_si256(k_ + 2 * g + 1)));                   \
        }                                                                                                              \
        (a) = _mm256_add_epi32(_mm256_slli_epi32(ah_, 11), al_);                                                       \
    } while (0)
    int xx = 0;
    /* four outputs per step: their sums reduced in pairs (lane 0 one output, lane 1 the other),
     * rounded, packed and written as 12 bytes by one 16-byte store (the last 4 bytes are the next
     * outputs', written next; the step needs 5 more outputs after it for the store to stay in
     * the row) */
    for (; xx + 5 < n; xx += 4) {
        if (3 * bounds[2 * (xx + 3)] + 12 * ng + 4 > 3 * hi) break;
        __m256i a0, a1, a2, a3;
        HSUM(xx, a0);
        HSUM(xx + 1, a1);
        HSUM(xx + 2, a2);
        HSUM(xx + 3, a3);
        __m256i s01 = _mm256_add_epi32(_mm256_permute2x128_si256(a0, a1, 0x20), _mm256_permute2x128_si256(a0, a1, 0x31));
        __m256i s23 = _mm256_add_epi32(_mm256_permute2x128_si256(a2, a3, 0x20), _mm256_permute2x128_si256(a2, a3, 0x31));
        s01 = _mm256_srai_epi32(_mm256_add_epi32(s01, half2), PRECISION_BITS);
        s23 = _mm256_srai_epi32(_mm256_add_epi32(s23, half2), PRECISION_BITS);
        /* lane 0: out 0 then out 2, lane 1: out 1 then out 3, each RGB0 in 4 bytes */
        __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(s01, s23), _mm256_setzero_si256());
        __m128i q = _mm_shuffle_epi8(_mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, gather)), pack12);
        _mm_storeu_si128((__m128i *)(o + 3 * xx), q);
    }
    for (; xx < n - 1; xx++) {
        if (3 * bounds[2 * xx] + 12 * ng + 4 > 3 * hi) break; /* the rest: scalar */
        __m256i a;
        HSUM(xx, a);
        __m128i s = _mm_add_epi32(_mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)), half);
        s = _mm_srai_epi32(s, PRECISION_BITS);
        s = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
        int32_t b = _mm_cvtsi128_si32(s);
        memcpy(o + 3 * xx, &b, 4); /* the 4th byte is the next output's, written next */
    }
#undef HSUM
    if (xx < n) hpass_row(o + 3 * xx, row, x0, bounds + 2 * xx, kk + (size_t)xx * ksize, n - xx, ksize, 0);
}

/* ng (groups of 4 taps) as a constant for the common counts: 1–4 taps, 5–8, 9–12 */
#define HPASS_AVX2(NG)                                                                                             \
    __attribute__((target("avx2"))) static void hpass_avx2_##NG(uint8_t *o, const uint8_t *row, int x0,             \
                                                                 const int *bounds, const int16_t *k16,              \
                                                                 const int32_t *kk, int n, int ksize, int hi) {      \
        hpass_row_avx2(o, row, x0, bounds, k16, kk, n, ksize, NG, hi);                                              \
    }
HPASS_AVX2(1)
HPASS_AVX2(2)
HPASS_AVX2(3)
__attribute__((target("avx2"))) static void hpass_avx2_any(uint8_t *o, const uint8_t *row, int x0, const int *bounds,
                                                           const int16_t *k16, const int32_t *kk, int n, int ksize,
                                                           int ng, int hi) {
    hpass_row_avx2(o, row, x0, bounds, k16, kk, n, ksize, ng, hi);
}

/* The vertical pass with the same split (kx_split's comment): ky_split lays the coefficients out
 * per output row in pairs of taps (ksize rounded up to even with a zero): per pair (t, t+1) one
 * int32 holding (kh_t, kh_t+1) as int16 (tap t in the low half), then one holding (kl_t, kl_t+1),
 * so that a broadcast of either multiplies a pair of rows in one _mm256_madd_epi16. */
static void ky_split(int32_t *o, const int32_t *kk, int n, int ksize) {
    int np = (ksize + 1) / 2;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < np; g++, o += 2) {
            const int32_t *k = kk + (size_t)i * ksize + 2 * g;
            int32_t k0 = k[0], k1 = 2 * g + 1 < ksize ? k[1] : 0;
            o[0] = (int32_t)((uint32_t)(uint16_t)(int16_t)(k0 >> 11) | (uint32_t)(uint16_t)(int16_t)(k1 >> 11) << 16);
            o[1] = (int32_t)((uint32_t)(k0 & 2047) | (uint32_t)(k1 & 2047) << 16);
        }
}

/* One output row of the vertical pass: o[i] = clip((Σ_t r_t[i]·k[t] + 2^21) >> 22), i < n, the
 * rows r_t = tmp + (ymin + t)·tstride, k16 the row's pairs from ky_split, k its coefficients
 * (for the scalar tail). Two rows per step: their bytes interleaved and widened to int16 pairs
 * (r_t[i], r_t+1[i]), each pair multiplied by (kh_t, kh_t+1) and by (kl_t, kl_t+1) in one madd
 * each, kh and kl sums kept apart (2^11·Σ kh-sums + Σ kl-sums at the end, exact as in the
 * horizontal pass). An odd last tap is paired with a zero register (no row past the last tap
 * is read), whose product with kh_t+1 = kl_t+1 = 0 adds nothing. 32 bytes per step, then 16,
 * then the scalar code for the last < 16; the unpacks work within 128-bit lanes and the packs
 * undo their order, so the results come out in place. */
__attribute__((target("avx2"))) static void vpass_row_avx2(uint8_t *o, const uint8_t *tmp, size_t tstride, int ymin,
                                                           int yn, const int32_t *k16, const int32_t *k, int n) {
    const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    const __m256i zero = _mm256_setzero_si256();
    const uint8_t *r0 = tmp + (size_t)ymin * tstride;
    int i = 0;
    /* the int16 pairs of rows a, b (b zero for an odd last tap) at bytes 0-7|16-23 (UNPACK lo) or
     * 8-15|24-31 (hi) times the tap pair from t into h0, l0 (bytes 0-3|16-19 or 8-11|24-27) and
     * h1, l1 (the next four of each lane) */
#define VSTEP(UNPACK, a, b, t)                                                                                         \
    do {                                                                                                               \
        __m256i kh_ = _mm256_set1_epi32(k16[t]), kl_ = _mm256_set1_epi32(k16[(t) + 1]);                                 \
        __m256i ab_ = UNPACK(a, b);                                                                                    \
        __m256i p_ = _mm256_unpacklo_epi8(ab_, zero), q_ = _mm256_unpackhi_epi8(ab_, zero);                            \
        h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(p_, kh_));                                                         \
        l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(p_, kl_));                                                         \
        h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(q_, kh_));                                                         \
        l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(q_, kl_));                                                         \
    } while (0)
    /* the 16 sums of one half (UNPACK) of 32 bytes at o + i, rounded, shifted and packed to int16
     * (lane 0: bytes 0-7 or 8-15, lane 1: 16-23 or 24-31) */
#define VHALF(UNPACK, out)                                                                                             \
    do {                                                                                                               \
        __m256i h0 = zero, h1 = zero, l0 = zero, l1 = zero;                                                            \
        const uint8_t *r = r0 + i;                                                                                     \
        int t = 0;                                                                                                     \
        for (; t + 1 < yn; t += 2, r += 2 * tstride)                                                                   \
            VSTEP(UNPACK, _mm256_loadu_si256((const __m256i *)r), _mm256_loadu_si256((const __m256i *)(r + tstride)), \
                  t);                                                                                                  \
        if (t < yn) VSTEP(UNPACK, _mm256_loadu_si256((const __m256i *)r), zero, t);                                    \
        h0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h0, 11), l0), half);                                  \
        h1 = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h1, 11), l1), half);                                  \
        (out) = _mm256_packs_epi32(_mm256_srai_epi32(h0, PRECISION_BITS), _mm256_srai_epi32(h1, PRECISION_BITS));      \
    } while (0)
    /* two passes over the taps per 32 bytes, one per half: 4 accumulators each, so that all stay
     * in registers */
    for (; i + 32 <= n; i += 32) {
        __m256i lo, hi;
        VHALF(_mm256_unpacklo_epi8, lo);
        VHALF(_mm256_unpackhi_epi8, hi);
        _mm256_storeu_si256((__m256i *)(o + i), _mm256_packus_epi16(lo, hi));
    }
#undef VHALF
#undef VSTEP
    if (i + 16 <= n) {
        const __m128i half1 = _mm256_castsi256_si128(half), zero1 = _mm_setzero_si128();
        __m128i h0 = zero1, h1 = zero1, h2 = zero1, h3 = zero1, l0 = zero1, l1 = zero1, l2 = zero1, l3 = zero1;
        const uint8_t *r = r0 + i;
        for (int t = 0; t < yn; t += 2, r += 2 * tstride) {
            __m128i a = _mm_loadu_si128((const __m128i *)r);
            __m128i b = t + 1 < yn ? _mm_loadu_si128((const __m128i *)(r + tstride)) : zero1;
            __m128i kh = _mm_set1_epi32(k16[t]), kl = _mm_set1_epi32(k16[t + 1]);
            __m128i lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);
            __m128i p0 = _mm_unpacklo_epi8(lo, zero1), p1 = _mm_unpackhi_epi8(lo, zero1);
            __m128i p2 = _mm_unpacklo_epi8(hi, zero1), p3 = _mm_unpackhi_epi8(hi, zero1);
            h0 = _mm_add_epi32(h0, _mm_madd_epi16(p0, kh));
            l0 = _mm_add_epi32(l0, _mm_madd_epi16(p0, kl));
            h1 = _mm_add_epi32(h1, _mm_madd_epi16(p1, kh));
            l1 = _mm_add_epi32(l1, _mm_madd_epi16(p1, kl));
            h2 = _mm_add_epi32(h2, _mm_madd_epi16(p2, kh));
            l2 = _mm_add_epi32(l2, _mm_madd_epi16(p2, kl));
            h3 = _mm_add_epi32(h3, _mm_madd_epi16(p3, kh));
            l3 = _mm_add_epi32(l3, _mm_madd_epi16(p3, kl));
        }
#define VSUM(h, l) _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(h, 11), l), half1), PRECISION_BITS)
        __m128i p01 = _mm_packs_epi32(VSUM(h0, l0), VSUM(h1, l1));
        __m128i p23 = _mm_packs_epi32(VSUM(h2, l2), VSUM(h3, l3));
#undef VSUM
        _mm_storeu_si128((__m128i *)(o + i), _mm_packus_epi16(p01, p23));
        i += 16;
    }
    for (; i < n; i++) {
        int32_t s = 1 << (PRECISION_BITS - 1);
        for (int t = 0; t < yn; t++) s += tmp[(size_t)(ymin + t) * tstride + i] * k[t];
        o[i] = clip8(s);
    }
}

/* The two passes: outputs (dh, dw) at rows oy.. and columns ox.. of the resize whose outputs are
 * spaced (scale_y, scale_x) apart starting at (in0_y, in0_x). */
static void resample(image_dec *d, uint8_t *dst, int dh, int dw, const image_view *s, double in0_y, double scale_y,
                     int oy, double in0_x, double scale_x, int ox, int interp) {
    int kx = filter_ksize(scale_x, interp), ky = filter_ksize(scale_y, interp);
    grow_or_die(&d->kx, &d->kx_cap, (size_t)dw * kx * sizeof(int32_t));
    grow_or_die(&d->ky, &d->ky_cap, (size_t)dh * ky * sizeof(int32_t));
    grow_or_die(&d->bx, &d->bx_cap, (size_t)dw * 2 * sizeof(int));
    grow_or_die(&d->by, &d->by_cap, (size_t)dh * 2 * sizeof(int));
    coeffs(d, s->w, in0_x, scale_x, ox, dw, interp, kx, d->bx, d->kx);
    coeffs(d, s->h, in0_y, scale_y, oy, dh, interp, ky, d->by, d->ky);
    int yfirst = d->by[0], ylast = d->by[2 * (dh - 1)] + d->by[2 * (dh - 1) + 1];
    int nrows = ylast - yfirst;
    if (nrows < 1) nrows = 1;
    size_t tstride = (size_t)dw * 3;
    grow_or_die(&d->tmp, &d->tmp_cap, tstride * nrows);
    grow_or_die(&d->acc, &d->acc_cap, tstride * sizeof(int32_t));

    /* horizontal pass over the rows the vertical pass reads; with every output padded to kx taps
     * (pad_taps) the scalar tap loop has a constant count the compiler unrolls; AVX2 pads only to
     * the most taps an output has (kxu: often 3–4 of kx = 5, i.e. one group of 4 instead of two) */
    int simd = __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
    if (simd < 0) simd = image_simd(-1);
    const int kxu = simd ? max_taps(d->bx, dw) : kx, ngx = (kxu + 3) / 4;
    int fixed = pad_taps(d->bx, d->kx, dw, kx, kxu);
    int hi = d->bx[2 * (dw - 1)] + d->bx[2 * (dw - 1) + 1]; /* one past the last column read */
    if (simd && fixed) {
        /* sized from kx's capacity (2·kx_split_len <= 8·dw·kx·4 for kx >= 3), so that it grows only
         * when kx does: once warm, no allocation */
        grow_or_die(&d->kx16, &d->kx16_cap, 8 * d->kx_cap);
        kx_split(d->kx16, d->kx, dw, kx, kxu);
    }
    int ky2 = (ky + 1) / 2 * 2; /* int32 words per output row in ky16 */
    if (simd) {
        /* dh·ky2·4 <= 2·dh·ky·4 <= 2·ky_cap bytes: grows only when ky does (no allocation once warm) */
        grow_or_die(&d->ky16, &d->ky16_cap, 2 * d->ky_cap);
        ky_split(d->ky16, d->ky, dh, ky);
    }
    for (int r = 0; r < ylast - yfirst; r++) {
        const uint8_t *row = s->px + (size_t)(yfirst + r - s->y0) * s->stride;
        uint8_t *o = d->tmp + (size_t)r * tstride;
        if (simd && fixed) {
            switch (ngx) {
            case 1: hpass_avx2_1(o, row, s->x0, d->bx, d->kx16, d->kx, dw, kx, hi); break;
            case 2: hpass_avx2_2(o, row, s->x0, d->bx, d->kx16, d->kx, dw, kx, hi); break;
            case 3: hpass_avx2_3(o, row, s->x0, d->bx, d->kx16, d->kx, dw, kx, hi); break;
            default: hpass_avx2_any(o, row, s->x0, d->bx, d->kx16, d->kx, dw, kx, ngx, hi); break;
            }
            continue;
        }
        switch (fixed ? kx : 0) {
        case 3: hpass_3(o, row, s->x0, d->bx, d->kx, dw); break;
        case 5: hpass_5(o, row, s->x0, d->bx, d->kx, dw); break;
        case 7: hpass_7(o, row, s->x0, d->bx, d->kx, dw); break;
        case 9: hpass_9(o, row, s->x0, d->bx, d->kx, dw); break;
        default: hpass_row(o, row, s->x0, d->bx, d->kx, dw, kx, 0); break;
        }
    }

    /* vertical pass: taps outer, pixels inner (integer sums: the order does not matter) */
    int32_t *acc = d->acc;
    int n = dw * 3;
    for (int yy = 0; yy < dh; yy++) {
        int ymin = d->by[2 * yy] - yfirst, yn = d->by[2 * yy + 1];
        const int32_t *k = d->ky + (size_t)yy * ky;
        if (simd) {
            vpass_row_avx2(dst + (size_t)yy * tstride, d->tmp, tstride, ymin, yn, d->ky16 + (size_t)yy * ky2, k, n);
            continue;
        }
        for (int i = 0; i < n; i++) acc[i] = 1 << (PRECISION_BITS - 1);
        for (int t = 0; t < yn; t++) {
            const uint8_t *r = d->tmp + (size_t)(ymin + t) * tstride;
            int32_t kt = k[t];
            for (int i = 0; i < n; i++) acc[i] += r[i] * kt;
        }
        uint8_t *o = dst + (size_t)yy * tstride;
        for (int i = 0; i < n; i++) o[i] = clip8(acc[i]);
    }
}

void image_resize_u8(image_dec *d, uint8_t *dst, int dh, int dw, const uint8_t *src, int sh, int sw, int interp,
                     const float *box) {
    /* Pillow takes the box as C floats: (double)(x1 − x0) is a float subtraction. */
    float b0 = box ? box[0] : 0.f, b1 = box ? box[1] : 0.f;
    float b2 = box ? box[2] : (float)sw, b3 = box ? box[3] : (float)sh;
    image_view v = {src, sh, sw, 0, 0, (size_t)sw * 3};
    resample(d, dst, dh, dw, &v, b1, (double)(b3 - b1) / dh, 0, b0, (double)(b2 - b0) / dw, 0, interp);
}

void image_resize_window(image_dec *d, uint8_t *dst, int dh, int dw, const image_view *src, int DH, int DW, int oy,
                         int ox, int interp) {
    image_resize_window_box(d, dst, dh, dw, src, DH, DW, oy, ox, interp, NULL);
}

/* The box as Pillow takes it (C floats; NULL: the whole image) → the first output's origin and
 * the spacing of outputs along each axis: in0 = x0, scale = (double)(x1 − x0) / n with a float
 * subtraction (for the whole image exactly w / n, as before boxes). */
static void box_scale(const float *box, int h, int w, int DH, int DW, double *in0_y, double *sc_y, double *in0_x,
                      double *sc_x) {
    float b0 = box ? box[0] : 0.f, b1 = box ? box[1] : 0.f;
    float b2 = box ? box[2] : (float)w, b3 = box ? box[3] : (float)h;
    *in0_x = b0, *in0_y = b1;
    *sc_x = (double)(b2 - b0) / DW;
    *sc_y = (double)(b3 - b1) / DH;
}

void image_resize_window_box(image_dec *d, uint8_t *dst, int dh, int dw, const image_view *src, int DH, int DW, int oy,
                             int ox, int interp, const float *box) {
    double iy, sy, ix, sx;
    box_scale(box, src->h, src->w, DH, DW, &iy, &sy, &ix, &sx);
    resample(d, dst, dh, dw, src, iy, sy, oy, ix, sx, ox, interp);
}

/* First tap and one past the last tap of the outputs o0 .. o0 + n − 1 along one axis (outputs
 * spaced scale apart from in0, as coeffs). */
static void taps_span(int in_size, double in0, double scale, int o0, int n, int interp, int *lo, int *hi) {
    double support = (interp == IMAGE_BICUBIC ? 2.0 : 1.0) * (scale < 1.0 ? 1.0 : scale);
    double c0 = in0 + (o0 + 0.5) * scale, c1 = in0 + (o0 + n - 1 + 0.5) * scale;
    int a = (int)(c0 - support + 0.5), b = (int)(c1 + support + 0.5);
    *lo = a < 0 ? 0 : a;
    *hi = b > in_size ? in_size : b;
}

void image_window_taps(int h, int w, int DH, int DW, int oy, int ox, int dh, int dw, int interp, int r[4]) {
    image_window_taps_box(h, w, DH, DW, oy, ox, dh, dw, interp, NULL, r);
}

void image_window_taps_box(int h, int w, int DH, int DW, int oy, int ox, int dh, int dw, int interp, const float *box,
                           int r[4]) {
    double iy, sy, ix, sx;
    box_scale(box, h, w, DH, DW, &iy, &sy, &ix, &sx);
    taps_span(h, iy, sy, oy, dh, interp, &r[0], &r[1]);
    taps_span(w, ix, sx, ox, dw, interp, &r[2], &r[3]);
}
