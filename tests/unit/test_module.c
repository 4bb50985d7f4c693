/* Unit tests for worker/module: a module beside the program loads and is called through
 * its entry; a second load returns the same entry; a missing file, a missing symbol and
 * another ABI fail with messages naming the module and what to install or rebuild. The
 * modules are tests/unit/module_probe.c built three ways into this binary's folder. */
#include <limits.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/module/module.h"

struct probe_entry {
    int abi;
    int (*twice)(int);
};

static struct module_spec probe_spec(const char *file)
{
    return (struct module_spec){.file = file,
                                .symbol = "ddpb_module_probe",
                                .what = "the probe module",
                                .install = "apt-get install probe",
                                .rebuild = "rebuild with probe",
                                .field = "backend"};
}

static void test_loads_and_calls(void)
{
    struct err e = {0};
    struct module_spec m = probe_spec("libmodule_probe.so");
    const struct probe_entry *p = module_load(&m, &e);
    T_CHECK_MSG(p, "%s", e.msg);
    T_CHECK(p->abi == MODULE_ABI);
    T_CHECK(p->twice(21) == 42);
    T_CHECK(module_load(&m, &e) == p); /* loaded once */
    char path[PATH_MAX];
    T_CHECK(module_find("libmodule_probe.so", path, sizeof path) == 0);
    T_CHECK(strstr(path, "/libmodule_probe.so") != NULL);
}

static void test_missing_file(void)
{
    struct err e = {0};
    struct module_spec m = probe_spec("libno_such_module.so");
    T_CHECK(module_load(&m, &e) == NULL);
    T_CHECK(e.code == ERR_INVALID);
    T_EQ_STR(e.field, "backend"); /* the spec field the module stands for */
    T_CHECK_MSG(strstr(e.msg, "the probe module is not installed") &&
                    strstr(e.msg, "libno_such_module.so") &&
                    strstr(e.msg, "rebuild with probe"),
                "%s", e.msg);
    char path[PATH_MAX];
    T_CHECK(module_find("libno_such_module.so", path, sizeof path) < 0);
}

static void test_missing_symbol(void)
{
    struct err e = {0};
    struct module_spec m = probe_spec("libmodule_probe_nosym.so");
    T_CHECK(module_load(&m, &e) == NULL);
    T_CHECK_MSG(strstr(e.msg, "has no symbol ddpb_module_probe"), "%s", e.msg);
}

static void test_abi_skew(void)
{
    struct err e = {0};
    struct module_spec m = probe_spec("libmodule_probe_skew.so");
    m.symbol = "ddpb_module_probe_skew";
    T_CHECK(module_load(&m, &e) == NULL);
    T_CHECK_MSG(strstr(e.msg, "module ABI") && strstr(e.msg, "rebuild with probe"), "%s",
                e.msg);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_loads_and_calls);
    TEST_RUN(test_missing_file);
    TEST_RUN(test_missing_symbol);
    TEST_RUN(test_abi_skew);
    return test_end();
}
