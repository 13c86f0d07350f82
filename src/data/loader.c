/* loader.c — which samples each rank trains and evaluates on, and their normalisation
 * (see loader.h for the scheme, after Jin et al. 2016 §2).
 *
 * Every rank computes the same permutation π_e from (seed, e) locally, so no communication is
 * needed to agree on the batches. The permutation buffer is allocated once in loader_init and
 * regenerated only when the epoch changes; loader_indices and loader_batch never allocate. */
#include "data/loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int loader_init(loader *l, const dataset *train, int p, int rank, int b, uint64_t seed, char *err,
                size_t errlen) {
    memset(l, 0, sizeof *l);
    l->epoch = -1;
    if (p < 1 || rank < 0 || rank >= p || b < 1)
        return seterr(err, errlen, "loader: bad layout p = %d, rank = %d, b = %d (need p >= 1, "
                      "0 <= rank < p, b >= 1)", p, rank, b);
    if (train->c < 1 || train->c > 4)
        return seterr(err, errlen, "loader: training set has %d channels; 1..4 are supported", train->c);
    long m = (long)p * b;
    if (train->n < m)
        return seterr(err, errlen, "loader: the training set has %d samples, fewer than one global "
                      "batch m = p*b = %d*%d = %ld", train->n, p, b, m);

    /* Per-channel mean and population std of pixel/255 over the whole set. A histogram of the
     * 256 byte values makes the sums exact integers; the moments then come from 256 terms in
     * double precision, with no accumulation error over the 47M pixels. */
    size_t hw = (size_t)train->h * train->w;
    for (int ch = 0; ch < train->c; ch++) {
        uint64_t hist[256] = {0};
        for (int i = 0; i < train->n; i++) {
            const uint8_t *px = train->x + ((size_t)i * train->c + ch) * hw;
            for (size_t k = 0; k < hw; k++) hist[px[k]]++;
        }
        double total = (double)train->n * (double)hw, mean = 0, var = 0;
        for (int v = 0; v < 256; v++) mean += (double)hist[v] * (v / 255.0);
        mean /= total;
        for (int v = 0; v < 256; v++) {
            double dv = v / 255.0 - mean;
            var += (double)hist[v] * dv * dv;
        }
        double sd = sqrt(var / total);
        if (!(sd > 0))
            return seterr(err, errlen, "loader: channel %d of the training set is constant "
                          "(std = 0), cannot normalise", ch);
        l->mean[ch] = (float)mean;
        l->std[ch] = (float)sd;
    }

    l->d = train;
    l->p = p;
    l->rank = rank;
    l->b = b;
    l->seed = seed;
    l->steps_per_epoch = train->n / m;
    l->perm = xmalloc((size_t)train->n * sizeof *l->perm);
    return 0;
}

void loader_free(loader *l) {
    if (!l) return;
    free(l->perm);
    l->perm = NULL;
    l->epoch = -1;
}

/* Durstenfeld's Fisher–Yates from the top: for i = n-1 .. 1 swap perm[i] with
 * perm[rng_below(i + 1)], the RNG seeded with seed_mix(seed, epoch). Any other implementation
 * (e.g. a GPU path) must follow this order exactly to see the same batches. */
void loader_permutation(uint32_t *perm, int n, uint64_t seed, int epoch) {
    rng_t r;
    rng_seed(&r, seed_mix(seed, (uint64_t)(int64_t)epoch));
    for (int i = 0; i < n; i++) perm[i] = (uint32_t)i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(&r, (uint64_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Make sure perm holds π_e for the epoch of global step t; returns the offset into perm of this
 * rank's b samples at that step, s·m + r·b. */
static size_t loader_seek(loader *l, long t) {
    if (t < 0) DIE("loader: negative step %ld", t);
    if (!l->perm) DIE("loader: used before loader_init or after loader_free");
    long S = l->steps_per_epoch;
    int e = (int)(t / S);
    if (e != l->epoch) {
        loader_permutation(l->perm, l->d->n, l->seed, e);
        l->epoch = e;
    }
    long s = t % S;
    return (size_t)s * ((size_t)l->p * l->b) + (size_t)l->rank * l->b;
}

void loader_indices(loader *l, long t, int *idx) {
    size_t off = loader_seek(l, t);
    for (int j = 0; j < l->b; j++) idx[j] = (int)l->perm[off + j];
}

/* Normalise sample i of d into x (c, h, w). */
static void normalise_one(const loader *l, const dataset *d, int i, float *x) {
    size_t hw = (size_t)d->h * d->w;
    const uint8_t *px = d->x + (size_t)i * d->c * hw;
    for (int ch = 0; ch < d->c; ch++) {
        float mean = l->mean[ch], sd = l->std[ch];
        for (size_t k = 0; k < hw; k++) x[k] = ((float)px[k] / 255.0f - mean) / sd;
        px += hw;
        x += hw;
    }
}

void loader_batch(loader *l, long t, float *x, int *y) {
    size_t off = loader_seek(l, t);
    const dataset *d = l->d;
    size_t chw = (size_t)d->c * d->h * d->w;
    for (int j = 0; j < l->b; j++) {
        int i = (int)l->perm[off + j];
        normalise_one(l, d, i, x + (size_t)j * chw);
        y[j] = d->y[i];
    }
}

void loader_gather(const loader *l, const dataset *d, const int *idx, int count, float *x, int *y) {
    size_t chw = (size_t)d->c * d->h * d->w;
    for (int j = 0; j < count; j++) {
        normalise_one(l, d, idx[j], x + (size_t)j * chw);
        y[j] = d->y[idx[j]];
    }
}

void eval_slice(int n, int p, int rank, int *begin, int *end) {
    /* 64-bit products so that rank * n cannot overflow int. */
    *begin = (int)((long long)rank * n / p);
    *end = (int)((long long)(rank + 1) * n / p);
}
