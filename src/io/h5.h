/* h5.h — the HDF5 helpers of dsgd-run's three kinds of file: the run file (src/io/runlog*.c),
 * checkpoint rank files (src/train/checkpoint_file.c, checkpoint.c) and the pack
 * (src/data/shards.c). HDF5 public API only (H5E, H5A, H5D, H5S, H5T; nothing 1.12 or 1.14
 * changed). The writers return NULL, or the name of the HDF5 call that failed with HDF5's error
 * stack left as it is, for the caller's message (h5_fail, or its own); the *_err variants below
 * word that message themselves. */
#ifndef DSGD_H5_H
#define DSGD_H5_H

#include <hdf5.h>
#include <stddef.h>

/* A file access property list with HDF5's file locking off (H5Pset_file_locking(fapl, false,
 * true), HDF5 >= 1.10.7 / 1.12.1; older libraries have no such property and keep their default),
 * for every H5Fopen/H5Fcreate of dsgd-run's files (docs/data.md, "File locking"): HDF5 flock()s
 * every file it opens (shared for reading, exclusive for writing) and fails "unable to lock file"
 * where the file system has no locks (Lustre mounted without flock, NFS without a lock daemon:
 * ENOSYS, ENOLCK, ENOTSUPP; HDF5's ignore_when_disabled forgives only ENOSYS) or another process
 * holds a conflicting one. Nothing of dsgd-run needs those locks: inputs are only read, and every
 * file it writes is new, under a name no other process opens until it is complete (a checkpoint
 * part in step-<N>.tmp/, the run file's temporary before its rename). The environment variable
 * HDF5_USE_FILE_LOCKING, when set, still overrides this (HDF5 reads it after the property list).
 * base: a file access list to start from (copied; H5P_DEFAULT: a new one). The caller closes the
 * result (H5Pclose); H5I_INVALID_HID on failure (HDF5's error stack says why). */
hid_t h5_fapl_unlocked(hid_t base);

/* h5_fapl_unlocked's setting on an existing file access list fapl: 0, or -1. */
int h5_unlock(hid_t fapl);

/* H5Fopen(path, flags, fapl) and H5Fcreate(path, flags, H5P_DEFAULT, fapl) with file locking off
 * (h5_fapl_unlocked of fapl, which may be H5P_DEFAULT). The file's id, or H5I_INVALID_HID with
 * HDF5's error stack telling why. */
hid_t h5_fopen(const char *path, unsigned flags, hid_t fapl);
hid_t h5_fcreate(const char *path, unsigned flags, hid_t fapl);

/* "<outermost> (<innermost>)" of the current thread's HDF5 error stack (just one when they are
 * the same, "no message from HDF5" when it is empty) into buf; clears the stack. */
void h5_message(char *buf, size_t n);

/* Fill err with "<path>: HDF5 <call> failed for <object>: <h5_message>"; returns code. */
int h5_fail(int code, char *err, size_t errlen, const char *path, const char *call, const char *object);

/* Fill err with "<path>: <what>: <strerror(errno)>" (errno as the failed system call left it);
 * returns -1. */
int h5_syserr(char *err, size_t errlen, const char *path, const char *what);

/* 0 when call is NULL (nothing failed); else err filled as h5_fail's message for object
 * "attribute <name> of <objname>" and -1. call: what an h5_attr_* writer returned. */
int h5_attr_fail(const char *call, const char *objname, const char *name, const char *path, char *err, size_t errlen);

/* h5_attr_write and h5_attr_write_str (variable-length UTF-8; NULL v written as "") with the
 * message: 0, or -1 with err filled by h5_attr_fail (objname and path name the object and file
 * in it). */
int h5_attr_write_err(hid_t obj, const char *objname, const char *name, hid_t ftype, hid_t mtype, const void *buf,
                      const char *path, char *err, size_t errlen);
int h5_attr_string_err(hid_t obj, const char *objname, const char *name, const char *v, const char *path, char *err,
                       size_t errlen);

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
