/* model.h — the network every method trains: ResNet-18 (He et al. 2016, as torchvision builds
 * it) on the CPU through oneDNN, or (model_spec.arch = MODEL_LINEAR) multinomial logistic
 * regression, a small convex model on which the distributed-method tests run in seconds. The
 * distributed methods see only three flat float vectors:
 *
 *   params  (n_params)  every trainable tensor, one after the other (model_tensor_info)
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

typedef enum { MODEL_STEM_CIFAR = 0, MODEL_STEM_IMAGENET = 1 } model_stem;

/* MODEL_RESNET18 is 0 so that a zero-initialised spec keeps meaning ResNet-18.
 * MODEL_LINEAR: logits = W x + b on the flattened input (x.view(batch, -1) of (c, h, w)), the
 * whole of torch.nn.Linear(in_c*in_h*in_w, n_classes); params are "fc.weight" (n_classes,
 * in_c*in_h*in_w) then "fc.bias" (n_classes); no BN (n_bn = 0, model_bn a valid pointer to
 * nothing); width and stem are ignored. */
typedef enum { MODEL_RESNET18 = 0, MODEL_LINEAR = 1 } model_arch;

typedef struct {
    model_arch arch;    /* network: ResNet-18 (0, default) or multinomial logistic regression */
    int width;          /* channels of stage 1 (w); stages have w, 2w, 4w, 8w */
    model_stem stem;    /* CIFAR: 3x3/1 conv; ImageNet: 7x7/2 conv + 3x3/2 max-pool */
    int in_c, in_h, in_w;
    int n_classes;
    int batch;          /* training minibatch b */
    int eval_batch;     /* evaluation minibatch */
    int threads;        /* compute threads (OpenMP) */
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

/* Trainable tensors (and, separately, BN running-stat tensors) with names, shapes, offsets. */
int model_n_tensors(const model *m);
const model_tensor *model_tensor_at(const model *m, int i);
int model_n_bn_tensors(const model *m);
const model_tensor *model_bn_tensor_at(const model *m, int i);

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

/* ---- additions (src/nn owner); the declarations above are the original contract ---- */

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

/* "resnet18" or "linear" (the experiment file's model.arch spelling); "?" for another value. */
const char *model_arch_name(model_arch a);

/* "oneDNN x.y.z" — the backend library the model runs on, into buf. */
void model_backend_version(char *buf, size_t n);

#endif
