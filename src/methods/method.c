/* method.c — what the methods share (method.h): the start every method takes. */
#include "methods/method.h"

#include "comm/comm.h"

int method_init_rank0(trainer *t, char *err, size_t errlen) {
    (void)err, (void)errlen;
    comm_bcast(model_params(t->net), model_n_params(t->net) * sizeof(float), 0);
    return 0;
}
