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
#include "methods/method.h"
#include "methods/server.h"
#include "optim/sgd.h"

static void ps_request(srv *sv, int i) {
    const experiment *e = sv->t->e;
    if (sv->k == 0) {
        long long st = sv->version - sv->in[i].version;
        sv->hist[st < sv->hist_bins - 1 ? st : sv->hist_bins - 1]++;
        sv->stale_sum += st;
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
