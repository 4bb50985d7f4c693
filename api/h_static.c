/* h_static: the dashboard's files under --web-dir, and the example specs it starts from
 * (GET /v1/examples).
 *
 * Decision: two independent guards keep requests inside web/: the path is rejected if
 * any segment is empty, "." or ".." or holds a backslash, and the resolved real path
 * (symlinks followed) must still lie under the real web directory. Files are read whole
 * (the dashboard is small) with a size cap. The examples are read from the tree's
 * schema/examples/ beside the web directory at each request, not embedded at build
 * time, so a new example appears without rebuilding, and the dashboard and the docs
 * show the same files. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/handlers.h"

#define STATIC_MAX_FILE (16u << 20)

static const char *static_content_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".yaml", "application/yaml"},
        {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof *types; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

static int static_check_path(const char *path, struct err *e)
{
    if (strlen(path) > 512 || strchr(path, '\\'))
        return err_set(e, ERR_NOT_FOUND, NULL, "no file %.64s", path);
    const char *p = path;
    while (*p == '/') {
        const char *seg = ++p;
        while (*p && *p != '/')
            p++;
        size_t n = (size_t)(p - seg);
        if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return err_set(e, ERR_NOT_FOUND, NULL, "no file %.64s", path);
    }
    return 0;
}

static int static_read(const char *real, struct api_reply *rep, struct err *e)
{
    FILE *f = fopen(real, "rbe");
    if (!f)
        return err_set(e, ERR_NOT_FOUND, NULL, "file not readable");
    struct stat st;
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > STATIC_MAX_FILE) {
        fclose(f);
        return err_set(e, ERR_NOT_FOUND, NULL, "not a servable file");
    }
    char *data = malloc((size_t)st.st_size + 1);
    size_t got = data ? fread(data, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!data || got != (size_t)st.st_size) {
        free(data);
        return err_set(e, ERR_IO, NULL, "cannot read file");
    }
    data[got] = '\0'; /* not sent; lets callers treat text files as strings */
    rep->body = data;
    rep->body_len = got;
    rep->content_type = static_content_type(real);
    return 0;
}

int h_static_get(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                 struct err *e)
{
    const char *path = strcmp(req->path, "/") == 0 ? "/index.html" : req->path;
    if (static_check_path(path, e) < 0)
        return -1;
    char root[PATH_MAX], want[PATH_MAX], real[PATH_MAX];
    if (!realpath(ctx->cfg->web_dir, root))
        return err_set(e, ERR_NOT_FOUND, NULL, "the dashboard is not installed (--web-dir %s)",
                       ctx->cfg->web_dir);
    snprintf(want, sizeof want, "%s%s", root, path);
    size_t rl = strlen(root);
    if (!realpath(want, real) || strncmp(real, root, rl) != 0 || real[rl] != '/')
        return err_set(e, ERR_NOT_FOUND, NULL, "no file %.64s", path);
    return static_read(real, rep, e);
}

/* --- GET /v1/examples ----------------------------------------------------------------- */

static int static_is_json_name(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return d->d_name[0] != '.' && n > 5 && strcmp(d->d_name + n - 5, ".json") == 0;
}

/* One example as {"name", "file", "spec"} or, for a file that is not a JSON object,
 * {"name", "file", "error"}: a broken example is shown, not hidden. Owned. */
static json_t *static_example(const char *dir, const char *file)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    json_t *item = json_pack("{s:s%, s:s}", "name", file, strlen(file) - 5, "file", file);
    if (!item)
        return NULL;
    struct api_reply tmp = {0};
    struct err e = {0};
    json_error_t je;
    json_t *spec = NULL;
    if (static_read(path, &tmp, &e) == 0)
        spec = json_loadb(tmp.body, tmp.body_len, JSON_REJECT_DUPLICATES, &je);
    free(tmp.body);
    if (json_is_object(spec)) {
        json_object_set_new(item, "spec", spec);
    } else {
        char msg[256];
        if (e.code)
            snprintf(msg, sizeof msg, "%s", e.msg);
        else if (spec)
            snprintf(msg, sizeof msg, "not a JSON object");
        else
            snprintf(msg, sizeof msg, "invalid JSON at line %d: %s", je.line, je.text);
        json_decref(spec);
        json_object_set_new(item, "error", json_string(msg));
    }
    return item;
}

int h_static_examples(struct api_ctx *ctx, const struct api_request *req, struct api_reply *rep,
                      struct err *e)
{
    static const char *const args[] = {NULL};
    if (api_query_check(req, args, e) < 0)
        return -1;
    char root[PATH_MAX], dir[PATH_MAX];
    if (!realpath(ctx->cfg->web_dir, root))
        return err_set(e, ERR_NOT_FOUND, NULL,
                       "no example specs: the dashboard directory "
                       "(--web-dir %s) does not exist",
                       ctx->cfg->web_dir);
    snprintf(dir, sizeof dir, "%s/../schema/examples", root);
    struct dirent **names = NULL;
    int n = scandir(dir, &names, static_is_json_name, alphasort);
    if (n < 0)
        return err_set(e, ERR_NOT_FOUND, NULL, "no example specs: cannot read %s: %s", dir,
                       strerror(errno));
    json_t *items = json_array();
    int rc = items ? 0 : -1;
    for (int i = 0; i < n; i++) {
        json_t *item = rc == 0 ? static_example(dir, names[i]->d_name) : NULL;
        if (rc == 0 && (!item || json_array_append_new(items, item) < 0))
            rc = -1;
        free(names[i]);
    }
    free(names);
    rep->json = rc == 0 ? json_pack("{s:o}", "items", items) : NULL;
    if (!rep->json) {
        json_decref(items);
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    }
    return 0;
}
