/* test_jpeg_learn.c — the ImageNet input path end to end and learnable, against PyTorch (issue 11,
 * Tests: "End to end and learnable").
 *
 * Fashion-MNIST re-encoded as JPEG into an ImageFolder tree (10 class folders; every image
 * upscaled from 28 × 28 to h × w in [40, 70]², nearest or bilinear, both drawn from the image's
 * index), packed with `dsgd-run --pack`, trained with ResNet-18 (width 16, CIFAR stem, crop 32,
 * scale [32, 44], eval_resize 36, 4 epochs: configs/fmnist_jpeg.cfg, the example of
 * docs/data.md) through data.format = "jpeg" at p = 2 under mpiexec. The
 * final top-1 error must be within 0.03 of torchvision's on the very same JPEG bytes with the
 * same recipe: tools/make_jpeg_learn_reference.py trains that twin (it calls this program's
 * --make-tree and packs with ./dsgd-run) and stores its top-1 errors, the recipe and a CRC of
 * the packed bytes in test/data/jpeg_learn_ref.h5. PyTorch is not needed here: the test checks
 * that its pack is the reference's (CRC) and its recipe the reference's (attributes), then
 * compares with the stored number.
 *
 *   build/test/test_jpeg_learn                   the test (from the repository root)
 *   build/test/test_jpeg_learn --make-tree DIR   only write the tree (DIR/train, DIR/val)
 *
 * Every mpiexec runs under timeout (mpiutil.h). */
#define _GNU_SOURCE
#include <hdf5.h>
#include <jpeglib.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#undef MPI_TIMEOUT
#define MPI_TIMEOUT "400"
#include "data/idx.h"
#include "data/shards.h"
#include "mpiutil.h"
#include "testutil.h"
#include "util/util.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"
#define REF "test/data/jpeg_learn_ref.h5"

/* The recipe; tools/make_jpeg_learn_reference.py stores the same values as attributes of REF
 * and the test refuses a reference made with others. */
enum {
    N_TRAIN = 6000,  /* the first images of Fashion-MNIST's training set */
    N_VAL = 2000,    /* the first of its test set */
    SIDE_MIN = 40,   /* stored sizes h, w in [SIDE_MIN, SIDE_MAX] */
    SIDE_MAX = 70,
    P = 2, B = 32,
    EPOCHS = 4,
    WIDTH = 16,
    CROP = 32, SCALE_MIN = 32, SCALE_MAX = 44, EVAL_RESIZE = 36,
    WARMUP = 20,
    QUALITY = 90,    /* of the tree's JPEGs (--pack re-encodes at its default, 90, too) */
};
#define ALPHA 0.1
#define TOLERANCE 0.03

static const char *const CLASSES[10] = {"c0_tshirt_top", "c1_trouser", "c2_pullover", "c3_dress", "c4_coat",
                                        "c5_sandal",     "c6_shirt",   "c7_sneaker",  "c8_bag",   "c9_ankle_boot"};

static long iterations(void) { return (long)EPOCHS * (N_TRAIN / (P * B)); }

/* ---- the tree -------------------------------------------------------------------------------- */

/* 28 × 28 grey → h × w, nearest (interp 0) or bilinear with half-pixel centres (1), R = G = B. */
static void upscale(const uint8_t *src, uint8_t *rgb, int h, int w, int interp) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v;
            if (!interp) {
                v = src[(y * 28 / h) * 28 + x * 28 / w];
            } else {
                double sy = (y + 0.5) * 28.0 / h - 0.5, sx = (x + 0.5) * 28.0 / w - 0.5;
                sy = sy < 0 ? 0 : sy, sx = sx < 0 ? 0 : sx;
                int y0 = (int)sy, x0 = (int)sx, y1 = y0 < 27 ? y0 + 1 : 27, x1 = x0 < 27 ? x0 + 1 : 27;
                double fy = sy - y0, fx = sx - x0;
                v = (1 - fy) * ((1 - fx) * src[y0 * 28 + x0] + fx * src[y0 * 28 + x1]) +
                    fy * ((1 - fx) * src[y1 * 28 + x0] + fx * src[y1 * 28 + x1]);
            }
            uint8_t u = (uint8_t)lround(v);
            rgb[3 * (y * w + x)] = rgb[3 * (y * w + x) + 1] = rgb[3 * (y * w + x) + 2] = u;
        }
}

static int write_rgb_jpeg(const char *path, const uint8_t *rgb, int h, int w) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h, ci.input_components = 3, ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, QUALITY, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = (JSAMPROW)(rgb + (size_t)ci.next_scanline * w * 3);
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return fclose(f);
}

/* Write root/<split>/<class>/<index>.jpg for the first n images of an IDX set; sizes and the
 * filter are drawn from (split, index), so the tree is the same bytes on every run. */
static int write_split(const char *root, const char *split, const char *images, const char *labels, int n, uint64_t salt) {
    dataset d;
    char err[ERRLEN], path[1024];
    if (dataset_load(&d, images, labels, 10, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    if (d.n < n || d.h != 28 || d.w != 28) {
        fprintf(stderr, "%s: expected at least %d images of 28 x 28\n", images, n);
        dataset_free(&d);
        return -1;
    }
    for (int c = 0; c < 10; c++) {
        snprintf(path, sizeof path, "%s/%s/%s", root, split, CLASSES[c]);
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
        if (system(cmd) != 0) return -1;
    }
    uint8_t *rgb = xmalloc((size_t)SIDE_MAX * SIDE_MAX * 3);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const uint64_t k = seed_mix(salt, (uint64_t)i);
        const int span = SIDE_MAX - SIDE_MIN + 1;
        const int h = SIDE_MIN + (int)(k % span), w = SIDE_MIN + (int)((k >> 16) % span), interp = (int)((k >> 32) & 1);
        upscale(d.x + (size_t)i * 28 * 28, rgb, h, w, interp);
        snprintf(path, sizeof path, "%s/%s/%s/%05d.jpg", root, split, CLASSES[d.y[i]], i);
        if (write_rgb_jpeg(path, rgb, h, w)) fprintf(stderr, "cannot write %s\n", path), rc = -1;
    }
    free(rgb);
    dataset_free(&d);
    return rc;
}

static int make_tree(const char *root) {
    return write_split(root, "train", FMNIST "train-images-idx3-ubyte.gz", FMNIST "train-labels-idx1-ubyte.gz", N_TRAIN, 1) ||
           write_split(root, "val", FMNIST "t10k-images-idx3-ubyte.gz", FMNIST "t10k-labels-idx1-ubyte.gz", N_VAL, 2);
}

/* ---- the test -------------------------------------------------------------------------------- */

static char g_dir[256], g_pack[300];

static const char *tail(const char *s) {
    size_t n = strlen(s);
    return n > 3000 ? s + n - 3000 : s;
}

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dsgd_test_jpeg_learn_%d", (int)getpid());
    mkdir(g_dir, 0777);
    char tree[300], cmd[1024], out[8192];
    snprintf(tree, sizeof tree, "%s/tree", g_dir);
    ck_assert_msg(make_tree(tree) == 0, "cannot write the tree under %s", tree);
    snprintf(g_pack, sizeof g_pack, "%s/pack", g_dir);
    snprintf(cmd, sizeof cmd, "timeout 300 ./dsgd-run --pack %s %s --shard-images 2000", tree, g_pack);
    int st = run(cmd, out, sizeof out);
    ck_assert_msg(st == 0, "%s: exit %d\n%s", cmd, st, tail(out));
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

static double ref_attr(const char *name) {
    hid_t f = H5Fopen(REF, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "cannot open %s: make it with /usr/bin/python3 tools/make_jpeg_learn_reference.py", REF);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "%s has no attribute %s", REF, name);
    double v = NAN;
    ck_assert_int_ge(H5Aread(a, H5T_NATIVE_DOUBLE, &v), 0);
    H5Aclose(a), H5Fclose(f);
    return v;
}

/* CRC-32 of a split's JPEG bytes, samples in pack order (as the reference script computes it). */
static uint32_t pack_crc(const char *split, int64_t *n) {
    shards *s;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&s, g_pack, split, err, sizeof err) == 0, "%s", err);
    uint8_t *buf = xmalloc(shards_max_nbytes(s));
    uLong crc = crc32(0L, Z_NULL, 0);
    *n = shards_count(s);
    for (int64_t i = 0; i < *n; i++) {
        ck_assert_int_eq(shards_read(s, i, buf, err, sizeof err), 0);
        crc = crc32(crc, buf, (uInt)shards_nbytes(s, i));
    }
    free(buf);
    shards_close(s);
    return (uint32_t)crc;
}

START_TEST(reference_is_this_pack_and_recipe) {
    int64_t ntr, nva;
    const uint32_t ctr = pack_crc("train", &ntr), cva = pack_crc("val", &nva);
    ck_assert_int_eq(ntr, N_TRAIN);
    ck_assert_int_eq(nva, N_VAL);
    ck_assert_msg((double)ctr == ref_attr("train_crc32") && (double)cva == ref_attr("val_crc32"),
                  "the pack differs from the one %s was made on (CRC-32 %08x %08x against %08.0f %08.0f): "
                  "rerun tools/make_jpeg_learn_reference.py", REF, ctr, cva, ref_attr("train_crc32"), ref_attr("val_crc32"));
    const struct { const char *name; double v; } recipe[] = {
        {"n_train", N_TRAIN}, {"n_val", N_VAL}, {"p", P}, {"b", B}, {"iterations", (double)iterations()},
        {"width", WIDTH}, {"crop", CROP}, {"scale_min", SCALE_MIN}, {"scale_max", SCALE_MAX},
        {"eval_resize", EVAL_RESIZE}, {"warmup", WARMUP}, {"alpha", ALPHA},
    };
    for (size_t i = 0; i < sizeof recipe / sizeof *recipe; i++)
        ck_assert_msg(ref_attr(recipe[i].name) == recipe[i].v, "%s: %s = %g, the test runs %g", REF, recipe[i].name,
                      ref_attr(recipe[i].name), recipe[i].v);
}
END_TEST

START_TEST(learns_as_torchvision) {
    char h5[512], set[1200], out[1 << 15];
    snprintf(h5, sizeof h5, "%s/learn.h5", g_dir);
    /* the docs' example experiment (configs/fmnist_jpeg.cfg), on this test's pack */
    snprintf(set, sizeof set, "--set 'data.dir=\"%s\"' --set 'output=\"%s\"'", g_pack, h5);
    int st = dsgd(P, "configs/fmnist_jpeg.cfg", set, out, sizeof out);
    ck_assert_msg(st == 0, "exit %d\n%s", st, tail(out));
    /* it ran the reference's recipe: the run file's resolved experiment */
    ck_assert_int_eq(read_attr_long(h5, "p"), P);
    ck_assert_int_eq(read_attr_long(h5, "b"), B);
    ck_assert_int_eq(read_attr_long(h5, "iterations"), iterations());
    ck_assert_int_eq(read_attr_long(h5, "data_train_n"), N_TRAIN);
    ck_assert_int_eq(read_attr_long(h5, "data_val_n"), N_VAL);
    static char config[1 << 16];
    read_attr_string(h5, "config", config, sizeof config);
    char want[12][64];
    snprintf(want[0], 64, "  width = %d;", WIDTH);
    snprintf(want[1], 64, "  crop = %d;", CROP);
    snprintf(want[2], 64, "  scale = [%d, %d];", SCALE_MIN, SCALE_MAX);
    snprintf(want[3], 64, "  eval_resize = %d;", EVAL_RESIZE);
    snprintf(want[4], 64, "  warmup = %d;", WARMUP);
    snprintf(want[5], 64, "  base = %g;", ALPHA);
    snprintf(want[6], 64, "  schedule = \"cosine\";");
    snprintf(want[7], 64, "  stem = \"cifar\";");
    snprintf(want[8], 64, "  augment = \"scale\";");
    snprintf(want[9], 64, "momentum = 0.9;");
    snprintf(want[10], 64, "weight_decay = 0.0001;");
    snprintf(want[11], 64, "  every = %d;", N_TRAIN / (P * B));
    for (int i = 0; i < 12; i++) ck_assert_msg(strstr(config, want[i]), "configs/fmnist_jpeg.cfg: no '%s' (the recipe of %s)", want[i], REF);
    double top1[8];
    long ne = read_1d(h5, "/eval/top1_error", top1, 8);
    ck_assert_int_eq(ne, EPOCHS + 1);                  /* at the start and after each epoch */
    const double ours = top1[ne - 1], ref = ref_attr("top1_error");
    printf("jpeg_learn: top-1 error %.4f at the start, %.4f after %d epochs; torchvision %.4f (mean of %g seeds, "
           "%.4f..%.4f)\n", top1[0], ours, EPOCHS, ref, ref_attr("seeds"), ref_attr("top1_error_min"), ref_attr("top1_error_max"));
    ck_assert_msg(top1[0] > 0.7, "top-1 error %g before training: chance is 0.9", top1[0]);
    ck_assert_msg(fabs(ours - ref) <= TOLERANCE, "top-1 error %.4f, torchvision's %.4f: more than %g apart", ours, ref,
                  TOLERANCE);
}
END_TEST

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--make-tree")) return make_tree(argv[2]) ? 1 : 0;
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--make-tree DIR]\n", argv[0]);
        return 2;
    }
    Suite *s = suite_create("jpeg_learn");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 900);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, reference_is_this_pack_and_recipe);
    tcase_add_test(tc, learns_as_torchvision);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
