/* test_sim.c — the models of sim mode (src/sim/simmodel.c) against hand-derived closed forms:
 * the name tables and presets, the device table's interpolation and extrapolation rule, routes
 * on the flat and the fat-tree topology, every all-reduce algorithm and the broadcast at p a power
 * of two and not, chunking, the fat tree's oversubscription and D-mod-k sharing, and the per-NIC
 * FIFO rule (incast). The same closed forms are checked against SimGrid/SMPI's trace replay by
 * `make check-sim-smpi` (test/sim/smpi_check.sh); the expected values here are the ones that
 * replay gave (docs/simulate-models.md), to the µs its log prints. */
#include <math.h>
#include <string.h>

#include "sim/simmodel.h"
#include "testutil.h"

/* ResNet-18's gradient in fp32 and dsgd-run's chunk (COMM_CHUNK_BYTES): 11 pieces of 4 MiB and
 * one of 620,704 bytes. */
#define N_R18 46758048u
#define CHUNK (4u << 20)
/* 10 GbE as the note's SMPI platform: 5 µs per link (α = 10 µs on a 2-link route), 1.25 GB/s. */
#define LAT 5e-6
#define BW 1.25e9
/* n/β of the whole gradient, and the latency of 12 pieces on a 2-link and a 4-link route. */
#define T_N (46758048.0 / 1.25e9)
#define A12 (12 * 10e-6)
#define A12F (12 * 20e-6)
/* Relative tolerance for closed forms computed two ways in double precision. */
#define REL 1e-12

static sim_net net_flat(sim_allreduce a) {
    return (sim_net){.link_latency_s = LAT, .bandwidth_Bps = BW, .topology = SIM_TOPO_FLAT, .leaf_size = 1,
                     .oversubscription = 1, .allreduce = a, .chunk_bytes = CHUNK};
}
static sim_net net_tree(sim_allreduce a, int leaf, double over) {
    sim_net n = net_flat(a);
    n.topology = SIM_TOPO_FAT_TREE;
    n.leaf_size = leaf;
    n.oversubscription = over;
    return n;
}
#define ck_assert_rel(a, b) ck_assert_close((a), (b), REL * fabs((double)(b)) + 1e-15)

START_TEST(name_tables) {
    const char *dev[] = {"measured", "k20x", "k80", "v100", "a100", "h100"};
    const char *net[] = {"10gbe", "gemini", "ib_fdr", "ib_hdr", "ib_ndr", "custom"};
    const char *topo[] = {"flat", "fat_tree"};
    const char *ar[] = {"ring", "recursive_doubling", "rabenseifner", "tree"};
    ck_assert_int_eq(SIM_DEV_COUNT, 6);
    ck_assert_int_eq(SIM_NET_COUNT, 6);
    ck_assert_int_eq(SIM_TOPO_COUNT, 2);
    ck_assert_int_eq(SIM_AR_COUNT, 4);
    for (int i = 0; i < SIM_DEV_COUNT; i++) ck_assert_str_eq(sim_device_names[i], dev[i]);
    for (int i = 0; i < SIM_NET_COUNT; i++) ck_assert_str_eq(sim_network_names[i], net[i]);
    for (int i = 0; i < SIM_TOPO_COUNT; i++) ck_assert_str_eq(sim_topology_names[i], topo[i]);
    for (int i = 0; i < SIM_AR_COUNT; i++) ck_assert_str_eq(sim_allreduce_names[i], ar[i]);
}
END_TEST

START_TEST(presets) {
    /* per link latency (s), bandwidth (bytes/s): simmodel.c's table with its sources */
    const double want[][2] = {{5e-6, 1.25e9}, {0.7e-6, 6e9}, {0.35e-6, 6.8e9}, {0.3e-6, 25e9}, {0.3e-6, 50e9}};
    for (int i = 0; i < SIM_NET_CUSTOM; i++) {
        double lat = 0, bw = 0;
        const char *src = NULL;
        ck_assert_int_eq(sim_network_preset((sim_network)i, &lat, &bw, &src), 0);
        ck_assert_rel(lat, want[i][0]);
        ck_assert_rel(bw, want[i][1]);
        ck_assert_ptr_nonnull(src);
        ck_assert_int_gt((int)strlen(src), 20);
    }
    double lat = -1;
    ck_assert_int_eq(sim_network_preset(SIM_NET_CUSTOM, &lat, NULL, NULL), -1);
    ck_assert_int_eq(sim_network_preset(SIM_NET_COUNT, NULL, NULL, NULL), -1);
    ck_assert_int_eq(sim_network_preset((sim_network)-1, NULL, NULL, NULL), -1);
    ck_assert(lat == -1); /* untouched */
}
END_TEST

START_TEST(device_table) {
    const char *src = NULL;
    /* K80: the two derived points and the line through them (slope 5.583 ms/image) */
    double s32 = 32 / (49.5 * 3.27), s64 = 64 / (52.0 * 3.27);
    ck_assert_close(sim_device_step_s(SIM_DEV_K80, 32, &src), s32, 1e-6);
    ck_assert_ptr_nonnull(src);
    ck_assert(strncmp(src, "estimate:", 9) == 0);
    ck_assert_close(sim_device_step_s(SIM_DEV_K80, 64, NULL), s64, 1e-6);
    double slope = (0.376382 - 0.197696) / 32;
    ck_assert_close(sim_device_step_s(SIM_DEV_K80, 48, NULL), 0.197696 + 16 * slope, 1e-12); /* between */
    ck_assert_close(sim_device_step_s(SIM_DEV_K80, 2, NULL), 0.197696 - 30 * slope, 1e-12);  /* below */
    ck_assert_close(sim_device_step_s(SIM_DEV_K80, 128, NULL), 0.376382 + 64 * slope, 1e-12); /* above */
    ck_assert_close(sim_device_step_s(SIM_DEV_K20X, 32, NULL), 0.96 * s32, 1e-6);
    /* the current GPUs: 3 ms + b · t_img, t_img = 1 / (ResNet-50 img/s · 3.27) */
    ck_assert_close(sim_device_step_s(SIM_DEV_V100, 1, NULL), 0.003 + 1 / (367 * 3.27), 1e-7);
    ck_assert_close(sim_device_step_s(SIM_DEV_V100, 32, NULL), 0.003 + 32 / (367 * 3.27), 1e-7);
    ck_assert_close(sim_device_step_s(SIM_DEV_A100, 8, NULL), 0.003 + 8 / (938 * 3.27), 1e-7);
    ck_assert_close(sim_device_step_s(SIM_DEV_H100, 2, NULL), 0.003 + 2 / (2 * 938 * 3.27), 1e-7);
    ck_assert_close(sim_device_step_s(SIM_DEV_H100, 512, NULL), 0.003 + 512 / (2 * 938 * 3.27), 1e-6);
    /* every row: positive, increasing in b; at the papers' b the generations are in order */
    for (int d = SIM_DEV_K20X; d < SIM_DEV_COUNT; d++) {
        double prev = 0;
        for (int b = 1; b <= 256; b *= 2) {
            double t = sim_device_step_s((sim_device)d, b, NULL);
            ck_assert_msg(t > prev, "%s at b = %d: %g after %g", sim_device_names[d], b, t, prev);
            prev = t;
        }
    }
    for (int b = 2; b <= 32; b *= 2) {
        ck_assert(sim_device_step_s(SIM_DEV_H100, b, NULL) < sim_device_step_s(SIM_DEV_A100, b, NULL));
        ck_assert(sim_device_step_s(SIM_DEV_A100, b, NULL) < sim_device_step_s(SIM_DEV_V100, b, NULL));
        ck_assert(sim_device_step_s(SIM_DEV_V100, b, NULL) < sim_device_step_s(SIM_DEV_K20X, b, NULL));
        ck_assert(sim_device_step_s(SIM_DEV_K20X, b, NULL) < sim_device_step_s(SIM_DEV_K80, b, NULL));
    }
    /* launch-bound at small b: H100 at b = 2 is within 12 % of its b = 1 time */
    ck_assert(sim_device_step_s(SIM_DEV_H100, 2, NULL) < 1.12 * sim_device_step_s(SIM_DEV_H100, 1, NULL));
    ck_assert(sim_device_step_s(SIM_DEV_MEASURED, 8, NULL) == -1);
    ck_assert(sim_device_step_s(SIM_DEV_V100, 0, NULL) == -1);
    ck_assert(sim_device_step_s(SIM_DEV_COUNT, 8, NULL) == -1);
}
END_TEST

START_TEST(routes) {
    sim_net f = net_flat(SIM_AR_RING), t = net_tree(SIM_AR_RING, 16, 1);
    ck_assert(sim_route_latency_s(&f, 3, 3) == 0);
    ck_assert_rel(sim_route_latency_s(&f, 0, 127), 10e-6);
    ck_assert_rel(sim_route_latency_s(&t, 0, 15), 10e-6);  /* one leaf */
    ck_assert_rel(sim_route_latency_s(&t, 15, 16), 20e-6); /* leaf 0 -> leaf 1: 4 links */
    ck_assert_rel(sim_route_latency_s(&t, 127, 0), 20e-6);
    ck_assert(sim_p2p_s(&f, 5, 5, 1000) == 0);
    /* the note's SMPI point-to-point table: 10 µs + n / 1.25 GB/s */
    ck_assert_rel(sim_p2p_s(&f, 0, 64, 1), 10e-6 + 1 / BW);
    ck_assert_rel(sim_p2p_s(&f, 0, 64, 4u << 20), 3365.4432e-6);
    ck_assert_rel(sim_p2p_s(&t, 0, 64, 4u << 20), 20e-6 + 4194304 / BW);
}
END_TEST

START_TEST(ring) {
    sim_net f = net_flat(SIM_AR_RING);
    /* p = 32, flat 10 GbE, 12 chunks: 2(p−1)·12·α + 2(p−1)/p · n/β = 79.914974 ms (the note's α-β
     * number, 79.92 ms; SMPI's lr replay 79.924 ms, its extra 9 µs the self-copy and wtime) */
    ck_assert_rel(sim_allreduce_s(&f, 32, N_R18), 62 * A12 + 62.0 / 32 * T_N);
    ck_assert_close(sim_allreduce_s(&f, 32, N_R18), 79.914974e-3, 1e-9);
    ck_assert_rel(sim_allreduce_s(&f, 24, N_R18), 46 * A12 + 46.0 / 24 * T_N); /* not a power of two */
    ck_assert_rel(sim_allreduce_s(&f, 2, N_R18), 2 * A12 + T_N);
    /* one piece (chunk_bytes 0): 2(p−1)·α + 2(p−1)/p · n/β */
    f.chunk_bytes = 0;
    ck_assert_rel(sim_allreduce_s(&f, 32, N_R18), 62 * 10e-6 + 62.0 / 32 * T_N);
    /* fat tree, 8 hosts per leaf: every step has a message between leaves (4 links) */
    sim_net t = net_tree(SIM_AR_RING, 8, 1);
    ck_assert_rel(sim_allreduce_s(&t, 32, N_R18), 62 * A12F + 62.0 / 32 * T_N);
    /* one message leaves each leaf per step: oversubscription 4 does not slow it */
    t.oversubscription = 4;
    ck_assert_rel(sim_allreduce_s(&t, 32, N_R18), 62 * A12F + 62.0 / 32 * T_N);
}
END_TEST

START_TEST(recursive_doubling) {
    sim_net f = net_flat(SIM_AR_RECURSIVE_DOUBLING);
    ck_assert_rel(sim_allreduce_s(&f, 32, N_R18), 5 * (A12 + T_N)); /* 187.632 ms */
    ck_assert_rel(sim_allreduce_s(&f, 8, N_R18), 3 * (A12 + T_N));
    /* p = 24: MPICH's fold of 8 extras into 16, 4 exchanges, the result back: 6 steps */
    ck_assert_rel(sim_allreduce_s(&f, 24, N_R18), 6 * (A12 + T_N));
    ck_assert_rel(sim_allreduce_s(&f, 3, N_R18), 3 * (A12 + T_N));
    /* fat tree 8/leaf, 4:1 at p = 32: distances 1, 2, 4 inside a leaf; 8, 16 leave it with all
     * 8 hosts through 2 uplinks (dst mod 2), 4 messages each: β/4. SMPI: 412.312 ms */
    sim_net t = net_tree(SIM_AR_RECURSIVE_DOUBLING, 8, 4);
    ck_assert_rel(sim_allreduce_s(&t, 32, N_R18), 3 * (A12 + T_N) + 2 * (A12F + 4 * T_N));
    ck_assert_close(sim_allreduce_s(&t, 32, N_R18), 412.311e-3, 2e-6);
    /* full bisection, p = 24: the exchange at distance 8 (new ranks) sends leaf 2's 8 hosts to
     * ranks 1, 3, …, 15: D-mod-k puts two on each of 4 uplinks, β/2. SMPI: 262.806 ms */
    t.oversubscription = 1;
    ck_assert_rel(sim_allreduce_s(&t, 24, N_R18), 4 * (A12 + T_N) + (A12F + T_N) + (A12F + 2 * T_N));
    ck_assert_close(sim_allreduce_s(&t, 24, N_R18), 262.805e-3, 2e-6);
    /* p = 32 at full bisection: no sharing, only the longer routes (SMPI: 187.873 ms) */
    ck_assert_rel(sim_allreduce_s(&t, 32, N_R18), 3 * (A12 + T_N) + 2 * (A12F + T_N));
}
END_TEST

START_TEST(rabenseifner) {
    sim_net f = net_flat(SIM_AR_RABENSEIFNER);
    /* 2 log2 p steps of latency, 2(1 − 1/p) n/β: 73.675 ms at p = 32 */
    ck_assert_rel(sim_allreduce_s(&f, 32, N_R18), 10 * A12 + 2 * 31.0 / 32 * T_N);
    /* p = 24: fold and unfold of the whole vector, then the 16-rank halving/doubling */
    ck_assert_rel(sim_allreduce_s(&f, 24, N_R18), 2 * (A12 + T_N) + 8 * A12 + 2 * 15.0 / 16 * T_N);
    ck_assert_close(sim_allreduce_s(&f, 128, N_R18), 75.908e-3, 2e-6); /* SMPI rab_rdb: 75.911 */
    /* fat tree 16/leaf 4:1 at p = 128: the steps at distance >= 16 send n/32, n/64, n/128 across
     * leaves at β/4 (16 messages on 4 uplinks), both directions (halving and doubling) */
    sim_net t = net_tree(SIM_AR_RABENSEIFNER, 16, 4);
    double in = 8 * A12 + 2 * (1.0 / 2 + 1.0 / 4 + 1.0 / 8 + 1.0 / 16) * T_N;
    double out = 6 * A12F + 2 * 4 * (1.0 / 32 + 1.0 / 64 + 1.0 / 128) * T_N;
    ck_assert_rel(sim_allreduce_s(&t, 128, N_R18), in + out);
    ck_assert_close(sim_allreduce_s(&t, 128, N_R18), 88.902e-3, 2e-6); /* SMPI: 88.907 */
}
END_TEST

START_TEST(tree_and_bcast) {
    sim_net f = net_flat(SIM_AR_TREE);
    /* binomial reduce + binomial broadcast: 2 ⌈log2 p⌉ steps of the whole vector */
    ck_assert_rel(sim_allreduce_s(&f, 32, N_R18), 10 * (A12 + T_N));
    ck_assert_rel(sim_allreduce_s(&f, 24, N_R18), 10 * (A12 + T_N));
    ck_assert_rel(sim_allreduce_s(&f, 5, N_R18), 6 * (A12 + T_N));
    ck_assert_rel(sim_bcast_s(&f, 32, N_R18), 5 * (A12 + T_N));
    ck_assert_rel(sim_bcast_s(&f, 33, N_R18), 6 * (A12 + T_N));
    ck_assert_rel(sim_bcast_s(&f, 2, 1000), 10e-6 + 1000 / BW);
    /* fat tree 16/leaf at p = 128: distances 64, 32, 16 cross leaves, 8 … 1 do not */
    sim_net t = net_tree(SIM_AR_TREE, 16, 1);
    ck_assert_rel(sim_bcast_s(&t, 128, N_R18), 3 * (A12F + T_N) + 4 * (A12 + T_N)); /* SMPI: 263.046 */
    ck_assert_rel(sim_allreduce_s(&t, 128, N_R18), 2 * (3 * (A12F + T_N) + 4 * (A12 + T_N)));
}
END_TEST

START_TEST(trivial_cases) {
    for (int a = 0; a < SIM_AR_COUNT; a++) {
        sim_net f = net_flat((sim_allreduce)a), t = net_tree((sim_allreduce)a, 4, 2);
        ck_assert(sim_allreduce_s(&f, 1, N_R18) == 0);
        ck_assert(sim_allreduce_s(&t, 1, N_R18) == 0);
        ck_assert(sim_allreduce_s(&f, 8, 0) == 0);
        ck_assert(sim_bcast_s(&f, 1, N_R18) == 0);
        /* p = 2, one small message each way: α + n/β per step (ring: 2 steps of n/2) */
        double two = sim_allreduce_s(&f, 2, 4096);
        ck_assert_msg(two > 0 && two <= 2 * (10e-6 + 4096 / BW) + 1e-15, "%s p = 2: %g", sim_allreduce_names[a], two);
    }
}
END_TEST

START_TEST(nics_fifo) {
    sim_net f = net_flat(SIM_AR_RING);
    double up[8] = {0}, down[8] = {0};
    sim_nics nics = {.p = 8, .free_up = up, .free_down = down};
    const size_t n = 1000000;
    const double s = n / BW, a = 10e-6;
    /* idle NICs: t_send + sim_p2p_s */
    /* (each arrival into a local first: the assertion macros evaluate their argument again
     * in the failure message, and sim_nics_send books the NICs) */
    double t = sim_nics_send(&nics, &f, 1, 2, n, 0.5);
    ck_assert_rel(t, 0.5 + sim_p2p_s(&f, 1, 2, n));
    ck_assert_rel(up[1], 0.5 + s);
    ck_assert_rel(down[2], 0.5 + a + s);
    /* incast: 4 idle senders to rank 0 at t = 1: the k-th arrives at 1 + α + k·n/β */
    for (int k = 1; k <= 4; k++) {
        t = sim_nics_send(&nics, &f, 3 + k, 0, n, 1.0);
        ck_assert_rel(t, 1.0 + a + k * s);
    }
    /* one sender, two receivers at once: the second waits for the uplink */
    double t1 = sim_nics_send(&nics, &f, 3, 5, n, 2.0), t2 = sim_nics_send(&nics, &f, 3, 6, n, 2.0);
    ck_assert_rel(t1, 2.0 + a + s);
    ck_assert_rel(t2, 2.0 + s + a + s);
    /* a later message to an idle receiver: no queueing */
    t = sim_nics_send(&nics, &f, 7, 2, n, 3.0);
    ck_assert_rel(t, 3.0 + a + s);
    /* a == b: arrives at once, books nothing */
    double u3 = up[3];
    t = sim_nics_send(&nics, &f, 3, 3, n, 4.0);
    ck_assert(t == 4.0);
    ck_assert(up[3] == u3);
    /* fat tree: the route's latency (4 links between leaves) */
    sim_net ft = net_tree(SIM_AR_RING, 4, 1);
    double up2[8] = {0}, down2[8] = {0};
    sim_nics n2 = {.p = 8, .free_up = up2, .free_down = down2};
    t = sim_nics_send(&n2, &ft, 0, 7, n, 0);
    ck_assert_rel(t, 20e-6 + s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("models");
    tcase_add_test(tc, name_tables);
    tcase_add_test(tc, presets);
    tcase_add_test(tc, device_table);
    tcase_add_test(tc, routes);
    tcase_add_test(tc, ring);
    tcase_add_test(tc, recursive_doubling);
    tcase_add_test(tc, rabenseifner);
    tcase_add_test(tc, tree_and_bcast);
    tcase_add_test(tc, trivial_cases);
    tcase_add_test(tc, nics_fifo);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
