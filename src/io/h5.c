/* h5.c — see h5.h. */
#include "io/h5.h"

#include "util/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char outer[256], inner[512];
} h5msg;

static herr_t h5msg_walk(unsigned n, const H5E_error2_t *e, void *data) {
    h5msg *m = data;
    if (!e->desc || !e->desc[0]) return 0;
    if (n == 0) snprintf(m->outer, sizeof m->outer, "%s", e->desc);
    snprintf(m->inner, sizeof m->inner, "%s", e->desc); /* last one wins: the innermost */
    return 0;
}

void h5_message(char *buf, size_t n) {
    h5msg m = {{0}, {0}};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5msg_walk, &m);
    H5Eclear2(H5E_DEFAULT);
    const char *detail = m.inner[0] ? m.inner : "no message from HDF5";
    if (m.outer[0] && strcmp(m.outer, m.inner) != 0) snprintf(buf, n, "%s (%s)", m.outer, detail);
    else snprintf(buf, n, "%s", detail);
}

int h5_fail(int code, char *err, size_t errlen, const char *path, const char *call, const char *object) {
    char detail[800];
    h5_message(detail, sizeof detail);
    seterr(err, errlen, "%s: HDF5 %s failed for %s: %s", path, call, object, detail);
    return code;
}

int h5_syserr(char *err, size_t errlen, const char *path, const char *what) {
    seterr(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return -1;
}

int h5_attr_fail(const char *call, const char *objname, const char *name, const char *path, char *err, size_t errlen) {
    if (!call) return 0;
    char what[300];
    snprintf(what, sizeof what, "attribute %s of %s", name, objname);
    return h5_fail(-1, err, errlen, path, call, what);
}

/* H5Pset_file_locking: 1.10.7 and later 1.10 releases, 1.12.1 and later, 1.13 on (not 1.11, 1.12.0). */
#if H5_VERS_MAJOR > 1 || (H5_VERS_MAJOR == 1 && (H5_VERS_MINOR > 12 || (H5_VERS_MINOR == 12 && H5_VERS_RELEASE >= 1) ||   \
                                                 (H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7)))
#define H5_HAS_FILE_LOCKING_PROPERTY 1
#endif

int h5_unlock(hid_t fapl) {
#ifdef H5_HAS_FILE_LOCKING_PROPERTY
    return H5Pset_file_locking(fapl, 0, 1) < 0 ? -1 : 0;
#else
    (void)fapl; /* no such property: HDF5_USE_FILE_LOCKING=FALSE (docs/data.md) */
    return 0;
#endif
}

hid_t h5_fapl_unlocked(hid_t base) {
    hid_t fapl = base == H5P_DEFAULT ? H5Pcreate(H5P_FILE_ACCESS) : H5Pcopy(base);
    if (fapl >= 0 && h5_unlock(fapl) < 0) H5Pclose(fapl), fapl = H5I_INVALID_HID;
    return fapl;
}

/* H5Pclose(fapl), keeping the error stack of the call before it for the caller's message (every
 * API call clears it first). */
static void close_keeping_errors(hid_t fapl) {
    hid_t stack = H5Eget_current_stack();
    H5Pclose(fapl);
    if (stack >= 0) H5Eset_current_stack(stack);
}

hid_t h5_fopen(const char *path, unsigned flags, hid_t fapl) {
    hid_t a = h5_fapl_unlocked(fapl);
    if (a < 0) return H5I_INVALID_HID;
    hid_t f = H5Fopen(path, flags, a);
    close_keeping_errors(a);
    return f;
}

hid_t h5_fcreate(const char *path, unsigned flags, hid_t fapl) {
    hid_t a = h5_fapl_unlocked(fapl);
    if (a < 0) return H5I_INVALID_HID;
    hid_t f = H5Fcreate(path, flags, H5P_DEFAULT, a);
    close_keeping_errors(a);
    return f;
}

hid_t h5_string_type(size_t size, int utf8) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, size) < 0 || (utf8 && H5Tset_cset(t, H5T_CSET_UTF8) < 0))) H5Tclose(t), t = H5I_INVALID_HID;
    return t;
}

const char *h5_attr_delete(hid_t obj, const char *name) {
    htri_t exists = H5Aexists(obj, name);
    if (exists < 0) return "H5Aexists";
    return exists > 0 && H5Adelete(obj, name) < 0 ? "H5Adelete" : NULL;
}

const char *h5_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *buf) {
    const char *failed = h5_attr_delete(obj, name);
    if (failed) return failed;
    hid_t space = H5Screate(H5S_SCALAR);
    if (space < 0) return "H5Screate";
    hid_t a = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(space);
    if (a < 0) return "H5Acreate2";
    if (H5Awrite(a, mtype, buf) < 0) failed = "H5Awrite";
    if (H5Aclose(a) < 0 && !failed) failed = "H5Aclose";
    return failed;
}

const char *h5_attr_write_str(hid_t obj, const char *name, const char *v, int vlen) {
    hid_t t = h5_string_type(vlen ? H5T_VARIABLE : strlen(v) + 1, vlen);
    if (t < 0) return "H5Tcopy/H5Tset_size/H5Tset_cset";
    const char *failed = h5_attr_write(obj, name, t, t, vlen ? (const void *)&v : v);
    H5Tclose(t);
    return failed;
}

int h5_attr_read_str(hid_t obj, const char *name, char *buf, size_t n) {
    buf[0] = '\0';
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = a < 0 ? H5I_INVALID_HID : H5Aget_type(a);
    int rc = -1;
    if (t >= 0 && H5Tget_class(t) == H5T_STRING) {
        /* a variable-length string HDF5 allocates, a fixed-length one into a buffer one byte longer */
        const int vlen = H5Tis_variable_str(t) > 0;
        char *s = vlen ? NULL : xcalloc(H5Tget_size(t) + 1, 1);
        if (H5Aread(a, t, vlen ? (void *)&s : s) >= 0) snprintf(buf, n, "%s", s ? s : ""), rc = 0;
        if (vlen) H5free_memory(s);
        else free(s);
    }
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return rc;
}

const char *h5_write_1d(hid_t loc, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *data, hid_t dcpl) {
    hid_t space = H5Screate_simple(1, &n, NULL);
    if (space < 0) return "H5Screate_simple";
    hid_t ds = H5Dcreate2(loc, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Sclose(space);
    if (ds < 0) return "H5Dcreate2";
    const char *failed = n && H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0 ? "H5Dwrite" : NULL;
    if (H5Dclose(ds) < 0 && !failed) failed = "H5Dclose";
    return failed;
}

int h5_attr_write_err(hid_t obj, const char *objname, const char *name, hid_t ftype, hid_t mtype, const void *buf,
                      const char *path, char *err, size_t errlen) {
    return h5_attr_fail(h5_attr_write(obj, name, ftype, mtype, buf), objname, name, path, err, errlen);
}

int h5_attr_string_err(hid_t obj, const char *objname, const char *name, const char *v, const char *path, char *err,
                       size_t errlen) {
    return h5_attr_fail(h5_attr_write_str(obj, name, v ? v : "", 1), objname, name, path, err, errlen);
}
