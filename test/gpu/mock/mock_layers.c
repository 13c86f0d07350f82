/* mock_layers.c — cuda/layers.h on the CPU: every gpu_* function computed by the oneDNN layers of
 * src/nn/layers.h on plain nchw buffers (or by plain loops), for the mock build of cuda/model.cu
 * (test/gpu/mock/README.md). Besides computing, each function enforces the contract the real
 * GPU layers rely on, so a wiring mistake in model.cu fails here instead of on the GPU:
 *   - every pointer lies inside one device allocation of the right size (mock_cuda.c);
 *   - the aliasing rules of layers.h (no BN or convolution in place);
 *   - a convolution's backward gets the weight, a max pool's backward the input and output, of
 *     its last forward (the CPU layers keep their own copies; the GPU ones are given them);
 *   - convolutions are tuned and the workspace committed before they run;
 *   - cudnnFind's garbage: gpu_conv_tune fills its output buffers with NaN, so a model that
 *     does not clear them afterwards fails. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h" /* cuda/layers.h */
#include "nn/layers.h"
#include "optim/sgd.h"
#include "util/util.h"

void mock_check_dev(const void *p, size_t nbytes, const char *what);

#define DEV(p, count, what) mock_check_dev((p), (size_t)(count) * sizeof(float), (what))

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
    if (prec != GPU_FP32 && prec != GPU_TF32)
        return seterr(err, errlen, "precision bf16 is not built yet in the GPU backend (fp32 and tf32 are)"), -1;
    c->prec = prec;
    c->n_sm = 4;
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
    cudaFree(c->blas_ws);
    cudaFree(c->ws);
    cudaFree(c->find_ws);
    memset(c, 0, sizeof *c);
}

void gpu_ctx_sync(gpu_ctx *c, const char *where) { (void)c, (void)where; }

/* ---- convolution ---- */

typedef struct {
    conv_layer cl;
    const float *w_fwd; /* weight of the last forward */
} mock_conv;

int gpu_conv_init(gpu_conv_layer *l, gpu_ctx *c, const char *name, int n, int ic, int ih, int iw, int oc, int k,
                  int stride, int pad, gpu_mode mode, int need_dinp, char *err, size_t errlen) {
    (void)c;
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->need_dinp = mode == GPU_TRAIN && need_dinp;
    l->n = n, l->ic = ic, l->ih = ih, l->iw = iw, l->oc = oc, l->k = k, l->stride = stride, l->pad = pad;
    l->oh = (ih + 2 * pad - k) / stride + 1;
    l->ow = (iw + 2 * pad - k) / stride + 1;
    snprintf(l->what, sizeof l->what, "layer %s (mock conv %dx%d/%d)", name, k, k, stride);
    if (l->oh < 1 || l->ow < 1) return seterr(err, errlen, "%s: input too small", l->what), -1;
    mock_conv *m = calloc(1, sizeof *m);
    dnnl_memory_desc_t xmd = nn_md4(n, ic, ih, iw, dnnl_nchw), ymd = nn_md4(n, oc, l->oh, l->ow, dnnl_nchw);
    if (conv_init(&m->cl, cpu(), name, n, ic, ih, iw, oc, k, stride, pad, &xmd, &ymd,
                  mode == GPU_TRAIN ? NN_TRAIN : NN_INFER, need_dinp, err, errlen))
        return free(m), -1;
    tab_put(l, m);
    return 0;
}

int gpu_conv_tune(gpu_conv_layer *l, gpu_ctx *c, const float *x, const float *w, float *y, float *dx, float *dw,
                  char *err, size_t errlen) {
    (void)c, (void)err, (void)errlen;
    const size_t nx = (size_t)l->n * l->ic * l->ih * l->iw, nw = (size_t)l->oc * l->ic * l->k * l->k;
    const size_t ny = (size_t)l->n * l->oc * l->oh * l->ow;
    DEV(x, nx, "tune x");
    DEV(w, nw, "tune w");
    DEV(y, ny, "tune y");
    nan_fill(y, ny);
    if (l->mode == GPU_TRAIN) {
        DEV(dw, nw, "tune dw");
        nan_fill(dw, nw);
    }
    if (l->need_dinp) {
        DEV(dx, nx, "tune dx");
        nan_fill(dx, nx);
    }
    gpu_ctx_reserve(c, 1024);
    l->fwd_ws = l->bwd_data_ws = l->bwd_filter_ws = 1024;
    l->tuned = 1;
    return 0;
}

void gpu_conv_algos(const gpu_conv_layer *l, char *buf, size_t n) {
    (void)l;
    snprintf(buf, n, "mock");
}

void gpu_conv_forward(gpu_conv_layer *l, gpu_ctx *c, float *out, const float *inp, const float *weight) {
    if (!l->tuned || c->ws_nbytes < l->fwd_ws) DIE("mock: %s runs before tuning / commit", l->what);
    mock_conv *m = tab_get(l);
    DEV(out, (size_t)l->n * l->oc * l->oh * l->ow, l->what);
    DEV(inp, (size_t)l->n * l->ic * l->ih * l->iw, l->what);
    DEV(weight, (size_t)l->oc * l->ic * l->k * l->k, l->what);
    if ((const float *)out == inp) DIE("mock: %s forward in place", l->what);
    conv_forward(&m->cl, cpu(), out, inp, weight);
    m->w_fwd = weight;
}

void gpu_conv_backward(gpu_conv_layer *l, gpu_ctx *c, float *dinp, float *dweight, const float *dout,
                       const float *inp, const float *weight) {
    (void)c;
    if (l->mode != GPU_TRAIN) DIE("mock: backward of inference %s", l->what);
    mock_conv *m = tab_get(l);
    if (weight != m->w_fwd) DIE("mock: %s backward with another weight than its forward", l->what);
    const size_t nx = (size_t)l->n * l->ic * l->ih * l->iw;
    DEV(dweight, (size_t)l->oc * l->ic * l->k * l->k, l->what);
    DEV(dout, (size_t)l->n * l->oc * l->oh * l->ow, l->what);
    DEV(inp, nx, l->what);
    if (l->need_dinp && dinp) {
        DEV(dinp, nx, l->what);
        if ((const float *)dinp == dout || (const float *)dinp == inp) DIE("mock: %s backward in place", l->what);
    }
    conv_backward(&m->cl, cpu(), l->need_dinp ? dinp : NULL, dweight, dout, inp);
}

void gpu_conv_free(gpu_conv_layer *l) {
    mock_conv *m = tab_del(l);
    if (m) {
        conv_free(&m->cl);
        free(m);
    }
    memset(l, 0, sizeof *l);
}

/* ---- batch normalisation (CPU BN without ReLU, ReLU and its mask here, as the GPU does) ---- */

typedef struct {
    bn_layer cl;
    float *beta0;
} mock_bn;

int gpu_bn_init(gpu_bn_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu, gpu_mode mode,
                char *err, size_t errlen) {
    (void)c;
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->relu = relu;
    l->n = n, l->c = ch, l->h = h, l->w = w;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (mock bn)", name);
    if (mode == GPU_TRAIN && (long)n * h * w < 2) return seterr(err, errlen, "%s: one value per channel", l->what), -1;
    mock_bn *m = calloc(1, sizeof *m);
    m->beta0 = calloc((size_t)ch, sizeof(float));
    dnnl_memory_desc_t md = nn_md4(n, ch, h, w, dnnl_nchw);
    if (bn_init(&m->cl, cpu(), name, &md, 0, mode == GPU_TRAIN ? NN_TRAIN : NN_INFER, err, errlen))
        return free(m->beta0), free(m), -1;
    tab_put(l, m);
    return 0;
}

void gpu_bn_forward(gpu_bn_layer *l, gpu_ctx *c, float *out, const float *inp, const float *gamma,
                    const float *beta, float *running_mean, float *running_var) {
    (void)c;
    mock_bn *m = tab_get(l);
    DEV(out, l->count, l->what);
    DEV(inp, l->count, l->what);
    DEV(gamma, l->c, l->what);
    DEV(beta, l->c, l->what);
    DEV(running_mean, l->c, l->what);
    DEV(running_var, l->c, l->what);
    if ((const float *)out == inp) DIE("mock: %s forward in place", l->what);
    bn_forward(&m->cl, cpu(), out, inp, gamma, beta, running_mean, running_var);
    if (l->relu)
        for (size_t i = 0; i < l->count; i++) out[i] = relu1(out[i]);
}

void gpu_bn_backward(gpu_bn_layer *l, gpu_ctx *c, float *dinp, float *dgamma, float *dbeta, float *dout,
                     const float *inp, const float *out, const float *gamma) {
    (void)c;
    if (l->mode != GPU_TRAIN) DIE("mock: backward of inference %s", l->what);
    mock_bn *m = tab_get(l);
    DEV(dinp, l->count, l->what);
    DEV(dout, l->count, l->what);
    DEV(inp, l->count, l->what);
    DEV(dgamma, l->c, l->what);
    DEV(dbeta, l->c, l->what);
    DEV(gamma, l->c, l->what);
    if (dinp == dout || (const float *)dinp == inp) DIE("mock: %s backward in place", l->what);
    if (l->relu) {
        DEV(out, l->count, l->what);
        for (size_t i = 0; i < l->count; i++) dout[i] = out[i] > 0.0f ? dout[i] : 0.0f;
    }
    bn_backward(&m->cl, cpu(), dinp, dgamma, dbeta, dout, inp, gamma, m->beta0);
}

void gpu_bn_free(gpu_bn_layer *l) {
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
    l->name = name;
    l->mode = mode;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (mock relu)", name);
    return 0;
}

void gpu_relu_forward(gpu_relu_layer *l, gpu_ctx *c, float *out, const float *inp) {
    (void)c;
    DEV(out, l->count, l->what);
    DEV(inp, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) out[i] = relu1(inp[i]);
}

void gpu_relu_backward(gpu_relu_layer *l, gpu_ctx *c, float *dinp, const float *dout, const float *out) {
    (void)c;
    DEV(dinp, l->count, l->what);
    DEV(dout, l->count, l->what);
    DEV(out, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

int gpu_add_init(gpu_add_layer *l, gpu_ctx *c, const char *name, int n, int ch, int h, int w, int relu,
                 gpu_mode mode, char *err, size_t errlen) {
    (void)c, (void)err, (void)errlen;
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->relu = relu;
    l->count = (size_t)n * ch * h * w;
    snprintf(l->what, sizeof l->what, "layer %s (mock add)", name);
    return 0;
}

void gpu_add_forward(gpu_add_layer *l, gpu_ctx *c, float *out, const float *a, const float *b) {
    (void)c;
    DEV(out, l->count, l->what);
    DEV(a, l->count, l->what);
    DEV(b, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) {
        const float s = a[i] + b[i];
        out[i] = l->relu ? relu1(s) : s;
    }
}

void gpu_add_backward(gpu_add_layer *l, gpu_ctx *c, float *dsum, const float *dout, const float *out) {
    (void)c;
    if (!l->relu) DIE("mock: add backward without relu");
    DEV(dsum, l->count, l->what);
    DEV(dout, l->count, l->what);
    DEV(out, l->count, l->what);
    for (size_t i = 0; i < l->count; i++) dsum[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* ---- pooling ---- */

typedef struct {
    pool_layer cl;
    const float *x_fwd, *y_fwd;
} mock_pool;

int gpu_pool_init(gpu_pool_layer *l, gpu_ctx *c, const char *name, int n, int ch, int ih, int iw, int max, int k,
                  int stride, int pad, gpu_mode mode, char *err, size_t errlen) {
    (void)c;
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->max = max;
    l->n = n, l->c = ch, l->ih = ih, l->iw = iw;
    l->oh = max ? (ih + 2 * pad - k) / stride + 1 : 1;
    l->ow = max ? (iw + 2 * pad - k) / stride + 1 : 1;
    snprintf(l->what, sizeof l->what, "layer %s (mock pool)", name);
    if (!max) return 0;
    mock_pool *m = calloc(1, sizeof *m);
    dnnl_memory_desc_t md = nn_md4(n, ch, ih, iw, dnnl_nchw);
    if (pool_init(&m->cl, cpu(), name, &md, 1, k, stride, pad, mode == GPU_TRAIN ? NN_TRAIN : NN_INFER, err, errlen))
        return free(m), -1;
    tab_put(l, m);
    return 0;
}

void gpu_pool_forward(gpu_pool_layer *l, gpu_ctx *c, float *out, const float *inp) {
    (void)c;
    const size_t nx = (size_t)l->n * l->c * l->ih * l->iw, ny = (size_t)l->n * l->c * l->oh * l->ow;
    DEV(out, ny, l->what);
    DEV(inp, nx, l->what);
    if (l->max) {
        mock_pool *m = tab_get(l);
        pool_forward(&m->cl, cpu(), out, inp);
        m->x_fwd = inp, m->y_fwd = out;
        return;
    }
    const size_t hw = (size_t)l->ih * l->iw;
    for (size_t p = 0; p < (size_t)l->n * l->c; p++) {
        float s = 0.0f;
        for (size_t i = 0; i < hw; i++) s += inp[p * hw + i];
        out[p] = s / (float)hw;
    }
}

void gpu_pool_backward(gpu_pool_layer *l, gpu_ctx *c, float *dinp, const float *dout, const float *inp,
                       const float *out) {
    (void)c;
    if (l->mode != GPU_TRAIN) DIE("mock: backward of inference %s", l->what);
    const size_t nx = (size_t)l->n * l->c * l->ih * l->iw, ny = (size_t)l->n * l->c * l->oh * l->ow;
    DEV(dinp, nx, l->what);
    DEV(dout, ny, l->what);
    if (l->max) {
        mock_pool *m = tab_get(l);
        if (inp != m->x_fwd || out != m->y_fwd) DIE("mock: %s backward without its forward's input and output", l->what);
        pool_backward(&m->cl, cpu(), dinp, dout);
        return;
    }
    const size_t hw = (size_t)l->ih * l->iw;
    for (size_t i = 0; i < nx; i++) dinp[i] = dout[i / hw] * (1.0f / (float)hw);
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

void gpu_fc_forward(gpu_ctx *c, float *out, const float *inp, const float *weight, const float *bias, int n,
                    int nin, int nout) {
    (void)c;
    DEV(out, (size_t)n * nout, "fc out");
    DEV(inp, (size_t)n * nin, "fc inp");
    DEV(weight, (size_t)nout * nin, "fc weight");
    DEV(bias, nout, "fc bias");
    fc_forward(out, inp, weight, bias, n, nin, nout);
}

void gpu_fc_backward(gpu_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int n, int nin, int nout) {
    (void)c;
    if (dinp) DEV(dinp, (size_t)n * nin, "fc dinp");
    DEV(dweight, (size_t)nout * nin, "fc dweight");
    DEV(dbias, nout, "fc dbias");
    DEV(dout, (size_t)n * nout, "fc dout");
    DEV(inp, (size_t)n * nin, "fc inp");
    DEV(weight, (size_t)nout * nin, "fc weight");
    fc_backward(dinp, dweight, dbias, dout, inp, weight, n, nin, nout);
}

void gpu_softmax_xent_forward(gpu_ctx *c, float *probs, float *losses, float *loss, const float *logits,
                              const int *y, int n, int k) {
    (void)c;
    DEV(probs, (size_t)n * k, "xent probs");
    DEV(losses, n, "xent losses");
    DEV(loss, 1, "xent loss");
    DEV(logits, (size_t)n * k, "xent logits");
    mock_check_dev(y, (size_t)n * sizeof(int), "xent labels");
    *loss = softmax_xent_forward(probs, losses, logits, y, n, k);
}

void gpu_softmax_xent_backward(gpu_ctx *c, float *dlogits, const float *probs, const int *y, int n, int k) {
    (void)c;
    DEV(dlogits, (size_t)n * k, "xent dlogits");
    DEV(probs, (size_t)n * k, "xent probs");
    mock_check_dev(y, (size_t)n * sizeof(int), "xent labels");
    softmax_xent_backward(dlogits, probs, y, n, k);
}

void gpu_sgd_update(gpu_ctx *c, float *theta, const float *grad, float *v, size_t n, float alpha, float mu,
                    float lambda, int nesterov, int *bad) {
    (void)c;
    DEV(theta, n, "sgd theta");
    DEV(grad, n, "sgd grad");
    DEV(v, n, "sgd v");
    mock_check_dev(bad, sizeof(int), "sgd flag");
    *bad = !sgd_update(theta, grad, v, n, alpha, mu, lambda, nesterov);
}
