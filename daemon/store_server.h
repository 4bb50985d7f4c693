/* store_server: the daemon's TCP key-value store that workers rendezvous through
 * (protocol in common/store_proto.h).
 *
 * Decision: one thread (a daemon/loop) serves every client of every run, non-blocking,
 * with a per-connection input and output buffer; blocked GET/WAIT requests are parked on
 * the keys they wait for and on a deadline timer, so thousands of waiting clients cost no
 * threads and no polling. Runs are namespaces: the daemon registers a run with its
 * secret before spawning workers and removes it when the run ends, which frees its keys
 * and closes its clients. This is the store's one public header; the implementation is
 * daemon/store/ (server, keys, conn, handlers). */
#ifndef DDPB_STORE_SERVER_H
#define DDPB_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct store_server;

struct store_server_stats {
    uint64_t clients;  /* connected now */
    uint64_t runs;     /* registered now */
    uint64_t requests; /* served since start */
    uint64_t rejected; /* connections closed for protocol or auth errors */
};

/* Binds host:port (port 0 = ephemeral) and starts its thread. Returns an owned
 * server (store_server_destroy stops and frees it) or NULL with e set. */
struct store_server *store_server_create(const char *host, int port, struct err *e);
/* Stops the thread, closes every client, frees everything. NULL is a no-op. */
void store_server_destroy(struct store_server *s);
int store_server_port(const struct store_server *s);
/* Registers a run namespace with its secret (both copied). ERR_CONFLICT if it exists.
 * Thread-safe. */
int store_server_add_run(struct store_server *s, const char *run, const char *secret,
                         struct err *e);
/* Removes a run: its keys are freed, its clients get STORE_E_CLOSED and are closed.
 * Unknown runs are ignored. Thread-safe; returns after the removal took effect. */
void store_server_remove_run(struct store_server *s, const char *run);
/* Sets key to value[0..len) in run's namespace (all copied), as a client's SET does: the
 * key's waiters (blocked GET and WAIT) wake. How the daemon publishes what workers wait
 * for (elastic mode's generations, daemon/elastic.h). ERR_NOT_FOUND for an unknown run,
 * ERR_INVALID for a key or value over the protocol's limits. Thread-safe; returns after
 * the write took effect. */
int store_server_set(struct store_server *s, const char *run, const char *key,
                     const void *value, size_t len, struct err *e);
/* Thread-safe snapshot. */
void store_server_get_stats(struct store_server *s, struct store_server_stats *out);

#endif
