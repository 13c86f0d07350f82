/* checkpoint_file.c — one rank's checkpoint file (see checkpoint.h): a plain HDF5 file of 1-D
 * datasets (h5dump shows every value), written only under the step-<label>.tmp directory, so a
 * half-written file is never named by `latest`; the run id every file carries, and the checks of
 * a rank's part before a resume (threads, ISA, data). */
#define _GNU_SOURCE
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/h5.h"
#include "util/util.h"

/* ---- rank files --------------------------------------------------------------------------- */

static uint64_t g_run_id; /* ckpt_set_run_id */

void ckpt_set_run_id(uint64_t id) { g_run_id = id; }

uint64_t ckpt_new_run_id(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the host name */
    for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    uint64_t id = seed_mix(seed_mix((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec, (uint64_t)getpid()), h);
    return id ? id : 1;
}

struct ckpt_file {
    hid_t file;
    int writing;
    char path[4200];
    char err[ERRLEN];
};

static int ferr(ckpt_file *f, const char *call, const char *name) {
    if (!f->err[0]) seterr(f->err, sizeof f->err, "%s: HDF5 %s failed for %s", f->path, call, name);
    return -1;
}

static void rank_path(char *out, size_t n, const char *dir, long label, int rank, int tmp) {
    snprintf(out, n, "%s/step-%ld%s/rank-%d.h5", dir, label, tmp ? ".tmp" : "", rank);
}

ckpt_file *ckpt_create(const char *dir, long label, int rank, char *err, size_t errlen) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ckpt_file *f = xcalloc(1, sizeof *f);
    rank_path(f->path, sizeof f->path, dir, label, rank, 1);
    f->writing = 1;
    f->file = h5_fcreate(f->path, H5F_ACC_EXCL, H5P_DEFAULT); /* unlocked: h5.h */
    /* Every file names its checkpoint, so a file moved between checkpoints is noticed. */
    const int64_t l[3] = {label, rank, (int64_t)g_run_id};
    if (f->file < 0) seterr(err, errlen, "%s: cannot create the checkpoint file (HDF5 H5Fcreate failed)", f->path);
    else if (ckpt_put_i64(f, "label_rank_run", l, 3)) seterr(err, errlen, "%s", f->err);
    else return f;
    ckpt_free(f);
    return NULL;
}

uint64_t ckpt_file_run_id(ckpt_file *f) {
    int64_t l[3] = {0};
    return ckpt_get_i64(f, "label_rank_run", l, 3) ? 0 : (uint64_t)l[2];
}

int ckpt_exists(const char *dir, long label, int rank) {
    char p[4200];
    rank_path(p, sizeof p, dir, label, rank, 0);
    return access(p, R_OK) == 0;
}

int ckpt_find_experiment(const char *dir, long label, int first, char *text, size_t n, uint64_t *run_id, char *err, size_t errlen) {
    char sd[4200];
    rank_path(sd, sizeof sd, dir, label, 0, 0);
    *strrchr(sd, '/') = '\0';
    DIR *d = opendir(sd); /* every rank file, not ranks 0, 1, ... up to the first missing: a worker that left has none */
    struct dirent *de = NULL;
    int rc = 1;
    for (int k = -1; rc && (k < 0 || (d && (de = readdir(d)))); k = 0) { /* k = -1: rank first's file first */
        int rank = first;
        if (k >= 0 && (sscanf(de->d_name, "rank-%d.h5", &rank) != 1 || rank == first)) continue;
        char mk[ERRLEN];
        ckpt_file *f = ckpt_open(dir, label, rank, mk, sizeof mk);
        rc = !f || ckpt_get_str(f, "experiment", text, n) || !(*run_id = ckpt_file_run_id(f));
        if (rc && k < 0) snprintf(err, errlen, "%s", f ? ckpt_error(f) : mk); /* the message if no rank file holds it */
        ckpt_free(f);
    }
    if (d) closedir(d);
    return rc ? -1 : 0;
}

ckpt_file *ckpt_open(const char *dir, long label, int rank, char *err, size_t errlen) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ckpt_file *f = xcalloc(1, sizeof *f);
    f->file = H5I_INVALID_HID;
    rank_path(f->path, sizeof f->path, dir, label, rank, 0);
    int64_t l[3] = {-1, -1, 0};
    if (access(f->path, R_OK) != 0)
        seterr(err, errlen, "%s: %s (the checkpoint has no state for rank %d: was it written with another p or method?)", f->path,
               strerror(errno), rank);
    else if ((f->file = h5_fopen(f->path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
        seterr(err, errlen, "%s: cannot open the checkpoint file (HDF5 H5Fopen failed: not an HDF5 file, or truncated?)", f->path);
    else if (ckpt_get_i64(f, "label_rank_run", l, 3))
        seterr(err, errlen, "%s", f->err);
    else if (g_run_id && (uint64_t)l[2] != g_run_id)
        seterr(err, errlen, "%s was written by another run (run id %016llx, this run's checkpoint is %016llx): the checkpoint "
               "directory was changed by hand", f->path, (unsigned long long)l[2], (unsigned long long)g_run_id);
    else if (l[0] != label || l[1] != rank)
        seterr(err, errlen, "%s holds the state of rank %lld after %lld iterations, not of rank %d after %ld: the checkpoint directory "
               "was changed by hand", f->path, (long long)l[1], (long long)l[0], rank, label);
    else
        return f;
    ckpt_free(f);
    return NULL;
}

static int put(ckpt_file *f, const char *name, hid_t ftype, hid_t mtype, const void *v, size_t n) {
    if (f->err[0]) return -1;
    const char *failed = h5_write_1d(f->file, name, ftype, mtype, (hsize_t)n, v, H5P_DEFAULT);
    return failed ? ferr(f, failed, name) : 0;
}

/* Dataset name of a reader into v: exactly n values of type tname, or (tname = NULL) a string of
 * fewer than n bytes, NUL-terminated. */
static int get(ckpt_file *f, const char *name, hid_t mtype, void *v, size_t n, const char *tname) {
    if (f->err[0]) return -1;
    if (H5Lexists(f->file, name, H5P_DEFAULT) <= 0)
        return seterr(f->err, sizeof f->err, "%s: no dataset '%s' (a checkpoint of another method or version?)", f->path, name), -1;
    hid_t ds = H5Dopen2(f->file, name, H5P_DEFAULT);
    if (ds < 0) return ferr(f, "H5Dopen2", name);
    hid_t sp = H5Dget_space(ds);
    const hssize_t have = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (sp >= 0) H5Sclose(sp);
    int rc = 0;
    if (!tname && (have < 0 || (size_t)have >= n))
        rc = -1, seterr(f->err, sizeof f->err, "%s: dataset '%s' is too long (%lld bytes)", f->path, name, (long long)have);
    else if (tname && have != (hssize_t)n)
        rc = -1, seterr(f->err, sizeof f->err, "%s: dataset '%s' has %lld %s values, expected %zu (a checkpoint of another model, p or method?)",
                        f->path, name, (long long)have, tname, n);
    else if (have && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
        rc = ferr(f, "H5Dread", name);
    else if (!tname)
        ((char *)v)[have] = '\0';
    H5Dclose(ds);
    return rc;
}

int ckpt_put_f32(ckpt_file *f, const char *name, const float *v, size_t n) { return put(f, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, v, n); }
int ckpt_put_f64(ckpt_file *f, const char *name, const double *v, size_t n) { return put(f, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, n); }
int ckpt_put_i64(ckpt_file *f, const char *name, const int64_t *v, size_t n) { return put(f, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v, n); }
int ckpt_get_f32(ckpt_file *f, const char *name, float *v, size_t n) { return get(f, name, H5T_NATIVE_FLOAT, v, n, "float32"); }
int ckpt_get_f64(ckpt_file *f, const char *name, double *v, size_t n) { return get(f, name, H5T_NATIVE_DOUBLE, v, n, "float64"); }
int ckpt_get_i64(ckpt_file *f, const char *name, int64_t *v, size_t n) { return get(f, name, H5T_NATIVE_INT64, v, n, "int64"); }

int ckpt_io_f32(ckpt_file *f, const char *name, float *v, size_t n) { return f->writing ? ckpt_put_f32(f, name, v, n) : ckpt_get_f32(f, name, v, n); }
int ckpt_io_f64(ckpt_file *f, const char *name, double *v, size_t n) { return f->writing ? ckpt_put_f64(f, name, v, n) : ckpt_get_f64(f, name, v, n); }
int ckpt_io_i64(ckpt_file *f, const char *name, int64_t *v, size_t n) { return f->writing ? ckpt_put_i64(f, name, v, n) : ckpt_get_i64(f, name, v, n); }
int ckpt_writing(const ckpt_file *f) { return f->writing; }

/* Strings are uint8 datasets of their bytes (no NUL): exact, and readable by any HDF5 tool. */
int ckpt_put_str(ckpt_file *f, const char *name, const char *s) { return put(f, name, H5T_STD_U8LE, H5T_NATIVE_UCHAR, s, strlen(s)); }

int ckpt_get_str(ckpt_file *f, const char *name, char *s, size_t n) { return get(f, name, H5T_NATIVE_UCHAR, s, n, NULL); }

int ckpt_close(ckpt_file *f) {
    if (!f || f->file < 0) return f && f->err[0] ? -1 : 0;
    if (f->writing && H5Fflush(f->file, H5F_SCOPE_LOCAL) < 0) ferr(f, "H5Fflush", "the file");
    if (H5Fclose(f->file) < 0) ferr(f, "H5Fclose", "the file");
    f->file = H5I_INVALID_HID;
    /* on disk before the writer reports success (a crash of the node must not lose the pages of a
     * part that `latest` will name; H5Fflush only hands them to the kernel) */
    char e[ERRLEN];
    if (f->writing && !f->err[0] && ckpt_fsync(f->path, e, sizeof e)) seterr(f->err, sizeof f->err, "%s", e);
    return f->err[0] ? -1 : 0;
}

const char *ckpt_error(const ckpt_file *f) { return f ? f->err : ""; }

int ckpt_check_data(const char *dir, long label, int rank, const uint64_t fp[2], char *err, size_t errlen) {
    ckpt_file *f = ckpt_open(dir, label, rank, err, errlen);
    if (!f) return EXIT_BADINPUT;
    uint64_t had[2] = {0, 0};
    int st = 0;
    if (ckpt_get_i64(f, "data_fingerprint", (int64_t *)had, 2)) st = seterr(err, errlen, "%s", ckpt_error(f));
    else if (had[0] != fp[0] || had[1] != fp[1])
        st = seterr(err, errlen, "the data is not the pack checkpoint %s/step-%ld was written with (fingerprints %016llx/%016llx then, "
                    "%016llx/%016llx now: packed again, or another pack at that path); resume with the same pack, or start a new run",
                    dir, label, (unsigned long long)had[0], (unsigned long long)had[1], (unsigned long long)fp[0],
                    (unsigned long long)fp[1]);
    ckpt_free(f);
    return st;
}

int ckpt_check_machine(const char *dir, long label, int rank, int threads, const char *isa, int strict, int *differs,
                       char *how, size_t hn, char *err, size_t errlen) {
    *differs = 0;
    if (hn) how[0] = '\0';
    if (!ckpt_exists(dir, label, rank)) return 0; /* a rank without a part (a worker that had left) */
    ckpt_file *f = ckpt_open(dir, label, rank, err, errlen);
    if (!f) return EXIT_BADINPUT;
    int64_t had = 0;
    char had_isa[64] = "";
    int st = 0;
    if (ckpt_get_i64(f, "threads", &had, 1) || ckpt_get_str(f, "isa", had_isa, sizeof had_isa))
        st = seterr(err, errlen, "%s", ckpt_error(f));
    else if (had != threads || strcmp(had_isa, isa) != 0) {
        *differs = 1;
        char th[64] = "";
        if (had != threads) snprintf(th, sizeof th, "threads %lld -> %d", (long long)had, threads);
        if (strcmp(had_isa, isa) != 0) snprintf(how, hn, "%s%soneDNN ISA %s -> %s", th, th[0] ? ", " : "", had_isa, isa);
        else snprintf(how, hn, "%s", th);
        if (strict && had != threads)
            st = seterr(err, errlen, "%s: key 'threads': rank %d's checkpoint (%s/step-%ld) was written with %lld compute "
                        "thread(s), this run has %d; with other threads oneDNN sums in another order and the run would not "
                        "continue bitwise: set threads = %lld, or --set checkpoint.bitwise=false to continue anyway",
                        config_where("threads"), rank, dir, label, (long long)had, threads, (long long)had);
        else if (strict)
            st = seterr(err, errlen, "rank %d's checkpoint (%s/step-%ld) was written where oneDNN ran %s code, this run has "
                        "%s (another CPU, or ONEDNN_MAX_CPU_ISA); the run would not continue bitwise: resume on a node of the "
                        "first kind, set ONEDNN_MAX_CPU_ISA to match, or --set checkpoint.bitwise=false to continue anyway",
                        rank, dir, label, had_isa, isa);
    }
    ckpt_free(f);
    return st;
}

void ckpt_free(ckpt_file *f) {
    if (!f) return;
    if (f->file >= 0) H5Fclose(f->file);
    free(f);
}
