/* allreduce.c — synchronous all-reduce SGD (Jin et al. 2016 §2.1).
 *
 * Every step each of the p nodes computes the gradient of its own b samples; the gradients are
 * averaged with MPI_Allreduce (in place on the flat gradient vector, in chunks, see comm.h), and
 * every node applies the same Nesterov-SGD update, so all nodes hold identical parameters and
 * the step equals one step of minibatch SGD with the aggregate minibatch m = p·b.
 * BN running statistics are local to each node; they are averaged across nodes before each
 * evaluation.
 *
 * The model runs in device mode (model.h "devices"): parameters and momentum stay where the
 * network computes and the update is model_sgd_update. On a GPU only the gradient travels: to
 * the host for MPI_Allreduce (Debian's MPICH is not CUDA-aware) and back; with p = 1 nothing
 * leaves the GPU. On the CPU the transfers are no-ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "methods/method.h"
#include "util/util.h"

static int allreduce_init(trainer *t, char *err, size_t errlen) {
    (void)err, (void)errlen;
    /* Identical starting point on every rank whatever the node's libm: rank 0's parameters. */
    comm_bcast(model_params(t->net), model_n_params(t->net) * sizeof(float), 0);
    model_set_host_sync(t->net, 0);
    model_upload(t->net, MODEL_PARAMS);
    return 0;
}

static double allreduce_step(trainer *t, long step, double alpha) {
    const experiment *e = t->e;
    model *net = t->net;
    const size_t n = model_n_params(net);

    if (inject_failed(&t->inj, step)) {
        /* This worker stops for good: it never enters the all-reduce, so the others report a
         * timeout after comm_timeout_s and stop every rank (MPI_Abort) — what a real failed
         * node does to synchronous SGD. Bounded, in case nothing stops it. */
        fprintf(stderr, "dsgd-run: rank %d: injected failure before step %ld (inject.fail_rank)\n", t->rank, step + 1);
        inject_sleep(e->comm_timeout_s + 60.0);
        exit(EXIT_RUNTIME);
    }
    double t0 = wall_time();
    double loss = train_compute(t, step, step);
    double t2 = wall_time();
    if (t->p > 1) {
        model_download(net, MODEL_GRADS);
        comm_allreduce_mean_f32(model_grads(net), n, &t->times.wait_s);
        model_upload(net, MODEL_GRADS);
    }
    comm_workers_sum_f64(&loss, 1);
    double t3 = wall_time();
    int finite = model_sgd_update(net, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov);
    double t4 = wall_time();

    t->times.comm_s += t3 - t2;
    t->times.update_s += t4 - t3;
    t->times.step_s += t4 - t0;
    loss /= (double)t->p;
    /* The averaged gradient is identical on every rank, so every rank sees the same verdict. */
    return finite ? loss : NAN;
}

static void allreduce_eval_prepare(trainer *t) {
    model_download(t->net, MODEL_BN);
    comm_allreduce_mean_f32(model_bn(t->net), model_n_bn(t->net), NULL);
    model_upload(t->net, MODEL_BN);
}

static void allreduce_finalize(trainer *t) { (void)t; }

const method_ops method_allreduce = {
    .name = "allreduce",
    .init = allreduce_init,
    .step = allreduce_step,
    .eval_prepare = allreduce_eval_prepare,
    .finalize = allreduce_finalize,
};
