/* runlog_publish.c — the mechanism of publishing a run file (parts 2 and 5 of runlog.c's header
 * comment), on an open in-memory HDF5 file, its path and the descriptor of the file published
 * last, knowing nothing of the runlog: the file's image written to a hidden temporary, fsync'ed
 * and renamed over the output (link() the first time); and the fixed-size status slot, written
 * in place into the published file when a publication fails. When to publish (part 3) is
 * runlog.c's. */
#include "runlog_publish.h"

#include "io/h5.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
/* Write v (cut to STATUS_LEN - 1 bytes at a UTF-8 character boundary) into root attribute
 * status of f: overwritten in place when it is already the fixed-size slot, else (a file of an
 * earlier dsgd-run, or a new file) created as one. */
int runlog_status_write(hid_t f, const char *v, const char *path, char *err, size_t errlen) {
    char buf[STATUS_LEN] = {0};
    size_t n = strlen(v);
    if (n > STATUS_LEN - 1) {
        n = STATUS_LEN - 1;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80) n--; /* v[n] continues a character */
    }
    memcpy(buf, v, n);
    hid_t t = h5_string_type(STATUS_LEN, 1); /* the slot: a fixed-size UTF-8 string, NUL-terminated */
    if (t < 0) return h5_fail(-1, err, errlen, path, "H5Tcopy/H5Tset_size", "attribute status of /");
    htri_t e = H5Aexists(f, "status");
    hid_t a = e > 0 ? H5Aopen(f, "status", H5P_DEFAULT) : H5I_INVALID_HID;
    hid_t ft = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
    htri_t same = ft >= 0 ? H5Tequal(ft, t) : -1;
    if (ft >= 0) H5Tclose(ft);
    int rc = e < 0 ? h5_fail(-1, err, errlen, path, "H5Aexists", "attribute status of /") : 0;
    if (rc == 0 && same > 0 && H5Awrite(a, t, buf) < 0) rc = h5_fail(-1, err, errlen, path, "H5Awrite", "attribute status of /");
    if (a >= 0 && H5Aclose(a) < 0 && rc == 0) rc = h5_fail(-1, err, errlen, path, "H5Aclose", "attribute status of /");
    /* none yet, or something else than the slot (replaced): created as the slot */
    if (rc == 0 && same <= 0) rc = h5_attr_write_err(f, "/", "status", t, t, buf, path, err, errlen);
    H5Tclose(t);
    return rc;
}

/* A hidden name next to path, unique to this process and moment: <dir>/.<base>.<tag>.<pid>.<ns>. */
int runlog_temp_name(char *out, size_t outlen, const char *path, const char *tag) {
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int n = snprintf(out, outlen, "%.*s.%s.%s.%ld.%09ld", dirlen, path, base, tag, (long)getpid(), (long)ts.tv_nsec);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

const char *runlog_already_exists_fmt = "%s already exists; use --set overwrite=true to replace it or choose another output";

/* Is the file at path still the one this run published last (open as fd)? 1 yes, 0 no (err
 * filled). */
static int still_ours(const char *path, int fd, char *err, size_t errlen) {
    struct stat sb, mine;
    if (fd >= 0 && stat(path, &sb) == 0 && fstat(fd, &mine) == 0 && sb.st_dev == mine.st_dev && sb.st_ino == mine.st_ino)
        return 1;
    seterr(err, errlen, "%s was replaced by another run while this one was writing it "
           "(two runs with the same output and overwrite = true?): this run's results are lost", path);
    return 0;
}

/* Write n bytes of buf to a new file tmp and fsync it. Returns its descriptor, or -1. */
static int write_new_file(const char *tmp, const void *buf, size_t n, char *err, size_t errlen) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return h5_syserr(err, errlen, tmp, "cannot create the new run file");
    const unsigned char *p = buf;
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0;) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) rc = h5_syserr(err, errlen, tmp, "cannot write the new run file");
        else off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) rc = h5_syserr(err, errlen, tmp, "cannot fsync the new run file");
    if (rc != 0) close(fd);
    return rc == 0 ? fd : -1;
}

/* Give tmp the name path for the first time: atomically replace with overwrite, else link()
 * (fails if path exists, so an earlier run is never replaced), else, where the file system has
 * no hard links, check-then-rename. */
static int first_name(const char *tmp, const char *path, int overwrite, char *err, size_t errlen) {
    if (overwrite) return rename(tmp, path) == 0 ? 0 : h5_syserr(err, errlen, path, "cannot rename the new run file into place");
    if (link(tmp, path) == 0) {
        unlink(tmp); /* published; a leftover hidden name would be harmless */
        return 0;
    }
    if (errno == EEXIST) return seterr(err, errlen, runlog_already_exists_fmt, path), -1;
    if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != ENOSYS && errno != EMLINK)
        return h5_syserr(err, errlen, path, "cannot link the new run file into place");
    struct stat st;
    if (lstat(path, &st) == 0) return seterr(err, errlen, runlog_already_exists_fmt, path), -1;
    return rename(tmp, path) == 0 ? 0 : h5_syserr(err, errlen, path, "cannot rename the new run file into place");
}

/* Publish the open in-memory HDF5 file at path (part 2 of runlog.c's header comment): flush it,
 * copy its image into *image (grown as needed), write that to a hidden temporary beside path,
 * fsync, then rename() it over the file published last (*fd open on it: checked to be still the
 * file at path), or, when *fd < 0 (the first publication), first_name() it. On success *fd is
 * the new file's descriptor (the old one closed) and 0 is returned; else -1 with err filled,
 * nothing at path changed and the temporary removed. */
int runlog_publish(hid_t file, const char *path, int *fd, image_buf *image, int overwrite, char *err, size_t errlen) {
    if (H5Fflush(file, H5F_SCOPE_LOCAL) < 0) return h5_fail(-1, err, errlen, path, "H5Fflush", "the in-memory file");
    ssize_t n = H5Fget_file_image(file, NULL, 0);
    if (n <= 0) return h5_fail(-1, err, errlen, path, "H5Fget_file_image", "the in-memory file");
    if ((size_t)n > image->cap) {
        free(image->data);
        image->cap = (size_t)n + (size_t)n / 4;
        image->data = xmalloc(image->cap);
    }
    if (H5Fget_file_image(file, image->data, (size_t)n) != n)
        return h5_fail(-1, err, errlen, path, "H5Fget_file_image", "the in-memory file");
    char tmp[PATHLEN];
    if (runlog_temp_name(tmp, sizeof tmp, path, "new") < 0) return seterr(err, errlen, "output path too long: %s", path), -1;
    int new_fd = write_new_file(tmp, image->data, (size_t)n, err, errlen), rc = new_fd < 0 ? -1 : 0;
    if (rc == 0 && *fd < 0) rc = first_name(tmp, path, overwrite, err, errlen);
    else if (rc == 0 && !still_ours(path, *fd, err, errlen)) rc = -1;
    else if (rc == 0 && rename(tmp, path) != 0)
        rc = h5_syserr(err, errlen, path, "cannot rename the new run file into place");
    if (rc != 0) {
        if (new_fd >= 0) close(new_fd);
        unlink(tmp); /* frees its space too (a full disk) */
        return -1;
    }
    if (*fd >= 0) close(*fd); /* the file just replaced */
    *fd = new_fd;
    return 0;
}

/* A publication failed with why: write "stopped: run-file write error: <why>" into the status
 * slot of the file at path, in place, if it is still the one published last (open as fd) (part
 * 5 of the header comment). Returns 0 or -1 (the reason on stderr). */
int runlog_status_in_place(const char *path, int fd, const char *why) {
    char msg[ERRLEN + 64], err[ERRLEN];
    snprintf(msg, sizeof msg, "stopped: run-file write error: %s", why);
    if (!still_ours(path, fd, err, sizeof err)) return -1;
    hid_t f = h5_fopen(path, H5F_ACC_RDWR, H5P_DEFAULT); /* unlocked: h5.h */
    int rc = f < 0 ? h5_fail(-1, err, sizeof err, path, "H5Fopen", "the published run file") : 0;
    if (rc == 0) rc = runlog_status_write(f, msg, path, err, sizeof err);
    if (f >= 0 && H5Fclose(f) < 0 && rc == 0) rc = h5_fail(-1, err, sizeof err, path, "H5Fclose", "the published run file");
    H5Eclear2(H5E_DEFAULT);
    if (rc != 0) fprintf(stderr, "dsgd-run: cannot record the status in %s either: %s\n", path, err);
    return rc;
}
