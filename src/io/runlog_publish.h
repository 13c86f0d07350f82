/* runlog_publish.h — publishing an in-memory HDF5 file as the run file (runlog_publish.c; parts
 * 2 and 5 of runlog.c's header comment), for src/io/ only. It knows nothing of the runlog: each
 * call takes the open in-memory file, the output path, the descriptor open on the file published
 * last (-1: none yet) and the image buffer. */
#ifndef DSGD_RUNLOG_PUBLISH_H
#define DSGD_RUNLOG_PUBLISH_H

#include <hdf5.h>
#include <stddef.h>

enum {
    PATHLEN = 4096,   /* bytes of a run-file path, the hidden temporary's included */
    STATUS_LEN = 512, /* bytes of the fixed-size status attribute, its terminating NUL included */
};

/* The buffer of a file image (runlog_publish), grown as needed and kept for the next one: cap
 * bytes at data (NULL, 0 before the first). */
typedef struct {
    unsigned char *data;
    size_t cap;
} image_buf;

/* "%s already exists; ..." (the output path): the refusal of an existing output. */
extern const char *runlog_already_exists_fmt;
int runlog_status_write(hid_t f, const char *v, const char *path, char *err, size_t errlen);
int runlog_temp_name(char *out, size_t outlen, const char *path, const char *tag);
int runlog_publish(hid_t file, const char *path, int *fd, image_buf *image, int overwrite, char *err, size_t errlen);
int runlog_status_in_place(const char *path, int fd, const char *why);

#endif
