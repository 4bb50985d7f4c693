/* config: ddpbenchd's settings from the command line and the environment.
 *
 * Decision: one flat struct filled once at start-up and read-only afterwards (threads
 * share it without locks). Defaults are safe: bind 127.0.0.1, CPU slots = online CPUs
 * (never oversubscribed unless asked, since oversubscribed ranks make every timing
 * wrong), worker binary found beside the daemon's own executable. */
#ifndef DDPB_CONFIG_H
#define DDPB_CONFIG_H

#include <limits.h>
#include <stddef.h>

#include "common/err.h"
#include "common/log.h"

#define CONFIG_DEFAULT_PORT 7480

struct config {
    char host[128];       /* HTTP bind address */
    int port;             /* HTTP port; 0 = ephemeral */
    char store_host[128]; /* store bind address (workers connect to it) */
    int store_port;       /* 0 = ephemeral */
    char state_dir[PATH_MAX];
    char worker_path[PATH_MAX];
    char web_dir[PATH_MAX];
    /* framework engines (issue 16): their Python adapters, and the interpreter that runs
     * them (the project venv's when deploy/install-deps.sh --engines made it, else
     * /usr/bin/python3: Debian's torch needs no venv) */
    char engines_dir[PATH_MAX];
    char python[PATH_MAX];
    char scripts_dir[PATH_MAX]; /* engine "script" runs files under it only; "" = off */
    char node[64];              /* this node's name (hostname by default) */
    int cpu_slots;              /* ranks that may run at once on this node */
    int gpus;                   /* GPU slots (daemon/gpu_slots.h): --gpus N, else NVML's count
                             (0 where NVML is unavailable) */
    size_t max_body;            /* largest accepted request body */
    int http_threads;
    /* RLIMIT_AS of each rank of a native CPU training run: the spec's memory estimate
     * x 1.25 plus this many MiB (--rank-memory-margin-mib; -1: no limit) */
    int rank_memory_margin_mib;
    int kill_grace_ms; /* SIGTERM → SIGKILL delay when stopping workers */
    enum log_level log_level;
    char token[256];       /* bearer token every mutation needs; "" = none */
    char cors_origin[256]; /* Access-Control-Allow-Origin; "" = no CORS */
    char allow_hosts[512]; /* further names the Host header may carry, comma-separated
                              ("*": any); api/guard.h says why Host is checked */
    /* the network this node's runs measure over (deploy/netlab.sh names its tc profile,
     * "1gbe", ...); stored on every run so results never pool runs over different
     * networks; "" = none: the host network as is */
    char network_profile[64];
    /* a cluster (daemon/cluster.h, daemon/follower.h): join = the leader's URL when this
     * node is a follower ("" = this node leads, alone or with followers); node_timeout_ms:
     * silence after which the leader takes a follower as lost; sync_ms: how often a
     * follower syncs (its heartbeat) */
    char join[256];
    int node_timeout_ms;
    int sync_ms;
    /* the Slurm job the daemon runs inside (SLURM_JOB_ID at start), "" outside any:
     * spec launcher "srun" needs one */
    char slurm_job[32];
    /* MPI's remote-launch agent (--mpi-agent): what launcher "mpirun" starts the MPI
     * daemon (orted, hydra_pmi_proxy) on another node with, in place of ssh; "" = none,
     * and mpirun runs stay on this node. deploy/netlab-mpi-agent.sh is the one netlab
     * gives its leader (design.md "mpirun across nodes" says why not ssh). */
    char mpi_agent[PATH_MAX];
    /* where the host backend's shared-memory transport makes its unnamed segments
     * (worker/comm/shm.h): every rank this daemon starts gets it as DDPB_SHM_DIR; "" =
     * none given, the workers use /dev/shm. An existing directory, kept as its real path. */
    char shm_dir[PATH_MAX];
};

/* Fills defaults, then argv (--host, --port, --store-host, --store-port, --state-dir,
 * --worker, --web-dir, --node, --cpu-slots, --gpus, --max-body, --http-threads,
 * --kill-grace-ms, --log-level, --token-file, --cors-origin, --allow-host,
 * --network-profile, --join, --node-timeout-ms, --sync-ms, --mpi-agent, --shm-dir) and
 * DDPB_TOKEN (a token
 * given in the environment; --token-file wins). Returns 0; 1 when --help/--version
 * printed; -1 with e naming the bad option. */
int config_parse_args(struct config *c, int argc, char **argv, struct err *e);
void config_print_usage(const char *prog);

#endif
