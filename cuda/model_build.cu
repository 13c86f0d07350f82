/* model_build.cu — building the GPU model (gpu_model_create, gpu_model_free): the parameter
 * vectors and bf16 weight copies, each network's layers, its activation arena (the plan in
 * model.cu's file comment) and convolution algorithms. */
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------------------------ */

/* Bump allocation in an arena; with base NULL it only measures (net_buffers runs twice). */
typedef struct {
    char *base;
    size_t off;
} carver;

static void *carve(carver *cv, size_t nbytes) {
    const size_t at = cv->off;
    cv->off += (nbytes + 255) & ~(size_t)255;
    return cv->base ? cv->base + at : NULL;
}

static float *carve_f(carver *cv, size_t count) { return (float *)carve(cv, count * sizeof(float)); }

/* count activations of ab bytes each. */
static void *carve_a(carver *cv, size_t count, size_t ab) { return carve(cv, count * ab); }

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

/* Point every buffer of t into the arena cv (see model.cu's file comment for the plan); ab: bytes of
 * one activation; nhwc: the input gets its own transposed copy xa. */
static void net_buffers(const nn_layout *L, gpu_net *t, carver *cv, size_t ab, int nhwc) {
    const model_spec *s = &L->s;
    const size_t n = (size_t)t->n, k = (size_t)s->n_classes;
    const int train = t->mode == GPU_TRAIN;
    const size_t nx = n * s->in_c * s->in_h * s->in_w;
    t->x = carve_f(cv, nx);
    t->xa = ab == sizeof(float) && !nhwc ? (void *)t->x : carve_a(cv, nx, ab); /* else the cast / transposed copy */
    t->logits = carve_f(cv, n * k);
    if (train) {
        t->y = (int *)carve(cv, n * sizeof(int));
        t->xs[0] = t->x, t->ys[0] = t->y;
        t->xs[1] = carve_f(cv, nx);
        t->ys[1] = (int *)carve(cv, n * sizeof(int));
        t->probs = carve_f(cv, n * k);
        t->losses = carve_f(cv, n);
        t->loss = carve_f(cv, 1);
        t->d_logits = carve_a(cv, n * k, ab);
    }
    if (s->arch == MODEL_LINEAR) return;

    t->feat = carve_a(cv, n * L->feat, ab);
    const size_t s_c0 = n * L->c0 * L->h0 * L->w0, s_p0 = n * L->c0 * L->h1 * L->w1;
    size_t big = max_z(s_c0, s_p0); /* every block input is the stem output or a block output */
    for (int i = 0; i < N_BLOCKS; i++) big = max_z(big, n * L->blk[i].cout * L->blk[i].oh * L->blk[i].ow);
    if (t->io32)
        for (int i = 0; i < (train ? 4 : 2); i++) t->s32[i] = carve_f(cv, big);
    if (train) {
        t->c0 = carve_a(cv, s_c0, ab);
        t->a0 = carve_a(cv, s_c0, ab);
        if (s->stem == MODEL_STEM_IMAGENET) t->p0 = carve_a(cv, s_p0, ab);
        for (int i = 0; i < N_BLOCKS; i++) {
            const block_def *d = &L->blk[i];
            gpu_block *r = &t->b[i];
            const size_t so = n * d->cout * d->oh * d->ow;
            r->c1 = carve_a(cv, so, ab);
            r->a1 = carve_a(cv, so, ab);
            r->c2 = carve_a(cv, so, ab);
            r->y = carve_a(cv, so, ab);
            if (d->down) {
                r->cd = carve_a(cv, so, ab);
                r->sd = carve_a(cv, so, ab);
            }
        }
        for (int i = 0; i < 2; i++) t->g[i] = carve_a(cv, big, ab);
        for (int i = 0; i < 3; i++) t->t[i] = carve_a(cv, big, ab);
        t->d_feat = carve_a(cv, n * L->feat, ab);
    } else {
        /* e[cur] holds the block input; of the other three, o[0] takes conv1, conv2 and the
         * downsample conv in turn (each dead when the next is written), o[1] bn1 then the
         * downsample BN, o[2] bn2 and the residual sum: the next block input. */
        void *e[4];
        for (int i = 0; i < 4; i++) e[i] = carve_a(cv, big, ab);
        t->c0 = e[0];
        t->a0 = e[1];
        int cur = 1;
        if (s->stem == MODEL_STEM_IMAGENET) t->p0 = e[2], cur = 2;
        for (int i = 0; i < N_BLOCKS; i++) {
            int o[3], j = 0;
            for (int q = 0; q < 4; q++)
                if (q != cur) o[j++] = q;
            gpu_block *r = &t->b[i];
            r->c1 = r->c2 = r->cd = e[o[0]];
            r->a1 = r->sd = e[o[1]];
            r->y = e[o[2]];
            cur = o[2];
        }
    }
}

#define TRY(call)                                                                                 \
    do {                                                                                          \
        if ((call) != 0) return -1;                                                               \
    } while (0)

/* Every layer of one ResNet-18 network for t->n rows (descriptors; no buffers yet). */
static int net_layers(gpu_model *g, gpu_net *t, char *err, size_t errlen) {
    const nn_layout *L = &g->L;
    const model_spec *s = &L->s;
    gpu_ctx *c = &g->ctx;
    const gpu_mode mode = t->mode;
    const int n = t->n, train = mode == GPU_TRAIN;
    TRY(gpu_conv_init(&t->conv1, c, "conv1", n, s->in_c, s->in_h, s->in_w, L->c0, L->stem_k, L->stem_stride,
                      L->stem_pad, mode, 0, err, errlen));
    TRY(gpu_bn_init(&t->bn1, c, "bn1", n, L->c0, L->h0, L->w0, 1, mode, err, errlen));
    if (s->stem == MODEL_STEM_IMAGENET)
        TRY(gpu_pool_init(&t->maxpool, c, "maxpool", n, L->c0, L->h0, L->w0, 1, 3, 2, 1, mode, err, errlen));
    for (int i = 0; i < N_BLOCKS; i++) {
        const block_def *d = &L->blk[i];
        gpu_block *r = &t->b[i];
        TRY(gpu_conv_init(&r->conv1, c, d->lname[0], n, d->cin, d->ih, d->iw, d->cout, 3, d->stride, 1, mode, 1, err,
                          errlen));
        TRY(gpu_bn_init(&r->bn1, c, d->lname[1], n, d->cout, d->oh, d->ow, 1, mode, err, errlen));
        TRY(gpu_conv_init(&r->conv2, c, d->lname[2], n, d->cout, d->oh, d->ow, d->cout, 3, 1, 1, mode, 1, err, errlen));
        TRY(gpu_bn_init(&r->bn2, c, d->lname[3], n, d->cout, d->oh, d->ow, GPU_BN_ADD_RELU, mode, err, errlen));
        if (d->down) {
            TRY(gpu_conv_init(&r->convd, c, d->lname[4], n, d->cin, d->ih, d->iw, d->cout, 1, d->stride, 0, mode, 1,
                              err, errlen));
            if (r->convd.oh != d->oh || r->convd.ow != d->ow)
                return seterr(err, errlen, "%s: shortcut output %dx%d differs from the block output %dx%d",
                              r->convd.what, r->convd.oh, r->convd.ow, d->oh, d->ow),
                       -1;
            TRY(gpu_bn_init(&r->bnd, c, d->lname[5], n, d->cout, d->oh, d->ow, 0, mode, err, errlen));
        }
        TRY(gpu_add_init(&r->res, c, d->prefix, n, d->cout, d->oh, d->ow, 1, mode, err, errlen));
        if (train) TRY(gpu_add_init(&r->acc, c, d->prefix, n, d->cin, d->ih, d->iw, 0, mode, err, errlen));
    }
    const block_def *last = &L->blk[N_BLOCKS - 1];
    TRY(gpu_pool_init(&t->gap, c, "avgpool", n, L->feat, last->oh, last->ow, 0, 0, 0, 0, mode, err, errlen));
    /* cuDNN's bf16 BN / pooling refused (or DSGD_BF16_FALLBACK): those layers take fp32, cast by
     * bn_forward etc. below through t->s32. One context: all BN layers alike, all pools alike. */
    t->io32 = t->bn1.io32 || t->maxpool.io32;
    return 0;
}

/* cudnnFind on the network's own buffers (every convolution of t). */
static int net_tune(gpu_model *g, gpu_net *t, char *err, size_t errlen) {
    const nn_layout *L = &g->L;
    gpu_ctx *c = &g->ctx;
    const int train = t->mode == GPU_TRAIN;
    float *G = train ? g->grads : NULL;
    TRY(gpu_conv_tune(&t->conv1, c, t->xa, wview(g, L->conv1), t->c0, NULL, G ? G + L->conv1 : NULL, err, errlen));
    const void *h = L->s.stem == MODEL_STEM_IMAGENET ? t->p0 : t->a0;
    for (int i = 0; i < N_BLOCKS; i++) {
        const block_def *d = &L->blk[i];
        gpu_block *r = &t->b[i];
        TRY(gpu_conv_tune(&r->conv1, c, h, wview(g, d->w1), r->c1, train ? t->g[0] : NULL, G ? G + d->w1 : NULL, err,
                          errlen));
        TRY(gpu_conv_tune(&r->conv2, c, r->a1, wview(g, d->w2), r->c2, train ? t->t[1] : NULL, G ? G + d->w2 : NULL,
                          err, errlen));
        if (d->down)
            TRY(gpu_conv_tune(&r->convd, c, h, wview(g, d->wd), r->cd, train ? t->t[2] : NULL, G ? G + d->wd : NULL,
                              err, errlen));
        h = r->y;
    }
    return 0;
}

/* DSGD_GPU_VERBOSE set (not "0"): every convolution's chosen algorithms, math and workspace on
 * stderr, and the shared workspace, once per model (diagnosing speed on a new GPU or cuDNN). */
static void net_print_algos(const gpu_model *g, const gpu_net *t) {
    const char *v = getenv("DSGD_GPU_VERBOSE");
    if (!v || !*v || strcmp(v, "0") == 0 || !t->built || g->L.s.arch == MODEL_LINEAR) return;
    char buf[512];
    const char *net = t->mode == GPU_TRAIN ? "train" : "eval";
    gpu_conv_algos(&t->conv1, buf, sizeof buf);
    fprintf(stderr, "dsgd-run: GPU %s n=%d %s: %s\n", net, t->n, t->conv1.name, buf);
    for (int i = 0; i < N_BLOCKS; i++) {
        const gpu_block *r = &t->b[i];
        const gpu_conv_layer *ls[3] = {&r->conv1, &r->conv2, g->L.blk[i].down ? &r->convd : NULL};
        for (int j = 0; j < 3; j++) {
            if (!ls[j]) continue;
            gpu_conv_algos(ls[j], buf, sizeof buf);
            fprintf(stderr, "dsgd-run: GPU %s n=%d %s: %s\n", net, t->n, ls[j]->name, buf);
        }
    }
}

static int net_transforms(const gpu_model *g, const gpu_net *t) {
    if (!t->built || g->L.s.arch == MODEL_LINEAR) return 0;
    int k = 0;
    for (int dir = 0; dir < 3; dir++) {
        k += gpu_conv_transform(&t->conv1, dir);
        for (int i = 0; i < N_BLOCKS; i++) {
            k += gpu_conv_transform(&t->b[i].conv1, dir) + gpu_conv_transform(&t->b[i].conv2, dir);
            if (g->L.blk[i].down) k += gpu_conv_transform(&t->b[i].convd, dir);
        }
    }
    return k;
}

const char *gpu_model_bf16_fallback(const gpu_model *g) { return g->fallback; }

int gpu_model_conv_transforms(const gpu_model *g) { return net_transforms(g, &g->train) + net_transforms(g, &g->eval); }

static void net_free(gpu_net *t) {
    if (!t->built) return;
    gpu_conv_free(&t->conv1);
    gpu_bn_free(&t->bn1);
    gpu_pool_free(&t->maxpool);
    for (int i = 0; i < N_BLOCKS; i++) {
        gpu_block *r = &t->b[i];
        gpu_conv_free(&r->conv1), gpu_conv_free(&r->conv2), gpu_conv_free(&r->convd);
        gpu_bn_free(&r->bn1), gpu_bn_free(&r->bn2), gpu_bn_free(&r->bnd);
    }
    gpu_pool_free(&t->gap);
    cudaFree(t->arena);
    memset(t, 0, sizeof *t);
}

/* Layers (ResNet-18) and the arena of one network. */
static int net_build(gpu_model *g, gpu_net *t, gpu_mode mode, int n, char *err, size_t errlen) {
    t->mode = mode;
    t->n = n;
    t->built = 1;
    if (g->L.s.arch != MODEL_LINEAR) TRY(net_layers(g, t, err, errlen));
    carver cv = {NULL, 0};
    net_buffers(&g->L, t, &cv, g->ctx.act_bytes, g->ctx.nhwc);
    char what[64];
    snprintf(what, sizeof what, "the %s network's activations (%d rows)", mode == GPU_TRAIN ? "training" : "evaluation", n);
    TRY(gpu_malloc(&t->arena, cv.off, what, err, errlen));
    t->arena_nbytes = cv.off;
    cv.base = (char *)t->arena;
    cv.off = 0;
    net_buffers(&g->L, t, &cv, g->ctx.act_bytes, g->ctx.nhwc);
    return 0;
}

/* ---- create, free ------------------------------------------------------------------------- */

void gpu_model_free(gpu_model *g) {
    if (!g) return;
    cudaSetDevice(g->dev);
    if (g->ctx.stream) cudaStreamSynchronize(g->ctx.stream);
    net_free(&g->train);
    net_free(&g->eval);
    cudaFree(g->params);
    cudaFree(g->grads);
    cudaFree(g->vel);
    cudaFree(g->bn);
    cudaFree(g->bad);
    cudaFree(g->wcopy);
    cudaFree(g->wsegs);
    for (int i = 0; i < 2; i++)
        if (g->step_graph[i]) cudaGraphExecDestroy(g->step_graph[i]);
    if (g->host) cudaFreeHost(g->host);
    gpu_overlap_free(&g->ov);
    gpu_ctx_free(&g->ctx);
    free(g);
}

/* The switch `name` from the environment: the index of its value in vals[0..nv) (unset or empty:
 * dflt); another value is an error naming the variable and the values it takes. */
static int env_switch(const char *name, const char *const *vals, int nv, int dflt, int *out, char *err, size_t errlen) {
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v) return 0;
    for (int i = 0; i < nv; i++)
        if (strcmp(v, vals[i]) == 0) return *out = i, 0;
    seterr(err, errlen, "%s=%s: expected %s%s%s%s%s", name, v, vals[0], nv > 1 ? " or " : "", nv > 1 ? vals[1] : "",
           nv > 2 ? " or " : "", nv > 2 ? vals[2] : "");
    return -1;
}

/* The step's switches (gpu_switches, docs/gpu.md "Switches"). */
static int read_switches(gpu_switches *sw, char *err, size_t errlen) {
    static const char *const sync[] = {"update", "step"}, *const casts[] = {"each", "one"}, *const stage[] = {"h2d", "own"};
    static const char *const layout[] = {"nchw", "nhwc"};
    static const char *const graph[] = {"0", "1"};
    TRY(env_switch("DSGD_GPU_SYNC", sync, 2, 0, &sw->sync_step, err, errlen));
    TRY(env_switch("DSGD_GPU_CASTS", casts, 2, 0, &sw->cast_one, err, errlen));
    TRY(env_switch("DSGD_GPU_STAGE", stage, 2, 1, &sw->stage_own, err, errlen));
    static const char *const bnrelu[] = {"kernel", "fused", "fused_add"};
    TRY(env_switch("DSGD_GPU_LAYOUT", layout, 2, 0, &sw->nhwc, err, errlen));
    TRY(env_switch("DSGD_GPU_BNRELU", bnrelu, 3, 0, &sw->bn_fused, err, errlen));
    sw->bn_add = sw->bn_fused == 2;
    sw->bn_fused = sw->bn_fused != 0;
    TRY(env_switch("DSGD_GPU_GRAPH", graph, 2, 0, &sw->graph, err, errlen));
    if (sw->bn_fused && !sw->nhwc) /* cuDNN fuses BN and its activation for NHWC tensors only */
        return seterr(err, errlen, "DSGD_GPU_BNRELU=%s needs DSGD_GPU_LAYOUT=nhwc (cuDNN fuses BN and ReLU in NHWC only)",
                      sw->bn_add ? "fused_add" : "fused"),
               -1;
    return 0;
}

static int model_build(gpu_model *g, gpu_precision prec, char *err, size_t errlen) {
    const nn_layout *L = &g->L;
    const model_spec *s = &L->s;
    TRY(read_switches(&g->sw, err, errlen));
    CUDA_TRY(cudaGetDevice(&g->dev), "gpu_model_create");
    TRY(gpu_ctx_init(&g->ctx, prec, err, errlen));
    /* NHWC: every layer built below takes NHWC activations. The linear model has no layer with a
     * layout (its input is the fc layer's (n, c·h·w) row as the host flattens it). */
    if (s->arch == MODEL_LINEAR) g->sw.nhwc = g->sw.bn_fused = g->sw.bn_add = 0;
    g->ctx.nhwc = g->sw.nhwc;
    g->ctx.bn_fused = g->sw.bn_fused;
    g->ctx.bn_add = g->sw.bn_add;
    CUDA_TRY(cudaHostAlloc((void **)&g->host, sizeof *g->host, cudaHostAllocPortable), "gpu_model_create (pinned staging)");
    memset(g->host, 0, sizeof *g->host);
    const size_t np = L->n_params * sizeof(float);
    TRY(gpu_malloc((void **)&g->params, np, "the parameters", err, errlen));
    TRY(gpu_malloc((void **)&g->grads, np, "the gradients", err, errlen));
    TRY(gpu_malloc((void **)&g->vel, np, "the velocity", err, errlen));
    TRY(gpu_malloc((void **)&g->bn, L->n_bn * sizeof(float), "the BN running statistics", err, errlen));
    TRY(gpu_malloc((void **)&g->bad, sizeof(int), "the SGD flag", err, errlen));
    if (prec == GPU_BF16 || g->sw.nhwc) {
        /* The weight copies in the activation type, each at a multiple of 8 elements (16 bytes of
         * bf16): bf16 copies of every conv and fc weight, with NHWC the conv weights transposed to
         * KRSC (in fp32 / tf32 only those: the fc weight is read from the params). */
        size_t nc = 0;
        for (int i = 0; i < L->n_tensors; i++) {
            if (L->kind[i] != T_CONV && (L->kind[i] != T_FC_WEIGHT || prec != GPU_BF16)) continue;
            weight_copy *w = &g->wmap[g->n_wmap++];
            const model_tensor *t = &L->tensors[i];
            w->off = t->offset;
            w->n = t->n;
            w->offc = nc;
            if (g->sw.nhwc && L->kind[i] == T_CONV) w->ch = t->shape[1], w->hw = t->shape[2] * t->shape[3];
            nc += (w->n + 7) & ~(size_t)7;
        }
        TRY(gpu_malloc(&g->wcopy, nc * g->ctx.act_bytes, g->sw.nhwc ? "the NHWC weight copies" : "the bf16 weight copies",
                       err, errlen));
        if (g->sw.cast_one && prec == GPU_BF16) { /* the casts' segment table, for one launch per step (N16) */
            gpu_cast_seg segs[MAX_TENSORS];
            for (int i = 0; i < g->n_wmap; i++) {
                const weight_copy *w = &g->wmap[i];
                segs[i] = (gpu_cast_seg){g->params + w->off, (uint16_t *)g->wcopy + w->offc, w->n, w->ch, w->hw};
                if (w->n > g->wmax) g->wmax = w->n;
            }
            const size_t nbt = (size_t)g->n_wmap * sizeof segs[0];
            TRY(gpu_malloc((void **)&g->wsegs, nbt, "the bf16 casts' table", err, errlen));
            CUDA_TRY(cudaMemcpy(g->wsegs, segs, nbt, cudaMemcpyHostToDevice), "gpu_model_create (the bf16 casts' table)");
        }
    }
    TRY(net_build(g, &g->train, GPU_TRAIN, s->batch, err, errlen));
    if (s->eval_batch > 0) TRY(net_build(g, &g->eval, GPU_INFER, s->eval_batch, err, errlen));
    {
        const char *bn = gpu_bf16_fallback(&g->ctx, "bn"), *pool = gpu_bf16_fallback(&g->ctx, "pool");
        snprintf(g->fallback, sizeof g->fallback, "%s%s%s%s%s", bn[0] ? "BN: " : "", bn, bn[0] && pool[0] ? "; " : "",
                 pool[0] ? "max pooling: " : "", pool);
        if (g->fallback[0])
            fprintf(stderr, "dsgd-run: note: bf16 fallback (%s): those layers run on fp32 tensors with casts around them "
                    "(docs/gpu.md)\n", g->fallback);
    }
    if (s->arch != MODEL_LINEAR) {
        TRY(net_tune(g, &g->train, err, errlen));
        if (g->eval.built) TRY(net_tune(g, &g->eval, err, errlen));
    }
    TRY(gpu_ctx_commit(&g->ctx, err, errlen));
    TRY(gpu_overlap_init(g, err, errlen));
    net_print_algos(g, &g->train);
    net_print_algos(g, &g->eval);
    if (getenv("DSGD_GPU_VERBOSE") && strcmp(getenv("DSGD_GPU_VERBOSE"), "0") != 0)
        fprintf(stderr, "dsgd-run: GPU shared cuDNN workspace %zu bytes, training arena %zu bytes, eval arena %zu bytes\n",
                g->ctx.ws_nbytes, g->train.arena_nbytes, g->eval.arena_nbytes);
    /* cudnnFind wrote into gradients and activations: everything starts at zero again. */
    cudaStream_t st = g->ctx.stream;
    CUDA_TRY(cudaMemsetAsync(g->grads, 0, np, st), "gpu_model_create");
    CUDA_TRY(cudaMemsetAsync(g->train.arena, 0, g->train.arena_nbytes, st), "gpu_model_create");
    if (g->eval.built) CUDA_TRY(cudaMemsetAsync(g->eval.arena, 0, g->eval.arena_nbytes, st), "gpu_model_create");
    CUDA_TRY(cudaStreamSynchronize(st), "gpu_model_create");
    return 0;
}

gpu_model *gpu_model_create(const nn_layout *L, gpu_precision prec, char *err, size_t errlen) {
    if (prec != GPU_FP32 && prec != GPU_TF32 && prec != GPU_BF16) {
        seterr(err, errlen, "unknown GPU precision %d", (int)prec);
        return NULL;
    }
    if (nn_layout_check_batches(L, err, errlen)) return NULL;
    gpu_model *g = (gpu_model *)calloc(1, sizeof *g);
    if (!g) DIE("out of memory allocating the GPU model");
    g->L = *L;
    /* L's tensor names point into L itself: re-point them at the copy. */
    for (int i = 0; i < g->L.n_tensors; i++) g->L.tensors[i].name = g->L.names[i];
    for (int i = 0; i < g->L.n_bn_tensors; i++) g->L.bn_tensors[i].name = g->L.bn_names[i];
    if (model_build(g, prec, err, errlen)) {
        gpu_model_free(g);
        return NULL;
    }
    return g;
}
