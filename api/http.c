/* http: the libmicrohttpd glue. Collects the request body under a cap, answers 413 as
 * soon as the cap is known to be exceeded (from Content-Length, before reading the body),
 * dispatches, and sends JSON. Error → status mapping lives here (api_http_status).
 *
 * Decision: a thread pool with epoll; handlers are short (SQLite reads, a spec parse),
 * so no handler blocks a thread for long, and slow operations (runs) never happen on an
 * HTTP thread: they are queued for the scheduler.
 *
 * Decision: a request's head has a deadline. libmicrohttpd's only timeout is an idle
 * one that every received byte resets, so bytes that never make a request (a TLS
 * hello, a port scan) held a connection for the full idle time and a client sending
 * its header a byte a second held one forever. Until its head is complete a connection
 * gets a short idle timeout (HTTP_HEAD_IDLE_S), and a reaper thread shuts down the
 * socket of any connection whose head took longer than HTTP_HEAD_CAP_S in total (its
 * thread then sees end of file and closes it). Once the head is in, the normal idle
 * timeout applies: bodies, keep-alive and event streams are not affected.
 *
 * Decision: TLS is libmicrohttpd's own (GnuTLS), on the same listener and threads, when
 * --tls-cert/--tls-key are given (daemon/config.c has checked the pair); one listener
 * speaks one protocol, so a plain request to an HTTPS port fails its handshake and is
 * closed like any other bytes that never make a request.
 *
 * Decision (issue 31): the heavy GETs (routes.c api_route_heavy: trace, report, fit,
 * results, steps, predict) run on a bounded worker pool (pool.c), not on libmicrohttpd's
 * threads, so no number of them can hold the threads that answer /v1/cluster/sync. The
 * connection is suspended (MHD_suspend_connection) while a worker builds the reply and
 * resumed when it is ready; a job the full queue refuses is answered 503 with
 * Retry-After at once. Chosen over a second libmicrohttpd daemon for the cluster: one
 * port and one listener for everything (the follower, the CLI, netlab and the k8s
 * service stay as they are), and the cluster endpoints keep every libmicrohttpd thread,
 * whose work is only short requests. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api/api.h"
#include "api/cache.h"
#include "api/pool.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"

#define HTTP_MAX_QUERY 32
#define HTTP_DISCARD_FACTOR 8
#define HTTP_IDLE_S 60       /* idle timeout once a request's head is in, and keep-alive */
#define HTTP_HEAD_IDLE_S 2   /* idle timeout of a new connection before its first head */
#define HTTP_HEAD_CAP_S 10   /* total time a request's head may take */
#define HTTP_HEAVY_WORKERS 2 /* the heavy GETs' pool: at most this many run at once */
#define HTTP_HEAVY_QUEUE 16  /* ... and this many wait; more get 503 */
#define HTTP_RETRY_AFTER_S "1"

/* One open connection, for the head deadline. Created when libmicrohttpd accepts it,
 * freed when it closes (http_on_connection); libmicrohttpd keeps the pointer as the
 * connection's socket context. */
struct http_sock {
    int fd;
    /* monotonic ms by which the head must be complete; 0: not waiting for one. Set by
     * the connection's thread, read (and cleared) by the reaper. */
    _Atomic int64_t head_deadline_ms;
    bool idle_short;               /* its idle timeout is HTTP_HEAD_IDLE_S (its thread) */
    struct http_sock *prev, *next; /* in api_server.socks, under socks_lock */
};

struct api_server {
    struct MHD_Daemon *mhd;
    struct api_ctx *ctx;
    int port;
    pthread_mutex_t socks_lock; /* guards socks and the reaper's state */
    pthread_cond_t reaper_wake;
    struct http_sock *socks; /* every open connection */
    pthread_t reaper;
    bool reaper_started, reaper_stop;
    char *tls_cert, *tls_key; /* owned PEM texts while the listener serves TLS; else NULL */
    struct api_pool *heavy;   /* owned: the heavy GETs' workers */
};

/* A heavy request handed to the pool. Its request points into the suspended
 * connection's memory (libmicrohttpd keeps it while suspended); owned by its struct
 * http_conn. lock orders the worker's resume after the connection's suspend. */
struct http_job {
    pthread_mutex_t lock;
    struct api_server *srv;
    struct MHD_Connection *conn;
    struct api_request req;
    struct api_query_arg args[HTTP_MAX_QUERY];
    struct api_reply rep;
    struct err e;
    int rc;
    bool done;
};

struct http_conn {
    struct buf body;
    bool too_large;
    size_t discarded;     /* bytes of an oversized body thrown away */
    int64_t started_ns;   /* when the request arrived, for the latency histogram */
    struct http_job *job; /* owned: a heavy request on the pool, or NULL */
};

int api_http_status(enum err_code code)
{
    switch (code) {
    case ERR_OK: return MHD_HTTP_OK;
    case ERR_INVALID: return MHD_HTTP_BAD_REQUEST;
    case ERR_NOT_FOUND: return MHD_HTTP_NOT_FOUND;
    case ERR_NOT_ALLOWED: return MHD_HTTP_METHOD_NOT_ALLOWED;
    case ERR_CONFLICT: return MHD_HTTP_CONFLICT;
    case ERR_TOO_LARGE: return MHD_HTTP_CONTENT_TOO_LARGE;
    case ERR_UNAUTHORIZED: return MHD_HTTP_UNAUTHORIZED;
    case ERR_FORBIDDEN: return MHD_HTTP_FORBIDDEN;
    case ERR_MEDIA_TYPE: return MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
    case ERR_UNAVAILABLE: return MHD_HTTP_SERVICE_UNAVAILABLE;
    case ERR_TIMEOUT: return MHD_HTTP_GATEWAY_TIMEOUT;
    default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when s does not start one
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
static size_t http_utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) ||
        (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return n;
}

/* in as valid UTF-8 into out (cap > 0): each byte that starts no valid sequence becomes
 * '?'. Messages quote what the client sent (a path with %FF in it), and JSON strings
 * must be UTF-8, so without this an error about bad bytes could not be sent at all. */
static const char *http_utf8_clean(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)in;
    while (*s && o + 1 < cap) {
        size_t n = http_utf8_len(s);
        if (n == 0 || o + n >= cap) {
            out[o++] = '?';
            s++;
            continue;
        }
        memcpy(out + o, s, n);
        o += n;
        s += n;
    }
    out[o] = '\0';
    return out;
}

json_t *api_error_json(const struct err *e)
{
    char msg[sizeof e->msg], field[sizeof e->field];
    json_t *inner = json_pack("{s:s, s:s}", "code", err_code_name(e->code), "message",
                              e->msg[0] ? http_utf8_clean(e->msg, msg, sizeof msg)
                                        : err_code_name(e->code));
    if (inner && e->field[0])
        json_object_set_new(inner, "field",
                            json_string(http_utf8_clean(e->field, field, sizeof field)));
    return inner ? json_pack("{s:o}", "error", inner) : NULL;
}

/* libmicrohttpd's unescaping of the path and query, except that "%00" stays as it is:
 * decoded, it would end the C string early, and "/v1/experiments/1%00" would answer
 * for experiment 1, "/index.html%00.js" serve index.html. Left encoded, both name
 * nothing that exists and get 404. Returns the new length (in place, never longer). */
static size_t http_unescape(void *cls, struct MHD_Connection *conn, char *uri)
{
    (void)cls;
    (void)conn;
    char *w = uri;
    for (const char *r = uri; *r;) {
        unsigned v;
        if (r[0] == '%' && isxdigit((unsigned char)r[1]) && isxdigit((unsigned char)r[2]) &&
            sscanf(r + 1, "%2x", &v) == 1 && v != 0) {
            *w++ = (char)v;
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - uri);
}

/* Headers every response gets: CORS when configured, the auth challenge on 401. */
static void http_common_headers(const struct api_server *srv, struct MHD_Response *resp,
                                int status)
{
    const char *origin = srv->ctx->cfg->cors_origin;
    if (origin[0]) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_CONTENT_TOO_LARGE)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, HTTP_RETRY_AFTER_S);
}

/* Queues resp with status and records the request in the metrics. */
static enum MHD_Result http_queue(struct api_server *srv, struct MHD_Connection *conn,
                                  struct http_conn *hc, const char *method, int status,
                                  struct MHD_Response *resp)
{
    http_common_headers(srv, resp, status);
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    api_metrics_record(&srv->ctx->metrics, method, status,
                       (double)(clock_mono_ns() - hc->started_ns) * 1e-9);
    return r;
}

static struct MHD_Response *http_stream_response(struct MHD_Connection *conn,
                                                 struct api_reply *rep)
{
    struct MHD_Response *resp = api_stream_response(rep->stream, conn);
    if (!resp)
        return NULL;
    rep->stream = NULL; /* the response owns it now */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return resp;
}

/* The reply's body as a response (JSON, or the raw body). JSON is compact, as the replies
 * SQLite builds are: indentation made a run's reply half again as long, and clients
 * (the dashboard, the CLI, jq) lay it out themselves. */
static struct MHD_Response *http_body_response(struct api_reply *rep)
{
    char *text = NULL;
    size_t len = 0;
    const char *ctype = rep->content_type ? rep->content_type : "text/plain; charset=utf-8";
    if (rep->json) {
        text = json_dumps(rep->json,
                          JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        if (text) {
            len = strlen(text);
            char *grown = realloc(text, len + 2);
            if (grown) {
                text = grown;
                text[len++] = '\n';
                text[len] = '\0';
            }
        }
        ctype = "application/json";
    } else {
        text = rep->body;
        len = rep->body_len;
        rep->body = NULL;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, text ? text : (char *)"", text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(text);
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (rep->location[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, rep->location);
    if (rep->allow[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, rep->allow);
    return resp;
}

static enum MHD_Result http_send(struct api_server *srv, struct MHD_Connection *conn,
                                 struct http_conn *hc, const char *method,
                                 struct api_reply *rep)
{
    struct MHD_Response *resp = rep->stream ? http_stream_response(conn, rep)
                                            : http_body_response(rep);
    if (!resp)
        return MHD_NO;
    return http_queue(srv, conn, hc, method, rep->status ? rep->status : 200, resp);
}

/* allow: the methods the resource takes, for a 405's Allow header (RFC 9110 §15.5.6);
 * NULL or "" otherwise. */
static enum MHD_Result http_send_error(struct api_server *srv, struct MHD_Connection *conn,
                                       struct http_conn *hc, const char *method,
                                       const struct err *e, const char *allow)
{
    atomic_fetch_add(&srv->ctx->errors, 1);
    struct api_reply rep = {.status = api_http_status(e->code), .json = api_error_json(e)};
    if (allow && allow[0])
        snprintf(rep.allow, sizeof rep.allow, "%s", allow);
    enum MHD_Result r = http_send(srv, conn, hc, method, &rep);
    json_decref(rep.json);
    return r;
}

/* A CORS preflight, answered only when CORS is configured. */
static enum MHD_Result http_preflight(struct api_server *srv, struct MHD_Connection *conn,
                                      struct http_conn *hc)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (char *)"",
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    return http_queue(srv, conn, hc, "OPTIONS", MHD_HTTP_NO_CONTENT, resp);
}

/* Sends what a dispatch (rc, rep, e) made, and frees rep's contents. */
static enum MHD_Result http_reply(struct api_server *srv, struct MHD_Connection *conn,
                                  struct http_conn *hc, const char *method, const char *url,
                                  int rc, struct api_reply *rep, const struct err *e)
{
    enum MHD_Result r;
    if (rc < 0) {
        if (api_http_status(e->code) >= 500 && e->code != ERR_UNAVAILABLE)
            log_error("%s %s: %s", method, url, e->msg);
        r = http_send_error(srv, conn, hc, method, e, rep->allow);
    } else {
        r = http_send(srv, conn, hc, method, rep);
    }
    json_decref(rep->json);
    free(rep->body);
    api_stream_close(rep->stream);
    *rep = (struct api_reply){0};
    return r;
}

/* --- the heavy GETs' pool ------------------------------------------------------------- */

/* A worker: dispatches the job's request, then resumes its connection (cancelled: the
 * pool is stopping, and the reply is 503). */
static void http_job_run(void *arg, int cancelled)
{
    struct http_job *job = arg;
    int rc = -1;
    struct api_reply rep = {0};
    struct err e = {0};
    if (cancelled)
        err_set(&e, ERR_UNAVAILABLE, NULL, "the daemon is stopping");
    else
        rc = api_dispatch(job->srv->ctx, &job->req, &rep, &e);
    pthread_mutex_lock(&job->lock); /* held by the connection's thread until suspended */
    job->rc = rc;
    job->rep = rep;
    job->e = e;
    job->done = true;
    struct MHD_Connection *conn = job->conn;
    pthread_mutex_unlock(&job->lock);
    MHD_resume_connection(conn); /* libmicrohttpd calls http_handle again: http_job_reply */
}

static void http_job_free(struct http_job *job)
{
    if (!job)
        return;
    json_decref(job->rep.json);
    free(job->rep.body);
    api_stream_close(job->rep.stream);
    pthread_mutex_destroy(&job->lock);
    free(job);
}

/* Hands req to the pool and suspends the connection, or answers 503 when the pool's queue
 * is full. The job (owned by hc) copies req's query array; the strings stay the
 * connection's. */
static enum MHD_Result http_to_pool(struct api_server *srv, struct MHD_Connection *conn,
                                    struct http_conn *hc, const struct api_request *req)
{
    struct err e = {0};
    struct http_job *job = calloc(1, sizeof *job);
    if (!job) {
        err_set(&e, ERR_NOMEM, NULL, "out of memory");
        return http_send_error(srv, conn, hc, req->method, &e, NULL);
    }
    pthread_mutex_init(&job->lock, NULL);
    job->srv = srv;
    job->conn = conn;
    job->req = *req;
    memcpy(job->args, req->query, req->nquery * sizeof *req->query);
    job->req.query = job->args;
    pthread_mutex_lock(&job->lock);
    if (api_pool_submit(srv->heavy, http_job_run, job) < 0) {
        pthread_mutex_unlock(&job->lock);
        http_job_free(job);
        err_set(&e, ERR_UNAVAILABLE, NULL,
                "busy: %d heavy requests (trace, report, fit, results, steps, predict) are "
                "running and %d waiting; retry later",
                HTTP_HEAVY_WORKERS, HTTP_HEAVY_QUEUE);
        return http_send_error(srv, conn, hc, req->method, &e, NULL);
    }
    hc->job = job;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&job->lock);
    return MHD_YES;
}

/* The connection resumed: sends its job's reply. */
static enum MHD_Result http_job_reply(struct api_server *srv, struct MHD_Connection *conn,
                                      struct http_conn *hc, const char *method, const char *url)
{
    struct http_job *job = hc->job;
    enum MHD_Result r = http_reply(srv, conn, hc, method, url, job->rc, &job->rep, &job->e);
    hc->job = NULL;
    http_job_free(job);
    return r;
}

struct http_query_collect {
    struct api_query_arg *args;
    size_t n;
};

static enum MHD_Result http_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    struct http_query_collect *q = cls;
    (void)kind;
    if (q->n >= HTTP_MAX_QUERY)
        return MHD_NO;
    q->args[q->n++] = (struct api_query_arg){key, value ? value : ""};
    return MHD_YES;
}

static enum MHD_Result http_complete(struct api_server *srv, struct MHD_Connection *conn,
                                     const char *url, const char *method, struct http_conn *hc)
{
    struct api_ctx *ctx = srv->ctx;
    struct err e = {0};
    if (hc->too_large) {
        err_set(&e, ERR_TOO_LARGE, NULL, "request body larger than %zu bytes",
                ctx->cfg->max_body);
        return http_send_error(srv, conn, hc, method, &e, NULL);
    }
    if (strcmp(method, "OPTIONS") == 0 && ctx->cfg->cors_origin[0])
        return http_preflight(srv, conn, hc);
    struct api_query_arg args[HTTP_MAX_QUERY];
    struct http_query_collect q = {args, 0};
    if (MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, http_collect_arg, &q) >
        HTTP_MAX_QUERY) {
        err_set(&e, ERR_INVALID, NULL, "more than %d query arguments", HTTP_MAX_QUERY);
        return http_send_error(srv, conn, hc, method, &e, NULL);
    }
    if (buf_append(&hc->body, "", 1) < 0) { /* NUL-terminate */
        err_set(&e, ERR_NOMEM, NULL, "out of memory");
        return http_send_error(srv, conn, hc, method, &e, NULL);
    }
    struct api_request req = {
        .method = method,
        .path = url,
        .body = (const char *)hc->body.data,
        .body_len = hc->body.len - 1,
        .query = args,
        .nquery = q.n,
        .authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_AUTHORIZATION),
        .host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
        .origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN),
        .content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                    MHD_HTTP_HEADER_CONTENT_TYPE),
    };
    if (srv->heavy && api_route_heavy(method, url))
        return http_to_pool(srv, conn, hc, &req);
    struct api_reply rep = {0};
    int rc = api_dispatch(ctx, &req, &rep, &e);
    return http_reply(srv, conn, hc, method, url, rc, &rep, &e);
}

static bool http_declared_too_large(struct MHD_Connection *conn, size_t max)
{
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return false;
    char *end;
    unsigned long long v = strtoull(cl, &end, 10);
    return *end == '\0' && v > max;
}

/* --- the head deadline ------------------------------------------------------------- */

static struct http_sock *http_sock_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void http_sock_idle(struct MHD_Connection *conn, struct http_sock *sk, bool head)
{
    if (sk->idle_short == head)
        return;
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              head ? HTTP_HEAD_IDLE_S : HTTP_IDLE_S);
    sk->idle_short = head;
}

/* libmicrohttpd accepted (socket_context NULL: allocates the owned struct http_sock) or
 * is about to close a connection (frees it, before the fd is closed, so the reaper never
 * shuts down a descriptor number that was reused). */
static void http_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                               enum MHD_ConnectionNotificationCode code)
{
    struct api_server *srv = cls;
    struct http_sock *sk = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (!sk)
            return;
        pthread_mutex_lock(&srv->socks_lock);
        if (sk->prev)
            sk->prev->next = sk->next;
        else
            srv->socks = sk->next;
        if (sk->next)
            sk->next->prev = sk->prev;
        pthread_mutex_unlock(&srv->socks_lock);
        free(sk);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    sk = ci ? calloc(1, sizeof *sk) : NULL;
    if (!sk)
        return; /* not watched: the idle timeout still applies */
    sk->fd = ci->connect_fd;
    atomic_store(&sk->head_deadline_ms, clock_mono_ms() + HTTP_HEAD_CAP_S * 1000);
    http_sock_idle(conn, sk, true);
    pthread_mutex_lock(&srv->socks_lock);
    sk->next = srv->socks;
    if (srv->socks)
        srv->socks->prev = sk;
    srv->socks = sk;
    pthread_mutex_unlock(&srv->socks_lock);
    *socket_context = sk;
}

/* A request's head is complete: the normal idle timeout, no deadline. */
static void http_head_done(struct MHD_Connection *conn)
{
    struct http_sock *sk = http_sock_of(conn);
    if (!sk)
        return;
    atomic_store(&sk->head_deadline_ms, 0);
    http_sock_idle(conn, sk, false);
}

/* A request ended; the connection may carry another. Its head must then arrive within
 * the keep-alive idle time, and take no longer than that in total either. */
static void http_head_rearm(struct MHD_Connection *conn)
{
    struct http_sock *sk = http_sock_of(conn);
    if (sk)
        atomic_store(&sk->head_deadline_ms, clock_mono_ms() + HTTP_IDLE_S * 1000);
}

/* Once a second: shuts down every connection past its head deadline. */
static void *http_reaper_main(void *arg)
{
    struct api_server *srv = arg;
    pthread_mutex_lock(&srv->socks_lock);
    while (!srv->reaper_stop) {
        int64_t now = clock_mono_ms();
        for (struct http_sock *sk = srv->socks; sk; sk = sk->next) {
            int64_t due = atomic_load(&sk->head_deadline_ms);
            if (due == 0 || now < due)
                continue;
            /* a compare-exchange: the connection's thread may finish its head just now */
            if (atomic_compare_exchange_strong(&sk->head_deadline_ms, &due, 0)) {
                log_info("http: closing a connection whose request head took over %d s",
                         HTTP_HEAD_CAP_S);
                shutdown(sk->fd, SHUT_RDWR);
            }
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&srv->reaper_wake, &srv->socks_lock, &until);
    }
    pthread_mutex_unlock(&srv->socks_lock);
    return NULL;
}

static int http_reaper_start(struct api_server *srv, struct err *e)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->reaper_wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&srv->socks_lock, NULL);
    int rc = pthread_create(&srv->reaper, NULL, http_reaper_main, srv);
    if (rc != 0) {
        errno = rc;
        return err_errno(e, "http: pthread_create");
    }
    srv->reaper_started = true;
    return 0;
}

static void http_reaper_stop(struct api_server *srv)
{
    if (!srv->reaper_started)
        return;
    pthread_mutex_lock(&srv->socks_lock);
    srv->reaper_stop = true;
    pthread_cond_signal(&srv->reaper_wake);
    pthread_mutex_unlock(&srv->socks_lock);
    pthread_join(srv->reaper, NULL);
    srv->reaper_started = false;
}

/* Frees srv once libmicrohttpd is stopped (or never started) and the reaper joined. */
static void http_server_free(struct api_server *srv)
{
    api_pool_stop(srv->heavy);
    free(srv->tls_cert);
    if (srv->tls_key)
        explicit_bzero(srv->tls_key, strlen(srv->tls_key));
    free(srv->tls_key);
    pthread_cond_destroy(&srv->reaper_wake);
    pthread_mutex_destroy(&srv->socks_lock);
    free(srv);
}

/* --- requests -------------------------------------------------------------------------- */

static enum MHD_Result http_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version,
                                   const char *upload_data, size_t *upload_data_size,
                                   void **con_cls)
{
    struct api_server *srv = cls;
    struct http_conn *hc = *con_cls;
    (void)version;
    if (!hc) {
        hc = calloc(1, sizeof *hc);
        if (!hc)
            return MHD_NO;
        buf_init(&hc->body);
        hc->started_ns = clock_mono_ns();
        *con_cls = hc;
        http_head_done(conn);
        atomic_fetch_add(&srv->ctx->requests, 1);
        if (http_declared_too_large(conn, srv->ctx->cfg->max_body)) {
            hc->too_large = true;
            return http_complete(srv, conn, url, method, hc); /* answer before the body */
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (hc->too_large || hc->body.len + *upload_data_size > srv->ctx->cfg->max_body) {
            /* A body without Content-Length (chunked) grew past the cap. libmicrohttpd
             * cannot answer before the upload ends, so the rest is discarded and answered
             * with 413, up to a bound past which the connection is simply closed. */
            if (!hc->too_large)
                buf_free(&hc->body);
            hc->too_large = true;
            hc->discarded += *upload_data_size;
            *upload_data_size = 0;
            return hc->discarded > HTTP_DISCARD_FACTOR * srv->ctx->cfg->max_body ? MHD_NO
                                                                                 : MHD_YES;
        }
        if (buf_append(&hc->body, upload_data, *upload_data_size) < 0)
            return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (hc->job)
        return hc->job->done ? http_job_reply(srv, conn, hc, method, url) : MHD_YES;
    return http_complete(srv, conn, url, method, hc);
}

static void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    struct http_conn *hc = *con_cls;
    (void)cls;
    (void)toe;
    http_head_rearm(conn);
    if (!hc)
        return;
    http_job_free(hc->job); /* a job is only freed here once it is done (never suspended) */
    buf_free(&hc->body);
    free(hc);
    *con_cls = NULL;
}

static void http_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_warn("http: %s", msg);
}

/* With --tls-cert: the PEM texts into srv (owned there) and the options that make the
 * listener serve them into opts (MHD_OPTION_END-terminated); without, opts stays empty.
 * Returns 0, or -1 with e naming the flag. */
static int http_tls_options(struct api_server *srv, struct MHD_OptionItem opts[3],
                            struct err *e)
{
    opts[0] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    const struct config *cfg = srv->ctx->cfg;
    if (!cfg->tls_cert[0])
        return 0;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return err_set(e, ERR_INVALID, "tls-cert",
                       "--tls-cert: this libmicrohttpd was built without TLS support");
    if (!(srv->tls_cert = config_read_pem(cfg->tls_cert, "tls-cert", e)) ||
        !(srv->tls_key = config_read_pem(cfg->tls_key, "tls-key", e)))
        return -1;
    opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, srv->tls_cert};
    opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, srv->tls_key};
    opts[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return 0;
}

struct api_server *api_server_start(struct api_ctx *ctx, struct err *e)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", ctx->cfg->port);
    int rc = getaddrinfo(ctx->cfg->host, port, &hints, &ai);
    if (rc != 0) {
        err_set(e, ERR_INVALID, "host", "cannot resolve --host %s: %s", ctx->cfg->host,
                gai_strerror(rc));
        return NULL;
    }
    struct api_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        freeaddrinfo(ai);
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    srv->ctx = ctx;
    if (!ctx->cache && !(ctx->cache = api_cache_new())) {
        freeaddrinfo(ai);
        http_server_free(srv);
        return NULL;
    }
    if (!(srv->heavy = api_pool_start(HTTP_HEAVY_WORKERS, HTTP_HEAVY_QUEUE, e))) {
        freeaddrinfo(ai);
        http_server_free(srv);
        return NULL;
    }
    if (http_reaper_start(srv, e) < 0) {
        freeaddrinfo(ai);
        http_server_free(srv);
        return NULL;
    }
    struct MHD_OptionItem tls[3];
    if (http_tls_options(srv, tls, e) < 0) {
        freeaddrinfo(ai);
        http_reaper_stop(srv);
        http_server_free(srv);
        return NULL;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0) |
                     (srv->tls_cert ? MHD_USE_TLS : 0);
    srv->mhd = MHD_start_daemon(
        flags, (uint16_t)ctx->cfg->port, NULL, NULL, http_handle, srv,
        MHD_OPTION_EXTERNAL_LOGGER, http_log, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)ctx->cfg->http_threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S, MHD_OPTION_CONNECTION_LIMIT,
        4096u, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_NOTIFY_COMPLETED,
        http_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, srv,
        MHD_OPTION_UNESCAPE_CALLBACK, http_unescape, srv, MHD_OPTION_ARRAY, tls,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!srv->mhd) {
        err_set(e, ERR_IO, "port",
                "cannot listen on %s:%d (in use, or not an address of this "
                "host)",
                ctx->cfg->host, ctx->cfg->port);
        api_cache_free(ctx->cache);
        ctx->cache = NULL;
        http_reaper_stop(srv);
        http_server_free(srv);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : ctx->cfg->port;
    return srv;
}

bool api_server_tls(const struct api_server *s)
{
    return s->tls_cert != NULL;
}

int api_server_port(const struct api_server *s)
{
    return s->port;
}

void api_server_stop(struct api_server *s)
{
    if (!s)
        return;
    http_reaper_stop(s);
    api_pool_stop(s->heavy); /* every suspended connection is resumed with its reply */
    s->heavy = NULL;
    MHD_stop_daemon(s->mhd); /* closes every connection: the list empties */
    api_cache_free(s->ctx->cache);
    s->ctx->cache = NULL;
    http_server_free(s);
}
