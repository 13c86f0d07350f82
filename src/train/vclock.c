/* vclock.c — a rank's virtual clock in sim mode (vclock.h, docs/simulate.md). */
#include "train/vclock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "util/util.h"

/* Stream tag of the jitter ("sim-jitt" in ASCII), apart from inject.c's and the initialisation's. */
#define TAG_JITTER 0x73696d2d6a697474ull

int vclock_init(vclock *vc, const experiment *e, int worker, char *err, size_t n) {
    *vc = (vclock){.on = e->sim.enabled};
    if (!vc->on) return 0;
    const char *dsrc = "", *nsrc = "";
    double lat = e->sim.latency_us * 1e-6, bw = e->sim.bandwidth_gbps * 1e9 / 8.0;
    if (e->sim.network != SIM_NET_CUSTOM && sim_network_preset((sim_network)e->sim.network, &lat, &bw, &nsrc) != 0) {
        snprintf(err, n, "sim.network = \"%s\" has no preset", sim_network_names[e->sim.network]);
        return -1;
    }
    vc->net = (sim_net){.link_latency_s = lat, .bandwidth_Bps = bw, .topology = (sim_topology)e->sim.topology,
                        .leaf_size = e->sim.leaf_size, .oversubscription = e->sim.oversubscription,
                        .allreduce = (sim_allreduce)e->sim.allreduce, .chunk_bytes = COMM_CHUNK_BYTES};
    if (e->sim.step_ms > 0) vc->step_s = e->sim.step_ms * 1e-3;
    else if (e->sim.device == SIM_DEV_MEASURED) vc->step_s = -1.0;
    else if (!((vc->step_s = sim_device_step_s((sim_device)e->sim.device, e->b, &dsrc)) >= 0)) {
        snprintf(err, n, "the device model has no step time for \"%s\" at b = %d", sim_device_names[e->sim.device], e->b);
        return -1;
    }
    vc->device_source = dsrc ? dsrc : "", vc->network_source = nsrc ? nsrc : "";
    vc->model_bytes = (size_t)e->sim.model_params * 4u;
    vc->allreduce_s = sim_allreduce_s(&vc->net, e->p, vc->model_bytes);
    vc->jitter_sigma = e->sim.jitter > 0 ? sqrt(log1p(e->sim.jitter * e->sim.jitter)) : 0.0;
    vc->seed = e->seed, vc->worker = worker, vc->p = e->p;
    vc->ready = xmalloc((size_t)e->p * sizeof *vc->ready);
    return 0;
}

void vclock_free(vclock *vc) {
    free(vc->ready);
    vc->ready = NULL;
}

double vclock_jitter(const vclock *vc, int worker, long step) {
    if (!(vc->jitter_sigma > 0)) return 1.0;
    rng_t r;
    rng_seed(&r, seed_mix(seed_mix(seed_mix(TAG_JITTER, vc->seed), (uint64_t)(int64_t)worker), (uint64_t)(int64_t)step));
    const double s = vc->jitter_sigma;
    return exp(s * rng_normal(&r) - 0.5 * s * s);
}

void vclock_compute(vclock *vc, long step, double measured_s, double delay_s) {
    vc->step_start = vc->now;
    const double c = (vc->step_s >= 0 ? vc->step_s : measured_s) * vclock_jitter(vc, vc->worker, step);
    vc->now += c + delay_s;
    vc->v.compute_s += c;
    vc->v.delay_s += delay_s;
}

void vclock_allreduce(vclock *vc) {
    double m = vc->now;
    if (vc->p > 1) {
        comm_workers_allgather(&vc->now, sizeof vc->now, vc->ready);
        for (int i = 0; i < vc->p; i++)
            if (vc->ready[i] > m) m = vc->ready[i];
    }
    const double wait = m - vc->now;
    vc->now = m + vc->allreduce_s;
    vc->v.wait_s += wait;
    vc->v.comm_s += wait + vc->allreduce_s;
}

void vclock_step_end(vclock *vc, double measured_after_s) {
    if (vc->step_s < 0) vc->now += measured_after_s, vc->v.compute_s += measured_after_s;
    vc->v.step_s += vc->now - vc->step_start;
}
