/* layers.h — the layers of ResNet-18 as forward/backward function pairs on oneDNN (CPU).
 *
 * Each layer type is a struct built once by its *_init (primitive descriptors, primitives,
 * memory objects, internal buffers such as reordered weights, BN statistics and workspaces) and
 * then run by *_forward / *_backward, which allocate nothing: they point the layer's memory
 * objects at the caller's buffers (dnnl_memory_set_data_handle) and execute.
 *
 * Memory descriptors (oneDNN 3: opaque handles, dnnl_memory_desc_t is a pointer). Functions take
 * const_dnnl_memory_desc_t and never keep the caller's handle: every *_md field of a layer is
 * the layer's own clone (or a descriptor it created), destroyed by its *_free; handles from
 * nn_md4 belong to the caller. Nothing is created or destroyed in *_forward / *_backward.
 *
 * Memory formats. Activation buffers are in the format the layer reports in its *_md fields
 * (oneDNN's choice when a descriptor is created with dnnl_format_tag_any, e.g. nChw8c on AVX2;
 * see oneDNN "Memory Format Propagation"). Parameters are always in PyTorch's plain layouts:
 * conv weight (O, I, kh, kw), BN γ and β (C), fc weight (out, in); conv_forward reorders the
 * weight into the convolution's format and conv_backward reorders the weight gradient back.
 * nn_convert moves a tensor between formats (it allocates: for tests and set-up only).
 *
 * Gradients. Backward functions OVERWRITE their outputs (input gradient and parameter
 * gradients); the model sums the two paths into a block input with add_forward.
 *
 * Scratchpads. Every primitive is created with dnnl_scratchpad_mode_user; all of them share one
 * buffer owned by nn_ctx, sized to the largest request (oneDNN "Primitive Attributes:
 * Scratchpad"). Layers therefore must run one at a time on one nn_ctx.
 *
 * Errors. *_init return 0, or -1 with err naming the layer, the oneDNN call, file:line and
 * oneDNN's status. Failures while executing are programming errors: DNNL_CHECK aborts with the
 * same information.
 *
 * oneDNN problems worked around here, each reproduced by test_layers.c (found on 2.6.3, Debian
 * 12; rechecked on 3.2, the default build's: docs/perf.md, "Known library defects"):
 *   - jit_1x1 backward-weights of a strided 1x1 conv on nhwc with < 8 input channels: wrong dW
 *     (oneDNN issue #6035; 2.6.3 everywhere, 3.2 still at ONEDNN_MAX_CPU_ISA=AVX2) -> conv_init
 *     picks another format;
 *   - 2.6.3 only (gone in 3.2, so applied below 3.2 only): binary add with a ReLU post-op on a
 *     channel-blocked format whose channel count is not a multiple of the ISA's vector length:
 *     wrong values and out-of-bounds writes (nChw8c on AVX-512, nChw16c on AVX2; in place with
 *     padded channels everywhere) -> add_relu_fusable (the ReLU then runs as its own primitive)
 *     and add_in_place_ok;
 *   - no jit backward-weights for a 1-channel nchw input (reference loops, ~100x slower; 3.2
 *     has a jit one on AVX-512, still none at AVX2) -> conv_init reorders into a format a jit
 *     implementation takes.
 * Where oneDNN has only its reference convolution for the shapes (fewer than 8 channels with
 * padded blocks, 1x1 or 2x2 images in the last stage at tiny widths) the layers are correct but
 * slow; the widths and inputs of the experiments (w >= 16, 28x28 and up) get jit everywhere. */
#ifndef DSGD_NN_LAYERS_H
#define DSGD_NN_LAYERS_H

#include <stddef.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "util/util.h"

/* Check a oneDNN call while executing; on failure print the call, the layer, file:line and
 * oneDNN's status string, and abort. */
#define DNNL_CHECK(call, layer)                                                                   \
    do {                                                                                          \
        dnnl_status_t st_ = (call);                                                               \
        if (st_ != dnnl_success)                                                                  \
            die(__FILE__, __LINE__, "oneDNN %s failed in layer %s: %s", #call, (layer),           \
                dnnl_status2str(st_));                                                            \
    } while (0)

/* Check a oneDNN call while building; on failure fill err (call, layer, file:line, status) and
 * return -1 from the enclosing function. */
#define DNNL_TRY(call, layer)                                                                     \
    do {                                                                                          \
        dnnl_status_t st_ = (call);                                                               \
        if (st_ != dnnl_success) {                                                                \
            seterr(err, errlen, "%s:%d: oneDNN %s failed in layer %s: %s", __FILE__, __LINE__,    \
                   #call, (layer), dnnl_status2str(st_));                                         \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

typedef enum { NN_INFER = 0, NN_TRAIN = 1 } nn_mode;

/* Engine, stream and the shared user-mode scratchpad. */
typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr;  /* user scratchpad; used for every primitive without post-ops */
    void *scratch;               /* 64-byte aligned, scratch_nbytes long */
    size_t scratch_nbytes;
    int conv_bf16;               /* set before conv_init: convolutions compute on bf16 (conv_layer.lp) */
} nn_ctx;

/* One primitive with its scratchpad memory (NULL when the primitive needs none). */
typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t scratch;
    const char *layer;
} nn_prim;

/* A preallocated reorder between two memory descriptors. */
typedef struct {
    const char *name;
    nn_prim p;
    dnnl_memory_t src, dst;
} nn_reorder;

int nn_ctx_init(nn_ctx *c, char *err, size_t errlen);
void nn_ctx_free(nn_ctx *c);

/* Plain 4-D f32 descriptor (n, c, h, w) with the given tag (dnnl_nchw, dnnl_nChw8c, ...): a new
 * handle the caller owns (dnnl_memory_desc_destroy; dies on failure). */
dnnl_memory_desc_t nn_md4(int n, int ch, int h, int w, dnnl_format_tag_t tag);
/* Dimension i of md (logical, N C H W order whatever the format), and its padded size (the
 * channel count rounded up to the block of nChw8c / nChw16c). */
dnnl_dim_t nn_md_dim(const_dnnl_memory_desc_t md, int i);
dnnl_dim_t nn_md_padded_dim(const_dnnl_memory_desc_t md, int i);
/* The instruction set oneDNN's kernels use here (dnnl_get_effective_cpu_isa: the CPU's best,
 * or lower when capped by ONEDNN_MAX_CPU_ISA), e.g. "avx2", "avx512_core_bf16". */
const char *nn_isa_name(void);
/* Whether oneDNN runs bf16 convolutions natively here: the effective ISA has AVX512_BF16
 * (vdpbf16ps; AVX-512 BF16, AVX512_CORE_FP16 and AMX CPUs), not emulated with f32 arithmetic. */
int nn_bf16_native(void);
/* The tag among nChw16c, nChw8c, nhwc, nchw that md is, or dnnl_format_tag_undef. */
dnnl_format_tag_t nn_md_tag(const_dnnl_memory_desc_t md);
/* Bytes a buffer of this descriptor needs (padding of blocked formats included). */
size_t nn_md_nbytes(const_dnnl_memory_desc_t md);
/* 64-byte aligned zeroed allocation of at least nbytes (dies on failure); free with free(). */
void *nn_alloc(size_t nbytes);

/* Copy src (in src_md) into dst (in dst_md) through a temporary reorder. Allocates; for tests
 * and set-up only. */
void nn_convert(nn_ctx *c, void *dst, const_dnnl_memory_desc_t dst_md, const void *src,
                const_dnnl_memory_desc_t src_md);

int nn_reorder_init(nn_reorder *r, nn_ctx *c, const char *name, const_dnnl_memory_desc_t src_md,
                    const_dnnl_memory_desc_t dst_md, char *err, size_t errlen);
/* dst (r's dst format) = src (r's src format). */
void nn_reorder_run(nn_reorder *r, nn_ctx *c, void *dst, const void *src);
void nn_reorder_free(nn_reorder *r);

/* ---- convolution (no bias), torch.nn.Conv2d(ic, oc, k, stride, pad, bias=False) ---------- */
typedef struct {
    const char *name;
    nn_mode mode;
    int need_dinp;                  /* backward computes the input gradient */
    int n, ic, ih, iw, oc, oh, ow, k, stride, pad;
    dnnl_memory_desc_t src_md;      /* (n, ic, ih, iw) activation format */
    dnnl_memory_desc_t dst_md;      /* (n, oc, oh, ow) activation format */
    dnnl_memory_desc_t w_user_md;   /* (oc, ic, k, k) oihw: the flat parameter layout */
    dnnl_memory_desc_t w_md, wb_md, dw_md; /* formats chosen by forward, backward-data, -weights */
    dnnl_memory_desc_t bw_src_md, bw_ddst_md; /* input / output-gradient formats of backward-weights */
    nn_prim fwd, bwd_data, bwd_weights;
    nn_reorder w_in, wb_in, dw_out; /* oihw -> w_md, w_md -> wb_md, dw_md -> oihw */
    nn_reorder bw_src_in, bw_ddst_in; /* src_md -> bw_src_md, dst_md -> bw_ddst_md (when they differ) */
    float *w, *wb, *dw;             /* internal: reordered weight, its backward-data copy (or NULL), dW */
    float *bw_src, *bw_ddst;        /* internal: reordered input / output gradient for backward-weights */
    int lp;                         /* bf16 convolution (nn_ctx.conv_bf16 and a jit kernel for it):
                                     * bw_src_md, bw_ddst_md, w_md, wb_md are bf16; bw_src holds the
                                     * forward input for forward and backward-weights */
    dnnl_memory_t m_src, m_dst, m_w, m_wb, m_dsrc, m_ddst, m_dw, m_bw_src, m_bw_ddst;
} conv_layer;

/* Build a convolution of a (n, ic, ih, iw) input; oh = (ih + 2 pad - k) / stride + 1 (floor, as
 * PyTorch). src_md: the producer's activation format, or NULL to let oneDNN choose (then
 * l->src_md tells the format the input must be given in); dst_md likewise for the output. The
 * weights are always oneDNN's choice. mode NN_TRAIN also builds the backward primitives;
 * need_dinp = 0 skips backward-data (the network's first convolution). Where only oneDNN's
 * reference backward-weights accepts the activation formats (a 1-channel plain input), the layer
 * reorders its input and output gradient into the formats a jit implementation wants; likewise
 * where the jit one is oneDNN's jit_1x1 on a strided 1x1 nhwc input with fewer than 8
 * channels, which computes wrong weight gradients (oneDNN #6035; 2.6.3, and 3.2 on AVX2).
 *
 * bf16 (c->conv_bf16 set): the layer's activations and parameters stay f32 in the formats above,
 * but the convolution computes on bf16 copies: conv_forward rounds its input (round to nearest
 * even, oneDNN's reorder) into l->bw_src and the weight into l->w, and conv_backward rounds the
 * output gradient into l->bw_ddst; products are accumulated in f32 and the output, input gradient
 * and weight gradient are f32 (oneDNN "Data Types: bf16", "Convolution" data type support). This
 * is the mixed precision of Micikevicius et al. (2018) and of PyTorch's CPU autocast for
 * convolutions, with f32 master weights. A layer whose formats have no jit bf16 kernel
 * (oneDNN's reference loops would be far slower than f32) stays f32, and so does every layer
 * where the CPU lacks AVX512_BF16 (nn_bf16_native: oneDNN would emulate bf16 there): l->lp
 * tells which. */
int conv_init(conv_layer *l, nn_ctx *c, const char *name, int n, int ic, int ih, int iw, int oc, int k,
              int stride, int pad, const_dnnl_memory_desc_t src_md, const_dnnl_memory_desc_t dst_md,
              nn_mode mode, int need_dinp, char *err, size_t errlen);
/* out (n, oc, oh, ow) in dst_md = conv(inp (n, ic, ih, iw) in src_md, weight (oc, ic, k, k)
 * oihw). Reorders weight into the layer (kept for conv_backward). */
void conv_forward(conv_layer *l, nn_ctx *c, float *out, const float *inp, const float *weight);
/* dinp (src_md; skipped when NULL or !need_dinp) and dweight (oc, ic, k, k) oihw, both
 * overwritten, from dout (dst_md) and the forward input inp (src_md). Uses the weight of the
 * last conv_forward. */
void conv_backward(conv_layer *l, nn_ctx *c, float *dinp, float *dweight, const float *dout,
                   const float *inp);
void conv_free(conv_layer *l);

/* ---- batch normalisation, torch.nn.BatchNorm2d (eps 1e-5, momentum 0.1), optional ReLU --- */
typedef struct {
    const char *name;
    nn_mode mode;
    int c;
    long count;                     /* n*h*w values per channel */
    float eps, momentum;
    nn_prim fwd, bwd;
    float *mean, *var;              /* batch statistics of the last training forward (biased var) */
    void *ws;                       /* ReLU mask (training with the fused ReLU, dnnl_fuse_norm_relu) */
    dnnl_memory_t m_src, m_dst, m_scale, m_shift, m_mean, m_var, m_ws, m_dsrc, m_ddst, m_dscale,
        m_dshift;
} bn_layer;

/* Build BN over a data_md tensor (src and dst both in data_md). NN_TRAIN: batch statistics
 * (and backward); NN_INFER: running statistics (dnnl_use_global_stats). */
int bn_init(bn_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t data_md, int relu,
            nn_mode mode, char *err, size_t errlen);
/* out = [relu](γ (inp − µ) / sqrt(σ² + eps) + β), in place allowed (out == inp) for NN_INFER.
 * NN_TRAIN: µ, σ² of the batch (biased), then running_mean = 0.9 running_mean + 0.1 µ and
 * running_var = 0.9 running_var + 0.1 σ² count/(count−1), as PyTorch. NN_INFER: µ, σ² are
 * running_mean, running_var (not changed). gamma, beta, running_*: (C). */
void bn_forward(bn_layer *l, nn_ctx *c, float *out, const float *inp, const float *gamma,
                const float *beta, float *running_mean, float *running_var);
/* dinp (data_md), dgamma, dbeta (C) overwritten, from dout and the forward input inp of the last
 * bn_forward; dinp == dout allowed. */
void bn_backward(bn_layer *l, nn_ctx *c, float *dinp, float *dgamma, float *dbeta, const float *dout,
                 const float *inp, const float *gamma, const float *beta);
void bn_free(bn_layer *l);

/* ---- ReLU (eltwise); backward from the output (dnnl_eltwise_relu_use_dst_for_bwd) ------- */
typedef struct {
    const char *name;
    nn_mode mode;
    nn_prim fwd, bwd;
    dnnl_memory_t m_src, m_dst, m_ddst, m_dsrc;
} relu_layer;

int relu_init(relu_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t data_md,
              nn_mode mode, char *err, size_t errlen);
/* out = max(inp, 0); out == inp allowed. */
void relu_forward(relu_layer *l, nn_ctx *c, float *out, const float *inp);
/* dinp = dout · [out > 0]; dinp == dout allowed. out: the forward output. */
void relu_backward(relu_layer *l, nn_ctx *c, float *dinp, const float *dout, const float *out);
void relu_free(relu_layer *l);

/* ---- elementwise add (binary primitive), optionally followed by ReLU (post-op) ---------- */
typedef struct {
    const char *name;
    int relu;
    int fused;                      /* ReLU as a post-op of the binary primitive (add_relu_fusable) */
    dnnl_memory_desc_t a_md;        /* a and out */
    nn_prim fwd;
    relu_layer r;                   /* the ReLU's backward (NN_TRAIN), and its forward when not fused */
    dnnl_memory_t m_a, m_b, m_dst;
} add_layer;

/* out = [relu](a + b); a in a_md, b in b_md, out in a_md. The residual connection of a
 * BasicBlock and the sum of the two gradients reaching a block input. */
int add_init(add_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t a_md,
             const_dnnl_memory_desc_t b_md, int relu, nn_mode mode, char *err, size_t errlen);
/* out == a allowed if add_in_place_ok(l). */
void add_forward(add_layer *l, nn_ctx *c, float *out, const float *a, const float *b);
/* Whether add_forward may run in place (out == a). Always on oneDNN >= 3.2; before, not with
 * the fused ReLU on a format with padded channels (fewer channels than the block): oneDNN 2.6's
 * jit:uni binary then leaves dst unchanged (found by test_layers' add_relu_c4). */
int add_in_place_ok(const add_layer *l);
/* Whether add+ReLU on md may run as one binary primitive with a ReLU post-op: always on oneDNN
 * >= 3.2 (the defect below is gone there: docs/perf.md). Before 3.2: on plain formats
 * (nchw, nhwc) always; on channel-blocked ones (nChw8c, nChw16c) only when the channel count is
 * a multiple of the vector length of the ISA oneDNN runs (16 floats for AVX-512, 8 for AVX2,
 * 4 below; dnnl_get_effective_cpu_isa, so ONEDNN_MAX_CPU_ISA counts). Otherwise add_init builds
 * the add and a separate in-place ReLU: oneDNN 2.6.3's jit:uni binary with an eltwise post-op
 * computes wrong values there and writes beyond dst (e.g. nChw8c on AVX-512 with C = 4 or 24;
 * nChw16c on AVX2 with C = 12; in place with padded channels on both) — docs/perf.md, "Known
 * library defects"; test_layers sweeps every such case. */
int add_relu_fusable(const_dnnl_memory_desc_t md);
/* With relu: dsum = dout · [out > 0] (dsum == dout allowed); the gradient of a and of b. */
void add_backward(add_layer *l, nn_ctx *c, float *dsum, const float *dout, const float *out);
void add_free(add_layer *l);

/* ---- pooling: max k x k (stride, pad; max over the window, padding excluded) or global avg */
typedef struct {
    const char *name;
    nn_mode mode;
    int oh, ow;
    dnnl_memory_desc_t dst_md;
    nn_prim fwd, bwd;
    void *ws;                       /* argmax indices (max pooling, training) */
    dnnl_memory_t m_src, m_dst, m_ws, m_dsrc, m_ddst;
} pool_layer;

/* Max pooling (max = 1; k, stride, pad as torch.nn.MaxPool2d, floor mode) or global average
 * pooling (max = 0; k, stride, pad ignored: the window is the whole ih x iw, output 1 x 1,
 * torch.nn.AdaptiveAvgPool2d(1)). dst_md gets src_md's format. */
int pool_init(pool_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t src_md, int max,
              int k, int stride, int pad, nn_mode mode, char *err, size_t errlen);
void pool_forward(pool_layer *l, nn_ctx *c, float *out, const float *inp);
/* dinp (src_md) overwritten from dout (dst_md); uses the argmax of the last pool_forward. */
void pool_backward(pool_layer *l, nn_ctx *c, float *dinp, const float *dout);
void pool_free(pool_layer *l);

/* ---- fully connected, torch.nn.Linear(nin, nout), plain C (OpenMP) ---------------------- */
/* out (n, nout) = inp (n, nin) · weightᵀ (nout, nin) + bias (nout). */
void fc_forward(float *out, const float *inp, const float *weight, const float *bias, int n, int nin,
                int nout);
/* dinp (n, nin) (skipped if NULL), dweight (nout, nin), dbias (nout), overwritten, from
 * dout (n, nout). */
void fc_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                 const float *weight, int n, int nin, int nout);

/* ---- softmax cross-entropy, torch.nn.functional.cross_entropy (mean) -------------------- */
/* probs (n, k) = softmax(logits (n, k)) with the row maximum subtracted (stable); losses (n) =
 * −log softmax(logits)[y] computed as logsumexp − logit[y] (may be NULL). Returns the mean loss
 * over the n rows. y (n) in [0, k). */
float softmax_xent_forward(float *probs, float *losses, const float *logits, const int *y, int n, int k);
/* dlogits (n, k) = (probs − onehot(y)) / n: the gradient of the mean loss. */
void softmax_xent_backward(float *dlogits, const float *probs, const int *y, int n, int k);

#endif
