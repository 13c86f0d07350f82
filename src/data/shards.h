/* shards.h — packed image sets on disk: a few large HDF5 files ("shards") of re-encoded JPEG
 * bytes plus offsets, labels and sizes, written by `dsgd-run --pack` (src/data/pack.h) and read
 * by the loader (layout and rationale: docs/data.md "Packing"; notes/imagenet.md §5.1, the
 * "big file + index" idea of TFRecord, RecordIO and FFCV's .beton).
 *
 * One shard OUT/<split>-<k>-of-<K>.h5 (k, K: 5 digits) holds n samples:
 *   /jpeg          uint8[total bytes]  the JPEGs back to back; contiguous, no filters, so its file
 *                                      offset (H5Dget_offset) lets readers pread() sample bytes
 *                                      without HDF5
 *   /offset        uint64[n + 1]       sample i = /jpeg[offset[i], offset[i+1])
 *   /label         int16[n]            class index = position of the wnid in /classes
 *   /height, /width uint16[n]          of the stored JPEG, pixels
 *   /source_index  int32[n]            index into the split's sorted source list (index.h5)
 *   /skipped_source_index int32[s]     the sources of this shard that could not be packed
 *   /classes       string[C]           sorted wnids (fixed-length ASCII)
 *   root attributes: format, format_version, split, shard, n_shards, n, skipped, max_side,
 *   quality, subsampling, interp, num_classes, seed, packer.
 * OUT/index.h5 lists the shards of each split (/<split>/shards, /<split>/n) with totals and the
 * sorted source list (/<split>/sources); it is written last, so a pack without it is incomplete.
 *
 * Errors: functions returning int return 0 or EXIT_BADINPUT (2: a missing, foreign, truncated or
 * inconsistent file — err names the file and what was expected) or EXIT_RUNTIME (1: a write or
 * system failure). HDF5's automatic error printing is turned off for the process. */
#ifndef DSGD_SHARDS_H
#define DSGD_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#define SHARDS_FORMAT "dsgd-imagenet-shards"
#define SHARDS_FORMAT_VERSION 1
#define SHARDS_INDEX "index.h5"
#define SHARDS_MAX_CLASSES 32767 /* /label is int16 */
#define SHARDS_WNID_MAX 64       /* longest class name (bytes, without the NUL) */

/* The packing options a shard records (root attributes). */
typedef struct {
    const char *split;        /* "train" or "val" */
    int shard, n_shards;      /* k of K */
    int max_side, quality;    /* largest side of a stored JPEG (pixels); libjpeg quality 1..100 */
    const char *subsampling;  /* "4:2:0" */
    const char *interp;       /* "bicubic" */
    uint64_t seed;            /* of the permutation that spread the samples over the shards */
    int n_classes;
    const char *const *classes; /* (n_classes) sorted wnids */
} shard_meta;

/* Write one shard at path (created exclusively; the caller renames it into place) with n
 * samples: jpeg (total = offset[n] bytes), offset (n + 1, offset[0] = 0), label, height, width,
 * source_index (n each) and skipped (n_skipped source indices). Returns 0 or EXIT_RUNTIME. */
int shard_write(const char *path, const shard_meta *m, int64_t n, const uint8_t *jpeg, const uint64_t *offset,
                const int16_t *label, const uint16_t *height, const uint16_t *width, const int32_t *source_index,
                int64_t n_skipped, const int32_t *skipped, char *err, size_t errlen);

/* Shard file name of split, k of K: "<split>-<k:05>-of-<K:05>.h5". */
void shard_name(char *buf, size_t n, const char *split, int k, int n_shards);

/* One split of the index: its K shards (file names relative to the pack directory) with their
 * sample counts, skipped images and /jpeg bytes, and the sorted source list (paths relative to
 * SRC/<split>) that /source_index points into. */
typedef struct {
    const char *split;
    int n_shards;
    const int64_t *n, *skipped;
    const uint64_t *nbytes;
    int64_t n_sources;
    const char *const *sources;
} shards_index_split;

/* Write the index at path (created exclusively; the caller renames it into place): root
 * attributes as a shard's (from m, split and shard fields unused) and one group per split.
 * Returns 0 or EXIT_RUNTIME. */
int shards_write_index(const char *path, const shard_meta *m, const shards_index_split *splits, int n_splits, char *err,
                       size_t errlen);

/* ---- Reading --------------------------------------------------------------------------------
 *
 * shards_open reads every shard's /offset, /label, /height, /width and /source_index into
 * memory, takes /jpeg's file offset (H5Dget_offset) and keeps one plain read-only fd per shard;
 * HDF5 is closed again. (A run opens the pack on rank 0 only: shards_pack / shards_unpack below.) Sample i of the split (shards in index order, samples in shard order)
 * is then one pread(). Checked on open: the directory and its index exist; every listed shard
 * exists, is a shard of this format and version (another version: an error naming the file and
 * both versions), of this split, with the classes of the index, consistent offsets (non-
 * decreasing, the last = /jpeg's size) and /jpeg contiguous and inside the file (a truncated
 * file is named). */
typedef struct shards shards;

/* Open split ("train" or "val") of the pack in directory dir. */
int shards_open(shards **out, const char *dir, const char *split, char *err, size_t errlen);
/* Open the given shard files (n_paths >= 1) as one set, in that order (no index needed). */
int shards_open_files(shards **out, const char *const *paths, int n_paths, char *err, size_t errlen);
void shards_close(shards *s);

int64_t shards_count(const shards *s);             /* samples */
int shards_n_shards(const shards *s);
int shards_n_classes(const shards *s);
const char *shards_class_name(const shards *s, int c); /* wnid of class c */
int64_t shards_skipped(const shards *s);           /* images of these shards the packer skipped */
int shards_max_side(const shards *s);
int shards_label(const shards *s, int64_t i);      /* 0 <= i < shards_count */
int shards_height(const shards *s, int64_t i);
int shards_width(const shards *s, int64_t i);
int32_t shards_source_index(const shards *s, int64_t i);
size_t shards_nbytes(const shards *s, int64_t i);  /* bytes of sample i's JPEG */
size_t shards_max_nbytes(const shards *s);         /* largest sample: a buffer for any one */
const char *shards_file(const shards *s, int64_t i); /* the shard file holding sample i */

/* Read sample i's JPEG bytes (shards_nbytes(s, i)) into buf with one pread(); thread-safe, no
 * HDF5 call. Returns 0, or EXIT_RUNTIME with err naming the file (read error or short read). */
int shards_read(const shards *s, int64_t i, uint8_t *buf, char *err, size_t errlen);

/* Decode samples of every shard (src/data/image.h) and check each against its /height and
 * /width: per_shard evenly spaced samples, the first and the last included (every sample if
 * per_shard <= 0 or >= the shard's count). For checking a pack before a long run (`--check`).
 * *checked: samples decoded. Returns 0, or EXIT_BADINPUT naming the file, the sample and what is
 * wrong (a read error, not decodable, decoder warnings, another size). */
int shards_verify(const shards *s, int per_shard, int64_t *checked, char *err, size_t errlen);

/* A 64-bit fingerprint of what the set holds (FNV-1a over every sample's size in bytes, label,
 * height, width and source index, in set order): packing again (another seed, quality or
 * max_side, other images) changes it. For checkpoints: a resume must read the same pack. */
uint64_t shards_fingerprint(const shards *s);

/* One rank reads, the others receive (start-up at large p: docs/data.md, "Loading"). shards_pack
 * returns everything shards_open read — the shard paths, the per-sample arrays, the classes —
 * as one malloc'ed buffer of *len bytes (~22 bytes per sample: 28 MB for ImageNet's train set)
 * for a broadcast. shards_unpack makes a set from such a buffer without touching the file
 * system: the same samples, accessors, fingerprint and reads; each shard file is opened on the
 * first read of one of its samples (shards_read: the open fails naming the file if it is
 * missing there or shorter than its samples need, EXIT_RUNTIME). Returns 0, or EXIT_BADINPUT
 * for a malformed buffer. */
void *shards_pack(const shards *s, size_t *len);
int shards_unpack(shards **out, const void *buf, size_t len, char *err, size_t errlen);

/* Train and val must have the same class list (same count, same wnids in the same order):
 * 0 or EXIT_BADINPUT naming both sets' first differing class. */
int shards_same_classes(const shards *train, const shards *val, char *err, size_t errlen);

#endif
