/* pack_write.h — pack_write.c's exports, for `dsgd-run --pack` (src/data/ only): one rank's
 * packing pipeline (worker threads convert images, the calling thread writes the shards) and the
 * publication of a finished file under its final name. */
#ifndef DSGD_PACK_WRITE_H
#define DSGD_PACK_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "pack_sources.h"

#define PACK_SUBSAMPLING "4:2:0" /* what every shard and the index record */
#define PACK_INTERP "bicubic"

/* Shards of a split: a seeded permutation cut into K contiguous parts. */
typedef struct {
    int n_shards;
    uint32_t *perm;    /* (n) source indices in shard order */
    int64_t *start;    /* (K + 1) shard k = perm[start[k], start[k+1]) */
} split_plan;

/* What a rank packed: per split and shard n, skipped, bytes; totals. */
typedef struct {
    double *n[N_SPLITS], *skipped[N_SPLITS], *nbytes[N_SPLITS];
    double packed, n_skipped, warned, bytes;
} pack_stats;

/* Pack this rank's shards (k ≡ rank (mod ranks) of every present split of ss, as plans cut them)
 * with nthreads worker threads, each into o->out/<name>.tmp published by pack_publish; fills st
 * (per split and shard: images, skipped, bytes; the rank's totals). Prints skipped images and
 * decoder warnings on stderr, progress on rank 0, one "wrote" line per shard. 0 or EXIT_RUNTIME
 * with err. */
int pack_run_pipeline(const pack_options *o, const source_set *ss, const split_plan *plans, int nthreads, pack_stats *st, int rank,
                      int ranks, char *err, size_t errlen);

/* Publish tmp as final: fsync tmp, link it to final (fails if final exists: nothing is ever
 * replaced), remove tmp, fsync the directory dir. 0 or EXIT_RUNTIME with err. */
int pack_publish(const char *tmp, const char *final, const char *dir, char *err, size_t errlen);

#endif
