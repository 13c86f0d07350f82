/* pack_sources.h — pack_sources.c's exports, for `dsgd-run --pack` (src/data/ only): the options
 * and the list of sources, which pack_sources.c builds on rank 0 and carries to every rank. pack.c
 * is the command itself; pack_sources.c and pack_image.c (pack_image.h) are its leaves and take
 * nothing from it (their buffers grow with util.h's xgrow). */
#ifndef DSGD_PACK_SOURCES_H
#define DSGD_PACK_SOURCES_H

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
    int64_t n;
    size_t cap;
} strvec;

/* Serialise ss as NUL-terminated strings: n_classes, classes, then per split: present, n,
 * (label, rel) pairs. */
typedef struct {
    char *p;
    size_t n, cap;
} blob;

/* The list of sources and its serialisation. */
void pack_sources_free(source_set *ss);
void pack_strvec_push(strvec *s, const char *x);
void pack_strvec_free(strvec *s);
int pack_list_sources(source_set *ss, const pack_options *o, char *err, size_t errlen);
void pack_sources_to_blob(const source_set *ss, blob *b);
void pack_sources_from_blob(source_set *ss, const char *p);

#endif
