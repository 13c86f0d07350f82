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

#include "util/h5msg.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
    TRAIN_CHUNK = 1024, /* rows per chunk of a /train dataset */
    EVAL_CHUNK = 64,    /* rows per chunk of an /eval dataset */
    TRAIN_BUF = 1024,   /* /train rows buffered before an append to the in-memory file */
    RANKS_CHUNK = 256,  /* rows per chunk of a /ranks dataset (all meta.ranks columns in one chunk) */
    RANKS_BUF = 256,    /* /ranks rows buffered before an append */
    ARRAY_CHUNK = 1024, /* rows per chunk of a growing method array */
    MAX_RANKS = 1 << 20, /* most /ranks columns (bounds the buffer size computation) */
    PATHLEN = 4096,
    STATUS_LEN = 512,   /* bytes of the fixed-size status attribute, its terminating NUL included */
};
#define MEM_INCREMENT ((size_t)1 << 20) /* growth step of the in-memory file */
#define PUBLISH_S 5.0                   /* default meta.publish_s */
#define PUBLISH_SHARE 100.0             /* publish at most once per 100 times its cost */

/* ------------------------------------------------------------------------------------------ */
/* Errors.                                                                                     */

/* Fill err with "<path>: HDF5 <call> failed for <object>: <HDF5's messages>"; returns -1. */
static int h5fail(char *err, size_t errlen, const char *path, const char *call, const char *object) {
    char detail[800];
    h5_message(detail, sizeof detail);
    seterr(err, errlen, "%s: HDF5 %s failed for %s: %s", path, call, object, detail);
    return -1;
}

/* Fill err with "<path>: <what>: <strerror(errno)>"; returns -1. */
static int syserr(char *err, size_t errlen, const char *path, const char *what) {
    seterr(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* The run file.                                                                               */

enum { T_STEP, T_TIME, T_LOSS, T_ALPHA, NTRAIN };
enum { E_STEP, E_TIME, E_EPOCH, E_LOSS, E_TOP1, E_TOP5, NEVAL };

typedef struct {
    const char *name, *units, *description;
} colspec;

static const colspec train_cols[NTRAIN] = {
    {"step", "iterations", "global iterations completed (1-based)"},
    {"time_s", "s", "training wall clock since training began, evaluation time excluded"},
    {"loss", "nats", "cross-entropy loss, mean over the nodes' minibatches and over the steps since the previous row"},
    {"alpha", "1", "learning rate (step size) alpha used at this step"},
};

static const colspec eval_cols[NEVAL] = {
    {"step", "iterations", "global iterations completed when the model was evaluated"},
    {"time_s", "s", "training wall clock since training began, evaluation time excluded"},
    {"epoch", "epochs", "step / steps per epoch, with floor(training set size / m) steps per epoch"},
    {"loss", "nats", "cross-entropy loss, mean over the whole validation set"},
    {"top1_error", "fraction", "fraction of the validation set whose label is not the top-1 prediction"},
    {"top5_error", "fraction", "fraction of the validation set whose label is not among the top-5 predictions"},
};

enum { R_STEP_TIME, R_COMPUTE, R_COMM, R_WAIT, R_DATA, NRANKS };

static const colspec ranks_step_col = {"step", "iterations", "global iterations completed when the row was logged"};

/* The 2-D [row, meta.ranks] datasets of /ranks: column j is worker j. */
static const colspec ranks_cols[NRANKS] = {
    {"step_time_s", "s", "each worker's mean wall-clock seconds per step over the steps since the previous row"},
    {"compute_s", "s", "each worker's mean seconds per step spent computing over the steps since the previous row"},
    {"comm_s", "s", "each worker's mean seconds per step spent in communication calls over the steps since the previous row"},
    {"wait_s", "s", "each worker's mean seconds per step spent waiting for other ranks over the steps since the previous row"},
    {"data_s", "s", "each worker's mean seconds per step spent getting its minibatch (waiting for the decode threads, or "
                    "assembling it) over the steps since the previous row; NaN where not measured"},
};

/* Root attributes runlog writes itself: runlog_set_attr_* refuses them and runlog_resume never
 * removes them. final_attributes lists (one per line) the names runlog_close wrote from
 * runlog_set_attr_*, so that runlog_resume knows which attributes end a run. */
static const char *const own_attrs[] = {"method", "p", "b", "m", "seed", "iterations", "servers", "dsgd_version",
                                        "hdf5_version", "config", "command_line", "hostname", "created",
                                        "working_directory", "device", "resumes", "resumed_at", "final_attributes"};
/* The end-of-run attributes of the training code: removed by runlog_resume even from a file
 * without final_attributes. */
static const char *const usual_final_attrs[] = {"status", "train_time_s", "images_per_s", "steps_completed"};

static int is_own_attr(const char *name) {
    for (size_t i = 0; i < sizeof own_attrs / sizeof *own_attrs; i++)
        if (strcmp(name, own_attrs[i]) == 0) return 1;
    return 0;
}

/* One method array of meta.arrays: fixed shape, or growing rows (spec.grows). */
typedef struct {
    char *obj; /* "/" + spec name */
    int f64;   /* float64, NaN-filled (else int64, zero-filled) */
    int grows; /* unlimited rows: as many as the last write gave */
    long rows, cols;
} method_array;

struct runlog {
    hid_t file;              /* the working file, in memory (core driver, no backing store): the
                                only HDF5 object held open; datasets are opened by name as needed */
    hsize_t n_train, n_eval; /* rows in the in-memory file */
    int nbuf;                /* rows waiting in the buffer */
    int64_t buf_step[TRAIN_BUF];
    double buf_time[TRAIN_BUF], buf_loss[TRAIN_BUF], buf_alpha[TRAIN_BUF];
    int has_eval_local;
    hsize_t n_eval_local;
    int ranks;               /* columns of /ranks; 0: no /ranks group */
    hsize_t n_ranks;         /* /ranks rows in the in-memory file */
    int nrbuf;               /* /ranks rows waiting in the buffers */
    int64_t rbuf_step[RANKS_BUF];
    double *rbuf[NRANKS];    /* [RANKS_BUF][ranks] each, row-major, in one allocation at create */
    method_array *arrays;
    int n_arrays;
    char *final_names;       /* names given to runlog_set_attr_*, one per line (final_attributes) */
    int failed;       /* a write or publication failed: the file is no longer extended */
    int fd;           /* -1, or open on the file this run published last: its identity, kept from
                         reuse while open, notices another run that replaced it (overwrite) */
    double publish_s; /* meta.publish_s */
    double last_publish, publish_cost; /* monotonic time of the last publication, its seconds */
    unsigned char *image; /* the file image buffer of the last publication */
    size_t image_cap;
    char path[PATHLEN];
    char err[ERRLEN];
};

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Write a scalar attribute of file type ftype from buf (memory type mtype) on obj. */
static int attr_write(hid_t obj, const char *objname, const char *name, hid_t ftype, hid_t mtype,
                      const void *buf, const char *path, char *err, size_t errlen) {
    char what[300];
    snprintf(what, sizeof what, "attribute %s of %s", name, objname);
    hid_t space = H5Screate(H5S_SCALAR);
    if (space < 0) return h5fail(err, errlen, path, "H5Screate", what);
    htri_t exists = H5Aexists(obj, name);
    if (exists < 0) { H5Sclose(space); return h5fail(err, errlen, path, "H5Aexists", what); }
    if (exists > 0 && H5Adelete(obj, name) < 0) { H5Sclose(space); return h5fail(err, errlen, path, "H5Adelete", what); }
    hid_t a = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(space);
    if (a < 0) return h5fail(err, errlen, path, "H5Acreate2", what);
    if (H5Awrite(a, mtype, buf) < 0) { H5Aclose(a); return h5fail(err, errlen, path, "H5Awrite", what); }
    if (H5Aclose(a) < 0) return h5fail(err, errlen, path, "H5Aclose", what);
    return 0;
}

/* Variable-length UTF-8 string attribute (h5py reads it as str). NULL is written as "". */
static int attr_string(hid_t obj, const char *objname, const char *name, const char *v, const char *path,
                       char *err, size_t errlen) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return h5fail(err, errlen, path, "H5Tcopy", "string type");
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return h5fail(err, errlen, path, "H5Tset_size/H5Tset_cset", "string type");
    }
    const char *s = v ? v : "";
    int rc = attr_write(obj, objname, name, t, t, &s, path, err, errlen);
    H5Tclose(t);
    return rc;
}

/* A chunked extendible dataset of 0 rows (parent groups created) with its units and description
 * attributes: 1-D when cols == 0, else 2-D [rows, cols] with cols fixed, chunks of chunk rows by
 * all cols and a `columns` attribute ("worker rank 0..cols-1"). */
static int make_column(hid_t f, const char *gname, const colspec *c, hid_t ftype, hsize_t chunk, hsize_t cols,
                       const char *path, char *err, size_t errlen) {
    char obj[64];
    snprintf(obj, sizeof obj, "%s/%s", gname, c->name);
    int rank = cols ? 2 : 1;
    hsize_t dims[2] = {0, cols}, maxdims[2] = {H5S_UNLIMITED, cols}, cdims[2] = {chunk, cols};
    hid_t space = H5Screate_simple(rank, dims, maxdims);
    if (space < 0) return h5fail(err, errlen, path, "H5Screate_simple", obj);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t ds = H5I_INVALID_HID;
    if (dcpl < 0 || lcpl < 0) h5fail(err, errlen, path, "H5Pcreate", obj);
    else if (H5Pset_create_intermediate_group(lcpl, 1) < 0) h5fail(err, errlen, path, "H5Pset_create_intermediate_group", obj);
    else if (H5Pset_chunk(dcpl, rank, cdims) < 0) h5fail(err, errlen, path, "H5Pset_chunk", obj);
    else if (H5Pset_obj_track_times(dcpl, 0) < 0) h5fail(err, errlen, path, "H5Pset_obj_track_times", obj);
    else if ((ds = H5Dcreate2(f, obj, ftype, space, lcpl, dcpl, H5P_DEFAULT)) < 0)
        h5fail(err, errlen, path, "H5Dcreate2", obj);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Sclose(space);
    if (ds < 0) return -1;
    char columns[64];
    snprintf(columns, sizeof columns, "worker rank 0..%llu", (unsigned long long)cols - 1);
    int rc = attr_string(ds, obj, "units", c->units, path, err, errlen) < 0 ||
             attr_string(ds, obj, "description", c->description, path, err, errlen) < 0 ||
             (cols && attr_string(ds, obj, "columns", columns, path, err, errlen) < 0) ? -1 : 0;
    if (H5Dclose(ds) < 0 && rc == 0) rc = h5fail(err, errlen, path, "H5Dclose", obj);
    return rc;
}

/* Append n rows from buf (memory type mtype, row-major) to dataset obj of the in-memory file,
 * which holds n0 rows: a 1-D dataset when cols == 0, else a 2-D one of cols columns. */
static int append(runlog *r, const char *obj, hid_t mtype, hsize_t n0, hsize_t n, hsize_t cols, const void *buf) {
    int rank = cols ? 2 : 1;
    hsize_t total[2] = {n0 + n, cols}, start[2] = {n0, 0}, count[2] = {n, cols};
    hid_t ds = H5Dopen2(r->file, obj, H5P_DEFAULT);
    if (ds < 0) return h5fail(r->err, sizeof r->err, r->path, "H5Dopen2", obj);
    if (H5Dset_extent(ds, total) < 0) { H5Dclose(ds); return h5fail(r->err, sizeof r->err, r->path, "H5Dset_extent", obj); }
    hid_t fspace = H5Dget_space(ds), mspace = H5Screate_simple(rank, count, NULL);
    int rc = 0;
    if (fspace < 0 || mspace < 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dget_space/H5Screate_simple", obj);
    else if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
        rc = h5fail(r->err, sizeof r->err, r->path, "H5Sselect_hyperslab", obj);
    else if (H5Dwrite(ds, mtype, mspace, fspace, H5P_DEFAULT, buf) < 0)
        rc = h5fail(r->err, sizeof r->err, r->path, "H5Dwrite", obj);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (H5Dclose(ds) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", obj);
    return rc;
}

/* Append the buffered /train rows. */
static int write_train(runlog *r) {
    if (r->nbuf == 0) return 0;
    const void *cols[NTRAIN] = {r->buf_step, r->buf_time, r->buf_loss, r->buf_alpha};
    for (int i = 0; i < NTRAIN; i++) {
        char obj[64];
        snprintf(obj, sizeof obj, "/train/%s", train_cols[i].name);
        hid_t mtype = i == T_STEP ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
        if (append(r, obj, mtype, r->n_train, (hsize_t)r->nbuf, 0, cols[i]) < 0) return -1;
    }
    r->n_train += (hsize_t)r->nbuf;
    r->nbuf = 0;
    return 0;
}

/* Append the buffered /ranks rows. */
static int write_ranks(runlog *r) {
    if (r->nrbuf == 0) return 0;
    if (append(r, "/ranks/step", H5T_NATIVE_INT64, r->n_ranks, (hsize_t)r->nrbuf, 0, r->rbuf_step) < 0)
        return -1;
    for (int q = 0; q < NRANKS; q++) {
        char obj[64];
        snprintf(obj, sizeof obj, "/ranks/%s", ranks_cols[q].name);
        if (append(r, obj, H5T_NATIVE_DOUBLE, r->n_ranks, (hsize_t)r->nrbuf, (hsize_t)r->ranks, r->rbuf[q]) < 0)
            return -1;
    }
    r->n_ranks += (hsize_t)r->nrbuf;
    r->nrbuf = 0;
    return 0;
}

/* Write the buffered /train and /ranks rows (at an evaluation, at close). */
static int write_buffers(runlog *r) { return write_train(r) < 0 || write_ranks(r) < 0 ? -1 : 0; }

/* Append one row to the NEVAL columns of group gname (/eval or /eval_local), which hold n rows. */
static int append_eval_row(runlog *r, const char *gname, hsize_t n, long step, double time_s, double epoch,
                           double loss, double top1_error, double top5_error) {
    int64_t s = step;
    const double v[NEVAL] = {0, time_s, epoch, loss, top1_error, top5_error};
    for (int i = 0; i < NEVAL; i++) {
        char obj[64];
        snprintf(obj, sizeof obj, "%s/%s", gname, eval_cols[i].name);
        int rc = i == E_STEP ? append(r, obj, H5T_NATIVE_INT64, n, 1, 0, &s) : append(r, obj, H5T_NATIVE_DOUBLE, n, 1, 0, &v[i]);
        if (rc < 0) return -1;
    }
    return 0;
}

/* The type of the status attribute: a fixed-size UTF-8 string of STATUS_LEN bytes, NUL-terminated. */
static hid_t status_type(void) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, STATUS_LEN) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) H5Tclose(t), t = H5I_INVALID_HID;
    return t;
}

/* Write v (cut to STATUS_LEN - 1 bytes at a UTF-8 character boundary) into root attribute
 * status of f: overwritten in place when it is already the fixed-size slot, else (a file of an
 * earlier dsgd-run, or a new file) created as one. */
static int status_write(hid_t f, const char *v, const char *path, char *err, size_t errlen) {
    char buf[STATUS_LEN] = {0};
    size_t n = strlen(v);
    if (n > STATUS_LEN - 1) {
        n = STATUS_LEN - 1;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80) n--; /* v[n] continues a character */
    }
    memcpy(buf, v, n);
    hid_t t = status_type();
    if (t < 0) return h5fail(err, errlen, path, "H5Tcopy/H5Tset_size", "attribute status of /");
    int rc = 0;
    hid_t a = H5I_INVALID_HID;
    htri_t e = H5Aexists(f, "status");
    if (e > 0) { /* the slot, or something else to replace */
        a = H5Aopen(f, "status", H5P_DEFAULT);
        hid_t ft = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
        htri_t same = ft >= 0 ? H5Tequal(ft, t) : -1;
        if (ft >= 0) H5Tclose(ft);
        if (same <= 0) {
            if (a >= 0) H5Aclose(a), a = H5I_INVALID_HID;
            if (H5Adelete(f, "status") < 0) rc = h5fail(err, errlen, path, "H5Adelete", "attribute status of /");
            e = 0;
        }
    } else if (e < 0) rc = h5fail(err, errlen, path, "H5Aexists", "attribute status of /");
    if (rc == 0 && e == 0) {
        hid_t space = H5Screate(H5S_SCALAR);
        if (space < 0) rc = h5fail(err, errlen, path, "H5Screate", "attribute status of /");
        else if ((a = H5Acreate2(f, "status", t, space, H5P_DEFAULT, H5P_DEFAULT)) < 0)
            rc = h5fail(err, errlen, path, "H5Acreate2", "attribute status of /");
        if (space >= 0) H5Sclose(space);
    }
    if (rc == 0 && H5Awrite(a, t, buf) < 0) rc = h5fail(err, errlen, path, "H5Awrite", "attribute status of /");
    if (a >= 0 && H5Aclose(a) < 0 && rc == 0) rc = h5fail(err, errlen, path, "H5Aclose", "attribute status of /");
    H5Tclose(t);
    return rc;
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

/* A hidden name next to path, unique to this process and moment: <dir>/.<base>.<tag>.<pid>.<ns>. */
static int temp_name(char *out, size_t outlen, const char *path, const char *tag) {
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int n = snprintf(out, outlen, "%.*s.%s.%s.%ld.%09ld", dirlen, path, base, tag, (long)getpid(), (long)ts.tv_nsec);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

static const char *already_exists_fmt = "%s already exists; use --set overwrite=true to replace it or choose another output";

/* Is the file at r->path still the one this run published last? 1 yes, 0 no (err filled). */
static int still_ours(const runlog *r, char *err, size_t errlen) {
    struct stat sb, mine;
    if (r->fd >= 0 && stat(r->path, &sb) == 0 && fstat(r->fd, &mine) == 0 && sb.st_dev == mine.st_dev && sb.st_ino == mine.st_ino)
        return 1;
    seterr(err, errlen, "%s was replaced by another run while this one was writing it "
           "(two runs with the same output and overwrite = true?): this run's results are lost", r->path);
    return 0;
}

/* Write n bytes of buf to a new file tmp and fsync it. Returns its descriptor, or -1. */
static int write_new_file(const char *tmp, const void *buf, size_t n, char *err, size_t errlen) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return syserr(err, errlen, tmp, "cannot create the new run file");
    const unsigned char *p = buf;
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0;) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) rc = syserr(err, errlen, tmp, "cannot write the new run file");
        else off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) rc = syserr(err, errlen, tmp, "cannot fsync the new run file");
    if (rc != 0) close(fd);
    return rc == 0 ? fd : -1;
}

/* Give tmp the name path for the first time: atomically replace with overwrite, else link()
 * (fails if path exists, so an earlier run is never replaced), else, where the file system has
 * no hard links, check-then-rename. */
static int first_name(const char *tmp, const char *path, int overwrite, char *err, size_t errlen) {
    if (overwrite) return rename(tmp, path) == 0 ? 0 : syserr(err, errlen, path, "cannot rename the new run file into place");
    if (link(tmp, path) == 0) {
        unlink(tmp); /* published; a leftover hidden name would be harmless */
        return 0;
    }
    if (errno == EEXIST) return seterr(err, errlen, already_exists_fmt, path), -1;
    if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != ENOSYS && errno != EMLINK)
        return syserr(err, errlen, path, "cannot link the new run file into place");
    struct stat st;
    if (lstat(path, &st) == 0) return seterr(err, errlen, already_exists_fmt, path), -1;
    return rename(tmp, path) == 0 ? 0 : syserr(err, errlen, path, "cannot rename the new run file into place");
}

/* Publish the in-memory file at r->path (part 2 of the header comment): its image into a hidden
 * temporary beside it, fsync, then rename() over the file this run published last (checked to be
 * still ours), or first_name() for the first publication. */
static int publish(runlog *r, int overwrite, char *err, size_t errlen) {
    double t0 = mono_now();
    if (H5Fflush(r->file, H5F_SCOPE_LOCAL) < 0) return h5fail(err, errlen, r->path, "H5Fflush", "the in-memory file");
    ssize_t n = H5Fget_file_image(r->file, NULL, 0);
    if (n <= 0) return h5fail(err, errlen, r->path, "H5Fget_file_image", "the in-memory file");
    if ((size_t)n > r->image_cap) {
        free(r->image);
        r->image_cap = (size_t)n + (size_t)n / 4;
        r->image = xmalloc(r->image_cap);
    }
    if (H5Fget_file_image(r->file, r->image, (size_t)n) != n) return h5fail(err, errlen, r->path, "H5Fget_file_image", "the in-memory file");
    char tmp[PATHLEN];
    if (temp_name(tmp, sizeof tmp, r->path, "new") < 0) return seterr(err, errlen, "output path too long: %s", r->path), -1;
    int fd = write_new_file(tmp, r->image, (size_t)n, err, errlen), rc = fd < 0 ? -1 : 0;
    if (rc == 0 && r->fd < 0) rc = first_name(tmp, r->path, overwrite, err, errlen);
    else if (rc == 0 && !still_ours(r, err, errlen)) rc = -1;
    else if (rc == 0 && rename(tmp, r->path) != 0) rc = syserr(err, errlen, r->path, "cannot rename the new run file into place");
    if (rc != 0) {
        if (fd >= 0) close(fd);
        unlink(tmp); /* frees its space too (a full disk) */
        return -1;
    }
    if (r->fd >= 0) close(r->fd); /* the file just replaced */
    r->fd = fd;
    r->last_publish = mono_now();
    r->publish_cost = r->last_publish - t0;
    return 0;
}

/* Write the buffered rows into the in-memory file and publish it; on failure the file is no
 * longer extended (r->failed). */
static int publish_all(runlog *r) {
    if (r->failed) return -1;
    if (write_buffers(r) < 0 || publish(r, 0, r->err, sizeof r->err) < 0) {
        r->failed = 1;
        return -1;
    }
    return 0;
}

/* Publish if the wall-clock bound has passed (part 3 of the header comment). */
static int publish_if_due(runlog *r) {
    double every = r->publish_s > PUBLISH_SHARE * r->publish_cost ? r->publish_s : PUBLISH_SHARE * r->publish_cost;
    return mono_now() - r->last_publish >= every ? publish_all(r) : 0;
}

/* Free r, closing the in-memory file (nothing of it is on disk: errors do not matter). */
static void free_runlog(runlog *r) {
    if (r->file >= 0) H5Fclose(r->file);
    H5Eclear2(H5E_DEFAULT);
    free(r->final_names);
    for (int i = 0; i < r->n_arrays; i++) free(r->arrays[i].obj);
    free(r->arrays);
    free(r->rbuf[0]); /* the one allocation behind every rbuf[q] */
    free(r->image);
    if (r->fd >= 0) close(r->fd);
    free(r);
}

/* A new runlog with every handle invalid: the /ranks buffers and the method-array table are
 * allocated here, once (meta already checked by check_meta). */
static runlog *new_runlog(const char *path, const runlog_meta *meta) {
    runlog *r = xcalloc(1, sizeof *r);
    r->file = H5I_INVALID_HID;
    r->fd = -1;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->has_eval_local = meta->eval_local != 0;
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
            m->f64 = a->float64 != 0;
            m->grows = a->grows != 0;
            m->rows = a->rows;
            m->cols = a->cols;
            m->obj = xmalloc(strlen(a->name) + 2);
            m->obj[0] = '/';
            strcpy(m->obj + 1, a->name);
        }
    }
    return r;
}

/* Check the parts of meta that shape the layout; err filled and -1 if one is unusable. */
static int check_meta(const runlog_meta *meta, const char *fn, const char *path, char *err, size_t errlen) {
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
    int nd = a->cols ? 2 : 1;
    hsize_t dims[2] = {a->grows ? 0 : (hsize_t)a->rows, (hsize_t)a->cols}, maxd[2] = {H5S_UNLIMITED, (hsize_t)a->cols};
    hsize_t chunk[2] = {ARRAY_CHUNK, (hsize_t)a->cols};
    hid_t space = H5Screate_simple(nd, dims, a->grows ? maxd : NULL);
    if (space < 0) return h5fail(err, errlen, path, "H5Screate_simple", obj);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t ds = H5I_INVALID_HID;
    const int64_t zero = 0;
    const double nan_fill = NAN;
    if (dcpl < 0 || lcpl < 0) h5fail(err, errlen, path, "H5Pcreate", obj);
    else if (H5Pset_create_intermediate_group(lcpl, 1) < 0) h5fail(err, errlen, path, "H5Pset_create_intermediate_group", obj);
    else if (a->grows ? H5Pset_chunk(dcpl, nd, chunk) < 0 : H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0)
        h5fail(err, errlen, path, a->grows ? "H5Pset_chunk" : "H5Pset_layout", obj);
    else if (H5Pset_fill_value(dcpl, a->float64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64, a->float64 ? (const void *)&nan_fill : (const void *)&zero) < 0)
        h5fail(err, errlen, path, "H5Pset_fill_value", obj);
    else if (H5Pset_obj_track_times(dcpl, 0) < 0) h5fail(err, errlen, path, "H5Pset_obj_track_times", obj);
    else if ((ds = H5Dcreate2(f, a->name, a->float64 ? H5T_IEEE_F64LE : H5T_STD_I64LE, space, lcpl, dcpl, H5P_DEFAULT)) < 0)
        h5fail(err, errlen, path, "H5Dcreate2", obj);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Sclose(space);
    if (ds < 0) return -1;
    int rc = attr_string(ds, obj, "units", a->units, path, err, errlen) < 0 ||
             attr_string(ds, obj, "description", a->description, path, err, errlen) < 0 ? -1 : 0;
    if (H5Dclose(ds) < 0 && rc == 0) rc = h5fail(err, errlen, path, "H5Dclose", obj);
    return rc;
}

/* The current UTC time, ISO-8601 ("2025-01-31T12:00:00Z"), into buf; -1 if it cannot be read. */
static int utc_now(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    if (now == (time_t)-1 || !gmtime_r(&now, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return -1;
    return 0;
}

/* A file access property list for the in-memory working file (part 1 of the header comment);
 * for a new file (create), in the 1.8 file format (superblock version 0: see the header comment
 * on the format; a file opened keeps its own and must be checked). */
static hid_t memory_fapl(int create, const char *path, char *err, size_t errlen) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return h5fail(err, errlen, path, "H5Pcreate", "file access properties");
    if (H5Pset_fapl_core(fapl, MEM_INCREMENT, 0) < 0 ||
        (create && H5Pset_libver_bounds(fapl, H5F_LIBVER_EARLIEST, H5F_LIBVER_V18) < 0)) {
        H5Pclose(fapl);
        return h5fail(err, errlen, path, "H5Pset_fapl_core/H5Pset_libver_bounds", "file access properties");
    }
    return fapl;
}

/* Root attributes (status as its empty fixed-size slot), groups and empty datasets of a new file. */
static int build_layout(runlog *r, hid_t f, const runlog_meta *meta, const char *path, char *err, size_t errlen) {
    unsigned maj, min, rel;
    if (H5get_libversion(&maj, &min, &rel) < 0) return h5fail(err, errlen, path, "H5get_libversion", "/");
    char h5ver[32], created[32], host[256];
    snprintf(h5ver, sizeof h5ver, "%u.%u.%u", maj, min, rel);
    if (utc_now(created, sizeof created) < 0) return syserr(err, errlen, path, "cannot read the UTC time");
    const char *hostname = meta->hostname;
    if (!hostname) {
        if (gethostname(host, sizeof host) != 0) return syserr(err, errlen, path, "gethostname");
        host[sizeof host - 1] = '\0';
        hostname = host;
    }
    int32_t p = meta->p, b = meta->b, m = meta->m;
    uint64_t seed = meta->seed;
    int64_t iterations = meta->iterations;
    int32_t servers = meta->servers;
    if (attr_string(f, "/", "method", meta->method, path, err, errlen) < 0 ||
        attr_write(f, "/", "p", H5T_STD_I32LE, H5T_NATIVE_INT32, &p, path, err, errlen) < 0 ||
        attr_write(f, "/", "b", H5T_STD_I32LE, H5T_NATIVE_INT32, &b, path, err, errlen) < 0 ||
        attr_write(f, "/", "m", H5T_STD_I32LE, H5T_NATIVE_INT32, &m, path, err, errlen) < 0 ||
        attr_write(f, "/", "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed, path, err, errlen) < 0 ||
        attr_write(f, "/", "iterations", H5T_STD_I64LE, H5T_NATIVE_INT64, &iterations, path, err, errlen) < 0 ||
        attr_write(f, "/", "servers", H5T_STD_I32LE, H5T_NATIVE_INT32, &servers, path, err, errlen) < 0 ||
        attr_string(f, "/", "dsgd_version", DSGD_VERSION, path, err, errlen) < 0 ||
        attr_string(f, "/", "hdf5_version", h5ver, path, err, errlen) < 0 ||
        attr_string(f, "/", "config", meta->config_text, path, err, errlen) < 0 ||
        attr_string(f, "/", "command_line", meta->command_line, path, err, errlen) < 0 ||
        attr_string(f, "/", "hostname", hostname, path, err, errlen) < 0 ||
        attr_string(f, "/", "created", created, path, err, errlen) < 0 || status_write(f, "", path, err, errlen) < 0)
        return -1;
    /* Relative paths in config and command_line are relative to this directory. */
    char cwd[PATHLEN];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "(unknown: %s)", strerror(errno));
    if (attr_string(f, "/", "working_directory", cwd, path, err, errlen) < 0) return -1;
    if (meta->device && attr_string(f, "/", "device", meta->device, path, err, errlen) < 0) return -1;
    for (int i = 0; i < meta->n_attrs; i++) {
        const runlog_attr *a = &meta->attrs[i];
        if (is_own_attr(a->name) || strcmp(a->name, "status") == 0)
            return seterr(err, errlen, "%s: attribute %s is one runlog writes itself", path, a->name), -1;
        if (a->s ? attr_string(f, "/", a->name, a->s, path, err, errlen) < 0
                 : attr_write(f, "/", a->name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &a->i, path, err, errlen) < 0)
            return -1;
    }

    /* /train, /eval and, if asked for, /eval_local (the columns of /eval; column 0 is step in all). */
    for (int g = 0; g < 3; g++) {
        if (g == 2 && !r->has_eval_local) break;
        const char *gname = g == 0 ? "/train" : g == 1 ? "/eval" : "/eval_local";
        for (int i = 0; i < (g == 0 ? NTRAIN : NEVAL); i++)
            if (make_column(f, gname, g == 0 ? &train_cols[i] : &eval_cols[i], i == 0 ? H5T_STD_I64LE : H5T_IEEE_F64LE,
                            g == 0 ? TRAIN_CHUNK : EVAL_CHUNK, 0, path, err, errlen) < 0)
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

runlog *runlog_create(const char *path, int overwrite, const runlog_meta *meta, char *err, size_t errlen) {
    if (!path || !path[0] || !meta) {
        seterr(err, errlen, "runlog_create: %s", !meta ? "no run metadata" : "empty output path");
        return NULL;
    }
    if (strlen(path) >= PATHLEN - 64) {
        seterr(err, errlen, "output path too long (%zu characters): %s", strlen(path), path);
        return NULL;
    }
    /* Our messages replace HDF5's stack dumps (see the header comment). */
    if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) {
        seterr(err, errlen, "%s: HDF5 H5Eset_auto2 failed", path);
        return NULL;
    }
    struct stat st;
    if (!overwrite && lstat(path, &st) == 0) {
        seterr(err, errlen, already_exists_fmt, path);
        return NULL;
    }
    if (check_meta(meta, "runlog_create", path, err, errlen) < 0) return NULL;
    if (make_parents(path, err, errlen) < 0) return NULL;

    runlog *r = new_runlog(path, meta);
    hid_t fapl = memory_fapl(1, path, err, errlen);
    if (fapl < 0) {
        free_runlog(r);
        return NULL;
    }
    /* In memory only: HDF5 never creates this name (no backing store); unique, as two runlogs
     * of one process may share an output (overwrite = true). */
    char name[PATHLEN];
    if (temp_name(name, sizeof name, path, "mem") == 0) r->file = H5Fcreate(name, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (r->file < 0) h5fail(err, errlen, path, "H5Fcreate", "the in-memory file");
    if (r->file < 0 || build_layout(r, r->file, meta, path, err, errlen) < 0 || publish(r, overwrite, err, errlen) < 0) {
        free_runlog(r);
        return NULL;
    }
    return r;
}

int runlog_train(runlog *r, long step, double time_s, double loss, double alpha) {
    if (!r || r->failed) return -1;
    int i = r->nbuf++;
    r->buf_step[i] = step;
    r->buf_time[i] = time_s;
    r->buf_loss[i] = loss;
    r->buf_alpha[i] = alpha;
    if (r->nbuf == TRAIN_BUF && write_train(r) < 0) {
        r->failed = 1;
        return -1;
    }
    return publish_if_due(r);
}

int runlog_eval(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                double top5_error) {
    if (!r || r->failed) return -1;
    if (append_eval_row(r, "/eval", r->n_eval, step, time_s, epoch, loss, top1_error, top5_error) < 0) {
        r->failed = 1;
        return -1;
    }
    r->n_eval++;
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

/* Appended to the in-memory file at once (one row per evaluation), published with the next
 * publication. */
int runlog_eval_local(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                      double top5_error) {
    if (!r || r->failed) return -1;
    if (!r->has_eval_local) {
        seterr(r->err, sizeof r->err, "%s: runlog_eval_local: the file has no /eval_local (created without meta.eval_local)", r->path);
        return -1;
    }
    if (append_eval_row(r, "/eval_local", r->n_eval_local, step, time_s, epoch, loss, top1_error, top5_error) < 0) {
        r->failed = 1;
        return -1;
    }
    r->n_eval_local++;
    return 0;
}

int runlog_ranks(runlog *r, long step, const double *step_time_s, const double *compute_s, const double *comm_s,
                 const double *wait_s, const double *data_s) {
    if (!r || r->failed) return -1;
    if (r->ranks == 0) {
        seterr(r->err, sizeof r->err, "%s: runlog_ranks: the file has no /ranks (created with meta.ranks = 0)", r->path);
        return -1;
    }
    const double *src[NRANKS] = {step_time_s, compute_s, comm_s, wait_s, data_s};
    for (int q = 0; q < R_DATA; q++)
        if (!src[q]) {
            seterr(r->err, sizeof r->err, "%s: runlog_ranks: no values for /ranks/%s", r->path, ranks_cols[q].name);
            return -1;
        }
    int i = r->nrbuf++;
    r->rbuf_step[i] = step;
    for (int q = 0; q < NRANKS; q++)
        if (src[q]) memcpy(r->rbuf[q] + (size_t)i * (size_t)r->ranks, src[q], (size_t)r->ranks * sizeof(double));
        else for (int k = 0; k < r->ranks; k++) r->rbuf[q][(size_t)i * (size_t)r->ranks + (size_t)k] = NAN;
    if (r->nrbuf == RANKS_BUF && write_ranks(r) < 0) {
        r->failed = 1;
        return -1;
    }
    return publish_if_due(r);
}

/* Rows [0, rows) of method array index into the in-memory file (a growing one takes rows rows),
 * published with the next publication. */
static int array_write(runlog *r, int index, const void *data, long rows, int f64) {
    if (!r || r->failed) return -1;
    if (index < 0 || index >= r->n_arrays) {
        seterr(r->err, sizeof r->err, "%s: runlog_array: no fixed array %d (the file has %d)", r->path, index, r->n_arrays);
        return -1;
    }
    method_array *a = &r->arrays[index];
    if (!data && rows > 0) {
        seterr(r->err, sizeof r->err, "%s: runlog_array: no data for %s", r->path, a->obj);
        return -1;
    }
    if (a->f64 != f64) {
        seterr(r->err, sizeof r->err, "%s: runlog_array: %s holds %s", r->path, a->obj, f64 ? "int64" : "float64");
        return -1;
    }
    if (rows < 0 || rows > a->rows || (!a->grows && rows != a->rows)) {
        seterr(r->err, sizeof r->err, "%s: runlog_array: %ld rows for %s, which has %s%ld", r->path, rows, a->obj,
               a->grows ? "at most " : "", a->rows);
        return -1;
    }
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)a->cols};
    hid_t ds = H5Dopen2(r->file, a->obj, H5P_DEFAULT);
    int rc = ds < 0 ? h5fail(r->err, sizeof r->err, r->path, "H5Dopen2", a->obj) : 0;
    if (rc == 0 && a->grows && H5Dset_extent(ds, dims) < 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dset_extent", a->obj);
    if (rc == 0 && rows > 0 && H5Dwrite(ds, f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        rc = h5fail(r->err, sizeof r->err, r->path, "H5Dwrite", a->obj);
    if (ds >= 0 && H5Dclose(ds) < 0 && rc == 0) rc = h5fail(r->err, sizeof r->err, r->path, "H5Dclose", a->obj);
    if (rc != 0) r->failed = 1;
    return rc;
}

static long spec_rows(const runlog *r, int index) { return r && index >= 0 && index < r->n_arrays ? r->arrays[index].rows : 0; }
int runlog_array(runlog *r, int index, const long long *data) { return array_write(r, index, data, spec_rows(r, index), 0); }
int runlog_array_f64(runlog *r, int index, const double *data) { return array_write(r, index, data, spec_rows(r, index), 1); }
int runlog_array_rows(runlog *r, int index, const long long *data, long rows) { return array_write(r, index, data, rows, 0); }
int runlog_array_rows_f64(runlog *r, int index, const double *data, long rows) { return array_write(r, index, data, rows, 1); }

/* A root attribute of the end of the run: into the in-memory file now (replacing an earlier
 * value; status into its slot), its name into final_attributes at close. */
static int set_attr(runlog *r, const char *name, const char *s, double d) {
    if (!r) return -1;
    if (!name || !name[0] || strchr(name, '\n')) {
        seterr(r->err, sizeof r->err, "%s: root attribute with an empty name (or a newline in it)", r->path);
        return -1;
    }
    if (is_own_attr(name)) {
        seterr(r->err, sizeof r->err, "%s: root attribute %s is written by runlog itself, not at the end of the run", r->path, name);
        return -1;
    }
    int rc = !s ? attr_write(r->file, "/", name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d, r->path, r->err, sizeof r->err)
             : strcmp(name, "status") == 0 ? status_write(r->file, s, r->path, r->err, sizeof r->err)
                                           : attr_string(r->file, "/", name, s, r->path, r->err, sizeof r->err);
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

/* The run could not publish its file: write "stopped: run-file write error: <why>" into the
 * status slot of the file it published last, in place (part 5 of the header comment). Returns 0
 * or -1 (the reason on stderr). */
static int status_in_place(runlog *r) {
    char msg[ERRLEN + 64], err[ERRLEN];
    snprintf(msg, sizeof msg, "stopped: run-file write error: %s", r->err);
    if (!still_ours(r, err, sizeof err)) return -1;
    hid_t f = H5Fopen(r->path, H5F_ACC_RDWR, H5P_DEFAULT);
    int rc = f < 0 ? h5fail(err, sizeof err, r->path, "H5Fopen", "the published run file") : 0;
    if (rc == 0) rc = status_write(f, msg, r->path, err, sizeof err);
    if (f >= 0 && H5Fclose(f) < 0 && rc == 0) rc = h5fail(err, sizeof err, r->path, "H5Fclose", "the published run file");
    H5Eclear2(H5E_DEFAULT);
    if (rc != 0) fprintf(stderr, "dsgd-run: cannot record the status in %s either: %s\n", r->path, err);
    return rc;
}

int runlog_close(runlog *r) {
    if (!r) return 0;
    int reported = r->failed; /* an earlier failure was already reported by its caller */
    int rc = r->failed ? -1 : 0;
    if (rc == 0 && r->final_names &&
        attr_string(r->file, "/", "final_attributes", r->final_names, r->path, r->err, sizeof r->err) < 0) rc = -1;
    if (rc == 0 && (write_buffers(r) < 0 || publish(r, 0, r->err, sizeof r->err) < 0)) rc = -1;
    if (rc != 0) {
        /* r is freed below, so nobody could ask runlog_error: say it here. */
        if (!reported) fprintf(stderr, "dsgd-run: error closing the run file: %s\n", r->err);
        status_in_place(r);
    }
    free_runlog(r);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Resume from a checkpoint (part 6 of the header comment).                                    */

/* err = "cannot resume <path>: <why>"; returns -1. */
static int refuse(char *err, size_t errlen, const char *path, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int refuse(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    char why[ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    seterr(err, errlen, "cannot resume %s: %s", path, why);
    return -1;
}

/* Does name (an absolute path in the file) exist? Checked component by component, as
 * H5Lexists requires. 1 yes, 0 no, -1 HDF5 failure. */
static htri_t obj_exists(hid_t f, const char *name) {
    char buf[PATHLEN];
    snprintf(buf, sizeof buf, "%s", name);
    for (char *p = buf + 1;;) {
        char *slash = strchr(p, '/');
        if (slash) *slash = '\0';
        htri_t e = H5Lexists(f, buf, H5P_DEFAULT);
        if (e <= 0 || !slash) return e;
        *slash = '/';
        p = slash + 1;
    }
}

/* Root attribute name of f, which must exist and be of class cls (its file type's class), else
 * the file is not one of ours. Returns the open attribute or -1 (err filled). */
static hid_t open_root_attr(hid_t f, const char *name, H5T_class_t cls, const char *path, char *err, size_t errlen) {
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    htri_t e = H5Aexists(f, name);
    if (e < 0) return h5fail(err, errlen, path, "H5Aexists", what);
    if (e == 0) return refuse(err, errlen, path, "it is not a dsgd-run run file (no root attribute %s)", name);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) return h5fail(err, errlen, path, "H5Aopen", what);
    hid_t t = H5Aget_type(a);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    if (t >= 0) H5Tclose(t);
    if (c != cls) {
        H5Aclose(a);
        return refuse(err, errlen, path, "it is not a dsgd-run run file (root attribute %s is not %s)", name,
                      cls == H5T_STRING ? "a string" : "an integer");
    }
    return a;
}

/* Read string root attribute name into a new allocation (*out; free it). */
static int root_string(hid_t f, const char *name, char **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    hid_t a = open_root_attr(f, name, H5T_STRING, path, err, errlen);
    if (a < 0) return -1;
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    hid_t t = H5Tcopy(H5T_C_S1);
    char *s = NULL;
    int rc = 0;
    if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
        rc = h5fail(err, errlen, path, "H5Tcopy/H5Tset_size/H5Tset_cset", "string type");
    else if (H5Aread(a, t, &s) < 0)
        rc = h5fail(err, errlen, path, "H5Aread", what);
    if (rc == 0) {
        size_t n = s ? strlen(s) : 0;
        *out = xmalloc(n + 1);
        memcpy(*out, s ? s : "", n + 1);
    }
    if (s) H5free_memory(s);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* Read integer root attribute name as mtype (H5T_NATIVE_INT64 or _UINT64) into out. */
static int root_integer(hid_t f, const char *name, hid_t mtype, void *out, const char *path, char *err, size_t errlen) {
    hid_t a = open_root_attr(f, name, H5T_INTEGER, path, err, errlen);
    if (a < 0) return -1;
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    int rc = H5Aread(a, mtype, out) < 0 ? h5fail(err, errlen, path, "H5Aread", what) : 0;
    H5Aclose(a);
    return rc;
}

/* Open dataset obj of a run file: 1-D, or 2-D of cols columns (the /ranks timing datasets), with
 * unlimited rows. Its rows into *n. -1 with err filled if it is missing or shaped otherwise. */
static int open_column(hid_t f, const char *obj, int cols, hsize_t *n, const char *path, char *err, size_t errlen) {
    htri_t e = obj_exists(f, obj);
    if (e < 0) return h5fail(err, errlen, path, "H5Lexists", obj);
    if (e == 0) return refuse(err, errlen, path, "it is not a dsgd-run run file (no dataset %s)", obj);
    hid_t ds = H5Dopen2(f, obj, H5P_DEFAULT);
    if (ds < 0) return h5fail(err, errlen, path, "H5Dopen2", obj);
    hid_t space = H5Dget_space(ds);
    if (space < 0) { H5Dclose(ds); return h5fail(err, errlen, path, "H5Dget_space", obj); }
    hsize_t dims[2] = {0, 0}, maxd[2] = {0, 0};
    int nd = H5Sget_simple_extent_ndims(space);
    int ok = nd == (cols ? 2 : 1) && H5Sget_simple_extent_dims(space, dims, maxd) >= 0 && maxd[0] == H5S_UNLIMITED;
    H5Sclose(space);
    H5Dclose(ds);
    H5Eclear2(H5E_DEFAULT);
    if (!ok)
        return refuse(err, errlen, path, "it is not a dsgd-run run file (%s is not a %s dataset of unlimited rows)", obj,
                      cols ? "2-D" : "1-D");
    if (cols && dims[1] != (hsize_t)cols)
        return refuse(err, errlen, path, "the run file has ranks = %llu (columns of %s), the experiment ranks = %d",
                      (unsigned long long)dims[1], obj, cols);
    *n = dims[0];
    return 0;
}

/* "[4, 4] int64" (or "[growing] float64") for a method array's shape and type. */
static void shape_text(char *buf, size_t n, int nd, const hsize_t *dims, int f64) {
    char rows[32];
    if (dims[0] == H5S_UNLIMITED) snprintf(rows, sizeof rows, "growing");
    else snprintf(rows, sizeof rows, "%llu", (unsigned long long)dims[0]);
    if (nd == 2) snprintf(buf, n, "[%s, %llu] %s", rows, (unsigned long long)dims[1], f64 ? "float64" : "int64");
    else snprintf(buf, n, "[%s] %s", rows, f64 ? "float64" : "int64");
}

/* Method array i of meta in the run file: same name, type and shape (for a growing one: the
 * columns, unlimited rows), else -1 with err filled. */
static int open_array(hid_t f, const runlog_meta *meta, int i, const char *obj, const char *path, char *err, size_t errlen) {
    const runlog_array_spec *a = &meta->arrays[i];
    hsize_t want[2] = {a->grows ? H5S_UNLIMITED : (hsize_t)a->rows, (hsize_t)a->cols};
    char wants[96];
    shape_text(wants, sizeof wants, a->cols ? 2 : 1, want, a->float64);
    htri_t e = obj_exists(f, obj);
    if (e < 0) return h5fail(err, errlen, path, "H5Lexists", obj);
    if (e == 0) return refuse(err, errlen, path, "the run file has no fixed array %s, the experiment has one (%s)", obj, wants);
    hid_t ds = H5Dopen2(f, obj, H5P_DEFAULT);
    if (ds < 0) return h5fail(err, errlen, path, "H5Dopen2", obj);
    hid_t space = H5Dget_space(ds), t = H5Dget_type(ds);
    hsize_t dims[2] = {0, 0}, maxd[2] = {0, 0};
    int nd = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    if (nd == 1 || nd == 2) H5Sget_simple_extent_dims(space, dims, maxd);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    size_t size = t < 0 ? 0 : H5Tget_size(t);
    if (space >= 0) H5Sclose(space);
    if (t >= 0) H5Tclose(t);
    H5Eclear2(H5E_DEFAULT);
    H5Dclose(ds);
    int f64 = c == H5T_FLOAT;
    if ((c != H5T_FLOAT && c != H5T_INTEGER) || size != 8 || (nd != 1 && nd != 2))
        return refuse(err, errlen, path, "it is not a dsgd-run run file (%s is not a 1-D or 2-D int64 or float64 dataset)", obj);
    if (maxd[0] == H5S_UNLIMITED) dims[0] = H5S_UNLIMITED;
    if (nd != (a->cols ? 2 : 1) || dims[0] != want[0] || (nd == 2 && dims[1] != want[1]) || f64 != (a->float64 != 0)) {
        char has[96];
        shape_text(has, sizeof has, nd, dims, f64);
        return refuse(err, errlen, path, "the run file has fixed array %s of %s, the experiment %s", obj, has, wants);
    }
    return 0;
}

/* Check that r->file is a run file of meta's layout with at least keep complete rows in every
 * group. err: "cannot resume <path>: ..." for a file that is
 * not this experiment's, an HDF5 message for a failure. r->n_* are not touched. */
static int open_layout(runlog *r, const runlog_meta *meta, const runlog_rows *keep, char *err, size_t errlen) {
    hid_t f = r->file;
    const char *path = r->path;
    /* Is it ours, and this experiment's? */
    char *version = NULL, *method = NULL;
    if (root_string(f, "dsgd_version", &version, path, err, errlen) < 0) return -1;
    free(version);
    if (root_string(f, "method", &method, path, err, errlen) < 0) return -1;
    const char *want = meta->method ? meta->method : "";
    if (strcmp(method, want) != 0) {
        refuse(err, errlen, path, "the run file has method %s, the experiment method %s", method, want);
        free(method);
        return -1;
    }
    free(method);
    const struct { const char *name; long long v; } ints[] = {
        {"p", meta->p}, {"b", meta->b}, {"m", meta->m}, {"iterations", meta->iterations}, {"servers", meta->servers},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        int64_t v = 0;
        if (root_integer(f, ints[i].name, H5T_NATIVE_INT64, &v, path, err, errlen) < 0) return -1;
        if (v != ints[i].v)
            return refuse(err, errlen, path, "the run file has %s = %lld, the experiment %s = %lld", ints[i].name, (long long)v,
                          ints[i].name, ints[i].v);
    }
    uint64_t seed = 0;
    if (root_integer(f, "seed", H5T_NATIVE_UINT64, &seed, path, err, errlen) < 0) return -1;
    if (seed != meta->seed)
        return refuse(err, errlen, path, "the run file has seed = %llu, the experiment seed = %llu", (unsigned long long)seed,
                      meta->seed);

    /* The optional groups: present exactly when meta asks for them. */
    htri_t has_el = obj_exists(f, "/eval_local"), has_ranks = obj_exists(f, "/ranks");
    if (has_el < 0 || has_ranks < 0) return h5fail(err, errlen, path, "H5Lexists", has_el < 0 ? "/eval_local" : "/ranks");
    if ((has_el > 0) != r->has_eval_local)
        return refuse(err, errlen, path, has_el ? "the run file has /eval_local, the experiment none (eval_local = 0)"
                                                : "the run file has no /eval_local, the experiment eval_local = 1");
    if (has_ranks > 0 && r->ranks == 0) return refuse(err, errlen, path, "the run file has /ranks, the experiment none (ranks = 0)");
    if (has_ranks == 0 && r->ranks > 0)
        return refuse(err, errlen, path, "the run file has no /ranks, the experiment ranks = %d", r->ranks);

    /* Every column, with the complete rows of each group (its shortest column). */
    hsize_t rows[4] = {(hsize_t)-1, (hsize_t)-1, (hsize_t)-1, (hsize_t)-1}, n;
    char obj[64];
    for (int i = 0; i < NTRAIN; i++) {
        snprintf(obj, sizeof obj, "/train/%s", train_cols[i].name);
        if (open_column(f, obj, 0, &n, path, err, errlen) < 0) return -1;
        if (n < rows[0]) rows[0] = n;
    }
    for (int g = 1; g <= 2; g++) {
        if (g == 2 && !r->has_eval_local) break;
        for (int i = 0; i < NEVAL; i++) {
            snprintf(obj, sizeof obj, "%s/%s", g == 1 ? "/eval" : "/eval_local", eval_cols[i].name);
            if (open_column(f, obj, 0, &n, path, err, errlen) < 0) return -1;
            if (n < rows[g]) rows[g] = n;
        }
    }
    if (r->ranks > 0) {
        if (open_column(f, "/ranks/step", 0, &n, path, err, errlen) < 0) return -1;
        rows[3] = n;
        for (int q = 0; q < NRANKS; q++) {
            snprintf(obj, sizeof obj, "/ranks/%s", ranks_cols[q].name);
            if (open_column(f, obj, r->ranks, &n, path, err, errlen) < 0) return -1;
            if (n < rows[3]) rows[3] = n;
        }
    }
    for (int i = 0; i < r->n_arrays; i++)
        if (open_array(f, meta, i, r->arrays[i].obj, path, err, errlen) < 0) return -1;

    /* The checkpoint's rows must all be there. */
    const long want_rows[4] = {keep->train, keep->eval, keep->eval_local, keep->ranks};
    const char *gname[4] = {"/train", "/eval", "/eval_local", "/ranks"};
    for (int g = 0; g < 4; g++) {
        hsize_t have = rows[g] == (hsize_t)-1 ? 0 : rows[g];
        if ((hsize_t)want_rows[g] > have)
            return refuse(err, errlen, path, "the run file has %llu %s rows but the checkpoint was taken after %ld: "
                          "it is not the file this checkpoint belongs to", (unsigned long long)have, gname[g], want_rows[g]);
    }
    return 0;
}

/* Cut dataset obj of r->file back to keep rows (width columns; 0: 1-D); for a step column (1-D
 * int64) raise *last_step to its last kept element. */
static int cut_column(runlog *r, const char *obj, hsize_t keep, hsize_t width, int is_step, int64_t *last_step, char *err,
                      size_t errlen) {
    hid_t ds = H5Dopen2(r->file, obj, H5P_DEFAULT);
    if (ds < 0) return h5fail(err, errlen, r->path, "H5Dopen2", obj);
    int rc = 0;
    if (is_step && keep > 0) { /* element keep - 1 */
        hsize_t one = 1, at = keep - 1;
        int64_t v = 0;
        hid_t fspace = H5Dget_space(ds), mspace = H5Screate_simple(1, &one, NULL);
        if (fspace < 0 || mspace < 0 || H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &at, NULL, &one, NULL) < 0 ||
            H5Dread(ds, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, &v) < 0)
            rc = h5fail(err, errlen, r->path, "H5Dread", obj);
        if (mspace >= 0) H5Sclose(mspace);
        if (fspace >= 0) H5Sclose(fspace);
        if (v > *last_step) *last_step = v;
    }
    hsize_t dims[2] = {keep, width};
    if (rc == 0 && H5Dset_extent(ds, dims) < 0) rc = h5fail(err, errlen, r->path, "H5Dset_extent", obj);
    H5Dclose(ds);
    return rc;
}

/* Cut every dataset of r->file back to keep rows, and find the largest step among the rows kept. */
static int cut_rows(runlog *r, const runlog_rows *keep, int64_t *last_step, char *err, size_t errlen) {
    *last_step = 0;
    struct { int n; const colspec *cols; const char *gname; long keep; hsize_t width; } groups[] = {
        {NTRAIN, train_cols, "/train", keep->train, 0},
        {NEVAL, eval_cols, "/eval", keep->eval, 0},
        {r->has_eval_local ? NEVAL : 0, eval_cols, "/eval_local", keep->eval_local, 0},
        {r->ranks > 0 ? 1 : 0, &ranks_step_col, "/ranks", keep->ranks, 0},
        {r->ranks > 0 ? NRANKS : 0, ranks_cols, "/ranks", keep->ranks, (hsize_t)r->ranks},
    };
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++)
        for (int i = 0; i < groups[g].n; i++) {
            char obj[64];
            snprintf(obj, sizeof obj, "%s/%s", groups[g].gname, groups[g].cols[i].name);
            if (cut_column(r, obj, (hsize_t)groups[g].keep, groups[g].width, i == 0 && groups[g].width == 0, last_step, err, errlen) < 0)
                return -1;
        }
    return 0;
}

/* Delete root attribute name of f if it is there. */
static int drop_root_attr(hid_t f, const char *name, const char *path, char *err, size_t errlen) {
    char what[300];
    snprintf(what, sizeof what, "attribute %s of /", name);
    htri_t e = H5Aexists(f, name);
    if (e < 0) return h5fail(err, errlen, path, "H5Aexists", what);
    if (e > 0 && H5Adelete(f, name) < 0) return h5fail(err, errlen, path, "H5Adelete", what);
    return 0;
}

/* The root attributes of a resume: the earlier run's end-of-run attributes removed (status
 * emptied), resumes
 * incremented, "step <last_step> at <UTC time> (<note>)" appended to resumed_at. */
static int resume_attrs(runlog *r, int64_t last_step, const char *note, char *err, size_t errlen) {
    hid_t f = r->file;
    const char *path = r->path;
    for (size_t i = 0; i < sizeof usual_final_attrs / sizeof *usual_final_attrs; i++)
        if (strcmp(usual_final_attrs[i], "status") != 0 && drop_root_attr(f, usual_final_attrs[i], path, err, errlen) < 0) return -1;
    if (status_write(f, "", path, err, errlen) < 0) return -1; /* the slot, empty again */
    htri_t e = H5Aexists(f, "final_attributes");
    if (e < 0) return h5fail(err, errlen, path, "H5Aexists", "attribute final_attributes of /");
    if (e > 0) {
        char *list;
        if (root_string(f, "final_attributes", &list, path, err, errlen) < 0) return -1;
        int rc = 0;
        for (char *name = strtok(list, "\n"); name && rc == 0; name = strtok(NULL, "\n"))
            if (!is_own_attr(name) && strcmp(name, "status") != 0) rc = drop_root_attr(f, name, path, err, errlen);
        free(list);
        if (rc < 0 || drop_root_attr(f, "final_attributes", path, err, errlen) < 0) return -1;
    }

    int64_t resumes = 0;
    if ((e = H5Aexists(f, "resumes")) < 0) return h5fail(err, errlen, path, "H5Aexists", "attribute resumes of /");
    if (e > 0 && root_integer(f, "resumes", H5T_NATIVE_INT64, &resumes, path, err, errlen) < 0) return -1;
    resumes++;
    if (attr_write(f, "/", "resumes", H5T_STD_I64LE, H5T_NATIVE_INT64, &resumes, path, err, errlen) < 0) return -1;

    char when[32];
    if (utc_now(when, sizeof when) < 0) return syserr(err, errlen, path, "cannot read the UTC time");
    char *old = NULL;
    if ((e = H5Aexists(f, "resumed_at")) < 0) return h5fail(err, errlen, path, "H5Aexists", "attribute resumed_at of /");
    if (e > 0 && root_string(f, "resumed_at", &old, path, err, errlen) < 0) return -1;
    int has_note = note && note[0];
    size_t len = (old ? strlen(old) + 1 : 0) + 64 + (has_note ? strlen(note) + 3 : 0) + 1;
    char *lines = xmalloc(len);
    snprintf(lines, len, "%s%sstep %lld at %s%s%s%s", old ? old : "", old && old[0] ? "\n" : "", (long long)last_step, when,
             has_note ? " (" : "", has_note ? note : "", has_note ? ")" : "");
    free(old);
    int rc = attr_string(f, "/", "resumed_at", lines, path, err, errlen);
    free(lines);
    return rc;
}

runlog *runlog_resume(const char *path, const runlog_meta *meta, const runlog_rows *keep, const char *resume_note,
                      char *err, size_t errlen) {
    if (!path || !path[0] || !meta || !keep) {
        seterr(err, errlen, "runlog_resume: %s", !meta ? "no run metadata" : !keep ? "no checkpoint row counts" : "empty output path");
        return NULL;
    }
    if (strlen(path) >= PATHLEN - 64) {
        seterr(err, errlen, "output path too long (%zu characters): %s", strlen(path), path);
        return NULL;
    }
    if (keep->train < 0 || keep->eval < 0 || keep->eval_local < 0 || keep->ranks < 0) {
        refuse(err, errlen, path, "the checkpoint's row counts are negative (train %ld, eval %ld, eval_local %ld, ranks %ld)",
               keep->train, keep->eval, keep->eval_local, keep->ranks);
        return NULL;
    }
    if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) {
        seterr(err, errlen, "%s: HDF5 H5Eset_auto2 failed", path);
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        refuse(err, errlen, path, "%s", strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        refuse(err, errlen, path, "it is not a regular file");
        return NULL;
    }
    if (check_meta(meta, "runlog_resume", path, err, errlen) < 0) return NULL;

    /* Read into memory (part 4 of the header comment): the file on disk is only read, so a
     * refusal leaves it untouched; checked, cut back to the checkpoint, root attributes updated,
     * published over the old file. */
    runlog *r = new_runlog(path, meta);
    r->fd = open(path, O_RDONLY | O_CLOEXEC); /* publish() replaces this file, if still the one read */
    if (r->fd < 0) {
        refuse(err, errlen, path, "%s", strerror(errno));
        free_runlog(r);
        return NULL;
    }
    hid_t fapl = memory_fapl(0, path, err, errlen);
    if (fapl < 0) {
        free_runlog(r);
        return NULL;
    }
    r->file = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (r->file < 0) {
        char why[ERRLEN];
        h5_message(why, sizeof why);
        refuse(err, errlen, path, "it is not a dsgd-run run file (HDF5 cannot open it: %s)", why);
        free_runlog(r);
        return NULL;
    }
    /* A file of the earlier SWMR writer (superblock version 3) would not survive its image. */
    H5F_info2_t info;
    if (H5Fget_info2(r->file, &info) < 0) {
        h5fail(err, errlen, path, "H5Fget_info2", "/");
        free_runlog(r);
        return NULL;
    }
    if (info.super.version > 1) {
        refuse(err, errlen, path, "it was written in the HDF5 1.10 format (superblock version %u) by an earlier dsgd-run, "
               "which this one cannot continue: finish it with that version, or start afresh", info.super.version);
        free_runlog(r);
        return NULL;
    }
    int64_t last_step;
    if (open_layout(r, meta, keep, err, errlen) < 0 || cut_rows(r, keep, &last_step, err, errlen) < 0 ||
        resume_attrs(r, last_step, resume_note, err, errlen) < 0 || publish(r, 0, err, errlen) < 0) {
        free_runlog(r);
        return NULL;
    }
    r->n_train = (hsize_t)keep->train;
    r->n_eval = (hsize_t)keep->eval;
    r->n_eval_local = (hsize_t)keep->eval_local;
    r->n_ranks = (hsize_t)keep->ranks;
    return r;
}

void runlog_library_version(char *buf, size_t n) {
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    snprintf(buf, n, "HDF5 %u.%u.%u", maj, min, rel);
}
