/* config.h — the experiment: every key of the libconfig experiment file, its defaults (the
 * paper's: Jin et al. 2016 §4.2) and its validation. One table (config_keys.c) drives the parser,
 * `--set`, `--check`, `--help` and docs/config.md, so they cannot drift apart.
 *
 * Errors: every function that can fail on user input returns 0 on success or EXIT_BADINPUT (2)
 * and writes a one-line message into err naming the file, the line (where libconfig knows it),
 * the key, what was expected and what was found. */
#ifndef DSGD_CONFIG_H
#define DSGD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CFG_PATH_MAX 1024
#define CFG_MAX_STEPS 32
/* A buffer of this many bytes always holds config_to_text's output (every string key at its
 * longest, fully escaped). */
#define CFG_TEXT_MAX 40960

typedef enum { METHOD_ALLREDUCE, METHOD_PS, METHOD_EASGD, METHOD_GOSSIP_PULL, METHOD_GOSSIP_PUSH, METHOD_BACKUP } method_kind;
typedef enum { SCHED_STEP, SCHED_CONSTANT, SCHED_COSINE } schedule_kind;
typedef enum { STEM_CIFAR, STEM_IMAGENET } stem_kind;
typedef enum { ARCH_RESNET18, ARCH_LINEAR } arch_kind; /* model.arch: "resnet18", "linear" */
typedef enum { GOSSIP_STALE, GOSSIP_FRESH } gossip_order_kind; /* gossip_order (Jin et al. §6.2) */
typedef enum { DELAY_FIXED, DELAY_EXPONENTIAL, DELAY_LOGNORMAL } delay_dist_kind; /* inject.delay_dist */
typedef enum { FORMAT_IDX, FORMAT_JPEG, FORMAT_SYNTHETIC } data_format_kind;       /* data.format */
typedef enum { AUGMENT_SCALE, AUGMENT_RRC, AUGMENT_NONE } augment_kind;            /* data.augment */
typedef enum { INTERP_AUTO, INTERP_BICUBIC, INTERP_BILINEAR } interp_kind;         /* data.interp */
typedef enum { RESUME_NEVER, RESUME_AUTO } resume_kind;                            /* resume */
typedef enum { COMM_MPI, COMM_NCCL } comm_kind;                                    /* comm */
typedef enum { DEVICE_CPU, DEVICE_CUDA } device_kind;                              /* device */
typedef enum { PRECISION_FP32, PRECISION_TF32, PRECISION_BF16 } precision_kind;    /* precision */

/* Most entries of inject.slow_ranks. */
#define CFG_MAX_SLOW 256

typedef struct {
    char name[128];         /* run name (provenance, progress lines) */
    uint64_t seed;          /* seeds initialisation and the per-epoch permutation */
    method_kind method;     /* distributed SGD method */
    int p;                  /* worker ranks; the MPI world is p + servers for ps/easgd/backup, else p */
    int b;                  /* per-node minibatch; aggregate m = p*b */
    long iterations;        /* SGD steps per node */
    struct {
        double base;        /* α_0 */
        schedule_kind schedule;
        long steps[CFG_MAX_STEPS]; /* iterations at which α is multiplied by factor (step) */
        int n_steps;
        double factor;
        long warmup;        /* iterations of linear warm-up from α_0/warmup to α_0 */
    } alpha;
    double momentum;        /* µ */
    int nesterov;           /* 1: Nesterov momentum (the paper), 0: heavy ball */
    double weight_decay;    /* λ */
    int tau;                /* EASGD communication period τ (validated, used by easgd) */
    double beta;            /* EASGD β = p·a (used by easgd) */
    int servers;            /* parameter-server ranks (ps, easgd, backup), after the p workers */
    int backups;            /* backup workers (backup, Chen et al.): N = p - backups gradients/step */
    int synchronous;        /* easgd, gossip_*: the synchronous form instead of the asynchronous */
    gossip_order_kind gossip_order; /* gossip: stale (gradient and gossip from the same θ) / fresh */
    double comm_timeout_s;  /* a synchronous wait longer than this stops every rank with an error */
    struct {
        int slow_ranks[CFG_MAX_SLOW]; /* worker ranks delayed on every step */
        int n_slow_ranks;
        double delay_ms;    /* mean extra time per delayed step, ms */
        delay_dist_kind delay_dist;
        double random_slow; /* probability that one uniformly drawn worker is delayed on a step */
        int fail_rank;      /* worker that stops for good at fail_step; -1: none */
        long fail_step;     /* 0-based step at which fail_rank stops (it completes fail_step steps) */
    } inject;
    struct {
        arch_kind arch;     /* ResNet-18, or multinomial logistic regression (fast tests) */
        int width;          /* channels of the first stage (64 in the paper); resnet18 only */
        stem_kind stem;     /* resnet18 only */
    } model;
    struct {
        data_format_kind format; /* idx, jpeg or synthetic */
        char train_images[CFG_PATH_MAX], train_labels[CFG_PATH_MAX];
        char val_images[CFG_PATH_MAX], val_labels[CFG_PATH_MAX];
        char dir[CFG_PATH_MAX]; /* jpeg: the pack directory */
        int threads;        /* jpeg: decode threads per rank; 0 = a quarter of the rank's cores */
        augment_kind augment; /* jpeg: scale, rrc, none */
        int crop;           /* network input side, pixels */
        int scale[2];       /* augment scale: [min, max] shorter side */
        int eval_resize;    /* evaluation: shorter side before the centre crop */
        interp_kind interp; /* jpeg: auto, bicubic, bilinear */
        int dct_scale;      /* jpeg: decode at 1/2, 1/4, 1/8 where the resize shrinks enough (not Pillow's bits) */
        int shape[3];       /* synthetic: c, h, w */
        int classes;        /* synthetic: classes (0 = 1000); idx/jpeg: 0 = the data's, else checked */
    } data;
    struct {
        long every;         /* evaluate every this many iterations (and at the end) */
        int batch;          /* evaluation minibatch per rank */
        int at_start;       /* also evaluate before the first step */
    } eval;
    long log_every;         /* progress line and /train row every this many iterations */
    int threads;            /* compute threads per rank; 0 = cores / ranks on this node */
    char output[CFG_PATH_MAX];
    int overwrite;          /* allow replacing an existing output file */
    resume_kind resume;     /* never, or auto: continue from the checkpoint if there is one */
    long stop_at;           /* Unix time (s) after which the run checkpoints and stops (exit 3); 0: none */
    struct {
        long every;         /* write a checkpoint every this many iterations; 0: only on signals */
        char path[CFG_PATH_MAX]; /* checkpoint directory; "": <output without .h5>.ckpt */
        int bitwise;        /* a CPU resume must have the checkpoint's compute threads and ISA per rank */
        int keep;           /* committed checkpoints kept (the newest and keep - 1 before it), >= 1 */
        int keep_completed; /* 1: a completed run keeps its checkpoints; 0: they are removed */
    } checkpoint;
    comm_kind comm;         /* mpi, or nccl (allreduce on device cuda) */
    device_kind device;     /* cpu or cuda */
    precision_kind precision; /* fp32, tf32 (device cuda), bf16 */
    struct {                /* sim mode (docs/simulate.md): a virtual clock per rank; the enums are
                               src/sim/simmodel.h's, kept as int here */
        int enabled;        /* 1: the run file's time axis is simulated */
        int device;         /* sim_device: whose step time is charged per step */
        double step_ms;     /* > 0: this compute time per step instead of the device's, ms */
        long model_params;  /* the modelled model's parameters (fp32 on the wire: 4 bytes each) */
        int network;        /* sim_network preset, or SIM_NET_CUSTOM */
        double latency_us;  /* custom: per-link latency, µs */
        double bandwidth_gbps; /* custom: per-link and per-NIC bandwidth, Gbit/s */
        int topology;       /* sim_topology */
        int leaf_size;      /* fat_tree: hosts per leaf switch */
        double oversubscription; /* fat_tree: >= 1 */
        int allreduce;      /* sim_allreduce algorithm */
        double jitter;      /* coefficient of variation of the lognormal compute jitter; 0: none */
    } sim;
    char source[CFG_PATH_MAX]; /* the experiment file this was read from (not a key) */
} experiment;

/* Fill e with the defaults of every key. */
void config_defaults(experiment *e);

/* Read the experiment file at path, then apply the overrides sets[0..n_sets) ("KEY=VALUE",
 * KEY a dotted path into groups, VALUE in libconfig syntax or a bare word for string keys),
 * then validate every value. Returns 0 or EXIT_BADINPUT with err filled. */
int config_load(experiment *e, const char *path, char *const *sets, int n_sets, char *err, size_t errlen);

/* Where the value of key (dotted path) came from in the last successful config_load:
 * "file:line", "--set KEY=VALUE", or the file alone for a default; "" for an unknown key.
 * For errors found after loading (world size, output path). */
const char *config_where(const char *key);

/* Keys the last successful config_load found set (in the file or by --set) that this method or
 * model does not use (tau with ps, model.width with the linear model, data.crop with data.format
 * "idx", ...), and a sim.leaf_size that puts every rank on one leaf (the fat tree is then the
 * flat network): how many, and a sentence naming each with where it was set into buf (n bytes,
 * truncated). Not an error: one experiment file may serve a sweep over methods or p; rank 0
 * prints a note. */
int config_unused_keys(const experiment *e, char *buf, size_t n);

/* 1 if the method runs parameter-server ranks (ps, easgd, backup). */
int method_has_servers(method_kind m);
/* Sim mode cannot resume e's run yet (its virtual state is not in the checkpoint): the methods
 * with servers and asynchronous gossip (docs/simulate.md, Limits). */
int config_sim_no_resume(const experiment *e);

/* MPI ranks the experiment needs: p + servers for ps/easgd/backup, else p. */
int config_world_size(const experiment *e);

/* Checks that need the run environment: config_world_size(e) equals the MPI world size. */
int config_check_world(const experiment *e, int world_size, char *err, size_t errlen);

/* The resolved experiment as libconfig text (every key, defaults included); returns the length
 * written (truncated to n-1 like snprintf) . Stored in the HDF5 file as provenance.
 * config_load reads it back to the same experiment (except source). n >= CFG_TEXT_MAX never
 * truncates; n == 0 writes nothing and returns 0. */
int config_to_text(const experiment *e, char *buf, size_t n);
/* The string key `key` (e.g. "checkpoint.path") of such a text (an earlier run's `config`
 * attribute) into out (n bytes). Returns 0, or -1 when the text does not parse or has no such
 * string (out is then ""). */
int config_text_string(const char *text, const char *key, char *out, size_t n);

/* The resolved experiment as an aligned table: key, value, unit, and "(default)" marks. */
void config_print_table(const experiment *e, FILE *f);

/* Every key with type, unit, default and allowed range (for --help). */
void config_print_keys(FILE *f);

/* The files the experiment file of the last config_load @include'd (directly or nested), as
 * written there: config_included(i) for i < config_n_included(), NULL otherwise. Inputs of the
 * run, like the experiment file itself. */
int config_n_included(void);
const char *config_included(int i);

/* The same as a Markdown table (key, type, default, allowed, unit, meaning): the reference
 * table of docs/config.md, which test_config checks is up to date
 * (regenerate: build/test/test_config --print-docs-table). */
void config_print_markdown(FILE *f);

/* Names of enums, for logs and the HDF5 attributes. */
const char *method_name(method_kind m);
const char *schedule_name(schedule_kind s);
const char *stem_name(stem_kind s);
const char *arch_name(arch_kind a);
const char *gossip_order_name(gossip_order_kind g);
const char *delay_dist_name(delay_dist_kind d);
const char *data_format_name(data_format_kind f);
const char *augment_name(augment_kind a);
const char *interp_name(interp_kind i);
const char *comm_name(comm_kind c);
const char *device_name(device_kind d);
const char *precision_name(precision_kind p);

#endif
