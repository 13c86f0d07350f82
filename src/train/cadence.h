/* cadence.h — the one rule of when a run logs, evaluates and checkpoints: pure functions of the
 * experiment and the counts. Its clients are the loop (src/run/loop.c: allreduce, gossip), server 0
 * of the methods with servers (src/methods/server.c, server_pause.c), whose counts jump, and
 * gossip's meeting points (gossip_signal.c).
 * `done` counts the steps (server: iterations) completed, from 1. */
#ifndef DSGD_CADENCE_H
#define DSGD_CADENCE_H

#include "config/config.h"

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

#endif
