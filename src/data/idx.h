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
} dataset;

/* Load images and labels into d; counts must agree and every label must be < max_classes
 * (256 when max_classes <= 0). Sets d->n_classes = max label + 1. */
int dataset_load(dataset *d, const char *images_path, const char *labels_path, int max_classes,
                 char *err, size_t errlen);
void dataset_free(dataset *d);

#endif
