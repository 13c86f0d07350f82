/* shards_open.c — opening a pack for reading (shards.h: shards_open, shards_open_files): the
 * index, each shard file's format, attributes, classes and per-sample arrays, checked against one
 * another, into a struct shards (shards_internal.h). The writer, the sample reads and the transfer
 * to other ranks are shards.c. HDF5 is left once the small arrays are in memory (shards.c). */
#define _GNU_SOURCE
#include "data/shards_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/h5.h"
#include "util/util.h"

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

/* Check that path is a regular file and an HDF5 file (*sb: its stat) and open it read-only into
 * *f; 0, or EXIT_BADINPUT with err (a truncated file named as such). */
static int shard_h5_open(const char *path, struct stat *sb, hid_t *f, char *err, size_t errlen) {
    if (stat(path, sb) != 0) return seterr(err, errlen, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb->st_mode)) return seterr(err, errlen, "%s: not a regular file; expected a pack shard", path);
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
        return seterr(err, errlen, "%s: not an HDF5 file (%lld bytes); expected a pack shard", path, (long long)sb->st_size);
    *f = h5_fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT); /* unlocked: h5.h */
    if (*f < 0) {
        h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Fopen", "the shard");
        const char *t = strstr(err, "(truncated file");
        if (t) { /* "path: truncated: N bytes (HDF5: truncated file: eof = ..., stored_eof = ...)" */
            char m[ERRLEN];
            snprintf(m, sizeof m, "%s", t + 1);
            m[strcspn(m, ")")] = '\0';
            seterr(err, errlen, "%s: truncated: the file has %lld bytes (HDF5: %s)", path, (long long)sb->st_size, m);
        }
        return EXIT_BADINPUT;
    }
    return 0;
}

/* The attributes of shard file k (f, path): format, split (checked against split, or taken into
 * it when ""), n, skipped, max_side (the same as the files before it), and its /classes. */
static int shard_attrs(shards *s, int k, hid_t f, const char *path, char *split, int64_t *n, int64_t *skipped,
                       int64_t *max_side, char *err, size_t errlen) {
    char sp[32];
    int rc = check_format(f, path, "shard", err, errlen);
    if (!rc) rc = read_attr_str(f, path, "split", sp, sizeof sp, err, errlen);
    if (!rc && split[0] && strcmp(sp, split) != 0)
        rc = seterr(err, errlen, "%s: a shard of split '%s' where '%s' was expected", path, sp, split);
    if (!rc && !split[0]) snprintf(split, 32, "%s", sp);
    if (!rc) rc = read_attr_i64(f, path, "n", n, err, errlen);
    if (!rc) rc = read_attr_i64(f, path, "skipped", skipped, err, errlen);
    if (!rc) rc = read_attr_i64(f, path, "max_side", max_side, err, errlen);
    if (!rc && (*n < 0 || *n > INT32_MAX)) rc = seterr(err, errlen, "%s: attribute n = %lld out of range", path, (long long)*n);
    if (!rc && k > 0 && *max_side != s->max_side)
        rc = seterr(err, errlen, "%s: max_side %lld but %s has %d: the files are not of one pack", path, (long long)*max_side, s->paths[0], s->max_side);
    if (!rc) rc = take_classes(s, f, path, k ? s->paths[0] : "", err, errlen);
    return rc;
}

/* The per-sample arrays of shard f (n samples): /offset into off (n + 1), the others into s from
 * sample at on; *jlen: /jpeg's length, *base: the file offset where its bytes start. */
static int shard_arrays(shards *s, hid_t f, const char *path, int64_t at, int64_t n, uint64_t *off, uint64_t *base,
                        int64_t *jlen, char *err, size_t errlen) {
    int rc = read_1d(f, path, "offset", n + 1, H5T_NATIVE_UINT64, off, err, errlen);
    if (!rc) rc = read_1d(f, path, "label", n, H5T_NATIVE_INT16, s->label + at, err, errlen);
    if (!rc) rc = read_1d(f, path, "height", n, H5T_NATIVE_UINT16, s->height + at, err, errlen);
    if (!rc) rc = read_1d(f, path, "width", n, H5T_NATIVE_UINT16, s->width + at, err, errlen);
    if (!rc) rc = read_1d(f, path, "source_index", n, H5T_NATIVE_INT32, s->source + at, err, errlen);
    if (!rc) {
        hid_t d = open_1d(f, path, "jpeg", H5T_INTEGER, -1, jlen, err, errlen);
        if (d < 0) rc = EXIT_BADINPUT;
        else {
            hid_t dcpl = H5Dget_create_plist(d);
            if (dcpl < 0 || H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl) != 0)
                rc = seterr(err, errlen, "%s: /jpeg is not contiguous and unfiltered; expected a pack shard", path);
            if (dcpl >= 0) H5Pclose(dcpl);
            if (!rc && *jlen > 0) {
                haddr_t a = H5Dget_offset(d);
                if (a == HADDR_UNDEF) rc = h5_fail(EXIT_BADINPUT, err, errlen, path, "H5Dget_offset", "/jpeg");
                else *base = (uint64_t)a;
            }
            H5Dclose(d);
        }
    }
    return rc;
}

/* The n + 1 offsets of a shard (off) against its labels (in s from sample at on), /jpeg's jlen
 * bytes from file offset base, and the file's size (sb). */
static int check_offsets(const shards *s, const char *path, int64_t at, int64_t n, const uint64_t *off, uint64_t base,
                         int64_t jlen, const struct stat *sb, char *err, size_t errlen) {
    int rc = 0;
    if (off[0] != 0) rc = seterr(err, errlen, "%s: /offset[0] = %llu, expected 0", path, (unsigned long long)off[0]);
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
    if (!rc && base + (uint64_t)jlen > (uint64_t)sb->st_size)
        rc = seterr(err, errlen, "%s: truncated: /jpeg ends at byte %llu but the file has %lld bytes", path,
                    (unsigned long long)(base + (uint64_t)jlen), (long long)sb->st_size);
    return rc;
}

/* Add shard file k (path) to s: checks, per-sample arrays, fd. split: the split expected, or
 * "" to take the file's (written there; size 32). */
static int add_shard(shards *s, int k, const char *path, char *split, char *err, size_t errlen) {
    struct stat sb;
    hid_t f = -1;
    int rc = shard_h5_open(path, &sb, &f, err, errlen);
    if (rc) return rc;
    int64_t n = 0, skipped = 0, max_side = 0, jlen = 0;
    rc = shard_attrs(s, k, f, path, split, &n, &skipped, &max_side, err, errlen);
    uint64_t *off = NULL, base = 0;
    const int64_t at = s->n;
    if (!rc) {
        s->max_side = (int)max_side;
        s->skipped += skipped;
        shards_grow(s, at + n + 1);
        off = xmalloc((size_t)(n + 1) * sizeof *off);
        rc = shard_arrays(s, f, path, at, n, off, &base, &jlen, err, errlen);
    }
    H5Fclose(f);
    if (!rc) rc = check_offsets(s, path, at, n, off, base, jlen, &sb, err, errlen);
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
    for (int k = 0; k < n_paths; k++) {
        s->fds[k] = -1;
        s->paths[k] = strdup(paths[k]);
    }
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
