/* capture: runs a helper program and reads what it prints, with a deadline: the engine
 * probe (python3 engines/probe.py) and the MPI probe (mpirun --version, ompi_info).
 *
 * Decision: the child runs in a process group of its own, with stdin and stderr on
 * /dev/null, so a deadline (or a cancel from another thread, through *child) kills it
 * and everything it started, and nothing it prints on stderr reaches the daemon's log.
 *
 * Ownership: out is the caller's (buf_free); argv is borrowed for the call. */
#ifndef DDPB_CAPTURE_H
#define DDPB_CAPTURE_H

#include <stdatomic.h>

#include "common/buf.h"
#include "common/err.h"

/* Runs argv (argv[0] searched on PATH when it has no '/') and appends its stdout to out
 * until it exits. child (may be NULL) holds its pid while it runs, 0 otherwise: another
 * thread cancels it by raising *cancel (may be NULL) and then kill(-pid), and a cancel
 * that came while it was starting kills it here. 0 with *status its wait status, or -1
 * with e set: it could not start (ERR_IO), or ran past timeout_ms (ERR_TIMEOUT, killed). */
int capture_run(char *const argv[], int timeout_ms, atomic_int *child,
                const atomic_bool *cancel, struct buf *out, int *status, struct err *e);

#endif
