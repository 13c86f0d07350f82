/* nogpucomm.c — cuda/gpucomm.h in a CPU-only build (plain `make`): no GPU, so no NCCL and no
 * device memory to communicate. comm = "nccl" needs device = "cuda" (src/config), which such a
 * build refuses first (cuda/nogpu.c); these entry points say how to get both. Replaced by
 * cuda/gpucomm.cu in a `make CUDA=1` build. */
#include "gpucomm.h"

#include "util/util.h"

#define NOT_BUILT                                                                                 \
    "comm = \"nccl\" needs the GPU backend with NCCL: this dsgd-run was built without them; "     \
    "rebuild with `make CUDA=1` (CUDA toolkit, cuDNN, cuBLAS; NCCL's nccl.h)"

int gpucomm_nccl_built(void) { return 0; }

void gpucomm_version(char *buf, size_t n) { snprintf(buf, n, "NCCL not built (make CUDA=1)"); }

int gpucomm_load(char *err, size_t errlen) {
    seterr(err, errlen, NOT_BUILT);
    return EXIT_RUNTIME;
}

int gpucomm_unique_id(void *id, char *err, size_t errlen) {
    return gpucomm_load(err, errlen);
}

gpucomm *gpucomm_create(gpu_model *g, int nranks, int rank, const void *id, double timeout_s, char *err, size_t errlen) {
    gpucomm_load(err, errlen);
    return NULL;
}

/* Unreachable without a gpu_model or a communicator. STUB: a function of that signature that
 * dies naming itself (parameters unused). */
#define STUB(ret, name, params) ret name params { DIE(#name ": " NOT_BUILT); }

STUB(int, gpucomm_gpu_id, (gpu_model *g, char *buf, size_t n, char *err, size_t errlen))
STUB(int, gpucomm_allreduce_mean, (gpucomm *c, float *buf, size_t n, char *err, size_t errlen))
STUB(int, gpucomm_grads_begin, (gpucomm *c, float *grads, char *err, size_t errlen))
STUB(int, gpucomm_grads_end, (gpucomm *c, size_t n, double *t_computed, char *err, size_t errlen))
void gpucomm_free(gpucomm *c) {
    if (c) DIE("gpucomm_free: " NOT_BUILT);
}
STUB(void, gpucomm_scale, (gpu_model *g, float *buf, size_t n, float s))
