/* test_runtime.c — dsgd-run's launch on cluster nodes: what is answered without MPI_Init (L10),
 * the thread level asked of MPI (L9) and the refusal when MPI_THREAD_MULTIPLE is missing (L8),
 * the thread budget from the affinity masks of a node's ranks (L3) and on GPU ranks (L6), and the
 * memory check's cgroup limit (P4). Runs from the repository root with ./dsgd-run built (make
 * check); every mpiexec under `timeout`.
 *
 * MPI is watched through an LD_PRELOAD shim compiled here with cc (g_shim): with SHIM_NOINIT set,
 * MPI_Init and MPI_Init_thread print "shim: MPI_Init... called" and exit 99; SHIM_SAY prints the
 * thread level asked; SHIM_MAX_THREAD=N lowers `provided` to N (as Cray MPICH does without
 * MPICH_MAX_THREAD_SAFETY=multiple; Debian's MPICH ignores that variable); SHIM_LIBRARY replaces
 * MPI_Get_library_version's string (to see the advice for Cray MPICH and Open MPI). */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpiutil.h"
#include "testutil.h"
#include "run/setup.h"

static char g_dir[256], g_shim[300], g_cfg[300];

static const char *SHIM_SRC =
    "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n"
    "static void noinit(const char *f) {\n"
    "    if (getenv(\"SHIM_NOINIT\")) { fprintf(stderr, \"shim: %s called\\n\", f); fflush(stderr); _exit(99); }\n}\n"
    "int MPI_Init(int *c, char ***v) {\n    noinit(\"MPI_Init\");\n"
    "    int (*f)(int *, char ***) = (int (*)(int *, char ***))dlsym(RTLD_NEXT, \"MPI_Init\");\n    return f(c, v);\n}\n"
    "int MPI_Init_thread(int *c, char ***v, int req, int *prov) {\n    noinit(\"MPI_Init_thread\");\n"
    "    if (getenv(\"SHIM_SAY\")) fprintf(stderr, \"shim: thread level asked %d\\n\", req);\n"
    "    int (*f)(int *, char ***, int, int *) = (int (*)(int *, char ***, int, int *))dlsym(RTLD_NEXT, \"MPI_Init_thread\");\n"
    "    int r = f(c, v, req, prov);\n    const char *cap = getenv(\"SHIM_MAX_THREAD\");\n"
    "    if (cap && *prov > atoi(cap)) *prov = atoi(cap);\n    return r;\n}\n"
    "int MPI_Get_library_version(char *s, int *len) {\n    const char *lib = getenv(\"SHIM_LIBRARY\");\n"
    "    if (lib) { snprintf(s, 256, \"%s\", lib); *len = (int)strlen(s); return 0; }\n"
    "    int (*f)(char *, int *) = (int (*)(char *, int *))dlsym(RTLD_NEXT, \"MPI_Get_library_version\");\n    return f(s, len);\n}\n";

/* A linear model on synthetic 1x28x28 inputs: a run of 4 steps takes a fraction of a second. */
static void write_cfg(const char *path, const char *extra, const char *output) {
    char text[2048];
    snprintf(text, sizeof text,
             "name = \"rt\";\nseed = 1;\nmethod = \"allreduce\";\np = 2;\nb = 8;\niterations = 4;\nmodel = { arch = \"linear\"; };\n"
             "data = { format = \"synthetic\"; shape = [1, 28, 28]; classes = 10; };\n"
             "eval = { every = 4; batch = 50; at_start = false; };\nlog_every = 1;\noutput = \"%s\";\n%s",
             output, extra ? extra : "");
    write_file(path, text);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* L10: --version, --help, --status, --print-config and --check (started by hand) never call
 * MPI_Init; a run does (the shim's control, so that the test can fail). */
START_TEST(test_answers_without_mpi_init) {
    char cmd[2048], out[1 << 16], h5[400], bad[400];
    snprintf(h5, sizeof h5, "%s/done.h5", g_dir);
    write_cfg(g_cfg, NULL, h5);
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 ./dsgd-run %s", g_cfg);
    ck_assert_msg(run(cmd, out, sizeof out) == 0, "the run for --status failed:\n%s", out);
    char fresh[400];
    snprintf(fresh, sizeof fresh, "%s/fresh.h5", g_dir);
    write_cfg(g_cfg, NULL, fresh); /* --check refuses an existing output */
    const char *env = "env SHIM_NOINIT=1 LD_PRELOAD=";
    struct { const char *args, *want; int status; } c[] = {
        {"--version", "MPI: ", 0},
        {"--help", "experiment keys:", 0},
        {"--status", "completed", 0},
        {"--status /nonexistent/x.h5", "--status:", 2},
        {"--print-config", "method = \"allreduce\";", 0},
        {"--print-config --p-from-world", "p = 1;", 0}, /* no launcher: a world of one */
        {"--check", "experiment OK", 0},
        {"--check --set b=0", "key 'b'", 2},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const char *file = !strcmp(c[i].args, "--status") ? h5 : strstr(c[i].args, "/nonexistent") || !strcmp(c[i].args, "--help") ||
                                                                     !strcmp(c[i].args, "--version") ? "" : g_cfg;
        snprintf(cmd, sizeof cmd, "%s%s timeout 60 ./dsgd-run %s %s", env, g_shim, c[i].args, file);
        const int st = run(cmd, out, sizeof out);
        ck_assert_msg(st == c[i].status && strstr(out, c[i].want) && !strstr(out, "shim:"), "%s: exit %d (want %d, '%s'):\n%.3000s", cmd,
                      st, c[i].status, c[i].want, out);
    }
    /* --version by hand does not ask MPI whether it is CUDA-aware (that needs MPI_Init) and says so */
    snprintf(cmd, sizeof cmd, "%s%s timeout 60 ./dsgd-run --version", env, g_shim);
    run(cmd, out, sizeof out);
    ck_assert_msg(strstr(out, "CUDA-aware: not asked") != NULL, "%s", out);
    /* --check outside a launcher with a bad experiment: exit 2 naming the key, no run file */
    snprintf(bad, sizeof bad, "%s/bad.cfg", g_dir);
    write_cfg(bad, "momentum = 7;\n", h5);
    snprintf(cmd, sizeof cmd, "%s%s timeout 60 ./dsgd-run --check %s", env, g_shim, bad);
    ck_assert_msg(run(cmd, out, sizeof out) == 2 && strstr(out, "key 'momentum'") && !strstr(out, "shim:"), "%s", out);
    /* the control: a run calls MPI_Init_thread, which the shim ends with 99 */
    snprintf(cmd, sizeof cmd, "%s%s timeout 60 ./dsgd-run --set 'output=\"%s/ctl.h5\"' %s", env, g_shim, g_dir, g_cfg);
    ck_assert_msg(run(cmd, out, sizeof out) == 99 && strstr(out, "shim: MPI_Init_thread called"), "%s", out);
    /* under a launcher --version asks MPI (MPI_Init is safe there) */
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 1 ./dsgd-run --version");
    ck_assert_msg(run(cmd, out, sizeof out) == 0 && strstr(out, "CUDA-aware: no") && !strstr(out, "not asked"), "%s", out);
}
END_TEST

/* L9: MPI_THREAD_FUNNELED unless the method is asynchronous gossip (MPI_THREAD_MULTIPLE). */
START_TEST(test_thread_level_asked) {
    char cmd[2048], out[1 << 16], want[64], h5[400];
    snprintf(h5, sizeof h5, "%s/level.h5", g_dir);
    write_cfg(g_cfg, NULL, h5);
    struct { const char *sets; int level; } c[] = {
        {"", MPI_THREAD_FUNNELED},
        {"--set method=gossip_push", MPI_THREAD_MULTIPLE},
        {"--set method=gossip_pull", MPI_THREAD_MULTIPLE},
        {"--set method=gossip_pull --set synchronous=true", MPI_THREAD_FUNNELED},
        {"--set method=easgd --set p=1", MPI_THREAD_FUNNELED}, /* 1 worker + 1 server: the world of 2 */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 env SHIM_SAY=1 LD_PRELOAD=%s ./dsgd-run --check %s %s", g_shim,
                 c[i].sets, g_cfg);
        const int st = run(cmd, out, sizeof out);
        snprintf(want, sizeof want, "shim: thread level asked %d\n", c[i].level);
        ck_assert_msg(st == 0 && strstr(out, want) && strstr(out, "experiment OK"), "%s: exit %d, want '%s':\n%.3000s", cmd, st, want, out);
    }
}
END_TEST

/* L8: asynchronous gossip where MPI gives less than MPI_THREAD_MULTIPLE: exit 2 on every rank
 * before a run file, the message naming the thread level and this MPI's fix, not another
 * experiment. */
START_TEST(test_thread_multiple_missing) {
    char cmd[2048], out[1 << 16], h5[400];
    snprintf(h5, sizeof h5, "%s/gossip.h5", g_dir);
    write_cfg(g_cfg, NULL, h5);
    struct { const char *lib, *fix; } c[] = {
        {NULL, "MPICH grants it when built with --enable-threads=multiple"}, /* this machine's MPICH */
        {"CRAY MPICH version 8.1.28.2 (ANL base 3.4a2)", "export MPICH_MAX_THREAD_SAFETY=multiple"},
        {"Open MPI v4.1.6, package: Open MPI", "ompi_info"},
        {"Intel(R) MPI Library 2021.10 for Linux* OS", "release_mt"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char lib[200] = "";
        if (c[i].lib) snprintf(lib, sizeof lib, "'SHIM_LIBRARY=%s'", c[i].lib);
        for (int check = 0; check < 2; check++) {
            snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 env SHIM_MAX_THREAD=%d %s LD_PRELOAD=%s ./dsgd-run "
                     "--set method=gossip_push %s %s",
                     MPI_THREAD_FUNNELED, lib, g_shim, check ? "--check" : "", g_cfg);
            const int st = run(cmd, out, sizeof out);
            ck_assert_msg(st == 2 && strstr(out, "key 'method'") && strstr(out, "needs MPI_THREAD_MULTIPLE") &&
                              strstr(out, "gave MPI_THREAD_FUNNELED") && strstr(out, c[i].fix) && !strstr(out, "synchronous = true"),
                          "%s: exit %d:\n%.3000s", cmd, st, out);
            ck_assert_msg(!exists(h5), "%s: a run file was written", cmd);
        }
    }
    /* the same method where MPI_THREAD_MULTIPLE is given runs */
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 ./dsgd-run --set method=gossip_push %s", g_cfg);
    ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s:\n%.3000s", cmd, out);
}
END_TEST

/* The "threads per rank" line of `mpiexec -n 2 LAUNCH ./dsgd-run --check` (rank 0's). */
static void threads_line(const char *launch, char *line, size_t n) {
    char cmd[2048], out[1 << 16];
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec %s ./dsgd-run --check %s", launch, g_cfg);
    ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s:\n%.3000s", cmd, out);
    const char *l = strstr(out, "threads per rank:");
    ck_assert_msg(l != NULL, "%s: no threads line:\n%.3000s", cmd, out);
    snprintf(line, n, "%.*s", (int)strcspn(l, "\n"), l);
}

/* L3: the mask is divided only among the node's ranks bound to the very same mask. */
START_TEST(test_thread_budget_masks) {
    char h5[400], line[512], want[256];
    snprintf(h5, sizeof h5, "%s/budget.h5", g_dir);
    write_cfg(g_cfg, NULL, h5);
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int first = -1, second = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            if (first < 0) first = c;
            else if (second < 0) second = c;
        }
    const int ncpu = CPU_COUNT(&set), half = ncpu / 2 > 1 ? ncpu / 2 : 1;
    /* unbound (Hydra's default): both ranks share the mask, half each */
    threads_line("-bind-to none -n 2", line, sizeof line);
    snprintf(want, sizeof want, "on %d core(s): cores ", half);
    ck_assert_msg(strstr(line, want) && strstr(line, "shared by 2 ranks of this node"), "unbound: %s", line);
    /* both bound to the same one CPU (taskset): shared, 1 core */
    char launch[256];
    snprintf(launch, sizeof launch, "-bind-to none -n 2 taskset -c %d", first);
    threads_line(launch, line, sizeof line);
    snprintf(want, sizeof want, "on 1 core(s): cores %d shared by 2 ranks", first);
    ck_assert_msg(strstr(line, want) != NULL, "taskset: %s", line);
    if (second < 0) {
        fprintf(stderr, "test_thread_budget_masks: one CPU: the bound cases SKIPPED\n");
        return;
    }
    /* bound by Hydra to a core each: own masks, not divided again */
    threads_line("-bind-to core -n 2", line, sizeof line);
    ck_assert_msg(strstr(line, "on 1 core(s): cores ") && strstr(line, "(own mask)"), "-bind-to core: %s", line);
    /* rank 0 bound to both CPUs, rank 1 to one: differing masks, rank 0 keeps its 2 */
    snprintf(launch, sizeof launch, "-bind-to none -n 2 sh -c 'if [ \"$PMI_RANK\" = 0 ]; then exec taskset -c %d,%d \"$0\" \"$@\"; "
             "else exec taskset -c %d \"$0\" \"$@\"; fi'", first, second, second);
    threads_line(launch, line, sizeof line);
    snprintf(want, sizeof want, "on 2 core(s): cores %d", first);
    ck_assert_msg(strstr(line, want) && strstr(line, "(own mask)"), "differing masks: %s", line);
}
END_TEST

/* L6 (and the arithmetic of L3): the budget of a rank by device. */
START_TEST(test_thread_budget_device) {
    experiment e;
    memset(&e, 0, sizeof e);
    e.method = METHOD_ALLREDUCE;
    e.data.format = FORMAT_JPEG;
    e.device = DEVICE_CPU;
    thread_budget b = setup_thread_budget(&e, 16, 4);
    ck_assert_int_eq(b.cores, 4);
    ck_assert_int_eq(b.data, 1);
    ck_assert_int_eq(b.compute, 3);
    ck_assert_int_eq(b.sharing, 4);
    b = setup_thread_budget(&e, 32, 1); /* bound to its own 32 cores: not divided */
    ck_assert_int_eq(b.cores, 32);
    ck_assert_int_eq(b.data, 8);
    ck_assert_int_eq(b.compute, 24);
    e.device = DEVICE_CUDA; /* a GPU rank: decoding gets the cores but one */
    b = setup_thread_budget(&e, 16, 4);
    ck_assert_int_eq(b.data, 3);
    ck_assert_int_eq(b.compute, 1);
    b = setup_thread_budget(&e, 64, 4);
    ck_assert_int_eq(b.data, 15);
    ck_assert_int_eq(b.compute, 1);
    b = setup_thread_budget(&e, 1, 1);
    ck_assert_int_eq(b.data, 1);
    ck_assert_int_eq(b.compute, 1);
    e.data.threads = 5; /* given: kept */
    b = setup_thread_budget(&e, 16, 1);
    ck_assert_int_eq(b.data, 5);
    ck_assert_int_eq(b.compute, 11);
    e.data.threads = 0;
    e.data.format = FORMAT_IDX; /* no decode threads */
    b = setup_thread_budget(&e, 16, 1);
    ck_assert_int_eq(b.data, 0);
    ck_assert_int_eq(b.compute, 16);
}
END_TEST

static void fake(const char *rel, const char *text) {
    char path[600], cmd[700];
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname %s)\"", path);
    ck_assert_int_eq(system(cmd), 0);
    write_file(path, text);
}

#define GiB 1073741824.0

/* P4: the job's limit through /proc/self/cgroup, v2 and v1, walking up to the root. */
START_TEST(test_cgroup_memory) {
    char proc[600], root[600], where[512];
    double avail = 0;
    /* v2: the limit on the job, the step below it unlimited */
    snprintf(proc, sizeof proc, "%s/v2/proc", g_dir);
    snprintf(root, sizeof root, "%s/v2/cg", g_dir);
    fake("v2/proc", "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n");
    fake("v2/cg/system.slice/slurmstepd.scope/job_7/memory.max", "4294967296\n");
    fake("v2/cg/system.slice/slurmstepd.scope/job_7/memory.current", "1073741824\n");
    fake("v2/cg/system.slice/slurmstepd.scope/job_7/step_0/memory.max", "max\n");
    fake("v2/cg/system.slice/slurmstepd.scope/job_7/step_0/memory.current", "1000\n");
    fake("v2/cg/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/memory.max", "max\n");
    ck_assert_int_eq(setup_cgroup_memory(proc, root, &avail, where, sizeof where), 1);
    ck_assert_close(avail, 3 * GiB, 0);
    ck_assert_msg(strstr(where, "/job_7/memory.max = 4.0 GiB, 1.0 GiB of it in use") != NULL, "%s", where);
    /* a smaller limit further down wins */
    fake("v2/cg/system.slice/slurmstepd.scope/job_7/step_0/memory.max", "2147483648\n");
    fake("v2/cg/system.slice/slurmstepd.scope/job_7/step_0/memory.current", "1610612736\n");
    ck_assert_int_eq(setup_cgroup_memory(proc, root, &avail, where, sizeof where), 1);
    ck_assert_close(avail, 0.5 * GiB, 0);
    ck_assert_msg(strstr(where, "/job_7/step_0/memory.max = 2.0 GiB") != NULL, "%s", where);
    /* v2 inside a cgroup namespace (a container): "0::/", the limit at the root */
    fake("v2ns/proc", "0::/\n");
    fake("v2ns/cg/memory.max", "8589934592\n");
    fake("v2ns/cg/memory.current", "0\n");
    snprintf(proc, sizeof proc, "%s/v2ns/proc", g_dir);
    snprintf(root, sizeof root, "%s/v2ns/cg", g_dir);
    ck_assert_int_eq(setup_cgroup_memory(proc, root, &avail, where, sizeof where), 1);
    ck_assert_close(avail, 8 * GiB, 0);
    /* v1 in a hybrid hierarchy (the memory controller on v1, "0::" for the rest) */
    fake("v1/proc", "12:pids:/slurm/uid_0/job_5/step_0\n4:memory:/slurm/uid_0/job_5/step_0/task_0\n1:name=systemd:/x\n0::/x\n");
    fake("v1/cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
    fake("v1/cg/memory/slurm/memory.limit_in_bytes", "9223372036854771712\n");
    fake("v1/cg/memory/slurm/uid_0/job_5/memory.limit_in_bytes", "8589934592\n");
    fake("v1/cg/memory/slurm/uid_0/job_5/memory.usage_in_bytes", "2147483648\n");
    fake("v1/cg/memory/slurm/uid_0/job_5/step_0/memory.limit_in_bytes", "9223372036854771712\n");
    fake("v1/cg/memory/slurm/uid_0/job_5/step_0/task_0/memory.limit_in_bytes", "9223372036854771712\n");
    snprintf(proc, sizeof proc, "%s/v1/proc", g_dir);
    snprintf(root, sizeof root, "%s/v1/cg", g_dir);
    ck_assert_int_eq(setup_cgroup_memory(proc, root, &avail, where, sizeof where), 1);
    ck_assert_close(avail, 6 * GiB, 0);
    ck_assert_msg(strstr(where, "memory/slurm/uid_0/job_5/memory.limit_in_bytes = 8.0 GiB, 2.0 GiB of it in use") != NULL, "%s", where);
    /* v1 with the memory controller mounted together with others ("3:cpu,memory:/p") */
    fake("v1b/proc", "3:cpu,memory:/pbs_jobs.service/jobid/400.srv\n");
    fake("v1b/cg/memory/pbs_jobs.service/jobid/400.srv/memory.limit_in_bytes", "1073741824\n");
    fake("v1b/cg/memory/pbs_jobs.service/jobid/400.srv/memory.usage_in_bytes", "0\n");
    snprintf(proc, sizeof proc, "%s/v1b/proc", g_dir);
    snprintf(root, sizeof root, "%s/v1b/cg", g_dir);
    ck_assert_int_eq(setup_cgroup_memory(proc, root, &avail, where, sizeof where), 1);
    ck_assert_close(avail, 1 * GiB, 0);
    /* no limit anywhere, and no file: 0 */
    fake("none/proc", "4:memory:/a/b\n");
    fake("none/cg/memory/a/b/memory.limit_in_bytes", "9223372036854771712\n");
    snprintf(proc, sizeof proc, "%s/none/proc", g_dir);
    snprintf(root, sizeof root, "%s/none/cg", g_dir);
    ck_assert_int_eq(setup_cgroup_memory(proc, root, &avail, where, sizeof where), 0);
    ck_assert_int_eq(setup_cgroup_memory("/nonexistent/cgroup", root, &avail, where, sizeof where), 0);
    /* this machine's own cgroup, for the log (no assertion: a test machine may have no limit) */
    if (setup_cgroup_memory("/proc/self/cgroup", "/sys/fs/cgroup", &avail, where, sizeof where))
        fprintf(stderr, "this machine: %s (%.1f GiB left)\n", where, avail / GiB);
    else fprintf(stderr, "this machine: no memory limit in its cgroup (MemAvailable decides)\n");
}
END_TEST

/* P4 end to end: a job cgroup too small for b is refused on every rank naming the cgroup. */
START_TEST(test_cgroup_refusal) {
    char cmd[2048], out[1 << 16], h5[400];
    snprintf(h5, sizeof h5, "%s/cgroup.h5", g_dir);
    write_cfg(g_cfg, NULL, h5);
    fake("small/proc", "0::/job_9\n");
    fake("small/cg/job_9/memory.max", "1024\n"); /* 1 KiB: less than a step of the linear model at b = 8 (1.4 KiB) */
    fake("small/cg/job_9/memory.current", "0\n");
    snprintf(cmd, sizeof cmd, "timeout -k 5 " MPI_TIMEOUT " mpiexec -n 2 env DSGD_PROC_CGROUP=%s/small/proc DSGD_CGROUP_ROOT=%s/small/cg "
             "./dsgd-run %s", g_dir, g_dir, g_cfg);
    int st = run(cmd, out, sizeof out);
    ck_assert_msg(st == 2 && strstr(out, "key 'b'") && strstr(out, "small/cg/job_9/memory.max = 0.0 GiB"), "exit %d:\n%.3000s", st, out);
    ck_assert_msg(!exists(h5), "a run file was written");
    /* a larger limit: the same run goes */
    fake("small/cg/job_9/memory.max", "1073741824\n");
    st = run(cmd, out, sizeof out);
    ck_assert_msg(st == 0, "exit %d:\n%.3000s", st, out);
}
END_TEST

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dsgd-test-runtime-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    char src[400], cmd[1200];
    snprintf(src, sizeof src, "%s/shim.c", g_dir);
    snprintf(g_shim, sizeof g_shim, "%s/shim.so", g_dir);
    snprintf(g_cfg, sizeof g_cfg, "%s/rt.cfg", g_dir);
    FILE *f = fopen(src, "w");
    if (!f) return 1;
    fputs(SHIM_SRC, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -o %s %s -ldl", g_shim, src);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot build the MPI shim: %s\n", cmd);
        return 1;
    }
    Suite *s = suite_create("runtime");
    TCase *tc = tcase_create("runtime");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_answers_without_mpi_init);
    tcase_add_test(tc, test_thread_level_asked);
    tcase_add_test(tc, test_thread_multiple_missing);
    tcase_add_test(tc, test_thread_budget_masks);
    tcase_add_test(tc, test_thread_budget_device);
    tcase_add_test(tc, test_cgroup_memory);
    tcase_add_test(tc, test_cgroup_refusal);
    suite_add_tcase(s, tc);
    int st = run_suite(s);
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (st == 0 && system(cmd) != 0) return 1;
    return st;
}
