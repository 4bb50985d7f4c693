/* engines: runs engines/probe.py once and keeps its answer (engines.h says why lazily). */
#include "daemon/engines.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/paths.h"
#include "common/vocab.h"
#include "daemon/capture.h"
#include "daemon/mpi_probe.h"

struct engines {
    const struct config *cfg;
    pthread_mutex_t mu;
    pthread_cond_t done;   /* signalled when probe is set */
    pthread_t thread;      /* the probe's, once started */
    bool started;          /* under mu */
    json_t *probe;         /* owned; NULL until the first probe finished */
    atomic_int child;      /* the probe's pid while it runs, else 0 */
    atomic_bool cancelled; /* engines_cancel: probe no more */
    struct mpi_probe *mpi; /* owned: the MPI implementations here (probed on first need) */
};

struct engines *engines_create(const struct config *cfg)
{
    struct engines *en = calloc(1, sizeof *en);
    if (!en)
        return NULL;
    en->cfg = cfg;
    if (!(en->mpi = mpi_probe_create(cfg->worker_path))) {
        free(en);
        return NULL;
    }
    pthread_mutex_init(&en->mu, NULL);
    pthread_cond_init(&en->done, NULL);
    return en;
}

void engines_destroy(struct engines *en)
{
    if (!en)
        return;
    engines_cancel(en);
    pthread_mutex_lock(&en->mu);
    bool started = en->started;
    pthread_mutex_unlock(&en->mu);
    if (started)
        pthread_join(en->thread, NULL);
    json_decref(en->probe);
    mpi_probe_destroy(en->mpi);
    pthread_cond_destroy(&en->done);
    pthread_mutex_destroy(&en->mu);
    free(en);
}

void engines_cancel(struct engines *en)
{
    atomic_store(&en->cancelled, true);
    int pid = atomic_load(&en->child);
    if (pid > 0)
        kill(-pid, SIGKILL); /* its own process group: python and anything it started */
}

/* Runs `python probe.py`; the parsed JSON (owned) or NULL with why in e. */
static json_t *engines_run_probe(struct engines *en, struct err *e)
{
    const struct config *cfg = en->cfg;
    if (atomic_load(&en->cancelled)) {
        err_set(e, ERR_UNAVAILABLE, NULL, "the daemon is stopping");
        return NULL;
    }
    char script[PATH_MAX];
    snprintf(script, sizeof script, "%s/probe.py", cfg->engines_dir);
    char *argv[] = {(char *)cfg->python, script, NULL};
    struct buf out = {0};
    int status = 0;
    int rc = capture_run(argv, ENGINES_PROBE_TIMEOUT_S * 1000, &en->child, &en->cancelled, &out,
                         &status, e);
    json_t *j = NULL;
    if (rc < 0) {
        /* e says why */
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        err_set(e, ERR_INTERNAL, NULL, "%s %s failed (status %d)", cfg->python, script, status);
    } else {
        json_error_t je;
        j = json_loadb((const char *)out.data, out.len, 0, &je);
        if (!json_is_array(json_object_get(j, "engines"))) {
            json_decref(j);
            j = NULL;
            err_set(e, ERR_INTERNAL, NULL, "%s printed no engines list", script);
        }
    }
    buf_free(&out);
    return j;
}

/* What a node that cannot run the probe can still say: its own engine runs. */
static json_t *engines_fallback(const struct err *why)
{
    json_t *list = json_array();
    json_array_append_new(list, json_pack("{s:s, s:b, s:b, s:n}", "name",
                                          vocab_name(VOCAB_ENGINE, VOCAB_ENGINE_DDPBENCH),
                                          "installed", 1, "launched", 1, "reason"));
    for (int i = 0; vocab_name(VOCAB_ENGINE, i); i++)
        if (i != VOCAB_ENGINE_DDPBENCH)
            json_array_append_new(
                list, json_pack("{s:s, s:b, s:b, s:s++}", "name", vocab_name(VOCAB_ENGINE, i),
                                "installed", 0, "launched", 0, "reason",
                                "the engine probe failed: ", why->msg,
                                "; install with deploy/install-deps.sh --engines"));
    return json_pack("{s:o}", "engines", list);
}

/* The script engine's row says whether this daemon allows it (--scripts-dir), which the
 * probe cannot know. */
static void engines_mark_script(const struct config *cfg, json_t *all)
{
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(all, "engines"), i, row)
    {
        const char *name = json_string_value(json_object_get(row, "name"));
        if (!name || strcmp(name, vocab_name(VOCAB_ENGINE, VOCAB_ENGINE_SCRIPT)) != 0)
            continue;
        bool on = cfg->scripts_dir[0] != '\0';
        json_object_set_new(row, "launched", json_boolean(on));
        json_object_set_new(row, "scripts_dir",
                            on ? json_string(cfg->scripts_dir) : json_null());
        json_object_set_new(row, "reason",
                            on ? json_null()
                               : json_string("off: the operator allows it with ddpbenchd "
                                             "--scripts-dir DIR"));
    }
}

void engines_mark_elastic(json_t *all)
{
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(all, "engines"), i, row)
    {
        const struct vocab_engine *g = vocab_engine(
            vocab_find(VOCAB_ENGINE, json_string_value(json_object_get(row, "name"))));
        enum vocab_elastic m = g ? g->elastic : VOCAB_ELASTIC_NONE;
        json_object_set_new(row, "elastic",
                            json_pack("{s:s, s:s}", "mode", vocab_elastic_name(m), "recovery",
                                      vocab_elastic_desc(m)));
    }
}

/* The probe's thread: runs it once, publishes the answer (or the fallback). */
static void *engines_probe_main(void *arg)
{
    struct engines *en = arg;
    struct err why = {0};
    json_decref(mpi_probe_json(en->mpi)); /* MPI's probe first: it is the quick one */
    json_t *p = engines_run_probe(en, &why);
    if (!p)
        p = engines_fallback(&why);
    pthread_mutex_lock(&en->mu);
    en->probe = p;
    pthread_cond_broadcast(&en->done);
    pthread_mutex_unlock(&en->mu);
    return NULL;
}

json_t *engines_get(struct engines *en, bool wait, struct err *e)
{
    pthread_mutex_lock(&en->mu);
    if (!en->started && !en->probe) {
        en->started = pthread_create(&en->thread, NULL, engines_probe_main, en) == 0;
        if (!en->started) { /* no thread: say so rather than block an HTTP thread */
            struct err why = {0};
            err_set(&why, ERR_UNAVAILABLE, NULL, "no thread to run it");
            en->probe = engines_fallback(&why);
        }
    }
    while (wait && !en->probe)
        pthread_cond_wait(&en->done, &en->mu);
    json_t *out = en->probe ? json_deep_copy(en->probe) : json_pack("{s:[]}", "engines");
    bool probing = !en->probe;
    pthread_mutex_unlock(&en->mu);
    if (!out) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    json_object_set_new(out, "probing", json_boolean(probing));
    json_object_set_new(out, "node", json_string(en->cfg->node));
    json_object_set_new(out, "python", json_string(en->cfg->python));
    engines_mark_script(en->cfg, out);
    engines_mark_elastic(out);
    /* while the probe thread runs, MPI's probe may be running in it: answer at once */
    json_object_set_new(out, "mpi", probing ? json_array() : mpi_probe_json(en->mpi));
    return out;
}

int engines_resolve_script(const struct config *cfg, const char *script, char *out,
                           struct err *e)
{
    if (!cfg->scripts_dir[0])
        return err_set(e, ERR_CONFLICT, "engine",
                       "engine script is off on node %s: its operator allows it with "
                       "ddpbenchd --scripts-dir DIR",
                       cfg->node);
    if (!script || !script[0])
        return err_set(e, ERR_INVALID, "script",
                       "engine script needs \"script\": a file under the daemon's "
                       "--scripts-dir");
    if (script[0] == '/')
        return err_set(e, ERR_INVALID, "script",
                       "script must be relative to the daemon's --scripts-dir, got '%s'",
                       script);
    char joined[PATH_MAX * 2];
    snprintf(joined, sizeof joined, "%s/%s", cfg->scripts_dir, script);
    struct stat st;
    /* missing and outside alike: two messages would tell which files exist outside */
    if (paths_resolve_beneath(joined, cfg->scripts_dir, out) < 0 || stat(out, &st) != 0 ||
        out[strlen(cfg->scripts_dir)] != '/')
        return err_set(e, ERR_INVALID, "script",
                       "script '%s': not found or not allowed (a file under the daemon's "
                       "--scripts-dir %s)",
                       script, cfg->scripts_dir);
    if (!S_ISREG(st.st_mode))
        return err_set(e, ERR_INVALID, "script", "script '%s' is not a regular file", script);
    return 0;
}

/* Whether name is in a probe row's list key (a row without the list, from a probe that
 * predates it, is taken at its word; a NULL name asks nothing). */
static bool engines_row_lists(const json_t *row, const char *key, const char *name)
{
    const json_t *have = json_object_get(row, key);
    if (!name || !json_is_array(have))
        return true;
    size_t i;
    json_t *b;
    json_array_foreach(have, i, b)
    {
        if (json_is_string(b) && strcmp(json_string_value(b), name) == 0)
            return true;
    }
    return false;
}

int engines_row_check(const json_t *row, const char *node, const json_t *spec, struct err *e)
{
    const char *engine = json_string_value(json_object_get(spec, "engine"));
    const char *backend = json_string_value(json_object_get(spec, "backend"));
    const char *mpi = json_string_value(json_object_get(spec, "mpi"));
    if (!row)
        return err_set(e, ERR_CONFLICT, "engine", "engine %s is not known on node %s", engine,
                       node);
    if (!json_is_true(json_object_get(row, "installed")) ||
        !json_is_true(json_object_get(row, "launched"))) {
        const char *reason = json_string_value(json_object_get(row, "reason"));
        return err_set(e, ERR_CONFLICT, "engine", "engine %s cannot run on node %s: %s", engine,
                       node, reason ? reason : "not installed");
    }
    if (!engines_row_lists(row, "backends", backend)) {
        const char *why = json_string_value(
            json_object_get(json_object_get(row, "backends_not_available"), backend));
        return err_set(e, ERR_CONFLICT, "backend",
                       "engine %s cannot run backend %s on node %s: %s", engine, backend, node,
                       why ? why : "not among its backends");
    }
    if (backend && strcmp(backend, "mpi") == 0 && !engines_row_lists(row, "mpis", mpi))
        return err_set(e, ERR_CONFLICT, "mpi",
                       "engine %s cannot run backend mpi over mpi %s on node %s: its build "
                       "there links another MPI library (GET /v1/engines: mpis)",
                       engine, mpi, node);
    return 0;
}

json_t *engines_row(const json_t *list, const char *engine)
{
    size_t i;
    json_t *row;
    json_array_foreach(list, i, row)
    {
        const char *name = json_string_value(json_object_get(row, "name"));
        if (name && strcmp(name, engine) == 0)
            return row;
    }
    return NULL;
}

int engines_check(struct engines *en, const json_t *spec, struct err *e)
{
    const char *engine = json_string_value(json_object_get(spec, "engine"));
    if (!engine || strcmp(engine, "ddpbench") == 0)
        return 0;
    if (strcmp(engine, "script") == 0) {
        char path[PATH_MAX];
        return engines_resolve_script(
            en->cfg, json_string_value(json_object_get(spec, "script")), path, e);
    }
    json_t *all = engines_get(en, true, e);
    if (!all)
        return -1;
    int rc = engines_row_check(engines_row(json_object_get(all, "engines"), engine),
                               en->cfg->node, spec, e);
    json_decref(all);
    return rc;
}

int engines_mpi_check(struct engines *en, const json_t *spec, struct err *e)
{
    const char *backend = json_string_value(json_object_get(spec, "backend"));
    const char *launcher = json_string_value(json_object_get(spec, "launcher"));
    bool uses = (backend && strcmp(backend, "mpi") == 0) ||
                (launcher && strcmp(launcher, "mpirun") == 0);
    if (uses &&
        mpi_probe_check(en->mpi, json_string_value(json_object_get(spec, "mpi")), e) < 0)
        return -1;
    const json_t *mca = json_object_get(spec, "mpi_mca");
    if (!uses || json_object_size(mca) == 0)
        return 0;
    /* each setting must be the run's implementation's (daemon/launch_plan.c hands OpenMPI
     * names to OpenMPI only, MPIR_CVAR_* to MPICH only): refused here, not at launch */
    const char *impl = json_string_value(json_object_get(spec, "mpi"));
    bool mpich = impl && strcmp(impl, "mpich") == 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)mca, key, v)
    {
        bool cvar = strncmp(key, "MPIR_CVAR_", 10) == 0;
        if (cvar != mpich) {
            char field[80];
            snprintf(field, sizeof field, "mpi_mca.%s", key);
            return err_set(e, ERR_INVALID, field, "%s: a setting of %s, but mpi is \"%s\"",
                           field, cvar ? "MPICH (MPIR_CVAR_*)" : "OpenMPI (an MCA name)",
                           impl ? impl : "");
        }
    }
    return mpi_probe_check_mca(en->mpi, mca, e);
}
