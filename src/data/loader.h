/* loader.h — what each rank trains and evaluates on.
 *
 * Training (Jin et al. §2: every node draws its own b samples per step): every epoch e a global
 * permutation π_e of the n training samples is drawn from (seed, e), the same on every rank.
 * With m = p·b, an epoch has S = floor(n / m) steps; at step s of the epoch rank r takes
 * π_e[s·m + r·b + j], j < b. Ranks therefore see disjoint samples and all run exactly S steps
 * per epoch whatever n is; the n mod m samples left over move with the permutation each epoch.
 *
 * Evaluation: rank r of p evaluates the contiguous slice [r·n/p, (r+1)·n/p) of the validation
 * set, so every sample is evaluated exactly once; the caller reduces sums and counts.
 *
 * Normalisation (IDX): x = (pixel/255 − mean) / std with mean and std per channel over the whole
 * training set (computed once, identical on every rank).
 *
 * Three sources behind one face (the training loop sees only this header):
 *  - LOADER_IDX: the IDX set in memory (loader_init), normalised per batch;
 *  - LOADER_JPEG: a pack of JPEG shards decoded and augmented by threads working ahead of
 *    training (loader_init_jpeg, jpegload.h): the same permutation and sharding as above; the
 *    batch of step t is a pure function of (seed, p, b, rank, t);
 *  - LOADER_SYNTHETIC: random inputs made once (loader_init_synthetic): every step hands the same
 *    b samples of this rank (as Horovod's and tf_cnn_benchmarks' synthetic modes); evaluation
 *    samples are a pure function of (seed, index). For throughput and scaling studies.
 * Errors during training (a read error, a damaged pack, stuck decode threads) are returned as
 * EXIT_RUNTIME with loader_error() saying what; nothing here exits or hangs. */
#ifndef DSGD_LOADER_H
#define DSGD_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/idx.h"
#include "data/jpegload.h"

enum { LOADER_IDX = 0, LOADER_JPEG = 1, LOADER_SYNTHETIC = 2 };

/* ImageNet's training-set size: the nominal epoch of the synthetic source. */
#define LOADER_SYNTHETIC_N 1281167

typedef struct {
    int kind;               /* LOADER_* */
    const dataset *d;       /* IDX: the training set */
    int n;                  /* training samples (the permutation's length) */
    int p, rank, b;
    uint64_t seed;
    long steps_per_epoch;   /* S = floor(n / (p*b)) */
    int epoch;              /* epoch whose permutation is in perm (-1: none yet) */
    uint32_t *perm;         /* (n); NULL for synthetic */
    float mean[4], std[4];  /* IDX: per channel (c <= 4) */
    jpegload *jl;           /* JPEG: the decode threads (NULL until started) */
    jpegload_cfg jcfg;      /* JPEG: their configuration */
    int *idx;               /* (b) scratch indices */
    size_t sample;          /* floats per sample */
    int classes;            /* synthetic */
    float *syn_x;           /* synthetic: (b, c, h, w) this rank's training batch */
    int *syn_y;             /* (b) */
    int ev_status;          /* non-JPEG: what loader_eval_start's synchronous fill returned, for loader_eval_wait */
    char err[1024];         /* the last error */
} loader;

/* IDX. Returns 0, or EXIT_BADINPUT when the training set is smaller than m = p*b. */
int loader_init(loader *l, const dataset *train, int p, int rank, int b, uint64_t seed, char *err, size_t errlen);
/* JPEG: c->train (and c->val) opened, c->b = b, c->seed = seed. start = 0 sets up the layout
 * only (for --check: no thread is started, loader_batch must not be called); loader_start
 * starts the threads later. Returns 0, EXIT_BADINPUT (fewer than m = p*b training samples) or
 * EXIT_RUNTIME (threads). */
int loader_init_jpeg(loader *l, const jpegload_cfg *c, int p, int rank, int start, char *err, size_t errlen);
int loader_start(loader *l, char *err, size_t errlen);
/* Synthetic: inputs (c, h, w) uniform on [−√3, √3] (mean 0, variance 1, as normalised data),
 * labels uniform in [0, classes), drawn from (seed, rank) for this rank's one training batch
 * and from (seed, index) for validation sample index; n = LOADER_SYNTHETIC_N nominal training
 * samples. Returns 0 or EXIT_BADINPUT. */
int loader_init_synthetic(loader *l, int c, int h, int w, int classes, int p, int rank, int b, uint64_t seed, char *err,
                          size_t errlen);
void loader_free(loader *l);

/* The permutation of epoch e drawn from (seed, e) (Fisher–Yates over xoshiro256**). */
void loader_permutation(uint32_t *perm, int n, uint64_t seed, int epoch);

/* Sample indices (b) this rank uses at global step t >= 0 (epoch = t / S). IDX and JPEG. */
void loader_indices(loader *l, long t, int *idx);

/* The normalised batch of global step t: x (b, c, h, w) float, y (b). Returns 0, or
 * EXIT_RUNTIME (loader_error). No allocation. */
int loader_batch(loader *l, long t, float *x, int *y);

/* The same without a copy where the loader holds the batch: *x, *y point into the loader's
 * slot (JPEG; valid until the next loader_batch* call) or its synthetic batch, or at xbuf,
 * ybuf, which it filled (IDX). Returns 0 or EXIT_RUNTIME. */
int loader_batch_view(loader *l, long t, float *xbuf, int *ybuf, const float **x, const int **y);

/* Validation samples [begin, begin + count) of val (IDX: normalised with the training mean/std;
 * JPEG: AUG_EVAL, decoded by the threads; synthetic: generated) into x (count, c, h, w), y.
 * Returns 0 or EXIT_RUNTIME. */
int loader_eval(loader *l, const dataset *val, int begin, int count, float *x, int *y);

/* The same in two halves, so that the next evaluation batch is decoded while the network
 * evaluates the current one (train.c): loader_eval_start begins samples [begin, begin + count)
 * into x, y and loader_eval_wait returns once they are there; x and y belong to the loader in
 * between (not to be read, reused or freed). JPEG: the decode threads work on the batch in the
 * background (jpegload_eval_start, count <= jcfg.eval_max) and the wait helps; the other
 * sources fill x, y in loader_eval_start itself. One batch at a time; x, y, the samples and their
 * order are exactly loader_eval's. loader_eval_wait returns 0 or EXIT_RUNTIME (loader_error; the
 * batch is over either way, nothing left writing into x); loader_eval_start returns 0, or
 * EXIT_RUNTIME when it could not begin (nothing to wait for then). loader_eval_cancel abandons a
 * batch begun and not waited for (none: nothing happens): when it returns nothing writes into its
 * x, y any more (bounded). No allocation. */
int loader_eval_start(loader *l, const dataset *val, int begin, int count, float *x, int *y);
int loader_eval_wait(loader *l);
void loader_eval_cancel(loader *l);

/* Normalise samples idx[0..count) of IDX set d with the loader's mean/std into x (count, c, h, w), y. */
void loader_gather(const loader *l, const dataset *d, const int *idx, int count, float *x, int *y);

/* What the last failed call said. */
const char *loader_error(const loader *l);

/* JPEG decode counters (jpegload_stats); zeros for the other sources. */
void loader_stats(loader *l, jpegload_stats *s);
/* The same in checkpoint form (jpegload_save_stats / jpegload_restore_stats): 0 values and 0
 * for the other sources and before loader_start. */
long loader_save_stats(loader *l, int64_t *v, long max);
int loader_restore_stats(loader *l, const int64_t *v, long n, char *err, size_t errlen);

/* This rank's evaluation slice [*begin, *end) of n samples. */
void eval_slice(int n, int p, int rank, int *begin, int *end);

#endif
