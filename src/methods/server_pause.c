/* server_pause.c — the checkpoint pause protocol of the methods with servers (docs/checkpoint.md,
 * "Methods with servers"), on the servers' side: voided rounds, each server's checkpoint file
 * (write and read back), server 0's round (go, acks, commit, verdict) and the part of server k.
 *
 * A request (server 0's periodic count, a signal on any rank, relayed in message headers) makes
 * a server pause: replies say STOP_CKPT; a worker receiving one after an exchange tells every
 * server (MSG_PAUSE) and waits. Synchronous rules complete a round in progress; one that cannot
 * complete because workers wait is voided (STOP_CKPT_VOID: not applied; easgd sends it again
 * after the checkpoint; backup recomputes the gradient). When every live worker waits, nothing
 * is in flight: server 0 finishes its evaluation (a stop request abandons it instead, and the
 * checkpoint keeps the snapshots left to evaluate: server_state), tells the other servers (SNAP_CKPT) and the
 * workers (TAG_CKGO) to write their files, collects their acks, commits, and sends everyone the
 * verdict (TAG_CKFIN: go on, or stop after a SIGTERM). Workers that have left take no part. */
#define _GNU_SOURCE
#include "server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/cadence.h"
#include "train/checkpoint.h"
#include "util/util.h"
/* Voided round: release the held workers without applying their exchange. backup: the
 * gradients (and so their losses, already counted on server 0) are computed again after the
 * checkpoint, so their losses are taken back out of the /train row. */
void srv_void_round(server_ctx *c) {
    srv *sv = &c->sv;
    for (int i = 0; i < sv->p; i++)
        if (sv->held[i]) {
            if (sv->k == 0 && sv->rules->until_stop) c->loss_sum -= sv->in[i].loss_sum, c->n_loss -= sv->in[i].n_loss;
            srv_reply_center(sv, i, STOP_CKPT_VOID);
        }
    memset(sv->acc, 0, (sv->n ? sv->n : 1) * sizeof(float));
    sv->count = 0;
}

/* This server's state in checkpoint file f, written or read back (ckpt_writing) in one order: the
 * values are packed from the state, written or read, and unpacked (unchanged when writing).
 * Returns 0 or -1 (the message in f; none for a state read that this run cannot have). */
static int server_state(server_ctx *c, ckpt_file *f) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const int p = sv->p, save = ckpt_writing(f);
    loop_state ls = {0};
    if (save) ls = (loop_state){.train_s = wall_time() - c->t_start, .loss_acc = c->loss_sum, .loss_n = c->n_loss, .last_row = c->last_row};
    int64_t cnt[4] = {sv->version, sv->steps_total, sv->live, sv->diverged};
    int64_t *v = xmalloc((size_t)p * 4 * sizeof(int64_t)); /* last_steps, left, seen_bn, failed */
    for (int i = 0; i < p; i++) v[i] = sv->last_steps[i], v[p + i] = sv->left[i], v[2 * p + i] = sv->seen_bn[i], v[3 * p + i] = sv->failed[i];
    int rc = train_ckpt_common(t, f, sv->k == 0 ? &ls : NULL) || ckpt_io_i64(f, "counters", cnt, 4) ||
             ckpt_io_f32(f, "center", sv->center, sv->n) || ckpt_io_f32(f, "velocity", sv->vel, sv->n) ||
             ckpt_io_i64(f, "last_steps", v, (size_t)p) || ckpt_io_i64(f, "left", v + p, (size_t)p);
    if (!rc && sv->k == 0) {
        const size_t nbn = model_n_bn(t->net);
        /* s0[8]: the evaluations a stop request left undone (1: the abandoned one, its center and BN
         * statistics in the model; 2: an assembled snapshot waiting for the evaluator), done after
         * the resume; 0 in a checkpoint without (and in those of earlier versions) */
        int64_t s0[9] = {sv->stale_sum, sv->n_dropped, c->next_log, c->next_eval, c->last_eval, c->next_ckpt, c->q.skipped, sv->dropped_len,
                         (int64_t)(c->q.abandoned ? 1 : 0) | (c->q.ready ? 2 : 0)};
        double *hd = xmalloc((size_t)p * 10 * sizeof(double));
        float *bn = xcalloc((size_t)p * (nbn ? nbn : 1), sizeof(float)), *avg = xcalloc(nbn ? nbn : 1, sizeof(float));
        for (int i = 0; i < p; i++) {
            const msg_hdr *h[2] = {&c->last[i], &c->prev[i]};
            for (int q = 0; q < 2; q++) {
                double *d = hd + (size_t)(q * p + i) * 5;
                d[0] = (double)h[q]->steps, d[1] = h[q]->step_s, d[2] = h[q]->compute_s, d[3] = h[q]->comm_s, d[4] = h[q]->wait_s;
            }
            if (nbn && sv->bnlast[i]) memcpy(bn + (size_t)i * nbn, sv->bnlast[i], nbn * sizeof(float));
        }
        if (save) srv_bn_average(sv, avg, nbn);
        /* failed workers, and the BN average the center is evaluated with (written only: tests check it) */
        rc = ckpt_io_i64(f, "failed", v + 3 * p, (size_t)p) || (save && ckpt_put_f32(f, "bn_average", avg, nbn)) ||
             ckpt_io_i64(f, "server0", s0, 9);
        if (!save && !rc && (s0[7] < 0 || s0[7] > t->e->iterations)) rc = -1; /* a count of steps this run cannot have */
        if (!rc) srv_dropped_reserve(sv, (long)s0[7]);
        rc = rc || ckpt_io_i64(f, "staleness_histogram", (int64_t *)sv->hist, (size_t)sv->hist_bins) ||
             ckpt_io_i64(f, "dropped", (int64_t *)sv->dropped, (size_t)sv->dropped_len) ||
             ckpt_io_f64(f, "worker_headers", hd, (size_t)p * 10) || ckpt_io_f32(f, "worker_bn", bn, (size_t)p * nbn) ||
             ckpt_io_i64(f, "seen_bn", v + 2 * p, (size_t)p);
        if (!rc && !save && (s0[8] < 0 || s0[8] > 3)) rc = -1;
        if (!rc && s0[8]) { /* the evaluations to do again: labels and times, centers (and the abandoned one's BN) */
            double pe[4] = {(double)c->q.eval_label, c->q.eval_time, (double)c->q.label, c->q.time_s};
            rc = ckpt_io_f64(f, "pending_eval", pe, 4) ||
                 ((s0[8] & 1) && (ckpt_io_f32(f, "abandoned_center", model_params(t->net), model_n_params(t->net)) ||
                                  ckpt_io_f32(f, "abandoned_bn", model_bn(t->net), nbn))) ||
                 ((s0[8] & 2) && ckpt_io_f32(f, "waiting_center", c->snap, model_n_params(t->net)));
            if (!rc && !save) {
                c->q.abandoned = (int)(s0[8] & 1), c->q.eval_label = (long)pe[0], c->q.eval_time = pe[1];
                c->q.ready = (int)(s0[8] >> 1 & 1), c->q.label = (long)pe[2], c->q.time_s = pe[3];
                const long top = (long)t->e->iterations;
                if ((c->q.abandoned && (c->q.eval_label < 0 || c->q.eval_label > top)) || (c->q.ready && (c->q.label < 0 || c->q.label > top)))
                    rc = -1; /* iterations this run cannot have */
            }
        }
        sv->stale_sum = s0[0], sv->n_dropped = s0[1], c->next_log = (long)s0[2], c->next_eval = (long)s0[3], c->last_eval = (long)s0[4];
        c->next_ckpt = (long)s0[5], c->q.skipped = (long)s0[6];
        c->loss_sum = ls.loss_acc, c->n_loss = ls.loss_n, c->last_row = ls.last_row;
        if (!save) c->t_start = -ls.train_s; /* made absolute when training starts (server_loop) */
        for (int i = 0; i < p; i++) {
            msg_hdr *h[2] = {&c->last[i], &c->prev[i]};
            for (int q = 0; q < 2; q++) {
                const double *d = hd + (size_t)(q * p + i) * 5;
                h[q]->steps = (int64_t)d[0], h[q]->step_s = d[1], h[q]->compute_s = d[2], h[q]->comm_s = d[3], h[q]->wait_s = d[4];
            }
            if (nbn && sv->bnlast[i]) memcpy(sv->bnlast[i], bn + (size_t)i * nbn, nbn * sizeof(float));
        }
        free(hd), free(bn), free(avg);
    }
    sv->version = cnt[0], sv->steps_total = (long)cnt[1], sv->live = (int)cnt[2], sv->diverged = (int)cnt[3];
    for (int i = 0; i < p; i++)
        sv->last_steps[i] = (long)v[i], sv->left[i] = (char)v[p + i], sv->seen_bn[i] = (char)v[2 * p + i], sv->failed[i] = (char)v[3 * p + i];
    free(v);
    return rc;
}

int server_ckpt(server_ctx *c, long label, int save) {
    trainer *t = c->sv.t;
    char err[ERRLEN] = "";
    ckpt_file *f = save ? ckpt_create(t->ckpt_dir, label, t->rank, err, sizeof err) : ckpt_open(t->ckpt_dir, label, t->rank, err, sizeof err);
    if (f) {
        if (server_state(c, f) || (save && ckpt_close(f)))
            snprintf(err, sizeof err, "%s", ckpt_error(f)[0] ? ckpt_error(f) : save ? "run file flush failed" : "the checkpoint's server state is inconsistent");
        ckpt_free(f);
    }
    if (err[0]) fprintf(stderr, "dsgd-run: rank %d: %s: %s\n", t->rank, save ? "checkpoint" : "resuming", err);
    return !err[0] ? 0 : save ? EXIT_RUNTIME : EXIT_BADINPUT;
}

/* Forget the pause after a checkpoint round. */
static void srv_unpause(srv *sv) {
    memset(sv->paused, 0, (size_t)sv->p);
    sv->n_paused = 0, sv->pausing = 0, sv->want = CKPT_SIG_NONE;
    ckpt_signal_clear_save();
}

/* Server 0, every live worker paused and no evaluation pending: the checkpoint round. Returns 0
 * (go on), EXIT_INTERRUPTED (stop after a SIGTERM) or EXIT_RUNTIME (a rank could not write). */
int srv_ckpt_round(server_ctx *c) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const double t0 = wall_time();
    const int p = sv->p, S = sv->S;
    const long label = srv_iteration(sv);
    char err[ERRLEN] = "";
    const int ok = ckpt_prepare(t->ckpt_dir, label, err, sizeof err) == 0;
    if (!ok) fprintf(stderr, "dsgd-run: checkpoint at iteration %ld not written: %s\n", label, err);
    c->ck_go[0] = label, c->ck_go[1] = ok;
    for (int k = 1; k < S; k++) {
        comm_set_wait_or_abort(sv->set, c->s_req[k], "a parameter server (checkpoint)");
        c->sreq_out[k] = (msg_hdr){.version = SNAP_CKPT, .steps = label, .stop = ok};
        comm_set_start(sv->set, c->r_ack[p + k]);
        comm_set_start(sv->set, c->s_req[k]);
    }
    for (int i = 0; i < p; i++)
        if (sv->paused[i]) comm_set_start(sv->set, c->r_ack[i]), comm_set_start(sv->set, c->s_go[i]);
    int worst = ok ? server_ckpt(c, label, 1) : EXIT_RUNTIME;
    for (int r = 0; r < p + S; r++) {
        if (r == p || (r < p && !sv->paused[r])) continue;
        if (r < p) comm_set_wait_or_abort(sv->set, c->s_go[r], "a worker (checkpoint)");
        comm_set_wait_or_abort(sv->set, c->r_ack[r], r < p ? "a worker (checkpoint)" : "a parameter server (checkpoint)");
        if (c->acks[r] > worst) worst = (int)c->acks[r];
    }
    if (worst) ckpt_abandon(t->ckpt_dir, label);
    else if (ckpt_commit(t->ckpt_dir, label, err, sizeof err)) {
        fprintf(stderr, "dsgd-run: checkpoint at iteration %ld not committed: %s\n", label, err);
        worst = EXIT_RUNTIME;
    }
    const int stop = worst || sv->want == CKPT_SIG_STOP || ckpt_signal_pending() == CKPT_SIG_STOP;
    c->ck_fin[0] = worst, c->ck_fin[1] = stop;
    for (int r = 0; r < p + S; r++)
        if (r != p && (r >= p || sv->paused[r])) comm_set_start(sv->set, c->s_fin[r]);
    for (int r = 0; r < p + S; r++)
        if (r != p && (r >= p || sv->paused[r])) comm_set_wait_or_abort(sv->set, c->s_fin[r], "a rank (checkpoint)");
    if (!worst) {
        printf("checkpoint: step %ld written to %s/step-%ld (%.2f s)\n", label, t->ckpt_dir, label, wall_time() - t0);
        fflush(stdout);
        if (stop) train_say_stopped(label);
    }
    if (worst) c->why = STOPPED_CHECKPOINT;
    srv_unpause(sv);
    c->t_start += wall_time() - t0; /* a checkpoint is not training time */
    return worst ? EXIT_RUNTIME : stop ? EXIT_INTERRUPTED : 0;
}

/* Server k > 0, asked by server 0 and every live worker paused: write, ack, learn the verdict. */
int srv_ckpt_participate(server_ctx *c) {
    srv *sv = &c->sv;
    const long label = c->go;
    c->go = -1;
    comm_set_start(sv->set, c->r_fin);
    c->ck_ack = c->go_ok ? server_ckpt(c, label, 1) : EXIT_RUNTIME;
    comm_set_start(sv->set, c->s_ack);
    comm_set_wait_or_abort(sv->set, c->s_ack, "the first parameter server (checkpoint)");
    comm_set_wait_or_abort(sv->set, c->r_fin, "the first parameter server (checkpoint)");
    srv_unpause(sv);
    return c->ck_fin[0] ? EXIT_RUNTIME : c->ck_fin[1] ? EXIT_INTERRUPTED : 0;
}

