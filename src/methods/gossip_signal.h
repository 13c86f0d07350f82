/* gossip_signal.h — gossip_signal.c's exports: the signal protocol between meeting points
 * (docs/checkpoint.md, "Gossip between meeting points"), for gossip.c. */
#ifndef DSGD_GOSSIP_SIGNAL_H
#define DSGD_GOSSIP_SIGNAL_H

#include "methods/gossip_state.h"

/* gossip_signal.c. gossip_sig_open: the announcement requests (p > 1; g->p, g->me set);
 * gossip_sig_close releases them. gossip_sig_hook: comm_on_wait's function (ctx: the gossip).
 * gossip_sig_step: at the start of step s (closes the epoch the last meeting point closed).
 * gossip_signal and gossip_meet: method_ops.signal and .meet. */
void gossip_sig_open(gossip *g);
void gossip_sig_close(gossip *g);
void gossip_sig_hook(void *ctx);
void gossip_sig_step(gossip *g, long s);
int gossip_signal(trainer *t, long done);
long gossip_meet(trainer *t, long done, int sigmeet);

#endif
