/* test_conv_tune.c — cuda/layers_conv.cu's choice of convolution algorithms (gpu_conv_tune), on
 * the CPU: layers_conv.cu compiled by g++ (build/mock/layers_conv.o) over mock_cuda.c's runtime and
 * the cuDNN convolution stand-ins below, which describe tensors, answer Get_v7 / Find with rows
 * the test sets, size workspaces, and "run" a convolution by checking its buffers and workspace
 * (mock_check_dev) and returning the status the test set for that algorithm. Checks:
 *   - heuristic mode (DSGD_CUDNN_ALGO=heuristic, every run of test/gpu/run.sh): each chosen
 *     algorithm is run once while tuning, in every direction; a row marked SUCCESS that fails to
 *     run (cuDNN's mnistCUDNN sample, NVIDIA/cudnn-frontend#16) is passed over for the next one;
 *     none that runs: an error naming the layer, the direction and what was tried (issue 23, N2);
 *   - heuristic mode allocates no 1 GiB tuning workspace: only what the tried algorithms need
 *     (the peak of device memory while tuning; N18);
 *   - find mode is unchanged: Find's fastest usable row, nothing run again;
 *   - the memo: a second layer of the same shape takes the choice without running anything. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h" /* cuda/layers.h */
#include "util/util.h"

void mock_check_dev(const void *p, size_t nbytes, const char *what);

/* ---- cuDNN stand-ins ------------------------------------------------------------------------ */

struct cudnnTensorStruct { int n, c, h, w; };
struct cudnnFilterStruct { int k, c, h, w; };
struct cudnnConvolutionStruct { int pad, stride; cudnnMathType_t math; };

#define NDIR 3
#define NROWS 3
/* Rows per direction: algorithm, the status Get_v7 / Find report, the workspace it needs, and
 * the status running it returns. */
typedef struct {
    int algo;
    cudnnStatus_t listed, runs;
    size_t ws;
    int nondet; /* listed CUDNN_NON_DETERMINISTIC */
} row;
static row rows[NDIR][NROWS];
static int runs[NDIR];             /* convolutions run, per direction */
static int last_algo[NDIR];        /* the algorithm of the last run */
static size_t peak_used;           /* device memory in use, at most, while a convolution ran */

static void reset_rows(void) {
    for (int d = 0; d < NDIR; d++) {
        /* algorithm 2 first (1 MiB workspace), then 1 (none), then 0 (4 MiB) */
        rows[d][0] = (row){2, CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS, (size_t)1 << 20, 0};
        rows[d][1] = (row){1, CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS, 0, 0};
        rows[d][2] = (row){0, CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS, (size_t)4 << 20, 0};
        runs[d] = 0, last_algo[d] = -1;
    }
    peak_used = 0;
}

static const row *row_of(int dir, int algo) {
    for (int i = 0; i < NROWS; i++)
        if (rows[dir][i].algo == algo) return &rows[dir][i];
    ck_abort_msg("algorithm %d of direction %d: not a row", algo, dir);
    return NULL;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { *d = calloc(1, sizeof **d); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { free(d); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n, int c, int h, int w) {
    (void)f, (void)t;
    *d = (struct cudnnTensorStruct){n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { *d = calloc(1, sizeof **d); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { free(d); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k, int c, int h, int w) {
    (void)f, (void)t;
    *d = (struct cudnnFilterStruct){k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) { *d = calloc(1, sizeof **d); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { free(d); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw, int dh, int dw,
                                              cudnnConvolutionMode_t m, cudnnDataType_t t) {
    (void)pw, (void)sw, (void)dh, (void)dw, (void)m, (void)t;
    d->pad = ph, d->stride = sh;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) { d->math = m; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t d, const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int *n, int *c, int *h, int *wo) {
    *n = x->n, *c = w->k;
    *h = (x->h + 2 * d->pad - w->h) / d->stride + 1;
    *wo = (x->w + 2 * d->pad - w->w) / d->stride + 1;
    return CUDNN_STATUS_SUCCESS;
}

static size_t nx(const cudnnTensorDescriptor_t d) { return (size_t)d->n * d->c * d->h * d->w * sizeof(float); }
static size_t nw(const cudnnFilterDescriptor_t d) { return (size_t)d->k * d->c * d->h * d->w * sizeof(float); }

/* The rows of direction dir as cuDNN's perf structs (the same fields in every direction). */
#define PERF_ROWS(dir, n, got, p)                                                                 \
    do {                                                                                          \
        *(got) = (n) < NROWS ? (n) : NROWS;                                                       \
        for (int i_ = 0; i_ < *(got); i_++) {                                                     \
            memset(&(p)[i_], 0, sizeof (p)[i_]);                                                  \
            (p)[i_].algo = (__typeof__((p)[i_].algo))rows[dir][i_].algo;                          \
            (p)[i_].status = rows[dir][i_].listed;                                                \
            (p)[i_].memory = rows[dir][i_].ws;                                                    \
            (p)[i_].mathType = CUDNN_DEFAULT_MATH;                                                \
            (p)[i_].determinism = rows[dir][i_].nondet ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC; \
        }                                                                                         \
    } while (0)

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t h, int *n) { (void)h; *n = 8; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t h, int *n) { (void)h; *n = 6; return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t h, int *n) { (void)h; *n = 7; return CUDNN_STATUS_SUCCESS; }

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t d, const cudnnTensorDescriptor_t y, int n,
                                                     int *got, cudnnConvolutionFwdAlgoPerf_t *p) {
    (void)h, (void)x, (void)w, (void)d, (void)y;
    PERF_ROWS(0, n, got, p);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t d, const cudnnTensorDescriptor_t dx, int n,
                                                          int *got, cudnnConvolutionBwdDataAlgoPerf_t *p) {
    (void)h, (void)w, (void)dy, (void)d, (void)dx;
    PERF_ROWS(1, n, got, p);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t d, const cudnnFilterDescriptor_t dw, int n,
                                                            int *got, cudnnConvolutionBwdFilterAlgoPerf_t *p) {
    (void)h, (void)x, (void)dy, (void)d, (void)dw;
    PERF_ROWS(2, n, got, p);
    return CUDNN_STATUS_SUCCESS;
}
/* Find: the same rows (as if timed in that order); it "ran" each, so no run is counted here. */
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                     const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t d,
                                                     const cudnnTensorDescriptor_t yd, void *y, int n, int *got,
                                                     cudnnConvolutionFwdAlgoPerf_t *p, void *ws, size_t wsn) {
    (void)h, (void)d, (void)ws, (void)wsn;
    mock_check_dev(x, nx(xd), "Find forward x"), mock_check_dev(w, nw(wd), "Find forward w"), mock_check_dev(y, nx(yd), "Find forward y");
    PERF_ROWS(0, n, got, p);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
                                                          const cudnnTensorDescriptor_t dyd, const void *dy,
                                                          const cudnnConvolutionDescriptor_t d, const cudnnTensorDescriptor_t dxd, void *dx,
                                                          int n, int *got, cudnnConvolutionBwdDataAlgoPerf_t *p, void *ws, size_t wsn) {
    (void)h, (void)d, (void)ws, (void)wsn, (void)wd, (void)w, (void)dyd, (void)dy, (void)dxd, (void)dx;
    PERF_ROWS(1, n, got, p);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                            const cudnnTensorDescriptor_t dyd, const void *dy,
                                                            const cudnnConvolutionDescriptor_t d, const cudnnFilterDescriptor_t dwd, void *dw,
                                                            int n, int *got, cudnnConvolutionBwdFilterAlgoPerf_t *p, void *ws, size_t wsn) {
    (void)h, (void)d, (void)ws, (void)wsn, (void)xd, (void)x, (void)dyd, (void)dy, (void)dwd, (void)dw;
    PERF_ROWS(2, n, got, p);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t d, const cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t a, size_t *n) {
    (void)h, (void)x, (void)w, (void)d, (void)y;
    *n = row_of(0, (int)a)->ws;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t d, const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t a, size_t *n) {
    (void)h, (void)w, (void)dy, (void)d, (void)dx;
    *n = row_of(1, (int)a)->ws;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t d, const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t a, size_t *n) {
    (void)h, (void)x, (void)dy, (void)d, (void)dw;
    *n = row_of(2, (int)a)->ws;
    return CUDNN_STATUS_SUCCESS;
}

/* One run of direction dir with algorithm a: buffers and workspace checked, the status set for a. */
static cudnnStatus_t run(int dir, int a, void *ws, size_t wsn) {
    const row *r = row_of(dir, a);
    if (r->ws) {
        ck_assert_msg(wsn >= r->ws, "direction %d algorithm %d run with a %zu-byte workspace, needs %zu", dir, a, wsn, r->ws);
        mock_check_dev(ws, r->ws, "convolution workspace");
    }
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    if (tot - fr > peak_used) peak_used = tot - fr;
    runs[dir]++, last_algo[dir] = a;
    return r->runs;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *al, const cudnnTensorDescriptor_t xd, const void *x,
                                      const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t d,
                                      cudnnConvolutionFwdAlgo_t a, void *ws, size_t wsn, const void *be,
                                      const cudnnTensorDescriptor_t yd, void *y) {
    (void)h, (void)al, (void)d, (void)be;
    mock_check_dev(x, nx(xd), "forward x"), mock_check_dev(w, nw(wd), "forward w"), mock_check_dev(y, nx(yd), "forward y");
    return run(0, (int)a, ws, wsn);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *al, const cudnnFilterDescriptor_t wd, const void *w,
                                           const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t d,
                                           cudnnConvolutionBwdDataAlgo_t a, void *ws, size_t wsn, const void *be,
                                           const cudnnTensorDescriptor_t dxd, void *dx) {
    (void)h, (void)al, (void)d, (void)be;
    mock_check_dev(w, nw(wd), "backward data w"), mock_check_dev(dy, nx(dyd), "backward data dy");
    mock_check_dev(dx, nx(dxd), "backward data dx");
    return run(1, (int)a, ws, wsn);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *al, const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t d,
                                             cudnnConvolutionBwdFilterAlgo_t a, void *ws, size_t wsn, const void *be,
                                             const cudnnFilterDescriptor_t dwd, void *dw) {
    (void)h, (void)al, (void)d, (void)be;
    mock_check_dev(x, nx(xd), "backward filter x"), mock_check_dev(dy, nx(dyd), "backward filter dy");
    mock_check_dev(dw, nw(dwd), "backward filter dw");
    return run(2, (int)a, ws, wsn);
}

/* layers.cu's, which layers_conv.cu calls (fp32 here: no bf16 widening). */
int gpu_malloc(void **p, size_t nbytes, const char *what, char *err, size_t errlen) {
    if (cudaMalloc(p, nbytes) != cudaSuccess) return seterr(err, errlen, "cudaMalloc for %s", what), -1;
    return 0;
}
void gpu_ctx_reserve(gpu_ctx *c, size_t nbytes) {
    if (nbytes > c->ws_need) c->ws_need = nbytes;
}
void gpu_bf16_to_f32(gpu_ctx *c, float *dst, const void *src, size_t n) {
    (void)c, (void)dst, (void)src, (void)n;
    DIE("mock: gpu_bf16_to_f32 in an fp32 test");
}

void gpu_from_nhwc_f32(gpu_ctx *c, float *dst, const void *src, int rows, int ch, int hw) {
    (void)c, (void)dst, (void)src, (void)rows, (void)ch, (void)hw;
    DIE("mock: gpu_from_nhwc_f32 in an NCHW test");
}

/* ---- the tests -------------------------------------------------------------------------------- */

typedef struct {
    gpu_ctx c;
    gpu_conv_layer l;
    void *x, *w, *y, *dx;
    float *dw;
} fixture;

/* A training 3x3/1 convolution (8, 16, 12, 12) -> 16 channels with its buffers, in a context of
 * the given mode, tuned; returns gpu_conv_tune's status, err set. */
static int tune_ctx(fixture *f, int heuristic, char *err, size_t errlen);
static int tune(fixture *f, int heuristic, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    return tune_ctx(f, heuristic, err, errlen);
}
/* tune on a fixture whose context fields the caller may have set (f zeroed before). */
static int tune_ctx(fixture *f, int heuristic, char *err, size_t errlen) {
    f->c.prec = GPU_FP32;
    f->c.act_bytes = sizeof(float);
    f->c.heuristic = heuristic;
    ck_assert(cudaStreamCreate(&f->c.stream) == cudaSuccess);
    ck_assert_int_eq(gpu_conv_init(&f->l, &f->c, "conv", 8, 16, 12, 12, 16, 3, 1, 1, GPU_TRAIN, 1, err, errlen), 0);
    const size_t n = (size_t)8 * 16 * 12 * 12 * sizeof(float);
    ck_assert(cudaMalloc(&f->x, n) == cudaSuccess && cudaMalloc(&f->y, n) == cudaSuccess && cudaMalloc(&f->dx, n) == cudaSuccess);
    ck_assert(cudaMalloc(&f->w, 16 * 16 * 9 * sizeof(float)) == cudaSuccess);
    ck_assert(cudaMalloc((void **)&f->dw, 16 * 16 * 9 * sizeof(float)) == cudaSuccess);
    return gpu_conv_tune(&f->l, &f->c, f->x, f->w, f->y, f->dx, f->dw, err, errlen);
}

static void fixture_free(fixture *f) {
    gpu_conv_free(&f->l);
    cudaFree(f->x), cudaFree(f->y), cudaFree(f->dx), cudaFree(f->w), cudaFree(f->dw), cudaFree(f->c.find_ws);
    cudaStreamDestroy(f->c.stream);
}

START_TEST(test_heuristic_runs_each_choice) {
    char err[ERRLEN] = "";
    fixture f;
    reset_rows();
    ck_assert_msg(tune(&f, 1, err, sizeof err) == 0, "%s", err);
    /* N18: no 1 GiB tuning workspace (kept until gpu_ctx_commit): the buffers (~300 KiB) and the
     * 1 MiB the chosen algorithms need, in use after tuning and at most while tuning. */
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    ck_assert_msg(tot - fr < ((size_t)4 << 20), "after heuristic tuning %zu bytes of device memory in use (a 1 GiB workspace?)", tot - fr);
    for (int d = 0; d < NDIR; d++) ck_assert_msg(runs[d] == 1, "direction %d: run %d times while tuning (want 1)", d, runs[d]);
    ck_assert_int_eq(f.l.fwd_algo, 2);
    ck_assert_int_eq(f.l.bwd_data_algo, 2);
    ck_assert_int_eq(f.l.bwd_filter_algo, 2);
    ck_assert_uint_eq(f.c.ws_need, (size_t)1 << 20);
    ck_assert_msg(peak_used < ((size_t)4 << 20), "heuristic tuning had %zu bytes of device memory in use (a 1 GiB workspace?)", peak_used);
    printf("  heuristic: each direction's first row run once (algorithm 2), peak device memory %.2f MiB\n", peak_used / 1048576.0);
    fixture_free(&f);
}
END_TEST

START_TEST(test_heuristic_failing_row) {
    char err[ERRLEN] = "";
    fixture f;
    reset_rows();
    rows[0][0].runs = CUDNN_STATUS_EXECUTION_FAILED; /* forward: listed SUCCESS, fails to run */
    rows[2][0].runs = CUDNN_STATUS_NOT_SUPPORTED;    /* backward filter too */
    ck_assert_msg(tune(&f, 1, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(f.l.fwd_algo == 1, "forward took algorithm %d, whose row fails to run (want the next row, 1)", (int)f.l.fwd_algo);
    ck_assert_int_eq(f.l.bwd_filter_algo, 1);
    ck_assert_int_eq(f.l.bwd_data_algo, 2);
    ck_assert_int_eq(runs[0], 2);
    ck_assert_int_eq(runs[1], 1);
    ck_assert_int_eq(runs[2], 2);
    ck_assert_uint_eq(f.l.fwd_ws, 0);
    ck_assert_uint_eq(f.c.ws_need, (size_t)1 << 20); /* the failed rows' workspace is not reserved */
    printf("  heuristic: forward and backward filter rows 0 fail to run: took the next rows (algorithm 1)\n");
    fixture_free(&f);

    /* Every row of backward data fails: an error naming the layer, the direction, what was tried. */
    reset_rows();
    for (int i = 0; i < NROWS; i++) rows[1][i].runs = CUDNN_STATUS_EXECUTION_FAILED;
    ck_assert_int_ne(tune(&f, 1, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "layer conv") && strstr(err, "backward data") && strstr(err, "tried FFT:") &&
                      strstr(err, "ALGO_1:") && strstr(err, "ALGO_0:"),
                  "%s", err);
    printf("  heuristic, no row runs: %s\n", err);
    fixture_free(&f);
}
END_TEST

START_TEST(test_find_unchanged) {
    char err[ERRLEN] = "";
    fixture f;
    reset_rows();
    rows[0][0].runs = CUDNN_STATUS_EXECUTION_FAILED; /* Find would have listed it as failed; here only runs are counted */
    ck_assert_msg(tune(&f, 0, err, sizeof err) == 0, "%s", err);
    for (int d = 0; d < NDIR; d++) ck_assert_msg(runs[d] == 0, "find mode ran direction %d again (%d)", d, runs[d]);
    ck_assert_int_eq(f.l.fwd_algo, 2); /* Find's first usable row: Find has run it */
    ck_assert_msg(f.c.find_ws_nbytes >= ((size_t)1 << 20), "find mode: tuning workspace %zu", f.c.find_ws_nbytes);
    fixture_free(&f);
}
END_TEST

/* N11: a non-deterministic row listed first (the fastest) is passed over for the first
 * deterministic one unless c->nondet (DSGD_CUDNN_DETERMINISTIC=0, find mode's default). */
START_TEST(test_nondeterministic) {
    char err[ERRLEN] = "";
    for (int nd = 0; nd < 2; nd++)
        for (int heur = 0; heur < 2; heur++) {
            fixture f;
            reset_rows();
            for (int d = 0; d < NDIR; d++) rows[d][0].nondet = 1;
            memset(&f, 0, sizeof f);
            f.c.nondet = nd;
            ck_assert_msg(tune_ctx(&f, heur, err, sizeof err) == 0, "%s", err);
            const int want = nd ? 2 : 1; /* (int) casts below: cuDNN enum types */
            ck_assert_msg((int)f.l.fwd_algo == want && (int)f.l.bwd_data_algo == want && (int)f.l.bwd_filter_algo == want,
                          "nondet %d, %s: took %d %d %d, want %d", nd, heur ? "heuristic" : "find", (int)f.l.fwd_algo,
                          (int)f.l.bwd_data_algo, (int)f.l.bwd_filter_algo, want);
            printf("  %s, nondet %d: the non-deterministic first row %s (algorithm %d)\n", heur ? "heuristic" : "find", nd,
                   nd ? "taken" : "passed over", want);
            fixture_free(&f);
        }
}
END_TEST

START_TEST(test_memo) {
    char err[ERRLEN] = "";
    fixture f;
    reset_rows();
    rows[0][0].runs = CUDNN_STATUS_EXECUTION_FAILED;
    ck_assert_msg(tune(&f, 1, err, sizeof err) == 0, "%s", err);
    const int r0 = runs[0];
    gpu_conv_layer l2;
    ck_assert_int_eq(gpu_conv_init(&l2, &f.c, "conv2", 8, 16, 12, 12, 16, 3, 1, 1, GPU_TRAIN, 1, err, sizeof err), 0);
    ck_assert_msg(gpu_conv_tune(&l2, &f.c, f.x, f.w, f.y, f.dx, f.dw, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(runs[0], r0);
    ck_assert_int_eq(l2.fwd_algo, 1);
    gpu_conv_free(&l2);
    fixture_free(&f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("conv_tune");
    TCase *tc = tcase_create("conv_tune");
    tcase_add_test(tc, test_heuristic_runs_each_choice);
    tcase_add_test(tc, test_heuristic_failing_row);
    tcase_add_test(tc, test_find_unchanged);
    tcase_add_test(tc, test_nondeterministic);
    tcase_add_test(tc, test_memo);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
