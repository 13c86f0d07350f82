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
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include "io/h5.h"
#include "util/util.h"

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

/* Remove the step directories in dir (step_name): all of them, or all but step-<keep>. Returns 0,
 * or -1 with err naming the last one that could not be removed. */
static int rm_steps(const char *dir, long keep, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        long l;
        int tmp;
        if (step_name(de->d_name, &l, &tmp) && (l != keep || tmp)) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (rm_rf(p) < 0) rc = syserr(err, errlen, p, "cannot remove");
        }
    }
    closedir(d);
    return rc;
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
    if (rm_rf(fin) < 0) return syserr(err, errlen, fin, "cannot remove an older checkpoint of the same step");
    if (rename(tmp, fin) != 0) return syserr(err, errlen, fin, "cannot rename the new checkpoint into place");
    FILE *f = fopen(lt, "w");
    if (!f) return syserr(err, errlen, lt, "cannot create");
    int bad = fprintf(f, "step-%ld\n", label) < 0;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad) { unlink(lt); return syserr(err, errlen, lt, "cannot write"); }
    if (rename(lt, lf) != 0) { unlink(lt); return syserr(err, errlen, lf, "cannot replace"); }
    rm_steps(dir, label, err, errlen); /* the new checkpoint is committed: the older ones go */
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
    return rm_steps(dir, -1, err, errlen);
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
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return seterr(err, errlen, "%s: cannot open the run file (HDF5 H5Fopen failed: not an HDF5 file?)", path), -1;
    int rc = 0;
    if (H5Aexists(f, name) > 0 && (rc = h5_attr_read_str(f, name, buf, n)) < 0)
        seterr(err, errlen, "%s: cannot read the attribute '%s'", path, name);
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
