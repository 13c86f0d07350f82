/* reduce.c — the all-reduce object of reduce.h: its paths, chosen once. */
#include "comm/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "gpucomm.h"
#include "util/util.h"

/* After each part of nccl_setup: whether any worker's part failed (collective over the world,
 * which for comm = "nccl" is the workers: allreduce has no servers), so that every worker stops
 * at the same part and none waits in the next one. */
static int failed_anywhere(int st) { return comm_max_int(st) != 0; }

#define NCCL_OVERLAP_ENV "DSGD_NCCL_OVERLAP"

/* comm = "nccl": check that no two workers share a GPU (NCCL refuses it: cuda/gpucomm.h), load
 * NCCL, broadcast worker 0's NCCL id over MPI and build the communicator on the model's GPU into
 * *c. Returns this rank's status (0, or EXIT_BADINPUT / EXIT_RUNTIME with msg filled); when any
 * worker failed, every worker returns at that part with *c NULL. */
static int nccl_setup(const experiment *e, model *net, int worker, gpucomm **c, char *msg, size_t n) {
    *c = NULL;
    /* "host GPU-bus-id" of every worker: two equal ones share a GPU. First, as it does not
     * depend on NCCL being installed. */
    enum { ID = 320 };
    char mine[ID] = "", *all = xcalloc((size_t)e->p, ID), bus[64] = "";
    int st = gpucomm_gpu_id(model_gpu(net), bus, sizeof bus, msg, n);
    snprintf(mine, sizeof mine, "%.250s %.60s", comm_host(), bus);
    comm_workers_allgather(mine, ID, all);
    for (int i = 0; !st && i < e->p; i++)
        for (int j = i + 1; !st && j < e->p; j++) {
            const char *a = all + (size_t)i * ID, *sp = strchr(a, ' ');
            if (strcmp(a, all + (size_t)j * ID) == 0 && sp)
                st = seterr(msg, n,
                            "comm = \"nccl\" needs one GPU per worker, but workers %d and %d share GPU %s on %.*s (NCCL refuses "
                            "two ranks on one GPU: \"Duplicate GPU detected\"); give each worker its own GPU, or use comm = "
                            "\"mpi\", which lets workers share GPUs", i, j, sp + 1, (int)(sp - a), a);
        }
    free(all);
    if (failed_anywhere(st) || failed_anywhere(st = gpucomm_load(msg, n))) return st;
    char id[GPUCOMM_ID_BYTES] = {0};
    if (failed_anywhere(st = worker == 0 ? gpucomm_unique_id(id, msg, n) : 0)) return st;
    comm_workers_bcast(id, sizeof id, 0);
    *c = gpucomm_create(model_gpu(net), e->p, worker, id, e->comm_timeout_s, msg, n);
    return *c ? 0 : EXIT_RUNTIME;
}

void reducer_with(reducer *r, reduce_path path, model *net, int p, int rank, struct gpucomm *nccl) {
    *r = (reducer){.path = path, .net = net, .p = p, .rank = rank, .nccl = nccl};
    /* DSGD_OVERLAP=0 in the environment: no overlap of copies and communication with computation
     * (to compare, or to rule it out). */
    const char *v = getenv("DSGD_OVERLAP");
    r->stage = path != REDUCE_HOST && !(v && strcmp(v, "0") == 0);
    const int nc = comm_mean_chunks(model_n_params(net));
    r->overlap = path == REDUCE_STAGED && r->stage && p > 1 && nc > 0 && nc <= COMM_MAX_CHUNKS;
    /* DSGD_NCCL_OVERLAP=0: NCCL's all-reduce of the gradient once the backward pass is over, on the
     * model's stream (to compare; docs/gpu.md, "Switches"). */
    const char *nv = getenv(NCCL_OVERLAP_ENV);
    r->nccl_overlap = path == REDUCE_NCCL && r->stage && !(nv && strcmp(nv, "0") == 0);
}

int reducer_init(reducer *r, const experiment *e, model *net, int worker, int rank, char *msg, size_t n) {
    if (n) msg[0] = '\0';
    const char *nv = getenv(NCCL_OVERLAP_ENV);
    if (nv && *nv && strcmp(nv, "0") != 0 && strcmp(nv, "1") != 0) {
        reducer_with(r, REDUCE_HOST, net, e->p, rank, NULL);
        return seterr(msg, n, "%s=%s in the environment: expected 1 (the default: the all-reduce of comm = \"nccl\" per "
                              "gradient group during the backward pass) or 0 (after it)", NCCL_OVERLAP_ENV, nv);
    }
    if (model_get_device(net) == MODEL_CPU) reducer_with(r, REDUCE_HOST, net, e->p, rank, NULL);
    else if (e->comm == COMM_NCCL) {
        gpucomm *c;
        const int st = nccl_setup(e, net, worker, &c, msg, n);
        reducer_with(r, REDUCE_NCCL, net, e->p, rank, c);
        return st;
    } else reducer_with(r, comm_gpu_aware() ? REDUCE_DEVICE : REDUCE_STAGED, net, e->p, rank, NULL);
    return 0;
}

void reducer_describe(const reducer *r, char *buf, size_t n) {
    if (r->path == REDUCE_NCCL) {
        char v[ERRLEN + 64];
        gpucomm_version(v, sizeof v); /* "NCCL 2.28.9 (path; ...)" */
        int len = (int)strcspn(v, "(");
        while (len > 0 && v[len - 1] == ' ') len--;
        snprintf(buf, n, "; all-reduce: %.*s on the GPUs%s", len < 40 ? len : 40, v,
                 r->nccl_overlap ? " per gradient group during the backward pass" : "");
    } else if (r->path != REDUCE_HOST)
        snprintf(buf, n, "; all-reduce: MPI %s", r->path == REDUCE_DEVICE ? "on device memory (CUDA-aware)" : "through host memory");
    else if (n) buf[0] = '\0';
}

/* An NCCL failure of the gradient's all-reduce: the message, then every rank stops. */
static void nccl_failed(const reducer *r, int st, const char *err) {
    fprintf(stderr, "dsgd-run: rank %d on %s: %s\n", r->rank, comm_host(), err);
    if (st == GPUCOMM_TIMEOUT) comm_timeout_abort("the other workers (NCCL all-reduce)");
    comm_abort(EXIT_RUNTIME);
}

void reducer_mean(reducer *r, int which, double *wait_s) {
    model *net = r->net;
    const size_t n = which == MODEL_BN ? model_n_bn(net) : model_n_params(net);
    float *dev = model_device_vector(net, which); /* dies on a `which` other than one vector */
    switch (r->path) {
    case REDUCE_HOST: /* the device vector is the host vector */
        comm_allreduce_mean_f32(dev, n, wait_s);
        return;
    case REDUCE_NCCL: {
        if (wait_s) comm_workers_wait(wait_s);
        char err[ERRLEN];
        const int st = gpucomm_allreduce_mean(r->nccl, dev, n, err, sizeof err);
        if (st != GPUCOMM_OK) nccl_failed(r, st, err);
        return;
    }
    case REDUCE_DEVICE: /* MPI on device memory; the mean's division on the device */
        if (r->p == 1) return;
        if (wait_s) comm_workers_wait(wait_s);
        comm_workers_sum_f32(dev, n);
        gpucomm_scale(model_gpu(net), dev, n, 1.0f / (float)r->p);
        return;
    case REDUCE_STAGED: { /* through the page-locked host mirror */
        if (r->p == 1) return;
        float *host = which == MODEL_PARAMS ? model_params(net) : which == MODEL_GRADS ? model_grads(net) : model_bn(net);
        model_download(net, which);
        comm_allreduce_mean_f32(host, n, wait_s);
        model_upload(net, which);
        return;
    }
    }
}

void reducer_grads_begin(reducer *r) {
    if (r->path != REDUCE_NCCL || !r->nccl_overlap) DIE("reducer_grads_begin: not REDUCE_NCCL with the overlap");
    char err[ERRLEN];
    const int st = gpucomm_grads_begin(r->nccl, model_device_vector(r->net, MODEL_GRADS), err, sizeof err);
    if (st != GPUCOMM_OK) nccl_failed(r, st, err);
}

void reducer_grads_end(reducer *r, double *wait_s, double *t_computed) {
    if (wait_s) comm_workers_wait(wait_s);
    char err[ERRLEN];
    const int st = gpucomm_grads_end(r->nccl, model_n_params(r->net), t_computed, err, sizeof err);
    if (st != GPUCOMM_OK) nccl_failed(r, st, err);
}

void reducer_free(reducer *r) {
    gpucomm_free(r->nccl);
    r->nccl = NULL;
}
