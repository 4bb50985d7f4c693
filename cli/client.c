/* client: see client.h. Each transfer has a small context (struct client_xfer) shared by
 * the write and progress callbacks: the write callback fills the body or, for a stream,
 * passes bytes on; the progress callback (libcurl calls it about once a second even when
 * nothing arrives) ends a stream that has been silent for too long. */
#include "cli/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "ddpb_config.h"

struct client_xfer {
    struct client *c;
    client_data_fn on_data; /* NULL: a plain request */
    void *arg;
    int idle_ms;
    int64_t last_ms;
    bool stopped, idle, too_large;
};

int client_init(struct client *c, const char *url, const char *token, double timeout_s,
                struct err *e)
{
    memset(c, 0, sizeof *c);
    buf_init(&c->body);
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    if (n >= sizeof c->url)
        return err_set(e, ERR_INVALID, "--url", "--url is longer than %zu bytes",
                       sizeof c->url - 1);
    memcpy(c->url, url, n);
    if (token && strlen(token) + 32 > sizeof c->auth)
        return err_set(e, ERR_INVALID, "--token", "the token is longer than %zu bytes",
                       sizeof c->auth - 32);
    if (token)
        snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s", token);
    c->timeout_ms = (long)(timeout_s * 1000.0);
    if (c->timeout_ms < 1)
        c->timeout_ms = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(c->curl = curl_easy_init()))
        return err_set(e, ERR_INTERNAL, NULL, "libcurl could not be initialised");
    return 0;
}

int client_set_ca(struct client *c, const char *path, struct err *e)
{
    if (strlen(path) >= sizeof c->ca)
        return err_set(e, ERR_INVALID, "--ca", "--ca is longer than %zu bytes",
                       sizeof c->ca - 1);
    if (access(path, R_OK) < 0)
        return err_set(e, ERR_INVALID, "--ca", "--ca %s: %s", path, strerror(errno));
    snprintf(c->ca, sizeof c->ca, "%s", path);
    return 0;
}

void client_cleanup(struct client *c)
{
    if (c->curl) {
        curl_easy_cleanup(c->curl);
        curl_global_cleanup();
    }
    c->curl = NULL;
    buf_free(&c->body);
}

static size_t client_write(char *p, size_t size, size_t nmemb, void *arg)
{
    struct client_xfer *x = arg;
    size_t len = size * nmemb;
    x->last_ms = clock_mono_ms();
    long status = 0;
    if (x->on_data)
        curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status == 200) {
        if (x->on_data(x->arg, p, len) == 0)
            return len;
        x->stopped = true;
        return 0; /* anything but len ends the transfer */
    }
    if (len > CLIENT_MAX_BODY - x->c->body.len || buf_append(&x->c->body, p, len) < 0) {
        x->too_large = true;
        return 0;
    }
    return len;
}

static int client_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                           curl_off_t ulnow)
{
    struct client_xfer *x = arg;
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    if (x->idle_ms > 0 && clock_mono_ms() - x->last_ms >= x->idle_ms) {
        x->idle = true;
        return 1;
    }
    return 0;
}

/* Options of one transfer on the reset handle. hdrs receives an owned list
 * (curl_slist_free_all after the transfer). */
static int client_prepare(struct client *c, struct client_xfer *x, const char *method,
                          const char *url, const void *body, size_t len,
                          struct curl_slist **hdrs)
{
    CURL *h = c->curl;
    curl_easy_reset(h); /* keeps the open connection, drops the previous options */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ddpbench/" DDPB_VERSION);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, client_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, x->on_data ? 0L : c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, client_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    if (c->ca[0]) /* peer and host are verified: libcurl's defaults, which stay on */
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca);
    struct curl_slist *l = curl_slist_append(NULL, x->on_data ? "Accept: text/event-stream"
                                                              : "Accept: application/json");
    if (l && strcmp(method, "GET") != 0 && c->auth[0])
        l = curl_slist_append(l, c->auth);
    if (l && body)
        l = curl_slist_append(l, "Content-Type: application/json");
    *hdrs = l;
    if (!l)
        return -1;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    return 0;
}

static enum err_code client_code_of(const char *name, long status)
{
    for (int c = ERR_INVALID; c <= ERR_INTERNAL; c++)
        if (name && strcmp(err_code_name((enum err_code)c), name) == 0)
            return (enum err_code)c;
    return status >= 500 ? ERR_UNAVAILABLE : ERR_INVALID;
}

/* An error reply: the API's {"error": {code, message, field}} into e, whatever it is. */
static int client_api_error(struct client *c, const char *method, const char *path,
                            struct err *e)
{
    json_t *root = json_loadb((const char *)c->body.data, c->body.len, 0, NULL);
    json_t *err = json_object_get(root, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    const char *field = json_string_value(json_object_get(err, "field"));
    if (msg)
        err_set(e, client_code_of(code, c->status), field, "%s", msg);
    else
        err_set(e, client_code_of(NULL, c->status), NULL,
                "%s %s: HTTP %ld without an "
                "error body",
                method, path, c->status);
    json_decref(root);
    return -1;
}

static int client_transport_error(struct client *c, const struct client_xfer *x, CURLcode rc,
                                  struct err *e)
{
    c->status = 0; /* a reply cut short counts as no reply */
    if (x->too_large)
        return err_set(e, ERR_TOO_LARGE, NULL, "%s: reply larger than %zu bytes", c->url,
                       CLIENT_MAX_BODY);
    if (rc == CURLE_OPERATION_TIMEDOUT || x->idle)
        return err_set(e, ERR_TIMEOUT, NULL, "%s: no reply within %.1f s", c->url,
                       (double)(x->idle ? x->idle_ms : c->timeout_ms) / 1000.0);
    return err_set(e, ERR_UNAVAILABLE, NULL, "cannot reach ddpbenchd at %s: %s", c->url,
                   curl_easy_strerror(rc));
}

static int client_perform(struct client *c, struct client_xfer *x, const char *method,
                          const char *path, const void *body, size_t len, struct err *e)
{
    struct buf url;
    buf_init(&url);
    struct curl_slist *hdrs = NULL;
    buf_reset(&c->body);
    c->status = 0;
    c->content_type[0] = '\0';
    x->c = c;
    x->last_ms = clock_mono_ms();
    if (buf_append_str(&url, c->url) < 0 || buf_append_str(&url, path) < 0 ||
        buf_append(&url, "", 1) < 0 ||
        client_prepare(c, x, method, (const char *)url.data, body, len, &hdrs) < 0) {
        curl_slist_free_all(hdrs);
        buf_free(&url);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    CURLcode rc = curl_easy_perform(c->curl);
    curl_slist_free_all(hdrs);
    buf_free(&url);
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
    char *ctype = NULL;
    if (curl_easy_getinfo(c->curl, CURLINFO_CONTENT_TYPE, &ctype) == CURLE_OK && ctype)
        snprintf(c->content_type, sizeof c->content_type, "%s", ctype);
    if (buf_append(&c->body, "", 1) < 0)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    c->body.len--;
    if (rc != CURLE_OK && !(c->status == 200 && (x->stopped || x->idle)))
        return client_transport_error(c, x, rc, e);
    if (c->status < 200 || c->status > 299)
        return client_api_error(c, method, path, e);
    return 0;
}

int client_request(struct client *c, const char *method, const char *path, const void *body,
                   size_t len, struct err *e)
{
    struct client_xfer x = {0};
    return client_perform(c, &x, method, path, body, len, e);
}

json_t *client_json(struct client *c, const char *method, const char *path, struct err *e)
{
    if (client_request(c, method, path, NULL, 0, e) < 0)
        return NULL;
    json_error_t je;
    json_t *v = json_loadb((const char *)c->body.data, c->body.len, 0, &je);
    if (!v)
        err_set(e, ERR_UNAVAILABLE, NULL, "%s %s: the reply is not JSON: %s", method, path,
                je.text);
    return v;
}

int client_stream(struct client *c, const char *path, int idle_ms, client_data_fn on_data,
                  void *arg, enum client_stream_end *how, struct err *e)
{
    struct client_xfer x = {.on_data = on_data, .arg = arg, .idle_ms = idle_ms};
    if (client_perform(c, &x, "GET", path, NULL, 0, e) < 0)
        return -1;
    *how = x.stopped ? CLIENT_STREAM_STOPPED
           : x.idle  ? CLIENT_STREAM_IDLE
                     : CLIENT_STREAM_CLOSED;
    return 0;
}

int client_query_add(struct buf *q, const char *name, const char *value, struct err *e)
{
    if (!value)
        return 0;
    char *esc = curl_easy_escape(NULL, value, 0);
    int rc = esc ? 0 : -1;
    if (rc == 0)
        rc = buf_append_str(q, q->len && memchr(q->data, '?', q->len) ? "&" : "?");
    if (rc == 0)
        rc = buf_append_str(q, name);
    if (rc == 0)
        rc = buf_append_str(q, "=");
    if (rc == 0)
        rc = buf_append_str(q, esc);
    curl_free(esc);
    return rc < 0 ? err_set(e, ERR_NOMEM, NULL, "out of memory") : 0;
}

int cli_exit_for_http(long status)
{
    if (status >= 200 && status <= 299)
        return CLI_EXIT_OK;
    if (status >= 400 && status <= 499)
        return CLI_EXIT_REFUSED;
    return CLI_EXIT_UNREACHABLE;
}

int cli_exit_for_outcome(const char *status)
{
    return status && strcmp(status, "succeeded") == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILED;
}
