/* test_gpu_comm.c — the device side of the all-reduce (src/comm/reduce.h reducer_mean, cuda/gpucomm.h)
 * on one GPU, in one process without mpiexec (MPI is never initialised: src/comm's worker
 * collectives return at once with one worker). A linear model (1x28x28, 10 classes, b = 8) and a
 * ResNet-18 (width 4, CIFAR stem, 1x8x8, b = 4: BN statistics to reduce), both MODEL_CUDA:
 *
 *   test_vectors      model_device_vector (gpu_model_vector) points at the device vectors: what
 *                     model_upload put there reads back through cudaMemcpy bit for bit, for
 *                     params, grads and bn; a CPU model's is the host vector itself;
 *   test_scale        gpucomm_scale(x, 1/p) equals the host's x·(1/p) bit for bit (the float
 *                     comm_allreduce_mean_f32 multiplies by); and reducer_mean's CUDA-aware
 *                     path (REDUCE_DEVICE, p = 2 with one MPI worker, so the MPI sum is the identity)
 *                     leaves exactly grads·0.5 on the device and the host mirror untouched;
 *   test_nccl_one_rank  gpucomm_load, a one-rank communicator (gpucomm_unique_id, gpucomm_create
 *                     with nranks 1), then reducer_mean on REDUCE_NCCL on the gradients of a
 *                     real training step and on the BN statistics, 20 times: a one-rank ncclAvg
 *                     multiplies by 1.0f, so the vectors stay the same bit for bit (time per
 *                     call printed); gpucomm_free; a second communicator made and freed;
 *   test_nccl_then_sgd  a one-rank NCCL all-reduce of known gradients, then the SGD update on the
 *                     device, three times: the parameters and velocity equal src/optim/sgd.c's on
 *                     the host bit for bit (the update is the first kernel launched after the
 *                     all-reduce's wait loop: a "not ready" left as the runtime's last error by
 *                     that loop's cudaStreamQuery stops it, as it would every comm = "nccl" run);
 *   test_nccl_finalize_bounded  (over the mock only) a communicator whose ncclCommFinalize never
 *                     completes (MOCK_NCCL_FINALIZE_HANG=1) is released by gpucomm_free within
 *                     GPUCOMM_FINALIZE_S + 2 s although comm_timeout_s is 60 s, and aborted.
 *   test_nccl_groups_timeout  (over the mock only) the all-reduce per gradient group
 *                     (gpucomm_grads_begin/_end) on an NCCL whose all-reduce never completes
 *                     (MOCK_NCCL_ALLREDUCE_HANG=1): GPUCOMM_TIMEOUT naming group 1 of 10 within
 *                     comm_timeout_s (1 s) + 2 s beyond the step's own time (one group's wait, not
 *                     ten), the communicator aborted, the step still ends.
 *   test_device_choice  the GPU of a rank on a multi-GPU node: gpu_launcher_local_rank reads the
 *                     launcher's variable (MPI launchers' before SLURM_LOCALID, which mpiexec's ranks
 *                     inherit in a Slurm job), gpu_select_early makes GPU (that rank mod count)
 *                     current, gpu_select keeps it and says whether the node-local MPI rank agrees
 *                     (over the mock with MOCK_CUDA_DEVICES=4: ranks 2 and 1 disagree, GPU 2 kept);
 *                     DSGD_GPU_EARLY=0 and no variable leave the choice to gpu_select. Runs last
 *                     and puts device 0 back.
 *   test_early_only_cuda  the early choice only for a command line that trains with device =
 *                     "cuda" (--set, quoted or not, the last one winning; else the experiment
 *                     file's device; not for --help, --version, --check, --pack, --status, a
 *                     device = "cpu", absent, unreadable or unparsable file), and not for this
 *                     program's own command line (the old gpu_select_early chose a GPU, making a
 *                     CUDA context, for any process a launcher started).
 *
 * Over the CPU stand-ins (build/mock/test_gpu_comm, `make check`) cuda/gpucomm.cu runs on the
 * one-rank NCCL of test/gpu/mock/mock_nccl.c (build/mock/libnccl.so.2, set as DSGD_NCCL_LIBRARY
 * here), whose calls answer ncclInProgress and whose stream answers "not ready" as a GPU's would;
 * there NCCL must load (no skip).
 *
 * NCCL not built or not loadable: test_nccl_one_rank prints "NCCL not usable: ...: skipped" and
 * passes, unless DSGD_REQUIRE_NCCL=1 (then it fails). Without a GPU the program prints "no GPU:
 * skipped" and exits 0 unless DSGD_REQUIRE_GPU=1 (test/gpu/testgpu.h). Tests run in this process
 * (CK_NOFORK: CUDA must not be used across fork()). Built by `make CUDA=1 gpu-tests` as
 * build/test/gpu/test_gpu_comm. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu.h"
#include "gpucomm.h"
#include "testgpu.h"
#include "nn/model.h"
#include "optim/sgd.h"
#include "train/train.h"
#include "util/util.h"

typedef struct {
    const char *name;
    model_spec s;
} comm_case;

static const comm_case cases[] = {
    {"linear 1x28x28 b8",
     {.arch = MODEL_LINEAR, .in_c = 1, .in_h = 28, .in_w = 28, .n_classes = 10, .batch = 8, .eval_batch = 8}},
    {"resnet18 w4 cifar 1x8x8 b4",
     {.arch = MODEL_RESNET18, .width = 4, .stem = MODEL_STEM_CIFAR, .in_c = 1, .in_h = 8, .in_w = 8, .n_classes = 10,
      .batch = 4, .eval_batch = 4}},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static model *make(const model_spec *base, model_device dev) {
    model_spec s = *base;
    s.device = dev;
    s.precision = MODEL_FP32;
    char err[ERRLEN];
    model *m = model_create(&s, err, sizeof err);
    ck_assert_msg(m != NULL, "model_create: %s", err);
    model_init(m, 7);
    model_set_host_sync(m, 0); /* device mode, as allreduce runs */
    return m;
}

/* n floats of device memory into a new host buffer. */
static float *from_device(const float *dev, size_t n) {
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    cudaError_t e = cudaMemcpy(h, dev, n * sizeof(float), cudaMemcpyDeviceToHost);
    ck_assert_msg(e == cudaSuccess, "cudaMemcpy: %s", cudaGetErrorString(e));
    return h;
}

static void fill(float *x, size_t n, rng_t *r) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_uniform(r) * 2.0 - 1.0);
}

/* One training step on random data (device mode: gradients and BN statistics stay on the GPU). */
static void train_once(model *m, rng_t *r) {
    const model_spec *s = model_get_spec(m);
    const size_t nx = (size_t)s->batch * s->in_c * s->in_h * s->in_w;
    float *x = model_host_alloc(m, nx * sizeof(float));
    int *y = model_host_alloc(m, (size_t)s->batch * sizeof(int));
    for (size_t i = 0; i < nx; i++) x[i] = (float)rng_uniform(r);
    for (int i = 0; i < s->batch; i++) y[i] = (int)rng_below(r, (uint64_t)s->n_classes);
    const float loss = model_train_step(m, x, y);
    ck_assert_msg(isfinite(loss), "loss %g", (double)loss);
    model_host_free(m, x), model_host_free(m, y);
}

START_TEST(test_vectors) {
    const comm_case *k = &cases[_i];
    model *g = make(&k->s, MODEL_CUDA), *c = make(&k->s, MODEL_CPU);
    ck_assert_ptr_nonnull(model_gpu(g));
    ck_assert_ptr_null(model_gpu(c));
    ck_assert_ptr_eq(model_device_vector(c, MODEL_PARAMS), model_params(c));
    ck_assert_ptr_eq(model_device_vector(c, MODEL_GRADS), model_grads(c));
    ck_assert_ptr_eq(model_device_vector(c, MODEL_BN), model_bn(c));
    rng_t r;
    rng_seed(&r, 11);
    const int which[3] = {MODEL_PARAMS, MODEL_GRADS, MODEL_BN};
    const char *names[3] = {"params", "grads", "bn"};
    for (int v = 0; v < 3; v++) {
        const size_t n = which[v] == MODEL_BN ? model_n_bn(g) : model_n_params(g);
        float *host = which[v] == MODEL_PARAMS ? model_params(g) : which[v] == MODEL_GRADS ? model_grads(g) : model_bn(g);
        fill(host, n, &r);
        model_upload(g, which[v]);
        float *dev = model_device_vector(g, which[v]);
        ck_assert_msg(n == 0 || dev != host, "%s: %s: the device vector is the host mirror", k->name, names[v]);
        float *back = from_device(dev, n);
        ck_assert_msg(memcmp(back, host, n * sizeof(float)) == 0, "%s: %s: device vector differs from what was uploaded", k->name,
                      names[v]);
        printf("  %-28s %-6s %9zu floats at device %p: as uploaded\n", k->name, names[v], n, (void *)dev);
        free(back);
    }
    model_free(g), model_free(c);
}
END_TEST

START_TEST(test_scale) {
    const comm_case *k = &cases[_i];
    model *g = make(&k->s, MODEL_CUDA);
    const size_t n = model_n_params(g);
    rng_t r;
    rng_seed(&r, 12);
    const float inv[3] = {1.0f / 2.0f, 1.0f / 3.0f, 1.0f / 7.0f};
    for (int j = 0; j < 3; j++) {
        fill(model_grads(g), n, &r);
        model_upload(g, MODEL_GRADS);
        gpucomm_scale(model_gpu(g), model_device_vector(g, MODEL_GRADS), n, inv[j]);
        float *got = from_device(model_device_vector(g, MODEL_GRADS), n);
        for (size_t i = 0; i < n; i++) {
            const float want = model_grads(g)[i] * inv[j];
            ck_assert_msg(memcmp(&got[i], &want, sizeof want) == 0, "%s: scale by %g: element %zu: %.9g, want %.9g", k->name,
                          (double)inv[j], i, (double)got[i], (double)want);
        }
        free(got);
    }
    /* reducer_mean, REDUCE_DEVICE: MPI sum (the identity with one MPI worker), then 1/p on the
     * device, the host mirror untouched. */
    train_once(g, &r);
    model_download(g, MODEL_GRADS);
    float *before = xmalloc(n * sizeof(float));
    memcpy(before, model_grads(g), n * sizeof(float));
    reducer red;
    reducer_with(&red, REDUCE_DEVICE, g, 2, 0, NULL);
    double wait = 0;
    reducer_mean(&red, MODEL_GRADS, &wait);
    float *got = from_device(model_device_vector(g, MODEL_GRADS), n);
    for (size_t i = 0; i < n; i++) {
        const float want = before[i] * 0.5f;
        ck_assert_msg(memcmp(&got[i], &want, sizeof want) == 0, "%s: CUDA-aware path: element %zu: %.9g, want %.9g", k->name, i,
                      (double)got[i], (double)want);
    }
    ck_assert_msg(memcmp(model_grads(g), before, n * sizeof(float)) == 0, "%s: CUDA-aware path wrote the host mirror", k->name);
    printf("  %-28s gpucomm_scale exact for 1/2, 1/3, 1/7; CUDA-aware path: grads/2 on the device\n", k->name);
    free(got), free(before);
    model_free(g);
}
END_TEST

/* 1 if NCCL can be used here; else prints why the test skips (fails where NCCL is required:
 * DSGD_REQUIRE_NCCL=1, or over the mock, which has its own). */
static int nccl_usable(const char *name) {
    char err[ERRLEN];
    if (gpucomm_load(err, sizeof err) == 0) return 1;
    const char *req = getenv("DSGD_REQUIRE_NCCL");
    ck_assert_msg(!(req && *req && strcmp(req, "0") != 0), "NCCL not usable and DSGD_REQUIRE_NCCL is set: %s", err);
#ifdef MOCK_NCCL_LIB
    ck_abort_msg("the mock NCCL %s does not load: %s", MOCK_NCCL_LIB, err);
#endif
    printf("  %s: NCCL not usable: %s: skipped\n", name, err);
    return 0;
}

START_TEST(test_nccl_one_rank) {
    const comm_case *k = &cases[_i];
    char err[ERRLEN];
    if (!nccl_usable(k->name)) return;
    model *g = make(&k->s, MODEL_CUDA);
    rng_t r;
    rng_seed(&r, 13);
    char id[GPUCOMM_ID_BYTES];
    for (int round = 0; round < 2; round++) { /* a second communicator after the first is freed */
        ck_assert_msg(gpucomm_unique_id(id, err, sizeof err) == 0, "%s", err);
        gpucomm *c = gpucomm_create(model_gpu(g), 1, 0, id, 60.0, err, sizeof err);
        ck_assert_msg(c != NULL, "%s: gpucomm_create: %s", k->name, err);
        reducer red;
        reducer_with(&red, REDUCE_NCCL, g, 1, 0, c);
        const int which[2] = {MODEL_GRADS, MODEL_BN};
        for (int v = 0; v < 2; v++) {
            const size_t n = which[v] == MODEL_BN ? model_n_bn(g) : model_n_params(g);
            train_once(g, &r);
            float *before = from_device(model_device_vector(g, which[v]), n);
            double wait = 0;
            const double t0 = wall_time();
            const int reps = 20;
            for (int i = 0; i < reps; i++) reducer_mean(&red, which[v], &wait);
            const double dt = (wall_time() - t0) / reps;
            float *after = from_device(model_device_vector(g, which[v]), n);
            ck_assert_msg(memcmp(before, after, n * sizeof(float)) == 0, "%s: one-rank NCCL all-reduce of %s changed it", k->name,
                          which[v] == MODEL_BN ? "bn" : "grads");
            if (round == 0)
                printf("  %-28s one-rank ncclAllReduce(ncclAvg) of %-5s (%zu floats): unchanged, %.1f us per call\n", k->name,
                       which[v] == MODEL_BN ? "bn" : "grads", n, dt * 1e6);
            free(before), free(after);
        }
        gpucomm_free(c);
    }
    model_free(g);
}
END_TEST

START_TEST(test_nccl_then_sgd) {
    const comm_case *k = &cases[_i];
    char err[ERRLEN];
    if (!nccl_usable(k->name)) return;
    model *g = make(&k->s, MODEL_CUDA);
    const size_t n = model_n_params(g);
    rng_t r;
    rng_seed(&r, 14);
    char id[GPUCOMM_ID_BYTES];
    ck_assert_msg(gpucomm_unique_id(id, err, sizeof err) == 0, "%s", err);
    gpucomm *c = gpucomm_create(model_gpu(g), 1, 0, id, 60.0, err, sizeof err);
    ck_assert_msg(c != NULL, "%s: gpucomm_create: %s", k->name, err);
    reducer red;
    reducer_with(&red, REDUCE_NCCL, g, 1, 0, c);
    float *theta = xmalloc(n * sizeof(float)), *v = xcalloc(n, sizeof(float)), *grad = xmalloc(n * sizeof(float));
    fill(model_params(g), n, &r);
    model_upload(g, MODEL_PARAMS);
    memcpy(theta, model_params(g), n * sizeof(float));
    const float alpha = 0.1f, mu = 0.9f, lambda = 5e-4f;
    for (int step = 0; step < 3; step++) {
        fill(model_grads(g), n, &r);
        model_upload(g, MODEL_GRADS);
        memcpy(grad, model_grads(g), n * sizeof(float));
        double wait = 0;
        reducer_mean(&red, MODEL_GRADS, &wait); /* ncclAvg over one rank: ×1.0f */
        ck_assert_msg(model_sgd_update(g, alpha, mu, lambda, 1), "%s: step %d: non-finite update", k->name, step);
        ck_assert(sgd_update(theta, grad, v, n, alpha, mu, lambda, 1));
        float *got = from_device(model_device_vector(g, MODEL_PARAMS), n);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(memcmp(&got[i], &theta[i], sizeof(float)) == 0, "%s: step %d: parameter %zu: %.9g, want %.9g", k->name,
                          step, i, (double)got[i], (double)theta[i]);
        free(got);
    }
    printf("  %-28s one-rank NCCL all-reduce then SGD, 3 steps: parameters as sgd_update's bit for bit\n", k->name);
    gpucomm_free(c);
    free(theta), free(v), free(grad);
    model_free(g);
}
END_TEST

#ifdef MOCK_NCCL_LIB
START_TEST(test_nccl_finalize_bounded) {
    char err[ERRLEN];
    ck_assert(nccl_usable("finalize"));
    void *lib = dlopen(MOCK_NCCL_LIB, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(lib != NULL, "%s is not the NCCL loaded", MOCK_NCCL_LIB);
    void (*counts)(int *, int *) = (void (*)(int *, int *))dlsym(lib, "mock_nccl_counts");
    ck_assert_ptr_nonnull(counts);
    model *g = make(&cases[0].s, MODEL_CUDA);
    char id[GPUCOMM_ID_BYTES];
    ck_assert_msg(gpucomm_unique_id(id, err, sizeof err) == 0, "%s", err);
    int aborted0, destroyed0, aborted1, destroyed1;
    /* A finalize that completes: destroyed, not aborted. */
    gpucomm *c = gpucomm_create(model_gpu(g), 1, 0, id, 60.0, err, sizeof err);
    ck_assert_msg(c != NULL, "gpucomm_create: %s", err);
    counts(&aborted0, &destroyed0);
    gpucomm_free(c);
    counts(&aborted1, &destroyed1);
    ck_assert_int_eq(destroyed1, destroyed0 + 1);
    ck_assert_int_eq(aborted1, aborted0);
    /* One that never completes: aborted after GPUCOMM_FINALIZE_S, not comm_timeout_s (60 s). */
    c = gpucomm_create(model_gpu(g), 1, 0, id, 60.0, err, sizeof err);
    ck_assert_msg(c != NULL, "gpucomm_create: %s", err);
    setenv("MOCK_NCCL_FINALIZE_HANG", "1", 1);
    const double t0 = wall_time();
    gpucomm_free(c);
    const double dt = wall_time() - t0;
    unsetenv("MOCK_NCCL_FINALIZE_HANG");
    counts(&aborted0, &destroyed0);
    ck_assert_msg(dt >= GPUCOMM_FINALIZE_S - 0.5 && dt <= GPUCOMM_FINALIZE_S + 2.0,
                  "gpucomm_free took %.2f s with a finalize that never completes (want about %g s)", dt, GPUCOMM_FINALIZE_S);
    ck_assert_int_eq(aborted0, aborted1 + 1);
    ck_assert_int_eq(destroyed0, destroyed1);
    printf("  a finalize that never completes: gpucomm_free aborted the communicator after %.2f s (comm_timeout_s 60)\n", dt);
    model_free(g);
}
END_TEST

/* The per-group all-reduce (gpucomm_grads_begin/_end) with an NCCL that never finishes an
 * all-reduce (MOCK_NCCL_ALLREDUCE_HANG=1: ncclCommGetAsyncError stays ncclInProgress): the first
 * group's enqueue gives up after comm_timeout_s (1 s) inside the backward pass, the later groups
 * are not started, gpucomm_grads_end says GPUCOMM_TIMEOUT naming the group, the communicator is
 * aborted, and the step still ends (model_train_end) — nothing waits unbounded. */
START_TEST(test_nccl_groups_timeout) {
    char err[ERRLEN];
    ck_assert(nccl_usable("groups timeout"));
    void *lib = dlopen(MOCK_NCCL_LIB, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(lib != NULL, "%s is not the NCCL loaded", MOCK_NCCL_LIB);
    void (*counts)(int *, int *) = (void (*)(int *, int *))dlsym(lib, "mock_nccl_counts");
    ck_assert_ptr_nonnull(counts);
    model *g = make(&cases[1].s, MODEL_CUDA); /* ResNet-18: 10 gradient groups */
    char id[GPUCOMM_ID_BYTES];
    ck_assert_msg(gpucomm_unique_id(id, err, sizeof err) == 0, "%s", err);
    gpucomm *c = gpucomm_create(model_gpu(g), 1, 0, id, 1.0, err, sizeof err);
    ck_assert_msg(c != NULL, "gpucomm_create: %s", err);
    const model_spec *s = model_get_spec(g);
    const size_t nx = (size_t)s->batch * s->in_c * s->in_h * s->in_w;
    float *x = model_host_alloc(g, nx * sizeof(float));
    int *y = model_host_alloc(g, (size_t)s->batch * sizeof(int));
    rng_t r;
    rng_seed(&r, 5);
    fill(x, nx, &r);
    for (int i = 0; i < s->batch; i++) y[i] = (int)rng_below(&r, (uint64_t)s->n_classes);
    double ts = wall_time(); /* the step's own time (over the mock the CPU computes it) */
    model_train_step(g, x, y);
    ts = wall_time() - ts;
    int aborted0, destroyed0, aborted1, destroyed1;
    counts(&aborted0, &destroyed0);
    setenv("MOCK_NCCL_ALLREDUCE_HANG", "1", 1);
    const double t0 = wall_time();
    ck_assert_int_eq(gpucomm_grads_begin(c, model_device_vector(g, MODEL_GRADS), err, sizeof err), GPUCOMM_OK);
    model_train_begin(g, x, y, 0);
    double t_computed;
    const int st = gpucomm_grads_end(c, model_n_params(g), &t_computed, err, sizeof err);
    const double dt = wall_time() - t0;
    unsetenv("MOCK_NCCL_ALLREDUCE_HANG");
    ck_assert_int_eq(st, GPUCOMM_TIMEOUT);
    ck_assert_msg(strstr(err, "gradient group 1 of 10") && strstr(err, "comm_timeout_s = 1 s"), "%s", err);
    ck_assert_msg(dt >= 0.9 && dt < ts + 3.0, "the timeout took %.2f s, the step alone %.2f s (comm_timeout_s 1 s: one group's wait, not ten)", dt, ts);
    counts(&aborted1, &destroyed1);
    ck_assert_int_eq(aborted1, aborted0 + 1);
    ck_assert_msg(isfinite(model_train_end(g)), "the step did not end with a finite loss");
    printf("  per-group all-reduce that never completes: GPUCOMM_TIMEOUT after %.2f s (the step alone %.2f s; comm_timeout_s 1): %s\n",
           dt, ts, err);
    ck_assert_int_eq(gpucomm_grads_begin(c, model_device_vector(g, MODEL_GRADS), err, sizeof err), GPUCOMM_FAILED);
    gpucomm_free(c);
    model_host_free(g, x), model_host_free(g, y);
    model_free(g);
}
END_TEST
#endif

static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                                            "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};

/* A dsgd-run command line that trains with device = "cuda" (gpu_early_wanted). */
static char *const cuda_argv[] = {"dsgd-run", "--set", "device=cuda", "x.cfg", NULL};
#define EARLY() gpu_select_early_argv(4, cuda_argv)

START_TEST(test_device_choice) {
    char desc[256], err[ERRLEN];
#ifdef MOCK_NCCL_LIB
    setenv("MOCK_CUDA_DEVICES", "4", 1);
#endif
    for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) unsetenv(launcher_vars[i]);
    int count = 0, cur = -1;
    ck_assert(cudaGetDeviceCount(&count) == cudaSuccess && count >= 1);
    const char *var = "x";
    ck_assert_int_eq(gpu_launcher_local_rank(&var), -1);
    ck_assert_int_eq(EARLY(), -1);
    /* mpiexec inside a Slurm job: Hydra's MPI_LOCALRANKID, not the inherited SLURM_LOCALID. */
    setenv("SLURM_LOCALID", "0", 1);
    ck_assert_int_eq(gpu_launcher_local_rank(&var), 0);
    ck_assert_str_eq(var, "SLURM_LOCALID");
    setenv("MPI_LOCALRANKID", "2", 1);
    ck_assert_int_eq(gpu_launcher_local_rank(&var), 2);
    ck_assert_str_eq(var, "MPI_LOCALRANKID");
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "junk", 1); /* not a number: skipped */
    ck_assert_int_eq(gpu_launcher_local_rank(&var), 2);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int want = 2 % count;
    ck_assert_int_eq(EARLY(), want);
    ck_assert(cudaGetDevice(&cur) == cudaSuccess);
    ck_assert_int_eq(cur, want);
    /* The node-local MPI rank agrees: kept, and said so. */
    ck_assert_int_eq(gpu_select(2, 4, desc, sizeof desc, err, sizeof err), 0);
    ck_assert_msg(strstr(desc, "(MPI_LOCALRANKID=2, as the node-local MPI rank)") != NULL, "desc: %s", desc);
    ck_assert(cudaGetDevice(&cur) == cudaSuccess && cur == want);
    printf("  launcher MPI_LOCALRANKID=2, MPI local rank 2 of 4: %s\n", desc);
    /* It disagrees (a rank numbering of another launcher): the early choice stands, named. */
    ck_assert_int_eq(gpu_select(1, 4, desc, sizeof desc, err, sizeof err), 0);
    ck_assert(cudaGetDevice(&cur) == cudaSuccess && cur == want);
    if (1 % count != want) {
        char exp[160];
        snprintf(exp, sizeof exp, "the launcher's MPI_LOCALRANKID=2 chose it, the node-local MPI rank 1 would choose GPU %d", 1 % count);
        ck_assert_msg(strstr(desc, exp) != NULL, "desc: %s", desc);
        ck_assert_msg(strstr(desc, "GPU 2 of 4") == desc, "desc: %s", desc);
    }
    printf("  launcher MPI_LOCALRANKID=2, MPI local rank 1 of 4: %s\n", desc);
    /* Turned off: no early choice, the split decides. */
    setenv("DSGD_GPU_EARLY", "0", 1);
    ck_assert_int_eq(EARLY(), -1);
    unsetenv("DSGD_GPU_EARLY");
    ck_assert_int_eq(gpu_select(1, 4, desc, sizeof desc, err, sizeof err), 0);
    ck_assert(cudaGetDevice(&cur) == cudaSuccess && cur == 1 % count);
    ck_assert_msg(strstr(desc, "MPI_LOCALRANKID") == NULL, "desc: %s", desc);
    /* Back to device 0 for whatever follows. */
    unsetenv("MPI_LOCALRANKID"), unsetenv("SLURM_LOCALID");
    ck_assert_int_eq(EARLY(), -1);
    ck_assert_int_eq(gpu_select(0, 1, desc, sizeof desc, err, sizeof err), 0);
#ifdef MOCK_NCCL_LIB
    unsetenv("MOCK_CUDA_DEVICES");
#endif
}
END_TEST

/* N9: only a process that trains with device = "cuda" chooses (and so creates a CUDA context on)
 * a GPU before MPI_Init; a device = "cpu" rank, --help, --version, ... make no context. */
START_TEST(test_early_only_cuda) {
#ifdef MOCK_NCCL_LIB
    setenv("MOCK_CUDA_DEVICES", "4", 1);
#endif
    for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) unsetenv(launcher_vars[i]);
    int count = 0, cur = -1;
    ck_assert(cudaGetDeviceCount(&count) == cudaSuccess && count >= 1);
    char dir[] = "/tmp/dsgd-early.XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char cpu_cfg[64], cuda_cfg[64], no_dev[64], bad_cfg[64];
    snprintf(cpu_cfg, sizeof cpu_cfg, "%s/cpu.cfg", dir);
    snprintf(cuda_cfg, sizeof cuda_cfg, "%s/cuda.cfg", dir);
    snprintf(no_dev, sizeof no_dev, "%s/none.cfg", dir);
    snprintf(bad_cfg, sizeof bad_cfg, "%s/bad.cfg", dir);
    const char *texts[4] = {"method = \"allreduce\";\ndevice = \"cpu\";\n", "method = \"allreduce\";\ndevice = \"cuda\";\n",
                            "method = \"allreduce\";\n", "device = \"cuda\"\n  oops {\n"};
    const char *paths[4] = {cpu_cfg, cuda_cfg, no_dev, bad_cfg};
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(paths[i], "w");
        ck_assert(f != NULL);
        fputs(texts[i], f);
        fclose(f);
    }
    struct {
        const char *args[6];
        int want;
    } cases[] = {
        {{"dsgd-run", cpu_cfg}, 0},
        {{"dsgd-run", cuda_cfg}, 1},
        {{"dsgd-run", no_dev}, 0}, /* device's default: cpu */
        {{"dsgd-run", bad_cfg}, 0},
        {{"dsgd-run", "/nonexistent/x.cfg"}, 0},
        {{"dsgd-run", "--set", "device=cuda", cpu_cfg}, 1},
        {{"dsgd-run", "--set=device=\"cuda\"", cpu_cfg}, 1},
        {{"dsgd-run", "--set", "device=cpu", cuda_cfg}, 0},
        {{"dsgd-run", "--set", "device=cuda", "--set", "device=cpu", cuda_cfg}, 0}, /* the last --set wins */
        {{"dsgd-run", "--set", "p=2", cuda_cfg}, 1},
        {{"dsgd-run", "--version"}, 0},
        {{"dsgd-run", "--help"}, 0},
        {{"dsgd-run", "--check", cuda_cfg}, 0},
        {{"dsgd-run", "--pack", "a", "b"}, 0},
        {{"dsgd-run", "--status", "x.h5"}, 0},
    };
    setenv("MPI_LOCALRANKID", "3", 1);
    const int want_dev = 3 % count;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int argc = 0;
        while (argc < 6 && cases[k].args[argc]) argc++;
        ck_assert_int_eq(gpu_early_wanted(argc, (char *const *)cases[k].args), cases[k].want);
        ck_assert(cudaSetDevice(0) == cudaSuccess);
        const int got = gpu_select_early_argv(argc, (char *const *)cases[k].args);
        ck_assert(cudaGetDevice(&cur) == cudaSuccess);
        ck_assert_msg(got == (cases[k].want ? want_dev : -1) && cur == (cases[k].want ? want_dev : 0),
                      "case %zu (%s %s %s): gpu_select_early %d, current device %d", k, cases[k].args[1],
                      argc > 2 ? cases[k].args[2] : "", argc > 3 ? cases[k].args[3] : "", got, cur);
    }
    /* This test program's own command line names no experiment: no early choice. */
    ck_assert_int_eq(gpu_select_early(), -1);
    printf("  early GPU choice: %zu command lines, only device = \"cuda\" runs choose GPU %d before MPI_Init\n",
           sizeof cases / sizeof cases[0], want_dev);
    unsetenv("MPI_LOCALRANKID");
    ck_assert_int_eq(gpu_select_early_argv(2, (char *const[]){"dsgd-run", cpu_cfg, NULL}), -1);
    char desc[256], err[ERRLEN];
    ck_assert_int_eq(gpu_select(0, 1, desc, sizeof desc, err, sizeof err), 0);
    for (int i = 0; i < 4; i++) remove(paths[i]);
    rmdir(dir);
#ifdef MOCK_NCCL_LIB
    unsetenv("MOCK_CUDA_DEVICES");
#endif
}
END_TEST

static Suite *gpu_comm_suite(void) {
    Suite *s = suite_create("gpu_comm");
    TCase *tc = tcase_create("gpu_comm");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_vectors, 0, N_CASES);
    tcase_add_loop_test(tc, test_scale, 0, N_CASES);
    tcase_add_loop_test(tc, test_nccl_one_rank, 0, N_CASES);
    tcase_add_loop_test(tc, test_nccl_then_sgd, 0, N_CASES);
#ifdef MOCK_NCCL_LIB
    tcase_add_test(tc, test_nccl_finalize_bounded);
    tcase_add_test(tc, test_nccl_groups_timeout);
#endif
    tcase_add_test(tc, test_device_choice);
    tcase_add_test(tc, test_early_only_cuda);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    char ver[256], nccl[ERRLEN + 64], desc[256], err[ERRLEN];
#ifdef MOCK_NCCL_LIB
    setenv("DSGD_NCCL_LIBRARY", MOCK_NCCL_LIB, 1); /* over the CPU stand-ins: their one-rank NCCL */
#endif
    gpu_version(ver, sizeof ver);
    gpucomm_version(nccl, sizeof nccl);
    if (!gpu_built()) snprintf(err, sizeof err, "%s", ver);
    if (!gpu_built() || gpu_select(0, 1, desc, sizeof desc, err, sizeof err) != 0) {
        if (gpu_required()) {
            printf("test_gpu_comm: no usable GPU and DSGD_REQUIRE_GPU is set: %s\n", err);
            return EXIT_FAILURE;
        }
        printf("test_gpu_comm: no GPU: skipped (%s)\n", err);
        return EXIT_SUCCESS;
    }
    printf("test_gpu_comm: %s; %s; %s\n", desc, ver, nccl);
    fflush(stdout);
    return run_suite_nofork(gpu_comm_suite());
}
