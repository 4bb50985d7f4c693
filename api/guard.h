/* guard: what every request must pass before it reaches a route: the Host it names, the
 * Origin of a mutation, the media type of a body, and the bearer token.
 *
 * Decision: ddpbenchd serves a browser dashboard from the same port as its API, so a web
 * page a researcher opens elsewhere can send it requests. Three checks close the doors a
 * browser opens without CORS: (1) Host must be an address literal, "localhost", this
 * node's name, the bind name or an --allow-host name, because a DNS-rebinding page
 * reaches us under its own domain name (an address literal cannot be rebound); (2) a
 * mutation that carries an Origin must come from this daemon's own origin or the
 * --cors-origin one, because browsers send "simple" cross-site POSTs without a
 * preflight; (3) a body is parsed only when it says application/json (415 otherwise),
 * which no simple cross-site request can say. Clients that are not browsers (curl
 * --json, the CLI, scripts) pass all three untouched. The token comes last, so a
 * refusal never tells a stranger whether a token is set.
 *
 * Roles (issue 31): the admin token (--token-file) may do anything; the read token
 * (--read-token) reads the API and /metrics, which are otherwise open; /healthz and the
 * dashboard's static files are always open. With --cluster-key the cluster endpoints
 * (/v1/cluster/...) skip the token here: h_cluster.c checks the node's own identity.
 *
 * Ownership: everything is borrowed; the functions only read. */
#ifndef DDPB_API_GUARD_H
#define DDPB_API_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "daemon/config.h"

struct api_request;

/* Host header value (with or without ":port"; NULL when absent) allowed for c? */
bool guard_host_allowed(const struct config *c, const char *host);
/* The bearer token of the request's Authorization header (the scheme case-insensitive,
 * RFC 7235 §2.1), borrowed from it, or NULL. */
const char *guard_bearer(const struct api_request *req);
/* Runs the checks in order; ERR_FORBIDDEN (403), ERR_MEDIA_TYPE (415) or
 * ERR_UNAUTHORIZED (401) naming what to change. */
int guard_check(const struct config *c, const struct api_request *req, struct err *e);

#endif
