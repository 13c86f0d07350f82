/* comm.c — MPI behind one door (see comm.h). MPICH from Debian; MPI-3 calls only. */
#include "comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static int g_rank, g_size, g_local_rank, g_local_size = 1;
static char g_host[MPI_MAX_PROCESSOR_NAME];

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

int comm_init(int *argc, char ***argv) {
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &g_size));
    int len = 0;
    mpiCheck(MPI_Get_processor_name(g_host, &len));
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &g_local_rank));
    mpiCheck(MPI_Comm_size(node, &g_local_size));
    mpiCheck(MPI_Comm_free(&node));
    return 0;
}

void comm_finalize(void) { MPI_Finalize(); }
int comm_rank(void) { return g_rank; }
int comm_size(void) { return g_size; }
int comm_local_rank(void) { return g_local_rank; }
int comm_local_size(void) { return g_local_size; }
const char *comm_host(void) { return g_host; }

int comm_max_int(int code) {
    int out = code;
    mpiCheck(MPI_Allreduce(&code, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return out;
}

void comm_allreduce_mean_f32(float *buf, size_t n) {
    if (g_size == 1) return;
    const size_t chunk = COMM_CHUNK_BYTES / sizeof(float);
    for (size_t off = 0; off < n; off += chunk) {
        int cnt = (int)(n - off < chunk ? n - off : chunk);
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
    const float inv = 1.0f / (float)g_size;
    for (size_t i = 0; i < n; i++) buf[i] *= inv;
}

void comm_allreduce_sum_f64(double *buf, int n) {
    if (g_size == 1) return;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

void comm_bcast(void *buf, size_t nbytes, int root) {
    if (g_size == 1) return;
    mpiCheck(MPI_Bcast(buf, (int)nbytes, MPI_BYTE, root, MPI_COMM_WORLD));
}

void comm_barrier(void) { mpiCheck(MPI_Barrier(MPI_COMM_WORLD)); }

void comm_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
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
