/* test_api_pool: the heavy GETs' bounded pool (api/pool.c) and the report and fit cache
 * (api/cache.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/cache.h"
#include "api/pool.h"
#include "test.h"

/* A job that waits until released, so the test controls how many are running. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;
    atomic_int ran, cancelled;
};

static void gate_job(void *arg, int cancelled)
{
    struct gate *g = arg;
    if (cancelled) {
        atomic_fetch_add(&g->cancelled, 1);
        return;
    }
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
    atomic_fetch_add(&g->ran, 1);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

/* 2 workers and a queue of 3: the sixth job is refused, not queued; all five run. */
static void test_pool_bounded(void)
{
    struct err e = {0};
    struct gate g = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    struct api_pool *p = api_pool_start(2, 3, &e);
    T_CHECK_MSG(p != NULL, "%s", e.msg);
    for (int i = 0; i < 2; i++)
        T_CHECK(api_pool_submit(p, gate_job, &g) == 0);
    size_t queued = 0, busy = 0;
    for (int i = 0; i < 200 && busy < 2; i++) { /* the workers pick up two */
        api_pool_load(p, &queued, &busy);
        usleep(5000);
    }
    T_EQ_INT(busy, 2);
    for (int i = 0; i < 3; i++)
        T_CHECK(api_pool_submit(p, gate_job, &g) == 0);
    api_pool_load(p, &queued, &busy);
    T_EQ_INT(queued, 3);
    T_CHECK(api_pool_submit(p, gate_job, &g) < 0);
    gate_open(&g);
    for (int i = 0; i < 400 && atomic_load(&g.ran) < 5; i++)
        usleep(5000);
    T_EQ_INT(atomic_load(&g.ran), 5);
    T_CHECK(api_pool_submit(p, gate_job, &g) == 0); /* room again */
    api_pool_stop(p);
    T_EQ_INT(atomic_load(&g.ran) + atomic_load(&g.cancelled), 6);
}

/* Jobs still queued when the pool stops are handed back cancelled, never dropped. */
static void test_pool_stop_cancels(void)
{
    struct err e = {0};
    struct gate g = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    struct api_pool *p = api_pool_start(1, 4, &e);
    T_CHECK(p != NULL);
    for (int i = 0; i < 4; i++)
        T_CHECK(api_pool_submit(p, gate_job, &g) == 0);
    size_t queued = 0, busy = 0;
    for (int i = 0; i < 200 && busy < 1; i++) {
        api_pool_load(p, &queued, &busy);
        usleep(5000);
    }
    gate_open(&g); /* the running one finishes; stop cancels the rest */
    api_pool_stop(p);
    T_EQ_INT(atomic_load(&g.ran) + atomic_load(&g.cancelled), 4);
    T_CHECK(atomic_load(&g.ran) >= 1);
}

static void test_cache_hit_and_evict(void)
{
    struct api_cache *c = api_cache_new();
    T_CHECK(c != NULL);
    size_t len = 0;
    T_CHECK(api_cache_get(c, "report|1:4,|", &len) == NULL);
    api_cache_put(c, "report|1:4,|", "<html>a</html>", 14);
    char *b = api_cache_get(c, "report|1:4,|", &len);
    T_CHECK(b != NULL);
    T_EQ_INT(len, 14);
    T_EQ_STR(b, "<html>a</html>");
    free(b);
    T_CHECK(api_cache_get(c, "report|1:5,|", &len) == NULL); /* a new version: a miss */
    unsigned long long computed, hits;
    api_cache_counts(c, &computed, &hits);
    T_EQ_INT(computed, 1);
    T_EQ_INT(hits, 1);
    /* more keys than entries: the least recently used goes, the one just read stays */
    char key[32];
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "fit|%d:0,|", i);
        api_cache_put(c, key, "{}", 2);
        free(api_cache_get(c, "fit|0:0,|", &len));
    }
    T_CHECK((b = api_cache_get(c, "fit|0:0,|", &len)) != NULL);
    free(b);
    T_CHECK(api_cache_get(c, "fit|1:0,|", &len) == NULL);
    T_CHECK(api_cache_get(c, "report|1:4,|", &len) == NULL);
    api_cache_free(c);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_pool_bounded);
    TEST_RUN(test_pool_stop_cancels);
    TEST_RUN(test_cache_hit_and_evict);
    return test_end();
}
