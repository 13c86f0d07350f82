/* server_worker.c — the workers' side of the methods with parameter-server ranks (server.h):
 * the begin, step and end a worker rank runs in train_run (method.h, meets = METHOD_MEETS_SERVERS),
 * its exchange with every server (header and shard out, the servers' replies in), its part in a
 * checkpoint pause, and its goodbye. Its cadence and stop decisions come from the servers'
 * replies (docs/architecture.md, "The loop and its cadence"). */
#define _GNU_SOURCE
#include "server_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "methods/method.h"
#include "optim/sgd.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "util/util.h"
typedef struct {
    int S;
    size_t *lo;              /* (S+1) shard bounds */
    msg_hdr *shdr, *rhdr;    /* (S) */
    float *reply;            /* (n) easgd: the centers' shards; else NULL (replies go into θ) */
    comm_set *set;
    int *s_hdr, *s_data, s_bn, *r_hdr, *r_data;
    double loss_sum;
    int n_loss;
    /* checkpoints */
    int relay;               /* strongest CKPT_SIG_* seen in a reply: passed on to every server */
    int pending;             /* easgd: the last exchange was voided (STOP_CKPT_VOID): send it again */
    int64_t go[2], ack, fin[2]; /* server 0's go {label, ok}, this worker's ack {status}, fin {status, stop} */
    int r_go, s_ack, r_fin;
    /* how this worker's run ends */
    int status;              /* EXIT_OK, or EXIT_RUNTIME (diverged) / EXIT_INTERRUPTED (a checkpoint stopped it) */
    int interrupted;         /* a checkpoint stopped the run: the servers stop too, nobody to tell */
    int failed;              /* inject.fail_rank: leaves with MSG_FAILED */
    int gone;                /* had left before the checkpoint this run resumed from */
    int resend;              /* resumed after a voided exchange (pending): send it before the first step */
} wstate;

static void worker_setup(trainer *t, wstate *w) {
    const server_rules *R = t->method->rules;
    model *net = t->net;
    const size_t n = model_n_params(net), nbn = model_n_bn(net);
    const int S = t->e->servers;
    w->S = S;
    w->lo = xmalloc((size_t)(S + 1) * sizeof *w->lo);
    for (int k = 0; k <= S; k++) w->lo[k] = shard_lo(n, k, S);
    w->shdr = xcalloc((size_t)S, sizeof *w->shdr);
    w->rhdr = xcalloc((size_t)S, sizeof *w->rhdr);
    w->reply = R->worker_reply ? xmalloc(n * sizeof(float)) : NULL;
    w->set = comm_set_new(5 * S + 4);
    w->s_hdr = xmalloc((size_t)S * sizeof(int)), w->s_data = xmalloc((size_t)S * sizeof(int));
    w->r_hdr = xmalloc((size_t)S * sizeof(int)), w->r_data = xmalloc((size_t)S * sizeof(int));
    float *payload = R->sends_params ? model_params(net) : model_grads(net);
    float *into = w->reply ? w->reply : model_params(net);
    w->s_bn = -1;
    for (int k = 0; k < S; k++) {
        const int srv_rank = t->p + k;
        const size_t lo = w->lo[k], len = w->lo[k + 1] - lo;
        w->s_hdr[k] = comm_set_add(w->set, COMM_SEND, &w->shdr[k], sizeof(msg_hdr), srv_rank, TAG_HDR);
        w->s_data[k] = comm_set_add(w->set, COMM_SEND, payload + lo, len * sizeof(float), srv_rank, TAG_DATA);
        w->r_hdr[k] = comm_set_add(w->set, COMM_RECV, &w->rhdr[k], sizeof(msg_hdr), srv_rank, TAG_RHDR);
        w->r_data[k] = comm_set_add(w->set, COMM_RECV, into + lo, len * sizeof(float), srv_rank, TAG_RDATA);
    }
    if (nbn) w->s_bn = comm_set_add(w->set, COMM_SEND, model_bn(net), nbn * sizeof(float), t->p, TAG_BN);
    w->r_go = comm_set_add(w->set, COMM_RECV, w->go, sizeof w->go, t->p, TAG_CKGO);
    w->s_ack = comm_set_add(w->set, COMM_SEND, &w->ack, sizeof w->ack, t->p, TAG_CKACK);
    w->r_fin = comm_set_add(w->set, COMM_RECV, w->fin, sizeof w->fin, t->p, TAG_CKFIN);
}

static void worker_free(wstate *w) {
    comm_set_free(w->set);
    free(w->lo), free(w->shdr), free(w->rhdr), free(w->reply);
    free(w->s_hdr), free(w->s_data), free(w->r_hdr), free(w->r_data);
}

/* Send kind (MSG_*) to every server; for MSG_EXCHANGE also the payload and wait for the
 * replies. Returns the strongest stop code of the replies (STOP_DONE only if every server says
 * so). */
static int worker_exchange(trainer *t, wstate *w, int kind, long steps) {
    const phase_times *ph = &t->times;
    double t0 = wall_time();
    for (int k = 0; k < w->S; k++) {
        msg_hdr *h = &w->shdr[k];
        const int sig = ckpt_signal_pending();
        *h = (msg_hdr){.kind = kind, .version = w->rhdr[k].version, .steps = steps,
                       .sig = sig > w->relay ? sig : w->relay};
        if (k == 0) {
            h->n_loss = w->n_loss, h->loss_sum = w->loss_sum;
            h->step_s = ph->step_s, h->compute_s = ph->compute_s, h->comm_s = ph->comm_s, h->wait_s = ph->wait_s;
        }
        if (kind == MSG_EXCHANGE) { /* the server answers once header, payload and BN have all arrived */
            comm_set_start(w->set, w->r_hdr[k]);
            comm_set_start(w->set, w->r_data[k]);
            comm_set_start(w->set, w->s_data[k]);
            if (k == 0 && w->s_bn >= 0) comm_set_start(w->set, w->s_bn);
        }
        comm_set_start(w->set, w->s_hdr[k]);
    }
    w->loss_sum = 0.0, w->n_loss = 0;
    double t1 = wall_time();
    int stop = STOP_DONE;
    for (int k = 0; k < w->S; k++) {
        comm_set_wait_or_abort(w->set, w->s_hdr[k], "a parameter server (sending)");
        if (kind != MSG_EXCHANGE) continue;
        comm_set_wait_or_abort(w->set, w->s_data[k], "a parameter server (sending)");
        comm_set_wait_or_abort(w->set, w->r_hdr[k], "a parameter server's reply");
        comm_set_wait_or_abort(w->set, w->r_data[k], "a parameter server's reply");
        int s = w->rhdr[k].stop;
        if (w->rhdr[k].sig > w->relay) w->relay = w->rhdr[k].sig;
        /* the strongest: diverged, then pause (voided), pause, go on, done (only if all say so) */
        static const int rank_of[] = {[STOP_DONE] = 0, [STOP_NO] = 1, [STOP_CKPT] = 2, [STOP_CKPT_VOID] = 3, [STOP_DIVERGED] = 4};
        if (k == 0 || rank_of[s] > rank_of[stop]) stop = s;
    }
    if (kind == MSG_EXCHANGE && w->s_bn >= 0) comm_set_wait_or_abort(w->set, w->s_bn, "a parameter server (sending)");
    double t2 = wall_time();
    t->times.comm_s += t2 - t0;
    t->times.wait_s += t2 - t1;
    return kind == MSG_EXCHANGE ? stop : STOP_DONE;
}

/* This worker's part of a checkpoint in f, written or read back (ckpt_writing) in one order. */
static int worker_state(trainer *t, wstate *w, ckpt_file *f) {
    const size_t n = model_n_params(t->net), nbn = model_n_bn(t->net);
    int64_t ver[64] = {0}, misc[2] = {w->pending, w->n_loss};
    for (int k = 0; k < w->S && k < 64; k++) ver[k] = w->rhdr[k].version;
    int rc = train_ckpt_common(t, f, NULL) ||
             ckpt_io_f32(f, "params", model_params(t->net), n) || ckpt_io_f32(f, "velocity", t->velocity, n) ||
             ckpt_io_f32(f, "bn", model_bn(t->net), nbn) || ckpt_io_i64(f, "versions", ver, (size_t)w->S) ||
             ckpt_io_i64(f, "pending_nloss", misc, 2) || ckpt_io_f64(f, "loss_sum", &w->loss_sum, 1);
    for (int k = 0; k < w->S && k < 64; k++) w->rhdr[k].version = ver[k];
    w->pending = (int)misc[0], w->n_loss = (int)misc[1];
    return rc;
}

/* Worker: paused after an exchange whose reply said STOP_CKPT*: tell every server, wait for
 * server 0's go, write this worker's part of the checkpoint, report, and learn whether the run
 * goes on. Returns 0 (go on), EXIT_INTERRUPTED (stop: a SIGTERM) or EXIT_RUNTIME (a rank could
 * not write: stop). */
static int worker_pause(trainer *t, wstate *w, long steps) {
    comm_set_start(w->set, w->r_go);
    comm_set_start(w->set, w->r_fin);
    worker_exchange(t, w, MSG_PAUSE, steps);
    double t0 = wall_time();
    comm_set_wait_or_abort(w->set, w->r_go, "the first parameter server (checkpoint)");
    char err[ERRLEN] = "";
    if (w->go[1]) {
        ckpt_file *f = ckpt_create(t->ckpt_dir, (long)w->go[0], t->rank, err, sizeof err);
        if (f && (worker_state(t, w, f) || ckpt_close(f))) snprintf(err, sizeof err, "%s", ckpt_error(f));
        ckpt_free(f);
        if (err[0]) fprintf(stderr, "dsgd-run: rank %d: checkpoint: %s\n", t->rank, err);
    }
    w->ack = err[0] ? EXIT_RUNTIME : 0;
    comm_set_start(w->set, w->s_ack);
    comm_set_wait_or_abort(w->set, w->s_ack, "the first parameter server (checkpoint)");
    comm_set_wait_or_abort(w->set, w->r_fin, "the first parameter server (checkpoint)");
    t->times.comm_s += wall_time() - t0;
    w->relay = CKPT_SIG_NONE;
    ckpt_signal_clear_save();
    return w->fin[0] ? EXIT_RUNTIME : w->fin[1] ? EXIT_INTERRUPTED : 0;
}

static int worker_load(trainer *t, wstate *w) {
    char err[ERRLEN] = "";
    /* A worker that had left (done or failed) before the checkpoint stays out. */
    ckpt_file *f0 = ckpt_open(t->ckpt_dir, t->resume_label, t->p, err, sizeof err);
    int64_t *left = xcalloc((size_t)t->p, sizeof(int64_t));
    if (f0 && ckpt_get_i64(f0, "left", left, (size_t)t->p)) snprintf(err, sizeof err, "%s", ckpt_error(f0));
    ckpt_free(f0);
    int gone = !err[0] && left[t->worker];
    free(left);
    if (!err[0] && !gone) {
        ckpt_file *f = ckpt_open(t->ckpt_dir, t->resume_label, t->rank, err, sizeof err);
        if (f && worker_state(t, w, f)) snprintf(err, sizeof err, "%s", ckpt_error(f));
        ckpt_free(f);
    }
    if (err[0]) fprintf(stderr, "dsgd-run: rank %d: resuming: %s\n", t->rank, err);
    return err[0] ? EXIT_BADINPUT : gone ? -1 : 0;
}

/* Worker, after it has left: wait for server 0's goodbye (the run is over) before the end-of-run
 * agreement. Server 0 sends a keep-alive header at least every KEEPALIVE_S meanwhile, so the
 * wait is bounded by comm_timeout_s however long the other workers still train: silence means
 * server 0 has stopped. */
static void worker_bye(trainer *t, wstate *w) {
    for (;;) {
        comm_set_start(w->set, w->r_hdr[0]);
        comm_set_wait_or_abort(w->set, w->r_hdr[0], "the first parameter server (waiting for the end of the run)");
        if (w->rhdr[0].stop == STOP_DONE) return;
    }
}

static wstate W; /* this worker rank's state (one trainer per process, as gossip's) */

/* One exchange as the end of a step and what its reply asks for: combine (easgd), pause for a
 * checkpoint. 1 when the replies end this worker's run (done, diverged, or a checkpoint that
 * stops it), its status in w->status. */
static int exchange_ends(trainer *t, wstate *w, long steps) {
    const server_rules *R = t->method->rules;
    int stop = worker_exchange(t, w, MSG_EXCHANGE, steps);
    /* STOP_CKPT: the servers applied the exchange, so the worker combines its reply too */
    if (R->worker_reply && (stop == STOP_NO || stop == STOP_CKPT)) R->worker_reply(t, w->reply);
    w->pending = 0;
    if (stop == STOP_CKPT || stop == STOP_CKPT_VOID) {
        w->pending = stop == STOP_CKPT_VOID && R->sends_params; /* easgd: exchange again afterwards */
        const int ps = worker_pause(t, w, steps);
        if (ps) w->status = ps, w->interrupted = 1;
        stop = ps ? STOP_DONE : STOP_NO;
    }
    if (stop == STOP_DIVERGED) w->status = EXIT_RUNTIME;
    return stop != STOP_NO;
}

int srv_worker_begin(trainer *t) {
    wstate *w = &W;
    *w = (wstate){0};
    worker_setup(t, w);
    int st = 0;
    if (t->resume_label >= 0) {
        st = worker_load(t, w);
        w->gone = st < 0, st = st < 0 ? 0 : st;
        w->resend = w->pending;
    }
    if ((st = comm_max_int(st))) worker_free(w); /* every rank: a checkpoint could not be read */
    return st;
}

step_out srv_worker_step(trainer *t, long s, double alpha) {
    wstate *w = &W;
    const server_rules *R = t->method->rules;
    model *net = t->net;
    const int resend = w->resend;
    w->resend = 0;
    if (w->gone || (resend && exchange_ends(t, w, s)) || (!R->until_stop && s >= t->e->iterations)) return (step_out){.took = METHOD_STEP_END};
    if (inject_failed(t->e, t->worker, s)) {
        fprintf(stderr, "dsgd-run: rank %d: injected failure after %ld steps (inject.fail_step); the other workers go on\n", t->rank, s);
        w->failed = 1;
        return (step_out){.took = METHOD_STEP_END};
    }
    const double t0 = wall_time();
    /* backup: the data of the step whose parameters the worker holds (server 0's version) */
    const long data_step = R->until_stop ? (long)w->rhdr[0].version : s;
    double loss;
    if (train_compute(t, data_step, s, &loss)) return (step_out){.status = EXIT_RUNTIME, .why = STOPPED_DATA};
    w->loss_sum += loss;
    w->n_loss++;
    int finite = isfinite(loss);
    if (finite && R->local_update) {
        const double u0 = wall_time();
        finite = sgd_update(model_params(net), model_grads(net), t->velocity, model_n_params(net), (float)alpha, (float)t->e->momentum,
                            (float)t->e->weight_decay, t->e->nesterov);
        t->times.update_s += wall_time() - u0;
    }
    t->step = s + 1;
    int end = 0;
    if (!finite) { /* srv_worker_end tells the servers (MSG_DIVERGED), which stop every rank */
        int why = STOPPED_WRITE;
        train_say_nonfinite_loss(t, &why, 1, s + 1, alpha, "stopping every rank");
        w->status = EXIT_RUNTIME, end = 1;
    } else if (R->until_stop || !R->exchange_after || R->exchange_after(t, s)) end = exchange_ends(t, w, s + 1);
    t->times.step_s += wall_time() - t0;
    return (step_out){.took = end ? METHOD_STEP_END : METHOD_STEP_TOOK, .loss = loss};
}

int srv_worker_end(trainer *t, int status) {
    (void)status; /* train_run decides nothing for these workers: the servers' replies did */
    wstate *w = &W;
    /* leave; MSG_DIVERGED makes server 0 record the stop in the run file. After a checkpoint
     * that stops the run, the servers stop too: nobody to tell. A worker that had left before
     * the checkpoint it resumed from has left. */
    if (!w->interrupted && !w->gone) {
        worker_exchange(t, w, w->status != EXIT_OK ? MSG_DIVERGED : w->failed ? MSG_FAILED : MSG_DONE, t->step);
        worker_bye(t, w);
    }
    worker_free(w);
    return w->status;
}

/* method_ops.run: a server rank runs the server loop; a worker steps until the servers' reply
 * ends its run (they keep the cadence), then leaves. */
int srv_run(trainer *t) {
    if (t->worker < 0) return server_serve(t);
    int st = srv_worker_begin(t);
    if (st != EXIT_OK) return st;
    comm_barrier(); /* the whole world starts together (server_serve's twin) */
    for (long s = t->step;; s++) {
        ckpt_poll_test(s + 1, t->rank); /* tests: a signal during step s + 1 */
        const step_out o = srv_worker_step(t, s, alpha_at(t->e, s));
        if (o.status != EXIT_OK && o.why == STOPPED_DATA) {
            fprintf(stderr, "dsgd-run: rank %d: data loading failed: %s; stopping every rank\n", t->rank, loader_error(&t->train_loader));
            comm_abort(EXIT_RUNTIME);
        }
        if (o.took == METHOD_STEP_END) break;
        t->step = s + 1;
    }
    return srv_worker_end(t, EXIT_OK);
}
