/* config_keys.h — the key layer (config_keys.c), for src/config/ only: the description of a key
 * (key_def) and the table of them, the access to the field a key describes, and the values as
 * text that both loading's messages (config.c) and the printing (config_print.c) use. */
#ifndef DSGD_CONFIG_KEYS_H
#define DSGD_CONFIG_KEYS_H

#include "config/config.h"

#include <stddef.h>
typedef enum {
    KT_INT,    /* int field, libconfig integer */
    KT_INT64,  /* long / uint64_t field, libconfig integer (L suffix above 32 bits) */
    KT_FLOAT,  /* double field, libconfig float or integer (converted) */
    KT_BOOL,   /* int field (0/1), libconfig true/false */
    KT_STRING, /* char[] field, libconfig string */
    KT_ENUM,   /* enum field (int), libconfig string naming one of names[] (index = enum value) */
    KT_LIST,   /* long[] or int[] (elem_int) + int count, libconfig array or list of integers,
                  strictly increasing, each in [ilo, hi_key) */
    KT_INTS,   /* int[n_max], exactly n_max integers each in [ilo, ihi], default dflt_ints;
                  nondecr: in non-decreasing order ([min, max] ranges: data.scale) */
} key_type;

/* String checks (KT_STRING). */
enum { S_ANY = 0, S_NONEMPTY = 1, S_RUNNAME = 2 };

typedef struct {
    const char *key;  /* dotted path: "alpha.base" */
    key_type type;
    size_t off;       /* offset of the field in experiment */
    size_t size;      /* sizeof the field (strings: capacity including the NUL) */
    size_t off_n;     /* KT_LIST: offset of the element count */
    int elem_int;     /* KT_LIST: the elements are int (else long); KT_INTS: 1 */
    int n_max;        /* KT_LIST: capacity of the array */
    /* KT_LIST, for messages: one element, several, what they count, and a note added when an
     * element equals the (open) upper bound: "step", "steps", "iterations". */
    const char *elem, *elems, *values, *hi_note;
    int u64;          /* KT_INT64: the field is uint64_t (seed), else long */
    /* Integer range [ilo, ihi] (KT_INT, KT_INT64, KT_LIST elements). */
    long long ilo, ihi;
    /* Float range (KT_FLOAT): lo < or <= x < or <= hi; has_* = 0 means unbounded. */
    int has_lo, lo_open, has_hi, hi_open;
    double lo, hi;
    /* Upper bound given by another integer key (cross-key constraint), exclusive if hi_open. */
    const char *hi_key;
    /* Default: numbers (and enum index) in dflt, strings in dflt_s. */
    double dflt;
    const char *dflt_s;
    /* KT_ENUM: the known names, the bit mask of those that are built, what the
     * others are waiting for, and the plural noun for "built methods: ...". */
    const char *const *names;
    int n_names;
    unsigned built;
    const char *planned;
    const char *noun;
    int str_check;    /* KT_STRING: S_* */
    const int *dflt_ints; /* KT_INTS: the n_max default values */
    int nondecr;      /* KT_INTS: a [min, max] range (non-decreasing) */
    const char *unit; /* "" for dimensionless */
    const char *doc;  /* one line */
} key_def;

#define FIELD(e, d, T) ((T *)((char *)(e) + (d)->off))
#define CFIELD(e, d, T) ((const T *)((const char *)(e) + (d)->off))

/* Most keys the table may have (config.c sizes its per-key arrays by it; config_keys.c checks). */
enum { CONFIG_MAX_KEYS = 128 };
extern const key_def config_keys[];
extern const int config_n_keys;

const key_def *config_key_find(const char *key);
int config_key_is_group(const char *path);
const char *config_key_suggest(const char *unknown);
/* The name of enum key d closest to an unknown value v, or NULL: the same name in another case
 * ("BF16" -> "bf16"), else the nearest by edit distance when it is small (≤ 2 and ≤ half the
 * length: "alreduce" -> "allreduce"). */
const char *config_value_suggest(const key_def *d, const char *v);
long long config_get_int(const key_def *d, const experiment *e);
void config_set_int(const key_def *d, experiment *e, long long v);
int *config_list_n(const key_def *d, experiment *e);
int config_list_len(const key_def *d, const experiment *e);
long long config_list_get(const key_def *d, const experiment *e, int i);
void config_list_set(const key_def *d, experiment *e, int i, long long v);
void config_set_string(const key_def *d, experiment *e, const char *s);

/* Values as libconfig text, and what a key expects (for messages). Buffers of n bytes, always
 * NUL-terminated when n > 0; a longer text is cut. */
void config_fmt_double(char *buf, size_t n, double x);
void config_fmt_int(char *buf, size_t n, long long v);
void config_put_quoted(char *buf, size_t n, size_t *len, const char *s);
void config_put(char *buf, size_t n, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void config_expect_text(const key_def *d, const experiment *e, char *buf, size_t n);

#endif
