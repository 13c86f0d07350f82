/* train.c — the one training loop every worker rank runs (train_run; method.h says which entries
 * of a method it calls): α schedule, the method's step, progress lines, /train and /ranks rows,
 * evaluation, checkpoints and the non-finite stop when src/train/cadence.h says they are due; and
 * the helpers every method uses (the local computation, evaluation, logging, checkpoint files).
 * The server ranks of the methods with servers run their serve loop (src/methods/server.c,
 * method_ops.serve), which keeps the cadence for their workers with the same cadence and logging
 * functions.
 *
 * Time axis: time_s is the wall clock since training began with evaluation and checkpoint time
 * excluded, so curves of different methods compare training speed only
 * (Jin et al. 2016 Fig. 1/2 plot validation metrics against training wall-clock). */
#include "train/train.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "methods/method.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "util/util.h"

_Static_assert(sizeof(phase_times) == 7 * sizeof(double), "phase_times is stored as 7 doubles in checkpoints");

/* The loader could not deliver (a read error, a damaged pack, stuck decode threads): say so,
 * close the run file with that status on the log rank, and stop every rank now rather than let
 * the others wait comm_timeout_s at the next collective. */
static void data_failed(trainer *t) {
    fprintf(stderr, "dsgd-run: rank %d: data loading failed: %s; stopping every rank\n", t->rank, loader_error(&t->train_loader));
    if (t->log) {
        runlog_set_attr_string(t->log, "status", "stopped: data loading failed (see the log)");
        runlog_close(t->log);
        t->log = NULL;
    }
    comm_abort(EXIT_RUNTIME);
}

/* net on validation samples [begin, end): its mean loss and errors, over every worker's slice
 * when reduce = 1 (collective over the workers). abandon (reduce = 0 only; may be NULL): asked
 * after every batch; nonzero stops the evaluation, and the result has count = 0. */
static eval_result eval_range(trainer *t, model *net, int begin, int end, int reduce, int (*abandon)(void *), void *arg) {
    const dataset *v = t->val;
    const int eb = t->eval_batch;
    const size_t sample = (size_t)v->c * v->h * v->w;
    double loss = 0;
    long top1 = 0, top5 = 0;
    model_eval_begin(net); /* GPU in host sync mode: the host parameters and BN to the device */
    for (int i = begin; i < end; i += eb) {
        int cnt = end - i < eb ? end - i : eb;
        if (loader_eval(&t->train_loader, v, i, cnt, t->eval_x, t->eval_y)) data_failed(t);
        /* Padding samples are never counted; zero them so they are harmless finite inputs. */
        if (cnt < eb) memset(t->eval_x + (size_t)cnt * sample, 0, (size_t)(eb - cnt) * sample * sizeof(float));
        model_eval(net, t->eval_x, t->eval_y, cnt, &loss, &top1, &top5);
        if (i == begin) ckpt_poll_test_eval(t->step, t->rank); /* tests: a signal during evaluation */
        if (abandon && abandon(arg)) return (eval_result){.count = 0};
    }
    double s[4] = {loss, (double)top1, (double)top5, (double)(end - begin)}; /* sums: loss, top-1 and top-5 hits, count */
    if (reduce) comm_workers_sum_f64(s, 4);
    return (eval_result){.loss = s[0] / s[3], .top1_error = 1.0 - s[1] / s[3], .top5_error = 1.0 - s[2] / s[3], .count = (long)s[3]};
}

eval_result train_evaluate(trainer *t) {
    int begin, end;
    eval_slice(t->val->n, t->p, t->worker, &begin, &end);
    return eval_range(t, t->net, begin, end, 1, NULL, NULL);
}

eval_result train_evaluate_all(trainer *t, model *net, int (*abandon)(void *), void *arg) {
    return eval_range(t, net, 0, t->val->n, 0, abandon, arg);
}

double train_compute(trainer *t, long data_step, long step) {
    double t0 = wall_time();
    const float *x;
    const int *y;
    /* the loader's own buffer where it has one (no copy), else t->x, t->y filled */
    if (loader_batch_view(&t->train_loader, data_step, t->x, t->y, &x, &y)) data_failed(t);
    double t1 = wall_time();
    double loss = model_train_step(t->net, x, y);
    const double delay = inject_delay_s(&t->inj, step);
    inject_sleep(delay);
    double t2 = wall_time();
    t->times.data_s += t1 - t0;
    t->times.compute_s += t2 - t1 - delay;
    t->times.delay_s += delay;
    return loss;
}

/* The minibatch of data step ds into t->x, t->y, or nothing if it is staged on the device; then
 * the step begins on it. Returns the seconds spent assembling it. */
static double begin_step(trainer *t, long ds, int flags) {
    const int staged = model_staged_tag(t->net) == ds;
    const double t0 = wall_time();
    if (!staged && loader_batch(&t->train_loader, ds, t->x, t->y)) data_failed(t);
    const double d = staged ? 0.0 : wall_time() - t0;
    model_train_begin(t->net, staged ? NULL : t->x, staged ? NULL : t->y, flags);
    return d;
}

/* While the step runs: the minibatch of data step ds (>= 0) into the staging buffers and on its
 * way to the device. Returns the seconds spent assembling it. */
static double stage_next(trainer *t, long ds) {
    float *x;
    int *y;
    if (ds < 0 || !model_stage_buffers(t->net, &x, &y)) return 0.0;
    const double t0 = wall_time();
    if (loader_batch(&t->train_loader, ds, x, y)) data_failed(t);
    const double d = wall_time() - t0;
    model_stage_batch(t->net, ds);
    return d;
}

double train_compute_allreduce(trainer *t, long data_step, long step, long next_data_step, double *wait_s) {
    model *net = t->net;
    reducer *red = &t->red;
    if (!red->stage) {
        const double loss = train_compute(t, data_step, step);
        const double t0 = wall_time();
        reducer_mean(red, MODEL_GRADS, wait_s);
        t->times.comm_s += wall_time() - t0;
        return loss;
    }
    const double delay = inject_delay_s(&t->inj, step);
    inject_sleep(delay);
    t->times.delay_s += delay;
    const double t0 = wall_time();
    double data = begin_step(t, data_step, red->overlap ? MODEL_STAGE_GRADS : 0);
    data += stage_next(t, next_data_step);
    t->times.data_s += data;
    double waited = 0.0, t_computed, loss; /* waited: the barrier's seconds on the overlapped path */
    if (red->overlap) {
        reducer_grads_overlapped(red, wait_s ? &waited : NULL, &t_computed);
        loss = model_train_end(net);
    } else {
        loss = model_train_end(net);
        t_computed = wall_time();
        reducer_mean(red, MODEL_GRADS, wait_s);
    }
    const double t_end = wall_time();
    if (t_computed < 0) t_computed = t_end;
    if (wait_s) *wait_s += waited;
    t->times.compute_s += t_computed - t0 - data - waited;
    t->times.comm_s += t_end - t_computed + waited;
    return loss;
}

static void format_eta(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e12) { /* not yet measurable (the first steps), or beyond any job */
        snprintf(buf, n, "?");
        return;
    }
    long x = (long)(s + 0.5);
    if (x >= 3600) snprintf(buf, n, "%ldh%02ldm", x / 3600, (x / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", x / 60, x % 60);
}

/* A run-file write failed: say so now (the caller stops every rank at the next agreement point);
 * returns EXIT_RUNTIME. */
static int write_failed(const trainer *t) {
    fprintf(stderr, "dsgd-run: writing %s: %s\n", t->e->output, runlog_error(t->log));
    return EXIT_RUNTIME;
}

int train_log_train(trainer *t, long step, double time_s, double loss, double alpha, const double *rows) {
    const experiment *e = t->e;
    const long total = e->iterations, m = (long)e->p * e->b;
    const int p = t->p;
    int status = 0;
    if (runlog_train(t->log, step, time_s, loss, alpha) != 0 ||
        (rows && runlog_ranks(t->log, step, rows, rows + p, rows + 2 * p, rows + 3 * p, rows + 4 * p) != 0))
        status = write_failed(t);
    double ips = (double)((step - t->last_log_step) * m) / (time_s - t->last_log_s);
    char eta[32];
    /* Remaining training at the mean step time, plus the remaining evaluations at the mean
     * evaluation time (the first one not yet measured: guess the step 0 one). */
    const long evals_total = total / e->eval.every + (total % e->eval.every != 0);
    double eval_mean = t->n_evals ? t->eval_s_total / (double)t->n_evals : t->at_start_eval_s;
    format_eta((time_s / (double)(step > 0 ? step : 1)) * (double)(total - step) + eval_mean * (double)(evals_total - t->n_evals),
               eta, sizeof eta);
    printf("step %*ld/%ld  epoch %6.2f  loss %.4f  α %-9.3g  %6.0f img/s  ETA %s\n", (int)snprintf(NULL, 0, "%ld", total), step,
           total, (double)step / (double)t->train_loader.steps_per_epoch, loss, alpha, ips, eta);
    fflush(stdout);
    t->last_log_step = step;
    t->last_log_s = time_s;
    return status;
}

int train_log_eval(trainer *t, long step, double time_s, const eval_result *r, double eval_s, int local) {
    const double epoch = (double)step / (double)t->train_loader.steps_per_epoch;
    printf("eval%s step %ld  epoch %.2f  loss %.4f  top-1 error %.4f  top-5 error %.4f  (%ld images, %.1f s)\n",
           local ? " (rank 0's own model)" : "", step, epoch, r->loss, r->top1_error, r->top5_error, r->count, eval_s);
    fflush(stdout);
    if (!local && step > 0) {
        t->eval_s_total += eval_s;
        t->n_evals++;
    } else if (!local) t->at_start_eval_s = eval_s;
    int rc = local ? runlog_eval_local(t->log, step, time_s, epoch, r->loss, r->top1_error, r->top5_error)
                   : runlog_eval(t->log, step, time_s, epoch, r->loss, r->top1_error, r->top5_error);
    return rc != 0 ? write_failed(t) : 0;
}

void train_log_summary(trainer *t, int status, int why, double train_s) {
    const long m = (long)t->e->p * t->e->b;
    double ips = train_s > 0 ? (double)(t->step * m) / train_s : 0.0;
    printf("%s: %ld steps, %.1f s training%s, %.0f img/s (m = %ld)\n", status == EXIT_OK ? "done" : status == EXIT_INTERRUPTED ? "interrupted" : "stopped", t->step, train_s,
           !t->method->serve ? " (evaluation excluded)" : "", ips, m);
    runlog_set_attr_double(t->log, "train_time_s", train_s);
    runlog_set_attr_double(t->log, "images_per_s", ips);
    runlog_set_attr_double(t->log, "steps_completed", (double)t->step);
    char sig[256], label[96] = "";
    if (t->last_ckpt > t->step) /* asynchronous gossip: each node stopped at its own step, the label is the largest */
        snprintf(label, sizeof label, " (rank 0's own step; the checkpoint is step-%ld, the nodes' largest)", t->last_ckpt);
    snprintf(sig, sizeof sig, "interrupted: %s after step %ld%s, checkpoint written; continue with --resume",
             ckpt_signal_name()[0] ? ckpt_signal_name() : "a signal", t->step, label);
    runlog_set_attr_string(t->log, "status", status == EXIT_OK              ? "completed"
                                            : status == EXIT_INTERRUPTED ? sig
                                            : why == STOPPED_NONFINITE ? "stopped: non-finite loss or gradient"
                                            : why == STOPPED_WORKERS   ? "stopped: fewer workers left than a step needs"
                                            : why == STOPPED_CHECKPOINT ? "stopped: a checkpoint could not be written"
                                                                       : "stopped: run-file write error");
}

/* ---- checkpoints -------------------------------------------------------------------------- */

/* Both ways, in one order (ckpt_writing); what only a writer puts (threads, ISA, the data's
 * fingerprints, the experiment, the run file's rows) the resume's checks read (setup.c,
 * checkpoint_file.c). */
int train_ckpt_common(trainer *t, ckpt_file *f, loop_state *ls) {
    const int save = ckpt_writing(f);
    int64_t step = t->step, threads = omp_get_max_threads();
    int rc = ckpt_io_i64(f, "step", &step, 1) | ckpt_io_f64(f, "times", (double *)&t->times, 7);
    t->step = step;
    if (save)
        rc |= ckpt_put_i64(f, "threads", &threads, 1) | ckpt_put_str(f, "isa", nn_isa_name()) |
              ckpt_put_i64(f, "data_fingerprint", (const int64_t *)t->data_fp, 2);
    /* the JPEG decode counters (warnings, failures, samples named), so that a resume counts on */
    int64_t nd = save ? loader_save_stats(&t->train_loader, NULL, 0) : 0;
    if (!rc && !(rc = ckpt_io_i64(f, "data_stats_n", &nd, 1))) {
        if (nd < 0 || nd > ((int64_t)1 << 36)) return -1;
        int64_t *dv = xmalloc((size_t)(nd ? nd : 1) * sizeof *dv);
        if (save) loader_save_stats(&t->train_loader, dv, (long)nd);
        char err[ERRLEN];
        rc = ckpt_io_i64(f, "data_stats", dv, (size_t)nd);
        if (!rc && !save && loader_restore_stats(&t->train_loader, dv, (long)nd, err, sizeof err)) {
            fprintf(stderr, "dsgd-run: rank %d: resuming: %s\n", t->rank, err);
            rc = -1;
        }
        free(dv);
    }
    if (!t->log) return rc;
    if (save) {
        static char text[CFG_TEXT_MAX];
        config_to_text(t->e, text, sizeof text);
        runlog_rows rows;
        if (runlog_flush(t->log) != 0) {
            write_failed(t);
            return -1;
        }
        runlog_rows_written(t->log, &rows);
        const int64_t r[4] = {rows.train, rows.eval, rows.eval_local, rows.ranks};
        rc |= ckpt_put_str(f, "experiment", text) | ckpt_put_str(f, "dsgd_version", DSGD_VERSION) | ckpt_put_i64(f, "run_rows", r, 4);
    }
    double loop[4] = {ls->train_s, ls->loss_acc, (double)ls->loss_n, (double)ls->last_row};
    double prog[3] = {t->eval_s_total, (double)t->n_evals, t->at_start_eval_s};
    rc |= ckpt_io_f64(f, "loop", loop, 4) | ckpt_io_f64(f, "loop_prev_times", (double *)&ls->prev, 7) | ckpt_io_f64(f, "progress", prog, 3);
    if (save) return rc;
    ls->train_s = loop[0], ls->loss_acc = loop[1], ls->loss_n = (long)loop[2], ls->last_row = (long)loop[3];
    t->eval_s_total = prog[0], t->n_evals = (long)prog[1], t->at_start_eval_s = prog[2];
    t->last_log_step = t->resume_label;
    t->last_log_s = ls->train_s;
    return rc;
}

int ckpt_write_rank(trainer *t, long label, loop_state *ls, ckpt_part_fn part, void *ctx, char *err, size_t errlen) {
    ckpt_file *f = ckpt_create(t->ckpt_dir, label, t->rank, err, errlen);
    if (!f) return -1;
    if (train_ckpt_common(t, f, ls) || (part && part(ctx, f)) || ckpt_close(f))
        snprintf(err, errlen, "%s", ckpt_error(f)[0] ? ckpt_error(f) : "run file flush failed");
    ckpt_free(f);
    return err[0] ? -1 : 0;
}

int ckpt_read_rank(trainer *t, long label, loop_state *ls, ckpt_part_fn part, void *ctx, char *err, size_t errlen) {
    ckpt_file *f = ckpt_open(t->ckpt_dir, label, t->rank, err, errlen);
    if (!f) return -1;
    if (train_ckpt_common(t, f, ls) || (part && part(ctx, f)))
        snprintf(err, errlen, "%s", ckpt_error(f)[0] ? ckpt_error(f) : "the checkpoint's state is inconsistent with the experiment");
    ckpt_free(f);
    return err[0] ? -1 : 0;
}

void ckpt_say_written(const trainer *t, long label, double seconds) {
    printf("checkpoint: step %ld written to %s/step-%ld (%.2f s)\n", label, t->ckpt_dir, label, seconds);
    fflush(stdout);
}

/* The method's save / load entry as a ckpt_part_fn (ctx: the trainer). */
static int method_save(void *ctx, ckpt_file *f) {
    trainer *t = ctx;
    return t->method->save ? t->method->save(t, f) : 0;
}
static int method_load(void *ctx, ckpt_file *f) {
    trainer *t = ctx;
    return t->method->load ? t->method->load(t, f) : 0;
}

int train_checkpoint(trainer *t, long label, const loop_state *ls) {
    char err[ERRLEN] = "";
    const double t0 = wall_time();
    if (t->method->quiesce) t->method->quiesce(t);
    int st = t->rank == 0 && ckpt_prepare(t->ckpt_dir, label, err, sizeof err) ? EXIT_RUNTIME : 0;
    if (comm_agree(st)) {
        if (t->rank == 0) fprintf(stderr, "dsgd-run: checkpoint at step %ld not written: %s\n", label, err);
        return EXIT_RUNTIME;
    }
    st = ckpt_write_rank(t, label, (loop_state *)ls, method_save, t, err, sizeof err) ? EXIT_RUNTIME : 0;
    if (st) fprintf(stderr, "dsgd-run: rank %d: checkpoint at step %ld: %s\n", t->rank, label, err);
    st = comm_agree(st);
    if (t->rank == 0) {
        if (st) ckpt_abandon(t->ckpt_dir, label);
        else if (ckpt_commit(t->ckpt_dir, label, err, sizeof err)) {
            fprintf(stderr, "dsgd-run: checkpoint at step %ld not committed: %s\n", label, err);
            st = EXIT_RUNTIME;
        }
    }
    st = comm_agree(st);
    if (!st) t->last_ckpt = label;
    if (t->log && !st) ckpt_say_written(t, label, wall_time() - t0);
    return st;
}

int train_resume(trainer *t, loop_state *ls) {
    char err[ERRLEN] = "";
    int st = ckpt_read_rank(t, t->resume_label, ls, method_load, t, err, sizeof err) ? EXIT_BADINPUT : 0;
    if (st) fprintf(stderr, "dsgd-run: rank %d: resuming: %s\n", t->rank, err);
    return comm_max_int(st);
}

int train_evaluate_and_log(trainer *t, long step, double train_s, int status, int *why) {
    double ev0 = wall_time();
    eval_result r = train_evaluate(t);
    if (t->log && train_log_eval(t, step, train_s, &r, wall_time() - ev0, 0) != 0) status = EXIT_RUNTIME;
    /* A diverged model (e.g. BN running statistics overflowed) can train on finite losses yet
     * evaluate to NaN; the reduced loss is the same on every rank, so all stop together. */
    if (!isfinite(r.loss)) cadence_nonfinite_eval(t, why, step, "the model"), status = EXIT_RUNTIME;
    /* The log rank's output failure stops everyone together. */
    return comm_agree(status);
}

void train_gather_rank_times(trainer *t, phase_times *prev, long steps, double *buf, double *out) {
    const phase_times *c = &t->times;
    const double n = (double)steps;
    double mine[5] = {(c->step_s - prev->step_s) / n, (c->compute_s - prev->compute_s) / n, (c->comm_s - prev->comm_s) / n,
                      (c->wait_s - prev->wait_s) / n, (c->data_s - prev->data_s) / n};
    if (steps == 0) mine[0] = mine[1] = mine[2] = mine[3] = mine[4] = NAN;
    *prev = *c;
    comm_workers_gather_f64(mine, 5, buf);
    if (t->worker == 0)
        for (int r = 0; r < t->p; r++)
            for (int k = 0; k < 5; k++) out[k * t->p + r] = buf[r * 5 + k];
}

int train_run(trainer *t) {
    const method_ops *M = t->method;
    if (M->run) return M->run(t);
    if (t->worker < 0) return M->serve(t);
    int status = M->begin ? M->begin(t) : EXIT_OK;
    if (status != EXIT_OK) return status;
    int (*evaluate)(trainer *, long, double, int, int *) = M->evaluate ? M->evaluate : train_evaluate_and_log;
    const experiment *e = t->e;
    int local = EXIT_OK;        /* meets = 1: a problem of this rank, agreed at the next evaluation */
    int why = STOPPED_WRITE;
    loop_state ls = {.prev = t->times};
    double *gbuf = xmalloc((size_t)t->p * 5 * sizeof(double)), *rows = xmalloc((size_t)t->p * 5 * sizeof(double));

    /* servers: begin read this worker's checkpoint; server 0 evaluates */
    const int servers = M->meets == METHOD_MEETS_SERVERS; /* the servers keep the cadence (method.h) */
    if (!servers && t->resume_label >= 0) { /* continue where the checkpoint stood: no evaluation at start */
        status = train_resume(t, &ls);
        /* The first /ranks row covers the steps since the resume, on every rank (only the log
         * rank's file holds where the last row stood). */
        ls.prev = t->times, ls.last_row = t->step;
    } else if (!servers && e->eval.at_start) status = evaluate(t, 0, 0.0, EXIT_OK, &why);
    if (M->meets == METHOD_MEETS_AT_POINTS) comm_workers_barrier();
    else comm_barrier(); /* the whole world starts together */
    double seg = wall_time(); /* the time axis: training wall clock, evaluations and checkpoints excluded */
    /* From step 0 or where the checkpoint stood (gossip: this node's own step, as a checkpoint
     * after a signal cuts each node at its own). */
    for (long s = t->step; status == EXIT_OK && (s < e->iterations || servers); s++) {
        const double alpha = alpha_at(e, s);
        ckpt_poll_test(s + 1, t->rank); /* tests: a signal during step s + 1 */
        const step_out o = M->step(t, s, alpha);
        const int took = o.took;
        const double loss = o.loss;
        if (took == METHOD_STEP_END) break;
        if (took && !isfinite(loss) && !M->meets) { /* the same mean loss on every rank: all stop here */
            ls.train_s += wall_time() - seg;
            cadence_nonfinite_loss(t, &why, 0, s + 1, alpha, "stopping every rank");
            status = EXIT_RUNTIME;
            break;
        }
        if (took && !isfinite(loss)) { /* a diverged node keeps stepping (in lock-step its peers need
                                           it); the evaluation of the NaN average stops everyone */
            if (why != STOPPED_NONFINITE) cadence_nonfinite_loss(t, &why, 1, s + 1, alpha, "every rank stops at the next evaluation");
            local = EXIT_RUNTIME;
        }
        t->step = s + 1;
        if (took) ls.loss_acc += loss, ls.loss_n++;
        if (servers) continue; /* the servers' replies log, evaluate, checkpoint and stop */

        if (cadence_log_due(e, s + 1)) {
            const double now = ls.train_s + (wall_time() - seg);
            if (!M->meets) train_gather_rank_times(t, &ls.prev, s + 1 - ls.last_row, gbuf, rows), ls.last_row = s + 1;
            if (t->log && ls.loss_n && train_log_train(t, s + 1, now, ls.loss_acc / (double)ls.loss_n, alpha, M->meets ? NULL : rows) != 0)
                local = EXIT_RUNTIME;
            if (ls.loss_n) ls.loss_acc = 0.0, ls.loss_n = 0;
            if (!M->meets && (status = comm_agree(local)) != EXIT_OK) break; /* lock-step: a write error stops every rank now */
        }

        /* A signal here or on another node: meet at the step the method names. */
        const int sigmeet = M->signal ? M->signal(t, s + 1) : 0;
        const int eval = cadence_eval_due(e, s + 1), periodic = cadence_ckpt_due(e, s + 1);
        if (eval) {
            /* The nodes meet: waiting here for slower nodes is training time (an average over the
             * nodes exists only once every node has done s + 1 steps); the evaluation is not. */
            if (M->meets) comm_workers_barrier();
            ls.train_s += wall_time() - seg;
            status = evaluate(t, s + 1, ls.train_s, local, &why);
            seg = wall_time();
            if (status != EXIT_OK) break;
        }
        /* A checkpoint every checkpoint.every steps, and when a signal asked for one (lock-step:
         * the step agreed on t->sig; meets: the meeting point did), so every rank decides alike. */
        long label = s + 1;
        if (M->meet && (eval || periodic || sigmeet)) label = M->meet(t, s + 1, sigmeet);
        if (periodic || t->sig) {
            if (M->meets) comm_workers_barrier();
            ls.train_s += wall_time() - seg;
            if ((status = cadence_checkpoint(t, &why, label, &ls)) != EXIT_OK) break;
            seg = wall_time();
        }
    }
    free(gbuf), free(rows);
    if (M->end) status = M->end(t, status);
    if (t->log) {
        const double steps = t->step > 0 ? (double)t->step : 1.0;
        const phase_times *ph = &t->times;
        train_log_summary(t, status, why, ls.train_s);
        printf("rank 0 time per step: data %.2f ms, compute %.2f ms, communication %.2f ms (waiting %.2f ms), update %.2f ms\n",
               1e3 * ph->data_s / steps, 1e3 * ph->compute_s / steps, 1e3 * ph->comm_s / steps, 1e3 * ph->wait_s / steps,
               1e3 * ph->update_s / steps);
    }
    return status;
}
