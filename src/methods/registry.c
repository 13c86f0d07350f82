/* registry.c — which methods are built: maps the experiment's `method` to its method_ops. */
#include "methods/method.h"

const method_ops *method_find(method_kind k) {
    switch (k) {
    case METHOD_ALLREDUCE: return &method_allreduce;
    default: return NULL; /* ps, easgd, gossip_pull, gossip_push, backup: not built yet */
    }
}
