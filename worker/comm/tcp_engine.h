/* tcp_engine: what the files of the TCP backend share (tcp.c: mesh setup and entry
 * points; tcp_engine.c: the transfer engine and failure; tcp_algo.c: the algorithms as
 * transfer plans). Not for use outside worker/comm.
 *
 * Decision (no loop between the three): this header and tcp_engine.c are the core:
 * the state (struct comm_tcp), lanes and plans, failing (tcp_fail) and running a plan.
 * tcp_algo.c builds plans on it; tcp.c sets the mesh up and calls tcp_algo.c (tcp_algo.h);
 * nothing here calls back up. It was tcp_internal.h, with tcp_fail in tcp.c.
 *
 * The engine moves "lanes": a lane is a sequence of pieces sent to, or received from,
 * one peer, in order. Pieces of different lanes progress together in one poll loop, and
 * a piece may be gated by a piece of another lane: it may only move as many bytes as
 * that piece has finished (a send waits for the data it forwards to be reduced; a
 * receive waits for the bytes it overwrites to have been sent). An algorithm is a plan of
 * lanes and gates, so segmented pipelining (forward a segment while the next one is
 * still arriving) comes from the engine instead of being written per algorithm. */
#ifndef DDPB_TCP_ENGINE_H
#define DDPB_TCP_ENGINE_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/comm/comm.h"
#include "worker/comm/tcp_config.h"

#define TCP_BYE 0xB7u              /* goodbye byte sent by comm_destroy */
#define TCP_SEG_BYTES (256u << 10) /* receive segment of a streamed reduction: fits L2 */
#define TCP_SEND_MIN (64u << 10)   /* gated sends wait for at least this much data */
#define TCP_P2P_MAGIC 0x50504444u  /* "DDPP": header of a point-to-point message */
#define TCP_P2P_HEADER 16          /* u32 magic | u32 zero | u64 payload bytes */

enum tcp_transport { TCP_TRANSPORT_AUTO = 0, TCP_TRANSPORT_SHM, TCP_TRANSPORT_TCP };

struct shm_group;

struct tcp_peer {
    int fd;        /* -1: self, not connected, or dropped */
    bool said_bye; /* the peer destroyed its communicator cleanly */
    bool hup;      /* it closed with data still queued for a later operation */
};

struct comm_tcp {
    struct comm base; /* first member: a struct comm * converts back */
    int lfd;
    char host[256];
    char addr[300];
    uint64_t secret_hash;          /* of the run secret and ns (tcp.c tcp_hash_mesh) */
    char ns[COMM_TCP_NS_MAX + 1];  /* the mesh's namespace ("" = the world mesh's) */
    enum comm_algorithm algorithm; /* configured choice (AUTO: by size) */
    int spin_us;                   /* poll without sleeping this long before poll(2) sleeps */
    bool spin_yield;               /* and sched_yield(2) between those polls */
    int sockbuf;                   /* SO_SNDBUF/SO_RCVBUF asked for; 0: kernel's */
    size_t ring_block;             /* bytes a ring allreduce moves around per block */
    struct tcp_peer *peers;        /* world_size entries, owned */
    struct pollfd *pfds;           /* world_size entries, owned */
    int *pfd_peer;                 /* peer rank of each pfds entry, owned */
    bool *reading;                 /* per peer: a lane of the running plan reads it */
    int *pfd_index;                /* per peer: its pfds entry while polling, or -1 */
    uint8_t *seg;                  /* TCP_SEG_BYTES, owned */
    uint8_t *scratch;              /* algorithm temporaries, owned, grows, kept */
    size_t scratch_cap;
    struct tcp_lane *lanes; /* plan storage, owned, grows, kept */
    size_t lanes_cap;
    struct tcp_piece *pieces;
    size_t pieces_cap;
    /* The hierarchical allreduce's groups (comm_tcp_set_nodes), in rank order: the ranks
     * of this rank's node (local: nlocal of them, this rank is local[local_me]) and the
     * node leaders, the lowest rank of each node (leaders: nleaders, this rank is
     * leaders[leader_me], or leader_me is -1). Owned, world_size entries each. */
    int *local, nlocal, local_me;
    int *leaders, nleaders, leader_me;
    /* Shared memory (shm.h): the group of this rank's node, owned, NULL when the
     * transport is tcp or the node holds this rank alone; shm_all: the group is every
     * rank, so every operation runs over it (tcp_algo.c). */
    enum tcp_transport transport;
    char shm_dir[256]; /* "" = shm.h's default */
    size_t shm_slot_bytes;
    struct shm_group *shm;
    bool shm_all;
    bool broken;
    struct err first_err; /* why it broke */
};

struct tcp_piece {
    uint8_t *p;       /* send: the bytes; receive: where they (or the reduction) go */
    size_t len;       /* bytes */
    const uint8_t *a; /* receive: store p = op(a, incoming) instead of the bytes; a may be p */
    bool divide;      /* receive: divide reduced elements by the world size (avg) */
    bool header;      /* receive: a point-to-point header that must announce exactly the
                         next piece's length */
    int gate;         /* index of the piece of the lane's gate lane bounding this piece's
                         progress; -1: none */
};

struct tcp_lane {
    int peer;
    bool is_send;
    int gate_lane; /* index of the lane whose pieces gate this lane's pieces; -1: none */
    struct tcp_piece *pieces;
    int n;
    /* progress */
    int cur;      /* current piece; n when the lane is done */
    size_t done;  /* bytes of the current piece moved */
    size_t ready; /* bytes of the current piece final (received and reduced) */
    size_t carry; /* received bytes of a partial element, waiting in carry_buf */
    uint8_t carry_buf[8];
    bool blocked; /* the socket would block: retried once poll(2) finds it ready */
};

/* One engine run: the lanes of a plan for one step of an operation. */
struct tcp_run {
    const char *op;
    enum comm_dtype dtype;
    enum comm_redop redop;
    size_t esize;
    struct tcp_lane *lanes;
    int n;
};

/* Records a failure of operation `op` blaming `peer` (-1: none), breaks the
 * communicator and fills e with "op: message". Returns -1. */
__attribute__((format(printf, 6, 7))) int tcp_fail(struct comm_tcp *t, struct err *e,
                                                   enum err_code code, const char *op, int peer,
                                                   const char *fmt, ...);
/* Whether c->stop or the abort flag is raised. */
bool tcp_aborted(const struct comm_tcp *t);

/* Runs every lane of r to its end. Fails when no byte moved for the communicator's
 * timeout (naming the peer waited on), on the abort flag or c->stop, and when a peer
 * closes, resets or breaks the protocol; every failure breaks the communicator. */
int tcp_engine_run(struct comm_tcp *t, struct tcp_run *r, struct err *e);
/* Space for nlanes lanes with npieces pieces between them (t->lanes, t->pieces). */
int tcp_plan_reserve(struct comm_tcp *t, const char *op, int nlanes, int npieces,
                     struct err *e);
/* Grows t->scratch to at least bytes. */
int tcp_scratch_reserve(struct comm_tcp *t, const char *op, size_t bytes, struct err *e);

#endif
