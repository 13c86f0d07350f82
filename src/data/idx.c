/* idx.c — reader for the IDX files of the MNIST family (see idx.h).
 *
 * Files are read through zlib's gz* API, which passes raw files through unchanged and inflates
 * gzip files, so train-images-idx3-ubyte and train-images-idx3-ubyte.gz both work. Everything a
 * file declares is checked before it is trusted: the magic, the dimensions, that exactly the
 * declared number of bytes follows the header (no fewer: truncated; no more: trailing garbage),
 * and, once images and labels are both in, that the counts agree and the labels are sane.
 * Every error message starts with the path of the offending file. */
#include "data/idx.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "util/util.h"

enum {
    IDX_MAGIC_IMAGES = 0x00000803, /* unsigned byte, rank 3: (n, rows, cols) */
    IDX_MAGIC_LABELS = 0x00000801, /* unsigned byte, rank 1: (n) */
    IDX_MAX_SIDE = 4096,           /* largest accepted rows / cols */
};

/* gzread moves at most INT_MAX bytes per call; 16 MiB chunks keep the call count small (the
 * 47 MB Fashion-MNIST training images take three calls) without a giant single request. */
#define IDX_CHUNK ((size_t)16 << 20)
/* Initial allocation cap: a corrupt header may declare terabytes, so memory beyond this grows
 * only as data actually arrives; real data sets (< 64 MiB) are allocated once. */
#define IDX_INITIAL_CAP ((size_t)64 << 20)

/* Describe the current zlib error of gz (after gzread returned -1) without the "path: " prefix
 * zlib puts on its messages, since ours already start with the path. */
static void gz_message(gzFile gz, const char *path, char *buf, size_t buflen) {
    int code = Z_OK;
    const char *msg = gzerror(gz, &code);
    if (code == Z_ERRNO) { /* a system call failed */
        snprintf(buf, buflen, "%s", strerror(errno));
        return;
    }
    if (!msg || !*msg) msg = "unknown zlib error";
    size_t pl = strlen(path);
    if (strncmp(msg, path, pl) == 0 && strncmp(msg + pl, ": ", 2) == 0) msg += pl + 2;
    snprintf(buf, buflen, "%s%s", code == Z_DATA_ERROR ? "corrupt gzip data: " : "", msg);
}

/* Read up to nbytes into buf; returns the count read (short only at end of file) or -1 on a
 * read/decompression error, with the message in err. */
static long long gz_read_full(gzFile gz, void *buf, size_t nbytes, const char *path, char *err,
                              size_t errlen) {
    size_t got = 0;
    while (got < nbytes) {
        size_t want = nbytes - got < IDX_CHUNK ? nbytes - got : IDX_CHUNK;
        int k = gzread(gz, (char *)buf + got, (unsigned)want);
        if (k < 0) {
            char msg[256];
            gz_message(gz, path, msg, sizeof msg);
            seterr(err, errlen, "%s: read error: %s", path, msg);
            return -1;
        }
        if (k == 0) break;
        got += (size_t)k;
    }
    return (long long)got;
}

/* Suffix for a truncated gzip stream, which zlib reports as a short read plus Z_BUF_ERROR. */
static const char *gz_cut_note(gzFile gz) {
    int code = Z_OK;
    gzerror(gz, &code);
    return code == Z_BUF_ERROR ? " (the gzip stream ends early)" : "";
}

/* Read one IDX file of unsigned bytes with the given magic and rank (1 or 3) into a fresh
 * buffer *data; dims[0..rank) receive the dimensions. Returns 0 or EXIT_BADINPUT with err set;
 * nothing is left allocated on error. */
static int idx_read(const char *path, uint32_t magic, int rank, uint32_t dims[3], uint8_t **data,
                    size_t *nbytes, char *err, size_t errlen) {
    *data = NULL;
    *nbytes = 0;
    const char *what = rank == 3 ? "images" : "labels";
    /* every rank reads the file whole: a FIFO would block in open() with no writer, a device
     * never end; both are refused before they are opened */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return seterr(err, errlen, "%s: not a regular file (%s); expected an IDX %s file (.gz or raw)", path,
                      S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO" : "a device or socket", what);
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return seterr(err, errlen, "cannot open %s file %s: %s", what, path,
                      errno ? strerror(errno) : "out of memory in zlib");
    gzbuffer(gz, 1u << 20); /* larger than zlib's 8 KiB default: fewer read() calls */

    int rc = EXIT_BADINPUT;
    uint8_t *buf = NULL;
    uint8_t head[16];
    size_t head_bytes = 4 + 4 * (size_t)rank;
    long long k = gz_read_full(gz, head, head_bytes, path, err, errlen);
    if (k < 0) goto out;
    if (k < 4) {
        seterr(err, errlen, "%s: not an IDX %s file: %lld bytes, too short for the 4-byte magic%s",
               path, what, k, gz_cut_note(gz));
        goto out;
    }
    uint32_t found = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
    if (found != magic) {
        const char *hint = "";
        if (found == IDX_MAGIC_IMAGES) hint = " (this is an IDX image file)";
        else if (found == IDX_MAGIC_LABELS) hint = " (this is an IDX label file)";
        else if ((found >> 16) != 0) hint = " (not an IDX file)";
        seterr(err, errlen, "%s: bad magic 0x%08x, expected 0x%08x for IDX %s (unsigned byte, rank %d)%s",
               path, found, magic, what, rank, hint);
        goto out;
    }
    if ((size_t)k < head_bytes) {
        seterr(err, errlen, "%s: truncated IDX header: expected %zu bytes, found %lld%s", path,
               head_bytes, k, gz_cut_note(gz));
        goto out;
    }
    for (int i = 0; i < rank; i++) {
        const uint8_t *q = head + 4 + 4 * i;
        dims[i] = (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
    }
    if (dims[0] < 1 || dims[0] > INT_MAX) {
        seterr(err, errlen, "%s: bad dimensions: header declares %u %s (need 1..%d)", path,
               dims[0], what, INT_MAX);
        goto out;
    }
    if (rank == 3 && (dims[1] < 1 || dims[1] > IDX_MAX_SIDE || dims[2] < 1 || dims[2] > IDX_MAX_SIDE)) {
        seterr(err, errlen, "%s: bad dimensions: images of %u rows x %u cols (rows and cols must be in 1..%d)",
               path, dims[1], dims[2], IDX_MAX_SIDE);
        goto out;
    }

    size_t expected = dims[0];
    if (rank == 3) expected *= (size_t)dims[1] * dims[2]; /* <= 2^31 * 2^24: fits 64-bit size_t */
    size_t cap = expected < IDX_INITIAL_CAP ? expected : IDX_INITIAL_CAP;
    buf = xmalloc(cap);
    size_t got = 0;
    for (;;) {
        k = gz_read_full(gz, buf + got, cap - got, path, err, errlen);
        if (k < 0) goto out;
        got += (size_t)k;
        if (got < cap || cap == expected) break; /* end of file, or everything declared is in */
        size_t grown = cap * 2 < expected ? cap * 2 : expected;
        uint8_t *nb = realloc(buf, grown);
        if (!nb) DIE("out of memory allocating %zu bytes for %s", grown, path);
        buf = nb;
        cap = grown;
    }
    if (got < expected) {
        seterr(err, errlen, "%s: truncated: the header declares %zu data bytes, found %zu%s", path,
               expected, got, gz_cut_note(gz));
        goto out;
    }
    /* Anything after the declared data means the header and the contents disagree. */
    size_t extra = 0;
    uint8_t tail[4096];
    for (;;) {
        k = gz_read_full(gz, tail, sizeof tail, path, err, errlen);
        if (k < 0) goto out;
        extra += (size_t)k;
        if ((size_t)k < sizeof tail) break;
    }
    if (extra) {
        seterr(err, errlen, "%s: trailing garbage: %zu bytes after the %zu data bytes the header declares",
               path, extra, expected);
        goto out;
    }
    *data = buf;
    *nbytes = expected;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    gzclose(gz);
    return rc;
}

int dataset_load(dataset *d, const char *images_path, const char *labels_path, int max_classes,
                 char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (max_classes <= 0 || max_classes > 256) max_classes = 256;

    uint32_t idims[3], ldims[3];
    uint8_t *x = NULL, *y = NULL;
    size_t xbytes, ybytes;
    int rc = idx_read(images_path, IDX_MAGIC_IMAGES, 3, idims, &x, &xbytes, err, errlen);
    if (rc) return rc;
    rc = idx_read(labels_path, IDX_MAGIC_LABELS, 1, ldims, &y, &ybytes, err, errlen);
    if (rc) goto fail;
    if (idims[0] != ldims[0]) {
        rc = seterr(err, errlen, "sample counts disagree: %s has %u images but %s has %u labels",
                    images_path, idims[0], labels_path, ldims[0]);
        goto fail;
    }

    int n = (int)idims[0];
    int max_label = -1;
    uint64_t count[256] = {0};
    int first[256];
    for (int i = 0; i < n; i++) {
        if (y[i] >= max_classes) {
            rc = seterr(err, errlen, "%s: label %d of sample %d is out of range 0..%d (max_classes = %d)",
                        labels_path, y[i], i, max_classes - 1, max_classes);
            goto fail;
        }
        if (y[i] > max_label) max_label = y[i];
        if (count[y[i]]++ == 0) first[y[i]] = i;
    }
    /* Classes are 0..max_label; a hole means the labels are not what the model is sized for. */
    int n_missing = 0, first_missing = -1;
    for (int k = 0; k <= max_label; k++)
        if (count[k] == 0 && n_missing++ == 0) first_missing = k;
    if (n_missing) {
        /* Usually a stray large label (a corrupt byte) above a hole, rather than a class lost. */
        rc = seterr(err, errlen, "%s: class %d never occurs among the %d labels (%d of classes 0..%d missing), "
                    "while the largest label, %d, occurs %llu time(s) (first in sample %d); the label file may be corrupt",
                    labels_path, first_missing, n, n_missing, max_label, max_label,
                    (unsigned long long)count[max_label], first[max_label]);
        goto fail;
    }

    d->n = n;
    d->c = 1;
    d->h = (int)idims[1];
    d->w = (int)idims[2];
    d->n_classes = max_label + 1;
    d->x = x;
    d->y = y;
    return 0;
fail:
    free(x);
    free(y);
    return rc;
}

void dataset_free(dataset *d) {
    if (!d) return;
    if (!d->borrowed) {
        free(d->x);
        free(d->y);
    }
    memset(d, 0, sizeof *d);
}

enum { BLOCK_HEAD = 64 }; /* keeps x 64-byte aligned when the block is */

size_t dataset_block_bytes(const dataset *d) {
    return BLOCK_HEAD + (size_t)d->n * d->c * d->h * d->w + (size_t)d->n;
}

void dataset_block_write(const dataset *d, void *out) {
    int32_t head[BLOCK_HEAD / 4] = {d->n, d->c, d->h, d->w, d->n_classes};
    const size_t xb = (size_t)d->n * d->c * d->h * d->w;
    memcpy(out, head, sizeof head);
    memcpy((uint8_t *)out + BLOCK_HEAD, d->x, xb);
    memcpy((uint8_t *)out + BLOCK_HEAD + xb, d->y, (size_t)d->n);
}

void dataset_view(dataset *d, const void *block) {
    int32_t head[BLOCK_HEAD / 4];
    memcpy(head, block, sizeof head);
    memset(d, 0, sizeof *d);
    d->n = head[0], d->c = head[1], d->h = head[2], d->w = head[3], d->n_classes = head[4];
    /* read-only in practice (mprotect'ed when shared): the fields are not const for the owned case */
    d->x = (uint8_t *)block + BLOCK_HEAD;
    d->y = d->x + (size_t)d->n * d->c * d->h * d->w;
    d->borrowed = 1;
}
