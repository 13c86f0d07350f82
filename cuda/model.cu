/* model.cu — cuda/gpu.h: device choice, pinned host memory, and ResNet-18 (or the linear model)
 * on one GPU, built from the parameter layout of src/nn/layout.h on the layers of layers.h. The
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
 * fp32 — the master weights the methods and the SGD update see — and one more cudaMalloc, w16,
 * holds a bf16 copy of every convolution and fc weight, each at a 16-byte-aligned offset (tensor
 * cores), made by gpu_f32_to_bf16 at the start of every training step and evaluation (so it
 * always follows uploads and updates; the cost is a read of the weights). Activations and their
 * gradients are bf16 (the arenas, and the minibatch after its own cast from the fp32 copy of the
 * host's input); BN's γ, β, statistics and their gradients, the logits, the loss and every
 * parameter gradient are fp32 (layers.h, "Element types"). No loss scaling: bf16 has fp32's
 * exponent range.
 *
 * Buffers of the training network, as on the CPU: every forward activation a backward pass
 * reads has its own buffer (b2 == y: the residual add runs in place); gradients flow through two
 * block-boundary buffers g[0], g[1] and three temporaries t[0..2] of the largest activation
 * size. Unlike the CPU, no BN backward runs in place (cuDNN does not document it), so the
 * temporaries rotate differently (net_backward). The evaluation network needs no saved
 * activations: four rotating buffers, with the block input kept until the residual add.
 *
 * Threads and streams: every entry point makes the model's device current and enqueues on the
 * model's one stream; the calls that return data (or a loss, or a flag) synchronise it. */
#include "gpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "layers.h"

typedef struct {
    gpu_conv_layer conv1, conv2, convd;
    gpu_bn_layer bn1, bn2, bnd;
    gpu_add_layer res;              /* y = relu(bn2 + shortcut), in place in y */
    gpu_add_layer acc;              /* dx += gradient through the shortcut (training) */
    void *c1, *a1, *c2, *y, *cd, *sd; /* activation type */
} gpu_block;

typedef struct {
    gpu_mode mode;
    int n;
    int built;
    gpu_conv_layer conv1;
    gpu_bn_layer bn1;
    gpu_pool_layer maxpool, gap;
    gpu_block b[N_BLOCKS];
    float *x;                       /* input (n, c, h, w) copied from the host (fp32): xs[slot] */
    void *xa;                       /* the input in the activation type: x itself, or its bf16 copy */
    int *y;                         /* labels (n) (training): ys[slot] */
    float *xs[2];                   /* training: two input slots, so that the next minibatch can be */
    int *ys[2];                     /*   copied in (gpu_model_stage) while a step reads the other */
    int slot;                       /* the slot x and y point at */
    void *c0, *a0, *p0;             /* stem: conv, bn1+ReLU, max pool (ImageNet stem) */
    void *feat;                     /* (n, 8w) */
    float *logits;                  /* (n, classes), fp32 in every precision */
    float *probs, *losses, *loss;   /* training: (n, classes), (n), the mean loss (1) */
    void *d_feat, *d_logits;        /* training, activation type */
    void *g[2], *t[3];              /* training gradient buffers, `big` values each */
    int io32;                       /* a BN or max-pool layer runs on fp32 tensors (bf16 fallback) */
    float *s32[4];                  /* then: fp32 scratch for its casts, `big` floats each (eval: 2) */
    void *arena;
    size_t arena_nbytes;
} gpu_net;

/* Page-locked staging of the scalars read back every step. */
typedef struct {
    float loss;
    int bad;
} host_stage;

/* The overlap of copies with computation (docs/gpu.md, "Overlap"): two copy streams beside the
 * compute stream (ctx.stream), the gradient in groups that become final one after the other in
 * the backward pass, and the events that order them. Everything is made by gpu_model_create.
 *
 * Gradient groups, in the order the backward pass finishes them: group j holds the flat grads
 * [glo[j], j ? glo[j-1] : n_params): the fc layer, layer4.1, layer4.0, ..., layer1.0, then the
 * stem (conv1, bn1) — torchvision's state_dict order puts the last layers at the end of the
 * vector, so the final part grows from the end down to 0. The linear model has one group. */
#define GPU_MAX_GROUPS (N_BLOCKS + 2)

typedef struct {
    cudaStream_t d2h, h2d;                       /* non-blocking copy streams, one per direction */
    int n_groups;
    size_t glo[GPU_MAX_GROUPS];
    cudaEvent_t computed[GPU_MAX_GROUPS];        /* compute stream: group j final on the device */
    cudaEvent_t on_host[GPU_MAX_GROUPS];         /* d2h: group j copied to the host */
    cudaEvent_t uploaded;                        /* h2d: the step's gradient uploads are done */
    cudaEvent_t staged;                          /* h2d: the staged minibatch is on the device */
    cudaEvent_t slot_free[2];                    /* compute stream: the last step reading slot s is done */
    float *stage_x;                              /* pinned host minibatch (batch, c, h, w) to stage */
    int *stage_y;                                /* pinned host labels (batch) */
    long staged_tag;                             /* tag of the minibatch staged in slot 1 − slot, or -1 */
    /* The step between gpu_model_train_begin and gpu_model_train_end: */
    int in_step;
    float *grads_host;                           /* where the groups go (NULL: not staged) */
    int n_marked;                                /* groups the backward pass has marked */
    int n_ready;                                 /* groups seen on the host */
    int n_uploads;                               /* gpu_model_grads_upload calls */
} gpu_overlap;

/* One conv or fc weight of the flat params (offset off, n values) and its bf16 copy (at off16). */
typedef struct {
    size_t off, n, off16;
} weight16;

struct gpu_model {
    nn_layout L;
    char fallback[400];                /* gpu_model_bf16_fallback */
    int dev;
    gpu_ctx ctx;
    float *params, *grads, *vel, *bn; /* device, n_params (n_bn) floats */
    int *bad;                          /* device flag of gpu_sgd_update */
    void *w16;                         /* GPU_BF16: bf16 copies of the conv and fc weights (wmap) */
    weight16 wmap[MAX_TENSORS];
    int n_wmap;
    gpu_net train, eval;
    host_stage *host;                  /* pinned */
    gpu_overlap ov;
};

/* ---- devices, versions, host memory ------------------------------------------------------- */

int gpu_built(void) { return 1; }

void gpu_version(char *buf, size_t n) {
    int rt = 0, drv = 0, bmaj = 0, bmin = 0, bpat = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv); /* 0 when no driver is installed */
    cudaGetLastError();
    const size_t dnn = cudnnGetVersion(); /* major*10000 + minor*100 + patch since cuDNN 9 */
    cublasGetProperty(MAJOR_VERSION, &bmaj);
    cublasGetProperty(MINOR_VERSION, &bmin);
    cublasGetProperty(PATCH_LEVEL, &bpat);
    char d[32];
    if (drv > 0) snprintf(d, sizeof d, "%d.%d", drv / 1000, (drv % 1000) / 10);
    else snprintf(d, sizeof d, "none");
    snprintf(buf, n, "CUDA runtime %d.%d, driver %s, cuDNN %zu.%zu.%zu, cuBLAS %d.%d.%d", rt / 1000, (rt % 1000) / 10, d,
             dnn / 10000, (dnn % 10000) / 100, dnn % 100, bmaj, bmin, bpat);
}

/* The launchers' node-local rank variables, those of MPI launchers before Slurm's: under mpiexec
 * inside a Slurm job every rank inherits the batch step's SLURM_LOCALID (0), and the MPI
 * launcher's own variable is the right one. */
static const char *const local_rank_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK", /* Open MPI (mpirun, and srun with PMIx) */
    "MPI_LOCALRANKID",            /* MPICH / Intel MPI (Hydra) */
    "PMI_LOCAL_RANK",             /* PMI (MPICH's PMI, Cray PALS) */
    "MV2_COMM_WORLD_LOCAL_RANK",  /* MVAPICH2 */
    "SLURM_LOCALID",              /* srun */
};

/* What gpu_select_early chose (dev -1: nothing). */
static struct {
    int dev, local_rank, count;
    const char *var;
} early = {-1, -1, 0, NULL};

int gpu_launcher_local_rank(const char **var) {
    for (size_t i = 0; i < sizeof local_rank_vars / sizeof local_rank_vars[0]; i++) {
        const char *v = getenv(local_rank_vars[i]);
        char *end;
        if (!v || !*v) continue;
        const long r = strtol(v, &end, 10);
        if (*end || r < 0 || r > 1 << 20) continue;
        if (var) *var = local_rank_vars[i];
        return (int)r;
    }
    return -1;
}

int gpu_select_early(void) {
    early.dev = -1, early.local_rank = -1, early.count = 0, early.var = NULL;
    const char *off = getenv("DSGD_GPU_EARLY");
    if (off && strcmp(off, "0") == 0) return -1;
    const char *var = NULL;
    const int lr = gpu_launcher_local_rank(&var);
    if (lr < 0) return -1;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) { /* no GPU: gpu_select says so if asked */
        cudaGetLastError();
        return -1;
    }
    const int dev = lr % count;
    if (cudaSetDevice(dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    early.dev = dev, early.local_rank = lr, early.count = count, early.var = var;
    return dev;
}

int gpu_select(int local_rank, int local_size, char *desc, size_t desclen, char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        cudaGetLastError();
        seterr(err, errlen, "no CUDA GPU visible: cudaGetDeviceCount: %s",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices (CUDA_VISIBLE_DEVICES?)");
        return EXIT_RUNTIME;
    }
    const int split_dev = (local_rank < 0 ? 0 : local_rank) % count;
    /* The launcher's choice, made before MPI_Init, stands (a CUDA-aware MPI made its context
     * there); the node-local split checks it. */
    const int dev = early.dev >= 0 && early.dev < count ? early.dev : split_dev;
    char note[200] = "";
    if (early.dev >= 0 && early.dev != split_dev)
        snprintf(note, sizeof note, "; the launcher's %s=%d chose it, the node-local MPI rank %d would choose GPU %d", early.var,
                 early.local_rank, local_rank, split_dev);
    else if (early.dev >= 0)
        snprintf(note, sizeof note, " (%s=%d, as the node-local MPI rank)", early.var, early.local_rank);
    e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaFree(NULL); /* create the context now: driver problems show here */
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "GPU %d of %d: cudaSetDevice: %s", dev, count, cudaGetErrorString(e));
        return EXIT_RUNTIME;
    }
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "GPU %d of %d: cudaGetDeviceProperties: %s", dev, count, cudaGetErrorString(e));
        return EXIT_RUNTIME;
    }
    int len = snprintf(desc, desclen, "GPU %d of %d: %s (sm_%d%d, %.1f GiB)", dev, count, p.name, p.major, p.minor,
                       (double)p.totalGlobalMem / (1 << 30));
    int sharing = 0; /* ranks of this node on this device: local ranks r with r mod count = dev */
    for (int r = 0; r < local_size; r++) sharing += r % count == dev;
    if (sharing > 1 && len >= 0 && (size_t)len < desclen)
        len += snprintf(desc + len, desclen - (size_t)len, ", shared by %d ranks", sharing);
    if (note[0] && len >= 0 && (size_t)len < desclen) snprintf(desc + len, desclen - (size_t)len, "%s", note);
    if (early.dev >= 0 && early.dev != split_dev)
        fprintf(stderr,
                "dsgd-run: warning: GPU choice: the launcher's %s=%d picked GPU %d of %d before MPI_Init, but this rank is "
                "node-local MPI rank %d of %d (GPU %d): kept GPU %d; two ranks may share a GPU (DSGD_GPU_EARLY=0 uses the "
                "MPI ranks)\n",
                early.var, early.local_rank, early.dev, count, local_rank, local_size, split_dev, dev);
    return 0;
}

void *gpu_host_alloc(size_t nbytes) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, nbytes ? nbytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) DIE("cudaHostAlloc of %zu bytes of page-locked host memory: %s", nbytes, cudaGetErrorString(e));
    memset(p, 0, nbytes);
    return p;
}

void gpu_host_free(void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p), "gpu_host_free");
}

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

/* Point every buffer of t into the arena cv (see the file comment for the plan); ab: bytes of
 * one activation. */
static void net_buffers(const nn_layout *L, gpu_net *t, carver *cv, size_t ab) {
    const model_spec *s = &L->s;
    const size_t n = (size_t)t->n, k = (size_t)s->n_classes;
    const int train = t->mode == GPU_TRAIN;
    const size_t nx = n * s->in_c * s->in_h * s->in_w;
    t->x = carve_f(cv, nx);
    t->xa = ab == sizeof(float) ? (void *)t->x : carve_a(cv, nx, ab);
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

/* The weight at flat offset off in the activation type: the fp32 params, or its bf16 copy. */
static const void *wview(const gpu_model *g, size_t off) {
    if (!g->w16) return g->params + off;
    for (int i = 0; i < g->n_wmap; i++)
        if (g->wmap[i].off == off) return (const uint16_t *)g->w16 + g->wmap[i].off16;
    DIE("GPU model: no bf16 copy of the weight at offset %zu", off);
}

/* GPU_BF16: w16 := the conv and fc weights of params, rounded to bf16 (before every use, so that
 * uploads and updates of params are always seen). */
static void cast_weights(gpu_model *g) {
    for (int i = 0; i < g->n_wmap; i++)
        gpu_f32_to_bf16(&g->ctx, (uint16_t *)g->w16 + g->wmap[i].off16, g->params + g->wmap[i].off, g->wmap[i].n);
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
        TRY(gpu_bn_init(&r->bn2, c, d->lname[3], n, d->cout, d->oh, d->ow, 0, mode, err, errlen));
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
    net_buffers(&g->L, t, &cv, g->ctx.act_bytes);
    char what[64];
    snprintf(what, sizeof what, "the %s network's activations (%d rows)", mode == GPU_TRAIN ? "training" : "evaluation", n);
    TRY(gpu_malloc(&t->arena, cv.off, what, err, errlen));
    t->arena_nbytes = cv.off;
    cv.base = (char *)t->arena;
    cv.off = 0;
    net_buffers(&g->L, t, &cv, g->ctx.act_bytes);
    return 0;
}

/* ---- create, free, copies ----------------------------------------------------------------- */

static void overlap_free(gpu_overlap *o);

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
    cudaFree(g->w16);
    if (g->host) cudaFreeHost(g->host);
    overlap_free(&g->ov);
    gpu_ctx_free(&g->ctx);
    free(g);
}

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
static int overlap_init(gpu_model *g, char *err, size_t errlen) {
    gpu_overlap *o = &g->ov;
    const model_spec *s = &g->L.s;
    o->staged_tag = -1;
    plan_groups(g);
    const char *where = "gpu_model_create (copy streams and events)";
    CUDA_TRY(cudaStreamCreateWithFlags(&o->d2h, cudaStreamNonBlocking), where);
    CUDA_TRY(cudaStreamCreateWithFlags(&o->h2d, cudaStreamNonBlocking), where);
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

static void overlap_free(gpu_overlap *o) {
    if (o->d2h) cudaStreamSynchronize(o->d2h);
    if (o->h2d) cudaStreamSynchronize(o->h2d);
    cudaEvent_t evs[] = {o->uploaded, o->staged, o->slot_free[0], o->slot_free[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i]) cudaEventDestroy(evs[i]);
    for (int j = 0; j < GPU_MAX_GROUPS; j++) {
        if (o->computed[j]) cudaEventDestroy(o->computed[j]);
        if (o->on_host[j]) cudaEventDestroy(o->on_host[j]);
    }
    if (o->d2h) cudaStreamDestroy(o->d2h);
    if (o->h2d) cudaStreamDestroy(o->h2d);
    if (o->stage_x) cudaFreeHost(o->stage_x);
    if (o->stage_y) cudaFreeHost(o->stage_y);
    memset(o, 0, sizeof *o);
}

static int model_build(gpu_model *g, gpu_precision prec, char *err, size_t errlen) {
    const nn_layout *L = &g->L;
    const model_spec *s = &L->s;
    CUDA_TRY(cudaGetDevice(&g->dev), "gpu_model_create");
    TRY(gpu_ctx_init(&g->ctx, prec, err, errlen));
    CUDA_TRY(cudaHostAlloc((void **)&g->host, sizeof *g->host, cudaHostAllocPortable), "gpu_model_create (pinned staging)");
    memset(g->host, 0, sizeof *g->host);
    const size_t np = L->n_params * sizeof(float);
    TRY(gpu_malloc((void **)&g->params, np, "the parameters", err, errlen));
    TRY(gpu_malloc((void **)&g->grads, np, "the gradients", err, errlen));
    TRY(gpu_malloc((void **)&g->vel, np, "the velocity", err, errlen));
    TRY(gpu_malloc((void **)&g->bn, L->n_bn * sizeof(float), "the BN running statistics", err, errlen));
    TRY(gpu_malloc((void **)&g->bad, sizeof(int), "the SGD flag", err, errlen));
    if (prec == GPU_BF16) { /* the bf16 weight copies, each 16-byte aligned */
        size_t n16 = 0;
        for (int i = 0; i < L->n_tensors; i++) {
            if (L->kind[i] != T_CONV && L->kind[i] != T_FC_WEIGHT) continue;
            weight16 *w = &g->wmap[g->n_wmap++];
            w->off = L->tensors[i].offset;
            w->n = L->tensors[i].n;
            w->off16 = n16;
            n16 += (w->n + 7) & ~(size_t)7;
        }
        TRY(gpu_malloc(&g->w16, n16 * 2, "the bf16 weight copies", err, errlen));
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
    TRY(overlap_init(g, err, errlen));
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
    const model_spec *s = &L->s;
    if (prec != GPU_FP32 && prec != GPU_TF32 && prec != GPU_BF16) {
        seterr(err, errlen, "unknown GPU precision %d", (int)prec);
        return NULL;
    }
    if (s->batch < 1) {
        seterr(err, errlen, "model: training batch %d must be >= 1", s->batch);
        return NULL;
    }
    if (s->eval_batch < 0) {
        seterr(err, errlen, "model: eval_batch %d must be >= 0", s->eval_batch);
        return NULL;
    }
    if (s->arch != MODEL_LINEAR) { /* BN in training needs two values per channel (as the CPU) */
        const block_def *last = &L->blk[N_BLOCKS - 1];
        if ((long)s->batch * last->oh * last->ow < 2) {
            seterr(err, errlen, "model: batch %d with a %dx%d last stage leaves one value per BN channel", s->batch,
                   last->oh, last->ow);
            return NULL;
        }
    }
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

static void set_dev(const gpu_model *g) { CUDA_CHECK(cudaSetDevice(g->dev), "the GPU model (cudaSetDevice)"); }

/* The training network reads input slot s (fp32: xa is the slot itself). */
static void use_slot(gpu_model *g, gpu_net *t, int s) {
    t->slot = s;
    t->x = t->xs[s];
    t->y = t->ys[s];
    if (!g->w16) t->xa = t->x;
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
    CUDA_CHECK(cudaStreamSynchronize(st), "gpu_model_upload");
}

void gpu_model_download(gpu_model *g, int which, float *params, float *grads, float *bn) {
    not_in_step(g, "gpu_model_download");
    set_dev(g);
    cudaStream_t st = g->ctx.stream;
    const size_t np = g->L.n_params * sizeof(float), nb = g->L.n_bn * sizeof(float);
    if (which & GPU_PARAMS) CUDA_CHECK(cudaMemcpyAsync(params, g->params, np, cudaMemcpyDeviceToHost, st), "download of params");
    if (which & GPU_GRADS) CUDA_CHECK(cudaMemcpyAsync(grads, g->grads, np, cudaMemcpyDeviceToHost, st), "download of grads");
    if ((which & GPU_BN) && nb) CUDA_CHECK(cudaMemcpyAsync(bn, g->bn, nb, cudaMemcpyDeviceToHost, st), "download of bn");
    CUDA_CHECK(cudaStreamSynchronize(st), "gpu_model_download");
}

void gpu_model_velocity_upload(gpu_model *g, const float *v) {
    not_in_step(g, "gpu_model_velocity_upload");
    set_dev(g);
    CUDA_CHECK(cudaMemcpyAsync(g->vel, v, g->L.n_params * sizeof(float), cudaMemcpyHostToDevice, g->ctx.stream), "upload of velocity");
    CUDA_CHECK(cudaStreamSynchronize(g->ctx.stream), "gpu_model_velocity_upload");
}

void gpu_model_velocity_download(gpu_model *g, float *v) {
    not_in_step(g, "gpu_model_velocity_download");
    set_dev(g);
    CUDA_CHECK(cudaMemcpyAsync(v, g->vel, g->L.n_params * sizeof(float), cudaMemcpyDeviceToHost, g->ctx.stream), "download of velocity");
    CUDA_CHECK(cudaStreamSynchronize(g->ctx.stream), "gpu_model_velocity_download");
}

void gpu_model_zero_velocity(gpu_model *g) {
    not_in_step(g, "gpu_model_zero_velocity");
    set_dev(g);
    CUDA_CHECK(cudaMemsetAsync(g->vel, 0, g->L.n_params * sizeof(float), g->ctx.stream), "gpu_model_zero_velocity");
    CUDA_CHECK(cudaStreamSynchronize(g->ctx.stream), "gpu_model_zero_velocity");
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

/* The backward pass has made grads [lo, n_params) final. If this step stages its gradient and a
 * group ends there, record that group's event on the compute stream and enqueue its copy to the
 * host on the d2h stream behind it (in the order the groups become final). */
static void mark_final(gpu_model *g, size_t lo) {
    gpu_overlap *o = &g->ov;
    const int j = o->n_marked;
    if (!o->grads_host || j >= o->n_groups || o->glo[j] != lo) return;
    const size_t hi = j ? o->glo[j - 1] : g->L.n_params;
    CUDA_CHECK(cudaEventRecord(o->computed[j], g->ctx.stream), "train step: gradient group final");
    CUDA_CHECK(cudaStreamWaitEvent(o->d2h, o->computed[j], 0), "train step: d2h waits for a gradient group");
    CUDA_CHECK(cudaMemcpyAsync(o->grads_host + lo, g->grads + lo, (hi - lo) * sizeof(float), cudaMemcpyDeviceToHost, o->d2h),
               "train step: gradient group to the host");
    CUDA_CHECK(cudaEventRecord(o->on_host[j], o->d2h), "train step: gradient group on the host");
    o->n_marked++;
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
    mark_final(g, L->fc_w);
    int gy = 0;
    gpu_pool_backward(&t->gap, c, t->g[gy], t->d_feat, NULL, NULL);
    void *T0 = t->t[0], *T1 = t->t[1], *T2 = t->t[2];
    for (int i = N_BLOCKS - 1; i >= 0; i--) {
        const block_def *d = &L->blk[i];
        gpu_block *r = &t->b[i];
        const void *h = i > 0 ? t->b[i - 1].y : (L->s.stem == MODEL_STEM_IMAGENET ? t->p0 : t->a0);
        void *dy = t->g[gy], *dx = t->g[1 - gy];
        gpu_add_backward(&r->res, c, dy, dy, r->y); /* the gradient of bn2's output and of the shortcut */
        bn_backward(c, t, &r->bn2, T0, G + d->g2, G + d->b2, dy, r->c2, NULL, P + d->g2);
        gpu_conv_backward(&r->conv2, c, T1, G + d->w2, T0, r->a1, wview(g, d->w2));
        bn_backward(c, t, &r->bn1, T0, G + d->g1, G + d->b1, T1, r->c1, r->a1, P + d->g1);
        gpu_conv_backward(&r->conv1, c, dx, G + d->w1, T0, h, wview(g, d->w1));
        if (d->down) {
            bn_backward(c, t, &r->bnd, T1, G + d->gd, G + d->bd, dy, r->cd, NULL, P + d->gd);
            gpu_conv_backward(&r->convd, c, T2, G + d->wd, T1, h, wview(g, d->wd));
            gpu_add_forward(&r->acc, c, dx, dx, T2);
        } else {
            gpu_add_forward(&r->acc, c, dx, dx, dy);
        }
        mark_final(g, d->w1);
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

static void check_labels(const nn_layout *L, const int *y, int n) {
    for (int i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= L->s.n_classes) DIE("label %d of sample %d outside [0, %d)", y[i], i, L->s.n_classes);
}

static size_t input_count(const nn_layout *L, int rows) { return (size_t)rows * L->s.in_c * L->s.in_h * L->s.in_w; }

/* The first `rows` input rows from the host into t->x and, in bf16, t->xa; the bf16 weights. */
static void net_input(gpu_model *g, gpu_net *t, const float *x, int rows, const char *what) {
    gpu_ctx *c = &g->ctx;
    const size_t nx = input_count(&g->L, rows);
    CUDA_CHECK(cudaMemcpyAsync(t->x, x, nx * sizeof(float), cudaMemcpyHostToDevice, c->stream), what);
    if (g->w16) {
        gpu_f32_to_bf16(c, t->xa, t->x, nx);
        cast_weights(g);
    }
}

void gpu_model_train_begin(gpu_model *g, const float *x, const int *y, float *grads_host) {
    set_dev(g);
    const nn_layout *L = &g->L;
    gpu_net *t = &g->train;
    gpu_ctx *c = &g->ctx;
    gpu_overlap *o = &g->ov;
    const int n = t->n, k = L->s.n_classes;
    const size_t nx = input_count(L, n);
    not_in_step(g, "gpu_model_train_begin");
    if (!x) { /* the staged minibatch: its slot, once its copy is done */
        if (o->staged_tag < 0) DIE("gpu_model_train_begin: no minibatch staged (gpu_model_stage)");
        use_slot(g, t, 1 - t->slot);
        CUDA_CHECK(cudaStreamWaitEvent(c->stream, o->staged, 0), "train step: wait for the staged minibatch");
    } else {
        check_labels(L, y, n);
        CUDA_CHECK(cudaMemcpyAsync(t->x, x, nx * sizeof(float), cudaMemcpyHostToDevice, c->stream), "train step: input");
    }
    o->staged_tag = -1; /* used, or dropped by a step on another minibatch */
    if (g->w16) {
        gpu_f32_to_bf16(c, t->xa, t->x, nx);
        cast_weights(g);
    }
    if (x) CUDA_CHECK(cudaMemcpyAsync(t->y, y, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, c->stream), "train step: labels");
    o->in_step = 1;
    o->grads_host = grads_host;
    o->n_marked = o->n_ready = o->n_uploads = 0;
    const float *P = g->params;
    float *G = g->grads;
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
    mark_final(g, 0);
    if (grads_host && o->n_marked != o->n_groups)
        DIE("gpu_model_train_begin: %d of %d gradient groups marked by the backward pass", o->n_marked, o->n_groups);
    CUDA_CHECK(cudaEventRecord(o->slot_free[t->slot], c->stream), "train step: input slot read");
    CUDA_CHECK(cudaMemcpyAsync(&g->host->loss, t->loss, sizeof(float), cudaMemcpyDeviceToHost, c->stream),
               "train step: loss");
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
    CUDA_CHECK(cudaStreamSynchronize(st), "gpu_model_train_end");
    o->in_step = 0;
    o->grads_host = NULL;
    return g->host->loss;
}

float gpu_model_train_step(gpu_model *g, const float *x, const int *y) {
    if (!x) DIE("gpu_model_train_step: no input");
    gpu_model_train_begin(g, x, y, NULL);
    return gpu_model_train_end(g);
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
    check_labels(L, o->stage_y, t->n);
    set_dev(g);
    const int s = 1 - t->slot; /* the slot the next gpu_model_train_begin(NULL) reads */
    CUDA_CHECK(cudaStreamWaitEvent(o->h2d, o->slot_free[s], 0), "gpu_model_stage (slot free)");
    CUDA_CHECK(cudaMemcpyAsync(t->xs[s], o->stage_x, input_count(L, t->n) * sizeof(float), cudaMemcpyHostToDevice, o->h2d),
               "gpu_model_stage: input");
    CUDA_CHECK(cudaMemcpyAsync(t->ys[s], o->stage_y, (size_t)t->n * sizeof(int), cudaMemcpyHostToDevice, o->h2d),
               "gpu_model_stage: labels");
    CUDA_CHECK(cudaEventRecord(o->staged, o->h2d), "gpu_model_stage");
    o->staged_tag = tag;
}

long gpu_model_staged(const gpu_model *g) { return g->ov.staged_tag; }

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
    CUDA_CHECK(cudaStreamSynchronize(c->stream), "gpu_model_eval");
}

void gpu_model_train_logits(gpu_model *g, float *logits) {
    not_in_step(g, "gpu_model_train_logits");
    set_dev(g);
    const gpu_net *t = &g->train;
    CUDA_CHECK(cudaMemcpyAsync(logits, t->logits, (size_t)t->n * g->L.s.n_classes * sizeof(float),
                               cudaMemcpyDeviceToHost, g->ctx.stream),
               "gpu_model_train_logits");
    CUDA_CHECK(cudaStreamSynchronize(g->ctx.stream), "gpu_model_train_logits");
}

int gpu_model_sgd_update(gpu_model *g, float alpha, float mu, float lambda, int nesterov) {
    not_in_step(g, "gpu_model_sgd_update");
    set_dev(g);
    gpu_ctx *c = &g->ctx;
    gpu_sgd_update(c, g->params, g->grads, g->vel, g->L.n_params, alpha, mu, lambda, nesterov, g->bad);
    CUDA_CHECK(cudaMemcpyAsync(&g->host->bad, g->bad, sizeof(int), cudaMemcpyDeviceToHost, c->stream),
               "gpu_model_sgd_update");
    CUDA_CHECK(cudaStreamSynchronize(c->stream), "gpu_model_sgd_update");
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

int gpu_model_device(const gpu_model *g) { return g->dev; }
