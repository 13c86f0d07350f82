/* comm.h — the one door to MPI (only comm.c includes <mpi.h>): the training loop, methods,
 * model and data code call these functions and never see a communicator.
 *
 * Every MPI call is checked; a failure prints the call, file:line, rank, host and MPI's own
 * message, then MPI_Abort()s so that no rank is left waiting. */
#ifndef DSGD_COMM_H
#define DSGD_COMM_H

#include <stddef.h>

/* Largest message of one collective in bytes: a 47 MB MPI_Allreduce in Debian's MPICH takes
 * ~160–190 ms at p = 2 where the same data in <= 4 MB chunks takes ~15 ms (measured). */
#define COMM_CHUNK_BYTES (4u << 20)

/* MPI_Init_thread asking for MPI_THREAD_MULTIPLE if multiple (a method whose communication
 * thread calls MPI while the main thread does: asynchronous gossip), else MPI_THREAD_FUNNELED
 * (only the main thread calls MPI); returns 0. Records rank, size, node-local rank/size (the
 * MPI_COMM_TYPE_SHARED communicator, kept for comm_node_allgather) and host name, and gives die
 * (util.h) the rank. What was granted: comm_thread_multiple. MPI_Init_thread failing, or granting
 * less than MPI_THREAD_FUNNELED: says so on stderr and exits with status 1 (EXIT_RUNTIME). */
int comm_init_thread(int *argc, char ***argv, int multiple);
/* comm_init_thread(argc, argv, 0). */
int comm_init(int *argc, char ***argv);
/* A world of one without MPI: MPI_Init is never called (`dsgd-run --check` outside a launcher, where
 * a singleton MPI_Init may hang or fail: Intel MPI under Slurm's PMI, Cray PMI). Rank 0 of 1, node
 * rank 0 of 1, the host name from gethostname. Collectives return at once (one rank),
 * comm_finalize does nothing, comm_abort exits; no point-to-point call may be made. */
void comm_init_self(void);
/* 1 after comm_init_thread, 0 before it or after comm_init_self. */
int comm_mpi_initialized(void);
void comm_finalize(void);
int comm_rank(void);
int comm_size(void);
int comm_local_rank(void);   /* rank among the ranks sharing this node */
int comm_local_size(void);   /* ranks sharing this node */
const char *comm_host(void);

/* Split the world into the p worker ranks 0..p-1 and the server ranks p..size-1 (collective
 * over the world; call once after comm_init). The worker collectives below (all-reduce, worker
 * barrier, gather) then run over the workers only; without this call the workers are the world. */
void comm_set_workers(int p);

/* Seconds a blocking wait may last before comm_* reports a timeout (default 300). */
void comm_set_timeout(double seconds);
/* Seconds between two tests of one wait above which the process is taken not to have run
 * (stopped by SIGSTOP and woken by SIGCONT, a paused VM): every wait of comm_* and the parameter
 * servers' silence check leave such a gap out of the time they count, so a rank that wakes up
 * gives its peers comm_timeout_s from then on (docs/reliability.md). The polling loops test at
 * least every 1 ms (a server's every 50 ms), far below it. */
#define COMM_STALL_S 1.0

/* Collective: the largest of every rank's code (0 = fine). Used after each set-up phase so
 * that a rank that failed makes every rank stop together, none left waiting. */
int comm_max_int(int code);

/* Collective over the workers: buf[i] = mean over workers of buf[i], in place, in chunks of
 * COMM_CHUNK_BYTES (Jin et al. §2.1 all-reduce). n floats. Non-blocking MPI_Iallreduce
 * completed by comm's polling wait (below), so a missing worker is reported after the timeout:
 * the message names the rank and the call, and every rank is stopped (MPI_Abort, exit 1).
 * If wait_s is not NULL, first waits at a worker barrier and adds the seconds spent there (the
 * time this worker waited for the slowest one) to *wait_s. buf is host memory: the division by
 * p runs on the host (device memory: comm_workers_sum_f32, then scale on the device). */
void comm_allreduce_mean_f32(float *buf, size_t n, double *wait_s);

/* ---- The same mean, chunk by chunk, started as the data becomes ready (overlap) -------------
 *
 * comm_allreduce_mean_f32 cut into its chunks, each started and completed by the caller: chunk k
 * of an n-float vector is [k·C, min((k+1)·C, n)) with C = COMM_CHUNK_BYTES / 4 floats, and is the
 * same MPI_Iallreduce(MPI_IN_PLACE, MPI_SUM) on the workers' communicator followed by the same
 * multiplication by 1/p in float, so a vector reduced this way holds the bits
 * comm_allreduce_mean_f32 would give it, whatever the order the chunks are started or complete
 * in. Used by allreduce_grads (src/methods/allreduce_overlap.c) to reduce the gradient while the GPU still
 * computes it.
 *
 * Rules: every worker starts the same chunks of the same vector in the same order (they are
 * collectives); at most COMM_MAX_CHUNKS chunks are in flight, one vector at a time; the buffer of
 * a started chunk is not touched until comm_mean_chunks_test reports it. No allocation: the
 * request array is static. With one worker a started chunk is complete at once and left as it
 * is (comm_allreduce_mean_f32 does not touch it either). */
#define COMM_MAX_CHUNKS 1024

/* Chunks of an n-float vector: ceil(n / C) (0 for n = 0). */
int comm_mean_chunks(size_t n);
/* Chunk k's floats [*lo, *hi) of an n-float vector (0 <= k < comm_mean_chunks(n)). */
void comm_mean_chunk_range(size_t n, int k, size_t *lo, size_t *hi);
/* Start chunk k of buf (n floats, host memory): MPI_Iallreduce of its floats, summed in place. */
void comm_mean_chunk_start(float *buf, size_t n, int k);
/* Without blocking: complete the started chunks MPI has finished, multiply each by 1/p, write
 * their indices to done[] (capacity COMM_MAX_CHUNKS) and return how many. A chunk in flight for
 * more than comm_timeout_s stops every rank (comm_timeout_abort: a worker has stopped). */
int comm_mean_chunks_test(int *done);

/* The polling waits below first test and yield the core for a spin phase (1 ms), then nap. The
 * environment variable DSGD_COMM_SPIN_S sets the spin phase in seconds (0 to 1; anything else
 * stops every rank with exit status 2): 0 naps at once, faster when tens of ranks share each
 * core (docs/simulate.md, "Cost"), slower at a few ranks per core. */

/* One pause of a polling loop that has made no progress for idle_s seconds: yield the core within
 * the spin phase (a busy rank on this core goes first, a reply is seen within microseconds), else sleep
 * 50 µs. MPICH progresses non-blocking operations only inside MPI calls, so a loop that waits on
 * comm_mean_chunks_test never naps longer than that. */
void comm_pause(double idle_s);

/* Collective over the workers: in-place sum of n floats (chunked like the mean above). buf may
 * be CUDA device memory where comm_gpu_aware() says so. */
void comm_workers_sum_f32(float *buf, size_t n);

/* Collective over the workers: the barrier comm_allreduce_mean_f32 waits at before its
 * all-reduce, with the same timeout; adds the seconds spent there (the time this worker waited
 * for the slowest one) to *wait_s. For all-reduces made elsewhere (NCCL, device memory), so that
 * /ranks wait_s means the same whatever carries the data. */
void comm_workers_wait(double *wait_s);

/* Collective over the workers: worker i's nbytes of in land at out + i·nbytes on every worker
 * (out: p·nbytes). */
void comm_workers_allgather(const void *in, size_t nbytes, void *out);

/* Collective over the workers: broadcast nbytes from worker root. */
void comm_workers_bcast(void *buf, size_t nbytes, int root);

/* Collective over the workers: wait until every worker is here (polled; a wait longer than
 * comm_timeout_s stops every rank: comm_timeout_abort). */
void comm_workers_barrier(void);

/* The end-of-run agreement (collective over the world): the largest of every rank's code,
 * bounded: after comm_timeout_s (the run-file writer, writer = 1) or comm_timeout_s + 10 s (the
 * others) a rank that has stopped is given up on and the job is ended with MPI_Abort: the writer
 * with its code (its run file is closed by then), the others with EXIT_RUNTIME. */
int comm_finish(int code, int writer);

/* comm_max_int bounded by comm_timeout_s (comm_timeout_abort): the agreements during training
 * (comm_max_int, unbounded, is for set-up, where ranks may load data for minutes). */
int comm_agree(int code);
/* Collective over the world: the largest v (bounded by comm_timeout_s). */
long comm_max_long(long v);

/* 1 if this MPI library can send and receive CUDA device memory directly ("CUDA-aware"):
 * MPICH's MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA) or Open MPI's MPIX_Query_cuda_support();
 * 0 otherwise (Debian's MPICH: buffers then go through page-locked host memory). Setting the
 * environment variable DSGD_CUDA_AWARE=0 forces 0, DSGD_CUDA_AWARE=1 forces 1 (an MPI built with
 * CUDA support that does not say so: MVAPICH2-GDR, Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1,
 * an Open MPI without mpi-ext.h). */
int comm_gpu_aware(void);

/* 1 if MPI gave MPI_THREAD_MULTIPLE (needed by a communication thread). */
int comm_thread_multiple(void);
/* Why MPI_THREAD_MULTIPLE is missing and what grants it on this MPI library (named by
 * MPI_Get_library_version): Cray MPICH MPICH_MAX_THREAD_SAFETY=multiple, Open MPI a build with
 * thread support, Intel MPI the release_mt library, ... One sentence into buf (no trailing period). */
void comm_thread_multiple_advice(char *buf, size_t n);

/* Collective over the ranks of this node (MPI_COMM_TYPE_SHARED; set-up only, no timeout): rank
 * i's nbytes of in land at out + i·nbytes, i = comm_local_rank() (out: comm_local_size()·nbytes). */
void comm_node_allgather(const void *in, size_t nbytes, void *out);

/* Collective over the ranks of this node (set-up only): one copy per node of a block of bytes that
 * every rank of the node reads in place. Node rank 0 passes its block (src, *nbytes); the others
 * pass src = NULL and learn *nbytes. The bytes are copied once into an MPI shared-memory window
 * (MPI_Win_allocate_shared on the MPI_COMM_TYPE_SHARED communicator) held by node rank 0, and
 * the address of that copy in this process is returned: equal bytes on every rank of the node,
 * read-only (mprotect'ed when page-aligned: a write faults), valid until comm_finalize frees the
 * window (rank 0 may free src at once). Alone on the node (or under comm_init_self) src itself
 * is returned and nothing is copied. The waits for node rank 0 (its count, the copy) are bounded
 * by comm_timeout_s (comm_timeout_abort(what)); MPI_Win_allocate_shared itself is entered only
 * after the count has come, by every rank of the node together. */
const void *comm_node_share(const void *src, size_t *nbytes, const char *what);

/* Collective over the workers: in-place sum of n doubles. */
void comm_workers_sum_f64(double *buf, int n);

/* Collective over the workers: worker 0 receives every worker's n doubles, worker-major, in
 * out (p·n); out is ignored elsewhere. */
void comm_workers_gather_f64(const double *in, int n, double *out);

/* Collective: in-place sum of n doubles over ranks. */
void comm_allreduce_sum_f64(double *buf, int n);

/* Collective: broadcast n bytes from root. */
void comm_bcast(void *buf, size_t nbytes, int root);
/* The same, bounded by comm_timeout_s (a longer wait: comm_timeout_abort(what), exit 1 on every
 * rank); in chunks of COMM_CHUNK_BYTES, so any size. For set-up, where one rank reads for all. */
void comm_bcast_bounded(void *buf, size_t nbytes, int root, const char *what);

void comm_barrier(void);

/* ---- Point-to-point: persistent requests and a polling wait that does not spin a core ----
 *
 * A comm_set holds up to cap persistent requests (MPI_Send_init / MPI_Recv_init) on buffers the
 * caller owns and keeps alive. Waiting polls MPI_Testsome: a short burst of immediate tests, then
 * nanosleep with a delay doubling from 2 µs to 1 ms, so ranks that wait leave the core to ranks
 * that compute (p = 16 ranks on 2 cores still progress) while a fast reply is seen within a few
 * µs. MPICH progresses a message only while its ranks are inside MPI; a worker busy computing
 * does not progress anything, which is why every exchange here is started and completed by the
 * rank that needs it (docs/methods.md, "Progress"). */
typedef struct comm_set comm_set;

enum { COMM_SEND = 1, COMM_RECV = 0 };
/* Peer for a receive from any rank. */
#define COMM_ANY_SOURCE (-1)

comm_set *comm_set_new(int cap);
void comm_set_free(comm_set *s);
/* Add a persistent request: bytes of buf to/from world rank peer with tag; returns its index. */
int comm_set_add(comm_set *s, int kind, void *buf, size_t bytes, int peer, int tag);
/* The set is polled by a background thread next to computation: its waits never spin and nap
 * at most 200 µs. */
void comm_set_background(comm_set *s);
/* Start request i (it must not be active). */
void comm_set_start(comm_set *s, int i);
/* Without waiting: 1 if request i was active and has now completed (it is no longer active). */
int comm_set_test(comm_set *s, int i);
/* 1 while request i is started and not yet seen complete. */
int comm_set_active(const comm_set *s, int i);
/* Wait until at least one active request completes (or none is active); their indices go to
 * done[] (capacity cap), the count is returned. After timeout_s seconds: -1. */
int comm_set_wait_some(comm_set *s, int *done, double timeout_s);
/* Wait until request i completes; returns 0, or -1 after timeout_s seconds. */
int comm_set_wait(comm_set *s, int i, double timeout_s);
/* Wait until request i completes; after comm_timeout_s (comm_set_timeout), comm_timeout_abort(what). */
void comm_set_wait_or_abort(comm_set *s, int i, const char *what);
/* Source world rank of the last completion of receive i. */
int comm_set_source(const comm_set *s, int i);

/* A function comm_timeout_abort calls on this rank before stopping (the run-file writer
 * records why the run stopped). */
void comm_on_timeout(void (*fn)(void *), void *arg);

/* Stop every rank after a wait that timed out: prints the rank, what it waited for (what) and
 * the timeout; the run-file writer runs its comm_on_timeout function and aborts with exit status
 * 1; another rank sends the writer a note (comm_set_log_rank) — the writer, in its next wait
 * (every wait of its main thread tests for notes), records the status and aborts the job — and
 * aborts itself after 10 s if the writer has not (the writer has stopped too). */
void comm_timeout_abort(const char *what) __attribute__((noreturn));

/* fn(ctx) (fn NULL: none) is called in every polling round of every wait of this rank's main
 * thread (not of a background set): gossip passes signals on while it waits (ctx: its state;
 * src/methods/gossip_signal.c). It may test and start requests of its own comm_set. */
void comm_on_wait(void (*fn)(void *ctx), void *ctx);

/* Every rank: world rank `rank` writes the run file (it receives the notes above). */
void comm_set_log_rank(int rank);
/* "rank R waited for WHAT" of the last timeout seen here ("" if none), for the run file. */
const char *comm_stop_detail(void);
/* 1 if that rank gave up because a stop signal had come and it still waited (comm_on_stop). */
int comm_stop_after_signal(void);

/* After a stop was requested (SIGTERM: src/train/checkpoint.h), a rank that has waited for
 * another rank in one wait of this module (a collective, a reply) for grace_s seconds, with the
 * request at least that old, stops every rank (the comm_on_timeout function runs first; exit status 1) instead of waiting until
 * comm_timeout_s: the rank it waits for will not come to the checkpoint. age() returns the
 * seconds since the request, or a negative number when there is none; NULL turns it off. */
void comm_on_stop(double (*age)(void), double grace_s);

/* Stop every rank now with status code (after printing the reason yourself): a quarter second
 * for the launcher to forward this rank's last output, then MPI_Abort. */
void comm_abort(int code) __attribute__((noreturn));

/* The MPI library's own version string, one line (MPI_Get_library_version), into buf. */
void comm_library_version(char *buf, size_t n);

#endif
