/* jpegload.h — the threaded JPEG loader behind loader.h (data.format = "jpeg"; issue 11; design:
 * notes/imagenet.md §5.2, docs/data.md "Loading").
 *
 * T decode threads (data.threads) work ahead of training: a ring of R >= 2 preallocated batch
 * slots, each keyed by the global step whose minibatch it holds. The caller (loader.c) asks for
 * step t with its sample indices (jpegload_request), the threads fill the slots of the earliest
 * steps first, sample by sample, and the training thread takes a finished slot
 * (jpegload_take) — helping to decode its remaining samples rather than idling if it is not
 * finished. A taken slot stays the caller's until the next jpegload_take (or jpegload_release),
 * so its pointers are handed to the network without a copy.
 *
 * Determinism: sample i of epoch e is aug_sample(seed, e, i) (augment.h), a pure function, so a
 * batch does not depend on T, R or timing. A sample that cannot be decoded is replaced by the
 * next sample of the split in pack order (i + 1, i + 2, ... mod n; its own label and draws),
 * again the same whatever the threads; each such sample is named once on stderr and counted.
 *
 * Evaluation: samples [begin, begin + count) of the validation split, AUG_EVAL, decoded by the
 * same threads (ahead of the training slots) and the caller. One evaluation job at a time, in
 * the caller's buffer: jpegload_eval_start queues it and returns at once (the threads decode it
 * while the caller does something else, e.g. evaluates the previous batch from another buffer),
 * jpegload_eval_wait helps and waits for it, jpegload_eval_cancel abandons it; jpegload_eval is
 * start + wait. A job's samples do not depend on when it is waited for.
 *
 * Allocation: all at jpegload_create (slots, one JPEG buffer of shards_max_nbytes and one
 * image_dec per thread); none per step once each decoder has seen the largest image (libjpeg's
 * own small per-image pools aside, image.h). Waits: every wait of the caller is bounded: no
 * sample finished anywhere for timeout_s is an error, as is any decode thread's I/O failure or a
 * run of 64 undecodable samples; the error is returned, never a hang. */
#ifndef DSGD_JPEGLOAD_H
#define DSGD_JPEGLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "data/augment.h"
#include "data/shards.h"

typedef struct jpegload jpegload;

typedef struct {
    const shards *train, *val; /* val may be NULL (no evaluation) */
    aug_cfg train_aug;         /* AUG_SCALE, AUG_RRC or AUG_NONE; crop = the network input side */
    aug_cfg eval_aug;          /* AUG_EVAL, same crop */
    uint64_t seed;             /* of the augmentation draws (the experiment's seed) */
    int b;                     /* samples per training batch */
    int eval_max;              /* most samples one jpegload_eval asks for */
    int threads;               /* decode threads >= 1 */
    int slots;                 /* ring slots >= 2 */
    double timeout_s;          /* longest wait without any sample finishing */
    int rank;                  /* for messages */
} jpegload_cfg;

/* Start the threads. Returns 0, or EXIT_RUNTIME (out of memory, a thread not started). */
int jpegload_create(jpegload **out, const jpegload_cfg *c, char *err, size_t errlen);
/* Stop the threads (each finishes its sample; bounded) and free everything. An evaluation job
 * under way must be waited for or cancelled first (its samples in flight write into its x). */
void jpegload_free(jpegload *j);

/* 1 if step `key` has a slot (queued, being filled or done). */
int jpegload_has(const jpegload *j, long key);
/* Queue step `key` of epoch `epoch` with its b training-sample indices idx (copied). Evicts a
 * slot of a step outside [lo, lo + slots) (waiting, bounded, for samples in flight in it); does
 * nothing when every slot is busy with such steps or held, or when key is queued already.
 * Returns 0 if queued (or already there), 1 if no slot was free, or EXIT_RUNTIME on an error
 * (err). */
int jpegload_request(jpegload *j, long key, int epoch, const int *idx, long lo, char *err, size_t errlen);
/* Wait for step key (requested before) to be complete, decoding its unclaimed samples on the
 * calling thread meanwhile; release the slot held before. *x (b, 3, crop, crop) float and *y (b)
 * stay valid until the next jpegload_take or jpegload_release. Returns 0 or EXIT_RUNTIME. */
int jpegload_take(jpegload *j, long key, const float **x, const int **y, char *err, size_t errlen);
/* Give the held slot back (if any). */
void jpegload_release(jpegload *j);
/* Validation samples [begin, begin + count) (count <= eval_max) into x (count, 3, crop, crop)
 * and y (count), AUG_EVAL: jpegload_eval_start then jpegload_eval_wait. Returns 0 or
 * EXIT_RUNTIME. */
int jpegload_eval(jpegload *j, int64_t begin, int count, float *x, int *y, char *err, size_t errlen);
/* Queue that job for the decode threads and return without waiting; x and y are written by the
 * threads until jpegload_eval_wait or jpegload_eval_cancel returns (neither may be reused or
 * freed before). Returns 0, or EXIT_RUNTIME (count > eval_max, no validation split, or a job
 * under way: one at a time). No allocation. */
int jpegload_eval_start(jpegload *j, int64_t begin, int count, float *x, int *y, char *err, size_t errlen);
/* Wait for the job queued by jpegload_eval_start to be complete, decoding its unclaimed samples
 * on the calling thread meanwhile (bounded as jpegload_take). The job then ends, on success or
 * error alike: no sample of it is in flight any more (after an error the samples in flight are
 * waited for, bounded by timeout_s without progress). Its decode warnings and failures count
 * here. Returns 0 or EXIT_RUNTIME (err: a read error, a damaged pack, stuck threads; or no job). */
int jpegload_eval_wait(jpegload *j, char *err, size_t errlen);
/* Abandon the job under way, if any: no further sample of it is started, and those in flight are
 * waited for (bounded as above), so its x and y may be reused or freed when this returns. Its
 * counts are dropped (it was never used). */
void jpegload_eval_cancel(jpegload *j);

/* Counters since create (or jpegload_restore_stats): libjpeg warnings of the samples used;
 * failures = samples that could not be decoded each time one was drawn (replaced), unique =
 * distinct such samples. A training step's samples count when the step is taken (a step decoded
 * ahead and never taken counts nothing), so the counts do not depend on timing. */
typedef struct {
    long long warnings, failures, unique_failures;
} jpegload_stats;
void jpegload_get_stats(jpegload *j, jpegload_stats *s);

/* The counters as a checkpoint keeps them, so that a resumed run counts on and names no damaged
 * sample twice: v[0] warnings, v[1] failures, then one entry per sample named already,
 * (split << 40) | index with split 0 train, 1 val. jpegload_save_stats writes at most max
 * values into v (v may be NULL with max 0) and returns how many there are; jpegload_restore_stats
 * takes n of them back (counters set, samples marked named, unique = their count). Returns 0,
 * or EXIT_BADINPUT when an entry names no sample of this pack (err). */
long jpegload_save_stats(jpegload *j, int64_t *v, long max);
int jpegload_restore_stats(jpegload *j, const int64_t *v, long n, char *err, size_t errlen);

#endif
