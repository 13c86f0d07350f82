/* checkpoint_signal.h — checkpoint_signal.c's exports: the signals that ask for a checkpoint
 * (and a stop), and the experiment's stop_at; what they mean for a run is in checkpoint.h. */
#ifndef DSGD_CHECKPOINT_SIGNAL_H
#define DSGD_CHECKPOINT_SIGNAL_H

#define CKPT_SECOND_SIGNAL_S 3

/* What the signals received so far ask for (the strongest). */
enum { CKPT_SIG_NONE = 0, CKPT_SIG_SAVE = 1 /* SIGUSR1 */, CKPT_SIG_STOP = 2 /* SIGTERM, SIGINT, SIGHUP */ };

/* The exit status of a run stopped by SIGTERM / SIGINT / SIGHUP after writing its checkpoint,
 * EXIT_INTERRUPTED, is in util/util.h with the others. */

/* Install the handlers of SIGTERM, SIGINT, SIGHUP and SIGUSR1 for this process. Test hook:
 * environment DSGD_TEST_SIGNAL="<TERM|INT|HUP|USR1>@<step>[@<world rank>[@eval]]" makes
 * ckpt_poll_test raise that signal in that rank (default 0) once the loop has completed <step> steps (tests only; docs/checkpoint.md). */
void ckpt_install_signals(void);

/* CKPT_SIG_* requested by the signals received since the last ckpt_signal_clear, and
 * CKPT_SIG_STOP once the wall clock has reached stop_at (ckpt_set_stop_at): the run then stops as
 * after a SIGTERM, at the next point where the method can checkpoint. Async-signal safe to call
 * anywhere. */
int ckpt_signal_pending(void);

/* The experiment's stop_at (Unix time, seconds; 0: none): from then on ckpt_signal_pending asks
 * for a checkpoint and a stop. Unlike a SIGTERM it arms no give-up (ckpt_stop_age stays -1) and
 * does not make a later SIGTERM a second one (CKPT_SECOND_SIGNAL_S): the scheduler's SIGTERM at
 * the time limit, the fallback, is then acted on as a first. */
void ckpt_set_stop_at(long unix_s);
/* 1 when stop_at has passed and no SIGTERM / SIGINT / SIGHUP has come (the stop is stop_at's). */
int ckpt_time_up(void);

/* Seconds since the first SIGTERM / SIGINT, or -1 if none (comm_on_stop). */
double ckpt_stop_age(void);

/* Name of the strongest signal received ("SIGTERM", ...), "time limit (stop_at)" when
 * ckpt_time_up, "" if none. */
const char *ckpt_signal_name(void);

/* Forget a SIGUSR1 request (after its checkpoint); a stop request stays. */
void ckpt_signal_clear_save(void);

/* The DSGD_TEST_SIGNAL hook: raise the configured signal in this rank, once, when `steps`
 * reaches its step; with "@eval" after the rank, in the middle of the evaluation after that
 * step instead (ckpt_poll_test_eval, called by train_evaluate). */
void ckpt_poll_test(long steps, int world_rank);
void ckpt_poll_test_eval(long steps, int world_rank);

#endif
