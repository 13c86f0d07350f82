/* test_image.c — JPEG decoding and resampling (src/data/image.c) and the augmentation
 * (src/data/augment.c).
 *
 * Against Pillow 9.4 on the same bytes (test/data/image_ref.h5, tools/make_image_reference.py):
 * decode bit-exact (whole, DCT-scaled, partial), resize bit-exact (bilinear and bicubic, with
 * and without a box, windows), augmentation crops exact and float outputs to 1e-5 relative with
 * the draws recomputed in Python from the same counter-based hash; data.dct_scale's crops equal
 * Pillow's draft + resize and stay within a stated bound of the full-size ones. Bad bytes (empty, junk,
 * PNG, truncated) fail cleanly or decode with warnings counted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <jpeglib.h>

#include "alloccount.h"
#include "data/augment.h"
#include "data/image.h"
#include "h5ref.h"
#include "testutil.h"
#include "util/util.h"

#define REF "image_ref.h5"

/* ---- reading test/data/image_ref.h5 ---- */

static uint8_t *h5u8(hid_t g, const char *path, size_t *n, hsize_t *dims) {
    return h5read(g, path, H5T_NATIVE_UINT8, 1, n, dims);
}

static double h5attr_d(hid_t g, const char *name) {
    double v = 0;
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "H5Aopen %s failed", name);
    ck_assert_msg(H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0, "H5Aread %s failed", name);
    H5Aclose(a);
    return v;
}

/* A string attribute (h5py writes variable-length strings) into buf. */
static void h5attr_s(hid_t g, const char *name, char *buf, size_t len) {
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "H5Aopen %s failed", name);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char *s = NULL;
    ck_assert_msg(H5Aread(a, t, &s) >= 0, "H5Aread %s failed", name);
    snprintf(buf, len, "%s", s);
    H5free_memory(s);
    H5Tclose(t);
    H5Aclose(a);
}

/* The bytes of /jpeg/<name>. */
static uint8_t *ref_jpeg(hid_t f, const char *name, size_t *n) {
    char path[4200];
    snprintf(path, sizeof path, "jpeg/%s", name);
    return h5u8(f, path, n, NULL);
}

/* Names of the members of group path (up to 64). */
static int group_names(hid_t f, const char *path, char names[][64]) {
    hid_t g = H5Gopen2(f, path, H5P_DEFAULT);
    ck_assert_msg(g >= 0, "H5Gopen2 %s", path);
    H5G_info_t info;
    ck_assert(H5Gget_info(g, &info) >= 0);
    const hsize_t n = info.nlinks;
    ck_assert(n <= 64);
    for (hsize_t i = 0; i < n; i++)
        ck_assert(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, names[i], 64, H5P_DEFAULT) > 0);
    H5Gclose(g);
    return (int)n;
}

/* ---- JPEGs written by the test itself (libjpeg's encoder, in memory) ---- */

/* A smooth gradient with a little texture, h × w RGB, encoded at quality 90 (4:2:0). *n bytes,
 * malloc'd (by libjpeg's jpeg_mem_dest). */
static uint8_t *encode_jpeg_rst(int h, int w, int restart, unsigned long *n) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    uint8_t *out = NULL;
    jpeg_mem_dest(&c, &out, n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    c.restart_interval = (unsigned)restart;
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    while (c.next_scanline < c.image_height) {
        int y = (int)c.next_scanline;
        for (int x = 0; x < w; x++) {
            row[3 * x] = (uint8_t)(255 * x / (w > 1 ? w - 1 : 1));
            row[3 * x + 1] = (uint8_t)(255 * y / (h > 1 ? h - 1 : 1));
            row[3 * x + 2] = (uint8_t)(128 + 40 * sin(0.3 * x) * cos(0.2 * y));
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return out;
}

static uint8_t *encode_test_jpeg(int h, int w, unsigned long *n) { return encode_jpeg_rst(h, w, 0, n); }

START_TEST(decode_own_jpeg) {
    unsigned long n = 0;
    uint8_t *jpg = encode_test_jpeg(37, 53, &n);
    image_dec *d = image_dec_new();
    ck_assert_ptr_nonnull(d);
    const uint8_t *rgb;
    int h, w, warn;
    char err[ERRLEN] = "";
    ck_assert_msg(image_decode_rgb(d, jpg, n, 1, &rgb, &h, &w, &warn, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(h, 37);
    ck_assert_int_eq(w, 53);
    ck_assert_int_eq(warn, 0);
    /* q90 of a smooth gradient: every pixel within a few levels of what was encoded */
    int maxd = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int r = 255 * x / 52, g = 255 * y / 36;
            maxd = abs(rgb[(y * w + x) * 3] - r) > maxd ? abs(rgb[(y * w + x) * 3] - r) : maxd;
            maxd = abs(rgb[(y * w + x) * 3 + 1] - g) > maxd ? abs(rgb[(y * w + x) * 3 + 1] - g) : maxd;
        }
    ck_assert_int_le(maxd, 12);
    /* header only */
    ck_assert_int_eq(image_read_size(d, jpg, n, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(h, 37);
    ck_assert_int_eq(w, 53);
    /* 1/2 scale: ceil(37 / 2) × ceil(53 / 2) */
    ck_assert_int_eq(image_decode_rgb(d, jpg, n, 2, &rgb, &h, &w, &warn, err, sizeof err), 0);
    ck_assert_int_eq(h, 19);
    ck_assert_int_eq(w, 27);
    ck_assert_int_eq(image_decode_rgb(d, jpg, n, 3, &rgb, &h, &w, &warn, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "denom"));
    image_dec_free(d);
    free(jpg);
}
END_TEST

/* Every kind of bad bytes returns -1 with a message (or decodes with warnings counted), and the
 * decoder stays usable afterwards. */
START_TEST(bad_bytes) {
    unsigned long n = 0;
    uint8_t *jpg = encode_test_jpeg(64, 48, &n);
    image_dec *d = image_dec_new();
    const uint8_t *rgb;
    int h, w, warn;
    char err[ERRLEN];

    ck_assert_int_eq(image_decode_rgb(d, jpg, 0, 1, &rgb, &h, &w, &warn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "empty input") != NULL, "%s", err);

    static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    ck_assert_int_eq(image_decode_rgb(d, png, sizeof png, 1, &rgb, &h, &w, &warn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not a JPEG") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "0x89 0x50") != NULL, "%s", err);

    uint8_t junk[300];
    for (int i = 0; i < 300; i++) junk[i] = (uint8_t)(i * 37 + 11);
    ck_assert_int_eq(image_decode_rgb(d, junk, sizeof junk, 1, &rgb, &h, &w, &warn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not a JPEG") != NULL, "%s", err);

    /* A JPEG cut inside its header: unrecoverable. */
    ck_assert_int_eq(image_decode_rgb(d, jpg, 100, 1, &rgb, &h, &w, &warn, err, sizeof err), -1);
    ck_assert_msg(strlen(err) > 0, "no message");

    /* Cut in the middle of the scan data: libjpeg pads with grey and warns (premature end). */
    ck_assert_int_eq(image_decode_rgb(d, jpg, n * 2 / 3, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
    ck_assert_int_eq(h, 64);
    ck_assert_int_ge(warn, 1);

    /* Scan data replaced by junk after the header: decodes with warnings or fails, never crashes. */
    uint8_t *bad = malloc(n);
    memcpy(bad, jpg, n);
    for (unsigned long i = n / 3; i < n - 2; i++) bad[i] = (uint8_t)(i * 131);
    int rc = image_decode_rgb(d, bad, n, 1, &rgb, &h, &w, &warn, err, sizeof err);
    ck_assert(rc == -1 || warn >= 1);

    /* The decoder still works. */
    ck_assert_int_eq(image_decode_rgb(d, jpg, n, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
    ck_assert_int_eq(warn, 0);
    ck_assert_int_eq(w, 48);
    free(bad);
    image_dec_free(d);
    free(jpg);
}
END_TEST

/* Resampling closed forms: the identity, and a constant image staying constant. */
START_TEST(resize_closed_forms) {
    image_dec *d = image_dec_new();
    enum { H = 23, W = 31 };
    uint8_t src[H * W * 3], dst[H * W * 3], big[57 * 80 * 3];
    for (int i = 0; i < H * W * 3; i++) src[i] = (uint8_t)((i * 97) % 256);
    for (int interp = 0; interp < 2; interp++) {
        image_resize_u8(d, dst, H, W, src, H, W, interp, NULL);
        ck_assert_mem_eq(dst, src, sizeof src);
    }
    memset(src, 77, sizeof src);
    for (int interp = 0; interp < 2; interp++) {
        image_resize_u8(d, big, 57, 80, src, H, W, interp, NULL);
        for (size_t i = 0; i < sizeof big; i++) ck_assert_int_eq(big[i], 77);
        image_resize_u8(d, dst, 5, 7, src, H, W, interp, NULL);
        for (int i = 0; i < 5 * 7 * 3; i++) ck_assert_int_eq(dst[i], 77);
    }
    image_dec_free(d);
}
END_TEST


/* The vertical pass's tap count per output row: yn of each row (image_window_taps_box of a
 * one-row window), counted in seen[ksize][yn] (ksize as the resampler's filter_ksize, capped). */
enum { SEEN_K = 24, SEEN_N = 48 };
static void count_taps(int seen[SEEN_K][SEEN_N], int sh, int sw, int DH, int DW, int oy, int ox, int dh, int dw,
                       int interp, const float *box) {
    double sc = box ? (double)(box[3] - box[1]) / DH : (double)sh / DH;
    int ks = (int)ceil((interp == IMAGE_BICUBIC ? 2.0 : 1.0) * (sc < 1.0 ? 1.0 : sc)) * 2 + 1;
    for (int y = 0; y < dh; y++) {
        int r[4];
        image_window_taps_box(sh, sw, DH, DW, oy + y, ox, 1, dw, interp, box, r);
        int yn = r[1] - r[0];
        if (ks < SEEN_K && yn < SEEN_N) seen[ks][yn]++;
    }
}

/* The AVX2 passes give the scalar passes' bits (image_simd) in two parts.
 * 1. 400 random resizes (sizes 1..300, up- and downscaling to 12x, with and without a box, and
 *    windows of a virtual resize).
 * 2. The vertical pass at every tap count (its 32-byte steps take rows in pairs, an odd last
 *    tap with a zero partner): for each filter, every source height 1..64 to every output height
 *    1..min(2·sh, 40), in turn plain, with a box and as a window (with a box every other time)
 *    of a virtual resize, row lengths 3·dw of 3..120 bytes (32- and 16-byte steps and the
 *    scalar tail). Asserted: rows with every tap count 1..22 for each filter, and at each
 *    ksize 3..11 (ksize = 2·ceil(support) + 1) every count ksize/2 + 1..ksize − 1, odd and even.
 *    Not every count 1..ksize occurs at a given ksize: interior rows span 2·support rows
 *    (ksize − 3 to ksize − 1 taps; ksize only by rounding), rows at the edges more than
 *    support, and fewer taps come only from sources with fewer rows, i.e. at the smallest
 *    ksize (3 bilinear, 5 bicubic), where sh = 1 gives one tap.
 * Each resize reads an exactly sized source buffer (the vector loads must stay inside it), of
 * random pixels (the bicubic overshoot exercises the clipping). Skipped where the CPU has no
 * AVX2. */
START_TEST(simd_matches_scalar) {
    if (image_simd(1) == 0) {
        printf("  simd_matches_scalar: no AVX2 on this CPU, skipped\n");
        return;
    }
    image_dec *d = image_dec_new();
    uint64_t r = 26;
    long compared = 0;
    for (int it = 0; it < 400; it++) {
        int sh = 1 + (int)(seed_mix(r, 1) % 300), sw = 1 + (int)(seed_mix(r, 2) % 300);
        int dh = 1 + (int)(seed_mix(r, 3) % 300), dw = 1 + (int)(seed_mix(r, 4) % 300);
        if (it % 3 == 0) { /* strong downscaling: large kernels */
            dh = 1 + sh / (1 + (int)(seed_mix(r, 5) % 12));
            dw = 1 + sw / (1 + (int)(seed_mix(r, 6) % 12));
        }
        int interp = it % 2;
        uint8_t *src = malloc((size_t)sh * sw * 3), *a = malloc((size_t)dh * dw * 3), *b = malloc((size_t)dh * dw * 3);
        for (size_t i = 0; i < (size_t)sh * sw * 3; i++) src[i] = (uint8_t)(seed_mix(r, 100 + i) >> 56);
        float box[4] = {0.37f * (float)(seed_mix(r, 7) % 4), 0.5f * (float)(seed_mix(r, 8) % 3), (float)sw - 0.25f,
                        (float)sh - 0.75f};
        int use_box = it % 4 == 1 && sw > 3 && sh > 3;
        int windowed = it % 4 == 3;
        for (int lvl = 0; lvl < 2; lvl++) {
            ck_assert_int_eq(image_simd(lvl), lvl);
            uint8_t *o = lvl ? b : a;
            if (windowed) {
                /* the window (dh, dw) at (oy, ox) of a virtual resize to (DH, DW) */
                int DH = dh + (int)(seed_mix(r, 9) % 200), DW = dw + (int)(seed_mix(r, 10) % 200);
                int oy = (int)(seed_mix(r, 11) % (DH - dh + 1)), ox = (int)(seed_mix(r, 12) % (DW - dw + 1));
                image_view v = {src, sh, sw, 0, 0, (size_t)sw * 3};
                image_resize_window(d, o, dh, dw, &v, DH, DW, oy, ox, interp);
            } else {
                image_resize_u8(d, o, dh, dw, src, sh, sw, interp, use_box ? box : NULL);
            }
        }
        ck_assert_msg(memcmp(a, b, (size_t)dh * dw * 3) == 0, "resize %d x %d -> %d x %d (filter %d, box %d, window %d): AVX2 differs from scalar",
                      sh, sw, dh, dw, interp, use_box, windowed);
        compared += (long)dh * dw * 3;
        free(src);
        free(a);
        free(b);
        r = seed_mix(r, 999);
    }

    static int seen[2][SEEN_K][SEEN_N];
    memset(seen, 0, sizeof seen);
    enum { HMAX = 64, DHMAX = 40, YNMAX = 22 };
    uint8_t *src = malloc((size_t)HMAX * 41 * 3), *a = malloc((size_t)DHMAX * 40 * 3), *b = malloc((size_t)DHMAX * 40 * 3);
    long resizes = 0;
    for (int interp = 0; interp < 2; interp++)
        for (int sh = 1; sh <= HMAX; sh++)
            for (int dh = 1; dh <= 2 * sh && dh <= DHMAX; dh++) {
                int mode = (sh + dh) % 3, j = sh * 41 + dh;
                int dw = 1 + (sh * 7 + dh * 3) % 40, sw = 1 + (sh * 5 + dh) % 41;
                uint8_t *s0 = src + (size_t)HMAX * 41 * 3 - (size_t)sh * sw * 3; /* ends at the buffer's end */
                for (size_t i = 0; i < (size_t)sh * sw * 3; i++) s0[i] = (uint8_t)(seed_mix(r, i) >> 56);
                r = seed_mix(r, 7);
                float box[4] = {0.25f * (float)(j % 3), 0.5f * (float)(j % 2), (float)sw, (float)sh - 0.25f * (float)(j % 3)};
                const float *bp = (mode == 1 || (mode == 2 && j % 2)) && sh >= 2 ? box : NULL;
                int DH = dh, DW = dw, oy = 0, ox = 0;
                if (mode == 2) { /* the window (dh, dw) at (oy, ox) of a virtual resize to (DH, DW) */
                    DH = dh + j % 7, DW = dw + j % 5;
                    oy = j % (DH - dh + 1), ox = j % (DW - dw + 1);
                }
                image_view v = {s0, sh, sw, 0, 0, (size_t)sw * 3};
                for (int lvl = 0; lvl < 2; lvl++) {
                    ck_assert_int_eq(image_simd(lvl), lvl);
                    uint8_t *o = lvl ? b : a;
                    if (mode == 2) image_resize_window_box(d, o, dh, dw, &v, DH, DW, oy, ox, interp, bp);
                    else image_resize_u8(d, o, dh, dw, s0, sh, sw, interp, bp);
                }
                ck_assert_msg(memcmp(a, b, (size_t)dh * dw * 3) == 0,
                              "resize %d x %d -> %d x %d (filter %d, box %d, window %d): AVX2 differs from scalar", sh, sw,
                              dh, dw, interp, bp != NULL, mode == 2);
                count_taps(seen[interp], sh, sw, DH, DW, oy, ox, dh, dw, interp, bp);
                compared += (long)dh * dw * 3;
                resizes++;
            }
    free(src);
    free(a);
    free(b);
    for (int interp = 0; interp < 2; interp++) {
        for (int yn = 1; yn <= YNMAX; yn++) {
            int any = 0;
            for (int k = 0; k < SEEN_K; k++) any += seen[interp][k][yn];
            ck_assert_msg(any > 0, "filter %d: no output row with %d taps", interp, yn);
        }
        for (int ks = interp == IMAGE_BICUBIC ? 5 : 3; ks <= 11; ks += 2)
            for (int yn = ks / 2 + 1; yn < ks; yn++)
                ck_assert_msg(seen[interp][ks][yn] > 0, "filter %d, ksize %d: no output row with %d taps", interp, ks, yn);
    }
    if (getenv("TEST_VERBOSE"))
        for (int interp = 0; interp < 2; interp++)
            for (int ks = 3; ks < SEEN_K; ks += 2) {
                printf("  filter %d ksize %2d, rows per tap count:", interp, ks);
                for (int yn = 0; yn <= ks; yn++) printf(" %d", seen[interp][ks][yn]);
                printf("\n");
            }
    image_simd(1);
    if (getenv("TEST_VERBOSE")) printf("  simd_matches_scalar: %ld bytes equal (%ld tap-count resizes)\n", compared, resizes);
    image_dec_free(d);
}
END_TEST

/* ---- against Pillow (test/data/image_ref.h5) ---- */

/* Every test JPEG decodes to Pillow's RGB bit for bit; junk bytes before EOI decode as the
 * clean file with a warning; the PNG is refused. */
START_TEST(decode_matches_pillow) {
    hid_t f = h5open(REF);
    image_dec *d = image_dec_new();
    char names[64][64], path[4200], err[ERRLEN];
    int n = group_names(f, "decode", names), checked = 0;
    for (int i = 0; i < n; i++) {
        size_t nb, np;
        hsize_t dims[4];
        uint8_t *jpg = ref_jpeg(f, names[i], &nb);
        snprintf(path, sizeof path, "decode/%s", names[i]);
        uint8_t *want = h5u8(f, path, &np, dims);
        const uint8_t *rgb;
        int h, w, warn;
        ck_assert_msg(image_decode_rgb(d, jpg, nb, 1, &rgb, &h, &w, &warn, err, sizeof err) == 0, "%s: %s", names[i], err);
        ck_assert_msg(h == (int)dims[0] && w == (int)dims[1], "%s: %d x %d, Pillow %d x %d", names[i], h, w,
                      (int)dims[0], (int)dims[1]);
        ck_assert_int_eq(warn, 0);
        int ndiff = 0;
        for (size_t k = 0; k < np; k++) ndiff += rgb[k] != want[k];
        ck_assert_msg(ndiff == 0, "%s: %d of %zu bytes differ from Pillow", names[i], ndiff, np);
        checked++;
        free(jpg);
        free(want);
    }
    ck_assert_int_ge(checked, 11);

    size_t nb, np;
    uint8_t *jpg = ref_jpeg(f, "junk_eoi", &nb), *want = h5u8(f, "decode/rgb420", &np, NULL);
    const uint8_t *rgb;
    int h, w, warn;
    ck_assert_int_eq(image_decode_rgb(d, jpg, nb, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
    ck_assert_int_ge(warn, 1);
    ck_assert_mem_eq(rgb, want, np);
    free(jpg);

    /* cut at 2/3: decodes with warnings; the first 16 rows (decoded before the cut) are exact */
    jpg = ref_jpeg(f, "rgb420", &nb);
    ck_assert_int_eq(image_decode_rgb(d, jpg, nb * 2 / 3, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
    ck_assert_int_ge(warn, 1);
    ck_assert_mem_eq(rgb, want, (size_t)16 * w * 3);
    free(jpg);
    free(want);

    jpg = ref_jpeg(f, "png", &nb);
    ck_assert_int_eq(image_decode_rgb(d, jpg, nb, 1, &rgb, &h, &w, &warn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not a JPEG") != NULL, "%s", err);
    free(jpg);
    image_dec_free(d);
    H5Fclose(f);
}
END_TEST

/* DCT-domain scaling equals Pillow's draft mode. */
START_TEST(draft_matches_pillow) {
    hid_t f = h5open(REF);
    image_dec *d = image_dec_new();
    char names[64][64], path[4200], err[ERRLEN];
    int n = group_names(f, "draft", names);
    ck_assert_int_eq(n, 12);
    for (int i = 0; i < n; i++) {
        char name[64];
        memcpy(name, names[i], sizeof name);
        char *us = strrchr(name, '_');
        int denom = atoi(us + 1);
        *us = 0;
        size_t nb, np;
        hsize_t dims[4];
        uint8_t *jpg = ref_jpeg(f, name, &nb);
        snprintf(path, sizeof path, "draft/%s", names[i]);
        uint8_t *want = h5u8(f, path, &np, dims);
        const uint8_t *rgb;
        int h, w, warn;
        ck_assert_int_eq(image_decode_rgb(d, jpg, nb, denom, &rgb, &h, &w, &warn, err, sizeof err), 0);
        ck_assert_int_eq(h, (int)dims[0]);
        ck_assert_int_eq(w, (int)dims[1]);
        ck_assert_msg(memcmp(rgb, want, np) == 0, "%s differs from Pillow's draft", names[i]);
        free(jpg);
        free(want);
    }
    image_dec_free(d);
    H5Fclose(f);
}
END_TEST

/* Partial decodes equal the same pixels of the whole decode, for random rectangles of every
 * test JPEG (4:2:0, 4:2:2, 4:4:4, grey, CMYK, progressive, thin, 1 x 1). */
START_TEST(rect_matches_whole) {
    hid_t f = h5open(REF);
    image_dec *d = image_dec_new();
    char names[64][64], err[ERRLEN];
    int n = group_names(f, "decode", names);
    rng_t r;
    rng_seed(&r, 11);
    for (int i = 0; i < n; i++) {
        size_t nb;
        uint8_t *jpg = ref_jpeg(f, names[i], &nb);
        const uint8_t *rgb;
        int h, w, warn;
        for (int denom = 1; denom <= 8; denom *= 2) { /* 1: image_decode_rect; 2, 4, 8: DCT-scaled */
            ck_assert_int_eq(image_decode_rgb(d, jpg, nb, denom, &rgb, &h, &w, &warn, err, sizeof err), 0);
            uint8_t *full = malloc((size_t)h * w * 3);
            memcpy(full, rgb, (size_t)h * w * 3);
            for (int t = 0; t < (denom == 1 ? 60 : 30); t++) {
                int y0 = (int)rng_below(&r, (uint64_t)h), x0 = (int)rng_below(&r, (uint64_t)w);
                int y1 = y0 + 1 + (int)rng_below(&r, (uint64_t)(h - y0)), x1 = x0 + 1 + (int)rng_below(&r, (uint64_t)(w - x0));
                size_t st;
                int rc = denom == 1 ? image_decode_rect(d, jpg, nb, y0, y1, x0, x1, &rgb, &st, &warn, err, sizeof err)
                                    : image_decode_rect_scaled(d, jpg, nb, denom, y0, y1, x0, x1, &rgb, &st, &warn, err,
                                                               sizeof err);
                ck_assert_msg(rc == 0, "%s", err);
                for (int y = y0; y < y1; y++)
                    ck_assert_msg(memcmp(rgb + (size_t)(y - y0) * st, full + ((size_t)y * w + x0) * 3, (size_t)(x1 - x0) * 3) == 0,
                                  "%s at 1/%d: rows [%d, %d) x [%d, %d): row %d differs", names[i], denom, y0, y1, x0, x1, y);
            }
            size_t st;
            ck_assert_int_eq(image_decode_rect_scaled(d, jpg, nb, denom, 0, h + 1, 0, w, &rgb, &st, &warn, err, sizeof err), -1);
            ck_assert_ptr_nonnull(strstr(err, "outside"));
            free(full);
        }
        size_t st;
        const uint8_t *px;
        ck_assert_int_eq(image_decode_rect_scaled(d, jpg, nb, 3, 0, 1, 0, 1, &px, &st, &warn, err, sizeof err), -1);
        ck_assert_ptr_nonnull(strstr(err, "denom"));
        free(jpg);
    }
    image_dec_free(d);
    H5Fclose(f);
}
END_TEST

START_TEST(resize_matches_pillow) {
    hid_t f = h5open(REF);
    image_dec *d = image_dec_new();
    char names[64][64], path[4200], src[64], err[ERRLEN];
    int n = group_names(f, "resize", names);
    ck_assert_int_ge(n, 13);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "resize/%s", names[i]);
        hid_t g = H5Gopen2(f, path, H5P_DEFAULT);
        h5attr_s(g, "src", src, sizeof src);
        int filt = h5attr(g, "filter");
        float box[4];
        hid_t a = H5Aopen(g, "box", H5P_DEFAULT);
        ck_assert(H5Aread(a, H5T_NATIVE_FLOAT, box) >= 0);
        H5Aclose(a);
        size_t np, nb;
        hsize_t dims[4];
        uint8_t *want = h5u8(g, "out", &np, dims);
        uint8_t *jpg = ref_jpeg(f, src, &nb);
        const uint8_t *rgb;
        int h, w, warn;
        ck_assert_int_eq(image_decode_rgb(d, jpg, nb, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
        uint8_t *got = malloc(np);
        image_resize_u8(d, got, (int)dims[0], (int)dims[1], rgb, h, w, filt, box[0] < 0 ? NULL : box);
        int maxd = 0;
        for (size_t k = 0; k < np; k++) maxd = abs(got[k] - want[k]) > maxd ? abs(got[k] - want[k]) : maxd;
        ck_assert_msg(maxd == 0, "resize %s (%s -> %d x %d, filter %d): max |diff| %d", names[i], src, (int)dims[0],
                      (int)dims[1], filt, maxd);
        free(got);
        free(jpg);
        free(want);
        H5Gclose(g);
    }
    image_dec_free(d);
    H5Fclose(f);
}
END_TEST

/* data.dct_scale's change of pixels: over the crops of the dct cases, the mean and the largest
 * |Δ| between the crop from the DCT-scaled decode and the crop from the full-size one (Pillow's
 * bits without the key), in u8 levels. Measured on image_ref.h5's 19 cases: mean 0.371, max
 * 10 (docs/data.md, DCT scaling); the bounds leave some room. */
#define DCT_MEAN_BOUND 0.5
#define DCT_MAX_BOUND 16

/* Each augmented sample: the draws equal those recomputed in Python, the u8 crop equals Pillow's
 * (resize then crop, or crop then resize for rrc; with attr dct > 1 on the image after Pillow's
 * draft at 1/dct), the float output equals numpy's to 1e-5, and aug_sample (partial decode)
 * gives the same floats as the whole decode. dct cases: aug_dct_denom equals the Python rule's
 * choice, the draws equal those without the key, and the crop stays within DCT_*_BOUND of the
 * full-size decode's. */
START_TEST(augment_matches_reference) {
    hid_t f = h5open(REF);
    image_dec *d = image_dec_new();
    char names[64][64], path[4200], src[64], err[ERRLEN];
    int n = group_names(f, "aug", names), n_out = 0, kinds[4] = {0}, n_dct[9] = {0};
    double dct_sum = 0;
    long dct_n = 0;
    int dct_max = 0;
    ck_assert_int_ge(n, 43);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "aug/%s", names[i]);
        hid_t g = H5Gopen2(f, path, H5P_DEFAULT);
        h5attr_s(g, "jpeg", src, sizeof src);
        aug_cfg c;
        aug_default(&c, h5attr(g, "kind"));
        c.interp = h5attr(g, "interp");
        c.crop = h5attr(g, "crop");
        c.scale_min = h5attr(g, "scale_min");
        c.scale_max = h5attr(g, "scale_max");
        c.eval_resize = h5attr(g, "eval_resize");
        c.lighting = (float)h5attr_d(g, "lighting");
        uint64_t seed = (uint64_t)h5attr(g, "seed"), epoch = (uint64_t)h5attr(g, "epoch"), index = (uint64_t)h5attr(g, "index");
        kinds[c.kind]++;
        size_t nb, np;
        int *want_draws = h5i(g, "draws", NULL);
        float *want_alpha = h5f(g, "alpha", NULL, NULL);
        uint8_t *want_crop = h5u8(g, "crop", &np, NULL);
        uint8_t *jpg = ref_jpeg(f, src, &nb);
        const uint8_t *rgb;
        int h, w, warn;
        ck_assert_int_eq(image_decode_rgb(d, jpg, nb, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
        aug_draw p;
        aug_draw_params(&c, seed, epoch, index, h, w, &p);
        const int want_k = H5Aexists(g, "dct") > 0 ? h5attr(g, "dct") : 0;
        uint8_t *full_crop = NULL;
        if (want_k) { /* the crop without the key, then the draws and the decode with it */
            full_crop = malloc(np);
            image_view v = {rgb, h, w, 0, 0, (size_t)w * 3};
            aug_crop_u8(d, &c, &p, &v, full_crop);
            c.dct_scale = 1;
            aug_draw pk;
            aug_draw_params(&c, seed, epoch, index, h, w, &pk);
            ck_assert_int_eq(memcmp(&p, &pk, sizeof p), 0);
            const int k = aug_dct_denom(&c, &p);
            ck_assert_msg(k == want_k, "aug %s: scale 1/%d, the rule in Python says 1/%d", names[i], k, want_k);
            n_dct[k]++;
            int hk, wk;
            ck_assert_int_eq(image_decode_rgb(d, jpg, nb, k, &rgb, &hk, &wk, &warn, err, sizeof err), 0);
            ck_assert_int_eq(hk, (h + k - 1) / k);
            ck_assert_int_eq(wk, (w + k - 1) / k);
            w = wk, h = hk;
        }
        int got_draws[10] = {p.h, p.w, p.rh, p.rw, p.y0, p.x0, p.ch, p.cw, p.flip, p.tries};
        for (int k = 0; k < 10; k++)
            ck_assert_msg(got_draws[k] == want_draws[k], "aug %s (%s, kind %d): draw %d = %d, Python %d", names[i], src,
                          c.kind, k, got_draws[k], want_draws[k]);
        for (int k = 0; k < 3; k++) ck_assert_close(p.alpha[k], want_alpha[k], 1e-6 * fabs(want_alpha[k]) + 1e-12);
        /* the crop from the whole decode */
        uint8_t *crop = malloc(np);
        image_view v = {rgb, h, w, 0, 0, (size_t)w * 3};
        aug_crop_u8(d, &c, &p, &v, crop);
        int ndiff = 0;
        for (size_t k = 0; k < np; k++) ndiff += crop[k] != want_crop[k];
        ck_assert_msg(ndiff == 0, "aug %s (%s, kind %d): %d bytes of the crop differ from Pillow", names[i], src, c.kind,
                      ndiff);
        if (full_crop) {
            for (size_t k = 0; k < np; k++) {
                int e = abs((int)crop[k] - (int)full_crop[k]);
                dct_sum += e;
                dct_max = e > dct_max ? e : dct_max;
            }
            dct_n += (long)np;
            free(full_crop);
        }
        size_t nout = (size_t)3 * c.crop * c.crop;
        float *out = malloc(nout * sizeof(float)), *out2 = malloc(nout * sizeof(float));
        aug_finish(&c, &p, crop, out);
        htri_t has_out = H5Lexists(g, "out", H5P_DEFAULT);
        if (has_out > 0) {
            float *want = h5f(g, "out", NULL, NULL);
            double rel = rel_l2(out, want, nout);
            ck_assert_msg(rel <= 1e-5, "aug %s: float output relative L2 error %.3g", names[i], rel);
            free(want);
            n_out++;
        }
        /* the whole path with a partial decode */
        aug_draw p2;
        ck_assert_msg(aug_sample(d, &c, seed, epoch, index, jpg, nb, out2, &p2, &warn, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(memcmp(&p, &p2, sizeof p), 0);
        ck_assert_msg(memcmp(out, out2, nout * sizeof(float)) == 0, "aug %s: aug_sample differs from the whole decode",
                      names[i]);
        free(out);
        free(out2);
        free(crop);
        free(jpg);
        free(want_crop);
        free(want_alpha);
        free(want_draws);
        H5Gclose(g);
    }
    ck_assert_int_ge(n_out, 18);
    for (int k = 0; k < 4; k++) ck_assert_int_ge(kinds[k], 1);
    ck_assert_int_ge(n_dct[2], 1);
    ck_assert_int_ge(n_dct[4], 1);
    ck_assert_int_ge(n_dct[8], 1);
    const double dct_mean = dct_sum / (double)dct_n;
    printf("data.dct_scale: |crop - full-size crop| mean %.3f, max %d u8 levels over %ld values\n", dct_mean, dct_max,
           dct_n);
    ck_assert_msg(dct_mean <= DCT_MEAN_BOUND && dct_max <= DCT_MAX_BOUND, "dct_scale: mean |d| %.3f, max %d", dct_mean,
                  dct_max);
    image_dec_free(d);
    H5Fclose(f);
}
END_TEST

/* Restart markers change only the entropy coding: the pixels equal those without them. */
START_TEST(restart_markers) {
    unsigned long n0, n1;
    uint8_t *a = encode_jpeg_rst(75, 101, 0, &n0), *b = encode_jpeg_rst(75, 101, 1, &n1);
    int has_rst = 0;
    for (unsigned long i = 0; i + 1 < n1; i++) has_rst |= b[i] == 0xff && b[i + 1] == 0xd0;
    ck_assert(has_rst);
    image_dec *d = image_dec_new();
    const uint8_t *rgb;
    int h, w, warn;
    char err[ERRLEN];
    ck_assert_int_eq(image_decode_rgb(d, a, n0, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
    uint8_t *first = malloc((size_t)h * w * 3);
    memcpy(first, rgb, (size_t)h * w * 3);
    ck_assert_int_eq(image_decode_rgb(d, b, n1, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
    ck_assert_int_eq(warn, 0);
    ck_assert_mem_eq(rgb, first, (size_t)h * w * 3);
    size_t st;
    ck_assert_int_eq(image_decode_rect(d, b, n1, 40, 60, 30, 90, &rgb, &st, &warn, err, sizeof err), 0);
    for (int y = 40; y < 60; y++) ck_assert_mem_eq(rgb + (size_t)(y - 40) * st, first + ((size_t)y * w + 30) * 3, 60 * 3);
    free(first);
    free(a);
    free(b);
    image_dec_free(d);
}
END_TEST

/* ---- the draws ---- */

/* Over 1e5 samples of AUG_SCALE on a 360 x 480 image: S uniform on {256..480} (chi-square, 224
 * degrees of freedom), flip rate 1/2 and crop offsets uniform (±3σ), α ~ N(0, 0.1²). */
START_TEST(scale_draw_statistics) {
    enum { N = 100000, NS = 480 - 256 + 1 };
    aug_cfg c;
    aug_default(&c, AUG_SCALE);
    static long count[NS];
    memset(count, 0, sizeof count);
    long flips = 0;
    double a1[3] = {0}, a2[3] = {0}, xfrac = 0;
    for (int i = 0; i < N; i++) {
        aug_draw p;
        aug_draw_params(&c, 42, 3, (uint64_t)i, 360, 480, &p);
        ck_assert(p.rh >= 256 && p.rh <= 480);
        ck_assert_int_eq(p.rw, (int)floor(480.0 / 360 * p.rh + 0.5));
        ck_assert(p.y0 >= 0 && p.y0 <= p.rh - 224 && p.x0 >= 0 && p.x0 <= p.rw - 224);
        count[p.rh - 256]++;
        flips += p.flip;
        xfrac += (p.x0 + 0.5) / (p.rw - 224 + 1);
        for (int j = 0; j < 3; j++) {
            a1[j] += p.alpha[j];
            a2[j] += (double)p.alpha[j] * p.alpha[j];
        }
    }
    double e = (double)N / NS, chi2 = 0;
    for (int k = 0; k < NS; k++) chi2 += (count[k] - e) * (count[k] - e) / e;
    /* df = 224: mean 224, sd 21.2 */
    ck_assert_msg(chi2 < 224 + 5 * 21.2 && chi2 > 224 - 5 * 21.2, "chi-square of S %.1f", chi2);
    double sd_flip = sqrt(N * 0.25);
    ck_assert_msg(fabs(flips - N / 2.0) <= 3 * sd_flip, "flips %ld of %d", flips, N);
    ck_assert_msg(fabs(xfrac / N - 0.5) <= 3 * sqrt(1.0 / 12 / N), "crop column mean fraction %.4f", xfrac / N);
    for (int j = 0; j < 3; j++) {
        double mean = a1[j] / N, sd = sqrt(a2[j] / N - mean * mean);
        ck_assert_msg(fabs(mean) <= 3 * 0.1 / sqrt(N), "alpha[%d] mean %.5f", j, mean);
        ck_assert_msg(fabs(sd - 0.1) <= 3 * 0.1 / sqrt(2.0 * N), "alpha[%d] sd %.5f", j, sd);
    }
}
END_TEST

/* AUG_RRC on a 1000 x 1000 image: among crops of area fraction below 1/2 (which always fit, so
 * the first try is taken), the area fraction is uniform on [0.08, 0.5) and log(w/h) uniform on
 * [log 3/4, log 4/3] (chi-square, 10 bins each); flips 1/2; a 5000 x 20 image always falls back
 * to torchvision's central crop h x round(4/3 h). */
START_TEST(rrc_draw_statistics) {
    enum { N = 100000, B = 10 };
    aug_cfg c;
    aug_default(&c, AUG_RRC);
    long area_bins[B] = {0}, ar_bins[B] = {0}, m = 0, flips = 0;
    double l0 = log(3.0 / 4.0), l1 = log(4.0 / 3.0);
    for (int i = 0; i < N; i++) {
        aug_draw p;
        aug_draw_params(&c, 7, 0, (uint64_t)i, 1000, 1000, &p);
        ck_assert(p.tries >= 1 && p.tries <= 10);
        ck_assert(p.y0 >= 0 && p.y0 + p.ch <= 1000 && p.x0 >= 0 && p.x0 + p.cw <= 1000);
        ck_assert(p.alpha[0] == 0.f);
        flips += p.flip;
        double frac = (double)p.ch * p.cw / 1e6;
        if (frac >= 0.5 || p.tries != 1) continue;
        m++;
        int ka = (int)((frac - 0.08) / (0.42 / B)), kr = (int)((log((double)p.cw / p.ch) - l0) / ((l1 - l0) / B));
        area_bins[ka < 0 ? 0 : ka >= B ? B - 1 : ka]++;
        ar_bins[kr < 0 ? 0 : kr >= B ? B - 1 : kr]++;
    }
    ck_assert_int_gt(m, N / 3);
    double chi_a = 0, chi_r = 0, e = (double)m / B;
    for (int k = 0; k < B; k++) {
        chi_a += (area_bins[k] - e) * (area_bins[k] - e) / e;
        chi_r += (ar_bins[k] - e) * (ar_bins[k] - e) / e;
    }
    /* df = 9: mean 9, sd 4.2 */
    ck_assert_msg(chi_a < 9 + 5 * 4.2, "area chi-square %.1f", chi_a);
    ck_assert_msg(chi_r < 9 + 5 * 4.2, "log-aspect chi-square %.1f", chi_r);
    ck_assert_msg(fabs(flips - N / 2.0) <= 3 * sqrt(N * 0.25), "flips %ld", flips);
    aug_draw p;
    aug_draw_params(&c, 7, 0, 5, 20, 5000, &p);
    ck_assert_int_eq(p.tries, 0);
    ck_assert_int_eq(p.ch, 20);
    ck_assert_int_eq(p.cw, 27);
    ck_assert_int_eq(p.x0, (5000 - 27) / 2);
}
END_TEST

/* Draws are a pure function of (seed, epoch, index): equal when all three are, different when
 * any one differs. */
START_TEST(draws_deterministic) {
    aug_cfg c;
    aug_default(&c, AUG_SCALE);
    aug_draw a, b;
    for (int i = 0; i < 1000; i++) {
        aug_draw_params(&c, 5, 2, (uint64_t)i, 375, 500, &a);
        aug_draw_params(&c, 5, 2, (uint64_t)i, 375, 500, &b);
        ck_assert_int_eq(memcmp(&a, &b, sizeof a), 0);
        aug_draw_params(&c, 5, 2, (uint64_t)i + 1, 375, 500, &b);
        ck_assert(a.alpha[0] != b.alpha[0]);
        aug_draw_params(&c, 5, 3, (uint64_t)i, 375, 500, &b);
        ck_assert(a.alpha[0] != b.alpha[0]);
        aug_draw_params(&c, 6, 2, (uint64_t)i, 375, 500, &b);
        ck_assert(a.alpha[0] != b.alpha[0]);
    }
    aug_cfg e;
    aug_default(&e, AUG_EVAL);
    aug_draw_params(&e, 5, 2, 1, 375, 500, &a);
    aug_draw_params(&e, 9, 8, 7, 375, 500, &b);
    ck_assert_int_eq(memcmp(&a, &b, sizeof a), 0);
    /* torchvision Resize(256) + CenterCrop(224) of 500 x 375 (w x h): 341 x 256, offsets
     * round(117 / 2) = 58 (half to even), round(32 / 2) = 16 */
    ck_assert_int_eq(a.rh, 256);
    ck_assert_int_eq(a.rw, 341);
    ck_assert_int_eq(a.x0, 58);
    ck_assert_int_eq(a.y0, 16);
    ck_assert_int_eq(a.flip, 0);
}
END_TEST

/* Extreme aspect (5000 x 20 and 20 x 5000, a 1 x 1): AUG_SCALE at the paper's settings makes a
 * virtual resize of up to 120,000 columns; only the crop's window is made, so memory stays
 * small, and once warm no sample allocates anything of ours (libjpeg's own per-image pools
 * are returned: nothing outstanding). */
/* data.dct_scale on a large image (1200 × 1600): every kind picks a scale > 1 for some samples,
 * and once warm no sample allocates anything of ours (libjpeg's pools only, as above). */
START_TEST(dct_scale_large_and_allocation) {
    unsigned long nb;
    uint8_t *jpg = encode_test_jpeg(1200, 1600, &nb);
    image_dec *d = image_dec_new();
    float *out = malloc((size_t)3 * 224 * 224 * sizeof(float));
    char err[ERRLEN];
    int warn;
    const int kinds[3] = {AUG_SCALE, AUG_RRC, AUG_EVAL};
    aug_cfg c[3];
    for (int k = 0; k < 3; k++) {
        aug_default(&c[k], kinds[k]);
        c[k].dct_scale = 1;
        for (int i = 0; i < 4; i++)
            ck_assert_msg(aug_sample(d, &c[k], 1, 0, (uint64_t)i, jpg, nb, out, NULL, &warn, err, sizeof err) == 0, "%s", err);
    }
    alloc_count = 0;
    alloc_largest = 0;
    alloc_outstanding = 0;
    alloc_armed = 1;
    long samples = 0, failed = 0, scaled[3] = {0};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 8; i++) {
            aug_draw p;
            failed += aug_sample(d, &c[k], 1, 1, (uint64_t)i, jpg, nb, out, &p, &warn, err, sizeof err) != 0;
            scaled[k] += aug_dct_denom(&c[k], &p) > 1;
            samples++;
        }
    alloc_armed = 0;
    ck_assert_int_eq(failed, 0);
    for (int k = 0; k < 3; k++) ck_assert_msg(scaled[k] > 0, "kind %d: no sample decoded at a reduced scale", kinds[k]);
    ck_assert_int_le(alloc_count, 10 * samples);
    ck_assert_int_eq(alloc_outstanding, 0);
    ck_assert_msg(alloc_largest < (1 << 20), "an allocation of %zu bytes", alloc_largest);
    free(out);
    free(jpg);
    image_dec_free(d);
}
END_TEST

START_TEST(extreme_aspect_and_allocation) {
    unsigned long nw, nt, n1;
    uint8_t *wide = encode_test_jpeg(20, 5000, &nw), *tall = encode_test_jpeg(5000, 20, &nt), *one = encode_test_jpeg(1, 1, &n1);
    image_dec *d = image_dec_new();
    aug_cfg c;
    aug_default(&c, AUG_SCALE);
    float *out = malloc((size_t)3 * 224 * 224 * sizeof(float));
    char err[ERRLEN];
    int warn;
    const uint8_t *jp[3] = {wide, tall, one};
    unsigned long nb[3] = {nw, nt, n1};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 4; i++)
            ck_assert_msg(aug_sample(d, &c, 1, 0, (uint64_t)i, jp[k], nb[k], out, NULL, &warn, err, sizeof err) == 0, "%s", err);
    alloc_count = 0;
    alloc_largest = 0;
    alloc_outstanding = 0;
    alloc_armed = 1;
    /* (no ck_assert while armed: Check's bookkeeping allocates) */
    long samples = 0, failed = 0, bad_values = 0, narrow = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 10; i++) {
            aug_draw p;
            failed += aug_sample(d, &c, 1, 1, (uint64_t)i, jp[k], nb[k], out, &p, &warn, err, sizeof err) != 0;
            samples++;
            narrow += k == 0 && p.rw < 256 * 250;
            for (int j = 0; j < 3 * 224 * 224; j++) bad_values += !(isfinite(out[j]) && fabsf(out[j]) < 3.f);
        }
    alloc_armed = 0;
    ck_assert_int_eq(failed, 0);
    ck_assert_int_eq(narrow, 0);
    ck_assert_int_eq(bad_values, 0);
    /* libjpeg's pools: 8 blocks per image (measured), nothing of ours */
    ck_assert_int_le(alloc_count, 10 * samples);
    if (getenv("TEST_VERBOSE"))
        printf("  %ld samples: %ld allocations (libjpeg's pools), largest %zu bytes, outstanding %ld\n", samples,
               alloc_count, alloc_largest, alloc_outstanding);
    ck_assert_int_eq(alloc_outstanding, 0);
    ck_assert_msg(alloc_largest < (1 << 20), "an allocation of %zu bytes", alloc_largest);
    free(out);
    free(wide);
    free(tall);
    free(one);
    image_dec_free(d);
}
END_TEST

/* aug_source_rect is the decode aug_sample does (tools/bench_data.c times it alone): closed
 * forms — rrc at 1/1 the box itself; evaluation of a 375 × 500 image (resize 256 × 341, offsets
 * 16 and 58) the span of Pillow's taps, output row i centred at (i + 0.5) · 375/256 with support
 * 375/256 (bilinear) or twice that (bicubic): rows [int(16.5 · s − S + 0.5), int(239.5 · s + S
 * + 0.5)) = [23, 352) bilinear, [21, 354) bicubic, columns [84, 414) and [83, 416) likewise —
 * and, for every kind with and without data.dct_scale on a 375 × 500 and a 1200 × 1600 image:
 * the rect lies in the 1/k image; decoding only it (image_decode_rect_scaled) and then
 * aug_crop_u8 + aug_finish gives aug_sample's floats bit for bit; and the crop does not read
 * outside it (every pixel outside replaced, the crop of the whole decode is unchanged). */
START_TEST(source_rect_is_what_sample_decodes) {
    aug_cfg c;
    aug_draw p;
    int r[4];
    for (int bicubic = 0; bicubic <= 1; bicubic++) {
        aug_default(&c, AUG_EVAL);
        c.interp = bicubic ? IMAGE_BICUBIC : IMAGE_BILINEAR;
        aug_draw_params(&c, 1, 0, 0, 375, 500, &p);
        aug_source_rect(&c, &p, 1, r);
        const int want[2][4] = {{23, 352, 84, 414}, {21, 354, 83, 416}};
        for (int j = 0; j < 4; j++) ck_assert_int_eq(r[j], want[bicubic][j]);
    }
    aug_default(&c, AUG_RRC);
    for (int i = 0; i < 20; i++) {
        aug_draw_params(&c, 1, 0, (uint64_t)i, 375, 500, &p);
        aug_source_rect(&c, &p, 1, r);
        ck_assert_int_eq(r[0], p.y0);
        ck_assert_int_eq(r[1], p.y0 + p.ch);
        ck_assert_int_eq(r[2], p.x0);
        ck_assert_int_eq(r[3], p.x0 + p.cw);
    }

    const int sizes[2][2] = {{375, 500}, {1200, 1600}};
    const struct {
        int kind, interp;
    } kinds[5] = {{AUG_SCALE, IMAGE_BICUBIC}, {AUG_SCALE, IMAGE_BILINEAR}, {AUG_RRC, IMAGE_BILINEAR},
                  {AUG_EVAL, IMAGE_BILINEAR}, {AUG_NONE, IMAGE_BICUBIC}};
    image_dec *d = image_dec_new();
    const size_t nout = (size_t)3 * 224 * 224;
    float *want = malloc(nout * sizeof(float)), *got = malloc(nout * sizeof(float));
    uint8_t *crop = malloc(nout), *crop2 = malloc(nout);
    char err[ERRLEN];
    int warn, scaled = 0, partial = 0, n = 0;
    for (int s = 0; s < 2; s++) {
        unsigned long nb;
        uint8_t *jpg = encode_test_jpeg(sizes[s][0], sizes[s][1], &nb);
        for (int kd = 0; kd < 5; kd++)
            for (int dct = 0; dct <= 1; dct++)
                for (int i = 0; i < 4; i++) {
                    aug_default(&c, kinds[kd].kind);
                    c.interp = kinds[kd].interp;
                    c.dct_scale = dct;
                    ck_assert_msg(aug_sample(d, &c, 3, 1, (uint64_t)i, jpg, nb, want, &p, &warn, err, sizeof err) == 0,
                                  "%s", err);
                    const int k = aug_dct_denom(&c, &p), hk = (p.h + k - 1) / k, wk = (p.w + k - 1) / k;
                    aug_source_rect(&c, &p, k, r);
                    ck_assert(0 <= r[0] && r[0] < r[1] && r[1] <= hk && 0 <= r[2] && r[2] < r[3] && r[3] <= wk);
                    scaled += k > 1;
                    partial += (long)(r[1] - r[0]) * (r[3] - r[2]) < (long)hk * wk;
                    n++;
                    /* the rect alone, decoded, then crop and finish: aug_sample's floats */
                    const uint8_t *px;
                    size_t stride;
                    ck_assert(image_decode_rect_scaled(d, jpg, nb, k, r[0], r[1], r[2], r[3], &px, &stride, &warn, err,
                                                       sizeof err) == 0);
                    image_view v = {px, hk, wk, r[0], r[2], stride};
                    aug_crop_u8(d, &c, &p, &v, crop);
                    aug_finish(&c, &p, crop, got);
                    ck_assert_msg(memcmp(got, want, nout * sizeof(float)) == 0,
                                  "%d x %d, kind %d, interp %d, dct %d, sample %d: the rect's decode differs from aug_sample",
                                  p.h, p.w, c.kind, c.interp, dct, i);
                    /* nothing outside the rect is read */
                    const uint8_t *rgb;
                    int h2, w2;
                    ck_assert(image_decode_rgb(d, jpg, nb, k, &rgb, &h2, &w2, &warn, err, sizeof err) == 0);
                    ck_assert_int_eq(h2, hk);
                    ck_assert_int_eq(w2, wk);
                    uint8_t *img = malloc((size_t)hk * wk * 3);
                    memcpy(img, rgb, (size_t)hk * wk * 3);
                    image_view whole = {img, hk, wk, 0, 0, (size_t)wk * 3};
                    aug_crop_u8(d, &c, &p, &whole, crop);
                    for (int y = 0; y < hk; y++)
                        for (int x = 0; x < wk; x++)
                            if (y < r[0] || y >= r[1] || x < r[2] || x >= r[3])
                                for (int ch = 0; ch < 3; ch++) img[((size_t)y * wk + x) * 3 + ch] ^= 0xA5;
                    aug_crop_u8(d, &c, &p, &whole, crop2);
                    ck_assert_msg(memcmp(crop, crop2, nout) == 0,
                                  "%d x %d, kind %d, dct %d, sample %d: the crop reads outside the rect", p.h, p.w, c.kind,
                                  dct, i);
                    free(img);
                }
        free(jpg);
    }
    /* the cases above include DCT-scaled decodes and rects smaller than the image */
    ck_assert_int_gt(scaled, 0);
    ck_assert_int_gt(partial, n / 2);
    free(want);
    free(got);
    free(crop);
    free(crop2);
    image_dec_free(d);
}
END_TEST

/* aug_finish's AVX2 path gives the scalar table's bits: crops 1..224 (multiples of 8 and not:
 * the tail columns), flip on and off, random lighting α (and none), random mean and std, random
 * pixels in an exactly sized buffer; both outputs prefilled with different bytes (a value left
 * unwritten differs). Each value also equals the closed form (v/255 + Σ_j eigvec[c][j]·α_j·
 * eigval[j] − mean[c]) / std[c] in double to 1e-5 at the flipped position, so a mapping wrong in
 * both paths (channel, flip) fails too. Skipped where the CPU has no AVX2. */
START_TEST(finish_simd_matches_scalar) {
    if (image_simd(1) == 0) {
        printf("  finish_simd_matches_scalar: no AVX2 on this CPU, skipped\n");
        return;
    }
    static const int crops[] = {224, 7, 9, 17, 31, 1, 8, 16, 33, 64};
    uint64_t r = 2026;
    long compared = 0;
    for (size_t ic = 0; ic < sizeof crops / sizeof crops[0]; ic++)
        for (int it = 0; it < 8; it++) {
            const int n = crops[ic];
            aug_cfg c;
            aug_default(&c, AUG_SCALE);
            c.crop = n;
            aug_draw p;
            memset(&p, 0, sizeof p);
            p.flip = it % 2;
            if (it >= 2) /* it 0, 1: no lighting */
                for (int j = 0; j < 3; j++) p.alpha[j] = (float)(((double)(seed_mix(r, 1 + j) >> 11) * 0x1.0p-53 - 0.5) * 0.6);
            if (it >= 4) /* it 0..3: the default mean and std */
                for (int j = 0; j < 3; j++) {
                    c.mean[j] = (float)((double)(seed_mix(r, 4 + j) >> 11) * 0x1.0p-53);
                    c.std[j] = (float)(0.1 + (double)(seed_mix(r, 7 + j) >> 11) * 0x1.0p-53);
                }
            const size_t np = (size_t)n * n * 3;
            uint8_t *in = malloc(np);
            float *a = malloc(np * sizeof(float)), *b = malloc(np * sizeof(float));
            for (size_t i = 0; i < np; i++) in[i] = (uint8_t)(seed_mix(r, 100 + i) >> 56);
            memset(a, 0xa5, np * sizeof(float));
            memset(b, 0x5a, np * sizeof(float));
            ck_assert_int_eq(image_simd(0), 0);
            aug_finish(&c, &p, in, a);
            ck_assert_int_eq(image_simd(1), 1);
            aug_finish(&c, &p, in, b);
            for (size_t i = 0; i < np; i++)
                if (memcmp(&a[i], &b[i], sizeof(float)))
                    ck_abort_msg("crop %d, flip %d, case %d: value %zu (channel %zu, row %zu, column %zu): AVX2 %.9g, "
                                 "scalar %.9g", n, p.flip, it, i, i / ((size_t)n * n), i / n % n, i % n, (double)b[i],
                                 (double)a[i]);
            for (int ch = 0; ch < 3; ch++) {
                double light = 0;
                for (int j = 0; j < 3; j++) light += (double)aug_eigvec[ch][j] * p.alpha[j] * aug_eigval[j];
                for (int y = 0; y < n; y++)
                    for (int x = 0; x < n; x++) {
                        int xs = p.flip ? n - 1 - x : x;
                        double want = (in[((size_t)y * n + xs) * 3 + ch] / 255.0 + light - c.mean[ch]) / c.std[ch];
                        double got = b[((size_t)ch * n + y) * n + x];
                        ck_assert_msg(fabs(got - want) <= 1e-5 * (1 + fabs(want)),
                                      "crop %d, flip %d, case %d: (%d, %d, %d) = %.9g, closed form %.9g", n, p.flip, it,
                                      ch, y, x, got, want);
                    }
            }
            compared += (long)np;
            free(in);
            free(a);
            free(b);
            r = seed_mix(r, 999);
        }
    image_simd(1);
    if (getenv("TEST_VERBOSE")) printf("  finish_simd_matches_scalar: %ld values equal\n", compared);
}
END_TEST

/* image_open + image_decode_rect_scaled_open (the header read once) give image_read_size's size
 * and image_decode_rect_scaled's pixels, stride and warnings on every test JPEG at every denom;
 * errors as the one-call functions (bad bytes refused by image_open with the same messages, a
 * bad denom or a rect outside the image refused by the decode); an open image is abandoned by
 * an error, by another decode or open, and by image_dec_free, after which the decoder still
 * works and nothing stays allocated. */
START_TEST(open_then_decode) {
    hid_t f = h5open(REF);
    image_dec *d = image_dec_new();
    char names[64][64], err[ERRLEN], err2[ERRLEN];
    int n = group_names(f, "decode", names);
    rng_t r;
    rng_seed(&r, 26);
    long compared = 0;
    for (int i = 0; i < n; i++) {
        size_t nb;
        uint8_t *jpg = ref_jpeg(f, names[i], &nb);
        int h, w, ho, wo;
        ck_assert_int_eq(image_read_size(d, jpg, nb, &h, &w, err, sizeof err), 0);
        for (int denom = 1; denom <= 8; denom *= 2) {
            const int hs = (h + denom - 1) / denom, ws = (w + denom - 1) / denom;
            for (int t = 0; t < 6; t++) {
                int y0 = (int)rng_below(&r, (uint64_t)hs), x0 = (int)rng_below(&r, (uint64_t)ws);
                int y1 = y0 + 1 + (int)rng_below(&r, (uint64_t)(hs - y0)), x1 = x0 + 1 + (int)rng_below(&r, (uint64_t)(ws - x0));
                if (t == 0) y0 = x0 = 0, y1 = hs, x1 = ws;
                const uint8_t *rgb, *rgb2;
                size_t st, st2;
                int warn, warn2;
                ck_assert_msg(image_decode_rect_scaled(d, jpg, nb, denom, y0, y1, x0, x1, &rgb, &st, &warn, err, sizeof err) == 0,
                              "%s", err);
                uint8_t *want = malloc((size_t)(y1 - y0) * (x1 - x0) * 3);
                for (int y = y0; y < y1; y++)
                    memcpy(want + (size_t)(y - y0) * (x1 - x0) * 3, rgb + (size_t)(y - y0) * st, (size_t)(x1 - x0) * 3);
                ck_assert_msg(image_open(d, jpg, nb, &ho, &wo, err, sizeof err) == 0, "%s", err);
                ck_assert_int_eq(ho, h);
                ck_assert_int_eq(wo, w);
                ck_assert_msg(image_decode_rect_scaled_open(d, denom, y0, y1, x0, x1, &rgb2, &st2, &warn2, err, sizeof err) == 0,
                              "%s", err);
                ck_assert_uint_eq(st2, st);
                ck_assert_int_eq(warn2, warn);
                for (int y = y0; y < y1; y++)
                    ck_assert_msg(memcmp(rgb2 + (size_t)(y - y0) * st2, want + (size_t)(y - y0) * (x1 - x0) * 3,
                                         (size_t)(x1 - x0) * 3) == 0,
                                  "%s at 1/%d: rows [%d, %d) x [%d, %d): row %d differs", names[i], denom, y0, y1, x0, x1, y);
                compared += (long)(y1 - y0) * (x1 - x0) * 3;
                free(want);
            }
        }
        free(jpg);
    }
    H5Fclose(f);

    unsigned long nj;
    uint8_t *jpg = encode_test_jpeg(64, 48, &nj);
    const uint8_t *rgb;
    size_t st;
    int h, w, warn;
    /* nothing open: at first, after a decode, after an error */
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 1, 0, 1, &rgb, &st, &warn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no JPEG open") != NULL, "%s", err);
    ck_assert_int_eq(image_open(d, jpg, nj, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 64, 0, 48, &rgb, &st, &warn, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 64, 0, 48, &rgb, &st, &warn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no JPEG open") != NULL, "%s", err);
    /* a bad denom or rect: the one-call function's message, the image abandoned */
    ck_assert_int_eq(image_open(d, jpg, nj, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 3, 0, 1, 0, 1, &rgb, &st, &warn, err, sizeof err), -1);
    ck_assert_int_eq(image_decode_rect_scaled(d, jpg, nj, 3, 0, 1, 0, 1, &rgb, &st, &warn, err2, sizeof err2), -1);
    ck_assert_str_eq(err, err2);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 1, 0, 1, &rgb, &st, &warn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no JPEG open") != NULL, "%s", err);
    ck_assert_int_eq(image_open(d, jpg, nj, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 2, 0, 33, 0, 24, &rgb, &st, &warn, err, sizeof err), -1);
    ck_assert_int_eq(image_decode_rect_scaled(d, jpg, nj, 2, 0, 33, 0, 24, &rgb, &st, &warn, err2, sizeof err2), -1);
    ck_assert_str_eq(err, err2);
    ck_assert_msg(strstr(err, "outside") != NULL, "%s", err);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 1, 0, 1, &rgb, &st, &warn, err, sizeof err), -1);
    /* bad bytes: image_open refuses them as image_read_size does */
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    const uint8_t *bad[3] = {jpg, png, jpg};
    const size_t nbad[3] = {0, sizeof png, 100}; /* empty, a PNG, cut inside the header */
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(image_open(d, bad[k], nbad[k], &h, &w, err, sizeof err), -1);
        ck_assert_int_eq(image_read_size(d, bad[k], nbad[k], &h, &w, err2, sizeof err2), -1);
        ck_assert_str_eq(err, err2);
        ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 1, 0, 1, &rgb, &st, &warn, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "no JPEG open") != NULL, "%s", err);
    }
    /* cut in the scan data: opens, decodes with warnings as the one-call function */
    int warn2;
    ck_assert_int_eq(image_decode_rect_scaled(d, jpg, nj * 2 / 3, 1, 0, 64, 0, 48, &rgb, &st, &warn2, err, sizeof err), 0);
    ck_assert_int_eq(image_open(d, jpg, nj * 2 / 3, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 64, 0, 48, &rgb, &st, &warn, err, sizeof err), 0);
    ck_assert_int_ge(warn, 1);
    ck_assert_int_eq(warn, warn2);
    /* an open image abandoned by another open, by a whole decode, by image_read_size */
    unsigned long nj2;
    uint8_t *jpg2 = encode_test_jpeg(37, 53, &nj2);
    ck_assert_int_eq(image_open(d, jpg, nj, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_open(d, jpg2, nj2, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(h, 37);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 37, 0, 53, &rgb, &st, &warn, err, sizeof err), 0);
    ck_assert_uint_eq(st, 53 * 3);
    ck_assert_int_eq(image_open(d, jpg, nj, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_rgb(d, jpg2, nj2, 1, &rgb, &h, &w, &warn, err, sizeof err), 0);
    ck_assert_int_eq(w, 53);
    ck_assert_int_eq(image_open(d, jpg, nj, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_read_size(d, jpg2, nj2, &h, &w, err, sizeof err), 0);
    ck_assert_int_eq(image_decode_rect_scaled_open(d, 1, 0, 1, 0, 1, &rgb, &st, &warn, err, sizeof err), -1);
    /* nothing leaks: every way out of an open image, then freeing a decoder with one open (the
     * decoder's own buffers are at full size from the calls above) */
    alloc_count = 0;
    alloc_largest = 0;
    alloc_outstanding = 0;
    alloc_armed = 1;
    /* (no ck_assert while armed: Check's bookkeeping allocates) */
    int fails = 0;
    for (int it = 0; it < 20; it++) {
        fails += image_open(d, jpg, nj, &h, &w, err, sizeof err) != 0;
        fails += image_decode_rect_scaled_open(d, 2, 3, 20, 5, 17, &rgb, &st, &warn, err, sizeof err) != 0;
        fails += image_open(d, jpg, nj, &h, &w, err, sizeof err) != 0;
        fails += image_open(d, jpg2, nj2, &h, &w, err, sizeof err) != 0;
        fails += image_decode_rect_scaled_open(d, 3, 0, 1, 0, 1, &rgb, &st, &warn, err, sizeof err) != -1;
        fails += image_open(d, jpg, nj, &h, &w, err, sizeof err) != 0;
        fails += image_decode_rect_scaled_open(d, 1, 0, 65, 0, 1, &rgb, &st, &warn, err, sizeof err) != -1;
        fails += image_open(d, jpg, nj, &h, &w, err, sizeof err) != 0;
        fails += image_open(d, png, sizeof png, &h, &w, err, sizeof err) != -1;
        fails += image_open(d, jpg, nj, &h, &w, err, sizeof err) != 0;
        fails += image_decode_rgb(d, jpg, nj, 1, &rgb, &h, &w, &warn, err, sizeof err) != 0;
    }
    const long outstanding_loop = alloc_outstanding;
    image_dec *d2 = image_dec_new();
    fails += d2 == NULL;
    fails += image_open(d2, jpg, nj, &h, &w, err, sizeof err) != 0;
    image_dec_free(d2);
    alloc_armed = 0;
    ck_assert_int_eq(fails, 0);
    ck_assert_int_eq(outstanding_loop, 0);
    ck_assert_int_eq(alloc_outstanding, 0);
    if (getenv("TEST_VERBOSE")) printf("  open_then_decode: %ld bytes equal\n", compared);
    free(jpg);
    free(jpg2);
    image_dec_free(d);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("image");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, decode_own_jpeg);
    tcase_add_test(tc, bad_bytes);
    tcase_add_test(tc, resize_closed_forms);
    tcase_add_test(tc, simd_matches_scalar);
    tcase_add_test(tc, decode_matches_pillow);
    tcase_add_test(tc, draft_matches_pillow);
    tcase_add_test(tc, rect_matches_whole);
    tcase_add_test(tc, resize_matches_pillow);
    tcase_add_test(tc, augment_matches_reference);
    tcase_add_test(tc, restart_markers);
    tcase_add_test(tc, scale_draw_statistics);
    tcase_add_test(tc, rrc_draw_statistics);
    tcase_add_test(tc, draws_deterministic);
    tcase_add_test(tc, extreme_aspect_and_allocation);
    tcase_add_test(tc, dct_scale_large_and_allocation);
    tcase_add_test(tc, source_rect_is_what_sample_decodes);
    tcase_add_test(tc, finish_simd_matches_scalar);
    tcase_add_test(tc, open_then_decode);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(suite()); }
