/* comm_internal: internal to worker/comm: what comm.c (the core) gives the files that run
 * operations, comm_sync.c and comm_async.c.
 *
 * Decision: a private header of comm.c's, not comm.h, so that backends and callers see
 * only the checked entry points (comm_run, comm_start), never a call that skips the
 * argument checks. */
#ifndef DDPB_COMM_INTERNAL_H
#define DDPB_COMM_INTERNAL_H

#include "worker/comm/comm.h"

/* Runs a (already checked) on the calling thread with the backend's entry point. */
int comm_execute(struct comm *c, const struct comm_args *a, struct err *e);

#endif
