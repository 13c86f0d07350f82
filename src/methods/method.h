/* method.h — one distributed SGD method = one file in src/methods/ exporting a method_ops table
 * (as nccl-tests has one file per collective). Every worker rank of every method runs the one
 * training loop, train_run (src/train/train.c), which calls the entries below and owns the
 * cadence — when to log, evaluate, checkpoint and stop (src/train/cadence.h) — unless the method
 * has server ranks (ps, easgd, backup): then the servers keep it (their serve loop,
 * src/methods/server.c, decides from the same cadence.h) and tell the workers in their replies.
 * Entries (NULL: not needed):
 *
 *   init      once, after the model is built and initialised identically on every rank
 *   begin     train_run, before a resume and the first evaluation (collective): start what lives
 *             as long as the loop (gossip's communication thread; a server method's worker reads
 *             its checkpoint here); returns the status every rank agrees on, having released
 *             what it set up when that is not 0 (message printed)
 *   step      every iteration s (0-based) with the step size α_s: this rank's step, returned as a
 *             step_out (below); it prints nothing and closes nothing — the loop decides what
 *             follows. Lock-step methods (meets = 0) return the mean loss over the nodes, the same
 *             on every rank, and agree on t->sig inside the step
 *   signal    meets = 1, after each step: pass on signals between meeting points; returns 1 when
 *             a signal makes step `done` this node's meeting point for a checkpoint
 *   meet      meets = 1, at meeting points (evaluations, periodic checkpoints, signal meetings),
 *             collective: agree on t->sig; returns the label of a checkpoint held there
 *   quiesce   before a checkpoint's files are written (train_checkpoint, collective): finish
 *             what is in flight so that the files hold a consistent cut
 *   evaluate  collective over the workers, after `done` steps: evaluate the model the method's
 *             paper evaluates, log it, and return the status every rank agrees on (the worst of
 *             `status` and the log rank's writes; a non-finite loss sets *why). NULL:
 *             train_evaluate_and_log
 *   end       after the loop (collective): the method's last records and release; returns status
 *   serve     the methods with server ranks: the whole run of a server rank (t->worker < 0)
 *   runlog_arrays  optional, after init and before training (setup_runlog, on the log rank):
 *             the method's own run-file arrays, which it then writes by their index (runlog.h)
 *   meets     0 (METHOD_MEETS_EVERY_STEP): lock-step — every step is collective, a non-finite
 *             loss and a run-file write error stop every rank at that step, /ranks rows come
 *             with /train rows. 1 (METHOD_MEETS_AT_POINTS): the nodes run on their own and meet
 *             (a barrier) at evaluations and checkpoints, where errors are agreed; /ranks rows
 *             are the method's (at evaluations). 2 (METHOD_MEETS_SERVERS): the workers never
 *             meet each other; train_run only steps them, and the servers' replies log,
 *             evaluate, checkpoint and stop (src/methods/server.h)
 *
 * Methods touch parameters only through the flat vectors of src/nn/model.h and communicate
 * only through src/comm/comm.h. docs/architecture.md has a worked example. */
#ifndef DSGD_METHOD_H
#define DSGD_METHOD_H

#include <stddef.h>

#include "train/train.h"

/* What a method's step returns. took: METHOD_STEP_TOOK (loss is this step's; NaN: non-finite),
 * METHOD_STEP_NONE (this rank took no step: a failed gossip node) or METHOD_STEP_END (meets =
 * METHOD_MEETS_SERVERS: the servers' reply ended this worker's run; t->step is set). status:
 * EXIT_OK, or EXIT_RUNTIME with why (STOPPED_*, train.h): the step could not be completed — e.g.
 * STOPPED_DATA, the loader failed (loader_error says why) — and the loop stops the run. */
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
    int (*serve)(trainer *t);
    /* Checkpoints (src/train/checkpoint.h): write this rank's method state into f / read it back
     * (after init; f is this rank's file). Return 0 or -1 (message in ckpt_error(f)). Methods
     * whose ranks hold no state of their own beyond the model's may leave them NULL. */
    int (*save)(trainer *t, ckpt_file *f);
    int (*load)(trainer *t, ckpt_file *f);
    /* The method's run-file arrays (docs/output.md): fills arrays[0..n), n <= METHOD_MAX_ARRAYS,
     * and returns n; the method writes array i as runlog index i. NULL: none. */
    int (*runlog_arrays)(const experiment *e, runlog_array_spec *arrays);
    int eval_local;                   /* 1: the run file also holds /eval_local (runlog_meta) */
    int meets;                        /* see above */
    const struct server_rules *rules; /* methods with servers (src/methods/server.h) */
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
enum { METHOD_MEETS_EVERY_STEP = 0, METHOD_MEETS_AT_POINTS = 1, METHOD_MEETS_SERVERS = 2 };

extern const method_ops method_allreduce, method_ps, method_easgd, method_backup, method_gossip_pull, method_gossip_push;

/* The table for a method, or NULL if that method is not built. */
const method_ops *method_find(method_kind k);

/* method_ops.init of gossip and the server methods, and the start of allreduce's: rank 0's
 * parameters broadcast to every rank, an identical starting point whatever the node's libm.
 * Returns 0. */
int method_init_rank0(trainer *t, char *err, size_t errlen);

#endif
