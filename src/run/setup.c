/* setup.c — the phases of a run between the experiment and the training loop, and after it
 * (setup.h): data, resume, model and method, run file, close. */
#define _GNU_SOURCE
#include "run/setup.h"

#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "data/loader.h"
#include "gpu.h"
#include "gpucomm.h"
#include "methods/method.h"
#include "nn/layers.h"
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

/* setup_agree, with a failing rank's message msg blamed on key: "<where>: key '<key>': msg". */
static void agree_key(int status, const char *key, const char *msg) {
    char err[ERRLEN] = "";
    if (status) snprintf(err, sizeof err, "%s: key '%s': %.900s", config_where(key), key, msg);
    setup_agree(status, err);
}

/* Prefix err with where the first key at fault was set (file:line, --set, or the file for a
 * default) and the keys ("keys 'p', 'b'"). */
static void setup_blame(const experiment *e, const char *keys, char *err, size_t errlen) {
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
    b.comm = e->method == METHOD_GOSSIP_PULL || e->method == METHOD_GOSSIP_PUSH;
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
        a->eval_resize = e->data.eval_resize, a->interp = interp;
    }
    if ((st = memory_fits(r, err, errlen))) return st;
    if ((st = loader_init_jpeg(&r->t.train_loader, &jc, e->p, lrank, 0, err, errlen)))
        setup_blame(e, "keys 'p', 'b', 'data.dir'", err, errlen);
    return st;
}

/* data.format = "idx": both sets read and checked against each other, and the loader. */
static int data_idx(run_setup *r, int lrank, char *err, size_t errlen) {
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
    } else st = data_idx(r, lrank, err, sizeof err);
    setup_agree(st, err);
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

/* ---- resume: does this run continue an earlier one of its experiment (docs/checkpoint.md), and
 * may it write its output and checkpoint directory. Everything is checked before the run file is
 * touched, so that a refused run changes nothing. ------------------------------------------- */

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
        return seterr(err, errlen, "%s: key 'checkpoint.path': %s holds the checkpoint of an earlier run (step %ld); continue it with "
                      "--resume (or resume = \"auto\"), choose another output or checkpoint.path, or set overwrite = true to start "
                      "afresh (its checkpoints are then removed)", config_where("checkpoint.path"), dir, l);
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
    agree_key(r0 && !r->check_only && ckpt_claim(t->ckpt_dir, m, sizeof m) < 0 ? EXIT_BADINPUT : 0, "checkpoint.path", m);
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
    agree_key(on_gpu ? gpu_select(comm_local_rank(), comm_local_size(), r->gpu_desc, sizeof r->gpu_desc, err, sizeof err) : 0,
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
    t->velocity = xcalloc(model_n_params(t->net), sizeof(float));
    /* How allreduce moves the gradients (comm/reduce.h): chosen and built once. */
    reducer_init(&t->red, e, t->net, t->worker, t->rank, agree_key);
    if (e->method == METHOD_ALLREDUCE) reducer_describe(&t->red, r->comm_desc, sizeof r->comm_desc);
    st = t->method->init(t, err, sizeof err);
    setup_agree(st, err);
}

/* ---- the run file ----------------------------------------------------------------------- */

/* Run-file writer, on a communication timeout (comm_on_timeout): keep the rows logged so far
 * and say why the run stopped. */
static void record_timeout(void *arg) {
    trainer *t = arg;
    if (!t->log) return;
    runlog_set_attr_string(t->log, "status", (ckpt_signal_pending() == CKPT_SIG_STOP && !ckpt_time_up()) || comm_stop_after_signal()
                                                 ? "stopped: SIGTERM or SIGINT while waiting for another rank (no checkpoint)"
                                                 : "stopped: communication timeout (comm_timeout_s)");
    if (comm_stop_detail()[0]) runlog_set_attr_string(t->log, "stop_detail", comm_stop_detail());
    runlog_close(t->log);
    t->log = NULL;
}

/* What this rank computes on, into r->device_desc: "cuda fp32: GPU ...", or "cpu bf16 (...
 * convolutions in bf16...): oneDNN ..., N thread(s) per rank". */
static void describe_device(run_setup *r) {
    const char *prec = precision_name(r->e.precision);
    if (r->e.device == DEVICE_CUDA) {
        snprintf(r->device_desc, sizeof r->device_desc, "cuda %s: %s%s", prec, r->gpu_desc, r->comm_desc);
        return;
    }
    char v[256], lp[256] = "";
    model_backend_version(v, sizeof v);
    char names[128];
    int n_conv = 0;
    const int n_lp = model_bf16_convs(r->t.net, &n_conv, names, sizeof names);
    if (n_lp || r->e.precision == PRECISION_BF16)
        snprintf(lp, sizeof lp, " (%d of %d convolutions in bf16%s%s)", n_lp, n_conv, *names ? "; fp32: " : "", names);
    snprintf(r->device_desc, sizeof r->device_desc, "cpu %s%s: %.*s, %d thread(s) per rank", prec, lp, (int)strcspn(v + 5, ";"),
             v + 5, r->budget.compute);
}

/* The root attributes of the data set's provenance and the libraries into attrs (returns how
 * many), and the per-worker decode counts (jpeg) appended to arrays[*na]. */
static int data_provenance(run_setup *r, runlog_attr *attrs, runlog_array_spec *arrays, int *na) {
    const experiment *e = &r->e;
    int nat = 0;
    /* The libraries this process runs on (the versions loaded, not those built against). */
    static char lib_mpi[256], lib_dnn[256], lib_h5[64], lib_nccl[ERRLEN + 64], libraries[2048], fp_text[48];
    comm_library_version(lib_mpi, sizeof lib_mpi);
    model_backend_version(lib_dnn, sizeof lib_dnn);
    runlog_library_version(lib_h5, sizeof lib_h5);
    gpucomm_version(lib_nccl, sizeof lib_nccl);
    snprintf(libraries, sizeof libraries, "%s; %s; MPI: %s; nccl: %s", lib_dnn, lib_h5, lib_mpi, lib_nccl);
    attrs[nat++] = (runlog_attr){"libraries", libraries, 0};
    attrs[nat++] = (runlog_attr){"data_format", data_format_name(e->data.format), 0};
    attrs[nat++] = (runlog_attr){"data_classes", NULL, r->train.n_classes};
    attrs[nat++] = (runlog_attr){"data_train_n", NULL, r->train.n};
    attrs[nat++] = (runlog_attr){"data_val_n", NULL, r->val.n};
    if (e->data.format == FORMAT_SYNTHETIC)
        attrs[nat++] = (runlog_attr){"data_synthetic", "yes: random inputs and labels (data.format = \"synthetic\"); these "
                                                        "curves measure speed, not learning", 0};
    if (e->data.format != FORMAT_JPEG) return nat;
    const aug_cfg *a = &r->t.train_loader.jcfg.train_aug;
    attrs[nat++] = (runlog_attr){"data_dir", e->data.dir, 0};
    attrs[nat++] = (runlog_attr){"data_pack_format", SHARDS_FORMAT, 0};
    attrs[nat++] = (runlog_attr){"data_pack_format_version", NULL, SHARDS_FORMAT_VERSION};
    attrs[nat++] = (runlog_attr){"data_pack_max_side", NULL, shards_max_side(r->pack_train)};
    attrs[nat++] = (runlog_attr){"data_pack_skipped", NULL, shards_skipped(r->pack_train) + shards_skipped(r->pack_val)};
    attrs[nat++] = (runlog_attr){"data_pack_shards", NULL, shards_n_shards(r->pack_train) + shards_n_shards(r->pack_val)};
    snprintf(fp_text, sizeof fp_text, "%016llx/%016llx", (unsigned long long)r->t.data_fp[0], (unsigned long long)r->t.data_fp[1]);
    attrs[nat++] = (runlog_attr){"data_pack_fingerprint", fp_text, 0};
    attrs[nat++] = (runlog_attr){"data_augment", augment_name(e->data.augment), 0};
    attrs[nat++] = (runlog_attr){"data_interp", a->interp == IMAGE_BICUBIC ? "bicubic" : "bilinear", 0};
    attrs[nat++] = (runlog_attr){"data_threads", NULL, r->budget.data};
    arrays[(*na)++] = (runlog_array_spec){"data/decode_warnings", e->p, 0, "warnings",
                                          "libjpeg warnings (corrupt data recovered, premature end of data) of the samples each "
                                          "worker used, over the whole run (kept across resumes by the checkpoints)", 0, 0};
    arrays[(*na)++] = (runlog_array_spec){"data/decode_failures", e->p, 0, "samples",
                                          "samples each worker drew that could not be decoded (each replaced by the next sample "
                                          "of the pack and named once on stderr), over the whole run (kept across resumes by the checkpoints)", 0, 0};
    return nat;
}

/* Rename the run file at path to a free name "<stem>.restart<k>.h5" beside it (k = 1, 2, ...),
 * written into aside. Returns 0 or EXIT_BADINPUT with err filled. */
static int move_aside(const char *path, char *aside, size_t n, char *err, size_t errlen) {
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

/* The run file of meta: continued after the checkpoint's rows (a resume), or created (after
 * moving an unfinished one aside; overwrite = true: the earlier run's checkpoints removed).
 * Returns 0 or EXIT_BADINPUT with err filled (about key 'output'). */
static int open_runlog(run_setup *r, const runlog_meta *meta, char *err, size_t errlen) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    if (t->resume_label >= 0) { /* continue the run file after the checkpoint's rows */
        ckpt_file *f = ckpt_open(t->ckpt_dir, t->resume_label, t->rank, err, errlen);
        int64_t rows[4] = {0};
        if (f && ckpt_get_i64(f, "run_rows", rows, 4) != 0) snprintf(err, errlen, "%s", ckpt_error(f));
        if (f && !err[0]) {
            const runlog_rows keep = {.train = rows[0], .eval = rows[1], .eval_local = rows[2], .ranks = rows[3]};
            char note[CFG_PATH_MAX + 160];
            char nb[200] = "";
            if (r->not_bitwise) snprintf(nb, sizeof nb, " (not bitwise: %s)", r->not_bitwise_how);
            snprintf(note, sizeof note, "checkpoint %s/step-%ld%s", t->ckpt_dir, t->resume_label, nb);
            t->log = runlog_resume(e->output, meta, &keep, note, err, errlen);
        }
        ckpt_free(f);
    } else {
        char aside[CFG_PATH_MAX + 64] = "";
        const int st = r->plan.move_aside ? move_aside(e->output, aside, sizeof aside, err, errlen) : 0;
        if (!st && aside[0])
            printf("dsgd-run: %s had no checkpoint to continue from (cut off before its first one): kept as %s; starting afresh\n",
                   e->output, aside);
        if (!st) t->log = runlog_create(e->output, e->overwrite, meta, err, errlen);
        /* overwrite = true replaced the run file: the earlier run's checkpoints go too */
        if (t->log && r->plan.had_ckpt && ckpt_remove_all(t->ckpt_dir, err, errlen) != 0) runlog_close(t->log), t->log = NULL;
    }
    return t->log ? 0 : EXIT_BADINPUT;
}

static void join_args(int argc, char **argv, char *buf, size_t n) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < argc && off + 1 < n; i++) off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? " " : "", argv[i]);
}

/* The log rank's start-up lines: the experiment, the resume, the ranks, model, data, threads, device. */
static void print_start(const run_setup *r) {
    const experiment *e = &r->e;
    const trainer *t = &r->t;
    printf("dsgd-run %s: %s, method %s, p = %d, b = %d, m = p·b = %d, %ld iterations (%.2f epochs)\n", DSGD_VERSION, e->name,
           method_name(e->method), e->p, e->b, e->p * e->b, e->iterations,
           (double)e->iterations / (double)t->train_loader.steps_per_epoch);
    if (t->resume_label >= 0) printf("resuming from %s/step-%ld: %ld of %ld iterations done\n", t->ckpt_dir, t->resume_label, t->resume_label, e->iterations);
    if (e->checkpoint.every) printf("checkpoints every %ld iterations and on SIGTERM/SIGUSR1 into %s\n", e->checkpoint.every, t->ckpt_dir);
    if (method_has_servers(e->method))
        printf("ranks 0..%d: workers; ranks %d..%d: parameter servers (rank %d writes the run file)\n", e->p - 1, e->p,
               e->p + e->servers - 1, e->p);
    char arch[64];
    if (e->model.arch == ARCH_LINEAR) snprintf(arch, sizeof arch, "linear (multinomial logistic regression)");
    else snprintf(arch, sizeof arch, "resnet18 width %d, %s stem", e->model.width, stem_name(e->model.stem));
    printf("model %s, %zu parameters; %d training / %d validation images; %d thread(s) per rank; output %s\n", arch,
           model_n_params(t->net), r->train.n, r->val.n, r->budget.compute, e->output);
    if (e->data.format == FORMAT_JPEG)
        printf("data: jpeg from %s (%d classes), augment %s, crop %d, %d decode thread(s) per rank\n", e->data.dir, r->train.n_classes,
               augment_name(e->data.augment), e->data.crop, r->budget.data);
    if (e->data.format == FORMAT_SYNTHETIC)
        printf("data: synthetic (random inputs and labels, %dx%dx%d, %d classes): curves measure speed, not learning\n", r->train.c,
               r->train.h, r->train.w, r->train.n_classes);
    setup_print_threads(&r->budget, stdout);
    if (e->device == DEVICE_CUDA)
        printf("device cuda (%s): rank %d on %s%s\n", precision_name(e->precision), t->rank, r->gpu_desc, r->comm_desc);
    else printf("device %s\n", r->device_desc);
    fflush(stdout);
}

void setup_runlog(run_setup *r, int argc, char **argv) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    char err[ERRLEN] = "";
    int st = 0;
    if (t->rank == t->log_rank) {
        static char cfg_text[1 << 16], cmdline[4096];
        /* Stored with overwrite = false: re-running the experiment from the file it produced must
         * never replace that file. */
        static experiment stored;
        stored = *e;
        stored.overwrite = 0;
        config_to_text(&stored, cfg_text, sizeof cfg_text);
        join_args(argc, argv, cmdline, sizeof cmdline);
        describe_device(r);
        /* The method's own arrays first, at the indices it writes them by (docs/output.md). */
        static runlog_array_spec arrays[METHOD_MAX_ARRAYS + 2];
        static runlog_attr attrs[24];
        int na = t->method->runlog_arrays ? t->method->runlog_arrays(e, arrays) : 0;
        r->data_array = na;
        const int nat = data_provenance(r, attrs, arrays, &na);
        const runlog_meta meta = {
            .method = method_name(e->method), .p = e->p, .b = e->b, .m = e->p * e->b, .seed = e->seed,
            .iterations = e->iterations, .config_text = cfg_text, .command_line = cmdline, .hostname = comm_host(),
            .servers = method_has_servers(e->method) ? e->servers : 0, .ranks = e->p, .device = r->device_desc,
            .eval_local = t->method->eval_local, .arrays = na ? arrays : NULL, .n_arrays = na, .attrs = attrs, .n_attrs = nat,
        };
        st = open_runlog(r, &meta, err, sizeof err);
        if (!st) comm_on_timeout(record_timeout, t);
    }
    agree_key(st, "output", err);
    if (t->rank == t->log_rank) print_start(r);
}

/* ---- close ------------------------------------------------------------------------------ */

int setup_close(run_setup *r, int st) {
    const experiment *e = &r->e;
    trainer *t = &r->t;
    const int log_rank = t->rank == t->log_rank;
    /* The decode counts of every worker into the run file (jpeg; the methods whose ranks all come
     * back from train_run together). */
    if (e->data.format == FORMAT_JPEG && !method_has_servers(e->method) && e->inject.fail_rank < 0) {
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
    free(t->velocity);
    reducer_free(&t->red);
    model_free(t->net);
    loader_free(&t->train_loader);
    shards_close(r->pack_train), shards_close(r->pack_val);
    dataset_free(&r->train), dataset_free(&r->val);
    return st;
}
