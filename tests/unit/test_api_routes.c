/* Unit tests for api/ without sockets: route matching (ids, 404 for non-integer ids,
 * 405 with the allowed methods and their Allow header), query-string helpers, the single
 * error → HTTP status mapping and error bodies, static files that cannot leave the web
 * directory (dot segments, symlinks pointing outside), and the request guard (Host,
 * Origin, Content-Type, bearer token: api/guard.h). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/guard.h"
#include "tests/unit/test.h"

static struct config test_cfg;
static struct api_ctx test_ctx;
static char web[64], outside[64];

static int test_call(const char *method, const char *path, struct api_reply *rep, struct err *e)
{
    struct api_request req = {.method = method, .path = path};
    memset(rep, 0, sizeof *rep);
    err_clear(e);
    return api_dispatch(&test_ctx, &req, rep, e);
}

/* A request the router must refuse with code; rep and e keep the refusal for further
 * checks. */
static void test_refused(const char *method, const char *path, enum err_code code,
                         struct api_reply *rep, struct err *e)
{
    T_CHECK_MSG(test_call(method, path, rep, e) < 0, "%s %s was served", method, path);
    T_CHECK_MSG(e->code == code, "%s %s: code %d, want %d", method, path, (int)e->code,
                (int)code);
}

static void test_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_routes_errors(void)
{
    struct api_reply rep;
    struct err e;
    test_refused("GET", "/v1/experiments/abc", ERR_NOT_FOUND, &rep, &e);
    T_CHECK(strstr(e.msg, "experiment 'abc'") != NULL);
    test_refused("GET", "/v1/runs/0", ERR_NOT_FOUND, &rep, &e);
    test_refused("GET", "/v1/runs/99999999999999999999", ERR_NOT_FOUND, &rep, &e);
    test_refused("DELETE", "/v1/experiments", ERR_NOT_ALLOWED, &rep, &e);
    T_CHECK(strstr(e.msg, "GET, POST") != NULL);
    T_EQ_STR(rep.allow, "GET, POST");
    test_refused("PUT", "/v1/runs/7", ERR_NOT_ALLOWED, &rep, &e);
    test_refused("GET", "/v1/experiments/1/2/3", ERR_NOT_FOUND, &rep, &e);
    test_refused("POST", "/elsewhere", ERR_NOT_FOUND, &rep, &e);
}

/* A request as http.c builds it: method, path, headers, body. */
static int test_guarded(const char *method, const char *host, const char *origin,
                        const char *ctype, const char *body, const char *auth, struct err *e)
{
    struct api_request req = {.method = method,
                              .path = "/v1/experiments",
                              .host = host,
                              .origin = origin,
                              .content_type = ctype,
                              .body = body,
                              .body_len = body ? strlen(body) : 0,
                              .authorization = auth};
    err_clear(e);
    return guard_check(&test_cfg, &req, e);
}

static void test_guard_host(void)
{
    snprintf(test_cfg.node, sizeof test_cfg.node, "node7");
    snprintf(test_cfg.host, sizeof test_cfg.host, "127.0.0.1");
    T_CHECK(guard_host_allowed(&test_cfg, NULL)); /* HTTP/1.0 */
    T_CHECK(guard_host_allowed(&test_cfg, "127.0.0.1:7480"));
    T_CHECK(guard_host_allowed(&test_cfg, "10.1.2.3")); /* any literal: not rebindable */
    T_CHECK(guard_host_allowed(&test_cfg, "[::1]:7480"));
    T_CHECK(guard_host_allowed(&test_cfg, "LOCALHOST:1"));
    T_CHECK(guard_host_allowed(&test_cfg, "node7.:80")); /* trailing dot, any case */
    T_CHECK(guard_host_allowed(&test_cfg, "Node7"));
    T_CHECK(!guard_host_allowed(&test_cfg, "evil.example:7480"));
    T_CHECK(!guard_host_allowed(&test_cfg, "127.0.0.1.evil.example"));
    T_CHECK(!guard_host_allowed(&test_cfg, ""));
    T_CHECK(!guard_host_allowed(&test_cfg, "[::1"));
    snprintf(test_cfg.allow_hosts, sizeof test_cfg.allow_hosts, "lab.example,gpu-01");
    T_CHECK(guard_host_allowed(&test_cfg, "gpu-01:7480"));
    T_CHECK(guard_host_allowed(&test_cfg, "lab.example"));
    T_CHECK(!guard_host_allowed(&test_cfg, "lab"));
    T_CHECK(!guard_host_allowed(&test_cfg, "gpu-0"));
    snprintf(test_cfg.allow_hosts, sizeof test_cfg.allow_hosts, "*");
    T_CHECK(guard_host_allowed(&test_cfg, "anything.example"));
    test_cfg.allow_hosts[0] = '\0';
    struct err e;
    T_CHECK(test_guarded("GET", "rebound.example:7480", NULL, NULL, NULL, NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_FORBIDDEN);
    T_EQ_STR(e.field, "Host");
    T_EQ_INT(api_http_status(e.code), 403);
}

static void test_guard_origin_and_media_type(void)
{
    struct err e;
    const char *json = "application/json";
    /* a cross-site "simple" POST: refused before its body is looked at */
    T_CHECK(test_guarded("POST", "127.0.0.1:7480", "http://evil.example", "text/plain", "{}",
                         NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_FORBIDDEN);
    T_EQ_STR(e.field, "Origin");
    T_CHECK(test_guarded("DELETE", "127.0.0.1:7480", "null", NULL, NULL, NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_FORBIDDEN);
    /* reads are not mutations; the dashboard's own origin may mutate */
    T_OK(test_guarded("GET", "127.0.0.1:7480", "http://evil.example", NULL, NULL, NULL, &e));
    T_OK(test_guarded("POST", "127.0.0.1:7480", "http://127.0.0.1:7480", json, "{}", NULL, &e));
    T_OK(test_guarded("POST", "node7:7480", "https://NODE7:7480", json, "{}", NULL, &e));
    /* a configured CORS origin may mutate too */
    snprintf(test_cfg.cors_origin, sizeof test_cfg.cors_origin, "http://lab.example:8080");
    T_OK(test_guarded("POST", "127.0.0.1:7480", "http://lab.example:8080", json, "{}", NULL,
                      &e));
    T_CHECK(test_guarded("POST", "127.0.0.1:7480", "http://lab.example:9", json, "{}", NULL,
                         &e) < 0);
    test_cfg.cors_origin[0] = '\0';
    /* bodies only as JSON; a bodiless POST (cancel) needs no type */
    T_CHECK(test_guarded("POST", "127.0.0.1", NULL, "application/x-www-form-urlencoded", "{}",
                         NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_MEDIA_TYPE);
    T_EQ_INT(api_http_status(e.code), 415);
    T_CHECK(strstr(e.msg, "application/x-www-form-urlencoded") != NULL);
    T_CHECK(test_guarded("POST", "127.0.0.1", NULL, NULL, "{}", NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_MEDIA_TYPE);
    T_CHECK(test_guarded("POST", "127.0.0.1", NULL, "application/jsonx", "{}", NULL, &e) < 0);
    T_OK(test_guarded("POST", "127.0.0.1", NULL, "Application/JSON; charset=utf-8", "{}", NULL,
                      &e));
    T_OK(test_guarded("POST", "127.0.0.1", NULL, NULL, NULL, NULL, &e));
}

static void test_guard_token(void)
{
    struct err e;
    const char *json = "application/json";
    snprintf(test_cfg.token, sizeof test_cfg.token, "s3cret-token");
    T_CHECK(test_guarded("POST", NULL, NULL, json, "{}", NULL, &e) < 0);
    T_EQ_INT(e.code, ERR_UNAUTHORIZED);
    T_CHECK(test_guarded("POST", NULL, NULL, json, "{}", "Bearer s3cret-toke", &e) < 0);
    T_CHECK(test_guarded("POST", NULL, NULL, json, "{}", "Bearer s3cret-token2", &e) < 0);
    T_CHECK(test_guarded("POST", NULL, NULL, json, "{}", "Basic s3cret-token", &e) < 0);
    T_OK(test_guarded("POST", NULL, NULL, json, "{}", "Bearer s3cret-token", &e));
    T_OK(test_guarded("DELETE", NULL, NULL, NULL, NULL, "bearer s3cret-token",
                      &e)); /* RFC 7235 */
    T_OK(test_guarded("POST", NULL, NULL, json, "{}", "BEARER  s3cret-token", &e));
    T_OK(test_guarded("GET", NULL, NULL, NULL, NULL, NULL, &e)); /* reads stay open */
    /* the foreign Host is refused before the token is looked at */
    T_CHECK(test_guarded("POST", "evil.example", NULL, json, "{}", "Bearer s3cret-token", &e) <
            0);
    T_EQ_INT(e.code, ERR_FORBIDDEN);
    test_cfg.token[0] = '\0';
}

/* GET path with the Authorization header auth (NULL: none). */
static int test_read(const char *path, const char *auth, struct err *e)
{
    struct api_request req = {.method = "GET", .path = path, .authorization = auth};
    err_clear(e);
    return guard_check(&test_cfg, &req, e);
}

/* --read-token: every read of data (the API, /metrics) needs it or the admin token;
 * /healthz and the dashboard's files stay open; a read token mutates nothing. */
static void test_guard_read_token(void)
{
    struct err e;
    snprintf(test_cfg.token, sizeof test_cfg.token, "admin-token-0123456");
    snprintf(test_cfg.read_token, sizeof test_cfg.read_token, "read-token-01234567");
    static const char *const data[] = {"/v1/experiments", "/v1/nodes", "/metrics",
                                       "/v1/runs/1/trace", "/v1/system"};
    for (size_t i = 0; i < sizeof data / sizeof *data; i++) {
        T_CHECK_MSG(test_read(data[i], NULL, &e) < 0 && e.code == ERR_UNAUTHORIZED, "%s",
                    data[i]);
        T_CHECK(test_read(data[i], "Bearer read-token-0123456", &e) < 0);
        T_OK(test_read(data[i], "Bearer read-token-01234567", &e));
        T_OK(test_read(data[i], "Bearer admin-token-0123456", &e));
    }
    T_OK(test_read("/healthz", NULL, &e));
    T_OK(test_read("/index.html", NULL, &e));
    T_OK(test_read("/js/app.js", NULL, &e));
    T_CHECK(test_guarded("POST", NULL, NULL, "application/json", "{}",
                         "Bearer read-token-01234567", &e) < 0);
    T_EQ_INT(e.code, ERR_UNAUTHORIZED);
    /* without --read-token reads stay open */
    test_cfg.read_token[0] = '\0';
    T_OK(test_read("/v1/nodes", NULL, &e));
    test_cfg.token[0] = '\0';
}

/* --cluster-key: the cluster's endpoints leave the token to h_cluster (the node's own
 * identity); every other mutation still needs the admin token. */
static void test_guard_cluster_key(void)
{
    struct err e;
    snprintf(test_cfg.token, sizeof test_cfg.token, "admin-token-0123456");
    struct api_request sync = {.method = "POST",
                               .path = "/v1/cluster/sync",
                               .content_type = "application/json",
                               .body = "{}",
                               .body_len = 2};
    T_CHECK(guard_check(&test_cfg, &sync, &e) < 0); /* no key: the admin token, as before */
    T_EQ_INT(e.code, ERR_UNAUTHORIZED);
    snprintf(test_cfg.cluster_key, sizeof test_cfg.cluster_key, "cluster-key-0123456");
    T_OK(guard_check(&test_cfg, &sync, &e));
    T_CHECK(test_guarded("POST", NULL, NULL, "application/json", "{}", NULL, &e) < 0);
    test_cfg.cluster_key[0] = '\0';
    test_cfg.token[0] = '\0';
}

static void test_routes_status_mapping(void)
{
    T_EQ_INT(api_http_status(ERR_INVALID), 400);
    T_EQ_INT(api_http_status(ERR_UNAUTHORIZED), 401);
    T_EQ_INT(api_http_status(ERR_NOT_FOUND), 404);
    T_EQ_INT(api_http_status(ERR_NOT_ALLOWED), 405);
    T_EQ_INT(api_http_status(ERR_CONFLICT), 409);
    T_EQ_INT(api_http_status(ERR_TOO_LARGE), 413);
    T_EQ_INT(api_http_status(ERR_UNAVAILABLE), 503);
    T_EQ_INT(api_http_status(ERR_INTERNAL), 500);
    T_EQ_INT(api_http_status(ERR_IO), 500);
    struct err e;
    err_set(&e, ERR_INVALID, "world_size", "must be positive");
    json_t *j = api_error_json(&e);
    json_t *inner = json_object_get(j, "error");
    T_EQ_STR(json_string_value(json_object_get(inner, "code")), "invalid");
    T_EQ_STR(json_string_value(json_object_get(inner, "field")), "world_size");
    T_EQ_STR(json_string_value(json_object_get(inner, "message")), "must be positive");
    json_decref(j);
    /* what the client sent is quoted in messages: invalid UTF-8 must not lose the body */
    err_set(&e, ERR_NOT_FOUND, "x\xff", "no resource GET /v1/\xff\xc3.\xed\xa0\x80 \xc3\xa9");
    j = api_error_json(&e);
    T_CHECK(j != NULL);
    inner = json_object_get(j, "error");
    T_EQ_STR(json_string_value(json_object_get(inner, "message")),
             "no resource GET /v1/??.??? \xc3\xa9");
    T_EQ_STR(json_string_value(json_object_get(inner, "field")), "x?");
    json_decref(j);
    err_set(&e, ERR_NOT_FOUND, NULL, "gone");
    j = api_error_json(&e);
    T_CHECK(json_object_get(json_object_get(j, "error"), "field") == NULL);
    json_decref(j);
}

static void test_routes_query_helpers(void)
{
    struct api_query_arg args[] = {{"limit", "20"}, {"status", "failed"}, {"bad", "x"}};
    struct api_request req = {.method = "GET", .path = "/", .query = args, .nquery = 3};
    struct err e;
    int64_t v;
    T_EQ_STR(api_query_get(&req, "status"), "failed");
    T_CHECK(api_query_get(&req, "nope") == NULL);
    T_OK(api_query_int(&req, "limit", 1, 100, 5, &v, &e));
    T_EQ_INT(v, 20);
    T_OK(api_query_int(&req, "offset", 0, 100, 7, &v, &e));
    T_EQ_INT(v, 7);
    T_CHECK(api_query_int(&req, "limit", 1, 10, 5, &v, &e) < 0);
    T_EQ_STR(e.field, "limit");
    T_CHECK(api_query_int(&req, "status", 1, 10, 5, &v, &e) < 0);
    static const char *const allowed[] = {"limit", "status", NULL};
    T_CHECK(api_query_check(&req, allowed, &e) < 0);
    T_EQ_STR(e.field, "bad");
    req.nquery = 2;
    T_OK(api_query_check(&req, allowed, &e));

    /* id lists (?with=, ?fit=): appended after what is there, repeats dropped, each id as
     * a path takes it; anything else refused naming the argument */
    int64_t ids[4] = {9};
    size_t n = 1;
    struct api_query_arg list[] = {{"with", "3,7,3"}};
    struct api_request lr = {.method = "GET", .path = "/", .query = list, .nquery = 1};
    T_OK(api_query_ids(&lr, "with", ids, 4, &n, &e));
    T_EQ_INT(n, 3);
    T_EQ_INT(ids[1], 3);
    T_EQ_INT(ids[2], 7);
    n = 0;
    T_OK(api_query_ids(&lr, "absent", ids, 4, &n, &e));
    T_EQ_INT(n, 0);
    /* the last: a repeat counts against the cap, as the schema's maxItems counts it */
    static const char *const bad[] = {
        "x", "1,", ",1", "0", "1,,2", "-3", "1234567890123456789", "1,2,3,4,5", "1,2,1,2,1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        list[0].value = bad[i];
        n = 0;
        T_CHECK_MSG(api_query_ids(&lr, "with", ids, 4, &n, &e) < 0 && e.code == ERR_INVALID &&
                        strcmp(e.field, "with") == 0,
                    "'%s' accepted", bad[i]);
    }
}

static void test_routes_static_files(void)
{
    struct api_reply rep;
    struct err e;
    T_OK(test_call("GET", "/", &rep, &e));
    T_CHECK(rep.body && strstr(rep.body, "dashboard") != NULL);
    T_EQ_STR(rep.content_type, "text/html; charset=utf-8");
    free(rep.body);
    T_OK(test_call("GET", "/app.js", &rep, &e));
    T_EQ_STR(rep.content_type, "text/javascript; charset=utf-8");
    free(rep.body);
    const char *escapes[] = {"/../secret.txt",   "/./index.html", "//secret.txt",
                             "/link/secret.txt", "/link",         "/sub/../index.html",
                             "/..\\secret.txt",  "/missing.css"};
    for (size_t i = 0; i < sizeof escapes / sizeof *escapes; i++) {
        test_refused("GET", escapes[i], ERR_NOT_FOUND, &rep, &e);
        T_CHECK(rep.body == NULL);
    }
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    snprintf(web, sizeof web, "/tmp/ddpb-web-XXXXXX");
    snprintf(outside, sizeof outside, "/tmp/ddpb-out-XXXXXX");
    if (!mkdtemp(web) || !mkdtemp(outside))
        return 1;
    char p[256];
    snprintf(p, sizeof p, "%s/index.html", web);
    test_write(p, "<p>dashboard</p>");
    snprintf(p, sizeof p, "%s/app.js", web);
    test_write(p, "1;");
    snprintf(p, sizeof p, "%s/secret.txt", outside);
    test_write(p, "secret");
    snprintf(p, sizeof p, "%s/link", web);
    if (symlink(outside, p) != 0)
        return 1;
    snprintf(test_cfg.web_dir, sizeof test_cfg.web_dir, "%s", web);
    test_ctx.cfg = &test_cfg;
    TEST_RUN(test_routes_errors);
    TEST_RUN(test_routes_status_mapping);
    TEST_RUN(test_routes_query_helpers);
    TEST_RUN(test_routes_static_files);
    TEST_RUN(test_guard_host);
    TEST_RUN(test_guard_origin_and_media_type);
    TEST_RUN(test_guard_token);
    TEST_RUN(test_guard_read_token);
    TEST_RUN(test_guard_cluster_key);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", web, outside);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup failed\n");
    return test_end();
}
