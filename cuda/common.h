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

#define CUDA_CHECK(call, where)                                                                   \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess)                                                                    \
            die(__FILE__, __LINE__, "CUDA %s failed in %s: %s (%s)", #call, (where),              \
                cudaGetErrorName(e_), cudaGetErrorString(e_));                                    \
    } while (0)

#define CUDNN_CHECK(call, where)                                                                  \
    do {                                                                                          \
        cudnnStatus_t s_ = (call);                                                                \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                         \
            char b_[768];                                                                         \
            die(__FILE__, __LINE__, "cuDNN %s failed in %s: %s", #call, (where),                  \
                gpu_cudnn_status(s_, b_, sizeof b_));                                             \
        }                                                                                         \
    } while (0)

#define CUBLAS_CHECK(call, where)                                                                 \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            char b_[256];                                                                         \
            die(__FILE__, __LINE__, "cuBLAS %s failed in %s: %s", #call, (where),                 \
                gpu_cublas_status(s_, b_, sizeof b_));                                            \
        }                                                                                         \
    } while (0)

#define CUDA_TRY(call, where)                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            seterr(err, errlen, "%s:%d: CUDA %s failed in %s: %s (%s)", __FILE__, __LINE__, #call, \
                   (where), cudaGetErrorName(e_), cudaGetErrorString(e_));                        \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

#define CUDNN_TRY(call, where)                                                                    \
    do {                                                                                          \
        cudnnStatus_t s_ = (call);                                                                \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                         \
            char b_[768];                                                                         \
            seterr(err, errlen, "%s:%d: cuDNN %s failed in %s: %s", __FILE__, __LINE__, #call,    \
                   (where), gpu_cudnn_status(s_, b_, sizeof b_));                                 \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

#define CUBLAS_TRY(call, where)                                                                   \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            char b_[256];                                                                         \
            seterr(err, errlen, "%s:%d: cuBLAS %s failed in %s: %s", __FILE__, __LINE__, #call,   \
                   (where), gpu_cublas_status(s_, b_, sizeof b_));                                \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

#endif
