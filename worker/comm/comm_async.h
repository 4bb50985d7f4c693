/* comm_async: internal to worker/comm: what comm_sync.c (the synchronous calls and
 * comm_destroy) needs of comm_async.c (the communication thread behind comm.h's
 * asynchronous API). */
#ifndef DDPB_COMM_ASYNC_H
#define DDPB_COMM_ASYNC_H

#include "worker/comm/comm.h"

/* Stops c's communication thread, fails what is queued and frees every handle; a no-op
 * without a thread. Raises c->stop. */
void comm_async_shutdown(struct comm *c);

#endif
