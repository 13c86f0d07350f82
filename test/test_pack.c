/* test_pack.c — `dsgd-run --pack` (src/data/pack.c) end to end on an ImageFolder tree the test
 * writes itself with libjpeg and libpng: RGB 4:2:0 and 4:4:4, grayscale, progressive, restart
 * markers, CMYK with and without the Adobe marker, YCCK, PNGs (RGBA, palette with tRNS) named
 * .JPEG, a 5000 × 20 and a 1 × 1 image, junk bytes before EOI, a truncated JPEG, an empty file
 * and a text file. The shards are read back through src/data/shards.h and every stored JPEG is
 * decoded here with libjpeg (not with the packer's decoder) and compared with the pixels the
 * test wrote. Runs ./dsgd-run from the repository root, every mpiexec under a timeout. Also
 * util.h's xgrow, the packer's buffer grower: growth and the refusal of impossible sizes. */
#define _GNU_SOURCE
#include <hdf5.h>
#include <jpeglib.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/shards.h"
#include "jpegutil.h"
#include "mpiutil.h"
#include "testutil.h"
#include "util/util.h"

#define MAX_SIDE 64
/* Mean |stored − source| over all pixels and channels of a smooth gradient image after the
 * packer's resize and quality-90 4:2:0 JPEG (the test decodes with libjpeg): measured 0.36–0.83
 * on these images; the bound leaves room for libjpeg versions, not for a wrong resize (a
 * transposed or shifted image is off by > 20). */
#define MEAN_ABS_BOUND 3.0
/* A uniform colour (CMYK conversions, palette, 1 × 1) after q90 4:2:0: within this per channel. */
#define COLOUR_TOL 6.0

static char g_dir[256];

/* ---- Writing the source images ---------------------------------------------------------------- */

/* An 8-bit PNG: RGBA gradient (alpha varying: it must be dropped, not composited), or a
 * palette image of one colour with a tRNS entry. */
static void write_png(const char *path, int w, int h, int palette) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, palette ? PNG_COLOR_TYPE_PALETTE : PNG_COLOR_TYPE_RGBA,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (palette) {
        png_color pal[2] = {{10, 200, 30}, {250, 250, 250}};
        png_byte trns[1] = {128};
        png_set_PLTE(png, info, pal, 2);
        png_set_tRNS(png, info, trns, 1, NULL);
    }
    png_write_info(png, info);
    uint8_t *row = malloc((size_t)w * 4);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            double g[3];
            grad(x, y, w, h, g);
            if (palette) row[x] = 0;
            else for (int c = 0; c < 4; c++) row[4 * x + c] = c < 3 ? (uint8_t)lround(g[c]) : (uint8_t)(x * 7 % 256);
        }
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    fclose(f);
}

/* ---- The tree ---------------------------------------------------------------------------------- */

/* What each train source should become. */
enum { EXP_GRAD, EXP_GRAY, EXP_COLOUR, EXP_SKIP, EXP_WARN /* packed, named with its warnings */ };
typedef struct {
    const char *rel;
    int w, h;                   /* of the source */
    int expect;                 /* EXP_* */
    double colour[3];           /* EXP_COLOUR: the RGB expected */
    const char *why;            /* EXP_SKIP: in the packer's message */
} source;

static const source train_sources[] = {
    {"n01/a_rgb420.JPEG", 300, 200, EXP_GRAD, {0}, NULL},
    {"n01/b_rgb444.JPEG", 200, 300, EXP_GRAD, {0}, NULL},
    {"n01/c_gray.JPEG", 250, 180, EXP_GRAY, {0}, NULL},
    {"n01/d_progressive.JPEG", 320, 240, EXP_GRAD, {0}, NULL},
    {"n01/e_restart.JPEG", 240, 320, EXP_GRAD, {0}, NULL},
    /* Adobe-inverted CMYK, ink (0, 255, 255, 0) = red: stored 255 − ink. */
    {"n02/cmyk_adobe.JPEG", 80, 60, EXP_COLOUR, {255, 0, 0}, NULL},
    /* No Adobe marker, stored (0, 127, 255, 191) = ink (255, 128, 0, 64): taken as inverted all
     * the same (Pillow's rule): R = (255−K)(255−C)/255 = 0, G = 191·127/255 = 95.1, B = 191. */
    {"n02/cmyk_plain.JPEG", 60, 80, EXP_COLOUR, {0, 95.1, 191}, NULL},
    {"n02/ycck.JPEG", 70, 70, EXP_COLOUR, {255, 0, 0}, NULL},
    {"n02/png_rgba.JPEG", 120, 90, EXP_GRAD, {0}, NULL},
    {"n02/png_palette.JPEG", 50, 40, EXP_COLOUR, {10, 200, 30}, NULL},
    /* a wrong restart marker in the middle: libjpeg resynchronises and warns */
    {"n03/bad_restart.JPEG", 240, 320, EXP_WARN, {0}, NULL},
    {"n03/big.JPEG", 1000, 750, EXP_GRAD, {0}, NULL},
    {"n03/empty.JPEG", 0, 0, EXP_SKIP, {0}, "an empty file (0 bytes)"},
    {"n03/junk_before_eoi.JPEG", 200, 150, EXP_GRAD, {0}, NULL},
    {"n03/notes.JPEG", 0, 0, EXP_SKIP, {0}, "not a JPEG or PNG image"},
    {"n03/tiny.JPEG", 1, 1, EXP_COLOUR, {200, 100, 50}, NULL},
    {"n03/truncated.JPEG", 300, 200, EXP_SKIP, {0}, "truncated JPEG"},
    {"n03/wide.JPEG", 5000, 20, EXP_GRAD, {0}, NULL},
};
#define N_TRAIN ((int)(sizeof train_sources / sizeof *train_sources))
#define N_SKIP 3

static void path_of(char *buf, size_t n, const char *src, const char *split, const char *rel) {
    snprintf(buf, n, "%s/%s/%s", src, split, rel);
}

static void make_dirs(const char *src, const char *split, const char *const *classes, int n) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", src, split);
    mkdir(src, 0777), mkdir(p, 0777);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s/%s", src, split, classes[i]);
        mkdir(p, 0777);
    }
}

/* The tree of train_sources plus val/n01/v1, val/n03/v2 under src. */
static void make_tree(const char *src) {
    static const char *const cls[3] = {"n01", "n02", "n03"};
    make_dirs(src, "train", cls, 3);
    char p[700];
    for (int i = 0; i < N_TRAIN; i++) {
        const source *s = &train_sources[i];
        path_of(p, sizeof p, src, "train", s->rel);
        jpeg_spec js = {.w = s->w, .h = s->h, .comps = 3, .jpeg_cs = JCS_YCbCr};
        if (strstr(s->rel, "444")) js.s444 = 1;
        if (strstr(s->rel, "progressive")) js.progressive = 1;
        if (strstr(s->rel, "restart")) js.restart = 1;
        if (strstr(s->rel, "bad_restart")) { /* the second RST marker (FF D1) becomes RST5 */
            unsigned long n;
            uint8_t *b = encode(&js, &n);
            for (unsigned long k = 0; k + 1 < n; k++)
                if (b[k] == 0xFF && b[k + 1] == 0xD1) { b[k + 1] = 0xD5; break; }
            write_bytes(p, b, n);
            free(b);
            continue;
        }
        if (strstr(s->rel, "gray")) js.comps = 1, js.jpeg_cs = JCS_GRAYSCALE;
        if (strstr(s->rel, "cmyk") || strstr(s->rel, "ycck")) {
            js.comps = 4, js.pattern = SRC_UNIFORM, js.jpeg_cs = strstr(s->rel, "ycck") ? JCS_YCCK : JCS_CMYK;
            js.adobe = !strstr(s->rel, "plain");
            const uint8_t red_inv[4] = {255, 0, 0, 255}, plain[4] = {0, 127, 255, 191};
            memcpy(js.colour, strstr(s->rel, "plain") ? plain : red_inv, 4);
        }
        if (strstr(s->rel, "tiny")) js.pattern = SRC_UNIFORM, js.colour[0] = 200, js.colour[1] = 100, js.colour[2] = 50;
        if (strstr(s->rel, "png_rgba")) write_png(p, s->w, s->h, 0);
        else if (strstr(s->rel, "png_palette")) write_png(p, s->w, s->h, 1);
        else if (strstr(s->rel, "empty")) write_bytes(p, "", 0);
        else if (strstr(s->rel, "notes")) write_bytes(p, "class notes, not an image\n", 26);
        else if (strstr(s->rel, "junk")) { /* 3 bytes 0x7f before the final FF D9 */
            unsigned long n;
            uint8_t *b = encode(&js, &n);
            uint8_t *c = malloc(n + 3);
            memcpy(c, b, n - 2);
            memset(c + n - 2, 0x7f, 3);
            c[n + 1] = 0xFF, c[n + 2] = 0xD9;
            write_bytes(p, c, n + 3);
            free(b), free(c);
        } else if (strstr(s->rel, "truncated")) {
            unsigned long n;
            uint8_t *b = encode(&js, &n);
            write_bytes(p, b, n * 6 / 10);
            free(b);
        } else write_jpeg(p, &js);
    }
    static const char *const vcls[2] = {"n01", "n03"};
    make_dirs(src, "val", vcls, 2);
    jpeg_spec v1 = {.w = 100, .h = 80, .comps = 3, .jpeg_cs = JCS_YCbCr}, v2 = {.w = 90, .h = 120, .comps = 3, .jpeg_cs = JCS_YCbCr};
    path_of(p, sizeof p, src, "val", "n01/v1.JPEG");
    write_jpeg(p, &v1);
    path_of(p, sizeof p, src, "val", "n03/v2.JPEG");
    write_jpeg(p, &v2);
}

/* ---- Reading the pack back --------------------------------------------------------------------- */

/* /<split>/sources of OUT/index.h5 (variable-length strings) into a fresh array. */
static char **read_sources(const char *out, const char *split, long *n) {
    char path[600], name[64];
    snprintf(path, sizeof path, "%s/index.h5", out);
    snprintf(name, sizeof name, "%s/sources", split);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "cannot open %s", path);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert(d >= 0);
    hid_t s = H5Dget_space(d);
    hsize_t dims[1];
    H5Sget_simple_extent_dims(s, dims, NULL);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char **v = calloc(dims[0], sizeof *v);
    ck_assert(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Tclose(t), H5Sclose(s), H5Dclose(d), H5Fclose(f);
    *n = (long)dims[0];
    return v;
}

/* /skipped_source_index of a shard file, appended to out[*n]. */
static void read_skipped(const char *path, int *out, int *n) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t d = H5Dopen2(f, "skipped_source_index", H5P_DEFAULT);
    hid_t s = H5Dget_space(d);
    hsize_t dims[1];
    H5Sget_simple_extent_dims(s, dims, NULL);
    if (dims[0]) ck_assert(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out + *n) >= 0);
    *n += (int)dims[0];
    H5Sclose(s), H5Dclose(d), H5Fclose(f);
}

/* Decode a stored JPEG with libjpeg (RGB out); checks it is baseline 4:2:0. Returns pixels. */
static uint8_t *decode(const uint8_t *buf, size_t n, int *h, int *w) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, n);
    ck_assert_int_eq(jpeg_read_header(&ci, TRUE), JPEG_HEADER_OK);
    ck_assert_msg(!jpeg_has_multiple_scans(&ci) && !ci.progressive_mode, "stored JPEG is not baseline");
    ck_assert_int_eq(ci.num_components, 3);
    ck_assert_int_eq(ci.jpeg_color_space, JCS_YCbCr);
    ck_assert_int_eq(ci.comp_info[0].h_samp_factor, 2);
    ck_assert_int_eq(ci.comp_info[0].v_samp_factor, 2);
    ck_assert_int_eq(ci.comp_info[1].h_samp_factor, 1);
    ci.out_color_space = JCS_RGB;
    jpeg_start_decompress(&ci);
    *h = (int)ci.output_height, *w = (int)ci.output_width;
    uint8_t *px = malloc((size_t)*h * *w * 3);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW r = px + (size_t)ci.output_scanline * *w * 3;
        jpeg_read_scanlines(&ci, &r, 1);
    }
    ck_assert_int_eq(jerr.num_warnings, 0);
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    return px;
}

static const source *find_source(const char *rel) {
    for (int i = 0; i < N_TRAIN; i++)
        if (!strcmp(train_sources[i].rel, rel)) return &train_sources[i];
    ck_abort_msg("unknown source %s", rel);
    return NULL;
}

/* Every packed train sample against its source; returns the number checked. */
static int check_train(const char *out) {
    shards *s;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&s, out, "train", err, sizeof err) == 0, "%s", err);
    long n_src;
    char **src = read_sources(out, "train", &n_src);
    ck_assert_int_eq(n_src, N_TRAIN);
    ck_assert_int_eq(shards_count(s), N_TRAIN - N_SKIP);
    ck_assert_int_eq(shards_skipped(s), N_SKIP);
    ck_assert_int_eq(shards_n_classes(s), 3);
    ck_assert_int_eq(shards_max_side(s), MAX_SIDE);
    int seen[64] = {0};
    uint8_t *buf = malloc(shards_max_nbytes(s));
    for (int64_t i = 0; i < shards_count(s); i++) {
        const int si = shards_source_index(s, i);
        ck_assert(si >= 0 && si < n_src);
        seen[si]++;
        const source *sc = find_source(src[si]);
        ck_assert_msg(sc->expect != EXP_SKIP, "%s was packed", sc->rel);
        /* Label = the wnid's position among the sorted train folders. */
        char wnid[8];
        snprintf(wnid, sizeof wnid, "%.3s", sc->rel);
        ck_assert_str_eq(shards_class_name(s, shards_label(s, i)), wnid);
        ck_assert_int_eq(shards_label(s, i), wnid[2] - '1');
        /* Size: largest side min(MAX_SIDE, L), the other side in proportion, +-1. */
        const int L = sc->w > sc->h ? sc->w : sc->h;
        const double scale = L > MAX_SIDE ? (double)MAX_SIDE / L : 1.0;
        int h, w;
        ck_assert_msg(shards_read(s, i, buf, err, sizeof err) == 0, "%s", err);
        uint8_t *px = decode(buf, shards_nbytes(s, i), &h, &w);
        ck_assert_int_eq(h, shards_height(s, i));
        ck_assert_int_eq(w, shards_width(s, i));
        ck_assert(h <= MAX_SIDE && w <= MAX_SIDE);
        ck_assert_msg(fabs(w - sc->w * scale) <= 1.0 && fabs(h - sc->h * scale) <= 1.0, "%s: %d x %d stored, source %d x %d", sc->rel, w,
                      h, sc->w, sc->h);
        ck_assert(h >= 1 && w >= 1);
        /* Pixels. */
        double sum = 0, mean[3] = {0}, gray_spread = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double g[3];
                /* the source pixel whose centre maps onto (x, y): (x + 0.5)·W/w − 0.5 */
                const double sx = (x + 0.5) * sc->w / w - 0.5, sy = (y + 0.5) * sc->h / h - 0.5;
                g[0] = sc->w > 1 ? 255.0 * sx / (sc->w - 1) : 0, g[1] = sc->h > 1 ? 255.0 * sy / (sc->h - 1) : 0;
                g[2] = 0.5 * (g[0] + g[1]);
                const uint8_t *p = px + ((size_t)y * w + x) * 3;
                for (int c = 0; c < 3; c++) {
                    const double want = sc->expect == EXP_GRAY ? 0.5 * (g[0] + g[1]) : g[c];
                    sum += fabs(p[c] - fmin(255, fmax(0, want)));
                    mean[c] += p[c];
                }
                gray_spread = fmax(gray_spread, fmax(abs(p[0] - p[1]), abs(p[1] - p[2])));
            }
        const double npx = (double)h * w;
        if (sc->expect == EXP_GRAD || sc->expect == EXP_GRAY) {
            ck_assert_msg(sum / (3 * npx) <= MEAN_ABS_BOUND, "%s: mean |stored - source| = %.2f > %.1f", sc->rel, sum / (3 * npx),
                          MEAN_ABS_BOUND);
            printf("  %-26s %4d x %-4d -> %2d x %-2d mean |diff| %.2f\n", sc->rel, sc->w, sc->h, w, h, sum / (3 * npx));
        }
        if (sc->expect == EXP_GRAY) ck_assert_msg(gray_spread <= 2, "%s: R, G, B differ by %.0f", sc->rel, gray_spread);
        if (sc->expect == EXP_COLOUR) {
            for (int c = 0; c < 3; c++)
                ck_assert_msg(fabs(mean[c] / npx - sc->colour[c]) <= COLOUR_TOL, "%s: channel %d mean %.1f, expected %.1f", sc->rel, c,
                              mean[c] / npx, sc->colour[c]);
            printf("  %-26s colour (%.0f, %.0f, %.0f), expected (%.0f, %.0f, %.0f)\n", sc->rel, mean[0] / npx, mean[1] / npx, mean[2] / npx,
                   sc->colour[0], sc->colour[1], sc->colour[2]);
        }
        free(px);
    }
    /* Shards disjoint and covering: every source once, packed or skipped. */
    int skipped[64], n_sk = 0;
    for (int k = 0; k < shards_n_shards(s); k++) {
        char p[700];
        snprintf(p, sizeof p, "%s/train-%05d-of-%05d.h5", out, k, shards_n_shards(s));
        read_skipped(p, skipped, &n_sk);
    }
    ck_assert_int_eq(n_sk, N_SKIP);
    for (int i = 0; i < n_sk; i++) {
        ck_assert_int_eq(find_source(src[skipped[i]])->expect, EXP_SKIP);
        seen[skipped[i]]++;
    }
    for (int i = 0; i < N_TRAIN; i++) ck_assert_msg(seen[i] == 1, "source %s seen %d times", src[i], seen[i]);
    const int n = (int)shards_count(s);
    for (long i = 0; i < n_src; i++) free(src[i]);
    free(src), free(buf);
    shards_close(s);
    return n;
}

/* ---- Tests ------------------------------------------------------------------------------------- */

static char out_log[1 << 16];

static int pack(const char *args, const char *src, const char *out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " ./dsgd-run --pack %s %s %s", src, out, args);
    return run(cmd, out_log, sizeof out_log);
}

/* 1 if every file of a and b is byte-identical (same names). */
static int same_files(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "diff -r %s %s >/dev/null 2>&1", a, b);
    return system(cmd) == 0;
}

static const char *dirp(const char *name) {
    static char buf[64][512]; /* distinct for the 64 calls of a test */
    static int k;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dsgd-test-pack.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    make_tree(dirp("src"));
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_pack_tree) {
    const char *src = dirp("src"), *out = dirp("out");
    int rc = pack("--max-side 64 --shards 3 --seed 5 --threads 2", src, out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out_log);
    /* Skipped images named with their reason; warnings named. */
    char want[800];
    for (int i = 0; i < N_TRAIN; i++)
        if (train_sources[i].expect == EXP_SKIP) {
            snprintf(want, sizeof want, "skipped %s/train/%s: %s", src, train_sources[i].rel, train_sources[i].why);
            ck_assert_msg(strstr(out_log, want) != NULL, "'%s' not in: %s", want, out_log);
        }
    snprintf(want, sizeof want, "%s/train/n03/bad_restart.JPEG: ", src);
    const char *at = strstr(out_log, want);
    ck_assert_msg(at && strstr(at, "decoder warning(s) (corrupt data recovered): packed"), "'%s' not in: %s", want, out_log);
    ck_assert_msg(strstr(out_log, "17 images packed, 3 skipped, 1 with decoder warnings") != NULL, "%s", out_log);
    ck_assert_int_eq(check_train(out), N_TRAIN - N_SKIP);
    /* val: ImageFolder with 2 of the 3 classes, labels of train's numbering. */
    shards *v, *t;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&v, out, "val", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shards_open(&t, out, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(shards_same_classes(t, v, err, sizeof err), 0);
    ck_assert_int_eq(shards_count(v), 2);
    long n;
    char **vs = read_sources(out, "val", &n);
    ck_assert_int_eq(n, 2);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(shards_label(v, i), strstr(vs[shards_source_index(v, i)], "n01/") ? 0 : 2);
    free(vs[0]), free(vs[1]), free(vs);
    /* shards_verify decodes 2 samples per shard (the first and the last), or all of them. */
    int64_t checked = 0;
    ck_assert_msg(shards_verify(t, 2, &checked, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(checked, 6);
    ck_assert_msg(shards_verify(t, 0, &checked, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(checked, N_TRAIN - N_SKIP);
    shards_close(v), shards_close(t);
}
END_TEST

/* P1: HDF5 takes a flock on every file it opens (shared for reading), and fails "unable to lock
 * file" where another process holds a conflicting lock — or where the file system has no locks
 * (Lustre without flock, NFS without a lock daemon): the same error. dsgd-run opens its inputs with
 * HDF5's file locking off (io/h5.h), so `--check` on a pack whose index and a shard another process
 * holds exclusively locked passes. (The lock is this test's: flock locks belong to an open file
 * description, and dsgd-run, a child, opens its own.) */
START_TEST(test_locked_pack) {
    const char *src = dirp("src"), *out = dirp("out");
    ck_assert_msg(pack("--max-side 64 --shards 3 --seed 5 --threads 1", src, out) == 0, "%s", out_log);
    char cfg[600], text[1400], shard[600], index[600], cmd[1400];
    snprintf(cfg, sizeof cfg, "%s/locked.cfg", g_dir);
    snprintf(text, sizeof text, "name = \"locked\";\nmodel = { arch = \"linear\"; };\nb = 2;\niterations = 4;\np = 1;\n"
             "data = { format = \"jpeg\"; dir = \"%s\"; crop = 32; scale = [32, 40]; eval_resize = 36; };\noutput = \"%s/locked.h5\";\n",
             out, g_dir);
    write_file(cfg, text);
    snprintf(shard, sizeof shard, "%s/train-00001-of-00003.h5", out);
    snprintf(index, sizeof index, "%s/index.h5", out);
    int fs = open(shard, O_RDWR), fi = open(index, O_RDWR);
    ck_assert_msg(fs >= 0 && fi >= 0, "%s or %s: %s", shard, index, strerror(errno));
    ck_assert(flock(fs, LOCK_EX | LOCK_NB) == 0 && flock(fi, LOCK_EX | LOCK_NB) == 0);
    snprintf(cmd, sizeof cmd, "env -u HDF5_USE_FILE_LOCKING timeout -k 5 " MPI_TIMEOUT " ./dsgd-run --check %s", cfg);
    int rc = run(cmd, out_log, sizeof out_log);
    ck_assert_msg(rc == 0 && strstr(out_log, "OK") && !strstr(out_log, "unable to lock"), "--check with a locked shard: exit %d\n%.3000s", rc, out_log);
    /* the index and shards of a pack are only read, so a run does not lock them either */
    snprintf(cmd, sizeof cmd, "env -u HDF5_USE_FILE_LOCKING timeout -k 5 " MPI_TIMEOUT " mpiexec -n 1 ./dsgd-run %s", cfg);
    rc = run(cmd, out_log, sizeof out_log);
    ck_assert_msg(rc == 0 && !strstr(out_log, "unable to lock"), "a run with a locked shard: exit %d\n%.3000s", rc, out_log);
    close(fs), close(fi);
}
END_TEST

START_TEST(test_reproducible_ranks_threads) {
    const char *src = dirp("src");
    int rc = pack("--max-side 64 --shards 3 --seed 5 --threads 2", src, dirp("a"));
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out_log);
    rc = pack("--max-side 64 --shards 3 --seed 5 --threads 1", src, dirp("b"));
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out_log);
    ck_assert_msg(same_files(dirp("a"), dirp("b")), "1 and 2 threads gave different files");
    /* Two ranks: each writes its own shards, rank 0 the index; the same bytes. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 ./dsgd-run --pack %s %s --max-side 64 --shards 3 --seed 5 --threads 1",
             src, dirp("c"));
    rc = run(cmd, out_log, sizeof out_log);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out_log);
    ck_assert_msg(strstr(out_log, "rank 1 wrote train-00001-of-00003.h5") != NULL, "%s", out_log);
    ck_assert_msg(same_files(dirp("a"), dirp("c")), "1 and 2 ranks gave different files");
    check_train(dirp("c"));
    /* Another seed: another order. */
    rc = pack("--max-side 64 --shards 3 --seed 6", src, dirp("d"));
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out_log);
    ck_assert(!same_files(dirp("a"), dirp("d")));
    check_train(dirp("d"));
}
END_TEST

START_TEST(test_existing_out_refused) {
    const char *src = dirp("src"), *out = dirp("out");
    ck_assert_int_eq(pack("--max-side 64", src, out), 0);
    ck_assert_int_eq(system("true"), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -a %s %s", out, dirp("copy"));
    ck_assert_int_eq(system(cmd), 0);
    int rc = pack("--max-side 64 --quality 50", src, out);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out_log, "already holds files") != NULL, "%s", out_log);
    ck_assert_msg(same_files(out, dirp("copy")), "a refused pack changed OUT");
    /* Under mpiexec: every rank exits 2, nothing changed. */
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 ./dsgd-run --pack %s %s", src, out);
    ck_assert_int_eq(run(cmd, out_log, sizeof out_log), 2);
    ck_assert(same_files(out, dirp("copy")));
    /* --overwrite replaces a pack, but never a directory holding anything else. */
    snprintf(cmd, sizeof cmd, "%s/mine.txt", out);
    write_file(cmd, "keep me\n");
    rc = pack("--max-side 64 --overwrite", src, out);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out_log, "mine.txt is not a file of a dsgd-run pack") != NULL, "%s", out_log);
    ck_assert_int_eq(unlink(cmd), 0);
    ck_assert(same_files(out, dirp("copy")));
    rc = pack("--max-side 32 --overwrite", src, out);
    ck_assert_msg(rc == 0, "%s", out_log);
    shards *s;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&s, out, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(shards_max_side(s), 32);
    shards_close(s);
    /* OUT inside SRC's images is refused. */
    snprintf(cmd, sizeof cmd, "%s/train/n01", src);
    ck_assert_int_eq(pack("", src, cmd), 2);
    ck_assert_msg(strstr(out_log, "inside SRC's train images") != NULL, "%s", out_log);
}
END_TEST

/* dsgd-run --pack SRC OUT that must exit 2 naming needle, writing nothing. */
static void expect_bad(const char *src, const char *args, const char *needle) {
    const char *out = dirp("never");
    int rc = pack(args, src, out);
    ck_assert_msg(rc == 2, "exit %d, expected 2: %s", rc, out_log);
    ck_assert_msg(strstr(out_log, needle) != NULL, "'%s' not in: %s", needle, out_log);
    ck_assert_msg(access(out, F_OK) != 0, "%s was created", out);
}

START_TEST(test_bad_trees) {
    const char *src = dirp("src");
    char p[700];
    /* OUT inside the images, whether it exists yet or not: refused before anything is created */
    for (int k = 0; k < 2; k++) {
        char out[800];
        snprintf(out, sizeof out, "%s/%s/new-pack%s", src, k ? "val" : "train", k ? "/deeper" : "");
        ck_assert_int_eq(pack("", src, out), 2);
        ck_assert_msg(strstr(out_log, "lies inside SRC's") != NULL, "%s", out_log);
        ck_assert_msg(access(out, F_OK) != 0, "%s was created", out);
    }
    /* val class that is not a train class */
    snprintf(p, sizeof p, "%s/val/n99", src);
    mkdir(p, 0777);
    path_of(p, sizeof p, src, "val", "n99/x.JPEG");
    jpeg_spec js = {.w = 8, .h = 8, .comps = 3, .jpeg_cs = JCS_YCbCr};
    write_jpeg(p, &js);
    expect_bad(src, "", "class 'n99' is not among the 3 train classes");
    /* no train/ */
    snprintf(p, sizeof p, "mv %s/train %s/train.not", src, src);
    ck_assert_int_eq(system(p), 0);
    expect_bad(src, "", "no train directory");
    expect_bad(dirp("nowhere"), "", "No such file or directory");
    /* options */
    expect_bad(dirp("src"), "--quality 0", "--quality 0: expected an integer from 1 to 100");
    expect_bad(dirp("src"), "--shards 2 --shard-images 5", "choose one");
    expect_bad(dirp("src"), "--frobnicate", "unknown option '--frobnicate'");
}
END_TEST

/* A flat val/ folder with its labels from val_labels.txt, LOC_val_solution.csv or --val-labels. */
START_TEST(test_flat_val) {
    const char *src = dirp("src");
    char p[700], cmd[1600];
    snprintf(cmd, sizeof cmd, "rm -r %s/val && mkdir %s/val", src, src);
    ck_assert_int_eq(system(cmd), 0);
    const char *files[3] = {"ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG", "ILSVRC2012_val_00000003.JPEG"};
    const int labels[3] = {2, 0, 2};
    for (int i = 0; i < 3; i++) {
        jpeg_spec js = {.w = 40 + i, .h = 30, .comps = 3, .jpeg_cs = JCS_YCbCr};
        path_of(p, sizeof p, src, "val", files[i]);
        write_jpeg(p, &js);
    }
    /* no labels: refused, saying what is accepted */
    expect_bad(src, "", "val_labels.txt");
    /* Kaggle's CSV, keyed by ImageId (no extension); extra boxes after the wnid. */
    snprintf(p, sizeof p, "%s/LOC_val_solution.csv", src);
    write_file(p, "ImageId,PredictionString\n"
                  "ILSVRC2012_val_00000002,n01 10 20 30 40\n"
                  "ILSVRC2012_val_00000001,n03 1 2 3 4 n03 5 6 7 8\n"
                  "ILSVRC2012_val_00000003,n03 1 1 2 2\n");
    for (int form = 0; form < 2; form++) {
        const char *out = dirp(form ? "txt" : "csv");
        int rc = pack("--max-side 64", src, out);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, out_log);
        shards *v;
        char err[ERRLEN];
        ck_assert_msg(shards_open(&v, out, "val", err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(shards_count(v), 3);
        long n;
        char **vs = read_sources(out, "val", &n);
        for (int i = 0; i < 3; i++) {
            const int si = shards_source_index(v, i);
            ck_assert_str_eq(vs[si], files[si]);
            ck_assert_int_eq(shards_label(v, i), labels[si]);
        }
        for (long i = 0; i < n; i++) free(vs[i]);
        free(vs);
        shards_close(v);
        /* then the "<file> <wnid>" form, in place of the CSV */
        ck_assert_int_eq(unlink(p), 0);
        snprintf(p, sizeof p, "%s/val_labels.txt", src);
        write_file(p, "# file wnid\nILSVRC2012_val_00000001.JPEG n03\nILSVRC2012_val_00000002.JPEG n01\n"
                      "ILSVRC2012_val_00000003.JPEG\tn03\n");
    }
    /* an unknown wnid in the label file: named with its line */
    write_file(p, "ILSVRC2012_val_00000001.JPEG n03\nILSVRC2012_val_00000002.JPEG n77\nILSVRC2012_val_00000003.JPEG n03\n");
    expect_bad(src, "", "val_labels.txt:2: class 'n77'");
    /* a file without a label */
    write_file(p, "ILSVRC2012_val_00000001.JPEG n03\nILSVRC2012_val_00000002.JPEG n01\n");
    expect_bad(src, "", "ILSVRC2012_val_00000003.JPEG: no label for it");
    /* one file labelled twice, once by its name and once by its stem, with different classes */
    write_file(p, "ILSVRC2012_val_00000001.JPEG n03\nILSVRC2012_val_00000002.JPEG n01\nILSVRC2012_val_00000003.JPEG n03\n"
                  "ILSVRC2012_val_00000001 n01\n");
    expect_bad(src, "", "'ILSVRC2012_val_00000001.JPEG' is labelled twice (also as 'ILSVRC2012_val_00000001'");
    /* --val-labels FILE elsewhere */
    snprintf(cmd, sizeof cmd, "--val-labels %s/elsewhere.txt", g_dir);
    snprintf(p, sizeof p, "%s/elsewhere.txt", g_dir);
    write_file(p, "ILSVRC2012_val_00000001 n01\nILSVRC2012_val_00000002 n01\nILSVRC2012_val_00000003 n01\n");
    ck_assert_msg(pack(cmd, src, dirp("else")) == 0, "%s", out_log);
}
END_TEST

/* The reader refuses a truncated shard and one of another format version that --pack wrote. */
START_TEST(test_reader_refuses_damaged_pack) {
    const char *src = dirp("src"), *out = dirp("out");
    ck_assert_int_eq(pack("--max-side 64 --shards 2", src, out), 0);
    char path[700], err[ERRLEN];
    snprintf(path, sizeof path, "%s/val-00000-of-00002.h5", out);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    long long v = 2;
    ck_assert(H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0);
    H5Aclose(a), H5Fclose(f);
    shards *s = NULL;
    ck_assert_int_eq(shards_open(&s, out, "val", err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, path) && strstr(err, "format version 2"), "%s", err);
    snprintf(path, sizeof path, "%s/train-00001-of-00002.h5", out);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(truncate(path, sb.st_size * 3 / 4), 0);
    ck_assert_int_eq(shards_open(&s, out, "train", err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, path) && strstr(err, "truncated"), "%s", err);
    /* Damaged bytes inside /jpeg: the shard opens, shards_verify names the sample. */
    snprintf(path, sizeof path, "%s/train-00000-of-00002.h5", out);
    const char *one[1] = {path};
    ck_assert_msg(shards_open_files(&s, one, 1, err, sizeof err) == 0, "%s", err);
    FILE *f2 = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f2);
    /* sample 0's bytes start with FF D8 (SOI): overwrite them with zeros */
    hid_t h5 = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t dj = H5Dopen2(h5, "jpeg", H5P_DEFAULT);
    const long long at = (long long)H5Dget_offset(dj);
    H5Dclose(dj), H5Fclose(h5);
    ck_assert_int_eq(fseek(f2, at, SEEK_SET), 0);
    ck_assert_int_eq(fwrite("\0\0\0\0", 1, 4, f2), 4);
    fclose(f2);
    int64_t checked;
    ck_assert_int_eq(shards_verify(s, 1, &checked, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, path) && strstr(err, "sample 0") && strstr(err, "not a decodable JPEG"), "%s", err);
    shards_close(s);
}
END_TEST

/* jobs/slurm/pack.sbatch run as Slurm would run it (SLURM_* set by hand, 2 ranks by mpiexec). */
START_TEST(test_pack_sbatch) {
    const char *src = dirp("src");
    char cwd[512], cmd[2048];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd, "SLURM_SUBMIT_DIR=%s SLURM_JOB_ID=303 SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=1 "
             "DSGD_LAUNCH='timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2' bash jobs/slurm/pack.sbatch %s %s --max-side 64 --shards 3 --seed 5",
             cwd, src, dirp("job"));
    int rc = run(cmd, out_log, sizeof out_log);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out_log);
    ck_assert_msg(strstr(out_log, "2 rank(s) x 1 thread(s)") != NULL, "%s", out_log);
    ck_assert_int_eq(pack("--max-side 64 --shards 3 --seed 5", src, dirp("one")), 0);
    ck_assert_msg(same_files(dirp("job"), dirp("one")), "the job's pack differs from a 1-rank pack");
    ck_assert_int_eq(run("bash jobs/slurm/pack.sbatch onlysrc", out_log, sizeof out_log), 2);
    ck_assert_msg(strstr(out_log, "usage: sbatch jobs/slurm/pack.sbatch SRC OUT") != NULL, "%s", out_log);
}
END_TEST

/* ---- util.h's xgrow, the packer's buffer grower -------------------------------------------------- */

/* Doubling from 4096 elements, the content kept, the same pointer while need fits. */
START_TEST(test_xgrow_growth) {
    size_t cap = 0;
    long *v = xgrow(NULL, &cap, 10, sizeof *v);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(cap, 4096u);
    for (long i = 0; i < 4096; i++) v[i] = 3 * i + 1;
    ck_assert_ptr_eq(xgrow(v, &cap, 4096, sizeof *v), v); /* fits: untouched */
    ck_assert_uint_eq(cap, 4096u);
    v = xgrow(v, &cap, 4097, sizeof *v);
    ck_assert_uint_eq(cap, 8192u);
    v = xgrow(v, &cap, 100000, sizeof *v); /* 8192 · 16 = 131072 is the first double >= 100000 */
    ck_assert_uint_eq(cap, 131072u);
    for (long i = 0; i < 4096; i++) ck_assert_int_eq(v[i], 3 * i + 1);
    v[131071] = 7; /* the whole capacity is there */
    free(v);
    /* from a caller's own capacity (5 → 10 → 20), element size 3 */
    cap = 5;
    char *b = xgrow(malloc(15), &cap, 6, 3);
    ck_assert_uint_eq(cap, 10u);
    b = xgrow(b, &cap, 11, 3);
    ck_assert_uint_eq(cap, 20u);
    free(b);
}
END_TEST

/* xgrow(need, elem) in a child: its exit status, and its stderr into msg. */
static int xgrow_child(size_t need, size_t elem, char *msg, size_t n) {
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        size_t cap = 0;
        void *p = xgrow(NULL, &cap, need, elem);
        fprintf(stderr, "xgrow returned %p, cap %zu\n", p, cap);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fd[0], msg + got, n - 1 - got)) > 0) got += (size_t)r;
    msg[got] = '\0';
    close(fd[0]);
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* need·elem beyond size_t, and a size realloc cannot give: said, exit status 1 (EXIT_RUNTIME). */
START_TEST(test_xgrow_refusal) {
    char msg[1024];
    int st = xgrow_child(SIZE_MAX / 8 + 1, 8, msg, sizeof msg);
    ck_assert_msg(st == EXIT_RUNTIME && strstr(msg, "out of memory") && strstr(msg, "exceed the address space") &&
                      strstr(msg, "test_pack.c:"),
                  "exit %d: %s", st, msg);
    st = xgrow_child(SIZE_MAX / 16, 8, msg, sizeof msg); /* 2^63 bytes: fits size_t, no machine has it */
    ck_assert_msg(st == EXIT_RUNTIME && strstr(msg, "out of memory") && strstr(msg, "GiB could not be allocated"), "exit %d: %s", st,
                  msg);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("pack");
    TCase *tc = tcase_create("pack");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_pack_tree);
    tcase_add_test(tc, test_locked_pack);
    tcase_add_test(tc, test_reproducible_ranks_threads);
    tcase_add_test(tc, test_existing_out_refused);
    tcase_add_test(tc, test_bad_trees);
    tcase_add_test(tc, test_flat_val);
    tcase_add_test(tc, test_reader_refuses_damaged_pack);
    tcase_add_test(tc, test_pack_sbatch);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("xgrow");
    tcase_add_test(tg, test_xgrow_growth);
    tcase_add_test(tg, test_xgrow_refusal);
    suite_add_tcase(s, tg);
    return s;
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return run_suite(suite());
}
