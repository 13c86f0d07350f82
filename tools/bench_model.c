/* bench_model.c — throughput of model_train_step (forward + backward of ResNet-18, src/nn) in
 * images per second, for the configurations of the issue: width 16, CIFAR stem, 1x28x28 input
 * (Fashion-MNIST), 10 classes, b = 32 and 64, 1 and 2 OpenMP threads.
 *
 * Timing as the HPC benchmarks do it: a model per configuration, warm-up steps excluded (first
 * touch of buffers, OpenMP pool, oneDNN kernel caches), then `reps` timings of `steps` steps
 * each; the table shows the median (and min/max) of the per-timing img/s. The SGD update is not
 * part of model_train_step; a plain momentum update over the parameter vector is timed
 * separately to show its share. Compare with tools/bench_torch.py (same network in PyTorch).
 *
 *   make bench                      (builds build/bench_model and runs it)
 *   build/bench_model [reps] [steps] [width] [hw]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "nn/model.h"
#include "util/util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    const int steps = argc > 2 ? atoi(argv[2]) : 5;
    const int width = argc > 3 ? atoi(argv[3]) : 16;
    const int hw = argc > 4 ? atoi(argv[4]) : 28;
    const int warmup = 3;
    const int batches[] = {32, 64};
    const int threads[] = {1, 2};
    if (reps < 1 || steps < 1 || reps > 100) {
        fprintf(stderr, "usage: %s [reps 1..100] [steps >= 1] [width] [hw]\n", argv[0]);
        return EXIT_BADINPUT;
    }

    printf("bench_model: ResNet-18 width %d, CIFAR stem, 1x%dx%d input, 10 classes; model_train_step\n", width, hw, hw);
    printf("(forward + backward), %d warm-up steps, median of %d timings of %d steps; oneDNN %d.%d.%d\n\n", warmup,
           reps, steps, dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch);
    printf("%8s %8s %12s %12s %12s %12s %10s\n", "threads", "batch", "img/s(med)", "img/s(min)", "img/s(max)",
           "ms/step", "sgd ms");
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            const int nt = threads[ti], b = batches[bi];
            omp_set_num_threads(nt);
            model_spec s = {.width = width, .stem = MODEL_STEM_CIFAR, .in_c = 1, .in_h = hw, .in_w = hw,
                            .n_classes = 10, .batch = b, .eval_batch = b, .threads = nt};
            char err[ERRLEN];
            model *m = model_create(&s, err, sizeof err);
            if (!m) {
                fprintf(stderr, "bench_model: %s\n", err);
                return EXIT_RUNTIME;
            }
            model_init(m, 1);
            rng_t r;
            rng_seed(&r, 2);
            const size_t nx = (size_t)b * hw * hw, np = model_n_params(m);
            float *x = xmalloc(nx * sizeof(float)), *v = xcalloc(np, sizeof(float));
            int *y = xmalloc((size_t)b * sizeof(int));
            for (size_t i = 0; i < nx; i++) x[i] = (float)rng_uniform(&r);
            for (int i = 0; i < b; i++) y[i] = (int)rng_below(&r, 10);
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
            printf("%8d %8d %12.1f %12.1f %12.1f %12.2f %10.3f\n", nt, b, med, rate[0], rate[reps - 1], 1e3 * b / med,
                   1e3 * sgd / reps);
            fflush(stdout);
            free(x), free(v), free(y);
            model_free(m);
        }
    }
    return 0;
}
