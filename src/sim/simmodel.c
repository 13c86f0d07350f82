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
 * a preset is twice its link latency, and each preset's link latency is half a published
 * end-to-end (adapter to adapter through one switch) latency. Bandwidth: the link's data rate
 * after line coding, bytes/s, per direction. docs/simulate-models.md has the derivations. */
static const struct {
    double link_latency_s, bandwidth_Bps;
    const char *source;
} presets[SIM_NET_CUSTOM] = {
    [SIM_NET_10GBE] = {5e-6, 1.25e9,
                       "10 GbE: 10 Gb/s = 1.25 GB/s (IEEE 802.3ae 10GBASE-R, after 64b/66b); 10 us MPI "
                       "latency over TCP end to end = 5 us per link (../shared/notes/simulation.md's SMPI platform)"},
    [SIM_NET_GEMINI] = {0.7e-6, 6e9,
                        "Cray Gemini (Titan, Cray XK7): NIC 8.3 GB/s per direction peak, over 6 GB/s measured; "
                        "latency 0.7-1.4 us by transfer type (euroben.nl XE6 report, after Alverson et al., "
                        "HOTI 2010): 6 GB/s, 1.4 us end to end = 0.7 us per link; the 3-D torus's hops not modelled"},
    [SIM_NET_IB_FDR] = {0.35e-6, 6.8e9,
                        "InfiniBand 4x FDR: 4 x 14.0625 Gb/s x 64/66 = 54.5 Gb/s = 6.8 GB/s; ConnectX-3 "
                        "sub-microsecond latency (Mellanox, 2011): 0.7 us end to end = 0.35 us per link"},
    [SIM_NET_IB_HDR] = {0.3e-6, 25e9,
                        "InfiniBand 4x HDR: 200 Gb/s effective (53.125 Gb/s lanes, 64b/66b) = 25 GB/s; ConnectX-6 "
                        "sub-600 ns latency (NVIDIA ConnectX-6 user manual): 0.6 us end to end = 0.3 us per link"},
    [SIM_NET_IB_NDR] = {0.3e-6, 50e9,
                        "InfiniBand 4x NDR: 400 Gb/s effective = 50 GB/s; latency as HDR (ConnectX-7, estimate: "
                        "no lower published figure): 0.6 us end to end = 0.3 us per link"},
};

int sim_network_preset(sim_network n, double *link_latency_s, double *bandwidth_Bps, const char **source) {
    if ((int)n < 0 || n >= SIM_NET_CUSTOM) return -1;
    if (link_latency_s) *link_latency_s = presets[n].link_latency_s;
    if (bandwidth_Bps) *bandwidth_Bps = presets[n].bandwidth_Bps;
    if (source) *source = presets[n].source;
    return 0;
}

/* ---- device step times -----------------------------------------------------------------------
 * One row per device: ResNet-18, 224x224, one GPU, forward + backward + SGD update, seconds per
 * step at per-node minibatch b (points in increasing b; between them linear, outside them the
 * slope of the nearest end's segment, so every row below is the line t0 + b · t_img through its
 * points). No row is a direct measurement of ResNet-18 training at these b; each is derived from
 * published throughputs by stated rules (docs/simulate-models.md, "Device step times"):
 *   R18 = ResNet-50 / 3.27: ResNet-18's forward + backward takes 1/3.27 of ResNet-50's per image at
 *     b = 16 (jcjohnson/cnn-benchmarks, Torch + cuDNN: 47.07 vs 153.90 ms on a GTX 1080, 31.54 vs
 *     103.58 ms on a Pascal Titan X);
 *   t0 = 3 ms on the current GPUs: about 200 library calls and kernels per step at ~15 us of host
 *     time each (../shared/notes/gpu-review.md, N10) — the launch bound that dominates at b = 2-8. */
#define SIM_DEV_MAXPTS 4
static const struct {
    int n;
    int b[SIM_DEV_MAXPTS];
    double s[SIM_DEV_MAXPTS];
    const char *source;
} devices[SIM_DEV_COUNT] = {
    /* K80: 32 / (49.5 · 3.27), 64 / (52.0 · 3.27); the line through them: t0 = 19.0 ms, 5.58 ms/image */
    [SIM_DEV_K80] = {2, {32, 64}, {0.197696, 0.376382},
                     "estimate: one GK210 (Google Compute Engine K80), ResNet-50 training 49.5 img/s at b = 32 and "
                     "52.0 at b = 64 (tensorflow.org performance benchmarks, 2017, synthetic data) / 3.27 for "
                     "ResNet-18 (cnn-benchmarks); the line through them below b = 32"},
    /* K20X: the K80 row x 0.96 */
    [SIM_DEV_K20X] = {2, {32, 64}, {0.189788, 0.361327},
                      "estimate: the K80 row x 0.96: K20X (GK110, 250 GB/s, 3.94 TFLOPS) and one K80 die (GK210, "
                      "240 GB/s, 2.9-4.4 TFLOPS with boost) are one Kepler generation; ratio of memory bandwidth"},
    /* V100: t_img = 1 / (367 · 3.27) = 0.8333 ms, t0 = 3 ms */
    [SIM_DEV_V100] = {2, {1, 256}, {0.0038333, 0.2163173},
                      "estimate: 3 ms per step + 0.833 ms/image: ResNet-50 fp32 training 367 img/s on one V100 16GB "
                      "(NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5, 21.03) / 3.27 for ResNet-18"},
    /* A100: t_img = 1 / (938 · 3.27) = 0.3260 ms, t0 = 3 ms */
    [SIM_DEV_A100] = {2, {1, 256}, {0.0033260, 0.0864621},
                      "estimate: 3 ms per step + 0.326 ms/image: ResNet-50 TF32 training 938 img/s on one A100 80GB "
                      "(NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5, 21.03) / 3.27 for ResNet-18; TF32"},
    /* H100: t_img = A100's / 2 = 0.1630 ms, t0 = 3 ms */
    [SIM_DEV_H100] = {2, {1, 256}, {0.0031630, 0.0447311},
                      "estimate: 3 ms per step + 0.163 ms/image: the A100 row's per-image time / 2 (H100 SXM vs "
                      "A100 SXM on vision models ~2x, Lambda Labs H100 analysis, 2022); TF32"},
};

double sim_device_step_s(sim_device d, int b, const char **source) {
    if ((int)d <= SIM_DEV_MEASURED || d >= SIM_DEV_COUNT || b < 1) return -1;
    const int n = devices[d].n;
    const int *xb = devices[d].b;
    const double *ys = devices[d].s;
    if (source) *source = devices[d].source;
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

/* Uplinks per leaf switch (fat tree): one to each spine. */
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

/* What a step's time depends on, whatever its bytes: whether it has messages inside a leaf (2
 * links, β) and between leaves (4 links), and the least bandwidth a message between leaves gets
 * (β over the most loaded uplink's or downlink's message count). The link loads are counted in
 * one pass over the ranks (O(p)) when the leaves' links fit in SIM_MAXLINKS, else per message
 * (step_bw, O(p · leaf_size)); the result is the same. */
#define SIM_MAXLINKS 4096
typedef struct {
    int intra, cross;
    double cross_bw;
} step_shape;

static step_shape shape_of(const sim_net *net, int kind, int p, int arg) {
    step_shape sh = {0, 0, net->bandwidth_Bps};
    const int fat = net->topology == SIM_TOPO_FAT_TREE && net->leaf_size >= 1;
    const int u = fat ? leaf_uplinks(net) : 1;
    const int nlinks = fat ? ((p + net->leaf_size - 1) / net->leaf_size) * u : 0;
    const int counted = fat && nlinks <= SIM_MAXLINKS;
    int up[SIM_MAXLINKS], down[SIM_MAXLINKS], kmax = 0;
    for (int i = 0; i < (counted ? nlinks : 0); i++) up[i] = down[i] = 0;
    for (int r = 0; r < p; r++) {
        int d = step_dst(kind, p, arg, r);
        if (d < 0 || d == r) continue;
        if (!fat || leaf_of(net, r) == leaf_of(net, d)) {
            sh.intra = 1;
            continue;
        }
        sh.cross = 1;
        if (counted) {
            int ku = ++up[leaf_of(net, r) * u + d % u], kd = ++down[leaf_of(net, d) * u + d % u];
            if (ku > kmax) kmax = ku;
            if (kd > kmax) kmax = kd;
        } else {
            double bw = step_bw(net, kind, p, arg, r, d);
            if (bw < sh.cross_bw) sh.cross_bw = bw;
        }
    }
    if (counted && kmax > 0) {
        double cap = net->leaf_size * net->bandwidth_Bps / (net->oversubscription * u) / kmax;
        if (cap < sh.cross_bw) sh.cross_bw = cap;
    }
    return sh;
}

static double shape_s(const sim_net *net, step_shape sh, double bytes) {
    double t = 0;
    if (sh.intra) t = 2 * net->link_latency_s + bytes / net->bandwidth_Bps;
    if (sh.cross) t = fmax(t, 4 * net->link_latency_s + bytes / sh.cross_bw);
    return t;
}

/* The pieces of a collective: nfull pieces of `full` bytes and one of `rest` (0: none). */
typedef struct {
    double nfull, full, rest;
} pieces;

/* One step (kind, arg) of every piece, each piece sending frac of its bytes: its time summed
 * over the pieces. The shape is computed once for all of them. */
static double step_s(const sim_net *net, const pieces *pc, int kind, int p, int arg, double frac) {
    step_shape sh = shape_of(net, kind, p, arg);
    double t = pc->nfull > 0 ? pc->nfull * shape_s(net, sh, pc->full * frac) : 0;
    if (pc->rest > 0) t += shape_s(net, sh, pc->rest * frac);
    return t;
}

/* ---- collectives ------------------------------------------------------------------------------ */

static double allreduce_steps_s(const sim_net *net, const pieces *pc, int p) {
    const int pof2 = pof2_floor(p), rem = p - pof2;
    double t = 0;
    switch (net->allreduce) {
    case SIM_AR_RING:
        /* reduce-scatter then all-gather: 2(p−1) shifts of 1/p of the piece */
        t = 2.0 * (p - 1) * step_s(net, pc, STEP_SHIFT, p, 0, 1.0 / p);
        break;
    case SIM_AR_RECURSIVE_DOUBLING:
        if (rem) t += step_s(net, pc, STEP_FOLD, p, rem, 1);
        for (int mask = 1; mask < pof2; mask *= 2) t += step_s(net, pc, STEP_XOR, p, mask, 1);
        if (rem) t += step_s(net, pc, STEP_UNFOLD, p, rem, 1);
        break;
    case SIM_AR_RABENSEIFNER:
        /* reduce-scatter by recursive halving (distance 1 first, 1/2, 1/4, … of the piece),
         * all-gather by recursive doubling (distance pof2/2 first, 1/pof2, …, 1/2), as MPICH */
        if (rem) t += step_s(net, pc, STEP_FOLD, p, rem, 1);
        for (int mask = 1; mask < pof2; mask *= 2) t += step_s(net, pc, STEP_XOR, p, mask, 1 / (2.0 * mask));
        for (int mask = pof2 / 2; mask >= 1; mask /= 2) t += step_s(net, pc, STEP_XOR, p, mask, 1 / (2.0 * mask));
        if (rem) t += step_s(net, pc, STEP_UNFOLD, p, rem, 1);
        break;
    case SIM_AR_TREE: {
        for (int mask = 1; mask < p; mask *= 2) t += step_s(net, pc, STEP_REDUCE, p, mask, 1);
        int top = 1;
        while (top < p) top *= 2;
        for (int mask = top / 2; mask >= 1; mask /= 2) t += step_s(net, pc, STEP_BCAST, p, mask, 1);
        break;
    }
    default: return -1;
    }
    return t;
}

static double bcast_steps_s(const sim_net *net, const pieces *pc, int p) {
    int top = 1;
    while (top < p) top *= 2;
    double t = 0;
    for (int mask = top / 2; mask >= 1; mask /= 2) t += step_s(net, pc, STEP_BCAST, p, mask, 1);
    return t;
}

/* n bytes as ceil(n / chunk) sequential pieces: full pieces of chunk bytes and the rest. */
static pieces pieces_of(const sim_net *net, size_t n) {
    size_t c = net->chunk_bytes ? net->chunk_bytes : n;
    return (pieces){(double)(n / c), (double)c, (double)(n % c)};
}

double sim_allreduce_s(const sim_net *net, int p, size_t n) {
    if (p <= 1 || n == 0) return 0;
    pieces pc = pieces_of(net, n);
    return allreduce_steps_s(net, &pc, p);
}

double sim_bcast_s(const sim_net *net, int p, size_t n) {
    if (p <= 1 || n == 0) return 0;
    pieces pc = pieces_of(net, n);
    return bcast_steps_s(net, &pc, p);
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
double sim_nic_out(double *free_up, const sim_net *net, double t_send, double n) {
    const double start = fmax(t_send, *free_up);
    *free_up = start + n / net->bandwidth_Bps;
    return start;
}

double sim_nic_in(double *free_down, const sim_net *net, int a, int b, double start, double n) {
    const double s = n / net->bandwidth_Bps;
    *free_down = fmax(start + sim_route_latency_s(net, a, b) + s, *free_down + s);
    return *free_down;
}

double sim_nics_send(sim_nics *nics, const sim_net *net, int a, int b, size_t n, double t_send) {
    if (a == b) return t_send;
    const double start = sim_nic_out(&nics->free_up[a], net, t_send, (double)n);
    return sim_nic_in(&nics->free_down[b], net, a, b, start, (double)n);
}
