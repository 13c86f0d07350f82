/* jpegload.c — decode threads and the ring of batch slots behind data.format = "jpeg" (see
 * jpegload.h for the contract).
 *
 * One mutex guards the slots, the evaluation job and the counters; work is claimed one sample at
 * a time under it and done outside it, so threads never wait on each other's decoding. A claimed
 * sample is written straight into its slot's position (no staging copy); a slot is only reused
 * once no sample of it is in flight. Priority: the evaluation job, then the slot of the earliest
 * step. The waits: decode threads nap on `work` (1 s at most, so a stop is seen), the caller
 * waits on `done` in slices of 0.2 s and gives up after timeout_s without any sample finishing. */
#define _GNU_SOURCE
#include "data/jpegload.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "util/util.h"

/* Undecodable samples in a row (pack order) before the loader gives up: the pack is damaged. */
#define MAX_REPLACE 64

typedef struct {
    long key;         /* global step; -1: free */
    int epoch;
    int *idx;         /* (b) sample indices of the training split */
    float *x;         /* (b, 3, crop, crop) */
    int *y;           /* (b) */
    int next, done;   /* positions claimed, finished */
    int inflight;     /* claimed and not finished */
    int held;         /* taken by the caller */
    long long warnings, failures; /* of its samples so far: counted when the step is taken, so a
                                   * step decoded ahead but never trained on counts nothing */
} slot;

typedef struct {   /* a decode thread's (or the caller's) */
    struct jpegload *j;
    image_dec *dec;
    uint8_t *buf;     /* shards_max_nbytes of either split */
} decoder;

struct jpegload {
    jpegload_cfg c;
    size_t sample;    /* floats per sample: 3·crop² */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int stop;
    int fatal;        /* a decode failed for good: the message is in fatal_msg */
    char fatal_msg[ERRLEN];
    slot *slots;
    int held;         /* slot the caller holds, -1: none */
    struct {          /* the evaluation job (one at a time: jpegload_eval_start .. _wait or _cancel) */
        int active;
        int64_t begin;
        int count, next, done, inflight;
        float *x;
        int *y;
        long long warnings, failures; /* of its samples: counted when the job is waited for, so an
                                       * abandoned job (cancelled) counts nothing */
    } ev;
    long long progress; /* samples finished, all kinds */
    long long warnings, failures, unique;
    uint8_t *reported[2]; /* per sample of train / val: named on stderr already */
    decoder self;     /* the caller's, for helping */
    decoder *workers;
    pthread_t *th;
    int n_started;
    int64_t test_fail_val; /* DSGD_TEST_VAL_FAIL: this validation sample fails as a read error would (-1: none) */
};

static int decoder_init(decoder *d, jpegload *j) {
    d->j = j;
    size_t nb = shards_max_nbytes(j->c.train);
    if (j->c.val && shards_max_nbytes(j->c.val) > nb) nb = shards_max_nbytes(j->c.val);
    d->dec = image_dec_new();
    d->buf = malloc(nb ? nb : 1);
    return d->dec && d->buf ? 0 : -1;
}

static void decoder_free(decoder *d) {
    image_dec_free(d->dec);
    free(d->buf);
}

/* Sample i of the training (val = 0) or validation split at epoch `epoch`, into out (3, crop,
 * crop) and *label; an undecodable sample is replaced by the next one in pack order. Called
 * without the lock. Returns 0, or EXIT_RUNTIME with err (a read error, MAX_REPLACE failures). */
static int do_sample(jpegload *j, decoder *d, int val, int epoch, int64_t i, float *out, int *label, long long *warnings,
                     long long *failures, char *err, size_t errlen) {
    const shards *s = val ? j->c.val : j->c.train;
    const aug_cfg *a = val ? &j->c.eval_aug : &j->c.train_aug;
    const int64_t n = shards_count(s);
    char e2[ERRLEN];
    for (int k = 0; k < MAX_REPLACE && k < n; k++) {
        const int64_t q = (i + k) % n;
        if (val && q == j->test_fail_val)
            return seterr(err, errlen, "rank %d: reading validation sample %lld: DSGD_TEST_VAL_FAIL", j->c.rank, (long long)q);
        if (shards_read(s, q, d->buf, e2, sizeof e2))
            return seterr(err, errlen, "rank %d: reading %s sample %lld: %s", j->c.rank, val ? "validation" : "training",
                          (long long)q, e2);
        int w = 0;
        if (aug_sample(d->dec, a, j->c.seed, (uint64_t)epoch, (uint64_t)q, d->buf, shards_nbytes(s, q), out, NULL, &w, e2,
                       sizeof e2) == 0) {
            *label = shards_label(s, q);
            if (w) __atomic_add_fetch(warnings, w, __ATOMIC_RELAXED);
            return 0;
        }
        pthread_mutex_lock(&j->mu);
        (*failures)++;
        const int first = !j->reported[val][q];
        if (first) j->reported[val][q] = 1, j->unique++;
        pthread_mutex_unlock(&j->mu);
        if (first)
            fprintf(stderr, "dsgd-run: rank %d: %s sample %lld (%s, source %d of index.h5:/%s/sources) cannot be decoded: %s; "
                            "replaced by the next sample of the pack wherever it is drawn (counted in the run file)\n",
                    j->c.rank, val ? "validation" : "training", (long long)q, shards_file(s, q), (int)shards_source_index(s, q),
                    val ? "val" : "train", e2);
    }
    return seterr(err, errlen, "rank %d: %d %s samples in a row from %lld cannot be decoded (the last: %s): the pack is "
                  "damaged; check it with dsgd-run --check", j->c.rank, MAX_REPLACE, val ? "validation" : "training",
                  (long long)i, shards_file(s, i));
}

/* Under the lock: claim one sample of work, evaluation first, then the earliest step's slot.
 * Returns 1 with *sl (-1: the evaluation job) and *pos, or 0 when there is nothing to do. */
static int claim(jpegload *j, int *sl, int *pos) {
    if (j->ev.active && j->ev.next < j->ev.count) {
        *sl = -1, *pos = j->ev.next++, j->ev.inflight++;
        return 1;
    }
    int best = -1;
    for (int k = 0; k < j->c.slots; k++) {
        const slot *s = &j->slots[k];
        if (s->key >= 0 && s->next < j->c.b && (best < 0 || s->key < j->slots[best].key)) best = k;
    }
    if (best < 0) return 0;
    slot *s = &j->slots[best];
    *sl = best, *pos = s->next++, s->inflight++;
    return 1;
}

/* Do the claimed sample (the lock is released meanwhile) and account for it. */
static void work_one(jpegload *j, decoder *d, int sl, int pos) {
    char err[ERRLEN];
    int rc;
    pthread_mutex_unlock(&j->mu);
    if (sl < 0)
        rc = do_sample(j, d, 1, 0, j->ev.begin + pos, j->ev.x + (size_t)pos * j->sample, &j->ev.y[pos], &j->ev.warnings,
                       &j->ev.failures, err, sizeof err);
    else {
        slot *s = &j->slots[sl];
        rc = do_sample(j, d, 0, s->epoch, s->idx[pos], s->x + (size_t)pos * j->sample, &s->y[pos], &s->warnings, &s->failures, err,
                       sizeof err);
    }
    pthread_mutex_lock(&j->mu);
    if (rc && !j->fatal) j->fatal = 1, snprintf(j->fatal_msg, sizeof j->fatal_msg, "%s", err);
    if (sl < 0) j->ev.inflight--, j->ev.done++;
    else j->slots[sl].inflight--, j->slots[sl].done++;
    j->progress++;
    pthread_cond_broadcast(&j->done);
}

static void *worker_main(void *arg) {
    decoder *w = arg;
    jpegload *j = w->j;
    pthread_mutex_lock(&j->mu);
    while (!j->stop) {
        int sl, pos;
        if (!j->fatal && claim(j, &sl, &pos)) work_one(j, w, sl, pos);
        else timed_wait(&j->work, &j->mu, 1.0);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

int jpegload_create(jpegload **out, const jpegload_cfg *c, char *err, size_t errlen) {
    *out = NULL;
    if (c->threads < 1 || c->slots < 2 || c->b < 1 || !c->train)
        return seterr(err, errlen, "jpegload: bad configuration (threads %d, slots %d, b %d)", c->threads, c->slots, c->b) ? EXIT_RUNTIME : 0;
    jpegload *j = xcalloc(1, sizeof *j);
    j->c = *c;
    j->sample = (size_t)3 * c->train_aug.crop * c->train_aug.crop;
    j->held = -1;
    const char *tf = getenv("DSGD_TEST_VAL_FAIL"); /* test hook (docs/testing.md) */
    j->test_fail_val = tf && *tf ? strtoll(tf, NULL, 10) : -1;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->work, NULL);
    pthread_cond_init(&j->done, NULL);
    j->slots = xcalloc((size_t)c->slots, sizeof *j->slots);
    for (int k = 0; k < c->slots; k++) {
        slot *s = &j->slots[k];
        s->key = -1;
        s->idx = xmalloc((size_t)c->b * sizeof *s->idx);
        s->x = xmalloc((size_t)c->b * j->sample * sizeof *s->x);
        s->y = xmalloc((size_t)c->b * sizeof *s->y);
    }
    j->reported[0] = xcalloc((size_t)shards_count(c->train), 1);
    j->reported[1] = xcalloc(c->val ? (size_t)shards_count(c->val) : 1, 1);
    j->workers = xcalloc((size_t)c->threads, sizeof *j->workers);
    j->th = xcalloc((size_t)c->threads, sizeof *j->th);
    int bad = decoder_init(&j->self, j);
    for (int k = 0; !bad && k < c->threads; k++) {
        if ((bad = decoder_init(&j->workers[k], j))) break;
        if (pthread_create(&j->th[k], NULL, worker_main, &j->workers[k]) != 0) {
            decoder_free(&j->workers[k]);
            bad = 1;
            break;
        }
        j->n_started++;
    }
    if (bad) {
        int started = j->n_started;
        jpegload_free(j);
        seterr(err, errlen, "rank %d: cannot start the decode threads (%d of %d started, or out of memory)", c->rank, started, c->threads);
        return EXIT_RUNTIME;
    }
    *out = j;
    return 0;
}

void jpegload_free(jpegload *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->stop = 1;
    pthread_cond_broadcast(&j->work);
    pthread_mutex_unlock(&j->mu);
    /* Each thread finishes the sample it has (milliseconds) and sees stop. */
    for (int k = 0; k < j->n_started; k++) pthread_join(j->th[k], NULL);
    for (int k = 0; k < j->n_started; k++) decoder_free(&j->workers[k]);
    decoder_free(&j->self);
    for (int k = 0; k < j->c.slots; k++) free(j->slots[k].idx), free(j->slots[k].x), free(j->slots[k].y);
    free(j->slots), free(j->workers), free(j->th), free(j->reported[0]), free(j->reported[1]);
    pthread_cond_destroy(&j->work), pthread_cond_destroy(&j->done), pthread_mutex_destroy(&j->mu);
    free(j);
}

static int find_slot(const jpegload *j, long key) {
    for (int k = 0; k < j->c.slots; k++)
        if (j->slots[k].key == key) return k;
    return -1;
}

int jpegload_has(const jpegload *j, long key) {
    pthread_mutex_lock((pthread_mutex_t *)&j->mu);
    int k = find_slot(j, key);
    pthread_mutex_unlock((pthread_mutex_t *)&j->mu);
    return k >= 0;
}

/* Under the lock: wait up to 0.2 s on `done`; *seen, *t_last: the progress count last seen and
 * when it moved. Returns EXIT_RUNTIME with err once timeout_s passed without progress, else 0. */
static int wait_progress(jpegload *j, long long *seen, double *t_last, char *err, size_t errlen) {
    timed_wait(&j->done, &j->mu, 0.2);
    if (j->progress != *seen) *seen = j->progress, *t_last = wall_time();
    else if (wall_time() - *t_last > j->c.timeout_s)
        return seterr(err, errlen, "rank %d: no sample decoded in %.0f s: the decode threads are stuck (comm_timeout_s)",
                      j->c.rank, j->c.timeout_s) ? EXIT_RUNTIME : 0;
    return 0;
}

/* Under the lock: wait until *count (samples in flight) is 0, bounded by timeout_s without
 * progress. Returns 0 or EXIT_RUNTIME with err. */
static int drain(jpegload *j, const int *count, char *err, size_t errlen) {
    long long seen = j->progress;
    double t_last = wall_time();
    int st = 0;
    while (*count > 0 && !st) st = wait_progress(j, &seen, &t_last, err, errlen);
    return st;
}

int jpegload_request(jpegload *j, long key, int epoch, const int *idx, long lo, char *err, size_t errlen) {
    pthread_mutex_lock(&j->mu);
    int st = 0, k = find_slot(j, key);
    if (k >= 0) goto out;
    /* a free slot, else the one of the latest step outside the window [lo, lo + slots) */
    for (int q = 0; q < j->c.slots && k < 0; q++)
        if (j->slots[q].key < 0 && !j->slots[q].held) k = q;
    for (int q = 0; q < j->c.slots && k < 0; q++) {
        const slot *s = &j->slots[q];
        if (!s->held && (s->key < lo || s->key >= lo + j->c.slots)) k = q;
    }
    if (k < 0) { st = 1; goto out; }
    slot *s = &j->slots[k];
    s->next = j->c.b; /* no more claims; wait for those in flight */
    if ((st = drain(j, &s->inflight, err, errlen))) goto out;
    s->key = key;
    s->warnings = s->failures = 0;
    s->epoch = epoch;
    memcpy(s->idx, idx, (size_t)j->c.b * sizeof *idx);
    s->next = s->done = 0;
    pthread_cond_broadcast(&j->work);
out:
    pthread_mutex_unlock(&j->mu);
    return st;
}

static void release_locked(jpegload *j) {
    if (j->held < 0) return;
    slot *s = &j->slots[j->held];
    s->held = 0;
    s->key = -1; /* consumed: the slot is free */
    j->held = -1;
}

void jpegload_release(jpegload *j) {
    pthread_mutex_lock(&j->mu);
    release_locked(j);
    pthread_mutex_unlock(&j->mu);
}

/* Under the lock: help with and wait for *done == n of the work claimed through claim_one
 * (`sl` >= 0: that slot; -1: the evaluation job); bounded as drain. */
static int finish(jpegload *j, int sl, char *err, size_t errlen) {
    long long seen = j->progress;
    double t_last = wall_time();
    for (;;) {
        if (j->fatal) return seterr(err, errlen, "%s", j->fatal_msg) ? EXIT_RUNTIME : 0;
        const int n = sl < 0 ? j->ev.count : j->c.b;
        int *next = sl < 0 ? &j->ev.next : &j->slots[sl].next, *done = sl < 0 ? &j->ev.done : &j->slots[sl].done;
        int *inflight = sl < 0 ? &j->ev.inflight : &j->slots[sl].inflight;
        if (*done >= n && *inflight == 0) return 0;
        if (*next < n) { /* decode one ourselves rather than wait */
            const int pos = (*next)++;
            (*inflight)++;
            work_one(j, &j->self, sl, pos);
            continue;
        }
        if (wait_progress(j, &seen, &t_last, err, errlen)) return EXIT_RUNTIME;
    }
}

int jpegload_take(jpegload *j, long key, const float **x, const int **y, char *err, size_t errlen) {
    pthread_mutex_lock(&j->mu);
    release_locked(j);
    int st, k = find_slot(j, key);
    if (k < 0) st = seterr(err, errlen, "rank %d: jpegload: step %ld was not requested", j->c.rank, key) ? EXIT_RUNTIME : 0;
    else if (!(st = finish(j, k, err, errlen))) {
        slot *s = &j->slots[k];
        s->held = 1;
        j->held = k;
        __atomic_add_fetch(&j->warnings, __atomic_exchange_n(&s->warnings, 0, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
        j->failures += s->failures;
        s->failures = 0;
        *x = j->slots[k].x;
        *y = j->slots[k].y;
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

int jpegload_eval_start(jpegload *j, int64_t begin, int count, float *x, int *y, char *err, size_t errlen) {
    if (!j->c.val || count > j->c.eval_max || count < 0)
        return seterr(err, errlen, "rank %d: jpegload_eval: no validation split, or %d samples asked of at most %d", j->c.rank, count,
                      j->c.eval_max) ? EXIT_RUNTIME : 0;
    pthread_mutex_lock(&j->mu);
    int st = 0;
    if (j->ev.active)
        st = seterr(err, errlen, "rank %d: jpegload_eval_start: an evaluation job is under way", j->c.rank) ? EXIT_RUNTIME : 0;
    else {
        j->ev.begin = begin, j->ev.count = count, j->ev.next = j->ev.done = j->ev.inflight = 0;
        j->ev.x = x, j->ev.y = y;
        j->ev.warnings = j->ev.failures = 0;
        j->ev.active = 1;
        pthread_cond_broadcast(&j->work);
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

/* Under the lock: end the evaluation job; no claims any more, and the samples in flight (they
 * still write into its x) waited for, bounded by timeout_s without progress. */
static void eval_end_locked(jpegload *j) {
    j->ev.next = j->ev.count;
    char e2[ERRLEN];
    drain(j, &j->ev.inflight, e2, sizeof e2);
    j->ev.active = 0;
}

int jpegload_eval_wait(jpegload *j, char *err, size_t errlen) {
    pthread_mutex_lock(&j->mu);
    int st = 0;
    if (!j->ev.active)
        st = seterr(err, errlen, "rank %d: jpegload_eval_wait: no evaluation job was started", j->c.rank) ? EXIT_RUNTIME : 0;
    else {
        st = finish(j, -1, err, errlen);
        eval_end_locked(j); /* after an error: samples may still be in flight */
        __atomic_add_fetch(&j->warnings, __atomic_load_n(&j->ev.warnings, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
        j->failures += j->ev.failures;
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

void jpegload_eval_cancel(jpegload *j) {
    pthread_mutex_lock(&j->mu);
    if (j->ev.active) eval_end_locked(j);
    pthread_mutex_unlock(&j->mu);
}

int jpegload_eval(jpegload *j, int64_t begin, int count, float *x, int *y, char *err, size_t errlen) {
    int st = jpegload_eval_start(j, begin, count, x, y, err, errlen);
    return st ? st : jpegload_eval_wait(j, err, errlen);
}

void jpegload_get_stats(jpegload *j, jpegload_stats *s) {
    pthread_mutex_lock(&j->mu);
    s->warnings = __atomic_load_n(&j->warnings, __ATOMIC_RELAXED);
    s->failures = j->failures;
    s->unique_failures = j->unique;
    pthread_mutex_unlock(&j->mu);
}

long jpegload_save_stats(jpegload *j, int64_t *v, long max) {
    pthread_mutex_lock(&j->mu);
    long n = 0;
    const int64_t counts[2] = {__atomic_load_n(&j->warnings, __ATOMIC_RELAXED), j->failures};
    for (int k = 0; k < 2; k++, n++)
        if (n < max) v[n] = counts[k];
    for (int val = 0; val < 2; val++) {
        const shards *s = val ? j->c.val : j->c.train;
        const int64_t ns = s ? shards_count(s) : 0;
        for (int64_t i = 0; i < ns; i++)
            if (j->reported[val][i]) {
                if (n < max) v[n] = ((int64_t)val << 40) | i;
                n++;
            }
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

int jpegload_restore_stats(jpegload *j, const int64_t *v, long n, char *err, size_t errlen) {
    if (n < 2) return seterr(err, errlen, "decode counters: %ld values, expected at least 2", n);
    pthread_mutex_lock(&j->mu);
    int st = 0;
    for (long k = 2; k < n && !st; k++) {
        const int val = (int)(v[k] >> 40);
        const int64_t i = v[k] & ((INT64_C(1) << 40) - 1);
        const shards *s = val == 0 ? j->c.train : val == 1 ? j->c.val : NULL;
        if (!s || v[k] < 0 || i >= shards_count(s))
            st = seterr(err, errlen, "decode counters: entry %lld names no sample of this pack", (long long)v[k]);
        else
            j->reported[val][i] = 1;
    }
    if (!st) {
        __atomic_store_n(&j->warnings, v[0], __ATOMIC_RELAXED);
        j->failures = v[1];
        j->unique = n - 2;
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}
