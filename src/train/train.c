/* train.c — the training loop (see train.h): α schedule, the method's step, progress lines,
 * /train rows, evaluation every eval.every steps and at the end, and the non-finite stop.
 *
 * Time axis: time_s is the wall clock since training began with evaluation time excluded, so
 * curves of different methods compare training speed only (Jin et al. 2016 Fig. 1/2 plot
 * validation metrics against training wall-clock). */
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "methods/method.h"
#include "optim/sgd.h"
#include "util/util.h"

eval_result train_evaluate(trainer *t) {
    const dataset *v = t->val;
    const int eb = t->eval_batch;
    const size_t sample = (size_t)v->c * v->h * v->w;
    int begin, end;
    eval_slice(v->n, t->p, t->rank, &begin, &end);

    double sums[4] = {0, 0, 0, (double)(end - begin)}; /* loss, top1 correct, top5 correct, count */
    long top1 = 0, top5 = 0;
    int *idx = t->eval_idx;
    for (int i = begin; i < end; i += eb) {
        int cnt = end - i < eb ? end - i : eb;
        for (int j = 0; j < cnt; j++) idx[j] = i + j;
        loader_gather(&t->train_loader, v, idx, cnt, t->eval_x, t->eval_y);
        /* Padding samples are never counted; zero them so they are harmless finite inputs. */
        if (cnt < eb) memset(t->eval_x + (size_t)cnt * sample, 0, (size_t)(eb - cnt) * sample * sizeof(float));
        model_eval(t->net, t->eval_x, t->eval_y, cnt, &sums[0], &top1, &top5);
    }
    sums[1] = (double)top1;
    sums[2] = (double)top5;
    comm_allreduce_sum_f64(sums, 4);
    eval_result r = {
        .loss = sums[0] / sums[3],
        .top1_error = 1.0 - sums[1] / sums[3],
        .top5_error = 1.0 - sums[2] / sums[3],
        .count = (long)sums[3],
    };
    return r;
}

static void format_eta(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e7) s = 0;
    long x = (long)(s + 0.5);
    if (x >= 3600) snprintf(buf, n, "%ldh%02ldm", x / 3600, (x / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", x / 60, x % 60);
}

/* Evaluate the model the method designates (collective) after `step` steps and `train_s`
 * seconds of training; rank 0 prints and appends the /eval row. Returns the status all ranks
 * agree on: the worst of every rank's `status` and rank 0's run-file writes. */
static int evaluate_and_log(trainer *t, long step, double train_s, int status, int *nonfinite) {
    const double epoch = (double)step / (double)t->train_loader.steps_per_epoch;
    t->method->eval_prepare(t);
    double ev0 = wall_time();
    eval_result r = train_evaluate(t);
    if (t->rank == 0) {
        printf("eval step %ld  epoch %.2f  loss %.4f  top-1 error %.4f  top-5 error %.4f  (%ld images, %.1f s)\n", step,
               epoch, r.loss, r.top1_error, r.top5_error, r.count, wall_time() - ev0);
        fflush(stdout);
        if (runlog_eval(t->log, step, train_s, epoch, r.loss, r.top1_error, r.top5_error) != 0) {
            fprintf(stderr, "dsgd-run: writing %s: %s\n", t->e->output, runlog_error(t->log));
            status = EXIT_RUNTIME;
        }
    }
    /* A diverged model (e.g. BN running statistics overflowed) can train on finite losses yet
     * evaluate to NaN; the reduced loss is the same on every rank, so all stop together. */
    if (!isfinite(r.loss)) {
        if (t->rank == 0)
            fprintf(stderr, "dsgd-run: non-finite validation loss at step %ld: the model diverged; stopping every rank; "
                            "%s keeps what was logged. Try a smaller alpha.base or a warm-up.\n",
                    step, t->e->output);
        *nonfinite = 1;
        status = EXIT_RUNTIME;
    }
    /* Rank 0's output failure stops everyone together. */
    return comm_max_int(status);
}

int train_run(trainer *t) {
    const experiment *e = t->e;
    const long total = e->iterations;
    const long m = (long)e->p * e->b;
    const long spe = t->train_loader.steps_per_epoch;
    const int r0 = t->rank == 0;
    int status = EXIT_OK, nonfinite = 0;

    double train_s = 0.0;       /* training wall clock, evaluation excluded */
    double loss_acc = 0.0;      /* mean loss over the steps since the last /train row */
    long loss_n = 0, last_log_step = 0;
    double last_log_s = 0.0;    /* training clock at the last row (the img/s window) */
    double eval_s_total = 0.0;  /* wall clock spent in evaluations so far, for the ETA */
    long n_evals = 0;
    const long evals_total = total / e->eval.every + (total % e->eval.every != 0);

    double at_start_eval_s = 0.0;
    if (e->eval.at_start) {
        const double ev0 = wall_time();
        status = evaluate_and_log(t, 0, 0.0, EXIT_OK, &nonfinite);
        at_start_eval_s = wall_time() - ev0;
    }

    comm_barrier();
    double seg_start = wall_time();
    for (long s = 0; status == EXIT_OK && s < total; s++) {
        const double alpha = alpha_at(e, s);
        const double loss = t->method->step(t, s, alpha);
        if (!isfinite(loss)) {
            train_s += wall_time() - seg_start;
            if (r0)
                fprintf(stderr,
                        "dsgd-run: non-finite loss or gradient at step %ld (α = %.4g): stopping every rank; "
                        "%s keeps what was logged. Try a smaller alpha.base or a warm-up.\n",
                        s + 1, alpha, e->output);
            status = EXIT_RUNTIME;
            nonfinite = 1;
            break;
        }
        t->step = s + 1;
        loss_acc += loss;
        loss_n++;

        const int last = (s + 1 == total);
        if ((s + 1) % e->log_every == 0 || last) {
            double now = train_s + (wall_time() - seg_start);
            double mean_loss = loss_acc / (double)loss_n;
            if (r0) {
                if (runlog_train(t->log, s + 1, now, mean_loss, alpha) != 0) {
                    /* Reported now; every rank stops together at the next evaluation. */
                    fprintf(stderr, "dsgd-run: writing %s: %s\n", e->output, runlog_error(t->log));
                    status = EXIT_RUNTIME;
                }
                double ips = (double)((s + 1 - last_log_step) * m) / (now - last_log_s);
                char eta[32];
                /* Remaining training at the mean step time, plus the remaining evaluations at
                 * the mean evaluation time (the first one not yet measured: guess the step 0 one). */
                double eval_mean = n_evals ? eval_s_total / (double)n_evals : at_start_eval_s;
                format_eta((now / (double)(s + 1)) * (double)(total - s - 1) + eval_mean * (double)(evals_total - n_evals),
                           eta, sizeof eta);
                printf("step %*ld/%ld  epoch %6.2f  loss %.4f  α %-9.3g  %6.0f img/s  ETA %s\n", (int)snprintf(NULL, 0, "%ld", total),
                       s + 1, total, (double)(s + 1) / (double)spe, mean_loss, alpha, ips, eta);
                fflush(stdout);
            }
            loss_acc = 0.0;
            loss_n = 0;
            last_log_step = s + 1;
            last_log_s = now;
        }

        if ((s + 1) % e->eval.every == 0 || last) {
            train_s += wall_time() - seg_start;
            const double ev0 = wall_time();
            status = evaluate_and_log(t, s + 1, train_s, status, &nonfinite);
            if (status != EXIT_OK) break;
            seg_start = wall_time();
            eval_s_total += wall_time() - ev0;
            n_evals++;
        }
    }
    t->method->finalize(t);

    if (r0) {
        double ips = t->step > 0 ? (double)(t->step * m) / train_s : 0.0;
        const double steps = t->step > 0 ? (double)t->step : 1.0;
        const phase_times *ph = &t->times;
        printf("%s: %ld steps, %.1f s training (evaluation excluded), %.0f img/s (m = %ld)\n", status == EXIT_OK ? "done" : "stopped",
               t->step, train_s, ips, m);
        printf("rank 0 time per step: data %.2f ms, compute %.2f ms, communication %.2f ms, update %.2f ms\n",
               1e3 * ph->data_s / steps, 1e3 * ph->compute_s / steps, 1e3 * ph->comm_s / steps, 1e3 * ph->update_s / steps);
        runlog_set_attr_double(t->log, "train_time_s", train_s);
        runlog_set_attr_double(t->log, "images_per_s", ips);
        runlog_set_attr_double(t->log, "steps_completed", (double)t->step);
        runlog_set_attr_string(t->log, "status", status == EXIT_OK ? "completed"
                                                      : nonfinite ? "stopped: non-finite loss or gradient"
                                                                  : "stopped: run-file write error");
    }
    return status;
}
