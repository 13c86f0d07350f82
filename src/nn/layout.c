/* layout.c — the parameter layout of layout.h: torchvision's tensor names, shapes and flat
 * offsets of ResNet-18 (model.c's header: the network) and of the linear model, in state_dict
 * order; the activation shapes of every block; the batch checks. Plain C, no library types:
 * the CPU backend (model.c, model_build.c) and the GPU backend (cuda/) share it. */
#include "nn/layout.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Append the tensor "name.suffix" to params (bn = 0) or to the BN running statistics in bn (bn = 1,
 * kind unused); returns its offset there. */
static size_t add_tensor(nn_layout *L, int bn, tensor_kind kind, const char *name, const char *suffix, int ndim, int d0,
                         int d1, int d2, int d3) {
    int *count = bn ? &L->n_bn_tensors : &L->n_tensors;
    if (*count >= (bn ? MAX_BN_TENSORS : MAX_TENSORS)) DIE("too many %stensors", bn ? "BN " : "");
    const int i = (*count)++;
    model_tensor *t = bn ? &L->bn_tensors[i] : &L->tensors[i];
    size_t *total = bn ? &L->n_bn : &L->n_params;
    char *stored = bn ? L->bn_names[i] : L->names[i];
    snprintf(stored, NAME_LEN, "%s.%s", name, suffix);
    t->name = stored;
    t->ndim = ndim;
    int d[4] = {d0, d1, d2, d3};
    t->n = 1;
    for (int k = 0; k < 4; k++) {
        t->shape[k] = k < ndim ? d[k] : 0;
        if (k < ndim) t->n *= (size_t)d[k];
    }
    t->offset = *total;
    if (!bn) L->kind[i] = kind;
    *total += t->n;
    return t->offset;
}

/* conv weight (O, I, k, k). */
static size_t add_conv(nn_layout *L, const char *name, int o, int i, int k) {
    return add_tensor(L, 0, T_CONV, name, "weight", 4, o, i, k, k);
}

/* BN weight, bias (C) in params; running_mean, running_var (C) in bn. */
static void add_bn(nn_layout *L, const char *name, int ch, size_t *g, size_t *b, size_t *rm, size_t *rv) {
    size_t *dst[4] = {g, b, rm, rv};
    const char *suffix[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0; k < 4; k++)
        *dst[k] = add_tensor(L, k >= 2, k == 0 ? T_BN_WEIGHT : T_BN_BIAS, name, suffix[k], 1, ch, 0, 0, 0);
}

static int out_size(int i, int k, int s, int p) { return (i + 2 * p - k) / s + 1; }

int nn_layout_build(nn_layout *L, const model_spec *s, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->s = *s;
    if (s->arch == MODEL_LINEAR) {
        if (s->in_c < 1 || s->in_h < 1 || s->in_w < 1 || s->n_classes < 1)
            return seterr(err, errlen, "model: linear: input %dx%dx%d, %d classes: all must be >= 1", s->in_c, s->in_h,
                          s->in_w, s->n_classes);
        const long feat = (long)s->in_c * s->in_h * s->in_w;
        if (feat > INT_MAX)
            return seterr(err, errlen, "model: linear: input %dx%dx%d has more than %d features", s->in_c, s->in_h,
                          s->in_w, INT_MAX);
        L->feat = (int)feat;
        L->fc_w = add_tensor(L, 0, T_FC_WEIGHT, "fc", "weight", 2, s->n_classes, L->feat, 0, 0);
        L->fc_b = add_tensor(L, 0, T_FC_BIAS, "fc", "bias", 1, s->n_classes, 0, 0, 0);
        return 0;
    }
    if (s->arch != MODEL_RESNET18) return seterr(err, errlen, "model: unknown architecture %d", (int)s->arch);
    if (s->width < 1 || s->in_c < 1 || s->in_h < 1 || s->in_w < 1 || s->n_classes < 1)
        return seterr(err, errlen, "model: width %d, input %dx%dx%d, %d classes: all must be >= 1", s->width,
                      s->in_c, s->in_h, s->in_w, s->n_classes);
    if (s->stem != MODEL_STEM_CIFAR && s->stem != MODEL_STEM_IMAGENET)
        return seterr(err, errlen, "model: unknown stem %d", (int)s->stem);
    const int w = s->width;
    const int imagenet = s->stem == MODEL_STEM_IMAGENET;
    L->stem_k = imagenet ? 7 : 3;
    L->stem_stride = imagenet ? 2 : 1;
    L->stem_pad = imagenet ? 3 : 1;
    L->c0 = w;
    L->h0 = out_size(s->in_h, L->stem_k, L->stem_stride, L->stem_pad);
    L->w0 = out_size(s->in_w, L->stem_k, L->stem_stride, L->stem_pad);
    L->h1 = imagenet ? out_size(L->h0, 3, 2, 1) : L->h0;
    L->w1 = imagenet ? out_size(L->w0, 3, 2, 1) : L->w0;
    if (L->h0 < 1 || L->w0 < 1 || L->h1 < 1 || L->w1 < 1)
        return seterr(err, errlen, "model: input %dx%d too small for the stem", s->in_h, s->in_w);

    L->conv1 = add_conv(L, "conv1", w, s->in_c, L->stem_k);
    add_bn(L, "bn1", w, &L->bn1_g, &L->bn1_b, &L->bn1_rm, &L->bn1_rv);
    int cin = w, h = L->h1, wd = L->w1;
    for (int i = 0; i < N_BLOCKS; i++) {
        block_def *b = &L->blk[i];
        int stage = i / 2;
        snprintf(b->prefix, sizeof b->prefix, "layer%d.%d", stage + 1, i % 2);
        const char *sub[6] = {"conv1", "bn1", "conv2", "bn2", "downsample.0", "downsample.1"};
        for (int k = 0; k < 6; k++) snprintf(b->lname[k], NAME_LEN, "%s.%s", b->prefix, sub[k]);
        b->cin = cin;
        b->cout = w << stage;
        b->stride = (stage > 0 && i % 2 == 0) ? 2 : 1;
        b->down = b->stride != 1 || b->cin != b->cout;
        b->ih = h, b->iw = wd;
        b->oh = out_size(h, 3, b->stride, 1);
        b->ow = out_size(wd, 3, b->stride, 1);
        b->w1 = add_conv(L, b->lname[0], b->cout, b->cin, 3);
        add_bn(L, b->lname[1], b->cout, &b->g1, &b->b1, &b->rm1, &b->rv1);
        b->w2 = add_conv(L, b->lname[2], b->cout, b->cout, 3);
        add_bn(L, b->lname[3], b->cout, &b->g2, &b->b2, &b->rm2, &b->rv2);
        if (b->down) {
            b->wd = add_conv(L, b->lname[4], b->cout, b->cin, 1);
            add_bn(L, b->lname[5], b->cout, &b->gd, &b->bd, &b->rmd, &b->rvd);
        }
        cin = b->cout, h = b->oh, wd = b->ow;
    }
    L->feat = cin;
    L->fc_w = add_tensor(L, 0, T_FC_WEIGHT, "fc", "weight", 2, s->n_classes, L->feat, 0, 0);
    L->fc_b = add_tensor(L, 0, T_FC_BIAS, "fc", "bias", 1, s->n_classes, 0, 0, 0);
    return 0;
}

int nn_layout_check_batches(const nn_layout *L, char *err, size_t errlen) {
    const model_spec *s = &L->s;
    if (s->batch < 1) return seterr(err, errlen, "model: training batch %d must be >= 1", s->batch);
    if (s->eval_batch < 0) return seterr(err, errlen, "model: eval_batch %d must be >= 0", s->eval_batch);
    const block_def *last = &L->blk[N_BLOCKS - 1];
    if (s->arch == MODEL_RESNET18 && (long)s->batch * last->oh * last->ow < 2)
        return seterr(err, errlen, "model: batch %d with a %dx%d last stage leaves one value per BN channel", s->batch,
                      last->oh, last->ow);
    return 0;
}

size_t model_spec_n_params(const model_spec *s, size_t *n_bn) {
    nn_layout *L = xmalloc(sizeof *L);
    char err[ERRLEN];
    size_t n = 0;
    if (nn_layout_build(L, s, err, sizeof err) == 0) {
        n = L->n_params;
        if (n_bn) *n_bn = L->n_bn;
    }
    free(L);
    return n;
}

size_t model_spec_activation_floats(const model_spec *s) {
    nn_layout *L = xmalloc(sizeof *L);
    char err[ERRLEN];
    size_t n = 0;
    if (nn_layout_build(L, s, err, sizeof err) == 0) {
        n = (size_t)s->n_classes + (s->arch == MODEL_LINEAR ? (size_t)L->feat : 0);
        if (s->arch == MODEL_RESNET18) /* the stem's output, the max-pool's (ImageNet stem), the pooled features */
            n += (size_t)L->c0 * L->h0 * L->w0 + (L->stem_stride == 2 ? (size_t)L->c0 * L->h1 * L->w1 : 0) + (size_t)L->feat;
        for (int i = 0; s->arch == MODEL_RESNET18 && i < N_BLOCKS; i++) {
            const block_def *b = &L->blk[i];
            n += (size_t)(2 + b->down) * b->cout * b->oh * b->ow;
        }
    }
    free(L);
    return n;
}
