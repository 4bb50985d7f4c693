/* Unit tests for daemon/mpi_probe: on this machine (deploy/install-deps.sh installs both
 * OpenMPI and MPICH, and the build tree holds both modules beside the worker) both
 * implementations are available with their versions; a node without the launcher on PATH
 * or without the module is refused with 409 naming "mpi" and the install command; an
 * OpenMPI parameter name ompi_info does not list is 400 naming the key. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/mpi_probe.h"
#include "tests/unit/test.h"

static const char *worker_bin(void)
{
    const char *w = getenv("DDPB_WORKER_BIN");
    return w && *w ? w : "worker/ddpbench-worker";
}

static const json_t *impl_row(const json_t *list, const char *name)
{
    size_t i;
    json_t *row;
    json_array_foreach(list, i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "name")), name) == 0)
            return row;
    }
    return NULL;
}

static void test_both_available(void)
{
    struct mpi_probe *p = mpi_probe_create(worker_bin());
    T_CHECK(p);
    json_t *list = mpi_probe_json(p);
    const json_t *o = impl_row(list, "openmpi"), *m = impl_row(list, "mpich");
    bool ok = o && m && json_is_true(json_object_get(o, "available")) &&
              json_is_true(json_object_get(m, "available"));
    const char *ov = json_string_value(json_object_get(o, "version"));
    const char *mv = json_string_value(json_object_get(m, "version"));
    const char *ol = json_string_value(json_object_get(o, "launcher"));
    const char *mm = json_string_value(json_object_get(m, "module"));
    char *dump = json_dumps(list, JSON_COMPACT);
    printf("  %s\n", dump ? dump : "?");
    free(dump);
    ok = ok && ov && strncmp(ov, "4.1", 3) == 0 && mv && strncmp(mv, "4.0", 3) == 0 && ol &&
         strstr(ol, "/mpirun.openmpi") && mm && strstr(mm, "/ddpb_comm_mpi_mpich.so") &&
         json_is_null(json_object_get(o, "reason"));
    json_decref(list);
    struct err e = {0};
    int rc_o = mpi_probe_check(p, "openmpi", &e), rc_m = mpi_probe_check(p, "mpich", &e);
    int rc_bad = mpi_probe_check(p, "lam", &e);
    mpi_probe_destroy(p);
    T_CHECK(ok);
    T_EQ_INT(rc_o, 0);
    T_EQ_INT(rc_m, 0);
    T_EQ_INT(rc_bad, -1);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "mpi");
}

/* PATH without the launchers: 409 naming mpi, the program and the packages. */
static void test_launcher_missing(void)
{
    char *saved = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", test_tmpdir(), 1);
    struct mpi_probe *p = mpi_probe_create(worker_bin());
    struct err e = {0};
    int rc = p ? mpi_probe_check(p, "mpich", &e) : 0;
    mpi_probe_destroy(p);
    setenv("PATH", saved, 1);
    free(saved);
    T_CHECK(p);
    T_EQ_INT(rc, -1);
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_EQ_STR(e.field, "mpi");
    T_CHECK_MSG(strstr(e.msg, "mpiexec.mpich is not on PATH") &&
                    strstr(e.msg, "apt-get install mpich"),
                "%s", e.msg);
}

/* A worker with no modules beside it (and none installed): 409 naming the module and the
 * development package to rebuild with. */
static void test_module_missing(void)
{
    char fake[512];
    test_tmp_path(fake, sizeof fake, "ddpbench-worker");
    struct mpi_probe *p = mpi_probe_create(fake);
    struct err e = {0};
    int rc = p ? mpi_probe_check(p, "openmpi", &e) : 0;
    json_t *list = p ? mpi_probe_json(p) : NULL;
    const json_t *o = impl_row(list, "openmpi");
    bool row_ok = o && json_is_false(json_object_get(o, "available")) &&
                  json_is_null(json_object_get(o, "module")) &&
                  json_string_value(json_object_get(o, "install")) &&
                  strstr(json_string_value(json_object_get(o, "install")), "libopenmpi-dev");
    json_decref(list);
    mpi_probe_destroy(p);
    T_EQ_INT(rc, -1);
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_EQ_STR(e.field, "mpi");
    T_CHECK_MSG(strstr(e.msg, "no ddpb_comm_mpi_openmpi.so beside the worker") &&
                    strstr(e.msg, "libopenmpi-dev"),
                "%s", e.msg);
    T_CHECK(row_ok);
}

static void test_mca_names(void)
{
    struct mpi_probe *p = mpi_probe_create(worker_bin());
    T_CHECK(p);
    struct err e = {0};
    json_t *good = json_pack("{s:s, s:s, s:s, s:s}", "btl", "self,tcp", "btl_tcp_if_include",
                             "lo", "mpi_yield_when_idle", "1", "MPIR_CVAR_CH4_NETMOD", "ofi");
    json_t *bad = json_pack("{s:s, s:s}", "btl", "tcp", "btl_tcp_no_such_knob", "1");
    int rc_good = mpi_probe_check_mca(p, good, &e);
    int rc_bad = mpi_probe_check_mca(p, bad, &e);
    json_decref(good);
    json_decref(bad);
    mpi_probe_destroy(p);
    T_EQ_INT(rc_good, 0);
    T_EQ_INT(rc_bad, -1);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "mpi_mca.btl_tcp_no_such_knob");
    T_CHECK_MSG(strstr(e.msg, "no MCA parameter \"btl_tcp_no_such_knob\""), "%s", e.msg);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_both_available);
    TEST_RUN(test_launcher_missing);
    TEST_RUN(test_module_missing);
    TEST_RUN(test_mca_names);
    return test_end();
}
