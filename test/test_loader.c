/* test_loader.c — the data loader (src/data/loader.c): the per-epoch permutation, the
 * sharding of each step's m = p·b samples over the ranks (Jin et al. §2), evaluation slices,
 * normalisation against closed-form mean/std, and the real Fashion-MNIST statistics. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/idx.h"
#include "data/loader.h"
#include "testutil.h"
#include "util/util.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* A synthetic set of n samples (c, h, w): pixel bytes from an RNG, label = i mod 10. */
static dataset make_set(int n, int c, int h, int w, uint64_t seed) {
    dataset d = {.n = n, .c = c, .h = h, .w = w, .n_classes = 10};
    size_t nb = (size_t)n * c * h * w;
    d.x = xmalloc(nb);
    d.y = xmalloc((size_t)n);
    rng_t r;
    rng_seed(&r, seed);
    for (size_t k = 0; k < nb; k++) d.x[k] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < n; i++) d.y[i] = (uint8_t)(i % 10);
    return d;
}

static void assert_is_permutation(const uint32_t *perm, int n) {
    uint8_t *seen = xcalloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        ck_assert_uint_lt(perm[i], (unsigned)n);
        ck_assert_msg(!seen[perm[i]], "value %u appears twice", perm[i]);
        seen[perm[i]] = 1;
    }
    free(seen);
}

START_TEST(permutation_properties) {
    int ns[] = {1, 2, 7, 997, 1003, 60000};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int n = ns[k];
        uint32_t *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4), *c = xmalloc((size_t)n * 4);
        loader_permutation(a, n, 1234, 0);
        assert_is_permutation(a, n);
        loader_permutation(b, n, 1234, 0);
        ck_assert_mem_eq(a, b, (size_t)n * 4); /* deterministic for (seed, epoch) */
        loader_permutation(b, n, 1234, 1);
        loader_permutation(c, n, 1235, 0);
        assert_is_permutation(b, n);
        assert_is_permutation(c, n);
        if (n >= 7) {
            ck_assert_msg(memcmp(a, b, (size_t)n * 4) != 0, "epoch 1 equals epoch 0 (n = %d)", n);
            ck_assert_msg(memcmp(a, c, (size_t)n * 4) != 0, "seed 1235 equals seed 1234 (n = %d)", n);
        }
        if (n >= 997) { /* a real shuffle: few fixed points (expected 1) */
            int fixed = 0;
            for (int i = 0; i < n; i++) fixed += a[i] == (uint32_t)i;
            ck_assert_int_lt(fixed, 10);
        }
        free(a);
        free(b);
        free(c);
    }
}
END_TEST

START_TEST(permutation_uniform) {
    /* Over many epochs each of the 3! orders of n = 3 appears ~1/6 of the time (Fisher–Yates
     * with an unbiased rng_below is exactly uniform). */
    int count[6] = {0}, epochs = 60000;
    uint32_t p[3];
    for (int e = 0; e < epochs; e++) {
        loader_permutation(p, 3, 99, e);
        int code = (int)(p[0] * 2 + (p[1] > p[2])); /* 0..5, unique per order */
        count[code]++;
    }
    for (int k = 0; k < 6; k++) ck_assert_msg(fabs(count[k] - epochs / 6.0) < 5 * sqrt(epochs / 6.0),
                                              "order %d drawn %d times of %d", k, count[k], epochs);
}
END_TEST

/* For one (n, p, b): all ranks' loaders agree on S; within an epoch every sample is used at
 * most once over all steps and ranks, exactly S*m are used, and rank r at step s holds
 * π_e[s·m + r·b + j]. Epochs 0 and 1 are checked, the boundary t = S included. */
static void check_sharding(int n, int p, int b, uint64_t seed) {
    dataset d = make_set(n, 1, 2, 2, 7);
    loader *l = xmalloc((size_t)p * sizeof *l);
    char err[ERRLEN];
    for (int r = 0; r < p; r++) ck_assert_msg(loader_init(&l[r], &d, p, r, b, seed, err, sizeof err) == 0, "%s", err);
    long S = n / (p * b), m = (long)p * b;
    for (int r = 0; r < p; r++) ck_assert_int_eq(l[r].steps_per_epoch, S);
    ck_assert_int_ge(S, 1);

    uint32_t *perm = xmalloc((size_t)n * 4);
    int *used = xmalloc((size_t)n * sizeof *used);
    int *idx = xmalloc((size_t)b * sizeof *idx);
    for (int e = 0; e < 2; e++) {
        loader_permutation(perm, n, seed, e);
        memset(used, 0, (size_t)n * sizeof *used);
        long total = 0;
        for (long s = 0; s < S; s++) {
            for (int r = 0; r < p; r++) {
                loader_indices(&l[r], e * S + s, idx);
                ck_assert_int_eq(l[r].epoch, e);
                for (int j = 0; j < b; j++) {
                    ck_assert_int_ge(idx[j], 0);
                    ck_assert_int_lt(idx[j], n);
                    ck_assert_uint_eq((unsigned)idx[j], perm[s * m + r * b + j]);
                    ck_assert_msg(!used[idx[j]], "sample %d used twice in epoch %d (n=%d p=%d)", idx[j], e, n, p);
                    used[idx[j]] = 1;
                    total++;
                }
            }
        }
        ck_assert_int_eq(total, S * m);
        /* The unused n - S*m samples are exactly the tail of the permutation. */
        for (long k = S * m; k < n; k++) ck_assert_int_eq(used[perm[k]], 0);
    }
    /* Epoch boundary: t = S - 1 is the last step of epoch 0, t = S the first of epoch 1, and
     * going back regenerates epoch 0. */
    for (int r = 0; r < p; r++) {
        loader_indices(&l[r], S, idx);
        ck_assert_int_eq(l[r].epoch, 1);
        loader_permutation(perm, n, seed, 1);
        for (int j = 0; j < b; j++) ck_assert_uint_eq((unsigned)idx[j], perm[r * b + j]);
        loader_indices(&l[r], S - 1, idx);
        ck_assert_int_eq(l[r].epoch, 0);
        loader_permutation(perm, n, seed, 0);
        for (int j = 0; j < b; j++) ck_assert_uint_eq((unsigned)idx[j], perm[(S - 1) * m + r * b + j]);
        loader_indices(&l[r], 5 * S + S / 2, idx); /* far ahead: epoch 5, step S/2 */
        ck_assert_int_eq(l[r].epoch, 5);
        loader_permutation(perm, n, seed, 5);
        for (int j = 0; j < b; j++) ck_assert_uint_eq((unsigned)idx[j], perm[(S / 2) * m + r * b + j]);
    }
    for (int r = 0; r < p; r++) loader_free(&l[r]);
    free(l);
    free(perm);
    free(used);
    free(idx);
    dataset_free(&d);
}

START_TEST(sharding_uneven) {
    int ns[] = {1003, 997};
    for (int k = 0; k < 2; k++)
        for (int p = 1; p <= 4; p++) check_sharding(ns[k], p, 7, 42);
}
END_TEST

START_TEST(sharding_edges) {
    check_sharding(28, 4, 7, 1);  /* n = m: one step per epoch, nothing left over */
    check_sharding(55, 4, 7, 2);  /* n = 2m - 1: one step, 27 left over */
    check_sharding(10, 3, 1, 3);  /* b = 1 */
    check_sharding(5, 1, 5, 4);   /* p = 1, whole set per step */
}
END_TEST

START_TEST(epochs_differ) {
    /* Consecutive epochs use different batches; different seeds too. */
    dataset d = make_set(1003, 1, 2, 2, 7);
    loader a, b;
    char err[ERRLEN];
    ck_assert_int_eq(loader_init(&a, &d, 2, 1, 7, 42, err, sizeof err), 0);
    ck_assert_int_eq(loader_init(&b, &d, 2, 1, 7, 43, err, sizeof err), 0);
    long S = a.steps_per_epoch;
    ck_assert_int_eq(S, 71);
    int i0[7], i1[7], i2[7];
    loader_indices(&a, 3, i0);
    loader_indices(&a, S + 3, i1);
    loader_indices(&b, 3, i2);
    ck_assert_msg(memcmp(i0, i1, sizeof i0) != 0, "epochs 0 and 1 give the same batch");
    ck_assert_msg(memcmp(i0, i2, sizeof i0) != 0, "seeds 42 and 43 give the same batch");
    loader_free(&a);
    loader_free(&b);
    dataset_free(&d);
}
END_TEST

START_TEST(batch_matches_gather) {
    /* loader_batch = loader_gather of loader_indices, and the perm buffer is never replaced
     * (allocated once in loader_init; regenerated in place each epoch). */
    dataset d = make_set(100, 3, 4, 5, 11);
    loader l;
    char err[ERRLEN];
    ck_assert_msg(loader_init(&l, &d, 3, 2, 8, 5, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(l.steps_per_epoch, 4);
    const uint32_t *perm0 = l.perm;
    int chw = 3 * 4 * 5, idx[8], y[8], yg[8];
    float x[8 * 60], xg[8 * 60];
    for (long t = 0; t < 13; t++) {
        loader_batch(&l, t, x, y);
        ck_assert_ptr_eq(l.perm, perm0);
        loader_indices(&l, t, idx);
        loader_gather(&l, &d, idx, 8, xg, yg);
        ck_assert_mem_eq(x, xg, sizeof x);
        ck_assert_mem_eq(y, yg, sizeof y);
        for (int j = 0; j < 8; j++) {
            ck_assert_int_eq(y[j], d.y[idx[j]]);
            for (int ch = 0; ch < 3; ch++) {
                int k = ch * 20 + 13;
                double want = (d.x[(size_t)idx[j] * chw + k] / 255.0 - l.mean[ch]) / l.std[ch];
                ck_assert_close(x[j * chw + k], want, 1e-5);
            }
        }
    }
    loader_free(&l);
    ck_assert_ptr_null(l.perm);
    dataset_free(&d);
}
END_TEST

START_TEST(normalisation_closed_form) {
    /* 2 channels, 4 samples of 1 x 2 pixels. Channel 0 holds 0 and 255 equally often:
     * mean 0.5, std 0.5. Channel 1 holds 51, 102, 153, 204 (= 0.2, 0.4, 0.6, 0.8) twice each:
     * mean 0.5, population std sqrt(0.05). */
    const uint8_t ch0[8] = {0, 255, 255, 0, 0, 0, 255, 255};
    const uint8_t ch1[8] = {51, 204, 102, 153, 153, 102, 204, 51};
    dataset d = {.n = 4, .c = 2, .h = 1, .w = 2, .n_classes = 2};
    d.x = xmalloc(16);
    d.y = xmalloc(4);
    for (int i = 0; i < 4; i++) {
        memcpy(d.x + i * 4, ch0 + 2 * i, 2);
        memcpy(d.x + i * 4 + 2, ch1 + 2 * i, 2);
        d.y[i] = (uint8_t)(i % 2);
    }
    loader l;
    char err[ERRLEN];
    ck_assert_msg(loader_init(&l, &d, 1, 0, 4, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_close(l.mean[0], 0.5, 1e-7);
    ck_assert_close(l.std[0], 0.5, 1e-7);
    ck_assert_close(l.mean[1], 0.5, 1e-7);
    ck_assert_close(l.std[1], sqrt(0.05), 1e-7);
    float x[16];
    int y[4];
    loader_batch(&l, 0, x, y); /* b = n: the whole set, permuted */
    for (int ch = 0; ch < 2; ch++) {
        double s = 0, ss = 0;
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 2; k++) {
                double v = x[i * 4 + ch * 2 + k];
                s += v;
                ss += v * v;
            }
        ck_assert_close(s / 8, 0.0, 1e-6);
        ck_assert_close(sqrt(ss / 8 - (s / 8) * (s / 8)), 1.0, 1e-6);
    }
    /* Exact values: channel 0 maps to ±1, channel 1 to ±1/sqrt(5), ±3/sqrt(5). */
    int idx[4] = {0, 1, 2, 3};
    loader_gather(&l, &d, idx, 4, x, y);
    ck_assert_close(x[0], -1.0, 1e-6);
    ck_assert_close(x[1], 1.0, 1e-6);
    ck_assert_close(x[2], -3 / sqrt(5), 1e-6);
    ck_assert_close(x[3], 3 / sqrt(5), 1e-6);
    ck_assert_close(x[6], -1 / sqrt(5), 1e-6);
    loader_free(&l);
    dataset_free(&d);
}
END_TEST

START_TEST(normalisation_random_set) {
    /* A larger random set: the normalised set has per-channel mean 0 and std 1. */
    dataset d = make_set(500, 3, 8, 8, 3);
    loader l;
    char err[ERRLEN];
    ck_assert_msg(loader_init(&l, &d, 1, 0, 1, 0, err, sizeof err) == 0, "%s", err);
    float x[3 * 64];
    int y, idx;
    double s[3] = {0}, ss[3] = {0};
    for (idx = 0; idx < d.n; idx++) {
        loader_gather(&l, &d, &idx, 1, x, &y);
        for (int ch = 0; ch < 3; ch++)
            for (int k = 0; k < 64; k++) {
                s[ch] += x[ch * 64 + k];
                ss[ch] += (double)x[ch * 64 + k] * x[ch * 64 + k];
            }
    }
    for (int ch = 0; ch < 3; ch++) {
        double cnt = 500.0 * 64, mean = s[ch] / cnt;
        ck_assert_close(mean, 0.0, 1e-5);
        ck_assert_close(sqrt(ss[ch] / cnt - mean * mean), 1.0, 1e-5);
        ck_assert_close(l.mean[ch], 0.5, 0.01); /* uniform bytes: mean 127.5/255, std ~0.2898 */
        ck_assert_close(l.std[ch], sqrt((256.0 * 256.0 - 1) / 12) / 255, 0.01);
    }
    loader_free(&l);
    dataset_free(&d);
}
END_TEST

START_TEST(init_errors) {
    dataset d = make_set(20, 1, 2, 2, 1);
    loader l;
    char err[ERRLEN] = "";
    ck_assert_int_eq(loader_init(&l, &d, 3, 0, 7, 0, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "20 samples") && strstr(err, "m = p*b = 3*7 = 21"), "%s", err);
    ck_assert_ptr_null(l.perm);
    loader_free(&l); /* safe after a failed init */
    ck_assert_int_eq(loader_init(&l, &d, 2, 2, 1, 0, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "rank = 2"), "%s", err);
    ck_assert_int_eq(loader_init(&l, &d, 2, 0, 0, 0, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "b = 0"), "%s", err);
    memset(d.x, 17, 80); /* constant images */
    ck_assert_int_eq(loader_init(&l, &d, 1, 0, 1, 0, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "constant"), "%s", err);
    d.c = 5;
    d.h = 2;
    d.w = 2; /* claims 5 channels (only the error path reads it) */
    ck_assert_int_eq(loader_init(&l, &d, 1, 0, 1, 0, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "5 channels"), "%s", err);
    dataset_free(&d);
}
END_TEST

static void check_eval_slices(int n, int p) {
    int *hits = xcalloc((size_t)n, sizeof *hits);
    int prev_end = 0;
    for (int r = 0; r < p; r++) {
        int b, e;
        eval_slice(n, p, r, &b, &e);
        ck_assert_int_eq(b, (int)((long long)r * n / p));
        ck_assert_int_eq(b, prev_end); /* contiguous, in rank order */
        ck_assert_int_le(b, e);
        ck_assert_int_le(e - b, n / p + 1); /* balanced */
        ck_assert_int_ge(e - b, n / p);
        for (int i = b; i < e; i++) hits[i]++;
        prev_end = e;
    }
    ck_assert_int_eq(prev_end, n);
    for (int i = 0; i < n; i++) ck_assert_msg(hits[i] == 1, "n=%d p=%d: sample %d evaluated %d times", n, p, i, hits[i]);
    free(hits);
}

START_TEST(eval_slices) {
    for (int p = 1; p <= 5; p++) {
        check_eval_slices(10000, p);
        check_eval_slices(7, p);
    }
    check_eval_slices(3, 5); /* more ranks than samples: some slices empty */
    int b, e;
    eval_slice(7, 3, 0, &b, &e);
    ck_assert(b == 0 && e == 2);
    eval_slice(7, 3, 1, &b, &e);
    ck_assert(b == 2 && e == 4);
    eval_slice(7, 3, 2, &b, &e);
    ck_assert(b == 4 && e == 7);
}
END_TEST

START_TEST(real_statistics) {
    const char *img = FMNIST_DIR "/train-images-idx3-ubyte.gz", *lbl = FMNIST_DIR "/train-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0 || access(lbl, R_OK) != 0) {
        printf("test_loader: NOTE: Fashion-MNIST not found in %s, real-data test skipped\n", FMNIST_DIR);
        return;
    }
    dataset d;
    char err[ERRLEN];
    ck_assert_msg(dataset_load(&d, img, lbl, 10, err, sizeof err) == 0, "%s", err);
    loader l;
    double t0 = wall_time();
    ck_assert_msg(loader_init(&l, &d, 4, 3, 32, 1, err, sizeof err) == 0, "%s", err);
    printf("test_loader: Fashion-MNIST mean %.6f std %.6f (statistics in %.3f s)\n", l.mean[0], l.std[0],
           wall_time() - t0);
    ck_assert_close(l.mean[0], 0.2860, 5e-4);
    ck_assert_close(l.std[0], 0.3530, 5e-4);
    ck_assert_int_eq(l.steps_per_epoch, 60000 / 128);
    float *x = xmalloc(32 * 784 * sizeof *x);
    int y[32];
    loader_batch(&l, 468, x, y); /* first step of epoch 1 */
    ck_assert_int_eq(l.epoch, 1);
    for (int j = 0; j < 32; j++) ck_assert(y[j] >= 0 && y[j] < 10);
    for (int k = 0; k < 32 * 784; k++) ck_assert(x[k] >= -0.8103f && x[k] <= 2.0226f); /* (0 - µ)/σ .. (1 - µ)/σ */
    free(x);
    loader_free(&l);
    dataset_free(&d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("synthetic");
    tcase_add_test(tc, permutation_properties);
    tcase_add_test(tc, permutation_uniform);
    tcase_add_test(tc, sharding_uneven);
    tcase_add_test(tc, sharding_edges);
    tcase_add_test(tc, epochs_differ);
    tcase_add_test(tc, batch_matches_gather);
    tcase_add_test(tc, normalisation_closed_form);
    tcase_add_test(tc, normalisation_random_set);
    tcase_add_test(tc, init_errors);
    tcase_add_test(tc, eval_slices);
    suite_add_tcase(s, tc);
    TCase *real = tcase_create("real");
    tcase_set_timeout(real, 60);
    tcase_add_test(real, real_statistics);
    suite_add_tcase(s, real);
    return run_suite(s);
}
