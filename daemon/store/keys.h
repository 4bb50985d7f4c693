/* store/keys: the store's per-run key tables: which runs exist (a namespace each, with
 * its secret) and the keys of each run.
 *
 * Decision: a run is a namespace, not a key prefix: a client is bound to one run at
 * HELLO and every lookup goes through that run's own table, so no key of another run can
 * be named at all. A key that clients wait for but that does not exist yet is a
 * placeholder entry (present == false) holding the waiter list; it lives only while it
 * has waiters. The secret is compared in constant time.
 *
 * Ownership: the runs table owns its runs, a run owns its keys, a key owns its key and
 * value bytes; waiters and clients are borrowed connections (store/conn.h). Loop thread
 * only. */
#ifndef DDPB_STORE_KEYS_H
#define DDPB_STORE_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

#include "common/err.h"
#include "common/store_proto.h"

struct store_conn;

/* One key of a run. */
struct store_kv {
    uint8_t *key; /* owned, klen bytes */
    uint32_t klen;
    bool present;
    uint8_t *val; /* owned (NULL when vlen == 0) */
    uint32_t vlen;
    struct store_conn *waiters; /* utlist DL through wait_prev/wait_next */
    UT_hash_handle hh;
};

struct store_run {
    char name[STORE_MAX_RUN + 1];
    char secret[STORE_MAX_SECRET + 1];
    size_t secret_len;
    struct store_kv *keys;      /* uthash by key bytes */
    struct store_conn *clients; /* utlist DL through run_prev/run_next */
    UT_hash_handle hh;
};

/* Adds a run (name and secret copied) to *runs; ERR_CONFLICT if it exists. */
int store_runs_add(struct store_run **runs, const char *name, const char *secret,
                   struct err *e);
struct store_run *store_runs_find(struct store_run *runs, const char *name);
/* The run a HELLO names if its secret matches; NULL for an unknown run or a wrong secret
 * alike, so a client cannot learn which runs exist. */
struct store_run *store_runs_auth(struct store_run *runs, const struct store_bytes *name,
                                  const struct store_bytes *secret);
/* Unlinks and frees run with its keys (its clients must have left it). */
void store_runs_remove(struct store_run **runs, struct store_run *run);
void store_runs_free(struct store_run **runs);

struct store_kv *store_kv_find(struct store_run *run, const struct store_bytes *key);
bool store_kv_present(struct store_run *run, const struct store_bytes *key);
/* Finds or creates the entry (a placeholder when new). Returns NULL on ENOMEM. */
struct store_kv *store_kv_get(struct store_run *run, const struct store_bytes *key);
/* Frees a present key (a present key never has waiters) or a placeholder. */
void store_kv_free(struct store_run *run, struct store_kv *kv);
/* Frees kv if it is a placeholder nobody waits on any more. */
void store_kv_release_if_unused(struct store_run *run, struct store_kv *kv);
/* Replaces the value (copied). Returns -1 on ENOMEM with the entry unchanged. */
int store_kv_assign(struct store_kv *kv, const void *p, uint32_t len);

#endif
