/* bench_model.c — throughput of model_train_step (forward + backward of ResNet-18, src/nn) in
 * images per second, at one of two shapes:
 *   fmnist   (default): width 16, CIFAR stem, 1x28x28 input, 10 classes, b = 32 and 64, 1 and 2
 *            OpenMP threads — the Fashion-MNIST experiments;
 *   imagenet: width 64, ImageNet stem, 3x224x224 input, 1000 classes, b = 16 and 32, 2 threads —
 *            the papers' ResNet-18 (Jin et al. 2016 §4), 10.9 GFLOP per image per step (forward
 *            1.82 GMAC, backward twice that).
 * and in one or more precisions (fp32; bf16: convolutions on bf16 inputs, src/nn/layers.h).
 *
 * Timing as the HPC benchmarks do it: a model per configuration, warm-up steps excluded (first
 * touch of buffers, OpenMP pool, oneDNN kernel caches), then `reps` timings of `steps` steps
 * each; the table shows the median (and min/max) of the per-timing img/s, and the GFLOP/s of
 * the median (imagenet shape: 3 x 2 x MACs per image). The SGD update is not part of
 * model_train_step; a plain momentum update over the parameter vector is timed separately to
 * show its share. Compare with tools/bench_torch.py (same network and options in PyTorch);
 * tools/bench_cpu.py runs both and prints one table (make bench-paper).
 *
 *   make bench                      (builds build/bench_model and runs it, fmnist shape)
 *   build/bench_model [--shape fmnist|imagenet] [--precision fp32,bf16] [--batch 16,32]
 *                     [--threads 1,2] [--reps N] [--steps N] [--width W] [--hw HW]
 * A configuration that cannot be built (bf16 without AVX512_BF16) prints model_create's message
 * as its row and the others go on; the exit status is then 1. Exit 2 on bad arguments (naming
 * the argument), 0 for --help. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "nn/layers.h"
#include "nn/model.h"
#include "util/util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* "16,32" -> {16, 32}; returns the count (0 on a bad list). */
static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096) return 0;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return *s ? 0 : n;
}

/* The usage, after what was wrong (bad: NULL for --help, which exits 0). */
static int usage(const char *argv0, const char *bad) {
    if (bad) fprintf(stderr, "bench_model: %s\n", bad);
    fprintf(bad ? stderr : stdout,
            "usage: %s [--shape fmnist|imagenet] [--precision fp32,bf16] [--batch B[,B..] (1..4096)]\n"
            "          [--threads T[,T..] (1..4096)] [--reps 1..100] [--steps 1..100000] [--width 1..1024] [--hw 8..1024]\n",
            argv0);
    return bad ? EXIT_BADINPUT : 0;
}

/* An integer option in [lo, hi], or -1 (the whole string must be the number). */
static int int_arg(const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    const long x = strtol(v, &end, 10);
    return errno || end == v || *end || x < lo || x > hi ? -1 : (int)x;
}

/* Multiply-accumulates of one forward pass of one image (convolutions and the fc layer). */
static double forward_macs(const model_spec *s) {
    double macs = 0;
    int h = s->in_h, w = s->in_w, c = s->in_c;
    const int imagenet = s->stem == MODEL_STEM_IMAGENET;
    const int k0 = imagenet ? 7 : 3, s0 = imagenet ? 2 : 1, p0 = imagenet ? 3 : 1;
    h = (h + 2 * p0 - k0) / s0 + 1, w = (w + 2 * p0 - k0) / s0 + 1;
    macs += (double)h * w * s->width * c * k0 * k0;
    c = s->width;
    if (imagenet) h = (h + 2 - 3) / 2 + 1, w = (w + 2 - 3) / 2 + 1;
    for (int stage = 0; stage < 4; stage++) {
        const int oc = s->width << stage;
        for (int blk = 0; blk < 2; blk++) {
            const int st = stage > 0 && blk == 0 ? 2 : 1;
            const int oh = (h + 2 - 3) / st + 1, ow = (w + 2 - 3) / st + 1;
            macs += (double)oh * ow * oc * c * 9 + (double)oh * ow * oc * oc * 9;
            if (st != 1 || c != oc) macs += (double)oh * ow * oc * c;
            h = oh, w = ow, c = oc;
        }
    }
    return macs + (double)c * s->n_classes;
}

int main(int argc, char **argv) {
    int reps = -1, steps = -1, width = -1, hw = -1, imagenet = 0;
    int batches[8], nb = 0, threads[8], nt = 0, nprec = 1, failed = 0;
    model_precision precs[2] = {MODEL_FP32, MODEL_BF16};
    char bad[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(argv[0], NULL);
        snprintf(bad, sizeof bad, "%s %s: %s", a, v ? v : "", v ? "not a valid value" : "needs a value");
        if (!v) return usage(argv[0], bad);
        i++;
        if (!strcmp(a, "--shape")) {
            if (strcmp(v, "fmnist") && strcmp(v, "imagenet")) return usage(argv[0], bad);
            imagenet = !strcmp(v, "imagenet");
        } else if (!strcmp(a, "--precision")) {
            nprec = 0;
            for (const char *p = v; *p;) {
                const size_t len = strcspn(p, ",");
                if (nprec == 2) return usage(argv[0], bad);
                if (len == 4 && !strncmp(p, "fp32", 4)) precs[nprec++] = MODEL_FP32;
                else if (len == 4 && !strncmp(p, "bf16", 4)) precs[nprec++] = MODEL_BF16;
                else return usage(argv[0], bad);
                p += len + (p[len] == ',');
            }
            if (!nprec) return usage(argv[0], bad);
        } else if (!strcmp(a, "--batch")) {
            if (!(nb = parse_list(v, batches, 8))) return usage(argv[0], bad);
        } else if (!strcmp(a, "--threads")) {
            if (!(nt = parse_list(v, threads, 8))) return usage(argv[0], bad);
        } else if (!strcmp(a, "--reps")) {
            if ((reps = int_arg(v, 1, 100)) < 0) return usage(argv[0], bad);
        } else if (!strcmp(a, "--steps")) {
            if ((steps = int_arg(v, 1, 100000)) < 0) return usage(argv[0], bad);
        } else if (!strcmp(a, "--width")) {
            if ((width = int_arg(v, 1, 1024)) < 0) return usage(argv[0], bad);
        } else if (!strcmp(a, "--hw")) {
            if ((hw = int_arg(v, 8, 1024)) < 0) return usage(argv[0], bad);
        } else {
            snprintf(bad, sizeof bad, "unknown option %s", a);
            return usage(argv[0], bad);
        }
    }
    if (reps < 0) reps = imagenet ? 5 : 7;
    if (steps < 0) steps = imagenet ? 2 : 5;
    if (width < 0) width = imagenet ? 64 : 16;
    if (hw < 0) hw = imagenet ? 224 : 28;
    if (!nb) nb = imagenet ? 2 : 2, batches[0] = imagenet ? 16 : 32, batches[1] = imagenet ? 32 : 64;
    if (!nt) {
        if (imagenet) nt = 1, threads[0] = 2;
        else nt = 2, threads[0] = 1, threads[1] = 2;
    }
    const int in_c = imagenet ? 3 : 1, classes = imagenet ? 1000 : 10, warmup = imagenet ? 2 : 3;

    printf("bench_model: ResNet-18 width %d, %s stem, %dx%dx%d input, %d classes; model_train_step\n", width,
           imagenet ? "ImageNet" : "CIFAR", in_c, hw, hw, classes);
    printf("(forward + backward), %d warm-up steps, median of %d timings of %d steps; oneDNN %d.%d.%d (%s)\n\n", warmup,
           reps, steps, dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, nn_isa_name());
    printf("%9s %8s %8s %12s %12s %12s %12s %10s %10s\n", "precision", "threads", "batch", "img/s(med)", "img/s(min)",
           "img/s(max)", "ms/step", "GFLOP/s", "sgd ms");
    for (int pi = 0; pi < nprec; pi++)
        for (int ti = 0; ti < nt; ti++)
            for (int bi = 0; bi < nb; bi++) {
                const int n_thr = threads[ti], b = batches[bi];
                const char *pname = precs[pi] == MODEL_BF16 ? "bf16" : "fp32";
                omp_set_num_threads(n_thr);
                model_spec s = {.width = width, .stem = imagenet ? MODEL_STEM_IMAGENET : MODEL_STEM_CIFAR,
                                .in_c = in_c, .in_h = hw, .in_w = hw, .n_classes = classes, .batch = b,
                                .eval_batch = 0, .threads = n_thr, .precision = precs[pi]};
                char err[ERRLEN];
                model *m = model_create(&s, err, sizeof err);
                if (!m) {
                    printf("%9s %8d %8d  %s\n", pname, n_thr, b, err);
                    failed = 1;
                    continue;
                }
                model_init(m, 1);
                if (precs[pi] == MODEL_BF16 && ti == 0 && bi == 0) {
                    int total = 0;
                    char fp32_names[256];
                    const int lp = model_bf16_convs(m, &total, fp32_names, sizeof fp32_names);
                    printf("# bf16: %d of %d convolutions in bf16%s%s\n", lp, total, *fp32_names ? "; fp32: " : "", fp32_names);
                }
                rng_t r;
                rng_seed(&r, 2);
                const size_t nx = (size_t)b * in_c * hw * hw, np = model_n_params(m);
                float *x = xmalloc(nx * sizeof(float)), *v = xcalloc(np, sizeof(float));
                int *y = xmalloc((size_t)b * sizeof(int));
                for (size_t i = 0; i < nx; i++) x[i] = (float)rng_uniform(&r);
                for (int i = 0; i < b; i++) y[i] = (int)rng_below(&r, (uint64_t)classes);
                float *p = model_params(m), *g = model_grads(m);

                for (int i = 0; i < warmup; i++) model_train_step(m, x, y);
                double rate[100], sgd = 0;
                for (int k = 0; k < reps; k++) {
                    double t0 = wall_time();
                    for (int i = 0; i < steps; i++) model_train_step(m, x, y);
                    double t1 = wall_time();
                    rate[k] = (double)b * steps / (t1 - t0);
                    /* heavy-ball SGD, α = 0.01, µ = 0.9, to show what an update costs next to a step */
                    double t2 = wall_time();
#pragma omp parallel for schedule(static)
                    for (size_t j = 0; j < np; j++) {
                        v[j] = 0.9f * v[j] + g[j];
                        p[j] -= 0.01f * v[j];
                    }
                    sgd += wall_time() - t2;
                }
                qsort(rate, (size_t)reps, sizeof rate[0], cmp_double);
                const double med = rate[reps / 2];
                printf("%9s %8d %8d %12.1f %12.1f %12.1f %12.2f %10.1f %10.3f\n", pname, n_thr, b, med, rate[0],
                       rate[reps - 1], 1e3 * b / med, med * 6 * forward_macs(&s) / 1e9, 1e3 * sgd / reps);
                fflush(stdout);
                free(x), free(v), free(y);
                model_free(m);
            }
    return failed ? EXIT_RUNTIME : 0;
}
