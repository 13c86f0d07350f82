/* pack_internal.h — what the files of `dsgd-run --pack` share, for src/data/ only: the options,
 * the list of sources (pack_sources.c builds it on rank 0 and carries it to every rank) and the
 * image converter. pack.c is the command itself, pack_image.c the conversion of one image; both
 * leaves take nothing from pack.c (their buffers grow with util.h's xgrow). */
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
    int64_t n;
    size_t cap;
} strvec;

/* Serialise ss as NUL-terminated strings: n_classes, classes, then per split: present, n,
 * (label, rel) pairs. */
typedef struct {
    char *p;
    size_t n, cap;
} blob;

/* pack_image.c: one thread's converter: its decoder, buffers and JPEG encoder. */
typedef struct pack_conv pack_conv;
pack_conv *pack_conv_new(void);
void pack_conv_free(pack_conv *c);

/* Convert an image file's bytes (JPEG or PNG) into a baseline 4:2:0 JPEG of largest side <=
 * max_side at quality: *jpeg (c's buffer, valid until the next call) of *jpeg_nbytes bytes, h × w
 * pixels; *warnings: decoder warnings (data recovered). Returns 0, or 1 (the image cannot be
 * packed: why says so, e.g. "truncated JPEG (no end-of-image marker)") . Never exits. */
int pack_convert(pack_conv *c, const uint8_t *buf, size_t nbytes, int max_side, int quality, const uint8_t **jpeg,
                 size_t *jpeg_nbytes, int *h, int *w, int *warnings, char *why, size_t whylen);

/* pack_sources.c */
void pack_sources_free(source_set *ss);
void pack_strvec_push(strvec *s, const char *x);
void pack_strvec_free(strvec *s);
int pack_list_sources(source_set *ss, const pack_options *o, char *err, size_t errlen);
void pack_sources_to_blob(const source_set *ss, blob *b);
void pack_sources_from_blob(source_set *ss, const char *p);

#endif
