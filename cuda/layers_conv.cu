/* layers_conv.cu — the convolution on cuDNN 9 (layers.h: gpu_conv_*): descriptors, the algorithm
 * of each direction (cudnnFind on the network's buffers or cuDNN's heuristics, memoised per
 * context), forward and backward; bf16 filter gradients widened into the fp32 ones. */
#include "layers_internal.h"

#include <string.h>

/* ---- convolution -------------------------------------------------------------------------- */

/* cuDNN's name of algorithm a of direction dir (0 forward, 1 backward data, 2 backward filter). */
static const char *algo_name(int dir, int a) {
    static const char *const names[3][8] = {
        {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"},
        {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"},
        {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"}};
    return a >= 0 && a < 8 && names[dir][a] ? names[dir][a] : "?";
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
    /* NHWC: activations (n, h, w, c) and the filter (oc, k, k, ic) — cuDNN's NHWC filter, the
     * layout its NHWC tensor-core kernels take without a transform of their own (the model keeps
     * that copy of the weights, layers.h "Layout NHWC"). Dims are given as NCHW either way. */
    l->nhwc = c->nhwc;
    const cudnnTensorFormat_t fmt = l->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->x_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->x_desc, fmt, dt, n, ic, ih, iw), l->what);
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->y_desc), l->what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->y_desc, fmt, dt, n, oc, l->oh, l->ow), l->what);
    CUDNN_TRY(cudnnCreateFilterDescriptor(&l->w_desc), l->what);
    CUDNN_TRY(cudnnSetFilter4dDescriptor(l->w_desc, dt, fmt, oc, ic, k, k), l->what);
    if (mode == GPU_TRAIN && (is_bf16(c) || l->nhwc) &&
        gpu_malloc(&l->dwa, (size_t)oc * ic * k * k * c->act_bytes, l->what, err, errlen))
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

/* The tuning workspace and the per-direction cap: GPU_CONV_WS_CAP, or a quarter of the free
 * memory. cudnnFind gets that much at once, halved until cudaMalloc succeeds (none at all below
 * 1 MiB: then only algorithms without workspace). In heuristic mode nothing is allocated here:
 * the trial run of each chosen algorithm (conv_try) grows the workspace to what it needs. */
static int find_prepare(gpu_ctx *c, char *err, size_t errlen) {
    if (c->find_ready) return 0;
    size_t fr = 0, tot = 0;
    CUDA_TRY(cudaMemGetInfo(&fr, &tot), "convolution tuning");
    size_t cap = GPU_CONV_WS_CAP;
    if (fr / 4 < cap) cap = fr / 4;
    cap &= ~(size_t)255;
    c->find_ws = NULL;
    c->find_ws_nbytes = 0;
    if (c->heuristic) {
        c->ws_cap = cap;
        c->find_ready = 1;
        return 0;
    }
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

/* The usable rows in order of preference into order[] (Find sorts by time, Get_v7 by expected
 * performance); returns how many. Usable: succeeded, fits the cap, and computes in the precision
 * asked for: never fp16 down-conversion, and no tensor cores (TF32) for GPU_FP32. Deterministic
 * algorithms first (bitwise reproducible steps; the others sum with atomics), then the others;
 * with c->nondet (DSGD_CUDNN_DETERMINISTIC=0) every usable row in the given order. */
static int pick_order(const perf_row *r, int n, const gpu_ctx *c, int *order) {
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > c->ws_cap) continue;
            if (r[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
            if (c->prec == GPU_FP32 && r[i].math == CUDNN_TENSOR_OP_MATH) continue;
            if (c->nondet ? pass == 1 : (pass == 0) != (r[i].determinism == CUDNN_DETERMINISTIC)) continue;
            order[k++] = i;
        }
    return k;
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

#define MAX_PERF 16

/* r[0..got) from cuDNN's rows p of any direction (the same fields). */
template <typename P> static void set_rows(perf_row *r, const P *p, int got) {
    for (int i = 0; i < got; i++) {
        r[i].algo = (int)p[i].algo;
        r[i].status = p[i].status;
        r[i].memory = p[i].memory;
        r[i].math = p[i].mathType;
        r[i].determinism = p[i].determinism;
    }
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
        if (st == CUDNN_STATUS_SUCCESS) set_rows(r, p, got);
    } else if (dir == 1) {
        cudnnConvolutionBwdDataAlgoPerf_t p[MAX_PERF];
        CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c->dnn, &maxc), l->what);
        if (maxc > MAX_PERF) maxc = MAX_PERF;
        st = use_find ? cudnnFindConvolutionBackwardDataAlgorithmEx(c->dnn, l->w_desc, w, l->y_desc, y,
                                                                    l->bwd_data_desc, l->x_desc, dx, maxc, &got, p,
                                                                    c->find_ws, c->find_ws_nbytes)
                      : cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, l->w_desc, l->y_desc, l->bwd_data_desc,
                                                                    l->x_desc, maxc, &got, p);
        if (st == CUDNN_STATUS_SUCCESS) set_rows(r, p, got);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[MAX_PERF];
        CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c->dnn, &maxc), l->what);
        if (maxc > MAX_PERF) maxc = MAX_PERF;
        st = use_find ? cudnnFindConvolutionBackwardFilterAlgorithmEx(c->dnn, l->x_desc, x, l->y_desc, y,
                                                                      l->bwd_filter_desc, l->w_desc, dw, maxc, &got, p,
                                                                      c->find_ws, c->find_ws_nbytes)
                      : cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, l->x_desc, l->y_desc, l->bwd_filter_desc,
                                                                      l->w_desc, maxc, &got, p);
        if (st == CUDNN_STATUS_SUCCESS) set_rows(r, p, got);
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

/* Set direction dir of l to algorithm algo with math type math, and size its workspace (l->*_ws). */
static int conv_set(gpu_conv_layer *l, gpu_ctx *c, int dir, int algo, cudnnMathType_t math, char *err, size_t errlen) {
    size_t ws = 0;
    if (dir == 0) {
        l->fwd_algo = (cudnnConvolutionFwdAlgo_t)algo;
        l->fwd_math = math;
        CUDNN_TRY(cudnnSetConvolutionMathType(l->fwd_desc, math), l->what);
        CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(c->dnn, l->x_desc, l->w_desc, l->fwd_desc, l->y_desc,
                                                          l->fwd_algo, &ws),
                  l->what);
        l->fwd_ws = ws;
    } else if (dir == 1) {
        l->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)algo;
        l->bwd_data_math = math;
        CUDNN_TRY(cudnnSetConvolutionMathType(l->bwd_data_desc, math), l->what);
        CUDNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, l->w_desc, l->y_desc, l->bwd_data_desc,
                                                               l->x_desc, l->bwd_data_algo, &ws),
                  l->what);
        l->bwd_data_ws = ws;
    } else {
        l->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)algo;
        l->bwd_filter_math = math;
        CUDNN_TRY(cudnnSetConvolutionMathType(l->bwd_filter_desc, math), l->what);
        CUDNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, l->x_desc, l->y_desc, l->bwd_filter_desc,
                                                                 l->w_desc, l->bwd_filter_algo, &ws),
                  l->what);
        l->bwd_filter_ws = ws;
    }
    return 0;
}

/* The workspace direction dir of l needs with its algorithm (conv_set). */
static size_t dir_ws(const gpu_conv_layer *l, int dir) {
    return dir == 0 ? l->fwd_ws : dir == 1 ? l->bwd_data_ws : l->bwd_filter_ws;
}

/* Run direction dir of l once, with the algorithm conv_set gave it, on the tuning buffers (whose
 * contents do not matter: Find writes them too) and the tuning workspace, grown to the
 * algorithm's need. 0 if it ran; else -1 with why (cuDNN's status, or the CUDA error of its
 * kernels: a non-sticky one is cleared, a sticky one comes back at the next call anyway). */
static int conv_try(gpu_conv_layer *l, gpu_ctx *c, int dir, const void *x, const void *w, void *y, void *dx, void *dw,
                    char *why, size_t whylen) {
    const size_t ws = dir_ws(l, dir);
    if (ws > c->find_ws_nbytes) {
        if (c->find_ws) cudaFree(c->find_ws);
        c->find_ws = NULL;
        c->find_ws_nbytes = 0;
        if (cudaMalloc(&c->find_ws, ws) != cudaSuccess) {
            cudaGetLastError();
            c->find_ws = NULL;
            snprintf(why, whylen, "no %zu-byte workspace (cudaMalloc failed)", ws);
            return -1;
        }
        c->find_ws_nbytes = ws;
    }
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st;
    if (dir == 0)
        st = cudnnConvolutionForward(c->dnn, &one, l->x_desc, x, l->w_desc, w, l->fwd_desc, l->fwd_algo, c->find_ws,
                                     c->find_ws_nbytes, &zero, l->y_desc, y);
    else if (dir == 1)
        st = cudnnConvolutionBackwardData(c->dnn, &one, l->w_desc, w, l->y_desc, y, l->bwd_data_desc, l->bwd_data_algo,
                                          c->find_ws, c->find_ws_nbytes, &zero, l->x_desc, dx);
    else
        st = cudnnConvolutionBackwardFilter(c->dnn, &one, l->x_desc, x, l->y_desc, y, l->bwd_filter_desc,
                                            l->bwd_filter_algo, c->find_ws, c->find_ws_nbytes, &zero, l->w_desc, dw);
    if (st != CUDNN_STATUS_SUCCESS) {
        char b[768];
        snprintf(why, whylen, "%.200s", gpu_cudnn_status(st, b, sizeof b));
        cudaGetLastError();
        return -1;
    }
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) {
        char b[256];
        snprintf(why, whylen, "%.200s", gpu_cuda_status(e, b, sizeof b));
        cudaGetLastError();
        return -1;
    }
    return 0;
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
        if (conv_set(l, c, dir, key.algo, key.math, err, errlen)) return -1;
        gpu_ctx_reserve(c, dir_ws(l, dir));
        return 0;
    }
    perf_row r[MAX_PERF];
    int order[MAX_PERF];
    int n = c->heuristic ? 0 : conv_perf(l, c, dir, 1, x, w, y, dx, dw, r, err, errlen);
    if (n < 0) return -1;
    int k = c->heuristic ? 0 : pick_order(r, n, c, order);
    if (k > 0) { /* Find ran each of them: the fastest usable one */
        key.algo = r[order[0]].algo;
        /* cuDNN picks kernels by algorithm AND math type; GPU_FP32 keeps FMA math whatever the
         * row says (cuDNN "cudnnSetConvolutionMathType"). */
        key.math = c->prec == GPU_FP32 ? CUDNN_FMA_MATH : r[order[0]].math;
        if (conv_set(l, c, dir, key.algo, key.math, err, errlen)) return -1;
    } else {
        /* Heuristic mode, or Find failed or found nothing usable: cuDNN's heuristics, whose rows
         * are claims, not measurements (a row marked SUCCESS can fail to execute: cuDNN's own
         * mnistCUDNN sample, NVIDIA/cudnn-frontend#16). So each is run once on the tuning buffers,
         * in order, and the first that runs is taken (as PyTorch walks its heuristic list). */
        n = conv_perf(l, c, dir, 0, x, w, y, dx, dw, r, err, errlen);
        if (n < 0) return -1;
        k = pick_order(r, n, c, order);
        char tried[512] = "";
        size_t tl = 0;
        int ok = 0;
        for (int j = 0; j < k && !ok; j++) {
            key.algo = r[order[j]].algo;
            key.math = c->prec == GPU_FP32 ? CUDNN_FMA_MATH : r[order[j]].math;
            if (conv_set(l, c, dir, key.algo, key.math, err, errlen)) return -1;
            char why[256];
            ok = conv_try(l, c, dir, x, w, y, dx, dw, why, sizeof why) == 0;
            if (!ok) {
                if (tl < sizeof tried)
                    tl += (size_t)snprintf(tried + tl, sizeof tried - tl, "%s%s: %s", tl ? "; " : "", algo_name(dir, key.algo), why);
                if (getenv("DSGD_GPU_VERBOSE") && strcmp(getenv("DSGD_GPU_VERBOSE"), "0") != 0)
                    fprintf(stderr, "dsgd-run: %s: cuDNN's heuristic %s algorithm %s fails to run (%s): trying the next\n", l->what,
                            dir_name[dir], algo_name(dir, key.algo), why);
            }
        }
        if (!ok)
            return seterr(err, errlen, "%s: no cuDNN %s algorithm runs within a %zu-byte workspace%s%s", l->what, dir_name[dir],
                          c->ws_cap, tried[0] ? "; tried " : "", tried),
                   -1;
    }
    if (c->n_memo < GPU_MEMO_MAX) c->memo[c->n_memo++] = key;
    gpu_ctx_reserve(c, dir_ws(l, dir));
    return 0;
}

int gpu_conv_tune(gpu_conv_layer *l, gpu_ctx *c, const void *x, const void *w, void *y, void *dx, float *dw,
                  char *err, size_t errlen) {
    if (!x || !w || !y || (l->mode == GPU_TRAIN && !dw) || (l->need_dinp && !dx))
        return seterr(err, errlen, "%s: gpu_conv_tune needs the buffers of every direction", l->what), -1;
    if (find_prepare(c, err, errlen)) return -1;
    /* The filter gradient cuDNN writes: the fp32 one, or the layer's own (bf16, or NHWC). */
    void *dwc = l->dwa ? l->dwa : (void *)dw;
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
    int len = snprintf(buf, n, "fwd %s/%s %zu B", algo_name(0, l->fwd_algo), math_name(l->fwd_math), l->fwd_ws);
    if (l->mode == GPU_TRAIN && len >= 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, ", bwd-filter %s/%s %zu B", algo_name(2, l->bwd_filter_algo),
                        math_name(l->bwd_filter_math), l->bwd_filter_ws);
    if (l->need_dinp && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", bwd-data %s/%s %zu B", algo_name(1, l->bwd_data_algo),
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
    /* cuDNN's dw has x's type and the filter's layout: with GPU_BF16 or NHWC it goes to the
     * layer's own dwa, then is widened and / or transposed into the fp32 (oc, ic, k, k) gradient
     * (the next kernel on the stream). */
    void *dw = l->dwa ? l->dwa : (void *)dweight;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(c->dnn, &one, l->x_desc, inp, l->y_desc, dout, l->bwd_filter_desc,
                                               l->bwd_filter_algo, c->ws, c->ws_nbytes, &zero, l->w_desc, dw),
                l->what);
    if (l->nhwc) gpu_from_nhwc_f32(c, dweight, l->dwa, l->oc, l->ic, l->k * l->k);
    else if (is_bf16(c)) gpu_bf16_to_f32(c, dweight, l->dwa, (size_t)l->oc * l->ic * l->k * l->k);
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
    cudaFree(l->dwa);
    memset(l, 0, sizeof *l);
}
