/* Unit tests for api/ without sockets: route matching (ids, 404 for non-integer ids,
 * 405 with the allowed methods), query-string helpers, the single error → HTTP status
 * mapping and error bodies, and static files that cannot leave the web directory
 * (dot segments, symlinks pointing outside). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "tests/unit/test.h"

static struct config test_cfg;
static struct api_ctx test_ctx;
static char web[64], outside[64];

static int test_call(const char *method, const char *path, struct api_reply *rep,
                     struct err *e)
{
    struct api_request req = {.method = method, .path = path};
    memset(rep, 0, sizeof *rep);
    err_clear(e);
    return api_dispatch(&test_ctx, &req, rep, e);
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
    T_CHECK(test_call("GET", "/v1/experiments/abc", &rep, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(strstr(e.msg, "experiment 'abc'") != NULL);
    T_CHECK(test_call("GET", "/v1/runs/0", &rep, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(test_call("GET", "/v1/runs/99999999999999999999", &rep, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(test_call("DELETE", "/v1/experiments", &rep, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_ALLOWED);
    T_CHECK(strstr(e.msg, "GET, POST") != NULL);
    T_CHECK(test_call("PUT", "/v1/runs/7", &rep, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_ALLOWED);
    T_CHECK(test_call("GET", "/v1/experiments/1/2/3", &rep, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_CHECK(test_call("POST", "/elsewhere", &rep, &e) < 0);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
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
    const char *escapes[] = {"/../secret.txt", "/./index.html", "//secret.txt",
                             "/link/secret.txt", "/link", "/sub/../index.html",
                             "/..\\secret.txt", "/missing.css"};
    for (size_t i = 0; i < sizeof escapes / sizeof *escapes; i++) {
        T_CHECK_MSG(test_call("GET", escapes[i], &rep, &e) < 0, "%s served", escapes[i]);
        T_EQ_INT(e.code, ERR_NOT_FOUND);
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
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", web, outside);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup failed\n");
    return test_end();
}
