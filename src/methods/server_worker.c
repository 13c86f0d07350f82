/* server_worker.c — the workers' side of the methods with parameter-server ranks (server.h):
 * the method's `run` (server_run: a server rank's loop is server.c's; a worker's is here — begin,
 * step until a reply ends it, end), its exchange with every server (header and shard out, the
 * servers' replies in), its part in a checkpoint pause (the protocol: server_pause.c), and its
 * goodbye. Its cadence and stop decisions come from the servers' replies (docs/architecture.md,
 * "The loop and its cadence"). */
#define _GNU_SOURCE
#include "server_state.h"
#include "server_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "methods/method.h"
#include "optim/sgd.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "train/ckpt_rank.h"
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
    pause_proto pause;       /* the pause protocol (server_pause.h) */
    trainer *t;              /* for the protocol's write callback */
    /* how this worker's run ends */
    int interrupted;         /* a checkpoint stopped the run: the servers stop too, nobody to tell */
    int failed;              /* inject.fail_rank: leaves with MSG_FAILED */
    int gone;                /* had left before the checkpoint this run resumed from */
    int resend;              /* resumed after a voided exchange (pending): send it before the first step */
    double up, down;         /* sim mode: when this worker's uplink / downlink is next free (server_sim.h) */
} wstate;

static int worker_write(void *ctx, long label);

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
    w->set = comm_set_new(4 * S + 1);
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
    w->t = t;
    pause_init(&w->pause, t, worker_write, w);
}

static void worker_free(wstate *w) {
    comm_set_free(w->set);
    pause_free(&w->pause);
    free(w->lo), free(w->shdr), free(w->rhdr), free(w->reply);
    free(w->s_hdr), free(w->s_data), free(w->r_hdr), free(w->r_data);
}

/* Sim mode: the replies arrive on this worker's downlink in the order they left the servers
 * (vt_send, ties by server); the clock moves to the last arrival. comm = that − the ready time;
 * wait = the longest a server held the request (reply leaving − request arriving: a round that
 * waits for others, or a busy server uplink). */
static void worker_sim_replies(trainer *t, wstate *w) {
    vclock *vc = &t->vc;
    const double ready = vc->now;
    double wait = 0.0, now = ready;
    char done[64] = {0};
    for (int n = 0; n < w->S && n < 64; n++) {
        int k = -1;
        for (int j = 0; j < w->S && j < 64; j++)
            if (!done[j] && (k < 0 || w->rhdr[j].vt_send < w->rhdr[k].vt_send)) k = j;
        done[k] = 1;
        now = sim_nic_in(&w->down, &vc->net, t->p + k, t->worker, w->rhdr[k].vt_send, srvsim_shard_bytes(vc, k, w->S));
        if (w->rhdr[k].vt_send - w->rhdr[k].vt_arr > wait) wait = w->rhdr[k].vt_send - w->rhdr[k].vt_arr;
    }
    vc->now = now;
    vc->v.comm_s += now - ready;
    vc->v.wait_s += wait;
}

/* Send kind (MSG_*) to every server; for MSG_EXCHANGE also the payload and wait for the
 * replies. Returns the strongest stop code of the replies (STOP_DONE only if every server says
 * so). */
static int worker_exchange(trainer *t, wstate *w, int kind, long steps) {
    const phase_times *ph = train_axis_times(t);
    vclock *vc = &t->vc;
    double t0 = wall_time();
    for (int k = 0; k < w->S; k++) {
        msg_hdr *h = &w->shdr[k];
        const int sig = ckpt_signal_pending();
        *h = (msg_hdr){.kind = kind, .version = w->rhdr[k].version, .steps = steps,
                       .sig = sig > w->relay ? sig : w->relay};
        if (vc->on) /* sim mode: stamped with this worker's clock; the shards leave its uplink in turn */
            h->vt_ready = vc->now,
            h->vt_send = sim_nic_out(&w->up, &vc->net, vc->now, kind == MSG_EXCHANGE ? srvsim_shard_bytes(vc, k, w->S) : 0.0);
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
    if (vc->on && kind == MSG_EXCHANGE) worker_sim_replies(t, w);
    double t2 = wall_time();
    t->times.comm_s += t2 - t0;
    t->times.wait_s += t2 - t1;
    return kind == MSG_EXCHANGE ? stop : STOP_DONE;
}

/* This worker's own state in checkpoint file f (a ckpt_part_fn; ctx: the wstate), after the
 * common part, written or read back (ckpt_writing) in one order. */
static int worker_state(void *ctx, ckpt_file *f) {
    wstate *w = ctx;
    trainer *t = w->t;
    const size_t n = model_n_params(t->net), nbn = model_n_bn(t->net);
    int64_t ver[64] = {0}, misc[2] = {w->pending, w->n_loss};
    for (int k = 0; k < w->S && k < 64; k++) ver[k] = w->rhdr[k].version;
    int rc = ckpt_io_f32(f, "params", model_params(t->net), n) || ckpt_io_f32(f, "velocity", t->velocity, n) ||
             ckpt_io_f32(f, "bn", model_bn(t->net), nbn) || ckpt_io_i64(f, "versions", ver, (size_t)w->S) ||
             ckpt_io_i64(f, "pending_nloss", misc, 2) || ckpt_io_f64(f, "loss_sum", &w->loss_sum, 1);
    for (int k = 0; k < w->S && k < 64; k++) w->rhdr[k].version = ver[k];
    w->pending = (int)misc[0], w->n_loss = (int)misc[1];
    return rc;
}

/* The pause protocol's write callback: this worker's file of checkpoint `label`. */
static int worker_write(void *ctx, long label) {
    wstate *w = ctx;
    char err[ERRLEN] = "";
    if (ckpt_write_rank(w->t, label, NULL, worker_state, w, err, sizeof err) == 0) return 0;
    fprintf(stderr, "dsgd-run: rank %d: checkpoint: %s\n", w->t->rank, err);
    return EXIT_RUNTIME;
}

/* Worker: paused after an exchange whose reply said STOP_CKPT*: tell every server, take part in
 * the round (server_pause.c: server 0's go, this worker's file, the verdict). Returns 0 (go on),
 * EXIT_INTERRUPTED (stop: a SIGTERM) or EXIT_RUNTIME (a rank could not write: stop). */
static int worker_pause(trainer *t, wstate *w, long steps) {
    pause_arm(&w->pause);
    worker_exchange(t, w, MSG_PAUSE, steps);
    double t0 = wall_time();
    const int st = pause_part(&w->pause, -1, 0);
    t->times.comm_s += wall_time() - t0;
    w->relay = CKPT_SIG_NONE;
    ckpt_signal_clear_save();
    return st;
}

int srv_worker_gone(const char *dir, long label, int p, int worker, int *gone, char *err, size_t errlen) {
    ckpt_file *f0 = ckpt_open(dir, label, p, err, errlen);
    int64_t *left = xcalloc((size_t)p, sizeof(int64_t));
    const int rc = !f0 || ckpt_get_i64(f0, "left", left, (size_t)p);
    if (rc && f0) snprintf(err, errlen, "%s", ckpt_error(f0));
    ckpt_free(f0);
    *gone = !rc && left[worker];
    free(left);
    return rc ? -1 : 0;
}

/* Resuming: this worker's part of the checkpoint, unless it had left before it (then -1: it
 * stays out). Returns 0, -1 or EXIT_BADINPUT (printed). */
static int worker_load(trainer *t, wstate *w) {
    char err[ERRLEN] = "";
    int gone = 0;
    if (srv_worker_gone(t->ckpt_dir, t->resume_label, t->p, t->worker, &gone, err, sizeof err) == 0 && !gone)
        ckpt_read_rank(t, t->resume_label, NULL, worker_state, w, err, sizeof err);
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

/* One exchange as the end of a step and what its reply asks for: combine (easgd), pause for a
 * checkpoint. 1 when the replies end this worker's run (done, diverged, or a checkpoint that
 * stops it), with the run's status in *o (EXIT_OK: done). */
static int exchange_ends(trainer *t, wstate *w, long steps, step_out *o) {
    const server_rules *R = t->method->rules;
    int stop = worker_exchange(t, w, MSG_EXCHANGE, steps);
    /* STOP_CKPT: the servers applied the exchange, so the worker combines its reply too */
    if (R->worker_reply && (stop == STOP_NO || stop == STOP_CKPT)) R->worker_reply(t, w->reply);
    w->pending = 0;
    if (stop == STOP_CKPT || stop == STOP_CKPT_VOID) {
        w->pending = stop == STOP_CKPT_VOID && R->sends_params; /* easgd: exchange again afterwards */
        const int ps = worker_pause(t, w, steps);
        if (ps) o->status = ps, o->why = STOPPED_CHECKPOINT, w->interrupted = 1;
        stop = ps ? STOP_DONE : STOP_NO;
    }
    if (stop == STOP_DIVERGED) o->status = EXIT_RUNTIME, o->why = STOPPED_NONFINITE;
    return stop != STOP_NO;
}

static int srv_worker_begin(trainer *t) {
    wstate *w = xcalloc(1, sizeof *w); /* this worker rank's state, released by srv_worker_end */
    t->mstate = w;
    worker_setup(t, w);
    int st = 0;
    if (t->resume_label >= 0) {
        st = worker_load(t, w);
        w->gone = st < 0, st = st < 0 ? 0 : st;
        w->resend = w->pending;
    }
    if ((st = comm_max_int(st))) { /* every rank: a checkpoint could not be read */
        worker_free(w), free(w);
        t->mstate = NULL;
    }
    return st;
}

static step_out srv_worker_step(trainer *t, long s, double alpha) {
    wstate *w = t->mstate;
    const server_rules *R = t->method->rules;
    model *net = t->net;
    step_out o = {.took = METHOD_STEP_END, .status = EXIT_OK};
    const int resend = w->resend;
    w->resend = 0;
    if (w->gone || (resend && exchange_ends(t, w, s, &o)) || (!R->until_stop && s >= t->e->iterations)) return o;
    if (inject_failed(t->e, t->worker, s)) {
        fprintf(stderr, "dsgd-run: rank %d: injected failure after %ld steps (inject.fail_step); the other workers go on\n", t->rank, s);
        w->failed = 1;
        return o;
    }
    const double t0 = wall_time();
    /* backup: the data of the step whose parameters the worker holds (server 0's version) */
    const long data_step = R->until_stop ? (long)w->rhdr[0].version : s;
    const double real0 = t->times.data_s + t->times.compute_s;
    if (train_compute(t, data_step, s, &o.loss)) return o.status = EXIT_RUNTIME, o.why = STOPPED_DATA, o;
    if (t->vc.on) /* sim mode: the step's modelled compute and injected delay (vclock.h) */
        vclock_compute(&t->vc, s, t->times.data_s + t->times.compute_s - real0, inject_draw_s(&t->inj, s));
    w->loss_sum += o.loss;
    w->n_loss++;
    int finite = isfinite(o.loss);
    if (finite && R->local_update) {
        const double u0 = wall_time();
        finite = sgd_update(model_params(net), model_grads(net), t->velocity, model_n_params(net), (float)alpha, (float)t->e->momentum,
                            (float)t->e->weight_decay, t->e->nesterov);
        t->times.update_s += wall_time() - u0;
    }
    t->step = s + 1;
    if (!finite) { /* srv_worker_end tells the servers (MSG_DIVERGED), which stop every rank */
        if (isfinite(o.loss)) o.loss = NAN; /* the update diverged: the loop says so as for the loss */
        o.status = EXIT_RUNTIME, o.why = STOPPED_NONFINITE;
    } else if (!((R->until_stop || !R->exchange_after || R->exchange_after(t, s)) && exchange_ends(t, w, s + 1, &o)))
        o.took = METHOD_STEP_TOOK;
    if (t->vc.on) vclock_step_end(&t->vc, 0.0);
    t->times.step_s += wall_time() - t0;
    return o;
}

static int srv_worker_end(trainer *t, int status) {
    wstate *w = t->mstate;
    /* leave; MSG_DIVERGED (the run's status is not EXIT_OK: this worker's loss, or a reply, said
     * the run diverged) makes server 0 record the stop in the run file. After a checkpoint that
     * stops the run, the servers stop too: nobody to tell. A worker that had left before the
     * checkpoint it resumed from has left. */
    if (!w->interrupted && !w->gone) {
        worker_exchange(t, w, status != EXIT_OK ? MSG_DIVERGED : w->failed ? MSG_FAILED : MSG_DONE, t->step);
        worker_bye(t, w);
    }
    worker_free(w), free(w);
    t->mstate = NULL;
    return status;
}

/* A worker rank's whole run: begin (its requests; its checkpoint when resuming); the world starts
 * together; step until a reply ends the run; end. A non-finite loss of its own is said here (the
 * servers then stop every rank). */
static int worker_run(trainer *t) {
    int status = srv_worker_begin(t);
    if (status != EXIT_OK) return status;
    comm_barrier(); /* the whole world starts together */
    for (long s = t->step;; s++) {
        const double alpha = alpha_at(t->e, s);
        ckpt_poll_test(s + 1, t->rank); /* tests: a signal during step s + 1 */
        const step_out o = srv_worker_step(t, s, alpha);
        if (o.took != METHOD_STEP_END) continue;
        if (o.why == STOPPED_DATA) { /* the servers would wait comm_timeout_s for this worker */
            fprintf(stderr, "dsgd-run: rank %d: data loading failed: %s; stopping every rank\n", t->rank, loader_error(&t->train_loader));
            comm_abort(EXIT_RUNTIME);
        }
        if (o.status != EXIT_OK && !isfinite(o.loss)) {
            int why;
            train_say_nonfinite_loss(t, &why, 1, s + 1, alpha, "stopping every rank");
        }
        status = o.status;
        break;
    }
    return srv_worker_end(t, status);
}

int server_run(trainer *t) { return t->worker < 0 ? server_serve(t) : worker_run(t); }
