/* device.cu — cuda/gpu.h's devices: whether the backend is built, the library versions, the
 * choice of this rank's GPU (the launcher's local rank before MPI_Init, checked against the
 * node-local MPI rank) and page-locked host memory. */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libconfig.h>

#include "common.h"
#include "layers.h"

/* ---- devices, versions, host memory ------------------------------------------------------- */

int gpu_built(void) { return 1; }

void gpu_version(char *buf, size_t n) {
    int rt = 0, drv = 0, bmaj = 0, bmin = 0, bpat = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv); /* 0 when no driver is installed */
    cudaGetLastError();
    const size_t dnn = cudnnGetVersion(); /* major*10000 + minor*100 + patch since cuDNN 9 */
    cublasGetProperty(MAJOR_VERSION, &bmaj);
    cublasGetProperty(MINOR_VERSION, &bmin);
    cublasGetProperty(PATCH_LEVEL, &bpat);
    char d[32];
    if (drv > 0) snprintf(d, sizeof d, "%d.%d", drv / 1000, (drv % 1000) / 10);
    else snprintf(d, sizeof d, "none");
    /* The step's switches as the environment sets them (docs/gpu.md, "Switches"), so that the run
     * file's libraries attribute and bench_gpu's header say which ran; a bad value is refused by
     * gpu_model_create. */
    const char *sy = getenv("DSGD_GPU_SYNC"), *ca = getenv("DSGD_GPU_CASTS"), *sg = getenv("DSGD_GPU_STAGE");
    const char *ly = getenv("DSGD_GPU_LAYOUT"), *br = getenv("DSGD_GPU_BNRELU"), *gr = getenv("DSGD_GPU_GRAPH");
    const char *al = getenv(GPU_ALGO_ENV), *de = getenv(GPU_DET_ENV);
    const int heur = al && strcmp(al, "heuristic") == 0;
    const int det = de && *de ? strcmp(de, "0") != 0 : heur;
    snprintf(buf, n,
             "CUDA runtime %d.%d, driver %s, cuDNN %zu.%zu.%zu, cuBLAS %d.%d.%d; step: sync=%s casts=%s stage=%s layout=%s bnrelu=%s graph=%s cudnn=%s,%s",
             rt / 1000, (rt % 1000) / 10, d, dnn / 10000, (dnn % 10000) / 100, dnn % 100, bmaj, bmin, bpat,
             sy && *sy ? sy : "update", ca && *ca ? ca : "each", sg && *sg ? sg : "own", ly && *ly ? ly : "nchw", br && *br ? br : "kernel",
             gr && *gr ? gr : "0", heur ? "heuristic" : "find",
             det ? "deterministic" : "nondeterministic");
}

/* The launchers' node-local rank variables, those of MPI launchers before Slurm's: under mpiexec
 * inside a Slurm job every rank inherits the batch step's SLURM_LOCALID (0), and the MPI
 * launcher's own variable is the right one. */
static const char *const local_rank_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK", /* Open MPI (mpirun, and srun with PMIx) */
    "MPI_LOCALRANKID",            /* MPICH / Intel MPI (Hydra) */
    "PMI_LOCAL_RANK",             /* PMI (MPICH's PMI, Cray PALS) */
    "MV2_COMM_WORLD_LOCAL_RANK",  /* MVAPICH2 */
    "SLURM_LOCALID",              /* srun */
};

/* What gpu_select_early chose (dev -1: nothing). */
static struct {
    int dev, local_rank, count;
    const char *var;
} early = {-1, -1, 0, NULL};

int gpu_launcher_local_rank(const char **var) {
    for (size_t i = 0; i < sizeof local_rank_vars / sizeof local_rank_vars[0]; i++) {
        const char *v = getenv(local_rank_vars[i]);
        char *end;
        if (!v || !*v) continue;
        const long r = strtol(v, &end, 10);
        if (*end || r < 0 || r > 1 << 20) continue;
        if (var) *var = local_rank_vars[i];
        return (int)r;
    }
    return -1;
}

/* v without the quotes of a --set string value ("cuda" or cuda) is "cuda". */
static int is_cuda(const char *v) {
    const size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') return n == 6 && strncmp(v + 1, "cuda", 4) == 0;
    return strcmp(v, "cuda") == 0;
}

int gpu_early_wanted(int argc, char *const *argv) {
    int device = -1; /* from --set: 1 cuda, 0 anything else; -1 not set */
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--help") || !strcmp(s, "-h") || !strcmp(s, "--version") || !strcmp(s, "--status") ||
            !strcmp(s, "--print-config") || !strcmp(s, "--check") || !strcmp(s, "--pack"))
            return 0; /* no training: nothing on a GPU before MPI_Init */
        if (!strcmp(s, "--set") || !strncmp(s, "--set=", 6)) {
            const char *kv = s[5] == '=' ? s + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (kv && !strncmp(kv, "device=", 7)) device = is_cuda(kv + 7);
        } else if (s[0] != '-') path = s;
    }
    if (device >= 0) return device;
    if (!path) return 0;
    /* The experiment file's top-level device (absent: "cpu", config_keys.c). A file that cannot be
     * read or parsed: 0 (the run stops with that error after MPI_Init anyway). */
    config_t cfg;
    config_init(&cfg);
    int want = 0;
    const char *v = NULL;
    if (config_read_file(&cfg, path) && config_lookup_string(&cfg, "device", &v)) want = strcmp(v, "cuda") == 0;
    config_destroy(&cfg);
    return want;
}

int gpu_select_early(void) {
    /* This process's command line, as the kernel keeps it (main's argv is not passed here). */
    char buf[16384];
    char *argv[256];
    int argc = 0;
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return -1; /* not Linux: no early choice; gpu_select chooses after MPI_Init */
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (size_t i = 0; i < n && argc < 255; i += strlen(buf + i) + 1) argv[argc++] = buf + i;
    argv[argc] = NULL;
    return gpu_select_early_argv(argc, argv);
}

int gpu_select_early_argv(int argc, char *const *argv) {
    early.dev = -1, early.local_rank = -1, early.count = 0, early.var = NULL;
    const char *off = getenv("DSGD_GPU_EARLY");
    if (off && strcmp(off, "0") == 0) return -1;
    if (!gpu_early_wanted(argc, argv)) return -1; /* a device = "cpu" rank makes no CUDA context */
    const char *var = NULL;
    const int lr = gpu_launcher_local_rank(&var);
    if (lr < 0) return -1;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) { /* no GPU: gpu_select says so if asked */
        cudaGetLastError();
        return -1;
    }
    const int dev = lr % count;
    if (cudaSetDevice(dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    early.dev = dev, early.local_rank = lr, early.count = count, early.var = var;
    return dev;
}

int gpu_select(int local_rank, int local_size, char *desc, size_t desclen, char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        cudaGetLastError();
        seterr(err, errlen, "no CUDA GPU visible: cudaGetDeviceCount: %s",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices (CUDA_VISIBLE_DEVICES?)");
        return EXIT_RUNTIME;
    }
    const int split_dev = (local_rank < 0 ? 0 : local_rank) % count;
    /* The launcher's choice, made before MPI_Init, stands (a CUDA-aware MPI made its context
     * there); the node-local split checks it. */
    const int dev = early.dev >= 0 && early.dev < count ? early.dev : split_dev;
    char note[200] = "";
    if (early.dev >= 0 && early.dev != split_dev)
        snprintf(note, sizeof note, "; the launcher's %s=%d chose it, the node-local MPI rank %d would choose GPU %d", early.var,
                 early.local_rank, local_rank, split_dev);
    else if (early.dev >= 0)
        snprintf(note, sizeof note, " (%s=%d, as the node-local MPI rank)", early.var, early.local_rank);
    e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaFree(NULL); /* create the context now: driver problems show here */
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "GPU %d of %d: cudaSetDevice: %s", dev, count, cudaGetErrorString(e));
        return EXIT_RUNTIME;
    }
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        seterr(err, errlen, "GPU %d of %d: cudaGetDeviceProperties: %s", dev, count, cudaGetErrorString(e));
        return EXIT_RUNTIME;
    }
    int len = snprintf(desc, desclen, "GPU %d of %d: %s (sm_%d%d, %.1f GiB)", dev, count, p.name, p.major, p.minor,
                       (double)p.totalGlobalMem / (1 << 30));
    int sharing = 0; /* ranks of this node on this device: local ranks r with r mod count = dev */
    for (int r = 0; r < local_size; r++) sharing += r % count == dev;
    if (sharing > 1 && len >= 0 && (size_t)len < desclen)
        len += snprintf(desc + len, desclen - (size_t)len, ", shared by %d ranks", sharing);
    if (note[0] && len >= 0 && (size_t)len < desclen) snprintf(desc + len, desclen - (size_t)len, "%s", note);
    if (early.dev >= 0 && early.dev != split_dev)
        fprintf(stderr,
                "dsgd-run: warning: GPU choice: the launcher's %s=%d picked GPU %d of %d before MPI_Init, but this rank is "
                "node-local MPI rank %d of %d (GPU %d): kept GPU %d; two ranks may share a GPU (DSGD_GPU_EARLY=0 uses the "
                "MPI ranks)\n",
                early.var, early.local_rank, early.dev, count, local_rank, local_size, split_dev, dev);
    return 0;
}

void *gpu_host_alloc(size_t nbytes) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, nbytes ? nbytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) DIE("cudaHostAlloc of %zu bytes of page-locked host memory: %s", nbytes, cudaGetErrorString(e));
    memset(p, 0, nbytes);
    return p;
}

void gpu_host_free(void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p), "gpu_host_free");
}
