/* mock_nccl.c — a one-rank NCCL on the CPU, built as build/mock/libnccl.so.2 and opened by
 * cuda/gpucomm.cu's dlopen (DSGD_NCCL_LIBRARY=.../build/mock/libnccl.so.2), so that gpucomm.cu,
 * compiled by g++ over the CPU stand-ins (build/mock/gpucomm.o), runs its whole path — load,
 * version check, communicator start, all-reduce, release — in `make check`.
 *
 * It behaves as a non-blocking communicator does (NCCL user guide, "Fault Tolerance"): every call
 * that starts something returns ncclInProgress, and ncclCommGetAsyncError answers ncclInProgress
 * twice before ncclSuccess, so gpucomm.cu's wait loops go round. One rank only (nranks 1, rank 0:
 * anything else is ncclInvalidUsage); ncclAllReduce(float, ncclAvg) multiplies by 1/1 = 1.0f,
 * in place or into recvbuff, at once (the buffers are the mock's host memory). The model's stream
 * then answers "not ready" to cudaStreamQuery two times in three (mock_cuda.c), as a busy GPU.
 *
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

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    if (!comm || comm->finalized) return fail(ncclInvalidUsage, "ncclAllReduce on a finalized or NULL communicator");
    if (datatype != ncclFloat32 || op != ncclAvg) return fail(ncclInvalidArgument, "only ncclFloat32 with ncclAvg");
    const float *x = sendbuff;
    float *y = recvbuff;
    const float inv = 1.0f / 1.0f; /* ncclAvg pre-multiplies by 1/nranks */
    for (size_t i = 0; i < count; i++) y[i] = x[i] * inv;
    comm->pending = 2;
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
