/* pack.c — `dsgd-run --pack SRC OUT` (pack.h; docs/data.md "Packing").
 *
 * Rank 0 lists SRC (sorted train class folders -> class index; val by folder or label file),
 * checks and prepares OUT and broadcasts the list; every rank then draws the same per-split
 * permutation from --seed, cuts it into K shards and packs the shards k ≡ rank (mod ranks).
 * Within a rank, pack_write.c's pipeline: worker threads read, decode, shrink and re-encode
 * images into a ring of slots, in task order; the rank's main thread is the one writer: it takes
 * the slots in order, names skipped images, prints progress and writes each shard
 * (src/data/shards.h) as <name>.tmp, closes and fsyncs it and links it to its name. Once
 * every rank is done, rank 0 writes OUT/index.h5 the same way: a pack without its index is not
 * complete, and a file with a final name is never half-written.
 *
 * Slots are consumed in task order, so a shard's content and the messages on stderr do not
 * depend on the number of threads; the assignment of shards to ranks does not change a shard,
 * so neither does the number of ranks. Waits are bounded: a worker waits for a free slot in 1 s
 * steps while the writer makes progress, and the writer gives up (exit 1) when no image has been
 * finished for PACK_STALL_S seconds. */
#define _GNU_SOURCE
#include "pack_sources.h"
#include "pack_write.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "data/loader.h"
#include "data/shards.h"
#include "util/util.h"


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

/* ------------------------------------------------------------------------------------------ */
/* Shards of a split: a seeded permutation cut into K contiguous parts (pack_write.h's split_plan). */

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

/* Step 1 of pack_main (collective): rank 0 lists SRC into *ss and prepares OUT; every rank gets
 * the list. Returns the worst status of all ranks (ss freed on failure). */
static int share_sources(source_set *ss, const pack_options *o, char *err, size_t errlen) {
    const int r0 = comm_rank() == 0;
    int st = 0;
    memset(ss, 0, sizeof *ss);
    blob b = {0};
    if (r0) {
        st = pack_list_sources(ss, o, err, errlen);
        if (!st) st = prepare_out(o, err, errlen);
        if (!st) pack_sources_to_blob(ss, &b);
    }
    if ((st = agree(st, err))) {
        pack_sources_free(ss), free(b.p);
        return st;
    }
    uint64_t blen = b.n;
    comm_bcast(&blen, sizeof blen, 0);
    if (!r0) b.p = xmalloc(blen);
    for (uint64_t at = 0; at < blen; at += COMM_CHUNK_BYTES)
        comm_bcast(b.p + at, blen - at < COMM_CHUNK_BYTES ? blen - at : COMM_CHUNK_BYTES, 0);
    if (!r0) pack_sources_from_blob(ss, b.p);
    free(b.p);
    return 0;
}

/* The default --threads: the rank's cores shared by the ranks of its node, at least 1. */
static int default_threads(void) {
    cpu_set_t set;
    int ncpu = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0) ncpu = CPU_COUNT(&set);
    int nthreads = ncpu / comm_local_size();
    return nthreads < 1 ? 1 : nthreads;
}

/* Step 4 of pack_main, on rank 0: OUT/index.h5 from the summed statistics sv (n_stats values:
 * the 4 totals, then stats' per-shard arrays) and the closing summary (secs: the slowest
 * rank's packing time). 0 or EXIT_RUNTIME with err. */
static int write_index(const pack_options *o, const source_set *ss, const split_plan *plans, const pack_stats *stats, const double *sv,
                       int n_stats, double secs, char *err, size_t errlen) {
    int st;
    shards_index_split isp[N_SPLITS];
    int n_isp = 0;
    int64_t *iv = xcalloc((size_t)n_stats, sizeof *iv);
    uint64_t *uv = xcalloc((size_t)n_stats, sizeof *uv);
    for (int i = 0; i < n_stats; i++) iv[i] = (int64_t)sv[i], uv[i] = (uint64_t)sv[i];
    for (int k = 0; k < N_SPLITS; k++)
        if (ss->s[k].present)
            isp[n_isp++] = (shards_index_split){.split = split_names[k], .n_shards = plans[k].n_shards,
                                                .n = iv + (stats->n[k] - sv), .skipped = iv + (stats->skipped[k] - sv),
                                                .nbytes = uv + (stats->nbytes[k] - sv), .n_sources = ss->s[k].n,
                                                .sources = (const char *const *)ss->s[k].rel};
    const shard_meta m = {.max_side = o->max_side, .quality = o->quality, .subsampling = PACK_SUBSAMPLING, .interp = PACK_INTERP,
                          .seed = o->seed, .n_classes = ss->n_classes, .classes = (const char *const *)ss->classes};
    char final[PATH_MAX + 16], tmp[PATH_MAX + 32];
    snprintf(final, sizeof final, "%s/%s", o->out, SHARDS_INDEX);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    st = shards_write_index(tmp, &m, isp, n_isp, err, errlen);
    if (!st) st = pack_publish(tmp, final, o->out, err, errlen);
    if (st) unlink(tmp);
    free(iv), free(uv);
    if (!st) {
        const double n = sv[0];
        printf("dsgd-run --pack: %.0f images packed, %.0f skipped, %.0f with decoder warnings; %.1f MB (%.1f KB per image); "
               "%.1f s, %.0f images/s; %s\n", n, sv[1], sv[2], sv[3] / 1e6, n > 0 ? sv[3] / n / 1e3 : 0.0, secs,
               (n + sv[1]) / (secs > 0 ? secs : 1), final);
        if (sv[1] > 0) printf("dsgd-run --pack: the %.0f skipped image(s) are named above and listed in each shard's /skipped_source_index\n", sv[1]);
    }
    return st;
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
    if ((st = share_sources(&ss, &o, err, sizeof err))) return st;

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
    const int nthreads = o.threads ? o.threads : default_threads();
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
    st = pack_run_pipeline(&o, &ss, plans, nthreads, &stats, rank, ranks, err, sizeof err);
    if ((st = agree(st, err))) goto out;
    const double secs = 1e-3 * comm_max_int((int)(1e3 * (wall_time() - t0))); /* the slowest rank's */

    /* 4. Totals; rank 0 writes the index. */
    sv[0] = stats.packed, sv[1] = stats.n_skipped, sv[2] = stats.warned, sv[3] = stats.bytes;
    comm_allreduce_sum_f64(sv, n_stats);
    if (r0) st = write_index(&o, &ss, plans, &stats, sv, n_stats, secs, err, sizeof err);
    st = agree(st, err);
out:
    for (int k = 0; k < N_SPLITS; k++) free(plans[k].perm), free(plans[k].start);
    free(sv);
    pack_sources_free(&ss);
    return st;
}
