/* cadence.c — when the training loops log, evaluate, checkpoint and stop (see cadence.h). */
#include "train/cadence.h"

#include <stdio.h>

#include "train/checkpoint.h"
#include "util/util.h"

void cadence_nonfinite_loss(const trainer *t, int *why, int local, long done, double alpha, const char *then) {
    *why = STOPPED_NONFINITE;
    if (local || t->log)
        fprintf(stderr, "dsgd-run: rank %d: non-finite loss or gradient at step %ld (α = %.4g): %s; %s keeps what was logged. "
                        "Try a smaller alpha.base or a warm-up.\n", t->rank, done, alpha, then, t->e->output);
}

void cadence_nonfinite_eval(const trainer *t, int *why, long done, const char *what) {
    *why = STOPPED_NONFINITE;
    if (t->log)
        fprintf(stderr, "dsgd-run: non-finite validation loss at step %ld: %s diverged; stopping every rank; %s keeps what was "
                        "logged. Try a smaller alpha.base or a warm-up.\n", done, what, t->e->output);
}

void cadence_say_stopped(long done) {
    printf("stopped by %s after step %ld; continue with --resume (or resume = \"auto\")\n",
           ckpt_signal_name()[0] ? ckpt_signal_name() : "a signal on another rank", done);
    fflush(stdout);
}

int cadence_checkpoint(trainer *t, int *why, long label, const loop_state *ls) {
    const int st = train_checkpoint(t, label, ls);
    if (st != EXIT_OK) *why = STOPPED_CHECKPOINT;
    if (st == EXIT_OK && t->sig == CKPT_SIG_STOP) {
        if (t->log) cadence_say_stopped(label);
        return EXIT_INTERRUPTED;
    }
    if (t->sig == CKPT_SIG_SAVE) ckpt_signal_clear_save(), t->sig = CKPT_SIG_NONE;
    return st;
}
