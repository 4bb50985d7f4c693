/* tcp_algo: the TCP backend's algorithms as transfer plans on the engine (tcp_engine.h),
 * and the choice between them. Not for use outside worker/comm.
 *
 * Decision: its own header so that tcp.c, which calls it, is the only file that sees it:
 * the algorithms use the engine, and the engine knows nothing of them. */
#ifndef DDPB_TCP_ALGO_H
#define DDPB_TCP_ALGO_H

#include "worker/comm/tcp_engine.h"

/* Runs a (arguments already checked) with the algorithm a->algorithm names, else the
 * configured one when the operation has it, else the one chosen by size; ERR_INVALID for
 * an explicit algorithm the operation does not have. */
int tcp_algo_run(struct comm_tcp *t, const struct comm_args *a, struct err *e);

#endif
