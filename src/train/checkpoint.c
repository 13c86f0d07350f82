/* checkpoint.c — the checkpoint directory (see checkpoint.h): its name, its lock, `latest`, and
 * the commit protocol's file operations; and what a resume reads of the run file and compares of
 * the experiment. One rank's file is checkpoint_file.c's, the signal flags checkpoint_signal.c's. */
#define _GNU_SOURCE
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include "io/h5.h"
#include "util/util.h"
#include <time.h>

/* ---- directories -------------------------------------------------------------------------- */

void ckpt_dir_of(const experiment *e, char *dir, size_t n) {
    const size_t len = strlen(e->output);
    const int h5 = len > 3 && strcmp(e->output + len - 3, ".h5") == 0;
    if (e->checkpoint.path[0]) snprintf(dir, n, "%s", e->checkpoint.path);
    else snprintf(dir, n, "%.*s.ckpt", (int)(h5 ? len - 3 : len), e->output);
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

static int g_keep = 2; /* ckpt_set_keep */

void ckpt_set_keep(int keep) { g_keep = keep >= 1 ? keep : 1; }

static int by_label_desc(const void *a, const void *b) {
    const long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The committed step directories (step-<N>, not .tmp) of dir with N < below, newest first, into
 * labels (at most n); returns how many were written. */
static int list_steps(const char *dir, long below, long *labels, int n) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    long *all = NULL;
    size_t k = 0, cap = 0;
    while ((de = readdir(d))) {
        long l;
        int tmp;
        if (!step_name(de->d_name, &l, &tmp) || tmp || l >= below) continue;
        if (k == cap) {
            long *more = realloc(all, (cap ? 2 * cap : 16) * sizeof *all);
            if (!more) break; /* out of memory: the newest found so far */
            all = more, cap = cap ? 2 * cap : 16;
        }
        all[k++] = l;
    }
    closedir(d);
    if (k) qsort(all, k, sizeof *all, by_label_desc);
    const int m = (size_t)n < k ? n : (int)k;
    for (int i = 0; i < m; i++) labels[i] = all[i];
    free(all);
    return m;
}

long ckpt_previous(const char *dir, long below) {
    long l = -1;
    return list_steps(dir, below, &l, 1) > 0 ? l : -1;
}

/* Remove the step directories in dir (step_name) but those in keep[0..n_keep). Returns 0, or -1
 * with err naming the last one that could not be removed. */
static int rm_steps(const char *dir, const long *keep, int n_keep, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        long l;
        int tmp, kept = 0;
        if (!step_name(de->d_name, &l, &tmp)) continue;
        for (int i = 0; i < n_keep && !tmp; i++) kept |= keep[i] == l;
        if (!kept) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (rm_rf(p) < 0) rc = syserr(err, errlen, p, "cannot remove");
        }
    }
    closedir(d);
    return rc;
}

/* fsync the file or directory at path (opened read-only: Linux syncs a directory, or a file
 * written through another descriptor, by any descriptor of it). 0, or -1 with errno set. */
static int fsync_path(const char *path) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    /* some file systems cannot fsync a directory (EINVAL, EROFS, ENOTSUP): nothing to wait for */
    if (rc != 0 && (errno == EINVAL || errno == EROFS || errno == ENOTSUP)) rc = 0;
    const int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int ckpt_fsync(const char *path, char *err, size_t errlen) {
    return fsync_path(path) == 0 ? 0 : syserr(err, errlen, path, "cannot fsync");
}

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
    /* Every part was fsync'ed by its writer (ckpt_close) before it reported; their names in
     * step-<label>.tmp/ are made durable here, the rename and `latest` below: after a crash of the
     * node (not only of the process) `latest` names a complete checkpoint. */
    if (ckpt_fsync(tmp, err, errlen)) return -1;
    if (rm_rf(fin) < 0) return syserr(err, errlen, fin, "cannot remove an older checkpoint of the same step");
    if (rename(tmp, fin) != 0) return syserr(err, errlen, fin, "cannot rename the new checkpoint into place");
    if (ckpt_fsync(dir, err, errlen)) return -1;
    FILE *f = fopen(lt, "w");
    if (!f) return syserr(err, errlen, lt, "cannot create");
    int bad = fprintf(f, "step-%ld\n", label) < 0;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad) { unlink(lt); return syserr(err, errlen, lt, "cannot write"); }
    if (rename(lt, lf) != 0) { unlink(lt); return syserr(err, errlen, lf, "cannot replace"); }
    if (ckpt_fsync(dir, err, errlen)) return -1;
    /* Committed: keep it and the checkpoint.keep - 1 before it; the others go, and so do step
     * directories after it (a resume that fell back from an unreadable newer one) and .tmp ones. */
    long keep[1001];
    keep[0] = label;
    rm_steps(dir, keep, 1 + list_steps(dir, label, keep + 1, g_keep - 1), err, errlen);
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
    return rm_steps(dir, NULL, 0, err, errlen);
}

int ckpt_remove_completed(const char *dir, char *err, size_t errlen) {
    if (ckpt_remove_all(dir, err, errlen)) return -1;
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", dir);
    unlink(p);  /* this process holds it: nobody waits on it once the run has ended */
    rmdir(dir); /* only if nothing else is in it (files of the user stay, and so does the directory) */
    return 0;
}

int ckpt_claim(const char *dir, char *err, size_t errlen) {
    if (mkdirs(dir, "the checkpoints", err, errlen) < 0) return -1;
    if (access(dir, W_OK | X_OK) != 0) return syserr(err, errlen, dir, "the checkpoint directory is not writable");
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return syserr(err, errlen, p, "cannot create the lock file");
    /* A lock held by a node that failed outlives it until its lease expires or it is evicted
     * (NFSv4: ~90 s, Lustre similar): a requeued run started elsewhere waits for it, bounded. */
    const char *w = getenv("DSGD_CKPT_LOCK_WAIT_S");
    const double wait_s = w && *w ? atof(w) : CKPT_LOCK_WAIT_S, t0 = wall_time();
    for (int said = 0; flock(fd, LOCK_EX | LOCK_NB) != 0;) {
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) break; /* file systems without locks: go on unlocked */
        const double waited = wall_time() - t0;
        if (waited >= wait_s || ckpt_signal_pending() == CKPT_SIG_STOP) {
            char after[64] = "";
            if (waited > 0.5) snprintf(after, sizeof after, ", still after %.0f s of waiting", waited);
            seterr(err, errlen, "%s is in use by another run (it holds the lock %s%s): two runs cannot share a checkpoint "
                   "directory", dir, p, after);
            close(fd);
            return -1;
        }
        if (!said++)
            fprintf(stderr, "dsgd-run: %s is locked by another process (%s); waiting up to %.0f s for it (the lock of a node "
                    "that failed is released when its lease expires)\n", dir, p, wait_s), fflush(stderr);
        struct timespec ts = {0, 250000000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

int ckpt_in_use(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", dir);
    const int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* releases the shared lock if it was taken */
    return held;
}

/* ---- the run file and the experiment ------------------------------------------------------ */

int ckpt_run_attr(const char *path, const char *name, char *buf, size_t n, char *err, size_t errlen) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    buf[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) != 0) return seterr(err, errlen, "%s: cannot open the run file: %s", path, strerror(errno)), -1;
    hid_t f = h5_fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT); /* unlocked: h5.h */
    if (f < 0) return seterr(err, errlen, "%s: cannot open the run file (HDF5 H5Fopen failed: not an HDF5 file?)", path), -1;
    int rc = 0;
    if (H5Aexists(f, name) > 0 && (rc = h5_attr_read_str(f, name, buf, n)) < 0)
        seterr(err, errlen, "%s: cannot read the attribute '%s'", path, name);
    H5Fclose(f);
    return rc;
}

/* Keys that may differ between the parts of one run. */
static int ignored_key(const char *key) {
    static const char *const ok[] = {"resume", "overwrite", "stop_at", "checkpoint.every", "checkpoint.path", "checkpoint.bitwise",
                                     "checkpoint.keep", "checkpoint.keep_completed", "comm_timeout_s", "threads", "log_every"};
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
        snprintf(key, kn, "%s%s%.*s", group, group[0] ? "." : "", (int)kl, line);
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
        /* a key that may change and that one side lacks (an experiment of an earlier version): skipped */
        while (hb && (!ha || strcmp(ka, kb) != 0) && ignored_key(kb))
            hb = next_kv(&b, gb, kb, sizeof kb, vb, sizeof vb);
        while (ha && (!hb || strcmp(ka, kb) != 0) && ignored_key(ka))
            ha = next_kv(&a, ga, ka, sizeof ka, va, sizeof va);
        if (!ha && !hb) return 0;
        if (!ha || !hb || strcmp(ka, kb) != 0) {
            seterr(err, errlen, "the checkpoint's experiment has other keys (%s) than this one (%s): written by another version of dsgd-run?",
                   ha ? ka : "(end)", hb ? kb : "(end)");
            return -1;
        }
        if (!ignored_key(ka) && strcmp(va, vb) != 0) {
            seterr(err, errlen, "key '%s': the checkpoint was written with %s = %s, the experiment now has %s = %s; a run continues "
                   "only with the experiment it started with (only resume, overwrite, stop_at, checkpoint.*, comm_timeout_s, "
                   "threads and log_every may change)", ka, ka, va, ka, vb);
            return -1;
        }
    }
}
