/* loop.h — the one training loop (Jin et al. 2016 §2: every method is a step inside it), above
 * the methods: the α schedule, the method's step, and the decisions — when to log, evaluate and
 * checkpoint (src/train/cadence.h), when to stop, and the run file's stop status. A method that
 * keeps its own ranks' loops (the methods with servers: method_ops.run) is handed the rank. */
#ifndef DSGD_LOOP_H
#define DSGD_LOOP_H

#include "train/train.h"

/* Run the whole experiment on this rank (collective): method_ops.run when the method has one,
 * else the loop — lock-step when the method has no `meet` (every step collective: a non-finite
 * loss or a run-file write error stops every rank at that step, /ranks rows come with /train
 * rows), at meeting points otherwise (the nodes run on their own and agree at evaluations and
 * checkpoints). Returns EXIT_OK, EXIT_INTERRUPTED after a SIGTERM / SIGINT and its checkpoint,
 * EXIT_BADINPUT when a checkpoint could not be read, or EXIT_RUNTIME after a non-finite loss or
 * gradient, a run-file write error, a checkpoint that could not be written, or data that could
 * not be loaded (all ranks agree, and the run file's status says so: "stopped: data loading
 * failed"). One exception: a training minibatch that a rank of a method with meeting points or
 * servers cannot load stops every rank at once (MPI_Abort, exit 1) — its peers would otherwise
 * wait comm_timeout_s for it — and the run file's status says so only when that rank is the log
 * rank. */
int train_run(trainer *t);

/* Collective over the world: write the checkpoint after `label` iterations into t->ckpt_dir
 * (checkpoint.h): the method's quiesce first; then every rank writes its file (ckpt_write_rank:
 * the common state, ls on the log rank, the method's save), rank 0 commits once all succeeded and
 * the log rank says so. Returns 0, or EXIT_RUNTIME on every rank when any rank failed (printed;
 * the previous checkpoint stays). Valid only where every rank of the world calls it. */
int train_checkpoint(trainer *t, long label, const loop_state *ls);

/* Read the common state of t->resume_label's checkpoint and the method's (ckpt_read_rank).
 * Returns 0, or EXIT_BADINPUT on every rank (printed) when any rank could not read its part.
 * Collective over the world. */
int train_resume(trainer *t, loop_state *ls);

#endif
