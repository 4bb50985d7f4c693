/* store_client: a synchronous client of the daemon's TCP store (protocol in
 * common/store_proto.h), used by workers for rendezvous and by tests.
 *
 * Decision: one connection, one request in flight, every call bounded by a timeout and
 * an optional abort flag; a timeout on GET/WAIT leaves the connection usable, and so do
 * refusals about the request itself (ERR_INVALID arguments, ERR_NOT_FOUND, ERR_CONFLICT);
 * any other failure leaves it closed (later calls fail with ERR_PEER), including a GET/WAIT
 * whose reply did not come within its timeout plus the I/O timeout (ERR_TIMEOUT: the
 * server is dead or hung). Not thread-safe: one client per thread. */
#ifndef DDPB_STORE_CLIENT_H
#define DDPB_STORE_CLIENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct store_client;

/* Connects to "host:port", retrying refused connections until connect_timeout_ms, and
 * performs the HELLO handshake for run/secret/rank. Returns an owned client (free with
 * store_client_destroy) or NULL with e set (ERR_UNAUTHORIZED for a wrong secret or
 * unknown run). abort_flag is borrowed and may be NULL. */
struct store_client *store_client_connect(const char *hostport, const char *run,
                                          const char *secret, int64_t rank,
                                          int connect_timeout_ms, const atomic_bool *abort_flag,
                                          struct err *e);
void store_client_destroy(struct store_client *c);

/* Default per-operation timeout for SET/ADD/... that do not block (ms). */
void store_client_set_io_timeout(struct store_client *c, int timeout_ms);

int store_client_set(struct store_client *c, const char *key, const void *value, size_t len,
                     struct err *e);
int store_client_set_str(struct store_client *c, const char *key, const char *value,
                         struct err *e);
/* Blocks until key exists (or timeout_ms: ERR_TIMEOUT). *value is malloc'd and
 * NUL-terminated beyond *len (caller frees). */
int store_client_get(struct store_client *c, const char *key, int timeout_ms, char **value,
                     size_t *len, struct err *e);
int store_client_add(struct store_client *c, const char *key, int64_t delta, int64_t *result,
                     struct err *e);
/* *current (malloc'd, caller frees, may be NULL to ignore) receives the stored value. */
int store_client_compare_set(struct store_client *c, const char *key, const char *expected,
                             const char *desired, char **current, struct err *e);
/* *all = 1 when every key exists. */
int store_client_check(struct store_client *c, const char *const *keys, uint32_t n, int *all,
                       struct err *e);
int store_client_wait(struct store_client *c, const char *const *keys, uint32_t n,
                      int timeout_ms, struct err *e);
/* *existed may be NULL. */
int store_client_delete(struct store_client *c, const char *key, int *existed, struct err *e);
int store_client_ping(struct store_client *c, struct err *e);
/* Barrier over world_size participants named `name` (each use needs a fresh name, e.g.
 * with a generation suffix): ADD name/count, the last arrival SETs name/done, everyone
 * WAITs name/done. */
int store_client_barrier(struct store_client *c, const char *name, int64_t world_size,
                         int timeout_ms, struct err *e);

#endif
