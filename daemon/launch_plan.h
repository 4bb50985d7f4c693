/* launch_plan: the command line and environment of a run's launcher when the spec's
 * launcher is not ddpbench's own: `mpirun` (the MPI implementation's launcher: OpenMPI's
 * mpirun, MPICH's mpiexec.hydra) or `srun` (Slurm, from a daemon inside an allocation).
 * The daemon starts that one process (daemon/launcher.h) and it starts every rank.
 *
 * Decisions:
 * - An argv array, never a shell: every value that reaches it is the daemon's own or a
 *   spec value the spec's checks held to a pattern (mpi_mca names and values).
 * - The ranks learn the run the way ranks of ddpbench's launcher do (DDPB_* variables),
 *   but not their rank: that is the launcher's (worker/store/rendezvous.h), and
 *   DDPB_LAUNCHER says which variables hold it. DDPB_REPORT is the run's report channel
 *   (daemon/monitor.c), DDPB_LOG_DIR where each rank writes its own log, DDPB_CPU_MAP the
 *   CPUs the scheduler gave each rank (mpirun's binding is off, so both launchers pin the
 *   same way; under srun Slurm binds and there is no map).
 * - MPI transport settings travel as the environment both implementations read:
 *   OMPI_MCA_<name> for OpenMPI, the MPIR_CVAR_<name> itself for MPICH. The launcher
 *   passes its environment on to the ranks it starts on its own node (OpenMPI's mpirun
 *   does, hydra with -genvall, srun with --export=ALL).
 * - mpirun across nodes (in->hosts): the scheduler placed the ranks over the cluster's
 *   nodes, and the host list says how many go where, in rank order (OpenMPI's --host
 *   a:n,b:m fills a's slots first; hydra's -hosts a:n,b:m does the same). No ssh: the
 *   daemon's --mpi-agent starts the MPI daemon on the other nodes (OpenMPI's
 *   plm_rsh_agent, hydra's ssh launcher with -launcher-exec; both call it as
 *   `agent [options] HOST COMMAND...`), and OpenMPI's tree spawn is off so only mpirun,
 *   here, calls the agent. DDPB_NODE_MAP gives each rank its node index (the launcher's
 *   one environment cannot carry DDPB_NODE_RANK). Without hosts every rank stays on
 *   this node. */
#ifndef DDPB_LAUNCH_PLAN_H
#define DDPB_LAUNCH_PLAN_H

#include "common/err.h"
#include "common/spec.h"

#define LAUNCH_PLAN_MAX_ARGS 32
#define LAUNCH_PLAN_MAX_ENV (8 + SPEC_MAX_MPI_PARAMS)

struct launch_plan_input {
    const struct spec *spec; /* borrowed: launcher, mpi, mpi_params, nodes, backend */
    const char *program;     /* what each rank runs: the worker, or the engines' python */
    const char *program_arg; /* its one argument (the engines' bootstrap), or NULL */
    const char *report_addr; /* "host:port" of the run's report channel */
    const char *log_dir;     /* the run's directory */
    const char *cpu_map;     /* "0;1" (a CPU list per rank), or NULL: not pinned */
    long long run_id;        /* names the Slurm step */
    /* mpirun across nodes: "addr:n,addr:m" (the ranks per node, in rank order) and the
     * remote-launch agent; both NULL = this node only */
    const char *hosts;
    const char *agent;
    const char *node_map; /* "0;0;1": each rank's node index (DDPB_NODE_MAP), or NULL */
};

/* The launcher's argv and the variables it adds to a rank's environment ("KEY=VALUE");
 * self-contained (no pointers into the input). */
struct launch_plan {
    int argc, nenv;
    char argv[LAUNCH_PLAN_MAX_ARGS][600];
    char env[LAUNCH_PLAN_MAX_ENV][600];
};

/* Fills out for in->spec's launcher. ERR_INVALID naming "launcher" for ddpbench's own
 * (it has no plan) or an unknown one, or hosts without an agent (or with srun), "mpi" for
 * an unknown implementation, "mpi_mca" for a setting that does not fit. */
int launch_plan_build(const struct launch_plan_input *in, struct launch_plan *out,
                      struct err *e);
/* NULL-terminated pointers into p->argv (out: LAUNCH_PLAN_MAX_ARGS + 1 entries). */
void launch_plan_argv(const struct launch_plan *p, char **out);

#endif
