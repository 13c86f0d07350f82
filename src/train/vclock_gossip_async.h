/* vclock_gossip_async.h — the virtual clock of asynchronous gossip_pull and gossip_push in sim mode
 * (docs/simulate.md "Gossip, asynchronous"; issue 25 §4): a discrete-event schedule (DES) of the
 * whole cluster, replicated on every rank as pure arithmetic. No message carries timing: with
 * sim.device ≠ "measured" every virtual time is a pure function of the experiment — the compute
 * c_k(s) (vclock.h: step time × jitter(seed, k, s) + the injected delay inject_draw_s, both pure
 * in (seed, k, s)), the peers peer_of(e, k, s), the failure (inject.fail_rank), the network — so
 * every rank computes the same schedule and only the data moves (src/methods/gossip_sim.c).
 *
 * The model (pull). Node k's step s starts at S (its clock). Its request (a 4-byte message)
 * leaves at S and reaches its peer j at A = S + sim_p2p_s(k → j, 4 bytes) (α + 4/β; not booked
 * on the NICs). j answers at A with the latest θ_j it published at a time ≤ A (θ_j^v, v = the
 * steps j had completed: j publishes version v + 1 at the end E_j(v) of its step v, version 0 at
 * time 0): the reply, 4 · sim.model_params bytes, is booked with sim_nics_send (FIFO on j's uplink
 * and k's downlink) in the global order of (A, k), and arrives at R. Node k's step ends at
 * E = max(S + c_k(s), R) (the update takes no virtual time); its next step starts at E. A pull
 * from a failed node (A ≥ its failure time F_j = E_j(fail_step − 1), the start of its fail step)
 * is answered "gone" (no data): R = A + sim_p2p_s(j → k, 4 bytes).
 * Meetings (evaluations, periodic checkpoints — `meeting(s)`: the nodes meet after s steps — and
 * the end, s = iterations): every live node's step s starts at M = the largest E of the live
 * nodes' step s − 1 (the waiting is charged as wait).
 *
 * Order: the requests are handled in increasing (A, k) with a heap of one pending request per
 * node. When (A, k) is handled, every publish of j at a time ≤ A is known: a step v of j whose
 * request is not yet handled has A_j(v) ≥ A (heap order; ties: j after k), and its end E_j(v) ≥
 * R_j(v) > A_j(v) ≥ A since every latency is > 0; so only the steps already handled can have
 * published by A, and for them E_j is known. Each node has at most one handled step whose end may
 * still lie beyond the current time (its next request, at E + latency, is not yet handled), so
 * j's version at A is (steps of j handled) − [E of the last one > A].
 *
 * Cost: O(log p) per step of each node (a heap operation) plus its compute draw; O(p) memory.
 * Nothing allocates after vga_init but three rings that double when full (rare, no bound known):
 * push's queue of arrivals to take (4p + 16 at first) and of me's pushes not yet decided (8), and
 * the meetings released before this node asks for them (8). */
#ifndef DSGD_VCLOCK_GOSSIP_ASYNC_H
#define DSGD_VCLOCK_GOSSIP_ASYNC_H

#include <stddef.h>

#include "sim/simmodel.h"

/* The experiment as the schedule sees it: pure functions, called with ctx. */
typedef struct {
    void *ctx;
    /* node k's step s: its compute *c and injected delay *d (virtual s); the clock advances by
     * c + d (added in that order, as vclock_compute does) */
    void (*compute)(void *ctx, int k, long s, double *c, double *d);
    int (*peer)(void *ctx, int k, long s);  /* the node k pulls from at step s (≠ k) */
    int (*meeting)(void *ctx, long s);      /* 1: the nodes meet after s steps (1 ≤ s < iterations) */
} vga_model;

/* One step of one node, as the schedule has it. */
typedef struct {
    long step;
    int peer;        /* j */
    int got;         /* 1: θ_j^version answered; 0: j was gone */
    long version;    /* steps j had completed at A (when got) */
    double S, A, R, E, c, d;
} vga_step;

enum { VGA_RUN, VGA_PARKED, VGA_DONE };
enum { VGA_UNDECIDED, VGA_TAKEN, VGA_NOT_TAKEN };

/* Push: node me's latest push, and when its receiver takes it. */
typedef struct {
    long step;
    int to;
    double a;        /* arrival at `to` */
    int state;       /* VGA_UNDECIDED, VGA_TAKEN (at `take`), VGA_NOT_TAKEN (`to` stops before a) */
    double take;
    double S, x, D, c, d; /* the step: start, take (S + (c + d)), the push's leaving (the step's end) */
} vga_push;

typedef struct {
    double a;
    int from;
} tq_item;

typedef struct {
    long step;
    double M;
} meet_item;

typedef struct {
    int p, me, push;
    long iterations, fail_step;   /* fail_step: of node fail_rank; fail_rank < 0: none */
    int fail_rank;
    size_t bytes, small;          /* θ's modelled bytes (4 · sim.model_params); a request's (4) */
    sim_net net;
    vga_model m;
    /* per node (p) */
    long *done;                   /* steps handled (the pending request is step done[k]) */
    double *start;                /* S of the pending step (or of the next, when parked) */
    double *last_end;             /* E of step done[k] − 1 (−∞ before the first) */
    int *peer, *state;            /* the pending step's peer; VGA_* */
    double *key;                  /* A of the pending request */
    int *heap, *pos, hn;          /* min-heap of nodes by (key, node); pos: index in heap or −1 */
    double *nic;                  /* (2p) the sim_nics arrays */
    sim_nics nics;
    int parked;                   /* nodes waiting at a meeting */
    double meet_max;              /* the largest E among them */
    long meetings;                /* meetings released so far */
    long last_meet;               /* s of the last one (−1: none) */
    meet_item *mq;                /* released meetings not yet asked for by vga_meet: a ring */
    size_t mh, mn, mcap;
    /* this node's records */
    vga_step mine;                /* its latest handled step */
    long *reads;                  /* (p) requests to `me` handled since vga_take_reads, per reader */
    long nreads;
    /* push */
    double *x, *cd, *dd;          /* (p) the pending step's take time X = S + (c + d), c, d */
    vga_push *outs;               /* me's pushes not yet asked for by vga_push_sent: a ring (oldest at oh) */
    size_t oh, on, ocap;
    tq_item *tq;                  /* pushes booked to me, in arrival order: a ring */
    size_t th, tn, tcap;
} vclock_gossip_async;

/* The schedule of p nodes for `iterations` steps from time 0, for node me. fail_rank < 0: none.
 * Allocates O(p). */
void vga_init(vclock_gossip_async *g, int p, int me, long iterations, int fail_rank, long fail_step, size_t bytes,
              const sim_net *net, vga_model m);
void vga_free(vclock_gossip_async *g);

/* Handles requests until node me's step s is handled; returns its record (s < iterations, me not
 * failed before s). */
const vga_step *vga_mine(vclock_gossip_async *g, long s);

/* Handles every request with A < t (releasing meetings as they fill). */
void vga_advance_to(vclock_gossip_async *g, double t);

/* Handles requests until the meeting after s steps is released; returns its time M. Callers ask
 * for the meetings in increasing s (an earlier one is forgotten once a later one is asked for). */
double vga_meet(vclock_gossip_async *g, long s);

/* Push (vga_init_push instead of vga_init; the rest of this file's calls are pull's). The model: node k's step s starts at
 * S; it takes at X = S + c_k(s) every push that arrived at it in (its previous X, X] (in arrival
 * order), updates (no virtual time), and pushes θ_k to its peer: the message (θ's modelled
 * bytes) leaves at D = max(X, when k's uplink has sent its previous push) — the real code waits
 * for the previous send — and is booked on the peer's downlink in the order of (D, k): arrival
 * a. The step ends at D (the wait for the uplink charged to k's clock); the next starts there.
 * A push is taken by the receiver's first take at or after a; one that no take reaches (the
 * receiver failed or finished first) is not sent, though it held the sender's uplink. The
 * events are the departures, handled in increasing (D, k); a push booked at D arrives after D, so
 * once every departure before X is handled, every arrival by X is known. */
void vga_init_push(vclock_gossip_async *g, int p, int me, long iterations, int fail_rank, long fail_step, size_t bytes,
                   const sim_net *net, vga_model m);
/* Node me's step s is scheduled and every push arriving by its take is booked: *x = its take
 * time X. Returns 0. */
int vga_push_start(vclock_gossip_async *g, long s, double *x);
/* The next push to me with arrival ≤ x (the take at x): its sender, or -1 when none is left. */
int vga_push_take(vclock_gossip_async *g, double x);
/* Node me's push of step s, booked and decided (taken, when, or not), with the step's times. */
const vga_push *vga_push_sent(vclock_gossip_async *g, long s);

/* The pulls of `me` handled since the last call, per reader (reads[k]: how many times k reads
 * `me`); returns their total and zeroes nothing: the caller clears reads[] as it consumes them. */
long vga_reads(const vclock_gossip_async *g);

#endif
