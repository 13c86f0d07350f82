/* vclock_gossip_async.c — asynchronous gossip_pull's schedule on the virtual clock
 * (vclock_gossip_async.h). */
#include "train/vclock_gossip_async.h"

#include <math.h>
#include <stdlib.h>

#include "util/util.h"

/* (key, node) ascending. */
static int before(const vclock_gossip_async *g, int a, int b) {
    return g->key[a] < g->key[b] || (g->key[a] == g->key[b] && a < b);
}

static void heap_swap(vclock_gossip_async *g, int i, int j) {
    const int a = g->heap[i], b = g->heap[j];
    g->heap[i] = b, g->heap[j] = a, g->pos[b] = i, g->pos[a] = j;
}

static void heap_push(vclock_gossip_async *g, int k) {
    int i = g->hn++;
    g->heap[i] = k, g->pos[k] = i;
    while (i > 0 && before(g, g->heap[i], g->heap[(i - 1) / 2])) heap_swap(g, i, (i - 1) / 2), i = (i - 1) / 2;
}

static int heap_pop(vclock_gossip_async *g) {
    const int top = g->heap[0];
    heap_swap(g, 0, --g->hn);
    g->pos[top] = -1;
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < g->hn && before(g, g->heap[l], g->heap[m])) m = l;
        if (r < g->hn && before(g, g->heap[r], g->heap[m])) m = r;
        if (m == i) break;
        heap_swap(g, i, m), i = m;
    }
    return top;
}

static int failed_at(const vclock_gossip_async *g, int k, long s) { return k == g->fail_rank && s >= g->fail_step; }

/* Node k's step done[k] begins at start[k]: its request into the heap, or k parks / stops. */
static void schedule(vclock_gossip_async *g, int k) {
    const long s = g->done[k];
    if (s >= g->iterations || failed_at(g, k, s)) {
        g->state[k] = VGA_DONE;
        for (size_t i = 0; i < g->on; i++) { /* k takes nothing more */
            vga_push *o = &g->outs[(g->oh + i) % g->ocap];
            if (o->state == VGA_UNDECIDED && o->to == k) o->state = VGA_NOT_TAKEN;
        }
        return;
    }
    const int j = g->m.peer(g->m.ctx, k, s);
    g->peer[k] = j, g->state[k] = VGA_RUN;
    if (!g->push) {
        g->key[k] = g->start[k] + sim_p2p_s(&g->net, k, j, g->small);
    } else { /* the take at X, then the push leaves when k's uplink has sent the previous one */
        double c, d;
        g->m.compute(g->m.ctx, k, s, &c, &d);
        g->cd[k] = c, g->dd[k] = d;
        g->x[k] = g->start[k] + (c + d);
        g->key[k] = sim_nic_out(&g->nics.free_up[k], &g->net, g->x[k], (double)g->bytes);
        for (size_t i = 0; i < g->on; i++) { /* me's pushes to k that this take reaches */
            vga_push *o = &g->outs[(g->oh + i) % g->ocap];
            if (o->state == VGA_UNDECIDED && o->to == k && o->a <= g->x[k]) o->state = VGA_TAKEN, o->take = g->x[k];
        }
    }
    heap_push(g, k);
}

void vga_init(vclock_gossip_async *g, int p, int me, long iterations, int fail_rank, long fail_step, size_t bytes,
              const sim_net *net, vga_model m) {
    *g = (vclock_gossip_async){.p = p, .me = me, .iterations = iterations, .fail_rank = fail_rank, .fail_step = fail_step,
                               .bytes = bytes, .small = 4, .net = *net, .m = m, .meet_max = -INFINITY, .last_meet = -1};
    g->done = xcalloc((size_t)p, sizeof *g->done), g->reads = xcalloc((size_t)p, sizeof *g->reads);
    g->start = xcalloc((size_t)p, sizeof *g->start), g->last_end = xmalloc((size_t)p * sizeof *g->last_end);
    g->key = xcalloc((size_t)p, sizeof *g->key);
    g->peer = xmalloc((size_t)p * sizeof *g->peer), g->state = xmalloc((size_t)p * sizeof *g->state);
    g->heap = xmalloc((size_t)p * sizeof *g->heap), g->pos = xmalloc((size_t)p * sizeof *g->pos);
    g->nic = xcalloc(2 * (size_t)p, sizeof *g->nic);
    g->nics = (sim_nics){.p = p, .free_up = g->nic, .free_down = g->nic + p};
    g->mine.step = -1;
    g->ocap = 8, g->outs = xmalloc(g->ocap * sizeof *g->outs);
    g->mcap = 8, g->mq = xmalloc(g->mcap * sizeof *g->mq);
    g->x = xcalloc((size_t)p, sizeof *g->x), g->cd = xcalloc((size_t)p, sizeof *g->cd), g->dd = xcalloc((size_t)p, sizeof *g->dd);
    g->tcap = 4 * (size_t)p + 16;
    g->tq = xmalloc(g->tcap * sizeof *g->tq);
    for (int k = 0; k < p; k++) g->last_end[k] = -INFINITY, g->pos[k] = -1;
    if (p > 1 && m.peer)
        for (int k = 0; k < p; k++) schedule(g, k);
}

void vga_free(vclock_gossip_async *g) {
    free(g->done), free(g->reads), free(g->start), free(g->last_end), free(g->key), free(g->peer), free(g->state), free(g->heap),
        free(g->pos), free(g->nic), free(g->x), free(g->cd), free(g->dd), free(g->tq), free(g->outs), free(g->mq);
    *g = (vclock_gossip_async){0};
}

/* Every live node waits at the meeting: all start at M. */
static void release(vclock_gossip_async *g) {
    const double M = g->meet_max;
    g->meetings++;
    for (int k = 0; k < g->p; k++)
        if (g->state[k] == VGA_PARKED) {
            g->last_meet = g->done[k];
            g->start[k] = M;
            schedule(g, k);
        }
    g->parked = 0, g->meet_max = -INFINITY;
    if (g->mn == g->mcap) { /* released ahead of vga_meet's questions more than ever (rare) */
        meet_item *q = xmalloc(2 * g->mcap * sizeof *q);
        for (size_t i = 0; i < g->mn; i++) q[i] = g->mq[(g->mh + i) % g->mcap];
        free(g->mq);
        g->mq = q, g->mh = 0, g->mcap *= 2;
    }
    g->mq[(g->mh + g->mn++) % g->mcap] = (meet_item){g->last_meet, M};
}

/* Release a full meeting when no request is pending; 0 when nothing is left (every node stopped). */
static int pending(vclock_gossip_async *g) {
    if (g->hn == 0 && g->parked > 0) release(g);
    return g->hn > 0;
}

/* After node k's step s ended at E: park at a meeting, stop, or schedule step s + 1. */
static void next_step(vclock_gossip_async *g, int k, long s, double E) {
    g->last_end[k] = E, g->done[k] = s + 1, g->start[k] = E;
    if (!failed_at(g, k, s + 1) && (s + 1 == g->iterations || (s + 1 < g->iterations && g->m.meeting(g->m.ctx, s + 1)))) {
        g->state[k] = VGA_PARKED, g->parked++;
        if (!(g->meet_max >= E)) g->meet_max = E;
    } else schedule(g, k);
}

/* Push: the earliest departure (D, k): k's step s took at X, its θ leaves for j at D and is booked
 * on j's downlink (in the order of (D, k): every push arriving by a take at X has D < X). */
static void handle_push(vclock_gossip_async *g) {
    const int k = heap_pop(g), j = g->peer[k];
    const long s = g->done[k];
    const double D = g->key[k];
    const double a = sim_nic_in(&g->nics.free_down[j], &g->net, k, j, D, (double)g->bytes);
    if (k == g->me) {
        /* taken at j's first take at or after a: j's pending step's, if its X ≥ a (its earlier takes
         * were at X ≤ D < a); later, when j schedules a step with X ≥ a; never once j stops */
        vga_push o = {.step = s, .to = j, .a = a, .state = VGA_UNDECIDED, .S = g->start[k], .x = g->x[k], .D = D, .c = g->cd[k], .d = g->dd[k]};
        if (g->state[j] == VGA_DONE) o.state = VGA_NOT_TAKEN;
        else if (g->state[j] == VGA_RUN && g->x[j] >= a) o.state = VGA_TAKEN, o.take = g->x[j];
        if (g->on == g->ocap) { /* more of me's pushes undecided at once than ever: grows (rare) */
            vga_push *q = xmalloc(2 * g->ocap * sizeof *q);
            for (size_t i = 0; i < g->on; i++) q[i] = g->outs[(g->oh + i) % g->ocap];
            free(g->outs);
            g->outs = q, g->oh = 0, g->ocap *= 2;
        }
        g->outs[(g->oh + g->on++) % g->ocap] = o;
    }
    if (j == g->me && g->state[g->me] != VGA_DONE) { /* arrivals at one downlink increase: in arrival order */
        if (g->tn == g->tcap) { /* more pushes in flight to this node than ever: grows (rare; no bound is known) */
            tq_item *q = xmalloc(2 * g->tcap * sizeof *q);
            for (size_t i = 0; i < g->tn; i++) q[i] = g->tq[(g->th + i) % g->tcap];
            free(g->tq);
            g->tq = q, g->th = 0, g->tcap *= 2;
        }
        g->tq[(g->th + g->tn++) % g->tcap] = (tq_item){a, k};
    }
    next_step(g, k, s, D);
}

/* Handle the earliest request (A, k) (one is pending). */
static void handle_one(vclock_gossip_async *g) {
    if (g->push) {
        handle_push(g);
        return;
    }
    const int k = heap_pop(g), j = g->peer[k];
    const long s = g->done[k];
    const double A = g->key[k], S = g->start[k];
    /* j's state: every publish of j at a time ≤ A is known (vclock_gossip_async.h, Order) */
    const int gone = failed_at(g, j, g->done[j]) && A >= g->last_end[j];
    const long version = g->done[j] - (g->last_end[j] > A ? 1 : 0);
    double R;
    if (gone) R = A + sim_p2p_s(&g->net, j, k, g->small);
    else R = sim_nics_send(&g->nics, &g->net, j, k, g->bytes, A);
    double c, d;
    g->m.compute(g->m.ctx, k, s, &c, &d);
    const double X = S + (c + d);
    const double E = X > R ? X : R;
    if (j == g->me && !gone) g->reads[k]++, g->nreads++;
    if (k == g->me) g->mine = (vga_step){.step = s, .peer = j, .got = !gone, .version = gone ? -1 : version, .S = S, .A = A, .R = R, .E = E, .c = c, .d = d};
    next_step(g, k, s, E);
}

const vga_step *vga_mine(vclock_gossip_async *g, long s) {
    while (g->mine.step < s && pending(g)) handle_one(g);
    return &g->mine;
}

void vga_advance_to(vclock_gossip_async *g, double t) {
    while (pending(g) && g->key[g->heap[0]] < t) handle_one(g);
}

double vga_meet(vclock_gossip_async *g, long s) {
    while (g->mn > 0 && g->mq[g->mh].step < s) g->mh = (g->mh + 1) % g->mcap, g->mn--; /* asked for already */
    while (g->last_meet < s && pending(g))
        if (g->last_meet < s) handle_one(g);
    if (g->mn == 0 || g->mq[g->mh].step != s) DIE("vga_meet: no meeting after %ld steps on the schedule", s);
    return g->mq[g->mh].M;
}

long vga_reads(const vclock_gossip_async *g) { return g->nreads; }

int vga_push_start(vclock_gossip_async *g, long s, double *x) {
    const int me = g->me;
    if (g->on > 0 && g->outs[(g->oh + g->on - 1) % g->ocap].step >= s) { /* the schedule ran past it: its record */
        const vga_push *o = &g->outs[(g->oh + (size_t)(s - g->outs[g->oh].step)) % g->ocap];
        if (o->step != s) DIE("vga_push_start: node %d's record of step %ld is missing", me, s);
        *x = o->x;
    } else {
        while (!(g->done[me] == s && g->state[me] == VGA_RUN) && pending(g)) handle_one(g);
        if (!(g->done[me] == s && g->state[me] == VGA_RUN)) DIE("vga_push_start: node %d's step %ld is not on the schedule", me, s);
        *x = g->x[me];
    }
    vga_advance_to(g, *x); /* every push that arrives by x is booked */
    return 0;
}

int vga_push_take(vclock_gossip_async *g, double x) {
    if (g->tn == 0 || g->tq[g->th].a > x) return -1;
    const int k = g->tq[g->th].from;
    g->th = (g->th + 1) % g->tcap, g->tn--;
    return k;
}

const vga_push *vga_push_sent(vclock_gossip_async *g, long s) {
    while (g->on > 0 && g->outs[g->oh].step < s) g->oh = (g->oh + 1) % g->ocap, g->on--; /* asked for already */
    while ((g->on == 0 || g->outs[g->oh].step < s) && pending(g)) handle_one(g);
    if (g->on == 0 || g->outs[g->oh].step != s) DIE("vga_push_sent: node %d's push of step %ld is not on the schedule", g->me, s);
    vga_push *o = &g->outs[g->oh];
    while (o->state == VGA_UNDECIDED && pending(g)) handle_one(g), o = &g->outs[g->oh]; /* (the ring may grow) */
    if (o->state == VGA_UNDECIDED) o->state = VGA_NOT_TAKEN; /* nothing left to run: no take reaches it */
    return o;
}

void vga_init_push(vclock_gossip_async *g, int p, int me, long iterations, int fail_rank, long fail_step, size_t bytes,
                   const sim_net *net, vga_model m) {
    vga_model none = m;
    none.peer = NULL;
    vga_init(g, p, me, iterations, fail_rank, fail_step, bytes, net, none); /* nothing scheduled yet */
    g->m = m, g->push = 1;
    if (p > 1)
        for (int k = 0; k < p; k++) schedule(g, k);
}
