/* inject.h — straggler and failure injection (experiment group `inject`), for measuring how a
 * method copes with slow or failed workers (Chen et al. 2016 §2: stragglers; Jin et al. 2016 §1).
 *
 * Every decision is a pure function of (seed, worker, step), so runs are reproducible, every
 * worker knows without communication which worker `random_slow` picked at a step, and a
 * resumed run injects the same delays.
 *
 *   slow_ranks   each listed worker is delayed on every step
 *   random_slow  on each step, with this probability, one worker drawn uniformly is delayed
 *   delay_ms     mean of the delay, drawn per delayed step from delay_dist:
 *                  fixed        delay_ms
 *                  exponential  Exp(mean delay_ms)
 *                  lognormal    delay_ms · exp(σZ − σ²/2), σ = 1, Z ~ N(0, 1) (mean delay_ms)
 *   fail_rank    this worker stops for good once it has completed fail_step steps
 *
 * A delay is slept (nanosleep), not computed, so that a slow worker does not take CPU time from
 * the other ranks on an over-subscribed node; it stands for a slower processor or network. In sim
 * mode (sim.enabled, docs/simulate.md) nothing is slept: the delay is charged to the rank's
 * virtual clock (inject_draw_s, src/train/vclock.h) and inject_delay_s returns 0. */
#ifndef DSGD_INJECT_H
#define DSGD_INJECT_H

#include "config/config.h"

typedef struct {
    const experiment *e;
    int worker;      /* this worker's rank among the p workers, 0-based */
    int is_slow;     /* worker is in inject.slow_ranks */
    int virtual_time; /* sim mode: delays are charged to the virtual clock, never slept */
} injector;

/* Set up the injector of worker `worker` (0 <= worker < e->p). */
void inject_init(injector *in, const experiment *e, int worker);

/* Extra seconds worker in->worker spends on its 0-based step `step` (0 if not delayed). The
 * sum of a slow_ranks delay and a random_slow delay when both apply. Pure. */
double inject_draw_s(const injector *in, long step);
/* The real seconds to sleep at that step: inject_draw_s, or 0 in sim mode (in->virtual_time). */
double inject_delay_s(const injector *in, long step);

/* The worker random_slow delays at `step`, or -1 (same answer on every worker). Pure. */
int inject_random_victim(const experiment *e, long step);

/* 1 if worker `worker` has failed before its 0-based step `step` (it is fail_rank and
 * step >= fail_step), else 0. Pure: any worker may ask about any other. */
int inject_failed(const experiment *e, int worker, long step);

/* Sleep s seconds (s <= 0: return at once). A SIGTERM / SIGINT (ckpt_signal_pending's stop
 * request) ends the sleep at once; other signals do not shorten it. */
void inject_sleep(double s);

#endif
