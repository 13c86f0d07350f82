/* allreduce_overlap.h — allreduce_overlap.c's export, besides allreduce's method_ops:
 * its step's computation, overlapped on a GPU (allreduce_overlap.c), for the GPU tests. */
#ifndef DSGD_ALLREDUCE_OVERLAP_H
#define DSGD_ALLREDUCE_OVERLAP_H

#include "train/train.h"

/* One worker's step of synchronous all-reduce SGD up to the update: train_compute(t, data_step,
 * step) then reducer_mean(&t->red, MODEL_GRADS, wait_s), with the same result bit for bit, but on
 * a GPU overlapped where it can be (docs/gpu.md, "Overlap"; t->red.stage, t->red.overlap):
 *   - next_data_step >= 0 (the data step of this worker's next call; -1: unknown, or none): while
 *     the GPU computes, the host assembles that minibatch (loader_batch) in page-locked memory and
 *     a copy stream puts it on the device (model_stage_batch), so the next call, if its data_step
 *     is that one, starts on data already there; any other data_step is loaded as train_compute
 *     does and the staged one is dropped;
 *   - REDUCE_STAGED (GPU model, p > 1, MPI without CUDA support): the gradient reaches the host
 *     group by group while the backward pass runs (MODEL_STAGE_GRADS) and is reduced chunk by
 *     chunk meanwhile;
 *   - REDUCE_NCCL with t->red.nccl_overlap (DSGD_NCCL_OVERLAP not 0): each gradient group's
 *     ncclAllReduce is enqueued on the NCCL stream as soon as the backward pass has produced it
 *     (reducer_grads_begin / reducer_grads_end), the update waiting for all of them.
 * A CPU model, or DSGD_OVERLAP=0 in the environment, takes train_compute and reducer_mean as they
 * are. The injected straggler delay is slept before the step's computation starts on a GPU (after
 * it on the CPU), so that it is never hidden behind the GPU's work. Adds to t->times data_s,
 * compute_s (until the whole gradient is computed: on the overlapped path until its last group is
 * on the host), delay_s, comm_s (the all-reduce: on the overlapped path what is left of it once the
 * gradient is computed, plus the barrier; on the NCCL overlap compute_s runs until the backward
 * pass is seen done on the GPU) and, through wait_s, the barrier. *loss: this worker's
 * mean loss. Returns 0, or -1 when the loader could not deliver (loader_error says why; the
 * all-reduce was not entered: the caller stops every rank). No allocation. Collective over the
 * workers, as reducer_mean. */
int allreduce_grads(trainer *t, long data_step, long step, long next_data_step, double *wait_s, double *loss);

#endif
