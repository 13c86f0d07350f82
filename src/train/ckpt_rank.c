/* ckpt_rank.c — one rank's part of a checkpoint (ckpt_rank.h): the common state every rank's file
 * holds, in one order both ways, and the one writer and reader every checkpoint round uses. */
#include "train/ckpt_rank.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "util/util.h"

/* Both ways, in one order (ckpt_writing); what only a writer puts (threads, ISA, the data's
 * fingerprints, the experiment, the run file's rows) the resume's checks read (setup.c,
 * checkpoint_file.c). */
static int ckpt_common(trainer *t, ckpt_file *f, loop_state *ls) {
    const int save = ckpt_writing(f);
    int64_t step = t->step, threads = omp_get_max_threads();
    int rc = ckpt_io_i64(f, "step", &step, 1) | ckpt_io_f64(f, "times", (double *)&t->times, 7);
    t->step = step;
    if (t->vc.on) { /* sim mode: the virtual clock and its phase times (vclock.h), every rank's own */
        double vc[8] = {t->vc.now};
        memcpy(vc + 1, &t->vc.v, sizeof t->vc.v);
        rc |= ckpt_io_f64(f, "vclock", vc, 8);
        if (!save) t->vc.now = vc[0], memcpy(&t->vc.v, vc + 1, sizeof t->vc.v);
    }
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
            fprintf(stderr, "dsgd-run: writing %s: %s\n", t->e->output, runlog_error(t->log));
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

int ckpt_write_rank(trainer *t, long label, const loop_state *ls, ckpt_part_fn part, void *ctx, char *err, size_t errlen) {
    ckpt_file *f = ckpt_create(t->ckpt_dir, label, t->rank, err, errlen);
    if (!f) return -1;
    /* ckpt_common reads ls when writing (one function both ways, so its order is one) */
    if (ckpt_common(t, f, (loop_state *)ls) || (part && part(ctx, f)) || ckpt_close(f))
        snprintf(err, errlen, "%s", ckpt_error(f)[0] ? ckpt_error(f) : "run file flush failed");
    ckpt_free(f);
    return err[0] ? -1 : 0;
}

int ckpt_read_rank(trainer *t, long label, loop_state *ls, ckpt_part_fn part, void *ctx, char *err, size_t errlen) {
    ckpt_file *f = ckpt_open(t->ckpt_dir, label, t->rank, err, errlen);
    if (!f) return -1;
    if (ckpt_common(t, f, ls) || (part && part(ctx, f)))
        snprintf(err, errlen, "%s", ckpt_error(f)[0] ? ckpt_error(f) : "the checkpoint's state is inconsistent with the experiment");
    ckpt_free(f);
    return err[0] ? -1 : 0;
}

void ckpt_say_written(const trainer *t, long label, double seconds) {
    printf("checkpoint: step %ld written to %s/step-%ld (%.2f s)\n", label, t->ckpt_dir, label, seconds);
    fflush(stdout);
}

