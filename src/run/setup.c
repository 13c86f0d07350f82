/* setup.c — the phases of a run between the experiment and the training loop, and after it
 * (setup.h): data, model and method, close; the agreement every phase ends with. The resume
 * (phase 3) is resume.c, the run file (phase 5) runfile.c. */
#define _GNU_SOURCE
#include "run/setup.h"

#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "data/loader.h"
#include "gpu.h"
#include "methods/method.h"
#include "nn/model.h"
#include "train/checkpoint.h"
#include "util/util.h"

void setup_agree(int status, const char *err) {
    int worst = comm_max_int(status);
    if (worst == 0) return;
    int r0_status = status;
    comm_bcast(&r0_status, sizeof r0_status, 0);
    if (comm_rank() == 0 && status) fprintf(stderr, "dsgd-run: %s\n", err);
    else if (status && !r0_status) fprintf(stderr, "dsgd-run: rank %d: %s\n", comm_rank(), err);
    comm_finalize();
    exit(worst);
}

void setup_agree_key(int status, const char *key, const char *msg) {
    char err[ERRLEN] = "";
    if (status) snprintf(err, sizeof err, "%s: key '%s': %.900s", config_where(key), key, msg);
    setup_agree(status, err);
}

void setup_blame(const experiment *e, const char *keys, char *err, size_t errlen) {
    char first[64] = "", msg[ERRLEN];
    const char *q = strchr(keys, '\'');
    if (q) sscanf(q + 1, "%63[^']", first);
    /* a data path the message names: where that key was set */
    const struct { const char *key, *value; } paths[] = {
        {"data.train_images", e->data.train_images}, {"data.train_labels", e->data.train_labels},
        {"data.val_images", e->data.val_images},     {"data.val_labels", e->data.val_labels},
        {"data.dir", e->data.dir},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (paths[i].value[0] && strstr(keys, paths[i].key) && strstr(err, paths[i].value)) {
            snprintf(first, sizeof first, "%s", paths[i].key);
            break;
        }
    snprintf(msg, sizeof msg, "%s", err);
    seterr(err, errlen, "%s: %s: %s", first[0] && config_where(first)[0] ? config_where(first) : e->source, keys, msg);
}

/* ---- data ------------------------------------------------------------------------------- */

thread_budget setup_thread_budget(const experiment *e, int cpus, int sharing) {
    thread_budget b = {.cores = cpus / (sharing > 0 ? sharing : 1), .sharing = sharing > 0 ? sharing : 1};
    if (b.cores < 1) b.cores = 1;
    /* A GPU rank computes on the GPU: the cores oneDNN would take go to decoding (L6). */
    const int data_auto = e->device == DEVICE_CUDA ? b.cores - 1 : b.cores / 4;
    if (e->data.format == FORMAT_JPEG) b.data = e->data.threads > 0 ? e->data.threads : (data_auto > 1 ? data_auto : 1);
    b.compute = e->threads > 0 ? e->threads : (b.cores - b.data > 1 ? b.cores - b.data : 1);
    const method_ops *M = method_find(e->method);
    b.comm = M && M->comm_thread;
    return b;
}

/* The CPUs of set as a list ("0-3,8-11") into buf. */
static void cpu_list(const cpu_set_t *set, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && len + 1 < n; c++) {
        if (!CPU_ISSET(c, set)) continue;
        int last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set)) last++;
        int k = last == c ? snprintf(buf + len, n - len, "%s%d", len ? "," : "", c)
                          : snprintf(buf + len, n - len, "%s%d-%d", len ? "," : "", c, last);
        if (k < 0 || (size_t)k >= n - len) { /* too long: end with an ellipsis */
            if (n > 4) snprintf(buf + (len < n - 4 ? len : n - 4), 4, "...");
            return;
        }
        len += (size_t)k;
        c = last;
    }
}

/* The thread budget of this rank from its affinity mask (L3): the node's ranks all-gather their
 * masks (collective over the node); the mask's CPUs are divided among the ranks of this node
 * bound to the very same mask (all of them when unbound, as under Hydra's default; 1 when each
 * is bound to its own cores, as under srun --cpus-per-task or Open MPI's default binding; the
 * ranks of one socket under --bind-to socket). ranks_on_node other than comm_local_size()
 * (--check without mpiexec: the experiment's world): that many ranks taken to share this mask. */
static thread_budget choose_threads(const experiment *e, int ranks_on_node) {
    cpu_set_t own;
    CPU_ZERO(&own);
    if (sched_getaffinity(0, sizeof own, &own) != 0) CPU_SET(0, &own);
    int sharing = ranks_on_node;
    if (ranks_on_node == comm_local_size()) {
        const int n = comm_local_size();
        cpu_set_t *all = xmalloc((size_t)n * sizeof *all);
        comm_node_allgather(&own, sizeof own, all);
        sharing = 0;
        for (int i = 0; i < n; i++) sharing += CPU_EQUAL(&all[i], &own);
        free(all);
    }
    thread_budget b = setup_thread_budget(e, CPU_COUNT(&own), sharing);
    cpu_list(&own, b.cpus, sizeof b.cpus);
    return b;
}

void setup_print_threads(const thread_budget *b, FILE *f) {
    const int total = b->compute + b->data + b->comm;
    char how[256];
    if (b->sharing > 1)
        snprintf(how, sizeof how, "cores %s shared by %d ranks of this node (one mask: a 1/%d share each, not pinned)", b->cpus,
                 b->sharing, b->sharing);
    else snprintf(how, sizeof how, "cores %s (own mask)", b->cpus);
    fprintf(f, "threads per rank: %d compute (oneDNN, key 'threads') + %d decode (data.threads) + %d communication = %d on %d core(s): %s\n",
            b->compute, b->data, b->comm, total, b->cores, how);
    if (total > b->cores)
        fprintf(f, "warning: %d threads per rank on %d core(s): oversubscribed, steps will be slower than they need be; lower "
                   "threads or data.threads, or run fewer ranks per node (docs/data.md, \"Loading\")\n", total, b->cores);
}

/* No rank evaluates more than ceil(n_val / p) images (a server evaluating the center: all of
 * them), so a larger eval.batch would only allocate memory that is never used. */
static int eval_batch_of(const run_setup *r) {
    const experiment *e = &r->e;
    const int max_slice = method_has_servers(e->method) ? r->val.n : (r->val.n + e->p - 1) / e->p;
    return e->eval.batch < max_slice ? e->eval.batch : max_slice;
}

/* The one translation from the experiment's words (config.h) to the model's (model.h). */
static model_spec spec_of(const run_setup *r) {
    const experiment *e = &r->e;
    return (model_spec){
        .arch = e->model.arch == ARCH_LINEAR ? MODEL_LINEAR : MODEL_RESNET18,
        .width = e->model.width,
        .stem = e->model.stem == STEM_IMAGENET ? MODEL_STEM_IMAGENET : MODEL_STEM_CIFAR,
        .in_c = r->train.c, .in_h = r->train.h, .in_w = r->train.w, .n_classes = r->train.n_classes,
        .batch = e->b, .eval_batch = eval_batch_of(r), .threads = r->budget.compute,
        .device = e->device == DEVICE_CUDA ? MODEL_CUDA : MODEL_CPU,
        .precision = e->precision == PRECISION_TF32 ? MODEL_TF32 : e->precision == PRECISION_BF16 ? MODEL_BF16 : MODEL_FP32,
    };
}

/* The first number in file path into *v (0 if it could be read; "max" reads as no limit: -1). */
static int read_number(const char *path, double *v) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char w[64] = "";
    const int ok = fscanf(f, "%63s", w) == 1;
    fclose(f);
    if (!ok) return -1;
    if (!strcmp(w, "max")) return *v = -1.0, 0;
    char *end;
    *v = strtod(w, &end);
    return *end ? -1 : 0;
}

int setup_cgroup_memory(const char *proc_cgroup, const char *root, double *avail, char *where, size_t n) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return 0;
    char line[4096], v1[4096] = "", v2[4096] = "";
    int has_v1 = 0, has_v2 = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = '\0', *c2 = '\0'; /* "hierarchy-ID:controllers:path" */
        const char *ctl = c1 + 1, *path = c2 + 1;
        if (!strcmp(line, "0") && !*ctl) has_v2 = 1, snprintf(v2, sizeof v2, "%s", path);
        for (const char *t = ctl; *t;) { /* v1: "4:memory:/path" (or "memory" among others: "3:cpu,memory:/p") */
            const size_t k = strcspn(t, ",");
            if (k == 6 && !strncmp(t, "memory", 6)) has_v1 = 1, snprintf(v1, sizeof v1, "%s", path);
            t += k + (t[k] == ',');
        }
    }
    fclose(f);
    if (!has_v1 && !has_v2) return 0;
    /* v1 owns the memory controller when it has it (a hybrid hierarchy's v2 part has none). */
    const char *sub = has_v1 ? "/memory" : "", *limit_file = has_v1 ? "memory.limit_in_bytes" : "memory.max",
               *used_file = has_v1 ? "memory.usage_in_bytes" : "memory.current";
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s", has_v1 ? v1 : v2);
    int found = 0;
    for (;;) { /* from the process's cgroup up to the root: the least left under any limit */
        char dir[8192], file[8300];
        snprintf(dir, sizeof dir, "%s%s%s", root, sub, strcmp(path, "/") ? path : "");
        double lim = -1.0, used = 0.0;
        snprintf(file, sizeof file, "%s/%s", dir, limit_file);
        /* v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages, ~2^63) */
        if (read_number(file, &lim) == 0 && lim > 0 && lim < 0x1p60) {
            snprintf(file, sizeof file, "%s/%s", dir, used_file);
            if (read_number(file, &used) != 0) used = 0.0;
            const double left = lim > used ? lim - used : 0.0;
            if (!found || left < *avail) {
                *avail = left, found = 1;
                snprintf(where, n, "cgroup %s/%s = %.1f GiB, %.1f GiB of it in use", dir, limit_file, lim / 1073741824.0,
                         used / 1073741824.0);
            }
        }
        if (!strcmp(path, "/") || !path[0]) break;
        char *slash = strrchr(path, '/');
        if (slash == path) path[1] = '\0';
        else *slash = '\0';
    }
    return found;
}

/* Bytes this node can still give this job: the smaller of /proc/meminfo's MemAvailable and what
 * the job's memory cgroup leaves (setup_cgroup_memory: /proc/self/cgroup under /sys/fs/cgroup,
 * or DSGD_PROC_CGROUP under DSGD_CGROUP_ROOT: tests); where the number comes from into where; 0
 * if neither can be read. */
static double node_available_bytes(char *where, size_t n) {
    double avail = 0.0, cg = 0.0;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &avail) == 1) avail *= 1024.0;
    if (f) fclose(f);
    snprintf(where, n, "MemAvailable of /proc/meminfo = %.1f GiB", avail / 1073741824.0);
    const char *proc = getenv("DSGD_PROC_CGROUP"), *root = getenv("DSGD_CGROUP_ROOT");
    char cgw[512];
    if (setup_cgroup_memory(proc && *proc ? proc : "/proc/self/cgroup", root && *root ? root : "/sys/fs/cgroup", &cg, cgw, sizeof cgw) &&
        (avail == 0.0 || cg < avail)) {
        avail = cg;
        snprintf(where, n, "%s", cgw);
    }
    return avail;
}

int setup_check_memory(const run_setup *r, int ranks_here, char *line, size_t n) {
    const experiment *e = &r->e;
    const model_spec s = spec_of(r);
    const double per_sample = 4.0 * (double)model_spec_activation_floats(&s);
    char where[700];
    const double need = (2.5 * e->b + s.eval_batch) * per_sample,
                 avail = node_available_bytes(where, sizeof where) / (ranks_here > 0 ? ranks_here : 1);
    if (n) line[0] = '\0';
    if (e->device == DEVICE_CUDA || avail <= 0.0) return 0; /* the GPU's memory is the device's to refuse (cudaMalloc) */
    snprintf(line, n, "a training step at b = %d needs at least %.1f GiB per rank (2.5·b + eval batch %d samples × %.2f MiB of "
             "activations), and this node has %.1f GiB available per rank (%d rank(s) here; the limit: %s)", e->b, need / 1073741824.0,
             s.eval_batch, per_sample / 1048576.0, avail / 1073741824.0, ranks_here, where);
    return need > avail ? EXIT_BADINPUT : 0;
}

/* setup_check_memory with this node's ranks, before the loader's buffers are allocated (none under
 * --check without mpiexec). Returns 0, or EXIT_BADINPUT with err filled (key 'b'). */
static int memory_fits(const run_setup *r, char *err, size_t errlen) {
    char mem[512];
    if (r->world_unchecked || !setup_check_memory(r, comm_local_size(), mem, sizeof mem)) return 0;
    return seterr(err, errlen, "%s: key 'b': %s; lower b (or run fewer ranks per node)", config_where("b"), mem);
}

/* The pack's train and val sets: rank 0 opens the index and every shard (each checked, its
 * per-sample arrays read) and broadcasts them with its verdict; the other ranks open no file
 * here, only the shard files they read, at their first read (shards_unpack). At p = 128 and
 * ImageNet's 134 shards: 136 H5Fopen on rank 0 instead of ~17,400 over the ranks (docs/data.md,
 * "Loading", "Start-up"). The wait for rank 0 is bounded by
 * comm_timeout_s. Returns 0 or rank 0's error (err filled on every rank, key 'data.dir'). */
static int data_open_pack(run_setup *r, char *err, size_t errlen) {
    const experiment *e = &r->e;
    const int alone = r->world_unchecked || comm_size() == 1, root = r->t.rank == 0;
    int st = 0;
    if (alone || root) {
        st = shards_open(&r->pack_train, e->data.dir, "train", err, errlen);
        if (!st) st = shards_open(&r->pack_val, e->data.dir, "val", err, errlen);
        if (!st) st = shards_same_classes(r->pack_train, r->pack_val, err, errlen);
        if (st) setup_blame(e, "key 'data.dir'", err, errlen);
    }
    if (alone) return st;
    struct { int st; char err[ERRLEN]; uint64_t len[2]; } h = {.st = st};
    void *buf[2] = {NULL, NULL};
    shards **set[2] = {&r->pack_train, &r->pack_val};
    if (root) {
        snprintf(h.err, sizeof h.err, "%s", err);
        for (int i = 0; i < 2 && !st; i++) {
            size_t len = 0;
            buf[i] = shards_pack(*set[i], &len);
            h.len[i] = len;
        }
    }
    comm_bcast_bounded(&h, sizeof h, 0, "rank 0 (reading the pack in data.dir)");
    if (h.st) {
        snprintf(err, errlen, "%s", h.err);
        return h.st;
    }
    for (int i = 0; i < 2; i++) {
        if (!root) buf[i] = xmalloc(h.len[i] ? (size_t)h.len[i] : 1);
        comm_bcast_bounded(buf[i], (size_t)h.len[i], 0, "rank 0 (the pack's metadata)");
        if (!root && !st) st = shards_unpack(set[i], buf[i], (size_t)h.len[i], err, errlen);
        free(buf[i]);
    }
    return st;
}

/* data.format = "jpeg": the pack's train and val shards and the threaded loader (not started). */
static int data_jpeg(run_setup *r, int lrank, char *err, size_t errlen) {
    const experiment *e = &r->e;
    int st = data_open_pack(r, err, errlen);
    if (st) return st;
    r->t.data_fp[0] = shards_fingerprint(r->pack_train), r->t.data_fp[1] = shards_fingerprint(r->pack_val);
    const int classes = shards_n_classes(r->pack_train);
    if (e->data.classes && e->data.classes != classes)
        return seterr(err, errlen, "%s: key 'data.classes': %d classes, but the pack %s has %d (%s/%s); set data.classes = %d "
                      "or 0 (the data's)", config_where("data.classes"), e->data.classes, e->data.dir, classes, e->data.dir,
                      SHARDS_INDEX, classes);
    const int crop = e->data.crop;
    r->train = (dataset){.n = (int)shards_count(r->pack_train), .c = 3, .h = crop, .w = crop, .n_classes = classes};
    r->val = (dataset){.n = (int)shards_count(r->pack_val), .c = 3, .h = crop, .w = crop, .n_classes = classes};
    const int kind = e->data.augment == AUGMENT_RRC ? AUG_RRC : e->data.augment == AUGMENT_NONE ? AUG_NONE : AUG_SCALE;
    jpegload_cfg jc = {.train = r->pack_train, .val = r->pack_val, .seed = e->seed, .b = e->b, .slots = 3,
                       .timeout_s = e->comm_timeout_s, .rank = r->t.rank, .threads = 1, .eval_max = 1};
    aug_default(&jc.train_aug, kind);
    aug_default(&jc.eval_aug, AUG_EVAL);
    /* auto: bicubic (fb.resnet.torch, the paper's recipe) except bilinear for rrc (torchvision) */
    const int interp = e->data.interp == INTERP_BICUBIC ? IMAGE_BICUBIC : e->data.interp == INTERP_BILINEAR ? IMAGE_BILINEAR
                     : kind == AUG_RRC ? IMAGE_BILINEAR : IMAGE_BICUBIC;
    for (aug_cfg *a = &jc.train_aug; a; a = a == &jc.train_aug ? &jc.eval_aug : NULL) {
        a->crop = crop, a->scale_min = e->data.scale[0], a->scale_max = e->data.scale[1];
        a->eval_resize = e->data.eval_resize, a->interp = interp, a->dct_scale = e->data.dct_scale;
    }
    if ((st = memory_fits(r, err, errlen))) return st;
    if ((st = loader_init_jpeg(&r->t.train_loader, &jc, e->p, lrank, 0, err, errlen)))
        setup_blame(e, "keys 'p', 'b', 'data.dir'", err, errlen);
    return st;
}

/* data.format = "idx": both sets read and checked against each other. */
static int data_idx_read(run_setup *r, char *err, size_t errlen) {
    const experiment *e = &r->e;
    dataset *train = &r->train, *val = &r->val;
    int st = dataset_load(train, e->data.train_images, e->data.train_labels, 0, err, errlen);
    if (st) setup_blame(e, "keys 'data.train_images', 'data.train_labels'", err, errlen);
    if (!st && (st = dataset_load(val, e->data.val_images, e->data.val_labels, train->n_classes, err, errlen)))
        setup_blame(e, "keys 'data.val_images', 'data.val_labels'", err, errlen);
    if (!st && (val->c != train->c || val->h != train->h || val->w != train->w)) {
        st = seterr(err, errlen, "%s is %dx%dx%d but %s is %dx%dx%d: training and validation images must have the same shape",
                    e->data.val_images, val->c, val->h, val->w, e->data.train_images, train->c, train->h, train->w);
        setup_blame(e, "keys 'data.val_images', 'data.train_images'", err, errlen);
    }
    if (!st && e->data.classes && e->data.classes != train->n_classes)
        st = seterr(err, errlen, "%s: key 'data.classes': %d classes, but the labels of %s have %d; set data.classes = %d or 0 "
                    "(the data's)", config_where("data.classes"), e->data.classes, e->data.train_labels, train->n_classes,
                    train->n_classes);
    return st;
}

/* One copy of both IDX sets per node (several ranks on it): node rank 0's, moved into a window
 * of shared memory (comm_node_share) that every rank of the node reads in place, read-only; the
 * other ranks read no file. Every rank sees the bytes it would have read itself, so batches and
 * evaluations are unchanged bit for bit (test/test_idx_share.sh). Memory: one copy per node
 * instead of one per rank (docs/simulate.md, "Cost"). After an agreement that node rank 0 read
 * the files. */
static void data_idx_share(run_setup *r) {
    dataset *set[2] = {&r->train, &r->val};
    const int root = comm_local_rank() == 0;
    for (int i = 0; i < 2; i++) {
        size_t n = root ? dataset_block_bytes(set[i]) : 0;
        void *block = root ? xmalloc(n) : NULL;
        if (root) dataset_block_write(set[i], block), dataset_free(set[i]);
        dataset_view(set[i], comm_node_share(block, &n, "node rank 0 (sharing the IDX data)"));
        free(block);
    }
}

/* The IDX loader on the sets read (or shared). */
static int data_idx_loader(run_setup *r, int lrank, char *err, size_t errlen) {
    const experiment *e = &r->e;
    dataset *train = &r->train;
    int st = 0;
    /* The loader refuses a layout (p, b against the set's size) or the images themselves (a
     * constant channel cannot be normalised): blame what is at fault. */
    if (!st) st = memory_fits(r, err, errlen);
    if (!st && (st = loader_init(&r->t.train_loader, train, e->p, lrank, e->b, e->seed, err, errlen)))
        setup_blame(e, strstr(err, "is constant") ? "key 'data.train_images'" : "keys 'p', 'b'", err, errlen);
    return st;
}

void setup_data(run_setup *r) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    char err[ERRLEN] = "";
    int st = 0;
    const int lrank = t->worker >= 0 ? t->worker : 0;
    inject_init(&t->inj, e, lrank);
    if (e->data.format == FORMAT_JPEG) st = data_jpeg(r, lrank, err, sizeof err);
    else if (e->data.format == FORMAT_SYNTHETIC) {
        const int classes = e->data.classes ? e->data.classes : 1000;
        r->train = (dataset){.n = LOADER_SYNTHETIC_N, .c = e->data.shape[0], .h = e->data.shape[1], .w = e->data.shape[2],
                             .n_classes = classes};
        r->val = r->train;
        r->val.n = e->p * e->b; /* one minibatch per worker */
        st = memory_fits(r, err, sizeof err);
        if (!st && (st = loader_init_synthetic(&t->train_loader, r->train.c, r->train.h, r->train.w, classes, e->p, lrank, e->b,
                                               e->seed, err, sizeof err)))
            setup_blame(e, "keys 'p', 'b', 'data.shape', 'data.classes'", err, sizeof err);
    } else {
        const int share = comm_local_size() > 1;
        if (!share || comm_local_rank() == 0) st = data_idx_read(r, err, sizeof err);
        if (share) {
            setup_agree(st, err);
            data_idx_share(r);
        }
        if (!st) st = data_idx_loader(r, lrank, err, sizeof err);
    }
    setup_agree(st, err);
    /* sim mode's virtual clock (its models checked here, so --check finds a device without a step time) */
    const int vst = vclock_init(&t->vc, e, lrank, err, sizeof err) ? EXIT_BADINPUT : 0;
    setup_agree_key(vst, "sim.device", err);
    /* --check: decode a sample of every shard before a long run (rank 0; the pack is shared). */
    if (e->data.format == FORMAT_JPEG && r->check_only && t->rank == 0) {
        int64_t a = 0, b = 0;
        st = shards_verify(r->pack_train, 8, &a, err, sizeof err);
        if (!st) st = shards_verify(r->pack_val, 8, &b, err, sizeof err);
        if (st) setup_blame(e, "key 'data.dir'", err, sizeof err);
        r->verified = a + b;
    }
    setup_agree(st, err);
    /* Under `--check` without mpiexec, the threads the real run (p ranks here) would use. */
    r->budget = choose_threads(e, r->world_unchecked ? config_world_size(e) : comm_local_size());
}

/* ---- model and method ------------------------------------------------------------------- */

void setup_model(run_setup *r) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    char err[ERRLEN] = "";
    int st = 0;
    t->eval_batch = eval_batch_of(r);
    omp_set_num_threads(r->budget.compute);
    /* The decode threads (every rank: a server may evaluate the center). */
    if (e->data.format == FORMAT_JPEG) {
        t->train_loader.jcfg.threads = r->budget.data;
        t->train_loader.jcfg.eval_max = t->eval_batch;
        st = loader_start(&t->train_loader, err, sizeof err);
    }
    setup_agree(st, err);
    /* One GPU per rank, chosen from the rank's index on its node (cuda/gpu.h gpu_select). */
    const int on_gpu = e->device == DEVICE_CUDA;
    setup_agree_key(on_gpu ? gpu_select(comm_local_rank(), comm_local_size(), r->gpu_desc, sizeof r->gpu_desc, err, sizeof err) : 0,
              "device", err);
    const model_spec spec = spec_of(r);
    t->net = model_create(&spec, err, sizeof err);
    st = t->net ? 0 : EXIT_BADINPUT;
    if (st)
        setup_blame(e, on_gpu ? "keys 'model.arch', 'model.width', 'model.stem', 'b', 'device', 'precision' (with the images' size)"
                              : "keys 'model.arch', 'model.width', 'model.stem', 'b' (with the images' size)",
                    err, sizeof err);
    setup_agree(st, err);
    model_init(t->net, e->seed);
    const size_t sample = (size_t)r->train.c * r->train.h * r->train.w;
    /* Minibatches are copied to the device every step: page-locked there (model_host_alloc). */
    t->x = model_host_alloc(t->net, (size_t)e->b * sample * sizeof(float));
    t->y = model_host_alloc(t->net, (size_t)e->b * sizeof(int));
    t->eval_x = model_host_alloc(t->net, (size_t)t->eval_batch * sample * sizeof(float));
    t->eval_y = model_host_alloc(t->net, (size_t)t->eval_batch * sizeof(int));
    /* jpeg: a second evaluation buffer, decoded into while the network evaluates (docs/data.md
     * "Threads"); DSGD_EVAL_AHEAD=0 goes without (one batch at a time: tests, measurements). */
    const char *ahead = getenv("DSGD_EVAL_AHEAD");
    if (e->data.format == FORMAT_JPEG && !(ahead && !strcmp(ahead, "0"))) {
        t->eval_x2 = model_host_alloc(t->net, (size_t)t->eval_batch * sample * sizeof(float));
        t->eval_y2 = model_host_alloc(t->net, (size_t)t->eval_batch * sizeof(int));
    }
    if (t->method->host_velocity) t->velocity = xcalloc(model_n_params(t->net), sizeof(float));
    /* How allreduce moves the gradients (comm/reduce.h): chosen and built once. */
    setup_agree_key(reducer_init(&t->red, e, t->net, t->worker, t->rank, err, sizeof err), "comm", err);
    if (t->method->reduces) reducer_describe(&t->red, r->comm_desc, sizeof r->comm_desc);
    st = t->method->init(t, err, sizeof err);
    setup_agree(st, err);
}

/* ---- close ------------------------------------------------------------------------------ */

int setup_close(run_setup *r, int st) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    const int log_rank = t->rank == t->log_rank;
    /* The decode counts of every worker into the run file (jpeg; the methods whose ranks all come
     * back from train_run together). */
    if (e->data.format == FORMAT_JPEG && t->method->ranks_end_together && e->inject.fail_rank < 0) {
        double *c = xcalloc((size_t)2 * e->p, sizeof *c);
        jpegload_stats ds;
        loader_stats(&t->train_loader, &ds);
        if (t->worker >= 0) c[t->worker] = (double)ds.warnings, c[e->p + t->worker] = (double)ds.failures;
        comm_workers_sum_f64(c, 2 * e->p);
        if (log_rank && t->log) {
            long long *v = xmalloc((size_t)2 * e->p * sizeof *v), tw = 0, tf = 0;
            for (int i = 0; i < 2 * e->p; i++) { v[i] = (long long)c[i]; *(i < e->p ? &tw : &tf) += v[i]; }
            if (runlog_array(t->log, r->data_array, v) || runlog_array(t->log, r->data_array + 1, v + e->p))
                fprintf(stderr, "dsgd-run: writing %s: %s\n", e->output, runlog_error(t->log));
            printf("data: %lld decode warning(s), %lld undecodable sample(s) drawn and replaced (all workers)\n", tw, tf);
            free(v);
        }
        free(c);
    }
    if (log_rank && t->log && runlog_close(t->log) != 0 && !st) st = EXIT_RUNTIME; /* runlog_close printed why */
    if (log_rank) comm_on_timeout(NULL, NULL), t->log = NULL;
    if (t->lost) { /* a rank stopped and was given up on: it will never exit, so the launcher must end it */
        printf("dsgd-run: %d rank(s) were given up on (silent for more than comm_timeout_s): ending the job with exit status %d\n",
               t->lost, st);
        fflush(stdout);
        comm_abort(st);
    }
    st = comm_finish(st, log_rank); /* bounded: a rank stopped at the very end does not hold the job */
    /* A completed run's checkpoints go (checkpoint.keep_completed = false): its run file, published
     * and closed, says completed, and nothing continues a completed run (docs/checkpoint.md). */
    char m[ERRLEN];
    if (st == EXIT_OK && t->rank == 0 && !r->check_only && !e->checkpoint.keep_completed &&
        ckpt_remove_completed(t->ckpt_dir, m, sizeof m))
        fprintf(stderr, "dsgd-run: removing the completed run's checkpoints: %s\n", m);
    model_host_free(t->net, t->x), model_host_free(t->net, t->y), model_host_free(t->net, t->eval_x), model_host_free(t->net, t->eval_y);
    model_host_free(t->net, t->eval_x2), model_host_free(t->net, t->eval_y2);
    free(t->velocity);
    reducer_free(&t->red);
    vclock_free(&t->vc);
    model_free(t->net);
    loader_free(&t->train_loader);
    shards_close(r->pack_train), shards_close(r->pack_val);
    dataset_free(&r->train), dataset_free(&r->val);
    return st;
}
