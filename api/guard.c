/* guard: the request admission checks of guard.h (Host, Origin, Content-Type, token).
 *
 * Decision: names compare case-insensitively and without a trailing dot (DNS does), and
 * a port in Host or Origin is ignored: the daemon's port can be any (--port 0) and the
 * rebinding defence rests on the name, not the port. */
#include "api/guard.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "daemon/credential.h"

#define GUARD_NAME_MAX 256

/* The host part of "name", "name:port", "[v6]" or "[v6]:port", lowercase, without a
 * trailing dot; false when it does not fit. */
static bool guard_host_part(const char *hp, char *out, size_t cap)
{
    size_t n;
    if (hp[0] == '[') {
        const char *end = strchr(hp, ']');
        if (!end)
            return false;
        hp++;
        n = (size_t)(end - hp);
    } else {
        const char *colon = strchr(hp, ':');
        n = colon ? (size_t)(colon - hp) : strlen(hp);
    }
    if (n == 0 || n >= cap)
        return false;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)(hp[i] >= 'A' && hp[i] <= 'Z' ? hp[i] - 'A' + 'a' : hp[i]);
    if (out[n - 1] == '.')
        n--;
    out[n] = '\0';
    return n > 0;
}

static bool guard_is_address(const char *name)
{
    unsigned char a[16];
    return inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1;
}

/* name in the comma-separated list (or the list is "*")? */
static bool guard_in_list(const char *list, const char *name)
{
    if (strcmp(list, "*") == 0)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncasecmp(p, name, n) == 0)
            return true;
        p += len + (comma ? 1 : 0);
    }
    return false;
}

bool guard_host_allowed(const struct config *c, const char *host)
{
    char name[GUARD_NAME_MAX];
    if (!host) /* HTTP/1.0 clients send none; browsers always do */
        return true;
    if (!guard_host_part(host, name, sizeof name))
        return false;
    return guard_is_address(name) || strcmp(name, "localhost") == 0 ||
           strcasecmp(name, c->node) == 0 || strcasecmp(name, c->host) == 0 ||
           guard_in_list(c->allow_hosts, name);
}

static bool guard_is_mutation(const char *method)
{
    return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
           strcmp(method, "OPTIONS") != 0;
}

/* Origin "scheme://host[:port]" is this daemon's own (the Host the request named) or the
 * configured CORS origin? */
static bool guard_origin_allowed(const struct config *c, const char *origin, const char *host)
{
    if (c->cors_origin[0] &&
        (strcmp(c->cors_origin, "*") == 0 || strcasecmp(c->cors_origin, origin) == 0))
        return true;
    const char *sep = strstr(origin, "://");
    char want[GUARD_NAME_MAX], got[GUARD_NAME_MAX];
    if (!sep || !host || !guard_host_part(host, want, sizeof want) ||
        !guard_host_part(sep + 3, got, sizeof got))
        return false;
    return strcmp(want, got) == 0;
}

/* "application/json" with optional parameters ("; charset=utf-8")? */
static bool guard_is_json(const char *ctype)
{
    static const char json[] = "application/json";
    if (!ctype)
        return false;
    while (*ctype == ' ')
        ctype++;
    size_t n = sizeof json - 1;
    return strncasecmp(ctype, json, n) == 0 &&
           (ctype[n] == '\0' || ctype[n] == ';' || ctype[n] == ' ');
}

const char *guard_bearer(const struct api_request *req)
{
    const char *h = req->authorization;
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return h;
}

/* The cluster's own endpoints: with --cluster-key, h_cluster checks the node's identity
 * there (daemon/credential.h), and the admin token grants nothing. */
static bool guard_is_cluster_link(const struct config *c, const char *path)
{
    return c->cluster_key[0] && strncmp(path, "/v1/cluster/", 12) == 0;
}

/* What --read-token guards: the API and /metrics; /healthz (probes, load balancers) and
 * the dashboard's static files (the same files as the source tree, no data) stay open. */
static bool guard_is_data_read(const char *path)
{
    return strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0 ||
           strcmp(path, "/metrics") == 0;
}

/* Every mutation needs the admin token when one is configured; with --read-token, a read
 * of data needs it or the admin token. */
static int guard_authorize(const struct config *c, const struct api_request *req, struct err *e)
{
    const char *t = guard_bearer(req);
    bool admin = c->token[0] && t && credential_equal(t, c->token);
    if (guard_is_mutation(req->method)) {
        if (!c->token[0] || admin || guard_is_cluster_link(c, req->path))
            return 0;
        return err_set(e, ERR_UNAUTHORIZED, NULL,
                       "%s needs 'Authorization: Bearer <token>' (the "
                       "daemon was started with a token)",
                       req->method);
    }
    if (!c->read_token[0] || admin || !guard_is_data_read(req->path) ||
        (t && credential_equal(t, c->read_token)))
        return 0;
    return err_set(e, ERR_UNAUTHORIZED, NULL,
                   "%s %s needs 'Authorization: Bearer <token>' (the daemon was started "
                   "with --read-token: the read token or the admin token)",
                   req->method, req->path);
}

int guard_check(const struct config *c, const struct api_request *req, struct err *e)
{
    if (!guard_host_allowed(c, req->host))
        return err_set(e, ERR_FORBIDDEN, "Host",
                       "Host '%s' is not a name of this daemon: use "
                       "its address, localhost or %s, or start ddpbenchd with --allow-host "
                       "NAME",
                       req->host, c->node);
    if (guard_is_mutation(req->method) && req->origin &&
        !guard_origin_allowed(c, req->origin, req->host))
        return err_set(e, ERR_FORBIDDEN, "Origin",
                       "cross-origin %s from %s refused: start "
                       "ddpbenchd with --cors-origin %s to allow that page",
                       req->method, req->origin, req->origin);
    if (req->body_len > 0 && !guard_is_json(req->content_type))
        return err_set(e, ERR_MEDIA_TYPE, "Content-Type",
                       "a request body must be "
                       "'Content-Type: application/json', got '%s' (curl: --json @spec.json)",
                       req->content_type ? req->content_type : "none");
    return guard_authorize(c, req, e);
}
