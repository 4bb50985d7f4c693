/* Unit tests for daemon/store/keys: runs are namespaces (the same key in two runs is two
 * entries), a run exists once, a HELLO is admitted only with its run's exact secret (an
 * unknown run and a wrong secret look alike), a key waited for before it exists is a
 * placeholder that goes away with its last waiter, and values are copied. */
#include <string.h>

#include "daemon/store/keys.h"
#include "tests/unit/test.h"

static struct store_bytes bytes(const char *s)
{
    return (struct store_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
}

static void test_runs_are_unique_and_authenticated(void)
{
    struct store_run *runs = NULL;
    struct err e = {0};
    T_OK(store_runs_add(&runs, "run-1", "sesame", &e));
    T_OK(store_runs_add(&runs, "run-2", "", &e));
    T_CHECK(store_runs_add(&runs, "run-1", "other", &e) < 0);
    T_EQ_INT(e.code, ERR_CONFLICT);
    struct store_run *r1 = store_runs_find(runs, "run-1");
    T_CHECK(r1 && strcmp(r1->name, "run-1") == 0);
    T_CHECK(store_runs_find(runs, "run-3") == NULL);

    struct store_bytes name = bytes("run-1"), good = bytes("sesame");
    struct store_bytes wrong = bytes("sesamf"), longer = bytes("sesame!"), none = bytes("");
    T_CHECK(store_runs_auth(runs, &name, &good) == r1);
    T_CHECK(store_runs_auth(runs, &name, &wrong) == NULL);
    T_CHECK(store_runs_auth(runs, &name, &longer) == NULL); /* a prefix is not enough */
    T_CHECK(store_runs_auth(runs, &name, &none) == NULL);
    struct store_bytes unknown = bytes("run-9"), r2 = bytes("run-2");
    T_CHECK(store_runs_auth(runs, &unknown, &good) == NULL);
    T_CHECK(store_runs_auth(runs, &r2, &none) == store_runs_find(runs, "run-2"));

    store_runs_remove(&runs, r1);
    T_CHECK(store_runs_find(runs, "run-1") == NULL);
    T_CHECK(store_runs_auth(runs, &name, &good) == NULL);
    T_OK(store_runs_add(&runs, "run-1", "again", &e)); /* the name is free again */
    store_runs_free(&runs);
    T_CHECK(runs == NULL);
}

static void test_keys_are_per_run_placeholders_and_copies(void)
{
    struct store_run *runs = NULL;
    struct err e = {0};
    T_OK(store_runs_add(&runs, "a", "x", &e));
    T_OK(store_runs_add(&runs, "b", "x", &e));
    struct store_run *a = store_runs_find(runs, "a"), *b = store_runs_find(runs, "b");
    struct store_bytes key = bytes("rank0/addr");

    /* a placeholder: found, not present; freed once nobody waits on it */
    struct store_kv *ph = store_kv_get(a, &key);
    T_CHECK(ph && !ph->present);
    T_CHECK(store_kv_find(a, &key) == ph);
    T_CHECK(!store_kv_present(a, &key));
    store_kv_release_if_unused(a, ph);
    T_CHECK(store_kv_find(a, &key) == NULL);

    char value[] = "10.0.0.1:4000";
    struct store_kv *kv = store_kv_get(a, &key);
    T_CHECK(kv);
    T_CHECK(store_kv_assign(kv, value, (uint32_t)strlen(value)) == 0);
    value[0] = '9'; /* the store keeps its own copy */
    T_CHECK(store_kv_present(a, &key));
    T_CHECK(kv->vlen == 13 && memcmp(kv->val, "10.0.0.1:4000", 13) == 0);
    T_CHECK(store_kv_get(a, &key) == kv); /* get finds, does not duplicate */
    store_kv_release_if_unused(a, kv);    /* present: kept */
    T_CHECK(store_kv_find(a, &key) == kv);

    T_CHECK(!store_kv_present(b, &key)); /* the other namespace does not see it */
    struct store_kv *kb = store_kv_get(b, &key);
    T_CHECK(kb && store_kv_assign(kb, "", 0) == 0);
    T_CHECK(store_kv_present(b, &key)); /* an empty value is a value */
    T_CHECK(kb != kv);

    store_kv_free(a, kv);
    T_CHECK(!store_kv_present(a, &key));
    T_CHECK(store_kv_present(b, &key));
    store_runs_free(&runs); /* frees b's key too (LeakSanitizer checks) */
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_runs_are_unique_and_authenticated);
    TEST_RUN(test_keys_are_per_run_placeholders_and_copies);
    return test_end();
}
