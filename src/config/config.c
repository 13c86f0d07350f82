/* config.c — the experiment file: one table of keys (keys[] below) drives the libconfig
 * parser, the `--set KEY=VALUE` overrides, validation, `--help` (config_print_keys), `--check`
 * (config_print_table), the provenance text stored in the run file (config_to_text) and the
 * reference table in docs/config.md (config_print_markdown), so none of them can drift apart.
 *
 * Loading happens in three passes so that an override can repair a bad file value:
 *   1. parse the file with libconfig and store every key (type errors and unknown keys stop here),
 *   2. apply the overrides in order (same checks, same code path),
 *   3. validate ranges, built-ness of enum values and cross-key constraints, then resolve
 *      defaults that depend on other keys (output = "runs/<name>.h5").
 * Each key remembers where its value came from (file:line or the --set argument) so that a
 * range error found in pass 3 still points at the line that set the value.
 *
 * libconfig 1.5 silently wraps integer literals that do not fit in 32 bits unless they carry
 * an L suffix (3000000000 reads as -1294967296); scan_int_literals() rejects those before
 * libconfig sees the text. */
#include "config/config.h"
#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------------------------------- */
/* The key table                                                                             */

typedef enum {
    KT_INT,    /* int field, libconfig integer */
    KT_INT64,  /* long / uint64_t field, libconfig integer (L suffix above 32 bits) */
    KT_FLOAT,  /* double field, libconfig float or integer (converted) */
    KT_BOOL,   /* int field (0/1), libconfig true/false */
    KT_STRING, /* char[] field, libconfig string */
    KT_ENUM,   /* enum field (int), libconfig string naming one of names[] (index = enum value) */
    KT_LIST,   /* long[] or int[] (elem_int) + int count, libconfig array or list of integers,
                  strictly increasing, each in [ilo, hi_key) */
    KT_INTS,   /* int[n_max], exactly n_max integers each in [ilo, ihi], default dflt_ints;
                  nondecr: in non-decreasing order ([min, max] ranges: data.scale) */
} key_type;

/* String checks (KT_STRING). */
enum { S_ANY = 0, S_NONEMPTY = 1, S_RUNNAME = 2 };

typedef struct {
    const char *key;  /* dotted path: "alpha.base" */
    key_type type;
    size_t off;       /* offset of the field in experiment */
    size_t size;      /* sizeof the field (strings: capacity including the NUL) */
    size_t off_n;     /* KT_LIST: offset of the element count */
    int elem_int;     /* KT_LIST: the elements are int (else long) */
    int n_max;        /* KT_LIST: capacity of the array */
    /* KT_LIST, for messages: one element, several, what they count, and a note added when an
     * element equals the (open) upper bound: "step", "steps", "iterations". */
    const char *elem, *elems, *values, *hi_note;
    int u64;          /* KT_INT64: the field is uint64_t (seed), else long */
    /* Integer range [ilo, ihi] (KT_INT, KT_INT64, KT_LIST elements). */
    long long ilo, ihi;
    /* Float range (KT_FLOAT): lo < or <= x < or <= hi; has_* = 0 means unbounded. */
    int has_lo, lo_open, has_hi, hi_open;
    double lo, hi;
    /* Upper bound given by another integer key (cross-key constraint), exclusive if hi_open. */
    const char *hi_key;
    /* Default: numbers (and enum index) in dflt, strings in dflt_s. */
    double dflt;
    const char *dflt_s;
    /* KT_ENUM: the known names, the bit mask of those that are built, what the
     * others are waiting for, and the plural noun for "built methods: ...". */
    const char *const *names;
    int n_names;
    unsigned built;
    const char *planned;
    const char *noun;
    int str_check;    /* KT_STRING: S_* */
    const int *dflt_ints; /* KT_INTS: the n_max default values */
    int nondecr;      /* KT_INTS: a [min, max] range (non-decreasing) */
    const char *unit; /* "" for dimensionless */
    const char *doc;  /* one line */
} key_def;

/* The names of each enum's values, in the order of its enum (config.h). */
static const char *const method_names[] = {"allreduce", "ps", "easgd", "gossip_pull", "gossip_push", "backup"};
static const char *const schedule_names[] = {"step", "constant", "cosine"};
static const char *const stem_names[] = {"cifar", "imagenet"};
static const char *const arch_names[] = {"resnet18", "linear"};
static const char *const format_names[] = {"idx", "jpeg", "synthetic"};
static const char *const augment_names[] = {"scale", "rrc", "none"};
static const char *const interp_names[] = {"auto", "bicubic", "bilinear"};
static const char *const comm_names[] = {"mpi", "nccl"};
static const char *const resume_names[] = {"never", "auto"};
static const char *const device_names[] = {"cpu", "cuda"};
static const char *const precision_names[] = {"fp32", "tf32", "bf16"};
static const char *const gossip_order_names[] = {"stale", "fresh"};
static const char *const delay_dist_names[] = {"fixed", "exponential", "lognormal"};

#define NNAMES(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define FSIZE(f) sizeof(((experiment *)0)->f)
#define K_INT(k, f, d, l, h, u, doc_)                                                           \
    { .key = k, .type = KT_INT, .off = offsetof(experiment, f), .size = FSIZE(f), .dflt = d,   \
      .ilo = l, .ihi = h, .unit = u, .doc = doc_ }
#define K_INT64(k, f, d, l, u, doc_)                                                            \
    { .key = k, .type = KT_INT64, .off = offsetof(experiment, f), .size = FSIZE(f), .dflt = d, \
      .ilo = l, .ihi = LLONG_MAX, .unit = u, .doc = doc_ }
#define K_FLOAT(k, f, d, hl, lopen, l, hh, hopen, h, u, doc_)                                   \
    { .key = k, .type = KT_FLOAT, .off = offsetof(experiment, f), .size = FSIZE(f), .dflt = d, \
      .has_lo = hl, .lo_open = lopen, .lo = l, .has_hi = hh, .hi_open = hopen, .hi = h,        \
      .unit = u, .doc = doc_ }
#define K_BOOL(k, f, d, doc_)                                                                   \
    { .key = k, .type = KT_BOOL, .off = offsetof(experiment, f), .size = FSIZE(f), .dflt = d,  \
      .unit = "", .doc = doc_ }
#define K_STRING(k, f, d, chk, u, doc_)                                                         \
    { .key = k, .type = KT_STRING, .off = offsetof(experiment, f), .size = FSIZE(f),           \
      .dflt_s = d, .str_check = chk, .unit = u, .doc = doc_ }
#define K_ENUM(k, f, d, nm, blt, pl, nn, doc_)                                                  \
    { .key = k, .type = KT_ENUM, .off = offsetof(experiment, f), .size = FSIZE(f), .dflt = d,  \
      .names = nm, .n_names = NNAMES(nm), .built = blt, .planned = pl, .noun = nn, .unit = "", \
      .doc = doc_ }

/* A strictly increasing list of integers, each in [l, hk) (hk: another integer key). */
#define K_LIST(k, f, fn, ei, l, hk, el, els, vals, note, u, doc_)                               \
    { .key = k, .type = KT_LIST, .off = offsetof(experiment, f), .size = FSIZE(f),             \
      .off_n = offsetof(experiment, fn), .elem_int = ei, .n_max = (int)(FSIZE(f) / FSIZE(f[0])), \
      .ilo = l, .ihi = LLONG_MAX, .hi_key = hk, .hi_open = 1, .elem = el, .elems = els,        \
      .values = vals, .hi_note = note, .unit = u, .doc = doc_ }

/* A fixed-size int array (KT_INTS): each element in [l, h], default dv (n_max values). */
#define K_INTS(k, f, dv, l, h, nd, u, doc_)                                                      \
    { .key = k, .type = KT_INTS, .off = offsetof(experiment, f), .size = FSIZE(f),             \
      .n_max = (int)(FSIZE(f) / FSIZE(f[0])), .ilo = l, .ihi = h, .dflt_ints = dv, .nondecr = nd, \
      .unit = u, .doc = doc_ }

#define FASHION "/usr/share/datasets/fashion-mnist/"
static const int dflt_scale[2] = {256, 480}, dflt_shape[3] = {3, 224, 224};

/* Defaults are the paper's (Jin et al. 2016 §4.2): α = 0.1, Nesterov µ = 0.9, λ = 1e-4,
 * EASGD τ = 10, β = 0.8. Groups must be contiguous (config_to_text relies on it). */
static const key_def keys[] = {
    K_STRING("name", name, "dsgd", S_RUNNAME, "",
             "run name: progress lines, provenance, default output runs/<name>.h5"),
    { .key = "seed", .type = KT_INT64, .off = offsetof(experiment, seed), .size = FSIZE(seed), .u64 = 1,
      .dflt = 1, .ilo = 0, .ihi = LLONG_MAX, .unit = "",
      .doc = "seeds the initialisation and the per-epoch permutation of the training set" },
    K_ENUM("method", method, METHOD_ALLREDUCE, method_names,
           0x3fu, "planned",
           "methods", "distributed SGD method (Jin et al. 2016 §3; backup: Chen et al. 2016)"),
    K_INT("p", p, 1, 1, INT_MAX, "ranks",
          "worker ranks; the MPI world is p ranks, p + servers for ps, easgd and backup"),
    K_INT("b", b, 32, 1, INT_MAX, "samples",
          "per-node minibatch; the aggregate minibatch is m = p*b"),
    K_INT64("iterations", iterations, 1000, 1, "iterations", "SGD steps per node"),
    K_FLOAT("alpha.base", alpha.base, 0.1, 1, 1, 0, 0, 0, 0, "",
            "base learning rate α_0 (after warm-up, before the schedule)"),
    K_ENUM("alpha.schedule", alpha.schedule, SCHED_STEP, schedule_names, 0x7u, NULL, "schedules",
           "learning-rate schedule: step (×factor at each of steps), constant, cosine (decay to 0)"),
    K_LIST("alpha.steps", alpha.steps, alpha.n_steps, 0, 1, "iterations", "step", "steps", "iterations",
           " (a step at the last iteration would never take effect)", "iterations",
           "the step schedule multiplies α by factor once this many iterations are done"),
    K_FLOAT("alpha.factor", alpha.factor, 0.1, 1, 0, 0, 1, 0, 1, "",
            "multiplier of α at each step of the step schedule"),
    { .key = "alpha.warmup", .type = KT_INT64, .off = offsetof(experiment, alpha.warmup),
      .size = FSIZE(alpha.warmup), .dflt = 0, .ilo = 0, .ihi = LLONG_MAX, .hi_key = "iterations",
      .hi_open = 1, .unit = "iterations",
      .doc = "linear warm-up from α_0/warmup to α_0 over this many iterations (0: none)" },
    K_FLOAT("momentum", momentum, 0.9, 1, 0, 0, 1, 1, 1, "", "momentum µ"),
    K_BOOL("nesterov", nesterov, 1, "Nesterov momentum (the paper) if true, heavy ball if false"),
    K_FLOAT("weight_decay", weight_decay, 1e-4, 1, 0, 0, 0, 0, 0, "",
            "L2 weight decay λ (added to the gradient as λ·w)"),
    K_INT("tau", tau, 10, 1, INT_MAX, "iterations", "EASGD communication period τ (used by easgd)"),
    K_FLOAT("beta", beta, 0.8, 1, 1, 0, 1, 0, 1, "", "EASGD moving rate β = p·a (used by easgd)"),
    K_INT("servers", servers, 1, 1, 64, "ranks",
          "parameter-server ranks (ps, easgd, backup), started after the p workers; parameters are sharded over them"),
    { .key = "backups", .type = KT_INT, .off = offsetof(experiment, backups), .size = FSIZE(backups),
      .dflt = 0, .ilo = 0, .ihi = INT_MAX, .hi_key = "p", .hi_open = 1, .unit = "ranks",
      .doc = "backup workers (backup, Chen et al. 2016): each step aggregates the first N = p - backups gradients" },
    K_BOOL("synchronous", synchronous, 0,
           "easgd, gossip_pull, gossip_push: the synchronous form (all nodes exchange in lock-step)"),
    K_ENUM("gossip_order", gossip_order, GOSSIP_STALE, gossip_order_names, 0x3u, NULL, "orders",
           "gossip (Jin et al. §6.2): stale = gradient step and gossip from the same θ; fresh = gradient step first, then gossip"),
    K_FLOAT("comm_timeout_s", comm_timeout_s, 300, 1, 1, 0, 0, 0, 0, "s",
            "no rank waits longer for another: a synchronous wait stops every rank (exit 1), a silent worker is given up on (docs/reliability.md)"),
    K_LIST("inject.slow_ranks", inject.slow_ranks, inject.n_slow_ranks, 1, 0, "p", "worker rank", "worker ranks",
           "worker ranks", " (workers are numbered 0 to p-1)", "ranks",
           "workers delayed on every step (by a delay drawn from delay_dist with mean delay_ms)"),
    K_FLOAT("inject.delay_ms", inject.delay_ms, 0, 1, 0, 0, 1, 0, 3.6e6, "ms",
            "mean extra time of a delayed step (slept, not computed; a SIGTERM ends the sleep); 0: no delays; at most "
            "an hour"),
    K_ENUM("inject.delay_dist", inject.delay_dist, DELAY_FIXED, delay_dist_names, 0x7u, NULL, "distributions",
           "distribution of each delay: fixed (delay_ms), exponential (mean delay_ms), lognormal (σ = 1, mean delay_ms)"),
    K_FLOAT("inject.random_slow", inject.random_slow, 0, 1, 0, 0, 1, 0, 1, "",
            "probability that, on each step, one worker drawn uniformly (the same on every rank) is delayed"),
    { .key = "inject.fail_rank", .type = KT_INT, .off = offsetof(experiment, inject.fail_rank),
      .size = FSIZE(inject.fail_rank), .dflt = -1, .ilo = -1, .ihi = INT_MAX, .hi_key = "p", .hi_open = 1,
      .unit = "", .doc = "worker that stops for good at fail_step (a simulated failure); -1: none" },
    { .key = "inject.fail_step", .type = KT_INT64, .off = offsetof(experiment, inject.fail_step),
      .size = FSIZE(inject.fail_step), .dflt = 0, .ilo = 0, .ihi = LLONG_MAX, .hi_key = "iterations",
      .hi_open = 1, .unit = "iterations",
      .doc = "0-based step at which fail_rank stops (it completes fail_step steps)" },
    K_ENUM("model.arch", model.arch, ARCH_RESNET18, arch_names, 0x3u, NULL, "architectures",
           "network: resnet18, or linear (multinomial logistic regression, for fast tests)"),
    K_INT("model.width", model.width, 64, 1, 1024, "channels",
          "channels of the first stage (64 in the paper; doubled at each stage); linear ignores it"),
    K_ENUM("model.stem", model.stem, STEM_IMAGENET, stem_names, 0x3u, NULL, "stems",
           "imagenet: 7x7/2 conv + 3x3/2 max-pool; cifar: 3x3/1 conv, no pool; linear ignores it"),
    K_ENUM("data.format", data.format, FORMAT_IDX, format_names, 0x7u, NULL, "formats",
           "idx: IDX files (MNIST / Fashion-MNIST; .gz read directly); jpeg: a pack of JPEG shards (dsgd-run "
           "--pack, data.dir; docs/data.md); synthetic: random inputs of data.shape, labels in [0, data.classes), "
           "made once (throughput and scaling studies; the run file says so)"),
    K_STRING("data.train_images", data.train_images, FASHION "train-images-idx3-ubyte.gz",
             S_NONEMPTY, "path", "training images (relative paths: to the current directory)"),
    K_STRING("data.train_labels", data.train_labels, FASHION "train-labels-idx1-ubyte.gz",
             S_NONEMPTY, "path", "training labels"),
    K_STRING("data.val_images", data.val_images, FASHION "t10k-images-idx3-ubyte.gz",
             S_NONEMPTY, "path", "validation images"),
    K_STRING("data.val_labels", data.val_labels, FASHION "t10k-labels-idx1-ubyte.gz",
             S_NONEMPTY, "path", "validation labels"),
    K_STRING("data.dir", data.dir, "", S_ANY, "path",
             "jpeg: the pack directory written by dsgd-run --pack (index.h5 and the train/val shards)"),
    K_INT("data.threads", data.threads, 0, 0, 1024, "threads",
          "jpeg: decode threads per rank, working ahead of training; 0: a quarter of the rank's cores, at least 1 "
          "(docs/data.md, Loading)"),
    K_ENUM("data.augment", data.augment, AUGMENT_SCALE, augment_names, 0x7u, NULL, "augmentations",
           "jpeg training transform: scale (He et al. 2015 §3.4: shorter side in data.scale, random crop, flip, PCA "
           "lighting), rrc (torchvision RandomResizedCrop + flip), none (shorter side to data.crop, centre crop)"),
    K_INT("data.crop", data.crop, 224, 1, 4096, "pixels", "jpeg: side of the square network input (training and evaluation)"),
    K_INTS("data.scale", data.scale, dflt_scale, 1, 65535, 1, "pixels",
           "jpeg, augment scale: [min, max] of the shorter side S, drawn uniformly in the integers; min >= data.crop"),
    K_INT("data.eval_resize", data.eval_resize, 256, 1, 65535, "pixels",
          "jpeg evaluation: shorter side resized to this, then the centre data.crop square; >= data.crop"),
    K_ENUM("data.interp", data.interp, INTERP_AUTO, interp_names, 0x7u, NULL, "interpolations",
           "jpeg resampling (Pillow's, antialiased): auto = bicubic for scale and none (fb.resnet.torch's image.scale, "
           "the recipe the paper follows), bilinear for rrc (torchvision's default); evaluation uses the same"),
    K_INTS("data.shape", data.shape, dflt_shape, 1, 4096, 0, "",
           "synthetic: [channels, height, width] of an input"),
    K_INT("data.classes", data.classes, 0, 0, 32767, "classes",
          "synthetic: number of classes (0: 1000, ImageNet's); idx, jpeg: 0 = the data's, else must equal the data's"),
    K_INT64("eval.every", eval.every, 500, 1, "iterations",
            "evaluate on the validation set every this many iterations, and at the end"),
    K_INT("eval.batch", eval.batch, 250, 1, INT_MAX, "samples", "evaluation minibatch per rank"),
    K_BOOL("eval.at_start", eval.at_start, 1,
           "also evaluate the initial model (step 0), so curves start at iteration 0"),
    K_INT64("log_every", log_every, 20, 1, "iterations",
            "progress line and /train row every this many iterations"),
    K_INT("threads", threads, 0, 0, 1024, "threads",
          "compute threads per rank; 0: the node's cores / the ranks on the node"),
    K_STRING("output", output, "", S_ANY, "path",
             "HDF5 run file; \"\" means runs/<name>.h5; never an input of the run (experiment file, data files), "
             "whatever overwrite says"),
    K_BOOL("overwrite", overwrite, 0, "replace an existing output file instead of refusing"),
    K_ENUM("resume", resume, RESUME_NEVER, resume_names, 0x3u, NULL, "resume modes",
           "never: start afresh (an existing output is refused); auto: continue from the checkpoint and run file "
           "of an earlier run of this experiment if there is a checkpoint, else start afresh (--resume: must continue)"),
    K_INT64("checkpoint.every", checkpoint.every, 0, 0, "iterations",
            "write a checkpoint every this many iterations (0: only on SIGTERM / SIGUSR1); see docs/checkpoint.md"),
    K_STRING("checkpoint.path", checkpoint.path, "", S_ANY, "path",
             "checkpoint directory; \"\" means the output without .h5, plus .ckpt (runs/<name>.ckpt); must not hold an "
             "input of the run"),
    K_BOOL("checkpoint.bitwise", checkpoint.bitwise, 1,
           "a resume on device cpu must run each rank with the compute threads and the oneDNN ISA its checkpoint part "
           "was written with (the order of oneDNN's sums depends on them, so only then does the run continue bitwise); "
           "false: continue with others, recorded in the run file"),
    K_ENUM("comm", comm, COMM_MPI, comm_names, 0x3u, NULL, "communication libraries",
           "how allreduce averages gradients: mpi (MPI_Allreduce; on device cuda through host memory unless "
           "MPI is CUDA-aware) or nccl (NCCL on the GPUs; device cuda, one GPU per worker)"),
    K_ENUM("device", device, DEVICE_CPU, device_names, 0x3u, NULL, "devices",
           "compute device: cpu (oneDNN) or cuda (cuDNN, cuBLAS; one GPU per rank, a `make CUDA=1` build)"),
    K_ENUM("precision", precision, PRECISION_FP32, precision_names, 0x7u, NULL, "precisions",
           "arithmetic of convolutions and matrix products: fp32 (IEEE, the papers); tf32 (device cuda: "
           "tensor cores, fp32 storage); bf16 (mixed precision, fp32 master weights. Device cuda: bf16 "
           "activations and weight copies, fp32 gradients and BN, compute capability 8.0 or later. Device "
           "cpu: ResNet-18's convolutions on bf16-rounded inputs and weights with fp32 accumulation and "
           "outputs, everything else fp32; needs AVX512_BF16 or AMX, checked at start)"),
};
#define N_KEYS ((int)(sizeof(keys) / sizeof(keys[0])))

/* Common misnomers of the keys (other frameworks' names), offered as "did you mean". */
static const struct { const char *alias, *key; } aliases[] = {
    {"lr", "alpha.base"},       {"learning_rate", "alpha.base"}, {"mu", "momentum"},
    {"lambda", "weight_decay"}, {"wd", "weight_decay"},          {"batch_size", "b"},
    {"minibatch", "b"},         {"workers", "p"},                {"ranks", "p"},
    {"np", "p"},                {"world_size", "p"},             {"gamma", "alpha.factor"},
    {"lr_steps", "alpha.steps"}, {"milestones", "alpha.steps"},  {"iters", "iterations"},
    {"num_servers", "servers"}, {"backup_workers", "backups"},
};

#define FIELD(e, d, T) ((T *)((char *)(e) + (d)->off))
#define CFIELD(e, d, T) ((const T *)((const char *)(e) + (d)->off))

/* ---------------------------------------------------------------------------------------- */
/* Small helpers                                                                             */

static const key_def *key_find(const char *key) {
    for (int i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].key, key)) return &keys[i];
    return NULL;
}

/* 1 if path names a group of keys ("alpha" for "alpha.base"). */
static int key_is_group(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < N_KEYS; i++)
        if (!strncmp(keys[i].key, path, n) && keys[i].key[n] == '.') return 1;
    return 0;
}

/* Shortest "%.*g" that reads back to exactly x (whole numbers below 1e15 without an exponent),
 * always with a '.' or an exponent so libconfig reads it as a float. */
static void fmt_double(char *buf, size_t n, double x) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (strchr(buf, 'e') && x == floor(x) && fabs(x) < 1e15) snprintf(buf, n, "%.0f", x); /* 300, not 3e+02 */
    if (!strpbrk(buf, ".eEni")) { /* "1" -> "1.0"; leave inf/nan alone */
        size_t l = strlen(buf);
        if (l + 3 <= n) memcpy(buf + l, ".0", 3);
    }
}

/* An integer as libconfig text: an L suffix where it does not fit in 32 bits. */
static void fmt_int(char *buf, size_t n, long long v) {
    snprintf(buf, n, "%lld%s", v, (v > INT_MAX || v < INT_MIN) ? "L" : "");
}

/* Append s as a libconfig string literal (escaped) to buf at *len, snprintf-style: *len keeps
 * counting past n so the caller can tell the full length. */
static void put_quoted(char *buf, size_t n, size_t *len, const char *s) {
    char tmp[8];
    if (*len + 1 < n) buf[*len] = '"';
    (*len)++;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        const char *piece = tmp;
        if (*c == '"') piece = "\\\"";
        else if (*c == '\\') piece = "\\\\";
        else if (*c == '\n') piece = "\\n";
        else if (*c == '\t') piece = "\\t";
        else if (*c == '\r') piece = "\\r";
        else if (*c < 0x20 || *c == 0x7f) snprintf(tmp, sizeof tmp, "\\x%02x", *c);
        else { tmp[0] = (char)*c; tmp[1] = 0; }
        for (const char *p = piece; *p; p++) { if (*len + 1 < n) buf[*len] = *p; (*len)++; }
    }
    if (*len + 1 < n) buf[*len] = '"';
    (*len)++;
    if (n) buf[*len < n ? *len : n - 1] = 0;
}

/* printf-append to buf at *len, snprintf-style (see put_quoted). */
static void put(char *buf, size_t n, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(*len < n ? buf + *len : NULL, *len < n ? n - *len : 0, fmt, ap);
    va_end(ap);
    if (w > 0) *len += (size_t)w;
}

/* Integer fields are read and written through these so that the table can treat int, long and
 * uint64_t alike. */
static long long get_int(const key_def *d, const experiment *e) {
    if (d->type == KT_INT || d->type == KT_BOOL || d->type == KT_ENUM) return *CFIELD(e, d, int);
    if (d->u64) return (long long)*CFIELD(e, d, uint64_t); /* validated to be >= 0 */
    return *CFIELD(e, d, long);
}

static void set_int(const key_def *d, experiment *e, long long v) {
    if (d->type == KT_INT || d->type == KT_BOOL || d->type == KT_ENUM) *FIELD(e, d, int) = (int)v;
    else if (d->u64) *FIELD(e, d, uint64_t) = (uint64_t)v;
    else *FIELD(e, d, long) = (long)v;
}

/* KT_LIST: the element count, and element i (int or long) as a long long. */
static int *list_n(const key_def *d, experiment *e) { return (int *)((char *)e + d->off_n); }
static int list_len(const key_def *d, const experiment *e) { return *(const int *)((const char *)e + d->off_n); }
static long long list_get(const key_def *d, const experiment *e, int i) {
    return d->elem_int ? (long long)CFIELD(e, d, int)[i] : (long long)CFIELD(e, d, long)[i];
}
static void list_set(const key_def *d, experiment *e, int i, long long v) {
    if (d->elem_int) FIELD(e, d, int)[i] = (int)v;
    else FIELD(e, d, long)[i] = (long)v;
}

/* The value of key d in e as libconfig text ("0.1", "\"dsgd\"", "[100, 200]", "true"). */
static void value_text(const key_def *d, const experiment *e, char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    switch (d->type) {
    case KT_INT: fmt_int(buf, n, *CFIELD(e, d, int)); break;
    case KT_INT64:
        fmt_int(buf, n, get_int(d, e));
        break;
    case KT_FLOAT: fmt_double(buf, n, *CFIELD(e, d, double)); break;
    case KT_BOOL: snprintf(buf, n, "%s", *CFIELD(e, d, int) ? "true" : "false"); break;
    case KT_STRING: put_quoted(buf, n, &len, CFIELD(e, d, char)); break;
    case KT_ENUM: {
        int v = *CFIELD(e, d, int);
        put_quoted(buf, n, &len, v >= 0 && v < d->n_names ? d->names[v] : "?");
        break;
    }
    case KT_LIST: {
        int ns = list_len(d, e), wide = 0;
        for (int i = 0; i < ns; i++) wide |= list_get(d, e, i) > INT_MAX || list_get(d, e, i) < INT_MIN;
        put(buf, n, &len, "[");
        /* libconfig arrays are homogeneous: all with L or none */
        for (int i = 0; i < ns; i++) put(buf, n, &len, "%s%lld%s", i ? ", " : "", list_get(d, e, i), wide ? "L" : "");
        put(buf, n, &len, "]");
        break;
    }
    case KT_INTS:
        put(buf, n, &len, "[");
        for (int i = 0; i < d->n_max; i++) put(buf, n, &len, "%s%d", i ? ", " : "", CFIELD(e, d, int)[i]);
        put(buf, n, &len, "]");
        break;
    }
}

static void set_string(const key_def *d, experiment *e, const char *s) {
    char *f = FIELD(e, d, char);
    memset(f, 0, d->size); /* zero the tail so that whole structs compare with memcmp */
    memcpy(f, s, strlen(s) < d->size ? strlen(s) : d->size - 1);
}

/* What is expected of key d, for messages: "an integer >= 1", "a number in [0, 1)". */
static void expect_text(const key_def *d, const experiment *e, char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    switch (d->type) {
    case KT_INT:
    case KT_INT64:
    case KT_LIST: {
        long long hi = d->ihi;
        const char *what = d->type == KT_LIST ? "a strictly increasing list of integers, each" : "an integer";
        if (d->hi_key) {
            const key_def *h = key_find(d->hi_key);
            if (e) put(buf, n, &len, "%s >= %lld and %s %s (%lld)", what, d->ilo, d->hi_open ? "<" : "<=", d->hi_key, get_int(h, e));
            else put(buf, n, &len, "%s >= %lld and %s %s", what, d->ilo, d->hi_open ? "<" : "<=", d->hi_key);
        } else if ((d->type == KT_INT && hi == INT_MAX) || hi == LLONG_MAX)
            put(buf, n, &len, "%s >= %lld", what, d->ilo);
        else put(buf, n, &len, "%s in [%lld, %lld]", what, d->ilo, hi);
        break;
    }
    case KT_FLOAT: {
        char lo[40], hi[40];
        fmt_double(lo, sizeof lo, d->lo);
        fmt_double(hi, sizeof hi, d->hi);
        /* show bounds as written in the docs: 0 and 1, not 0.0 and 1.0 */
        for (char *s = lo; s; s = s == lo ? hi : NULL) {
            size_t l = strlen(s);
            if (l > 2 && !strcmp(s + l - 2, ".0")) s[l - 2] = 0;
        }
        if (d->has_lo && d->has_hi)
            put(buf, n, &len, "a number in %c%s, %s%c", d->lo_open ? '(' : '[', lo, hi, d->hi_open ? ')' : ']');
        else if (d->has_lo) put(buf, n, &len, "a number %s %s", d->lo_open ? ">" : ">=", lo);
        else if (d->has_hi) put(buf, n, &len, "a number %s %s", d->hi_open ? "<" : "<=", hi);
        else put(buf, n, &len, "a number");
        break;
    }
    case KT_INTS:
        if (d->nondecr) put(buf, n, &len, "[min, max]: %d integers in [%lld, %lld] with min <= max", d->n_max, d->ilo, d->ihi);
        else put(buf, n, &len, "a list of %d integers, each in [%lld, %lld]", d->n_max, d->ilo, d->ihi);
        break;
    case KT_BOOL: put(buf, n, &len, "a boolean (true or false)"); break;
    case KT_STRING:
        if (d->str_check == S_RUNNAME)
            put(buf, n, &len, "a non-empty string of letters, digits and ._+- (at most %zu characters)", d->size - 1);
        else put(buf, n, &len, "a %sstring of at most %zu characters", d->str_check == S_NONEMPTY ? "non-empty " : "", d->size - 1);
        break;
    case KT_ENUM:
        put(buf, n, &len, "one of ");
        for (int i = 0; i < d->n_names; i++) put(buf, n, &len, "%s\"%s\"", i ? ", " : "", d->names[i]);
        break;
    }
}

/* Describe a libconfig setting as found: "a string \"abc\"", "an integer 5", "a group". */
static void found_text(const config_setting_t *s, char *buf, size_t n) {
    size_t len = 0;
    char num[40];
    if (n) buf[0] = 0;
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        fmt_int(num, sizeof num, config_setting_get_int64(s));
        put(buf, n, &len, "an integer %s", num);
        break;
    case CONFIG_TYPE_FLOAT:
        fmt_double(num, sizeof num, config_setting_get_float(s));
        put(buf, n, &len, "a float %s", num);
        break;
    case CONFIG_TYPE_BOOL: put(buf, n, &len, "a boolean %s", config_setting_get_bool(s) ? "true" : "false"); break;
    case CONFIG_TYPE_STRING:
        put(buf, n, &len, "a string ");
        put_quoted(buf, n, &len, config_setting_get_string(s));
        break;
    case CONFIG_TYPE_GROUP: put(buf, n, &len, "a group { ... }"); break;
    case CONFIG_TYPE_ARRAY: put(buf, n, &len, "an array [ ... ]"); break;
    case CONFIG_TYPE_LIST: put(buf, n, &len, "a list ( ... )"); break;
    default: put(buf, n, &len, "an empty value"); break;
    }
}

/* Levenshtein edit distance (insert, delete, substitute), for "did you mean". */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 200 || lb > 200) return 1000;
    int row[201];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int sub = diag + (a[i - 1] != b[j - 1]);
            int del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            diag = up;
        }
    }
    return row[lb];
}

/* The known key (or group) closest to an unknown one, or NULL: the only key with the same last
 * component ("base" -> "alpha.base"), else the nearest by edit distance when it is small
 * (≤ 3 and ≤ half the length), else a known alias ("lr" -> "alpha.base"). */
static const char *key_suggest(const char *unknown) {
    static const char *const groups[] = {"alpha", "inject", "model", "data", "eval", "checkpoint"};
    /* the right name in the wrong group (or at the top level) first: an exact hit */
    const char *last = strrchr(unknown, '.');
    last = last ? last + 1 : unknown;
    const char *match = NULL;
    int n_match = 0;
    for (int i = 0; i < N_KEYS; i++) {
        const char *kl = strrchr(keys[i].key, '.');
        kl = kl ? kl + 1 : keys[i].key;
        if (!strcmp(kl, last) && strcmp(keys[i].key, unknown)) { match = keys[i].key; n_match++; }
    }
    if (n_match == 1) return match;
    const char *best = NULL;
    int bestd = 1000;
    for (int i = 0; i < N_KEYS + NNAMES(groups); i++) {
        const char *k = i < N_KEYS ? keys[i].key : groups[i - N_KEYS];
        int dist = edit_distance(unknown, k);
        if (dist < bestd) { bestd = dist; best = k; }
    }
    int len = (int)strlen(unknown);
    if (best && bestd <= 3 && 2 * bestd <= len) return best;
    for (int i = 0; i < NNAMES(aliases); i++)
        if (!strcmp(aliases[i].alias, last)) return aliases[i].key;
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Where a value came from, for messages                                                     */

typedef struct {
    const char *file; /* experiment file (or an @include'd one) */
    int line;         /* 0: unknown / default */
    const char *set;  /* the --set argument, or NULL */
} origin;

static void origin_text(const origin *o, char *buf, size_t n) {
    if (o->set) snprintf(buf, n, "--set %s", o->set);
    else if (o->line > 0) snprintf(buf, n, "%s:%d", o->file, o->line);
    else snprintf(buf, n, "%s", o->file);
}

/* Origins of the last successful config_load, as text, per key (for config_where). */
static char g_where[N_KEYS][CFG_PATH_MAX + 64];

/* seterr with the origin in front: "<origin>: <message>". */
static int oerr(char *err, size_t errlen, const origin *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int oerr(char *err, size_t errlen, const origin *o, const char *fmt, ...) {
    char where[CFG_PATH_MAX + 64], msg[ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    origin_text(o, where, sizeof where);
    return seterr(err, errlen, "%s: %s", where, msg);
}

static int unknown_key(char *err, size_t errlen, const origin *o, const char *path) {
    const char *s = key_suggest(path);
    if (s) return oerr(err, errlen, o, "unknown key '%s'; did you mean '%s'?", path, s);
    return oerr(err, errlen, o, "unknown key '%s' (dsgd-run --help lists the keys)", path);
}

/* ---------------------------------------------------------------------------------------- */
/* libconfig 1.5 integer wrap-around guard                                                  */

/* Reject integer literals that libconfig 1.5 would silently wrap: no L suffix and outside the
 * 32-bit range, or an L suffix and outside the 64-bit range. Strings and comments are skipped;
 * @include'd files are scanned too (depth ≤ 10, as libconfig). o->line is advanced as lines
 * pass. Returns 0 or EXIT_BADINPUT. */
static int read_text_file(const char *path, char **text, char *err, size_t errlen, const origin *o);

/* The files the last config_load's experiment file @include'd (recorded by the scan below). */
#define MAX_INCLUDES 64
static char included[MAX_INCLUDES][CFG_PATH_MAX];
static int n_included;

int config_n_included(void) { return n_included; }
const char *config_included(int i) { return i >= 0 && i < n_included ? included[i] : NULL; }

static int scan_int_literals(const char *t, origin *o, int depth, char *err, size_t errlen) {
    for (size_t i = 0; t[i];) {
        char c = t[i];
        if (c == '\n') { o->line++; i++; }
        else if (c == '#' || (c == '/' && t[i + 1] == '/')) { while (t[i] && t[i] != '\n') i++; }
        else if (c == '/' && t[i + 1] == '*') {
            for (i += 2; t[i] && !(t[i] == '*' && t[i + 1] == '/'); i++) if (t[i] == '\n') o->line++;
            if (t[i]) i += 2;
        } else if (c == '"') {
            for (i++; t[i] && t[i] != '"'; i++) {
                if (t[i] == '\\' && t[i + 1]) i++;
                if (t[i] == '\n') o->line++;
            }
            if (t[i]) i++;
        } else if (c == '@' && !strncmp(t + i, "@include", 8)) {
            i += 8;
            while (t[i] == ' ' || t[i] == '\t') i++;
            if (t[i] != '"') continue; /* libconfig reports the syntax error */
            size_t s = ++i;
            while (t[i] && t[i] != '"' && t[i] != '\n') i++;
            if (t[i] != '"') continue;
            if (depth >= 10) return oerr(err, errlen, o, "@include nested more than 10 deep");
            char inc[CFG_PATH_MAX];
            if (i - s >= sizeof inc) return oerr(err, errlen, o, "@include path longer than %d characters", CFG_PATH_MAX - 1);
            memcpy(inc, t + s, i - s);
            inc[i - s] = 0;
            i++;
            char *itext;
            if (read_text_file(inc, &itext, err, errlen, o)) return EXIT_BADINPUT;
            if (n_included < MAX_INCLUDES) snprintf(included[n_included++], CFG_PATH_MAX, "%s", inc);
            origin io = {inc, 1, NULL};
            int st = scan_int_literals(itext, &io, depth + 1, err, errlen);
            free(itext);
            if (st) return st;
        } else if (isalpha((unsigned char)c) || c == '*' || c == '_') {
            while (isalnum((unsigned char)t[i]) || t[i] == '_' || t[i] == '-' || t[i] == '*') i++;
        } else if (isdigit((unsigned char)c) || ((c == '-' || c == '+') && isdigit((unsigned char)t[i + 1]))) {
            size_t s = i;
            int neg = c == '-';
            if (c == '-' || c == '+') i++;
            int hex = t[i] == '0' && (t[i + 1] == 'x' || t[i + 1] == 'X') && isxdigit((unsigned char)t[i + 2]);
            unsigned long long mag = 0;
            int big = 0; /* magnitude beyond 2^64 */
            if (hex) {
                for (i += 2; isxdigit((unsigned char)t[i]); i++) {
                    int dgt = isdigit((unsigned char)t[i]) ? t[i] - '0' : (tolower((unsigned char)t[i]) - 'a' + 10);
                    if (mag > (ULLONG_MAX >> 4)) big = 1;
                    mag = mag * 16 + (unsigned)dgt;
                }
            } else {
                for (; isdigit((unsigned char)t[i]); i++) {
                    if (mag > (ULLONG_MAX - 9) / 10) big = 1;
                    mag = mag * 10 + (unsigned)(t[i] - '0');
                }
                if (t[i] == '.' || ((t[i] == 'e' || t[i] == 'E') && (isdigit((unsigned char)t[i + 1]) ||
                                   ((t[i + 1] == '-' || t[i + 1] == '+') && isdigit((unsigned char)t[i + 2]))))) {
                    /* a float: skip it */
                    if (t[i] == '.') for (i++; isdigit((unsigned char)t[i]); i++) {}
                    if (t[i] == 'e' || t[i] == 'E') {
                        i++;
                        if (t[i] == '-' || t[i] == '+') i++;
                        while (isdigit((unsigned char)t[i])) i++;
                    }
                    continue;
                }
            }
            int l64 = t[i] == 'L';
            size_t e_ = i;
            while (t[i] == 'L') i++;
            unsigned long long lim = l64 ? (neg ? 1ull << 63 : (1ull << 63) - 1) : (neg ? 1ull << 31 : (1ull << 31) - 1);
            if (big || mag > lim) {
                int w = (int)(e_ - s);
                if (l64) return oerr(err, errlen, o, "integer %.*s does not fit in 64 bits", w, t + s);
                return oerr(err, errlen, o,
                            "integer %.*s does not fit in 32 bits; write %.*sL for a 64-bit integer "
                            "(libconfig would silently wrap it)", w, t + s, w, t + s);
            }
        } else if (c == '.' && isdigit((unsigned char)t[i + 1])) {
            for (i++; isdigit((unsigned char)t[i]) || t[i] == 'e' || t[i] == 'E'; i++)
                if ((t[i] == 'e' || t[i] == 'E') && (t[i + 1] == '-' || t[i + 1] == '+')) i++;
        } else i++;
    }
    return 0;
}

/* Read a whole text file (at most 1 MiB; an experiment file is a few KiB). o: where an
 * @include names it, or NULL for the experiment file itself. */
static int read_text_file(const char *path, char **text, char *err, size_t errlen, const origin *o) {
    struct stat sb;
    char pre[CFG_PATH_MAX + 80] = "";
    if (o) {
        origin_text(o, pre, sizeof pre);
        size_t l = strlen(pre);
        snprintf(pre + l, sizeof pre - l, ": @include: ");
    }
    *text = NULL;
    if (stat(path, &sb) != 0) return seterr(err, errlen, "%scannot open experiment file '%s': %s", pre, path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return seterr(err, errlen, "%s'%s' is a directory, not an experiment file", pre, path);
    FILE *f = fopen(path, "rb");
    if (!f) return seterr(err, errlen, "%scannot open experiment file '%s': %s", pre, path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= (1u << 20)) {
                free(buf);
                fclose(f);
                return seterr(err, errlen, "%s'%s' is larger than 1 MiB; not an experiment file?", pre, path);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) DIE("out of memory reading %s", path);
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - 1 - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f), errno_ = errno;
    fclose(f);
    if (bad) { free(buf); return seterr(err, errlen, "%scannot read '%s': %s", pre, path, strerror(errno_)); }
    buf[n] = 0;
    if (strlen(buf) != n) { free(buf); return seterr(err, errlen, "%s'%s' contains a NUL byte; not a text file", pre, path); }
    *text = buf;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Storing values (passes 1 and 2)                                                           */

/* Type-check setting s against key d and store it into e. Range checks wait for pass 3, so
 * that an override can repair a file value; only values that cannot be stored at all (an
 * int field out of the int range, an unknown enum name, too many steps) fail here. */
static int store_value(experiment *e, const key_def *d, const config_setting_t *s, const origin *o, char *err, size_t errlen) {
    char want[512], got[512];
    int t = config_setting_type(s);
    int is_int = t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64;
    expect_text(d, NULL, want, sizeof want);
    found_text(s, got, sizeof got);
    switch (d->type) {
    case KT_INT:
    case KT_INT64: {
        if (!is_int) {
            const char *hint = t == CONFIG_TYPE_FLOAT ? " (write it without a decimal point)" : "";
            return oerr(err, errlen, o, "key '%s': expected an integer, got %s%s", d->key, got, hint);
        }
        long long v = config_setting_get_int64(s);
        if (d->type == KT_INT && (v < INT_MIN || v > INT_MAX))
            return oerr(err, errlen, o, "key '%s': expected %s, got %lld", d->key, want, v);
        set_int(d, e, v);
        return 0;
    }
    case KT_FLOAT: {
        if (!is_int && t != CONFIG_TYPE_FLOAT)
            return oerr(err, errlen, o, "key '%s': expected a number, got %s", d->key, got);
        double v = is_int ? (double)config_setting_get_int64(s) : config_setting_get_float(s);
        if (!isfinite(v)) return oerr(err, errlen, o, "key '%s': expected a finite number, got %s", d->key, got);
        *FIELD(e, d, double) = v;
        return 0;
    }
    case KT_BOOL:
        if (t != CONFIG_TYPE_BOOL) return oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, want, got);
        *FIELD(e, d, int) = config_setting_get_bool(s) ? 1 : 0;
        return 0;
    case KT_STRING:
    case KT_ENUM: {
        if (t != CONFIG_TYPE_STRING)
            return oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, d->type == KT_STRING ? "a string" : want, got);
        const char *v = config_setting_get_string(s);
        if (d->type == KT_STRING) {
            if (strlen(v) >= d->size)
                return oerr(err, errlen, o, "key '%s': expected a string of at most %zu characters, got one of %zu", d->key, d->size - 1, strlen(v));
            set_string(d, e, v);
            return 0;
        }
        for (int i = 0; i < d->n_names; i++)
            if (!strcmp(v, d->names[i])) {
                *FIELD(e, d, int) = i;
                return 0;
            }
        return oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, want, got);
    }
    case KT_LIST: {
        if (t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST)
            return oerr(err, errlen, o, "key '%s': expected a list of integers such as %s, got %s", d->key,
                        d->elem_int ? "[1, 3]" : "[30000, 60000]", got);
        int ns = config_setting_length(s);
        if (ns > d->n_max)
            return oerr(err, errlen, o, "key '%s': expected at most %d %s, got %d", d->key, d->n_max, d->elems, ns);
        for (int i = 0; i < ns; i++) {
            const config_setting_t *el = config_setting_get_elem(s, (unsigned)i);
            int et = config_setting_type(el);
            if (et != CONFIG_TYPE_INT && et != CONFIG_TYPE_INT64) {
                found_text(el, got, sizeof got);
                return oerr(err, errlen, o, "key '%s': expected integers, got %s at index %d", d->key, got, i);
            }
            long long v = config_setting_get_int64(el);
            if (d->elem_int && (v < INT_MIN || v > INT_MAX))
                return oerr(err, errlen, o, "key '%s': expected %s, got %s[%d] = %lld", d->key, want, d->key, i, v);
            list_set(d, e, i, v);
        }
        for (int i = ns; i < d->n_max; i++) list_set(d, e, i, 0);
        *list_n(d, e) = ns;
        return 0;
    }
    case KT_INTS: {
        if ((t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST) || config_setting_length(s) != d->n_max)
            return oerr(err, errlen, o, "key '%s': expected %s, got %s%s", d->key, want, got,
                        t == CONFIG_TYPE_ARRAY || t == CONFIG_TYPE_LIST ? " of another length" : "");
        for (int i = 0; i < d->n_max; i++) {
            const config_setting_t *el = config_setting_get_elem(s, (unsigned)i);
            int et = config_setting_type(el);
            if (et != CONFIG_TYPE_INT && et != CONFIG_TYPE_INT64) {
                found_text(el, got, sizeof got);
                return oerr(err, errlen, o, "key '%s': expected integers, got %s at index %d", d->key, got, i);
            }
            long long v = config_setting_get_int64(el);
            if (v < INT_MIN || v > INT_MAX)
                return oerr(err, errlen, o, "key '%s': expected %s, got %s[%d] = %lld", d->key, want, d->key, i, v);
            FIELD(e, d, int)[i] = (int)v;
        }
        return 0;
    }
    }
    return 0;
}

/* Store setting s found at dotted path (a key or a group of keys), recursing into groups.
 * origins[] records where each key's value came from. base: the file and whether this is an
 * override; the line is taken from each setting. */
static int apply_setting(experiment *e, origin *origins, const char *path, const config_setting_t *s,
                         const origin *base, char *err, size_t errlen) {
    origin o = *base;
    if (!o.set) {
        o.line = config_setting_source_line(s);
        const char *f = config_setting_source_file(s);
        if (f) o.file = f;
    }
    const key_def *d = key_find(path);
    if (d) {
        int st = store_value(e, d, s, &o, err, errlen);
        if (!st) origins[d - keys] = o;
        return st;
    }
    if (!key_is_group(path)) return unknown_key(err, errlen, &o, path);
    if (config_setting_type(s) != CONFIG_TYPE_GROUP) {
        char got[512];
        found_text(s, got, sizeof got);
        return oerr(err, errlen, &o, "key '%s': expected a group { ... } of keys, got %s", path, got);
    }
    int n = config_setting_length(s);
    for (int i = 0; i < n; i++) {
        const config_setting_t *c = config_setting_get_elem(s, (unsigned)i);
        char sub[512];
        const char *name = config_setting_name(c);
        snprintf(sub, sizeof sub, "%s.%s", path, name ? name : "?");
        int st = apply_setting(e, origins, sub, c, base, err, errlen);
        if (st) return st;
    }
    return 0;
}

/* Apply one "--set KEY=VALUE" override. */
static int apply_override(experiment *e, origin *origins, const char *arg, char *err, size_t errlen) {
    origin o = {NULL, 0, arg};
    const char *eq = strchr(arg, '=');
    if (!eq) return oerr(err, errlen, &o, "expected KEY=VALUE (e.g. --set alpha.base=0.05)");
    char key[256];
    const char *ks = arg, *ke = eq;
    while (ks < ke && isspace((unsigned char)*ks)) ks++;
    while (ke > ks && isspace((unsigned char)ke[-1])) ke--;
    if (ke == ks) return oerr(err, errlen, &o, "empty KEY in KEY=VALUE");
    if ((size_t)(ke - ks) >= sizeof key) return oerr(err, errlen, &o, "KEY longer than %zu characters", sizeof key - 1);
    memcpy(key, ks, (size_t)(ke - ks));
    key[ke - ks] = 0;
    const char *val = eq + 1;
    while (isspace((unsigned char)*val)) val++;
    size_t vlen = strlen(val);
    while (vlen && isspace((unsigned char)val[vlen - 1])) vlen--;

    const key_def *d = key_find(key);
    if (!d && !key_is_group(key)) return unknown_key(err, errlen, &o, key);

    config_t cfg;
    config_init(&cfg);
    int st = 0;
    if (d && (d->type == KT_STRING || d->type == KT_ENUM) && val[0] != '"') {
        /* bare word: the text itself is the string (output=runs/x.h5, method=allreduce) */
        char *word = xmalloc(vlen + 1);
        memcpy(word, val, vlen);
        word[vlen] = 0;
        config_setting_t *v = config_setting_add(config_root_setting(&cfg), "v", CONFIG_TYPE_STRING);
        if (!v || !config_setting_set_string(v, word)) DIE("libconfig could not build a string setting");
        free(word);
    } else {
        size_t n = vlen + 16;
        char *text = xmalloc(n);
        snprintf(text, n, "v = %.*s\n;", (int)vlen, val);
        origin so = o;
        st = scan_int_literals(text, &so, 0, err, errlen);
        if (!st && (!config_read_string(&cfg, text) || config_setting_length(config_root_setting(&cfg)) != 1)) {
            char want[512];
            if (d) expect_text(d, NULL, want, sizeof want);
            else snprintf(want, sizeof want, "a group { ... }");
            st = oerr(err, errlen, &o, "key '%s': cannot read '%.*s' as a libconfig value (%s); expected %s",
                      key, (int)vlen, val, config_error_text(&cfg) ? config_error_text(&cfg) : "more than one value",
                      want);
        }
        free(text);
    }
    if (!st) st = apply_setting(e, origins, key, config_lookup(&cfg, "v"), &o, err, errlen);
    config_destroy(&cfg);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Validation (pass 3)                                                                       */

static int validate_key(const experiment *e, const key_def *d, const origin *o, char *err, size_t errlen) {
    char want[512], v[64];
    switch (d->type) {
    case KT_INT:
    case KT_INT64: {
        long long x = get_int(d, e), hi = d->ihi;
        if (d->hi_key) {
            long long h = get_int(key_find(d->hi_key), e) - (d->hi_open ? 1 : 0);
            if (h < hi) hi = h;
        }
        if (x < d->ilo || x > hi) {
            expect_text(d, e, want, sizeof want);
            return oerr(err, errlen, o, "key '%s': expected %s, got %lld", d->key, want, x);
        }
        return 0;
    }
    case KT_FLOAT: {
        double x = *CFIELD(e, d, double);
        int bad = (d->has_lo && (d->lo_open ? !(x > d->lo) : !(x >= d->lo))) ||
                  (d->has_hi && (d->hi_open ? !(x < d->hi) : !(x <= d->hi)));
        if (bad) {
            expect_text(d, e, want, sizeof want);
            fmt_double(v, sizeof v, x);
            return oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, want, v);
        }
        return 0;
    }
    case KT_STRING: {
        const char *s = CFIELD(e, d, char);
        int bad = d->str_check != S_ANY && !s[0];
        if (d->str_check == S_RUNNAME)
            for (const char *c = s; *c; c++)
                if (!isalnum((unsigned char)*c) && !strchr("._+-", *c)) bad = 1;
        if (bad) {
            char got[2 * CFG_PATH_MAX];
            size_t len = 0;
            put_quoted(got, sizeof got, &len, s);
            expect_text(d, e, want, sizeof want);
            return oerr(err, errlen, o, "key '%s': expected %s, got %s", d->key, want, got);
        }
        return 0;
    }
    case KT_ENUM: {
        const int idx = *CFIELD(e, d, int);
        if (idx < 0 || idx >= d->n_names) DIE("key %s holds no known name", d->key);
        if (d->built & (1u << idx)) return 0;
        char built[256];
        size_t len = 0;
        built[0] = 0;
        for (int i = 0; i < d->n_names; i++)
            if (d->built & (1u << i)) put(built, sizeof built, &len, "%s%s", len ? ", " : "", d->names[i]);
        return oerr(err, errlen, o, "%s = \"%s\" is not built yet (%s); built %s: %s", d->key,
                    d->names[idx], d->planned ? d->planned : "planned", d->noun, built);
    }
    case KT_LIST: {
        int ns = list_len(d, e);
        long long hi = get_int(key_find(d->hi_key), e);
        for (int i = 0; i < ns; i++) {
            long long x = list_get(d, e, i), prev = i > 0 ? list_get(d, e, i - 1) : 0;
            if (i > 0 && x <= prev)
                return oerr(err, errlen, o, "key '%s': expected strictly increasing %s, got %s[%d] = %lld %s %s[%d] = %lld",
                            d->key, d->values, d->key, i, x, x == prev ? "repeating" : "after", d->key, i - 1, prev);
            if (x < d->ilo || x > hi - (d->hi_open ? 1 : 0))
                return oerr(err, errlen, o, "key '%s': expected each %s in [%lld, %s (%lld)%c, got %s[%d] = %lld%s",
                            d->key, d->elem, d->ilo, d->hi_key, hi, d->hi_open ? ')' : ']', d->key, i, x,
                            d->hi_open && x == hi && d->hi_note ? d->hi_note : "");
        }
        return 0;
    }
    case KT_INTS: {
        const int *x = CFIELD(e, d, int);
        expect_text(d, e, want, sizeof want);
        for (int i = 0; i < d->n_max; i++)
            if (x[i] < d->ilo || x[i] > d->ihi)
                return oerr(err, errlen, o, "key '%s': expected %s, got %s[%d] = %d", d->key, want, d->key, i, x[i]);
        for (int i = 1; d->nondecr && i < d->n_max; i++)
            if (x[i] < x[i - 1])
                return oerr(err, errlen, o, "key '%s': expected %s, got [%d, %d]: reversed (write [%d, %d])", d->key, want,
                            x[0], x[1], x[1], x[0]);
        return 0;
    }
    case KT_BOOL: return 0;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Public API                                                                                */

void config_defaults(experiment *e) {
    memset(e, 0, sizeof *e);
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *d = &keys[i];
        switch (d->type) {
        case KT_INT:
        case KT_INT64:
        case KT_BOOL:
        case KT_ENUM: set_int(d, e, (long long)d->dflt); break;
        case KT_FLOAT: *FIELD(e, d, double) = d->dflt; break;
        case KT_STRING: set_string(d, e, d->dflt_s); break;
        case KT_LIST: *list_n(d, e) = 0; break;
        case KT_INTS: memcpy(FIELD(e, d, int), d->dflt_ints, (size_t)d->n_max * sizeof(int)); break;
        }
    }
}

/* output = "" stands for runs/<name>.h5. */
static int resolve_output(experiment *e, const origin *o, char *err, size_t errlen) {
    if (e->output[0]) return 0;
    int w = snprintf(e->output, sizeof e->output, "runs/%s.h5", e->name);
    if (w < 0 || (size_t)w >= sizeof e->output)
        return oerr(err, errlen, o, "key 'output': the default runs/<name>.h5 is longer than %d characters", CFG_PATH_MAX - 1);
    return 0;
}

/* Where key's value came from, as text, during config_load (for messages naming a second key). */
static const char *g_where_tmp(const origin *origins, const char *key) {
    static char buf[CFG_PATH_MAX + 64];
    origin_text(&origins[key_find(key) - keys], buf, sizeof buf);
    return buf;
}

int config_load(experiment *e, const char *path, char *const *sets, int n_sets, char *err, size_t errlen) {
    config_defaults(e);
    if (err && errlen) err[0] = 0;
    if (!path || !path[0]) return seterr(err, errlen, "no experiment file given");
    if (strlen(path) >= sizeof e->source)
        return seterr(err, errlen, "experiment file path is longer than %d characters: '%.60s...'", CFG_PATH_MAX - 1, path);
    snprintf(e->source, sizeof e->source, "%s", path);
    if (n_sets > 0 && !sets) return seterr(err, errlen, "%s: %d overrides announced but none given", path, n_sets);

    origin origins[N_KEYS];
    for (int i = 0; i < N_KEYS; i++) origins[i] = (origin){e->source, 0, NULL};

    /* Pass 1: the file. Read it ourselves first for a precise I/O message and the integer guard. */
    char *text;
    int st = read_text_file(path, &text, err, errlen, NULL);
    if (st) return st;
    origin so = {e->source, 1, NULL};
    n_included = 0;
    st = scan_int_literals(text, &so, 0, err, errlen);
    free(text);
    if (st) return st;

    config_t cfg;
    config_init(&cfg);
    if (!config_read_file(&cfg, path)) {
        if (config_error_type(&cfg) == CONFIG_ERR_FILE_IO)
            st = seterr(err, errlen, "cannot read experiment file '%s': %s", path, config_error_text(&cfg));
        else
            st = seterr(err, errlen, "%s:%d: syntax error in the experiment file: %s",
                        config_error_file(&cfg) ? config_error_file(&cfg) : path, config_error_line(&cfg),
                        config_error_text(&cfg));
        config_destroy(&cfg);
        return st;
    }
    const config_setting_t *root = config_root_setting(&cfg);
    origin base = {e->source, 0, NULL};
    for (int i = 0; !st && i < config_setting_length(root); i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        st = apply_setting(e, origins, config_setting_name(s), s, &base, err, errlen);
    }

    /* Pass 2: overrides, in order. Their origins point into sets[], which outlives this call;
     * file origins point into cfg (include file names), destroyed only after pass 3. */
    for (int i = 0; !st && i < n_sets; i++) {
        if (!sets[i]) { st = seterr(err, errlen, "--set: missing KEY=VALUE"); break; }
        st = apply_override(e, origins, sets[i], err, errlen);
    }

    /* Pass 3: ranges, built-ness, cross-key constraints, derived defaults. The cross-key
     * constraints are ranges bounded by another key (hi_key): backups < p (so backup's
     * N = p - backups >= 1), inject.fail_rank < p, inject.slow_ranks[i] < p, inject.fail_step <
     * iterations, alpha.steps < iterations, alpha.warmup < iterations. inject.delay_ms = 0 with
     * slow ranks or random_slow > 0 is allowed: nothing is delayed. */
    for (int i = 0; !st && i < N_KEYS; i++) st = validate_key(e, &keys[i], &origins[i], err, errlen);
    /* A failed worker needs another one to go on without it. */
    if (!st && e->precision == PRECISION_TF32 && e->device != DEVICE_CUDA)
        st = oerr(err, errlen, &origins[key_find("precision") - keys],
                  "key 'precision': \"tf32\" is for device = \"cuda\" (tensor cores); device = \"%s\" computes in "
                  "\"fp32\" or \"bf16\"", device_name(e->device));
    if (!st && e->precision == PRECISION_BF16 && e->device != DEVICE_CUDA && e->model.arch != ARCH_RESNET18)
        st = oerr(err, errlen, &origins[key_find("precision") - keys],
                  "key 'precision': \"bf16\" on device = \"%s\" is for model.arch = \"resnet18\" (its convolutions); "
                  "model.arch = \"%s\" computes in \"fp32\"", device_name(e->device), arch_name(e->model.arch));
    if (!st && e->inject.fail_rank >= 0 && e->p < 2)
        st = oerr(err, errlen, &origins[key_find("inject.fail_rank") - keys],
                  "key 'inject.fail_rank': a failure needs p >= 2 workers (with p = %d no worker is left to train); use -1 for none", e->p);
    /* NCCL all-reduces GPU memory, and only allreduce uses an all-reduce for its gradients. */
    if (!st && e->comm == COMM_NCCL && e->device != DEVICE_CUDA)
        st = oerr(err, errlen, &origins[key_find("comm") - keys],
                  "key 'comm': \"nccl\" is for device = \"cuda\" (NCCL all-reduces GPU memory); device = \"%s\" uses "
                  "comm = \"mpi\"", device_name(e->device));
    if (!st && e->comm == COMM_NCCL && e->method != METHOD_ALLREDUCE)
        st = oerr(err, errlen, &origins[key_find("comm") - keys],
                  "key 'comm': \"nccl\" is for method = \"allreduce\"; method '%s' exchanges point to point "
                  "through MPI (use comm = \"mpi\")", method_name(e->method));
    /* The JPEG input path: a pack to read, and a crop that every resize can fill. */
    const int jpeg = e->data.format == FORMAT_JPEG;
    if (!st && jpeg && !e->data.dir[0])
        st = oerr(err, errlen, &origins[key_find("data.dir") - keys],
                  "key 'data.dir': data.format = \"jpeg\" needs the pack directory (the OUT of dsgd-run --pack SRC OUT)");
    if (!st && jpeg && e->data.augment == AUGMENT_SCALE && e->data.crop > e->data.scale[0])
        st = oerr(err, errlen, &origins[key_find("data.crop") - keys],
                  "key 'data.crop': a %d-pixel crop does not fit the smallest shorter side of data.scale = [%d, %d] (%s); "
                  "need data.crop <= data.scale[0]", e->data.crop, e->data.scale[0], e->data.scale[1],
                  g_where_tmp(origins, "data.scale"));
    if (!st && jpeg && e->data.eval_resize < e->data.crop)
        st = oerr(err, errlen, &origins[key_find("data.eval_resize") - keys],
                  "key 'data.eval_resize': %d is smaller than data.crop = %d (%s); the centre crop must fit: need "
                  "data.eval_resize >= data.crop", e->data.eval_resize, e->data.crop, g_where_tmp(origins, "data.crop"));
    if (!st) st = resolve_output(e, &origins[key_find("output") - keys], err, errlen);
    /* Keep where each value came from for the checks made after loading (config_where). */
    for (int i = 0; !st && i < N_KEYS; i++) origin_text(&origins[i], g_where[i], sizeof g_where[i]);
    config_destroy(&cfg);
    return st;
}

const char *config_where(const char *key) {
    const key_def *d = key_find(key);
    return d && g_where[d - keys][0] ? g_where[d - keys] : "";
}

int method_has_servers(method_kind m) { return m == METHOD_PS || m == METHOD_EASGD || m == METHOD_BACKUP; }

int config_world_size(const experiment *e) { return method_has_servers(e->method) ? e->p + e->servers : e->p; }

int config_check_world(const experiment *e, int world_size, char *err, size_t errlen) {
    if (config_world_size(e) == world_size) return 0;
    if (method_has_servers(e->method))
        return seterr(err, errlen,
                      "%s: key 'p': method '%s' runs on p + servers = %d + %d = %d MPI ranks but MPI started %d; "
                      "run mpiexec -n %d, or change p or servers",
                      config_where("p")[0] ? config_where("p") : e->source, method_name(e->method), e->p, e->servers,
                      config_world_size(e), world_size, config_world_size(e));
    return seterr(err, errlen,
                  "%s: key 'p': the experiment asks for p = %d worker ranks but MPI started %d; "
                  "run mpiexec -n %d, or set p = %d (--set p=%d)",
                  config_where("p")[0] ? config_where("p") : e->source, e->p, world_size, e->p, world_size, world_size);
}

int config_to_text(const experiment *e, char *buf, size_t n) {
    size_t len = 0;
    char v[4 * CFG_PATH_MAX + 8], src[CFG_PATH_MAX];
    if (n) buf[0] = 0;
    /* the source path in a comment: no newlines or control characters that would end it */
    snprintf(src, sizeof src, "%s", e->source);
    for (char *c = src; *c; c++) if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    put(buf, n, &len, "# dsgd-run %s experiment, resolved (every key, defaults included)%s%s\n", DSGD_VERSION,
        src[0] ? "; read from " : "", src);
    const char *group = NULL;
    size_t glen = 0;
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *d = &keys[i];
        const char *dot = strchr(d->key, '.');
        size_t kg = dot ? (size_t)(dot - d->key) : 0;
        if (group && (kg != glen || strncmp(group, d->key, glen))) { put(buf, n, &len, "};\n"); group = NULL; }
        if (dot && !group) { group = d->key; glen = kg; put(buf, n, &len, "%.*s = {\n", (int)kg, d->key); }
        value_text(d, e, v, sizeof v);
        put(buf, n, &len, "%s%s = %s;\n", group ? "  " : "", dot ? dot + 1 : d->key, v);
    }
    if (group) put(buf, n, &len, "};\n");
    if (!n) return 0;
    return (int)(len < n ? len : n - 1);
}

/* The default value of key d as text, with output's default resolved for e's name. */
static void default_text(const key_def *d, const experiment *e, char *buf, size_t n) {
    static experiment dflt; /* large: keep it off the stack */
    config_defaults(&dflt);
    if (e && d->type == KT_STRING && !strcmp(d->key, "output"))
        snprintf(dflt.output, sizeof dflt.output, "runs/%s.h5", e->name);
    value_text(d, &dflt, buf, n);
}

void config_print_table(const experiment *e, FILE *f) {
    char v[4 * CFG_PATH_MAX + 8], dv[4 * CFG_PATH_MAX + 8];
    int kw = 3, vw = 5;
    for (int i = 0; i < N_KEYS; i++) {
        value_text(&keys[i], e, v, sizeof v);
        if ((int)strlen(keys[i].key) > kw) kw = (int)strlen(keys[i].key);
        if ((int)strlen(v) > vw) vw = (int)strlen(v);
    }
    if (vw > 64) vw = 64; /* longer paths overflow rather than widen every row */
    fprintf(f, "experiment %s (* = differs from the default)\n", e->source);
    fprintf(f, "  %-*s  %-*s  %s\n", kw, "key", vw, "value", "unit");
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *d = &keys[i];
        value_text(d, e, v, sizeof v);
        default_text(d, e, dv, sizeof dv);
        int same = !strcmp(v, dv);
        fprintf(f, "%c %-*s  %-*s  %-10s  %s%s%s\n", same ? ' ' : '*', kw, d->key, vw, v, d->unit[0] ? d->unit : "-",
                same ? "(default)" : "(default ", same ? "" : dv, same ? "" : ")");
    }
}

static const char *type_name(const key_def *d) {
    switch (d->type) {
    case KT_INT: return "int";
    case KT_INT64: return "int64";
    case KT_FLOAT: return "float";
    case KT_BOOL: return "bool";
    case KT_STRING: return "string";
    case KT_ENUM: return "enum";
    case KT_LIST: return d->elem_int ? "int list" : "int64 list";
    case KT_INTS: return d->n_max == 2 ? "int[2]" : d->n_max == 3 ? "int[3]" : "int[]";
    }
    return "?";
}

/* The allowed values of key d, short form for --help and the docs ("> 0", "in [0, 1)"). */
static void range_text(const key_def *d, char *buf, size_t n) {
    size_t len = 0;
    char want[512];
    if (n) buf[0] = 0;
    switch (d->type) {
    case KT_INT:
    case KT_INT64:
    case KT_FLOAT:
        expect_text(d, NULL, want, sizeof want);
        put(buf, n, &len, "%s", strncmp(want, "an integer ", 11) ? want + 9 /* "a number " */ : want + 11);
        break;
    case KT_LIST:
        put(buf, n, &len, "strictly increasing, each in [%lld, %s%c, at most %d", d->ilo, d->hi_key, d->hi_open ? ')' : ']', d->n_max);
        break;
    case KT_INTS:
        if (d->nondecr) put(buf, n, &len, "[min, max], min <= max, each in [%lld, %lld]", d->ilo, d->ihi);
        else put(buf, n, &len, "%d integers, each in [%lld, %lld]", d->n_max, d->ilo, d->ihi);
        break;
    case KT_BOOL: put(buf, n, &len, "true, false"); break;
    case KT_STRING:
        if (d->str_check == S_RUNNAME) put(buf, n, &len, "letters, digits, ._+-; 1..%zu chars", d->size - 1);
        else put(buf, n, &len, "%s..%zu chars", d->str_check == S_NONEMPTY ? "1" : "0", d->size - 1);
        break;
    case KT_ENUM: {
        int any_planned = 0;
        for (int i = 0; i < d->n_names; i++)
            if (d->built & (1u << i)) put(buf, n, &len, "%s%s", len ? ", " : "", d->names[i]);
            else any_planned = 1;
        if (any_planned) {
            put(buf, n, &len, " (planned:");
            int first = 1;
            for (int i = 0; i < d->n_names; i++)
                if (!(d->built & (1u << i))) { put(buf, n, &len, "%s %s", first ? "" : ",", d->names[i]); first = 0; }
            put(buf, n, &len, ")");
        }
        break;
    }
    }
}

void config_print_keys(FILE *f) {
    char dv[4 * CFG_PATH_MAX + 8], r[512];
    fprintf(f, "  %-18s %-10s %-10s %-12s %s\n", "key", "type", "unit", "default", "allowed");
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *d = &keys[i];
        default_text(d, NULL, dv, sizeof dv);
        range_text(d, r, sizeof r);
        int long_dflt = strlen(dv) > 12; /* the data paths: default on a line of its own */
        fprintf(f, "  %-18s %-10s %-10s %-12s %s\n      %s\n", d->key, type_name(d), d->unit[0] ? d->unit : "-",
                long_dflt ? "(below)" : dv, r, d->doc);
        if (long_dflt) fprintf(f, "      default %s\n", dv);
    }
}

/* Markdown-escape a table cell: '|' breaks the row; outside code, '<' would start an HTML tag
 * and '*' emphasis. */
static void md_cell(FILE *f, const char *s, int code) {
    if (code) fputc('`', f);
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else if (!code && *s == '<') fputs("&lt;", f);
        else if (!code && *s == '*') fputs("\\*", f);
        else fputc(*s, f);
    }
    if (code) fputc('`', f);
}

void config_print_markdown(FILE *f) {
    char dv[4 * CFG_PATH_MAX + 8], r[512];
    fprintf(f, "| key | type | default | allowed | unit | meaning |\n");
    fprintf(f, "|---|---|---|---|---|---|\n");
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *d = &keys[i];
        default_text(d, NULL, dv, sizeof dv);
        range_text(d, r, sizeof r);
        fputs("| ", f);
        md_cell(f, d->key, 1);
        fprintf(f, " | %s | ", type_name(d));
        md_cell(f, dv, 1);
        fputs(" | ", f);
        md_cell(f, r, 0);
        fprintf(f, " | %s | ", d->unit[0] ? d->unit : "-");
        md_cell(f, d->doc, 0);
        fputs(" |\n", f);
    }
}

/* The name of an enum value ("?" for none). */
#define NAME_OF(fn, kind, names) \
    const char *fn(kind v) { return (int)v >= 0 && (int)v < NNAMES(names) ? names[v] : "?"; }
NAME_OF(method_name, method_kind, method_names)
NAME_OF(schedule_name, schedule_kind, schedule_names)
NAME_OF(stem_name, stem_kind, stem_names)
NAME_OF(arch_name, arch_kind, arch_names)
NAME_OF(gossip_order_name, gossip_order_kind, gossip_order_names)
NAME_OF(delay_dist_name, delay_dist_kind, delay_dist_names)
NAME_OF(data_format_name, data_format_kind, format_names)
NAME_OF(augment_name, augment_kind, augment_names)
NAME_OF(interp_name, interp_kind, interp_names)
NAME_OF(comm_name, comm_kind, comm_names)
NAME_OF(device_name, device_kind, device_names)
NAME_OF(precision_name, precision_kind, precision_names)
