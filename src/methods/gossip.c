/* gossip.c — gossiping SGD (Jin et al. 2016 §3): pull-gossip and push-gossip, asynchronous or
 * in lock-step (§6.1.1), in the two orders of §6.2.
 *
 * Every node i keeps its own θ_i and momentum. At each step s it draws a peer j ≠ i uniformly
 * (a pure function of (seed, i, s), counted in /gossip/peers) and gets "received" vectors:
 *   gossip_pull  θ_j, read without j taking part;            mix(θ) = (θ + θ_j)/2
 *   gossip_push  it sends θ_i to j; received = the θ_k pushed to i since its previous step
 *                (k ≥ 0 of them, a node may receive from several); mix(θ) = (θ + Σ θ_k)/(1 + k)
 * and combines them with its Nesterov-SGD step on its own minibatch, in `gossip_order`:
 *   stale (§6.2.1)  gradient and gossip from the same θ:  θ ← SGD-update(mix(θ), ∇f(θ))
 *   fresh (§6.2.2)  gradient step first:                  θ ← mix(SGD-update(θ, ∇f(θ)))
 * (SGD-update adds weight decay at the θ it updates.)
 *
 * Asynchronous (default). Pull: node j publishes θ_j after each step into a buffer served by
 * its communication thread (MPI_THREAD_MULTIPLE, polled with naps, src/comm/comm.c); node i
 * sends a small request before computing its gradient and collects the reply after, so neither
 * waits for the other's computation. Push: the receiver's communication thread sums arriving
 * vectors into an inbox that its main thread mixes in at its next step.
 * Synchronous (`synchronous = true`): lock-step rounds from θ^s of every node. As peer choices
 * are pure functions, node i knows which nodes pull from it (or push to it) at step s and
 * exchanges with exactly those, in rank order, from the main thread: deterministic for a seed.
 *
 * Evaluation (collective over the workers every eval.every local steps and at the end; time
 * there, waiting for slower nodes included, is excluded from the clock): the average of the
 * nodes' θ and BN statistics, formed only for evaluation, and rank 0's own model (/eval_local).
 * The diffusion potential Φ = Σ_i ‖θ_i − θ̄‖² (§3.1) is printed and kept in /gossip/potential.
 * /train rows carry rank 0's own losses; /ranks rows are gathered at evaluations.
 * A failed node (inject.fail_rank) stops training and gossiping but still joins evaluations
 * with weight 0; pulls from it are answered "gone" and skipped. With p = 1, plain SGD. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "methods/method.h"
#include "optim/sgd.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "util/util.h"

enum { TAG_PULL = 200, TAG_PULLHDR, TAG_PULLREP, TAG_PUSH, TAG_QUIT, TAG_SYNC, TAG_SIGANN };

typedef struct {
    trainer *t;
    int push, sync, fresh, p, me;
    size_t n, nbn;
    float *peer;              /* (n) θ_j pulled / one received θ_k */
    float *inbox;             /* (n) push: sum of received θ_k */
    int inbox_k;
    long long recv_n;         /* push: vectors the thread has put into the inbox, ever */
    long long *sent;          /* (p) push: vectors this node pushed to each node, ever */
    float *sendbuf;           /* (n) main thread: θ_i being pushed (async push) or sent (sync) */
    /* asynchronous: the communication thread */
    pthread_t th;
    int has_thread;
    pthread_mutex_t mu;       /* pub, inbox, inbox_k, gone */
    float *pub;               /* (n) pull: θ_i published after each step */
    float *tbuf;              /* (n) pull: the reply the thread sends */
    float *recvbuf;           /* (n) push: a vector arriving */
    int gone;
    comm_set *bg;
    int32_t req_in, rep_hdr, quit_in;
    int b_req, b_push, b_quit, *b_rephdr, *b_rep, last_rep, *bg_done;
    /* main thread requests */
    comm_set *set;
    int32_t ask, ans, quit_out;
    int *m_ask, *m_ans, *m_get, *m_send, *m_recv, m_quit, last_push;
    /* records */
    long long *peers;         /* (p) this node's choices; (p·p) on rank 0 at the end */
    double *phi;              /* rank 0: Φ per evaluation */
    long n_evals, max_evals;  /* Φ values logged, allocated (grows: evaluations are rare) */
    float *avg, *own, *avg_bn, *own_bn;
    double *gbuf, *rows;      /* /ranks gather */
    phase_times prev;
    long steps_done, prev_done;   /* steps this node took; at the previous /ranks row */
    /* signals between meeting points (docs/checkpoint.md, "Gossip"): announcements */
    comm_set *sig;
    int64_t sig_in[3], sig_out[3]; /* {CKPT_SIG_* kind, step, at a meeting point} */
    int r_sig, *s_sig;
    int ann;                  /* this node has announced in the current epoch */
    int n_ann;                /* announcements received in it (p − 1 complete it) */
    int ep_kind, ep_meet;     /* strongest kind announced; some node announced a meeting point */
    long ep_max, my_ann;      /* largest step announced; this node's */
    long pos;                 /* what this node announces from a wait: steps it will have completed
                                 (-1: before the first step, nothing) */
    int closing;              /* the last meeting point closed an epoch: reset at the next step */
} gossip;

static gossip G;

/* The peer node i talks to at step s: uniform over the other p − 1 nodes. */
static int peer_of(const experiment *e, int i, long s) {
    rng_t r;
    rng_seed(&r, seed_mix(seed_mix(e->seed ^ 0x676f73736970ULL, (uint64_t)s), (uint64_t)i));
    int j = (int)rng_below(&r, (uint64_t)(e->p - 1));
    return j >= i ? j + 1 : j;
}

static void *gossip_thread(void *arg) {
    (void)arg;
    comm_set *s = G.bg;
    int *done = G.bg_done;
    for (;;) {
        int nd = comm_set_wait_some(s, done, 1e18);
        for (int k = 0; k < nd; k++) {
            int idx = done[k];
            if (idx == G.b_quit) return NULL; /* pending receives are cancelled by comm_set_free */
            if (idx == G.b_req) { /* a pull: answer from the published θ */
                int from = comm_set_source(s, G.b_req);
                if (G.last_rep >= 0 && (comm_set_wait(s, G.b_rephdr[G.last_rep], G.t->e->comm_timeout_s) != 0 ||
                                        comm_set_wait(s, G.b_rep[G.last_rep], G.t->e->comm_timeout_s) != 0))
                    comm_timeout_abort("a gossip peer (taking a pull reply)");
                pthread_mutex_lock(&G.mu);
                G.rep_hdr = G.gone;
                if (!G.gone) memcpy(G.tbuf, G.pub, G.n * sizeof(float));
                pthread_mutex_unlock(&G.mu);
                comm_set_start(s, G.b_rephdr[from]);
                comm_set_start(s, G.b_rep[from]);
                G.last_rep = from;
                comm_set_start(s, G.b_req);
            } else if (idx == G.b_push) { /* a pushed θ_k: into the inbox */
                pthread_mutex_lock(&G.mu);
                if (!G.gone) {
                    for (size_t j = 0; j < G.n; j++) G.inbox[j] += G.recvbuf[j];
                    G.inbox_k++;
                }
                G.recv_n++;
                pthread_mutex_unlock(&G.mu);
                comm_set_start(s, G.b_push);
            }
        }
    }
}

static int gossip_setup(trainer *t, char *err, size_t errlen) {
    const experiment *e = t->e;
    gossip *g = &G;
    memset(g, 0, sizeof *g);
    g->t = t;
    g->push = e->method == METHOD_GOSSIP_PUSH;
    g->sync = e->synchronous;
    g->fresh = e->gossip_order == GOSSIP_FRESH;
    g->p = e->p, g->me = t->worker;
    g->n = model_n_params(t->net), g->nbn = model_n_bn(t->net);
    const size_t n = g->n, nb = n * sizeof(float);
    const int p = g->p;
    g->peer = xmalloc(nb), g->inbox = xcalloc(n, sizeof(float)), g->sendbuf = xmalloc(nb);
    g->avg = xmalloc(nb), g->own = xmalloc(nb);
    g->avg_bn = xmalloc((g->nbn ? g->nbn : 1) * sizeof(float)), g->own_bn = xmalloc((g->nbn ? g->nbn : 1) * sizeof(float));
    g->peers = xcalloc((size_t)p * p, sizeof(long long));
    g->sent = xcalloc((size_t)p, sizeof(long long));
    g->max_evals = 64; /* grows by doubling: not sized by iterations, which may be huge */
    g->phi = xcalloc((size_t)g->max_evals, sizeof(double));
    g->gbuf = xmalloc((size_t)p * 5 * sizeof(double)), g->rows = xmalloc((size_t)p * 5 * sizeof(double));
    g->m_ask = xmalloc((size_t)p * sizeof(int)), g->m_ans = xmalloc((size_t)p * sizeof(int)), g->m_get = xmalloc((size_t)p * sizeof(int));
    g->m_send = xmalloc((size_t)p * sizeof(int)), g->m_recv = xmalloc((size_t)p * sizeof(int));
    g->last_push = -1, g->last_rep = -1, g->b_req = -1, g->b_push = -1, g->b_quit = -1;
    g->set = comm_set_new(5 * p + 1);
    if (p == 1) return 0;
    g->sig = comm_set_new(p + 1);
    g->s_sig = xmalloc((size_t)p * sizeof(int));
    g->r_sig = comm_set_add(g->sig, COMM_RECV, g->sig_in, sizeof g->sig_in, COMM_ANY_SOURCE, TAG_SIGANN);
    for (int k = 0; k < p; k++) g->s_sig[k] = k == g->me ? -1 : comm_set_add(g->sig, COMM_SEND, g->sig_out, sizeof g->sig_out, k, TAG_SIGANN);
    comm_set_start(g->sig, g->r_sig);
    if (g->sync) {
        for (int k = 0; k < p; k++) {
            g->m_send[k] = comm_set_add(g->set, COMM_SEND, g->sendbuf, nb, k, TAG_SYNC);
            g->m_recv[k] = comm_set_add(g->set, COMM_RECV, g->peer, nb, k, TAG_SYNC);
        }
        return 0;
    }
    if (!comm_thread_multiple())
        return seterr(err, errlen, "%s: method %s (asynchronous) needs an MPI library with MPI_THREAD_MULTIPLE; "
                                   "this one does not provide it: use synchronous = true", e->source, method_name(e->method));
    pthread_mutex_init(&g->mu, NULL);
    g->bg = comm_set_new(2 * p + 3);
    g->bg_done = xmalloc((size_t)(2 * p + 3) * sizeof(int));
    comm_set_background(g->bg);
    g->b_rephdr = xmalloc((size_t)p * sizeof(int)), g->b_rep = xmalloc((size_t)p * sizeof(int));
    if (!g->push) {
        g->pub = xmalloc(nb), g->tbuf = xmalloc(nb);
        memcpy(g->pub, model_params(t->net), nb);
        g->b_req = comm_set_add(g->bg, COMM_RECV, &g->req_in, sizeof g->req_in, COMM_ANY_SOURCE, TAG_PULL);
        for (int k = 0; k < p; k++) {
            g->b_rephdr[k] = comm_set_add(g->bg, COMM_SEND, &g->rep_hdr, sizeof g->rep_hdr, k, TAG_PULLHDR);
            g->b_rep[k] = comm_set_add(g->bg, COMM_SEND, g->tbuf, nb, k, TAG_PULLREP);
            g->m_ask[k] = comm_set_add(g->set, COMM_SEND, &g->ask, sizeof g->ask, k, TAG_PULL);
            g->m_ans[k] = comm_set_add(g->set, COMM_RECV, &g->ans, sizeof g->ans, k, TAG_PULLHDR);
            g->m_get[k] = comm_set_add(g->set, COMM_RECV, g->peer, nb, k, TAG_PULLREP);
        }
        comm_set_start(g->bg, g->b_req);
    } else {
        g->recvbuf = xmalloc(nb);
        g->b_push = comm_set_add(g->bg, COMM_RECV, g->recvbuf, nb, COMM_ANY_SOURCE, TAG_PUSH);
        for (int k = 0; k < p; k++) g->m_send[k] = comm_set_add(g->set, COMM_SEND, g->sendbuf, nb, k, TAG_PUSH);
        comm_set_start(g->bg, g->b_push);
    }
    g->b_quit = comm_set_add(g->bg, COMM_RECV, &g->quit_in, sizeof g->quit_in, t->rank, TAG_QUIT);
    g->m_quit = comm_set_add(g->set, COMM_SEND, &g->quit_out, sizeof g->quit_out, t->rank, TAG_QUIT);
    comm_set_start(g->bg, g->b_quit);
    if (pthread_create(&g->th, NULL, gossip_thread, NULL) != 0) return seterr(err, errlen, "cannot start the gossip communication thread");
    g->has_thread = 1;
    return 0;
}

static void gossip_teardown(void) {
    gossip *g = &G;
    if (g->has_thread) {
        comm_set_start(g->set, g->m_quit);
        comm_set_wait(g->set, g->m_quit, 1e18);
        pthread_join(g->th, NULL);
        comm_set_free(g->bg);
        pthread_mutex_destroy(&g->mu);
    }
    comm_set_free(g->set);
    comm_set_free(g->sig);
    free(g->s_sig);
    free(g->peer), free(g->inbox), free(g->sendbuf), free(g->avg), free(g->own), free(g->avg_bn), free(g->own_bn);
    free(g->peers), free(g->sent), free(g->phi), free(g->gbuf), free(g->rows);
    free(g->m_ask), free(g->m_ans), free(g->m_get), free(g->m_send), free(g->m_recv), free(g->b_rephdr), free(g->b_rep), free(g->bg_done);
    free(g->pub), free(g->tbuf), free(g->recvbuf);
}

/* ---- Signals between meeting points ---------------------------------------------------------
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
static int meeting_point(const experiment *e, long c) { return cadence_eval_due(e, c) || cadence_ckpt_due(e, c); }

static void sig_announce(long step) {
    gossip *g = &G;
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
static int sig_poll(long step) {
    gossip *g = &G;
    if (!g->sig) return 0;
    while (comm_set_test(g->sig, g->r_sig)) {
        g->n_ann++;
        if (g->sig_in[0] > g->ep_kind) g->ep_kind = (int)g->sig_in[0];
        if (g->sig_in[1] > g->ep_max) g->ep_max = (long)g->sig_in[1];
        g->ep_meet |= (int)g->sig_in[2];
        comm_set_start(g->sig, g->r_sig);
    }
    if (!g->ann && (g->n_ann > 0 || ckpt_signal_pending())) sig_announce(step);
    return g->ann;
}

static void sig_hook(void) {
    if (G.pos >= 0) sig_poll(G.pos);
}

/* Wait (bounded) until every other node's announcement of this epoch is in. */
static void sig_wait_all(void) {
    gossip *g = &G;
    const double t0 = wall_time();
    while (g->n_ann < g->p - 1) {
        sig_poll(g->pos);
        if (wall_time() - t0 > g->t->e->comm_timeout_s) comm_timeout_abort("the other gossip nodes (announcing a signal)");
        comm_pause(wall_time() - t0);
    }
}

/* The step this node meets at in the current epoch (every announcement in). */
static long sig_target(void) {
    gossip *g = &G;
    return g->sync || g->ep_meet ? g->ep_max : g->my_ann;
}

static void sig_reset(void) {
    gossip *g = &G;
    g->ann = g->n_ann = g->ep_kind = g->ep_meet = 0;
    g->ep_max = g->my_ann = 0;
}

/* θ ← (θ + Σ received)/(1 + k) for k received vectors summed in sum. */
static void mix(float *th, const float *sum, int k, size_t n) {
    if (k == 0) return;
    if (k == 1) {
        for (size_t j = 0; j < n; j++) th[j] = 0.5f * (th[j] + sum[j]);
        return;
    }
    const float inv = 1.0f / (float)(1 + k);
    for (size_t j = 0; j < n; j++) th[j] = (th[j] + sum[j]) * inv;
}

/* One gossip step of node i at step s. Returns the loss (NaN: non-finite). */
static double gossip_step(trainer *t, long s, double alpha) {
    gossip *g = &G;
    const experiment *e = t->e;
    model *net = t->net;
    float *th = model_params(net);
    const size_t n = g->n, nb = n * sizeof(float);
    const int p = g->p, me = g->me;
    const int j = p > 1 ? peer_of(e, me, s) : -1;
    const double t0 = wall_time();
    int got = 0; /* vectors received this step (into g->peer or g->inbox) */
    float *recv = g->peer;

    /* 1. start the exchange */
    if (j >= 0 && !g->sync && !g->push) {
        g->ask = me;
        comm_set_start(g->set, g->m_ans[j]);
        comm_set_start(g->set, g->m_get[j]);
        comm_set_start(g->set, g->m_ask[j]);
    } else if (j >= 0 && g->sync) {
        memcpy(g->sendbuf, th, nb); /* θ^s */
        if (!g->push) {
            for (int k = 0; k < p; k++)
                if (k != me && peer_of(e, k, s) == me && !inject_failed(e, k, s)) comm_set_start(g->set, g->m_send[k]);
            if (!inject_failed(e, j, s)) comm_set_start(g->set, g->m_recv[j]);
        } else if (!inject_failed(e, j, s)) comm_set_start(g->set, g->m_send[j]);
    }
    const double c0 = wall_time() - t0;

    /* 2. the gradient at θ_i */
    double loss = train_compute(t, s, s);

    /* 3. finish the exchange: what this node received */
    double w0 = wall_time();
    if (j >= 0 && !g->sync && !g->push) {
        comm_set_wait_or_abort(g->set, g->m_ask[j], "a gossip peer (pull request)");
        comm_set_wait_or_abort(g->set, g->m_ans[j], "a gossip peer's reply");
        comm_set_wait_or_abort(g->set, g->m_get[j], "a gossip peer's reply");
        got = g->ans == 0;
    } else if (j >= 0 && g->sync && !g->push) {
        for (int k = 0; k < p; k++) comm_set_wait_or_abort(g->set, g->m_send[k], "a gossip peer (lock-step)");
        comm_set_wait_or_abort(g->set, g->m_recv[j], "a gossip peer (lock-step)");
        got = !inject_failed(e, j, s);
    } else if (j >= 0 && g->sync && g->push) {
        memset(g->inbox, 0, nb);
        for (int k = 0; k < p; k++)
            if (k != me && peer_of(e, k, s) == me && !inject_failed(e, k, s)) {
                comm_set_start(g->set, g->m_recv[k]);
                comm_set_wait_or_abort(g->set, g->m_recv[k], "a gossip peer (lock-step)");
                for (size_t q = 0; q < n; q++) g->inbox[q] += g->peer[q];
                got++;
            }
        comm_set_wait_or_abort(g->set, g->m_send[j], "a gossip peer (lock-step)");
        recv = g->inbox;
    } else if (j >= 0 && g->push) { /* asynchronous push: take the inbox */
        pthread_mutex_lock(&g->mu);
        got = g->inbox_k;
        if (got) memcpy(g->peer, g->inbox, nb), memset(g->inbox, 0, nb);
        g->inbox_k = 0;
        pthread_mutex_unlock(&g->mu);
    }
    const double c1 = wall_time() - w0;
    if (j >= 0) g->peers[j]++;

    /* 4. combine */
    double u0 = wall_time();
    int finite = isfinite(loss);
    if (!g->fresh) mix(th, recv, got, n);
    finite = finite && sgd_update(th, model_grads(net), t->velocity, n, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov);
    if (g->fresh) mix(th, recv, got, n);
    double u1 = wall_time();

    /* 5. publish / push θ_i */
    if (j >= 0 && !g->sync && !g->push) {
        pthread_mutex_lock(&g->mu);
        memcpy(g->pub, th, nb);
        pthread_mutex_unlock(&g->mu);
    } else if (j >= 0 && !g->sync && g->push) {
        if (g->last_push >= 0) comm_set_wait_or_abort(g->set, g->m_send[g->last_push], "a gossip peer (push)");
        memcpy(g->sendbuf, th, nb);
        comm_set_start(g->set, g->m_send[j]);
        g->last_push = j;
        g->sent[j]++;
    }
    double y1 = wall_time();

    t->times.comm_s += c0 + c1 + (y1 - u1);
    t->times.wait_s += c1;
    t->times.update_s += u1 - u0;
    t->times.step_s += wall_time() - t0;
    return finite ? loss : NAN;
}

/* The most evaluations a run makes (at the start, every eval.every steps, at the end): the rows of
 * /gossip/potential. */
static long potential_rows(const experiment *e) { return e->iterations / e->eval.every + 2; }

/* Room for n values of Φ. */
static void phi_reserve(gossip *g, long n) {
    if (n <= g->max_evals) return;
    long cap = g->max_evals;
    while (cap < n) cap *= 2;
    double *d = realloc(g->phi, (size_t)cap * sizeof *d);
    if (!d) DIE("out of memory for the diffusion potential of %ld evaluations", cap);
    g->phi = d, g->max_evals = cap;
}

/* Collective over the workers: evaluate the nodes' average and rank 0's own model, log both,
 * Φ and a /ranks row. Returns the status every worker agrees on. */
static int gossip_evaluate(trainer *t, long step, double train_s, int status, int *why) {
    gossip *g = &G;
    model *net = t->net;
    float *th = model_params(net), *bn = model_bn(net);
    const size_t n = g->n, nbn = g->nbn;
    double ev0 = wall_time();
    const int alive = !inject_failed(t->e, g->me, step);
    memcpy(g->own, th, n * sizeof(float));
    if (nbn) memcpy(g->own_bn, bn, nbn * sizeof(float));
    for (size_t q = 0; q < n; q++) g->avg[q] = alive ? th[q] : 0.0f;
    for (size_t q = 0; q < nbn; q++) g->avg_bn[q] = alive ? bn[q] : 0.0f;
    comm_workers_sum_f32(g->avg, n);
    if (nbn) comm_workers_sum_f32(g->avg_bn, nbn);
    double w[2] = {(double)alive, 0.0};
    comm_workers_sum_f64(w, 1);
    const float inv = (float)(1.0 / w[0]);
    for (size_t q = 0; q < n; q++) g->avg[q] *= inv;
    for (size_t q = 0; q < nbn; q++) g->avg_bn[q] *= inv;
    double d = 0.0;
    if (alive)
        for (size_t q = 0; q < n; q++) d += ((double)th[q] - g->avg[q]) * ((double)th[q] - g->avg[q]);
    comm_workers_sum_f64(&d, 1);

    memcpy(th, g->avg, n * sizeof(float));
    if (nbn) memcpy(bn, g->avg_bn, nbn * sizeof(float));
    eval_result r = train_evaluate(t);
    /* rank 0's own model, evaluated by every worker on its slice */
    if (t->worker == 0) memcpy(th, g->own, n * sizeof(float));
    comm_workers_bcast(th, n * sizeof(float), 0);
    if (nbn) {
        if (t->worker == 0) memcpy(bn, g->own_bn, nbn * sizeof(float));
        comm_workers_bcast(bn, nbn * sizeof(float), 0);
    }
    eval_result rl = train_evaluate(t);
    memcpy(th, g->own, n * sizeof(float));
    if (nbn) memcpy(bn, g->own_bn, nbn * sizeof(float));

    /* /ranks row (NaN for a node with no step since the previous row: a failed node) */
    train_gather_rank_times(t, &g->prev, g->steps_done - g->prev_done, g->gbuf, g->rows);
    g->prev_done = g->steps_done;
    if (t->log) {
        const int p = g->p;
        double es = wall_time() - ev0;
        printf("gossip step %ld: diffusion potential Φ = Σ‖θ_i − θ̄‖² = %.6g\n", step, d);
        if (step > 0 && runlog_ranks(t->log, step, g->rows, g->rows + p, g->rows + 2 * p, g->rows + 3 * p, NULL) != 0) status = EXIT_RUNTIME;
        if (train_log_eval(t, step, train_s, &rl, es, 1) != 0) status = EXIT_RUNTIME;
        if (train_log_eval(t, step, train_s, &r, es, 0) != 0) status = EXIT_RUNTIME;
        if (g->n_evals == g->max_evals) phi_reserve(g, g->n_evals + 1);
        g->phi[g->n_evals++] = d;
    }
    if (!isfinite(r.loss)) cadence_nonfinite_eval(t, why, step, "the nodes"), status = EXIT_RUNTIME;
    return comm_agree(status);
}

/* Checkpoints (collective over the workers, at a meeting point: every node has done the same
 * steps and left its step). Lock-step and pull gossip have nothing in flight there. Push:
 * vectors pushed before the meeting may still be on their way into an inbox, so each node
 * waits until its communication thread has received every vector pushed to it (the pushes are
 * counted on both sides); the inbox, mixed in at the node's next step, is then saved. */
static void gossip_quiesce(trainer *t) {
    gossip *g = &G;
    if (!(g->push && g->has_thread)) return;
    if (g->last_push >= 0) comm_set_wait_or_abort(g->set, g->m_send[g->last_push], "a gossip peer (push)");
    double *tot = xmalloc((size_t)g->p * sizeof(double));
    for (int k = 0; k < g->p; k++) tot[k] = (double)g->sent[k];
    comm_workers_sum_f64(tot, g->p);
    const long long expect = (long long)tot[g->me];
    free(tot);
    const double t0 = wall_time();
    for (;;) {
        pthread_mutex_lock(&g->mu);
        const long long got = g->recv_n;
        pthread_mutex_unlock(&g->mu);
        if (got >= expect) break;
        if (wall_time() - t0 > t->e->comm_timeout_s) comm_timeout_abort("a gossip peer (pushes in flight at a checkpoint)");
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* method_ops.save and .load: this node's state written or read back (ckpt_writing), in one order. */
static int gossip_state(trainer *t, ckpt_file *f) {
    gossip *g = &G;
    model *net = t->net;
    const int save = ckpt_writing(f);
    int64_t counts[4] = {g->steps_done, g->prev_done, g->inbox_k, g->recv_n};
    int rc = ckpt_io_f32(f, "params", model_params(net), g->n) | ckpt_io_f32(f, "velocity", t->velocity, g->n) |
             ckpt_io_f32(f, "bn", model_bn(net), g->nbn) | ckpt_io_f32(f, "inbox", g->inbox, g->n) |
             ckpt_io_i64(f, "counts", counts, 4) | ckpt_io_i64(f, "peers", (int64_t *)g->peers, (size_t)g->p) |
             ckpt_io_i64(f, "sent", (int64_t *)g->sent, (size_t)g->p) | ckpt_io_f64(f, "ranks_prev_times", (double *)&g->prev, 7);
    if (!save) g->steps_done = counts[0], g->prev_done = counts[1], g->inbox_k = (int)counts[2], g->recv_n = counts[3];
    if (t->log) {
        int64_t ne = g->n_evals;
        rc |= ckpt_io_i64(f, "n_evals", &ne, 1);
        if (!save && (ne < 0 || ne > potential_rows(t->e))) ne = 0, rc = -1;
        phi_reserve(g, (long)ne);
        rc |= ckpt_io_f64(f, "potential", g->phi, (size_t)ne);
        g->n_evals = (long)ne;
    }
    if (g->pub && !save) memcpy(g->pub, model_params(net), g->n * sizeof(float)); /* what pulls see */
    return rc;
}

/* method_ops.begin: the buffers, the persistent requests and (asynchronous) the communication
 * thread; every wait of this thread takes announcements from then on (comm_on_wait). */
static int gossip_begin(trainer *t) {
    char err[ERRLEN];
    const int st = comm_max_int(gossip_setup(t, err, sizeof err));
    if (st) {
        if (t->log) fprintf(stderr, "dsgd-run: %s\n", err);
        gossip_teardown();
        return st;
    }
    G.prev = t->times;
    G.pos = -1; /* no announcement before the first step */
    if (G.sig) comm_on_wait(sig_hook);
    return 0;
}

/* method_ops.step: node i's step s, or none once it has failed (inject.fail_rank). */
static int gossip_node_step(trainer *t, long s, double alpha, double *loss) {
    gossip *g = &G;
    const experiment *e = t->e;
    if (g->closing) sig_reset(), g->closing = 0; /* the epoch the last meeting point closed */
    g->pos = s + 1; /* a node announcing from a wait in this step will complete it */
    const int failed = inject_failed(e, g->me, s);
    if (failed && g->has_thread && !g->gone) {
        pthread_mutex_lock(&g->mu);
        g->gone = 1;
        pthread_mutex_unlock(&g->mu);
    }
    if (failed && s == e->inject.fail_step)
        fprintf(stderr, "dsgd-run: rank %d: injected failure after %ld steps (inject.fail_step); the other nodes go on\n", t->rank, s);
    if (failed) return 0;
    g->steps_done++;
    *loss = gossip_step(t, s, alpha);
    return 1;
}

/* method_ops.signal: a signal here or on another node (announcements) makes the target step this
 * node's meeting point. */
static int gossip_signal(trainer *t, long done) {
    if (!sig_poll(done)) return 0;
    sig_wait_all();
    return done >= sig_target() && !meeting_point(t->e, done);
}

/* method_ops.meet: meeting points (evaluations, every checkpoint.every steps, a signal's meeting)
 * are where the nodes agree on signals and write checkpoints: no extra synchronisation between
 * them. After a signal between meeting points each node is at its own step: a checkpoint's label
 * is then the largest. */
static long gossip_meet(trainer *t, long done, int sigmeet) {
    gossip *g = &G;
    sig_poll(done);
    const int mine = ckpt_signal_pending() > g->ep_kind ? ckpt_signal_pending() : g->ep_kind;
    t->sig = comm_agree(mine);
    /* at a meeting point every node closes the epoch: all announcements in */
    if (t->sig && g->sig) {
        if (!g->ann) sig_announce(done);
        sig_wait_all();
    }
    g->closing = g->ann;
    return sigmeet && (t->sig || cadence_ckpt_due(t->e, done)) ? comm_max_long(done) : done;
}

/* method_ops.end: rank 0 collects every node's row of peers chosen; the run-file arrays. */
static int gossip_end(trainer *t, int status) {
    gossip *g = &G;
    comm_on_wait(NULL);
    double *row = xmalloc((size_t)g->p * sizeof(double)), *all = xmalloc((size_t)g->p * g->p * sizeof(double));
    for (int k = 0; k < g->p; k++) row[k] = (double)g->peers[k];
    comm_workers_gather_f64(row, g->p, all);
    comm_workers_barrier(); /* every node has finished: no pull or push is still on its way */
    if (t->log) {
        for (int k = 0; k < g->p * g->p; k++) g->peers[k] = (long long)all[k];
        if (runlog_array(t->log, 0, g->peers) != 0 || runlog_array_rows_f64(t->log, 1, g->phi, g->n_evals) != 0) status = EXIT_RUNTIME;
    }
    free(row), free(all);
    gossip_teardown();
    return status;
}

static int gossip_runlog_arrays(const experiment *e, runlog_array_spec *a) {
    a[0] = (runlog_array_spec){"gossip/peers", e->p, e->p, "times", "element [i, j]: steps at which node i chose peer j", 0, 0};
    a[1] = (runlog_array_spec){"gossip/potential", potential_rows(e), 0, "1",
                               "diffusion potential sum_i ||theta_i - mean theta||^2 at each evaluation, in /eval row order", 1, 1};
    return 2;
}

#define GOSSIP_OPS(kind)                                                                                                  \
    {.name = kind, .init = method_init_rank0, .begin = gossip_begin, .step = gossip_node_step, .signal = gossip_signal,              \
     .meet = gossip_meet, .quiesce = gossip_quiesce, .evaluate = gossip_evaluate, .end = gossip_end, .save = gossip_state,     \
     .load = gossip_state, .runlog_arrays = gossip_runlog_arrays, .eval_local = 1, .meets = METHOD_MEETS_AT_POINTS}
const method_ops method_gossip_pull = GOSSIP_OPS("gossip_pull");
const method_ops method_gossip_push = GOSSIP_OPS("gossip_push");
