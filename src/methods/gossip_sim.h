/* gossip_sim.h — asynchronous gossip_pull and gossip_push in sim mode (gossip_sim.c), for gossip.c: the data
 * movement that follows train/vclock_gossip_async.h's replicated schedule. */
#ifndef DSGD_GOSSIP_SIM_H
#define DSGD_GOSSIP_SIM_H

#include "methods/gossip_state.h"

/* The peer node i talks to at step s: uniform over the other p − 1 nodes, a pure function of
 * (seed, i, s) (0 ≤ i < p, p ≥ 2). */
int gossip_peer_of(const experiment *e, int i, long s);

/* Set up (g->p > 1, g->sim_async): the schedule, the requests; publishes θ^0. Returns 0 or -1. */
int gossip_sim_setup(gossip *g, trainer *t, char *err, size_t errlen);
void gossip_sim_free(gossip *g);
/* Node me's step s, before its gradient: starts the receive of its pull; returns the schedule's
 * record of the step (the clock is charged by gossip_sim_charge). */
const vga_step *gossip_sim_start(gossip *g, long s);
/* After vclock_compute: the clock to the step's end E. */
void gossip_sim_charge(gossip *g, const vga_step *r);
/* After the gradient: waits for the pulled θ_j (into g->peer); returns 1 if received. */
int gossip_sim_finish(gossip *g, const vga_step *r);
/* After the update (th: θ^{s+1}): sends it to its readers; at a meeting, the clock to M. */
void gossip_sim_publish(gossip *g, const float *th, long s);
/* A failed node's step s: its pending sends; its clock at a meeting. */
void gossip_sim_idle(gossip *g, long s);
/* Push, node me's step s: the take at *x (before the update): the pushes that arrived by then,
 * received in arrival order and summed into g->inbox; returns how many. */
int gossip_sim_take(gossip *g, long s, double *x);
/* Push, after the update (th: θ^{s+1}): to the peer, if it takes it; the clock to the push's
 * leaving, and to M at a meeting. */
void gossip_sim_push(gossip *g, const float *th, long s);
/* comm_on_wait's function in sim mode (ctx: the gossip). */
void gossip_sim_hook(void *ctx);

#endif
