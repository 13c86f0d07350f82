/* test_vclock.c — sim mode's virtual clock (src/train/vclock.h, docs/simulate.md) without MPI
 * (p = 1 where the all-reduce is exchanged; vclock_init's models at any p): what vclock_init takes
 * from the sim group and the models, the jitter's moments and purity, the charges of a step, and
 * the straggler delays that sim mode charges instead of sleeping (inject.h's virtual_time).
 * test/test_sim_mode.sh runs the clock in real runs (closed form, determinism, resume).
 *
 * The jitter's moments use a fixed seed; each tolerance is at least 4 standard errors. */
#include "config/config.h"
#include "sim/simmodel.h"
#include "testutil.h"
#include "train/inject.h"
#include "train/vclock.h"
#include "util/util.h"

#include <math.h>

static experiment sim_exp(int p) {
    experiment e;
    config_defaults(&e);
    e.p = p;
    e.seed = 777;
    e.sim.enabled = 1;
    return e;
}

START_TEST(test_init_from_models) {
    char err[256] = "";
    vclock vc;
    experiment e = sim_exp(4);
    e.sim.enabled = 0;
    ck_assert_int_eq(vclock_init(&vc, &e, 0, err, sizeof err), 0);
    ck_assert_int_eq(vc.on, 0);
    ck_assert_ptr_null(vc.ready);

    e = sim_exp(4); /* k80 at b = 32, 10 GbE, flat, ring */
    ck_assert_int_eq(vclock_init(&vc, &e, 2, err, sizeof err), 0);
    ck_assert_int_eq(vc.on, 1);
    ck_assert(vc.step_s == sim_device_step_s(SIM_DEV_K80, 32, NULL));
    ck_assert(vc.step_s > 0);
    double lat, bw;
    const char *src;
    ck_assert_int_eq(sim_network_preset(SIM_NET_10GBE, &lat, &bw, &src), 0);
    ck_assert(vc.net.link_latency_s == lat && vc.net.bandwidth_Bps == bw);
    ck_assert_str_eq(vc.network_source, src);
    ck_assert_uint_eq(vc.model_bytes, 46758048u);
    ck_assert_uint_eq(vc.net.chunk_bytes, 4u << 20);
    ck_assert(vc.allreduce_s == sim_allreduce_s(&vc.net, 4, 46758048u));
    /* the ring on the flat preset, by hand: 11 pieces of 4 MiB and one of the rest, each
     * 2(p−1) shifts of piece/p bytes over a route of 2 links */
    const double C = 4 << 20, rest = 46758048.0 - 11 * C;
    const double ring = 11 * 6 * (2 * lat + C / 4 / bw) + 6 * (2 * lat + rest / 4 / bw);
    ck_assert_close(vc.allreduce_s, ring, 1e-12 * ring);
    ck_assert_int_eq(vc.worker, 2);
    vclock_free(&vc);

    /* step_ms replaces the device; custom network from the keys */
    e = sim_exp(8);
    e.sim.step_ms = 12.5, e.sim.network = SIM_NET_CUSTOM, e.sim.latency_us = 2, e.sim.bandwidth_gbps = 100;
    e.sim.model_params = 1000;
    ck_assert_int_eq(vclock_init(&vc, &e, 0, err, sizeof err), 0);
    ck_assert(vc.step_s == 0.0125);
    ck_assert(vc.net.link_latency_s == 2e-6 && vc.net.bandwidth_Bps == 12.5e9);
    ck_assert_str_eq(vc.network_source, "");
    ck_assert_uint_eq(vc.model_bytes, 4000u);
    ck_assert_close(vc.allreduce_s, 14 * (4e-6 + 500.0 / 12.5e9), 1e-15);
    vclock_free(&vc);

    e = sim_exp(2);
    e.sim.device = SIM_DEV_MEASURED;
    ck_assert_int_eq(vclock_init(&vc, &e, 1, err, sizeof err), 0);
    ck_assert(vc.step_s < 0);
    vclock_free(&vc);
}
END_TEST

START_TEST(test_jitter_moments_and_purity) {
    char err[256];
    vclock vc;
    experiment e = sim_exp(1);
    ck_assert_int_eq(vclock_init(&vc, &e, 0, err, sizeof err), 0);
    for (long s = 0; s < 100; s++) ck_assert(vclock_jitter(&vc, 3, s) == 1.0); /* jitter 0: exactly 1 */
    vclock_free(&vc);

    e.sim.jitter = 0.3;
    ck_assert_int_eq(vclock_init(&vc, &e, 0, err, sizeof err), 0);
    const int W = 8, S = 5000, n = W * S;
    double sum = 0, sum2 = 0;
    int same = 0;
    for (int w = 0; w < W; w++)
        for (long s = 0; s < S; s++) {
            const double j = vclock_jitter(&vc, w, s);
            ck_assert(j > 0 && isfinite(j));
            ck_assert(j == vclock_jitter(&vc, w, s)); /* pure */
            sum += j, sum2 += j * j;
            if (w > 0) same += j == vclock_jitter(&vc, 0, s);
        }
    const double mean = sum / n, var = sum2 / n - mean * mean, cv = sqrt(var) / mean;
    /* mean 1, CV 0.3: SE of the mean 0.3/sqrt(n) = 0.0015; of the CV about 0.3·sqrt((1 + 2·0.09)/2n)
     * ≈ 0.0012 for a lognormal of this spread (take 0.015 for both, > 4 SE) */
    ck_assert_msg(fabs(mean - 1.0) < 0.006, "jitter mean %.5f, want 1", mean);
    ck_assert_msg(fabs(cv - 0.3) < 0.015, "jitter CV %.5f, want 0.3", cv);
    ck_assert_int_eq(same, 0); /* every worker its own stream */
    /* another seed, another stream */
    experiment e2 = e;
    e2.seed = 778;
    vclock vc2;
    ck_assert_int_eq(vclock_init(&vc2, &e2, 0, err, sizeof err), 0);
    ck_assert(vclock_jitter(&vc, 0, 5) != vclock_jitter(&vc2, 0, 5));
    vclock_free(&vc), vclock_free(&vc2);
}
END_TEST

START_TEST(test_step_charges) {
    char err[256];
    vclock vc;
    experiment e = sim_exp(1); /* p = 1: no exchange, no all-reduce time */
    e.sim.step_ms = 10;
    ck_assert_int_eq(vclock_init(&vc, &e, 0, err, sizeof err), 0);
    ck_assert(vc.allreduce_s == 0.0);
    double want = 0;
    for (long s = 0; s < 5; s++) {
        vclock_compute(&vc, s, 123.0 /* ignored */, s == 2 ? 0.5 : 0.0);
        vclock_allreduce(&vc);
        vclock_step_end(&vc, 7.0 /* ignored */);
        want = (want + (0.01 + (s == 2 ? 0.5 : 0.0)));
        ck_assert(vc.now == want);
    }
    ck_assert_close(vc.v.compute_s, 0.05, 1e-15);
    ck_assert(vc.v.delay_s == 0.5 && vc.v.wait_s == 0.0 && vc.v.comm_s == 0.0 && vc.v.data_s == 0.0);
    ck_assert_close(vc.v.step_s, vc.now, 1e-15);
    vclock_free(&vc);

    /* measured: the real seconds before the all-reduce and the update after it */
    e.sim.step_ms = 0, e.sim.device = SIM_DEV_MEASURED;
    ck_assert_int_eq(vclock_init(&vc, &e, 0, err, sizeof err), 0);
    vclock_compute(&vc, 0, 0.25, 0.0);
    vclock_allreduce(&vc);
    vclock_step_end(&vc, 0.125);
    ck_assert(vc.now == 0.375 && vc.v.compute_s == 0.375 && vc.v.step_s == 0.375);
    vclock_free(&vc);
}
END_TEST

START_TEST(test_inject_virtual) {
    experiment e = sim_exp(4);
    e.inject.delay_ms = 40;
    e.inject.n_slow_ranks = 1, e.inject.slow_ranks[0] = 1;
    injector in, real;
    inject_init(&in, &e, 1);
    experiment r = e;
    r.sim.enabled = 0;
    inject_init(&real, &r, 1);
    ck_assert_int_eq(in.virtual_time, 1);
    ck_assert_int_eq(real.virtual_time, 0);
    for (long s = 0; s < 10; s++) {
        ck_assert(inject_delay_s(&in, s) == 0.0);           /* nothing slept in sim mode */
        ck_assert(inject_draw_s(&in, s) == 0.040);          /* charged instead */
        ck_assert(inject_delay_s(&real, s) == inject_draw_s(&in, s)); /* the same draw a real run sleeps */
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("vclock");
    TCase *tc = tcase_create("vclock");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_init_from_models);
    tcase_add_test(tc, test_jitter_moments_and_purity);
    tcase_add_test(tc, test_step_charges);
    tcase_add_test(tc, test_inject_virtual);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
