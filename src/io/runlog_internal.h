/* runlog_internal.h — what the three files of the run file share, for src/io/ only: the runlog
 * struct, its limits, the column tables and the helpers used across files. runlog.c creates and
 * writes the file and decides when to publish it (its header comment has the whole design);
 * runlog_publish.c (runlog_publish.h) publishes an in-memory file's image and keeps the status
 * slot, knowing nothing of the runlog; runlog_resume.c continues a run's file. Arrows:
 * runlog_resume.c -> runlog.c -> runlog_publish.c, each -> h5.c (the HDF5 and errno messages). */
#ifndef DSGD_RUNLOG_INTERNAL_H
#define DSGD_RUNLOG_INTERNAL_H

#include "runlog.h"
#include "runlog_publish.h"

#include "io/h5.h"
#include "util/util.h"

#include <stdint.h>

enum {
    TRAIN_CHUNK = 1024, /* rows per chunk of a /train dataset */
    EVAL_CHUNK = 64,    /* rows per chunk of an /eval dataset */
    TRAIN_BUF = 1024,   /* /train rows buffered before an append to the in-memory file */
    RANKS_CHUNK = 256,  /* rows per chunk of a /ranks dataset (all meta.ranks columns in one chunk) */
    RANKS_BUF = 256,    /* /ranks rows buffered before an append */
    ARRAY_CHUNK = 1024, /* rows per chunk of a growing method array */
    MAX_RANKS = 1 << 20, /* most /ranks columns (bounds the buffer size computation) */
};
#define MEM_INCREMENT ((size_t)1 << 20) /* growth step of the in-memory file */
#define PUBLISH_S 5.0                   /* default meta.publish_s */
#define PUBLISH_SHARE 100.0             /* publish at most once per 100 times its cost */

enum { T_STEP, T_TIME, T_LOSS, T_ALPHA, NTRAIN };
enum { E_STEP, E_TIME, E_EPOCH, E_LOSS, E_TOP1, E_TOP5, NEVAL };

typedef struct {
    const char *name, *units, *description;
} colspec;

static const colspec train_cols[NTRAIN] = {
    {"step", "iterations", "global iterations completed (1-based)"},
    {"time_s", "s", "training wall clock since training began, evaluation time excluded"},
    {"loss", "nats", "cross-entropy loss, mean over the nodes' minibatches and over the steps since the previous row"},
    {"alpha", "1", "learning rate (step size) alpha used at this step"},
};

static const colspec eval_cols[NEVAL] = {
    {"step", "iterations", "global iterations completed when the model was evaluated"},
    {"time_s", "s", "training wall clock since training began, evaluation time excluded"},
    {"epoch", "epochs", "step / steps per epoch, with floor(training set size / m) steps per epoch"},
    {"loss", "nats", "cross-entropy loss, mean over the whole validation set"},
    {"top1_error", "fraction", "fraction of the validation set whose label is not the top-1 prediction"},
    {"top5_error", "fraction", "fraction of the validation set whose label is not among the top-5 predictions"},
};

/* Sim mode (meta.wall): time_s of /train, /eval and /eval_local is simulated, and each of these
 * groups has a wall_s column beside it (docs/simulate.md). */
static const colspec time_sim_col = {"time_s", "s", "simulated training time: the virtual clock of sim mode (docs/simulate.md), "
                                                    "evaluation time excluded"};
static const colspec wall_col = {"wall_s", "s", "real training wall clock since training began, evaluation time excluded "
                                                "(sim mode: time_s is the simulated clock)"};

enum { R_STEP_TIME, R_COMPUTE, R_COMM, R_WAIT, R_DATA, NRANKS };

static const colspec ranks_step_col = {"step", "iterations", "global iterations completed when the row was logged"};

/* The 2-D [row, meta.ranks] datasets of /ranks: column j is worker j. */
static const colspec ranks_cols[NRANKS] = {
    {"step_time_s", "s", "each worker's mean wall-clock seconds per step over the steps since the previous row"},
    {"compute_s", "s", "each worker's mean seconds per step spent computing over the steps since the previous row"},
    {"comm_s", "s", "each worker's mean seconds per step spent in communication calls over the steps since the previous row"},
    {"wait_s", "s", "each worker's mean seconds per step spent waiting for other ranks over the steps since the previous row"},
    {"data_s", "s", "each worker's mean seconds per step spent getting its minibatch (waiting for the decode threads, or "
                    "assembling it) over the steps since the previous row; NaN where not measured"},
};

/* Root attributes runlog writes itself: runlog_set_attr_* refuses them and runlog_resume never
 * removes them. final_attributes lists (one per line) the names runlog_close wrote from
 * runlog_set_attr_*, so that runlog_resume knows which attributes end a run. */
static const char *const own_attrs[] = {"method", "p", "b", "m", "seed", "iterations", "servers", "dsgd_version",
                                        "hdf5_version", "config", "command_line", "hostname", "created",
                                        "working_directory", "device", "resumes", "resumed_at", "final_attributes"};
/* The end-of-run attributes of the training code: removed by runlog_resume even from a file
 * without final_attributes. */
static const char *const usual_final_attrs[] = {"status", "train_time_s", "images_per_s", "steps_completed"};

/* One method array of meta.arrays: fixed shape, or growing rows (spec.grows). */
typedef struct {
    char *obj; /* "/" + spec name */
    int f64;   /* float64, NaN-filled (else int64, zero-filled) */
    int grows; /* unlimited rows: as many as the last write gave */
    long rows, cols;
} method_array;

struct runlog {
    hid_t file;              /* the working file, in memory (core driver, no backing store): the
                                only HDF5 object held open; datasets are opened by name as needed */
    hsize_t n_train, n_eval; /* rows in the in-memory file */
    int nbuf;                /* rows waiting in the buffer */
    int64_t buf_step[TRAIN_BUF];
    double buf_time[TRAIN_BUF], buf_loss[TRAIN_BUF], buf_alpha[TRAIN_BUF];
    int wall;                /* meta.wall: the wall_s columns */
    double wall_now;         /* runlog_wall's value: the wall_s of the rows that follow */
    double buf_wall[TRAIN_BUF];
    int has_eval_local;
    hsize_t n_eval_local;
    int ranks;               /* columns of /ranks; 0: no /ranks group */
    hsize_t n_ranks;         /* /ranks rows in the in-memory file */
    int nrbuf;               /* /ranks rows waiting in the buffers */
    int64_t rbuf_step[RANKS_BUF];
    double *rbuf[NRANKS];    /* [RANKS_BUF][ranks] each, row-major, in one allocation at create */
    method_array *arrays;
    int n_arrays;
    char *final_names;       /* names given to runlog_set_attr_*, one per line (final_attributes) */
    int failed;       /* a write or publication failed: the file is no longer extended */
    int fd;           /* -1, or open on the file this run published last: its identity, kept from
                         reuse while open, notices another run that replaced it (overwrite) */
    double publish_s; /* meta.publish_s */
    double last_publish, publish_cost; /* monotonic time of the last publication, its seconds */
    image_buf image;  /* the file image buffer of the last publication */
    char path[PATHLEN];
    char err[ERRLEN];
};

/* runlog.c */
int runlog_is_own_attr(const char *name);
void runlog_free(runlog *r);
runlog *runlog_new(const char *path, const runlog_meta *meta);
int runlog_check_meta(const runlog_meta *meta, const char *fn, const char *path, char *err, size_t errlen);
int runlog_utc_now(char *buf, size_t n);
hid_t runlog_memory_fapl(int create, const char *path, char *err, size_t errlen);
/* Publish r's in-memory file now (runlog_publish) and note when and at what cost, for the
 * wall-clock bound (part 3 of runlog.c's header comment). 0, or -1 with err filled. */
int runlog_publish_now(runlog *r, int overwrite, char *err, size_t errlen);

#endif
