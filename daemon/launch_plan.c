/* launch_plan: see launch_plan.h. */
#include "daemon/launch_plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/vocab.h"

__attribute__((format(printf, 3, 4))) static int plan_arg(struct launch_plan *p, struct err *e,
                                                          const char *fmt, ...)
{
    if (p->argc >= LAUNCH_PLAN_MAX_ARGS)
        return err_set(e, ERR_INVALID, "launcher", "launcher: more than %d arguments",
                       LAUNCH_PLAN_MAX_ARGS);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->argv[p->argc], sizeof p->argv[0], fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof p->argv[0])
        return err_set(e, ERR_INVALID, "launcher", "launcher: an argument is too long");
    p->argc++;
    return 0;
}

__attribute__((format(printf, 4, 5))) static int
plan_env(struct launch_plan *p, struct err *e, const char *field, const char *fmt, ...)
{
    if (p->nenv >= LAUNCH_PLAN_MAX_ENV)
        return err_set(e, ERR_INVALID, field, "%s: too many settings", field);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->env[p->nenv], sizeof p->env[0], fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof p->env[0])
        return err_set(e, ERR_INVALID, field, "%s: a setting is too long", field);
    p->nenv++;
    return 0;
}

/* The run's variables every launcher hands its ranks, and the MPI settings. */
static int plan_common_env(const struct launch_plan_input *in, const struct vocab_mpi *mpi,
                           struct launch_plan *p, struct err *e)
{
    const struct spec *s = in->spec;
    int rc = plan_env(p, e, "launcher", "DDPB_LAUNCHER=%s", s->launcher) |
             plan_env(p, e, "launcher", "DDPB_REPORT=%s", in->report_addr) |
             plan_env(p, e, "launcher", "DDPB_LOG_DIR=%s", in->log_dir);
    if (in->cpu_map)
        rc |= plan_env(p, e, "launcher", "DDPB_CPU_MAP=%s", in->cpu_map);
    if (in->node_map)
        rc |= plan_env(p, e, "launcher", "DDPB_NODE_MAP=%s", in->node_map);
    for (int i = 0; i < s->n_mpi_params && rc == 0; i++) {
        const struct spec_mpi_param *m = &s->mpi_params[i];
        /* an MPICH control variable is its own name; an OpenMPI MCA name gets its prefix */
        bool cvar = strncmp(m->key, "MPIR_CVAR_", 10) == 0;
        if (cvar != (mpi == vocab_mpi(VOCAB_MPI_MPICH)))
            return err_set(e, ERR_INVALID, "mpi_mca",
                           "mpi_mca.%s: a setting of %s, but mpi is \"%s\"", m->key,
                           cvar ? "MPICH (MPIR_CVAR_*)" : "OpenMPI (an MCA name)", mpi->name);
        rc |= cvar ? plan_env(p, e, "mpi_mca", "%s=%s", m->key, m->value)
                   : plan_env(p, e, "mpi_mca", "OMPI_MCA_%s=%s", m->key, m->value);
    }
    return rc ? -1 : 0;
}

/* OpenMPI's mpirun on this node: root allowed (containers, CI), as many ranks as asked
 * whatever the core count, and no binding of its own (DDPB_CPU_MAP pins). */
static int plan_mpirun_openmpi(const struct launch_plan_input *in, const struct vocab_mpi *mpi,
                               struct launch_plan *p, struct err *e)
{
    return plan_arg(p, e, "%s", mpi->launcher) | plan_arg(p, e, "--allow-run-as-root") |
           plan_arg(p, e, "--oversubscribe") | plan_arg(p, e, "-np") |
           plan_arg(p, e, "%d", in->spec->world_size) | plan_arg(p, e, "--bind-to") |
           plan_arg(p, e, "none");
}

/* MPICH's hydra on this node: the whole environment to every rank, no binding. */
static int plan_mpirun_mpich(const struct launch_plan_input *in, const struct vocab_mpi *mpi,
                             struct launch_plan *p, struct err *e)
{
    return plan_arg(p, e, "%s", mpi->launcher) | plan_arg(p, e, "-n") |
           plan_arg(p, e, "%d", in->spec->world_size) | plan_arg(p, e, "-genvall") |
           plan_arg(p, e, "-bind-to") | plan_arg(p, e, "none");
}

/* Across nodes (launch_plan.h): the host list, and the agent in place of ssh. OpenMPI's
 * agent is one MCA value split on spaces, so a path with a space is refused. */
static int plan_mpirun_hosts(const struct launch_plan_input *in, bool mpich,
                             struct launch_plan *p, struct err *e)
{
    if (!in->agent || !in->agent[0])
        return err_set(e, ERR_INVALID, "launcher",
                       "launcher mpirun across nodes needs ddpbenchd's --mpi-agent");
    if (strchr(in->agent, ' '))
        return err_set(e, ERR_INVALID, "launcher", "--mpi-agent '%s': a path with a space",
                       in->agent);
    if (mpich)
        return plan_arg(p, e, "-hosts") | plan_arg(p, e, "%s", in->hosts) |
               plan_arg(p, e, "-launcher") | plan_arg(p, e, "ssh") |
               plan_arg(p, e, "-launcher-exec") | plan_arg(p, e, "%s", in->agent);
    return plan_arg(p, e, "--host") | plan_arg(p, e, "%s", in->hosts) |
           plan_arg(p, e, "--mca") | plan_arg(p, e, "plm_rsh_agent") |
           plan_arg(p, e, "%s", in->agent) | plan_arg(p, e, "--mca") |
           plan_arg(p, e, "plm_rsh_no_tree_spawn") | plan_arg(p, e, "1");
}

/* srun inside the daemon's allocation: one step of world_size tasks, wired up with the
 * implementation's PMI plugin for backend mpi (none otherwise), killed whole when one
 * task fails, named after the run so sacct shows which step was which. */
static int plan_srun(const struct launch_plan_input *in, const struct vocab_mpi *mpi,
                     struct launch_plan *p, struct err *e)
{
    const struct spec *s = in->spec;
    bool mpi_backend = strcmp(s->backend, "mpi") == 0;
    int rc = plan_arg(p, e, "srun") | plan_arg(p, e, "--ntasks=%d", s->world_size) |
             plan_arg(p, e, "--mpi=%s", mpi_backend ? mpi->pmi : "none") |
             plan_arg(p, e, "--kill-on-bad-exit=1") | plan_arg(p, e, "--export=ALL") |
             plan_arg(p, e, "--job-name=ddpbench-run-%lld", in->run_id);
    /* a transport without TCP (shm) keeps the step on one node of the allocation (the
     * spec's checks refuse it with nodes or ranks_per_node that span more) */
    const struct vocab_transport *t = vocab_transport(
        vocab_find(VOCAB_TRANSPORT, s->transport));
    int nodes = s->nodes == 0 && s->ranks_per_node == 0 && t && !t->tcp ? 1 : s->nodes;
    if (nodes > 0)
        rc |= plan_arg(p, e, "--nodes=%d", nodes);
    if (s->ranks_per_node > 0)
        rc |= plan_arg(p, e, "--ntasks-per-node=%d", s->ranks_per_node);
    return rc;
}

int launch_plan_build(const struct launch_plan_input *in, struct launch_plan *out,
                      struct err *e)
{
    memset(out, 0, sizeof *out);
    const struct spec *s = in->spec;
    int launcher = vocab_find(VOCAB_LAUNCHER, s->launcher);
    const struct vocab_mpi *mpi = vocab_mpi(vocab_find(VOCAB_MPI, s->mpi));
    if (launcher < 0 || vocab_launcher(launcher)->per_rank)
        return err_set(e, ERR_INVALID, "launcher", "launcher \"%s\" has no launch plan",
                       s->launcher);
    if (!mpi)
        return err_set(e, ERR_INVALID, "mpi", "mpi \"%s\" is unknown", s->mpi);
    bool mpich = mpi == vocab_mpi(VOCAB_MPI_MPICH);
    int rc;
    if (launcher == VOCAB_LAUNCHER_SRUN && in->hosts)
        return err_set(e, ERR_INVALID, "launcher", "launcher srun places its ranks itself");
    if (launcher == VOCAB_LAUNCHER_SRUN)
        rc = plan_srun(in, mpi, out, e);
    else if (mpich)
        rc = plan_mpirun_mpich(in, mpi, out, e);
    else
        rc = plan_mpirun_openmpi(in, mpi, out, e);
    if (rc == 0 && launcher != VOCAB_LAUNCHER_SRUN && in->hosts)
        rc = plan_mpirun_hosts(in, mpich, out, e);
    rc |= plan_arg(out, e, "%s", in->program);
    if (in->program_arg)
        rc |= plan_arg(out, e, "%s", in->program_arg);
    if (rc || plan_common_env(in, mpi, out, e) < 0)
        return -1;
    return 0;
}

void launch_plan_argv(const struct launch_plan *p, char **out)
{
    for (int i = 0; i < p->argc; i++)
        out[i] = (char *)p->argv[i];
    out[p->argc] = NULL;
}
