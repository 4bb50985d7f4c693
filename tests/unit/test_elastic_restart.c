/* Unit tests for daemon/elastic_restart: the run's elastic folder is made, and the
 * environment of a generation's ranks (generation, folder, slots, and the loss's time
 * once there was one). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/elastic_restart.h"
#include "tests/unit/test.h"

static void test_init_makes_the_folder(void)
{
    struct elastic_restart er;
    char why[256] = "";
    T_CHECK_MSG(elastic_restart_init(&er, false, 3, test_tmpdir(), why, sizeof why) == 0, "%s",
                why);
    struct stat st;
    T_CHECK(stat(er.dir, &st) == 0 && S_ISDIR(st.st_mode));
    T_EQ_INT(er.slots, 3);
    T_EQ_INT(er.world, 3);
    T_EQ_INT(er.gen, 0);
    /* again: the folder exists, which is fine (a run restarted by the daemon) */
    T_CHECK(elastic_restart_init(&er, true, 3, test_tmpdir(), why, sizeof why) == 0);
    T_CHECK(er.driver);
    char deep[PATH_MAX];
    snprintf(deep, sizeof deep, "%s/no/such/folder", test_tmpdir());
    T_CHECK(elastic_restart_init(&er, false, 2, deep, why, sizeof why) < 0);
    T_CHECK_MSG(strstr(why, "cannot create") != NULL, "%s", why);
}

static void test_env(void)
{
    struct elastic_restart er;
    char why[256] = "";
    T_CHECK(elastic_restart_init(&er, false, 2, test_tmpdir(), why, sizeof why) == 0);
    char env[ELASTIC_RESTART_ENV][PATH_MAX];
    int n = elastic_restart_env(&er, env[0], sizeof env[0]);
    T_EQ_INT(n, 3); /* no loss yet: no DDPB_ELASTIC_LOST_AT */
    T_EQ_STR(env[0], "DDPB_ELASTIC_GEN=0");
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "DDPB_ELASTIC_DIR=%s/elastic", test_tmpdir());
    T_EQ_STR(env[1], want);
    T_EQ_STR(env[2], "DDPB_ELASTIC_SLOTS=2");
    er.gen = 1;
    er.world = 1;
    er.lost_at = 1700000000.5;
    n = elastic_restart_env(&er, env[0], sizeof env[0]);
    T_EQ_INT(n, 4);
    T_EQ_STR(env[0], "DDPB_ELASTIC_GEN=1");
    T_EQ_STR(env[2], "DDPB_ELASTIC_SLOTS=2"); /* the slots, not the generation's world */
    T_EQ_STR(env[3], "DDPB_ELASTIC_LOST_AT=1700000000.500000");
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_init_makes_the_folder);
    TEST_RUN(test_env);
    return test_end();
}
