/* checkpoint.c — checkpoint files, the commit protocol's file operations and the signal flags
 * (see checkpoint.h). One HDF5 file per rank that holds state: a plain file of 1-D datasets
 * (h5dump shows every value); written only under the step-<label>.tmp directory, so a
 * half-written file is never named by `latest`. */
#define _GNU_SOURCE
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

/* ---- signals ------------------------------------------------------------------------------ */

static volatile sig_atomic_t g_sig = CKPT_SIG_NONE, g_signo = 0;
static struct timespec g_stop_at; /* when the first stop request arrived */
static int g_test_sig = 0, g_test_rank = 0, g_test_eval = 0;
static long g_test_step = -1;

static void on_signal(int signo) {
    const int want = signo == SIGUSR1 ? CKPT_SIG_SAVE : CKPT_SIG_STOP;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    if (want == CKPT_SIG_STOP && g_sig == CKPT_SIG_STOP) {
        /* A second stop request kills at once, unless it is the same request arriving twice:
         * Slurm signals every process of a job, and mpiexec passes its own SIGTERM on as well. */
        if (now.tv_sec - g_stop_at.tv_sec >= CKPT_SECOND_SIGNAL_S) {
            signal(signo, SIG_DFL);
            raise(signo);
        }
        return;
    }
    if (want == CKPT_SIG_STOP) g_stop_at = now;
    if (want > g_sig) g_sig = want, g_signo = signo;
}

void ckpt_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    const char *t = getenv("DSGD_TEST_SIGNAL");
    if (t && *t) {
        char name[16] = "", where[8] = "";
        long step = -1;
        int rank = 0;
        int n = sscanf(t, "%15[A-Z0-9]@%ld@%d@%7s", name, &step, &rank, where);
        if (n >= 2 && step >= 0 && (n < 4 || !strcmp(where, "eval"))) {
            g_test_sig = !strcmp(name, "USR1") ? SIGUSR1 : !strcmp(name, "INT") ? SIGINT : !strcmp(name, "TERM") ? SIGTERM : 0;
            g_test_step = step, g_test_rank = n >= 3 ? rank : 0, g_test_eval = n == 4;
        }
        if (!g_test_sig) DIE("DSGD_TEST_SIGNAL='%s': expected TERM|INT|USR1@<step>[@<rank>[@eval]]", t);
    }
}

int ckpt_signal_pending(void) { return g_sig; }

double ckpt_stop_age(void) {
    if (g_sig != CKPT_SIG_STOP) return -1.0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - g_stop_at.tv_sec) + 1e-9 * (double)(now.tv_nsec - g_stop_at.tv_nsec);
}

const char *ckpt_signal_name(void) {
    switch (g_signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "";
    }
}

void ckpt_signal_clear_save(void) {
    if (g_sig == CKPT_SIG_SAVE) g_sig = CKPT_SIG_NONE, g_signo = 0;
}

void ckpt_poll_test(long steps, int world_rank) {
    if (g_test_sig && !g_test_eval && steps >= g_test_step && world_rank == g_test_rank) {
        const int sig = g_test_sig;
        g_test_sig = 0; /* once */
        raise(sig);
    }
}

void ckpt_poll_test_eval(long steps, int world_rank) {
    if (g_test_sig && g_test_eval && steps >= g_test_step && world_rank == g_test_rank) {
        const int sig = g_test_sig;
        g_test_sig = 0;
        raise(sig);
    }
}

/* ---- directories -------------------------------------------------------------------------- */

void ckpt_dir_of(const experiment *e, char *dir, size_t n) {
    if (e->checkpoint.path[0]) {
        snprintf(dir, n, "%s", e->checkpoint.path);
        return;
    }
    size_t len = strlen(e->output);
    if (len > 3 && strcmp(e->output + len - 3, ".h5") == 0) snprintf(dir, n, "%.*s.ckpt", (int)(len - 3), e->output);
    else snprintf(dir, n, "%s.ckpt", e->output);
}

static int syserr(char *err, size_t errlen, const char *path, const char *what) {
    seterr(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return -1;
}

/* 1 if name is exactly "step-<digits>" (tmp = 0) or "step-<digits>.tmp" (tmp = 1): a directory
 * this program writes (anything else in the checkpoint directory is left alone); *label set. */
static int step_name(const char *name, long *label, int *tmp) {
    int n = 0;
    if (sscanf(name, "step-%ld%n", label, &n) != 1 || *label < 0 || strncmp(name, "step-", 5) != 0) return 0;
    for (const char *p = name + 5; p < name + n; p++)
        if (*p < '0' || *p > '9') return 0;
    if (name[n] == '\0') return *tmp = 0, 1;
    if (strcmp(name + n, ".tmp") == 0) return *tmp = 1, 1;
    return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}
static int rm_rf(const char *path) { return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 || errno == ENOENT ? 0 : -1; }

int ckpt_latest(const char *dir, long *label, char *err, size_t errlen) {
    char path[4200], line[64] = "";
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return syserr(err, errlen, path, "cannot read");
    }
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    long l = -1;
    if (!ok || sscanf(line, "step-%ld", &l) != 1 || l < 0) {
        seterr(err, errlen, "%s: expected one line \"step-<iterations>\", found \"%.40s\" (not a dsgd-run checkpoint directory?)", path,
               ok ? line : "");
        return -1;
    }
    snprintf(path, sizeof path, "%s/step-%ld", dir, l);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        seterr(err, errlen, "%s/latest names step-%ld, but %s is missing: the checkpoint directory was changed by hand", dir, l, path);
        return -1;
    }
    *label = l;
    return 1;
}

int ckpt_prepare(const char *dir, long label, char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/step-%ld.tmp", dir, label);
    if (mkdirs(dir, "the checkpoints", err, errlen) < 0) return -1;
    if (rm_rf(tmp) < 0) return syserr(err, errlen, tmp, "cannot remove a stale partial checkpoint");
    if (mkdir(tmp, 0777) != 0) return syserr(err, errlen, tmp, "cannot create");
    return 0;
}

int ckpt_commit(const char *dir, long label, char *err, size_t errlen) {
    char tmp[4200], fin[4200], lt[4200], lf[4200];
    snprintf(tmp, sizeof tmp, "%s/step-%ld.tmp", dir, label);
    snprintf(fin, sizeof fin, "%s/step-%ld", dir, label);
    snprintf(lt, sizeof lt, "%s/.latest.%ld", dir, (long)getpid());
    snprintf(lf, sizeof lf, "%s/latest", dir);
    if (rm_rf(fin) < 0) return syserr(err, errlen, fin, "cannot remove an older checkpoint of the same step");
    if (rename(tmp, fin) != 0) return syserr(err, errlen, fin, "cannot rename the new checkpoint into place");
    FILE *f = fopen(lt, "w");
    if (!f) return syserr(err, errlen, lt, "cannot create");
    int bad = fprintf(f, "step-%ld\n", label) < 0;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad) { unlink(lt); return syserr(err, errlen, lt, "cannot write"); }
    if (rename(lt, lf) != 0) { unlink(lt); return syserr(err, errlen, lf, "cannot replace"); }
    /* The new checkpoint is committed: the older ones go. */
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long l;
        int tmp;
        if (step_name(de->d_name, &l, &tmp) && (l != label || tmp)) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            rm_rf(p);
        }
    }
    closedir(d);
    return 0;
}

void ckpt_abandon(const char *dir, long label) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/step-%ld.tmp", dir, label);
    rm_rf(tmp);
}

int ckpt_remove_all(const char *dir, char *err, size_t errlen) {
    char p[4200];
    snprintf(p, sizeof p, "%s/latest", dir);
    if (unlink(p) != 0 && errno != ENOENT && errno != ENOTDIR) return syserr(err, errlen, p, "cannot remove");
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        long l;
        int tmp;
        if (step_name(de->d_name, &l, &tmp)) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (rm_rf(p) < 0) rc = syserr(err, errlen, p, "cannot remove");
        }
    }
    closedir(d);
    return rc;
}

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
    f->file = H5Fcreate(f->path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (f->file < 0) {
        seterr(err, errlen, "%s: cannot create the checkpoint file (HDF5 H5Fcreate failed)", f->path);
        free(f);
        return NULL;
    }
    /* Every file names its checkpoint, so a file moved between checkpoints is noticed. */
    const int64_t l[3] = {label, rank, (int64_t)g_run_id};
    if (ckpt_put_i64(f, "label_rank_run", l, 3)) {
        seterr(err, errlen, "%s", f->err);
        ckpt_free(f);
        return NULL;
    }
    return f;
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

ckpt_file *ckpt_open(const char *dir, long label, int rank, char *err, size_t errlen) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ckpt_file *f = xcalloc(1, sizeof *f);
    rank_path(f->path, sizeof f->path, dir, label, rank, 0);
    if (access(f->path, R_OK) != 0) {
        seterr(err, errlen, "%s: %s (the checkpoint has no state for rank %d: was it written with another p or method?)", f->path,
               strerror(errno), rank);
        free(f);
        return NULL;
    }
    f->file = H5Fopen(f->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f->file < 0) {
        seterr(err, errlen, "%s: cannot open the checkpoint file (HDF5 H5Fopen failed: not an HDF5 file, or truncated?)", f->path);
        free(f);
        return NULL;
    }
    int64_t l[3] = {-1, -1, 0};
    if (ckpt_get_i64(f, "label_rank_run", l, 3)) {
        seterr(err, errlen, "%s", f->err);
        ckpt_free(f);
        return NULL;
    }
    if (g_run_id && (uint64_t)l[2] != g_run_id) {
        seterr(err, errlen, "%s was written by another run (run id %016llx, this run's checkpoint is %016llx): the checkpoint "
               "directory was changed by hand", f->path, (unsigned long long)l[2], (unsigned long long)g_run_id);
        ckpt_free(f);
        return NULL;
    }
    if (l[0] != label || l[1] != rank) {
        seterr(err, errlen, "%s holds the state of rank %lld after %lld iterations, not of rank %d after %ld: the checkpoint directory "
               "was changed by hand", f->path, (long long)l[1], (long long)l[0], rank, label);
        ckpt_free(f);
        return NULL;
    }
    return f;
}

int ckpt_claim(const char *dir, char *err, size_t errlen) {
    if (mkdirs(dir, "the checkpoints", err, errlen) < 0) return -1;
    if (access(dir, W_OK | X_OK) != 0) return syserr(err, errlen, dir, "the checkpoint directory is not writable");
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return syserr(err, errlen, p, "cannot create the lock file");
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            seterr(err, errlen, "%s is in use by another run (it holds the lock %s): two runs cannot share a checkpoint directory", dir, p);
            close(fd);
            return -1;
        }
        /* file systems without locks: go on unlocked */
    }
    return fd;
}

static int put(ckpt_file *f, const char *name, hid_t ftype, hid_t mtype, const void *v, size_t n) {
    if (f->err[0]) return -1;
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    if (sp < 0) return ferr(f, "H5Screate_simple", name);
    hid_t ds = H5Dcreate2(f->file, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(sp);
    if (ds < 0) return ferr(f, "H5Dcreate2", name);
    int rc = n && H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0 ? ferr(f, "H5Dwrite", name) : 0;
    if (H5Dclose(ds) < 0 && !rc) rc = ferr(f, "H5Dclose", name);
    return rc;
}

/* Open dataset name of a reader: its id and number of values; -1 with f->err filled. */
static hid_t open_1d(ckpt_file *f, const char *name, hssize_t *len) {
    if (f->err[0]) return -1;
    if (H5Lexists(f->file, name, H5P_DEFAULT) <= 0) {
        seterr(f->err, sizeof f->err, "%s: no dataset '%s' (a checkpoint of another method or version?)", f->path, name);
        return -1;
    }
    hid_t ds = H5Dopen2(f->file, name, H5P_DEFAULT);
    if (ds < 0) return ferr(f, "H5Dopen2", name);
    hid_t sp = H5Dget_space(ds);
    *len = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (sp >= 0) H5Sclose(sp);
    return ds;
}

static int get(ckpt_file *f, const char *name, hid_t mtype, void *v, size_t n, const char *tname) {
    hssize_t have = -1;
    hid_t ds = open_1d(f, name, &have);
    if (ds < 0) return -1;
    int rc = 0;
    if (have != (hssize_t)n)
        rc = -1, seterr(f->err, sizeof f->err, "%s: dataset '%s' has %lld %s values, expected %zu (a checkpoint of another model, p or method?)",
                        f->path, name, (long long)have, tname, n);
    else if (n && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
        rc = ferr(f, "H5Dread", name);
    H5Dclose(ds);
    return rc;
}

int ckpt_put_f32(ckpt_file *f, const char *name, const float *v, size_t n) { return put(f, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, v, n); }
int ckpt_put_f64(ckpt_file *f, const char *name, const double *v, size_t n) { return put(f, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, n); }
int ckpt_put_i64(ckpt_file *f, const char *name, const int64_t *v, size_t n) { return put(f, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v, n); }
int ckpt_get_f32(ckpt_file *f, const char *name, float *v, size_t n) { return get(f, name, H5T_NATIVE_FLOAT, v, n, "float32"); }
int ckpt_get_f64(ckpt_file *f, const char *name, double *v, size_t n) { return get(f, name, H5T_NATIVE_DOUBLE, v, n, "float64"); }
int ckpt_get_i64(ckpt_file *f, const char *name, int64_t *v, size_t n) { return get(f, name, H5T_NATIVE_INT64, v, n, "int64"); }

/* Strings are uint8 datasets of their bytes (no NUL): exact, and readable by any HDF5 tool. */
int ckpt_put_str(ckpt_file *f, const char *name, const char *s) { return put(f, name, H5T_STD_U8LE, H5T_NATIVE_UCHAR, s, strlen(s)); }

int ckpt_get_str(ckpt_file *f, const char *name, char *s, size_t n) {
    hssize_t len = -1;
    hid_t ds = open_1d(f, name, &len);
    if (ds < 0) return -1;
    int rc = 0;
    if (len < 0 || (size_t)len >= n) rc = -1, seterr(f->err, sizeof f->err, "%s: dataset '%s' is too long (%lld bytes)", f->path, name, (long long)len);
    else if (len && H5Dread(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, s) < 0) rc = ferr(f, "H5Dread", name);
    else s[len] = '\0';
    H5Dclose(ds);
    return rc;
}

int ckpt_close(ckpt_file *f) {
    if (!f || f->file < 0) return f && f->err[0] ? -1 : 0;
    if (f->writing && H5Fflush(f->file, H5F_SCOPE_LOCAL) < 0) ferr(f, "H5Fflush", "the file");
    if (H5Fclose(f->file) < 0) ferr(f, "H5Fclose", "the file");
    f->file = H5I_INVALID_HID;
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
                       char *err, size_t errlen) {
    *differs = 0;
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

/* ---- the run file and the experiment ------------------------------------------------------ */

int ckpt_run_attr(const char *path, const char *name, char *buf, size_t n, char *err, size_t errlen) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    buf[0] = '\0';
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return seterr(err, errlen, "%s: cannot open the run file (HDF5 H5Fopen failed)", path), -1;
    int rc = 0;
    if (H5Aexists(f, name) > 0) {
        hid_t a = H5Aopen(f, name, H5P_DEFAULT);
        hid_t t = a >= 0 ? H5Aget_type(a) : -1;
        if (t >= 0 && H5Tis_variable_str(t) > 0) {
            char *s = NULL; /* read as stored (the character set of the file's type) */
            if (H5Aread(a, t, &s) >= 0) {
                snprintf(buf, n, "%s", s ? s : "");
                H5free_memory(s);
            } else rc = -1;
        } else if (t >= 0) {
            size_t sz = H5Tget_size(t);
            char *s = xcalloc(sz + 1, 1);
            if (H5Aread(a, t, s) >= 0) snprintf(buf, n, "%s", s);
            else rc = -1;
            free(s);
        } else rc = -1;
        if (t >= 0) H5Tclose(t);
        if (a >= 0) H5Aclose(a);
        if (rc) seterr(err, errlen, "%s: cannot read the attribute '%s'", path, name);
    }
    H5Fclose(f);
    return rc;
}

/* Keys that may differ between the parts of one run. */
static int ignored_key(const char *key) {
    static const char *const ok[] = {"resume", "overwrite", "checkpoint.every", "checkpoint.path", "checkpoint.bitwise",
                                     "comm_timeout_s", "threads", "log_every"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(ok[i], key)) return 1;
    return 0;
}

/* The next "key = value;" line of config_to_text output at *p: full dotted key and value. */
static int next_kv(const char **p, char *group, char *key, size_t kn, char *val, size_t vn) {
    while (**p) {
        const char *line = *p, *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        *p = nl ? nl + 1 : line + len;
        while (len && (*line == ' ' || *line == '\t')) line++, len--;
        const char *eq = memchr(line, '=', len);
        if (!eq) {
            if (len >= 2 && line[0] == '}') group[0] = '\0';
            continue;
        }
        size_t kl = (size_t)(eq - line);
        while (kl && line[kl - 1] == ' ') kl--;
        const char *v = eq + 1;
        size_t vl = len - (size_t)(v - line);
        while (vl && *v == ' ') v++, vl--;
        if (vl && v[0] == '{') { /* "name = {": a group opens */
            snprintf(group, 64, "%.*s", (int)kl, line);
            continue;
        }
        while (vl && (v[vl - 1] == ';' || v[vl - 1] == ' ')) vl--;
        if (group[0]) snprintf(key, kn, "%s.%.*s", group, (int)kl, line);
        else snprintf(key, kn, "%.*s", (int)kl, line);
        snprintf(val, vn, "%.*s", (int)vl, v);
        return 1;
    }
    return 0;
}

int ckpt_compare_config(const char *saved, const char *now, char *err, size_t errlen) {
    const char *a = saved, *b = now;
    char ga[64] = "", gb[64] = "", ka[128], kb[128], va[4 * CFG_PATH_MAX], vb[4 * CFG_PATH_MAX];
    for (;;) {
        int ha = next_kv(&a, ga, ka, sizeof ka, va, sizeof va), hb = next_kv(&b, gb, kb, sizeof kb, vb, sizeof vb);
        if (!ha && !hb) return 0;
        if (!ha || !hb || strcmp(ka, kb) != 0) {
            seterr(err, errlen, "the checkpoint's experiment has other keys (%s) than this one (%s): written by another version of dsgd-run?",
                   ha ? ka : "(end)", hb ? kb : "(end)");
            return -1;
        }
        if (!ignored_key(ka) && strcmp(va, vb) != 0) {
            seterr(err, errlen, "key '%s': the checkpoint was written with %s = %s, the experiment now has %s = %s; a run continues "
                   "only with the experiment it started with (only resume, overwrite, checkpoint.*, comm_timeout_s, threads and "
                   "log_every may change)", ka, ka, va, ka, vb);
            return -1;
        }
    }
}
