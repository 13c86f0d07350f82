/* resume.c — phase 3 of a run (setup.h): whether this run continues an earlier one of its
 * experiment (docs/checkpoint.md), and whether it may write its output and checkpoint directory.
 * Everything is checked before the run file is touched, so that a refused run changes nothing. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "nn/layers.h"
#include "methods/server.h"
#include "run/setup.h"
#include "train/checkpoint.h"
#include "util/util.h"

/* Whether the run that wrote the run file at path is still going: its checkpoint directory (its
 * own checkpoint.path, or the one its output implies, relative to its working directory) is
 * locked by a live process (ckpt_in_use). That directory into dir. */
static int earlier_run_live(const char *path, char *dir, size_t n) {
    static char text[CFG_TEXT_MAX], m[ERRLEN];
    char cwd[CFG_PATH_MAX] = "", rel[CFG_PATH_MAX] = "";
    if (ckpt_run_attr(path, "config", text, sizeof text, m, sizeof m) != 0 ||
        ckpt_run_attr(path, "working_directory", cwd, sizeof cwd, m, sizeof m) != 0)
        return 0;
    experiment old = {0};
    if (config_text_string(text, "checkpoint.path", old.checkpoint.path, sizeof old.checkpoint.path) ||
        config_text_string(text, "output", old.output, sizeof old.output))
        return 0;
    ckpt_dir_of(&old, rel, sizeof rel);
    if (rel[0] == '/' || !cwd[0]) snprintf(dir, n, "%s", rel);
    else snprintf(dir, n, "%s/%s", cwd, rel);
    return ckpt_in_use(dir);
}

/* The output must be creatable and must not hold an earlier run (never overwritten unless
 * `overwrite`): not a directory, not the checkpoint directory ckdir, and its nearest existing
 * ancestor a writable directory (the run file creates the missing ones). Returns 0 or EXIT_BADINPUT. */
static int check_output(const experiment *e, const char *ckdir, char *err, size_t errlen) {
    struct stat sb, sc;
    const int out_exists = stat(e->output, &sb) == 0;
    const size_t len = strlen(e->output);
    if (len && e->output[len - 1] == '/')
        return seterr(err, errlen, "%s: key 'output': %s ends in '/'; expected the path of an HDF5 file (e.g. %srun.h5)", config_where("output"),
                      e->output, e->output);
    if (!strcmp(ckdir, e->output) || (out_exists && stat(ckdir, &sc) == 0 && sb.st_dev == sc.st_dev && sb.st_ino == sc.st_ino))
        return seterr(err, errlen, "%s: key 'checkpoint.path': %s is the output file's path (key 'output'); choose another checkpoint.path",
                      config_where("checkpoint.path"), ckdir);
    if (stat(ckdir, &sc) == 0 && !S_ISDIR(sc.st_mode))
        return seterr(err, errlen, "%s: key 'checkpoint.path': %s exists and is not a directory", config_where("checkpoint.path"), ckdir);
    if (!out_exists && lstat(e->output, &sc) == 0)
        return seterr(err, errlen, "%s: key 'output': %s is a symbolic link to nothing; remove it or choose another output",
                      config_where("output"), e->output);
    if (out_exists) {
        if (S_ISDIR(sb.st_mode))
            return seterr(err, errlen, "%s: key 'output': %s is a directory; expected the path of an HDF5 file", config_where("output"), e->output);
        if (!e->overwrite)
            return seterr(err, errlen, "%s: key 'output': %s already exists; use --set overwrite=true to replace it or choose another output",
                          config_where("output"), e->output);
        /* overwrite = true replaces an earlier run file of dsgd-run, never any other file */
        char version[64] = "", why[ERRLEN] = "";
        if (ckpt_run_attr(e->output, "dsgd_version", version, sizeof version, why, sizeof why) != 0 || !version[0])
            return seterr(err, errlen, "%s: key 'output': %s exists and is not a dsgd-run run file%s%.300s; overwrite = true replaces "
                          "only an earlier run's file: choose another output", config_where("output"), e->output, why[0] ? ": " : "", why);
        char live[CFG_PATH_MAX];
        if (earlier_run_live(e->output, live, sizeof live))
            return seterr(err, errlen, "%s: key 'output': %s belongs to a run that is still going (it holds the lock of its checkpoint "
                          "directory %s); overwrite = true replaces only a run that has ended: choose another output",
                          config_where("output"), e->output, live);
    }
    char dir[CFG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", e->output);
    int found = 0;
    while (!found && strcmp(dir, ".") != 0 && strcmp(dir, "/") != 0) { /* up to the nearest existing ancestor */
        char *slash = strrchr(dir, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else slash[slash == dir] = '\0';
        found = stat(dir, &sb) == 0;
    }
    if (!found || !S_ISDIR(sb.st_mode))
        return seterr(err, errlen, "%s: key 'output': cannot create %s: %s is not a directory", config_where("output"), e->output, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return seterr(err, errlen, "%s: key 'output': cannot create %s: directory %s is not writable", config_where("output"), e->output, dir);
    /* Writable by its mode bits yet refusing files (/proc, /sys, some FUSE mounts): a probe file,
     * removed at once, says so before anything is created. */
    char probe[CFG_PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/.dsgd-probe-XXXXXX", dir);
    const int fd = mkstemp(probe);
    if (fd < 0)
        return seterr(err, errlen, "%s: key 'output': cannot create %s: no file can be created in %s (%s)", config_where("output"), e->output,
                      dir, strerror(errno));
    close(fd);
    unlink(probe);
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

/* Rank 0: whether this run continues an earlier one (checkpoint.h), into *pl (label -1, else zero, on entry). Returns 0 or
 * EXIT_BADINPUT. */
static int plan_resume(const experiment *e, int cli_resume, const char *dir, int log_rank, resume_plan *pl, char *err,
                       size_t errlen) {
    const int wants = cli_resume || e->resume == RESUME_AUTO;
    const char *how = cli_resume ? "--resume" : "resume = \"auto\"";
    char m[ERRLEN];
    long l = -1;
    int have = ckpt_latest(dir, &l, m, sizeof m);
    if (have < 0) { /* `latest` unreadable, or naming a step directory that is not there: the newest one there */
        l = ckpt_previous(dir, LONG_MAX);
        if (l < 0) return seterr(err, errlen, "%s: key 'checkpoint.path': %s", config_where("checkpoint.path"), m);
        fprintf(stderr, "dsgd-run: %s; taking the newest checkpoint there, %s/step-%ld\n", m, dir, l);
        have = 1;
    }
    pl->had_ckpt = have;
    struct stat sb;
    const int out_exists = stat(e->output, &sb) == 0 && S_ISREG(sb.st_mode);
    static char saved[CFG_TEXT_MAX], now[CFG_TEXT_MAX];
    config_to_text(e, now, sizeof now);
    char status[512] = "";
    const int status_bad = out_exists && ckpt_run_attr(e->output, "status", status, sizeof status, m, sizeof m) != 0;
    if (wants && out_exists) {
        if (status_bad || ckpt_run_attr(e->output, "config", saved, sizeof saved, m, sizeof m) != 0)
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
        /* a checkpoint whose parts cannot be read (cut short by a crash of a node): the one before it */
        for (long prev; ckpt_find_experiment(dir, l, log_rank, saved, sizeof saved, &pl->run_id, m, sizeof m); l = prev) {
            if ((prev = ckpt_previous(dir, l)) < 0)
                return seterr(err, errlen, "%s: key 'checkpoint.path': %s", config_where("checkpoint.path"), m);
            fprintf(stderr, "dsgd-run: checkpoint %s/step-%ld cannot be read (%s): resuming from the one before it, %s/step-%ld\n",
                    dir, l, m, dir, prev);
        }
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
    if (have && !e->overwrite && !status_bad && !strcmp(status, "completed")) /* the run these checkpoints belong to finished */
        return seterr(err, errlen, "%s: key 'output': %s holds a completed run (its checkpoints are in %s); use --set overwrite=true "
                      "to replace it (its checkpoints are then removed) or choose another output", config_where("output"), e->output, dir);
    int other = 0; /* the checkpoint is the run of another output: never this run's to continue or remove */
    if (have) {
        uint64_t id;
        char out[CFG_PATH_MAX];
        other = !ckpt_find_experiment(dir, l, log_rank, saved, sizeof saved, &id, m, sizeof m) &&
                !config_text_string(saved, "output", out, sizeof out) && strcmp(out, e->output) != 0;
    }
    if (other)
        return seterr(err, errlen, "%s: key 'checkpoint.path': %s holds the checkpoint of the run of another output (step %ld)%s: "
                      "choose another checkpoint.path", config_where("checkpoint.path"), dir, l,
                      e->overwrite ? "; overwrite = true replaces only this output's run" : "");
    if (have && !e->overwrite)
        return seterr(err, errlen, "%s: key 'checkpoint.path': %s holds the checkpoint of an earlier run (step %ld); %schoose another "
                      "output or checkpoint.path, or set overwrite = true to start afresh (its checkpoints are then removed)",
                      config_where("checkpoint.path"), dir, l,
                      config_sim_no_resume(e) ? "" : "continue it with --resume (or resume = \"auto\"), ");
    return 0;
}

/* Every rank, before a resume: its part of checkpoint `label` is there and is that checkpoint's
 * (a worker of a method with servers that had left before the checkpoint has no part). */
static int check_rank_part(const experiment *e, const char *dir, long label, int rank, int has_servers, int worker, char *err,
                           size_t errlen);

/* Every rank: the parts of checkpoint plan->label of ranks first..last (this rank's; every rank's
 * for --check without mpiexec) can be read, else — on every rank together — the checkpoint before
 * it, with a message saying so (a crash of a node can leave a part cut short, docs/checkpoint.md);
 * when there is none before, every rank stops (exit 2) naming the part. */
static void resume_readable(run_setup *r, int first, int last) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    const int servers = method_has_servers(e->method);
    for (;;) {
        char err[ERRLEN] = "";
        int st = 0;
        for (int k = first; k <= last && !st; k++) {
            const int worker = k == t->rank ? t->worker : servers && k >= e->p ? -1 : k;
            st = check_rank_part(e, t->ckpt_dir, r->plan.label, k, servers, worker, err, sizeof err) ? EXIT_BADINPUT : 0;
        }
        if (!comm_max_int(st)) return;
        long prev = t->rank == 0 ? ckpt_previous(t->ckpt_dir, r->plan.label) : -1;
        comm_bcast(&prev, sizeof prev, 0);
        if (prev < 0) setup_agree(st, err); /* exits */
        if (st) fprintf(stderr, "dsgd-run: rank %d: %s\n", t->rank, err);
        if (t->rank == 0)
            fprintf(stderr, "dsgd-run: checkpoint %s/step-%ld cannot be read: resuming from the one before it, %s/step-%ld\n",
                    t->ckpt_dir, r->plan.label, t->ckpt_dir, prev);
        r->plan.label = prev;
    }
}

static int check_rank_part(const experiment *e, const char *dir, long label, int rank, int has_servers, int worker, char *err,
                           size_t errlen) {
    char m[ERRLEN] = "";
    if (has_servers && worker >= 0) {
        int gone = 0;
        if (srv_worker_gone(dir, label, e->p, worker, &gone, m, sizeof m)) return seterr(err, errlen, "resume: %s", m);
        if (gone) return 0;
    }
    ckpt_file *f = ckpt_open(dir, label, rank, m, sizeof m);
    ckpt_free(f);
    return f ? 0 : seterr(err, errlen, "resume: %s", m);
}

void resume_prepare(run_setup *r, const char *config_path, int cli_resume) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    resume_plan *plan = &r->plan;
    char err[ERRLEN] = "";
    int st = 0;
    const int r0 = t->rank == 0;
    ckpt_dir_of(e, t->ckpt_dir, sizeof t->ckpt_dir);
    *plan = (resume_plan){.label = -1};
    if (r0) {
        st = check_not_input(e, config_path, t->ckpt_dir, err, sizeof err);
        if (!st) st = plan_resume(e, cli_resume, t->ckpt_dir, t->log_rank, plan, err, sizeof err);
        if (!st && plan->label < 0 && !plan->finished && !plan->move_aside) st = check_output(e, t->ckpt_dir, err, sizeof err);
    }
    if (r0 && !st && e->stop_at > 0 && e->stop_at <= (long)time(NULL))
        st = seterr(err, sizeof err, "%s: key 'stop_at': %ld is already past (now %ld): the run would stop after its first step; "
                    "give a later time (Unix seconds, e.g. date -d '+1 hour' +%%s) or 0 (none)", config_where("stop_at"), e->stop_at,
                    (long)time(NULL));
    if (r0 && !plan->run_id) plan->run_id = ckpt_new_run_id();
    setup_agree(st, err);
    ckpt_set_stop_at(e->stop_at);
    ckpt_set_keep(e->checkpoint.keep);
    comm_bcast(plan, sizeof *plan, 0);
    ckpt_set_run_id(plan->run_id);
    if (plan->finished) {
        if (r0) printf("dsgd-run: %s: this run is already finished (its status is \"completed\"): nothing to do\n", e->output);
        comm_finalize();
        exit(0);
    }
    /* The checkpoint directory: created, writable and this run's alone (locked), checked now
     * rather than when the first checkpoint (or SIGTERM) comes. */
    char m[ERRLEN] = "";
    setup_agree_key(r0 && !r->check_only && ckpt_claim(t->ckpt_dir, m, sizeof m) < 0 ? EXIT_BADINPUT : 0, "checkpoint.path", m);
    /* Every rank's part of the checkpoint must be there and be this checkpoint's, before the run
     * file is touched: a refused resume changes nothing; one that cannot be read, the checkpoint
     * before it. `--check` without mpiexec checks every rank's part. */
    const int first = r->world_unchecked ? 0 : t->rank, last = r->world_unchecked ? config_world_size(e) - 1 : t->rank;
    if (plan->label >= 0) resume_readable(r, first, last);
    /* A CPU run continues bitwise only with the threads and ISA its checkpoint was written with:
     * refused unless checkpoint.bitwise = false (then recorded with the resume: how, for the first
     * rank that differs). */
    char how[160] = "";
    for (int k = first; plan->label >= 0 && e->device != DEVICE_CUDA && k <= last && !st; k++) {
        int differs = 0;
        char h[128] = "";
        st = ckpt_check_machine(t->ckpt_dir, plan->label, k, r->budget.compute, nn_isa_name(), e->checkpoint.bitwise, &differs, h,
                                sizeof h, err, sizeof err);
        if (differs && !how[0] && k) snprintf(how, sizeof how, "rank %d: %.100s", k, h);
        else if (differs && !how[0]) snprintf(how, sizeof how, "%.100s", h);
        r->not_bitwise |= differs;
    }
    /* Sim mode's server methods keep virtual state (a server's now, NIC times, the workers' bounds)
     * that their checkpoints do not hold yet, nor asynchronous gossip's schedule: a resumed run's
     * times would not be the uninterrupted run's (docs/simulate.md, Limits), so it is refused
     * rather than mixed. Nothing is removed: the run file and the checkpoint are the user's. */
    if (plan->label >= 0 && !st && config_sim_no_resume(e)) {
        st = EXIT_BADINPUT;
        snprintf(err, sizeof err, "method '%s' in sim mode cannot be resumed yet (its virtual state is not in "
                 "the checkpoint: docs/simulate.md, Limits); start it again from step 0 under another output (the run "
                 "file and its checkpoint are left as they are)",
                 method_name(e->method));
        setup_blame(e, "key 'sim.enabled'", err, sizeof err);
    }
    /* The data must be the pack the checkpoint was written with (packed again: other samples). */
    if (plan->label >= 0 && !st && ckpt_exists(t->ckpt_dir, plan->label, t->rank) &&
        ckpt_check_data(t->ckpt_dir, plan->label, t->rank, t->data_fp, err, sizeof err))
        st = EXIT_BADINPUT, setup_blame(e, "key 'data.dir'", err, sizeof err);
    setup_agree(st, err);
    r->not_bitwise = comm_max_int(r->not_bitwise);
    const int top = comm_max_int(how[0] ? comm_size() - t->rank : 0); /* the lowest rank that differs tells */
    if (top) comm_bcast(how, sizeof how, comm_size() - top);
    snprintf(r->not_bitwise_how, sizeof r->not_bitwise_how, "%s", how);
    t->resume_label = plan->label;
}

/* Rename the run file at path to a free name "<stem>.restart<k>.h5" beside it (k = 1, 2, ...),
 * written into aside. Returns 0 or EXIT_BADINPUT with err filled. */
int resume_move_aside(const char *path, char *aside, size_t n, char *err, size_t errlen) {
    size_t len = strlen(path);
    const int h5 = len > 3 && strcmp(path + len - 3, ".h5") == 0;
    for (int k = 1; k < 1000; k++) {
        snprintf(aside, n, "%.*s.restart%d.h5", (int)(h5 ? len - 3 : len), path, k);
        struct stat sb;
        if (lstat(aside, &sb) == 0) continue;
        if (link(path, aside) == 0)
            return unlink(path) == 0 ? 0 : seterr(err, errlen, "key 'output': %s: kept as %s but cannot remove it: %s", path, aside,
                                                  strerror(errno));
        if (errno == EEXIST) continue;
        if (rename(path, aside) == 0) return 0; /* file systems without hard links */
        return seterr(err, errlen, "key 'output': %s: cannot keep it as %s: %s", path, aside, strerror(errno));
    }
    return seterr(err, errlen, "key 'output': %s: no free name to keep it under", path);
}
