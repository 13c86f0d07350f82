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

/* MPI_Init; returns 0. Records rank, size, node-local rank/size and host name. */
int comm_init(int *argc, char ***argv);
void comm_finalize(void);
int comm_rank(void);
int comm_size(void);
int comm_local_rank(void);   /* rank among the ranks sharing this node */
int comm_local_size(void);   /* ranks sharing this node */
const char *comm_host(void);

/* Collective: the largest of every rank's code (0 = fine). Used after each set-up phase so
 * that a rank that failed makes every rank stop together, none left waiting. */
int comm_max_int(int code);

/* Collective: buf[i] = mean over ranks of buf[i], in place, in chunks of COMM_CHUNK_BYTES
 * (Jin et al. §2.1 all-reduce). n floats. */
void comm_allreduce_mean_f32(float *buf, size_t n);

/* Collective: in-place sum of n doubles over ranks. */
void comm_allreduce_sum_f64(double *buf, int n);

/* Collective: broadcast n bytes from root. */
void comm_bcast(void *buf, size_t nbytes, int root);

void comm_barrier(void);

/* Stop every rank now with status code (after printing the reason yourself). */
void comm_abort(int code) __attribute__((noreturn));

/* The MPI library's own version string, one line (MPI_Get_library_version), into buf. */
void comm_library_version(char *buf, size_t n);

#endif
