/* gossip_state.h — the state the files of the gossip methods share, for src/methods/ only: one
 * node's state (allocated by method_ops.begin, hung on trainer.mstate, freed by .end) and the
 * variant a method table names. gossip.c is the method (steps, evaluation, checkpoints, the
 * communication thread); gossip_signal.c (gossip_signal.h) passes signals on between meeting
 * points. Types only: it belongs to neither file. */
#ifndef DSGD_GOSSIP_STATE_H
#define DSGD_GOSSIP_STATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "methods/method.h"
#include "train/inject.h"
#include "train/vclock_gossip.h"
#include "train/vclock_gossip_async.h"

enum { TAG_PULL = 200, TAG_PULLHDR, TAG_PULLREP, TAG_PUSH, TAG_QUIT, TAG_SYNC, TAG_SIGANN };

/* What differs between gossip_pull and gossip_push (method_ops.variant of their tables). */
typedef struct {
    int push; /* 1: node i sends θ_i to its peer j; 0: it reads θ_j (pull) */
} gossip_variant;

/* One node's state. Vectors are n = model_n_params floats unless said otherwise. */
typedef struct {
    trainer *t;
    int push, sync, fresh, p, me;
    size_t n, nbn;
    float *vel;               /* (n) this node's momentum v (zero at begin; in its checkpoint) */
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
    /* signals between meeting points (gossip_signal.c): announcements */
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
    /* sim mode (lock-step only): the exchange on the virtual clock (train/vclock_gossip.h) */
    int sim;
    vclock_gossip vg;
    /* sim mode, asynchronous pull (gossip_sim.c): the replicated schedule and the data moves */
    int sim_async;
    vclock_gossip_async ga;
    injector *inj;            /* (p) every node's injector (its compute on the schedule) */
    comm_set *sset;
    int *s_snd, *s_rcv;       /* (p) θ^v in sendbuf to node k; a pulled θ from node k into peer */
    long *pend;               /* (p) sends of the current version to node k not yet started */
    int *plist, np;           /* nodes with sends pending or active */
    long pub_v;               /* the version in sendbuf (−1: none) */
    struct gossip_slot *slots; /* push: θ's sent and not yet taken (virtual time), each its own buffer */
    int nslots;
} gossip;

#endif
