/* tcp: the project's own TCP communicator backend (comm.h) over a full mesh of
 * connections between ranks.
 *
 * Decision: setup is two-phase (listen, then connect with every peer's address) so the
 * comm layer needs no store and tests can run ranks as threads; comm_tcp_create is the
 * convenience that trades addresses through the store. Every connection opens with a
 * handshake (magic, version, ranks, world size, a hash of the run secret and the mesh's
 * namespace) that both sides verify, so a stray client, a rank of another run or a rank
 * of another mesh of the same run on the data port is closed and ignored instead of
 * breaking the rendezvous.
 *
 * Namespaces: a run may form several meshes over its ranks (the world, and pipeline
 * parallelism's one per stage, comm_factory.h comm_create_group). Each has a namespace,
 * ns, that prefixes its store keys and enters its handshake hash: the ranks of one mesh
 * never read another's addresses, and a connection that reaches another mesh's port
 * anyway (a stale address, a port the kernel handed on) fails the hash exactly as a
 * wrong secret does. The world mesh's namespace is "", which hashes and keys as the
 * protocol always has. */
#ifndef DDPB_COMM_TCP_H
#define DDPB_COMM_TCP_H

#include <stdatomic.h>

#include "common/err.h"
#include "worker/comm/comm.h"
#include "worker/comm/tcp_config.h"

struct store_client;

/* A rank that listens but is not connected yet. */
struct comm_tcp;

/* Validates cfg and binds listen_host:0. Returns an owned listener (pass it to
 * comm_tcp_connect, or free it with comm_tcp_discard) or NULL with e set. */
struct comm_tcp *comm_tcp_listen(const struct comm_tcp_config *cfg, struct err *e);
/* "host:port" (IPv6 as "[v6]:port") peers connect to; borrowed from t. */
const char *comm_tcp_address(const struct comm_tcp *t);
/* How t waits for data (the automatic policy of comm_tcp_config.spin_us): polls for
 * *spin_us before poll(2) sleeps, yielding the CPU between those polls when *yields;
 * *ring_block: bytes a ring allreduce moves per block. */
void comm_tcp_polling(const struct comm_tcp *t, int *spin_us, bool *yields, size_t *ring_block);
/* Frees a listener comm_tcp_connect never took. NULL is a no-op. */
void comm_tcp_discard(struct comm_tcp *t);

/* Tells a listener which node every rank runs on, for the hierarchical allreduce:
 * node_of[r] for each of the world_size ranks (borrowed, copied; ranks with equal
 * values share a node; values >= 0). A node's leader is its lowest rank. Every rank of
 * the run must be given the same map (worker/store/rendezvous.h rendezvous_nodes reads
 * it from the store). Never called: every rank on one node. ERR_INVALID naming the rank
 * with a negative node. */
int comm_tcp_set_nodes(struct comm_tcp *t, const int *node_of, struct err *e);

/* Builds the mesh: connects to every higher rank, accepts every lower one (a connection
 * with a bad handshake is dropped and accepting goes on) until all peers are in or the
 * timeout passes. peer_addrs[r] for every rank r (the own entry is ignored; borrowed).
 * Takes t in every case: on success the returned communicator owns it (comm_destroy),
 * on failure it is freed and NULL returned with e set. */
struct comm *comm_tcp_connect(struct comm_tcp *t, const char *const *peer_addrs, struct err *e);

/* SET "<ns>tcp/addr/<rank>" + GET every other rank's address (the timeout) + connect.
 * Takes t as comm_tcp_connect does; store is borrowed. A worker listens before it joins
 * its run, so its data port is open (and robust to strays) while the others arrive. */
struct comm *comm_tcp_connect_store(struct comm_tcp *t, struct store_client *store,
                                    struct err *e);

/* listen + comm_tcp_connect_store. store is borrowed. Returns an owned communicator or
 * NULL with e set. */
struct comm *comm_tcp_create(const struct comm_tcp_config *cfg, struct store_client *store,
                             struct err *e);

/* Fault injection for tests: closes every peer connection the way a crashed process
 * would (no goodbye), leaving c allocated for comm_destroy. */
void comm_tcp_drop_connections(struct comm *c);

#endif
