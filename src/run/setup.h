/* setup.h — the phases of one rank's run (src/run/, the layer above src/methods/), in the order
 * main() (src/main.c) calls them:
 *   1. main.c: the experiment, read and checked against the MPI world by every rank
 *   2. setup_data      the training and validation sets; b fits the memory; the loader (setup.c)
 *   3. resume_prepare  the earlier run this one continues; the output and checkpoint directory
 *      (resume.c; --check: main.c reports and stops here)
 *   4. setup_model     threads, GPU, model, buffers, NCCL, the method's init (setup.c)
 *   5. setup_runlog    the run file (log rank), the start-up lines (runfile.c)
 *   6. train_run       (src/run/loop.h)
 *   7. setup_close     the run file closed, the exit status agreed, everything freed (setup.c)
 * Each phase is collective over the world and ends every rank's run (setup_agree: exit 2 on bad
 * input) when any rank fails, with the failing rank's message. docs/architecture.md. */
#ifndef DSGD_SETUP_H
#define DSGD_SETUP_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "data/shards.h"
#include "train/train.h"

/* The threads of one rank (docs/data.md, "Loading"): cores = the CPUs of this process's affinity
 * mask divided by the ranks of its node bound to the same mask (sharing: all of them when unbound,
 * 1 when each rank has its own cores; at least 1 core); data = data.threads, or for data.format =
 * "jpeg" a quarter of the cores on device "cpu", the cores but one on device "cuda" (oneDNN
 * computes nothing there), at least 1; none for other formats; compute (oneDNN) = `threads`, or
 * the cores left to it (at least 1); comm = the method's communication thread (method_ops.
 * comm_thread: gossip; it naps, so it takes no core from the others but is counted). cpus: the
 * mask's CPU list ("0-3,8"). */
typedef struct {
    int cores, compute, data, comm;
    int sharing;    /* ranks of this node with this very mask (1: its own) */
    char cpus[128]; /* the affinity mask's CPUs, e.g. "0-15" */
} thread_budget;

/* The budget of a rank whose mask has cpus CPUs shared by `sharing` ranks of its node (pure:
 * the arithmetic above; cpus and the mask's list are left to the caller). */
thread_budget setup_thread_budget(const experiment *e, int cpus, int sharing);

/* The memory the job's cgroup leaves this process, from proc_cgroup (the format of
 * /proc/self/cgroup) and the cgroup file system mounted at root (/sys/fs/cgroup): v2 (the line
 * "0::<path>"): root<path>/memory.max − memory.current; v1 (the line naming the "memory"
 * controller): root/memory<path>/memory.limit_in_bytes − memory.usage_in_bytes; each at the
 * process's cgroup and every ancestor up to the root, the least left taken (a limit is set on
 * the job, the process sits in a step or task cgroup below it). "max" and v1's huge no-limit
 * value are no limit. Returns 1 with *avail (bytes) and where ("cgroup <dir>/<file> = X GiB, Y GiB
 * of it in use") filled; 0 when no limit was found (no such file, no memory controller). */
int setup_cgroup_memory(const char *proc_cgroup, const char *root, double *avail, char *where, size_t n);

/* What rank 0 decides about an earlier run of the experiment (resume_prepare), for every rank. */
typedef struct {
    long label;      /* checkpoint to continue from; -1: start afresh */
    long finished;   /* the run file says the run completed: nothing to do */
    long had_ckpt;   /* a checkpoint exists (starting afresh with overwrite = true removes it) */
    long move_aside; /* resume = "auto", an unfinished run file without a checkpoint: keep it under
                        another name and start afresh */
    uint64_t run_id; /* the run's id (checkpoint.h): the checkpoint's when resuming, else new */
} resume_plan;

/* One rank's run, filled phase by phase. */
typedef struct {
    experiment e;                  /* 1 */
    int check_only;                /* 1: --check (no output is touched) */
    int world_unchecked;           /* 1: --check without mpiexec: the world size is not known */
    trainer t;                     /* 1: the rank's role, then every phase; t.e = &e */
    dataset train, val;            /* 2: JPEG and synthetic sets without pixels (n, c, h, w, classes) */
    shards *pack_train, *pack_val; /* 2: data.format = "jpeg" */
    int64_t verified;              /* 2: --check, jpeg: samples decoded */
    thread_budget budget;          /* 2 */
    resume_plan plan;              /* 3 */
    int not_bitwise;               /* 3: a CPU resume with other threads or ISA (checkpoint.bitwise) */
    char not_bitwise_how[160];     /* 3: how, e.g. "threads 1 -> 2" (the lowest rank that differs) */
    char gpu_desc[256], comm_desc[160]; /* 4: "GPU 0 of 1: ...", "; all-reduce: ..." */
    char device_desc[512];         /* 5: the run file's `device` */
    int data_array;                /* 5: index of data/decode_warnings (jpeg) */
} run_setup;

/* Collective: if any rank's status is non-zero, stop every rank (exit with the worst status).
 * Rank 0 prints its message if it failed; otherwise each failing rank prints its own. */
void setup_agree(int status, const char *err);
/* setup_agree, with a failing rank's message msg blamed on key: "<where>: key '<key>': msg". */
void setup_agree_key(int status, const char *key, const char *msg);
/* Prefix err (errlen bytes) with where the first key at fault was set (file:line, --set, or the
 * file for a default) and the keys ("keys 'p', 'b'"); a data path that err names: that key's. */
void setup_blame(const experiment *e, const char *keys, char *err, size_t errlen);

void setup_data(run_setup *r);
/* Whether a training step's memory fits this node (CPU; 0 on a GPU, whose allocator refuses):
 * at least 2.5·b + the eval batch samples' forward activations (model_spec_activation_floats; a
 * step holds 2.6–4.8 sets per sample, measured: docs/perf.md) against the memory
 * available here (MemAvailable, or the cgroup's limit if lower) shared by ranks_here ranks. Fills
 * line with the numbers (a sentence; "" on a GPU) and returns EXIT_BADINPUT when it does not fit,
 * else 0. setup_data refuses such a b on every rank (exit 2, key 'b') before the loader's buffers
 * exist, rather than the OOM killer ending the run by a signal (--check: only under mpiexec, where
 * the ranks are on the nodes that will run it); --check reports it. */
int setup_check_memory(const run_setup *r, int ranks_here, char *line, size_t n);

/* Rank 0: continue (--resume: cli_resume, or resume = "auto") or start afresh; the output and the
 * checkpoint directory are never an input (config_path, the data); then every rank checks its part
 * of the checkpoint (its threads, ISA, data). A finished run says so and exits 0. */
void resume_prepare(run_setup *r, const char *config_path, int cli_resume);
/* resume = "auto" found an unfinished run file without a checkpoint (plan.move_aside): rename the
 * run file at path to a free name "<stem>.restart<k>.h5" beside it (k = 1, 2, ...), written into
 * aside (n bytes). Returns 0 or EXIT_BADINPUT with err filled (key 'output'). */
int resume_move_aside(const char *path, char *aside, size_t n, char *err, size_t errlen);
void setup_model(run_setup *r);
/* argv: the command line the run file records. */
void setup_runlog(run_setup *r, int argc, char **argv);
/* Returns the exit status for train_run's status st. */
int setup_close(run_setup *r, int st);

/* "threads per rank: ..." and a warning line when they are more than the cores. */
void setup_print_threads(const thread_budget *b, FILE *f);
/* Sim mode (r->t.vc.on, set by setup_data): the line of the modelled times — compute per step
 * (ms, or "measured"), and the all-reduce of sim.model_params fp32 values over p (allreduce) or
 * one message host to host on an idle route (the point-to-point methods), in ms, with the
 * network, topology and algorithm — for the start-up lines and --check (runfile.c). Nothing
 * when sim mode is off. */
void setup_print_sim(const run_setup *r, FILE *f);

#endif
