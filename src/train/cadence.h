/* cadence.h — the one place that decides when a training loop logs, evaluates, checkpoints and
 * stops, and that says why it stopped. Its clients are the one loop of src/train/train.c (allreduce,
 * gossip) and the worker and server loops of the methods with servers (src/methods/server*.c). `done` counts
 * the steps (server: iterations) completed, from 1; `why` is the STOPPED_* of the summary. */
#ifndef DSGD_CADENCE_H
#define DSGD_CADENCE_H

#include "train/train.h"

/* A /train row after `done` steps: every log_every steps and after the last. */
static inline int cadence_log_due(const experiment *e, long done) { return done % e->log_every == 0 || done == e->iterations; }
/* An evaluation: every eval.every steps and after the last. */
static inline int cadence_eval_due(const experiment *e, long done) { return done % e->eval.every == 0 || done == e->iterations; }
/* A periodic checkpoint: every checkpoint.every steps (0: never). */
static inline int cadence_ckpt_due(const experiment *e, long done) { return e->checkpoint.every && done % e->checkpoint.every == 0; }
/* What is due once `done` steps (server: iterations) are complete after `before` were: the
 * CADENCE_* whose period was crossed in (before, done] — a /train row every log_every and after
 * the last, an evaluation every eval.every and after the last, a periodic checkpoint every
 * checkpoint.every (0: never). Pure; the one rule of the loop (done = before + 1) and of server 0,
 * whose counts jump. */
enum { CADENCE_LOG = 1u, CADENCE_EVAL = 2u, CADENCE_CKPT = 4u };
static inline int cadence_crossed(long before, long done, long every) { return every > 0 && done / every > before / every; }
static inline unsigned cadence_due(const experiment *e, long before, long done) {
    if (done <= before) return 0;
    const int last = before < e->iterations && done >= e->iterations;
    return (cadence_crossed(before, done, e->log_every) || last ? CADENCE_LOG : 0u) |
           (cadence_crossed(before, done, e->eval.every) || last ? CADENCE_EVAL : 0u) |
           (cadence_crossed(before, done, e->checkpoint.every) ? CADENCE_CKPT : 0u);
}
/* Counters (the server loop, whose iterations jump): the first multiple of `every` beyond it. */
static inline long cadence_next(long it, long every) { return (it / every + 1) * every; }

/* A non-finite training loss or gradient after `done` steps at step size alpha: *why and the
 * message, with `then` (what happens now). local = 1: this rank's own loss, said by this rank;
 * 0: a loss every rank agrees on, said by the log rank. */
void cadence_nonfinite_loss(const trainer *t, int *why, int local, long done, double alpha, const char *then);
/* A non-finite validation loss of `what` (the model, the nodes, the center): *why, and the log
 * rank says so. */
void cadence_nonfinite_eval(const trainer *t, int *why, long done, const char *what);
/* The stop message after the checkpoint at `done` that a stop signal asked for (log rank). */
void cadence_say_stopped(long done);

/* Collective over the world (allreduce, gossip): the checkpoint at `label` and what the signal
 * that may have asked for it wants. Returns 0 (go on; a save request is cleared), EXIT_INTERRUPTED
 * (a stop signal: said once) or EXIT_RUNTIME (not written: *why). */
int cadence_checkpoint(trainer *t, int *why, long label, const loop_state *ls);

#endif
