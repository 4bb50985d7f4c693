/* mpi_probe: see mpi_probe.h. */
#include "daemon/mpi_probe.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/vocab.h"
#include "daemon/capture.h"
#include "ddpb_config.h"

struct mpi_impl {
    bool available;
    char version[128];       /* "" when the launcher could not say */
    char launcher[PATH_MAX]; /* its path, "" when not on PATH */
    char module[PATH_MAX];   /* its path, "" when not found */
    char reason[PATH_MAX + 256];
    char install[160];
};

struct mpi_probe {
    char worker_dir[PATH_MAX];
    pthread_mutex_t mu;
    bool probed; /* under mu */
    struct mpi_impl impl[VOCAB_NMPIS];
    char **mca; /* owned, sorted: OpenMPI's parameter names (ompi_info) */
    size_t n_mca;
};

struct mpi_probe *mpi_probe_create(const char *worker_path)
{
    struct mpi_probe *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->worker_dir, sizeof p->worker_dir, "%s", worker_path);
    char *slash = strrchr(p->worker_dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(p->worker_dir, sizeof p->worker_dir, ".");
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

void mpi_probe_destroy(struct mpi_probe *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_mca; i++)
        free(p->mca[i]);
    free(p->mca);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The first directory of PATH holding an executable prog, into out; 0 or -1. */
static int mpi_probe_which(const char *prog, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        int w = snprintf(out, cap, "%.*s/%s", (int)n, path, prog);
        if (n && w > 0 && (size_t)w < cap && access(out, X_OK) == 0)
            return 0;
        path += n + (path[n] == ':');
    }
    out[0] = '\0';
    return -1;
}

/* Runs argv; its stdout (owned, NUL-terminated) or NULL when it did not exit 0. */
static char *mpi_probe_output(char *const argv[])
{
    struct buf out = {0};
    struct err e;
    int status = 0;
    int rc = capture_run(argv, MPI_PROBE_TIMEOUT_MS, NULL, NULL, &out, &status, &e);
    if (rc < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        buf_append(&out, "", 1) < 0) {
        buf_free(&out);
        return NULL;
    }
    return (char *)out.data;
}

/* The version `launcher --version` prints: in the first line naming a version ("Version:
 * 4.0.2" of hydra's build details), else the first non-empty one ("mpirun.openmpi
 * (OpenRTE) 4.1.4"), its first word starting with a digit (else the whole line). */
static void mpi_probe_version(const char *launcher, char *out, size_t cap)
{
    char *argv[] = {(char *)launcher, "--version", NULL};
    char *text = mpi_probe_output(argv);
    out[0] = '\0';
    if (!text)
        return;
    const char *pick = NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        line += strspn(line, " \t");
        if (!*line)
            continue;
        if (!pick)
            pick = line;
        if (strstr(line, "Version:")) {
            pick = line + strlen("Version:");
            pick += strspn(pick, " \t");
            break;
        }
    }
    /* the version number itself: the line's first word that starts with a digit */
    for (const char *w = pick; w && *w; w += strcspn(w, " \t"), w += strspn(w, " \t")) {
        if (*w >= '0' && *w <= '9') {
            snprintf(out, cap, "%.*s", (int)strcspn(w, " \t"), w);
            break;
        }
    }
    if (pick && !out[0])
        snprintf(out, cap, "%s", pick);
    free(text);
}

static int mpi_probe_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* OpenMPI's parameter names: field 5 of ompi_info's "mca:<fw>:<comp>:param:<name>:..."
 * lines (synonyms included). */
static void mpi_probe_mca_names(struct mpi_probe *p)
{
    char *argv[] = {"ompi_info", "--all", "--parsable", NULL};
    char *text = mpi_probe_output(argv);
    if (!text)
        return;
    size_t cap = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f[5] = {0};
        char *cur = line;
        for (int i = 0; i < 5 && cur; i++) {
            f[i] = cur;
            char *c = strchr(cur, ':');
            cur = c ? (*c = '\0', c + 1) : NULL;
        }
        if (!cur || strcmp(f[0], "mca") != 0 || strcmp(f[3], "param") != 0)
            continue;
        if (p->n_mca > 0 && strcmp(p->mca[p->n_mca - 1], f[4]) == 0)
            continue; /* a parameter's lines follow each other: keep one */
        if (p->n_mca == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            char **grown = realloc(p->mca, ncap * sizeof *grown);
            if (!grown)
                break;
            p->mca = grown;
            cap = ncap;
        }
        if (!(p->mca[p->n_mca] = strdup(f[4])))
            break;
        p->n_mca++;
    }
    free(text);
    qsort(p->mca, p->n_mca, sizeof *p->mca, mpi_probe_cmp);
    size_t kept = 0; /* a synonym may name a parameter listed elsewhere too */
    for (size_t i = 0; i < p->n_mca; i++) {
        if (kept > 0 && strcmp(p->mca[kept - 1], p->mca[i]) == 0)
            free(p->mca[i]);
        else
            p->mca[kept++] = p->mca[i];
    }
    p->n_mca = kept;
}

/* The module where worker/module/module.c would find it: beside the worker, or installed. */
static int mpi_probe_module(const struct mpi_probe *p, const char *file, char *out, size_t cap)
{
    const char *dirs[] = {p->worker_dir, DDPB_MODULE_DIR};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        int n = snprintf(out, cap, "%s/%s", dirs[i], file);
        if (n > 0 && (size_t)n < cap && access(out, R_OK) == 0)
            return 0;
    }
    out[0] = '\0';
    return -1;
}

static void mpi_probe_one(struct mpi_probe *p, int id)
{
    const struct vocab_mpi *row = vocab_mpi(id);
    struct mpi_impl *m = &p->impl[id];
    bool launcher = mpi_probe_which(row->launcher, m->launcher, sizeof m->launcher) == 0;
    bool module = mpi_probe_module(p, row->module, m->module, sizeof m->module) == 0;
    if (launcher)
        mpi_probe_version(m->launcher, m->version, sizeof m->version);
    m->available = launcher && module;
    if (!launcher) {
        snprintf(m->reason, sizeof m->reason, "%s is not on PATH", row->launcher);
        snprintf(m->install, sizeof m->install, "apt-get install %s", row->runtime);
    } else if (!module) {
        char why[sizeof m->reason]; /* not straight into m: gcc sees p on both sides */
        snprintf(why, sizeof why,
                 "no %s beside the worker (%s) or in %s: ddpbench was built without %s",
                 row->module, p->worker_dir, DDPB_MODULE_DIR, row->name);
        memcpy(m->reason, why, sizeof why);
        snprintf(m->install, sizeof m->install,
                 "apt-get install %s, then rebuild ddpbench (meson setup --reconfigure)",
                 row->dev);
    }
    if (id == VOCAB_MPI_OPENMPI && launcher)
        mpi_probe_mca_names(p);
}

/* Probes once; the caller holds p->mu. */
static void mpi_probe_ensure(struct mpi_probe *p)
{
    if (p->probed)
        return;
    for (int id = 0; id < VOCAB_NMPIS; id++)
        mpi_probe_one(p, id);
    p->probed = true;
}

static json_t *mpi_probe_str(const char *s)
{
    return s[0] ? json_string(s) : json_null();
}

json_t *mpi_probe_json(struct mpi_probe *p)
{
    json_t *list = json_array();
    pthread_mutex_lock(&p->mu);
    mpi_probe_ensure(p);
    for (int id = 0; list && id < VOCAB_NMPIS; id++) {
        const struct mpi_impl *m = &p->impl[id];
        json_array_append_new(
            list, json_pack("{s:s, s:b, s:o, s:o, s:o, s:o, s:o}", "name",
                            vocab_name(VOCAB_MPI, id), "available", m->available, "version",
                            mpi_probe_str(m->version), "launcher", mpi_probe_str(m->launcher),
                            "module", mpi_probe_str(m->module), "reason",
                            mpi_probe_str(m->reason), "install", mpi_probe_str(m->install)));
    }
    pthread_mutex_unlock(&p->mu);
    return list;
}

int mpi_probe_check(struct mpi_probe *p, const char *impl, struct err *e)
{
    int id = vocab_find(VOCAB_MPI, impl);
    if (id < 0) {
        char names[64];
        return err_set(e, ERR_INVALID, "mpi", "mpi \"%s\" is unknown (%s)", impl ? impl : "",
                       vocab_join(VOCAB_MPI, ", ", names, sizeof names));
    }
    pthread_mutex_lock(&p->mu);
    mpi_probe_ensure(p);
    const struct mpi_impl *m = &p->impl[id];
    int rc = m->available ? 0
                          : err_set(e, ERR_CONFLICT, "mpi",
                                    "mpi \"%s\" is not available on this node: %s (%s)", impl,
                                    m->reason, m->install);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int mpi_probe_check_mca(struct mpi_probe *p, const json_t *mca, struct err *e)
{
    pthread_mutex_lock(&p->mu);
    mpi_probe_ensure(p);
    int rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)mca, key, v)
    {
        if (p->n_mca == 0 || strncmp(key, "MPIR_CVAR_", 10) == 0)
            continue;
        if (!bsearch(&key, p->mca, p->n_mca, sizeof *p->mca, mpi_probe_cmp)) {
            char field[80];
            snprintf(field, sizeof field, "mpi_mca.%s", key);
            rc = err_set(e, ERR_INVALID, field,
                         "%s: OpenMPI on this node has no MCA parameter \"%s\" (ompi_info "
                         "--all --parsable lists them)",
                         field, key);
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}
