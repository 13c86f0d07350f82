/* test_inject.c — straggler and failure injection (src/train/inject): who is delayed, by how
 * much (the moments of each delay distribution), the random_slow victim (frequency, uniformity,
 * the same answer on every worker), determinism, failures, and the sleep itself.
 *
 * The statistical checks use a fixed seed, so they are deterministic; each tolerance is stated
 * in standard errors (SE) of the estimate, at least 3 SE, so a correct implementation passes for
 * any seed with high probability, while a wrong mean or variance (e.g. a rate for a mean, a
 * lognormal without the −σ²/2) is off by far more. */
#define _GNU_SOURCE
#include "config/config.h"
#include "testutil.h"
#include "train/inject.h"
#include "util/util.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>

/* Defaults, p workers, delay_ms = 50 (fixed), no slow ranks, no random_slow, no failure. */
static experiment base(int p) {
    experiment e;
    config_defaults(&e);
    e.p = p;
    e.seed = 12345;
    e.iterations = 1000000;
    e.inject.delay_ms = 50.0;
    return e;
}

static void set_slow(experiment *e, int n, const int *ranks) {
    e->inject.n_slow_ranks = n;
    for (int i = 0; i < n; i++) e->inject.slow_ranks[i] = ranks[i];
}

START_TEST(test_fixed_delay_exact) {
    experiment e = base(4);
    set_slow(&e, 1, (int[]){1});
    injector in[4];
    for (int w = 0; w < 4; w++) inject_init(&in[w], &e, w);
    ck_assert_int_eq(in[1].is_slow, 1);
    ck_assert_int_eq(in[0].is_slow + in[2].is_slow + in[3].is_slow, 0);
    for (long t = 0; t < 1000; t++) {
        ck_assert_close(inject_delay_s(&in[1], t), 0.050, 1e-15);
        for (int w = 0; w < 4; w++)
            if (w != 1) ck_assert_msg(inject_delay_s(&in[w], t) == 0.0, "worker %d delayed at step %ld", w, t);
    }
    /* delay_ms = 0: nothing is delayed, slow ranks and random_slow or not */
    e.inject.delay_ms = 0;
    e.inject.random_slow = 1.0;
    for (long t = 0; t < 100; t++)
        for (int w = 0; w < 4; w++) ck_assert_msg(inject_delay_s(&in[w], t) == 0.0, "worker %d step %ld", w, t);
}
END_TEST

START_TEST(test_slow_ranks_only_listed) {
    experiment e = base(6);
    e.inject.delay_dist = DELAY_EXPONENTIAL;
    set_slow(&e, 2, (int[]){1, 4});
    injector in[6];
    for (int w = 0; w < 6; w++) inject_init(&in[w], &e, w);
    for (long t = 0; t < 2000; t++)
        for (int w = 0; w < 6; w++) {
            double d = inject_delay_s(&in[w], t);
            if (w == 1 || w == 4) ck_assert_msg(d > 0, "slow worker %d not delayed at step %ld", w, t);
            else ck_assert_msg(d == 0.0, "worker %d delayed %g s at step %ld", w, d, t);
        }
    /* the two slow workers draw different delays */
    ck_assert_msg(inject_delay_s(&in[1], 7) != inject_delay_s(&in[4], 7), "workers 1 and 4 share a stream");
}
END_TEST

/* Delays of worker 0 (the only slow rank) over steps 0..n-1: mean, variance, mean and sd of
 * log(d / mean_true), fraction above the true mean. */
typedef struct { double mean, var, logmean, logsd, above; } moments;
static moments delay_moments(delay_dist_kind dist, long n) {
    experiment e = base(4);
    e.inject.delay_dist = dist;
    set_slow(&e, 1, (int[]){0});
    injector in;
    inject_init(&in, &e, 0);
    double s = 0, s2 = 0, l = 0, l2 = 0, above = 0, m = e.inject.delay_ms * 1e-3;
    for (long t = 0; t < n; t++) {
        double d = inject_delay_s(&in, t);
        ck_assert_msg(d > 0 && isfinite(d), "step %ld: delay %g", t, d);
        s += d;
        s2 += d * d;
        l += log(d / m);
        l2 += log(d / m) * log(d / m);
        above += d > m;
    }
    moments r;
    r.mean = s / n;
    r.var = (s2 - s * s / n) / (n - 1);
    r.logmean = l / n;
    r.logsd = sqrt((l2 - l * l / n) / (n - 1));
    r.above = above / n;
    return r;
}

START_TEST(test_exponential_moments) {
    /* Exp(mean µ = 50 ms), n = 40000: SE of the mean µ/√n = 0.5% of µ, so 3% is 6 SE; the sample
     * variance has relative SE √(8/n) = 1.4% (fourth moment 9µ⁴), so 10% is 7 SE; P(d > µ) = 1/e
     * with SE 0.0024, tolerance 0.012 (5 SE). */
    moments m = delay_moments(DELAY_EXPONENTIAL, 40000);
    ck_assert_close(m.mean, 0.050, 0.03 * 0.050);
    ck_assert_close(m.var, 0.050 * 0.050, 0.10 * 0.050 * 0.050);
    ck_assert_close(m.above, exp(-1.0), 0.012);
}
END_TEST

START_TEST(test_lognormal_moments) {
    /* µ·exp(Z − 1/2), Z ~ N(0, 1), n = 40000: the mean µ has relative SE √(e − 1)/√n = 0.66%, so
     * 3% is 4.5 SE; log(d/µ) ~ N(−1/2, 1): its mean has SE 0.005 (tolerance 0.025, 5 SE) and its
     * sd SE 0.0035 (tolerance 0.02, 5.7 SE); P(d > µ) = P(Z > 1/2) = 0.3085, SE 0.0023. */
    moments m = delay_moments(DELAY_LOGNORMAL, 40000);
    ck_assert_close(m.mean, 0.050, 0.03 * 0.050);
    ck_assert_close(m.logmean, -0.5, 0.025);
    ck_assert_close(m.logsd, 1.0, 0.02);
    ck_assert_close(m.above, 0.5 * erfc(0.5 / sqrt(2.0)), 0.012);
    /* the fixed distribution has no spread at all */
    m = delay_moments(DELAY_FIXED, 1000);
    ck_assert_close(m.mean, 0.050, 1e-15);
    ck_assert_close(m.var, 0.0, 1e-15); /* 0 up to rounding (mean² = 2.5e-3) */
}
END_TEST

START_TEST(test_random_slow_frequency_and_uniformity) {
    enum { P = 8, N = 40000 };
    experiment e = base(P);
    e.inject.random_slow = 0.25;
    /* each worker holds its own copy of the experiment, as on separate ranks */
    static experiment copies[P];
    injector in[P];
    for (int w = 0; w < P; w++) { copies[w] = e; inject_init(&in[w], &copies[w], w); }
    long hits = 0, per[P] = {0};
    for (long t = 0; t < N; t++) {
        int v = inject_random_victim(&e, t);
        ck_assert_int_ge(v, -1);
        ck_assert_int_lt(v, P);
        int delayed = 0;
        for (int w = 0; w < P; w++) {
            ck_assert_int_eq(inject_random_victim(&copies[w], t), v); /* every worker agrees */
            double d = inject_delay_s(&in[w], t);
            if (w == v) ck_assert_close(d, 0.050, 1e-15);
            else ck_assert_msg(d == 0.0, "worker %d delayed at step %ld, victim %d", w, t, v);
            delayed += d > 0;
        }
        ck_assert_int_eq(delayed, v >= 0);
        if (v >= 0) { hits++; per[v]++; }
    }
    /* Binomial(40000, 0.25): mean 10000, sd 86.6; tolerance 4 sd = 346. */
    ck_assert_msg(labs(hits - N / 4) <= 346, "%ld of %d steps had a victim, expected 10000 ± 346", hits, N);
    /* uniform over the 8 workers: Pearson chi-square with 7 degrees of freedom below its 0.999
     * quantile 24.32 */
    double chi2 = 0, expect = (double)hits / P;
    for (int w = 0; w < P; w++) chi2 += (per[w] - expect) * (per[w] - expect) / expect;
    ck_assert_msg(chi2 < 24.32, "victims not uniform: chi-square %.2f (7 dof) >= 24.32", chi2);

    /* the victim depends on (seed, step) only: not on the delays, slow ranks or failures */
    experiment f = e;
    f.inject.delay_ms = 3.0;
    f.inject.delay_dist = DELAY_LOGNORMAL;
    set_slow(&f, 2, (int[]){0, 5});
    f.inject.fail_rank = 3;
    f.inject.fail_step = 10;
    for (long t = 0; t < 2000; t++) ck_assert_int_eq(inject_random_victim(&f, t), inject_random_victim(&e, t));
    f = e;
    f.seed = e.seed + 1;
    int same = 0;
    for (long t = 0; t < 2000; t++) same += inject_random_victim(&f, t) == inject_random_victim(&e, t);
    /* two independent sequences agree when both are -1 (p = 0.5625) or the same victim
     * (0.0078) on about 57% of the steps; identical sequences would agree on all 2000 */
    ck_assert_msg(same < 1300, "seed does not change the victims: %d of 2000 steps agree", same);

    /* probability 0: never; probability 1: every step */
    e.inject.random_slow = 0;
    for (long t = 0; t < 1000; t++) ck_assert_int_eq(inject_random_victim(&e, t), -1);
    e.inject.random_slow = 1.0;
    for (long t = 0; t < 1000; t++) ck_assert_int_ge(inject_random_victim(&e, t), 0);
}
END_TEST

START_TEST(test_slow_and_random_add) {
    experiment e = base(2);
    e.inject.random_slow = 1.0; /* a victim on every step */
    set_slow(&e, 1, (int[]){0});
    injector in;
    inject_init(&in, &e, 0);
    int both = 0;
    for (long t = 0; t < 200; t++) {
        double want = inject_random_victim(&e, t) == 0 ? 0.100 : 0.050;
        both += want > 0.075;
        ck_assert_close(inject_delay_s(&in, t), want, 1e-15);
    }
    ck_assert_int_gt(both, 50); /* about half of 200 (sd 7) */
    ck_assert_int_lt(both, 150);
}
END_TEST

START_TEST(test_determinism) {
    experiment a = base(4), b;
    a.inject.delay_dist = DELAY_EXPONENTIAL;
    a.inject.random_slow = 0.5;
    set_slow(&a, 2, (int[]){0, 2});
    b = a;
    injector ia[4], ib[4];
    for (int w = 0; w < 4; w++) { inject_init(&ia[w], &a, w); inject_init(&ib[w], &b, w); }
    /* same seed: the same delays, bit for bit, in any order of asking */
    static double first[4][1000];
    for (long t = 0; t < 1000; t++)
        for (int w = 0; w < 4; w++) first[w][t] = inject_delay_s(&ia[w], t);
    for (long t = 999; t >= 0; t--)
        for (int w = 3; w >= 0; w--) {
            ck_assert_msg(inject_delay_s(&ib[w], t) == first[w][t], "worker %d step %ld differs", w, t);
            ck_assert_msg(inject_delay_s(&ia[w], t) == first[w][t], "worker %d step %ld not pure", w, t);
        }
    /* another seed: other delays (the continuous draws of the slow ranks all differ) */
    b.seed = a.seed + 1;
    int differ = 0;
    for (long t = 0; t < 1000; t++) differ += inject_delay_s(&ib[0], t) != first[0][t];
    ck_assert_int_eq(differ, 1000);
    /* and other steps draw other delays */
    ck_assert_msg(first[0][0] != first[0][1] && first[2][0] != first[2][1], "steps share a draw");
}
END_TEST

START_TEST(test_failed_boundaries) {
    experiment e = base(4);
    e.inject.fail_rank = 2;
    e.inject.fail_step = 100;
    injector in[4];
    for (int w = 0; w < 4; w++) inject_init(&in[w], &e, w);
    ck_assert_int_eq(inject_failed(&e, 2, 0), 0);
    ck_assert_int_eq(inject_failed(&e, 2, 99), 0);
    ck_assert_int_eq(inject_failed(&e, 2, 100), 1);
    ck_assert_int_eq(inject_failed(&e, 2, 101), 1);
    ck_assert_int_eq(inject_failed(&e, 2, 999999), 1);
    for (int w = 0; w < 4; w++)
        if (w != 2)
            for (long t = 0; t < 300; t++) ck_assert_int_eq(inject_failed(&e, w, t), 0);
    e.inject.fail_step = 0; /* fails before its first step */
    ck_assert_int_eq(inject_failed(&e, 2, 0), 1);
    e.inject.fail_rank = -1; /* no failure */
    for (int w = 0; w < 4; w++) ck_assert_int_eq(inject_failed(&e, w, 1000), 0);
}
END_TEST

static volatile sig_atomic_t n_alarms;
static void on_alarm(int sig) { (void)sig; n_alarms++; }

START_TEST(test_sleep) {
    double t0 = wall_time();
    inject_sleep(0.02);
    double dt = wall_time() - t0;
    ck_assert_msg(dt >= 0.02, "inject_sleep(0.02) slept %.6f s", dt);
    ck_assert_msg(dt < 1.0, "inject_sleep(0.02) slept %.6f s", dt);
    t0 = wall_time();
    inject_sleep(0);
    inject_sleep(-1);
    inject_sleep(NAN);
    dt = wall_time() - t0;
    ck_assert_msg(dt < 0.01, "non-positive sleeps took %.6f s", dt);

    /* signals every 2 ms interrupt nanosleep (no SA_RESTART): the sleep still lasts 50 ms */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGALRM, &sa, &old), 0);
    struct itimerval it = {{0, 2000}, {0, 2000}}, off = {{0, 0}, {0, 0}};
    n_alarms = 0;
    ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
    t0 = wall_time();
    inject_sleep(0.05);
    dt = wall_time() - t0;
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old, NULL);
    ck_assert_msg(n_alarms > 0, "no signal arrived during the sleep");
    ck_assert_msg(dt >= 0.05, "inject_sleep(0.05) under %d signals slept %.6f s", (int)n_alarms, dt);
}
END_TEST

int main(void) {
    Suite *s = suite_create("inject");
    TCase *tc = tcase_create("inject");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fixed_delay_exact);
    tcase_add_test(tc, test_slow_ranks_only_listed);
    tcase_add_test(tc, test_exponential_moments);
    tcase_add_test(tc, test_lognormal_moments);
    tcase_add_test(tc, test_random_slow_frequency_and_uniformity);
    tcase_add_test(tc, test_slow_and_random_add);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_failed_boundaries);
    tcase_add_test(tc, test_sleep);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
