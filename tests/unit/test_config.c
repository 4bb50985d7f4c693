/* Unit tests for daemon/config's --network-profile: the default is none (the host network,
 * stored as null), a label is kept as given, "none" clears it, and a name that could not
 * be a results column or CSV cell as is (a comma, a space, empty, too long) is refused
 * naming the option. --mpi-agent: off unless given, an executable kept as its real path.
 * --shm-dir: none unless given, an existing directory kept as its real path; a missing path
 * or a file is refused naming the option and the path. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "tests/unit/test.h"

/* config_parse_args over {"ddpbenchd", args..., NULL}; getopt restarted each time. */
static int test_config_parse(struct config *c, char **args, int n, struct err *e)
{
    char *argv[8] = {"ddpbenchd"};
    for (int i = 0; i < n && i < 6; i++)
        argv[i + 1] = args[i];
    optind = 0;
    return config_parse_args(c, n + 1, argv, e);
}

static void test_config_network_profile(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.network_profile, "");
    char *given[] = {"--network-profile", "10gbe"};
    T_EQ_INT(test_config_parse(&c, given, 2, &e), 0);
    T_EQ_STR(c.network_profile, "10gbe");
    char *none[] = {"--network-profile", "10gbe", "--network-profile", "none"};
    T_EQ_INT(test_config_parse(&c, none, 4, &e), 0);
    T_EQ_STR(c.network_profile, "");
    char long_name[80];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    char *bad[][2] = {{"--network-profile", "1gbe,10gbe"},
                      {"--network-profile", "1 gbe"},
                      {"--network-profile", ""},
                      {"--network-profile", long_name}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, "network-profile");
    }
}

/* --mpi-agent: off by default; an executable is kept as its real path; a missing or
 * non-executable file is refused naming the option. */
static void test_config_mpi_agent(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.mpi_agent, "");
    char *given[] = {"--mpi-agent", "/bin/../bin/sh"};
    T_CHECK_MSG(test_config_parse(&c, given, 2, &e) == 0, "%s", e.msg);
    char want[PATH_MAX];
    T_CHECK(realpath("/bin/sh", want) != NULL);
    T_EQ_STR(c.mpi_agent, want);
    char *bad[][2] = {{"--mpi-agent", "/nonexistent/agent"}, {"--mpi-agent", "/etc/passwd"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_STR(e.field, "mpi-agent");
    }
}

/* --rank-memory-margin-mib (issue 31): 1024 by default, -1 turns the limit off, anything
 * else out of range or not a number is refused naming the option. */
static void test_config_rank_memory_margin(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_INT(c.rank_memory_margin_mib, 1024);
    char *off[] = {"--rank-memory-margin-mib", "-1"};
    T_CHECK_MSG(test_config_parse(&c, off, 2, &e) == 0, "%s", e.msg);
    T_EQ_INT(c.rank_memory_margin_mib, -1);
    char *bad[][2] = {{"--rank-memory-margin-mib", "-2"}, {"--rank-memory-margin-mib", "1G"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_STR(e.field, "rank-memory-margin-mib");
    }
}

/* --shm-dir: "" by default (the workers' /dev/shm); a directory is kept as its real path;
 * a missing path or a file is refused naming the option, the message naming the path. */
static void test_config_shm_dir(void)
{
    struct config c;
    struct err e = {0};
    T_EQ_INT(test_config_parse(&c, NULL, 0, &e), 0);
    T_EQ_STR(c.shm_dir, "");
    char dir[] = "/tmp/ddpb-shm-dir-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    char given_path[PATH_MAX], want[PATH_MAX], file[PATH_MAX];
    snprintf(given_path, sizeof given_path, "%s/../%s", dir, strrchr(dir, '/') + 1);
    T_CHECK(realpath(dir, want) != NULL);
    char *given[] = {"--shm-dir", given_path};
    T_CHECK_MSG(test_config_parse(&c, given, 2, &e) == 0, "%s", e.msg);
    T_EQ_STR(c.shm_dir, want);
    snprintf(file, sizeof file, "%s/segment", dir);
    FILE *f = fopen(file, "w");
    T_CHECK(f != NULL);
    if (f)
        fclose(f);
    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/nonexistent", dir);
    char *bad[][2] = {{"--shm-dir", missing}, {"--shm-dir", file}};
    const char *why[] = {"No such file or directory", "not a directory"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e = (struct err){0};
        T_CHECK_MSG(test_config_parse(&c, bad[i], 2, &e) < 0, "accepted '%s'", bad[i][1]);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, "shm-dir");
        T_CHECK_MSG(strstr(e.msg, bad[i][1]) && strstr(e.msg, why[i]), "%s", e.msg);
        T_EQ_STR(c.shm_dir, "");
    }
    unlink(file);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_config_network_profile);
    TEST_RUN(test_config_mpi_agent);
    TEST_RUN(test_config_shm_dir);
    TEST_RUN(test_config_rank_memory_margin);
    return test_end();
}
