/* test_vclock_gossip_async.c — asynchronous gossip_pull's replicated schedule in sim mode
 * (src/train/vclock_gossip_async.h, docs/simulate.md "Gossip, asynchronous") without MPI, against
 * closed forms on the flat 10 GbE preset (route α = 2 × 5 µs, β = 1.25 GB/s, n = ResNet-18's
 * 46,758,048 bytes, a request ℓ = α + 4/β): a pair (ℓ + α + n/β a step), incast at a node pulled
 * by three (its uplink answers them n/β apart, in the order (A, node)), the version a fast node
 * reads from a slow one (and the reads the slow one records), a failed node answering "gone",
 * a meeting (everyone starts at the slowest node's end); push at p = 2 (25 ms, then n/β a step:
 * the uplink; each push taken at the other's take after its arrival) and a push to a node that
 * fails before it arrives (not sent). test/test_sim_gossip_async.sh runs
 * the schedule in real runs (a Python re-implementation, determinism). */
#include "sim/simmodel.h"
#include "testutil.h"
#include "train/vclock_gossip_async.h"

#include <math.h>

#define NB ((size_t)4 * 11689512u)
static const double RT = 2 * 5e-6, X = (double)NB / 1.25e9, L = 2 * 5e-6 + 4 / 1.25e9; /* route, n/β, request */

static sim_net net10(void) {
    return (sim_net){.link_latency_s = 5e-6, .bandwidth_Bps = 1.25e9, .topology = SIM_TOPO_FLAT, .leaf_size = 16,
                     .oversubscription = 1, .allreduce = SIM_AR_RING, .chunk_bytes = 4u << 20};
}

/* A toy experiment: node k's compute c[k] per step, peers from a table (or the next node), a
 * meeting every `every` steps (0: none). */
typedef struct {
    double c[8];
    const int *peers; /* (p) node k pulls from peers[k] at every step; NULL: (k + 1) mod p */
    int p, every;
} toy;
static void toy_compute(void *ctx, int k, long s, double *c, double *d) {
    (void)s;
    *c = ((toy *)ctx)->c[k], *d = 0;
}
static int toy_peer(void *ctx, int k, long s) {
    (void)s;
    const toy *t = ctx;
    return t->peers ? t->peers[k] : (k + 1) % t->p;
}
static int toy_meeting(void *ctx, long s) { return ((toy *)ctx)->every > 0 && s % ((toy *)ctx)->every == 0; }
static vga_model model(toy *t) { return (vga_model){.ctx = t, .compute = toy_compute, .peer = toy_peer, .meeting = toy_meeting}; }

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-12 * (1 + fabs(b)), "%.17g vs %.17g", (double)(a), (double)(b))

START_TEST(test_pair) { /* p = 2, compute 25 ms < the exchange: a step is ℓ + α + n/β */
    const sim_net net = net10();
    toy t = {.c = {0.025, 0.025}, .p = 2};
    vclock_gossip_async g;
    vga_init(&g, 2, 0, 10, -1, 0, NB, &net, model(&t));
    const double step = L + RT + X;
    for (long s = 0; s < 10; s++) {
        const vga_step *r = vga_mine(&g, s);
        ck_assert(r->step == s && r->peer == 1 && r->got && r->version == s);
        NEAR(r->S, s * step), NEAR(r->A, s * step + L), NEAR(r->E, (s + 1) * step);
    }
    NEAR(step, 0.0374264416);
    vga_free(&g);
    /* compute 50 ms hides the exchange: a step is the compute */
    t.c[0] = t.c[1] = 0.050;
    vga_init(&g, 2, 1, 10, -1, 0, NB, &net, model(&t));
    NEAR(vga_mine(&g, 9)->E, 10 * 0.050);
    vga_free(&g);
}
END_TEST

START_TEST(test_incast) { /* nodes 1, 2, 3 pull from node 0 at once; node 0 pulls from 1 */
    const sim_net net = net10();
    toy t = {.c = {1e-3, 1e-3, 1e-3, 1e-3}, .peers = (const int[]){1, 0, 0, 0}, .p = 4};
    for (int me = 0; me < 4; me++) {
        vclock_gossip_async g;
        vga_init(&g, 4, me, 1, -1, 0, NB, &net, model(&t));
        const vga_step *r = vga_mine(&g, 0);
        /* one instant A = ℓ: node 0's uplink answers 1, 2, 3 in node order, n/β apart */
        NEAR(r->R, L + RT + (me == 0 ? 1 : me) * X);
        if (me == 0) { /* its readers: each of 1, 2, 3 once, all of version 0 */
            vga_advance_to(&g, INFINITY);
            ck_assert(g.reads[0] == 0 && g.reads[1] == 1 && g.reads[2] == 1 && g.reads[3] == 1 && vga_reads(&g) == 3);
        }
        vga_free(&g);
    }
}
END_TEST

START_TEST(test_versions) { /* node 0 (fast, 10 ms) pulls from node 1 (slow, 1 s) */
    const sim_net net = net10();
    toy t = {.c = {0.010, 1.0}, .p = 2};
    vclock_gossip_async g;
    vga_init(&g, 2, 0, 200, -1, 0, NB, &net, model(&t));
    /* node 1's step 0 ends at 1 s (its reply ~37 ms): version 1 from then on */
    long first1 = -1;
    for (long s = 0; s < 60; s++) {
        const vga_step *r = vga_mine(&g, s);
        ck_assert(r->A >= 2.0 || r->version == (r->A >= 1.0)); /* version 1 between E_1(0) = 1 s and E_1(1) = 2 s */
        if (r->version == 1 && first1 < 0) first1 = s;
        if (first1 < 0) ck_assert(r->A < 1.0);
    }
    ck_assert(first1 > 0);
    vga_free(&g);
    /* node 1 records the reads of its version 0: every pull of node 0 with A < E_1(0) = 1 s */
    vga_init(&g, 2, 1, 200, -1, 0, NB, &net, model(&t));
    const double E0 = vga_mine(&g, 0)->E;
    NEAR(E0, 1.0);
    vga_advance_to(&g, E0);
    ck_assert(g.reads[0] == first1 && g.reads[1] == 0);
    vga_free(&g);
}
END_TEST

START_TEST(test_gone) { /* node 1 fails before its step 2: pulls at A ≥ E_1(1) are answered "gone" */
    const sim_net net = net10();
    toy t = {.c = {0.100, 0.100}, .p = 2};
    vclock_gossip_async g;
    vga_init(&g, 2, 0, 6, 1, 2, NB, &net, model(&t));
    const double step = 0.100; /* compute hides the exchange */
    for (long s = 0; s < 6; s++) {
        const vga_step *r = vga_mine(&g, s);
        NEAR(r->S, s * step);
        ck_assert_msg(r->got == (s < 2), "step %ld got %d", s, r->got);
        if (!r->got) NEAR(r->R, r->A + L); /* "gone": a small answer, nothing booked */
    }
    vga_free(&g);
}
END_TEST

START_TEST(test_meeting) { /* a meeting after 3 steps: both start step 3 at the slower one's end */
    const sim_net net = net10();
    toy t = {.c = {0.100, 0.300}, .p = 2, .every = 3};
    for (int me = 0; me < 2; me++) {
        vclock_gossip_async g;
        vga_init(&g, 2, me, 6, -1, 0, NB, &net, model(&t));
        const double e2 = vga_mine(&g, 2)->E;
        const double M = vga_meet(&g, 3);
        NEAR(M, 0.900); /* node 1: 3 × 300 ms (compute hides every exchange) */
        ck_assert(M >= e2);
        NEAR(vga_mine(&g, 3)->S, M);
        NEAR(vga_meet(&g, 6), 0.900 + 0.900); /* the end is a meeting too */
        vga_free(&g);
    }
}
END_TEST

START_TEST(test_push_pair) { /* push, p = 2, compute 25 ms < n/β: the uplink sets the pace */
    const sim_net net = net10();
    toy t = {.c = {0.025, 0.025}, .p = 2};
    vclock_gossip_async g;
    vga_init_push(&g, 2, 0, 10, -1, 0, NB, &net, model(&t));
    for (long s = 0; s < 10; s++) {
        double x;
        vga_push_start(&g, s, &x);
        /* the take at x: the other node's push of step m arrived at D(m) + α + n/β */
        int got = 0;
        while (vga_push_take(&g, x) == 1) got++;
        ck_assert_msg(got == (s >= 2), "step %ld took %d", s, got); /* 25 + 37.4 ms > 50 ms: the first at step 2 */
        const vga_push *o = vga_push_sent(&g, s);
        NEAR(o->x, x);
        NEAR(o->D, s == 0 ? 0.025 : 0.025 + s * X); /* leaves when the previous push has left the uplink */
        NEAR(o->a, o->D + RT + X);
        /* taken at the other's take of step s + 2, D(s + 1) + 25 ms (its take of step s + 1 comes
         * 25 ms after D(s), before the arrival); the pushes of steps 8 and 9 are taken by nothing */
        ck_assert_msg(o->state == (s <= 7 ? VGA_TAKEN : VGA_NOT_TAKEN), "step %ld: state %d", s, o->state);
        if (s <= 7) NEAR(o->take, o->D + X + 0.025), ck_assert(o->take >= o->a);
    }
    vga_free(&g);
}
END_TEST

START_TEST(test_push_not_taken) { /* the receiver fails before the push arrives: not sent */
    const sim_net net = net10();
    toy t = {.c = {0.100, 0.100}, .p = 2};
    vclock_gossip_async g;
    vga_init_push(&g, 2, 0, 6, 1, 2, NB, &net, model(&t));
    for (long s = 0; s < 6; s++) {
        double x;
        vga_push_start(&g, s, &x);
        NEAR(x, (s + 1) * 0.100);
        while (vga_push_take(&g, x) >= 0) {}
        const vga_push *o = vga_push_sent(&g, s);
        /* node 1 takes at 0.1 and 0.2 s only: node 0's push of step 0 (arriving at 0.137 s) is taken at 0.2 s */
        ck_assert_msg(o->state == (s == 0 ? VGA_TAKEN : VGA_NOT_TAKEN), "step %ld: state %d", s, o->state);
    }
    vga_free(&g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("vclock_gossip_async");
    TCase *tc = tcase_create("vclock_gossip_async");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pair);
    tcase_add_test(tc, test_incast);
    tcase_add_test(tc, test_versions);
    tcase_add_test(tc, test_gone);
    tcase_add_test(tc, test_meeting);
    tcase_add_test(tc, test_push_pair);
    tcase_add_test(tc, test_push_not_taken);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
