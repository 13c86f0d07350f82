/* config_store.c — storing values into the experiment (passes 1 and 2 of config_load, config.c):
 * a libconfig setting type-checked against its key (config_keys.h) and stored, groups recursed
 * into, and where each value came from (origin) for the messages, "<file>:<line>: ..." or
 * "--set KEY=VALUE: ...". Range checks wait for pass 3 (config.c), so that an override can
 * repair a file value. */
#include "config_store.h"

#include "util/util.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Where a value came from, for messages                                                     */

/* Describe a libconfig setting as found: "a string \"abc\"", "an integer 5", "a group". */
static void found_text(const config_setting_t *s, char *buf, size_t n) {
    size_t len = 0;
    char num[40];
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        config_fmt_int(num, sizeof num, config_setting_get_int64(s));
        config_put(buf, n, &len, "an integer %s", num);
        break;
    case CONFIG_TYPE_FLOAT:
        config_fmt_double(num, sizeof num, config_setting_get_float(s));
        config_put(buf, n, &len, "a float %s", num);
        break;
    case CONFIG_TYPE_BOOL: config_put(buf, n, &len, "a boolean %s", config_setting_get_bool(s) ? "true" : "false"); break;
    case CONFIG_TYPE_STRING: {
        const char *v = config_setting_get_string(s);
        const size_t vl = strlen(v);
        char head[SHOWN_CHARS + 1];
        snprintf(head, sizeof head, "%s", v); /* a long value by its beginning, so the message ends */
        if (vl > SHOWN_CHARS) config_put(buf, n, &len, "a string of %zu characters, ", vl);
        else config_put(buf, n, &len, "a string ");
        config_put_quoted(buf, n, &len, head);
        if (vl > SHOWN_CHARS) config_put(buf, n, &len, "...");
        break;
    }
    case CONFIG_TYPE_GROUP: config_put(buf, n, &len, "a group { ... }"); break;
    case CONFIG_TYPE_ARRAY: config_put(buf, n, &len, "an array [ ... ]"); break;
    case CONFIG_TYPE_LIST: config_put(buf, n, &len, "a list ( ... )"); break;
    default: config_put(buf, n, &len, "an empty value"); break;
    }
}

void config_origin_text(const origin *o, char *buf, size_t n) {
    const size_t len = o->set ? strlen(o->set) : 0;
    /* a long --set by its beginning and length, so that the message after it is never cut off */
    if (o->set && len > SHOWN_CHARS) snprintf(buf, n, "--set %.*s... (%zu bytes)", SHOWN_CHARS, o->set, len);
    else if (o->set) snprintf(buf, n, "--set %s", o->set);
    else if (o->line > 0) snprintf(buf, n, "%s:%d", o->file, o->line);
    else snprintf(buf, n, "%s", o->file);
}

/* seterr with the origin in front: "<origin>: <message>". */
int config_oerr(char *err, size_t errlen, const origin *o, const char *fmt, ...) {
    char where[CFG_PATH_MAX + 64], msg[ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    config_origin_text(o, where, sizeof where);
    return seterr(err, errlen, "%s: %s", where, msg);
}

int config_unknown_key(char *err, size_t errlen, const origin *o, const char *path) {
    const char *s = config_key_suggest(path);
    if (s) return config_oerr(err, errlen, o, "unknown key '%s'; did you mean '%s'?", path, s);
    return config_oerr(err, errlen, o, "unknown key '%s' (dsgd-run --help lists the keys)", path);
}

/* ---------------------------------------------------------------------------------------- */
/* Storing values (passes 1 and 2)                                                           */

/* store_value for the integer lists (KT_LIST: a list of up to n_max; KT_INTS: exactly n_max):
 * want, got: the expectation and the setting as found, for messages (got is reused, gotlen
 * bytes, for an element that is not an integer). */
static int store_ints(experiment *e, const key_def *d, const config_setting_t *s, const origin *o, const char *want, char *got,
                      size_t gotlen, char *err, size_t errlen) {
    const int t = config_setting_type(s);
    const int list = d->type == KT_LIST, array = t == CONFIG_TYPE_ARRAY || t == CONFIG_TYPE_LIST;
    if (list && !array)
        return config_oerr(err, errlen, o, "key '%s': expected a list of integers such as %s, got %s", d->key,
                           d->elem_int ? "[1, 3]" : "[30000, 60000]", got);
    if (!list && (!array || config_setting_length(s) != d->n_max))
        return config_oerr(err, errlen, o, "key '%s': expected %s, got %s%s", d->key, want, got, array ? " of another length" : "");
    int ns = config_setting_length(s);
    if (ns > d->n_max)
        return config_oerr(err, errlen, o, "key '%s': expected at most %d %s, got %d", d->key, d->n_max, d->elems, ns);
    for (int i = 0; i < ns; i++) {
        const config_setting_t *el = config_setting_get_elem(s, (unsigned)i);
        int et = config_setting_type(el);
        if (et != CONFIG_TYPE_INT && et != CONFIG_TYPE_INT64) {
            found_text(el, got, gotlen);
            return config_oerr(err, errlen, o, "key '%s': expected integers, got %s at index %d", d->key, got, i);
        }
        long long v = config_setting_get_int64(el);
        if (d->elem_int && (v < INT_MIN || v > INT_MAX))
            return config_oerr(err, errlen, o, "key '%s': expected %s, got %s[%d] = %lld", d->key, want, d->key, i, v);
        config_list_set(d, e, i, v);
    }
    if (!list) return 0;
    for (int i = ns; i < d->n_max; i++) config_list_set(d, e, i, 0);
    *config_list_n(d, e) = ns;
    return 0;
}

/* Type-check setting s against key d and store it into e. Range checks wait for pass 3, so
 * that an override can repair a file value; only values that cannot be stored at all (an
 * int field out of the int range, an unknown enum name, too many steps) fail here. */
static int store_value(experiment *e, const key_def *d, const config_setting_t *s, const origin *o, char *err, size_t errlen) {
    char want[512], got[512];
    int t = config_setting_type(s);
    int is_int = t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64;
    config_expect_text(d, NULL, want, sizeof want);
    found_text(s, got, sizeof got);
    switch (d->type) {
    case KT_INT:
    case KT_INT64: {
        if (!is_int) {
            const char *hint = t == CONFIG_TYPE_FLOAT ? " (write it without a decimal point)" : "";
            return config_oerr(err, errlen, o, "key '%s': expected an integer, got %s%s", d->key, got, hint);
        }
        long long v = config_setting_get_int64(s);
        if (d->type == KT_INT && (v < INT_MIN || v > INT_MAX))
            return config_oerr(err, errlen, o, "key '%s': expected %s, got %lld", d->key, want, v);
        config_set_int(d, e, v);
        return 0;
    }
    case KT_FLOAT: {
        if (!is_int && t != CONFIG_TYPE_FLOAT)
            return config_oerr(err, errlen, o, "key '%s': expected a number, got %s", d->key, got);
        double v = is_int ? (double)config_setting_get_int64(s) : config_setting_get_float(s);
        if (!isfinite(v)) return config_oerr(err, errlen, o, "key '%s': expected a finite number, got %s", d->key, got);
        *FIELD(e, d, double) = v;
        return 0;
    }
    case KT_BOOL:
        if (t != CONFIG_TYPE_BOOL) return config_oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, want, got);
        *FIELD(e, d, int) = config_setting_get_bool(s) ? 1 : 0;
        return 0;
    case KT_STRING:
    case KT_ENUM: {
        if (t != CONFIG_TYPE_STRING)
            return config_oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, d->type == KT_STRING ? "a string" : want, got);
        const char *v = config_setting_get_string(s);
        if (d->type == KT_STRING) {
            if (strlen(v) >= d->size)
                return config_oerr(err, errlen, o, "key '%s': expected a string of at most %zu characters, got one of %zu", d->key, d->size - 1, strlen(v));
            config_set_string(d, e, v);
            return 0;
        }
        for (int i = 0; i < d->n_names; i++)
            if (!strcmp(v, d->names[i])) {
                *FIELD(e, d, int) = i;
                return 0;
            }
        const char *near = config_value_suggest(d, v);
        if (near) return config_oerr(err, errlen, o, "key '%s': expected %s, got %s; did you mean \"%s\"?", d->key, want, got, near);
        return config_oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, want, got);
    }
    case KT_LIST:
    case KT_INTS: return store_ints(e, d, s, o, want, got, sizeof got, err, errlen);
    }
    return 0;
}

/* Store setting s found at dotted path (a key or a group of keys), recursing into groups.
 * origins[] records where each key's value came from. base: the file and whether this is an
 * override; the line is taken from each setting. */
int config_apply_setting(experiment *e, origin *origins, const char *path, const config_setting_t *s, const origin *base,
                         char *err, size_t errlen) {
    origin o = *base;
    if (!o.set) {
        o.line = config_setting_source_line(s);
        const char *f = config_setting_source_file(s);
        if (f) o.file = f;
    }
    const key_def *d = config_key_find(path);
    if (d) {
        int st = store_value(e, d, s, &o, err, errlen);
        if (!st) origins[d - config_keys] = o;
        return st;
    }
    if (!config_key_is_group(path)) return config_unknown_key(err, errlen, &o, path);
    if (config_setting_type(s) != CONFIG_TYPE_GROUP) {
        char got[512];
        found_text(s, got, sizeof got);
        return config_oerr(err, errlen, &o, "key '%s': expected a group { ... } of keys, got %s", path, got);
    }
    int n = config_setting_length(s);
    for (int i = 0; i < n; i++) {
        const config_setting_t *c = config_setting_get_elem(s, (unsigned)i);
        char sub[512];
        const char *name = config_setting_name(c);
        snprintf(sub, sizeof sub, "%s.%s", path, name ? name : "?");
        int st = config_apply_setting(e, origins, sub, c, base, err, errlen);
        if (st) return st;
    }
    return 0;
}
