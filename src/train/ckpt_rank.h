/* ckpt_rank.h — one rank's part of a checkpoint (src/train/checkpoint.h has the directory, the
 * commit protocol and the file format): what every rank's file holds in common — the step, the
 * phase times, sim mode's virtual clock (vclock.h), the loader's decode counters; on the log rank also the loop state (loop_state),
 * the run file's row counts (flushed first) and the experiment — then the owner's own state. */
#ifndef DSGD_CKPT_RANK_H
#define DSGD_CKPT_RANK_H

#include "train/checkpoint.h"
#include "train/train.h"

/* One rank's part of a checkpoint, the one writer and the one reader every round uses (the loop's
 * train_checkpoint, the servers' round, a server method's worker pausing): this rank's file of
 * checkpoint `label` in t->ckpt_dir, created (ckpt_create) or opened (ckpt_open); the common part
 * (ckpt_common; ls: the log rank's loop state, else NULL); then part(ctx, f), the owner's own
 * state (NULL: none); then closed. Returns 0, or -1 with the reason in err (nothing printed). Not
 * collective: the caller's round agrees and commits (ckpt_commit). */
typedef int (*ckpt_part_fn)(void *ctx, ckpt_file *f);
int ckpt_write_rank(trainer *t, long label, const loop_state *ls, ckpt_part_fn part, void *ctx, char *err, size_t errlen);
int ckpt_read_rank(trainer *t, long label, loop_state *ls, ckpt_part_fn part, void *ctx, char *err, size_t errlen);
/* The committing rank, once `label` is committed: the one "checkpoint: step N written" line,
 * `seconds` after the round began. */
void ckpt_say_written(const trainer *t, long label, double seconds);

#endif
