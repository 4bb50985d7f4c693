/* commands: see commands.h. */
#include "cli/commands.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/view.h"
#include "cli/watch.h"
#include "common/clock.h"

#define CMD_MAX_SPEC ((size_t)64 << 20)

/* --- reporting ------------------------------------------------------------------------- */

/* A failed API call: its message (and the API's code and field) on stderr. */
static int cmd_fail(struct cli *cli, const struct err *e)
{
    long st = cli->client.status;
    if (st != 0)
        fprintf(cli->err, "ddpbench: %ld %s%s%s%s: %s\n", st, err_code_name(e->code),
                e->field[0] ? " (field " : "", e->field, e->field[0] ? ")" : "", e->msg);
    else
        fprintf(cli->err, "ddpbench: %s\n", e->msg);
    return cli_exit_for_http(st);
}

/* A failure on this side (a file, memory): no daemon involved. */
static int cmd_fail_local(struct cli *cli, int code, const char *what)
{
    fprintf(cli->err, "ddpbench: %s\n", what);
    return code;
}

/* Writes b (text) to f with a final newline. Returns 0 or -1. */
static int cmd_write(FILE *f, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, f) != n)
        return -1;
    if (n && ((const char *)p)[n - 1] != '\n' && fputc('\n', f) == EOF)
        return -1;
    return fflush(f) == 0 ? 0 : -1;
}

static int cmd_print_buf(struct cli *cli, struct buf *b)
{
    int rc = cmd_write(cli->out, b->data, b->len);
    buf_free(b);
    return rc < 0 ? cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "cannot write the output")
                  : CLI_EXIT_OK;
}

/* The last reply's body as it came (the API's JSON for --json). */
static int cmd_print_body(struct cli *cli)
{
    return cmd_write(cli->out, cli->client.body.data, cli->client.body.len) < 0
               ? cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "cannot write the output")
               : CLI_EXIT_OK;
}

/* Takes v (owned). */
static int cmd_print_json(struct cli *cli, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!s)
        return cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory");
    int rc = cmd_write(cli->out, s, strlen(s));
    free(s);
    return rc < 0 ? cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "cannot write the output")
                  : CLI_EXIT_OK;
}

static const char *cmd_str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "-";
}

/* Takes v (owned, the parse of the last reply): the reply as it came with --json, else
 * rendered by view. */
static int cmd_render(struct cli *cli, json_t *v, int (*view)(const json_t *, struct buf *))
{
    if (cli->args.json) {
        json_decref(v);
        return cmd_print_body(cli);
    }
    struct buf out;
    buf_init(&out);
    int rc = view(v, &out);
    json_decref(v);
    return rc < 0 ? (buf_free(&out), cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory"))
                  : cmd_print_buf(cli, &out);
}

/* --- paths --------------------------------------------------------------------------- */

/* Owned "/v1/experiments/ID/results?..." (group_by and format as asked), or NULL. */
static char *cmd_results_path(const struct cli *cli, int64_t id, const char *format)
{
    struct buf p;
    buf_init(&p);
    struct err e;
    char head[96];
    snprintf(head, sizeof head, "/v1/experiments/%lld/results", (long long)id);
    if (buf_append_str(&p, head) < 0 ||
        client_query_add(&p, "group_by", cli->args.group_by, &e) < 0 ||
        client_query_add(&p, "format", format, &e) < 0 || buf_append(&p, "", 1) < 0) {
        buf_free(&p);
        return NULL;
    }
    return (char *)p.data;
}

/* GET prefix + id ("/v1/experiments/" 12). */
static json_t *cmd_get(struct cli *cli, const char *prefix, int64_t id, struct err *e)
{
    char path[96];
    snprintf(path, sizeof path, "%s%lld", prefix, (long long)id);
    return client_json(&cli->client, "GET", path, e);
}

/* GET an experiment with every run. */
static json_t *cmd_get_experiment(struct cli *cli, int64_t id, struct err *e)
{
    char path[96];
    watch_experiment_path(path, sizeof path, id);
    return client_json(&cli->client, "GET", path, e);
}

static json_t *cmd_get_results(struct cli *cli, int64_t id, struct err *e)
{
    char *path = cmd_results_path(cli, id, NULL);
    if (!path) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    json_t *t = client_json(&cli->client, "GET", path, e);
    free(path);
    return t;
}

static int cmd_results_heading(const json_t *res, struct buf *out)
{
    const json_t *g = json_object_get(res, "group_by");
    char *s = json_array_size(g) ? json_dumps(g, JSON_COMPACT) : NULL;
    char line[512];
    snprintf(line, sizeof line, "\nresults%s%s\n", s ? " grouped by " : "", s ? s : "");
    free(s);
    return buf_append_str(out, line);
}

/* --- submit ---------------------------------------------------------------------------- */

static int cmd_read_spec(struct cli *cli, struct buf *spec)
{
    const char *path = cli->args.spec_path;
    bool is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    char msg[600];
    if (!f) {
        snprintf(msg, sizeof msg, "cannot open %s: %s", path, strerror(errno));
        return cmd_fail_local(cli, CLI_EXIT_USAGE, msg);
    }
    char chunk[65536];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = spec->len + n > CMD_MAX_SPEC || buf_append(spec, chunk, n) < 0 ? -1 : 0;
    bool bad = ferror(f) != 0;
    if (!is_stdin)
        fclose(f);
    if (rc < 0 || bad) {
        snprintf(msg, sizeof msg, "cannot read %s%s", is_stdin ? "standard input" : path,
                 rc < 0 ? ": larger than 64 MiB" : "");
        return cmd_fail_local(cli, CLI_EXIT_USAGE, msg);
    }
    return CLI_EXIT_OK;
}

/* After --watch: the final experiment and its results (JSON, or a table and the errors
 * of runs that did not succeed). Returns the exit status of the outcome. */
static int cmd_watch_report(struct cli *cli, int64_t id, const char *status)
{
    struct err e = {0};
    json_t *exp = cmd_get_experiment(cli, id, &e);
    json_t *res = exp ? cmd_get_results(cli, id, &e) : NULL;
    if (!res) {
        json_decref(exp);
        return cmd_fail(cli, &e);
    }
    const char *final = json_string_value(json_object_get(exp, "status"));
    int outcome = cli_exit_for_outcome(final ? final : status);
    if (cli->args.json) {
        int rc = cmd_print_json(cli,
                                json_pack("{s:o, s:o}", "experiment", exp, "results", res));
        return rc ? rc : outcome;
    }
    struct buf out, errs;
    buf_init(&out);
    buf_init(&errs);
    json_t *failed = json_array(); /* why runs failed; a cancel needs no explanation */
    size_t i;
    json_t *run;
    json_array_foreach(json_object_get(exp, "runs"), i,
                       run) if (strcmp(cmd_str(run, "status"), "cancelled") != 0)
        json_array_append(failed, run);
    int rc = !failed || cmd_results_heading(res, &out) < 0 || view_results(res, &out) < 0 ||
             view_errors(failed, &errs) < 0;
    json_decref(failed);
    json_decref(exp);
    json_decref(res);
    if (errs.len)
        fwrite(errs.data, 1, errs.len, cli->err);
    buf_free(&errs);
    if (rc) {
        buf_free(&out);
        return cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory");
    }
    rc = cmd_print_buf(cli, &out);
    return rc ? rc : outcome;
}

static int cmd_watch(struct cli *cli, const json_t *created)
{
    int64_t id = json_integer_value(json_object_get(created, "id"));
    FILE *disp = cli->args.json ? cli->err : cli->out;
    bool tty = isatty(fileno(disp));
    if (!cli->args.json)
        fprintf(disp, "experiment %lld submitted: %lld run%s\n", (long long)id,
                (long long)json_integer_value(json_object_get(created, "n_runs")),
                json_integer_value(json_object_get(created, "n_runs")) == 1 ? "" : "s");
    fflush(disp); /* scripts reading a pipe learn the id before the experiment ends */
    struct watch w;
    watch_init(&w, &cli->client, id, disp, tty, cli->args.timeout_s);
    struct err e = {0};
    int rc = watch_follow(&w, &e);
    char status[16];
    snprintf(status, sizeof status, "%s", w.st.status);
    watch_cleanup(&w);
    if (rc < 0)
        return cmd_fail(cli, &e);
    return cmd_watch_report(cli, id, status);
}

static int cmd_submit(struct cli *cli)
{
    struct buf spec;
    buf_init(&spec);
    int rc = cmd_read_spec(cli, &spec);
    struct err e = {0};
    if (rc == CLI_EXIT_OK &&
        client_request(&cli->client, "POST", "/v1/experiments",
                       spec.data ? (const void *)spec.data : "", spec.len, &e) < 0)
        rc = cmd_fail(cli, &e);
    buf_free(&spec);
    if (rc != CLI_EXIT_OK)
        return rc;
    json_t *created = json_loadb((const char *)cli->client.body.data, cli->client.body.len, 0,
                                 NULL);
    if (!json_is_integer(json_object_get(created, "id"))) {
        json_decref(created);
        return cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "the daemon's reply has no id");
    }
    if (cli->args.watch)
        rc = cmd_watch(cli, created);
    else if (cli->args.json)
        rc = cmd_print_body(cli);
    else
        fprintf(cli->out, "%lld\n",
                (long long)json_integer_value(json_object_get(created, "id")));
    json_decref(created);
    return rc;
}

/* --- reading --------------------------------------------------------------------------- */

static int cmd_ls(struct cli *cli)
{
    const struct cli_args *a = &cli->args;
    struct buf p;
    buf_init(&p);
    struct err e = {0};
    char lim[32] = "", off[32] = "";
    if (a->limit >= 0)
        snprintf(lim, sizeof lim, "%lld", (long long)a->limit);
    if (a->offset >= 0)
        snprintf(off, sizeof off, "%lld", (long long)a->offset);
    int bad = buf_append_str(&p, "/v1/experiments") < 0 ||
              client_query_add(&p, "status", a->status, &e) < 0 ||
              client_query_add(&p, "name", a->name, &e) < 0 ||
              client_query_add(&p, "workload", a->workload, &e) < 0 ||
              client_query_add(&p, "model", a->model, &e) < 0 ||
              client_query_add(&p, "limit", lim[0] ? lim : NULL, &e) < 0 ||
              client_query_add(&p, "offset", off[0] ? off : NULL, &e) < 0 ||
              buf_append(&p, "", 1) < 0;
    json_t *page = bad ? NULL : client_json(&cli->client, "GET", (char *)p.data, &e);
    buf_free(&p);
    if (bad)
        return cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory");
    return page ? cmd_render(cli, page, view_experiments) : cmd_fail(cli, &e);
}

static int cmd_show(struct cli *cli)
{
    struct err e = {0};
    int64_t id = cli->args.ids[0];
    json_t *exp = cmd_get_experiment(cli, id, &e);
    json_t *res = exp ? cmd_get_results(cli, id, &e) : NULL;
    if (!res) {
        json_decref(exp);
        return cmd_fail(cli, &e);
    }
    if (cli->args.json)
        return cmd_print_json(cli, json_pack("{s:o, s:o}", "experiment", exp, "results", res));
    struct buf out;
    buf_init(&out);
    int rc = view_experiment(exp, &out) < 0 || cmd_results_heading(res, &out) < 0 ||
             view_results(res, &out) < 0;
    json_decref(exp);
    json_decref(res);
    return rc ? (buf_free(&out), cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory"))
              : cmd_print_buf(cli, &out);
}

/* "#12  name  (workload, status)" for each experiment compared. */
static int cmd_compare_legend(const json_t *exps, struct buf *out)
{
    size_t i;
    const json_t *exp;
    json_array_foreach(exps, i, exp)
    {
        char line[400];
        snprintf(line, sizeof line, "#%lld  %s  (%s, %s)\n",
                 (long long)json_integer_value(json_object_get(exp, "id")),
                 cmd_str(exp, "name"), cmd_str(exp, "workload"), cmd_str(exp, "status"));
        for (char *p = line; *p; p++)
            if ((unsigned char)*p < 0x20 && *p != '\n')
                *p = '?';
        if (buf_append_str(out, line) < 0)
            return -1;
    }
    return buf_append_str(out, "\n");
}

static int cmd_compare_render(struct cli *cli, const json_t *exps, const json_t *tables)
{
    struct view_src src[ARGS_MAX_IDS];
    for (size_t i = 0; i < cli->args.nids; i++)
        src[i] = (struct view_src){cli->args.ids[i], json_array_get(tables, i),
                                   json_object_get(json_array_get(exps, i), "spec")};
    struct buf out;
    buf_init(&out);
    struct err e = {0};
    if (cmd_compare_legend(exps, &out) < 0) {
        buf_free(&out);
        return cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory");
    }
    if (view_compare(src, cli->args.nids, &out, &e) < 0) {
        buf_free(&out);
        return cmd_fail_local(
            cli, e.code == ERR_INVALID ? CLI_EXIT_USAGE : CLI_EXIT_UNREACHABLE, e.msg);
    }
    return cmd_print_buf(cli, &out);
}

/* Each experiment (for its name and spec) and its results table, into two arrays. */
static int cmd_compare_fetch(struct cli *cli, json_t *exps, json_t *tables, struct err *e)
{
    for (size_t i = 0; i < cli->args.nids; i++) {
        json_t *exp = cli->args.json ? json_null()
                                     : cmd_get_experiment(cli, cli->args.ids[i], e);
        json_t *t = exp ? cmd_get_results(cli, cli->args.ids[i], e) : NULL;
        if (!t) {
            json_decref(exp);
            return -1;
        }
        json_array_append_new(exps, exp);
        json_array_append_new(tables, t);
    }
    return 0;
}

static int cmd_compare(struct cli *cli)
{
    json_t *exps = json_array(), *tables = json_array();
    struct err e = {0};
    int rc;
    if (!exps || !tables)
        rc = cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory");
    else if (cmd_compare_fetch(cli, exps, tables, &e) < 0)
        rc = cmd_fail(cli, &e);
    else if (cli->args.json)
        rc = cmd_print_json(cli, json_incref(tables));
    else
        rc = cmd_compare_render(cli, exps, tables);
    json_decref(exps);
    json_decref(tables);
    return rc;
}

/* The results exactly as the daemon sent them, to stdout or -o FILE. */
/* The reply's body, byte for byte, to --output (else the output stream). */
static int cmd_save_body(struct cli *cli)
{
    const struct buf *b = &cli->client.body;
    if (!cli->args.output)
        return fwrite(b->data, 1, b->len, cli->out) == b->len && fflush(cli->out) == 0
                   ? CLI_EXIT_OK
                   : cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "cannot write the output");
    FILE *f = fopen(cli->args.output, "wb");
    bool ok = f && fwrite(b->data, 1, b->len, f) == b->len;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok) {
        char msg[600];
        snprintf(msg, sizeof msg, "cannot write %s: %s", cli->args.output, strerror(errno));
        return cmd_fail_local(cli, CLI_EXIT_USAGE, msg);
    }
    return CLI_EXIT_OK;
}

static int cmd_export(struct cli *cli)
{
    char *path = cmd_results_path(cli, cli->args.ids[0], cli->args.csv ? "csv" : "json");
    struct err e = {0};
    if (!path)
        return cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "out of memory");
    int rc = client_request(&cli->client, "GET", path, NULL, 0, &e);
    free(path);
    if (rc < 0)
        return cmd_fail(cli, &e);
    return cmd_save_body(cli);
}

/* trace: the run's Chrome trace, saved as the daemon sends it. */
static int cmd_trace(struct cli *cli)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld/trace", (long long)cli->args.ids[0]);
    struct err e = {0};
    if (client_request(&cli->client, "GET", path, NULL, 0, &e) < 0)
        return cmd_fail(cli, &e);
    return cmd_save_body(cli);
}

/* "ID?with=ID,ID": the path of an endpoint of the first id that takes the others. */
static void cmd_with_path(const struct cli *cli, const char *what, char *path, size_t cap)
{
    size_t len = (size_t)snprintf(path, cap, "/v1/experiments/%lld/%s",
                                  (long long)cli->args.ids[0], what);
    for (size_t i = 1; i < cli->args.nids && len < cap; i++)
        len += (size_t)snprintf(path + len, cap - len, "%s%lld", i == 1 ? "?with=" : ",",
                                (long long)cli->args.ids[i]);
}

/* fit: the latency-bandwidth fits of collective experiments. */
static int cmd_fit(struct cli *cli)
{
    char path[512];
    cmd_with_path(cli, "fit", path, sizeof path);
    struct err e = {0};
    json_t *fits = client_json(&cli->client, "GET", path, &e);
    return fits ? cmd_render(cli, fits, view_fits) : cmd_fail(cli, &e);
}

/* report: the HTML page, saved as the daemon sends it. */
static int cmd_report(struct cli *cli)
{
    char path[512];
    cmd_with_path(cli, "report", path, sizeof path);
    struct err e = {0};
    if (client_request(&cli->client, "GET", path, NULL, 0, &e) < 0)
        return cmd_fail(cli, &e);
    return cmd_save_body(cli);
}

/* "a,b,c" as a JSON array of integers (numbers: reals too) or strings; NULL when an item
 * is not one. Owned. */
static json_t *cmd_list(const char *s, bool numbers)
{
    json_t *a = json_array();
    while (a && s && *s) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        char item[64];
        if (n == 0 || n >= sizeof item) {
            json_decref(a);
            return NULL;
        }
        memcpy(item, s, n);
        item[n] = 0;
        char *end;
        double d = strtod(item, &end);
        if (numbers && (*end || end == item)) {
            json_decref(a);
            return NULL;
        }
        json_array_append_new(a, !numbers                     ? json_string(item)
                                 : d == (double)(json_int_t)d ? json_integer((json_int_t)d)
                                                              : json_real(d));
        s = comma ? comma + 1 : s + n;
    }
    return a;
}

/* The body of POST /v1/predict from predict's options. NULL with *bad naming the option. */
static json_t *cmd_predict_body(const struct cli_args *a, const char **bad)
{
    json_t *body = json_pack("{s:I}", a->run ? "run" : "experiment", (json_int_t)a->ids[0]);
    struct {
        const char *value, *key, *opt;
        bool numbers, one; /* one: a single value, not a list (the daemon checks ranges) */
    } lists[] = {{a->fit, "fit", "--fit", true, false},
                 {a->world_sizes, "world_sizes", "--world-sizes", true, false},
                 {a->strategies, "strategies", "--strategies", false, false},
                 {a->nodes, "nodes", "--nodes", true, true},
                 {a->network_profile, "network_profile", "--network-profile", false, true},
                 {a->pred_max_world, "pred_max_world", "--pred-max-world", true, true}};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
        if (!lists[i].value)
            continue;
        json_t *l = cmd_list(lists[i].value, lists[i].numbers);
        if (!l || (lists[i].one && json_array_size(l) != 1)) {
            *bad = lists[i].opt;
            json_decref(l);
            json_decref(body);
            return NULL;
        }
        json_object_set(body, lists[i].key, lists[i].one ? json_array_get(l, 0) : l);
        json_decref(l);
    }
    if (a->link) {
        json_t *l = cmd_list(a->link, true);
        if (!l || json_array_size(l) != 2) {
            json_decref(l);
            json_decref(body);
            *bad = "--link";
            return NULL;
        }
        json_object_set_new(body, "link",
                            json_pack("{s:O, s:O}", "bandwidth_gbps", json_array_get(l, 0),
                                      "latency_us", json_array_get(l, 1)));
        json_decref(l);
    }
    return body;
}

/* predict: what-if scaling curves of each strategy. */
static int cmd_predict(struct cli *cli)
{
    const char *bad = NULL;
    json_t *body = cmd_predict_body(&cli->args, &bad);
    if (!body) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "%s: a comma-separated list (--link: GBPS,US; --fit, --world-sizes: "
                 "numbers; --nodes, --pred-max-world: one number; --network-profile: one "
                 "name)",
                 bad);
        return cmd_fail_local(cli, CLI_EXIT_USAGE, msg);
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct err e = {0};
    int rc = text ? client_request(&cli->client, "POST", "/v1/predict", text, strlen(text), &e)
                  : err_set(&e, ERR_NOMEM, NULL, "out of memory");
    free(text);
    if (rc < 0)
        return cmd_fail(cli, &e);
    json_error_t je;
    json_t *reply = json_loadb((const char *)cli->client.body.data, cli->client.body.len, 0,
                               &je);
    if (!reply)
        return cmd_fail_local(cli, CLI_EXIT_UNREACHABLE, "the daemon's reply is not JSON");
    return cmd_render(cli, reply, view_predict);
}

static int cmd_runs(struct cli *cli)
{
    struct err e = {0};
    json_t *run = cmd_get(cli, "/v1/runs/", cli->args.ids[0], &e);
    return run ? cmd_render(cli, run, view_run) : cmd_fail(cli, &e);
}

static int cmd_nodes(struct cli *cli)
{
    struct err e = {0};
    json_t *nodes = client_json(&cli->client, "GET", "/v1/nodes", &e);
    return nodes ? cmd_render(cli, nodes, view_nodes) : cmd_fail(cli, &e);
}

/* --- mutations -------------------------------------------------------------------------- */

/* cancel --wait: polls until the experiment or run is no longer live. */
static int cmd_cancel_wait(struct cli *cli, const char *prefix, const char *what, int64_t id)
{
    double limit_s = cli->args.timeout_s > 60 ? cli->args.timeout_s : 60;
    int64_t deadline = clock_mono_ms() + (int64_t)(limit_s * 1000);
    for (;;) {
        struct err e = {0};
        json_t *x = cmd_get(cli, prefix, id, &e);
        if (!x)
            return cmd_fail(cli, &e);
        char status[16];
        snprintf(status, sizeof status, "%s", cmd_str(x, "status"));
        json_decref(x);
        if (watch_is_final(status)) {
            if (!cli->args.json)
                fprintf(cli->out, "%s %lld %s\n", what, (long long)id, status);
            return CLI_EXIT_OK;
        }
        if (clock_mono_ms() > deadline) {
            fprintf(cli->err, "ddpbench: %s %lld still %s after %.0f s\n", what, (long long)id,
                    status, limit_s);
            return CLI_EXIT_UNREACHABLE;
        }
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int cmd_cancel(struct cli *cli)
{
    int64_t id = cli->args.ids[0];
    const char *what = cli->args.run ? "run" : "experiment";
    const char *prefix = cli->args.run ? "/v1/runs/" : "/v1/experiments/";
    char path[96];
    snprintf(path, sizeof path, "%s%lld/cancel", prefix, (long long)id);
    struct err e = {0};
    if (client_request(&cli->client, "POST", path, NULL, 0, &e) < 0)
        return cmd_fail(cli, &e);
    if (cli->args.json) {
        int rc = cmd_print_body(cli);
        return rc || !cli->args.wait ? rc : cmd_cancel_wait(cli, prefix, what, id);
    }
    fprintf(cli->out, "%s %lld: cancel requested\n", what, (long long)id);
    return cli->args.wait ? cmd_cancel_wait(cli, prefix, what, id) : CLI_EXIT_OK;
}

static int cmd_rm(struct cli *cli)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/experiments/%lld", (long long)cli->args.ids[0]);
    struct err e = {0};
    if (client_request(&cli->client, "DELETE", path, NULL, 0, &e) < 0)
        return cmd_fail(cli, &e);
    if (cli->args.json)
        return cmd_print_body(cli);
    json_t *r = json_loadb((const char *)cli->client.body.data, cli->client.body.len, 0, NULL);
    fprintf(cli->out, "deleted experiment %lld (%lld runs)\n", (long long)cli->args.ids[0],
            (long long)json_integer_value(json_object_get(r, "runs")));
    json_decref(r);
    return CLI_EXIT_OK;
}

/* --- dataset: a local program, not an API call ------------------------------------------ */

#define CMD_DATA_PROGRAM "ddpbench-data"

/* ddpbench-data's path: beside this program (installed), or in ../worker/ (the build tree,
 * as ddpbenchd finds ddpbench-worker); "" when neither holds it (PATH decides). self gets
 * this program's folder. */
static void cmd_data_program(char *out, size_t cap, char *self, size_t self_cap)
{
    out[0] = self[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", self, self_cap - 1);
    if (n <= 0)
        return;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    static const char *const beside[] = {"", "/../worker"};
    for (size_t i = 0; i < sizeof beside / sizeof beside[0]; i++) {
        snprintf(out, cap, "%s%s/" CMD_DATA_PROGRAM, self, beside[i]);
        if (access(out, X_OK) == 0)
            return;
    }
    out[0] = '\0';
}

/* Replaces this process with ddpbench-data and the words after "dataset", so its output
 * and exit status are the command's; returns only when it cannot be started. */
static int cmd_dataset(struct cli *cli)
{
    char prog[PATH_MAX + 32], self[PATH_MAX];
    cmd_data_program(prog, sizeof prog, self, sizeof self);
    char **argv = calloc((size_t)cli->args.nrest + 2, sizeof *argv);
    if (!argv)
        return cmd_fail_local(cli, CLI_EXIT_FAILED, "out of memory");
    argv[0] = prog[0] ? prog : CMD_DATA_PROGRAM;
    for (int i = 0; i < cli->args.nrest; i++)
        argv[1 + i] = cli->args.rest[i];
    fflush(cli->out);
    fflush(cli->err);
    if (prog[0])
        execv(prog, argv);
    else
        execvp(CMD_DATA_PROGRAM, argv);
    int err = errno;
    free(argv);
    if (prog[0] || err != ENOENT)
        fprintf(cli->err, "ddpbench: cannot run %s: %s\n", prog[0] ? prog : CMD_DATA_PROGRAM,
                strerror(err));
    else
        fprintf(cli->err,
                "ddpbench: " CMD_DATA_PROGRAM " not found beside ddpbench (%s) or on PATH; "
                "the dataset commands run it (it is installed with ddpbench-worker)\n",
                self[0] ? self : "?");
    return CLI_EXIT_FAILED;
}

int cmd_run(struct cli *cli)
{
    switch (cli->args.cmd) {
    case CMD_SUBMIT: return cmd_submit(cli);
    case CMD_LS: return cmd_ls(cli);
    case CMD_SHOW: return cmd_show(cli);
    case CMD_COMPARE: return cmd_compare(cli);
    case CMD_EXPORT: return cmd_export(cli);
    case CMD_CANCEL: return cmd_cancel(cli);
    case CMD_RM: return cmd_rm(cli);
    case CMD_RUNS: return cmd_runs(cli);
    case CMD_NODES: return cmd_nodes(cli);
    case CMD_TRACE: return cmd_trace(cli);
    case CMD_FIT: return cmd_fit(cli);
    case CMD_PREDICT: return cmd_predict(cli);
    case CMD_REPORT: return cmd_report(cli);
    case CMD_DATASET: return cmd_dataset(cli);
    default: return cmd_fail_local(cli, CLI_EXIT_USAGE, "no command");
    }
}
