/* backup.c — synchronous SGD with backup workers (Chen, Monga, Bengio, Józefowicz 2016).
 *
 * p = N + `backups` workers. Step v: the servers aggregate the first N gradients computed on
 * the parameters of step v, apply one Nesterov-SGD update with their mean (α of step v) and
 * reply with the new parameters to those N workers; a gradient computed on older parameters
 * arrives late, is dropped (counted per step in /backup/dropped) and its worker gets the newest
 * parameters at once, so every worker always computes on the newest parameters it has. A run
 * is `iterations` steps; afterwards every reply says stop. With backups = 0 this is synchronous
 * SGD through a parameter server; with p = 1, plain SGD bitwise. Each server shard takes the
 * first N gradients of its own (as TensorFlow's SyncReplicasOptimizer accumulates per variable).
 * The sum over the N gradients is in arrival order (not bitwise reproducible for N > 1). */
#include "methods/method.h"
#include "methods/server.h"
#include "optim/sgd.h"
#include "train/checkpoint.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rule's state on every server (the drops: server 0's records). */
typedef struct {
    long long *dropped;      /* (cap) gradients dropped per step v, v < len */
    long len, cap;           /* steps counted so far, allocated */
    long long n_dropped;
    int starved;             /* fewer than N workers left: no step can complete */
} backup_state;

static void *backup_state_new(const srv *sv) {
    backup_state *b = xcalloc(1, sizeof *b);
    const long iters = (long)sv->t->e->iterations;
    if (sv->k == 0) b->cap = iters < 4096 ? iters : 4096;
    b->dropped = xcalloc((size_t)(b->cap ? b->cap : 1), sizeof(long long));
    return b;
}

static void backup_state_free(void *rule) {
    backup_state *b = rule;
    if (b) free(b->dropped);
    free(b);
}

/* Make the per-step drop counts cover steps [0, n): they grow with the steps seen (doubling; not
 * preallocated by `iterations`, which may be huge). */
static void dropped_reserve(backup_state *b, long n) {
    if (n > b->cap) {
        long cap = b->cap > 0 ? b->cap : 1;
        while (cap < n) cap *= 2;
        long long *d = realloc(b->dropped, (size_t)cap * sizeof *d);
        if (!d) DIE("out of memory for the dropped-gradient counts of %ld steps", cap);
        memset(d + b->cap, 0, (size_t)(cap - b->cap) * sizeof *d);
        b->dropped = d, b->cap = cap;
    }
    if (n > b->len) b->len = n;
}

/* Server 0: a gradient of step v dropped. */
static void count_dropped(srv *sv, long v) {
    backup_state *b = sv->rule;
    dropped_reserve(b, v + 1);
    b->dropped[v]++;
    b->n_dropped++;
}

static int backup_records_io(srv *sv, ckpt_file *f) {
    backup_state *b = sv->rule;
    int64_t cnt[2] = {b->n_dropped, b->len};
    if (ckpt_io_i64(f, "dropped_counts", cnt, 2)) return -1;
    if (!ckpt_writing(f) && (cnt[1] < 0 || cnt[1] > sv->t->e->iterations)) return -1; /* a count of steps this run cannot have */
    b->n_dropped = cnt[0];
    dropped_reserve(b, (long)cnt[1]);
    return ckpt_io_i64(f, "dropped", (int64_t *)b->dropped, (size_t)b->len);
}

/* /backup/dropped: one element per step completed (docs/output.md). */
static int backup_finish(srv *sv, long it, int *why) {
    backup_state *b = sv->rule;
    const long steps = it < sv->t->e->iterations ? it : (long)sv->t->e->iterations;
    dropped_reserve(b, steps);
    if (b->starved) *why = STOPPED_WORKERS;
    return runlog_array_rows(sv->t->log, 0, b->dropped, steps) != 0 ? EXIT_RUNTIME : 0;
}

static void backup_say(const srv *sv) {
    const backup_state *b = sv->rule;
    printf("backup: %lld gradients dropped (arrived after the first N = %d of their step)\n", b->n_dropped, sv->p - sv->t->e->backups);
}

static int backup_n(const srv *sv) { return sv->p - sv->t->e->backups; }

static int finished(const srv *sv) { return sv->version >= sv->t->e->iterations || sv->live < backup_n(sv); }

static void backup_apply(srv *sv) {
    const experiment *e = sv->t->e;
    const float inv = 1.0f / (float)sv->count;
    for (size_t j = 0; j < sv->n; j++) sv->acc[j] *= inv;
    if (!sv->diverged && !sgd_update(sv->center, sv->acc, sv->vel, sv->n, (float)alpha_at(e, sv->version), (float)e->momentum,
                                     (float)e->weight_decay, e->nesterov))
        sv->diverged = 1;
    memset(sv->acc, 0, sv->n * sizeof(float));
    sv->count = 0;
    sv->version++;
    for (int i = 0; i < sv->p; i++)
        if (sv->held[i]) srv_reply_center(sv, i, sv->diverged ? STOP_DIVERGED : finished(sv) ? STOP_DONE : srv_stop(sv));
}

static void backup_request(srv *sv, int i) {
    const long v = sv->in[i].version;
    if (finished(sv) || sv->diverged) {
        /* The last steps' stragglers: a gradient of a step that completed without it. */
        if (sv->k == 0 && !sv->diverged && v >= 0 && v < sv->version && v < sv->t->e->iterations)
            count_dropped(sv, v);
        srv_reply_center(sv, i, sv->diverged ? STOP_DIVERGED : STOP_DONE);
        return;
    }
    /* Pausing for a checkpoint: a round in progress completes, a new one does not start (the
     * gradient is computed again after the checkpoint, from the same parameters and data). */
    if (v == sv->version && sv->pausing && sv->count == 0) {
        srv_reply_center(sv, i, STOP_CKPT_VOID);
        return;
    }
    if (v == sv->version) {
        const float *g = sv->gbuf[i];
        for (size_t j = 0; j < sv->n; j++) sv->acc[j] += g[j];
        sv->held[i] = 1;
        if (++sv->count == backup_n(sv)) backup_apply(sv);
        return;
    }
    /* Computed on older parameters: too late for its step. */
    if (sv->k == 0 && v >= 0 && v < sv->t->e->iterations) count_dropped(sv, (long)v);
    srv_reply_center(sv, i, srv_stop(sv));
}

/* A worker left: if fewer than N remain, no step can complete any more: release everyone. */
static void backup_leave(srv *sv, int i) {
    if (sv->live >= backup_n(sv) || sv->version >= sv->t->e->iterations) return;
    backup_state *b = sv->rule;
    if (!b->starved && sv->k == 0)
        fprintf(stderr, "dsgd-run: backup: %d worker(s) left, fewer than the N = %d a step needs: stopping at step %ld of %ld\n", sv->live,
                backup_n(sv), (long)sv->version, sv->t->e->iterations);
    b->starved = 1;
    for (int w = 0; w < sv->p; w++)
        if (sv->held[w]) srv_reply_center(sv, w, STOP_DONE);
}

static long backup_iteration(const srv *sv) { return (long)sv->version; }

static const server_rules backup_rules = {
    .until_stop = 1,
    .request = backup_request,
    .leave = backup_leave,
    .iteration = backup_iteration,
    .state_new = backup_state_new,
    .state_free = backup_state_free,
    .records_io = backup_records_io,
    .finish = backup_finish,
    .say = backup_say,
};

static int backup_runlog_arrays(const experiment *e, runlog_array_spec *a) {
    a[0] = (runlog_array_spec){"backup/dropped", e->iterations, 0, "gradients",
                               "gradients dropped at step v (computed on the parameters of step v, arrived after the first N); "
                               "one element per step completed", 0, 1};
    return 1;
}

const method_ops method_backup = {
    .name = "backup", SERVER_METHOD_OPS, .runlog_arrays = backup_runlog_arrays, .rules = &backup_rules,
};
