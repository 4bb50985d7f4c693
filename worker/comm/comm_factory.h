/* comm_factory: the one place that turns a spec's backend into the rank's communicator
 * (docs/design.md §12.1): "tcp" (comm/tcp.c, every build), "nccl" (comm/nccl.c, the
 * module ddpb_comm_nccl.so of a build with NCCL, loaded when a spec asks for it:
 * comm_nccl.h) and "mpi" (comm/mpi.c, a loadable module per MPI implementation:
 * comm_mpi.h), the spec's "mpi" field choosing the module.
 *
 * Decisions:
 * - Two steps, because a backend may have to act before its rank joins the run: tcp
 *   opens its data port first, so the port is up (and drops strays) while the other ranks
 *   arrive; nccl does everything after the join (its unique id travels through the
 *   store). comm_factory_begin is the first step, comm_factory_finish the second;
 *   comm_create_from_spec does both for a caller that has joined already.
 * - The spec's knobs that shape a communicator are read here and nowhere else: the
 *   collective workload's forced algorithm, and tcp's busy-polling (off where training
 *   overlaps the communication thread with backward).
 * - A backend this worker lacks (its module is missing or cannot load) is refused here
 *   with a message naming it and the meson options or packages that provide it
 *   (comm_backend_check), before any socket or device is touched.
 * - Groups (pipeline parallelism: the ranks holding replicas of one stage exchange
 *   gradients among themselves) are meshes of their own, not views of the world
 *   communicator: a world collective involves every rank, and the stages' exchanges run
 *   at the same time as each other and as the activations sent between stages over the
 *   world, each on its own communication thread and sockets. A group's mesh keys its
 *   store entries and its handshake by a namespace (tcp.h "Namespaces"), so the meshes
 *   of one run form in one store without meeting. Under mpi a group is MPI's own
 *   (MPI_Comm_create_group over the world's ranks), not a mesh.
 * - mpi's ranks are the launcher's: the factory refuses a communicator whose MPI rank or
 *   size differs from the launch environment's (a rank not started by the chosen
 *   implementation's launcher). It loads the module in the first step, so a missing one
 *   fails the run before the join, and initialises MPI in the second, after it.
 *
 * Ownership: comm_factory_begin returns an owned setup; comm_factory_finish takes it in
 * every case (success or failure) and returns an owned communicator (comm_destroy). The
 * spec, env and store are borrowed for the call; abort_flag is borrowed for the life of
 * the communicator. */
#ifndef DDPB_COMM_FACTORY_H
#define DDPB_COMM_FACTORY_H

#include <jansson.h>
#include <stdatomic.h>

#include "common/err.h"
#include "common/spec.h"
#include "worker/comm/comm.h"
#include "worker/store/rendezvous.h"
#include "worker/store/store_client.h"

/* A communicator between the two steps. */
struct comm_factory;

struct comm_nccl_module;

/* The NCCL communicator's module (comm_nccl.h), loaded on first use; NULL with e set
 * (ERR_INVALID, field "backend") naming ddpb_comm_nccl.so and what builds or installs
 * it. Borrowed for the life of the process. */
const struct comm_nccl_module *comm_factory_nccl_module(struct err *e);

/* 0 when this worker can run backend name ("tcp"; "nccl": its module loads, which this
 * call does); ERR_INVALID with field "backend" naming it and how to build or install it,
 * or listing the known ones. */
int comm_backend_check(const char *name, struct err *e);

struct comm_mpi_module;
/* The communicator module of MPI implementation impl ("openmpi", "mpich": vocab.h
 * VOCAB_MPI), loaded once per process (worker/module/module.h); borrowed for the life of the
 * process. NULL with e set (ERR_INVALID, field "mpi") naming the module and the package
 * to install, or the build to redo, when it is missing or cannot be loaded. */
const struct comm_mpi_module *comm_factory_mpi_module(const char *impl, struct err *e);
/* What the run's env report says of MPI (comm_mpi.h env) for a spec with backend mpi,
 * else NULL. Owned. Complete only after the communicator exists (MPI initialised). */
json_t *comm_factory_env_mpi(const struct spec *s);

/* The first step for s->backend, as rank env->rank of env->world_size reached at
 * env->host with env->secret and env->timeout_ms (tcp: listens). Owned, or NULL with e
 * set. */
struct comm_factory *comm_factory_begin(const struct spec *s, const struct rendezvous_env *env,
                                        const atomic_bool *abort_flag, struct err *e);
/* The second step, through the run's store (tcp: trades addresses and connects the
 * mesh; nccl: the unique id and the communicator on device 0). node_of: the node of each
 * rank (rendezvous_nodes; borrowed, world_size entries) for tcp's hierarchical allreduce,
 * NULL for one node. Takes f. */
struct comm *comm_factory_finish(struct comm_factory *f, struct store_client *store,
                                 const int *node_of, struct err *e);
/* Frees a setup comm_factory_finish never took. NULL is a no-op. */
void comm_factory_discard(struct comm_factory *f);

/* comm_factory_begin + comm_factory_finish (one node). Owned communicator, or NULL with
 * e set. */
struct comm *comm_create_from_spec(const struct spec *s, const struct rendezvous_env *env,
                                   const atomic_bool *abort_flag, struct store_client *store,
                                   struct err *e);

/* A communicator over some of the run's ranks: ranks (n entries, world ranks, strictly
 * ascending, including env->rank) become ranks 0..n-1 of a new mesh with its own sockets,
 * its store keys under ns (every member passes the same ranks and ns; distinct groups use
 * distinct ns). Same backend settings as comm_create_from_spec (spec s); tcp only:
 * another backend is ERR_INVALID naming "backend". A group of one is a communicator of
 * one rank (its collectives copy). node_of: the world's node map (rendezvous_nodes;
 * borrowed, world-size entries; NULL: one node), of which the group's mesh takes its
 * members' entries, so its shared memory and hierarchical allreduce follow the nodes.
 * Call it after joining the run, from every member; it blocks until all of them are
 * connected or env->timeout_ms passes.
 * Errors: ERR_INVALID naming "ranks" (n < 1 or > world size, out of range, not strictly
 * ascending, env->rank missing) or "ns" (NULL, empty, longer than COMM_TCP_NS_MAX, not
 * printable). ranks, ns, s, env and store are borrowed for the call; abort_flag for the
 * life of the communicator. Owned (comm_destroy), or NULL with e set. */
struct comm *comm_create_group(const struct spec *s, const struct rendezvous_env *env,
                               const atomic_bool *abort_flag, struct store_client *store,
                               const int *ranks, int n, const char *ns, const int *node_of,
                               struct err *e);

#endif
