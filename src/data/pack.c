/* pack.c — `dsgd-run --pack SRC OUT` (pack.h; docs/data.md "Packing").
 *
 * Rank 0 lists SRC (sorted train class folders -> class index; val by folder or label file),
 * checks and prepares OUT and broadcasts the list; every rank then draws the same per-split
 * permutation from --seed, cuts it into K shards and packs the shards k ≡ rank (mod ranks).
 * Within a rank, worker threads read, decode (src/data/image.h; PNG through libpng), shrink and
 * re-encode (libjpeg) images into a ring of slots, in task order; the rank's main thread is the
 * one writer: it takes the slots in order, names skipped images, prints progress and writes each
 * shard (src/data/shards.h) as <name>.tmp, closes and fsyncs it and links it to its name. Once
 * every rank is done, rank 0 writes OUT/index.h5 the same way: a pack without its index is not
 * complete, and a file with a final name is never half-written.
 *
 * Slots are consumed in task order, so a shard's content and the messages on stderr do not
 * depend on the number of threads; the assignment of shards to ranks does not change a shard,
 * so neither does the number of ranks. Waits are bounded: a worker waits for a free slot in 1 s
 * steps while the writer makes progress, and the writer gives up (exit 1) when no image has been
 * finished for PACK_STALL_S seconds. */
#define _GNU_SOURCE
#include "pack_image.h"
#include "pack_sources.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "data/loader.h"
#include "data/shards.h"
#include "util/util.h"

#define PACK_MAX_FILE ((size_t)256 << 20) /* larger image files are skipped (bytes) */
#define PACK_STALL_S 600.0              /* writer: no image finished for this long -> exit 1 */
#define PACK_SUBSAMPLING "4:2:0"
#define PACK_INTERP "bicubic"

/* ------------------------------------------------------------------------------------------ */
/* Options.                                                                                    */
int pack_requested(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--pack") == 0) return 1;
    return 0;
}

static void pack_usage(FILE *f) {
    fprintf(f,
            "usage: dsgd-run --pack SRC OUT [--max-side 480] [--quality 90] [--threads N]\n"
            "                [--shard-images 10000 | --shards K] [--val-labels FILE] [--seed 1] [--overwrite]\n"
            "       mpiexec -n R dsgd-run --pack ...   (or srun: the ranks share the shards)\n"
            "\n"
            "Packs an ImageFolder tree SRC/train/<wnid>/*, SRC/val/<wnid>/* (or a flat SRC/val/ with\n"
            "SRC/val_labels.txt \"<file> <wnid>\" lines or Kaggle's SRC/LOC_val_solution.csv) into HDF5\n"
            "shards OUT/<split>-<k>-of-<K>.h5 and OUT/index.h5: every image (JPEG or PNG, by content)\n"
            "as RGB, largest side <= --max-side (never enlarged), baseline JPEG 4:2:0 at --quality.\n"
            "\n"
            "options:\n"
            "  --max-side N      largest side of a stored image, pixels (default 480, Jin et al.)\n"
            "  --quality Q       JPEG quality 1..100 (default 90)\n"
            "  --threads N       decode/encode threads per rank (default: the rank's cores)\n"
            "  --shard-images N  images per shard (default 10000: ~0.4-0.5 GB of ImageNet)\n"
            "  --shards K        K shards per split instead (at most one per image)\n"
            "  --val-labels FILE labels of a flat val/ folder (default: SRC/val_labels.txt or\n"
            "                    SRC/LOC_val_solution.csv)\n"
            "  --seed S          seed of the permutation that spreads the images over the shards (default 1)\n"
            "  --overwrite       replace the pack in OUT (only a pack's own files; anything else refuses)\n"
            "\n"
            "exit status: 0 packed (undecodable images are named, counted and skipped), 1 write or\n"
            "system failure, 2 bad input (nothing written). docs: docs/data.md \"Packing\"\n");
}

/* An integer option value in [lo, hi]. */
static int parse_long(const char *opt, const char *s, long lo, long hi, long *v, char *err, size_t errlen) {
    char *end;
    errno = 0;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || x < lo || x > hi)
        return seterr(err, errlen, "%s %s: expected an integer from %ld to %ld", opt, s ? s : "(missing)", lo, hi);
    *v = x;
    return 0;
}

static int parse_options(int argc, char **argv, pack_options *o, char *err, size_t errlen) {
    *o = (pack_options){.max_side = 480, .quality = 90, .shard_images = 10000, .seed = 1};
    const char *pos[2];
    int n_pos = 0, have_si = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--pack")) continue;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) { o->help = 1; continue; }
        if (!strcmp(s, "--overwrite")) { o->overwrite = 1; continue; }
        if (s[0] != '-' || !s[1]) {
            if (n_pos == 2) return seterr(err, errlen, "--pack takes SRC and OUT; '%s' is a third argument", s);
            pos[n_pos++] = s;
            continue;
        }
        static const char *const valued[] = {"--max-side", "--quality", "--threads", "--shard-images", "--shards", "--seed", "--val-labels"};
        int which = -1;
        const char *val = NULL;
        for (int k = 0; k < (int)(sizeof valued / sizeof *valued); k++) {
            size_t l = strlen(valued[k]);
            if (!strncmp(s, valued[k], l) && (s[l] == '\0' || s[l] == '=')) which = k, val = s[l] == '=' ? s + l + 1 : NULL;
        }
        if (which < 0) return seterr(err, errlen, "unknown option '%s' for --pack (see dsgd-run --pack --help)", s);
        if (!val) {
            if (i + 1 >= argc) return seterr(err, errlen, "%s needs a value (see dsgd-run --pack --help)", s);
            val = argv[++i];
        }
        long v = 0;
        int rc = 0;
        switch (which) {
        case 0: rc = parse_long("--max-side", val, 1, 65535, &v, err, errlen), o->max_side = (int)v; break;
        case 1: rc = parse_long("--quality", val, 1, 100, &v, err, errlen), o->quality = (int)v; break;
        case 2: rc = parse_long("--threads", val, 1, 1024, &v, err, errlen), o->threads = (int)v; break;
        case 3: rc = parse_long("--shard-images", val, 1, INT32_MAX, &v, err, errlen), o->shard_images = v, have_si = 1; break;
        case 4: rc = parse_long("--shards", val, 1, 99999, &v, err, errlen), o->shards = (int)v; break;
        case 5: rc = parse_long("--seed", val, 0, LONG_MAX, &v, err, errlen), o->seed = (uint64_t)v; break;
        case 6: o->val_labels = val; break;
        }
        if (rc) return rc;
    }
    if (o->help) return 0;
    if (have_si && o->shards) return seterr(err, errlen, "--shard-images and --shards both given: choose one");
    if (n_pos < 2) return seterr(err, errlen, "--pack needs SRC and OUT (usage: dsgd-run --pack SRC OUT [options]; dsgd-run --pack --help)");
    o->src = pos[0], o->out = pos[1];
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* OUT: never an input, never another run's output unless --overwrite (and then only a pack).  */

/* index.h5, <split>-NNNNN-of-NNNNN.h5, and their .tmp */
static int is_pack_file(const char *name) {
    char base[256];
    snprintf(base, sizeof base, "%s", name);
    size_t l = strlen(base);
    if (l > 4 && !strcmp(base + l - 4, ".tmp")) base[l -= 4] = '\0';
    if (!strcmp(base, SHARDS_INDEX)) return 1;
    for (int k = 0; k < N_SPLITS; k++) {
        size_t sl = strlen(split_names[k]);
        const char *s = base + sl;
        if (strncmp(base, split_names[k], sl) || *s != '-') continue;
        s++;
        size_t d = strspn(s, "0123456789");
        if (d < 5 || strncmp(s + d, "-of-", 4)) continue;
        s += d + 4;
        d = strspn(s, "0123456789");
        if (d >= 5 && !strcmp(s + d, ".h5")) return 1;
    }
    return 0;
}

/* a is b or lies inside it (both real paths) */
static int path_within(const char *a, const char *b) {
    size_t l = strlen(b);
    return !strncmp(a, b, l) && (a[l] == '\0' || a[l] == '/');
}

/* The real path a (possibly not yet existing) path will have: realpath of its nearest existing
 * ancestor, with the missing components appended. 0, or -1 with errno. */
static int future_realpath(const char *path, char *out) {
    char head[PATH_MAX], tail[PATH_MAX] = "";
    snprintf(head, sizeof head, "%s", path);
    for (;;) {
        if (realpath(head[0] ? head : ".", out)) break;
        if (errno != ENOENT) return -1;
        char *slash = strrchr(head, '/');
        char t[PATH_MAX];
        const int len = snprintf(t, sizeof t, "/%s%s", slash ? slash + 1 : head, tail);
        if (len < 0 || (size_t)len >= sizeof t) return errno = ENAMETOOLONG, -1;
        memcpy(tail, t, (size_t)len + 1);
        if (!slash) head[0] = '\0';
        else if (slash == head) snprintf(head, sizeof head, "/");
        else *slash = '\0';
    }
    if (strlen(out) + strlen(tail) >= PATH_MAX) return errno = ENAMETOOLONG, -1;
    if (!strcmp(out, "/") && tail[0]) out[0] = '\0';
    strcat(out, tail);
    return 0;
}

static int prepare_out(const pack_options *o, char *err, size_t errlen) {
    char rs[PATH_MAX], ro[PATH_MAX], sub[PATH_MAX + 8];
    if (!realpath(o->src, rs)) return seterr(err, errlen, "%s: %s", o->src, strerror(errno));
    /* Never into the images (whether OUT exists yet or not). */
    if (future_realpath(o->out, ro)) return seterr(err, errlen, "%s: %s", o->out, strerror(errno));
    if (!strcmp(ro, rs)) return seterr(err, errlen, "OUT %s is SRC: choose another directory for the pack", o->out);
    for (int k = 0; k < N_SPLITS; k++) {
        snprintf(sub, sizeof sub, "%s/%s", rs, split_names[k]);
        if (path_within(ro, sub))
            return seterr(err, errlen, "OUT %s lies inside SRC's %s images (%s): choose a directory outside them", o->out, split_names[k], sub);
    }
    struct stat sb;
    if (stat(o->out, &sb) != 0) {
        if (errno != ENOENT) return seterr(err, errlen, "%s: %s", o->out, strerror(errno));
        if (mkdirs(o->out, "the pack (OUT)", err, errlen)) return EXIT_BADINPUT;
        return 0;
    }
    if (!S_ISDIR(sb.st_mode)) return seterr(err, errlen, "%s exists and is not a directory; OUT must be a directory for the pack", o->out);
    if (access(o->out, W_OK | X_OK) != 0) return seterr(err, errlen, "%s: directory not writable", o->out);
    DIR *d = opendir(o->out);
    if (!d) return seterr(err, errlen, "%s: %s", o->out, strerror(errno));
    strvec ours = {0};
    int rc = 0, any = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        any = 1;
        if (!o->overwrite)
            rc = seterr(err, errlen, "%s already holds files (%s%s): a pack is never written over an earlier output; use --overwrite to "
                        "replace a pack, or choose another OUT", o->out, e->d_name, is_pack_file(e->d_name) ? ", of a pack" : "");
        else if (!is_pack_file(e->d_name))
            rc = seterr(err, errlen, "%s/%s is not a file of a dsgd-run pack: --overwrite replaces only a pack's own files; remove it or "
                        "choose another OUT", o->out, e->d_name);
        else pack_strvec_push(&ours, e->d_name);
    }
    closedir(d);
    if (!rc && any) { /* the index first: from then on the old pack is visibly incomplete */
        char p[PATH_MAX + 300];
        for (int64_t i = -1; !rc && i < ours.n; i++) {
            snprintf(p, sizeof p, "%s/%s", o->out, i < 0 ? SHARDS_INDEX : ours.v[i]);
            if (unlink(p) != 0 && errno != ENOENT) rc = seterr(err, errlen, "--overwrite: cannot remove %s: %s", p, strerror(errno));
        }
        if (!rc) printf("dsgd-run --pack: --overwrite: removed the %lld file(s) of the earlier pack in %s\n", (long long)ours.n, o->out);
    }
    pack_strvec_free(&ours);
    return rc;
}

/* fsync a file or directory by path; 0 or -1 with errno. */
static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Publish tmp as final: fsync tmp, link it to final (fails if final exists: nothing is ever
 * replaced), remove tmp, fsync the directory. 0 or EXIT_RUNTIME. */
static int publish(const char *tmp, const char *final, const char *dir, char *err, size_t errlen) {
    if (fsync_path(tmp) != 0) return seterr(err, errlen, "%s: fsync: %s", tmp, strerror(errno)), EXIT_RUNTIME;
    if (link(tmp, final) != 0) {
        if (errno == EEXIST) return seterr(err, errlen, "%s appeared while packing (another pack into the same OUT?): not replaced", final), EXIT_RUNTIME;
        if (rename(tmp, final) != 0) return seterr(err, errlen, "%s: cannot rename to %s: %s", tmp, final, strerror(errno)), EXIT_RUNTIME;
    } else unlink(tmp);
    if (fsync_path(dir) != 0) return seterr(err, errlen, "%s: fsync: %s", dir, strerror(errno)), EXIT_RUNTIME;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Shards of a split: a seeded permutation cut into K contiguous parts.                        */

typedef struct {
    int n_shards;
    uint32_t *perm;    /* (n) source indices in shard order */
    int64_t *start;    /* (K + 1) shard k = perm[start[k], start[k+1]) */
} split_plan;

static void plan_split(split_plan *pl, int64_t n, const pack_options *o, int k_split) {
    int64_t K = o->shards ? o->shards : (n + o->shard_images - 1) / o->shard_images;
    if (K > n) K = n;
    if (K < 1) K = 1;
    pl->n_shards = (int)K;
    pl->perm = xmalloc((size_t)n * sizeof *pl->perm);
    loader_permutation(pl->perm, (int)n, o->seed, k_split + 1); /* the loader's shuffle, as an epoch k_split + 1 */
    pl->start = xmalloc(((size_t)K + 1) * sizeof *pl->start);
    for (int64_t k = 0; k <= K; k++) pl->start[k] = k * n / K;
}

/* ------------------------------------------------------------------------------------------ */
/* The pipeline of one rank: worker threads fill a ring of slots in task order, the calling   */
/* thread writes the shards.                                                                  */

typedef struct {
    int split, shard;
    int64_t src;
} task;

typedef struct {
    int done;           /* filled by a worker, not yet taken by the writer */
    int skipped;
    uint8_t *jpeg;
    size_t n, cap;
    int h, w, warnings;
    char why[512];
} slot;

typedef struct {
    const pack_options *o;
    const source_set *ss;
    char dirs[N_SPLITS][PATH_MAX];
    const task *tasks;
    int64_t n_tasks;
    slot *ring;
    int64_t ring_n;
    atomic_llong next;          /* next task a worker takes */
    int64_t taken;              /* tasks the writer has taken (under mu) */
    int stop;                   /* the writer gave up (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv_done, cv_free;
} pipeline;

/* Read the whole file into *buf (grown); 0, or 1 with why. */
static int read_whole(const char *path, uint8_t **buf, size_t *cap, size_t *n, char *why, size_t whylen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return snprintf(why, whylen, "cannot open: %s", strerror(errno)), 1;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0) rc = (snprintf(why, whylen, "cannot stat: %s", strerror(errno)), 1);
    else if ((size_t)sb.st_size > PACK_MAX_FILE)
        rc = (snprintf(why, whylen, "%lld bytes: larger than the %zu MiB an image may have", (long long)sb.st_size, PACK_MAX_FILE >> 20), 1);
    size_t got = 0;
    if (!rc) {
        *buf = xgrow(*buf, cap, (size_t)sb.st_size + 1, 1);
        while (got < (size_t)sb.st_size) {
            ssize_t r = read(fd, *buf + got, (size_t)sb.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) { rc = (snprintf(why, whylen, "read error: %s", strerror(errno)), 1); break; }
            if (r == 0) break; /* shrank since fstat: take what is there */
            got += (size_t)r;
        }
    }
    close(fd);
    *n = got;
    return rc;
}

static void *worker_main(void *arg) {
    pipeline *p = arg;
    pack_conv *c = pack_conv_new();
    uint8_t *fbuf = NULL;
    size_t fcap = 0, fn = 0;
    char path[2 * PATH_MAX];
    for (;;) {
        const int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) break;
        pthread_mutex_lock(&p->mu);
        while (!p->stop && t >= p->taken + p->ring_n) timed_wait(&p->cv_free, &p->mu, 1.0);
        const int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        const task *tk = &p->tasks[t];
        slot *s = &p->ring[t % p->ring_n];
        snprintf(path, sizeof path, "%s/%s", p->dirs[tk->split], p->ss->s[tk->split].rel[tk->src]);
        s->skipped = 0, s->warnings = 0, s->why[0] = '\0';
        const uint8_t *jpeg;
        size_t jn;
        if (read_whole(path, &fbuf, &fcap, &fn, s->why, sizeof s->why) ||
            pack_convert(c, fbuf, fn, p->o->max_side, p->o->quality, &jpeg, &jn, &s->h, &s->w, &s->warnings, s->why, sizeof s->why))
            s->skipped = 1;
        else {
            s->jpeg = xgrow(s->jpeg, &s->cap, jn, 1);
            memcpy(s->jpeg, jpeg, jn);
            s->n = jn;
        }
        pthread_mutex_lock(&p->mu);
        s->done = 1;
        pthread_cond_broadcast(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
    free(fbuf);
    pack_conv_free(c);
    return NULL;
}

/* What a rank packed: per split and shard n, skipped, bytes; totals. */
typedef struct {
    double *n[N_SPLITS], *skipped[N_SPLITS], *nbytes[N_SPLITS];
    double packed, n_skipped, warned, bytes;
} pack_stats;

static void human_time(char *buf, size_t n, double s) {
    if (s < 0 || s > 1e7) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%ds", (int)s);
}

/* The writer: take slots in task order, build and publish each shard. 0 or EXIT_RUNTIME. */
static int write_shards(pipeline *p, const split_plan *plans, pack_stats *st, int rank, int ranks, char *err, size_t errlen) {
    const pack_options *o = p->o;
    const double t0 = wall_time(), every = isatty(2) ? 1.0 : 10.0;
    double last_print = t0, last_done = t0;
    int64_t t = 0;
    int rc = 0;
    while (t < p->n_tasks && !rc) {
        const int k = p->tasks[t].split, sh = p->tasks[t].shard;
        const split_plan *pl = &plans[k];
        const int64_t cap = pl->start[sh + 1] - pl->start[sh];
        uint64_t *off = xcalloc((size_t)cap + 1, sizeof *off);
        int16_t *label = xmalloc((size_t)cap * sizeof *label);
        uint16_t *hh = xmalloc((size_t)cap * sizeof *hh), *ww = xmalloc((size_t)cap * sizeof *ww);
        int32_t *src = xmalloc((size_t)cap * sizeof *src), *skipped = xmalloc((size_t)cap * sizeof *skipped);
        int64_t n = 0, n_skipped = 0;
        size_t jcap = (size_t)cap * 16384 + 65536, jn = 0;
        uint8_t *jbuf = xmalloc(jcap);
        for (; t < p->n_tasks && p->tasks[t].split == k && p->tasks[t].shard == sh; t++) {
            slot *s = &p->ring[t % p->ring_n];
            pthread_mutex_lock(&p->mu);
            while (!s->done) {
                timed_wait(&p->cv_done, &p->mu, 1.0);
                const double now = wall_time();
                if (!s->done && now - last_done > PACK_STALL_S) {
                    p->stop = 1;
                    pthread_cond_broadcast(&p->cv_free);
                    seterr(err, errlen, "no image finished in %.0f s; waiting for %s/%s", PACK_STALL_S, p->dirs[k],
                           p->ss->s[k].rel[p->tasks[t].src]);
                    rc = EXIT_RUNTIME;
                    break;
                }
            }
            pthread_mutex_unlock(&p->mu);
            if (rc) break;
            last_done = wall_time();
            const int64_t si = p->tasks[t].src;
            if (s->skipped) {
                fprintf(stderr, "dsgd-run: skipped %s/%s: %s\n", p->dirs[k], p->ss->s[k].rel[si], s->why);
                skipped[n_skipped++] = (int32_t)si;
            } else {
                if (s->warnings) {
                    fprintf(stderr, "dsgd-run: %s/%s: %d decoder warning(s) (corrupt data recovered): packed\n", p->dirs[k],
                            p->ss->s[k].rel[si], s->warnings);
                    st->warned++;
                }
                jbuf = xgrow(jbuf, &jcap, jn + s->n, 1);
                memcpy(jbuf + jn, s->jpeg, s->n);
                jn += s->n;
                label[n] = p->ss->s[k].label[si], hh[n] = (uint16_t)s->h, ww[n] = (uint16_t)s->w, src[n] = (int32_t)si;
                off[++n] = jn;
            }
            pthread_mutex_lock(&p->mu);
            s->done = 0;
            p->taken = t + 1;
            pthread_cond_broadcast(&p->cv_free);
            pthread_mutex_unlock(&p->mu);
            const double now = wall_time();
            if (rank == 0 && now - last_print >= every && t + 1 < p->n_tasks) {
                last_print = now;
                const double rate = (double)(t + 1) / (now - t0);
                char eta[32];
                human_time(eta, sizeof eta, (double)(p->n_tasks - t - 1) / rate);
                fprintf(stderr, "dsgd-run --pack: %s%lld/%lld images (%.1f%%), %.0f images/s, ETA %s\n", ranks > 1 ? "rank 0: " : "",
                        (long long)(t + 1), (long long)p->n_tasks, 100.0 * (double)(t + 1) / (double)p->n_tasks, rate, eta);
            }
        }
        if (!rc) {
            char name[64], final[PATH_MAX + 80], tmp[PATH_MAX + 90];
            shard_name(name, sizeof name, split_names[k], sh, pl->n_shards);
            snprintf(final, sizeof final, "%s/%s", o->out, name);
            snprintf(tmp, sizeof tmp, "%s.tmp", final);
            const shard_meta m = {.split = split_names[k], .shard = sh, .n_shards = pl->n_shards, .max_side = o->max_side,
                                  .quality = o->quality, .subsampling = PACK_SUBSAMPLING, .interp = PACK_INTERP, .seed = o->seed,
                                  .n_classes = p->ss->n_classes, .classes = (const char *const *)p->ss->classes};
            rc = shard_write(tmp, &m, n, jbuf, off, label, hh, ww, src, n_skipped, skipped, err, errlen);
            if (!rc) rc = publish(tmp, final, o->out, err, errlen);
            if (rc) unlink(tmp);
            else {
                st->n[k][sh] = (double)n, st->skipped[k][sh] = (double)n_skipped, st->nbytes[k][sh] = (double)jn;
                st->packed += (double)n, st->n_skipped += (double)n_skipped, st->bytes += (double)jn;
                if (ranks > 1) printf("dsgd-run --pack: rank %d wrote %s: %lld images, %.1f MB\n", rank, name, (long long)n, (double)jn / 1e6);
                else printf("dsgd-run --pack: wrote %s: %lld images, %.1f MB\n", name, (long long)n, (double)jn / 1e6);
                fflush(stdout);
            }
        }
        free(off), free(label), free(hh), free(ww), free(src), free(skipped), free(jbuf);
    }
    return rc;
}

/* Pack this rank's shards with nthreads workers. */
static int run_pipeline(const pack_options *o, const source_set *ss, const split_plan *plans, int nthreads, pack_stats *st, int rank,
                        int ranks, char *err, size_t errlen) {
    pipeline p = {.o = o, .ss = ss};
    for (int k = 0; k < N_SPLITS; k++) snprintf(p.dirs[k], sizeof p.dirs[k], "%s/%s", o->src, split_names[k]);
    int64_t n_tasks = 0;
    for (int k = 0; k < N_SPLITS; k++)
        if (ss->s[k].present)
            for (int sh = rank; sh < plans[k].n_shards; sh += ranks) n_tasks += plans[k].start[sh + 1] - plans[k].start[sh];
    task *tasks = xmalloc((size_t)(n_tasks ? n_tasks : 1) * sizeof *tasks);
    int64_t t = 0;
    for (int k = 0; k < N_SPLITS; k++)
        if (ss->s[k].present)
            for (int sh = rank; sh < plans[k].n_shards; sh += ranks)
                for (int64_t i = plans[k].start[sh]; i < plans[k].start[sh + 1]; i++) tasks[t++] = (task){k, sh, plans[k].perm[i]};
    p.tasks = tasks, p.n_tasks = n_tasks;
    p.ring_n = 16 * (int64_t)nthreads + 16;
    p.ring = xcalloc((size_t)p.ring_n, sizeof *p.ring);
    atomic_init(&p.next, 0);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_done, NULL);
    pthread_cond_init(&p.cv_free, NULL);
    pthread_t *th = xcalloc((size_t)nthreads, sizeof *th);
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker_main, &p) != 0) break;
    int rc = 0;
    if (started == 0) seterr(err, errlen, "cannot start a packing thread: %s", strerror(errno)), rc = EXIT_RUNTIME;
    else rc = write_shards(&p, plans, st, rank, ranks, err, errlen);
    pthread_mutex_lock(&p.mu);
    const int stalled = p.stop; /* set by the writer only when no image finished for PACK_STALL_S */
    p.stop = 1;
    pthread_cond_broadcast(&p.cv_free);
    pthread_mutex_unlock(&p.mu);
    if (stalled) return rc; /* a worker may never return: the process exits without joining it */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (int64_t i = 0; i < p.ring_n; i++) free(p.ring[i].jpeg);
    free(p.ring), free(th), free(tasks);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv_done);
    pthread_cond_destroy(&p.cv_free);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */

/* Collective: every rank returns the worst status; the failing ranks print their own message
 * (rank 0 without a prefix). */
static int agree(int st, const char *err) {
    const int worst = comm_max_int(st);
    if (st) {
        if (comm_rank() == 0) fprintf(stderr, "dsgd-run: %s\n", err);
        else fprintf(stderr, "dsgd-run: rank %d: %s\n", comm_rank(), err);
    }
    return worst;
}

int pack_main(int argc, char **argv) {
    const int rank = comm_rank(), ranks = comm_size(), r0 = rank == 0;
    char err[ERRLEN] = "";
    pack_options o;
    int st = parse_options(argc, argv, &o, err, sizeof err);
    if (!st && o.help) {
        if (r0) pack_usage(stdout);
        return 0;
    }
    /* Bad options are every rank's own verdict (same argv): only rank 0 prints it. */
    if (st) {
        if (r0) fprintf(stderr, "dsgd-run: %s\n", err);
        return st;
    }

    /* 1. Rank 0 lists SRC and prepares OUT; every rank gets the list. */
    source_set ss;
    memset(&ss, 0, sizeof ss);
    blob b = {0};
    if (r0) {
        st = pack_list_sources(&ss, &o, err, sizeof err);
        if (!st) st = prepare_out(&o, err, sizeof err);
        if (!st) pack_sources_to_blob(&ss, &b);
    }
    if ((st = agree(st, err))) {
        pack_sources_free(&ss), free(b.p);
        return st;
    }
    uint64_t blen = b.n;
    comm_bcast(&blen, sizeof blen, 0);
    if (!r0) b.p = xmalloc(blen);
    for (uint64_t at = 0; at < blen; at += COMM_CHUNK_BYTES)
        comm_bcast(b.p + at, blen - at < COMM_CHUNK_BYTES ? blen - at : COMM_CHUNK_BYTES, 0);
    if (!r0) pack_sources_from_blob(&ss, b.p);
    free(b.p);

    /* 2. Shards, threads. */
    split_plan plans[N_SPLITS] = {{0}};
    pack_stats stats = {0};
    int n_stats = 4;
    for (int k = 0; k < N_SPLITS; k++)
        if (ss.s[k].present) {
            plan_split(&plans[k], ss.s[k].n, &o, k);
            n_stats += 3 * plans[k].n_shards;
        }
    double *sv = xcalloc((size_t)n_stats, sizeof *sv), *at = sv + 4;
    for (int k = 0; k < N_SPLITS; k++) {
        stats.n[k] = at, at += plans[k].n_shards;
        stats.skipped[k] = at, at += plans[k].n_shards;
        stats.nbytes[k] = at, at += plans[k].n_shards;
    }
    int nthreads = o.threads;
    if (!nthreads) {
        cpu_set_t set;
        int ncpu = 1;
        if (sched_getaffinity(0, sizeof set, &set) == 0) ncpu = CPU_COUNT(&set);
        nthreads = ncpu / comm_local_size();
        if (nthreads < 1) nthreads = 1;
    }
    if (r0) {
        printf("dsgd-run --pack: %s -> %s: %d classes; train %lld images in %d shard(s)", o.src, o.out, ss.n_classes,
               (long long)ss.s[TRAIN].n, plans[TRAIN].n_shards);
        if (ss.s[VAL].present) printf(", val %lld images in %d shard(s)", (long long)ss.s[VAL].n, plans[VAL].n_shards);
        printf("; max side %d, quality %d, %d rank(s) x %d thread(s), seed %llu\n", o.max_side, o.quality, ranks, nthreads,
               (unsigned long long)o.seed);
        fflush(stdout);
    }

    /* 3. Pack this rank's shards. */
    const double t0 = wall_time();
    st = run_pipeline(&o, &ss, plans, nthreads, &stats, rank, ranks, err, sizeof err);
    if ((st = agree(st, err))) goto out;
    const double secs = 1e-3 * comm_max_int((int)(1e3 * (wall_time() - t0))); /* the slowest rank's */

    /* 4. Totals; rank 0 writes the index. */
    sv[0] = stats.packed, sv[1] = stats.n_skipped, sv[2] = stats.warned, sv[3] = stats.bytes;
    comm_allreduce_sum_f64(sv, n_stats);
    if (r0) {
        shards_index_split isp[N_SPLITS];
        int n_isp = 0;
        int64_t *iv = xcalloc((size_t)n_stats, sizeof *iv);
        uint64_t *uv = xcalloc((size_t)n_stats, sizeof *uv);
        for (int i = 0; i < n_stats; i++) iv[i] = (int64_t)sv[i], uv[i] = (uint64_t)sv[i];
        for (int k = 0; k < N_SPLITS; k++)
            if (ss.s[k].present)
                isp[n_isp++] = (shards_index_split){.split = split_names[k], .n_shards = plans[k].n_shards,
                                                    .n = iv + (stats.n[k] - sv), .skipped = iv + (stats.skipped[k] - sv),
                                                    .nbytes = uv + (stats.nbytes[k] - sv), .n_sources = ss.s[k].n,
                                                    .sources = (const char *const *)ss.s[k].rel};
        const shard_meta m = {.max_side = o.max_side, .quality = o.quality, .subsampling = PACK_SUBSAMPLING, .interp = PACK_INTERP,
                              .seed = o.seed, .n_classes = ss.n_classes, .classes = (const char *const *)ss.classes};
        char final[PATH_MAX + 16], tmp[PATH_MAX + 32];
        snprintf(final, sizeof final, "%s/%s", o.out, SHARDS_INDEX);
        snprintf(tmp, sizeof tmp, "%s.tmp", final);
        st = shards_write_index(tmp, &m, isp, n_isp, err, sizeof err);
        if (!st) st = publish(tmp, final, o.out, err, sizeof err);
        if (st) unlink(tmp);
        free(iv), free(uv);
        if (!st) {
            const double n = sv[0];
            printf("dsgd-run --pack: %.0f images packed, %.0f skipped, %.0f with decoder warnings; %.1f MB (%.1f KB per image); "
                   "%.1f s, %.0f images/s; %s\n", n, sv[1], sv[2], sv[3] / 1e6, n > 0 ? sv[3] / n / 1e3 : 0.0, secs,
                   (n + sv[1]) / (secs > 0 ? secs : 1), final);
            if (sv[1] > 0) printf("dsgd-run --pack: the %.0f skipped image(s) are named above and listed in each shard's /skipped_source_index\n", sv[1]);
        }
    }
    st = agree(st, err);
out:
    for (int k = 0; k < N_SPLITS; k++) free(plans[k].perm), free(plans[k].start);
    free(sv);
    pack_sources_free(&ss);
    return st;
}
