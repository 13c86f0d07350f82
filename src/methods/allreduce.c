/* allreduce.c — synchronous all-reduce SGD (Jin et al. 2016 §2.1).
 *
 * Every step each of the p nodes computes the gradient of its own b samples; the gradients are
 * averaged with an all-reduce (MPI_Allreduce in chunks, see comm.h, or NCCL; in place on the
 * flat gradient vector), and
 * every node applies the same Nesterov-SGD update, so all nodes hold identical parameters and
 * the step equals one step of minibatch SGD with the aggregate minibatch m = p·b.
 * BN running statistics are local to each node; they are averaged across nodes before each
 * evaluation.
 *
 * The model runs in device mode (model.h "devices"): parameters and momentum stay where the
 * network computes and the update is model_sgd_update. The all-reduce is the trainer's reducer
 * (src/comm/reduce.h), whose path was chosen once at set-up; on a GPU: NCCL on the device
 * (comm = "nccl"), MPI on device memory (CUDA-aware MPI), or through the host (Debian's MPICH);
 * this file never touches CUDA. With p = 1 nothing leaves the GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "methods/allreduce_overlap.h"
#include "methods/method.h"
#include "train/checkpoint.h"
#include "util/util.h"

static int allreduce_init(trainer *t, char *err, size_t errlen) {
    method_init_rank0(t, err, errlen);
    model_set_host_sync(t->net, 0);
    model_upload(t->net, MODEL_PARAMS);
    return 0;
}

static step_out allreduce_step(trainer *t, long step, double alpha) {
    const experiment *e = t->e;
    model *net = t->net;

    if (inject_failed(e, t->worker, step)) {
        /* This worker stops for good: it never enters the all-reduce, so the others report a
         * timeout after comm_timeout_s and stop every rank (MPI_Abort) — what a real failed
         * node does to synchronous SGD. Bounded, in case nothing stops it. */
        fprintf(stderr, "dsgd-run: rank %d: injected failure before step %ld (inject.fail_rank)\n", t->rank, step + 1);
        inject_sleep(e->comm_timeout_s + 60.0);
        exit(EXIT_RUNTIME);
    }
    double t0 = wall_time();
    const double real0 = t->times.data_s + t->times.compute_s; /* sim mode, device "measured" */
    /* The gradient, averaged over the workers (compute and all-reduce, overlapped on a GPU; the
     * next step's minibatch is staged meanwhile): adds data, compute, delay, comm and wait. */
    const long next = step + 1 < e->iterations ? step + 1 : -1;
    double loss = 0.0;
    const int failed = allreduce_grads(t, step, step, next, &t->times.wait_s, &loss) != 0;
    if (t->vc.on) /* sim mode: the step's compute and the modelled all-reduce on the virtual clock (vclock.h) */
        vclock_compute(&t->vc, step, t->times.data_s + t->times.compute_s - real0, inject_draw_s(&t->inj, step)), vclock_allreduce(&t->vc);
    double t2 = wall_time();
    /* The loss sum carries the signal requests (checkpoint.h) and a failed load at no extra cost:
     * every rank learns at the same step that some rank asked for a checkpoint (and a stop), or
     * could not load its minibatch — then every rank discards the step and stops together. */
    const int sig = ckpt_signal_pending();
    double red[4] = {failed ? 0.0 : loss, sig == CKPT_SIG_SAVE, sig == CKPT_SIG_STOP, failed};
    comm_workers_sum_f64(red, 4);
    if (red[3] > 0) return (step_out){.status = EXIT_RUNTIME, .why = STOPPED_DATA};
    loss = red[0];
    t->sig = red[2] > 0 ? CKPT_SIG_STOP : red[1] > 0 ? CKPT_SIG_SAVE : CKPT_SIG_NONE;
    double t3 = wall_time();
    int finite = model_sgd_update(net, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov);
    double t4 = wall_time();

    t->times.comm_s += t3 - t2;
    t->times.update_s += t4 - t3;
    t->times.step_s += t4 - t0;
    if (t->vc.on) vclock_step_end(&t->vc, t4 - t3);
    /* The averaged gradient is identical on every rank, so every rank sees the same verdict. */
    return (step_out){.took = METHOD_STEP_TOOK, .loss = finite ? loss / (double)t->p : NAN};
}

/* Before each evaluation the nodes' BN running statistics are averaged, so that every rank
 * evaluates the one model of synchronous SGD. */
static int allreduce_evaluate(trainer *t, long done, double train_s, int status, int *why) {
    reducer_mean(&t->red, MODEL_BN, NULL);
    return train_evaluate_and_log(t, done, train_s, status, why);
}

/* Checkpoint (save and load, ckpt_writing): θ and v are identical on every rank (rank 0 writes
 * them); BN running statistics are each rank's own. */
static int allreduce_state(trainer *t, ckpt_file *f) {
    model *net = t->net;
    const size_t n = model_n_params(net);
    const int save = ckpt_writing(f);
    if (save) model_download(net, MODEL_BN | (t->rank == 0 ? MODEL_PARAMS | MODEL_VELOCITY : 0));
    int rc = ckpt_io_f32(f, "bn", model_bn(net), model_n_bn(net));
    if (t->rank == 0) rc |= ckpt_io_f32(f, "params", model_params(net), n) | ckpt_io_f32(f, "velocity", model_velocity(net), n);
    if (save) return rc;
    /* Collective, whatever rank 0 read: the result is checked by train_resume's agreement. */
    comm_bcast(model_params(net), n * sizeof(float), 0);
    comm_bcast(model_velocity(net), n * sizeof(float), 0);
    model_upload(net, MODEL_PARAMS | MODEL_VELOCITY | MODEL_BN);
    return rc;
}

const method_ops method_allreduce = {
    .name = "allreduce",
    .init = allreduce_init,
    .step = allreduce_step,
    .evaluate = allreduce_evaluate,
    .save = allreduce_state,
    .load = allreduce_state,
    .reduces = 1, .ranks_end_together = 1,
};
