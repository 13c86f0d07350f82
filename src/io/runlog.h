/* runlog.h — the HDF5 run file (docs/output.md), written by rank 0 only.
 *
 * Layout: root attributes (method, p, b, m, seed, dsgd_version, config, status, ...); group
 * /train with 1-D datasets step, time_s, loss, alpha; group /eval with step, time_s, epoch, loss,
 * top1_error, top5_error; optional /eval_local, /ranks and method arrays. Datasets are chunked and
 * extendible, each carries a `units` attribute. The file is built in memory and published whole:
 * its image is written to a hidden temporary beside the output and renamed over it, at every
 * evaluation, at runlog_flush, at close, and every few seconds for /train and /ranks rows. So a
 * process killed at any moment leaves a complete, closed HDF5 file (the previous publication),
 * holding every evaluation for which runlog_eval had returned.
 *
 * A run resumed from a checkpoint continues its file (runlog_resume): rows logged after the
 * checkpoint are dropped, the new rows follow, root attributes `resumes` and `resumed_at` say so.
 *
 * Errors: runlog_create returns NULL with err filled (EXIT_BADINPUT class) when the file exists
 * and overwrite is 0, or cannot be created; runlog_resume likewise when the file is missing or
 * is not this experiment's; the append functions return 0 or -1 (I/O failure, message in the
 * runlog's last error, printed by the caller). After a failure the file is no longer extended;
 * runlog_close then records status "stopped: run-file write error: <why>" in the file last
 * published, in place (this needs no free space: a full disk still gets its status). */
#ifndef DSGD_RUNLOG_H
#define DSGD_RUNLOG_H

#include <stddef.h>

typedef struct runlog runlog;

/* A method array created with the file, e.g. "ps/staleness_histogram" (parent groups are
 * created): int64 (read as 0 until written) or float64 (NaN). cols == 0: 1-D. A fixed one has
 * rows rows and is rewritten whole by runlog_array. A growing one (grows = 1)
 * starts with 0 rows and holds the rows the last runlog_array_rows / _rows_f64 gave (at most
 * rows): sized by what is written, e.g. one element per step completed, not per iteration
 * configured. */
typedef struct {
    const char *name;   /* path below the root, no leading '/' */
    long rows, cols;    /* rows: fixed shape, or the most a growing array may hold */
    const char *units;
    const char *description;
    int float64;        /* 1: float64 values, else int64 */
    int grows;          /* 1: unlimited rows, as many as written */
} runlog_array_spec;

/* A root attribute written when the file is created (the data set's provenance: data_format,
 * ...): a string (s != NULL) or an int64 (i). Its name must not be one runlog writes itself. */
typedef struct {
    const char *name;
    const char *s;
    long long i;
} runlog_attr;

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
    const runlog_attr *attrs;         /* n_attrs root attributes (runlog_create only; a resumed
                                         file keeps those of its first run) */
    int n_attrs;
    int wall;                         /* 1 (sim mode, docs/simulate.md): time_s is simulated, and /train,
                                         /eval and /eval_local get a wall_s column (runlog_wall) */
    double publish_s;                 /* publish /train and /ranks rows at least every publish_s
                                         seconds of wall clock (0: 5 s), stretched to 100 times the
                                         cost of a publication */
} runlog_meta;

/* Create path (its parent directories too). An existing file is refused unless overwrite. */
runlog *runlog_create(const char *path, int overwrite, const runlog_meta *meta, char *err, size_t errlen);

/* One /train row: global step (1-based, steps completed), seconds of training wall clock,
 * mean loss over the nodes' minibatches, α used at that step. Buffered; published when
 * meta.publish_s have passed since the last publication (then it takes the publication's time). */
int runlog_train(runlog *r, long step, double time_s, double loss, double alpha);

/* meta.wall: the real training wall clock (s) of the /train, /eval and /eval_local rows that
 * follow, their wall_s (NaN until set). No effect on a file without wall_s columns. */
void runlog_wall(runlog *r, double wall_s);
/* One /eval row (fractions in [0,1]); publishes the file with everything logged so far. */
int runlog_eval(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                double top5_error);

/* One /eval_local row (same columns as /eval); needs meta.eval_local. In the file from the
 * next publication (the next runlog_eval, runlog_flush or runlog_close). */
int runlog_eval_local(runlog *r, long step, double time_s, double epoch, double loss, double top1_error,
                      double top5_error);

/* One /ranks row: /ranks/step (int64, iterations) and the 2-D [row, meta.ranks] float64
 * datasets /ranks/step_time_s, compute_s, comm_s, wait_s, data_s: each worker's mean seconds per
 * step over the steps since the previous row (data_s: getting the minibatch; NULL writes NaN).
 * Buffered like /train rows. */
int runlog_ranks(runlog *r, long step, const double *step_time_s, const double *compute_s, const double *comm_s,
                 const double *wait_s, const double *data_s);

/* Rewrite the whole method array meta.arrays[index] (rows·max(cols,1) int64, row-major; a
 * growing one then holds spec.rows rows). In the file from the next publication. */
int runlog_array(runlog *r, int index, const long long *data);
/* A growing array (spec.grows) now holds rows rows (0..spec.rows) from data; a fixed one
 * accepts only rows = spec.rows. */
int runlog_array_rows(runlog *r, int index, const long long *data, long rows);
int runlog_array_rows_f64(runlog *r, int index, const double *data, long rows);

/* A root attribute of the end of the run (e.g. "images_per_s", "status"): written into the file
 * at once, on disk with the next publication (normally runlog_close's); "status" goes into its
 * fixed-size slot (at most 511 bytes; longer values are cut). Its name is recorded in root
 * attribute final_attributes at close, so that runlog_resume removes it. Returns -1 (message in
 * runlog_error) for an empty name, one with a newline, or one of the attributes runlog writes
 * itself (method, p, ..., created, resumes, resumed_at, final_attributes). */
int runlog_set_attr_double(runlog *r, const char *name, double v);
int runlog_set_attr_string(runlog *r, const char *name, const char *v);

/* Rows of each extendible group that are in the file (after runlog_flush): /train, /eval,
 * /eval_local and /ranks rows; 0 for a group the file does not have. A checkpoint stores them
 * and hands them back to runlog_resume. */
typedef struct { long train, eval, eval_local, ranks; } runlog_rows;

/* Publish the file with everything logged so far (as runlog_eval does after its row): an
 * /eval_local row and array rewrites too; a kill after it returns loses none of it. Returns 0
 * or -1 (message in runlog_error; the file is then no longer extended, as after a failed append). */
int runlog_flush(runlog *r);

/* Rows in the file now, per group (0 for a group the file does not have; all 0 for r == NULL).
 * Rows still buffered are not counted: call it after runlog_flush. */
void runlog_rows_written(const runlog *r, runlog_rows *out);

/* Continue the run file at path, written earlier by runlog_create (and perhaps resumed since)
 * with the same layout meta, to resume a run from a checkpoint whose runlog_rows_written was
 * keep. Compared with the file's: method, p, b, m, seed, iterations, servers, ranks (columns of
 * /ranks, or no /ranks), eval_local (/eval_local present) and each fixed array (name, shape,
 * int64 or float64); config_text, command_line, hostname and device are not compared, and the
 * file keeps those of its first run (put what differs into resume_note).
 *
 * Rows beyond keep in each group (logged after the checkpoint by the run that was then cut off)
 * are dropped, so the resumed run's rows follow the checkpoint's with none duplicated or missing;
 * continuing the clock of time_s is the caller's (it passes the values). The fixed arrays keep
 * their values: the caller rewrites them. The end-of-run root attributes of the earlier run
 * (status, train_time_s, images_per_s, steps_completed and whatever final_attributes lists) are
 * removed; root attribute resumes (int64) is incremented (1 at the first resume) and a line
 * "step <S> at <UTC time> (<resume_note>)" is appended to the string attribute resumed_at (lines
 * separated by '\n', no trailing one; no " (...)" when resume_note is NULL or empty), where S is
 * the largest step among the kept rows of /train, /eval, /eval_local and /ranks (0 if none).
 *
 * The file at path is replaced atomically (read into memory, changed there, published over
 * path): a kill at any instant leaves either the old file or the resumed one. After this, runlog_train, _eval,
 * _ranks, _array, _set_attr_* and _close work as on a new file, with the same crash safety.
 *
 * Errors (NULL returned, err filled, the file at path untouched): no file at path; not a
 * dsgd-run run file; meta differs from the file's ("cannot resume runs/x.h5: the run file has
 * method ps, the experiment method allreduce"); a group has fewer complete rows than keep (every
 * column must have at least keep rows: "... the run file has 12 /train rows but the checkpoint
 * was taken after 15: it is not the file this checkpoint belongs to"); keep negative; an I/O
 * failure while publishing. (A kill during runlog_resume may leave a hidden
 * .<name>.new.<pid>.<ns> file beside path.) */
runlog *runlog_resume(const char *path, const runlog_meta *meta, const runlog_rows *keep, const char *resume_note,
                      char *err, size_t errlen);

/* Last I/O error message of r. */
const char *runlog_error(const runlog *r);

/* Write the buffered rows and the end-of-run attributes, publish and free r. Returns 0 or -1
 * (printed on stderr; status then recorded in place as in the header comment). */
int runlog_close(runlog *r);

/* "HDF5 x.y.z" — the HDF5 library the run file is written with, into buf. */
void runlog_library_version(char *buf, size_t n);

#endif
