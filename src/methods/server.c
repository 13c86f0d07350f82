/* server.c — the runtime of the methods with parameter-server ranks (see server.h): the server
 * loop, snapshots of the center for evaluation, and logging on server 0, its cadence from
 * cadence_due over its iteration count. The workers' side is server_worker.c, a server's
 * checkpoints server_ckpt.c (the pause protocol: server_pause.c).
 *
 * Progress without spinning: every wait goes through comm's polling wait (MPI_Testsome, then
 * naps of 2 µs … 1 ms). Servers never compute gradients, so they are always inside MPI and
 * progress every message; a worker starts and completes its own exchange, so nothing depends
 * on a busy worker entering MPI. No rank waits for another worker: a worker waits only for the
 * servers' replies, and only synchronous rules (easgd synchronous, backup) hold a reply.
 *
 * Evaluation of the center (server 0): when server 0's count reaches a multiple of eval.every
 * it asks every other server for its shard (a snapshot request; they answer from their loop),
 * averages the workers' latest BN statistics, and evaluates the assembled center on a thread
 * while the loop keeps serving workers. The /eval row carries the wall clock at the snapshot:
 * training is not paused, so time_s is plain wall clock since training began. */
#define _GNU_SOURCE
#include "server_ckpt.h"
#include "server_sim.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "optim/sgd.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "util/util.h"

/* Sim mode: the reply to worker i leaves at the server's virtual now (after the replies before it
 * on its uplink); worker i's next timestamp is at least the reply's arrival on an idle downlink
 * plus, when the worker computes a step before its next message, that step's modelled compute
 * (a pure function of (seed, i, step); 0 with sim.device = "measured"). */
static void srvsim_reply(srv *sv, int i, int stop) {
    const vclock *vc = &sv->t->vc;
    const experiment *e = sv->t->e;
    const double nb = srvsim_shard_bytes(vc, sv->k, sv->S);
    const double start = sim_nic_out(&sv->up, &vc->net, sv->now, nb);
    sv->out[i].vt_send = start, sv->out[i].vt_arr = sv->arr[i];
    const long s = sv->last_steps[i]; /* the worker's next step */
    const int computes = stop == STOP_NO && (sv->rules->until_stop || s < e->iterations) && !inject_failed(e, i, s);
    sv->lb[i] = start + sim_p2p_s(&vc->net, sv->p + sv->k, i, (size_t)nb) +
                (computes && vc->step_s >= 0 ? vc->step_s * vclock_jitter(vc, i, s) : 0.0);
}

void srv_reply_center(srv *sv, int i, int stop) {
    /* The previous reply to i completed before i could send this request; collect it before
     * its buffers are written again. */
    comm_set_wait_or_abort(sv->set, sv->s_hdr[i], "a worker (reply)");
    comm_set_wait_or_abort(sv->set, sv->s_data[i], "a worker (reply)");
    memcpy(sv->rep[i], sv->center, sv->n * sizeof(float));
    sv->out[i] = (msg_hdr){.version = sv->version, .stop = stop, .sig = sv->want};
    if (sv->sim) srvsim_reply(sv, i, stop);
    comm_set_start(sv->set, sv->s_hdr[i]);
    comm_set_start(sv->set, sv->s_data[i]);
    sv->held[i] = 0;
}

int srv_stop(const srv *sv) { return sv->diverged ? STOP_DIVERGED : sv->pausing ? STOP_CKPT : STOP_NO; }

/* Post worker i's receives again after a message of `kind`: the header, and after an exchange its
 * payload and BN statistics (a pause leaves them posted; after a leave none). Tags differ: any order. */
static void srv_repost(srv *sv, int i, int kind) {
    if (kind != MSG_EXCHANGE && kind != MSG_PAUSE) return;
    comm_set_start(sv->set, sv->r_hdr[i]);
    if (kind == MSG_PAUSE) return;
    comm_set_start(sv->set, sv->r_data[i]);
    if (sv->r_bn[i] >= 0) comm_set_start(sv->set, sv->r_bn[i]);
}

/* After every evaluation batch: 1 to abandon the evaluation (server 0 asked for it on a stop
 * request; at the start, a stop signal itself), else 0 after the test hook's pause. */
static int eval_between(void *arg) {
    evaluator *ev = arg;
    for (double slept = 0.0;; slept += 0.01) {
        if (atomic_load(&ev->abandon) || (ev->at_start && ckpt_signal_pending() == CKPT_SIG_STOP)) return 1;
        if (slept >= ev->delay_s) return 0;
        nanosleep(&(struct timespec){0, 10000000L}, NULL); /* 10 ms */
    }
}

static void *eval_main(void *arg) {
    evaluator *ev = arg;
    omp_set_num_threads(ev->threads);
    double t0 = wall_time();
    ev->r = train_evaluate_all(ev->t, ev->t->net, eval_between, ev);
    ev->seconds = wall_time() - t0;
    atomic_store(&ev->finished, 1);
    return NULL;
}

/* A server starts pausing for a checkpoint (CKPT_SIG_* want): from now on its replies say
 * STOP_CKPT and no new synchronous round starts. */
static void srv_pause(srv *sv, int want) {
    sv->pausing = 1;
    if (want > sv->want) sv->want = want;
}

/* Voided round: release the held workers without applying their exchange. backup: the
 * gradients (and so their losses, already counted on server 0) are computed again after the
 * checkpoint, so their losses are taken back out of the /train row. */
static void void_round(server_ctx *c) {
    srv *sv = &c->sv;
    for (int i = 0; i < sv->p; i++)
        if (sv->held[i]) {
            if (sv->k == 0 && sv->rules->until_stop) c->loss_sum -= sv->in[i].loss_sum, c->n_loss -= sv->in[i].n_loss;
            srv_reply_center(sv, i, STOP_CKPT_VOID);
        }
    memset(sv->acc, 0, (sv->n ? sv->n : 1) * sizeof(float));
    sv->count = 0;
}

static void server_setup(trainer *t, server_ctx *c) {
    const experiment *e = t->e;
    srv *sv = &c->sv;
    const size_t N = model_n_params(t->net), nbn = model_n_bn(t->net);
    const int S = e->servers, p = e->p;
    sv->t = t, sv->rules = t->method->rules, sv->k = t->server, sv->S = S, sv->p = p;
    sv->lo = shard_lo(N, sv->k, S);
    sv->n = shard_lo(N, sv->k + 1, S) - sv->lo;
    const size_t n = sv->n;
    sv->center = xmalloc(n * sizeof(float));
    memcpy(sv->center, model_params(t->net) + sv->lo, n * sizeof(float));
    sv->vel = xcalloc(n ? n : 1, sizeof(float));
    sv->acc = xcalloc(n ? n : 1, sizeof(float));
    sv->live = p;
    sv->in = xcalloc((size_t)p, sizeof(msg_hdr)), sv->out = xcalloc((size_t)p, sizeof(msg_hdr));
    sv->gbuf = xmalloc((size_t)p * sizeof(float *)), sv->rep = xmalloc((size_t)p * sizeof(float *));
    sv->bnbuf = xcalloc((size_t)p, sizeof(float *));
    sv->held = xcalloc((size_t)p, 1), sv->seen_bn = xcalloc((size_t)p, 1);
    sv->paused = xcalloc((size_t)p, 1), sv->left = xcalloc((size_t)p, 1);
    sv->failed = xcalloc((size_t)p, 1), sv->lost = xcalloc((size_t)p, 1), sv->heard = xcalloc((size_t)p, sizeof(double));
    sv->bnlast = xcalloc((size_t)p, sizeof(float *));
    c->bye = xcalloc((size_t)p, 1);
    sv->last_steps = xcalloc((size_t)p, sizeof(long));
    sv->r_hdr = xmalloc((size_t)p * sizeof(int)), sv->r_data = xmalloc((size_t)p * sizeof(int));
    sv->r_bn = xmalloc((size_t)p * sizeof(int));
    sv->s_hdr = xmalloc((size_t)p * sizeof(int)), sv->s_data = xmalloc((size_t)p * sizeof(int));
    sv->set = comm_set_new(SET_CAP(p, S));
    sv->rule = sv->rules->state_new ? sv->rules->state_new(sv) : NULL;
    sv->sim = t->vc.on;
    sv->lb = xcalloc((size_t)p, sizeof(double)), sv->arr = xcalloc((size_t)p, sizeof(double)), sv->queued = xcalloc((size_t)p, 1);
    for (int i = 0; i < p && sv->sim; i++) sv->lb[i] = t->vc.step_s >= 0 ? t->vc.step_s * vclock_jitter(&t->vc, i, 0) : 0.0;
    c->want_label = c->snap_label = -1;
    pause_init(&c->pause, t, server_write, c);
    for (int i = 0; i < p; i++) {
        sv->gbuf[i] = xmalloc((n ? n : 1) * sizeof(float));
        sv->rep[i] = xmalloc((n ? n : 1) * sizeof(float));
        sv->r_hdr[i] = comm_set_add(sv->set, COMM_RECV, &sv->in[i], sizeof(msg_hdr), i, TAG_HDR);
        sv->r_data[i] = comm_set_add(sv->set, COMM_RECV, sv->gbuf[i], n * sizeof(float), i, TAG_DATA);
        sv->r_bn[i] = -1;
        if (sv->k == 0 && nbn) {
            sv->bnbuf[i] = xmalloc(nbn * sizeof(float));
            sv->bnlast[i] = xcalloc(nbn, sizeof(float));
            sv->r_bn[i] = comm_set_add(sv->set, COMM_RECV, sv->bnbuf[i], nbn * sizeof(float), i, TAG_BN);
        }
        sv->s_hdr[i] = comm_set_add(sv->set, COMM_SEND, &sv->out[i], sizeof(msg_hdr), i, TAG_RHDR);
        sv->s_data[i] = comm_set_add(sv->set, COMM_SEND, sv->rep[i], n * sizeof(float), i, TAG_RDATA);
        srv_repost(sv, i, MSG_EXCHANGE);
    }
    if (sv->k == 0) {
        c->snap = xmalloc(N * sizeof(float));
        c->sreq_out = xcalloc((size_t)S, sizeof(msg_hdr));
        c->s_req = xmalloc((size_t)S * sizeof(int)), c->r_snap = xmalloc((size_t)S * sizeof(int));
        for (int k = 1; k < S; k++) {
            size_t lo = shard_lo(N, k, S), len = shard_lo(N, k + 1, S) - lo;
            c->s_req[k] = comm_set_add(sv->set, COMM_SEND, &c->sreq_out[k], sizeof(msg_hdr), p + k, TAG_SNAPREQ);
            c->r_snap[k] = comm_set_add(sv->set, COMM_RECV, c->snap + lo, len * sizeof(float), p + k, TAG_SNAP);
        }
        c->last = xcalloc((size_t)p, sizeof(msg_hdr)), c->prev = xcalloc((size_t)p, sizeof(msg_hdr));
        c->rows = xmalloc((size_t)5 * p * sizeof(double));
        c->ev.t = t;
        c->ev.threads = omp_get_max_threads();
        const char *d = getenv("DSGD_TEST_EVAL_DELAY_MS"); /* tests: a long evaluation (docs/testing.md) */
        c->ev.delay_s = d && *d ? atof(d) / 1000.0 : 0.0;
    } else {
        c->snapbuf = xmalloc((n ? n : 1) * sizeof(float));
        c->r_req = comm_set_add(sv->set, COMM_RECV, &c->sreq_in, sizeof(msg_hdr), p, TAG_SNAPREQ);
        c->s_snap = comm_set_add(sv->set, COMM_SEND, c->snapbuf, n * sizeof(float), p, TAG_SNAP);
        comm_set_start(sv->set, c->r_req);
    }
    c->go = -1;
}

static void server_free(server_ctx *c) {
    srv *sv = &c->sv;
    comm_set_free(sv->set);
    pause_free(&c->pause);
    if (sv->rules->state_free) sv->rules->state_free(sv->rule);
    for (int i = 0; i < sv->p; i++) free(sv->gbuf[i]), free(sv->rep[i]), free(sv->bnbuf[i]), free(sv->bnlast[i]);
    free(sv->bnlast), free(sv->failed), free(sv->lost), free(sv->heard), free(c->bye);
    free(sv->center), free(sv->vel), free(sv->acc), free(sv->in), free(sv->out), free(sv->gbuf), free(sv->rep), free(sv->bnbuf);
    free(sv->held), free(sv->seen_bn), free(sv->paused), free(sv->left), free(sv->last_steps), free(sv->r_hdr), free(sv->r_data), free(sv->r_bn);
    free(sv->s_hdr), free(sv->s_data), free(sv->lb), free(sv->arr), free(sv->queued);
    free(c->snap), free(c->sreq_out), free(c->s_req), free(c->r_snap);
    free(c->snapbuf), free(c->last), free(c->prev), free(c->rows);
}

/* Server 0: a keep-alive header (STOP_NO) every KEEPALIVE_S to each worker that has left by a
 * message and waits for the end of the run (worker_bye); bye = 1: the goodbye (STOP_DONE). A send
 * that cannot complete (the worker has stopped since) is left to the end-of-run agreement. */
static void keepalive(server_ctx *c, int bye) {
    srv *sv = &c->sv;
    if (sv->k != 0) return;
    const double now = wall_time();
    if (!bye && now - c->last_beat < KEEPALIVE_S) return;
    c->last_beat = now;
    for (int i = 0; i < sv->p; i++) {
        if (!c->bye[i]) continue;
        if (comm_set_active(sv->set, sv->s_hdr[i]) && !comm_set_test(sv->set, sv->s_hdr[i]) &&
            (!bye || comm_set_wait(sv->set, sv->s_hdr[i], 1.0) != 0))
            continue;
        sv->out[i] = (msg_hdr){.version = sv->version, .stop = bye ? STOP_DONE : STOP_NO};
        comm_set_start(sv->set, sv->s_hdr[i]);
        if (bye) comm_set_wait(sv->set, sv->s_hdr[i], 1.0), c->bye[i] = 0;
    }
}

/* Server 0: the run file's time now: wall clock since training began, or in sim mode the
 * server's virtual now (the arrival of the request being applied), the wall clock then kept
 * beside it (wall_s). */
static double srv_axis(server_ctx *c) {
    trainer *t = c->sv.t;
    const double real_s = wall_time() - c->t_start;
    if (!c->sv.sim) return real_s;
    t->vc.wall_s = real_s;
    if (t->log) runlog_wall(t->log, real_s);
    return c->sv.now;
}

/* Server 0: the /train (and /ranks) row at its current iteration count: one per count, from 1. */
static void log_row(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const experiment *e = t->e;
    long it = srv_iteration(sv);
    if (c->n_loss == 0 || it <= c->last_row) return; /* one row per iteration count, from 1 */
    c->last_row = it;
    const int p = sv->p;
    for (int i = 0; i < p; i++) {
        const msg_hdr *a = &c->last[i], *b = &c->prev[i];
        double ns = (double)(a->steps - b->steps);
        c->rows[i] = ns > 0 ? (a->step_s - b->step_s) / ns : NAN;
        c->rows[p + i] = ns > 0 ? (a->compute_s - b->compute_s) / ns : NAN;
        c->rows[2 * p + i] = ns > 0 ? (a->comm_s - b->comm_s) / ns : NAN;
        c->rows[3 * p + i] = ns > 0 ? (a->wait_s - b->wait_s) / ns : NAN;
        c->rows[4 * p + i] = NAN; /* the workers' headers carry no data time */
        c->prev[i] = *a;
    }
    long at = it < e->iterations ? it : e->iterations - 1;
    if (train_log_train(t, it, srv_axis(c), c->loss_sum / (double)c->n_loss, alpha_at(e, at), c->rows) != 0)
        c->status = EXIT_RUNTIME;
    c->loss_sum = 0.0, c->n_loss = 0;
}

/* Server 0: snapshot the center at iteration `label`: copy own shard, ask the others. */
static void snapshot_begin(server_ctx *c, long label) {
    srv *sv = &c->sv;
    c->q.label = label;
    c->q.time_s = srv_axis(c);
    memcpy(c->snap + sv->lo, sv->center, sv->n * sizeof(float));
    for (int k = 1; k < sv->S; k++) {
        comm_set_wait_or_abort(sv->set, c->s_req[k], "a parameter server (snapshot)");
        c->sreq_out[k] = (msg_hdr){.version = label, .stop = c->final_snap}; /* stop: the final one (sim mode) */
        comm_set_start(sv->set, c->r_snap[k]);
        comm_set_start(sv->set, c->s_req[k]);
    }
    c->q.asked = 1;
    c->q.got = 1;
    if (c->q.got == sv->S) c->q.asked = 0, c->q.ready = 1;
}

/* Server 0: 1 if completed request idx is server k's shard of the snapshot. */
static int snapshot_completion(server_ctx *c, int idx) {
    srv *sv = &c->sv;
    for (int k = 1; k < sv->S; k++)
        if (idx == c->r_snap[k]) {
            if (++c->q.got == sv->S) c->q.asked = 0, c->q.ready = 1;
            return 1;
        }
    return 0;
}

/* Server 0: evaluate the model (t->net: a snapshot of the center) on the thread, logged as
 * iteration `label` at wall clock time_s. */
static void eval_start(server_ctx *c, long label, double time_s) {
    c->q.eval_label = label;
    c->q.eval_time = time_s;
    c->q.abandoned = 0;
    atomic_store(&c->ev.abandon, 0);
    atomic_store(&c->ev.finished, 0);
    atomic_store(&c->ev.running, 1);
    if (pthread_create(&c->ev.th, NULL, eval_main, &c->ev) != 0) DIE("pthread_create failed for the evaluation thread");
}

/* Server 0: a stop request (SIGTERM, SIGINT, SIGHUP, here or relayed) while workers train: the
 * checkpoint comes next, and evaluations wait for after the resume. */
static int stopping(const server_ctx *c) { return c->sv.pausing && c->sv.want == CKPT_SIG_STOP && c->sv.live > 0; }

/* Server 0: if an assembled snapshot waits and the evaluator is free, move it into the model
 * (with the workers' average BN statistics) and start the evaluation. Not while an abandoned
 * evaluation's center is in the model, nor while stopping (it is saved with the checkpoint). */
static void snapshot_launch(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    if (!c->q.ready || atomic_load(&c->ev.running) || c->q.abandoned || stopping(c)) return;
    const size_t nbn = model_n_bn(t->net);
    memcpy(model_params(t->net), c->snap, model_n_params(t->net) * sizeof(float));
    if (nbn) srv_bn_average(sv, model_bn(t->net), nbn);
    c->q.ready = 0;
    eval_start(c, c->q.label, c->q.time_s);
}

/* Server 0, while workers train: on a stop request (a signal here; one relayed by a worker is
 * in sv->want already) the running evaluation is abandoned after its current batch, so that the
 * checkpoint is written within the scheduler's grace period (an evaluation of 50,000 images takes
 * minutes on a CPU node); it is saved with the checkpoint and done again after the resume. */
static void check_abandon(server_ctx *c) {
    srv *sv = &c->sv;
    if (sv->k != 0 || sv->live == 0) return;
    if (ckpt_signal_pending() == CKPT_SIG_STOP) srv_pause(sv, CKPT_SIG_STOP);
    if (stopping(c) && atomic_load(&c->ev.running)) atomic_store(&c->ev.abandon, 1);
}

/* Server 0: log a finished evaluation (wait = 1: wait for it). */
static void eval_collect(server_ctx *c, int wait) {
    if (!atomic_load(&c->ev.running)) return;
    if (!wait && !atomic_load(&c->ev.finished)) return;
    while (!atomic_load(&c->ev.finished)) { /* keep the waiting workers' wait bounded meanwhile */
        keepalive(c, 0);
        if (c->in_loop) check_abandon(c);
        nanosleep(&(struct timespec){0, 10000000L}, NULL); /* 10 ms */
    }
    pthread_join(c->ev.th, NULL);
    atomic_store(&c->ev.running, 0);
    trainer *t = c->sv.t;
    if (c->ev.r.count == 0) { /* abandoned: its center stays in the model until the checkpoint */
        c->q.abandoned = 1;
        printf("note: evaluation of the center at iteration %ld abandoned for the checkpoint (stop request); it is done "
               "again after --resume\n", c->q.eval_label);
        fflush(stdout);
        return;
    }
    c->last_eval = c->q.eval_label;
    if (train_log_eval(t, c->q.eval_label, c->q.eval_time, &c->ev.r, c->ev.seconds, 0) != 0) c->status = EXIT_RUNTIME;
    if (!isfinite(c->ev.r.loss)) {
        train_say_nonfinite_eval(t, &c->why, c->q.eval_label, "the center");
        c->sv.diverged = 1;
        c->status = EXIT_RUNTIME;
    }
}

/* Server 0 after each message: what its iteration count crossed since the last look
 * (cadence_due): a row; a periodic checkpoint (not after the last iteration); a snapshot of the
 * center at each multiple of eval.every crossed before the last iteration (the final one is
 * server0_finish's) — one at a time: a multiple crossed while the previous snapshot is still
 * assembled or waits for the evaluator is skipped (said once, counted). */
static void server0_progress(server_ctx *c) {
    srv *sv = &c->sv;
    const experiment *e = sv->t->e;
    const long before = c->last_it, it = srv_iteration(sv);
    const unsigned due = cadence_due(e, before, it);
    if (it > before) c->last_it = it;
    if (due & CADENCE_LOG) log_row(c);
    if ((due & CADENCE_CKPT) && it < e->iterations) srv_pause(sv, CKPT_SIG_SAVE);
    if (!(due & CADENCE_EVAL)) return;
    for (long m = (before / e->eval.every + 1) * e->eval.every; m <= it && m < e->iterations; m += e->eval.every) {
        if (!c->q.asked && !c->q.ready) snapshot_begin(c, m);
        else if (c->q.skipped++ == 0)
            printf("note: evaluation at iteration %ld skipped: the previous evaluation of the center is still running "
                   "(evaluation takes longer than eval.every iterations of training)\n", m);
    }
}

/* A completed receive: returns the worker whose message is now complete (its kind in sv->in[i]), or -1. */
static int on_completion(server_ctx *c, int idx) {
    srv *sv = &c->sv;
    for (int i = 0; i < sv->p; i++) {
        if (idx != sv->r_hdr[i] && idx != sv->r_data[i] && idx != sv->r_bn[i]) continue;
        sv->heard[i] = wall_time();
        if (comm_set_active(sv->set, sv->r_hdr[i])) return -1;
        const int kind = sv->in[i].kind;
        if (kind == MSG_EXCHANGE && (comm_set_active(sv->set, sv->r_data[i]) || (sv->r_bn[i] >= 0 && comm_set_active(sv->set, sv->r_bn[i]))))
            return -1;
        if (kind == MSG_DIVERGED) sv->diverged = 1;
        return i;
    }
    return -1;
}

static void server_handle(server_ctx *c, int i) {
    srv *sv = &c->sv;
    const msg_hdr hc = sv->in[i]; /* a copy: the receive into in[i] is posted again below, and i's next */
    const msg_hdr *h = &hc;       /* header may arrive into it before this function ends */
    const int kind = h->kind;
    if (sv->lost[i]) { /* given up on, and back (SIGCONT): its exchange is not applied; it is told to stop */
        if (kind == MSG_EXCHANGE) srv_reply_center(sv, i, STOP_DONE);
        else if (kind != MSG_PAUSE && sv->k == 0) c->bye[i] = 1; /* it left: keep its wait for the end of the run alive */
        srv_repost(sv, i, kind);
        return;
    }
    long new_steps = h->steps - sv->last_steps[i];
    sv->last_steps[i] = h->steps;
    if (h->sig) srv_pause(sv, h->sig); /* a worker knows of a checkpoint request */
    if (kind == MSG_PAUSE) {
        srv_pause(sv, CKPT_SIG_SAVE);
        if (!sv->paused[i]) sv->paused[i] = 1, sv->n_paused++;
    } else if (kind != MSG_EXCHANGE) {
        sv->live--;
        sv->left[i] = 1;
        if (kind == MSG_FAILED) sv->failed[i] = 1; /* its BN statistics leave the average */
        c->bye[i] = 1, c->n_done++;
        if (sv->rules->leave) sv->rules->leave(sv, i);
    } else {
        sv->steps_total += new_steps;
        if (sv->r_bn[i] >= 0) { /* a stable copy: the receive is posted again below */
            memcpy(sv->bnlast[i], sv->bnbuf[i], model_n_bn(sv->t->net) * sizeof(float));
            sv->seen_bn[i] = 1;
        }
        sv->rules->request(sv, i);
    }
    srv_repost(sv, i, kind); /* for i's next message */
    if (sv->k == 0) {
        /* backup: a gradient voided at once is computed again after the checkpoint: its loss too */
        const int redone = kind == MSG_EXCHANGE && sv->rules->until_stop && !sv->held[i] && sv->out[i].stop == STOP_CKPT_VOID;
        if (h->n_loss > 0 && !redone) c->loss_sum += h->loss_sum, c->n_loss += h->n_loss;
        if (h->steps >= c->last[i].steps) c->last[i] = *h;
        server0_progress(c);
    }
}

/* Worker i has been silent for `silent` seconds, more than comm_timeout_s, while this server owed
 * it nothing (not held in a round, not paused): it has stopped or hangs (SIGSTOP, a frozen node).
 * Asynchronous rules go on without it, as after inject.fail_rank (backup: unless fewer than N
 * workers are left: then backup_leave stops the run); synchronous EASGD cannot and stops every
 * rank (exit 1); and if no worker is left that finished normally, nothing can go on either. */
static void srv_lose(server_ctx *c, int i, double silent) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const experiment *e = t->e;
    const long it = srv_iteration(sv);
    const int sync = sv->rules->needs_all && sv->rules->needs_all(sv);
    const int none = sv->live == 1 && c->n_done == 0; /* it is the last worker and none finished */
    if (sv->k == 0) {
        fprintf(stderr, "dsgd-run: worker %d (rank %d) silent for %.1f s, more than comm_timeout_s = %g s, at iteration %ld: %s\n", i, i,
                silent, e->comm_timeout_s, it,
                sync ? "synchronous EASGD cannot go on without it; stopping every rank"
                : none ? "no worker is left; stopping every rank"
                       : "treated as failed; the other workers go on without it");
        size_t len = strlen(c->lost_desc);
        snprintf(c->lost_desc + len, sizeof c->lost_desc - len, "%sworker %d (rank %d): silent for more than comm_timeout_s = %g s at iteration %ld",
                 len ? "; " : "", i, i, e->comm_timeout_s, it);
        runlog_set_attr_string(t->log, "workers_lost", c->lost_desc);
        t->lost++;
    }
    if (sync || none) {
        char what[128];
        snprintf(what, sizeof what, "worker %d (silent; %s)", i, sync ? "synchronous EASGD needs every worker" : "no worker left");
        comm_timeout_abort(what);
    }
    sv->lost[i] = sv->failed[i] = 1;
    sv->live--;
    sv->left[i] = 1;
    if (sv->rules->leave) sv->rules->leave(sv, i);
}

/* Every worker this server owes nothing and has not heard from for comm_timeout_s is given up on.
 * A gap of more than COMM_STALL_S since the last check is time this server did not run (SIGSTOP,
 * a paused VM): it is added to every worker's silence clock, not counted against the workers. */
static void check_silence(server_ctx *c) {
    srv *sv = &c->sv;
    const double now = wall_time(), tmo = sv->t->e->comm_timeout_s;
    const double stalled = now - c->checked > COMM_STALL_S ? now - c->checked : 0.0;
    c->checked = now;
    for (int i = 0; i < sv->p; i++) {
        if (sv->left[i]) continue;
        sv->heard[i] += stalled;
        if (sv->held[i] || sv->paused[i] || sv->queued[i]) sv->heard[i] = now; /* waiting for this server: silence counts from its reply */
        else if (now - sv->heard[i] > tmo) srv_lose(c, i, now - sv->heard[i]);
    }
}

/* Sim mode, server k > 0: send server 0 the snapshot it asked for when it is there — one taken
 * at the iteration asked (srvsim_crossed), or the final center once every worker has left. */
static void srvsim_answer(server_ctx *c) {
    srv *sv = &c->sv;
    if (c->want_label < 0) return;
    if (c->want_final ? sv->live > 0 : !(c->snap_hold && c->snap_label == c->want_label)) return;
    comm_set_wait_or_abort(sv->set, c->s_snap, "the first parameter server (snapshot)");
    if (c->want_final) memcpy(c->snapbuf, sv->center, sv->n * sizeof(float));
    comm_set_start(sv->set, c->s_snap);
    c->want_label = -1, c->snap_hold = 0;
}

/* Sim mode, server k > 0, after applying a message that moved its count from `before`: where
 * server 0 (the same order, the same count) snapshots the center for an evaluation
 * (server0_progress: the first multiple of eval.every crossed), this server copies its shard,
 * and applies nothing more until server 0 has asked for it. */
static void srvsim_crossed(server_ctx *c, long before) {
    srv *sv = &c->sv;
    const experiment *e = sv->t->e;
    const long it = srv_iteration(sv);
    if (!(cadence_due(e, before, it) & CADENCE_EVAL)) return;
    const long m = (before / e->eval.every + 1) * e->eval.every;
    if (m > it || m >= e->iterations) return;
    comm_set_wait_or_abort(sv->set, c->s_snap, "the first parameter server (snapshot)");
    memcpy(c->snapbuf, sv->center, sv->n * sizeof(float));
    c->snap_label = m, c->snap_hold = 1;
    srvsim_answer(c);
}

/* Sim mode: apply the waiting messages in timestamp order (vt_ready, ties by worker index),
 * conservatively: the earliest waits until no other worker can still send one stamped before it
 * (every other live worker has a message waiting, is held, or has lb beyond it). Its arrival on
 * this server's downlink is the server's virtual now. Server 0 applies nothing while a snapshot
 * is assembled or evaluated (evaluation takes no virtual time and skips nothing), server k > 0
 * nothing while it holds a snapshot not yet asked for. */
static void srvsim_dispatch(server_ctx *c) {
    srv *sv = &c->sv;
    const vclock *vc = &sv->t->vc;
    for (;;) {
        if (sv->k == 0 ? c->q.asked || c->q.ready || atomic_load(&c->ev.running) : c->snap_hold) return;
        int i = -1;
        for (int j = 0; j < sv->p; j++)
            if (sv->queued[j] && (i < 0 || sv->in[j].vt_ready < sv->in[i].vt_ready)) i = j;
        if (i < 0) return;
        const double tau = sv->in[i].vt_ready;
        for (int j = 0; j < sv->p; j++)
            if (!sv->queued[j] && !sv->left[j] && (sv->lb[j] < tau || (sv->lb[j] == tau && j < i))) return;
        sv->queued[i] = 0;
        const double nb = sv->in[i].kind == MSG_EXCHANGE ? srvsim_shard_bytes(vc, sv->k, sv->S) : 0.0;
        sv->now = sv->arr[i] = sim_nic_in(&sv->down, &vc->net, i, sv->p + sv->k, sv->in[i].vt_send, nb);
        sv->lb[i] = INFINITY; /* until its reply */
        const long before = srv_iteration(sv);
        server_handle(c, i);
        if (sv->k > 0) srvsim_crossed(c, before);
    }
}

static int server_loop(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    int *done = xmalloc((size_t)SET_CAP(sv->p, sv->S) * sizeof(int));
    comm_barrier();
    c->t_start = c->t_start < 0 ? wall_time() + c->t_start : wall_time(); /* resumed: the time so far */
    for (int i = 0; i < sv->p; i++) sv->heard[i] = wall_time();
    c->checked = wall_time();
    c->in_loop = 1;
    for (;;) {
        check_silence(c);
        keepalive(c, 0);
        /* checkpoints: a signal here, a void round, the round itself */
        ckpt_poll_test(srv_iteration(sv), t->rank); /* tests: a signal to a server */
        const int sig = ckpt_signal_pending();
        if (sig && sv->live > 0) srv_pause(sv, sig);
        if (sv->k == 0) check_abandon(c);
        /* an evaluation abandoned before a checkpoint (that checkpoint's, after a resume; or one
         * that could not be written because every worker left meanwhile): evaluated now */
        if (sv->k == 0 && c->q.abandoned && !stopping(c) && !atomic_load(&c->ev.running)) eval_start(c, c->q.eval_label, c->q.eval_time);
        if (sv->pausing) {
            int held = 0;
            for (int i = 0; i < sv->p; i++) held += sv->held[i];
            if (held && held + sv->n_paused == sv->live) void_round(c);
        }
        if (sv->k == 0 && sv->pausing && sv->live > 0 && sv->n_paused == sv->live && !c->q.asked) {
            /* A periodic or SIGUSR1 checkpoint waits for the evaluations; a stop request (also one
             * arriving meanwhile) abandons the running one and saves it with what waits. */
            eval_collect(c, 1);
            snapshot_launch(c);
            eval_collect(c, 1);
            int st = server0_round(c);
            if (st) { c->stopped = 1, c->status = st; break; }
        }
        if (sv->k > 0 && c->go >= 0 && sv->n_paused == sv->live) {
            int st = server_part(c);
            if (st) { c->stopped = 1, c->status = st; break; }
        }
        if (sv->k == 0) {
            eval_collect(c, 0);
            snapshot_launch(c);
            if (sv->live == 0 && !c->q.asked && !c->q.ready && !atomic_load(&c->ev.running)) break;
        } else if (c->quit && sv->live == 0) break;
        if (sv->sim) {
            srvsim_dispatch(c);
            if (sv->k > 0) srvsim_answer(c);
        }
        /* Wake at least every 50 ms for a signal, every 10 ms for a finishing evaluation. */
        int nd = comm_set_wait_some(sv->set, done, sv->k == 0 && atomic_load(&c->ev.running) ? 0.01 : 0.05);
        for (int j = 0; j < nd; j++) {
            int idx = done[j];
            if (sv->k == 0) {
                if (snapshot_completion(c, idx)) continue;
            } else if (idx == c->r_req) {
                long label = c->sreq_in.version;
                if (label == SNAP_QUIT) c->quit = 1;
                else if (label == SNAP_CKPT) {
                    c->go = (long)c->sreq_in.steps, c->go_ok = c->sreq_in.stop;
                    srv_pause(sv, CKPT_SIG_SAVE);
                    comm_set_start(sv->set, c->r_req);
                } else if (sv->sim) { /* answered at the same point of the request order (srvsim_answer) */
                    c->want_label = label, c->want_final = c->sreq_in.stop;
                    comm_set_start(sv->set, c->r_req);
                    srvsim_answer(c);
                } else {
                    comm_set_wait_or_abort(sv->set, c->s_snap, "the first parameter server (snapshot)");
                    memcpy(c->snapbuf, sv->center, sv->n * sizeof(float));
                    comm_set_start(sv->set, c->s_snap);
                    comm_set_start(sv->set, c->r_req);
                }
                continue;
            }
            int i = on_completion(c, idx);
            if (i >= 0 && sv->sim) sv->queued[i] = 1; /* applied in timestamp order (srvsim_dispatch) */
            else if (i >= 0) server_handle(c, i);
        }
    }
    c->in_loop = 0;
    free(done);
    return 0;
}

/* Server 0 at the end: the final evaluation of the center, the arrays, the summary; then tell
 * the other servers to quit. */
static void server0_finish(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const experiment *e = t->e;
    double train_s = srv_axis(c);
    long it = srv_iteration(sv);
    t->step = it;
    if (c->stopped) goto summary; /* after the checkpoint that stopped the run: the other servers have left */
    log_row(c);
    /* the final center, unless that iteration was just evaluated (e.g. a stop at step 0) */
    c->final_snap = 1;
    if (it != c->last_eval) snapshot_begin(c, it);
    c->q.time_s = train_s;
    int *done = xmalloc((size_t)SET_CAP(sv->p, sv->S) * sizeof(int));
    const double f0 = wall_time();
    while (c->q.asked) {
        keepalive(c, 0);
        if (wall_time() - f0 > e->comm_timeout_s) comm_timeout_abort("a parameter server (the final snapshot)");
        int nd = comm_set_wait_some(sv->set, done, 0.05);
        for (int j = 0; j < nd; j++) snapshot_completion(c, done[j]);
    }
    free(done);
    snapshot_launch(c);
    eval_collect(c, 1);
    for (int k = 1; k < sv->S; k++) {
        comm_set_wait_or_abort(sv->set, c->s_req[k], "a parameter server (quit)");
        c->sreq_out[k] = (msg_hdr){.version = SNAP_QUIT};
        comm_set_start(sv->set, c->s_req[k]);
        comm_set_wait_or_abort(sv->set, c->s_req[k], "a parameter server (quit)");
    }
summary:
    keepalive(c, 1); /* the goodbye: the workers that have left go to the end-of-run agreement */
    const server_rules *R = sv->rules;
    int why = c->why, rule_why = -1;
    if (R->finish && R->finish(sv, it, &rule_why) != 0) c->status = EXIT_RUNTIME;
    if (sv->diverged) why = STOPPED_NONFINITE, c->status = EXIT_RUNTIME;
    else if (rule_why >= 0) why = rule_why, c->status = EXIT_RUNTIME;
    train_log_summary(t, c->status, why, train_s, 0);
    if (c->q.skipped) printf("%ld evaluation(s) skipped: evaluating the center took longer than eval.every iterations\n", c->q.skipped);
    if (R->say) R->say(sv);
}

int server_serve(trainer *t) {
    server_ctx c = {0};
    c.last_eval = -1;
    server_setup(t, &c);
    int st = t->resume_label >= 0 ? server_read(&c, t->resume_label) : 0;
    if ((st = comm_max_int(st))) { /* every rank: a checkpoint could not be read */
        server_free(&c);
        return st;
    }
    if (c.sv.k == 0 && t->e->eval.at_start && t->resume_label < 0) {
        double ev0 = wall_time();
        c.ev.at_start = 1; /* a stop signal abandons it (the workers wait at the start meanwhile) */
        eval_result r = train_evaluate_all(t, t->net, eval_between, &c.ev);
        c.ev.at_start = 0;
        if (r.count == 0) { /* the initial model, saved with the checkpoint and evaluated after the resume */
            c.q.abandoned = 1, c.q.eval_label = 0, c.q.eval_time = 0.0;
            printf("note: evaluation at the start abandoned for the checkpoint (stop request); it is done again after --resume\n");
        } else {
            if (train_log_eval(t, 0, 0.0, &r, wall_time() - ev0, 0) != 0) c.status = EXIT_RUNTIME;
            c.last_eval = 0;
        }
    }
    c.last_it = srv_iteration(&c.sv); /* 0, or where the checkpoint stood */
    server_loop(&c);
    if (c.sv.k == 0) server0_finish(&c);
    server_free(&c);
    return c.status; /* main's end-of-run agreement (comm_finish) takes the worst over the ranks */
}
