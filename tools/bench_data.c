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
 * Output floats go to one (3, 224, 224) buffer, as a loader writes into a batch slot. */
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

/* The best of passes timed passes over all n images (one warm-up pass first): images per second
 * of wall time and of this thread's CPU time. c NULL: decode only, the whole image at full size. */
static void bench_case(image_dec *d, const aug_cfg *c, const blob *b, int n, int passes, float *out, double *best,
                       double *best_cpu) {
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
            } else {
                rc = aug_sample(d, c, 1, (uint64_t)pass, (uint64_t)i, b[i].bytes, b[i].n, out, NULL, &warn, err, sizeof err);
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
        aug_draw_params(c, 1, 1, (uint64_t)i, h, w, &p);
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
        fprintf(stderr, "usage: %s DIR [passes] [scalar] [dct]\n", argv[0]);
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
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (only && strcmp(only, cases[k].name)) continue;
        aug_cfg c;
        aug_default(&c, cases[k].kind < 0 ? AUG_SCALE : cases[k].kind);
        c.interp = cases[k].interp;
        double best, best_cpu;
        bench_case(d, cases[k].kind < 0 ? NULL : &c, b, n, passes, out, &best, &best_cpu);
        printf("%s %.1f %.1f\n", cases[k].name, best, best_cpu);
        fflush(stdout);
        if (!dct || cases[k].kind < 0) continue;
        c.dct_scale = 1;
        bench_case(d, &c, b, n, passes, out, &best, &best_cpu);
        printf("%s_dct %.1f %.1f\n", cases[k].name, best, best_cpu);
        double mean;
        int max, share[9] = {0};
        pixel_change(d, &c, b, n, &mean, &max, share);
        printf("%s_dct_pixels %.3f %d %.2f %.2f %.2f\n", cases[k].name, mean, max, (double)share[2] / n,
               (double)share[4] / n, (double)share[8] / n);
        fflush(stdout);
    }
    image_dec_free(d);
    free(out);
    for (int i = 0; i < n; i++) free(b[i].bytes);
    free(b);
    return 0;
}
