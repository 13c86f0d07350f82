/* model_state.h — the CPU backend's model, for src/nn/model*.c only: one network's layers and
 * buffers (net, block_run) and struct model, which model.c (the model's calls) and model_build.c
 * (model_build.h: the networks' construction) act on. Types only: it belongs to neither file. */
#ifndef DSGD_NN_MODEL_STATE_H
#define DSGD_NN_MODEL_STATE_H

#include "nn/layers.h"
#include "nn/layout.h"
#include "nn/model.h"
#include "gpu.h"

/* One BasicBlock's layers and buffers in a network. */
typedef struct {
    conv_layer conv1, conv2, convd;
    bn_layer bn1, bn2, bnd;
    add_layer res;                          /* y = relu(bn2 + shortcut) */
    add_layer acc;                          /* dx += gradient through the shortcut (training) */
    float *c1, *a1, *c2, *b2, *y, *cd, *sd; /* b2: bn2 output; eval: c1 == a1, c2 == b2, cd == sd;
                                               b2 == y where the add may run in place */
} block_run;

typedef struct {
    int n;
    int built;
    nn_reorder in;                          /* user (n, c, h, w) -> stem conv input format */
    int in_direct;                          /* the stem reads x as given */
    conv_layer conv1;
    bn_layer bn1;
    pool_layer maxpool;
    block_run b[N_BLOCKS];
    pool_layer gap;
    nn_reorder gap_out, gap_in;             /* gap output format <-> plain (n, 8w) */
    float *x, *c0, *a0, *p0;                /* stem activations (x: reordered input) */
    float *gap_o, *feat, *logits, *probs, *losses;
    float *d_gap_o, *d_feat, *d_logits;     /* training */
    float *g[2], *t[3];                     /* training gradient buffers */
    float *e[5];                            /* evaluation: rotating activation buffers */
    float *owned[128];                      /* every buffer this network allocated */
    int n_owned;
} net;

struct model {
    nn_layout L;
    nn_ctx ctx;
    float *params, *grads, *bn;  /* the vectors (CPU) or their page-locked host mirrors (GPU) */
    float *velocity;             /* model_sgd_update's momentum (CPU; on a GPU it is on the device) */
    net train, eval;
    gpu_model *gpu;              /* MODEL_CUDA: the network on the device (cuda/gpu.h) */
    int host_sync;               /* model.h "devices": 1 host mirrors are the truth, 0 the device */
    int in_step;                 /* between model_train_begin and model_train_end */
    float step_loss;             /* CPU: the loss model_train_begin computed */
};

#endif
