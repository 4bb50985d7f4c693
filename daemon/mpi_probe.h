/* mpi_probe: which MPI implementations this node can run (backend "mpi", launcher
 * "mpirun"), for GET /v1/engines and the checks at submit.
 *
 * Per implementation of the vocabulary (common/vocab.h VOCAB_MPI) an implementation is
 * available when both halves are here: the worker's communicator module
 * (ddpb_comm_mpi_<impl>.so beside the worker program or in the install directory, where
 * worker/module/module.c looks) and the implementation's launcher program on PATH. Its version
 * is what the launcher says (mpirun.openmpi --version, mpiexec.mpich --version). For
 * OpenMPI the probe also keeps the names of every MCA parameter ompi_info lists, so an
 * mpi_mca key OpenMPI does not know is refused at submit rather than ignored by MPI.
 *
 * Decision: the probe runs once, on first need (a few hundred ms: ompi_info loads every
 * component), and its answer is kept for the daemon's life, as the engine probe's is:
 * installing MPI means restarting the daemon.
 *
 * Ownership: mpi_probe_create returns an owned handle (mpi_probe_destroy); mpi_probe_json
 * a new reference. Thread-safe. */
#ifndef DDPB_MPI_PROBE_H
#define DDPB_MPI_PROBE_H

#include <jansson.h>

#include "common/err.h"

#define MPI_PROBE_TIMEOUT_MS 20000 /* each program the probe runs */

struct mpi_probe;

/* worker_path: the worker program (its directory holds the modules in a build tree);
 * copied. NULL on ENOMEM. */
struct mpi_probe *mpi_probe_create(const char *worker_path);
void mpi_probe_destroy(struct mpi_probe *p);
/* [{"name", "available", "version", "launcher", "module", "reason", "install"}], one per
 * implementation (reason and install null when available; version null when the
 * launcher is missing). NULL only on ENOMEM. */
json_t *mpi_probe_json(struct mpi_probe *p);
/* 0 when implementation impl runs here; else ERR_CONFLICT naming field "mpi" with why
 * and the install command (or the rebuild), ERR_INVALID for a name the vocabulary lacks. */
int mpi_probe_check(struct mpi_probe *p, const char *impl, struct err *e);
/* An mpi_mca object (validated by the spec already) against OpenMPI's parameters: an
 * OpenMPI-style key (not MPIR_CVAR_*) that this node's OpenMPI does not list is
 * ERR_INVALID naming "mpi_mca.<key>". Unchecked (0) when OpenMPI is absent here. */
int mpi_probe_check_mca(struct mpi_probe *p, const json_t *mca, struct err *e);

#endif
