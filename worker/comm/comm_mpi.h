/* comm_mpi: the MPI communicator backend (worker/comm/mpi.c) of comm.h, over the MPI
 * library's own collectives, so what a run measures is MPI's algorithms.
 *
 * Decisions:
 * - OpenMPI and MPICH cannot be linked into one program (one libmpi's symbols shadow the
 *   other's), so mpi.c is built once per implementation as a loadable module
 *   (worker/module/module.h): ddpb_comm_mpi_openmpi.so and ddpb_comm_mpi_mpich.so, each
 *   with its own entry symbol (common/vocab.h VOCAB_MPI). The worker links no MPI at all; the
 *   factory (comm_factory.c) loads the module of the spec's "mpi" field.
 * - The entry is the table below; everything the worker needs from MPI goes through it.
 * - The ranks are MPI's: the launcher (mpirun, mpiexec, srun) placed them. The module
 *   initialises MPI (MPI_Init_thread) on the first communicator and finalises it when the
 *   last one is destroyed, on the thread that initialised it. It asks for
 *   MPI_THREAD_SERIALIZED, because comm_async runs operations on the communication
 *   thread, not the thread that called MPI_Init; a library that provides less is refused.
 *   Communicators of one process work at the same time on threads of their own (a
 *   pipeline's stage group beside the world), so the module holds one process-wide lock
 *   around each MPI call (never while it waits): serialized is then enough, and
 *   MPI_THREAD_MULTIPLE's cost in the library is not paid.
 * - A collective of the process's only communicator is MPI's blocking call
 *   (MPI_Allreduce, ...), the one a plain MPI program makes: OpenMPI's non-blocking
 *   collectives are another component (libnbc) with other algorithms, measured 2 to 2.5x
 *   slower than MPI_Allreduce from 4 KiB to 64 MiB on 2 ranks (tests/bench/RESULTS.md), so
 *   they would not measure "MPI's algorithms". A blocking call cannot observe the timeout,
 *   so a watchdog thread does: an operation past timeout_ms ends the rank through
 *   comm.h's on_stuck (the worker reports ERR_TIMEOUT naming the operation, then exits),
 *   since the call cannot be left. Signals reach such a rank through its launcher.
 * - With more than one communicator alive (a pipeline's stage group beside the world),
 *   and for point-to-point operations, the operation is the non-blocking MPI call
 *   (MPI_Iallreduce, ...) polled with MPI_Testall under the communicator's timeout, abort
 *   flag and stop flag: a blocking call holding the process's MPI lock would deadlock the
 *   other communicator's thread. A rank that never enters an operation is ERR_TIMEOUT
 *   naming the operation, never a hang. MPI
 *   cannot cancel a collective, so a timed-out operation stays in flight and breaks the
 *   communicator (every later operation fails with the first error); destroying it waits
 *   up to the timeout for the operation to complete, and when it does not, leaves MPI
 *   unfinalised (MPI_Finalize would wait for it forever) for the failing process to exit.
 * - float16 and bfloat16 travel as a contiguous 2-byte type with user-defined sum, min and
 *   max (reduce.h's kernels: through float, rounded after every combine, as tcp and NCCL
 *   do); avg is MPI's sum followed by one division (reduce_divide), as comm.h defines it.
 * - mpi_mca (spec.h mpi_params) reaches MPI through its environment before MPI_Init:
 *   OpenMPI reads OMPI_MCA_<name>, MPICH its MPIR_CVAR_* variables by name.
 *
 * Ownership: create returns an owned communicator (comm_destroy); env returns an owned
 * JSON object (json_decref). The config's abort flag is borrowed for the communicator's
 * life, its params for the call. */
#ifndef DDPB_COMM_MPI_H
#define DDPB_COMM_MPI_H

#include <jansson.h>
#include <stdatomic.h>

#include "common/err.h"
#include "worker/comm/comm.h"

struct comm_mpi_param {
    const char *key, *value; /* an OpenMPI MCA name or an MPIR_CVAR_* name */
};

struct comm_mpi_config {
    int timeout_ms;                /* every operation; > 0 */
    const atomic_bool *abort_flag; /* borrowed, may be NULL; must outlive the comm */
    /* NULL: the world (MPI_COMM_WORLD's ranks). Else the n world ranks (ascending) of a
     * group this rank belongs to: every member calls create with the same list
     * (MPI_Comm_create_group over the world, which must exist already). */
    const int *ranks;
    int n_ranks;
    /* set in MPI's environment before MPI_Init (ignored once MPI is initialised) */
    const struct comm_mpi_param *params;
    int n_params;
};

struct comm_mpi_module {
    int abi;                    /* MODULE_ABI: first, as module_load reads it */
    const char *implementation; /* "openmpi", "mpich": the vocabulary's name */
    /* MPI_Init_thread on first use, then a communicator of its own (MPI_Comm_dup of the
     * world, or the group's). ERR_INVALID for a bad config or a thread level below
     * MPI_THREAD_SERIALIZED; ERR_PEER for an MPI error. */
    struct comm *(*create)(const struct comm_mpi_config *cfg, struct err *e);
    /* What the run's env report says of MPI: the library version string, the
     * implementation, the thread level, the transport settings (OpenMPI: pml/btl/mtl
     * control variables and the pml it selected; MPICH: its device and the MPIR_CVAR_*
     * in its environment) and every MPI setting in the environment. Owned; NULL when out
     * of memory. */
    json_t *(*env)(void);
};

#endif
