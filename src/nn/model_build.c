/* model_build.c — the CPU backend's networks (model_build.h): every oneDNN layer and buffer of
 * the training network and of the evaluation network for their batches, built once by
 * model_create (model.c), and their release. The layout they follow is layout.c's.
 *
 * Buffers of the training network: each forward activation a backward pass reads has its own
 * buffer; gradients flow through five shared buffers of the largest activation size: g[0], g[1]
 * alternate as the gradient at block boundaries, t[0..2] are temporaries inside a block. The
 * evaluation network needs no saved activations and cycles through four buffers, running BN and
 * the residual add in place (five buffers when the add may not run in place, see
 * add_in_place_ok: only at widths that are not a multiple of oneDNN's channel block). */
#include "nn/model_build.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static float *net_alloc(net *t, const_dnnl_memory_desc_t md_or_null, size_t nbytes) {
    if (t->n_owned >= (int)(sizeof t->owned / sizeof t->owned[0])) DIE("too many network buffers");
    float *p = nn_alloc(md_or_null ? nn_md_nbytes(md_or_null) : nbytes);
    t->owned[t->n_owned++] = p;
    return p;
}

#define TRY(call)                                                                                 \
    do {                                                                                          \
        if ((call) != 0) return -1;                                                               \
    } while (0)

static size_t max_sz(size_t a, const_dnnl_memory_desc_t md) {
    size_t b = nn_md_nbytes(md);
    return a > b ? a : b;
}

/* Rebuild the convolution l (built by conv_init with input src_md and output NULL: oneDNN's
 * choice) with its output in the network's activation format act, unless it already is. */
static int conv_to(conv_layer *l, nn_ctx *c, const_dnnl_memory_desc_t src_md, dnnl_format_tag_t act, char *err,
                   size_t errlen) {
    if (act == dnnl_format_tag_undef) return 0;
    const conv_layer o = *l; /* the shapes; conv_free clears l */
    dnnl_memory_desc_t want = nn_md4(o.n, o.oc, o.oh, o.ow, act);
    int rc = 0;
    if (!dnnl_memory_desc_equal(l->dst_md, want)) {
        conv_free(l);
        rc = conv_init(l, c, o.name, o.n, o.ic, o.ih, o.iw, o.oc, o.k, o.stride, o.pad, src_md, want, o.mode,
                       o.need_dinp, err, errlen);
    }
    dnnl_memory_desc_destroy(want);
    return rc;
}

void nn_net_head(model *m, net *t, nn_mode mode, int n) {
    const size_t k = (size_t)m->L.s.n_classes;
    t->n = n;
    t->built = 1;
    t->logits = net_alloc(t, NULL, (size_t)n * k * sizeof(float));
    t->probs = net_alloc(t, NULL, (size_t)n * k * sizeof(float));
    t->losses = net_alloc(t, NULL, (size_t)n * sizeof(float));
    if (mode == NN_TRAIN) t->d_logits = net_alloc(t, NULL, (size_t)n * k * sizeof(float));
}

/* The stem's layers: conv1, whose output format becomes the network's activation format *act,
 * the input reorder (unless conv1 reads x as given), bn1+ReLU and (ImageNet stem) the max-pool. */
static int build_stem(model *m, net *t, nn_mode mode, int n, dnnl_format_tag_t *act, char *err, size_t errlen) {
    const nn_layout *L = &m->L;
    const model_spec *s = &L->s;
    nn_ctx *c = &m->ctx;
    TRY(conv_init(&t->conv1, c, "conv1", n, s->in_c, s->in_h, s->in_w, L->c0, L->stem_k, L->stem_stride,
                  L->stem_pad, NULL, NULL, mode, 0, err, errlen));
    *act = nn_md_tag(t->conv1.dst_md);
    /* oneDNN 3.2 has only its reference forward convolution (~1000x slower) for a channel-blocked
     * input with padded channels (nChw16c with C = 4, 8; nChw8c with C = 4), and its stem picks
     * nChw16c at widths 4 and 8 on AVX-512: at a width that is no multiple of the block the
     * network runs channels-last (nhwc), which has jit / brgemm kernels for every channel count. */
    const int block = *act == dnnl_nChw16c ? 16 : *act == dnnl_nChw8c ? 8 : 1;
    if (L->c0 % block != 0) {
        *act = dnnl_nhwc;
        TRY(conv_to(&t->conv1, c, NULL, *act, err, errlen));
    }
    dnnl_memory_desc_t user = nn_md4(n, s->in_c, s->in_h, s->in_w, dnnl_nchw);
    t->in_direct = dnnl_memory_desc_equal(user, t->conv1.src_md);
    const int rc_in = t->in_direct ? 0 : nn_reorder_init(&t->in, c, "input", user, t->conv1.src_md, err, errlen);
    dnnl_memory_desc_destroy(user);
    TRY(rc_in);
    TRY(bn_init(&t->bn1, c, "bn1", t->conv1.dst_md, 1, mode, err, errlen));
    if (s->stem == MODEL_STEM_IMAGENET)
        TRY(pool_init(&t->maxpool, c, "maxpool", t->conv1.dst_md, 1, 3, 2, 1, mode, err, errlen));
    return 0;
}

/* The BasicBlocks' layers in activation format act, from the stem's output *h_md (on return:
 * the last block's output); *big grows to the largest activation. */
static int build_blocks(model *m, net *t, nn_mode mode, int n, dnnl_format_tag_t act, const_dnnl_memory_desc_t *h_md_io,
                        size_t *big, char *err, size_t errlen) {
    const nn_layout *L = &m->L;
    nn_ctx *c = &m->ctx;
    const int train = mode == NN_TRAIN;
    const_dnnl_memory_desc_t h_md = *h_md_io;
    for (int i = 0; i < N_BLOCKS; i++) {
        const block_def *d = &L->blk[i];
        block_run *r = &t->b[i];
        TRY(conv_init(&r->conv1, c, d->lname[0], n, d->cin, d->ih, d->iw, d->cout, 3, d->stride, 1, h_md, NULL, mode,
                      1, err, errlen));
        TRY(conv_to(&r->conv1, c, h_md, act, err, errlen));
        TRY(bn_init(&r->bn1, c, d->lname[1], r->conv1.dst_md, 1, mode, err, errlen));
        TRY(conv_init(&r->conv2, c, d->lname[2], n, d->cout, d->oh, d->ow, d->cout, 3, 1, 1, r->conv1.dst_md, NULL,
                      mode, 1, err, errlen));
        TRY(conv_to(&r->conv2, c, r->conv1.dst_md, act, err, errlen));
        TRY(bn_init(&r->bn2, c, d->lname[3], r->conv2.dst_md, 0, mode, err, errlen));
        if (d->down) {
            /* Both paths of the block must produce the same layout for the add. */
            TRY(conv_init(&r->convd, c, d->lname[4], n, d->cin, d->ih, d->iw, d->cout, 1, d->stride, 0, h_md,
                          r->conv2.dst_md, mode, 1, err, errlen));
            TRY(bn_init(&r->bnd, c, d->lname[5], r->convd.dst_md, 0, mode, err, errlen));
        }
        TRY(add_init(&r->res, c, d->prefix, r->conv2.dst_md, d->down ? r->convd.dst_md : h_md, 1, mode, err, errlen));
        if (train) TRY(add_init(&r->acc, c, d->prefix, h_md, d->down ? h_md : r->conv2.dst_md, 0, mode, err, errlen));
        *big = max_sz(max_sz(*big, r->conv1.dst_md), r->conv2.dst_md);
        h_md = r->conv2.dst_md;
    }
    *h_md_io = h_md;
    return 0;
}

/* The global average pool over the last block's output h_md and its reorders to and from the
 * plain (n, 8w) features of fc. */
static int build_gap(model *m, net *t, nn_mode mode, int n, const_dnnl_memory_desc_t h_md, char *err, size_t errlen) {
    nn_ctx *c = &m->ctx;
    TRY(pool_init(&t->gap, c, "avgpool", h_md, 0, 0, 0, 0, mode, err, errlen));
    dnnl_memory_desc_t feat_md = nn_md4(n, m->L.feat, 1, 1, dnnl_nchw);
    int rc_gap = nn_reorder_init(&t->gap_out, c, "avgpool", t->gap.dst_md, feat_md, err, errlen);
    if (!rc_gap && mode == NN_TRAIN) rc_gap = nn_reorder_init(&t->gap_in, c, "avgpool", feat_md, t->gap.dst_md, err, errlen);
    dnnl_memory_desc_destroy(feat_md);
    TRY(rc_gap);
    return 0;
}

/* The training network's buffers: every activation the backward pass reads, the gradient
 * buffers g[] and t[] of big bytes each, and the gradients at the pool. */
static void alloc_train(model *m, net *t, int n, size_t big) {
    const nn_layout *L = &m->L;
    const model_spec *s = &L->s;
    if (!t->in_direct) t->x = net_alloc(t, t->conv1.src_md, 0);
    t->c0 = net_alloc(t, t->conv1.dst_md, 0);
    t->a0 = net_alloc(t, t->conv1.dst_md, 0);
    if (s->stem == MODEL_STEM_IMAGENET) t->p0 = net_alloc(t, t->maxpool.dst_md, 0);
    for (int i = 0; i < N_BLOCKS; i++) {
        block_run *r = &t->b[i];
        r->c1 = net_alloc(t, r->conv1.dst_md, 0);
        r->a1 = net_alloc(t, r->conv1.dst_md, 0);
        r->c2 = net_alloc(t, r->conv2.dst_md, 0);
        r->y = net_alloc(t, r->conv2.dst_md, 0);
        r->b2 = add_in_place_ok(&r->res) ? r->y : net_alloc(t, r->conv2.dst_md, 0);
        if (L->blk[i].down) {
            r->cd = net_alloc(t, r->convd.dst_md, 0);
            r->sd = net_alloc(t, r->convd.dst_md, 0);
        }
    }
    for (int i = 0; i < 2; i++) t->g[i] = net_alloc(t, NULL, big);
    for (int i = 0; i < 3; i++) t->t[i] = net_alloc(t, NULL, big);
    t->d_gap_o = net_alloc(t, t->gap.dst_md, 0);
    t->d_feat = net_alloc(t, NULL, (size_t)n * L->feat * sizeof(float));
}

/* The evaluation network's buffers: four (five where an add may not run in place) rotating
 * buffers of the largest activation, each block taking the ones its input is not in. */
static void alloc_eval(model *m, net *t, size_t big) {
    const model_spec *s = &m->L.s;
    if (!t->in_direct) big = max_sz(big, t->conv1.src_md);
    int in_place = 1;
    for (int i = 0; i < N_BLOCKS; i++) in_place &= add_in_place_ok(&t->b[i].res);
    const int ne = in_place ? 4 : 5;
    for (int i = 0; i < ne; i++) t->e[i] = net_alloc(t, NULL, big);
    t->x = t->e[0];
    t->c0 = t->a0 = t->e[1];
    int cur = 1;
    if (s->stem == MODEL_STEM_IMAGENET) t->p0 = t->e[2], cur = 2;
    for (int i = 0; i < N_BLOCKS; i++) {
        int o[4], j = 0; /* the buffers other than the block input */
        for (int q = 0; q < ne; q++)
            if (q != cur) o[j++] = q;
        block_run *r = &t->b[i];
        r->c1 = r->a1 = t->e[o[0]];
        r->c2 = r->b2 = t->e[o[1]];
        r->cd = r->sd = t->e[o[2]];
        r->y = in_place ? r->b2 : t->e[o[3]];
        cur = in_place ? o[1] : o[3];
    }
}

int nn_net_build(model *m, net *t, nn_mode mode, int n, char *err, size_t errlen) {
    nn_net_head(m, t, mode, n);

    /* Layers first. Formats: the stem convolution picks its input and output formats
     * (format_tag_any); that output format, e.g. nChw8c on AVX2, becomes the activation format
     * of the whole network (nhwc instead where it would pad the channels, build_stem). Every later convolution takes its producer's format as input and is
     * asked for `any` output; should oneDNN choose another layout there (it picks nhwc for
     * fewer than 8 channels), the convolution is rebuilt with the activation format, so BN,
     * ReLU, add and pooling never mix layouts (and oneDNN issue #6035 cannot be hit). */
    dnnl_format_tag_t act;
    TRY(build_stem(m, t, mode, n, &act, err, errlen));
    const_dnnl_memory_desc_t h_md = m->L.s.stem == MODEL_STEM_IMAGENET ? t->maxpool.dst_md : t->conv1.dst_md;
    size_t big = max_sz(max_sz(0, t->conv1.dst_md), h_md);
    TRY(build_blocks(m, t, mode, n, act, &h_md, &big, err, errlen));
    TRY(build_gap(m, t, mode, n, h_md, err, errlen));

    /* Buffers. */
    t->gap_o = net_alloc(t, t->gap.dst_md, 0);
    t->feat = net_alloc(t, NULL, (size_t)n * m->L.feat * sizeof(float));
    if (mode == NN_TRAIN) alloc_train(m, t, n, big);
    else alloc_eval(m, t, big);
    return 0;
}

void nn_net_free(net *t) {
    if (!t->built) return;
    nn_reorder_free(&t->in);
    conv_free(&t->conv1);
    bn_free(&t->bn1);
    pool_free(&t->maxpool);
    for (int i = 0; i < N_BLOCKS; i++) {
        block_run *r = &t->b[i];
        conv_free(&r->conv1), conv_free(&r->conv2), conv_free(&r->convd);
        bn_free(&r->bn1), bn_free(&r->bn2), bn_free(&r->bnd);
        add_free(&r->res), add_free(&r->acc);
    }
    pool_free(&t->gap);
    nn_reorder_free(&t->gap_out);
    nn_reorder_free(&t->gap_in);
    for (int i = 0; i < t->n_owned; i++) free(t->owned[i]);
    memset(t, 0, sizeof *t);
}