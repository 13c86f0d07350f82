/* pack.c — `dsgd-run --pack SRC OUT` (pack.h; docs/data.md "Packing").
 *
 * Rank 0 lists SRC (sorted train class folders -> class index; val by folder or label file),
 * checks and prepares OUT and broadcasts the list; every rank then draws the same per-split
 * permutation from --seed, cuts it into K shards and packs the shards k ≡ rank (mod ranks).
 * Within a rank, worker threads read, decode (src/data/image.h; PNG through libpng), shrink and
 * re-encode (libjpeg) images into a ring of slots, in task order; the rank's main thread is the
 * one writer: it takes the slots in order, names skipped images, prints progress and writes each
 * shard (src/data/shards.h) as <name>.tmp, closes and fsyncs it and links it to its name. Once
 * every rank is done, rank 0 writes OUT/index.h5 the same way: a pack without its index is not
 * complete, and a file with a final name is never half-written.
 *
 * Slots are consumed in task order, so a shard's content and the messages on stderr do not
 * depend on the number of threads; the assignment of shards to ranks does not change a shard,
 * so neither does the number of ranks. Waits are bounded: a worker waits for a free slot in 1 s
 * steps while the writer makes progress, and the writer gives up (exit 1) when no image has been
 * finished for PACK_STALL_S seconds. */
#define _GNU_SOURCE
#include "data/pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "comm/comm.h"
#include "data/image.h"
#include "data/shards.h"
#include "util/util.h"

#define PACK_MAX_FILE ((size_t)256 << 20) /* larger image files are skipped (bytes) */
#define PACK_MAX_PIXELS ((size_t)1 << 27) /* largest decoded image held in memory (pixels) */
#define PACK_STALL_S 600.0
#define PACK_DCT_MIN_SIDE 32              /* smallest side decoded with DCT scaling (pixels) */                /* writer: no image finished for this long -> exit 1 */
#define PACK_SUBSAMPLING "4:2:0"
#define PACK_INTERP "bicubic"

/* ------------------------------------------------------------------------------------------ */
/* One image: sniff, decode (JPEG: image.h; PNG: libpng), shrink, encode (libjpeg).           */

int pack_sniff(const uint8_t *b, size_t n, char *what, size_t whatlen) {
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

void pack_target_size(int h, int w, int max_side, int *th, int *tw) {
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

static void grow_buf(void *p, size_t *cap, size_t need, size_t elem) {
    void **pp = p;
    if (need <= *cap) return;
    size_t n = *cap ? *cap : 4096;
    while (n < need) n *= 2;
    void *q = realloc(*pp, n * elem);
    if (!q) DIE("pack: out of memory (%zu bytes)", n * elem);
    *pp = q;
    *cap = n;
}

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
    (void)msg;
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
    grow_buf(&c->px, &c->px_cap, (size_t)pw * ph * 3, 1);
    grow_buf(&c->rows, &c->rows_cap, ph, sizeof *c->rows);
    for (png_uint_32 r = 0; r < ph; r++) c->rows[r] = c->px + (size_t)r * pw * 3;
    png_read_image(png, c->rows);
    png_destroy_read_struct(&png, &info, NULL);
    *h = (int)ph, *w = (int)pw, *warnings = c->pm.warnings;
    return 0;
}

/* rgb (h, w, 3) -> baseline JPEG, YCbCr 4:2:0, quality, optimised Huffman tables, in c->out. */
static int encode_jpeg(pack_conv *c, const uint8_t *rgb, int h, int w, int quality, char *why, size_t whylen) {
    struct jpeg_compress_struct *ci = &c->cinfo;
    grow_buf(&c->out, &c->out_cap, (size_t)h * w * 3 + 65536, 1); /* never outgrown in practice */
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
        grow_buf(&c->small, &c->small_cap, (size_t)th * tw * 3, 1);
        image_resize_u8(c->dec, c->small, th, tw, rgb, sh, sw, IMAGE_BICUBIC, NULL);
        rgb = c->small;
    }
    if (encode_jpeg(c, rgb, th, tw, quality, why, whylen)) return 1;
    *jpeg = c->out, *jpeg_nbytes = c->out_n, *h = th, *w = tw;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Options.                                                                                    */

typedef struct {
    const char *src, *out, *val_labels;
    int max_side, quality, threads, shards, overwrite, help;
    long shard_images;
    uint64_t seed;
} pack_options;

int pack_requested(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--pack") == 0) return 1;
    return 0;
}

static void pack_usage(FILE *f) {
    fprintf(f,
            "usage: dsgd-run --pack SRC OUT [--max-side 480] [--quality 90] [--threads N]\n"
            "                [--shard-images 10000 | --shards K] [--val-labels FILE] [--seed 1] [--overwrite]\n"
            "       mpiexec -n R dsgd-run --pack ...   (or srun: the ranks share the shards)\n"
            "\n"
            "Packs an ImageFolder tree SRC/train/<wnid>/*, SRC/val/<wnid>/* (or a flat SRC/val/ with\n"
            "SRC/val_labels.txt \"<file> <wnid>\" lines or Kaggle's SRC/LOC_val_solution.csv) into HDF5\n"
            "shards OUT/<split>-<k>-of-<K>.h5 and OUT/index.h5: every image (JPEG or PNG, by content)\n"
            "as RGB, largest side <= --max-side (never enlarged), baseline JPEG 4:2:0 at --quality.\n"
            "\n"
            "options:\n"
            "  --max-side N      largest side of a stored image, pixels (default 480, Jin et al.)\n"
            "  --quality Q       JPEG quality 1..100 (default 90)\n"
            "  --threads N       decode/encode threads per rank (default: the rank's cores)\n"
            "  --shard-images N  images per shard (default 10000: ~0.4-0.5 GB of ImageNet)\n"
            "  --shards K        K shards per split instead (at most one per image)\n"
            "  --val-labels FILE labels of a flat val/ folder (default: SRC/val_labels.txt or\n"
            "                    SRC/LOC_val_solution.csv)\n"
            "  --seed S          seed of the permutation that spreads the images over the shards (default 1)\n"
            "  --overwrite       replace the pack in OUT (only a pack's own files; anything else refuses)\n"
            "\n"
            "exit status: 0 packed (undecodable images are named, counted and skipped), 1 write or\n"
            "system failure, 2 bad input (nothing written). docs: docs/data.md \"Packing\"\n");
}

/* An integer option value in [lo, hi]. */
static int parse_long(const char *opt, const char *s, long lo, long hi, long *v, char *err, size_t errlen) {
    char *end;
    errno = 0;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || x < lo || x > hi)
        return seterr(err, errlen, "%s %s: expected an integer from %ld to %ld", opt, s ? s : "(missing)", lo, hi);
    *v = x;
    return 0;
}

static int parse_options(int argc, char **argv, pack_options *o, char *err, size_t errlen) {
    *o = (pack_options){.max_side = 480, .quality = 90, .shard_images = 10000, .seed = 1};
    const char *pos[2];
    int n_pos = 0, have_si = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--pack")) continue;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) { o->help = 1; continue; }
        if (!strcmp(s, "--overwrite")) { o->overwrite = 1; continue; }
        if (s[0] != '-' || !s[1]) {
            if (n_pos == 2) return seterr(err, errlen, "--pack takes SRC and OUT; '%s' is a third argument", s);
            pos[n_pos++] = s;
            continue;
        }
        static const char *const valued[] = {"--max-side", "--quality", "--threads", "--shard-images", "--shards", "--seed", "--val-labels"};
        int which = -1;
        const char *val = NULL;
        for (int k = 0; k < (int)(sizeof valued / sizeof *valued); k++) {
            size_t l = strlen(valued[k]);
            if (!strncmp(s, valued[k], l) && (s[l] == '\0' || s[l] == '=')) which = k, val = s[l] == '=' ? s + l + 1 : NULL;
        }
        if (which < 0) return seterr(err, errlen, "unknown option '%s' for --pack (see dsgd-run --pack --help)", s);
        if (!val) {
            if (i + 1 >= argc) return seterr(err, errlen, "%s needs a value (see dsgd-run --pack --help)", s);
            val = argv[++i];
        }
        long v = 0;
        int rc = 0;
        switch (which) {
        case 0: rc = parse_long("--max-side", val, 1, 65535, &v, err, errlen), o->max_side = (int)v; break;
        case 1: rc = parse_long("--quality", val, 1, 100, &v, err, errlen), o->quality = (int)v; break;
        case 2: rc = parse_long("--threads", val, 1, 1024, &v, err, errlen), o->threads = (int)v; break;
        case 3: rc = parse_long("--shard-images", val, 1, INT32_MAX, &v, err, errlen), o->shard_images = v, have_si = 1; break;
        case 4: rc = parse_long("--shards", val, 1, 99999, &v, err, errlen), o->shards = (int)v; break;
        case 5: rc = parse_long("--seed", val, 0, LONG_MAX, &v, err, errlen), o->seed = (uint64_t)v; break;
        case 6: o->val_labels = val; break;
        }
        if (rc) return rc;
    }
    if (o->help) return 0;
    if (have_si && o->shards) return seterr(err, errlen, "--shard-images and --shards both given: choose one");
    if (n_pos < 2) return seterr(err, errlen, "--pack needs SRC and OUT (usage: dsgd-run --pack SRC OUT [options]; dsgd-run --pack --help)");
    o->src = pos[0], o->out = pos[1];
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The sources: SRC listed by rank 0, broadcast to every rank.                                */

enum { TRAIN = 0, VAL = 1, N_SPLITS = 2 };
static const char *const split_names[N_SPLITS] = {"train", "val"};

typedef struct {
    int present;
    int64_t n;
    char **rel;       /* (n) path relative to SRC/<split>: "<wnid>/<file>" or "<file>" */
    int16_t *label;   /* (n) */
} split_list;

typedef struct {
    int n_classes;
    char **classes;   /* sorted wnids */
    split_list s[N_SPLITS];
} source_set;

static void sources_free(source_set *ss) {
    for (int c = 0; c < ss->n_classes; c++) free(ss->classes[c]);
    free(ss->classes);
    for (int k = 0; k < N_SPLITS; k++) {
        for (int64_t i = 0; i < ss->s[k].n; i++) free(ss->s[k].rel[i]);
        free(ss->s[k].rel), free(ss->s[k].label);
    }
    memset(ss, 0, sizeof *ss);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct {
    char **v;
    int64_t n, cap;
} strvec;

static void strvec_push(strvec *s, const char *x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = realloc(s->v, (size_t)s->cap * sizeof *s->v);
        if (!s->v) DIE("pack: out of memory listing files");
    }
    s->v[s->n++] = strdup(x);
}

static void strvec_free(strvec *s) {
    for (int64_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* The entries of dir (names not starting with '.'), sorted: directories into dirs, regular
 * files into files (symbolic links followed); anything else is named on stderr and ignored. */
static int list_dir(const char *dir, strvec *dirs, strvec *files, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return seterr(err, errlen, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    char path[PATH_MAX + 256]; /* dir + "/" + d_name */
    while ((errno = 0, e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (strchr(e->d_name, '\n')) {
            closedir(d);
            return seterr(err, errlen, "%s: an entry's name holds a newline; rename it", dir);
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        /* d_type spares a stat() per file (1.28 M of them on a parallel file system); links and
         * file systems that do not fill it in are stat()ed, following the link. */
        int st = 0;
        if (e->d_type == DT_REG) sb.st_mode = S_IFREG;
        else if (e->d_type == DT_DIR) sb.st_mode = S_IFDIR;
        else st = stat(path, &sb);
        if (st != 0) fprintf(stderr, "dsgd-run: ignored %s: %s\n", path, strerror(errno));
        else if (S_ISDIR(sb.st_mode)) { if (dirs) strvec_push(dirs, e->d_name); else fprintf(stderr, "dsgd-run: ignored %s: a directory (not looked into)\n", path); }
        else if (S_ISREG(sb.st_mode)) { if (files) strvec_push(files, e->d_name); else fprintf(stderr, "dsgd-run: ignored %s: a file where class folders are expected\n", path); }
        else fprintf(stderr, "dsgd-run: ignored %s: not a regular file or directory\n", path);
    }
    const int rerr = errno;
    closedir(d);
    if (rerr) return seterr(err, errlen, "%s: %s", dir, strerror(rerr));
    if (dirs) qsort(dirs->v, (size_t)dirs->n, sizeof *dirs->v, cmp_str);
    if (files) qsort(files->v, (size_t)files->n, sizeof *files->v, cmp_str);
    return 0;
}

static int class_of(const source_set *ss, const char *wnid) {
    char *const *hit = bsearch(&wnid, ss->classes, (size_t)ss->n_classes, sizeof *ss->classes, cmp_str);
    return hit ? (int)(hit - ss->classes) : -1;
}

static void split_push(split_list *sp, int64_t *cap, const char *rel, int label) {
    if (sp->n == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        sp->rel = realloc(sp->rel, (size_t)*cap * sizeof *sp->rel);
        sp->label = realloc(sp->label, (size_t)*cap * sizeof *sp->label);
        if (!sp->rel || !sp->label) DIE("pack: out of memory listing files");
    }
    sp->rel[sp->n] = strdup(rel);
    sp->label[sp->n++] = (int16_t)label;
}

/* ImageFolder: SRC/<split>/<wnid>/<file>, classes in sorted-folder order; for val every folder
 * must be a train class. */
static int list_folders(source_set *ss, int k, const char *dir, const strvec *classes, char *err, size_t errlen) {
    split_list *sp = &ss->s[k];
    int64_t cap = 0;
    char cdir[PATH_MAX], rel[PATH_MAX];
    for (int64_t c = 0; c < classes->n; c++) {
        const int label = k == TRAIN ? (int)c : class_of(ss, classes->v[c]);
        if (label < 0)
            return seterr(err, errlen, "%s/%s: class '%s' is not among the %d train classes (the folders of the train directory): "
                          "val classes must be train classes", dir, classes->v[c], classes->v[c], ss->n_classes);
        snprintf(cdir, sizeof cdir, "%s/%s", dir, classes->v[c]);
        strvec files = {0};
        int rc = list_dir(cdir, NULL, &files, err, errlen);
        if (!rc && files.n == 0) fprintf(stderr, "dsgd-run: note: %s holds no images\n", cdir);
        for (int64_t i = 0; !rc && i < files.n; i++) {
            snprintf(rel, sizeof rel, "%s/%s", classes->v[c], files.v[i]);
            split_push(sp, &cap, rel, label);
        }
        strvec_free(&files);
        if (rc) return rc;
    }
    return 0;
}

/* A label-file entry: key (file name or stem) -> label. */
typedef struct {
    char *key;
    int label, line, used;
} label_entry;

static int cmp_entry(const void *a, const void *b) { return strcmp(((const label_entry *)a)->key, ((const label_entry *)b)->key); }

/* Read a val label file: Kaggle's "ImageId,PredictionString" CSV (the wnid is the first token of
 * PredictionString) or "<file> <wnid>" lines (# comments, blank lines ignored). */
static int read_labels(const source_set *ss, const char *path, label_entry **out, int64_t *n_out, char *err, size_t errlen) {
    *out = NULL, *n_out = 0;
    FILE *f = fopen(path, "r");
    if (!f) return seterr(err, errlen, "val labels %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, csv = -1, rc = 0;
    int64_t n = 0, ecap = 0;
    label_entry *e = NULL;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        char *s = line + strspn(line, " \t");
        if (!*s || *s == '#') continue;
        if (csv < 0) {
            csv = strncmp(s, "ImageId,", 8) == 0;
            if (csv) continue; /* the header */
        }
        char *key, *wnid;
        if (csv) {
            char *comma = strchr(s, ',');
            if (!comma) { rc = seterr(err, errlen, "%s:%d: expected 'ImageId,PredictionString' (Kaggle LOC_val_solution.csv)", path, lineno); break; }
            *comma = '\0';
            key = s, wnid = comma + 1 + strspn(comma + 1, " \t");
            wnid[strcspn(wnid, " \t")] = '\0';
        } else {
            key = s;
            char *sp = s + strcspn(s, " \t");
            if (!*sp) { rc = seterr(err, errlen, "%s:%d: expected '<file> <wnid>'", path, lineno); break; }
            *sp++ = '\0';
            wnid = sp + strspn(sp, " \t");
            char *tail = wnid + strcspn(wnid, " \t");
            if (*tail) *tail++ = '\0';
            if (*(tail + strspn(tail, " \t"))) { rc = seterr(err, errlen, "%s:%d: expected '<file> <wnid>', found more fields", path, lineno); break; }
        }
        if (!*key || !*wnid) { rc = seterr(err, errlen, "%s:%d: an empty file name or class", path, lineno); break; }
        const int label = class_of(ss, wnid);
        if (label < 0) {
            rc = seterr(err, errlen, "%s:%d: class '%s' (for %s) is not among the %d train classes (the folders of the train directory)",
                        path, lineno, wnid, key, ss->n_classes);
            break;
        }
        if (n == ecap) {
            ecap = ecap ? 2 * ecap : 1024;
            e = realloc(e, (size_t)ecap * sizeof *e);
            if (!e) DIE("pack: out of memory reading %s", path);
        }
        e[n++] = (label_entry){strdup(key), label, lineno, 0};
    }
    free(line);
    fclose(f);
    if (!rc && n == 0) rc = seterr(err, errlen, "%s: no labels in it", path);
    if (!rc) {
        qsort(e, (size_t)n, sizeof *e, cmp_entry);
        for (int64_t i = 1; i < n && !rc; i++)
            if (!strcmp(e[i].key, e[i - 1].key))
                rc = seterr(err, errlen, "%s:%d: '%s' is labelled twice (also on line %d)", path, e[i].line > e[i - 1].line ? e[i].line : e[i - 1].line,
                            e[i].key, e[i].line < e[i - 1].line ? e[i].line : e[i - 1].line);
    }
    if (rc) {
        for (int64_t i = 0; i < n; i++) free(e[i].key);
        free(e);
        return rc;
    }
    *out = e, *n_out = n;
    return 0;
}

/* A flat SRC/val/<file> folder labelled by a label file (matched by file name, else by the name
 * without its extension, as Kaggle's ImageIds are). */
static int list_flat_val(source_set *ss, const char *src, const char *dir, const strvec *files, const char *labels_opt, char *err,
                         size_t errlen) {
    char path[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    if (labels_opt) snprintf(path, sizeof path, "%s", labels_opt);
    else {
        snprintf(a, sizeof a, "%s/val_labels.txt", src);
        snprintf(b, sizeof b, "%s/LOC_val_solution.csv", src);
        const int ha = access(a, F_OK) == 0, hb = access(b, F_OK) == 0;
        if (ha && hb) return seterr(err, errlen, "%s holds a flat val folder and both %s and %s: choose one with --val-labels", src, a, b);
        if (!ha && !hb) {
            snprintf(path, sizeof path, "%s/ILSVRC2012_validation_ground_truth.txt", src);
            return seterr(err, errlen, "%s is a flat folder of images, so its labels are needed: give --val-labels FILE, or put "
                          "val_labels.txt ('<file> <wnid>' lines) or Kaggle's LOC_val_solution.csv in %s%s (docs/data.md \"Packing\")",
                          dir, src, access(path, F_OK) == 0 ? "; the devkit's ILSVRC2012_validation_ground_truth.txt holds ILSVRC2012_IDs, "
                                                             "not wnids: convert it with meta.mat as docs/data.md shows" : "");
        }
        snprintf(path, sizeof path, "%s", ha ? a : b);
    }
    label_entry *e;
    int64_t n;
    int rc = read_labels(ss, path, &e, &n, err, errlen);
    if (rc) return rc;
    split_list *sp = &ss->s[VAL];
    int64_t cap = 0;
    for (int64_t i = 0; i < files->n && !rc; i++) {
        /* by the file name, or by the name without its extension; a file labelled both ways is
         * labelled twice, as a file named twice in the same form is */
        label_entry key = {.key = files->v[i]};
        label_entry *full = bsearch(&key, e, (size_t)n, sizeof *e, cmp_entry), *by_stem = NULL;
        char stem[PATH_MAX];
        snprintf(stem, sizeof stem, "%s", files->v[i]);
        char *dot = strrchr(stem, '.');
        if (dot && dot != stem) {
            *dot = '\0';
            key.key = stem;
            by_stem = bsearch(&key, e, (size_t)n, sizeof *e, cmp_entry);
        }
        label_entry *hit = full ? full : by_stem;
        if (full && by_stem)
            rc = seterr(err, errlen, "%s:%d: '%s' is labelled twice (also as '%s' on line %d)", path,
                        full->line > by_stem->line ? full->line : by_stem->line, files->v[i], stem,
                        full->line < by_stem->line ? full->line : by_stem->line);
        else if (!hit) rc = seterr(err, errlen, "%s/%s: no label for it in %s", dir, files->v[i], path);
        else hit->used++, split_push(sp, &cap, files->v[i], hit->label);
    }
    int64_t unused = 0;
    for (int64_t i = 0; i < n; i++) unused += !e[i].used, free(e[i].key);
    free(e);
    if (!rc && unused) fprintf(stderr, "dsgd-run: note: %lld label(s) of %s name no file in %s\n", (long long)unused, path, dir);
    if (!rc) printf("dsgd-run --pack: val labels from %s\n", path);
    return rc;
}

/* Rank 0: list SRC into ss. */
static int list_sources(source_set *ss, const pack_options *o, char *err, size_t errlen) {
    memset(ss, 0, sizeof *ss);
    char dir[PATH_MAX];
    struct stat sb;
    if (stat(o->src, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return seterr(err, errlen, "%s: %s; expected the directory of an ImageFolder tree (SRC/train/<wnid>/...)", o->src,
                      stat(o->src, &sb) != 0 ? strerror(errno) : "not a directory");
    snprintf(dir, sizeof dir, "%s/train", o->src);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return seterr(err, errlen, "%s: no train directory; expected an ImageFolder tree %s/train/<wnid>/<images> (docs/data.md \"Packing\")",
                      o->src, o->src);
    strvec classes = {0};
    int rc = list_dir(dir, &classes, NULL, err, errlen);
    if (!rc && classes.n == 0) rc = seterr(err, errlen, "%s: no class folders; expected %s/<wnid>/<images>", dir, dir);
    if (!rc && classes.n > SHARDS_MAX_CLASSES) rc = seterr(err, errlen, "%s: %lld class folders; at most %d are packed", dir, (long long)classes.n, SHARDS_MAX_CLASSES);
    for (int64_t c = 0; !rc && c < classes.n; c++)
        if (strlen(classes.v[c]) > SHARDS_WNID_MAX) rc = seterr(err, errlen, "%s/%s: a class name longer than %d bytes", dir, classes.v[c], SHARDS_WNID_MAX);
    if (rc) { strvec_free(&classes); return rc; }
    ss->n_classes = (int)classes.n;
    ss->classes = xcalloc((size_t)classes.n, sizeof *ss->classes);
    for (int64_t c = 0; c < classes.n; c++) ss->classes[c] = strdup(classes.v[c]);
    ss->s[TRAIN].present = 1;
    rc = list_folders(ss, TRAIN, dir, &classes, err, errlen);
    strvec_free(&classes);
    if (!rc && ss->s[TRAIN].n == 0) rc = seterr(err, errlen, "%s: no images in its %d class folders", dir, ss->n_classes);
    if (rc) return rc;

    snprintf(dir, sizeof dir, "%s/val", o->src);
    if (stat(dir, &sb) != 0) {
        fprintf(stderr, "dsgd-run: note: %s: no val directory: only train is packed\n", o->src);
        return 0;
    }
    if (!S_ISDIR(sb.st_mode)) return seterr(err, errlen, "%s: not a directory", dir);
    strvec vdirs = {0}, vfiles = {0};
    rc = list_dir(dir, &vdirs, &vfiles, err, errlen);
    if (!rc && vdirs.n && vfiles.n)
        rc = seterr(err, errlen, "%s holds both folders (%s, ...) and files (%s, ...); expected either class folders or a flat folder of images",
                    dir, vdirs.v[0], vfiles.v[0]);
    if (!rc && !vdirs.n && !vfiles.n) rc = seterr(err, errlen, "%s is empty; expected class folders or images", dir);
    ss->s[VAL].present = 1;
    if (!rc && vdirs.n) rc = list_folders(ss, VAL, dir, &vdirs, err, errlen);
    else if (!rc) rc = list_flat_val(ss, o->src, dir, &vfiles, o->val_labels, err, errlen);
    if (!rc && ss->s[VAL].n == 0) rc = seterr(err, errlen, "%s: no images", dir);
    strvec_free(&vdirs), strvec_free(&vfiles);
    return rc;
}

/* Serialise ss as NUL-terminated strings: n_classes, classes, then per split: present, n,
 * (label, rel) pairs. */
typedef struct {
    char *p;
    size_t n, cap;
} blob;

static void blob_put(blob *b, const char *s) {
    size_t l = strlen(s) + 1;
    if (b->n + l > b->cap) {
        while (b->n + l > b->cap) b->cap = b->cap ? 2 * b->cap : 1 << 16;
        b->p = realloc(b->p, b->cap);
        if (!b->p) DIE("pack: out of memory");
    }
    memcpy(b->p + b->n, s, l);
    b->n += l;
}

static void blob_put_i(blob *b, long long v) {
    char t[32];
    snprintf(t, sizeof t, "%lld", v);
    blob_put(b, t);
}

static void sources_to_blob(const source_set *ss, blob *b) {
    blob_put_i(b, ss->n_classes);
    for (int c = 0; c < ss->n_classes; c++) blob_put(b, ss->classes[c]);
    for (int k = 0; k < N_SPLITS; k++) {
        blob_put_i(b, ss->s[k].present);
        blob_put_i(b, ss->s[k].n);
        for (int64_t i = 0; i < ss->s[k].n; i++) blob_put_i(b, ss->s[k].label[i]), blob_put(b, ss->s[k].rel[i]);
    }
}

static const char *blob_next(const char **at) {
    const char *s = *at;
    *at += strlen(s) + 1;
    return s;
}

static void sources_from_blob(source_set *ss, const char *p) {
    memset(ss, 0, sizeof *ss);
    ss->n_classes = atoi(blob_next(&p));
    ss->classes = xcalloc((size_t)ss->n_classes, sizeof *ss->classes);
    for (int c = 0; c < ss->n_classes; c++) ss->classes[c] = strdup(blob_next(&p));
    for (int k = 0; k < N_SPLITS; k++) {
        split_list *sp = &ss->s[k];
        sp->present = atoi(blob_next(&p));
        sp->n = atoll(blob_next(&p));
        sp->rel = xcalloc((size_t)sp->n, sizeof *sp->rel);
        sp->label = xcalloc((size_t)sp->n, sizeof *sp->label);
        for (int64_t i = 0; i < sp->n; i++) sp->label[i] = (int16_t)atoi(blob_next(&p)), sp->rel[i] = strdup(blob_next(&p));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* OUT: never an input, never another run's output unless --overwrite (and then only a pack).  */

/* index.h5, <split>-NNNNN-of-NNNNN.h5, and their .tmp */
static int is_pack_file(const char *name) {
    char base[256];
    snprintf(base, sizeof base, "%s", name);
    size_t l = strlen(base);
    if (l > 4 && !strcmp(base + l - 4, ".tmp")) base[l -= 4] = '\0';
    if (!strcmp(base, SHARDS_INDEX)) return 1;
    for (int k = 0; k < N_SPLITS; k++) {
        size_t sl = strlen(split_names[k]);
        const char *s = base + sl;
        if (strncmp(base, split_names[k], sl) || *s != '-') continue;
        s++;
        size_t d = strspn(s, "0123456789");
        if (d < 5 || strncmp(s + d, "-of-", 4)) continue;
        s += d + 4;
        d = strspn(s, "0123456789");
        if (d >= 5 && !strcmp(s + d, ".h5")) return 1;
    }
    return 0;
}

/* a is b or lies inside it (both real paths) */
static int path_within(const char *a, const char *b) {
    size_t l = strlen(b);
    return !strncmp(a, b, l) && (a[l] == '\0' || a[l] == '/');
}

/* The real path a (possibly not yet existing) path will have: realpath of its nearest existing
 * ancestor, with the missing components appended. 0, or -1 with errno. */
static int future_realpath(const char *path, char *out) {
    char head[PATH_MAX], tail[PATH_MAX] = "";
    snprintf(head, sizeof head, "%s", path);
    for (;;) {
        if (realpath(head[0] ? head : ".", out)) break;
        if (errno != ENOENT) return -1;
        char *slash = strrchr(head, '/');
        char t[PATH_MAX];
        const int len = snprintf(t, sizeof t, "/%s%s", slash ? slash + 1 : head, tail);
        if (len < 0 || (size_t)len >= sizeof t) return errno = ENAMETOOLONG, -1;
        memcpy(tail, t, (size_t)len + 1);
        if (!slash) head[0] = '\0';
        else if (slash == head) snprintf(head, sizeof head, "/");
        else *slash = '\0';
    }
    if (strlen(out) + strlen(tail) >= PATH_MAX) return errno = ENAMETOOLONG, -1;
    if (!strcmp(out, "/") && tail[0]) out[0] = '\0';
    strcat(out, tail);
    return 0;
}

static int prepare_out(const pack_options *o, char *err, size_t errlen) {
    char rs[PATH_MAX], ro[PATH_MAX], sub[PATH_MAX + 8];
    if (!realpath(o->src, rs)) return seterr(err, errlen, "%s: %s", o->src, strerror(errno));
    /* Never into the images (whether OUT exists yet or not). */
    if (future_realpath(o->out, ro)) return seterr(err, errlen, "%s: %s", o->out, strerror(errno));
    if (!strcmp(ro, rs)) return seterr(err, errlen, "OUT %s is SRC: choose another directory for the pack", o->out);
    for (int k = 0; k < N_SPLITS; k++) {
        snprintf(sub, sizeof sub, "%s/%s", rs, split_names[k]);
        if (path_within(ro, sub))
            return seterr(err, errlen, "OUT %s lies inside SRC's %s images (%s): choose a directory outside them", o->out, split_names[k], sub);
    }
    struct stat sb;
    if (stat(o->out, &sb) != 0) {
        if (errno != ENOENT) return seterr(err, errlen, "%s: %s", o->out, strerror(errno));
        if (mkdirs(o->out, "the pack (OUT)", err, errlen)) return EXIT_BADINPUT;
        return 0;
    }
    if (!S_ISDIR(sb.st_mode)) return seterr(err, errlen, "%s exists and is not a directory; OUT must be a directory for the pack", o->out);
    if (access(o->out, W_OK | X_OK) != 0) return seterr(err, errlen, "%s: directory not writable", o->out);
    DIR *d = opendir(o->out);
    if (!d) return seterr(err, errlen, "%s: %s", o->out, strerror(errno));
    strvec ours = {0};
    int rc = 0, any = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        any = 1;
        if (!o->overwrite)
            rc = seterr(err, errlen, "%s already holds files (%s%s): a pack is never written over an earlier output; use --overwrite to "
                        "replace a pack, or choose another OUT", o->out, e->d_name, is_pack_file(e->d_name) ? ", of a pack" : "");
        else if (!is_pack_file(e->d_name))
            rc = seterr(err, errlen, "%s/%s is not a file of a dsgd-run pack: --overwrite replaces only a pack's own files; remove it or "
                        "choose another OUT", o->out, e->d_name);
        else strvec_push(&ours, e->d_name);
    }
    closedir(d);
    if (!rc && any) { /* the index first: from then on the old pack is visibly incomplete */
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", o->out, SHARDS_INDEX);
        if (unlink(p) != 0 && errno != ENOENT) rc = seterr(err, errlen, "--overwrite: cannot remove %s: %s", p, strerror(errno));
        for (int64_t i = 0; !rc && i < ours.n; i++) {
            snprintf(p, sizeof p, "%s/%s", o->out, ours.v[i]);
            if (unlink(p) != 0 && errno != ENOENT) rc = seterr(err, errlen, "--overwrite: cannot remove %s: %s", p, strerror(errno));
        }
        if (!rc) printf("dsgd-run --pack: --overwrite: removed the %lld file(s) of the earlier pack in %s\n", (long long)ours.n, o->out);
    }
    strvec_free(&ours);
    return rc;
}

/* fsync a file or directory by path; 0 or -1 with errno. */
static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Publish tmp as final: fsync tmp, link it to final (fails if final exists: nothing is ever
 * replaced), remove tmp, fsync the directory. 0 or EXIT_RUNTIME. */
static int publish(const char *tmp, const char *final, const char *dir, char *err, size_t errlen) {
    if (fsync_path(tmp) != 0) return seterr(err, errlen, "%s: fsync: %s", tmp, strerror(errno)), EXIT_RUNTIME;
    if (link(tmp, final) != 0) {
        if (errno == EEXIST) return seterr(err, errlen, "%s appeared while packing (another pack into the same OUT?): not replaced", final), EXIT_RUNTIME;
        if (rename(tmp, final) != 0) return seterr(err, errlen, "%s: cannot rename to %s: %s", tmp, final, strerror(errno)), EXIT_RUNTIME;
    } else unlink(tmp);
    if (fsync_path(dir) != 0) return seterr(err, errlen, "%s: fsync: %s", dir, strerror(errno)), EXIT_RUNTIME;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Shards of a split: a seeded permutation cut into K contiguous parts.                        */

typedef struct {
    int n_shards;
    int64_t *perm;     /* (n) source indices in shard order */
    int64_t *start;    /* (K + 1) shard k = perm[start[k], start[k+1]) */
} split_plan;

static void plan_split(split_plan *pl, int64_t n, const pack_options *o, int k_split) {
    int64_t K = o->shards ? o->shards : (n + o->shard_images - 1) / o->shard_images;
    if (K > n) K = n;
    if (K < 1) K = 1;
    pl->n_shards = (int)K;
    pl->perm = xmalloc((size_t)n * sizeof *pl->perm);
    for (int64_t i = 0; i < n; i++) pl->perm[i] = i;
    rng_t r;
    rng_seed(&r, seed_mix(o->seed, (uint64_t)k_split + 1));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1), t = pl->perm[i];
        pl->perm[i] = pl->perm[j], pl->perm[j] = t;
    }
    pl->start = xmalloc(((size_t)K + 1) * sizeof *pl->start);
    for (int64_t k = 0; k <= K; k++) pl->start[k] = k * n / K;
}

/* ------------------------------------------------------------------------------------------ */
/* The pipeline of one rank: worker threads fill a ring of slots in task order, the calling   */
/* thread writes the shards.                                                                  */

typedef struct {
    int split, shard;
    int64_t src;
} task;

typedef struct {
    int done;           /* filled by a worker, not yet taken by the writer */
    int skipped;
    uint8_t *jpeg;
    size_t n, cap;
    int h, w, warnings;
    char why[512];
} slot;

typedef struct {
    const pack_options *o;
    const source_set *ss;
    char dirs[N_SPLITS][PATH_MAX];
    const task *tasks;
    int64_t n_tasks;
    slot *ring;
    int64_t ring_n;
    atomic_llong next;          /* next task a worker takes */
    int64_t taken;              /* tasks the writer has taken (under mu) */
    int stop;                   /* the writer gave up (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv_done, cv_free;
} pipeline;

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(s * 1e9);
    ts.tv_sec += ns / 1000000000LL, ts.tv_nsec = ns % 1000000000LL;
    pthread_cond_timedwait(cv, mu, &ts);
}

/* Read the whole file into *buf (grown); 0, or 1 with why. */
static int read_whole(const char *path, uint8_t **buf, size_t *cap, size_t *n, char *why, size_t whylen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return snprintf(why, whylen, "cannot open: %s", strerror(errno)), 1;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0) rc = (snprintf(why, whylen, "cannot stat: %s", strerror(errno)), 1);
    else if ((size_t)sb.st_size > PACK_MAX_FILE)
        rc = (snprintf(why, whylen, "%lld bytes: larger than the %zu MiB an image may have", (long long)sb.st_size, PACK_MAX_FILE >> 20), 1);
    size_t got = 0;
    if (!rc) {
        grow_buf(buf, cap, (size_t)sb.st_size + 1, 1);
        while (got < (size_t)sb.st_size) {
            ssize_t r = read(fd, *buf + got, (size_t)sb.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) { rc = (snprintf(why, whylen, "read error: %s", strerror(errno)), 1); break; }
            if (r == 0) break; /* shrank since fstat: take what is there */
            got += (size_t)r;
        }
    }
    close(fd);
    *n = got;
    return rc;
}

static void *worker_main(void *arg) {
    pipeline *p = arg;
    pack_conv *c = pack_conv_new();
    uint8_t *fbuf = NULL;
    size_t fcap = 0, fn = 0;
    char path[2 * PATH_MAX];
    for (;;) {
        const int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) break;
        pthread_mutex_lock(&p->mu);
        while (!p->stop && t >= p->taken + p->ring_n) timed_wait(&p->cv_free, &p->mu, 1.0);
        const int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        const task *tk = &p->tasks[t];
        slot *s = &p->ring[t % p->ring_n];
        snprintf(path, sizeof path, "%s/%s", p->dirs[tk->split], p->ss->s[tk->split].rel[tk->src]);
        s->skipped = 0, s->warnings = 0, s->why[0] = '\0';
        const uint8_t *jpeg;
        size_t jn;
        if (read_whole(path, &fbuf, &fcap, &fn, s->why, sizeof s->why) ||
            pack_convert(c, fbuf, fn, p->o->max_side, p->o->quality, &jpeg, &jn, &s->h, &s->w, &s->warnings, s->why, sizeof s->why))
            s->skipped = 1;
        else {
            grow_buf(&s->jpeg, &s->cap, jn, 1);
            memcpy(s->jpeg, jpeg, jn);
            s->n = jn;
        }
        pthread_mutex_lock(&p->mu);
        s->done = 1;
        pthread_cond_broadcast(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
    free(fbuf);
    pack_conv_free(c);
    return NULL;
}

/* What a rank packed: per split and shard n, skipped, bytes; totals. */
typedef struct {
    double *n[N_SPLITS], *skipped[N_SPLITS], *nbytes[N_SPLITS];
    double packed, n_skipped, warned, bytes;
} pack_stats;

static void human_time(char *buf, size_t n, double s) {
    if (s < 0 || s > 1e7) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%ds", (int)s);
}

/* The writer: take slots in task order, build and publish each shard. 0 or EXIT_RUNTIME. */
static int write_shards(pipeline *p, const split_plan *plans, pack_stats *st, int rank, int ranks, char *err, size_t errlen) {
    const pack_options *o = p->o;
    const double t0 = wall_time(), every = isatty(2) ? 1.0 : 10.0;
    double last_print = t0, last_done = t0;
    int64_t t = 0;
    int rc = 0;
    while (t < p->n_tasks && !rc) {
        const int k = p->tasks[t].split, sh = p->tasks[t].shard;
        const split_plan *pl = &plans[k];
        const int64_t cap = pl->start[sh + 1] - pl->start[sh];
        uint64_t *off = xcalloc((size_t)cap + 1, sizeof *off);
        int16_t *label = xmalloc((size_t)cap * sizeof *label);
        uint16_t *hh = xmalloc((size_t)cap * sizeof *hh), *ww = xmalloc((size_t)cap * sizeof *ww);
        int32_t *src = xmalloc((size_t)cap * sizeof *src), *skipped = xmalloc((size_t)cap * sizeof *skipped);
        int64_t n = 0, n_skipped = 0;
        size_t jcap = (size_t)cap * 16384 + 65536, jn = 0;
        uint8_t *jbuf = xmalloc(jcap);
        for (; t < p->n_tasks && p->tasks[t].split == k && p->tasks[t].shard == sh; t++) {
            slot *s = &p->ring[t % p->ring_n];
            pthread_mutex_lock(&p->mu);
            while (!s->done) {
                timed_wait(&p->cv_done, &p->mu, 1.0);
                const double now = wall_time();
                if (!s->done && now - last_done > PACK_STALL_S) {
                    p->stop = 1;
                    pthread_cond_broadcast(&p->cv_free);
                    seterr(err, errlen, "no image finished in %.0f s; waiting for %s/%s", PACK_STALL_S, p->dirs[k],
                           p->ss->s[k].rel[p->tasks[t].src]);
                    rc = EXIT_RUNTIME;
                    break;
                }
            }
            pthread_mutex_unlock(&p->mu);
            if (rc) break;
            last_done = wall_time();
            const int64_t si = p->tasks[t].src;
            if (s->skipped) {
                fprintf(stderr, "dsgd-run: skipped %s/%s: %s\n", p->dirs[k], p->ss->s[k].rel[si], s->why);
                skipped[n_skipped++] = (int32_t)si;
            } else {
                if (s->warnings) {
                    fprintf(stderr, "dsgd-run: %s/%s: %d decoder warning(s) (corrupt data recovered): packed\n", p->dirs[k],
                            p->ss->s[k].rel[si], s->warnings);
                    st->warned++;
                }
                if (jn + s->n > jcap) {
                    while (jn + s->n > jcap) jcap = jcap / 2 * 3;
                    jbuf = realloc(jbuf, jcap);
                    if (!jbuf) DIE("pack: out of memory for a shard of %zu bytes", jcap);
                }
                memcpy(jbuf + jn, s->jpeg, s->n);
                jn += s->n;
                label[n] = p->ss->s[k].label[si], hh[n] = (uint16_t)s->h, ww[n] = (uint16_t)s->w, src[n] = (int32_t)si;
                off[++n] = jn;
            }
            pthread_mutex_lock(&p->mu);
            s->done = 0;
            p->taken = t + 1;
            pthread_cond_broadcast(&p->cv_free);
            pthread_mutex_unlock(&p->mu);
            const double now = wall_time();
            if (rank == 0 && now - last_print >= every && t + 1 < p->n_tasks) {
                last_print = now;
                const double rate = (double)(t + 1) / (now - t0);
                char eta[32];
                human_time(eta, sizeof eta, (double)(p->n_tasks - t - 1) / rate);
                fprintf(stderr, "dsgd-run --pack: %s%lld/%lld images (%.1f%%), %.0f images/s, ETA %s\n", ranks > 1 ? "rank 0: " : "",
                        (long long)(t + 1), (long long)p->n_tasks, 100.0 * (double)(t + 1) / (double)p->n_tasks, rate, eta);
            }
        }
        if (!rc) {
            char name[64], final[PATH_MAX + 80], tmp[PATH_MAX + 90];
            shard_name(name, sizeof name, split_names[k], sh, pl->n_shards);
            snprintf(final, sizeof final, "%s/%s", o->out, name);
            snprintf(tmp, sizeof tmp, "%s.tmp", final);
            const shard_meta m = {.split = split_names[k], .shard = sh, .n_shards = pl->n_shards, .max_side = o->max_side,
                                  .quality = o->quality, .subsampling = PACK_SUBSAMPLING, .interp = PACK_INTERP, .seed = o->seed,
                                  .n_classes = p->ss->n_classes, .classes = (const char *const *)p->ss->classes};
            rc = shard_write(tmp, &m, n, jbuf, off, label, hh, ww, src, n_skipped, skipped, err, errlen);
            if (!rc) rc = publish(tmp, final, o->out, err, errlen);
            if (rc) unlink(tmp);
            else {
                st->n[k][sh] = (double)n, st->skipped[k][sh] = (double)n_skipped, st->nbytes[k][sh] = (double)jn;
                st->packed += (double)n, st->n_skipped += (double)n_skipped, st->bytes += (double)jn;
                if (ranks > 1) printf("dsgd-run --pack: rank %d wrote %s: %lld images, %.1f MB\n", rank, name, (long long)n, (double)jn / 1e6);
                else printf("dsgd-run --pack: wrote %s: %lld images, %.1f MB\n", name, (long long)n, (double)jn / 1e6);
                fflush(stdout);
            }
        }
        free(off), free(label), free(hh), free(ww), free(src), free(skipped), free(jbuf);
    }
    return rc;
}

/* Pack this rank's shards with nthreads workers. */
static int run_pipeline(const pack_options *o, const source_set *ss, const split_plan *plans, int nthreads, pack_stats *st, int rank,
                        int ranks, char *err, size_t errlen) {
    pipeline p = {.o = o, .ss = ss};
    for (int k = 0; k < N_SPLITS; k++) snprintf(p.dirs[k], sizeof p.dirs[k], "%s/%s", o->src, split_names[k]);
    int64_t n_tasks = 0;
    for (int k = 0; k < N_SPLITS; k++)
        if (ss->s[k].present)
            for (int sh = rank; sh < plans[k].n_shards; sh += ranks) n_tasks += plans[k].start[sh + 1] - plans[k].start[sh];
    task *tasks = xmalloc((size_t)(n_tasks ? n_tasks : 1) * sizeof *tasks);
    int64_t t = 0;
    for (int k = 0; k < N_SPLITS; k++)
        if (ss->s[k].present)
            for (int sh = rank; sh < plans[k].n_shards; sh += ranks)
                for (int64_t i = plans[k].start[sh]; i < plans[k].start[sh + 1]; i++) tasks[t++] = (task){k, sh, plans[k].perm[i]};
    p.tasks = tasks, p.n_tasks = n_tasks;
    p.ring_n = 16 * (int64_t)nthreads + 16;
    p.ring = xcalloc((size_t)p.ring_n, sizeof *p.ring);
    atomic_init(&p.next, 0);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_done, NULL);
    pthread_cond_init(&p.cv_free, NULL);
    pthread_t *th = xcalloc((size_t)nthreads, sizeof *th);
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker_main, &p) != 0) break;
    int rc = 0;
    if (started == 0) seterr(err, errlen, "cannot start a packing thread: %s", strerror(errno)), rc = EXIT_RUNTIME;
    else rc = write_shards(&p, plans, st, rank, ranks, err, errlen);
    pthread_mutex_lock(&p.mu);
    const int stalled = p.stop; /* set by the writer only when no image finished for PACK_STALL_S */
    p.stop = 1;
    pthread_cond_broadcast(&p.cv_free);
    pthread_mutex_unlock(&p.mu);
    if (stalled) return rc; /* a worker may never return: the process exits without joining it */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (int64_t i = 0; i < p.ring_n; i++) free(p.ring[i].jpeg);
    free(p.ring), free(th), free(tasks);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv_done);
    pthread_cond_destroy(&p.cv_free);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */

/* Collective: every rank returns the worst status; the failing ranks print their own message
 * (rank 0 without a prefix). */
static int agree(int st, const char *err) {
    const int worst = comm_max_int(st);
    if (st) {
        if (comm_rank() == 0) fprintf(stderr, "dsgd-run: %s\n", err);
        else fprintf(stderr, "dsgd-run: rank %d: %s\n", comm_rank(), err);
    }
    return worst;
}

int pack_main(int argc, char **argv) {
    const int rank = comm_rank(), ranks = comm_size(), r0 = rank == 0;
    char err[ERRLEN] = "";
    pack_options o;
    int st = parse_options(argc, argv, &o, err, sizeof err);
    if (!st && o.help) {
        if (r0) pack_usage(stdout);
        return 0;
    }
    /* Bad options are every rank's own verdict (same argv): only rank 0 prints it. */
    if (st) {
        if (r0) fprintf(stderr, "dsgd-run: %s\n", err);
        return st;
    }

    /* 1. Rank 0 lists SRC and prepares OUT; every rank gets the list. */
    source_set ss;
    memset(&ss, 0, sizeof ss);
    blob b = {0};
    if (r0) {
        st = list_sources(&ss, &o, err, sizeof err);
        if (!st) st = prepare_out(&o, err, sizeof err);
        if (!st) sources_to_blob(&ss, &b);
    }
    if ((st = agree(st, err))) {
        sources_free(&ss), free(b.p);
        return st;
    }
    uint64_t blen = b.n;
    comm_bcast(&blen, sizeof blen, 0);
    if (!r0) b.p = xmalloc(blen);
    for (uint64_t at = 0; at < blen; at += COMM_CHUNK_BYTES)
        comm_bcast(b.p + at, blen - at < COMM_CHUNK_BYTES ? blen - at : COMM_CHUNK_BYTES, 0);
    if (!r0) sources_from_blob(&ss, b.p);
    free(b.p);

    /* 2. Shards, threads. */
    split_plan plans[N_SPLITS] = {{0}};
    pack_stats stats = {0};
    int n_stats = 4;
    for (int k = 0; k < N_SPLITS; k++)
        if (ss.s[k].present) {
            plan_split(&plans[k], ss.s[k].n, &o, k);
            n_stats += 3 * plans[k].n_shards;
        }
    double *sv = xcalloc((size_t)n_stats, sizeof *sv), *at = sv + 4;
    for (int k = 0; k < N_SPLITS; k++) {
        stats.n[k] = at, at += plans[k].n_shards;
        stats.skipped[k] = at, at += plans[k].n_shards;
        stats.nbytes[k] = at, at += plans[k].n_shards;
    }
    int nthreads = o.threads;
    if (!nthreads) {
        cpu_set_t set;
        int ncpu = 1;
        if (sched_getaffinity(0, sizeof set, &set) == 0) ncpu = CPU_COUNT(&set);
        nthreads = ncpu / comm_local_size();
        if (nthreads < 1) nthreads = 1;
    }
    if (r0) {
        printf("dsgd-run --pack: %s -> %s: %d classes; train %lld images in %d shard(s)", o.src, o.out, ss.n_classes,
               (long long)ss.s[TRAIN].n, plans[TRAIN].n_shards);
        if (ss.s[VAL].present) printf(", val %lld images in %d shard(s)", (long long)ss.s[VAL].n, plans[VAL].n_shards);
        printf("; max side %d, quality %d, %d rank(s) x %d thread(s), seed %llu\n", o.max_side, o.quality, ranks, nthreads,
               (unsigned long long)o.seed);
        fflush(stdout);
    }

    /* 3. Pack this rank's shards. */
    const double t0 = wall_time();
    st = run_pipeline(&o, &ss, plans, nthreads, &stats, rank, ranks, err, sizeof err);
    if ((st = agree(st, err))) goto out;
    const double secs = 1e-3 * comm_max_int((int)(1e3 * (wall_time() - t0))); /* the slowest rank's */

    /* 4. Totals; rank 0 writes the index. */
    sv[0] = stats.packed, sv[1] = stats.n_skipped, sv[2] = stats.warned, sv[3] = stats.bytes;
    comm_allreduce_sum_f64(sv, n_stats);
    if (r0) {
        shards_index_split isp[N_SPLITS];
        int n_isp = 0;
        int64_t *iv = xcalloc((size_t)n_stats, sizeof *iv);
        uint64_t *uv = xcalloc((size_t)n_stats, sizeof *uv);
        for (int i = 0; i < n_stats; i++) iv[i] = (int64_t)sv[i], uv[i] = (uint64_t)sv[i];
        for (int k = 0; k < N_SPLITS; k++)
            if (ss.s[k].present)
                isp[n_isp++] = (shards_index_split){.split = split_names[k], .n_shards = plans[k].n_shards,
                                                    .n = iv + (stats.n[k] - sv), .skipped = iv + (stats.skipped[k] - sv),
                                                    .nbytes = uv + (stats.nbytes[k] - sv), .n_sources = ss.s[k].n,
                                                    .sources = (const char *const *)ss.s[k].rel};
        const shard_meta m = {.max_side = o.max_side, .quality = o.quality, .subsampling = PACK_SUBSAMPLING, .interp = PACK_INTERP,
                              .seed = o.seed, .n_classes = ss.n_classes, .classes = (const char *const *)ss.classes};
        char final[PATH_MAX + 16], tmp[PATH_MAX + 32];
        snprintf(final, sizeof final, "%s/%s", o.out, SHARDS_INDEX);
        snprintf(tmp, sizeof tmp, "%s.tmp", final);
        st = shards_write_index(tmp, &m, isp, n_isp, err, sizeof err);
        if (!st) st = publish(tmp, final, o.out, err, sizeof err);
        if (st) unlink(tmp);
        free(iv), free(uv);
        if (!st) {
            const double n = sv[0];
            printf("dsgd-run --pack: %.0f images packed, %.0f skipped, %.0f with decoder warnings; %.1f MB (%.1f KB per image); "
                   "%.1f s, %.0f images/s; %s\n", n, sv[1], sv[2], sv[3] / 1e6, n > 0 ? sv[3] / n / 1e3 : 0.0, secs,
                   (n + sv[1]) / (secs > 0 ? secs : 1), final);
            if (sv[1] > 0) printf("dsgd-run --pack: the %.0f skipped image(s) are named above and listed in each shard's /skipped_source_index\n", sv[1]);
        }
    }
    st = agree(st, err);
out:
    for (int k = 0; k < N_SPLITS; k++) free(plans[k].perm), free(plans[k].start);
    free(sv);
    sources_free(&ss);
    return st;
}
