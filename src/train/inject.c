/* inject.c — straggler and failure injection (see inject.h).
 *
 * Each decision draws from its own xoshiro256** stream, seeded by seed_mix of a tag, the
 * experiment's seed, and the step (and the worker where the draw is the worker's own), so that
 * no decision depends on the order in which they are asked for:
 *   victim   (seed, step)          whether random_slow strikes, and which worker
 *   slow     (seed, worker, step)  the delay of a slow_ranks worker
 *   random   (seed, worker, step)  the delay of the random_slow victim */
#include "train/inject.h"

#include "train/checkpoint.h"
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <time.h>

/* Stream tags ("inj-vict", "inj-slow", "inj-rand" in ASCII): keep the streams apart from each
 * other and from the initialisation and permutation streams of the same seed. */
#define TAG_VICTIM 0x696e6a2d76696374ull
#define TAG_SLOW 0x696e6a2d736c6f77ull
#define TAG_RANDOM 0x696e6a2d72616e64ull

static void stream(rng_t *r, uint64_t tag, uint64_t seed, int worker, long step) {
    uint64_t s = seed_mix(seed_mix(tag, seed), (uint64_t)(int64_t)worker);
    rng_seed(r, seed_mix(s, (uint64_t)(int64_t)step));
}

/* One delay in seconds from delay_dist with mean delay_ms. */
static double draw_delay(const experiment *e, rng_t *r) {
    double mean = e->inject.delay_ms * 1e-3;
    switch (e->inject.delay_dist) {
    case DELAY_FIXED: return mean;
    case DELAY_EXPONENTIAL: return -mean * log1p(-rng_uniform(r)); /* 1 - u in (0, 1] */
    case DELAY_LOGNORMAL: return mean * exp(rng_normal(r) - 0.5); /* exp(σZ − σ²/2) with σ = 1 */
    }
    return mean;
}

void inject_init(injector *in, const experiment *e, int worker) {
    *in = (injector){.e = e, .worker = worker, .virtual_time = e->sim.enabled};
    for (int i = 0; i < e->inject.n_slow_ranks; i++)
        if (e->inject.slow_ranks[i] == worker) in->is_slow = 1;
}

int inject_random_victim(const experiment *e, long step) {
    if (!(e->inject.random_slow > 0) || e->p < 1) return -1;
    rng_t r;
    stream(&r, TAG_VICTIM, e->seed, 0, step);
    if (!(rng_uniform(&r) < e->inject.random_slow)) return -1; /* u in [0, 1): probability 1 always strikes */
    return (int)rng_below(&r, (uint64_t)e->p);
}

double inject_delay_s(const injector *in, long step) { return in->virtual_time ? 0.0 : inject_draw_s(in, step); }

double inject_draw_s(const injector *in, long step) {
    const experiment *e = in->e;
    if (!(e->inject.delay_ms > 0)) return 0;
    double d = 0;
    rng_t r;
    if (in->is_slow) {
        stream(&r, TAG_SLOW, e->seed, in->worker, step);
        d += draw_delay(e, &r);
    }
    if (inject_random_victim(e, step) == in->worker) {
        stream(&r, TAG_RANDOM, e->seed, in->worker, step);
        d += draw_delay(e, &r);
    }
    return d;
}

int inject_failed(const experiment *e, int worker, long step) {
    return e->inject.fail_rank >= 0 && worker == e->inject.fail_rank && step >= e->inject.fail_step;
}

void inject_sleep(double s) {
    if (!(s > 0)) return; /* also NaN */
    if (s > 1e9) s = 1e9; /* ~32 years: keeps tv_sec in range */
    struct timespec req, rem;
    req.tv_sec = (time_t)s;
    req.tv_nsec = (long)((s - (double)req.tv_sec) * 1e9);
    if (req.tv_nsec > 999999999L) req.tv_nsec = 999999999L;
    /* A signal interrupts nanosleep (EINTR): a stop request ends the sleep, anything else
     * (SIGUSR1, a profiler's timer) sleeps the rest. */
    while (nanosleep(&req, &rem) == -1 && errno == EINTR && !(ckpt_signal_pending() & CKPT_SIG_STOP)) req = rem;
}
