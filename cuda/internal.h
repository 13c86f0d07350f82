/* internal.h — what cuda/model.cu shows the other .cu files of cuda/ (gpucomm.cu): the model's
 * stream and device. Not part of gpu.h, which stays plain C without CUDA types. */
#ifndef DSGD_CUDA_INTERNAL_H
#define DSGD_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one stream every entry point of gpu.h enqueues on (cuda/README.md, "Streams"): work that
 * must be ordered with the model's (an NCCL all-reduce of the gradients before the update)
 * goes there too. */
cudaStream_t gpu_model_stream(const gpu_model *g);

/* The CUDA device index (as cudaSetDevice takes it) the model lives on. */
int gpu_model_device(const gpu_model *g);

#ifdef __cplusplus
}
#endif

#endif
