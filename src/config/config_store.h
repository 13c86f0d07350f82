/* config_store.h — config_store.c's exports, for src/config/ only: where a value came from
 * (origin) and its wording in messages, and the storing of a libconfig setting into the
 * experiment by the key table (passes 1 and 2 of config_load). */
#ifndef DSGD_CONFIG_STORE_H
#define DSGD_CONFIG_STORE_H

#include "config_keys.h"

#include <libconfig.h>
#include <stddef.h>

/* Values longer than this are shown by their beginning in messages. */
enum { SHOWN_CHARS = 120 };

/* Where a value came from: a line of the experiment file (or an @include'd one), or a --set. */
typedef struct {
    const char *file; /* experiment file (or an @include'd one) */
    int line;         /* 0: unknown / default */
    const char *set;  /* the --set argument, or NULL */
} origin;

/* o as text: "--set KEY=VALUE" (a long one by its beginning and length), "file:line", or "file"
 * (line 0: a default). */
void config_origin_text(const origin *o, char *buf, size_t n);

/* seterr with the origin in front: "<origin>: <message>". Returns EXIT_BADINPUT. */
int config_oerr(char *err, size_t errlen, const origin *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* "<origin>: unknown key 'path'", with the nearest key as a suggestion if there is one.
 * Returns EXIT_BADINPUT. */
int config_unknown_key(char *err, size_t errlen, const origin *o, const char *path);

/* Store setting s found at dotted path (a key or a group of keys), recursing into groups.
 * origins[] records where each key's value came from. base: the file and whether this is an
 * override; the line is taken from each setting. */
int config_apply_setting(experiment *e, origin *origins, const char *path, const config_setting_t *s, const origin *base,
                         char *err, size_t errlen);

#endif
