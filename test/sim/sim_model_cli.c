/* sim_model_cli.c — the closed forms of src/sim/simmodel.c on the command line, for
 * test/sim/smpi_check.sh (the comparison with SimGrid/SMPI's trace replay):
 *   sim_model_cli preset NAME
 *       prints the preset's per-link latency (s) and bandwidth (bytes/s): "LAT BW"
 *   sim_model_cli ALGO TOPO P BYTES LINK_LAT_S BW_BPS LEAF_SIZE OVERSUB CHUNK_BYTES
 *       prints the seconds of one all-reduce (ALGO: ring, recursive_doubling, rabenseifner, tree)
 *       or broadcast (ALGO: bcast) of BYTES over P hosts on TOPO (flat, fat_tree); ALGO ring_smpi_lr:
 *       the ring plus what SMPI's `lr` adds: when a piece's byte count is not a multiple of P, lr
 *       all-reduces the last (count mod P) bytes separately, with SMPI's reduce + broadcast
 *       (binomial trees, as smpi_check.sh selects) — our tree all-reduce of those bytes.
 * Exit 2 on bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/simmodel.h"

static int lookup(const char *const *names, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "preset") == 0) {
        int k = lookup(sim_network_names, SIM_NET_COUNT, argv[2]);
        double lat, bw;
        if (k < 0 || sim_network_preset((sim_network)k, &lat, &bw, NULL) != 0) {
            fprintf(stderr, "sim_model_cli: no preset '%s'\n", argv[2]);
            return 2;
        }
        printf("%.9g %.9g\n", lat, bw);
        return 0;
    }
    if (argc != 10) {
        fprintf(stderr, "usage: sim_model_cli ALGO TOPO P BYTES LINK_LAT_S BW_BPS LEAF_SIZE OVERSUB CHUNK_BYTES\n"
                        "       sim_model_cli preset NAME\n");
        return 2;
    }
    int bcast = strcmp(argv[1], "bcast") == 0, lr = strcmp(argv[1], "ring_smpi_lr") == 0;
    int algo = bcast || lr ? SIM_AR_RING : lookup(sim_allreduce_names, SIM_AR_COUNT, argv[1]);
    int topo = lookup(sim_topology_names, SIM_TOPO_COUNT, argv[2]);
    int p = atoi(argv[3]);
    if (algo < 0 || topo < 0 || p < 1) {
        fprintf(stderr, "sim_model_cli: bad ALGO '%s', TOPO '%s' or P '%s'\n", argv[1], argv[2], argv[3]);
        return 2;
    }
    sim_net net = {.link_latency_s = atof(argv[5]), .bandwidth_Bps = atof(argv[6]), .topology = (sim_topology)topo,
                   .leaf_size = atoi(argv[7]), .oversubscription = atof(argv[8]), .allreduce = (sim_allreduce)algo,
                   .chunk_bytes = (size_t)strtoull(argv[9], NULL, 10)};
    size_t n = (size_t)strtoull(argv[4], NULL, 10);
    double t = bcast ? sim_bcast_s(&net, p, n) : sim_allreduce_s(&net, p, n);
    if (lr) {
        sim_net tree = net;
        tree.allreduce = SIM_AR_TREE;
        tree.chunk_bytes = 0;
        size_t c = net.chunk_bytes ? net.chunk_bytes : n;
        for (size_t off = 0; off < n; off += c) {
            size_t piece = n - off < c ? n - off : c;
            if (piece % (size_t)p) t += sim_allreduce_s(&tree, p, piece % (size_t)p);
        }
    }
    printf("%.9f\n", t);
    return 0;
}
