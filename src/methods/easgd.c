/* easgd.c — elastic averaging SGD (Zhang, Choromanska, LeCun 2015; Jin et al. 2016 §2.3), with
 * Nesterov momentum on the local steps (EAMSGD).
 *
 * Worker i takes local SGD steps on its own θ_i; after every τ local steps (and after its last)
 * it exchanges with the center x̃ held by the servers, with a = β/p:
 *     θ_i ← θ_i − a (θ_i − x̃)        x̃ ← x̃ + a (θ_i − x̃)
 * both from the values before the exchange (the server replies with x̃ before its update).
 * Asynchronous (default): each worker exchanges on its own. `synchronous = true`: the servers
 * hold every worker's exchange of a round and update x̃ ← x̃ + a Σ_i (θ_i − x̃) once all live
 * workers are in (Zhang et al.'s synchronous EASGD). Evaluation uses the center x̃. */
#include "methods/method.h"
#include "methods/server.h"
#include "optim/sgd.h"

static int easgd_exchange_after(const trainer *t, long s) { return (s + 1) % t->e->tau == 0 || s + 1 == t->e->iterations; }

static void easgd_worker_reply(trainer *t, const float *center) {
    const float a = (float)(t->e->beta / t->e->p);
    float *th = model_params(t->net);
    const size_t n = model_n_params(t->net);
    for (size_t j = 0; j < n; j++) th[j] -= a * (th[j] - center[j]);
}

/* Synchronous round: every held worker gets the old center; x̃ moves by a Σ_i (θ_i − x̃). */
static void easgd_round(srv *sv) {
    const float a = (float)(sv->t->e->beta / sv->p);
    int first = -1;
    for (int i = 0; i < sv->p; i++)
        if (sv->held[i]) {
            srv_reply_center(sv, i, srv_stop(sv)); /* copies x̃ into rep[i] before it moves */
            sv->held[i] = 1;                       /* still part of this round's sum */
            if (first < 0) first = i;
        }
    if (first < 0) return;
    const float *old = sv->rep[first];
    for (size_t j = 0; j < sv->n; j++) {
        float s = 0.0f;
        for (int i = 0; i < sv->p; i++)
            if (sv->held[i]) s += sv->gbuf[i][j] - old[j];
        sv->center[j] += a * s;
    }
    for (int i = 0; i < sv->p; i++) sv->held[i] = 0;
    sv->count = 0;
    sv->version++;
}

static void easgd_request(srv *sv, int i) {
    if (sv->t->e->synchronous) {
        sv->held[i] = 1;
        if (++sv->count == sv->live) easgd_round(sv);
        return;
    }
    const float a = (float)(sv->t->e->beta / sv->p);
    srv_reply_center(sv, i, srv_stop(sv)); /* the worker gets x̃ before the update */
    const float *x = sv->gbuf[i];
    for (size_t j = 0; j < sv->n; j++) sv->center[j] += a * (x[j] - sv->center[j]);
    sv->version++;
}

static void easgd_leave(srv *sv, int i) {
    if (sv->t->e->synchronous && sv->count > 0 && sv->count == sv->live) easgd_round(sv);
}

/* Synchronous rounds need every live worker: one given up on for its silence stops the run. */
static int easgd_needs_all(const srv *sv) { return sv->t->e->synchronous; }

static const server_rules easgd_rules = {
    .sends_params = 1,
    .local_update = 1,
    .exchange_after = easgd_exchange_after,
    .worker_reply = easgd_worker_reply,
    .request = easgd_request,
    .leave = easgd_leave,
    .needs_all = easgd_needs_all,
};

const method_ops method_easgd = {
    .name = "easgd", SERVER_METHOD_OPS, .rules = &easgd_rules,
};
