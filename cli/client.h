/* client: every HTTP exchange of the CLI with ddpbenchd, through one libcurl easy handle.
 *
 * Decision: one struct client owns one easy handle, reset and reused for each request so
 * the connection to the daemon stays open across the calls of a command; the response
 * lands in a struct buf the client owns (valid until the next request). Failures come
 * back as struct err with the API's own code, message and field for error replies, and
 * the HTTP status stays in `status`, which is what the exit status is decided from
 * (cli_exit_for_http): 0 = nothing came back (connect error, timeout). */
#ifndef DDPB_CLI_CLIENT_H
#define DDPB_CLI_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "common/err.h"

#define CLIENT_MAX_BODY ((size_t)512 << 20)

/* Exit statuses scripts rely on (also in `ddpbench --help` and cli/main.c). */
enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILED = 1, /* the experiment/run ended failed, cancelled, interrupted */
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_REFUSED = 3,     /* the daemon answered 4xx */
    CLI_EXIT_UNREACHABLE = 4, /* no answer, a 5xx, or a timeout */
};

struct client {
    void *curl;      /* owned CURL *: kept opaque so users need not include curl.h */
    char url[512];   /* base URL, no trailing '/' */
    char auth[1024]; /* "Authorization: Bearer ..." or "" */
    char ca[4096];   /* PEM CA file an https:// daemon is verified against; "" = system */
    long timeout_ms;
    long status; /* HTTP status of the last request; 0 when none came back */
    char content_type[128];
    struct buf body; /* owned: the last response body, NUL-terminated (len excludes it) */
};

/* url and token (NULL = none) are copied. Returns 0 or -1 (ERR_INVALID: URL too long;
 * ERR_INTERNAL: libcurl would not start). */
int client_init(struct client *c, const char *url, const char *token, double timeout_s,
                struct err *e);
void client_cleanup(struct client *c);
/* Verifies an https:// daemon against the PEM CA (or certificate) at path (copied) instead
 * of the system's store. Returns 0 or -1 (ERR_INVALID naming --ca: unreadable, too long). */
int client_set_ca(struct client *c, const char *path, struct err *e);

/* method: "GET", "POST" or "DELETE"; body (len bytes, may be NULL) is sent as JSON. The
 * token goes with every method but GET. Returns 0 on a 2xx reply (body in c->body), else
 * -1 with e: the API's error for a 4xx/5xx reply, ERR_UNAVAILABLE or ERR_TIMEOUT when no
 * reply came. */
int client_request(struct client *c, const char *method, const char *path, const void *body,
                   size_t len, struct err *e);
/* client_request, then the body parsed as JSON. Returns an owned value or NULL with e. */
json_t *client_json(struct client *c, const char *method, const char *path, struct err *e);

/* Streamed bytes, as they arrive. Return 0 to go on, non-zero to stop the stream. */
typedef int (*client_data_fn)(void *arg, const char *data, size_t len);

enum client_stream_end {
    CLIENT_STREAM_STOPPED, /* on_data asked to stop */
    CLIENT_STREAM_IDLE,    /* no byte for idle_ms */
    CLIENT_STREAM_CLOSED,  /* the server ended the response */
};

/* GETs path as a text/event-stream and hands each chunk of a 200 reply to on_data. There
 * is no overall timeout; the stream ends as *how says. Returns 0, or -1 with e (error
 * reply, or the connection failed or broke). */
int client_stream(struct client *c, const char *path, int idle_ms, client_data_fn on_data,
                  void *arg, enum client_stream_end *how, struct err *e);

/* Appends "name=value" (value URL-encoded) to the path+query in q, after "?" or "&".
 * value NULL: nothing. Returns 0 or -1 (ERR_NOMEM). */
int client_query_add(struct buf *q, const char *name, const char *value, struct err *e);

/* The exit status for a request that failed with this HTTP status (0 = no reply). */
int cli_exit_for_http(long status);
/* The exit status for a finished experiment's or run's status string. */
int cli_exit_for_outcome(const char *status);

#endif
