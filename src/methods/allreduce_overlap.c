/* allreduce_overlap.c — the all-reduce step overlapped on a GPU (docs/gpu.md, "Overlap"):
 * allreduce's only, kept out of the step that every reader walks. While the GPU computes, the host
 * assembles the next minibatch into page-locked memory and a copy stream puts it on the device;
 * on REDUCE_STAGED the gradient reaches the host group by group during the backward pass and is
 * reduced chunk by chunk meanwhile; on REDUCE_NCCL each gradient group's ncclAllReduce starts on
 * the GPU as soon as the backward pass has produced it (reducer_grads_begin). The same bits as
 * train_compute + reducer_mean. */
#include "methods/allreduce_overlap.h"

#include "comm/comm.h"
#include "util/util.h"

/* The gradient's mean while a step started with MODEL_STAGE_GRADS runs (model_train_begin): each
 * 4 MB chunk of comm_allreduce_mean_f32 started as soon as its floats are on the host (the chunks
 * from the end of the vector down) and uploaded to the device once reduced; the worker barrier is
 * taken when the first group arrives (its seconds added to *waited; NULL: no barrier). Returns when
 * every chunk is back on the device; *t_computed: the wall time at which the whole gradient was on
 * the host. The same bits as reducer_mean(r, MODEL_GRADS, ...). */
static void grads_overlapped(model *net, double *waited, double *t_computed) {
    const size_t n = model_n_params(net);
    const int nc = comm_mean_chunks(n);
    float *host = model_grads(net);
    int done[COMM_MAX_CHUNKS];
    int next = nc - 1;          /* the next chunk to start: they start from the end down */
    int n_done = 0, barrier = waited == NULL;
    double idle0 = wall_time();
    *t_computed = -1.0;
    while (n_done < nc) {
        int progress = 0;
        const size_t ready = model_grads_host_ready(net); /* host [ready, n) is this step's gradient */
        if (ready < n && !barrier) {
            /* The agreement point of every path of reducer_mean, at the first group. */
            comm_workers_wait(waited);
            barrier = 1;
        }
        if (ready == 0 && *t_computed < 0) *t_computed = wall_time();
        for (; next >= 0; next--) {
            size_t lo, hi;
            comm_mean_chunk_range(n, next, &lo, &hi);
            if (lo < ready) break;
            comm_mean_chunk_start(host, n, next);
            progress = 1;
        }
        const int k = comm_mean_chunks_test(done);
        for (int i = 0; i < k; i++) {
            size_t lo, hi;
            comm_mean_chunk_range(n, done[i], &lo, &hi);
            model_grads_upload_range(net, lo, hi);
        }
        n_done += k;
        if (progress || k > 0) idle0 = wall_time();
        else comm_pause(wall_time() - idle0);
    }
}


/* The minibatch of data step ds into t->x, t->y, or nothing if it is staged on the device; then
 * the step begins on it. Returns the seconds spent assembling it. */
static double begin_step(trainer *t, long ds, int flags, int *failed) {
    const int staged = model_staged_tag(t->net) == ds;
    const double t0 = wall_time();
    /* a failed load goes on with what t->x, t->y hold: the peers' all-reduce is matched, and the
     * step is discarded by every rank (allreduce_step) */
    if (!staged && loader_batch(&t->train_loader, ds, t->x, t->y)) *failed = 1;
    const double d = staged ? 0.0 : wall_time() - t0;
    model_train_begin(t->net, staged ? NULL : t->x, staged ? NULL : t->y, flags);
    return d;
}

/* While the step runs: the minibatch of data step ds (>= 0) into the staging buffers and on its
 * way to the device. Returns the seconds spent assembling it. */
static double stage_next(trainer *t, long ds, int *failed) {
    float *x;
    int *y;
    if (ds < 0 || !model_stage_buffers(t->net, &x, &y)) return 0.0;
    const double t0 = wall_time();
    if (loader_batch(&t->train_loader, ds, x, y)) *failed = 1; /* the run stops after this step */
    const double d = wall_time() - t0;
    model_stage_batch(t->net, ds);
    return d;
}

int allreduce_grads(trainer *t, long data_step, long step, long next_data_step, double *wait_s, double *loss) {
    model *net = t->net;
    reducer *red = &t->red;
    if (!red->stage) {
        /* a failed load still takes part in the all-reduce (on the last gradient): the peers wait
         * there, and every rank learns of the failure from the step's sum (allreduce_step) */
        const int failed = train_compute(t, data_step, step, loss) != 0;
        const double t0 = wall_time();
        reducer_mean(red, MODEL_GRADS, wait_s);
        t->times.comm_s += wall_time() - t0;
        return failed ? -1 : 0;
    }
    const double delay = inject_delay_s(&t->inj, step);
    inject_sleep(delay);
    t->times.delay_s += delay;
    const double t0 = wall_time();
    int failed = 0;
    if (red->nccl_overlap) reducer_grads_begin(red); /* each group's all-reduce as soon as it is final */
    double data = begin_step(t, data_step, red->overlap ? MODEL_STAGE_GRADS : 0, &failed);
    data += stage_next(t, next_data_step, &failed);
    t->times.data_s += data;
    double waited = 0.0, t_computed; /* waited: the barrier's seconds on the overlapped path */
    if (red->nccl_overlap) {
        /* the GPU computes and all-reduces meanwhile: the barrier, then the wait until the last
         * group's all-reduce is done (t_computed: when the backward pass was seen done) */
        reducer_grads_end(red, wait_s ? &waited : NULL, &t_computed);
        *loss = model_train_end(net);
    } else if (red->overlap) {
        grads_overlapped(net, wait_s ? &waited : NULL, &t_computed);
        *loss = model_train_end(net);
    } else {
        *loss = model_train_end(net);
        t_computed = wall_time();
        reducer_mean(red, MODEL_GRADS, wait_s);
    }
    const double t_end = wall_time();
    if (t_computed < 0) t_computed = t_end;
    if (wait_s) *wait_s += waited;
    t->times.compute_s += t_computed - t0 - data - waited;
    t->times.comm_s += t_end - t_computed + waited;
    return failed ? -1 : 0;
}

