/* shards.c — the packed shard files: writer (shard_write, shards_write_index) and reader
 * (shards_open, shards_read); layout in shards.h and docs/data.md "Packing".
 *
 * Everything is HDF5 1.10 public API (H5F/H5G/H5D/H5S/H5A/H5T/H5P). Files are written with
 * object modification times off (H5Pset_obj_track_times), so the same input and seed give
 * byte-identical shards however many ranks and threads packed them. The reader leaves HDF5 once
 * the small per-sample arrays are in memory: /jpeg is contiguous, so H5Dget_offset gives where
 * its bytes start in the file and a sample is one pread() on a plain fd, which any number of
 * threads can issue at once (HDF5 itself serialises every call, notes/imagenet.md §2). */
#define _GNU_SOURCE
#include "data/shards.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image.h"
#include "io/h5.h"
#include "util/util.h"

static void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* Writing.                                                                                    */

void shard_name(char *buf, size_t n, const char *split, int k, int n_shards) {
    snprintf(buf, n, "%s-%05d-of-%05d.h5", split, k, n_shards);
}

/* Scalar attributes; strings fixed-length ASCII. */
static int attr_i64(hid_t obj, const char *name, int64_t v) { return h5_attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v) != NULL; }
static int attr_u64(hid_t obj, const char *name, uint64_t v) { return h5_attr_write(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v) != NULL; }
static int attr_str(hid_t obj, const char *name, const char *v) { return h5_attr_write_str(obj, name, v, 0) != NULL; }

/* A 1-D dataset of n elements (contiguous; n may be 0). file_type is what the file stores,
 * mem_type what data holds. Space allocated at creation and never filled (every byte is
 * written), except for variable-length strings, which HDF5 must fill. */
static int write_1d(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, hsize_t n, const void *data) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const int vlen = H5Tis_variable_str(file_type) > 0;
    int rc = -1;
    if (dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0 && (vlen || H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0))
        rc = h5_write_1d(loc, name, file_type, mem_type, n, data, dcpl) ? -1 : 0;
    if (dcpl >= 0) H5Pclose(dcpl);
    return rc;
}

/* n strings as a fixed-length ASCII dataset (width = longest + 1), or variable-length UTF-8
 * when vlen (long, many paths). */
static int write_strings(hid_t loc, const char *name, const char *const *v, hsize_t n, int vlen) {
    size_t w = 1;
    for (hsize_t i = 0; !vlen && i < n; i++)
        if (strlen(v[i]) + 1 > w) w = strlen(v[i]) + 1;
    hid_t t = h5_string_type(vlen ? H5T_VARIABLE : w, vlen);
    if (t < 0) return -1;
    char *flat = NULL;
    if (!vlen) {
        flat = xcalloc(n ? n : 1, w);
        for (hsize_t i = 0; i < n; i++) memcpy(flat + i * w, v[i], strlen(v[i]));
    }
    int rc = write_1d(loc, name, t, t, n, vlen ? (const void *)v : flat);
    free(flat);
    H5Tclose(t);
    return rc;
}

/* The root attributes every file of a pack carries. */
static int write_common_attrs(hid_t f, const shard_meta *m, const char *kind) {
    return attr_str(f, "format", SHARDS_FORMAT) || attr_i64(f, "format_version", SHARDS_FORMAT_VERSION) ||
           attr_str(f, "kind", kind) || attr_i64(f, "max_side", m->max_side) || attr_i64(f, "quality", m->quality) ||
           attr_str(f, "subsampling", m->subsampling) || attr_str(f, "interp", m->interp) ||
           attr_i64(f, "num_classes", m->n_classes) || attr_u64(f, "seed", m->seed) ||
           attr_str(f, "packer", "dsgd-run " DSGD_VERSION " --pack") ||
           write_strings(f, "classes", m->classes, (hsize_t)m->n_classes, 0);
}

/* Close file f (what: "the shard", "the index") at path after writing it. Returns EXIT_RUNTIME
 * when the writes failed (rc; obj names what failed, NULL: reported already) or the close does. */
static int close_written(hid_t f, int rc, const char *obj, const char *path, const char *what, char *err, size_t errlen) {
    if (rc && obj) h5_fail(EXIT_RUNTIME, err, errlen, path, "write", obj);
    if (H5Fclose(f) < 0 && !rc) return h5_fail(EXIT_RUNTIME, err, errlen, path, "H5Fclose", what);
    return rc ? EXIT_RUNTIME : 0;
}

int shard_write(const char *path, const shard_meta *m, int64_t n, const uint8_t *jpeg, const uint64_t *offset,
                const int16_t *label, const uint16_t *height, const uint16_t *width, const int32_t *source_index,
                int64_t n_skipped, const int32_t *skipped, char *err, size_t errlen) {
    h5_quiet();
    /* a new file (fails if it exists), default (earliest) format bounds: any HDF5 >= 1.8 and h5py read it */
    hid_t f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return h5_fail(EXIT_RUNTIME, err, errlen, path, "H5Fcreate", "the shard");
    const char *obj = "root attributes";
    int rc = write_common_attrs(f, m, "shard") || attr_str(f, "split", m->split) || attr_i64(f, "shard", m->shard) ||
             attr_i64(f, "n_shards", m->n_shards) || attr_i64(f, "n", n) || attr_i64(f, "skipped", n_skipped);
    if (!rc) obj = "/jpeg", rc = write_1d(f, "jpeg", H5T_STD_U8LE, H5T_NATIVE_UINT8, (hsize_t)offset[n], jpeg);
    if (!rc) obj = "/offset", rc = write_1d(f, "offset", H5T_STD_U64LE, H5T_NATIVE_UINT64, (hsize_t)n + 1, offset);
    if (!rc) obj = "/label", rc = write_1d(f, "label", H5T_STD_I16LE, H5T_NATIVE_INT16, (hsize_t)n, label);
    if (!rc) obj = "/height", rc = write_1d(f, "height", H5T_STD_U16LE, H5T_NATIVE_UINT16, (hsize_t)n, height);
    if (!rc) obj = "/width", rc = write_1d(f, "width", H5T_STD_U16LE, H5T_NATIVE_UINT16, (hsize_t)n, width);
    if (!rc) obj = "/source_index", rc = write_1d(f, "source_index", H5T_STD_I32LE, H5T_NATIVE_INT32, (hsize_t)n, source_index);
    if (!rc)
        obj = "/skipped_source_index",
        rc = write_1d(f, "skipped_source_index", H5T_STD_I32LE, H5T_NATIVE_INT32, (hsize_t)n_skipped, skipped);
    return close_written(f, rc, obj, path, "the shard", err, errlen);
}

int shards_write_index(const char *path, const shard_meta *m, const shards_index_split *splits, int n_splits, char *err,
                       size_t errlen) {
    h5_quiet();
    hid_t f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT); /* as in shard_write */
    if (f < 0) return h5_fail(EXIT_RUNTIME, err, errlen, path, "H5Fcreate", "the index");
    char list[64] = "";
    for (int i = 0; i < n_splits; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", splits[i].split);
    const char *obj = "root attributes";
    int rc = write_common_attrs(f, m, "index") || attr_str(f, "splits", list), reported = 0;
    for (int i = 0; !rc && i < n_splits; i++) {
        const shards_index_split *sp = &splits[i];
        obj = sp->split;
        hid_t g = H5Gcreate2(f, sp->split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) { rc = -1; break; }
        int64_t n = 0, skipped = 0;
        uint64_t nbytes = 0;
        char **names = xcalloc((size_t)sp->n_shards, sizeof *names);
        for (int k = 0; k < sp->n_shards; k++) {
            n += sp->n[k], skipped += sp->skipped[k], nbytes += sp->nbytes[k];
            names[k] = xmalloc(64);
            shard_name(names[k], 64, sp->split, k, sp->n_shards);
        }
        rc = attr_i64(g, "n", n) || attr_i64(g, "skipped", skipped) || attr_u64(g, "nbytes", nbytes) ||
             attr_i64(g, "n_shards", sp->n_shards) || attr_i64(g, "n_sources", sp->n_sources) ||
             write_strings(g, "shards", (const char *const *)names, (hsize_t)sp->n_shards, 0) ||
             write_1d(g, "n", H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)sp->n_shards, sp->n) ||
             write_1d(g, "skipped", H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)sp->n_shards, sp->skipped) ||
             write_1d(g, "nbytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, (hsize_t)sp->n_shards, sp->nbytes) ||
             write_strings(g, "sources", sp->sources, (hsize_t)sp->n_sources, 1);
        if (rc) h5_fail(EXIT_RUNTIME, err, errlen, path, "write", obj), reported = 1; /* before HDF5 clears its messages */
        for (int k = 0; k < sp->n_shards; k++) free(names[k]);
        free(names);
        H5Gclose(g);
    }
    return close_written(f, rc, reported ? NULL : obj, path, "the index", err, errlen);
}

/* ------------------------------------------------------------------------------------------ */
/* Reading.                                                                                    */

struct shards {
    int n_files;
    char **paths;
    int *fds;
    int64_t *first;        /* (n_files + 1) first sample of each shard */
    int64_t n, skipped;
    uint64_t *pos;         /* (n) absolute file offset of sample i's bytes */
    uint32_t *nbytes;      /* (n) */
    int16_t *label;
    uint16_t *height, *width;
    int32_t *source;
    size_t max_nbytes;
    int max_side, n_classes;
    char split[32];
    char (*classes)[SHARDS_WNID_MAX + 1];
};

/* An attribute of the format is missing: EXIT_BADINPUT naming path and attribute. */
static int no_attr(const char *path, const char *name, char *err, size_t errlen) {
    H5Eclear2(H5E_DEFAULT);
    return seterr(err, errlen, "%s: no attribute '%s'; expected a dsgd-run pack (%s, written by dsgd-run --pack)", path, name,
                  SHARDS_FORMAT);
}

/* Read a scalar integer attribute; 0, or EXIT_BADINPUT naming path and attribute. */
static int read_attr_i64(hid_t obj, const char *path, const char *name, int64_t *v, char *err, size_t errlen) {
    if (H5Aexists(obj, name) <= 0) return no_attr(path, name, err, errlen);
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    long long x = 0;
    int rc = a < 0 || H5Aread(a, H5T_NATIVE_LLONG, &x) < 0;
    if (a >= 0) H5Aclose(a);
    if (rc) return h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Aread", name);
    *v = x;
    return 0;
}

/* Read a string attribute (fixed or variable length) into buf. */
static int read_attr_str(hid_t obj, const char *path, const char *name, char *buf, size_t n, char *err, size_t errlen) {
    buf[0] = '\0';
    if (H5Aexists(obj, name) <= 0) return no_attr(path, name, err, errlen);
    return h5_attr_read_str(obj, name, buf, n) ? h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Aread (a string)", name) : 0;
}

/* The format attributes: ours, this version, this kind ("shard" or "index"). */
static int check_format(hid_t f, const char *path, const char *kind, char *err, size_t errlen) {
    char fmt[128], k[32];
    int64_t v = 0;
    int rc = read_attr_str(f, path, "format", fmt, sizeof fmt, err, errlen);
    if (!rc && strcmp(fmt, SHARDS_FORMAT) != 0)
        return seterr(err, errlen, "%s: attribute 'format' is \"%s\"; expected \"%s\" (a file written by dsgd-run --pack)", path, fmt,
                      SHARDS_FORMAT);
    if (!rc) rc = read_attr_i64(f, path, "format_version", &v, err, errlen);
    if (!rc && v != SHARDS_FORMAT_VERSION)
        return seterr(err, errlen, "%s: format version %lld, but this dsgd-run reads version %d: pack the images again with this "
                      "dsgd-run (dsgd-run --pack)", path, (long long)v, SHARDS_FORMAT_VERSION);
    if (!rc) rc = read_attr_str(f, path, "kind", k, sizeof k, err, errlen);
    if (!rc && strcmp(k, kind) != 0)
        return seterr(err, errlen, "%s: a pack %s file where a %s was expected", path, k, kind);
    return rc;
}

/* Open a 1-D dataset and check its element class and length (want < 0: any); *len gets it. */
static hid_t open_1d(hid_t f, const char *path, const char *name, H5T_class_t cls, int64_t want, int64_t *len, char *err,
                     size_t errlen) {
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        seterr(err, errlen, "%s: no dataset /%s; expected a dsgd-run pack (%s)", path, name, SHARDS_FORMAT);
        return -1;
    }
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) { h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Dopen2", name); return -1; }
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    hsize_t dims[1] = {0};
    int ok = s >= 0 && t >= 0 && H5Sget_simple_extent_ndims(s) == 1 && H5Sget_simple_extent_dims(s, dims, NULL) == 1 &&
             H5Tget_class(t) == cls;
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (!ok || (want >= 0 && (int64_t)dims[0] != want)) {
        if (ok) seterr(err, errlen, "%s: /%s has %llu elements, expected %lld", path, name, (unsigned long long)dims[0], (long long)want);
        else seterr(err, errlen, "%s: /%s is not a 1-D %s dataset", path, name, cls == H5T_STRING ? "string" : "numeric");
        H5Dclose(d);
        return -1;
    }
    *len = (int64_t)dims[0];
    return d;
}

/* Read the whole of a 1-D numeric dataset as mem_type into buf (length want). */
static int read_1d(hid_t f, const char *path, const char *name, int64_t want, hid_t mem_type, void *buf, char *err, size_t errlen) {
    int64_t len;
    hid_t d = open_1d(f, path, name, H5T_INTEGER, want, &len, err, errlen);
    if (d < 0) return EXIT_BADINPUT;
    int rc = len == 0 || H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0 ? 0 : -1;
    H5Dclose(d);
    return rc ? h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Dread", name) : 0;
}

/* Read a fixed-length string dataset (our /classes, /<split>/shards) into a fresh array of
 * (n, width) NUL-terminated rows; *n gets the count, *width the row size. */
static char *read_strings(hid_t f, const char *path, const char *name, int64_t *n, size_t *width, char *err, size_t errlen) {
    int64_t len;
    hid_t d = open_1d(f, path, name, H5T_STRING, -1, &len, err, errlen);
    if (d < 0) return NULL;
    hid_t t = H5Dget_type(d);
    size_t w = H5Tget_size(t) + 1;
    char *buf = NULL;
    if (H5Tis_variable_str(t) > 0) seterr(err, errlen, "%s: /%s holds variable-length strings; expected fixed-length", path, name);
    else {
        hid_t mt = h5_string_type(w, 0);
        buf = xcalloc((size_t)(len ? len : 1), w);
        if (len && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
            h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Dread", name);
            free(buf), buf = NULL;
        }
        H5Tclose(mt);
    }
    H5Tclose(t);
    H5Dclose(d);
    *n = len, *width = w;
    return buf;
}

/* Read /classes of f into s (first file) or compare with s's (later files). */
static int take_classes(shards *s, hid_t f, const char *path, const char *other, char *err, size_t errlen) {
    int64_t n;
    size_t w;
    char *c = read_strings(f, path, "classes", &n, &w, err, errlen);
    if (!c) return EXIT_BADINPUT;
    int rc = 0;
    if (n < 1 || n > SHARDS_MAX_CLASSES) rc = seterr(err, errlen, "%s: /classes has %lld names; expected 1 to %d", path, (long long)n, SHARDS_MAX_CLASSES);
    else if (!s->classes) {
        s->n_classes = (int)n;
        s->classes = xcalloc((size_t)n, sizeof *s->classes);
        for (int64_t i = 0; i < n && !rc; i++) {
            if (strlen(c + i * w) > SHARDS_WNID_MAX) rc = seterr(err, errlen, "%s: /classes[%lld] is longer than %d bytes", path, (long long)i, SHARDS_WNID_MAX);
            else snprintf(s->classes[i], sizeof s->classes[i], "%s", c + i * w);
        }
    } else if (n != s->n_classes)
        rc = seterr(err, errlen, "%s has %lld classes but %s has %d: the files are not of one pack", path, (long long)n, other, s->n_classes);
    else
        for (int64_t i = 0; i < n && !rc; i++)
            if (strcmp(c + i * w, s->classes[i]) != 0)
                rc = seterr(err, errlen, "%s: class %lld is '%s' but in %s it is '%s': the files are not of one pack", path, (long long)i,
                            c + i * w, other, s->classes[i]);
    free(c);
    return rc;
}

void shards_close(shards *s) {
    if (!s) return;
    for (int k = 0; k < s->n_files; k++) {
        if (s->fds[k] >= 0) close(s->fds[k]);
        free(s->paths[k]);
    }
    free(s->paths), free(s->fds), free(s->first);
    free(s->pos), free(s->nbytes), free(s->label), free(s->height), free(s->width), free(s->source);
    free(s->classes);
    free(s);
}

/* Grow the per-sample arrays of s to hold cap samples. */
static void grow(shards *s, int64_t cap) {
    s->pos = realloc(s->pos, (size_t)cap * sizeof *s->pos);
    s->nbytes = realloc(s->nbytes, (size_t)cap * sizeof *s->nbytes);
    s->label = realloc(s->label, (size_t)cap * sizeof *s->label);
    s->height = realloc(s->height, (size_t)cap * sizeof *s->height);
    s->width = realloc(s->width, (size_t)cap * sizeof *s->width);
    s->source = realloc(s->source, (size_t)cap * sizeof *s->source);
    if (!s->pos || !s->nbytes || !s->label || !s->height || !s->width || !s->source) DIE("out of memory for %lld samples", (long long)cap);
}

/* Add shard file k (path) to s: checks, per-sample arrays, fd. split: the split expected, or
 * "" to take the file's (written there; size 32). */
static int add_shard(shards *s, int k, const char *path, char *split, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) != 0) return seterr(err, errlen, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return seterr(err, errlen, "%s: not a regular file; expected a pack shard", path);
    /* An HDF5 file at all? (H5Fis_hdf5 is deprecated from HDF5 1.12 on, H5Fis_accessible new there.) */
    htri_t is_h5;
    H5E_BEGIN_TRY {
#if H5_VERSION_GE(1, 12, 0)
        is_h5 = H5Fis_accessible(path, H5P_DEFAULT);
#else
        is_h5 = H5Fis_hdf5(path);
#endif
    } H5E_END_TRY;
    if (is_h5 <= 0)
        return seterr(err, errlen, "%s: not an HDF5 file (%lld bytes); expected a pack shard", path, (long long)sb.st_size);
    hid_t f = h5_fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT); /* unlocked: h5.h */
    if (f < 0) {
        h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Fopen", "the shard");
        const char *t = strstr(err, "(truncated file");
        if (t) { /* "path: truncated: N bytes (HDF5: truncated file: eof = ..., stored_eof = ...)" */
            char m[ERRLEN];
            snprintf(m, sizeof m, "%s", t + 1);
            m[strcspn(m, ")")] = '\0';
            seterr(err, errlen, "%s: truncated: the file has %lld bytes (HDF5: %s)", path, (long long)sb.st_size, m);
        }
        return EXIT_BADINPUT;
    }
    int64_t n = 0, skipped = 0, max_side = 0, jlen = 0;
    char sp[32];
    int rc = check_format(f, path, "shard", err, errlen);
    if (!rc) rc = read_attr_str(f, path, "split", sp, sizeof sp, err, errlen);
    if (!rc && split[0] && strcmp(sp, split) != 0)
        rc = seterr(err, errlen, "%s: a shard of split '%s' where '%s' was expected", path, sp, split);
    if (!rc && !split[0]) snprintf(split, 32, "%s", sp);
    if (!rc) rc = read_attr_i64(f, path, "n", &n, err, errlen);
    if (!rc) rc = read_attr_i64(f, path, "skipped", &skipped, err, errlen);
    if (!rc) rc = read_attr_i64(f, path, "max_side", &max_side, err, errlen);
    if (!rc && (n < 0 || n > INT32_MAX)) rc = seterr(err, errlen, "%s: attribute n = %lld out of range", path, (long long)n);
    if (!rc && k > 0 && max_side != s->max_side)
        rc = seterr(err, errlen, "%s: max_side %lld but %s has %d: the files are not of one pack", path, (long long)max_side, s->paths[0], s->max_side);
    if (!rc) rc = take_classes(s, f, path, k ? s->paths[0] : "", err, errlen);
    uint64_t *off = NULL, base = 0;
    const int64_t at = s->n;
    if (!rc) {
        s->max_side = (int)max_side;
        s->skipped += skipped;
        grow(s, at + n + 1);
        off = xmalloc((size_t)(n + 1) * sizeof *off);
        rc = read_1d(f, path, "offset", n + 1, H5T_NATIVE_UINT64, off, err, errlen);
    }
    if (!rc) rc = read_1d(f, path, "label", n, H5T_NATIVE_INT16, s->label + at, err, errlen);
    if (!rc) rc = read_1d(f, path, "height", n, H5T_NATIVE_UINT16, s->height + at, err, errlen);
    if (!rc) rc = read_1d(f, path, "width", n, H5T_NATIVE_UINT16, s->width + at, err, errlen);
    if (!rc) rc = read_1d(f, path, "source_index", n, H5T_NATIVE_INT32, s->source + at, err, errlen);
    if (!rc) {
        hid_t d = open_1d(f, path, "jpeg", H5T_INTEGER, -1, &jlen, err, errlen);
        if (d < 0) rc = EXIT_BADINPUT;
        else {
            hid_t dcpl = H5Dget_create_plist(d);
            if (dcpl < 0 || H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl) != 0)
                rc = seterr(err, errlen, "%s: /jpeg is not contiguous and unfiltered; expected a pack shard", path);
            if (dcpl >= 0) H5Pclose(dcpl);
            if (!rc && jlen > 0) {
                haddr_t a = H5Dget_offset(d);
                if (a == HADDR_UNDEF) rc = h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Dget_offset", "/jpeg");
                else base = (uint64_t)a;
            }
            H5Dclose(d);
        }
    }
    H5Fclose(f);
    if (!rc && off[0] != 0) rc = seterr(err, errlen, "%s: /offset[0] = %llu, expected 0", path, (unsigned long long)off[0]);
    for (int64_t i = 0; !rc && i < n; i++) {
        if (off[i + 1] < off[i] || off[i + 1] - off[i] > UINT32_MAX)
            rc = seterr(err, errlen, "%s: /offset[%lld..%lld] = %llu..%llu is not a sample's byte range", path, (long long)i,
                        (long long)i + 1, (unsigned long long)off[i], (unsigned long long)off[i + 1]);
        else if (s->label[at + i] < 0 || s->label[at + i] >= s->n_classes)
            rc = seterr(err, errlen, "%s: /label[%lld] = %d outside the %d classes", path, (long long)i, s->label[at + i], s->n_classes);
    }
    if (!rc && off[n] != (uint64_t)jlen)
        rc = seterr(err, errlen, "%s: /offset[%lld] = %llu but /jpeg holds %lld bytes", path, (long long)n, (unsigned long long)off[n],
                    (long long)jlen);
    if (!rc && base + (uint64_t)jlen > (uint64_t)sb.st_size)
        rc = seterr(err, errlen, "%s: truncated: /jpeg ends at byte %llu but the file has %lld bytes", path,
                    (unsigned long long)(base + (uint64_t)jlen), (long long)sb.st_size);
    if (!rc) {
        for (int64_t i = 0; i < n; i++) {
            s->pos[at + i] = base + off[i];
            s->nbytes[at + i] = (uint32_t)(off[i + 1] - off[i]);
            if (s->nbytes[at + i] > s->max_nbytes) s->max_nbytes = s->nbytes[at + i];
        }
        s->fds[k] = open(path, O_RDONLY | O_CLOEXEC);
        if (s->fds[k] < 0) rc = seterr(err, errlen, "%s: %s", path, strerror(errno));
    }
    free(off);
    if (!rc) {
        s->n = at + n;
        s->first[k + 1] = s->n;
    }
    return rc;
}

int shards_open_files(shards **out, const char *const *paths, int n_paths, char *err, size_t errlen) {
    *out = NULL;
    h5_quiet();
    if (n_paths < 1) return seterr(err, errlen, "no shard files given");
    shards *s = xcalloc(1, sizeof *s);
    s->n_files = n_paths;
    s->paths = xcalloc((size_t)n_paths, sizeof *s->paths);
    s->fds = xmalloc((size_t)n_paths * sizeof *s->fds);
    s->first = xcalloc((size_t)n_paths + 1, sizeof *s->first);
    for (int k = 0; k < n_paths; k++) s->fds[k] = -1, s->paths[k] = strdup(paths[k]);
    char split[32] = ""; /* every file must be of the first one's split */
    int rc = 0;
    for (int k = 0; k < n_paths && !rc; k++) rc = add_shard(s, k, paths[k], split, err, errlen);
    snprintf(s->split, sizeof s->split, "%s", split);
    if (rc) { shards_close(s); return rc; }
    *out = s;
    return 0;
}

int shards_open(shards **out, const char *dir, const char *split, char *err, size_t errlen) {
    *out = NULL;
    h5_quiet();
    struct stat sb;
    if (stat(dir, &sb) != 0) return seterr(err, errlen, "%s: %s; expected a directory packed by dsgd-run --pack", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return seterr(err, errlen, "%s is not a directory; expected a directory packed by dsgd-run --pack", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, SHARDS_INDEX);
    if (stat(path, &sb) != 0)
        return seterr(err, errlen, "%s: no %s: not a directory packed by dsgd-run --pack, or its packing did not finish (the index is "
                      "written last)", dir, SHARDS_INDEX);
    hid_t f = h5_fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT); /* unlocked: h5.h */
    if (f < 0) return h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Fopen", "the index");
    int rc = check_format(f, path, "index", err, errlen);
    char splits[64] = "";
    if (!rc) rc = read_attr_str(f, path, "splits", splits, sizeof splits, err, errlen);
    if (!rc && H5Lexists(f, split, H5P_DEFAULT) <= 0)
        rc = seterr(err, errlen, "%s: no split '%s' in this pack (it holds: %s)", path, split, splits);
    H5Eclear2(H5E_DEFAULT);
    int64_t k = 0;
    size_t w = 0;
    char *names = NULL, **paths = NULL;
    int64_t *counts = NULL;
    hid_t g = -1;
    if (!rc) {
        g = H5Gopen2(f, split, H5P_DEFAULT);
        if (g < 0) rc = h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Gopen2", split);
    }
    char gpath[4200];
    snprintf(gpath, sizeof gpath, "%s:/%s", path, split);
    if (!rc && !(names = read_strings(g, gpath, "shards", &k, &w, err, errlen))) rc = EXIT_BADINPUT;
    if (!rc && k < 1) rc = seterr(err, errlen, "%s: split '%s' lists no shards", path, split);
    if (!rc) {
        counts = xmalloc((size_t)k * sizeof *counts);
        rc = read_1d(g, gpath, "n", k, H5T_NATIVE_INT64, counts, err, errlen);
    }
    shards *s = NULL;
    if (!rc) {
        paths = xcalloc((size_t)k, sizeof *paths);
        for (int64_t i = 0; i < k; i++) {
            paths[i] = xmalloc(strlen(dir) + w + 2);
            sprintf(paths[i], "%s/%s", dir, names + i * w);
        }
        rc = shards_open_files(&s, (const char *const *)paths, (int)k, err, errlen);
        if (!rc && strcmp(s->split, split) != 0)
            rc = seterr(err, errlen, "%s: a shard of split '%s' listed by %s for split '%s'", paths[0], s->split, path, split);
    }
    /* The index's classes and counts must be the shards'. */
    if (!rc) rc = take_classes(s, f, path, s->paths[0], err, errlen);
    for (int64_t i = 0; !rc && i < k; i++)
        if (s->first[i + 1] - s->first[i] != counts[i])
            rc = seterr(err, errlen, "%s holds %lld samples but %s lists %lld for it", paths[i], (long long)(s->first[i + 1] - s->first[i]),
                        path, (long long)counts[i]);
    if (g >= 0) H5Gclose(g);
    H5Fclose(f);
    for (int64_t i = 0; paths && i < k; i++) free(paths[i]);
    free(paths), free(names), free(counts);
    if (rc) { shards_close(s); return rc; }
    *out = s;
    return 0;
}

int64_t shards_count(const shards *s) { return s->n; }
int shards_n_shards(const shards *s) { return s->n_files; }
int shards_n_classes(const shards *s) { return s->n_classes; }
const char *shards_class_name(const shards *s, int c) { return s->classes[c]; }
int64_t shards_skipped(const shards *s) { return s->skipped; }
int shards_max_side(const shards *s) { return s->max_side; }
int shards_label(const shards *s, int64_t i) { return s->label[i]; }
int shards_height(const shards *s, int64_t i) { return s->height[i]; }
int shards_width(const shards *s, int64_t i) { return s->width[i]; }
int32_t shards_source_index(const shards *s, int64_t i) { return s->source[i]; }
size_t shards_nbytes(const shards *s, int64_t i) { return s->nbytes[i]; }
size_t shards_max_nbytes(const shards *s) { return s->max_nbytes; }

/* The shard holding sample i: binary search over first[]. */
static int file_of(const shards *s, int64_t i) {
    int lo = 0, hi = s->n_files - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->first[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

const char *shards_file(const shards *s, int64_t i) { return s->paths[file_of(s, i)]; }

int shards_read(const shards *s, int64_t i, uint8_t *buf, char *err, size_t errlen) {
    const int k = file_of(s, i);
    size_t want = s->nbytes[i], got = 0;
    while (got < want) {
        ssize_t r = pread(s->fds[k], buf + got, want - got, (off_t)(s->pos[i] + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            seterr(err, errlen, "%s: sample %lld: %s at byte %llu (%zu of %zu bytes read)", s->paths[k], (long long)(i - s->first[k]),
                   r < 0 ? strerror(errno) : "end of file", (unsigned long long)(s->pos[i] + got), got, want);
            return EXIT_RUNTIME;
        }
        got += (size_t)r;
    }
    return 0;
}

int shards_same_classes(const shards *train, const shards *val, char *err, size_t errlen) {
    if (train->n_classes != val->n_classes)
        return seterr(err, errlen, "train (%s) has %d classes but val (%s) has %d: train and val must have the same class list",
                      train->paths[0], train->n_classes, val->paths[0], val->n_classes);
    for (int c = 0; c < train->n_classes; c++)
        if (strcmp(train->classes[c], val->classes[c]) != 0)
            return seterr(err, errlen, "class %d is '%s' in train (%s) but '%s' in val (%s): train and val must have the same class list",
                          c, train->classes[c], train->paths[0], val->classes[c], val->paths[0]);
    return 0;
}

int shards_verify(const shards *s, int per_shard, int64_t *checked, char *err, size_t errlen) {
    *checked = 0;
    image_dec *d = image_dec_new();
    if (!d) DIE("shards: out of memory for a JPEG decoder");
    uint8_t *buf = xmalloc(s->max_nbytes ? s->max_nbytes : 1);
    int rc = 0;
    for (int k = 0; k < s->n_files && !rc; k++) {
        const int64_t n = s->first[k + 1] - s->first[k];
        const int64_t m = per_shard <= 0 || per_shard >= n ? n : per_shard;
        for (int64_t j = 0; j < m && !rc; j++) {
            const int64_t local = m > 1 ? j * (n - 1) / (m - 1) : 0, i = s->first[k] + local;
            const uint8_t *rgb;
            int h, w, warnings = 0;
            char e[256];
            if ((rc = shards_read(s, i, buf, err, errlen))) break;
            if (image_decode_rgb(d, buf, s->nbytes[i], 1, &rgb, &h, &w, &warnings, e, sizeof e))
                rc = seterr(err, errlen, "%s: sample %lld (source %d): not a decodable JPEG: %s", s->paths[k], (long long)local, s->source[i], e);
            else if (warnings)
                rc = seterr(err, errlen, "%s: sample %lld (source %d): %d decoder warning(s): the bytes are damaged", s->paths[k],
                            (long long)local, s->source[i], warnings);
            else if (h != s->height[i] || w != s->width[i])
                rc = seterr(err, errlen, "%s: sample %lld (source %d) decodes to %d x %d but /width, /height say %d x %d", s->paths[k],
                            (long long)local, s->source[i], w, h, s->width[i], s->height[i]);
            else ++*checked;
        }
    }
    if (rc == EXIT_RUNTIME) rc = EXIT_BADINPUT;
    free(buf);
    image_dec_free(d);
    return rc;
}

/* FNV-1a, 64 bits: h after the 8 bytes of x, least significant first. */
static uint64_t fnv(uint64_t h, uint64_t x) {
    for (int b = 0; b < 8; b++) h = (h ^ (x >> (8 * b) & 0xff)) * 1099511628211ULL;
    return h;
}

uint64_t shards_fingerprint(const shards *s) {
    uint64_t h = fnv(1469598103934665603ULL, (uint64_t)s->n);
    for (int64_t i = 0; i < s->n; i++) {
        h = fnv(h, s->nbytes[i]);
        h = fnv(h, (uint16_t)s->label[i]);
        h = fnv(h, s->height[i]);
        h = fnv(h, s->width[i]);
        h = fnv(h, (uint32_t)s->source[i]);
    }
    return h;
}
