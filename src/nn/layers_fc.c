/* layers_fc.c — the layers of layers.h in plain C, without oneDNN: the fully connected layer
 * (fc_forward, fc_backward; torch.nn.Linear) and softmax cross-entropy (softmax_xent_forward,
 * softmax_xent_backward; torch.nn.functional.cross_entropy, mean over the batch). ResNet-18's
 * head and the whole linear model (model.c). layers.c has the oneDNN layers. */
#include "nn/layers.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>

/* ---- fully connected (plain C; (n x nin) . (nin x nout) is too small to need a library) --- */

/* Parallel regions only with more than one thread: libgomp allocates a team for every region
 * a single thread runs (even with an if(0) clause), and the training step must not allocate.
 * Each function below works on a range [lo, hi) of its outer loop; fc_* split it over threads. */
#define RUN_SPLIT(n, call_with_lo_hi)                                                             \
    do {                                                                                          \
        if (omp_get_max_threads() > 1) {                                                          \
            _Pragma("omp parallel") {                                                             \
                const int t_ = omp_get_thread_num(), nt_ = omp_get_num_threads();                 \
                const int lo = (int)((long)(n) * t_ / nt_), hi = (int)((long)(n) * (t_ + 1) / nt_); \
                call_with_lo_hi;                                                                  \
            }                                                                                     \
        } else {                                                                                  \
            const int lo = 0, hi = (n);                                                           \
            call_with_lo_hi;                                                                      \
        }                                                                                         \
    } while (0)

static void fc_forward_rows(float *out, const float *inp, const float *weight, const float *bias, int nin, int nout,
                            int lo, int hi) {
    for (int b = lo; b < hi; b++)
        for (int o = 0; o < nout; o++) {
            const float *x = inp + (size_t)b * nin, *w = weight + (size_t)o * nin;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < nin; i++) s += x[i] * w[i];
            out[(size_t)b * nout + o] = s + bias[o];
        }
}

static void fc_dweight_rows(float *dweight, float *dbias, const float *dout, const float *inp, int n, int nin,
                            int nout, int lo, int hi) {
    for (int o = lo; o < hi; o++) {
        float *dw = dweight + (size_t)o * nin;
        float db = 0.0f;
        for (int i = 0; i < nin; i++) dw[i] = 0.0f;
        for (int b = 0; b < n; b++) {
            const float g = dout[(size_t)b * nout + o];
            const float *x = inp + (size_t)b * nin;
            db += g;
#pragma omp simd
            for (int i = 0; i < nin; i++) dw[i] += g * x[i];
        }
        dbias[o] = db;
    }
}

static void fc_dinp_rows(float *dinp, const float *dout, const float *weight, int nin, int nout, int lo, int hi) {
    for (int b = lo; b < hi; b++) {
        float *dx = dinp + (size_t)b * nin;
        for (int i = 0; i < nin; i++) dx[i] = 0.0f;
        for (int o = 0; o < nout; o++) {
            const float g = dout[(size_t)b * nout + o];
            const float *w = weight + (size_t)o * nin;
#pragma omp simd
            for (int i = 0; i < nin; i++) dx[i] += g * w[i];
        }
    }
}

void fc_forward(float *out, const float *inp, const float *weight, const float *bias, int n, int nin,
                int nout) {
    RUN_SPLIT(n, fc_forward_rows(out, inp, weight, bias, nin, nout, lo, hi));
}

void fc_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                 const float *weight, int n, int nin, int nout) {
    RUN_SPLIT(nout, fc_dweight_rows(dweight, dbias, dout, inp, n, nin, nout, lo, hi));
    if (dinp) RUN_SPLIT(n, fc_dinp_rows(dinp, dout, weight, nin, nout, lo, hi));
}

/* ---- softmax cross-entropy ---------------------------------------------------------------- */

float softmax_xent_forward(float *probs, float *losses, const float *logits, const int *y, int n, int k) {
    double total = 0.0;
    for (int b = 0; b < n; b++) {
        const float *z = logits + (size_t)b * k;
        float *p = probs + (size_t)b * k;
        float zmax = z[0];
        for (int j = 1; j < k; j++) zmax = z[j] > zmax ? z[j] : zmax;
        double sum = 0.0;
        for (int j = 0; j < k; j++) {
            p[j] = expf(z[j] - zmax);
            sum += p[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int j = 0; j < k; j++) p[j] *= inv;
        /* −log softmax[y] = log Σ exp(z − zmax) − (z[y] − zmax): no exp overflow, no log(0). */
        double l = log(sum) - ((double)z[y[b]] - (double)zmax);
        if (losses) losses[b] = (float)l;
        total += l;
    }
    return (float)(total / n);
}

void softmax_xent_backward(float *dlogits, const float *probs, const int *y, int n, int k) {
    const float inv_n = 1.0f / (float)n;
    for (int b = 0; b < n; b++) {
        const float *p = probs + (size_t)b * k;
        float *d = dlogits + (size_t)b * k;
        for (int j = 0; j < k; j++) d[j] = p[j] * inv_n;
        d[y[b]] -= inv_n;
    }
}
