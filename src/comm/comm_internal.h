/* comm_internal.h — what comm.c lends the other files of src/comm/ (comm_chunks.c): the workers'
 * communicator and count (comm_set_workers), the timeout (comm_set_timeout) and its MPI error
 * check. Includes <mpi.h>: for src/comm/ only. */
#ifndef DSGD_COMM_INTERNAL_H
#define DSGD_COMM_INTERNAL_H

#include <mpi.h>

#include "comm.h"

/* The workers' communicator (MPI_COMM_WORLD until comm_set_workers) and their number p. */
MPI_Comm comm_workers_comm(void);
int comm_nworkers(void);
/* Seconds a blocking wait may last (comm_set_timeout; default 300). */
double comm_timeout_s(void);
/* The ranks of this node (MPI_COMM_TYPE_SHARED; MPI_COMM_NULL before comm_init_thread and
 * after comm_finalize). */
MPI_Comm comm_node_comm(void);
/* fn (NULL: none) runs first in comm_finalize, on every rank (comm_shared.c frees its windows:
 * collective over the node, before the node communicator goes). */
void comm_on_finalize(void (*fn)(void));
/* rc not MPI_SUCCESS: say which call failed where (rank, host, file:line, MPI's message) and
 * abort every rank (exit 1). */
void comm_mpi_check(int rc, const char *call, const char *file, int line);

#endif
