/* idx.h — the IDX file format of the MNIST family (LeCun et al.; Fashion-MNIST uses the same
 * files): big-endian header, magic 0x00000803 for images (n, rows, cols, u8) and 0x00000801 for
 * labels (n, u8). Read raw or gzip-compressed (zlib's gz* API detects which).
 *
 * Errors: return 0 or EXIT_BADINPUT (2) with err naming the file and what is wrong (missing,
 * not gzip/IDX, bad magic, bad dimensions, truncated: expected vs. found byte counts). */
#ifndef DSGD_IDX_H
#define DSGD_IDX_H

#include <stddef.h>
#include <stdint.h>

/* A labelled image set held in memory as the file stores it (u8 pixels). */
typedef struct {
    int n;             /* number of samples */
    int c, h, w;       /* channels (1 for IDX rank-3 images), rows, cols */
    int n_classes;     /* max label + 1 of the set the classes were taken from */
    uint8_t *x;        /* (n, c, h, w) */
    uint8_t *y;        /* (n) */
    int borrowed;      /* 1: x and y point into memory someone else owns (dataset_view); dataset_free leaves it */
} dataset;

/* Load images and labels into d; counts must agree and every label must be < max_classes
 * (256 when max_classes <= 0). Sets d->n_classes = max label + 1. */
int dataset_load(dataset *d, const char *images_path, const char *labels_path, int max_classes,
                 char *err, size_t errlen);
void dataset_free(dataset *d);

/* A loaded set as one block of bytes, for one copy shared by a node's ranks (src/run/setup.c,
 * comm_node_share): a 64-byte header (n, c, h, w, n_classes as int32), then x, then y.
 * dataset_block_bytes: its size (64 + n·c·h·w + n); dataset_block_write: d into out (that many
 * bytes); dataset_view: d describes the block in place (no copy; d->borrowed = 1, the block must
 * outlive d), with the same n, c, h, w, n_classes and the same bytes of x and y as the set that
 * was written. */
size_t dataset_block_bytes(const dataset *d);
void dataset_block_write(const dataset *d, void *out);
void dataset_view(dataset *d, const void *block);

#endif
