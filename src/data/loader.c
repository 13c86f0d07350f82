/* loader.c — which samples each rank trains and evaluates on, and their normalisation
 * (see loader.h for the scheme, after Jin et al. 2016 §2).
 *
 * Every rank computes the same permutation π_e from (seed, e) locally, so no communication is
 * needed to agree on the batches. The permutation buffer is allocated once in loader_init and
 * regenerated only when the epoch changes; loader_indices and loader_batch never allocate.
 * The JPEG source asks its decode threads (jpegload.c) for step t and the slots - 1 steps after
 * it, then takes step t; the synthetic source hands out the batch it made at set-up. */
#include "data/loader.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* What every source sets: kind, n training samples, the layout, S = floor(n / (p·b)) and the
 * floats per sample. */
static void set_layout(loader *l, int kind, int n, int p, int rank, int b, uint64_t seed, size_t sample) {
    l->kind = kind;
    l->n = n;
    l->p = p, l->rank = rank, l->b = b, l->seed = seed;
    l->steps_per_epoch = (long)((long long)n / ((long long)p * b));
    l->sample = sample;
}

/* Every source starts here: l cleared (no permutation yet), and the layout checks. */
static int layout_ok(loader *l, int p, int rank, int b, long long n, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->epoch = -1;
    if (p < 1 || rank < 0 || rank >= p || b < 1)
        return seterr(err, errlen, "loader: bad layout p = %d, rank = %d, b = %d (need p >= 1, 0 <= rank < p, b >= 1)", p, rank, b);
    if (n < (long long)p * b)
        return seterr(err, errlen, "loader: the training set has %lld samples, fewer than one global batch m = p*b = %d*%d = %lld",
                      n, p, b, (long long)p * b);
    if (n > INT32_MAX) return seterr(err, errlen, "loader: %lld training samples; at most %d are supported", n, INT32_MAX);
    return 0;
}

int loader_init(loader *l, const dataset *train, int p, int rank, int b, uint64_t seed, char *err,
                size_t errlen) {
    int st = layout_ok(l, p, rank, b, train->n, err, errlen);
    if (st) return st;
    if (train->c < 1 || train->c > 4)
        return seterr(err, errlen, "loader: training set has %d channels; 1..4 are supported", train->c);

    /* Per-channel mean and population std of pixel/255 over the whole set. A histogram of the
     * 256 byte values makes the sums exact integers; the moments then come from 256 terms in
     * double precision, with no accumulation error over the 47M pixels. */
    size_t hw = (size_t)train->h * train->w;
    for (int ch = 0; ch < train->c; ch++) {
        /* four histograms, so that runs of one value (Fashion-MNIST's black background) do not
         * chain every increment on one counter: 3× faster, the same integer counts; every rank
         * computes them at start-up (0.34 → ~0.1 s each, 128 of them at p = 128 on 2 cores) */
        uint64_t hist4[4][256] = {{0}}, hist[256];
        for (int i = 0; i < train->n; i++) {
            const uint8_t *px = train->x + ((size_t)i * train->c + ch) * hw;
            size_t k = 0;
            for (; k + 4 <= hw; k += 4) hist4[0][px[k]]++, hist4[1][px[k + 1]]++, hist4[2][px[k + 2]]++, hist4[3][px[k + 3]]++;
            for (; k < hw; k++) hist4[0][px[k]]++;
        }
        for (int v = 0; v < 256; v++) hist[v] = hist4[0][v] + hist4[1][v] + hist4[2][v] + hist4[3][v];
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

    set_layout(l, LOADER_IDX, train->n, p, rank, b, seed, (size_t)train->c * train->h * train->w);
    l->d = train;
    l->perm = xmalloc((size_t)train->n * sizeof *l->perm);
    l->idx = xmalloc((size_t)b * sizeof *l->idx);
    return 0;
}

int loader_init_jpeg(loader *l, const jpegload_cfg *c, int p, int rank, int start, char *err, size_t errlen) {
    const long long n = shards_count(c->train);
    int st = layout_ok(l, p, rank, c->b, n, err, errlen);
    if (st) return st;
    set_layout(l, LOADER_JPEG, (int)n, p, rank, c->b, c->seed, (size_t)3 * c->train_aug.crop * c->train_aug.crop);
    l->jcfg = *c;
    l->perm = xmalloc((size_t)n * sizeof *l->perm);
    l->idx = xmalloc((size_t)c->b * sizeof *l->idx);
    return start ? loader_start(l, err, errlen) : 0;
}

int loader_start(loader *l, char *err, size_t errlen) {
    if (l->kind != LOADER_JPEG || l->jl) return 0;
    return jpegload_create(&l->jl, &l->jcfg, err, errlen);
}

/* Uniform on [−√3, √3]: mean 0, variance 1. */
static float syn_value(rng_t *r) { return (float)((rng_uniform(r) * 2.0 - 1.0) * 1.7320508075688772); }

int loader_init_synthetic(loader *l, int c, int h, int w, int classes, int p, int rank, int b, uint64_t seed, char *err,
                          size_t errlen) {
    int st = layout_ok(l, p, rank, b, LOADER_SYNTHETIC_N, err, errlen);
    if (st) return st;
    if (c < 1 || h < 1 || w < 1 || classes < 1)
        return seterr(err, errlen, "loader: synthetic shape %d x %d x %d with %d classes", c, h, w, classes);
    set_layout(l, LOADER_SYNTHETIC, LOADER_SYNTHETIC_N, p, rank, b, seed, (size_t)c * h * w);
    l->classes = classes;
    l->syn_x = xmalloc((size_t)b * l->sample * sizeof *l->syn_x);
    l->syn_y = xmalloc((size_t)b * sizeof *l->syn_y);
    rng_t r;
    rng_seed(&r, seed_mix(seed_mix(seed, 0x5e7a11ULL), (uint64_t)rank));
    for (size_t k = 0; k < (size_t)b * l->sample; k++) l->syn_x[k] = syn_value(&r);
    for (int j = 0; j < b; j++) l->syn_y[j] = (int)rng_below(&r, (uint64_t)classes);
    return 0;
}

void loader_free(loader *l) {
    if (!l) return;
    jpegload_free(l->jl);
    l->jl = NULL;
    free(l->perm), free(l->idx), free(l->syn_x), free(l->syn_y);
    l->perm = NULL, l->idx = NULL, l->syn_x = NULL, l->syn_y = NULL;
    l->epoch = -1;
}

const char *loader_error(const loader *l) { return l->err; }

void loader_stats(loader *l, jpegload_stats *s) {
    memset(s, 0, sizeof *s);
    if (l->jl) jpegload_get_stats(l->jl, s);
}

long loader_save_stats(loader *l, int64_t *v, long max) { return l->jl ? jpegload_save_stats(l->jl, v, max) : 0; }

int loader_restore_stats(loader *l, const int64_t *v, long n, char *err, size_t errlen) {
    if (!l->jl) return n ? seterr(err, errlen, "decode counters in the checkpoint, but this run decodes no JPEG") : 0;
    return jpegload_restore_stats(l->jl, v, n, err, errlen);
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
        loader_permutation(l->perm, l->n, l->seed, e);
        l->epoch = e;
    }
    long s = t % S;
    return (size_t)s * ((size_t)l->p * l->b) + (size_t)l->rank * l->b;
}

void loader_indices(loader *l, long t, int *idx) {
    size_t off = loader_seek(l, t);
    for (int j = 0; j < l->b; j++) idx[j] = (int)l->perm[off + j];
}

/* Normalise sample i of d into x (c, h, w); its label into *y. */
static void normalise_one(const loader *l, const dataset *d, int i, float *x, int *y) {
    size_t hw = (size_t)d->h * d->w;
    const uint8_t *px = d->x + (size_t)i * d->c * hw;
    for (int ch = 0; ch < d->c; ch++) {
        float mean = l->mean[ch], sd = l->std[ch];
        for (size_t k = 0; k < hw; k++) x[k] = ((float)px[k] / 255.0f - mean) / sd;
        px += hw;
        x += hw;
    }
    *y = d->y[i];
}

/* JPEG: queue step t and the steps after it that fit the ring, then take step t. */
static int jpeg_take(loader *l, long t, const float **x, const int **y) {
    if (!l->jl) return seterr(l->err, sizeof l->err, "loader: the decode threads were not started") ? EXIT_RUNTIME : 0;
    jpegload_release(l->jl); /* the previous batch: its slot may take one of the steps below */
    for (int k = 0; k < l->jcfg.slots; k++) {
        if (jpegload_has(l->jl, t + k)) continue;
        loader_indices(l, t + k, l->idx);
        int st = jpegload_request(l->jl, t + k, (int)((t + k) / l->steps_per_epoch), l->idx, t, l->err, sizeof l->err);
        if (st > 1 || (st && k == 0)) return EXIT_RUNTIME;
        if (st) break; /* the ring is full */
    }
    return jpegload_take(l->jl, t, x, y, l->err, sizeof l->err) ? EXIT_RUNTIME : 0;
}

int loader_batch_view(loader *l, long t, float *xbuf, int *ybuf, const float **x, const int **y) {
    if (l->kind == LOADER_JPEG) return jpeg_take(l, t, x, y);
    if (l->kind == LOADER_SYNTHETIC) {
        *x = l->syn_x, *y = l->syn_y;
        return 0;
    }
    loader_indices(l, t, l->idx);
    loader_gather(l, l->d, l->idx, l->b, xbuf, ybuf);
    *x = xbuf, *y = ybuf;
    return 0;
}

int loader_batch(loader *l, long t, float *x, int *y) {
    const float *px;
    const int *py;
    int st = loader_batch_view(l, t, x, y, &px, &py);
    if (st) return st;
    if (px != x) memcpy(x, px, (size_t)l->b * l->sample * sizeof *x);
    if (py != y) memcpy(y, py, (size_t)l->b * sizeof *y);
    if (l->jl) jpegload_release(l->jl); /* copied: the slot can be refilled now */
    return 0;
}

int loader_eval(loader *l, const dataset *val, int begin, int count, float *x, int *y) {
    if (l->kind == LOADER_JPEG) {
        if (!l->jl) return seterr(l->err, sizeof l->err, "loader: the decode threads were not started") ? EXIT_RUNTIME : 0;
        for (int done = 0; done < count;) { /* in pieces of at most eval_max */
            int k = count - done < l->jcfg.eval_max ? count - done : l->jcfg.eval_max;
            if (jpegload_eval(l->jl, begin + done, k, x + (size_t)done * l->sample, y + done, l->err, sizeof l->err))
                return EXIT_RUNTIME;
            done += k;
        }
        return 0;
    }
    if (l->kind == LOADER_SYNTHETIC) {
        for (int j = 0; j < count; j++) {
            rng_t r;
            rng_seed(&r, seed_mix(seed_mix(l->seed, 0x7a1ULL), (uint64_t)(begin + j)));
            float *o = x + (size_t)j * l->sample;
            for (size_t k = 0; k < l->sample; k++) o[k] = syn_value(&r);
            y[j] = (int)rng_below(&r, (uint64_t)l->classes);
        }
        return 0;
    }
    for (int j = 0; j < count; j++) normalise_one(l, val, begin + j, x + (size_t)j * l->sample, &y[j]);
    return 0;
}

int loader_eval_start(loader *l, const dataset *val, int begin, int count, float *x, int *y) {
    if (l->kind != LOADER_JPEG) {
        l->ev_status = loader_eval(l, val, begin, count, x, y);
        return 0;
    }
    if (!l->jl) return seterr(l->err, sizeof l->err, "loader: the decode threads were not started") ? EXIT_RUNTIME : 0;
    return jpegload_eval_start(l->jl, begin, count, x, y, l->err, sizeof l->err) ? EXIT_RUNTIME : 0;
}

int loader_eval_wait(loader *l) {
    if (l->kind != LOADER_JPEG) return l->ev_status;
    if (!l->jl) return seterr(l->err, sizeof l->err, "loader: the decode threads were not started") ? EXIT_RUNTIME : 0;
    return jpegload_eval_wait(l->jl, l->err, sizeof l->err) ? EXIT_RUNTIME : 0;
}

void loader_eval_cancel(loader *l) {
    if (l->jl) jpegload_eval_cancel(l->jl);
}

void loader_gather(const loader *l, const dataset *d, const int *idx, int count, float *x, int *y) {
    size_t chw = (size_t)d->c * d->h * d->w;
    for (int j = 0; j < count; j++) normalise_one(l, d, idx[j], x + (size_t)j * chw, &y[j]);
}

void eval_slice(int n, int p, int rank, int *begin, int *end) {
    /* 64-bit products so that rank * n cannot overflow int. */
    *begin = (int)((long long)rank * n / p);
    *end = (int)((long long)(rank + 1) * n / p);
}
