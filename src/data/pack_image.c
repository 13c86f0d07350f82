/* pack_image.c — one image of `dsgd-run --pack` (pack.h): sniff the format, decode (JPEG:
 * image.h; PNG: libpng), shrink to the pack's largest side, encode again (libjpeg). Called by the
 * packing threads of pack.c, one pack_conv each. */
#include "pack_image.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "data/image.h"
#include "util/util.h"

#define PACK_MAX_PIXELS ((size_t)1 << 27) /* largest decoded image held in memory (pixels) */
#define PACK_DCT_MIN_SIDE 32              /* smallest side decoded with DCT scaling (pixels) */

enum { PACK_JPEG = 1, PACK_PNG = 2 };

/* What an image's bytes are, by content: PACK_JPEG, PACK_PNG, or 0 with what (a phrase: "an empty
 * file (0 bytes)", "a GIF image: only JPEG and PNG are packed", "not a JPEG or PNG image (...)"). */
static int pack_sniff(const uint8_t *b, size_t n, char *what, size_t whatlen) {
    if (n == 0) return snprintf(what, whatlen, "an empty file (0 bytes)"), 0;
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return PACK_JPEG;
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return PACK_PNG;
    const char *kind = NULL;
    if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) kind = "a GIF image";
    else if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) kind = "a WebP image";
    else if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) kind = "a TIFF image";
    else if (n >= 14 && b[0] == 'B' && b[1] == 'M') kind = "a BMP image";
    if (kind) return snprintf(what, whatlen, "%s: only JPEG and PNG are packed", kind), 0;
    snprintf(what, whatlen, "not a JPEG or PNG image (%zu bytes, starting", n);
    for (size_t i = 0; i < 4 && i < n; i++) snprintf(what + strlen(what), whatlen - strlen(what), " %02x", b[i]);
    snprintf(what + strlen(what), whatlen - strlen(what), ")");
    return 0;
}

/* The size an h × w image is stored at: unchanged if its largest side is at most max_side, else
 * the largest side = max_side and the other rounded to nearest, at least 1. */
static void pack_target_size(int h, int w, int max_side, int *th, int *tw) {
    *th = h, *tw = w;
    if (h <= max_side && w <= max_side) return;
    if (w >= h) *tw = max_side, *th = (int)((2 * (int64_t)h * max_side + w) / (2 * (int64_t)w));
    else *th = max_side, *tw = (int)((2 * (int64_t)w * max_side + h) / (2 * (int64_t)h));
    if (*th < 1) *th = 1;
    if (*tw < 1) *tw = 1;
}

struct enc_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
};

struct png_msgs {
    char msg[200];
    int warnings;
};

struct pack_conv {
    image_dec *dec;
    uint8_t *px;                 /* decoded PNG (h, w, 3) */
    size_t px_cap;
    png_bytep *rows;
    size_t rows_cap;
    uint8_t *small;              /* the shrunk image (th, tw, 3) */
    size_t small_cap;
    struct jpeg_compress_struct cinfo;
    struct enc_err eerr;
    uint8_t *out;                /* the encoded JPEG */
    size_t out_cap, out_n;
    unsigned char *mem_buf;      /* jpeg_mem_dest's view of out */
    unsigned long mem_size;
    struct png_msgs pm;
};

static void enc_error_exit(j_common_ptr ci) {
    struct enc_err *e = (struct enc_err *)ci->err;
    (*ci->err->format_message)(ci, e->msg);
    longjmp(e->jb, 1);
}

static void enc_emit_message(j_common_ptr ci, int level) { (void)ci, (void)level; }

pack_conv *pack_conv_new(void) {
    pack_conv *c = xcalloc(1, sizeof *c);
    c->dec = image_dec_new();
    if (!c->dec) DIE("pack: out of memory for a JPEG decoder");
    c->cinfo.err = jpeg_std_error(&c->eerr.pub);
    c->eerr.pub.error_exit = enc_error_exit;
    c->eerr.pub.emit_message = enc_emit_message;
    if (setjmp(c->eerr.jb)) DIE("pack: libjpeg cannot create a compressor: %s", c->eerr.msg);
    jpeg_create_compress(&c->cinfo);
    return c;
}

void pack_conv_free(pack_conv *c) {
    if (!c) return;
    image_dec_free(c->dec);
    jpeg_destroy_compress(&c->cinfo);
    free(c->px), free(c->rows), free(c->small), free(c->out);
    free(c);
}

typedef struct {
    const uint8_t *p;
    size_t n, at;
} png_src;

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "truncated PNG (the data ends early)");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}

static void png_error_fn(png_structp png, png_const_charp msg) {
    struct png_msgs *m = png_get_error_ptr(png);
    snprintf(m->msg, sizeof m->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warning_fn(png_structp png, png_const_charp msg) {
    ((struct png_msgs *)png_get_error_ptr(png))->warnings++;
}

/* PNG -> RGB u8 (h, w, 3) in c->px, as Pillow's convert("RGB"): palette expanded, 16-bit
 * channels cut to 8 (libpng: the high byte), grayscale replicated, alpha dropped (not
 * composited). Returns 0, or 1 with why. */
static int decode_png(pack_conv *c, const uint8_t *buf, size_t n, int *h, int *w, int *warnings, char *why, size_t whylen) {
    c->pm.msg[0] = '\0', c->pm.warnings = 0;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c->pm, png_error_fn, png_warning_fn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) DIE("pack: out of memory in libpng");
    png_src src = {buf, n, 0};
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        snprintf(why, whylen, "PNG: %s", c->pm.msg[0] ? c->pm.msg : "libpng failed");
        return 1;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_read_info(png, info);
    png_uint_32 pw = png_get_image_width(png, info), ph = png_get_image_height(png, info);
    if ((size_t)pw * ph > PACK_MAX_PIXELS) {
        snprintf(c->pm.msg, sizeof c->pm.msg, "%u x %u pixels: larger than the %zu pixels packing holds in memory", (unsigned)pw,
                 (unsigned)ph, PACK_MAX_PIXELS);
        png_longjmp(png, 1);
    }
    png_set_expand(png);
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)pw * 3) png_error(png, "unexpected row size after conversion to RGB");
    c->px = xgrow(c->px, &c->px_cap, (size_t)pw * ph * 3, 1);
    c->rows = xgrow(c->rows, &c->rows_cap, ph, sizeof *c->rows);
    for (png_uint_32 r = 0; r < ph; r++) c->rows[r] = c->px + (size_t)r * pw * 3;
    png_read_image(png, c->rows);
    png_destroy_read_struct(&png, &info, NULL);
    *h = (int)ph, *w = (int)pw, *warnings = c->pm.warnings;
    return 0;
}

/* rgb (h, w, 3) -> baseline JPEG, YCbCr 4:2:0, quality, optimised Huffman tables, in c->out. */
static int encode_jpeg(pack_conv *c, const uint8_t *rgb, int h, int w, int quality, char *why, size_t whylen) {
    struct jpeg_compress_struct *ci = &c->cinfo;
    c->out = xgrow(c->out, &c->out_cap, (size_t)h * w * 3 + 65536, 1); /* never outgrown in practice */
    c->mem_buf = c->out, c->mem_size = c->out_cap;
    if (setjmp(c->eerr.jb)) {
        jpeg_abort_compress(ci);
        snprintf(why, whylen, "JPEG encoder: %s", c->eerr.msg);
        return 1;
    }
    jpeg_mem_dest(ci, &c->mem_buf, &c->mem_size);
    ci->image_width = (JDIMENSION)w, ci->image_height = (JDIMENSION)h;
    ci->input_components = 3, ci->in_color_space = JCS_RGB;
    jpeg_set_defaults(ci);
    jpeg_set_quality(ci, quality, TRUE);
    ci->comp_info[0].h_samp_factor = 2, ci->comp_info[0].v_samp_factor = 2; /* 4:2:0 */
    for (int k = 1; k < 3; k++) ci->comp_info[k].h_samp_factor = 1, ci->comp_info[k].v_samp_factor = 1;
    ci->optimize_coding = TRUE;
    ci->dct_method = JDCT_ISLOW;
    jpeg_start_compress(ci, TRUE);
    while (ci->next_scanline < ci->image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)ci->next_scanline * (size_t)w * 3);
        jpeg_write_scanlines(ci, &row, 1);
    }
    jpeg_finish_compress(ci);
    if (c->mem_buf != c->out) { /* libjpeg outgrew our buffer and malloc'ed its own: take it */
        free(c->out);
        c->out = c->mem_buf, c->out_cap = c->mem_size;
    }
    c->out_n = c->mem_size;
    return 0;
}

/* An EOI marker (FF D9) among the last 64 bytes: libjpeg's "premature end of data" warning
 * alone does not tell a cut-off file from a recoverable glitch. */
static int has_eoi(const uint8_t *b, size_t n) {
    for (size_t i = n > 64 ? n - 64 : 0; i + 1 < n; i++)
        if (b[i] == 0xFF && b[i + 1] == 0xD9) return 1;
    return 0;
}

int pack_convert(pack_conv *c, const uint8_t *buf, size_t nbytes, int max_side, int quality, const uint8_t **jpeg,
                 size_t *jpeg_nbytes, int *h, int *w, int *warnings, char *why, size_t whylen) {
    *warnings = 0;
    const int kind = pack_sniff(buf, nbytes, why, whylen);
    if (!kind) return 1;
    const uint8_t *rgb = NULL;
    int sh = 0, sw = 0, th, tw;
    char err[256];
    if (kind == PACK_JPEG) {
        int H, W;
        if (image_read_size(c->dec, buf, nbytes, &H, &W, err, sizeof err)) return snprintf(why, whylen, "JPEG: %s", err), 1;
        pack_target_size(H, W, max_side, &th, &tw);
        /* DCT-domain scaling (1/2, 1/4, 1/8) only while the decoded image stays at least twice the
         * target on both sides, so the antialiased resize below still does the filtering, and at
         * least PACK_DCT_MIN_SIDE pixels: a scaled pixel of a partial 8·d block at the bottom or
         * right edge averages libjpeg's edge padding in, which must stay a small part of the
         * image (a 5000 × 20 image scaled by 1/8 is 3 rows, one of them mostly padding). */
        int denom = 1;
        for (int d = 8; d >= 2 && denom == 1; d /= 2) {
            const int sh = (H + d - 1) / d, sw = (W + d - 1) / d;
            if (sh >= 2 * th && sw >= 2 * tw && sh >= PACK_DCT_MIN_SIDE && sw >= PACK_DCT_MIN_SIDE) denom = d;
        }
        const size_t px = (size_t)((H + denom - 1) / denom) * (size_t)((W + denom - 1) / denom);
        if (px > PACK_MAX_PIXELS)
            return snprintf(why, whylen, "JPEG of %d x %d pixels: larger than packing holds in memory (%zu pixels decoded)", W, H,
                            PACK_MAX_PIXELS), 1;
        if (image_decode_rgb(c->dec, buf, nbytes, denom, &rgb, &sh, &sw, warnings, err, sizeof err))
            return snprintf(why, whylen, "JPEG: %s", err), 1;
        if (*warnings && !has_eoi(buf, nbytes))
            return snprintf(why, whylen, "truncated JPEG: no end-of-image marker (libjpeg: %d warning(s), premature end of data)",
                            *warnings), 1;
    } else {
        if (decode_png(c, buf, nbytes, &sh, &sw, warnings, why, whylen)) return 1;
        rgb = c->px;
        pack_target_size(sh, sw, max_side, &th, &tw);
    }
    if (sh != th || sw != tw) {
        c->small = xgrow(c->small, &c->small_cap, (size_t)th * tw * 3, 1);
        image_resize_u8(c->dec, c->small, th, tw, rgb, sh, sw, IMAGE_BICUBIC, NULL);
        rgb = c->small;
    }
    if (encode_jpeg(c, rgb, th, tw, quality, why, whylen)) return 1;
    *jpeg = c->out, *jpeg_nbytes = c->out_n, *h = th, *w = tw;
    return 0;
}

