/* h5msg.h — HDF5's own words for the last failure, for error messages that name the file, the
 * call and the object (src/io/runlog.c, src/data/shards.c). HDF5 error stack API: H5Ewalk2
 * (downward: outermost first), H5Eclear2. */
#ifndef DSGD_H5MSG_H
#define DSGD_H5MSG_H

#include <stddef.h>

/* "<outermost> (<innermost>)" of the current thread's HDF5 error stack (just one when they are
 * the same, "no message from HDF5" when it is empty) into buf; clears the stack. */
void h5_message(char *buf, size_t n);

#endif
