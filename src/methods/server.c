/* server.c — the runtime of the methods with parameter-server ranks (see server.h): the worker
 * loop, the server loop, snapshots of the center for evaluation, and logging on server 0.
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
#include "methods/server.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "methods/method.h"
#include "optim/sgd.h"
#include "util/util.h"

enum {
    TAG_HDR = 100, TAG_DATA, TAG_BN,      /* worker → server */
    TAG_RHDR = 110, TAG_RDATA,            /* server → worker */
    TAG_SNAPREQ = 120, TAG_SNAPHDR, TAG_SNAP /* server 0 ↔ server k */
};
#define SNAP_FINAL (-1L)
#define SNAP_QUIT (-2L)
#define HIST_BINS_PER_WORKER 4

static size_t shard_lo(size_t n, int k, int S) { return (size_t)((unsigned long long)n * (unsigned)k / (unsigned)S); }

/* ---------------------------------------------------------------------------------------- */
/* Worker                                                                                   */

typedef struct {
    int S;
    size_t *lo;              /* (S+1) shard bounds */
    msg_hdr *shdr, *rhdr;    /* (S) */
    float *reply;            /* (n) easgd: the centers' shards; else NULL (replies go into θ) */
    comm_set *set;
    int *s_hdr, *s_data, s_bn, *r_hdr, *r_data;
    double loss_sum;
    int n_loss;
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
    w->set = comm_set_new(5 * S + 1);
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
}

static void worker_free(wstate *w) {
    comm_set_free(w->set);
    free(w->lo), free(w->shdr), free(w->rhdr), free(w->reply);
    free(w->s_hdr), free(w->s_data), free(w->r_hdr), free(w->r_data);
}

static void wait_or_die(comm_set *set, int i, double timeout, const char *what) {
    if (comm_set_wait(set, i, timeout) != 0) comm_timeout_abort(what);
}

/* Send kind (MSG_*) to every server; for MSG_EXCHANGE also the payload and wait for the
 * replies. Returns the strongest stop code of the replies (STOP_DONE only if every server says
 * so). */
static int worker_exchange(trainer *t, wstate *w, int kind, long steps) {
    const double timeout = t->e->comm_timeout_s;
    const phase_times *ph = &t->times;
    double t0 = wall_time();
    for (int k = 0; k < w->S; k++) {
        msg_hdr *h = &w->shdr[k];
        *h = (msg_hdr){.kind = kind, .worker = t->worker, .version = w->rhdr[k].version, .steps = steps};
        if (k == 0) {
            h->n_loss = w->n_loss, h->loss_sum = w->loss_sum;
            h->step_s = ph->step_s, h->compute_s = ph->compute_s, h->comm_s = ph->comm_s, h->wait_s = ph->wait_s;
        }
        if (kind == MSG_EXCHANGE) {
            comm_set_start(w->set, w->r_hdr[k]);
            comm_set_start(w->set, w->r_data[k]);
        }
        comm_set_start(w->set, w->s_hdr[k]);
        if (kind == MSG_EXCHANGE) {
            comm_set_start(w->set, w->s_data[k]);
            if (k == 0 && w->s_bn >= 0) comm_set_start(w->set, w->s_bn);
        }
    }
    w->loss_sum = 0.0, w->n_loss = 0;
    double t1 = wall_time();
    int stop = STOP_DONE;
    for (int k = 0; k < w->S; k++) {
        wait_or_die(w->set, w->s_hdr[k], timeout, "a parameter server (sending)");
        if (kind != MSG_EXCHANGE) continue;
        wait_or_die(w->set, w->s_data[k], timeout, "a parameter server (sending)");
        wait_or_die(w->set, w->r_hdr[k], timeout, "a parameter server's reply");
        wait_or_die(w->set, w->r_data[k], timeout, "a parameter server's reply");
        int s = w->rhdr[k].stop;
        if (s == STOP_DIVERGED) stop = STOP_DIVERGED;
        else if (s == STOP_NO && stop == STOP_DONE) stop = STOP_NO;
    }
    if (kind == MSG_EXCHANGE && w->s_bn >= 0) wait_or_die(w->set, w->s_bn, timeout, "a parameter server (sending)");
    double t2 = wall_time();
    t->times.comm_s += t2 - t0;
    t->times.wait_s += t2 - t1;
    return kind == MSG_EXCHANGE ? stop : STOP_DONE;
}

static int worker_run(trainer *t) {
    const experiment *e = t->e;
    const server_rules *R = t->method->rules;
    model *net = t->net;
    const size_t n = model_n_params(net);
    wstate w = {0};
    worker_setup(t, &w);
    comm_barrier(); /* the whole world starts together (server 0 evaluated the initial model) */

    int status = EXIT_OK;
    for (long s = 0; R->until_stop || s < e->iterations; s++) {
        if (inject_failed(&t->inj, s)) {
            fprintf(stderr, "dsgd-run: rank %d: injected failure after %ld steps (inject.fail_step); the other workers go on\n",
                    t->rank, s);
            break;
        }
        double t0 = wall_time();
        /* backup: the data of the step whose parameters the worker holds (server 0's version) */
        const long data_step = R->until_stop ? (long)w.rhdr[0].version : s;
        const double loss = train_compute(t, data_step, s);
        w.loss_sum += loss;
        w.n_loss++;
        int finite = isfinite(loss);
        if (finite && R->local_update) {
            double u0 = wall_time();
            finite = sgd_update(model_params(net), model_grads(net), t->velocity, n, (float)alpha_at(e, s), (float)e->momentum,
                                (float)e->weight_decay, e->nesterov);
            t->times.update_s += wall_time() - u0;
        }
        if (!finite) {
            fprintf(stderr, "dsgd-run: rank %d: non-finite loss or gradient at its step %ld: stopping every rank\n", t->rank, s + 1);
            worker_exchange(t, &w, MSG_DIVERGED, s + 1);
            status = EXIT_RUNTIME;
            t->times.step_s += wall_time() - t0;
            t->step = s + 1;
            return worker_free(&w), status;
        }
        int stop = STOP_NO;
        if (R->until_stop || R->exchange_after(t, s)) {
            stop = worker_exchange(t, &w, MSG_EXCHANGE, s + 1);
            if (R->worker_reply && stop == STOP_NO) R->worker_reply(t, w.reply);
        }
        t->times.step_s += wall_time() - t0;
        t->step = s + 1;
        if (stop == STOP_DIVERGED) status = EXIT_RUNTIME;
        if (stop != STOP_NO) break;
    }
    /* leave; MSG_DIVERGED makes server 0 record the stop in the run file */
    worker_exchange(t, &w, status == EXIT_OK ? MSG_DONE : MSG_DIVERGED, t->step);
    worker_free(&w);
    return status;
}

/* ---------------------------------------------------------------------------------------- */
/* Server                                                                                   */

void srv_reply(srv *sv, int i, int stop) {
    /* The previous reply to i completed before i could send this request; collect it before
     * its buffers are written again. */
    wait_or_die(sv->set, sv->s_hdr[i], sv->t->e->comm_timeout_s, "a worker (reply)");
    wait_or_die(sv->set, sv->s_data[i], sv->t->e->comm_timeout_s, "a worker (reply)");
    sv->out[i] = (msg_hdr){.worker = i, .version = sv->version, .stop = stop};
    comm_set_start(sv->set, sv->s_hdr[i]);
    comm_set_start(sv->set, sv->s_data[i]);
    sv->held[i] = 0;
}

void srv_reply_center(srv *sv, int i, int stop) {
    wait_or_die(sv->set, sv->s_data[i], sv->t->e->comm_timeout_s, "a worker (reply)");
    memcpy(sv->rep[i], sv->center, sv->n * sizeof(float));
    srv_reply(sv, i, stop);
}

int srv_stop(const srv *sv) { return sv->diverged ? STOP_DIVERGED : STOP_NO; }

/* Server 0's evaluation thread. */
typedef struct {
    trainer *t;
    pthread_t th;
    atomic_int running, finished;
    int threads;
    eval_result r;
    double seconds;
} evaluator;

static void *eval_main(void *arg) {
    evaluator *ev = arg;
    omp_set_num_threads(ev->threads);
    double t0 = wall_time();
    ev->r = train_evaluate_all(ev->t, ev->t->net);
    ev->seconds = wall_time() - t0;
    atomic_store(&ev->finished, 1);
    return NULL;
}

/* Snapshots on server 0. One is assembled (its shards requested from the other servers) while
 * at most one other is evaluated; a count that passes eval.every while both are busy skips that
 * evaluation (printed) rather than evaluate a later center under an earlier time. */
typedef struct {
    int asked;         /* a snapshot is being assembled (shards requested) */
    int got;           /* shards of it received (server 0's own counts) */
    int ready;         /* an assembled snapshot waits for the evaluator */
    long label;        /* iteration of the snapshot being assembled / ready */
    double time_s;     /* wall clock of it */
    long eval_label;   /* the one the thread evaluates */
    double eval_time;
    long skipped;
} snapq;

typedef struct {
    srv sv;
    /* server 0 */
    evaluator ev;
    snapq q;
    msg_hdr *sreq_out, *shdr_in;      /* (S) snapshot requests / headers from server k */
    float *snap;                      /* (n_params) assembled center (shards of every server) */
    int *s_req, *r_shdr, *r_snap;     /* request indices per server */
    /* server k > 0 */
    msg_hdr sreq_in, shdr_out;
    float *snapbuf;                   /* (n) */
    int r_req, s_shdr, s_snap;
    int quit;
    /* logging (server 0) */
    long next_log, next_eval;
    long last_row;                    /* iteration of the last /train row */
    long last_eval;                   /* iteration of the last evaluation (-1: none) */
    double loss_sum;
    long n_loss;
    msg_hdr *last;                    /* (p) latest header of each worker */
    msg_hdr *prev;                    /* (p) header at the previous /ranks row */
    double *rows;                     /* (4p) */
    double t_start;
    int status, nonfinite;
} server_ctx;

static long srv_iteration(const srv *sv) { return sv->rules->iteration(sv); }

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
    sv->last_steps = xcalloc((size_t)p, sizeof(long));
    sv->r_hdr = xmalloc((size_t)p * sizeof(int)), sv->r_data = xmalloc((size_t)p * sizeof(int));
    sv->r_bn = xmalloc((size_t)p * sizeof(int));
    sv->s_hdr = xmalloc((size_t)p * sizeof(int)), sv->s_data = xmalloc((size_t)p * sizeof(int));
    sv->set = comm_set_new(5 * p + 3 * S + 3);
    for (int i = 0; i < p; i++) {
        sv->gbuf[i] = xmalloc((n ? n : 1) * sizeof(float));
        sv->rep[i] = xmalloc((n ? n : 1) * sizeof(float));
        sv->r_hdr[i] = comm_set_add(sv->set, COMM_RECV, &sv->in[i], sizeof(msg_hdr), i, TAG_HDR);
        sv->r_data[i] = comm_set_add(sv->set, COMM_RECV, sv->gbuf[i], n * sizeof(float), i, TAG_DATA);
        sv->r_bn[i] = -1;
        if (sv->k == 0 && nbn) {
            sv->bnbuf[i] = xmalloc(nbn * sizeof(float));
            sv->r_bn[i] = comm_set_add(sv->set, COMM_RECV, sv->bnbuf[i], nbn * sizeof(float), i, TAG_BN);
        }
        sv->s_hdr[i] = comm_set_add(sv->set, COMM_SEND, &sv->out[i], sizeof(msg_hdr), i, TAG_RHDR);
        sv->s_data[i] = comm_set_add(sv->set, COMM_SEND, sv->rep[i], n * sizeof(float), i, TAG_RDATA);
        comm_set_start(sv->set, sv->r_hdr[i]);
        comm_set_start(sv->set, sv->r_data[i]);
        if (sv->r_bn[i] >= 0) comm_set_start(sv->set, sv->r_bn[i]);
    }
    if (sv->k == 0) {
        sv->hist_bins = HIST_BINS_PER_WORKER * p;
        sv->hist = xcalloc((size_t)sv->hist_bins, sizeof(long long));
        sv->dropped = xcalloc((size_t)e->iterations, sizeof(long long));
        c->snap = xmalloc(N * sizeof(float));
        c->sreq_out = xcalloc((size_t)S, sizeof(msg_hdr)), c->shdr_in = xcalloc((size_t)S, sizeof(msg_hdr));
        c->s_req = xmalloc((size_t)S * sizeof(int)), c->r_shdr = xmalloc((size_t)S * sizeof(int)), c->r_snap = xmalloc((size_t)S * sizeof(int));
        for (int k = 1; k < S; k++) {
            size_t lo = shard_lo(N, k, S), len = shard_lo(N, k + 1, S) - lo;
            c->s_req[k] = comm_set_add(sv->set, COMM_SEND, &c->sreq_out[k], sizeof(msg_hdr), p + k, TAG_SNAPREQ);
            c->r_shdr[k] = comm_set_add(sv->set, COMM_RECV, &c->shdr_in[k], sizeof(msg_hdr), p + k, TAG_SNAPHDR);
            c->r_snap[k] = comm_set_add(sv->set, COMM_RECV, c->snap + lo, len * sizeof(float), p + k, TAG_SNAP);
        }
        c->last = xcalloc((size_t)p, sizeof(msg_hdr)), c->prev = xcalloc((size_t)p, sizeof(msg_hdr));
        c->rows = xmalloc((size_t)4 * p * sizeof(double));
        c->ev.t = t;
        c->ev.threads = omp_get_max_threads();
        c->next_log = e->log_every;
        c->next_eval = e->eval.every;
    } else {
        c->snapbuf = xmalloc((n ? n : 1) * sizeof(float));
        c->r_req = comm_set_add(sv->set, COMM_RECV, &c->sreq_in, sizeof(msg_hdr), p, TAG_SNAPREQ);
        c->s_shdr = comm_set_add(sv->set, COMM_SEND, &c->shdr_out, sizeof(msg_hdr), p, TAG_SNAPHDR);
        c->s_snap = comm_set_add(sv->set, COMM_SEND, c->snapbuf, n * sizeof(float), p, TAG_SNAP);
        comm_set_start(sv->set, c->r_req);
    }
}

static void server_free(server_ctx *c) {
    srv *sv = &c->sv;
    comm_set_free(sv->set);
    for (int i = 0; i < sv->p; i++) free(sv->gbuf[i]), free(sv->rep[i]), free(sv->bnbuf[i]);
    free(sv->center), free(sv->vel), free(sv->acc), free(sv->in), free(sv->out), free(sv->gbuf), free(sv->rep), free(sv->bnbuf);
    free(sv->held), free(sv->seen_bn), free(sv->last_steps), free(sv->r_hdr), free(sv->r_data), free(sv->r_bn);
    free(sv->s_hdr), free(sv->s_data), free(sv->hist), free(sv->dropped);
    free(c->snap), free(c->sreq_out), free(c->shdr_in), free(c->s_req), free(c->r_shdr), free(c->r_snap);
    free(c->snapbuf), free(c->last), free(c->prev), free(c->rows);
}

/* Server 0: log the /train (and /ranks) row when the count passes the next log_every. */
static void maybe_log(server_ctx *c, int force) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const experiment *e = t->e;
    long it = srv_iteration(sv);
    if (!force && it < c->next_log) return;
    while (c->next_log <= it) c->next_log += e->log_every;
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
        c->prev[i] = *a;
    }
    long at = it < e->iterations ? it : e->iterations - 1;
    if (train_log_train(t, it, wall_time() - c->t_start, c->loss_sum / (double)c->n_loss, alpha_at(e, at), c->rows, c->rows + p,
                        c->rows + 2 * p, c->rows + 3 * p) != 0)
        c->status = EXIT_RUNTIME;
    c->loss_sum = 0.0, c->n_loss = 0;
}

/* Server 0: snapshot the center at iteration `label`: copy own shard, ask the others. */
static void snapshot_begin(server_ctx *c, long label) {
    srv *sv = &c->sv;
    c->q.label = label;
    c->q.time_s = wall_time() - c->t_start;
    memcpy(c->snap + sv->lo, sv->center, sv->n * sizeof(float));
    for (int k = 1; k < sv->S; k++) {
        wait_or_die(sv->set, c->s_req[k], sv->t->e->comm_timeout_s, "a parameter server (snapshot)");
        c->sreq_out[k] = (msg_hdr){.version = label};
        comm_set_start(sv->set, c->r_shdr[k]);
        comm_set_start(sv->set, c->r_snap[k]);
        comm_set_start(sv->set, c->s_req[k]);
    }
    c->q.asked = 1;
    c->q.got = 1;
    if (c->q.got == sv->S) c->q.asked = 0, c->q.ready = 1;
}

/* Server 0: a shard of the snapshot arrived from server k (both its messages complete). */
static void snapshot_shard(server_ctx *c) {
    if (++c->q.got == c->sv.S) c->q.asked = 0, c->q.ready = 1;
}

/* Server 0: if an assembled snapshot waits and the evaluator is free, move it into the model
 * (with the workers' average BN statistics) and start the evaluation. */
static void snapshot_launch(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    if (!c->q.ready || atomic_load(&c->ev.running)) return;
    const size_t nbn = model_n_bn(t->net);
    memcpy(model_params(t->net), c->snap, model_n_params(t->net) * sizeof(float));
    if (nbn) {
        float *bn = model_bn(t->net);
        int cnt = 0;
        for (int i = 0; i < sv->p; i++) cnt += sv->seen_bn[i];
        if (cnt) {
            memset(bn, 0, nbn * sizeof(float));
            for (int i = 0; i < sv->p; i++)
                if (sv->seen_bn[i])
                    for (size_t j = 0; j < nbn; j++) bn[j] += sv->bnbuf[i][j] / (float)cnt;
        }
    }
    c->q.eval_label = c->q.label;
    c->q.eval_time = c->q.time_s;
    c->q.ready = 0;
    atomic_store(&c->ev.finished, 0);
    atomic_store(&c->ev.running, 1);
    if (pthread_create(&c->ev.th, NULL, eval_main, &c->ev) != 0) DIE("pthread_create failed for the evaluation thread");
}

/* Server 0: log a finished evaluation (wait = 1: wait for it). */
static void eval_collect(server_ctx *c, int wait) {
    if (!atomic_load(&c->ev.running)) return;
    if (!wait && !atomic_load(&c->ev.finished)) return;
    pthread_join(c->ev.th, NULL);
    atomic_store(&c->ev.running, 0);
    trainer *t = c->sv.t;
    c->last_eval = c->q.eval_label;
    if (train_log_eval(t, c->q.eval_label, c->q.eval_time, &c->ev.r, c->ev.seconds, 0) != 0) c->status = EXIT_RUNTIME;
    if (!isfinite(c->ev.r.loss)) {
        fprintf(stderr, "dsgd-run: non-finite validation loss at iteration %ld: the center diverged; stopping every rank\n",
                c->q.eval_label);
        c->sv.diverged = 1;
        c->nonfinite = 1;
        c->status = EXIT_RUNTIME;
    }
}

/* Server 0 after each request: rows, snapshots. */
static void server0_progress(server_ctx *c) {
    srv *sv = &c->sv;
    const experiment *e = sv->t->e;
    maybe_log(c, 0);
    long it = srv_iteration(sv);
    while (c->next_eval <= it && c->next_eval < e->iterations) {
        if (!c->q.asked && !c->q.ready) snapshot_begin(c, c->next_eval);
        else if (c->q.skipped++ == 0)
            printf("note: evaluation at iteration %ld skipped: the previous evaluation of the center is still running "
                   "(evaluation takes longer than eval.every iterations of training)\n", c->next_eval);
        c->next_eval += e->eval.every;
    }
}

/* A completed receive: returns the worker whose exchange is now complete, or -1. */
static int on_completion(server_ctx *c, int idx, int *is_done) {
    srv *sv = &c->sv;
    *is_done = 0;
    for (int i = 0; i < sv->p; i++) {
        if (idx != sv->r_hdr[i] && idx != sv->r_data[i] && idx != sv->r_bn[i]) continue;
        if (comm_set_active(sv->set, sv->r_hdr[i])) return -1;
        int kind = sv->in[i].kind;
        if (kind == MSG_EXCHANGE && (comm_set_active(sv->set, sv->r_data[i]) || (sv->r_bn[i] >= 0 && comm_set_active(sv->set, sv->r_bn[i]))))
            return -1;
        *is_done = kind != MSG_EXCHANGE;
        if (kind == MSG_DIVERGED) sv->diverged = 1;
        return i;
    }
    return -1;
}

static void server_handle(server_ctx *c, int i, int leaving) {
    srv *sv = &c->sv;
    msg_hdr *h = &sv->in[i];
    long new_steps = h->steps - sv->last_steps[i];
    sv->last_steps[i] = h->steps;
    if (leaving) {
        sv->live--;
        sv->rules->leave(sv, i);
    } else {
        sv->steps_total += new_steps;
        if (sv->r_bn[i] >= 0) sv->seen_bn[i] = 1;
        sv->rules->request(sv, i);
        /* repost for the next exchange of i */
        comm_set_start(sv->set, sv->r_hdr[i]);
        comm_set_start(sv->set, sv->r_data[i]);
        if (sv->r_bn[i] >= 0) comm_set_start(sv->set, sv->r_bn[i]);
    }
    if (sv->k == 0) {
        if (h->n_loss > 0) c->loss_sum += h->loss_sum, c->n_loss += h->n_loss;
        if (h->steps >= c->last[i].steps) c->last[i] = *h;
        server0_progress(c);
    }
}

static int server_loop(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const int S = sv->S;
    int *done = xmalloc((size_t)(5 * sv->p + 3 * S + 3) * sizeof(int));
    comm_barrier();
    c->t_start = wall_time();
    for (;;) {
        if (sv->k == 0) {
            eval_collect(c, 0);
            snapshot_launch(c);
            if (sv->live == 0 && !c->q.asked && !c->q.ready && !atomic_load(&c->ev.running)) break;
        } else if (c->quit && sv->live == 0) break;
        /* Server 0 wakes for a finishing evaluation at least every 10 ms. */
        int nd = comm_set_wait_some(sv->set, done, sv->k == 0 && atomic_load(&c->ev.running) ? 0.01 : 1e9);
        for (int j = 0; j < nd; j++) {
            int idx = done[j], leaving;
            if (sv->k == 0) {
                int handled = 0;
                for (int k = 1; k < S && !handled; k++)
                    if (idx == c->r_snap[k] || idx == c->r_shdr[k]) {
                        handled = 1;
                        if (!comm_set_active(sv->set, c->r_snap[k]) && !comm_set_active(sv->set, c->r_shdr[k])) snapshot_shard(c);
                    }
                if (handled) continue;
            } else if (idx == c->r_req) {
                long label = c->sreq_in.version;
                if (label == SNAP_QUIT) c->quit = 1;
                else {
                    wait_or_die(sv->set, c->s_snap, t->e->comm_timeout_s, "the first parameter server (snapshot)");
                    wait_or_die(sv->set, c->s_shdr, t->e->comm_timeout_s, "the first parameter server (snapshot)");
                    memcpy(c->snapbuf, sv->center, sv->n * sizeof(float));
                    c->shdr_out = (msg_hdr){.version = label};
                    comm_set_start(sv->set, c->s_shdr);
                    comm_set_start(sv->set, c->s_snap);
                    comm_set_start(sv->set, c->r_req);
                }
                continue;
            }
            int i = on_completion(c, idx, &leaving);
            if (i >= 0) server_handle(c, i, leaving);
        }
    }
    free(done);
    return 0;
}

/* Server 0 at the end: the final evaluation of the center, the arrays, the summary; then tell
 * the other servers to quit. */
static void server0_finish(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const experiment *e = t->e;
    double train_s = wall_time() - c->t_start;
    long it = srv_iteration(sv);
    t->step = it;
    maybe_log(c, 1);
    /* the final center, unless that iteration was just evaluated (e.g. a stop at step 0) */
    if (it != c->last_eval) snapshot_begin(c, it);
    c->q.time_s = train_s;
    int *done = xmalloc((size_t)(5 * sv->p + 3 * sv->S + 3) * sizeof(int));
    while (c->q.asked) {
        int nd = comm_set_wait_some(sv->set, done, 1e9);
        for (int j = 0; j < nd; j++)
            for (int k = 1; k < sv->S; k++)
                if ((done[j] == c->r_snap[k] || done[j] == c->r_shdr[k]) && !comm_set_active(sv->set, c->r_snap[k]) &&
                    !comm_set_active(sv->set, c->r_shdr[k]))
                    snapshot_shard(c);
    }
    free(done);
    snapshot_launch(c);
    eval_collect(c, 1);
    for (int k = 1; k < sv->S; k++) {
        wait_or_die(sv->set, c->s_req[k], e->comm_timeout_s, "a parameter server (quit)");
        c->sreq_out[k] = (msg_hdr){.version = SNAP_QUIT};
        comm_set_start(sv->set, c->s_req[k]);
        wait_or_die(sv->set, c->s_req[k], e->comm_timeout_s, "a parameter server (quit)");
    }
    if (e->method == METHOD_PS && runlog_array(t->log, 0, sv->hist) != 0) c->status = EXIT_RUNTIME;
    if (e->method == METHOD_BACKUP && runlog_array(t->log, 0, sv->dropped) != 0) c->status = EXIT_RUNTIME;
    int why = c->nonfinite ? STOPPED_NONFINITE : STOPPED_WRITE;
    if (sv->diverged) why = STOPPED_NONFINITE, c->status = EXIT_RUNTIME;
    else if (sv->starved) why = STOPPED_WORKERS, c->status = EXIT_RUNTIME;
    train_log_summary(t, c->status, why, train_s, (double)it * (double)e->p * (double)e->b);
    if (c->q.skipped) printf("%ld evaluation(s) skipped: evaluating the center took longer than eval.every iterations\n", c->q.skipped);
    if (e->method == METHOD_BACKUP)
        printf("backup: %lld gradients dropped (arrived after the first N = %d of their step)\n", sv->n_dropped, e->p - e->backups);
    if (e->method == METHOD_PS) {
        long long tot = 0;
        for (int b = 0; b < sv->hist_bins; b++) tot += sv->hist[b];
        printf("ps: mean staleness %.2f server updates over %lld gradients\n", tot ? (double)sv->stale_sum / (double)tot : 0.0, tot);
    }
}

int server_run(trainer *t) {
    int status = EXIT_OK;
    if (t->worker >= 0) {
        status = worker_run(t);
    } else {
        server_ctx c = {0};
        c.last_eval = -1;
        server_setup(t, &c);
        if (c.sv.k == 0 && t->e->eval.at_start) {
            double ev0 = wall_time();
            eval_result r = train_evaluate_all(t, t->net);
            if (train_log_eval(t, 0, 0.0, &r, wall_time() - ev0, 0) != 0) c.status = EXIT_RUNTIME;
            c.last_eval = 0;
        }
        server_loop(&c);
        if (c.sv.k == 0) server0_finish(&c);
        status = c.status;
        server_free(&c);
    }
    return comm_max_int(status);
}

int server_init(trainer *t, char *err, size_t errlen) {
    (void)err, (void)errlen;
    /* Identical starting point on every rank whatever the node's libm: rank 0's parameters. */
    comm_bcast(model_params(t->net), model_n_params(t->net) * sizeof(float), 0);
    return 0;
}
void server_noop(trainer *t) { (void)t; }
double server_nostep(trainer *t, long step, double alpha) { (void)t, (void)step, (void)alpha; return NAN; }
