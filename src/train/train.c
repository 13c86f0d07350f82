/* train.c — the library every method's step and the loop above them use (src/run/loop.c runs
 * the loop): a worker's local computation, evaluation, the progress lines and run-file rows,
 * the /ranks times and the end-of-run summary (one rank's part of a checkpoint is ckpt_rank.c's).
 * Nothing here decides when anything happens, closes the run file
 * or stops a rank: a failure becomes a return value.
 *
 * Time axis: time_s is the wall clock since training began with evaluation and checkpoint time
 * excluded, so curves of different methods compare training speed only
 * (Jin et al. 2016 Fig. 1/2 plot validation metrics against training wall-clock); in sim mode it
 * is the rank's virtual clock (vclock.h), the wall clock kept beside it. */
#include "train/train.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "train/checkpoint.h"
#include "util/util.h"

_Static_assert(sizeof(phase_times) == 7 * sizeof(double), "phase_times is stored as 7 doubles in checkpoints");

/* net on validation samples [begin, end): its mean loss and errors, over every worker's slice
 * when reduce = 1 (collective over the workers). abandon (reduce = 0 only; may be NULL): asked
 * after every batch; nonzero stops the evaluation, and the result has count = 0.
 * Decode-ahead (t->eval_x2 set: data.format = "jpeg", docs/data.md "Threads"): while the network
 * evaluates batch k from one buffer, the decode threads fill the other with batch k + 1
 * (loader_eval_start / _wait), and the buffers swap; without it, one batch at a time into
 * eval_x. The same samples in the same order, the same floats, the sums added in the same
 * order: the result is bitwise the same either way. On every way out (an error, abandon, the
 * end) no batch is left decoding into a buffer. */
static eval_result eval_range(trainer *t, model *net, int begin, int end, int reduce, int (*abandon)(void *), void *arg) {
    const dataset *v = t->val;
    loader *l = &t->train_loader;
    const int eb = t->eval_batch, ahead = t->eval_x2 != NULL;
    const size_t sample = (size_t)v->c * v->h * v->w;
    float *xs[2] = {t->eval_x, t->eval_x2};
    int *ys[2] = {t->eval_y, t->eval_y2};
    int cur = 0; /* the buffer of the batch evaluated now */
    double loss = 0;
    long top1 = 0, top5 = 0;
    int failed = 0;
    model_eval_begin(net); /* GPU in host sync mode: the host parameters and BN to the device */
    for (int i = begin; i < end; i += eb) {
        int cnt = end - i < eb ? end - i : eb;
        float *x = xs[cur];
        int *y = ys[cur];
        /* batch i into x: begun during the previous batch (ahead), or loaded now; a failed wait
         * ends the batch, a failed start leaves none under way */
        int st = !ahead ? loader_eval(l, v, i, cnt, x, y)
               : i == begin ? (loader_eval_start(l, v, i, cnt, x, y) || loader_eval_wait(l))
                            : loader_eval_wait(l);
        const int next = i + eb;
        if (!st && ahead && next < end)
            st = loader_eval_start(l, v, next, end - next < eb ? end - next : eb, xs[cur ^ 1], ys[cur ^ 1]);
        if (st) {
            fprintf(stderr, "dsgd-run: rank %d: data loading failed: %s\n", t->rank, loader_error(l));
            failed = 1;
            break;
        }
        /* Padding samples are never counted; zero them so they are harmless finite inputs. */
        if (cnt < eb) memset(x + (size_t)cnt * sample, 0, (size_t)(eb - cnt) * sample * sizeof(float));
        model_eval(net, x, y, cnt, &loss, &top1, &top5);
        if (i == begin) ckpt_poll_test_eval(t->step, t->rank); /* tests: a signal during evaluation */
        if (abandon && abandon(arg)) {
            loader_eval_cancel(l); /* the batch decoding ahead, if any */
            return (eval_result){.count = 0};
        }
        cur ^= ahead;
    }
    /* sums: loss, top-1 and top-5 hits, count, ranks whose loader failed (all ranks still meet here) */
    double s[5] = {loss, (double)top1, (double)top5, (double)(end - begin), (double)failed};
    if (reduce) comm_workers_sum_f64(s, 5);
    if (s[4] > 0) return (eval_result){.loss = NAN, .top1_error = NAN, .top5_error = NAN, .count = 0, .failed = 1};
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

/* Test hook DSGD_TEST_DATA_FAIL="<step>[@<world rank>]" (docs/testing.md): the loader of that
 * rank (default 0) fails at that 0-based step, as a read error would. */
static int test_data_fail(trainer *t, long step) {
    static long at = -2;
    static int rank = 0;
    if (at == -2) {
        const char *v = getenv("DSGD_TEST_DATA_FAIL");
        at = v && *v ? strtol(v, NULL, 10) : -1;
        const char *r = v ? strchr(v, '@') : NULL;
        rank = r ? atoi(r + 1) : 0;
    }
    if (at < 0 || step != at || t->rank != rank) return 0;
    snprintf(t->train_loader.err, sizeof t->train_loader.err, "DSGD_TEST_DATA_FAIL: step %ld", step);
    return 1;
}

int train_compute(trainer *t, long data_step, long step, double *loss) {
    double t0 = wall_time();
    const float *x;
    const int *y;
    /* the loader's own buffer where it has one (no copy), else t->x, t->y filled */
    if (test_data_fail(t, step) || loader_batch_view(&t->train_loader, data_step, t->x, t->y, &x, &y)) return -1;
    double t1 = wall_time();
    *loss = model_train_step(t->net, x, y);
    const double delay = inject_delay_s(&t->inj, step);
    inject_sleep(delay);
    double t2 = wall_time();
    t->times.data_s += t1 - t0;
    t->times.compute_s += t2 - t1 - delay;
    t->times.delay_s += delay;
    return 0;
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
    /* sim mode: time_s is simulated; the ETA is real (the wall clock of the row, t->vc.wall_s) */
    const double real_s = t->vc.on ? t->vc.wall_s : time_s;
    format_eta((real_s / (double)(step > 0 ? step : 1)) * (double)(total - step) + eval_mean * (double)(evals_total - t->n_evals),
               eta, sizeof eta);
    printf("step %*ld/%ld  epoch %6.2f  loss %.4f  α %-9.3g  %6.0f img/s%s  ETA %s\n", (int)snprintf(NULL, 0, "%ld", total), step,
           total, (double)step / (double)t->train_loader.steps_per_epoch, loss, alpha, ips, t->vc.on ? " (simulated)" : "", eta);
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

/* How a run stopped by a signal goes on: --resume, except where a resume is refused (sim mode's
 * server methods and asynchronous gossip: src/run/resume.c), whose checkpoint is still written (a
 * stop writes one in every method: exit 3's promise to job scripts) but cannot be continued
 * (docs/checkpoint.md, "Sim mode"). */
static const char *resume_hint(const experiment *e) {
    return config_sim_no_resume(e) ? "sim mode cannot resume this method yet (docs/simulate.md, Limits): its checkpoint cannot be "
                                     "continued; start it again under another output"
                                   : "continue with --resume (or resume = \"auto\")";
}

void train_log_summary(trainer *t, int status, int why, double train_s, int evaluation_excluded) {
    const long m = (long)t->e->p * t->e->b;
    double ips = train_s > 0 ? (double)(t->step * m) / train_s : 0.0;
    const char *how = status == EXIT_OK ? "done" : status == EXIT_INTERRUPTED ? "interrupted" : "stopped";
    if (t->vc.on) { /* sim mode: train_s is the virtual clock; the real one is t->vc.wall_s */
        printf("%s: %ld steps, %.3f s simulated training (%.1f s real%s), %.0f img/s simulated (m = %ld)\n", how, t->step, train_s,
               t->vc.wall_s, evaluation_excluded ? ", evaluation excluded" : "", ips, m);
        runlog_set_attr_double(t->log, "wall_train_time_s", t->vc.wall_s);
    } else
        printf("%s: %ld steps, %.1f s training%s, %.0f img/s (m = %ld)\n", how, t->step, train_s,
               evaluation_excluded ? " (evaluation excluded)" : "", ips, m);
    runlog_set_attr_double(t->log, "train_time_s", train_s);
    runlog_set_attr_double(t->log, "images_per_s", ips);
    runlog_set_attr_double(t->log, "steps_completed", (double)t->step);
    char sig[384], label[96] = "";
    if (t->last_ckpt > t->step) /* asynchronous gossip: each node stopped at its own step, the label is the largest */
        snprintf(label, sizeof label, " (rank 0's own step; the checkpoint is step-%ld, the nodes' largest)", t->last_ckpt);
    snprintf(sig, sizeof sig, "interrupted: %s after step %ld%s, checkpoint written; %s",
             ckpt_signal_name()[0] ? ckpt_signal_name() : "a signal", t->step, label, resume_hint(t->e));
    runlog_set_attr_string(t->log, "status", status == EXIT_OK              ? "completed"
                                            : status == EXIT_INTERRUPTED ? sig
                                            : why == STOPPED_NONFINITE ? "stopped: non-finite loss or gradient"
                                            : why == STOPPED_WORKERS   ? "stopped: fewer workers left than a step needs"
                                            : why == STOPPED_CHECKPOINT ? "stopped: a checkpoint could not be written"
                                            : why == STOPPED_DATA ? "stopped: data loading failed (see the log)"
                                                                       : "stopped: run-file write error");
}

int train_evaluate_and_log(trainer *t, long step, double train_s, int status, int *why) {
    double ev0 = wall_time();
    eval_result r = train_evaluate(t);
    if (r.failed) { /* a rank's loader failed (it said so): every rank knows from the same sum */
        *why = STOPPED_DATA;
        return EXIT_RUNTIME;
    }
    if (t->log && train_log_eval(t, step, train_s, &r, wall_time() - ev0, 0) != 0) status = EXIT_RUNTIME;
    /* A diverged model (e.g. BN running statistics overflowed) can train on finite losses yet
     * evaluate to NaN; the reduced loss is the same on every rank, so all stop together. */
    if (!isfinite(r.loss)) train_say_nonfinite_eval(t, why, step, "the model"), status = EXIT_RUNTIME;
    /* The log rank's output failure stops everyone together. */
    return comm_agree(status);
}

void train_say_nonfinite_loss(const trainer *t, int *why, int local, long done, double alpha, const char *then) {
    *why = STOPPED_NONFINITE;
    if (local || t->log)
        fprintf(stderr, "dsgd-run: rank %d: non-finite loss or gradient at step %ld (α = %.4g): %s; %s keeps what was logged. "
                        "Try a smaller alpha.base or a warm-up.\n", t->rank, done, alpha, then, t->e->output);
}

void train_say_nonfinite_eval(const trainer *t, int *why, long done, const char *what) {
    *why = STOPPED_NONFINITE;
    if (t->log)
        fprintf(stderr, "dsgd-run: non-finite validation loss at step %ld: %s diverged; stopping every rank; %s keeps what was "
                        "logged. Try a smaller alpha.base or a warm-up.\n", done, what, t->e->output);
}

void train_say_stopped(const trainer *t, long done) {
    printf("stopped by %s after step %ld; %s\n", ckpt_signal_name()[0] ? ckpt_signal_name() : "a signal on another rank", done,
           resume_hint(t->e));
    fflush(stdout);
}

const phase_times *train_axis_times(const trainer *t) { return t->vc.on ? &t->vc.v : &t->times; }

void train_gather_rank_times(trainer *t, phase_times *prev, long steps, double *buf, double *out) {
    const phase_times *c = train_axis_times(t);
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

