/* layers.c — ResNet-18 layers on oneDNN 3.x (C API, >= 3.0); see layers.h for the contract.
 * The convolution (with its bf16 variant) is layers_conv.c; the oneDNN plumbing both use is
 * shared through layers_internal.h. The fully connected layer and softmax cross-entropy, plain
 * C, are layers_fc.c.
 *
 * oneDNN 3 only; 2.x support was dropped on purpose. The 3.0 C API removed operation
 * descriptors (dnnl_*_primitive_desc_create take the shapes directly) and made memory
 * descriptors opaque handles that must be created, cloned and destroyed; supporting both would
 * need a second body for every *_init and an ownership rule that holds for structs and handles
 * alike, for a version with no more fixes upstream and with the defects listed in layers.h
 * (docs/perf.md). The default build fetches oneDNN 3.2 from PyPI (tools/get_onednn.py); sites
 * give theirs with make ONEDNN_ROOT=.
 *
 * oneDNN documents followed: "Convolution", "Batch Normalization" (dnnl_use_scale,
 * dnnl_use_shift, dnnl_fuse_norm_relu, workspace), "Eltwise" (relu_use_dst_for_bwd), "Binary"
 * (post-ops), "Pooling" (max workspace), "Reorder", "Memory Format Propagation" (format_tag_any)
 * and "Primitive Attributes: Scratchpad" (dnnl_scratchpad_mode_user). Semantics follow
 * torch.nn (Conv2d, BatchNorm2d, ReLU, MaxPool2d, AdaptiveAvgPool2d, Linear, cross_entropy). */
#include "nn/layers.h"
#include "layers_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- context, descriptors, primitives ----------------------------------------------------- */

int nn_ctx_init(nn_ctx *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    DNNL_TRY(dnnl_engine_create(&c->engine, dnnl_cpu, 0), "context");
    DNNL_TRY(dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags), "context");
    DNNL_TRY(dnnl_primitive_attr_create(&c->attr), "context");
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(c->attr, dnnl_scratchpad_mode_user), "context");
    return 0;
}

void nn_ctx_free(nn_ctx *c) {
    if (c->attr) dnnl_primitive_attr_destroy(c->attr);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->engine) dnnl_engine_destroy(c->engine);
    free(c->scratch);
    memset(c, 0, sizeof *c);
}

dnnl_memory_desc_t layers_md4(int n, int ch, int h, int w, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {n, ch, h, w};
    DNNL_CHECK(dnnl_memory_desc_create_with_tag(&md, 4, dims, dt, tag), "descriptor");
    return md;
}

dnnl_memory_desc_t nn_md4(int n, int ch, int h, int w, dnnl_format_tag_t tag) { return layers_md4(n, ch, h, w, dnnl_f32, tag); }

/* A clone of md that the caller owns (layers_md_free); NULL for NULL. */
dnnl_memory_desc_t layers_md_clone(const_dnnl_memory_desc_t md) {
    dnnl_memory_desc_t c = NULL;
    if (md) DNNL_CHECK(dnnl_memory_desc_clone(&c, md), "descriptor");
    return c;
}

void layers_md_free(dnnl_memory_desc_t *md) {
    if (*md) dnnl_memory_desc_destroy(*md);
    *md = NULL;
}

static int md_ndims(const_dnnl_memory_desc_t md) {
    int nd = 0;
    DNNL_CHECK(dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &nd), "descriptor");
    return nd;
}

/* dnnl_query_dims / dnnl_query_padded_dims answer a pointer to the descriptor's dnnl_dims_t. */
static dnnl_dim_t md_dim(const_dnnl_memory_desc_t md, dnnl_query_t what, int i) {
    const dnnl_dims_t *d = NULL;
    DNNL_CHECK(dnnl_memory_desc_query(md, what, &d), "descriptor");
    if (i < 0 || i >= md_ndims(md)) DIE("dimension %d of a %d-D memory descriptor", i, md_ndims(md));
    return (*d)[i];
}

dnnl_dim_t nn_md_dim(const_dnnl_memory_desc_t md, int i) { return md_dim(md, dnnl_query_dims, i); }
dnnl_dim_t nn_md_padded_dim(const_dnnl_memory_desc_t md, int i) { return md_dim(md, dnnl_query_padded_dims, i); }

size_t nn_md_nbytes(const_dnnl_memory_desc_t md) { return dnnl_memory_desc_get_size(md); }

dnnl_format_tag_t nn_md_tag(const_dnnl_memory_desc_t md) {
    static const dnnl_format_tag_t cand[] = {dnnl_nChw16c, dnnl_nChw8c, dnnl_nhwc, dnnl_nchw};
    if (md_ndims(md) != 4) return dnnl_format_tag_undef;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        dnnl_memory_desc_t t = nn_md4((int)nn_md_dim(md, 0), (int)nn_md_dim(md, 1), (int)nn_md_dim(md, 2),
                                      (int)nn_md_dim(md, 3), cand[i]);
        const int eq = dnnl_memory_desc_equal(md, t);
        dnnl_memory_desc_destroy(t);
        if (eq) return cand[i];
    }
    return dnnl_format_tag_undef;
}

void *nn_alloc(size_t nbytes) {
    void *p = NULL;
    size_t n = (nbytes + 63) / 64 * 64;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) DIE("out of memory allocating %zu bytes", nbytes);
    memset(p, 0, n);
    return p;
}

/* Create the primitive of pd (kept in p) and its scratchpad memory; grow the shared scratchpad
 * to what this primitive asks for. */
int layers_prim_make(nn_prim *p, nn_ctx *c, dnnl_primitive_desc_t pd, const char *layer, char *err,
                     size_t errlen) {
    p->layer = layer;
    DNNL_TRY(dnnl_primitive_create(&p->prim, pd), layer);
    const_dnnl_memory_desc_t smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t nbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (nbytes > 0) {
        if (nbytes > c->scratch_nbytes) {
            free(c->scratch);
            c->scratch = nn_alloc(nbytes);
            c->scratch_nbytes = nbytes;
        }
        DNNL_TRY(dnnl_memory_create(&p->scratch, smd, c->engine, DNNL_MEMORY_NONE), layer);
    }
    return 0;
}

void layers_prim_free(nn_prim *p) {
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->scratch) dnnl_memory_destroy(p->scratch);
    memset(p, 0, sizeof *p);
}

/* The primitive of pd (made by a dnnl_*_primitive_desc_create, which oneDNN 3 takes the
 * shapes by directly: no operation descriptors); pd is destroyed after the primitive exists
 * unless keep is given (a forward pd is needed as the hint of its backward). */
int layers_pd_make(nn_prim *p, nn_ctx *c, dnnl_primitive_desc_t pd, dnnl_primitive_desc_t *keep, const char *layer,
                   char *err, size_t errlen) {
    if (layers_prim_make(p, c, pd, layer, err, errlen)) {
        dnnl_primitive_desc_destroy(pd);
        return -1;
    }
    if (keep) *keep = pd;
    else dnnl_primitive_desc_destroy(pd);
    return 0;
}

/* A clone (owned by the caller) of pd's memory descriptor for what; pd keeps its own. */
dnnl_memory_desc_t layers_pd_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(pd, what, 0);
    if (!md) DIE("oneDNN primitive descriptor has no memory descriptor for query %d", (int)what);
    return layers_md_clone(md);
}

int layers_mem_make(dnnl_memory_t *m, nn_ctx *c, const_dnnl_memory_desc_t md, void *handle,
                    const char *layer, char *err, size_t errlen) {
    DNNL_TRY(dnnl_memory_create(m, md, c->engine, handle ? handle : DNNL_MEMORY_NONE), layer);
    return 0;
}

void layers_mem_free(dnnl_memory_t *m) {
    if (*m) dnnl_memory_destroy(*m);
    *m = NULL;
}

int layers_mems_make(nn_ctx *c, const_dnnl_memory_desc_t md, int n, dnnl_memory_t *const ms[], const char *layer,
                     char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (layers_mem_make(ms[i], c, md, NULL, layer, err, errlen)) return -1;
    return 0;
}

int layers_pd_make_st(nn_prim *p, nn_ctx *c, dnnl_status_t st, dnnl_primitive_desc_t *pd, int keep, const char *what,
                      const char *layer, char *err, size_t errlen) {
    if (st != dnnl_success)
        return seterr(err, errlen, "%s:%d: oneDNN %s failed in layer %s: %s", __FILE__, __LINE__, what, layer,
                      dnnl_status2str(st)), -1;
    return layers_pd_make(p, c, *pd, keep ? pd : NULL, layer, err, errlen);
}

/* A zeroed buffer *buf for the workspace of pd, and its memory object m. */
static int ws_make(void **buf, dnnl_memory_t *m, nn_ctx *c, const_dnnl_primitive_desc_t pd, const char *layer,
                   char *err, size_t errlen) {
    dnnl_memory_desc_t md = layers_pd_md(pd, dnnl_query_workspace_md);
    *buf = nn_alloc(nn_md_nbytes(md));
    const int rc = layers_mem_make(m, c, md, *buf, layer, err, errlen);
    dnnl_memory_desc_destroy(md);
    return rc;
}

void layers_prim_exec(nn_ctx *c, const nn_prim *p, int nargs, const dnnl_exec_arg_t *args) {
    dnnl_exec_arg_t a[MAX_ARGS];
    if (nargs + 1 > MAX_ARGS) DIE("too many arguments for layer %s", p->layer);
    memcpy(a, args, (size_t)nargs * sizeof *a);
    if (p->scratch) {
        layers_mem_set(p->scratch, c->scratch, p->layer);
        a[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratch};
    }
    DNNL_CHECK(dnnl_primitive_execute(p->prim, c->stream, nargs, a), p->layer);
    DNNL_CHECK(dnnl_stream_wait(c->stream), p->layer);
}

/* ---- reorders ----------------------------------------------------------------------------- */

int nn_reorder_init(nn_reorder *r, nn_ctx *c, const char *name, const_dnnl_memory_desc_t src_md,
                    const_dnnl_memory_desc_t dst_md, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->name = name;
    dnnl_primitive_desc_t pd;
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&pd, src_md, c->engine, dst_md, c->engine, c->attr), name);
    if (layers_pd_make(&r->p, c, pd, NULL, name, err, errlen)) return -1;
    if (layers_mem_make(&r->src, c, src_md, NULL, name, err, errlen)) return -1;
    return layers_mem_make(&r->dst, c, dst_md, NULL, name, err, errlen);
}

void nn_reorder_run(nn_reorder *r, nn_ctx *c, void *dst, const void *src) {
    layers_mem_set(r->src, src, r->name);
    layers_mem_set(r->dst, dst, r->name);
    EXEC(c, &r->p, {DNNL_ARG_FROM, r->src}, {DNNL_ARG_TO, r->dst});
}

void nn_reorder_free(nn_reorder *r) {
    layers_prim_free(&r->p);
    layers_mem_free(&r->src);
    layers_mem_free(&r->dst);
}

void nn_convert(nn_ctx *c, void *dst, const_dnnl_memory_desc_t dst_md, const void *src,
                const_dnnl_memory_desc_t src_md) {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    dnnl_memory_t ms, md;
    DNNL_CHECK(dnnl_reorder_primitive_desc_create(&pd, src_md, c->engine, dst_md, c->engine, NULL), "convert");
    DNNL_CHECK(dnnl_primitive_create(&p, pd), "convert");
    DNNL_CHECK(dnnl_memory_create(&ms, src_md, c->engine, (void *)src), "convert");
    DNNL_CHECK(dnnl_memory_create(&md, dst_md, c->engine, dst), "convert");
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
    DNNL_CHECK(dnnl_primitive_execute(p, c->stream, 2, a), "convert");
    DNNL_CHECK(dnnl_stream_wait(c->stream), "convert");
    dnnl_memory_destroy(ms);
    dnnl_memory_destroy(md);
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
}

/* ---- batch normalisation ------------------------------------------------------------------ */

int bn_init(bn_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t data_md, int relu,
            nn_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    l->c = (int)nn_md_dim(data_md, 1);
    l->count = (long)(nn_md_dim(data_md, 0) * nn_md_dim(data_md, 2) * nn_md_dim(data_md, 3));
    l->eps = 1e-5f;
    l->momentum = 0.1f;
    unsigned flags = dnnl_use_scale | dnnl_use_shift | (relu ? dnnl_fuse_norm_relu : 0u);

    dnnl_primitive_desc_t fwd_pd, bwd_pd;
    DNNL_TRY(dnnl_batch_normalization_forward_primitive_desc_create(
                 &fwd_pd, c->engine, mode == NN_TRAIN ? dnnl_forward_training : dnnl_forward_inference, data_md,
                 data_md, l->eps, flags | (mode == NN_TRAIN ? 0u : dnnl_use_global_stats), c->attr),
             name);
    if (layers_pd_make(&l->fwd, c, fwd_pd, &fwd_pd, name, err, errlen)) return -1;
    int rc = 0;
    if (mode == NN_TRAIN) {
        if (relu) rc = ws_make(&l->ws, &l->m_ws, c, fwd_pd, name, err, errlen);
        if (!rc)
            rc = layers_pd_make_st(&l->bwd, c,
                                   dnnl_batch_normalization_backward_primitive_desc_create(
                                       &bwd_pd, c->engine, dnnl_backward, data_md, data_md, data_md, l->eps, flags,
                                       fwd_pd, c->attr),
                                   &bwd_pd, 0, "backward batch normalisation", name, err, errlen);
    }
    dnnl_primitive_desc_destroy(fwd_pd);
    if (rc) return rc;
    if (mode == NN_TRAIN) { /* the batch statistics (inference: the caller's running ones) */
        l->mean = nn_alloc((size_t)l->c * sizeof(float));
        l->var = nn_alloc((size_t)l->c * sizeof(float));
    }
    const int nm = mode == NN_TRAIN ? 4 : 2; /* the gradients' too in training */
    dnnl_memory_t *const data[] = {&l->m_src, &l->m_dst, &l->m_dsrc, &l->m_ddst};
    dnnl_memory_t *const stats[] = {&l->m_scale, &l->m_shift, &l->m_dscale, &l->m_dshift};
    dnnl_memory_desc_t stat; /* (C): γ, β, µ, σ² */
    dnnl_dims_t stat_dims = {l->c};
    DNNL_CHECK(dnnl_memory_desc_create_with_tag(&stat, 1, stat_dims, dnnl_f32, dnnl_x), "descriptor");
    rc = layers_mems_make(c, data_md, nm, data, name, err, errlen) ||
                 layers_mems_make(c, stat, nm, stats, name, err, errlen) ||
                 layers_mem_make(&l->m_mean, c, stat, l->mean, name, err, errlen) ||
                 layers_mem_make(&l->m_var, c, stat, l->var, name, err, errlen)
             ? -1
             : 0;
    dnnl_memory_desc_destroy(stat);
    return rc;
}

void bn_forward(bn_layer *l, nn_ctx *c, float *out, const float *inp, const float *gamma,
                const float *beta, float *running_mean, float *running_var) {
    layers_mem_set(l->m_src, inp, l->name);
    layers_mem_set(l->m_dst, out, l->name);
    layers_mem_set(l->m_scale, gamma, l->name);
    layers_mem_set(l->m_shift, beta, l->name);
    if (l->mode == NN_INFER) {
        layers_mem_set(l->m_mean, running_mean, l->name);
        layers_mem_set(l->m_var, running_var, l->name);
    }
    /* Training writes the batch statistics into l->mean, l->var (and the ReLU mask, if any). */
    const dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, l->m_src},     {DNNL_ARG_MEAN, l->m_mean},   {DNNL_ARG_VARIANCE, l->m_var},
                                 {DNNL_ARG_SCALE, l->m_scale}, {DNNL_ARG_SHIFT, l->m_shift}, {DNNL_ARG_DST, l->m_dst},
                                 {DNNL_ARG_WORKSPACE, l->m_ws}};
    layers_prim_exec(c, &l->fwd, l->m_ws ? 7 : 6, a);
    if (l->mode == NN_INFER) return;
    /* PyTorch's running statistics: exponential average with the unbiased batch variance. */
    const float m = l->momentum;
    const float unbias = l->count > 1 ? (float)l->count / (float)(l->count - 1) : 1.0f;
    for (int i = 0; i < l->c; i++) {
        running_mean[i] = (1.0f - m) * running_mean[i] + m * l->mean[i];
        running_var[i] = (1.0f - m) * running_var[i] + m * l->var[i] * unbias;
    }
}

void bn_backward(bn_layer *l, nn_ctx *c, float *dinp, float *dgamma, float *dbeta, const float *dout,
                 const float *inp, const float *gamma, const float *beta) {
    if (l->mode != NN_TRAIN) DIE("bn_backward on inference layer %s", l->name);
    layers_mem_set(l->m_src, inp, l->name);
    layers_mem_set(l->m_ddst, dout, l->name);
    layers_mem_set(l->m_dsrc, dinp, l->name);
    /* β is no input of the backward in oneDNN 3 (passing DNNL_ARG_SHIFT there is refused). */
    layers_mem_set(l->m_scale, gamma, l->name);
    layers_mem_set(l->m_dscale, dgamma, l->name);
    layers_mem_set(l->m_dshift, dbeta, l->name);
    const dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, l->m_src},           {DNNL_ARG_MEAN, l->m_mean},
                                 {DNNL_ARG_VARIANCE, l->m_var},      {DNNL_ARG_DIFF_DST, l->m_ddst},
                                 {DNNL_ARG_SCALE, l->m_scale},       {DNNL_ARG_DIFF_SRC, l->m_dsrc},
                                 {DNNL_ARG_DIFF_SCALE, l->m_dscale}, {DNNL_ARG_DIFF_SHIFT, l->m_dshift},
                                 {DNNL_ARG_WORKSPACE, l->m_ws}};
    layers_prim_exec(c, &l->bwd, l->m_ws ? 9 : 8, a);
}

void bn_free(bn_layer *l) {
    layers_prim_free(&l->fwd);
    layers_prim_free(&l->bwd);
    dnnl_memory_t *ms[] = {&l->m_src, &l->m_dst, &l->m_scale, &l->m_shift, &l->m_mean, &l->m_var,
                           &l->m_ws, &l->m_dsrc, &l->m_ddst, &l->m_dscale, &l->m_dshift};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) layers_mem_free(ms[i]);
    free(l->mean);
    free(l->var);
    free(l->ws);
    memset(l, 0, sizeof *l);
}

/* ---- ReLU --------------------------------------------------------------------------------- */

int relu_init(relu_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t data_md,
              nn_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    /* The backward reads the output, so the forward hint must use the same algorithm. */
    dnnl_alg_kind_t alg = mode == NN_TRAIN ? dnnl_eltwise_relu_use_dst_for_bwd : dnnl_eltwise_relu;
    dnnl_primitive_desc_t fwd_pd, bwd_pd;
    DNNL_TRY(dnnl_eltwise_forward_primitive_desc_create(
                 &fwd_pd, c->engine, mode == NN_TRAIN ? dnnl_forward_training : dnnl_forward_inference, alg, data_md,
                 data_md, 0.0f, 0.0f, c->attr),
             name);
    if (layers_pd_make(&l->fwd, c, fwd_pd, &fwd_pd, name, err, errlen)) return -1;
    int rc = 0;
    if (mode == NN_TRAIN) {
        /* diff_src, diff_dst, and the data the backward reads (dst, for relu_use_dst_for_bwd). */
        rc = layers_pd_make_st(&l->bwd, c,
                               dnnl_eltwise_backward_primitive_desc_create(&bwd_pd, c->engine, alg, data_md, data_md,
                                                                           data_md, 0.0f, 0.0f, fwd_pd, c->attr),
                               &bwd_pd, 0, "backward eltwise", name, err, errlen);
    }
    dnnl_primitive_desc_destroy(fwd_pd);
    if (rc) return rc;
    dnnl_memory_t *const ms[] = {&l->m_src, &l->m_dst, &l->m_ddst, &l->m_dsrc};
    return layers_mems_make(c, data_md, mode == NN_TRAIN ? 4 : 2, ms, name, err, errlen);
}

void relu_forward(relu_layer *l, nn_ctx *c, float *out, const float *inp) {
    layers_mem_set(l->m_src, inp, l->name);
    layers_mem_set(l->m_dst, out, l->name);
    EXEC(c, &l->fwd, {DNNL_ARG_SRC, l->m_src}, {DNNL_ARG_DST, l->m_dst});
}

void relu_backward(relu_layer *l, nn_ctx *c, float *dinp, const float *dout, const float *out) {
    if (l->mode != NN_TRAIN) DIE("relu_backward on inference layer %s", l->name);
    layers_mem_set(l->m_dst, out, l->name);
    layers_mem_set(l->m_ddst, dout, l->name);
    layers_mem_set(l->m_dsrc, dinp, l->name);
    EXEC(c, &l->bwd, {DNNL_ARG_DST, l->m_dst}, {DNNL_ARG_DIFF_DST, l->m_ddst}, {DNNL_ARG_DIFF_SRC, l->m_dsrc});
}

void relu_free(relu_layer *l) {
    layers_prim_free(&l->fwd);
    layers_prim_free(&l->bwd);
    dnnl_memory_t *ms[] = {&l->m_src, &l->m_dst, &l->m_ddst, &l->m_dsrc};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) layers_mem_free(ms[i]);
    memset(l, 0, sizeof *l);
}

/* ---- add [+ ReLU] ------------------------------------------------------------------------- */

int nn_bf16_native(void) {
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

const char *nn_isa_name(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2_vnni_2: return "avx2_vnni_2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_fp16: return "avx512_core_fp16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    default: return "other";
    }
}

/* Vector length in floats of the code oneDNN runs on this CPU (after ONEDNN_MAX_CPU_ISA). */
static int isa_floats(void) {
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) return 16;
    if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2) return 8;
    return 4;
}

/* Whether the oneDNN running here has the binary post-op defect of 2.6.3 (layers.h,
 * add_relu_fusable): rechecked absent on 3.2 (test_add_relu_sweep with the workaround off, every
 * ISA cap; docs/perf.md); 3.0 and 3.1 were not checked and keep the workaround. */
static int binary_post_op_defect(void) {
    const dnnl_version_t *v = dnnl_version();
    return v->major < 3 || (v->major == 3 && v->minor < 2);
}

int add_relu_fusable(const_dnnl_memory_desc_t md) {
    if (!binary_post_op_defect()) return 1;
    dnnl_format_kind_t kind = dnnl_format_kind_undef;
    int inner_nblks = 0;
    DNNL_CHECK(dnnl_memory_desc_query(md, dnnl_query_format_kind, &kind), "descriptor");
    if (kind == dnnl_blocked) DNNL_CHECK(dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &inner_nblks), "descriptor");
    if (kind != dnnl_blocked || inner_nblks == 0) return 1;
    return nn_md_dim(md, 1) % isa_floats() == 0;
}

int add_init(add_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t a_md,
             const_dnnl_memory_desc_t b_md, int relu, nn_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->relu = relu;
    l->fused = relu && add_relu_fusable(a_md);
    l->a_md = layers_md_clone(a_md);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    DNNL_TRY(dnnl_primitive_attr_clone(&attr, c->attr), name); /* the user scratchpad */
    int rc = -1;
    if (l->fused && (dnnl_post_ops_create(&po) != dnnl_success ||
                     dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success ||
                     dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)) {
        seterr(err, errlen, "%s:%d: oneDNN ReLU post-op failed in layer %s", __FILE__, __LINE__, name);
        goto done;
    }
    dnnl_primitive_desc_t pd;
    rc = layers_pd_make_st(&l->fwd, c,
                           dnnl_binary_primitive_desc_create(&pd, c->engine, dnnl_binary_add, a_md, b_md, a_md, attr),
                           &pd, 0, "dnnl_binary_primitive_desc_create", name, err, errlen);
done:
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (rc) return rc;
    /* The ReLU layer: backward of the fused ReLU in training, and the forward where not fused. */
    if (relu && (mode == NN_TRAIN || !l->fused) && relu_init(&l->r, c, name, a_md, mode, err, errlen)) return -1;
    dnnl_memory_t *const in_a_md[] = {&l->m_a, &l->m_dst};
    if (layers_mems_make(c, a_md, 2, in_a_md, name, err, errlen)) return -1;
    return layers_mem_make(&l->m_b, c, b_md, NULL, name, err, errlen);
}

int add_in_place_ok(const add_layer *l) {
    return !l->fused || !binary_post_op_defect() || nn_md_padded_dim(l->a_md, 1) == nn_md_dim(l->a_md, 1);
}

void add_forward(add_layer *l, nn_ctx *c, float *out, const float *a, const float *b) {
    if (out == a && !add_in_place_ok(l)) DIE("layer %s: in-place add+ReLU on a padded format", l->name);
    layers_mem_set(l->m_a, a, l->name);
    layers_mem_set(l->m_b, b, l->name);
    layers_mem_set(l->m_dst, out, l->name);
    EXEC(c, &l->fwd, {DNNL_ARG_SRC_0, l->m_a}, {DNNL_ARG_SRC_1, l->m_b}, {DNNL_ARG_DST, l->m_dst});
    if (l->relu && !l->fused) relu_forward(&l->r, c, out, out);
}

void add_backward(add_layer *l, nn_ctx *c, float *dsum, const float *dout, const float *out) {
    if (!l->relu || !l->r.bwd.prim) DIE("add_backward on layer %s without a trained ReLU", l->name);
    relu_backward(&l->r, c, dsum, dout, out);
}

void add_free(add_layer *l) {
    layers_prim_free(&l->fwd);
    relu_free(&l->r);
    layers_mem_free(&l->m_a);
    layers_mem_free(&l->m_b);
    layers_mem_free(&l->m_dst);
    layers_md_free(&l->a_md);
    memset(l, 0, sizeof *l);
}

/* ---- pooling ------------------------------------------------------------------------------ */

int pool_init(pool_layer *l, nn_ctx *c, const char *name, const_dnnl_memory_desc_t src_md, int max,
              int k, int stride, int pad, nn_mode mode, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->mode = mode;
    int n = (int)nn_md_dim(src_md, 0), ch = (int)nn_md_dim(src_md, 1), ih = (int)nn_md_dim(src_md, 2),
        iw = (int)nn_md_dim(src_md, 3);
    /* Global average pooling: one window over the whole input, output 1 x 1. */
    const int kh = max ? k : ih, kw = max ? k : iw, s = max ? stride : 1, p = max ? pad : 0;
    dnnl_dims_t kernel = {kh, kw}, strides = {s, s}, pl = {p, p}, pr = {p, p}, dil = {0, 0};
    l->oh = (ih + 2 * p - kh) / s + 1;
    l->ow = (iw + 2 * p - kw) / s + 1;
    if (l->oh < 1 || l->ow < 1)
        return seterr(err, errlen, "layer %s: input %dx%d too small for pooling", name, ih, iw), -1;
    dnnl_alg_kind_t alg = max ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
    dnnl_memory_desc_t dst_any = nn_md4(n, ch, l->oh, l->ow, dnnl_format_tag_any);
    dnnl_primitive_desc_t fwd_pd, bwd_pd;
    dnnl_status_t st = dnnl_pooling_forward_primitive_desc_create(
        &fwd_pd, c->engine, mode == NN_TRAIN ? dnnl_forward_training : dnnl_forward_inference, alg, src_md, dst_any,
        strides, kernel, dil, pl, pr, c->attr);
    dnnl_memory_desc_destroy(dst_any);
    DNNL_TRY(st, name);
    if (layers_pd_make(&l->fwd, c, fwd_pd, &fwd_pd, name, err, errlen)) return -1;
    l->dst_md = layers_pd_md(fwd_pd, dnnl_query_dst_md);
    int rc = 0;
    if (mode == NN_TRAIN) {
        if (max) rc = ws_make(&l->ws, &l->m_ws, c, fwd_pd, name, err, errlen);
        if (!rc)
            rc = layers_pd_make_st(&l->bwd, c,
                                   dnnl_pooling_backward_primitive_desc_create(&bwd_pd, c->engine, alg, src_md,
                                                                               l->dst_md, strides, kernel, dil, pl, pr,
                                                                               fwd_pd, c->attr),
                                   &bwd_pd, 0, "backward pooling", name, err, errlen);
    }
    dnnl_primitive_desc_destroy(fwd_pd);
    if (rc) return rc;
    dnnl_memory_t *const srcs[] = {&l->m_src, &l->m_dsrc}, *const dsts[] = {&l->m_dst, &l->m_ddst};
    const int nm = mode == NN_TRAIN ? 2 : 1; /* and the gradient */
    if (layers_mems_make(c, src_md, nm, srcs, name, err, errlen)) return -1;
    return layers_mems_make(c, l->dst_md, nm, dsts, name, err, errlen);
}

void pool_forward(pool_layer *l, nn_ctx *c, float *out, const float *inp) {
    layers_mem_set(l->m_src, inp, l->name);
    layers_mem_set(l->m_dst, out, l->name);
    const dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, l->m_src}, {DNNL_ARG_DST, l->m_dst}, {DNNL_ARG_WORKSPACE, l->m_ws}};
    layers_prim_exec(c, &l->fwd, l->m_ws ? 3 : 2, a);
}

void pool_backward(pool_layer *l, nn_ctx *c, float *dinp, const float *dout) {
    if (l->mode != NN_TRAIN) DIE("pool_backward on inference layer %s", l->name);
    layers_mem_set(l->m_ddst, dout, l->name);
    layers_mem_set(l->m_dsrc, dinp, l->name);
    const dnnl_exec_arg_t a[] = {{DNNL_ARG_DIFF_DST, l->m_ddst}, {DNNL_ARG_DIFF_SRC, l->m_dsrc},
                                 {DNNL_ARG_WORKSPACE, l->m_ws}};
    layers_prim_exec(c, &l->bwd, l->m_ws ? 3 : 2, a);
}

void pool_free(pool_layer *l) {
    layers_prim_free(&l->fwd);
    layers_prim_free(&l->bwd);
    dnnl_memory_t *ms[] = {&l->m_src, &l->m_dst, &l->m_ws, &l->m_dsrc, &l->m_ddst};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) layers_mem_free(ms[i]);
    free(l->ws);
    layers_md_free(&l->dst_md);
    memset(l, 0, sizeof *l);
}
