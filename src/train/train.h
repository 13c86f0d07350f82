/* train.h — the training loop every method runs in (Jin et al. 2016 §2): the state one rank
 * holds, the timers, and the entry point train_run. A method (src/methods/) supplies the
 * per-step work; this file supplies the schedule, logging, evaluation and stopping. */
#ifndef DSGD_TRAIN_H
#define DSGD_TRAIN_H

#include "config/config.h"
#include "data/idx.h"
#include "data/loader.h"
#include "io/runlog.h"
#include "nn/model.h"

typedef struct method_ops method_ops;

/* Per-phase wall-clock seconds of this rank since training began (HPC-benchmark style). */
typedef struct {
    double data_s;     /* assembling and normalising minibatches */
    double compute_s;  /* forward + backward */
    double comm_s;     /* collectives (includes waiting for slower ranks) */
    double update_s;   /* optimizer update */
} phase_times;

typedef struct trainer {
    const experiment *e;
    const method_ops *method;
    model *net;
    loader train_loader;
    const dataset *train, *val;
    runlog *log;              /* rank 0 only, else NULL */
    int rank, p;

    /* Buffers allocated once (train_init), reused every step. */
    float *x;                 /* (b, c, h, w) training minibatch */
    int *y;                   /* (b) */
    int eval_batch;           /* eval.batch, capped at the largest evaluation slice */
    float *eval_x;            /* (eval_batch, c, h, w) */
    int *eval_y;              /* (eval_batch) */
    int *eval_idx;            /* (eval_batch) sample indices */
    float *velocity;          /* (n_params) momentum v */

    phase_times times;
    long step;                /* steps completed */
} trainer;

/* Result of one evaluation over the whole validation set (every sample once across ranks). */
typedef struct {
    double loss;        /* mean cross-entropy, nats */
    double top1_error;  /* fraction in [0, 1] */
    double top5_error;
    long count;         /* samples evaluated (= validation set size) */
} eval_result;

/* Evaluate the model the rank holds now on its slice of the validation set and reduce over
 * ranks (collective). */
eval_result train_evaluate(trainer *t);

/* Run the whole experiment (collective). Returns EXIT_OK, or EXIT_RUNTIME after a non-finite
 * loss or gradient (all ranks agree) or an output error on rank 0. */
int train_run(trainer *t);

#endif
