/* train.h — the library under the methods (Jin et al. 2016 §2): the state one rank holds, the
 * timers, and what every method's step and the loop above them use — the local computation,
 * evaluation, progress lines and run-file rows, the summary (one rank's part of a checkpoint:
 * ckpt_rank.h).
 * It decides nothing and includes no methods/ header: the loop (src/run/loop.h) decides when,
 * a method (src/methods/method.h) what a step does. */
#ifndef DSGD_TRAIN_H
#define DSGD_TRAIN_H

#include "config/config.h"
#include "data/idx.h"
#include "data/loader.h"
#include "comm/reduce.h"
#include "io/runlog.h"
#include "nn/model.h"
#include "train/inject.h"
#include "train/vclock.h" /* phase_times, the virtual clock of sim mode */

typedef struct method_ops method_ops;
typedef struct ckpt_file ckpt_file;

typedef struct trainer {
    const experiment *e;
    const method_ops *method;
    model *net;
    loader train_loader;
    const dataset *train, *val;
    runlog *log;              /* log_rank only, else NULL */
    int rank, p;              /* world rank; p worker ranks */
    int worker;               /* 0..p-1 on a worker rank, -1 on a server */
    int server;               /* 0..servers-1 on a server rank (world rank p + server), else -1 */
    int log_rank;             /* world rank writing the run file and printing progress: 0, or
                                 the first server (rank p) for methods with servers */
    injector inj;             /* straggler/failure injection of this worker */
    reducer red;              /* the workers' all-reduce, its path chosen once (comm/reduce.h; set by
                                 setup_model) */

    /* Buffers allocated once (setup_model, src/run/setup.c), reused every step. */
    float *x;                 /* (b, c, h, w) training minibatch */
    int *y;                   /* (b) */
    int eval_batch;           /* eval.batch, capped at the most samples one rank evaluates */
    float *eval_x;            /* (eval_batch, c, h, w) */
    int *eval_y;              /* (eval_batch) */
    float *velocity;          /* (n_params) momentum v; NULL unless method_ops.host_velocity */

    phase_times times;        /* real (wall-clock) phase times, in sim mode too */
    vclock vc;                /* sim mode's virtual clock (vc.on = 0 otherwise; set by setup_model) */
    long step;                /* steps completed (server methods: iterations, see methods.md) */
    long last_ckpt;           /* label of the last checkpoint written by train_checkpoint (0: none) */

    /* Checkpoints (src/train/checkpoint.h; set by resume_prepare). */
    char ckpt_dir[CFG_PATH_MAX + 16]; /* checkpoint directory */
    long resume_label;        /* -1: a fresh run; else continue from the checkpoint after this
                                 many iterations */
    int sig;                  /* CKPT_SIG_* the ranks agreed on at the last agreement point */
    int lost;                 /* ranks this rank gave up on (silent for comm_timeout_s) and went on
                                 without: the job then ends with MPI_Abort (comm_finish), as a
                                 stopped process never exits */

    void *mstate;             /* the method's own state on this rank (method_ops.begin allocates it,
                                 .end frees it; NULL: none): no method keeps file-scope state */

    uint64_t data_fp[2];      /* data.format = "jpeg": shards_fingerprint of train and val (0: other
                                 formats), recorded in checkpoints and checked by a resume */

    /* Progress-line state of the log rank (train_log_*). */
    long last_log_step;
    double last_log_s, eval_s_total, at_start_eval_s;
    long n_evals;

    /* Evaluation decode-ahead (train.c eval_range; docs/data.md "Threads"): a second evaluation
     * buffer, allocated once by setup_model for data.format = "jpeg" (NULL otherwise, or with
     * DSGD_EVAL_AHEAD=0: one batch at a time). The decode threads fill it with the next batch
     * while the network evaluates the current one from the other. */
    float *eval_x2;           /* (eval_batch, c, h, w) */
    int *eval_y2;             /* (eval_batch) */
} trainer;

/* Result of one evaluation over the whole validation set (every sample once across ranks). */
typedef struct {
    double loss;        /* mean cross-entropy, nats */
    double top1_error;  /* fraction in [0, 1] */
    double top5_error;
    long count;         /* samples evaluated (= validation set size) */
    int failed;         /* 1: a rank's loader failed (said on that rank); loss and errors are NaN */
} eval_result;

/* Evaluate the model the rank holds now on its slice of the validation set and reduce over
 * the workers (collective over the workers). */
eval_result train_evaluate(trainer *t);

/* Evaluate net on the whole validation set on this rank alone (a server evaluating the
 * center); uses t's evaluation buffers. abandon (NULL: never) is called with arg after every
 * evaluation batch; when it returns nonzero the evaluation stops there and the result has
 * count = 0 (nothing to log: server 0 abandons an evaluation on a stop request, src/methods/server.c). */
eval_result train_evaluate_all(trainer *t, model *net, int (*abandon)(void *arg), void *arg);

/* One worker's local computation of step `step`: the minibatch of data step `data_step`
 * (loader_batch), forward and backward (model_train_step: grads overwritten, BN statistics
 * updated), then the injected straggler delay (inject group). Adds to t->times data_s,
 * compute_s and delay_s. *loss: the mean loss of the minibatch. Returns 0, or -1 when the loader
 * could not deliver (loader_error(&t->train_loader) says why; nothing computed): the step then
 * returns STOPPED_DATA and the loop stops the run. No allocation. */
int train_compute(trainer *t, long data_step, long step, double *loss);

/* Log rank: the progress line and /train row after `step` iterations at `time_s` seconds of
 * training with mean loss and α; also /ranks when rows is not NULL (5 arrays of p: step, compute,
 * comm, wait, data). Returns 0 or EXIT_RUNTIME after a run-file write error (printed). */
int train_log_train(trainer *t, long step, double time_s, double loss, double alpha, const double *rows);

/* Log rank: print and append an /eval row (local = 1: /eval_local). eval_s: how long the
 * evaluation took (for the ETA). Returns 0 or EXIT_RUNTIME after a write error (printed). */
int train_log_eval(trainer *t, long step, double time_s, const eval_result *r, double eval_s, int local);

/* The phase times of the run file's time axis: t->vc.v in sim mode, else t->times. */
const phase_times *train_axis_times(const trainer *t);

/* Collective over the workers: each worker's mean seconds per step over the `steps` since the
 * times in *prev (then updated): step, compute, comm, wait, data (NaN after no step), gathered
 * on worker 0 into out (5 arrays of p; buf: 5·p scratch). The /ranks rows. */
void train_gather_rank_times(trainer *t, phase_times *prev, long steps, double *buf, double *out);

/* Why a run stopped early (the run file's `status`, train_log_summary): a run-file write error, a
 * non-finite loss or gradient, too few workers left to complete a step (backup), a checkpoint
 * that could not be written, data that could not be loaded; a status of EXIT_INTERRUPTED needs no
 * reason (the status names the signal or stop_at). */
enum { STOPPED_WRITE = 0, STOPPED_NONFINITE = 1, STOPPED_WORKERS = 2, STOPPED_CHECKPOINT = 3, STOPPED_DATA = 4 };

/* A non-finite training loss or gradient after `done` steps at step size alpha: *why and the
 * message, with `then` (what happens now). local = 1: this rank's own loss, said by this rank;
 * 0: a loss every rank agrees on, said by the log rank. */
void train_say_nonfinite_loss(const trainer *t, int *why, int local, long done, double alpha, const char *then);
/* A non-finite validation loss of `what` (the model, the nodes, the center): *why, and the log
 * rank says so. */
void train_say_nonfinite_eval(const trainer *t, int *why, long done, const char *what);
/* The stop message after the checkpoint at `done` that a stop signal asked for (log rank). */
void train_say_stopped(const trainer *t, long done);

/* Log rank: the end-of-run summary lines and run-file attributes. why: STOPPED_* (used when
 * status != EXIT_OK); train_s: training wall clock; t->step steps of m = p·b images done;
 * evaluation_excluded: 1 when train_s excludes evaluation (the loop; a server's evaluation thread
 * runs beside training). */
void train_log_summary(trainer *t, int status, int why, double train_s, int evaluation_excluded);

/* The training-loop state a checkpoint carries besides the model and the method's state (the
 * log rank's file only; t->times is in every rank's). */
typedef struct {
    double train_s;           /* training wall clock so far (the run file's time axis) */
    double loss_acc;          /* loss summed since the last /train row */
    long loss_n;              /* steps in loss_acc */
    long last_row;            /* step of the last /train row */
    phase_times prev;         /* times at the last /ranks row */
} loop_state;

/* Collective over the workers: evaluate the model each rank holds (train_evaluate) after `step`
 * steps and `train_s` seconds of training; the log rank prints and appends the /eval row. Returns
 * the status every rank agrees on: the worst of every rank's `status` and the log rank's writes;
 * a non-finite validation loss stops every rank (*why = STOPPED_NONFINITE). The default
 * method_ops.evaluate. */
int train_evaluate_and_log(trainer *t, long step, double train_s, int status, int *why);

#endif
