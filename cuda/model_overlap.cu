/* model_overlap.cu — the overlap of copies with computation (docs/gpu.md, "Overlap"): the
 * gradient groups, their events and copies to the host during the backward pass
 * (gpu_model_grads_ready, gpu_model_grads_upload), the hook that starts each group's NCCL
 * all-reduce as soon as the group is final (gpu_model_set_group_hook), and the staging of the next
 * minibatch (gpu_model_stage). */
#include "model_internal.h"

#include <string.h>

/* n of the trainable tensor at flat offset off, 0 if none starts there. */
static size_t tensor_n(const nn_layout *L, size_t off) {
    for (int i = 0; i < L->n_tensors; i++)
        if (L->tensors[i].offset == off) return L->tensors[i].n;
    return 0;
}

/* 1 if the k tensors starting at offs[] fill [lo, hi) exactly. */
static int group_exact(const nn_layout *L, const size_t *offs, int k, size_t lo, size_t hi) {
    size_t sum = 0;
    for (int i = 0; i < k; i++) {
        const size_t n = tensor_n(L, offs[i]);
        if (n == 0 || offs[i] < lo || offs[i] + n > hi) return 0;
        sum += n;
    }
    return lo < hi && sum == hi - lo;
}

/* The gradient groups (gpu_overlap): for ResNet-18 the fc layer, the 8 blocks from the last, the
 * stem, each checked to fill its flat range exactly; the linear model, or a layout that breaks
 * that (never, with layout.c's order), has one group, final when the backward pass ends. */
static void plan_groups(gpu_model *g) {
    const nn_layout *L = &g->L;
    gpu_overlap *o = &g->ov;
    o->n_groups = 1;
    o->glo[0] = 0;
    if (L->s.arch == MODEL_LINEAR) return;
    size_t glo[GPU_MAX_GROUPS], hi = L->n_params;
    int ng = 0;
    const size_t fc[2] = {L->fc_w, L->fc_b};
    if (!group_exact(L, fc, 2, L->fc_w, hi)) return;
    glo[ng++] = hi = L->fc_w;
    for (int i = N_BLOCKS - 1; i >= 0; i--) {
        const block_def *d = &L->blk[i];
        const size_t offs[9] = {d->w1, d->g1, d->b1, d->w2, d->g2, d->b2, d->wd, d->gd, d->bd};
        if (d->w1 >= hi || !group_exact(L, offs, d->down ? 9 : 6, d->w1, hi)) return;
        glo[ng++] = hi = d->w1;
    }
    const size_t stem[3] = {L->conv1, L->bn1_g, L->bn1_b};
    if (!group_exact(L, stem, 3, 0, hi)) return;
    glo[ng++] = 0;
    memcpy(o->glo, glo, (size_t)ng * sizeof glo[0]);
    o->n_groups = ng;
}

/* Streams, events and the pinned staging minibatch of the overlap (gpu_overlap). */
int gpu_overlap_init(gpu_model *g, char *err, size_t errlen) {
    gpu_overlap *o = &g->ov;
    const model_spec *s = &g->L.s;
    o->staged_tag = -1;
    plan_groups(g);
    const char *where = "gpu_model_create (copy streams and events)";
    CUDA_TRY(cudaStreamCreateWithFlags(&o->d2h, cudaStreamNonBlocking), where);
    CUDA_TRY(cudaStreamCreateWithFlags(&o->h2d, cudaStreamNonBlocking), where);
    /* The next minibatch's copy on a stream of its own (N17): not queued behind the gradient
     * uploads of the step in flight, nor they behind it (DSGD_GPU_STAGE=h2d: on h2d, as before). */
    if (g->sw.stage_own) CUDA_TRY(cudaStreamCreateWithFlags(&o->stg, cudaStreamNonBlocking), where);
    cudaEvent_t *evs[] = {&o->uploaded, &o->staged, &o->slot_free[0], &o->slot_free[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        CUDA_TRY(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming), where);
    for (int j = 0; j < o->n_groups; j++) {
        CUDA_TRY(cudaEventCreateWithFlags(&o->computed[j], cudaEventDisableTiming), where);
        CUDA_TRY(cudaEventCreateWithFlags(&o->on_host[j], cudaEventDisableTiming), where);
    }
    const size_t nx = (size_t)s->batch * s->in_c * s->in_h * s->in_w;
    CUDA_TRY(cudaHostAlloc((void **)&o->stage_x, nx * sizeof(float), cudaHostAllocPortable), "gpu_model_create (pinned minibatch)");
    CUDA_TRY(cudaHostAlloc((void **)&o->stage_y, (size_t)s->batch * sizeof(int), cudaHostAllocPortable),
             "gpu_model_create (pinned labels)");
    memset(o->stage_x, 0, nx * sizeof(float));
    memset(o->stage_y, 0, (size_t)s->batch * sizeof(int));
    return 0;
}

void gpu_overlap_free(gpu_overlap *o) {
    if (o->d2h) cudaStreamSynchronize(o->d2h);
    if (o->h2d) cudaStreamSynchronize(o->h2d);
    if (o->stg) cudaStreamSynchronize(o->stg);
    cudaEvent_t evs[] = {o->uploaded, o->staged, o->slot_free[0], o->slot_free[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i]) cudaEventDestroy(evs[i]);
    for (int j = 0; j < GPU_MAX_GROUPS; j++) {
        if (o->computed[j]) cudaEventDestroy(o->computed[j]);
        if (o->on_host[j]) cudaEventDestroy(o->on_host[j]);
    }
    if (o->d2h) cudaStreamDestroy(o->d2h);
    if (o->h2d) cudaStreamDestroy(o->h2d);
    if (o->stg) cudaStreamDestroy(o->stg);
    if (o->stage_x) cudaFreeHost(o->stage_x);
    if (o->stage_y) cudaFreeHost(o->stage_y);
    memset(o, 0, sizeof *o);
}

/* The backward pass has made grads [lo, n_params) final. If a group ends there and this step
 * stages its gradient or has a group hook: record that group's event on the compute stream; then
 * enqueue its copy to the host on the d2h stream behind it, and call the hook (which enqueues its
 * own work behind the event: the NCCL all-reduce of the group), in the order the groups become
 * final. */
void gpu_overlap_mark_final(gpu_model *g, size_t lo) {
    gpu_overlap *o = &g->ov;
    const int j = o->n_marked;
    if (!(o->grads_host || o->hook) || j >= o->n_groups || o->glo[j] != lo) return;
    const size_t hi = j ? o->glo[j - 1] : g->L.n_params;
    CUDA_CHECK(cudaEventRecord(o->computed[j], g->ctx.stream), "train step: gradient group final");
    if (o->grads_host) {
        CUDA_CHECK(cudaStreamWaitEvent(o->d2h, o->computed[j], 0), "train step: d2h waits for a gradient group");
        CUDA_CHECK(cudaMemcpyAsync(o->grads_host + lo, g->grads + lo, (hi - lo) * sizeof(float), cudaMemcpyDeviceToHost, o->d2h),
                   "train step: gradient group to the host");
        CUDA_CHECK(cudaEventRecord(o->on_host[j], o->d2h), "train step: gradient group on the host");
    }
    if (o->hook) o->hook(o->hook_ctx, j, o->n_groups, lo, hi, (void *)o->computed[j]);
    o->n_marked++;
}

void gpu_model_set_group_hook(gpu_model *g, gpu_group_hook hook, void *ctx) {
    if (g->ov.in_step) DIE("gpu_model_set_group_hook between gpu_model_train_begin and gpu_model_train_end");
    g->ov.hook = hook;
    g->ov.hook_ctx = ctx;
}

size_t gpu_model_grads_ready(gpu_model *g) {
    gpu_overlap *o = &g->ov;
    if (!o->in_step || !o->grads_host) DIE("gpu_model_grads_ready outside a step begun with a host gradient buffer");
    set_dev(g);
    while (o->n_ready < o->n_groups) {
        const cudaError_t e = cudaEventQuery(o->on_host[o->n_ready]);
        if (e == cudaErrorNotReady) {
            cudaGetLastError(); /* not an error: leave nothing for the next launch check to see */
            break;
        }
        CUDA_CHECK(e, "gpu_model_grads_ready (a gradient copy to the host)");
        o->n_ready++;
    }
    return o->n_ready ? o->glo[o->n_ready - 1] : g->L.n_params;
}

void gpu_model_grads_upload(gpu_model *g, const float *grads_host, size_t lo, size_t hi) {
    gpu_overlap *o = &g->ov;
    if (!o->in_step || !o->grads_host || grads_host != o->grads_host)
        DIE("gpu_model_grads_upload outside a step begun with this host gradient buffer");
    const size_t ready = o->n_ready ? o->glo[o->n_ready - 1] : g->L.n_params;
    if (lo > hi || hi > g->L.n_params || (lo < hi && lo < ready))
        DIE("gpu_model_grads_upload: [%zu, %zu) of %zu gradients, host copy complete from %zu only", lo, hi, g->L.n_params, ready);
    if (lo == hi) return;
    set_dev(g);
    CUDA_CHECK(cudaMemcpyAsync(g->grads + lo, grads_host + lo, (hi - lo) * sizeof(float), cudaMemcpyHostToDevice, o->h2d),
               "gpu_model_grads_upload");
    o->n_uploads++;
}

void gpu_model_stage_buffers(gpu_model *g, float **x, int **y) {
    set_dev(g);
    /* The last staging copy out of these buffers is done before the caller overwrites them. */
    CUDA_CHECK(cudaEventSynchronize(g->ov.staged), "gpu_model_stage_buffers");
    *x = g->ov.stage_x;
    *y = g->ov.stage_y;
}

void gpu_model_stage(gpu_model *g, long tag) {
    gpu_overlap *o = &g->ov;
    const nn_layout *L = &g->L;
    gpu_net *t = &g->train;
    if (tag < 0) DIE("gpu_model_stage: tag %ld < 0", tag);
    nn_check_labels(L, o->stage_y, t->n);
    set_dev(g);
    const int s = 1 - t->slot; /* the slot the next gpu_model_train_begin(NULL) reads */
    cudaStream_t st = o->stg ? o->stg : o->h2d;
    CUDA_CHECK(cudaStreamWaitEvent(st, o->slot_free[s], 0), "gpu_model_stage (slot free)");
    CUDA_CHECK(cudaMemcpyAsync(t->xs[s], o->stage_x, input_count(L, t->n) * sizeof(float), cudaMemcpyHostToDevice, st),
               "gpu_model_stage: input");
    CUDA_CHECK(cudaMemcpyAsync(t->ys[s], o->stage_y, (size_t)t->n * sizeof(int), cudaMemcpyHostToDevice, st),
               "gpu_model_stage: labels");
    CUDA_CHECK(cudaEventRecord(o->staged, st), "gpu_model_stage");
    o->staged_tag = tag;
}

long gpu_model_staged(const gpu_model *g) { return g->ov.staged_tag; }
