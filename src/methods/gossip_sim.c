/* gossip_sim.c — asynchronous gossip_pull in sim mode (docs/simulate.md "Gossip, asynchronous";
 * issue 25 §4). Every rank runs the same discrete-event schedule of the whole cluster
 * (train/vclock_gossip_async.h: pure arithmetic, no messages for timing); only θ moves, point to
 * point, between the two ranks the schedule names, in an order both know.
 *
 * Data. Node j publishes version v (θ_j after v steps) at the end of its step v − 1. Its readers
 * are the requests (A, k) with A ∈ [E_j(v − 1), E_j(v)); j learns them all at once, at the
 * publish, by running the schedule ahead to its own E_j(v) (pure: no one else's data is needed
 * for it), copies θ^v into sendbuf and sends it to each reader (a reader that reads v twice gets
 * it twice: the second send starts when the first has completed, in `pump`). A reader k receives,
 * at its step s, the next message from j (MPI keeps the order per source and tag; j sends to k in
 * the order of k's reads, whose versions increase). Before copying θ^{v+1} into sendbuf, j waits
 * until every send of θ^v has completed (`drain`).
 * (Sending θ^v only at the publish of v + 1, once E_j(v) is passed in real execution, deadlocks:
 * at p = 2 each node's step s reads the other's version s, which would be sent only at the end of
 * the other's step s.)
 *
 * No deadlock, every wait bounded by comm_timeout_s. Give each event its virtual time: a node's
 * events happen in increasing virtual time (latencies and compute > 0). The blocking waits are
 *   (a) reader k at step s waits for θ_j^v: j starts that send at its publish of v, at virtual
 *       E_j(v − 1) ≤ A_k(s) < k's own time (a duplicate: as soon as k has received the earlier
 *       copy, at k's earlier step, and j tests it: j tests in every wait of its own (comm_on_wait
 *       calls gossip_sim_hook) and at each step);
 *   (b) j at its publish of v + 1 (virtual E_j(v)) waits for the readers of v, which post their
 *       receives at the start S_k(s) < A_k(s) < E_j(v) of their steps;
 *   (c) the meetings (evaluations, periodic checkpoints, the end), collectives that every node
 *       reaches once its steps before the meeting are done; the schedule has no message cross a
 *       meeting backwards (no step before a meeting reads a version published after it).
 * Each wait goes to an event at a strictly earlier virtual time, or to a collective every node
 * reaches: the earliest event not yet done can always be done, so the run progresses.
 *
 * A stop signal (SIGTERM) is taken at the next meeting point (gossip_signal.c): between them the
 * nodes' steps and reads are the schedule's, which a stop at another step would cut. */
#include "methods/gossip_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/cadence.h"
#include "util/util.h"

/* The peer node i talks to at step s: uniform over the other p − 1 nodes (every form of gossip,
 * real or simulated, draws it here). */
int gossip_peer_of(const experiment *e, int i, long s) {
    rng_t r;
    rng_seed(&r, seed_mix(seed_mix(e->seed ^ 0x676f73736970ULL, (uint64_t)s), (uint64_t)i));
    int j = (int)rng_below(&r, (uint64_t)(e->p - 1));
    return j >= i ? j + 1 : j;
}

/* The schedule's view of the experiment (ctx: the gossip). */
static void model_compute(void *ctx, int k, long s, double *c, double *d) {
    const gossip *g = ctx;
    const vclock *vc = &g->t->vc;
    *c = vc->step_s * vclock_jitter(vc, k, s); /* as vclock_compute charges it */
    *d = inject_draw_s(&g->inj[k], s);
}
static int model_peer(void *ctx, int k, long s) { return gossip_peer_of(((const gossip *)ctx)->t->e, k, s); }
static int model_meeting(void *ctx, long s) {
    return (cadence_due(((const gossip *)ctx)->t->e, s - 1, s) & (CADENCE_EVAL | CADENCE_CKPT)) != 0;
}

/* The nodes meet after s steps (an evaluation, a periodic checkpoint, the end)? */
static int meets_after(const gossip *g, long s) { return s == g->t->e->iterations || model_meeting((void *)g, s); }

/* Start what can start: a node's next send of θ^v once its previous one to that node completed.
 * Never blocks. */
static void pump(gossip *g) {
    for (int i = 0; i < g->np;) {
        const int k = g->plist[i];
        if (comm_set_active(g->sset, g->s_snd[k]) && !comm_set_test(g->sset, g->s_snd[k])) {
            i++;
            continue;
        }
        if (g->pend[k] > 0) {
            comm_set_start(g->sset, g->s_snd[k]);
            g->pend[k]--;
            i++;
            continue;
        }
        g->plist[i] = g->plist[--g->np];
    }
}

void gossip_sim_hook(void *ctx) { pump(ctx); }

/* Wait (bounded) until every send of sendbuf has completed. */
static void drain(gossip *g) {
    const double t0 = wall_time();
    for (pump(g); g->np > 0; pump(g)) {
        if (wall_time() - t0 > g->t->e->comm_timeout_s) comm_timeout_abort("a gossip peer (sim mode: taking a pulled θ)");
        comm_pause(wall_time() - t0);
    }
}

/* θ^v (th) to its readers: the schedule run ahead to this node's E(v). */
static void publish_version(gossip *g, const float *th, long v) {
    const experiment *e = g->t->e;
    drain(g);
    memcpy(g->sendbuf, th, g->n * sizeof(float));
    g->pub_v = v;
    if (inject_failed(e, g->me, v)) return; /* failed before step v: pulls of version v are answered "gone" */
    if (v < e->iterations) vga_advance_to(&g->ga, vga_mine(&g->ga, v)->E);
    else vga_advance_to(&g->ga, INFINITY); /* the last version: every pull still to come */
    for (int k = 0; k < g->p; k++)
        if (g->ga.reads[k]) {
            if (g->pend[k] == 0 && !comm_set_active(g->sset, g->s_snd[k])) g->plist[g->np++] = k;
            g->pend[k] += g->ga.reads[k];
            g->ga.reads[k] = 0;
        }
    g->ga.nreads = 0;
    pump(g);
}

/* Push: a buffer of θ_i sent to one node, busy until that node takes it (its MPI send completes
 * then) — in virtual time at `take`. */
struct gossip_slot {
    float *buf;
    comm_set *set; /* (p) sends of buf */
    int busy, to;
    double take;
};

static void add_slot(gossip *g) {
    g->slots = realloc(g->slots, (size_t)(g->nslots + 1) * sizeof *g->slots);
    if (!g->slots) DIE("out of memory for a gossip push buffer");
    struct gossip_slot *sl = &g->slots[g->nslots++];
    *sl = (struct gossip_slot){.buf = xmalloc(g->n * sizeof(float)), .set = comm_set_new(g->p)};
    for (int k = 0; k < g->p; k++) comm_set_add(sl->set, COMM_SEND, sl->buf, g->n * sizeof(float), k, TAG_PUSH);
}

int gossip_sim_setup(gossip *g, trainer *t, char *err, size_t errlen) {
    const experiment *e = t->e;
    const int p = g->p;
    const size_t nb = g->n * sizeof(float);
    if (t->vc.step_s < 0) /* config.c refuses it already; kept for callers without it */
        return seterr(err, errlen, "%s: sim mode runs asynchronous gossip with a modelled device only (not \"measured\")", e->source);
    g->sim_async = 1;
    g->inj = xmalloc((size_t)p * sizeof *g->inj);
    for (int k = 0; k < p; k++) inject_init(&g->inj[k], e, k);
    const vga_model m = {.ctx = g, .compute = model_compute, .peer = model_peer, .meeting = model_meeting};
    if (g->push) {
        vga_init_push(&g->ga, p, g->me, e->iterations, e->inject.fail_rank, e->inject.fail_step, t->vc.model_bytes, &t->vc.net, m);
        g->sset = comm_set_new(p);
        g->s_rcv = xmalloc((size_t)p * sizeof(int));
        for (int k = 0; k < p; k++) g->s_rcv[k] = comm_set_add(g->sset, COMM_RECV, g->peer, nb, k, TAG_PUSH);
        add_slot(g), add_slot(g); /* enough unless a receiver is far behind: gossip_sim_push */
        return 0;
    }
    vga_init(&g->ga, p, g->me, e->iterations, e->inject.fail_rank, e->inject.fail_step, t->vc.model_bytes, &t->vc.net, m);
    g->sset = comm_set_new(2 * p);
    g->s_snd = xmalloc((size_t)p * sizeof(int)), g->s_rcv = xmalloc((size_t)p * sizeof(int));
    g->pend = xcalloc((size_t)p, sizeof(long)), g->plist = xmalloc((size_t)p * sizeof(int));
    for (int k = 0; k < p; k++) {
        g->s_snd[k] = comm_set_add(g->sset, COMM_SEND, g->sendbuf, nb, k, TAG_PULLREP);
        g->s_rcv[k] = comm_set_add(g->sset, COMM_RECV, g->peer, nb, k, TAG_PULLREP);
    }
    publish_version(g, model_params(t->net), 0);
    return 0;
}

void gossip_sim_free(gossip *g) {
    if (!g->sim_async) return;
    comm_set_free(g->sset); /* cancels sends to readers beyond a stop */
    for (int i = 0; i < g->nslots; i++) comm_set_free(g->slots[i].set), free(g->slots[i].buf);
    free(g->slots);
    vga_free(&g->ga);
    free(g->inj), free(g->s_snd), free(g->s_rcv), free(g->pend), free(g->plist);
}

const vga_step *gossip_sim_start(gossip *g, long s) {
    const vga_step *r = vga_mine(&g->ga, s); /* handled at the publish of version s */
    if (r->step != s) DIE("sim gossip: the schedule has step %ld of node %d, not %ld", r->step, g->me, s);
    if (r->got && !comm_set_active(g->sset, g->s_rcv[r->peer])) comm_set_start(g->sset, g->s_rcv[r->peer]);
    return r;
}

void gossip_sim_charge(gossip *g, const vga_step *r) {
    vclock *vc = &g->t->vc;
    if (vc->step_start != r->S || vc->now != r->S + (r->c + r->d)) /* the schedule is this clock, bit for bit */
        DIE("sim gossip: node %d's clock %.17g (step %ld from %.17g) is not the schedule's %.17g", g->me, vc->now, r->step, vc->step_start,
            r->S + (r->c + r->d));
    vclock_gossip_charge(vc, r->E);
}

int gossip_sim_finish(gossip *g, const vga_step *r) {
    if (!r->got) return 0;
    const int i = g->s_rcv[r->peer];
    const double t0 = wall_time();
    while (!comm_set_test(g->sset, i)) {
        pump(g);
        if (wall_time() - t0 > g->t->e->comm_timeout_s) comm_timeout_abort("a gossip peer (sim mode: a pulled θ)");
        comm_pause(wall_time() - t0);
    }
    return 1;
}


void gossip_sim_publish(gossip *g, const float *th, long s) {
    if (meets_after(g, s + 1)) vclock_gossip_charge(&g->t->vc, vga_meet(&g->ga, s + 1)); /* wait for the slowest node */
    publish_version(g, th, s + 1);
}

void gossip_sim_idle(gossip *g, long s) {
    pump(g);
    if (meets_after(g, s + 1)) vclock_gossip_charge(&g->t->vc, vga_meet(&g->ga, s + 1));
}

/* ---- push ----------------------------------------------------------------------------------
 * Node i's push of step m leaves at D (virtual) and is taken by its receiver j at T ≥ a > D, when j
 * receives it (MPI) at that take, in arrival order. The θ stays in its own buffer (a slot) until
 * then: a slot is reused at a later push leaving at D' only once its take T ≤ D', and the wait
 * for its MPI send to complete is then a wait for j's take at T ≤ D' — an earlier event (a take
 * before a push at one instant) — so no wait goes forward in virtual time (with one buffer, a
 * sender would wait at D' for a take T > D', and a cycle of such waits through a busy downlink
 * can deadlock). A receiver's take at X waits for pushes that left at D < X. The buffers double
 * when every one holds a θ not yet taken: a node needs as many as it has pushes in flight at once,
 * which no bound limits — with compute shorter than n/β every node pushes at line rate, every
 * downlink runs at full load and its FIFO queue grows like the square root of the steps (p = 8,
 * sim.step_ms = 20, 10 GbE: 12–16 in flight after 200 steps, 26–30 after 800; with k80's 198 ms
 * steps and jitter 0.3, 3–10 after 800). Each buffer is one θ of the proxy model (31 KB for the
 * linear model) and p persistent sends. */

int gossip_sim_take(gossip *g, long s, double *x) {
    vga_push_start(&g->ga, s, x);
    memset(g->inbox, 0, g->n * sizeof(float));
    int got = 0;
    for (int k; (k = vga_push_take(&g->ga, *x)) >= 0; got++) { /* in arrival order */
        comm_set_start(g->sset, g->s_rcv[k]);
        comm_set_wait_or_abort(g->sset, g->s_rcv[k], "a gossip peer (sim mode: a pushed θ)");
        for (size_t q = 0; q < g->n; q++) g->inbox[q] += g->peer[q];
    }
    return got;
}

void gossip_sim_push(gossip *g, const float *th, long s) {
    const double M = meets_after(g, s + 1) ? vga_meet(&g->ga, s + 1) : -INFINITY; /* before running ahead */
    const vga_push *o = vga_push_sent(&g->ga, s);
    const double D = o->D;
    vclock_gossip_charge(&g->t->vc, D); /* the previous push leaving the uplink */
    if (o->state == VGA_TAKEN) {
        int i = 0;
        while (i < g->nslots && g->slots[i].busy && !(g->slots[i].take <= D)) i++;
        if (i == g->nslots) /* every θ sent is still in flight: twice the buffers (rare; see above) */
            for (int more = g->nslots; more > 0; more--) add_slot(g);
        struct gossip_slot *sl = &g->slots[i];
        if (sl->busy) comm_set_wait_or_abort(sl->set, sl->to, "a gossip peer (sim mode: taking a pushed θ)");
        memcpy(sl->buf, th, g->n * sizeof(float));
        *sl = (struct gossip_slot){.buf = sl->buf, .set = sl->set, .busy = 1, .to = o->to, .take = o->take};
        comm_set_start(sl->set, o->to);
    }
    g->sent[o->to]++;
    if (M > -INFINITY) vclock_gossip_charge(&g->t->vc, M);
}
