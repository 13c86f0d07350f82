/* server.h — the runtime shared by the methods with parameter-server ranks (ps, easgd, backup):
 * rank roles, the message layout, the worker's exchange and the server loop. Each method supplies
 * a server_rules table (src/methods/ps.c, easgd.c, backup.c); server.c does everything else.
 *
 * Ranks: workers are world ranks 0..p-1 (worker i = rank i, the loader's rank), servers are
 * ranks p..p+S-1. The flat parameter vector of n floats is cut into S contiguous shards,
 * shard k = [n·k/S, n·(k+1)/S), held by server k together with its optimizer state.
 *
 * An exchange: worker i sends every server k a header and its shard of the payload (ps, backup:
 * the gradient; easgd: its parameters θ_i), plus its BN running statistics to server 0; each
 * server answers with a header and a shard (ps, backup: the new parameters, received straight
 * into the worker's parameters; easgd: the center x̃ before the elastic update). Servers apply
 * rules->request when a worker's exchange has fully arrived; the rule replies at once
 * (srv_reply_center) or holds the worker until a round completes (easgd synchronous, backup). */
#ifndef DSGD_SERVER_H
#define DSGD_SERVER_H

#include <stdint.h>

#include "comm/comm.h"
#include "methods/method.h"
#include "train/train.h"

/* Rows of server 0's staleness histogram (ps): this many per worker. */
#define HIST_BINS_PER_WORKER 4

/* Header of every message between a worker and a server (either direction). */
typedef struct {
    int64_t version;    /* worker→server: version of the shard its payload derives from;
                           server→worker: version of the shard in the reply */
    int64_t steps;      /* worker→server: local steps the worker has completed */
    int32_t n_loss;     /* worker→server: losses summed in loss_sum (steps since its last exchange) */
    int32_t stop;       /* server→worker: STOP_* */
    int32_t sig;        /* either way: the strongest checkpoint request (CKPT_SIG_*) the sender knows of */
    int32_t kind;       /* MSG_* (worker to server) */
    double loss_sum;
    double step_s, compute_s, comm_s, wait_s; /* worker→server: cumulative seconds (/ranks rows; virtual in sim mode) */
    /* Sim mode only (docs/simulate.md, "Methods with parameter servers"), virtual seconds:
     * worker→server: vt_ready = the worker's clock when the message is ready (its timestamp, the
     * servers' order), vt_send = when this server's shard starts on the worker's uplink;
     * server→worker: vt_send = when the reply starts on the server's uplink, vt_arr = when the
     * request it answers arrived. 0 otherwise. */
    double vt_ready, vt_send, vt_arr;
} msg_hdr;

enum { MSG_EXCHANGE = 1, MSG_DONE = 2, MSG_DIVERGED = 3,
       MSG_PAUSE = 4, /* the worker stopped for a checkpoint after its last exchange (no payload) */
       MSG_FAILED = 5 /* the worker stops for good (inject.fail_rank): it leaves the BN average */ };
/* STOP_CKPT: the exchange was applied; pause for a checkpoint. STOP_CKPT_VOID: the exchange was
 * NOT applied (a synchronous round that cannot complete while workers pause); pause, and an
 * easgd worker sends it again after the checkpoint. */
enum { STOP_NO = 0, STOP_DONE = 1, STOP_DIVERGED = 2, STOP_CKPT = 3, STOP_CKPT_VOID = 4 };

/* One server's state: shard k of the center. */
typedef struct srv {
    trainer *t;
    const struct server_rules *rules;
    int k, S, p;
    size_t lo, n;            /* shard [lo, lo + n) */
    float *center;           /* (n) the parameters / EASGD center x̃ of this shard */
    float *vel;              /* (n) Nesterov momentum (ps, backup) */
    float *acc;              /* (n) gradient sum of the current step (backup) */
    int64_t version;         /* updates applied (ps: gradients; backup: steps; easgd: exchanges) */
    long steps_total;        /* worker steps reported to this server so far */
    int diverged;            /* a non-finite update: every reply from now on says STOP_DIVERGED */
    int live;                /* workers that have not left */
    /* per worker i */
    msg_hdr *in, *out;       /* (p) last request header, reply header */
    float **gbuf, **rep;     /* (p)(n) payload received, reply payload */
    float **bnbuf;           /* (p)(n_bn) BN statistics (server 0): the receive buffer, never read
                                while its receive is posted */
    float **bnlast;          /* (p)(n_bn) worker i's latest complete BN statistics (server 0) */
    char *held, *seen_bn;
    long *last_steps;        /* (p) steps reported at the previous exchange */
    /* rule state */
    int count;               /* backup: gradients in acc; easgd synchronous: workers held */
    void *rule;              /* the rule's own state (server_rules.state_new; ps: the staleness histogram,
                                backup: the dropped gradients), NULL: none */
    /* checkpoints (docs/checkpoint.md, "Methods with servers") */
    int pausing;             /* a checkpoint is coming: replies say STOP_CKPT, no new round starts */
    int want;                /* strongest CKPT_SIG_* request seen */
    char *paused;            /* (p) worker i has paused (MSG_PAUSE) */
    int n_paused;
    char *left;              /* (p) worker i has left (done or failed) */
    /* faults (docs/reliability.md) */
    char *failed;            /* (p) worker i failed (inject.fail_rank) or was given up on: not in the BN average */
    char *lost;              /* (p) worker i was silent for comm_timeout_s and given up on */
    double *heard;           /* (p) wall time of the last message from worker i */
    /* requests (indices into set) */
    comm_set *set;
    int *r_hdr, *r_data, *r_bn, *s_hdr, *s_data;
    /* sim mode (t->vc.on; server_sim.h): requests applied in virtual-timestamp order */
    int sim;
    double now;              /* virtual time: arrival of the request being applied (monotone) */
    double up, down;         /* when this server's uplink / downlink is next free */
    double *lb;              /* (p) worker i's next timestamp is >= lb[i] (INFINITY: queued, held, left) */
    double *arr;             /* (p) arrival of worker i's last applied request */
    char *queued;            /* (p) worker i's message has arrived and waits for its turn */
} srv;

typedef struct server_rules {
    int sends_params;        /* worker sends θ_i (easgd), else its gradient */
    int local_update;        /* worker applies its own SGD step each step (easgd) */
    /* Worker: exchange after local step s (0-based)? NULL: after every step (unused with until_stop) */
    int (*exchange_after)(const trainer *t, long s);
    int until_stop;          /* workers run until a reply says STOP (backup), not `iterations` */
    /* Worker: combine the replies (reply = the servers' shards, n floats); NULL: nothing. */
    void (*worker_reply)(trainer *t, const float *reply);
    /* Server: worker i's exchange has arrived (sv->in[i], sv->gbuf[i]). Reply or hold. */
    void (*request)(srv *sv, int i);
    /* Server: worker i has left (done or failed): release rounds waiting for it. NULL: none to release. */
    void (*leave)(srv *sv, int i);
    /* Server: iterations done so far, by this server's count. NULL: worker steps reported / p. */
    long (*iteration)(const srv *sv);
    /* The rule's own state on server sv->k (its records), kept in sv->rule: allocated once the
     * server is set up, freed at its end. NULL: none. */
    void *(*state_new)(const srv *sv);
    void (*state_free)(void *rule);
    /* Server 0: the rule's records in checkpoint file f, written or read back (ckpt_writing(f)) in
     * one order; 0 or -1 (the message in f; none for a value this run cannot have). NULL: none. */
    int (*records_io)(srv *sv, ckpt_file *f);
    /* Server 0 at the end, `it` iterations done: the rule's run-file arrays (runlog index 0...);
     * returns 0 or EXIT_RUNTIME (a write error). *why = STOPPED_* when the rule stopped the run
     * (backup: fewer workers left than a step needs), else left alone. NULL: none. */
    int (*finish)(srv *sv, long it, int *why);
    /* Server 0 after the summary: the rule's own line (ps: mean staleness; backup: drops). */
    void (*say)(const srv *sv);
    /* 1: a round needs every live worker (easgd synchronous), so a worker given up on for its
     * silence stops the run. NULL: 0. */
    int (*needs_all)(const srv *sv);
} server_rules;

/* Reply to worker i now with a copy of the current center (in sv->rep[i]) and stop code; it is
 * no longer held. */
void srv_reply_center(srv *sv, int i, int stop);
/* Stop code for replies now: STOP_DIVERGED after a non-finite update, STOP_CKPT while pausing
 * for a checkpoint, else STOP_NO. */
int srv_stop(const srv *sv);
/* The method_ops entries of the server methods: run — on a server rank (t->worker < 0) the
 * server loop (server_serve, server.c), on a worker its own loop (server_worker.c: begin, step
 * until a reply ends it, end); init is method_init_rank0. */
int server_run(trainer *t);
int server_serve(trainer *t);
/* Resuming a worker of a method with servers from checkpoint `label` in dir: *gone = 1 when
 * worker `worker` had left the run (done or failed) before it (server 0's file, rank p, says so
 * in `left`): it has no file of its own and takes no more part. Returns 0, or -1 with the reason
 * in err (the file or its `left` unreadable). The one reader of `left`. */
int srv_worker_gone(const char *dir, long label, int p, int worker, int *gone, char *err, size_t errlen);
#define SERVER_METHOD_OPS .init = method_init_rank0, .run = server_run, .host_velocity = 1

#endif
