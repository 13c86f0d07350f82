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
 * sum in a fixed order, so results do not depend on scheduling.
 *
 * Files by op family: layers.cu (the context, the bf16 fallback probe, the precision casts, the
 * SGD update), layers_conv.cu (convolution), layers_norm.cu (batch normalisation, ReLU, add),
 * layers_pool_fc.cu (pooling, fully connected, softmax cross-entropy); layers_internal.h has
 * what they share. */
#include "layers_internal.h"

#include <stdlib.h>
#include <string.h>

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
    /* N11: non-deterministic algorithms (atomics in the backward passes) as PyTorch's
     * cudnn.deterministic = False. Default: with timing (find) the fastest row, deterministic or
     * not (differences of atomics' order, ~1e-6 relative, are within every test's tolerance and
     * below what the timed choice already changes from process to process); with heuristic (the
     * tests and the comparison runs of run.sh, bitwise reproducible steps) deterministic first. */
    const char *det = getenv(GPU_DET_ENV);
    if (det && *det && strcmp(det, "0") != 0 && strcmp(det, "1") != 0) {
        seterr(err, errlen, "%s=%s: expected 1 (deterministic convolution algorithms first) or 0 (the fastest, deterministic "
               "or not)", GPU_DET_ENV, det);
        return -1;
    }
    c->nondet = det && *det ? strcmp(det, "0") == 0 : !c->heuristic;
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

/* gpu_f32_to_bf16_segs: blockIdx.y is the segment, x strides through it (8 per step where both
 * ends are 16-byte aligned, as cast_kernel). */
static __global__ void cast_segs_kernel(const gpu_cast_seg *__restrict__ segs) {
    struct alignas(16) PD {
        uint16_t v[8];
    };
    struct alignas(16) PS {
        float v[8];
    };
    const gpu_cast_seg sg = segs[blockIdx.y];
    const float *src = sg.src;
    uint16_t *dst = (uint16_t *)sg.dst;
    const size_t n = sg.n;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (sg.ch > 0) { /* NHWC: (rows, ch, hw) -> (rows, hw, ch), as to_nhwc_kernel */
        const size_t ch = (size_t)sg.ch, hw = (size_t)sg.hw;
        for (size_t i = i0; i < n; i += stride) {
            const size_t r = i / (hw * ch), rem = i % (hw * ch);
            stf(dst[i], src[r * ch * hw + (rem % ch) * hw + rem / ch]);
        }
        return;
    }
    size_t done = 0;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        const size_t nv = n / 8;
        for (size_t i = i0; i < nv; i += stride) {
            const PS x = reinterpret_cast<const PS *>(src)[i];
            PD y;
#pragma unroll
            for (int j = 0; j < 8; j++) stf(y.v[j], x.v[j]);
            reinterpret_cast<PD *>(dst)[i] = y;
        }
        done = nv * 8;
    }
    for (size_t i = done + i0; i < n; i += stride) stf(dst[i], src[i]);
}

void gpu_f32_to_bf16_segs(gpu_ctx *c, const gpu_cast_seg *segs, int nseg, size_t max_n) {
    if (nseg <= 0 || max_n == 0) return;
    if (nseg > 65535) DIE("gpu_f32_to_bf16_segs: %d segments (at most 65535)", nseg);
    /* Per segment as many blocks as one cast of max_n would take (grid_for: at most 8 per SM), so
     * the largest segments (layer4's 2.4M weights at width 64) still fill the GPU; the blocks a
     * small segment does not need find no work and exit at once. */
    const unsigned per = (unsigned)grid_for(c, max_n / 8 + 1);
    cast_segs_kernel<<<dim3(per, (unsigned)nseg), THREADS, 0, c->stream>>>(segs);
    CUDA_CHECK(cudaGetLastError(), "the fp32 -> bf16 casts (one launch)");
}

void gpu_bf16_to_f32(gpu_ctx *c, float *dst, const void *src, size_t n) {
    if (n == 0) return;
    const int vec = aligned16(dst) && aligned16(src);
    cast_kernel<<<grid_for(c, vec ? n / 8 : n), THREADS, 0, c->stream>>>(dst, (const uint16_t *)src, n, vec);
    CUDA_CHECK(cudaGetLastError(), "the bf16 -> fp32 cast");
}

/* ---- layout NHWC ----------------------------------------------------------------------------- */

/* dst[r, s, k] = src[r, k, s] (rows r, ch k, hw s), converted to D: one thread per destination
 * element (coalesced stores; the loads stride by hw across k, which for the minibatch (ch = 3)
 * and the weights (hw <= 49) stay within a few cache lines). */
template <typename D>
static __global__ void to_nhwc_kernel(D *__restrict__ dst, const float *__restrict__ src, size_t n, int ch, int hw) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, chw = (size_t)ch * hw;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t r = i / chw, rem = i % chw;
        stf(dst[i], src[r * chw + (rem % ch) * hw + rem / ch]);
    }
}

/* dst[r, k, s] = src[r, s, k], widened to fp32 (exact). */
template <typename S>
static __global__ void from_nhwc_kernel(float *__restrict__ dst, const S *__restrict__ src, size_t n, int ch, int hw) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, chw = (size_t)ch * hw;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t r = i / chw, rem = i % chw;
        dst[i] = ldf(src[r * chw + (rem % hw) * ch + rem / hw]);
    }
}

void gpu_to_nhwc(gpu_ctx *c, void *dst, const float *src, int rows, int ch, int hw) {
    const size_t n = (size_t)rows * ch * hw;
    if (n == 0) return;
    WITH_ACT_TYPE(is_bf16(c), to_nhwc_kernel<<<grid_for(c, n), THREADS, 0, c->stream>>>((S *)dst, src, n, ch, hw));
    CUDA_CHECK(cudaGetLastError(), "the NCHW -> NHWC transposition");
}

void gpu_from_nhwc_f32(gpu_ctx *c, float *dst, const void *src, int rows, int ch, int hw) {
    const size_t n = (size_t)rows * ch * hw;
    if (n == 0) return;
    WITH_ACT_TYPE(is_bf16(c), from_nhwc_kernel<<<grid_for(c, n), THREADS, 0, c->stream>>>(dst, (const S *)src, n, ch, hw));
    CUDA_CHECK(cudaGetLastError(), "the NHWC -> NCHW transposition");
}

/* ---- GPU_BF16: does cuDNN's legacy BN / pooling take bf16? (layers.h, gpu_bf16_fallback) ---- */

/* 1 if DSGD_BF16_FALLBACK names kind ("bn" or "pool"; "1" or "all": both). */
static int fallback_forced(const char *kind) {
    const char *v = getenv("DSGD_BF16_FALLBACK");
    if (!v || !*v || strcmp(v, "0") == 0) return 0;
    return strcmp(v, "1") == 0 || strcmp(v, "all") == 0 || strstr(v, kind) != NULL;
}

/* Run BN (training forward, backward, inference) and max pooling (forward, backward) once on a
 * (2, 4, 6, 6) bf16 tensor in c's layout (NCHW, or NHWC: c->nhwc); record in c which cuDNN
 * refuses, with its status. */
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
    const cudnnTensorFormat_t fmt = c->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    cudnnStatus_t sbn = CUDNN_STATUS_SUCCESS, spool = CUDNN_STATUS_SUCCESS;
    if (cudnnCreateTensorDescriptor(&xd) == CUDNN_STATUS_SUCCESS &&
        cudnnSetTensor4dDescriptor(xd, fmt, CUDNN_DATA_BFLOAT16, n, ch, h, w) == CUDNN_STATUS_SUCCESS &&
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
            cudnnSetTensor4dDescriptor(pyd, fmt, CUDNN_DATA_BFLOAT16, n, ch, oh, ow) == CUDNN_STATUS_SUCCESS) {
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

int gpu_use_io32(gpu_ctx *c, const char *kind) {
    if (!is_bf16(c)) return 0;
    char *why = strcmp(kind, "bn") == 0 ? c->bn_fallback : c->pool_fallback;
    if (!why[0] && fallback_forced(kind)) snprintf(why, 160, "DSGD_BF16_FALLBACK=%s", getenv("DSGD_BF16_FALLBACK"));
    if (!why[0]) bf16_probe(c);
    return why[0] != '\0';
}

const char *gpu_bf16_fallback(const gpu_ctx *c, const char *kind) {
    return strcmp(kind, "bn") == 0 ? c->bn_fallback : c->pool_fallback;
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
