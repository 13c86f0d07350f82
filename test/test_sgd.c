/* test_sgd.c — the optimizer and the α schedule against closed forms. */
#include <math.h>

#include "config/config.h"
#include "optim/sgd.h"
#include "testutil.h"

static experiment base_experiment(void) {
    experiment e;
    config_defaults(&e);
    e.iterations = 1000;
    e.alpha.base = 0.1;
    e.alpha.warmup = 0;
    return e;
}

START_TEST(test_alpha_constant_and_warmup) {
    experiment e = base_experiment();
    e.alpha.schedule = SCHED_CONSTANT;
    ck_assert_close(alpha_at(&e, 0), 0.1, 1e-15);
    ck_assert_close(alpha_at(&e, 999), 0.1, 1e-15);
    e.alpha.warmup = 10; /* linear from α0/10 at t = 0 to α0 at t = 9 */
    ck_assert_close(alpha_at(&e, 0), 0.01, 1e-15);
    ck_assert_close(alpha_at(&e, 4), 0.05, 1e-15);
    ck_assert_close(alpha_at(&e, 9), 0.1, 1e-15);
    ck_assert_close(alpha_at(&e, 10), 0.1, 1e-15);
}
END_TEST

START_TEST(test_alpha_step) {
    /* The paper's schedule shape (Jin et al. §4.2): ×0.1 at 150k and 300k of 450k. */
    experiment e = base_experiment();
    e.iterations = 450000;
    e.alpha.schedule = SCHED_STEP;
    e.alpha.n_steps = 2;
    e.alpha.steps[0] = 150000;
    e.alpha.steps[1] = 300000;
    e.alpha.factor = 0.1;
    ck_assert_close(alpha_at(&e, 149999), 0.1, 1e-15);
    ck_assert_close(alpha_at(&e, 150000), 0.01, 1e-15);
    ck_assert_close(alpha_at(&e, 299999), 0.01, 1e-15);
    ck_assert_close(alpha_at(&e, 300000), 0.001, 1e-15);
    ck_assert_close(alpha_at(&e, 449999), 0.001, 1e-15);
}
END_TEST

START_TEST(test_alpha_step_inside_warmup) {
    /* Warm-up scales the schedule: a step at 3 inside a 5-step warm-up acts at t = 3. */
    experiment e = base_experiment();
    e.alpha.schedule = SCHED_STEP;
    e.alpha.warmup = 5;
    e.alpha.n_steps = 1;
    e.alpha.steps[0] = 3;
    e.alpha.factor = 0.5;
    ck_assert_close(alpha_at(&e, 2), 0.1 * 3.0 / 5.0, 1e-15);
    ck_assert_close(alpha_at(&e, 3), 0.05 * 4.0 / 5.0, 1e-15);
    ck_assert_close(alpha_at(&e, 5), 0.05, 1e-15);
}
END_TEST

START_TEST(test_alpha_cosine) {
    experiment e = base_experiment();
    e.alpha.schedule = SCHED_COSINE;
    e.alpha.warmup = 100;
    /* α(t) = α0 ½(1 + cos(π (t−100)/900)) */
    ck_assert_close(alpha_at(&e, 100), 0.1, 1e-15);
    ck_assert_close(alpha_at(&e, 550), 0.05, 1e-12);
    ck_assert_close(alpha_at(&e, 325), 0.1 * 0.5 * (1 + cos(M_PI / 4)), 1e-12);
    ck_assert(alpha_at(&e, 999) > 0 && alpha_at(&e, 999) < 1e-5);
    for (long t = 101; t < 1000; t++) ck_assert(alpha_at(&e, t) <= alpha_at(&e, t - 1));
}
END_TEST

/* Three steps of the recurrence in sgd.h in double precision vs sgd_update in float. */
static void check_recurrence(int nesterov) {
    enum { N = 5 };
    float theta[N] = {1.0f, -2.0f, 0.5f, 0.0f, 3.0f}, v[N] = {0};
    double th[N], vv[N] = {0};
    const double alpha = 0.1, mu = 0.9, lambda = 1e-2;
    for (int i = 0; i < N; i++) th[i] = theta[i];
    for (int step = 0; step < 3; step++) {
        float grad[N];
        for (int i = 0; i < N; i++) grad[i] = (float)(0.25 * (i + 1) * (step + 1) * (i % 2 ? -1 : 1));
        ck_assert_int_eq(sgd_update(theta, grad, v, N, (float)alpha, (float)mu, (float)lambda, nesterov), 1);
        for (int i = 0; i < N; i++) {
            double g = grad[i] + lambda * th[i];
            vv[i] = mu * vv[i] + g;
            th[i] -= alpha * (nesterov ? g + mu * vv[i] : vv[i]);
            ck_assert_close(theta[i], th[i], 1e-6);
            ck_assert_close(v[i], vv[i], 1e-6);
        }
    }
}

START_TEST(test_sgd_nesterov) { check_recurrence(1); }
END_TEST
START_TEST(test_sgd_heavy_ball) { check_recurrence(0); }
END_TEST

START_TEST(test_sgd_first_step_closed_form) {
    /* v0 = 0: v1 = g + λθ, θ1 = θ0 − α(1 + µ)(g + λθ0) for Nesterov. */
    float theta[1] = {2.0f}, grad[1] = {0.5f}, v[1] = {0.0f};
    sgd_update(theta, grad, v, 1, 0.1f, 0.9f, 1e-4f, 1);
    ck_assert_close(v[0], 0.5 + 2e-4, 1e-7);
    ck_assert_close(theta[0], 2.0 - 0.1 * 1.9 * (0.5 + 2e-4), 1e-6);
}
END_TEST

START_TEST(test_sgd_nonfinite) {
    enum { N = 1000 };
    static float theta[N], grad[N], v[N];
    for (int i = 0; i < N; i++) theta[i] = 1.0f, grad[i] = 0.1f, v[i] = 0.0f;
    ck_assert_int_eq(sgd_update(theta, grad, v, N, 0.1f, 0.9f, 0.0f, 1), 1);
    grad[777] = NAN;
    ck_assert_int_eq(sgd_update(theta, grad, v, N, 0.1f, 0.9f, 0.0f, 1), 0);
    for (int i = 0; i < N; i++) theta[i] = 1.0f, grad[i] = 0.1f, v[i] = 0.0f;
    grad[3] = INFINITY;
    ck_assert_int_eq(sgd_update(theta, grad, v, N, 0.1f, 0.9f, 0.0f, 0), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sgd");
    TCase *tc = tcase_create("sgd");
    tcase_add_test(tc, test_alpha_constant_and_warmup);
    tcase_add_test(tc, test_alpha_step);
    tcase_add_test(tc, test_alpha_step_inside_warmup);
    tcase_add_test(tc, test_alpha_cosine);
    tcase_add_test(tc, test_sgd_nesterov);
    tcase_add_test(tc, test_sgd_heavy_ball);
    tcase_add_test(tc, test_sgd_first_step_closed_form);
    tcase_add_test(tc, test_sgd_nonfinite);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
