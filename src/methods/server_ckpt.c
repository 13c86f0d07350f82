/* server_ckpt.c — a server of the methods with servers saves itself: its own state in its file
 * of a checkpoint (through the one writer and reader, ckpt_write_rank / ckpt_read_rank), its part
 * in the round (server 0 leads it, server k > 0 takes part: the pause protocol, server_pause.c),
 * and server 0's average of the workers' BN statistics that the center is evaluated (and saved)
 * with. server.c's loop calls it; it calls nothing of server.c. */
#define _GNU_SOURCE
#include "server_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint.h"
#include "train/ckpt_rank.h"
#include "util/util.h"

/* Server 0: bn := the mean of the latest BN statistics of the workers that have sent some and
 * have not failed (inject.fail_rank, or given up on), summed in worker order as Σ_i (x_i / cnt) in
 * float; unchanged when there is no such worker. Reads only the stable copies (bnlast), never a
 * buffer with a receive posted. */
void srv_bn_average(const srv *sv, float *bn, size_t nbn) {
    int cnt = 0;
    for (int i = 0; i < sv->p; i++) cnt += sv->seen_bn[i] && !sv->failed[i];
    if (!cnt) return;
    memset(bn, 0, nbn * sizeof(float));
    for (int i = 0; i < sv->p; i++)
        if (sv->seen_bn[i] && !sv->failed[i])
            for (size_t j = 0; j < nbn; j++) bn[j] += sv->bnlast[i][j] / (float)cnt;
}

/* Server 0's part of its state in f (server_state): the workers' BN statistics and headers, the
 * evaluations a stop request left undone, the rule's records. failed, seen: (p) packed by the caller. */
static int server0_state(server_ctx *c, ckpt_file *f, int64_t *failed, int64_t *seen) {
    srv *sv = &c->sv;
    trainer *t = sv->t;
    const int p = sv->p, save = ckpt_writing(f);
    const size_t nbn = model_n_bn(t->net);
    /* s0[2]: the evaluations a stop request left undone (1: the abandoned one, its center and BN
     * statistics in the model; 2: an assembled snapshot waiting for the evaluator), done after the resume */
    int64_t s0[3] = {c->last_eval, c->q.skipped, (int64_t)(c->q.abandoned ? 1 : 0) | (c->q.ready ? 2 : 0)};
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
    int rc = ckpt_io_i64(f, "failed", failed, (size_t)p) || (save && ckpt_put_f32(f, "bn_average", avg, nbn)) ||
             ckpt_io_i64(f, "server0", s0, 3) || ckpt_io_f64(f, "worker_headers", hd, (size_t)p * 10) ||
             ckpt_io_f32(f, "worker_bn", bn, (size_t)p * nbn) || ckpt_io_i64(f, "seen_bn", seen, (size_t)p);
    if (!rc && !save && (s0[2] < 0 || s0[2] > 3)) rc = -1;
    if (!rc && s0[2]) { /* the evaluations to do again: labels and times, centers (and the abandoned one's BN) */
        double pe[4] = {(double)c->q.eval_label, c->q.eval_time, (double)c->q.label, c->q.time_s};
        rc = ckpt_io_f64(f, "pending_eval", pe, 4) ||
             ((s0[2] & 1) && (ckpt_io_f32(f, "abandoned_center", model_params(t->net), model_n_params(t->net)) ||
                              ckpt_io_f32(f, "abandoned_bn", model_bn(t->net), nbn))) ||
             ((s0[2] & 2) && ckpt_io_f32(f, "waiting_center", c->snap, model_n_params(t->net)));
        if (!rc && !save) {
            c->q.abandoned = (int)(s0[2] & 1), c->q.eval_label = (long)pe[0], c->q.eval_time = pe[1];
            c->q.ready = (int)(s0[2] >> 1 & 1), c->q.label = (long)pe[2], c->q.time_s = pe[3];
            const long top = (long)t->e->iterations;
            if ((c->q.abandoned && (c->q.eval_label < 0 || c->q.eval_label > top)) || (c->q.ready && (c->q.label < 0 || c->q.label > top)))
                rc = -1; /* iterations this run cannot have */
        }
    }
    rc = rc || (sv->rules->records_io && sv->rules->records_io(sv, f));
    c->last_eval = (long)s0[0], c->q.skipped = (long)s0[1];
    for (int i = 0; i < p; i++) {
        msg_hdr *h[2] = {&c->last[i], &c->prev[i]};
        for (int q = 0; q < 2; q++) {
            const double *d = hd + (size_t)(q * p + i) * 5;
            h[q]->steps = (int64_t)d[0], h[q]->step_s = d[1], h[q]->compute_s = d[2], h[q]->comm_s = d[3], h[q]->wait_s = d[4];
        }
        if (nbn && sv->bnlast[i]) memcpy(sv->bnlast[i], bn + (size_t)i * nbn, nbn * sizeof(float));
    }
    free(hd), free(bn), free(avg);
    return rc;
}

/* This server's own state in checkpoint file f (a ckpt_part_fn; ctx: the server_ctx), written or
 * read back (ckpt_writing) in one order: packed, written or read, unpacked (unchanged when
 * writing). 0 or -1 (the message in f; none for a value this run cannot have). */
static int server_state(void *ctx, ckpt_file *f) {
    server_ctx *c = ctx;
    srv *sv = &c->sv;
    const int p = sv->p;
    int64_t cnt[4] = {sv->version, sv->steps_total, sv->live, sv->diverged};
    int64_t *v = xmalloc((size_t)p * 4 * sizeof(int64_t)); /* last_steps, left, seen_bn, failed */
    for (int i = 0; i < p; i++) v[i] = sv->last_steps[i], v[p + i] = sv->left[i], v[2 * p + i] = sv->seen_bn[i], v[3 * p + i] = sv->failed[i];
    int rc = ckpt_io_i64(f, "counters", cnt, 4) || ckpt_io_f32(f, "center", sv->center, sv->n) || ckpt_io_f32(f, "velocity", sv->vel, sv->n) ||
             ckpt_io_i64(f, "last_steps", v, (size_t)p) || ckpt_io_i64(f, "left", v + p, (size_t)p);
    if (!rc && sv->k == 0) rc = server0_state(c, f, v + 3 * p, v + 2 * p);
    sv->version = cnt[0], sv->steps_total = (long)cnt[1], sv->live = (int)cnt[2], sv->diverged = (int)cnt[3];
    for (int i = 0; i < p; i++)
        sv->last_steps[i] = (long)v[i], sv->left[i] = (char)v[p + i], sv->seen_bn[i] = (char)v[2 * p + i], sv->failed[i] = (char)v[3 * p + i];
    free(v);
    return rc;
}

/* The pause protocol's write callback: this server's file of checkpoint `label` (server 0: with
 * the run file's loop state). Returns 0 or EXIT_RUNTIME (printed). */
int server_write(void *ctx, long label) {
    server_ctx *c = ctx;
    trainer *t = c->sv.t;
    loop_state ls = {.train_s = wall_time() - c->t_start, .loss_acc = c->loss_sum, .loss_n = c->n_loss, .last_row = c->last_row};
    char err[ERRLEN] = "";
    if (ckpt_write_rank(t, label, c->sv.k == 0 ? &ls : NULL, server_state, c, err, sizeof err) == 0) return 0;
    fprintf(stderr, "dsgd-run: rank %d: checkpoint: %s\n", t->rank, err);
    return EXIT_RUNTIME;
}

/* This server's part of checkpoint `label` read back. Returns 0 or EXIT_BADINPUT (printed). */
int server_read(server_ctx *c, long label) {
    trainer *t = c->sv.t;
    loop_state ls = {0};
    char err[ERRLEN] = "";
    if (ckpt_read_rank(t, label, c->sv.k == 0 ? &ls : NULL, server_state, c, err, sizeof err) != 0) {
        fprintf(stderr, "dsgd-run: rank %d: resuming: %s\n", t->rank, err);
        return EXIT_BADINPUT;
    }
    if (c->sv.k == 0) c->loss_sum = ls.loss_acc, c->n_loss = ls.loss_n, c->last_row = ls.last_row;
    if (c->sv.k == 0) c->t_start = -ls.train_s; /* made absolute when training starts (server_loop) */
    return 0;
}

/* Forget the pause after a checkpoint round. */
static void srv_unpause(srv *sv) {
    memset(sv->paused, 0, (size_t)sv->p);
    sv->n_paused = 0, sv->pausing = 0, sv->want = CKPT_SIG_NONE;
    ckpt_signal_clear_save();
}

/* Server 0 in the round (pause_lead's tell): servers 1..S-1 write their files of `label` too
 * (SNAP_CKPT on the snapshot channel, which their loop listens to). */
static void tell_servers(void *ctx, long label, int ok) {
    server_ctx *c = ctx;
    srv *sv = &c->sv;
    for (int k = 1; k < sv->S; k++) {
        comm_set_wait_or_abort(sv->set, c->s_req[k], "a parameter server (checkpoint)");
        c->sreq_out[k] = (msg_hdr){.version = SNAP_CKPT, .steps = label, .stop = ok};
        comm_set_start(sv->set, c->s_req[k]);
    }
}

/* Server 0, every live worker paused and no evaluation pending: the checkpoint round at its
 * iteration count. Returns 0 (go on), EXIT_INTERRUPTED (stop) or EXIT_RUNTIME (not written). */
int server0_round(server_ctx *c) {
    srv *sv = &c->sv;
    const double t0 = wall_time();
    const int st = pause_lead(&c->pause, srv_iteration(sv), sv->paused, sv->want == CKPT_SIG_STOP, tell_servers);
    if (st == EXIT_RUNTIME) c->why = STOPPED_CHECKPOINT;
    srv_unpause(sv);
    c->t_start += wall_time() - t0; /* a checkpoint is not training time */
    return st;
}

/* Server k > 0, asked by server 0 and every live worker paused: its part of the round. */
int server_part(server_ctx *c) {
    const long label = c->go;
    c->go = -1;
    pause_arm(&c->pause);
    const int st = pause_part(&c->pause, label, c->go_ok);
    srv_unpause(&c->sv);
    return st;
}
