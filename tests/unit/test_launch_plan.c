/* Unit tests for daemon/launch_plan: the exact command line and environment of each
 * launcher (OpenMPI's mpirun, MPICH's hydra, srun with and without MPI), the MPI settings
 * as each implementation reads them, and the refusals (ddpbench's own launcher has no
 * plan; a setting of the other implementation; too long a value). */
#include <string.h>

#include "daemon/launch_plan.h"
#include "tests/unit/test.h"

static struct spec plan_spec(const char *launcher, const char *mpi, const char *backend)
{
    struct spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.launcher, sizeof s.launcher, "%s", launcher);
    snprintf(s.mpi, sizeof s.mpi, "%s", mpi);
    snprintf(s.backend, sizeof s.backend, "%s", backend);
    s.world_size = 2;
    return s;
}

static struct launch_plan_input plan_input(const struct spec *s)
{
    return (struct launch_plan_input){.spec = s,
                                      .program = "/w/ddpbench-worker",
                                      .report_addr = "127.0.0.1:4000",
                                      .log_dir = "/state/runs/9",
                                      .cpu_map = "0;1",
                                      .run_id = 9};
}

/* The argv joined with spaces. */
static const char *plan_line(const struct launch_plan *p)
{
    static char line[4096];
    line[0] = '\0';
    for (int i = 0; i < p->argc; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", i ? " " : "",
                 p->argv[i]);
    return line;
}

static bool plan_has_env(const struct launch_plan *p, const char *kv)
{
    for (int i = 0; i < p->nenv; i++)
        if (strcmp(p->env[i], kv) == 0)
            return true;
    return false;
}

static void test_plan_mpirun_openmpi(void)
{
    struct spec s = plan_spec("mpirun", "openmpi", "mpi");
    s.n_mpi_params = 1;
    snprintf(s.mpi_params[0].key, sizeof s.mpi_params[0].key, "btl");
    snprintf(s.mpi_params[0].value, sizeof s.mpi_params[0].value, "self,tcp");
    struct launch_plan_input in = plan_input(&s);
    struct launch_plan p;
    struct err e = {0};
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_EQ_STR(plan_line(&p), "mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 "
                            "--bind-to none /w/ddpbench-worker");
    T_CHECK(plan_has_env(&p, "DDPB_LAUNCHER=mpirun"));
    T_CHECK(plan_has_env(&p, "DDPB_REPORT=127.0.0.1:4000"));
    T_CHECK(plan_has_env(&p, "DDPB_LOG_DIR=/state/runs/9"));
    T_CHECK(plan_has_env(&p, "DDPB_CPU_MAP=0;1"));
    T_CHECK(plan_has_env(&p, "OMPI_MCA_btl=self,tcp"));
    T_EQ_INT(p.nenv, 5);
    char *argv[LAUNCH_PLAN_MAX_ARGS + 1];
    launch_plan_argv(&p, argv);
    T_EQ_STR(argv[0], "mpirun.openmpi");
    T_CHECK(argv[p.argc] == NULL);
}

static void test_plan_mpirun_mpich(void)
{
    struct spec s = plan_spec("mpirun", "mpich", "tcp");
    s.n_mpi_params = 1;
    snprintf(s.mpi_params[0].key, sizeof s.mpi_params[0].key, "MPIR_CVAR_CH4_NETMOD");
    snprintf(s.mpi_params[0].value, sizeof s.mpi_params[0].value, "ofi");
    struct launch_plan_input in = plan_input(&s);
    in.program = "/usr/bin/python3";
    in.program_arg = "/e/ddpb_launch.py";
    in.cpu_map = NULL;
    struct launch_plan p;
    struct err e = {0};
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_EQ_STR(plan_line(&p), "mpiexec.mpich -n 2 -genvall -bind-to none /usr/bin/python3 "
                            "/e/ddpb_launch.py");
    T_CHECK(plan_has_env(&p, "MPIR_CVAR_CH4_NETMOD=ofi"));
    T_CHECK(!plan_has_env(&p, "DDPB_CPU_MAP=0;1")); /* unpinned: no map */
    T_EQ_INT(p.nenv, 4);
}

static void test_plan_srun(void)
{
    struct spec s = plan_spec("srun", "openmpi", "mpi");
    s.world_size = 4;
    s.nodes = 2;
    s.ranks_per_node = 2;
    struct launch_plan_input in = plan_input(&s);
    struct launch_plan p;
    struct err e = {0};
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_EQ_STR(plan_line(&p), "srun --ntasks=4 --mpi=pmix --kill-on-bad-exit=1 --export=ALL "
                            "--job-name=ddpbench-run-9 --nodes=2 --ntasks-per-node=2 "
                            "/w/ddpbench-worker");
    T_CHECK(plan_has_env(&p, "DDPB_LAUNCHER=srun"));
    s = plan_spec("srun", "mpich", "tcp"); /* no MPI in the ranks: no PMI plugin */
    in = plan_input(&s);
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_CHECK(strstr(plan_line(&p), "--mpi=none") != NULL);
    s = plan_spec("srun", "mpich", "mpi");
    in = plan_input(&s);
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_CHECK(strstr(plan_line(&p), "--mpi=pmi2") != NULL);
    T_CHECK(strstr(plan_line(&p), "--nodes=") == NULL); /* Slurm places it */
    /* transport shm: one node of the allocation, whatever Slurm would do */
    s = plan_spec("srun", "openmpi", "tcp");
    in = plan_input(&s);
    snprintf(s.transport, sizeof s.transport, "shm");
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_CHECK_MSG(strstr(plan_line(&p), "--nodes=1 ") != NULL, "%s", plan_line(&p));
    snprintf(s.transport, sizeof s.transport, "auto");
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_CHECK(strstr(plan_line(&p), "--nodes=") == NULL);
}

static void test_plan_refusals(void)
{
    struct launch_plan p;
    struct err e = {0};
    struct spec s = plan_spec("ddpbench", "openmpi", "tcp");
    struct launch_plan_input in = plan_input(&s);
    T_CHECK(launch_plan_build(&in, &p, &e) < 0);
    T_EQ_STR(e.field, "launcher");
    s = plan_spec("mpirun", "mpich", "mpi"); /* an OpenMPI MCA name under MPICH */
    s.n_mpi_params = 1;
    snprintf(s.mpi_params[0].key, sizeof s.mpi_params[0].key, "btl");
    snprintf(s.mpi_params[0].value, sizeof s.mpi_params[0].value, "tcp");
    in = plan_input(&s);
    T_CHECK(launch_plan_build(&in, &p, &e) < 0);
    T_EQ_STR(e.field, "mpi_mca");
    T_CHECK_MSG(strstr(e.msg, "mpi_mca.btl") && strstr(e.msg, "OpenMPI"), "%s", e.msg);
    s = plan_spec("mpirun", "openmpi", "mpi"); /* an MPICH variable under OpenMPI */
    s.n_mpi_params = 1;
    snprintf(s.mpi_params[0].key, sizeof s.mpi_params[0].key, "MPIR_CVAR_X");
    snprintf(s.mpi_params[0].value, sizeof s.mpi_params[0].value, "1");
    in = plan_input(&s);
    T_CHECK(launch_plan_build(&in, &p, &e) < 0);
    T_EQ_STR(e.field, "mpi_mca");
    s = plan_spec("mpirun", "lam", "mpi");
    in = plan_input(&s);
    T_CHECK(launch_plan_build(&in, &p, &e) < 0);
    T_EQ_STR(e.field, "mpi");
    char longdir[700];
    memset(longdir, 'd', sizeof longdir - 1);
    longdir[sizeof longdir - 1] = '\0';
    s = plan_spec("mpirun", "openmpi", "tcp");
    in = plan_input(&s);
    in.log_dir = longdir;
    T_CHECK(launch_plan_build(&in, &p, &e) < 0);
    T_EQ_STR(e.field, "launcher");
}

/* mpirun across nodes: the host list and the agent in place of ssh, for each
 * implementation; no agent, an agent path mpirun would split, or srun given hosts are
 * refused naming launcher. */
static void test_plan_mpirun_hosts(void)
{
    struct spec s = plan_spec("mpirun", "openmpi", "tcp");
    struct launch_plan_input in = plan_input(&s);
    in.hosts = "10.0.0.1:1,10.0.0.2:1";
    in.agent = "/a/agent";
    in.node_map = "0;1";
    in.cpu_map = NULL;
    struct launch_plan p;
    struct err e = {0};
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_EQ_STR(plan_line(&p), "mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 "
                            "--bind-to none --host 10.0.0.1:1,10.0.0.2:1 --mca plm_rsh_agent "
                            "/a/agent --mca plm_rsh_no_tree_spawn 1 /w/ddpbench-worker");
    T_CHECK(plan_has_env(&p, "DDPB_NODE_MAP=0;1"));
    s = plan_spec("mpirun", "mpich", "tcp");
    T_CHECK_MSG(launch_plan_build(&in, &p, &e) == 0, "%s", e.msg);
    T_EQ_STR(plan_line(&p), "mpiexec.mpich -n 2 -genvall -bind-to none -hosts "
                            "10.0.0.1:1,10.0.0.2:1 -launcher ssh -launcher-exec /a/agent "
                            "/w/ddpbench-worker");
    const char *bad_agents[] = {NULL, "", "/a/my agent"};
    for (size_t i = 0; i < sizeof bad_agents / sizeof *bad_agents; i++) {
        in.agent = bad_agents[i];
        e = (struct err){0};
        T_CHECK(launch_plan_build(&in, &p, &e) < 0);
        T_EQ_STR(e.field, "launcher");
    }
    s = plan_spec("srun", "mpich", "tcp");
    in.agent = "/a/agent";
    T_CHECK(launch_plan_build(&in, &p, &e) < 0);
    T_EQ_STR(e.field, "launcher");
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_plan_mpirun_openmpi);
    TEST_RUN(test_plan_mpirun_mpich);
    TEST_RUN(test_plan_srun);
    TEST_RUN(test_plan_refusals);
    TEST_RUN(test_plan_mpirun_hosts);
    return test_end();
}
