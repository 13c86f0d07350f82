/* runfile.c — phase 5 of a run (setup.h): the run file, created or continued by the log rank,
 * with the method's arrays, the data's provenance and the libraries; the start-up lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "data/loader.h"
#include "gpucomm.h"
#include "methods/method.h"
#include "nn/model.h"
#include "run/setup.h"
#include "train/checkpoint.h"
#include "util/util.h"

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
    attrs[nat++] = (runlog_attr){"data_dct_scale", NULL, e->data.dct_scale}; /* 1: pixels not Pillow's full-size decode */
    arrays[(*na)++] = (runlog_array_spec){"data/decode_warnings", e->p, 0, "warnings",
                                          "libjpeg warnings (corrupt data recovered, premature end of data) of the samples each "
                                          "worker used, over the whole run (kept across resumes by the checkpoints)", 0, 0};
    arrays[(*na)++] = (runlog_array_spec){"data/decode_failures", e->p, 0, "samples",
                                          "samples each worker drew that could not be decoded (each replaced by the next sample "
                                          "of the pack and named once on stderr), over the whole run (kept across resumes by the checkpoints)", 0, 0};
    return nat;
}

/* Sim mode (docs/simulate.md): the root attributes naming the time axis and the models, into
 * attrs (returns how many); their numbers go in with sim_numbers once the file is open. */
static int sim_provenance(const run_setup *r, runlog_attr *attrs) {
    const experiment *e = &r->e;
    const vclock *vc = &r->t.vc;
    static char dev[64], dsrc[512], net[64], topo[96];
    if (!vc->on) return 0;
    int n = 0;
    attrs[n++] = (runlog_attr){"time_axis", "simulated: time_s and /ranks are a virtual clock per rank (docs/simulate.md); "
                                            "wall_s is the real training wall clock", 0};
    if (e->sim.step_ms > 0) snprintf(dev, sizeof dev, "sim.step_ms"), snprintf(dsrc, sizeof dsrc, "sim.step_ms = %g ms", e->sim.step_ms);
    else snprintf(dev, sizeof dev, "%s", sim_device_names[e->sim.device]),
         snprintf(dsrc, sizeof dsrc, "%s", e->sim.device == SIM_DEV_MEASURED ? "each rank's measured data + compute + update time" : vc->device_source);
    snprintf(net, sizeof net, "%s", sim_network_names[e->sim.network]);
    snprintf(topo, sizeof topo, "%s", sim_topology_names[e->sim.topology]);
    if (e->sim.topology == SIM_TOPO_FAT_TREE)
        snprintf(topo, sizeof topo, "fat_tree, leaf_size %d, oversubscription %g", e->sim.leaf_size, e->sim.oversubscription);
    attrs[n++] = (runlog_attr){"sim_device", dev, 0};
    attrs[n++] = (runlog_attr){"sim_device_source", dsrc, 0};
    attrs[n++] = (runlog_attr){"sim_network", net, 0};
    attrs[n++] = (runlog_attr){"sim_network_source", e->sim.network == SIM_NET_CUSTOM ? "sim.latency_us, sim.bandwidth_gbps" : vc->network_source, 0};
    attrs[n++] = (runlog_attr){"sim_topology", topo, 0};
    attrs[n++] = (runlog_attr){"sim_allreduce", sim_allreduce_names[e->sim.allreduce], 0};
    attrs[n++] = (runlog_attr){"sim_model_bytes", NULL, (long long)vc->model_bytes};
    return n;
}

/* Sim mode: the models' numbers as float64 root attributes (set again by every resumed run):
 * sim_step_s (the compute charged per step before jitter; absent for "measured"), sim_allreduce_s,
 * sim_link_latency_s, sim_bandwidth_Bps. */
static void sim_numbers(const trainer *t) {
    const vclock *vc = &t->vc;
    if (!vc->on || !t->log) return;
    if (vc->step_s >= 0) runlog_set_attr_double(t->log, "sim_step_s", vc->step_s);
    runlog_set_attr_double(t->log, "sim_allreduce_s", vc->allreduce_s);
    runlog_set_attr_double(t->log, "sim_link_latency_s", vc->net.link_latency_s);
    runlog_set_attr_double(t->log, "sim_bandwidth_Bps", vc->net.bandwidth_Bps);
    runlog_set_attr_double(t->log, "sim_jitter", t->e->sim.jitter);
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
        const int st = r->plan.move_aside ? resume_move_aside(e->output, aside, sizeof aside, err, errlen) : 0;
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

/* setup.h */
void setup_print_sim(const run_setup *r, FILE *f) {
    const experiment *e = &r->e;
    const vclock *vc = &r->t.vc;
    if (!vc->on) return;
    if (vc->step_s >= 0) fprintf(f, "sim mode: simulated time axis; compute %.3f ms per step", 1e3 * vc->step_s);
    else fprintf(f, "sim mode: simulated time axis; compute measured on each rank");
    if (e->method == METHOD_ALLREDUCE)
        fprintf(f, ", all-reduce of %zu bytes over p = %d: %.3f ms (%s, %s, %s); see docs/simulate.md\n", vc->model_bytes, e->p,
                1e3 * vc->allreduce_s, sim_network_names[e->sim.network], sim_topology_names[e->sim.topology],
                sim_allreduce_names[e->sim.allreduce]);
    else if (e->method == METHOD_GOSSIP_PULL || e->method == METHOD_GOSSIP_PUSH) /* one θ a node and step, point to point */
        fprintf(f, ", each node %s θ (%zu bytes) %s one peer per step: %.3f ms host to host on an idle route (%s, %s), booked "
                "per NIC (%s); see docs/simulate.md\n", e->method == METHOD_GOSSIP_PULL ? "pulls" : "pushes", vc->model_bytes,
                e->method == METHOD_GOSSIP_PULL ? "from" : "to", 1e3 * sim_p2p_s(&vc->net, 0, 1, vc->model_bytes),
                sim_network_names[e->sim.network], sim_topology_names[e->sim.topology],
                e->method == METHOD_GOSSIP_PULL ? "a node pulled by several sends to them one after another"
                                                : "pushes into one node queue on its downlink");
    else /* the server methods: each message booked on the sender's and receiver's NICs (incast queues) */
        fprintf(f, ", θ or a gradient of %zu bytes %.3f ms host to host on an idle route (%s, %s; with servers each "
                "carries its server's share), booked per NIC; see docs/simulate.md\n", vc->model_bytes,
                1e3 * sim_p2p_s(&vc->net, 0, 1, vc->model_bytes), sim_network_names[e->sim.network],
                sim_topology_names[e->sim.topology]);
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
    setup_print_sim(r, stdout);
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
        static runlog_attr attrs[40];
        int na = t->method->runlog_arrays ? t->method->runlog_arrays(e, arrays) : 0;
        r->data_array = na;
        int nat = data_provenance(r, attrs, arrays, &na);
        nat += sim_provenance(r, attrs + nat);
        const runlog_meta meta = {
            .method = method_name(e->method), .p = e->p, .b = e->b, .m = e->p * e->b, .seed = e->seed,
            .iterations = e->iterations, .config_text = cfg_text, .command_line = cmdline, .hostname = comm_host(),
            .servers = method_has_servers(e->method) ? e->servers : 0, .ranks = e->p, .device = r->device_desc,
            .eval_local = t->method->eval_local, .arrays = na ? arrays : NULL, .n_arrays = na, .attrs = attrs, .n_attrs = nat,
            .wall = t->vc.on,
        };
        st = open_runlog(r, &meta, err, sizeof err);
        if (!st) sim_numbers(t);
        if (!st) comm_on_timeout(record_timeout, t);
    }
    setup_agree_key(st, "output", err);
    if (t->rank == t->log_rank) print_start(r);
}
