/* test_checkpoint.c — checkpoint and resume end to end under mpiexec (docs/checkpoint.md), on
 * the linear model and Fashion-MNIST:
 *   - synchronous methods resume bitwise: 2N steps straight and N steps + SIGTERM (checkpoint,
 *     exit 3) + --resume + N steps give identical /train/loss, /eval and /ranks steps (allreduce
 *     p = 2, lock-step gossip_pull p = 3); SIGUSR1 checkpoints and the run goes on unchanged;
 *   - a run killed (SIGKILL) after a periodic checkpoint resumes with resume = "auto": the rows
 *     it logged after the checkpoint are dropped, none duplicated or missing;
 *   - asynchronous gossip (push) resumes and completes, the time axis continued;
 *   - a finished run says so and exits 0; the errors (--resume without a checkpoint, a changed
 *     experiment, a fresh run over a checkpoint, checkpoints for a method without them) exit 2
 *     and name the key.
 * Every mpiexec runs under `timeout` (mpiutil.h). The signals come from the DSGD_TEST_SIGNAL
 * hook (checkpoint.h), which raises a real signal in a rank at a chosen step. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mpiutil.h"
#include "nn/layers.h"
#include "train/checkpoint.h"
#include "testutil.h"

static char g_dir[256];

/* The linear model on make's Fashion-MNIST subset (TEST_DATA, mpiutil.h), α = 0.02 cosine, 240
 * steps at m = 64, evaluations every 60 steps. */
static const char *BASE = "name = \"lin\";\nseed = 5;\nmodel = { arch = \"linear\"; };\nb = 32;\niterations = 240;\n" TEST_DATA
                          "log_every = 10;\nalpha = { base = 0.02; schedule = \"cosine\"; };\n"
                          "eval = { every = 60; batch = 500; at_start = true; };\n";

/* Write BASE + extra to <tag>.cfg with output <tag>.h5; paths into cfg and h5. */
static void write_cfg(const char *tag, const char *extra, char *cfg, char *h5) {
    char text[4096];
    snprintf(cfg, 512, "%s/%s.cfg", g_dir, tag);
    snprintf(h5, 512, "%s/%s.h5", g_dir, tag);
    snprintf(text, sizeof text, "%s%s\noutput = \"%s\";\n", BASE, extra ? extra : "", h5);
    write_file(cfg, text);
}

/* mpiexec -n np ./dsgd-run [args] cfg with environment env (may be ""). */
static int run_env(const char *env, int np, const char *cfg, const char *args, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s timeout -k 5 " MPI_TIMEOUT " mpiexec -n %d ./dsgd-run %s %s", env, np, args ? args : "", cfg);
    return run(cmd, out, n);
}

static void file_sum(const char *path, char *out, size_t n);

#define MAXR 4096
static double ga[MAXR], gb[MAXR];

/* Dataset name of files a and b: same length, bitwise equal values. */
static void assert_same(const char *a, const char *b, const char *name) {
    long na = read_1d(a, name, ga, MAXR), nb = read_1d(b, name, gb, MAXR);
    ck_assert_msg(na == nb, "%s: %ld rows straight, %ld resumed", name, na, nb);
    ck_assert_msg(na > 0, "%s is empty", name);
    for (long i = 0; i < na; i++)
        ck_assert_msg(memcmp(&ga[i], &gb[i], sizeof(double)) == 0, "%s row %ld: %.17g straight, %.17g resumed", name, i, ga[i], gb[i]);
}

/* /train/step is 10, 20, ..., total and time_s never goes back. */
static void assert_axis(const char *h5, long total) {
    long n = read_1d(h5, "/train/step", ga, MAXR);
    ck_assert_int_eq(n, total / 10);
    for (long i = 0; i < n; i++) ck_assert_msg(ga[i] == 10.0 * (double)(i + 1), "/train/step row %ld = %g", i, ga[i]);
    n = read_1d(h5, "/train/time_s", ga, MAXR);
    for (long i = 1; i < n; i++) ck_assert_msg(ga[i] >= ga[i - 1], "/train/time_s goes back at row %ld: %g after %g", i, ga[i], ga[i - 1]);
}

static void assert_latest(const char *ckdir, const char *want) {
    char p[600], line[64] = "";
    snprintf(p, sizeof p, "%s/latest", ckdir);
    FILE *f = fopen(p, "r");
    ck_assert_msg(f != NULL, "no %s", p);
    ck_assert(fgets(line, sizeof line, f) != NULL);
    fclose(f);
    ck_assert_msg(strncmp(line, want, strlen(want)) == 0, "%s says '%s', expected '%s'", p, line, want);
}

/* Straight vs interrupted (signal_at: DSGD_TEST_SIGNAL; checkpoint expected after `label`
 * steps) and resumed, for one method on np ranks. */
/* evals: compare /eval too (the lock-step methods; the methods with servers evaluate snapshots
 * of the center taken while training goes on, at moments that differ between any two runs). */
static void check_bitwise(const char *tag, const char *extra, int np, const char *signal_at, long label, int evals) {
    char cfg[512], h5[512], cfg2[512], h52[512], ck[600], out[1 << 15], status[256], tag2[64];
    write_cfg(tag, extra, cfg, h5);
    int st = run_env("", np, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 0, "%s straight: exit %d\n%s", tag, st, out);

    snprintf(tag2, sizeof tag2, "%s_cut", tag);
    write_cfg(tag2, extra, cfg2, h52);
    char env[64];
    snprintf(env, sizeof env, "DSGD_TEST_SIGNAL=%s", signal_at);
    st = run_env(env, np, cfg2, NULL, out, sizeof out);
    char want[160], want2[160];
    ck_assert_msg(st == 3, "%s with %s: exit %d, expected 3\n%s", tag, env, st, out);
    snprintf(want, sizeof want, "checkpoint: step %ld written", label);
    ck_assert_msg(strstr(out, want), "%s: no '%s':\n%s", tag, want, out);
    read_attr_string(h52, "status", status, sizeof status);
    snprintf(want, sizeof want, "interrupted: SIGTERM after step %ld,", label);
    snprintf(want2, sizeof want2, "interrupted: a signal after step %ld,", label);
    ck_assert_msg(strstr(status, want) || strstr(status, want2), "status '%s'", status);
    snprintf(ck, sizeof ck, "%s/%s_cut.ckpt", g_dir, tag);
    snprintf(want, sizeof want, "step-%ld", label);
    assert_latest(ck, want);
    ck_assert_int_eq(read_1d(h52, "/train/step", ga, MAXR), label / 10);

    st = run_env("", np, cfg2, "--resume", out, sizeof out);
    ck_assert_msg(st == 0, "%s --resume: exit %d\n%s", tag, st, out);
    snprintf(want, sizeof want, ": %ld of 240 iterations done", label);
    ck_assert_msg(strstr(out, "resuming from") && strstr(out, want), "%s: no resume line:\n%s", tag, out);
    read_attr_string(h52, "status", status, sizeof status);
    ck_assert_str_eq(status, "completed");
    ck_assert_int_eq(read_attr_long(h52, "resumes"), 1);
    char at[1024];
    read_attr_string(h52, "resumed_at", at, sizeof at);
    ck_assert_msg(strstr(at, "checkpoint ") && !strstr(at, "not bitwise"), "resumed_at '%s'", at); /* the same threads and ISA */
    assert_same(h5, h52, "/train/loss");
    assert_same(h5, h52, "/train/step");
    assert_same(h5, h52, "/train/alpha");
    if (evals) {
        assert_same(h5, h52, "/eval/step");
        assert_same(h5, h52, "/eval/loss");
        assert_same(h5, h52, "/eval/top1_error");
    }
    assert_axis(h52, 240);

    /* The finished run: --resume says so, exits 0 and leaves the file alone. */
    struct stat a, b;
    ck_assert(stat(h52, &a) == 0);
    st = run_env("", np, cfg2, "--resume", out, sizeof out);
    ck_assert_msg(st == 0 && strstr(out, "already finished"), "%s finished run, --resume: exit %d\n%s", tag, st, out);
    ck_assert(stat(h52, &b) == 0);
    ck_assert(a.st_mtime == b.st_mtime && a.st_size == b.st_size && a.st_ino == b.st_ino);
}

START_TEST(test_allreduce_bitwise) { check_bitwise("ar", "p = 2;\n", 2, "TERM@120@1", 120, 1); }
END_TEST

/* The signal arrives while the ranks evaluate after step 120: acted on at step 121. */
START_TEST(test_allreduce_signal_in_eval) { check_bitwise("ae", "p = 2;\n", 2, "TERM@120@1@eval", 121, 1); }
END_TEST

START_TEST(test_gossip_sync_bitwise) { check_bitwise("gs", "method = \"gossip_pull\";\nsynchronous = true;\np = 3;\n", 3, "TERM@120@1", 120, 1); }
END_TEST

/* Synchronous EASGD (rounds summed in worker order: deterministic) through 2 servers: the
 * signal reaches worker 1 at an exchange (τ = 10 divides 120), the round completes, everyone
 * pauses: /train/loss bitwise. */
START_TEST(test_easgd_sync_bitwise) {
    check_bitwise("es", "method = \"easgd\";\nsynchronous = true;\np = 2;\nservers = 2;\n", 4, "TERM@120@1", 120, 0);
}
END_TEST

/* backup with p = 1 is plain SGD through a server: bitwise; the signal goes to the server. */
START_TEST(test_backup_bitwise) { check_bitwise("bk", "method = \"backup\";\np = 1;\n", 2, "TERM@120@1", 120, 0); }
END_TEST

/* SIGUSR1: a checkpoint, and the run goes on to the same end as without it. */
START_TEST(test_usr1_continues) {
    char cfg[512], h5[512], cfg2[512], h52[512], ck[600], out[1 << 15];
    write_cfg("u_ref", "p = 2;\n", cfg, h5);
    ck_assert_int_eq(run_env("", 2, cfg, NULL, out, sizeof out), 0);
    write_cfg("u_sig", "p = 2;\ncheckpoint = { keep_completed = true; };\n", cfg2, h52);
    int st = run_env("DSGD_TEST_SIGNAL=USR1@70", 2, cfg2, NULL, out, sizeof out);
    ck_assert_msg(st == 0, "exit %d\n%s", st, out);
    ck_assert_msg(strstr(out, "checkpoint: step 70 written"), "%s", out);
    snprintf(ck, sizeof ck, "%s/u_sig.ckpt", g_dir);
    assert_latest(ck, "step-70");
    assert_same(h5, h52, "/train/loss");
    assert_same(h5, h52, "/eval/loss");
}
END_TEST

/* SIGHUP (the terminal closed) stops with a checkpoint as SIGTERM does: exit 3, the status names it. */
START_TEST(test_sighup) {
    char cfg[512], h5[512], out[1 << 15], status[256];
    write_cfg("hup", "p = 2;\n", cfg, h5);
    int st = run_env("DSGD_TEST_SIGNAL=HUP@50", 2, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 3, "exit %d, expected 3\n%s", st, out);
    read_attr_string(h5, "status", status, sizeof status);
    ck_assert_msg(!strncmp(status, "interrupted: SIGHUP after step 50", 33), "status '%s'", status);
    st = run_env("", 2, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 0, "--resume: exit %d\n%s", st, out);
}
END_TEST

/* A run SIGKILLed some time after a periodic checkpoint: resume = "auto" continues from the
 * checkpoint, the rows the killed run logged after it are dropped (no duplicates, no gaps), and
 * the curve equals the straight run's. The delay (slept, pure: same values) makes the run long
 * enough to be killed mid-way. */
START_TEST(test_kill_after_periodic) {
    char cfg[512], h5[512], cfg2[512], h52[512], ck[600], out[1 << 15], cmd[2048];
    const char *extra = "p = 2;\ninject = { slow_ranks = [0]; delay_ms = 8.0; };\n";
    write_cfg("k_ref", extra, cfg, h5);
    ck_assert_int_eq(run_env("", 2, cfg, NULL, out, sizeof out), 0);
    char extra2[512];
    snprintf(extra2, sizeof extra2, "%scheckpoint = { every = 50; };\nresume = \"auto\";\n", extra);
    write_cfg("k_cut", extra2, cfg2, h52);
    snprintf(ck, sizeof ck, "%s/k_cut.ckpt", g_dir);
    snprintf(cmd, sizeof cmd, "setsid timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 ./dsgd-run %s > %s/k_cut.log 2>&1 & echo $!", cfg2, g_dir);
    FILE *f = popen(cmd, "r");
    ck_assert(f != NULL);
    int pid = 0;
    ck_assert(fscanf(f, "%d", &pid) == 1);
    pclose(f);
    /* Wait until the checkpoint after 100 steps is committed and a few more steps ran. */
    char latest[700];
    snprintf(latest, sizeof latest, "%s/latest", ck);
    for (int i = 0; i < 3000; i++) {
        FILE *l = fopen(latest, "r");
        char line[64] = "";
        if (l) {
            if (!fgets(line, sizeof line, l)) line[0] = 0;
            fclose(l);
        }
        if (!strncmp(line, "step-100", 8)) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 150000000}; /* ~ 15 steps more */
    nanosleep(&ts, NULL);
    kill(-pid, SIGKILL);
    snprintf(cmd, sizeof cmd, "sleep 0.5; cat %s/k_cut.log", g_dir);
    run(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "done:") == NULL, "the run finished before it was killed:\n%s", out);
    long rows = read_1d(h52, "/train/step", ga, MAXR);
    ck_assert_msg(rows >= 10, "only %ld /train rows before the kill", rows);
    /* Open MPI's ranks are not in the launcher's process group: they go when it notices (1-2 s),
     * and hold the checkpoint directory's lock until then. Wait for them (bounded). */
    snprintf(cmd, sizeof cmd, "for i in $(seq 100); do pgrep -f '[d]sgd-run.*%s' >/dev/null || exit 0; sleep 0.1; done; exit 1", cfg2);
    ck_assert_msg(run(cmd, out, sizeof out) == 0, "processes of the killed run still alive after 10 s");

    int st = run_env("", 2, cfg2, NULL, out, sizeof out); /* resume = "auto" */
    ck_assert_msg(st == 0, "resume = auto: exit %d\n%s", st, out);
    ck_assert_msg(strstr(out, "resuming from"), "%s", out);
    assert_same(h5, h52, "/train/loss");
    assert_same(h5, h52, "/train/step");
    assert_same(h5, h52, "/eval/step");
    assert_same(h5, h52, "/eval/top1_error");
    assert_same(h5, h52, "/ranks/step");
    assert_axis(h52, 240);
}
END_TEST

/* Asynchronous push gossip: SIGTERM between meeting points, resume, complete; the rows continue
 * (not bitwise: the nodes are asynchronous). */
START_TEST(test_gossip_push_async) {
    char cfg[512], h5[512], out[1 << 15], status[256];
    write_cfg("gp", "method = \"gossip_push\";\np = 3;\n", cfg, h5);
    int st = run_env("DSGD_TEST_SIGNAL=TERM@100@2", 3, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 3, "exit %d, expected 3\n%s", st, out);
    /* acted on at once (announcements): each node stops at its own step, the checkpoint is
     * labelled with the largest — at the latest the next meeting point (the evaluation at 120),
     * which a node far ahead on a loaded machine may reach before the announcement; the time
     * bound with rare meeting points is test_faults' */
    const char *at = strstr(out, "checkpoint: step ");
    ck_assert_msg(at != NULL, "%s", out);
    long label = atol(at + strlen("checkpoint: step "));
    ck_assert_msg(label >= 100 && label <= 120, "checkpoint after step %ld; expected 100..120\n%s", label, out);
    st = run_env("", 3, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 0, "--resume: exit %d\n%s", st, out);
    read_attr_string(h5, "status", status, sizeof status);
    ck_assert_str_eq(status, "completed");
    assert_axis(h5, 240);
    long n = read_1d(h5, "/eval/step", ga, MAXR);
    ck_assert_int_eq(n, 5); /* 0, 60, 120, 180, 240 */
    for (long i = 0; i < n; i++) ck_assert(ga[i] == 60.0 * (double)i);
    n = read_1d(h5, "/eval/top1_error", ga, MAXR);
    ck_assert_msg(ga[n - 1] < 0.3, "final top-1 error %g: the resumed nodes did not keep training", ga[n - 1]);
}
END_TEST

/* The asynchronous methods with servers (and backup with a backup worker, whose rounds can be
 * voided): interrupted by a signal to a worker or to a server, resumed; rows continue without
 * duplicates or gaps, the records (staleness histogram) count every gradient once, periodic
 * checkpoints on the way. */
START_TEST(test_servers_async) {
    struct { const char *tag, *extra, *sig; int np; } m[] = {
        /* a signal to an asynchronous worker comes late in its own steps (200 of 240): on a loaded
         * machine one worker may run 2:1 ahead of the others, and at its step 100 the servers'
         * count (all steps / p) could still be at the first periodic checkpoint (CI, once) */
        {"sa_ps", "method = \"ps\";\np = 3;\n", "TERM@200@1", 4},
        {"sa_ps2", "method = \"ps\";\np = 2;\nservers = 2;\n", "TERM@100@3", 4},
        {"sa_ea", "method = \"easgd\";\np = 3;\ntau = 4;\n", "TERM@180@0", 4},
        {"sa_bk", "method = \"backup\";\np = 3;\nbackups = 1;\n", "TERM@100@2", 4},
        {"sa_es", "method = \"easgd\";\nsynchronous = true;\np = 3;\ntau = 7;\n", "TERM@100@3", 4},
    };
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        char cfg[512], h5[512], out[1 << 15], status[256], extra[512], env[64];
        snprintf(extra, sizeof extra, "%scheckpoint = { every = 50; };\n", m[k].extra);
        write_cfg(m[k].tag, extra, cfg, h5);
        snprintf(env, sizeof env, "DSGD_TEST_SIGNAL=%s", m[k].sig);
        int st = run_env(env, m[k].np, cfg, NULL, out, sizeof out);
        ck_assert_msg(st == 3, "%s: exit %d, expected 3\n%s", m[k].tag, st, out);
        /* a periodic checkpoint (at server 0's first count >= 50), then the signal's */
        const char *c1 = strstr(out, "checkpoint: step "), *c2 = c1 ? strstr(c1 + 1, "checkpoint: step ") : NULL;
        ck_assert_msg(c1 && c2 && atol(c1 + 17) >= 50 && atol(c1 + 17) < 70, "%s: no periodic checkpoint:\n%s", m[k].tag, out);
        if (k == 0) { /* resumed as another method: its log rank's file (rank 0, a worker here) holds no experiment;
                         the key that changed is named from the file that does */
            st = run_env("", 3, cfg, "--resume --set method=allreduce", out, sizeof out);
            ck_assert_msg(st == 2 && strstr(out, "key 'method': the checkpoint was written with method = \"ps\""), "exit %d\n%s", st, out);
            /* and when a worker before the servers has no rank file (one that had left): every file is read */
            char dir[600], f1[640], aside[660], e[256];
            long latest = -1;
            snprintf(dir, sizeof dir, "%.*s.ckpt", (int)strlen(h5) - 3, h5);
            ck_assert_msg(ckpt_latest(dir, &latest, e, sizeof e) == 1, "%s: %s", dir, e);
            snprintf(f1, sizeof f1, "%s/step-%ld/rank-1.h5", dir, latest);
            snprintf(aside, sizeof aside, "%s.aside", f1);
            ck_assert_msg(rename(f1, aside) == 0, "%s: %s", f1, strerror(errno));
            st = run_env("", 3, cfg, "--resume --set method=allreduce", out, sizeof out);
            ck_assert_int_eq(rename(aside, f1), 0);
            ck_assert_msg(st == 2 && strstr(out, "key 'method': the checkpoint was written with method = \"ps\""), "exit %d\n%s", st, out);
        }
        st = run_env("", m[k].np, cfg, "--resume", out, sizeof out);
        ck_assert_msg(st == 0, "%s --resume: exit %d\n%s", m[k].tag, st, out);
        read_attr_string(h5, "status", status, sizeof status);
        ck_assert_msg(!strcmp(status, "completed"), "%s: status '%s'", m[k].tag, status);
        ck_assert_int_eq(read_attr_long(h5, "resumes"), 1);
        /* /train rows every 10 iterations of server 0's count, strictly increasing, ending at 240 */
        long n = read_1d(h5, "/train/step", ga, MAXR);
        ck_assert_msg(n >= 20, "%s: %ld /train rows", m[k].tag, n);
        for (long i = 1; i < n; i++) ck_assert_msg(ga[i] > ga[i - 1], "%s: /train/step row %ld = %g after %g", m[k].tag, i, ga[i], ga[i - 1]);
        ck_assert_msg(ga[n - 1] == 240.0, "%s: last /train/step %g", m[k].tag, ga[n - 1]);
        n = read_1d(h5, "/train/time_s", ga, MAXR);
        for (long i = 1; i < n; i++) ck_assert_msg(ga[i] >= ga[i - 1], "%s: time_s goes back at row %ld", m[k].tag, i);
        n = read_1d(h5, "/eval/step", ga, MAXR);
        for (long i = 1; i < n; i++) ck_assert_msg(ga[i] > ga[i - 1], "%s: /eval/step row %ld = %g after %g", m[k].tag, i, ga[i], ga[i - 1]);
        ck_assert_msg(ga[n - 1] == 240.0, "%s: last evaluation at %g", m[k].tag, ga[n - 1]);
        n = read_1d(h5, "/eval/top1_error", ga, MAXR);
        ck_assert_msg(ga[n - 1] < 0.3, "%s: final top-1 error %g", m[k].tag, ga[n - 1]);
        if (!strncmp(m[k].tag, "sa_ps", 5)) { /* every gradient of every worker counted once */
            hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
            hid_t d = H5Dopen2(f, "/ps/staleness_histogram", H5P_DEFAULT);
            long long hist[64] = {0};
            ck_assert(H5Dread(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, hist) >= 0);
            H5Dclose(d), H5Fclose(f);
            long long tot = 0;
            for (int b = 0; b < 64; b++) tot += hist[b];
            const int p = !strcmp(m[k].tag, "sa_ps") ? 3 : 2;
            ck_assert_msg(tot == 240LL * p, "%s: %lld gradients in the histogram, expected %d", m[k].tag, tot, 240 * p);
        }
    }
}
END_TEST

START_TEST(test_errors) {
    char cfg[512], h5[512], out[1 << 15];
    /* --resume with nothing to continue */
    write_cfg("e1", "p = 2;\n", cfg, h5);
    int st = run_env("", 2, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "--resume: no checkpoint in"), "exit %d\n%s", st, out);
    ck_assert_msg(access(h5, F_OK) != 0, "a run file was written");
    /* interrupted, then resumed with another b: names the key, leaves the file alone */
    st = run_env("DSGD_TEST_SIGNAL=TERM@30", 2, cfg, NULL, out, sizeof out);
    ck_assert_int_eq(st, 3);
    st = run_env("", 2, cfg, "--resume --set b=16", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'b'") && strstr(out, "b = 32"), "exit %d\n%s", st, out);
    /* a fresh run over the checkpoint (the run file removed by hand) is refused */
    unlink(h5);
    st = run_env("", 2, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "holds the checkpoint of an earlier run"), "exit %d\n%s", st, out);
    /* ... and --resume says the run file is missing */
    st = run_env("", 2, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "is missing"), "exit %d\n%s", st, out);
    /* a checkpoint written with another p: names the key */
    write_cfg("e2", "p = 2;\n", cfg, h5);
    ck_assert_int_eq(run_env("DSGD_TEST_SIGNAL=TERM@30", 2, cfg, NULL, out, sizeof out), 3);
    st = run_env("", 3, cfg, "--resume --set p=3", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'p'"), "exit %d\n%s", st, out);
    /* a completed run that keeps its checkpoints: the same run again is told the run is complete
     * (not to continue it with --resume), and the file is left alone */
    write_cfg("e3", "p = 1;\ncheckpoint = { every = 100; keep_completed = true; };\n", cfg, h5);
    ck_assert_int_eq(run_env("", 1, cfg, NULL, out, sizeof out), 0);
    char s1[128], s2[128];
    file_sum(h5, s1, sizeof s1);
    st = run_env("", 1, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'output'") && strstr(out, "holds a completed run") && !strstr(out, "--resume"),
                  "exit %d\n%s", st, out);
    file_sum(h5, s2, sizeof s2);
    ck_assert_msg(!strcmp(s1, s2), "a refused run changed the run file");
    /* another output on that checkpoint.path: neither --resume nor overwrite is offered (that
     * run is not this one's to continue or remove), with or without overwrite = true */
    char other[600], ck3[300];
    snprintf(ck3, sizeof ck3, "%.200s/e3.ckpt", g_dir);
    snprintf(other, sizeof other, "--set output=%.200s/e4.h5 --set checkpoint.path=%.200s", g_dir, ck3);
    for (int k = 0; k < 2; k++) {
        char args[700];
        snprintf(args, sizeof args, "%s%s", other, k ? " --set overwrite=true" : "");
        st = run_env("", 1, cfg, args, out, sizeof out);
        ck_assert_msg(st == 2 && strstr(out, "holds the checkpoint of the run of another output") && !strstr(out, "--resume"),
                      "exit %d\n%s", st, out);
    }
    assert_latest(ck3, "step-200"); /* the completed run's last periodic checkpoint, kept */
}
END_TEST

/* md5 of a file's bytes (to show a refused run changed nothing). */
static void file_sum(const char *path, char *out, size_t n) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "md5sum < '%s'", path);
    ck_assert(run(cmd, out, n) == 0);
}

/* A resume with other compute threads or another oneDNN ISA than the checkpoint's (threads = 0
 * resolves to the cores per rank) would not continue bitwise: refused before anything is touched
 * (and so predicted by --check), unless checkpoint.bitwise = false says it may — then the run file
 * records it in resumed_at. */
START_TEST(test_threads_change) {
    char cfg[512], h5[512], out[1 << 15], s1[128], s2[128];
    write_cfg("th", "p = 2;\n", cfg, h5);
    ck_assert_int_eq(run_env("DSGD_TEST_SIGNAL=TERM@60", 2, cfg, "--set threads=1", out, sizeof out), 3);
    file_sum(h5, s1, sizeof s1);
    int st = run_env("", 2, cfg, "--resume --set threads=2", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'threads'") && strstr(out, "written with 1 compute thread(s), this run has 2") &&
                      strstr(out, "checkpoint.bitwise=false"),
                  "exit %d\n%s", st, out);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "timeout 60 ./dsgd-run --check --resume --set threads=2 %s", cfg);
    st = run(cmd, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'threads'"), "--check: exit %d\n%s", st, out);
    /* Another ISA (where this CPU has more than AVX2). */
    if (strcmp(nn_isa_name(), "avx2") != 0) {
        st = run_env("ONEDNN_MAX_CPU_ISA=AVX2", 2, cfg, "--resume --set threads=1", out, sizeof out);
        ck_assert_msg(st == 2 && strstr(out, "oneDNN ran") && strstr(out, "this run has avx2"), "ISA: exit %d\n%s", st, out);
    }
    file_sum(h5, s2, sizeof s2);
    ck_assert_msg(!strcmp(s1, s2), "a refused resume changed the run file");
    st = run_env("", 2, cfg, "--resume --set threads=2 --set checkpoint.bitwise=false", out, sizeof out);
    ck_assert_msg(st == 0, "allowed resume: exit %d\n%s", st, out);
    char at[1024];
    read_attr_string(h5, "resumed_at", at, sizeof at);
    ck_assert_msg(strstr(at, "(not bitwise: threads 1 -> 2)") != NULL, "resumed_at '%s'", at); /* T5: says how */
}
END_TEST

/* What a new user found: a missing or foreign rank file is refused before the run file is
 * touched; resume = "auto" keeps a run file that has no checkpoint under another name; other
 * files in the checkpoint directory survive; two runs cannot share a checkpoint directory; an
 * unusable checkpoint.path is refused at the start; a finished run of another experiment is not
 * taken for this one. */
START_TEST(test_refusals_keep_files) {
    char cfg[512], h5[512], out[1 << 15], s1[128], s2[128], cmd[3000];
    write_cfg("r1", "p = 2;\ncheckpoint = { every = 40; keep = 1; };\n", cfg, h5); /* keep = 1: no checkpoint before to fall back to */
    ck_assert_int_eq(run_env("DSGD_TEST_SIGNAL=TERM@100", 2, cfg, NULL, out, sizeof out), 3);
    char ck[300];
    snprintf(ck, sizeof ck, "%s/r1.ckpt", g_dir);
    assert_latest(ck, "step-100");
    /* rank 1's file missing */
    snprintf(cmd, sizeof cmd, "mv %s/step-100/rank-1.h5 %s/rank-1.keep", ck, g_dir);
    ck_assert(run(cmd, NULL, 0) == 0);
    file_sum(h5, s1, sizeof s1);
    int st = run_env("", 2, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "rank-1.h5"), "missing rank file: exit %d\n%s", st, out);
    file_sum(h5, s2, sizeof s2);
    ck_assert_msg(!strcmp(s1, s2), "a refused resume changed the run file");
    /* a rank file of another checkpoint (the periodic one at 80 is gone: make one by hand) */
    snprintf(cmd, sizeof cmd, "cp %s/rank-1.keep %s/step-100/rank-0.h5.x && mv %s/step-100/rank-0.h5 %s/r0 && "
             "mv %s/step-100/rank-0.h5.x %s/step-100/rank-0.h5 && mv %s/rank-1.keep %s/step-100/rank-1.h5", g_dir, ck, ck, g_dir, ck, ck, g_dir, ck);
    ck_assert(run(cmd, NULL, 0) == 0);
    st = run_env("", 2, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "holds the state of rank 1"), "foreign rank file: exit %d\n%s", st, out);
    file_sum(h5, s2, sizeof s2);
    ck_assert_msg(!strcmp(s1, s2), "a refused resume changed the run file");
    snprintf(cmd, sizeof cmd, "mv %s/r0 %s/step-100/rank-0.h5", g_dir, ck);
    ck_assert(run(cmd, NULL, 0) == 0);
    /* another user file in the directory survives the resume and its checkpoints */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/step-x && echo keep > %s/notes.txt && echo keep > %s/step-x/f", ck, ck, ck);
    ck_assert(run(cmd, NULL, 0) == 0);
    st = run_env("", 2, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 0, "resume after the repair: exit %d\n%s", st, out);
    snprintf(cmd, sizeof cmd, "test -f %s/notes.txt && test -f %s/step-x/f", ck, ck);
    ck_assert_msg(run(cmd, NULL, 0) == 0, "files of the user in %s were removed", ck);

    /* resume = "auto" with a run file but no checkpoint (cut off before its first one) */
    write_cfg("r2", "p = 2;\nresume = \"auto\";\n", cfg, h5);
    ck_assert_int_eq(run_env("", 2, cfg, NULL, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "cp %s %s/r2.copy && rm -rf %s/r2.ckpt", h5, g_dir, g_dir);
    ck_assert(run(cmd, NULL, 0) == 0);
    /* make it unfinished: the status attribute goes (h5py is a Debian package we test with) */
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"import h5py; f = h5py.File('%s', 'r+'); del f.attrs['status']\"", h5);
    ck_assert(run(cmd, NULL, 0) == 0);
    file_sum(h5, s1, sizeof s1);
    st = run_env("", 2, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 0 && strstr(out, "kept as"), "auto without a checkpoint: exit %d\n%s", st, out);
    char aside[600];
    snprintf(aside, sizeof aside, "%s/r2.restart1.h5", g_dir);
    file_sum(aside, s2, sizeof s2);
    ck_assert_msg(!strcmp(s1, s2), "the earlier run file was not kept as %s", aside);
    /* --resume says how to start afresh (the fresh run finished: make its file unfinished again) */
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"import h5py; f = h5py.File('%s', 'r+'); del f.attrs['status']\"", h5);
    ck_assert(run(cmd, NULL, 0) == 0);
    st = run_env("", 2, cfg, "--resume --set resume=never", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "no checkpoint") && strstr(out, "the run file exists"), "exit %d\n%s", st, out);

    /* an unusable checkpoint.path: refused at the start, naming the key */
    write_cfg("r3", "p = 2;\ncheckpoint = { path = \"/proc/dsgd-ckpt\"; };\n", cfg, h5);
    st = run_env("", 2, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'checkpoint.path'"), "unusable checkpoint.path: exit %d\n%s", st, out);

    /* a rank file of another run, at the same step (gossip: every rank holds its own model) */
    char cfg5[512], h55[512];
    /* (the signal during step 50, a periodic meeting point: both checkpoints are at step 50) */
    write_cfg("r5a", "method = \"gossip_push\";\np = 2;\ncheckpoint = { every = 50; };\n", cfg, h5);
    write_cfg("r5b", "method = \"gossip_push\";\np = 2;\ncheckpoint = { every = 50; };\nweight_decay = 2e-4;\n", cfg5, h55);
    ck_assert_int_eq(run_env("DSGD_TEST_SIGNAL=TERM@50", 2, cfg, NULL, out, sizeof out), 3);
    ck_assert_int_eq(run_env("DSGD_TEST_SIGNAL=TERM@50", 2, cfg5, NULL, out, sizeof out), 3);
    snprintf(cmd, sizeof cmd, "cp %s/r5b.ckpt/step-50/rank-1.h5 %s/r5a.ckpt/step-50/rank-1.h5", g_dir, g_dir);
    ck_assert(run(cmd, NULL, 0) == 0);
    file_sum(h5, s1, sizeof s1);
    st = run_env("", 2, cfg, "--resume", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "written by another run"), "rank file of another run: exit %d\n%s", st, out);
    file_sum(h5, s2, sizeof s2);
    ck_assert_msg(!strcmp(s1, s2), "a refused resume changed the run file");

    /* a finished run of another experiment at the output is not "already finished" */
    write_cfg("r4", "p = 2;\n", cfg, h5);
    ck_assert_int_eq(run_env("", 2, cfg, NULL, out, sizeof out), 0);
    st = run_env("", 2, cfg, "--set resume=auto --set seed=9", out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "finished run of another experiment") && strstr(out, "key 'seed'"), "exit %d\n%s", st, out);
}
END_TEST

/* Two runs given the same checkpoint directory: the second is refused while the first runs. */
START_TEST(test_shared_checkpoint_dir) {
    char cfg[512], h5[512], cfg2[512], h52[512], out[1 << 15], cmd[2048];
    char ck[600];
    snprintf(ck, sizeof ck, "%s/shared.ckpt", g_dir);
    char extra[900];
    snprintf(extra, sizeof extra, "p = 2;\ninject = { slow_ranks = [0]; delay_ms = 15.0; };\ncheckpoint = { path = \"%s\"; };\n", ck);
    write_cfg("sh1", extra, cfg, h5);
    write_cfg("sh2", extra, cfg2, h52);
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 ./dsgd-run %s > %s/sh1.log 2>&1 & echo $! > %s/sh1.pid", cfg, g_dir, g_dir);
    ck_assert(run(cmd, NULL, 0) == 0);
    char lock[700];
    snprintf(lock, sizeof lock, "%s/.lock", ck);
    for (int i = 0; i < 500 && access(lock, F_OK) != 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    int st = run_env("DSGD_CKPT_LOCK_WAIT_S=0", 2, cfg2, NULL, out, sizeof out); /* refused at once: no wait (P7) */
    ck_assert_msg(st == 2 && strstr(out, "in use by another run"), "second run on the same checkpoint.path: exit %d\n%s", st, out);
    ck_assert_msg(access(h52, F_OK) != 0, "the refused run wrote %s", h52);
    /* overwrite = true over the output of the run still going, with another checkpoint.path:
     * refused (its checkpoint directory is locked), the live run's file untouched */
    for (int i = 0; i < 500 && access(h5, F_OK) != 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    char set[1200];
    snprintf(set, sizeof set, "--set overwrite=true --set output=\\\"%s\\\" --set checkpoint.path=\\\"%s/sh3.ckpt\\\"", h5, g_dir);
    st = run_env("", 2, cfg2, set, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'output'") && strstr(out, "still going"), "overwrite of a live run: exit %d\n%s", st, out);
    snprintf(cmd, sizeof cmd, "while kill -0 $(cat %s/sh1.pid) 2>/dev/null; do sleep 0.2; done; grep -c 'done:' %s/sh1.log", g_dir, g_dir);
    ck_assert_msg(run(cmd, out, sizeof out) == 0 && atoi(out) == 1, "the first run did not finish: %s", out);
}
END_TEST


/* 1 if path exists. */
static int exists(const char *path) { return access(path, F_OK) == 0; }

/* P2: checkpoints every 50 steps and a SIGTERM at 130: step-100 and step-130 stay (checkpoint.keep
 * = 2), step-50 is gone; every part, the step directory and `latest` were fsync'ed (strace, where
 * it is installed) before the commit; a truncated part of the newest checkpoint (a crash of a
 * node before its pages reached the disk) makes the resume take the one before it, with a message,
 * and the run still ends bitwise equal to a straight one — for a part of rank 1 (the parts'
 * check on every rank) and of rank 0 (which holds the experiment); with checkpoint.keep = 1 there
 * is nothing to fall back to: refused, naming the part. The completed run's checkpoints go. */
START_TEST(test_keep_and_fallback) {
    char cfg[512], h5[512], cfg2[512], h52[512], ck[600], out[1 << 15], cmd[2048], p[700];
    write_cfg("kf_ref", "p = 2;\n", cfg, h5);
    ck_assert_int_eq(run_env("", 2, cfg, NULL, out, sizeof out), 0);
    const int traced = system("strace -V >/dev/null 2>&1") == 0;
    if (!traced) fprintf(stderr, "test_keep_and_fallback: no strace: the fsync calls are not counted\n");
    for (int k = 0; k < 3; k++) {
        const int victim = k == 0 ? 1 : 0, keep = k == 2 ? 1 : 2;
        char tag[32], extra[200], trace[600];
        snprintf(tag, sizeof tag, "kf%d", k);
        snprintf(extra, sizeof extra, "p = 2;\ncheckpoint = { every = 50; keep = %d; };\n", keep);
        write_cfg(tag, extra, cfg2, h52);
        snprintf(ck, sizeof ck, "%s/%s.ckpt", g_dir, tag);
        snprintf(trace, sizeof trace, "%s/%s.strace", g_dir, tag);
        snprintf(cmd, sizeof cmd, "DSGD_TEST_SIGNAL=TERM@130 timeout -k 5 " MPI_TIMEOUT " %s%s mpiexec -n 2 ./dsgd-run %s",
                 traced && k == 0 ? "strace -f -qq -y -e trace=fsync -o " : "", traced && k == 0 ? trace : "", cfg2);
        int st = run(cmd, out, sizeof out);
        ck_assert_msg(st == 3, "%s: exit %d\n%s", tag, st, out);
        assert_latest(ck, "step-130");
        for (int l = 50; l <= 130; l += l == 100 ? 30 : 50) {
            snprintf(p, sizeof p, "%s/step-%d/rank-0.h5", ck, l);
            ck_assert_msg(exists(p) == (l == 130 || (l == 100 && keep == 2)), "%s: %s %s", tag, p, exists(p) ? "kept" : "missing");
        }
        if (traced && k == 0) { /* each part, its directory, the directory of the steps and `latest`'s temporary */
            const char *need[] = {"step-130.tmp/rank-0.h5>", "step-130.tmp/rank-1.h5>", "step-130.tmp>", "kf0.ckpt>", "kf0.ckpt/.latest."};
            for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
                snprintf(cmd, sizeof cmd, "grep -c 'fsync([0-9]*<[^>]*%s' %s", need[i], trace);
                ck_assert_msg(run(cmd, out, sizeof out) == 0 && atoi(out) >= 1, "no fsync of %s in %s", need[i], trace);
            }
        }
        snprintf(p, sizeof p, "%s/step-130/rank-%d.h5", ck, victim);
        snprintf(cmd, sizeof cmd, "truncate -s 2000 %s", p);
        ck_assert(run(cmd, NULL, 0) == 0);
        st = run_env("", 2, cfg2, "--resume", out, sizeof out);
        if (keep == 1) {
            ck_assert_msg(st == 2 && strstr(out, p), "%s: keep = 1, truncated part: exit %d\n%s", tag, st, out);
            continue;
        }
        ck_assert_msg(st == 0 && strstr(out, "step-130 cannot be read") && strstr(out, "resuming from the one before it") &&
                          strstr(out, "resuming from") && strstr(out, ": 100 of 240 iterations done"),
                      "%s: resume after a truncated part: exit %d\n%s", tag, st, out);
        assert_same(h5, h52, "/train/loss");
        assert_same(h5, h52, "/eval/loss");
        assert_same(h5, h52, "/ranks/step");
        assert_axis(h52, 240);
        ck_assert_msg(!exists(ck), "%s: the completed run's checkpoint directory %s is still there", tag, ck);
    }
}
END_TEST

/* Completed runs: their checkpoints are removed (checkpoint.keep_completed = false, the default),
 * the directory too unless it holds files of the user; kept with keep_completed = true. */
START_TEST(test_completed_rule) {
    char cfg[512], h5[512], ck[600], out[1 << 15], p[700];
    write_cfg("cr1", "p = 1;\ncheckpoint = { every = 100; };\n", cfg, h5);
    snprintf(ck, sizeof ck, "%s/cr1.ckpt", g_dir);
    ck_assert(mkdir(ck, 0777) == 0);
    snprintf(p, sizeof p, "%s/notes.txt", ck);
    write_file(p, "mine\n");
    int st = run_env("", 1, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 0, "exit %d\n%s", st, out);
    ck_assert_msg(strstr(out, "checkpoint: step 200 written"), "%s", out);
    snprintf(p, sizeof p, "%s/notes.txt", ck);
    ck_assert_msg(exists(p), "the user's %s was removed", p);
    const char *gone[] = {"latest", "step-100", "step-200", ".lock"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
        snprintf(p, sizeof p, "%s/%s", ck, gone[i]);
        ck_assert_msg(!exists(p), "%s is still there after the run completed", p);
    }
    write_cfg("cr2", "p = 1;\ncheckpoint = { every = 100; keep_completed = true; };\n", cfg, h5);
    snprintf(ck, sizeof ck, "%s/cr2.ckpt", g_dir);
    ck_assert_int_eq(run_env("", 1, cfg, NULL, out, sizeof out), 0);
    assert_latest(ck, "step-200");
    snprintf(p, sizeof p, "%s/step-100/rank-0.h5", ck);
    ck_assert_msg(exists(p), "keep_completed = true: %s is gone", p);
}
END_TEST

/* P7: a checkpoint directory locked by another process (a node that failed holds its lock until
 * the lease expires) is waited for: refused after DSGD_CKPT_LOCK_WAIT_S seconds while held; taken
 * when the holder lets go within the wait. */
START_TEST(test_lock_wait) {
    char cfg[512], h5[512], ck[600], out[1 << 15], cmd[2048];
    write_cfg("lw", "p = 2;\n", cfg, h5);
    snprintf(ck, sizeof ck, "%s/lw.ckpt", g_dir);
    ck_assert(mkdir(ck, 0777) == 0);
    /* the holder: flock(1) keeps <dir>/.lock locked for 6 s */
    snprintf(cmd, sizeof cmd, "flock -x %s/.lock sleep 6 >/dev/null 2>&1 & sleep 0.5", ck);
    ck_assert(run(cmd, NULL, 0) == 0);
    const double t0 = wall_time();
    int st = run_env("DSGD_CKPT_LOCK_WAIT_S=1", 2, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "in use by another run") && strstr(out, "still after 1 s of waiting") &&
                      strstr(out, "waiting up to 1 s"),
                  "held lock, 1 s wait: exit %d\n%s", st, out);
    ck_assert_msg(!exists(h5), "the refused run wrote %s", h5);
    st = run_env("DSGD_CKPT_LOCK_WAIT_S=60", 2, cfg, NULL, out, sizeof out);
    ck_assert_msg(st == 0 && strstr(out, "waiting up to 60 s"), "lock released within the wait: exit %d\n%s", st, out);
    ck_assert_msg(wall_time() - t0 >= 5.0, "the run did not wait for the lock (%.1f s)", wall_time() - t0);
}
END_TEST

/* stop_at: a few seconds into the run every rank checkpoints and the run stops with exit 3 and
 * status "interrupted: time limit (stop_at) after step N, ..."; --resume (with another stop_at,
 * not part of the experiment) completes it — for allreduce bitwise equal to a straight run; for ps
 * (asynchronous, with a server) the rows continue to the end. The slow rank makes the runs last
 * ~6 s (pure delays: the same values). */
START_TEST(test_stop_at) {
    struct { const char *tag, *extra; int np, bitwise; } m[] = {
        {"sta", "p = 2;\ninject = { slow_ranks = [0]; delay_ms = 25.0; };\n", 2, 1},
        {"stp", "method = \"ps\";\np = 2;\ninject = { slow_ranks = [0]; delay_ms = 25.0; };\n", 3, 0},
    };
    for (size_t k = 0; k < sizeof m / sizeof *m; k++) {
        char cfg[512], h5[512], cfg2[512], h52[512], out[1 << 15], status[256], set[64], tag2[64];
        if (m[k].bitwise) {
            write_cfg(m[k].tag, m[k].extra, cfg, h5);
            ck_assert_int_eq(run_env("", m[k].np, cfg, NULL, out, sizeof out), 0);
        }
        snprintf(tag2, sizeof tag2, "%s_cut", m[k].tag);
        write_cfg(tag2, m[k].extra, cfg2, h52);
        snprintf(set, sizeof set, "--set stop_at=%ld", (long)time(NULL) + 4);
        int st = run_env("", m[k].np, cfg2, set, out, sizeof out);
        ck_assert_msg(st == 3, "%s with %s: exit %d, expected 3\n%s", m[k].tag, set, st, out);
        ck_assert_msg(strstr(out, "stopped by time limit (stop_at) after step"), "%s:\n%s", m[k].tag, out);
        read_attr_string(h52, "status", status, sizeof status);
        long n = -1;
        ck_assert_msg(sscanf(status, "interrupted: time limit (stop_at) after step %ld, checkpoint written", &n) == 1 && n > 0 && n < 240,
                      "%s: status '%s'", m[k].tag, status);
        snprintf(set, sizeof set, "--resume --set stop_at=%ld", (long)time(NULL) + 3600);
        st = run_env("", m[k].np, cfg2, set, out, sizeof out);
        ck_assert_msg(st == 0, "%s --resume: exit %d\n%s", m[k].tag, st, out);
        read_attr_string(h52, "status", status, sizeof status);
        ck_assert_msg(!strcmp(status, "completed"), "%s: status '%s'", m[k].tag, status);
        if (m[k].bitwise) {
            assert_same(h5, h52, "/train/loss");
            assert_same(h5, h52, "/eval/loss");
            assert_same(h5, h52, "/ranks/step");
            assert_axis(h52, 240);
        } else {
            n = read_1d(h52, "/train/step", ga, MAXR);
            ck_assert_msg(n >= 20 && ga[n - 1] == 240.0, "%s: %ld /train rows, last %g", m[k].tag, n, n ? ga[n - 1] : -1.0);
            for (long i = 1; i < n; i++) ck_assert_msg(ga[i] > ga[i - 1], "%s: /train/step row %ld = %g after %g", m[k].tag, i, ga[i], ga[i - 1]);
        }
    }
    /* a stop_at already past is refused, naming the key */
    char cfg[512], h5[512], out[1 << 15], set[64];
    write_cfg("stx", "p = 2;\n", cfg, h5);
    snprintf(set, sizeof set, "--set stop_at=%ld", (long)time(NULL) - 10);
    int st = run_env("", 2, cfg, set, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'stop_at'") && strstr(out, "already past"), "past stop_at: exit %d\n%s", st, out);
}
END_TEST

/* What may differ between the parts of one run: stop_at and checkpoint.* (and an experiment text
 * of an earlier version without the new keys) are accepted, b is not. */
START_TEST(test_compare_config_keys) {
    static experiment e;
    static char now[CFG_TEXT_MAX], saved[CFG_TEXT_MAX], old[CFG_TEXT_MAX];
    char err[ERRLEN];
    config_defaults(&e);
    snprintf(e.output, sizeof e.output, "x.h5");
    config_to_text(&e, saved, sizeof saved);
    /* the text of a version without stop_at, checkpoint.keep, checkpoint.keep_completed */
    size_t o = 0;
    for (const char *l = saved; *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l + 1) : strlen(l);
        char line[4 * CFG_PATH_MAX];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        if (strncmp(line, "stop_at =", 9) && !strstr(line, " keep = ") && !strstr(line, " keep_completed = ")) memcpy(old + o, l, len), o += len;
        l += len;
    }
    old[o] = '\0';
    ck_assert_msg(strlen(old) + 50 < strlen(saved) && strlen(old) > strlen(saved) - 80, "%zu of %zu bytes", strlen(old), strlen(saved));
    e.stop_at = 1900000000L, e.checkpoint.keep = 3, e.checkpoint.keep_completed = 1;
    config_to_text(&e, now, sizeof now);
    ck_assert_msg(ckpt_compare_config(saved, now, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(ckpt_compare_config(old, now, err, sizeof err) == 0, "%s", err);
    e.b = 16;
    config_to_text(&e, now, sizeof now);
    ck_assert(ckpt_compare_config(old, now, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "key 'b'"), "%s", err);
}
END_TEST

int main(void) {
    if (test_data_missing()) return 1;
    snprintf(g_dir, sizeof g_dir, "/tmp/dsgd_test_checkpoint_%d", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", g_dir, g_dir);
    if (system(cmd) != 0) return 1;
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_compare_config_keys);
    tcase_add_test(tc, test_keep_and_fallback);
    tcase_add_test(tc, test_completed_rule);
    tcase_add_test(tc, test_lock_wait);
    tcase_add_test(tc, test_stop_at);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_refusals_keep_files);
    tcase_add_test(tc, test_threads_change);
    tcase_add_test(tc, test_shared_checkpoint_dir);
    tcase_add_test(tc, test_allreduce_bitwise);
    tcase_add_test(tc, test_usr1_continues);
    tcase_add_test(tc, test_sighup);
    tcase_add_test(tc, test_allreduce_signal_in_eval);
    tcase_add_test(tc, test_gossip_sync_bitwise);
    tcase_add_test(tc, test_easgd_sync_bitwise);
    tcase_add_test(tc, test_backup_bitwise);
    tcase_add_test(tc, test_servers_async);
    tcase_add_test(tc, test_kill_after_periodic);
    tcase_add_test(tc, test_gossip_push_async);
    suite_add_tcase(s, tc);
    int rc = run_suite(s);
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) return 1;
    return rc;
}
