/* launcher: starts one ddpbench-worker process per rank.
 *
 * Decision: posix_spawn with an argv array (never a shell), the launch environment of
 * docs/design.md §9 (DDPB_* variables replace any inherited ones), the report pipe's write
 * end on fd 3, stdout and stderr into the rank's log file, every other fd closed, and a
 * process group of its own so the daemon can signal the rank and anything it spawned.
 * A pidfd per child lets the monitor's epoll loop see exits without SIGCHLD handlers.
 * A framework engine's rank gets the framework's variables as well (launch_rank.engine),
 * and inherits none of them from the daemon. The daemon's own DDPB_EMULATE_NODES is the one
 * DDPB_* variable a rank inherits: tests and benchmarks on one machine set it on the daemon to
 * split its ranks into emulated nodes (worker/store/rendezvous.h). */
#ifndef DDPB_LAUNCHER_H
#define DDPB_LAUNCHER_H

#include <spawn.h>
#include <stdbool.h>
#include <sys/types.h>

#include "common/err.h"

struct launch_rank {
    const char *worker_path;
    /* engine (issue 16): NULL or "ddpbench" runs worker_path; a framework engine runs
     * `python engines_dir/ddpb_launch.py`, the adapter's bootstrap (engines/ddpb_launch.py),
     * with DDPB_ENGINE and the framework's RANK, WORLD_SIZE and LOCAL_RANK added; the
     * bootstrap agrees ports through the store and sets the rest (MASTER_ADDR, TF_CONFIG) */
    const char *engine;
    const char *python;
    const char *engines_dir;
    const char *script;     /* engine "script": the resolved program (DDPB_SCRIPT); else NULL */
    const char *run;        /* store namespace, DDPB_RUN */
    const char *secret;     /* DDPB_SECRET */
    const char *store_addr; /* host:port, DDPB_STORE */
    const char *spec_path;  /* DDPB_SPEC */
    const char *log_path;   /* stdout + stderr of the rank */
    const char *peer_host;  /* address the rank listens on for peers, DDPB_HOST */
    const char *cpus;       /* CPU list to pin to, DDPB_CPUS; NULL = none */
    /* GPU runs (daemon/gpu_slots.h): "KEY=VALUE" entries such as CUDA_VISIBLE_DEVICES,
     * NCCL_HOSTID, NCCL_MULTI_RANK_GPU_ENABLE; borrowed, at most LAUNCH_MAX_GPU_ENV */
    const char *const *gpu_env;
    int ngpu_env;
    int rank, world_size, local_rank;
    int node_rank;         /* DDPB_NODE_RANK: the node the rank runs on (0 on one node) */
    const char *node_name; /* DDPB_NODE_NAME; NULL = the worker uses its host name */
    /* DDPB_SHM_DIR: where the host backend's shared-memory segments go (ddpbenchd
     * --shm-dir); NULL or "" = not set, the worker's /dev/shm */
    const char *shm_dir;
    /* DDPB_DATA_DIRS: the directories dataset files must lie beneath (ddpbenchd
     * --data-dir, common/paths.h's list); the worker and the Python engines check every
     * dataset file they open against it. NULL or "" = not set: no boundary */
    const char *data_dirs;
    /* DDPB_MEMORY_LIMIT_MIB: the address-space limit the worker sets on itself (RLIMIT_AS,
     * issue 31); 0 = none. The native worker only: a framework engine ignores it. */
    int64_t memory_limit_mib;
    /* A run's launcher (spec launcher mpirun or srun, daemon/launch_plan.h) instead of one
     * rank: argv (NULL-terminated, borrowed) is the whole command, rank is -1, and the
     * process gets the run's variables without DDPB_RANK, DDPB_LOCAL_RANK,
     * DDPB_NODE_RANK, DDPB_CPUS, RANK and LOCAL_RANK (the launcher gives each rank its
     * own), no report pipe (its ranks connect the report channel), and its output goes
     * to log_path. NULL for a rank. */
    char *const *argv;
    /* "KEY=VALUE" entries added to the environment (borrowed; at most LAUNCH_MAX_EXTRA_ENV) */
    const char *const *extra_env;
    int nextra_env;
};

#define LAUNCH_MAX_EXTRA_ENV 32

#define LAUNCH_MAX_GPU_ENV 4

struct launched {
    pid_t pid;
    int report_fd; /* read end of the report pipe: non-blocking, close-on-exec, owned;
                      -1 for a run's launcher (launch_rank.argv) */
    int pidfd;     /* readable when the child exits: owned */
};

/* Spawns the rank. Returns 0 with *out filled (caller owns both fds) or -1 with e set;
 * nothing is left open or running on failure. */
int launcher_spawn(const struct launch_rank *lr, struct launched *out, struct err *e);
/* How every child of the daemon starts (a rank, a run's launcher, a storage mount's
 * server): stdin /dev/null, stdout and stderr into logfd, fd3 (-1: none) on fd 3, every
 * other fd closed, no signal masked or ignored, a process group of its own. */
void launcher_spawn_setup(posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr, int logfd,
                          int fd3);
/* The last line of the log file at path (a program's own complaint) into out, "" when
 * there is none. */
void launcher_log_tail(const char *path, char *out, size_t cap);
/* Sends sig to the rank's process group (falls back to the pid). */
void launcher_signal(pid_t pid, int sig);
/* Kills what is left of the process group of pgid, a rank or launcher the daemon spawned
 * and has reaped: only the group, never the pid itself, which may be reused by now. */
void launcher_end_group(pid_t pgid);
/* True when pid is stopped (SIGSTOP, SIGTSTP, a tracer: /proc/PID/stat state T or t).
 * Such a process does not act on SIGTERM until it is continued, so a grace period spent
 * waiting for it is wasted; false when it runs, sleeps, is gone or cannot be read. */
bool launcher_is_stopped(pid_t pid);
/* Reads /proc/<pid>/<name> (at most cap - 1 bytes) into buf, NUL-terminated. Returns the
 * bytes read, or -1 when the file cannot be opened (no such process). */
long launcher_proc_read(pid_t pid, const char *name, char *buf, size_t cap);
/* True when pid is a process of run `run` (its environment carries DDPB_RUN=run): a rank
 * of another launcher, before the daemon signals it by the pid it reported. */
bool launcher_is_run_process(pid_t pid, const char *run);
/* After a daemon restart: SIGKILLs pid's process group when, and only when, the process
 * is still the worker it was (its environment carries DDPB_RUN=run and DDPB_RANK=rank, or
 * for a rank of another launcher DDPB_LAUNCHER=mpirun or srun), so a recycled pid is never
 * touched. Returns 1 when it killed, 0 otherwise. */
int launcher_kill_orphan(pid_t pid, const char *run, int rank);

#endif
