/* runlog.c — the HDF5 run file written by rank 0 (runlog.h; layout in docs/output.md).
 *
 * CRASH SAFETY WITH HDF5'S PUBLIC API ONLY
 * The promise: a process killed by SIGKILL at any instant leaves at the output path a file that
 * plain h5dump and h5py open (no SWMR, no h5clear), holding every evaluation for which
 * runlog_eval had returned; readers may open the file of a running run at any time.
 *
 * The design: the path only ever names a closed, complete HDF5 file, replaced whole.
 *
 * 1. The working file lives in memory: HDF5's core driver without a backing store
 *    (H5Pset_fapl_core(fapl, increment, 0)). Every append, array rewrite and attribute goes
 *    there; HDF5 itself never writes to disk, so an I/O error can never leave HDF5 with a
 *    half-written file or an open object whose close fails. The in-memory file is the only HDF5
 *    object held open between calls (datasets are opened by name, briefly); at exit, HDF5's
 *    atexit handler only frees memory, whatever path the process takes out.
 * 2. Publishing: H5Fget_file_image (a documented call whose result is a valid HDF5 file, the
 *    file as a close would leave it) copies the in-memory file into a buffer; we write() it to a
 *    hidden temporary beside the output (.<name>.new.<pid>.<ns>), fsync() it and rename() it
 *    over the output. rename() is atomic: a reader, or a SIGKILL at any instant, sees the old
 *    file or the new one, never a torn one (at worst a stray hidden temporary remains). A reader
 *    that had the old file open keeps reading the old inode undisturbed. The first publication
 *    uses link(), which fails if the name exists, so an earlier run is never replaced unless
 *    overwrite (then rename()). Every disk write is ours: a plain write() whose errno (ENOSPC,
 *    EFBIG, EIO) becomes a message and -1, never a signal.
 * 3. When: at every runlog_eval and runlog_flush (so everything up to an evaluation or a
 *    checkpoint is on disk when they return), at runlog_close, and for /train and /ranks rows
 *    whenever PUBLISH_S (5 s, meta.publish_s) have passed since the last publication, stretched
 *    to 100 times the last publication's cost so that publishing never takes more than 1 % of
 *    the wall clock. Everything happens on the calling (log) thread between training steps.
 *    Cost: the whole file is written each time (what any replace-by-rename scheme pays; writing
 *    a copy of the published file and appending to it costs the same copy, plus an HDF5 open).
 *    Measured on the 2-core development machine (ext4 on a virtual disk, fsync included), 22 500
 *    /train and /ranks rows: 11-21 ms for p = 4 (4.6 MB), 230-770 ms for p = 128 (116 MB):
 *    docs/output.md, "When data reaches the file".
 * 4. End-of-run attributes and resume are plain edits of the in-memory file: runlog_set_attr_*
 *    writes there at once, runlog_close adds final_attributes (their names) and publishes;
 *    runlog_resume opens the run file with the core driver (read into memory; the file on disk
 *    is never opened for writing), checks it, cuts every group back to the checkpoint's rows,
 *    updates resumes and resumed_at and publishes over the old file. A descriptor kept open on
 *    the file published last (so its inode number cannot be reused) tells whether another run
 *    replaced it (overwrite = true on the same output): then nothing more is written.
 * 5. Status on a full disk. `status` is a fixed-size string attribute (STATUS_LEN bytes,
 *    created empty with the file, "" meaning running or killed). When a publication fails, the
 *    run is over for the run file (the caller stops every rank with exit 1); runlog_close then
 *    cannot publish a new file (a full disk has no room for the copy), so it opens the published
 *    file read-write with HDF5 and overwrites the value of `status` with H5Awrite, which
 *    rewrites bytes already allocated (same size) and needs no free space: "stopped: run-file
 *    write error: <why>". This is the one write into a published file, on this failure path
 *    only, and only into the file this run published last (checked by inode).
 *
 * The file uses the 1.8 format (libver bounds earliest..v18: superblock version 0, version-1
 * object headers), readable by every HDF5 from 1.8 on, and required here: HDF5 1.10.8's
 * H5Fget_file_image clears the open-for-write flags of a version 2 or 3 superblock in the image
 * without updating its checksum (a resumed file of the earlier SWMR writer, superblock 3, came
 * out unreadable), whereas a version 0 superblock has no checksum. runlog_resume therefore
 * refuses files with a newer superblock (only the earlier dsgd-run wrote those). Datasets
 * of /train, /eval, /eval_local, /ranks and the growing method arrays are chunked with
 * unlimited rows; fixed arrays are contiguous with a fill value (zero, NaN).
 *
 * HDF5 API used, checked against Debian's 1.10.8 headers and the current reference manual
 * (support.hdfgroup.org, 1.14 on): H5Pset_fapl_core (hbool_t became bool, same ABI),
 * H5Pset_libver_bounds with H5F_LIBVER_V18 (1.10 on), H5Fget_info2 (1.10 on),
 * H5Fget_file_image (1.8.9 on), H5Fcreate/H5Fopen/H5Fflush/H5Fclose, H5D/H5S/H5T/H5A/H5L
 * calls and property lists that none of these versions removed or changed (no H5Literate,
 * H5Oget_info, H5Fis_hdf5, no file-driver class, no SWMR call), so no H5_VERSION_GE guard is
 * needed; a grep of src/ for the file-driver prefix (H5 + FD) finds nothing.
 *
 * Limits: the guarantee covers process death (SIGKILL, OOM killer, MPI abort). The temporary is
 * fsync'ed before the rename, so after a power loss the path names the old file or the new one
 * (the directory is not fsync'ed: the rename itself may be lost). /train and /ranks rows logged
 * after the last publication, and an /eval_local row or array rewrite made after it, are lost
 * by a kill. Memory: the file is held in memory twice at a publication (file and image).
 *
 * Errors: every HDF5 and system call is checked. HDF5's automatic error printing is turned off
 * for the process (H5Eset_auto2); failures are reported as "<path>: HDF5 <call> failed for
 * <object>: <HDF5's own message>" or "<path>: <what>: <strerror>" through err (runlog_create,
 * runlog_resume) or runlog_error. */
#include "runlog.h"
#include "runlog_internal.h"

#include "util/util.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* The run file.                                                                               */

int runlog_is_own_attr(const char *name) {
    for (size_t i = 0; i < sizeof own_attrs / sizeof *own_attrs; i++)
        if (strcmp(name, own_attrs[i]) == 0) return 1;
    return 0;
}

/* Dataset obj of f (parent groups created) with its units and description attributes, and
 * columns when not NULL: nd-D of dims (maxd: NULL, or the maximum dims), chunked by chunk, or
 * contiguous when chunk is NULL; fill (memory type fill_type) as its fill value when not NULL. */
static int make_dataset(hid_t f, const char *obj, hid_t ftype, int nd, const hsize_t *dims, const hsize_t *maxd,
                        const hsize_t *chunk, hid_t fill_type, const void *fill, const char *units, const char *description,
                        const char *columns, const char *path, char *err, size_t errlen) {
    hid_t space = H5Screate_simple(nd, dims, maxd);
    if (space < 0) return h5_fail(-1, err, errlen, path, "H5Screate_simple", obj);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t ds = H5I_INVALID_HID;
    if (dcpl < 0 || lcpl < 0) h5_fail(-1, err, errlen, path, "H5Pcreate", obj);
    else if (H5Pset_create_intermediate_group(lcpl, 1) < 0) h5_fail(-1, err, errlen, path, "H5Pset_create_intermediate_group", obj);
    else if (chunk ? H5Pset_chunk(dcpl, nd, chunk) < 0 : H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0)
        h5_fail(-1, err, errlen, path, chunk ? "H5Pset_chunk" : "H5Pset_layout", obj);
    else if (fill && H5Pset_fill_value(dcpl, fill_type, fill) < 0) h5_fail(-1, err, errlen, path, "H5Pset_fill_value", obj);
    else if (H5Pset_obj_track_times(dcpl, 0) < 0) h5_fail(-1, err, errlen, path, "H5Pset_obj_track_times", obj);
    else if ((ds = H5Dcreate2(f, obj, ftype, space, lcpl, dcpl, H5P_DEFAULT)) < 0)
        h5_fail(-1, err, errlen, path, "H5Dcreate2", obj);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Sclose(space);
    if (ds < 0) return -1;
    int rc = h5_attr_string_err(ds, obj, "units", units, path, err, errlen) < 0 ||
             h5_attr_string_err(ds, obj, "description", description, path, err, errlen) < 0 ||
             (columns && h5_attr_string_err(ds, obj, "columns", columns, path, err, errlen) < 0) ? -1 : 0;
    if (H5Dclose(ds) < 0 && rc == 0) rc = h5_fail(-1, err, errlen, path, "H5Dclose", obj);
    return rc;
}

/* A chunked extendible dataset of 0 rows of group gname: 1-D when cols == 0, else 2-D [rows,
 * cols] with cols fixed, chunks of chunk rows by all cols and a `columns` attribute ("worker
 * rank 0..cols-1"). */
static int make_column(hid_t f, const char *gname, const colspec *c, hid_t ftype, hsize_t chunk, hsize_t cols,
                       const char *path, char *err, size_t errlen) {
    char obj[64], columns[64];
    snprintf(obj, sizeof obj, "%s/%s", gname, c->name);
    snprintf(columns, sizeof columns, "worker rank 0..%llu", (unsigned long long)cols - 1);
    hsize_t dims[2] = {0, cols}, maxdims[2] = {H5S_UNLIMITED, cols}, cdims[2] = {chunk, cols};
    return make_dataset(f, obj, ftype, cols ? 2 : 1, dims, maxdims, cdims, H5I_INVALID_HID, NULL, c->units, c->description,
                        cols ? columns : NULL, path, err, errlen);
}

/* Append n rows from buf (memory type mtype, row-major) to dataset gname/name of the in-memory
 * file, which holds n0 rows: a 1-D dataset when cols == 0, else a 2-D one of cols columns. */
static int append(runlog *r, const char *gname, const char *name, hid_t mtype, hsize_t n0, hsize_t n, hsize_t cols,
                  const void *buf) {
    char obj[64];
    snprintf(obj, sizeof obj, "%s/%s", gname, name);
    int rank = cols ? 2 : 1;
    hsize_t total[2] = {n0 + n, cols}, start[2] = {n0, 0}, count[2] = {n, cols};
    hid_t ds = H5Dopen2(r->file, obj, H5P_DEFAULT);
    if (ds < 0) return h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dopen2", obj);
    if (H5Dset_extent(ds, total) < 0) { H5Dclose(ds); return h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dset_extent", obj); }
    hid_t fspace = H5Dget_space(ds), mspace = H5Screate_simple(rank, count, NULL);
    int rc = 0;
    if (fspace < 0 || mspace < 0) rc = h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dget_space/H5Screate_simple", obj);
    else if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
        rc = h5_fail(-1, r->err, sizeof r->err, r->path, "H5Sselect_hyperslab", obj);
    else if (H5Dwrite(ds, mtype, mspace, fspace, H5P_DEFAULT, buf) < 0)
        rc = h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dwrite", obj);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (H5Dclose(ds) < 0 && rc == 0) rc = h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dclose", obj);
    return rc;
}

/* A write into the in-memory file failed: the file is no longer extended. Returns -1. */
static int stop(runlog *r) {
    r->failed = 1;
    return -1;
}

/* Append the buffered /train rows. */
static int write_train(runlog *r) {
    if (r->nbuf == 0) return 0;
    const void *cols[NTRAIN] = {r->buf_step, r->buf_time, r->buf_loss, r->buf_alpha};
    for (int i = 0; i < NTRAIN; i++)
        if (append(r, "/train", train_cols[i].name, i == T_STEP ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, r->n_train,
                   (hsize_t)r->nbuf, 0, cols[i]) < 0)
            return -1;
    if (r->wall && append(r, "/train", wall_col.name, H5T_NATIVE_DOUBLE, r->n_train, (hsize_t)r->nbuf, 0, r->buf_wall) < 0) return -1;
    r->n_train += (hsize_t)r->nbuf;
    r->nbuf = 0;
    return 0;
}

/* Append the buffered /ranks rows. */
static int write_ranks(runlog *r) {
    if (r->nrbuf == 0) return 0;
    if (append(r, "/ranks", ranks_step_col.name, H5T_NATIVE_INT64, r->n_ranks, (hsize_t)r->nrbuf, 0, r->rbuf_step) < 0)
        return -1;
    for (int q = 0; q < NRANKS; q++)
        if (append(r, "/ranks", ranks_cols[q].name, H5T_NATIVE_DOUBLE, r->n_ranks, (hsize_t)r->nrbuf, (hsize_t)r->ranks,
                   r->rbuf[q]) < 0)
            return -1;
    r->n_ranks += (hsize_t)r->nrbuf;
    r->nrbuf = 0;
    return 0;
}

/* Write the buffered /train and /ranks rows (at an evaluation, at close). */
static int write_buffers(runlog *r) { return write_train(r) < 0 || write_ranks(r) < 0 ? -1 : 0; }

/* ------------------------------------------------------------------------------------------ */
/* When to publish (part 3 of the header comment; how: runlog_publish.c).                      */

int runlog_publish_now(runlog *r, int overwrite, char *err, size_t errlen) {
    double t0 = wall_time();
    if (runlog_publish(r->file, r->path, &r->fd, &r->image, overwrite, err, errlen) < 0) return -1;
    r->last_publish = wall_time();
    r->publish_cost = r->last_publish - t0;
    return 0;
}

/* Write the buffered rows into the in-memory file and publish it; on failure the file is no
 * longer extended (r->failed). */
static int publish_all(runlog *r) {
    if (r->failed) return -1;
    if (write_buffers(r) < 0 || runlog_publish_now(r, 0, r->err, sizeof r->err) < 0) {
        r->failed = 1;
        return -1;
    }
    return 0;
}

/* Publish if the wall-clock bound has passed: publish_s since the last publication, stretched to
 * PUBLISH_SHARE times its cost. */
static int publish_if_due(runlog *r) {
    double every = r->publish_s > PUBLISH_SHARE * r->publish_cost ? r->publish_s : PUBLISH_SHARE * r->publish_cost;
    return wall_time() - r->last_publish >= every ? publish_all(r) : 0;
}

/* Append one row to the NEVAL columns of group gname (/eval or /eval_local), which hold *n rows
 * (then one more). On failure the file is no longer extended. */
static int append_eval_row(runlog *r, const char *gname, hsize_t *n, long step, double time_s, double epoch,
                           double loss, double top1_error, double top5_error) {
    int64_t s = step;
    const double v[NEVAL] = {0, time_s, epoch, loss, top1_error, top5_error};
    for (int i = 0; i < NEVAL; i++)
        if (append(r, gname, eval_cols[i].name, i == E_STEP ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, *n, 1, 0,
                   i == E_STEP ? (const void *)&s : &v[i]) < 0)
            return stop(r);
    if (r->wall && append(r, gname, wall_col.name, H5T_NATIVE_DOUBLE, *n, 1, 0, &r->wall_now) < 0) return stop(r);
    (*n)++;
    return 0;
}

/* mkdir -p of the directory part of path. */
static int make_parents(const char *path, char *err, size_t errlen) {
    char dir[PATHLEN];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    return mkdirs(dir, path, err, errlen);
}

/* Free r, closing the in-memory file (nothing of it is on disk: errors do not matter). */
void runlog_free(runlog *r) {
    if (r->file >= 0) H5Fclose(r->file);
    H5Eclear2(H5E_DEFAULT);
    free(r->final_names);
    for (int i = 0; i < r->n_arrays; i++) free(r->arrays[i].obj);
    free(r->arrays);
    free(r->rbuf[0]); /* the one allocation behind every rbuf[q] */
    free(r->image.data);
    if (r->fd >= 0) close(r->fd);
    free(r);
}

/* A new runlog with every handle invalid: the /ranks buffers and the method-array table are
 * allocated here, once (meta already checked by runlog_check_meta). */
runlog *runlog_new(const char *path, const runlog_meta *meta) {
    runlog *r = xcalloc(1, sizeof *r);
    r->file = H5I_INVALID_HID;
    r->fd = -1;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->has_eval_local = meta->eval_local != 0;
    r->wall = meta->wall != 0;
    r->wall_now = NAN;
    r->ranks = meta->ranks;
    r->publish_s = meta->publish_s > 0 ? meta->publish_s : PUBLISH_S;
    if (r->ranks > 0) {
        size_t per = (size_t)RANKS_BUF * (size_t)r->ranks;
        double *mem = xmalloc((size_t)NRANKS * per * sizeof *mem);
        for (int q = 0; q < NRANKS; q++) r->rbuf[q] = mem + (size_t)q * per;
    }
    if (meta->n_arrays > 0) {
        r->arrays = xcalloc((size_t)meta->n_arrays, sizeof *r->arrays);
        r->n_arrays = meta->n_arrays;
        for (int i = 0; i < r->n_arrays; i++) {
            const runlog_array_spec *a = &meta->arrays[i];
            method_array *m = &r->arrays[i];
            *m = (method_array){.f64 = a->float64 != 0, .grows = a->grows != 0, .rows = a->rows, .cols = a->cols,
                                .obj = xmalloc(strlen(a->name) + 2)};
            sprintf(m->obj, "/%s", a->name);
        }
    }
    return r;
}

/* Check the parts of meta that shape the layout; err filled and -1 if one is unusable. */
int runlog_check_meta(const runlog_meta *meta, const char *fn, const char *path, char *err, size_t errlen) {
    if (meta->servers < 0) return seterr(err, errlen, "%s: %s: servers = %d is negative", path, fn, meta->servers), -1;
    if (meta->ranks < 0 || meta->ranks > MAX_RANKS)
        return seterr(err, errlen, "%s: %s: ranks = %d is not in 0..%d", path, fn, meta->ranks, MAX_RANKS), -1;
    if (meta->n_arrays < 0 || (meta->n_arrays > 0 && !meta->arrays))
        return seterr(err, errlen, "%s: %s: %d fixed arrays%s", path, fn, meta->n_arrays,
                      meta->n_arrays < 0 ? " is negative" : " but no array specs"), -1;
    static const char *reserved[] = {"train", "eval", "eval_local", "ranks"};
    for (int i = 0; i < meta->n_arrays; i++) {
        const runlog_array_spec *a = &meta->arrays[i];
        const char *n = a->name;
        if (!n || !n[0] || n[0] == '/' || n[strlen(n) - 1] == '/' || strstr(n, "//"))
            return seterr(err, errlen, "%s: %s: fixed array %d has the name \"%s\" (want a path like "
                          "\"ps/staleness_histogram\": not empty, no leading, trailing or double '/')", path, fn, i, n ? n : "(null)"), -1;
        size_t first = strcspn(n, "/");
        for (size_t k = 0; k < sizeof reserved / sizeof *reserved; k++)
            if (strlen(reserved[k]) == first && strncmp(n, reserved[k], first) == 0)
                return seterr(err, errlen, "%s: %s: fixed array \"%s\" would be inside /%s, which runlog owns",
                              path, fn, n, reserved[k]), -1;
        if (a->rows < 1 || a->cols < 0 || a->rows > (1L << 40) / (a->cols ? a->cols : 1))
            return seterr(err, errlen, "%s: %s: fixed array %s has shape rows = %ld, cols = %ld "
                          "(want rows >= 1, cols >= 0 (0: 1-D), at most 2^40 elements)", path, fn, n, a->rows, a->cols), -1;
    }
    return 0;
}

/* The dataset of method array a (parent groups created): fixed arrays contiguous of their shape,
 * read as the fill value (zero, NaN) until written; growing ones chunked, 0 rows, unlimited. */
static int make_array(hid_t f, const runlog_array_spec *a, const char *obj, const char *path, char *err, size_t errlen) {
    hsize_t dims[2] = {a->grows ? 0 : (hsize_t)a->rows, (hsize_t)a->cols}, maxd[2] = {H5S_UNLIMITED, (hsize_t)a->cols};
    hsize_t chunk[2] = {ARRAY_CHUNK, (hsize_t)a->cols};
    const int64_t zero = 0;
    const double nan_fill = NAN;
    return make_dataset(f, obj, a->float64 ? H5T_IEEE_F64LE : H5T_STD_I64LE, a->cols ? 2 : 1, dims, a->grows ? maxd : NULL,
                        a->grows ? chunk : NULL, a->float64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64,
                        a->float64 ? (const void *)&nan_fill : (const void *)&zero, a->units, a->description, NULL, path, err,
                        errlen);
}

/* The current UTC time, ISO-8601 ("2025-01-31T12:00:00Z"), into buf; -1 if it cannot be read. */
int runlog_utc_now(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    if (now == (time_t)-1 || !gmtime_r(&now, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return -1;
    return 0;
}

/* A file access property list for the in-memory working file (part 1 of the header comment);
 * for a new file (create), in the 1.8 file format (superblock version 0: see the header comment
 * on the format; a file opened keeps its own and must be checked). */
hid_t runlog_memory_fapl(int create, const char *path, char *err, size_t errlen) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return h5_fail(-1, err, errlen, path, "H5Pcreate", "file access properties");
    if (H5Pset_fapl_core(fapl, MEM_INCREMENT, 0) < 0 || h5_unlock(fapl) < 0 || /* unlocked: h5.h */
        (create && H5Pset_libver_bounds(fapl, H5F_LIBVER_EARLIEST, H5F_LIBVER_V18) < 0)) {
        H5Pclose(fapl);
        return h5_fail(-1, err, errlen, path, "H5Pset_fapl_core/H5Pset_libver_bounds", "file access properties");
    }
    return fapl;
}

/* Root attributes (status as its empty fixed-size slot), groups and empty datasets of a new file. */
static int build_layout(runlog *r, hid_t f, const runlog_meta *meta, const char *path, char *err, size_t errlen) {
    unsigned maj, min, rel;
    if (H5get_libversion(&maj, &min, &rel) < 0) return h5_fail(-1, err, errlen, path, "H5get_libversion", "/");
    char h5ver[32], created[32], host[256];
    snprintf(h5ver, sizeof h5ver, "%u.%u.%u", maj, min, rel);
    if (runlog_utc_now(created, sizeof created) < 0) return h5_syserr(err, errlen, path, "cannot read the UTC time");
    const char *hostname = meta->hostname;
    if (!hostname) {
        if (gethostname(host, sizeof host) != 0) return h5_syserr(err, errlen, path, "gethostname");
        host[sizeof host - 1] = '\0';
        hostname = host;
    }
    int32_t p = meta->p, b = meta->b, m = meta->m;
    uint64_t seed = meta->seed;
    int64_t iterations = meta->iterations;
    int32_t servers = meta->servers;
    if (h5_attr_string_err(f, "/", "method", meta->method, path, err, errlen) < 0 ||
        h5_attr_write_err(f, "/", "p", H5T_STD_I32LE, H5T_NATIVE_INT32, &p, path, err, errlen) < 0 ||
        h5_attr_write_err(f, "/", "b", H5T_STD_I32LE, H5T_NATIVE_INT32, &b, path, err, errlen) < 0 ||
        h5_attr_write_err(f, "/", "m", H5T_STD_I32LE, H5T_NATIVE_INT32, &m, path, err, errlen) < 0 ||
        h5_attr_write_err(f, "/", "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed, path, err, errlen) < 0 ||
        h5_attr_write_err(f, "/", "iterations", H5T_STD_I64LE, H5T_NATIVE_INT64, &iterations, path, err, errlen) < 0 ||
        h5_attr_write_err(f, "/", "servers", H5T_STD_I32LE, H5T_NATIVE_INT32, &servers, path, err, errlen) < 0 ||
        h5_attr_string_err(f, "/", "dsgd_version", DSGD_VERSION, path, err, errlen) < 0 ||
        h5_attr_string_err(f, "/", "hdf5_version", h5ver, path, err, errlen) < 0 ||
        h5_attr_string_err(f, "/", "config", meta->config_text, path, err, errlen) < 0 ||
        h5_attr_string_err(f, "/", "command_line", meta->command_line, path, err, errlen) < 0 ||
        h5_attr_string_err(f, "/", "hostname", hostname, path, err, errlen) < 0 ||
        h5_attr_string_err(f, "/", "created", created, path, err, errlen) < 0 || runlog_status_write(f, "", path, err, errlen) < 0)
        return -1;
    /* Relative paths in config and command_line are relative to this directory. */
    char cwd[PATHLEN];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "(unknown: %s)", strerror(errno));
    if (h5_attr_string_err(f, "/", "working_directory", cwd, path, err, errlen) < 0) return -1;
    if (meta->device && h5_attr_string_err(f, "/", "device", meta->device, path, err, errlen) < 0) return -1;
    for (int i = 0; i < meta->n_attrs; i++) {
        const runlog_attr *a = &meta->attrs[i];
        if (runlog_is_own_attr(a->name) || strcmp(a->name, "status") == 0)
            return seterr(err, errlen, "%s: attribute %s is one runlog writes itself", path, a->name), -1;
        if (a->s ? h5_attr_string_err(f, "/", a->name, a->s, path, err, errlen) < 0
                 : h5_attr_write_err(f, "/", a->name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &a->i, path, err, errlen) < 0)
            return -1;
    }

    /* /train, /eval and, if asked for, /eval_local (the columns of /eval; column 0 is step in all). */
    for (int g = 0; g < 3; g++) {
        if (g == 2 && !r->has_eval_local) break;
        const char *gname = g == 0 ? "/train" : g == 1 ? "/eval" : "/eval_local";
        for (int i = 0; i < (g == 0 ? NTRAIN : NEVAL); i++) {
            const colspec *cs = r->wall && i == T_TIME ? &time_sim_col : g == 0 ? &train_cols[i] : &eval_cols[i];
            if (make_column(f, gname, cs, i == 0 ? H5T_STD_I64LE : H5T_IEEE_F64LE, g == 0 ? TRAIN_CHUNK : EVAL_CHUNK, 0, path, err,
                            errlen) < 0)
                return -1;
        }
        if (r->wall && make_column(f, gname, &wall_col, H5T_IEEE_F64LE, g == 0 ? TRAIN_CHUNK : EVAL_CHUNK, 0, path, err, errlen) < 0)
            return -1;
    }
    /* /ranks: step, and the 2-D [row, ranks] timing datasets. */
    if (r->ranks > 0 && make_column(f, "/ranks", &ranks_step_col, H5T_STD_I64LE, RANKS_CHUNK, 0, path, err, errlen) < 0) return -1;
    for (int q = 0; q < NRANKS && r->ranks > 0; q++)
        if (make_column(f, "/ranks", &ranks_cols[q], H5T_IEEE_F64LE, RANKS_CHUNK, (hsize_t)r->ranks, path, err, errlen) < 0) return -1;
    /* The method's arrays. */
    for (int i = 0; i < r->n_arrays; i++)
        if (make_array(f, &meta->arrays[i], r->arrays[i].obj, path, err, errlen) < 0) return -1;
    return 0;
}

/* The checks of runlog_create's arguments and output path, then the output's parent directories
 * created. Returns 0 or -1 with err filled. */
static int check_create(const char *path, int overwrite, const runlog_meta *meta, char *err, size_t errlen) {
    if (!path || !path[0] || !meta)
        return seterr(err, errlen, "runlog_create: %s", !meta ? "no run metadata" : "empty output path"), -1;
    if (strlen(path) >= PATHLEN - 64) return seterr(err, errlen, "output path too long (%zu characters): %s", strlen(path), path), -1;
    /* Our messages replace HDF5's stack dumps (see the header comment). */
    if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) return seterr(err, errlen, "%s: HDF5 H5Eset_auto2 failed", path), -1;
    struct stat st;
    if (!overwrite && lstat(path, &st) == 0) return seterr(err, errlen, runlog_already_exists_fmt, path), -1;
    if (runlog_check_meta(meta, "runlog_create", path, err, errlen) < 0) return -1;
    return make_parents(path, err, errlen);
}

runlog *runlog_create(const char *path, int overwrite, const runlog_meta *meta, char *err, size_t errlen) {
    if (check_create(path, overwrite, meta, err, errlen) < 0) return NULL;
    runlog *r = runlog_new(path, meta);
    hid_t fapl = runlog_memory_fapl(1, path, err, errlen);
    if (fapl < 0) {
        runlog_free(r);
        return NULL;
    }
    /* In memory only: HDF5 never creates this name (no backing store); unique, as two runlogs
     * of one process may share an output (overwrite = true). */
    char name[PATHLEN];
    if (runlog_temp_name(name, sizeof name, path, "mem") == 0) r->file = H5Fcreate(name, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (r->file < 0) h5_fail(-1, err, errlen, path, "H5Fcreate", "the in-memory file");
    if (r->file < 0 || build_layout(r, r->file, meta, path, err, errlen) < 0 || runlog_publish_now(r, overwrite, err, errlen) < 0) {
        runlog_free(r);
        return NULL;
    }
    return r;
}

void runlog_wall(runlog *r, double wall_s) {
    if (r) r->wall_now = wall_s;
}

int runlog_train(runlog *r, long step, double time_s, double loss, double alpha) {
    if (!r || r->failed) return -1;
    int i = r->nbuf++;
    r->buf_step[i] = step;
    r->buf_time[i] = time_s;
    r->buf_loss[i] = loss;
    r->buf_alpha[i] = alpha;
    r->buf_wall[i] = r->wall_now;
    if (r->nbuf == TRAIN_BUF && write_train(r) < 0) return stop(r);
    return publish_if_due(r);
}

int runlog_eval(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                double top5_error) {
    if (!r || r->failed) return -1;
    if (append_eval_row(r, "/eval", &r->n_eval, step, time_s, epoch, loss, top1_error, top5_error) < 0) return -1;
    return publish_all(r);
}

int runlog_flush(runlog *r) { return r ? publish_all(r) : -1; }

void runlog_rows_written(const runlog *r, runlog_rows *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!r) return;
    out->train = (long)r->n_train;
    out->eval = (long)r->n_eval;
    out->eval_local = r->has_eval_local ? (long)r->n_eval_local : 0;
    out->ranks = r->ranks > 0 ? (long)r->n_ranks : 0;
}

int runlog_eval_local(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                      double top5_error) {
    if (!r || r->failed) return -1;
    if (!r->has_eval_local)
        return seterr(r->err, sizeof r->err, "%s: runlog_eval_local: the file has no /eval_local (created without "
                      "meta.eval_local)", r->path), -1;
    return append_eval_row(r, "/eval_local", &r->n_eval_local, step, time_s, epoch, loss, top1_error, top5_error);
}

int runlog_ranks(runlog *r, long step, const double *step_time_s, const double *compute_s, const double *comm_s,
                 const double *wait_s, const double *data_s) {
    if (!r || r->failed) return -1;
    if (r->ranks == 0)
        return seterr(r->err, sizeof r->err, "%s: runlog_ranks: the file has no /ranks (created with meta.ranks = 0)", r->path), -1;
    const double *src[NRANKS] = {step_time_s, compute_s, comm_s, wait_s, data_s};
    for (int q = 0; q < R_DATA; q++)
        if (!src[q])
            return seterr(r->err, sizeof r->err, "%s: runlog_ranks: no values for /ranks/%s", r->path, ranks_cols[q].name), -1;
    int i = r->nrbuf++;
    r->rbuf_step[i] = step;
    for (int q = 0; q < NRANKS; q++)
        if (src[q]) memcpy(r->rbuf[q] + (size_t)i * (size_t)r->ranks, src[q], (size_t)r->ranks * sizeof(double));
        else for (int k = 0; k < r->ranks; k++) r->rbuf[q][(size_t)i * (size_t)r->ranks + (size_t)k] = NAN;
    if (r->nrbuf == RANKS_BUF && write_ranks(r) < 0) return stop(r);
    return publish_if_due(r);
}

/* Rows [0, rows) of method array index into the in-memory file (a growing one takes rows rows),
 * published with the next publication. */
static int array_write(runlog *r, int index, const void *data, long rows, int f64) {
    if (!r || r->failed) return -1;
    if (index < 0 || index >= r->n_arrays)
        return seterr(r->err, sizeof r->err, "%s: runlog_array: no fixed array %d (the file has %d)", r->path, index, r->n_arrays), -1;
    method_array *a = &r->arrays[index];
    if (!data && rows > 0)
        return seterr(r->err, sizeof r->err, "%s: runlog_array: no data for %s", r->path, a->obj), -1;
    if (a->f64 != f64)
        return seterr(r->err, sizeof r->err, "%s: runlog_array: %s holds %s", r->path, a->obj, f64 ? "int64" : "float64"), -1;
    if (rows < 0 || rows > a->rows || (!a->grows && rows != a->rows))
        return seterr(r->err, sizeof r->err, "%s: runlog_array: %ld rows for %s, which has %s%ld", r->path, rows, a->obj,
                      a->grows ? "at most " : "", a->rows), -1;
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)a->cols};
    hid_t ds = H5Dopen2(r->file, a->obj, H5P_DEFAULT);
    int rc = ds < 0 ? h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dopen2", a->obj) : 0;
    if (rc == 0 && a->grows && H5Dset_extent(ds, dims) < 0) rc = h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dset_extent", a->obj);
    if (rc == 0 && rows > 0 && H5Dwrite(ds, f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        rc = h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dwrite", a->obj);
    if (ds >= 0 && H5Dclose(ds) < 0 && rc == 0) rc = h5_fail(-1, r->err, sizeof r->err, r->path, "H5Dclose", a->obj);
    if (rc != 0) r->failed = 1;
    return rc;
}

static long spec_rows(const runlog *r, int index) { return r && index >= 0 && index < r->n_arrays ? r->arrays[index].rows : 0; }
int runlog_array(runlog *r, int index, const long long *data) { return array_write(r, index, data, spec_rows(r, index), 0); }
int runlog_array_rows(runlog *r, int index, const long long *data, long rows) { return array_write(r, index, data, rows, 0); }
int runlog_array_rows_f64(runlog *r, int index, const double *data, long rows) { return array_write(r, index, data, rows, 1); }

/* A root attribute of the end of the run: into the in-memory file now (replacing an earlier
 * value; status into its slot), its name into final_attributes at close. */
static int set_attr(runlog *r, const char *name, const char *s, double d) {
    if (!r) return -1;
    if (!name || !name[0] || strchr(name, '\n'))
        return seterr(r->err, sizeof r->err, "%s: root attribute with an empty name (or a newline in it)", r->path), -1;
    if (runlog_is_own_attr(name))
        return seterr(r->err, sizeof r->err, "%s: root attribute %s is written by runlog itself, not at the end of the run",
                      r->path, name), -1;
    int rc = !s ? h5_attr_write_err(r->file, "/", name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d, r->path, r->err, sizeof r->err)
             : strcmp(name, "status") == 0 ? runlog_status_write(r->file, s, r->path, r->err, sizeof r->err)
                                           : h5_attr_string_err(r->file, "/", name, s, r->path, r->err, sizeof r->err);
    size_t have = r->final_names ? strlen(r->final_names) : 0, len = strlen(name);
    for (const char *p = r->final_names; rc == 0 && p && *p; p += strcspn(p, "\n"), p += *p == '\n')
        if (strncmp(p, name, len) == 0 && (p[len] == '\n' || p[len] == '\0')) return 0; /* listed already */
    if (rc == 0) {
        r->final_names = realloc(r->final_names, have + len + 2);
        if (!r->final_names) DIE("out of memory for attribute %s", name);
        snprintf(r->final_names + have, len + 2, "%s%s", have ? "\n" : "", name);
    }
    return rc;
}

int runlog_set_attr_double(runlog *r, const char *name, double v) { return set_attr(r, name, NULL, v); }

int runlog_set_attr_string(runlog *r, const char *name, const char *v) { return set_attr(r, name, v ? v : "", 0); }

const char *runlog_error(const runlog *r) { return r ? r->err : "no run file"; }

int runlog_close(runlog *r) {
    if (!r) return 0;
    int reported = r->failed; /* an earlier failure was already reported by its caller */
    int rc = r->failed ? -1 : 0;
    if (rc == 0 && r->final_names &&
        h5_attr_string_err(r->file, "/", "final_attributes", r->final_names, r->path, r->err, sizeof r->err) < 0) rc = -1;
    if (rc == 0 && (write_buffers(r) < 0 || runlog_publish_now(r, 0, r->err, sizeof r->err) < 0)) rc = -1;
    if (rc != 0) {
        /* r is freed below, so nobody could ask runlog_error: say it here. */
        if (!reported) fprintf(stderr, "dsgd-run: error closing the run file: %s\n", r->err);
        runlog_status_in_place(r->path, r->fd, r->err);
    }
    runlog_free(r);
    return rc;
}

void runlog_library_version(char *buf, size_t n) {
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    snprintf(buf, n, "HDF5 %u.%u.%u", maj, min, rel);
}
