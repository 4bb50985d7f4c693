/* store/keys: see keys.h. uthash reports allocation failure through the `oom` flag of
 * the function that adds (HASH_NONFATAL_OOM) instead of exiting, so the daemon survives
 * running out of memory with an error reply. */
#define HASH_NONFATAL_OOM 1
/* uthash's OOM hook: the macro expands inside functions that declare `bool oom`. */
#define uthash_nonfatal_oom(obj) (oom = true)

#include "daemon/store/keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct store_kv *store_kv_find(struct store_run *run, const struct store_bytes *key)
{
    struct store_kv *kv = NULL;
    HASH_FIND(hh, run->keys, key->p, key->len, kv);
    return kv;
}

bool store_kv_present(struct store_run *run, const struct store_bytes *key)
{
    struct store_kv *kv = store_kv_find(run, key);
    return kv && kv->present;
}

void store_kv_free(struct store_run *run, struct store_kv *kv)
{
    HASH_DEL(run->keys, kv);
    free(kv->key);
    free(kv->val);
    free(kv);
}

struct store_kv *store_kv_get(struct store_run *run, const struct store_bytes *key)
{
    struct store_kv *kv = store_kv_find(run, key);
    if (kv)
        return kv;
    kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->key = malloc(key->len);
    if (!kv->key) {
        free(kv);
        return NULL;
    }
    memcpy(kv->key, key->p, key->len);
    kv->klen = key->len;
    bool oom = false;
    HASH_ADD_KEYPTR(hh, run->keys, kv->key, kv->klen, kv);
    if (oom) {
        free(kv->key);
        free(kv);
        return NULL;
    }
    return kv;
}

void store_kv_release_if_unused(struct store_run *run, struct store_kv *kv)
{
    if (!kv->present && !kv->waiters)
        store_kv_free(run, kv);
}

int store_kv_assign(struct store_kv *kv, const void *p, uint32_t len)
{
    uint8_t *v = NULL;
    if (len > 0) {
        v = malloc(len);
        if (!v)
            return -1;
        memcpy(v, p, len);
    }
    free(kv->val);
    kv->val = v;
    kv->vlen = len;
    kv->present = true;
    return 0;
}

static void store_run_free(struct store_run *run)
{
    struct store_kv *kv, *tmp;
    HASH_ITER(hh, run->keys, kv, tmp)
    store_kv_free(run, kv);
    free(run);
}

/* Compares in time independent of where the secrets differ (and of their lengths up to
 * the cap), so the secret cannot be guessed byte by byte. */
static bool store_secret_equal(const char *want, size_t want_len, const struct store_bytes *got)
{
    unsigned diff = (unsigned)(want_len ^ got->len);
    for (size_t i = 0; i < STORE_MAX_SECRET; i++) {
        uint8_t a = i < want_len ? (uint8_t)want[i] : 0;
        uint8_t b = i < got->len ? got->p[i] : 0;
        diff |= (unsigned)(a ^ b);
    }
    return diff == 0;
}

int store_runs_add(struct store_run **runs, const char *name, const char *secret, struct err *e)
{
    if (store_runs_find(*runs, name))
        return err_set(e, ERR_CONFLICT, "run", "store run '%s' already exists", name);
    struct store_run *run = calloc(1, sizeof *run);
    if (!run)
        return err_set(e, ERR_NOMEM, NULL, "out of memory adding store run");
    snprintf(run->name, sizeof run->name, "%s", name);
    snprintf(run->secret, sizeof run->secret, "%s", secret);
    run->secret_len = strlen(run->secret);
    bool oom = false;
    HASH_ADD_STR(*runs, name, run);
    if (oom) {
        free(run);
        return err_set(e, ERR_NOMEM, NULL, "out of memory adding store run");
    }
    return 0;
}

struct store_run *store_runs_find(struct store_run *runs, const char *name)
{
    struct store_run *run = NULL;
    HASH_FIND_STR(runs, name, run);
    return run;
}

struct store_run *store_runs_auth(struct store_run *runs, const struct store_bytes *name,
                                  const struct store_bytes *secret)
{
    struct store_run *run = NULL;
    HASH_FIND(hh, runs, name->p, name->len, run);
    if (!run || !store_secret_equal(run->secret, run->secret_len, secret))
        return NULL;
    return run;
}

void store_runs_remove(struct store_run **runs, struct store_run *run)
{
    HASH_DEL(*runs, run);
    store_run_free(run);
}

void store_runs_free(struct store_run **runs)
{
    struct store_run *run, *tmp;
    HASH_ITER(hh, *runs, run, tmp)
    store_runs_remove(runs, run);
}
