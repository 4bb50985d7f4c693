/* rendezvous: how a worker learns who it is and joins its run: the launch environment
 * (docs/design.md §9 "Launching a rank"), CPU pinning, the join barrier through the store, and
 * failure records that let every rank name the rank that failed first.
 *
 * Decision: the environment is parsed into one struct with every value checked, and an
 * error names the variable, because a worker started by hand (or by a buggy launcher)
 * must say what is wrong before it touches the network. Joining is a store barrier with
 * a deadline; on timeout the per-rank "join/rank/<r>" keys tell which ranks never came.
 *
 * Node map: every rank publishes the node it runs on ("node/<rank>" = DDPB_NODE_RANK)
 * before the join barrier, so after it rendezvous_nodes reads every rank's node without
 * waiting. The map feeds the TCP backend's hierarchical allreduce (comm/tcp.h).
 * DDPB_EMULATE_NODES, for tests and benchmarks on one machine only, replaces the
 * published map to split the ranks of one machine into emulated nodes; it is read here
 * and nowhere else, and is not a spec field because a real cluster's map comes from
 * where the ranks run, never from the experiment.
 *
 * Failure records: a rank that fails SETs "fail/<rank>" = "<peer> <message>" before it
 * exits (its sockets close only at exit), so a rank that saw that peer's connection
 * close can read why and follow the chain back to the rank that failed first. */
#ifndef DDPB_RENDEZVOUS_H
#define DDPB_RENDEZVOUS_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/store_proto.h"
#include "worker/store/store_client.h"

#define RENDEZVOUS_DEFAULT_HOST "127.0.0.1"
#define RENDEZVOUS_DEFAULT_TIMEOUT_MS 60000

struct rendezvous_env {
    char run[STORE_MAX_RUN + 1];       /* DDPB_RUN */
    int rank;                          /* DDPB_RANK, 0..world_size-1 */
    int world_size;                    /* DDPB_WORLD_SIZE, 1..SPEC_MAX_WORLD */
    int local_rank;                    /* DDPB_LOCAL_RANK, >= 0 */
    int node_rank;                     /* DDPB_NODE_RANK, >= 0; default 0 (one node) */
    char node_name[256];               /* DDPB_NODE_NAME; default the host name */
    char store[300];                   /* DDPB_STORE, "host:port" */
    char secret[STORE_MAX_SECRET + 1]; /* DDPB_SECRET */
    char spec_path[4096];              /* DDPB_SPEC */
    char host[256]; /* DDPB_HOST: address peers reach this rank at; default 127.0.0.1;
                       under another launcher, this host's address towards DDPB_STORE */
    char cpus[256]; /* DDPB_CPUS: CPU list to pin to; "" = not pinned */
    int timeout_ms; /* DDPB_TIMEOUT_MS: join, store and comm timeout; default 60000 */
    /* A rank started by another launcher (spec launcher mpirun or srun) has no report pipe
     * and no DDPB_RANK: */
    char report[300];  /* DDPB_REPORT: "host:port" of the run's report channel; "" = fd 3 */
    char log_dir[512]; /* DDPB_LOG_DIR: where its rank<N>.log goes; "" = stdout stays */
};

/* Where a rank's index, local index and the launcher's rank count are read from, by
 * DDPB_LAUNCHER (unset: "ddpbench"): the daemon's own variables; OpenMPI's mpirun
 * (OMPI_COMM_WORLD_*) or MPICH's hydra (PMI_RANK, MPI_LOCALRANKID, PMI_SIZE); Slurm's srun
 * (SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_TASKS). By launcher, not "the first one
 * set": a daemon inside a Slurm job hands its own SLURM_PROCID down to ranks it forks. */
struct rendezvous_launcher_vars {
    const char *launcher;
    const char *rank[2], *local[2], *size[2]; /* the first set of each pair */
};

/* Reads and validates the launch environment (getenv). The rank and local rank come from
 * the launcher's variables (struct rendezvous_launcher_vars); its rank count must be
 * DDPB_WORLD_SIZE. Without DDPB_CPUS, DDPB_CPU_MAP
 * ("0,1;2,3": a CPU list per rank, ';'-separated) gives the rank its entry; without
 * DDPB_NODE_RANK, DDPB_NODE_MAP ("0;0;1": a node index per rank) does. Under another
 * launcher host is this host's address towards DDPB_STORE (net_route_addr), whatever
 * DDPB_HOST says: the launcher's environment is the leader's, wherever the rank runs.
 * Errors are ERR_INVALID with e->field = the variable's name. */
int rendezvous_env_read(struct rendezvous_env *out, struct err *e);

/* Parses a CPU list such as "0", "0-3,6" into set. ERR_INVALID on empty items, bad
 * numbers, reversed ranges, CPUs >= CPU_SETSIZE. */
int rendezvous_cpus_parse(const char *list, cpu_set_t *set, struct err *e);
/* Formats set as a CPU list ("0-3,6"; "" when empty), truncated to outlen. */
void rendezvous_cpus_format(const cpu_set_t *set, char *out, size_t outlen);
/* OpenMP's places for a process pinned to set: one place per CPU, in order ("{2},{3}"),
 * into out; false (out truncated) when they do not fit in outlen. */
bool rendezvous_omp_places(const cpu_set_t *set, char *out, size_t outlen);
/* Pins the calling process to the CPUs of list (sched_setaffinity), and gives its OpenMP
 * threads one CPU each: unless the user placed them (OMP_PLACES, OMP_PROC_BIND or
 * GOMP_CPU_AFFINITY set), sets OMP_PLACES to the list's CPUs (rendezvous_omp_places) and
 * OMP_PROC_BIND=close, so thread i runs on the i-th CPU. libgomp reads them when it is
 * loaded, which in the worker is with the train module, after this call.
 *
 * Why: unbound, a pinned rank's threads float over its CPUs, and the kernel may stack two
 * on one CPU or move one mid-step while the other waits at the barrier; bound, each keeps
 * its CPU and its cache (tests/bench/RESULTS.md, issue 36). The initial thread is bound to
 * the first CPU, so threads started after libgomp loads (the loader's, the comm thread)
 * share that CPU; the C worker's are light beside a step's compute. */
int rendezvous_pin_cpus(const char *list, struct err *e);

/* Connects to the store as env->rank of env->run, sets "join/rank/<rank>" and waits on
 * the "join" barrier up to env->timeout_ms. Returns an owned client
 * (store_client_destroy) or NULL with e set; on timeout the message lists the ranks
 * that never joined. abort_flag is borrowed and may be NULL. */
struct store_client *rendezvous_join(const struct rendezvous_env *env,
                                     const atomic_bool *abort_flag, struct err *e);

/* The node map (see above): node_of[r] for each of env->world_size ranks (caller-owned
 * array), from DDPB_EMULATE_NODES when it is set, else from every rank's "node/<r>" key
 * (published by rendezvous_join; waits up to env->timeout_ms for each). ERR_INVALID
 * naming DDPB_EMULATE_NODES when it is malformed. */
int rendezvous_nodes(struct store_client *c, const struct rendezvous_env *env, int *node_of,
                     struct err *e);
/* DDPB_EMULATE_NODES's value for world ranks: "k" puts consecutive blocks of k ranks on
 * a node each (the last block may be shorter); "a,b,c" blocks of a, b and c ranks, which
 * must add up to world. Fills node_of (world entries) with node 0, 1, ... */
int rendezvous_nodes_emulate(const char *value, int world, int *node_of, struct err *e);

/* Best effort: records this rank's failure (peer it blames or -1, message). */
void rendezvous_record_failure(struct store_client *c, int rank, int peer, const char *msg);

/* Follows failure records from `peer` (the rank this rank's error blames) to the rank
 * that failed first: a rank whose record blames another is skipped, a rank without a
 * record (killed, crashed, stuck) is the origin; the chain stops where it would come
 * back to self or loop. Waits at most wait_ms for records that
 * may still be on their way (0 when the blamed peer is known to have exited). Returns
 * the origin rank and, when it differs from peer, writes the chain's story to why. */
int rendezvous_origin(struct store_client *c, int self, int peer, int world_size, int wait_ms,
                      char *why, size_t whylen);

#endif
