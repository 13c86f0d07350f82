/* server_pause.h — the checkpoint pause protocol of the methods with servers (docs/checkpoint.md,
 * "Methods with servers"), both sides, as one object with its own messages and requests: server 0
 * leads (go, acks, commit, verdict), every other rank takes part (a paused worker, server k > 0).
 * Each writes its own file through the `write` callback; the protocol knows nothing of what a
 * server or a worker holds. Its clients: server.c (the servers) and server_worker.c (the workers). */
#ifndef DSGD_SERVER_PAUSE_H
#define DSGD_SERVER_PAUSE_H

#include <stdint.h>

#include "comm/comm.h"
#include "train/train.h"

enum { TAG_CKGO = 130, TAG_CKACK, TAG_CKFIN }; /* server 0 → paused workers; every rank → server 0; server 0 → every rank */

/* Write this rank's file of checkpoint `label`: returns 0, or EXIT_RUNTIME (message printed). */
typedef int (*pause_write_fn)(void *ctx, long label);

typedef struct {
    trainer *t;
    int lead;                 /* 1: server 0 (world rank p) */
    int p, S;                 /* workers 0..p-1, servers p..p+S-1 */
    pause_write_fn write;
    void *ctx;
    comm_set *set;
    int64_t go[2];            /* server 0 → worker: {label, ok (the directory was prepared)} */
    int64_t ack;              /* rank → server 0: its write's status */
    int64_t fin[2];           /* server 0 → rank: {worst status, stop} */
    int64_t *acks;            /* lead: (p + S) */
    int *s_go, *r_ack, *s_fin; /* lead: per world rank (-1: none) */
    int r_go, s_ack, r_fin;   /* a worker (r_go) or server k > 0 */
} pause_proto;

/* Set up pp for this rank of trainer t (server 0: lead; server k > 0 or a worker: a part) with its
 * own requests; write(ctx, label) writes this rank's file. pause_free releases them. */
void pause_init(pause_proto *pp, trainer *t, pause_write_fn write, void *ctx);
void pause_free(pause_proto *pp);

/* Server 0, every live worker paused (paused[i] = 1, p entries) and nothing in flight: the round
 * of checkpoint `label`. Prepares the directory; sends the go to the paused workers; tell(ctx,
 * label, ok) tells servers 1..S-1 on the caller's own channel; writes server 0's file; collects
 * every ack; commits (or abandons); sends the verdict (stop: after a failure, or when stop_asked
 * or a stop signal is pending); prints the "written" (and stop) line. Returns 0 (go on),
 * EXIT_INTERRUPTED (stop after a stop request) or EXIT_RUNTIME (a rank could not write; said). */
int pause_lead(pause_proto *pp, long label, const char *paused, int stop_asked, void (*tell)(void *ctx, long label, int ok));

/* A worker, before it tells the servers it pauses (MSG_PAUSE), and server k > 0 once asked: post
 * the receives of the go (a worker) and of the verdict. */
void pause_arm(pause_proto *pp);
/* A worker (label < 0: from server 0's go, waited for) or server k > 0 (label and ok from server 0):
 * write this rank's file when ok, ack, and wait for the verdict. Returns 0 (go on), EXIT_INTERRUPTED
 * (stop: a stop request) or EXIT_RUNTIME (a rank could not write: stop). Every wait is bounded
 * (comm_timeout_s). */
int pause_part(pause_proto *pp, long label, int ok);

#endif
