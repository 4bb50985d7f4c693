/* h_static: the dashboard's files under --web-dir.
 *
 * Decision: two independent guards keep requests inside web/: the path is rejected if
 * any segment is empty, "." or ".." or holds a backslash, and the resolved real path
 * (symlinks followed) must still lie under the real web directory. Files are read whole
 * (the dashboard is small) with a size cap. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "handlers.h"

#define STATIC_MAX_FILE (16u << 20)

static const char *static_content_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"}, {".json", "application/json"},
        {".svg", "image/svg+xml"}, {".png", "image/png"}, {".ico", "image/x-icon"},
        {".yaml", "application/yaml"}, {".txt", "text/plain; charset=utf-8"},
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
