/* comm_shared.c — one read-only copy of set-up data per node (comm.h, "Node-shared memory"): an
 * MPI shared-memory window (MPI_Win_allocate_shared over the MPI_COMM_TYPE_SHARED communicator)
 * whose bytes node rank 0 fills and every rank of the node then reads in place. What it needs of
 * comm.c: comm_internal.h (the node communicator, the timeout, the MPI error check). */
#include "comm_internal.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/util.h"

#define mpiCheck(call) comm_mpi_check((call), #call, __FILE__, __LINE__)

/* The windows made here, freed by comm_finalize (share_free_all, its comm_on_finalize hook). A
 * run makes two (the IDX training and validation sets). */
#define SHARE_MAX 16
static struct {
    MPI_Win win;
    void *base;
    size_t bytes, locked; /* locked: the page-aligned bytes mprotect'ed read-only */
} g_share[SHARE_MAX];
static int g_nshare;

/* Complete req, testing with comm_pause between tests; longer than comm_timeout_s: every rank
 * stops (comm_timeout_abort(what)). */
static void node_wait(MPI_Request *req, const char *what) {
    double last = wall_time(), waited = 0; /* waited: without gaps of a stopped process (COMM_STALL_S) */
    for (;;) {
        int done = 0;
        mpiCheck(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        const double t = wall_time();
        if (t - last < COMM_STALL_S) waited += t - last;
        last = t;
        if (waited > comm_timeout_s()) comm_timeout_abort(what);
        comm_pause(waited);
    }
}

static void share_free_all(void);

const void *comm_node_share(const void *src, size_t *nbytes, const char *what) {
    MPI_Comm node = comm_node_comm();
    int lsize = 1, lrank = 0;
    if (node != MPI_COMM_NULL) mpiCheck(MPI_Comm_size(node, &lsize)), mpiCheck(MPI_Comm_rank(node, &lrank));
    if (lsize == 1) return src;
    if (g_nshare == SHARE_MAX) DIE("comm_node_share: more than %d shared blocks", SHARE_MAX);
    /* How many bytes: node rank 0's count to the others (bounded: rank 0 may still be reading) */
    uint64_t n = lrank == 0 ? (uint64_t)*nbytes : 0;
    MPI_Request req;
    mpiCheck(MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, node, &req));
    node_wait(&req, what);
    *nbytes = (size_t)n;
    /* Node rank 0 holds all n bytes (one segment, page-aligned by MPICH's mmap); the others map it. */
    void *base = NULL;
    MPI_Win win;
    MPI_Info info;
    mpiCheck(MPI_Info_create(&info));
    mpiCheck(MPI_Info_set(info, "alloc_shared_noncontig", "false"));
    mpiCheck(MPI_Win_allocate_shared(lrank == 0 ? (MPI_Aint)n : 0, 1, info, node, &base, &win));
    MPI_Info_free(&info);
    if (lrank != 0) {
        MPI_Aint size = 0;
        int disp = 0;
        mpiCheck(MPI_Win_shared_query(win, 0, &size, &disp, &base));
        if ((uint64_t)size != n) DIE("comm_node_share: the window holds %lld bytes, not %llu", (long long)size, (unsigned long long)n);
    }
    mpiCheck(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
    if (lrank == 0 && n) memcpy(base, src, (size_t)n);
    mpiCheck(MPI_Win_sync(win));
    mpiCheck(MPI_Ibarrier(node, &req)); /* the copy is in before anyone reads */
    node_wait(&req, what);
    mpiCheck(MPI_Win_sync(win));
    mpiCheck(MPI_Win_unlock_all(win));
    /* Read-only from here on, on every rank: a stray write faults instead of changing the data
     * under the node's other ranks. */
    const long page = sysconf(_SC_PAGESIZE);
    size_t locked = 0;
    if (page > 0 && n && (uintptr_t)base % (uintptr_t)page == 0) {
        locked = ((size_t)n + (size_t)page - 1) / (size_t)page * (size_t)page;
        if (mprotect(base, locked, PROT_READ) != 0) locked = 0;
    }
    g_share[g_nshare].win = win, g_share[g_nshare].base = base, g_share[g_nshare].bytes = (size_t)n;
    g_share[g_nshare].locked = locked;
    g_nshare++;
    comm_on_finalize(share_free_all);
    return base;
}

static void share_free_all(void) {
    while (g_nshare > 0) {
        g_nshare--;
        if (g_share[g_nshare].locked) mprotect(g_share[g_nshare].base, g_share[g_nshare].locked, PROT_READ | PROT_WRITE);
        MPI_Win_free(&g_share[g_nshare].win);
    }
}
