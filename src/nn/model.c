/* model.c — ResNet-18 (He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1,
 * BasicBlock with the projection shortcut "option B" where shape changes) exactly as torchvision
 * builds it (torchvision/models/resnet.py: ResNet, BasicBlock, _make_layer), at width w, on the
 * layers of src/nn/layers.h. See model.h for the public contract.
 *
 * Two copies of the network are built in model_create: `train` for the training minibatch
 * (forward_training primitives, BN with batch statistics, backward primitives) and `eval` for
 * eval_batch (forward_inference, BN with the running statistics): their layers and buffers in
 * model_build.c (model_build.h), on the parameter layout of layout.c. Every buffer is
 * allocated there; model_train_step and model_eval only point oneDNN memory objects at them.
 *
 *   stem:   x -> conv1 -> bn1+ReLU -> [maxpool 3x3/2]                (ImageNet stem only)
 *   block:  x -> conv1 -> bn1+ReLU -> conv2 -> bn2 -> (+ shortcut) -> ReLU -> y
 *           shortcut = x, or downsample.1(downsample.0(x)) = BN(conv1x1/s(x))
 *   head:   global average pool -> fc -> softmax cross-entropy (mean over the batch)
 *
 * MODEL_LINEAR (multinomial logistic regression) shares the layout (tensors "fc.weight",
 * "fc.bias", fan_in = in_c*in_h*in_w), model_init, the scoring of model_eval and the plain-C
 * fc_* and softmax_xent_* of layers.h; it builds no oneDNN object. Its nets hold only logits,
 * probabilities, losses and the logit gradient; the input needs no copy, since a (B, C, H, W)
 * nchw batch already is the (B, C*H*W) row-major matrix torch's x.view(B, -1) gives. */
#include "nn/model.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/layout.h"
#include "nn/model_build.h"
#include "optim/sgd.h"
#include "gpu.h"
#include "util/util.h"

/* ---- public: create, accessors, init ------------------------------------------------------ */

/* The GPU backend's name for a precision (cuda/gpu.h), case by case rather than by a cast. */
static gpu_precision gpu_precision_of(model_precision p) {
    switch (p) {
    case MODEL_FP32: return GPU_FP32;
    case MODEL_TF32: return GPU_TF32;
    case MODEL_BF16: return GPU_BF16;
    }
    DIE("model: precision %d is none of model_precision's values", (int)p);
}

model *model_create(const model_spec *s, char *err, size_t errlen) {
    model *m = xcalloc(1, sizeof *m);
    if (nn_layout_build(&m->L, s, err, errlen) || nn_layout_check_batches(&m->L, err, errlen)) goto fail;
    m->host_sync = 1;
    if (s->device == MODEL_CUDA) {
        m->gpu = gpu_model_create(&m->L, gpu_precision_of(s->precision), err, errlen);
        if (!m->gpu) goto fail;
        /* Host-side logits for model_eval's scoring and model_logits. */
        m->train.logits = gpu_host_alloc((size_t)s->batch * s->n_classes * sizeof(float));
        m->eval.logits = gpu_host_alloc(((size_t)s->eval_batch + 1) * s->n_classes * sizeof(float));
        m->eval.probs = gpu_host_alloc(((size_t)s->eval_batch + 1) * s->n_classes * sizeof(float));
        m->eval.losses = gpu_host_alloc(((size_t)s->eval_batch + 1) * sizeof(float));
        m->eval.n = s->eval_batch;
        m->eval.built = s->eval_batch > 0;
    } else if (s->precision == MODEL_TF32) {
        seterr(err, errlen, "model: precision tf32 is for device cuda (tensor cores); the CPU backend computes in fp32 or bf16");
        goto fail;
    } else if (s->precision == MODEL_BF16 && (s->arch != MODEL_RESNET18 || !nn_bf16_native())) {
        seterr(err, errlen,
               s->arch != MODEL_RESNET18
                   ? "model: precision bf16 on the CPU is for model.arch resnet18 (its convolutions); the linear model computes in fp32"
                   : "model: precision bf16 on the CPU needs AVX512_BF16 (or AMX) instructions, and oneDNN runs %s here "
                     "(ONEDNN_MAX_CPU_ISA may cap it); use precision fp32 on this node",
               nn_isa_name());
        goto fail;
    } else if (s->threads > 0) {
        omp_set_num_threads(s->threads);
    }
    /* The vectors, or on a GPU their host mirrors (velocity's: for checkpoints); with n_bn = 0
     * (linear) bn is a valid pointer to nothing. */
    m->params = model_host_alloc(m, m->L.n_params * sizeof(float));
    m->grads = model_host_alloc(m, m->L.n_params * sizeof(float));
    m->bn = model_host_alloc(m, m->L.n_bn * sizeof(float));
    m->velocity = model_host_alloc(m, m->L.n_params * sizeof(float));
    if (!m->gpu && s->arch == MODEL_LINEAR) {
        nn_net_head(m, &m->train, NN_TRAIN, s->batch);
        if (s->eval_batch > 0) nn_net_head(m, &m->eval, NN_INFER, s->eval_batch);
    } else if (!m->gpu) {
        if (nn_ctx_init(&m->ctx, err, errlen)) goto fail;
        m->ctx.conv_bf16 = s->precision == MODEL_BF16;
        if (nn_net_build(m, &m->train, NN_TRAIN, s->batch, err, errlen)) goto fail;
        if (s->eval_batch > 0 && nn_net_build(m, &m->eval, NN_INFER, s->eval_batch, err, errlen)) goto fail;
    }
    model_init(m, 0);
    return m;
fail:
    model_free(m);
    return NULL;
}

void model_free(model *m) {
    if (!m) return;
    if (m->gpu) {
        gpu_model_free(m->gpu);
        gpu_host_free(m->train.logits), gpu_host_free(m->eval.logits), gpu_host_free(m->eval.probs),
            gpu_host_free(m->eval.losses);
    } else { /* also after a failed gpu_model_create: all zero */
        nn_net_free(&m->train);
        nn_net_free(&m->eval);
        nn_ctx_free(&m->ctx);
    }
    float *v[] = {m->params, m->grads, m->bn, m->velocity};
    for (int i = 0; i < 4; i++) model_host_free(m, v[i]);
    free(m);
}

size_t model_n_params(const model *m) { return m->L.n_params; }
float *model_params(model *m) { return m->params; }
float *model_grads(model *m) { return m->grads; }
size_t model_n_bn(const model *m) { return m->L.n_bn; }
float *model_bn(model *m) { return m->bn; }
int model_n_tensors(const model *m) { return m->L.n_tensors; }
int model_n_bn_tensors(const model *m) { return m->L.n_bn_tensors; }

const model_tensor *model_tensor_at(const model *m, int i) {
    return i >= 0 && i < m->L.n_tensors ? &m->L.tensors[i] : NULL;
}

const model_tensor *model_bn_tensor_at(const model *m, int i) {
    return i >= 0 && i < m->L.n_bn_tensors ? &m->L.bn_tensors[i] : NULL;
}

const model_spec *model_get_spec(const model *m) { return &m->L.s; }

void model_init(model *m, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    const nn_layout *L = &m->L;
    for (int i = 0; i < L->n_tensors; i++) {
        const model_tensor *t = &L->tensors[i];
        float *p = m->params + t->offset;
        switch (L->kind[i]) {
        case T_CONV: { /* kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (O k k)) */
            double std = sqrt(2.0 / ((double)t->shape[0] * t->shape[2] * t->shape[3]));
            for (size_t j = 0; j < t->n; j++) p[j] = (float)(std * rng_normal(&r));
            break;
        }
        case T_BN_WEIGHT:
            for (size_t j = 0; j < t->n; j++) p[j] = 1.0f;
            break;
        case T_BN_BIAS:
            for (size_t j = 0; j < t->n; j++) p[j] = 0.0f;
            break;
        case T_FC_WEIGHT:
        case T_FC_BIAS: { /* nn.Linear.reset_parameters: U(−1/√fan_in, 1/√fan_in), fan_in = 8w
                           * (linear: in_c*in_h*in_w) */
            double bound = 1.0 / sqrt((double)L->feat);
            for (size_t j = 0; j < t->n; j++) p[j] = (float)(bound * (2.0 * rng_uniform(&r) - 1.0));
            break;
        }
        }
    }
    for (int i = 0; i < L->n_bn_tensors; i++) {
        const model_tensor *t = &L->bn_tensors[i];
        float v = (i % 2 == 0) ? 0.0f : 1.0f; /* running_mean, running_var alternate */
        for (size_t j = 0; j < t->n; j++) m->bn[t->offset + j] = v;
    }
    memset(m->grads, 0, L->n_params * sizeof(float));
    if (m->velocity) memset(m->velocity, 0, L->n_params * sizeof(float));
    if (m->gpu) {
        gpu_model_upload(m->gpu, GPU_PARAMS | GPU_GRADS | GPU_BN, m->params, m->grads, m->bn);
        gpu_model_zero_velocity(m->gpu);
    }
}

/* ---- forward / backward ------------------------------------------------------------------- */

/* Stem, blocks, global pool, fc: logits (n, classes) in t->logits. x (n, c, h, w). */
static void net_forward(model *m, net *t, const float *x) {
    const nn_layout *L = &m->L;
    nn_ctx *c = &m->ctx;
    const float *P = m->params;
    float *B = m->bn;
    const float *xin = x;
    if (!t->in_direct) {
        nn_reorder_run(&t->in, c, t->x, x);
        xin = t->x;
    }
    conv_forward(&t->conv1, c, t->c0, xin, P + L->conv1);
    bn_forward(&t->bn1, c, t->a0, t->c0, P + L->bn1_g, P + L->bn1_b, B + L->bn1_rm, B + L->bn1_rv);
    const float *h = t->a0;
    if (L->s.stem == MODEL_STEM_IMAGENET) {
        pool_forward(&t->maxpool, c, t->p0, t->a0);
        h = t->p0;
    }
    for (int i = 0; i < N_BLOCKS; i++) {
        const block_def *d = &L->blk[i];
        block_run *r = &t->b[i];
        conv_forward(&r->conv1, c, r->c1, h, P + d->w1);
        bn_forward(&r->bn1, c, r->a1, r->c1, P + d->g1, P + d->b1, B + d->rm1, B + d->rv1);
        conv_forward(&r->conv2, c, r->c2, r->a1, P + d->w2);
        bn_forward(&r->bn2, c, r->b2, r->c2, P + d->g2, P + d->b2, B + d->rm2, B + d->rv2);
        const float *sc = h;
        if (d->down) {
            conv_forward(&r->convd, c, r->cd, h, P + d->wd);
            bn_forward(&r->bnd, c, r->sd, r->cd, P + d->gd, P + d->bd, B + d->rmd, B + d->rvd);
            sc = r->sd;
        }
        add_forward(&r->res, c, r->y, r->b2, sc);
        h = r->y;
    }
    pool_forward(&t->gap, c, t->gap_o, h);
    nn_reorder_run(&t->gap_out, c, t->feat, t->gap_o);
    fc_forward(t->logits, t->feat, P + L->fc_w, P + L->fc_b, t->n, L->feat, L->s.n_classes);
}

void nn_check_labels(const nn_layout *L, const int *y, int n) {
    for (int i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= L->s.n_classes) DIE("label %d of sample %d outside [0, %d)", y[i], i, L->s.n_classes);
}

float model_train_step(model *m, const float *x, const int *y) {
    if (m->gpu) {
        if (m->host_sync) gpu_model_upload(m->gpu, GPU_PARAMS | GPU_BN, m->params, NULL, m->bn);
        float loss = gpu_model_train_step(m->gpu, x, y);
        if (m->host_sync) gpu_model_download(m->gpu, GPU_GRADS | GPU_BN, NULL, m->grads, m->bn);
        return loss;
    }
    const nn_layout *L = &m->L;
    net *t = &m->train;
    nn_ctx *c = &m->ctx;
    const float *P = m->params;
    float *G = m->grads;
    const int n = t->n, k = L->s.n_classes;
    nn_check_labels(L, y, n);

    const int linear = L->s.arch == MODEL_LINEAR; /* x is then the (n, feat) input of the fc layer as it is */
    if (linear)
        fc_forward(t->logits, x, P + L->fc_w, P + L->fc_b, n, L->feat, k);
    else
        net_forward(m, t, x);
    float loss = softmax_xent_forward(t->probs, NULL, t->logits, y, n, k);

    softmax_xent_backward(t->d_logits, t->probs, y, n, k);
    fc_backward(linear ? NULL : t->d_feat, G + L->fc_w, G + L->fc_b, t->d_logits, linear ? x : t->feat, P + L->fc_w, n,
                L->feat, k);
    if (linear) return loss;
    nn_reorder_run(&t->gap_in, c, t->d_gap_o, t->d_feat);
    int gy = 0; /* t->g[gy]: gradient of the current block's output */
    pool_backward(&t->gap, c, t->g[gy], t->d_gap_o);
    float *T0 = t->t[0], *T1 = t->t[1], *T2 = t->t[2];
    for (int i = N_BLOCKS - 1; i >= 0; i--) {
        const block_def *d = &L->blk[i];
        block_run *r = &t->b[i];
        const float *h = i > 0 ? t->b[i - 1].y : (L->s.stem == MODEL_STEM_IMAGENET ? t->p0 : t->a0);
        float *dy = t->g[gy], *dx = t->g[1 - gy];
        add_backward(&r->res, c, dy, dy, r->y); /* dy := gradient of bn2's output and of the shortcut */
        bn_backward(&r->bn2, c, T0, G + d->g2, G + d->b2, dy, r->c2, P + d->g2, P + d->b2);
        conv_backward(&r->conv2, c, T1, G + d->w2, T0, r->a1);
        bn_backward(&r->bn1, c, T1, G + d->g1, G + d->b1, T1, r->c1, P + d->g1, P + d->b1);
        conv_backward(&r->conv1, c, dx, G + d->w1, T1, h);
        const float *dsc = dy; /* the gradient through the shortcut */
        if (d->down) {
            bn_backward(&r->bnd, c, T0, G + d->gd, G + d->bd, dy, r->cd, P + d->gd, P + d->bd);
            conv_backward(&r->convd, c, T2, G + d->wd, T0, h);
            dsc = T2;
        }
        add_forward(&r->acc, c, dx, dx, dsc);
        gy = 1 - gy;
    }
    float *d0 = t->g[gy];
    if (L->s.stem == MODEL_STEM_IMAGENET) {
        pool_backward(&t->maxpool, c, T0, d0);
        d0 = T0;
    }
    bn_backward(&t->bn1, c, d0, G + L->bn1_g, G + L->bn1_b, d0, t->c0, P + L->bn1_g, P + L->bn1_b);
    conv_backward(&t->conv1, c, NULL, G + L->conv1, d0, t->in_direct ? x : t->x);
    return loss;
}

void model_eval(model *m, const float *x, const int *y, int n_valid, double *loss_sum, long *top1, long *top5) {
    net *t = &m->eval;
    if (!t->built) DIE("model_eval on a model created with eval_batch 0");
    if (n_valid < 0 || n_valid > t->n) DIE("model_eval: n_valid %d outside [0, %d]", n_valid, t->n);
    if (n_valid == 0) return;
    const int k = m->L.s.n_classes;
    nn_check_labels(&m->L, y, n_valid);
    if (m->gpu)
        gpu_model_eval(m->gpu, x, n_valid, t->logits);
    else if (m->L.s.arch == MODEL_LINEAR) /* the padding rows need no logits */
        fc_forward(t->logits, x, m->params + m->L.fc_w, m->params + m->L.fc_b, n_valid, m->L.feat, k);
    else
        net_forward(m, t, x);
    softmax_xent_forward(t->probs, t->losses, t->logits, y, n_valid, k);
    double s = 0;
    long c1 = 0, c5 = 0;
    for (int i = 0; i < n_valid; i++) {
        s += t->losses[i];
        /* rank of the true class: classes with a larger logit, ties broken by index. A
         * non-finite logit makes every comparison false, which would rank the true class
         * first: such a sample counts as wrong (rank k). */
        const float *z = t->logits + (size_t)i * k;
        const float zy = z[y[i]];
        int rank = 0;
        for (int j = 0; j < k; j++) {
            if (!isfinite(z[j])) { rank = k; break; }
            rank += z[j] > zy || (z[j] == zy && j < y[i]);
        }
        c1 += rank < 1;
        c5 += rank < 5;
    }
    *loss_sum += s;
    *top1 += c1;
    *top5 += c5;
}

const float *model_logits(const model *m, int eval) {
    if (m->gpu && !eval) gpu_model_train_logits(m->gpu, m->train.logits);
    return eval ? m->eval.logits : m->train.logits;
}

int model_bf16_convs(const model *m, int *total, char *fp32_names, size_t n) {
    int lp = 0, all = 0;
    if (fp32_names && n) fp32_names[0] = '\0';
    if (m->gpu || m->L.s.arch != MODEL_RESNET18) {
        if (total) *total = 0;
        return 0;
    }
    const net *t = &m->train;
    const conv_layer *ls[1 + 3 * N_BLOCKS];
    ls[all++] = &t->conv1;
    for (int i = 0; i < N_BLOCKS; i++) {
        ls[all++] = &t->b[i].conv1, ls[all++] = &t->b[i].conv2;
        if (m->L.blk[i].down) ls[all++] = &t->b[i].convd;
    }
    for (int i = 0; i < all; i++) {
        if (ls[i]->lp) lp++;
        else if (fp32_names && n) {
            const size_t used = strlen(fp32_names);
            snprintf(fp32_names + used, n - used, "%s%s", used ? ", " : "", ls[i]->name);
        }
    }
    if (total) *total = all;
    return lp;
}

int model_cpu_bf16_native(void) { return nn_bf16_native(); }
const char *model_cpu_isa(void) { return nn_isa_name(); }

void model_backend_version(char *buf, size_t n) {
    const dnnl_version_t *v = dnnl_version();
    char g[256];
    gpu_version(g, sizeof g);
    snprintf(buf, n, "cpu: oneDNN %d.%d.%d (%s); cuda: %s", v->major, v->minor, v->patch, nn_isa_name(), g);
}

/* ---- devices (model.h) -------------------------------------------------------------------- */

model_device model_get_device(const model *m) { return m->gpu ? MODEL_CUDA : MODEL_CPU; }
void model_set_host_sync(model *m, int on) { m->host_sync = on != 0; }
int model_host_sync(const model *m) { return m->host_sync; }

static int gpu_bits(int which) {
    return (which & MODEL_PARAMS ? GPU_PARAMS : 0) | (which & MODEL_GRADS ? GPU_GRADS : 0) | (which & MODEL_BN ? GPU_BN : 0);
}

void model_upload(model *m, int which) {
    if (!m->gpu) return;
    if (which & (MODEL_PARAMS | MODEL_GRADS | MODEL_BN)) gpu_model_upload(m->gpu, gpu_bits(which), m->params, m->grads, m->bn);
    if (which & MODEL_VELOCITY) gpu_model_velocity_upload(m->gpu, m->velocity);
}

void model_download(model *m, int which) {
    if (!m->gpu) return;
    if (which & (MODEL_PARAMS | MODEL_GRADS | MODEL_BN)) gpu_model_download(m->gpu, gpu_bits(which), m->params, m->grads, m->bn);
    if (which & MODEL_VELOCITY) gpu_model_velocity_download(m->gpu, m->velocity);
}

float *model_velocity(model *m) { return m->velocity; }

void model_eval_begin(model *m) {
    if (m->gpu && m->host_sync) gpu_model_upload(m->gpu, GPU_PARAMS | GPU_BN, m->params, NULL, m->bn);
}

int model_sgd_update(model *m, float alpha, float mu, float lambda, int nesterov) {
    if (m->gpu) return gpu_model_sgd_update(m->gpu, alpha, mu, lambda, nesterov);
    return sgd_update(m->params, m->grads, m->velocity, m->L.n_params, alpha, mu, lambda, nesterov);
}

void *model_host_alloc(const model *m, size_t nbytes) {
    if (nbytes == 0) nbytes = 64; /* a valid pointer to nothing, as nn_alloc(0) */
    if (m->gpu) return gpu_host_alloc(nbytes);
    return nn_alloc(nbytes);
}

void model_host_free(const model *m, void *p) {
    if (m->gpu) gpu_host_free(p);
    else free(p);
}

float *model_device_vector(model *m, int which) {
    if (which != MODEL_PARAMS && which != MODEL_GRADS && which != MODEL_BN)
        DIE("model_device_vector: which = %d is not one of MODEL_PARAMS, MODEL_GRADS, MODEL_BN", which);
    if (m->gpu) return gpu_model_vector(m->gpu, gpu_bits(which));
    return which == MODEL_PARAMS ? m->params : which == MODEL_GRADS ? m->grads : m->bn;
}

struct gpu_model *model_gpu(model *m) { return m->gpu; }

/* ---- the training step in parts (model.h) ------------------------------------------------- */

void model_train_begin(model *m, const float *x, const int *y, int flags) {
    if (m->in_step) DIE("model_train_begin: the previous step was not ended (model_train_end)");
    if (m->gpu) {
        if ((flags & MODEL_STAGE_GRADS) && m->host_sync) DIE("model_train_begin: MODEL_STAGE_GRADS needs device mode");
        if (m->host_sync) gpu_model_upload(m->gpu, GPU_PARAMS | GPU_BN, m->params, NULL, m->bn);
        gpu_model_train_begin(m->gpu, x, y, (flags & MODEL_STAGE_GRADS) ? m->grads : NULL);
    } else {
        if (!x) DIE("model_train_begin: no minibatch (nothing is staged on the CPU)");
        m->step_loss = model_train_step(m, x, y);
    }
    m->in_step = (flags & MODEL_STAGE_GRADS) ? 2 : 1;
}

size_t model_grads_host_ready(model *m) {
    if (m->in_step != 2) DIE("model_grads_host_ready outside a step begun with MODEL_STAGE_GRADS");
    return m->gpu ? gpu_model_grads_ready(m->gpu) : 0;
}

void model_grads_upload_range(model *m, size_t lo, size_t hi) {
    if (m->in_step != 2) DIE("model_grads_upload_range outside a step begun with MODEL_STAGE_GRADS");
    if (m->gpu) gpu_model_grads_upload(m->gpu, m->grads, lo, hi);
    else if (lo > hi || hi > m->L.n_params) DIE("model_grads_upload_range: [%zu, %zu) of %zu", lo, hi, m->L.n_params);
}

float model_train_end(model *m) {
    if (!m->in_step) DIE("model_train_end without model_train_begin");
    m->in_step = 0;
    if (!m->gpu) return m->step_loss;
    const float loss = gpu_model_train_end(m->gpu);
    if (m->host_sync) gpu_model_download(m->gpu, GPU_GRADS | GPU_BN, NULL, m->grads, m->bn);
    return loss;
}

int model_stage_buffers(model *m, float **x, int **y) {
    *x = NULL, *y = NULL;
    if (!m->gpu) return 0;
    gpu_model_stage_buffers(m->gpu, x, y);
    return 1;
}

void model_stage_batch(model *m, long tag) {
    if (!m->gpu) DIE("model_stage_batch: nothing is staged on the CPU (model_stage_buffers returned 0)");
    gpu_model_stage(m->gpu, tag);
}

long model_staged_tag(const model *m) { return m->gpu ? gpu_model_staged(m->gpu) : -1; }
