/* mock_cuda.c — the few CUDA runtime, cuDNN and cuBLAS entry points cuda/model.cu and the GPU
 * tests call directly, on host memory, so that cuda/model.cu (host code only: every kernel and
 * library call is behind cuda/layers.h) runs on a machine without a GPU, over the CPU layers of
 * mock_layers.c. A wiring test of model.cu, not of the GPU: see test/gpu/mock/README.md.
 *
 * "Device" memory is host memory the mock knows about: cudaMalloc fills it with NaN bytes (as
 * uninitialised device memory is garbage), cudaMemcpy* checks that each side of a copy is the
 * kind of memory its direction says, and cudaMemGetInfo reports a fixed total minus what is
 * allocated, so a test sees allocations made after create. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "util/util.h"

#define MOCK_TOTAL ((size_t)64 << 30)
#define MOCK_MAX_ALLOCS 8192

typedef struct {
    char *p;
    size_t n;
} dev_alloc;

static dev_alloc allocs[MOCK_MAX_ALLOCS];
static int n_allocs;
static size_t allocated;

/* 1 if [p, p + nbytes) lies inside one mock device allocation. */
int mock_is_dev(const void *p, size_t nbytes) {
    const char *c = (const char *)p;
    for (int i = 0; i < n_allocs; i++)
        if (c >= allocs[i].p && c + nbytes <= allocs[i].p + allocs[i].n) return 1;
    return 0;
}

void mock_check_dev(const void *p, size_t nbytes, const char *what) {
    if (!p || !mock_is_dev(p, nbytes))
        DIE("mock: %s: %p (%zu bytes) is not inside one device allocation", what, p, nbytes);
}

cudaError_t cudaMalloc(void **p, size_t n) {
    if (n_allocs >= MOCK_MAX_ALLOCS) DIE("mock: too many allocations");
    void *q = NULL;
    if (posix_memalign(&q, 256, n ? n : 1)) return cudaErrorMemoryAllocation;
    memset(q, 0xff, n); /* NaN: uninitialised device memory is garbage */
    allocs[n_allocs++] = (dev_alloc){(char *)q, n};
    allocated += n;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i].p == p) {
            allocated -= allocs[i].n;
            allocs[i] = allocs[--n_allocs];
            free(p);
            return cudaSuccess;
        }
    DIE("mock: cudaFree(%p): not a device allocation", p);
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
    mock_check_dev(p, n, "cudaMemset");
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    (void)s;
    return cudaMemset(p, v, n);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        mock_check_dev(dst, n, "cudaMemcpy host to device: destination");
        if (mock_is_dev(src, n)) DIE("mock: cudaMemcpy host to device from device memory");
        break;
    case cudaMemcpyDeviceToHost:
        mock_check_dev(src, n, "cudaMemcpy device to host: source");
        if (mock_is_dev(dst, n)) DIE("mock: cudaMemcpy device to host into device memory");
        break;
    case cudaMemcpyDeviceToDevice:
        mock_check_dev(src, n, "cudaMemcpy device to device: source");
        mock_check_dev(dst, n, "cudaMemcpy device to device: destination");
        break;
    default: DIE("mock: cudaMemcpy kind %d", (int)kind);
    }
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    (void)s;
    return cudaMemcpy(dst, src, n, kind);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    *p = calloc(1, n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    (void)d;
    /* compute capability 9.0, as cudaGetDeviceProperties says; 4 multiprocessors */
    *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : a == cudaDevAttrComputeCapabilityMinor ? 0 : 4;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    (void)d;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "mock GPU (host memory, CPU layers)");
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = MOCK_TOTAL;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = (cudaStream_t)(uintptr_t)0x5;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error (mock)" : "error (mock)"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaError (mock)"; }

cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    *v = 0;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *fr, size_t *total) {
    *fr = MOCK_TOTAL - allocated;
    *total = MOCK_TOTAL;
    return cudaSuccess;
}

size_t cudnnGetVersion(void) { return 0; }
const char *cudnnGetErrorString(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : "CUDNN error (mock)"; }
void cudnnGetLastErrorString(char *m, size_t n) {
    if (n) m[0] = '\0';
}

cublasStatus_t cublasGetProperty(libraryPropertyType t, int *v) {
    (void)t;
    *v = 0;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS error (mock)"; }
const char *cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }
