/* layers.cu — ResNet-18 layers on cuDNN 9, cuBLAS and our kernels; see layers.h for the contract.
 *
 * Library documents followed: cuDNN 9 API reference, cudnn_cnn ("cudnnFindConvolution*
 * AlgorithmEx", "cudnnGetConvolution*Algorithm_v7", "cudnnConvolutionForward / BackwardData /
 * BackwardFilter", "cudnnSetConvolutionMathType") and cudnn_ops ("cudnnBatchNormalization
 * ForwardTraining / ForwardInference / Backward", "cudnnDeriveBNTensorDescriptor",
 * "cudnnPoolingForward / Backward"); cuBLAS "cublasSgemm", "cublasSetMathMode",
 * "cublasSetWorkspace", "cublasGemmEx" (bf16). Semantics follow torch.nn (Conv2d, BatchNorm2d,
 * ReLU, MaxPool2d, AdaptiveAvgPool2d, Linear, cross_entropy) and src/optim/sgd.c, as the CPU
 * layers do; GPU_BF16 follows PyTorch's autocast (bf16 activations and weight copies, fp32
 * accumulation, fp32 BN statistics, loss and master weights).
 *
 * Kernels: 256 threads, grid-stride loops over at most 8 blocks per multiprocessor. Elementwise
 * kernels are templates on the storage type S of activations — float, or uint16_t holding bf16
 * bits (ldf widens exactly, stf rounds to nearest even with __float2bfloat16_rn) — compute in
 * float, and move 16 bytes per access (4 floats or 8 bf16) when every pointer is 16-byte aligned
 * (cudaMalloc'd buffers are 256-byte aligned; views into the flat parameter vector may not be),
 * with a scalar tail. Reductions (average pooling, softmax rows, the mean loss, bias gradients)
 * sum in a fixed order, so results do not depend on scheduling. */
#include "layers.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

#include "common.h"

#define THREADS 256
#define WARPS_PER_BLOCK (THREADS / 32)

/* Blocks for n work items: enough to cover them, at most 8 per multiprocessor (grid-stride). */
static int grid_for(const gpu_ctx *c, size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    const size_t cap = (size_t)(c->n_sm > 0 ? c->n_sm : 1) * 8;
    if (b > cap) b = cap;
    return b < 1 ? 1 : (int)b;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static int is_bf16(const gpu_ctx *c) { return c->prec == GPU_BF16; }

/* cuDNN's type of activations (and of convolution weights) in c. */
static cudnnDataType_t act_dnn_type(const gpu_ctx *c) { return is_bf16(c) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

/* ---- storage types: float, or bf16 bits in a uint16_t ------------------------------------- */

__device__ __forceinline__ float ldf(float x) { return x; }
/* bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits. */
__device__ __forceinline__ float ldf(uint16_t b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ void stf(float &d, float v) { d = v; }
/* fp32 -> bf16, round to nearest even (NaN stays NaN); cuda_bf16.h "__float2bfloat16_rn". */
__device__ __forceinline__ void stf(uint16_t &d, float v) { d = __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

/* 16 bytes of S: one vector load or store. */
template <typename S> struct alignas(16) pack16 {
    S v[16 / sizeof(S)];
};

/* ---- context ------------------------------------------------------------------------------ */

int gpu_malloc(void **p, size_t nbytes, const char *what, char *err, size_t errlen) {
    *p = NULL;
    if (nbytes == 0) nbytes = 256; /* a valid pointer to nothing */
    cudaError_t e = cudaMalloc(p, nbytes);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it, so the next kernel check does not see it */
        *p = NULL;
        seterr(err, errlen, "out of GPU memory: cudaMalloc of %zu bytes (%.2f GiB) for %s: %s", nbytes,
               (double)nbytes / (1 << 30), what, cudaGetErrorString(e));
        return -1;
    }
    e = cudaMemset(*p, 0, nbytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "cudaMemset of %zu bytes for %s: %s", nbytes, what, cudaGetErrorString(e));
        cudaFree(*p);
        *p = NULL;
        return -1;
    }
    return 0;
}

int gpu_ctx_init(gpu_ctx *c, gpu_precision prec, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    const char *where = "the GPU context";
    if (prec != GPU_FP32 && prec != GPU_TF32 && prec != GPU_BF16) {
        seterr(err, errlen, "unknown GPU precision %d", (int)prec);
        return -1;
    }
    c->prec = prec;
    c->act_bytes = prec == GPU_BF16 ? 2 : 4;
    const char *algo = getenv(GPU_ALGO_ENV);
    if (algo && *algo && strcmp(algo, "find") != 0 && strcmp(algo, "heuristic") != 0) {
        seterr(err, errlen, "%s=%s: expected \"find\" (time the candidates, the default) or \"heuristic\" (cuDNN's heuristics, "
               "no timing)", GPU_ALGO_ENV, algo);
        return -1;
    }
    c->heuristic = algo && strcmp(algo, "heuristic") == 0;
    CUDA_TRY(cudaGetDevice(&c->dev), where);
    CUDA_TRY(cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, c->dev), where);
    if (prec == GPU_BF16) { /* bf16 tensor cores, and cuDNN's bf16 kernels, start with Ampere */
        int major = 0, minor = 0;
        CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c->dev), where);
        CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, c->dev), where);
        if (major < 8) {
            seterr(err, errlen,
                   "precision bf16 needs a GPU of compute capability 8.0 or later (Ampere); GPU %d is sm_%d%d: use fp32 or tf32",
                   c->dev, major, minor);
            return -1;
        }
    }
    CUDA_TRY(cudaStreamCreate(&c->stream), where);
    CUDNN_TRY(cudnnCreate(&c->dnn), where);
    CUDNN_TRY(cudnnSetStream(c->dnn, c->stream), where);
    CUBLAS_TRY(cublasCreate(&c->blas), where);
    /* cublasSetStream resets the workspace to cuBLAS's own pool: set the stream first. */
    CUBLAS_TRY(cublasSetStream(c->blas, c->stream), where);
    CUBLAS_TRY(cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST), where);
    /* GPU_BF16 calls cublasGemmEx with CUBLAS_COMPUTE_32F, whose bf16 inputs use tensor cores under
     * the default math mode. */
    CUBLAS_TRY(cublasSetMathMode(c->blas, prec == GPU_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), where);
    if (gpu_malloc(&c->blas_ws, GPU_BLAS_WS_NBYTES, "the cuBLAS workspace", err, errlen)) return -1;
    CUBLAS_TRY(cublasSetWorkspace(c->blas, c->blas_ws, GPU_BLAS_WS_NBYTES), where);
    return 0;
}

void gpu_ctx_reserve(gpu_ctx *c, size_t nbytes) {
    if (nbytes > c->ws_need) c->ws_need = nbytes;
}

int gpu_ctx_commit(gpu_ctx *c, char *err, size_t errlen) {
    if (c->find_ws) {
        CUDA_TRY(cudaFree(c->find_ws), "the convolution tuning workspace");
        c->find_ws = NULL;
    }
    c->find_ws_nbytes = 0;
    c->find_ready = 0;
    if (c->ws_need > c->ws_nbytes) {
        if (c->ws) CUDA_TRY(cudaFree(c->ws), "the shared workspace");
        c->ws = NULL;
        c->ws_nbytes = 0;
        if (gpu_malloc(&c->ws, c->ws_need, "the shared cuDNN workspace", err, errlen)) return -1;
        c->ws_nbytes = c->ws_need;
    }
    return 0;
}

void gpu_ctx_sync(gpu_ctx *c, const char *where) { CUDA_CHECK(cudaStreamSynchronize(c->stream), where); }

void gpu_ctx_free(gpu_ctx *c) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->blas) cublasDestroy(c->blas);
    if (c->dnn) cudnnDestroy(c->dnn);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaFree(c->blas_ws);
    cudaFree(c->ws);
    cudaFree(c->find_ws);
    memset(c, 0, sizeof *c);
}

/* ---- elementwise kernels ------------------------------------------------------------------ */

/* max(x, 0) with NaN kept (as oneDNN's and PyTorch's ReLU), so divergence stays visible. */
__device__ __forceinline__ float relu1(float x) { return x > 0.0f ? x : (x != x ? x : 0.0f); }

/* dout where out > 0, else 0. */
__device__ __forceinline__ float mask1(float d, float o) { return o > 0.0f ? d : 0.0f; }

/* out = relu(inp); out may alias inp (hence no __restrict__). vec: all pointers 16-byte aligned. */
template <typename S> static __global__ void relu_forward_kernel(S *out, const S *inp, size_t n, int vec) {
    constexpr int V = 16 / sizeof(S);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t nv = n / V;
        for (size_t i = i0; i < nv; i += stride) {
            pack16<S> p = reinterpret_cast<const pack16<S> *>(inp)[i];
#pragma unroll
            for (int j = 0; j < V; j++) stf(p.v[j], relu1(ldf(p.v[j])));
            reinterpret_cast<pack16<S> *>(out)[i] = p;
        }
        done = nv * V;
    }
    for (size_t i = done + i0; i < n; i += stride) stf(out[i], relu1(ldf(inp[i])));
}

/* dinp = dout · [out > 0]; dinp may alias dout. */
template <typename S>
static __global__ void relu_backward_kernel(S *dinp, const S *dout, const S *out, size_t n, int vec) {
    constexpr int V = 16 / sizeof(S);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t nv = n / V;
        for (size_t i = i0; i < nv; i += stride) {
            pack16<S> d = reinterpret_cast<const pack16<S> *>(dout)[i];
            const pack16<S> o = reinterpret_cast<const pack16<S> *>(out)[i];
#pragma unroll
            for (int j = 0; j < V; j++) stf(d.v[j], mask1(ldf(d.v[j]), ldf(o.v[j])));
            reinterpret_cast<pack16<S> *>(dinp)[i] = d;
        }
        done = nv * V;
    }
    for (size_t i = done + i0; i < n; i += stride) stf(dinp[i], mask1(ldf(dout[i]), ldf(out[i])));
}

/* out = [relu](a + b), the sum in fp32; out may alias a or b. */
template <typename S>
static __global__ void add_kernel(S *out, const S *a, const S *b, size_t n, int relu, int vec) {
    constexpr int V = 16 / sizeof(S);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t nv = n / V;
        for (size_t i = i0; i < nv; i += stride) {
            pack16<S> x = reinterpret_cast<const pack16<S> *>(a)[i];
            const pack16<S> y = reinterpret_cast<const pack16<S> *>(b)[i];
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float s = ldf(x.v[j]) + ldf(y.v[j]);
                stf(x.v[j], relu ? relu1(s) : s);
            }
            reinterpret_cast<pack16<S> *>(out)[i] = x;
        }
        done = nv * V;
    }
    for (size_t i = done + i0; i < n; i += stride) {
        const float s = ldf(a[i]) + ldf(b[i]);
        stf(out[i], relu ? relu1(s) : s);
    }
}

/* Elements per thread of a kernel call on S: 16 / sizeof(S) when vectorised, else 1. */
static size_t work_items(size_t n, int vec, size_t act_bytes) { return vec ? n / (16 / act_bytes) : n; }

/* bf: the buffers hold bf16 (the context's activation type), else fp32 (a BN layer's io32). */
static void launch_relu_forward(gpu_ctx *c, void *out, const void *inp, size_t n, const char *what, int bf) {
    const int vec = aligned16(out) && aligned16(inp);
    const int blocks = grid_for(c, work_items(n, vec, bf ? 2 : 4));
    if (bf)
        relu_forward_kernel<<<blocks, THREADS, 0, c->stream>>>((uint16_t *)out, (const uint16_t *)inp, n, vec);
    else
        relu_forward_kernel<<<blocks, THREADS, 0, c->stream>>>((float *)out, (const float *)inp, n, vec);
    CUDA_CHECK(cudaGetLastError(), what);
}

static void launch_relu_backward(gpu_ctx *c, void *dinp, const void *dout, const void *out, size_t n,
                                 const char *what, int bf) {
    const int vec = aligned16(dinp) && aligned16(dout) && aligned16(out);
    const int blocks = grid_for(c, work_items(n, vec, bf ? 2 : 4));
    if (bf)
        relu_backward_kernel<<<blocks, THREADS, 0, c->stream>>>((uint16_t *)dinp, (const uint16_t *)dout,
                                                                (const uint16_t *)out, n, vec);
    else
        relu_backward_kernel<<<blocks, THREADS, 0, c->stream>>>((float *)dinp, (const float *)dout,
                                                                (const float *)out, n, vec);
    CUDA_CHECK(cudaGetLastError(), what);
}

/* ---- precision casts ---------------------------------------------------------------------- */

/* dst = src converted element by element, 8 per vector step (16 bytes of bf16, 32 of fp32). */
template <typename D, typename S>
static __global__ void cast_kernel(D *__restrict__ dst, const S *__restrict__ src, size_t n, int vec) {
    struct alignas(16) PD {
        D v[8];
    };
    struct alignas(16) PS {
        S v[8];
    };
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t nv = n / 8;
        for (size_t i = i0; i < nv; i += stride) {
            const PS x = reinterpret_cast<const PS *>(src)[i];
            PD y;
#pragma unroll
            for (int j = 0; j < 8; j++) stf(y.v[j], ldf(x.v[j]));
            reinterpret_cast<PD *>(dst)[i] = y;
        }
        done = nv * 8;
    }
    for (size_t i = done + i0; i < n; i += stride) stf(dst[i], ldf(src[i]));
}

void gpu_f32_to_bf16(gpu_ctx *c, void *dst, const float *src, size_t n) {
    if (n == 0) return;
    const int vec = aligned16(dst) && aligned16(src);
    cast_kernel<<<grid_for(c, vec ? n / 8 : n), THREADS, 0, c->stream>>>((uint16_t *)dst, src, n, vec);
    CUDA_CHECK(cudaGetLastError(), "the fp32 -> bf16 cast");
}

void gpu_bf16_to_f32(gpu_ctx *c, float *dst, const void *src, size_t n) {
    if (n == 0) return;
    const int vec = aligned16(dst) && aligned16(src);
    cast_kernel<<<grid_for(c, vec ? n / 8 : n), THREADS, 0, c->stream>>>(dst, (const uint16_t *)src, n, vec);
    CUDA_CHECK(cudaGetLastError(), "the bf16 -> fp32 cast");
}

/* ---- convolution -------------------------------------------------------------------------- */

static const char *fwd_algo_name(int a) {
    static const char *names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                  "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    return a >= 0 && a < (int)(sizeof names / sizeof names[0]) ? names[a] : "?";
}

static const char *bwd_data_algo_name(int a) {
    static const char *names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    return a >= 0 && a < (int)(sizeof names / sizeof names[0]) ? names[a] : "?";
}

static const char *bwd_filter_algo_name(int a) {
    static const char *names[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    return a >= 0 && a < (int)(sizeof names / sizeof names[0]) ? names[a] : "?";
}

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conversion";
    case CUDNN_FMA_MATH: return "fma";
    }
    return "?";
}

/* The math type a direction's descriptor starts with (and keeps, for GPU_FP32). GPU_BF16:
 * CUDNN_TENSOR_OP_MATH, as PyTorch and Paddle set for bf16 convolutions (cudnnFind may still
 * report another math type for an algorithm; conv_choose then sets that one). */
static cudnnMathType_t base_math(const gpu_ctx *c) {
    return c->prec == GPU_TF32 ? CUDNN_DEFAULT_MATH : c->prec == GPU_BF16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

static int make_conv_desc(cudnnConvolutionDescriptor_t *d, const gpu_conv_layer *l, const gpu_ctx *c, char *err,
                          size_t errlen) {
    CUDNN_TRY(cudnnCreateConvolutionDescriptor(d), l->what);
    /* Compute type float in every precision: bf16 data with float compute is cuDNN's
     * PSEUDO_BFLOAT16_CONFIG (there is no bf16 compute type). */
    CUDNN_TRY(cudnnSetConvolution2dDescriptor(*d, l->pad, l->pad, l->stride, l->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT),
              l->what);
    CUDNN_TRY(cudnnSetConvolutionMathType(*d, base_math(c)), l->what);
    return 0;
}

int gpu_conv_init(gpu_conv_layer *l, gpu_ctx *c, const char *name, int n, int ic, int ih, int iw, int oc, int k,
                  int stride, int pad, gpu_mode mode, int need_dinp, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->need_dinp = mode == GPU_TRAIN && need_dinp;
    l->n = n, l->ic = ic, l->ih = ih, l->iw = iw, l->oc = oc, l->k = k, l->stride = stride, l->pad = pad;
    l->oh = stride > 0 ? (ih + 2 * pad - k) / stride + 1 : 0;
    l->ow = stride > 0 ? (iw + 2 * pad - k) / stride + 1 : 0;
    snprintf(l->what, sizeof l->what, "layer %s (conv %dx%d/%d pad %d, (%d, %d, %d, %d) -> (%d, %d, %d, %d))", name, k,
             k, stride, pad, n, ic, ih, iw, n, oc, l->oh, l->ow);
    if (n < 1 || ic < 1 || oc < 1 || k < 1 || stride < 1 || pad < 0 || l->oh < 1 || l->ow < 1)
        return seterr(err, errlen, "%s: input too small or shape invalid", l->what), -1;

    const cudnnDataType_t dt = act_dnn_type(c); /* x, w, y and their gradients share it */
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->x_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->x_desc, CUDNN_TENSOR_NCHW, dt, n, ic, ih, iw), l->what);
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->y_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->y_desc, CUDNN_TENSOR_NCHW, dt, n, oc, l->oh, l->ow), l->what);
    CUDNN_TRY(cudnnCreateFilterDescriptor(&l->w_desc), l->what);
    CUDNN_TRY(cudnnSetFilter4dDescriptor(l->w_desc, dt, CUDNN_TENSOR_NCHW, oc, ic, k, k), l->what);
    if (mode == GPU_TRAIN && is_bf16(c) &&
        gpu_malloc(&l->dw16, (size_t)oc * ic * k * k * c->act_bytes, l->what, err, errlen))
        return -1;
    if (make_conv_desc(&l->fwd_desc, l, c, err, errlen)) return -1;
    if (mode == GPU_TRAIN) {
        if (make_conv_desc(&l->bwd_filter_desc, l, c, err, errlen)) return -1;
        if (l->need_dinp && make_conv_desc(&l->bwd_data_desc, l, c, err, errlen)) return -1;
    }
    l->fwd_math = l->bwd_data_math = l->bwd_filter_math = base_math(c);

    int on, oc2, oh, ow;
    CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(l->fwd_desc, l->x_desc, l->w_desc, &on, &oc2, &oh, &ow), l->what);
    if (on != n || oc2 != oc || oh != l->oh || ow != l->ow)
        return seterr(err, errlen, "%s: cuDNN computes an output of (%d, %d, %d, %d)", l->what, on, oc2, oh, ow), -1;
    return 0;
}

/* Smallest power-of-two alignment (bytes, at most 256) of p; 256 for NULL. */
static int align_of(const void *p) {
    if (!p) return 256;
    const uintptr_t a = (uintptr_t)p;
    int al = 1;
    while (al < 256 && !(a & (uintptr_t)al)) al <<= 1;
    return al;
}

/* The tuning workspace: GPU_CONV_WS_CAP, or a quarter of the free memory, halved until
 * cudaMalloc succeeds (none at all below 1 MiB: then only algorithms without workspace). */
static int find_prepare(gpu_ctx *c, char *err, size_t errlen) {
    if (c->find_ready) return 0;
    size_t fr = 0, tot = 0;
    CUDA_TRY(cudaMemGetInfo(&fr, &tot), "convolution tuning");
    size_t cap = GPU_CONV_WS_CAP;
    if (fr / 4 < cap) cap = fr / 4;
    cap &= ~(size_t)255;
    c->find_ws = NULL;
    while (cap >= ((size_t)1 << 20)) {
        if (cudaMalloc(&c->find_ws, cap) == cudaSuccess) break;
        cudaGetLastError();
        c->find_ws = NULL;
        cap /= 2;
    }
    if (!c->find_ws) cap = 0;
    c->find_ws_nbytes = cap;
    c->ws_cap = cap;
    c->find_ready = 1;
    return 0;
}

/* One result of cudnnFind / cudnnGet_v7, whatever the direction. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnMathType_t math;
    cudnnDeterminism_t determinism;
} perf_row;

/* The first usable row (Find sorts by time, Get_v7 by expected performance): succeeded, fits
 * the cap, and computes in the precision asked for: never fp16 down-conversion, and no tensor
 * cores (TF32) for GPU_FP32. Deterministic algorithms first (bitwise reproducible steps; the
 * others sum with atomics), any usable one when none is. */
static int pick(const perf_row *r, int n, const gpu_ctx *c) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > c->ws_cap) continue;
            if (r[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
            if (c->prec == GPU_FP32 && r[i].math == CUDNN_TENSOR_OP_MATH) continue;
            if (pass == 0 && r[i].determinism != CUDNN_DETERMINISTIC) continue;
            return i;
        }
    return -1;
}

static const gpu_algo_memo *memo_find(const gpu_ctx *c, const gpu_algo_memo *key) {
    for (int i = 0; i < c->n_memo; i++) {
        const gpu_algo_memo *m = &c->memo[i];
        if (m->dir == key->dir && m->n == key->n && m->ic == key->ic && m->ih == key->ih && m->iw == key->iw &&
            m->oc == key->oc && m->k == key->k && m->stride == key->stride && m->pad == key->pad &&
            m->align == key->align)
            return m;
    }
    return NULL;
}

static void memo_add(gpu_ctx *c, const gpu_algo_memo *m) {
    if (c->n_memo < GPU_MEMO_MAX) c->memo[c->n_memo++] = *m;
}

#define MAX_PERF 16

static void set_row(perf_row *r, int algo, cudnnStatus_t status, size_t memory, cudnnMathType_t math,
                    cudnnDeterminism_t determinism) {
    r->algo = algo;
    r->status = status;
    r->memory = memory;
    r->math = math;
    r->determinism = determinism;
}

/* Find (or Get_v7) rows for direction dir of l into r; returns the number of rows. A failing
 * Find is not an error (heuristics follow); a failing Get_v7 is. */
static int conv_perf(gpu_conv_layer *l, gpu_ctx *c, int dir, int use_find, const void *x, const void *w, void *y,
                     void *dx, void *dw, perf_row *r, char *err, size_t errlen) {
    int maxc = 0, got = 0;
    cudnnStatus_t st;
    if (dir == 0) {
        cudnnConvolutionFwdAlgoPerf_t p[MAX_PERF];
        CUDNN_TRY(cudnnGetConvolutionForwardAlgorithmMaxCount(c->dnn, &maxc), l->what);
        if (maxc > MAX_PERF) maxc = MAX_PERF;
        st = use_find ? cudnnFindConvolutionForwardAlgorithmEx(c->dnn, l->x_desc, x, l->w_desc, w, l->fwd_desc, l->y_desc,
                                                               y, maxc, &got, p, c->find_ws, c->find_ws_nbytes)
                      : cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, l->x_desc, l->w_desc, l->fwd_desc, l->y_desc,
                                                               maxc, &got, p);
        for (int i = 0; i < got && st == CUDNN_STATUS_SUCCESS; i++)
            set_row(&r[i], (int)p[i].algo, p[i].status, p[i].memory, p[i].mathType, p[i].determinism);
    } else if (dir == 1) {
        cudnnConvolutionBwdDataAlgoPerf_t p[MAX_PERF];
        CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c->dnn, &maxc), l->what);
        if (maxc > MAX_PERF) maxc = MAX_PERF;
        st = use_find ? cudnnFindConvolutionBackwardDataAlgorithmEx(c->dnn, l->w_desc, w, l->y_desc, y,
                                                                    l->bwd_data_desc, l->x_desc, dx, maxc, &got, p,
                                                                    c->find_ws, c->find_ws_nbytes)
                      : cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, l->w_desc, l->y_desc, l->bwd_data_desc,
                                                                    l->x_desc, maxc, &got, p);
        for (int i = 0; i < got && st == CUDNN_STATUS_SUCCESS; i++)
            set_row(&r[i], (int)p[i].algo, p[i].status, p[i].memory, p[i].mathType, p[i].determinism);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[MAX_PERF];
        CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c->dnn, &maxc), l->what);
        if (maxc > MAX_PERF) maxc = MAX_PERF;
        st = use_find ? cudnnFindConvolutionBackwardFilterAlgorithmEx(c->dnn, l->x_desc, x, l->y_desc, y,
                                                                      l->bwd_filter_desc, l->w_desc, dw, maxc, &got, p,
                                                                      c->find_ws, c->find_ws_nbytes)
                      : cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, l->x_desc, l->y_desc, l->bwd_filter_desc,
                                                                      l->w_desc, maxc, &got, p);
        for (int i = 0; i < got && st == CUDNN_STATUS_SUCCESS; i++)
            set_row(&r[i], (int)p[i].algo, p[i].status, p[i].memory, p[i].mathType, p[i].determinism);
    }
    /* Find runs every candidate, and some fail (out of memory in their own allocations, a launch
     * refused): cuDNN reports them in the rows, but the runtime may keep such a (non-sticky) error
     * as its last one even when Find succeeds. Clear it, so that the first kernel launch's check
     * (CUDA_CHECK(cudaGetLastError())) does not stop the first step. A sticky error (a faulted
     * context) is returned again by every later call, so nothing is hidden. */
    if (use_find) cudaGetLastError();
    if (st != CUDNN_STATUS_SUCCESS) {
        if (use_find) return 0; /* heuristics follow */
        char b[768];
        seterr(err, errlen, "%s:%d: cuDNN cudnnGetConvolution*Algorithm_v7 (direction %d) failed in %s: %s", __FILE__,
               __LINE__, dir, l->what, gpu_cudnn_status(st, b, sizeof b));
        return -1;
    }
    return got < 0 ? 0 : (got > maxc ? maxc : got);
}

/* Choose, set and size the algorithm of direction dir. */
static int conv_choose(gpu_conv_layer *l, gpu_ctx *c, int dir, const void *x, const void *w, void *y, void *dx,
                       void *dw, char *err, size_t errlen) {
    static const char *dir_name[3] = {"forward", "backward data", "backward filter"};
    gpu_algo_memo key;
    memset(&key, 0, sizeof key);
    key.dir = dir, key.n = l->n, key.ic = l->ic, key.ih = l->ih, key.iw = l->iw, key.oc = l->oc, key.k = l->k;
    key.stride = l->stride, key.pad = l->pad;
    key.align = align_of(x);
    const void *ptrs[4] = {w, y, dir == 1 ? dx : NULL, dir == 2 ? dw : NULL};
    for (int i = 0; i < 4; i++)
        if (align_of(ptrs[i]) < key.align) key.align = align_of(ptrs[i]);

    const gpu_algo_memo *m = memo_find(c, &key);
    if (m) {
        key.algo = m->algo;
        key.math = m->math;
    } else {
        perf_row r[MAX_PERF];
        int n = c->heuristic ? 0 : conv_perf(l, c, dir, 1, x, w, y, dx, dw, r, err, errlen);
        if (n < 0) return -1;
        int i = c->heuristic ? -1 : pick(r, n, c);
        if (i < 0) { /* heuristic mode, or Find failed or found nothing usable: cuDNN's heuristics */
            n = conv_perf(l, c, dir, 0, x, w, y, dx, dw, r, err, errlen);
            if (n < 0) return -1;
            i = pick(r, n, c);
        }
        if (i < 0)
            return seterr(err, errlen, "%s: no cuDNN %s algorithm runs within a %zu-byte workspace", l->what,
                          dir_name[dir], c->ws_cap),
                   -1;
        key.algo = r[i].algo;
        /* cuDNN picks kernels by algorithm AND math type; GPU_FP32 keeps FMA math whatever the
         * row says (cuDNN "cudnnSetConvolutionMathType"). */
        key.math = c->prec == GPU_FP32 ? CUDNN_FMA_MATH : r[i].math;
        memo_add(c, &key);
    }

    size_t ws = 0;
    if (dir == 0) {
        l->fwd_algo = (cudnnConvolutionFwdAlgo_t)key.algo;
        l->fwd_math = key.math;
        CUDNN_TRY(cudnnSetConvolutionMathType(l->fwd_desc, key.math), l->what);
        CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(c->dnn, l->x_desc, l->w_desc, l->fwd_desc, l->y_desc,
                                                          l->fwd_algo, &ws),
                  l->what);
        l->fwd_ws = ws;
    } else if (dir == 1) {
        l->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)key.algo;
        l->bwd_data_math = key.math;
        CUDNN_TRY(cudnnSetConvolutionMathType(l->bwd_data_desc, key.math), l->what);
        CUDNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, l->w_desc, l->y_desc, l->bwd_data_desc,
                                                               l->x_desc, l->bwd_data_algo, &ws),
                  l->what);
        l->bwd_data_ws = ws;
    } else {
        l->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)key.algo;
        l->bwd_filter_math = key.math;
        CUDNN_TRY(cudnnSetConvolutionMathType(l->bwd_filter_desc, key.math), l->what);
        CUDNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, l->x_desc, l->y_desc, l->bwd_filter_desc,
                                                                 l->w_desc, l->bwd_filter_algo, &ws),
                  l->what);
        l->bwd_filter_ws = ws;
    }
    gpu_ctx_reserve(c, ws);
    return 0;
}

int gpu_conv_tune(gpu_conv_layer *l, gpu_ctx *c, const void *x, const void *w, void *y, void *dx, float *dw,
                  char *err, size_t errlen) {
    if (!x || !w || !y || (l->mode == GPU_TRAIN && !dw) || (l->need_dinp && !dx))
        return seterr(err, errlen, "%s: gpu_conv_tune needs the buffers of every direction", l->what), -1;
    if (find_prepare(c, err, errlen)) return -1;
    /* The filter gradient cuDNN writes: the fp32 one, or the layer's bf16 buffer. */
    void *dwc = is_bf16(c) && l->mode == GPU_TRAIN ? l->dw16 : (void *)dw;
    if (conv_choose(l, c, 0, x, w, y, dx, dwc, err, errlen)) return -1;
    if (l->mode == GPU_TRAIN) {
        if (conv_choose(l, c, 2, x, w, y, dx, dwc, err, errlen)) return -1;
        if (l->need_dinp && conv_choose(l, c, 1, x, w, y, dx, dwc, err, errlen)) return -1;
    }
    /* Find ran kernels: surface any error here, with this layer's name, not in the first step;
     * then leave no non-sticky error of the search behind (see conv_perf). */
    CUDA_TRY(cudaStreamSynchronize(c->stream), l->what);
    cudaGetLastError();
    l->tuned = 1;
    return 0;
}

int gpu_conv_transform(const gpu_conv_layer *l, int dir) {
    if (dir == 0)
        return l->fwd_algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || l->fwd_algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
               l->fwd_algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || l->fwd_algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    if (dir == 1)
        return l->need_dinp && (l->bwd_data_algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
                                l->bwd_data_algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
                                l->bwd_data_algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
                                l->bwd_data_algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED);
    return l->mode == GPU_TRAIN && (l->bwd_filter_algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
                                    l->bwd_filter_algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
                                    l->bwd_filter_algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED);
}

void gpu_conv_algos(const gpu_conv_layer *l, char *buf, size_t n) {
    int len = snprintf(buf, n, "fwd %s/%s %zu B", fwd_algo_name(l->fwd_algo), math_name(l->fwd_math), l->fwd_ws);
    if (l->mode == GPU_TRAIN && len >= 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, ", bwd-filter %s/%s %zu B", bwd_filter_algo_name(l->bwd_filter_algo),
                        math_name(l->bwd_filter_math), l->bwd_filter_ws);
    if (l->need_dinp && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", bwd-data %s/%s %zu B", bwd_data_algo_name(l->bwd_data_algo),
                 math_name(l->bwd_data_math), l->bwd_data_ws);
}

static void conv_ready(const gpu_conv_layer *l, const gpu_ctx *c, size_t ws) {
    if (!l->tuned) DIE("%s: run before gpu_conv_tune", l->what);
    if (c->ws_nbytes < ws) DIE("%s: workspace of %zu bytes < %zu needed (gpu_ctx_commit missing?)", l->what, c->ws_nbytes, ws);
}

void gpu_conv_forward(gpu_conv_layer *l, gpu_ctx *c, void *out, const void *inp, const void *weight) {
    conv_ready(l, c, l->fwd_ws);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionForward(c->dnn, &one, l->x_desc, inp, l->w_desc, weight, l->fwd_desc, l->fwd_algo,
                                        c->ws, c->ws_nbytes, &zero, l->y_desc, out),
                l->what);
}

void gpu_conv_backward(gpu_conv_layer *l, gpu_ctx *c, void *dinp, float *dweight, const void *dout,
                       const void *inp, const void *weight) {
    if (l->mode != GPU_TRAIN) DIE("gpu_conv_backward on inference %s", l->what);
    conv_ready(l, c, l->bwd_filter_ws > l->bwd_data_ws ? l->bwd_filter_ws : l->bwd_data_ws);
    const float one = 1.0f, zero = 0.0f;
    /* cuDNN's dw has x's type: with GPU_BF16 it goes to the layer's own dw16, then is widened
     * into the fp32 gradient (the next kernel on the stream). */
    void *dw = is_bf16(c) ? l->dw16 : (void *)dweight;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(c->dnn, &one, l->x_desc, inp, l->y_desc, dout, l->bwd_filter_desc,
                                               l->bwd_filter_algo, c->ws, c->ws_nbytes, &zero, l->w_desc, dw),
                l->what);
    if (is_bf16(c)) gpu_bf16_to_f32(c, dweight, l->dw16, (size_t)l->oc * l->ic * l->k * l->k);
    if (l->need_dinp && dinp)
        CUDNN_CHECK(cudnnConvolutionBackwardData(c->dnn, &one, l->w_desc, weight, l->y_desc, dout, l->bwd_data_desc,
                                                 l->bwd_data_algo, c->ws, c->ws_nbytes, &zero, l->x_desc, dinp),
                    l->what);
}

void gpu_conv_free(gpu_conv_layer *l) {
    if (l->x_desc) cudnnDestroyTensorDescriptor(l->x_desc);
    if (l->y_desc) cudnnDestroyTensorDescriptor(l->y_desc);
    if (l->w_desc) cudnnDestroyFilterDescriptor(l->w_desc);
    if (l->fwd_desc) cudnnDestroyConvolutionDescriptor(l->fwd_desc);
    if (l->bwd_data_desc) cudnnDestroyConvolutionDescriptor(l->bwd_data_desc);
    if (l->bwd_filter_desc) cudnnDestroyConvolutionDescriptor(l->bwd_filter_desc);
    cudaFree(l->dw16);
    memset(l, 0, sizeof *l);
}

/* ---- GPU_BF16: does cuDNN's legacy BN / pooling take bf16? (layers.h, gpu_bf16_fallback) ---- */

/* 1 if DSGD_BF16_FALLBACK names kind ("bn" or "pool"; "1" or "all": both). */
static int fallback_forced(const char *kind) {
    const char *v = getenv("DSGD_BF16_FALLBACK");
    if (!v || !*v || strcmp(v, "0") == 0) return 0;
    return strcmp(v, "1") == 0 || strcmp(v, "all") == 0 || strstr(v, kind) != NULL;
}

/* Run BN (training forward, backward, inference) and max pooling (forward, backward) once on a
 * (2, 4, 6, 6) bf16 tensor; record in c which cuDNN refuses, with its status. */
static void bf16_probe(gpu_ctx *c) {
    if (c->bf16_probed) return;
    c->bf16_probed = 1;
    const int n = 2, ch = 4, h = 6, w = 6, oh = 3, ow = 3;
    const size_t cnt = (size_t)n * ch * h * w;
    void *buf = NULL;
    const size_t nb = 8 * cnt * sizeof(float);
    if (cudaMalloc(&buf, nb) != cudaSuccess) { /* cannot tell: try bf16 and see at the first step */
        cudaGetLastError();
        return;
    }
    cudaMemset(buf, 0, nb);
    char *b = (char *)buf;
    void *x = b, *y = b + cnt * 2, *dy = b + cnt * 4, *dx = b + cnt * 6;
    float *st = (float *)(b + cnt * 8); /* γ, β, running mean, var, saved mean, inv var, dγ, dβ: ch each */
    cudnnTensorDescriptor_t xd = NULL, sd = NULL, pyd = NULL;
    cudnnPoolingDescriptor_t pd = NULL;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t sbn = CUDNN_STATUS_SUCCESS, spool = CUDNN_STATUS_SUCCESS;
    if (cudnnCreateTensorDescriptor(&xd) == CUDNN_STATUS_SUCCESS &&
        cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, n, ch, h, w) == CUDNN_STATUS_SUCCESS &&
        cudnnCreateTensorDescriptor(&sd) == CUDNN_STATUS_SUCCESS) {
        sbn = cudnnDeriveBNTensorDescriptor(sd, xd, CUDNN_BATCHNORM_SPATIAL);
        if (sbn == CUDNN_STATUS_SUCCESS)
            sbn = cudnnBatchNormalizationForwardTraining(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, sd, st,
                                                         st + ch, 0.1, st + 2 * ch, st + 3 * ch, 1e-5, st + 4 * ch,
                                                         st + 5 * ch);
        if (sbn == CUDNN_STATUS_SUCCESS)
            sbn = cudnnBatchNormalizationBackward(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd, x, xd, dy,
                                                  xd, dx, sd, st, st + 6 * ch, st + 7 * ch, 1e-5, st + 4 * ch, st + 5 * ch);
        if (sbn == CUDNN_STATUS_SUCCESS)
            sbn = cudnnBatchNormalizationForwardInference(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, sd, st,
                                                          st + ch, st + 2 * ch, st + 3 * ch, 1e-5);
        if (cudnnCreatePoolingDescriptor(&pd) == CUDNN_STATUS_SUCCESS &&
            cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, 3, 3, 1, 1, 2, 2) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnCreateTensorDescriptor(&pyd) == CUDNN_STATUS_SUCCESS &&
            cudnnSetTensor4dDescriptor(pyd, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, n, ch, oh, ow) == CUDNN_STATUS_SUCCESS) {
            spool = cudnnPoolingForward(c->dnn, pd, &one, xd, x, &zero, pyd, y);
            if (spool == CUDNN_STATUS_SUCCESS)
                spool = cudnnPoolingBackward(c->dnn, pd, &one, pyd, y, pyd, dy, xd, x, &zero, xd, dx);
        }
    }
    char m[768];
    if (sbn != CUDNN_STATUS_SUCCESS)
        snprintf(c->bn_fallback, sizeof c->bn_fallback, "cuDNN refuses bf16 batch normalisation: %.100s",
                 gpu_cudnn_status(sbn, m, sizeof m));
    if (spool != CUDNN_STATUS_SUCCESS)
        snprintf(c->pool_fallback, sizeof c->pool_fallback, "cuDNN refuses bf16 max pooling: %.100s",
                 gpu_cudnn_status(spool, m, sizeof m));
    cudaStreamSynchronize(c->stream);
    cudaGetLastError(); /* a refused call may leave a launch error behind */
    if (pd) cudnnDestroyPoolingDescriptor(pd);
    if (pyd) cudnnDestroyTensorDescriptor(pyd);
    if (sd) cudnnDestroyTensorDescriptor(sd);
    if (xd) cudnnDestroyTensorDescriptor(xd);
    cudaFree(buf);
}

/* 1 if a layer of kind "bn" / "pool" in c runs on fp32 tensors (io32). */
static int use_io32(gpu_ctx *c, const char *kind) {
    if (!is_bf16(c)) return 0;
    char *why = strcmp(kind, "bn") == 0 ? c->bn_fallback : c->pool_fallback;
    if (!why[0] && fallback_forced(kind)) snprintf(why, 160, "DSGD_BF16_FALLBACK=%s", getenv("DSGD_BF16_FALLBACK"));
    if (!why[0]) bf16_probe(c);
    return why[0] != '\0';
}

const char *gpu_bf16_fallback(const gpu_ctx *c, const char *kind) {
    return strcmp(kind, "bn") == 0 ? c->bn_fallback : c->pool_fallback;
}

/* ---- batch normalisation ------------------------------------------------------------------ */

int gpu_bn_init(gpu_bn_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu, gpu_mode mode,
                char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->relu = relu;
    l->n = n, l->c = ch, l->h = h, l->w = w;
    l->count = (size_t)n * ch * h * w;
    l->eps = 1e-5;
    l->momentum = 0.1;
    snprintf(l->what, sizeof l->what, "layer %s (batchnorm%s, (%d, %d, %d, %d))", name, relu ? "+relu" : "", n, ch, h, w);
    if (n < 1 || ch < 1 || h < 1 || w < 1) return seterr(err, errlen, "%s: invalid shape", l->what), -1;
    /* The running variance uses count/(count − 1): BN in training needs two values per channel. */
    if (mode == GPU_TRAIN && (long)n * h * w < 2)
        return seterr(err, errlen, "%s: one value per channel in training", l->what), -1;
    l->io32 = use_io32(c, "bn");
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->x_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->x_desc, CUDNN_TENSOR_NCHW, l->io32 ? CUDNN_DATA_FLOAT : act_dnn_type(c), n, ch, h,
                                         w),
              l->what);
    /* (1, c, 1, 1) float for fp32 and bf16 x alike (cudnn_ops.h: "type = (typeOf(x) == double) ?
     * double : float"); checked, since γ, β and the statistics are fp32 buffers. */
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->stat_desc), l->what);
    CUDNN_TRY(cudnnDeriveBNTensorDescriptor(l->stat_desc, l->x_desc, CUDNN_BATCHNORM_SPATIAL), l->what);
    {
        cudnnDataType_t st;
        int sn, sc, sh, sw, s0, s1, s2, s3;
        CUDNN_TRY(cudnnGetTensor4dDescriptor(l->stat_desc, &st, &sn, &sc, &sh, &sw, &s0, &s1, &s2, &s3), l->what);
        if (st != CUDNN_DATA_FLOAT || sn != 1 || sc != ch || sh != 1 || sw != 1)
            return seterr(err, errlen,
                          "%s: cuDNN derives BN statistics of type %d and shape (%d, %d, %d, %d), not float (1, %d, 1, 1)",
                          l->what, (int)st, sn, sc, sh, sw, ch),
                   -1;
    }
    if (mode == GPU_TRAIN) {
        if (gpu_malloc((void **)&l->save_mean, (size_t)ch * sizeof(float), l->what, err, errlen)) return -1;
        if (gpu_malloc((void **)&l->save_inv_var, (size_t)ch * sizeof(float), l->what, err, errlen)) return -1;
    }
    return 0;
}

void gpu_bn_forward(gpu_bn_layer *l, gpu_ctx *c, void *out, const void *inp, const float *gamma,
                    const float *beta, float *running_mean, float *running_var) {
    const float one = 1.0f, zero = 0.0f;
    if (l->mode == GPU_TRAIN)
        CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, l->x_desc, inp,
                                                           l->x_desc, out, l->stat_desc, gamma, beta, l->momentum,
                                                           running_mean, running_var, l->eps, l->save_mean,
                                                           l->save_inv_var),
                    l->what);
    else
        CUDNN_CHECK(cudnnBatchNormalizationForwardInference(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, l->x_desc, inp,
                                                            l->x_desc, out, l->stat_desc, gamma, beta, running_mean,
                                                            running_var, l->eps),
                    l->what);
    if (l->relu) launch_relu_forward(c, out, out, l->count, l->what, is_bf16(c) && !l->io32);
}

void gpu_bn_backward(gpu_bn_layer *l, gpu_ctx *c, void *dinp, float *dgamma, float *dbeta, void *dout,
                     const void *inp, const void *out, const float *gamma) {
    if (l->mode != GPU_TRAIN) DIE("gpu_bn_backward on inference %s", l->what);
    if (dinp == dout || dinp == inp) DIE("gpu_bn_backward: %s in place", l->what);
    if (l->relu) launch_relu_backward(c, dout, dout, out, l->count, l->what, is_bf16(c) && !l->io32);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnBatchNormalizationBackward(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, l->x_desc,
                                                inp, l->x_desc, dout, l->x_desc, dinp, l->stat_desc, gamma, dgamma,
                                                dbeta, l->eps, l->save_mean, l->save_inv_var),
                l->what);
}

void gpu_bn_free(gpu_bn_layer *l) {
    if (l->x_desc) cudnnDestroyTensorDescriptor(l->x_desc);
    if (l->stat_desc) cudnnDestroyTensorDescriptor(l->stat_desc);
    cudaFree(l->save_mean);
    cudaFree(l->save_inv_var);
    memset(l, 0, sizeof *l);
}

/* ---- ReLU, add ---------------------------------------------------------------------------- */

int gpu_relu_init(gpu_relu_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, gpu_mode mode,
                  char *err, size_t errlen) {
    (void)c;
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (relu, (%d, %d, %d, %d))", name, n, ch, h, w);
    if (n < 1 || ch < 1 || h < 1 || w < 1) return seterr(err, errlen, "%s: invalid shape", l->what), -1;
    return 0;
}

void gpu_relu_forward(gpu_relu_layer *l, gpu_ctx *c, void *out, const void *inp) {
    launch_relu_forward(c, out, inp, l->count, l->what, is_bf16(c));
}

void gpu_relu_backward(gpu_relu_layer *l, gpu_ctx *c, void *dinp, const void *dout, const void *out) {
    if (l->mode != GPU_TRAIN) DIE("gpu_relu_backward on inference %s", l->what);
    launch_relu_backward(c, dinp, dout, out, l->count, l->what, is_bf16(c));
}

int gpu_add_init(gpu_add_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu,
                 gpu_mode mode, char *err, size_t errlen) {
    (void)c;
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->relu = relu;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (add%s, (%d, %d, %d, %d))", name, relu ? "+relu" : "", n, ch, h, w);
    if (n < 1 || ch < 1 || h < 1 || w < 1) return seterr(err, errlen, "%s: invalid shape", l->what), -1;
    return 0;
}

void gpu_add_forward(gpu_add_layer *l, gpu_ctx *c, void *out, const void *a, const void *b) {
    const int vec = aligned16(out) && aligned16(a) && aligned16(b);
    const int blocks = grid_for(c, work_items(l->count, vec, c->act_bytes));
    if (is_bf16(c))
        add_kernel<<<blocks, THREADS, 0, c->stream>>>((uint16_t *)out, (const uint16_t *)a, (const uint16_t *)b,
                                                      l->count, l->relu, vec);
    else
        add_kernel<<<blocks, THREADS, 0, c->stream>>>((float *)out, (const float *)a, (const float *)b, l->count,
                                                      l->relu, vec);
    CUDA_CHECK(cudaGetLastError(), l->what);
}

void gpu_add_backward(gpu_add_layer *l, gpu_ctx *c, void *dsum, const void *dout, const void *out) {
    if (!l->relu || l->mode != GPU_TRAIN) DIE("gpu_add_backward on %s without a trained ReLU", l->what);
    launch_relu_backward(c, dsum, dout, out, l->count, l->what, is_bf16(c));
}

/* ---- pooling ------------------------------------------------------------------------------ */

/* Global average pooling: one warp per (n, c) plane; lanes stride the plane, then a butterfly
 * sum (the same order every time). */
template <typename S>
static __global__ void avgpool_forward_kernel(S *__restrict__ out, const S *__restrict__ inp, int planes, int hw) {
    const int lane = threadIdx.x & 31;
    const int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    const int nwarps = (int)((gridDim.x * (size_t)blockDim.x) >> 5);
    for (int p = warp; p < planes; p += nwarps) { /* uniform per warp: the shuffles converge */
        const S *x = inp + (size_t)p * hw;
        float s = 0.0f;
        for (int i = lane; i < hw; i += 32) s += ldf(x[i]);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) stf(out[p], s / (float)hw);
    }
}

/* dinp[p, i] = dout[p] / hw. */
template <typename S>
static __global__ void avgpool_backward_kernel(S *__restrict__ dinp, const S *__restrict__ dout, size_t n, int hw) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const float inv = 1.0f / (float)hw;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        stf(dinp[i], ldf(dout[i / hw]) * inv);
}

int gpu_pool_init(gpu_pool_layer *l, gpu_ctx *c, const char *name, int n, int ch, int ih, int iw, int max, int k,
                  int stride, int pad, gpu_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->max = max;
    l->n = n, l->c = ch, l->ih = ih, l->iw = iw;
    if (max) {
        l->oh = stride > 0 ? (ih + 2 * pad - k) / stride + 1 : 0;
        l->ow = stride > 0 ? (iw + 2 * pad - k) / stride + 1 : 0;
        snprintf(l->what, sizeof l->what, "layer %s (max pool %dx%d/%d pad %d, (%d, %d, %d, %d) -> (%d, %d, %d, %d))",
                 name, k, k, stride, pad, n, ch, ih, iw, n, ch, l->oh, l->ow);
    } else {
        l->oh = l->ow = 1;
        snprintf(l->what, sizeof l->what, "layer %s (global average pool, (%d, %d, %d, %d) -> (%d, %d, 1, 1))", name, n,
                 ch, ih, iw, n, ch);
    }
    if (n < 1 || ch < 1 || ih < 1 || iw < 1 || l->oh < 1 || l->ow < 1 || (max && (k < 1 || pad < 0 || pad > k / 2)))
        return seterr(err, errlen, "%s: input too small or shape invalid", l->what), -1;
    if (!max) return 0;
    l->io32 = use_io32(c, "pool");
    const cudnnDataType_t dt = l->io32 ? CUDNN_DATA_FLOAT : act_dnn_type(c);
    CUDNN_TRY(cudnnCreatePoolingDescriptor(&l->desc), l->what);
    CUDNN_TRY(cudnnSetPooling2dDescriptor(l->desc, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, k, k, pad, pad,
                                          stride, stride),
              l->what);
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->x_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->x_desc, CUDNN_TENSOR_NCHW, dt, n, ch, ih, iw), l->what);
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->y_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->y_desc, CUDNN_TENSOR_NCHW, dt, n, ch, l->oh, l->ow), l->what);
    int on, oc, oh, ow;
    CUDNN_TRY(cudnnGetPooling2dForwardOutputDim(l->desc, l->x_desc, &on, &oc, &oh, &ow), l->what);
    if (on != n || oc != ch || oh != l->oh || ow != l->ow)
        return seterr(err, errlen, "%s: cuDNN computes an output of (%d, %d, %d, %d)", l->what, on, oc, oh, ow), -1;
    return 0;
}

void gpu_pool_forward(gpu_pool_layer *l, gpu_ctx *c, void *out, const void *inp) {
    if (l->max) {
        const float one = 1.0f, zero = 0.0f;
        CUDNN_CHECK(cudnnPoolingForward(c->dnn, l->desc, &one, l->x_desc, inp, &zero, l->y_desc, out), l->what);
        return;
    }
    const int planes = l->n * l->c;
    const int blocks = grid_for(c, (size_t)planes * 32);
    if (is_bf16(c))
        avgpool_forward_kernel<<<blocks, THREADS, 0, c->stream>>>((uint16_t *)out, (const uint16_t *)inp, planes,
                                                                  l->ih * l->iw);
    else
        avgpool_forward_kernel<<<blocks, THREADS, 0, c->stream>>>((float *)out, (const float *)inp, planes, l->ih * l->iw);
    CUDA_CHECK(cudaGetLastError(), l->what);
}

void gpu_pool_backward(gpu_pool_layer *l, gpu_ctx *c, void *dinp, const void *dout, const void *inp,
                       const void *out) {
    if (l->mode != GPU_TRAIN) DIE("gpu_pool_backward on inference %s", l->what);
    if (l->max) {
        const float one = 1.0f, zero = 0.0f;
        CUDNN_CHECK(cudnnPoolingBackward(c->dnn, l->desc, &one, l->y_desc, out, l->y_desc, dout, l->x_desc, inp, &zero,
                                         l->x_desc, dinp),
                    l->what);
        return;
    }
    const size_t n = (size_t)l->n * l->c * l->ih * l->iw;
    if (is_bf16(c))
        avgpool_backward_kernel<<<grid_for(c, n), THREADS, 0, c->stream>>>((uint16_t *)dinp, (const uint16_t *)dout, n,
                                                                           l->ih * l->iw);
    else
        avgpool_backward_kernel<<<grid_for(c, n), THREADS, 0, c->stream>>>((float *)dinp, (const float *)dout, n,
                                                                           l->ih * l->iw);
    CUDA_CHECK(cudaGetLastError(), l->what);
}

void gpu_pool_free(gpu_pool_layer *l) {
    if (l->desc) cudnnDestroyPoolingDescriptor(l->desc);
    if (l->x_desc) cudnnDestroyTensorDescriptor(l->x_desc);
    if (l->y_desc) cudnnDestroyTensorDescriptor(l->y_desc);
    memset(l, 0, sizeof *l);
}

/* ---- fully connected ---------------------------------------------------------------------- */

/* out[b, o] += bias[o]: after the product, as the CPU adds it (s + bias). */
static __global__ void bias_add_kernel(float *__restrict__ out, const float *__restrict__ bias, size_t n, int nout) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] += bias[i % nout];
}

/* dbias[o] = Σ_b dout[b, o] in fp32, rows in order (deterministic; adjacent threads read adjacent o). */
template <typename S>
static __global__ void col_sum_kernel(float *__restrict__ dbias, const S *__restrict__ dout, int n, int nout) {
    const int stride = gridDim.x * blockDim.x;
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < nout; o += stride) {
        float s = 0.0f;
        for (int b = 0; b < n; b++) s += ldf(dout[(size_t)b * nout + o]);
        dbias[o] = s;
    }
}

/* Failure text of the fc layer, built only when a check fails. */
static const char *fc_what(char *buf, size_t len, const char *op, int n, int nin, int nout) {
    snprintf(buf, len, "layer fc (%s, input (%d, %d), weight (%d, %d))", op, n, nin, nout, nin);
    return buf;
}

/* C = op(A) op(B) with A, B in c's activation type and C of type ctype: cublasSgemm (fp32,
 * tf32 by the handle's math mode), or cublasGemmEx for bf16 — A and B CUDA_R_16BF, C CUDA_R_16BF
 * or CUDA_R_32F, CUBLAS_COMPUTE_32F with float α, β (cuBLAS "cublasGemmEx": both are supported
 * combinations; bf16 inputs use tensor cores). */
static cublasStatus_t fc_gemm(gpu_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *a,
                              int lda, const void *b, int ldb, void *cm, cudaDataType_t ctype, int ldc) {
    const float one = 1.0f, zero = 0.0f;
    if (!is_bf16(c))
        return cublasSgemm(c->blas, ta, tb, m, n, k, &one, (const float *)a, lda, (const float *)b, ldb, &zero,
                           (float *)cm, ldc);
    return cublasGemmEx(c->blas, ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &zero, cm, ctype, ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

void gpu_fc_forward(gpu_ctx *c, float *out, const void *inp, const void *weight, const float *bias, int n,
                    int nin, int nout) {
    char w[128];
    /* Column-major views: out (n, nout) row-major is outᵀ (nout × n), W (nout, nin) row-major is
     * Wᵀ (nin × nout), inp is inpᵀ (nin × n); outᵀ = op_T(Wᵀ) · inpᵀ. The logits are fp32. */
    CUBLAS_CHECK(fc_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, nout, n, nin, weight, nin, inp, nin, out, CUDA_R_32F, nout),
                 fc_what(w, sizeof w, "forward", n, nin, nout));
    const size_t total = (size_t)n * nout;
    bias_add_kernel<<<grid_for(c, total), THREADS, 0, c->stream>>>(out, bias, total, nout);
    CUDA_CHECK(cudaGetLastError(), fc_what(w, sizeof w, "forward bias", n, nin, nout));
}

void gpu_fc_backward(gpu_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                     const void *weight, int n, int nin, int nout) {
    char w[128];
    /* dWᵀ (nin × nout) = inpᵀ (nin × n) · op_T(doutᵀ (nout × n)), fp32 in every precision. */
    CUBLAS_CHECK(fc_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, nin, nout, n, inp, nin, dout, nout, dweight, CUDA_R_32F, nin),
                 fc_what(w, sizeof w, "weight gradient", n, nin, nout));
    const int blocks = grid_for(c, (size_t)nout);
    if (is_bf16(c))
        col_sum_kernel<<<blocks, THREADS, 0, c->stream>>>(dbias, (const uint16_t *)dout, n, nout);
    else
        col_sum_kernel<<<blocks, THREADS, 0, c->stream>>>(dbias, (const float *)dout, n, nout);
    CUDA_CHECK(cudaGetLastError(), fc_what(w, sizeof w, "bias gradient", n, nin, nout));
    /* dinpᵀ (nin × n) = Wᵀ (nin × nout) · doutᵀ (nout × n), in the activation type. */
    if (dinp)
        CUBLAS_CHECK(fc_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, nin, n, nout, weight, nin, dout, nout, dinp,
                             is_bf16(c) ? CUDA_R_16BF : CUDA_R_32F, nin),
                     fc_what(w, sizeof w, "input gradient", n, nin, nout));
}

/* ---- softmax cross-entropy ---------------------------------------------------------------- */

/* One warp per row: row max, Σ exp(z − max), probabilities, loss = log Σ − (z[y] − max). */
static __global__ void softmax_xent_forward_kernel(float *__restrict__ probs, float *__restrict__ losses,
                                            const float *__restrict__ logits, const int *__restrict__ y, int n, int k) {
    const int lane = threadIdx.x & 31;
    const int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    const int nwarps = (int)((gridDim.x * (size_t)blockDim.x) >> 5);
    for (int r = warp; r < n; r += nwarps) {
        const float *z = logits + (size_t)r * k;
        float *p = probs + (size_t)r * k;
        float m = -INFINITY;
        for (int j = lane; j < k; j += 32) m = fmaxf(m, z[j]);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float s = 0.0f;
        for (int j = lane; j < k; j += 32) {
            const float e = expf(z[j] - m);
            p[j] = e;
            s += e;
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float inv = 1.0f / s;
        for (int j = lane; j < k; j += 32) p[j] *= inv;
        if (lane == 0) {
            const int t = y[r];
            losses[r] = (t >= 0 && t < k) ? logf(s) - (z[t] - m) : NAN;
        }
    }
}

/* *mean = Σ x / n in one block: per-thread sums in index order, then a fixed tree (double). */
static __global__ void mean_kernel(float *__restrict__ mean, const float *__restrict__ x, int n) {
    __shared__ double part[THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *mean = (float)(part[0] / (double)n);
}

/* dlogits = probs / n − onehot(y) / n, in the CPU's order (p · (1/n), then − 1/n), in fp32, then
 * stored as S. */
template <typename S>
static __global__ void softmax_xent_backward_kernel(S *__restrict__ dlogits, const float *__restrict__ probs,
                                                    const int *__restrict__ y, int n, int k) {
    const size_t total = (size_t)n * k;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const float inv_n = 1.0f / (float)n;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int r = (int)(i / k), j = (int)(i % k);
        float d = probs[i] * inv_n;
        if (j == y[r]) d -= inv_n;
        stf(dlogits[i], d);
    }
}

static const char *xent_what(char *buf, size_t len, const char *op, int n, int k) {
    snprintf(buf, len, "softmax cross-entropy (%s, logits (%d, %d))", op, n, k);
    return buf;
}

void gpu_softmax_xent_forward(gpu_ctx *c, float *probs, float *losses, float *loss, const float *logits,
                              const int *y, int n, int k) {
    char w[96];
    const int blocks = grid_for(c, (size_t)n * 32);
    softmax_xent_forward_kernel<<<blocks, THREADS, 0, c->stream>>>(probs, losses, logits, y, n, k);
    CUDA_CHECK(cudaGetLastError(), xent_what(w, sizeof w, "forward", n, k));
    mean_kernel<<<1, THREADS, 0, c->stream>>>(loss, losses, n);
    CUDA_CHECK(cudaGetLastError(), xent_what(w, sizeof w, "mean", n, k));
}

void gpu_softmax_xent_backward(gpu_ctx *c, void *dlogits, const float *probs, const int *y, int n, int k) {
    char w[96];
    const int blocks = grid_for(c, (size_t)n * k);
    if (is_bf16(c))
        softmax_xent_backward_kernel<<<blocks, THREADS, 0, c->stream>>>((uint16_t *)dlogits, probs, y, n, k);
    else
        softmax_xent_backward_kernel<<<blocks, THREADS, 0, c->stream>>>((float *)dlogits, probs, y, n, k);
    CUDA_CHECK(cudaGetLastError(), xent_what(w, sizeof w, "backward", n, k));
}

/* ---- SGD ---------------------------------------------------------------------------------- */

/* 1 if x is NaN or ±Inf, from its bits (as sgd.c). */
__device__ __forceinline__ unsigned nonfinite_bits(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }

/* sgd_update's formula on one element; returns the non-finite bit of the new θ. */
__device__ __forceinline__ unsigned sgd1(float *theta, float grad, float *v, float alpha, float mu, float lambda,
                                         int nesterov) {
    const float g = grad + lambda * *theta;
    const float vi = mu * *v + g;
    *v = vi;
    const float t = *theta - alpha * (nesterov ? g + mu * vi : vi);
    *theta = t;
    return nonfinite_bits(t);
}

static __global__ void sgd_kernel(float *__restrict__ theta, const float *__restrict__ grad, float *__restrict__ v, size_t n,
                           float alpha, float mu, float lambda, int nesterov, int vec, int *__restrict__ bad) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned b = 0;
    size_t done = 0;
    if (vec) {
        const size_t n4 = n / 4;
        for (size_t i = i0; i < n4; i += stride) {
            float4 t = reinterpret_cast<float4 *>(theta)[i];
            float4 vv = reinterpret_cast<float4 *>(v)[i];
            const float4 g = reinterpret_cast<const float4 *>(grad)[i];
            b |= sgd1(&t.x, g.x, &vv.x, alpha, mu, lambda, nesterov);
            b |= sgd1(&t.y, g.y, &vv.y, alpha, mu, lambda, nesterov);
            b |= sgd1(&t.z, g.z, &vv.z, alpha, mu, lambda, nesterov);
            b |= sgd1(&t.w, g.w, &vv.w, alpha, mu, lambda, nesterov);
            reinterpret_cast<float4 *>(theta)[i] = t;
            reinterpret_cast<float4 *>(v)[i] = vv;
        }
        done = n4 * 4;
    }
    for (size_t i = done + i0; i < n; i += stride) b |= sgd1(&theta[i], grad[i], &v[i], alpha, mu, lambda, nesterov);
    if (b) *bad = 1; /* every writer writes 1: no race on the value */
}

void gpu_sgd_update(gpu_ctx *c, float *theta, const float *grad, float *v, size_t n, float alpha, float mu,
                    float lambda, int nesterov, int *bad) {
    char w[96];
    snprintf(w, sizeof w, "the SGD update of %zu parameters", n);
    CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), c->stream), w);
    if (n == 0) return;
    const int vec = aligned16(theta) && aligned16(grad) && aligned16(v);
    sgd_kernel<<<grid_for(c, vec ? n / 4 : n), THREADS, 0, c->stream>>>(theta, grad, v, n, alpha, mu, lambda,
                                                                        nesterov, vec, bad);
    CUDA_CHECK(cudaGetLastError(), w);
}
