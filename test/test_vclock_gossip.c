/* test_vclock_gossip.c — lock-step gossip's exchange on the virtual clock in sim mode
 * (src/train/vclock_gossip.h, docs/simulate.md "Gossip") without MPI: the schedule of one step
 * against closed forms on the flat 10 GbE preset (α = 2 links × 5 µs, β = 1.25 GB/s, n = ResNet-18's
 * 46,758,048 bytes): one exchange on idle NICs, incast at a node that serves k pulls (its uplink
 * sends them one after the other: the i-th arrives at α + i·n/β), k pushes into one node (its
 * downlink), the later start of the two ends, failed nodes (no message), the FIFO order by
 * leaving time whatever the rank order, and the charge after the compute.
 * test/test_sim_gossip.sh runs the clock in real runs (a reference model, determinism, resume). */
#include "sim/simmodel.h"
#include "testutil.h"
#include "train/vclock.h"
#include "train/vclock_gossip.h"

#include <math.h>

#define NB ((size_t)4 * 11689512u)
static const double A = 2 * 5e-6, X = (double)NB / 1.25e9; /* route latency, n/β */

static sim_net net10(void) {
    return (sim_net){.link_latency_s = 5e-6, .bandwidth_Bps = 1.25e9, .topology = SIM_TOPO_FLAT, .leaf_size = 16,
                     .oversubscription = 1, .allreduce = SIM_AR_RING, .chunk_bytes = 4u << 20};
}

static void set(vclock_gossip *vg, const double *start, const int *peer) {
    for (int k = 0; k < vg->p; k++) vg->start[k] = start[k], vg->peer[k] = peer[k];
}

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-12, "%.15g vs %.15g", (double)(a), (double)(b))

START_TEST(test_pair) { /* p = 2: one message each way, full duplex: both done at α + n/β */
    const sim_net net = net10();
    vclock_gossip vg;
    vclock_gossip_init(&vg, 2, NB);
    set(&vg, (double[]){0, 0}, (int[]){1, 0});
    for (int push = 0; push < 2; push++)
        for (int me = 0; me < 2; me++) NEAR(vclock_gossip_schedule(&vg, &net, push, me), A + X);
    NEAR(A + X, 0.03741643840);
    /* the later start of the two ends: a message leaves when both have begun the step */
    set(&vg, (double[]){0.5, 0.0}, (int[]){1, 0});
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 1), 0.5 + A + X);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 0), 0.5 + A + X);
    vclock_gossip_free(&vg);
}
END_TEST

START_TEST(test_incast_pull) { /* nodes 0, 2, 3 pull from node 1; node 1 pulls from 0 */
    const sim_net net = net10();
    vclock_gossip vg;
    vclock_gossip_init(&vg, 4, NB);
    set(&vg, (double[]){0, 0, 0, 0}, (int[]){1, 0, 1, 1});
    /* node 1's uplink sends to 0, 2, 3 in rank order (same leaving time): arrivals α + X, α + 2X, α + 3X */
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 0), A + X);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 2), A + 2 * X);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 3), A + 3 * X);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 1), A + 3 * X); /* waits for its last send */
    /* a node that starts first is served first: node 3 ahead of 0 and 2 */
    set(&vg, (double[]){0.001, 0, 0.001, 0}, (int[]){1, 0, 1, 1});
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 3), A + X);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 0), A + 2 * X);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 2), A + 3 * X);
    /* node 1 failed (or is pulled from nobody alive): no message to or from it */
    set(&vg, (double[]){0, 0, 0, 0}, (int[]){-1, -1, -1, 0});
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 1), 0.0);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 3), A + X);
    NEAR(vclock_gossip_schedule(&vg, &net, 0, 0), A + X);
    vclock_gossip_free(&vg);
}
END_TEST

START_TEST(test_incast_push) { /* nodes 0, 2, 3 push to node 1; node 1 pushes to 2 */
    const sim_net net = net10();
    vclock_gossip vg;
    vclock_gossip_init(&vg, 4, NB);
    set(&vg, (double[]){0, 0, 0, 0}, (int[]){1, 2, 1, 1});
    /* node 1's downlink takes 0, 2, 3 one after the other; node 1 → 2 goes in parallel */
    NEAR(vclock_gossip_schedule(&vg, &net, 1, 0), A + X);
    NEAR(vclock_gossip_schedule(&vg, &net, 1, 2), A + 2 * X);
    NEAR(vclock_gossip_schedule(&vg, &net, 1, 3), A + 3 * X);
    NEAR(vclock_gossip_schedule(&vg, &net, 1, 1), A + 3 * X);
    vclock_gossip_free(&vg);
}
END_TEST

START_TEST(test_charge) { /* the exchange overlaps the compute: now = max(start + compute, end) */
    vclock vc = {.on = 1, .step_s = 0.025, .now = 1.0};
    vclock_compute(&vc, 0, 0, 0);
    vclock_gossip_charge(&vc, 1.0 + A + X);
    NEAR(vc.now, 1.0 + A + X);
    NEAR(vc.v.comm_s, A + X - 0.025);
    NEAR(vc.v.wait_s, A + X - 0.025);
    vclock_step_end(&vc, 0);
    NEAR(vc.v.step_s, A + X);
    vclock_compute(&vc, 1, 0, 0.1); /* a straggler: compute + delay hides the exchange */
    const double before = vc.now;
    vclock_gossip_charge(&vc, vc.step_start + A + X);
    ck_assert(vc.now == before);
    NEAR(vc.v.comm_s, A + X - 0.025);
}
END_TEST

int main(void) {
    Suite *s = suite_create("vclock_gossip");
    TCase *tc = tcase_create("vclock_gossip");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pair);
    tcase_add_test(tc, test_incast_pull);
    tcase_add_test(tc, test_incast_push);
    tcase_add_test(tc, test_charge);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
