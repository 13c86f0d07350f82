/* gossip_signal.c — signals (checkpoint/stop requests, src/train/checkpoint.h) between the
 * meeting points of the gossip methods (docs/checkpoint.md, "Gossip between meeting points").
 *
 * Asynchronous nodes meet only at evaluations, so a signal is passed on by messages: a node that
 * knows of one (its own, or an announcement it received) announces {kind, the steps it will have
 * completed, whether that is a meeting point} to every other node, once per epoch. A node that
 * has announced does not start a step beyond its announcement until it holds all p − 1 others'
 * announcements; then every node knows the same target: asynchronous nodes meet at once, each at
 * its own step (a consistent cut: nothing is in flight once pushes are counted), unless a node
 * announced a meeting point (it may already wait there: then everyone goes to that meeting);
 * lock-step nodes at the largest step announced (they cannot leave a step half done). Every wait
 * of the main thread takes announcements (comm_on_wait), so a node blocked in an exchange or at a
 * meeting still answers. Bound: about two steps of the slowest node after the signal. */
#include <stdlib.h>

#include "methods/gossip_signal.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "util/util.h"

/* Meeting points: an evaluation or a periodic checkpoint is due once c ≥ 1 steps are complete. */
static int meeting_point(const experiment *e, long c) { return (cadence_due(e, c - 1, c) & (CADENCE_EVAL | CADENCE_CKPT)) != 0; }

void gossip_sig_open(gossip *g) {
    const int p = g->p;
    g->sig = comm_set_new(p + 1);
    g->s_sig = xmalloc((size_t)p * sizeof(int));
    g->r_sig = comm_set_add(g->sig, COMM_RECV, g->sig_in, sizeof g->sig_in, COMM_ANY_SOURCE, TAG_SIGANN);
    for (int k = 0; k < p; k++) g->s_sig[k] = k == g->me ? -1 : comm_set_add(g->sig, COMM_SEND, g->sig_out, sizeof g->sig_out, k, TAG_SIGANN);
    comm_set_start(g->sig, g->r_sig);
}

void gossip_sig_close(gossip *g) {
    comm_set_free(g->sig);
    free(g->s_sig);
}

static void sig_announce(gossip *g, long step) {
    g->ann = 1, g->my_ann = step;
    const int mine = ckpt_signal_pending();
    if (mine > g->ep_kind) g->ep_kind = mine;
    if (step > g->ep_max) g->ep_max = step;
    const int meet = meeting_point(g->t->e, step);
    g->ep_meet |= meet;
    for (int k = 0; k < g->p; k++)
        if (k != g->me) comm_set_wait_or_abort(g->sig, g->s_sig[k], "a gossip peer (announcing a signal)");
    g->sig_out[0] = g->ep_kind, g->sig_out[1] = step, g->sig_out[2] = meet;
    for (int k = 0; k < g->p; k++)
        if (k != g->me) comm_set_start(g->sig, g->s_sig[k]);
}

/* Take the announcements that arrived; announce (step) if this node knows of a signal and has
 * not yet. Returns 1 while an epoch is open on this node. */
static int sig_poll(gossip *g, long step) {
    if (!g->sig) return 0;
    while (comm_set_test(g->sig, g->r_sig)) {
        g->n_ann++;
        if (g->sig_in[0] > g->ep_kind) g->ep_kind = (int)g->sig_in[0];
        if (g->sig_in[1] > g->ep_max) g->ep_max = (long)g->sig_in[1];
        g->ep_meet |= (int)g->sig_in[2];
        comm_set_start(g->sig, g->r_sig);
    }
    if (!g->ann && (g->n_ann > 0 || ckpt_signal_pending())) sig_announce(g, step);
    return g->ann;
}

void gossip_sig_hook(void *ctx) {
    gossip *g = ctx;
    if (g->pos >= 0) sig_poll(g, g->pos);
}

/* Wait (bounded) until every other node's announcement of this epoch is in. */
static void sig_wait_all(gossip *g) {
    const double t0 = wall_time();
    while (g->n_ann < g->p - 1) {
        sig_poll(g, g->pos);
        if (wall_time() - t0 > g->t->e->comm_timeout_s) comm_timeout_abort("the other gossip nodes (announcing a signal)");
        comm_pause(wall_time() - t0);
    }
}

/* The step this node meets at in the current epoch (every announcement in). */
static long sig_target(const gossip *g) { return g->sync || g->ep_meet ? g->ep_max : g->my_ann; }

void gossip_sig_step(gossip *g, long s) {
    if (g->closing) { /* the epoch the last meeting point closed */
        g->ann = g->n_ann = g->ep_kind = g->ep_meet = 0;
        g->ep_max = g->my_ann = 0;
        g->closing = 0;
    }
    g->pos = s + 1; /* a node announcing from a wait in this step will complete it */
}

/* method_ops.signal: a signal here or on another node (announcements) makes the target step this
 * node's meeting point. */
int gossip_signal(trainer *t, long done) {
    gossip *g = t->mstate;
    if (g->sim_async) return 0; /* sim mode: taken at the next meeting point (gossip_sim.c) */
    if (!sig_poll(g, done)) return 0;
    sig_wait_all(g);
    return done >= sig_target(g) && !meeting_point(t->e, done);
}

/* method_ops.meet: meeting points (evaluations, every checkpoint.every steps, a signal's meeting)
 * are where the nodes agree on signals and write checkpoints: no extra synchronisation between
 * them. After a signal between meeting points each node is at its own step: a checkpoint's label
 * is then the largest. */
long gossip_meet(trainer *t, long done, int sigmeet) {
    gossip *g = t->mstate;
    if (g->sim_async) { /* every node is at `done`: agree on a signal, no announcements */
        t->sig = comm_agree(ckpt_signal_pending());
        return done;
    }
    sig_poll(g, done);
    const int mine = ckpt_signal_pending() > g->ep_kind ? ckpt_signal_pending() : g->ep_kind;
    t->sig = comm_agree(mine);
    /* at a meeting point every node closes the epoch: all announcements in */
    if (t->sig && g->sig) {
        if (!g->ann) sig_announce(g, done);
        sig_wait_all(g);
    }
    g->closing = g->ann;
    return sigmeet && (t->sig || (cadence_due(t->e, done - 1, done) & CADENCE_CKPT)) ? comm_max_long(done) : done;
}
