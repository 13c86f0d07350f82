/* runlog_resume.c — continuing the run file of a checkpointed run (runlog_resume, part 4 of
 * runlog.c's header comment): the file read into memory, checked against the experiment's layout,
 * every group cut back to the checkpoint's rows, the end-of-run attributes removed, and published
 * over the old file. */
#include "runlog_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Read root attribute name of f as memory type mtype (integers: H5T_NATIVE_INT64 or _UINT64)
 * into out. It must exist (unless optional: then out is left as it is) and be of class cls (its
 * file type's class), else the file is not one of ours. */
static int root_read(hid_t f, const char *name, int optional, H5T_class_t cls, hid_t mtype, void *out, const char *path,
                     char *err, size_t errlen) {
    htri_t e = H5Aexists(f, name);
    if (e < 0) return h5_attr_fail("H5Aexists", "/", name, path, err, errlen);
    if (e == 0 && optional) return 0;
    if (e == 0) return refuse(err, errlen, path, "it is not a dsgd-run run file (no root attribute %s)", name);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) return h5_attr_fail("H5Aopen", "/", name, path, err, errlen);
    hid_t t = H5Aget_type(a);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    if (t >= 0) H5Tclose(t);
    int rc = c != cls ? refuse(err, errlen, path, "it is not a dsgd-run run file (root attribute %s is not %s)", name,
                               cls == H5T_STRING ? "a string" : "an integer")
           : H5Aread(a, mtype, out) < 0 ? h5_attr_fail("H5Aread", "/", name, path, err, errlen) : 0;
    H5Aclose(a);
    return rc;
}

/* Read string root attribute name into a new allocation (*out; free it; "" for a missing
 * optional one). */
static int root_string(hid_t f, const char *name, int optional, char **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    hid_t t = h5_string_type(H5T_VARIABLE, 1);
    char *s = NULL;
    int rc = t < 0 ? h5_fail(-1, err, errlen, path, "H5Tcopy/H5Tset_size/H5Tset_cset", "string type")
                   : root_read(f, name, optional, H5T_STRING, t, &s, path, err, errlen);
    const char *v = s ? s : "";
    if (rc == 0) *out = memcpy(xmalloc(strlen(v) + 1), v, strlen(v) + 1);
    if (s) H5free_memory(s);
    if (t >= 0) H5Tclose(t);
    return rc;
}

/* Open dataset obj of a run file: 1-D, or 2-D of cols columns (the /ranks timing datasets), with
 * unlimited rows. Its rows into *n. -1 with err filled if it is missing or shaped otherwise. */
static int open_column(hid_t f, const char *obj, int cols, hsize_t *n, const char *path, char *err, size_t errlen) {
    htri_t e = obj_exists(f, obj);
    if (e < 0) return h5_fail(-1, err, errlen, path, "H5Lexists", obj);
    if (e == 0) return refuse(err, errlen, path, "it is not a dsgd-run run file (no dataset %s)", obj);
    hid_t ds = H5Dopen2(f, obj, H5P_DEFAULT);
    if (ds < 0) return h5_fail(-1, err, errlen, path, "H5Dopen2", obj);
    hid_t space = H5Dget_space(ds);
    if (space < 0) { H5Dclose(ds); return h5_fail(-1, err, errlen, path, "H5Dget_space", obj); }
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
    if (e < 0) return h5_fail(-1, err, errlen, path, "H5Lexists", obj);
    if (e == 0) return refuse(err, errlen, path, "the run file has no fixed array %s, the experiment has one (%s)", obj, wants);
    hid_t ds = H5Dopen2(f, obj, H5P_DEFAULT);
    if (ds < 0) return h5_fail(-1, err, errlen, path, "H5Dopen2", obj);
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

static const char *const group_names[4] = {"/train", "/eval", "/eval_local", "/ranks"};

/* The extendible datasets of r's layout into c (at most MAX_COLUMNS), returning how many: obj,
 * group g (an index of group_names), step (the group's 1-D int64 step column) and width (columns
 * of a 2-D /ranks dataset; 0: 1-D). */
enum { MAX_COLUMNS = NTRAIN + 2 * NEVAL + 3 + 1 + NRANKS };
typedef struct { char obj[64]; int g, step; hsize_t width; } column;
static int columns(const runlog *r, column *c) {
    const struct { int n; const colspec *cols; int g; hsize_t width; int wall; } part[] = {
        {NTRAIN, train_cols, 0, 0, 0}, {NEVAL, eval_cols, 1, 0, 0}, {r->has_eval_local ? NEVAL : 0, eval_cols, 2, 0, 0},
        {r->ranks > 0 ? 1 : 0, &ranks_step_col, 3, 0, 0}, {r->ranks > 0 ? NRANKS : 0, ranks_cols, 3, (hsize_t)r->ranks, 0},
        {r->wall, &wall_col, 0, 0, 1}, {r->wall, &wall_col, 1, 0, 1}, {r->wall && r->has_eval_local, &wall_col, 2, 0, 1},
    };
    int n = 0;
    for (size_t k = 0; k < sizeof part / sizeof *part; k++)
        for (int i = 0; i < part[k].n; i++, n++) {
            c[n] = (column){.g = part[k].g, .step = i == 0 && part[k].width == 0 && !part[k].wall, .width = part[k].width};
            snprintf(c[n].obj, sizeof c[n].obj, "%s/%s", group_names[part[k].g], part[k].cols[i].name);
        }
    return n;
}

/* Check that r->file is a run file of meta's layout with at least keep complete rows in every
 * group. err: "cannot resume <path>: ..." for a file that is
 * not this experiment's, an HDF5 message for a failure. r->n_* are not touched. */
static int open_layout(runlog *r, const runlog_meta *meta, const runlog_rows *keep, char *err, size_t errlen) {
    hid_t f = r->file;
    const char *path = r->path;
    /* Is it ours, and this experiment's? */
    char *version = NULL, *method = NULL;
    if (root_string(f, "dsgd_version", 0, &version, path, err, errlen) < 0) return -1;
    free(version);
    if (root_string(f, "method", 0, &method, path, err, errlen) < 0) return -1;
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
        if (root_read(f, ints[i].name, 0, H5T_INTEGER, H5T_NATIVE_INT64, &v, path, err, errlen) < 0) return -1;
        if (v != ints[i].v)
            return refuse(err, errlen, path, "the run file has %s = %lld, the experiment %s = %lld", ints[i].name, (long long)v,
                          ints[i].name, ints[i].v);
    }
    uint64_t seed = 0;
    if (root_read(f, "seed", 0, H5T_INTEGER, H5T_NATIVE_UINT64, &seed, path, err, errlen) < 0) return -1;
    if (seed != meta->seed)
        return refuse(err, errlen, path, "the run file has seed = %llu, the experiment seed = %llu", (unsigned long long)seed,
                      meta->seed);

    /* The optional groups: present exactly when meta asks for them. */
    htri_t has_el = obj_exists(f, "/eval_local"), has_ranks = obj_exists(f, "/ranks");
    if (has_el < 0 || has_ranks < 0) return h5_fail(-1, err, errlen, path, "H5Lexists", has_el < 0 ? "/eval_local" : "/ranks");
    if ((has_el > 0) != r->has_eval_local)
        return refuse(err, errlen, path, has_el ? "the run file has /eval_local, the experiment none (eval_local = 0)"
                                                : "the run file has no /eval_local, the experiment eval_local = 1");
    if (has_ranks > 0 && r->ranks == 0) return refuse(err, errlen, path, "the run file has /ranks, the experiment none (ranks = 0)");
    if (has_ranks == 0 && r->ranks > 0)
        return refuse(err, errlen, path, "the run file has no /ranks, the experiment ranks = %d", r->ranks);

    /* Every column, with the complete rows of each group (its shortest column). */
    hsize_t rows[4] = {(hsize_t)-1, (hsize_t)-1, (hsize_t)-1, (hsize_t)-1}, n = 0;
    column c[MAX_COLUMNS];
    for (int i = 0, nc = columns(r, c); i < nc; i++) {
        if (open_column(f, c[i].obj, (int)c[i].width, &n, path, err, errlen) < 0) return -1;
        if (n < rows[c[i].g]) rows[c[i].g] = n;
    }
    for (int i = 0; i < r->n_arrays; i++)
        if (open_array(f, meta, i, r->arrays[i].obj, path, err, errlen) < 0) return -1;

    /* The checkpoint's rows must all be there. */
    const long want_rows[4] = {keep->train, keep->eval, keep->eval_local, keep->ranks};
    for (int g = 0; g < 4; g++) {
        hsize_t have = rows[g] == (hsize_t)-1 ? 0 : rows[g];
        if ((hsize_t)want_rows[g] > have)
            return refuse(err, errlen, path, "the run file has %llu %s rows but the checkpoint was taken after %ld: "
                          "it is not the file this checkpoint belongs to", (unsigned long long)have, group_names[g], want_rows[g]);
    }
    return 0;
}

/* Cut dataset obj of r->file back to keep rows (width columns; 0: 1-D); for a step column (1-D
 * int64) raise *last_step to its last kept element. */
static int cut_column(runlog *r, const char *obj, hsize_t keep, hsize_t width, int is_step, int64_t *last_step, char *err,
                      size_t errlen) {
    hid_t ds = H5Dopen2(r->file, obj, H5P_DEFAULT);
    if (ds < 0) return h5_fail(-1, err, errlen, r->path, "H5Dopen2", obj);
    int rc = 0;
    if (is_step && keep > 0) { /* element keep - 1 */
        hsize_t one = 1, at = keep - 1;
        int64_t v = 0;
        hid_t fspace = H5Dget_space(ds), mspace = H5Screate_simple(1, &one, NULL);
        if (fspace < 0 || mspace < 0 || H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &at, NULL, &one, NULL) < 0 ||
            H5Dread(ds, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, &v) < 0)
            rc = h5_fail(-1, err, errlen, r->path, "H5Dread", obj);
        if (mspace >= 0) H5Sclose(mspace);
        if (fspace >= 0) H5Sclose(fspace);
        if (v > *last_step) *last_step = v;
    }
    hsize_t dims[2] = {keep, width};
    if (rc == 0 && H5Dset_extent(ds, dims) < 0) rc = h5_fail(-1, err, errlen, r->path, "H5Dset_extent", obj);
    H5Dclose(ds);
    return rc;
}

/* Cut every dataset of r->file back to keep rows, and find the largest step among the rows kept. */
static int cut_rows(runlog *r, const runlog_rows *keep, int64_t *last_step, char *err, size_t errlen) {
    *last_step = 0;
    const long kept[4] = {keep->train, keep->eval, keep->eval_local, keep->ranks};
    column c[MAX_COLUMNS];
    for (int i = 0, nc = columns(r, c); i < nc; i++)
        if (cut_column(r, c[i].obj, (hsize_t)kept[c[i].g], c[i].width, c[i].step, last_step, err, errlen) < 0) return -1;
    return 0;
}

/* Delete root attribute name of f if it is there. */
static int drop_root_attr(hid_t f, const char *name, const char *path, char *err, size_t errlen) {
    return h5_attr_fail(h5_attr_delete(f, name), "/", name, path, err, errlen);
}

/* The root attributes of a resume: the earlier run's end-of-run attributes removed (status
 * emptied), resumes incremented, "step <last_step> at <UTC time> (<note>)" appended to resumed_at. */
static int resume_attrs(runlog *r, int64_t last_step, const char *note, char *err, size_t errlen) {
    hid_t f = r->file;
    const char *path = r->path;
    for (size_t i = 0; i < sizeof usual_final_attrs / sizeof *usual_final_attrs; i++)
        if (strcmp(usual_final_attrs[i], "status") != 0 && drop_root_attr(f, usual_final_attrs[i], path, err, errlen) < 0) return -1;
    if (runlog_status_write(f, "", path, err, errlen) < 0) return -1; /* the slot, empty again */
    char *list;
    if (root_string(f, "final_attributes", 1, &list, path, err, errlen) < 0) return -1;
    int rc = 0;
    for (char *name = strtok(list, "\n"); name && rc == 0; name = strtok(NULL, "\n"))
        if (!runlog_is_own_attr(name) && strcmp(name, "status") != 0) rc = drop_root_attr(f, name, path, err, errlen);
    free(list);
    if (rc < 0 || drop_root_attr(f, "final_attributes", path, err, errlen) < 0) return -1;

    int64_t resumes = 0;
    if (root_read(f, "resumes", 1, H5T_INTEGER, H5T_NATIVE_INT64, &resumes, path, err, errlen) < 0) return -1;
    resumes++;
    if (h5_attr_write_err(f, "/", "resumes", H5T_STD_I64LE, H5T_NATIVE_INT64, &resumes, path, err, errlen) < 0) return -1;

    char when[32];
    if (runlog_utc_now(when, sizeof when) < 0) return h5_syserr(err, errlen, path, "cannot read the UTC time");
    char *old;
    if (root_string(f, "resumed_at", 1, &old, path, err, errlen) < 0) return -1;
    int has_note = note && note[0];
    size_t len = strlen(old) + 1 + 64 + (has_note ? strlen(note) + 3 : 0) + 1;
    char *lines = xmalloc(len);
    snprintf(lines, len, "%s%sstep %lld at %s%s%s%s", old, old[0] ? "\n" : "", (long long)last_step, when,
             has_note ? " (" : "", has_note ? note : "", has_note ? ")" : "");
    free(old);
    rc = h5_attr_string_err(f, "/", "resumed_at", lines, path, err, errlen);
    free(lines);
    return rc;
}

/* The checks of runlog_resume's arguments and of the file at path before it is read. Returns 0
 * or -1 with err filled. */
static int check_resume(const char *path, const runlog_meta *meta, const runlog_rows *keep, char *err, size_t errlen) {
    if (!path || !path[0] || !meta || !keep)
        return seterr(err, errlen, "runlog_resume: %s",
                      !meta ? "no run metadata" : !keep ? "no checkpoint row counts" : "empty output path"), -1;
    if (strlen(path) >= PATHLEN - 64) return seterr(err, errlen, "output path too long (%zu characters): %s", strlen(path), path), -1;
    if (keep->train < 0 || keep->eval < 0 || keep->eval_local < 0 || keep->ranks < 0)
        return refuse(err, errlen, path, "the checkpoint's row counts are negative (train %ld, eval %ld, eval_local %ld, ranks %ld)",
                      keep->train, keep->eval, keep->eval_local, keep->ranks);
    if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) return seterr(err, errlen, "%s: HDF5 H5Eset_auto2 failed", path), -1;
    struct stat st;
    if (stat(path, &st) != 0) return refuse(err, errlen, path, "%s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return refuse(err, errlen, path, "it is not a regular file");
    return runlog_check_meta(meta, "runlog_resume", path, err, errlen);
}

/* Read the file at r->path into memory as r->file, keeping r->fd open on it (runlog_publish_now()
 * replaces this file, if still the one read). Returns 0 or -1 with err filled. */
static int read_file(runlog *r, char *err, size_t errlen) {
    const char *path = r->path;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) return refuse(err, errlen, path, "%s", strerror(errno));
    hid_t fapl = runlog_memory_fapl(0, path, err, errlen);
    if (fapl < 0) return -1;
    r->file = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (r->file < 0) {
        char why[ERRLEN];
        h5_message(why, sizeof why);
        return refuse(err, errlen, path, "it is not a dsgd-run run file (HDF5 cannot open it: %s)", why);
    }
    /* A file of the earlier SWMR writer (superblock version 3) would not survive its image. */
    H5F_info2_t info;
    if (H5Fget_info2(r->file, &info) < 0) return h5_fail(-1, err, errlen, path, "H5Fget_info2", "/");
    if (info.super.version > 1)
        return refuse(err, errlen, path, "it was written in the HDF5 1.10 format (superblock version %u) by an earlier dsgd-run, "
                      "which this one cannot continue: finish it with that version, or start afresh", info.super.version);
    return 0;
}

runlog *runlog_resume(const char *path, const runlog_meta *meta, const runlog_rows *keep, const char *resume_note,
                      char *err, size_t errlen) {
    if (check_resume(path, meta, keep, err, errlen) != 0) return NULL;
    /* Read into memory (part 4 of the header comment): the file on disk is only read, so a
     * refusal leaves it untouched; checked, cut back to the checkpoint, root attributes updated,
     * published over the old file. */
    runlog *r = runlog_new(path, meta);
    int64_t last_step;
    if (read_file(r, err, errlen) < 0 || open_layout(r, meta, keep, err, errlen) < 0 ||
        cut_rows(r, keep, &last_step, err, errlen) < 0 || resume_attrs(r, last_step, resume_note, err, errlen) < 0 ||
        runlog_publish_now(r, 0, err, errlen) < 0) {
        runlog_free(r);
        return NULL;
    }
    r->n_train = (hsize_t)keep->train;
    r->n_eval = (hsize_t)keep->eval;
    r->n_eval_local = (hsize_t)keep->eval_local;
    r->n_ranks = (hsize_t)keep->ranks;
    return r;
}
