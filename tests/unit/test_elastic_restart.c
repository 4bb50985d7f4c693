/* Unit tests for daemon/elastic_restart: the next generation's world (shrink to the
 * survivors, restart full when a replacement is allowed, fail below min_ranks or past the
 * generation limit), which ranks count as lost, the environment of a generation's ranks,
 * and the generation record (returned and appended to generations.jsonl). */
#include <stdio.h>
#include <string.h>

#include "daemon/elastic_restart.h"
#include "tests/unit/test.h"

/* er for a run of `slots` ranks under the test's folder; false when init failed. */
static bool restart_of(struct elastic_restart *er, int min, int max, int slots)
{
    struct spec_elastic el = {
        .on = true, .min_ranks = min, .max_ranks = max, .commit_every = 5};
    char why[256] = "";
    int rc = elastic_restart_init(er, &el, slots, test_tmpdir(), why, sizeof why);
    if (rc < 0)
        fprintf(stderr, "elastic_restart_init: %s\n", why);
    return rc == 0;
}

static void test_next_world(void)
{
    char why[256] = "";
    struct elastic_restart er;
    T_CHECK(restart_of(&er, 1, 1, 2));
    T_EQ_INT(er.world, 2);
    T_EQ_INT(elastic_restart_next_world(&er, 1, why, sizeof why), 1); /* shrink 2 -> 1 */
    T_CHECK(restart_of(&er, 1, 2, 2));
    T_EQ_INT(elastic_restart_next_world(&er, 1, why, sizeof why), 2); /* replacement */
    T_CHECK(restart_of(&er, 2, 3, 4));
    T_EQ_INT(elastic_restart_next_world(&er, 3, why, sizeof why), 3); /* enough survivors */
    T_EQ_INT(elastic_restart_next_world(&er, 2, why, sizeof why), 3); /* back to max */
    T_EQ_INT(elastic_restart_next_world(&er, 1, why, sizeof why), -1);
    T_EQ_STR(why, "elastic: 1 rank left, min_ranks 2");
    T_EQ_INT(elastic_restart_next_world(&er, 0, why, sizeof why), -1);
    T_EQ_STR(why, "elastic: 0 ranks left, min_ranks 2");
    er.gen = ELASTIC_RESTART_MAX_GENS - 1;
    T_EQ_INT(elastic_restart_next_world(&er, 3, why, sizeof why), -1);
    T_CHECK_MSG(strstr(why, "generations") != NULL, "%s", why);
    /* max_ranks 0 or past the slots means the slots */
    T_CHECK(restart_of(&er, 1, 0, 3));
    T_EQ_INT(er.max_ranks, 3);
}

static void test_was_lost(void)
{
    T_CHECK(elastic_restart_was_lost(4, 4));  /* killed by someone else */
    T_CHECK(!elastic_restart_was_lost(1, 4)); /* its peer went: a survivor */
    T_CHECK(!elastic_restart_was_lost(0, 4)); /* stopped by the daemon */
    T_CHECK(elastic_restart_was_lost(2, 2));  /* an error of its own, nobody worse */
    T_CHECK(!elastic_restart_was_lost(0, 0)); /* fine */
}

static void test_env(void)
{
    struct elastic_restart er;
    T_CHECK(restart_of(&er, 1, 2, 2));
    char env[ELASTIC_RESTART_ENV][PATH_MAX];
    int n = elastic_restart_env(&er, env[0], sizeof env[0]);
    T_EQ_INT(n, 3); /* no loss yet: no DDPB_ELASTIC_LOST_AT */
    T_EQ_STR(env[0], "DDPB_ELASTIC_GEN=0");
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "DDPB_ELASTIC_DIR=%s/elastic", test_tmpdir());
    T_EQ_STR(env[1], want);
    T_EQ_STR(env[2], "DDPB_ELASTIC_SLOTS=2");
    er.gen = 1;
    er.lost_at = 1700000000.5;
    n = elastic_restart_env(&er, env[0], sizeof env[0]);
    T_EQ_INT(n, 4);
    T_EQ_STR(env[0], "DDPB_ELASTIC_GEN=1");
    T_EQ_STR(env[3], "DDPB_ELASTIC_LOST_AT=1700000000.500000");
}

static void test_record(void)
{
    struct elastic_restart er;
    T_CHECK(restart_of(&er, 1, 1, 3));
    json_t *r0 = elastic_restart_record(&er, NULL, 0, NULL, 0, "start", -1);
    er.gen = 1;
    er.world = 2;
    int lost[] = {2};
    json_t *r1 = elastic_restart_record(&er, NULL, 0, lost, 1, "lost slot 2", 40);
    T_CHECK(r0 && r1);
    T_EQ_INT(json_integer_value(json_object_get(r1, "gen")), 1);
    T_EQ_INT(json_integer_value(json_object_get(r1, "world")), 2);
    T_EQ_INT(json_array_size(json_object_get(r1, "members")), 2);
    T_EQ_INT(json_integer_value(json_array_get(json_object_get(r1, "lost"), 0)), 2);
    T_EQ_INT(json_integer_value(json_object_get(r1, "stop_ms")), 40);
    T_EQ_STR(json_string_value(json_object_get(r1, "mode")), "restart");
    int members[] = {1, 2};
    json_t *r2 = elastic_restart_record(&er, members, 2, NULL, 0, "driver", -1);
    T_CHECK(r2 && json_integer_value(json_array_get(json_object_get(r2, "members"), 0)) == 1);
    json_decref(r2);
    json_decref(r0);
    json_decref(r1);
    char path[PATH_MAX + 32], line[512];
    snprintf(path, sizeof path, "%s/generations.jsonl", er.dir);
    FILE *f = fopen(path, "re");
    T_CHECK(f != NULL);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        T_CHECK(j && json_integer_value(json_object_get(j, "gen")) == (n ? 1 : 0));
        json_decref(j);
        n++;
    }
    if (f)
        fclose(f);
    T_EQ_INT(n, 3);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_next_world);
    TEST_RUN(test_was_lost);
    TEST_RUN(test_env);
    TEST_RUN(test_record);
    return test_end();
}
