/* loop.c — the one training loop (loop.h): the method's step every iteration, and the decisions
 * around it — a /train row, an evaluation, a meeting, a checkpoint when src/train/cadence.h says
 * they are due; the stop on a non-finite loss, a failed write or load, or a signal; the summary.
 * A step returns what happened (step_out) and this file alone acts on it. */
#include "run/loop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "methods/method.h"
#include "optim/sgd.h"
#include "train/cadence.h"
#include "train/checkpoint.h"
#include "train/ckpt_rank.h"
#include "util/util.h"

_Static_assert(sizeof(phase_times) == 7 * sizeof(double), "phase_times is stored as 7 doubles in checkpoints");

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
    st = ckpt_write_rank(t, label, ls, method_save, t, err, sizeof err) ? EXIT_RUNTIME : 0;
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

/* The checkpoint at `label` and what the signal that may have asked for it wants. Returns 0 (go
 * on; a save request is cleared), EXIT_INTERRUPTED (a stop signal: said once) or EXIT_RUNTIME (not
 * written: *why). Collective over the world. */
static int loop_checkpoint(trainer *t, int *why, long label, const loop_state *ls) {
    const int st = train_checkpoint(t, label, ls);
    if (st != EXIT_OK) *why = STOPPED_CHECKPOINT;
    if (st == EXIT_OK && t->sig == CKPT_SIG_STOP && label >= t->e->iterations) {
        /* taken after the last step (sim-mode gossip takes every signal at a meeting point, the
         * end among them): nothing is left to continue, the run is complete */
        if (t->log) printf("%s after the last step: the run is complete\n", ckpt_signal_name());
        return EXIT_OK;
    }
    if (st == EXIT_OK && t->sig == CKPT_SIG_STOP) {
        if (t->log) train_say_stopped(t, label);
        return EXIT_INTERRUPTED;
    }
    if (t->sig == CKPT_SIG_SAVE) ckpt_signal_clear_save(), t->sig = CKPT_SIG_NONE;
    return st;
}

/* The loop's own state on this rank. */
typedef struct {
    loop_state ls;
    int (*evaluate)(trainer *, long, double, int, int *);
    int lockstep;        /* no meet: every step is collective (allreduce) */
    int begun;           /* the method's begin succeeded: its end is due */
    int local;           /* meeting points: a problem of this rank, agreed at the next evaluation */
    int why;             /* STOPPED_* */
    double seg;          /* wall clock when the current stretch of training began */
    double *gbuf, *rows; /* (5·p) /ranks scratch and rows */
} loop_ctx;

/* Training time so far (evaluations and checkpoints excluded) banked, before one of them. */
static void loop_pause(loop_ctx *c) { c->ls.train_s += wall_time() - c->seg; }

/* The run file's time for a row or an evaluation at real training time real_s: real_s, or in sim
 * mode the virtual clock (docs/simulate.md), real_s then kept beside it (the wall_s columns, the
 * ETA). */
static double loop_axis(trainer *t, double real_s) {
    if (!t->vc.on) return real_s;
    t->vc.wall_s = real_s;
    if (t->log) runlog_wall(t->log, real_s);
    return t->vc.now;
}

/* The method's begin; the resume or the evaluation at step 0; the world starts together. */
static int loop_begin(trainer *t, loop_ctx *c) {
    const method_ops *M = t->method;
    *c = (loop_ctx){.ls = {.prev = *train_axis_times(t)}, .evaluate = M->evaluate ? M->evaluate : train_evaluate_and_log, .lockstep = !M->meet,
                    .why = STOPPED_WRITE};
    int st = M->begin ? M->begin(t) : EXIT_OK;
    if (st != EXIT_OK) return st;
    c->begun = 1;
    c->gbuf = xmalloc((size_t)t->p * 5 * sizeof(double)), c->rows = xmalloc((size_t)t->p * 5 * sizeof(double));
    if (t->resume_label >= 0) { /* continue where the checkpoint stood: no evaluation at start */
        st = train_resume(t, &c->ls);
        /* The first /ranks row covers the steps since the resume, on every rank (only the log
         * rank's file holds where the last row stood). */
        c->ls.prev = *train_axis_times(t), c->ls.last_row = t->step;
    } else if (t->e->eval.at_start) st = c->evaluate(t, 0, loop_axis(t, 0.0), EXIT_OK, &c->why);
    if (c->lockstep) comm_barrier(); /* the whole world starts together */
    else comm_workers_barrier();
    c->seg = wall_time(); /* the time axis: training wall clock, evaluations and checkpoints excluded */
    return st;
}

/* A training minibatch could not be loaded on this rank, whose peers run on their own (meeting
 * points): close the run file with that status if this is the log rank, and stop every rank now —
 * the others would wait comm_timeout_s in their next exchange with it. Does not return. */
static void loop_data_failed(trainer *t) {
    if (t->log) {
        runlog_set_attr_string(t->log, "status", "stopped: data loading failed (see the log)");
        runlog_close(t->log);
        t->log = NULL;
    }
    comm_abort(EXIT_RUNTIME);
}

/* What step s (0-based) at step size alpha returned: the loss sum, and this method's rule for a
 * non-finite loss — lock-step: the same mean on every rank, all stop here; meeting points: the
 * diverged node keeps stepping (its peers may need it) and the evaluation of the NaN average stops
 * everyone. Returns the status. */
static int loop_account(trainer *t, loop_ctx *c, long s, double alpha, const step_out *o) {
    if (o->status != EXIT_OK && o->why == STOPPED_DATA) { /* lock-step: agreed in the step, every rank stops here */
        if (loader_error(&t->train_loader)[0])
            fprintf(stderr, "dsgd-run: rank %d: data loading failed: %s; stopping every rank\n", t->rank, loader_error(&t->train_loader));
        if (!c->lockstep) loop_data_failed(t);
    }
    if (o->status != EXIT_OK) return c->why = o->why, o->status;
    const int took = o->took == METHOD_STEP_TOOK;
    if (took && !isfinite(o->loss) && c->lockstep) {
        loop_pause(c);
        train_say_nonfinite_loss(t, &c->why, 0, s + 1, alpha, "stopping every rank");
        return EXIT_RUNTIME;
    }
    if (took && !isfinite(o->loss)) {
        if (c->why != STOPPED_NONFINITE) train_say_nonfinite_loss(t, &c->why, 1, s + 1, alpha, "every rank stops at the next evaluation");
        c->local = EXIT_RUNTIME;
    }
    t->step = s + 1;
    if (took) c->ls.loss_acc += o->loss, c->ls.loss_n++;
    return EXIT_OK;
}

/* The /train row after `done` steps (lock-step: with its /ranks row, and a write error stops every
 * rank now; meeting points: at the next evaluation). Returns the status. */
static int loop_row(trainer *t, loop_ctx *c, long done, double alpha) {
    loop_state *ls = &c->ls;
    const double now = loop_axis(t, ls->train_s + (wall_time() - c->seg));
    if (c->lockstep) train_gather_rank_times(t, &ls->prev, done - ls->last_row, c->gbuf, c->rows), ls->last_row = done;
    if (t->log && ls->loss_n && train_log_train(t, done, now, ls->loss_acc / (double)ls->loss_n, alpha, c->lockstep ? c->rows : NULL))
        c->local = EXIT_RUNTIME;
    if (ls->loss_n) ls->loss_acc = 0.0, ls->loss_n = 0;
    return c->lockstep ? comm_agree(c->local) : EXIT_OK;
}

/* After `done` steps, what is due: the row, a signal's meeting, an evaluation, the checkpoint
 * (periodic, or asked for by a signal: lock-step, agreed in the step; meeting points, at the
 * meeting). Meeting points: the nodes meet first — waiting for slower nodes is training time (an
 * average over the nodes exists only once every node has done `done` steps), the evaluation is
 * not. Returns the status. */
static int loop_tick(trainer *t, loop_ctx *c, long done, double alpha) {
    const method_ops *M = t->method;
    const unsigned due = cadence_due(t->e, done - 1, done);
    int st = due & CADENCE_LOG ? loop_row(t, c, done, alpha) : EXIT_OK;
    if (st != EXIT_OK) return st;
    const int sigmeet = M->signal ? M->signal(t, done) : 0; /* a signal here or on another node */
    if (due & CADENCE_EVAL) {
        if (!c->lockstep) comm_workers_barrier();
        loop_pause(c);
        st = c->evaluate(t, done, loop_axis(t, c->ls.train_s), c->local, &c->why);
        c->seg = wall_time();
        if (st != EXIT_OK) return st;
    }
    long label = done;
    if (M->meet && (due & (CADENCE_EVAL | CADENCE_CKPT) || sigmeet)) label = M->meet(t, done, sigmeet);
    if (!(due & CADENCE_CKPT) && !t->sig) return EXIT_OK;
    if (!c->lockstep) comm_workers_barrier();
    loop_pause(c);
    st = loop_checkpoint(t, &c->why, label, &c->ls);
    c->seg = wall_time();
    return st;
}

/* The method's end, the summary on the log rank. Returns the status. */
static int loop_end(trainer *t, loop_ctx *c, int st) {
    if (!c->begun) return st;
    free(c->gbuf), free(c->rows);
    if (t->method->end) st = t->method->end(t, st);
    if (t->log) {
        const double steps = t->step > 0 ? (double)t->step : 1.0;
        const phase_times *ph = &t->times;
        train_log_summary(t, st, c->why, loop_axis(t, c->ls.train_s), 1);
        printf("rank 0 %stime per step: data %.2f ms, compute %.2f ms, communication %.2f ms (waiting %.2f ms), update %.2f ms\n",
               t->vc.on ? "real " : "", 1e3 * ph->data_s / steps, 1e3 * ph->compute_s / steps, 1e3 * ph->comm_s / steps, 1e3 * ph->wait_s / steps,
               1e3 * ph->update_s / steps);
        if (t->vc.on) {
            const phase_times *v = &t->vc.v;
            printf("rank 0 simulated time per step: compute %.2f ms, communication %.2f ms (waiting %.2f ms), injected delay %.2f ms\n",
                   1e3 * v->compute_s / steps, 1e3 * v->comm_s / steps, 1e3 * v->wait_s / steps, 1e3 * v->delay_s / steps);
        }
    }
    return st;
}

int train_run(trainer *t) {
    const method_ops *M = t->method;
    if (M->run) return M->run(t); /* the methods with servers run their ranks' own loops */
    loop_ctx c;
    int st = loop_begin(t, &c);
    /* From step 0 or where the checkpoint stood (gossip: this node's own step, as a checkpoint
     * after a signal cuts each node at its own). */
    for (long s = t->step; st == EXIT_OK && s < t->e->iterations; s++) {
        const double alpha = alpha_at(t->e, s);
        ckpt_poll_test(s + 1, t->rank); /* tests: a signal during step s + 1 */
        const step_out o = M->step(t, s, alpha);
        st = loop_account(t, &c, s, alpha, &o);
        if (st == EXIT_OK) st = loop_tick(t, &c, s + 1, alpha);
    }
    return loop_end(t, &c, st);
}
