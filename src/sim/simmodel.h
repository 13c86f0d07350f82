/* simmodel.h — the models of `sim` mode's virtual clock (issue 25, docs/simulate.md): how long the
 * target cluster takes for one step's compute and for each message or collective, in seconds of
 * the target's time. Pure functions of their arguments: no MPI, no clock, no state beyond what the
 * caller passes (the NIC occupancy of sim_nics). A leaf library like util/: config/ reads its
 * name tables, src/train/ and the methods charge its times to a rank's virtual clock.
 *
 * Units: seconds, bytes, bytes per second. Sizes are the *modelled* sizes (ResNet-18's
 * 11,689,512 parameters = 46,758,048 bytes in fp32), never the proxy model's buffers.
 *
 * The network model is α-β (Hockney): a message of n bytes between two hosts takes
 * α(route) + n/β, with α = the route's links × the per-link latency; SMPI with its calibration
 * factors set to 1 and cross-traffic off computes exactly this (../shared/notes/simulation.md
 * §1.2), which is how test/sim/ validates the closed forms below against SMPI's trace replay. */
#ifndef DSGD_SIMMODEL_H
#define DSGD_SIMMODEL_H

#include <stddef.h>

/* sim.device: whose step time is charged for one node's forward + backward + update of
 * ResNet-18 at per-node minibatch b. MEASURED: the rank's own measured compute (validation). */
typedef enum { SIM_DEV_MEASURED, SIM_DEV_K20X, SIM_DEV_K80, SIM_DEV_V100, SIM_DEV_A100, SIM_DEV_H100, SIM_DEV_COUNT } sim_device;
extern const char *const sim_device_names[SIM_DEV_COUNT]; /* "measured", "k20x", "k80", "v100", "a100", "h100" */

/* sim.network: a preset's per-link latency and bandwidth (sim_network_preset). CUSTOM: the keys
 * sim.latency_us and sim.bandwidth_gbps alone. */
typedef enum { SIM_NET_10GBE, SIM_NET_GEMINI, SIM_NET_IB_FDR, SIM_NET_IB_HDR, SIM_NET_IB_NDR, SIM_NET_CUSTOM, SIM_NET_COUNT } sim_network;
extern const char *const sim_network_names[SIM_NET_COUNT]; /* "10gbe", "gemini", "ib_fdr", "ib_hdr", "ib_ndr", "custom" */

/* sim.topology: FLAT — every host on one non-blocking switch (a route is host-up + host-down:
 * 2 links); FAT_TREE — two levels, leaf_size hosts per leaf switch (rank r on leaf
 * r / leaf_size), the leaves' uplinks oversubscribed by `oversubscription` (1 = full
 * bisection): a route inside a leaf is 2 links, between leaves 4, and a flow between leaves
 * gets at most β / oversubscription when every host of its leaf sends out of the leaf at once.
 * Flows between leaves are routed D-mod-k (through spine dst mod (leaf_size / oversubscription),
 * as SimGrid's FAT_TREE and InfiniBand's static fat-tree routing), so two flows of one step can
 * share an uplink even at full bisection; simmodel.c's step_bw states the rule. */
typedef enum { SIM_TOPO_FLAT, SIM_TOPO_FAT_TREE, SIM_TOPO_COUNT } sim_topology;
extern const char *const sim_topology_names[SIM_TOPO_COUNT]; /* "flat", "fat_tree" */

/* sim.allreduce: the target's all-reduce algorithm (NCCL and Open MPI choose among these):
 * RING — reduce-scatter + all-gather around a ring, 2(p−1) steps of n/p bytes;
 * RECURSIVE_DOUBLING — log2 p exchanges of the whole vector (p a power of two; otherwise the
 *   MPICH rule: the extra ranks first fold into the others and get the result back at the end);
 * RABENSEIFNER — recursive halving reduce-scatter + recursive doubling all-gather
 *   (2 log2 p steps, n/2, n/4, … bytes; same rule for p not a power of two);
 * TREE — binomial-tree reduce to rank 0 then binomial-tree broadcast (2 ⌈log2 p⌉ steps of n). */
typedef enum { SIM_AR_RING, SIM_AR_RECURSIVE_DOUBLING, SIM_AR_RABENSEIFNER, SIM_AR_TREE, SIM_AR_COUNT } sim_allreduce;
extern const char *const sim_allreduce_names[SIM_AR_COUNT]; /* "ring", "recursive_doubling", "rabenseifner", "tree" */

/* The network as the models see it (filled from the sim group by the caller). */
typedef struct {
    double link_latency_s;   /* per link, s (a route of k links costs k · link_latency_s) */
    double bandwidth_Bps;    /* per host NIC and per link, bytes/s, each direction (full duplex) */
    sim_topology topology;
    int leaf_size;           /* FAT_TREE: hosts per leaf switch (>= 1) */
    double oversubscription; /* FAT_TREE: >= 1 */
    sim_allreduce allreduce;
    size_t chunk_bytes;      /* a collective is run as ceil(n / chunk_bytes) sequential pieces
                                (dsgd-run's COMM_CHUNK_BYTES = 4 MiB); 0: one piece */
} sim_net;

/* A preset's per-link latency (s) and bandwidth (bytes/s) and where the numbers come from
 * (a citation, one line). Returns 0, or -1 for SIM_NET_CUSTOM / out of range. */
int sim_network_preset(sim_network n, double *link_latency_s, double *bandwidth_Bps, const char **source);

/* One node's compute time (s) on `d` for ResNet-18 (224², fp32 unless the table says otherwise:
 * A100 and H100 are TF32) at per-node minibatch b >= 1: the table's value at b, interpolated
 * linearly in b between its points and extrapolated linearly outside them with the slope (the
 * per-image time) of the nearest end's segment. *source (may be NULL) gets the table row's
 * citation ("estimate: …" where the row is derived, which is every row today: simmodel.c and
 * docs/simulate-models.md give the rules). Returns -1 for SIM_DEV_MEASURED, a d out of range
 * or b < 1. */
double sim_device_step_s(sim_device d, int b, const char **source);

/* Latency of the route between hosts a and b (0-based ranks, one rank per host): links ×
 * link_latency_s; 0 when a == b. */
double sim_route_latency_s(const sim_net *net, int a, int b);

/* One point-to-point message of n bytes from a to b on an idle network: α(a,b) + n/β. */
double sim_p2p_s(const sim_net *net, int a, int b, size_t n);

/* An all-reduce of n bytes over p hosts (ranks 0..p-1 in ring order) with net->allreduce, every
 * host starting at the same time: the closed form of the algorithm's steps on net's topology
 * (each step as long as its slowest message: latency of its longest route + bytes / the
 * bandwidth that route gets), summed over ceil(n / chunk_bytes) pieces. 0 when p == 1 or
 * n == 0. Cost: O(p) per step of the algorithm, ~1–200 µs at p = 128–1024 (measured on a loaded
 * 2-core VM); the result depends only on the arguments, so a caller can compute it once per
 * run. docs/simulate-models.md has every algorithm's steps and the check against SMPI. */
double sim_allreduce_s(const sim_net *net, int p, size_t n);

/* A broadcast of n bytes from rank 0 to p hosts (binomial tree, as MPICH/Open MPI for large p):
 * ⌈log2 p⌉ steps of each of the ceil(n / chunk_bytes) pieces, as sim_allreduce_s (dsgd-run's
 * broadcasts are chunked too). 0 when p == 1 or n == 0. For the methods' start and a PS's pull
 * in later steps. */
double sim_bcast_s(const sim_net *net, int p, size_t n);

/* Per-NIC occupancy for the asynchronous methods' messages: when each host's sending and
 * receiving sides are next free (virtual seconds). A message is serialised on the sender's
 * uplink and the receiver's downlink in FIFO order, which models incast at a busy parameter
 * server or gossip peer. The caller owns the arrays (2 · p doubles, zeroed at the start). */
typedef struct {
    int p;
    double *free_up;   /* (p) */
    double *free_down; /* (p) */
} sim_nics;

/* A message of n bytes sent by a at virtual time t_send to b: returns its arrival time under
 * FIFO serialisation on a's uplink and b's downlink (n/β each), and books both NICs:
 *   start = max(t_send, free_up[a]);  free_up[a] = start + n/β;
 *   arrive = max(start + α(a,b) + n/β, free_down[b] + n/β);  free_down[b] = arrive.
 * With idle NICs: t_send + sim_p2p_s; k idle senders to one receiver at the same t: the i-th
 * call's message arrives at t + α + i·n/β. a == b: t_send, nothing booked. The order of calls
 * is the FIFO order (the caller makes it deterministic). docs/simulate-models.md. */
double sim_nics_send(sim_nics *nics, const sim_net *net, int a, int b, size_t n, double t_send);

/* sim_nics_send's two halves, for callers whose ends live on different ranks (the server methods:
 * each rank books only its own NICs). Sender: a message of n bytes ready at t_send starts on the
 * uplink at the returned time, max(t_send, *free_up), and *free_up = start + n/β. Receiver: that
 * message, started at `start` on a's uplink, arrives at b at the returned time,
 * max(start + α(a,b) + n/β, *free_down + n/β), and *free_down = it. The same arithmetic as
 * sim_nics_send, bit for bit. */
double sim_nic_out(double *free_up, const sim_net *net, double t_send, double n);
double sim_nic_in(double *free_down, const sim_net *net, int a, int b, double start, double n);

#endif
