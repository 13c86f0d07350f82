/* h5.h — the HDF5 helpers of dsgd-run's three kinds of file: the run file (src/io/runlog*.c),
 * checkpoint rank files (src/train/checkpoint_file.c, checkpoint.c) and the pack
 * (src/data/shards.c). HDF5 public API only (H5E, H5A, H5D, H5S, H5T; nothing 1.12 or 1.14
 * changed). The writers return NULL, or the name of the HDF5 call that failed with HDF5's error
 * stack left as it is, for the caller's message (h5_fail, or its own). */
#ifndef DSGD_H5_H
#define DSGD_H5_H

#include <hdf5.h>
#include <stddef.h>

/* "<outermost> (<innermost>)" of the current thread's HDF5 error stack (just one when they are
 * the same, "no message from HDF5" when it is empty) into buf; clears the stack. */
void h5_message(char *buf, size_t n);

/* Fill err with "<path>: HDF5 <call> failed for <object>: <h5_message>"; returns code. */
int h5_fail(int code, char *err, size_t errlen, const char *path, const char *call, const char *object);

/* A NUL-terminated string type of size bytes (H5T_VARIABLE: variable length), UTF-8 when utf8,
 * else ASCII; H5I_INVALID_HID on failure. The caller closes it (H5Tclose). */
hid_t h5_string_type(size_t size, int utf8);

/* Delete attribute name of obj if it is there. */
const char *h5_attr_delete(hid_t obj, const char *name);

/* Scalar attribute name of obj (one of that name replaced): ftype in the file, *buf as mtype. */
const char *h5_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *buf);

/* String attribute name of obj holding v: variable-length UTF-8 when vlen (h5py reads str),
 * else fixed-length ASCII of strlen(v) + 1 bytes (h5py reads bytes). */
const char *h5_attr_write_str(hid_t obj, const char *name, const char *v, int vlen);

/* String attribute name of obj, fixed or variable length, read as stored (its own character
 * set) into buf (cut to n - 1 bytes, NUL-terminated). 0, or -1 (buf "") when it cannot be
 * opened or read or is not a string. */
int h5_attr_read_str(hid_t obj, const char *name, char *buf, size_t n);

/* 1-D dataset name of loc of n elements (n may be 0: nothing written), with creation properties
 * dcpl (H5P_DEFAULT, or the caller's): ftype in the file, data as mtype. */
const char *h5_write_1d(hid_t loc, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *data, hid_t dcpl);

#endif
