/* reduce.h — the all-reduce of synchronous SGD (Jin et al. 2016 §2.1) as one object: how a model
 * vector travels is chosen once, when the reducer is built (setup_model), and every call then
 * takes that path. The one place where the transports meet: MPI through src/comm/comm.h, NCCL
 * and the device-side scaling through cuda/gpucomm.h; the loop and the methods call only this.
 *
 *   REDUCE_HOST     CPU model: comm_allreduce_mean_f32 on the vector (host memory)
 *   REDUCE_NCCL     GPU model, comm = "nccl": ncclAllReduce(ncclAvg) on the device vector, on the
 *                   model's stream — also at p = 1, where it changes nothing, so that one GPU
 *                   exercises it; for the gradient, per gradient group on a stream of its own as
 *                   the backward pass produces each group (allreduce_grads, reducer_grads_begin)
 *                   unless DSGD_NCCL_OVERLAP=0 or DSGD_OVERLAP=0
 *   REDUCE_DEVICE   GPU model, CUDA-aware MPI (comm_gpu_aware): comm_workers_sum_f32 on the
 *                   device vector, then the division by p on the device
 *   REDUCE_STAGED   GPU model, other MPI: model_download, comm_allreduce_mean_f32 on the page-
 *                   locked host mirror, model_upload; for the gradient, overlapped with the
 *                   backward pass chunk by chunk (allreduce_grads, src/methods/allreduce_overlap.h) unless DSGD_OVERLAP=0
 *
 * Every path gives the same bits as REDUCE_HOST's sum-then-scale (NCCL's ncclAvg: when p is a
 * power of two, cuda/gpucomm.h). A wait longer than comm_timeout_s stops every rank
 * (comm_timeout_abort); an NCCL failure prints NCCL's message and stops every rank (exit 1).
 * No call allocates. */
#ifndef DSGD_REDUCE_H
#define DSGD_REDUCE_H

#include <stddef.h>

#include "config/config.h"
#include "nn/model.h"

typedef enum { REDUCE_HOST, REDUCE_NCCL, REDUCE_DEVICE, REDUCE_STAGED } reduce_path;

typedef struct reducer {
    reduce_path path;
    int overlap;              /* REDUCE_STAGED, p > 1, DSGD_OVERLAP not 0: the gradient reduced during the backward pass (allreduce_grads) */
    int stage;                /* GPU model and DSGD_OVERLAP not 0: the next minibatch is staged on
                                 the device while a step computes (allreduce_grads) */
    int nccl_overlap;         /* REDUCE_NCCL, stage, DSGD_NCCL_OVERLAP not 0: the gradient's all-reduce
                                 per group during the backward pass (reducer_grads_begin) */
    model *net;
    int p, rank;
    struct gpucomm *nccl;     /* REDUCE_NCCL: the workers' communicator (cuda/gpucomm.h) */
} reducer;

/* Collective over the workers (p of them; this one is `worker`, world rank `rank`): choose the
 * path for net (above) and build it; comm = "nccl" also checks that no two workers share a GPU,
 * loads NCCL and builds the communicator. Returns this rank's status: 0, EXIT_BADINPUT (workers
 * sharing a GPU) or EXIT_RUNTIME (NCCL missing, or its initialisation failed), with msg (n bytes)
 * saying why on the ranks that failed. The workers agree after each part (comm_max_int over the
 * world, which for comm = "nccl" is the workers), so when any worker fails every worker returns at
 * that part, the others with 0 and an unbuilt communicator (r->nccl NULL): the caller agrees on the
 * statuses (src/run/setup.c: exit 2 or 1 on every rank, the failing rank's msg blamed on key
 * 'comm') before r is used. r can be released with reducer_free either way. */
int reducer_init(reducer *r, const experiment *e, model *net, int worker, int rank, char *msg, size_t n);

/* The reducer of a given path, without set-up or checks (reducer_init uses it; the GPU tests
 * build each path with it): p workers, this one world rank `rank`; nccl: REDUCE_NCCL's
 * communicator. r->stage and r->overlap follow DSGD_OVERLAP, the path and p; r->nccl_overlap
 * also DSGD_NCCL_OVERLAP (1, the default, or 0; reducer_init refuses another value: exit 2, the
 * message naming the variable). */
void reducer_with(reducer *r, reduce_path path, model *net, int p, int rank, struct gpucomm *nccl);

/* The path in the start-up line: "" on a CPU model, else "; all-reduce: NCCL 2.x on the GPUs"
 * (then " per gradient group during the backward pass" when r->nccl_overlap),
 * "; all-reduce: MPI on device memory (CUDA-aware)" or "; all-reduce: MPI through host memory". */
void reducer_describe(const reducer *r, char *buf, size_t n);

/* Collective over the workers: the vector `which` of r's model (MODEL_GRADS: n_params, MODEL_BN:
 * n_bn; MODEL_PARAMS also works) := its mean over the p workers, in place where the network
 * computes. Nothing happens at p = 1 except on REDUCE_NCCL. If wait_s is not NULL, every path
 * first waits at the worker barrier and adds the seconds spent there to *wait_s, so /ranks
 * wait_s means the same on every path. */
void reducer_mean(reducer *r, int which, double *wait_s);

/* REDUCE_NCCL with r->nccl_overlap: MODEL_GRADS := its mean, overlapped with the step's backward
 * pass. reducer_grads_begin before model_train_begin arms the model so that each gradient group's
 * all-reduce is enqueued on the NCCL stream as soon as the backward pass has produced it
 * (cuda/gpucomm.h gpucomm_grads_begin); reducer_grads_end after model_train_begin (and before
 * model_train_end) waits at the worker barrier (its seconds added to *wait_s when not NULL, as
 * reducer_mean), then for the all-reduces (bounded by comm_timeout_s: a timeout stops every rank
 * as reducer_mean's) and orders the update after them. The same bits as reducer_mean(r,
 * MODEL_GRADS, ...) after model_train_end at one rank (per element the same ncclAvg).
 * *t_computed: the wall time at which the wait saw the backward pass done, -1 if not seen before
 * the all-reduces were. No allocation. */
void reducer_grads_begin(reducer *r);
void reducer_grads_end(reducer *r, double *wait_s, double *t_computed);

/* Release (every rank; NCCL: gpucomm_free's bounded finalize). */
void reducer_free(reducer *r);

#endif
