/* request: what handlers use to read a request and fill a reply: the query-string
 * helpers, ids as a path or query names them, and the JSON reply helper (api.h).
 *
 * Decision: apart from routes.c, which calls the handlers: the handlers call these and
 * routes.c calls the handlers, so had they stayed in routes.c each handler file and the
 * route table would be a loop. routes.c uses api_parse_id from here for path ids, so an
 * id means the same in a path and in a query. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

bool api_parse_id(const char *s, size_t len, int64_t *out)
{
    if (len == 0 || len > 18)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return v > 0;
}

const char *api_query_get(const struct api_request *req, const char *key)
{
    for (size_t i = 0; i < req->nquery; i++)
        if (strcmp(req->query[i].key, key) == 0)
            return req->query[i].value;
    return NULL;
}

int api_query_check(const struct api_request *req, const char *const *allowed, struct err *e)
{
    for (size_t i = 0; i < req->nquery; i++) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, req->query[i].key) == 0;
        if (!ok)
            return err_set(e, ERR_INVALID, req->query[i].key, "unknown query argument '%s'",
                           req->query[i].key);
    }
    return 0;
}

int api_query_int(const struct api_request *req, const char *key, int64_t lo, int64_t hi,
                  int64_t def, int64_t *out, struct err *e)
{
    const char *s = api_query_get(req, key);
    if (!s) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return err_set(e, ERR_INVALID, key, "%s must be an integer from %lld to %lld, got '%s'",
                       key, (long long)lo, (long long)hi, s);
    *out = v;
    return 0;
}

int api_query_ids(const struct api_request *req, const char *key, int64_t *ids, size_t cap,
                  size_t *n, struct err *e)
{
    const char *s = api_query_get(req, key);
    size_t have = *n, listed = *n; /* what is there counts against cap, as listed ids do */
    while (s && *s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        int64_t v;
        if (!api_parse_id(s, len, &v))
            return err_set(e, ERR_INVALID, key,
                           "%s: must be ids (1 to 18 digits) separated by commas (\"3,7\")",
                           key);
        bool dup = false;
        for (size_t i = 0; i < have; i++)
            dup = dup || ids[i] == v;
        /* the cap counts the ids listed, a repeat too: the schema's maxItems is the list's
         * (the path's id beside ?with=, the list's own length for ?fit=) */
        if (++listed > cap || (!dup && have == cap))
            return err_set(e, ERR_INVALID, key, "%s: at most %zu ids", key, cap);
        if (!dup)
            ids[have++] = v;
        if (comma && !comma[1])
            return err_set(e, ERR_INVALID, key, "%s: a trailing comma names no id", key);
        s = comma ? comma + 1 : s + len;
    }
    *n = have;
    return 0;
}

int api_reply_json_text(struct api_reply *rep, char *text, struct err *e)
{
    size_t len = strlen(text);
    char *body = realloc(text, len + 2);
    if (!body) {
        free(text);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    body[len] = '\n';
    body[len + 1] = '\0';
    rep->body = body;
    rep->body_len = len + 1;
    rep->content_type = "application/json";
    return 0;
}
