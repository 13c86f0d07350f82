/* common.h — error checking for the GPU backend (the .cu files of cuda/ only; the C side sees cuda/gpu.h and
 * cuda/layers.h). The twins of DNNL_CHECK / DNNL_TRY in src/nn/layers.h:
 *
 *   CUDA_CHECK(call, where), CUDNN_CHECK(call, where), CUBLAS_CHECK(call, where)
 *       while executing (a training step): on failure print the call, `where` (the layer's name
 *       and shapes), file:line and the library's own status name and message, then abort through
 *       die() (src/util/util.h). A failure there is a fault of the device or of this code; MPI's
 *       launcher takes the other ranks down.
 *   CUDA_TRY(call, where), CUDNN_TRY(call, where), CUBLAS_TRY(call, where)
 *       while building (gpu_*_init, gpu_model_create): fill (err, errlen) of the enclosing
 *       function with the same information and return -1 from it.
 *
 * Kernel launches are checked with CUDA_CHECK(cudaGetLastError(), where) right after the launch
 * (launch configuration errors; no synchronisation). Errors of earlier asynchronous work surface
 * at the next checked call, with that call's place: run with CUDA_LAUNCH_BLOCKING=1 to pin one
 * down. */
#ifndef DSGD_CUDA_COMMON_H
#define DSGD_CUDA_COMMON_H

#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "util/util.h"

/* "CUBLAS_STATUS_EXECUTION_FAILED (the GPU program failed to execute)". */
static inline const char *gpu_cublas_status(cublasStatus_t st, char *buf, size_t n) {
    snprintf(buf, n, "%s (%s)", cublasGetStatusName(st), cublasGetStatusString(st));
    return buf;
}

/* cuDNN's status string and, when it has one, its last detailed message ("CUDNN_STATUS_BAD_PARAM
 * (...: wrong dimensions)"): cudnnGetLastErrorString, cuDNN 9 "Error Reporting and API Logging". */
static inline const char *gpu_cudnn_status(cudnnStatus_t st, char *buf, size_t n) {
    char last[512];
    last[0] = '\0';
    cudnnGetLastErrorString(last, sizeof last);
    if (last[0]) snprintf(buf, n, "%s (%s)", cudnnGetErrorString(st), last);
    else snprintf(buf, n, "%s", cudnnGetErrorString(st));
    return buf;
}

/* "cudaErrorMemoryAllocation (out of memory)". */
static inline const char *gpu_cuda_status(cudaError_t e, char *buf, size_t n) {
    snprintf(buf, n, "%s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    return buf;
}

/* The six macros below: evaluate call once into a T; unless it is ok, describe it into b_ with
 * status (gpu_*_status) and run fail (GPU_DIE_ or GPU_ERR_: lib, the call's text, where, b_). */
#define GPU_CHECK_(T, ok, status, call, fail)                                                     \
    do {                                                                                          \
        T s_ = (call);                                                                            \
        if (s_ != (ok)) {                                                                         \
            char b_[768];                                                                         \
            status(s_, b_, sizeof b_);                                                            \
            fail;                                                                                 \
        }                                                                                         \
    } while (0)
#define GPU_DIE_(lib, text, where) die(__FILE__, __LINE__, lib " %s failed in %s: %s", text, (where), b_)
#define GPU_ERR_(lib, text, where)                                                                \
    return seterr(err, errlen, "%s:%d: " lib " %s failed in %s: %s", __FILE__, __LINE__, text, (where), b_), -1

#define CUDA_CHECK(call, where)                                                                   \
    GPU_CHECK_(cudaError_t, cudaSuccess, gpu_cuda_status, call, GPU_DIE_("CUDA", #call, where))
#define CUDNN_CHECK(call, where)                                                                  \
    GPU_CHECK_(cudnnStatus_t, CUDNN_STATUS_SUCCESS, gpu_cudnn_status, call, GPU_DIE_("cuDNN", #call, where))
#define CUBLAS_CHECK(call, where)                                                                 \
    GPU_CHECK_(cublasStatus_t, CUBLAS_STATUS_SUCCESS, gpu_cublas_status, call, GPU_DIE_("cuBLAS", #call, where))

#define CUDA_TRY(call, where)                                                                     \
    GPU_CHECK_(cudaError_t, cudaSuccess, gpu_cuda_status, call, GPU_ERR_("CUDA", #call, where))
#define CUDNN_TRY(call, where)                                                                    \
    GPU_CHECK_(cudnnStatus_t, CUDNN_STATUS_SUCCESS, gpu_cudnn_status, call, GPU_ERR_("cuDNN", #call, where))
#define CUBLAS_TRY(call, where)                                                                   \
    GPU_CHECK_(cublasStatus_t, CUBLAS_STATUS_SUCCESS, gpu_cublas_status, call, GPU_ERR_("cuBLAS", #call, where))

#endif
