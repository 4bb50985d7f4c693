/* config: ddpbenchd's settings from the command line and the environment.
 *
 * Decision: one flat struct filled once at start-up and read-only afterwards (threads
 * share it without locks). Defaults are safe: bind 127.0.0.1, CPU slots = online CPUs
 * (never oversubscribed unless asked, since oversubscribed ranks make every timing
 * wrong), worker binary found beside the daemon's own executable. */
#ifndef DDPB_CONFIG_H
#define DDPB_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/log.h"

#define CONFIG_DEFAULT_PORT 7480
/* where deploy/install-deps.sh's dataset packages put their files (dataset-fashion-mnist):
 * one of the default --data-dir directories */
#define CONFIG_SYSTEM_DATA_DIR "/usr/share/datasets"
#define CONFIG_PEM_MAX (256 << 10) /* a certificate chain or key file, at most */

struct config {
    char host[128];       /* HTTP bind address */
    int port;             /* HTTP port; 0 = ephemeral */
    char store_host[128]; /* store bind address (workers connect to it) */
    int store_port;       /* 0 = ephemeral */
    char state_dir[PATH_MAX];
    char worker_path[PATH_MAX];
    /* the per-rank storage mounts (daemon/storage_mount.h): the ddpbench-fs program
     * (--fs; default beside ddpbenchd, or the build tree's fs/) and the FUSE device it
     * opens (--fuse-device, default /dev/fuse), checked at submit */
    char fs_path[PATH_MAX];
    char fuse_device[PATH_MAX];
    char web_dir[PATH_MAX];
    /* framework engines (issue 16): their Python adapters, and the interpreter that runs
     * them (the project venv's when deploy/install-deps.sh --engines made it, else
     * /usr/bin/python3: Debian's torch needs no venv) */
    char engines_dir[PATH_MAX];
    char python[PATH_MAX];
    char scripts_dir[PATH_MAX]; /* engine "script" runs files under it only; "" = off */
    /* --data-dir: the directories a spec's dataset.path must lie beneath, real paths joined
     * by ':' (common/paths.h); the workers get it as DDPB_DATA_DIRS and check again.
     * "" until config_default_data_dirs fills the defaults when none was given. */
    char data_dirs[4 * PATH_MAX];
    char node[64];   /* this node's name (hostname by default) */
    int cpu_slots;   /* ranks that may run at once on this node */
    int gpus;        /* GPU slots (daemon/gpu_slots.h): --gpus N, else NVML's count
                             (0 where NVML is unavailable) */
    size_t max_body; /* largest accepted request body */
    int http_threads;
    /* RLIMIT_AS of each rank of a native CPU training run: the spec's memory estimate
     * x 1.25 plus this many MiB (--rank-memory-margin-mib; -1: no limit) */
    int rank_memory_margin_mib;
    int kill_grace_ms; /* SIGTERM → SIGKILL delay when stopping workers */
    enum log_level log_level;
    char token[256];      /* bearer token every mutation needs; "" = none */
    char read_token[256]; /* --read-token: what a GET needs (or the admin token); "" = none */
    /* --cluster-key: the cluster's shared key (daemon/credential.h): a follower proves
     * its node name with HMAC-SHA256(key, name); "" = none: followers join with the
     * admin token, as before issue 31, and the daemon warns at start */
    char cluster_key[256];
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
    /* TLS (issue 31): tls_cert/tls_key = the API listener's certificate chain and key, PEM,
     * kept as real paths (both or neither; "" = plain HTTP, the default). join_ca = the
     * CA or certificate a follower pins the https:// leader to; join_system_ca = the
     * system trust store instead (asked for explicitly, never a silent fallback). */
    char tls_cert[PATH_MAX];
    char tls_key[PATH_MAX];
    char join_ca[PATH_MAX];
    bool join_system_ca;
};

/* Fills defaults, then argv (--host, --port, --store-host, --store-port, --state-dir,
 * --worker, --fs, --fuse-device, --web-dir, --scripts-dir, --data-dir, --node, --cpu-slots,
 * --gpus, --max-body,
 * --http-threads, --kill-grace-ms, --log-level, --token-file, --read-token, --cluster-key,
 * --cors-origin, --allow-host, --network-profile, --join, --node-timeout-ms, --sync-ms,
 * --mpi-agent, --shm-dir, --tls-cert, --tls-key, --join-ca, --join-system-ca) and
 * DDPB_TOKEN (a token given in the environment; --token-file wins; removed from the
 * environment once read, so no child inherits it). The TLS files are checked here
 * (readable, PEM of the right kind, the key the certificate's), so a bad one stops the
 * start naming its flag. Returns 0; 1 when --help/--version printed; -1 with e naming the
 * bad option. */
int config_parse_args(struct config *c, int argc, char **argv, struct err *e);
/* When no --data-dir was given: the state directory's data/ (made here; the state
 * directory must exist) and CONFIG_SYSTEM_DATA_DIR where it exists. 0, or -1 with e. */
int config_default_data_dirs(struct config *c, struct err *e);
void config_print_usage(const char *prog);
/* The whole of a PEM file named by --tls-cert / --tls-key (flag: its name, for messages)
 * into a NUL-terminated string (owned by the caller: free). NULL with e naming the flag. */
char *config_read_pem(const char *path, const char *flag, struct err *e);

#endif
