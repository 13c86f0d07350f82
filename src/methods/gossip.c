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
 * Sim mode, lock-step (docs/simulate.md "Gossip"): the step's compute is charged as vclock.h
 * says, and its exchange as train/vclock_gossip.h models it — every node's step start is
 * all-gathered, and each node books the step's messages (the modelled θ's size) on the same
 * per-NIC FIFO model, so several pulls served by one node queue on its uplink; the node's clock
 * after the step is the later of its compute's end and the last arrival of what it sends or
 * receives. Sim mode, asynchronous (docs/simulate.md "Gossip, asynchronous"; gossip_sim.c): no
 * communication thread; every rank runs the same schedule of the whole cluster
 * (train/vclock_gossip_async.h) and only θ moves, between the ranks and in the order it names.
 *
 * Evaluation (collective over the workers every eval.every local steps and at the end; time
 * there, waiting for slower nodes included, is excluded from the clock): the average of the
 * nodes' θ and BN statistics, formed only for evaluation, and rank 0's own model (/eval_local).
 * The diffusion potential Φ = Σ_i ‖θ_i − θ̄‖² (§3.1) is printed and kept in /gossip/potential.
 * /train rows carry rank 0's own losses; /ranks rows are gathered at evaluations.
 * A failed node (inject.fail_rank) stops training and gossiping but still joins evaluations
 * with weight 0; pulls from it are answered "gone" and skipped. With p = 1, plain SGD.
 *
 * Pull and push share this code; their tables differ in .variant (gossip_variant). A node's state
 * is a `gossip` (gossip_state.h) on trainer.mstate, from begin to end; signals between meeting
 * points are gossip_signal.c's. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "methods/gossip_signal.h"
#include "methods/gossip_sim.h"
#include "optim/sgd.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "util/util.h"

/* The peer node i talks to at step s (gossip_sim.c). */
static int peer_of(const experiment *e, int i, long s) { return gossip_peer_of(e, i, s); }

/* The communication thread of an asynchronous node (arg: its gossip): answers pulls from the
 * published θ, sums pushes into the inbox, until the main thread's quit message. */
static void *gossip_thread(void *arg) {
    gossip *g = arg;
    comm_set *s = g->bg;
    int *done = g->bg_done;
    for (;;) {
        int nd = comm_set_wait_some(s, done, 1e18);
        for (int k = 0; k < nd; k++) {
            int idx = done[k];
            if (idx == g->b_quit) return NULL; /* pending receives are cancelled by comm_set_free */
            if (idx == g->b_req) { /* a pull: answer from the published θ */
                int from = comm_set_source(s, g->b_req);
                if (g->last_rep >= 0 && (comm_set_wait(s, g->b_rephdr[g->last_rep], g->t->e->comm_timeout_s) != 0 ||
                                         comm_set_wait(s, g->b_rep[g->last_rep], g->t->e->comm_timeout_s) != 0))
                    comm_timeout_abort("a gossip peer (taking a pull reply)");
                pthread_mutex_lock(&g->mu);
                g->rep_hdr = g->gone;
                if (!g->gone) memcpy(g->tbuf, g->pub, g->n * sizeof(float));
                pthread_mutex_unlock(&g->mu);
                comm_set_start(s, g->b_rephdr[from]);
                comm_set_start(s, g->b_rep[from]);
                g->last_rep = from;
                comm_set_start(s, g->b_req);
            } else if (idx == g->b_push) { /* a pushed θ_k: into the inbox */
                pthread_mutex_lock(&g->mu);
                if (!g->gone) {
                    for (size_t j = 0; j < g->n; j++) g->inbox[j] += g->recvbuf[j];
                    g->inbox_k++;
                }
                g->recv_n++;
                pthread_mutex_unlock(&g->mu);
                comm_set_start(s, g->b_push);
            }
        }
    }
}

/* Asynchronous: the communication thread's requests (pull: requests and replies; push: pushes),
 * the main thread's, and the thread. Returns 0 or -1 (message in err). */
static int setup_async(gossip *g, trainer *t, char *err, size_t errlen) {
    const experiment *e = t->e;
    const int p = g->p;
    const size_t nb = g->n * sizeof(float);
    if (!comm_thread_multiple()) { /* main.c refuses this at start already; kept for callers without it */
        char adv[640];
        comm_thread_multiple_advice(adv, sizeof adv);
        return seterr(err, errlen, "%s: method %s (asynchronous) answers its peers from a communication thread and needs "
                                   "MPI_THREAD_MULTIPLE: %s", e->source, method_name(e->method), adv);
    }
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
    if (pthread_create(&g->th, NULL, gossip_thread, g) != 0) return seterr(err, errlen, "cannot start the gossip communication thread");
    g->has_thread = 1;
    return 0;
}

/* g's buffers and persistent requests for t (g zeroed). Returns 0 or -1 (message in err). */
static int gossip_setup(gossip *g, trainer *t, char *err, size_t errlen) {
    const experiment *e = t->e;
    g->t = t;
    g->push = ((const gossip_variant *)t->method->variant)->push;
    g->sync = e->synchronous;
    g->fresh = e->gossip_order == GOSSIP_FRESH;
    g->p = e->p, g->me = t->worker;
    g->n = model_n_params(t->net), g->nbn = model_n_bn(t->net);
    const size_t n = g->n, nb = n * sizeof(float);
    const int p = g->p;
    g->vel = xcalloc(n, sizeof(float));
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
    if (t->vc.on) g->sim = 1, vclock_gossip_init(&g->vg, p, t->vc.model_bytes);
    if (p == 1) return 0;
    gossip_sig_open(g);
    if (t->vc.on && !g->sync) return gossip_sim_setup(g, t, err, errlen); /* sim mode: gossip_sim.c */
    if (!g->sync) return setup_async(g, t, err, errlen);
    for (int k = 0; k < p; k++) {
        g->m_send[k] = comm_set_add(g->set, COMM_SEND, g->sendbuf, nb, k, TAG_SYNC);
        g->m_recv[k] = comm_set_add(g->set, COMM_RECV, g->peer, nb, k, TAG_SYNC);
    }
    return 0;
}

/* Stops the communication thread and frees t's gossip (t->mstate becomes NULL). */
static void gossip_teardown(trainer *t) {
    gossip *g = t->mstate;
    if (g->has_thread) {
        comm_set_start(g->set, g->m_quit);
        comm_set_wait(g->set, g->m_quit, 1e18);
        pthread_join(g->th, NULL);
        comm_set_free(g->bg);
        pthread_mutex_destroy(&g->mu);
    }
    comm_set_free(g->set);
    gossip_sim_free(g);
    gossip_sig_close(g);
    if (g->sim) vclock_gossip_free(&g->vg);
    free(g->vel), free(g->peer), free(g->inbox), free(g->sendbuf), free(g->avg), free(g->own), free(g->avg_bn), free(g->own_bn);
    free(g->peers), free(g->sent), free(g->phi), free(g->gbuf), free(g->rows);
    free(g->m_ask), free(g->m_ans), free(g->m_get), free(g->m_send), free(g->m_recv), free(g->b_rephdr), free(g->b_rep), free(g->bg_done);
    free(g->pub), free(g->tbuf), free(g->recvbuf);
    free(g);
    t->mstate = NULL;
}

/* θ ← (θ + Σ received)/(1 + k) for k received vectors summed in sum. */
static void mix(float *th, const float *sum, int k, size_t n) {
    if (k == 0) return;
    const float inv = 1.0f / (float)(1 + k);
    for (size_t j = 0; j < n; j++) th[j] = (th[j] + sum[j]) * inv;
}

/* Step s, before the gradient: start the exchange with peer j (th: θ_i^s). */
static void exchange_start(gossip *g, const experiment *e, const float *th, long s, int j) {
    const int p = g->p, me = g->me;
    if (!g->sync && !g->push) {
        comm_set_start(g->set, g->m_ans[j]);
        comm_set_start(g->set, g->m_get[j]);
        comm_set_start(g->set, g->m_ask[j]);
    } else if (g->sync) {
        memcpy(g->sendbuf, th, g->n * sizeof(float)); /* θ^s */
        if (!g->push) {
            for (int k = 0; k < p; k++)
                if (k != me && peer_of(e, k, s) == me && !inject_failed(e, k, s)) comm_set_start(g->set, g->m_send[k]);
            if (!inject_failed(e, j, s)) comm_set_start(g->set, g->m_recv[j]);
        } else if (!inject_failed(e, j, s)) comm_set_start(g->set, g->m_send[j]);
    }
}

/* Step s, after the gradient: finish the exchange with peer j. Returns the number of vectors
 * received, summed in *recv (g->peer or g->inbox). */
static int exchange_finish(gossip *g, const experiment *e, long s, int j, float **recv) {
    const int p = g->p, me = g->me;
    const size_t n = g->n, nb = n * sizeof(float);
    int got = 0;
    *recv = g->peer;
    if (!g->sync && !g->push) {
        comm_set_wait_or_abort(g->set, g->m_ask[j], "a gossip peer (pull request)");
        comm_set_wait_or_abort(g->set, g->m_ans[j], "a gossip peer's reply");
        comm_set_wait_or_abort(g->set, g->m_get[j], "a gossip peer's reply");
        got = g->ans == 0;
    } else if (g->sync && !g->push) {
        for (int k = 0; k < p; k++) comm_set_wait_or_abort(g->set, g->m_send[k], "a gossip peer (lock-step)");
        comm_set_wait_or_abort(g->set, g->m_recv[j], "a gossip peer (lock-step)");
        got = !inject_failed(e, j, s);
    } else if (g->sync) {
        memset(g->inbox, 0, nb);
        for (int k = 0; k < p; k++)
            if (k != me && peer_of(e, k, s) == me && !inject_failed(e, k, s)) {
                comm_set_start(g->set, g->m_recv[k]);
                comm_set_wait_or_abort(g->set, g->m_recv[k], "a gossip peer (lock-step)");
                for (size_t q = 0; q < n; q++) g->inbox[q] += g->peer[q];
                got++;
            }
        comm_set_wait_or_abort(g->set, g->m_send[j], "a gossip peer (lock-step)");
        *recv = g->inbox;
    } else { /* asynchronous push: take the inbox */
        pthread_mutex_lock(&g->mu);
        got = g->inbox_k;
        if (got) memcpy(g->peer, g->inbox, nb), memset(g->inbox, 0, nb);
        g->inbox_k = 0;
        pthread_mutex_unlock(&g->mu);
    }
    return got;
}

/* Step s, after the update: publish θ_i (asynchronous pull) or push it to peer j. */
static void exchange_publish(gossip *g, const float *th, int j) {
    const size_t nb = g->n * sizeof(float);
    if (g->sync) return;
    if (!g->push) {
        pthread_mutex_lock(&g->mu);
        memcpy(g->pub, th, nb);
        pthread_mutex_unlock(&g->mu);
    } else {
        if (g->last_push >= 0) comm_set_wait_or_abort(g->set, g->m_send[g->last_push], "a gossip peer (push)");
        memcpy(g->sendbuf, th, nb);
        comm_set_start(g->set, g->m_send[j]);
        g->last_push = j;
        g->sent[j]++;
    }
}

/* Sim mode, step s begins (collective over the workers; a failed node calls it too): every
 * node's step start and this step's peers into g->vg; returns when this node's exchange ends in
 * virtual time (vclock_gossip.h). */
static double sim_exchange_end(gossip *g, trainer *t, long s) {
    const experiment *e = t->e;
    if (g->p == 1) return t->vc.now; /* plain SGD: no exchange */
    vclock_gossip_starts(&t->vc, &g->vg);
    for (int k = 0; k < g->p; k++) {
        const int j = peer_of(e, k, s);
        g->vg.peer[k] = inject_failed(e, k, s) || inject_failed(e, j, s) ? -1 : j;
    }
    return vclock_gossip_schedule(&g->vg, &t->vc.net, g->push, g->me);
}

/* One gossip step of node i at step s: *loss_out (NaN: non-finite). Returns 0, or -1 when the
 * loader could not deliver (the loop then stops every rank). */
static int gossip_step(gossip *g, trainer *t, long s, double alpha, double *loss_out) {
    const experiment *e = t->e;
    model *net = t->net;
    float *th = model_params(net);
    const size_t n = g->n;
    const int j = g->p > 1 ? peer_of(e, g->me, s) : -1;
    const double t0 = wall_time();
    int got = 0; /* vectors received this step (into g->peer or g->inbox) */
    float *recv = g->peer;
    const double xend = g->sim ? sim_exchange_end(g, t, s) : 0.0; /* sim mode: the exchange in virtual time */

    if (j >= 0) exchange_start(g, e, th, s, j); /* 1. start the exchange */
    const double c0 = wall_time() - t0;

    double loss; /* 2. the gradient at θ_i */
    const double real0 = t->times.data_s + t->times.compute_s; /* sim mode, device "measured" */
    if (train_compute(t, s, s, &loss)) return -1;
    if (g->sim) /* sim mode: the compute, then the exchange it overlaps, on the virtual clock */
        vclock_compute(&t->vc, s, t->times.data_s + t->times.compute_s - real0, inject_draw_s(&t->inj, s)), vclock_gossip_charge(&t->vc, xend);

    double w0 = wall_time(); /* 3. finish the exchange: what this node received */
    if (j >= 0) got = exchange_finish(g, e, s, j, &recv);
    const double c1 = wall_time() - w0;
    if (j >= 0) g->peers[j]++;

    /* 4. combine */
    double u0 = wall_time();
    int finite = isfinite(loss);
    if (!g->fresh) mix(th, recv, got, n);
    finite = finite && sgd_update(th, model_grads(net), g->vel, n, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov);
    if (g->fresh) mix(th, recv, got, n);
    double u1 = wall_time();

    if (j >= 0) exchange_publish(g, th, j); /* 5. publish / push θ_i */
    double y1 = wall_time();

    t->times.comm_s += c0 + c1 + (y1 - u1);
    t->times.wait_s += c1;
    t->times.update_s += u1 - u0;
    t->times.step_s += wall_time() - t0;
    if (g->sim) vclock_step_end(&t->vc, u1 - u0);
    *loss_out = finite ? loss : NAN;
    return 0;
}

/* Sim mode, asynchronous pull: node i's step s on the replicated schedule (gossip_sim.c); the
 * training is gossip_step's. */
static int gossip_step_sim(gossip *g, trainer *t, long s, double alpha, double *loss_out) {
    const experiment *e = t->e;
    model *net = t->net;
    float *th = model_params(net);
    const size_t n = g->n;
    const double t0 = wall_time();
    const vga_step *r = gossip_sim_start(g, s); /* 1. the step on the schedule; the pull's receive */
    const double c0 = wall_time() - t0;
    double loss; /* 2. the gradient at θ_i, its compute on the virtual clock, then the reply's arrival */
    if (train_compute(t, s, s, &loss)) return -1;
    vclock_compute(&t->vc, s, 0.0, inject_draw_s(&t->inj, s));
    gossip_sim_charge(g, r);
    const double w0 = wall_time(); /* 3. θ_j */
    const int got = gossip_sim_finish(g, r);
    const double c1 = wall_time() - w0;
    g->peers[r->peer]++;
    const double u0 = wall_time(); /* 4. combine */
    int finite = isfinite(loss);
    if (!g->fresh) mix(th, g->peer, got, n);
    finite = finite && sgd_update(th, model_grads(net), g->vel, n, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov);
    if (g->fresh) mix(th, g->peer, got, n);
    const double u1 = wall_time();
    gossip_sim_publish(g, th, s); /* 5. θ^{s+1} to its readers */
    const double y1 = wall_time();
    t->times.comm_s += c0 + c1 + (y1 - u1);
    t->times.wait_s += c1;
    t->times.update_s += u1 - u0;
    t->times.step_s += wall_time() - t0;
    vclock_step_end(&t->vc, 0.0);
    *loss_out = finite ? loss : NAN;
    return 0;
}

/* Sim mode, asynchronous push: node i's step s on the replicated schedule (gossip_sim.c). */
static int gossip_step_sim_push(gossip *g, trainer *t, long s, double alpha, double *loss_out) {
    const experiment *e = t->e;
    model *net = t->net;
    float *th = model_params(net);
    const size_t n = g->n;
    const double t0 = wall_time();
    double loss; /* 1. the gradient at θ_i, its compute on the virtual clock */
    if (train_compute(t, s, s, &loss)) return -1;
    vclock_compute(&t->vc, s, 0.0, inject_draw_s(&t->inj, s));
    const double w0 = wall_time(); /* 2. the take: what arrived by now */
    double x;
    const int got = gossip_sim_take(g, s, &x);
    if (x != t->vc.now) DIE("sim gossip: node %d's clock %.17g at step %ld is not the schedule's %.17g", g->me, t->vc.now, s, x);
    const double c1 = wall_time() - w0;
    g->peers[peer_of(e, g->me, s)]++;
    const double u0 = wall_time(); /* 3. combine */
    int finite = isfinite(loss);
    if (!g->fresh) mix(th, g->inbox, got, n);
    finite = finite && sgd_update(th, model_grads(net), g->vel, n, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov);
    if (g->fresh) mix(th, g->inbox, got, n);
    const double u1 = wall_time();
    gossip_sim_push(g, th, s); /* 4. θ^{s+1} to the peer */
    const double y1 = wall_time();
    t->times.comm_s += c1 + (y1 - u1);
    t->times.wait_s += c1;
    t->times.update_s += u1 - u0;
    t->times.step_s += wall_time() - t0;
    vclock_step_end(&t->vc, 0.0);
    *loss_out = finite ? loss : NAN;
    return 0;
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
    gossip *g = t->mstate;
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
    if (t->log && !r.failed && !rl.failed) {
        const int p = g->p;
        double es = wall_time() - ev0;
        printf("gossip step %ld: diffusion potential Φ = Σ‖θ_i − θ̄‖² = %.6g\n", step, d);
        if (step > 0 && runlog_ranks(t->log, step, g->rows, g->rows + p, g->rows + 2 * p, g->rows + 3 * p, g->rows + 4 * p) != 0) status = EXIT_RUNTIME;
        if (train_log_eval(t, step, train_s, &rl, es, 1) != 0) status = EXIT_RUNTIME;
        if (train_log_eval(t, step, train_s, &r, es, 0) != 0) status = EXIT_RUNTIME;
        if (g->n_evals == g->max_evals) phi_reserve(g, g->n_evals + 1);
        g->phi[g->n_evals++] = d;
    }
    if (r.failed || rl.failed) *why = STOPPED_DATA, status = EXIT_RUNTIME; /* a loader failed (said there): all know */
    else if (!isfinite(r.loss)) train_say_nonfinite_eval(t, why, step, "the nodes"), status = EXIT_RUNTIME;
    return comm_agree(status);
}

/* Checkpoints (collective over the workers, at a meeting point: every node has done the same
 * steps and left its step). Lock-step and pull gossip have nothing in flight there. Push:
 * vectors pushed before the meeting may still be on their way into an inbox, so each node
 * waits until its communication thread has received every vector pushed to it (the pushes are
 * counted on both sides); the inbox, mixed in at the node's next step, is then saved. */
static void gossip_quiesce(trainer *t) {
    gossip *g = t->mstate;
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
    gossip *g = t->mstate;
    model *net = t->net;
    const int save = ckpt_writing(f);
    int64_t counts[4] = {g->steps_done, g->prev_done, g->inbox_k, g->recv_n};
    int rc = ckpt_io_f32(f, "params", model_params(net), g->n) | ckpt_io_f32(f, "velocity", g->vel, g->n) |
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

/* method_ops.begin: this node's gossip on t->mstate — the buffers, the persistent requests and
 * (asynchronous) the communication thread; every wait of this thread takes announcements from
 * then on (comm_on_wait). */
static int gossip_begin(trainer *t) {
    char err[ERRLEN] = "";
    gossip *g = xcalloc(1, sizeof *g);
    t->mstate = g;
    const int mine = gossip_setup(g, t, err, sizeof err);
    const int st = comm_max_int(mine);
    if (st) {
        /* Said once, by the lowest rank that failed (the log rank may have succeeded and hold no
         * message; every rank failing alike would say it p times). */
        const int first = t->p - comm_max_int(mine ? t->p - t->rank : 0);
        if (t->rank == first) fprintf(stderr, "dsgd-run: rank %d: %s\n", t->rank, err);
        gossip_teardown(t);
        return st;
    }
    g->prev = *train_axis_times(t); /* the run file's /ranks axis: virtual in sim mode */
    g->pos = -1; /* no announcement before the first step */
    if (g->sim_async) comm_on_wait(gossip_sim_hook, g); /* sends of θ go on in every wait */
    else if (g->sig) comm_on_wait(gossip_sig_hook, g);
    return 0;
}

/* method_ops.step: node i's step s, or none once it has failed (inject.fail_rank). */
static step_out gossip_node_step(trainer *t, long s, double alpha) {
    const experiment *e = t->e;
    gossip *g = t->mstate;
    gossip_sig_step(g, s);
    const int failed = inject_failed(e, g->me, s);
    if (failed && g->has_thread && !g->gone) {
        pthread_mutex_lock(&g->mu);
        g->gone = 1;
        pthread_mutex_unlock(&g->mu);
    }
    if (failed && s == e->inject.fail_step)
        fprintf(stderr, "dsgd-run: rank %d: injected failure after %ld steps (inject.fail_step); the other nodes go on\n", t->rank, s);
    if (failed && g->sim_async) gossip_sim_idle(g, s);
    else if (failed && g->sim) (void)sim_exchange_end(g, t, s); /* the step starts' all-gather is collective */
    if (failed) return (step_out){.took = METHOD_STEP_NONE};
    g->steps_done++;
    step_out o = {.took = METHOD_STEP_TOOK};
    if (g->sim_async ? (g->push ? gossip_step_sim_push : gossip_step_sim)(g, t, s, alpha, &o.loss) : gossip_step(g, t, s, alpha, &o.loss)) o.status = EXIT_RUNTIME, o.why = STOPPED_DATA;
    return o;
}

/* method_ops.end: rank 0 collects every node's row of peers chosen; the run-file arrays; the
 * gossip freed. */
static int gossip_end(trainer *t, int status) {
    gossip *g = t->mstate;
    comm_on_wait(NULL, NULL);
    double *row = xmalloc((size_t)g->p * sizeof(double)), *all = xmalloc((size_t)g->p * g->p * sizeof(double));
    for (int k = 0; k < g->p; k++) row[k] = (double)g->peers[k];
    comm_workers_gather_f64(row, g->p, all);
    comm_workers_barrier(); /* every node has finished: no pull or push is still on its way */
    if (t->log) {
        for (int k = 0; k < g->p * g->p; k++) g->peers[k] = (long long)all[k];
        if (runlog_array(t->log, 0, g->peers) != 0 || runlog_array_rows_f64(t->log, 1, g->phi, g->n_evals) != 0) status = EXIT_RUNTIME;
    }
    free(row), free(all);
    gossip_teardown(t);
    return status;
}

static int gossip_runlog_arrays(const experiment *e, runlog_array_spec *a) {
    a[0] = (runlog_array_spec){"gossip/peers", e->p, e->p, "times", "element [i, j]: steps at which node i chose peer j", 0, 0};
    a[1] = (runlog_array_spec){"gossip/potential", potential_rows(e), 0, "1",
                               "diffusion potential sum_i ||theta_i - mean theta||^2 at each evaluation, in /eval row order", 1, 1};
    return 2;
}

static const gossip_variant gossip_pull = {.push = 0}, gossip_push = {.push = 1};

#define GOSSIP_OPS(kind, v)                                                                                               \
    {.name = kind, .init = method_init_rank0, .begin = gossip_begin, .step = gossip_node_step, .signal = gossip_signal,              \
     .meet = gossip_meet, .quiesce = gossip_quiesce, .evaluate = gossip_evaluate, .end = gossip_end, .save = gossip_state,     \
     .load = gossip_state, .runlog_arrays = gossip_runlog_arrays, .eval_local = 1, .variant = &(v),                          \
     .comm_thread = 1, .ranks_end_together = 1}
const method_ops method_gossip_pull = GOSSIP_OPS("gossip_pull", gossip_pull);
const method_ops method_gossip_push = GOSSIP_OPS("gossip_push", gossip_push);
