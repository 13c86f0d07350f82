/* mock_layers.c — cuda/layers.h on the CPU: every gpu_* function computed by the oneDNN layers of
 * src/nn/layers.h on plain nchw buffers (or by plain loops), for the mock build of cuda/model*.cu
 * (test/gpu/mock/README.md). Besides computing, each function enforces the contract the real
 * GPU layers rely on, so a wiring mistake in model*.cu fails here instead of on the GPU:
 *   - every pointer lies inside one device allocation of the right size (mock_cuda.c);
 *   - the aliasing rules of layers.h (no BN or convolution in place);
 *   - a convolution's backward gets the weight, a max pool's backward the input and output, of
 *     its last forward (the CPU layers keep their own copies; the GPU ones are given them);
 *   - convolutions are tuned and the workspace committed before they run;
 *   - cudnnFind's garbage: gpu_conv_tune fills its output buffers with NaN, so a model that
 *     does not clear them afterwards fails;
 *   - the layout: a layer built in an NHWC context (gpu_ctx.nhwc, layers.h "Layout NHWC") reads
 *     and writes its activations (n, h, w, c) and a convolution its weight (O, kh, kw, I): the
 *     stand-in transposes them to NCHW around the same CPU layer, so a buffer in the wrong
 *     layout gives wrong values, and an NHWC network computes bit for bit what the NCHW one does.
 *
 * GPU_BF16 is emulated: activations (and the weights given to convolutions and the fc layer) are
 * bf16 bits in 2-byte elements, widened to fp32 for the CPU layers; every result the real
 * layers store as bf16 is rounded to nearest even here too (test/gpu/bf16.h, the device's
 * __float2bfloat16_rn), and the fp32 ones (BN statistics, γ/β gradients, logits, the fc weight
 * and bias gradients) are not. A convolution's weight gradient is rounded to bf16 before it is
 * stored in fp32, as cuDNN writes it in bf16 first. Where the real layers accumulate in fp32
 * inside cuDNN or cuBLAS, the mock's oneDNN accumulates in fp32 too, so the mock's error against
 * the fp32 CPU model is what bf16 storage costs, not what a particular GPU kernel adds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../bf16.h" /* test/gpu/bf16.h */
#include "mock_capture.h"
#include "layers.h"  /* cuda/layers.h */
#include "nn/layers.h"
#include "optim/sgd.h"
#include "util/util.h"

void mock_check_dev(const void *p, size_t nbytes, const char *what);
/* A kernel launch's check, CUDA_CHECK(cudaGetLastError(), what) in layers*.cu: dies if the runtime's
 * last error (mock_cuda.c) is set. Called by every stand-in whose real twin launches a kernel of
 * ours, so an error some poll left behind stops the step here as on a GPU. */
void mock_launch_check(const char *what);

/* ---- stream capture (mock_capture.h): a call on a stream being captured is recorded and
 * replayed by cudaGraphLaunch, as a kernel node; nothing of it runs or is checked before then ---- */

enum { R_BN_ADD_F, R_BN_ADD_B, R_CONV_F, R_CONV_B, R_BN_F, R_BN_B, R_RELU_F, R_RELU_B, R_ADD_F, R_ADD_B, R_POOL_F, R_POOL_B, R_FC_F, R_FC_B, R_XENT_F, R_XENT_B, R_TO_BF16, R_TO_BF16_SEGS, R_TO_NHWC, R_FROM_NHWC, R_TO_F32, R_SGD };

static void replay(int id, const mock_arg *a);

static mock_arg cap_p(const volatile void *p) { return (mock_arg){.p = (void *)(uintptr_t)p}; }
static mock_arg cap_i(long long i) { return (mock_arg){.i = i}; }
static mock_arg cap_u(unsigned long long u) { return (mock_arg){.u = u}; }
static mock_arg cap_f(double d) { return (mock_arg){.d = d}; }
#define P(x) cap_p(x)
#define I(x) cap_i(x)
#define U(x) cap_u(x)
#define F(x) cap_f(x)
#define CAPTURE(ctx, id, ...)                                                                         \
    do {                                                                                              \
        if ((ctx) && mock_capturing((ctx)->stream)) {                                                 \
            const mock_arg a_[] = {__VA_ARGS__};                                                      \
            mock_capture_call((ctx)->stream, replay, id, a_, (int)(sizeof a_ / sizeof a_[0]));        \
            return;                                                                                   \
        }                                                                                             \
    } while (0)

/* fp32 buffers (parameters, gradients, statistics, logits) and activation-typed ones. */
#define DEV(p, count, what) mock_check_dev((p), (size_t)(count) * sizeof(float), (what))
#define DEVA(c, p, count, what) mock_check_dev((p), (size_t)(count) * (c)->act_bytes, (what))

static int bf(const gpu_ctx *c) { return c->prec == GPU_BF16; }

/* n activations at p as fp32: p itself, or (bf16) a widened copy; release with act_done. */
static float *act_in(const gpu_ctx *c, const void *p, size_t n) {
    if (!bf(c)) return (float *)p;
    float *f = xmalloc(n * sizeof(float) + 4);
    bf16_unpack(f, (const uint16_t *)p, n);
    return f;
}

static void act_done(const gpu_ctx *c, const float *f) {
    if (bf(c)) free((void *)f);
}

/* Where to compute n activations that go to p: p itself, or (bf16) an fp32 scratch that
 * act_out then rounds into p. */
static float *act_scratch(const gpu_ctx *c, void *p, size_t n) { return bf(c) ? xmalloc(n * sizeof(float) + 4) : (float *)p; }

static void act_out(const gpu_ctx *c, void *p, float *f, size_t n) {
    if (!bf(c)) return;
    bf16_pack((uint16_t *)p, f, n);
    free(f);
}

/* The values of activation i of p, and a store into q, in c's type. */
static float act_get(const gpu_ctx *c, const void *p, size_t i) {
    return bf(c) ? bf16_value(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void act_set(const gpu_ctx *c, void *q, size_t i, float v) {
    if (bf(c)) ((uint16_t *)q)[i] = bf16_bits(v);
    else ((float *)q)[i] = v;
}

/* The 4-d versions: n·ch·hw activations at p in layout nhwc (n rows, ch channels, hw positions;
 * nhwc: (n, hw, ch) in memory, else (n, ch, hw)) as fp32 NCHW for the CPU layers — p itself, or
 * a widened / transposed copy; release with act_done4. */
static float *act_in4(const gpu_ctx *c, int nhwc, const void *p, size_t n, size_t ch, size_t hw) {
    if (!nhwc) return act_in(c, p, n * ch * hw);
    float *f = xmalloc(n * ch * hw * sizeof(float) + 4);
    for (size_t r = 0; r < n; r++)
        for (size_t s = 0; s < hw; s++)
            for (size_t k = 0; k < ch; k++) f[(r * ch + k) * hw + s] = act_get(c, p, (r * hw + s) * ch + k);
    return f;
}

static void act_done4(const gpu_ctx *c, int nhwc, const float *f) {
    if (nhwc || bf(c)) free((void *)f);
}

/* Where to compute n·ch·hw NCHW activations that act_out4 then stores into p in its layout. */
static float *act_scratch4(const gpu_ctx *c, int nhwc, void *p, size_t count) {
    return nhwc || bf(c) ? xmalloc(count * sizeof(float) + 4) : (float *)p;
}

static void act_out4(const gpu_ctx *c, int nhwc, void *p, float *f, size_t n, size_t ch, size_t hw) {
    if (!nhwc) return act_out(c, p, f, n * ch * hw);
    for (size_t r = 0; r < n; r++)
        for (size_t s = 0; s < hw; s++)
            for (size_t k = 0; k < ch; k++) act_set(c, p, (r * hw + s) * ch + k, f[(r * ch + k) * hw + s]);
    free(f);
}

static nn_ctx cpu_ctx;
static int cpu_ready;

static nn_ctx *cpu(void) {
    if (!cpu_ready) {
        char err[ERRLEN];
        if (nn_ctx_init(&cpu_ctx, err, sizeof err)) DIE("mock: %s", err);
        cpu_ready = 1;
    }
    return &cpu_ctx;
}

/* layer struct -> its CPU twin */
typedef struct {
    const void *key;
    void *val;
} entry;

static entry tab[4096];
static int ntab;

static void tab_put(const void *k, void *v) {
    if (ntab >= (int)(sizeof tab / sizeof tab[0])) DIE("mock: too many layers");
    tab[ntab++] = (entry){k, v};
}

static void *tab_get(const void *k) {
    for (int i = 0; i < ntab; i++)
        if (tab[i].key == k) return tab[i].val;
    DIE("mock: layer %p unknown (not initialised, or freed)", k);
}

static void *tab_del(const void *k) {
    for (int i = 0; i < ntab; i++)
        if (tab[i].key == k) {
            void *v = tab[i].val;
            tab[i] = tab[--ntab];
            return v;
        }
    return NULL;
}

static void nan_fill(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/* NaN in either activation type (all-ones bytes are a NaN in fp32 and in bf16). */
static void nan_fill_act(const gpu_ctx *c, void *p, size_t n) { memset(p, 0xff, n * c->act_bytes); }

static float relu1(float x) { return x > 0.0f ? x : (x != x ? x : 0.0f); }

/* ---- context ---- */

int gpu_malloc(void **p, size_t nbytes, const char *what, char *err, size_t errlen) {
    if (nbytes == 0) nbytes = 256;
    if (cudaMalloc(p, nbytes) != cudaSuccess) return seterr(err, errlen, "mock: out of memory for %s", what), -1;
    memset(*p, 0, nbytes);
    return 0;
}

int gpu_ctx_init(gpu_ctx *c, gpu_precision prec, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (prec != GPU_FP32 && prec != GPU_TF32 && prec != GPU_BF16)
        return seterr(err, errlen, "unknown GPU precision %d", (int)prec), -1;
    c->prec = prec;
    c->act_bytes = prec == GPU_BF16 ? 2 : 4;
    c->n_sm = 4;
    const char *algo = getenv(GPU_ALGO_ENV); /* as layers.cu: checked, no effect on the CPU layers */
    if (algo && *algo && strcmp(algo, "find") != 0 && strcmp(algo, "heuristic") != 0)
        return seterr(err, errlen, "%s=%s: expected \"find\" or \"heuristic\"", GPU_ALGO_ENV, algo), -1;
    c->heuristic = algo && strcmp(algo, "heuristic") == 0;
    if (cudaStreamCreate(&c->stream) != cudaSuccess) return seterr(err, errlen, "mock stream"), -1;
    return gpu_malloc(&c->blas_ws, GPU_BLAS_WS_NBYTES, "cuBLAS workspace", err, errlen);
}

void gpu_ctx_reserve(gpu_ctx *c, size_t nbytes) {
    if (nbytes > c->ws_need) c->ws_need = nbytes;
}

int gpu_ctx_commit(gpu_ctx *c, char *err, size_t errlen) {
    cudaFree(c->find_ws);
    c->find_ws = NULL;
    c->find_ready = 0;
    if (c->ws_need > c->ws_nbytes || !c->ws) {
        cudaFree(c->ws);
        if (gpu_malloc(&c->ws, c->ws_need, "workspace", err, errlen)) return -1;
        c->ws_nbytes = c->ws_need;
    }
    return 0;
}

void gpu_ctx_free(gpu_ctx *c) {
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaFree(c->blas_ws);
    cudaFree(c->ws);
    cudaFree(c->find_ws);
    memset(c, 0, sizeof *c);
}

/* ---- convolution ---- */

typedef struct {
    conv_layer cl;
    const void *w_fwd; /* weight of the last forward */
} mock_conv;

int gpu_conv_init(gpu_conv_layer *l, gpu_ctx *c, const char *name, int n, int ic, int ih, int iw, int oc, int k,
                  int stride, int pad, gpu_mode mode, int need_dinp, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->need_dinp = mode == GPU_TRAIN && need_dinp;
    l->n = n, l->ic = ic, l->ih = ih, l->iw = iw, l->oc = oc, l->k = k, l->stride = stride, l->pad = pad;
    l->oh = (ih + 2 * pad - k) / stride + 1;
    l->ow = (iw + 2 * pad - k) / stride + 1;
    l->nhwc = c->nhwc;
    snprintf(l->what, sizeof l->what, "layer %s (mock conv %dx%d/%d%s)", name, k, k, stride, l->nhwc ? " nhwc" : "");
    if (l->oh < 1 || l->ow < 1) return seterr(err, errlen, "%s: input too small", l->what), -1;
    mock_conv *m = calloc(1, sizeof *m);
    dnnl_memory_desc_t xmd = nn_md4(n, ic, ih, iw, dnnl_nchw), ymd = nn_md4(n, oc, l->oh, l->ow, dnnl_nchw);
    if (conv_init(&m->cl, cpu(), name, n, ic, ih, iw, oc, k, stride, pad, xmd, ymd,
                  mode == GPU_TRAIN ? NN_TRAIN : NN_INFER, need_dinp, err, errlen))
        return free(m), -1;
    tab_put(l, m);
    return 0;
}

int gpu_conv_tune(gpu_conv_layer *l, gpu_ctx *c, const void *x, const void *w, void *y, void *dx, float *dw,
                  char *err, size_t errlen) {
    (void)err, (void)errlen;
    const size_t nx = (size_t)l->n * l->ic * l->ih * l->iw, nw = (size_t)l->oc * l->ic * l->k * l->k;
    const size_t ny = (size_t)l->n * l->oc * l->oh * l->ow;
    DEVA(c, x, nx, "tune x");
    DEVA(c, w, nw, "tune w");
    DEVA(c, y, ny, "tune y");
    nan_fill_act(c, y, ny);
    if (l->mode == GPU_TRAIN) {
        DEV(dw, nw, "tune dw");
        if (!bf(c) && !l->nhwc) nan_fill(dw, nw); /* bf16, NHWC: the real layer tunes on its own dwa */
    }
    if (l->need_dinp) {
        DEVA(c, dx, nx, "tune dx");
        nan_fill_act(c, dx, nx);
    }
    gpu_ctx_reserve(c, 1024);
    l->fwd_ws = l->bwd_data_ws = l->bwd_filter_ws = 1024;
    l->tuned = 1;
    return 0;
}

/* MOCK_CONV_TRANSFORM=1: every direction reports a transform algorithm (the tests' wider
 * tolerance path); the arithmetic stays the CPU's. */
int gpu_conv_transform(const gpu_conv_layer *l, int dir) {
    const char *v = getenv("MOCK_CONV_TRANSFORM");
    if (!v || strcmp(v, "1") != 0) return 0;
    return dir == 0 || (dir == 1 && l->need_dinp) || (dir == 2 && l->mode == GPU_TRAIN);
}

void gpu_conv_algos(const gpu_conv_layer *l, char *buf, size_t n) {
    (void)l;
    snprintf(buf, n, "mock");
}

void gpu_conv_forward(gpu_conv_layer *l, gpu_ctx *c, void *out, const void *inp, const void *weight) {
    CAPTURE(c, R_CONV_F, P(l), P(c), P(out), P(inp), P(weight));
    if (!l->tuned || c->ws_nbytes < l->fwd_ws) DIE("mock: %s runs before tuning / commit", l->what);
    mock_conv *m = tab_get(l);
    const size_t nx = (size_t)l->n * l->ic * l->ih * l->iw, nw = (size_t)l->oc * l->ic * l->k * l->k;
    const size_t ny = (size_t)l->n * l->oc * l->oh * l->ow;
    DEVA(c, out, ny, l->what);
    DEVA(c, inp, nx, l->what);
    DEVA(c, weight, nw, l->what);
    if ((const void *)out == inp) DIE("mock: %s forward in place", l->what);
    const int t = l->nhwc, khw = l->k * l->k;
    float *x = act_in4(c, t, inp, l->n, l->ic, (size_t)l->ih * l->iw), *w = act_in4(c, t, weight, l->oc, l->ic, khw);
    float *y = act_scratch4(c, t, out, ny);
    conv_forward(&m->cl, cpu(), y, x, w);
    act_out4(c, t, out, y, l->n, l->oc, (size_t)l->oh * l->ow);
    act_done4(c, t, x), act_done4(c, t, w);
    m->w_fwd = weight;
}

void gpu_conv_backward(gpu_conv_layer *l, gpu_ctx *c, void *dinp, float *dweight, const void *dout,
                       const void *inp, const void *weight) {
    CAPTURE(c, R_CONV_B, P(l), P(c), P(dinp), P(dweight), P(dout), P(inp), P(weight));
    if (bf(c)) mock_launch_check(l->what); /* bf16: the weight gradient's widening is our kernel */
    if (l->mode != GPU_TRAIN) DIE("mock: backward of inference %s", l->what);
    mock_conv *m = tab_get(l);
    if (weight != m->w_fwd) DIE("mock: %s backward with another weight than its forward", l->what);
    const size_t nx = (size_t)l->n * l->ic * l->ih * l->iw, nw = (size_t)l->oc * l->ic * l->k * l->k;
    const size_t ny = (size_t)l->n * l->oc * l->oh * l->ow;
    DEV(dweight, nw, l->what);
    DEVA(c, dout, ny, l->what);
    DEVA(c, inp, nx, l->what);
    const int data = l->need_dinp && dinp;
    if (data) {
        DEVA(c, dinp, nx, l->what);
        if ((const void *)dinp == dout || (const void *)dinp == inp) DIE("mock: %s backward in place", l->what);
    }
    const int t = l->nhwc;
    float *dy = act_in4(c, t, dout, l->n, l->oc, (size_t)l->oh * l->ow), *x = act_in4(c, t, inp, l->n, l->ic, (size_t)l->ih * l->iw);
    float *dx = data ? act_scratch4(c, t, dinp, nx) : NULL;
    conv_backward(&m->cl, cpu(), dx, dweight, dy, x); /* dweight (oc, ic, k, k) fp32 in either layout */
    if (bf(c)) bf16_round_all(dweight, nw); /* cuDNN writes it in bf16 (x's type), then it is widened */
    if (data) act_out4(c, t, dinp, dx, l->n, l->ic, (size_t)l->ih * l->iw);
    act_done4(c, t, dy), act_done4(c, t, x);
}

void gpu_conv_free(gpu_conv_layer *l) {
    mock_conv *m = tab_del(l);
    if (m) {
        conv_free(&m->cl);
        free(m);
    }
    memset(l, 0, sizeof *l);
}

/* ---- the bf16 fallback (layers.h gpu_bf16_fallback): MOCK_CUDNN_REFUSE_BF16=bn,pool makes this
 * "cuDNN" refuse bf16 BN / max pooling, as DSGD_BF16_FALLBACK forces it in layers.cu; such a layer
 * then takes fp32 tensors (io32) and cuda/model.cu casts around it. ---- */

static int mock_io32(gpu_ctx *c, const char *kind) {
    if (!bf(c)) return 0;
    char *why = strcmp(kind, "bn") == 0 ? c->bn_fallback : c->pool_fallback;
    const char *refuse = getenv("MOCK_CUDNN_REFUSE_BF16"), *force = getenv("DSGD_BF16_FALLBACK");
    if (!why[0] && refuse && strstr(refuse, kind)) snprintf(why, 160, "mock cuDNN refuses bf16 %s", kind);
    if (!why[0] && force && *force && strcmp(force, "0") != 0 &&
        (strcmp(force, "1") == 0 || strcmp(force, "all") == 0 || strstr(force, kind)))
        snprintf(why, 160, "DSGD_BF16_FALLBACK=%s", force);
    return why[0] != '\0';
}

const char *gpu_bf16_fallback(const gpu_ctx *c, const char *kind) {
    return strcmp(kind, "bn") == 0 ? c->bn_fallback : c->pool_fallback;
}

/* The context an io32 layer runs in: c with fp32 activations. */
static const gpu_ctx *ctx_of(const gpu_ctx *c, int io32, gpu_ctx *tmp) {
    if (!io32) return c;
    *tmp = *c;
    tmp->prec = GPU_FP32;
    tmp->act_bytes = sizeof(float);
    return tmp;
}

/* ---- batch normalisation (CPU BN without ReLU, ReLU and its mask here, as the GPU does) ---- */

typedef struct {
    bn_layer cl;
    float *beta0;
    long gen; /* fused: forwards run; the last one's number is in the reserve space */
} mock_bn;

/* The fused BN+ReLU's "workspace" and reserve space (layers.h gpu_bn_layer.fused): sizes that the
 * model must provide, as cuDNN's are. */
#define MOCK_BN_WS 768
#define MOCK_BN_RESERVE 64

int gpu_bn_init(gpu_bn_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu, gpu_mode mode,
                char *err, size_t errlen) {
    const int want_add = relu == GPU_BN_ADD_RELU; /* as layers_norm.cu */
    if (want_add) relu = 0;
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->relu = relu;
    l->n = n, l->c = ch, l->h = h, l->w = w;
    l->count = (size_t)n * ch * h * w;
    l->nhwc = c->nhwc;
    snprintf(l->what, sizeof l->what, "layer %s (mock bn%s)", name, l->nhwc ? " nhwc" : "");
    l->io32 = mock_io32(c, "bn");
    if (mode == GPU_TRAIN && (long)n * h * w < 2) return seterr(err, errlen, "%s: one value per channel", l->what), -1;
    mock_bn *m = calloc(1, sizeof *m);
    m->beta0 = calloc((size_t)ch, sizeof(float));
    dnnl_memory_desc_t md = nn_md4(n, ch, h, w, dnnl_nchw);
    if (bn_init(&m->cl, cpu(), name, md, 0, mode == GPU_TRAIN ? NN_TRAIN : NN_INFER, err, errlen))
        return free(m->beta0), free(m), -1;
    tab_put(l, m);
    l->add = want_add && c->bn_fused && c->bn_add && mode == GPU_TRAIN && l->nhwc && bf(c) && !l->io32; /* as layers_norm.cu */
    l->fused = (c->bn_fused && relu && mode == GPU_TRAIN && l->nhwc) || l->add;
    if (l->fused) {
        l->ws_need = MOCK_BN_WS;
        gpu_ctx_reserve(c, l->ws_need);
        l->reserve_nbytes = MOCK_BN_RESERVE;
        if (gpu_malloc(&l->reserve, l->reserve_nbytes, l->what, err, errlen)) return -1;
    }
    return 0;
}

/* The fused calls' checks: the workspace committed, the reserve space the layer's own. */
static void bn_fused_check(const gpu_bn_layer *l, const gpu_ctx *c) {
    if (c->ws_nbytes < l->ws_need) DIE("mock: %s (fused) runs before gpu_ctx_commit", l->what);
    mock_check_dev(l->reserve, l->reserve_nbytes, l->what);
}

void gpu_bn_forward(gpu_bn_layer *l, gpu_ctx *c0, void *out, const void *inp, const float *gamma,
                    const float *beta, float *running_mean, float *running_var) {
    CAPTURE(c0, R_BN_F, P(l), P(c0), P(out), P(inp), P(gamma), P(beta), P(running_mean), P(running_var));
    if (l->add) DIE("mock: gpu_bn_forward on %s, built for the fused residual add", l->what);
    gpu_ctx tmp;
    const gpu_ctx *c = ctx_of(c0, l->io32, &tmp);
    if (l->relu && !l->fused) mock_launch_check(l->what); /* the ReLU after BN (or its mask) is our kernel */
    mock_bn *m = tab_get(l);
    const size_t n = l->count;
    if (l->fused) { /* cudnnBatchNormalizationForwardTrainingEx: writes the reserve space */
        bn_fused_check(l, c);
        m->gen++;
        memcpy(l->reserve, &m->gen, sizeof m->gen);
        l->beta_fwd = beta;
    }
    DEVA(c, out, n, l->what);
    DEVA(c, inp, n, l->what);
    DEV(gamma, l->c, l->what);
    DEV(beta, l->c, l->what);
    DEV(running_mean, l->c, l->what);
    DEV(running_var, l->c, l->what);
    if ((const void *)out == inp) DIE("mock: %s forward in place", l->what);
    const int t = l->nhwc;
    const size_t hw = (size_t)l->h * l->w;
    float *x = act_in4(c, t, inp, l->n, l->c, hw), *y = act_scratch4(c, t, out, n);
    bn_forward(&m->cl, cpu(), y, x, gamma, beta, running_mean, running_var);
    if (l->relu) /* the real layer rounds BN's output, then applies ReLU to it: the same values */
        for (size_t i = 0; i < n; i++) y[i] = relu1(y[i]);
    act_out4(c, t, out, y, l->n, l->c, hw);
    act_done4(c, t, x);
}

void gpu_bn_backward(gpu_bn_layer *l, gpu_ctx *c0, void *dinp, float *dgamma, float *dbeta, void *dout,
                     const void *inp, const void *out, const float *gamma) {
    CAPTURE(c0, R_BN_B, P(l), P(c0), P(dinp), P(dgamma), P(dbeta), P(dout), P(inp), P(out), P(gamma));
    if (l->add) DIE("mock: gpu_bn_backward on %s, built for the fused residual add", l->what);
    gpu_ctx tmp;
    const gpu_ctx *c = ctx_of(c0, l->io32, &tmp);
    if (l->relu && !l->fused) mock_launch_check(l->what); /* the ReLU after BN (or its mask) is our kernel */
    if (l->mode != GPU_TRAIN) DIE("mock: backward of inference %s", l->what);
    mock_bn *m = tab_get(l);
    if (l->fused) { /* cudnnBatchNormalizationBackwardEx: the reserve space and β of the last forward */
        bn_fused_check(l, c);
        long g;
        memcpy(&g, l->reserve, sizeof g);
        if (m->gen == 0 || g != m->gen) DIE("mock: %s (fused) backward without its forward's reserve space", l->what);
        DEV(l->beta_fwd, l->c, l->what);
    }
    const size_t n = l->count;
    DEVA(c, dinp, n, l->what);
    DEVA(c, dout, n, l->what);
    DEVA(c, inp, n, l->what);
    DEV(dgamma, l->c, l->what);
    DEV(dbeta, l->c, l->what);
    DEV(gamma, l->c, l->what);
    if (dinp == dout || (const void *)dinp == inp) DIE("mock: %s backward in place", l->what);
    if (l->relu && !l->fused) { /* dout masked in place, as the real layer does (elementwise: in either layout) */
        DEVA(c, out, n, l->what);
        for (size_t i = 0; i < n; i++) act_set(c, dout, i, act_get(c, out, i) > 0.0f ? act_get(c, dout, i) : 0.0f);
    }
    const int t = l->nhwc;
    const size_t hw = (size_t)l->h * l->w;
    float *dy = act_in4(c, t, dout, l->n, l->c, hw), *x = act_in4(c, t, inp, l->n, l->c, hw);
    if (l->fused) { /* the mask inside cuDNN: on a copy, dout stays as it is (NHWC: dy is a copy) */
        DEVA(c, out, n, l->what);
        float *y = act_in4(c, t, out, l->n, l->c, hw);
        for (size_t i = 0; i < n; i++) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
        act_done4(c, t, y);
    }
    float *dx = act_scratch4(c, t, dinp, n);
    bn_backward(&m->cl, cpu(), dx, dgamma, dbeta, dy, x, gamma, m->beta0);
    act_out4(c, t, dinp, dx, l->n, l->c, hw);
    act_done4(c, t, dy), act_done4(c, t, x);
}

/* BN + residual add + ReLU (gpu_bn_layer.add): out = relu(BN(inp) + z), the sum rounded to bf16
 * once, as cuDNN's fused kernel does; MOCK_BN_ADD_ROUND=twice rounds BN's output to bf16 first, as
 * gpu_bn_forward then gpu_add_forward do, so that test_gpu_model can hold the fused wiring to the
 * unfused one bit for bit. The backward: dz = dout · [out > 0] (exact), dinp = BN'(dz); dout as it
 * is. Both count in mock_bn_add_calls(). */
static long n_bn_add;
long mock_bn_add_calls(void) { return n_bn_add; }

void gpu_bn_add_forward(gpu_bn_layer *l, gpu_ctx *c, void *out, const void *inp, const void *z, const float *gamma,
                        const float *beta, float *running_mean, float *running_var) {
    CAPTURE(c, R_BN_ADD_F, P(l), P(c), P(out), P(inp), P(z), P(gamma), P(beta), P(running_mean), P(running_var));
    if (!l->add) DIE("mock: gpu_bn_add_forward on %s, not built for the residual add", l->what);
    mock_bn *m = tab_get(l);
    const size_t n = l->count;
    bn_fused_check(l, c);
    m->gen++;
    memcpy(l->reserve, &m->gen, sizeof m->gen);
    l->beta_fwd = beta;
    DEVA(c, out, n, l->what);
    DEVA(c, inp, n, l->what);
    DEVA(c, z, n, l->what);
    DEV(gamma, l->c, l->what);
    DEV(beta, l->c, l->what);
    DEV(running_mean, l->c, l->what);
    DEV(running_var, l->c, l->what);
    if ((const void *)out == inp || (const void *)out == z) DIE("mock: %s forward in place", l->what);
    const int t = l->nhwc;
    const size_t hw = (size_t)l->h * l->w;
    const char *r = getenv("MOCK_BN_ADD_ROUND");
    const int twice = r && strcmp(r, "twice") == 0;
    float *x = act_in4(c, t, inp, l->n, l->c, hw), *zz = act_in4(c, t, z, l->n, l->c, hw), *y = act_scratch4(c, t, out, n);
    bn_forward(&m->cl, cpu(), y, x, gamma, beta, running_mean, running_var);
    for (size_t i = 0; i < n; i++) y[i] = relu1((twice ? bf16_round(y[i]) : y[i]) + zz[i]);
    act_out4(c, t, out, y, l->n, l->c, hw);
    act_done4(c, t, x), act_done4(c, t, zz);
    n_bn_add++;
}

void gpu_bn_add_backward(gpu_bn_layer *l, gpu_ctx *c, void *dinp, void *dz, float *dgamma, float *dbeta,
                         const void *dout, const void *inp, const void *out, const float *gamma) {
    CAPTURE(c, R_BN_ADD_B, P(l), P(c), P(dinp), P(dz), P(dgamma), P(dbeta), P(dout), P(inp), P(out), P(gamma));
    if (!l->add) DIE("mock: gpu_bn_add_backward on %s, not built for the residual add", l->what);
    mock_bn *m = tab_get(l);
    bn_fused_check(l, c);
    long g;
    memcpy(&g, l->reserve, sizeof g);
    if (m->gen == 0 || g != m->gen) DIE("mock: %s (fused add) backward without its forward's reserve space", l->what);
    DEV(l->beta_fwd, l->c, l->what);
    const size_t n = l->count;
    DEVA(c, dinp, n, l->what);
    DEVA(c, dz, n, l->what);
    DEVA(c, dout, n, l->what);
    DEVA(c, inp, n, l->what);
    DEVA(c, out, n, l->what);
    DEV(dgamma, l->c, l->what);
    DEV(dbeta, l->c, l->what);
    DEV(gamma, l->c, l->what);
    if (dinp == dout || (const void *)dinp == inp || dinp == dz || (const void *)dz == dout || (const void *)dz == inp)
        DIE("mock: %s (fused add) backward in place", l->what);
    for (size_t i = 0; i < n; i++) act_set(c, dz, i, act_get(c, out, i) > 0.0f ? act_get(c, dout, i) : 0.0f);
    const int t = l->nhwc;
    const size_t hw = (size_t)l->h * l->w;
    float *dy = act_in4(c, t, dz, l->n, l->c, hw), *x = act_in4(c, t, inp, l->n, l->c, hw);
    float *dx = act_scratch4(c, t, dinp, n);
    bn_backward(&m->cl, cpu(), dx, dgamma, dbeta, dy, x, gamma, m->beta0);
    act_out4(c, t, dinp, dx, l->n, l->c, hw);
    act_done4(c, t, dy), act_done4(c, t, x);
    n_bn_add++;
}

void gpu_bn_free(gpu_bn_layer *l) {
    cudaFree(l->reserve);
    mock_bn *m = tab_del(l);
    if (m) {
        bn_free(&m->cl);
        free(m->beta0);
        free(m);
    }
    memset(l, 0, sizeof *l);
}

/* ---- ReLU, add ---- */

int gpu_relu_init(gpu_relu_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, gpu_mode mode,
                  char *err, size_t errlen) {
    (void)c, (void)err, (void)errlen;
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (mock relu)", name);
    return 0;
}

void gpu_relu_forward(gpu_relu_layer *l, gpu_ctx *c, void *out, const void *inp) {
    CAPTURE(c, R_RELU_F, P(l), P(c), P(out), P(inp));
    mock_launch_check(l->what);
    DEVA(c, out, l->count, l->what);
    DEVA(c, inp, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) act_set(c, out, i, relu1(act_get(c, inp, i)));
}

void gpu_relu_backward(gpu_relu_layer *l, gpu_ctx *c, void *dinp, const void *dout, const void *out) {
    CAPTURE(c, R_RELU_B, P(l), P(c), P(dinp), P(dout), P(out));
    mock_launch_check(l->what);
    DEVA(c, dinp, l->count, l->what);
    DEVA(c, dout, l->count, l->what);
    DEVA(c, out, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) act_set(c, dinp, i, act_get(c, out, i) > 0.0f ? act_get(c, dout, i) : 0.0f);
}

int gpu_add_init(gpu_add_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu,
                 gpu_mode mode, char *err, size_t errlen) {
    (void)c, (void)err, (void)errlen;
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->relu = relu;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (mock add)", name);
    return 0;
}

void gpu_add_forward(gpu_add_layer *l, gpu_ctx *c, void *out, const void *a, const void *b) {
    CAPTURE(c, R_ADD_F, P(l), P(c), P(out), P(a), P(b));
    mock_launch_check(l->what);
    DEVA(c, out, l->count, l->what);
    DEVA(c, a, l->count, l->what);
    DEVA(c, b, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) {
        const float s = act_get(c, a, i) + act_get(c, b, i);
        act_set(c, out, i, l->relu ? relu1(s) : s);
    }
}

void gpu_add_backward(gpu_add_layer *l, gpu_ctx *c, void *dsum, const void *dout, const void *out) {
    CAPTURE(c, R_ADD_B, P(l), P(c), P(dsum), P(dout), P(out));
    mock_launch_check(l->what);
    if (!l->relu) DIE("mock: add backward without relu");
    DEVA(c, dsum, l->count, l->what);
    DEVA(c, dout, l->count, l->what);
    DEVA(c, out, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) act_set(c, dsum, i, act_get(c, out, i) > 0.0f ? act_get(c, dout, i) : 0.0f);
}

/* ---- pooling ---- */

typedef struct {
    pool_layer cl;
    const void *x_fwd, *y_fwd;
    int k, stride, pad;
} mock_pool;

/* MOCK_POOL_TIES=every: max-pool backward sends a window's gradient to every position that ties
 * for its maximum (what cuDNN might do; test_gpu_ops's pool_ties_case must then fail). */
static void pool_backward_every_tie(const gpu_pool_layer *l, const mock_pool *m, float *dx, const float *dy, const float *x) {
    const size_t hw = (size_t)l->ih * l->iw, ohw = (size_t)l->oh * l->ow;
    memset(dx, 0, (size_t)l->n * l->c * hw * sizeof(float));
    for (size_t p = 0; p < (size_t)l->n * l->c; p++)
        for (int oy = 0; oy < l->oh; oy++)
            for (int ox = 0; ox < l->ow; ox++) {
                float mx = -INFINITY;
                for (int pass = 0; pass < 2; pass++)
                    for (int ky = 0; ky < m->k; ky++)
                        for (int kx = 0; kx < m->k; kx++) {
                            const int iy = oy * m->stride - m->pad + ky, ix = ox * m->stride - m->pad + kx;
                            if (iy < 0 || iy >= l->ih || ix < 0 || ix >= l->iw) continue;
                            const size_t i = p * hw + (size_t)iy * l->iw + ix;
                            if (pass == 0 && x[i] > mx) mx = x[i];
                            if (pass == 1 && x[i] == mx) dx[i] += dy[p * ohw + (size_t)oy * l->ow + ox];
                        }
            }
}

int gpu_pool_init(gpu_pool_layer *l, gpu_ctx *c, const char *name, int n, int ch, int ih, int iw, int max, int k,
                  int stride, int pad, gpu_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->max = max;
    l->n = n, l->c = ch, l->ih = ih, l->iw = iw;
    l->oh = max ? (ih + 2 * pad - k) / stride + 1 : 1;
    l->ow = max ? (iw + 2 * pad - k) / stride + 1 : 1;
    l->nhwc = c->nhwc;
    snprintf(l->what, sizeof l->what, "layer %s (mock pool%s)", name, l->nhwc ? " nhwc" : "");
    if (!max) return 0;
    l->io32 = mock_io32(c, "pool");
    mock_pool *m = calloc(1, sizeof *m);
    m->k = k, m->stride = stride, m->pad = pad;
    dnnl_memory_desc_t md = nn_md4(n, ch, ih, iw, dnnl_nchw);
    if (pool_init(&m->cl, cpu(), name, md, 1, k, stride, pad, mode == GPU_TRAIN ? NN_TRAIN : NN_INFER, err, errlen))
        return free(m), -1;
    tab_put(l, m);
    return 0;
}

void gpu_pool_forward(gpu_pool_layer *l, gpu_ctx *c0, void *out, const void *inp) {
    CAPTURE(c0, R_POOL_F, P(l), P(c0), P(out), P(inp));
    gpu_ctx tmp;
    const gpu_ctx *c = ctx_of(c0, l->io32, &tmp);
    if (!l->max) mock_launch_check(l->what); /* global average pooling is our kernel */
    const size_t nx = (size_t)l->n * l->c * l->ih * l->iw, ny = (size_t)l->n * l->c * l->oh * l->ow;
    DEVA(c, out, ny, l->what);
    DEVA(c, inp, nx, l->what);
    if (l->max) {
        mock_pool *m = tab_get(l);
        const int t = l->nhwc;
        float *x = act_in4(c, t, inp, l->n, l->c, (size_t)l->ih * l->iw), *y = act_scratch4(c, t, out, ny);
        pool_forward(&m->cl, cpu(), y, x);
        act_out4(c, t, out, y, l->n, l->c, (size_t)l->oh * l->ow);
        act_done4(c, t, x);
        m->x_fwd = inp, m->y_fwd = out;
        return;
    }
    /* Plane p = (b, k) at element b·hw·c + i·c + k (NHWC) or p·hw + i (NCHW); the same order of
     * the sum in both, so the layouts agree bit for bit here. */
    const size_t hw = (size_t)l->ih * l->iw, ch = (size_t)l->c;
    for (size_t p = 0; p < (size_t)l->n * l->c; p++) {
        float s = 0.0f;
        for (size_t i = 0; i < hw; i++) s += act_get(c, inp, l->nhwc ? (p / ch * hw + i) * ch + p % ch : p * hw + i);
        act_set(c, out, p, s / (float)hw);
    }
}

void gpu_pool_backward(gpu_pool_layer *l, gpu_ctx *c0, void *dinp, const void *dout, const void *inp,
                       const void *out) {
    CAPTURE(c0, R_POOL_B, P(l), P(c0), P(dinp), P(dout), P(inp), P(out));
    gpu_ctx tmp;
    const gpu_ctx *c = ctx_of(c0, l->io32, &tmp);
    if (!l->max) mock_launch_check(l->what); /* global average pooling is our kernel */
    if (l->mode != GPU_TRAIN) DIE("mock: backward of inference %s", l->what);
    const size_t nx = (size_t)l->n * l->c * l->ih * l->iw, ny = (size_t)l->n * l->c * l->oh * l->ow;
    DEVA(c, dinp, nx, l->what);
    DEVA(c, dout, ny, l->what);
    if (l->max) {
        mock_pool *m = tab_get(l);
        if (inp != m->x_fwd || out != m->y_fwd) DIE("mock: %s backward without its forward's input and output", l->what);
        const int t = l->nhwc;
        const size_t ihw = (size_t)l->ih * l->iw;
        float *dy = act_in4(c, t, dout, l->n, l->c, (size_t)l->oh * l->ow), *dx = act_scratch4(c, t, dinp, nx);
        const char *ties = getenv("MOCK_POOL_TIES");
        if (ties && strcmp(ties, "every") == 0) {
            float *x = act_in4(c, t, inp, l->n, l->c, ihw);
            pool_backward_every_tie(l, m, dx, dy, x);
            act_done4(c, t, x);
        } else
            pool_backward(&m->cl, cpu(), dx, dy);
        act_out4(c, t, dinp, dx, l->n, l->c, ihw);
        act_done4(c, t, dy);
        return;
    }
    const size_t hw = (size_t)l->ih * l->iw, ch = (size_t)l->c;
    for (size_t i = 0; i < nx; i++) /* element i's plane: (b, k) */
        act_set(c, dinp, i, act_get(c, dout, l->nhwc ? i / (hw * ch) * ch + i % ch : i / hw) * (1.0f / (float)hw));
}

void gpu_pool_free(gpu_pool_layer *l) {
    mock_pool *m = tab_del(l);
    if (m) {
        pool_free(&m->cl);
        free(m);
    }
    memset(l, 0, sizeof *l);
}

/* ---- fc, loss, SGD ---- */

void gpu_fc_forward(gpu_ctx *c, float *out, const void *inp, const void *weight, const float *bias, int n,
                    int nin, int nout) {
    CAPTURE(c, R_FC_F, P(c), P(out), P(inp), P(weight), P(bias), I(n), I(nin), I(nout));
    mock_launch_check("fc forward bias");
    const size_t nx = (size_t)n * nin, nw = (size_t)nout * nin;
    DEV(out, (size_t)n * nout, "fc out");
    DEVA(c, inp, nx, "fc inp");
    DEVA(c, weight, nw, "fc weight");
    DEV(bias, nout, "fc bias");
    float *x = act_in(c, inp, nx), *w = act_in(c, weight, nw);
    fc_forward(out, x, w, bias, n, nin, nout); /* fp32 logits (cublasGemmEx with C CUDA_R_32F) */
    act_done(c, x), act_done(c, w);
}

void gpu_fc_backward(gpu_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                     const void *weight, int n, int nin, int nout) {
    CAPTURE(c, R_FC_B, P(c), P(dinp), P(dweight), P(dbias), P(dout), P(inp), P(weight), I(n), I(nin), I(nout));
    mock_launch_check("fc bias gradient");
    const size_t nx = (size_t)n * nin, nw = (size_t)nout * nin, ny = (size_t)n * nout;
    if (dinp) DEVA(c, dinp, nx, "fc dinp");
    DEV(dweight, nw, "fc dweight");
    DEV(dbias, nout, "fc dbias");
    DEVA(c, dout, ny, "fc dout");
    DEVA(c, inp, nx, "fc inp");
    DEVA(c, weight, nw, "fc weight");
    float *dy = act_in(c, dout, ny), *x = act_in(c, inp, nx), *w = act_in(c, weight, nw);
    float *dx = dinp ? act_scratch(c, dinp, nx) : NULL;
    fc_backward(dx, dweight, dbias, dy, x, w, n, nin, nout); /* dweight, dbias fp32 */
    if (dinp) act_out(c, dinp, dx, nx);
    act_done(c, dy), act_done(c, x), act_done(c, w);
}

void gpu_softmax_xent_forward(gpu_ctx *c, float *probs, float *losses, float *loss, const float *logits,
                              const int *y, int n, int k) {
    CAPTURE(c, R_XENT_F, P(c), P(probs), P(losses), P(loss), P(logits), P(y), I(n), I(k));
    mock_launch_check("softmax cross-entropy forward");
    (void)c;
    DEV(probs, (size_t)n * k, "xent probs");
    DEV(losses, n, "xent losses");
    DEV(loss, 1, "xent loss");
    DEV(logits, (size_t)n * k, "xent logits");
    mock_check_dev(y, (size_t)n * sizeof(int), "xent labels");
    *loss = softmax_xent_forward(probs, losses, logits, y, n, k);
}

void gpu_softmax_xent_backward(gpu_ctx *c, void *dlogits, const float *probs, const int *y, int n, int k) {
    CAPTURE(c, R_XENT_B, P(c), P(dlogits), P(probs), P(y), I(n), I(k));
    mock_launch_check("softmax cross-entropy backward");
    const size_t nl = (size_t)n * k;
    DEVA(c, dlogits, nl, "xent dlogits");
    DEV(probs, nl, "xent probs");
    mock_check_dev(y, (size_t)n * sizeof(int), "xent labels");
    float *d = act_scratch(c, dlogits, nl);
    softmax_xent_backward(d, probs, y, n, k);
    act_out(c, dlogits, d, nl);
}

/* ---- precision casts ---- */

void gpu_f32_to_bf16(gpu_ctx *c, void *dst, const float *src, size_t n) {
    CAPTURE(c, R_TO_BF16, P(c), P(dst), P(src), U(n));
    (void)c;
    if (n == 0) return;
    mock_launch_check("the fp32 -> bf16 cast");
    mock_check_dev(dst, n * 2, "bf16 cast destination");
    DEV(src, n, "bf16 cast source");
    bf16_pack((uint16_t *)dst, src, n);
}

void gpu_f32_to_bf16_segs(gpu_ctx *c, const gpu_cast_seg *segs, int nseg, size_t max_n) {
    CAPTURE(c, R_TO_BF16_SEGS, P(c), P(segs), I(nseg), U(max_n));
    if (nseg <= 0 || max_n == 0) return;
    mock_launch_check("the fp32 -> bf16 casts (one launch)");
    mock_check_dev(segs, (size_t)nseg * sizeof *segs, "cast segment table"); /* read on the device */
    for (int i = 0; i < nseg; i++) {
        const gpu_cast_seg *sg = &segs[i];
        if (sg->n > max_n) DIE("mock: gpu_f32_to_bf16_segs: segment %d has %zu > max_n %zu", i, sg->n, max_n);
        if (sg->ch > 0) {
            if (!bf(c)) DIE("mock: gpu_f32_to_bf16_segs in an fp32 context");
            gpu_to_nhwc(c, sg->dst, sg->src, (int)(sg->n / ((size_t)sg->ch * sg->hw)), sg->ch, sg->hw);
        } else {
            gpu_f32_to_bf16(c, sg->dst, sg->src, sg->n);
        }
    }
}

void gpu_to_nhwc(gpu_ctx *c, void *dst, const float *src, int rows, int ch, int hw) {
    CAPTURE(c, R_TO_NHWC, P(c), P(dst), P(src), I(rows), I(ch), I(hw));
    const size_t n = (size_t)rows * ch * hw;
    if (n == 0) return;
    mock_launch_check("the NCHW -> NHWC transposition");
    DEVA(c, dst, n, "NHWC transposition destination");
    DEV(src, n, "NHWC transposition source");
    for (size_t r = 0; r < (size_t)rows; r++)
        for (size_t s = 0; s < (size_t)hw; s++)
            for (size_t k = 0; k < (size_t)ch; k++)
                act_set(c, dst, (r * hw + s) * ch + k, src[(r * ch + k) * hw + s]);
}

void gpu_from_nhwc_f32(gpu_ctx *c, float *dst, const void *src, int rows, int ch, int hw) {
    CAPTURE(c, R_FROM_NHWC, P(c), P(dst), P(src), I(rows), I(ch), I(hw));
    const size_t n = (size_t)rows * ch * hw;
    if (n == 0) return;
    mock_launch_check("the NHWC -> NCHW transposition");
    DEV(dst, n, "NHWC transposition destination");
    DEVA(c, src, n, "NHWC transposition source");
    for (size_t r = 0; r < (size_t)rows; r++)
        for (size_t s = 0; s < (size_t)hw; s++)
            for (size_t k = 0; k < (size_t)ch; k++) dst[(r * ch + k) * hw + s] = act_get(c, src, (r * hw + s) * ch + k);
}

void gpu_bf16_to_f32(gpu_ctx *c, float *dst, const void *src, size_t n) {
    CAPTURE(c, R_TO_F32, P(c), P(dst), P(src), U(n));
    (void)c;
    if (n == 0) return;
    mock_launch_check("the bf16 -> fp32 cast");
    DEV(dst, n, "fp32 cast destination");
    mock_check_dev(src, n * 2, "fp32 cast source");
    bf16_unpack(dst, (const uint16_t *)src, n);
}

void gpu_sgd_update(gpu_ctx *c, float *theta, const float *grad, float *v, size_t n, float alpha, float mu,
                    float lambda, int nesterov, int *bad) {
    CAPTURE(c, R_SGD, P(c), P(theta), P(grad), P(v), U(n), F(alpha), F(mu), F(lambda), I(nesterov), P(bad));
    (void)c;
    if (n) mock_launch_check("the SGD update");
    DEV(theta, n, "sgd theta");
    DEV(grad, n, "sgd grad");
    DEV(v, n, "sgd v");
    mock_check_dev(bad, sizeof(int), "sgd flag");
    *bad = !sgd_update(theta, grad, v, n, alpha, mu, lambda, nesterov);
}

/* ---- cuda/gpucomm.cu's kernel (g++ over the mock: build/mock/gpucomm.o) ---- */

void mock_gpucomm_scale(float *buf, size_t n, float s, void *stream) {
    (void)stream;
    DEV(buf, n, "gpucomm_scale");
    for (size_t i = 0; i < n; i++) buf[i] *= s;
}

/* A captured call again, with its arguments (the stream is no longer being captured: it runs). */
#define A(k) a[k].p
#define AI(k) (int)a[k].i
#define AU(k) (size_t)a[k].u
#define AF(k) (float)a[k].d
static void replay(int id, const mock_arg *a) {
    switch (id) {
    case R_CONV_F: gpu_conv_forward(A(0), A(1), A(2), A(3), A(4)); break;
    case R_CONV_B: gpu_conv_backward(A(0), A(1), A(2), A(3), A(4), A(5), A(6)); break;
    case R_BN_F: gpu_bn_forward(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7)); break;
    case R_BN_ADD_F: gpu_bn_add_forward(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8)); break;
    case R_BN_ADD_B: gpu_bn_add_backward(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9)); break;
    case R_BN_B: gpu_bn_backward(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8)); break;
    case R_RELU_F: gpu_relu_forward(A(0), A(1), A(2), A(3)); break;
    case R_RELU_B: gpu_relu_backward(A(0), A(1), A(2), A(3), A(4)); break;
    case R_ADD_F: gpu_add_forward(A(0), A(1), A(2), A(3), A(4)); break;
    case R_ADD_B: gpu_add_backward(A(0), A(1), A(2), A(3), A(4)); break;
    case R_POOL_F: gpu_pool_forward(A(0), A(1), A(2), A(3)); break;
    case R_POOL_B: gpu_pool_backward(A(0), A(1), A(2), A(3), A(4), A(5)); break;
    case R_FC_F: gpu_fc_forward(A(0), A(1), A(2), A(3), A(4), AI(5), AI(6), AI(7)); break;
    case R_FC_B: gpu_fc_backward(A(0), A(1), A(2), A(3), A(4), A(5), A(6), AI(7), AI(8), AI(9)); break;
    case R_XENT_F: gpu_softmax_xent_forward(A(0), A(1), A(2), A(3), A(4), A(5), AI(6), AI(7)); break;
    case R_XENT_B: gpu_softmax_xent_backward(A(0), A(1), A(2), A(3), AI(4), AI(5)); break;
    case R_TO_BF16: gpu_f32_to_bf16(A(0), A(1), A(2), AU(3)); break;
    case R_TO_BF16_SEGS: gpu_f32_to_bf16_segs(A(0), A(1), AI(2), AU(3)); break;
    case R_TO_NHWC: gpu_to_nhwc(A(0), A(1), A(2), AI(3), AI(4), AI(5)); break;
    case R_FROM_NHWC: gpu_from_nhwc_f32(A(0), A(1), A(2), AI(3), AI(4), AI(5)); break;
    case R_TO_F32: gpu_bf16_to_f32(A(0), A(1), A(2), AU(3)); break;
    case R_SGD: gpu_sgd_update(A(0), A(1), A(2), A(3), AU(4), AF(5), AF(6), AF(7), AI(8), A(9)); break;
    default: DIE("mock: replay of call %d", id);
    }
}
