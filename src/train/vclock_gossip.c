/* vclock_gossip.c — lock-step gossip's exchange on the virtual clock (vclock_gossip.h). */
#include "train/vclock_gossip.h"

#include <stdlib.h>

#include "comm/comm.h"
#include "util/util.h"

void vclock_gossip_init(vclock_gossip *vg, int p, size_t bytes) {
    *vg = (vclock_gossip){.p = p, .bytes = bytes};
    vg->start = xcalloc((size_t)p, sizeof *vg->start);
    vg->peer = xmalloc((size_t)p * sizeof *vg->peer);
    vg->nic = xcalloc(2 * (size_t)p, sizeof *vg->nic);
    vg->nics = (sim_nics){.p = p, .free_up = vg->nic, .free_down = vg->nic + p};
    vg->msg = xmalloc((size_t)p * sizeof *vg->msg);
    for (int k = 0; k < p; k++) vg->peer[k] = -1;
}

void vclock_gossip_free(vclock_gossip *vg) {
    free(vg->start), free(vg->peer), free(vg->nic), free(vg->msg);
    *vg = (vclock_gossip){0};
}

/* (t, from, to) ascending: the FIFO order of the NICs. */
static int msg_cmp(const void *a, const void *b) {
    const vclock_gossip_msg *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    return (x->to > y->to) - (x->to < y->to);
}

double vclock_gossip_schedule(vclock_gossip *vg, const sim_net *net, int push, int me) {
    const int p = vg->p;
    int m = 0;
    for (int k = 0; k < p; k++) {
        const int j = vg->peer[k];
        if (j < 0) continue;
        /* push: k sends θ_k to j; pull: k receives θ_j, so j sends to k */
        const int from = push ? k : j, to = push ? j : k;
        const double t = vg->start[from] > vg->start[to] ? vg->start[from] : vg->start[to];
        vg->msg[m++] = (vclock_gossip_msg){t, from, to};
    }
    qsort(vg->msg, (size_t)m, sizeof *vg->msg, msg_cmp);
    for (int k = 0; k < 2 * p; k++) vg->nic[k] = 0.0;
    double end = vg->start[me];
    for (int q = 0; q < m; q++) {
        const double a = sim_nics_send(&vg->nics, net, vg->msg[q].from, vg->msg[q].to, vg->bytes, vg->msg[q].t);
        if ((vg->msg[q].from == me || vg->msg[q].to == me) && a > end) end = a;
    }
    return end;
}

void vclock_gossip_starts(vclock *vc, vclock_gossip *vg) {
    if (vg->p > 1) comm_workers_allgather(&vc->now, sizeof vc->now, vg->start);
    else vg->start[0] = vc->now;
}

void vclock_gossip_charge(vclock *vc, double exchange_end) {
    if (!(exchange_end > vc->now)) return;
    const double w = exchange_end - vc->now;
    vc->now = exchange_end;
    vc->v.comm_s += w;
    vc->v.wait_s += w;
}
