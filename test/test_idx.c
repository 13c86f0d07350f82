/* test_idx.c — the IDX reader (src/data/idx.c): round trips of synthetic raw and gzip files,
 * one test per kind of bad input (each must return EXIT_BADINPUT with a message naming the
 * file and the problem), and the real Fashion-MNIST files when they are installed. */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/idx.h"
#include "testutil.h"
#include "util/util.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static char tmpdir[256];

/* Path of a file named name inside the test directory (static buffer per slot). */
static const char *tpath(int slot, const char *name) {
    static char buf[4][512];
    snprintf(buf[slot], sizeof buf[slot], "%s/%s", tmpdir, name);
    return buf[slot];
}

/* Write an IDX file: magic, rank dimensions, then nbytes of data; gz selects gzip. */
static void write_idx(const char *path, int gz, uint32_t magic, const uint32_t *dims, int rank,
                      const uint8_t *data, size_t nbytes) {
    uint8_t head[16];
    size_t hn = 0;
    uint32_t words[4] = {magic, rank > 0 ? dims[0] : 0, rank > 1 ? dims[1] : 0, rank > 2 ? dims[2] : 0};
    for (int i = 0; i <= rank; i++) {
        head[hn++] = (uint8_t)(words[i] >> 24);
        head[hn++] = (uint8_t)(words[i] >> 16);
        head[hn++] = (uint8_t)(words[i] >> 8);
        head[hn++] = (uint8_t)words[i];
    }
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gzwrite(f, head, (unsigned)hn), (int)hn);
        if (nbytes) ck_assert_int_eq(gzwrite(f, data, (unsigned)nbytes), (int)nbytes);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(head, 1, hn, f), hn);
        if (nbytes) ck_assert_uint_eq(fwrite(data, 1, nbytes, f), nbytes);
        ck_assert_int_eq(fclose(f), 0);
    }
}

static void write_bytes(const char *path, const void *data, size_t nbytes) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (nbytes) ck_assert_uint_eq(fwrite(data, 1, nbytes, f), nbytes);
    ck_assert_int_eq(fclose(f), 0);
}

/* A valid set: N images of R x C with pixel (i, k) = (7 i + 3 k) mod 256, labels i mod 3. */
enum { N = 6, R = 3, C = 5 };
static uint8_t pix[N * R * C], lab[N];

static void make_pattern(void) {
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < R * C; k++) pix[i * R * C + k] = (uint8_t)((7 * i + 3 * k + 250) % 256);
        lab[i] = (uint8_t)(i % 3);
    }
}

static void write_valid(const char *img, const char *lbl, int gz) {
    make_pattern();
    uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
    write_idx(img, gz, 0x803, idims, 3, pix, sizeof pix);
    write_idx(lbl, gz, 0x801, ldims, 1, lab, sizeof lab);
}

/* Assert that loading fails with EXIT_BADINPUT and that the message holds every substring
 * (TEST_VERBOSE=1 in the environment prints each message). */
static void expect_error(const char *img, const char *lbl, int max_classes, const char *const *subs) {
    dataset d;
    char err[ERRLEN] = "";
    int rc = dataset_load(&d, img, lbl, max_classes, err, sizeof err);
    if (getenv("TEST_VERBOSE")) printf("  message: %s\n", err);
    ck_assert_int_eq(rc, EXIT_BADINPUT);
    ck_assert_ptr_null(d.x);
    ck_assert_ptr_null(d.y);
    for (int i = 0; subs[i]; i++)
        ck_assert_msg(strstr(err, subs[i]) != NULL, "message \"%s\" lacks \"%s\"", err, subs[i]);
}
#define EXPECT_ERROR(img, lbl, maxc, ...) expect_error(img, lbl, maxc, (const char *const[]){__VA_ARGS__, NULL})

static void check_roundtrip(int gz) {
    const char *img = tpath(0, gz ? "rt-img.gz" : "rt-img"), *lbl = tpath(1, gz ? "rt-lbl.gz" : "rt-lbl");
    write_valid(img, lbl, gz);
    dataset d;
    char err[ERRLEN] = "";
    ck_assert_msg(dataset_load(&d, img, lbl, 10, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(d.n, N);
    ck_assert_int_eq(d.c, 1);
    ck_assert_int_eq(d.h, R);
    ck_assert_int_eq(d.w, C);
    ck_assert_int_eq(d.n_classes, 3);
    ck_assert_mem_eq(d.x, pix, sizeof pix);
    ck_assert_mem_eq(d.y, lab, sizeof lab);
    ck_assert_int_eq(d.x[1 * R * C + 4], (7 * 1 + 3 * 4 + 250) % 256); /* 13: wrapped value */
    dataset_free(&d);
    ck_assert_ptr_null(d.x);
    dataset_free(&d); /* idempotent */
}

START_TEST(roundtrip_raw) { check_roundtrip(0); }
END_TEST

START_TEST(roundtrip_gzip) { check_roundtrip(1); }
END_TEST

START_TEST(mixed_raw_and_gzip) {
    /* Raw images with gzip labels: zlib decides per file. */
    make_pattern();
    const char *img = tpath(0, "mix-img"), *lbl = tpath(1, "mix-lbl.gz");
    uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
    write_idx(img, 0, 0x803, idims, 3, pix, sizeof pix);
    write_idx(lbl, 1, 0x801, ldims, 1, lab, sizeof lab);
    dataset d;
    char err[ERRLEN];
    ck_assert_msg(dataset_load(&d, img, lbl, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_mem_eq(d.x, pix, sizeof pix);
    ck_assert_int_eq(d.n_classes, 3);
    dataset_free(&d);
}
END_TEST

START_TEST(truncated_images) {
    for (int gz = 0; gz <= 1; gz++) {
        make_pattern();
        const char *img = tpath(0, gz ? "tr-img.gz" : "tr-img"), *lbl = tpath(1, "tr-lbl");
        uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
        write_idx(img, gz, 0x803, idims, 3, pix, sizeof pix - 7);
        write_idx(lbl, 0, 0x801, ldims, 1, lab, sizeof lab);
        EXPECT_ERROR(img, lbl, 10, img, "truncated", "declares 90 data bytes", "found 83");
    }
}
END_TEST

START_TEST(truncated_labels) {
    for (int gz = 0; gz <= 1; gz++) {
        make_pattern();
        const char *img = tpath(0, "tl-img"), *lbl = tpath(1, gz ? "tl-lbl.gz" : "tl-lbl");
        uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
        write_idx(img, 0, 0x803, idims, 3, pix, sizeof pix);
        write_idx(lbl, gz, 0x801, ldims, 1, lab, 2);
        EXPECT_ERROR(img, lbl, 10, lbl, "truncated", "declares 6 data bytes", "found 2");
    }
}
END_TEST

START_TEST(truncated_header) {
    const char *img = tpath(0, "th-img"), *lbl = tpath(1, "th-lbl");
    write_valid(img, lbl, 0);
    uint8_t head[10] = {0, 0, 8, 3, 0, 0, 0, 6, 0, 0};
    write_bytes(img, head, sizeof head);
    EXPECT_ERROR(img, lbl, 10, img, "truncated IDX header", "expected 16 bytes", "found 10");
}
END_TEST

START_TEST(truncated_gzip_stream) {
    /* A .gz file cut in the middle of the compressed stream. */
    const char *img = tpath(0, "tg-img.gz"), *lbl = tpath(1, "tg-lbl.gz");
    uint8_t big[4000];
    rng_t r;
    rng_seed(&r, 42);
    for (int i = 0; i < 4000; i++) big[i] = (uint8_t)rng_u64(&r); /* incompressible */
    uint32_t idims[3] = {1, 40, 100}, ldims[1] = {1};
    uint8_t one = 0;
    write_idx(img, 1, 0x803, idims, 3, big, sizeof big);
    write_idx(lbl, 1, 0x801, ldims, 1, &one, 1);
    struct stat st;
    ck_assert_int_eq(stat(img, &st), 0);
    ck_assert_int_gt(st.st_size, 4000); /* stored, not compressed: the cut lands in the data */
    ck_assert_int_eq(truncate(img, 2000), 0);
    EXPECT_ERROR(img, lbl, 10, img, "truncated", "declares 4000 data bytes", "gzip stream ends early");
}
END_TEST

START_TEST(trailing_garbage) {
    for (int gz = 0; gz <= 1; gz++) {
        make_pattern();
        const char *img = tpath(0, gz ? "tx-img.gz" : "tx-img"), *lbl = tpath(1, "tx-lbl");
        uint32_t idims[3] = {N - 1, R, C}, ldims[1] = {N};
        write_idx(img, gz, 0x803, idims, 3, pix, sizeof pix); /* one image too many */
        write_idx(lbl, 0, 0x801, ldims, 1, lab, sizeof lab);
        EXPECT_ERROR(img, lbl, 10, img, "trailing garbage", "15 bytes after the 75 data bytes");
    }
}
END_TEST

START_TEST(bad_magic) {
    make_pattern();
    const char *img = tpath(0, "bm-img"), *lbl = tpath(1, "bm-lbl");
    uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
    /* Labels given where images belong. */
    write_idx(img, 0, 0x801, ldims, 1, lab, sizeof lab);
    write_idx(lbl, 0, 0x801, ldims, 1, lab, sizeof lab);
    EXPECT_ERROR(img, lbl, 10, img, "bad magic 0x00000801", "expected 0x00000803", "label file");
    /* Images fine, label file with a foreign magic (also in gzip). */
    write_idx(img, 0, 0x803, idims, 3, pix, sizeof pix);
    write_idx(lbl, 1, 0x12345678, ldims, 1, lab, sizeof lab);
    EXPECT_ERROR(img, lbl, 10, lbl, "bad magic 0x12345678", "expected 0x00000801", "not an IDX file");
    /* Float data type (0x0D) rank 3. */
    write_idx(img, 0, 0x0D03, idims, 3, pix, sizeof pix);
    EXPECT_ERROR(img, lbl, 10, img, "bad magic 0x00000d03");
}
END_TEST

START_TEST(bad_dimensions) {
    make_pattern();
    const char *img = tpath(0, "bd-img"), *lbl = tpath(1, "bd-lbl");
    uint32_t ldims[1] = {N};
    write_idx(lbl, 0, 0x801, ldims, 1, lab, sizeof lab);
    struct { uint32_t d[3]; const char *what; } cases[] = {
        {{0, R, C}, "declares 0 images"},
        {{0x80000000u, R, C}, "declares 2147483648 images"},
        {{N, 0, C}, "images of 0 rows x 5 cols"},
        {{N, R, 0}, "images of 3 rows x 0 cols"},
        {{N, 4097, C}, "images of 4097 rows x 5 cols"},
        {{N, R, 100000}, "images of 3 rows x 100000 cols"},
        {{4000000, 4096, 4096}, NULL}, /* huge but legal header: must fail as truncated, not OOM */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_idx(img, 0, 0x803, cases[i].d, 3, pix, sizeof pix);
        if (cases[i].what)
            EXPECT_ERROR(img, lbl, 10, img, "bad dimensions", cases[i].what, "1..");
        else
            EXPECT_ERROR(img, lbl, 10, img, "truncated", "declares 67108864000000 data bytes", "found 90");
    }
    /* Zero labels. */
    uint32_t idims[3] = {N, R, C}, zero[1] = {0};
    write_idx(img, 0, 0x803, idims, 3, pix, sizeof pix);
    write_idx(lbl, 0, 0x801, zero, 1, lab, 0);
    EXPECT_ERROR(img, lbl, 10, lbl, "bad dimensions", "declares 0 labels");
}
END_TEST

START_TEST(count_mismatch) {
    make_pattern();
    const char *img = tpath(0, "cm-img"), *lbl = tpath(1, "cm-lbl");
    uint32_t idims[3] = {N, R, C}, ldims[1] = {N - 2};
    write_idx(img, 0, 0x803, idims, 3, pix, sizeof pix);
    write_idx(lbl, 0, 0x801, ldims, 1, lab, N - 2);
    EXPECT_ERROR(img, lbl, 10, img, lbl, "6 images", "4 labels");
}
END_TEST

START_TEST(label_out_of_range) {
    make_pattern();
    const char *img = tpath(0, "lr-img"), *lbl = tpath(1, "lr-lbl");
    uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
    write_idx(img, 0, 0x803, idims, 3, pix, sizeof pix);
    lab[4] = 12;
    write_idx(lbl, 0, 0x801, ldims, 1, lab, sizeof lab);
    EXPECT_ERROR(img, lbl, 10, lbl, "label 12 of sample 4", "out of range 0..9");
    /* The same file is fine with the default 256 classes, and then classes 3..11 are missing. */
    EXPECT_ERROR(img, lbl, 0, lbl, "class 3 never occurs", "the largest label, 12, occurs 1 time(s) (first in sample 4)");
    lab[4] = 255;
    write_idx(lbl, 0, 0x801, ldims, 1, lab, sizeof lab);
    EXPECT_ERROR(img, lbl, 3, lbl, "label 255 of sample 4");
}
END_TEST

START_TEST(missing_class) {
    make_pattern();
    const char *img = tpath(0, "mc-img.gz"), *lbl = tpath(1, "mc-lbl.gz");
    uint32_t idims[3] = {N, R, C}, ldims[1] = {N};
    uint8_t holes[N] = {0, 2, 2, 0, 3, 0}; /* class 1 never occurs */
    write_idx(img, 1, 0x803, idims, 3, pix, sizeof pix);
    write_idx(lbl, 1, 0x801, ldims, 1, holes, sizeof holes);
    EXPECT_ERROR(img, lbl, 10, lbl, "class 1 never occurs", "corrupt");
}
END_TEST

START_TEST(missing_file) {
    const char *img = tpath(0, "mf-img"), *lbl = tpath(1, "mf-lbl");
    write_valid(img, lbl, 0);
    const char *none = tpath(2, "does-not-exist.gz");
    EXPECT_ERROR(none, lbl, 10, "cannot open images file", none, "No such file or directory");
    EXPECT_ERROR(img, none, 10, "cannot open labels file", none, "No such file or directory");
    /* Not regular files: refused before they are opened (a FIFO without a writer would block
     * in open() for ever, a device never end). */
    EXPECT_ERROR(tmpdir, lbl, 10, tmpdir, "not a regular file (a directory)");
    const char *fifo = tpath(3, "mf-fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    EXPECT_ERROR(fifo, lbl, 10, fifo, "not a regular file (a FIFO); expected an IDX images file");
    EXPECT_ERROR(img, "/dev/zero", 10, "/dev/zero", "not a regular file (a device or socket); expected an IDX labels file");
}
END_TEST

START_TEST(garbage_file) {
    const char *img = tpath(0, "gf-img"), *lbl = tpath(1, "gf-lbl");
    write_valid(img, lbl, 0);
    const char *text = "this is a README, not a data set\n";
    write_bytes(img, text, strlen(text));
    EXPECT_ERROR(img, lbl, 10, img, "bad magic 0x74686973", "not an IDX file");
    write_bytes(img, "", 0);
    EXPECT_ERROR(img, lbl, 10, img, "0 bytes, too short");
    write_bytes(img, "\x00\x00", 2);
    EXPECT_ERROR(img, lbl, 10, img, "2 bytes, too short");
    /* A gzip header followed by garbage: a corrupt compressed file. */
    const uint8_t badgz[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0x12, 0x34, 0x56, 0x78};
    write_bytes(img, badgz, sizeof badgz);
    EXPECT_ERROR(img, lbl, 10, img, "read error: corrupt gzip data");
}
END_TEST

static int have_real(void) {
    const char *f[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                       "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", FMNIST_DIR, f[i]);
        if (access(p, R_OK) != 0) {
            printf("test_idx: NOTE: %s absent, real-data test skipped\n", p);
            return 0;
        }
    }
    return 1;
}

START_TEST(real_fashion_mnist) {
    if (!have_real()) return;
    dataset tr, va;
    char err[ERRLEN] = "";
    double t0 = wall_time();
    int rc = dataset_load(&tr, FMNIST_DIR "/train-images-idx3-ubyte.gz",
                          FMNIST_DIR "/train-labels-idx1-ubyte.gz", 10, err, sizeof err);
    double dt = wall_time() - t0;
    ck_assert_msg(rc == 0, "%s", err);
    printf("test_idx: Fashion-MNIST training set loaded in %.3f s (informational; speed is not asserted)\n", dt);
    ck_assert_int_eq(tr.n, 60000);
    ck_assert_int_eq(tr.c, 1);
    ck_assert_int_eq(tr.h, 28);
    ck_assert_int_eq(tr.w, 28);
    ck_assert_int_eq(tr.n_classes, 10);
    /* Fashion-MNIST is balanced: 6000 per class. */
    int count[10] = {0};
    for (int i = 0; i < tr.n; i++) count[tr.y[i]]++;
    for (int k = 0; k < 10; k++) ck_assert_int_eq(count[k], 6000);
    ck_assert_msg(dataset_load(&va, FMNIST_DIR "/t10k-images-idx3-ubyte.gz",
                               FMNIST_DIR "/t10k-labels-idx1-ubyte.gz", 10, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(va.n, 10000);
    ck_assert_int_eq(va.h, 28);
    ck_assert_int_eq(va.w, 28);
    ck_assert_int_eq(va.n_classes, 10);
    /* Train images with test labels: the counts must be caught. */
    dataset bad;
    ck_assert_int_eq(dataset_load(&bad, FMNIST_DIR "/train-images-idx3-ubyte.gz",
                                  FMNIST_DIR "/t10k-labels-idx1-ubyte.gz", 10, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "60000 images") && strstr(err, "10000 labels"), "%s", err);
    dataset_free(&tr);
    dataset_free(&va);
}
END_TEST

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/dsgd-test-idx-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("idx");
    TCase *tc = tcase_create("synthetic");
    tcase_add_test(tc, roundtrip_raw);
    tcase_add_test(tc, roundtrip_gzip);
    tcase_add_test(tc, mixed_raw_and_gzip);
    tcase_add_test(tc, truncated_images);
    tcase_add_test(tc, truncated_labels);
    tcase_add_test(tc, truncated_header);
    tcase_add_test(tc, truncated_gzip_stream);
    tcase_add_test(tc, trailing_garbage);
    tcase_add_test(tc, bad_magic);
    tcase_add_test(tc, bad_dimensions);
    tcase_add_test(tc, count_mismatch);
    tcase_add_test(tc, label_out_of_range);
    tcase_add_test(tc, missing_class);
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, garbage_file);
    suite_add_tcase(s, tc);
    TCase *real = tcase_create("real");
    tcase_set_timeout(real, 60);
    tcase_add_test(real, real_fashion_mnist);
    suite_add_tcase(s, real);
    int rc = run_suite(s);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
