/* comm_chunks.c — the mean over the workers chunk by chunk (comm.h "The same mean, chunk by
 * chunk"): comm_allreduce_mean_f32 cut into COMM_CHUNK_BYTES chunks, each an MPI_Iallreduce the
 * caller starts as its data becomes ready and completes without blocking (the overlapped
 * all-reduce, src/comm/reduce.c). What it needs of comm.c: comm_internal.h. */
#include "comm_internal.h"

#include "util/util.h"

#define mpiCheck(call) comm_mpi_check((call), #call, __FILE__, __LINE__)

/* Chunks in flight, compact: request, chunk index, start time. Chunks complete at once with one
 * worker wait in g_ck_local for comm_mean_chunks_test. */
static MPI_Request g_ck_req[COMM_MAX_CHUNKS];
static int g_ck_idx[COMM_MAX_CHUNKS], g_ck_out[COMM_MAX_CHUNKS], g_ck_local[COMM_MAX_CHUNKS];
static double g_ck_t0[COMM_MAX_CHUNKS];
static MPI_Status g_ck_st[COMM_MAX_CHUNKS];
static int g_ck_n, g_ck_nlocal;
static float *g_ck_buf;
static size_t g_ck_len;

#define CK_FLOATS ((size_t)(COMM_CHUNK_BYTES / sizeof(float)))

int comm_mean_chunks(size_t n) { return (int)((n + CK_FLOATS - 1) / CK_FLOATS); }

void comm_mean_chunk_range(size_t n, int k, size_t *lo, size_t *hi) {
    if (k < 0 || (size_t)k * CK_FLOATS >= n) DIE("comm_mean_chunk_range: chunk %d of a %zu-float vector", k, n);
    *lo = (size_t)k * CK_FLOATS;
    *hi = n - *lo < CK_FLOATS ? n : *lo + CK_FLOATS;
}

void comm_mean_chunk_start(float *buf, size_t n, int k) {
    size_t lo, hi;
    comm_mean_chunk_range(n, k, &lo, &hi);
    if (g_ck_n + g_ck_nlocal > 0 && (buf != g_ck_buf || n != g_ck_len))
        DIE("comm_mean_chunk_start: another vector's chunks are still in flight");
    if (g_ck_n + g_ck_nlocal >= COMM_MAX_CHUNKS) DIE("comm_mean_chunk_start: more than %d chunks in flight", COMM_MAX_CHUNKS);
    g_ck_buf = buf;
    g_ck_len = n;
    if (comm_nworkers() == 1) {
        g_ck_local[g_ck_nlocal++] = k;
        return;
    }
    mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, buf + lo, (int)(hi - lo), MPI_FLOAT, MPI_SUM, comm_workers_comm(), &g_ck_req[g_ck_n]));
    g_ck_idx[g_ck_n] = k;
    g_ck_t0[g_ck_n] = wall_time();
    g_ck_n++;
}

int comm_mean_chunks_test(int *done) {
    int nd = 0;
    for (int i = 0; i < g_ck_nlocal; i++) done[nd++] = g_ck_local[i];
    g_ck_nlocal = 0;
    if (g_ck_n == 0) return nd;
    int out = 0;
    mpiCheck(MPI_Testsome(g_ck_n, g_ck_req, &out, g_ck_out, g_ck_st));
    if (out != MPI_UNDEFINED && out > 0) {
        const float inv = 1.0f / (float)comm_nworkers(); /* as comm_allreduce_mean_f32 */
        for (int j = 0; j < out; j++) {
            const int k = g_ck_idx[g_ck_out[j]];
            size_t lo, hi;
            comm_mean_chunk_range(g_ck_len, k, &lo, &hi);
            for (size_t i = lo; i < hi; i++) g_ck_buf[i] *= inv;
            done[nd++] = k;
        }
        /* Testsome left MPI_REQUEST_NULL in the completed slots: drop them. */
        int w = 0;
        for (int i = 0; i < g_ck_n; i++) {
            if (g_ck_req[i] == MPI_REQUEST_NULL) continue;
            g_ck_req[w] = g_ck_req[i], g_ck_idx[w] = g_ck_idx[i], g_ck_t0[w] = g_ck_t0[i];
            w++;
        }
        g_ck_n = w;
    }
    const double now = wall_time();
    for (int i = 0; i < g_ck_n; i++)
        if (now - g_ck_t0[i] > comm_timeout_s()) comm_timeout_abort("the other workers (all-reduce)");
    return nd;
}
