/* registry.c — which methods are built: maps the experiment's `method` to its method_ops; the
 * init they share. */
#include "comm/comm.h"
#include "methods/method.h"

int method_init_rank0(trainer *t, char *err, size_t errlen) {
    comm_bcast(model_params(t->net), model_n_params(t->net) * sizeof(float), 0);
    return 0;
}

const method_ops *method_find(method_kind k) {
    switch (k) {
    case METHOD_ALLREDUCE: return &method_allreduce;
    case METHOD_PS: return &method_ps;
    case METHOD_EASGD: return &method_easgd;
    case METHOD_BACKUP: return &method_backup;
    case METHOD_GOSSIP_PULL: return &method_gossip_pull;
    case METHOD_GOSSIP_PUSH: return &method_gossip_push;
    default: return NULL;
    }
}
