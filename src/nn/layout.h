/* layout.h — the parameter layout of the networks of model.h, shared by the CPU backend
 * (src/nn/model.c, oneDNN) and the GPU backend (cuda/, cuDNN): torchvision's tensor names,
 * shapes and offsets into the flat params / bn vectors, and the activation shapes of every
 * block. Internal to the backends; the methods see only model.h. Plain C, no library types, so
 * that nvcc-compiled code includes it too. */
#ifndef DSGD_NN_LAYOUT_H
#define DSGD_NN_LAYOUT_H

#include <stddef.h>

#include "nn/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define N_BLOCKS 8
#define MAX_TENSORS 64
#define MAX_BN_TENSORS 48
#define NAME_LEN 48

typedef enum { T_CONV, T_BN_WEIGHT, T_BN_BIAS, T_FC_WEIGHT, T_FC_BIAS } tensor_kind;

/* Shapes and flat offsets of one BasicBlock (torchvision names: layer{s}.{i}.*). */
typedef struct {
    char prefix[16];                        /* "layer2.0" */
    char lname[6][NAME_LEN];                /* conv1, bn1, conv2, bn2, downsample.0, downsample.1 */
    int cin, cout, stride, down;
    int ih, iw, oh, ow;
    size_t w1, g1, b1, w2, g2, b2, wd, gd, bd; /* params */
    size_t rm1, rv1, rm2, rv2, rmd, rvd;       /* running statistics in bn */
} block_def;

/* The network's parameter layout, independent of batch and oneDNN. */
typedef struct {
    model_spec s;
    size_t n_params, n_bn;
    int n_tensors, n_bn_tensors;
    model_tensor tensors[MAX_TENSORS];
    tensor_kind kind[MAX_TENSORS];
    model_tensor bn_tensors[MAX_BN_TENSORS];
    char names[MAX_TENSORS][NAME_LEN];
    char bn_names[MAX_BN_TENSORS][NAME_LEN];
    int c0, h0, w0;                         /* stem conv output (c0 = w) */
    int h1, w1;                             /* stage-1 input (after max-pool for ImageNet) */
    int stem_k, stem_stride, stem_pad;
    size_t conv1, bn1_g, bn1_b, bn1_rm, bn1_rv;
    block_def blk[N_BLOCKS];
    int feat;                               /* 8w: fc input */
    size_t fc_w, fc_b;
} nn_layout;

/* Fill L from s (every shape, name and offset; nothing allocated). Returns 0, or EXIT_BADINPUT
 * with err saying which field of s is out of range. */
int nn_layout_build(nn_layout *L, const model_spec *s, char *err, size_t errlen);
/* The batches of L->s: training batch >= 1, eval_batch >= 0 and, for ResNet-18, more than one
 * value per BN channel in the last stage (BN in training; PyTorch refuses it too). Returns 0, or
 * EXIT_BADINPUT with err; model_create and gpu_model_create check them. */
int nn_layout_check_batches(const nn_layout *L, char *err, size_t errlen);
/* Dies unless every label y[0..n) is in [0, L->s.n_classes). */
void nn_check_labels(const nn_layout *L, const int *y, int n);

#ifdef __cplusplus
}
#endif

#endif
