/* pack_internal.h — what the files of `dsgd-run --pack` share, for src/data/ only: the options,
 * the list of sources (pack_sources.c builds it on rank 0 and carries it to every rank) and small
 * helpers. pack.c is the command itself, pack_image.c the conversion of one image. */
#ifndef DSGD_PACK_INTERNAL_H
#define DSGD_PACK_INTERNAL_H

#include "data/pack.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *src, *out, *val_labels;
    int max_side, quality, threads, shards, overwrite, help;
    long shard_images;
    uint64_t seed;
} pack_options;

enum { TRAIN = 0, VAL = 1, N_SPLITS = 2 };
static const char *const split_names[N_SPLITS] = {"train", "val"};

typedef struct {
    int present;
    int64_t n;
    char **rel;       /* (n) path relative to SRC/<split>: "<wnid>/<file>" or "<file>" */
    int16_t *label;   /* (n) */
} split_list;

typedef struct {
    int n_classes;
    char **classes;   /* sorted wnids */
    split_list s[N_SPLITS];
} source_set;

typedef struct {
    char **v;
    int64_t n, cap;
} strvec;

/* Serialise ss as NUL-terminated strings: n_classes, classes, then per split: present, n,
 * (label, rel) pairs. */
typedef struct {
    char *p;
    size_t n, cap;
} blob;

/* Grow *p (an array of elem-byte elements with *cap of them) to hold need; dies when out of memory. */
void pack_grow_buf(void *p, size_t *cap, size_t need, size_t elem);

/* pack_sources.c */
void pack_sources_free(source_set *ss);
void pack_strvec_push(strvec *s, const char *x);
void pack_strvec_free(strvec *s);
int pack_list_sources(source_set *ss, const pack_options *o, char *err, size_t errlen);
void pack_sources_to_blob(const source_set *ss, blob *b);
void pack_sources_from_blob(source_set *ss, const char *p);

#endif
