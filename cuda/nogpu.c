/* nogpu.c — cuda/gpu.h in a CPU-only build (plain `make`, no nvcc, no CUDA headers): the backend
 * reports that it was not built. gpu_select and gpu_model_create, the two doors through which a
 * run reaches the GPU, return the error for the user (device = "cuda" in the experiment file);
 * every other entry point needs a model or a device those two never gave, so reaching one is a
 * programming error and dies. */
#include "gpu.h"

#include "util/util.h"

#define NOT_BUILT                                                                                 \
    "device = \"cuda\" needs the GPU backend: this dsgd-run was built without it; rebuild with "  \
    "`make CUDA=1`"

int gpu_built(void) { return 0; }

void gpu_version(char *buf, size_t n) { snprintf(buf, n, "GPU backend not built (make CUDA=1)"); }

int gpu_select(int local_rank, int local_size, char *desc, size_t desclen, char *err, size_t errlen) {
    (void)local_rank, (void)local_size;
    if (desclen) desc[0] = '\0';
    return seterr(err, errlen, NOT_BUILT);
}

void *gpu_host_alloc(size_t nbytes) { DIE("gpu_host_alloc(%zu) in a build without the GPU backend", nbytes); }

void gpu_host_free(void *p) {
    if (p) DIE("gpu_host_free in a build without the GPU backend");
}

gpu_model *gpu_model_create(const nn_layout *L, gpu_precision prec, char *err, size_t errlen) {
    (void)L, (void)prec;
    seterr(err, errlen, NOT_BUILT);
    return NULL;
}

void gpu_model_free(gpu_model *g) {
    if (g) DIE("gpu_model_free in a build without the GPU backend");
}

void gpu_model_upload(gpu_model *g, int which, const float *params, const float *grads, const float *bn) {
    (void)g, (void)which, (void)params, (void)grads, (void)bn;
    DIE("gpu_model_upload in a build without the GPU backend");
}

void gpu_model_download(gpu_model *g, int which, float *params, float *grads, float *bn) {
    (void)g, (void)which, (void)params, (void)grads, (void)bn;
    DIE("gpu_model_download in a build without the GPU backend");
}

void gpu_model_zero_velocity(gpu_model *g) {
    (void)g;
    DIE("gpu_model_zero_velocity in a build without the GPU backend");
}

float gpu_model_train_step(gpu_model *g, const float *x, const int *y) {
    (void)g, (void)x, (void)y;
    DIE("gpu_model_train_step in a build without the GPU backend");
}

void gpu_model_eval(gpu_model *g, const float *x, int n_valid, float *logits) {
    (void)g, (void)x, (void)n_valid, (void)logits;
    DIE("gpu_model_eval in a build without the GPU backend");
}

void gpu_model_train_logits(gpu_model *g, float *logits) {
    (void)g, (void)logits;
    DIE("gpu_model_train_logits in a build without the GPU backend");
}

int gpu_model_sgd_update(gpu_model *g, float alpha, float mu, float lambda, int nesterov) {
    (void)g, (void)alpha, (void)mu, (void)lambda, (void)nesterov;
    DIE("gpu_model_sgd_update in a build without the GPU backend");
}
