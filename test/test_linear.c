/* test_linear.c — the linear model of src/nn/model.h (model_spec.arch = MODEL_LINEAR,
 * multinomial logistic regression, the small convex model of the distributed-method tests):
 *   - layout: n_params = classes (features + 1), "fc.weight" (classes, features) then "fc.bias"
 *     (classes), no BN statistics, width and stem ignored, invalid specs refused;
 *   - loss, logits and gradient against the closed form computed here in double:
 *     z = W x + b, P = softmax(z), L = mean −log P[y], ∂L/∂W = (P − Y)ᵀ X / B, ∂L/∂b = Σ (P − Y) / B,
 *     at a tiny size and at Fashion-MNIST's (784 features, 10 classes, b = 32), with the gradient
 *     buffer filled with NaN before the step (the step overwrites it);
 *   - central finite differences of the loss along random directions;
 *   - model_eval's top-1 / top-5 counts and summed loss on chosen logits, ties, +inf and NaN;
 *   - deterministic torch.nn.Linear initialisation from the seed;
 *   - no allocation at all inside model_train_step / model_eval (malloc family counted).
 *
 * Tolerances (fp32 against float64): loss and logits relative 1e-5; gradients max-abs error
 * ≤ 1e-5 · max |g|; finite differences: see test_finite_differences. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "nn/model.h"
#include "testutil.h"
#include "util/util.h"

#include "alloccount.h"

/* ---- helpers ---- */

static model_spec linear_spec(int in_c, int hw, int classes, int batch, int eval_batch) {
    model_spec s = {.arch = MODEL_LINEAR, .in_c = in_c, .in_h = hw, .in_w = hw, .n_classes = classes,
                    .batch = batch, .eval_batch = eval_batch, .threads = 0};
    return s;
}

static model *make(const model_spec *s) {
    char err[ERRLEN];
    model *m = model_create(s, err, sizeof err);
    ck_assert_msg(m != NULL, "model_create: %s", err);
    return m;
}

static void fill_normal(float *v, size_t n, rng_t *r, double scale) {
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * rng_normal(r));
}

/* Closed form in double: logits z (B, k), loss, dW (k, F), db (k) of the mean softmax
 * cross-entropy of W (k, F), b (k) on x (B, F), y (B). */
static double closed_form(double *z, double *dw, double *db, const float *w, const float *b, const float *x,
                          const int *y, int nb, int nf, int k) {
    double loss = 0;
    memset(dw, 0, (size_t)k * nf * sizeof(double));
    memset(db, 0, (size_t)k * sizeof(double));
    double *p = malloc((size_t)k * sizeof(double));
    for (int i = 0; i < nb; i++) {
        double *zi = z + (size_t)i * k, mx = -INFINITY, se = 0;
        for (int c = 0; c < k; c++) {
            double s = b[c];
            for (int f = 0; f < nf; f++) s += (double)w[(size_t)c * nf + f] * x[(size_t)i * nf + f];
            zi[c] = s;
            mx = fmax(mx, s);
        }
        for (int c = 0; c < k; c++) se += exp(zi[c] - mx);
        loss += log(se) + mx - zi[y[i]];
        for (int c = 0; c < k; c++) p[c] = exp(zi[c] - mx) / se - (c == y[i]); /* (P − Y) row i */
        for (int c = 0; c < k; c++) {
            db[c] += p[c] / nb;
            for (int f = 0; f < nf; f++) dw[(size_t)c * nf + f] += p[c] * x[(size_t)i * nf + f] / nb;
        }
    }
    free(p);
    return loss / nb;
}

/* ---- layout ---- */

START_TEST(test_layout) {
    model_spec s = linear_spec(1, 28, 10, 32, 250);
    size_t nbn = 99;
    ck_assert_uint_eq(model_spec_n_params(&s, &nbn), 7850u); /* 10 · (784 + 1) */
    ck_assert_uint_eq(nbn, 0u);
    model *m = make(&s);
    ck_assert_uint_eq(model_n_params(m), 7850u);
    ck_assert_uint_eq(model_n_bn(m), 0u);
    ck_assert_ptr_nonnull(model_bn(m));
    ck_assert_int_eq(model_n_tensors(m), 2);
    ck_assert_int_eq(model_n_bn_tensors(m), 0);
    ck_assert_ptr_null(model_bn_tensor_at(m, 0));
    const model_tensor *w = model_tensor_at(m, 0), *b = model_tensor_at(m, 1);
    ck_assert_str_eq(w->name, "fc.weight");
    ck_assert_int_eq(w->ndim, 2);
    ck_assert_int_eq(w->shape[0], 10);
    ck_assert_int_eq(w->shape[1], 784);
    ck_assert_uint_eq(w->offset, 0u);
    ck_assert_uint_eq(w->n, 7840u);
    ck_assert_str_eq(b->name, "fc.bias");
    ck_assert_int_eq(b->ndim, 1);
    ck_assert_int_eq(b->shape[0], 10);
    ck_assert_uint_eq(b->offset, 7840u);
    ck_assert_uint_eq(b->n, 10u);
    ck_assert_int_eq(model_get_spec(m)->arch, MODEL_LINEAR);
    ck_assert_str_eq(arch_name(ARCH_LINEAR), "linear"); /* the experiment file's model.arch spelling */
    ck_assert_str_eq(arch_name(ARCH_RESNET18), "resnet18");
    model_free(m);
    /* Width and stem are ignored; features are in_c·in_h·in_w. */
    s = linear_spec(3, 5, 4, 2, 0);
    s.width = 0, s.stem = (model_stem)7;
    ck_assert_uint_eq(model_spec_n_params(&s, NULL), 4u * 76u);
    m = make(&s);
    ck_assert_uint_eq(model_n_params(m), 304u);
    model_free(m);
    /* Invalid specs are refused with a message. */
    char err[ERRLEN] = "";
    s = linear_spec(1, 28, 0, 32, 0);
    ck_assert_uint_eq(model_spec_n_params(&s, NULL), 0u);
    ck_assert_ptr_null(model_create(&s, err, sizeof err));
    ck_assert_msg(strstr(err, "linear") && strstr(err, "0 classes"), "%s", err);
    s = linear_spec(1, 28, 10, 0, 0);
    ck_assert_ptr_null(model_create(&s, err, sizeof err));
    ck_assert_msg(strstr(err, "batch"), "%s", err);
    s = linear_spec(1, 28, 10, 2, 0);
    s.arch = (model_arch)5;
    ck_assert_ptr_null(model_create(&s, err, sizeof err));
    ck_assert_msg(strstr(err, "architecture"), "%s", err);
}
END_TEST

/* ---- gradient against the closed form ---- */

static void closed_form_case(int in_c, int hw, int k, int nb, uint64_t seed) {
    model_spec s = linear_spec(in_c, hw, k, nb, 0);
    model *m = make(&s);
    model_init(m, seed);
    const int nf = in_c * hw * hw;
    const size_t n = model_n_params(m);
    ck_assert_uint_eq(n, (size_t)k * (nf + 1));
    rng_t r;
    rng_seed(&r, seed + 100);
    float *x = malloc((size_t)nb * nf * sizeof(float));
    int *y = malloc((size_t)nb * sizeof(int));
    fill_normal(x, (size_t)nb * nf, &r, 1.0);
    /* Larger weights than the init, so that P is far from uniform and every term matters. */
    fill_normal(model_params(m), n, &r, 3.0 / sqrt(nf));
    for (int i = 0; i < nb; i++) y[i] = (int)rng_below(&r, (uint64_t)k);
    for (size_t i = 0; i < n; i++) model_grads(m)[i] = NAN; /* the step must overwrite, not add */
    double *z = malloc((size_t)nb * k * sizeof(double)), *dw = malloc((size_t)k * nf * sizeof(double));
    double *db = malloc((size_t)k * sizeof(double));
    const float *P = model_params(m);
    const double want = closed_form(z, dw, db, P, P + (size_t)k * nf, x, y, nb, nf, k);
    const double loss = model_train_step(m, x, y);
    ck_assert_msg(fabs(loss - want) <= 1e-5 * fabs(want), "loss %.9g, closed form %.9g", loss, want);
    const float *lz = model_logits(m, 0);
    double zmax = 0, zerr = 0;
    for (size_t i = 0; i < (size_t)nb * k; i++) zmax = fmax(zmax, fabs(z[i])), zerr = fmax(zerr, fabs(lz[i] - z[i]));
    ck_assert_msg(zerr <= 1e-5 * zmax, "logits: max error %.3g, max |z| %.3g", zerr, zmax);
    const float *G = model_grads(m);
    double gmax = 0, gerr = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = i < (size_t)k * nf ? dw[i] : db[i - (size_t)k * nf];
        ck_assert_msg(isfinite(G[i]), "grad[%zu] = %g", i, G[i]);
        gmax = fmax(gmax, fabs(g)), gerr = fmax(gerr, fabs(G[i] - g));
    }
    printf("closed form (%d features, %d classes, b = %d): loss %.7g (%.2g off), max grad error %.3g of max |g| %.3g\n",
           nf, k, nb, loss, fabs(loss - want), gerr, gmax);
    ck_assert_msg(gmax > 0 && gerr <= 1e-5 * gmax, "gradient: max error %.3g, max |g| %.3g", gerr, gmax);
    model_free(m);
    free(x), free(y), free(z), free(dw), free(db);
}

START_TEST(test_closed_form) {
    closed_form_case(3, 2, 5, 6, 1);    /* 12 features, 5 classes */
    closed_form_case(1, 28, 10, 32, 2); /* Fashion-MNIST's shape, b = 32 */
    closed_form_case(1, 28, 10, 1, 3);  /* a single sample */
}
END_TEST

/* ---- finite differences ---- */

/* Central differences (L(θ + εd) − L(θ − εd)) / 2ε against g·d in fp32. The loss is smooth
 * (convex, no kinks), so the truncation error is O(ε²) and a larger ε than test_model's keeps
 * the fp32 rounding of L (~1e-7 relative, divided by 2ε) small: ε = 1e-2 along unit
 * directions. Directions d = (r/|r| + g/|g|)/2 with r random: |fd − g·d| ≤ 2e-4 |g·d|; a purely
 * random unit direction: |fd − g·d| ≤ 1e-4 |g| (measured: 2e-5 and 1e-6). */
START_TEST(test_finite_differences) {
    const int nb = 16, k = 10, hw = 28;
    model_spec s = linear_spec(1, hw, k, nb, 0);
    model *m = make(&s);
    model_init(m, 11);
    rng_t r;
    rng_seed(&r, 12);
    const size_t n = model_n_params(m), nx = (size_t)nb * hw * hw;
    float *x = malloc(nx * sizeof(float)), *theta = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *d = malloc(n * sizeof(float));
    int y[16];
    for (size_t i = 0; i < nx; i++) x[i] = (float)rng_uniform(&r); /* pixel-like, in [0, 1) */
    for (int i = 0; i < nb; i++) y[i] = (int)rng_below(&r, (uint64_t)k);
    memcpy(theta, model_params(m), n * sizeof(float));
    model_train_step(m, x, y);
    memcpy(g, model_grads(m), n * sizeof(float));
    double gn = 0;
    for (size_t i = 0; i < n; i++) gn += (double)g[i] * g[i];
    gn = sqrt(gn);
    const double eps = 1e-2;
    for (int trial = 0; trial < 4; trial++) {
        fill_normal(d, n, &r, 1.0);
        double dn = 0, gd = 0;
        for (size_t i = 0; i < n; i++) dn += (double)d[i] * d[i];
        dn = sqrt(dn);
        const double a = trial < 3 ? 0.5 : 1.0, b = trial < 3 ? 0.5 : 0.0;
        for (size_t i = 0; i < n; i++) d[i] = (float)(a * d[i] / dn + b * g[i] / gn), gd += (double)g[i] * d[i];
        for (size_t i = 0; i < n; i++) model_params(m)[i] = theta[i] + (float)eps * d[i];
        const double lp = model_train_step(m, x, y);
        for (size_t i = 0; i < n; i++) model_params(m)[i] = theta[i] - (float)eps * d[i];
        const double lm = model_train_step(m, x, y);
        const double fd = (lp - lm) / (2 * eps);
        printf("finite differences, direction %d: fd %.7g, g.d %.7g, |g| %.4g\n", trial, fd, gd, gn);
        if (trial < 3)
            ck_assert_msg(fabs(fd - gd) <= 2e-4 * fabs(gd), "fd %.9g vs g.d %.9g", fd, gd);
        else
            ck_assert_msg(fabs(fd - gd) <= 1e-4 * gn, "random direction: fd %.9g vs g.d %.9g (|g| %.4g)", fd, gd, gn);
    }
    model_free(m);
    free(x), free(theta), free(g), free(d);
}
END_TEST

/* ---- top-1 / top-5 on chosen logits ---- */

/* With x_i = e_i (one-hot features) and b = 0, sample i's logits are column i of W, so the
 * test chooses every logit. k = 7 classes, 6 samples:
 *   i  logits          label  rank  top-1  top-5
 *   0  0 1 2 3 4 5 6   6      0     yes    yes
 *   1  0 1 2 3 4 5 6   5      1            yes
 *   2  0 1 2 3 4 5 6   2      4            yes
 *   3  0 1 2 3 4 5 6   1      5
 *   4  1 1 1 1 1 1 1   0      0     yes    yes   (ties go to the lower class index)
 *   5  1 1 1 1 1 1 1   6      6
 * -> top-1 2, top-5 4; the first 4 only: top-1 1, top-5 3. */
START_TEST(test_eval_topk) {
    enum { K = 7, EB = 6 };
    model_spec s = {.arch = MODEL_LINEAR, .in_c = 1, .in_h = 1, .in_w = EB, .n_classes = K, .batch = 1,
                    .eval_batch = EB, .threads = 0};
    model *m = make(&s);
    float *W = model_params(m), *b = W + K * EB;
    for (int c = 0; c < K; c++) {
        b[c] = 0;
        for (int i = 0; i < EB; i++) W[c * EB + i] = i < 4 ? (float)c : 1.0f;
    }
    float x[EB * EB] = {0};
    for (int i = 0; i < EB; i++) x[i * EB + i] = 1.0f;
    const int y[EB] = {6, 5, 2, 1, 0, 6};
    double ls = 0;
    long t1 = 0, t5 = 0;
    model_eval(m, x, y, EB, &ls, &t1, &t5);
    ck_assert_int_eq(t1, 2);
    ck_assert_int_eq(t5, 4);
    const float *z = model_logits(m, 1);
    double want = 0;
    for (int i = 0; i < EB; i++) {
        double se = 0;
        for (int c = 0; c < K; c++) {
            ck_assert_float_eq(z[i * K + c], i < 4 ? (float)c : 1.0f);
            se += exp(z[i * K + c]);
        }
        want += log(se) - z[i * K + y[i]];
    }
    ck_assert_msg(fabs(ls - want) <= 1e-5 * want, "eval loss sum %.9g, closed form %.9g", ls, want);
    /* Sums accumulate; n_valid counts only the first rows. */
    model_eval(m, x, y, 4, &ls, &t1, &t5);
    ck_assert_int_eq(t1, 2 + 1);
    ck_assert_int_eq(t5, 4 + 3);
    /* A non-finite logit makes its sample wrong. Sample 0's true class at +inf (6e37 · 6
     * overflows, 6e37 · 5 does not): ranked first by comparison alone, counted wrong. */
    x[0] = 6e37f;
    ls = 0, t1 = 0, t5 = 0;
    model_eval(m, x, y, EB, &ls, &t1, &t5);
    ck_assert(isinf(model_logits(m, 1)[6]) && isfinite(model_logits(m, 1)[5]));
    ck_assert_int_eq(t1, 1);
    ck_assert_int_eq(t5, 3);
    /* NaN logits in sample 0 only. */
    x[0] = 1.0f, x[1] = NAN;
    ls = 0, t1 = 0, t5 = 0;
    model_eval(m, x, y, EB, &ls, &t1, &t5);
    ck_assert_int_eq(t1, 1);
    ck_assert_int_eq(t5, 3);
    ck_assert(!isfinite(ls));
    /* A diverged model (NaN bias of one class): nothing is right, whatever the labels. */
    x[1] = 0.0f;
    b[3] = NAN;
    for (int c = 0; c < K; c++) {
        int yc[EB];
        for (int i = 0; i < EB; i++) yc[i] = c;
        ls = 0, t1 = 0, t5 = 0;
        model_eval(m, x, yc, EB, &ls, &t1, &t5);
        ck_assert_int_eq(t1, 0);
        ck_assert_int_eq(t5, 0);
        ck_assert(!isfinite(ls));
    }
    model_free(m);
}
END_TEST

/* ---- init ---- */

/* torch.nn.Linear's reset_parameters: weight and bias U(−1/√fan_in, 1/√fan_in), fan_in = 784. */
START_TEST(test_init) {
    model_spec s = linear_spec(1, 28, 10, 4, 4);
    model *a = make(&s), *b = make(&s);
    const size_t n = model_n_params(a);
    model_init(a, 42);
    model_init(b, 42);
    ck_assert_int_eq(memcmp(model_params(a), model_params(b), n * sizeof(float)), 0);
    model_init(b, 43);
    ck_assert_int_ne(memcmp(model_params(a), model_params(b), n * sizeof(float)), 0);
    const double bound = 1.0 / 28.0;
    for (int t = 0; t < model_n_tensors(a); t++) {
        const model_tensor *T = model_tensor_at(a, t);
        const float *p = model_params(a) + T->offset;
        double s1 = 0, s2 = 0, mx = 0;
        for (size_t j = 0; j < T->n; j++) s1 += p[j], s2 += (double)p[j] * p[j], mx = fmax(mx, fabs(p[j]));
        const double mean = s1 / T->n, sd = sqrt(s2 / T->n - mean * mean);
        ck_assert_msg(mx <= bound && mx > 0.7 * bound, "%s: max |w| %.4g, bound %.4g", T->name, mx, bound);
        if (T->n >= 4096) /* U(−a, a): sd a/√3 */
            ck_assert_msg(fabs(sd / (bound / sqrt(3.0)) - 1) < 0.05 && fabs(mean) < 0.05 * bound, "%s: mean %.3g sd %.4g",
                          T->name, mean, sd);
    }
    /* Training changes the parameters only through the optimizer: a step leaves them as they were. */
    float *x = calloc((size_t)4 * 784, sizeof(float));
    for (int i = 0; i < 4 * 784; i++) x[i] = (float)(i % 13) / 13.0f;
    int y[4] = {0, 3, 9, 3};
    model_train_step(a, x, y);
    model_init(b, 42);
    ck_assert_int_eq(memcmp(model_params(a), model_params(b), n * sizeof(float)), 0);
    free(x);
    model_free(a);
    model_free(b);
}
END_TEST

/* ---- no allocation in the step ---- */

START_TEST(test_no_allocation) {
    model_spec s = linear_spec(1, 28, 10, 32, 250);
    model *m = make(&s);
    model_init(m, 1);
    float *x = calloc((size_t)250 * 784, sizeof(float));
    int *y = calloc(250, sizeof(int));
    for (int i = 0; i < 250 * 784; i++) x[i] = (float)((i * 31) % 17) / 17.0f;
    for (int i = 0; i < 250; i++) y[i] = i % 10;
    double ls = 0;
    long t1 = 0, t5 = 0;
    model_train_step(m, x, y); /* first call: OpenMP thread pool */
    model_eval(m, x, y, 250, &ls, &t1, &t5);
    alloc_count = 0;
    alloc_armed = 1;
    for (int it = 0; it < 3; it++) {
        model_train_step(m, x, y);
        model_eval(m, x, y, 250, &ls, &t1, &t5);
        model_eval(m, x, y, 17, &ls, &t1, &t5);
    }
    alloc_armed = 0;
    ck_assert_msg(alloc_count == 0, "%ld allocations in model_train_step / model_eval", alloc_count);
    free(x), free(y);
    model_free(m);
}
END_TEST

static Suite *linear_suite(void) {
    Suite *s = suite_create("linear");
    TCase *tc = tcase_create("linear");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_closed_form);
    tcase_add_test(tc, test_finite_differences);
    tcase_add_test(tc, test_eval_topk);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_no_allocation);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(linear_suite()); }
