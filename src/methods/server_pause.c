/* server_pause.c — the checkpoint pause protocol of the methods with servers, both sides (see
 * server_pause.h; docs/checkpoint.md, "Methods with servers").
 *
 * How a pause comes about is the servers' business (server.c): a request (server 0's periodic
 * count, a signal on any rank, relayed in message headers) makes a server reply STOP_CKPT; a
 * worker receiving one tells every server (MSG_PAUSE) and waits here. When every live worker
 * waits, nothing is in flight: server 0 leads the round below (pause_lead), the other servers
 * and the paused workers take part (pause_part). Workers that have left take no part. */
#define _GNU_SOURCE
#include "methods/server_pause.h"

#include <stdio.h>
#include <stdlib.h>

#include "train/cadence.h"
#include "train/checkpoint.h"
#include "train/ckpt_rank.h"
#include "util/util.h"

void pause_init(pause_proto *pp, trainer *t, pause_write_fn write, void *ctx) {
    const int p = t->e->p, S = t->e->servers, world = p + S;
    *pp = (pause_proto){.t = t, .lead = t->rank == p, .p = p, .S = S, .write = write, .ctx = ctx, .r_go = -1};
    pp->set = comm_set_new(3 * world + 4);
    if (!pp->lead) {
        if (t->worker >= 0) pp->r_go = comm_set_add(pp->set, COMM_RECV, pp->go, sizeof pp->go, p, TAG_CKGO);
        pp->s_ack = comm_set_add(pp->set, COMM_SEND, &pp->ack, sizeof pp->ack, p, TAG_CKACK);
        pp->r_fin = comm_set_add(pp->set, COMM_RECV, pp->fin, sizeof pp->fin, p, TAG_CKFIN);
        return;
    }
    pp->acks = xcalloc((size_t)world, sizeof(int64_t));
    pp->s_go = xmalloc((size_t)world * sizeof(int)), pp->r_ack = xmalloc((size_t)world * sizeof(int));
    pp->s_fin = xmalloc((size_t)world * sizeof(int));
    for (int r = 0; r < world; r++) {
        pp->s_go[r] = pp->r_ack[r] = pp->s_fin[r] = -1;
        if (r == p) continue;
        if (r < p) pp->s_go[r] = comm_set_add(pp->set, COMM_SEND, pp->go, sizeof pp->go, r, TAG_CKGO);
        pp->r_ack[r] = comm_set_add(pp->set, COMM_RECV, &pp->acks[r], sizeof(int64_t), r, TAG_CKACK);
        pp->s_fin[r] = comm_set_add(pp->set, COMM_SEND, pp->fin, sizeof pp->fin, r, TAG_CKFIN);
    }
}

void pause_free(pause_proto *pp) {
    comm_set_free(pp->set);
    free(pp->acks), free(pp->s_go), free(pp->r_ack), free(pp->s_fin);
    *pp = (pause_proto){0};
}

/* Ranks of the round: the servers but the lead, and the paused workers. */
static int in_round(const pause_proto *pp, const char *paused, int r) { return r != pp->p && (r > pp->p || paused[r]); }

int pause_lead(pause_proto *pp, long label, const char *paused, int stop_asked, void (*tell)(void *ctx, long label, int ok)) {
    trainer *t = pp->t;
    const double t0 = wall_time();
    const int p = pp->p, world = pp->p + pp->S;
    char err[ERRLEN] = "";
    const int ok = ckpt_prepare(t->ckpt_dir, label, err, sizeof err) == 0;
    if (!ok) fprintf(stderr, "dsgd-run: checkpoint at iteration %ld not written: %s\n", label, err);
    pp->go[0] = label, pp->go[1] = ok;
    for (int k = 1; k < pp->S; k++) comm_set_start(pp->set, pp->r_ack[p + k]);
    if (pp->S > 1) tell(pp->ctx, label, ok);
    for (int i = 0; i < p; i++)
        if (paused[i]) comm_set_start(pp->set, pp->r_ack[i]), comm_set_start(pp->set, pp->s_go[i]);
    int worst = ok ? pp->write(pp->ctx, label) : EXIT_RUNTIME;
    for (int r = 0; r < world; r++) {
        if (!in_round(pp, paused, r)) continue;
        if (r < p) comm_set_wait_or_abort(pp->set, pp->s_go[r], "a worker (checkpoint)");
        comm_set_wait_or_abort(pp->set, pp->r_ack[r], r < p ? "a worker (checkpoint)" : "a parameter server (checkpoint)");
        if (pp->acks[r] > worst) worst = (int)pp->acks[r];
    }
    if (worst) ckpt_abandon(t->ckpt_dir, label);
    else if (ckpt_commit(t->ckpt_dir, label, err, sizeof err)) {
        fprintf(stderr, "dsgd-run: checkpoint at iteration %ld not committed: %s\n", label, err);
        worst = EXIT_RUNTIME;
    }
    const int stop = worst || stop_asked || ckpt_signal_pending() == CKPT_SIG_STOP;
    pp->fin[0] = worst, pp->fin[1] = stop;
    for (int r = 0; r < world; r++)
        if (in_round(pp, paused, r)) comm_set_start(pp->set, pp->s_fin[r]);
    for (int r = 0; r < world; r++)
        if (in_round(pp, paused, r)) comm_set_wait_or_abort(pp->set, pp->s_fin[r], "a rank (checkpoint)");
    if (!worst) {
        ckpt_say_written(t, label, wall_time() - t0);
        if (stop) train_say_stopped(t, label);
    }
    return worst ? EXIT_RUNTIME : stop ? EXIT_INTERRUPTED : 0;
}

void pause_arm(pause_proto *pp) {
    if (pp->r_go >= 0) comm_set_start(pp->set, pp->r_go);
    comm_set_start(pp->set, pp->r_fin);
}

int pause_part(pause_proto *pp, long label, int ok) {
    if (label < 0) {
        comm_set_wait_or_abort(pp->set, pp->r_go, "the first parameter server (checkpoint)");
        label = (long)pp->go[0], ok = (int)pp->go[1];
    }
    pp->ack = ok ? pp->write(pp->ctx, label) : EXIT_RUNTIME;
    comm_set_start(pp->set, pp->s_ack);
    comm_set_wait_or_abort(pp->set, pp->s_ack, "the first parameter server (checkpoint)");
    comm_set_wait_or_abort(pp->set, pp->r_fin, "the first parameter server (checkpoint)");
    return pp->fin[0] ? EXIT_RUNTIME : pp->fin[1] ? EXIT_INTERRUPTED : 0;
}
