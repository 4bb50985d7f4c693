/* Unit tests for daemon/elastic: what the daemon decides when a slot of an elastic run is
 * lost (shrink, replace, grow, restart, driver, fail under min_ranks), the generations'
 * members and order, when a run counts as done, the JSON of elastic/g<N>, and that
 * elastic_publish writes the join key, the generation and elastic/gen into a real store
 * where a waiting client reads them. */
#include <jansson.h>
#include <pthread.h>

#include "common/spec.h"
#include "daemon/elastic.h"
#include "daemon/store_server.h"
#include "tests/unit/test.h"
#include "worker/store/store_client.h"

/* An elastic spec of world w with min and max ranks. */
static struct spec elastic_spec(int w, int lo, int hi)
{
    struct spec sp;
    memset(&sp, 0, sizeof sp);
    sp.world_size = w;
    sp.elastic = (struct spec_elastic){
        .on = true, .min_ranks = lo, .max_ranks = hi, .commit_every = 10};
    return sp;
}

static bool members_are(const struct elastic_gen *g, const int *want, int n)
{
    if (g->n_members != n)
        return false;
    for (int i = 0; i < n; i++)
        if (g->members[i] != want[i])
            return false;
    return true;
}

static void test_elastic_off_fails(void)
{
    struct spec sp = elastic_spec(2, 1, 2);
    sp.elastic.on = false;
    struct elastic_run el;
    struct err e = {0};
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, true, &e));
    T_CHECK(!el.on);
    struct elastic_decision d;
    elastic_slot_lost(&el, 1, "rank 1 lost", &d);
    T_EQ_INT(d.action, ELASTIC_FAIL);
    T_CHECK(!elastic_all_done(&el));
    elastic_free(&el);
}

/* 3 -> 2 in place with a replacement: the survivors form generation 1; the replacement
 * joins only after generation 1 resumed and it said hello; then all done. */
static void test_elastic_shrink_replace_grow(void)
{
    struct spec sp = elastic_spec(3, 2, 3);
    struct elastic_run el;
    struct err e = {0};
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, true, &e));
    T_EQ_INT(elastic_live(&el), 3);
    struct elastic_decision d;
    elastic_slot_lost(&el, 1, "rank 1 lost", &d);
    T_EQ_INT(d.action, ELASTIC_SHRINK);
    T_CHECK(d.replace);
    T_EQ_INT(d.next.gen, 1);
    T_CHECK(members_are(&d.next, (const int[]){0, 2}, 2));
    T_EQ_INT(d.next.n_joiners, 0);
    T_EQ_INT(elastic_live(&el), 2);
    /* a second report of the same death changes nothing */
    struct elastic_decision again;
    elastic_slot_lost(&el, 1, "rank 1 lost", &again);
    T_EQ_INT(again.action, ELASTIC_IGNORE);
    T_EQ_INT(el.gen, 1);
    /* a blame from generation 0 names a slot handled already: nobody is killed for it */
    T_CHECK(!elastic_blame_kills(&el, 0, 1));
    T_CHECK(!elastic_blame_kills(&el, 0, 2));
    T_CHECK(elastic_blame_kills(&el, 1, 2)); /* a member of the current one, still running */
    elastic_replacement_started(&el, 1);
    T_CHECK(!elastic_blame_kills(&el, 1, 1)); /* the replacement was never in generation 1 */
    struct elastic_gen g;
    T_CHECK(!elastic_grow(&el, &g)); /* no hello, not resumed */
    elastic_joiner_hello(&el, 1);
    T_CHECK(!elastic_grow(&el, &g)); /* generation 1 has not resumed */
    elastic_gen_resumed(&el, 0);     /* an old generation's word counts for nothing */
    T_CHECK(!elastic_grow(&el, &g));
    elastic_gen_resumed(&el, 1);
    T_CHECK(elastic_grow(&el, &g));
    T_EQ_INT(g.gen, 2);
    T_CHECK(members_are(&g, (const int[]){0, 1, 2}, 3));
    T_EQ_INT(g.n_joiners, 1);
    T_EQ_INT(g.joiners[0], 1);
    T_CHECK(!elastic_grow(&el, &g)); /* once */
    T_EQ_INT(elastic_live(&el), 3);
    T_CHECK(!elastic_all_done(&el));
    for (int i = 0; i < 3; i++) {
        T_EQ_INT(elastic_running(&el), 3 - i);
        elastic_slot_done(&el, i);
    }
    T_EQ_INT(elastic_running(&el), 0);
    T_EQ_INT(elastic_live(&el), 3);
    T_CHECK(elastic_all_done(&el));
    T_EQ_INT(el.lost, 1);
    T_EQ_INT(el.replaced, 1);
    elastic_free(&el);
}

/* 2 -> 1 without replacement (max_ranks = min_ranks = 1): a shrink, no replacement; the
 * lost slot is forgiven and the survivor's done ends the run well; losing it too fails
 * the run naming min_ranks. */
static void test_elastic_shrink_no_replace_then_fail(void)
{
    struct spec sp = elastic_spec(2, 1, 1);
    struct elastic_run el;
    struct err e = {0};
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, true, &e));
    struct elastic_decision d;
    elastic_slot_lost(&el, 0, "rank 0 lost", &d);
    T_EQ_INT(d.action, ELASTIC_SHRINK);
    T_CHECK(!d.replace);
    T_CHECK(members_are(&d.next, (const int[]){1}, 1));
    T_CHECK(elastic_slot_forgiven(&el, 0));
    T_CHECK(!elastic_slot_forgiven(&el, 1));
    elastic_slot_lost(&el, 1, "rank 1 lost", &d);
    T_EQ_INT(d.action, ELASTIC_FAIL);
    T_EQ_STR(d.why, "elastic: 0 ranks left, min_ranks 1");
    elastic_free(&el);
    sp = elastic_spec(2, 1, 1);
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, true, &e));
    elastic_slot_lost(&el, 0, "rank 0 lost", &d);
    elastic_slot_done(&el, 1);
    T_CHECK(elastic_all_done(&el));
    elastic_free(&el);
}

static void test_elastic_min_ranks_fails(void)
{
    struct spec sp = elastic_spec(3, 3, 3);
    struct elastic_run el;
    struct err e = {0};
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, true, &e));
    struct elastic_decision d;
    elastic_slot_lost(&el, 2, "rank 2 lost", &d);
    T_EQ_INT(d.action, ELASTIC_FAIL);
    T_EQ_STR(d.why, "elastic: 2 ranks left, min_ranks 3");
    elastic_free(&el);
    sp = elastic_spec(2, 2, 2);
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, true, &e));
    elastic_slot_lost(&el, 0, "rank 0 lost", &d);
    T_EQ_STR(d.why, "elastic: 1 rank left, min_ranks 2");
    elastic_free(&el);
}

/* A replacement cannot be started here (another node): shrink only. */
static void test_elastic_no_replace_where_impossible(void)
{
    struct spec sp = elastic_spec(3, 1, 3);
    struct elastic_run el;
    struct err e = {0};
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, false, &e));
    struct elastic_decision d;
    elastic_slot_lost(&el, 0, "rank 0 lost", &d);
    T_EQ_INT(d.action, ELASTIC_SHRINK);
    T_CHECK(!d.replace);
    T_CHECK(members_are(&d.next, (const int[]){1, 2}, 2));
    elastic_free(&el);
}

/* A replacement that dies before it joined: no new generation, no second replacement by
 * itself; the slot is lost again. */
static void test_elastic_joiner_dies(void)
{
    struct spec sp = elastic_spec(2, 1, 2);
    struct elastic_run el;
    struct err e = {0};
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_IN_MEMORY, true, &e));
    struct elastic_decision d;
    elastic_slot_lost(&el, 1, "rank 1 lost", &d);
    elastic_replacement_started(&el, 1);
    elastic_slot_lost(&el, 1, "rank 1 lost", &d);
    T_EQ_INT(d.action, ELASTIC_SHRINK);
    T_EQ_INT(d.next.gen, -1);
    T_CHECK(!d.replace);
    T_EQ_INT(el.gen, 1);
    T_CHECK(elastic_slot_forgiven(&el, 1));
    elastic_free(&el);
}

/* Restart mode (pytorch): the group starts again as slots 0..n'-1, n' = max_ranks when
 * a replacement is allowed, else the survivors. Driver mode (horovod) leaves it to the
 * driver but still fails under min_ranks. */
static void test_elastic_restart_and_driver(void)
{
    struct spec sp = elastic_spec(3, 1, 3);
    struct elastic_run el;
    struct err e = {0};
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_RESTART, true, &e));
    struct elastic_decision d;
    elastic_slot_lost(&el, 1, "rank 1 lost", &d);
    T_EQ_INT(d.action, ELASTIC_RESTART);
    T_EQ_INT(d.world, 3);
    T_EQ_INT(d.next.gen, 1);
    T_CHECK(members_are(&d.next, (const int[]){0, 1, 2}, 3));
    elastic_free(&el);
    sp = elastic_spec(3, 1, 2);
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_RESTART, true, &e));
    elastic_slot_lost(&el, 0, "rank 0 lost", &d);
    T_EQ_INT(d.world, 2); /* survivors 2 = max_ranks: no room for a replacement */
    elastic_slot_lost(&el, 1, "rank 1 lost", &d);
    T_EQ_INT(d.action, ELASTIC_RESTART);
    T_EQ_INT(d.world, 2); /* 1 survivor, grown back to max_ranks */
    T_EQ_INT(d.next.gen, 2);
    elastic_free(&el);
    sp = elastic_spec(2, 2, 2);
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_DRIVER, true, &e));
    elastic_slot_lost(&el, 0, "rank 0 lost", &d);
    T_EQ_INT(d.action, ELASTIC_FAIL);
    elastic_free(&el);
    sp = elastic_spec(3, 1, 3);
    T_OK(elastic_init(&el, &sp, VOCAB_ELASTIC_DRIVER, true, &e));
    elastic_slot_lost(&el, 0, "rank 0 lost", &d);
    T_EQ_INT(d.action, ELASTIC_DRIVER);
    T_EQ_INT(d.world, 2);
    elastic_free(&el);
}

static void test_elastic_gen_text(void)
{
    struct elastic_gen g = {
        .gen = 3, .n_members = 3, .n_joiners = 1, .members = {0, 1, 2}, .joiners = {1}};
    snprintf(g.reason, sizeof g.reason, "1 replacement joined");
    char *text = elastic_gen_text(&g);
    T_EQ_STR(text, "{\"gen\":3,\"members\":[0,1,2],\"joiners\":[1],"
                   "\"reason\":\"1 replacement joined\"}");
    free(text);
}

struct waiter {
    struct store_client *c;
    const char *key;
    char *value;
    int rc;
};

static void *waiter_main(void *p)
{
    struct waiter *w = p;
    size_t len;
    struct err e = {0};
    w->rc = store_client_get(w->c, w->key, 20000, &w->value, &len, &e);
    return NULL;
}

/* elastic_publish into a real store: a replacement waiting on its join key and a
 * survivor waiting on the generation both wake, and elastic/gen is the latest. */
static void test_elastic_publish(void)
{
    struct err e = {0};
    struct store_server *s = store_server_create("127.0.0.1", 0, &e);
    T_CHECK_MSG(s, "%s", e.msg);
    T_OK(store_server_add_run(s, "r1", "pw", &e));
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", store_server_port(s));
    struct waiter wj = {.key = "elastic/join/1"}, wg = {.key = "elastic/g2"};
    wj.c = store_client_connect(addr, "r1", "pw", 0, 5000, NULL, &e);
    wg.c = store_client_connect(addr, "r1", "pw", 0, 5000, NULL, &e);
    T_CHECK(wj.c && wg.c);
    pthread_t tj, tg;
    pthread_create(&tj, NULL, waiter_main, &wj);
    pthread_create(&tg, NULL, waiter_main, &wg);
    struct elastic_gen g = {
        .gen = 2, .n_members = 2, .n_joiners = 1, .members = {0, 1}, .joiners = {1}};
    snprintf(g.reason, sizeof g.reason, "grow");
    T_OK(elastic_publish(s, "r1", &g, &e));
    pthread_join(tj, NULL);
    pthread_join(tg, NULL);
    T_EQ_INT(wj.rc, 0);
    T_EQ_STR(wj.value, "2");
    T_EQ_INT(wg.rc, 0);
    T_EQ_STR(wg.value, "{\"gen\":2,\"members\":[0,1],\"joiners\":[1],\"reason\":\"grow\"}");
    char *v = NULL;
    size_t len;
    T_OK(store_client_get(wg.c, "elastic/gen", 0, &v, &len, &e));
    T_CHECK(v && len == 1 && v[0] == '2');
    free(v);
    free(wj.value);
    free(wg.value);
    T_CHECK(elastic_publish(s, "no-run", &g, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    store_client_destroy(wj.c);
    store_client_destroy(wg.c);
    store_server_destroy(s);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_elastic_off_fails);
    TEST_RUN(test_elastic_shrink_replace_grow);
    TEST_RUN(test_elastic_shrink_no_replace_then_fail);
    TEST_RUN(test_elastic_min_ranks_fails);
    TEST_RUN(test_elastic_no_replace_where_impossible);
    TEST_RUN(test_elastic_joiner_dies);
    TEST_RUN(test_elastic_restart_and_driver);
    TEST_RUN(test_elastic_gen_text);
    TEST_RUN(test_elastic_publish);
    return test_end();
}
