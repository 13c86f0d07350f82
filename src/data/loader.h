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
 * Normalisation: x = (pixel/255 − mean) / std with mean and std per channel over the whole
 * training set (computed once, identical on every rank). */
#ifndef DSGD_LOADER_H
#define DSGD_LOADER_H

#include <stdint.h>

#include "idx.h"

typedef struct {
    const dataset *d;
    int p, rank, b;
    uint64_t seed;
    long steps_per_epoch;   /* S = floor(n / (p*b)) */
    int epoch;              /* epoch whose permutation is in perm (-1: none yet) */
    uint32_t *perm;         /* (n) */
    float mean[4], std[4];  /* per channel (c <= 4) */
} loader;

/* Returns 0, or EXIT_BADINPUT when the training set is smaller than m = p*b. */
int loader_init(loader *l, const dataset *train, int p, int rank, int b, uint64_t seed, char *err, size_t errlen);
void loader_free(loader *l);

/* The permutation of epoch e drawn from (seed, e) (Fisher–Yates over xoshiro256**). */
void loader_permutation(uint32_t *perm, int n, uint64_t seed, int epoch);

/* Sample indices (b) this rank uses at global step t >= 0 (epoch = t / S). */
void loader_indices(loader *l, long t, int *idx);

/* The normalised batch of global step t: x (b, c, h, w) float, y (b). */
void loader_batch(loader *l, long t, float *x, int *y);

/* Normalise samples idx[0..count) of d with the loader's mean/std into x (count, c, h, w), y. */
void loader_gather(const loader *l, const dataset *d, const int *idx, int count, float *x, int *y);

/* This rank's evaluation slice [*begin, *end) of n samples. */
void eval_slice(int n, int p, int rank, int *begin, int *end);

#endif
