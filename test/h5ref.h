/* h5ref.h — reading the PyTorch reference files of test/data (tools/make_reference.py) in the
 * Check tests, and comparing tensors by relative L2 error. The files are small: whole datasets
 * are read into malloc'd buffers. DSGD_TEST_DATA overrides the directory (default test/data). */
#ifndef DSGD_H5REF_H
#define DSGD_H5REF_H

#include <check.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static inline const char *h5ref_path(const char *file) {
    static char buf[1024];
    const char *dir = getenv("DSGD_TEST_DATA");
    snprintf(buf, sizeof buf, "%s/%s", dir ? dir : "test/data", file);
    return buf;
}

static inline hid_t h5open(const char *file) {
    const char *p = h5ref_path(file);
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "H5Fopen %s failed (run tools/make_reference.py?)", p);
    return f;
}

/* Dataset path of g read as type (esize bytes each): malloc'd data, *n elements, and the
 * dimensions (up to 4, missing ones 1) in dims when dims is not NULL. */
static inline void *h5read(hid_t g, const char *path, hid_t type, size_t esize, size_t *n, hsize_t *dims) {
    hid_t d = H5Dopen2(g, path, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "H5Dopen2 %s failed", path);
    hid_t s = H5Dget_space(d);
    ck_assert_msg(s >= 0, "H5Dget_space %s failed", path);
    hssize_t np = H5Sget_simple_extent_npoints(s);
    ck_assert_msg(np > 0, "%s is empty", path);
    if (dims) {
        for (int i = 0; i < 4; i++) dims[i] = 1;
        ck_assert_msg(H5Sget_simple_extent_ndims(s) <= 4, "%s: more than 4 dims", path);
        ck_assert_msg(H5Sget_simple_extent_dims(s, dims, NULL) >= 0, "%s: dims", path);
    }
    void *buf = malloc((size_t)np * esize);
    ck_assert_msg(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "H5Dread %s failed", path);
    H5Sclose(s);
    H5Dclose(d);
    if (n) *n = (size_t)np;
    return buf;
}

static inline float *h5f(hid_t g, const char *path, size_t *n, hsize_t *dims) {
    return h5read(g, path, H5T_NATIVE_FLOAT, sizeof(float), n, dims);
}

static inline int *h5i(hid_t g, const char *path, size_t *n) { return h5read(g, path, H5T_NATIVE_INT, sizeof(int), n, NULL); }

/* Fixed-length strings of 64 bytes (numpy "S64"). */
static inline char *h5names(hid_t g, const char *path, size_t *n) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 64);
    char *buf = h5read(g, path, t, 64, n, NULL);
    H5Tclose(t);
    return buf;
}

static inline int h5attr(hid_t g, const char *name) {
    int v = 0;
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "H5Aopen %s failed", name);
    ck_assert_msg(H5Aread(a, H5T_NATIVE_INT, &v) >= 0, "H5Aread %s failed", name);
    H5Aclose(a);
    return v;
}

/* ||got − want|| / ||want|| over n elements. */
static inline double rel_l2(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        num += d * d;
        den += (double)want[i] * (double)want[i];
    }
    return sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
}

#endif
