/* checkpoint.h — checkpoints of a training run and the signals that ask for one
 * (docs/checkpoint.md).
 *
 * A checkpoint is the state every rank needs to continue a run exactly where it stood after
 * `label` iterations: parameters, momentum, BN running statistics, each server's shard and
 * counters, the time axis, the progress of the run file. Data order, α schedule, straggler
 * delays and gossip peers are pure functions of (seed, step) (loader.h, inject.h), so the step
 * is their whole state.
 *
 * On disk, a directory (key checkpoint.path, default <output without .h5>.ckpt):
 *   <dir>/step-<label>/rank-<r>.h5   the state of world rank r (HDF5; only ranks holding state)
 *   <dir>/latest                     one line "step-<label>": the committed checkpoint
 * A checkpoint is written into <dir>/step-<label>.tmp/, every writer reports to a coordinator,
 * and only when all succeeded does the coordinator rename the directory and then replace
 * `latest` (write a temporary, rename over it): a kill at any instant leaves `latest` naming a
 * complete checkpoint (or none). Each part, the directory entries and `latest` are fsync'ed, so
 * this holds after a crash of the node too. The checkpoint.keep newest committed checkpoints stay;
 * a resume falls back to the one before when the newest cannot be read.
 *
 * Signals (ckpt_install_signals): SIGUSR1 asks for a checkpoint and training continues (Slurm's
 * `--signal=USR1@<s>` warning before the time limit); SIGTERM and SIGINT ask for a checkpoint and
 * a stop (exit status EXIT_INTERRUPTED). The handler only sets a flag; the training loop acts at
 * its next point where the ranks agree (every step for allreduce, the next meeting point of
 * the other methods: methods.md), so a signal that arrives during evaluation or communication
 * still yields a consistent checkpoint. A second SIGTERM/SIGINT kills at once (default action),
 * if it comes CKPT_SECOND_SIGNAL_S seconds or more after the first: the copies of one signal that
 * reach a rank together (Slurm signals every process of a job; mpiexec passes its own on) count
 * as one.
 *
 * Errors: functions returning int return 0 or -1 with a message in err ("<path>: <what>: <why>"). */
#ifndef DSGD_CHECKPOINT_H
#define DSGD_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "util/util.h"

#include "train/checkpoint_signal.h"

/* The checkpoint directory of e: checkpoint.path, or the output with ".h5" replaced by ".ckpt"
 * (appended when the output does not end in .h5). */
void ckpt_dir_of(const experiment *e, char *dir, size_t n);

/* The committed checkpoint in dir: 1 and *label set, 0 when there is none (no directory, no
 * `latest`), -1 with err filled when `latest` is unreadable or names a missing step directory. */
int ckpt_latest(const char *dir, long *label, char *err, size_t errlen);

/* Rank 0 at the start of a run that may write checkpoints: create dir (and its parents), check
 * it is writable, and lock it for this process (flock on <dir>/.lock, held until exit; where the
 * file system has no locks, none). A lock held by another process is waited for, up to
 * CKPT_LOCK_WAIT_S seconds (environment DSGD_CKPT_LOCK_WAIT_S: other seconds; tests) or a stop
 * request, polled every 0.25 s, with one line on stderr: the lock of a node that failed lasts
 * until its lease expires (NFSv4 ~90 s). Returns the lock's file descriptor, or -1 with err
 * filled: not creatable, not writable, or locked by another run (still, after the wait). */
#define CKPT_LOCK_WAIT_S 120
int ckpt_claim(const char *dir, char *err, size_t errlen);
/* 1 when another process holds dir's lock (a run still going: ckpt_claim), else 0 (no lock file,
 * a free lock, or a file system without locks). Creates nothing. */
int ckpt_in_use(const char *dir);

/* ---- writing: the coordinator prepares, every writer writes its file, the coordinator commits */

/* Coordinator: create dir (and its parents) and an empty <dir>/step-<label>.tmp (removing a
 * stale one a killed run left). */
int ckpt_prepare(const char *dir, long label, char *err, size_t errlen);

/* Coordinator, after every writer succeeded (each fsync'ed its part: ckpt_close): fsync
 * step-<label>.tmp, rename it to step-<label>, fsync dir, `latest` := step-<label> (a temporary,
 * fsync, rename, fsync dir), then remove the step-* directories but step-<label> and the
 * checkpoint.keep - 1 newest before it (ckpt_set_keep): those after it (left by a resume that
 * fell back from them) and every .tmp go too. */
int ckpt_commit(const char *dir, long label, char *err, size_t errlen);

/* How many committed checkpoints ckpt_commit keeps (checkpoint.keep, >= 1; default 2). */
void ckpt_set_keep(int keep);

/* The newest committed step directory of dir (step-<N>, N < below), or -1 if none: what a resume
 * falls back to when checkpoint `below` cannot be read. */
long ckpt_previous(const char *dir, long below);

/* fsync the file or directory path (a directory's entries; file systems that cannot fsync a
 * directory are let be). 0, or -1 with err filled. */
int ckpt_fsync(const char *path, char *err, size_t errlen);

/* Coordinator, after a writer failed: remove step-<label>.tmp (the previous checkpoint stays). */
void ckpt_abandon(const char *dir, long label);

/* Remove every checkpoint in dir (`latest`, step-*), keeping the directory (overwrite = true). */
int ckpt_remove_all(const char *dir, char *err, size_t errlen);
/* A run that completed (checkpoint.keep_completed = false): ckpt_remove_all, then the lock file,
 * then dir itself if nothing else is in it (files of the user stay, and so does the directory). */
int ckpt_remove_completed(const char *dir, char *err, size_t errlen);

typedef struct ckpt_file ckpt_file;

/* The run id (a 64-bit number drawn when a run starts afresh and kept by its resumes) that
 * ckpt_create writes into every file and ckpt_open, when it is not 0, requires: a rank file of
 * another run is refused even at the same step. ckpt_new_run_id draws one (time, pid, host). */
void ckpt_set_run_id(uint64_t id);
uint64_t ckpt_new_run_id(void);
/* The run id a file was written with (0 if unreadable). */
uint64_t ckpt_file_run_id(ckpt_file *f);

/* Writer: create <dir>/step-<label>.tmp/rank-<rank>.h5 (with its label, rank and run id). NULL
 * with err filled on failure. */
ckpt_file *ckpt_create(const char *dir, long label, int rank, char *err, size_t errlen);
/* Reader: open <dir>/step-<label>/rank-<rank>.h5 and check it holds rank `rank` after `label`
 * iterations (every file records both); NULL with err filled (missing, unreadable, another
 * checkpoint's file: says which). */
ckpt_file *ckpt_open(const char *dir, long label, int rank, char *err, size_t errlen);
/* 1 if <dir>/step-<label>/rank-<rank>.h5 exists. */
int ckpt_exists(const char *dir, long label, int rank);
/* The experiment (text) and run id checkpoint `label` in dir was written with: from rank first's
 * file, else from any rank file of the checkpoint that holds it (a checkpoint of another method or
 * p, whose run file another rank wrote), so that the key that changed can be named. Returns 0, or
 * -1 with err filled from rank first's file. */
int ckpt_find_experiment(const char *dir, long label, int first, char *text, size_t n, uint64_t *run_id, char *err, size_t errlen);

/* Datasets of n values (n may be 0) under name (no '/'). ckpt_get_* checks that the dataset
 * exists with exactly n values of that type; an error names the file and the dataset. */
int ckpt_put_f32(ckpt_file *f, const char *name, const float *v, size_t n);
int ckpt_put_f64(ckpt_file *f, const char *name, const double *v, size_t n);
int ckpt_put_i64(ckpt_file *f, const char *name, const int64_t *v, size_t n);
int ckpt_put_str(ckpt_file *f, const char *name, const char *s);
int ckpt_get_f32(ckpt_file *f, const char *name, float *v, size_t n);
int ckpt_get_f64(ckpt_file *f, const char *name, double *v, size_t n);
int ckpt_get_i64(ckpt_file *f, const char *name, int64_t *v, size_t n);
/* The string into s (at most n bytes with its NUL; longer is an error). */
int ckpt_get_str(ckpt_file *f, const char *name, char *s, size_t n);
/* Either way, for state one function both writes and reads back: ckpt_put_* on a file of
 * ckpt_create, ckpt_get_* (into v) on one of ckpt_open. ckpt_writing: 1 for the former. */
int ckpt_io_f32(ckpt_file *f, const char *name, float *v, size_t n);
int ckpt_io_f64(ckpt_file *f, const char *name, double *v, size_t n);
int ckpt_io_i64(ckpt_file *f, const char *name, int64_t *v, size_t n);
int ckpt_writing(const ckpt_file *f);

/* Close (writers: the file is complete on disk after this: flushed, closed, fsync'ed). Returns
 * 0 or -1; the message is in ckpt_error(f) until ckpt_free. */
int ckpt_close(ckpt_file *f);
/* The first error of f ("" if none). */
const char *ckpt_error(const ckpt_file *f);
void ckpt_free(ckpt_file *f);

/* The string root attribute `name` of the run file at path into buf (at most n bytes; "" when
 * the file has none, e.g. `status` of a run that was killed). Returns 0, or -1 with err filled
 * when the file cannot be read. */
int ckpt_run_attr(const char *path, const char *name, char *buf, size_t n, char *err, size_t errlen);

/* Before a resume touches anything: was rank `rank`'s part of checkpoint `label` in dir written
 * with `threads` compute threads and oneDNN ISA `isa` (nn_isa_name)? Each part records them
 * ("threads", "isa"); oneDNN's summation order, and so bitwise continuation on a CPU, depends on
 * both. *differs: 1 if either differs, and then how (hn bytes) says what changed, e.g. "threads
 * 1 -> 2", "oneDNN ISA avx512_core -> avx2" or both, for the run file's resume note ("" when
 * nothing differs). Returns 0 (also when the rank has no part, or when they differ and !strict),
 * or EXIT_BADINPUT with err naming key 'threads' (both counts) or both ISAs, and
 * checkpoint.bitwise (the key that allows it). */
int ckpt_check_machine(const char *dir, long label, int rank, int threads, const char *isa, int strict, int *differs,
                       char *how, size_t hn, char *err, size_t errlen);

/* Was rank `rank`'s part of checkpoint `label` in dir written on the data whose fingerprints
 * (train, val: shards_fingerprint; 0 for other formats) are fp? Returns 0, or EXIT_BADINPUT with
 * err saying the pack differs from the checkpoint's (packed again or replaced). */
int ckpt_check_data(const char *dir, long label, int rank, const uint64_t fp[2], char *err, size_t errlen);

/* Compare the experiment a checkpoint was written with (config_to_text) to the current one,
 * ignoring the keys that may change between the parts of a run (resume, overwrite,
 * checkpoint.every, checkpoint.path, comm_timeout_s, threads, log_every). Returns 0, or -1 with
 * err naming the first key whose value differs: "key 'b': the checkpoint has 32, the experiment 64". */
int ckpt_compare_config(const char *saved, const char *now, char *err, size_t errlen);

#endif
