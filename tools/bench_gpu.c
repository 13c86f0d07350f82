/* bench_gpu.c — training throughput of dsgd-run's GPU backend in images per second: one step is
 * model_train_step + model_sgd_update in device mode (model_set_host_sync(m, 0)), the work of an
 * all-reduce step at p = 1, where nothing but the minibatch (in) and the loss (out) crosses the
 * bus:
 *
 *     minibatch copied from page-locked host memory (model_host_alloc) to the GPU, forward,
 *     mean cross-entropy, backward, SGD update on the device (Nesterov µ = 0.9, λ = 1e-4),
 *     loss read back to the host.
 *
 * tools/bench_torch_gpu.py does the same step in PyTorch. Timing as the HPC benchmarks do it
 * (and as tools/bench_model.c): a model per row, warm-up steps excluded (cuDNN's algorithm
 * choice happened in model_create; the first steps still touch every buffer and load the
 * kernels; with DSGD_GPU_GRAPH=1 the second is captured), then up to `reps` timings of `steps`
 * steps each, stopping once --max-seconds of timings are done (after at least one): a row costs
 * at most model_create + (warmup + steps) steps + --max-seconds. The table shows the median, min
 * and max of the per-timing img/s. Each step ends with the loss on the host, so a wall clock
 * around the steps is the GPU time plus launch overhead.
 *
 * Rows and the time budget (test/gpu/run.sh, step d). --rows gives the rows in the order to
 * run them, the most needed first: PRECISION:BATCH[:VARIANT], comma-separated. Without it: the
 * base rows of --precision x --batch, then each --variants row at the --variant-precision
 * precisions. --budget S: a row starts only if the seconds since this program started plus the
 * row's predicted cost (the longest row done so far at the same batch and precision, else at the
 * same batch, else 0) stay within S; a row that does not fit is not run — its line says why,
 * `BENCH ... status=notrun reason=budget` — and the rows after it are still tried (a smaller
 * batch may fit). Every row is first announced by a `PLAN impl=dsgd-run ...` line, so that a call
 * cut from outside leaves the rows it did not reach named (test/gpu/report.py: NOT RUN).
 *
 * Every row also goes out as one machine-readable line (test/gpu/report.py reads them):
 *   BENCH impl=dsgd-run width=64 stem=imagenet input=3x224x224 classes=1000 batch=32
 *         precision=fp32 variant=base status=ok img_s_med=... img_s_min=... img_s_max=...
 *         ms_step=... reps=3 steps=5 create_s=... row_s=...
 * status is ok, unsupported (model_create refused the precision as not built, or as needing a
 * newer GPU — bf16 below compute capability 8.0: the message is printed above the line; NCCL
 * that cannot be loaded; a precision other than fp32 with --device cpu), error (any other
 * failure of model_create, or the loss or parameters became non-finite) or notrun (--budget).
 * create_s: model_create (cuDNN's search included); row_s: model_create to the last timing.
 *
 *   make CUDA=1 gpu-tests            (builds build/bench_gpu; plain `make build/bench_gpu` builds
 *                                     it on the CPU backend, for --device cpu)
 *   build/bench_gpu [--width 64] [--stem imagenet|cifar] [--input 3x224x224] [--classes 1000]
 *                   [--batch 32,64,128] [--precision fp32,tf32,bf16] [--reps 5] [--steps 8]
 *                   [--warmup 5] [--max-seconds 30] [--device cuda|cpu] [--budget S]
 *                   [--variants LIST] [--variant-precision LIST] [--rows PREC:B[:VARIANT],...]
 * --device cpu times the same loop on the CPU backend (fp32 only), e.g. to try this program on a
 * machine without a GPU. --variants adds rows with the step's switches (docs/gpu.md, "Switches";
 * VARIANTS below: nccl, ncclov, det, sync1, cast1, all, nhwc, nhwcbn, graph, nhwcadd) after the
 * base rows, at the --variant-precision precisions (default every one); their BENCH lines carry
 * variant=NAME (base: variant=base). Exit status: 0 every row ok, unsupported or not run, 1 a
 * row failed, 2 bad arguments or no GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/gpu.h"
#include "../cuda/gpucomm.h"
#include "comm/reduce.h"
#include "nn/model.h"
#include "util/util.h"

#define MAX_LIST 16
#define MAX_REPS 100
#define MAX_ROWS 64

typedef struct {
    int width, in_c, in_h, in_w, classes;
    model_stem stem;
    int batches[MAX_LIST], n_batches;
    model_precision precs[MAX_LIST];
    int n_precs;
    int reps, steps, warmup;
    double max_seconds;
    model_device device;
    int variants[MAX_LIST], n_variants;   /* indices into VARIANTS; base always first */
    model_precision vprecs[MAX_LIST];     /* the precisions the other variants run at */
    int n_vprecs;
    /* --rows: the rows in order (n_rows = 0: from the lists above) */
    model_precision row_prec[MAX_ROWS];
    int row_batch[MAX_ROWS], row_var[MAX_ROWS], n_rows;
    double budget; /* --budget: seconds; 0 none */
} bench_args;

/* The step's switches (docs/gpu.md, "Switches"), one row each beside the default ("base"), so
 * that one call measures every choice (issue 23): name, then the environment it sets for
 * model_create (NULL value: unset). "base" is the default of every switch: DSGD_GPU_SYNC=update,
 * DSGD_GPU_CASTS=each, DSGD_CUDNN_DETERMINISTIC unset (find: the fastest algorithm, deterministic
 * or not). DSGD_GPU_STAGE has no row: this loop stages no minibatch. */
#define N_SWITCH_VARS 6
static const char *const SWITCH_VARS[N_SWITCH_VARS] = {"DSGD_GPU_SYNC", "DSGD_GPU_CASTS", "DSGD_CUDNN_DETERMINISTIC",
                                                       "DSGD_GPU_LAYOUT", "DSGD_GPU_BNRELU", "DSGD_GPU_GRAPH"};
static const struct {
    const char *name, *vals[N_SWITCH_VARS];
} VARIANTS[] = {
    {"base", {NULL, NULL, NULL, NULL, NULL}},
    {"nccl", {NULL, NULL, NULL, NULL, NULL}},        /* + a one-rank NCCL all-reduce of the gradient after the backward pass (N14 off) */
    {"ncclov", {NULL, NULL, NULL, NULL, NULL}},      /* + the same per gradient group during the backward pass (N14: DSGD_NCCL_OVERLAP=1) */
    {"det", {NULL, NULL, "1", NULL, NULL}},          /* N11 off: deterministic algorithms first */
    {"sync1", {"step", NULL, NULL, NULL, NULL}},     /* N10: one host synchronisation per step */
    {"cast1", {NULL, "one", NULL, NULL, NULL}},      /* N16: the bf16 weight casts in one launch */
    {"all", {"step", "one", NULL, NULL, NULL}},      /* sync1 + cast1 (the layout has rows of its own) */
    {"nhwc", {NULL, NULL, NULL, "nhwc", NULL}},      /* N12: NHWC activations, KRSC weight copies */
    {"nhwcbn", {NULL, NULL, NULL, "nhwc", "fused"}}, /* N12: and cuDNN's fused BN+ReLU */
    {"graph", {NULL, NULL, NULL, NULL, NULL, "1"}},  /* N13: the step captured once as a CUDA graph and replayed */
    {"nhwcadd", {NULL, NULL, NULL, "nhwc", "fused_add"}}, /* N12: nhwcbn and each block's BN+add+ReLU fused (bf16) */
};
#define N_VARIANTS (int)(sizeof VARIANTS / sizeof VARIANTS[0])

static const char *prec_name(model_precision p) {
    return p == MODEL_FP32 ? "fp32" : p == MODEL_TF32 ? "tf32" : p == MODEL_BF16 ? "bf16" : "?";
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage(const char *msg) {
    if (msg) fprintf(stderr, "bench_gpu: %s\n", msg);
    fprintf(stderr,
            "usage: bench_gpu [--width W] [--stem imagenet|cifar] [--input CxHxW] [--classes K]\n"
            "                 [--batch B1,B2,...] [--precision fp32,tf32,bf16] [--reps R] [--steps S]\n"
            "                 [--warmup N] [--max-seconds T] [--device cuda|cpu]\n"
            "                 [--variants base,nccl,ncclov,det,sync1,cast1,all,nhwc,nhwcbn,graph,nhwcadd] [--variant-precision bf16,...]\n"
            "                 [--rows PREC:BATCH[:VARIANT],...] [--budget SECONDS]\n");
    return EXIT_BADINPUT;
}

/* The precision named s (fp32, tf32, bf16) into *p; 0, or -1 if s names none. */
static int parse_prec(const char *s, model_precision *p) {
    if (!strcmp(s, "fp32")) *p = MODEL_FP32;
    else if (!strcmp(s, "tf32")) *p = MODEL_TF32;
    else if (!strcmp(s, "bf16")) *p = MODEL_BF16;
    else return -1;
    return 0;
}

/* Positive integer in [1, max] from s, or -1. */
static int parse_int(const char *s, int max) {
    char *end;
    long v = strtol(s, &end, 10);
    return (*s && !*end && v >= 1 && v <= max) ? (int)v : -1;
}

static int parse_args(int argc, char **argv, bench_args *a) {
    *a = (bench_args){.width = 64, .in_c = 3, .in_h = 224, .in_w = 224, .classes = 1000, .stem = MODEL_STEM_IMAGENET,
                      .batches = {32, 64, 128}, .n_batches = 3, .precs = {MODEL_FP32, MODEL_TF32, MODEL_BF16},
                      .n_precs = 3, .reps = 5, .steps = 8, .warmup = 5, .max_seconds = 30, .device = MODEL_CUDA,
                      .variants = {0}, .n_variants = 1, .n_vprecs = 0};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage(NULL);
            exit(0);
        }
        if (!v) return usage("every option takes a value");
        i++;
        if (!strcmp(k, "--width")) {
            if ((a->width = parse_int(v, 1024)) < 0) return usage("--width: 1..1024");
        } else if (!strcmp(k, "--classes")) {
            if ((a->classes = parse_int(v, 1000000)) < 0) return usage("--classes: >= 1");
        } else if (!strcmp(k, "--reps")) {
            if ((a->reps = parse_int(v, MAX_REPS)) < 0) return usage("--reps: 1..100");
        } else if (!strcmp(k, "--steps")) {
            if ((a->steps = parse_int(v, 1000000)) < 0) return usage("--steps: >= 1");
        } else if (!strcmp(k, "--warmup")) {
            if (!strcmp(v, "0")) a->warmup = 0;
            else if ((a->warmup = parse_int(v, 1000000)) < 0) return usage("--warmup: >= 0");
        } else if (!strcmp(k, "--max-seconds")) {
            char *end;
            a->max_seconds = strtod(v, &end);
            if (*end || !(a->max_seconds > 0)) return usage("--max-seconds: > 0");
        } else if (!strcmp(k, "--stem")) {
            if (!strcmp(v, "imagenet")) a->stem = MODEL_STEM_IMAGENET;
            else if (!strcmp(v, "cifar")) a->stem = MODEL_STEM_CIFAR;
            else return usage("--stem: imagenet or cifar");
        } else if (!strcmp(k, "--device")) {
            if (!strcmp(v, "cuda")) a->device = MODEL_CUDA;
            else if (!strcmp(v, "cpu")) a->device = MODEL_CPU;
            else return usage("--device: cuda or cpu");
        } else if (!strcmp(k, "--input")) {
            if (sscanf(v, "%dx%dx%d", &a->in_c, &a->in_h, &a->in_w) != 3 || a->in_c < 1 || a->in_h < 1 || a->in_w < 1)
                return usage("--input: CxHxW, e.g. 3x224x224");
        } else if (!strcmp(k, "--variants")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            a->n_variants = 1; /* base first, always */
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int j = 0;
                while (j < N_VARIANTS && strcmp(t, VARIANTS[j].name)) j++;
                if (j == N_VARIANTS) return usage("--variants: comma-separated base, nccl, ncclov, det, sync1, cast1, all, nhwc, nhwcbn, graph, nhwcadd");
                if (j == 0) continue;
                if (a->n_variants == MAX_LIST) return usage("at most 16 values in a list");
                a->variants[a->n_variants++] = j;
            }
        } else if (!strcmp(k, "--budget")) {
            char *end;
            a->budget = strtod(v, &end);
            if (*end || !(a->budget > 0)) return usage("--budget: seconds > 0");
        } else if (!strcmp(k, "--rows")) {
            char buf[1024];
            if (strlen(v) >= sizeof buf) return usage("--rows: at most 1023 characters");
            snprintf(buf, sizeof buf, "%s", v);
            a->n_rows = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (a->n_rows == MAX_ROWS) return usage("--rows: at most 64 rows");
                char *c1 = strchr(t, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c1) return usage("--rows: each row is PRECISION:BATCH[:VARIANT], e.g. bf16:256:nhwc");
                *c1 = 0;
                if (c2) *c2 = 0;
                const int r = a->n_rows;
                if (parse_prec(t, &a->row_prec[r])) return usage("--rows: precision fp32, tf32 or bf16");
                if ((a->row_batch[r] = parse_int(c1 + 1, 1 << 20)) < 0) return usage("--rows: batch >= 1");
                int j = 0;
                if (c2)
                    while (j < N_VARIANTS && strcmp(c2 + 1, VARIANTS[j].name)) j++;
                if (j == N_VARIANTS) return usage("--rows: variant base, nccl, ncclov, det, sync1, cast1, all, nhwc, nhwcbn, graph or nhwcadd");
                a->row_var[r] = j;
                a->n_rows++;
            }
            if (!a->n_rows) return usage("--rows: empty list");
        } else if (!strcmp(k, "--variant-precision")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            a->n_vprecs = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (a->n_vprecs == MAX_LIST) return usage("at most 16 values in a list");
                if (!strcmp(t, "fp32")) a->vprecs[a->n_vprecs++] = MODEL_FP32;
                else if (!strcmp(t, "tf32")) a->vprecs[a->n_vprecs++] = MODEL_TF32;
                else if (!strcmp(t, "bf16")) a->vprecs[a->n_vprecs++] = MODEL_BF16;
                else return usage("--variant-precision: comma-separated fp32, tf32, bf16");
            }
        } else if (!strcmp(k, "--batch") || !strcmp(k, "--precision")) {
            const int is_batch = k[2] == 'b';
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            int n = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (n == MAX_LIST) return usage("at most 16 values in a list");
                if (is_batch) {
                    if ((a->batches[n++] = parse_int(t, 1 << 20)) < 0) return usage("--batch: comma-separated integers >= 1");
                } else if (!strcmp(t, "fp32")) a->precs[n++] = MODEL_FP32;
                else if (!strcmp(t, "tf32")) a->precs[n++] = MODEL_TF32;
                else if (!strcmp(t, "bf16")) a->precs[n++] = MODEL_BF16;
                else return usage("--precision: comma-separated fp32, tf32, bf16");
            }
            if (!n) return usage("empty list");
            if (is_batch) a->n_batches = n;
            else a->n_precs = n;
        } else {
            return usage("unknown option");
        }
    }
    return 0;
}

static int bench_row_env(const bench_args *a, int b, model_precision prec, const char *common);

/* The row's all-reduce (variants nccl, ncclov: comm = "nccl" at p = 1, through the reducer as
 * allreduce_grads runs it): 0 none, 1 after the backward pass, 2 per gradient group during it. */
static int g_nccl;

/* One step: model_train_step, or with g_nccl the step with its NCCL all-reduce (red). */
static float bench_step(model *m, const float *x, const int *y, reducer *red) {
    if (!g_nccl) return model_train_step(m, x, y);
    if (!red->nccl_overlap) {
        const float loss = model_train_step(m, x, y);
        reducer_mean(red, MODEL_GRADS, NULL);
        return loss;
    }
    double t_computed;
    reducer_grads_begin(red);
    model_train_begin(m, x, y, 0);
    reducer_grads_end(red, NULL, &t_computed);
    return model_train_end(m);
}

/* One row: returns 0 ok, 1 failed (printed), 2 precision unsupported (printed). */
static int bench_row(const bench_args *a, int b, model_precision prec, const char *common, int variant) {
    /* The variant's switches for model_create (read there), the caller's environment after. */
    char *saved[N_SWITCH_VARS];
    for (int i = 0; i < N_SWITCH_VARS; i++) {
        const char *o = getenv(SWITCH_VARS[i]);
        saved[i] = o ? strdup(o) : NULL;
        if (variant == 0) continue; /* base: the environment as it is */
        if (VARIANTS[variant].vals[i]) setenv(SWITCH_VARS[i], VARIANTS[variant].vals[i], 1);
        else unsetenv(SWITCH_VARS[i]);
    }
    g_nccl = !strcmp(VARIANTS[variant].name, "nccl") ? 1 : !strcmp(VARIANTS[variant].name, "ncclov") ? 2 : 0;
    const int rc = bench_row_env(a, b, prec, common);
    for (int i = 0; i < N_SWITCH_VARS; i++) {
        if (saved[i]) setenv(SWITCH_VARS[i], saved[i], 1);
        else unsetenv(SWITCH_VARS[i]);
        free(saved[i]);
    }
    return rc;
}

static int bench_row_env(const bench_args *a, int b, model_precision prec, const char *common) {
    model_spec s = {.arch = MODEL_RESNET18, .width = a->width, .stem = a->stem, .in_c = a->in_c, .in_h = a->in_h,
                    .in_w = a->in_w, .n_classes = a->classes, .batch = b, .eval_batch = 0, .threads = 0,
                    .device = a->device, .precision = prec};
    char err[ERRLEN];
    const double tc = wall_time();
    model *m = model_create(&s, err, sizeof err);
    if (!m) {
        const int unsupported = prec != MODEL_FP32 && (strstr(err, "not built") || strstr(err, "compute capability"));
        printf("%9s %6d  %s: model_create: %s\n", prec_name(prec), b, unsupported ? "unsupported" : "error", err);
        printf("BENCH %s status=%s\n", common, unsupported ? "unsupported" : "error");
        return unsupported ? 2 : 1;
    }
    const double create_s = wall_time() - tc;
    model_init(m, 1);
    model_set_host_sync(m, 0);
    model_upload(m, MODEL_PARAMS | MODEL_BN);
    reducer red = {0};
    gpucomm *comm = NULL;
    if (g_nccl) { /* a one-rank communicator; no NCCL here: the row is unsupported */
        char id[GPUCOMM_ID_BYTES];
        if (a->device != MODEL_CUDA) snprintf(err, sizeof err, "comm = \"nccl\" needs --device cuda");
        if (a->device != MODEL_CUDA || gpucomm_unique_id(id, err, sizeof err) || !(comm = gpucomm_create(model_gpu(m), 1, 0, id, 60.0, err, sizeof err))) {
            printf("%9s %6d  unsupported: NCCL: %s\n", prec_name(prec), b, err);
            printf("BENCH %s status=unsupported\n", common);
            model_free(m);
            return 2;
        }
        const char *o = getenv("DSGD_NCCL_OVERLAP");
        char *old = o ? strdup(o) : NULL;
        setenv("DSGD_NCCL_OVERLAP", g_nccl == 2 ? "1" : "0", 1);
        reducer_with(&red, REDUCE_NCCL, m, 1, 0, comm);
        if (old) setenv("DSGD_NCCL_OVERLAP", old, 1);
        else unsetenv("DSGD_NCCL_OVERLAP");
        free(old);
        if (g_nccl == 2 && !red.nccl_overlap) { /* DSGD_OVERLAP=0 in the environment */
            printf("%9s %6d  unsupported: DSGD_OVERLAP=0 turns the overlap off\n", prec_name(prec), b);
            printf("BENCH %s status=unsupported\n", common);
            reducer_free(&red);
            model_free(m);
            return 2;
        }
    }

    const size_t nx = (size_t)b * a->in_c * a->in_h * a->in_w;
    float *x = model_host_alloc(m, nx * sizeof(float));
    int *y = model_host_alloc(m, (size_t)b * sizeof(int));
    rng_t r;
    rng_seed(&r, 2);
    for (size_t i = 0; i < nx; i++) x[i] = (float)rng_uniform(&r);
    for (int i = 0; i < b; i++) y[i] = (int)rng_below(&r, (uint64_t)a->classes);

    int finite = 1;
    float loss = 0;
    for (int i = 0; i < a->warmup; i++) {
        loss = bench_step(m, x, y, &red);
        finite &= model_sgd_update(m, 0.01f, 0.9f, 1e-4f, 1);
    }
    double rate[MAX_REPS];
    int n = 0;
    const double t_start = wall_time();
    while (n < a->reps) {
        const double t0 = wall_time();
        for (int i = 0; i < a->steps; i++) {
            loss = bench_step(m, x, y, &red); /* returns with the loss on the host */
            finite &= model_sgd_update(m, 0.01f, 0.9f, 1e-4f, 1);
        }
        rate[n++] = (double)b * a->steps / (wall_time() - t0);
        if (wall_time() - t_start > a->max_seconds) break; /* the row's cap, after at least one timing */
    }
    finite &= isfinite(loss) != 0;
    qsort(rate, (size_t)n, sizeof rate[0], cmp_double);
    const double med = n % 2 ? rate[n / 2] : 0.5 * (rate[n / 2 - 1] + rate[n / 2]);
    printf("%9s %6d %11.1f %11.1f %11.1f %9.2f %9.2f%s\n", prec_name(prec), b, med, rate[0], rate[n - 1],
           1e3 * b / med, create_s, finite ? "" : "  NON-FINITE loss or parameters");
    printf("BENCH %s status=%s img_s_med=%.1f img_s_min=%.1f img_s_max=%.1f ms_step=%.3f reps=%d steps=%d create_s=%.2f "
           "row_s=%.2f\n",
           common, finite ? "ok" : "error", med, rate[0], rate[n - 1], 1e3 * b / med, n, a->steps, create_s, wall_time() - tc);
    fflush(stdout);
    model_host_free(m, x);
    model_host_free(m, y);
    reducer_free(&red);
    model_free(m);
    return finite ? 0 : 1;
}

int main(int argc, char **argv) {
    const double t_prog = wall_time(); /* --budget counts from here: CUDA's start-up included */
    bench_args a;
    int st = parse_args(argc, argv, &a);
    if (st) return st;

    char desc[256] = "cpu", err[ERRLEN], ver[256], backend[128];
    model_backend_version(backend, sizeof backend);
    gpu_version(ver, sizeof ver);
    if (a.device == MODEL_CUDA) {
        if (gpu_select(0, 1, desc, sizeof desc, err, sizeof err) != 0) {
            fprintf(stderr, "bench_gpu: no GPU: %s\n", err);
            return EXIT_BADINPUT;
        }
    } else {
        a.n_precs = 1, a.precs[0] = MODEL_FP32; /* the CPU computes in fp32 only */
    }
    const char *stem = a.stem == MODEL_STEM_IMAGENET ? "imagenet" : "cifar";
    printf("bench_gpu: dsgd-run %s on %s (%s; CPU backend %s)\n", DSGD_VERSION, desc, ver, backend);
    printf("ResNet-18 width %d, %s stem, %dx%dx%d input, %d classes; per step: model_train_step + model_sgd_update in\n"
           "device mode (pinned host -> GPU minibatch, forward, cross-entropy, backward, Nesterov update, loss to the\n"
           "host); %d warm-up steps, median of up to %d timings of %d steps (create s: model_create incl. cuDNN search)\n\n",
           a.width, stem, a.in_c, a.in_h, a.in_w, a.classes, a.warmup, a.reps, a.steps);
    printf("(gpu_version's \"step:\" part is the base rows' switches; each other variant's row sets its own)\n");
    printf("INFO impl=dsgd-run version=%s backend=", DSGD_VERSION);
    for (const char *p = ver; *p; p++) putchar(*p == ' ' ? '_' : *p);
    printf(" gpu=");
    for (const char *p = desc; *p; p++) putchar(*p == ' ' ? '_' : *p);
    printf("\n");

    /* The rows in order: --rows as given; else the base rows first (every precision and batch),
     * then each other variant at the --variant-precision precisions (default: all). Either way
     * the rows most needed come first, so a budget or a cut call keeps them. */
    if (!a.n_rows) {
        for (int vi = 0; vi < a.n_variants; vi++) {
            const int var = a.variants[vi];
            for (int pi = 0; pi < a.n_precs; pi++) {
                int at = var == 0 || a.n_vprecs == 0;
                for (int j = 0; j < a.n_vprecs && !at; j++) at = a.vprecs[j] == a.precs[pi];
                for (int bi = 0; bi < a.n_batches && at; bi++) {
                    if (a.n_rows == MAX_ROWS) {
                        fprintf(stderr, "bench_gpu: more than %d rows\n", MAX_ROWS);
                        return EXIT_BADINPUT;
                    }
                    a.row_prec[a.n_rows] = a.precs[pi], a.row_batch[a.n_rows] = a.batches[bi], a.row_var[a.n_rows++] = var;
                }
            }
        }
    }
    char common[MAX_ROWS][256];
    for (int r = 0; r < a.n_rows; r++) {
        snprintf(common[r], sizeof common[r],
                 "impl=dsgd-run width=%d stem=%s input=%dx%dx%d classes=%d batch=%d precision=%s variant=%s", a.width, stem,
                 a.in_c, a.in_h, a.in_w, a.classes, a.row_batch[r], prec_name(a.row_prec[r]), VARIANTS[a.row_var[r]].name);
        printf("PLAN %s\n", common[r]);
    }
    if (a.budget > 0) printf("INFO impl=dsgd-run budget=%g rows=%d\n", a.budget, a.n_rows);
    printf("%9s %6s %11s %11s %11s %9s %9s\n", "precision", "batch", "img/s(med)", "img/s(min)", "img/s(max)", "ms/step",
           "create s");
    fflush(stdout);

    /* Each row, unless --budget says it would not end in time (the prediction: the longest row
     * done at the same batch and precision, else at the same batch). */
    int failed = 0, last_var = -1;
    double row_s[MAX_ROWS];
    for (int r = 0; r < a.n_rows; r++) {
        const int b = a.row_batch[r], var = a.row_var[r];
        const model_precision prec = a.row_prec[r];
        row_s[r] = -1;
        if (var != last_var) printf("variant %s:\n", VARIANTS[var].name);
        last_var = var;
        if (a.device == MODEL_CPU && prec != MODEL_FP32) {
            printf("%9s %6d  unsupported: --device cpu computes in fp32 only\n", prec_name(prec), b);
            printf("BENCH %s status=unsupported\n", common[r]);
            continue;
        }
        if (a.budget > 0) {
            double pred = -1, pred_b = -1;
            for (int q = 0; q < r; q++) {
                if (row_s[q] < 0 || a.row_batch[q] != b) continue;
                if (row_s[q] > pred_b) pred_b = row_s[q];
                if (a.row_prec[q] == prec && row_s[q] > pred) pred = row_s[q];
            }
            const char *as = pred >= 0 ? "as the longest row done at this batch and precision"
                             : pred_b >= 0 ? "as the longest row done at this batch" : "no row done at this batch";
            if (pred < 0) pred = pred_b > 0 ? pred_b : 0;
            const double spent = wall_time() - t_prog;
            if (spent + pred > a.budget) {
                printf("%9s %6d  not run: --budget %g s: %.1f s spent, the row needs ~%.1f s (%s)\n", prec_name(prec), b,
                       a.budget, spent, pred, as);
                printf("BENCH %s status=notrun reason=budget\n", common[r]);
                fflush(stdout);
                continue;
            }
        }
        const double t0 = wall_time();
        const int rc = bench_row(&a, b, prec, common[r], var);
        failed |= rc == 1;
        if (rc == 0) row_s[r] = wall_time() - t0;
    }
    return failed ? EXIT_RUNTIME : 0;
}
