/* store/conn: one client connection of the store: its socket, input and output buffers,
 * framing, and its life from accept to reaping.
 *
 * Decision: non-blocking with a buffer each way. Input is read in bounded chunks (a
 * budget per readiness event, for fairness) and every complete frame is served before
 * reading on; replies are appended to the output buffer and flushed at once, with
 * EPOLLOUT asked for only while some remain. A client that stops reading its replies, or
 * that floods input while a request of its own is blocked, is dropped. A connection is
 * never freed in the middle of an iteration: store_conn_kill closes it and marks it dead,
 * and store_reap frees it from the loop's iteration hook, so pointers in the wake lists
 * and the ready list stay valid until then.
 *
 * Ownership: the server's list of connections owns them (store/state.h); a run's client
 * list and a key's waiter list borrow them. Loop thread only. */
#ifndef DDPB_STORE_CONN_H
#define DDPB_STORE_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/store_proto.h"
#include "daemon/loop.h"
#include "daemon/store/keys.h"

struct store_server;

struct store_conn {
    struct store_server *srv; /* borrowed */
    int fd;
    struct loop_watch watch; /* EPOLLOUT in its events while replies wait */
    bool dead;               /* closed, waiting to be reaped at the end of the loop iteration */
    bool in_ready;           /* on the server's ready list */
    struct buf in;           /* bytes received; frames start at in_off */
    size_t in_off;
    struct buf out; /* replies not yet sent start at out_off */
    size_t out_off;
    struct store_run *run; /* NULL until HELLO succeeded */
    struct store_conn *run_prev, *run_next;
    struct store_conn *all_prev, *all_next;
    struct store_conn *ready_next, *dead_next;
    /* HELLO deadline before the handshake, the request's deadline while parked. */
    struct loop_timer timer;
    /* Parked request (park_op == 0 when none); store/handlers.c. */
    enum store_op park_op;
    struct store_kv *park_kv;
    struct store_conn *wait_prev, *wait_next;
    uint8_t *wait_keys; /* owned copy of a WAIT's encoded keys */
    uint32_t wait_keys_len, wait_cursor;
};

/* A new client on accepted socket fd (which it then owns), given until now +
 * the HELLO timeout to authenticate. -1 on ENOMEM or epoll failure (fd not taken). */
int store_conn_add(struct store_server *s, int fd, int64_t now);
/* After a reply was appended to c->out (rc from the encoder): flushes it, or drops a
 * client that does not read its replies or that cannot be answered. */
void store_conn_sent(struct store_server *s, struct store_conn *c, int rc);
/* Replies an error status; the connection stays open. */
void store_conn_error(struct store_server *s, struct store_conn *c, enum store_status st,
                      const char *msg);
/* Replies a closing status, counts the rejection (unless STORE_E_CLOSED) and closes. */
void store_conn_fail(struct store_server *s, struct store_conn *c, enum store_status st,
                     const char *msg);
/* Closes the socket and detaches c from everything; freed later by store_reap. */
void store_conn_kill(struct store_server *s, struct store_conn *c);
/* Frees the connections killed since the last call. */
void store_reap(struct store_server *s);
/* Queues c to have its buffered requests served (store_conn_process) after the batch. */
void store_mark_ready(struct store_server *s, struct store_conn *c);
/* Serves the complete frames buffered on c until it blocks, dies or runs out. */
void store_conn_process(struct store_server *s, struct store_conn *c);

#endif
