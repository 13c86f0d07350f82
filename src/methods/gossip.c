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
    int32_t ask, ans, quit_out; /* ask: a pull request, its content unused (the receiver takes the source) */
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
    memset(&G, 0, sizeof G);
    G.t = t;
    G.push = e->method == METHOD_GOSSIP_PUSH;
    G.sync = e->synchronous;
    G.fresh = e->gossip_order == GOSSIP_FRESH;
    G.p = e->p, G.me = t->worker;
    G.n = model_n_params(t->net), G.nbn = model_n_bn(t->net);
    const size_t n = G.n, nb = n * sizeof(float);
    const int p = G.p;
    G.peer = xmalloc(nb), G.inbox = xcalloc(n, sizeof(float)), G.sendbuf = xmalloc(nb);
    G.avg = xmalloc(nb), G.own = xmalloc(nb);
    G.avg_bn = xmalloc((G.nbn ? G.nbn : 1) * sizeof(float)), G.own_bn = xmalloc((G.nbn ? G.nbn : 1) * sizeof(float));
    G.peers = xcalloc((size_t)p * p, sizeof(long long));
    G.sent = xcalloc((size_t)p, sizeof(long long));
    G.max_evals = 64; /* grows by doubling: not sized by iterations, which may be huge */
    G.phi = xcalloc((size_t)G.max_evals, sizeof(double));
    G.gbuf = xmalloc((size_t)p * 5 * sizeof(double)), G.rows = xmalloc((size_t)p * 5 * sizeof(double));
    G.m_ask = xmalloc((size_t)p * sizeof(int)), G.m_ans = xmalloc((size_t)p * sizeof(int)), G.m_get = xmalloc((size_t)p * sizeof(int));
    G.m_send = xmalloc((size_t)p * sizeof(int)), G.m_recv = xmalloc((size_t)p * sizeof(int));
    G.last_push = -1, G.last_rep = -1, G.b_req = -1, G.b_push = -1, G.b_quit = -1;
    G.set = comm_set_new(5 * p + 1);
    if (p == 1) return 0;
    G.sig = comm_set_new(p + 1);
    G.s_sig = xmalloc((size_t)p * sizeof(int));
    G.r_sig = comm_set_add(G.sig, COMM_RECV, G.sig_in, sizeof G.sig_in, COMM_ANY_SOURCE, TAG_SIGANN);
    for (int k = 0; k < p; k++) G.s_sig[k] = k == G.me ? -1 : comm_set_add(G.sig, COMM_SEND, G.sig_out, sizeof G.sig_out, k, TAG_SIGANN);
    comm_set_start(G.sig, G.r_sig);
    if (G.sync) {
        for (int k = 0; k < p; k++) {
            G.m_send[k] = comm_set_add(G.set, COMM_SEND, G.sendbuf, nb, k, TAG_SYNC);
            G.m_recv[k] = comm_set_add(G.set, COMM_RECV, G.peer, nb, k, TAG_SYNC);
        }
        return 0;
    }
    if (!comm_thread_multiple()) { /* main.c refuses this at start already; kept for callers without it */
        char adv[640];
        comm_thread_multiple_advice(adv, sizeof adv);
        return seterr(err, errlen, "%s: method %s (asynchronous) answers its peers from a communication thread and needs "
                                   "MPI_THREAD_MULTIPLE: %s", e->source, method_name(e->method), adv);
    }
    pthread_mutex_init(&G.mu, NULL);
    G.bg = comm_set_new(2 * p + 3);
    G.bg_done = xmalloc((size_t)(2 * p + 3) * sizeof(int));
    comm_set_background(G.bg);
    G.b_rephdr = xmalloc((size_t)p * sizeof(int)), G.b_rep = xmalloc((size_t)p * sizeof(int));
    if (!G.push) {
        G.pub = xmalloc(nb), G.tbuf = xmalloc(nb);
        memcpy(G.pub, model_params(t->net), nb);
        G.b_req = comm_set_add(G.bg, COMM_RECV, &G.req_in, sizeof G.req_in, COMM_ANY_SOURCE, TAG_PULL);
        for (int k = 0; k < p; k++) {
            G.b_rephdr[k] = comm_set_add(G.bg, COMM_SEND, &G.rep_hdr, sizeof G.rep_hdr, k, TAG_PULLHDR);
            G.b_rep[k] = comm_set_add(G.bg, COMM_SEND, G.tbuf, nb, k, TAG_PULLREP);
            G.m_ask[k] = comm_set_add(G.set, COMM_SEND, &G.ask, sizeof G.ask, k, TAG_PULL);
            G.m_ans[k] = comm_set_add(G.set, COMM_RECV, &G.ans, sizeof G.ans, k, TAG_PULLHDR);
            G.m_get[k] = comm_set_add(G.set, COMM_RECV, G.peer, nb, k, TAG_PULLREP);
        }
        comm_set_start(G.bg, G.b_req);
    } else {
        G.recvbuf = xmalloc(nb);
        G.b_push = comm_set_add(G.bg, COMM_RECV, G.recvbuf, nb, COMM_ANY_SOURCE, TAG_PUSH);
        for (int k = 0; k < p; k++) G.m_send[k] = comm_set_add(G.set, COMM_SEND, G.sendbuf, nb, k, TAG_PUSH);
        comm_set_start(G.bg, G.b_push);
    }
    G.b_quit = comm_set_add(G.bg, COMM_RECV, &G.quit_in, sizeof G.quit_in, t->rank, TAG_QUIT);
    G.m_quit = comm_set_add(G.set, COMM_SEND, &G.quit_out, sizeof G.quit_out, t->rank, TAG_QUIT);
    comm_set_start(G.bg, G.b_quit);
    if (pthread_create(&G.th, NULL, gossip_thread, NULL) != 0) return seterr(err, errlen, "cannot start the gossip communication thread");
    G.has_thread = 1;
    return 0;
}

static void gossip_teardown(void) {
    if (G.has_thread) {
        comm_set_start(G.set, G.m_quit);
        comm_set_wait(G.set, G.m_quit, 1e18);
        pthread_join(G.th, NULL);
        comm_set_free(G.bg);
        pthread_mutex_destroy(&G.mu);
    }
    comm_set_free(G.set);
    comm_set_free(G.sig);
    free(G.s_sig);
    free(G.peer), free(G.inbox), free(G.sendbuf), free(G.avg), free(G.own), free(G.avg_bn), free(G.own_bn);
    free(G.peers), free(G.sent), free(G.phi), free(G.gbuf), free(G.rows);
    free(G.m_ask), free(G.m_ans), free(G.m_get), free(G.m_send), free(G.m_recv), free(G.b_rephdr), free(G.b_rep), free(G.bg_done);
    free(G.pub), free(G.tbuf), free(G.recvbuf);
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
    G.ann = 1, G.my_ann = step;
    const int mine = ckpt_signal_pending();
    if (mine > G.ep_kind) G.ep_kind = mine;
    if (step > G.ep_max) G.ep_max = step;
    const int meet = meeting_point(G.t->e, step);
    G.ep_meet |= meet;
    for (int k = 0; k < G.p; k++)
        if (k != G.me) comm_set_wait_or_abort(G.sig, G.s_sig[k], "a gossip peer (announcing a signal)");
    G.sig_out[0] = G.ep_kind, G.sig_out[1] = step, G.sig_out[2] = meet;
    for (int k = 0; k < G.p; k++)
        if (k != G.me) comm_set_start(G.sig, G.s_sig[k]);
}

/* Take the announcements that arrived; announce (step) if this node knows of a signal and has
 * not yet. Returns 1 while an epoch is open on this node. */
static int sig_poll(long step) {
    if (!G.sig) return 0;
    while (comm_set_test(G.sig, G.r_sig)) {
        G.n_ann++;
        if (G.sig_in[0] > G.ep_kind) G.ep_kind = (int)G.sig_in[0];
        if (G.sig_in[1] > G.ep_max) G.ep_max = (long)G.sig_in[1];
        G.ep_meet |= (int)G.sig_in[2];
        comm_set_start(G.sig, G.r_sig);
    }
    if (!G.ann && (G.n_ann > 0 || ckpt_signal_pending())) sig_announce(step);
    return G.ann;
}

static void sig_hook(void) {
    if (G.pos >= 0) sig_poll(G.pos);
}

/* Wait (bounded) until every other node's announcement of this epoch is in. */
static void sig_wait_all(void) {
    const double t0 = wall_time();
    while (G.n_ann < G.p - 1) {
        sig_poll(G.pos);
        if (wall_time() - t0 > G.t->e->comm_timeout_s) comm_timeout_abort("the other gossip nodes (announcing a signal)");
        comm_pause(wall_time() - t0);
    }
}

/* The step this node meets at in the current epoch (every announcement in). */
static long sig_target(void) {
    return G.sync || G.ep_meet ? G.ep_max : G.my_ann;
}

static void sig_reset(void) {
    G.ann = G.n_ann = G.ep_kind = G.ep_meet = 0;
    G.ep_max = G.my_ann = 0;
}

/* θ ← (θ + Σ received)/(1 + k) for k received vectors summed in sum. */
static void mix(float *th, const float *sum, int k, size_t n) {
    if (k == 0) return;
    const float inv = 1.0f / (float)(1 + k);
    for (size_t j = 0; j < n; j++) th[j] = (th[j] + sum[j]) * inv;
}

/* One gossip step of node i at step s. Returns the loss (NaN: non-finite). */
static double gossip_step(trainer *t, long s, double alpha) {
    const experiment *e = t->e;
    model *net = t->net;
    float *th = model_params(net);
    const size_t n = G.n, nb = n * sizeof(float);
    const int p = G.p, me = G.me;
    const int j = p > 1 ? peer_of(e, me, s) : -1;
    const double t0 = wall_time();
    int got = 0; /* vectors received this step (into G.peer or G.inbox) */
    float *recv = G.peer;

    /* 1. start the exchange */
    if (j >= 0 && !G.sync && !G.push) {
        comm_set_start(G.set, G.m_ans[j]);
        comm_set_start(G.set, G.m_get[j]);
        comm_set_start(G.set, G.m_ask[j]);
    } else if (j >= 0 && G.sync) {
        memcpy(G.sendbuf, th, nb); /* θ^s */
        if (!G.push) {
            for (int k = 0; k < p; k++)
                if (k != me && peer_of(e, k, s) == me && !inject_failed(e, k, s)) comm_set_start(G.set, G.m_send[k]);
            if (!inject_failed(e, j, s)) comm_set_start(G.set, G.m_recv[j]);
        } else if (!inject_failed(e, j, s)) comm_set_start(G.set, G.m_send[j]);
    }
    const double c0 = wall_time() - t0;

    /* 2. the gradient at θ_i */
    double loss = train_compute(t, s, s);

    /* 3. finish the exchange: what this node received */
    double w0 = wall_time();
    if (j >= 0 && !G.sync && !G.push) {
        comm_set_wait_or_abort(G.set, G.m_ask[j], "a gossip peer (pull request)");
        comm_set_wait_or_abort(G.set, G.m_ans[j], "a gossip peer's reply");
        comm_set_wait_or_abort(G.set, G.m_get[j], "a gossip peer's reply");
        got = G.ans == 0;
    } else if (j >= 0 && G.sync && !G.push) {
        for (int k = 0; k < p; k++) comm_set_wait_or_abort(G.set, G.m_send[k], "a gossip peer (lock-step)");
        comm_set_wait_or_abort(G.set, G.m_recv[j], "a gossip peer (lock-step)");
        got = !inject_failed(e, j, s);
    } else if (j >= 0 && G.sync && G.push) {
        memset(G.inbox, 0, nb);
        for (int k = 0; k < p; k++)
            if (k != me && peer_of(e, k, s) == me && !inject_failed(e, k, s)) {
                comm_set_start(G.set, G.m_recv[k]);
                comm_set_wait_or_abort(G.set, G.m_recv[k], "a gossip peer (lock-step)");
                for (size_t q = 0; q < n; q++) G.inbox[q] += G.peer[q];
                got++;
            }
        comm_set_wait_or_abort(G.set, G.m_send[j], "a gossip peer (lock-step)");
        recv = G.inbox;
    } else if (j >= 0 && G.push) { /* asynchronous push: take the inbox */
        pthread_mutex_lock(&G.mu);
        got = G.inbox_k;
        if (got) memcpy(G.peer, G.inbox, nb), memset(G.inbox, 0, nb);
        G.inbox_k = 0;
        pthread_mutex_unlock(&G.mu);
    }
    const double c1 = wall_time() - w0;
    if (j >= 0) G.peers[j]++;

    /* 4. combine */
    double u0 = wall_time();
    int finite = isfinite(loss);
    if (!G.fresh) mix(th, recv, got, n);
    finite = finite && sgd_update(th, model_grads(net), t->velocity, n, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov);
    if (G.fresh) mix(th, recv, got, n);
    double u1 = wall_time();

    /* 5. publish / push θ_i */
    if (j >= 0 && !G.sync && !G.push) {
        pthread_mutex_lock(&G.mu);
        memcpy(G.pub, th, nb);
        pthread_mutex_unlock(&G.mu);
    } else if (j >= 0 && !G.sync && G.push) {
        if (G.last_push >= 0) comm_set_wait_or_abort(G.set, G.m_send[G.last_push], "a gossip peer (push)");
        memcpy(G.sendbuf, th, nb);
        comm_set_start(G.set, G.m_send[j]);
        G.last_push = j;
        G.sent[j]++;
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
static void phi_reserve(long n) {
    if (n <= G.max_evals) return;
    long cap = G.max_evals;
    while (cap < n) cap *= 2;
    double *d = realloc(G.phi, (size_t)cap * sizeof *d);
    if (!d) DIE("out of memory for the diffusion potential of %ld evaluations", cap);
    G.phi = d, G.max_evals = cap;
}

/* Collective over the workers: evaluate the nodes' average and rank 0's own model, log both,
 * Φ and a /ranks row. Returns the status every worker agrees on. */
static int gossip_evaluate(trainer *t, long step, double train_s, int status, int *why) {
    model *net = t->net;
    float *th = model_params(net), *bn = model_bn(net);
    const size_t n = G.n, nbn = G.nbn;
    double ev0 = wall_time();
    const int alive = !inject_failed(t->e, G.me, step);
    memcpy(G.own, th, n * sizeof(float));
    if (nbn) memcpy(G.own_bn, bn, nbn * sizeof(float));
    for (size_t q = 0; q < n; q++) G.avg[q] = alive ? th[q] : 0.0f;
    for (size_t q = 0; q < nbn; q++) G.avg_bn[q] = alive ? bn[q] : 0.0f;
    comm_workers_sum_f32(G.avg, n);
    if (nbn) comm_workers_sum_f32(G.avg_bn, nbn);
    double w[2] = {(double)alive, 0.0};
    comm_workers_sum_f64(w, 1);
    const float inv = (float)(1.0 / w[0]);
    for (size_t q = 0; q < n; q++) G.avg[q] *= inv;
    for (size_t q = 0; q < nbn; q++) G.avg_bn[q] *= inv;
    double d = 0.0;
    if (alive)
        for (size_t q = 0; q < n; q++) d += ((double)th[q] - G.avg[q]) * ((double)th[q] - G.avg[q]);
    comm_workers_sum_f64(&d, 1);

    memcpy(th, G.avg, n * sizeof(float));
    if (nbn) memcpy(bn, G.avg_bn, nbn * sizeof(float));
    eval_result r = train_evaluate(t);
    /* rank 0's own model, evaluated by every worker on its slice */
    if (t->worker == 0) memcpy(th, G.own, n * sizeof(float));
    comm_workers_bcast(th, n * sizeof(float), 0);
    if (nbn) {
        if (t->worker == 0) memcpy(bn, G.own_bn, nbn * sizeof(float));
        comm_workers_bcast(bn, nbn * sizeof(float), 0);
    }
    eval_result rl = train_evaluate(t);
    memcpy(th, G.own, n * sizeof(float));
    if (nbn) memcpy(bn, G.own_bn, nbn * sizeof(float));

    /* /ranks row (NaN for a node with no step since the previous row: a failed node) */
    train_gather_rank_times(t, &G.prev, G.steps_done - G.prev_done, G.gbuf, G.rows);
    G.prev_done = G.steps_done;
    if (t->log) {
        const int p = G.p;
        double es = wall_time() - ev0;
        printf("gossip step %ld: diffusion potential Φ = Σ‖θ_i − θ̄‖² = %.6g\n", step, d);
        if (step > 0 && runlog_ranks(t->log, step, G.rows, G.rows + p, G.rows + 2 * p, G.rows + 3 * p, NULL) != 0) status = EXIT_RUNTIME;
        if (train_log_eval(t, step, train_s, &rl, es, 1) != 0) status = EXIT_RUNTIME;
        if (train_log_eval(t, step, train_s, &r, es, 0) != 0) status = EXIT_RUNTIME;
        if (G.n_evals == G.max_evals) phi_reserve(G.n_evals + 1);
        G.phi[G.n_evals++] = d;
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
    if (!(G.push && G.has_thread)) return;
    if (G.last_push >= 0) comm_set_wait_or_abort(G.set, G.m_send[G.last_push], "a gossip peer (push)");
    double *tot = xmalloc((size_t)G.p * sizeof(double));
    for (int k = 0; k < G.p; k++) tot[k] = (double)G.sent[k];
    comm_workers_sum_f64(tot, G.p);
    const long long expect = (long long)tot[G.me];
    free(tot);
    const double t0 = wall_time();
    for (;;) {
        pthread_mutex_lock(&G.mu);
        const long long got = G.recv_n;
        pthread_mutex_unlock(&G.mu);
        if (got >= expect) break;
        if (wall_time() - t0 > t->e->comm_timeout_s) comm_timeout_abort("a gossip peer (pushes in flight at a checkpoint)");
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* method_ops.save and .load: this node's state written or read back (ckpt_writing), in one order. */
static int gossip_state(trainer *t, ckpt_file *f) {
    model *net = t->net;
    const int save = ckpt_writing(f);
    int64_t counts[4] = {G.steps_done, G.prev_done, G.inbox_k, G.recv_n};
    int rc = ckpt_io_f32(f, "params", model_params(net), G.n) | ckpt_io_f32(f, "velocity", t->velocity, G.n) |
             ckpt_io_f32(f, "bn", model_bn(net), G.nbn) | ckpt_io_f32(f, "inbox", G.inbox, G.n) |
             ckpt_io_i64(f, "counts", counts, 4) | ckpt_io_i64(f, "peers", (int64_t *)G.peers, (size_t)G.p) |
             ckpt_io_i64(f, "sent", (int64_t *)G.sent, (size_t)G.p) | ckpt_io_f64(f, "ranks_prev_times", (double *)&G.prev, 7);
    if (!save) G.steps_done = counts[0], G.prev_done = counts[1], G.inbox_k = (int)counts[2], G.recv_n = counts[3];
    if (t->log) {
        int64_t ne = G.n_evals;
        rc |= ckpt_io_i64(f, "n_evals", &ne, 1);
        if (!save && (ne < 0 || ne > potential_rows(t->e))) ne = 0, rc = -1;
        phi_reserve((long)ne);
        rc |= ckpt_io_f64(f, "potential", G.phi, (size_t)ne);
        G.n_evals = (long)ne;
    }
    if (G.pub && !save) memcpy(G.pub, model_params(net), G.n * sizeof(float)); /* what pulls see */
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
static step_out gossip_node_step(trainer *t, long s, double alpha) {
    const experiment *e = t->e;
    if (G.closing) sig_reset(), G.closing = 0; /* the epoch the last meeting point closed */
    G.pos = s + 1; /* a node announcing from a wait in this step will complete it */
    const int failed = inject_failed(e, G.me, s);
    if (failed && G.has_thread && !G.gone) {
        pthread_mutex_lock(&G.mu);
        G.gone = 1;
        pthread_mutex_unlock(&G.mu);
    }
    if (failed && s == e->inject.fail_step)
        fprintf(stderr, "dsgd-run: rank %d: injected failure after %ld steps (inject.fail_step); the other nodes go on\n", t->rank, s);
    if (failed) return (step_out){.took = METHOD_STEP_NONE};
    G.steps_done++;
    return (step_out){.took = METHOD_STEP_TOOK, .loss = gossip_step(t, s, alpha)};
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
    sig_poll(done);
    const int mine = ckpt_signal_pending() > G.ep_kind ? ckpt_signal_pending() : G.ep_kind;
    t->sig = comm_agree(mine);
    /* at a meeting point every node closes the epoch: all announcements in */
    if (t->sig && G.sig) {
        if (!G.ann) sig_announce(done);
        sig_wait_all();
    }
    G.closing = G.ann;
    return sigmeet && (t->sig || cadence_ckpt_due(t->e, done)) ? comm_max_long(done) : done;
}

/* method_ops.end: rank 0 collects every node's row of peers chosen; the run-file arrays. */
static int gossip_end(trainer *t, int status) {
    comm_on_wait(NULL);
    double *row = xmalloc((size_t)G.p * sizeof(double)), *all = xmalloc((size_t)G.p * G.p * sizeof(double));
    for (int k = 0; k < G.p; k++) row[k] = (double)G.peers[k];
    comm_workers_gather_f64(row, G.p, all);
    comm_workers_barrier(); /* every node has finished: no pull or push is still on its way */
    if (t->log) {
        for (int k = 0; k < G.p * G.p; k++) G.peers[k] = (long long)all[k];
        if (runlog_array(t->log, 0, G.peers) != 0 || runlog_array_rows_f64(t->log, 1, G.phi, G.n_evals) != 0) status = EXIT_RUNTIME;
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
     .load = gossip_state, .runlog_arrays = gossip_runlog_arrays, .eval_local = 1, .meets = METHOD_MEETS_AT_POINTS,           \
     .comm_thread = 1, .host_velocity = 1, .ranks_end_together = 1}
const method_ops method_gossip_pull = GOSSIP_OPS("gossip_pull");
const method_ops method_gossip_push = GOSSIP_OPS("gossip_push");
