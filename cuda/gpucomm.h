/* gpucomm.h — communication on the GPU for the all-reduce of src/methods/allreduce.c (Jin et al.
 * 2016 §2.1), reached only through the reducer of src/comm/reduce.h:
 *
 *   - NCCL (comm = "nccl"): ncclAllReduce(ncclAvg) in place on the model's device vectors, on the
 *     model's stream, so gradients never leave the GPU;
 *   - the division by p after a CUDA-aware MPI sum on device memory (gpucomm_scale).
 *
 * Plain C without CUDA or NCCL types: src/comm/reduce.c includes it in every build (and src/main.c,
 * src/run/runfile.c for the version lines).
 * Implemented by cuda/gpucomm.cu in a `make CUDA=1` build — its NCCL part only with NCCL=1
 * (nccl.h found; otherwise those entry points say NCCL is not built) — and by cuda/nogpucomm.c
 * in a CPU-only build.
 *
 * Loading. libnccl.so.2 is opened at run time (dlopen, gpucomm_load), not linked: a dsgd-run
 * built with NCCL starts, and trains with comm = "mpi", on a machine that has no NCCL (the GPU
 * check's bundle takes NCCL from the GPU machine, test/gpu/bundle.sh). NCCL >= 2.14 is needed
 * (non-blocking communicators, ncclCommFinalize; ncclAvg is 2.10). DSGD_NCCL_LIBRARY=PATH in the
 * environment opens that file instead (test/gpu/mock/mock_nccl.c: a one-rank NCCL on the CPU).
 *
 * MPI stays behind src/comm: the NCCL unique id is made here on worker 0 (gpucomm_unique_id) and
 * broadcast by the caller (comm_workers_bcast) before every worker calls gpucomm_create.
 *
 * One GPU per rank: NCCL refuses two ranks of a communicator on one GPU ("Duplicate GPU detected
 * : rank 1 and rank 0 both on CUDA device ...", ncclInvalidUsage, still in NCCL 2.28; the NCCL
 * user guide, "Creating a Communicator": using the same CUDA device as different ranks "is not
 * supported and may lead to hangs"). The caller compares gpucomm_gpu_id over the workers first.
 *
 * Timeouts. The communicator is non-blocking (ncclConfig_t.blocking = 0): NCCL calls return at
 * once (ncclInProgress) and every wait here polls ncclCommGetAsyncError and the stream, napping
 * like src/comm's waits. After timeout_s (the experiment's comm_timeout_s) without progress the
 * communicator is aborted (ncclCommAbort, which also stops its kernels) and GPUCOMM_TIMEOUT is
 * returned, so a worker that died mid-collective stops every rank as an MPI wait does.
 *
 * Errors carry the NCCL call, its sizes, ncclGetErrorString and ncclGetLastError's detail. */
#ifndef DSGD_CUDA_GPUCOMM_H
#define DSGD_CUDA_GPUCOMM_H

#include <stddef.h>

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES). */
#define GPUCOMM_ID_BYTES 128

/* Seconds gpucomm_free waits for ncclCommFinalize (at most timeout_s) before ncclCommAbort. */
#define GPUCOMM_FINALIZE_S 5.0

/* Results of gpucomm_allreduce_mean. */
enum { GPUCOMM_OK = 0, GPUCOMM_TIMEOUT = 1, GPUCOMM_FAILED = 2 };

typedef struct gpucomm gpucomm;

/* 1 if this dsgd-run was built with NCCL (make CUDA=1 with nccl.h found: NCCL=1), else 0. */
int gpucomm_nccl_built(void);

/* One line for --version: "NCCL 2.28.9 (/usr/local/cuda/lib64/libnccl.so.2)", "NCCL: not
 * loadable: ...", or "NCCL not built (...)". Opens the library (no GPU needed). */
void gpucomm_version(char *buf, size_t n);

/* Open libnccl.so.2 (or $DSGD_NCCL_LIBRARY) and check its version. Returns 0, or EXIT_RUNTIME with err saying what is
 * missing and how to provide it. Later calls return the first call's verdict. */
int gpucomm_load(char *err, size_t errlen);

/* "0000:19:00.0": the PCI bus id of g's GPU (cudaDeviceGetPCIBusId), the same in every process
 * whatever CUDA_VISIBLE_DEVICES says. Returns 0, or EXIT_RUNTIME with err. */
int gpucomm_gpu_id(gpu_model *g, char *buf, size_t n, char *err, size_t errlen);

/* A new NCCL unique id (ncclGetUniqueId: it also starts NCCL's bootstrap root in this process),
 * GPUCOMM_ID_BYTES bytes into id. Worker 0 only, after gpucomm_load. Returns 0 or EXIT_RUNTIME. */
int gpucomm_unique_id(void *id, char *err, size_t errlen);

/* Collective over the nranks workers (each with its own rank 0..nranks-1 and the same id): the
 * NCCL communicator on g's GPU (ncclCommInitRankConfig, non-blocking), whose all-reduces run on
 * g's stream. timeout_s bounds this call, every all-reduce and gpucomm_free. Returns NULL with
 * err (the call, nranks, rank, NCCL's message; "did not complete within ..." on a timeout). */
gpucomm *gpucomm_create(gpu_model *g, int nranks, int rank, const void *id, double timeout_s, char *err,
                        size_t errlen);

/* Collective: buf (n fp32 values in device memory of the communicator's GPU) := the mean over
 * the ranks, in place: ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg) on the model's stream.
 * ncclAvg pre-multiplies each rank's values by 1/nranks and sums (the NCCL source, as
 * ncclRedOpCreatePreMulSum): exact as the host path's sum-then-scale when nranks is a power of
 * two. Returns when the result is in buf: GPUCOMM_OK; GPUCOMM_TIMEOUT after timeout_s (the
 * communicator is aborted and unusable); GPUCOMM_FAILED with err (likewise). */
int gpucomm_allreduce_mean(gpucomm *c, float *buf, size_t n, char *err, size_t errlen);

/* The gradient's mean overlapped with the backward pass (comm = "nccl" with DSGD_NCCL_OVERLAP=1,
 * src/comm/reduce.h): gpucomm_grads_begin(c, grads) before the step's gpu_model_train_begin arms
 * g's group hook (gpu_model_set_group_hook) for that step; as the backward pass finishes each
 * gradient group [lo, hi) (the fc layer, each BasicBlock from the last, the stem: gpu.h), the hook
 * makes the communication stream (made by gpucomm_create) wait on the group's event and enqueues
 * ncclAllReduce(grads + lo, grads + lo, hi - lo, ncclFloat32, ncclAvg) there, so the all-reduce of
 * the last layers runs while the GPU computes the first layers' gradients. gpucomm_grads_end(c, n)
 * (after gpu_model_train_begin, before gpu_model_train_end; n: the gradient's length, for the
 * message) waits until every group's all-reduce is done (polled, bounded by timeout_s from its
 * call) and makes the compute stream wait for them, so the update reads the mean. Per element the
 * same operations as gpucomm_allreduce_mean on the whole vector (ncclAvg of the same values): the
 * same bits at one rank (and where NCCL's order of summation does not depend on the buffer's
 * length, as at two ranks). grads: gpu_model_vector(g, GPU_GRADS). gpucomm_grads_end returns as
 * gpucomm_allreduce_mean (GPUCOMM_TIMEOUT also when a group's enqueue did not complete within
 * timeout_s; err set in every failure; the communicator is then aborted). *t_computed: the wall time (util.h wall_time) at which
 * the wait saw the backward pass done (the last group's event), -1 if it did not see it before
 * the all-reduces were. No allocation, no stream or event made. */
int gpucomm_grads_begin(gpucomm *c, float *grads, char *err, size_t errlen);
int gpucomm_grads_end(gpucomm *c, size_t n, double *t_computed, char *err, size_t errlen);

/* Release the communicator (ncclCommFinalize, then ncclCommDestroy; ncclCommAbort, with a
 * warning, if the finalize does not complete within GPUCOMM_FINALIZE_S seconds (or timeout_s if
 * shorter): at exit a stuck finalize means a peer is gone, and comm_timeout_s may be long).
 * Every rank calls it. NULL: no-op. */
void gpucomm_free(gpucomm *c);

/* buf (n fp32 values in device memory of g's GPU) *= s on g's stream; returns when done. For the
 * mean after a CUDA-aware MPI sum of device memory. */
void gpucomm_scale(gpu_model *g, float *buf, size_t n, float s);

#ifdef __cplusplus
}
#endif

#endif
