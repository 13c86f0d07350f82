/* server_state.h — the state the server ranks' files share, for src/methods/ only: message tags,
 * shards and the server's state (server_ctx) that server.c (the servers' loop, server 0's
 * evaluation thread), server_ckpt.c (a server's checkpoints) and server_worker.c (the workers'
 * side) act on. Types and inline helpers only: it belongs to none of them. The checkpoint pause
 * protocol, both sides, is server_pause.h's. */
#ifndef DSGD_SERVER_STATE_H
#define DSGD_SERVER_STATE_H

#include "methods/server.h"
#include "methods/server_pause.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
enum {
    TAG_HDR = 100, TAG_DATA, TAG_BN,      /* worker → server */
    TAG_RHDR = 110, TAG_RDATA,            /* server → worker */
    TAG_SNAPREQ = 120, TAG_SNAP           /* server 0 ↔ server k (checkpoints: server_pause.h's tags) */
};
#define SNAP_QUIT (-2L)
/* Requests of a server's comm_set: 5 per worker, 2 per other server (snapshots), a few more. */
#define SET_CAP(p, S) (5 * (p) + 2 * (S) + 8)
#define SNAP_CKPT (-3L) /* server 0 → server k: write the checkpoint of label sreq.steps */
/* Server 0 sends a keep-alive header this often to the workers that have left and wait for the
 * end of the run (worker_bye), so that their wait is bounded by comm_timeout_s. */
#define KEEPALIVE_S 1.0

static inline size_t shard_lo(size_t n, int k, int S) { return (size_t)((unsigned long long)n * (unsigned)k / (unsigned)S); }
/* Server 0's evaluation thread. */
typedef struct {
    trainer *t;
    pthread_t th;
    atomic_int running, finished;
    atomic_int abandon;  /* server 0 asks the thread to stop after its current batch (a stop request) */
    int at_start;        /* the evaluation at the start (no thread): a stop signal abandons it directly */
    int threads;
    double delay_s;      /* test hook DSGD_TEST_EVAL_DELAY_MS: a pause after every evaluation batch */
    eval_result r;
    double seconds;
} evaluator;

/* Snapshots on server 0. One is assembled (its shards requested from the other servers) while
 * at most one other is evaluated; a count that passes eval.every while both are busy skips that
 * evaluation (printed) rather than evaluate a later center under an earlier time. */
typedef struct {
    int asked;         /* a snapshot is being assembled (shards requested) */
    int got;           /* shards of it received (server 0's own counts) */
    int ready;         /* an assembled snapshot waits for the evaluator */
    long label;        /* iteration of the snapshot being assembled / ready */
    double time_s;     /* wall clock of it */
    long eval_label;   /* the one the thread evaluates (or abandoned) */
    double eval_time;
    long skipped;
    int abandoned;     /* the evaluation of eval_label was abandoned for a stop request; its center
                          and BN statistics are still the model's (t->net): saved with the
                          checkpoint and evaluated again after the resume */
} snapq;

typedef struct {
    srv sv;
    /* server 0 */
    evaluator ev;
    snapq q;
    msg_hdr *sreq_out;                /* (S) snapshot requests to server k */
    float *snap;                      /* (n_params) assembled center (shards of every server) */
    int *s_req, *r_snap;              /* request indices per server */
    /* server k > 0 */
    msg_hdr sreq_in;
    float *snapbuf;                   /* (n) */
    int r_req, s_snap;
    int quit;
    int in_loop;                      /* server 0 is in server_loop (a stop request can still be checkpointed) */
    /* logging (server 0) */
    long last_it;                     /* iteration count at the last look at the cadence (cadence_due) */
    long last_row;                    /* iteration of the last /train row */
    long last_eval;                   /* iteration of the last evaluation (-1: none) */
    double loss_sum;
    long n_loss;
    msg_hdr *last;                    /* (p) latest header of each worker */
    msg_hdr *prev;                    /* (p) header at the previous /ranks row */
    double *rows;                     /* (5p) the /ranks row */
    double t_start;
    int status;
    int why;                          /* STOPPED_* (cadence.h) */
    /* checkpoints */
    pause_proto pause;                /* the pause protocol (server_pause.h) */
    long go;                          /* server k > 0: label server 0 asked to write (-1: none) */
    int go_ok;
    int stopped;                      /* a checkpoint stopped the run (SIGTERM) or failed */
    /* faults (docs/reliability.md) */
    char *bye;                        /* server 0: (p) worker i left by a message and waits for the goodbye */
    int n_done;                       /* workers that left by a message (not given up on) */
    double last_beat;                 /* server 0: last keep-alive */
    double checked;                   /* time of the last silence check (check_silence) */
    char lost_desc[1024];             /* server 0: the run file's `workers_lost` */
    /* sim mode (server_sim.h): snapshots at the same point of every server's request order */
    int final_snap;                   /* server 0: the snapshot being asked is the final one */
    long want_label;                  /* server k > 0: server 0 asked for this snapshot (-1: none) */
    int want_final;                   /* ... the final one: answered once every worker has left */
    long snap_label;                  /* server k > 0: snapbuf holds the center at this iteration, */
    int snap_hold;                    /* not yet asked for: no request is applied meanwhile */
} server_ctx;

static inline long srv_iteration(const srv *sv) { return sv->rules->iteration ? sv->rules->iteration(sv) : sv->steps_total / sv->p; }

#endif
