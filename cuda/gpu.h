/* gpu.h — the GPU backend (cuda/: CUDA runtime, cuDNN, cuBLAS and our kernels) as the rest of
 * dsgd-run sees it. Plain C. Implemented by the .cu files of cuda/ in a `make CUDA=1` build and by
 * cuda/nogpu.c in a CPU-only build, where every entry point reports that the backend was not
 * built. Only src/nn/model.c (the model.h contract on a GPU), src/main.c and src/run/setup.c
 * (device choice) call it; the distributed methods never do.
 *
 * Memory. A gpu_model owns device copies of the flat vectors of model.h (params, grads, bn, in
 * the same layout, fp32) plus the Nesterov velocity, every activation, workspace and cuDNN /
 * cuBLAS handle, all allocated by gpu_model_create; the entry points below allocate nothing.
 * Host pointers passed in may be pageable or pinned (gpu_host_alloc: faster copies).
 *
 * Threads. Every entry point makes the model's device current (cudaSetDevice) and runs on the
 * model's own stream (the overlap functions below also on its two copy streams), so a model may
 * be used from another thread than the one that built it (the parameter server's evaluation
 * thread), one thread at a time.
 *
 * Errors. gpu_select and gpu_model_create return an error string (no GPU, out of memory, an
 * unsupported shape: the operation, the layer and its shapes, the library's status string).
 * A CUDA, cuDNN or cuBLAS failure while training is a fault of the device or of this code: the
 * process prints the operation, layer, shapes and status and aborts (like DNNL_CHECK), and
 * MPI's launcher takes the other ranks down. */
#ifndef DSGD_CUDA_GPU_H
#define DSGD_CUDA_GPU_H

#include <stddef.h>

#include "nn/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Arithmetic of convolutions and matrix products. GPU_FP32: IEEE fp32 everywhere (cuDNN
 * CUDNN_FMA_MATH, cuBLAS CUBLAS_DEFAULT_MATH with TF32 off): the paper's setting and the one the
 * CPU comparison holds to 1e-5. GPU_TF32: tensor cores with TF32 inputs (10-bit mantissa) for
 * convolutions and the fc layer, fp32 storage. GPU_BF16: bf16 activations and weight copies
 * with fp32 master weights, gradients and BN (mixed precision). */
typedef enum { GPU_FP32 = 0, GPU_TF32 = 1, GPU_BF16 = 2 } gpu_precision;

/* Which flat vectors a copy moves (bit mask). */
enum { GPU_PARAMS = 1, GPU_GRADS = 2, GPU_BN = 4 };

/* 1 in a `make CUDA=1` build, 0 in a CPU-only one. */
int gpu_built(void);

/* "CUDA runtime 13.0, driver 13.0, cuDNN 9.19.0, cuBLAS 13.1.0" or "GPU backend not built". */
void gpu_version(char *buf, size_t n);

/* The node-local rank the launcher gives this process in the environment, before MPI_Init: the
 * first set of OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), MPI_LOCALRANKID (MPICH / Intel MPI Hydra),
 * PMI_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK (MVAPICH2), SLURM_LOCALID (srun; last, since ranks
 * that mpiexec starts inside a Slurm job inherit the batch step's). *var names it. -1 if none.
 * Plain getenv: no CUDA call. */
int gpu_launcher_local_rank(const char **var);

/* Before MPI_Init (src/main.c): make GPU (launcher local rank mod count) current, so that a
 * CUDA-aware MPI creates its context on this rank's GPU instead of every rank's on GPU 0 — only
 * in a process that will train with device = "cuda" (gpu_early_wanted, on this process's command
 * line from /proc/self/cmdline): since CUDA 12 cudaSetDevice creates the primary context (~0.5 s,
 * ~0.5 GB of device memory), which a device = "cpu" rank, --help or --version must not pay.
 * Returns the device, or -1 (not a cuda run, no launcher variable, no GPU, no /proc, or
 * DSGD_GPU_EARLY=0 in the environment): then gpu_select alone chooses. */
int gpu_select_early(void);
/* gpu_select_early on the command line argv[0..argc) (tests). */
int gpu_select_early_argv(int argc, char *const *argv);
/* 1 if dsgd-run's command line argv[0..argc) trains with device = "cuda": the last
 * `--set device=...` (quoted or not), else the experiment file's top-level `device` (libconfig;
 * absent, unreadable or unparsable: 0). 0 with --help, --version, --status, --print-config,
 * --check or --pack. Plain C, no CUDA call. */
int gpu_early_wanted(int argc, char *const *argv);

/* Choose this process's GPU: visible device local_rank mod count, where local_rank is the
 * rank's index among the ranks of its node (MPI_Comm_split_type shared) and count the devices
 * the CUDA runtime shows (CUDA_VISIBLE_DEVICES respected) — unless gpu_select_early chose one,
 * which stands; when the two disagree, desc says so and a warning goes to stderr. Fills desc, e.g.
 * "GPU 1 of 4: NVIDIA H200 (sm_90, 139.8 GiB)", plus ", shared by 2 ranks" when local_size >
 * count. Returns 0, or EXIT_RUNTIME with err ("no CUDA GPU visible: cudaGetDeviceCount: ...").
 * Must precede gpu_model_create and gpu_host_alloc. */
int gpu_select(int local_rank, int local_size, char *desc, size_t desclen, char *err, size_t errlen);

/* Zeroed page-locked host memory (cudaHostAlloc) for buffers copied to and from the device
 * every step; dies with the size on failure. gpu_host_free(NULL) is a no-op. */
void *gpu_host_alloc(size_t nbytes);
void gpu_host_free(void *p);

typedef struct gpu_model gpu_model;

/* Build the network of L (ResNet-18 or the linear model, L->s.batch training rows and
 * L->s.eval_batch evaluation rows, eval_batch 0: no evaluation network) on the current GPU:
 * descriptors, convolution algorithms (cudnnFind*, fastest whose workspace fits, one workspace
 * sized to the largest choice), every buffer. params, grads, bn and velocity start at zero.
 * Returns NULL with err filled. */
gpu_model *gpu_model_create(const nn_layout *L, gpu_precision prec, char *err, size_t errlen);
void gpu_model_free(gpu_model *g);

/* Host -> device copies of the vectors in `which` (GPU_PARAMS, GPU_GRADS, GPU_BN; lengths
 * L->n_params, L->n_params, L->n_bn); pointers of vectors not in `which` are ignored. Returns
 * when the copy is done. */
void gpu_model_upload(gpu_model *g, int which, const float *params, const float *grads, const float *bn);
/* Device -> host copies, likewise. Returns when the data is on the host. */
void gpu_model_download(gpu_model *g, int which, float *params, float *grads, float *bn);
/* velocity := 0 on the device. */
void gpu_model_zero_velocity(gpu_model *g);
/* The Nesterov velocity (L->n_params floats) host -> device (upload) or device -> host
 * (download); return when the copy is done (checkpoints: src/train/checkpoint.h). */
void gpu_model_velocity_upload(gpu_model *g, const float *v);
void gpu_model_velocity_download(gpu_model *g, float *v);

/* One training step on the device parameters, as model_train_step: x (batch, c, h, w) fp32 and
 * y (batch) in [0, classes) on the host; overwrites the device gradients with those of the mean
 * softmax cross-entropy, updates the device BN running statistics (momentum 0.1, unbiased
 * variance, as PyTorch), returns the mean loss (waits for the step to finish). */
float gpu_model_train_step(gpu_model *g, const float *x, const int *y);

/* ---- The training step in parts: copies and communication overlapped with the GPU's work ----
 *
 * gpu_model_train_step is gpu_model_train_begin(g, x, y, NULL) then gpu_model_train_end(g): the
 * same kernels in the same order, so the same bits. In between, the caller may take the gradient
 * to the host piece by piece while the backward pass still runs, and put it back:
 *
 *   gpu_model_train_begin   enqueues the step on the compute stream and returns at once; with
 *                           grads_host, each gradient group (the fc layer, then each BasicBlock
 *                           from layer4.1 down to layer1.0, then the stem: the parts of the flat
 *                           vector the backward pass finishes one after the other, from the end
 *                           of the vector down to 0; the linear model is one group) is copied to
 *                           grads_host[lo, hi) on a device-to-host stream as soon as it is final;
 *   gpu_model_grads_ready   without blocking: lo such that grads_host[lo, n_params) holds this
 *                           step's gradient (n_params: nothing yet, 0: all of it);
 *   gpu_model_grads_upload  enqueues grads_host[lo, hi) -> the device gradient on a
 *                           host-to-device stream; [lo, hi) must lie in the part that is ready;
 *   gpu_model_train_end     waits for the step; every later use of the model (the update, the
 *                           next step) comes after the copies out and the uploads; the compute
 *                           stream is idle on return. Returns the mean loss.
 *
 * grads_host: n_params floats, page-locked (gpu_host_alloc), left alone by the caller except for
 * the ready part until gpu_model_train_end; x and y (when given) until gpu_model_train_end too.
 * Between begin and end no other entry point may be called on g except the staging ones below
 * (they die: "... between gpu_model_train_begin and gpu_model_train_end").
 *
 * Staging the next minibatch: the training network has two device input slots. While a step runs
 * on one, the caller fills the pinned buffers gpu_model_stage_buffers returns (*x (batch, c, h, w)
 * fp32, *y (batch) in [0, classes); it waits for the previous staging copy to finish reading
 * them) and gpu_model_stage(g, tag) copies them into the other slot on the host-to-device stream,
 * once the step that last read that slot is done. gpu_model_train_begin(g, NULL, NULL, ...) then
 * trains on that slot (the compute stream waits for the copy) and clears the tag; a step given x
 * drops anything staged. gpu_model_staged: the tag (>= 0, the caller's name for the minibatch: its
 * data step) of what is staged, -1 if nothing. Labels out of range die, as in a step. */
void gpu_model_train_begin(gpu_model *g, const float *x, const int *y, float *grads_host);

/* A hook on the gradient groups of the next step (comm = "nccl" overlapped: cuda/gpucomm.h
 * gpucomm_grads_begin). gpu_model_train_begin calls hook(ctx, j, n_groups, lo, hi, computed) on
 * the host, while it enqueues the backward pass, once per group in the order above, right after
 * the group's last kernel: grads [lo, hi) (device, fp32) are final once the event `computed` (a
 * cudaEvent_t, recorded on the compute stream just before the call) completes, so work on another
 * stream that reads or writes them must first wait on it (cudaStreamWaitEvent); that stream's
 * work must also be waited for by the compute stream before the update (the hook's owner does
 * this). The hook holds for one step: gpu_model_train_end clears it. Not between begin and end. */
typedef void (*gpu_group_hook)(void *ctx, int j, int n_groups, size_t lo, size_t hi, void *computed);
void gpu_model_set_group_hook(gpu_model *g, gpu_group_hook hook, void *ctx);
size_t gpu_model_grads_ready(gpu_model *g);
void gpu_model_grads_upload(gpu_model *g, const float *grads_host, size_t lo, size_t hi);
float gpu_model_train_end(gpu_model *g);
void gpu_model_stage_buffers(gpu_model *g, float **x, int **y);
void gpu_model_stage(gpu_model *g, long tag);
long gpu_model_staged(const gpu_model *g);

/* "" or why g's BN / max-pooling layers run on fp32 tensors with casts around them in bf16
 * (cuDNN refused bf16 for them, or DSGD_BF16_FALLBACK: cuda/layers.h gpu_bf16_fallback), e.g.
 * "BN: cuDNN refuses bf16 batch normalisation: CUDNN_STATUS_NOT_SUPPORTED". */
const char *gpu_model_bf16_fallback(const gpu_model *g);

/* How many convolution directions of g (training and evaluation networks) run a Winograd or FFT
 * algorithm (layers.h gpu_conv_transform): the tests widen their fp32 tolerances when any does. */
int gpu_model_conv_transforms(const gpu_model *g);

/* Inference with the running BN statistics on the first n_valid (<= eval_batch) rows of x
 * (eval_batch, c, h, w) on the host; logits (n_valid, classes) row-major written to the host. */
void gpu_model_eval(gpu_model *g, const float *x, int n_valid, float *logits);

/* Logits (batch, classes) of the last gpu_model_train_step, to the host. */
void gpu_model_train_logits(gpu_model *g, float *logits);

/* The update of sgd_update (src/optim/sgd.h) on the device: params, grads and the model's
 * velocity, one kernel. Returns 1 if every updated parameter is finite, else 0 — and so
 * synchronises the stream, the step's second synchronisation after the loss read. With
 * DSGD_GPU_SYNC=step in the environment at gpu_model_create (docs/gpu.md, "Switches") it does
 * not: the flag is read at the next synchronisation (the next step's loss), so a non-finite
 * update of step t returns 1, step t + 1's gpu_model_train_end returns NaN and its update returns
 * 0 without updating (the run stops one step later, at the same parameters); stderr names update
 * t, and gpu_model_nonfinite_update returns it. */
int gpu_model_sgd_update(gpu_model *g, float alpha, float mu, float lambda, int nesterov);

/* DSGD_GPU_SYNC=step: the first update (1-based count of gpu_model_sgd_update calls that
 * updated) found non-finite at a synchronisation since the parameters were last uploaded; 0 none
 * (always 0 with the default DSGD_GPU_SYNC=update, whose update returns its own flag). */
long gpu_model_nonfinite_update(const gpu_model *g);

/* Training steps of g run as a CUDA graph so far (DSGD_GPU_GRAPH=1 in the environment at
 * gpu_model_create, docs/gpu.md "Switches": every step after the first one that neither stages
 * its gradient to the host nor has a group hook; cuda/model.cu, step_graph_launch); 0 with the
 * switch off. */
long gpu_model_graph_steps(const gpu_model *g);

/* The device vector `which` (exactly one of GPU_PARAMS, GPU_GRADS, GPU_BN): n_params, n_params or
 * n_bn fp32 values in device memory of g's GPU, for communication that reads and writes them in
 * place (NCCL, CUDA-aware MPI: cuda/gpucomm.h, src/comm/reduce.h). The pointer is
 * valid until gpu_model_free. Work on it belongs on g's stream or after it is synchronised (every
 * entry point above returns with the stream idle, except gpu_model_train_begin, gpu_model_grads_*
 * and the staging ones: the step is done at gpu_model_train_end). Dies on another `which`. */
float *gpu_model_vector(gpu_model *g, int which);

#ifdef __cplusplus
}
#endif

#endif
