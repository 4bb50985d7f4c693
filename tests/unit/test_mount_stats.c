/* test_mount_stats: worker/data/mount_stats.c. A rank's read bytes through its storage
 * mount come from the mount's stats line: parsed strictly (every count, non-negative
 * integers, an object), read from <mount>/.ddpbench-fs-stats, and the mount named by
 * DDPB_STORAGE_MOUNT only when it is set and not empty. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/data/mount_stats.h"

static void test_parse(void)
{
    struct data_storage_stats s = {0};
    struct err e = {0};
    T_OK(data_mount_stats_parse(
        "{\"requests\":12,\"bytes\":3145728,\"wait_ns\":900,\"read_ns\":70}\n", &s, &e));
    T_CHECK(s.requests == 12 && s.bytes == 3145728 && s.wait_ns == 900 && s.read_ns == 70);
    static const char *const bad[] = {
        "",
        "[]",
        "{\"requests\":1,\"bytes\":2,\"wait_ns\":3}",
        "{\"requests\":1,\"bytes\":-2,\"wait_ns\":3,\"read_ns\":4}",
        "{\"requests\":1,\"bytes\":2.5,\"wait_ns\":3,\"read_ns\":4}",
        "ready"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = (struct err){0};
        T_CHECK_MSG(data_mount_stats_parse(bad[i], &s, &e) < 0 && e.code == ERR_PROTOCOL,
                    "bad %zu", i);
    }
}

static void test_read(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), DATA_MOUNT_STATS_FILE);
    FILE *f = fopen(path, "w");
    T_CHECK(f);
    if (!f)
        return;
    fputs("{\"requests\":3,\"bytes\":4096,\"wait_ns\":1,\"read_ns\":2}\n", f);
    fclose(f);
    struct data_storage_stats s = {0};
    struct err e = {0};
    T_OK(data_mount_stats_read(test_tmpdir(), &s, &e));
    T_CHECK(s.bytes == 4096 && s.requests == 3);
    e = (struct err){0};
    T_CHECK(data_mount_stats_read("/nonexistent/mount", &s, &e) < 0);
    T_CHECK(strstr(e.msg, "/nonexistent/mount/" DATA_MOUNT_STATS_FILE) != NULL);
}

static void test_env(void)
{
    unsetenv(DATA_MOUNT_ENV);
    T_CHECK(data_mount_dir() == NULL);
    setenv(DATA_MOUNT_ENV, "", 1);
    T_CHECK(data_mount_dir() == NULL);
    setenv(DATA_MOUNT_ENV, "/st/runs/1/storage/rank0", 1);
    T_EQ_STR(data_mount_dir(), "/st/runs/1/storage/rank0");
    unsetenv(DATA_MOUNT_ENV);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_parse);
    TEST_RUN(test_read);
    TEST_RUN(test_env);
    return test_end();
}
