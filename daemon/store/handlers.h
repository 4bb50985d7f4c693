/* store/handlers: what the store does with a request: HELLO, SET, GET, ADD,
 * COMPARE_SET, CHECK, WAIT, DELETE, PING, and the waiters of blocking GET/WAIT.
 *
 * Decision: a blocked GET/WAIT parks its connection on ONE missing key (the key's
 * placeholder holds its waiter list, store/keys.h) and arms the connection's deadline
 * timer; a write to that key wakes exactly its waiters, and a WAIT re-parks on its next
 * missing key, so thousands of waiting clients cost nothing per loop iteration. While a
 * connection is parked no further request of it is served (replies stay in order); a
 * woken connection goes on the ready list to serve what it pipelined meanwhile.
 *
 * Ownership: a parked connection owns its copy of a WAIT's keys; the key entries are the
 * run's. Loop thread only. */
#ifndef DDPB_STORE_HANDLERS_H
#define DDPB_STORE_HANDLERS_H

#include <stdint.h>

#include "common/store_proto.h"

struct store_server;
struct store_conn;
struct store_run;
struct store_kv;

/* Serves one decoded request of c (whose frame is consumed after this returns). */
void store_handle_request(struct store_server *s, struct store_conn *c,
                          const struct store_request *req, int64_t now);
/* Takes c off the key it is parked on (a no-op when not parked). */
void store_conn_unpark(struct store_server *s, struct store_conn *c);
/* Stores key = p[0..len) in run (both copied) and wakes the key's waiters, as a SET does;
 * what the daemon itself writes (store_server_set) goes through it too. Returns the entry,
 * or NULL on ENOMEM with nothing changed. */
struct store_kv *store_kv_put(struct store_server *s, struct store_run *run,
                              const struct store_bytes *key, const void *p, uint32_t len);
/* Timer callback (ctx: the connection): its HELLO or its parked request timed out. */
void store_conn_on_timeout(void *arg);

#endif
