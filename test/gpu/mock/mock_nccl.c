/* mock_nccl.c — a one-rank NCCL on the CPU, built as build/mock/libnccl.so.2 and opened by
 * cuda/gpucomm.cu's dlopen (DSGD_NCCL_LIBRARY=.../build/mock/libnccl.so.2), so that gpucomm.cu,
 * compiled by g++ over the CPU stand-ins (build/mock/gpucomm.o), runs its whole path — load,
 * version check, communicator start, all-reduce, release — in `make check`.
 *
 * It behaves as a non-blocking communicator does (NCCL user guide, "Fault Tolerance"): every call
 * that starts something returns ncclInProgress, and ncclCommGetAsyncError answers ncclInProgress
 * twice before ncclSuccess, so gpucomm.cu's wait loops go round. One rank only (nranks 1, rank 0:
 * anything else is ncclInvalidUsage); ncclAllReduce(float, ncclAvg) multiplies by 1/1 = 1.0f,
 * in place or into recvbuff, in its stream's order: gpucomm.cu over the mock hands it the mock
 * runtime's mock_stream_launch (mock_nccl_set_launcher), which runs it at once on the model's
 * stream and queues it on a side stream (the NCCL stream of the per-group all-reduce), dying if
 * that stream does not wait for the compute work before it; without a launcher it runs at once.
 * The stream then answers "not ready" to cudaStreamQuery two times in three (mock_cuda.c), as a
 * busy GPU. MOCK_NCCL_SCALE=s (a float; default 1) in the environment at the call makes the
 * all-reduce multiply by s instead, as if the other ranks held other values (s = 2: one peer
 * holding 3x), so that a test sees whether, and on which data, it ran.
 *
 * MOCK_NCCL_ALLREDUCE_HANG=1: an all-reduce never completes (ncclCommGetAsyncError stays
 * ncclInProgress), as with a peer that is gone.
 * MOCK_NCCL_FINALIZE_HANG=1 in the environment: ncclCommFinalize never completes (a peer that is
 * gone), so gpucomm_free must give up after GPUCOMM_FINALIZE_S and abort. mock_nccl_counts()
 * tells a test how many communicators were aborted and destroyed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

struct ncclComm {
    int pending;        /* ncclInProgress answers left before the last call completes */
    int finalized;
};

static char last_error[256];
static int n_aborted, n_destroyed;

/* For tests: communicators aborted and destroyed so far. */
void mock_nccl_counts(int *aborted, int *destroyed) {
    *aborted = n_aborted;
    *destroyed = n_destroyed;
}

static ncclResult_t fail(ncclResult_t r, const char *msg) {
    snprintf(last_error, sizeof last_error, "mock NCCL: %s", msg);
    return r;
}

ncclResult_t ncclGetVersion(int *version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "mock nccl one rank");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config) {
    (void)commId;
    *comm = NULL;
    if (nranks != 1 || rank != 0) return fail(ncclInvalidUsage, "one rank only (nranks 1, rank 0)");
    if (!config || config->blocking != 0) return fail(ncclInvalidUsage, "the mock is a non-blocking communicator only");
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return fail(ncclSystemError, "out of memory");
    c->pending = 2;
    *comm = c;
    return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (!comm) return fail(ncclInvalidArgument, "ncclCommGetAsyncError(NULL)");
    if (comm->pending > 0) {
        comm->pending--;
        *asyncError = ncclInProgress;
    } else *asyncError = ncclSuccess;
    return ncclSuccess;
}

/* The mock runtime's way to run work in a stream's order (mock_cuda.c mock_stream_launch). */
typedef void (*launcher)(cudaStream_t, void (*)(void *), void *, const char *);
static launcher launch;
void mock_nccl_set_launcher(void *f) { launch = (launcher)f; }

/* One all-reduce's arguments until it runs: a ring of slots (no allocation per call), each free
 * again once its all-reduce has run. */
typedef struct {
    const float *x;
    float *y;
    size_t n;
    float scale;
    int busy;
} reduce_args;
#define MOCK_NCCL_SLOTS 256
static reduce_args slots[MOCK_NCCL_SLOTS];
static unsigned next_slot;

static void run_allreduce(void *p) {
    reduce_args *a = p;
    for (size_t i = 0; i < a->n; i++) a->y[i] = a->x[i] * a->scale;
    a->busy = 0;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    if (!comm || comm->finalized) return fail(ncclInvalidUsage, "ncclAllReduce on a finalized or NULL communicator");
    if (datatype != ncclFloat32 || op != ncclAvg) return fail(ncclInvalidArgument, "only ncclFloat32 with ncclAvg");
    reduce_args *a = &slots[next_slot++ % MOCK_NCCL_SLOTS];
    if (a->busy) return fail(ncclInternalError, "more than 256 all-reduces queued");
    const char *sc = getenv("MOCK_NCCL_SCALE");
    /* ncclAvg pre-multiplies by 1/nranks = 1/1 (or the test's scale) */
    *a = (reduce_args){.x = sendbuff, .y = recvbuff, .n = count, .scale = sc && *sc ? strtof(sc, NULL) : 1.0f / 1.0f, .busy = 1};
    if (launch) launch(stream, run_allreduce, a, "ncclAllReduce (mock)");
    else run_allreduce(a);
    const char *hang = getenv("MOCK_NCCL_ALLREDUCE_HANG");
    comm->pending = hang && *hang && strcmp(hang, "0") != 0 ? 1 << 30 : 2;
    return ncclInProgress;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return fail(ncclInvalidArgument, "ncclCommFinalize(NULL)");
    const char *hang = getenv("MOCK_NCCL_FINALIZE_HANG");
    comm->finalized = 1;
    comm->pending = hang && *hang && strcmp(hang, "0") != 0 ? 1 << 30 : 2;
    return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (comm->pending > 0) return fail(ncclInvalidUsage, "ncclCommDestroy before the finalize completed");
    n_destroyed++;
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    n_aborted++;
    free(comm);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "mock NCCL error";
    }
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return last_error;
}
