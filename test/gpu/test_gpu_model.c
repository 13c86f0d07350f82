/* test_gpu_model.c — the whole network of cuda/model*.cu (cuda/gpu.h) against src/nn/model.c on
 * the CPU (itself held to torchvision by test_model.c), from the same parameters, BN statistics
 * and minibatches: ResNet-18 with the CIFAR stem (fp32, tf32, bf16) and the ImageNet stem (7x7/2
 * conv + max pool; fp32, bf16), and the linear model (fp32, bf16). For three steps: the training loss, the training
 * logits, every parameter gradient (per tensor), the BN running statistics after the step, the
 * evaluation logits of n_valid < eval_batch rows, and the SGD update (Nesterov) of params and
 * velocity on the device against sgd_update on the host; that the first step repeated from the
 * same state gives bitwise the same loss, gradients and statistics; then the non-finite flag, a velocity
 * reset, and that the steps allocate no device memory (cudaMemGetInfo unchanged once every
 * kernel has been loaded). DSGD_GPU_TEST_FULL=1 adds torchvision's ResNet-18 at 224x224 (width
 * 64, batch 16), the benchmark's shapes, at looser gradient tolerances (see that test).
 *
 * Tolerances (relative L2 error per tensor, every one printed): fp32 5e-5 for losses, logits and
 * running statistics, 5e-4 for gradients and updated parameters (two fp32 backends with
 * different summation orders and convolution algorithms, through 18 layers with BN at small
 * batches; the CPU itself is held to PyTorch at 1e-5 / 1e-4); tf32 5e-2 / 2e-1 (10-bit mantissas:
 * a smoke test of that path, not a precision claim). After each step the host parameters and
 * statistics are uploaded again, so every step compares one step of each backend from the same
 * state; the SGD update is compared at 1e-6 (fp32 on both sides, the same formula).
 *
 * bf16 (mixed precision: bf16 activations and weight copies, fp32 master weights, gradients, BN
 * and loss) against the fp32 CPU model, at tolerances set from the mock (test/gpu/mock, which
 * rounds to bf16 wherever the GPU stores bf16) with a margin of 2-4x: 1e-1 for the loss, logits,
 * BN statistics and evaluation logits (measured <= 2.8e-2: 8-bit mantissas, u = 2^-8, through 18
 * layers); for gradients 0.7 for the whole vector, 0.9 for each conv and fc weight (measured <=
 * 0.39 and 0.44) and 1e-1 for the fc layer (measured <= 3.2e-2). Gradients below the fc layer
 * differ that much although each op is accurate to about 1e-3 (test_gpu_ops) because about 1 % of
 * the ReLUs, those with inputs within the forward error of zero, switch sides, and a switched
 * unit's gradient differs entirely; the gap grows as √u (dropping 2 more mantissa bits in the
 * mock doubles it), so it is the precision's, not a fault's, and a wrong buffer or type gives
 * errors >= 1. BN's γ and β gradients are small sums of such noisy terms (relative errors up to
 * 3 measured) and count only in the whole vector. What matters is that training follows fp32:
 * descent_case runs 8 Nesterov steps on one minibatch in fp32 and bf16 from the CPU model's
 * initial state; each step's loss must stay within 5e-2 of the first loss of the CPU's (bf16
 * measured <= 9e-3) and the loss must halve.
 *
 * Without a GPU it prints one line and exits 0 (1 with DSGD_REQUIRE_GPU set, test/gpu/testgpu.h). The tests run in this process (CK_NOFORK):
 * CUDA does not survive fork() after initialisation. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu.h"
#include "nn/layout.h"
#include "nn/model.h"
#include "optim/sgd.h"
#include "testgpu.h"
#include "testutil.h"
#include "util/util.h"

/* bf16 against the fp32 CPU model (see the file comment): */
#define TOL_BF16_FWD 1e-1        /* loss, logits, BN statistics, evaluation logits (measured <= 2.8e-2) */
#define TOL_BF16_GRAD_ALL 7e-1   /* the whole gradient vector (measured <= 0.39) */
#define TOL_BF16_GRAD_WEIGHT 9e-1 /* each conv and fc weight (measured <= 0.44) */
#define TOL_BF16_GRAD_FC 1e-1    /* fc weight and bias, before any ReLU (measured <= 3.2e-2) */
#define TOL_DESCENT 5e-2         /* |loss GPU - loss CPU| / first loss, each step (bf16 measured <= 9e-3) */


static int mock; /* over the CPU stand-ins (test/gpu/mock): set by main */
long mock_cuda_host_syncs(void) __attribute__((weak)); /* test/gpu/mock/mock_cuda.c */
long mock_cuda_objects(void) __attribute__((weak));
long mock_cuda_graph_launches(void) __attribute__((weak));
long mock_bn_add_calls(void) __attribute__((weak)); /* test/gpu/mock/mock_layers.c */

/* Every parameter tensor's gradient within tol; prints the worst. */
static void check_grads(const nn_layout *L, const float *got, const float *want, double tol) {
    double worst = 0;
    int wi = 0;
    for (int i = 0; i < L->n_tensors; i++) {
        const model_tensor *t = &L->tensors[i];
        const double r = rel_l2(got + t->offset, want + t->offset, t->n);
        ck_assert_msg(r <= tol, "gradient of %s: relative L2 error %.3g > %.1g", t->name, r, tol);
        if (r > worst || i == 0) worst = r, wi = i;
    }
    printf("    %-44s rel. error %.3g (tol %.0e, %s)\n", "gradients, worst tensor", worst, tol, L->tensors[wi].name);
}

/* bf16 gradients against fp32 ones (file comment): the whole vector, every conv and fc weight,
 * and the fc layer tightly; BN's γ and β gradients only inside the whole vector, printed. */
static void check_grads_bf16(const nn_layout *L, const float *got, const float *want) {
    double ww = 0, wb = 0;
    int iw = 0, ib = -1;
    for (int i = 0; i < L->n_tensors; i++) {
        const model_tensor *t = &L->tensors[i];
        const double r = rel_l2(got + t->offset, want + t->offset, t->n);
        if (L->kind[i] == T_CONV || L->kind[i] == T_FC_WEIGHT) {
            ck_assert_msg(r <= TOL_BF16_GRAD_WEIGHT, "gradient of %s: relative L2 error %.3g > %.1g", t->name, r,
                          TOL_BF16_GRAD_WEIGHT);
            if (r > ww) ww = r, iw = i;
        } else if (L->kind[i] != T_FC_BIAS && r > wb) {
            wb = r, ib = i;
        }
    }
    CHECK_REL("gradients, all parameters", got, want, L->n_params, TOL_BF16_GRAD_ALL);
    printf("    %-44s rel. error %.3g (tol %.0e, %s)\n", "gradients, worst conv / fc weight", ww, TOL_BF16_GRAD_WEIGHT,
           L->tensors[iw].name);
    const size_t nfc = (size_t)L->s.n_classes * L->feat;
    CHECK_REL("gradient of fc.weight", got + L->fc_w, want + L->fc_w, nfc, TOL_BF16_GRAD_FC);
    CHECK_REL("gradient of fc.bias", got + L->fc_b, want + L->fc_b, (size_t)L->s.n_classes, TOL_BF16_GRAD_FC);
    if (ib >= 0)
        printf("    %-44s rel. error %.3g (not held: small sums of noisy terms, %s)\n", "gradients, worst BN gamma / beta", wb,
               L->tensors[ib].name);
}

static const char *prec_name(gpu_precision p) { return p == GPU_TF32 ? "tf32" : p == GPU_BF16 ? "bf16" : "fp32"; }

/* tol_fwd, tol_grad: 0 for the defaults above. */
static void model_case_tol(const char *name, model_spec s, gpu_precision prec, double tol_fwd, double tol_grad) {
    if (tol_fwd <= 0) tol_fwd = prec == GPU_TF32 ? 5e-2 : prec == GPU_BF16 ? TOL_BF16_FWD : 5e-5;
    if (tol_grad <= 0) tol_grad = prec == GPU_TF32 ? 2e-1 : 5e-4; /* bf16: check_grads_bf16 */
    printf("  %s (%s)\n", name, prec_name(prec));
    char err[ERRLEN];
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    gpu_model *g = gpu_model_create(&L, prec, err, sizeof err);
    ck_assert_msg(g != NULL, "gpu_model_create: %s", err);
    /* fp32 with Winograd / FFT convolutions (cuDNN's choice: DSGD_CUDNN_ALGO=heuristic makes it the
     * same in every process): each such layer may be off by up to TOL_FP32_TRANSFORM (2e-4,
     * test_gpu_ops.c) where a GEMM one is off by about 1e-6, so the whole network's loss and logits
     * are held to 4x the default and its gradients to 4x too (the defaults are set by summation
     * order over 20 layers; one transform layer's 2e-4 then dominates). */
    const int transforms = gpu_model_conv_transforms(g);
    if (prec == GPU_FP32 && transforms > 0) {
        tol_fwd *= 4, tol_grad *= 4;
        printf("    %d convolution directions run Winograd / FFT: fp32 tolerances x4 (%.0e, %.0e)\n", transforms, tol_fwd,
               tol_grad);
    }
    model *m = model_create(&s, err, sizeof err);
    ck_assert_msg(m != NULL, "model_create: %s", err);
    model_init(m, 7);
    const size_t np = model_n_params(m), nb = model_n_bn(m);
    ck_assert_uint_eq(np, L.n_params);
    ck_assert_uint_eq(nb, L.n_bn);

    /* A fresh model is all zeros on the device. */
    float *gp = malloc(np * sizeof(float) + 4), *gg = malloc(np * sizeof(float) + 4), *gb = malloc(nb * sizeof(float) + 4);
    float *gg2 = malloc(np * sizeof(float) + 4), *gb2 = malloc(nb * sizeof(float) + 4), *bn0 = malloc(nb * sizeof(float) + 4);
    gpu_model_download(g, GPU_PARAMS | GPU_GRADS | GPU_BN, gp, gg, gb);
    for (size_t i = 0; i < np; i++) ck_assert_msg(gp[i] == 0.0f && gg[i] == 0.0f, "device vector not zero at %zu", i);
    for (size_t i = 0; i < nb; i++) ck_assert_msg(gb[i] == 0.0f, "device bn not zero at %zu", i);

    const int n = s.batch, ne = s.eval_batch, n_valid = ne > 1 ? ne - 1 : ne, k = s.n_classes;
    const size_t in = (size_t)s.in_c * s.in_h * s.in_w;
    float *x = malloc((size_t)n * in * sizeof(float)), *ex = malloc((size_t)ne * in * sizeof(float) + 4);
    int *y = malloc((size_t)n * sizeof(int)), *ey = malloc((size_t)ne * sizeof(int) + 4);
    float *vel = calloc(np, sizeof(float)), *logits = malloc((size_t)(n > ne ? n : ne) * k * sizeof(float));
    rng_t r;
    rng_seed(&r, 99);
    const float alpha = 0.05f, mu = 0.9f, lambda = 1e-4f;
    size_t free0 = 0, free1 = 0, total = 0;
    char repro[256] = ""; /* what differed between two identical steps */

    for (int step = 0; step < 3; step++) {
        printf("   step %d\n", step);
        for (size_t i = 0; i < (size_t)n * in; i++) x[i] = (float)rng_normal(&r);
        for (int i = 0; i < n; i++) y[i] = (int)rng_below(&r, (uint64_t)k);
        for (size_t i = 0; i < (size_t)ne * in; i++) ex[i] = (float)rng_normal(&r);
        for (int i = 0; i < ne; i++) ey[i] = (int)rng_below(&r, (uint64_t)k);
        gpu_model_upload(g, GPU_PARAMS | GPU_BN, model_params(m), NULL, model_bn(m));
        if (step == 0 && nb) memcpy(bn0, model_bn(m), nb * sizeof(float)); /* the statistics before the step */

        const float lc = model_train_step(m, x, y);
        const float lg = gpu_model_train_step(g, x, y);
        CHECK_REL("training loss", &lg, &lc, 1, tol_fwd);
        gpu_model_train_logits(g, logits);
        CHECK_REL("training logits", logits, model_logits(m, 0), (size_t)n * k, tol_fwd);
        gpu_model_download(g, GPU_GRADS | GPU_BN, NULL, gg, gb);
        if (prec == GPU_BF16) check_grads_bf16(&L, gg, model_grads(m));
        else check_grads(&L, gg, model_grads(m), tol_grad);
        if (nb) CHECK_REL("BN running statistics", gb, model_bn(m), nb, tol_fwd);
        if (step == 0) {
            /* The same step again from the same state gives the same bits: the convolutions are
             * deterministic algorithms (cuDNN has one for every direction), BN, max pooling
             * (CUDNN_POOLING_MAX_DETERMINISTIC) and our kernels sum in a fixed order. A
             * difference means a race, an uninitialised read or an algorithm that is not.
             * Checked at the end, so that the comparisons with the CPU still run. */
            if (nb) gpu_model_upload(g, GPU_BN, NULL, NULL, bn0);
            const float lg2 = gpu_model_train_step(g, x, y);
            gpu_model_download(g, GPU_GRADS | GPU_BN, NULL, gg2, gb2);
            if (memcmp(&lg2, &lg, sizeof lg) != 0)
                snprintf(repro, sizeof repro, "training loss %.9g then %.9g", lg, lg2);
            for (int i = 0; i < L.n_tensors && !repro[0]; i++) {
                const model_tensor *t = &L.tensors[i];
                if (memcmp(gg + t->offset, gg2 + t->offset, t->n * sizeof(float)) != 0)
                    snprintf(repro, sizeof repro, "gradient of %s (relative L2 difference %.3g)", t->name,
                             rel_l2(gg2 + t->offset, gg + t->offset, t->n));
            }
            if (!repro[0] && nb && memcmp(gb, gb2, nb * sizeof(float)) != 0)
                snprintf(repro, sizeof repro, "BN running statistics");
            printf("    %-44s %s%s\n", "the same step twice", repro[0] ? "DIFFERS: " : "bitwise identical", repro);
        }

        /* Evaluation on the statistics just updated (the CPU's: the same up to tol_fwd). */
        gpu_model_upload(g, GPU_BN, NULL, NULL, model_bn(m));
        double ls = 0;
        long t1 = 0, t5 = 0;
        model_eval(m, ex, ey, n_valid, &ls, &t1, &t5);
        gpu_model_eval(g, ex, n_valid, logits);
        CHECK_REL("evaluation logits", logits, model_logits(m, 1), (size_t)n_valid * k, tol_fwd);

        /* One update on each side from the same gradients (the CPU's). */
        gpu_model_upload(g, GPU_GRADS, NULL, model_grads(m), NULL);
        ck_assert_int_eq(sgd_update(model_params(m), model_grads(m), vel, np, alpha, mu, lambda, 1), 1);
        ck_assert_int_eq(gpu_model_sgd_update(g, alpha, mu, lambda, 1), 1);
        gpu_model_download(g, GPU_PARAMS, gp, NULL, NULL);
        CHECK_REL("parameters after the SGD update", gp, model_params(m), np, 1e-6);
        if (step == 0) {
            ck_assert(cudaMemGetInfo(&free0, &total) == cudaSuccess);
        }
    }
    ck_assert(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    printf("    free device memory after step 0 %zu, after step 2 %zu bytes\n", free0, free1);
    ck_assert_msg(free1 == free0, "device memory changed during training: %zu -> %zu bytes free", free0, free1);

    /* A non-finite gradient is reported; a zeroed velocity restarts the momentum. */
    memcpy(gg, model_grads(m), np * sizeof(float));
    gg[np / 2] = NAN;
    gpu_model_upload(g, GPU_PARAMS | GPU_GRADS, model_params(m), gg, NULL);
    ck_assert_int_eq(gpu_model_sgd_update(g, alpha, mu, lambda, 1), 0);
    gpu_model_zero_velocity(g);
    memset(vel, 0, np * sizeof(float));
    gpu_model_upload(g, GPU_PARAMS | GPU_GRADS, model_params(m), model_grads(m), NULL);
    ck_assert_int_eq(sgd_update(model_params(m), model_grads(m), vel, np, alpha, mu, lambda, 0), 1);
    ck_assert_int_eq(gpu_model_sgd_update(g, alpha, mu, lambda, 0), 1);
    gpu_model_download(g, GPU_PARAMS, gp, NULL, NULL);
    CHECK_REL("parameters after a velocity reset", gp, model_params(m), np, 1e-6);

    ck_assert_msg(!repro[0], "the same training step twice from the same state differs: %s", repro);
    gpu_model_free(g);
    model_free(m);
    free(gp), free(gg), free(gb), free(gg2), free(gb2), free(bn0), free(x), free(ex), free(y), free(ey), free(vel), free(logits);
}

static void model_case(const char *name, model_spec s, gpu_precision prec) { model_case_tol(name, s, prec, 0, 0); }

static model_spec cifar(int width, int batch, int eval_batch) {
    model_spec s = {.arch = MODEL_RESNET18, .width = width, .stem = MODEL_STEM_CIFAR, .in_c = 3, .in_h = 32, .in_w = 32,
                    .n_classes = 10, .batch = batch, .eval_batch = eval_batch, .threads = 0};
    return s;
}

START_TEST(test_resnet_cifar_fp32) { model_case("resnet18 CIFAR stem, width 8, batch 8", cifar(8, 8, 6), GPU_FP32); }
END_TEST

START_TEST(test_resnet_cifar_odd) {
    /* Width 3: parameter views off 16-byte alignment (the scalar paths, cuDNN on odd pointers),
     * 1-channel input. */
    model_spec s = cifar(3, 5, 4);
    s.in_c = 1, s.in_h = s.in_w = 28;
    model_case("resnet18 CIFAR stem, width 3, 1x28x28, batch 5", s, GPU_FP32);
}
END_TEST

START_TEST(test_resnet_cifar_tf32) { model_case("resnet18 CIFAR stem, width 8, batch 8", cifar(8, 8, 6), GPU_TF32); }
END_TEST

START_TEST(test_resnet_cifar_bf16) { model_case("resnet18 CIFAR stem, width 8, batch 8", cifar(8, 8, 6), GPU_BF16); }
END_TEST

START_TEST(test_resnet_cifar_odd_bf16) {
    model_spec s = cifar(3, 5, 4);
    s.in_c = 1, s.in_h = s.in_w = 28;
    model_case("resnet18 CIFAR stem, width 3, 1x28x28, batch 5", s, GPU_BF16);
}
END_TEST

START_TEST(test_resnet_imagenet_bf16) {
    model_spec s = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 64,
                    .in_w = 64, .n_classes = 20, .batch = 4, .eval_batch = 3, .threads = 0};
    model_case("resnet18 ImageNet stem, width 8, 3x64x64, batch 4", s, GPU_BF16);
}
END_TEST

/* The bf16 fallback (cuda/layers.h gpu_bf16_fallback): a model whose BN and max-pooling layers run
 * on fp32 tensors with casts around them (DSGD_BF16_FALLBACK=all, as when cuDNN refuses bf16 for
 * them) against the default bf16 model: two training steps with SGD updates, then evaluation, on
 * the same parameters and data. The same arithmetic (BN in fp32, rounded once; pooling selects),
 * so over the mock bit for bit; on a GPU within the bf16 tolerances (cuDNN's bf16 and fp32 BN
 * kernels may sum in other orders). Over the mock, MOCK_CUDNN_REFUSE_BF16=bn,pool is a refusal too. */
START_TEST(test_bf16_fallback) {
    model_spec s = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 64,
                    .in_w = 64, .n_classes = 20, .batch = 4, .eval_batch = 3, .threads = 0};
    printf("  bf16 fallback: resnet18 ImageNet stem, width 8, 3x64x64, batch 4\n");
    char err[ERRLEN];
    model *m = model_create(&s, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    model_init(m, 7);
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    gpu_model *g[2];
    for (int v = 0; v < 2; v++) {
        if (v == 1) setenv("DSGD_BF16_FALLBACK", "all", 1);
        g[v] = gpu_model_create(&L, GPU_BF16, err, sizeof err);
        unsetenv("DSGD_BF16_FALLBACK");
        ck_assert_msg(g[v] != NULL, "gpu_model_create: %s", err);
        printf("    model %d: fallback \"%s\"\n", v, gpu_model_bf16_fallback(g[v]));
        gpu_model_upload(g[v], GPU_PARAMS | GPU_BN, model_params(m), NULL, model_bn(m));
    }
    ck_assert_msg(strstr(gpu_model_bf16_fallback(g[1]), "BN: ") && strstr(gpu_model_bf16_fallback(g[1]), "max pooling: "),
                  "fallback not taken: \"%s\"", gpu_model_bf16_fallback(g[1]));
    if (mock && !getenv("MOCK_CUDNN_REFUSE_BF16")) ck_assert_str_eq(gpu_model_bf16_fallback(g[0]), "");
    const double tol_fwd = mock ? 0 : TOL_BF16_FWD, tol_grad = mock ? 0 : TOL_BF16_GRAD_ALL;
    const size_t np = L.n_params, nb = L.n_bn, in = (size_t)s.in_c * s.in_h * s.in_w;
    float *x = malloc((size_t)s.batch * in * sizeof(float)), *ex = malloc((size_t)s.eval_batch * in * sizeof(float));
    int *y = malloc((size_t)s.batch * sizeof(int));
    float *v[2][3], *lo[2];
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 3; j++) v[k][j] = malloc((j == 2 ? nb : np) * sizeof(float) + 4);
        lo[k] = malloc((size_t)s.eval_batch * s.n_classes * sizeof(float));
    }
    rng_t r;
    rng_seed(&r, 5);
    for (int step = 0; step < 2; step++) {
        for (size_t i = 0; i < (size_t)s.batch * in; i++) x[i] = (float)rng_normal(&r);
        for (int i = 0; i < s.batch; i++) y[i] = (int)rng_below(&r, (uint64_t)s.n_classes);
        float loss[2];
        for (int k = 0; k < 2; k++) {
            loss[k] = gpu_model_train_step(g[k], x, y);
            gpu_model_download(g[k], GPU_GRADS | GPU_BN, NULL, v[k][1], v[k][2]);
            ck_assert(gpu_model_sgd_update(g[k], 0.05f, 0.9f, 1e-4f, 1));
            gpu_model_download(g[k], GPU_PARAMS, v[k][0], NULL, NULL);
        }
        printf("   step %d: loss %.7g, with the fallback %.7g\n", step, loss[0], loss[1]);
        CHECK_REL("training loss", &loss[1], &loss[0], 1, tol_fwd);
        CHECK_REL("gradients", v[1][1], v[0][1], np, tol_grad);
        CHECK_REL("BN running statistics", v[1][2], v[0][2], nb, tol_fwd);
        CHECK_REL("parameters after the update", v[1][0], v[0][0], np, tol_fwd);
    }
    for (size_t i = 0; i < (size_t)s.eval_batch * in; i++) ex[i] = (float)rng_normal(&r);
    for (int k = 0; k < 2; k++) gpu_model_eval(g[k], ex, s.eval_batch, lo[k]);
    CHECK_REL("evaluation logits", lo[1], lo[0], (size_t)s.eval_batch * s.n_classes, tol_fwd);
    for (int k = 0; k < 2; k++) {
        gpu_model_free(g[k]);
        for (int j = 0; j < 3; j++) free(v[k][j]);
        free(lo[k]);
    }
    free(x), free(ex), free(y);
    model_free(m);
}
END_TEST

/* Layout NHWC (DSGD_GPU_LAYOUT=nhwc; cuda/layers.h "Layout NHWC"): the NHWC network against the
 * CPU model at the tolerances of its precision (fp32, tf32, bf16; both stems, the odd shapes), as
 * the NCHW one is held. */
static void nhwc_case(const char *name, model_spec s, gpu_precision prec, int fused) {
    setenv("DSGD_GPU_LAYOUT", "nhwc", 1);
    if (fused) setenv("DSGD_GPU_BNRELU", fused == 2 ? "fused_add" : "fused", 1);
    char t[160];
    snprintf(t, sizeof t, "NHWC%s: %s", fused == 2 ? ", BN+ReLU fused, BN+add+ReLU fused" : fused ? ", BN+ReLU fused" : "", name);
    model_case(t, s, prec);
    unsetenv("DSGD_GPU_LAYOUT");
    unsetenv("DSGD_GPU_BNRELU");
}

START_TEST(test_nhwc_cpu) {
    model_spec odd = cifar(3, 5, 4);
    odd.in_c = 1, odd.in_h = odd.in_w = 28;
    const model_spec in = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 64,
                           .in_w = 64, .n_classes = 20, .batch = 4, .eval_batch = 3, .threads = 0};
    nhwc_case("resnet18 CIFAR stem, width 8, batch 8", cifar(8, 8, 6), GPU_FP32, 0);
    nhwc_case("resnet18 CIFAR stem, width 3, 1x28x28, batch 5", odd, GPU_FP32, 0);
    nhwc_case("resnet18 ImageNet stem, width 8, 3x64x64, batch 4", in, GPU_FP32, 0);
    nhwc_case("resnet18 CIFAR stem, width 8, batch 8", cifar(8, 8, 6), GPU_TF32, 0);
    nhwc_case("resnet18 CIFAR stem, width 8, batch 8", cifar(8, 8, 6), GPU_BF16, 0);
    nhwc_case("resnet18 CIFAR stem, width 3, 1x28x28, batch 5", odd, GPU_BF16, 0);
    nhwc_case("resnet18 ImageNet stem, width 8, 3x64x64, batch 4", in, GPU_BF16, 0);
    model_spec lin = {.arch = MODEL_LINEAR, .in_c = 1, .in_h = 28, .in_w = 28, .n_classes = 10, .batch = 32,
                      .eval_batch = 20, .threads = 0};
    nhwc_case("linear 784 -> 10, batch 32 (no layout: as NCHW)", lin, GPU_FP32, 0);
    /* BN+ReLU fused (DSGD_GPU_BNRELU=fused) */
    nhwc_case("resnet18 ImageNet stem, width 8, 3x64x64, batch 4", in, GPU_FP32, 1);
    nhwc_case("resnet18 CIFAR stem, width 8, batch 8", cifar(8, 8, 6), GPU_TF32, 1);
    nhwc_case("resnet18 ImageNet stem, width 8, 3x64x64, batch 4", in, GPU_BF16, 1);
    nhwc_case("resnet18 CIFAR stem, width 3, 1x28x28, batch 5", odd, GPU_BF16, 1);
}
END_TEST

/* Set (on) or unset each VAR=value of the space-separated list env. */
static void set_envs(const char *env, int on) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = '\0';
        if (on) setenv(tok, eq + 1, 1);
        else unsetenv(tok);
    }
}

/* Models built with the environments env[0..nv) (VAR=value lists) trained side by side from the
 * same state for two steps with SGD updates, then evaluated; each against model 0: loss,
 * gradients, BN statistics, parameters, evaluation logits within tol_fwd / tol_grad (0: bit for
 * bit). */
static void same_models(const char *title, model_spec s, gpu_precision prec, int nv, const char *const *env,
                        double tol_fwd, double tol_grad) {
    printf("  %s (%s)\n", title, prec_name(prec));
    char err[ERRLEN];
    model *m = model_create(&s, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    model_init(m, 7);
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    gpu_model *g[4];
    ck_assert_int_le(nv, 4);
    for (int v = 0; v < nv; v++) {
        set_envs(env[v], 1);
        g[v] = gpu_model_create(&L, prec, err, sizeof err);
        set_envs(env[v], 0);
        ck_assert_msg(g[v] != NULL, "gpu_model_create (%s): %s", env[v], err);
        gpu_model_upload(g[v], GPU_PARAMS | GPU_BN, model_params(m), NULL, model_bn(m));
        gpu_model_zero_velocity(g[v]);
    }
    const size_t np = L.n_params, nb = L.n_bn, in = (size_t)s.in_c * s.in_h * s.in_w;
    const size_t nl = (size_t)s.eval_batch * s.n_classes;
    float *x = malloc((size_t)s.batch * in * sizeof(float)), *ex = malloc((size_t)s.eval_batch * in * sizeof(float));
    int *y = malloc((size_t)s.batch * sizeof(int));
    float *v[4][3], *lo[4];
    for (int k = 0; k < nv; k++) {
        for (int j = 0; j < 3; j++) v[k][j] = malloc((j == 2 ? nb : np) * sizeof(float) + 4);
        lo[k] = malloc(nl * sizeof(float));
    }
    rng_t r;
    rng_seed(&r, 5);
    for (int step = 0; step < 2; step++) {
        for (size_t i = 0; i < (size_t)s.batch * in; i++) x[i] = (float)rng_normal(&r);
        for (int i = 0; i < s.batch; i++) y[i] = (int)rng_below(&r, (uint64_t)s.n_classes);
        float loss[4];
        for (int k = 0; k < nv; k++) {
            loss[k] = gpu_model_train_step(g[k], x, y);
            gpu_model_download(g[k], GPU_GRADS | GPU_BN, NULL, v[k][1], v[k][2]);
            ck_assert(gpu_model_sgd_update(g[k], 0.05f, 0.9f, 1e-4f, 1));
            gpu_model_download(g[k], GPU_PARAMS, v[k][0], NULL, NULL);
        }
        ck_assert(isfinite(loss[0]));
        for (int k = 1; k < nv; k++) {
            printf("   step %d: loss %.9g, with %s %.9g\n", step, loss[0], env[k], loss[k]);
            CHECK_REL("training loss", &loss[k], &loss[0], 1, tol_fwd);
            CHECK_REL("gradients", v[k][1], v[0][1], np, tol_grad);
            CHECK_REL("BN running statistics", v[k][2], v[0][2], nb, tol_fwd);
            CHECK_REL("parameters after the update", v[k][0], v[0][0], np, tol_fwd);
        }
    }
    for (size_t i = 0; i < (size_t)s.eval_batch * in; i++) ex[i] = (float)rng_normal(&r);
    for (int k = 0; k < nv; k++) gpu_model_eval(g[k], ex, s.eval_batch, lo[k]);
    for (int k = 1; k < nv; k++) CHECK_REL("evaluation logits", lo[k], lo[0], nl, tol_fwd);
    for (int k = 0; k < nv; k++) {
        gpu_model_free(g[k]);
        for (int j = 0; j < 3; j++) free(v[k][j]);
        free(lo[k]);
    }
    free(x), free(ex), free(y);
    model_free(m);
}

/* NHWC against NCHW, and BN+ReLU fused against not: over the mock bit for bit (its stand-ins transpose around the same CPU
 * layers and sum the global average pool in the same order, so any layout mistake — a buffer
 * read with the wrong strides, a weight copy not transposed, a gradient not transposed back —
 * changes the values); on a GPU within the precision's tolerances (other cuDNN kernels, other
 * summation orders). DSGD_GPU_CASTS=one with NHWC (the bf16 casts and transpositions in one
 * launch) against NHWC's casts one by one: bit for bit everywhere. A bad value is refused. */
START_TEST(test_nhwc_nchw) {
    const model_spec s = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 48,
                          .in_w = 48, .n_classes = 10, .batch = 4, .eval_batch = 3, .threads = 0};
    setenv("DSGD_CUDNN_ALGO", "heuristic", 1);
    const char *const fp[] = {"", "DSGD_GPU_LAYOUT=nhwc"};
    same_models("NHWC vs NCHW: resnet18 ImageNet stem, width 8, 3x48x48, batch 4", s, GPU_FP32, 2, fp, mock ? 0 : 5e-5,
                mock ? 0 : 5e-4);
    same_models("NHWC vs NCHW: resnet18 ImageNet stem, width 8, 3x48x48, batch 4", s, GPU_TF32, 2, fp, mock ? 0 : 5e-2,
                mock ? 0 : 2e-1);
    same_models("NHWC vs NCHW: resnet18 ImageNet stem, width 8, 3x48x48, batch 4", s, GPU_BF16, 2, fp,
                mock ? 0 : TOL_BF16_FWD, mock ? 0 : TOL_BF16_GRAD_ALL);
    const char *const casts[] = {"DSGD_GPU_LAYOUT=nhwc", "DSGD_GPU_LAYOUT=nhwc DSGD_GPU_CASTS=one"};
    same_models("NHWC, casts one by one vs in one launch", s, GPU_BF16, 2, casts, 0, 0);
    /* BN+ReLU fused against BN then our ReLU, both NHWC: the same values over the mock (its fused
     * stand-in masks a copy of dout and checks the reserve space); cuDNN's fused kernels and
     * SPATIAL_PERSISTENT sum in other orders on a GPU. */
    const char *const fused[] = {"DSGD_GPU_LAYOUT=nhwc", "DSGD_GPU_LAYOUT=nhwc DSGD_GPU_BNRELU=fused"};
    same_models("NHWC, BN+ReLU fused vs BN then ReLU", s, GPU_FP32, 2, fused, mock ? 0 : 5e-5, mock ? 0 : 5e-4);
    same_models("NHWC, BN+ReLU fused vs BN then ReLU", s, GPU_BF16, 2, fused, mock ? 0 : TOL_BF16_FWD,
                mock ? 0 : TOL_BF16_GRAD_ALL);
    unsetenv("DSGD_CUDNN_ALGO");

    char err[ERRLEN];
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    setenv("DSGD_GPU_LAYOUT", "chwn", 1);
    ck_assert_ptr_null(gpu_model_create(&L, GPU_FP32, err, sizeof err));
    unsetenv("DSGD_GPU_LAYOUT");
    printf("  expected error: %s\n", err);
    ck_assert_msg(strstr(err, "DSGD_GPU_LAYOUT=chwn") && strstr(err, "nhwc"), "%s", err);
    setenv("DSGD_GPU_BNRELU", "fused", 1); /* in NCHW: refused */
    ck_assert_ptr_null(gpu_model_create(&L, GPU_BF16, err, sizeof err));
    unsetenv("DSGD_GPU_BNRELU");
    printf("  expected error: %s\n", err);
    ck_assert_msg(strstr(err, "DSGD_GPU_BNRELU=fused") && strstr(err, "DSGD_GPU_LAYOUT=nhwc"), "%s", err);
}
END_TEST

/* DSGD_GPU_BNRELU=fused_add: each block's second BN, the residual add and the ReLU in one cuDNN
 * call each way (gpu_bn_add_forward / _backward; bf16 NHWC only). Against the CPU model at bf16's
 * tolerances (both stems, the odd shapes); against fused (BN+ReLU only, the add our kernel): over
 * the mock bit for bit when its stand-in rounds BN's output to bf16 before the add as the unfused
 * path does (MOCK_BN_ADD_ROUND=twice: the wiring — the shortcut into z, its gradient dz into the
 * shortcut's backward and the next block, T2 as dz's buffer — is then exactly the unfused one's;
 * not on a GPU, where one rounding fewer makes two bf16 trajectories that part after the first
 * update, 1.25 relative in the gradient at the second step over the mock with one rounding); the fused
 * calls counted over the mock (2 per block per step). fp32 takes no add fusion (cuDNN documents the op for half / bf16):
 * bit for bit as fused over the mock. fused_add in NCHW is refused. */
START_TEST(test_bn_add) {
    model_spec odd = cifar(3, 5, 4);
    odd.in_c = 1, odd.in_h = odd.in_w = 28;
    const model_spec in = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 48,
                           .in_w = 48, .n_classes = 10, .batch = 4, .eval_batch = 3, .threads = 0};
    const long c0 = mock_bn_add_calls ? mock_bn_add_calls() : 0;
    nhwc_case("resnet18 ImageNet stem, width 8, 3x48x48, batch 4", in, GPU_BF16, 2);
    nhwc_case("resnet18 CIFAR stem, width 3, 1x28x28, batch 5", odd, GPU_BF16, 2);
    const long c1 = mock_bn_add_calls ? mock_bn_add_calls() : 0;
    if (mock_bn_add_calls) {
        printf("    fused BN+add+ReLU calls: %ld\n", c1 - c0);
        ck_assert_int_gt(c1 - c0, 0);
    }
    setenv("DSGD_CUDNN_ALGO", "heuristic", 1);
    const char *const once[] = {"DSGD_GPU_LAYOUT=nhwc DSGD_GPU_BNRELU=fused", "DSGD_GPU_LAYOUT=nhwc DSGD_GPU_BNRELU=fused_add"};
    if (mock) { /* on a GPU the two round differently: two bf16 trajectories, held to the CPU model above instead */
        setenv("MOCK_BN_ADD_ROUND", "twice", 1); /* read by the stand-in at each call */
        same_models("NHWC, BN+add+ReLU fused vs BN, then add+ReLU (mock: BN's output rounded first)", in, GPU_BF16, 2, once,
                    0, 0);
        unsetenv("MOCK_BN_ADD_ROUND");
        const long c2 = mock_bn_add_calls ? mock_bn_add_calls() : 0;
        if (mock_bn_add_calls) ck_assert_int_eq(c2 - c1, 2 * 2 * N_BLOCKS); /* two steps, forward and backward per block */
    }
    const long c3 = mock_bn_add_calls ? mock_bn_add_calls() : 0;
    same_models("NHWC fp32: fused_add as fused (no add fusion in fp32)", in, GPU_FP32, 2, once, mock ? 0 : 5e-5, mock ? 0 : 5e-4);
    if (mock_bn_add_calls) ck_assert_int_eq(mock_bn_add_calls(), c3);
    unsetenv("DSGD_CUDNN_ALGO");
    char err[ERRLEN];
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &in, err, sizeof err) == 0, "%s", err);
    setenv("DSGD_GPU_BNRELU", "fused_add", 1); /* in NCHW: refused */
    ck_assert_ptr_null(gpu_model_create(&L, GPU_BF16, err, sizeof err));
    unsetenv("DSGD_GPU_BNRELU");
    printf("  expected error: %s\n", err);
    ck_assert_msg(strstr(err, "DSGD_GPU_BNRELU=fused_add") && strstr(err, "DSGD_GPU_LAYOUT=nhwc"), "%s", err);
}
END_TEST

START_TEST(test_linear_bf16) {
    model_spec s = {.arch = MODEL_LINEAR, .in_c = 1, .in_h = 28, .in_w = 28, .n_classes = 10, .batch = 32,
                    .eval_batch = 20, .threads = 0};
    model_case("linear 784 -> 10, batch 32", s, GPU_BF16);
}
END_TEST

START_TEST(test_resnet_imagenet) {
    model_spec s = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 64,
                    .in_w = 64, .n_classes = 20, .batch = 4, .eval_batch = 3, .threads = 0};
    model_case("resnet18 ImageNet stem, width 8, 3x64x64, batch 4", s, GPU_FP32);
}
END_TEST

START_TEST(test_resnet_imagenet_224) {
    /* The shapes the GPU is benchmarked on (torchvision's ResNet-18 at 224x224, width 64), where
     * cudnnFind picks other kernels (FFT, Winograd, larger tiles) than on the small cases above.
     * Opt-in (DSGD_GPU_TEST_FULL=1): tens of seconds of CPU reference. Gradient tolerance 5e-2:
     * at these sizes two correct fp32 backends disagree by about 1e-2 per tensor (ReLU masks
     * flip where activations differ by an ulp near zero, and BN's backward cancels): the oneDNN
     * network against the same layers in model.cu's wiring (the mock) measured 1.1e-2. The
     * forward, the statistics and the update stay tight; a wiring or algorithm fault is O(1). */
    const char *v = getenv("DSGD_GPU_TEST_FULL");
    if (!v || !*v || strcmp(v, "0") == 0) {
        printf("  resnet18 ImageNet stem 224x224: skipped (set DSGD_GPU_TEST_FULL=1)\n");
        return;
    }
    model_spec s = {.arch = MODEL_RESNET18, .width = 64, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 224,
                    .in_w = 224, .n_classes = 1000, .batch = 16, .eval_batch = 8, .threads = 0};
    model_case_tol("resnet18 ImageNet stem, width 64, 3x224x224, batch 16", s, GPU_FP32, 2e-4, 5e-2);
}
END_TEST

START_TEST(test_linear) {
    model_spec s = {.arch = MODEL_LINEAR, .in_c = 1, .in_h = 28, .in_w = 28, .n_classes = 10, .batch = 32,
                    .eval_batch = 20, .threads = 0};
    model_case("linear 784 -> 10, batch 32", s, GPU_FP32);
}
END_TEST

/* A few Nesterov steps on one fixed minibatch (a problem the network can fit): the loss falls
 * under bf16 as it does in fp32. The CPU model (fp32) and the GPU model start from the same
 * parameters and statistics and then each follow their own trajectory (device-mode update). */
static void descent_case(const char *name, model_spec s, gpu_precision prec, int steps) {
    printf("  %s (%s): %d SGD steps on one minibatch\n", name, prec_name(prec), steps);
    char err[ERRLEN];
    model *m = model_create(&s, err, sizeof err);
    ck_assert_msg(m != NULL, "model_create: %s", err);
    model_init(m, 11);
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    gpu_model *g = gpu_model_create(&L, prec, err, sizeof err);
    ck_assert_msg(g != NULL, "gpu_model_create: %s", err);
    const size_t np = model_n_params(m), in = (size_t)s.in_c * s.in_h * s.in_w;
    gpu_model_upload(g, GPU_PARAMS | GPU_BN, model_params(m), NULL, model_bn(m));
    float *x = malloc((size_t)s.batch * in * sizeof(float)), *vel = calloc(np, sizeof(float));
    int *y = malloc((size_t)s.batch * sizeof(int));
    rng_t r;
    rng_seed(&r, 5);
    for (size_t i = 0; i < (size_t)s.batch * in; i++) x[i] = (float)rng_normal(&r);
    for (int i = 0; i < s.batch; i++) y[i] = (int)rng_below(&r, (uint64_t)s.n_classes);
    const float alpha = 0.05f, mu = 0.9f, lambda = 1e-4f;
    float lc0 = 0, lg0 = 0, lg = 0;
    double worst = 0;
    for (int k = 0; k < steps; k++) {
        const float lc = model_train_step(m, x, y);
        ck_assert_int_eq(sgd_update(model_params(m), model_grads(m), vel, np, alpha, mu, lambda, 1), 1);
        lg = gpu_model_train_step(g, x, y);
        ck_assert_int_eq(gpu_model_sgd_update(g, alpha, mu, lambda, 1), 1);
        if (k == 0) lc0 = lc, lg0 = lg;
        const double d = fabs((double)lg - lc) / lc0;
        if (d > worst) worst = d;
        printf("    step %2d  loss fp32 (CPU) %.5f  %s (GPU) %.5f  |difference| / first loss %.2g\n", k, lc,
               prec_name(prec), lg, d);
        ck_assert_msg(isfinite(lg) && d <= TOL_DESCENT, "step %d: GPU loss %.5f, CPU %.5f: differ by %.3g of the first loss > %.0e",
                      k, lg, lc, d, TOL_DESCENT);
    }
    printf("    %-44s %.3g of the first (tol %.0e); GPU loss %.4f -> %.4f\n", "largest loss difference", worst,
           TOL_DESCENT, lg0, lg);
    ck_assert_msg(lg <= 0.5f * lg0, "the GPU loss fell only from %.5f to %.5f in %d steps", lg0, lg, steps);
    gpu_model_free(g);
    model_free(m);
    free(x), free(vel), free(y);
}

START_TEST(test_descent) {
    descent_case("resnet18 CIFAR stem, width 8, batch 16", cifar(8, 16, 0), GPU_FP32, 8);
    descent_case("resnet18 CIFAR stem, width 8, batch 16", cifar(8, 16, 0), GPU_BF16, 8);
}
END_TEST

START_TEST(test_errors) {
    char err[ERRLEN];
    model_spec s = cifar(8, 8, 6);
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(gpu_model_create(&L, (gpu_precision)7, err, sizeof err));
    printf("  expected error: %s\n", err);
    ck_assert_msg(strstr(err, "unknown GPU precision 7") != NULL, "%s", err);
    model_spec one = cifar(8, 1, 0);
    one.in_h = one.in_w = 8; /* last stage 1x1 with batch 1: one value per BN channel */
    ck_assert_msg(nn_layout_build(&L, &one, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(gpu_model_create(&L, GPU_FP32, err, sizeof err));
    printf("  expected error: %s\n", err);
    /* DSGD_CUDNN_ALGO: "find" or "heuristic"; anything else is refused at create. */
    model_spec ok = cifar(8, 8, 6);
    ck_assert_msg(nn_layout_build(&L, &ok, err, sizeof err) == 0, "%s", err);
    setenv("DSGD_CUDNN_ALGO", "fastest", 1);
    ck_assert_ptr_null(gpu_model_create(&L, GPU_FP32, err, sizeof err));
    printf("  expected error: %s\n", err);
    ck_assert_msg(strstr(err, "DSGD_CUDNN_ALGO=fastest") != NULL && strstr(err, "heuristic") != NULL, "%s", err);
    setenv("DSGD_CUDNN_ALGO", "heuristic", 1);
    gpu_model *g = gpu_model_create(&L, GPU_FP32, err, sizeof err);
    ck_assert_msg(g != NULL, "DSGD_CUDNN_ALGO=heuristic: %s", err);
    /* Convolution directions: 20 convolutions, each with forward and filter gradient in training,
     * all but conv1 with the input gradient, and the evaluation network's forwards: 20 + 20 + 19
     * + 20. Over the mock with MOCK_CONV_TRANSFORM=1 every one reports a transform algorithm. */
    const char *mt = getenv("MOCK_CONV_TRANSFORM");
    const int tr = gpu_model_conv_transforms(g);
    printf("  DSGD_CUDNN_ALGO=heuristic: built; %d of 79 convolution directions on Winograd / FFT\n", tr);
    ck_assert_int_ge(tr, 0);
    ck_assert_int_le(tr, 79);
    if (mock && mt && strcmp(mt, "1") == 0) ck_assert_int_eq(tr, 79);
    if (mock && !(mt && strcmp(mt, "1") == 0)) ck_assert_int_eq(tr, 0);
    gpu_model_free(g);
    unsetenv("DSGD_CUDNN_ALGO");
}
END_TEST

/* The step's switches (docs/gpu.md, "Switches"): DSGD_GPU_SYNC=step (one host synchronisation per
 * step: the update's non-finite flag read with the next loss) and DSGD_GPU_CASTS=one (the bf16
 * weight copies in one launch) change no operation's order, so a model with both on trains bit
 * for bit as one with both off (both choose cuDNN's algorithms by its heuristics, the same in
 * both). Then the stated rule of DSGD_GPU_SYNC=step: a non-finite update returns 1, the next
 * step's loss is NaN, the update after it returns 0 and changes nothing, and
 * gpu_model_nonfinite_update names the update; new parameters clear it. A wrong value is refused. */
static void switches_case(gpu_precision prec) {
    model_spec s = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 48,
                    .in_w = 48, .n_classes = 10, .batch = 4, .eval_batch = 3, .threads = 0};
    const char *pn = prec == GPU_BF16 ? "bf16" : "fp32";
    printf("  switches %s: resnet18 ImageNet stem, width 8, 3x48x48, batch 4\n", pn);
    char err[ERRLEN];
    model *m = model_create(&s, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    model_init(m, 11);
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    setenv("DSGD_CUDNN_ALGO", "heuristic", 1);
    gpu_model *g[2];
    for (int v = 0; v < 2; v++) {
        setenv("DSGD_GPU_SYNC", v ? "step" : "update", 1);
        setenv("DSGD_GPU_CASTS", v ? "one" : "each", 1);
        g[v] = gpu_model_create(&L, prec, err, sizeof err);
        ck_assert_msg(g[v] != NULL, "gpu_model_create: %s", err);
        gpu_model_upload(g[v], GPU_PARAMS | GPU_BN, model_params(m), NULL, model_bn(m));
        gpu_model_zero_velocity(g[v]);
    }
    unsetenv("DSGD_GPU_SYNC");
    unsetenv("DSGD_GPU_CASTS");
    const size_t np = L.n_params, nb = L.n_bn, in = (size_t)s.in_c * s.in_h * s.in_w;
    float *x = malloc((size_t)s.batch * in * sizeof(float)), *lo[2];
    int *y = malloc((size_t)s.batch * sizeof(int));
    float *v[2][3];
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 3; j++) v[k][j] = malloc((j == 2 ? nb : np) * sizeof(float) + 4);
        lo[k] = malloc((size_t)s.eval_batch * s.n_classes * sizeof(float));
    }
    rng_t r;
    rng_seed(&r, 9);
    const int steps = 4;
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < (size_t)s.batch * in; i++) x[i] = (float)rng_normal(&r);
        for (int i = 0; i < s.batch; i++) y[i] = (int)rng_below(&r, (uint64_t)s.n_classes);
        float loss[2];
        long syncs[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            const long s0 = mock_cuda_host_syncs ? mock_cuda_host_syncs() : 0;
            loss[k] = gpu_model_train_step(g[k], x, y);
            ck_assert_int_eq(gpu_model_sgd_update(g[k], 0.05f, 0.9f, 1e-4f, 1), 1);
            syncs[k] = mock_cuda_host_syncs ? mock_cuda_host_syncs() - s0 : 0;
        }
        printf("   step %d: loss %.9g, switches on %.9g; host synchronisations %ld, %ld\n", step, loss[0], loss[1], syncs[0],
               syncs[1]);
        if (mock_cuda_host_syncs) { /* a step (train_step + sgd_update): two synchronisations, one with =step */
            ck_assert_int_eq(syncs[0], 2);
            ck_assert_int_eq(syncs[1], 1);
        }
        ck_assert_msg(isfinite(loss[0]) && memcmp(&loss[0], &loss[1], sizeof(float)) == 0, "%s step %d: loss %.9g vs %.9g", pn,
                      step, loss[0], loss[1]);
    }
    for (int k = 0; k < 2; k++) {
        gpu_model_download(g[k], GPU_PARAMS | GPU_GRADS | GPU_BN, v[k][0], v[k][1], v[k][2]);
        gpu_model_eval(g[k], x, s.eval_batch, lo[k]);
    }
    ck_assert_msg(memcmp(v[0][0], v[1][0], np * sizeof(float)) == 0, "%s: parameters differ", pn);
    ck_assert_msg(memcmp(v[0][1], v[1][1], np * sizeof(float)) == 0, "%s: gradients differ", pn);
    ck_assert_msg(nb == 0 || memcmp(v[0][2], v[1][2], nb * sizeof(float)) == 0, "%s: BN statistics differ", pn);
    ck_assert_msg(memcmp(lo[0], lo[1], (size_t)s.eval_batch * s.n_classes * sizeof(float)) == 0, "%s: eval logits differ", pn);
    printf("    %d steps, switches off and on: loss, params, grads, BN, eval logits bitwise identical\n", steps);

    /* A non-finite update. */
    v[0][1][np / 3] = NAN;
    for (int k = 0; k < 2; k++) gpu_model_upload(g[k], GPU_GRADS, NULL, v[0][1], NULL);
    ck_assert_int_eq(gpu_model_sgd_update(g[0], 0.05f, 0.9f, 1e-4f, 1), 0); /* update: at once */
    ck_assert_int_eq(gpu_model_nonfinite_update(g[0]), 0);
    ck_assert_int_eq(gpu_model_sgd_update(g[1], 0.05f, 0.9f, 1e-4f, 1), 1); /* step: not known yet */
    ck_assert_int_eq(gpu_model_nonfinite_update(g[1]), 0);
    const float l1 = gpu_model_train_step(g[1], x, y);
    ck_assert_msg(isnan(l1), "DSGD_GPU_SYNC=step: the step after a non-finite update has loss %.9g, not NaN", l1);
    ck_assert_int_eq(gpu_model_nonfinite_update(g[1]), steps + 1);
    gpu_model_download(g[1], GPU_PARAMS, v[1][0], NULL, NULL);
    ck_assert_int_eq(gpu_model_sgd_update(g[1], 0.05f, 0.9f, 1e-4f, 1), 0);
    gpu_model_download(g[0], GPU_PARAMS, v[0][0], NULL, NULL);
    ck_assert_msg(memcmp(v[0][0], v[1][0], np * sizeof(float)) == 0, "%s: the refused update changed the parameters", pn);
    printf("    DSGD_GPU_SYNC=step: non-finite update %ld found with the next loss (NaN), the next update refused\n",
           gpu_model_nonfinite_update(g[1]));
    gpu_model_upload(g[1], GPU_PARAMS, model_params(m), NULL, NULL);
    ck_assert_int_eq(gpu_model_nonfinite_update(g[1]), 0);
    ck_assert(isfinite(gpu_model_train_step(g[1], x, y)));

    setenv("DSGD_GPU_SYNC", "sometimes", 1);
    ck_assert_ptr_null(gpu_model_create(&L, prec, err, sizeof err));
    unsetenv("DSGD_GPU_SYNC");
    printf("  expected error: %s\n", err);
    ck_assert_msg(strstr(err, "DSGD_GPU_SYNC=sometimes") && strstr(err, "step"), "%s", err);
    unsetenv("DSGD_CUDNN_ALGO");
    for (int k = 0; k < 2; k++) {
        gpu_model_free(g[k]);
        for (int j = 0; j < 3; j++) free(v[k][j]);
        free(lo[k]);
    }
    free(x), free(y);
    model_free(m);
}

START_TEST(test_switches) {
    switches_case(GPU_FP32);
    switches_case(GPU_BF16);
}
END_TEST

/* DSGD_GPU_GRAPH=1 (N13; cuda/model.cu, step_graph_launch): the step captured as a CUDA graph and
 * replayed changes no operation's order, so a model with the switch trains bit for bit as one
 * without it (over the mock, whose graphs record the layer calls and replay them: mock_capture.h;
 * on a GPU the same cuDNN algorithms, heuristic mode, and kernels in the same order). Seven steps
 * and an evaluation: three on host minibatches (one input slot), four on staged ones (the slots
 * alternate: a graph per slot, since with fp32 NCHW the first convolution reads the slot itself;
 * one graph for both would train step 4 on step 3's minibatch), then one that stages its
 * gradient to the host (the rule: eager). Asserts the loss of every step, then parameters,
 * gradients, BN statistics and evaluation logits bitwise; that steps 2–7 ran as graphs (the
 * first is eager) and the staging one did not; over the mock, two graphs captured (four CUDA
 * objects) and none after both slots have one, the same host synchronisations per step as
 * eagerly (one in train_end, one in the update), and graph launches counted by the runtime. */
static void graph_case(const char *title, model_spec s, gpu_precision prec, const char *env) {
    printf("  graph %s (%s)%s%s\n", title, prec_name(prec), env ? ", " : "", env ? env : "");
    char err[ERRLEN];
    model *m = model_create(&s, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    model_init(m, 13);
    nn_layout L;
    ck_assert_msg(nn_layout_build(&L, &s, err, sizeof err) == 0, "%s", err);
    setenv("DSGD_CUDNN_ALGO", "heuristic", 1);
    if (env) set_envs(env, 1);
    gpu_model *g[2];
    for (int v = 0; v < 2; v++) {
        setenv("DSGD_GPU_GRAPH", v ? "1" : "0", 1);
        g[v] = gpu_model_create(&L, prec, err, sizeof err);
        ck_assert_msg(g[v] != NULL, "gpu_model_create: %s", err);
        gpu_model_upload(g[v], GPU_PARAMS | GPU_BN, model_params(m), NULL, model_bn(m));
        gpu_model_zero_velocity(g[v]);
    }
    unsetenv("DSGD_GPU_GRAPH");
    if (env) set_envs(env, 0);
    const size_t np = L.n_params, nb = L.n_bn, in = (size_t)s.in_c * s.in_h * s.in_w, nx = (size_t)s.batch * in;
    const size_t nl = (size_t)s.eval_batch * s.n_classes;
    float *x = malloc(nx * sizeof(float)), *gh = malloc(np * sizeof(float)), *v[2][3], *lo[2];
    int *y = malloc((size_t)s.batch * sizeof(int));
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 3; j++) v[k][j] = malloc((j == 2 ? nb : np) * sizeof(float) + 4);
        lo[k] = malloc(nl * sizeof(float));
    }
    rng_t r;
    rng_seed(&r, 17);
    const int steps = 8;
    long obj_after[2] = {0, 0}, obj4[2] = {0, 0}, obj0[2] = {0, 0};
    const long launches0 = mock_cuda_graph_launches ? mock_cuda_graph_launches() : 0;
    for (int k = 0; k < 2; k++) obj0[k] = mock_cuda_objects ? mock_cuda_objects() : 0;
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < nx; i++) x[i] = (float)rng_normal(&r);
        for (int i = 0; i < s.batch; i++) y[i] = (int)rng_below(&r, (uint64_t)s.n_classes);
        float loss[2];
        long syncs[2];
        for (int k = 0; k < 2; k++) {
            const long o0 = mock_cuda_objects ? mock_cuda_objects() : 0, s0 = mock_cuda_host_syncs ? mock_cuda_host_syncs() : 0;
            if (step < 3) {
                loss[k] = gpu_model_train_step(g[k], x, y);
            } else if (step < 7) {
                float *sx;
                int *sy;
                gpu_model_stage_buffers(g[k], &sx, &sy);
                memcpy(sx, x, nx * sizeof(float));
                memcpy(sy, y, (size_t)s.batch * sizeof(int));
                gpu_model_stage(g[k], step);
                gpu_model_train_begin(g[k], NULL, NULL, NULL);
                loss[k] = gpu_model_train_end(g[k]);
            } else { /* gradient staged to the host: eager */
                gpu_model_train_begin(g[k], x, y, gh);
                for (int spin = 0; gpu_model_grads_ready(g[k]) > 0; spin++) ck_assert_int_lt(spin, 1000000);
                loss[k] = gpu_model_train_end(g[k]);
            }
            ck_assert_int_eq(gpu_model_sgd_update(g[k], 0.05f, 0.9f, 1e-4f, 1), 1);
            syncs[k] = mock_cuda_host_syncs ? mock_cuda_host_syncs() - s0 : 0;
            if (mock_cuda_objects) obj_after[k] += mock_cuda_objects() - o0;
            if (step == 3) obj4[k] = obj_after[k];
        }
        printf("   step %d: loss %.9g, as a graph %.9g (graph steps so far %ld); host synchronisations %ld, %ld\n", step, loss[0],
               loss[1], gpu_model_graph_steps(g[1]), syncs[0], syncs[1]);
        ck_assert_msg(isfinite(loss[0]) && memcmp(&loss[0], &loss[1], sizeof(float)) == 0, "%s step %d: loss %.9g vs %.9g",
                      title, step, loss[0], loss[1]);
        ck_assert_int_eq(gpu_model_graph_steps(g[0]), 0);
        ck_assert_int_eq(gpu_model_graph_steps(g[1]), step < 7 ? step : 6);
        if (mock_cuda_host_syncs) ck_assert_int_eq(syncs[1], syncs[0]);
    }
    for (int k = 0; k < 2; k++) {
        gpu_model_download(g[k], GPU_PARAMS | GPU_GRADS | GPU_BN, v[k][0], v[k][1], v[k][2]);
        gpu_model_eval(g[k], x, s.eval_batch, lo[k]);
    }
    ck_assert_msg(memcmp(v[0][0], v[1][0], np * sizeof(float)) == 0, "%s: parameters differ", title);
    ck_assert_msg(memcmp(v[0][1], v[1][1], np * sizeof(float)) == 0, "%s: gradients differ", title);
    ck_assert_msg(nb == 0 || memcmp(v[0][2], v[1][2], nb * sizeof(float)) == 0, "%s: BN statistics differ", title);
    ck_assert_msg(memcmp(lo[0], lo[1], nl * sizeof(float)) == 0, "%s: eval logits differ", title);
    if (mock_cuda_graph_launches) {
        printf("    CUDA objects made by the steps: %ld eagerly, %ld with graphs (%ld after both slots' capture); "
               "graph launches %ld\n", obj_after[0], obj_after[1], obj_after[1] - obj4[1], mock_cuda_graph_launches() - launches0);
        ck_assert_int_eq(obj_after[0], 0);
        ck_assert_int_eq(obj_after[1], 4); /* two graphs, each captured and instantiated once */
        ck_assert_int_eq(obj_after[1], obj4[1]);
        ck_assert_int_eq(mock_cuda_graph_launches() - launches0, 6);
    }
    (void)obj0;
    printf("    %d steps, graph off and on: loss, params, grads, BN, eval logits bitwise identical; %ld steps as a graph\n", steps,
           gpu_model_graph_steps(g[1]));
    setenv("DSGD_GPU_GRAPH", "yes", 1);
    ck_assert_ptr_null(gpu_model_create(&L, prec, err, sizeof err));
    unsetenv("DSGD_GPU_GRAPH");
    ck_assert_msg(strstr(err, "DSGD_GPU_GRAPH=yes") && strstr(err, "1"), "%s", err);
    unsetenv("DSGD_CUDNN_ALGO");
    for (int k = 0; k < 2; k++) {
        gpu_model_free(g[k]);
        for (int j = 0; j < 3; j++) free(v[k][j]);
        free(lo[k]);
    }
    free(x), free(y), free(gh);
    model_free(m);
}

START_TEST(test_graph) {
    const model_spec im = {.arch = MODEL_RESNET18, .width = 8, .stem = MODEL_STEM_IMAGENET, .in_c = 3, .in_h = 40,
                           .in_w = 40, .n_classes = 10, .batch = 4, .eval_batch = 3, .threads = 0};
    graph_case("resnet18 ImageNet stem, width 8, 3x40x40, batch 4", im, GPU_FP32, NULL);
    graph_case("resnet18 ImageNet stem, width 8, 3x40x40, batch 4", im, GPU_BF16,
               "DSGD_GPU_LAYOUT=nhwc DSGD_GPU_BNRELU=fused_add DSGD_GPU_CASTS=one");
    const model_spec lin = {.arch = MODEL_LINEAR, .in_c = 1, .in_h = 6, .in_w = 6, .n_classes = 5, .batch = 8,
                            .eval_batch = 4, .threads = 0};
    graph_case("linear, 1x6x6, batch 8", lin, GPU_FP32, NULL);
}
END_TEST

int main(void) {
    /* Deterministic convolution algorithms whatever DSGD_CUDNN_ALGO (N11: find's default takes the
     * fastest, deterministic or not): the checks of bitwise equal steps need them. */
    setenv("DSGD_CUDNN_DETERMINISTIC", "1", 0);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
        if (gpu_required()) {
            printf("test_gpu_model: FAILED: DSGD_REQUIRE_GPU is set but no GPU is usable: %s\n", why);
            return 1;
        }
        printf("test_gpu_model: no GPU: skipped (%s)\n", why);
        return 0;
    }
    char buf[256], err[ERRLEN];
    gpu_version(buf, sizeof buf);
    printf("test_gpu_model: %s\n", buf);
    if (gpu_select(0, 1, buf, sizeof buf, err, sizeof err) != 0) {
        printf("test_gpu_model: gpu_select: %s\n", err);
        return 1;
    }
    printf("test_gpu_model: %s\n", buf);
    mock = strstr(buf, "mock GPU") != NULL;

    Suite *s = suite_create("gpu_model");
    TCase *tc = tcase_create("gpu_vs_cpu");
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_switches);
    tcase_add_test(tc, test_graph);
    tcase_add_test(tc, test_linear);
    tcase_add_test(tc, test_resnet_cifar_fp32);
    tcase_add_test(tc, test_resnet_cifar_odd);
    tcase_add_test(tc, test_resnet_imagenet);
    tcase_add_test(tc, test_resnet_cifar_tf32);
    tcase_add_test(tc, test_linear_bf16);
    tcase_add_test(tc, test_resnet_cifar_bf16);
    tcase_add_test(tc, test_resnet_cifar_odd_bf16);
    tcase_add_test(tc, test_resnet_imagenet_bf16);
    tcase_add_test(tc, test_bf16_fallback);
    tcase_add_test(tc, test_nhwc_nchw);
    tcase_add_test(tc, test_nhwc_cpu);
    tcase_add_test(tc, test_bn_add);
    tcase_add_test(tc, test_descent);
    tcase_add_test(tc, test_resnet_imagenet_224);
    suite_add_tcase(s, tc);
    return run_suite_nofork(s);
}
