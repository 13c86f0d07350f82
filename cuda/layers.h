/* layers.h — the layers of ResNet-18 on a GPU: the twins of src/nn/layers.h (oneDNN, CPU) with the
 * same names prefixed gpu_ and the same argument order (layer, context, outputs, inputs), on
 * cuDNN 9 (convolution, batch normalisation, max pooling: the "legacy" cudnn_cnn / cudnn_ops
 * API), cuBLAS (fully connected) and our own kernels (ReLU, add, global average pooling,
 * softmax cross-entropy, SGD update). Plain C: compiled by nvcc (the .cu files of cuda/) and included by C
 * tests (mpicc -I/usr/local/cuda/include).
 *
 * Memory. Every pointer handed to a gpu_* function is DEVICE memory unless said otherwise.
 * Activations are NCHW, row-major, packed — PyTorch's layout — so the flat parameter vectors of
 * nn_layout (conv weight (O, I, kh, kw), BN γ, β (C), fc weight (out, in)) keep their meaning: a
 * conv weight is cuDNN's NCHW filter as it is.
 *
 * Layout NHWC (gpu_ctx.nhwc, DSGD_GPU_LAYOUT=nhwc; issue 23, N12): every activation of a
 * convolution, BN, ReLU, add and pooling layer is (n, h, w, c) packed instead — PyTorch's
 * channels_last — and the weight a convolution is given is (O, kh, kw, I) (cuDNN's
 * CUDNN_TENSOR_NHWC filter, "KRSC"): the caller keeps a transposed copy (gpu_to_nhwc, made before
 * every step as the bf16 copies are), while the weight gradient a convolution writes stays
 * (O, I, kh, kw) fp32 in the flat gradient vector (the layer transposes its own KRSC gradient
 * back, gpu_from_nhwc_f32). The shapes below are given as (n, c, h, w) in either layout; the
 * global average pool's output (n, c, 1, 1) is the same (n, c) matrix in both, so the fc layer
 * does not change. The flat parameter, gradient and BN vectors never change layout.
 *
 * Element types. Activations (every (n, c, h, w) or (n, features) input and output of a layer)
 * and their gradients are in the context's ACTIVATION TYPE: fp32 for GPU_FP32 and GPU_TF32,
 * bf16 for GPU_BF16 (bfloat16: 1 sign, 8 exponent, 7 fraction bits; CUDA's __nv_bfloat16, 2
 * bytes); their pointers are void *, sized by gpu_act_bytes. The weights given to convolutions
 * and the fc layer are in the activation type too (with GPU_BF16 the bf16 copy of the fp32
 * weights that gpu_f32_to_bf16 makes). Everything else is fp32 (float *) in every precision:
 * parameter gradients (the flat grads vector), BN γ, β, running and saved statistics, the fc
 * bias, logits, probabilities, losses and the SGD state. Arithmetic is fp32 throughout: bf16
 * values are widened on load, sums and products accumulate in fp32 (cuDNN's and cuBLAS's compute
 * type CUDNN_DATA_FLOAT / CUBLAS_COMPUTE_32F, our kernels' float registers), and a result stored
 * as bf16 is rounded to nearest even once.
 *
 * Build and run. A layer is built once by gpu_*_init (descriptors, its own small buffers such as
 * BN's saved statistics) and then run by gpu_*_forward / gpu_*_backward, which allocate nothing
 * and only enqueue work on the context's stream (they return before the GPU is done; results are
 * on the device when the stream is synchronised). Convolutions also need gpu_conv_tune (algorithm
 * choice on real buffers) and every layer needs gpu_ctx_commit (the shared workspace) before
 * they run.
 *
 * Gradients. Backward functions OVERWRITE their outputs (input gradient and parameter
 * gradients), as on the CPU; the model sums two paths into a block input with gpu_add_forward.
 *
 * Errors. *_init, gpu_conv_tune and gpu_ctx_* return 0, or -1 with err naming the layer, its
 * shapes, the call, file:line and the library's status. A failure while executing is a fault of
 * the device or of this code: CUDA_CHECK / CUDNN_CHECK / CUBLAS_CHECK (cuda/common.h) print the
 * same and abort. */
#ifndef DSGD_CUDA_LAYERS_H
#define DSGD_CUDA_LAYERS_H

#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GPU_INFER = 0, GPU_TRAIN = 1 } gpu_mode;

/* Length of a layer's description: "layer2.0.conv1: conv 3x3/2 pad 1, (128, 64, 32, 32) ->
 * (128, 128, 16, 16)", printed with every failure. */
#define GPU_WHAT_LEN 160

/* Workspace of one convolution direction at most (and of cudnnFind while tuning): 1 GiB, or a
 * quarter of the free device memory if that is less (ranks may share a GPU). */
#define GPU_CONV_WS_CAP ((size_t)1 << 30)

/* cuBLAS workspace (cublasSetWorkspace): 32 MiB, cuBLAS's recommendation for Hopper (4 MiB for
 * older GPUs), so that cuBLAS never allocates while training. */
#define GPU_BLAS_WS_NBYTES ((size_t)32 << 20)

/* A convolution algorithm chosen once per shape (cudnnFind is the expensive part of building a
 * model: ResNet-18 repeats most shapes). dir: 0 forward, 1 backward data, 2 backward filter. */
typedef struct {
    int dir, n, ic, ih, iw, oc, k, stride, pad;
    int align;              /* smallest alignment in bytes (<= 256) of the buffers it was found on */
    int algo;               /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math;
} gpu_algo_memo;

#define GPU_MEMO_MAX 96

/* One device's handles and stream, and the workspace every layer shares. Layers of one context
 * run one at a time (one stream), like nn_ctx's scratchpad on the CPU. */
typedef struct {
    int dev;                /* device ordinal (the current device at gpu_ctx_init) */
    int n_sm;               /* multiprocessors: grid sizes of the grid-stride kernels */
    gpu_precision prec;
    int nhwc;               /* activation layout of the layers built from now on: 0 NCHW, 1 NHWC (see
                             * "Layout NHWC" above); 0 after gpu_ctx_init, set by the caller */
    int bn_fused;           /* training BN+ReLU layers built from now on in NHWC use cuDNN's fused
                             * BN_ACTIVATION calls (DSGD_GPU_BNRELU=fused; gpu_bn_layer.fused); 0 after
                             * gpu_ctx_init, set by the caller */
    int bn_add;             /* and (with bn_fused) training BN layers built with relu = GPU_BN_ADD_RELU
                             * in NHWC bf16 take the residual add and the ReLU into cuDNN's
                             * BN_ADD_ACTIVATION calls (DSGD_GPU_BNRELU=fused_add; gpu_bn_layer.add) */
    size_t act_bytes;       /* bytes of one activation value: 4 (fp32), 2 (GPU_BF16) */
    cudaStream_t stream;    /* a blocking stream: ordered with cudaMemcpy on the legacy stream */
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    void *blas_ws;          /* GPU_BLAS_WS_NBYTES, given to cuBLAS */
    void *ws;               /* shared workspace of ws_nbytes, allocated by gpu_ctx_commit */
    size_t ws_nbytes;
    size_t ws_need;         /* the largest gpu_ctx_reserve so far */
    void *find_ws;          /* cudnnFind workspace while tuning (freed by gpu_ctx_commit) */
    size_t find_ws_nbytes;
    size_t ws_cap;          /* per-direction workspace limit, set with find_ws */
    int find_ready;         /* find_ws and ws_cap are set */
    int heuristic;          /* DSGD_CUDNN_ALGO=heuristic: choose algorithms without timing (gpu_conv_tune) */
    int nondet;             /* take non-deterministic algorithms on a par with deterministic ones
                             * (DSGD_CUDNN_DETERMINISTIC=0; the default with find, not with heuristic) */
    gpu_algo_memo memo[GPU_MEMO_MAX];
    int n_memo;
    int bf16_probed;        /* GPU_BF16: cuDNN's bf16 BN and pooling tried (gpu_bf16_fallback) */
    char bn_fallback[160], pool_fallback[160]; /* why those run in fp32 ("" : they do not) */
} gpu_ctx;

/* Handles on the current device, a stream, the cuBLAS workspace; cuBLAS math mode from prec
 * (GPU_FP32: CUBLAS_DEFAULT_MATH, which never uses TF32 for sgemm; GPU_TF32:
 * CUBLAS_TF32_TENSOR_OP_MATH; GPU_BF16: CUBLAS_DEFAULT_MATH, the fc layer then calls
 * cublasGemmEx with bf16 inputs and CUBLAS_COMPUTE_32F; cuBLAS "cublasSetMathMode"). GPU_BF16
 * needs compute capability 8.0 or later (Ampere: bf16 tensor cores; cuDNN's bf16 convolutions
 * and batch normalisation); an older GPU is refused with an error saying so. */
int gpu_ctx_init(gpu_ctx *c, gpu_precision prec, char *err, size_t errlen);
/* Bytes of one activation value of c: 4, or 2 for GPU_BF16. */
static inline size_t gpu_act_bytes(const gpu_ctx *c) { return c->act_bytes; }
/* The shared workspace must hold at least nbytes (layers call this while being tuned). */
void gpu_ctx_reserve(gpu_ctx *c, size_t nbytes);
/* Release the tuning workspace and allocate the shared one (the largest reservation), once,
 * after every layer is tuned and before any runs. */
int gpu_ctx_commit(gpu_ctx *c, char *err, size_t errlen);
void gpu_ctx_free(gpu_ctx *c);

/* cudaMalloc of nbytes (256-byte aligned), zeroed; 0 or -1 with err naming `what` and the size. */
int gpu_malloc(void **p, size_t nbytes, const char *what, char *err, size_t errlen);

/* ---- convolution (no bias), torch.nn.Conv2d(ic, oc, k, stride, pad, bias=False) ---------- */
typedef struct {
    const char *name;
    char what[GPU_WHAT_LEN];
    gpu_mode mode;
    int need_dinp;                  /* backward computes the input gradient */
    int n, ic, ih, iw, oc, oh, ow, k, stride, pad;
    cudnnTensorDescriptor_t x_desc, y_desc;
    cudnnFilterDescriptor_t w_desc;
    /* One convolution descriptor per direction: each carries the math type of its algorithm. */
    cudnnConvolutionDescriptor_t fwd_desc, bwd_data_desc, bwd_filter_desc;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws; /* workspace bytes of the chosen algorithms */
    int tuned;
    int nhwc;                       /* x, y NHWC and the filter (O, kh, kw, I) (c->nhwc at init) */
    void *dwa;                      /* training with GPU_BF16 or NHWC: the weight gradient cuDNN
                                       writes (its dw type is x's, its layout the filter's), widened
                                       (bf16) and transposed (NHWC) into the fp32 dweight */
} gpu_conv_layer;

/* Descriptors of a convolution of a (n, ic, ih, iw) input; oh = (ih + 2 pad − k) / stride + 1
 * (floor, as PyTorch; checked against cudnnGetConvolution2dForwardOutputDim). Cross-correlation,
 * fp32 compute; math type CUDNN_FMA_MATH for GPU_FP32 (no TF32), CUDNN_DEFAULT_MATH for GPU_TF32
 * (TF32 tensor cores allowed; cuDNN "cudnnMathType_t"). GPU_BF16: x, w, y (and dx, dw) are
 * CUDNN_DATA_BFLOAT16 NCHW with compute type CUDNN_DATA_FLOAT — cuDNN's PSEUDO_BFLOAT16_CONFIG,
 * the only bf16 configuration of cudnnConvolutionForward / BackwardData / BackwardFilter — and
 * CUDNN_TENSOR_OP_MATH (bf16 tensor cores, fp32 accumulation), with the layer's own bf16 weight
 * gradient buffer dwa for training. c->nhwc: x, y and the filter CUDNN_TENSOR_NHWC (the filter's
 * dims still (oc, ic, k, k), its memory (oc, k, k, ic)), and a dwa in that layout for training. mode GPU_TRAIN also prepares the backward directions;
 * need_dinp = 0 skips backward data (the network's first convolution). */
int gpu_conv_init(gpu_conv_layer *l, gpu_ctx *c, const char *name, int n, int ic, int ih, int iw, int oc, int k,
                  int stride, int pad, gpu_mode mode, int need_dinp, char *err, size_t errlen);
/* Choose the algorithm of every direction l needs: cudnnFind*AlgorithmEx timed on the given
 * buffers (x (n, ic, ih, iw), w (oc, ic, k, k), y (n, oc, oh, ow) in the activation type; dx like
 * x and dw like w (fp32) for training, dx may be NULL without need_dinp; with GPU_BF16 or NHWC the
 * backward filter is tuned on the layer's dwa and dw is not written; with NHWC, x, y, dx and w in
 * that layout), the fastest deterministic
 * one that succeeds within the workspace cap (the fastest non-deterministic one only when no
 * deterministic one does; with c->nondet the fastest of either); cudnnGet*Algorithm_v7 (heuristics) when Find fails. A heuristic row is
 * a claim, not a measurement, so each is run once on these buffers, in order, and the first that
 * runs is taken (error naming the direction and every row tried when none does). The buffers are
 * those the layer will run on (cuDNN may pick kernels by pointer alignment); y, dx and dw are
 * overwritten with garbage. Reserves the workspace (gpu_ctx_reserve). Shapes already tuned on c
 * reuse the choice. */
int gpu_conv_tune(gpu_conv_layer *l, gpu_ctx *c, const void *x, const void *w, void *y, void *dx, float *dw,
                  char *err, size_t errlen);
/* DSGD_CUDNN_ALGO in the environment, read by gpu_ctx_init: "find" (default, or unset) times the
 * candidates with cudnnFind*AlgorithmEx as above; "heuristic" takes cuDNN's heuristics
 * (cudnnGet*Algorithm_v7: no timing, so every process with the same GPU, cuDNN and shapes picks
 * the same algorithms — for comparisons between runs, test/gpu/run.sh), with the same rule:
 * the first deterministic one that fits the cap and the precision and runs (tried once; no
 * 1 GiB tuning workspace: only what the tried algorithms need). Another value is an error of
 * gpu_ctx_init. */
#define GPU_ALGO_ENV "DSGD_CUDNN_ALGO"
/* DSGD_CUDNN_DETERMINISTIC (issue 23, N11), read by gpu_ctx_init: "1" deterministic algorithms
 * first, as above; "0" the first usable row whatever its determinism (Find's fastest, as
 * PyTorch's cudnn.deterministic = False). Unset or empty: 0 with "find", 1 with "heuristic".
 * Another value is an error of gpu_ctx_init. */
#define GPU_DET_ENV "DSGD_CUDNN_DETERMINISTIC"

/* 1 if direction dir (0 forward, 1 backward data, 2 backward filter) of l runs a transform
 * algorithm — Winograd or FFT — whose fp32 rounding error is larger than a direct or GEMM
 * convolution's (the transforms' intermediate values are larger than the result: the test
 * tolerances widen for them, test/gpu/test_gpu_ops.c). 0 for a direction l does not have. */
int gpu_conv_transform(const gpu_conv_layer *l, int dir);
/* The chosen algorithms, e.g. "fwd IMPLICIT_PRECOMP_GEMM/fma 0 B, bwd-data ALGO_1/fma 0 B, ...". */
void gpu_conv_algos(const gpu_conv_layer *l, char *buf, size_t n);
/* out (n, oc, oh, ow) = conv(inp (n, ic, ih, iw), weight (oc, ic, k, k)); cudnnConvolutionForward.
 * out, inp, weight: activation type, in l's layout (NHWC: weight (oc, k, k, ic)). */
void gpu_conv_forward(gpu_conv_layer *l, gpu_ctx *c, void *out, const void *inp, const void *weight);
/* dinp (n, ic, ih, iw) (skipped when NULL or !need_dinp; activation type) and dweight (oc, ic,
 * k, k) (fp32), both overwritten (beta = 0), from dout (n, oc, oh, ow), the forward input inp
 * and weight (activation type): cudnnConvolutionBackwardFilter, cudnnConvolutionBackwardData.
 * GPU_BF16: the filter gradient is computed in bf16 (into dwa) and widened into dweight; NHWC: it
 * is computed (oc, k, k, ic) into dwa and transposed into dweight, which is (oc, ic, k, k) fp32 in
 * either layout. weight: as for gpu_conv_forward. Unlike
 * conv_backward on the CPU, the weight is an argument (the CPU layer keeps its reordered copy). */
void gpu_conv_backward(gpu_conv_layer *l, gpu_ctx *c, void *dinp, float *dweight, const void *dout,
                       const void *inp, const void *weight);
void gpu_conv_free(gpu_conv_layer *l);

/* ---- GPU_BF16 fallback for cuDNN's legacy BN and pooling -------------------------------------
 * cuDNN's legacy (cudnn_ops) batch normalisation and pooling may refuse CUDNN_DATA_BFLOAT16
 * tensors (a cuDNN build or GPU without those kernels: CUDNN_STATUS_NOT_SUPPORTED at the first
 * call). In a GPU_BF16 context the first gpu_bn_init / gpu_pool_init (max) runs each once on a
 * small bf16 tensor in the context's layout; where cuDNN refuses — or DSGD_BF16_FALLBACK in the
 * environment asks for it: "bn", "pool", or "1" / "all" for both — the layer is built with fp32 tensors instead and sets
 * io32: its x, y, dx, dy (and BN's out for the ReLU mask) are then fp32, and the caller casts
 * around it (cuda/model.cu: bf16 -> fp32 before, fp32 -> bf16 after, through fp32 scratch). The
 * arithmetic is the same — cuDNN computes BN in fp32 for bf16 data too, the result is rounded to
 * bf16 once, and max pooling selects — so the fallback gives the same values, at the cost of the
 * casts and 4 activation-sized fp32 buffers per network. Returns the fallback's reason for kind
 * "bn" or "pool" after the probe ("" when not used). */
const char *gpu_bf16_fallback(const gpu_ctx *c, const char *kind);

/* ---- batch normalisation, torch.nn.BatchNorm2d (eps 1e-5, momentum 0.1), optional ReLU --- */
typedef struct {
    char what[GPU_WHAT_LEN];
    gpu_mode mode;
    int relu;                       /* ReLU after the normalisation (our kernel, in place) */
    int n, c, h, w;
    size_t count;                   /* n*c*h*w */
    double eps, momentum;
    int nhwc;                       /* data NHWC (c->nhwc at init) */
    cudnnTensorDescriptor_t x_desc, stat_desc; /* data (n, c, h, w); (1, c, 1, 1) derived */
    float *save_mean, *save_inv_var; /* (c) of the last training forward, for the backward */
    int io32;                       /* GPU_BF16 fallback: x, y, dx, dy are fp32 (see gpu_bf16_fallback) */
    /* fused (c->bn_fused, training, relu, NHWC): BN and ReLU in one cuDNN call each way,
     * cudnnBatchNormalizationForwardTrainingEx / BackwardEx with CUDNN_BATCHNORM_OPS_BN_ACTIVATION
     * and CUDNN_BATCHNORM_SPATIAL_PERSISTENT (the mode of cuDNN's fused NHWC kernels), a ReLU
     * activation descriptor, the shared workspace (reserved at init: the larger of the two calls'
     * sizes) and the layer's own reserve space, written by the forward and read by the backward.
     * Not probed as the bf16 fallback is: a cuDNN that refuses the fused call for these tensors
     * stops the first step (CUDNN_CHECK, naming the layer and the status). */
    int fused;
    /* add (built with relu = GPU_BN_ADD_RELU, c->bn_add, training, NHWC, bf16 without the
     * fallback): fused with CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, out = relu(BN(inp) + z), through
     * gpu_bn_add_forward / gpu_bn_add_backward only (cuDNN documents the op for NHWC half / bf16
     * tensors). Otherwise a layer built with GPU_BN_ADD_RELU is a plain BN (relu 0) and the caller
     * adds and applies the ReLU itself (gpu_add_layer). */
    int add;
    cudnnActivationDescriptor_t act_desc;
    void *reserve;
    size_t reserve_nbytes, ws_need;
    const float *beta_fwd;          /* β of the last forward: the fused backward needs it */
} gpu_bn_layer;

/* BN over a (n, c, h, w) tensor, CUDNN_BATCHNORM_SPATIAL. GPU_TRAIN: batch statistics (and
 * backward); GPU_INFER: running statistics. GPU_BF16: x, y, dy, dx are CUDNN_DATA_BFLOAT16 while
 * γ, β, the running and saved statistics and dγ, dβ stay fp32 (cudnnDeriveBNTensorDescriptor
 * makes their descriptor float for every x but double; cuDNN's PSEUDO_BFLOAT16_CONFIG, in which
 * the statistics and the normalisation are computed in fp32). */
#define GPU_BN_ADD_RELU 2 /* gpu_bn_init's relu: a residual add, then the ReLU, fused where it can be (gpu_bn_layer.add) */
int gpu_bn_init(gpu_bn_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu, gpu_mode mode,
                char *err, size_t errlen);
/* out = [relu](γ (inp − µ) / sqrt(σ² + eps) + β); out must not alias inp. GPU_TRAIN:
 * cudnnBatchNormalizationForwardTraining with µ, σ² of the batch (biased σ² normalises), the
 * running statistics updated as running = 0.9 running + 0.1 batch with the UNBIASED variance
 * (cuDNN's exponentialAverageFactor = momentum; PyTorch's rule), µ and 1/sqrt(σ² + eps) saved in
 * the layer. GPU_INFER: cudnnBatchNormalizationForwardInference with running_mean, running_var
 * (not changed). gamma, beta, running_*: (C). */
void gpu_bn_forward(gpu_bn_layer *l, gpu_ctx *c, void *out, const void *inp, const float *gamma,
                    const float *beta, float *running_mean, float *running_var);
/* dinp, dgamma, dbeta (C) overwritten (cudnnBatchNormalizationBackward, beta factors 0), from
 * dout, the forward input inp and the saved statistics of the last gpu_bn_forward. With relu,
 * dout is first masked IN PLACE by the forward output out (dout := dout · [out > 0]); out is
 * ignored without relu. dinp must not alias dout or inp. l->fused: one
 * cudnnBatchNormalizationBackwardEx, which applies the ReLU's mask (from out) itself and leaves
 * dout as it is, with the reserve space and β of the last forward. */
void gpu_bn_backward(gpu_bn_layer *l, gpu_ctx *c, void *dinp, float *dgamma, float *dbeta, void *dout,
                     const void *inp, const void *out, const float *gamma);
/* l->add only. out = relu(BN(inp) + z) in one cudnnBatchNormalizationForwardTrainingEx
 * (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION; statistics as gpu_bn_forward; z: the residual, the
 * block's shortcut; the sum is rounded to bf16 once, not BN's output first as gpu_bn_forward then
 * gpu_add_forward do). out must not alias inp or z. */
void gpu_bn_add_forward(gpu_bn_layer *l, gpu_ctx *c, void *out, const void *inp, const void *z, const float *gamma,
                        const float *beta, float *running_mean, float *running_var);
/* l->add only, after gpu_bn_add_forward: one cudnnBatchNormalizationBackwardEx. dz := dout · [out > 0]
 * (the gradient of the residual, exact), dinp := BN'(dz), dgamma, dbeta overwritten; dout as it is.
 * dinp, dz, dout, inp: distinct buffers. */
void gpu_bn_add_backward(gpu_bn_layer *l, gpu_ctx *c, void *dinp, void *dz, float *dgamma, float *dbeta,
                         const void *dout, const void *inp, const void *out, const float *gamma);
void gpu_bn_free(gpu_bn_layer *l);

/* ---- ReLU --------------------------------------------------------------------------------- */
typedef struct {
    char what[GPU_WHAT_LEN];
    gpu_mode mode;
    size_t count;
} gpu_relu_layer;

int gpu_relu_init(gpu_relu_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, gpu_mode mode,
                  char *err, size_t errlen);
/* out = max(inp, 0) (NaN stays NaN); out == inp allowed. */
void gpu_relu_forward(gpu_relu_layer *l, gpu_ctx *c, void *out, const void *inp);
/* dinp = dout · [out > 0]; dinp == dout allowed. out: the forward output. */
void gpu_relu_backward(gpu_relu_layer *l, gpu_ctx *c, void *dinp, const void *dout, const void *out);

/* ---- elementwise add, optionally followed by ReLU ----------------------------------------- */
typedef struct {
    char what[GPU_WHAT_LEN];
    gpu_mode mode;
    int relu;
    size_t count;
} gpu_add_layer;

int gpu_add_init(gpu_add_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu,
                 gpu_mode mode, char *err, size_t errlen);
/* out = [relu](a + b), all (n, c, h, w); out may be a or b (in place). The residual connection
 * (relu) and the sum of two gradients reaching a block input (dx += other: out == a, no relu).
 * GPU_BF16: the sum is formed in fp32 and rounded once. */
void gpu_add_forward(gpu_add_layer *l, gpu_ctx *c, void *out, const void *a, const void *b);
/* With relu: dsum = dout · [out > 0] (dsum == dout allowed): the gradient of a and of b. */
void gpu_add_backward(gpu_add_layer *l, gpu_ctx *c, void *dsum, const void *dout, const void *out);

/* ---- pooling: max k x k (stride, pad; padding excluded) or global average ---------------- */
typedef struct {
    char what[GPU_WHAT_LEN];
    gpu_mode mode;
    int max;                        /* 1: max pooling (cuDNN), 0: global average (our kernels) */
    int nhwc;                       /* input (and max pooling's output) NHWC (c->nhwc at init) */
    int n, c, ih, iw, oh, ow;
    cudnnPoolingDescriptor_t desc;
    cudnnTensorDescriptor_t x_desc, y_desc;
    int io32;                       /* GPU_BF16 fallback (max pooling): x, y, dx, dy are fp32 */
} gpu_pool_layer;

/* Max pooling (max = 1; k, stride, pad as torch.nn.MaxPool2d, floor mode;
 * CUDNN_POOLING_MAX_DETERMINISTIC, NaN propagated) or global average pooling (max = 0; k, stride,
 * pad ignored; output (n, c, 1, 1), which is the (n, c) row-major input of the fc layer). */
int gpu_pool_init(gpu_pool_layer *l, gpu_ctx *c, const char *name, int n, int ch, int ih, int iw, int max, int k,
                  int stride, int pad, gpu_mode mode, char *err, size_t errlen);
/* out (n, c, oh, ow) from inp (n, c, ih, iw). Average: one warp per (n, c) plane, fixed order,
 * fp32 sums; NHWC: one thread per (n, c), the h·w values in order (adjacent threads read adjacent
 * channels), output (n, c) as in NCHW. Max pooling in bf16: cuDNN with CUDNN_DATA_BFLOAT16 descriptors (a selection: exact). */
void gpu_pool_forward(gpu_pool_layer *l, gpu_ctx *c, void *out, const void *inp);
/* dinp (n, c, ih, iw) overwritten from dout (n, c, oh, ow). Max pooling needs the forward input
 * inp and output out (cudnnPoolingBackward recomputes the argmax); average ignores both
 * (dinp = dout / (ih iw) broadcast). */
void gpu_pool_backward(gpu_pool_layer *l, gpu_ctx *c, void *dinp, const void *dout, const void *inp,
                       const void *out);
void gpu_pool_free(gpu_pool_layer *l);

/* ---- fully connected, torch.nn.Linear(nin, nout), cuBLAS --------------------------------- */
/* out (n, nout) = inp (n, nin) · weightᵀ (nout, nin) + bias (nout): cublasSgemm on the
 * column-major views (out ᵀ = W · inpᵀ), then a bias kernel. inp, weight: activation type; out
 * (the logits) and bias: fp32 in every precision. GPU_BF16: cublasGemmEx with A, B CUDA_R_16BF,
 * C CUDA_R_32F, CUBLAS_COMPUTE_32F (no rounding of the logits to bf16). */
void gpu_fc_forward(gpu_ctx *c, float *out, const void *inp, const void *weight, const float *bias, int n,
                    int nin, int nout);
/* dinp (n, nin) = dout · W (skipped if NULL), dweight (nout, nin) = doutᵀ · inp, dbias (nout) =
 * column sums of dout (our kernel, rows in order, fp32 sums), all overwritten, from dout (n,
 * nout). dout, inp, weight, dinp: activation type; dweight, dbias: fp32. GPU_BF16: cublasGemmEx
 * (bf16 inputs, CUBLAS_COMPUTE_32F) writes dweight in fp32 directly and dinp in bf16. */
void gpu_fc_backward(gpu_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                     const void *weight, int n, int nin, int nout);

/* ---- softmax cross-entropy, torch.nn.functional.cross_entropy (mean) -------------------- */
/* probs (n, k) = softmax(logits (n, k)) with the row maximum subtracted; losses (n) =
 * logsumexp − logit[y] (NaN for a label outside [0, k)); *loss (one device float) = the mean of
 * losses, summed in a fixed order (deterministic). y: (n) device labels. One warp per row. The
 * CPU's softmax_xent_forward returns the mean; here it stays on the device until copied. */
void gpu_softmax_xent_forward(gpu_ctx *c, float *probs, float *losses, float *loss, const float *logits,
                              const int *y, int n, int k);
/* dlogits (n, k) = (probs − onehot(y)) / n: the gradient of the mean loss, computed in fp32 and
 * stored in the activation type (it is the fc layer's dout). */
void gpu_softmax_xent_backward(gpu_ctx *c, void *dlogits, const float *probs, const int *y, int n, int k);

/* ---- precision casts (GPU_BF16) ------------------------------------------------------------ */
/* dst (n bf16) = src (n fp32) rounded to nearest even (__float2bfloat16_rn; NaN stays NaN, values
 * beyond bf16's range become ±Inf): the input minibatch and the bf16 weight copies. */
void gpu_f32_to_bf16(gpu_ctx *c, void *dst, const float *src, size_t n);
/* dst (n fp32) = src (n bf16), exact. */
void gpu_bf16_to_f32(gpu_ctx *c, float *dst, const void *src, size_t n);
/* One fp32 -> bf16 cast of gpu_f32_to_bf16_segs: dst[0..n) = src[0..n) rounded as above; with
 * ch > 0, transposed as gpu_to_nhwc does: src (n / (ch·hw), ch, hw) to dst (n / (ch·hw), hw, ch). */
typedef struct {
    const float *src;
    void *dst;
    size_t n;
    int ch, hw;
} gpu_cast_seg;
/* Every segment of segs (a device array of nseg, nseg <= 65535; max_n >= the largest n) cast as
 * gpu_f32_to_bf16 casts it, in one launch (the bf16 weight copies of a step: one launch instead of
 * one per tensor, DSGD_GPU_CASTS=one). The same bits as nseg gpu_f32_to_bf16 calls. */
void gpu_f32_to_bf16_segs(gpu_ctx *c, const gpu_cast_seg *segs, int nseg, size_t max_n);

/* ---- layout NHWC (c->nhwc) ---------------------------------------------------------------- */
/* dst (rows, hw, ch) in the activation type = src (rows, ch, hw) fp32, transposed (GPU_BF16:
 * rounded to bf16 as gpu_f32_to_bf16; else copied exactly). The input minibatch (rows = n, hw =
 * h·w) and the KRSC copies of the conv weights (rows = O, ch = I, hw = kh·kw). Any c->nhwc. */
void gpu_to_nhwc(gpu_ctx *c, void *dst, const float *src, int rows, int ch, int hw);
/* dst (rows, ch, hw) fp32 = src (rows, hw, ch) in the activation type, transposed (exact): a KRSC
 * weight gradient into the flat gradient vector. */
void gpu_from_nhwc_f32(gpu_ctx *c, float *dst, const void *src, int rows, int ch, int hw);

/* ---- SGD update (src/optim/sgd.h, the same formula, fp32) --------------------------------- */
/* For each of the n elements: g = grad + λθ; v = µv + g; θ −= α (Nesterov ? g + µv : v).
 * *bad (one device int) := 1 if any updated θ is NaN or ±Inf, else 0. theta, grad, v: (n). */
void gpu_sgd_update(gpu_ctx *c, float *theta, const float *grad, float *v, size_t n, float alpha, float mu,
                    float lambda, int nesterov, int *bad);

#ifdef __cplusplus
}
#endif

#endif
