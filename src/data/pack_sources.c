/* pack_sources.c — the sources of `dsgd-run --pack` (pack.h; docs/data.md "Packing"): rank 0
 * walks SRC (sorted train class folders -> class index; val by class folder or by a label file)
 * into a source_set, which is serialised and broadcast so that every rank has the same list. */
#define _GNU_SOURCE
#include "pack_sources.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shards.h"
#include "util/util.h"
void pack_sources_free(source_set *ss) {
    for (int c = 0; c < ss->n_classes; c++) free(ss->classes[c]);
    free(ss->classes);
    for (int k = 0; k < N_SPLITS; k++) {
        for (int64_t i = 0; i < ss->s[k].n; i++) free(ss->s[k].rel[i]);
        free(ss->s[k].rel), free(ss->s[k].label);
    }
    memset(ss, 0, sizeof *ss);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void pack_strvec_push(strvec *s, const char *x) {
    s->v = xgrow(s->v, &s->cap, (size_t)s->n + 1, sizeof *s->v);
    s->v[s->n++] = strdup(x);
}

void pack_strvec_free(strvec *s) {
    for (int64_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* The entries of dir (names not starting with '.'), sorted: directories into dirs, regular
 * files into files (symbolic links followed); anything else is named on stderr and ignored. */
static int list_dir(const char *dir, strvec *dirs, strvec *files, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return seterr(err, errlen, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    char path[PATH_MAX + 256]; /* dir + "/" + d_name */
    while ((errno = 0, e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (strchr(e->d_name, '\n')) {
            closedir(d);
            return seterr(err, errlen, "%s: an entry's name holds a newline; rename it", dir);
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        /* d_type spares a stat() per file (1.28 M of them on a parallel file system); links and
         * file systems that do not fill it in are stat()ed, following the link. */
        int st = 0;
        if (e->d_type == DT_REG) sb.st_mode = S_IFREG;
        else if (e->d_type == DT_DIR) sb.st_mode = S_IFDIR;
        else st = stat(path, &sb);
        if (st != 0) fprintf(stderr, "dsgd-run: ignored %s: %s\n", path, strerror(errno));
        else if (S_ISDIR(sb.st_mode)) { if (dirs) pack_strvec_push(dirs, e->d_name); else fprintf(stderr, "dsgd-run: ignored %s: a directory (not looked into)\n", path); }
        else if (S_ISREG(sb.st_mode)) { if (files) pack_strvec_push(files, e->d_name); else fprintf(stderr, "dsgd-run: ignored %s: a file where class folders are expected\n", path); }
        else fprintf(stderr, "dsgd-run: ignored %s: not a regular file or directory\n", path);
    }
    const int rerr = errno;
    closedir(d);
    if (rerr) return seterr(err, errlen, "%s: %s", dir, strerror(rerr));
    if (dirs) qsort(dirs->v, (size_t)dirs->n, sizeof *dirs->v, cmp_str);
    if (files) qsort(files->v, (size_t)files->n, sizeof *files->v, cmp_str);
    return 0;
}

static int class_of(const source_set *ss, const char *wnid) {
    char *const *hit = bsearch(&wnid, ss->classes, (size_t)ss->n_classes, sizeof *ss->classes, cmp_str);
    return hit ? (int)(hit - ss->classes) : -1;
}

/* cap: the capacities of sp->rel and sp->label. */
static void split_push(split_list *sp, size_t cap[2], const char *rel, int label) {
    sp->rel = xgrow(sp->rel, &cap[0], (size_t)sp->n + 1, sizeof *sp->rel);
    sp->label = xgrow(sp->label, &cap[1], (size_t)sp->n + 1, sizeof *sp->label);
    sp->rel[sp->n] = strdup(rel);
    sp->label[sp->n++] = (int16_t)label;
}

/* ImageFolder: SRC/<split>/<wnid>/<file>, classes in sorted-folder order; for val every folder
 * must be a train class. */
static int list_folders(source_set *ss, int k, const char *dir, const strvec *classes, char *err, size_t errlen) {
    split_list *sp = &ss->s[k];
    size_t cap[2] = {0};
    char cdir[PATH_MAX], rel[PATH_MAX];
    for (int64_t c = 0; c < classes->n; c++) {
        const int label = k == TRAIN ? (int)c : class_of(ss, classes->v[c]);
        if (label < 0)
            return seterr(err, errlen, "%s/%s: class '%s' is not among the %d train classes (the folders of the train directory): "
                          "val classes must be train classes", dir, classes->v[c], classes->v[c], ss->n_classes);
        snprintf(cdir, sizeof cdir, "%s/%s", dir, classes->v[c]);
        strvec files = {0};
        int rc = list_dir(cdir, NULL, &files, err, errlen);
        if (!rc && files.n == 0) fprintf(stderr, "dsgd-run: note: %s holds no images\n", cdir);
        for (int64_t i = 0; !rc && i < files.n; i++) {
            snprintf(rel, sizeof rel, "%s/%s", classes->v[c], files.v[i]);
            split_push(sp, cap, rel, label);
        }
        pack_strvec_free(&files);
        if (rc) return rc;
    }
    return 0;
}

/* A label-file entry: key (file name or stem) -> label. */
typedef struct {
    char *key;
    int label, line, used;
} label_entry;

static int cmp_entry(const void *a, const void *b) { return strcmp(((const label_entry *)a)->key, ((const label_entry *)b)->key); }

/* Read a val label file: Kaggle's "ImageId,PredictionString" CSV (the wnid is the first token of
 * PredictionString) or "<file> <wnid>" lines (# comments, blank lines ignored). */
static int read_labels(const source_set *ss, const char *path, label_entry **out, int64_t *n_out, char *err, size_t errlen) {
    *out = NULL, *n_out = 0;
    FILE *f = fopen(path, "r");
    if (!f) return seterr(err, errlen, "val labels %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, csv = -1, rc = 0;
    int64_t n = 0;
    size_t ecap = 0;
    label_entry *e = NULL;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        char *s = line + strspn(line, " \t");
        if (!*s || *s == '#') continue;
        if (csv < 0) {
            csv = strncmp(s, "ImageId,", 8) == 0;
            if (csv) continue; /* the header */
        }
        char *key, *wnid;
        if (csv) {
            char *comma = strchr(s, ',');
            if (!comma) { rc = seterr(err, errlen, "%s:%d: expected 'ImageId,PredictionString' (Kaggle LOC_val_solution.csv)", path, lineno); break; }
            *comma = '\0';
            key = s, wnid = comma + 1 + strspn(comma + 1, " \t");
            wnid[strcspn(wnid, " \t")] = '\0';
        } else {
            key = s;
            char *sp = s + strcspn(s, " \t");
            if (!*sp) { rc = seterr(err, errlen, "%s:%d: expected '<file> <wnid>'", path, lineno); break; }
            *sp++ = '\0';
            wnid = sp + strspn(sp, " \t");
            char *tail = wnid + strcspn(wnid, " \t");
            if (*tail) *tail++ = '\0';
            if (*(tail + strspn(tail, " \t"))) { rc = seterr(err, errlen, "%s:%d: expected '<file> <wnid>', found more fields", path, lineno); break; }
        }
        if (!*key || !*wnid) { rc = seterr(err, errlen, "%s:%d: an empty file name or class", path, lineno); break; }
        const int label = class_of(ss, wnid);
        if (label < 0) {
            rc = seterr(err, errlen, "%s:%d: class '%s' (for %s) is not among the %d train classes (the folders of the train directory)",
                        path, lineno, wnid, key, ss->n_classes);
            break;
        }
        e = xgrow(e, &ecap, (size_t)n + 1, sizeof *e);
        e[n++] = (label_entry){strdup(key), label, lineno, 0};
    }
    free(line);
    fclose(f);
    if (!rc && n == 0) rc = seterr(err, errlen, "%s: no labels in it", path);
    if (!rc) {
        qsort(e, (size_t)n, sizeof *e, cmp_entry);
        for (int64_t i = 1; i < n && !rc; i++)
            if (!strcmp(e[i].key, e[i - 1].key))
                rc = seterr(err, errlen, "%s:%d: '%s' is labelled twice (also on line %d)", path, e[i].line > e[i - 1].line ? e[i].line : e[i - 1].line,
                            e[i].key, e[i].line < e[i - 1].line ? e[i].line : e[i - 1].line);
    }
    if (rc) {
        for (int64_t i = 0; i < n; i++) free(e[i].key);
        free(e);
        return rc;
    }
    *out = e, *n_out = n;
    return 0;
}

/* A flat SRC/val/<file> folder labelled by a label file (matched by file name, else by the name
 * without its extension, as Kaggle's ImageIds are). */
static int list_flat_val(source_set *ss, const char *src, const char *dir, const strvec *files, const char *labels_opt, char *err,
                         size_t errlen) {
    char path[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    if (labels_opt) snprintf(path, sizeof path, "%s", labels_opt);
    else {
        snprintf(a, sizeof a, "%s/val_labels.txt", src);
        snprintf(b, sizeof b, "%s/LOC_val_solution.csv", src);
        const int ha = access(a, F_OK) == 0, hb = access(b, F_OK) == 0;
        if (ha && hb) return seterr(err, errlen, "%s holds a flat val folder and both %s and %s: choose one with --val-labels", src, a, b);
        if (!ha && !hb) {
            snprintf(path, sizeof path, "%s/ILSVRC2012_validation_ground_truth.txt", src);
            return seterr(err, errlen, "%s is a flat folder of images, so its labels are needed: give --val-labels FILE, or put "
                          "val_labels.txt ('<file> <wnid>' lines) or Kaggle's LOC_val_solution.csv in %s%s (docs/data.md \"Packing\")",
                          dir, src, access(path, F_OK) == 0 ? "; the devkit's ILSVRC2012_validation_ground_truth.txt holds ILSVRC2012_IDs, "
                                                             "not wnids: convert it with meta.mat as docs/data.md shows" : "");
        }
        snprintf(path, sizeof path, "%s", ha ? a : b);
    }
    label_entry *e;
    int64_t n;
    int rc = read_labels(ss, path, &e, &n, err, errlen);
    if (rc) return rc;
    split_list *sp = &ss->s[VAL];
    size_t cap[2] = {0};
    for (int64_t i = 0; i < files->n && !rc; i++) {
        /* by the file name, or by the name without its extension; a file labelled both ways is
         * labelled twice, as a file named twice in the same form is */
        label_entry key = {.key = files->v[i]};
        label_entry *full = bsearch(&key, e, (size_t)n, sizeof *e, cmp_entry), *by_stem = NULL;
        char stem[PATH_MAX];
        snprintf(stem, sizeof stem, "%s", files->v[i]);
        char *dot = strrchr(stem, '.');
        if (dot && dot != stem) {
            *dot = '\0';
            key.key = stem;
            by_stem = bsearch(&key, e, (size_t)n, sizeof *e, cmp_entry);
        }
        label_entry *hit = full ? full : by_stem;
        if (full && by_stem)
            rc = seterr(err, errlen, "%s:%d: '%s' is labelled twice (also as '%s' on line %d)", path,
                        full->line > by_stem->line ? full->line : by_stem->line, files->v[i], stem,
                        full->line < by_stem->line ? full->line : by_stem->line);
        else if (!hit) rc = seterr(err, errlen, "%s/%s: no label for it in %s", dir, files->v[i], path);
        else hit->used++, split_push(sp, cap, files->v[i], hit->label);
    }
    int64_t unused = 0;
    for (int64_t i = 0; i < n; i++) unused += !e[i].used, free(e[i].key);
    free(e);
    if (!rc && unused) fprintf(stderr, "dsgd-run: note: %lld label(s) of %s name no file in %s\n", (long long)unused, path, dir);
    if (!rc) printf("dsgd-run --pack: val labels from %s\n", path);
    return rc;
}

/* Rank 0: list SRC into ss. */
int pack_list_sources(source_set *ss, const pack_options *o, char *err, size_t errlen) {
    memset(ss, 0, sizeof *ss);
    char dir[PATH_MAX];
    struct stat sb;
    if (stat(o->src, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return seterr(err, errlen, "%s: %s; expected the directory of an ImageFolder tree (SRC/train/<wnid>/...)", o->src,
                      stat(o->src, &sb) != 0 ? strerror(errno) : "not a directory");
    snprintf(dir, sizeof dir, "%s/train", o->src);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return seterr(err, errlen, "%s: no train directory; expected an ImageFolder tree %s/train/<wnid>/<images> (docs/data.md \"Packing\")",
                      o->src, o->src);
    strvec classes = {0};
    int rc = list_dir(dir, &classes, NULL, err, errlen);
    if (!rc && classes.n == 0) rc = seterr(err, errlen, "%s: no class folders; expected %s/<wnid>/<images>", dir, dir);
    if (!rc && classes.n > SHARDS_MAX_CLASSES) rc = seterr(err, errlen, "%s: %lld class folders; at most %d are packed", dir, (long long)classes.n, SHARDS_MAX_CLASSES);
    for (int64_t c = 0; !rc && c < classes.n; c++)
        if (strlen(classes.v[c]) > SHARDS_WNID_MAX) rc = seterr(err, errlen, "%s/%s: a class name longer than %d bytes", dir, classes.v[c], SHARDS_WNID_MAX);
    if (rc) { pack_strvec_free(&classes); return rc; }
    ss->n_classes = (int)classes.n;
    ss->classes = xcalloc((size_t)classes.n, sizeof *ss->classes);
    for (int64_t c = 0; c < classes.n; c++) ss->classes[c] = strdup(classes.v[c]);
    ss->s[TRAIN].present = 1;
    rc = list_folders(ss, TRAIN, dir, &classes, err, errlen);
    pack_strvec_free(&classes);
    if (!rc && ss->s[TRAIN].n == 0) rc = seterr(err, errlen, "%s: no images in its %d class folders", dir, ss->n_classes);
    if (rc) return rc;

    snprintf(dir, sizeof dir, "%s/val", o->src);
    if (stat(dir, &sb) != 0) {
        fprintf(stderr, "dsgd-run: note: %s: no val directory: only train is packed\n", o->src);
        return 0;
    }
    if (!S_ISDIR(sb.st_mode)) return seterr(err, errlen, "%s: not a directory", dir);
    strvec vdirs = {0}, vfiles = {0};
    rc = list_dir(dir, &vdirs, &vfiles, err, errlen);
    if (!rc && vdirs.n && vfiles.n)
        rc = seterr(err, errlen, "%s holds both folders (%s, ...) and files (%s, ...); expected either class folders or a flat folder of images",
                    dir, vdirs.v[0], vfiles.v[0]);
    if (!rc && !vdirs.n && !vfiles.n) rc = seterr(err, errlen, "%s is empty; expected class folders or images", dir);
    ss->s[VAL].present = 1;
    if (!rc && vdirs.n) rc = list_folders(ss, VAL, dir, &vdirs, err, errlen);
    else if (!rc) rc = list_flat_val(ss, o->src, dir, &vfiles, o->val_labels, err, errlen);
    if (!rc && ss->s[VAL].n == 0) rc = seterr(err, errlen, "%s: no images", dir);
    pack_strvec_free(&vdirs), pack_strvec_free(&vfiles);
    return rc;
}

static void blob_put(blob *b, const char *s) {
    size_t l = strlen(s) + 1;
    b->p = xgrow(b->p, &b->cap, b->n + l, 1);
    memcpy(b->p + b->n, s, l);
    b->n += l;
}

static void blob_put_i(blob *b, long long v) {
    char t[32];
    snprintf(t, sizeof t, "%lld", v);
    blob_put(b, t);
}

void pack_sources_to_blob(const source_set *ss, blob *b) {
    blob_put_i(b, ss->n_classes);
    for (int c = 0; c < ss->n_classes; c++) blob_put(b, ss->classes[c]);
    for (int k = 0; k < N_SPLITS; k++) {
        blob_put_i(b, ss->s[k].present);
        blob_put_i(b, ss->s[k].n);
        for (int64_t i = 0; i < ss->s[k].n; i++) blob_put_i(b, ss->s[k].label[i]), blob_put(b, ss->s[k].rel[i]);
    }
}

static const char *blob_next(const char **at) {
    const char *s = *at;
    *at += strlen(s) + 1;
    return s;
}

void pack_sources_from_blob(source_set *ss, const char *p) {
    memset(ss, 0, sizeof *ss);
    ss->n_classes = atoi(blob_next(&p));
    ss->classes = xcalloc((size_t)ss->n_classes, sizeof *ss->classes);
    for (int c = 0; c < ss->n_classes; c++) ss->classes[c] = strdup(blob_next(&p));
    for (int k = 0; k < N_SPLITS; k++) {
        split_list *sp = &ss->s[k];
        sp->present = atoi(blob_next(&p));
        sp->n = atoll(blob_next(&p));
        sp->rel = xcalloc((size_t)sp->n, sizeof *sp->rel);
        sp->label = xcalloc((size_t)sp->n, sizeof *sp->label);
        for (int64_t i = 0; i < sp->n; i++) sp->label[i] = (int16_t)atoi(blob_next(&p)), sp->rel[i] = strdup(blob_next(&p));
    }
}

