/* store/server: the store server itself (public API in daemon/store_server.h): the
 * listening socket, the loop glue, and the add/remove-run commands of other threads.
 * The parts: store/keys (runs and their keys), store/conn (connections, buffers,
 * framing), store/handlers (requests and blocked waiters); the state they share is
 * store/state.h. This file installs the handlers in it (s->hooks) for conn.c to call.
 *
 * Decision: one thread, a daemon/loop's, owns every piece of state, so nothing but the
 * stats needs a lock; other threads reach it only through closures the loop runs
 * synchronously (add/remove a run), which return once the change took effect. Accepting
 * never spins: out of fds, a reserve fd is given up to accept-and-close one pending
 * client, and without one (or on ENOBUFS) accepting pauses for a moment on a timer. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/store_proto.h"
#include "daemon/loop.h"
#include "daemon/store/conn.h"
#include "daemon/store/handlers.h"
#include "daemon/store/keys.h"
#include "daemon/store/state.h"

#define STORE_ACCEPT_PAUSE_MS 100

/* ---- accepting ------------------------------------------------------------------- */

static void store_accept_resume(void *arg)
{
    struct store_server *s = arg;
    loop_watch_modify(s->loop, &s->listen, EPOLLIN, NULL);
}

/* Stops accepting for a moment (kept accepting if even the timer cannot be armed). */
static void store_accept_pause(struct store_server *s, int64_t now)
{
    if (loop_timer_start(s->loop, &s->accept_resume, now + STORE_ACCEPT_PAUSE_MS,
                         store_accept_resume, s) == 0)
        loop_watch_modify(s->loop, &s->listen, 0, NULL);
}

/* Out of fds: give up the reserve fd to accept-and-close one pending connection, so the
 * listener does not stay readable and spin the loop; without a reserve, stop accepting
 * for a moment. */
static void store_accept_shed(struct store_server *s, int64_t now)
{
    if (now - s->emfile_logged_ms >= 5000) {
        log_warn("store: out of file descriptors, refusing new clients");
        s->emfile_logged_ms = now;
    }
    bool shed = false;
    if (s->reserve_fd >= 0) {
        close(s->reserve_fd);
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            shed = true;
            atomic_fetch_add(&s->n_rejected, 1);
        }
        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    /* No progress possible (the freed fd went elsewhere): back off instead of spinning. */
    if (!shed || s->reserve_fd < 0)
        store_accept_pause(s, now);
}

/* Takes every pending connection (until EAGAIN): a world of thousands of ranks dials in
 * at once, and each connection left in the queue is one fewer slot for the SYNs still
 * coming; a connection costs only an accept and an epoll registration here, its
 * requests are served by the following iterations. */
static void store_on_listen(void *arg, uint32_t events)
{
    (void)events;
    struct store_server *s = arg;
    int64_t now = clock_mono_ms();
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                store_accept_shed(s, now);
            else if (errno == ENOBUFS || errno == ENOMEM)
                store_accept_pause(s, now);
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_warn("store: accept: %s", strerror(errno));
            return;
        }
        net_set_nodelay(fd);
        if (store_conn_add(s, fd, now) < 0) {
            log_warn("store: out of memory for a new client");
            close(fd);
        }
    }
}

/* ---- commands from other threads --------------------------------------------------- */

static int store_apply_add_run(struct store_server *s, const char *name, const char *secret,
                               struct err *e)
{
    if (store_runs_add(&s->runs, name, secret, e) < 0)
        return -1;
    atomic_fetch_add(&s->n_runs, 1);
    return 0;
}

/* Its clients get STORE_E_CLOSED and are closed first: they point into the run. */
static void store_apply_remove_run(struct store_server *s, const char *name)
{
    struct store_run *run = store_runs_find(s->runs, name);
    if (!run)
        return;
    while (run->clients)
        store_conn_fail(s, run->clients, STORE_E_CLOSED, "run removed");
    store_runs_remove(&s->runs, run);
    atomic_fetch_sub(&s->n_runs, 1);
}

/* A store_server_add_run on the loop's thread; lives on the caller's stack. */
struct store_cmd_add {
    struct store_server *s;
    const char *run, *secret; /* borrowed from the caller */
    int rc;
    struct err err;
};

static void store_do_add_run(void *arg)
{
    struct store_cmd_add *c = arg;
    c->rc = store_apply_add_run(c->s, c->run, c->secret, &c->err);
}

/* A store_server_set on the loop's thread; lives on the caller's stack. */
struct store_cmd_set {
    struct store_server *s;
    const char *run, *key; /* borrowed from the caller */
    const void *value;
    uint32_t len;
    int rc;
    struct err err;
};

static void store_do_set(void *arg)
{
    struct store_cmd_set *c = arg;
    struct store_run *run = store_runs_find(c->s->runs, c->run);
    struct store_bytes key = {(const uint8_t *)c->key, (uint32_t)strlen(c->key)};
    if (!run)
        c->rc = err_set(&c->err, ERR_NOT_FOUND, "run", "store: no run %s", c->run);
    else if (!store_kv_put(c->s, run, &key, c->value, c->len))
        c->rc = err_set(&c->err, ERR_NOMEM, "key", "store: out of memory setting %s", c->key);
}

struct store_cmd_remove {
    struct store_server *s;
    const char *run; /* borrowed from the caller */
};

static void store_do_remove_run(void *arg)
{
    struct store_cmd_remove *c = arg;
    store_apply_remove_run(c->s, c->run);
}

/* ---- the loop ---------------------------------------------------------------------- */

static void store_drain_ready(struct store_server *s)
{
    while (s->ready) {
        struct store_conn *c = s->ready;
        s->ready = c->ready_next;
        c->in_ready = false;
        store_conn_process(s, c);
    }
}

/* After each iteration's events and timers: serve the clients that were woken (they
 * may have pipelined more requests), then free the ones that died. */
static void store_after_iteration(void *arg)
{
    struct store_server *s = arg;
    store_drain_ready(s);
    store_reap(s);
}

/* ---- public API -------------------------------------------------------------------- */

static void store_close_fds(struct store_server *s)
{
    loop_destroy(s->loop);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
}

static int store_open_fds(struct store_server *s, const char *host, int port, struct err *e)
{
    s->lfd = net_listen(host, port, 0, e); /* 0: somaxconn; a world dials in at once */
    if (s->lfd < 0)
        return err_prefix(e, "store server");
    net_set_nonblock(s->lfd, true);
    s->port = net_local_port(s->lfd);
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->loop = loop_create("ddpb-store", e);
    if (!s->loop)
        return -1;
    return loop_watch_add(s->loop, &s->listen, s->lfd, EPOLLIN, store_on_listen, s, e);
}

struct store_server *store_server_create(const char *host, int port, struct err *e)
{
    struct store_server *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(e, ERR_NOMEM, NULL, "out of memory creating the store server");
        return NULL;
    }
    s->lfd = s->reserve_fd = -1;
    s->hooks = (struct store_conn_hooks){.serve = store_handle_request,
                                         .unpark = store_conn_unpark,
                                         .on_timeout = store_conn_on_timeout};
    net_raise_nofile();
    if (store_open_fds(s, host, port, e) < 0 ||
        loop_start(s->loop, store_after_iteration, s, e) < 0) {
        store_close_fds(s);
        free(s);
        return NULL;
    }
    return s;
}

void store_server_destroy(struct store_server *s)
{
    if (!s)
        return;
    loop_stop(s->loop);
    loop_wait(s->loop); /* from here on the loop's state is ours */
    while (s->conns)
        store_conn_kill(s, s->conns);
    store_reap(s);
    store_runs_free(&s->runs);
    loop_timer_stop(s->loop, &s->accept_resume);
    store_close_fds(s);
    free(s);
}

int store_server_port(const struct store_server *s)
{
    return s->port;
}

int store_server_add_run(struct store_server *s, const char *run, const char *secret,
                         struct err *e)
{
    size_t rl = strlen(run), sl = strlen(secret);
    if (rl == 0 || rl > STORE_MAX_RUN)
        return err_set(e, ERR_INVALID, "run", "store run name must be 1..%u bytes",
                       STORE_MAX_RUN);
    if (sl > STORE_MAX_SECRET)
        return err_set(e, ERR_INVALID, "secret", "store secret longer than %u bytes",
                       STORE_MAX_SECRET);
    struct store_cmd_add cmd = {.s = s, .run = run, .secret = secret};
    if (loop_call_sync(s->loop, store_do_add_run, &cmd, e) < 0)
        return err_prefix(e, "store server");
    if (cmd.rc < 0 && e)
        *e = cmd.err;
    return cmd.rc;
}

void store_server_remove_run(struct store_server *s, const char *run)
{
    struct store_cmd_remove cmd = {.s = s, .run = run};
    loop_call_sync(s->loop, store_do_remove_run, &cmd, NULL); /* refused: nothing to remove */
}

int store_server_set(struct store_server *s, const char *run, const char *key,
                     const void *value, size_t len, struct err *e)
{
    size_t kl = strlen(key);
    if (kl == 0 || kl > STORE_MAX_KEY || len > STORE_MAX_VALUE)
        return err_set(e, ERR_INVALID, "key",
                       "store: key of %zu bytes (1..%u), value of %zu "
                       "(at most %u)",
                       kl, STORE_MAX_KEY, len, STORE_MAX_VALUE);
    struct store_cmd_set cmd = {
        .s = s, .run = run, .key = key, .value = value, .len = (uint32_t)len};
    if (loop_call_sync(s->loop, store_do_set, &cmd, e) < 0)
        return err_prefix(e, "store server");
    if (cmd.rc < 0 && e)
        *e = cmd.err;
    return cmd.rc;
}

void store_server_get_stats(struct store_server *s, struct store_server_stats *out)
{
    out->clients = atomic_load(&s->n_clients);
    out->runs = atomic_load(&s->n_runs);
    out->requests = atomic_load(&s->n_requests);
    out->rejected = atomic_load(&s->n_rejected);
}
