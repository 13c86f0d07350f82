/* test_jpegload.c — the loading side of the ImageNet input path (issue 11): data.format = "jpeg"
 * through the threaded loader (src/data/jpegload.c behind loader.h) and data.format =
 * "synthetic", on a tiny pack the test makes itself (3 classes of uniformly coloured JPEGs of
 * 30–50 px, packed with ./dsgd-run --pack).
 *
 *   - unit: each rank's samples of an epoch are disjoint and cover p·b·S samples; a batch is the
 *     same bytes with 1 and 3 decode threads and equals aug_sample on each of its samples (a pure
 *     function of seed, epoch, index); a damaged sample is replaced by the next one of the pack;
 *     evaluation decode-ahead (the next batch decoded into a second buffer) gives the batches of
 *     one at a time bit for bit, and a cancelled or failed batch writes nothing afterwards;
 *   - end to end (p = 2 under mpiexec, ResNet-18 width 4, crop 24, scale [28, 36], eval_resize
 *     28): the same curve bit for bit with data.threads = 1 and 3; SIGTERM + --resume bit for
 *     bit; the model learns the colours; the run file's data attributes and /ranks/data_s;
 *     --check decodes every shard; a damaged sample is named once and counted; evaluation
 *     decode-ahead on and off (DSGD_EVAL_AHEAD=0) give the same run file bit for bit; a
 *     validation sample that cannot be loaded stops every rank with exit 1; bad inputs exit 2
 *     naming the key with nothing written; synthetic runs and says so.
 * Runs ./dsgd-run from the repository root; every mpiexec under a timeout (mpiutil.h). */
#define _GNU_SOURCE
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/augment.h"
#include "data/jpegload.h"
#include "data/loader.h"
#include "data/shards.h"
#include "jpegutil.h"
#include "mpiutil.h"
#include "testutil.h"
#include "util/util.h"

static char g_dir[256], g_pack[300], g_bad[300];

/* The end of a long output, for failure messages (Check truncates at 4 KB). */
static const char *tail(const char *s) {
    size_t n = strlen(s);
    return n > 3000 ? s + n - 3000 : s;
}

/* Class c's colour: red, green or blue, varied a little per image. */
static void write_tree(const char *root, const char *split, int per_class, const char *const *wnids) {
    char path[512];
    for (int c = 0; c < 3; c++) {
        snprintf(path, sizeof path, "%s/%s/%s", root, split, wnids[c]);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "mkdir -p %s", path);
        ck_assert_int_eq(system(cmd), 0);
        for (int i = 0; i < per_class; i++) {
            jpeg_spec s = {.w = 30 + (7 * i + 3 * c) % 21, .h = 30 + (11 * i + c) % 21, .comps = 3, .jpeg_cs = JCS_YCbCr,
                           .quality = 90, .pattern = SRC_UNIFORM};
            for (int k = 0; k < 3; k++) s.colour[k] = (uint8_t)(k == c ? 180 + i % 40 : 20 + (i * 13 + k * 7) % 50);
            snprintf(path, sizeof path, "%s/%s/%s/%03d.jpg", root, split, wnids[c], i);
            write_jpeg(path, &s);
        }
    }
}

static void pack(const char *src, const char *out) {
    char cmd[1024], buf[4096];
    snprintf(cmd, sizeof cmd, "./dsgd-run --pack %s %s --shard-images 25", src, out);
    int st = run(cmd, buf, sizeof buf);
    ck_assert_msg(st == 0, "%s: exit %d\n%s", cmd, st, buf);
}

/* Overwrite the first bytes of sample i's JPEG in its shard with junk (a copy of the pack). */
static void damage_sample(const char *dir, int64_t i) {
    shards *s;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&s, dir, "train", err, sizeof err) == 0, "%s", err);
    size_t n = shards_nbytes(s, i);
    uint8_t *b = xmalloc(n);
    ck_assert_int_eq(shards_read(s, i, b, err, sizeof err), 0);
    FILE *f = fopen(shards_file(s, i), "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    uint8_t *all = xmalloc((size_t)len);
    fseek(f, 0, SEEK_SET);
    ck_assert_uint_eq(fread(all, 1, (size_t)len, f), (size_t)len);
    uint8_t *at = memmem(all, (size_t)len, b, n);
    ck_assert_ptr_nonnull(at);
    fseek(f, (long)(at - all), SEEK_SET);
    fwrite("not a JPEG at all", 1, 16, f);
    fclose(f);
    free(all), free(b);
    shards_close(s);
}

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dsgd_test_jpegload_%d", (int)getpid());
    mkdir(g_dir, 0777);
    static const char *const wnids[3] = {"n001", "n002", "n003"};
    char src[300];
    snprintf(src, sizeof src, "%s/src", g_dir);
    write_tree(src, "train", 24, wnids);
    write_tree(src, "val", 8, wnids);
    snprintf(g_pack, sizeof g_pack, "%s/pack", g_dir);
    pack(src, g_pack);
    /* the same pack with training sample 0 damaged */
    snprintf(g_bad, sizeof g_bad, "%s/bad", g_dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp -r %s %s", g_pack, g_bad);
    ck_assert_int_eq(system(cmd), 0);
    damage_sample(g_bad, 0); /* the first of its shard: --check decodes it */
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

/* ---- unit: the loader ----------------------------------------------------------------------- */

static jpegload_cfg make_cfg(const shards *tr, const shards *va, int threads) {
    jpegload_cfg c = {.train = tr, .val = va, .seed = 7, .b = 4, .eval_max = 5, .threads = threads, .slots = 3, .timeout_s = 30};
    aug_default(&c.train_aug, AUG_SCALE);
    aug_default(&c.eval_aug, AUG_EVAL);
    for (aug_cfg *a = &c.train_aug; a; a = a == &c.train_aug ? &c.eval_aug : NULL)
        a->crop = 24, a->scale_min = 28, a->scale_max = 36, a->eval_resize = 28;
    return c;
}

START_TEST(rank_samples_disjoint_and_covering) {
    shards *tr, *va;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&tr, g_pack, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shards_open(&va, g_pack, "val", err, sizeof err) == 0, "%s", err);
    const int p = 3, n = (int)shards_count(tr);
    ck_assert_int_eq(n, 72);
    jpegload_cfg c = make_cfg(tr, va, 1);
    loader l[3];
    for (int r = 0; r < p; r++) ck_assert_int_eq(loader_init_jpeg(&l[r], &c, p, r, 0, err, sizeof err), 0);
    const long S = l[0].steps_per_epoch;
    ck_assert_int_eq(S, 72 / 12);
    for (int e = 0; e < 2; e++) {
        int seen[72] = {0}, idx[4];
        for (long s = 0; s < S; s++)
            for (int r = 0; r < p; r++) {
                loader_indices(&l[r], e * S + s, idx);
                for (int j = 0; j < 4; j++) seen[idx[j]]++;
            }
        int covered = 0;
        for (int i = 0; i < n; i++) {
            ck_assert_int_le(seen[i], 1);
            covered += seen[i];
        }
        ck_assert_int_eq(covered, (int)(p * 4 * S)); /* every sample at most once, m·S of them */
    }
    for (int r = 0; r < p; r++) loader_free(&l[r]);
    shards_close(tr), shards_close(va);
}
END_TEST

START_TEST(batch_independent_of_threads) {
    shards *tr, *va;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&tr, g_pack, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shards_open(&va, g_pack, "val", err, sizeof err) == 0, "%s", err);
    jpegload_cfg c1 = make_cfg(tr, va, 1), c3 = make_cfg(tr, va, 3);
    loader a, b;
    ck_assert_int_eq(loader_init_jpeg(&a, &c1, 2, 1, 1, err, sizeof err), 0);
    ck_assert_int_eq(loader_init_jpeg(&b, &c3, 2, 1, 1, err, sizeof err), 0);
    const size_t sample = 3 * 24 * 24;
    float *x = xmalloc(4 * sample * sizeof *x), *ref = xmalloc(sample * sizeof *ref);
    int y[4], idx[4];
    image_dec *d = image_dec_new();
    uint8_t *buf = xmalloc(shards_max_nbytes(tr));
    /* steps across an epoch boundary (S = 9), one step skipped, one repeated */
    const long steps[] = {0, 1, 2, 7, 8, 9, 10, 12, 12, 30};
    for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
        const float *xa, *xb;
        const int *ya, *yb;
        ck_assert_msg(loader_batch_view(&a, steps[k], NULL, NULL, &xa, &ya) == 0, "%s", loader_error(&a));
        ck_assert_msg(loader_batch_view(&b, steps[k], NULL, NULL, &xb, &yb) == 0, "%s", loader_error(&b));
        ck_assert_mem_eq(xa, xb, 4 * sample * sizeof(float));
        ck_assert_mem_eq(ya, yb, 4 * sizeof(int));
        /* each sample is aug_sample(seed, epoch, index) of its permutation entry */
        loader_indices(&a, steps[k], idx);
        for (int j = 0; j < 4; j++) {
            int w = 0;
            ck_assert_int_eq(shards_read(tr, idx[j], buf, err, sizeof err), 0);
            ck_assert_int_eq(aug_sample(d, &c1.train_aug, 7, (uint64_t)(steps[k] / 9), (uint64_t)idx[j], buf, shards_nbytes(tr, idx[j]),
                                        ref, NULL, &w, err, sizeof err), 0);
            ck_assert_mem_eq(xa + j * sample, ref, sample * sizeof(float));
            ck_assert_int_eq(ya[j], shards_label(tr, idx[j]));
        }
        /* the copying form gives the same */
        ck_assert_int_eq(loader_batch(&b, steps[k], x, y), 0);
        ck_assert_mem_eq(x, xa, 4 * sample * sizeof(float));
    }
    /* evaluation: AUG_EVAL, in pieces of eval_max, the same with 1 and 3 threads */
    float *ea = xmalloc(24 * sample * sizeof *ea), *eb = xmalloc(24 * sample * sizeof *eb);
    int la[24], lb[24];
    ck_assert_int_eq(loader_eval(&a, NULL, 0, 24, ea, la), 0);
    ck_assert_int_eq(loader_eval(&b, NULL, 0, 24, eb, lb), 0);
    ck_assert_mem_eq(ea, eb, 24 * sample * sizeof(float));
    for (int i = 0; i < 24; i++) ck_assert_int_eq(la[i], shards_label(va, i));
    jpegload_stats st;
    loader_stats(&a, &st);
    ck_assert_int_eq(st.failures, 0);
    loader_free(&a), loader_free(&b);
    image_dec_free(d);
    free(x), free(ref), free(buf), free(ea), free(eb);
    shards_close(tr), shards_close(va);
}
END_TEST

START_TEST(damaged_sample_replaced) {
    shards *tr, *good;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&tr, g_bad, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shards_open(&good, g_pack, "train", err, sizeof err) == 0, "%s", err);
    jpegload_cfg c = make_cfg(tr, NULL, 2);
    loader l;
    ck_assert_int_eq(loader_init_jpeg(&l, &c, 1, 0, 1, err, sizeof err), 0);
    /* find the step and position where sample 0 is drawn in epoch 0 */
    int idx[4];
    long step = -1;
    int pos = -1;
    for (long s = 0; s < l.steps_per_epoch && step < 0; s++) {
        loader_indices(&l, s, idx);
        for (int j = 0; j < 4; j++)
            if (idx[j] == 0) step = s, pos = j;
    }
    ck_assert_int_ge(step, 0);
    const float *x;
    const int *y;
    ck_assert_msg(loader_batch_view(&l, step, NULL, NULL, &x, &y) == 0, "%s", loader_error(&l));
    /* position pos holds sample 1 (the next of the pack) with its label and its own draws */
    const size_t sample = 3 * 24 * 24;
    float *ref = xmalloc(sample * sizeof *ref);
    image_dec *d = image_dec_new();
    uint8_t *buf = xmalloc(shards_max_nbytes(good));
    int w = 0;
    ck_assert_int_eq(shards_read(good, 1, buf, err, sizeof err), 0);
    ck_assert_int_eq(aug_sample(d, &c.train_aug, 7, 0, 1, buf, shards_nbytes(good, 1), ref, NULL, &w, err, sizeof err), 0);
    ck_assert_mem_eq(x + pos * sample, ref, sample * sizeof(float));
    ck_assert_int_eq(y[pos], shards_label(good, 1));
    jpegload_stats st;
    loader_stats(&l, &st);
    ck_assert_int_eq(st.failures, 1);
    ck_assert_int_eq(st.unique_failures, 1);
    loader_free(&l);
    image_dec_free(d);
    free(ref), free(buf);
    shards_close(tr), shards_close(good);
}
END_TEST

/* 1 when every byte of p[0..n) is b. */
static int all_bytes(const void *p, size_t n, unsigned char b) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != b) return 0;
    return 1;
}

/* Evaluation decode-ahead (jpegload_eval_start / _wait / _cancel, the path train.c's eval_range
 * takes): batch k + 1 decoded into a second buffer while batch k is read equals the batches
 * decoded one at a time bit for bit (1 and 3 threads, the last batch partial); a cancelled job
 * writes nothing after jpegload_eval_cancel returns; one job at a time; a sample that fails
 * (DSGD_TEST_VAL_FAIL) in a batch decoded ahead fails its wait, after which nothing writes. */
START_TEST(eval_ahead_bitwise_and_bounded) {
    shards *tr, *va;
    char err[ERRLEN];
    ck_assert_msg(shards_open(&tr, g_pack, "train", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shards_open(&va, g_pack, "val", err, sizeof err) == 0, "%s", err);
    const size_t sample = 3 * 24 * 24, bytes = 5 * sample * sizeof(float);
    const int n = 24, eb = 5; /* batches of 5, 5, 5, 5, 4 */
    float *ref = xmalloc((size_t)n * sample * sizeof *ref), *buf[2] = {xmalloc(bytes), xmalloc(bytes)};
    int lref[24], lab[2][5];
    for (int threads = 1; threads <= 3; threads += 2) {
        jpegload_cfg c = make_cfg(tr, va, threads);
        jpegload *j;
        ck_assert_msg(jpegload_create(&j, &c, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < n; i += eb) /* one batch at a time */
            ck_assert_msg(jpegload_eval(j, i, n - i < eb ? n - i : eb, ref + (size_t)i * sample, lref + i, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < n; i++) ck_assert_int_eq(lref[i], shards_label(va, i));
        int cur = 0;
        ck_assert_int_eq(jpegload_eval_start(j, 0, eb, buf[0], lab[0], err, sizeof err), 0);
        ck_assert_msg(jpegload_eval_wait(j, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < n; i += eb, cur ^= 1) {
            const int cnt = n - i < eb ? n - i : eb, next = i + eb;
            if (next < n) ck_assert_int_eq(jpegload_eval_start(j, next, n - next < eb ? n - next : eb, buf[cur ^ 1], lab[cur ^ 1], err, sizeof err), 0);
            ck_assert_mem_eq(buf[cur], ref + (size_t)i * sample, (size_t)cnt * sample * sizeof(float));
            ck_assert_mem_eq(lab[cur], lref + i, (size_t)cnt * sizeof(int));
            if (next < n) ck_assert_msg(jpegload_eval_wait(j, err, sizeof err) == 0, "%s", err);
        }
        /* one job at a time; a wait needs a job */
        ck_assert_int_eq(jpegload_eval_start(j, 0, eb, buf[0], lab[0], err, sizeof err), 0);
        ck_assert_int_eq(jpegload_eval_start(j, 5, eb, buf[1], lab[1], err, sizeof err), EXIT_RUNTIME);
        ck_assert_msg(strstr(err, "under way"), "%s", err);
        ck_assert_msg(jpegload_eval_wait(j, err, sizeof err) == 0, "%s", err);
        ck_assert_mem_eq(buf[0], ref, bytes);
        ck_assert_int_eq(jpegload_eval_wait(j, err, sizeof err), EXIT_RUNTIME);
        /* cancelled after 0 to 0.8 ms (samples in flight on the threads): nothing written afterwards */
        for (int rep = 0; rep < 20; rep++) {
            ck_assert_int_eq(jpegload_eval_start(j, 5 * (rep % 4), eb, buf[0], lab[0], err, sizeof err), 0);
            usleep((useconds_t)(rep * 40)); /* 0 to 0.8 ms: cut before, while and after samples decode */
            jpegload_eval_cancel(j);
            memset(buf[0], 0xA5, bytes);
            usleep(5000);
            ck_assert_msg(all_bytes(buf[0], bytes, 0xA5), "a cancelled job wrote after jpegload_eval_cancel (rep %d)", rep);
        }
        jpegload_eval_cancel(j); /* none under way: nothing happens */
        jpegload_stats st;
        jpegload_get_stats(j, &st);
        ck_assert_int_eq(st.failures, 0);
        jpegload_free(j);
    }
    /* sample 12 fails (as a read error) in the batch [10, 15) decoded ahead */
    setenv("DSGD_TEST_VAL_FAIL", "12", 1);
    jpegload_cfg c = make_cfg(tr, va, 2);
    jpegload *j;
    ck_assert_msg(jpegload_create(&j, &c, err, sizeof err) == 0, "%s", err);
    unsetenv("DSGD_TEST_VAL_FAIL");
    ck_assert_int_eq(jpegload_eval_start(j, 5, eb, buf[0], lab[0], err, sizeof err), 0);
    ck_assert_msg(jpegload_eval_wait(j, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(jpegload_eval_start(j, 10, eb, buf[1], lab[1], err, sizeof err), 0);
    ck_assert_mem_eq(buf[0], ref + 5 * sample, bytes);
    ck_assert_int_eq(jpegload_eval_wait(j, err, sizeof err), EXIT_RUNTIME);
    ck_assert_msg(strstr(err, "validation sample 12") && strstr(err, "DSGD_TEST_VAL_FAIL"), "%s", err);
    memset(buf[1], 0xA5, bytes);
    usleep(20000);
    ck_assert_msg(all_bytes(buf[1], bytes, 0xA5), "the failed job wrote after its wait returned");
    jpegload_free(j); /* bounded: the threads stop */
    free(ref), free(buf[0]), free(buf[1]);
    shards_close(tr), shards_close(va);
}
END_TEST

/* loader_eval_start / _wait give loader_eval's batch for the sources that fill it at once
 * (synthetic here; IDX the same way). */
START_TEST(eval_halves_synthetic) {
    loader l;
    char err[ERRLEN];
    ck_assert_int_eq(loader_init_synthetic(&l, 3, 8, 8, 5, 2, 1, 4, 11, err, sizeof err), 0);
    float a[6 * 192], b[6 * 192];
    int ya[6], yb[6];
    memset(b, 0, sizeof b);
    ck_assert_int_eq(loader_eval(&l, NULL, 3, 6, a, ya), 0);
    ck_assert_int_eq(loader_eval_start(&l, NULL, 3, 6, b, yb), 0);
    ck_assert_int_eq(loader_eval_wait(&l), 0);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_mem_eq(ya, yb, sizeof ya);
    loader_eval_cancel(&l); /* nothing under way */
    loader_free(&l);
}
END_TEST

/* ---- end to end ------------------------------------------------------------------------------ */

static void write_cfg(const char *tag, const char *extra, char *cfg, char *h5) {
    snprintf(cfg, 512, "%s/%s.cfg", g_dir, tag);
    snprintf(h5, 512, "%s/%s.h5", g_dir, tag);
    char text[4096];
    snprintf(text, sizeof text,
             "name = \"%s\";\np = 2;\nb = 8;\niterations = 24;\nalpha = { base = 0.1; };\n"
             "model = { width = 8; stem = \"cifar\"; };\n"
             "data = { format = \"jpeg\"; dir = \"%s\"; crop = 24; scale = [28, 36]; eval_resize = 28; };\n"
             "eval = { every = 12; batch = 5; };\nlog_every = 4;\noutput = \"%s\";\nthreads = 1;\n%s",
             tag, g_pack, h5, extra ? extra : "");
    write_file(cfg, text);
}

static void assert_same(const char *a, const char *b, const char *name) {
    static double x[4096], y[4096];
    long n = read_1d(a, name, x, 4096), m = read_1d(b, name, y, 4096);
    ck_assert_msg(n == m && n > 0, "%s: %ld vs %ld rows", name, n, m);
    ck_assert_msg(memcmp(x, y, (size_t)n * sizeof *x) == 0, "%s differs between %s and %s", name, a, b);
}

static int dsgd_env(const char *env, int np, const char *cfg, const char *extra, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s timeout -k 5 " MPI_TIMEOUT " mpiexec -n %d ./dsgd-run %s %s", env, np, extra ? extra : "", cfg);
    return run(cmd, out, n);
}

START_TEST(threads_and_resume_bitwise) {
    char c1[512], h1[512], c3[512], h3[512], cc[512], hc[512], out[1 << 15];
    write_cfg("t1", NULL, c1, h1);
    int st = dsgd(2, c1, "--set data.threads=1", out, sizeof out);
    ck_assert_msg(st == 0, "exit %d\n%s", st, tail(out));
    ck_assert_msg(strstr(out, "data: jpeg from") && strstr(out, "threads per rank: 1 compute"), "%s", tail(out));
    write_cfg("t3", NULL, c3, h3);
    st = dsgd(2, c3, "--set data.threads=3", out, sizeof out);
    ck_assert_msg(st == 0, "exit %d\n%s", st, tail(out));
    assert_same(h1, h3, "/train/loss");
    assert_same(h1, h3, "/eval/loss");
    assert_same(h1, h3, "/eval/top1_error");
    /* evaluation decode-ahead off (DSGD_EVAL_AHEAD=0: one batch of 5 at a time; each rank's 12
     * samples are 3 batches, the last partial): the same evaluations bit for bit */
    char c0[512], h0[512];
    write_cfg("t1_noahead", NULL, c0, h0);
    st = dsgd_env("DSGD_EVAL_AHEAD=0", 2, c0, "--set data.threads=1", out, sizeof out);
    ck_assert_msg(st == 0, "exit %d\n%s", st, tail(out));
    assert_same(h1, h0, "/eval/loss");
    assert_same(h1, h0, "/eval/top1_error");
    assert_same(h1, h0, "/eval/top5_error");
    assert_same(h1, h0, "/train/loss");
    /* it learns the three colours: chance is 2/3 error (width 8: at width 4 it passed on oneDNN
     * 2.6.3 and ended at 0.42 on 3.2 — too few channels to be robust to summation order) */
    double top1[8];
    long ne = read_1d(h1, "/eval/top1_error", top1, 8);
    ck_assert_int_eq(ne, 3);
    printf("three colours, width 8, 24 steps: top-1 error %g at start, %g, %g\n", top1[0], top1[1], top1[2]);
    ck_assert_msg(top1[0] > 0.3 && top1[2] < 0.2, "top-1 error %g at start, %g at the end", top1[0], top1[2]);
    /* provenance and per-rank data time */
    char s[256];
    read_attr_string(h1, "data_format", s, sizeof s);
    ck_assert_str_eq(s, "jpeg");
    ck_assert_int_eq(read_attr_long(h1, "data_classes"), 3);
    ck_assert_int_eq(read_attr_long(h1, "data_pack_format_version"), SHARDS_FORMAT_VERSION);
    ck_assert_int_eq(read_attr_long(h1, "data_train_n"), 72);
    static double v[64];
    long cols;
    long rows = read_2d(h1, "/ranks/data_s", v, 64, &cols);
    ck_assert_int_eq(cols, 2);
    ck_assert_int_eq(rows, 6);
    for (long i = 0; i < rows * cols; i++) ck_assert_msg(isfinite(v[i]) && v[i] >= 0 && v[i] < 5, "data_s %g", v[i]);
    ck_assert_int_eq(read_1d(h1, "/data/decode_failures", v, 64), 2);
    ck_assert(v[0] == 0 && v[1] == 0);

    /* SIGTERM at step 6 (checkpoint after 5), --resume: the same curve */
    write_cfg("cut", NULL, cc, hc);
    st = dsgd_env("DSGD_TEST_SIGNAL=TERM@6", 2, cc, "--set data.threads=2", out, sizeof out);
    ck_assert_msg(st == 3, "exit %d, expected 3\n%s", st, tail(out));
    st = dsgd(2, cc, "--resume --set data.threads=2", out, sizeof out);
    ck_assert_msg(st == 0, "resume: exit %d\n%s", st, tail(out));
    assert_same(h1, hc, "/train/loss");
    assert_same(h1, hc, "/eval/loss");

    /* A resume refuses a pack made again (another seed: the same images in another order) at
     * the same data.dir, and goes on once it is the checkpoint's pack again (packing is
     * reproducible, so seed 1 gives the same bytes). */
    char copy[600], cmd[2000], cr[512], hr[512], set[700], sum1[128], sum2[128];
    snprintf(copy, sizeof copy, "%s/pack-again", g_dir);
    snprintf(cmd, sizeof cmd, "cp -r %s %s", g_pack, copy);
    ck_assert_int_eq(run(cmd, NULL, 0), 0);
    snprintf(set, sizeof set, "--set data.threads=2 --set 'data.dir=\"%s\"'", copy);
    write_cfg("repack", NULL, cr, hr);
    st = dsgd_env("DSGD_TEST_SIGNAL=TERM@6", 2, cr, set, out, sizeof out);
    ck_assert_msg(st == 3, "exit %d, expected 3\n%s", st, tail(out));
    snprintf(cmd, sizeof cmd, "./dsgd-run --pack %s/src %s --shard-images 25 --overwrite --seed 2 >/dev/null && md5sum < %s", g_dir, copy, hr);
    ck_assert_int_eq(run(cmd, sum1, sizeof sum1), 0);
    char rset[800];
    snprintf(rset, sizeof rset, "--resume %s", set);
    st = dsgd(2, cr, rset, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'data.dir'") && strstr(out, "not the pack checkpoint"), "exit %d\n%s", st, tail(out));
    snprintf(cmd, sizeof cmd, "md5sum < %s", hr);
    ck_assert_int_eq(run(cmd, sum2, sizeof sum2), 0);
    ck_assert_str_eq(sum1, sum2); /* the refusal touched nothing */
    snprintf(cmd, sizeof cmd, "./dsgd-run --pack %s/src %s --shard-images 25 --overwrite --seed 1 >/dev/null", g_dir, copy);
    ck_assert_int_eq(run(cmd, NULL, 0), 0);
    st = dsgd(2, cr, rset, out, sizeof out);
    ck_assert_msg(st == 0, "resume on the checkpoint's pack: exit %d\n%s", st, tail(out));
    assert_same(h1, hr, "/train/loss");
}
END_TEST

static long count_str(const char *hay, const char *needle) {
    long n = 0;
    for (const char *q = strstr(hay, needle); q; q = strstr(q + 1, needle)) n++;
    return n;
}

START_TEST(check_and_damaged_pack) {
    char cfg[512], h5[512], out[1 << 15], cmd[1024], set[400];
    write_cfg("chk", NULL, cfg, h5);
    snprintf(cmd, sizeof cmd, "timeout 60 ./dsgd-run --check %s", cfg);
    int st = run(cmd, out, sizeof out);
    ck_assert_msg(st == 0 && strstr(out, "--check decoded") && strstr(out, "of each shard, first and last included): OK"), "exit %d\n%s", st, tail(out));
    /* --check finds the damaged sample, naming the key and the shard */
    snprintf(cmd, sizeof cmd, "timeout 60 ./dsgd-run --check --set 'data.dir=\"%s\"' %s", g_bad, cfg);
    st = run(cmd, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "data.dir") && strstr(out, "train-0000"), "exit %d\n%s", st, tail(out));
    /* training on it: the sample is named once per rank that draws it, replaced, counted */
    snprintf(set, sizeof set, "--set 'data.dir=\"%s\"'", g_bad);
    st = dsgd(2, cfg, set, out, sizeof out);
    ck_assert_msg(st == 0, "exit %d\n%s", st, tail(out));
    const long named = count_str(out, "cannot be decoded");
    ck_assert_msg(named >= 1 && named <= 2, "named %ld times:\n%s", named, tail(out));
    double v[2];
    ck_assert_int_eq(read_1d(h5, "/data/decode_failures", v, 2), 2);
    ck_assert_msg(v[0] + v[1] >= 3, "failures %g + %g: sample 0 is drawn in each of the 5.3 epochs", v[0], v[1]);
    /* cut by SIGTERM at step 10 and resumed: the counters go on from the checkpoint (the same
     * per-rank counts as the run above) and no rank names the sample a second time */
    char c2[512], h2[512], out2[1 << 15];
    write_cfg("chk_cut", NULL, c2, h2);
    st = dsgd_env("DSGD_TEST_SIGNAL=TERM@10", 2, c2, set, out2, sizeof out2);
    ck_assert_msg(st == 3, "exit %d, expected 3\n%s", st, tail(out2));
    long named2 = count_str(out2, "cannot be decoded");
    char set2[500];
    snprintf(set2, sizeof set2, "--resume %s", set);
    st = dsgd(2, c2, set2, out2, sizeof out2);
    ck_assert_msg(st == 0, "resume: exit %d\n%s", st, tail(out2));
    named2 += count_str(out2, "cannot be decoded");
    ck_assert_msg(named2 == named, "named %ld times over the cut run and its resume, %ld times without the cut", named2, named);
    double v2[2];
    ck_assert_int_eq(read_1d(h2, "/data/decode_failures", v2, 2), 2);
    ck_assert_msg(v2[0] == v[0] && v2[1] == v[1], "failures per rank %g, %g after the resume; %g, %g without the cut", v2[0],
                  v2[1], v[0], v[1]);
}
END_TEST

/* A validation sample rank 1 cannot load (DSGD_TEST_VAL_FAIL=22: the last, partial batch of its
 * slice [12, 24), decoded ahead while [17, 22) is evaluated; without decode-ahead, loaded after
 * it) stops every rank at the evaluation at step 0: exit 1, the rank names the failure, the run
 * file says "stopped: data loading failed" and has no /eval row. */
START_TEST(eval_load_failure_stops) {
    const char *const envs[2] = {"DSGD_TEST_VAL_FAIL=22", "DSGD_TEST_VAL_FAIL=22 DSGD_EVAL_AHEAD=0"};
    for (int k = 0; k < 2; k++) {
        char cfg[512], h5[512], out[1 << 15], s[256];
        write_cfg(k ? "valfail0" : "valfail", NULL, cfg, h5);
        int st = dsgd_env(envs[k], 2, cfg, "--set data.threads=2", out, sizeof out);
        ck_assert_msg(st == 1, "%s: exit %d, expected 1\n%s", envs[k], st, tail(out));
        ck_assert_msg(strstr(out, "rank 1: data loading failed: rank 1: reading validation sample 22: DSGD_TEST_VAL_FAIL"),
                      "%s: no message\n%s", envs[k], tail(out));
        read_attr_string(h5, "status", s, sizeof s);
        ck_assert_msg(!strncmp(s, "stopped: data loading failed", 28), "%s: status '%s'", envs[k], s);
        double v[4];
        ck_assert_int_eq(read_1d(h5, "/eval/loss", v, 4), 0);
    }
}
END_TEST

START_TEST(bad_inputs_exit_2) {
    char cfg[512], h5[512], out[1 << 15], empty[300], other[300], mixed[300], cmd[1400];
    write_cfg("bad", NULL, cfg, h5);
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    mkdir(empty, 0777);
    /* a pack whose val shards have another class list than its index */
    static const char *const wnids[3] = {"n001", "n002", "n009"};
    char src2[300];
    snprintf(src2, sizeof src2, "%s/src2", g_dir);
    write_tree(src2, "train", 4, wnids);
    write_tree(src2, "val", 8, wnids);
    snprintf(other, sizeof other, "%s/other", g_dir);
    pack(src2, other);
    snprintf(mixed, sizeof mixed, "%s/mixed", g_dir);
    snprintf(cmd, sizeof cmd, "cp -r %s %s && cp %s/val-*.h5 %s/", g_pack, mixed, other, mixed);
    ck_assert_int_eq(system(cmd), 0);
    char s_missing[400], s_empty[400], s_mixed[400];
    snprintf(s_missing, sizeof s_missing, "--set 'data.dir=\"%s/none\"'", g_dir);
    snprintf(s_empty, sizeof s_empty, "--set 'data.dir=\"%s\"'", empty);
    snprintf(s_mixed, sizeof s_mixed, "--set 'data.dir=\"%s\"'", mixed);
    const struct { const char *set, *key, *also; } cases[] = {
        {s_missing, "data.dir", "none"},
        {s_empty, "data.dir", "empty"},
        {s_mixed, "data.dir", "val-0000"},
        {"--set 'data.dir=\"\"'", "data.dir", "--pack"},
        {"--set data.crop=30", "data.crop", "data.scale"},
        {"--set 'data.scale=[36, 28]'", "data.scale", "reversed"},
        {"--set data.eval_resize=20", "data.eval_resize", "data.crop"},
        {"--set data.classes=5", "data.classes", "has 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = dsgd(2, cfg, cases[i].set, out, sizeof out);
        char key[80];
        snprintf(key, sizeof key, "'%s'", cases[i].key);
        ck_assert_msg(st == 2, "%s: exit %d, expected 2\n%s", cases[i].set, st, tail(out));
        ck_assert_msg(strstr(out, key) && strstr(out, cases[i].also), "%s: the message lacks %s or '%s':\n%s", cases[i].set, key,
                      cases[i].also, tail(out));
        ck_assert_msg(count_str(out, "dsgd-run: ") == 1, "%s: one message (rank 0's), got:\n%s", cases[i].set, tail(out));
        ck_assert_msg(access(h5, F_OK) != 0, "%s: %s was written", cases[i].set, h5);
    }
}
END_TEST

START_TEST(synthetic_runs) {
    char cfg[512], h5[512], out[1 << 15];
    snprintf(cfg, sizeof cfg, "%s/syn.cfg", g_dir);
    snprintf(h5, sizeof h5, "%s/syn.h5", g_dir);
    char text[1024];
    snprintf(text, sizeof text,
             "name = \"syn\";\np = 2;\nb = 4;\niterations = 6;\nmodel = { width = 4; stem = \"cifar\"; };\n"
             "data = { format = \"synthetic\"; shape = [3, 16, 12]; classes = 7; };\neval = { every = 3; };\n"
             "log_every = 3;\noutput = \"%s\";\nthreads = 1;\n", h5);
    write_file(cfg, text);
    int st = dsgd(2, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 0 && strstr(out, "data: synthetic"), "exit %d\n%s", st, tail(out));
    char s[512];
    read_attr_string(h5, "data_synthetic", s, sizeof s);
    ck_assert_msg(!strncmp(s, "yes", 3), "data_synthetic = '%s'", s);
    ck_assert_int_eq(read_attr_long(h5, "data_classes"), 7);
    ck_assert_int_eq(read_attr_long(h5, "data_val_n"), 8);
    double loss[4], top1[4];
    ck_assert_int_eq(read_1d(h5, "/eval/loss", loss, 4), 3);
    read_1d(h5, "/eval/top1_error", top1, 4);
    /* 7 random classes: about log 7 = 1.95 nats at the start, error near 6/7 */
    ck_assert_msg(loss[0] > 1.0 && loss[0] < 4.0 && top1[0] >= 0.5, "loss %g, top-1 error %g", loss[0], top1[0]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("jpegload");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, rank_samples_disjoint_and_covering);
    tcase_add_test(tc, batch_independent_of_threads);
    tcase_add_test(tc, damaged_sample_replaced);
    tcase_add_test(tc, eval_ahead_bitwise_and_bounded);
    tcase_add_test(tc, eval_halves_synthetic);
    tcase_add_test(tc, threads_and_resume_bitwise);
    tcase_add_test(tc, check_and_damaged_pack);
    tcase_add_test(tc, eval_load_failure_stops);
    tcase_add_test(tc, bad_inputs_exit_2);
    tcase_add_test(tc, synthetic_runs);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
