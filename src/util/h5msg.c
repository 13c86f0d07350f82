/* h5msg.c — see h5msg.h. */
#include "util/h5msg.h"

#include <hdf5.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char outer[256], inner[512];
} h5msg;

static herr_t h5msg_walk(unsigned n, const H5E_error2_t *e, void *data) {
    h5msg *m = data;
    if (!e->desc || !e->desc[0]) return 0;
    if (n == 0) snprintf(m->outer, sizeof m->outer, "%s", e->desc);
    snprintf(m->inner, sizeof m->inner, "%s", e->desc); /* last one wins: the innermost */
    return 0;
}

void h5_message(char *buf, size_t n) {
    h5msg m = {{0}, {0}};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5msg_walk, &m);
    H5Eclear2(H5E_DEFAULT);
    const char *detail = m.inner[0] ? m.inner : "no message from HDF5";
    if (m.outer[0] && strcmp(m.outer, m.inner) != 0) snprintf(buf, n, "%s (%s)", m.outer, detail);
    else snprintf(buf, n, "%s", detail);
}
