/* gpucomm.cu — cuda/gpucomm.h: NCCL for the all-reduce (built with NCCL=1: -DDSGD_NCCL=1 and
 * nccl.h) and the device-side scaling of a CUDA-aware MPI sum (always).
 *
 * NCCL is opened with dlopen, not linked (gpucomm.h, "Loading"): nccl.h supplies the types and
 * the prototypes, whose types (decltype) give the function pointers filled by dlsym, so a call
 * here is checked against the header as a linked call would be.
 *
 * Waiting. The communicator is non-blocking (ncclConfig_t.blocking = 0, NCCL >= 2.14): NCCL calls
 * may return ncclInProgress, after which ncclCommGetAsyncError must report ncclSuccess before the
 * next NCCL call (NCCL user guide, "Fault Tolerance"); an all-reduce has finished when the
 * model's stream is idle (cudaStreamQuery). Both are polled: yield for the first millisecond,
 * then naps doubling from 2 µs to 200 µs (src/comm/comm.c's waits do the same, so that ranks
 * sharing cores leave them to each other). */
#include "gpucomm.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "internal.h"

#if DSGD_NCCL
#include <nccl.h>
#endif

/* ---- scaling (CUDA-aware MPI) and the GPU's identity ----------------------------------------- */

#ifdef __CUDACC__
__global__ void gpucomm_scale_kernel(float *x, size_t n, float s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= s;
}

static void scale_launch(float *buf, size_t n, float s, cudaStream_t st) {
    const size_t threads = 256, want = (n + threads - 1) / threads;
    const unsigned blocks = (unsigned)(want < 4096 ? want : 4096);
    gpucomm_scale_kernel<<<blocks, (unsigned)threads, 0, st>>>(buf, n, s);
}
#else
/* g++ over the CPU stand-ins (test/gpu/mock, Makefile build/mock/gpucomm.o): the kernel's twin. */
extern "C" void mock_gpucomm_scale(float *buf, size_t n, float s, cudaStream_t st);
/* mock_cuda.c: fn(arg) in st's order (at once on the compute stream, queued on a side stream). */
extern "C" void mock_stream_launch(cudaStream_t st, void (*fn)(void *), void *arg, const char *what);
static void scale_launch(float *buf, size_t n, float s, cudaStream_t st) { mock_gpucomm_scale(buf, n, s, st); }
#endif

void gpucomm_scale(gpu_model *g, float *buf, size_t n, float s) {
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(gpu_model_device(g)), "gpucomm_scale");
    cudaStream_t st = gpu_model_stream(g);
    scale_launch(buf, n, s, st);
    CUDA_CHECK(cudaGetLastError(), "gpucomm_scale (launch)");
    CUDA_CHECK(cudaStreamSynchronize(st), "gpucomm_scale");
}

int gpucomm_gpu_id(gpu_model *g, char *buf, size_t n, char *err, size_t errlen) {
    const int dev = gpu_model_device(g);
    char id[64] = "";
    cudaError_t e = cudaDeviceGetPCIBusId(id, (int)sizeof id, dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "cudaDeviceGetPCIBusId(device %d): %s", dev, cudaGetErrorString(e));
        return EXIT_RUNTIME;
    }
    snprintf(buf, n, "%s", id);
    return 0;
}

#if DSGD_NCCL
/* ==== NCCL ==================================================================================== */

static_assert(sizeof(ncclUniqueId) == GPUCOMM_ID_BYTES, "GPUCOMM_ID_BYTES must be NCCL_UNIQUE_ID_BYTES");

/* ---- polling ------------------------------------------------------------------------------- */

typedef struct {
    double t0;
    long nap_ns;
} poller;

static poller poll_start(void) { return poller{wall_time(), 2000L}; }

/* Seconds since poll_start. */
static double poll_elapsed(const poller *p) { return wall_time() - p->t0; }

/* Give the core away before the next test: yield during the first millisecond, then nap. */
static void poll_pause(poller *p) {
    if (poll_elapsed(p) < 1e-3) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, p->nap_ns};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    p->nap_ns = p->nap_ns * 2 < 200000L ? p->nap_ns * 2 : 200000L;
}

/* Oldest NCCL with what is used here: ncclCommInitRankConfig with blocking = 0 and
 * ncclCommFinalize (2.14), ncclAvg (2.10), ncclGetLastError (2.13). */
#define NCCL_MIN_VERSION NCCL_VERSION(2, 14, 0)

#define NCCL_FUNCTIONS(X)                                                                          \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommGetAsyncError)        \
    X(ncclAllReduce) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) X(ncclGetErrorString) \
    X(ncclGetLastError)

/* The library, once opened: one pointer per function, typed by nccl.h's prototype. */
static struct {
    int state; /* 0 not tried, 1 loaded, -1 failed (err holds why) */
    void *handle;
    int version;
    char path[512];
    char err[ERRLEN];
#define NCCL_POINTER(f) decltype(&::f) f;
    NCCL_FUNCTIONS(NCCL_POINTER)
#undef NCCL_POINTER
} nccl;

/* "2.28.9" from NCCL_VERSION_CODE's encoding (major*1000 + minor*100 + patch up to 2.8, major*10000
 * + minor*100 + patch after). */
static void version_text(int v, char *buf, size_t n) {
    if (v >= 10000) snprintf(buf, n, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
    else snprintf(buf, n, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

/* Where libnccl.so.2 is looked for: the loader's path (LD_LIBRARY_PATH, this executable's
 * RUNPATH, ld.so.cache), then the directory the build found it in. The environment variable
 * DSGD_NCCL_LIBRARY (a path) replaces both: that file only (another NCCL build, or the CPU
 * stand-in build/mock/libnccl.so.2 of test/gpu/mock). */
static const char *const nccl_names[] = {
    "libnccl.so.2",
#ifdef DSGD_NCCL_LIBDIR
    DSGD_NCCL_LIBDIR "/libnccl.so.2",
#endif
};

int gpucomm_nccl_built(void) { return 1; }

int gpucomm_load(char *err, size_t errlen) {
    if (nccl.state == 0) {
        char tried[ERRLEN] = "";
        size_t off = 0;
        const char *forced = getenv("DSGD_NCCL_LIBRARY");
        const char *const *names = nccl_names;
        size_t n_names = sizeof nccl_names / sizeof nccl_names[0];
        if (forced && *forced) names = &forced, n_names = 1;
        for (size_t i = 0; i < n_names && !nccl.handle; i++) {
            nccl.handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            if (!nccl.handle && off < sizeof tried) {
                const char *why = dlerror();
                off += (size_t)snprintf(tried + off, sizeof tried - off, "%s%s", off ? "; " : "", why ? why : names[i]);
            }
        }
        if (!nccl.handle && forced && *forced && off < sizeof tried)
            snprintf(tried + off, sizeof tried - off, " (DSGD_NCCL_LIBRARY)");
        if (!nccl.handle) {
            snprintf(nccl.err, sizeof nccl.err,
                     "cannot load the NCCL library (%.600s); install NCCL 2.14 or later (Debian/Ubuntu: libnccl2; "
                     "pip: nvidia-nccl-cu12 or -cu13, as PyTorch has) and put the directory of libnccl.so.2 on "
                     "LD_LIBRARY_PATH, or use comm = \"mpi\"",
                     tried);
            nccl.state = -1;
        } else {
            const char *missing = NULL;
#define NCCL_SYM(f)                                                                                \
    if (!missing && !(nccl.f = (decltype(nccl.f))dlsym(nccl.handle, #f))) missing = #f;
            NCCL_FUNCTIONS(NCCL_SYM)
#undef NCCL_SYM
            Dl_info info;
            if (dladdr((void *)nccl.ncclGetVersion, &info) && info.dli_fname)
                snprintf(nccl.path, sizeof nccl.path, "%s", info.dli_fname);
            else snprintf(nccl.path, sizeof nccl.path, "libnccl.so.2");
            if (!missing && nccl.ncclGetVersion(&nccl.version) != ncclSuccess) nccl.version = 0;
            char v[32];
            version_text(nccl.version, v, sizeof v);
            if (missing) {
                snprintf(nccl.err, sizeof nccl.err, "%s has no %s: NCCL 2.14 or later is needed", nccl.path, missing);
                nccl.state = -1;
            } else if (nccl.version < NCCL_MIN_VERSION) {
                snprintf(nccl.err, sizeof nccl.err, "%s is NCCL %s: NCCL 2.14 or later is needed (non-blocking communicators)",
                         nccl.path, v);
                nccl.state = -1;
            } else nccl.state = 1;
#ifndef __CUDACC__
            /* Over the CPU stand-ins (test/gpu/mock): the mock NCCL runs a collective in its
             * stream's order through the mock runtime's queue, as a GPU does. */
            void (*set_launcher)(void *) = (void (*)(void *))dlsym(nccl.handle, "mock_nccl_set_launcher");
            if (set_launcher) set_launcher((void *)&mock_stream_launch);
#endif
        }
    }
    if (nccl.state > 0) return 0;
    seterr(err, errlen, "%s", nccl.err);
    return EXIT_RUNTIME;
}

void gpucomm_version(char *buf, size_t n) {
    char err[ERRLEN], v[32];
    if (gpucomm_load(err, sizeof err)) {
        snprintf(buf, n, "NCCL: not usable: %s", err);
        return;
    }
    version_text(nccl.version, v, sizeof v);
    snprintf(buf, n, "NCCL %s (%s; built against %d.%d.%d)", v, nccl.path, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}

/* "ncclRemoteError (remote process exited or there was a network error): <NCCL's last error>". */
static const char *nccl_status(ncclResult_t r, ncclComm_t comm, char *buf, size_t n) {
    const char *last = nccl.ncclGetLastError(comm);
    snprintf(buf, n, "%s%s%s", nccl.ncclGetErrorString(r), last && *last ? ": " : "", last && *last ? last : "");
    return buf;
}

/* Wait while ncclCommGetAsyncError says ncclInProgress. Returns ncclSuccess, the error, or
 * ncclInProgress if timeout_s passed first. */
static ncclResult_t wait_state(ncclComm_t comm, double timeout_s) {
    poller p = poll_start();
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t r = nccl.ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) return r;
        if (state != ncclInProgress) return state;
        if (poll_elapsed(&p) > timeout_s) return ncclInProgress;
        poll_pause(&p);
    }
}

struct gpucomm {
    ncclComm_t comm; /* NULL once aborted */
    gpu_model *g;
    int nranks, rank;
    double timeout_s;
    /* The all-reduce per gradient group during the backward pass (gpucomm_grads_begin/_end): */
    cudaStream_t cs;     /* the communication stream (non-blocking), beside the model's */
    cudaEvent_t reduced; /* cs: every group's all-reduce of the step done */
    float *grads;        /* the device gradient of the step armed, NULL when none */
    cudaEvent_t computed; /* the model's event of the last group the hook saw */
    int n_started, n_groups, status;
    char err[ERRLEN];    /* status != GPUCOMM_OK: why */
};

int gpucomm_unique_id(void *id, char *err, size_t errlen) {
    if (gpucomm_load(err, errlen)) return EXIT_RUNTIME;
    ncclUniqueId u;
    ncclResult_t r = nccl.ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        char b[ERRLEN];
        seterr(err, errlen, "ncclGetUniqueId: %s", nccl_status(r, NULL, b, sizeof b));
        return EXIT_RUNTIME;
    }
    memcpy(id, &u, sizeof u);
    return 0;
}

gpucomm *gpucomm_create(gpu_model *g, int nranks, int rank, const void *id, double timeout_s, char *err,
                        size_t errlen) {
    if (gpucomm_load(err, errlen)) return NULL;
    const int dev = gpu_model_device(g);
    cudaError_t e = cudaSetDevice(dev); /* NCCL binds the communicator to the current device */
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "cudaSetDevice(%d) before ncclCommInitRankConfig: %s", dev, cudaGetErrorString(e));
        return NULL;
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    char b[ERRLEN];
    ncclResult_t r = nccl.ncclCommInitRankConfig(&comm, nranks, u, rank, &config);
    if (r == ncclSuccess || r == ncclInProgress) r = wait_state(comm, timeout_s);
    if (r != ncclSuccess) {
        if (r == ncclInProgress)
            seterr(err, errlen,
                   "ncclCommInitRankConfig (%d ranks, rank %d, CUDA device %d) did not complete within comm_timeout_s = %g s: "
                   "a worker stopped or cannot reach the others (NCCL_DEBUG=WARN shows NCCL's view)",
                   nranks, rank, dev, timeout_s);
        else
            seterr(err, errlen, "ncclCommInitRankConfig (%d ranks, rank %d, CUDA device %d): %s", nranks, rank, dev,
                   nccl_status(r, comm, b, sizeof b));
        if (comm) nccl.ncclCommAbort(comm);
        return NULL;
    }
    gpucomm *c = (gpucomm *)calloc(1, sizeof *c);
    if (!c) DIE("out of memory allocating the NCCL communicator's state");
    c->comm = comm, c->g = g, c->nranks = nranks, c->rank = rank, c->timeout_s = timeout_s;
    /* The stream and event of the per-group all-reduce, made here: a step makes none. */
    e = cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->reduced, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "cudaStreamCreateWithFlags / cudaEventCreateWithFlags for the NCCL stream (CUDA device %d): %s", dev,
               cudaGetErrorString(e));
        gpucomm_free(c);
        return NULL;
    }
    return c;
}

/* "ncclAllReduce(n floats = x MB, ...) over p ranks (rank r)" into what (for errors). */
static void allreduce_what(const gpucomm *c, size_t n, char *what, size_t len) {
    snprintf(what, len, "ncclAllReduce(%zu floats = %.1f MB, ncclFloat32, ncclAvg, in place) over %d ranks (rank %d)", n,
             (double)n * sizeof(float) / 1e6, c->nranks, c->rank);
}

/* Enqueue ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg) on st, waiting (bounded by timeout_s)
 * while NCCL says it is in progress: enqueued once ncclCommGetAsyncError says ncclSuccess. Returns
 * GPUCOMM_OK, GPUCOMM_TIMEOUT (err not set) or GPUCOMM_FAILED with err. */
static int enqueue_allreduce(gpucomm *c, float *buf, size_t n, cudaStream_t st, char *err, size_t errlen) {
    char what[160], b[ERRLEN];
    ncclResult_t r = nccl.ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg, c->comm, st);
    if (r == ncclInProgress) r = wait_state(c->comm, c->timeout_s);
    if (r == ncclInProgress) return GPUCOMM_TIMEOUT;
    if (r == ncclSuccess) return GPUCOMM_OK;
    allreduce_what(c, n, what, sizeof what);
    seterr(err, errlen, "%s: %s", what, nccl_status(r, c->comm, b, sizeof b));
    return GPUCOMM_FAILED;
}

/* Poll until st is idle (its all-reduces done), watching ncclCommGetAsyncError, from p's start
 * up to timeout_s; ev (NULL: none): an event whose completion time goes to *t_ev (left as it is if
 * not seen complete). Returns GPUCOMM_OK, GPUCOMM_TIMEOUT (err not set) or GPUCOMM_FAILED with err
 * (what: the operation, for the message). */
static int wait_stream(gpucomm *c, cudaStream_t st, cudaEvent_t ev, double *t_ev, poller *p, const char *what, char *err,
                       size_t errlen) {
    char b[ERRLEN];
    for (;;) {
        if (ev && *t_ev < 0) {
            if (cudaEventQuery(ev) == cudaSuccess) *t_ev = wall_time();
            else cudaGetLastError(); /* "not ready" (a failure shows in the stream's query) */
        }
        cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess) return GPUCOMM_OK;
        if (e != cudaErrorNotReady) {
            cudaGetLastError();
            seterr(err, errlen, "%s: the stream failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
            return GPUCOMM_FAILED;
        }
        /* "Not ready" is no failure, but the runtime keeps it as its last error, as it does
         * cudaEventQuery's: clear it, or the next kernel launch's check (the SGD update's
         * CUDA_CHECK(cudaGetLastError())) stops the run. */
        cudaGetLastError();
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = nccl.ncclCommGetAsyncError(c->comm, &state);
        if (r == ncclSuccess && state != ncclSuccess && state != ncclInProgress) r = state;
        if (r != ncclSuccess) {
            seterr(err, errlen, "%s: %s", what, nccl_status(r, c->comm, b, sizeof b));
            return GPUCOMM_FAILED;
        }
        if (poll_elapsed(p) > c->timeout_s) return GPUCOMM_TIMEOUT;
        poll_pause(p);
    }
}

/* A failed or timed-out all-reduce: the timeout's message, and the communicator aborted (which
 * stops NCCL's kernels and proxy threads); the caller stops the run. */
static int give_up(gpucomm *c, int status, const char *what, char *err, size_t errlen) {
    if (status == GPUCOMM_OK) return status;
    if (status == GPUCOMM_TIMEOUT)
        seterr(err, errlen, "%s: not complete after comm_timeout_s = %g s; NCCL communicator aborted", what, c->timeout_s);
    nccl.ncclCommAbort(c->comm);
    c->comm = NULL;
    return status;
}

int gpucomm_allreduce_mean(gpucomm *c, float *buf, size_t n, char *err, size_t errlen) {
    if (!c->comm) return seterr(err, errlen, "the NCCL communicator was aborted by an earlier failure"), GPUCOMM_FAILED;
    if (n == 0) return GPUCOMM_OK;
    CUDA_CHECK(cudaSetDevice(gpu_model_device(c->g)), "gpucomm_allreduce_mean");
    cudaStream_t st = gpu_model_stream(c->g);
    char what[160];
    allreduce_what(c, n, what, sizeof what);
    poller p = poll_start();
    int status = enqueue_allreduce(c, buf, n, st, err, errlen);
    if (status == GPUCOMM_OK) status = wait_stream(c, st, NULL, NULL, &p, what, err, errlen);
    return give_up(c, status, what, err, errlen);
}

/* gpu_group_hook of an armed step: group j's all-reduce on the communication stream, behind the
 * event that says the backward pass has produced it. After a failure the later groups are not
 * started (gpucomm_grads_end reports it). */
static void group_hook(void *ctx, int j, int n_groups, size_t lo, size_t hi, void *computed) {
    gpucomm *c = (gpucomm *)ctx;
    c->n_groups = n_groups;
    c->computed = (cudaEvent_t)computed;
    if (c->status != GPUCOMM_OK || !c->grads) return;
    CUDA_CHECK(cudaStreamWaitEvent(c->cs, (cudaEvent_t)computed, 0), "NCCL stream waits for a gradient group");
    c->status = enqueue_allreduce(c, c->grads + lo, hi - lo, c->cs, c->err, sizeof c->err);
    if (c->status == GPUCOMM_OK) c->n_started++;
    else if (c->status == GPUCOMM_TIMEOUT) {
        char what[160];
        allreduce_what(c, hi - lo, what, sizeof what);
        seterr(c->err, sizeof c->err, "%s (gradient group %d of %d): NCCL still busy after comm_timeout_s = %g s", what, j + 1,
               n_groups, c->timeout_s);
    }
}

int gpucomm_grads_begin(gpucomm *c, float *grads, char *err, size_t errlen) {
    if (!c->comm) return seterr(err, errlen, "the NCCL communicator was aborted by an earlier failure"), GPUCOMM_FAILED;
    c->grads = grads;
    c->n_started = c->n_groups = 0;
    c->status = GPUCOMM_OK;
    c->err[0] = '\0';
    gpu_model_set_group_hook(c->g, group_hook, c);
    return GPUCOMM_OK;
}

int gpucomm_grads_end(gpucomm *c, size_t n, double *t_computed, char *err, size_t errlen) {
    *t_computed = -1.0;
    if (!c->grads) DIE("gpucomm_grads_end without gpucomm_grads_begin");
    c->grads = NULL;
    if (!c->comm) return seterr(err, errlen, "the NCCL communicator was aborted by an earlier failure"), GPUCOMM_FAILED;
    CUDA_CHECK(cudaSetDevice(gpu_model_device(c->g)), "gpucomm_grads_end");
    char what[200];
    snprintf(what, sizeof what, "the all-reduce of the gradient (%zu floats = %.1f MB, %d groups, ncclAvg) over %d ranks (rank %d)",
             n, (double)n * sizeof(float) / 1e6, c->n_groups, c->nranks, c->rank);
    int status = c->status;
    if (status != GPUCOMM_OK) { /* an enqueue failed or timed out (c->err says which): the run stops */
        seterr(err, errlen, "%s", c->err);
        nccl.ncclCommAbort(c->comm);
        c->comm = NULL;
        return status;
    }
    if (c->n_groups < 1 || c->n_started != c->n_groups)
        DIE("gpucomm_grads_end: %d of %d gradient groups all-reduced: the step did not call the group hook for every group",
            c->n_started, c->n_groups);
    poller p = poll_start();
    CUDA_CHECK(cudaEventRecord(c->reduced, c->cs), "gpucomm_grads_end (all-reduces done)");
    status = wait_stream(c, c->cs, c->computed, t_computed, &p, what, err, errlen);
    /* The update (and the next step's backward pass) after every group's all-reduce. */
    if (status == GPUCOMM_OK)
        CUDA_CHECK(cudaStreamWaitEvent(gpu_model_stream(c->g), c->reduced, 0), "gpucomm_grads_end (the update waits)");
    return give_up(c, status, what, err, errlen);
}

void gpucomm_free(gpucomm *c) {
    if (!c) return;
    if (c->comm) {
        if (cudaSetDevice(gpu_model_device(c->g)) != cudaSuccess) cudaGetLastError();
        /* At exit every rank has passed its last collective: a finalize that has not completed
         * within a few seconds will not (a peer is gone), and comm_timeout_s may be minutes. */
        const double limit = c->timeout_s < GPUCOMM_FINALIZE_S ? c->timeout_s : GPUCOMM_FINALIZE_S;
        ncclResult_t r = nccl.ncclCommFinalize(c->comm);
        if (r == ncclSuccess || r == ncclInProgress) r = wait_state(c->comm, limit);
        if (r == ncclSuccess) r = nccl.ncclCommDestroy(c->comm);
        if (r != ncclSuccess) {
            char b[ERRLEN], why[96];
            snprintf(why, sizeof why, "ncclCommFinalize did not complete within %g s", limit);
            fprintf(stderr, "dsgd-run: warning: rank %d: releasing the NCCL communicator: %s; aborting it\n", c->rank,
                    r == ncclInProgress ? why : nccl_status(r, c->comm, b, sizeof b));
            nccl.ncclCommAbort(c->comm);
        }
    }
    if (c->reduced) cudaEventDestroy(c->reduced);
    if (c->cs) cudaStreamDestroy(c->cs);
    free(c);
}

#else /* !DSGD_NCCL */
/* ==== built without NCCL: comm = "nccl" says how to get it =================================== */

#define NCCL_NOT_BUILT                                                                             \
    "comm = \"nccl\" needs NCCL: this dsgd-run was built without it (nccl.h was not found); "      \
    "install NCCL's headers (libnccl-dev, or nccl.h under CUDA_HOME/include) and rebuild with "   \
    "`make CUDA=1` (or use comm = \"mpi\")"

struct gpucomm {
    int unused;
};

int gpucomm_nccl_built(void) { return 0; }
void gpucomm_version(char *buf, size_t n) { snprintf(buf, n, "NCCL not built (nccl.h not found at build time)"); }
int gpucomm_load(char *err, size_t errlen) {
    seterr(err, errlen, NCCL_NOT_BUILT);
    return EXIT_RUNTIME;
}
int gpucomm_unique_id(void *id, char *err, size_t errlen) {
    return gpucomm_load(err, errlen);
}
gpucomm *gpucomm_create(gpu_model *g, int nranks, int rank, const void *id, double timeout_s, char *err,
                        size_t errlen) {
    gpucomm_load(err, errlen);
    return NULL;
}
/* Unreachable without a communicator. */
int gpucomm_allreduce_mean(gpucomm *c, float *buf, size_t n, char *err, size_t errlen) {
    DIE("gpucomm_allreduce_mean: " NCCL_NOT_BUILT);
}
int gpucomm_grads_begin(gpucomm *c, float *grads, char *err, size_t errlen) {
    DIE("gpucomm_grads_begin: " NCCL_NOT_BUILT);
}
int gpucomm_grads_end(gpucomm *c, size_t n, double *t_computed, char *err, size_t errlen) {
    DIE("gpucomm_grads_end: " NCCL_NOT_BUILT);
}
void gpucomm_free(gpucomm *c) {
    if (c) DIE("gpucomm_free: " NCCL_NOT_BUILT);
}
#endif
