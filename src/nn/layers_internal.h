/* layers_internal.h — the oneDNN plumbing shared by the layer files, for src/nn/ only: memory
 * descriptors, primitives and their scratchpad, memory objects and execution (defined in
 * layers.c; used there and by layers_conv.c). */
#ifndef DSGD_LAYERS_INTERNAL_H
#define DSGD_LAYERS_INTERNAL_H

#include "nn/layers.h"

dnnl_memory_desc_t layers_md4(int n, int ch, int h, int w, dnnl_data_type_t dt, dnnl_format_tag_t tag);
dnnl_memory_desc_t layers_md_clone(const_dnnl_memory_desc_t md);
void layers_md_free(dnnl_memory_desc_t *md);
int layers_prim_make(nn_prim *p, nn_ctx *c, dnnl_primitive_desc_t pd, const char *layer, char *err, size_t errlen);
void layers_prim_free(nn_prim *p);
int layers_pd_make(nn_prim *p, nn_ctx *c, dnnl_primitive_desc_t pd, dnnl_primitive_desc_t *keep, const char *layer,
            char *err, size_t errlen);
dnnl_memory_desc_t layers_pd_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what);
int layers_mem_make(dnnl_memory_t *m, nn_ctx *c, const_dnnl_memory_desc_t md, void *handle, const char *layer, char *err,
             size_t errlen);
void layers_mem_free(dnnl_memory_t *m);
/* Memory objects of md without a buffer yet (layers_mem_set points them): *ms[0], ..., *ms[n-1]. */
int layers_mems_make(nn_ctx *c, const_dnnl_memory_desc_t md, int n, dnnl_memory_t *const ms[], const char *layer,
                     char *err, size_t errlen);
/* The primitive of *pd, which a dnnl_*_primitive_desc_create returning st made (layers_pd_make;
 * *pd kept if keep); -1 with err naming `what` if st is a failure. */
int layers_pd_make_st(nn_prim *p, nn_ctx *c, dnnl_status_t st, dnnl_primitive_desc_t *pd, int keep, const char *what,
                      const char *layer, char *err, size_t errlen);
/* Point m at p (const only as far as the caller is concerned: oneDNN does not write through a
 * source). oneDNN 3's dnnl_memory_set_data_handle no longer zeroes the padding of blocked
 * formats (2.x's _v2 did); every buffer this module hands out is zeroed at allocation
 * (nn_alloc) and primitives keep the padding of their outputs zero. */
static inline void layers_mem_set(dnnl_memory_t m, const void *p, const char *layer) {
    DNNL_CHECK(dnnl_memory_set_data_handle(m, (void *)p), layer);
}

#define MAX_ARGS 16

/* Execute p with args plus its scratchpad. */
void layers_prim_exec(nn_ctx *c, const nn_prim *p, int nargs, const dnnl_exec_arg_t *args);
#define EXEC(c, p, ...)                                                                           \
    do {                                                                                          \
        const dnnl_exec_arg_t args_[] = {__VA_ARGS__};                                            \
        layers_prim_exec((c), (p), (int)(sizeof args_ / sizeof args_[0]), args_);                        \
    } while (0)

#endif
