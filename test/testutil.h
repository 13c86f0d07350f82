/* testutil.h — helpers shared by the Check test programs. */
#ifndef DSGD_TESTUTIL_H
#define DSGD_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

/* Run one suite, print results, return the process exit status. */
static inline int run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* |a − b| <= tol: an absolute tolerance, as given (a caller that means a relative one passes tol
 * already scaled by the reference's magnitude). */
#define ck_assert_close(a, b, tol) \
    ck_assert_msg(fabs((double)(a) - (double)(b)) <= (tol), "%s = %.9g, expected %.9g (tol %g)", #a, (double)(a), (double)(b), (double)(tol))

#endif
