/* mpiutil.h — helpers of the end-to-end tests that run ./dsgd-run under mpiexec: write a file,
 * run a command under `timeout` capturing its output, read run-file datasets and attributes.
 * Every mpiexec runs under `timeout -k 5 MPI_TIMEOUT`, so a hang fails the test. */
#ifndef DSGD_MPIUTIL_H
#define DSGD_MPIUTIL_H

#include <check.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifndef MPI_TIMEOUT
#define MPI_TIMEOUT "120"
#endif

/* The data group of the linear-model runs: the first 10,000 training and 2,000 test images of
 * Fashion-MNIST as uncompressed IDX files, written once by make (build/test-data, the Makefile's
 * TEST_DATA; test/gpu/make_data.sh --raw), so that the many short runs do not each inflate the
 * whole set (60,000 + 10,000 images) on every rank. Relative to the repository root, where the
 * tests run. Tests whose assertions need the whole set (an epoch length, 10,000 evaluation
 * images, a reached top-1 error) keep the default paths: docs/testing.md. */
#define TEST_DATA_DIR "build/test-data"
#define TEST_DATA                                                                                    \
    "data = { train_images = \"" TEST_DATA_DIR "/train-images\"; train_labels = \"" TEST_DATA_DIR \
    "/train-labels\";\n  val_images = \"" TEST_DATA_DIR "/val-images\"; val_labels = \"" TEST_DATA_DIR "/val-labels\"; };\n"

/* 0 if the subset is there; else says how to make it, and 1 (a test's main() returns it). */
static inline int test_data_missing(void) {
    FILE *f = fopen(TEST_DATA_DIR "/val-labels", "rb");
    if (f) return fclose(f), 0;
    fprintf(stderr, "no " TEST_DATA_DIR "/val-labels: run the tests from the repository root after `make " TEST_DATA_DIR
                    "/val-labels` (make check does it)\n");
    return 1;
}

static inline void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Run a shell command, capture stdout+stderr into out (if given); return the exit status. */
static inline int run(const char *cmd, char *out, size_t n) {
    char full[4096];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *f = popen(full, "r");
    ck_assert(f != NULL);
    size_t len = 0;
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        if (out && len + 1 < n) {
            size_t c = k < n - 1 - len ? k : n - 1 - len;
            memcpy(out + len, buf, c);
            len += c;
        }
    }
    if (out) out[len] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline int dsgd(int np, const char *cfg, const char *extra, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n %d ./dsgd-run %s %s", np, extra ? extra : "", cfg);
    return run(cmd, out, n);
}

/* Read a 1-D dataset of doubles (or int64 converted); returns its length. */
static inline long read_1d(const char *file, const char *name, double *buf, long max) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "cannot open %s", file);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "%s has no %s", file, name);
    hid_t s = H5Dget_space(d);
    hsize_t dims[1];
    H5Sget_simple_extent_dims(s, dims, NULL);
    ck_assert((long)dims[0] <= max);
    if (dims[0] > 0) ck_assert(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    H5Sclose(s), H5Dclose(d), H5Fclose(f);
    return (long)dims[0];
}

static inline long read_attr_long(const char *file, const char *name) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "%s has no attribute %s", file, name);
    long long v = 0;
    ck_assert(H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0);
    H5Aclose(a), H5Fclose(f);
    return (long)v;
}

static inline void read_attr_string(const char *file, const char *name, char *buf, size_t n) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "%s has no attribute %s", file, name);
    hid_t ft = H5Aget_type(a);
    buf[0] = '\0';
    if (H5Tis_variable_str(ft) > 0) {
        char *s = NULL;
        ck_assert(H5Aread(a, ft, &s) >= 0); /* variable-length UTF-8, read as stored */
        snprintf(buf, n, "%s", s ? s : "");
        H5free_memory(s);
    } else {
        size_t sz = H5Tget_size(ft);
        char *tmp = calloc(sz + 1, 1);
        ck_assert(H5Aread(a, ft, tmp) >= 0);
        snprintf(buf, n, "%s", tmp);
        free(tmp);
    }
    H5Tclose(ft), H5Aclose(a), H5Fclose(f);
}

/* Read a 2-D float64 dataset [rows, cols] into buf (row-major); returns rows, sets *cols. */
static inline long read_2d(const char *file, const char *name, double *buf, long max, long *cols) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "cannot open %s", file);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "%s has no %s", file, name);
    hid_t s = H5Dget_space(d);
    hsize_t dims[2];
    ck_assert_int_eq(H5Sget_simple_extent_ndims(s), 2);
    H5Sget_simple_extent_dims(s, dims, NULL);
    ck_assert((long)(dims[0] * dims[1]) <= max);
    if (dims[0] > 0) ck_assert(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    H5Sclose(s), H5Dclose(d), H5Fclose(f);
    *cols = (long)dims[1];
    return (long)dims[0];
}

#endif
