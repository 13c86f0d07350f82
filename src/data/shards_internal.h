/* shards_internal.h — the reader's set of shards (struct shards), for the src/data/shards*.c
 * files only: shards_open.c opens a pack into it, shards.c reads samples from it, packs it for
 * another rank and frees it. */
#ifndef DSGD_SHARDS_INTERNAL_H
#define DSGD_SHARDS_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "data/shards.h"

struct shards {
    int n_files;
    char **paths;
    _Atomic int *fds;      /* (n_files) -1: not open yet (a set from shards_unpack opens on the first read) */
    int64_t *first;        /* (n_files + 1) first sample of each shard */
    int64_t n, skipped;
    uint64_t *pos;         /* (n) absolute file offset of sample i's bytes */
    uint32_t *nbytes;      /* (n) */
    int16_t *label;
    uint16_t *height, *width;
    int32_t *source;
    size_t max_nbytes;
    int max_side, n_classes;
    char split[32];
    char (*classes)[SHARDS_WNID_MAX + 1];
};

/* HDF5's automatic error printing off (shards.h "Errors"). */
static inline void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }
/* Grow the per-sample arrays of s to hold cap samples (dies when memory runs out). */
void shards_grow(shards *s, int64_t cap);

#endif
