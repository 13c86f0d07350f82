/* jpegutil.h — writing test JPEGs with libjpeg (test_pack.c, test_jpegload.c): a smooth
 * gradient or a uniform colour, RGB 4:2:0 or 4:4:4, grayscale, CMYK / YCCK, progressive,
 * restart markers, any quality. */
#ifndef DSGD_JPEGUTIL_H
#define DSGD_JPEGUTIL_H

#include <check.h>
#include <jpeglib.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The smooth test pattern at (x, y) of an h × w image: R ramps along x, G along y, B their mean. */
static inline void grad(int x, int y, int w, int h, double rgb[3]) {
    rgb[0] = w > 1 ? 255.0 * x / (w - 1) : 0;
    rgb[1] = h > 1 ? 255.0 * y / (h - 1) : 0;
    rgb[2] = 0.5 * (rgb[0] + rgb[1]);
}

enum { SRC_GRAD, SRC_UNIFORM };

typedef struct {
    int w, h, comps;            /* comps 1 (gray), 3 (RGB), 4 (CMYK written as given) */
    J_COLOR_SPACE jpeg_cs;      /* JCS_YCbCr, JCS_GRAYSCALE, JCS_CMYK or JCS_YCCK */
    int s444, progressive, restart, adobe, quality;
    int pattern;                /* SRC_GRAD or SRC_UNIFORM */
    uint8_t colour[4];          /* SRC_UNIFORM: the value written per component */
} jpeg_spec;

static inline uint8_t *encode(const jpeg_spec *s, unsigned long *n) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    unsigned char *out = NULL;
    *n = 0;
    jpeg_mem_dest(&ci, &out, n);
    ci.image_width = (JDIMENSION)s->w, ci.image_height = (JDIMENSION)s->h, ci.input_components = s->comps;
    ci.in_color_space = s->comps == 1 ? JCS_GRAYSCALE : s->comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_colorspace(&ci, s->jpeg_cs);
    jpeg_set_quality(&ci, s->quality ? s->quality : 95, TRUE);
    if (s->s444) ci.comp_info[0].h_samp_factor = 1, ci.comp_info[0].v_samp_factor = 1;
    if (s->progressive) jpeg_simple_progression(&ci);
    if (s->restart) ci.restart_in_rows = 1;
    if (s->comps == 4) ci.write_Adobe_marker = s->adobe ? TRUE : FALSE;
    jpeg_start_compress(&ci, TRUE);
    uint8_t *row = malloc((size_t)s->w * s->comps);
    while (ci.next_scanline < ci.image_height) {
        const int y = (int)ci.next_scanline;
        for (int x = 0; x < s->w; x++) {
            double g[3];
            grad(x, y, s->w, s->h, g);
            for (int c = 0; c < s->comps; c++)
                row[x * s->comps + c] = s->pattern == SRC_UNIFORM ? s->colour[c] : (uint8_t)lround(s->comps == 1 ? 0.5 * (g[0] + g[1]) : g[c]);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    return out;
}

static inline void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    if (n) ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static inline void write_jpeg(const char *path, const jpeg_spec *s) {
    unsigned long n;
    uint8_t *b = encode(s, &n);
    write_bytes(path, b, n);
    free(b);
}

#endif
