/* simmodel.c — the models of sim mode's virtual clock (simmodel.h): the device step-time table,
 * the network presets, the topology's routes and the closed forms of the all-reduce algorithms
 * and the broadcast, and the per-NIC FIFO occupancy of the asynchronous methods' messages.
 * docs/simulate-models.md gives every formula with its sources and limits, and the validation
 * against SimGrid/SMPI's trace replay (test/sim/smpi_check.sh). */
#include "sim/simmodel.h"

#include <math.h>

const char *const sim_device_names[SIM_DEV_COUNT] = {"measured", "k20x", "k80", "v100", "a100", "h100"};
const char *const sim_network_names[SIM_NET_COUNT] = {"10gbe", "gemini", "ib_fdr", "ib_hdr", "ib_ndr", "custom"};
const char *const sim_topology_names[SIM_TOPO_COUNT] = {"flat", "fat_tree"};
const char *const sim_allreduce_names[SIM_AR_COUNT] = {"ring", "recursive_doubling", "rabenseifner", "tree"};

/* ---- network presets -------------------------------------------------------------------------
 * Per link: a route on the flat topology is 2 links (host-up, host-down), so the end-to-end α of
 * a preset is twice its link latency; the per-link value is half a published end-to-end MPI
 * latency. Bandwidth: the link's data rate after line coding, bytes/s, per direction. */
static const struct {
    double link_latency_s, bandwidth_Bps;
    const char *source;
} presets[SIM_NET_CUSTOM] = {
    [SIM_NET_10GBE] = {5e-6, 1.25e9,
                       "10 GbE: 10 Gb/s = 1.25 GB/s (IEEE 802.3ae); 5 us per link, 10 us end to end "
                       "(../shared/notes/simulation.md's SMPI platform)"},
    [SIM_NET_GEMINI] = {0.75e-6, 6.0e9,
                        "Cray Gemini (Titan, Cray XK7): ~1.5 us MPI latency end to end, ~6 GB/s "
                        "per direction (Alverson et al., Hot Interconnects 2010)"},
    [SIM_NET_IB_FDR] = {0.35e-6, 6.8e9,
                        "InfiniBand 4x FDR: 56 Gb/s signalling, 54.5 Gb/s after 64b/66b = 6.8 GB/s; "
                        "~0.7 us MPI latency end to end (Mellanox ConnectX-3)"},
    [SIM_NET_IB_HDR] = {0.3e-6, 25e9,
                        "InfiniBand 4x HDR: 200 Gb/s = 25 GB/s; ~0.6 us MPI latency end to end "
                        "(NVIDIA ConnectX-6)"},
    [SIM_NET_IB_NDR] = {0.3e-6, 50e9,
                        "InfiniBand 4x NDR: 400 Gb/s = 50 GB/s; ~0.6 us MPI latency end to end "
                        "(NVIDIA ConnectX-7)"},
};

int sim_network_preset(sim_network n, double *link_latency_s, double *bandwidth_Bps, const char **source) {
    if ((int)n < 0 || n >= SIM_NET_CUSTOM) return -1;
    if (link_latency_s) *link_latency_s = presets[n].link_latency_s;
    if (bandwidth_Bps) *bandwidth_Bps = presets[n].bandwidth_Bps;
    if (source) *source = presets[n].source;
    return 0;
}

/* ---- device step times -----------------------------------------------------------------------
 * One row per device: ResNet-18, 224x224, fp32, one GPU, forward + backward + SGD update, seconds
 * per step at per-node minibatch b (points in increasing b). */
#define SIM_DEV_MAXPTS 8
static const struct {
    int n;
    int b[SIM_DEV_MAXPTS];
    double s[SIM_DEV_MAXPTS];
    const char *source;
} devices[SIM_DEV_COUNT] = {
    [SIM_DEV_K20X] = {4, {1, 32, 64, 128}, {0.0100, 0.1116, 0.2180, 0.4308},
                      "estimate: 3.4 ms/image (K40-class, cnn-benchmarks scaled by peak) + 6.6 ms per step"},
    [SIM_DEV_K80] = {4, {1, 32, 64, 128}, {0.0110, 0.1282, 0.2492, 0.4916},
                     "estimate: one GK210, 3.8 ms/image + 7.2 ms per step"},
    [SIM_DEV_V100] = {4, {1, 32, 64, 128}, {0.0050, 0.0350, 0.0660, 0.1280},
                      "estimate: 0.97 ms/image + 4 ms per step"},
    [SIM_DEV_A100] = {4, {1, 32, 64, 128}, {0.0040, 0.0210, 0.0385, 0.0735},
                      "estimate: 0.55 ms/image + 3.5 ms per step"},
    [SIM_DEV_H100] = {4, {1, 32, 64, 128}, {0.0035, 0.0145, 0.0258, 0.0484},
                      "estimate: 0.35 ms/image + 3.2 ms per step"},
};

double sim_device_step_s(sim_device d, int b, const char **source) {
    if ((int)d <= SIM_DEV_MEASURED || d >= SIM_DEV_COUNT || b < 1) return -1;
    const int n = devices[d].n;
    const int *xb = devices[d].b;
    const double *ys = devices[d].s;
    if (source) *source = devices[d].source;
    if (n == 1) return ys[0] * b / xb[0];
    /* The segment [k, k+1] holding b, or the nearest end's segment outside the points. */
    int k = 0;
    while (k < n - 2 && b > xb[k + 1]) k++;
    double slope = (ys[k + 1] - ys[k]) / (xb[k + 1] - xb[k]);
    return ys[k] + slope * (b - xb[k]);
}

/* ---- topology ------------------------------------------------------------------------------- */

static int leaf_of(const sim_net *net, int r) {
    return net->topology == SIM_TOPO_FAT_TREE && net->leaf_size > 0 ? r / net->leaf_size : 0;
}

static int route_links(const sim_net *net, int a, int b) {
    if (a == b) return 0;
    return leaf_of(net, a) == leaf_of(net, b) ? 2 : 4;
}

double sim_route_latency_s(const sim_net *net, int a, int b) {
    return route_links(net, a, b) * net->link_latency_s;
}

double sim_p2p_s(const sim_net *net, int a, int b, size_t n) {
    if (a == b) return 0;
    return sim_route_latency_s(net, a, b) + (double)n / net->bandwidth_Bps;
}

/* ---- one step of a collective ----------------------------------------------------------------
 * A step is a set of simultaneous messages, at most one sent and one received per rank; it lasts
 * as long as its slowest message: route latency + bytes / the bandwidth that message gets.
 *
 * Bandwidth on the fat tree. A leaf switch has u = max(1, floor(leaf_size / oversubscription))
 * uplinks, one to each spine, each of capacity leaf_size·β / (oversubscription·u) (= β when
 * oversubscription divides leaf_size), and each spine one downlink to every leaf. A message
 * between leaves is routed D-mod-k, as SimGrid's FAT_TREE and InfiniBand's static fat-tree
 * routing (OpenSM ftree) do: up through the spine `dst mod u`, down that spine's link into dst's
 * leaf. A link carrying k messages of the step gives each 1/k of its capacity; a message gets the
 * least of β, its uplink's share and its downlink's share. With oversubscription 1 and the
 * contiguous power-of-two patterns (ring, recursive doubling/halving, binomial tree at p = 2^k)
 * no two messages share a link and every message gets β; MPICH's renumbering for p not a power
 * of two can put two messages on one uplink (test/sim/smpi_check.sh's p = 24 rows).
 *
 * The patterns (dst < 0: r sends nothing in this step; src: who sends to r, < 0 none):
 *   STEP_SHIFT   r -> (r + 1) mod p                              (ring)
 *   STEP_XOR     r <-> old rank of (new rank of r) ^ arg           (recursive doubling / halving)
 *   STEP_FOLD    even r < 2·rem -> r + 1  (arg = rem)              (MPICH's fold of the extras)
 *   STEP_UNFOLD  odd r < 2·rem -> r − 1   (arg = rem)              (and their result back)
 *   STEP_REDUCE  r -> r − arg if r has bit arg and no lower bit   (binomial reduce to 0)
 *   STEP_BCAST   r -> r + arg if r is a multiple of 2·arg, r + arg < p (binomial broadcast from 0) */
enum { STEP_SHIFT, STEP_XOR, STEP_FOLD, STEP_UNFOLD, STEP_REDUCE, STEP_BCAST };

/* The largest power of two <= p. */
static int pof2_floor(int p) {
    int q = 1;
    while (q * 2 <= p) q *= 2;
    return q;
}

/* MPICH's numbering for p not a power of two (rem = p − pof2): ranks < 2·rem pair up, the odd one
 * of each pair keeps going as new rank r/2; the others are new rank r − rem. -1: folded out. */
static int new_rank(int r, int rem) {
    if (r < 2 * rem) return r % 2 ? r / 2 : -1;
    return r - rem;
}
static int old_rank(int nr, int rem) {
    return nr < rem ? nr * 2 + 1 : nr + rem;
}

static int step_dst(int kind, int p, int arg, int r) {
    int rem = p - pof2_floor(p);
    switch (kind) {
    case STEP_SHIFT: return (r + 1) % p;
    case STEP_XOR: {
        int nr = new_rank(r, rem);
        return nr < 0 ? -1 : old_rank(nr ^ arg, rem);
    }
    case STEP_FOLD: return r < 2 * arg && r % 2 == 0 ? r + 1 : -1;
    case STEP_UNFOLD: return r < 2 * arg && r % 2 == 1 ? r - 1 : -1;
    case STEP_REDUCE: return (r & arg) && (r & (arg - 1)) == 0 ? r - arg : -1;
    case STEP_BCAST: return r % (2 * arg) == 0 && r + arg < p ? r + arg : -1;
    }
    return -1;
}

static int step_src(int kind, int p, int arg, int r) {
    switch (kind) {
    case STEP_SHIFT: return (r + p - 1) % p;
    case STEP_XOR: return step_dst(kind, p, arg, r); /* an exchange */
    case STEP_FOLD: return step_dst(STEP_UNFOLD, p, arg, r);
    case STEP_UNFOLD: return step_dst(STEP_FOLD, p, arg, r);
    case STEP_REDUCE: return (r & (2 * arg - 1)) == 0 && r + arg < p ? r + arg : -1;
    case STEP_BCAST: return r % (2 * arg) == arg ? r - arg : -1;
    }
    return -1;
}

/* Uplinks per leaf switch and the capacity of each (fat tree). */
static int leaf_uplinks(const sim_net *net) {
    int u = (int)floor(net->leaf_size / net->oversubscription);
    return u < 1 ? 1 : u;
}

/* The bandwidth message r -> d gets in its step (d != r). */
static double step_bw(const sim_net *net, int kind, int p, int arg, int r, int d) {
    const double beta = net->bandwidth_Bps;
    if (net->topology != SIM_TOPO_FAT_TREE || net->leaf_size < 1 || leaf_of(net, r) == leaf_of(net, d)) return beta;
    const int L = net->leaf_size, u = leaf_uplinks(net), spine = d % u;
    const double cap = L * beta / (net->oversubscription * u);
    /* messages leaving r's leaf through the same spine, and entering d's leaf from it */
    int up = 0, down = 0;
    const int a0 = leaf_of(net, r) * L, b0 = leaf_of(net, d) * L;
    for (int x = a0; x < a0 + L && x < p; x++) {
        int y = step_dst(kind, p, arg, x);
        if (y >= 0 && leaf_of(net, y) != leaf_of(net, x) && y % u == spine) up++;
    }
    for (int y = b0; y < b0 + L && y < p; y++) {
        int x = step_src(kind, p, arg, y);
        if (x >= 0 && leaf_of(net, y) != leaf_of(net, x) && y % u == spine) down++;
    }
    int k = up > down ? up : down;
    double bw = cap / (k > 0 ? k : 1);
    return bw < beta ? bw : beta;
}

static double step_s(const sim_net *net, int kind, int p, int arg, double bytes) {
    double worst = 0;
    for (int r = 0; r < p; r++) {
        int d = step_dst(kind, p, arg, r);
        if (d < 0 || d == r) continue;
        double t = sim_route_latency_s(net, r, d) + bytes / step_bw(net, kind, p, arg, r, d);
        if (t > worst) worst = t;
    }
    return worst;
}

/* ---- collectives ------------------------------------------------------------------------------ */

/* One piece of s bytes of the all-reduce. */
static double allreduce_piece_s(const sim_net *net, int p, double s) {
    const int pof2 = pof2_floor(p), rem = p - pof2;
    double t = 0;
    switch (net->allreduce) {
    case SIM_AR_RING:
        /* reduce-scatter then all-gather: 2(p−1) shifts of s/p bytes */
        t = 2.0 * (p - 1) * step_s(net, STEP_SHIFT, p, 0, s / p);
        break;
    case SIM_AR_RECURSIVE_DOUBLING:
        if (rem) t += step_s(net, STEP_FOLD, p, rem, s);
        for (int mask = 1; mask < pof2; mask *= 2) t += step_s(net, STEP_XOR, p, mask, s);
        if (rem) t += step_s(net, STEP_UNFOLD, p, rem, s);
        break;
    case SIM_AR_RABENSEIFNER:
        /* reduce-scatter by recursive halving (distance 1 first, s/2, s/4, … bytes), all-gather by
         * recursive doubling (distance pof2/2 first, s/pof2, …, s/2 bytes), as MPICH */
        if (rem) t += step_s(net, STEP_FOLD, p, rem, s);
        for (int mask = 1; mask < pof2; mask *= 2) t += step_s(net, STEP_XOR, p, mask, s / (2.0 * mask));
        for (int mask = pof2 / 2; mask >= 1; mask /= 2) t += step_s(net, STEP_XOR, p, mask, s / (2.0 * mask));
        if (rem) t += step_s(net, STEP_UNFOLD, p, rem, s);
        break;
    case SIM_AR_TREE:
        for (int mask = 1; mask < p; mask *= 2) t += step_s(net, STEP_REDUCE, p, mask, s);
        {
            int top = 1;
            while (top < p) top *= 2;
            for (int mask = top / 2; mask >= 1; mask /= 2) t += step_s(net, STEP_BCAST, p, mask, s);
        }
        break;
    default: return -1;
    }
    return t;
}

/* n bytes as ceil(n / chunk) pieces: full pieces of chunk bytes and the rest. */
static double pieces_s(const sim_net *net, int p, size_t n, double (*piece)(const sim_net *, int, double)) {
    if (p <= 1 || n == 0) return 0;
    size_t c = net->chunk_bytes ? net->chunk_bytes : n;
    size_t full = n / c, rest = n % c;
    double t = 0;
    if (full) t += (double)full * piece(net, p, (double)c);
    if (rest) t += piece(net, p, (double)rest);
    return t;
}

double sim_allreduce_s(const sim_net *net, int p, size_t n) {
    return pieces_s(net, p, n, allreduce_piece_s);
}

static double bcast_piece_s(const sim_net *net, int p, double s) {
    int top = 1;
    while (top < p) top *= 2;
    double t = 0;
    for (int mask = top / 2; mask >= 1; mask /= 2) t += step_s(net, STEP_BCAST, p, mask, s);
    return t;
}

double sim_bcast_s(const sim_net *net, int p, size_t n) {
    return pieces_s(net, p, n, bcast_piece_s);
}

/* ---- per-NIC occupancy ------------------------------------------------------------------------
 * FIFO rule, n bytes from a to b sent at t_send (s = n/β):
 *   start  = max(t_send, free_up[a])            the message leaves a when a's uplink is free;
 *   free_up[a] = start + s                       and holds it for s;
 *   arrive = max(start + α(a,b) + s, free_down[b] + s)
 *                                                its last byte reaches b after the route's latency,
 *                                                or s after b's downlink finished the previous one;
 *   free_down[b] = arrive.
 * Idle NICs: arrive = t_send + α + s = t_send + sim_p2p_s. k messages sent to one receiver at the
 * same t from k idle senders: the i-th (in call order) arrives at t + α + i·s — incast serialises
 * on the receiver's downlink. a == b: arrives at t_send, books nothing. */
double sim_nics_send(sim_nics *nics, const sim_net *net, int a, int b, size_t n, double t_send) {
    if (a == b) return t_send;
    double s = (double)n / net->bandwidth_Bps;
    double start = fmax(t_send, nics->free_up[a]);
    nics->free_up[a] = start + s;
    double arrive = fmax(start + sim_route_latency_s(net, a, b) + s, nics->free_down[b] + s);
    nics->free_down[b] = arrive;
    return arrive;
}
