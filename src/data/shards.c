/* shards.c — the packed shard files: writer (shard_write, shards_write_index) and reader
 * (shards_read, shards_verify; opening a pack, shards_open, is shards_open.c), and a set's
 * transfer to other ranks (shards_pack, shards_unpack); layout in shards.h and docs/data.md
 * "Packing".
 *
 * Everything is HDF5 1.10 public API (H5F/H5G/H5D/H5S/H5A/H5T/H5P). Files are written with
 * object modification times off (H5Pset_obj_track_times), so the same input and seed give
 * byte-identical shards however many ranks and threads packed them. The reader leaves HDF5 once
 * the small per-sample arrays are in memory: /jpeg is contiguous, so H5Dget_offset gives where
 * its bytes start in the file and a sample is one pread() on a plain fd, which any number of
 * threads can issue at once (HDF5 itself serialises every call, notes/imagenet.md §2). */
#define _GNU_SOURCE
#include "data/shards_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image.h"
#include "io/h5.h"
#include "util/util.h"

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

/* shards_internal.h */
void shards_grow(shards *s, int64_t cap) {
    s->pos = realloc(s->pos, (size_t)cap * sizeof *s->pos);
    s->nbytes = realloc(s->nbytes, (size_t)cap * sizeof *s->nbytes);
    s->label = realloc(s->label, (size_t)cap * sizeof *s->label);
    s->height = realloc(s->height, (size_t)cap * sizeof *s->height);
    s->width = realloc(s->width, (size_t)cap * sizeof *s->width);
    s->source = realloc(s->source, (size_t)cap * sizeof *s->source);
    if (!s->pos || !s->nbytes || !s->label || !s->height || !s->width || !s->source) DIE("out of memory for %lld samples", (long long)cap);
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

/* The fd of shard k, opened now if it is not yet (a set from shards_unpack: the rank that read
 * the metadata checked the file; here it must exist and hold its last sample's bytes). Any
 * number of threads: the first open to be stored wins, the others are closed. -1 with err set. */
static int shard_fd(const shards *s, int k, char *err, size_t errlen) {
    int fd = atomic_load(&s->fds[k]);
    if (fd >= 0) return fd;
    fd = open(s->paths[k], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "%s: %s (data.dir must hold the same pack on every node)", s->paths[k], strerror(errno));
        return -1;
    }
    const int64_t last = s->first[k + 1] - 1;
    const uint64_t end = last >= s->first[k] ? s->pos[last] + s->nbytes[last] : 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < end) {
        seterr(err, errlen, "%s: truncated: the file has %lld bytes, its samples end at byte %llu (data.dir must hold the same pack "
               "on every node)", s->paths[k], (long long)sb.st_size, (unsigned long long)end);
        close(fd);
        return -1;
    }
    int none = -1;
    if (!atomic_compare_exchange_strong(&s->fds[k], &none, fd)) close(fd), fd = none;
    return fd;
}

int shards_read(const shards *s, int64_t i, uint8_t *buf, char *err, size_t errlen) {
    const int k = file_of(s, i);
    const int fd = shard_fd(s, k, err, errlen);
    if (fd < 0) return EXIT_RUNTIME;
    size_t want = s->nbytes[i], got = 0;
    while (got < want) {
        ssize_t r = pread(fd, buf + got, want - got, (off_t)(s->pos[i] + got));
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

/* ------------------------------------------------------------------------------------------ */
/* One rank reads, the others receive (shards_pack, shards_unpack).                             */

#define PACK_MAGIC 0x31736472616873ULL /* "shards1" */

/* Append n bytes at *at of buf (grown as needed; *cap its size). */
static void put(uint8_t **buf, size_t *at, size_t *cap, const void *v, size_t n) {
    *buf = xgrow(*buf, cap, *at + n, 1);
    memcpy(*buf + *at, v, n);
    *at += n;
}

void *shards_pack(const shards *s, size_t *len) {
    uint8_t *b = NULL;
    size_t at = 0, cap = 0;
    const int64_t h[8] = {(int64_t)PACK_MAGIC, s->n_files, s->n, s->skipped, (int64_t)s->max_nbytes, s->max_side, s->n_classes, 0};
    put(&b, &at, &cap, h, sizeof h);
    put(&b, &at, &cap, s->split, sizeof s->split);
    for (int k = 0; k < s->n_files; k++) {
        const uint32_t l = (uint32_t)strlen(s->paths[k]);
        put(&b, &at, &cap, &l, sizeof l);
        put(&b, &at, &cap, s->paths[k], l);
    }
    const size_t n = (size_t)s->n;
    put(&b, &at, &cap, s->first, ((size_t)s->n_files + 1) * sizeof *s->first);
    put(&b, &at, &cap, s->pos, n * sizeof *s->pos);
    put(&b, &at, &cap, s->nbytes, n * sizeof *s->nbytes);
    put(&b, &at, &cap, s->label, n * sizeof *s->label);
    put(&b, &at, &cap, s->height, n * sizeof *s->height);
    put(&b, &at, &cap, s->width, n * sizeof *s->width);
    put(&b, &at, &cap, s->source, n * sizeof *s->source);
    put(&b, &at, &cap, s->classes, (size_t)s->n_classes * sizeof *s->classes);
    *len = at;
    return b;
}

/* Take n bytes at *at of buf (len bytes) into v; -1 when the buffer ends first. */
static int take(const uint8_t *buf, size_t len, size_t *at, void *v, size_t n) {
    if (n > len - *at) return -1;
    memcpy(v, buf + *at, n);
    *at += n;
    return 0;
}

int shards_unpack(shards **out, const void *buffer, size_t len, char *err, size_t errlen) {
    *out = NULL;
    const uint8_t *buf = buffer;
    size_t at = 0;
    int64_t h[8];
    if (take(buf, len, &at, h, sizeof h) || h[0] != (int64_t)PACK_MAGIC || h[1] < 1 || h[1] > INT32_MAX || h[2] < 0 ||
        h[2] > INT32_MAX || h[6] < 1 || h[6] > SHARDS_MAX_CLASSES)
        return seterr(err, errlen, "pack metadata received from another rank: malformed (%zu bytes)", len);
    shards *s = xcalloc(1, sizeof *s);
    s->n_files = (int)h[1], s->n = h[2], s->skipped = h[3], s->max_nbytes = (size_t)h[4], s->max_side = (int)h[5];
    s->n_classes = (int)h[6];
    s->paths = xcalloc((size_t)s->n_files, sizeof *s->paths);
    s->fds = xmalloc((size_t)s->n_files * sizeof *s->fds);
    s->first = xcalloc((size_t)s->n_files + 1, sizeof *s->first);
    for (int k = 0; k < s->n_files; k++) s->fds[k] = -1;
    int bad = take(buf, len, &at, s->split, sizeof s->split);
    s->split[sizeof s->split - 1] = '\0';
    for (int k = 0; k < s->n_files && !bad; k++) {
        uint32_t l = 0;
        bad = take(buf, len, &at, &l, sizeof l) || l > len - at;
        if (!bad) {
            s->paths[k] = xmalloc((size_t)l + 1);
            bad = take(buf, len, &at, s->paths[k], l);
            s->paths[k][l] = '\0';
        }
    }
    const size_t n = (size_t)s->n;
    if (!bad) {
        shards_grow(s, s->n ? s->n : 1);
        s->classes = xcalloc((size_t)s->n_classes, sizeof *s->classes);
        bad = take(buf, len, &at, s->first, ((size_t)s->n_files + 1) * sizeof *s->first) ||
              take(buf, len, &at, s->pos, n * sizeof *s->pos) || take(buf, len, &at, s->nbytes, n * sizeof *s->nbytes) ||
              take(buf, len, &at, s->label, n * sizeof *s->label) || take(buf, len, &at, s->height, n * sizeof *s->height) ||
              take(buf, len, &at, s->width, n * sizeof *s->width) || take(buf, len, &at, s->source, n * sizeof *s->source) ||
              take(buf, len, &at, s->classes, (size_t)s->n_classes * sizeof *s->classes) || at != len;
    }
    for (int k = 0; k < s->n_files && !bad; k++) bad = s->first[k + 1] < s->first[k];
    bad = bad || s->first[0] != 0 || s->first[s->n_files] != s->n;
    if (bad) {
        shards_close(s);
        return seterr(err, errlen, "pack metadata received from another rank: malformed (%zu bytes)", len);
    }
    for (int c = 0; c < s->n_classes; c++) s->classes[c][SHARDS_WNID_MAX] = '\0';
    *out = s;
    return 0;
}
