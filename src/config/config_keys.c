/* config_keys.c — the key layer: the key table, every key of the experiment file with its type,
 * field, range, default, unit and one line of documentation (config_keys[]); the names of the
 * enums' values; finding a key, and "did you mean"; reading and writing the field a key
 * describes; every key at its default (config_defaults); values as libconfig text and what a key
 * expects. config.c (loading and validating) and config_print.c (printing) both build on this file
 * and never call each other. */
#include "config_keys.h"

#include "sim/simmodel.h"
#include "util/util.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define NNAMES(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The names of each enum's values, in the order of its enum (config.h), and the function fn that
 * names a value ("?" for none). */
#define NAMES(fn, kind, names, ...)                   \
    static const char *const names[] = {__VA_ARGS__}; \
    const char *fn(kind v) { return (int)v >= 0 && (int)v < NNAMES(names) ? names[v] : "?"; }
NAMES(method_name, method_kind, method_names, "allreduce", "ps", "easgd", "gossip_pull", "gossip_push", "backup")
NAMES(schedule_name, schedule_kind, schedule_names, "step", "constant", "cosine")
NAMES(stem_name, stem_kind, stem_names, "cifar", "imagenet")
NAMES(arch_name, arch_kind, arch_names, "resnet18", "linear")
NAMES(data_format_name, data_format_kind, format_names, "idx", "jpeg", "synthetic")
NAMES(augment_name, augment_kind, augment_names, "scale", "rrc", "none")
NAMES(interp_name, interp_kind, interp_names, "auto", "bicubic", "bilinear")
NAMES(comm_name, comm_kind, comm_names, "mpi", "nccl")
NAMES(device_name, device_kind, device_names, "cpu", "cuda")
NAMES(precision_name, precision_kind, precision_names, "fp32", "tf32", "bf16")
NAMES(gossip_order_name, gossip_order_kind, gossip_order_names, "stale", "fresh")
NAMES(delay_dist_name, delay_dist_kind, delay_dist_names, "fixed", "exponential", "lognormal")
static const char *const resume_names[] = {"never", "auto"};
#define FSIZE(f) sizeof(((experiment *)0)->f)
/* What every key has: its name, type t, and field f of experiment. */
#define KEY(k, t, f) .key = k, .type = t, .off = offsetof(experiment, f), .size = FSIZE(f)
#define K_INT(k, f, d, l, h, u, doc_) { KEY(k, KT_INT, f), .dflt = d, .ilo = l, .ihi = h, .unit = u, .doc = doc_ }
/* A long or uint64_t field (u64 from the field's type). */
#define K_INT64(k, f, d, l, u, doc_)                                                                                   \
    { KEY(k, KT_INT64, f), .dflt = d, .u64 = _Generic(((experiment *)0)->f, uint64_t: 1, default: 0), .ilo = l,        \
      .ihi = LLONG_MAX, .unit = u, .doc = doc_ }
/* An integer key (type t: KT_INT or KT_INT64) below another integer key: in [l, hk). */
#define K_BELOW(k, t, f, d, l, hk, u, doc_)                                                                            \
    { KEY(k, t, f), .dflt = d, .ilo = l, .ihi = (t) == KT_INT ? INT_MAX : LLONG_MAX, .hi_key = hk, .hi_open = 1,       \
      .unit = u, .doc = doc_ }
#define K_FLOAT(k, f, d, hl, lopen, l, hh, hopen, h, u, doc_)                                                          \
    { KEY(k, KT_FLOAT, f), .dflt = d, .has_lo = hl, .lo_open = lopen, .lo = l, .has_hi = hh, .hi_open = hopen,         \
      .hi = h, .unit = u, .doc = doc_ }
#define K_BOOL(k, f, d, doc_) { KEY(k, KT_BOOL, f), .dflt = d, .unit = "", .doc = doc_ }
#define K_STRING(k, f, d, chk, u, doc_) { KEY(k, KT_STRING, f), .dflt_s = d, .str_check = chk, .unit = u, .doc = doc_ }
#define K_ENUM(k, f, d, nm, blt, pl, nn, doc_)                                                                         \
    { KEY(k, KT_ENUM, f), .dflt = d, .names = nm, .n_names = NNAMES(nm), .built = blt, .planned = pl, .noun = nn,      \
      .unit = "", .doc = doc_ }

/* A strictly increasing list of integers, each in [l, hk) (hk: another integer key). */
#define K_LIST(k, f, fn, ei, l, hk, el, els, vals, note, u, doc_)                                                      \
    { KEY(k, KT_LIST, f), .off_n = offsetof(experiment, fn), .elem_int = ei, .n_max = (int)(FSIZE(f) / FSIZE(f[0])),   \
      .ilo = l, .ihi = LLONG_MAX, .hi_key = hk, .hi_open = 1, .elem = el, .elems = els, .values = vals,                \
      .hi_note = note, .unit = u, .doc = doc_ }

/* A fixed-size int array (KT_INTS): each element in [l, h], default dv (n_max values). */
#define K_INTS(k, f, dv, l, h, nd, u, doc_)                                                                            \
    { KEY(k, KT_INTS, f), .elem_int = 1, .n_max = (int)(FSIZE(f) / FSIZE(f[0])), .ilo = l, .ihi = h,                   \
      .dflt_ints = dv, .nondecr = nd, .unit = u, .doc = doc_ }

#define FASHION "/usr/share/datasets/fashion-mnist/"
static const int dflt_scale[2] = {256, 480}, dflt_shape[3] = {3, 224, 224};

/* Defaults are the paper's (Jin et al. 2016 §4.2): α = 0.1, Nesterov µ = 0.9, λ = 1e-4,
 * EASGD τ = 10, β = 0.8. Groups must be contiguous (config_to_text relies on it). */
const key_def config_keys[] = {
    K_STRING("name", name, "dsgd", S_RUNNAME, "",
             "run name: progress lines, provenance, default output runs/<name>.h5"),
    K_INT64("seed", seed, 1, 0, "", "seeds the initialisation and the per-epoch permutation of the training set"),
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
    K_BELOW("alpha.warmup", KT_INT64, alpha.warmup, 0, 0, "iterations", "iterations",
            "linear warm-up from α_0/warmup to α_0 over this many iterations (0: none)"),
    K_FLOAT("momentum", momentum, 0.9, 1, 0, 0, 1, 1, 1, "", "momentum µ"),
    K_BOOL("nesterov", nesterov, 1, "Nesterov momentum (the paper) if true, heavy ball if false"),
    K_FLOAT("weight_decay", weight_decay, 1e-4, 1, 0, 0, 0, 0, 0, "",
            "L2 weight decay λ (added to the gradient as λ·w)"),
    K_INT("tau", tau, 10, 1, INT_MAX, "iterations", "EASGD communication period τ (used by easgd)"),
    K_FLOAT("beta", beta, 0.8, 1, 1, 0, 1, 0, 1, "", "EASGD moving rate β = p·a (used by easgd)"),
    K_INT("servers", servers, 1, 1, 64, "ranks",
          "parameter-server ranks (ps, easgd, backup), started after the p workers; parameters are sharded over them"),
    K_BELOW("backups", KT_INT, backups, 0, 0, "p", "ranks",
            "backup workers (backup, Chen et al. 2016): each step aggregates the first N = p - backups gradients"),
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
    K_BELOW("inject.fail_rank", KT_INT, inject.fail_rank, -1, -1, "p", "",
            "worker that stops for good at fail_step (a simulated failure); -1: none"),
    K_BELOW("inject.fail_step", KT_INT64, inject.fail_step, 0, 0, "iterations", "iterations",
            "0-based step at which fail_rank stops (it completes fail_step steps)"),
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
          "jpeg: decode threads per rank, working ahead of training; 0: a quarter of the rank's cores (device cuda: the "
          "cores but one), at least 1 (docs/data.md, Loading)"),
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
    K_BOOL("data.dct_scale", data.dct_scale, 0,
           "jpeg: decode a sample at 1/2, 1/4 or 1/8 (libjpeg's DCT scaling) where the resize still shrinks the "
           "scaled image by 2x or more, then resample as usual: faster on large photos, pixels no longer Pillow's "
           "full-size ones (Pillow's draft + resize instead; docs/data.md, DCT scaling); training and evaluation"),
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
          "compute threads per rank; 0: the rank's cores (its affinity mask, shared with the node's ranks bound to the "
          "same mask) less the decode threads (docs/data.md, Loading)"),
    K_STRING("output", output, "", S_ANY, "path",
             "HDF5 run file; \"\" means runs/<name>.h5; never an input of the run (experiment file, data files), "
             "whatever overwrite says"),
    K_BOOL("overwrite", overwrite, 0,
           "replace an existing output that is an earlier run file of dsgd-run instead of refusing (any other file is "
           "refused whatever overwrite says)"),
    K_ENUM("resume", resume, RESUME_NEVER, resume_names, 0x3u, NULL, "resume modes",
           "never: start afresh (an existing output is refused); auto: continue from the checkpoint and run file "
           "of an earlier run of this experiment if there is a checkpoint, else start afresh (--resume: must continue)"),
    K_INT64("stop_at", stop_at, 0, 0, "s (Unix time)",
            "from this time on (seconds since 1970, UTC; 0: never) every rank writes a checkpoint at the next point the "
            "method allows and the run stops with exit status 3, as after a SIGTERM; job scripts set it to the job's end "
            "minus a margin; not part of the experiment (a continuation may have another); see docs/checkpoint.md"),
    K_INT64("checkpoint.every", checkpoint.every, 0, 0, "iterations",
            "write a checkpoint every this many iterations (0: only on SIGTERM / SIGUSR1); see docs/checkpoint.md"),
    K_STRING("checkpoint.path", checkpoint.path, "", S_ANY, "path",
             "checkpoint directory; \"\" means the output without .h5, plus .ckpt (runs/<name>.ckpt); must not hold an "
             "input of the run"),
    K_BOOL("checkpoint.bitwise", checkpoint.bitwise, 1,
           "a resume on device cpu must run each rank with the compute threads and the oneDNN ISA its checkpoint part "
           "was written with (the order of oneDNN's sums depends on them, so only then does the run continue bitwise); "
           "false: continue with others, recorded in the run file"),
    K_INT("checkpoint.keep", checkpoint.keep, 2, 1, 1000, "checkpoints",
          "committed checkpoints kept: the newest and the keep - 1 before it (a resume falls back to an older one when "
          "the newest cannot be read); 1: only the newest"),
    K_BOOL("checkpoint.keep_completed", checkpoint.keep_completed, 0,
           "keep the checkpoints of a run that completed; false: they are removed once its run file says completed"),
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
    K_BOOL("sim.enabled", sim.enabled, 0,
           "sim mode (docs/simulate.md): the run file's time axis is a virtual clock per rank, compute and "
           "communication charged from models of a target cluster; the training itself is real. Every method but asynchronous gossip so far (gossip needs synchronous = true)"),
    K_ENUM("sim.device", sim.device, SIM_DEV_K80, sim_device_names, (1u << SIM_DEV_COUNT) - 1, NULL, "devices",
           "whose ResNet-18 step time at b is charged per step (docs/simulate-models.md has each value's source); "
           "measured: this rank's own measured data + compute + update time (validation)"),
    K_FLOAT("sim.step_ms", sim.step_ms, 0, 1, 0, 0, 1, 0, 3.6e6, "ms",
            "compute time charged per step; 0: sim.device's table at b"),
    /* At most 2^40 parameters (4 TiB in fp32): 4 bytes each never wraps a size_t. */
    {KEY("sim.model_params", KT_INT64, sim.model_params), .dflt = 11689512, .ilo = 1, .ihi = 1LL << 40, .unit = "parameters",
     .doc = "parameters of the modelled network (ResNet-18: 11,689,512), charged on the wire in fp32 (4 bytes each)"},
    K_ENUM("sim.network", sim.network, SIM_NET_10GBE, sim_network_names, (1u << SIM_NET_COUNT) - 1, NULL, "networks",
           "the target's network: a preset's per-link latency and bandwidth (docs/simulate-models.md), or custom: "
           "sim.latency_us and sim.bandwidth_gbps"),
    K_FLOAT("sim.latency_us", sim.latency_us, 5, 1, 0, 0, 1, 0, 1e6, "us",
            "network custom: latency per link (a route inside a switch is 2 links)"),
    K_FLOAT("sim.bandwidth_gbps", sim.bandwidth_gbps, 10, 1, 0, 1e-3, 1, 0, 1e6, "Gbit/s",
            "network custom: bandwidth of each NIC and link, each direction"),
    K_ENUM("sim.topology", sim.topology, SIM_TOPO_FLAT, sim_topology_names, (1u << SIM_TOPO_COUNT) - 1, NULL, "topologies",
           "flat: every host on one non-blocking switch; fat_tree: two levels, sim.leaf_size hosts per leaf, uplinks "
           "oversubscribed by sim.oversubscription"),
    K_INT("sim.leaf_size", sim.leaf_size, 16, 1, INT_MAX, "hosts",
          "topology fat_tree: hosts per leaf switch; one that holds every rank makes the fat tree one leaf, the flat "
          "network (a note says so)"),
    K_FLOAT("sim.oversubscription", sim.oversubscription, 1, 1, 0, 1, 1, 0, 1e6, "",
            "topology fat_tree: oversubscription of the leaves' uplinks (1: full bisection)"),
    K_ENUM("sim.allreduce", sim.allreduce, SIM_AR_RING, sim_allreduce_names, (1u << SIM_AR_COUNT) - 1, NULL, "algorithms",
           "the target's all-reduce algorithm, charged in closed form in chunks of 4 MiB as the real code runs it"),
    K_FLOAT("sim.jitter", sim.jitter, 0, 1, 0, 0, 1, 0, 100, "",
            "coefficient of variation of a multiplicative lognormal (mean 1) compute jitter, drawn per (seed, worker, "
            "step); 0: none"),
};
#define N_KEYS ((int)(sizeof(config_keys) / sizeof(config_keys[0])))
const int config_n_keys = N_KEYS;
_Static_assert(N_KEYS <= CONFIG_MAX_KEYS, "raise CONFIG_MAX_KEYS (config_keys.h)");

/* Common misnomers of the keys (other frameworks' names), offered as "did you mean". */
static const struct { const char *alias, *key; } aliases[] = {
    {"lr", "alpha.base"},       {"learning_rate", "alpha.base"}, {"mu", "momentum"},
    {"lambda", "weight_decay"}, {"wd", "weight_decay"},          {"batch_size", "b"},
    {"minibatch", "b"},         {"workers", "p"},                {"ranks", "p"},
    {"np", "p"},                {"world_size", "p"},             {"gamma", "alpha.factor"},
    {"lr_steps", "alpha.steps"}, {"milestones", "alpha.steps"},  {"iters", "iterations"},
    {"num_servers", "servers"}, {"backup_workers", "backups"},
};

const key_def *config_key_find(const char *key) {
    for (int i = 0; i < N_KEYS; i++)
        if (!strcmp(config_keys[i].key, key)) return &config_keys[i];
    return NULL;
}

/* 1 if path names a group of keys ("alpha" for "alpha.base"). */
int config_key_is_group(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < N_KEYS; i++)
        if (!strncmp(config_keys[i].key, path, n) && config_keys[i].key[n] == '.') return 1;
    return 0;
}

/* Integer fields are read and written through these so that the table can treat int, long and
 * uint64_t alike. */
long long config_get_int(const key_def *d, const experiment *e) {
    if (d->type == KT_INT || d->type == KT_BOOL || d->type == KT_ENUM) return *CFIELD(e, d, int);
    if (d->u64) return (long long)*CFIELD(e, d, uint64_t); /* validated to be >= 0 */
    return *CFIELD(e, d, long);
}

void config_set_int(const key_def *d, experiment *e, long long v) {
    if (d->type == KT_INT || d->type == KT_BOOL || d->type == KT_ENUM) *FIELD(e, d, int) = (int)v;
    else if (d->u64) *FIELD(e, d, uint64_t) = (uint64_t)v;
    else *FIELD(e, d, long) = (long)v;
}

/* KT_LIST (and KT_INTS, whose length is n_max): the element count, and element i (int or long)
 * as a long long. */
int *config_list_n(const key_def *d, experiment *e) { return (int *)((char *)e + d->off_n); }
int config_list_len(const key_def *d, const experiment *e) {
    return d->type == KT_INTS ? d->n_max : *(const int *)((const char *)e + d->off_n);
}
long long config_list_get(const key_def *d, const experiment *e, int i) {
    return d->elem_int ? (long long)CFIELD(e, d, int)[i] : (long long)CFIELD(e, d, long)[i];
}
void config_list_set(const key_def *d, experiment *e, int i, long long v) {
    if (d->elem_int) FIELD(e, d, int)[i] = (int)v;
    else FIELD(e, d, long)[i] = (long)v;
}

void config_set_string(const key_def *d, experiment *e, const char *s) {
    char *f = FIELD(e, d, char);
    memset(f, 0, d->size); /* zero the tail so that whole structs compare with memcmp */
    memcpy(f, s, strlen(s) < d->size ? strlen(s) : d->size - 1);
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

const char *config_value_suggest(const key_def *d, const char *v) {
    char low[64];
    size_t n = strlen(v);
    if (n >= sizeof low) return NULL;
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)v[i]);
    const char *best = NULL;
    int bestd = 1000;
    for (int i = 0; i < d->n_names; i++) { /* the field's word for device "gpu" is "cuda" (not "cpu", one letter off) */
        const int dist = !strcmp(low, "gpu") && !strcmp(d->names[i], "cuda") ? 0 : edit_distance(low, d->names[i]);
        if (dist < bestd) bestd = dist, best = d->names[i];
    }
    return best && (bestd == 0 || (bestd <= 2 && 2 * bestd <= (int)n)) ? best : NULL;
}

/* The known key (or group) closest to an unknown one, or NULL: the only key with the same last
 * component ("base" -> "alpha.base"), else the nearest by edit distance when it is small
 * (≤ 3 and ≤ half the length), else a known alias ("lr" -> "alpha.base"). */
const char *config_key_suggest(const char *unknown) {
    static const char *const groups[] = {"alpha", "inject", "model", "data", "eval", "checkpoint", "sim"};
    /* the right name in the wrong group (or at the top level) first: an exact hit */
    const char *last = strrchr(unknown, '.');
    last = last ? last + 1 : unknown;
    const char *match = NULL;
    int n_match = 0;
    for (int i = 0; i < N_KEYS; i++) {
        const char *kl = strrchr(config_keys[i].key, '.');
        kl = kl ? kl + 1 : config_keys[i].key;
        if (!strcmp(kl, last) && strcmp(config_keys[i].key, unknown)) { match = config_keys[i].key; n_match++; }
    }
    if (n_match == 1) return match;
    const char *best = NULL;
    int bestd = 1000;
    for (int i = 0; i < N_KEYS + NNAMES(groups); i++) {
        const char *k = i < N_KEYS ? config_keys[i].key : groups[i - N_KEYS];
        int dist = edit_distance(unknown, k);
        if (dist < bestd) { bestd = dist; best = k; }
    }
    if (best && bestd <= 3 && 2 * bestd <= (int)strlen(unknown)) return best;
    for (int i = 0; i < NNAMES(aliases); i++)
        if (!strcmp(aliases[i].alias, last)) return aliases[i].key;
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The defaults, and values as text (for config.c's messages and config_print.c's output)    */

/* Every key at its default (config.h). */
void config_defaults(experiment *e) {
    memset(e, 0, sizeof *e);
    for (int i = 0; i < config_n_keys; i++) {
        const key_def *d = &config_keys[i];
        switch (d->type) {
        case KT_INT:
        case KT_INT64:
        case KT_BOOL:
        case KT_ENUM: config_set_int(d, e, (long long)d->dflt); break;
        case KT_FLOAT: *FIELD(e, d, double) = d->dflt; break;
        case KT_STRING: config_set_string(d, e, d->dflt_s); break;
        case KT_LIST: *config_list_n(d, e) = 0; break;
        case KT_INTS: memcpy(FIELD(e, d, int), d->dflt_ints, (size_t)d->n_max * sizeof(int)); break;
        }
    }
}

/* Shortest "%.*g" that reads back to exactly x (whole numbers below 1e15 without an exponent),
 * always with a '.' or an exponent so libconfig reads it as a float. */
void config_fmt_double(char *buf, size_t n, double x) {
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
void config_fmt_int(char *buf, size_t n, long long v) {
    snprintf(buf, n, "%lld%s", v, (v > INT_MAX || v < INT_MIN) ? "L" : "");
}

/* Append s as a libconfig string literal (escaped) to buf at *len, snprintf-style: *len keeps
 * counting past n so the caller can tell the full length. */
void config_put_quoted(char *buf, size_t n, size_t *len, const char *s) {
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

/* printf-append to buf at *len, snprintf-style (see config_put_quoted). */
void config_put(char *buf, size_t n, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(*len < n ? buf + *len : NULL, *len < n ? n - *len : 0, fmt, ap);
    va_end(ap);
    if (w > 0) *len += (size_t)w;
}

/* What is expected of key d, for messages: "an integer >= 1", "a number in [0, 1)". */
void config_expect_text(const key_def *d, const experiment *e, char *buf, size_t n) {
    size_t len = 0;
    switch (d->type) {
    case KT_INT:
    case KT_INT64:
    case KT_LIST: {
        long long hi = d->ihi;
        const char *what = d->type == KT_LIST ? "a strictly increasing list of integers, each" : "an integer";
        if (d->hi_key) {
            config_put(buf, n, &len, "%s >= %lld and %s %s", what, d->ilo, d->hi_open ? "<" : "<=", d->hi_key);
            if (e) config_put(buf, n, &len, " (%lld)", config_get_int(config_key_find(d->hi_key), e));
        } else if ((d->type == KT_INT && hi == INT_MAX) || hi == LLONG_MAX)
            config_put(buf, n, &len, "%s >= %lld", what, d->ilo);
        else config_put(buf, n, &len, "%s in [%lld, %lld]", what, d->ilo, hi);
        break;
    }
    case KT_FLOAT: {
        char lo[40], hi[40];
        config_fmt_double(lo, sizeof lo, d->lo);
        config_fmt_double(hi, sizeof hi, d->hi);
        /* show bounds as written in the docs: 0 and 1, not 0.0 and 1.0 */
        for (char *s = lo; s; s = s == lo ? hi : NULL) {
            size_t l = strlen(s);
            if (l > 2 && !strcmp(s + l - 2, ".0")) s[l - 2] = 0;
        }
        if (d->has_lo && d->has_hi)
            config_put(buf, n, &len, "a number in %c%s, %s%c", d->lo_open ? '(' : '[', lo, hi, d->hi_open ? ')' : ']');
        else if (d->has_lo) config_put(buf, n, &len, "a number %s %s", d->lo_open ? ">" : ">=", lo);
        else if (d->has_hi) config_put(buf, n, &len, "a number %s %s", d->hi_open ? "<" : "<=", hi);
        else config_put(buf, n, &len, "a number");
        break;
    }
    case KT_INTS:
        if (d->nondecr) config_put(buf, n, &len, "[min, max]: %d integers in [%lld, %lld] with min <= max", d->n_max, d->ilo, d->ihi);
        else config_put(buf, n, &len, "a list of %d integers, each in [%lld, %lld]", d->n_max, d->ilo, d->ihi);
        break;
    case KT_BOOL: config_put(buf, n, &len, "a boolean (true or false)"); break;
    case KT_STRING:
        if (d->str_check == S_RUNNAME)
            config_put(buf, n, &len, "a non-empty string of letters, digits and ._+- (at most %zu characters)", d->size - 1);
        else config_put(buf, n, &len, "a %sstring of at most %zu characters", d->str_check == S_NONEMPTY ? "non-empty " : "",
                        d->size - 1);
        break;
    case KT_ENUM:
        config_put(buf, n, &len, "one of ");
        for (int i = 0; i < d->n_names; i++) config_put(buf, n, &len, "%s\"%s\"", i ? ", " : "", d->names[i]);
        break;
    }
}
