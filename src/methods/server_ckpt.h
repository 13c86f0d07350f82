/* server_ckpt.h — server_ckpt.c's exports, for server.c: a server's checkpoints (its own state
 * in its file, its part in the round). */
#ifndef DSGD_SERVER_CKPT_H
#define DSGD_SERVER_CKPT_H

#include "methods/server_state.h"

/* server_ckpt.c: a server's checkpoints. */
/* Server 0: bn := the mean of the latest BN statistics of the workers that have sent some and
 * have not failed, in worker order; unchanged when there is none. */
void srv_bn_average(const srv *sv, float *bn, size_t nbn);
/* The pause protocol's write callback (ctx: the server_ctx): this server's file of checkpoint
 * `label`. Returns 0 or EXIT_RUNTIME (printed). */
int server_write(void *ctx, long label);
/* This server's part of checkpoint `label` read back. Returns 0 or EXIT_BADINPUT (printed). */
int server_read(server_ctx *c, long label);
/* Server 0, every live worker paused and no evaluation pending: the checkpoint round at its
 * iteration count (pause_lead). Returns 0 (go on), EXIT_INTERRUPTED (stop) or EXIT_RUNTIME (not
 * written: c->why). The pause is over afterwards, and the round's time is not training time. */
int server0_round(server_ctx *c);
/* Server k > 0, asked by server 0 (c->go, c->go_ok) and every live worker paused: its part of the
 * round (pause_part). Returns as server0_round. */
int server_part(server_ctx *c);

#endif
