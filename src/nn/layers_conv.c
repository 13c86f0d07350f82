/* layers_conv.c — the convolution layer on oneDNN 3.x (layers.h: conv_init, conv_forward,
 * conv_backward, conv_free): the fp32 primitives with the implementation checks and the oneDNN
 * defects worked around (layers.h), and the bf16 variant (bf16-rounded inputs and weights, fp32
 * accumulation). layers.c has the other layers and the oneDNN plumbing (layers_internal.h). */
#include "layers_internal.h"

#include <stdlib.h>
#include <string.h>
/* A jit (or brgemm) implementation: not oneDNN's reference loops, and not its gemm-based
 * convolution, whose sgemm allocates packing buffers on every call. */
static int is_fast(const_dnnl_primitive_desc_t pd) {
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    return strncmp(impl, "jit", 3) == 0 || strncmp(impl, "brg", 3) == 0;
}

/* oneDNN's jit_1x1 backward-weights computes wrong weight gradients (2.6: and writes out of
 * bounds) for a strided 1x1 convolution on a channels-last input with fewer input channels than
 * its block (oneDNN issue #6035; reproduced by test_layers' conv_1x1s2_c4 on nhwc). Still so in
 * oneDNN 3.2 with ONEDNN_MAX_CPU_ISA=AVX2 (relative error 0.73 without this check). */
static int onednn_6035(const_dnnl_primitive_desc_t pd, const conv_layer *l) {
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    return l->k == 1 && l->stride > 1 && l->ic % 8 != 0 && strncmp(impl, "jit_1x1", 7) == 0 &&
           nn_md_tag(dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0)) == dnnl_nhwc;
}

/* Backward-weights of l. First with the activations' formats; when no jit implementation takes
 * those (a 1-channel nchw input, where oneDNN falls back to reference loops ~100x slower than
 * jit:avx2) or the one that does is oneDNN #6035, let oneDNN choose the input format, then also
 * the output-gradient format, and reorder into them (l->bw_src_md, l->bw_ddst_md). */
static int conv_bww_make(conv_layer *l, nn_ctx *c, const_dnnl_primitive_desc_t fwd_pd, const_dnnl_memory_desc_t src_any,
                         const_dnnl_memory_desc_t dst_any, const_dnnl_memory_desc_t w_any, const dnnl_dims_t strides,
                         const dnnl_dims_t dil, const dnnl_dims_t pl, const dnnl_dims_t pr, char *err, size_t errlen) {
    const char *name = l->name;
    const_dnnl_memory_desc_t srcs[3] = {l->src_md, src_any, src_any};
    const_dnnl_memory_desc_t dsts[3] = {l->dst_md, l->dst_md, dst_any};
    dnnl_primitive_desc_t pd = NULL; /* the first usable one, replaced by the first jit one */
    for (int t = 0; t < 3 && !(pd && is_fast(pd)); t++) {
        dnnl_primitive_desc_t cand;
        if (dnnl_convolution_backward_weights_primitive_desc_create(&cand, c->engine, dnnl_convolution_direct, srcs[t],
                                                                    w_any, NULL, dsts[t], strides, dil, pl, pr, fwd_pd,
                                                                    c->attr) != dnnl_success)
            continue;
        if (onednn_6035(cand, l) || (pd && !is_fast(cand))) {
            dnnl_primitive_desc_destroy(cand);
            continue;
        }
        if (pd) dnnl_primitive_desc_destroy(pd);
        pd = cand;
    }
    if (!pd)
        return seterr(err, errlen, "%s:%d: layer %s: oneDNN has no usable backward-weights convolution", __FILE__,
                      __LINE__, name),
               -1;
    l->dw_md = layers_pd_md(pd, dnnl_query_diff_weights_md);
    l->bw_src_md = layers_pd_md(pd, dnnl_query_src_md);
    l->bw_ddst_md = layers_pd_md(pd, dnnl_query_diff_dst_md);
    return layers_pd_make(&l->bwd_weights, c, pd, NULL, name, err, errlen);
}

/* conv_init's primitives, given the `any` descriptors it owns. */
static int conv_build(conv_layer *l, nn_ctx *c, const_dnnl_memory_desc_t src_md, const_dnnl_memory_desc_t dst_md,
                      const_dnnl_memory_desc_t src_any, const_dnnl_memory_desc_t dst_any,
                      const_dnnl_memory_desc_t w_any, char *err, size_t errlen) {
    const char *name = l->name;
    /* Symmetric padding: oneDNN then computes PyTorch's floor((i + 2p − k)/s) + 1 outputs. */
    dnnl_dims_t strides = {l->stride, l->stride}, dil = {0, 0}, pl = {l->pad, l->pad}, pr = {l->pad, l->pad};
    dnnl_primitive_desc_t fwd_pd;
    DNNL_TRY(dnnl_convolution_forward_primitive_desc_create(
                 &fwd_pd, c->engine, l->mode == NN_TRAIN ? dnnl_forward_training : dnnl_forward_inference,
                 dnnl_convolution_direct, src_md ? src_md : src_any, w_any, NULL, dst_md ? dst_md : dst_any, strides,
                 dil, pl, pr, c->attr),
             name);
    if (layers_pd_make(&l->fwd, c, fwd_pd, &fwd_pd, name, err, errlen)) return -1;
    l->src_md = layers_pd_md(fwd_pd, dnnl_query_src_md);
    l->dst_md = layers_pd_md(fwd_pd, dnnl_query_dst_md);
    l->w_md = layers_pd_md(fwd_pd, dnnl_query_weights_md);
    l->wb_md = layers_md_clone(l->w_md);

    int rc = 0;
    if (l->mode == NN_TRAIN) {
        if (l->need_dinp) {
            dnnl_primitive_desc_t pd;
            rc = layers_pd_make_st(&l->bwd_data, c,
                                   dnnl_convolution_backward_data_primitive_desc_create(
                                       &pd, c->engine, dnnl_convolution_direct, l->src_md, w_any, l->dst_md, strides,
                                       dil, pl, pr, fwd_pd, c->attr),
                                   &pd, 1, "backward-data convolution", name, err, errlen);
            if (!rc) {
                layers_md_free(&l->wb_md);
                l->wb_md = layers_pd_md(pd, dnnl_query_weights_md);
                dnnl_primitive_desc_destroy(pd);
            }
        }
        if (!rc) rc = conv_bww_make(l, c, fwd_pd, src_any, dst_any, w_any, strides, dil, pl, pr, err, errlen);
    }
    dnnl_primitive_desc_destroy(fwd_pd);
    return rc;
}

/* The bf16 variant of l's primitives (layers.h, conv_init): the same f32 activation formats as
 * conv_build chose (l->src_md, l->dst_md), bf16 copies of the input and output gradient in the
 * same layout, bf16 weights in oneDNN's choice, f32 output, input gradient and weight gradient.
 * Replaces conv_build's primitives and sets l->lp when every one of them has a jit kernel;
 * otherwise leaves the f32 layer as it is. -1 only on an error. */
static int conv_lp_build(conv_layer *l, nn_ctx *c, char *err, size_t errlen) {
    /* Without AVX512_BF16 oneDNN still offers jit bf16 convolutions on AVX-512, emulating the
     * bf16 products with fp32 arithmetic: slower than fp32 itself, so the layer stays fp32. */
    if (!nn_bf16_native()) return 0;
    const dnnl_format_tag_t ts = nn_md_tag(l->src_md), td = nn_md_tag(l->dst_md);
    if (ts == dnnl_format_tag_undef || td == dnnl_format_tag_undef) return 0;
    const int train = l->mode == NN_TRAIN;
    dnnl_dims_t strides = {l->stride, l->stride}, dil = {0, 0}, pl = {l->pad, l->pad}, pr = {l->pad, l->pad};
    dnnl_memory_desc_t s16 = layers_md4(l->n, l->ic, l->ih, l->iw, dnnl_bf16, ts);
    dnnl_memory_desc_t d16 = layers_md4(l->n, l->oc, l->oh, l->ow, dnnl_bf16, td);
    dnnl_memory_desc_t w16 = layers_md4(l->oc, l->ic, l->k, l->k, dnnl_bf16, dnnl_format_tag_any);
    dnnl_memory_desc_t w32 = layers_md4(l->oc, l->ic, l->k, l->k, dnnl_f32, dnnl_format_tag_any);
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    int ok = dnnl_convolution_forward_primitive_desc_create(
                 &fpd, c->engine, train ? dnnl_forward_training : dnnl_forward_inference, dnnl_convolution_direct,
                 s16, w16, NULL, l->dst_md, strides, dil, pl, pr, c->attr) == dnnl_success &&
             is_fast(fpd);
    if (ok && l->need_dinp)
        ok = dnnl_convolution_backward_data_primitive_desc_create(&dpd, c->engine, dnnl_convolution_direct, l->src_md,
                                                                  w16, d16, strides, dil, pl, pr, fpd,
                                                                  c->attr) == dnnl_success &&
             is_fast(dpd);
    if (ok && train)
        ok = dnnl_convolution_backward_weights_primitive_desc_create(&wpd, c->engine, dnnl_convolution_direct, s16,
                                                                     w32, NULL, d16, strides, dil, pl, pr, fpd,
                                                                     c->attr) == dnnl_success &&
             is_fast(wpd) && !onednn_6035(wpd, l);
    int rc = 0;
    if (ok) {
        layers_prim_free(&l->fwd), layers_prim_free(&l->bwd_data), layers_prim_free(&l->bwd_weights);
        layers_md_free(&l->w_md), layers_md_free(&l->wb_md), layers_md_free(&l->dw_md), layers_md_free(&l->bw_src_md),
            layers_md_free(&l->bw_ddst_md);
        l->lp = 1;
        l->w_md = layers_pd_md(fpd, dnnl_query_weights_md);
        l->bw_src_md = layers_md_clone(s16);
        l->wb_md = dpd ? layers_pd_md(dpd, dnnl_query_weights_md) : layers_md_clone(l->w_md);
        if (wpd) {
            l->dw_md = layers_pd_md(wpd, dnnl_query_diff_weights_md);
            l->bw_ddst_md = layers_md_clone(d16);
        }
        rc = layers_prim_make(&l->fwd, c, fpd, l->name, err, errlen);
        if (!rc && dpd) rc = layers_prim_make(&l->bwd_data, c, dpd, l->name, err, errlen);
        if (!rc && wpd) rc = layers_prim_make(&l->bwd_weights, c, wpd, l->name, err, errlen);
    }
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (dpd) dnnl_primitive_desc_destroy(dpd);
    if (wpd) dnnl_primitive_desc_destroy(wpd);
    layers_md_free(&s16), layers_md_free(&d16), layers_md_free(&w16), layers_md_free(&w32);
    return rc;
}

/* An internal buffer *buf with its memory object *m, in to_md (out: in from_md), and the reorder r
 * from_md -> to_md that fills (out: empties) it. */
static int conv_buf(conv_layer *l, nn_ctx *c, float **buf, dnnl_memory_t *m, nn_reorder *r,
                    const_dnnl_memory_desc_t from_md, const_dnnl_memory_desc_t to_md, int out, char *err, size_t errlen) {
    const_dnnl_memory_desc_t md = out ? from_md : to_md;
    *buf = nn_alloc(nn_md_nbytes(md));
    if (nn_reorder_init(r, c, l->name, from_md, to_md, err, errlen)) return -1;
    return layers_mem_make(m, c, md, *buf, l->name, err, errlen);
}

int conv_init(conv_layer *l, nn_ctx *c, const char *name, int n, int ic, int ih, int iw, int oc, int k,
              int stride, int pad, const_dnnl_memory_desc_t src_md, const_dnnl_memory_desc_t dst_md,
              nn_mode mode, int need_dinp, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->need_dinp = mode == NN_TRAIN && need_dinp;
    l->n = n, l->ic = ic, l->ih = ih, l->iw = iw, l->oc = oc, l->k = k, l->stride = stride, l->pad = pad;
    l->oh = (ih + 2 * pad - k) / stride + 1;
    l->ow = (iw + 2 * pad - k) / stride + 1;
    if (l->oh < 1 || l->ow < 1)
        return seterr(err, errlen, "layer %s: input %dx%d too small for a %dx%d/%d convolution", name, ih, iw, k, k, stride), -1;

    l->w_user_md = nn_md4(oc, ic, k, k, dnnl_oihw);
    dnnl_memory_desc_t src_any = nn_md4(n, ic, ih, iw, dnnl_format_tag_any);
    dnnl_memory_desc_t dst_any = nn_md4(n, oc, l->oh, l->ow, dnnl_format_tag_any);
    dnnl_memory_desc_t w_any = nn_md4(oc, ic, k, k, dnnl_format_tag_any);
    int rc = conv_build(l, c, src_md, dst_md, src_any, dst_any, w_any, err, errlen);
    dnnl_memory_desc_destroy(src_any);
    dnnl_memory_desc_destroy(dst_any);
    dnnl_memory_desc_destroy(w_any);
    if (rc) return rc;
    if (c->conv_bf16 && conv_lp_build(l, c, err, errlen)) return -1;

    if (conv_buf(l, c, &l->w, &l->m_w, &l->w_in, l->w_user_md, l->w_md, 0, err, errlen)) return -1;
    if (layers_mem_make(&l->m_src, c, l->src_md, NULL, name, err, errlen)) return -1;
    if (layers_mem_make(&l->m_dst, c, l->dst_md, NULL, name, err, errlen)) return -1;
    if (l->bw_src_md && !dnnl_memory_desc_equal(l->bw_src_md, l->src_md) &&
        conv_buf(l, c, &l->bw_src, &l->m_bw_src, &l->bw_src_in, l->src_md, l->bw_src_md, 0, err, errlen))
        return -1;
    if (mode != NN_TRAIN) return 0;
    if (conv_buf(l, c, &l->dw, &l->m_dw, &l->dw_out, l->dw_md, l->w_user_md, 1, err, errlen)) return -1;
    if (layers_mem_make(&l->m_ddst, c, l->dst_md, NULL, name, err, errlen)) return -1;
    if (!dnnl_memory_desc_equal(l->bw_ddst_md, l->dst_md) &&
        conv_buf(l, c, &l->bw_ddst, &l->m_bw_ddst, &l->bw_ddst_in, l->dst_md, l->bw_ddst_md, 0, err, errlen))
        return -1;
    if (!l->need_dinp) return 0;
    if (layers_mem_make(&l->m_dsrc, c, l->src_md, NULL, name, err, errlen)) return -1;
    if (!dnnl_memory_desc_equal(l->wb_md, l->w_md) &&
        conv_buf(l, c, &l->wb, &l->m_wb, &l->wb_in, l->w_md, l->wb_md, 0, err, errlen))
        return -1;
    return 0;
}

void conv_forward(conv_layer *l, nn_ctx *c, float *out, const float *inp, const float *weight) {
    nn_reorder_run(&l->w_in, c, l->w, weight);
    layers_mem_set(l->m_src, inp, l->name);
    if (l->lp) nn_reorder_run(&l->bw_src_in, c, l->bw_src, inp); /* kept for backward-weights */
    layers_mem_set(l->m_dst, out, l->name);
    EXEC(c, &l->fwd, {DNNL_ARG_SRC, l->lp ? l->m_bw_src : l->m_src}, {DNNL_ARG_WEIGHTS, l->m_w},
         {DNNL_ARG_DST, l->m_dst});
}

void conv_backward(conv_layer *l, nn_ctx *c, float *dinp, float *dweight, const float *dout,
                   const float *inp) {
    if (l->mode != NN_TRAIN) DIE("conv_backward on inference layer %s", l->name);
    layers_mem_set(l->m_src, inp, l->name);
    layers_mem_set(l->m_ddst, dout, l->name);
    if (l->m_bw_src && !l->lp) nn_reorder_run(&l->bw_src_in, c, l->bw_src, inp); /* lp: conv_forward did */
    if (l->m_bw_ddst) nn_reorder_run(&l->bw_ddst_in, c, l->bw_ddst, dout);
    EXEC(c, &l->bwd_weights, {DNNL_ARG_SRC, l->m_bw_src ? l->m_bw_src : l->m_src},
         {DNNL_ARG_DIFF_DST, l->m_bw_ddst ? l->m_bw_ddst : l->m_ddst}, {DNNL_ARG_DIFF_WEIGHTS, l->m_dw});
    nn_reorder_run(&l->dw_out, c, dweight, l->dw);
    if (l->need_dinp && dinp) {
        if (l->m_wb) nn_reorder_run(&l->wb_in, c, l->wb, l->w);
        layers_mem_set(l->m_dsrc, dinp, l->name);
        EXEC(c, &l->bwd_data, {DNNL_ARG_DIFF_DST, l->lp ? l->m_bw_ddst : l->m_ddst},
             {DNNL_ARG_WEIGHTS, l->m_wb ? l->m_wb : l->m_w},
             {DNNL_ARG_DIFF_SRC, l->m_dsrc});
    }
}

void conv_free(conv_layer *l) {
    layers_prim_free(&l->fwd);
    layers_prim_free(&l->bwd_data);
    layers_prim_free(&l->bwd_weights);
    nn_reorder *rs[] = {&l->w_in, &l->wb_in, &l->dw_out, &l->bw_src_in, &l->bw_ddst_in};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) nn_reorder_free(rs[i]);
    dnnl_memory_t *ms[] = {&l->m_src, &l->m_dst, &l->m_w, &l->m_wb, &l->m_dsrc, &l->m_ddst, &l->m_dw, &l->m_bw_src, &l->m_bw_ddst};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) layers_mem_free(ms[i]);
    float *bufs[] = {l->w, l->wb, l->dw, l->bw_src, l->bw_ddst};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    dnnl_memory_desc_t *mds[] = {&l->src_md, &l->dst_md, &l->w_user_md, &l->w_md, &l->wb_md, &l->dw_md, &l->bw_src_md, &l->bw_ddst_md};
    for (size_t i = 0; i < sizeof mds / sizeof mds[0]; i++) layers_md_free(mds[i]);
    memset(l, 0, sizeof *l);
}

