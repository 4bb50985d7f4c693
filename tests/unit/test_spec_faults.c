/* Unit tests for the spec's "faults" (common/spec_faults.c): the normal form, struct
 * spec_fault, every refusal naming the fault's member, the checks against world_size and
 * nodes, a sweep over whole lists, and the schema and vocabulary rows. */
#include <string.h>

#include "common/spec.h"
#include "common/vocab.h"
#include "tests/unit/test.h"

#define T2 "{\"workload\": \"train\", \"world_size\": 2, "

static json_t *parse(const char *text, struct err *e)
{
    return spec_parse(text, strlen(text), e);
}

/* True when text is refused naming field, with part in the message. */
static bool refused(const char *text, const char *field, const char *part)
{
    struct err e = {0};
    json_t *out = parse(text, &e);
    if (out) {
        fprintf(stderr, "    accepted: %s\n", text);
        json_decref(out);
        return false;
    }
    if (e.code != ERR_INVALID || strcmp(e.field, field) != 0 || !strstr(e.msg, part)) {
        fprintf(stderr, "    %s\n    -> field \"%s\": %s\n", text, e.field, e.msg);
        return false;
    }
    return true;
}

static void test_faults_default_empty(void)
{
    struct err e = {0};
    json_t *s = parse("{\"workload\": \"train\"}", &e);
    T_CHECK(s != NULL);
    const json_t *f = json_object_get(s, "faults");
    T_CHECK(json_is_array(f) && json_array_size(f) == 0);
    struct spec sp;
    T_CHECK(spec_from_json(s, &sp, &e) == 0);
    T_EQ_INT(sp.n_faults, 0);
    json_decref(s);
}

static void test_faults_normal_form_and_struct(void)
{
    struct err e = {0};
    json_t *s = parse(T2 "\"faults\": [{\"rank\": 1, \"kind\": \"stop\", \"duration_s\": 2, "
                         "\"at_step\": 5}, {\"node\": 0, \"at_s\": 3, \"kind\": \"slow\", "
                         "\"fraction\": 0.25, \"duration_s\": 1.5}, {\"at_step\": 9, \"rank\": "
                         "0, \"kind\": \"kill\"}]}",
                      &e);
    T_CHECK_MSG(s != NULL, "%s", e.msg);
    const json_t *f0 = json_array_get(json_object_get(s, "faults"), 0);
    /* members in a fixed order, the numbers as reals */
    const char *key = json_object_iter_key(json_object_iter((json_t *)f0));
    T_EQ_STR(key, "kind");
    T_CHECK(json_is_real(json_object_get(f0, "duration_s")));
    T_CHECK(json_is_integer(json_object_get(f0, "at_step")));
    /* normalizing again changes nothing */
    json_t *again = spec_normalize(s, &e);
    T_CHECK(again && json_equal(again, s));
    json_decref(again);
    struct spec sp;
    T_CHECK(spec_from_json(s, &sp, &e) == 0);
    T_EQ_INT(sp.n_faults, 3);
    T_EQ_STR(sp.faults[0].kind, "stop");
    T_EQ_INT(sp.faults[0].at_step, 5);
    T_CHECK(sp.faults[0].at_s == -1);
    T_EQ_INT(sp.faults[0].rank, 1);
    T_EQ_INT(sp.faults[0].node, -1);
    T_CHECK(sp.faults[0].duration_s == 2);
    T_EQ_STR(sp.faults[1].kind, "slow");
    T_EQ_INT(sp.faults[1].at_step, -1);
    T_CHECK(sp.faults[1].at_s == 3);
    T_EQ_INT(sp.faults[1].rank, -1);
    T_EQ_INT(sp.faults[1].node, 0);
    T_CHECK(sp.faults[1].fraction == 0.25);
    T_EQ_STR(sp.faults[2].kind, "kill");
    T_CHECK(sp.faults[2].duration_s == 0);
    json_decref(s);
}

static void test_faults_refused(void)
{
    static const struct {
        const char *text, *field, *part;
    } cases[] = {
        {T2 "\"faults\": {}}", "faults", "a list of at most 16"},
        {T2 "\"faults\": [3]}", "faults[0]", "must be an object"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0}]}", "faults[0].kind", "is required"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"boom\"}]}",
         "faults[0].kind", "kill, stop, slow or link"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"kill\", \"why\": 1}]}",
         "faults[0].why", "unknown field"},
        {T2 "\"faults\": [{\"rank\": 0, \"kind\": \"kill\"}]}", "faults[0].at_step",
         "is required (or at_s)"},
        {T2 "\"faults\": [{\"at_step\": 1, \"at_s\": 1, \"rank\": 0, \"kind\": \"kill\"}]}",
         "faults[0].at_s", "mutually exclusive"},
        {T2 "\"faults\": [{\"at_step\": 1, \"kind\": \"kill\"}]}", "faults[0].rank",
         "is required (or node)"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"node\": 0, \"kind\": \"kill\"}]}",
         "faults[0].node", "mutually exclusive"},
        {T2 "\"faults\": [{\"at_step\": -1, \"rank\": 0, \"kind\": \"kill\"}]}",
         "faults[0].at_step", "an integer from 0"},
        {T2 "\"faults\": [{\"at_s\": \"1\", \"rank\": 0, \"kind\": \"kill\"}]}",
         "faults[0].at_s", "a number"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 1.5, \"kind\": \"kill\"}]}",
         "faults[0].rank", "an integer"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"stop\"}]}",
         "faults[0].duration_s", "is required with kind \"stop\""},
        {T2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"kill\", \"duration_s\": 1}]}",
         "faults[0].duration_s", "kind \"kill\" takes no duration_s"},
        {T2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"stop\", \"duration_s\": 0}]}",
         "faults[0].duration_s", "greater than 0"},
        {T2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"slow\", \"duration_s\": 1}]}",
         "faults[0].fraction", "is required with kind \"slow\""},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"slow\", \"duration_s\": 1, "
            "\"fraction\": 1}]}",
         "faults[0].fraction", "less than 1"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"slow\", \"duration_s\": 1, "
            "\"fraction\": 0}]}",
         "faults[0].fraction", "greater than 0"},
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"stop\", \"duration_s\": 1, "
            "\"fraction\": 0.5}]}",
         "faults[0].fraction", "kind \"stop\" takes no fraction"},
        {T2
         "\"faults\": [{\"at_step\": 1, \"node\": 0, \"kind\": \"link\", \"duration_s\": 1}]}",
         "faults[0].rate", "is required with kind \"link\""},
        {T2 "\"faults\": [{\"at_step\": 1, \"node\": 0, \"kind\": \"link\", \"duration_s\": 1, "
            "\"rate\": \"10mbit\"}]}",
         "faults[0].rate", "a number"},
        /* the element at fault is named, not the first */
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"kill\"}, {\"at_step\": 2, "
            "\"rank\": 0, \"kind\": \"stop\"}]}",
         "faults[1].duration_s", "is required"},
        /* against the run's ranks and nodes */
        {T2 "\"faults\": [{\"at_step\": 1, \"rank\": 2, \"kind\": \"kill\"}]}",
         "faults[0].rank", "the run has 2 ranks"},
        {T2 "\"nodes\": 2, \"faults\": [{\"at_step\": 1, \"node\": 2, \"kind\": \"kill\"}]}",
         "faults[0].node", "spans 2 nodes"},
        {T2 "\"ranks_per_node\": 2, \"faults\": [{\"at_step\": 1, \"node\": 1, \"kind\": "
            "\"kill\"}]}",
         "faults[0].node", "spans 1 node"},
        /* in a sweep: the point, and the member */
        {T2
         "\"sweep\": {\"faults\": [[], [{\"at_step\": 1, \"rank\": 5, \"kind\": \"kill\"}]]}}",
         "faults[0].rank", "sweep point 2 of 2"},
        {T2 "\"sweep\": {\"faults\": [[], [{\"at_step\": 1, \"kind\": \"kill\"}]]}}",
         "sweep.faults[1][0].rank", "is required"},
        {T2 "\"sweep\": {\"faults\": [[], []]}}", "sweep.faults[1]", "already listed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(refused(cases[i].text, cases[i].field, cases[i].part), "case %zu", i);
}

static void test_faults_seventeen_refused(void)
{
    char text[4096];
    size_t len = (size_t)snprintf(text, sizeof text, T2 "\"faults\": [");
    for (int i = 0; i < SPEC_MAX_FAULTS + 1; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "%s{\"at_step\": %d, \"rank\": 0, \"kind\": \"kill\"}",
                                i ? ", " : "", i);
    snprintf(text + len, sizeof text - len, "]}");
    T_CHECK(refused(text, "faults", "at most 16"));
    /* sixteen are fine */
    char *cut = strrchr(text, '{');
    snprintf(cut - 2, 3, "]}");
    struct err e = {0};
    json_t *s = parse(text, &e);
    T_CHECK_MSG(s && json_array_size(json_object_get(s, "faults")) == SPEC_MAX_FAULTS, "%s",
                e.msg);
    json_decref(s);
}

/* A nodes-less spec leaves a node beyond 0 to placement; the sweep gives whole lists. */
static void test_faults_sweep_whole_lists(void)
{
    struct err e = {0};
    json_t *s = parse(T2 "\"sweep\": {\"faults\": [[], [{\"at_step\": 200, \"rank\": 1, "
                         "\"kind\": \"kill\"}]]}}",
                      &e);
    T_CHECK_MSG(s != NULL, "%s", e.msg);
    json_t *runs = s ? spec_expand(s, SPEC_MAX_RUNS, &e) : NULL;
    T_CHECK(json_array_size(runs) == 2);
    const json_t *p0 = json_object_get(json_array_get(runs, 0), "params");
    const json_t *p1 = json_object_get(json_array_get(runs, 1), "params");
    T_EQ_INT((int)json_array_size(json_object_get(p0, "faults")), 0);
    T_EQ_INT((int)json_array_size(json_object_get(p1, "faults")), 1);
    struct spec sp;
    T_CHECK(spec_from_json(json_object_get(json_array_get(runs, 1), "spec"), &sp, &e) == 0);
    T_EQ_INT(sp.n_faults, 1);
    T_EQ_INT(sp.faults[0].at_step, 200);
    json_decref(runs);
    json_decref(s);
    s = parse(T2 "\"faults\": [{\"at_step\": 1, \"node\": 3, \"kind\": \"kill\"}]}", &e);
    T_CHECK_MSG(s != NULL, "node 3 without nodes is placement's to judge: %s", e.msg);
    json_decref(s);
}

static void test_faults_schema_and_vocabulary(void)
{
    json_t *schema = spec_schema_json();
    const json_t *f = json_object_get(json_object_get(schema, "properties"), "faults");
    T_CHECK(f != NULL);
    T_EQ_STR(json_string_value(json_object_get(f, "type")), "array");
    T_EQ_INT((int)json_integer_value(json_object_get(f, "maxItems")), SPEC_MAX_FAULTS);
    const json_t *kinds = json_object_get(
        json_object_get(json_object_get(json_object_get(f, "items"), "properties"), "kind"),
        "enum");
    T_EQ_INT((int)json_array_size(kinds), VOCAB_NFAULTS);
    json_decref(schema);
    json_t *v = vocab_json();
    const json_t *rows = json_object_get(v, "fault_kinds");
    T_EQ_INT((int)json_array_size(rows), VOCAB_NFAULTS);
    T_EQ_STR(json_string_value(json_object_get(json_array_get(rows, 3), "name")), "link");
    T_CHECK(json_is_true(json_object_get(json_array_get(rows, 3), "network")));
    T_CHECK(vocab_fault(VOCAB_FAULT_SLOW)->fraction &&
            !vocab_fault(VOCAB_FAULT_KILL)->duration);
    json_decref(v);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_faults_default_empty);
    TEST_RUN(test_faults_normal_form_and_struct);
    TEST_RUN(test_faults_refused);
    TEST_RUN(test_faults_seventeen_refused);
    TEST_RUN(test_faults_sweep_whole_lists);
    TEST_RUN(test_faults_schema_and_vocabulary);
    return test_end();
}
