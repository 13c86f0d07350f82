/* ps.c — asynchronous parameter-server SGD (Jin et al. 2016 §2.2; Dean et al. 2012, Downpour).
 *
 * Every step worker i computes the gradient of its b samples at the parameters it last pulled
 * and pushes it; server k applies it to its shard at once with Nesterov-momentum SGD (the
 * momentum lives on the server) and step α_t/p, t = the server's iteration count (gradients
 * applied / p), and replies with the new shard, which the worker trains on next. α is the step
 * of the aggregate minibatch m = p·b throughout dsgd-run: one all-reduce step applies the mean
 * of p gradients with α; ps applies p gradients per iteration, each with α/p, so that with zero
 * staleness an iteration moves θ as far (docs/methods.md; Downpour used α per gradient: set
 * alpha.base to p·α for that). Workers never wait for each
 * other. Staleness of a gradient = server updates between the worker's pull and its push
 * (histogram on server 0, /ps/staleness_histogram). With p = 1 this is plain SGD, bitwise. */
#include <stdio.h>
#include <stdlib.h>

#include "methods/method.h"
#include "methods/server.h"
#include "optim/sgd.h"
#include "train/checkpoint.h"
#include "util/util.h"

/* Server 0's records (sv->rule; none on the other servers). */
typedef struct {
    long long *hist;         /* (bins) gradients applied with staleness k; the last bin counts k >= bins - 1 */
    int bins;                /* HIST_BINS_PER_WORKER · p */
    long long stale_sum;     /* the staleness of every gradient applied, summed */
} ps_records;

static void *ps_state_new(const srv *sv) {
    if (sv->k != 0) return NULL;
    ps_records *r = xcalloc(1, sizeof *r);
    r->bins = HIST_BINS_PER_WORKER * sv->p;
    r->hist = xcalloc((size_t)r->bins, sizeof(long long));
    return r;
}

static void ps_state_free(void *rule) {
    ps_records *r = rule;
    if (r) free(r->hist);
    free(r);
}

static int ps_records_io(srv *sv, ckpt_file *f) {
    ps_records *r = sv->rule;
    int64_t sum = r->stale_sum;
    const int rc = ckpt_io_i64(f, "staleness_histogram", (int64_t *)r->hist, (size_t)r->bins) || ckpt_io_i64(f, "stale_sum", &sum, 1);
    r->stale_sum = sum;
    return rc;
}

static int ps_finish(srv *sv, long it, int *why) {
    const ps_records *r = sv->rule;
    return runlog_array(sv->t->log, 0, r->hist) != 0 ? EXIT_RUNTIME : 0;
}

static void ps_say(const srv *sv) {
    const ps_records *r = sv->rule;
    long long tot = 0;
    for (int b = 0; b < r->bins; b++) tot += r->hist[b];
    printf("ps: mean staleness %.2f server updates over %lld gradients\n", tot ? (double)r->stale_sum / (double)tot : 0.0, tot);
}

static void ps_request(srv *sv, int i) {
    const experiment *e = sv->t->e;
    if (sv->k == 0) {
        ps_records *r = sv->rule;
        long long st = sv->version - sv->in[i].version;
        r->hist[st < r->bins - 1 ? st : r->bins - 1]++;
        r->stale_sum += st;
    }
    if (!sv->diverged) {
        long it = (sv->steps_total - 1) / sv->p; /* the iteration this gradient belongs to */
        double alpha = alpha_at(e, it < e->iterations ? it : e->iterations - 1) / sv->p;
        if (!sgd_update(sv->center, sv->gbuf[i], sv->vel, sv->n, (float)alpha, (float)e->momentum, (float)e->weight_decay, e->nesterov))
            sv->diverged = 1;
        sv->version++;
    }
    srv_reply_center(sv, i, srv_stop(sv));
}

static const server_rules ps_rules = {
    .request = ps_request,
    .state_new = ps_state_new,
    .state_free = ps_state_free,
    .records_io = ps_records_io,
    .finish = ps_finish,
    .say = ps_say,
};

static int ps_runlog_arrays(const experiment *e, runlog_array_spec *a) {
    a[0] = (runlog_array_spec){"ps/staleness_histogram", (long)HIST_BINS_PER_WORKER * e->p, 0, "gradients",
                               "gradients applied with staleness k (server updates between the worker's pull and its push) = row k; "
                               "the last row counts k >= rows-1", 0, 0};
    return 1;
}

const method_ops method_ps = {
    .name = "ps", SERVER_METHOD_OPS, .runlog_arrays = ps_runlog_arrays, .rules = &ps_rules,
};
