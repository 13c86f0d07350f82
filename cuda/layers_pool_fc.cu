/* layers_pool_fc.cu — pooling (max: cuDNN; global average: our kernels), the fully connected
 * layer on cuBLAS and the softmax cross-entropy loss (layers.h: gpu_pool_*, gpu_fc_*,
 * gpu_softmax_xent_*). */
#include "layers_internal.h"

#include <math.h>
#include <string.h>

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

/* NHWC: out[b, ch] = Σ_i inp[b, i, ch] / hw, one thread per (b, ch), i in order (adjacent
 * threads read adjacent channels: coalesced). */
template <typename S>
static __global__ void avgpool_nhwc_forward_kernel(S *__restrict__ out, const S *__restrict__ inp, int n, int ch, int hw) {
    const size_t total = (size_t)n * ch, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += stride) {
        const size_t b = p / ch, k = p % ch;
        const S *x = inp + b * hw * ch + k;
        float s = 0.0f;
        for (int i = 0; i < hw; i++) s += ldf(x[(size_t)i * ch]);
        stf(out[p], s / (float)hw);
    }
}

/* NHWC: dinp[b, i, ch] = dout[b, ch] / hw. */
template <typename S>
static __global__ void avgpool_nhwc_backward_kernel(S *__restrict__ dinp, const S *__restrict__ dout, size_t n, int ch,
                                                    int hw) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const float inv = 1.0f / (float)hw;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t b = i / ((size_t)hw * ch), k = i % ch;
        stf(dinp[i], ldf(dout[b * ch + k]) * inv);
    }
}

int gpu_pool_init(gpu_pool_layer *l, gpu_ctx *c, const char *name, int n, int ch, int ih, int iw, int max, int k,
                  int stride, int pad, gpu_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->max = max;
    l->n = n, l->c = ch, l->ih = ih, l->iw = iw;
    l->nhwc = c->nhwc;
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
    l->io32 = gpu_use_io32(c, "pool");
    const cudnnDataType_t dt = l->io32 ? CUDNN_DATA_FLOAT : act_dnn_type(c);
    CUDNN_TRY(cudnnCreatePoolingDescriptor(&l->desc), l->what);
    CUDNN_TRY(cudnnSetPooling2dDescriptor(l->desc, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, k, k, pad, pad,
                                          stride, stride),
              l->what);
    const cudnnTensorFormat_t fmt = l->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->x_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->x_desc, fmt, dt, n, ch, ih, iw), l->what);
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->y_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->y_desc, fmt, dt, n, ch, l->oh, l->ow), l->what);
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
    if (l->nhwc) {
        WITH_ACT_TYPE(is_bf16(c), avgpool_nhwc_forward_kernel<<<grid_for(c, (size_t)planes), THREADS, 0, c->stream>>>(
                                      (S *)out, (const S *)inp, l->n, l->c, l->ih * l->iw));
        CUDA_CHECK(cudaGetLastError(), l->what);
        return;
    }
    const int blocks = grid_for(c, (size_t)planes * 32);
    WITH_ACT_TYPE(is_bf16(c), avgpool_forward_kernel<<<blocks, THREADS, 0, c->stream>>>((S *)out, (const S *)inp, planes,
                                                                                         l->ih * l->iw));
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
    if (l->nhwc) {
        WITH_ACT_TYPE(is_bf16(c), avgpool_nhwc_backward_kernel<<<grid_for(c, n), THREADS, 0, c->stream>>>(
                                      (S *)dinp, (const S *)dout, n, l->c, l->ih * l->iw));
        CUDA_CHECK(cudaGetLastError(), l->what);
        return;
    }
    WITH_ACT_TYPE(is_bf16(c), avgpool_backward_kernel<<<grid_for(c, n), THREADS, 0, c->stream>>>((S *)dinp,
                                                                                                  (const S *)dout, n,
                                                                                                  l->ih * l->iw));
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
    WITH_ACT_TYPE(is_bf16(c), col_sum_kernel<<<blocks, THREADS, 0, c->stream>>>(dbias, (const S *)dout, n, nout));
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
    WITH_ACT_TYPE(is_bf16(c),
                  softmax_xent_backward_kernel<<<blocks, THREADS, 0, c->stream>>>((S *)dlogits, probs, y, n, k));
    CUDA_CHECK(cudaGetLastError(), xent_what(w, sizeof w, "backward", n, k));
}
