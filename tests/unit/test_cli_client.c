/* Unit tests for cli/client against a small fake HTTP server on a loopback port (one
 * thread, one canned reply per path): a reply's body and status, the API's error body
 * mapped into struct err (code, message, field) and the exit status, a 5xx without an
 * error body, the bearer token sent with mutations only, a request body sent as is, a
 * daemon that does not answer in time (timeout, not a hang), nothing listening, and
 * event streams ended by the callback, by silence and by the server. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/client.h"
#include "common/clock.h"
#include "common/net.h"
#include "tests/unit/test.h"

struct fake {
    int lfd, port;
    atomic_bool stop;
    pthread_t th;
    pthread_mutex_t mu;
    char last[8192]; /* the last request, headers and body */
    size_t last_len;
};

static void fake_send(int fd, const char *s)
{
    struct err e;
    net_send_all(fd, s, strlen(s), clock_mono_ms() + 2000, NULL, &e);
}

/* Reads a request (headers, then Content-Length bytes) into f->last. */
static void fake_read_request(struct fake *f, int fd)
{
    char req[8192];
    size_t n = 0;
    int64_t deadline = clock_mono_ms() + 3000;
    char *end = NULL;
    size_t want = 0;
    while (n < sizeof req - 1 && clock_mono_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t k = recv(fd, req + n, sizeof req - 1 - n, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
        req[n] = '\0';
        if (!end && (end = strstr(req, "\r\n\r\n"))) {
            const char *cl = strcasestr(req, "content-length:");
            want = (size_t)(end + 4 - req) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
        }
        if (end && n >= want)
            break;
    }
    pthread_mutex_lock(&f->mu);
    memcpy(f->last, req, n);
    f->last[n] = '\0';
    f->last_len = n;
    pthread_mutex_unlock(&f->mu);
}

static void fake_wait_close(int fd, int ms)
{
    char c;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) > 0)
        (void)!recv(fd, &c, 1, 0);
}

#define JSON_HEAD(status)                                                                      \
    "HTTP/1.1 " status "\r\nContent-Type: application/json\r\n"                                \
    "Connection: close\r\n"
#define SSE_HEAD                                                                               \
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"

static void fake_reply(const char *req, int fd)
{
    char resp[1024];
    const char *body = NULL, *head = NULL;
    if (strstr(req, " /ok") || strstr(req, " /v1/experiments?")) {
        head = JSON_HEAD("200 OK");
        body = "{\"a\": 1}";
    } else if (strstr(req, " /created")) {
        head = JSON_HEAD("201 Created");
        body = "{\"id\": 42}";
    } else if (strstr(req, " /err400")) {
        head = JSON_HEAD("400 Bad Request");
        body = "{\"error\": {\"code\": \"invalid\", \"message\": \"world_size must be >= 1\", "
               "\"field\": \"world_size\"}}";
    } else if (strstr(req, " /err503")) {
        head = JSON_HEAD("503 Service Unavailable");
        body = "{\"error\": {\"code\": \"unavailable\", \"message\": \"shutting down\"}}";
    } else if (strstr(req, " /err500-plain")) {
        head = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
               "Connection: close\r\n";
        body = "oops";
    } else if (strstr(req, " /slow")) {
        fake_wait_close(fd, 3000); /* answers nothing until the client gives up */
        return;
    } else if (strstr(req, " /stream-idle")) {
        fake_send(fd, SSE_HEAD "data: a\n\ndata: b\n\n");
        fake_wait_close(fd, 8000);
        return;
    } else if (strstr(req, " /stream-close")) {
        fake_send(fd, SSE_HEAD "data: only\n\n");
        return;
    } else {
        head = JSON_HEAD("404 Not Found");
        body = "{\"error\": {\"code\": \"not_found\", \"message\": \"no such path\"}}";
    }
    snprintf(resp, sizeof resp, "%sContent-Length: %zu\r\n\r\n%s", head, strlen(body), body);
    fake_send(fd, resp);
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    while (!atomic_load(&f->stop)) {
        struct err e;
        int fd = net_accept(f->lfd, clock_mono_ms() + 100, &f->stop, &e);
        if (fd < 0)
            continue;
        fake_read_request(f, fd);
        char req[8192];
        pthread_mutex_lock(&f->mu);
        memcpy(req, f->last, f->last_len + 1);
        pthread_mutex_unlock(&f->mu);
        fake_reply(req, fd);
        close(fd);
    }
    return NULL;
}

static int fake_start(struct fake *f)
{
    struct err e;
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->lfd = net_listen("127.0.0.1", 0, 16, &e);
    if (f->lfd < 0)
        return -1;
    f->port = net_local_port(f->lfd);
    return pthread_create(&f->th, NULL, fake_main, f) == 0 ? 0 : -1;
}

static void fake_stop(struct fake *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
    pthread_mutex_destroy(&f->mu);
}

/* The last request the fake server saw (copied out under its lock). */
static const char *fake_last(struct fake *f)
{
    static char copy[8192];
    pthread_mutex_lock(&f->mu);
    memcpy(copy, f->last, f->last_len + 1);
    pthread_mutex_unlock(&f->mu);
    return copy;
}

static int client_for(struct client *c, const struct fake *f, const char *token, double t,
                      struct err *e)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", f->port); /* trailing '/' dropped */
    return client_init(c, url, token, t, e);
}

static void test_client_replies_and_errors(void)
{
    struct fake f;
    T_CHECK(fake_start(&f) == 0);
    struct client c;
    struct err e;
    T_OK(client_for(&c, &f, NULL, 5, &e));
    T_OK(client_request(&c, "GET", "/ok", NULL, 0, &e));
    T_EQ_INT(c.status, 200);
    T_EQ_STR((const char *)c.body.data, "{\"a\": 1}");
    T_CHECK(strncmp(c.content_type, "application/json", 16) == 0);
    json_t *v = client_json(&c, "GET", "/ok", &e);
    T_CHECK(v && json_integer_value(json_object_get(v, "a")) == 1);
    json_decref(v);

    T_CHECK(client_request(&c, "POST", "/err400", "{}", 2, &e) < 0);
    T_EQ_INT(c.status, 400);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "world_size");
    T_EQ_STR(e.msg, "world_size must be >= 1");
    T_EQ_INT(cli_exit_for_http(c.status), CLI_EXIT_REFUSED);

    T_CHECK(client_json(&c, "GET", "/nothing-here", &e) == NULL);
    T_EQ_INT(c.status, 404);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_EQ_STR(e.field, "");

    T_CHECK(client_request(&c, "GET", "/err503", NULL, 0, &e) < 0);
    T_EQ_INT(e.code, ERR_UNAVAILABLE);
    T_EQ_STR(e.msg, "shutting down");
    T_EQ_INT(cli_exit_for_http(c.status), CLI_EXIT_UNREACHABLE);

    T_CHECK(client_request(&c, "GET", "/err500-plain", NULL, 0, &e) < 0);
    T_EQ_INT(c.status, 500);
    T_CHECK(strstr(e.msg, "HTTP 500") != NULL);
    T_EQ_INT(cli_exit_for_http(c.status), CLI_EXIT_UNREACHABLE);
    client_cleanup(&c);
    fake_stop(&f);
}

static void test_client_token_and_body(void)
{
    struct fake f;
    T_CHECK(fake_start(&f) == 0);
    struct client c;
    struct err e;
    T_OK(client_for(&c, &f, "tok-123", 5, &e));
    static const char spec[] = "{\"workload\": \"collective\", \"name\": \"x\"}";
    T_OK(client_request(&c, "POST", "/created", spec, strlen(spec), &e));
    T_EQ_INT(c.status, 201);
    const char *req = fake_last(&f);
    T_CHECK_MSG(strncmp(req, "POST /created HTTP/1.1\r\n", 24) == 0, "%s", req);
    T_CHECK_MSG(strstr(req, "\r\nAuthorization: Bearer tok-123\r\n") != NULL, "%s", req);
    T_CHECK_MSG(strstr(req, "\r\nContent-Type: application/json\r\n") != NULL, "%s", req);
    T_CHECK_MSG(strstr(req, "\r\n\r\n{\"workload\": \"collective\", \"name\": \"x\"}") != NULL,
                "%s", req);
    T_OK(client_request(&c, "GET", "/ok", NULL, 0, &e));
    req = fake_last(&f);
    T_CHECK_MSG(strstr(req, "Authorization") == NULL, "reads carry no token: %s", req);
    T_CHECK(client_request(&c, "DELETE", "/gone", NULL, 0, &e) < 0); /* 404 from the fake */
    req = fake_last(&f);
    T_CHECK(strncmp(req, "DELETE /gone ", 13) == 0 && strstr(req, "Bearer tok-123"));
    T_OK(client_request(&c, "POST", "/created", NULL, 0, &e)); /* a cancel: empty body */
    req = fake_last(&f);
    T_CHECK_MSG(strstr(req, "Content-Length: 0\r\n") != NULL, "%s", req);

    struct buf q;
    buf_init(&q);
    buf_append_str(&q, "/v1/experiments");
    T_OK(client_query_add(&q, "name", "a b&c=d/", &e));
    T_OK(client_query_add(&q, "status", NULL, &e));
    T_OK(client_query_add(&q, "limit", "5", &e));
    buf_append(&q, "", 1);
    T_EQ_STR((const char *)q.data, "/v1/experiments?name=a%20b%26c%3Dd%2F&limit=5");
    T_OK(client_request(&c, "GET", (const char *)q.data, NULL, 0, &e));
    T_CHECK(strstr(fake_last(&f), "GET /v1/experiments?name=a%20b%26c%3Dd%2F&limit=5 "));
    buf_free(&q);
    client_cleanup(&c);
    fake_stop(&f);
}

static void test_client_timeout_and_unreachable(void)
{
    struct fake f;
    T_CHECK(fake_start(&f) == 0);
    struct client c;
    struct err e;
    T_OK(client_for(&c, &f, NULL, 0.5, &e));
    int64_t t0 = clock_mono_ms();
    T_CHECK(client_request(&c, "GET", "/slow", NULL, 0, &e) < 0);
    T_CHECK(clock_mono_ms() - t0 < 2500);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_EQ_INT(c.status, 0);
    T_EQ_INT(cli_exit_for_http(c.status), CLI_EXIT_UNREACHABLE);
    client_cleanup(&c);
    int port = f.port;
    fake_stop(&f); /* nothing listens on that port any more */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    T_OK(client_init(&c, url, NULL, 2, &e));
    T_CHECK(client_request(&c, "GET", "/healthz", NULL, 0, &e) < 0);
    T_EQ_INT(c.status, 0);
    T_EQ_INT(e.code, ERR_UNAVAILABLE);
    T_CHECK(strstr(e.msg, "cannot reach") != NULL);
    client_cleanup(&c);
    char big[1100];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    T_CHECK(client_init(&c, "http://h", big, 1, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    client_cleanup(&c);
}

/* --ca: a readable file is kept for every request; a missing one is a usage error naming
 * --ca; an https:// request to a server that speaks no TLS gets no reply (status 0). */
static void test_client_ca(void)
{
    struct fake f;
    T_CHECK(fake_start(&f) == 0);
    struct client c;
    struct err e;
    char url[64];
    snprintf(url, sizeof url, "https://127.0.0.1:%d", f.port);
    T_OK(client_init(&c, url, NULL, 2, &e));
    T_CHECK(client_set_ca(&c, "/nonexistent/ca.pem", &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "--ca");
    T_CHECK(strstr(e.msg, "/nonexistent/ca.pem") != NULL);
    char ca[] = "/tmp/ddpb-test-ca-XXXXXX";
    int fd = mkstemp(ca);
    T_CHECK(fd >= 0);
    close(fd);
    T_OK(client_set_ca(&c, ca, &e));
    T_EQ_STR(c.ca, ca);
    T_CHECK(client_request(&c, "GET", "/healthz", NULL, 0, &e) < 0);
    T_EQ_INT(c.status, 0);
    unlink(ca);
    client_cleanup(&c);
    fake_stop(&f);
}

struct chunks {
    char text[256];
    size_t len;
    bool stop_on_b;
};

static int on_data(void *arg, const char *data, size_t len)
{
    struct chunks *k = arg;
    size_t n = len < sizeof k->text - 1 - k->len ? len : sizeof k->text - 1 - k->len;
    memcpy(k->text + k->len, data, n);
    k->len += n;
    k->text[k->len] = '\0';
    return k->stop_on_b && strstr(k->text, "data: b\n\n") != NULL;
}

static void test_client_streams(void)
{
    struct fake f;
    T_CHECK(fake_start(&f) == 0);
    struct client c;
    struct err e;
    T_OK(client_for(&c, &f, NULL, 5, &e));
    enum client_stream_end how;
    struct chunks k = {.stop_on_b = true};
    T_OK(client_stream(&c, "/stream-idle", 10000, on_data, &k, &how, &e));
    T_EQ_INT(how, CLIENT_STREAM_STOPPED);
    T_EQ_STR(k.text, "data: a\n\ndata: b\n\n");
    T_CHECK(strstr(fake_last(&f), "Accept: text/event-stream") != NULL);

    struct chunks idle = {0};
    int64_t t0 = clock_mono_ms();
    T_OK(client_stream(&c, "/stream-idle", 1000, on_data, &idle, &how, &e));
    int64_t took = clock_mono_ms() - t0;
    T_EQ_INT(how, CLIENT_STREAM_IDLE);
    T_CHECK_MSG(took >= 900 && took < 6000, "idle after %lld ms", (long long)took);
    T_EQ_STR(idle.text, "data: a\n\ndata: b\n\n");

    struct chunks closed = {0};
    T_OK(client_stream(&c, "/stream-close", 10000, on_data, &closed, &how, &e));
    T_EQ_INT(how, CLIENT_STREAM_CLOSED);
    T_EQ_STR(closed.text, "data: only\n\n");

    struct chunks none = {0};
    T_CHECK(client_stream(&c, "/stream-missing", 10000, on_data, &none, &how, &e) < 0);
    T_EQ_INT(c.status, 404);
    T_EQ_INT(e.code, ERR_NOT_FOUND);
    T_EQ_INT(none.len, 0); /* an error reply is not handed to the stream */
    client_cleanup(&c);
    fake_stop(&f);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_client_replies_and_errors);
    TEST_RUN(test_client_token_and_body);
    TEST_RUN(test_client_timeout_and_unreachable);
    TEST_RUN(test_client_streams);
    TEST_RUN(test_client_ca);
    return test_end();
}
