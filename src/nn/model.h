/* model.h — the network every method trains: ResNet-18 (He et al. 2016, as torchvision builds
 * it) on the CPU through oneDNN, or (model_spec.arch = MODEL_LINEAR) multinomial logistic
 * regression, a small convex model on which the distributed-method tests run in seconds. The
 * distributed methods see only three flat float vectors:
 *
 *   params  (n_params)  every trainable tensor, one after the other (model_tensor_at)
 *   grads   (n_params)  same layout; written by model_train_step
 *   bn      (n_bn)      BatchNorm running mean and running variance of every BN layer
 *
 * Flat layouts are in PyTorch order and shapes (conv weight (O, I, kh, kw), BN weight/bias (C),
 * fc weight (classes, features), fc bias (classes)), tensors in torchvision's state_dict order,
 * so a state_dict maps onto params by concatenation. Activations live in whatever memory format
 * oneDNN prefers; only inputs (B, C, H, W) and these vectors have a fixed layout. */
#ifndef DSGD_MODEL_H
#define DSGD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MODEL_STEM_CIFAR = 0, MODEL_STEM_IMAGENET = 1 } model_stem;

/* MODEL_RESNET18 is 0 so that a zero-initialised spec keeps meaning ResNet-18.
 * MODEL_LINEAR: logits = W x + b on the flattened input (x.view(batch, -1) of (c, h, w)), the
 * whole of torch.nn.Linear(in_c*in_h*in_w, n_classes); params are "fc.weight" (n_classes,
 * in_c*in_h*in_w) then "fc.bias" (n_classes); no BN (n_bn = 0, model_bn a valid pointer to
 * nothing); width and stem are ignored. */
typedef enum { MODEL_RESNET18 = 0, MODEL_LINEAR = 1 } model_arch;

/* Where the network computes. MODEL_CUDA needs a `make CUDA=1` build and gpu_select (cuda/gpu.h)
 * first; model_create says so otherwise. */
typedef enum { MODEL_CPU = 0, MODEL_CUDA = 1 } model_device;

/* Arithmetic. MODEL_CUDA: cuda/gpu.h gpu_precision. MODEL_CPU: MODEL_FP32, or MODEL_BF16 for
 * ResNet-18 on a CPU with AVX512_BF16 / AMX (nn_bf16_native; model_create refuses it elsewhere):
 * convolutions on bf16-rounded inputs, weights and output gradients with f32 accumulation, all
 * else f32 (src/nn/layers.h, conv_init); MODEL_TF32 is refused on the CPU. */
typedef enum { MODEL_FP32 = 0, MODEL_TF32 = 1, MODEL_BF16 = 2 } model_precision;

typedef struct {
    model_arch arch;    /* network: ResNet-18 (0, default) or multinomial logistic regression */
    int width;          /* channels of stage 1 (w); stages have w, 2w, 4w, 8w */
    model_stem stem;    /* CIFAR: 3x3/1 conv; ImageNet: 7x7/2 conv + 3x3/2 max-pool */
    int in_c, in_h, in_w;
    int n_classes;
    int batch;          /* training minibatch b */
    int eval_batch;     /* evaluation minibatch */
    int threads;        /* compute threads (OpenMP) */
    model_device device;       /* MODEL_CPU (oneDNN, default) or MODEL_CUDA (cuda/, cuDNN) */
    model_precision precision; /* MODEL_FP32 (default); MODEL_TF32 (CUDA only), MODEL_BF16 */
} model_spec;

typedef struct {
    const char *name;   /* torchvision state_dict name, e.g. "layer1.0.conv1.weight" */
    int ndim;
    int shape[4];
    size_t offset;      /* into params/grads (or bn for running stats) */
    size_t n;
} model_tensor;

typedef struct model model;

/* Build the network and every oneDNN primitive for batch and eval_batch. Returns NULL with err
 * filled if oneDNN cannot create a primitive (message names the layer and shapes). */
model *model_create(const model_spec *s, char *err, size_t errlen);
void model_free(model *m);

size_t model_n_params(const model *m);
float *model_params(model *m);
float *model_grads(model *m);
size_t model_n_bn(const model *m);
float *model_bn(model *m);

/* He initialisation from seed as torchvision: conv kaiming_normal(fan_out, relu), BN γ=1 β=0,
 * fc U(−1/√fan_in, 1/√fan_in); running mean 0, running var 1. MODEL_LINEAR: fc.weight and
 * fc.bias U(−1/√fan_in, 1/√fan_in) with fan_in = in_c*in_h*in_w, as torch.nn.Linear. */
void model_init(model *m, uint64_t seed);

/* Forward and backward on one training minibatch in training mode (BN batch statistics):
 * x (batch, in_c, in_h, in_w), y (batch) labels in [0, n_classes). Overwrites grads with the
 * gradient of the mean softmax cross-entropy over the batch, updates BN running stats (PyTorch's
 * momentum 0.1, unbiased variance), returns the mean loss. No allocation. MODEL_LINEAR: with
 * P = softmax(W x + b) (batch, n_classes) and Y the one-hot labels, ∂L/∂W = (P − Y)ᵀ x / batch,
 * ∂L/∂b = Σ_rows (P − Y) / batch. */
float model_train_step(model *m, const float *x, const int *y);

/* Inference (BN running stats) on up to eval_batch samples: x (eval_batch, c, h, w) of which
 * the first n_valid are real (the rest may be anything). Adds to *loss_sum the summed
 * cross-entropy and to *top1, *top5 the number of correct samples among the first n_valid. */
void model_eval(model *m, const float *x, const int *y, int n_valid, double *loss_sum, long *top1, long *top5);

/* ---- sizes without a network, and facts of the backend ---- */

/* Floats of one sample's forward activations (every layer's output once: stem convolution,
 * max-pool, each block's convolutions and shortcut, the logits), without building the network;
 * 0 if s is invalid. ResNet-18 at 3x224x224, width 64, ImageNet stem: 2,685,928. A training step
 * holds several such sets per sample (outputs, BN and ReLU outputs, their gradients): 2.6 to 4.8
 * measured on the CPU backend (docs/perf.md); setup_check_memory counts 2.5. */
size_t model_spec_activation_floats(const model_spec *s);

/* "oneDNN x.y.z" — the backend library the model runs on, into buf. */
void model_backend_version(char *buf, size_t n);
/* CPU ResNet-18: how many of the training network's convolutions compute in bf16 (precision
 * bf16, layers.h conv_init; 0 with fp32), *total their number (20: stem, 16 block, 3 downsample),
 * and fp32_names (n bytes, may be NULL) the comma-separated names of those that stay fp32 (e.g.
 * "conv1": oneDNN has no jit bf16 kernel for a 1- or 3-channel nchw input). 0 and *total = 0 on
 * the GPU and for the linear model. */
int model_bf16_convs(const model *m, int *total, char *fp32_names, size_t n);
/* Whether this CPU runs bf16 convolutions natively (AVX512_BF16 or AMX, as oneDNN sees it after
 * ONEDNN_MAX_CPU_ISA; layers.h nn_bf16_native), and the ISA oneDNN runs ("avx2", ...). */
int model_cpu_bf16_native(void);
const char *model_cpu_isa(void);

/* ---- devices: the flat vectors on a GPU (model_spec.device = MODEL_CUDA) -------------------
 *
 * On a GPU, params, grads and bn above are page-locked HOST MIRRORS of the device vectors the
 * network computes with. Which side is current is up to the caller, in one of two modes:
 *
 *   host sync (the default, model_set_host_sync(m, 1)): the host vectors are the truth, as on the
 *     CPU. model_train_step uploads params and bn before computing and downloads grads and bn
 *     after; model_eval_begin uploads params and bn. A method may read and write the host
 *     vectors between steps exactly as on the CPU (every method in src/methods/ works
 *     unchanged), at the cost of two parameter-sized copies and a host update per step.
 *   device (model_set_host_sync(m, 0)): the device vectors are the truth and nothing moves by
 *     itself; the caller moves what it needs with model_download / model_upload and updates
 *     the device parameters with model_sgd_update (all-reduce: download grads, MPI_Allreduce on
 *     the host, upload grads, update on the device — or the same overlapped with the backward
 *     pass through model_train_begin ... model_train_end below; with p = 1 nothing leaves the
 *     GPU).
 *
 * On the CPU the mirrors ARE the vectors: upload and download do nothing, and both modes are
 * the same. */

/* Bits of `which` for model_upload / model_download. MODEL_VELOCITY: model_sgd_update's
 * momentum (n_params), moved only on request (checkpoints). */
enum { MODEL_PARAMS = 1, MODEL_GRADS = 2, MODEL_BN = 4, MODEL_VELOCITY = 8 };

/* Host mirror of the velocity model_sgd_update keeps (n_params floats; on a GPU current only
 * after model_download(m, MODEL_VELOCITY), and read by the device only after model_upload). */
float *model_velocity(model *m);

/* The device m computes on. */
model_device model_get_device(const model *m);
/* Host sync mode on (1, default) or off (0); see above. */
void model_set_host_sync(model *m, int on);
/* Host mirrors -> device (upload) or device -> host mirrors (download) for the vectors in
 * `which`; return when the copy is complete. No-ops on the CPU. */
void model_upload(model *m, int which);
void model_download(model *m, int which);
/* Before a series of model_eval calls on parameters the caller may have changed on the host:
 * in host sync mode, uploads params and bn (GPU); otherwise nothing. */
void model_eval_begin(model *m);

/* sgd_update (src/optim/sgd.h) of the model's parameters with its gradients and its own
 * velocity (zero at model_create and model_init), where they live: the host on the CPU, the
 * device on a GPU (one kernel; the host mirror of params is then stale until model_download).
 * Returns 1 if every parameter is finite, 0 otherwise. */
int model_sgd_update(model *m, float alpha, float mu, float lambda, int nesterov);

/* Host memory for buffers the model copies from every step (minibatches): page-locked on a GPU
 * (faster transfers), 64-byte aligned otherwise; zeroed; dies on failure. */
void *model_host_alloc(const model *m, size_t nbytes);
void model_host_free(const model *m, void *p);

/* The vector `which` (exactly one of MODEL_PARAMS, MODEL_GRADS, MODEL_BN) where the network
 * computes with it: device memory on a GPU (cuda/gpu.h gpu_model_vector; never dereference it
 * on the host), the host vector itself (model_params, ...) on the CPU. For communication in place
 * on the device in device mode (NCCL, CUDA-aware MPI: reducer_mean, src/comm/reduce.h). */
float *model_device_vector(model *m, int which);

/* ---- The training step in parts: overlap on a GPU (allreduce_grads, src/methods/allreduce_overlap.c) -------
 *
 * model_train_step(m, x, y) computes what model_train_begin(m, x, y, 0) then model_train_end(m)
 * compute, bit for bit. In between, on a GPU, the step runs while the caller works:
 *
 *   model_train_begin(m, x, y, flags)  starts the step on x (batch, c, h, w) and y (batch), or,
 *       with x = y = NULL, on the minibatch staged by model_stage_batch (GPU only). flags
 *       MODEL_STAGE_GRADS (device mode only): the gradient is copied into the host mirror
 *       (model_grads) part by part while the backward pass runs, from the end of the vector
 *       (the fc layer, finished first) down to 0 (the stem, last). x and y stay untouched by the
 *       caller until model_train_end.
 *   model_grads_host_ready(m)  without blocking: lo such that model_grads(m)[lo, n_params) holds
 *       this step's gradient (n_params: nothing yet; 0: all of it). The caller may read and
 *       change that part (an all-reduce in place) and nothing below lo.
 *   model_grads_upload_range(m, lo, hi)  the host mirror's [lo, hi) (inside the ready part) to
 *       the device gradient, asynchronously; the update and every later step see it.
 *   model_train_end(m)  waits for the step, returns the mean loss; in host sync mode downloads
 *       grads and bn as model_train_step does.
 *
 * On the CPU the whole step runs in model_train_begin (the host vectors are the vectors): the
 * gradient is ready at once (0), uploads do nothing. Errors (all programming errors, they die):
 * begin while a step is open, NULL x on the CPU or with nothing staged, MODEL_STAGE_GRADS in host
 * sync mode, ready or upload outside a step begun with MODEL_STAGE_GRADS, a range not ready,
 * any other model_* call on the model between begin and end except the staging ones below. */
enum { MODEL_STAGE_GRADS = 1 };
void model_train_begin(model *m, const float *x, const int *y, int flags);
size_t model_grads_host_ready(model *m);
void model_grads_upload_range(model *m, size_t lo, size_t hi);
float model_train_end(model *m);

/* Staging the next minibatch on a GPU, while a step runs: model_stage_buffers gives page-locked
 * buffers x (batch, c, h, w) and y (batch) the caller fills (waiting, if needed, until the previous
 * staging copy has read them) and returns 1; model_stage_batch(m, tag) copies them to the device's
 * second input slot on a copy stream, under tag (>= 0: the caller's name for that minibatch, its
 * data step); model_train_begin(m, NULL, NULL, ...) then trains on it. model_staged_tag: the tag
 * of the minibatch staged and not yet used, or -1; a step on an explicit x (model_train_step, or
 * begin with x) drops it, so a staged minibatch is used at most once and only when asked for.
 * On the CPU nothing is staged: model_stage_buffers returns 0 (x, y NULL), model_staged_tag -1,
 * model_stage_batch dies. */
int model_stage_buffers(model *m, float **x, int **y);
void model_stage_batch(model *m, long tag);
long model_staged_tag(const model *m);

/* The GPU network of a MODEL_CUDA model (cuda/gpu.h), for cuda/gpucomm.h; NULL on the CPU. */
struct gpu_model *model_gpu(model *m);

/* ---- For tests: no module of dsgd-run calls these; test/test_model.c, test_linear.c and
 * test/gpu/ check the network through them (names, shapes and offsets of the flat vectors, the
 * logits, the spec and mode a model keeps). ---------------------------------------------------- */

/* Trainable tensors (and, separately, BN running-stat tensors) with names, shapes, offsets. */
int model_n_tensors(const model *m);
const model_tensor *model_tensor_at(const model *m, int i);
int model_n_bn_tensors(const model *m);
const model_tensor *model_bn_tensor_at(const model *m, int i);

/* n_params (and, if n_bn is not NULL, n_bn) the network of s would have, without building it;
 * 0 if s is invalid. Width 64, 3 input channels, ImageNet stem, 1000 classes: 11,689,512, as
 * torchvision.models.resnet18. MODEL_LINEAR: n_classes (in_c*in_h*in_w + 1), n_bn 0. */
size_t model_spec_n_params(const model_spec *s, size_t *n_bn);

/* The spec the model was created with. */
const model_spec *model_get_spec(const model *m);

/* Logits (rows, n_classes), row-major, of the last model_train_step (eval = 0, batch rows) or
 * model_eval (eval = 1, eval_batch rows, the first n_valid meaningful). Valid until the next
 * call of the same function. */
const float *model_logits(const model *m, int eval);

/* Host sync mode: 1 on, 0 off (model_set_host_sync). */
int model_host_sync(const model *m);

#ifdef __cplusplus
}
#endif

#endif
