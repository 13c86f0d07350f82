/* registry.c — which methods are built: maps the experiment's `method` to its method_ops. */
#include "methods/method.h"

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
