/* server_sim.h — sim mode's virtual time for the methods with parameter servers (docs/simulate.md,
 * "Methods with parameter servers"; issue 25 §4). Hosts: worker i is host i, server k host p + k
 * (one rank per host). Every message is charged with the modelled size of what the real code
 * sends: the shard of 4 · sim.model_params bytes that server k holds (cut as the real θ is,
 * shard_lo), each way; header-only messages (a worker leaving) are charged 0 bytes.
 *
 * The per-NIC FIFO of sim_nics_send (src/sim/simmodel.h), split between the two ends so that each
 * rank books only its own NICs: the sender books its uplink (nic_out: start = max(t, up),
 * up = start + n/β) and stamps the message with start; the receiver books its downlink
 * (nic_in: arrive = max(start + α + n/β, down + n/β), down = arrive) in the order it takes the
 * messages. Same formulas as sim_nics_send; a worker's uplink and a server's downlink are each
 * booked by their one owner, so the bookings do not depend on the real interleaving. Pure. */
#ifndef DSGD_SERVER_SIM_H
#define DSGD_SERVER_SIM_H

#include <stddef.h>

#include "methods/server_state.h"

/* Modelled bytes of server k's shard of S (fp32), from vc->model_bytes. */
static inline double srvsim_shard_bytes(const vclock *vc, int k, int S) {
    const size_t np = vc->model_bytes / 4u;
    return 4.0 * (double)(shard_lo(np, k + 1, S) - shard_lo(np, k, S));
}

/* Sender side: the message of n bytes ready at t starts on the uplink at the returned time. */
static inline double srvsim_nic_out(double *up, const sim_net *net, double t, double n) {
    const double start = t > *up ? t : *up;
    *up = start + n / net->bandwidth_Bps;
    return start;
}

/* Receiver side: a message of n bytes that started at `start` on a's uplink arrives at b. */
static inline double srvsim_nic_in(double *down, const sim_net *net, int a, int b, double start, double n) {
    const double ser = n / net->bandwidth_Bps, idle = start + sim_route_latency_s(net, a, b) + ser, q = *down + ser;
    *down = idle > q ? idle : q;
    return *down;
}

#endif
