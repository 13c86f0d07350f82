/* config.c — loading and validating the experiment file (config.h) by the key table
 * (config_keys.c, whose value-as-text helpers word the messages; storing a value and its origin
 * is config_store.c; the printing is config_print.c, which this file never calls).
 *
 * Loading happens in three passes so that an override can repair a bad file value:
 *   1. parse the file with libconfig and store every key (type errors and unknown keys stop here),
 *   2. apply the overrides in order (same checks, same code path),
 *   3. validate ranges, built-ness of enum values and cross-key constraints, then resolve
 *      defaults that depend on other keys (output = "runs/<name>.h5").
 * Each key remembers where its value came from (file:line or the --set argument) so that a
 * range error found in pass 3 still points at the line that set the value.
 *
 * libconfig 1.5 silently wraps integer literals that do not fit in 32 bits unless they carry
 * an L suffix (3000000000 reads as -1294967296); scan_int_literals() rejects those before
 * libconfig sees the text. */
#include "config_keys.h"
#include "config_store.h"

#include "sim/simmodel.h"
#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Origins of the last successful config_load, as text, per key (for config_where), and whether
 * the experiment set the key (a line of the file or a --set; else a default). */
static char g_where[CONFIG_MAX_KEYS][CFG_PATH_MAX + 64];
static char g_given[CONFIG_MAX_KEYS];

/* ---------------------------------------------------------------------------------------- */
/* libconfig 1.5 integer wrap-around guard                                                  */

/* Reject integer literals that libconfig 1.5 would silently wrap: no L suffix and outside the
 * 32-bit range, or an L suffix and outside the 64-bit range. Strings and comments are skipped;
 * @include'd files are scanned too (depth ≤ 10, as libconfig). o->line is advanced as lines
 * pass. Returns 0 or EXIT_BADINPUT. */
static int read_text_file(const char *path, char **text, char *err, size_t errlen, const origin *o);

/* The files the last config_load's experiment file @include'd (recorded by the scan below). */
#define MAX_INCLUDES 64
static char included[MAX_INCLUDES][CFG_PATH_MAX];
static int n_included;

int config_n_included(void) { return n_included; }
const char *config_included(int i) { return i >= 0 && i < n_included ? included[i] : NULL; }

static int scan_int_literals(const char *t, origin *o, int depth, char *err, size_t errlen) {
    for (size_t i = 0; t[i];) {
        char c = t[i];
        if (c == '\n') { o->line++; i++; }
        else if (c == '#' || (c == '/' && t[i + 1] == '/')) { while (t[i] && t[i] != '\n') i++; }
        else if (c == '/' && t[i + 1] == '*') {
            for (i += 2; t[i] && !(t[i] == '*' && t[i + 1] == '/'); i++) if (t[i] == '\n') o->line++;
            if (t[i]) i += 2;
        } else if (c == '"') {
            for (i++; t[i] && t[i] != '"'; i++) {
                if (t[i] == '\\' && t[i + 1]) i++;
                if (t[i] == '\n') o->line++;
            }
            if (t[i]) i++;
        } else if (c == '@' && !strncmp(t + i, "@include", 8)) {
            i += 8;
            while (t[i] == ' ' || t[i] == '\t') i++;
            if (t[i] != '"') continue; /* libconfig reports the syntax error */
            size_t s = ++i;
            while (t[i] && t[i] != '"' && t[i] != '\n') i++;
            if (t[i] != '"') continue;
            if (depth >= 10) return config_oerr(err, errlen, o, "@include nested more than 10 deep");
            char inc[CFG_PATH_MAX];
            if (i - s >= sizeof inc) return config_oerr(err, errlen, o, "@include path longer than %d characters", CFG_PATH_MAX - 1);
            memcpy(inc, t + s, i - s);
            inc[i - s] = 0;
            i++;
            char *itext;
            if (read_text_file(inc, &itext, err, errlen, o)) return EXIT_BADINPUT;
            if (n_included < MAX_INCLUDES) snprintf(included[n_included++], CFG_PATH_MAX, "%s", inc);
            origin io = {inc, 1, NULL};
            int st = scan_int_literals(itext, &io, depth + 1, err, errlen);
            free(itext);
            if (st) return st;
        } else if (isalpha((unsigned char)c) || c == '*' || c == '_') {
            while (isalnum((unsigned char)t[i]) || t[i] == '_' || t[i] == '-' || t[i] == '*') i++;
        } else if (isdigit((unsigned char)c) || ((c == '-' || c == '+') && isdigit((unsigned char)t[i + 1]))) {
            size_t s = i;
            int neg = c == '-';
            if (c == '-' || c == '+') i++;
            int hex = t[i] == '0' && (t[i + 1] == 'x' || t[i + 1] == 'X') && isxdigit((unsigned char)t[i + 2]);
            char *end; /* the magnitude; ULLONG_MAX (over every limit) beyond 2^64 */
            const unsigned long long mag = strtoull(t + i, &end, hex ? 16 : 10);
            i = (size_t)(end - t);
            if (!hex && (t[i] == '.' || ((t[i] == 'e' || t[i] == 'E') && (isdigit((unsigned char)t[i + 1]) ||
                                         ((t[i + 1] == '-' || t[i + 1] == '+') && isdigit((unsigned char)t[i + 2])))))) {
                /* a float: skip it */
                if (t[i] == '.') for (i++; isdigit((unsigned char)t[i]); i++) {}
                if (t[i] == 'e' || t[i] == 'E') {
                    i++;
                    if (t[i] == '-' || t[i] == '+') i++;
                    while (isdigit((unsigned char)t[i])) i++;
                }
                continue;
            }
            int l64 = t[i] == 'L';
            size_t e_ = i;
            while (t[i] == 'L') i++;
            unsigned long long lim = l64 ? (neg ? 1ull << 63 : (1ull << 63) - 1) : (neg ? 1ull << 31 : (1ull << 31) - 1);
            if (mag > lim) {
                int w = (int)(e_ - s);
                if (w > SHOWN_CHARS)
                    return config_oerr(err, errlen, o, "an integer of %d digits does not fit in %d bits", w, l64 ? 64 : 32);
                if (l64 || mag > (neg ? 1ull << 63 : (1ull << 63) - 1)) /* no suffix makes it fit */
                    return config_oerr(err, errlen, o, "integer %.*s does not fit in 64 bits", w, t + s);
                return config_oerr(err, errlen, o,
                                   "integer %.*s does not fit in 32 bits; write %.*sL for a 64-bit integer "
                                   "(libconfig would silently wrap it)", w, t + s, w, t + s);
            }
        } else if (c == '.' && isdigit((unsigned char)t[i + 1])) {
            for (i++; isdigit((unsigned char)t[i]) || t[i] == 'e' || t[i] == 'E'; i++)
                if ((t[i] == 'e' || t[i] == 'E') && (t[i + 1] == '-' || t[i + 1] == '+')) i++;
        } else i++;
    }
    return 0;
}

/* Read a whole text file (at most 1 MiB; an experiment file is a few KiB). o: where an
 * @include names it, or NULL for the experiment file itself. */
static int read_text_file(const char *path, char **text, char *err, size_t errlen, const origin *o) {
    struct stat sb;
    char pre[CFG_PATH_MAX + 80] = "";
    if (o) {
        config_origin_text(o, pre, sizeof pre);
        size_t l = strlen(pre);
        snprintf(pre + l, sizeof pre - l, ": @include: ");
    }
    *text = NULL;
    if (stat(path, &sb) != 0) return seterr(err, errlen, "%scannot open experiment file '%s': %s", pre, path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return seterr(err, errlen, "%s'%s' is a directory, not an experiment file", pre, path);
    FILE *f = fopen(path, "rb");
    if (!f) return seterr(err, errlen, "%scannot open experiment file '%s': %s", pre, path, strerror(errno));
    const size_t cap = 1u << 20;
    char *buf = xmalloc(cap);
    size_t n = 0, r;
    while (n + 1 < cap && (r = fread(buf + n, 1, cap - 1 - n, f)) > 0) n += r;
    int bad = ferror(f), errno_ = errno;
    fclose(f);
    if (n + 1 >= cap) { free(buf); return seterr(err, errlen, "%s'%s' is larger than 1 MiB; not an experiment file?", pre, path); }
    if (bad) { free(buf); return seterr(err, errlen, "%scannot read '%s': %s", pre, path, strerror(errno_)); }
    buf[n] = 0;
    if (strlen(buf) != n) { free(buf); return seterr(err, errlen, "%s'%s' contains a NUL byte; not a text file", pre, path); }
    *text = buf;
    return 0;
}


/* Apply one "--set KEY=VALUE" override. */
static int apply_override(experiment *e, origin *origins, const char *arg, char *err, size_t errlen) {
    origin o = {NULL, 0, arg};
    const char *eq = strchr(arg, '=');
    if (!eq) return config_oerr(err, errlen, &o, "expected KEY=VALUE (e.g. --set alpha.base=0.05)");
    char key[256];
    const char *ks = arg, *ke = eq;
    while (ks < ke && isspace((unsigned char)*ks)) ks++;
    while (ke > ks && isspace((unsigned char)ke[-1])) ke--;
    if (ke == ks) return config_oerr(err, errlen, &o, "empty KEY in KEY=VALUE");
    if ((size_t)(ke - ks) >= sizeof key) return config_oerr(err, errlen, &o, "KEY longer than %zu characters", sizeof key - 1);
    snprintf(key, sizeof key, "%.*s", (int)(ke - ks), ks);
    const char *val = eq + 1;
    while (isspace((unsigned char)*val)) val++;
    size_t vlen = strlen(val);
    while (vlen && isspace((unsigned char)val[vlen - 1])) vlen--;

    const key_def *d = config_key_find(key);
    if (!d && !config_key_is_group(key)) return config_unknown_key(err, errlen, &o, key);

    config_t cfg;
    config_init(&cfg);
    int st = 0;
    if (d && (d->type == KT_STRING || d->type == KT_ENUM) && val[0] != '"') {
        /* bare word: the text itself is the string (output=runs/x.h5, method=allreduce) */
        char *word = xmalloc(vlen + 1);
        snprintf(word, vlen + 1, "%.*s", (int)vlen, val);
        config_setting_t *v = config_setting_add(config_root_setting(&cfg), "v", CONFIG_TYPE_STRING);
        if (!v || !config_setting_set_string(v, word)) DIE("libconfig could not build a string setting");
        free(word);
    } else {
        size_t n = vlen + 16;
        char *text = xmalloc(n);
        snprintf(text, n, "v = %.*s\n;", (int)vlen, val);
        origin so = o;
        st = scan_int_literals(text, &so, 0, err, errlen);
        if (!st && (!config_read_string(&cfg, text) || config_setting_length(config_root_setting(&cfg)) != 1)) {
            char want[512];
            if (d) config_expect_text(d, NULL, want, sizeof want);
            else snprintf(want, sizeof want, "a group { ... }");
            st = config_oerr(err, errlen, &o, "key '%s': cannot read '%.*s' as a libconfig value (%s); expected %s",
                             key, (int)vlen, val, config_error_text(&cfg) ? config_error_text(&cfg) : "more than one value",
                             want);
        }
        free(text);
    }
    if (!st) st = config_apply_setting(e, origins, key, config_lookup(&cfg, "v"), &o, err, errlen);
    config_destroy(&cfg);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Validation (pass 3)                                                                       */

static int validate_key(const experiment *e, const key_def *d, const origin *o, char *err, size_t errlen) {
    char want[512], got[2 * CFG_PATH_MAX];
    size_t len = 0;
    switch (d->type) {
    case KT_INT:
    case KT_INT64: {
        long long x = config_get_int(d, e), hi = d->ihi;
        if (d->hi_key) {
            long long h = config_get_int(config_key_find(d->hi_key), e) - (d->hi_open ? 1 : 0);
            if (h < hi) hi = h;
        }
        if (x >= d->ilo && x <= hi) return 0;
        snprintf(got, sizeof got, "%lld", x);
        break;
    }
    case KT_FLOAT: {
        double x = *CFIELD(e, d, double);
        int bad = (d->has_lo && (d->lo_open ? !(x > d->lo) : !(x >= d->lo))) ||
                  (d->has_hi && (d->hi_open ? !(x < d->hi) : !(x <= d->hi)));
        if (!bad) return 0;
        config_fmt_double(got, sizeof got, x);
        break;
    }
    case KT_STRING: {
        const char *s = CFIELD(e, d, char);
        int bad = d->str_check != S_ANY && !s[0];
        if (d->str_check == S_RUNNAME)
            for (const char *c = s; *c; c++)
                if (!isalnum((unsigned char)*c) && !strchr("._+-", *c)) bad = 1;
        if (!bad) return 0;
        config_put_quoted(got, sizeof got, &len, s);
        break;
    }
    case KT_ENUM: {
        const int idx = *CFIELD(e, d, int);
        if (idx < 0 || idx >= d->n_names) DIE("key %s holds no known name", d->key);
        if (d->built & (1u << idx)) return 0;
        char built[256] = "";
        for (int i = 0; i < d->n_names; i++)
            if (d->built & (1u << i)) config_put(built, sizeof built, &len, "%s%s", len ? ", " : "", d->names[i]);
        return config_oerr(err, errlen, o, "%s = \"%s\" is not built yet (%s); built %s: %s", d->key,
                           d->names[idx], d->planned ? d->planned : "planned", d->noun, built);
    }
    case KT_LIST: {
        int ns = config_list_len(d, e);
        long long hi = config_get_int(config_key_find(d->hi_key), e);
        for (int i = 0; i < ns; i++) {
            long long x = config_list_get(d, e, i), prev = i > 0 ? config_list_get(d, e, i - 1) : 0;
            if (i > 0 && x <= prev)
                return config_oerr(err, errlen, o, "key '%s': expected strictly increasing %s, got %s[%d] = %lld %s %s[%d] = %lld",
                                   d->key, d->values, d->key, i, x, x == prev ? "repeating" : "after", d->key, i - 1, prev);
            if (x < d->ilo || x > hi - (d->hi_open ? 1 : 0))
                return config_oerr(err, errlen, o, "key '%s': expected each %s in [%lld, %s (%lld)%c, got %s[%d] = %lld%s",
                                   d->key, d->elem, d->ilo, d->hi_key, hi, d->hi_open ? ')' : ']', d->key, i, x,
                                   d->hi_open && x == hi && d->hi_note ? d->hi_note : "");
        }
        return 0;
    }
    case KT_INTS: {
        const int *x = CFIELD(e, d, int);
        config_expect_text(d, e, want, sizeof want);
        for (int i = 0; i < d->n_max; i++)
            if (x[i] < d->ilo || x[i] > d->ihi)
                return config_oerr(err, errlen, o, "key '%s': expected %s, got %s[%d] = %d", d->key, want, d->key, i, x[i]);
        for (int i = 1; d->nondecr && i < d->n_max; i++)
            if (x[i] < x[i - 1])
                return config_oerr(err, errlen, o, "key '%s': expected %s, got [%d, %d]: reversed (write [%d, %d])", d->key, want,
                                   x[0], x[1], x[1], x[0]);
        return 0;
    }
    case KT_BOOL: return 0;
    }
    /* the scalar keys out of range: their value as got */
    config_expect_text(d, e, want, sizeof want);
    return config_oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, want, got);
}

/* ---------------------------------------------------------------------------------------- */
/* Public API                                                                                */

/* output = "" stands for runs/<name>.h5. */
static int resolve_output(experiment *e, const origin *o, char *err, size_t errlen) {
    if (e->output[0]) return 0;
    int w = snprintf(e->output, sizeof e->output, "runs/%s.h5", e->name);
    if (w < 0 || (size_t)w >= sizeof e->output)
        return config_oerr(err, errlen, o, "key 'output': the default runs/<name>.h5 is longer than %d characters", CFG_PATH_MAX - 1);
    return 0;
}

/* The entry of key (a key of the table) in config_load's origins[]. */
static const origin *origin_of(const origin *origins, const char *key) { return &origins[config_key_find(key) - config_keys]; }

/* Where key's value came from, as text, during config_load (for messages naming a second key). */
static const char *g_where_tmp(const origin *origins, const char *key) {
    static char buf[CFG_PATH_MAX + 64];
    config_origin_text(origin_of(origins, key), buf, sizeof buf);
    return buf;
}

/* Pass 3's constraints between keys that are not a range bounded by another key (the device,
 * precision and comm that go together, a failure that leaves a worker, the JPEG input path);
 * each message names the key at fault where it was set. 0 or EXIT_BADINPUT. */
static int check_cross_keys(const experiment *e, const origin *origins, char *err, size_t errlen) {
    int st = 0;
    if (!st && e->precision == PRECISION_TF32 && e->device != DEVICE_CUDA)
        st = config_oerr(err, errlen, origin_of(origins, "precision"),
                         "key 'precision': \"tf32\" is for device = \"cuda\" (tensor cores); device = \"%s\" computes in "
                         "\"fp32\" or \"bf16\"", device_name(e->device));
    if (!st && e->precision == PRECISION_BF16 && e->device != DEVICE_CUDA && e->model.arch != ARCH_RESNET18)
        st = config_oerr(err, errlen, origin_of(origins, "precision"),
                         "key 'precision': \"bf16\" on device = \"%s\" is for model.arch = \"resnet18\" (its convolutions); "
                         "model.arch = \"%s\" computes in \"fp32\"", device_name(e->device), arch_name(e->model.arch));
    /* A failed worker needs another one to go on without it. */
    if (!st && e->inject.fail_rank >= 0 && e->p < 2)
        st = config_oerr(err, errlen, origin_of(origins, "inject.fail_rank"),
                         "key 'inject.fail_rank': a failure needs p >= 2 workers (with p = %d no worker is left to train); use -1 for none", e->p);
    /* NCCL all-reduces GPU memory, and only allreduce uses an all-reduce for its gradients. */
    if (!st && e->comm == COMM_NCCL && e->device != DEVICE_CUDA)
        st = config_oerr(err, errlen, origin_of(origins, "comm"),
                         "key 'comm': \"nccl\" is for device = \"cuda\" (NCCL all-reduces GPU memory); device = \"%s\" uses "
                         "comm = \"mpi\"", device_name(e->device));
    if (!st && e->comm == COMM_NCCL && e->method != METHOD_ALLREDUCE)
        st = config_oerr(err, errlen, origin_of(origins, "comm"),
                         "key 'comm': \"nccl\" is for method = \"allreduce\"; method '%s' exchanges point to point "
                         "through MPI (use comm = \"mpi\")", method_name(e->method));
    /* Asynchronous gossip's replicated schedule in sim mode needs a modelled compute
     * (docs/simulate.md, "Gossip, asynchronous"). */
    const int sim_gossip = (e->method == METHOD_GOSSIP_PULL || e->method == METHOD_GOSSIP_PUSH);
    if (!st && e->sim.enabled && sim_gossip && !e->synchronous && e->sim.device == SIM_DEV_MEASURED && !(e->sim.step_ms > 0))
        st = config_oerr(err, errlen, origin_of(origins, "sim.device"),
                         "key 'sim.device': asynchronous %s in sim mode needs a modelled compute time: every rank "
                         "computes the whole cluster's schedule from it (docs/simulate.md, \"Gossip, asynchronous\"), which a "
                         "measured time cannot give; choose a device (k80, v100, ...) or sim.step_ms, or synchronous = true", method_name(e->method));
    /* The JPEG input path: a pack to read, and a crop that every resize can fill. */
    const int jpeg = e->data.format == FORMAT_JPEG;
    const origin *dir_o = origin_of(origins, "data.dir");
    if (!st && jpeg && !e->data.dir[0] && !dir_o->set && dir_o->line == 0) /* not set anywhere: blame the format */
        st = config_oerr(err, errlen, origin_of(origins, "data.format"),
                         "key 'data.format': \"jpeg\" needs key 'data.dir', the pack directory (the OUT of dsgd-run --pack SRC "
                         "OUT), which is not set");
    else if (!st && jpeg && !e->data.dir[0])
        st = config_oerr(err, errlen, dir_o, "key 'data.dir': data.format = \"jpeg\" needs the pack directory (the OUT of dsgd-run --pack SRC OUT)");
    if (!st && jpeg && e->data.augment == AUGMENT_SCALE && e->data.crop > e->data.scale[0])
        st = config_oerr(err, errlen, origin_of(origins, "data.crop"),
                         "key 'data.crop': a %d-pixel crop does not fit the smallest shorter side of data.scale = [%d, %d] (%s); "
                         "need data.crop <= data.scale[0]", e->data.crop, e->data.scale[0], e->data.scale[1],
                         g_where_tmp(origins, "data.scale"));
    if (!st && jpeg && e->data.eval_resize < e->data.crop)
        st = config_oerr(err, errlen, origin_of(origins, "data.eval_resize"),
                         "key 'data.eval_resize': %d is smaller than data.crop = %d (%s); the centre crop must fit: need "
                         "data.eval_resize >= data.crop", e->data.eval_resize, e->data.crop, g_where_tmp(origins, "data.crop"));
    return st;
}

int config_load(experiment *e, const char *path, char *const *sets, int n_sets, char *err, size_t errlen) {
    config_defaults(e);
    if (err && errlen) err[0] = 0;
    if (!path || !path[0]) return seterr(err, errlen, "no experiment file given");
    if (strlen(path) >= sizeof e->source)
        return seterr(err, errlen, "experiment file path is longer than %d characters: '%.60s...'", CFG_PATH_MAX - 1, path);
    snprintf(e->source, sizeof e->source, "%s", path);
    if (n_sets > 0 && !sets) return seterr(err, errlen, "%s: %d overrides announced but none given", path, n_sets);

    origin origins[CONFIG_MAX_KEYS];
    for (int i = 0; i < config_n_keys; i++) origins[i] = (origin){e->source, 0, NULL};

    /* Pass 1: the file. Read it ourselves first for a precise I/O message and the integer guard. */
    char *text;
    int st = read_text_file(path, &text, err, errlen, NULL);
    if (st) return st;
    origin so = {e->source, 1, NULL};
    n_included = 0;
    st = scan_int_literals(text, &so, 0, err, errlen);
    free(text);
    if (st) return st;

    config_t cfg;
    config_init(&cfg);
    if (!config_read_file(&cfg, path)) {
        if (config_error_type(&cfg) == CONFIG_ERR_FILE_IO)
            st = seterr(err, errlen, "cannot read experiment file '%s': %s", path, config_error_text(&cfg));
        else
            st = seterr(err, errlen, "%s:%d: syntax error in the experiment file: %s",
                        config_error_file(&cfg) ? config_error_file(&cfg) : path, config_error_line(&cfg),
                        config_error_text(&cfg));
        config_destroy(&cfg);
        return st;
    }
    const config_setting_t *root = config_root_setting(&cfg);
    origin base = {e->source, 0, NULL};
    for (int i = 0; !st && i < config_setting_length(root); i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        st = config_apply_setting(e, origins, config_setting_name(s), s, &base, err, errlen);
    }

    /* Pass 2: overrides, in order. Their origins point into sets[], which outlives this call;
     * file origins point into cfg (include file names), destroyed only after pass 3. */
    for (int i = 0; !st && i < n_sets; i++) {
        if (!sets[i]) { st = seterr(err, errlen, "--set: missing KEY=VALUE"); break; }
        st = apply_override(e, origins, sets[i], err, errlen);
    }

    /* Pass 3: ranges, built-ness, cross-key constraints, derived defaults. The cross-key
     * constraints are ranges bounded by another key (hi_key): backups < p (so backup's
     * N = p - backups >= 1), inject.fail_rank < p, inject.slow_ranks[i] < p, inject.fail_step <
     * iterations, alpha.steps < iterations, alpha.warmup < iterations. inject.delay_ms = 0 with
     * slow ranks or random_slow > 0 is allowed: nothing is delayed. */
    for (int i = 0; !st && i < config_n_keys; i++) st = validate_key(e, &config_keys[i], &origins[i], err, errlen);
    if (!st) st = check_cross_keys(e, origins, err, errlen);
    if (!st) st = resolve_output(e, origin_of(origins, "output"), err, errlen);
    /* Keep where each value came from for the checks made after loading (config_where). */
    for (int i = 0; !st && i < config_n_keys; i++) {
        config_origin_text(&origins[i], g_where[i], sizeof g_where[i]);
        g_given[i] = origins[i].set || origins[i].line > 0;
    }
    config_destroy(&cfg);
    return st;
}

const char *config_where(const char *key) {
    const key_def *d = config_key_find(key);
    return d && g_where[d - config_keys][0] ? g_where[d - config_keys] : "";
}

int config_unused_keys(const experiment *e, char *buf, size_t n) {
    const int m = e->method, gossip = m == METHOD_GOSSIP_PULL || m == METHOD_GOSSIP_PUSH, resnet = e->model.arch == ARCH_RESNET18;
    const int sim = e->sim.enabled, custom = e->sim.network == SIM_NET_CUSTOM;
    const int idx = e->data.format == FORMAT_IDX, jpeg = e->data.format == FORMAT_JPEG;
    const struct { const char *key, *used_by; int used; } k[] = {
        {"tau", "method easgd", m == METHOD_EASGD},
        {"beta", "method easgd", m == METHOD_EASGD},
        {"servers", "the methods with servers (ps, easgd, backup)", method_has_servers(m)},
        {"backups", "method backup", m == METHOD_BACKUP},
        {"synchronous", "methods easgd and gossip", m == METHOD_EASGD || gossip},
        {"gossip_order", "the gossip methods", gossip},
        {"model.width", "model.arch resnet18", resnet},
        {"model.stem", "model.arch resnet18", resnet},
        {"sim.device", sim ? "sim.step_ms = 0 (a step_ms > 0 replaces the device's step time)" : "sim.enabled = true", sim && !(e->sim.step_ms > 0)},
        {"sim.step_ms", "sim.enabled = true", sim},
        {"sim.model_params", "sim.enabled = true", sim},
        {"sim.network", "sim.enabled = true", sim},
        {"sim.latency_us", sim ? "sim.network = \"custom\"" : "sim.enabled = true", sim && custom},
        {"sim.bandwidth_gbps", sim ? "sim.network = \"custom\"" : "sim.enabled = true", sim && custom},
        {"sim.topology", "sim.enabled = true", sim},
        {"sim.leaf_size", sim ? "sim.topology = \"fat_tree\"" : "sim.enabled = true", sim && e->sim.topology == SIM_TOPO_FAT_TREE},
        {"sim.oversubscription", sim ? "sim.topology = \"fat_tree\"" : "sim.enabled = true", sim && e->sim.topology == SIM_TOPO_FAT_TREE},
        {"sim.allreduce", "sim.enabled = true", sim},
        {"sim.jitter", "sim.enabled = true", sim},
        /* the input keys of the other data formats (docs/data.md) */
        {"data.train_images", "data.format = \"idx\"", idx},
        {"data.train_labels", "data.format = \"idx\"", idx},
        {"data.val_images", "data.format = \"idx\"", idx},
        {"data.val_labels", "data.format = \"idx\"", idx},
        {"data.dir", "data.format = \"jpeg\"", jpeg},
        {"data.threads", "data.format = \"jpeg\"", jpeg},
        {"data.augment", "data.format = \"jpeg\"", jpeg},
        {"data.crop", "data.format = \"jpeg\"", jpeg},
        {"data.scale", jpeg ? "data.augment = \"scale\"" : "data.format = \"jpeg\"", jpeg && e->data.augment == AUGMENT_SCALE},
        {"data.eval_resize", "data.format = \"jpeg\"", jpeg},
        {"data.interp", "data.format = \"jpeg\"", jpeg},
        {"data.dct_scale", "data.format = \"jpeg\"", jpeg},
        {"data.shape", "data.format = \"synthetic\"", e->data.format == FORMAT_SYNTHETIC},
    };
    int count = 0;
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const key_def *d = config_key_find(k[i].key);
        if (k[i].used || !d || !g_given[d - config_keys]) continue;
        config_put(buf, n, &len, "%skey '%s' (%s) has no effect: used only by %s", count ? "; " : "", k[i].key,
                   g_where[d - config_keys], k[i].used_by);
        count++;
    }
    /* A fat tree whose one leaf holds every rank (the world: p, plus the servers) is one switch:
     * the flat network. Accepted (a sweep over p may hold leaf_size fixed), and said; a
     * sim.oversubscription given then has no effect (no message leaves the leaf), said apart. */
    const int hosts = config_world_size(e);
    if (sim && e->sim.topology == SIM_TOPO_FAT_TREE && e->sim.leaf_size >= hosts) {
        const key_def *d = config_key_find("sim.leaf_size"), *o = config_key_find("sim.oversubscription");
        char who[64];
        if (method_has_servers(m)) snprintf(who, sizeof who, "p + servers = %d + %d", e->p, e->servers);
        else snprintf(who, sizeof who, "p = %d", e->p);
        config_put(buf, n, &len, "%skey 'sim.leaf_size' (%s): a leaf of %d hosts holds all %d ranks (%s): the fat tree is one "
                   "leaf switch, the same network as sim.topology = \"flat\"", count ? "; " : "", g_where[d - config_keys],
                   e->sim.leaf_size, hosts, who);
        count++;
        if (o && g_given[o - config_keys]) {
            config_put(buf, n, &len, "; key 'sim.oversubscription' (%s) has no effect: with every rank on one leaf no message "
                       "crosses the leaf's uplinks", g_where[o - config_keys]);
            count++;
        }
    }
    return count;
}

int method_has_servers(method_kind m) { return m == METHOD_PS || m == METHOD_EASGD || m == METHOD_BACKUP; }

int config_sim_no_resume(const experiment *e) {
    return e->sim.enabled && (method_has_servers(e->method) || ((e->method == METHOD_GOSSIP_PULL || e->method == METHOD_GOSSIP_PUSH) && !e->synchronous));
}

int config_world_size(const experiment *e) { return method_has_servers(e->method) ? e->p + e->servers : e->p; }

int config_check_world(const experiment *e, int world_size, char *err, size_t errlen) {
    const int need = config_world_size(e);
    const char *where = config_where("p")[0] ? config_where("p") : e->source;
    if (need == world_size) return 0;
    if (method_has_servers(e->method))
        return seterr(err, errlen,
                      "%s: key 'p': method '%s' runs on p + servers = %d + %d = %d MPI ranks but MPI started %d; "
                      "run mpiexec -n %d, or change p or servers",
                      where, method_name(e->method), e->p, e->servers, need, world_size, need);
    return seterr(err, errlen,
                  "%s: key 'p': the experiment asks for p = %d worker ranks but MPI started %d; "
                  "run mpiexec -n %d, or set p = %d (--set p=%d)", where, e->p, world_size, e->p, world_size, world_size);
}

int config_text_string(const char *text, const char *key, char *out, size_t n) {
    config_t cfg;
    const char *v = NULL;
    config_init(&cfg);
    const int ok = config_read_string(&cfg, text) && config_lookup_string(&cfg, key, &v);
    snprintf(out, n, "%s", ok ? v : "");
    config_destroy(&cfg);
    return ok ? 0 : -1;
}
