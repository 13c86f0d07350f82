/* test_gpu_overlap.c — the overlap of copies and communication with the GPU's work (docs/gpu.md,
 * "Overlap"): the training step in parts (model.h model_train_begin / model_grads_host_ready /
 * model_grads_upload_range / model_train_end), minibatch staging (model_stage_*) and the routine
 * that drives both for allreduce (src/methods/allreduce_overlap.h allreduce_grads), each against the path it
 * replaces. Networks: ResNet-18 width 4, CIFAR stem, 1x8x8, b = 4 (fp32 and bf16); width 4,
 * ImageNet stem, 3x32x32, b = 2; width 32, CIFAR stem, 1x8x8, b = 4 (2.8 M parameters: three 4 MB
 * all-reduce chunks, whose borders fall inside gradient groups); the linear model, 1x8x8, b = 4.
 *
 *   test_parts      one model, several SGD steps, each from the same state twice: model_train_step,
 *                   the whole gradient to the host, ×0.5 (a stand-in for the mean of an
 *                   all-reduce), back, update — against begin with MODEL_STAGE_GRADS, ×0.5 and
 *                   upload of each part as model_grads_host_ready reports it (in pieces of 997
 *                   floats), end, update. Loss, parameters, velocity, BN statistics and gradient
 *                   must agree; every part reported must already hold this step's gradient; the
 *                   reported borders fall on tensor borders and decrease to 0. Also on a CPU model.
 *   test_stage      staged minibatches are used exactly when asked for: stage then begin(NULL);
 *                   a second stage replaces the first; a step on an explicit minibatch drops a
 *                   staged one; staging while a step runs, alternating the two input slots over
 *                   four steps; the staging buffers overwritten after a stage (the copy has read
 *                   them: model_stage_buffers waits) — each step against model_train_step on the
 *                   minibatch it should have used.
 *   test_trainer    allreduce_grads against loader_batch + model_train_step on a second
 *                   model, over data steps with jumps and wrong or missing guesses of the next one
 *                   (a staged minibatch must be used only for its own data step), at t.p = 1 and
 *                   at t.p = 2 with one MPI worker (the chunked overlap path runs, its all-reduce
 *                   the identity); after the first call no device or pinned memory, stream or
 *                   event is made, and (over the mock) no malloc beyond the layers' own, counted
 *                   on model_train_step (the stand-ins' oneDNN memory objects).
 *   test_mpi        under `mpiexec -n 2` and `-n 3` (this program re-run with --mpi-child):
 *                   per rank, one model through allreduce_grads (overlapped) and one
 *                   through train_compute + reducer_mean (REDUCE_STAGED), 5 SGD steps:
 *                   losses, gradients, parameters equal; parameters equal across ranks.
 *   test_nccl_overlap  comm = "nccl" at one rank (tcase "nccl"): allreduce_grads with each gradient
 *                   group's all-reduce started as the backward pass produces it (DSGD_NCCL_OVERLAP,
 *                   the default) against the all-reduce after the backward pass (=0) and against
 *                   model_train_step with the mean taken on the host, over test_trainer's calls:
 *                   losses, gradients and the state after the updates equal; the mock's all-reduce
 *                   multiplies by 2 (MOCK_NCCL_SCALE), so a group reduced twice, never, or before
 *                   the backward pass wrote it shows, and the mock stops a group all-reduce
 *                   enqueued without a wait for the compute work before it; no allocation or
 *                   CUDA object after the first call; DSGD_NCCL_OVERLAP=yes refused.
 *   test_dsgd_run   dsgd-run itself, 2 ranks, device = "cuda", 12 steps of ResNet-18 width 4 on
 *                   Fashion-MNIST, with DSGD_OVERLAP=0 and without: /train/loss and /eval/loss
 *                   equal (skipped where the data set is not installed).
 *   test_dsgd_run_jpeg the same through data.format = "jpeg" (a small pack made here): device
 *                   "cuda" staged, "cuda" with DSGD_OVERLAP=0 and "cpu" take the same batches
 *                   (bit for bit between the cuda runs over the mock; at α = 1e-6 every step's
 *                   loss as the cpu run's within TOL_BATCH).
 *
 * "Equal" is bit for bit over the CPU stand-ins of test/gpu/mock (make check: build/mock/
 * test_gpu_overlap, where copy streams really run late and events answer "not ready"); on a GPU
 * within 1e-5 relative (two models may choose different cuDNN algorithms; the line printed says
 * whether the bits agreed). mpiexec is $DSGD_TEST_MPIEXEC (default "mpiexec"), each run under
 * `timeout`; dsgd-run is $DSGD_TEST_BIN (default build/mock/dsgd-run over the mock, ./dsgd-run
 * on a GPU). Without a GPU the program prints "no GPU: skipped" (testgpu.h). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "alloccount.h"
#include "jpegutil.h"
#include "comm/comm.h"
#include "gpu.h"
#include "gpucomm.h"
#include "mpiutil.h"
#include "nn/model.h"
#include "testgpu.h"
#include "methods/allreduce_overlap.h"
#include "train/train.h"
#include "util/util.h"

/* Counted by test/gpu/mock/mock_cuda.c (device and pinned allocations, streams, events); absent
 * on a real GPU. */
long mock_cuda_objects(void) __attribute__((weak));

static int g_exact;         /* over the mock: bit for bit */
static int g_child;         /* running as --mpi-child, outside Check: no ck_assert there */

/* ck_assert_msg, or in the MPI child (no Check runner to report to) a message and exit 1. */
#define REQUIRE(expr, ...)                                                                          \
    do {                                                                                            \
        if (g_child) {                                                                              \
            if (!(expr)) DIE(__VA_ARGS__);                                                          \
        } else                                                                                      \
            ck_assert_msg(expr, __VA_ARGS__);                                                       \
    } while (0)
static char g_self[4096];   /* this program, for --mpi-child */

#define TOL 1e-5

typedef struct {
    const char *name;
    model_spec s;
} ov_case;

#define R18(w, stem_, c, hw, b, prec)                                                                         \
    {.arch = MODEL_RESNET18, .width = (w), .stem = (stem_), .in_c = (c), .in_h = (hw), .in_w = (hw), .n_classes = 10, \
     .batch = (b), .eval_batch = 4, .device = MODEL_CUDA, .precision = (prec)}

static const ov_case cases[] = {
    {"resnet18 w4 cifar 1x8x8 b4", R18(4, MODEL_STEM_CIFAR, 1, 8, 4, MODEL_FP32)},
    {"resnet18 w4 cifar 1x8x8 b4 bf16", R18(4, MODEL_STEM_CIFAR, 1, 8, 4, MODEL_BF16)},
    {"resnet18 w4 imagenet 3x32x32 b2", R18(4, MODEL_STEM_IMAGENET, 3, 32, 2, MODEL_FP32)},
    {"resnet18 w32 cifar 1x8x8 b4", R18(32, MODEL_STEM_CIFAR, 1, 8, 4, MODEL_FP32)},
    {"linear 1x8x8 b4",
     {.arch = MODEL_LINEAR, .in_c = 1, .in_h = 8, .in_w = 8, .n_classes = 10, .batch = 4, .eval_batch = 4,
      .device = MODEL_CUDA}},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))
#define CASE_W32 3

static const float ALPHA = 0.01f, MU = 0.9f, LAMBDA = 1e-4f;

static model *make(const model_spec *s, model_device dev, uint64_t seed) {
    model_spec m = *s;
    m.device = dev;
    if (dev == MODEL_CPU) m.precision = MODEL_FP32;
    char err[ERRLEN];
    model *net = model_create(&m, err, sizeof err);
    REQUIRE(net != NULL, "model_create: %s", err);
    model_init(net, seed);
    model_set_host_sync(net, 0); /* device mode, as allreduce runs */
    return net;
}

/* a and b (n floats) agree: bit for bit over the mock, within TOL on a GPU. */
static void check_same(const char *what, const float *a, const float *b, size_t n) {
    size_t i = 0;
    while (i < n && memcmp(&a[i], &b[i], sizeof(float)) == 0) i++;
    if (i == n) return;
    if (g_exact) ck_abort_msg("%s: differ at [%zu] of %zu: %.9g vs %.9g", what, i, n, (double)a[i], (double)b[i]);
    const double r = rel_l2(a, b, n);
    printf("    %s: not bitwise equal, relative error %.3g\n", what, r);
    ck_assert_msg(r <= TOL, "%s: relative error %.3g > %g", what, r, TOL);
}

static void check_loss(const char *what, double a, double b) {
    const float fa = (float)a, fb = (float)b;
    check_same(what, &fa, &fb, 1);
}

/* The state a step changes: params, velocity, BN statistics (device -> these). */
typedef struct {
    float *p, *v, *bn;
} state;

static state state_new(model *m) {
    state s = {xmalloc(model_n_params(m) * sizeof(float) + 4), xmalloc(model_n_params(m) * sizeof(float) + 4),
               xmalloc(model_n_bn(m) * sizeof(float) + 4)};
    return s;
}
static void state_free(state *s) { free(s->p), free(s->v), free(s->bn); }
static void state_save(model *m, state *s) {
    model_download(m, MODEL_PARAMS | MODEL_BN | MODEL_VELOCITY);
    memcpy(s->p, model_params(m), model_n_params(m) * sizeof(float));
    memcpy(s->v, model_velocity(m), model_n_params(m) * sizeof(float));
    memcpy(s->bn, model_bn(m), model_n_bn(m) * sizeof(float));
}
static void state_load(model *m, const state *s) {
    memcpy(model_params(m), s->p, model_n_params(m) * sizeof(float));
    memcpy(model_velocity(m), s->v, model_n_params(m) * sizeof(float));
    memcpy(model_bn(m), s->bn, model_n_bn(m) * sizeof(float));
    model_upload(m, MODEL_PARAMS | MODEL_BN | MODEL_VELOCITY);
}
static void state_check(const char *what, model *m, const state *want) {
    state got = state_new(m);
    state_save(m, &got);
    char w[256];
    snprintf(w, sizeof w, "%s: params", what);
    check_same(w, got.p, want->p, model_n_params(m));
    snprintf(w, sizeof w, "%s: velocity", what);
    check_same(w, got.v, want->v, model_n_params(m));
    snprintf(w, sizeof w, "%s: BN statistics", what);
    check_same(w, got.bn, want->bn, model_n_bn(m));
    state_free(&got);
}

/* The device gradient into g (n_params floats; uses the host mirror). */
static void grads_of(model *m, float *g) {
    model_download(m, MODEL_GRADS);
    memcpy(g, model_grads(m), model_n_params(m) * sizeof(float));
}

static void fill_batch(const model_spec *s, float *x, int *y, rng_t *r) {
    const size_t nx = (size_t)s->batch * s->in_c * s->in_h * s->in_w;
    for (size_t i = 0; i < nx; i++) x[i] = (float)(rng_uniform(r) * 2.0 - 1.0);
    for (int i = 0; i < s->batch; i++) y[i] = (int)rng_below(r, (uint64_t)s->n_classes);
}

/* 1 if off is where a trainable tensor starts, or n_params. */
static int on_tensor_border(const model *m, size_t off) {
    if (off == model_n_params(m)) return 1;
    for (int i = 0; i < model_n_tensors(m); i++)
        if (model_tensor_at(m, i)->offset == off) return 1;
    return 0;
}

/* ---- test_parts ------------------------------------------------------------------------------ */

#define PIECE 997
#define STEPS 4
#define MAX_POLLS 10000000L

static void parts_case(const ov_case *k, model_device dev) {
    const model_spec *s = &k->s;
    model *m = make(s, dev, 11);
    const size_t n = model_n_params(m), nx = (size_t)s->batch * s->in_c * s->in_h * s->in_w;
    float *x = model_host_alloc(m, nx * sizeof(float));
    int *y = model_host_alloc(m, (size_t)s->batch * sizeof(int));
    float *g_ref = xmalloc(n * sizeof(float)), *h_ref = xmalloc(n * sizeof(float));
    state s0 = state_new(m), s_ref = state_new(m);
    rng_t r;
    rng_seed(&r, 5);
    int borders_total = 0;
    for (int step = 0; step < STEPS; step++) {
        fill_batch(s, x, y, &r);
        state_save(m, &s0);
        /* The path the overlap replaces: the whole gradient through the host. */
        const float loss_ref = model_train_step(m, x, y);
        grads_of(m, g_ref);
        for (size_t i = 0; i < n; i++) h_ref[i] = model_grads(m)[i] *= 0.5f;
        model_upload(m, MODEL_GRADS);
        ck_assert(model_sgd_update(m, ALPHA, MU, LAMBDA, 1));
        state_save(m, &s_ref);

        state_load(m, &s0);
        float *h = model_grads(m);
        for (size_t i = 0; i < n; i++) h[i] = NAN; /* what was not copied shows */
        model_train_begin(m, x, y, MODEL_STAGE_GRADS);
        size_t done = n; /* [done, n) scaled and uploaded */
        int borders = 0;
        long polls = 0;
        while (done > 0) {
            ck_assert_msg(++polls < MAX_POLLS, "%s: the gradient never reached the host (ready from %zu)", k->name, done);
            const size_t lo = model_grads_host_ready(m);
            ck_assert_msg(lo <= done, "%s: ready went up from %zu to %zu", k->name, done, lo);
            if (lo == done) continue;
            ck_assert_msg(on_tensor_border(m, lo), "%s: ready from %zu, not a tensor border", k->name, lo);
            char w[160];
            snprintf(w, sizeof w, "%s step %d: host gradient [%zu, %zu) when reported", k->name, step, lo, done);
            check_same(w, h + lo, g_ref + lo, done - lo);
            for (size_t i = lo; i < done; i++) h[i] *= 0.5f;
            for (size_t hi = done; hi > lo;) { /* uploaded from the end down, in odd pieces */
                const size_t a = hi - lo > PIECE ? hi - PIECE : lo;
                model_grads_upload_range(m, a, hi);
                hi = a;
            }
            done = lo;
            borders++;
        }
        const float loss = model_train_end(m);
        ck_assert(model_sgd_update(m, ALPHA, MU, LAMBDA, 1));
        char w[160];
        snprintf(w, sizeof w, "%s step %d: loss", k->name, step);
        check_loss(w, loss, loss_ref);
        snprintf(w, sizeof w, "%s step %d: host gradient after ×0.5", k->name, step);
        check_same(w, model_grads(m), h_ref, n);
        snprintf(w, sizeof w, "%s step %d", k->name, step);
        state_check(w, m, &s_ref);
        grads_of(m, g_ref);
        snprintf(w, sizeof w, "%s step %d: device gradient (uploaded)", k->name, step);
        check_same(w, g_ref, h_ref, n);
        borders_total += borders;
    }
    printf("%s (%s): %d steps in parts equal model_train_step + whole-gradient copies; %.1f parts per step\n", k->name,
           dev == MODEL_CPU ? "cpu" : "cuda", STEPS, (double)borders_total / STEPS);
    if (dev == MODEL_CPU) ck_assert_int_eq(borders_total, STEPS); /* all at once */
    free(g_ref), free(h_ref);
    state_free(&s0), state_free(&s_ref);
    model_host_free(m, x), model_host_free(m, y);
    model_free(m);
}

START_TEST(test_parts) {
    if (_i == CASE_W32) return; /* test_trainer and test_mpi take the large one */
    parts_case(&cases[_i], MODEL_CUDA);
    if (_i == 0) parts_case(&cases[_i], MODEL_CPU);
}
END_TEST

/* ---- test_stage ------------------------------------------------------------------------------- */

typedef struct {
    float *x;
    int *y;
    float loss;
    float *g;
} batch_ref;

/* Stage (x, y) under tag. */
static void stage(model *m, const model_spec *s, const batch_ref *b, long tag) {
    float *sx;
    int *sy;
    ck_assert(model_stage_buffers(m, &sx, &sy));
    memcpy(sx, b->x, (size_t)s->batch * s->in_c * s->in_h * s->in_w * sizeof(float));
    memcpy(sy, b->y, (size_t)s->batch * sizeof(int));
    model_stage_batch(m, tag);
    ck_assert_int_eq(model_staged_tag(m), tag);
}

/* The step just ended (loss) trained on b; the state goes back to s0. */
static void check_used(model *m, const char *what, float loss, const batch_ref *b, const state *s0, float *g) {
    char w[200];
    snprintf(w, sizeof w, "%s: loss", what);
    check_loss(w, loss, b->loss);
    grads_of(m, g);
    snprintf(w, sizeof w, "%s: gradient", what);
    check_same(w, g, b->g, model_n_params(m));
    state_load(m, s0);
}

START_TEST(test_stage) {
    const ov_case *k = &cases[_i];
    if (_i == CASE_W32) return;
    const model_spec *s = &k->s;
    model *m = make(s, MODEL_CUDA, 3);
    const size_t n = model_n_params(m), nx = (size_t)s->batch * s->in_c * s->in_h * s->in_w;
    rng_t r;
    rng_seed(&r, 9);
    state s0 = state_new(m);
    state_save(m, &s0);
    batch_ref b[3];
    for (int i = 0; i < 3; i++) { /* the reference: model_train_step on each, from s0 */
        b[i].x = model_host_alloc(m, nx * sizeof(float));
        b[i].y = model_host_alloc(m, (size_t)s->batch * sizeof(int));
        b[i].g = xmalloc(n * sizeof(float));
        fill_batch(s, b[i].x, b[i].y, &r);
        b[i].loss = model_train_step(m, b[i].x, b[i].y);
        grads_of(m, b[i].g);
        state_load(m, &s0);
    }
    float *g = xmalloc(n * sizeof(float));
    ck_assert_int_eq(model_staged_tag(m), -1);

    /* a. stage, then a step on it */
    stage(m, s, &b[0], 11);
    model_train_begin(m, NULL, NULL, 0);
    ck_assert_int_eq(model_staged_tag(m), -1);
    check_used(m, "a. staged", model_train_end(m), &b[0], &s0, g);

    /* b. a second stage replaces the first */
    stage(m, s, &b[0], 11);
    stage(m, s, &b[1], 12);
    model_train_begin(m, NULL, NULL, 0);
    check_used(m, "b. staged twice", model_train_end(m), &b[1], &s0, g);

    /* c. a step on an explicit minibatch drops the staged one */
    stage(m, s, &b[0], 13);
    const float l = model_train_step(m, b[2].x, b[2].y);
    ck_assert_int_eq(model_staged_tag(m), -1);
    check_used(m, "c. explicit after a stage", l, &b[2], &s0, g);

    /* d. staging while steps run: slots alternate, each step on what was staged before it */
    model_train_begin(m, b[2].x, b[2].y, 0);
    stage(m, s, &b[0], 20);
    check_used(m, "d. explicit step while staging", model_train_end(m), &b[2], &s0, g);
    for (int i = 0; i < 4; i++) {
        model_train_begin(m, NULL, NULL, 0);
        ck_assert_int_eq(model_staged_tag(m), -1);
        stage(m, s, &b[(i + 1) % 3], 21 + i);
        char w[64];
        snprintf(w, sizeof w, "d. staged step %d", i);
        check_used(m, w, model_train_end(m), &b[i % 3], &s0, g);
    }
    /* what the last iteration staged (b[4 % 3]) is still there, through an evaluation */
    double ls = 0;
    long t1 = 0, t5 = 0;
    if (s->eval_batch >= s->batch) model_eval(m, b[2].x, b[2].y, s->batch, &ls, &t1, &t5);
    model_train_begin(m, NULL, NULL, 0);
    check_used(m, "d. staged, an evaluation in between", model_train_end(m), &b[4 % 3], &s0, g);

    /* e. the staging buffers may be overwritten once model_stage_buffers returns them again: the
     * copy of the previous stage has read them by then */
    stage(m, s, &b[1], 30);
    float *sx;
    int *sy;
    ck_assert(model_stage_buffers(m, &sx, &sy));
    memcpy(sx, b[2].x, nx * sizeof(float));
    memcpy(sy, b[2].y, (size_t)s->batch * sizeof(int));
    ck_assert_int_eq(model_staged_tag(m), 30);
    model_train_begin(m, NULL, NULL, 0);
    check_used(m, "e. staging buffers overwritten after the stage", model_train_end(m), &b[1], &s0, g);

    printf("%s: staged minibatches used exactly when asked for (a-e)\n", k->name);
    for (int i = 0; i < 3; i++) model_host_free(m, b[i].x), model_host_free(m, b[i].y), free(b[i].g);
    free(g);
    state_free(&s0);
    model_free(m);
}
END_TEST

/* ---- a trainer over a synthetic data set ---------------------------------------------------------- */

static experiment g_e; /* zero: no injection */

static dataset synth(const model_spec *s, int n, uint64_t seed) {
    dataset d = {.n = n, .c = s->in_c, .h = s->in_h, .w = s->in_w, .n_classes = s->n_classes};
    const size_t px = (size_t)n * d.c * d.h * d.w;
    d.x = xmalloc(px);
    d.y = xmalloc((size_t)n);
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < px; i++) d.x[i] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < n; i++) d.y[i] = (uint8_t)rng_below(&r, (uint64_t)s->n_classes);
    return d;
}

/* t trains net on d as worker `worker` of p (loader of p ranks; t->p = p_trainer). */
static void trainer_init(trainer *t, model *net, const dataset *d, int p_loader, int worker, int p_trainer) {
    memset(t, 0, sizeof *t);
    t->e = &g_e;
    t->net = net;
    t->train = d;
    t->p = p_trainer;
    t->worker = worker;
    t->rank = worker;
    inject_init(&t->inj, &g_e, worker);
    reducer_with(&t->red, REDUCE_STAGED, net, p_trainer, worker, NULL); /* MPI through the host */
    char err[ERRLEN];
    const model_spec *s = model_get_spec(net);
    REQUIRE(loader_init(&t->train_loader, d, p_loader, worker, s->batch, 17, err, sizeof err) == 0, "%s", err);
    const size_t nx = (size_t)s->batch * s->in_c * s->in_h * s->in_w;
    t->x = model_host_alloc(net, nx * sizeof(float));
    t->y = model_host_alloc(net, (size_t)s->batch * sizeof(int));
}

static void trainer_free(trainer *t) {
    model_host_free(t->net, t->x), model_host_free(t->net, t->y);
    loader_free(&t->train_loader);
}

/* ---- test_trainer ---------------------------------------------------------------------------- */

/* Data steps of successive calls and the next one each call is told (-1: unknown); the guess is
 * wrong at call 3 (7, then 4 comes), 8 (a jump back), 10 (the next call repeats 8). */
static const long CALL_DS[] = {0, 1, 2, 3, 4, 5, 6, 9, 3, 4, 8, 8, 9, 10};
static const long CALL_NEXT[] = {1, 2, 3, 7, 5, -1, 9, 10, 4, 8, 9, 9, 10, -1};
#define N_CALLS ((int)(sizeof CALL_DS / sizeof CALL_DS[0]))

static void trainer_case(const ov_case *k, int p_trainer) {
    const model_spec *s = &k->s;
    dataset d = synth(s, 200, 23);
    model *net = make(s, MODEL_CUDA, 4), *ref = make(s, MODEL_CUDA, 4);
    trainer t, tr;
    trainer_init(&t, net, &d, 1, 0, p_trainer);
    trainer_init(&tr, ref, &d, 1, 0, 1);
    const size_t n = model_n_params(net);
    float *g = xmalloc(n * sizeof(float)), *gr = xmalloc(n * sizeof(float));
    long objects = 0, mallocs = 0, ref_mallocs = 0;
    int hits = 0;
    for (int c = 0; c < N_CALLS; c++) {
        const long expect_staged = c > 0 ? CALL_NEXT[c - 1] : -1;
        ck_assert_int_eq(model_staged_tag(net), expect_staged);
        hits += expect_staged == CALL_DS[c];
        double wait = 0;
        if (c == 1) objects = mock_cuda_objects ? mock_cuda_objects() : 0; /* every buffer exists after the first call */
        alloc_count = 0;
        alloc_armed = c >= 1;
        double loss;
        const int rc = allreduce_grads(&t, CALL_DS[c], c, CALL_NEXT[c], &wait, &loss);
        alloc_armed = 0;
        ck_assert_int_eq(rc, 0); /* after the count: a passing check's own report allocates */
        if (c >= 1) mallocs += alloc_count;
        /* the reference: the minibatch of this data step, model_train_step (its allocations are
         * the layers' own: the mock's oneDNN memory objects; none on a GPU) */
        alloc_count = 0;
        alloc_armed = c >= 1;
        loader_batch(&tr.train_loader, CALL_DS[c], tr.x, tr.y);
        const float loss_ref = model_train_step(ref, tr.x, tr.y);
        alloc_armed = 0;
        if (c >= 1) ref_mallocs += alloc_count;
        alloc_count = 0;
        char w[160];
        snprintf(w, sizeof w, "%s p=%d call %d (data step %ld): loss", k->name, p_trainer, c, CALL_DS[c]);
        check_loss(w, loss, loss_ref);
        grads_of(net, g);
        grads_of(ref, gr);
        snprintf(w, sizeof w, "%s p=%d call %d (data step %ld): gradient", k->name, p_trainer, c, CALL_DS[c]);
        check_same(w, g, gr, n);
        ck_assert(model_sgd_update(net, ALPHA, MU, LAMBDA, 1));
        ck_assert(model_sgd_update(ref, ALPHA, MU, LAMBDA, 1));
        ck_assert_msg(t.times.data_s >= 0 && t.times.compute_s >= 0 && t.times.comm_s >= 0, "negative phase time");
    }
    state want = state_new(ref);
    state_save(ref, &want);
    char w[160];
    snprintf(w, sizeof w, "%s p=%d after %d calls", k->name, p_trainer, N_CALLS);
    state_check(w, net, &want);
    state_free(&want);
    ck_assert_int_eq(hits, 9); /* CALL_NEXT[c - 1] == CALL_DS[c] nine times */
    const long new_objects = mock_cuda_objects ? mock_cuda_objects() - objects : 0;
    printf("%s, t.p = %d: %d calls (%d on a staged minibatch) equal loader_batch + model_train_step; after the first "
           "call %ld allocations (model_train_step's layers: %ld), %ld CUDA objects made\n",
           k->name, p_trainer, N_CALLS, hits, mallocs, ref_mallocs, new_objects);
    ck_assert_int_eq(new_objects, 0);
    /* On a GPU the CUDA runtime's own bookkeeping could show here; over the mock every allocation
     * is the layers'. */
    if (g_exact)
        ck_assert_msg(mallocs == ref_mallocs, "%ld allocations in allreduce_grads, %ld in the layers it calls", mallocs,
                      ref_mallocs);
    free(g), free(gr);
    trainer_free(&t), trainer_free(&tr);
    model_free(net), model_free(ref);
    free(d.x), free(d.y);
}

START_TEST(test_trainer) {
    const ov_case *k = &cases[_i];
    if (k->s.precision == MODEL_BF16) return; /* the mock's bf16 layers allocate scratch */
    trainer_case(k, 1);
    trainer_case(k, 2); /* the chunked overlap path, one MPI worker: its all-reduce is the identity */
}
END_TEST

/* ---- test_nccl_overlap ----------------------------------------------------------------------- */

/* A one-rank NCCL communicator on m's GPU, or NULL (and the test skips, printing why) where NCCL
 * cannot be loaded — over the mock, or with DSGD_REQUIRE_NCCL=1, it must load. */
static gpucomm *nccl_one_rank(model *m, const char *name) {
    char err[ERRLEN], id[GPUCOMM_ID_BYTES];
    if (gpucomm_load(err, sizeof err) != 0) {
        const char *req = getenv("DSGD_REQUIRE_NCCL");
        ck_assert_msg(!g_exact && !(req && *req && strcmp(req, "0") != 0), "NCCL not usable: %s", err);
        printf("%s: NCCL not usable: %s: skipped\n", name, err);
        return NULL;
    }
    ck_assert_msg(gpucomm_unique_id(id, err, sizeof err) == 0, "%s", err);
    gpucomm *c = gpucomm_create(model_gpu(m), 1, 0, id, 60.0, err, sizeof err);
    ck_assert_msg(c != NULL, "%s: gpucomm_create: %s", name, err);
    return c;
}

/* comm = "nccl" at one rank: allreduce_grads with the all-reduce per gradient group during the
 * backward pass (DSGD_NCCL_OVERLAP=1) against the same with the all-reduce after it (=0) and
 * against loader_batch + model_train_step with the mean applied on the host, over the calls of
 * test_trainer (staged minibatches, jumps). Over the mock the all-reduce multiplies by
 * MOCK_NCCL_SCALE = 2 (mock_nccl.c), so that a group reduced twice, not at all, or before the
 * backward pass wrote it shows; and mock_cuda.c kills a group all-reduce enqueued on the NCCL
 * stream without a wait for the compute work before it. On a GPU the one-rank ncclAvg is ×1. */
static void nccl_case(const ov_case *k) {
    const model_spec *s = &k->s;
    model *a = make(s, MODEL_CUDA, 4), *b = make(s, MODEL_CUDA, 4), *m3 = make(s, MODEL_CUDA, 4);
    /* a bad value of the switch is refused, naming it */
    char msg[ERRLEN];
    reducer bad;
    setenv("DSGD_NCCL_OVERLAP", "yes", 1);
    ck_assert_int_eq(reducer_init(&bad, &g_e, a, 0, 0, msg, sizeof msg), EXIT_BADINPUT);
    ck_assert_msg(strstr(msg, "DSGD_NCCL_OVERLAP=yes") && strstr(msg, "expected 1"), "%s", msg);
    unsetenv("DSGD_NCCL_OVERLAP");
    gpucomm *ca = nccl_one_rank(a, k->name), *cb = ca ? nccl_one_rank(b, k->name) : NULL;
    if (!ca) {
        model_free(a), model_free(b), model_free(m3);
        return;
    }
    const float scale = g_exact ? 2.0f : 1.0f;
    if (g_exact) setenv("MOCK_NCCL_SCALE", "2", 1);
    dataset d = synth(s, 200, 29);
    trainer ta, tb, t3;
    trainer_init(&ta, a, &d, 1, 0, 1);
    trainer_init(&tb, b, &d, 1, 0, 1);
    trainer_init(&t3, m3, &d, 1, 0, 1);
    reducer_with(&ta.red, REDUCE_NCCL, a, 1, 0, ca); /* unset: the default, on */
    setenv("DSGD_NCCL_OVERLAP", "0", 1);
    reducer_with(&tb.red, REDUCE_NCCL, b, 1, 0, cb);
    unsetenv("DSGD_NCCL_OVERLAP");
    ck_assert(ta.red.nccl_overlap && ta.red.stage && !tb.red.nccl_overlap && tb.red.stage);
    char da[256], db[256];
    reducer_describe(&ta.red, da, sizeof da);
    reducer_describe(&tb.red, db, sizeof db);
    ck_assert_msg(strstr(da, "per gradient group during the backward pass") && !strstr(db, "per gradient group"), "'%s' / '%s'", da, db);
    const size_t n = model_n_params(a);
    float *ga = xmalloc(n * sizeof(float)), *gb = xmalloc(n * sizeof(float)), *g3 = xmalloc(n * sizeof(float));
    long objects = 0, mallocs = 0, ref_mallocs = 0, changed = 0;
    for (int c = 0; c < N_CALLS; c++) {
        double wait = 0, la, lb;
        if (c == 1) objects = mock_cuda_objects ? mock_cuda_objects() : 0;
        alloc_count = 0;
        alloc_armed = c >= 1;
        const int rc = allreduce_grads(&ta, CALL_DS[c], c, CALL_NEXT[c], &wait, &la);
        alloc_armed = 0;
        ck_assert_int_eq(rc, 0);
        if (c >= 1) mallocs += alloc_count;
        ck_assert_int_eq(allreduce_grads(&tb, CALL_DS[c], c, CALL_NEXT[c], &wait, &lb), 0);
        alloc_count = 0;
        alloc_armed = c >= 1;
        loader_batch(&t3.train_loader, CALL_DS[c], t3.x, t3.y);
        const float l3 = model_train_step(m3, t3.x, t3.y);
        alloc_armed = 0;
        if (c >= 1) ref_mallocs += alloc_count;
        char w[200];
        snprintf(w, sizeof w, "%s NCCL call %d (data step %ld): loss, per group vs after", k->name, c, CALL_DS[c]);
        check_loss(w, la, lb);
        snprintf(w, sizeof w, "%s NCCL call %d (data step %ld): loss, per group vs model_train_step", k->name, c, CALL_DS[c]);
        check_loss(w, la, l3);
        grads_of(a, ga), grads_of(b, gb), grads_of(m3, g3);
        for (size_t i = 0; i < n; i++) {
            const float m = g3[i] * scale; /* the mean of the mock's ranks (one rank on a GPU: ×1) */
            changed += memcmp(&m, &g3[i], sizeof m) != 0;
            g3[i] = m;
        }
        snprintf(w, sizeof w, "%s NCCL call %d (data step %ld): gradient, per group vs after", k->name, c, CALL_DS[c]);
        check_same(w, ga, gb, n);
        snprintf(w, sizeof w, "%s NCCL call %d (data step %ld): gradient, per group vs the mean on the host", k->name, c,
                 CALL_DS[c]);
        check_same(w, ga, g3, n);
        memcpy(model_grads(m3), g3, n * sizeof(float));
        model_upload(m3, MODEL_GRADS);
        ck_assert(model_sgd_update(a, ALPHA, MU, LAMBDA, 1));
        ck_assert(model_sgd_update(b, ALPHA, MU, LAMBDA, 1));
        ck_assert(model_sgd_update(m3, ALPHA, MU, LAMBDA, 1));
        ck_assert_msg(ta.times.compute_s >= 0 && ta.times.comm_s >= 0, "negative phase time");
    }
    if (g_exact) ck_assert_msg(changed > (long)n, "the mock all-reduce (x2) changed only %ld gradient values", changed);
    state want = state_new(m3);
    state_save(m3, &want);
    char w[160];
    snprintf(w, sizeof w, "%s NCCL per group after %d calls, vs the host mean", k->name, N_CALLS);
    state_check(w, a, &want);
    state_save(b, &want);
    snprintf(w, sizeof w, "%s NCCL per group after %d calls, vs after the backward pass", k->name, N_CALLS);
    state_check(w, a, &want);
    state_free(&want);
    const long new_objects = mock_cuda_objects ? mock_cuda_objects() - objects : 0;
    printf("%s, comm = \"nccl\" (%s): %d calls per gradient group equal the all-reduce after the backward pass and the "
           "host mean (x%g) bit for bit; after the first call %ld allocations (model_train_step's layers: %ld), %ld CUDA "
           "objects made\n",
           k->name, da + 2, N_CALLS, (double)scale, mallocs, ref_mallocs, new_objects);
    ck_assert_int_eq(new_objects, 0);
    if (g_exact)
        ck_assert_msg(mallocs == ref_mallocs, "%ld allocations in allreduce_grads, %ld in the layers it calls", mallocs,
                      ref_mallocs);
    unsetenv("MOCK_NCCL_SCALE");
    free(ga), free(gb), free(g3);
    trainer_free(&ta), trainer_free(&tb), trainer_free(&t3);
    gpucomm_free(ca), gpucomm_free(cb);
    model_free(a), model_free(b), model_free(m3);
    free(d.x), free(d.y);
}

START_TEST(test_nccl_overlap) {
    const ov_case *k = &cases[_i];
    if (k->s.precision == MODEL_BF16) return; /* the mock's bf16 layers allocate scratch */
    nccl_case(k);
}
END_TEST

/* ---- test_mpi: the child, under mpiexec ------------------------------------------------------------ */

#define MPI_STEPS 5

static uint64_t fnv(const void *p, size_t nbytes) {
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < nbytes; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* One rank: the overlapped path against REDUCE_STAGED unoverlapped on case k. Returns the number of failures. */
static int mpi_child_case(const ov_case *k, int rank, int p) {
    const model_spec *s = &k->s;
    dataset d = synth(s, 200, 29);
    model *a = make(s, MODEL_CUDA, 8), *b = make(s, MODEL_CUDA, 8);
    trainer ta, tb;
    trainer_init(&ta, a, &d, p, rank, p);
    trainer_init(&tb, b, &d, p, rank, p);
    const size_t n = model_n_params(a);
    float *ga = xmalloc(n * sizeof(float)), *gb = xmalloc(n * sizeof(float));
    int bad = 0;
    double wa = 0, wb = 0;
    for (int step = 0; step < MPI_STEPS; step++) {
        double la, lb; /* a rank of mpiexec runs outside Check's runner: no ck_assert here */
        if (allreduce_grads(&ta, step, step, step + 1 < MPI_STEPS ? step + 1 : -1, &wa, &la) || train_compute(&tb, step, step, &lb)) {
            fprintf(stderr, "rank %d step %d: the loader could not deliver\n", rank, step);
            return bad + 1;
        }
        reducer_mean(&tb.red, MODEL_GRADS, &wb);
        grads_of(a, ga);
        grads_of(b, gb);
        size_t i = 0;
        while (i < n && memcmp(&ga[i], &gb[i], sizeof(float)) == 0) i++;
        const int same_loss = (float)la == (float)lb;
        const double r = rel_l2(ga, gb, n);
        if (!same_loss || (i < n && (g_exact || r > TOL))) {
            fprintf(stderr, "rank %d %s step %d: loss %.9g vs %.9g, gradients differ from [%zu] (relative %.3g)\n", rank,
                    k->name, step, la, lb, i, r);
            bad++;
        }
        model_sgd_update(a, ALPHA, MU, LAMBDA, 1);
        model_sgd_update(b, ALPHA, MU, LAMBDA, 1);
    }
    model_download(a, MODEL_PARAMS);
    model_download(b, MODEL_PARAMS);
    const double r = rel_l2(model_params(a), model_params(b), n);
    if (memcmp(model_params(a), model_params(b), n * sizeof(float)) != 0 && (g_exact || r > TOL)) {
        fprintf(stderr, "rank %d %s: parameters after %d steps differ (relative %.3g)\n", rank, k->name, MPI_STEPS, r);
        bad++;
    }
    /* every rank holds the same parameters */
    uint64_t h = fnv(model_params(a), n * sizeof(float)), *all = xmalloc((size_t)p * sizeof(uint64_t));
    comm_workers_allgather(&h, sizeof h, all);
    for (int q = 0; q < p; q++)
        if (all[q] != all[0]) {
            fprintf(stderr, "rank %d %s: rank %d's parameters differ from rank 0's\n", rank, k->name, q);
            bad++;
        }
    printf("rank %d of %d, %s (%zu parameters, %d chunks): %d steps overlapped = unoverlapped%s; barrier waits %.3g / %.3g s\n",
           rank, p, k->name, n, comm_mean_chunks(n), MPI_STEPS, bad ? ": FAILED" : "", wa, wb);
    free(all), free(ga), free(gb);
    trainer_free(&ta), trainer_free(&tb);
    model_free(a), model_free(b);
    free(d.x), free(d.y);
    return bad;
}

static int mpi_child(int argc, char **argv) {
    comm_init(&argc, &argv);
    const int rank = comm_rank(), p = comm_size();
    char desc[256], err[ERRLEN];
    if (gpu_select(comm_local_rank(), comm_local_size(), desc, sizeof desc, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        comm_abort(1);
    }
    int bad = mpi_child_case(&cases[CASE_W32], rank, p) + mpi_child_case(&cases[0], rank, p) +
              mpi_child_case(&cases[N_CASES - 1], rank, p);
    bad = comm_max_int(bad);
    comm_finalize();
    if (rank == 0) printf("%s\n", bad ? "MPI CHILD FAILED" : "MPI CHILD OK");
    return bad ? 1 : 0;
}

static const char *mpiexec_cmd(void) {
    const char *m = getenv("DSGD_TEST_MPIEXEC");
    return m && *m ? m : "mpiexec";
}

/* 1 if the mpiexec command runs (a GPU machine without MPI skips the MPI tests). */
static int have_mpiexec(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "timeout 30 %s -n 1 true >/dev/null 2>&1", mpiexec_cmd());
    return system(cmd) == 0;
}

START_TEST(test_mpi) {
    if (!have_mpiexec()) {
        printf("test_mpi: no mpiexec (%s): skipped\n", mpiexec_cmd());
        return;
    }
    const int np = 2 + _i;
    static char out[1 << 16];
    char cmd[2048];
    /* one compute thread per rank: the ranks share this machine's cores */
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 timeout -k 5 " MPI_TIMEOUT " %.900s -n %d %.900s --mpi-child", mpiexec_cmd(), np,
             g_self);
    const int st = run(cmd, out, sizeof out);
    printf("%s", out);
    ck_assert_msg(st == 0 && strstr(out, "MPI CHILD OK"), "mpiexec -n %d: exit %d", np, st);
}
END_TEST

/* ---- test_dsgd_run ----------------------------------------------------------------------------- */

#define FMNIST "/usr/share/datasets/fashion-mnist/"

static const char *dsgd_bin(void) {
    const char *b = getenv("DSGD_TEST_BIN");
    if (b && *b) return b;
    return mock_cuda_objects ? "build/mock/dsgd-run" : "./dsgd-run";
}

START_TEST(test_dsgd_run) {
    if (access(FMNIST "train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("test_dsgd_run: no Fashion-MNIST under " FMNIST ": skipped\n");
        return;
    }
    if (!have_mpiexec()) {
        printf("test_dsgd_run: no mpiexec (%s): skipped\n", mpiexec_cmd());
        return;
    }
    ck_assert_msg(access(dsgd_bin(), X_OK) == 0, "no %s", dsgd_bin());
    char dir[] = "/tmp/dsgd_overlap_XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char cfg[256], h5[2][300];
    snprintf(cfg, sizeof cfg, "%s/ov.cfg", dir);
    write_file(cfg, "name = \"overlap\";\nseed = 2;\nmethod = \"allreduce\";\np = 2;\nb = 16;\niterations = 12;\n"
                    "alpha = { base = 0.05; schedule = \"cosine\"; };\nmodel = { arch = \"resnet18\"; width = 4; stem = \"cifar\"; };\n"
                    "data = { format = \"idx\";\n"
                    "  train_images = \"" FMNIST "train-images-idx3-ubyte.gz\";\n"
                    "  train_labels = \"" FMNIST "train-labels-idx1-ubyte.gz\";\n"
                    "  val_images = \"" FMNIST "t10k-images-idx3-ubyte.gz\";\n"
                    "  val_labels = \"" FMNIST "t10k-labels-idx1-ubyte.gz\"; };\n"
                    "eval = { every = 6; batch = 500; at_start = false; };\nlog_every = 1;\ndevice = \"cuda\";\n");
    static char out[1 << 16];
    for (int v = 0; v < 2; v++) {
        snprintf(h5[v], sizeof h5[v], "%.200s/ov%d.h5", dir, v);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s timeout -k 5 " MPI_TIMEOUT " %.600s -n 2 %.600s --set 'output=\"%.250s\"' %.250s",
                 v ? "" : "DSGD_OVERLAP=0", mpiexec_cmd(), dsgd_bin(), h5[v], cfg);
        const int st = run(cmd, out, sizeof out);
        ck_assert_msg(st == 0, "%s: exit %d\n%s", cmd, st, out);
    }
    static double a[64], b[64];
    const char *sets[] = {"/train/loss", "/eval/loss", "/eval/top1_error"};
    for (int q = 0; q < 3; q++) {
        const long na = read_1d(h5[0], sets[q], a, 64), nb = read_1d(h5[1], sets[q], b, 64);
        ck_assert_int_eq(na, nb);
        ck_assert(na > 0);
        for (long i = 0; i < na; i++) {
            if (g_exact) ck_assert_msg(a[i] == b[i], "%s[%ld]: DSGD_OVERLAP=0 %.17g, overlapped %.17g", sets[q], i, a[i], b[i]);
            else ck_assert_msg(fabs(a[i] - b[i]) <= 1e-3 * fabs(a[i]), "%s[%ld]: %.9g vs %.9g", sets[q], i, a[i], b[i]);
        }
        printf("dsgd-run p = 2, device cuda: %s (%ld values) %s with and without overlap\n", sets[q], na,
               g_exact ? "bitwise equal" : "equal within 1e-3");
    }
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    ck_assert(system(rm) == 0);
}
END_TEST

/* ---- test_dsgd_run_jpeg --------------------------------------------------------------------- */

/* Class c of 3: red, green or blue JPEGs of 30–50 px (jpegutil.h), as test_jpegload's tree. */
static void write_colour_tree(const char *root, const char *split, int per_class) {
    static const char *const wnids[3] = {"n001", "n002", "n003"};
    char path[600], cmd[700];
    for (int c = 0; c < 3; c++) {
        snprintf(path, sizeof path, "%s/%s/%s", root, split, wnids[c]);
        snprintf(cmd, sizeof cmd, "mkdir -p %s", path);
        ck_assert_int_eq(system(cmd), 0);
        for (int i = 0; i < per_class; i++) {
            jpeg_spec s = {.w = 30 + (7 * i + 3 * c) % 21, .h = 30 + (11 * i + c) % 21, .comps = 3, .jpeg_cs = JCS_YCbCr,
                           .quality = 90, .pattern = SRC_UNIFORM};
            for (int k = 0; k < 3; k++) s.colour[k] = (uint8_t)(k == c ? 180 + i % 40 : 20 + (i * 13 + k * 7) % 50);
            snprintf(path, sizeof path, "%s/%s/%s/%03d.jpg", root, split, wnids[c], i);
            write_jpeg(path, &s);
        }
    }
}

/* The GPU backend takes the JPEG loader's batches (data.format = "jpeg"): dsgd-run p = 2 on a
 * small pack with device = "cuda" (the next minibatch staged during each step: model_stage_*),
 * device = "cuda" with DSGD_OVERLAP=0 (no staging: each batch uploaded at its step) and
 * device = "cpu". The two cuda runs agree bit for bit over the mock (1e-3 on a GPU). Against the
 * cpu run: with α = 1e-6 the parameters hardly move, so each step's training loss is a function
 * of that step's minibatch alone (it varies by ~10 % from step to step here), and the cuda runs'
 * losses must equal the cpu run's within TOL_BATCH (measured over the mock: 4e-6): a batch staged
 * for the wrong step, or labels shifted by a sample, moves them by 1e-2 or more. (At a learning
 * rate that trains, the two backends' rounding differences grow chaotically on this data: 4 %
 * apart after 12 steps at α = 0.002, against 0.1 % for Fashion-MNIST through "idx": the images
 * are uniform colours, so batch normalisation divides by spatial variances near zero and
 * magnifies rounding.) */
#define TOL_BATCH 1e-4
START_TEST(test_dsgd_run_jpeg) {
    if (!have_mpiexec()) {
        printf("test_dsgd_run_jpeg: no mpiexec (%s): skipped\n", mpiexec_cmd());
        return;
    }
    ck_assert_msg(access(dsgd_bin(), X_OK) == 0, "no %s", dsgd_bin());
    char dir[] = "/tmp/dsgd_overlap_jpeg_XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char src[300], pack[300], cfg[300], cmd[2048], h5[3][300], text[2048];
    static char out[1 << 16];
    snprintf(src, sizeof src, "%s/src", dir);
    snprintf(pack, sizeof pack, "%s/pack", dir);
    write_colour_tree(src, "train", 16);
    write_colour_tree(src, "val", 4);
    snprintf(cmd, sizeof cmd, "timeout 120 %.600s --pack %s %s --shard-images 20", dsgd_bin(), src, pack);
    int st = run(cmd, out, sizeof out);
    ck_assert_msg(st == 0, "%s: exit %d\n%s", cmd, st, out);
    snprintf(cfg, sizeof cfg, "%s/jpeg.cfg", dir);
    snprintf(text, sizeof text,
             "name = \"overlap_jpeg\";\nseed = 3;\np = 2;\nb = 8;\niterations = 12;\n"
             "alpha = { base = 1e-6; schedule = \"constant\"; };\nmodel = { arch = \"resnet18\"; width = 4; stem = \"cifar\"; };\n"
             "data = { format = \"jpeg\"; dir = \"%s\"; crop = 24; scale = [28, 36]; eval_resize = 28; threads = 1; };\n"
             "eval = { every = 6; batch = 6; };\nlog_every = 1;\nthreads = 1;\n", pack);
    write_file(cfg, text);
    const char *const how[3] = {"device=cuda", "device=cuda", "device=cpu"};
    const char *const env[3] = {"", "DSGD_OVERLAP=0", ""};
    for (int v = 0; v < 3; v++) {
        snprintf(h5[v], sizeof h5[v], "%.200s/j%d.h5", dir, v);
        snprintf(cmd, sizeof cmd, "%s timeout -k 5 " MPI_TIMEOUT " %.600s -n 2 %.600s --set %s --set 'output=\"%.250s\"' %.250s",
                 env[v], mpiexec_cmd(), dsgd_bin(), how[v], h5[v], cfg);
        st = run(cmd, out, sizeof out);
        ck_assert_msg(st == 0 && strstr(out, "data: jpeg from"), "%s: exit %d\n%s", cmd, st, out);
    }
    static double a[3][64];
    const char *sets[] = {"/train/loss", "/eval/loss", "/data/decode_failures", "/eval/top1_error"};
    for (int q = 0; q < 4; q++) {
        long n[3];
        for (int v = 0; v < 3; v++) n[v] = read_1d(h5[v], sets[q], a[v], 64);
        ck_assert_msg(n[0] == n[1] && n[0] == n[2] && n[0] > 0, "%s: %ld, %ld, %ld values", sets[q], n[0], n[1], n[2]);
        double worst = 0;
        for (long i = 0; i < n[0]; i++) {
            if (g_exact) ck_assert_msg(a[0][i] == a[1][i], "%s[%ld]: staged %.17g, DSGD_OVERLAP=0 %.17g", sets[q], i, a[0][i], a[1][i]);
            else ck_assert_msg(fabs(a[0][i] - a[1][i]) <= 1e-3 * fabs(a[1][i]), "%s[%ld]: %.9g vs %.9g", sets[q], i, a[0][i], a[1][i]);
            if (q == 3) continue; /* top-1 error: one of 12 samples flipping is 0.08; the losses say it all */
            for (int v = 0; v < 2; v++) {
                const double r = fabs(a[v][i] - a[2][i]) / (fabs(a[2][i]) > 1e-3 ? fabs(a[2][i]) : 1e-3);
                worst = r > worst ? r : worst;
                ck_assert_msg(r <= TOL_BATCH, "%s[%ld]: device cuda%s %.9g, cpu %.9g", sets[q], i, v ? " (DSGD_OVERLAP=0)" : "",
                              a[v][i], a[2][i]);
            }
        }
        char vs_cpu[64] = "";
        if (q != 3) snprintf(vs_cpu, sizeof vs_cpu, ", against cpu within %.2g relative", worst);
        printf("dsgd-run p = 2, jpeg: %s (%ld values): cuda staged and unstaged %s%s\n", sets[q], n[0],
               g_exact ? "bitwise equal" : "equal within 1e-3", vs_cpu);
    }
    /* the losses move from step to step (so that equal losses mean equal batches) */
    double tl[64];
    const long nt = read_1d(h5[2], "/train/loss", tl, 64);
    double lo = tl[0], hi = tl[0];
    for (long i = 0; i < nt; i++) lo = tl[i] < lo ? tl[i] : lo, hi = tl[i] > hi ? tl[i] : hi;
    ck_assert_msg(hi - lo > 100 * TOL_BATCH * hi, "training losses %g..%g: too alike to tell batches apart", lo, hi);
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    ck_assert(system(rm) == 0);
}
END_TEST

int main(int argc, char **argv) {
    /* Deterministic convolution algorithms whatever DSGD_CUDNN_ALGO (N11: find's default takes the
     * fastest, deterministic or not): the checks of bitwise equal steps need them. */
    setenv("DSGD_CUDNN_DETERMINISTIC", "1", 0);
    if (argc >= 2 && strcmp(argv[1], "--mpi-child") == 0) {
        g_child = 1;
        g_exact = mock_cuda_objects != NULL;
        return mpi_child(argc, argv);
    }
    char desc[256], err[ERRLEN];
    if (!gpu_built() || gpu_select(0, 1, desc, sizeof desc, err, sizeof err) != 0) {
        if (gpu_required()) {
            printf("test_gpu_overlap: no usable GPU but DSGD_REQUIRE_GPU is set: %s\n", err);
            return EXIT_FAILURE;
        }
        printf("test_gpu_overlap: no GPU: skipped (%s)\n", gpu_built() ? err : "GPU backend not built");
        return EXIT_SUCCESS;
    }
    g_exact = mock_cuda_objects != NULL;
#ifdef MOCK_NCCL_LIB
    if (g_exact) setenv("DSGD_NCCL_LIBRARY", MOCK_NCCL_LIB, 1); /* over the CPU stand-ins: their one-rank NCCL */
#endif
    if (!realpath(argv[0], g_self)) snprintf(g_self, sizeof g_self, "%s", argv[0]);
    printf("test_gpu_overlap on %s (%s)\n", desc, g_exact ? "CPU stand-ins: bit for bit" : "GPU");
    Suite *s = suite_create("gpu_overlap");
    TCase *tc = tcase_create("overlap");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, test_parts, 0, N_CASES);
    tcase_add_loop_test(tc, test_stage, 0, N_CASES);
    tcase_add_loop_test(tc, test_trainer, 0, N_CASES);
    tcase_add_loop_test(tc, test_mpi, 0, 2);
    tcase_add_test(tc, test_dsgd_run);
    tcase_add_test(tc, test_dsgd_run_jpeg);
    suite_add_tcase(s, tc);
    TCase *tn = tcase_create("nccl"); /* CK_RUN_CASE=nccl: this one only */
    tcase_set_timeout(tn, 900);
    tcase_add_loop_test(tn, test_nccl_overlap, 0, N_CASES);
    suite_add_tcase(s, tn);
    return run_suite_nofork(s);
}
