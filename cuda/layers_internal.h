/* layers_internal.h — what the layer files of cuda/ share (layers.cu, layers_conv.cu,
 * layers_norm.cu, layers_pool_fc.cu): the launch shape, the storage types of activations and
 * their loads and stores, and whether a BN or pooling layer takes the bf16 fallback. Not part of
 * layers.h. */
#ifndef DSGD_CUDA_LAYERS_INTERNAL_H
#define DSGD_CUDA_LAYERS_INTERNAL_H

#include "layers.h"

#include <stdint.h>

#include <cuda_bf16.h>

#include "common.h"

#define THREADS 256
#define WARPS_PER_BLOCK (THREADS / 32)

/* Blocks for n work items: enough to cover them, at most 8 per multiprocessor (grid-stride). */
static inline int grid_for(const gpu_ctx *c, size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    const size_t cap = (size_t)(c->n_sm > 0 ? c->n_sm : 1) * 8;
    if (b > cap) b = cap;
    return b < 1 ? 1 : (int)b;
}

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static inline int is_bf16(const gpu_ctx *c) { return c->prec == GPU_BF16; }

/* cuDNN's type of activations (and of convolution weights) in c. */
static inline cudnnDataType_t act_dnn_type(const gpu_ctx *c) { return is_bf16(c) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

/* ---- storage types: float, or bf16 bits in a uint16_t ------------------------------------- */

#ifdef __CUDACC__ /* (g++ compiles layers_conv.cu over test/gpu/mock, which uses none of these) */
__device__ __forceinline__ float ldf(float x) { return x; }
/* bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits. */
__device__ __forceinline__ float ldf(uint16_t b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ void stf(float &d, float v) { d = v; }
/* fp32 -> bf16, round to nearest even (NaN stays NaN); cuda_bf16.h "__float2bfloat16_rn". */
__device__ __forceinline__ void stf(uint16_t &d, float v) { d = __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
#endif

/* Run the statement (a kernel launch) with S the storage type of the activations: uint16_t
 * (bf16 bits) if bf, else float. */
#define WITH_ACT_TYPE(bf, ...)                                                                    \
    do {                                                                                          \
        if (bf) {                                                                                 \
            typedef uint16_t S;                                                                   \
            __VA_ARGS__;                                                                          \
        } else {                                                                                  \
            typedef float S;                                                                      \
            __VA_ARGS__;                                                                          \
        }                                                                                         \
    } while (0)

/* 16 bytes of S: one vector load or store. */
template <typename S> struct alignas(16) pack16 {
    S v[16 / sizeof(S)];
};

/* 1 if a layer of kind "bn" / "pool" in c runs on fp32 tensors (io32); layers.cu. */
int gpu_use_io32(gpu_ctx *c, const char *kind);

#endif
