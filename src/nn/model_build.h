/* model_build.h — model_build.c's exports, for model.c: the CPU networks' construction. */
#ifndef DSGD_NN_MODEL_BUILD_H
#define DSGD_NN_MODEL_BUILD_H

#include "nn/model_state.h"

/* What every network for batch n has, and the linear model's whole network (no layers): logits,
 * probabilities, per-sample losses and (training) the logit gradient. */
void nn_net_head(model *m, net *t, nn_mode mode, int n);
/* Build every layer and buffer of one ResNet-18 network (training or evaluation) for batch n on
 * m->ctx; 0, or -1 with err (oneDNN's refusal, naming the layer). nn_net_free releases it
 * (also a partly built one). */
int nn_net_build(model *m, net *t, nn_mode mode, int n, char *err, size_t errlen);
/* Safe on a linear net: the layer structs are zero, and every *_free accepts that. */
void nn_net_free(net *t);

#endif
