/* runlog.h — the HDF5 run file (docs/output.md), written by rank 0 only.
 *
 * Layout: root attributes (method, p, b, m, seed, dsgd_version, config, ...); group /train with
 * 1-D datasets step, time_s, loss, alpha; group /eval with step, time_s, epoch, loss,
 * top1_error, top5_error. Datasets are chunked and extendible, each carries a `units`
 * attribute. /train rows are buffered in memory and appended at every evaluation (or when the
 * buffer fills); after every evaluation the file is flushed. The file is written in HDF5's
 * SWMR mode so that a process killed at any moment leaves a file h5dump can read, holding
 * every evaluation completed before the last flush.
 *
 * Errors: runlog_create returns NULL with err filled (EXIT_BADINPUT class) when the file exists
 * and overwrite is 0, or cannot be created; the append functions return 0 or -1 (I/O failure,
 * message in the runlog's last error, printed by the caller). */
#ifndef DSGD_RUNLOG_H
#define DSGD_RUNLOG_H

#include <stddef.h>

typedef struct runlog runlog;

/* A fixed-size dataset created with the file and rewritten whole by runlog_array (int64,
 * zero-filled) or runlog_array_f64 (float64, NaN-filled), e.g. "ps/staleness_histogram"
 * (parent groups are created). cols == 0: 1-D of rows. */
typedef struct {
    const char *name;   /* path below the root, no leading '/' */
    long rows, cols;
    const char *units;
    const char *description;
    int float64;        /* 1: float64 values, else int64 */
} runlog_array_spec;

typedef struct {
    const char *method;
    int p, b, m;
    unsigned long long seed;
    long iterations;
    const char *config_text;   /* the resolved experiment (config_to_text) */
    const char *command_line;
    const char *hostname;
    const char *device;               /* what the writer computes on, e.g. "cpu: oneDNN 2.6.3" or
                                         "cuda fp32: GPU 0 of 1: NVIDIA H200 (sm_90, 139.8 GiB)";
                                         NULL: attribute not written */
    int servers;                      /* parameter-server ranks (0 for methods without) */
    int ranks;                        /* columns of the /ranks datasets (the p workers); 0: none */
    int eval_local;                   /* 1: also create /eval_local (gossip: rank 0's own model) */
    const runlog_array_spec *arrays;  /* n_arrays fixed-size datasets (may be NULL) */
    int n_arrays;
} runlog_meta;

/* Create path (its parent directories too). An existing file is refused unless overwrite. */
runlog *runlog_create(const char *path, int overwrite, const runlog_meta *meta, char *err, size_t errlen);

/* One /train row: global step (1-based, steps completed), seconds of training wall clock,
 * mean loss over the nodes' minibatches, α used at that step. Buffered. */
int runlog_train(runlog *r, long step, double time_s, double loss, double alpha);

/* One /eval row (fractions in [0,1]); writes buffered /train rows and flushes the file. */
int runlog_eval(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                double top5_error);

/* One /eval_local row (same columns as /eval); needs meta.eval_local. Written with the next
 * flush (the next runlog_eval or runlog_close). */
int runlog_eval_local(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                      double top5_error);

/* One /ranks row: /ranks/step (int64, iterations) and the 2-D [row, meta.ranks] float64
 * datasets /ranks/step_time_s, compute_s, comm_s, wait_s: each worker's mean seconds per step
 * over the steps since the previous row. Buffered like /train rows. */
int runlog_ranks(runlog *r, long step, const double *step_time_s, const double *compute_s, const double *comm_s,
                 const double *wait_s);

/* Rewrite the whole fixed-size dataset meta.arrays[index] (rows·max(cols,1) int64, row-major).
 * Takes effect in the file at the next flush. */
int runlog_array(runlog *r, int index, const long long *data);
/* The same for a float64 array (spec.float64 = 1). */
int runlog_array_f64(runlog *r, int index, const double *data);

/* A root attribute written at the end of the run (e.g. "images_per_s", "status"). */
int runlog_set_attr_double(runlog *r, const char *name, double v);
int runlog_set_attr_string(runlog *r, const char *name, const char *v);

/* Last I/O error message of r. */
const char *runlog_error(const runlog *r);

/* Write buffered rows, flush and close. Returns 0 or -1. */
int runlog_close(runlog *r);

/* "HDF5 x.y.z" — the HDF5 library the run file is written with, into buf. */
void runlog_library_version(char *buf, size_t n);

#endif
