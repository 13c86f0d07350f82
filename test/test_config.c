/* test_config.c — unit tests of the experiment file (src/config): the paper's defaults, a full
 * file, every class of error with its file:line and key, the --set overrides, the config_to_text
 * round trip, config_check_world, and that docs/config.md documents every key of the table.
 *
 * Run from the repository root (docs/config.md is read relative to it). Test files are written
 * into a mkdtemp directory that is removed at the end.
 *
 *   build/test/test_config                      run the tests
 *   build/test/test_config --print-docs-table   print the key table for docs/config.md */
#define _GNU_SOURCE
#include "config/config.h"
#include "testutil.h"
#include "util/util.h"

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

/* Write text to <tmpdir>/<name>; returns the path (static storage, one per name slot). */
static const char *write_file(const char *name, const char *text) {
    static char paths[16][512];
    static int slot;
    char *p = paths[slot++ % 16];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "cannot write %s", p);
    fputs(text, f);
    fclose(f);
    return p;
}

static experiment e; /* large: static, not on the stack */
static char err[ERRLEN];
static const char *path; /* the file of the last load_text */

/* Write text to t.cfg and load it with the given overrides. */
static int load_text(const char *text, char *const *sets, int n_sets) {
    path = write_file("t.cfg", text);
    err[0] = 0;
    return config_load(&e, path, sets, n_sets, err, sizeof err);
}

/* Assert that loading text fails with EXIT_BADINPUT and a message holding each of the
 * NULL-terminated substrings (and the file name unless an override is at fault). */
static void expect_error(const char *text, char *const *sets, int n_sets, const char *const *subs, int names_file) {
    int st = load_text(text, sets, n_sets);
    ck_assert_msg(st == EXIT_BADINPUT, "status %d (expected 2) for:\n%s\nerr: %s", st, text, err);
    ck_assert_msg(!strchr(err, '\n'), "message is not one line: %s", err);
    if (names_file) ck_assert_msg(strstr(err, path) != NULL, "message lacks the file name %s: %s", path, err);
    for (int i = 0; subs[i]; i++) ck_assert_msg(strstr(err, subs[i]) != NULL, "message lacks '%s': %s", subs[i], err);
}
#define EXPECT_ERROR(text, ...) expect_error(text, NULL, 0, (const char *const[]){__VA_ARGS__, NULL}, 1)
#define EXPECT_SET_ERROR(text, set, ...) \
    expect_error(text, (char *const[]){(char *)(set)}, 1, (const char *const[]){__VA_ARGS__, NULL}, 0)

/* ---------------------------------------------------------------------------------------- */

START_TEST(test_defaults_are_the_papers) {
    config_defaults(&e);
    ck_assert_str_eq(e.name, "dsgd");
    ck_assert_uint_eq(e.seed, 1);
    ck_assert_int_eq(e.method, METHOD_ALLREDUCE);
    ck_assert_int_eq(e.p, 1);
    ck_assert_int_eq(e.b, 32);
    ck_assert_int_eq(e.iterations, 1000);
    ck_assert_close(e.alpha.base, 0.1, 0);
    ck_assert_int_eq(e.alpha.schedule, SCHED_STEP);
    ck_assert_int_eq(e.alpha.n_steps, 0);
    ck_assert_close(e.alpha.factor, 0.1, 0);
    ck_assert_int_eq(e.alpha.warmup, 0);
    ck_assert_close(e.momentum, 0.9, 0);
    ck_assert_int_eq(e.nesterov, 1);
    ck_assert_close(e.weight_decay, 1e-4, 0);
    ck_assert_int_eq(e.tau, 10);
    ck_assert_close(e.beta, 0.8, 0);
    ck_assert_int_eq(e.servers, 1);
    ck_assert_int_eq(e.backups, 0);
    ck_assert_int_eq(e.synchronous, 0);
    ck_assert_int_eq(e.gossip_order, GOSSIP_STALE);
    ck_assert_close(e.comm_timeout_s, 300.0, 0);
    ck_assert_int_eq(e.inject.n_slow_ranks, 0);
    ck_assert_close(e.inject.delay_ms, 0.0, 0);
    ck_assert_int_eq(e.inject.delay_dist, DELAY_FIXED);
    ck_assert_close(e.inject.random_slow, 0.0, 0);
    ck_assert_int_eq(e.inject.fail_rank, -1);
    ck_assert_int_eq(e.inject.fail_step, 0);
    ck_assert_int_eq(e.model.arch, ARCH_RESNET18);
    ck_assert_int_eq(e.model.width, 64);
    ck_assert_int_eq(e.model.stem, STEM_IMAGENET);
    ck_assert_str_eq(data_format_name(e.data.format), "idx");
    ck_assert_str_eq(e.data.train_images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
    ck_assert_str_eq(e.data.train_labels, "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz");
    ck_assert_str_eq(e.data.val_images, "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
    ck_assert_str_eq(e.data.val_labels, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
    ck_assert_int_eq(e.eval.every, 500);
    ck_assert_int_eq(e.eval.batch, 250);
    ck_assert_int_eq(e.log_every, 20);
    ck_assert_int_eq(e.threads, 0);
    ck_assert_int_eq(e.overwrite, 0);
    ck_assert_str_eq(device_name(e.device), "cpu");
}
END_TEST

START_TEST(test_empty_file_gives_defaults) {
    ck_assert_int_eq(load_text("# nothing\n", NULL, 0), 0);
    ck_assert_str_eq(e.source, path);
    ck_assert_str_eq(e.output, "runs/dsgd.h5"); /* "" resolves to runs/<name>.h5 */
    ck_assert_close(e.alpha.base, 0.1, 0);
    ck_assert_int_eq(e.nesterov, 1);
    ck_assert_int_eq(load_text("name = \"r2\";\n", NULL, 0), 0);
    ck_assert_str_eq(e.output, "runs/r2.h5");
}
END_TEST

static const char *full_file =
    "name = \"full-run\";\n"
    "seed = 42;\n"
    "method = \"allreduce\";\n"
    "p = 4;\n"
    "b = 64;\n"
    "iterations = 90000;\n"
    "alpha = {\n"
    "  base = 0.2;\n"
    "  schedule = \"step\";\n"
    "  steps = [30000, 60000, 80000];\n"
    "  factor = 0.5;\n"
    "  warmup = 500;\n"
    "};\n"
    "momentum = 0.8;\n"
    "nesterov = false;\n"
    "weight_decay = 5e-4;\n"
    "tau = 4;\n"
    "beta = 0.9;\n"
    "servers = 2;\n"
    "backups = 1;\n"
    "synchronous = true;\n"
    "gossip_order = \"fresh\";\n"
    "comm_timeout_s = 60.5;\n"
    "inject = {\n"
    "  slow_ranks = [1, 3];\n"
    "  delay_ms = 50.0;\n"
    "  delay_dist = \"lognormal\";\n"
    "  random_slow = 0.1;\n"
    "  fail_rank = 2;\n"
    "  fail_step = 1000;\n"
    "};\n"
    "model = { arch = \"resnet18\"; width = 16; stem = \"cifar\"; };\n"
    "data = {\n"
    "  format = \"idx\";\n"
    "  train_images = \"a/ti.gz\"; train_labels = \"a/tl.gz\";\n"
    "  val_images = \"a/vi.gz\"; val_labels = \"a/vl.gz\";\n"
    "};\n"
    "eval = { every = 1000; batch = 100; };\n"
    "log_every = 10;\n"
    "threads = 3;\n"
    "output = \"out/full.h5\";\n"
    "overwrite = true;\n"
    "device = \"cpu\";\n";

START_TEST(test_full_file) {
    ck_assert_msg(load_text(full_file, NULL, 0) == 0, "%s", err);
    ck_assert_str_eq(e.name, "full-run");
    ck_assert_uint_eq(e.seed, 42);
    ck_assert_int_eq(e.p, 4);
    ck_assert_int_eq(e.b, 64);
    ck_assert_int_eq(e.iterations, 90000);
    ck_assert_close(e.alpha.base, 0.2, 0);
    ck_assert_int_eq(e.alpha.schedule, SCHED_STEP);
    ck_assert_int_eq(e.alpha.n_steps, 3);
    ck_assert_int_eq(e.alpha.steps[0], 30000);
    ck_assert_int_eq(e.alpha.steps[1], 60000);
    ck_assert_int_eq(e.alpha.steps[2], 80000);
    ck_assert_close(e.alpha.factor, 0.5, 0);
    ck_assert_int_eq(e.alpha.warmup, 500);
    ck_assert_close(e.momentum, 0.8, 0);
    ck_assert_int_eq(e.nesterov, 0);
    ck_assert_close(e.weight_decay, 5e-4, 0);
    ck_assert_int_eq(e.tau, 4);
    ck_assert_close(e.beta, 0.9, 0);
    ck_assert_int_eq(e.servers, 2);
    ck_assert_int_eq(e.backups, 1);
    ck_assert_int_eq(e.synchronous, 1);
    ck_assert_int_eq(e.gossip_order, GOSSIP_FRESH);
    ck_assert_close(e.comm_timeout_s, 60.5, 0);
    ck_assert_int_eq(e.inject.n_slow_ranks, 2);
    ck_assert_int_eq(e.inject.slow_ranks[0], 1);
    ck_assert_int_eq(e.inject.slow_ranks[1], 3);
    ck_assert_close(e.inject.delay_ms, 50.0, 0);
    ck_assert_int_eq(e.inject.delay_dist, DELAY_LOGNORMAL);
    ck_assert_close(e.inject.random_slow, 0.1, 0);
    ck_assert_int_eq(e.inject.fail_rank, 2);
    ck_assert_int_eq(e.inject.fail_step, 1000);
    ck_assert_int_eq(e.model.arch, ARCH_RESNET18);
    ck_assert_int_eq(e.model.width, 16);
    ck_assert_int_eq(e.model.stem, STEM_CIFAR);
    ck_assert_str_eq(e.data.train_images, "a/ti.gz");
    ck_assert_str_eq(e.data.train_labels, "a/tl.gz");
    ck_assert_str_eq(e.data.val_images, "a/vi.gz");
    ck_assert_str_eq(e.data.val_labels, "a/vl.gz");
    ck_assert_int_eq(e.eval.every, 1000);
    ck_assert_int_eq(e.eval.batch, 100);
    ck_assert_int_eq(e.log_every, 10);
    ck_assert_int_eq(e.threads, 3);
    ck_assert_str_eq(e.output, "out/full.h5");
    ck_assert_int_eq(e.overwrite, 1);
    ck_assert_str_eq(device_name(e.device), "cpu");
}
END_TEST

START_TEST(test_int_accepted_for_float) {
    ck_assert_msg(load_text("alpha = { base = 1; factor = 1; };\nmomentum = 0;\nweight_decay = 0;\n", NULL, 0) == 0, "%s", err);
    ck_assert_close(e.alpha.base, 1.0, 0);
    ck_assert_close(e.alpha.factor, 1.0, 0);
    ck_assert_close(e.momentum, 0.0, 0);
    ck_assert_close(e.weight_decay, 0.0, 0);
    /* 64-bit integers with the L suffix, and lists as well as arrays */
    ck_assert_msg(load_text("iterations = 5000000000L;\nseed = 12345678901L;\nalpha = { steps = (100, 4000000000L); };\n", NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.iterations, 5000000000L);
    ck_assert_uint_eq(e.seed, 12345678901ULL);
    ck_assert_int_eq(e.alpha.steps[1], 4000000000L);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* File-level errors */

START_TEST(test_missing_file) {
    char p[600], msg[ERRLEN];
    snprintf(p, sizeof p, "%s/no-such.cfg", tmpdir);
    ck_assert_int_eq(config_load(&e, p, NULL, 0, msg, sizeof msg), EXIT_BADINPUT);
    ck_assert_msg(strstr(msg, p) && strstr(msg, "No such file"), "%s", msg);
    ck_assert_int_eq(config_load(&e, tmpdir, NULL, 0, msg, sizeof msg), EXIT_BADINPUT);
    ck_assert_msg(strstr(msg, tmpdir) && strstr(msg, "directory"), "%s", msg);
    ck_assert_int_eq(config_load(&e, NULL, NULL, 0, msg, sizeof msg), EXIT_BADINPUT);
}
END_TEST

START_TEST(test_path_too_long) {
    char p[CFG_PATH_MAX + 100];
    memset(p, 'a', sizeof p - 1);
    p[sizeof p - 1] = 0;
    ck_assert_int_eq(config_load(&e, p, NULL, 0, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "longer than 1023"), "%s", err);
}
END_TEST

START_TEST(test_syntax_error) {
    EXPECT_ERROR("b = 32;\nalpha = { base = 0.1 \n  factor = ; };\n", ":3:", "syntax error");
    EXPECT_ERROR("b = 1;\nb = 2;\n", ":2:", "duplicate setting name");
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Unknown keys */

START_TEST(test_unknown_key_suggests) {
    EXPECT_ERROR("b = 32;\nmomentm = 0.9;\n", ":2: unknown key 'momentm'; did you mean 'momentum'?");
    EXPECT_ERROR("b = 32;\nalpha = {\n  bse = 0.1;\n};\n", ":3: unknown key 'alpha.bse'; did you mean 'alpha.base'?");
    EXPECT_ERROR("alph = { base = 0.1; };\n", ":1: unknown key 'alph'; did you mean 'alpha'?");
    EXPECT_ERROR("model = { wdth = 8; };\n", ":1: unknown key 'model.wdth'; did you mean 'model.width'?");
    /* the right name in the wrong place, and other frameworks' names */
    EXPECT_ERROR("\nbase = 0.1;\n", ":2: unknown key 'base'; did you mean 'alpha.base'?");
    EXPECT_ERROR("lr = 0.1;\n", ":1: unknown key 'lr'; did you mean 'alpha.base'?");
    EXPECT_ERROR("data = { x = { y = 1; }; };\n", ":1: unknown key 'data.x'");
    /* nothing close: no suggestion */
    EXPECT_ERROR("zzzzzzzz = 1;\n", ":1: unknown key 'zzzzzzzz'");
    ck_assert_ptr_null(strstr(err, "did you mean"));
    EXPECT_ERROR("x = 1;\n", ":1: unknown key 'x'"); /* not "did you mean 'p'" */
    ck_assert_ptr_null(strstr(err, "did you mean"));
    EXPECT_ERROR("pp = 1;\n", "did you mean 'p'?");
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Wrong types */

START_TEST(test_wrong_types) {
    EXPECT_ERROR("\nb = \"32\";\n", ":2: key 'b': expected an integer, got a string \"32\"");
    EXPECT_ERROR("b = 32.0;\n", ":1: key 'b': expected an integer, got a float 32.0");
    EXPECT_ERROR("alpha = { base = \"0.1\"; };\n", ":1: key 'alpha.base': expected a number, got a string");
    EXPECT_ERROR("b = { x = 1; };\n", ":1: key 'b': expected an integer, got a group");
    EXPECT_ERROR("\n\nalpha = 0.1;\n", ":3: key 'alpha': expected a group", "got a float 0.1");
    EXPECT_ERROR("nesterov = 1;\n", ":1: key 'nesterov': expected a boolean (true or false), got an integer 1");
    EXPECT_ERROR("name = 5;\n", ":1: key 'name': expected a string, got an integer 5");
    EXPECT_ERROR("alpha = { steps = 100; };\n", ":1: key 'alpha.steps': expected a list of integers", "got an integer 100");
    EXPECT_ERROR("alpha = { steps = (100, 2.5); };\n", ":1: key 'alpha.steps': expected integers, got a float 2.5 at index 1");
    EXPECT_ERROR("method = 1;\n", ":1: key 'method': expected one of \"allreduce\"");
    EXPECT_ERROR("iterations = [10];\n", ":1: key 'iterations': expected an integer, got an array");
}
END_TEST

START_TEST(test_int_wraparound_guard) {
    /* libconfig 1.5 reads 3000000000 as -1294967296 without complaint */
    EXPECT_ERROR("b = 8;\niterations = 3000000000;\n", ":2:", "3000000000", "32 bits", "3000000000L");
    EXPECT_ERROR("# 3000000000 in a comment is fine\nname = \"3000000000\";\nseed = -3000000000;\n", ":3:", "-3000000000");
    EXPECT_ERROR("seed = 99999999999999999999L;\n", ":1:", "64 bits");
    EXPECT_ERROR("threads = 0x80000000;\n", ":1:", "32 bits");
    /* an int field cannot hold a 64-bit value */
    EXPECT_ERROR("b = 3000000000L;\n", ":1: key 'b': expected an integer >= 1, got 3000000000");
}
END_TEST

START_TEST(test_string_too_long) {
    size_t n = CFG_PATH_MAX + 200;
    char *text = malloc(n + 64);
    int w = snprintf(text, n + 64, "data = {\n  train_images = \"");
    memset(text + w, 'x', CFG_PATH_MAX + 10);
    snprintf(text + w + CFG_PATH_MAX + 10, 64, "\";\n};\n");
    EXPECT_ERROR(text, ":2: key 'data.train_images': expected a string of at most 1023 characters, got one of 1034");
    free(text);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Out of range */

START_TEST(test_out_of_range) {
    EXPECT_ERROR("\nb = 0;\n", ":2: key 'b': expected an integer >= 1, got 0");
    EXPECT_ERROR("p = -2;\n", ":1: key 'p': expected an integer >= 1, got -2");
    EXPECT_ERROR("b = 8;\nalpha = {\n  base = -0.1;\n};\n", ":3: key 'alpha.base': expected a number > 0, got -0.1");
    EXPECT_ERROR("alpha = { base = 0; };\n", "key 'alpha.base': expected a number > 0, got 0.0");
    EXPECT_ERROR("momentum = 1.0;\n", ":1: key 'momentum': expected a number in [0, 1), got 1.0");
    EXPECT_ERROR("momentum = -0.5;\n", ":1: key 'momentum': expected a number in [0, 1), got -0.5");
    EXPECT_ERROR("weight_decay = -1e-4;\n", "key 'weight_decay': expected a number >= 0, got -0.0001");
    EXPECT_ERROR("alpha = { factor = -0.5; };\n", "key 'alpha.factor': expected a number in [0, 1], got -0.5");
    EXPECT_ERROR("alpha = { factor = 1.5; };\n", "key 'alpha.factor': expected a number in [0, 1], got 1.5");
    EXPECT_ERROR("beta = 0;\n", "key 'beta': expected a number in (0, 1], got 0");
    EXPECT_ERROR("tau = 0;\n", "key 'tau': expected an integer >= 1, got 0");
    EXPECT_ERROR("model = { width = 0; };\n", ":1: key 'model.width': expected an integer in [1, 1024], got 0");
    EXPECT_ERROR("model = { width = 2048; };\n", "key 'model.width': expected an integer in [1, 1024], got 2048");
    EXPECT_ERROR("seed = -1;\n", "key 'seed': expected an integer >= 0, got -1");
    EXPECT_ERROR("threads = -1;\n", "key 'threads': expected an integer in [0, 1024], got -1");
    EXPECT_ERROR("threads = 100000;\n", "key 'threads': expected an integer in [0, 1024], got 100000");
    EXPECT_ERROR("eval = { every = 0; };\n", "key 'eval.every': expected an integer >= 1, got 0");
    EXPECT_ERROR("eval = { batch = 0; };\n", "key 'eval.batch': expected an integer >= 1, got 0");
    EXPECT_ERROR("log_every = 0;\n", "key 'log_every': expected an integer >= 1, got 0");
    EXPECT_ERROR("iterations = 0;\n", "key 'iterations': expected an integer >= 1, got 0");
    EXPECT_ERROR("name = \"\";\n", "key 'name': expected a non-empty string", "got \"\"");
    EXPECT_ERROR("name = \"a b\";\n", "key 'name'", "got \"a b\"");
    EXPECT_ERROR("data = { val_labels = \"\"; };\n", "key 'data.val_labels': expected a non-empty string");
}
END_TEST

START_TEST(test_steps_and_cross_keys) {
    EXPECT_ERROR("iterations = 1000;\nalpha = {\n  steps = [100, 300, 200];\n};\n",
                 ":3: key 'alpha.steps': expected strictly increasing iterations, got alpha.steps[2] = 200 after alpha.steps[1] = 300");
    EXPECT_ERROR("alpha = { steps = [100, 100]; };\n", "alpha.steps[1] = 100 repeating alpha.steps[0] = 100");
    EXPECT_ERROR("iterations = 1000;\nalpha = { steps = [100, 5000]; };\n",
                 ":2: key 'alpha.steps': expected each step in [1, iterations (1000)), got alpha.steps[1] = 5000");
    EXPECT_ERROR("alpha = { steps = [0]; };\n", "got alpha.steps[0] = 0");
    EXPECT_ERROR("iterations = 100;\nalpha = { warmup = 100; };\n",
                 ":2: key 'alpha.warmup': expected an integer >= 0 and < iterations (100), got 100");
    EXPECT_ERROR("alpha = { warmup = -1; };\n", "key 'alpha.warmup'", "got -1");
    /* the limits themselves are fine */
    ck_assert_msg(load_text("iterations = 100;\nalpha = { steps = [1, 99]; warmup = 99; };\n", NULL, 0) == 0, "%s", err);
    /* a step at the last iteration would never take effect */
    EXPECT_ERROR("iterations = 100;\nalpha = { steps = [1, 100]; };\n", "got alpha.steps[1] = 100", "never take effect");
    /* too many steps */
    char text[1024];
    int w = snprintf(text, sizeof text, "iterations = 1000;\nalpha = { steps = [");
    for (int i = 0; i <= CFG_MAX_STEPS; i++) w += snprintf(text + w, sizeof text - w, "%s%d", i ? ", " : "", i + 1);
    snprintf(text + w, sizeof text - w, "]; };\n");
    EXPECT_ERROR(text, ":2: key 'alpha.steps': expected at most 32 steps, got 33");
}
END_TEST

START_TEST(test_method_keys_ranges) {
    EXPECT_ERROR("\nservers = 0;\n", ":2: key 'servers': expected an integer in [1, 64], got 0");
    EXPECT_ERROR("servers = 65;\n", ":1: key 'servers': expected an integer in [1, 64], got 65");
    EXPECT_ERROR("p = 4;\nbackups = 4;\n", ":2: key 'backups': expected an integer >= 0 and < p (4), got 4");
    EXPECT_ERROR("backups = -1;\n", ":1: key 'backups': expected an integer >= 0 and < p (1), got -1");
    EXPECT_ERROR("b = 8;\ncomm_timeout_s = 0;\n", ":2: key 'comm_timeout_s': expected a number > 0, got 0");
    EXPECT_ERROR("comm_timeout_s = -1.5;\n", ":1: key 'comm_timeout_s': expected a number > 0, got -1.5");
    EXPECT_ERROR("synchronous = 1;\n", ":1: key 'synchronous': expected a boolean (true or false), got an integer 1");
    /* a cross-key error found after an override points at the key that breaks, in the file */
    EXPECT_SET_ERROR("b = 8;\nbackups = 3;\n", "p=3", ":2: key 'backups'", "< p (3), got 3");
    ck_assert_msg(strstr(err, path), "%s", err);
    /* the limits are fine */
    ck_assert_msg(load_text("p = 4;\nbackups = 3;\nservers = 64;\ncomm_timeout_s = 1e-3;\n", NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.servers, 64);
}
END_TEST

START_TEST(test_inject_ranges) {
    EXPECT_ERROR("p = 4;\ninject = {\n  fail_rank = 4;\n};\n", ":3: key 'inject.fail_rank': expected an integer >= -1 and < p (4), got 4");
    EXPECT_ERROR("inject = { fail_rank = -2; };\n", ":1: key 'inject.fail_rank'", "got -2");
    EXPECT_ERROR("iterations = 100;\ninject = { fail_rank = 0; fail_step = 100; };\n",
                 ":2: key 'inject.fail_step': expected an integer >= 0 and < iterations (100), got 100");
    EXPECT_ERROR("inject = { fail_step = -1; };\n", ":1: key 'inject.fail_step'", "got -1");
    EXPECT_ERROR("inject = { random_slow = 1.5; };\n", ":1: key 'inject.random_slow': expected a number in [0, 1], got 1.5");
    EXPECT_ERROR("inject = { random_slow = -0.1; };\n", ":1: key 'inject.random_slow': expected a number in [0, 1], got -0.1");
    EXPECT_ERROR("b = 8;\ninject = { delay_ms = -1; };\n", ":2: key 'inject.delay_ms': expected a number in [0, 3600000], got -1");
    EXPECT_ERROR("b = 8;\ninject = { delay_ms = 1e300; };\n", ":2: key 'inject.delay_ms': expected a number in [0, 3600000], got 1e+300");
    EXPECT_ERROR("inject = 5;\n", ":1: key 'inject': expected a group");
    EXPECT_ERROR("inject = { slow_rank = [1]; };\n", ":1: unknown key 'inject.slow_rank'; did you mean 'inject.slow_ranks'?");
    /* slow_ranks: each a worker rank, strictly increasing, at most CFG_MAX_SLOW */
    EXPECT_ERROR("p = 4;\ninject = {\n  slow_ranks = [1, 7];\n};\n",
                 ":3: key 'inject.slow_ranks': expected each worker rank in [0, p (4)), got inject.slow_ranks[1] = 7");
    EXPECT_ERROR("p = 4;\ninject = { slow_ranks = [4]; };\n", "got inject.slow_ranks[0] = 4 (workers are numbered 0 to p-1)");
    EXPECT_ERROR("p = 4;\ninject = { slow_ranks = [-1]; };\n", "expected each worker rank in [0, p (4)), got inject.slow_ranks[0] = -1");
    EXPECT_ERROR("p = 4;\ninject = { slow_ranks = [2, 1]; };\n",
                 ":2: key 'inject.slow_ranks': expected strictly increasing worker ranks, got inject.slow_ranks[1] = 1 after inject.slow_ranks[0] = 2");
    EXPECT_ERROR("p = 4;\ninject = { slow_ranks = [2, 2]; };\n", "inject.slow_ranks[1] = 2 repeating inject.slow_ranks[0] = 2");
    EXPECT_ERROR("inject = { slow_ranks = [5000000000L]; };\n", ":1: key 'inject.slow_ranks'", "got inject.slow_ranks[0] = 5000000000");
    EXPECT_ERROR("inject = { slow_ranks = (0, 1.0); };\n", ":1: key 'inject.slow_ranks': expected integers, got a float 1.0 at index 1");
    EXPECT_ERROR("inject = { slow_ranks = 1; };\n", ":1: key 'inject.slow_ranks': expected a list of integers such as [1, 3], got an integer 1");
    static char text[4096];
    int w = snprintf(text, sizeof text, "p = 1000;\ninject = { slow_ranks = [");
    for (int i = 0; i <= CFG_MAX_SLOW; i++) w += snprintf(text + w, sizeof text - w, "%s%d", i ? ", " : "", i);
    snprintf(text + w, sizeof text - w, "]; };\n");
    EXPECT_ERROR(text, ":2: key 'inject.slow_ranks': expected at most 256 worker ranks, got 257");
    /* the limits are fine; delays of 0 ms with slow workers are allowed (nothing is delayed) */
    w = snprintf(text, sizeof text, "p = 1000;\niterations = 50;\ninject = { fail_rank = 999; fail_step = 49; random_slow = 1.0; slow_ranks = [");
    for (int i = 0; i < CFG_MAX_SLOW; i++) w += snprintf(text + w, sizeof text - w, "%s%d", i ? ", " : "", 3 * i + 1);
    snprintf(text + w, sizeof text - w, "]; };\n");
    ck_assert_msg(load_text(text, NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.inject.n_slow_ranks, CFG_MAX_SLOW);
    ck_assert_int_eq(e.inject.slow_ranks[CFG_MAX_SLOW - 1], 3 * (CFG_MAX_SLOW - 1) + 1);
    ck_assert_int_eq(e.inject.fail_rank, 999);
    ck_assert_int_eq(e.inject.fail_step, 49);
    ck_assert_close(e.inject.delay_ms, 0.0, 0);
    ck_assert_close(e.inject.random_slow, 1.0, 0);
    ck_assert_msg(load_text("p = 2;\ninject = { slow_ranks = [0, 1]; random_slow = 0.5; delay_ms = 0; };\n", NULL, 0) == 0, "%s", err);
}
END_TEST

START_TEST(test_inject_set) {
    char *sets[] = {"inject.slow_ranks=[1,2]", "inject.delay_ms=12.5", "inject.delay_dist=exponential", "p=3"};
    ck_assert_msg(load_text("inject = { slow_ranks = [0]; random_slow = 0.25; };\n", sets, 4) == 0, "%s", err);
    ck_assert_int_eq(e.inject.n_slow_ranks, 2);
    ck_assert_int_eq(e.inject.slow_ranks[0], 1);
    ck_assert_int_eq(e.inject.slow_ranks[1], 2);
    ck_assert_close(e.inject.delay_ms, 12.5, 0);
    ck_assert_int_eq(e.inject.delay_dist, DELAY_EXPONENTIAL);
    ck_assert_close(e.inject.random_slow, 0.25, 0); /* the file's, untouched by the group's other keys */
    ck_assert_str_eq(config_where("inject.slow_ranks"), "--set inject.slow_ranks=[1,2]");
    ck_assert_msg(strstr(config_where("inject.random_slow"), ":1"), "%s", config_where("inject.random_slow"));
    /* a whole group, an empty list, and the remaining method keys */
    char *sets2[] = {"inject={slow_ranks=(); fail_rank=0; fail_step=5;}", "servers=3", "synchronous=true",
                     "gossip_order=fresh", "comm_timeout_s=2", "method=ps", "backups=0", "p=2"};
    ck_assert_msg(load_text("inject = { slow_ranks = [0]; };\n", sets2, 8) == 0, "%s", err);
    ck_assert_int_eq(e.inject.n_slow_ranks, 0);
    ck_assert_int_eq(e.inject.slow_ranks[0], 0);
    ck_assert_int_eq(e.inject.fail_rank, 0);
    ck_assert_int_eq(e.inject.fail_step, 5);
    ck_assert_int_eq(e.servers, 3);
    ck_assert_int_eq(e.synchronous, 1);
    ck_assert_int_eq(e.gossip_order, GOSSIP_FRESH);
    ck_assert_close(e.comm_timeout_s, 2.0, 0);
    ck_assert_int_eq(e.method, METHOD_PS);
    /* errors name the override */
    EXPECT_SET_ERROR("p = 2;\n", "inject.slow_ranks=[1,2]",
                     "--set inject.slow_ranks=[1,2]: key 'inject.slow_ranks': expected each worker rank in [0, p (2)), got inject.slow_ranks[1] = 2");
    EXPECT_SET_ERROR("", "inject.delay_dist=gamma",
                     "--set inject.delay_dist=gamma: key 'inject.delay_dist': expected one of \"fixed\", \"exponential\", \"lognormal\", got a string \"gamma\"");
    EXPECT_SET_ERROR("", "inject.slow_ranks=[1,", "--set inject.slow_ranks=[1,: key 'inject.slow_ranks': cannot read",
                     "expected a strictly increasing list of integers, each >= 0 and < p");
    EXPECT_SET_ERROR("", "slow_ranks=[0]", "unknown key 'slow_ranks'; did you mean 'inject.slow_ranks'?");
    EXPECT_SET_ERROR("", "injct.delay_ms=1", "unknown key 'injct.delay_ms'; did you mean 'inject.delay_ms'?");
    EXPECT_SET_ERROR("", "num_servers=2", "unknown key 'num_servers'; did you mean 'servers'?");
    EXPECT_SET_ERROR("", "backup_workers=1", "unknown key 'backup_workers'; did you mean 'backups'?");
}
END_TEST

START_TEST(test_fail_needs_two_workers) {
    /* a failed worker needs another one to go on: p = 1 with fail_rank = 0 is refused */
    EXPECT_ERROR("p = 1;\ninject = { fail_rank = 0; };\n", ":2: key 'inject.fail_rank': a failure needs p >= 2 workers");
    ck_assert_msg(load_text("p = 2;\ninject = { fail_rank = 0; };\n", NULL, 0) == 0, "%s", err);
}
END_TEST

START_TEST(test_enums_and_unbuilt) {
    /* every method of both papers loads */
    const char *all[] = {"allreduce", "ps", "easgd", "gossip_pull", "gossip_push", "backup"};
    for (int i = 0; i < 6; i++) {
        char text[64];
        snprintf(text, sizeof text, "method = \"%s\";\n", all[i]);
        ck_assert_msg(load_text(text, NULL, 0) == 0, "%s: %s", all[i], err);
        ck_assert_int_eq((int)e.method, i);
    }
    ck_assert_msg(load_text("method = \"easgd\";\nsynchronous = true;\n", NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.method, METHOD_EASGD);
    ck_assert_msg(load_text("method = \"backup\";\np = 4;\nbackups = 3;\n", NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.method, METHOD_BACKUP);
    ck_assert_int_eq(e.backups, 3);
    EXPECT_ERROR("gossip_order = \"sideways\";\n", ":1: key 'gossip_order': expected one of \"stale\", \"fresh\", got a string \"sideways\"");
    EXPECT_ERROR("b = 8;\ninject = { delay_dist = \"gamma\"; };\n",
                 ":2: key 'inject.delay_dist': expected one of \"fixed\", \"exponential\", \"lognormal\", got a string \"gamma\"");
    ck_assert_msg(load_text("inject = { delay_dist = \"exponential\"; };\ngossip_order = \"fresh\";\n", NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.inject.delay_dist, DELAY_EXPONENTIAL);
    ck_assert_int_eq(e.gossip_order, GOSSIP_FRESH);
    EXPECT_ERROR("method = \"sgd\";\n", ":1: key 'method': expected one of \"allreduce\", \"ps\", \"easgd\", \"gossip_pull\", \"gossip_push\", \"backup\", got a string \"sgd\"");
    ck_assert_msg(load_text("device = \"cuda\";\nprecision = \"tf32\";\n", NULL, 0) == 0, "%s", err);
    ck_assert_str_eq(device_name(e.device), "cuda");
    ck_assert_str_eq(precision_name(e.precision), "tf32");
    EXPECT_ERROR("precision = \"tf32\";\n", ":1: key 'precision': \"tf32\" is for device = \"cuda\" (tensor cores); device = \"cpu\" computes in \"fp32\" or \"bf16\"");
    ck_assert_msg(load_text("device = \"cuda\";\nprecision = \"bf16\";\n", NULL, 0) == 0, "%s", err);
    ck_assert_str_eq(precision_name(e.precision), "bf16");
    /* bf16 on the CPU: ResNet-18 only (the CPU's bf16 support is checked at start, model_create). */
    ck_assert_msg(load_text("precision = \"bf16\";\n", NULL, 0) == 0, "%s", err);
    ck_assert_str_eq(precision_name(e.precision), "bf16");
    EXPECT_ERROR("model = { arch = \"linear\"; };\nprecision = \"bf16\";\n",
                 ":2: key 'precision': \"bf16\" on device = \"cpu\" is for model.arch = \"resnet18\" (its convolutions); "
                 "model.arch = \"linear\" computes in \"fp32\"");
    EXPECT_ERROR("precision = \"fp16\";\n", ":1: key 'precision': expected one of \"fp32\", \"tf32\", \"bf16\", got a string \"fp16\"");
    EXPECT_ERROR("device = \"tpu\";\n", ":1: key 'device': expected one of \"cpu\", \"cuda\", got a string \"tpu\"");
    EXPECT_ERROR("model = { arch = \"resnet50\"; };\n", "key 'model.arch': expected one of \"resnet18\", \"linear\"");
    EXPECT_ERROR("model = { stem = \"mnist\"; };\n", "key 'model.stem': expected one of \"cifar\", \"imagenet\"");
    EXPECT_ERROR("alpha = { schedule = \"linear\"; };\n", "key 'alpha.schedule': expected one of \"step\", \"constant\", \"cosine\"");
    EXPECT_ERROR("data = { format = \"csv\"; };\n", "key 'data.format': expected one of \"idx\"");
    ck_assert_int_eq(load_text("alpha = { schedule = \"cosine\"; };\nmodel = { stem = \"cifar\"; };\n", NULL, 0), 0);
    ck_assert_int_eq(e.alpha.schedule, SCHED_COSINE);
    ck_assert_int_eq(e.model.stem, STEM_CIFAR);
    ck_assert_int_eq(load_text("model = { arch = \"linear\"; };\n", NULL, 0), 0);
    ck_assert_int_eq(e.model.arch, ARCH_LINEAR);
    ck_assert_str_eq(arch_name(ARCH_LINEAR), "linear");
    ck_assert_str_eq(method_name(METHOD_GOSSIP_PUSH), "gossip_push");
    ck_assert_str_eq(schedule_name(SCHED_CONSTANT), "constant");
    ck_assert_str_eq(stem_name(STEM_IMAGENET), "imagenet");
    ck_assert_str_eq(gossip_order_name(GOSSIP_STALE), "stale");
    ck_assert_str_eq(gossip_order_name(GOSSIP_FRESH), "fresh");
    ck_assert_str_eq(delay_dist_name(DELAY_FIXED), "fixed");
    ck_assert_str_eq(delay_dist_name(DELAY_EXPONENTIAL), "exponential");
    ck_assert_str_eq(delay_dist_name(DELAY_LOGNORMAL), "lognormal");
    ck_assert_str_eq(delay_dist_name((delay_dist_kind)7), "?");
    ck_assert_int_eq(method_has_servers(METHOD_PS), 1);
    ck_assert_int_eq(method_has_servers(METHOD_EASGD), 1);
    ck_assert_int_eq(method_has_servers(METHOD_BACKUP), 1);
    ck_assert_int_eq(method_has_servers(METHOD_ALLREDUCE), 0);
    ck_assert_int_eq(method_has_servers(METHOD_GOSSIP_PULL), 0);
    ck_assert_int_eq(method_has_servers(METHOD_GOSSIP_PUSH), 0);
}
END_TEST

START_TEST(test_include) {
    char text[700];
    const char *inc = write_file("inc.cfg", "b = 64;\n");
    snprintf(text, sizeof text, "@include \"%s\"\np = 2;\n", inc);
    ck_assert_msg(load_text(text, NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.b, 64);
    ck_assert_int_eq(e.p, 2);
    inc = write_file("inc2.cfg", "\nb = 0;\n");
    snprintf(text, sizeof text, "@include \"%s\"\n", inc);
    expect_error(text, NULL, 0, (const char *const[]){inc, ":2: key 'b': expected an integer >= 1, got 0", NULL}, 0);
    inc = write_file("inc3.cfg", "\niterations = 4000000000;\n");
    snprintf(text, sizeof text, "@include \"%s\"\n", inc);
    expect_error(text, NULL, 0, (const char *const[]){inc, ":2: integer 4000000000 does not fit in 32 bits", NULL}, 0);
    EXPECT_ERROR("b = 2;\n@include \"/nonexistent/x.cfg\"\n", ":2: @include: cannot open", "/nonexistent/x.cfg", "No such file");
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* --set overrides */

START_TEST(test_set_overrides) {
    char *sets[] = {"alpha.base=0.05", "output=runs/x.h5", "method=allreduce", "overwrite=true",
                    "model.stem=cifar", "alpha.steps=[10, 20]", "seed=7", " momentum = 0.5 ", "eval={every=5;}"};
    ck_assert_msg(load_text("method = \"gossip_pull\";\nb = 0;\n", sets, 9) == EXIT_BADINPUT, "file b = 0 must still fail");
    ck_assert_msg(strstr(err, ":2: key 'b'"), "%s", err);
    ck_assert_msg(load_text("method = \"gossip_pull\";\nalpha = { base = 0.3; };\n", sets, 9) == 0, "%s", err);
    ck_assert_close(e.alpha.base, 0.05, 0);
    ck_assert_str_eq(e.output, "runs/x.h5");
    ck_assert_int_eq(e.method, METHOD_ALLREDUCE); /* the override repairs the file's unbuilt method */
    ck_assert_int_eq(e.overwrite, 1);
    ck_assert_int_eq(e.model.stem, STEM_CIFAR);
    ck_assert_int_eq(e.alpha.n_steps, 2);
    ck_assert_int_eq(e.alpha.steps[1], 20);
    ck_assert_uint_eq(e.seed, 7);
    ck_assert_close(e.momentum, 0.5, 0);
    ck_assert_int_eq(e.eval.every, 5);

    /* a quoted string, an override repairing a bad file value, later overrides win */
    char *sets2[] = {"output=\"runs/y z.h5\"", "b=8", "b=16", "name=\"q\\\"x\"", "name=run2"};
    ck_assert_msg(load_text("b = 0;\n", sets2, 5) == 0, "%s", err);
    ck_assert_str_eq(e.output, "runs/y z.h5");
    ck_assert_int_eq(e.b, 16);
    ck_assert_str_eq(e.name, "run2");
    /* a bare word that looks like a number is still a string for a string key */
    char *sets3[] = {"name=2024"};
    ck_assert_msg(load_text("", sets3, 1) == 0, "%s", err);
    ck_assert_str_eq(e.name, "2024");
    ck_assert_str_eq(e.output, "runs/2024.h5");
}
END_TEST

/* comm: NCCL needs the GPU backend's device and the method that all-reduces its gradients. */
/* The keys of checkpoints and time limits (docs/checkpoint.md): stop_at (Unix seconds, 0 =
 * none; 64-bit), checkpoint.keep >= 1 (default 2), checkpoint.keep_completed (default false). */
START_TEST(test_checkpoint_keys) {
    ck_assert_msg(load_text("", NULL, 0) == 0, "%s", err);
    ck_assert_int_eq(e.stop_at, 0);
    ck_assert_int_eq(e.checkpoint.keep, 2);
    ck_assert_int_eq(e.checkpoint.keep_completed, 0);
    char *sets[] = {"stop_at=4102444800L", "checkpoint.keep=1", "checkpoint.keep_completed=true"};
    ck_assert_msg(load_text("", sets, 3) == 0, "%s", err);
    ck_assert(e.stop_at == 4102444800L); /* 2100-01-01: past 32 bits */
    ck_assert_int_eq(e.checkpoint.keep, 1);
    ck_assert_int_eq(e.checkpoint.keep_completed, 1);
    static char buf[CFG_TEXT_MAX];
    config_to_text(&e, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "stop_at = 4102444800L;") && strstr(buf, "keep = 1;") && strstr(buf, "keep_completed = true;"), "%s", buf);
    EXPECT_ERROR("stop_at = -1;\n", ":1: key 'stop_at': expected an integer >= 0, got -1");
    EXPECT_ERROR("checkpoint = { keep = 0; };\n", ":1: key 'checkpoint.keep': expected an integer in [1, 1000], got 0");
    EXPECT_SET_ERROR("", "checkpoint.keep_completed=2", "key 'checkpoint.keep_completed'");
}
END_TEST

START_TEST(test_comm_key) {
    config_defaults(&e);
    ck_assert_str_eq(comm_name(e.comm), "mpi");
    ck_assert_msg(load_text("device = \"cuda\";\ncomm = \"nccl\";\n", NULL, 0) == 0, "%s", err);
    ck_assert_str_eq(comm_name(e.comm), "nccl");
    static char buf[CFG_TEXT_MAX];
    config_to_text(&e, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "comm = \"nccl\";"), "%s", buf);
    ck_assert_msg(load_text("method = \"ps\";\ncomm = \"mpi\";\n", NULL, 0) == 0, "%s", err);
    EXPECT_ERROR("comm = \"nccl\";\n",
                 ":1: key 'comm': \"nccl\" is for device = \"cuda\" (NCCL all-reduces GPU memory); device = \"cpu\" uses comm = \"mpi\"");
    EXPECT_ERROR("device = \"cuda\";\nmethod = \"gossip_pull\";\ncomm = \"nccl\";\n",
                 ":3: key 'comm': \"nccl\" is for method = \"allreduce\"; method 'gossip_pull' exchanges point to point through MPI");
    EXPECT_ERROR("comm = \"gloo\";\n", ":1: key 'comm': expected one of \"mpi\", \"nccl\", got a string \"gloo\"");
    EXPECT_ERROR("comm = 1;\n", ":1: key 'comm'");
    EXPECT_SET_ERROR("", "comm=nccl", "--set comm=nccl: key 'comm': \"nccl\" is for device = \"cuda\"");
    EXPECT_SET_ERROR("device = \"cuda\";\nmethod = \"backup\";\np = 2;\n", "comm=nccl",
                     "--set comm=nccl: key 'comm': \"nccl\" is for method = \"allreduce\"; method 'backup'");
    EXPECT_SET_ERROR("device = \"cuda\";\ncomm = \"nccl\";\n", "method=easgd", ":2: key 'comm'", "method 'easgd'");
}
END_TEST

START_TEST(test_set_errors) {
    EXPECT_SET_ERROR("", "alpha.bse=0.05", "--set alpha.bse=0.05: unknown key 'alpha.bse'; did you mean 'alpha.base'?");
    EXPECT_SET_ERROR("", "b=abc", "--set b=abc: key 'b': cannot read 'abc' as a libconfig value", "expected an integer >= 1");
    EXPECT_SET_ERROR("", "b=1.5", "--set b=1.5: key 'b': expected an integer, got a float 1.5");
    EXPECT_SET_ERROR("", "b=0", "--set b=0: key 'b': expected an integer >= 1, got 0");
    EXPECT_SET_ERROR("", "alpha.base=-1", "--set alpha.base=-1: key 'alpha.base': expected a number > 0, got -1");
    EXPECT_SET_ERROR("", "b", "--set b: expected KEY=VALUE");
    EXPECT_SET_ERROR("", "=3", "--set =3: empty KEY");
    EXPECT_SET_ERROR("", "b=1; p=2", "--set b=1; p=2: key 'b': cannot read '1; p=2'");
    EXPECT_SET_ERROR("", "precision=tf32", "--set precision=tf32: key 'precision': \"tf32\" is for device = \"cuda\"");
    EXPECT_SET_ERROR("", "method=foo", "--set method=foo: key 'method': expected one of", "got a string \"foo\"");
    EXPECT_SET_ERROR("", "alpha=0.1", "--set alpha=0.1: key 'alpha': expected a group");
    EXPECT_SET_ERROR("", "alpha={bse=1;}", "--set alpha={bse=1;}: unknown key 'alpha.bse'; did you mean 'alpha.base'?");
    EXPECT_SET_ERROR("", "seed=5000000000", "--set seed=5000000000: integer 5000000000 does not fit in 32 bits");
    /* beyond 64 bits no suffix helps: no "write ...L" hint */
    EXPECT_SET_ERROR("", "iterations=99999999999999999999", "integer 99999999999999999999 does not fit in 64 bits");
    EXPECT_SET_ERROR("", "overwrite=yes", "--set overwrite=yes: key 'overwrite': cannot read 'yes'");
    /* enum values: another case or a small slip gets the name meant; anything else does not */
    EXPECT_SET_ERROR("", "precision=\"BF16\"", "--set precision=\"BF16\": key 'precision'", "got a string \"BF16\"; did you mean \"bf16\"?");
    EXPECT_SET_ERROR("", "method=\"alreduce\"", "got a string \"alreduce\"; did you mean \"allreduce\"?");
    EXPECT_SET_ERROR("", "device=\"gpu\"", "got a string \"gpu\"; did you mean \"cuda\"?");
    EXPECT_SET_ERROR("", "method=\"Gossip_Push\"", "did you mean \"gossip_push\"?");
    EXPECT_SET_ERROR("", "method=\"xyz\"", "got a string \"xyz\"");
    ck_assert_msg(!strstr(err, "did you mean"), "%s", err);
    /* the key that asked for the JPEG path is blamed where it was set, data.dir being unset */
    EXPECT_SET_ERROR("", "data.format=\"jpeg\"", "--set data.format=\"jpeg\": key 'data.format': \"jpeg\" needs key 'data.dir'");
    /* a 100 kB value is shown by its beginning: the message after it is whole */
    enum { LONG = 100000 };
    static char big[LONG + 64];
    const char *forms[][2] = {{"name=\"", "\""}, {"method=\"", "\""}, {"p=", ""}};
    const char *ends[] = {"(100007 bytes): key 'name': expected a string of at most 127 characters, got one of 100000",
                          "key 'method': expected one of", "(100002 bytes): an integer of 100000 digits does not fit in 32 bits"};
    for (int k = 0; k < 3; k++) {
        int n = snprintf(big, sizeof big, "%s", forms[k][0]);
        memset(big + n, k == 2 ? '9' : 'x', LONG);
        snprintf(big + n + LONG, sizeof big - (size_t)(n + LONG), "%s", forms[k][1]);
        EXPECT_SET_ERROR("", big, ends[k]);
        ck_assert_msg(strlen(err) < 600, "%zu-byte message", strlen(err));
        if (k == 1) ck_assert_msg(strstr(err, "got a string of 100000 characters, \"xxxx") && !strcmp(err + strlen(err) - 5, "x\"..."), "%s", err);
    }
    /* a cross-key error after an override points at the key that breaks it, in the file */
    EXPECT_SET_ERROR("b = 8;\nalpha = { steps = [500]; };\n", "iterations=100", ":2: key 'alpha.steps'", "iterations (100)", "= 500");
    ck_assert_msg(strstr(err, path), "%s", err);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Round trip, tables, world size, docs */

/* Load text, print it with config_to_text, load that, and compare the structs byte by byte. */
static void round_trip(const char *text, char *const *sets, int n_sets) {
    static experiment a;
    static char buf[CFG_TEXT_MAX];
    ck_assert_msg(load_text(text, sets, n_sets) == 0, "%s", err);
    a = e;
    int n = config_to_text(&a, buf, sizeof buf);
    ck_assert_int_eq(n, (int)strlen(buf));
    ck_assert_int_lt(n, CFG_TEXT_MAX - 1);
    const char *p2 = write_file("rt.cfg", buf);
    ck_assert_msg(config_load(&e, p2, NULL, 0, err, sizeof err) == 0, "%s\n%s", err, buf);
    ck_assert_str_eq(e.source, p2);
    memcpy(e.source, a.source, sizeof e.source);
    ck_assert_msg(!memcmp(&a, &e, sizeof e), "round trip differs:\n%s", buf);
    char buf2[CFG_TEXT_MAX];
    config_to_text(&e, buf2, sizeof buf2);
    ck_assert_str_eq(buf, buf2);
}

START_TEST(test_round_trip) {
    round_trip("", NULL, 0);
    round_trip(full_file, NULL, 0);
    char *sets[] = {"seed=1234567890123L", "alpha.base=0.123456789012345", "weight_decay=1e-7", "name=a.b+c-d",
                    "data.train_images=\"we\\\"ird\\\\path\\n\\twith\\x01ctl\"", "alpha.steps=[5L, 3000000000L]",
                    "iterations=4000000000L", "momentum=0", "output=\"\""};
    round_trip("", sets, 9);
    ck_assert_str_eq(e.data.train_images, "we\"ird\\path\n\twith\x01" "ctl");
    ck_assert_str_eq(e.output, "runs/a.b+c-d.h5");
    /* the method keys and the inject group: lists, enums, a fail rank */
    char *sets2[] = {"p=2000", "method=backup", "backups=1999", "servers=64", "synchronous=true", "gossip_order=fresh",
                     "comm_timeout_s=0.001", "inject.slow_ranks=[0, 7, 1999]", "inject.delay_ms=1e-3",
                     "inject.delay_dist=lognormal", "inject.random_slow=0.3333333333333333", "inject.fail_rank=1999",
                     "inject.fail_step=999"};
    round_trip("", sets2, 13);
    ck_assert_int_eq(e.inject.n_slow_ranks, 3);
    ck_assert_int_eq(e.inject.slow_ranks[2], 1999);
    ck_assert_int_eq(e.inject.delay_dist, DELAY_LOGNORMAL);
    /* the longest slow_ranks list */
    static char list[4096];
    int w = snprintf(list, sizeof list, "inject.slow_ranks=[");
    for (int i = 0; i < CFG_MAX_SLOW; i++) w += snprintf(list + w, sizeof list - w, "%s%d", i ? ", " : "", 1000000 + 7 * i);
    snprintf(list + w, sizeof list - w, "]");
    char *sets3[] = {"p=2000000000", list};
    round_trip("", sets3, 2);
    ck_assert_int_eq(e.inject.n_slow_ranks, CFG_MAX_SLOW);
    ck_assert_int_eq(e.inject.slow_ranks[CFG_MAX_SLOW - 1], 1000000 + 7 * (CFG_MAX_SLOW - 1));
}
END_TEST

START_TEST(test_to_text_sizes) {
    /* every string at its longest and fully escaped fits in CFG_TEXT_MAX */
    static experiment w;
    static char buf[CFG_TEXT_MAX];
    config_defaults(&w);
    memset(w.name, 'n', sizeof w.name - 1);
    char *fields[] = {w.data.train_images, w.data.train_labels, w.data.val_images, w.data.val_labels, w.data.dir,
                      w.output, w.checkpoint.path, w.source};
    for (int i = 0; i < 8; i++) { memset(fields[i], 1, CFG_PATH_MAX - 1); fields[i][CFG_PATH_MAX - 1] = 0; }
    /* and every list full of the widest numbers */
    w.alpha.n_steps = CFG_MAX_STEPS;
    for (int i = 0; i < CFG_MAX_STEPS; i++) w.alpha.steps[i] = LONG_MIN;
    w.inject.n_slow_ranks = CFG_MAX_SLOW;
    for (int i = 0; i < CFG_MAX_SLOW; i++) w.inject.slow_ranks[i] = INT_MIN;
    int n = config_to_text(&w, buf, sizeof buf);
    ck_assert_int_eq(n, (int)strlen(buf));
    ck_assert_int_lt(n, CFG_TEXT_MAX - 1);
    ck_assert_ptr_nonnull(strstr(buf, "device = \"cpu\";"));
    /* truncation like snprintf: n-1 characters and a NUL */
    char small[16];
    ck_assert_int_eq(config_to_text(&w, small, sizeof small), 15);
    ck_assert_int_eq((int)strlen(small), 15);
    ck_assert_int_eq(config_to_text(&w, small, 0), 0);
}
END_TEST

START_TEST(test_check_world) {
    ck_assert_int_eq(load_text("p = 4;\n", NULL, 0), 0);
    ck_assert_int_eq(config_check_world(&e, 4, err, sizeof err), 0);
    ck_assert_int_eq(config_check_world(&e, 2, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, path) && strstr(err, "p = 4") && strstr(err, "started 2"), "%s", err);
    ck_assert_int_eq(config_world_size(&e), 4);

    /* allreduce: the world is p; the message keeps its shape and names the line of p */
    ck_assert_int_eq(load_text("b = 8;\np = 4;\nservers = 3;\n", NULL, 0), 0);
    ck_assert_int_eq(config_world_size(&e), 4); /* servers is ignored without servers */
    ck_assert_int_eq(config_check_world(&e, 4, err, sizeof err), 0);
    ck_assert_int_eq(config_check_world(&e, 7, err, sizeof err), EXIT_BADINPUT);
    char want[1024];
    snprintf(want, sizeof want, "%s:2: key 'p': the experiment asks for p = 4 worker ranks but MPI started 7; "
             "run mpiexec -n 4, or set p = 7 (--set p=7)", path);
    ck_assert_str_eq(err, want);

    /* ps, easgd, backup: p + servers */
    ck_assert_int_eq(load_text("method = \"ps\";\np = 4;\n", NULL, 0), 0);
    ck_assert_int_eq(config_world_size(&e), 5);
    ck_assert_int_eq(config_check_world(&e, 5, err, sizeof err), 0);
    ck_assert_int_eq(config_check_world(&e, 4, err, sizeof err), EXIT_BADINPUT);
    snprintf(want, sizeof want, "%s:2: key 'p': method 'ps' runs on p + servers = 4 + 1 = 5 MPI ranks but MPI started 4; "
             "run mpiexec -n 5, or change p or servers", path);
    ck_assert_str_eq(err, want);
    char *sets[] = {"servers=3"};
    ck_assert_int_eq(load_text("method = \"easgd\";\np = 2;\n", sets, 1), 0);
    ck_assert_int_eq(config_world_size(&e), 5);
    ck_assert_int_eq(config_check_world(&e, 2, err, sizeof err), EXIT_BADINPUT);
    ck_assert_msg(strstr(err, "method 'easgd' runs on p + servers = 2 + 3 = 5 MPI ranks but MPI started 2; run mpiexec -n 5"), "%s", err);
    ck_assert_int_eq(load_text("method = \"backup\";\np = 8;\nbackups = 2;\nservers = 2;\n", NULL, 0), 0);
    ck_assert_int_eq(config_world_size(&e), 10);
    ck_assert_int_eq(config_check_world(&e, 10, err, sizeof err), 0);
    ck_assert_int_eq(load_text("method = \"allreduce\";\np = 3;\n", NULL, 0), 0);
    ck_assert_int_eq(config_world_size(&e), 3);
}
END_TEST

/* Capture what fn prints into a malloc'd string (the caller frees it). */
static char *cap_buf; /* open_memstream's target: static, so no pointer to a local escapes */
static size_t cap_len;
static char *capture(void (*fn)(FILE *, const experiment *), const experiment *x) {
    FILE *f = open_memstream(&cap_buf, &cap_len);
    ck_assert_ptr_nonnull(f);
    fn(f, x);
    fclose(f);
    return cap_buf;
}
static void print_keys_(FILE *f, const experiment *x) { (void)x; config_print_keys(f); }
static void print_table_(FILE *f, const experiment *x) { config_print_table(x, f); }
static void print_md_(FILE *f, const experiment *x) { (void)x; config_print_markdown(f); }

/* Every key of the table: the key column of the Markdown table. */
static int table_keys(char keys[][64], int max) {
    char *md = capture(print_md_, NULL);
    int n = 0;
    for (char *l = strstr(md, "\n| `"); l && n < max; l = strstr(l + 1, "\n| `")) {
        char *end = strchr(l + 4, '`');
        snprintf(keys[n++], 64, "%.*s", (int)(end - (l + 4)), l + 4);
    }
    free(md);
    return n;
}

START_TEST(test_data_keys) {
    /* defaults */
    ck_assert_int_eq(load_text("", NULL, 0), 0);
    ck_assert_int_eq(e.data.scale[0], 256);
    ck_assert_int_eq(e.data.scale[1], 480);
    ck_assert_int_eq(e.data.shape[0], 3);
    ck_assert_int_eq(e.data.shape[2], 224);
    ck_assert_int_eq(e.data.crop, 224);
    ck_assert_str_eq(interp_name(e.data.interp), "auto");
    /* set in the file and by --set; a fixed scale [S, S] is a range too */
    char *sets[] = {"data.scale=[300, 300]", "data.format=jpeg", "data.dir=/x"};
    ck_assert_int_eq(load_text("data = { shape = [1, 28, 30]; classes = 10; };\n", sets, 3), 0);
    ck_assert_int_eq(e.data.scale[0], 300);
    ck_assert_int_eq(e.data.scale[1], 300);
    ck_assert_int_eq(e.data.shape[1], 28);
    ck_assert_int_eq(e.data.shape[2], 30);
    ck_assert_str_eq(data_format_name(e.data.format), "jpeg");
    /* round trip through the stored text */
    static char text[CFG_TEXT_MAX];
    config_to_text(&e, text, sizeof text);
    ck_assert_msg(strstr(text, "scale = [300, 300];") && strstr(text, "shape = [1, 28, 30];"), "%s", text);
    /* errors: reversed, wrong length, out of range, cross-key */
    const char *rev[] = {"'data.scale'", "reversed", "[480, 256]", NULL};
    expect_error("data = { scale = [480, 256]; };\n", NULL, 0, rev, 1);
    const char *len[] = {"'data.scale'", "another length", NULL};
    expect_error("data = { scale = [256]; };\n", NULL, 0, len, 1);
    const char *rng[] = {"'data.shape'", "data.shape[0] = 0", NULL};
    expect_error("data = { shape = [0, 2, 2]; };\n", NULL, 0, rng, 1);
    const char *dir[] = {"'data.dir'", "--pack", NULL};
    expect_error("data = { format = \"jpeg\"; };\n", NULL, 0, dir, 1);
    const char *crop[] = {"'data.crop'", "data.scale = [200, 480]", ":1", NULL};
    expect_error("data = { format = \"jpeg\"; dir = \"/x\"; scale = [200, 480]; };\n", NULL, 0, crop, 1);
    const char *ev[] = {"'data.eval_resize'", "smaller than data.crop = 224", NULL};
    expect_error("data = { format = \"jpeg\"; dir = \"/x\"; eval_resize = 200; };\n", NULL, 0, ev, 1);
    const char *dct[] = {"'data.dct_scale'", NULL};
    expect_error("data = { dct_scale = 2; };\n", NULL, 0, dct, 1);
    ck_assert_int_eq(load_text("data = { dct_scale = true; };\n", NULL, 0), 0);
    /* the cross-key checks are the JPEG path's: irrelevant for idx */
    ck_assert_int_eq(load_text("data = { scale = [200, 480]; };\n", NULL, 0), 0);
}
END_TEST

START_TEST(test_print_keys_and_table) {
    char keys[96][64];
    int nk = table_keys(keys, 96);
    ck_assert_int_eq(nk, 74);
    char *help = capture(print_keys_, NULL);
    for (int i = 0; i < nk; i++) {
        char k[80];
        snprintf(k, sizeof k, "  %.64s ", keys[i]);
        ck_assert_msg(strstr(help, k), "--help lacks key %s", keys[i]);
    }
    ck_assert_ptr_nonnull(strstr(help, "in [0, 1)"));
    ck_assert_ptr_nonnull(strstr(help, "allreduce, ps, easgd, gossip_pull, gossip_push, backup"));
    ck_assert_ptr_nonnull(strstr(help, "strictly increasing, each in [0, p), at most 256"));
    ck_assert_ptr_nonnull(strstr(help, "strictly increasing, each in [1, iterations), at most 32"));
    ck_assert_ptr_nonnull(strstr(help, "300.0")); /* comm_timeout_s: not 3e+02 */
    free(help);

    char *sets[] = {"alpha.base=0.05"};
    ck_assert_int_eq(load_text("", sets, 1), 0);
    char *tab = capture(print_table_, &e);
    ck_assert_msg(strstr(tab, "* alpha.base") && strstr(tab, "(default 0.1)"), "%s", tab);
    ck_assert_msg(strstr(tab, "  momentum") && strstr(tab, "(default)"), "%s", tab);
    ck_assert_msg(!strstr(tab, "* output"), "the resolved default output is a default:\n%s", tab);
    free(tab);
}
END_TEST

START_TEST(test_docs_cover_every_key) {
    FILE *f = fopen("docs/config.md", "r");
    ck_assert_msg(f != NULL, "cannot open docs/config.md (run the tests from the repository root)");
    char *doc = NULL;
    size_t cap = 0;
    ssize_t len = getdelim(&doc, &cap, '\0', f);
    fclose(f);
    ck_assert_int_gt(len, 0);
    char keys[96][64];
    int nk = table_keys(keys, 96);
    for (int i = 0; i < nk; i++) {
        char k[80];
        snprintf(k, sizeof k, "`%.64s`", keys[i]);
        ck_assert_msg(strstr(doc, k), "docs/config.md does not document key %s", keys[i]);
    }
    char *md = capture(print_md_, NULL);
    ck_assert_msg(strstr(doc, md), "the key table in docs/config.md is out of date; regenerate it with "
                                   "build/test/test_config --print-docs-table");
    free(md);
    free(doc);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}


/* Keys set that the method or model does not use: counted and named with where they were set
 * (a note, not an error); defaults and keys in use are not named. */
START_TEST(test_unused_keys) {
    char buf[4096];
    ck_assert_int_eq(load_text("method = \"ps\";\np = 2;\ntau = 5;\nservers = 1;\nmodel = { arch = \"linear\"; width = 8; };\n", NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 2);
    ck_assert_msg(strstr(buf, "key 'tau' (") && strstr(buf, "t.cfg:3) has no effect: used only by method easgd"), "%s", buf);
    ck_assert_msg(strstr(buf, "key 'model.width' (") && strstr(buf, "used only by model.arch resnet18"), "%s", buf);
    ck_assert_msg(!strstr(buf, "servers"), "%s", buf);
    ck_assert_int_eq(load_text("method = \"easgd\";\np = 2;\ntau = 5;\n", (char *const[]){"backups=1", "gossip_order=\"fresh\""}, 2), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 2);
    ck_assert_msg(strstr(buf, "key 'backups' (--set backups=1)") && strstr(buf, "key 'gossip_order' (--set gossip_order="), "%s", buf);
    ck_assert_int_eq(load_text("method = \"gossip_push\";\np = 2;\nsynchronous = true;\n", NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    /* the JPEG keys with data.format "idx" (the default), the IDX files and data.shape with "jpeg";
     * data.scale with jpeg but augment rrc */
    ck_assert_int_eq(load_text("p = 2;\ndata = { crop = 96; dct_scale = true; interp = \"bilinear\"; eval_resize = 128;\n"
                               "  threads = 2; augment = \"rrc\"; dir = \"packs/x\"; scale = [100, 200]; shape = [3, 8, 8]; };\n", NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 9);
    ck_assert_msg(strstr(buf, "key 'data.crop' (") && strstr(buf, "t.cfg:2) has no effect: used only by data.format = \"jpeg\""), "%s", buf);
    ck_assert_msg(strstr(buf, "key 'data.dct_scale' (") && strstr(buf, "key 'data.dir' (") && strstr(buf, "key 'data.scale' (") &&
                  strstr(buf, "key 'data.shape' (") && strstr(buf, "used only by data.format = \"synthetic\""), "%s", buf);
    ck_assert_int_eq(load_text("p = 2;\ndata = { format = \"jpeg\"; dir = \"packs/x\"; augment = \"rrc\"; scale = [300, 400];\n"
                               "  train_images = \"a.gz\"; crop = 96; dct_scale = true; };\n", NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 2);
    ck_assert_msg(strstr(buf, "key 'data.scale' (") && strstr(buf, "used only by data.augment = \"scale\"") &&
                  strstr(buf, "key 'data.train_images' (") && strstr(buf, "used only by data.format = \"idx\""), "%s", buf);
    /* sim.leaf_size >= the ranks: one leaf, the flat network (the default 16 at p = 8; 10 with the
     * servers of ps); a leaf_size below them, or topology flat: nothing to say */
    ck_assert_int_eq(load_text("p = 8;\nsim = { enabled = true; topology = \"fat_tree\"; };\n", NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 1);
    ck_assert_msg(strstr(buf, "key 'sim.leaf_size' (") && strstr(buf, "t.cfg): a leaf of 16 hosts holds all 8 ranks (p = 8): the fat tree is one "
                              "leaf switch, the same network as sim.topology = \"flat\""), "%s", buf);
    ck_assert_msg(!strstr(buf, "oversubscription"), "sim.oversubscription not given, yet named: %s", buf);
    /* sim.oversubscription given with one leaf: said apart, naming where it was given */
    ck_assert_int_eq(load_text("p = 8;\nsim = { enabled = true; topology = \"fat_tree\";\n  oversubscription = 4.0; };\n", NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 2);
    ck_assert_msg(strstr(buf, "the same network as sim.topology = \"flat\"; key 'sim.oversubscription' (") &&
                  strstr(buf, "t.cfg:3) has no effect: with every rank on one leaf no message crosses the leaf's uplinks"), "%s", buf);
    ck_assert_int_eq(load_text("method = \"ps\";\np = 8;\nservers = 2;\nsim = { enabled = true; topology = \"fat_tree\"; leaf_size = 10; };\n",
                               NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 1);
    ck_assert_msg(strstr(buf, "key 'sim.leaf_size' (") && strstr(buf, "t.cfg:4): a leaf of 10 hosts holds all 10 ranks (p + servers = 8 + 2)"), "%s", buf);
    ck_assert_int_eq(load_text("method = \"ps\";\np = 8;\nservers = 2;\nsim = { enabled = true; topology = \"fat_tree\"; leaf_size = 9; };\n",
                               NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 0);
    ck_assert_int_eq(load_text("p = 8;\nsim = { enabled = true; };\n", NULL, 0), 0);
    ck_assert_int_eq(config_unused_keys(&e, buf, sizeof buf), 0);
}
END_TEST

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--print-docs-table")) { config_print_markdown(stdout); return 0; }
    snprintf(tmpdir, sizeof tmpdir, "%s/dsgd-test-config-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }

    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_defaults_are_the_papers);
    tcase_add_test(tc, test_empty_file_gives_defaults);
    tcase_add_test(tc, test_full_file);
    tcase_add_test(tc, test_int_accepted_for_float);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_path_too_long);
    tcase_add_test(tc, test_syntax_error);
    tcase_add_test(tc, test_unknown_key_suggests);
    tcase_add_test(tc, test_wrong_types);
    tcase_add_test(tc, test_int_wraparound_guard);
    tcase_add_test(tc, test_string_too_long);
    tcase_add_test(tc, test_out_of_range);
    tcase_add_test(tc, test_steps_and_cross_keys);
    tcase_add_test(tc, test_method_keys_ranges);
    tcase_add_test(tc, test_inject_ranges);
    tcase_add_test(tc, test_inject_set);
    tcase_add_test(tc, test_enums_and_unbuilt);
    tcase_add_test(tc, test_fail_needs_two_workers);
    tcase_add_test(tc, test_checkpoint_keys);
    tcase_add_test(tc, test_comm_key);
    tcase_add_test(tc, test_include);
    tcase_add_test(tc, test_set_overrides);
    tcase_add_test(tc, test_set_errors);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_to_text_sizes);
    tcase_add_test(tc, test_check_world);
    tcase_add_test(tc, test_data_keys);
    tcase_add_test(tc, test_print_keys_and_table);
    tcase_add_test(tc, test_docs_cover_every_key);
    tcase_add_test(tc, test_unused_keys);
    suite_add_tcase(s, tc);
    int st = run_suite(s);
    nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    return st;
}
