/* method.h — one distributed SGD method = one file in src/methods/ exporting a method_ops table
 * (as nccl-tests has one file per collective). A method either moves its ranks in lock-step and
 * gives the synchronous loop of train_run (src/train/train.c) its step, or brings its own loop
 * (`run`: gossip, whose nodes meet only at evaluations; ps, easgd, backup, which have server
 * ranks); every loop takes its cadence — when to log, evaluate, checkpoint, stop — from
 * src/train/cadence.h. Entries:
 *
 *   init      once, after the model is built and initialised identically on every rank
 *   step      lock-step methods: once per iteration t (0-based) with the step size α_t; returns
 *             the mean loss over the nodes' minibatches of this step (identical on every rank;
 *             NaN: non-finite) and agrees on t->sig
 *   eval_prepare  lock-step methods, before each evaluation: make the model each rank evaluates
 *             the one the method's paper evaluates (e.g. average BN statistics across ranks)
 *   run       the other methods: the whole loop (NULL: train_run's, with step and eval_prepare)
 *   runlog_arrays  optional, after init and before training (setup_runlog, on the log rank):
 *             the method's own run-file arrays, which it then writes by their index (runlog.h)
 *
 * Methods touch parameters only through the flat vectors of src/nn/model.h and communicate
 * only through src/comm/comm.h. */
#ifndef DSGD_METHOD_H
#define DSGD_METHOD_H

#include <stddef.h>

#include "train/train.h"

struct method_ops {
    const char *name;
    int (*init)(trainer *t, char *err, size_t errlen);
    double (*step)(trainer *t, long step, double alpha);
    void (*eval_prepare)(trainer *t);
    int (*run)(trainer *t);
    /* Checkpoints (src/train/checkpoint.h): write this rank's method state into f / read it back
     * (after init; f is this rank's file). Return 0 or -1 (message in ckpt_error(f)). Methods
     * whose ranks hold no state of their own beyond the model's may leave them NULL. */
    int (*save)(trainer *t, ckpt_file *f);
    int (*load)(trainer *t, ckpt_file *f);
    /* The method's run-file arrays (docs/output.md): fills arrays[0..n), n <= METHOD_MAX_ARRAYS,
     * and returns n; the method writes array i as runlog index i. NULL: none. */
    int (*runlog_arrays)(const experiment *e, runlog_array_spec *arrays);
    int eval_local;                   /* 1: the run file also holds /eval_local (runlog_meta) */
    const struct server_rules *rules; /* methods with servers (src/methods/server.h) */
};

#define METHOD_MAX_ARRAYS 2

extern const method_ops method_allreduce, method_ps, method_easgd, method_backup, method_gossip_pull, method_gossip_push;

/* The table for a method, or NULL if that method is not built. */
const method_ops *method_find(method_kind k);

#endif
