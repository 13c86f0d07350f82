/* pack_write.c — one rank's part of `dsgd-run --pack` (pack_write.h; pack.c lists SRC, plans the
 * shards and writes the index): worker threads read, decode (src/data/image.h; PNG through
 * libpng), shrink and re-encode (pack_image.h) images into a ring of slots, in task order; the
 * calling thread is the one writer: it takes the slots in order, names skipped images, prints
 * progress and writes each shard (src/data/shards.h) as <name>.tmp, closes and fsyncs it and
 * links it to its name (pack_publish).
 *
 * Slots are consumed in task order, so a shard's content and the messages on stderr do not
 * depend on the number of threads. Waits are bounded: a worker waits for a free slot in 1 s
 * steps while the writer makes progress, and the writer gives up (exit 1) when no image has been
 * finished for PACK_STALL_S seconds. */
#define _GNU_SOURCE
#include "pack_write.h"
#include "pack_image.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shards.h"
#include "util/util.h"

#define PACK_MAX_FILE ((size_t)256 << 20) /* larger image files are skipped (bytes) */
#define PACK_STALL_S 600.0              /* writer: no image finished for this long -> exit 1 */

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
int pack_publish(const char *tmp, const char *final, const char *dir, char *err, size_t errlen) {
    if (fsync_path(tmp) != 0) return seterr(err, errlen, "%s: fsync: %s", tmp, strerror(errno)), EXIT_RUNTIME;
    if (link(tmp, final) != 0) {
        if (errno == EEXIST) return seterr(err, errlen, "%s appeared while packing (another pack into the same OUT?): not replaced", final), EXIT_RUNTIME;
        if (rename(tmp, final) != 0) return seterr(err, errlen, "%s: cannot rename to %s: %s", tmp, final, strerror(errno)), EXIT_RUNTIME;
    } else unlink(tmp);
    if (fsync_path(dir) != 0) return seterr(err, errlen, "%s: fsync: %s", dir, strerror(errno)), EXIT_RUNTIME;
    return 0;
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

static void human_time(char *buf, size_t n, double s) {
    if (s < 0 || s > 1e7) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%ds", (int)s);
}

/* The writer waits for task t's slot s to be filled; gives up (stops the workers, EXIT_RUNTIME
 * with err) when no image has been finished for PACK_STALL_S seconds since last_done. */
static int wait_slot(pipeline *p, slot *s, int64_t t, double last_done, char *err, size_t errlen) {
    const int k = p->tasks[t].split;
    int rc = 0;
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
    return rc;
}

/* Rank 0's progress line after task t, at most one per `every` seconds (*last_print), none
 * after the last task. */
static void print_progress(const pipeline *p, int64_t t, double t0, double every, double *last_print, int ranks) {
    const double now = wall_time();
    if (now - *last_print >= every && t + 1 < p->n_tasks) {
        *last_print = now;
        const double rate = (double)(t + 1) / (now - t0);
        char eta[32];
        human_time(eta, sizeof eta, (double)(p->n_tasks - t - 1) / rate);
        fprintf(stderr, "dsgd-run --pack: %s%lld/%lld images (%.1f%%), %.0f images/s, ETA %s\n", ranks > 1 ? "rank 0: " : "",
                (long long)(t + 1), (long long)p->n_tasks, 100.0 * (double)(t + 1) / (double)p->n_tasks, rate, eta);
    }
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
            if ((rc = wait_slot(p, s, t, last_done, err, errlen))) break;
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
            if (rank == 0) print_progress(p, t, t0, every, &last_print, ranks);
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
            if (!rc) rc = pack_publish(tmp, final, o->out, err, errlen);
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

/* Pack this rank's shards with nthreads workers (pack_write.h). */
int pack_run_pipeline(const pack_options *o, const source_set *ss, const split_plan *plans, int nthreads, pack_stats *st, int rank,
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
