/* method.h — one distributed SGD method = one file in src/methods/ exporting a method_ops table
 * (as nccl-tests has one file per collective). The layers: src/run/ (the phases and the one loop)
 * calls the methods; the methods call src/train/ (compute, evaluate, log rows, one rank's
 * checkpoint part), comm/, nn/ and optim/; nothing below calls back up. Every worker rank of
 * allreduce and gossip runs the loop, train_run (src/run/loop.c), which calls the entries below and
 * decides — when to log, evaluate, checkpoint (src/train/cadence.h) and stop. The methods with
 * server ranks (ps, easgd, backup) run their ranks' own loops (`run`): the servers keep the
 * cadence from the same cadence.h and tell the workers in their replies (src/methods/server.h).
 * Entries (NULL: not needed):
 *
 *   init      once, after the model is built and initialised identically on every rank
 *   begin     the loop, before a resume and the first evaluation (collective): start what lives
 *             as long as the loop (gossip's state and communication thread); returns the status
 *             every rank agrees on, having released what it set up when that is not 0
 *   step      every iteration s (0-based) with the step size α_s: this rank's step, returned as a
 *             step_out (below); it prints nothing and closes nothing — the loop decides what
 *             follows. A lock-step method (no `meet`) returns the mean loss over the nodes, the
 *             same on every rank, and agrees on t->sig inside the step
 *   signal    after each step (methods with `meet`): pass on signals between meeting points;
 *             returns 1 when a signal makes step `done` this node's meeting point for a checkpoint
 *   meet      set: the nodes run on their own and meet (a barrier) at evaluations and checkpoints,
 *             where errors are agreed; /ranks rows are the method's (at evaluations). Called at
 *             meeting points (evaluations, periodic checkpoints, signal meetings), collective:
 *             agree on t->sig; returns the label of a checkpoint held there. NULL: lock-step —
 *             every step is collective, a non-finite loss and a run-file write error stop every
 *             rank at that step, /ranks rows come with /train rows
 *   quiesce   before a checkpoint's files are written (train_checkpoint, collective): finish
 *             what is in flight so that the files hold a consistent cut
 *   evaluate  collective over the workers, after `done` steps: evaluate the model the method's
 *             paper evaluates, log it, and return the status every rank agrees on (the worst of
 *             `status` and the log rank's writes; a non-finite loss or a failed load sets *why).
 *             NULL: train_evaluate_and_log
 *   end       after the loop (collective): the method's last records and release; returns status
 *   run       instead of the loop: the whole run of this rank, for methods whose ranks keep their
 *             own loops (ps, easgd, backup: server_run, a server's loop or a worker's)
 *   save, load     this rank's method state in its checkpoint file
 *   runlog_arrays  optional, after init and before training (setup_runlog, on the log rank):
 *             the method's own run-file arrays, which it then writes by their index (runlog.h)
 *
 * Methods touch parameters only through the flat vectors of src/nn/model.h and communicate
 * only through src/comm/comm.h. docs/architecture.md has a worked example. */
#ifndef DSGD_METHOD_H
#define DSGD_METHOD_H

#include <stddef.h>

#include "train/train.h"

/* What a method's step returns. took: METHOD_STEP_TOOK (loss is this step's; NaN: non-finite),
 * METHOD_STEP_NONE (this rank took no step: a failed gossip node) or METHOD_STEP_END (a server
 * method's worker: the servers' reply ended its run; t->step is set). status: EXIT_OK, or how the
 * run ends here with why (STOPPED_*, train.h): EXIT_RUNTIME — e.g. STOPPED_DATA, the loader failed
 * (loader_error says why), STOPPED_NONFINITE — or EXIT_INTERRUPTED (a server method's worker after
 * the checkpoint a stop signal asked for). */
typedef struct {
    int took;
    double loss;
    int status;
    int why;
} step_out;

struct method_ops {
    const char *name;
    int (*init)(trainer *t, char *err, size_t errlen);
    int (*begin)(trainer *t);
    step_out (*step)(trainer *t, long s, double alpha);
    int (*signal)(trainer *t, long done);
    long (*meet)(trainer *t, long done, int sigmeet);
    void (*quiesce)(trainer *t);
    int (*evaluate)(trainer *t, long done, double train_s, int status, int *why);
    int (*end)(trainer *t, int status);
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
    const void *variant;              /* what differs between tables sharing one file's code (gossip: pull or push) */
    /* What the set-up phases (src/run/setup.c, src/main.c) give the method before init; 0: no. */
    int comm_thread;         /* a communication thread beside the main one (gossip): counted in the
                                thread budget; asynchronous (synchronous = false) it calls MPI while
                                the main thread does, so MPI must give MPI_THREAD_MULTIPLE */
    int host_velocity;       /* trainer.velocity: n_params zeroed floats, the momentum of the method's
                                own host update (sgd_update); else NULL */
    int reduces;             /* averages through t->red (comm/reduce.h): the start-up line and the
                                run file's `device` name the reducer's path */
    int ranks_end_together;  /* every worker returns from train_run at the same step and the log rank
                                is a worker: setup_close sums the workers' decode counts (jpeg) */
};

#define METHOD_MAX_ARRAYS 2
enum { METHOD_STEP_NONE = 0, METHOD_STEP_TOOK = 1, METHOD_STEP_END = 2 };

extern const method_ops method_allreduce, method_ps, method_easgd, method_backup, method_gossip_pull, method_gossip_push;

/* The table for a method, or NULL if that method is not built. */
const method_ops *method_find(method_kind k);

/* method_ops.init of gossip and the server methods, and the start of allreduce's: rank 0's
 * parameters broadcast to every rank, an identical starting point whatever the node's libm.
 * Returns 0. */
int method_init_rank0(trainer *t, char *err, size_t errlen);

#endif
