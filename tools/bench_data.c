/* bench_data.c — images/s of one core decoding and augmenting JPEGs (src/data/image.c,
 * src/data/augment.c), the C half of `make bench-data` (tools/bench_data_torch.py runs
 * torchvision on the same files and prints both side by side).
 *
 *   build/bench_data DIR [passes] [scalar] [dct] [only=CASE]
 *
 * Reads every *.jpg of DIR into memory, then for each case runs passes (default 5) over all of
 * them on this thread and prints "case images/s cpu_images/s" for the best pass (warm-up: one
 * pass first): images per second of wall time, and per second of this thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID: what one core feeds when it is not shared; on a busy machine the
 * wall rate falls with the share of the core we get, the CPU rate far less).
 * "scalar": the resampler's scalar passes (image_simd(0)) instead of the best the CPU runs.
 * "dct": each augmentation case also with data.dct_scale = true (aug_cfg.dct_scale), printed as
 * CASE_dct right after CASE, then one line "CASE_dct_pixels mean max share2 share4 share8": the
 * mean and largest |Δ| in u8 levels between its crops and the full-size decode's (before flip
 * and colour; the draws of pass 1), and the share of images decoded at 1/2, 1/4 and 1/8. The
 * decode case is the whole image at full size either way (torchvision's decode_jpeg does the
 * same), so it has no _dct row.
 * "only=CASE": that case alone (for perf record; CASE as printed, e.g. rrc_bilinear).
 * Output floats go to one (3, 224, 224) buffer, as a loader writes into a batch slot.
 *
 * After each augmentation case CASE, "decode_rect_CASE": aug_sample's decode and nothing else —
 * the same draws (aug_draw_params with the same seed, epoch = pass and index), aug_dct_denom,
 * aug_source_rect and image_open + image_decode_rect_scaled_open (one header read) — i.e. the decoding a training or evaluation
 * sample costs (rows above the rect entropy-decoded only, rows below never read, columns
 * outside it not inverse-transformed). Then one line "decode_rect_CASE_share rect decoded
 * entropy" over the draws of pass 1, each a mean over the images of a share of the image's
 * pixels (of the 1/k image when DCT-scaled): rect, the rows × columns the output reads
 * (aug_source_rect); decoded, the rows × columns libjpeg inverse-transforms and colour-converts
 * for it — the columns of jpeg_crop_scanline's iMCU-aligned span (the returned stride), the
 * iMCU rows from one iMCU above the rect to its last row (an estimate: libjpeg may read one more
 * iMCU row of context for fancy upsampling); entropy, the rows whose coefficients are
 * Huffman-decoded (every column of the iMCU rows down to the rect's last), which no region
 * decode can skip in a baseline JPEG without restart markers. With "dct", also
 * decode_rect_CASE_dct and its _share line. */
#include <dirent.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/augment.h"
#include "data/image.h"
#include "util/util.h"

typedef struct {
    uint8_t *bytes;
    size_t n;
} blob;

static int load_dir(const char *dir, blob **out) {
    DIR *dp = opendir(dir);
    if (!dp) DIE("cannot open %s", dir);
    struct dirent *e;
    int n = 0, cap = 0;
    blob *b = NULL;
    char path[4096];
    while ((e = readdir(dp))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 4, ".jpg")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) DIE("cannot open %s", path);
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        rewind(f);
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            b = realloc(b, (size_t)cap * sizeof *b);
        }
        b[n].bytes = xmalloc((size_t)sz);
        b[n].n = fread(b[n].bytes, 1, (size_t)sz, f);
        fclose(f);
        n++;
    }
    closedir(dp);
    *out = b;
    return n;
}

static double cpu_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { SEED = 1 }; /* the run seed of every case */

/* aug_sample's decode of sample index in epoch, and nothing after it: the rect r of the image
 * at scale 1/k that the output reads, decoded; k, r, the row stride of the decoded span (bytes)
 * and the size hk × wk of the 1/k image are returned. Returns image_decode_rect_scaled_open's 0, or
 * -1 with err. */
static int decode_rect(image_dec *d, const aug_cfg *c, uint64_t epoch, uint64_t index, const blob *b, int *k, int r[4],
                       size_t *stride, int *hk, int *wk, char *err) {
    int h, w, warn;
    if (image_open(d, b->bytes, b->n, &h, &w, err, ERRLEN)) return -1;
    aug_draw p;
    aug_draw_params(c, SEED, epoch, index, h, w, &p);
    *k = aug_dct_denom(c, &p);
    aug_source_rect(c, &p, *k, r);
    *hk = (h + *k - 1) / *k;
    *wk = (w + *k - 1) / *k;
    const uint8_t *px;
    return image_decode_rect_scaled_open(d, *k, r[0], r[1], r[2], r[3], &px, stride, &warn, err, ERRLEN);
}

/* The largest vertical sampling factor of the JPEG's components (its SOF marker; 1 if none is
 * found): an iMCU row is 8 · that rows of the full-size image. */
static int max_vsamp(const blob *b) {
    const uint8_t *q = b->bytes, *end = b->bytes + b->n;
    q += 2; /* SOI */
    while (q + 4 <= end) {
        if (q[0] != 0xFF) return 1;
        const int m = q[1], len = q[2] << 8 | q[3];
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) { /* SOFn */
            if (q + 10 > end) return 1;
            const int nc = q[9];
            int v = 1;
            for (int i = 0; i < nc && q + 13 + 3 * i <= end; i++) {
                const int f = q[11 + 3 * i] & 15;
                v = f > v ? f : v;
            }
            return v;
        }
        q += 2 + len;
    }
    return 1;
}

/* decode_rect's shares of the image's pixels over the draws of pass 1 (see the header). */
static void rect_shares(image_dec *d, const aug_cfg *c, const blob *b, int n, double share[3]) {
    char err[ERRLEN];
    share[0] = share[1] = share[2] = 0;
    for (int i = 0; i < n; i++) {
        int k, r[4], hk, wk;
        size_t stride;
        if (decode_rect(d, c, 1, (uint64_t)i, &b[i], &k, r, &stride, &hk, &wk, err)) DIE("sample %d: %s", i, err);
        const double area = (double)hk * wk;
        const int imcu = 8 * max_vsamp(&b[i]) / k; /* an iMCU row of the 1/k image */
        const int ry = r[0] > imcu ? r[0] - imcu : 0;
        int top = ry / imcu * imcu, bottom = (r[1] + imcu - 1) / imcu * imcu;
        bottom = bottom < hk ? bottom : hk;
        share[0] += (double)(r[1] - r[0]) * (r[3] - r[2]) / area;
        share[1] += (double)(bottom - top) * (double)(stride / 3) / area;
        share[2] += (double)bottom / hk;
    }
    for (int j = 0; j < 3; j++) share[j] /= n;
}

/* The best of passes timed passes over all n images (one warm-up pass first): images per second
 * of wall time and of this thread's CPU time. c NULL: decode only, the whole image at full size;
 * rect_only: aug_sample's decode of c's sample alone (decode_rect). */
static void bench_case(image_dec *d, const aug_cfg *c, int rect_only, const blob *b, int n, int passes, float *out,
                       double *best, double *best_cpu) {
    char err[ERRLEN];
    *best = *best_cpu = 0;
    for (int pass = 0; pass <= passes; pass++) {
        double t0 = wall_time(), c0 = cpu_time();
        for (int i = 0; i < n; i++) {
            int warn, rc;
            if (!c) {
                const uint8_t *rgb;
                int h, w;
                rc = image_decode_rgb(d, b[i].bytes, b[i].n, 1, &rgb, &h, &w, &warn, err, sizeof err);
            } else if (rect_only) {
                int k, r[4], hk, wk;
                size_t stride;
                rc = decode_rect(d, c, (uint64_t)pass, (uint64_t)i, &b[i], &k, r, &stride, &hk, &wk, err);
            } else {
                rc = aug_sample(d, c, SEED, (uint64_t)pass, (uint64_t)i, b[i].bytes, b[i].n, out, NULL, &warn, err,
                                sizeof err);
            }
            if (rc) DIE("sample %d: %s", i, err);
        }
        double rate = n / (wall_time() - t0), rate_cpu = n / (cpu_time() - c0);
        if (pass > 0 && rate > *best) *best = rate; /* pass 0: warm-up */
        if (pass > 0 && rate_cpu > *best_cpu) *best_cpu = rate_cpu;
    }
}

/* How data.dct_scale changes c's crops (c->dct_scale = 1) on the draws of pass 1: mean and largest
 * |Δ| in u8 levels against the crops of the full-size decode, and how many images each scale got. */
static void pixel_change(image_dec *d, const aug_cfg *c, const blob *b, int n, double *mean, int *max, int share[9]) {
    char err[ERRLEN];
    const size_t np = (size_t)c->crop * c->crop * 3;
    uint8_t *a = xmalloc(np), *k1 = xmalloc(np);
    aug_cfg c0 = *c;
    c0.dct_scale = 0;
    double sum = 0;
    *max = 0;
    for (int i = 0; i < n; i++) {
        int h, w, hk, wk, warn;
        const uint8_t *rgb;
        if (image_read_size(d, b[i].bytes, b[i].n, &h, &w, err, sizeof err)) DIE("sample %d: %s", i, err);
        aug_draw p;
        aug_draw_params(c, SEED, 1, (uint64_t)i, h, w, &p);
        const int k = aug_dct_denom(c, &p);
        share[k]++;
        for (int v = 0; v < 2; v++) {
            const int kv = v ? k : 1;
            if (image_decode_rgb(d, b[i].bytes, b[i].n, kv, &rgb, &hk, &wk, &warn, err, sizeof err)) DIE("sample %d: %s", i, err);
            image_view view = {rgb, hk, wk, 0, 0, (size_t)wk * 3};
            aug_crop_u8(d, v ? c : &c0, &p, &view, v ? a : k1);
        }
        for (size_t j = 0; j < np; j++) {
            int e = abs((int)a[j] - (int)k1[j]);
            sum += e;
            *max = e > *max ? e : *max;
        }
    }
    *mean = sum / ((double)np * n);
    free(a);
    free(k1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [passes] [scalar] [dct] [only=CASE]\n", argv[0]);
        return 2;
    }
    int passes = argc > 2 ? atoi(argv[2]) : 5, dct = 0;
    const char *only = NULL;
    for (int a = 3; a < argc; a++) {
        if (!strcmp(argv[a], "scalar")) image_simd(0);
        else if (!strcmp(argv[a], "dct")) dct = 1;
        else if (!strncmp(argv[a], "only=", 5)) only = argv[a] + 5;
        else DIE("unknown option %s (scalar, dct, only=CASE)", argv[a]);
    }
    blob *b;
    int n = load_dir(argv[1], &b);
    if (n == 0) DIE("no .jpg files in %s", argv[1]);
    image_dec *d = image_dec_new();
    float *out = xmalloc((size_t)3 * 224 * 224 * sizeof(float));
    struct {
        const char *name;
        int kind, interp; /* kind -1: decode only */
    } cases[] = {
        {"decode", -1, 0},
        {"scale_bicubic", AUG_SCALE, IMAGE_BICUBIC},
        {"scale_bilinear", AUG_SCALE, IMAGE_BILINEAR},
        {"rrc_bilinear", AUG_RRC, IMAGE_BILINEAR},
        {"eval_bilinear", AUG_EVAL, IMAGE_BILINEAR},
    };
    int ran = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char rect_name[64];
        snprintf(rect_name, sizeof rect_name, "decode_rect_%s", cases[k].name);
        const int run_case = !only || !strcmp(only, cases[k].name);
        const int run_rect = cases[k].kind >= 0 && (!only || !strcmp(only, rect_name));
        if (!run_case && !run_rect) continue;
        ran++;
        aug_cfg c;
        aug_default(&c, cases[k].kind < 0 ? AUG_SCALE : cases[k].kind);
        c.interp = cases[k].interp;
        double best, best_cpu;
        if (run_case) {
            bench_case(d, cases[k].kind < 0 ? NULL : &c, 0, b, n, passes, out, &best, &best_cpu);
            printf("%s %.1f %.1f\n", cases[k].name, best, best_cpu);
            fflush(stdout);
        }
        if (run_case && dct && cases[k].kind >= 0) {
            aug_cfg cd = c;
            cd.dct_scale = 1;
            bench_case(d, &cd, 0, b, n, passes, out, &best, &best_cpu);
            printf("%s_dct %.1f %.1f\n", cases[k].name, best, best_cpu);
            double mean;
            int max, at[9] = {0};
            pixel_change(d, &cd, b, n, &mean, &max, at);
            printf("%s_dct_pixels %.3f %d %.2f %.2f %.2f\n", cases[k].name, mean, max, (double)at[2] / n,
                   (double)at[4] / n, (double)at[8] / n);
            fflush(stdout);
        }
        for (int v = 0; run_rect && v <= dct; v++) { /* v = 1: with data.dct_scale */
            aug_cfg cr = c;
            cr.dct_scale = v;
            double share[3];
            bench_case(d, &cr, 1, b, n, passes, out, &best, &best_cpu);
            rect_shares(d, &cr, b, n, share);
            printf("%s%s %.1f %.1f\n", rect_name, v ? "_dct" : "", best, best_cpu);
            printf("%s%s_share %.4f %.4f %.4f\n", rect_name, v ? "_dct" : "", share[0], share[1], share[2]);
            fflush(stdout);
        }
    }
    if (!ran) {
        fprintf(stderr, "bench_data: only=%s: no such case (decode, scale_bicubic, scale_bilinear, rrc_bilinear, "
                        "eval_bilinear, or decode_rect_ and one of the last four)\n", only);
        return 2;
    }
    image_dec_free(d);
    free(out);
    for (int i = 0; i < n; i++) free(b[i].bytes);
    free(b);
    return 0;
}
