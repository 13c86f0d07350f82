/* server_sim.h — sim mode's virtual time for the methods with parameter servers (docs/simulate.md,
 * "Methods with parameter servers"; issue 25 §4). Hosts: worker i is host i, server k host p + k
 * (one rank per host). Every message is charged with the modelled size of what the real code
 * sends: the shard of 4 · sim.model_params bytes that server k holds (cut as the real θ is,
 * shard_lo), each way; header-only messages (a worker leaving) are charged 0 bytes.
 *
 * The per-NIC FIFO of sim_nics_send, split between the two ends (sim_nic_out, sim_nic_in:
 * src/sim/simmodel.h) so that each rank books only its own NICs: the sender books its uplink and
 * stamps the message with its start; the receiver books its downlink in the order it takes the
 * messages. A worker's uplink and a server's downlink are each booked by their one owner, so the
 * bookings do not depend on the real interleaving. Pure. */
#ifndef DSGD_SERVER_SIM_H
#define DSGD_SERVER_SIM_H

#include <stddef.h>

#include "methods/server_state.h"

/* Modelled bytes of server k's shard of S (fp32), from vc->model_bytes. */
static inline double srvsim_shard_bytes(const vclock *vc, int k, int S) {
    const size_t np = vc->model_bytes / 4u;
    return 4.0 * (double)(shard_lo(np, k + 1, S) - shard_lo(np, k, S));
}

#endif
