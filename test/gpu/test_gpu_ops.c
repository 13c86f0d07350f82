/* test_gpu_ops.c — every layer of cuda/layers.h (cuDNN, cuBLAS, our kernels) against its CPU twin
 * in src/nn/layers.h (oneDNN; itself held to PyTorch by test_layers.c), on fresh random inputs
 * (fixed seeds, so a failure reproduces): convolution forward / backward data / backward filter
 * (3x3/1 on 3 and 1 input channels, 3x3/2, 1x1/2 downsample, 7x7/2 stem; training and inference
 * layers; without the input gradient as the stem runs), BN training forward with the running
 * statistics, backward and inference, with and without the fused ReLU; ReLU; add + ReLU forward
 * and backward and the in-place accumulation; max pooling 3x3/2 pad 1; global average pooling;
 * fc; softmax cross-entropy; the SGD update (Nesterov and heavy ball, with a non-finite case);
 * the fp32 <-> bf16 casts. Elementwise ops run on aligned buffers (the 16-byte vector path) and
 * on views one element off (the scalar path), with counts that are not multiples of the vector.
 * Every op that has a bf16 form (GPU_BF16: convolution, BN, ReLU, add, both poolings, fc, the
 * loss gradient) runs in bf16 too, on inputs rounded to bf16 beforehand, so that the CPU
 * reference (fp32) sees exactly the values the GPU sees and the comparison measures the op.
 *
 * Tolerances (relative L2 error ||gpu − cpu|| / ||cpu|| per tensor, every one printed): 1e-5 in
 * fp32 (GPU_FP32: FMA math in cuDNN, no TF32 in cuBLAS; the summation orders differ); 5e-3 for
 * convolutions and fc in tf32 (10-bit mantissa inputs); 0 where both sides compute the same
 * single operation (ReLU, add, max); 1e-6 for max-pool gradients (sums of up to four window
 * contributions in another order).
 *
 * bf16 (8 significant bits: unit roundoff u = 2^-8 ≈ 3.9e-3; a value rounded once is off by
 * about u/3 ≈ 1.3e-3 RMS; fp32 accumulation keeps a reduction of length k from adding more than
 * ~√k·2^-24): 2e-2 for results stored in bf16 (one rounding after an fp32 computation, with
 * room for cuDNN kernels that round an intermediate too); 5e-2 for the gradients cuDNN computes
 * in bf16 (convolution input and weight gradients — the latter rounded to bf16 before it is
 * widened into the fp32 gradient — BN input gradient, max-pool gradient); 1e-3 for fp32 results
 * of bf16 inputs through cuBLAS (logits, fc weight gradient, bias gradients: fp32 compute, so
 * only the summation order differs) and 5e-3 through cuDNN's BN (running statistics, γ and β
 * gradients: fp32 compute in PSEUDO_BFLOAT16_CONFIG, not further documented); 0 for ReLU, its
 * mask, max pooling and add against the reference rounded to bf16 (the same fp32 operation and
 * the same rounding to nearest even); 0 bits for the casts. Max pooling in bf16 runs on inputs
 * that are distinct within each plane: a tie (likely among 8-bit mantissas) may route the
 * gradient to another position in cuDNN than in oneDNN, which would be no error.
 *
 * Without a GPU (cudaGetDeviceCount fails or finds none) it checks that gpu_select reports it
 * ("no CUDA GPU visible: ..."), prints one line and exits 0 (1 with DSGD_REQUIRE_GPU set: on a
 * machine meant to have one, test/gpu/testgpu.h). CUDA
 * does not survive fork() after initialisation, so the tests run in this process (CK_NOFORK). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "layers.h" /* cuda/layers.h: the GPU layers (-Icuda) */
#include "nn/layers.h"
#include "optim/sgd.h"
#include "testgpu.h"
#include "testutil.h"
#include "util/util.h"

#define TOL_FP32 1e-5
/* fp32 through a Winograd or FFT convolution (gpu_conv_transform): those algorithms transform
 * inputs and filters, multiply in the transformed domain and transform back, and the transformed
 * values are larger than the result (Winograd F(4x4, 3x3)'s matrices carry entries up to 8, FFT
 * sums over the whole tile), so cancellation costs 1-2 more decimal digits than a direct or GEMM
 * convolution's about 1e-6: 2e-4 (cuDNN documents no bound; Lavin & Gray 2016 measure F(4x4, 3x3)
 * in fp32 at about 1e-5 to 1e-4 relative). Only the directions that run one are held to it. */
#define TOL_FP32_TRANSFORM 2e-4
#define TOL_TF32 5e-3
#define TOL_BF16 2e-2         /* a result stored in bf16 */
#define TOL_BF16_GRAD 5e-2    /* a gradient cuDNN computes in bf16 */
#define TOL_BF16_BLAS 1e-3    /* an fp32 result of bf16 inputs, cuBLAS (CUBLAS_COMPUTE_32F) or our kernels */
#define TOL_BF16_BN 5e-3      /* an fp32 result of bf16 inputs, cuDNN BN */

static const char *prec_name(gpu_precision p) { return p == GPU_TF32 ? "tf32" : p == GPU_BF16 ? "bf16" : "fp32"; }

/* The compute capability of the GPU under test (main): bf16 needs 8.0 (gpu_ctx_init refuses less). */
static int cc_major, cc_minor;

/* 1 (and a line saying so) when prec is bf16 and the GPU cannot run it. */
static int skip_bf16(gpu_precision prec, const char *what) {
    if (prec != GPU_BF16 || cc_major >= 8) return 0;
    printf("  %s bf16: skipped (sm_%d%d; bf16 needs compute capability 8.0)\n", what, cc_major, cc_minor);
    return 1;
}


/* ---- buffers: host random, device copies (freed at the end of each test) ---- */

#define MAX_BUFS 64
static void *dev_bufs[MAX_BUFS];
static int n_dev_bufs;

static void *d_alloc(size_t nbytes) {
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, nbytes ? nbytes : 4);
    ck_assert_msg(e == cudaSuccess, "cudaMalloc(%zu): %s", nbytes, cudaGetErrorString(e));
    ck_assert_int_lt(n_dev_bufs, MAX_BUFS);
    dev_bufs[n_dev_bufs++] = d;
    return d;
}

static float *d_from(const float *h, size_t n) {
    float *d = d_alloc(n * sizeof(float));
    cudaError_t e = cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    ck_assert_msg(e == cudaSuccess, "cudaMemcpy: %s", cudaGetErrorString(e));
    return d;
}

static float *d_zero(size_t n) {
    float *d = d_alloc(n * sizeof(float));
    ck_assert(cudaMemset(d, 0, n * sizeof(float)) == cudaSuccess);
    return d;
}

/* Host copy of n device floats, after everything enqueued so far (the contexts' streams are
 * blocking: the legacy-stream cudaMemcpy waits for them). Free with free(). */
static float *h_from(const float *d, size_t n) {
    float *h = malloc(n * sizeof(float) + 4);
    cudaError_t e = cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    ck_assert_msg(e == cudaSuccess, "cudaMemcpy: %s", cudaGetErrorString(e));
    return h;
}

static void d_free_all(void) {
    ck_assert_msg(cudaDeviceSynchronize() == cudaSuccess, "asynchronous error: %s", cudaGetErrorString(cudaGetLastError()));
    for (int i = 0; i < n_dev_bufs; i++) cudaFree(dev_bufs[i]);
    n_dev_bufs = 0;
}

static float *rnd(rng_t *r, size_t n, double scale, double shift) {
    float *p = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) p[i] = (float)(shift + scale * rng_normal(r));
    return p;
}

/* ---- activations in the precision's type: fp32, or bf16 (test/gpu/bf16.h) ---- */

static size_t act_bytes(gpu_precision prec) { return prec == GPU_BF16 ? 2 : 4; }

/* In bf16, round the host values to bf16 in place, so the CPU reference computes on exactly the
 * values the GPU gets. */
static void act_round(gpu_precision prec, float *x, size_t n) {
    if (prec == GPU_BF16) bf16_round_all(x, n);
}

/* Device copy of n host values in prec's activation type (bf16: rounded to nearest even). */
static void *d_act(gpu_precision prec, const float *h, size_t n) {
    if (prec != GPU_BF16) return d_from(h, n);
    uint16_t *b = malloc(n * 2 + 4);
    bf16_pack(b, h, n);
    void *d = d_alloc(n * 2);
    cudaError_t e = cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice);
    ck_assert_msg(e == cudaSuccess, "cudaMemcpy: %s", cudaGetErrorString(e));
    free(b);
    return d;
}

static void *d_act_zero(gpu_precision prec, size_t n) {
    void *d = d_alloc(n * act_bytes(prec));
    ck_assert(cudaMemset(d, 0, n * act_bytes(prec)) == cudaSuccess);
    return d;
}

/* Host fp32 copy of n device activations of prec (widened exactly). Free with free(). */
static float *h_act(gpu_precision prec, const void *d, size_t n) {
    if (prec != GPU_BF16) return h_from(d, n);
    uint16_t *b = malloc(n * 2 + 4);
    cudaError_t e = cudaMemcpy(b, d, n * 2, cudaMemcpyDeviceToHost);
    ck_assert_msg(e == cudaSuccess, "cudaMemcpy: %s", cudaGetErrorString(e));
    float *h = malloc(n * sizeof(float) + 4);
    bf16_unpack(h, b, n);
    free(b);
    return h;
}

/* The activation type a BN or max-pool layer of a prec context takes: prec, or fp32 where the
 * layer runs the bf16 fallback (io32: cuDNN refused bf16 for it, or DSGD_BF16_FALLBACK; its
 * tensors are fp32 and cuda/model.cu casts around it). Says which path the layer took, once per
 * context and kind. The host inputs are rounded to bf16 already, so fp32 copies carry the same
 * values; the caller rounds the fp32 outputs to bf16 as model.cu's casts do. */
static int expect_io32 = -1; /* test_bf16_fallback: 1 (every bf16 BN / max-pool layer on the fallback) */
static gpu_precision io_prec(gpu_precision prec, int io32, const gpu_ctx *c, const char *kind, const char *name) {
    if (prec != GPU_BF16) return prec;
    const char *why = gpu_bf16_fallback(c, kind);
    ck_assert_int_eq(io32, why && *why);
    if (expect_io32 >= 0) ck_assert_msg(io32 == expect_io32, "%s: bf16 fallback %d, expected %d", name, io32, expect_io32);
    printf("    %s bf16 path: %s%s\n", name, io32 ? "fallback, fp32 tensors: " : "cuDNN bf16 (no fallback)", io32 ? why : "");
    return io32 ? GPU_FP32 : prec;
}

/* The element off of an activation buffer. */
static void *act_at(gpu_precision prec, void *base, size_t off) { return (char *)base + off * act_bytes(prec); }

/* The layout of the layer cases (layers.h "Layout NHWC"): test_nhwc_layers sets it around the
 * conv, BN and pooling cases, which then build their layers in an NHWC context (and, with
 * layout_fused, BN+ReLU on cuDNN's fused calls), upload every activation and conv weight
 * transposed and transpose the results back before comparing with the NCHW CPU layers. */
static int layout_nhwc, layout_fused;

static void gctx(gpu_ctx *c, gpu_precision prec) {
    char err[ERRLEN];
    ck_assert_msg(gpu_ctx_init(c, prec, err, sizeof err) == 0, "gpu_ctx_init: %s", err);
    c->nhwc = layout_nhwc;
    c->bn_fused = layout_fused;
}

/* h (n, ch, hw) uploaded as d_act does, transposed to (n, hw, ch) with layout_nhwc. */
static void *d_act_l(gpu_precision prec, const float *h, size_t n, size_t ch, size_t hw) {
    if (!layout_nhwc) return d_act(prec, h, n * ch * hw);
    float *t = malloc(n * ch * hw * sizeof(float) + 4);
    for (size_t r = 0; r < n; r++)
        for (size_t q = 0; q < hw; q++)
            for (size_t k = 0; k < ch; k++) t[(r * hw + q) * ch + k] = h[(r * ch + k) * hw + q];
    void *d = d_act(prec, t, n * ch * hw);
    free(t);
    return d;
}

/* The host copy of d as h_act makes it, (n, ch, hw) again with layout_nhwc. */
static float *h_act_l(gpu_precision prec, const void *d, size_t n, size_t ch, size_t hw) {
    float *h = h_act(prec, d, n * ch * hw);
    if (!layout_nhwc) return h;
    float *t = malloc(n * ch * hw * sizeof(float) + 4);
    for (size_t r = 0; r < n; r++)
        for (size_t q = 0; q < hw; q++)
            for (size_t k = 0; k < ch; k++) t[(r * ch + k) * hw + q] = h[(r * hw + q) * ch + k];
    free(h);
    return t;
}

static void cctx(nn_ctx *c) {
    char err[ERRLEN];
    ck_assert_msg(nn_ctx_init(c, err, sizeof err) == 0, "nn_ctx_init: %s", err);
}

static void commit(gpu_ctx *c) {
    char err[ERRLEN];
    ck_assert_msg(gpu_ctx_commit(c, err, sizeof err) == 0, "gpu_ctx_commit: %s", err);
}

static const char *label(char *buf, size_t n, const char *name, const char *quantity) {
    snprintf(buf, n, "%s: %s", name, quantity);
    return buf;
}

/* ---- convolution ---- */

static void conv_case(const char *name, gpu_precision prec, int n, int ic, int ih, int iw, int oc, int k, int stride,
                      int pad, int need_dinp) {
    if (skip_bf16(prec, name)) return;
    const double tol = prec == GPU_TF32 ? TOL_TF32 : prec == GPU_BF16 ? TOL_BF16 : TOL_FP32;
    const double tol_grad = prec == GPU_BF16 ? TOL_BF16_GRAD : tol;
    printf("  %s %s (%d, %d, %d, %d) -> %d channels, %dx%d/%d pad %d%s%s\n", name, prec_name(prec), n, ic, ih, iw, oc,
           k, k, stride, pad, need_dinp ? "" : ", no input gradient", layout_nhwc ? ", NHWC" : "");
    char err[ERRLEN], lab[128];
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)(ic * 131 + k * 7 + stride), (uint64_t)(oc * 17 + ih)));
    const int oh = (ih + 2 * pad - k) / stride + 1, ow = (iw + 2 * pad - k) / stride + 1;
    const size_t nx = (size_t)n * ic * ih * iw, nw = (size_t)oc * ic * k * k, ny = (size_t)n * oc * oh * ow;
    float *x = rnd(&r, nx, 1.0, 0.0), *w = rnd(&r, nw, sqrt(2.0 / (ic * k * k)), 0.0), *dy = rnd(&r, ny, 1.0, 0.0);
    act_round(prec, x, nx), act_round(prec, w, nw), act_round(prec, dy, ny);

    /* CPU reference on plain nchw buffers. */
    nn_ctx cc;
    cctx(&cc);
    dnnl_memory_desc_t xmd = nn_md4(n, ic, ih, iw, dnnl_nchw), ymd = nn_md4(n, oc, oh, ow, dnnl_nchw);
    conv_layer cl;
    ck_assert_msg(conv_init(&cl, &cc, name, n, ic, ih, iw, oc, k, stride, pad, xmd, ymd, NN_TRAIN, 1, err, sizeof err) == 0,
                  "%s", err);
    float *y_ref = nn_alloc(ny * sizeof(float)), *dx_ref = nn_alloc(nx * sizeof(float)), *dw_ref = nn_alloc(nw * sizeof(float));
    conv_forward(&cl, &cc, y_ref, x, w);
    conv_backward(&cl, &cc, dx_ref, dw_ref, dy, x);

    gpu_ctx gc;
    gctx(&gc, prec);
    gpu_conv_layer gl;
    ck_assert_msg(gpu_conv_init(&gl, &gc, name, n, ic, ih, iw, oc, k, stride, pad, GPU_TRAIN, need_dinp, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(gl.oh, oh);
    ck_assert_int_eq(gl.ow, ow);
    const size_t ihw = (size_t)ih * iw, ohw = (size_t)oh * ow, khw = (size_t)k * k;
    void *gx = d_act_l(prec, x, n, ic, ihw), *gw = d_act_l(prec, w, oc, ic, khw), *gdy = d_act_l(prec, dy, n, oc, ohw);
    void *gy = d_act_zero(prec, ny), *gdx = d_act_zero(prec, nx);
    float *gdw = d_zero(nw); /* fp32 in every precision */
    ck_assert_msg(gpu_conv_tune(&gl, &gc, gx, gw, gy, need_dinp ? gdx : NULL, gdw, err, sizeof err) == 0, "%s", err);
    commit(&gc);
    char algos[256];
    gpu_conv_algos(&gl, algos, sizeof algos);
    printf("    algorithms: %s\n", algos);
    gpu_conv_forward(&gl, &gc, gy, gx, gw);
    gpu_conv_backward(&gl, &gc, need_dinp ? gdx : NULL, gdw, gdy, gx, gw);
    float *y = h_act_l(prec, gy, n, oc, ohw), *dw = h_from(gdw, nw); /* dw (oc, ic, k, k) in either layout */
    /* fp32: each direction at TOL_FP32, or TOL_FP32_TRANSFORM where it runs Winograd / FFT. */
#define DIR_TOL(t, dir) (prec == GPU_FP32 && gpu_conv_transform(&gl, (dir)) ? TOL_FP32_TRANSFORM : (t))
    CHECK_REL(label(lab, sizeof lab, name, "forward"), y, y_ref, ny, DIR_TOL(tol, 0));
    CHECK_REL(label(lab, sizeof lab, name, "weight gradient"), dw, dw_ref, nw, DIR_TOL(tol_grad, 2));
    if (need_dinp) {
        float *dx = h_act_l(prec, gdx, n, ic, ihw);
        CHECK_REL(label(lab, sizeof lab, name, "input gradient"), dx, dx_ref, nx, DIR_TOL(tol_grad, 1));
        free(dx);
    }

    /* The inference layer (forward only) gives the same output. */
    gpu_conv_layer gi;
    ck_assert_msg(gpu_conv_init(&gi, &gc, name, n, ic, ih, iw, oc, k, stride, pad, GPU_INFER, 0, err, sizeof err) == 0,
                  "%s", err);
    void *gyi = d_act_zero(prec, ny);
    ck_assert_msg(gpu_conv_tune(&gi, &gc, gx, gw, gyi, NULL, NULL, err, sizeof err) == 0, "%s", err);
    commit(&gc);
    gpu_conv_forward(&gi, &gc, gyi, gx, gw);
    float *yi = h_act_l(prec, gyi, n, oc, ohw);
    CHECK_REL(label(lab, sizeof lab, name, "inference forward"), yi, y_ref, ny,
              prec == GPU_FP32 && gpu_conv_transform(&gi, 0) ? TOL_FP32_TRANSFORM : tol);
#undef DIR_TOL

    gpu_conv_free(&gl);
    gpu_conv_free(&gi);
    d_free_all();
    gpu_ctx_free(&gc);
    conv_free(&cl);
    nn_ctx_free(&cc);
    free(x), free(w), free(dy), free(y_ref), free(dx_ref), free(dw_ref), free(y), free(dw), free(yi);
}

START_TEST(test_conv_fp32) {
    conv_case("conv 3x3s1 c3", GPU_FP32, 4, 3, 16, 16, 16, 3, 1, 1, 1);
    conv_case("conv 3x3s1 c3 stem", GPU_FP32, 4, 3, 16, 16, 16, 3, 1, 1, 0);
    conv_case("conv 3x3s1 c1", GPU_FP32, 4, 1, 14, 14, 8, 3, 1, 1, 1);
    conv_case("conv 3x3s1 c1 stem", GPU_FP32, 4, 1, 14, 14, 8, 3, 1, 1, 0);
    conv_case("conv 3x3s1", GPU_FP32, 4, 16, 12, 12, 16, 3, 1, 1, 1);
    conv_case("conv 3x3s2", GPU_FP32, 4, 16, 16, 16, 32, 3, 2, 1, 1);
    conv_case("conv 3x3s2 odd", GPU_FP32, 3, 8, 9, 9, 16, 3, 2, 1, 1);
    conv_case("conv 1x1s2", GPU_FP32, 4, 16, 16, 16, 32, 1, 2, 0, 1);
    conv_case("conv 7x7s2 stem", GPU_FP32, 2, 3, 32, 32, 16, 7, 2, 3, 0);
    conv_case("conv 7x7s2", GPU_FP32, 2, 3, 33, 33, 16, 7, 2, 3, 1);
}
END_TEST

START_TEST(test_conv_tf32) {
    conv_case("conv 3x3s1 c3", GPU_TF32, 4, 3, 16, 16, 16, 3, 1, 1, 1);
    conv_case("conv 3x3s1", GPU_TF32, 4, 32, 12, 12, 32, 3, 1, 1, 1);
    conv_case("conv 3x3s2", GPU_TF32, 4, 16, 16, 16, 32, 3, 2, 1, 1);
    conv_case("conv 1x1s2", GPU_TF32, 4, 16, 16, 16, 32, 1, 2, 0, 1);
    conv_case("conv 7x7s2 stem", GPU_TF32, 2, 3, 32, 32, 16, 7, 2, 3, 0);
}
END_TEST

START_TEST(test_conv_bf16) {
    conv_case("conv 3x3s1 c3", GPU_BF16, 4, 3, 16, 16, 16, 3, 1, 1, 1);
    conv_case("conv 3x3s1 c3 stem", GPU_BF16, 4, 3, 16, 16, 16, 3, 1, 1, 0);
    conv_case("conv 3x3s1 c1", GPU_BF16, 4, 1, 14, 14, 8, 3, 1, 1, 1);
    conv_case("conv 3x3s1", GPU_BF16, 4, 16, 12, 12, 16, 3, 1, 1, 1);
    conv_case("conv 3x3s1 64", GPU_BF16, 8, 64, 8, 8, 64, 3, 1, 1, 1); /* a reduction of 576 */
    conv_case("conv 3x3s2", GPU_BF16, 4, 16, 16, 16, 32, 3, 2, 1, 1);
    conv_case("conv 3x3s2 odd", GPU_BF16, 3, 8, 9, 9, 16, 3, 2, 1, 1);
    conv_case("conv 1x1s2", GPU_BF16, 4, 16, 16, 16, 32, 1, 2, 0, 1);
    conv_case("conv 7x7s2 stem", GPU_BF16, 2, 3, 32, 32, 16, 7, 2, 3, 0);
    conv_case("conv 7x7s2", GPU_BF16, 2, 3, 33, 33, 16, 7, 2, 3, 1);
}
END_TEST

/* ---- batch normalisation ---- */

static void bn_case(const char *name, gpu_precision prec, int relu, int n, int ch, int h, int w) {
    if (skip_bf16(prec, name)) return;
    const int b16 = prec == GPU_BF16;
    const double tol = b16 ? TOL_BF16 : TOL_FP32, tol_grad = b16 ? TOL_BF16_GRAD : TOL_FP32;
    const double tol_stat = b16 ? TOL_BF16_BN : TOL_FP32;
    printf("  %s %s (%d, %d, %d, %d)%s%s\n", name, prec_name(prec), n, ch, h, w, relu ? " + relu" : "",
           layout_nhwc ? (layout_fused && relu ? ", NHWC, fused" : ", NHWC") : "");
    char err[ERRLEN], lab[128];
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)(n * 1000 + ch), (uint64_t)(h * 10 + w + relu)));
    const size_t nx = (size_t)n * ch * h * w, hw = (size_t)h * w;
    float *x = rnd(&r, nx, 2.0, 0.0);
    for (size_t i = 0; i < nx; i++) x[i] += (float)(0.5 * ((i / hw) % ch)); /* a different mean per channel */
    float *gamma = rnd(&r, (size_t)ch, 0.2, 1.0), *beta = rnd(&r, (size_t)ch, 0.2, 0.0);
    float *rm = rnd(&r, (size_t)ch, 0.1, 0.0), *rv = malloc((size_t)ch * sizeof(float));
    for (int i = 0; i < ch; i++) rv[i] = (float)(0.5 + rng_uniform(&r));
    float *dy = rnd(&r, nx, 1.0, 0.0);
    act_round(prec, x, nx), act_round(prec, dy, nx);
    float *rm_ref = malloc((size_t)ch * sizeof(float)), *rv_ref = malloc((size_t)ch * sizeof(float));
    memcpy(rm_ref, rm, (size_t)ch * sizeof(float));
    memcpy(rv_ref, rv, (size_t)ch * sizeof(float));

    nn_ctx cc;
    cctx(&cc);
    dnnl_memory_desc_t md = nn_md4(n, ch, h, w, dnnl_nchw);
    bn_layer cb, cbi;
    ck_assert_msg(bn_init(&cb, &cc, name, md, relu, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(bn_init(&cbi, &cc, name, md, relu, NN_INFER, err, sizeof err) == 0, "%s", err);
    float *y_ref = nn_alloc(nx * sizeof(float)), *dx_ref = nn_alloc(nx * sizeof(float)), *yi_ref = nn_alloc(nx * sizeof(float));
    float *dg_ref = nn_alloc((size_t)ch * sizeof(float)), *db_ref = nn_alloc((size_t)ch * sizeof(float));
    bn_forward(&cb, &cc, y_ref, x, gamma, beta, rm_ref, rv_ref);
    bn_backward(&cb, &cc, dx_ref, dg_ref, db_ref, dy, x, gamma, beta);
    bn_forward(&cbi, &cc, yi_ref, x, gamma, beta, rm_ref, rv_ref);

    gpu_ctx gc;
    gctx(&gc, prec);
    gpu_bn_layer gb, gbi;
    ck_assert_msg(gpu_bn_init(&gb, &gc, name, n, ch, h, w, relu, GPU_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(gpu_bn_init(&gbi, &gc, name, n, ch, h, w, relu, GPU_INFER, err, sizeof err) == 0, "%s", err);
    commit(&gc);
    ck_assert_int_eq(gb.io32, gbi.io32);
    ck_assert_int_eq(gb.fused, layout_nhwc && layout_fused && relu);
    ck_assert_int_eq(gbi.fused, 0);
    const gpu_precision io = io_prec(prec, gb.io32, &gc, "bn", name);
    /* γ, β and the statistics are fp32 in every precision; x, y, dy, dx are activations (of io). */
    float *gg = d_from(gamma, (size_t)ch), *gbe = d_from(beta, (size_t)ch);
    float *grm = d_from(rm, (size_t)ch), *grv = d_from(rv, (size_t)ch);
    float *gdg = d_zero((size_t)ch), *gdb = d_zero((size_t)ch);
    void *gx = d_act_l(io, x, n, ch, hw), *gdy = d_act_l(io, dy, n, ch, hw);
    void *gy = d_act_zero(io, nx), *gdx = d_act_zero(io, nx), *gyi = d_act_zero(io, nx);
    gpu_bn_forward(&gb, &gc, gy, gx, gg, gbe, grm, grv);
    gpu_bn_backward(&gb, &gc, gdx, gdg, gdb, gdy, gx, gy, gg);
    gpu_bn_forward(&gbi, &gc, gyi, gx, gg, gbe, grm, grv);
    float *y = h_act_l(io, gy, n, ch, hw), *dx = h_act_l(io, gdx, n, ch, hw), *yi = h_act_l(io, gyi, n, ch, hw);
    /* The fallback's fp32 results, rounded as model.cu's cast after the layer rounds them. */
    act_round(prec, y, nx), act_round(prec, dx, nx), act_round(prec, yi, nx);
    float *rm1 = h_from(grm, (size_t)ch), *rv1 = h_from(grv, (size_t)ch);
    float *dg = h_from(gdg, (size_t)ch), *db = h_from(gdb, (size_t)ch);
    CHECK_REL(label(lab, sizeof lab, name, "forward"), y, y_ref, nx, tol);
    CHECK_REL(label(lab, sizeof lab, name, "running mean"), rm1, rm_ref, (size_t)ch, tol_stat);
    CHECK_REL(label(lab, sizeof lab, name, "running var (unbiased)"), rv1, rv_ref, (size_t)ch, tol_stat);
    CHECK_REL(label(lab, sizeof lab, name, "input gradient"), dx, dx_ref, nx, tol_grad);
    CHECK_REL(label(lab, sizeof lab, name, "gamma gradient"), dg, dg_ref, (size_t)ch, tol_stat);
    CHECK_REL(label(lab, sizeof lab, name, "beta gradient"), db, db_ref, (size_t)ch, tol_stat);
    CHECK_REL(label(lab, sizeof lab, name, "inference forward"), yi, yi_ref, nx, tol);

    gpu_bn_free(&gb);
    gpu_bn_free(&gbi);
    d_free_all();
    gpu_ctx_free(&gc);
    bn_free(&cb);
    bn_free(&cbi);
    nn_ctx_free(&cc);
    free(x), free(gamma), free(beta), free(rm), free(rv), free(dy), free(rm_ref), free(rv_ref), free(y_ref);
    free(dx_ref), free(yi_ref), free(dg_ref), free(db_ref), free(y), free(dx), free(yi), free(rm1), free(rv1);
    free(dg), free(db);
}

START_TEST(test_bn) {
    bn_case("bn", GPU_FP32, 0, 8, 16, 6, 6);
    bn_case("bn+relu", GPU_FP32, 1, 8, 16, 6, 6);
    bn_case("bn+relu 2x2", GPU_FP32, 1, 4, 32, 2, 2);
    bn_case("bn+relu stem", GPU_FP32, 1, 2, 8, 16, 16);
    bn_case("bn 1x1", GPU_FP32, 0, 5, 24, 1, 1);
}
END_TEST

START_TEST(test_bn_bf16) {
    bn_case("bn", GPU_BF16, 0, 8, 16, 6, 6);
    bn_case("bn+relu", GPU_BF16, 1, 8, 16, 6, 6);
    bn_case("bn+relu 2x2", GPU_BF16, 1, 4, 32, 2, 2);
    bn_case("bn+relu stem", GPU_BF16, 1, 2, 8, 16, 16);
    bn_case("bn 1x1", GPU_BF16, 0, 5, 24, 1, 1);
    bn_case("bn 32x32", GPU_BF16, 0, 16, 8, 32, 32); /* 16384 values a channel */
}
END_TEST

/* ---- ReLU, add + ReLU ---- */

/* off: the views start off elements into their buffers (1: unaligned, the scalar path). In bf16
 * the references are rounded to bf16 (exact for ReLU and its mask; the sum rounded once). */
static void elementwise_case(gpu_precision prec, int n, int ch, int h, int w, int off) {
    if (skip_bf16(prec, "elementwise")) return;
    printf("  elementwise %s (%d, %d, %d, %d), offset %d\n", prec_name(prec), n, ch, h, w, off);
    char err[ERRLEN];
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)(n * ch * h * w), (uint64_t)off));
    const size_t cnt = (size_t)n * ch * h * w, nb = cnt + (size_t)off;
    float *a = rnd(&r, nb, 1.0, 0.0), *b = rnd(&r, nb, 1.0, 0.0), *dy = rnd(&r, nb, 1.0, 0.0);
    act_round(prec, a, nb), act_round(prec, b, nb), act_round(prec, dy, nb);

    nn_ctx cc;
    cctx(&cc);
    dnnl_memory_desc_t md = nn_md4(n, ch, h, w, dnnl_nchw);
    relu_layer cr;
    add_layer ca, cacc;
    ck_assert_msg(relu_init(&cr, &cc, "relu", md, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(add_init(&ca, &cc, "add_relu", md, md, 1, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(add_init(&cacc, &cc, "add", md, md, 0, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    float *relu_ref = nn_alloc(cnt * 4), *drelu_ref = nn_alloc(cnt * 4), *add_ref = nn_alloc(cnt * 4);
    float *dadd_ref = nn_alloc(cnt * 4), *acc_ref = nn_alloc(cnt * 4);
    const float *ah = a + off, *bh = b + off, *dyh = dy + off;
    relu_forward(&cr, &cc, relu_ref, ah);
    relu_backward(&cr, &cc, drelu_ref, dyh, relu_ref);
    add_forward(&ca, &cc, add_ref, ah, bh);
    add_backward(&ca, &cc, dadd_ref, dyh, add_ref);
    add_forward(&cacc, &cc, acc_ref, ah, bh);
    act_round(prec, add_ref, cnt), act_round(prec, acc_ref, cnt); /* relu, its mask: bf16 already */

    gpu_ctx gc;
    gctx(&gc, prec);
    gpu_relu_layer gr;
    gpu_add_layer ga, gacc;
    ck_assert_msg(gpu_relu_init(&gr, &gc, "relu", n, ch, h, w, GPU_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(gpu_add_init(&ga, &gc, "add_relu", n, ch, h, w, 1, GPU_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(gpu_add_init(&gacc, &gc, "add", n, ch, h, w, 0, GPU_TRAIN, err, sizeof err) == 0, "%s", err);
    void *ga_ = act_at(prec, d_act(prec, a, nb), off), *gb_ = act_at(prec, d_act(prec, b, nb), off);
    void *gdy = act_at(prec, d_act(prec, dy, nb), off);
    void *gy = act_at(prec, d_act_zero(prec, nb), off), *gdx = act_at(prec, d_act_zero(prec, nb), off);

    gpu_relu_forward(&gr, &gc, gy, ga_);
    float *t = h_act(prec, gy, cnt);
    CHECK_REL("relu forward", t, relu_ref, cnt, 0.0);
    free(t);
    gpu_relu_backward(&gr, &gc, gdx, gdy, gy);
    t = h_act(prec, gdx, cnt);
    CHECK_REL("relu backward", t, drelu_ref, cnt, 0.0);
    free(t);
    void *gcopy = act_at(prec, d_act(prec, a, nb), off); /* in place */
    gpu_relu_forward(&gr, &gc, gcopy, gcopy);
    t = h_act(prec, gcopy, cnt);
    CHECK_REL("relu forward in place", t, relu_ref, cnt, 0.0);
    free(t);

    gpu_add_forward(&ga, &gc, gy, ga_, gb_);
    t = h_act(prec, gy, cnt);
    CHECK_REL("add+relu forward", t, add_ref, cnt, 0.0);
    free(t);
    void *gdy2 = act_at(prec, d_act(prec, dy, nb), off); /* in place, as the model runs it */
    gpu_add_backward(&ga, &gc, gdy2, gdy2, gy);
    t = h_act(prec, gdy2, cnt);
    CHECK_REL("add+relu backward in place", t, dadd_ref, cnt, 0.0);
    free(t);
    void *gsum = act_at(prec, d_act(prec, a, nb), off); /* dx += other */
    gpu_add_forward(&gacc, &gc, gsum, gsum, gb_);
    t = h_act(prec, gsum, cnt);
    CHECK_REL("add in place (accumulate)", t, acc_ref, cnt, 0.0);
    free(t);
    void *gres = act_at(prec, d_act(prec, a, nb), off); /* the residual add: out == a with ReLU */
    gpu_add_forward(&ga, &gc, gres, gres, gb_);
    t = h_act(prec, gres, cnt);
    CHECK_REL("add+relu in place", t, add_ref, cnt, 0.0);
    free(t);

    d_free_all();
    gpu_ctx_free(&gc);
    relu_free(&cr);
    add_free(&ca);
    add_free(&cacc);
    nn_ctx_free(&cc);
    free(a), free(b), free(dy), free(relu_ref), free(drelu_ref), free(add_ref), free(dadd_ref), free(acc_ref);
}

START_TEST(test_elementwise) {
    for (int b16 = 0; b16 <= 1; b16++) {
        const gpu_precision p = b16 ? GPU_BF16 : GPU_FP32;
        elementwise_case(p, 2, 8, 6, 6, 0);
        elementwise_case(p, 2, 8, 6, 6, 1);
        elementwise_case(p, 3, 5, 7, 3, 0);
        elementwise_case(p, 3, 5, 7, 3, 1);
        elementwise_case(p, 64, 64, 16, 16, 0); /* larger than one grid of the grid-stride loop */
    }
}
END_TEST

/* ---- pooling ---- */

/* x (planes of hw values): in each plane distinct bf16 values ±(1 + m/128)·2^e, m in [0, 128), e in
 * [-12, 12] (3200 magnitudes, shuffled), so that no max-pool window has a tie. hw <= 3200. */
static void distinct_bf16(rng_t *r, float *x, size_t planes, size_t hw) {
    enum { NMAG = 128 * 25 };
    ck_assert_uint_le(hw, NMAG);
    static float mag[NMAG];
    for (size_t p = 0; p < planes; p++) {
        for (int i = 0; i < NMAG; i++) mag[i] = ldexpf(1.0f + (float)(i % 128) / 128.0f, i / 128 - 12);
        for (size_t i = 0; i < hw; i++) { /* the first hw of a Fisher-Yates shuffle */
            const size_t j = i + (size_t)rng_below(r, (uint64_t)(NMAG - i));
            const float t = mag[i];
            mag[i] = mag[j], mag[j] = t;
            x[p * hw + i] = rng_below(r, 2) ? mag[i] : -mag[i];
        }
    }
}

static void pool_case(const char *name, gpu_precision prec, int max, int n, int ch, int h, int w) {
    if (skip_bf16(prec, name)) return;
    const int b16 = prec == GPU_BF16;
    printf("  %s %s (%d, %d, %d, %d)%s\n", name, prec_name(prec), n, ch, h, w, layout_nhwc ? ", NHWC" : "");
    char err[ERRLEN], lab[128];
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)(n * ch), (uint64_t)(h * 100 + w + max)));
    nn_ctx cc;
    cctx(&cc);
    dnnl_memory_desc_t md = nn_md4(n, ch, h, w, dnnl_nchw);
    pool_layer cp;
    ck_assert_msg(pool_init(&cp, &cc, name, md, max, 3, 2, 1, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    const size_t nx = (size_t)n * ch * h * w, ny = (size_t)n * ch * cp.oh * cp.ow;
    float *x = rnd(&r, nx, 1.0, 0.0), *dy = rnd(&r, ny, 1.0, 0.0);
    if (b16 && max) distinct_bf16(&r, x, (size_t)n * ch, (size_t)h * w);
    act_round(prec, x, nx), act_round(prec, dy, ny);
    float *y_ref = nn_alloc(ny * 4), *dx_ref = nn_alloc(nx * 4);
    pool_forward(&cp, &cc, y_ref, x);
    pool_backward(&cp, &cc, dx_ref, dy);

    gpu_ctx gc;
    gctx(&gc, prec);
    gpu_pool_layer gp, gpi;
    ck_assert_msg(gpu_pool_init(&gp, &gc, name, n, ch, h, w, max, 3, 2, 1, GPU_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(gpu_pool_init(&gpi, &gc, name, n, ch, h, w, max, 3, 2, 1, GPU_INFER, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(gp.oh, cp.oh);
    ck_assert_int_eq(gp.ow, cp.ow);
    ck_assert_int_eq(gp.io32, gpi.io32);
    const gpu_precision io = max ? io_prec(prec, gp.io32, &gc, "pool", name) : prec;
    const size_t ihw = (size_t)h * w, ohw = (size_t)cp.oh * cp.ow;
    void *gx = d_act_l(io, x, n, ch, ihw), *gdy = d_act_l(io, dy, n, ch, ohw), *gy = d_act_zero(io, ny);
    void *gyi = d_act_zero(io, ny), *gdx = d_act_zero(io, nx);
    gpu_pool_forward(&gp, &gc, gy, gx);
    gpu_pool_backward(&gp, &gc, gdx, gdy, gx, gy);
    gpu_pool_forward(&gpi, &gc, gyi, gx);
    float *y = h_act_l(io, gy, n, ch, ohw), *dx = h_act_l(io, gdx, n, ch, ihw), *yi = h_act_l(io, gyi, n, ch, ohw);
    act_round(prec, y, ny), act_round(prec, dx, nx), act_round(prec, yi, ny); /* the fallback's casts */
    /* bf16: max pooling selects (exact); the average and every gradient are rounded once. */
    const double tol_fwd = max ? 0.0 : b16 ? TOL_BF16 : 1e-6, tol_bwd = b16 ? (max ? TOL_BF16_GRAD : TOL_BF16) : 1e-6;
    CHECK_REL(label(lab, sizeof lab, name, "forward"), y, y_ref, ny, tol_fwd);
    CHECK_REL(label(lab, sizeof lab, name, "backward"), dx, dx_ref, nx, tol_bwd);
    CHECK_REL(label(lab, sizeof lab, name, "inference forward"), yi, y_ref, ny, tol_fwd);
    gpu_pool_free(&gp);
    gpu_pool_free(&gpi);
    d_free_all();
    gpu_ctx_free(&gc);
    pool_free(&cp);
    nn_ctx_free(&cc);
    free(x), free(dy), free(y_ref), free(dx_ref), free(y), free(dx), free(yi);
}

/* Max-pool backward where windows tie (common in bf16, whose 8-bit mantissa makes equal values
 * likely): each window's gradient must reach dx once, at one of its maxima (PyTorch: the first;
 * cuDNN's CUDNN_POOLING_MAX_DETERMINISTIC does not document it), not once per tied position.
 * x takes 4 positive levels (ties in most windows), dy > 0, so a duplicated route cannot cancel:
 * Σdx = Σdy per plane (k x k / stride windows, pad), and for non-overlapping windows (stride = k,
 * no padding) per window, with exactly one position receiving it. Prints how the ties were routed. */
static void pool_ties_case(const char *name, gpu_precision prec, int n, int ch, int h, int w, int k, int stride, int pad) {
    if (skip_bf16(prec, name)) return;
    printf("  %s %s (%d, %d, %d, %d), %dx%d/%d pad %d, tied maxima\n", name, prec_name(prec), n, ch, h, w, k, k, stride, pad);
    char err[ERRLEN];
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)(n * ch * k), (uint64_t)(h * 100 + w + stride)));
    gpu_ctx gc;
    gctx(&gc, prec);
    gpu_pool_layer gp;
    ck_assert_msg(gpu_pool_init(&gp, &gc, name, n, ch, h, w, 1, k, stride, pad, GPU_TRAIN, err, sizeof err) == 0, "%s", err);
    const gpu_precision io = io_prec(prec, gp.io32, &gc, "pool", name);
    const size_t planes = (size_t)n * ch, hw = (size_t)h * w, ohw = (size_t)gp.oh * gp.ow;
    const size_t nx = planes * hw, ny = planes * ohw;
    float *x = malloc(nx * 4 + 4), *dy = malloc(ny * 4 + 4);
    for (size_t i = 0; i < nx; i++) x[i] = 1.0f + 0.25f * (float)rng_below(&r, 4);  /* exact in bf16 */
    for (size_t i = 0; i < ny; i++) dy[i] = 0.5f + (float)rng_uniform(&r);
    act_round(prec, dy, ny);
    void *gx = d_act(io, x, nx), *gdy = d_act(io, dy, ny), *gy = d_act_zero(io, ny), *gdx = d_act_zero(io, nx);
    gpu_pool_forward(&gp, &gc, gy, gx);
    gpu_pool_backward(&gp, &gc, gdx, gdy, gx, gy);
    float *dx = h_act(io, gdx, nx);
    act_round(prec, dx, nx);
    /* Windows with a tie, and the plane sums (fp64). */
    size_t tied = 0, windows = 0;
    double worst = 0.0, ratio_sum = 0.0;
    for (size_t p = 0; p < planes; p++) {
        double sdx = 0.0, sdy = 0.0;
        for (size_t i = 0; i < hw; i++) sdx += dx[p * hw + i];
        for (int oy = 0; oy < gp.oh; oy++)
            for (int ox = 0; ox < gp.ow; ox++) {
                const float g = dy[p * ohw + (size_t)oy * gp.ow + ox];
                sdy += g;
                float m = -1.0f;
                int cnt = 0, got = 0;
                for (int pass = 0; pass < 2; pass++)
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) {
                            const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                            const float v = x[p * hw + (size_t)iy * w + ix];
                            if (pass == 0 && v > m) m = v;
                            if (pass == 1 && v == m) cnt++, got += dx[p * hw + (size_t)iy * w + ix] != 0.0f;
                        }
                windows++;
                tied += cnt > 1;
                if (stride == k && pad == 0) { /* windows do not overlap: each one on its own */
                    double s = 0.0;
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) s += dx[p * hw + (size_t)(oy * k + ky) * w + ox * k + kx];
                    ck_assert_msg(got == 1 && fabs(s - g) <= (prec == GPU_BF16 ? 0.0 : 1e-6) * g,
                                  "%s: plane %zu window (%d, %d): %d tied maxima, %d of them got gradient, sum %.9g, dy %.9g",
                                  name, p, oy, ox, cnt, got, s, (double)g);
                }
            }
        const double rel = fabs(sdx - sdy) / sdy;
        if (rel > worst) worst = rel;
        ratio_sum += sdx / sdy;
    }
    /* One bf16 rounding of each dx (a sum of up to ceil(k/stride)^2 contributions): < 2^-8 each. */
    const double tol = prec == GPU_BF16 ? 4e-3 : 1e-6;
    printf("    %zu of %zu windows tied; sum(dx)/sum(dy) per plane %.6f on average, worst |rel| %.2e (<= %.0e): %s\n", tied,
           windows, ratio_sum / (double)planes, worst, tol,
           worst <= tol ? "each window's gradient routed once" : "gradient DUPLICATED across tied positions");
    ck_assert_msg(tied * 4 > windows, "%s: only %zu of %zu windows tied: the case tests nothing", name, tied, windows);
    ck_assert_msg(worst <= tol, "%s: max-pool backward does not conserve the gradient over tied maxima: sum(dx)/sum(dy) - 1 up to %.3e "
                  "(%.4f on average): ties are routed to every tied position", name, worst, ratio_sum / (double)planes);
    gpu_pool_free(&gp);
    d_free_all();
    gpu_ctx_free(&gc);
    free(x), free(dy), free(dx);
}

START_TEST(test_pool) {
    for (int b16 = 0; b16 <= 1; b16++) {
        const gpu_precision p = b16 ? GPU_BF16 : GPU_FP32;
        pool_case("maxpool 9x9", p, 1, 2, 8, 9, 9);
        pool_case("maxpool 12x12", p, 1, 2, 8, 12, 12);
        pool_case("maxpool 56x56", p, 1, 2, 4, 56, 56);
        pool_case("avgpool 7x7", p, 0, 4, 16, 7, 7);
        pool_case("avgpool 4x4", p, 0, 2, 8, 4, 4);
        pool_case("avgpool 1x1", p, 0, 3, 5, 1, 1);
        pool_case("avgpool 9x9", p, 0, 2, 64, 9, 9); /* planes of more than 32 values */
        pool_ties_case("maxpool ties", p, 2, 8, 12, 12, 3, 2, 1); /* ResNet's stem pooling */
        pool_ties_case("maxpool ties 2x2", p, 2, 8, 12, 12, 2, 2, 0);
    }
}
END_TEST

/* The bf16 fallback (cuDNN refusing bf16 BN / max pooling), forced with DSGD_BF16_FALLBACK=all:
 * those layers take fp32 tensors, which the cases above then hand them (fp32 copies of the
 * bf16-rounded inputs, outputs rounded to bf16 as model.cu's casts do), with the same
 * tolerances. Last in the suite (the variable stays set if a case fails). */
START_TEST(test_bf16_fallback) {
    setenv("DSGD_BF16_FALLBACK", "all", 1);
    expect_io32 = 1;
    bn_case("bn", GPU_BF16, 0, 8, 16, 6, 6);
    bn_case("bn+relu stem", GPU_BF16, 1, 2, 8, 16, 16);
    pool_case("maxpool 12x12", GPU_BF16, 1, 2, 8, 12, 12);
    pool_case("maxpool 56x56", GPU_BF16, 1, 2, 4, 56, 56);
    pool_ties_case("maxpool ties", GPU_BF16, 2, 8, 12, 12, 3, 2, 1);
    expect_io32 = -1;
    unsetenv("DSGD_BF16_FALLBACK");
}
END_TEST

/* ---- fully connected ---- */

static void fc_case(gpu_precision prec, int n, int nin, int nout) {
    if (skip_bf16(prec, "fc")) return;
    const int b16 = prec == GPU_BF16;
    /* bf16: logits and weight gradient fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F), input gradient bf16 */
    const double tol = prec == GPU_TF32 ? TOL_TF32 : b16 ? TOL_BF16_BLAS : TOL_FP32;
    const double tol_dx = b16 ? TOL_BF16 : tol, tol_db = b16 ? TOL_BF16_BLAS : TOL_FP32;
    printf("  fc %s (%d, %d) -> %d\n", prec_name(prec), n, nin, nout);
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)n, (uint64_t)(nin * 10000 + nout)));
    const size_t nx = (size_t)n * nin, nw = (size_t)nout * nin, ny = (size_t)n * nout;
    float *x = rnd(&r, nx, 1.0, 0.0), *w = rnd(&r, nw, 1.0 / sqrt(nin), 0.0), *b = rnd(&r, (size_t)nout, 0.1, 0.0);
    float *dy = rnd(&r, ny, 1.0, 0.0);
    act_round(prec, x, nx), act_round(prec, w, nw), act_round(prec, dy, ny); /* the bias stays fp32 */
    float *y_ref = malloc(ny * 4), *dx_ref = malloc(nx * 4), *dw_ref = malloc(nw * 4), *db_ref = malloc((size_t)nout * 4);
    fc_forward(y_ref, x, w, b, n, nin, nout);
    fc_backward(dx_ref, dw_ref, db_ref, dy, x, w, n, nin, nout);

    gpu_ctx gc;
    gctx(&gc, prec);
    void *gx = d_act(prec, x, nx), *gw = d_act(prec, w, nw), *gdy = d_act(prec, dy, ny), *gdx = d_act_zero(prec, nx);
    float *gb = d_from(b, (size_t)nout), *gy = d_zero(ny), *gdw = d_zero(nw), *gdb = d_zero((size_t)nout);
    gpu_fc_forward(&gc, gy, gx, gw, gb, n, nin, nout);
    gpu_fc_backward(&gc, gdx, gdw, gdb, gdy, gx, gw, n, nin, nout);
    float *y = h_from(gy, ny), *dx = h_act(prec, gdx, nx), *dw = h_from(gdw, nw), *db = h_from(gdb, (size_t)nout);
    CHECK_REL("fc forward", y, y_ref, ny, tol);
    CHECK_REL("fc input gradient", dx, dx_ref, nx, tol_dx);
    CHECK_REL("fc weight gradient", dw, dw_ref, nw, tol);
    CHECK_REL("fc bias gradient", db, db_ref, (size_t)nout, tol_db);
    gpu_fc_backward(&gc, NULL, gdw, gdb, gdy, gx, gw, n, nin, nout); /* without the input gradient */
    float *dw2 = h_from(gdw, nw);
    CHECK_REL("fc weight gradient (no input gradient)", dw2, dw_ref, nw, tol);
    d_free_all();
    gpu_ctx_free(&gc);
    free(x), free(w), free(b), free(dy), free(y_ref), free(dx_ref), free(dw_ref), free(db_ref), free(y), free(dx);
    free(dw), free(db), free(dw2);
}

START_TEST(test_fc) {
    fc_case(GPU_FP32, 8, 64, 10);
    fc_case(GPU_FP32, 32, 512, 1000);
    fc_case(GPU_FP32, 5, 3, 7);
    fc_case(GPU_FP32, 16, 784, 10); /* the linear model on 28x28 inputs */
    fc_case(GPU_TF32, 32, 512, 1000);
    fc_case(GPU_TF32, 8, 64, 10);
    fc_case(GPU_BF16, 8, 64, 10);
    fc_case(GPU_BF16, 32, 512, 1000);
    fc_case(GPU_BF16, 5, 3, 7);      /* rows of 6 bytes: no 16-byte alignment of any row */
    fc_case(GPU_BF16, 16, 784, 10);  /* the linear model */
}
END_TEST

/* ---- softmax cross-entropy ---- */

/* The logits, probabilities and losses are fp32 in every precision; in bf16 the logit gradient
 * (the fc layer's dout) is stored in bf16. */
static void xent_case(gpu_precision prec, int n, int k, double scale) {
    if (skip_bf16(prec, "softmax cross-entropy")) return;
    printf("  softmax cross-entropy %s (%d, %d), logits scale %g\n", prec_name(prec), n, k, scale);
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)n, (uint64_t)k));
    const size_t nl = (size_t)n * k;
    float *z = rnd(&r, nl, scale, 0.0);
    int *y = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) y[i] = (int)rng_below(&r, (uint64_t)k);
    float *p_ref = malloc(nl * 4), *l_ref = malloc((size_t)n * 4), *d_ref = malloc(nl * 4);
    const float loss_ref = softmax_xent_forward(p_ref, l_ref, z, y, n, k);
    softmax_xent_backward(d_ref, p_ref, y, n, k);

    gpu_ctx gc;
    gctx(&gc, prec);
    float *gz = d_from(z, nl), *gp = d_zero(nl), *gl = d_zero((size_t)n), *gloss = d_zero(1);
    void *gd = d_act_zero(prec, nl);
    int *gyl = d_alloc((size_t)n * sizeof(int));
    ck_assert(cudaMemcpy(gyl, y, (size_t)n * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
    gpu_softmax_xent_forward(&gc, gp, gl, gloss, gz, gyl, n, k);
    gpu_softmax_xent_backward(&gc, gd, gp, gyl, n, k);
    float *p = h_from(gp, nl), *l = h_from(gl, (size_t)n), *loss = h_from(gloss, 1), *d = h_act(prec, gd, nl);
    CHECK_REL("probabilities", p, p_ref, nl, TOL_FP32);
    CHECK_REL("per-row losses", l, l_ref, (size_t)n, TOL_FP32);
    CHECK_REL("mean loss", loss, &loss_ref, 1, TOL_FP32);
    CHECK_REL("logit gradient", d, d_ref, nl, prec == GPU_BF16 ? TOL_BF16 : TOL_FP32);
    d_free_all();
    gpu_ctx_free(&gc);
    free(z), free(y), free(p_ref), free(l_ref), free(d_ref), free(p), free(l), free(loss), free(d);
}

START_TEST(test_softmax_xent) {
    for (int b16 = 0; b16 <= 1; b16++) {
        const gpu_precision p = b16 ? GPU_BF16 : GPU_FP32;
        xent_case(p, 16, 10, 3.0);
        xent_case(p, 64, 1000, 20.0);
        xent_case(p, 5, 33, 80.0); /* exp would overflow without the row maximum */
        xent_case(p, 300, 10, 1.0); /* more rows than one block's threads (the mean) */
    }
}
END_TEST

/* ---- SGD ---- */

static void sgd_case(size_t n, int off, int nesterov, int poison) {
    printf("  sgd n %zu, offset %d, %s%s\n", n, off, nesterov ? "Nesterov" : "heavy ball",
           poison ? ", one non-finite gradient" : "");
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)n, (uint64_t)(off * 4 + nesterov * 2 + poison)));
    const size_t nb = n + (size_t)off;
    float *th = rnd(&r, nb, 1.0, 0.0), *g = rnd(&r, nb, 0.1, 0.0), *v = rnd(&r, nb, 0.1, 0.0);
    if (poison) g[off + n / 2] = poison == 1 ? INFINITY : NAN;
    float *th_ref = malloc(nb * 4), *v_ref = malloc(nb * 4);
    memcpy(th_ref, th, nb * 4);
    memcpy(v_ref, v, nb * 4);
    const float alpha = 0.05f, mu = 0.9f, lambda = 1e-4f;
    const int ok_ref = sgd_update(th_ref + off, g + off, v_ref + off, n, alpha, mu, lambda, nesterov);

    gpu_ctx gc;
    gctx(&gc, GPU_FP32);
    float *gth = d_from(th, nb), *gg = d_from(g, nb), *gv = d_from(v, nb);
    int *bad = d_alloc(sizeof(int));
    ck_assert(cudaMemset(bad, 0x7f, sizeof(int)) == cudaSuccess); /* garbage: the update must clear it */
    gpu_sgd_update(&gc, gth + off, gg + off, gv + off, n, alpha, mu, lambda, nesterov, bad);
    float *th1 = h_from(gth, nb), *v1 = h_from(gv, nb);
    int hbad = -1;
    ck_assert(cudaMemcpy(&hbad, bad, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    ck_assert_int_eq(ok_ref, !poison);
    ck_assert_msg(hbad == (poison ? 1 : 0), "non-finite flag %d, want %d", hbad, poison ? 1 : 0);
    if (!poison) {
        CHECK_REL("sgd parameters", th1, th_ref, nb, 1e-6);
        CHECK_REL("sgd velocity", v1, v_ref, nb, 1e-6);
    }
    if (off) ck_assert_msg(th1[0] == th[0] && v1[0] == v[0], "sgd wrote before its view");
    d_free_all();
    gpu_ctx_free(&gc);
    free(th), free(g), free(v), free(th_ref), free(v_ref), free(th1), free(v1);
}

START_TEST(test_sgd) {
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        sgd_case(1003, 0, nesterov, 0);
        sgd_case(1003, 1, nesterov, 0);
        sgd_case(1 << 20, 0, nesterov, 0);
    }
    sgd_case(1003, 0, 1, 1);
    sgd_case(1003, 1, 1, 2);
    sgd_case(4096, 0, 0, 1);
}
END_TEST

/* ---- fp32 <-> bf16 casts ---- */

/* n values from offset off (elements) of fresh buffers: the device's rounding against
 * test/gpu/bf16.h's, bit for bit, and the widening back (exact). */
static void cast_case(size_t n, int off) {
    printf("  casts fp32 <-> bf16, n %zu, offset %d\n", n, off);
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)n, (uint64_t)off));
    const size_t nb = n + (size_t)off;
    float *x = rnd(&r, nb, 1.0, 0.0);
    /* values that test the rounding: ties to even (down and up), the largest bf16, values that
     * round to ±Inf, ±Inf, NaN, an fp32 subnormal (to 0 with or without flushing), zeros, carries
     * into the exponent; the rest normals over a wide range */
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x7f7f7fffu, 0x7f7f8000u, 0xff7fffffu,
                                0x7f800000u, 0xff800000u, 0x7fc00001u, 0x00000001u, 0xbf7f8000u, 0x00000000u,
                                0x80000000u, 0x3effffffu, 0x407fffffu};
    const size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < nb; i++) x[i] = ldexpf(x[i], (int)rng_below(&r, 40) - 20);
    for (size_t i = 0; i < ns && off + i < nb; i++) memcpy(&x[off + i * (n / ns)], &special[i], 4);
    uint16_t *want = malloc(nb * 2 + 4), *got = malloc(nb * 2 + 4);
    bf16_pack(want, x, nb);

    gpu_ctx gc;
    gctx(&gc, GPU_BF16);
    float *gx = d_from(x, nb), *gw = d_zero(nb);
    uint16_t *g16 = d_alloc(nb * 2);
    ck_assert(cudaMemset(g16, 0xff, nb * 2) == cudaSuccess);
    gpu_f32_to_bf16(&gc, g16 + off, gx + off, n);
    ck_assert(cudaMemcpy(got, g16, nb * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t bad = 0, first = 0;
    for (size_t i = off; i < nb; i++) {
        /* NaN: any NaN will do (the payload is not specified) */
        const int nan_ok = x[i] != x[i] && (got[i] & 0x7f80u) == 0x7f80u && (got[i] & 0x007fu) != 0;
        if (got[i] != want[i] && !nan_ok && bad++ == 0) first = i;
    }
    ck_assert_msg(bad == 0, "%zu of %zu values rounded differently, first at %zu: %a -> 0x%04x, want 0x%04x", bad, n,
                  first, (double)x[first], got[first], want[first]);
    for (int i = 0; i < off; i++) ck_assert_msg(got[i] == 0xffffu, "the cast wrote before its view");
    printf("    %-44s %zu values, bit for bit\n", "fp32 -> bf16", n);

    gpu_bf16_to_f32(&gc, gw + off, g16 + off, n);
    float *back = h_from(gw, nb);
    for (size_t i = off; i < nb; i++) {
        const float v = bf16_value(got[i]);
        ck_assert_msg(memcmp(&back[i], &v, 4) == 0 || (v != v && back[i] != back[i]), "bf16 -> fp32 at %zu: %a, want %a", i,
                      (double)back[i], (double)v);
    }
    for (int i = 0; i < off; i++) ck_assert_msg(back[i] == 0.0f, "the cast wrote before its view");
    printf("    %-44s %zu values, exact\n", "bf16 -> fp32", n);
    d_free_all();
    gpu_ctx_free(&gc);
    free(x), free(want), free(got), free(back);
}

/* gpu_f32_to_bf16_segs (DSGD_GPU_CASTS=one, N16): segments of several sizes and alignments of
 * one buffer into another in one launch, bit for bit as bf16.h rounds (as gpu_f32_to_bf16), and
 * nothing written between the segments. */
static void cast_segs_case(void) {
    const size_t lens[] = {17, 1000, 1003, ((size_t)1 << 21) + 5, 8, 1, 4096};
    const int nseg = (int)(sizeof lens / sizeof lens[0]);
    size_t total = 0, max_n = 0;
    for (int i = 0; i < nseg; i++) total += lens[i] + 3, max_n = lens[i] > max_n ? lens[i] : max_n;
    printf("  casts fp32 -> bf16 in one launch: %d segments, %zu values\n", nseg, total);
    rng_t r;
    rng_seed(&r, 41);
    float *x = rnd(&r, total, 1.0, 0.0);
    for (size_t i = 0; i < total; i++) x[i] = ldexpf(x[i], (int)rng_below(&r, 40) - 20);
    uint16_t *want = malloc(total * 2 + 4), *got = malloc(total * 2 + 4);
    bf16_pack(want, x, total);
    gpu_ctx gc;
    gctx(&gc, GPU_BF16);
    float *gx = d_from(x, total);
    uint16_t *g16 = d_alloc(total * 2);
    ck_assert(cudaMemset(g16, 0xff, total * 2) == cudaSuccess);
    gpu_cast_seg segs[16];
    size_t at = 0;
    for (int i = 0; i < nseg; i++) { /* offsets 0..3 past the last segment's end: aligned and not */
        at += (size_t)(i % 4);
        segs[i] = (gpu_cast_seg){gx + at, g16 + at, lens[i], 0, 0};
        at += lens[i] + (size_t)(3 - i % 4);
    }
    gpu_cast_seg *dsegs = d_alloc(sizeof segs);
    ck_assert(cudaMemcpy(dsegs, segs, sizeof segs, cudaMemcpyHostToDevice) == cudaSuccess);
    gpu_f32_to_bf16_segs(&gc, dsegs, nseg, max_n);
    ck_assert(cudaMemcpy(got, g16, total * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t in = 0;
    for (int i = 0; i < nseg; i++) {
        const size_t lo = (size_t)(segs[i].src - gx), hi = lo + lens[i];
        for (size_t j = in; j < lo; j++) ck_assert_msg(got[j] == 0xffffu, "written between segments at %zu", j);
        for (size_t j = lo; j < hi; j++)
            ck_assert_msg(got[j] == want[j], "segment %d at %zu: %a -> 0x%04x, want 0x%04x", i, j - lo, (double)x[j], got[j],
                          want[j]);
        in = hi;
    }
    printf("    %-44s %d segments, bit for bit\n", "fp32 -> bf16, one launch", nseg);
    d_free_all();
    gpu_ctx_free(&gc);
    free(x), free(want), free(got);
}

START_TEST(test_casts) {
    if (skip_bf16(GPU_BF16, "casts")) return;
    cast_segs_case();
    cast_case(1000, 0);
    cast_case(1003, 1);
    cast_case(1003, 3);
    cast_case(17, 0);
    cast_case(((size_t)1 << 22) + 5, 0); /* larger than one grid of the grid-stride loop */
}
END_TEST

/* Layout NHWC (layers.h "Layout NHWC"): gpu_to_nhwc transposes (rows, ch, hw) fp32 into (rows,
 * hw, ch) in the activation type — fp32 exactly, bf16 rounded as bf16.h rounds — and
 * gpu_from_nhwc_f32 brings that back exactly; in bf16 a transposing segment of
 * gpu_f32_to_bf16_segs (ch > 0) writes the same bits. Shapes of the minibatch (3 channels), a 3x3
 * weight (O, I, 9), a 1x1 weight. Bit for bit. */
static void nhwc_case(gpu_precision prec, int rows, int ch, int hw) {
    const size_t n = (size_t)rows * ch * hw;
    rng_t r;
    rng_seed(&r, 43 + (uint64_t)ch);
    float *x = rnd(&r, n, 1.0, 0.0);
    gpu_ctx gc;
    gctx(&gc, prec);
    const size_t ab = gpu_act_bytes(&gc);
    float *gx = d_from(x, n);
    void *gt = d_alloc(n * ab);
    gpu_to_nhwc(&gc, gt, gx, rows, ch, hw);
    unsigned char *ht = malloc(n * ab + 4);
    ck_assert(cudaMemcpy(ht, gt, n * ab, cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t bad = 0;
    for (size_t q = 0; q < (size_t)rows; q++)
        for (size_t t = 0; t < (size_t)hw; t++)
            for (size_t k = 0; k < (size_t)ch; k++) {
                const size_t i = (q * hw + t) * ch + k;
                const float v = x[(q * ch + k) * hw + t];
                if (ab == 2 ? ((uint16_t *)ht)[i] != bf16_bits(v) : memcmp((float *)ht + i, &v, 4) != 0) bad++;
            }
    ck_assert_msg(bad == 0, "%s NCHW -> NHWC (%d, %d, %d): %zu of %zu values differ", prec_name(prec), rows, ch, hw, bad, n);
    float *gb = d_zero(n);
    gpu_from_nhwc_f32(&gc, gb, gt, rows, ch, hw);
    float *back = h_from(gb, n);
    for (size_t i = 0; i < n; i++) {
        const float v = ab == 2 ? bf16_round(x[i]) : x[i];
        if (memcmp(&back[i], &v, 4) != 0) bad++;
    }
    ck_assert_msg(bad == 0, "%s NHWC -> NCHW (%d, %d, %d): %zu of %zu values differ", prec_name(prec), rows, ch, hw, bad, n);
    if (ab == 2) {
        void *g2 = d_alloc(n * 2);
        const gpu_cast_seg seg = {gx, g2, n, ch, hw};
        gpu_cast_seg *dseg = d_alloc(sizeof seg);
        ck_assert(cudaMemcpy(dseg, &seg, sizeof seg, cudaMemcpyHostToDevice) == cudaSuccess);
        gpu_f32_to_bf16_segs(&gc, dseg, 1, n);
        uint16_t *h2 = malloc(n * 2 + 4);
        ck_assert(cudaMemcpy(h2, g2, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
        ck_assert_msg(memcmp(h2, ht, n * 2) == 0, "a transposing segment of gpu_f32_to_bf16_segs differs from gpu_to_nhwc");
        free(h2);
    }
    printf("    %-44s (%d, %d, %d) %s: there and back, bit for bit\n", "NCHW <-> NHWC", rows, ch, hw, prec_name(prec));
    d_free_all();
    gpu_ctx_free(&gc);
    free(x), free(ht), free(back);
}

/* BN + residual add + ReLU on cuDNN's fused calls (DSGD_GPU_BNRELU=fused_add: gpu_bn_layer.add, bf16
 * NHWC; test_nhwc_layers): out = relu(BN(x) + z) against the CPU's BN then the sum and ReLU
 * (rounded once), the running statistics; backward: dz = dy · [out > 0] bit for bit (the mask of
 * the GPU's own output: a sum near zero may round to either side), dx, dγ, dβ against the CPU BN's
 * backward of that dz. */
static void bn_add_case(const char *name, int n, int ch, int h, int w) {
    const gpu_precision prec = GPU_BF16;
    if (skip_bf16(prec, name)) return;
    printf("  %s bf16 (%d, %d, %d, %d), NHWC, BN+add+ReLU fused\n", name, n, ch, h, w);
    char err[ERRLEN], lab[128];
    rng_t r;
    rng_seed(&r, seed_mix((uint64_t)(n * 1000 + ch), (uint64_t)(h * 10 + w + 7)));
    const size_t nx = (size_t)n * ch * h * w, hw = (size_t)h * w;
    float *x = rnd(&r, nx, 2.0, 0.0), *z = rnd(&r, nx, 1.0, 0.0), *dy = rnd(&r, nx, 1.0, 0.0);
    for (size_t i = 0; i < nx; i++) x[i] += (float)(0.5 * ((i / hw) % ch));
    float *gamma = rnd(&r, (size_t)ch, 0.2, 1.0), *beta = rnd(&r, (size_t)ch, 0.2, 0.0);
    float *rm = rnd(&r, (size_t)ch, 0.1, 0.0), *rv = malloc((size_t)ch * sizeof(float));
    for (int i = 0; i < ch; i++) rv[i] = (float)(0.5 + rng_uniform(&r));
    act_round(prec, x, nx), act_round(prec, z, nx), act_round(prec, dy, nx);
    float *rm_ref = malloc((size_t)ch * sizeof(float)), *rv_ref = malloc((size_t)ch * sizeof(float));
    memcpy(rm_ref, rm, (size_t)ch * sizeof(float));
    memcpy(rv_ref, rv, (size_t)ch * sizeof(float));
    nn_ctx cc;
    cctx(&cc);
    bn_layer cb;
    ck_assert_msg(bn_init(&cb, &cc, name, nn_md4(n, ch, h, w, dnnl_nchw), 0, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    float *y_ref = nn_alloc(nx * sizeof(float)), *dx_ref = nn_alloc(nx * sizeof(float));
    float *dg_ref = nn_alloc((size_t)ch * sizeof(float)), *db_ref = nn_alloc((size_t)ch * sizeof(float));
    bn_forward(&cb, &cc, y_ref, x, gamma, beta, rm_ref, rv_ref);
    for (size_t i = 0; i < nx; i++) y_ref[i] = bf16_round(fmaxf(y_ref[i] + z[i], 0.0f));

    gpu_ctx gc;
    gctx(&gc, prec);
    gc.bn_fused = gc.bn_add = 1;
    gpu_bn_layer gb;
    ck_assert_msg(gpu_bn_init(&gb, &gc, name, n, ch, h, w, GPU_BN_ADD_RELU, GPU_TRAIN, err, sizeof err) == 0, "%s", err);
    commit(&gc);
    if (gb.io32) { /* cuDNN refuses bf16 BN: the model then takes no add fusion either */
        printf("    %s: BN on the bf16 fallback (no add fusion): skipped\n", name);
        ck_assert_int_eq(gb.add, 0);
    } else {
        ck_assert_int_eq(gb.add, 1);
        ck_assert_int_eq(gb.relu, 0);
        float *gg = d_from(gamma, (size_t)ch), *gbe = d_from(beta, (size_t)ch);
        float *grm = d_from(rm, (size_t)ch), *grv = d_from(rv, (size_t)ch);
        float *gdg = d_zero((size_t)ch), *gdb = d_zero((size_t)ch);
        void *gx = d_act_l(prec, x, n, ch, hw), *gz = d_act_l(prec, z, n, ch, hw), *gdy = d_act_l(prec, dy, n, ch, hw);
        void *gy = d_act_zero(prec, nx), *gdx = d_act_zero(prec, nx), *gdz = d_act_zero(prec, nx);
        gpu_bn_add_forward(&gb, &gc, gy, gx, gz, gg, gbe, grm, grv);
        gpu_bn_add_backward(&gb, &gc, gdx, gdz, gdg, gdb, gdy, gx, gy, gg);
        float *y = h_act_l(prec, gy, n, ch, hw), *dx = h_act_l(prec, gdx, n, ch, hw), *dz = h_act_l(prec, gdz, n, ch, hw);
        float *dy2 = h_act_l(prec, gdy, n, ch, hw), *rm1 = h_from(grm, (size_t)ch), *rv1 = h_from(grv, (size_t)ch);
        float *dg = h_from(gdg, (size_t)ch), *db = h_from(gdb, (size_t)ch);
        float *dz_ref = nn_alloc(nx * sizeof(float));
        size_t bad = 0;
        for (size_t i = 0; i < nx; i++) {
            dz_ref[i] = y[i] > 0.0f ? dy[i] : 0.0f;
            if (memcmp(&dz[i], &dz_ref[i], 4) != 0) bad++;
            if (memcmp(&dy2[i], &dy[i], 4) != 0) bad++;
        }
        ck_assert_msg(bad == 0, "%s: dz is not dy · [out > 0], or dy changed, at %zu of %zu values", name, bad, nx);
        bn_backward(&cb, &cc, dx_ref, dg_ref, db_ref, dz_ref, x, gamma, beta);
        CHECK_REL(label(lab, sizeof lab, name, "forward relu(bn + z)"), y, y_ref, nx, TOL_BF16);
        CHECK_REL(label(lab, sizeof lab, name, "running mean"), rm1, rm_ref, (size_t)ch, TOL_BF16_BN);
        CHECK_REL(label(lab, sizeof lab, name, "running var (unbiased)"), rv1, rv_ref, (size_t)ch, TOL_BF16_BN);
        CHECK_REL(label(lab, sizeof lab, name, "input gradient"), dx, dx_ref, nx, TOL_BF16_GRAD);
        CHECK_REL(label(lab, sizeof lab, name, "gamma gradient"), dg, dg_ref, (size_t)ch, TOL_BF16_BN);
        CHECK_REL(label(lab, sizeof lab, name, "beta gradient"), db, db_ref, (size_t)ch, TOL_BF16_BN);
        printf("    %-44s bit for bit (dy unchanged)\n", "residual gradient dz = dy [out > 0]");
        free(y), free(dx), free(dz), free(dy2), free(rm1), free(rv1), free(dg), free(db), free(dz_ref);
    }
    gpu_bn_free(&gb);
    d_free_all();
    gpu_ctx_free(&gc);
    bn_free(&cb);
    nn_ctx_free(&cc);
    free(x), free(z), free(dy), free(gamma), free(beta), free(rm), free(rv), free(rm_ref), free(rv_ref), free(y_ref);
    free(dx_ref), free(dg_ref), free(db_ref);
}

/* The layers in an NHWC context against the NCHW CPU layers, at the tolerances of the NCHW
 * cases: convolutions (the KRSC filter, the weight gradient transposed back), BN with and without
 * ReLU, BN+ReLU on cuDNN's fused calls, max and global average pooling; fp32, tf32, bf16. */
START_TEST(test_nhwc_layers) {
    layout_nhwc = 1;
    for (int p = 0; p < 3; p++) {
        const gpu_precision prec = p == 0 ? GPU_FP32 : p == 1 ? GPU_TF32 : GPU_BF16;
        conv_case("conv 3x3s1 c3", prec, 4, 3, 16, 16, 16, 3, 1, 1, 1);
        conv_case("conv 3x3s1 c3 stem", prec, 4, 3, 16, 16, 16, 3, 1, 1, 0);
        conv_case("conv 3x3s2", prec, 4, 16, 16, 16, 32, 3, 2, 1, 1);
        conv_case("conv 3x3s2 odd", prec, 3, 8, 9, 9, 16, 3, 2, 1, 1);
        conv_case("conv 1x1s2", prec, 4, 16, 16, 16, 32, 1, 2, 0, 1);
        conv_case("conv 7x7s2 stem", prec, 2, 3, 32, 32, 16, 7, 2, 3, 0);
        if (prec == GPU_TF32) continue; /* BN and pooling compute in fp32 in tf32 */
        for (int f = 0; f < 2; f++) {
            layout_fused = f;
            bn_case("bn+relu", prec, 1, 8, 16, 6, 6);
            bn_case("bn+relu stem", prec, 1, 2, 8, 16, 16);
            bn_case("bn+relu 2x2", prec, 1, 4, 32, 2, 2);
        }
        layout_fused = 0;
        if (prec == GPU_BF16) {
            bn_add_case("bn+add+relu", 8, 16, 6, 6);
            bn_add_case("bn+add+relu 2x2", 4, 32, 2, 2);
        }
        bn_case("bn", prec, 0, 8, 16, 6, 6);
        pool_case("maxpool 9x9", prec, 1, 2, 8, 9, 9);
        pool_case("maxpool 12x12", prec, 1, 2, 8, 12, 12);
        pool_case("avgpool 7x7", prec, 0, 4, 16, 7, 7);
        pool_case("avgpool 9x9", prec, 0, 2, 64, 9, 9);
    }
    layout_nhwc = layout_fused = 0;
}
END_TEST

START_TEST(test_nhwc) {
    printf("  NHWC transpositions\n");
    for (int p = 0; p < 2; p++) {
        const gpu_precision prec = p ? GPU_BF16 : GPU_FP32;
        if (p && skip_bf16(prec, "NHWC transpositions")) return;
        nhwc_case(prec, 5, 3, 49);  /* the minibatch: 3 channels of 7x7 */
        nhwc_case(prec, 16, 8, 9);  /* a 3x3 weight (O, I, 9) -> (O, 9, I) */
        nhwc_case(prec, 7, 5, 1);   /* a 1x1 weight: no transposition at all */
    }
}
END_TEST

/* ---- errors ---- */

START_TEST(test_errors) {
    char err[ERRLEN];
    gpu_ctx gc;
    ck_assert_int_ne(gpu_ctx_init(&gc, (gpu_precision)7, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "unknown GPU precision") != NULL, "%s", err);
    gpu_ctx_free(&gc);
    if (cc_major < 8) { /* bf16 refused, with the reason */
        ck_assert_int_ne(gpu_ctx_init(&gc, GPU_BF16, err, sizeof err), 0);
        printf("  expected error: %s\n", err);
        ck_assert_msg(strstr(err, "compute capability 8.0") != NULL, "%s", err);
    } else {
        ck_assert_msg(gpu_ctx_init(&gc, GPU_BF16, err, sizeof err) == 0, "gpu_ctx_init bf16: %s", err);
        ck_assert_int_eq((int)gpu_act_bytes(&gc), 2);
    }
    gpu_ctx_free(&gc);
    gctx(&gc, GPU_FP32);
    gpu_conv_layer l;
    ck_assert_int_ne(gpu_conv_init(&l, &gc, "tiny", 1, 3, 2, 2, 8, 7, 2, 0, GPU_TRAIN, 1, err, sizeof err), 0);
    printf("  expected error: %s\n", err);
    ck_assert_msg(strstr(err, "tiny") != NULL, "%s", err);
    gpu_conv_free(&l);
    gpu_bn_layer b;
    ck_assert_int_ne(gpu_bn_init(&b, &gc, "bn", 1, 8, 1, 1, 0, GPU_TRAIN, err, sizeof err), 0);
    printf("  expected error: %s\n", err);
    gpu_bn_free(&b);
    gpu_ctx_free(&gc);
}
END_TEST

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    char buf[256], err[ERRLEN];
    if (e != cudaSuccess || count < 1) {
        /* gpu_select must say so too (dsgd-run's message to a user who asked for the GPU). */
        if (gpu_select(0, 1, buf, sizeof buf, err, sizeof err) != EXIT_RUNTIME || strstr(err, "no CUDA GPU visible") != err) {
            printf("test_gpu_ops: no GPU, and gpu_select does not say so: \"%s\"\n", err);
            return 1;
        }
        if (gpu_required()) {
            printf("test_gpu_ops: FAILED: DSGD_REQUIRE_GPU is set but no GPU is usable: %s\n", err);
            return 1;
        }
        printf("test_gpu_ops: no GPU: skipped (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return 0;
    }
    gpu_version(buf, sizeof buf);
    printf("test_gpu_ops: %s\n", buf);
    if (gpu_select(0, 1, buf, sizeof buf, err, sizeof err) != 0) {
        printf("test_gpu_ops: gpu_select: %s\n", err);
        return 1;
    }
    printf("test_gpu_ops: %s\n", buf);
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        printf("test_gpu_ops: cannot read the compute capability\n");
        return 1;
    }

    Suite *s = suite_create("gpu_ops");
    TCase *tc = tcase_create("gpu_vs_cpu");
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_softmax_xent);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_fc);
    tcase_add_test(tc, test_pool);
    tcase_add_test(tc, test_bn);
    tcase_add_test(tc, test_conv_fp32);
    tcase_add_test(tc, test_conv_tf32);
    tcase_add_test(tc, test_casts);
    tcase_add_test(tc, test_nhwc);
    tcase_add_test(tc, test_nhwc_layers);
    tcase_add_test(tc, test_bn_bf16);
    tcase_add_test(tc, test_conv_bf16);
    tcase_add_test(tc, test_bf16_fallback);
    suite_add_tcase(s, tc);
    return run_suite_nofork(s);
}
