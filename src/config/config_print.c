/* config_print.c — the experiment as text, from the key table (config_keys.c, whose value-as-text
 * helpers it uses): the provenance text stored in the run file (config_to_text), `--check`'s table
 * (config_print_table), `--help` (config_print_keys) and the reference table of docs/config.md
 * (config_print_markdown). */
#include "config_keys.h"

#include "util/util.h"

#include <limits.h>
#include <string.h>

/* The value of key d in e as libconfig text ("0.1", "\"dsgd\"", "[100, 200]", "true"). */
static void value_text(const key_def *d, const experiment *e, char *buf, size_t n) {
    size_t len = 0;
    switch (d->type) {
    case KT_INT:
    case KT_INT64: config_fmt_int(buf, n, config_get_int(d, e)); break;
    case KT_FLOAT: config_fmt_double(buf, n, *CFIELD(e, d, double)); break;
    case KT_BOOL: snprintf(buf, n, "%s", *CFIELD(e, d, int) ? "true" : "false"); break;
    case KT_STRING: config_put_quoted(buf, n, &len, CFIELD(e, d, char)); break;
    case KT_ENUM: {
        int v = *CFIELD(e, d, int);
        config_put_quoted(buf, n, &len, v >= 0 && v < d->n_names ? d->names[v] : "?");
        break;
    }
    case KT_LIST:
    case KT_INTS: {
        int ns = config_list_len(d, e), wide = 0;
        for (int i = 0; i < ns; i++) wide |= config_list_get(d, e, i) > INT_MAX || config_list_get(d, e, i) < INT_MIN;
        config_put(buf, n, &len, "[");
        /* libconfig arrays are homogeneous: all with L or none */
        for (int i = 0; i < ns; i++) config_put(buf, n, &len, "%s%lld%s", i ? ", " : "", config_list_get(d, e, i), wide ? "L" : "");
        config_put(buf, n, &len, "]");
        break;
    }
    }
}

int config_to_text(const experiment *e, char *buf, size_t n) {
    size_t len = 0;
    char v[4 * CFG_PATH_MAX + 8], src[CFG_PATH_MAX];
    /* the source path in a comment: no newlines or control characters that would end it */
    snprintf(src, sizeof src, "%s", e->source);
    for (char *c = src; *c; c++) if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    config_put(buf, n, &len, "# dsgd-run %s experiment, resolved (every key, defaults included)%s%s\n", DSGD_VERSION,
        src[0] ? "; read from " : "", src);
    const char *group = NULL;
    size_t glen = 0;
    for (int i = 0; i < config_n_keys; i++) {
        const key_def *d = &config_keys[i];
        const char *dot = strchr(d->key, '.');
        size_t kg = dot ? (size_t)(dot - d->key) : 0;
        if (group && (kg != glen || strncmp(group, d->key, glen))) { config_put(buf, n, &len, "};\n"); group = NULL; }
        if (dot && !group) { group = d->key; glen = kg; config_put(buf, n, &len, "%.*s = {\n", (int)kg, d->key); }
        value_text(d, e, v, sizeof v);
        config_put(buf, n, &len, "%s%s = %s;\n", group ? "  " : "", dot ? dot + 1 : d->key, v);
    }
    if (group) config_put(buf, n, &len, "};\n");
    if (!n) return 0;
    return (int)(len < n ? len : n - 1);
}

/* The default value of key d as text, with output's default resolved for e's name. */
static void default_text(const key_def *d, const experiment *e, char *buf, size_t n) {
    static experiment dflt; /* large: keep it off the stack */
    config_defaults(&dflt);
    if (e && d->type == KT_STRING && !strcmp(d->key, "output"))
        snprintf(dflt.output, sizeof dflt.output, "runs/%s.h5", e->name);
    value_text(d, &dflt, buf, n);
}

void config_print_table(const experiment *e, FILE *f) {
    char v[4 * CFG_PATH_MAX + 8], dv[4 * CFG_PATH_MAX + 8];
    int kw = 3, vw = 5;
    for (int i = 0; i < config_n_keys; i++) {
        value_text(&config_keys[i], e, v, sizeof v);
        if ((int)strlen(config_keys[i].key) > kw) kw = (int)strlen(config_keys[i].key);
        if ((int)strlen(v) > vw) vw = (int)strlen(v);
    }
    if (vw > 64) vw = 64; /* longer paths overflow rather than widen every row */
    fprintf(f, "experiment %s (* = differs from the default)\n", e->source);
    fprintf(f, "  %-*s  %-*s  %s\n", kw, "key", vw, "value", "unit");
    for (int i = 0; i < config_n_keys; i++) {
        const key_def *d = &config_keys[i];
        value_text(d, e, v, sizeof v);
        default_text(d, e, dv, sizeof dv);
        int same = !strcmp(v, dv);
        fprintf(f, "%c %-*s  %-*s  %-10s  %s%s%s\n", same ? ' ' : '*', kw, d->key, vw, v, d->unit[0] ? d->unit : "-",
                same ? "(default)" : "(default ", same ? "" : dv, same ? "" : ")");
    }
}

static const char *type_name(const key_def *d) {
    switch (d->type) {
    case KT_INT: return "int";
    case KT_INT64: return "int64";
    case KT_FLOAT: return "float";
    case KT_BOOL: return "bool";
    case KT_STRING: return "string";
    case KT_ENUM: return "enum";
    case KT_LIST: return d->elem_int ? "int list" : "int64 list";
    case KT_INTS: return d->n_max == 2 ? "int[2]" : d->n_max == 3 ? "int[3]" : "int[]";
    }
    return "?";
}

/* The allowed values of key d, short form for --help and the docs ("> 0", "in [0, 1)"). */
static void range_text(const key_def *d, char *buf, size_t n) {
    size_t len = 0;
    char want[512];
    switch (d->type) {
    case KT_INT:
    case KT_INT64:
    case KT_FLOAT:
        config_expect_text(d, NULL, want, sizeof want);
        config_put(buf, n, &len, "%s", strncmp(want, "an integer ", 11) ? want + 9 /* "a number " */ : want + 11);
        break;
    case KT_LIST:
        config_put(buf, n, &len, "strictly increasing, each in [%lld, %s%c, at most %d", d->ilo, d->hi_key, d->hi_open ? ')' : ']',
                   d->n_max);
        break;
    case KT_INTS:
        if (d->nondecr) config_put(buf, n, &len, "[min, max], min <= max, each in [%lld, %lld]", d->ilo, d->ihi);
        else config_put(buf, n, &len, "%d integers, each in [%lld, %lld]", d->n_max, d->ilo, d->ihi);
        break;
    case KT_BOOL: config_put(buf, n, &len, "true, false"); break;
    case KT_STRING:
        if (d->str_check == S_RUNNAME) config_put(buf, n, &len, "letters, digits, ._+-; 1..%zu chars", d->size - 1);
        else config_put(buf, n, &len, "%s..%zu chars", d->str_check == S_NONEMPTY ? "1" : "0", d->size - 1);
        break;
    case KT_ENUM: {
        const unsigned planned = ((1u << d->n_names) - 1) & ~d->built;
        for (int i = 0; i < d->n_names; i++)
            if (d->built & (1u << i)) config_put(buf, n, &len, "%s%s", len ? ", " : "", d->names[i]);
        for (int i = 0; i < d->n_names; i++)
            if (planned & (1u << i)) config_put(buf, n, &len, "%s %s", planned & ((1u << i) - 1) ? "," : " (planned:", d->names[i]);
        if (planned) config_put(buf, n, &len, ")");
        break;
    }
    }
}

void config_print_keys(FILE *f) {
    char dv[4 * CFG_PATH_MAX + 8], r[512];
    fprintf(f, "  %-18s %-10s %-10s %-12s %s\n", "key", "type", "unit", "default", "allowed");
    for (int i = 0; i < config_n_keys; i++) {
        const key_def *d = &config_keys[i];
        default_text(d, NULL, dv, sizeof dv);
        range_text(d, r, sizeof r);
        int long_dflt = strlen(dv) > 12; /* the data paths: default on a line of its own */
        fprintf(f, "  %-18s %-10s %-10s %-12s %s\n      %s\n", d->key, type_name(d), d->unit[0] ? d->unit : "-",
                long_dflt ? "(below)" : dv, r, d->doc);
        if (long_dflt) fprintf(f, "      default %s\n", dv);
    }
}

/* Markdown-escape a table cell: '|' breaks the row; outside code, '<' would start an HTML tag
 * and '*' emphasis. */
static void md_cell(FILE *f, const char *s, int code) {
    if (code) fputc('`', f);
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else if (!code && *s == '<') fputs("&lt;", f);
        else if (!code && *s == '*') fputs("\\*", f);
        else fputc(*s, f);
    }
    if (code) fputc('`', f);
}

void config_print_markdown(FILE *f) {
    char dv[4 * CFG_PATH_MAX + 8], r[512];
    fprintf(f, "| key | type | default | allowed | unit | meaning |\n");
    fprintf(f, "|---|---|---|---|---|---|\n");
    for (int i = 0; i < config_n_keys; i++) {
        const key_def *d = &config_keys[i];
        default_text(d, NULL, dv, sizeof dv);
        range_text(d, r, sizeof r);
        fputs("| ", f);
        md_cell(f, d->key, 1);
        fprintf(f, " | %s | ", type_name(d));
        md_cell(f, dv, 1);
        fputs(" | ", f);
        md_cell(f, r, 0);
        fprintf(f, " | %s | ", d->unit[0] ? d->unit : "-");
        md_cell(f, d->doc, 0);
        fputs(" |\n", f);
    }
}

