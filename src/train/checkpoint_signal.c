/* checkpoint_signal.c — the signal flags of checkpoint.h: the handlers of SIGTERM, SIGINT,
 * SIGHUP and SIGUSR1, what the signals received so far ask for, and the DSGD_TEST_SIGNAL test hook. The
 * checkpoint directory is checkpoint.c's, the rank files checkpoint_file.c's. */
#define _GNU_SOURCE
#include "train/checkpoint_signal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/util.h"

/* ---- signals ------------------------------------------------------------------------------ */

static volatile sig_atomic_t g_sig = CKPT_SIG_NONE, g_signo = 0;
static struct timespec g_stop_at; /* when the first stop request arrived */
static int g_test_sig = 0, g_test_rank = 0, g_test_eval = 0;
/* stop_at (ckpt_set_stop_at): a stop request of its own, apart from g_sig, so that it neither
 * arms the give-up after a SIGTERM (ckpt_stop_age) nor makes the scheduler's SIGTERM at the limit
 * count as a second one (on_signal). */
static volatile long g_stop_time = 0;
static volatile sig_atomic_t g_time_up = 0;
static long g_test_step = -1;

static void on_signal(int signo) {
    const int want = signo == SIGUSR1 ? CKPT_SIG_SAVE : CKPT_SIG_STOP;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    if (want == CKPT_SIG_STOP && g_sig == CKPT_SIG_STOP) {
        /* A second stop request kills at once, unless it is the same request arriving twice:
         * Slurm signals every process of a job, and mpiexec passes its own SIGTERM on as well. */
        if (now.tv_sec - g_stop_at.tv_sec >= CKPT_SECOND_SIGNAL_S) {
            signal(signo, SIG_DFL);
            raise(signo);
        }
        return;
    }
    if (want == CKPT_SIG_STOP) g_stop_at = now;
    if (want > g_sig) g_sig = want, g_signo = signo;
}

void ckpt_install_signals(void) {
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    /* SIGHUP (the terminal closed) stops as SIGTERM does, under nohup too: UCX (MPICH's ch4:ucx)
     * replaces an ignored SIGHUP with its own handler before main, so nohup cannot be seen here. */
    sigaction(SIGHUP, &sa, NULL);
    const char *t = getenv("DSGD_TEST_SIGNAL");
    if (t && *t) {
        char name[16] = "", where[8] = "";
        long step = -1;
        int rank = 0;
        int n = sscanf(t, "%15[A-Z0-9]@%ld@%d@%7s", name, &step, &rank, where);
        if (n >= 2 && step >= 0 && (n < 4 || !strcmp(where, "eval"))) {
            g_test_sig = !strcmp(name, "USR1") ? SIGUSR1 : !strcmp(name, "INT") ? SIGINT : !strcmp(name, "TERM") ? SIGTERM
                         : !strcmp(name, "HUP") ? SIGHUP : 0;
            g_test_step = step, g_test_rank = n >= 3 ? rank : 0, g_test_eval = n == 4;
        }
        if (!g_test_sig) DIE("DSGD_TEST_SIGNAL='%s': expected TERM|INT|HUP|USR1@<step>[@<rank>[@eval]]", t);
    }
}

void ckpt_set_stop_at(long unix_s) { g_stop_time = unix_s > 0 ? unix_s : 0, g_time_up = 0; }

/* 1 once the wall clock has reached stop_at (clock_gettime: async-signal-safe, a vDSO call). */
static int time_up(void) {
    if (!g_time_up && g_stop_time > 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if ((long)now.tv_sec >= g_stop_time) g_time_up = 1;
    }
    return g_time_up;
}

int ckpt_signal_pending(void) { return g_sig != CKPT_SIG_STOP && time_up() ? CKPT_SIG_STOP : g_sig; }

int ckpt_time_up(void) { return g_sig != CKPT_SIG_STOP && time_up(); }

double ckpt_stop_age(void) {
    if (g_sig != CKPT_SIG_STOP) return -1.0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - g_stop_at.tv_sec) + 1e-9 * (double)(now.tv_nsec - g_stop_at.tv_nsec);
}

const char *ckpt_signal_name(void) {
    if (ckpt_time_up()) return "time limit (stop_at)";
    switch (g_signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    default: return "";
    }
}

void ckpt_signal_clear_save(void) {
    if (g_sig == CKPT_SIG_SAVE) g_sig = CKPT_SIG_NONE, g_signo = 0;
}

/* The DSGD_TEST_SIGNAL hook at a step (eval = 0) or in an evaluation (eval = 1). */
static void poll_test(long steps, int world_rank, int eval) {
    if (g_test_sig && g_test_eval == eval && steps >= g_test_step && world_rank == g_test_rank) {
        const int sig = g_test_sig;
        g_test_sig = 0; /* once */
        raise(sig);
    }
}

void ckpt_poll_test(long steps, int world_rank) { poll_test(steps, world_rank, 0); }
void ckpt_poll_test_eval(long steps, int world_rank) { poll_test(steps, world_rank, 1); }
