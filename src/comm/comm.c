/* comm.c — MPI behind one door (see comm.h). MPICH from Debian; MPI-3 calls only. */
#include "comm.h"
#include "comm_internal.h"

#include <errno.h>
#include <sched.h>
#include <sys/prctl.h>
#include <mpi.h>
#if defined(OPEN_MPI)
#include <mpi-ext.h> /* MPIX_Query_cuda_support */
#endif
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

static int g_rank, g_size, g_local_rank, g_local_size = 1;
static MPI_Comm g_workers = MPI_COMM_NULL; /* workers only (MPI_COMM_WORLD until comm_set_workers) */
static int g_nworkers = 1, g_is_worker = 1;
static double g_timeout_s = 300.0;
static int g_thread_multiple;
/* The polling wait (poll_wait): test, yielding the core between tests, for SPIN_S; then nap
 * from NAP_MIN_NS, doubling up to NAP_FINE_MAX_NS while the wait is younger than NAP_FINE_S,
 * then up to NAP_MAX_NS. Measured on 2 cores, linear model, 1874 steps (docs/methods.md):
 * p = 2 all-reduce 0.3 s (as blocking MPI_Allreduce); without the 1 ms spin 1.2 s; p = 16
 * all-reduce 19.6 s, 67 s with naps growing straight to 1 ms. */
#define SPIN_S g_spin_s
static double g_spin_s = 1e-3; /* DSGD_COMM_SPIN_S overrides (comm_init_thread; docs/simulate.md, "Cost") */
#define NAP_MIN_NS 2000L
#define NAP_FINE_S 0.02
#define NAP_FINE_MAX_NS 50000L
#define NAP_MAX_NS 1000000L
/* A background thread (comm_set_background) never spins and naps at most 200 µs: it shares
 * the core with computation and answers a peer within ~0.2 ms. */
#define NAP_BG_MAX_NS 200000L
static char g_host[MPI_MAX_PROCESSOR_NAME];
static MPI_Comm g_node = MPI_COMM_NULL; /* the ranks of this node (MPI_COMM_TYPE_SHARED) */
static void (*g_finalize_hook)(void);    /* comm_on_finalize */

static void mpi_check(int rc, const char *call, const char *file, int line) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "dsgd-run: rank %d on %s: %s failed at %s:%d: %s\n", g_rank, g_host, call, file, line, msg);
    MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
    exit(EXIT_RUNTIME);
}
#define mpiCheck(call) mpi_check((call), #call, __FILE__, __LINE__)

/* MPI_THREAD_* as a word, for messages. */
static const char *level_name(int level) {
    return level == MPI_THREAD_MULTIPLE ? "MPI_THREAD_MULTIPLE" : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
         : level == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SINGLE";
}
static int g_provided = -1; /* MPI_Init_thread's `provided`; -1: MPI not initialised (comm_init_self) */

int comm_init_thread(int *argc, char ***argv, int multiple) {
    int provided = MPI_THREAD_SINGLE;
    /* FUNNELED: only the main thread calls MPI (the loader's decode threads, the servers'
     * evaluation thread and oneDNN's threads never do); MULTIPLE for the asynchronous gossip
     * methods, whose communication thread answers peers while the main thread exchanges too. */
    const int rc = MPI_Init_thread(argc, argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "dsgd-run: MPI_Init_thread failed (error code %d): MPI could not start\n", rc);
        exit(EXIT_RUNTIME);
    }
    g_provided = provided;
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    die_set_rank(g_rank);
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &g_size));
    int len = 0;
    mpiCheck(MPI_Get_processor_name(g_host, &len));
    /* MULTIPLE missing is the caller's to refuse (comm_thread_multiple, with advice); FUNNELED is
     * the least any run needs: threads run beside the one that calls MPI. */
    if (provided < MPI_THREAD_FUNNELED) {
        fprintf(stderr, "dsgd-run: rank %d on %s: MPI gave thread level %s; dsgd-run needs at least MPI_THREAD_FUNNELED "
                        "(decoding, evaluation and oneDNN threads run beside the thread that calls MPI): use an MPI "
                        "library built with thread support\n", g_rank, g_host, level_name(provided));
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
        exit(EXIT_RUNTIME);
    }
    /* DSGD_COMM_SPIN_S: the spin (yielding) phase of every wait, seconds; 0 naps at once, which
     * helps when many ranks share few cores (p = 64 on 2 cores: 25 % less real time per step;
     * docs/simulate.md, "Cost") and costs at p = 2 (above). */
    const char *spin = getenv("DSGD_COMM_SPIN_S");
    if (spin && *spin) {
        char *end = NULL;
        const double v = strtod(spin, &end);
        if (end == spin || *end || !(v >= 0 && v <= 1)) {
            if (g_rank == 0)
                fprintf(stderr, "dsgd-run: environment variable DSGD_COMM_SPIN_S=%s: not a number of seconds in [0, 1] "
                                "(the spin phase of comm's waits; default 0.001)\n", spin);
            MPI_Abort(MPI_COMM_WORLD, EXIT_BADINPUT);
            exit(EXIT_BADINPUT);
        }
        g_spin_s = v;
    }
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &g_local_rank));
    mpiCheck(MPI_Comm_size(node, &g_local_size));
    g_node = node;
    g_workers = MPI_COMM_WORLD;
    g_nworkers = g_size;
    /* Naps of a few µs: without this the kernel's default 50 µs timer slack stretches every
     * nap of the polling wait to ≥ 50 µs. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    return 0;
}

int comm_init(int *argc, char ***argv) { return comm_init_thread(argc, argv, 0); }

void comm_init_self(void) {
    g_rank = 0, g_size = 1, g_local_rank = 0, g_local_size = 1, g_nworkers = 1, g_is_worker = 1;
    g_provided = -1;
    if (gethostname(g_host, sizeof g_host) != 0) snprintf(g_host, sizeof g_host, "localhost");
    g_host[sizeof g_host - 1] = '\0';
}

int comm_mpi_initialized(void) { return g_provided >= 0; }

void comm_thread_multiple_advice(char *buf, size_t n) {
    char lib[256];
    comm_library_version(lib, sizeof lib);
    const char *fix =
        strstr(lib, "CRAY MPICH") || strstr(lib, "Cray MPICH")
            ? "Cray MPICH grants it only when asked: export MPICH_MAX_THREAD_SAFETY=multiple before the launch (the job "
              "scripts' site block, jobs/README.md)"
        : strstr(lib, "Intel(R) MPI") || strstr(lib, "Intel MPI")
            ? "Intel MPI grants it with its release (the default since 2019) or release_mt library (I_MPI_LIBRARY_KIND, "
              "or `source <impi>/env/vars.sh release_mt`); before 2019 with a build linked by `mpiicc -mt_mpi`"
        : strstr(lib, "Open MPI")
            ? "Open MPI grants it when built with thread support (the default since 3.0; `ompi_info | grep -i thread` "
              "should say MPI_THREAD_MULTIPLE: yes); else use an Open MPI module built so (--enable-mpi-thread-multiple "
              "before 3.0)"
        : strstr(lib, "MVAPICH")
            ? "MVAPICH2 grants it with MV2_ENABLE_AFFINITY=0 set at launch (and a build with --enable-threads=multiple)"
        : strstr(lib, "MPICH")
            ? "MPICH grants it when built with --enable-threads=multiple (the default); on Cray MPICH export "
              "MPICH_MAX_THREAD_SAFETY=multiple before the launch"
            : "use an MPI library (or its setting) that grants it: Cray MPICH: export MPICH_MAX_THREAD_SAFETY=multiple; "
              "Open MPI: a build with thread support; Intel MPI: I_MPI_LIBRARY_KIND=release or release_mt";
    snprintf(buf, n, "this MPI (%.120s) gave %s; %s (docs/build.md, \"MPI\")", lib,
             g_provided >= 0 ? level_name(g_provided) : "no thread level (not initialised)", fix);
}

void comm_set_workers(int p) {
    if (p < 1 || p > g_size) DIE("comm_set_workers: p = %d with %d ranks", p, g_size);
    g_is_worker = g_rank < p;
    if (!comm_mpi_initialized()) return; /* comm_init_self: a world of one */
    MPI_Comm c;
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, g_is_worker ? 0 : 1, g_rank, &c));
    if (g_workers != MPI_COMM_WORLD) mpiCheck(MPI_Comm_free(&g_workers));
    g_workers = c;
    g_nworkers = p;
}

void comm_set_timeout(double seconds) { g_timeout_s = seconds > 0 ? seconds : 300.0; }

/* Sleep ns nanoseconds (the polling back-off). */
static void nap(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static double (*g_stop_age)(void); /* seconds since a stop was requested (comm_on_stop), < 0: none */
static double g_stop_grace_s;

/* Notes to the run-file writer (comm_set_log_rank): a rank that gives up on a wait tells the
 * writer, which records the status and stops every rank. The writer tests its receive in every
 * wait of its main thread. */
#define TAG_NOTE 32700
#define NOTE_LEN 200
#define NOTE_GRACE_S 10.0  /* a rank that sent a note waits this long for the writer to stop the job */
typedef struct { int32_t rank, kind; char what[NOTE_LEN]; } note_msg;
enum { NOTE_TIMEOUT = 1, NOTE_STOP = 2 };
static int g_log_rank = -1;
static note_msg g_note_in;
static MPI_Request g_note_req = MPI_REQUEST_NULL;
static char g_detail[NOTE_LEN + 64];
static int g_detail_stop; /* the rank that gave up did so after a stop signal */

static void (*g_on_timeout)(void *);
static void *g_on_timeout_arg;

void comm_on_timeout(void (*fn)(void *), void *arg) {
    g_on_timeout = fn;
    g_on_timeout_arg = arg;
}

/* A rank that gives up on a wait: the writer records the status and stops the job at once;
 * another rank tells the writer (a note) and waits for it to do so, at most NOTE_GRACE_S. */
__attribute__((noreturn)) static void give_up(int kind, const char *what) {
    static atomic_int giving_up;
    if (atomic_exchange(&giving_up, 1)) { /* another thread of this rank gives up already: it ends the process */
        nap((long)(NOTE_GRACE_S + 5.0) * 1000000000L);
        comm_abort(EXIT_RUNTIME);
    }
    fflush(stderr);
    snprintf(g_detail, sizeof g_detail, "rank %d on %s waited for %s", g_rank, g_host, what);
    g_detail_stop = kind == NOTE_STOP;
    if (g_on_timeout) {
        g_on_timeout(g_on_timeout_arg);
        comm_abort(EXIT_RUNTIME); /* which lets mpiexec forward the message before MPI_Abort tears the job down */
    }
    if (g_log_rank >= 0 && g_log_rank != g_rank) {
        static note_msg out;
        out.rank = g_rank, out.kind = kind;
        snprintf(out.what, sizeof out.what, "%s", what);
        MPI_Request r;
        if (MPI_Isend(&out, (int)sizeof out, MPI_BYTE, g_log_rank, TAG_NOTE, MPI_COMM_WORLD, &r) == MPI_SUCCESS) {
            const double t0 = wall_time();
            int flag = 0;
            while (wall_time() - t0 < NOTE_GRACE_S) { /* the writer aborts the job meanwhile */
                if (!flag) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
                nap(1000000L);
            }
        }
    } else
        nap(2000000000L);
    comm_abort(EXIT_RUNTIME);
}

void comm_timeout_abort(const char *what) {
    fprintf(stderr,
            "dsgd-run: rank %d on %s: waited more than comm_timeout_s = %g s for %s; a rank has stopped or is "
            "far slower than the others; stopping every rank\n",
            g_rank, g_host, g_timeout_s, what);
    give_up(NOTE_TIMEOUT, what);
}

void comm_on_stop(double (*age)(void), double grace_s) {
    g_stop_age = age;
    g_stop_grace_s = grace_s;
}

static void stop_abort(double age) {
    fprintf(stderr,
            "dsgd-run: rank %d on %s: a stop signal arrived %.0f s ago and this rank is still waiting for another rank "
            "(one that has stopped, or is far slower): stopping every rank without a checkpoint\n", g_rank, g_host, age);
    give_up(NOTE_STOP, "another rank after a stop signal");
}

void comm_set_log_rank(int rank) {
    g_log_rank = rank;
    if (rank == g_rank && g_size > 1 && g_note_req == MPI_REQUEST_NULL)
        mpiCheck(MPI_Irecv(&g_note_in, (int)sizeof g_note_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_NOTE, MPI_COMM_WORLD, &g_note_req));
}

/* The writer: has a rank given up? Then record and stop every rank. */
static void note_check(void) {
    int flag = 0;
    mpiCheck(MPI_Test(&g_note_req, &flag, MPI_STATUS_IGNORE));
    if (!flag) return;
    g_note_in.what[NOTE_LEN - 1] = '\0';
    snprintf(g_detail, sizeof g_detail, "rank %d waited for %s", (int)g_note_in.rank, g_note_in.what);
    g_detail_stop = g_note_in.kind == NOTE_STOP;
    fprintf(stderr, "dsgd-run: rank %d on %s: rank %d %s %s; stopping every rank\n", g_rank, g_host, (int)g_note_in.rank,
            g_note_in.kind == NOTE_STOP ? "gave up after a stop signal waiting for" : "waited more than comm_timeout_s for",
            g_note_in.what);
    fflush(stderr);
    if (g_on_timeout) g_on_timeout(g_on_timeout_arg);
    nap(200000000L);
    comm_abort(EXIT_RUNTIME);
}

static void (*g_wait_hook)(void *ctx);
static void *g_wait_ctx;

void comm_on_wait(void (*fn)(void *ctx), void *ctx) { g_wait_hook = fn, g_wait_ctx = ctx; }

/* The polling wait under every blocking call of this file: MPI_Testsome on the n `req`s (idx:
 * NULL for one request; st: NULL to ignore) until at least one completes, with a short burst of
 * immediate tests, then naps doubling from 2 µs to 1 ms. Returns the number completed (0 if none
 * is active) or -1 after timeout_s of waiting. A gap of more than COMM_STALL_S between two tests
 * is time this process did not run (SIGSTOP, a paused VM), not time a peer kept it waiting: it is
 * not counted, so a rank that wakes up tests its peers for timeout_s before it gives up on them
 * (comm.h). */
static int poll_wait(MPI_Request *req, int n, int *idx, MPI_Status *st, double timeout_s, int background) {
    double t0 = wall_time(), prev = t0;
    long napns = NAP_MIN_NS;
    int one;
    for (;;) {
        int out = 0;
        mpiCheck(MPI_Testsome(n, req, &out, idx ? idx : &one, st ? st : MPI_STATUSES_IGNORE));
        if (out == MPI_UNDEFINED) return 0;
        if (out > 0) return out;
        if (!background && g_note_req != MPI_REQUEST_NULL) note_check();
        if (!background && g_wait_hook) g_wait_hook(g_wait_ctx);
        double now = wall_time();
        if (now - prev > COMM_STALL_S) t0 += now - prev; /* this process did not run */
        prev = now;
        if (!background && now - t0 < SPIN_S) {
            sched_yield(); /* a rank that computes on this core goes first */
            continue;
        }
        if (now - t0 > timeout_s) return -1;
        if (!background && g_stop_age && now - t0 >= g_stop_grace_s) {
            const double age = g_stop_age();
            if (age >= g_stop_grace_s) stop_abort(age);
        }
        nap(napns);
        /* Fine naps for the first NAP_FINE_S (a collective's rounds, a server's reply), then
         * coarse ones (a rank waiting for a straggler or for the end of the run). */
        long cap = background ? NAP_BG_MAX_NS : now - t0 < NAP_FINE_S ? NAP_FINE_MAX_NS : NAP_MAX_NS;
        napns = napns * 2 < cap ? napns * 2 : cap;
    }
}

/* Agreement points may wait a whole run (a failed worker waits for the others to finish):
 * no timeout, but polled, so a waiting rank does not spin. */
#define NO_TIMEOUT 1e18

/* Start the non-blocking collective `start` (an MPI_I* call whose request is &req) and complete
 * it with the polling wait: after comm_timeout_s, comm_timeout_abort(what); what = NULL: no
 * timeout. */
#define COLLECTIVE(start, what)                                                                   \
    do {                                                                                          \
        MPI_Request req;                                                                          \
        mpi_check((start), #start, __FILE__, __LINE__);                                           \
        if (poll_wait(&req, 1, NULL, NULL, (what) ? g_timeout_s : NO_TIMEOUT, 0) < 0)             \
            comm_timeout_abort(what);                                                             \
    } while (0)

const char *comm_stop_detail(void) { return g_detail; }
int comm_stop_after_signal(void) { return g_detail_stop; }

void comm_finalize(void) {
    if (!comm_mpi_initialized()) return; /* comm_init_self */
    if (g_finalize_hook) g_finalize_hook(); /* comm_shared.c's windows: before the node communicator */
    if (g_node != MPI_COMM_NULL) MPI_Comm_free(&g_node);
    if (g_note_req != MPI_REQUEST_NULL) { /* no note came: take the receive back */
        MPI_Cancel(&g_note_req);
        MPI_Wait(&g_note_req, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
}
int comm_rank(void) { return g_rank; }
int comm_size(void) { return g_size; }
int comm_local_rank(void) { return g_local_rank; }
int comm_local_size(void) { return g_local_size; }
MPI_Comm comm_node_comm(void) { return g_node; }
void comm_on_finalize(void (*fn)(void)) { g_finalize_hook = fn; }
const char *comm_host(void) { return g_host; }

/* The largest v over the world; what: as COLLECTIVE's. */
static long max_long(long v, const char *what) {
    if (g_size == 1) return v;
    long out = v;
    COLLECTIVE(MPI_Iallreduce(&v, &out, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD, &req), what);
    return out;
}

int comm_max_int(int code) { return (int)max_long(code, NULL); }

int comm_thread_multiple(void) { return g_thread_multiple; }

void comm_node_allgather(const void *in, size_t nbytes, void *out) {
    if (nbytes > (size_t)INT32_MAX) DIE("comm_node_allgather: %zu bytes per rank", nbytes);
    if (g_local_size == 1 || g_node == MPI_COMM_NULL) {
        memcpy(out, in, nbytes);
        return;
    }
    COLLECTIVE(MPI_Iallgather(in, (int)nbytes, MPI_BYTE, out, (int)nbytes, MPI_BYTE, g_node, &req), NULL);
}

int comm_gpu_aware(void) {
    const char *env = getenv("DSGD_CUDA_AWARE");
    if (env && strcmp(env, "0") == 0) return 0;
    if (env && strcmp(env, "1") == 0) return 1; /* an MPI that does not report its CUDA support */
    int yes = 0;
#if defined(MPICH) && defined(MPIX_GPU_SUPPORT_CUDA)
    if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) != MPI_SUCCESS) yes = 0;
#elif defined(OPEN_MPI) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    yes = MPIX_Query_cuda_support();
#endif
    return yes != 0;
}

void comm_workers_sum_f32(float *buf, size_t n) {
    if (g_nworkers == 1) return;
    const size_t chunk = COMM_CHUNK_BYTES / sizeof(float);
    for (size_t off = 0; off < n; off += chunk) {
        int cnt = (int)(n - off < chunk ? n - off : chunk);
        COLLECTIVE(MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, g_workers, &req), "the other workers (all-reduce)");
    }
}

void comm_workers_bcast(void *buf, size_t nbytes, int root) {
    if (g_nworkers == 1) return;
    const size_t chunk = COMM_CHUNK_BYTES;
    for (size_t off = 0; off < nbytes; off += chunk) {
        int cnt = (int)(nbytes - off < chunk ? nbytes - off : chunk);
        COLLECTIVE(MPI_Ibcast((char *)buf + off, cnt, MPI_BYTE, root, g_workers, &req), "the other workers (broadcast)");
    }
}

void comm_workers_barrier(void) {
    if (g_nworkers == 1) return;
    COLLECTIVE(MPI_Ibarrier(g_workers, &req), "the other workers (a meeting point)");
}

int comm_finish(int code, int writer) {
    if (g_size == 1) return code;
    MPI_Request req;
    int out = code;
    mpiCheck(MPI_Iallreduce(&code, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req));
    /* The writer gives up first, with the run's own status; the others a little later. */
    if (poll_wait(&req, 1, NULL, NULL, g_timeout_s + (writer ? 0.0 : NOTE_GRACE_S), 0) >= 0) return out;
    fprintf(stderr, "dsgd-run: rank %d on %s: the end-of-run agreement waited more than comm_timeout_s = %g s: a rank has "
                    "stopped; ending the job (exit status %d)\n", g_rank, g_host, g_timeout_s, writer ? code : EXIT_RUNTIME);
    comm_abort(writer ? code : EXIT_RUNTIME);
}

int comm_agree(int code) { return (int)comm_max_long(code); }

long comm_max_long(long v) { return max_long(v, "the other ranks (agreement)"); }

void comm_workers_wait(double *wait_s) {
    if (g_nworkers == 1) return;
    double t0 = wall_time();
    COLLECTIVE(MPI_Ibarrier(g_workers, &req), "the other workers (barrier before the all-reduce)");
    *wait_s += wall_time() - t0;
}

void comm_workers_allgather(const void *in, size_t nbytes, void *out) {
    if (nbytes > (size_t)INT32_MAX) DIE("comm_workers_allgather: %zu bytes per worker", nbytes);
    COLLECTIVE(MPI_Iallgather(in, (int)nbytes, MPI_BYTE, out, (int)nbytes, MPI_BYTE, g_workers, &req),
               "the other workers (all-gather)");
}

void comm_allreduce_mean_f32(float *buf, size_t n, double *wait_s) {
    if (g_nworkers == 1) return;
    if (wait_s) comm_workers_wait(wait_s);
    comm_workers_sum_f32(buf, n);
    const float inv = 1.0f / (float)g_nworkers;
    for (size_t i = 0; i < n; i++) buf[i] *= inv;
}

/* ---- For comm_chunks.c (comm_internal.h) -------------------------------------------------- */

MPI_Comm comm_workers_comm(void) { return g_workers; }
int comm_nworkers(void) { return g_nworkers; }
double comm_timeout_s(void) { return g_timeout_s; }
void comm_mpi_check(int rc, const char *call, const char *file, int line) { mpi_check(rc, call, file, line); }

void comm_pause(double idle_s) {
    if (idle_s < SPIN_S) sched_yield();
    else nap(NAP_FINE_MAX_NS);
}

void comm_workers_sum_f64(double *buf, int n) {
    if (g_nworkers == 1) return;
    COLLECTIVE(MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, g_workers, &req), "the other workers (all-reduce)");
}

void comm_workers_gather_f64(const double *in, int n, double *out) {
    COLLECTIVE(MPI_Igather(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, 0, g_workers, &req), "the other workers (gather)");
}

void comm_allreduce_sum_f64(double *buf, int n) {
    if (g_size == 1) return;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

void comm_bcast(void *buf, size_t nbytes, int root) {
    if (g_size == 1) return;
    mpiCheck(MPI_Bcast(buf, (int)nbytes, MPI_BYTE, root, MPI_COMM_WORLD));
}

void comm_bcast_bounded(void *buf, size_t nbytes, int root, const char *what) {
    if (g_size == 1) return;
    for (size_t off = 0; off < nbytes; off += COMM_CHUNK_BYTES) {
        int cnt = (int)(nbytes - off < COMM_CHUNK_BYTES ? nbytes - off : COMM_CHUNK_BYTES);
        COLLECTIVE(MPI_Ibcast((char *)buf + off, cnt, MPI_BYTE, root, MPI_COMM_WORLD, &req), what);
    }
}

void comm_barrier(void) {
    if (g_size == 1) return;
    COLLECTIVE(MPI_Ibarrier(MPI_COMM_WORLD, &req), NULL);
}

void comm_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    /* The launcher forwards each rank's output through pipes, and MPI_Abort has it kill every
     * process at once: MPICH's Hydra was seen to drop the last lines of the aborting rank — the
     * message saying why (test_faults' data failure, once in CI). A quarter second lets them
     * through before the job goes. */
    if (comm_mpi_initialized()) nap(250000000L);
    if (comm_mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

void comm_library_version(char *buf, size_t n) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    v[strcspn(v, "\n")] = '\0';
    for (char *c = v; *c; c++)
        if (*c == '\t') *c = ' ';
    snprintf(buf, n, "%s", v);
}

/* ---- Persistent point-to-point requests --------------------------------------------------- */

struct comm_set {
    int n, cap;
    int background;
    MPI_Request *req;
    MPI_Status *st;       /* last status of each request */
    MPI_Status *tmp;      /* Testsome's statuses */
    int *idx;             /* Testsome's indices */
    char *active;
};

comm_set *comm_set_new(int cap) {
    comm_set *s = xcalloc(1, sizeof *s);
    s->cap = cap;
    s->req = xmalloc((size_t)cap * sizeof *s->req);
    s->st = xcalloc((size_t)cap, sizeof *s->st);
    s->tmp = xcalloc((size_t)cap, sizeof *s->tmp);
    s->idx = xmalloc((size_t)cap * sizeof *s->idx);
    s->active = xcalloc((size_t)cap, 1);
    for (int i = 0; i < cap; i++) s->req[i] = MPI_REQUEST_NULL;
    return s;
}

void comm_set_free(comm_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        if (s->active[i]) {
            /* Bounded: a send to a rank that has stopped may neither complete nor cancel; then
             * the request is only released (the job is being ended: comm_finish). */
            MPI_Cancel(&s->req[i]);
            int flag = 0;
            const double t0 = wall_time();
            while (!flag && wall_time() - t0 < 1.0) {
                MPI_Test(&s->req[i], &flag, MPI_STATUS_IGNORE);
                if (!flag) nap(100000L);
            }
        }
        if (s->req[i] != MPI_REQUEST_NULL) MPI_Request_free(&s->req[i]);
    }
    free(s->req), free(s->st), free(s->tmp), free(s->idx), free(s->active), free(s);
}

int comm_set_add(comm_set *s, int kind, void *buf, size_t bytes, int peer, int tag) {
    if (s->n == s->cap) DIE("comm_set_add: set full (%d requests)", s->cap);
    if (bytes > (size_t)INT32_MAX) DIE("comm_set_add: %zu bytes in one message", bytes);
    int i = s->n++;
    if (kind == COMM_SEND) mpiCheck(MPI_Send_init(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &s->req[i]));
    else mpiCheck(MPI_Recv_init(buf, (int)bytes, MPI_BYTE, peer == COMM_ANY_SOURCE ? MPI_ANY_SOURCE : peer, tag, MPI_COMM_WORLD, &s->req[i]));
    return i;
}

void comm_set_start(comm_set *s, int i) {
    if (s->active[i]) DIE("comm_set_start: request %d already active", i);
    mpiCheck(MPI_Start(&s->req[i]));
    s->active[i] = 1;
}

int comm_set_active(const comm_set *s, int i) { return s->active[i]; }

int comm_set_test(comm_set *s, int i) {
    if (!s->active[i]) return 0;
    int flag = 0;
    mpiCheck(MPI_Test(&s->req[i], &flag, &s->st[i]));
    if (flag) s->active[i] = 0;
    return flag;
}

void comm_set_background(comm_set *s) { s->background = 1; }

int comm_set_wait_some(comm_set *s, int *done, double timeout_s) {
    int k = poll_wait(s->req, s->n, s->idx, s->tmp, timeout_s, s->background);
    for (int j = 0; j < k; j++) {
        int i = s->idx[j];
        s->st[i] = s->tmp[j];
        s->active[i] = 0;
        done[j] = i;
    }
    return k;
}

int comm_set_wait(comm_set *s, int i, double timeout_s) {
    if (!s->active[i]) return 0;
    if (poll_wait(&s->req[i], 1, NULL, &s->st[i], timeout_s, s->background) < 0) return -1;
    s->active[i] = 0;
    return 0;
}

void comm_set_wait_or_abort(comm_set *s, int i, const char *what) {
    if (comm_set_wait(s, i, g_timeout_s) != 0) comm_timeout_abort(what);
}

int comm_set_source(const comm_set *s, int i) { return s->st[i].MPI_SOURCE; }
