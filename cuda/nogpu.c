/* nogpu.c — cuda/gpu.h in a CPU-only build (plain `make`): the GPU backend is absent, and every
 * entry point that could be reached from user input says how to get it. Replaced by the .cu files of cuda/
 * in a `make CUDA=1` build. */
#include "gpu.h"

#include "util/util.h"

#define NOT_BUILT                                                                                 \
    "device = \"cuda\" needs the GPU backend: this dsgd-run was built without it; rebuild with "  \
    "`make CUDA=1` (CUDA toolkit, cuDNN and cuBLAS)"

int gpu_built(void) { return 0; }

void gpu_version(char *buf, size_t n) { snprintf(buf, n, "GPU backend not built (make CUDA=1)"); }

int gpu_launcher_local_rank(const char **var) { return -1; }

int gpu_select_early(void) { return -1; }

int gpu_select_early_argv(int argc, char *const *argv) { return -1; }

int gpu_early_wanted(int argc, char *const *argv) { return 0; }

int gpu_select(int local_rank, int local_size, char *desc, size_t desclen, char *err, size_t errlen) {
    if (desclen) desc[0] = '\0';
    return seterr(err, errlen, NOT_BUILT);
}

gpu_model *gpu_model_create(const nn_layout *L, gpu_precision prec, char *err, size_t errlen) {
    seterr(err, errlen, NOT_BUILT);
    return NULL;
}

/* Unreachable without a gpu_model: model.c calls these only on a model gpu_model_create built.
 * STUB: a function of that signature that dies naming itself (parameters unused). */
#define STUB(ret, name, params) ret name params { DIE(#name ": " NOT_BUILT); }

void *gpu_host_alloc(size_t nbytes) { DIE("gpu_host_alloc(%zu): " NOT_BUILT, nbytes); }
void gpu_host_free(void *p) {
    if (p) DIE("gpu_host_free: " NOT_BUILT);
}
void gpu_model_free(gpu_model *g) {
    if (g) DIE("gpu_model_free: " NOT_BUILT);
}
STUB(void, gpu_model_upload, (gpu_model *g, int which, const float *params, const float *grads, const float *bn))
STUB(void, gpu_model_download, (gpu_model *g, int which, float *params, float *grads, float *bn))
STUB(void, gpu_model_velocity_upload, (gpu_model *g, const float *v))
STUB(void, gpu_model_velocity_download, (gpu_model *g, float *v))
STUB(void, gpu_model_zero_velocity, (gpu_model *g))
STUB(float, gpu_model_train_step, (gpu_model *g, const float *x, const int *y))
STUB(void, gpu_model_train_begin, (gpu_model *g, const float *x, const int *y, float *grads_host))
STUB(size_t, gpu_model_grads_ready, (gpu_model *g))
STUB(void, gpu_model_grads_upload, (gpu_model *g, const float *grads_host, size_t lo, size_t hi))
STUB(float, gpu_model_train_end, (gpu_model *g))
STUB(void, gpu_model_stage_buffers, (gpu_model *g, float **x, int **y))
STUB(void, gpu_model_stage, (gpu_model *g, long tag))
STUB(void, gpu_model_set_group_hook, (gpu_model *g, gpu_group_hook hook, void *ctx))
STUB(long, gpu_model_staged, (const gpu_model *g))
STUB(void, gpu_model_eval, (gpu_model *g, const float *x, int n_valid, float *logits))
STUB(void, gpu_model_train_logits, (gpu_model *g, float *logits))
STUB(int, gpu_model_sgd_update, (gpu_model *g, float alpha, float mu, float lambda, int nesterov))
STUB(float *, gpu_model_vector, (gpu_model *g, int which))
STUB(int, gpu_model_conv_transforms, (const gpu_model *g))
STUB(const char *, gpu_model_bf16_fallback, (const gpu_model *g))
