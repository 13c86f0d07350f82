/* main.c — dsgd-run's command line: the options, the launcher and world checks, --status,
 * --help, --version, --pack, the experiment (phase 1: read before MPI_Init, which then asks for
 * the thread level the method needs) and the --check report; then main() runs the phases of
 * src/run/setup.h in order:
 *
 *   dsgd-run [--set KEY=VALUE]... [--check] EXPERIMENT.cfg
 *
 * Every rank reads the experiment and its data itself (a shared file system is assumed, as on
 * every cluster); after each set-up phase the ranks agree on the worst status (setup_agree),
 * so bad input stops every rank with exit status 2 and no rank is left waiting. Only rank 0
 * prints errors and the log rank writes the run file. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "config/config.h"
#include "data/pack.h"
#include "data/shards.h"
#include "io/runlog.h"
#include "methods/method.h"
#include "run/loop.h"
#include "nn/model.h"
#include "gpu.h"
#include "gpucomm.h"
#include "train/checkpoint.h"
#include "run/setup.h"
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
            "SIGTERM, SIGINT or SIGHUP after writing a checkpoint (SIGUSR1: checkpoint and go on).\n"
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
    if (a->check_only && a->print_config)
        return seterr(err, errlen, "--check and --print-config exclude each other: --check validates and reports, --print-config "
                      "prints the experiment file (see dsgd-run --help)");
    if (a->status_of && a->config_path)
        return seterr(err, errlen, "--status takes one run file and nothing else; '%s' given as well", a->config_path);
    if (!a->config_path && !a->help && !a->version && !a->status_of)
        return seterr(err, errlen, "no experiment file given (usage: dsgd-run [--set KEY=VALUE]... [--check | --print-config] "
                      "[--p-from-world] [--resume] EXPERIMENT.cfg; dsgd-run --help)");
    return 0;
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
        const char *use = strstr(lib, "MPICH") ? "MPICH's mpiexec (Debian: mpiexec.mpich)"
                          : strstr(lib, "Open MPI") ? "Open MPI's mpiexec (Debian: mpiexec.openmpi)"
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

/* Before MPI_Init: the rank the launcher gave this process (its environment), 0 without one.
 * Only launcher rank 0 prints what is answered before MPI_Init (every process reaches the same
 * answer). */
static int launcher_rank(void) {
    static const char *vars[] = {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                                 "PALS_RANKID", "ALPS_APP_PE", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

/* Before MPI_Init: the world size the launcher exported (launcher_vars; srun's only above one
 * task), 0 without a launcher. */
static int launcher_world(void) {
    for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) {
        const char *v = getenv(launcher_vars[i].var);
        const int n = v ? atoi(v) : 0;
        if (n > 1 || (n == 1 && strcmp(launcher_vars[i].var, "SLURM_STEP_NUM_TASKS"))) return n;
    }
    return 0;
}

/* 1 if a launcher started this process, so that MPI_Init joins the launcher's world (PMI, PMIx,
 * Open MPI's, MVAPICH's, Cray PALS/ALPS variables, or srun with more than one task); 0 when it
 * was started by hand (a login node, a batch script's own shell), where MPI_Init would make a
 * singleton world. */
static int under_launcher(void) {
    static const char *vars[] = {"PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                                 "MV2_COMM_WORLD_SIZE", "PALS_RANKID", "ALPS_APP_PE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return launcher_world() > 1;
}

/* A method whose communication thread (method_ops.comm_thread) calls MPI while the main thread
 * does: asynchronous gossip (src/methods/gossip.c). Every other thread of dsgd-run (decode,
 * evaluation, oneDNN) never calls MPI, so MPI_THREAD_FUNNELED does for the rest. */
static int needs_thread_multiple(const experiment *e) {
    const method_ops *M = method_find(e->method);
    return M && M->comm_thread && !e->synchronous;
}

/* --status RUNFILE, --version, --help: answered without an experiment and without MPI (r0: this
 * process prints). Returns the exit status, or -1 when the command line asks for none of them. */
static int cli_answer(const cli_args *a, int r0) {
    if (a->status_of) { /* how a run ended: job scripts decide by this, not by mpiexec's exit code */
        char status[1024], version[64] = "", m[ERRLEN];
        int bad = ckpt_run_attr(a->status_of, "dsgd_version", version, sizeof version, m, sizeof m);
        if (!bad && !version[0]) bad = 1, snprintf(m, sizeof m, "%s is an HDF5 file but not a dsgd-run run file (no dsgd_version)", a->status_of);
        const int st = bad || ckpt_run_attr(a->status_of, "status", status, sizeof status, m, sizeof m) ? EXIT_BADINPUT
                       : !strcmp(status, "completed")                                        ? 0
                       : !strncmp(status, "interrupted", 11)                                 ? EXIT_INTERRUPTED
                                                                                             : EXIT_RUNTIME;
        if (r0 && st == EXIT_BADINPUT) fprintf(stderr, "dsgd-run: --status: %s\n", m);
        else if (r0) printf("%s\n", status[0] ? status : "(no status: the run was killed, or is still running)");
        return st;
    }
    if (!a->help && !a->version) return -1;
    if (a->version) {
        char mpi[256], dnn[128], h5[64], nccl[ERRLEN + 64];
        comm_library_version(mpi, sizeof mpi); /* MPI_Get_library_version: allowed before MPI_Init */
        const char *forced = getenv("DSGD_CUDA_AWARE");
        const int forced01 = forced && (!strcmp(forced, "0") || !strcmp(forced, "1"));
        /* MPI says whether it is CUDA-aware only once initialised: asked under a launcher, where
         * MPI_Init joins its world (mpiexec -n 1 dsgd-run --version), never in a singleton. */
        const int ask = !forced01 && under_launcher();
        if (ask) comm_init(NULL, NULL);
        const int aware = forced01 || ask ? comm_gpu_aware() : -1;
        if (ask) comm_finalize();
        if (r0) {
            model_backend_version(dnn, sizeof dnn);
            runlog_library_version(h5, sizeof h5);
            gpucomm_version(nccl, sizeof nccl);
            printf("dsgd-run %s\n  backend: %s\n  run file: %s\n  MPI: %s (CUDA-aware: %s)\n  comm nccl: %s\n", DSGD_VERSION, dnn, h5, mpi,
                   aware < 0 ? "not asked: MPI is not started outside a launcher; mpiexec -n 1 dsgd-run --version asks it"
                   : aware ? (forced01 ? "yes (forced: DSGD_CUDA_AWARE=1)" : "yes")
                   : forced01 ? "no (forced: DSGD_CUDA_AWARE=0)" : "no", nccl);
        }
    }
    if (r0 && a->help) { print_usage(stdout); printf("\nexperiment keys:\n"); config_print_keys(stdout); }
    return 0;
}

/* --p-from-world: the allocation decides p (p = ranks − servers). The file was read once for the
 * method and its servers; it is read again with p set last, so that every check on p (backups,
 * slow ranks, ...) sees it. Returns 0 or EXIT_BADINPUT with err filled. */
static int p_from_world(experiment *e, cli_args *a, int world, char *err, size_t errlen) {
    static char p_set[32];
    const int servers = method_has_servers(e->method) ? e->servers : 0;
    const int p = world - servers, p_file = e->p;
    if (p >= 1 && p != p_file && comm_rank() == 0 && !a->print_config)
        printf("dsgd-run: p = %d from the MPI world (--p-from-world: %d rank(s) - %d server(s)); the experiment "
               "said p = %d, so m = p·b = %d instead of %d\n", p, world, servers, p_file, p * e->b, p_file * e->b);
    if (p < 1)
        return seterr(err, errlen, "--p-from-world: MPI started %d rank(s), but method %s needs %d server rank(s) plus at least one "
                      "worker", world, method_name(e->method), servers);
    if (a->n_sets == MAX_SETS) return seterr(err, errlen, "more than %d --set options", MAX_SETS - 1);
    snprintf(p_set, sizeof p_set, "p=%d", p);
    a->sets[a->n_sets++] = p_set;
    return config_load(e, a->config_path, a->sets, a->n_sets, err, errlen);
}

/* Phase 1a, before MPI_Init: the experiment. Every process reads it and reaches the same verdict,
 * so bad input exits 2 on every rank without MPI (r0 prints the message); --print-config prints it
 * and exits 0 (--p-from-world: the world size the launcher exported, 1 without one). The method
 * read here decides the thread level asked of MPI (needs_thread_multiple). */
static void read_experiment(run_setup *r, cli_args *a, int r0) {
    experiment *e = &r->e;
    char err[ERRLEN] = "";
    int st = config_load(e, a->config_path, a->sets, a->n_sets, err, sizeof err);
    if (!st && a->print_config && a->p_from_world)
        st = p_from_world(e, a, launcher_world() > 0 ? launcher_world() : 1, err, sizeof err);
    /* What this binary cannot do is bad input already here, so that --check (and tools/sweep.py
     * through --print-config) refuses it on a login node without a GPU too. */
    if (!st && e->device == DEVICE_CUDA && !gpu_built())
        st = seterr(err, sizeof err, "%s: key 'device': device = \"cuda\" needs the GPU backend: this dsgd-run was built without "
                    "it; rebuild with `make CUDA=1` (CUDA toolkit, cuDNN and cuBLAS)", config_where("device"));
    if (!st && e->comm == COMM_NCCL && gpu_built() && !gpucomm_nccl_built())
        st = seterr(err, sizeof err, "%s: key 'comm': comm = \"nccl\" needs NCCL support: this dsgd-run was built without "
                    "it; rebuild with `make CUDA=1` where nccl.h is found (NCCL=auto or NCCL=1)", config_where("comm"));
    if (!st && a->print_config) {
        static char text[1 << 16];
        if (config_to_text(e, text, sizeof text) >= (int)sizeof text - 1)
            st = seterr(err, sizeof err, "--print-config: the experiment does not fit in %zu bytes", sizeof text);
        else if (r0) fputs(text, stdout);
    }
    if (st && r0) fprintf(stderr, "dsgd-run: %s\n", err);
    if (st || a->print_config) exit(st);
}

/* Phase 1b, after MPI_Init: the experiment against the world (--p-from-world; not under --check
 * without mpiexec), the thread level MPI gave, this node's CPU; r->t gets this rank's role. */
static void load_experiment(run_setup *r, cli_args *a) {
    experiment *e = &r->e;
    char err[ERRLEN] = "";
    int st = 0;
    /* --check without mpiexec cannot know the allocation: the file's p is checked as it is. */
    if (a->p_from_world && !(a->check_only && comm_size() == 1)) st = p_from_world(e, a, comm_size(), err, sizeof err);
    if (!st && needs_thread_multiple(e) && comm_mpi_initialized() && !comm_thread_multiple()) {
        char adv[640];
        comm_thread_multiple_advice(adv, sizeof adv);
        st = seterr(err, sizeof err, "%s: key 'method': method %s (asynchronous) answers its peers from a communication thread and "
                    "needs MPI_THREAD_MULTIPLE: %s", config_where("method"), method_name(e->method), adv);
    }
    /* bf16 on the CPU: refused before anything is written where this node cannot run it.
     * --check and --print-config may run on a login node of another CPU: a note there. */
    if (!st && e->precision == PRECISION_BF16 && e->device == DEVICE_CPU && e->model.arch == ARCH_RESNET18 &&
        !model_cpu_bf16_native()) {
        seterr(err, sizeof err, "%s: key 'precision': precision = \"bf16\" on the CPU needs AVX512_BF16 (or AMX) instructions, "
               "and oneDNN runs %s on %s (ONEDNN_MAX_CPU_ISA may cap it); use precision = \"fp32\" there",
               config_where("precision"), model_cpu_isa(), comm_host());
        if (!a->check_only) st = EXIT_BADINPUT;
        else if (comm_rank() == 0) printf("note: %s\n(--check ran on %s; the ranks refuse bf16 at start on a node like it)\n\n", err, comm_host());
    }
    /* `dsgd-run --check` without mpiexec checks everything but the world size. */
    r->check_only = a->check_only;
    r->world_unchecked = a->check_only && comm_size() == 1 && config_world_size(e) != 1;
    if (!st && !r->world_unchecked) st = config_check_world(e, comm_size(), err, sizeof err);
    setup_agree(st, err);
    char unused[4096];
    if (comm_rank() == 0 && config_unused_keys(e, unused, sizeof unused)) printf("note: %s\n", unused);
    if (!r->world_unchecked) comm_set_workers(e->p);
    comm_set_timeout(e->comm_timeout_s);
    const int rank = comm_rank(), worker = rank < e->p ? rank : -1; /* workers: ranks 0..p-1; servers after them */
    const int log_rank = method_has_servers(e->method) ? e->p : 0;
    if (!r->world_unchecked) comm_set_log_rank(log_rank); /* notes of ranks that give up go there */
    const method_ops *method = method_find(e->method);
    if (!method) st = seterr(err, sizeof err, "%s: method '%s' is not built", e->source, method_name(e->method));
    setup_agree(st, err);
    r->t = (trainer){.e = e, .method = method, .train = &r->train, .val = &r->val, .rank = rank, .p = e->p, .worker = worker,
                     .server = worker < 0 ? rank - e->p : -1, .log_rank = log_rank, .resume_label = -1};
}

/* --check: the resolved experiment, the data and what the run would do (rank 0). */
static void check_report(const run_setup *r) {
    const experiment *e = &r->e;
    if (comm_rank() != 0) return;
    config_print_table(e, stdout);
    printf("\nm = p·b = %d, %d training images (%dx%dx%d, %d classes), %ld steps per epoch, %d validation images, %d thread(s) per rank\n",
           e->p * e->b, r->train.n, r->train.c, r->train.h, r->train.w, r->train.n_classes, r->t.train_loader.steps_per_epoch, r->val.n,
           r->budget.compute);
    setup_print_threads(&r->budget, stdout);
    char mem[512];
    const int too_big = setup_check_memory(r, 1, mem, sizeof mem);
    if (mem[0]) printf("memory: %s%s\n", mem, too_big ? "; a run with this b would be refused on a node like this one (key 'b')" : "");
    if (e->data.format == FORMAT_JPEG)
        printf("data: %s: %d shard(s) of train, %d of val, %d classes; --check decoded %lld samples (up to 8 of each shard, first and last included): OK\n",
               e->data.dir, shards_n_shards(r->pack_train), shards_n_shards(r->pack_val), shards_n_classes(r->pack_train),
               (long long)r->verified);
    if (e->data.format == FORMAT_SYNTHETIC) printf("data: synthetic (random inputs and labels): curves measure speed, not learning\n");
    setup_print_sim(r, stdout);
    if (r->world_unchecked) {
        if (method_has_servers(e->method))
            printf("not checked: method %s runs on p + servers = %d + %d = %d MPI ranks (mpiexec -n %d)\n", method_name(e->method), e->p,
                   e->servers, config_world_size(e), config_world_size(e));
        else printf("not checked: p = %d must equal the number of MPI ranks (mpiexec -n %d)\n", e->p, e->p);
    }
    if (!comm_mpi_initialized() && needs_thread_multiple(e))
        printf("not checked: method %s (asynchronous) needs MPI_THREAD_MULTIPLE of the MPI it runs with (refused at start "
               "without it; docs/build.md, \"MPI\")\n", method_name(e->method));
    if (r->plan.label >= 0)
        printf("resume: continues %s from the checkpoint after %ld iterations (%s)%s\n", e->output, r->plan.label, r->t.ckpt_dir,
               r->not_bitwise ? "; with other threads or ISA than the checkpoint's: not bitwise (checkpoint.bitwise = false)" : "");
    if (r->plan.move_aside)
        printf("resume: %s has no checkpoint to continue from: it is kept under another name and the run starts afresh\n", e->output);
    printf("experiment OK\n");
}

int main(int argc, char **argv) {
    /* A file-size limit (ulimit -f) makes a too-large write fail with EFBIG, reported like any
     * other write error (exit 1 and a status in the run file), instead of killing the rank. */
    signal(SIGXFSZ, SIG_IGN);
    /* SIGTERM, SIGINT, SIGHUP, SIGUSR1 from the first instant (MPI_Init takes ~0.2 s): a checkpoint at
     * the next agreement point, or a clean stop before training (--pack handles its own). */
    const int pack = pack_requested(argc, argv);
    if (!pack) ckpt_install_signals();
    char err[ERRLEN] = "";
    if (pack) { /* dsgd-run --pack SRC OUT ...: src/data/pack.h */
        gpu_select_early();
        comm_init(&argc, &argv);
        int st = check_launcher_world(err, sizeof err);
        if (st && comm_rank() == 0) fprintf(stderr, "dsgd-run: %s\n", err);
        if (!st) st = pack_main(argc, argv);
        comm_finalize();
        return st;
    }
    /* The command line, --status, --version, --help, the experiment and --print-config are
     * answered before MPI_Init, by every process alike (launcher rank 0 prints): a singleton
     * MPI_Init (dsgd-run started by hand on a login node) hangs or fails on some stacks (Intel MPI
     * under Slurm's PMI, Cray PMI), and the experiment's method decides the thread level asked of
     * MPI (docs/build.md, "MPI"). */
    const int r0 = launcher_rank() == 0;
    static cli_args args;
    int st = parse_args(argc, argv, &args, err, sizeof err);
    if (st && r0) fprintf(stderr, "dsgd-run: %s\n", err);
    if (!st) st = cli_answer(&args, r0);
    if (st >= 0) return st;
    static run_setup r; /* the phases: src/run/setup.h, docs/architecture.md */
    read_experiment(&r, &args, r0);                    /* 1a. the experiment, read by every process */
    if (args.check_only && !under_launcher())
        comm_init_self(); /* --check started by hand: a world of one, no MPI */
    else {
        /* The launcher's node-local rank picks this rank's GPU before MPI_Init, where a CUDA-aware
         * MPI creates its CUDA context (on the current device); gpu_select checks it later. */
        gpu_select_early();
        comm_init_thread(&argc, &argv, needs_thread_multiple(&r.e));
    }
    /* A rank still waiting for another 25 s after a SIGTERM gives up (Slurm kills 30 s after it). */
    comm_on_stop(ckpt_stop_age, 25.0);
    st = check_launcher_world(err, sizeof err);
    if (st && comm_rank() == 0) fprintf(stderr, "dsgd-run: %s\n", err);
    if (st) {
        comm_finalize();
        return st;
    }
    load_experiment(&r, &args);                        /* 1b. the experiment against the world */
    setup_data(&r);                                    /* 2. training and validation data */
    resume_prepare(&r, args.config_path, args.resume); /* 3. an earlier run; output, checkpoints */
    if (args.check_only) {                             /*    --check: the report, and stop */
        check_report(&r);
        comm_finalize();
        return 0;
    }
    setup_model(&r);                                   /* 4. model, buffers, method */
    setup_runlog(&r, argc, argv);                      /* 5. the run file */
    st = train_run(&r.t);                              /* 6. training */
    st = setup_close(&r, st);                          /* 7. close; the exit status agreed */
    comm_finalize();
    return st;
}
