/* test_model.c — the whole ResNet-18 of src/nn/model.h:
 *   - against torchvision (test/data/model_{cifar,imagenet}.h5, tools/make_reference.py): tensor
 *     names and shapes in state_dict order, training-mode loss, logits, every parameter
 *     gradient, BN running statistics after the step, eval-mode logits and loss, top-1/top-5;
 *   - central finite differences of the loss along random directions at a tiny width;
 *   - model_eval's top-1/top-5 counts against ranks computed here from the logits;
 *   - torchvision's parameter count (11,689,512) and layout at the paper's size;
 *   - deterministic He initialisation from the seed;
 *   - no buffer allocation inside model_train_step / model_eval (malloc family counted): the only
 *     allocations are oneDNN's own per-execute bookkeeping (dnnl_primitive_execute builds a
 *     std::unordered_map of the arguments, ~6 nodes of <= 160 bytes per primitive, freed before
 *     it returns), so the test asserts none >= 1 KiB and nothing outstanding afterwards.
 *
 * Tolerances: relative L2 error per tensor ≤ 1e-5 for loss, logits and running statistics,
 * ≤ 1e-4 for gradients (fp32, summation orders differ from PyTorch's; PyTorch's own fp32
 * gradients differ from its float64 ones by up to 5e-5 on these files); finite differences: see
 * fd_case. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "gpu.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "optim/sgd.h"
#include "h5ref.h"
#include "testutil.h"
#include "util/util.h"

#define TOL_FWD 1e-5
#define TOL_GRAD 1e-4
/* bf16 against torchvision with bf16 convolutions (tools/make_reference.py Bf16Conv; the same
 * roundings): loss, train logits, per-tensor and whole gradient, BN running statistics, eval.
 * The network is tiny (width 4, BN over 16 values in the last stage): one f32 summation-order
 * difference that flips one bf16 rounding moves the train logits by ~1e-3 and the gradient by
 * ~0.1 (the CIFAR-stem case here; PyTorch's own bf16 gradient is 0.18 away from its fp32 one at
 * this shape), so the training step has loose bounds, the evaluation (running statistics, no
 * batch statistics) a tight one; test_layers checks each convolution exactly. */
#define TOL_BF16 ((tolerances){1e-3, 1e-2, INFINITY, 0.25, 2e-3, 3e-4})

#include "alloccount.h"


static model *make(const model_spec *s) {
    char err[ERRLEN];
    model *m = model_create(s, err, sizeof err);
    ck_assert_msg(m != NULL, "model_create: %s", err);
    return m;
}

/* Rank of class y among logits z (k): classes with a larger logit, ties broken by index. Written
 * independently of model.c: count by sorting a copy. */
static int rank_of(const float *z, int k, int y) {
    int r = 0;
    for (int j = 0; j < k; j++)
        if (z[j] > z[y]) r++;
    return r;
}

/* ---- torchvision reference ---- */

/* The reference dataset of quantity k for precision prec: "k", or "k_bf16" (the same step with
 * every convolution in bf16, tools/make_reference.py Bf16Conv). */
static const char *ref_name(const char *k, model_precision prec) {
    static char buf[4][64];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s%s", k, prec == MODEL_BF16 ? "_bf16" : "");
    return buf[i];
}

/* One training step and one evaluation from the reference state, against torchvision (fp32) or
 * torchvision with bf16 convolutions (bf16), within tol. With bf16 the logits must also differ from fp32's
 * by more than fp32 arithmetic would (> 1e-4): the convolutions really ran bf16. */
typedef struct {
    double loss, logits, grad_tensor, grad, bn, eval; /* relative bounds (L2 for tensors) */
} tolerances;

static void reference_case_prec(const char *file, model_stem stem, model_precision prec, tolerances tol) {
    hid_t f = h5open(file);
    const int width = h5attr(f, "width"), in_c = h5attr(f, "in_c"), classes = h5attr(f, "classes");
    const int hw = h5attr(f, "hw"), batch = h5attr(f, "batch");
    const int eval_batch = batch + 2; /* two padding rows that must not matter */
    model_spec s = {.width = width, .stem = stem, .in_c = in_c, .in_h = hw, .in_w = hw, .n_classes = classes,
                    .batch = batch, .eval_batch = eval_batch, .threads = 0, .precision = prec};
    model *m = make(&s);
    const char *pname = prec == MODEL_BF16 ? "bf16" : "fp32";
    if (prec == MODEL_BF16) {
        int total = 0;
        char fp32_names[256];
        const int lp = model_bf16_convs(m, &total, fp32_names, sizeof fp32_names);
        /* the reference rounds at every convolution */
        ck_assert_msg(lp == total, "%s bf16: %d of %d convolutions in bf16 (fp32: %s)", file, lp, total, fp32_names);
    }

    size_t np, nbn, nnames, nshape, nx, ny;
    float *params = h5f(f, "params", &np, NULL), *bn0 = h5f(f, "bn0", &nbn, NULL), *x = h5f(f, "x", &nx, NULL);
    int *y = h5i(f, "y", &ny), *shapes = h5i(f, "shapes", &nshape);
    char *names = h5names(f, "names", &nnames);
    size_t nbnn;
    char *bn_names = h5names(f, "bn_names", &nbnn);
    ck_assert_uint_eq(np, model_n_params(m));
    ck_assert_uint_eq(nbn, model_n_bn(m));
    ck_assert_uint_eq(nnames, (size_t)model_n_tensors(m));
    ck_assert_uint_eq(nbnn, (size_t)model_n_bn_tensors(m));
    ck_assert_uint_eq(ny, (size_t)batch);
    for (int i = 0; i < model_n_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        ck_assert_msg(strncmp(t->name, names + 64 * i, 64) == 0, "tensor %d: %s, torchvision %.64s", i, t->name,
                      names + 64 * i);
        ck_assert_int_eq(t->ndim, shapes[5 * i]);
        for (int k = 0; k < t->ndim; k++) ck_assert_int_eq(t->shape[k], shapes[5 * i + 1 + k]);
    }
    for (int i = 0; i < model_n_bn_tensors(m); i++)
        ck_assert_msg(strncmp(model_bn_tensor_at(m, i)->name, bn_names + 64 * i, 64) == 0, "bn tensor %d: %s", i,
                      model_bn_tensor_at(m, i)->name);

    /* One training step from the reference state. */
    memcpy(model_params(m), params, np * sizeof(float));
    memcpy(model_bn(m), bn0, nbn * sizeof(float));
    float *loss_ref = h5f(f, ref_name("loss", prec), NULL, NULL), *logits_ref = h5f(f, ref_name("logits", prec), NULL, NULL);
    float *grads = h5f(f, ref_name("grads", prec), NULL, NULL), *bn1 = h5f(f, ref_name("bn1", prec), NULL, NULL);
    float loss = model_train_step(m, x, y);
    ck_assert_msg(fabsf(loss - loss_ref[0]) <= tol.loss * fabsf(loss_ref[0]), "%s %s: loss %.9g, torchvision %.9g", file,
                  pname, loss, loss_ref[0]);
    double e = rel_l2(model_logits(m, 0), logits_ref, (size_t)batch * classes);
    ck_assert_msg(e <= tol.logits, "%s %s: logits relative error %.3g", file, pname, e);
    if (prec == MODEL_BF16) {
        float *logits32 = h5f(f, "logits", NULL, NULL);
        const double d = rel_l2(model_logits(m, 0), logits32, (size_t)batch * classes);
        ck_assert_msg(d > 1e-4, "%s bf16: logits within %.3g of fp32's: not computed in bf16", file, d);
        free(logits32);
    }
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < model_n_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        double r = rel_l2(model_grads(m) + t->offset, grads + t->offset, t->n);
        if (r > worst) worst = r, worst_name = t->name;
        ck_assert_msg(r <= tol.grad_tensor, "%s %s: grad %s relative error %.3g", file, pname, t->name, r);
    }
    const double gall = rel_l2(model_grads(m), grads, np);
    ck_assert_msg(gall <= tol.grad, "%s %s: gradient relative error %.3g", file, pname, gall);
    printf("%s %s: loss %.7f (torchvision %s %.7f), logits rel %.2g, gradient rel %.2g, worst tensor %.2g (%s)\n", file,
           pname, loss, pname, loss_ref[0], e, gall, worst, worst_name);
    double worst_bn = 0;
    for (int i = 0; i < model_n_bn_tensors(m); i++) {
        const model_tensor *t = model_bn_tensor_at(m, i);
        double r = rel_l2(model_bn(m) + t->offset, bn1 + t->offset, t->n);
        if (r > worst_bn) worst_bn = r;
        ck_assert_msg(r <= tol.bn, "%s %s: %s relative error %.3g", file, pname, t->name, r);
    }

    /* Evaluation with the updated running statistics; rows batch.. are garbage. */
    size_t per = (size_t)in_c * hw * hw;
    float *x_eval = h5f(f, "x_eval", NULL, NULL), *eval_logits = h5f(f, ref_name("eval_logits", prec), NULL, NULL);
    float *eval_loss = h5f(f, ref_name("eval_loss", prec), NULL, NULL);
    int *y_eval = h5i(f, "y_eval", NULL);
    float *xe = malloc((size_t)eval_batch * per * sizeof(float));
    int *ye = malloc((size_t)eval_batch * sizeof(int));
    memcpy(xe, x_eval, (size_t)batch * per * sizeof(float));
    memcpy(ye, y_eval, (size_t)batch * sizeof(int));
    for (size_t i = (size_t)batch * per; i < (size_t)eval_batch * per; i++) xe[i] = 1e3f * (float)((i * 7919) % 13) - 6e3f;
    for (int i = batch; i < eval_batch; i++) ye[i] = 0;
    double loss_sum = 0.5; /* model_eval adds to it */
    long top1 = 1, top5 = 2;
    model_eval(m, xe, ye, batch, &loss_sum, &top1, &top5);
    e = rel_l2(model_logits(m, 1), eval_logits, (size_t)batch * classes);
    ck_assert_msg(e <= tol.eval, "%s %s: eval logits relative error %.3g", file, pname, e);
    double mean = (loss_sum - 0.5) / batch;
    ck_assert_msg(fabs(mean - eval_loss[0]) <= tol.eval * fabs(eval_loss[0]), "%s %s: eval loss %.9g, torchvision %.9g",
                  file, pname, mean, eval_loss[0]);
    printf("%s %s: BN running statistics rel %.2g (worst tensor); eval logits rel %.2g, eval loss %.7f (torchvision %s %.7f)\n",
           file, pname, worst_bn, e, mean, pname, eval_loss[0]);
    if (prec == MODEL_BF16) { /* the evaluation is well conditioned: nearer bf16's reference than fp32's */
        float *eval32 = h5f(f, "eval_logits", NULL, NULL);
        const double d = rel_l2(model_logits(m, 1), eval32, (size_t)batch * classes);
        ck_assert_msg(3 * e <= d, "%s bf16: eval logits %.3g from bf16's reference, %.3g from fp32's", file, e, d);
        free(eval32);
    }
    long t1 = 0, t5 = 0;
    for (int i = 0; i < batch; i++) {
        int r = rank_of(eval_logits + (size_t)i * classes, classes, y_eval[i]);
        t1 += r == 0;
        t5 += r < 5;
    }
    if (prec == MODEL_FP32) { /* bf16 may reorder near ties */
        ck_assert_int_eq(top1 - 1, t1);
        ck_assert_int_eq(top5 - 2, t5);
    }

    model_free(m);
    free(params), free(bn0), free(x), free(y), free(shapes), free(names), free(bn_names), free(loss_ref);
    free(logits_ref), free(grads), free(bn1), free(x_eval), free(eval_logits), free(eval_loss), free(y_eval);
    free(xe), free(ye);
    H5Fclose(f);
}

static void reference_case(const char *file, model_stem stem) {
    reference_case_prec(file, stem, MODEL_FP32, (tolerances){TOL_FWD, TOL_FWD, TOL_GRAD, TOL_GRAD, TOL_FWD, TOL_FWD});
}

/* precision bf16 on the CPU (nn/layers.h conv_init): against torchvision's fp32 within bf16's
 * bounds, and measurably different from fp32 — where the CPU runs bf16 natively; elsewhere (an
 * AVX2 node, or under make check's ONEDNN_MAX_CPU_ISA caps, test/isa-levels.sh) model_create
 * must refuse it and say why. */
static void bf16_case(const char *file, model_stem stem) {
    if (nn_bf16_native()) {
        reference_case_prec(file, stem, MODEL_BF16, TOL_BF16);
        return;
    }
    model_spec s = {.width = 8, .stem = stem, .in_c = 3, .in_h = 32, .in_w = 32, .n_classes = 10, .batch = 4,
                    .eval_batch = 4, .threads = 1, .precision = MODEL_BF16};
    char err[ERRLEN] = "";
    ck_assert_ptr_null(model_create(&s, err, sizeof err));
    ck_assert_msg(strstr(err, "precision bf16 on the CPU needs AVX512_BF16") && strstr(err, nn_isa_name()), "%s", err);
    printf("bf16 refused on %s: %s\n", nn_isa_name(), err);
}

START_TEST(test_bf16_cifar) { bf16_case("model_cifar.h5", MODEL_STEM_CIFAR); }
END_TEST
START_TEST(test_bf16_imagenet) { bf16_case("model_imagenet.h5", MODEL_STEM_IMAGENET); }
END_TEST

START_TEST(test_reference_cifar) { reference_case("model_cifar.h5", MODEL_STEM_CIFAR); }
END_TEST

START_TEST(test_reference_imagenet) { reference_case("model_imagenet.h5", MODEL_STEM_IMAGENET); }
END_TEST

/* ---- finite differences ---- */

static void fill_normal(float *v, size_t n, rng_t *r, double scale) {
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * rng_normal(r));
}

/* Central differences (L(θ + εd) − L(θ − εd)) / 2ε against g·d, in fp32, at ε = 3e-4.
 *
 * The loss is only piecewise smooth (ReLU, max-pool) and these tiny networks have ReLU kinks
 * within 1e-3 of θ: computed in float64 by PyTorch from the same θ, the difference quotient
 * along a tensor's gradient still differs from |g| by several percent at ε = 1e-3 and
 * converges only below ε = 1e-5 (our g equals PyTorch's float64 gradient there to < 1e-4),
 * which fp32 rounding of L (~1e-7 relative) cannot resolve. Hence two checks:
 *   1. random directions over all parameters, d = (r/|r| + g/|g|)/2 (so that g·d is not
 *      small against the rounding error): |fd − g·d| ≤ 1e-2 |g·d|; and one purely random
 *      unit direction: |fd − g·d| ≤ 1e-3 |g|;
 *   2. per tensor T, d = g_T/|g_T| (all other tensors fixed): |fd − |g_T|| ≤ 0.1 |g_T|. This
 *      is coarse but independent of PyTorch, and catches what a finite-difference test is for:
 *      a wrong sign, scale or missing path (e.g. the shortcut's gradient) in any tensor.
 * Seeds are fixed, so the kinks are the same on every run. */
static void fd_case(model_stem stem, int hw) {
    const int nb = 8, ch = 2, k = 5;
    model_spec s = {.width = 4, .stem = stem, .in_c = ch, .in_h = hw, .in_w = hw, .n_classes = k,
                    .batch = nb, .eval_batch = 0, .threads = 0};
    model *m = make(&s);
    model_init(m, 7);
    rng_t r;
    rng_seed(&r, 99);
    const size_t n = model_n_params(m), nx = (size_t)nb * ch * hw * hw;
    float *x = malloc(nx * sizeof(float)), *theta = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *d = malloc(n * sizeof(float));
    int y[8];
    fill_normal(x, nx, &r, 1.0);
    for (int i = 0; i < nb; i++) y[i] = (int)rng_below(&r, (uint64_t)k);
    memcpy(theta, model_params(m), n * sizeof(float));
    model_train_step(m, x, y);
    memcpy(g, model_grads(m), n * sizeof(float));
    double gn = 0;
    for (size_t i = 0; i < n; i++) gn += (double)g[i] * g[i];
    gn = sqrt(gn);
    const double eps = 3e-4;
    const char *sn = stem == MODEL_STEM_IMAGENET ? "imagenet" : "cifar";
    for (int trial = 0; trial < 3; trial++) {
        fill_normal(d, n, &r, 1.0);
        double dn = 0, gd = 0;
        for (size_t i = 0; i < n; i++) dn += (double)d[i] * d[i];
        dn = sqrt(dn);
        const double a = trial < 2 ? 0.5 : 1.0, b = trial < 2 ? 0.5 : 0.0;
        for (size_t i = 0; i < n; i++) d[i] = (float)(a * d[i] / dn + b * g[i] / gn), gd += (double)g[i] * d[i];
        for (size_t i = 0; i < n; i++) model_params(m)[i] = theta[i] + (float)eps * d[i];
        double lp = model_train_step(m, x, y);
        for (size_t i = 0; i < n; i++) model_params(m)[i] = theta[i] - (float)eps * d[i];
        double lm = model_train_step(m, x, y);
        double fd = (lp - lm) / (2 * eps);
        printf("finite differences (%s stem), direction %d: fd %.7g, g.d %.7g, |g| %.4g\n", sn, trial, fd, gd, gn);
        if (trial < 2)
            ck_assert_msg(fabs(fd - gd) <= 1e-2 * fabs(gd), "%s: fd %.9g vs g.d %.9g", sn, fd, gd);
        else
            ck_assert_msg(fabs(fd - gd) <= 1e-3 * gn, "%s: random direction fd %.9g vs g.d %.9g (|g| %.4g)", sn, fd, gd, gn);
    }
    double worst = 0;
    const char *worst_name = "";
    for (int t = 0; t < model_n_tensors(m); t++) {
        const model_tensor *T = model_tensor_at(m, t);
        double tn = 0;
        for (size_t i = 0; i < T->n; i++) tn += (double)g[T->offset + i] * g[T->offset + i];
        tn = sqrt(tn);
        ck_assert_msg(tn > 0, "%s: zero gradient", T->name);
        memcpy(model_params(m), theta, n * sizeof(float));
        for (size_t i = 0; i < T->n; i++) model_params(m)[T->offset + i] = theta[T->offset + i] + (float)(eps * g[T->offset + i] / tn);
        double lp = model_train_step(m, x, y);
        for (size_t i = 0; i < T->n; i++) model_params(m)[T->offset + i] = theta[T->offset + i] - (float)(eps * g[T->offset + i] / tn);
        double lm = model_train_step(m, x, y);
        double rel = fabs((lp - lm) / (2 * eps) - tn) / tn;
        if (rel > worst) worst = rel, worst_name = T->name;
        ck_assert_msg(rel <= 0.1, "%s: %s: fd along its gradient %.6g, |g| %.6g", sn, T->name, (lp - lm) / (2 * eps), tn);
    }
    printf("finite differences (%s stem), per tensor: worst relative error %.2g (%s)\n", sn, worst, worst_name);
    model_free(m);
    free(x), free(theta), free(g), free(d);
}

START_TEST(test_finite_differences) {
    fd_case(MODEL_STEM_CIFAR, 8);
    fd_case(MODEL_STEM_IMAGENET, 32);
}
END_TEST

/* ---- top-1 / top-5 ---- */

START_TEST(test_eval_topk) {
    const int k = 12, eb = 7;
    model_spec s = {.width = 4, .stem = MODEL_STEM_CIFAR, .in_c = 1, .in_h = 8, .in_w = 8, .n_classes = k,
                    .batch = 2, .eval_batch = eb, .threads = 0};
    model *m = make(&s);
    model_init(m, 3);
    rng_t r;
    rng_seed(&r, 5);
    float x[7 * 64];
    fill_normal(x, sizeof x / sizeof x[0], &r, 1.0);
    int y[7] = {0};
    double ls = 0;
    long t1 = 0, t5 = 0;
    model_eval(m, x, y, eb, &ls, &t1, &t5);
    float logits[7 * 12];
    memcpy(logits, model_logits(m, 1), sizeof logits);
    /* Labels with chosen ranks: 0, 1, 4, 5, 11, 0, 3 -> top-1 2, top-5 5 (of 7), and with
     * n_valid = 5: top-1 1, top-5 3. */
    const int want_rank[7] = {0, 1, 4, 5, 11, 0, 3};
    for (int i = 0; i < eb; i++) {
        /* order classes by logit descending (selection), pick the one at the wanted rank */
        int used[12] = {0}, pick = -1;
        for (int q = 0; q <= want_rank[i]; q++) {
            int best = -1;
            for (int j = 0; j < k; j++)
                if (!used[j] && (best < 0 || logits[i * k + j] > logits[i * k + best])) best = j;
            used[best] = 1;
            pick = best;
        }
        y[i] = pick;
        ck_assert_int_eq(rank_of(logits + i * k, k, y[i]), want_rank[i]);
    }
    ls = 0, t1 = 0, t5 = 0;
    model_eval(m, x, y, eb, &ls, &t1, &t5);
    ck_assert_int_eq(t1, 2);
    ck_assert_int_eq(t5, 5);
    /* Summed loss = Σ −log softmax(z)[y], computed here in double. */
    double want = 0;
    for (int i = 0; i < eb; i++) {
        double mx = -INFINITY, se = 0;
        for (int j = 0; j < k; j++) mx = fmax(mx, logits[i * k + j]);
        for (int j = 0; j < k; j++) se += exp(logits[i * k + j] - mx);
        want += log(se) + mx - logits[i * k + y[i]];
    }
    ck_assert_msg(fabs(ls - want) <= 1e-5 * fabs(want), "eval loss sum %.9g, expected %.9g", ls, want);
    ls = 0, t1 = 0, t5 = 0;
    model_eval(m, x, y, 5, &ls, &t1, &t5);
    ck_assert_int_eq(t1, 1);
    ck_assert_int_eq(t5, 3);
    /* A diverged model (non-finite logits) gets no sample right, whatever the labels, and a
     * non-finite loss. */
    const float nan = NAN;
    model_params(m)[model_n_params(m) - 1] = nan; /* the last fc bias: logits of one class NaN */
    for (int c = 0; c < k; c++) {
        for (int i = 0; i < eb; i++) y[i] = c;
        ls = 0, t1 = 0, t5 = 0;
        model_eval(m, x, y, eb, &ls, &t1, &t5);
        ck_assert_int_eq(t1, 0);
        ck_assert_int_eq(t5, 0);
        ck_assert(!isfinite(ls));
    }
    model_free(m);
}
END_TEST

/* ---- size, layout, init ---- */

START_TEST(test_resnet18_size) {
    model_spec s = {.width = 64, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 32, .in_w = 32, .n_classes = 1000,
                    .batch = 2, .eval_batch = 2, .threads = 0};
    size_t nbn = 0;
    ck_assert_uint_eq(model_spec_n_params(&s, &nbn), 11689512u); /* torchvision.models.resnet18() */
    ck_assert_uint_eq(nbn, 9600u);                               /* 2 x 4800 BN channels */
    model *m = make(&s);
    ck_assert_uint_eq(model_n_params(m), 11689512u);
    ck_assert_uint_eq(model_n_bn(m), 9600u);
    ck_assert_int_eq(model_n_tensors(m), 62);
    ck_assert_int_eq(model_n_bn_tensors(m), 40);
    size_t off = 0;
    for (int i = 0; i < model_n_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        ck_assert_uint_eq(t->offset, off);
        off += t->n;
    }
    ck_assert_uint_eq(off, model_n_params(m));
    ck_assert_str_eq(model_tensor_at(m, 0)->name, "conv1.weight");
    ck_assert_int_eq(model_tensor_at(m, 0)->shape[0], 64);
    ck_assert_int_eq(model_tensor_at(m, 0)->shape[1], 3);
    ck_assert_int_eq(model_tensor_at(m, 0)->shape[2], 7);
    ck_assert_str_eq(model_tensor_at(m, 61)->name, "fc.bias");
    ck_assert_str_eq(model_tensor_at(m, 60)->name, "fc.weight");
    ck_assert_int_eq(model_tensor_at(m, 60)->shape[0], 1000);
    ck_assert_int_eq(model_tensor_at(m, 60)->shape[1], 512);
    ck_assert_str_eq(model_tensor_at(m, 21)->name, "layer2.0.downsample.0.weight");
    ck_assert_str_eq(model_bn_tensor_at(m, 39)->name, "layer4.1.bn2.running_var");
    /* CIFAR stem: a 3x3 conv instead of 7x7: 147 − 27 weights per output channel fewer. */
    s.stem = MODEL_STEM_CIFAR;
    ck_assert_uint_eq(model_spec_n_params(&s, NULL), 11689512u - 64u * 3u * (49u - 9u));
    model_free(m);
    /* Invalid specs are refused with a message. */
    char err[ERRLEN] = "";
    s.width = 0;
    ck_assert_ptr_null(model_create(&s, err, sizeof err));
    ck_assert_msg(strstr(err, "width") != NULL, "%s", err);
}
END_TEST

START_TEST(test_init) {
    model_spec s = {.width = 8, .stem = MODEL_STEM_CIFAR, .in_c = 3, .in_h = 8, .in_w = 8, .n_classes = 10,
                    .batch = 2, .eval_batch = 2, .threads = 0};
    model *a = make(&s), *b = make(&s);
    const size_t n = model_n_params(a), nb = model_n_bn(a);
    model_init(a, 42);
    model_init(b, 42);
    ck_assert_int_eq(memcmp(model_params(a), model_params(b), n * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(model_bn(a), model_bn(b), nb * sizeof(float)), 0);
    model_init(b, 43);
    ck_assert_int_ne(memcmp(model_params(a), model_params(b), n * sizeof(float)), 0);
    /* Training changes params' running stats; re-initialising restores the same state. */
    float *x = calloc((size_t)2 * 3 * 8 * 8, sizeof(float));
    for (int i = 0; i < 2 * 3 * 8 * 8; i++) x[i] = (float)(i % 7) - 3.0f;
    int y[2] = {1, 2};
    model_init(b, 42);
    model_train_step(b, x, y);
    model_init(b, 42);
    ck_assert_int_eq(memcmp(model_params(a), model_params(b), n * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(model_bn(a), model_bn(b), nb * sizeof(float)), 0);
    /* The distributions documented in model.h. */
    for (int i = 0; i < model_n_tensors(a); i++) {
        const model_tensor *t = model_tensor_at(a, i);
        const float *p = model_params(a) + t->offset;
        double s1 = 0, s2 = 0, mx = 0;
        for (size_t j = 0; j < t->n; j++) s1 += p[j], s2 += (double)p[j] * p[j], mx = fmax(mx, fabs(p[j]));
        double mean = s1 / t->n, sd = sqrt(s2 / t->n - mean * mean);
        if (t->ndim == 4) {
            double want = sqrt(2.0 / ((double)t->shape[0] * t->shape[2] * t->shape[3]));
            if (t->n >= 4096) /* statistics only where there are enough samples */
                ck_assert_msg(fabs(sd / want - 1) < 0.05 && fabs(mean) < 0.05 * want, "%s: sd %.4g, want %.4g", t->name, sd,
                              want);
        } else if (strstr(t->name, "bn") || strstr(t->name, "downsample.1")) {
            float v = strstr(t->name, ".weight") ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->n; j++) ck_assert_float_eq(p[j], v);
        } else { /* fc */
            double bound = 1.0 / sqrt(64.0);
            ck_assert_msg(mx <= bound && mx > 0.8 * bound, "%s: max |w| %.4g, bound %.4g", t->name, mx, bound);
        }
    }
    for (int i = 0; i < model_n_bn_tensors(a); i++) {
        const model_tensor *t = model_bn_tensor_at(a, i);
        for (size_t j = 0; j < t->n; j++) ck_assert_float_eq(model_bn(a)[t->offset + j], i % 2 ? 1.0f : 0.0f);
    }
    free(x);
    model_free(a);
    model_free(b);
}
END_TEST

/* ---- no allocation in the step ---- */

START_TEST(test_no_allocation) {
    for (int stem = 0; stem < 2; stem++) {
        model_spec s = {.width = 8, .stem = (model_stem)stem, .in_c = 3, .in_h = 16, .in_w = 16, .n_classes = 10,
                        .batch = 4, .eval_batch = 3, .threads = 0};
        model *m = make(&s);
        model_init(m, 1);
        float *x = calloc((size_t)4 * 3 * 16 * 16, sizeof(float));
        for (int i = 0; i < 4 * 3 * 16 * 16; i++) x[i] = (float)((i * 31) % 17) / 17.0f;
        int y[4] = {1, 2, 3, 4};
        double ls = 0;
        long t1 = 0, t5 = 0;
        model_train_step(m, x, y); /* first call: OpenMP thread pool, lazy library set-up */
        model_eval(m, x, y, 3, &ls, &t1, &t5);
        alloc_count = alloc_outstanding = 0;
        alloc_largest = 0;
        alloc_armed = 1;
        for (int it = 0; it < 3; it++) {
            model_train_step(m, x, y);
            model_eval(m, x, y, 3, &ls, &t1, &t5);
        }
        alloc_armed = 0;
        printf("no-allocation test (%s stem): %ld small allocations inside oneDNN's execute, largest %zu bytes, "
               "%ld bytes outstanding\n", stem ? "imagenet" : "cifar", alloc_count, alloc_largest, alloc_outstanding);
        ck_assert_msg(alloc_largest < 1024, "an allocation of %zu bytes in model_train_step/model_eval", alloc_largest);
        ck_assert_msg(alloc_outstanding == 0, "%ld bytes allocated and not freed by model_train_step/model_eval",
                      alloc_outstanding);
        free(x);
        model_free(m);
    }
}
END_TEST

/* ---- devices (model.h): on the CPU the host mirrors are the vectors ---- */

START_TEST(test_device_api_cpu) {
    model_spec s = {.width = 4, .stem = MODEL_STEM_CIFAR, .in_c = 1, .in_h = 8, .in_w = 8, .n_classes = 10,
                    .batch = 4, .eval_batch = 4, .threads = 1};
    model *m = make(&s);
    model_init(m, 3);
    ck_assert_int_eq(model_get_device(m), MODEL_CPU);
    ck_assert_int_eq(model_host_sync(m), 1);
    const size_t n = model_n_params(m);
    float *x = model_host_alloc(m, (size_t)4 * 64 * sizeof(float));
    for (int i = 0; i < 4 * 64; i++) x[i] = (float)((i * 37) % 23) / 23.0f - 0.5f;
    int y[4] = {0, 3, 7, 9};
    /* Reference: the parameters, updated by sgd_update with a velocity of our own. */
    float *theta = malloc(n * sizeof(float)), *v = calloc(n, sizeof(float)), *before = malloc(n * sizeof(float));
    memcpy(theta, model_params(m), n * sizeof(float));
    for (int step = 0; step < 3; step++) {
        model_set_host_sync(m, step % 2); /* both modes are the same on the CPU */
        model_train_step(m, x, y);
        memcpy(before, model_params(m), n * sizeof(float));
        model_upload(m, MODEL_PARAMS | MODEL_GRADS | MODEL_BN);   /* no-ops */
        model_download(m, MODEL_PARAMS | MODEL_GRADS | MODEL_BN);
        ck_assert_mem_eq(before, model_params(m), n * sizeof(float));
        ck_assert_int_eq(sgd_update(theta, model_grads(m), v, n, 0.05f, 0.9f, 1e-4f, 1), 1);
        ck_assert_int_eq(model_sgd_update(m, 0.05f, 0.9f, 1e-4f, 1), 1);
        ck_assert_mem_eq(theta, model_params(m), n * sizeof(float)); /* bitwise: the same update */
    }
    /* A non-finite gradient is reported, as by sgd_update. */
    model_grads(m)[n / 2] = NAN;
    ck_assert_int_eq(model_sgd_update(m, 0.05f, 0.9f, 1e-4f, 1), 0);
    model_init(m, 3); /* zeroes the model's velocity: the first update is then θ − α(g + λθ)(1 + µ) */
    memcpy(theta, model_params(m), n * sizeof(float));
    memset(model_grads(m), 0, n * sizeof(float));
    ck_assert_int_eq(model_sgd_update(m, 0.5f, 0.9f, 0.0f, 1), 1);
    ck_assert_mem_eq(theta, model_params(m), n * sizeof(float));
    model_host_free(m, x);
    free(theta), free(v), free(before);
    model_free(m);
}
END_TEST

/* The errors of device and precision on a CPU-only build and on the CPU backend. */
START_TEST(test_device_errors) {
    char err[ERRLEN] = "";
    model_spec s = {.width = 4, .stem = MODEL_STEM_CIFAR, .in_c = 1, .in_h = 8, .in_w = 8, .n_classes = 10,
                    .batch = 4, .eval_batch = 4, .threads = 1, .precision = MODEL_TF32};
    ck_assert_ptr_null(model_create(&s, err, sizeof err));
    ck_assert_msg(strstr(err, "precision tf32 is for device cuda") != NULL, "%s", err);
    if (!gpu_built()) {
        s.device = MODEL_CUDA, s.precision = MODEL_FP32;
        ck_assert_ptr_null(model_create(&s, err, sizeof err));
        ck_assert_msg(strstr(err, "rebuild with `make CUDA=1`") != NULL, "%s", err);
        char desc[64] = "x";
        ck_assert_int_ne(gpu_select(0, 1, desc, sizeof desc, err, sizeof err), 0);
        ck_assert_msg(strstr(err, "built without it") != NULL, "%s", err);
    }
}
END_TEST

static Suite *model_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("resnet18");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_reference_cifar);
    tcase_add_test(tc, test_reference_imagenet);
    tcase_add_test(tc, test_bf16_cifar);
    tcase_add_test(tc, test_bf16_imagenet);
    tcase_add_test(tc, test_finite_differences);
    tcase_add_test(tc, test_eval_topk);
    tcase_add_test(tc, test_resnet18_size);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_no_allocation);
    tcase_add_test(tc, test_device_api_cpu);
    tcase_add_test(tc, test_device_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    printf("oneDNN ISA: %s\n", nn_isa_name());
    return run_suite(model_suite());
}
