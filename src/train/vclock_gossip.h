/* vclock_gossip.h — the virtual clock of lock-step gossip in sim mode (methods gossip_pull and
 * gossip_push with synchronous = true; docs/simulate.md "Gossip"; issue 25). Beside vclock.h,
 * which charges each step's compute: this file charges the step's exchange.
 *
 * At step s node k sends θ_k^s to each node that pulls from it (gossip_pull) or to its one peer
 * (gossip_push). The model of one step, the same on every rank:
 *   - every node's step start S_k (its clock before the step's compute) is all-gathered;
 *   - each message k → i of `bytes` bytes (4 · sim.model_params: the modelled θ, not the
 *     proxy's) leaves at t = max(S_k, S_i) — θ^s exists from S_k on and the lock-step receive is
 *     posted at S_i — and is booked with sim_nics_send (simmodel.h: FIFO on k's uplink and on i's
 *     downlink, so several pulls served by one node, or several pushes into one, queue) in the
 *     order of (t, k, i), on NICs idle at the start of the step (every message of the previous
 *     step had arrived by then: each node waits for what it sends and receives);
 *   - node i's exchange ends at the latest arrival of a message it sends or receives (the
 *     lock-step code waits for both), or at S_i when it has none.
 * The exchange overlaps the step's compute (the code starts it before the gradient), so the
 * node's clock after the step is max(S_i + compute, exchange end). Everything is a pure function
 * of the all-gathered starts, the peers (pure functions of (seed, i, s)) and the network: the
 * same on every rank and in every run. */
#ifndef DSGD_VCLOCK_GOSSIP_H
#define DSGD_VCLOCK_GOSSIP_H

#include <stddef.h>

#include "sim/simmodel.h"
#include "train/vclock.h"

typedef struct {
    double t;     /* leaves at, virtual s */
    int from, to; /* nodes */
} vclock_gossip_msg;

/* A node's scratch for the schedule, allocated once (no allocation per step). */
typedef struct {
    int p;
    size_t bytes;            /* a message's modelled size: 4 · sim.model_params */
    double *start;           /* (p) every node's step start S_k, virtual s */
    int *peer;               /* (p) the node k sends to / pulls from at this step; -1: none (k
                                failed, or its peer did) */
    double *nic;             /* (2p) the sim_nics arrays */
    sim_nics nics;
    vclock_gossip_msg *msg;  /* (p) the step's messages */
} vclock_gossip;

/* Scratch for p nodes and messages of `bytes` bytes. */
void vclock_gossip_init(vclock_gossip *vg, int p, size_t bytes);
void vclock_gossip_free(vclock_gossip *vg);

/* Pure given vg->start and vg->peer (filled by the caller): the virtual time at which node me's
 * exchange of this step ends (the rules above; push = 1: node k sends to peer[k]; push = 0:
 * node i receives from peer[i]). Books vg->nics from idle. O(p log p). */
double vclock_gossip_schedule(vclock_gossip *vg, const sim_net *net, int push, int me);

/* Collective over the workers (every worker calls it once per step, a failed one included):
 * all-gathers vc->now into vg->start (8 bytes per worker). */
void vclock_gossip_starts(vclock *vc, vclock_gossip *vg);

/* After vclock_compute: the node's clock becomes max(now, exchange_end); the part beyond the
 * compute is charged as communication and as waiting (the node is blocked on the message). */
void vclock_gossip_charge(vclock *vc, double exchange_end);

#endif
