/* main.c — dsgd-run: read the experiment, check everything before training starts, build the
 * model and the method, train, write the HDF5 run file.
 *
 *   dsgd-run [--set KEY=VALUE]... [--check] EXPERIMENT.cfg
 *
 * Every rank reads the experiment and its data itself (a shared file system is assumed, as on
 * every cluster); after each set-up phase the ranks agree on the worst status (comm_max_int),
 * so bad input stops every rank with exit status 2 and no rank is left waiting. Only rank 0
 * prints errors and writes the run file. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "config/config.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/pack.h"
#include "data/shards.h"
#include "io/runlog.h"
#include "methods/method.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "gpu.h"
#include "gpucomm.h"
#include "train/checkpoint.h"
#include "train/train.h"
#include "util/util.h"

#define MAX_SETS 256

typedef struct {
    const char *config_path;
    char *sets[MAX_SETS];
    int n_sets;
    int check_only, help, version;
    int p_from_world;           /* --p-from-world: p = MPI ranks − servers */
    int print_config;           /* --print-config: the resolved experiment as libconfig text */
    int resume;                 /* --resume: continue from the checkpoint (there must be one) */
    const char *status_of;      /* --status RUNFILE: print its status, exit by it */
} cli_args;

static void print_usage(FILE *f) {
    fprintf(f,
            "usage: dsgd-run [--set KEY=VALUE]... [--check | --print-config] [--p-from-world] [--resume] EXPERIMENT.cfg\n"
            "       mpiexec -n P dsgd-run EXPERIMENT.cfg     (P = the experiment's p)\n"
            "       dsgd-run --pack SRC OUT [options]        (pack ImageNet into shards: dsgd-run --pack --help)\n"
            "       dsgd-run --status RUNFILE                (how a run ended, for job scripts)\n"
            "\n"
            "Trains ResNet-18 with a distributed SGD method (Jin et al. 2016) on p MPI ranks and\n"
            "writes validation loss and top-1/top-5 error curves to an HDF5 file.\n"
            "\n"
            "options:\n"
            "  --set KEY=VALUE  override a key of the experiment file; KEY is a dotted path into\n"
            "                   groups (alpha.base, model.width), VALUE is written as in the file\n"
            "                   (a bare word is accepted for string keys). Repeatable.\n"
            "  --check          validate the experiment and the data, print the resolved\n"
            "                   experiment as a table and exit 0\n"
            "  --print-config   print the resolved experiment (every key, --set applied) as an\n"
            "                   experiment file and exit 0 (tools/sweep.py writes its points so)\n"
            "  --p-from-world   take p from the MPI world: p = ranks - servers (batch jobs:\n"
            "                   the allocation decides; same as --set p=N, given last)\n"
            "  --resume         continue the run from its checkpoint (checkpoint.path) in the\n"
            "                   same run file; an error if there is none (resume = \"auto\": only\n"
            "                   if there is one). A finished run says so and exits 0\n"
            "  --help           this text and every key of the experiment file\n"
            "  --version        version and library versions\n"
            "  --status RUNFILE print the run file's status and exit by it: 0 completed, 3\n"
            "                   interrupted with a checkpoint (resume it), 1 stopped or no status\n"
            "                   (killed, or still running), 2 no readable run file\n"
            "\n"
            "exit status: 0 done, 1 stopped during training (non-finite loss, I/O, a rank waiting\n"
            "longer than comm_timeout_s, too few workers left), 2 bad input, 3 interrupted by\n"
            "SIGTERM or SIGINT after writing a checkpoint (SIGUSR1: checkpoint and go on).\n"
            "docs: docs/config.md (keys), docs/output.md (run file), docs/methods.md (methods)\n");
}

/* Returns 0, or EXIT_BADINPUT with err filled. */
static int parse_args(int argc, char **argv, cli_args *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) a->help = 1;
        else if (!strcmp(s, "--version")) a->version = 1;
        else if (!strcmp(s, "--check")) a->check_only = 1;
        else if (!strcmp(s, "--p-from-world")) a->p_from_world = 1;
        else if (!strcmp(s, "--print-config")) a->print_config = 1;
        else if (!strcmp(s, "--resume")) a->resume = 1;
        else if (!strcmp(s, "--status")) {
            if (i + 1 >= argc) return seterr(err, errlen, "--status needs a run file (dsgd-run --status runs/x.h5)");
            a->status_of = argv[++i];
        }
        else if (!strcmp(s, "--set") || !strncmp(s, "--set=", 6)) {
            const char *kv = s[5] == '=' ? s + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (!kv) return seterr(err, errlen, "--set needs KEY=VALUE (e.g. --set alpha.base=0.05)");
            if (!strchr(kv, '=')) return seterr(err, errlen, "--set %s: expected KEY=VALUE (e.g. --set alpha.base=0.05)", kv);
            if (a->n_sets == MAX_SETS) return seterr(err, errlen, "more than %d --set options", MAX_SETS);
            a->sets[a->n_sets++] = (char *)kv;
        } else if (s[0] == '-' && s[1] != '\0')
            return seterr(err, errlen, "unknown option '%s' (see dsgd-run --help)", s);
        else if (a->config_path)
            return seterr(err, errlen, "more than one experiment file: '%s' and '%s'", a->config_path, s);
        else a->config_path = s;
    }
    if (!a->config_path && !a->help && !a->version && !a->status_of)
        return seterr(err, errlen, "no experiment file given (usage: dsgd-run [--set KEY=VALUE]... [--check] EXPERIMENT.cfg)");
    return 0;
}

/* The threads of one rank (docs/data.md, "Loading"): cores = the CPUs this process may run on
 * divided by the ranks sharing the node (at least 1); data = data.threads, or for data.format =
 * "jpeg" a quarter of the cores (at least 1), else none; compute (oneDNN) = `threads`, or the
 * cores left to it (at least 1); comm = the gossip methods' communication thread (it naps, so it
 * takes no core from the others but is counted). */
typedef struct { int cores, compute, data, comm; } thread_budget;
static thread_budget choose_threads(const experiment *e, int ranks_on_node) {
    cpu_set_t set;
    int ncpu = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0) ncpu = CPU_COUNT(&set);
    thread_budget b = {.cores = ncpu / ranks_on_node};
    if (b.cores < 1) b.cores = 1;
    if (e->data.format == FORMAT_JPEG) b.data = e->data.threads > 0 ? e->data.threads : (b.cores / 4 > 1 ? b.cores / 4 : 1);
    b.compute = e->threads > 0 ? e->threads : (b.cores - b.data > 1 ? b.cores - b.data : 1);
    b.comm = e->method == METHOD_GOSSIP_PULL || e->method == METHOD_GOSSIP_PUSH;
    return b;
}

/* "threads per rank: 3 compute (oneDNN) + 1 decode + 0 communication = 4 on 4 cores", and a
 * warning line when they are more than the cores. */
static void print_budget(const thread_budget *b, FILE *f) {
    const int total = b->compute + b->data + b->comm;
    fprintf(f, "threads per rank: %d compute (oneDNN, key 'threads') + %d decode (data.threads) + %d communication = %d on %d core(s)\n",
            b->compute, b->data, b->comm, total, b->cores);
    if (total > b->cores)
        fprintf(f, "warning: %d threads per rank on %d core(s): oversubscribed, steps will be slower than they need be; lower "
                   "threads or data.threads, or run fewer ranks per node (docs/data.md, \"Loading\")\n", total, b->cores);
}

/* Collective: stop every rank if any rank's status is non-zero. Rank 0 prints its message if
 * it failed; otherwise each failing rank prints its own, prefixed with its rank. */
static void agree_or_exit(int status, const char *err) {
    int worst = comm_max_int(status);
    if (worst == 0) return;
    int r0_status = status;
    comm_bcast(&r0_status, sizeof r0_status, 0);
    if (comm_rank() == 0 && status) fprintf(stderr, "dsgd-run: %s\n", err);
    else if (status && !r0_status) fprintf(stderr, "dsgd-run: rank %d: %s\n", comm_rank(), err);
    comm_finalize();
    exit(worst);
}

/* The output must be creatable and must not hold an earlier run (never overwritten unless
 * `overwrite`): not a directory, and its nearest existing ancestor a writable directory (the
 * run file creates the missing ones). Returns 0 or EXIT_BADINPUT with err filled. */
static int check_output(const experiment *e, char *err, size_t errlen) {
    struct stat sb;
    if (stat(e->output, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return seterr(err, errlen, "%s: key 'output': %s is a directory; expected the path of an HDF5 file", config_where("output"), e->output);
        if (!e->overwrite)
            return seterr(err, errlen, "%s: key 'output': %s already exists; use --set overwrite=true to replace it or choose another output",
                          config_where("output"), e->output);
    }
    char dir[CFG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", e->output);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash) { snprintf(dir, sizeof dir, "."); break; }
        if (slash == dir) { dir[1] = '\0'; break; }
        *slash = '\0';
        if (stat(dir, &sb) == 0) break;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return seterr(err, errlen, "%s: key 'output': cannot create %s: %s is not a directory", config_where("output"), e->output, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return seterr(err, errlen, "%s: key 'output': cannot create %s: directory %s is not writable", config_where("output"), e->output, dir);
    return 0;
}

/* Neither the output nor the checkpoint directory may be, or contain, an input of the run (the
 * experiment file and the files it @includes, the data files), whatever `overwrite` says: a run never replaces its inputs.
 * Compared by file identity (device, inode) and by resolved path. Returns 0 or EXIT_BADINPUT. */
static int check_not_input(const experiment *e, const char *config_path, const char *ckdir, char *err, size_t errlen) {
    const struct { const char *key, *path; } in[] = {
        {"the experiment file", config_path},           {"key 'data.train_images'", e->data.train_images},
        {"key 'data.train_labels'", e->data.train_labels}, {"key 'data.val_images'", e->data.val_images},
        {"key 'data.val_labels'", e->data.val_labels}, {"key 'data.dir'", e->data.dir},
    };
    struct stat so, sc, si;
    const int out_exists = stat(e->output, &so) == 0, ck_exists = stat(ckdir, &sc) == 0;
    char ck_real[PATH_MAX] = "", in_real[PATH_MAX];
    if (ck_exists && S_ISDIR(sc.st_mode) && !realpath(ckdir, ck_real)) ck_real[0] = '\0';
    const size_t ck_len = strlen(ck_real);
    const size_t n_in = sizeof in / sizeof in[0];
    for (size_t i = 0; i < n_in + (size_t)config_n_included(); i++) {
        const char *key = i < n_in ? in[i].key : "a file the experiment file @includes";
        const char *path = i < n_in ? in[i].path : config_included((int)(i - n_in));
        if (!path || stat(path, &si) != 0) continue;
        if (out_exists && so.st_dev == si.st_dev && so.st_ino == si.st_ino)
            return seterr(err, errlen, "%s: key 'output': %s is %s (%s), an input of this run; choose another output",
                          config_where("output"), e->output, path, key);
        if (ck_exists && sc.st_dev == si.st_dev && sc.st_ino == si.st_ino)
            return seterr(err, errlen, "%s: key 'checkpoint.path': %s is %s (%s), an input of this run; choose another "
                          "checkpoint.path", config_where("checkpoint.path"), ckdir, path, key);
        if (ck_len && realpath(path, in_real) && !strncmp(in_real, ck_real, ck_len) &&
            (in_real[ck_len] == '/' || (ck_len == 1 && ck_real[0] == '/')))
            return seterr(err, errlen, "%s: key 'checkpoint.path': the checkpoint directory %s holds %s (%s), an input of "
                          "this run; choose another checkpoint.path", config_where("checkpoint.path"), ckdir, path, key);
    }
    return 0;
}

/* Prefix a data-loading error with the experiment file and the keys that named the files. */
static void blame_keys(const experiment *e, const char *keys, char *err, size_t errlen) {
    char prefix[CFG_PATH_MAX + 128];
    int n = snprintf(prefix, sizeof prefix, "%s: %s: ", e->source, keys);
    size_t len = strlen(err), k = (size_t)n < errlen - 1 ? (size_t)n : errlen - 1;
    if (len + k >= errlen) len = errlen - 1 - k; /* keep the end of the message inside err */
    memmove(err + k, err, len);
    memcpy(err, prefix, k);
    err[k + len] = '\0';
}

/* Run-file writer, on a communication timeout (comm_on_timeout): keep the rows logged so far
 * and say why the run stopped. */
static void record_timeout(void *arg) {
    trainer *t = arg;
    if (!t->log) return;
    runlog_set_attr_string(t->log, "status", ckpt_signal_pending() == CKPT_SIG_STOP || comm_stop_after_signal()
                                                 ? "stopped: SIGTERM or SIGINT while waiting for another rank (no checkpoint)"
                                                 : "stopped: communication timeout (comm_timeout_s)");
    if (comm_stop_detail()[0]) runlog_set_attr_string(t->log, "stop_detail", comm_stop_detail());
    runlog_close(t->log);
    t->log = NULL;
}

/* comm = "nccl" (collective over the workers, which are the world for allreduce): check that no
 * two workers share a GPU (NCCL refuses it: cuda/gpucomm.h), load NCCL, broadcast worker 0's
 * NCCL id over MPI and build the communicator on the model's GPU. Every failure stops every rank
 * with the message naming key 'comm': exit 2 for workers sharing a GPU (the experiment does not
 * fit the machine, as a wrong world size), 1 for a missing NCCL or a failed initialisation. */
static gpucomm *nccl_setup(const experiment *e, model *net, int worker) {
    char err[ERRLEN] = "", msg[ERRLEN];
    /* "host GPU-bus-id" of every worker: two equal ones share a GPU. First, as it does not
     * depend on NCCL being installed. */
    enum { ID = 320 };
    char mine[ID] = "", *all = xcalloc((size_t)e->p, ID), bus[64] = "";
    int st = gpucomm_gpu_id(model_gpu(net), bus, sizeof bus, msg, sizeof msg);
    if (st) snprintf(err, sizeof err, "%s: key 'comm': %.900s", config_where("comm"), msg);
    snprintf(mine, sizeof mine, "%.250s %.60s", comm_host(), bus);
    comm_workers_allgather(mine, ID, all);
    for (int i = 0; !st && i < e->p; i++)
        for (int j = i + 1; !st && j < e->p; j++) {
            const char *a = all + (size_t)i * ID, *sp = strchr(a, ' ');
            if (strcmp(a, all + (size_t)j * ID) == 0 && sp)
                st = seterr(err, sizeof err,
                            "%s: key 'comm': comm = \"nccl\" needs one GPU per worker, but workers %d and %d share GPU %s on "
                            "%.*s (NCCL refuses two ranks on one GPU: \"Duplicate GPU detected\"); give each worker its own "
                            "GPU, or use comm = \"mpi\", which lets workers share GPUs",
                            config_where("comm"), i, j, sp + 1, (int)(sp - a), a);
        }
    free(all);
    agree_or_exit(st, err);

    st = gpucomm_load(msg, sizeof msg);
    if (st) snprintf(err, sizeof err, "%s: key 'comm': %.900s", config_where("comm"), msg);
    agree_or_exit(st, err);

    char id[GPUCOMM_ID_BYTES] = {0};
    if (worker == 0 && (st = gpucomm_unique_id(id, msg, sizeof msg)))
        snprintf(err, sizeof err, "%s: key 'comm': %.900s", config_where("comm"), msg);
    agree_or_exit(st, err);
    comm_workers_bcast(id, sizeof id, 0);
    gpucomm *c = gpucomm_create(model_gpu(net), e->p, worker, id, e->comm_timeout_s, msg, sizeof msg);
    st = c ? 0 : EXIT_RUNTIME;
    if (st) snprintf(err, sizeof err, "%s: key 'comm': %.900s", config_where("comm"), msg);
    agree_or_exit(st, err);
    return c;
}

/* What rank 0 decides about an earlier run of the experiment (plan_resume), for every rank. */
typedef struct {
    long label;      /* checkpoint to continue from; -1: start afresh */
    long finished;   /* the run file says the run completed: nothing to do */
    long had_ckpt;   /* a checkpoint exists (starting afresh with overwrite = true removes it) */
    long move_aside; /* resume = "auto", an unfinished run file without a checkpoint: keep it under
                        another name and start afresh */
    uint64_t run_id; /* the run's id (checkpoint.h): the checkpoint's when resuming, else new */
} resume_plan;

/* Rank 0: whether this run continues an earlier one (checkpoint.h). Returns 0 or EXIT_BADINPUT. */
static int plan_resume(const experiment *e, int cli_resume, const char *dir, int log_rank, resume_plan *pl, char *err,
                       size_t errlen) {
    *pl = (resume_plan){.label = -1};
    const int wants = cli_resume || e->resume == RESUME_AUTO;
    const char *how = cli_resume ? "--resume" : "resume = \"auto\"";
    char m[ERRLEN];
    long l = -1;
    int have = ckpt_latest(dir, &l, m, sizeof m);
    if (have < 0) return seterr(err, errlen, "%s: key 'checkpoint.path': %s", config_where("checkpoint.path"), m);
    pl->had_ckpt = have;
    struct stat sb;
    const int out_exists = stat(e->output, &sb) == 0 && S_ISREG(sb.st_mode);
    static char saved[CFG_TEXT_MAX], now[CFG_TEXT_MAX];
    experiment cur = *e;
    config_to_text(&cur, now, sizeof now);
    if (wants && out_exists) {
        char status[512];
        if (ckpt_run_attr(e->output, "status", status, sizeof status, m, sizeof m) != 0 ||
            ckpt_run_attr(e->output, "config", saved, sizeof saved, m, sizeof m) != 0)
            return seterr(err, errlen, "%s: key 'output': %s", config_where("output"), m);
        if (strcmp(status, "completed") == 0) {
            if (ckpt_compare_config(saved, now, m, sizeof m))
                return seterr(err, errlen, "%s: key 'output': %s holds a finished run of another experiment: %s", config_where("output"),
                              e->output, m);
            pl->finished = 1;
            return 0;
        }
    }
    if (wants && have) {
        if (!out_exists)
            return seterr(err, errlen, "%s: key 'output': %s: %s found the checkpoint %s/step-%ld, but its run file %s is missing; "
                          "restore it, or remove %s to start afresh", config_where("output"), e->output, how, dir, l, e->output, dir);
        ckpt_file *f = ckpt_open(dir, l, log_rank, m, sizeof m);
        int rc = !f || ckpt_get_str(f, "experiment", saved, sizeof saved) || !(pl->run_id = ckpt_file_run_id(f));
        if (rc && f) snprintf(m, sizeof m, "%s", ckpt_error(f));
        ckpt_free(f);
        if (rc) return seterr(err, errlen, "%s: key 'checkpoint.path': %s", config_where("checkpoint.path"), m);
        if (ckpt_compare_config(saved, now, m, sizeof m))
            return seterr(err, errlen, "%s: %s: cannot continue %s/step-%ld: %s", e->source, how, dir, l, m);
        pl->label = l;
        return 0;
    }
    if (cli_resume)
        return seterr(err, errlen, "--resume: no checkpoint in %s (key 'checkpoint.path', %s): nothing to continue%s", dir,
                      config_where("checkpoint.path"),
                      out_exists ? "; the run file exists, so starting afresh needs another output, overwrite = true, or "
                                   "resume = \"auto\" (which keeps the old file under another name)"
                                 : "; run without --resume to start afresh");
    if (wants && out_exists) { /* killed before its first checkpoint: nothing to continue */
        pl->move_aside = 1;
        return 0;
    }
    if (have && !e->overwrite)
        return seterr(err, errlen, "%s: key 'checkpoint.path': %s holds the checkpoint of an earlier run (step %ld); continue it with "
                      "--resume (or resume = \"auto\"), choose another output or checkpoint.path, or set overwrite = true to start "
                      "afresh (its checkpoints are then removed)", config_where("checkpoint.path"), dir, l);
    if (have) { /* overwrite = true replaces this output's run and checkpoints, never another output's */
        ckpt_file *f = ckpt_open(dir, l, log_rank, m, sizeof m);
        int rc = !f || ckpt_get_str(f, "experiment", saved, sizeof saved);
        ckpt_free(f);
        char want[CFG_PATH_MAX + 16];
        snprintf(want, sizeof want, "\noutput = \"%s\";", e->output);
        if (!rc && !strstr(saved, want))
            return seterr(err, errlen, "%s: key 'checkpoint.path': %s holds the checkpoint of the run of another output (step %ld); "
                          "overwrite = true replaces only this output's run: choose another checkpoint.path", config_where("checkpoint.path"),
                          dir, l);
    }
    return 0;
}

/* Every rank, before a resume: its part of checkpoint `label` is there and is that checkpoint's
 * (a worker of a method with servers that had left before the checkpoint has no part). */
static int check_rank_part(const experiment *e, const char *dir, long label, int rank, int has_servers, int worker, char *err,
                           size_t errlen) {
    char m[ERRLEN] = "";
    if (has_servers && worker >= 0) {
        ckpt_file *f0 = ckpt_open(dir, label, e->p, m, sizeof m);
        int64_t *left = xcalloc((size_t)e->p, sizeof(int64_t));
        int rc = !f0 || ckpt_get_i64(f0, "left", left, (size_t)e->p);
        if (rc && f0) snprintf(m, sizeof m, "%s", ckpt_error(f0));
        ckpt_free(f0);
        const int gone = !rc && left[worker];
        free(left);
        if (rc) return seterr(err, errlen, "resume: %s", m);
        if (gone) return 0;
    }
    ckpt_file *f = ckpt_open(dir, label, rank, m, sizeof m);
    ckpt_free(f);
    return f ? 0 : seterr(err, errlen, "resume: %s", m);
}

/* Rename the run file at path to a free name "<stem>.restart<k>.h5" beside it (k = 1, 2, ...),
 * written into aside. Returns 0 or -1 with err filled. */
static int move_aside(const char *path, char *aside, size_t n, char *err, size_t errlen) {
    size_t len = strlen(path);
    const int h5 = len > 3 && strcmp(path + len - 3, ".h5") == 0;
    for (int k = 1; k < 1000; k++) {
        snprintf(aside, n, "%.*s.restart%d.h5", (int)(h5 ? len - 3 : len), path, k);
        struct stat sb;
        if (lstat(aside, &sb) == 0) continue;
        if (link(path, aside) == 0) {
            if (unlink(path) == 0) return 0;
            seterr(err, errlen, "key 'output': %s: kept as %s but cannot remove it: %s", path, aside, strerror(errno));
            return -1;
        }
        if (errno == EEXIST) continue;
        if (rename(path, aside) == 0) return 0; /* file systems without hard links */
        seterr(err, errlen, "key 'output': %s: cannot keep it as %s: %s", path, aside, strerror(errno));
        return -1;
    }
    seterr(err, errlen, "key 'output': %s: no free name to keep it under", path);
    return -1;
}

static void join_args(int argc, char **argv, char *buf, size_t n) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < argc && off + 1 < n; i++) off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? " " : "", argv[i]);
}

/* The launcher's own idea of the world: a process started by a launcher its MPI library does not
 * speak to (Open MPI's mpiexec running an MPICH binary, srun without a PMI plugin) becomes an MPI
 * world of one. Each launcher exports its world size; the first one set names the launcher. */
static const struct { const char *var, *launcher; } launcher_vars[] = {
    {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpiexec/mpirun"},
    {"PMI_SIZE", "a PMI launcher (MPICH's or Intel MPI's Hydra mpiexec)"},
    {"MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh/mpiexec"},
    {"SLURM_STEP_NUM_TASKS", "srun"},
};

/* Returns 0, or EXIT_BADINPUT when a launcher started more processes than this world has. */
static int check_launcher_world(char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) {
        const char *v = getenv(launcher_vars[i].var);
        const int n = v ? atoi(v) : 0;
        if (n <= 1 || n == comm_size()) continue;
        /* A batch step's SLURM_STEP_NUM_TASKS is inherited by mpiexec's ranks inside an allocation:
         * it only counts when no MPI launcher says otherwise. */
        if (!strcmp(launcher_vars[i].var, "SLURM_STEP_NUM_TASKS") && comm_size() > 1) continue;
        char lib[256];
        comm_library_version(lib, sizeof lib);
        const int mpich = strstr(lib, "MPICH") != NULL, ompi = strstr(lib, "Open MPI") != NULL;
        const char *use = mpich ? "MPICH's mpiexec (Debian: mpiexec.mpich)"
                          : ompi ? "Open MPI's mpiexec (Debian: mpiexec.openmpi)"
                                 : "the mpiexec of the MPI it was built with";
        if (!strcmp(launcher_vars[i].var, "SLURM_STEP_NUM_TASKS"))
            return seterr(err, errlen, "srun started %d tasks but MPI sees a world of %d rank(s) in each: this MPI library (%.80s) "
                          "is not connected to srun's PMI; launch with `srun --mpi=pmi2` (or pmix) if the MPI supports it, or with "
                          "%s inside the allocation (jobs/README.md)", n, comm_size(), lib, use);
        return seterr(err, errlen, "%s started %d processes (%s=%d), but this dsgd-run's MPI (%.80s) sees a world of %d rank(s): "
                      "it was started by another MPI's launcher; run it with %s, or rebuild it with that MPI's mpicc "
                      "(make CC=...)", launcher_vars[i].launcher, n, launcher_vars[i].var, n, lib, comm_size(), use);
    }
    return 0;
}

int main(int argc, char **argv) {
    /* A file-size limit (ulimit -f) makes a too-large write fail with EFBIG, reported like any
     * other write error (exit 1 and a status in the run file), instead of killing the rank. */
    signal(SIGXFSZ, SIG_IGN);
    /* The launcher's node-local rank picks this rank's GPU before MPI_Init, where a CUDA-aware MPI
     * creates its CUDA context (on the current device); gpu_select checks it later. */
    gpu_select_early();
    comm_init(&argc, &argv);
    char err[ERRLEN] = "";
    if (pack_requested(argc, argv)) { /* dsgd-run --pack SRC OUT ...: src/data/pack.h */
        int st = check_launcher_world(err, sizeof err);
        if (st && comm_rank() == 0) fprintf(stderr, "dsgd-run: %s\n", err);
        if (!st) st = pack_main(argc, argv);
        comm_finalize();
        return st;
    }
    ckpt_install_signals(); /* SIGTERM, SIGINT, SIGUSR1: a checkpoint at the next agreement point */
    /* A rank still waiting for another 25 s after a SIGTERM gives up (Slurm kills 30 s after it). */
    comm_on_stop(ckpt_stop_age, 25.0);
    const int rank = comm_rank(), r0 = rank == 0;

    cli_args args;
    int st = parse_args(argc, argv, &args, err, sizeof err);
    if (!st) st = check_launcher_world(err, sizeof err);
    if (st && r0) fprintf(stderr, "dsgd-run: %s\n", err);
    if (st) { comm_finalize(); return st; }
    if (args.status_of) { /* how a run ended: job scripts decide by this, not by mpiexec's exit code */
        char status[1024], m[ERRLEN];
        st = ckpt_run_attr(args.status_of, "status", status, sizeof status, m, sizeof m) ? EXIT_BADINPUT
             : !strcmp(status, "completed")                                           ? 0
             : !strncmp(status, "interrupted", 11)                                    ? EXIT_INTERRUPTED
                                                                                      : EXIT_RUNTIME;
        if (r0 && st == EXIT_BADINPUT) fprintf(stderr, "dsgd-run: --status: %s\n", m);
        else if (r0) printf("%s\n", status[0] ? status : "(no status: the run was killed, or is still running)");
        comm_finalize();
        return st;
    }
    if (args.help || args.version) {
        if (r0 && args.version) {
            char mpi[256], dnn[128], h5[64], nccl[ERRLEN + 64];
            comm_library_version(mpi, sizeof mpi);
            model_backend_version(dnn, sizeof dnn);
            runlog_library_version(h5, sizeof h5);
            gpucomm_version(nccl, sizeof nccl);
            printf("dsgd-run %s\n  backend: %s\n  run file: %s\n  MPI: %s (CUDA-aware: %s)\n  comm nccl: %s\n", DSGD_VERSION, dnn,
                   h5, mpi,
                   comm_gpu_aware() ? (getenv("DSGD_CUDA_AWARE") && strcmp(getenv("DSGD_CUDA_AWARE"), "1") == 0 ? "yes (forced: DSGD_CUDA_AWARE=1)" : "yes")
                                    : "no",
                   nccl);
        }
        if (r0 && args.help) { print_usage(stdout); printf("\nexperiment keys:\n"); config_print_keys(stdout); }
        comm_finalize();
        return 0;
    }

    /* 1. The experiment: every rank reads it; all reach the same verdict. */
    static experiment e;
    st = config_load(&e, args.config_path, args.sets, args.n_sets, err, sizeof err);
    /* --check without mpiexec cannot know the allocation: the file's p is checked as it is. */
    const int p_from_world = args.p_from_world && !(args.check_only && comm_size() == 1);
    if (!st && p_from_world) {
        /* The allocation decides p: read the file once for the method and its servers, then
         * again with p set last, so every check on p (backups, slow ranks, ...) sees it. */
        static char p_set[32];
        const int servers = method_has_servers(e.method) ? e.servers : 0;
        const int p = comm_size() - servers, p_file = e.p;
        if (p >= 1 && p != p_file && r0 && !args.print_config)
            printf("dsgd-run: p = %d from the MPI world (--p-from-world: %d rank(s) - %d server(s)); the experiment "
                   "said p = %d, so m = p·b = %d instead of %d\n", p, comm_size(), servers, p_file, p * e.b, p_file * e.b);
        if (p < 1)
            st = seterr(err, sizeof err, "--p-from-world: MPI started %d rank(s), but method %s needs %d server rank(s) "
                        "plus at least one worker", comm_size(), method_name(e.method), servers);
        else if (args.n_sets == MAX_SETS) st = seterr(err, sizeof err, "more than %d --set options", MAX_SETS - 1);
        else {
            snprintf(p_set, sizeof p_set, "p=%d", p);
            args.sets[args.n_sets++] = p_set;
            st = config_load(&e, args.config_path, args.sets, args.n_sets, err, sizeof err);
        }
    }
    /* What this binary cannot do is bad input already here, so that --check (and tools/sweep.py
     * through --print-config) refuses it on a login node without a GPU too. */
    if (!st && e.device == DEVICE_CUDA && !gpu_built())
        st = seterr(err, sizeof err, "%s: key 'device': device = \"cuda\" needs the GPU backend: this dsgd-run was built without "
                    "it; rebuild with `make CUDA=1` (CUDA toolkit, cuDNN and cuBLAS)", config_where("device"));
    if (!st && e.comm == COMM_NCCL && gpu_built() && !gpucomm_nccl_built())
        st = seterr(err, sizeof err, "%s: key 'comm': comm = \"nccl\" needs NCCL support: this dsgd-run was built without "
                    "it; rebuild with `make CUDA=1` where nccl.h is found (NCCL=auto or NCCL=1)", config_where("comm"));
    if (!st && args.print_config) {
        static char text[1 << 16];
        if (config_to_text(&e, text, sizeof text) >= (int)sizeof text - 1) st = seterr(err, sizeof err, "--print-config: the experiment does not fit in %zu bytes", sizeof text);
        else if (r0) fputs(text, stdout);
        agree_or_exit(st, err);
        comm_finalize();
        return 0;
    }
    /* `dsgd-run --check` without mpiexec checks everything but the world size. */
    const int world_unchecked = args.check_only && comm_size() == 1 && config_world_size(&e) != 1;
    if (!st && !world_unchecked) st = config_check_world(&e, comm_size(), err, sizeof err);
    agree_or_exit(st, err);
    if (!world_unchecked) comm_set_workers(e.p);
    comm_set_timeout(e.comm_timeout_s);
    const int has_servers = method_has_servers(e.method);
    const int worker = rank < e.p ? rank : -1;   /* workers: ranks 0..p-1; servers after them */
    const int log_rank = has_servers ? e.p : 0;
    if (!world_unchecked) comm_set_log_rank(log_rank); /* notes of ranks that give up go there */
    const method_ops *method = method_find(e.method);
    if (!method) st = seterr(err, sizeof err, "%s: method '%s' is not built", e.source, method_name(e.method));
    agree_or_exit(st, err);

    /* 2. The data: train and validation sets, validated. JPEG and synthetic sets are described
     * by a dataset without pixels (n, c, h, w, n_classes); the loader holds their source. */
    static dataset train, val;
    static shards *pack_train, *pack_val;
    trainer t = {.e = &e, .method = method, .train = &train, .val = &val, .rank = rank, .p = e.p, .worker = worker,
                 .server = worker < 0 ? rank - e.p : -1, .log_rank = log_rank, .resume_label = -1};
    inject_init(&t.inj, &e, worker >= 0 ? worker : 0);
    const int lrank = worker >= 0 ? worker : 0;
    const int fmt_jpeg = e.data.format == FORMAT_JPEG, fmt_syn = e.data.format == FORMAT_SYNTHETIC;
    if (fmt_jpeg) {
        st = shards_open(&pack_train, e.data.dir, "train", err, sizeof err);
        if (!st) st = shards_open(&pack_val, e.data.dir, "val", err, sizeof err);
        if (!st) st = shards_same_classes(pack_train, pack_val, err, sizeof err);
        if (st) blame_keys(&e, "key 'data.dir'", err, sizeof err);
        if (!st) t.data_fp[0] = shards_fingerprint(pack_train), t.data_fp[1] = shards_fingerprint(pack_val);
        if (!st && e.data.classes && e.data.classes != shards_n_classes(pack_train))
            st = seterr(err, sizeof err, "%s: key 'data.classes': %d classes, but the pack %s has %d (%s/%s); set data.classes = %d "
                        "or 0 (the data's)", config_where("data.classes"), e.data.classes, e.data.dir, shards_n_classes(pack_train),
                        e.data.dir, SHARDS_INDEX, shards_n_classes(pack_train));
        if (!st) {
            const int crop = e.data.crop;
            train = (dataset){.n = (int)shards_count(pack_train), .c = 3, .h = crop, .w = crop, .n_classes = shards_n_classes(pack_train)};
            val = (dataset){.n = (int)shards_count(pack_val), .c = 3, .h = crop, .w = crop, .n_classes = train.n_classes};
            const int kind = e.data.augment == AUGMENT_RRC ? AUG_RRC : e.data.augment == AUGMENT_NONE ? AUG_NONE : AUG_SCALE;
            jpegload_cfg jc = {.train = pack_train, .val = pack_val, .seed = e.seed, .b = e.b, .slots = 3,
                               .timeout_s = e.comm_timeout_s, .rank = rank, .threads = 1, .eval_max = 1};
            aug_default(&jc.train_aug, kind);
            aug_default(&jc.eval_aug, AUG_EVAL);
            /* auto: bicubic (fb.resnet.torch, the paper's recipe) except bilinear for rrc (torchvision) */
            const int interp = e.data.interp == INTERP_BICUBIC ? IMAGE_BICUBIC : e.data.interp == INTERP_BILINEAR ? IMAGE_BILINEAR
                             : kind == AUG_RRC ? IMAGE_BILINEAR : IMAGE_BICUBIC;
            for (aug_cfg *a = &jc.train_aug; a; a = a == &jc.train_aug ? &jc.eval_aug : NULL) {
                a->crop = crop, a->scale_min = e.data.scale[0], a->scale_max = e.data.scale[1];
                a->eval_resize = e.data.eval_resize, a->interp = interp;
            }
            if ((st = loader_init_jpeg(&t.train_loader, &jc, e.p, lrank, 0, err, sizeof err)))
                blame_keys(&e, "keys 'p', 'b', 'data.dir'", err, sizeof err);
        }
    } else if (fmt_syn) {
        const int classes = e.data.classes ? e.data.classes : 1000;
        train = (dataset){.n = LOADER_SYNTHETIC_N, .c = e.data.shape[0], .h = e.data.shape[1], .w = e.data.shape[2], .n_classes = classes};
        val = train;
        val.n = e.p * e.b; /* one minibatch per worker */
        if ((st = loader_init_synthetic(&t.train_loader, train.c, train.h, train.w, classes, e.p, lrank, e.b, e.seed, err, sizeof err)))
            blame_keys(&e, "keys 'p', 'b', 'data.shape', 'data.classes'", err, sizeof err);
    } else {
        st = dataset_load(&train, e.data.train_images, e.data.train_labels, 0, err, sizeof err);
        if (st) blame_keys(&e, "keys 'data.train_images', 'data.train_labels'", err, sizeof err);
        if (!st && (st = dataset_load(&val, e.data.val_images, e.data.val_labels, train.n_classes, err, sizeof err)))
            blame_keys(&e, "keys 'data.val_images', 'data.val_labels'", err, sizeof err);
        if (!st && (val.c != train.c || val.h != train.h || val.w != train.w)) {
            st = seterr(err, sizeof err, "%s is %dx%dx%d but %s is %dx%dx%d: training and validation images must have the same shape",
                        e.data.val_images, val.c, val.h, val.w, e.data.train_images, train.c, train.h, train.w);
            blame_keys(&e, "keys 'data.val_images', 'data.train_images'", err, sizeof err);
        }
        if (!st && e.data.classes && e.data.classes != train.n_classes)
            st = seterr(err, sizeof err, "%s: key 'data.classes': %d classes, but the labels of %s have %d; set data.classes = %d or 0 "
                        "(the data's)", config_where("data.classes"), e.data.classes, e.data.train_labels, train.n_classes, train.n_classes);
        /* The loader refuses a layout (p, b against the set's size) or the images themselves (a
         * constant channel cannot be normalised): blame what is at fault. */
        if (!st && (st = loader_init(&t.train_loader, &train, e.p, lrank, e.b, e.seed, err, sizeof err)))
            blame_keys(&e, strstr(err, "is constant") ? "key 'data.train_images'" : "keys 'p', 'b'", err, sizeof err);
    }
    agree_or_exit(st, err);
    /* --check: decode a sample of every shard before a long run (rank 0; the pack is shared). */
    int64_t verified = 0;
    if (fmt_jpeg && args.check_only && r0) {
        int64_t a = 0, b = 0;
        st = shards_verify(pack_train, 8, &a, err, sizeof err);
        if (!st) st = shards_verify(pack_val, 8, &b, err, sizeof err);
        if (st) blame_keys(&e, "key 'data.dir'", err, sizeof err);
        verified = a + b;
    }
    agree_or_exit(st, err);

    /* 3. The output (rank 0 writes it), or the earlier run this one continues. */
    char ckdir[CFG_PATH_MAX + 16];
    ckpt_dir_of(&e, ckdir, sizeof ckdir);
    resume_plan plan = {.label = -1};
    if (r0) {
        st = check_not_input(&e, args.config_path, ckdir, err, sizeof err);
        if (!st) st = plan_resume(&e, args.resume, ckdir, log_rank, &plan, err, sizeof err);
        if (!st && plan.label < 0 && !plan.finished && !plan.move_aside) st = check_output(&e, err, sizeof err);
    }
    if (r0 && !plan.run_id) plan.run_id = ckpt_new_run_id();
    agree_or_exit(st, err);
    comm_bcast(&plan, sizeof plan, 0);
    ckpt_set_run_id(plan.run_id);
    if (plan.finished) {
        if (r0) printf("dsgd-run: %s: this run is already finished (its status is \"completed\"): nothing to do\n", e.output);
        comm_finalize();
        return 0;
    }
    /* The checkpoint directory: created, writable and this run's alone (locked), checked now
     * rather than when the first checkpoint (or SIGTERM) comes. */
    if (r0 && !args.check_only) {
        char m[ERRLEN];
        if (ckpt_claim(ckdir, m, sizeof m) < 0) st = seterr(err, sizeof err, "%s: key 'checkpoint.path': %s", config_where("checkpoint.path"), m);
    }
    agree_or_exit(st, err);
    /* Every rank's part of the checkpoint must be there and be this checkpoint's, before the run
     * file is touched: a refused resume changes nothing. */
    if (plan.label >= 0 && !args.check_only) {
        st = check_rank_part(&e, ckdir, plan.label, rank, has_servers, worker, err, sizeof err);
        agree_or_exit(st, err);
    }

    /* Under `--check` without mpiexec, show the threads the real run (p ranks here) would use. */
    const thread_budget budget = choose_threads(&e, world_unchecked ? config_world_size(&e) : comm_local_size());
    const int threads = budget.compute;
    /* A CPU run continues bitwise only with the threads and ISA its checkpoint was written with:
     * refused here, before anything (the run file) is touched, unless checkpoint.bitwise = false
     * (then recorded with the resume). `--check` without mpiexec checks every rank's part. */
    int not_bitwise = 0;
    if (plan.label >= 0 && e.device != DEVICE_CUDA) {
        const int first = world_unchecked ? 0 : rank, last = world_unchecked ? config_world_size(&e) - 1 : rank;
        for (int r = first; r <= last && !st; r++) {
            int differs = 0;
            st = ckpt_check_machine(ckdir, plan.label, r, threads, nn_isa_name(), e.checkpoint.bitwise, &differs, err, sizeof err);
            not_bitwise |= differs;
        }
    }
    /* The data must be the pack the checkpoint was written with (packed again: other samples). */
    if (plan.label >= 0 && !st && ckpt_exists(ckdir, plan.label, rank) &&
        ckpt_check_data(ckdir, plan.label, rank, t.data_fp, err, sizeof err))
        st = EXIT_BADINPUT, blame_keys(&e, "key 'data.dir'", err, sizeof err);
    agree_or_exit(st, err);
    not_bitwise = comm_max_int(not_bitwise);
    if (args.check_only) {
        if (r0) {
            config_print_table(&e, stdout);
            printf("\nm = p·b = %d, %d training images (%dx%dx%d, %d classes), %ld steps per epoch, %d validation images, %d thread(s) per rank\n",
                   e.p * e.b, train.n, train.c, train.h, train.w, train.n_classes, t.train_loader.steps_per_epoch, val.n, threads);
            print_budget(&budget, stdout);
            if (fmt_jpeg)
                printf("data: %s: %d shard(s) of train, %d of val, %d classes; --check decoded %lld samples (up to 8 of each shard, first and last included): OK\n", e.data.dir,
                       shards_n_shards(pack_train), shards_n_shards(pack_val), shards_n_classes(pack_train), (long long)verified);
            if (fmt_syn) printf("data: synthetic (random inputs and labels): curves measure speed, not learning\n");
            if (world_unchecked) {
                if (has_servers)
                    printf("not checked: method %s runs on p + servers = %d + %d = %d MPI ranks (mpiexec -n %d)\n", method_name(e.method), e.p,
                           e.servers, config_world_size(&e), config_world_size(&e));
                else printf("not checked: p = %d must equal the number of MPI ranks (mpiexec -n %d)\n", e.p, e.p);
            }
            if (plan.label >= 0) printf("resume: continues %s from the checkpoint after %ld iterations (%s)%s\n", e.output, plan.label, ckdir,
                                        not_bitwise ? "; with other threads or ISA than the checkpoint's: not bitwise (checkpoint.bitwise = false)" : "");
            if (plan.move_aside) printf("resume: %s has no checkpoint to continue from: it is kept under another name and the run starts afresh\n", e.output);
            printf("experiment OK\n");
        }
        comm_finalize();
        return 0;
    }

    t.resume_label = plan.label;
    snprintf(t.ckpt_dir, sizeof t.ckpt_dir, "%s", ckdir);

    /* 4. Model, buffers, method. No rank evaluates more than ceil(n_val / p) images (a server
     * evaluating the center: all of them), so a larger eval.batch would only allocate memory
     * that is never used. */
    const int max_slice = has_servers ? val.n : (val.n + t.p - 1) / t.p;
    t.eval_batch = e.eval.batch < max_slice ? e.eval.batch : max_slice;
    omp_set_num_threads(threads);
    /* The decode threads (every rank: a server may evaluate the center). */
    if (fmt_jpeg) {
        t.train_loader.jcfg.threads = budget.data;
        t.train_loader.jcfg.eval_max = t.eval_batch;
        st = loader_start(&t.train_loader, err, sizeof err);
    }
    agree_or_exit(st, err);
    /* One GPU per rank, chosen from the rank's index on its node (cuda/gpu.h gpu_select). */
    const int on_gpu = e.device == DEVICE_CUDA;
    char gpu_desc[256] = "";
    if (on_gpu && (st = gpu_select(comm_local_rank(), comm_local_size(), gpu_desc, sizeof gpu_desc, err, sizeof err))) {
        char msg[ERRLEN];
        snprintf(msg, sizeof msg, "%s", err);
        snprintf(err, sizeof err, "%s: key 'device': %.900s", config_where("device"), msg);
    }
    agree_or_exit(st, err);
    model_spec spec = {
        .arch = e.model.arch == ARCH_LINEAR ? MODEL_LINEAR : MODEL_RESNET18,
        .width = e.model.width,
        .stem = e.model.stem == STEM_IMAGENET ? MODEL_STEM_IMAGENET : MODEL_STEM_CIFAR,
        .in_c = train.c, .in_h = train.h, .in_w = train.w,
        .n_classes = train.n_classes,
        .batch = e.b,
        .eval_batch = t.eval_batch,
        .threads = threads,
        .device = on_gpu ? MODEL_CUDA : MODEL_CPU,
        .precision = e.precision == PRECISION_TF32 ? MODEL_TF32 : e.precision == PRECISION_BF16 ? MODEL_BF16 : MODEL_FP32,
    };
    t.net = model_create(&spec, err, sizeof err);
    st = t.net ? 0 : EXIT_BADINPUT;
    if (st)
        blame_keys(&e, on_gpu ? "keys 'model.arch', 'model.width', 'model.stem', 'b', 'device', 'precision' (with the images' size)"
                              : "keys 'model.arch', 'model.width', 'model.stem', 'b', 'precision' (with the images' size)",
                   err, sizeof err);
    agree_or_exit(st, err);
    model_init(t.net, e.seed);
    const size_t sample = (size_t)train.c * train.h * train.w;
    /* Minibatches are copied to the device every step: page-locked there (model_host_alloc). */
    t.x = model_host_alloc(t.net, (size_t)e.b * sample * sizeof(float));
    t.y = model_host_alloc(t.net, (size_t)e.b * sizeof(int));
    t.eval_x = model_host_alloc(t.net, (size_t)t.eval_batch * sample * sizeof(float));
    t.eval_y = model_host_alloc(t.net, (size_t)t.eval_batch * sizeof(int));
    t.eval_idx = xmalloc((size_t)t.eval_batch * sizeof(int));
    t.velocity = xcalloc(model_n_params(t.net), sizeof(float));
    /* How allreduce moves the gradients on a GPU (train_allreduce_mean): NCCL, MPI on device
     * memory, or MPI through the host. */
    if (on_gpu && e.comm == COMM_NCCL) t.gcomm = nccl_setup(&e, t.net, worker);
    t.gpu_aware = on_gpu && comm_gpu_aware();
    char comm_desc[160] = "";
    if (on_gpu && e.method == METHOD_ALLREDUCE) {
        if (t.gcomm) {
            char v[ERRLEN + 64];
            gpucomm_version(v, sizeof v); /* "NCCL 2.28.9 (path; ...)" */
            int len = (int)strcspn(v, "(");
            while (len > 0 && v[len - 1] == ' ') len--;
            snprintf(comm_desc, sizeof comm_desc, "; all-reduce: %.*s on the GPUs", len < 40 ? len : 40, v);
        } else
            snprintf(comm_desc, sizeof comm_desc, "; all-reduce: MPI %s", t.gpu_aware ? "on device memory (CUDA-aware)" : "through host memory");
    }
    st = method->init(&t, err, sizeof err);
    agree_or_exit(st, err);

    /* 5. The run file (log rank), created exclusively. */
    int data_array = 0; /* index of data/decode_warnings among the run file's fixed arrays (jpeg) */
    static char device_desc[512]; /* the run file's /device, and the start-up line on the CPU with bf16 */
    if (rank == log_rank) {
        static char cfg_text[1 << 16], cmdline[4096];
        /* Stored with overwrite = false: re-running the experiment from the file it produced must
         * never replace that file. */
        static experiment stored;
        stored = e;
        stored.overwrite = 0;
        config_to_text(&stored, cfg_text, sizeof cfg_text);
        join_args(argc, argv, cmdline, sizeof cmdline);
        if (on_gpu) snprintf(device_desc, sizeof device_desc, "cuda %s: %s%s", precision_name(e.precision), gpu_desc, comm_desc);
        else {
            char v[256];
            model_backend_version(v, sizeof v);
            char lp[256] = "";
            int n_conv = 0, n_lp = model_bf16_convs(t.net, &n_conv, NULL, 0);
            if (n_lp || e.precision == PRECISION_BF16) {
                char names[128];
                model_bf16_convs(t.net, &n_conv, names, sizeof names);
                snprintf(lp, sizeof lp, " (%d of %d convolutions in bf16%s%s)", n_lp, n_conv, *names ? "; fp32: " : "", names);
            }
            snprintf(device_desc, sizeof device_desc, "cpu %s%s: %.*s, %d thread(s) per rank", precision_name(e.precision), lp,
                     (int)strcspn(v + 5, ";"), v + 5, threads);
        }
        runlog_meta meta = {
            .method = method_name(e.method), .p = e.p, .b = e.b, .m = e.p * e.b, .seed = e.seed,
            .iterations = e.iterations, .config_text = cfg_text, .command_line = cmdline, .hostname = comm_host(),
            .servers = has_servers ? e.servers : 0, .ranks = e.p, .device = device_desc,
        };
        /* The method's own arrays first, at the indices it writes them by (docs/output.md). */
        static runlog_array_spec all_arrays[METHOD_MAX_ARRAYS + 2];
        int na = method->runlog_arrays ? method->runlog_arrays(&e, all_arrays) : 0;
        meta.eval_local = method->eval_local;
        /* The data set's provenance, and per-worker decode counts (jpeg). */
        static runlog_attr attrs[24];
        static char interp_s[16];
        int nat = 0;
        data_array = na;
        /* The libraries this process runs on (the versions loaded, not those built against). */
        static char lib_mpi[256], lib_dnn[256], lib_h5[64], lib_nccl[ERRLEN + 64], libraries[2048];
        comm_library_version(lib_mpi, sizeof lib_mpi);
        model_backend_version(lib_dnn, sizeof lib_dnn);
        runlog_library_version(lib_h5, sizeof lib_h5);
        gpucomm_version(lib_nccl, sizeof lib_nccl);
        snprintf(libraries, sizeof libraries, "%s; %s; MPI: %s; nccl: %s", lib_dnn, lib_h5, lib_mpi, lib_nccl);
        attrs[nat++] = (runlog_attr){"libraries", libraries, 0};
        attrs[nat++] = (runlog_attr){"data_format", data_format_name(e.data.format), 0};
        attrs[nat++] = (runlog_attr){"data_classes", NULL, train.n_classes};
        attrs[nat++] = (runlog_attr){"data_train_n", NULL, train.n};
        attrs[nat++] = (runlog_attr){"data_val_n", NULL, val.n};
        if (fmt_syn)
            attrs[nat++] = (runlog_attr){"data_synthetic", "yes: random inputs and labels (data.format = \"synthetic\"); these "
                                                            "curves measure speed, not learning", 0};
        if (fmt_jpeg) {
            const aug_cfg *a = &t.train_loader.jcfg.train_aug;
            snprintf(interp_s, sizeof interp_s, "%s", a->interp == IMAGE_BICUBIC ? "bicubic" : "bilinear");
            attrs[nat++] = (runlog_attr){"data_dir", e.data.dir, 0};
            attrs[nat++] = (runlog_attr){"data_pack_format", SHARDS_FORMAT, 0};
            attrs[nat++] = (runlog_attr){"data_pack_format_version", NULL, SHARDS_FORMAT_VERSION};
            attrs[nat++] = (runlog_attr){"data_pack_max_side", NULL, shards_max_side(pack_train)};
            attrs[nat++] = (runlog_attr){"data_pack_skipped", NULL, shards_skipped(pack_train) + shards_skipped(pack_val)};
            attrs[nat++] = (runlog_attr){"data_pack_shards", NULL, shards_n_shards(pack_train) + shards_n_shards(pack_val)};
            static char fp_text[48];
            snprintf(fp_text, sizeof fp_text, "%016llx/%016llx", (unsigned long long)t.data_fp[0], (unsigned long long)t.data_fp[1]);
            attrs[nat++] = (runlog_attr){"data_pack_fingerprint", fp_text, 0};
            attrs[nat++] = (runlog_attr){"data_augment", augment_name(e.data.augment), 0};
            attrs[nat++] = (runlog_attr){"data_interp", interp_s, 0};
            attrs[nat++] = (runlog_attr){"data_threads", NULL, budget.data};
            all_arrays[na++] = (runlog_array_spec){"data/decode_warnings", e.p, 0, "warnings",
                                                   "libjpeg warnings (corrupt data recovered, premature end of data) of the samples each "
                                                   "worker used, over the whole run (kept across resumes by the checkpoints)", 0, 0};
            all_arrays[na++] = (runlog_array_spec){"data/decode_failures", e.p, 0, "samples",
                                                   "samples each worker drew that could not be decoded (each replaced by the next sample "
                                                   "of the pack and named once on stderr), over the whole run (kept across resumes by the checkpoints)", 0, 0};
        }
        meta.arrays = na ? all_arrays : NULL, meta.n_arrays = na;
        meta.attrs = attrs, meta.n_attrs = nat;
        if (t.resume_label >= 0) { /* continue the run file after the checkpoint's rows */
            ckpt_file *f = ckpt_open(ckdir, t.resume_label, rank, err, sizeof err);
            int64_t r[4] = {0};
            if (f && ckpt_get_i64(f, "run_rows", r, 4) != 0) snprintf(err, sizeof err, "%s", ckpt_error(f));
            if (f && !err[0]) {
                const runlog_rows keep = {.train = r[0], .eval = r[1], .eval_local = r[2], .ranks = r[3]};
                char note[CFG_PATH_MAX + 160];
                snprintf(note, sizeof note, "checkpoint %s/step-%ld%s", ckdir, t.resume_label,
                         not_bitwise ? " (other compute threads or oneDNN ISA than the checkpoint's: not bitwise)" : "");
                t.log = runlog_resume(e.output, &meta, &keep, note, err, sizeof err);
            }
            ckpt_free(f);
        } else {
            char aside[CFG_PATH_MAX + 64] = "";
            if (plan.move_aside && move_aside(e.output, aside, sizeof aside, err, sizeof err) != 0) st = EXIT_BADINPUT;
            else if (aside[0])
                printf("dsgd-run: %s had no checkpoint to continue from (cut off before its first one): kept as %s; starting afresh\n",
                       e.output, aside);
            if (!st) t.log = runlog_create(e.output, e.overwrite, &meta, err, sizeof err);
            /* overwrite = true replaced the run file: the earlier run's checkpoints go too */
            if (t.log && plan.had_ckpt && ckpt_remove_all(ckdir, err, sizeof err) != 0) runlog_close(t.log), t.log = NULL;
        }
        if (!t.log) {
            st = EXIT_BADINPUT;
            char msg[ERRLEN];
            snprintf(msg, sizeof msg, "%s", err);
            snprintf(err, sizeof err, "%s: key 'output': %.900s", config_where("output"), msg);
        } else comm_on_timeout(record_timeout, &t);
    }
    agree_or_exit(st, err);

    if (rank == log_rank) {
        printf("dsgd-run %s: %s, method %s, p = %d, b = %d, m = p·b = %d, %ld iterations (%.2f epochs)\n", DSGD_VERSION, e.name,
               method_name(e.method), e.p, e.b, e.p * e.b, e.iterations,
               (double)e.iterations / (double)t.train_loader.steps_per_epoch);
        if (t.resume_label >= 0) printf("resuming from %s/step-%ld: %ld of %ld iterations done\n", ckdir, t.resume_label, t.resume_label, e.iterations);
        if (e.checkpoint.every) printf("checkpoints every %ld iterations and on SIGTERM/SIGUSR1 into %s\n", e.checkpoint.every, ckdir);
        if (has_servers) printf("ranks 0..%d: workers; ranks %d..%d: parameter servers (rank %d writes the run file)\n", e.p - 1, e.p,
                                e.p + e.servers - 1, e.p);
        char arch[64];
        if (e.model.arch == ARCH_LINEAR) snprintf(arch, sizeof arch, "linear (multinomial logistic regression)");
        else snprintf(arch, sizeof arch, "resnet18 width %d, %s stem", e.model.width, stem_name(e.model.stem));
        printf("model %s, %zu parameters; %d training / %d validation images; %d thread(s) per rank; output %s\n", arch,
               model_n_params(t.net), train.n, val.n, threads, e.output);
        if (fmt_jpeg)
            printf("data: jpeg from %s (%d classes), augment %s, crop %d, %d decode thread(s) per rank\n", e.data.dir, train.n_classes,
                   augment_name(e.data.augment), e.data.crop, budget.data);
        if (fmt_syn) printf("data: synthetic (random inputs and labels, %dx%dx%d, %d classes): curves measure speed, not learning\n",
                            train.c, train.h, train.w, train.n_classes);
        print_budget(&budget, stdout);
        if (on_gpu) printf("device cuda (%s): rank %d on %s%s\n", precision_name(e.precision), rank, gpu_desc, comm_desc);
        else if (e.precision != PRECISION_FP32) printf("device %s\n", device_desc);
        fflush(stdout);
    }

    /* 6. Train. */
    st = train_run(&t);
    /* The decode counts of every worker into the run file (jpeg; the methods whose ranks all
     * come back from train_run together). */
    if (fmt_jpeg && !has_servers && e.inject.fail_rank < 0) {
        double *c = xcalloc((size_t)2 * e.p, sizeof *c);
        jpegload_stats ds;
        loader_stats(&t.train_loader, &ds);
        if (worker >= 0) c[worker] = (double)ds.warnings, c[e.p + worker] = (double)ds.failures;
        comm_workers_sum_f64(c, 2 * e.p);
        if (rank == log_rank && t.log) {
            long long *v = xmalloc((size_t)2 * e.p * sizeof *v), tw = 0, tf = 0;
            for (int i = 0; i < 2 * e.p; i++) { v[i] = (long long)c[i]; *(i < e.p ? &tw : &tf) += v[i]; }
            if (runlog_array(t.log, data_array, v) || runlog_array(t.log, data_array + 1, v + e.p))
                fprintf(stderr, "dsgd-run: writing %s: %s\n", e.output, runlog_error(t.log));
            printf("data: %lld decode warning(s), %lld undecodable sample(s) drawn and replaced (all workers)\n", tw, tf);
            free(v);
        }
        free(c);
    }
    if (rank == log_rank && t.log && runlog_close(t.log) != 0 && !st) st = EXIT_RUNTIME; /* runlog_close printed why */
    if (rank == log_rank) comm_on_timeout(NULL, NULL), t.log = NULL;
    if (t.lost) { /* a rank stopped and was given up on: it will never exit, so the launcher must end it */
        printf("dsgd-run: %d rank(s) were given up on (silent for more than comm_timeout_s): ending the job with exit status %d\n",
               t.lost, st);
        fflush(stdout);
        comm_abort(st);
    }
    st = comm_finish(st, rank == log_rank); /* bounded: a rank stopped at the very end does not hold the job */

    model_host_free(t.net, t.x), model_host_free(t.net, t.y), model_host_free(t.net, t.eval_x), model_host_free(t.net, t.eval_y);
    free(t.eval_idx), free(t.velocity);
    gpucomm_free(t.gcomm);
    model_free(t.net);
    loader_free(&t.train_loader);
    shards_close(pack_train), shards_close(pack_val);
    dataset_free(&train), dataset_free(&val);
    comm_finalize();
    return st;
}
