/* layers_norm.cu — batch normalisation on cuDNN with our fused ReLU, ReLU and the residual add
 * (layers.h: gpu_bn_*, gpu_relu_*, gpu_add_*), and the elementwise kernels they run. */
#include "layers_internal.h"

#include <string.h>

/* ---- elementwise kernels ------------------------------------------------------------------ */

/* max(x, 0) with NaN kept (as oneDNN's and PyTorch's ReLU), so divergence stays visible. */
__device__ __forceinline__ float relu1(float x) { return x > 0.0f ? x : (x != x ? x : 0.0f); }

/* The fp32 operations of binary_kernel: relu(x), y unused (ReLU forward as binary_kernel(out,
 * inp, inp): the compiler drops y's loads); dout where out > 0, else 0 (ReLU backward); [relu](a + b). */
struct relu_op {
    __device__ float operator()(float x, float) const { return relu1(x); }
};
struct mask_op {
    __device__ float operator()(float d, float o) const { return o > 0.0f ? d : 0.0f; }
};
struct add_op {
    int relu;
    __device__ float operator()(float a, float b) const {
        const float s = a + b;
        return relu ? relu1(s) : s;
    }
};

/* out = op(x, y), in fp32; out may alias x or y. */
template <typename S, typename Op>
static __global__ void binary_kernel(S *out, const S *x, const S *y, size_t n, int vec, Op op) {
    constexpr int V = 16 / sizeof(S);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t nv = n / V;
        for (size_t i = i0; i < nv; i += stride) {
            pack16<S> p = reinterpret_cast<const pack16<S> *>(x)[i];
            const pack16<S> q = reinterpret_cast<const pack16<S> *>(y)[i];
#pragma unroll
            for (int j = 0; j < V; j++) stf(p.v[j], op(ldf(p.v[j]), ldf(q.v[j])));
            reinterpret_cast<pack16<S> *>(out)[i] = p;
        }
        done = nv * V;
    }
    for (size_t i = done + i0; i < n; i += stride) stf(out[i], op(ldf(x[i]), ldf(y[i])));
}

/* binary_kernel on n values (bf: bf16, else fp32). */
template <typename Op>
static void launch_binary(gpu_ctx *c, void *out, const void *x, const void *y, size_t n, Op op, const char *what, int bf) {
    const int vec = aligned16(out) && aligned16(x) && aligned16(y);
    const int blocks = grid_for(c, vec ? n / (bf ? 8 : 4) : n); /* vectorised: 16 bytes per work item */
    WITH_ACT_TYPE(bf,
                  binary_kernel<<<blocks, THREADS, 0, c->stream>>>((S *)out, (const S *)x, (const S *)y, n, vec, op));
    CUDA_CHECK(cudaGetLastError(), what);
}

/* ---- batch normalisation ------------------------------------------------------------------ */

int gpu_bn_init(gpu_bn_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu, gpu_mode mode,
                char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    const int want_add = relu == GPU_BN_ADD_RELU;
    if (want_add) relu = 0; /* unless fused below: a plain BN, the caller adds */
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
    l->io32 = gpu_use_io32(c, "bn");
    l->nhwc = c->nhwc;
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->x_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->x_desc, l->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                         l->io32 ? CUDNN_DATA_FLOAT : act_dnn_type(c), n, ch, h, w),
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
    l->add = want_add && c->bn_fused && c->bn_add && mode == GPU_TRAIN && l->nhwc && is_bf16(c) && !l->io32;
    l->fused = (c->bn_fused && relu && mode == GPU_TRAIN && l->nhwc) || l->add;
    if (l->fused) { /* cuDNN's BN+ReLU (layers.h, gpu_bn_layer.fused): its sizes now, its buffers once */
        const cudnnBatchNormMode_t bm = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
        const cudnnBatchNormOps_t ops = l->add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
        const cudnnTensorDescriptor_t zd = l->add ? l->x_desc : NULL; /* z and dz: the shape of x */
        CUDNN_TRY(cudnnCreateActivationDescriptor(&l->act_desc), l->what);
        CUDNN_TRY(cudnnSetActivationDescriptor(l->act_desc, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0), l->what);
        size_t fw = 0, bw = 0;
        CUDNN_TRY(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(c->dnn, bm, ops, l->x_desc, zd, l->x_desc,
                                                                           l->stat_desc, l->act_desc, &fw),
                  l->what);
        CUDNN_TRY(cudnnGetBatchNormalizationBackwardExWorkspaceSize(c->dnn, bm, ops, l->x_desc, l->x_desc, l->x_desc, zd,
                                                                    l->x_desc, l->stat_desc, l->act_desc, &bw),
                  l->what);
        CUDNN_TRY(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(c->dnn, bm, ops, l->act_desc, l->x_desc,
                                                                       &l->reserve_nbytes),
                  l->what);
        l->ws_need = fw > bw ? fw : bw;
        gpu_ctx_reserve(c, l->ws_need);
        if (gpu_malloc(&l->reserve, l->reserve_nbytes, l->what, err, errlen)) return -1;
    }
    return 0;
}

static void bn_fused_ready(const gpu_bn_layer *l, const gpu_ctx *c) {
    if (c->ws_nbytes < l->ws_need)
        DIE("%s: workspace of %zu bytes < %zu needed (gpu_ctx_commit missing?)", l->what, c->ws_nbytes, l->ws_need);
}

void gpu_bn_forward(gpu_bn_layer *l, gpu_ctx *c, void *out, const void *inp, const float *gamma,
                    const float *beta, float *running_mean, float *running_var) {
    const float one = 1.0f, zero = 0.0f;
    if (l->add) DIE("gpu_bn_forward on %s, built for the fused residual add: gpu_bn_add_forward", l->what);
    if (l->fused) { /* BN and ReLU in one call; the backward reads the reserve space and β */
        bn_fused_ready(l, c);
        CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
                        c->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero, l->x_desc,
                        inp, NULL, NULL, l->x_desc, out, l->stat_desc, gamma, beta, l->momentum, running_mean, running_var,
                        l->eps, l->save_mean, l->save_inv_var, l->act_desc, c->ws, c->ws_nbytes, l->reserve,
                        l->reserve_nbytes),
                    l->what);
        l->beta_fwd = beta;
        return;
    }
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
    if (l->relu) launch_binary(c, out, out, out, l->count, relu_op(), l->what, is_bf16(c) && !l->io32);
}

void gpu_bn_backward(gpu_bn_layer *l, gpu_ctx *c, void *dinp, float *dgamma, float *dbeta, void *dout,
                     const void *inp, const void *out, const float *gamma) {
    if (l->mode != GPU_TRAIN) DIE("gpu_bn_backward on inference %s", l->what);
    if (l->add) DIE("gpu_bn_backward on %s, built for the residual add: gpu_bn_add_backward", l->what);
    if (dinp == dout || dinp == inp) DIE("gpu_bn_backward: %s in place", l->what);
    if (l->fused) { /* the ReLU's mask from out inside cuDNN; dout unchanged */
        bn_fused_ready(l, c);
        if (!l->beta_fwd) DIE("gpu_bn_backward: %s before its forward", l->what);
        const float one = 1.0f, zero = 0.0f;
        CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
                        c->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero, &one, &zero,
                        l->x_desc, inp, l->x_desc, out, l->x_desc, dout, NULL, NULL, l->x_desc, dinp, l->stat_desc, gamma,
                        l->beta_fwd, dgamma, dbeta, l->eps, l->save_mean, l->save_inv_var, l->act_desc, c->ws, c->ws_nbytes,
                        l->reserve, l->reserve_nbytes),
                    l->what);
        return;
    }
    if (l->relu) launch_binary(c, dout, dout, out, l->count, mask_op(), l->what, is_bf16(c) && !l->io32);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnBatchNormalizationBackward(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, l->x_desc,
                                                inp, l->x_desc, dout, l->x_desc, dinp, l->stat_desc, gamma, dgamma,
                                                dbeta, l->eps, l->save_mean, l->save_inv_var),
                l->what);
}

void gpu_bn_add_forward(gpu_bn_layer *l, gpu_ctx *c, void *out, const void *inp, const void *z, const float *gamma,
                        const float *beta, float *running_mean, float *running_var) {
    if (!l->add) DIE("gpu_bn_add_forward on %s, not built for the fused residual add", l->what);
    if (out == inp || out == z) DIE("gpu_bn_add_forward: %s in place", l->what);
    bn_fused_ready(l, c);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
                    c->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, &one, &zero, l->x_desc,
                    inp, l->x_desc, z, l->x_desc, out, l->stat_desc, gamma, beta, l->momentum, running_mean, running_var,
                    l->eps, l->save_mean, l->save_inv_var, l->act_desc, c->ws, c->ws_nbytes, l->reserve, l->reserve_nbytes),
                l->what);
    l->beta_fwd = beta;
}

void gpu_bn_add_backward(gpu_bn_layer *l, gpu_ctx *c, void *dinp, void *dz, float *dgamma, float *dbeta,
                         const void *dout, const void *inp, const void *out, const float *gamma) {
    if (!l->add) DIE("gpu_bn_add_backward on %s, not built for the fused residual add", l->what);
    if (!l->beta_fwd) DIE("gpu_bn_add_backward: %s before its forward", l->what);
    if (dinp == dout || dinp == inp || dinp == dz || dz == dout || dz == inp) DIE("gpu_bn_add_backward: %s in place", l->what);
    bn_fused_ready(l, c);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
                    c->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, &one, &zero, &one, &zero,
                    l->x_desc, inp, l->x_desc, out, l->x_desc, dout, l->x_desc, dz, l->x_desc, dinp, l->stat_desc, gamma,
                    l->beta_fwd, dgamma, dbeta, l->eps, l->save_mean, l->save_inv_var, l->act_desc, c->ws, c->ws_nbytes,
                    l->reserve, l->reserve_nbytes),
                l->what);
}

void gpu_bn_free(gpu_bn_layer *l) {
    if (l->x_desc) cudnnDestroyTensorDescriptor(l->x_desc);
    if (l->stat_desc) cudnnDestroyTensorDescriptor(l->stat_desc);
    cudaFree(l->save_mean);
    cudaFree(l->save_inv_var);
    if (l->act_desc) cudnnDestroyActivationDescriptor(l->act_desc);
    cudaFree(l->reserve);
    memset(l, 0, sizeof *l);
}

/* ---- ReLU, add ---------------------------------------------------------------------------- */

int gpu_relu_init(gpu_relu_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, gpu_mode mode,
                  char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (relu, (%d, %d, %d, %d))", name, n, ch, h, w);
    if (n < 1 || ch < 1 || h < 1 || w < 1) return seterr(err, errlen, "%s: invalid shape", l->what), -1;
    return 0;
}

void gpu_relu_forward(gpu_relu_layer *l, gpu_ctx *c, void *out, const void *inp) {
    launch_binary(c, out, inp, inp, l->count, relu_op(), l->what, is_bf16(c));
}

void gpu_relu_backward(gpu_relu_layer *l, gpu_ctx *c, void *dinp, const void *dout, const void *out) {
    if (l->mode != GPU_TRAIN) DIE("gpu_relu_backward on inference %s", l->what);
    launch_binary(c, dinp, dout, out, l->count, mask_op(), l->what, is_bf16(c));
}

int gpu_add_init(gpu_add_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu,
                 gpu_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->relu = relu;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (add%s, (%d, %d, %d, %d))", name, relu ? "+relu" : "", n, ch, h, w);
    if (n < 1 || ch < 1 || h < 1 || w < 1) return seterr(err, errlen, "%s: invalid shape", l->what), -1;
    return 0;
}

void gpu_add_forward(gpu_add_layer *l, gpu_ctx *c, void *out, const void *a, const void *b) {
    launch_binary(c, out, a, b, l->count, add_op{l->relu}, l->what, is_bf16(c));
}

void gpu_add_backward(gpu_add_layer *l, gpu_ctx *c, void *dsum, const void *dout, const void *out) {
    if (!l->relu || l->mode != GPU_TRAIN) DIE("gpu_add_backward on %s without a trained ReLU", l->what);
    launch_binary(c, dsum, dout, out, l->count, mask_op(), l->what, is_bf16(c));
}
