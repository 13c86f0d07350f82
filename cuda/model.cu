/* model.cu — cuda/gpu.h's model: ResNet-18 (or the linear model) on one GPU, built from the
 * parameter layout of src/nn/layout.h on the layers of layers.h: its copies, the training step,
 * evaluation and the SGD update. The
 * network is src/nn/model.c's, layer for layer and in the same order (torchvision's resnet18:
 * stem conv → bn1+ReLU → [3x3/2 max pool] → 8 BasicBlocks, projection shortcut (1x1 conv + BN)
 * where block_def.down → global average pool → fc → softmax cross-entropy), so the flat params,
 * grads and bn vectors mean the same on both backends.
 *
 * Memory. params, grads, velocity and bn are one cudaMalloc each; every layer reads its tensors
 * as views at the layout's offsets (a conv weight (O, I, k, k) is cuDNN's NCHW filter as it is).
 * Each network (training: L->s.batch rows; evaluation: L->s.eval_batch rows) keeps all its
 * activations in one cudaMalloc (an arena carved at 256-byte boundaries). Nothing is allocated
 * after gpu_model_create.
 *
 * Precision bf16 (mixed precision, as PyTorch's autocast): params, grads, velocity and bn stay
 * fp32 — the master weights the methods and the SGD update see — and one more cudaMalloc, wcopy,
 * holds a bf16 copy of every convolution and fc weight, each at a 16-byte-aligned offset (tensor
 * cores), made by gpu_f32_to_bf16 at the start of every training step and evaluation (so it
 * always follows uploads and updates; the cost is a read of the weights). Activations and their
 * gradients are bf16 (the arenas, and the minibatch after its own cast from the fp32 copy of the
 * host's input); BN's γ, β, statistics and their gradients, the logits, the loss and every
 * parameter gradient are fp32 (layers.h, "Element types"). No loss scaling: bf16 has fp32's
 * exponent range.
 *
 * Layout NHWC (DSGD_GPU_LAYOUT=nhwc, docs/gpu.md "Switches"; layers.h "Layout NHWC"): every
 * activation of the ResNet (the arenas) is (n, h, w, c); the host's minibatch stays NCHW and is
 * transposed on the device into xa (with the bf16 cast, one kernel); wcopy holds each conv
 * weight transposed to (O, k, k, I) (bf16 or fp32, made with the casts, one kernel per weight;
 * the flat params stay (O, I, k, k)), and each convolution transposes its weight gradient back
 * into the flat (O, I, k, k) gradient. The global average pool gives (n, c) in either layout, so
 * the fc layer, the loss and every flat vector are the same.
 *
 * Buffers of the training network, as on the CPU: every forward activation a backward pass
 * reads has its own buffer (b2 == y: the residual add runs in place); gradients flow through two
 * block-boundary buffers g[0], g[1] and three temporaries t[0..2] of the largest activation
 * size. Unlike the CPU, no BN backward runs in place (cuDNN does not document it), so the
 * temporaries rotate differently (net_backward). The evaluation network needs no saved
 * activations: four rotating buffers, with the block input kept until the residual add.
 *
 * Threads and streams: every entry point makes the model's device current and enqueues on the
 * model's one stream; the calls that return data (or a loss, or a flag) synchronise it.
 *
 * Files: model.cu (this), model_build.cu (gpu_model_create, gpu_model_free: the networks and
 * their arenas), model_overlap.cu (the overlap of gradient copies and staging with the step),
 * device.cu (the device choice, versions, pinned host memory); model_internal.h has the
 * structures they share. */
#include "model_internal.h"

#include <math.h>

/* The compute stream synchronised (what: for the error): with DSGD_GPU_SYNC=step, the flag of an
 * update enqueued since the last synchronisation is on the host now (its copy was behind the
 * update on this stream); the first non-finite one is remembered and said on stderr, once. */
static void sync_compute(gpu_model *g, const char *what) {
    CUDA_CHECK(cudaStreamSynchronize(g->ctx.stream), what);
    if (!g->upd_pending) return;
    g->upd_pending = 0;
    if (g->host->bad && !g->bad_update) {
        g->bad_update = g->n_updates;
        fprintf(stderr, "dsgd-run: GPU: SGD update %ld of this process made a parameter non-finite (found at the next "
                "synchronisation, DSGD_GPU_SYNC=step: the step after it reports a NaN loss and takes no update)\n",
                g->bad_update);
    }
}

/* Entry points that use the compute stream on their own: not between begin and end. */
static void not_in_step(const gpu_model *g, const char *what) {
    if (g->ov.in_step) DIE("%s between gpu_model_train_begin and gpu_model_train_end", what);
}

void gpu_model_upload(gpu_model *g, int which, const float *params, const float *grads, const float *bn) {
    not_in_step(g, "gpu_model_upload");
    set_dev(g);
    cudaStream_t st = g->ctx.stream;
    const size_t np = g->L.n_params * sizeof(float), nb = g->L.n_bn * sizeof(float);
    if (which & GPU_PARAMS) CUDA_CHECK(cudaMemcpyAsync(g->params, params, np, cudaMemcpyHostToDevice, st), "upload of params");
    if (which & GPU_GRADS) CUDA_CHECK(cudaMemcpyAsync(g->grads, grads, np, cudaMemcpyHostToDevice, st), "upload of grads");
    if ((which & GPU_BN) && nb) CUDA_CHECK(cudaMemcpyAsync(g->bn, bn, nb, cudaMemcpyHostToDevice, st), "upload of bn");
    sync_compute(g, "gpu_model_upload");
    if (which & GPU_PARAMS) g->bad_update = 0; /* new parameters: the flag was about the old ones */
}

void gpu_model_download(gpu_model *g, int which, float *params, float *grads, float *bn) {
    not_in_step(g, "gpu_model_download");
    set_dev(g);
    cudaStream_t st = g->ctx.stream;
    const size_t np = g->L.n_params * sizeof(float), nb = g->L.n_bn * sizeof(float);
    if (which & GPU_PARAMS) CUDA_CHECK(cudaMemcpyAsync(params, g->params, np, cudaMemcpyDeviceToHost, st), "download of params");
    if (which & GPU_GRADS) CUDA_CHECK(cudaMemcpyAsync(grads, g->grads, np, cudaMemcpyDeviceToHost, st), "download of grads");
    if ((which & GPU_BN) && nb) CUDA_CHECK(cudaMemcpyAsync(bn, g->bn, nb, cudaMemcpyDeviceToHost, st), "download of bn");
    sync_compute(g, "gpu_model_download");
}

void gpu_model_velocity_upload(gpu_model *g, const float *v) {
    not_in_step(g, "gpu_model_velocity_upload");
    set_dev(g);
    CUDA_CHECK(cudaMemcpyAsync(g->vel, v, g->L.n_params * sizeof(float), cudaMemcpyHostToDevice, g->ctx.stream), "upload of velocity");
    sync_compute(g, "gpu_model_velocity_upload");
}

void gpu_model_velocity_download(gpu_model *g, float *v) {
    not_in_step(g, "gpu_model_velocity_download");
    set_dev(g);
    CUDA_CHECK(cudaMemcpyAsync(v, g->vel, g->L.n_params * sizeof(float), cudaMemcpyDeviceToHost, g->ctx.stream), "download of velocity");
    sync_compute(g, "gpu_model_velocity_download");
}

void gpu_model_zero_velocity(gpu_model *g) {
    not_in_step(g, "gpu_model_zero_velocity");
    set_dev(g);
    CUDA_CHECK(cudaMemsetAsync(g->vel, 0, g->L.n_params * sizeof(float), g->ctx.stream), "gpu_model_zero_velocity");
    sync_compute(g, "gpu_model_zero_velocity");
}

/* ---- forward / backward ------------------------------------------------------------------- */

/* BN and max pooling through the bf16 fallback (layers.h, gpu_bf16_fallback): a layer with io32
 * takes fp32 tensors, so its bf16 inputs are widened into t->s32 and its result rounded back —
 * once, as cuDNN rounds its own bf16 output — giving the same values as the bf16 layer. */
static void bn_forward(gpu_ctx *c, gpu_net *t, gpu_bn_layer *l, void *out, const void *inp, const float *gamma,
                       const float *beta, float *rm, float *rv) {
    if (!l->io32) return gpu_bn_forward(l, c, out, inp, gamma, beta, rm, rv);
    gpu_bf16_to_f32(c, t->s32[0], inp, l->count);
    gpu_bn_forward(l, c, t->s32[1], t->s32[0], gamma, beta, rm, rv); /* with its ReLU, in fp32: the same signs */
    gpu_f32_to_bf16(c, out, t->s32[1], l->count);
}

static void bn_backward(gpu_ctx *c, gpu_net *t, gpu_bn_layer *l, void *dinp, float *dgamma, float *dbeta, void *dout,
                        const void *inp, const void *out, const float *gamma) {
    if (!l->io32) return gpu_bn_backward(l, c, dinp, dgamma, dbeta, dout, inp, out, gamma);
    float *x = t->s32[0], *dy = t->s32[1], *y = t->s32[2], *dx = t->s32[3];
    gpu_bf16_to_f32(c, x, inp, l->count);
    gpu_bf16_to_f32(c, dy, dout, l->count);
    if (l->relu) gpu_bf16_to_f32(c, y, out, l->count);
    gpu_bn_backward(l, c, dx, dgamma, dbeta, dy, x, l->relu ? y : NULL, gamma);
    if (l->relu) gpu_f32_to_bf16(c, dout, dy, l->count); /* dout masked in place, as the bf16 layer does (exact) */
    gpu_f32_to_bf16(c, dinp, dx, l->count);
}

static void pool_forward(gpu_ctx *c, gpu_net *t, gpu_pool_layer *l, void *out, const void *inp) {
    if (!l->io32) return gpu_pool_forward(l, c, out, inp);
    const size_t nx = (size_t)l->n * l->c * l->ih * l->iw, ny = (size_t)l->n * l->c * l->oh * l->ow;
    gpu_bf16_to_f32(c, t->s32[0], inp, nx);
    gpu_pool_forward(l, c, t->s32[1], t->s32[0]);
    gpu_f32_to_bf16(c, out, t->s32[1], ny); /* a selection of bf16 values: exact */
}

static void pool_backward(gpu_ctx *c, gpu_net *t, gpu_pool_layer *l, void *dinp, const void *dout, const void *inp,
                          const void *out) {
    if (!l->io32) return gpu_pool_backward(l, c, dinp, dout, inp, out);
    const size_t nx = (size_t)l->n * l->c * l->ih * l->iw, ny = (size_t)l->n * l->c * l->oh * l->ow;
    float *x = t->s32[0], *y = t->s32[1], *dy = t->s32[2], *dx = t->s32[3];
    gpu_bf16_to_f32(c, x, inp, nx);
    gpu_bf16_to_f32(c, y, out, ny);
    gpu_bf16_to_f32(c, dy, dout, ny);
    gpu_pool_backward(l, c, dx, dy, x, y);
    gpu_f32_to_bf16(c, dinp, dx, nx);
}

/* Stem, blocks, global pool, fc: logits (n, classes) in t->logits from the input in t->x. */
static void net_forward(gpu_model *g, gpu_net *t) {
    const nn_layout *L = &g->L;
    gpu_ctx *c = &g->ctx;
    const float *P = g->params;
    float *B = g->bn;
    gpu_conv_forward(&t->conv1, c, t->c0, t->xa, wview(g, L->conv1));
    bn_forward(c, t, &t->bn1, t->a0, t->c0, P + L->bn1_g, P + L->bn1_b, B + L->bn1_rm, B + L->bn1_rv);
    const void *h = t->a0;
    if (L->s.stem == MODEL_STEM_IMAGENET) {
        pool_forward(c, t, &t->maxpool, t->p0, t->a0);
        h = t->p0;
    }
    for (int i = 0; i < N_BLOCKS; i++) {
        const block_def *d = &L->blk[i];
        gpu_block *r = &t->b[i];
        gpu_conv_forward(&r->conv1, c, r->c1, h, wview(g, d->w1));
        bn_forward(c, t, &r->bn1, r->a1, r->c1, P + d->g1, P + d->b1, B + d->rm1, B + d->rv1);
        gpu_conv_forward(&r->conv2, c, r->c2, r->a1, wview(g, d->w2));
        if (r->bn2.add) { /* DSGD_GPU_BNRELU=fused_add: y = relu(bn2(c2) + shortcut) in one call, the shortcut first */
            const void *sc = h;
            if (d->down) {
                gpu_conv_forward(&r->convd, c, r->cd, h, wview(g, d->wd));
                bn_forward(c, t, &r->bnd, r->sd, r->cd, P + d->gd, P + d->bd, B + d->rmd, B + d->rvd);
                sc = r->sd;
            }
            gpu_bn_add_forward(&r->bn2, c, r->y, r->c2, sc, P + d->g2, P + d->b2, B + d->rm2, B + d->rv2);
            h = r->y;
            continue;
        }
        bn_forward(c, t, &r->bn2, r->y, r->c2, P + d->g2, P + d->b2, B + d->rm2, B + d->rv2);
        const void *sc = h;
        if (d->down) {
            gpu_conv_forward(&r->convd, c, r->cd, h, wview(g, d->wd));
            bn_forward(c, t, &r->bnd, r->sd, r->cd, P + d->gd, P + d->bd, B + d->rmd, B + d->rvd);
            sc = r->sd;
        }
        gpu_add_forward(&r->res, c, r->y, r->y, sc);
        h = r->y;
    }
    gpu_pool_forward(&t->gap, c, t->feat, h);
    gpu_fc_forward(c, t->logits, t->feat, wview(g, L->fc_w), P + L->fc_b, t->n, L->feat, L->s.n_classes);
}

/* Gradients of every parameter into g->grads from t->d_logits, in model_train_step's order.
 * Per block, with dy = g[gy] the gradient of the block output and dx = g[1 − gy] that of its
 * input: dy ·= [y > 0]; t0 = bn2'(dy); t1 = conv2'(t0); t0 = bn1'(t1 ·= [a1 > 0]);
 * dx = conv1'(t0); then dx += convd'(bnd'(dy)) through t1, t2, or dx += dy. */
static void net_backward(gpu_model *g, gpu_net *t) {
    const nn_layout *L = &g->L;
    gpu_ctx *c = &g->ctx;
    const float *P = g->params;
    float *G = g->grads;
    const int n = t->n, k = L->s.n_classes;
    gpu_fc_backward(c, t->d_feat, G + L->fc_w, G + L->fc_b, t->d_logits, t->feat, wview(g, L->fc_w), n, L->feat, k);
    gpu_overlap_mark_final(g, L->fc_w);
    int gy = 0;
    gpu_pool_backward(&t->gap, c, t->g[gy], t->d_feat, NULL, NULL);
    void *T0 = t->t[0], *T1 = t->t[1], *T2 = t->t[2];
    for (int i = N_BLOCKS - 1; i >= 0; i--) {
        const block_def *d = &L->blk[i];
        gpu_block *r = &t->b[i];
        const void *h = i > 0 ? t->b[i - 1].y : (L->s.stem == MODEL_STEM_IMAGENET ? t->p0 : t->a0);
        void *dy = t->g[gy], *dx = t->g[1 - gy];
        void *ds = dy; /* the gradient of the shortcut (and of bn2's output) */
        if (r->bn2.add) { /* fused_add: T2 := dy · [y > 0], T0 := bn2'(T2); dy as it is */
            gpu_bn_add_backward(&r->bn2, c, T0, T2, G + d->g2, G + d->b2, dy, r->c2, r->y, P + d->g2);
            ds = T2;
        } else {
            gpu_add_backward(&r->res, c, dy, dy, r->y); /* masked in place */
            bn_backward(c, t, &r->bn2, T0, G + d->g2, G + d->b2, dy, r->c2, NULL, P + d->g2);
        }
        gpu_conv_backward(&r->conv2, c, T1, G + d->w2, T0, r->a1, wview(g, d->w2));
        bn_backward(c, t, &r->bn1, T0, G + d->g1, G + d->b1, T1, r->c1, r->a1, P + d->g1);
        gpu_conv_backward(&r->conv1, c, dx, G + d->w1, T0, h, wview(g, d->w1));
        if (d->down) {
            bn_backward(c, t, &r->bnd, T1, G + d->gd, G + d->bd, ds, r->cd, NULL, P + d->gd);
            gpu_conv_backward(&r->convd, c, T2, G + d->wd, T1, h, wview(g, d->wd)); /* ds (T2 if fused_add) read already */
            gpu_add_forward(&r->acc, c, dx, dx, T2);
        } else {
            gpu_add_forward(&r->acc, c, dx, dx, ds);
        }
        gpu_overlap_mark_final(g, d->w1);
        gy = 1 - gy;
    }
    void *d0 = t->g[gy]; /* gradient of the stage-1 input */
    if (L->s.stem == MODEL_STEM_IMAGENET) {
        pool_backward(c, t, &t->maxpool, T0, d0, t->a0, t->p0);
        d0 = T0;
    }
    bn_backward(c, t, &t->bn1, T1, G + L->bn1_g, G + L->bn1_b, d0, t->c0, t->a0, P + L->bn1_g);
    gpu_conv_backward(&t->conv1, c, NULL, G + L->conv1, T1, t->xa, wview(g, L->conv1));
}

/* In bf16 or NHWC: the first `rows` input rows of t->x into t->xa (rounded, and with NHWC
 * transposed on the device: the host's minibatch stays NCHW); the weight copies: wcopy := the
 * weights of wmap from params, rounded to bf16 and / or transposed to KRSC (before every use, so
 * that uploads and updates of params are always seen). Device work only (a CUDA graph holds it). */
static void net_cast_input(gpu_model *g, gpu_net *t, int rows) {
    gpu_ctx *c = &g->ctx;
    const model_spec *s = &g->L.s;
    const size_t nx = input_count(&g->L, rows);
    if (!g->wcopy) return;
    if (c->nhwc)
        gpu_to_nhwc(c, t->xa, t->x, rows, s->in_c, s->in_h * s->in_w);
    else
        gpu_f32_to_bf16(c, t->xa, t->x, nx);
    if (g->wsegs) { /* DSGD_GPU_CASTS=one: every weight in one launch, the same bits */
        gpu_f32_to_bf16_segs(c, g->wsegs, g->n_wmap, g->wmax);
        return;
    }
    for (int i = 0; i < g->n_wmap; i++) {
        const weight_copy *w = &g->wmap[i];
        void *dst = (char *)g->wcopy + w->offc * c->act_bytes;
        if (w->ch) gpu_to_nhwc(c, dst, g->params + w->off, (int)(w->n / ((size_t)w->ch * w->hw)), w->ch, w->hw);
        else gpu_f32_to_bf16(c, dst, g->params + w->off, w->n);
    }
}

/* The first `rows` input rows from the host (x; NULL: already in t->x) into t->x, then
 * net_cast_input. */
static void net_input(gpu_model *g, gpu_net *t, const float *x, int rows, const char *what) {
    if (x) CUDA_CHECK(cudaMemcpyAsync(t->x, x, input_count(&g->L, rows) * sizeof(float), cudaMemcpyHostToDevice, g->ctx.stream),
                      what);
    net_cast_input(g, t, rows);
}

/* The training step's device work from the input in t->x and the labels in t->y: the casts, the
 * forward pass, the loss, the backward pass (marking the gradient groups, which records their
 * events and calls the hook only in a step that stages gradients or has a hook: never in a
 * graph), and the mean loss's copy to the pinned host stage. No host synchronisation, no
 * allocation, every pointer fixed for a given input slot: what a CUDA graph captures. */
static void step_body(gpu_model *g, gpu_net *t) {
    const nn_layout *L = &g->L;
    gpu_ctx *c = &g->ctx;
    const int n = t->n, k = L->s.n_classes;
    const float *P = g->params;
    float *G = g->grads;
    net_cast_input(g, t, n);
    if (L->s.arch == MODEL_LINEAR) { /* x is the (n, feat) input of the fc layer as it is */
        gpu_fc_forward(c, t->logits, t->xa, wview(g, L->fc_w), P + L->fc_b, n, L->feat, k);
        gpu_softmax_xent_forward(c, t->probs, t->losses, t->loss, t->logits, t->y, n, k);
        gpu_softmax_xent_backward(c, t->d_logits, t->probs, t->y, n, k);
        gpu_fc_backward(c, NULL, G + L->fc_w, G + L->fc_b, t->d_logits, t->xa, wview(g, L->fc_w), n, L->feat, k);
    } else {
        net_forward(g, t);
        gpu_softmax_xent_forward(c, t->probs, t->losses, t->loss, t->logits, t->y, n, k);
        gpu_softmax_xent_backward(c, t->d_logits, t->probs, t->y, n, k);
        net_backward(g, t);
    }
    gpu_overlap_mark_final(g, 0);
    CUDA_CHECK(cudaMemcpyAsync(&g->host->loss, t->loss, sizeof(float), cudaMemcpyDeviceToHost, c->stream),
               "train step: loss");
}

/* The step as a CUDA graph (DSGD_GPU_GRAPH=1, N13; docs/gpu.md "Switches"). The rule: a step runs
 * as a graph when the switch is on, it is not the model's first training step (that one runs
 * eagerly: cuDNN's and cuBLAS's lazy set-up — module loading, plans — happens outside any
 * capture; the algorithms are tuned and the workspace allocated by gpu_model_create already), and
 * it neither stages its gradient to the host (grads_host) nor has a group hook (the per-group
 * NCCL all-reduce of DSGD_NCCL_OVERLAP): those record events that the host polls or other streams
 * wait on, and put NCCL calls inside the step, so they run eagerly, as do the steps of
 * allreduce's overlapped MPI path. The graph holds step_body only: the host-to-device copies of
 * the input and labels (from any host pointer), the wait for a staged minibatch and the event
 * that frees its slot stay outside, on the same stream, so the order of the operations is the
 * eager step's. The minibatch lives in one of two input slots (gpu_model_stage), and with fp32
 * NCHW the first convolution reads the slot itself: one graph per slot, each captured the first
 * time a step uses it (two captures at most, then none: a step makes no CUDA object). The loss's
 * copy goes to pinned memory (a memcpy node), read after the one synchronisation of
 * gpu_model_train_end. The SGD update stays outside (its α changes with the schedule). */
static void step_graph_launch(gpu_model *g, gpu_net *t) {
    cudaStream_t st = g->ctx.stream;
    cudaGraphExec_t *x = &g->step_graph[t->slot];
    if (!*x) {
        cudaGraph_t graph = NULL;
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "train step: CUDA graph capture (DSGD_GPU_GRAPH=1)");
        step_body(g, t);
        CUDA_CHECK(cudaStreamEndCapture(st, &graph), "train step: CUDA graph capture (DSGD_GPU_GRAPH=1)");
        CUDA_CHECK(cudaGraphInstantiate(x, graph, 0), "train step: CUDA graph instantiation (DSGD_GPU_GRAPH=1)");
        CUDA_CHECK(cudaGraphDestroy(graph), "train step: CUDA graph capture (DSGD_GPU_GRAPH=1)");
    }
    CUDA_CHECK(cudaGraphLaunch(*x, st), "train step: CUDA graph launch (DSGD_GPU_GRAPH=1)");
    g->n_graph_steps++;
}

void gpu_model_train_begin(gpu_model *g, const float *x, const int *y, float *grads_host) {
    set_dev(g);
    const nn_layout *L = &g->L;
    gpu_net *t = &g->train;
    gpu_ctx *c = &g->ctx;
    gpu_overlap *o = &g->ov;
    const int n = t->n;
    not_in_step(g, "gpu_model_train_begin");
    if (!x) { /* the staged minibatch: its slot, once its copy is done */
        if (o->staged_tag < 0) DIE("gpu_model_train_begin: no minibatch staged (gpu_model_stage)");
        t->slot = 1 - t->slot;
        t->x = t->xs[t->slot];
        t->y = t->ys[t->slot];
        if (!g->wcopy) t->xa = t->x; /* fp32 NCHW: the slot itself */
        CUDA_CHECK(cudaStreamWaitEvent(c->stream, o->staged, 0), "train step: wait for the staged minibatch");
    } else {
        nn_check_labels(L, y, n);
    }
    if (x) {
        CUDA_CHECK(cudaMemcpyAsync(t->x, x, input_count(L, n) * sizeof(float), cudaMemcpyHostToDevice, c->stream),
                   "train step: input");
        CUDA_CHECK(cudaMemcpyAsync(t->y, y, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, c->stream), "train step: labels");
    }
    o->staged_tag = -1; /* used, or dropped by a step on another minibatch */
    o->in_step = 1;
    o->grads_host = grads_host;
    o->n_marked = o->n_ready = o->n_uploads = 0;
    if (g->sw.graph && g->n_steps > 0 && !grads_host && !o->hook) { /* the rule: step_graph_launch */
        step_graph_launch(g, t);
    } else {
        step_body(g, t);
        if ((grads_host || o->hook) && o->n_marked != o->n_groups)
            DIE("gpu_model_train_begin: %d of %d gradient groups marked by the backward pass", o->n_marked, o->n_groups);
    }
    g->n_steps++;
    CUDA_CHECK(cudaEventRecord(o->slot_free[t->slot], c->stream), "train step: input slot read");
}

float gpu_model_train_end(gpu_model *g) {
    gpu_overlap *o = &g->ov;
    if (!o->in_step) DIE("gpu_model_train_end without gpu_model_train_begin");
    set_dev(g);
    cudaStream_t st = g->ctx.stream;
    /* Later work on the compute stream (the update, the next step's backward) comes after the
     * gradient has been read out and every upload has landed. */
    if (o->grads_host)
        CUDA_CHECK(cudaStreamWaitEvent(st, o->on_host[o->n_groups - 1], 0), "gpu_model_train_end (gradient copies)");
    if (o->n_uploads) {
        CUDA_CHECK(cudaEventRecord(o->uploaded, o->h2d), "gpu_model_train_end (uploads)");
        CUDA_CHECK(cudaStreamWaitEvent(st, o->uploaded, 0), "gpu_model_train_end (uploads)");
    }
    sync_compute(g, "gpu_model_train_end");
    o->in_step = 0;
    o->grads_host = NULL;
    o->hook = NULL, o->hook_ctx = NULL; /* one step's */
    /* DSGD_GPU_SYNC=step: the loss read is also the read of the last update's flag; after a
     * non-finite update every step reports NaN (its parameters are). */
    return g->bad_update ? NAN : g->host->loss;
}

float gpu_model_train_step(gpu_model *g, const float *x, const int *y) {
    if (!x) DIE("gpu_model_train_step: no input");
    gpu_model_train_begin(g, x, y, NULL);
    return gpu_model_train_end(g);
}

void gpu_model_eval(gpu_model *g, const float *x, int n_valid, float *logits) {
    not_in_step(g, "gpu_model_eval");
    set_dev(g);
    gpu_net *t = &g->eval;
    gpu_ctx *c = &g->ctx;
    const nn_layout *L = &g->L;
    if (!t->built) DIE("gpu_model_eval on a model created with eval_batch 0");
    if (n_valid < 0 || n_valid > t->n) DIE("gpu_model_eval: n_valid %d outside [0, %d]", n_valid, t->n);
    if (n_valid == 0) return;
    const int k = L->s.n_classes;
    /* Only the valid rows move; rows are independent in inference (BN uses running statistics),
     * so the stale rows beyond n_valid change nothing. */
    net_input(g, t, x, n_valid, "eval: input");
    if (L->s.arch == MODEL_LINEAR)
        gpu_fc_forward(c, t->logits, t->xa, wview(g, L->fc_w), g->params + L->fc_b, n_valid, L->feat, k);
    else
        net_forward(g, t);
    CUDA_CHECK(cudaMemcpyAsync(logits, t->logits, (size_t)n_valid * k * sizeof(float), cudaMemcpyDeviceToHost, c->stream),
               "eval: logits");
    sync_compute(g, "gpu_model_eval");
}

void gpu_model_train_logits(gpu_model *g, float *logits) {
    not_in_step(g, "gpu_model_train_logits");
    set_dev(g);
    const gpu_net *t = &g->train;
    CUDA_CHECK(cudaMemcpyAsync(logits, t->logits, (size_t)t->n * g->L.s.n_classes * sizeof(float),
                               cudaMemcpyDeviceToHost, g->ctx.stream),
               "gpu_model_train_logits");
    sync_compute(g, "gpu_model_train_logits");
}

int gpu_model_sgd_update(gpu_model *g, float alpha, float mu, float lambda, int nesterov) {
    not_in_step(g, "gpu_model_sgd_update");
    set_dev(g);
    gpu_ctx *c = &g->ctx;
    if (g->sw.sync_step) {
        /* One synchronisation per step (DSGD_GPU_SYNC=step): the flag is copied behind the update
         * and read at the next synchronisation (the next step's loss read); this returns 0 only
         * for an update after one found non-finite, which it does not apply. The rule: a
         * non-finite update of step t shows as step t + 1's NaN loss and failed update (the run
         * stops there, one step later than with =update, the parameters those of step t), and
         * stderr names update t. Two updates without a synchronisation between: the first one's
         * flag is waited for here. */
        if (g->upd_pending) sync_compute(g, "gpu_model_sgd_update (the previous update's flag)");
        if (g->bad_update) return 0;
        gpu_sgd_update(c, g->params, g->grads, g->vel, g->L.n_params, alpha, mu, lambda, nesterov, g->bad);
        CUDA_CHECK(cudaMemcpyAsync(&g->host->bad, g->bad, sizeof(int), cudaMemcpyDeviceToHost, c->stream),
                   "gpu_model_sgd_update");
        g->n_updates++;
        g->upd_pending = 1;
        return 1;
    }
    gpu_sgd_update(c, g->params, g->grads, g->vel, g->L.n_params, alpha, mu, lambda, nesterov, g->bad);
    CUDA_CHECK(cudaMemcpyAsync(&g->host->bad, g->bad, sizeof(int), cudaMemcpyDeviceToHost, c->stream),
               "gpu_model_sgd_update");
    CUDA_CHECK(cudaStreamSynchronize(c->stream), "gpu_model_sgd_update");
    g->n_updates++;
    return g->host->bad == 0;
}

/* ---- the device vectors and the stream, for communication on the device ---------------------
 * gpu_model_vector (gpu.h) and cuda/internal.h, used by cuda/gpucomm.cu (NCCL). Included here,
 * next to what it declares. */
#include "internal.h"

float *gpu_model_vector(gpu_model *g, int which) {
    switch (which) {
    case GPU_PARAMS: return g->params;
    case GPU_GRADS: return g->grads;
    case GPU_BN: return g->bn;
    }
    DIE("gpu_model_vector: which = %d is not one of GPU_PARAMS, GPU_GRADS, GPU_BN", which);
}

cudaStream_t gpu_model_stream(const gpu_model *g) { return g->ctx.stream; }

long gpu_model_nonfinite_update(const gpu_model *g) { return g->bad_update; }

long gpu_model_graph_steps(const gpu_model *g) { return g->n_graph_steps; }

int gpu_model_device(const gpu_model *g) { return g->dev; }
