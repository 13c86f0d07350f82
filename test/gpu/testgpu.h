/* testgpu.h — shared by the GPU test programs (test/gpu/test_*.c). */
#ifndef DSGD_TESTGPU_H
#define DSGD_TESTGPU_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "bf16.h"

/* DSGD_REQUIRE_GPU set (and not "0"): the run is meant for a GPU machine, so finding no usable GPU
 * (no device, or a CUDA runtime that cannot start: driver older than the runtime, no driver in a
 * container) is a failure, not a skip. Without it a GPU machine whose CUDA cannot initialise would
 * print "skipped" and pass, and a one-shot GPU check would report success having tested nothing. */
static inline int gpu_required(void) {
    const char *v = getenv("DSGD_REQUIRE_GPU");
    return v && *v && strcmp(v, "0") != 0;
}

/* ‖got − want‖₂ / ‖want‖₂ over n values (‖got − want‖₂ when want is all zero; +inf when
 * anything is non-finite): the GPU-against-CPU measure of every GPU test. */
static inline double rel_l2(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)want[i];
        num += d * d;
        den += (double)want[i] * (double)want[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Run every test of s in this process (CK_NOFORK: CUDA does not survive fork() once
 * initialised) and return the exit status: EXIT_SUCCESS if none failed. */
static inline int run_suite_nofork(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* Print the relative error of (got, want) and assert it is <= tol. */
#define CHECK_REL(what, got, want, n, tol)                                                                      \
    do {                                                                                                        \
        double r_ = rel_l2((got), (want), (n));                                                                 \
        printf("    %-44s rel. error %.3g (tol %.0e)\n", (what), r_, (double)(tol));                            \
        ck_assert_msg(r_ <= (tol), "%s: relative L2 error %.3g > %.1g", (what), r_, (double)(tol));               \
    } while (0)

#endif
