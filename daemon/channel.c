/* channel: see channel.h. */
#include "daemon/channel.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "daemon/credential.h"

struct channel_pending {
    struct loop_watch lw;
    struct channel *ch;
    int fd; /* -1: free slot */
    size_t len;
    int64_t deadline_ms;
    char line[CHANNEL_MAX_HELLO + 1];
};

struct channel {
    struct loop *loop; /* borrowed */
    int lfd;
    struct loop_watch lw;
    char run[64], secret[80];
    int world_size, refused;
    bool *connected; /* owned: a rank proved itself once (a second claim is refused) */
    channel_adopt_fn adopt;
    void *ctx;
    struct channel_pending pending[CHANNEL_MAX_PENDING];
};

static void channel_drop(struct channel_pending *p, bool refused)
{
    if (p->fd < 0)
        return;
    loop_watch_remove(p->ch->loop, &p->lw);
    close(p->fd);
    p->fd = -1;
    if (refused)
        p->ch->refused++;
}

/* The hello line, whole: adopt its connection or refuse it. */
static void channel_on_hello(struct channel_pending *p)
{
    struct channel *ch = p->ch;
    json_error_t je;
    json_t *doc = json_loadb(p->line, p->len, 0, &je);
    json_t *h = json_object_get(doc, "channel");
    const char *run = json_string_value(json_object_get(h, "run"));
    const char *secret = json_string_value(json_object_get(h, "secret"));
    const char *host = json_string_value(json_object_get(h, "host"));
    json_t *rank_v = json_object_get(h, "rank"), *pid_v = json_object_get(h, "pid");
    json_int_t rank = json_integer_value(rank_v);
    bool ok = run && secret && json_is_integer(rank_v) && json_is_integer(pid_v) &&
              strcmp(run, ch->run) == 0 && credential_equal(secret, ch->secret) && rank >= 0 &&
              rank < ch->world_size && !ch->connected[rank];
    char host_copy[256];
    snprintf(host_copy, sizeof host_copy, "%s", host ? host : "");
    pid_t pid = (pid_t)json_integer_value(pid_v);
    json_decref(doc);
    if (!ok) {
        log_warn("%s: a report channel connection did not prove itself as a rank of the run: "
                 "closed",
                 ch->run);
        channel_drop(p, true);
        return;
    }
    loop_watch_remove(ch->loop, &p->lw);
    int fd = p->fd;
    p->fd = -1;
    ch->connected[rank] = true;
    if (ch->adopt(ch->ctx, (int)rank, fd, pid, host_copy) < 0)
        close(fd);
}

/* A waiting connection is readable: its bytes up to the first newline, one at a time. */
static void channel_on_pending(void *ctx, uint32_t events)
{
    struct channel_pending *p = ctx;
    (void)events;
    for (;;) {
        char c;
        ssize_t n = recv(p->fd, &c, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* closed (or failed) before saying who it is */
            channel_drop(p, true);
            return;
        }
        if (c == '\n') {
            p->line[p->len] = '\0';
            channel_on_hello(p);
            return;
        }
        if (p->len >= CHANNEL_MAX_HELLO) {
            channel_drop(p, true);
            return;
        }
        p->line[p->len++] = c;
    }
}

static struct channel_pending *channel_free_slot(struct channel *ch)
{
    for (int i = 0; i < CHANNEL_MAX_PENDING; i++)
        if (ch->pending[i].fd < 0)
            return &ch->pending[i];
    return NULL;
}

static void channel_on_accept(void *ctx, uint32_t events)
{
    struct channel *ch = ctx;
    (void)events;
    for (;;) {
        int fd = accept4(ch->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or an error the next readiness retries */
        struct channel_pending *p = channel_free_slot(ch);
        struct err e = {0};
        if (!p) {
            close(fd);
            ch->refused++;
            continue;
        }
        p->fd = fd;
        p->len = 0;
        p->deadline_ms = clock_mono_ms() + CHANNEL_HELLO_MS;
        if (loop_watch_add(ch->loop, &p->lw, fd, EPOLLIN, channel_on_pending, p, &e) < 0) {
            log_warn("%s: report channel: %s", ch->run, e.msg);
            close(fd);
            p->fd = -1;
        }
    }
}

struct channel *channel_open(struct loop *loop, const char *host, const char *run,
                             const char *secret, int world_size, channel_adopt_fn adopt,
                             void *ctx, struct err *e)
{
    struct channel *ch = calloc(1, sizeof *ch);
    bool *connected = calloc((size_t)(world_size > 0 ? world_size : 1), sizeof *connected);
    if (!ch || !connected) {
        free(ch);
        free(connected);
        err_set(e, ERR_NOMEM, NULL, "report channel: out of memory");
        return NULL;
    }
    *ch = (struct channel){.loop = loop,
                           .world_size = world_size,
                           .connected = connected,
                           .adopt = adopt,
                           .ctx = ctx};
    snprintf(ch->run, sizeof ch->run, "%s", run);
    snprintf(ch->secret, sizeof ch->secret, "%s", secret);
    for (int i = 0; i < CHANNEL_MAX_PENDING; i++)
        ch->pending[i] = (struct channel_pending){.ch = ch, .fd = -1};
    ch->lfd = net_listen(host, 0, 64, e);
    if (ch->lfd < 0 || net_set_nonblock(ch->lfd, true) < 0 ||
        loop_watch_add(loop, &ch->lw, ch->lfd, EPOLLIN, channel_on_accept, ch, e) < 0) {
        if (ch->lfd >= 0)
            close(ch->lfd);
        free(connected);
        free(ch);
        return NULL;
    }
    return ch;
}

int channel_port(const struct channel *c)
{
    return net_local_port(c->lfd);
}

void channel_tick(struct channel *c, int64_t now_ms)
{
    for (int i = 0; c && i < CHANNEL_MAX_PENDING; i++)
        if (c->pending[i].fd >= 0 && now_ms >= c->pending[i].deadline_ms)
            channel_drop(&c->pending[i], true);
}

int channel_refused(const struct channel *c)
{
    return c->refused;
}

void channel_release(struct channel *c, int rank)
{
    if (c && rank >= 0 && rank < c->world_size)
        c->connected[rank] = false;
}

void channel_close(struct channel *c)
{
    if (!c)
        return;
    for (int i = 0; i < CHANNEL_MAX_PENDING; i++)
        channel_drop(&c->pending[i], false);
    loop_watch_remove(c->loop, &c->lw);
    close(c->lfd);
    free(c->connected);
    free(c);
}
