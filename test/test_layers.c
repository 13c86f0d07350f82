/* test_layers.c — every layer of src/nn/layers.h against PyTorch (test/data/layers.h5, written by
 * tools/make_reference.py): forward outputs, input gradients, parameter gradients, BN running
 * statistics. BN, ReLU, add and pooling run in every activation format the model can be given
 * (ACT_TAGS: nChw8c, nChw16c, nhwc, nchw — the convolutions pick nChw8c on AVX2, nChw16c on
 * AVX-512, nhwc for few channels; test_model_formats checks that the model's choice on this
 * machine is among them), with padded blocked cases of 4 channels. make check runs this file
 * under every ISA level the CPU offers (ONEDNN_MAX_CPU_ISA, test/isa-levels.sh), so one machine
 * checks what AVX2 and AVX-512 nodes run. test_add_relu_sweep checks add+ReLU exactly over
 * formats x channel counts x sizes, with guard bytes after dst (oneDNN 2.6.3's defect, layers.h;
 * absent in 3.2, where every case runs fused).
 *
 * Tolerances (relative L2 error ||got − want|| / ||want|| per tensor): 1e-5 for forward
 * outputs, 1e-4 for gradients (fp32 with a different summation order than PyTorch's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <strings.h>

#include <hdf5.h>

#include "nn/layers.h"
#include "h5ref.h"
#include "testutil.h"

#define TOL_FWD 1e-5
#define TOL_BWD 1e-4

#define CHECK_REL(what, got, want, n, tol)                                                                      \
    do {                                                                                                        \
        double r_ = rel_l2((got), (want), (n));                                                                 \
        ck_assert_msg(r_ <= (tol), "%s: relative L2 error %.3g > %.1g", (what), r_, (double)(tol));               \
    } while (0)

/* The activation formats the layer tests run in (every format nn_md_tag names). */
static const dnnl_format_tag_t ACT_TAGS[] = {dnnl_nChw8c, dnnl_nChw16c, dnnl_nhwc, dnnl_nchw};
#define N_ACT_TAGS ((int)(sizeof ACT_TAGS / sizeof ACT_TAGS[0]))

/* "bn (nChw8c): forward" */
static const char *in_fmt(const char *name, dnnl_format_tag_t tag, const char *quantity) {
    static char buf[160];
    snprintf(buf, sizeof buf, "%s (%s): %s", name, dnnl_fmt_tag2str(tag), quantity);
    return buf;
}

/* Buffers in a layer format, filled from / copied to plain NCHW. */
static float *import(nn_ctx *c, const_dnnl_memory_desc_t md, const float *plain) {
    float *buf = nn_alloc(nn_md_nbytes(md));
    dnnl_memory_desc_t p = nn_md4((int)nn_md_dim(md, 0), (int)nn_md_dim(md, 1), (int)nn_md_dim(md, 2), (int)nn_md_dim(md, 3), dnnl_nchw);
    nn_convert(c, buf, md, plain, p);
    dnnl_memory_desc_destroy(p);
    return buf;
}

static float *export(nn_ctx *c, const_dnnl_memory_desc_t md, const float *buf) {
    size_t n = (size_t)(nn_md_dim(md, 0) * nn_md_dim(md, 1) * nn_md_dim(md, 2) * nn_md_dim(md, 3));
    float *plain = malloc(n * sizeof(float));
    dnnl_memory_desc_t p = nn_md4((int)nn_md_dim(md, 0), (int)nn_md_dim(md, 1), (int)nn_md_dim(md, 2), (int)nn_md_dim(md, 3), dnnl_nchw);
    nn_convert(c, plain, p, buf, md);
    dnnl_memory_desc_destroy(p);
    return plain;
}

static size_t md_count(const_dnnl_memory_desc_t md) {
    return (size_t)(nn_md_dim(md, 0) * nn_md_dim(md, 1) * nn_md_dim(md, 2) * nn_md_dim(md, 3));
}

static void ctx(nn_ctx *c) {
    char err[ERRLEN];
    ck_assert_msg(nn_ctx_init(c, err, sizeof err) == 0, "%s", err);
}

/* ---- convolution ---- */

static const char *what(const char *name, dnnl_format_tag_t force, const char *quantity) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s (input %s): %s", name, force ? dnnl_fmt_tag2str(force) : "any", quantity);
    return buf;
}

/* Forward, input gradient and weight gradient of one case; force: the input's format (as the
 * producer fixes it in the model), or 0 for oneDNN's choice. */
static void conv_case(const char *name, dnnl_format_tag_t force) {
    nn_ctx c;
    ctx(&c);
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(g >= 0, "group %s", name);
    hsize_t xd[4], wd[4];
    size_t ny, nw;
    float *x = h5f(g, "x", NULL, xd), *w = h5f(g, "w", &nw, wd), *y = h5f(g, "y", &ny, NULL);
    float *dy = h5f(g, "dy", NULL, NULL), *dx = h5f(g, "dx", NULL, NULL), *dw = h5f(g, "dw", NULL, NULL);
    int k = h5attr(g, "k"), s = h5attr(g, "stride"), p = h5attr(g, "pad");
    ck_assert_int_eq((int)wd[2], k);

    char err[ERRLEN];
    dnnl_memory_desc_t forced = nn_md4((int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], force ? force : dnnl_nchw);
    conv_layer l;
    ck_assert_msg(conv_init(&l, &c, name, (int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], (int)wd[0], k, s, p,
                            force ? forced : NULL, NULL, NN_TRAIN, 1, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(md_count(l.dst_md), ny);
    float *xin = import(&c, l.src_md, x);
    float *out = nn_alloc(nn_md_nbytes(l.dst_md));
    conv_forward(&l, &c, out, xin, w);
    float *yp = export(&c, l.dst_md, out);
    CHECK_REL(what(name, force, "conv forward"), yp, y, ny, TOL_FWD);

    float *dyin = import(&c, l.dst_md, dy);
    float *dxb = nn_alloc(nn_md_nbytes(l.src_md));
    float *dwp = malloc(nw * sizeof(float));
    conv_backward(&l, &c, dxb, dwp, dyin, xin);
    float *dxp = export(&c, l.src_md, dxb);
    CHECK_REL(what(name, force, "conv grad input"), dxp, dx, md_count(l.src_md), TOL_BWD);
    CHECK_REL(what(name, force, "conv grad weight"), dwp, dw, nw, TOL_BWD);

    /* The inference primitive gives the same output. */
    conv_layer li;
    ck_assert_msg(conv_init(&li, &c, name, (int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], (int)wd[0], k, s, p,
                            l.src_md, l.dst_md, NN_INFER, 0, err, sizeof err) == 0,
                  "%s", err);
    float *outi = nn_alloc(nn_md_nbytes(li.dst_md));
    conv_forward(&li, &c, outi, xin, w);
    float *yi = export(&c, li.dst_md, outi);
    CHECK_REL(what(name, force, "conv inference forward"), yi, y, ny, TOL_FWD);

    conv_free(&l);
    conv_free(&li);
    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(xin), free(out), free(yp), free(dyin);
    free(dxb), free(dwp), free(dxp), free(outi), free(yi);
    H5Gclose(g);
    H5Fclose(f);
    nn_ctx_free(&c);
}

START_TEST(test_conv_3x3s1) { conv_case("conv_3x3s1", 0); }
END_TEST
START_TEST(test_conv_3x3s2) { conv_case("conv_3x3s2", 0); }
END_TEST
START_TEST(test_conv_1x1s2) { conv_case("conv_1x1s2", 0); }
END_TEST
START_TEST(test_conv_7x7s2) { conv_case("conv_7x7s2", 0); }
END_TEST
START_TEST(test_conv_3x3s1_c4) { conv_case("conv_3x3s1_c4", 0); }
END_TEST
START_TEST(test_conv_1x1s2_c4) { conv_case("conv_1x1s2_c4", 0); }
END_TEST
START_TEST(test_conv_3x3s1_c1) { conv_case("conv_3x3s1_c1", 0); }
END_TEST
START_TEST(test_conv_given_input) {
    conv_case("conv_3x3s1", dnnl_nchw);
    conv_case("conv_7x7s2", dnnl_nchw);
    conv_case("conv_3x3s1", dnnl_nhwc);
    conv_case("conv_3x3s1_c4", dnnl_nChw8c);
    conv_case("conv_1x1s2_c4", dnnl_nChw8c);
    conv_case("conv_3x3s1_c1", dnnl_nchw); /* backward-weights reorders into a jit format */
    /* oneDNN 2.6.3 and 3.2 (at AVX2) jit_1x1 backward-weights is wrong here (oneDNN #6035); conv_init must avoid it */
    conv_case("conv_1x1s2_c4", dnnl_nhwc);
}
END_TEST


/* ---- bf16 convolution (nn_ctx.conv_bf16) ---- */

/* f32 -> bf16 -> f32, round to nearest even (what oneDNN's f32->bf16 reorder and vcvtneps2bf16
 * do; finite inputs only). */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* Direct convolution in double, NCHW / OIHW, no bias: y = conv(x, w); dx, dw from dy (scatter
 * form: every output position adds its products to the inputs and weights it read). */
static void conv_ref(double *y, double *dx, double *dw, const float *x, const float *w, const float *dy, int n, int ic,
                     int ih, int iw, int oc, int k, int s, int p) {
    const int oh = (ih + 2 * p - k) / s + 1, ow = (iw + 2 * p - k) / s + 1;
    memset(dx, 0, (size_t)n * ic * ih * iw * sizeof *dx);
    memset(dw, 0, (size_t)oc * ic * k * k * sizeof *dw);
    for (int b = 0; b < n; b++)
        for (int o = 0; o < oc; o++)
            for (int i = 0; i < oh; i++)
                for (int j = 0; j < ow; j++) {
                    const size_t yi = (((size_t)b * oc + o) * oh + i) * ow + j;
                    double acc = 0;
                    for (int c = 0; c < ic; c++)
                        for (int u = 0; u < k; u++)
                            for (int v = 0; v < k; v++) {
                                const int hh = i * s - p + u, ww = j * s - p + v;
                                if (hh < 0 || hh >= ih || ww < 0 || ww >= iw) continue;
                                const size_t xi = (((size_t)b * ic + c) * ih + hh) * iw + ww;
                                const size_t wi = (((size_t)o * ic + c) * k + u) * k + v;
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += (double)dy[yi] * w[wi];
                                dw[wi] += (double)dy[yi] * x[xi];
                            }
                    y[yi] = acc;
                }
}

static double rel_l2_d(const float *got, const double *want, size_t n) {
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) e += (got[i] - want[i]) * (got[i] - want[i]), r += want[i] * want[i];
    return sqrt(e / (r > 0 ? r : 1));
}

/* One bf16 case: the layer's forward output, input gradient and weight gradient against the
 * double reference computed from the bf16-rounded input, weight and output gradient (so only
 * f32 accumulation differs: 1e-5 / 1e-4 as the fp32 tests), and against the reference from the
 * unrounded f32 values, which bf16 must miss by more than f32 accumulation would (the rounding
 * happened: > 1e-4) and by less than bf16's precision allows (< 1e-2, 8 significand bits over
 * sums of ~ic*k*k products). Returns l.lp (1: the layer ran bf16). */
static int conv_bf16_case(int n, int ic, int hw, int oc, int k, int s, int p, dnnl_format_tag_t force) {
    nn_ctx c;
    ctx(&c);
    c.conv_bf16 = 1;
    char err[ERRLEN], name[96];
    snprintf(name, sizeof name, "bf16 %dx%d/%d ic %d oc %d %dx%d", k, k, s, ic, oc, hw, hw);
    dnnl_memory_desc_t forced = force ? nn_md4(n, ic, hw, hw, force) : NULL;
    conv_layer l;
    ck_assert_msg(conv_init(&l, &c, name, n, ic, hw, hw, oc, k, s, p, forced, NULL, NN_TRAIN, 1, err, sizeof err) == 0,
                  "%s", err);
    const size_t nx = (size_t)n * ic * hw * hw, nw = (size_t)oc * ic * k * k, ny = md_count(l.dst_md);
    float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *dy = malloc(ny * sizeof *dy);
    float *xr = malloc(nx * sizeof *x), *wr = malloc(nw * sizeof *w), *dyr = malloc(ny * sizeof *dy);
    rng_t r;
    rng_seed(&r, (uint64_t)(ic * 1000 + oc * 10 + k));
    for (size_t i = 0; i < nx; i++) xr[i] = bf16_round(x[i] = (float)rng_normal(&r));
    for (size_t i = 0; i < nw; i++) wr[i] = bf16_round(w[i] = (float)(rng_normal(&r) / sqrt(ic * k * k)));
    for (size_t i = 0; i < ny; i++) dyr[i] = bf16_round(dy[i] = (float)rng_normal(&r));
    double *y16 = malloc(ny * sizeof(double)), *dx16 = malloc(nx * sizeof(double)), *dw16 = malloc(nw * sizeof(double));
    double *y32 = malloc(ny * sizeof(double)), *dx32 = malloc(nx * sizeof(double)), *dw32 = malloc(nw * sizeof(double));
    conv_ref(y16, dx16, dw16, xr, wr, dyr, n, ic, hw, hw, oc, k, s, p);
    conv_ref(y32, dx32, dw32, x, w, dy, n, ic, hw, hw, oc, k, s, p);

    float *xin = import(&c, l.src_md, x), *out = nn_alloc(nn_md_nbytes(l.dst_md));
    conv_forward(&l, &c, out, xin, w);
    float *dyin = import(&c, l.dst_md, dy), *dxb = nn_alloc(nn_md_nbytes(l.src_md)), *dwp = malloc(nw * sizeof(float));
    conv_backward(&l, &c, dxb, dwp, dyin, xin);
    float *yp = export(&c, l.dst_md, out), *dxp = export(&c, l.src_md, dxb);
    const double e[3] = {rel_l2_d(yp, l.lp ? y16 : y32, ny), rel_l2_d(dxp, l.lp ? dx16 : dx32, nx),
                         rel_l2_d(dwp, l.lp ? dw16 : dw32, nw)};
    const double f[3] = {rel_l2_d(yp, y32, ny), rel_l2_d(dxp, dx32, nx), rel_l2_d(dwp, dw32, nw)};
    static const char *q[3] = {"forward", "grad input", "grad weight"};
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(e[i] <= (i ? TOL_BWD : TOL_FWD), "%s (input %s, %s): %s vs the reference of %s inputs: relative L2 error %.3g",
                      name, dnnl_fmt_tag2str(nn_md_tag(l.src_md)), l.lp ? "bf16" : "stayed f32", q[i],
                      l.lp ? "bf16-rounded" : "f32", e[i]);
        if (l.lp)
            ck_assert_msg(f[i] > 1e-4 && f[i] < 1e-2, "%s: %s vs the f32 reference: relative L2 error %.3g, expected bf16's (1e-4, 1e-2)",
                          name, q[i], f[i]);
    }
    printf("%-40s input %-7s %s: error vs f32 %.2e %.2e %.2e\n", name, dnnl_fmt_tag2str(nn_md_tag(l.src_md)),
           l.lp ? "bf16" : "f32 ", f[0], f[1], f[2]);
    const int lp = l.lp;
    conv_free(&l);
    if (forced) dnnl_memory_desc_destroy(forced);
    free(x), free(w), free(dy), free(xr), free(wr), free(dyr), free(y16), free(dx16), free(dw16), free(y32), free(dx32);
    free(dw32), free(xin), free(out), free(dyin), free(dxb), free(dwp), free(yp), free(dxp);
    nn_ctx_free(&c);
    return lp;
}

/* bf16 convolutions at ResNet-18's block shapes (scaled down): where oneDNN runs native bf16
 * (nn_bf16_native) the block convolutions must run bf16 in the model's formats (nChw16c, nhwc
 * and oneDNN's choice); a layer that stays f32 (the 3-channel stem) must be exactly as good as
 * the fp32 layer. Elsewhere model_create refuses bf16 (test_model) and this test only checks
 * that layers stay f32. */
START_TEST(test_conv_bf16) {
    const int native = nn_bf16_native();
    if (!native) printf("no native bf16 here (oneDNN ISA %s): bf16 layers must stay f32\n", nn_isa_name());
    static const dnnl_format_tag_t fmts[] = {0, dnnl_nChw16c, dnnl_nhwc};
    for (size_t t = 0; t < sizeof fmts / sizeof fmts[0]; t++) {
        ck_assert_int_eq(conv_bf16_case(2, 32, 10, 32, 3, 1, 1, fmts[t]), native); /* layerN.M.conv */
        ck_assert_int_eq(conv_bf16_case(2, 32, 10, 64, 3, 2, 1, fmts[t]), native); /* first conv of a stage */
        ck_assert_int_eq(conv_bf16_case(2, 32, 10, 64, 1, 2, 0, fmts[t]), native); /* downsample */
    }
    conv_bf16_case(2, 3, 16, 16, 7, 2, 3, dnnl_nchw); /* the ImageNet stem: either way, checked */
    conv_bf16_case(2, 1, 12, 16, 3, 1, 1, dnnl_nchw); /* the Fashion-MNIST stem */
}
END_TEST

/* ---- batch normalisation ---- */

static void bn_case(const char *name, dnnl_format_tag_t tag) {
    nn_ctx c;
    ctx(&c);
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(g >= 0, "group %s", name);
    hsize_t xd[4];
    size_t nx, nc;
    float *x = h5f(g, "x", &nx, xd), *gamma = h5f(g, "gamma", &nc, NULL), *beta = h5f(g, "beta", NULL, NULL);
    float *rm = h5f(g, "rm0", NULL, NULL), *rv = h5f(g, "rv0", NULL, NULL), *y = h5f(g, "y", NULL, NULL);
    float *dy = h5f(g, "dy", NULL, NULL), *dx = h5f(g, "dx", NULL, NULL);
    float *dgamma = h5f(g, "dgamma", NULL, NULL), *dbeta = h5f(g, "dbeta", NULL, NULL);
    float *rm1 = h5f(g, "rm1", NULL, NULL), *rv1 = h5f(g, "rv1", NULL, NULL);
    int relu = h5attr(g, "relu");

    char err[ERRLEN];
    dnnl_memory_desc_t md = nn_md4((int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], tag);
    bn_layer l;
    ck_assert_msg(bn_init(&l, &c, name, md, relu, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    float *xin = import(&c, md, x), *out = nn_alloc(nn_md_nbytes(md));
    bn_forward(&l, &c, out, xin, gamma, beta, rm, rv);
    float *yp = export(&c, md, out);
    CHECK_REL(in_fmt(name, tag, "bn forward"), yp, y, nx, TOL_FWD);
    CHECK_REL(in_fmt(name, tag, "bn running mean"), rm, rm1, nc, TOL_FWD);
    CHECK_REL(in_fmt(name, tag, "bn running var"), rv, rv1, nc, TOL_FWD);

    float *dyin = import(&c, md, dy), *dxb = nn_alloc(nn_md_nbytes(md));
    float *dg = malloc(nc * sizeof(float)), *db = malloc(nc * sizeof(float));
    bn_backward(&l, &c, dxb, dg, db, dyin, xin, gamma, beta);
    float *dxp = export(&c, md, dxb);
    CHECK_REL(in_fmt(name, tag, "bn grad input"), dxp, dx, nx, TOL_BWD);
    CHECK_REL(in_fmt(name, tag, "bn grad gamma"), dg, dgamma, nc, TOL_BWD);
    CHECK_REL(in_fmt(name, tag, "bn grad beta"), db, dbeta, nc, TOL_BWD);

    /* In place (dinp == dout), as the model runs the fused BN+ReLU backward. */
    bn_backward(&l, &c, dyin, dg, db, dyin, xin, gamma, beta);
    float *dxp2 = export(&c, md, dyin);
    CHECK_REL(in_fmt(name, tag, "bn grad input in place"), dxp2, dx, nx, TOL_BWD);

    /* Inference with the updated running statistics, in place, against the closed form. */
    bn_layer li;
    ck_assert_msg(bn_init(&li, &c, name, md, relu, NN_INFER, err, sizeof err) == 0, "%s", err);
    bn_forward(&li, &c, xin, xin, gamma, beta, rm, rv);
    float *yi = export(&c, md, xin);
    float *want = malloc(nx * sizeof(float));
    size_t hw = (size_t)(xd[2] * xd[3]);
    for (size_t i = 0; i < nx; i++) {
        size_t ch = (i / hw) % xd[1];
        float v = gamma[ch] * (x[i] - rm1[ch]) / sqrtf(rv1[ch] + 1e-5f) + beta[ch];
        want[i] = relu && v < 0 ? 0 : v;
    }
    CHECK_REL(in_fmt(name, tag, "bn inference forward"), yi, want, nx, TOL_FWD);

    bn_free(&l);
    bn_free(&li);
    free(x), free(gamma), free(beta), free(rm), free(rv), free(y), free(dy), free(dx), free(dgamma);
    free(dbeta), free(rm1), free(rv1), free(xin), free(out), free(yp), free(dyin), free(dxb), free(dg);
    free(db), free(dxp), free(dxp2), free(yi), free(want);
    H5Gclose(g);
    H5Fclose(f);
    nn_ctx_free(&c);
}

START_TEST(test_bn) {
    for (int i = 0; i < N_ACT_TAGS; i++) bn_case("bn", ACT_TAGS[i]);
}
END_TEST
START_TEST(test_bn_relu) {
    for (int i = 0; i < N_ACT_TAGS; i++) bn_case("bnrelu", ACT_TAGS[i]);
}
END_TEST
START_TEST(test_bn_c4) {
    for (int i = 0; i < N_ACT_TAGS; i++) bn_case("bn_c4", ACT_TAGS[i]);
}
END_TEST

/* ---- ReLU and add + ReLU ---- */

static void relu_case(const char *name, dnnl_format_tag_t tag) {
    nn_ctx c;
    ctx(&c);
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    hsize_t xd[4];
    size_t n;
    float *x = h5f(g, "x", &n, xd), *y = h5f(g, "y", NULL, NULL), *dy = h5f(g, "dy", NULL, NULL);
    float *dx = h5f(g, "dx", NULL, NULL);
    char err[ERRLEN];
    dnnl_memory_desc_t md = nn_md4((int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], tag);
    relu_layer l;
    ck_assert_msg(relu_init(&l, &c, "relu", md, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    float *xin = import(&c, md, x), *out = nn_alloc(nn_md_nbytes(md));
    relu_forward(&l, &c, out, xin);
    float *yp = export(&c, md, out);
    CHECK_REL(in_fmt(name, tag, "relu forward"), yp, y, n, 0.0);
    float *dyin = import(&c, md, dy);
    relu_backward(&l, &c, dyin, dyin, out);
    float *dxp = export(&c, md, dyin);
    CHECK_REL(in_fmt(name, tag, "relu backward"), dxp, dx, n, 0.0);
    relu_forward(&l, &c, xin, xin); /* in place */
    float *yp2 = export(&c, md, xin);
    CHECK_REL(in_fmt(name, tag, "relu forward in place"), yp2, y, n, 0.0);
    relu_free(&l);
    free(x), free(y), free(dy), free(dx), free(xin), free(out), free(yp), free(dyin), free(dxp), free(yp2);
    H5Gclose(g);
    H5Fclose(f);
    nn_ctx_free(&c);
}

START_TEST(test_relu) {
    for (int i = 0; i < N_ACT_TAGS; i++) {
        relu_case("relu", ACT_TAGS[i]);
        relu_case("relu_c4", ACT_TAGS[i]);
    }
}
END_TEST

static void add_case(const char *name, dnnl_format_tag_t tag) {
    nn_ctx c;
    ctx(&c);
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    hsize_t xd[4];
    size_t n;
    float *a = h5f(g, "a", &n, xd), *b = h5f(g, "b", NULL, NULL), *y = h5f(g, "y", NULL, NULL);
    float *dy = h5f(g, "dy", NULL, NULL), *dsum = h5f(g, "dsum", NULL, NULL);
    char err[ERRLEN];
    dnnl_memory_desc_t md = nn_md4((int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], tag);
    add_layer l, acc;
    ck_assert_msg(add_init(&l, &c, "add_relu", md, md, 1, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(add_init(&acc, &c, "add", md, md, 0, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    float *ain = import(&c, md, a), *bin = import(&c, md, b), *out = nn_alloc(nn_md_nbytes(md));
    add_forward(&l, &c, out, ain, bin);
    float *yp = export(&c, md, out);
    CHECK_REL(in_fmt(name, tag, "add+relu forward"), yp, y, n, TOL_FWD);
    if (add_in_place_ok(&l)) { /* in place, as the residual connection runs where it may */
        add_forward(&l, &c, ain, ain, bin);
        float *yp2 = export(&c, md, ain);
        CHECK_REL(in_fmt(name, tag, "add+relu forward in place"), yp2, y, n, TOL_FWD);
        free(yp2);
    } else {
        ck_assert_msg(l.fused && nn_md_padded_dim(md, 1) != nn_md_dim(md, 1), "in place refused without fused ReLU and padding");
    }
    float *dyin = import(&c, md, dy);
    add_backward(&l, &c, dyin, dyin, out);
    float *dp = export(&c, md, dyin);
    CHECK_REL(in_fmt(name, tag, "add+relu backward"), dp, dsum, n, 0.0);
    /* Plain add: (a + b) − b = a up to rounding. */
    float *a2 = import(&c, md, a), *nb = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) nb[i] = a[i] + b[i];
    float *sum = nn_alloc(nn_md_nbytes(md));
    add_forward(&acc, &c, sum, a2, bin);
    float *sp = export(&c, md, sum);
    CHECK_REL(in_fmt(name, tag, "add forward"), sp, nb, n, 1e-7);
    add_forward(&acc, &c, a2, a2, bin); /* in place: the model's gradient accumulation */
    float *sp2 = export(&c, md, a2);
    CHECK_REL(in_fmt(name, tag, "add forward in place"), sp2, nb, n, 1e-7);
    add_free(&l);
    add_free(&acc);
    free(a), free(b), free(y), free(dy), free(dsum), free(ain), free(bin), free(yp), free(dyin), free(dp);
    free(a2), free(nb), free(sum), free(sp), free(sp2), free(out);
    H5Gclose(g);
    H5Fclose(f);
    nn_ctx_free(&c);
}

START_TEST(test_add_relu) {
    for (int i = 0; i < N_ACT_TAGS; i++) {
        add_case("add_relu", ACT_TAGS[i]);
        add_case("add_relu_c4", ACT_TAGS[i]);
    }
}
END_TEST

/* add+ReLU is exact in fp32: every format x channel count x size against the closed form,
 * out of place and (where add_in_place_ok) in place, with 4 KiB of guard bytes after each
 * buffer that must stay untouched. Channel counts cover multiples and non-multiples of 8 and 16
 * (oneDNN 2.6.3's fused post-op fails on the latter, per ISA: layers.h, add_relu_fusable; from
 * oneDNN 3.2 on every case runs fused, and in place, and must be exact). */
START_TEST(test_add_relu_sweep) {
    static const int chans[] = {1, 3, 4, 8, 12, 16, 20, 24, 32, 40, 64, 72};
    static const int sizes[] = {1, 3, 7};
    enum { GUARD = 4096 };
    nn_ctx c;
    ctx(&c);
    char err[ERRLEN];
    int cases = 0, unfused = 0;
    for (int t = 0; t < N_ACT_TAGS; t++)
        for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                const int n = 2, ch = chans[ci], hw = sizes[si];
                dnnl_memory_desc_t md = nn_md4(n, ch, hw, hw, ACT_TAGS[t]), plain = nn_md4(n, ch, hw, hw, dnnl_nchw);
                const size_t cnt = (size_t)n * ch * hw * hw, nb = nn_md_nbytes(md);
                add_layer l;
                ck_assert_msg(add_init(&l, &c, "sweep", md, md, 1, NN_TRAIN, err, sizeof err) == 0, "%s", err);
                unfused += !l.fused;
                float *a = malloc(cnt * sizeof(float)), *b = malloc(cnt * sizeof(float));
                float *want = malloc(cnt * sizeof(float));
                for (size_t i = 0; i < cnt; i++) {
                    a[i] = (float)((i * 7919u) % 1001) / 500.0f - 1.0f;
                    b[i] = (float)((i * 104729u) % 997) / 498.5f - 1.0f;
                    want[i] = a[i] + b[i] > 0 ? a[i] + b[i] : 0.0f;
                }
                float *ain = import(&c, md, a), *bin = import(&c, md, b);
                for (int inplace = 0; inplace <= add_in_place_ok(&l); inplace++) {
                    unsigned char *raw = nn_alloc(nb + GUARD);
                    memset(raw + nb, 0xA5, GUARD);
                    float *out = (float *)raw;
                    if (inplace) nn_convert(&c, out, md, a, plain);
                    add_forward(&l, &c, out, inplace ? out : ain, bin);
                    float *got = export(&c, md, out);
                    size_t bad = 0;
                    for (size_t i = 0; i < cnt; i++) bad += got[i] != want[i];
                    size_t touched = 0;
                    for (size_t i = 0; i < GUARD; i++) touched += raw[nb + i] != 0xA5;
                    ck_assert_msg(bad == 0 && touched == 0,
                                  "add+ReLU %s C=%d %dx%d %s (fused %d): %zu of %zu values wrong, %zu guard bytes "
                                  "written",
                                  dnnl_fmt_tag2str(ACT_TAGS[t]), ch, hw, hw, inplace ? "in place" : "out of place",
                                  l.fused, bad, cnt, touched);
                    free(got);
                    free(raw);
                    cases++;
                }
                free(a), free(b), free(want), free(ain), free(bin);
                add_free(&l);
                dnnl_memory_desc_destroy(md);
                dnnl_memory_desc_destroy(plain);
            }
    /* Before oneDNN 3.2 the blocked formats with a channel count that is no multiple of 16 are
     * never fused on AVX-512 (nor of 8 on AVX2); plain formats always are. From 3.2 on, all are. */
    const dnnl_version_t *v = dnnl_version();
    if (v->major > 3 || (v->major == 3 && v->minor >= 2))
        ck_assert_int_eq(unfused, 0);
    else
        ck_assert_int_gt(unfused, 0);
    printf("add+ReLU sweep: %d cases exact, guard bytes intact; %d of %d layers with the ReLU unfused\n", cases,
           unfused, N_ACT_TAGS * 12 * 3);
    nn_ctx_free(&c);
}
END_TEST

/* The format the model's activations take on this machine (the stem convolution's choice,
 * model_build.c build_stem, or nhwc where that choice would pad the channels: oneDNN 3.2 has only a
 * reference forward convolution there) is one the layer tests cover, at the widths of the
 * experiments. */
START_TEST(test_model_formats) {
    nn_ctx c;
    ctx(&c);
    char err[ERRLEN];
    static const int widths[] = {4, 16, 24, 64};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        conv_layer l;
        ck_assert_msg(conv_init(&l, &c, "stem", 8, 3, 32, 32, widths[i], 3, 1, 1, NULL, NULL, NN_TRAIN, 0, err,
                                sizeof err) == 0,
                      "%s", err);
        dnnl_format_tag_t tag = nn_md_tag(l.dst_md);
        int covered = 0;
        for (int t = 0; t < N_ACT_TAGS; t++) covered |= tag == ACT_TAGS[t];
        ck_assert_msg(covered, "width %d: the stem convolution's output format is none of ACT_TAGS", widths[i]);
        printf("model activation format at width %d: %s\n", widths[i], dnnl_fmt_tag2str(tag));
        conv_free(&l);
    }
    nn_ctx_free(&c);
}
END_TEST

/* ---- pooling ---- */

static void maxpool_case(const char *name, dnnl_format_tag_t tag) {
    nn_ctx c;
    ctx(&c);
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    hsize_t xd[4];
    size_t nx, ny;
    float *x = h5f(g, "x", &nx, xd), *y = h5f(g, "y", &ny, NULL), *dy = h5f(g, "dy", NULL, NULL);
    float *dx = h5f(g, "dx", NULL, NULL);
    char err[ERRLEN];
    dnnl_memory_desc_t md = nn_md4((int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], tag);
    pool_layer l;
    ck_assert_msg(pool_init(&l, &c, name, md, 1, h5attr(g, "k"), h5attr(g, "stride"), h5attr(g, "pad"), NN_TRAIN,
                            err, sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(md_count(l.dst_md), ny);
    float *xin = import(&c, md, x), *out = nn_alloc(nn_md_nbytes(l.dst_md));
    pool_forward(&l, &c, out, xin);
    float *yp = export(&c, l.dst_md, out);
    CHECK_REL(in_fmt(name, tag, "maxpool forward"), yp, y, ny, 0.0);
    float *dyin = import(&c, l.dst_md, dy), *dxb = nn_alloc(nn_md_nbytes(md));
    pool_backward(&l, &c, dxb, dyin);
    float *dxp = export(&c, md, dxb);
    CHECK_REL(in_fmt(name, tag, "maxpool backward"), dxp, dx, nx, TOL_FWD);
    pool_free(&l);
    free(x), free(y), free(dy), free(dx), free(xin), free(out), free(yp), free(dyin), free(dxb), free(dxp);
    H5Gclose(g);
    H5Fclose(f);
    nn_ctx_free(&c);
}

START_TEST(test_maxpool) {
    for (int i = 0; i < N_ACT_TAGS; i++) {
        maxpool_case("maxpool_9", ACT_TAGS[i]);
        maxpool_case("maxpool_12", ACT_TAGS[i]);
        maxpool_case("maxpool_c4", ACT_TAGS[i]);
    }
}
END_TEST

START_TEST(test_avgpool) {
    const dnnl_format_tag_t tag = ACT_TAGS[_i];
    nn_ctx c;
    ctx(&c);
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, "avgpool", H5P_DEFAULT);
    hsize_t xd[4];
    size_t nx, ny;
    float *x = h5f(g, "x", &nx, xd), *y = h5f(g, "y", &ny, NULL), *dy = h5f(g, "dy", NULL, NULL);
    float *dx = h5f(g, "dx", NULL, NULL);
    char err[ERRLEN];
    dnnl_memory_desc_t md = nn_md4((int)xd[0], (int)xd[1], (int)xd[2], (int)xd[3], tag);
    pool_layer l;
    ck_assert_msg(pool_init(&l, &c, "avgpool", md, 0, 0, 0, 0, NN_TRAIN, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(l.oh, 1);
    ck_assert_uint_eq(md_count(l.dst_md), ny);
    float *xin = import(&c, md, x), *out = nn_alloc(nn_md_nbytes(l.dst_md));
    pool_forward(&l, &c, out, xin);
    float *yp = export(&c, l.dst_md, out); /* (N, C, 1, 1) plain = (N, C) */
    CHECK_REL(in_fmt("avgpool", tag, "avgpool forward"), yp, y, ny, TOL_FWD);
    float *dyin = import(&c, l.dst_md, dy), *dxb = nn_alloc(nn_md_nbytes(md));
    pool_backward(&l, &c, dxb, dyin);
    float *dxp = export(&c, md, dxb);
    CHECK_REL(in_fmt("avgpool", tag, "avgpool backward"), dxp, dx, nx, TOL_FWD);
    pool_free(&l);
    free(x), free(y), free(dy), free(dx), free(xin), free(out), free(yp), free(dyin), free(dxb), free(dxp);
    H5Gclose(g);
    H5Fclose(f);
    nn_ctx_free(&c);
}
END_TEST

/* ---- fully connected, cross-entropy ---- */

START_TEST(test_fc) {
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, "fc", H5P_DEFAULT);
    hsize_t xd[4], wd[4];
    size_t nx, nw, ny;
    float *x = h5f(g, "x", &nx, xd), *w = h5f(g, "w", &nw, wd), *b = h5f(g, "b", NULL, NULL);
    float *y = h5f(g, "y", &ny, NULL), *dy = h5f(g, "dy", NULL, NULL), *dx = h5f(g, "dx", NULL, NULL);
    float *dw = h5f(g, "dw", NULL, NULL), *db = h5f(g, "db", NULL, NULL);
    int n = (int)xd[0], nin = (int)xd[1], nout = (int)wd[0];
    float *yp = malloc(ny * sizeof(float)), *dxp = malloc(nx * sizeof(float)), *dwp = malloc(nw * sizeof(float));
    float *dbp = malloc((size_t)nout * sizeof(float));
    fc_forward(yp, x, w, b, n, nin, nout);
    CHECK_REL("fc forward", yp, y, ny, TOL_FWD);
    fc_backward(dxp, dwp, dbp, dy, x, w, n, nin, nout);
    CHECK_REL("fc grad input", dxp, dx, nx, TOL_BWD);
    CHECK_REL("fc grad weight", dwp, dw, nw, TOL_BWD);
    CHECK_REL("fc grad bias", dbp, db, (size_t)nout, TOL_BWD);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db), free(yp), free(dxp), free(dwp), free(dbp);
    H5Gclose(g);
    H5Fclose(f);
}
END_TEST

START_TEST(test_softmax_xent) {
    hid_t f = h5open("layers.h5");
    hid_t g = H5Gopen2(f, "xent", H5P_DEFAULT);
    hsize_t ld[4];
    size_t nl, nlab;
    float *logits = h5f(g, "logits", &nl, ld), *loss = h5f(g, "loss", NULL, NULL);
    float *dlogits = h5f(g, "dlogits", NULL, NULL);
    int *y = h5i(g, "labels", &nlab);
    int n = (int)ld[0], k = (int)ld[1];
    ck_assert_uint_eq(nlab, (size_t)n);
    float *probs = malloc(nl * sizeof(float)), *losses = malloc((size_t)n * sizeof(float));
    float *d = malloc(nl * sizeof(float));
    float l = softmax_xent_forward(probs, losses, logits, y, n, k);
    ck_assert_msg(isfinite(l), "loss not finite");
    ck_assert_msg(fabs(l - loss[0]) <= 1e-5 * fabs(loss[0]), "loss %.9g, PyTorch %.9g", l, loss[0]);
    double s = 0;
    for (int i = 0; i < n; i++) s += losses[i];
    ck_assert_msg(fabs(s / n - l) <= 1e-6 * fabs(l), "per-sample losses do not average to the loss");
    softmax_xent_backward(d, probs, y, n, k);
    CHECK_REL("cross-entropy grad logits", d, dlogits, nl, TOL_FWD);
    free(logits), free(loss), free(dlogits), free(y), free(probs), free(losses), free(d);
    H5Gclose(g);
    H5Fclose(f);
}
END_TEST

/* Under make check's ISA caps (test/isa-levels.sh), the cap is the ISA oneDNN really runs. */
START_TEST(test_isa_cap) {
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    if (!cap || !*cap || !strcasecmp(cap, "ALL")) return;
    ck_assert_msg(!strcasecmp(cap, nn_isa_name()), "ONEDNN_MAX_CPU_ISA=%s, oneDNN runs %s", cap, nn_isa_name());
}
END_TEST

static Suite *layers_suite(void) {
    Suite *s = suite_create("layers");
    TCase *tc = tcase_create("pytorch");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_isa_cap);
    tcase_add_test(tc, test_conv_3x3s1);
    tcase_add_test(tc, test_conv_3x3s2);
    tcase_add_test(tc, test_conv_1x1s2);
    tcase_add_test(tc, test_conv_7x7s2);
    tcase_add_test(tc, test_conv_3x3s1_c4);
    tcase_add_test(tc, test_conv_1x1s2_c4);
    tcase_add_test(tc, test_conv_3x3s1_c1);
    tcase_add_test(tc, test_conv_given_input);
    tcase_add_test(tc, test_conv_bf16);
    tcase_add_test(tc, test_bn);
    tcase_add_test(tc, test_bn_relu);
    tcase_add_test(tc, test_bn_c4);
    tcase_add_test(tc, test_relu);
    tcase_add_test(tc, test_add_relu);
    tcase_add_test(tc, test_add_relu_sweep);
    tcase_add_test(tc, test_model_formats);
    tcase_add_test(tc, test_maxpool);
    tcase_add_loop_test(tc, test_avgpool, 0, N_ACT_TAGS);
    tcase_add_test(tc, test_fc);
    tcase_add_test(tc, test_softmax_xent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    printf("oneDNN ISA: %s\n", nn_isa_name());
    return run_suite(layers_suite());
}
