/* comm_async: internal to worker/comm: the link between comm.c (which runs operations)
 * and comm_async.c (the communication thread behind comm.h's asynchronous API). */
#ifndef DDPB_COMM_ASYNC_H
#define DDPB_COMM_ASYNC_H

#include "worker/comm/comm.h"

/* Runs a (already checked) on the calling thread with the backend's entry point. */
int comm_execute(struct comm *c, const struct comm_args *a, struct err *e);
/* Stops c's communication thread, fails what is queued and frees every handle; a no-op
 * without a thread. Raises c->stop. */
void comm_async_shutdown(struct comm *c);

#endif
