/* vclock.h — a rank's virtual clock in sim mode (key group `sim`, docs/simulate.md; issue 25):
 * the time axis of the run file when the run simulates a cluster instead of timing this machine.
 * Training stays real (the same minibatches, gradients and updates as a real run); only the times
 * recorded are the target cluster's, charged from src/sim/simmodel.h's models:
 *
 *   compute    per step: the device's ResNet-18 step time at b (sim_device_step_s), or sim.step_ms,
 *              or `measured` (this rank's own real data + compute + update time of the step),
 *              times a lognormal jitter of mean 1 and coefficient of variation sim.jitter drawn
 *              from (seed, worker, step), plus the injected straggler delay (inject group) — in
 *              virtual time, never slept;
 *   all-reduce every worker's ready time is exchanged (one 8-byte-per-worker all-gather); then
 *              now = max over the workers + sim_allreduce_s(net, p, 4 · sim.model_params), and
 *              wait = max − own ready time.
 *
 * Everything charged is a pure function of the experiment (seed, worker, step), except with
 * sim.device = "measured": two runs of one experiment then have the same virtual clock bit for bit
 * whatever the machine's load. The real phase times (trainer.times) are kept as they are. No call
 * allocates after vclock_init. */
#ifndef DSGD_VCLOCK_H
#define DSGD_VCLOCK_H

#include <stdint.h>

#include "config/config.h"
#include "sim/simmodel.h"

/* Per-phase seconds of this rank since training began (HPC-benchmark style): trainer.times holds
 * the real ones (wall clock), vclock.v the virtual ones in sim mode. */
typedef struct {
    double data_s;     /* assembling and normalising minibatches (virtual: 0, inside compute_s) */
    double compute_s;  /* forward + backward (virtual: the charged compute, update included) */
    double comm_s;     /* communication, waiting included */
    double wait_s;     /* the part of comm_s spent blocked on another rank (barrier before the
                          all-reduce, a server's reply) */
    double update_s;   /* optimizer update (virtual: 0, inside compute_s) */
    double delay_s;    /* injected straggler delay (inject group) */
    double step_s;     /* whole steps, everything above included */
} phase_times;

typedef struct vclock {
    int on;                  /* sim.enabled: everything below is set */
    double now;              /* virtual seconds since training began (evaluations and checkpoints
                                take no virtual time) */
    phase_times v;           /* virtual phase times since training began */
    double wall_s;           /* real training seconds at the row being logged, or at the end
                                (set by the loop, for the run file's wall_s and the summary) */
    /* Set once by vclock_init. */
    double step_s;           /* compute charged per step before jitter, s; < 0: measured */
    double allreduce_s;      /* the all-reduce of 4 · model_params bytes over p workers, s */
    double jitter_sigma;     /* σ of the lognormal jitter: sqrt(ln(1 + jitter²)); 0: none */
    uint64_t seed;
    int worker, p;
    size_t model_bytes;      /* 4 · sim.model_params */
    sim_net net;
    const char *device_source, *network_source; /* simmodel's citations ("" for step_ms / custom) */
    double *ready;           /* (p) every worker's ready time, filled by vclock_allreduce */
    double step_start;       /* now when the current step began */
} vclock;

/* Set up worker `worker`'s clock from e's sim group (e->sim.enabled = 0: vc->on = 0 and nothing
 * else). Returns 0, or -1 with err (n bytes) saying why (a device without a step time at b: the
 * caller blames key sim.device). Not collective. */
int vclock_init(vclock *vc, const experiment *e, int worker, char *err, size_t n);
void vclock_free(vclock *vc);

/* The jitter factor of worker `worker`'s step `step` (0-based): exp(σZ − σ²/2), Z ~ N(0, 1) from
 * the stream seed_mix("sim-jitt", seed, worker, step); exactly 1 when sim.jitter = 0. Pure. */
double vclock_jitter(const vclock *vc, int worker, long step);

/* Step `step` begins: charge its compute — the model's (or measured_s, this step's real data +
 * compute seconds, for sim.device = "measured") × the jitter — and the injected delay delay_s
 * (inject_draw_s). */
void vclock_compute(vclock *vc, long step, double measured_s, double delay_s);

/* Collective over the workers: the modelled all-reduce of the gradient after vclock_compute (the
 * real all-reduce has already synchronised the workers; this adds one all-gather of one double per
 * worker). now := max of every worker's now + allreduce_s; wait and comm charged. */
void vclock_allreduce(vclock *vc);

/* Step ends: measured_after_s (sim.device = "measured": this step's real update seconds, charged
 * as compute; otherwise ignored), and the step's whole virtual time into v.step_s. */
void vclock_step_end(vclock *vc, double measured_after_s);

#endif
