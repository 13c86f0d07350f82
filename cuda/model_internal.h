/* model_internal.h — what the files of the GPU model share (model.cu, model_build.cu,
 * model_overlap.cu): its structures, the views into them, and the overlap's entry points for
 * creation and the backward pass. Not part of gpu.h, which stays plain C without CUDA types. */
#ifndef DSGD_CUDA_MODEL_INTERNAL_H
#define DSGD_CUDA_MODEL_INTERNAL_H

#include "gpu.h"

#include <stdint.h>

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
    cudaStream_t stg;                            /* DSGD_GPU_STAGE=own: the minibatch staging copy's (else h2d) */
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
    gpu_group_hook hook;                         /* called per group (gpu_model_set_group_hook; NULL: none) */
    void *hook_ctx;
    int n_marked;                                /* groups the backward pass has marked */
    int n_ready;                                 /* groups seen on the host */
    int n_uploads;                               /* gpu_model_grads_upload calls */
} gpu_overlap;

/* The step's switches (docs/gpu.md, "Switches"), each from the environment at gpu_model_create;
 * run.sh times every one on and off (test/gpu/run.sh, step d). */
typedef struct {
    int sync_step;   /* DSGD_GPU_SYNC=step: one host synchronisation per step (N10); =update (default): two */
    int cast_one;    /* DSGD_GPU_CASTS=one: the bf16 weight copies in one launch (N16); =each (default) */
    int stage_own;   /* DSGD_GPU_STAGE=own (default): the staging copy on a stream of its own (N17); =h2d */
    int nhwc;        /* DSGD_GPU_LAYOUT=nhwc: activations NHWC, conv weights KRSC copies (N12); =nchw (default) */
    int bn_fused;    /* DSGD_GPU_BNRELU=fused: cuDNN's fused BN+ReLU in training (N12, needs nhwc); =kernel (default) */
    int bn_add;      /* DSGD_GPU_BNRELU=fused_add: also each block's second BN with the residual add and ReLU (bf16) */
    int graph;       /* DSGD_GPU_GRAPH=1: the training step captured once as a CUDA graph and replayed (N13); =0 (default) */
} gpu_switches;

/* One conv or fc weight of the flat params (offset off, n values) and its copy in the activation
 * type (at element offc of wcopy): rounded to bf16, and with NHWC a conv weight (O, I, k, k)
 * transposed to (O, k, k, I) (ch = I, hw = k·k; ch = 0: not transposed). */
typedef struct {
    size_t off, n, offc;
    int ch, hw;
} weight_copy;

struct gpu_model {
    nn_layout L;
    char fallback[400];                /* gpu_model_bf16_fallback */
    int dev;
    gpu_ctx ctx;
    float *params, *grads, *vel, *bn; /* device, n_params (n_bn) floats */
    int *bad;                          /* device flag of gpu_sgd_update */
    void *wcopy;                       /* GPU_BF16: bf16 copies of the conv and fc weights; NHWC: KRSC
                                        * copies of the conv weights (and bf16 ones of fc's), in the
                                        * activation type (wmap); NULL: fp32 NCHW, the params themselves */
    weight_copy wmap[MAX_TENSORS];
    int n_wmap;
    gpu_cast_seg *wsegs;               /* DSGD_GPU_CASTS=one: wmap as cast segments, on the device */
    size_t wmax;                       /* the largest wmap[i].n */
    gpu_net train, eval;
    host_stage *host;                  /* pinned */
    gpu_overlap ov;
    gpu_switches sw;                   /* the step's switches (DSGD_GPU_*, read by gpu_model_create) */
    /* DSGD_GPU_SYNC=step: the SGD update's non-finite flag is read at the next synchronisation */
    int upd_pending;                   /* an update whose flag has not been read yet */
    long n_updates;                    /* gpu_model_sgd_update calls that updated */
    long bad_update;                   /* the first of them found non-finite (1-based), 0 none */
    /* DSGD_GPU_GRAPH=1 (model.cu, "The step as a CUDA graph"): one graph per input slot, captured
     * at the first step that can use it after an eager one */
    cudaGraphExec_t step_graph[2];
    long n_steps;                      /* training steps begun */
    long n_graph_steps;                /* of them, run as a graph */
};

/* The weight at flat offset off as the layers take it: its copy in wmap (bf16, or a KRSC conv
 * weight with NHWC), else the fp32 params (fp32 / tf32: the fc weight, and every weight in NCHW). */
static inline const void *wview(const gpu_model *g, size_t off) {
    for (int i = 0; i < g->n_wmap; i++)
        if (g->wmap[i].off == off) return (const char *)g->wcopy + g->wmap[i].offc * g->ctx.act_bytes;
    if (g->ctx.prec == GPU_BF16) DIE("GPU model: no bf16 copy of the weight at offset %zu", off);
    return g->params + off;
}

static inline void set_dev(const gpu_model *g) { CUDA_CHECK(cudaSetDevice(g->dev), "the GPU model (cudaSetDevice)"); }

static inline size_t input_count(const nn_layout *L, int rows) { return (size_t)rows * L->s.in_c * L->s.in_h * L->s.in_w; }

/* model_overlap.cu: the overlap's groups, streams, events and pinned staging minibatch
 * (gpu_model_create), their release, and the backward pass's mark that grads [lo, n_params) are
 * final. */
int gpu_overlap_init(gpu_model *g, char *err, size_t errlen);
void gpu_overlap_free(gpu_overlap *o);
void gpu_overlap_mark_final(gpu_model *g, size_t lo);

#endif
