/* comm_nccl: the NCCL communicator backend (worker/comm/nccl.c) of comm.h, for ranks
 * whose buffers live on a GPU. Built only with -Dnccl (and -Dcuda) enabled; not named
 * nccl.h, which would shadow NCCL's own header on the include path.
 *
 * Decisions:
 * - Rank 0 makes the unique id and SETs it in the run's store ("nccl/id/<tag>"); the others
 *   GET it with the communicator's timeout, so NCCL's bootstrap needs nothing but the
 *   store every worker already has.
 * - The communicator is non-blocking (ncclConfig_t.blocking = 0): initialisation and
 *   every enqueue return at once and are polled, and each wait is watched
 *   (nccl_watch.h): an asynchronous error, the timeout or the abort flag calls
 *   ncclCommAbort, so a dead peer is an error, never a hang in a CUDA call.
 * - Operations run on the backend's own communication stream. Before an operation the
 *   communication stream waits (cudaStreamWaitEvent) for an event recorded on the compute
 *   stream, so it reads what compute wrote; after it, an event on the communication
 *   stream marks its completion, which the calling thread waits for (watched), and which
 *   comm_nccl_compute_wait lets the compute stream wait for without blocking the host.
 *   Used through comm_start, the comm thread does the waiting: DDP buckets are reduced
 *   while backward goes on.
 * - Buffers must be device memory (or managed memory): a host pointer is ERR_INVALID,
 *   not a silent copy that would make the bandwidth figures lie.
 * - Built into a loadable module (ddpb_comm_nccl.so, worker/module.h) with its own copy
 *   of the static CUDA runtime: ddpbench-worker links neither NCCL nor CUDA, and the
 *   factory (comm_factory_nccl_module) loads the module for a spec with backend "nccl".
 *   The module's entry (symbol ddpb_module_nccl) holds this header's functions that the
 *   worker calls; the others are for the module itself and the tests that link it.
 *
 * Ownership: comm_nccl_create returns an owned communicator (comm_destroy frees the
 * streams, events and the NCCL communicator); the store and the compute stream are
 * borrowed for the call / the communicator's life. */
#ifndef DDPB_COMM_NCCL_H
#define DDPB_COMM_NCCL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "worker/comm/comm.h"

struct store_client;

struct comm_nccl_config {
    int rank, world_size;
    int timeout_ms;                /* setup and every operation; > 0 */
    const atomic_bool *abort_flag; /* borrowed, may be NULL; must outlive the comm */
    int device;                    /* CUDA device ordinal this rank uses (after
                                      CUDA_VISIBLE_DEVICES: usually 0) */
    void *compute_stream;          /* cudaStream_t the workload computes on (borrowed);
                                      NULL: the legacy default stream */
    const char *algorithm;         /* "auto" or NULL (NCCL chooses), "ring", "tree":
                                      sets NCCL_ALGO before the communicator exists */
    const char *tag;               /* distinguishes communicators of one run in the
                                      store; NULL = "0" */
    bool time_ops;                 /* time every operation on the device (the
                                      collective benchmark): a hold on the stream keeps
                                      host enqueue latency out of it (nccl_gate.h);
                                      false: no events, comm_nccl_last_op_seconds -1 */
};

/* Unique id through the store, non-blocking init with the timeout. Returns an owned
 * communicator or NULL with e set (ERR_TIMEOUT when a rank never arrived, ERR_PEER for
 * an NCCL error, ERR_INVALID for a bad config or device). */
struct comm *comm_nccl_create(const struct comm_nccl_config *cfg, struct store_client *store,
                              struct err *e);

/* The device time of c's last completed operation in seconds: CUDA events on the
 * communication stream, the first behind the compute fence and a hold opened after the
 * last enqueue call, the second right after the collective, so it holds neither the wait
 * for compute nor host enqueue or launch latency. -1 when unknown: the communicator is
 * not timed (time_ops), the last operation failed, none ran, or its hold expired. Read it
 * when no operation is in flight. */
double comm_nccl_last_op_seconds(const struct comm *c);

/* The compute stream waits (on the device) for every operation completed or queued so
 * far on the communication stream. */
int comm_nccl_compute_wait(struct comm *c, struct err *e);

/* NCCL's type and operator for ours (ncclDataType_t / ncclRedOp_t values); -1 when NCCL
 * has none (never for the dtypes and operators comm.h defines). */
int comm_nccl_dtype(enum comm_dtype t);
int comm_nccl_redop(enum comm_redop op);
/* The ring-model bytes a rank sends for an operation of `bytes` (payload per rank as the
 * collective workload counts it): what comm->bytes_sent accumulates. */
size_t comm_nccl_wire_bytes(enum comm_op op, size_t bytes, int world_size);
/* "NCCL 2.28.9" (the library loaded at run time) into buf. */
const char *comm_nccl_version(char *buf, size_t len);

/* The module's entry (symbol ddpb_module_nccl): the functions above the worker calls. */
struct comm_nccl_module {
    int abi; /* MODULE_ABI: first, as module_load reads it */
    struct comm *(*create)(const struct comm_nccl_config *cfg, struct store_client *store,
                           struct err *e);
    double (*last_op_seconds)(const struct comm *c);
    const char *(*version)(char *buf, size_t len);
};

#endif
