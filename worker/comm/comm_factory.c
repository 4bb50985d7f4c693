/* comm_factory: see comm_factory.h. The NCCL communicator is a module (comm_nccl.h),
 * loaded by the first check of a spec with backend "nccl": a tcp run never opens it.
 * What its messages say to rebuild depends on whether this build has NCCL
 * (DDPB_HAVE_NCCL): a build without it names the meson options, one with it where the
 * module is installed. */
#include "worker/comm/comm_factory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/vocab.h"
#include "ddpb_config.h"
#include "worker/comm/comm_mpi.h"
#include "worker/comm/comm_nccl.h"
#include "worker/comm/tcp.h"
#include "worker/module/module.h"

enum comm_factory_backend { COMM_FACTORY_TCP, COMM_FACTORY_NCCL, COMM_FACTORY_MPI };

struct comm_factory {
    enum comm_factory_backend backend;
    struct comm_tcp *listener; /* owned (tcp): the open data port */
    int rank, world_size, timeout_ms;
    const atomic_bool *abort_flag;     /* borrowed */
    char algorithm[16];                /* "" = the backend's automatic choice */
    bool time_ops;                     /* the collective benchmark: NCCL times each op */
    const struct comm_mpi_module *mpi; /* mpi: the implementation's module (process's) */
    int n_mpi_params;                  /* mpi: the spec's mpi_mca, copied (the spec is
                                          borrowed only for comm_factory_begin) */
    struct spec_mpi_param mpi_params[SPEC_MAX_MPI_PARAMS];
};

static const struct module_spec comm_factory_nccl_spec = {
    .file = "ddpb_comm_nccl.so",
    .symbol = "ddpb_module_nccl",
    .field = "backend",
    .what = "the NCCL communicator (backend \"nccl\")",
    .install = "NCCL 2: pip install nvidia-nccl-cu13 (on the loader's path), or libnccl2",
#if DDPB_HAVE_NCCL
    .rebuild = "it is built with meson -Dcuda=enabled -Dnccl=enabled and installed there by "
               "ninja install",
#else
    .rebuild = "this ddpbench-worker was built without NCCL: rebuild with meson "
               "-Dcuda=enabled -Dnccl=enabled, or -Dnccl_prefix=",
#endif
};

const struct comm_nccl_module *comm_factory_nccl_module(struct err *e)
{
    return module_load(&comm_factory_nccl_spec, e);
}

int comm_backend_check(const char *name, struct err *e)
{
    /* mpi: which implementation and whether its module is here is the spec's "mpi" field's
     * question, answered when the factory loads it (comm_factory_mpi_module) */
    if (strcmp(name, "tcp") == 0 || strcmp(name, "mpi") == 0)
        return 0;
    if (strcmp(name, "nccl") == 0)
        return comm_factory_nccl_module(e) ? 0 : -1;
    char names[64];
    return err_set(e, ERR_INVALID, "backend", "backend \"%s\" is unknown (%s)", name,
                   vocab_join(VOCAB_BACKEND, ", ", names, sizeof names));
}

const struct comm_mpi_module *comm_factory_mpi_module(const char *impl, struct err *e)
{
    const struct vocab_mpi *row = vocab_mpi(vocab_find(VOCAB_MPI, impl));
    if (!row) {
        char names[64];
        err_set(e, ERR_INVALID, "mpi", "mpi \"%s\" is unknown (%s)", impl,
                vocab_join(VOCAB_MPI, ", ", names, sizeof names));
        return NULL;
    }
    char what[64], install[160], rebuild[160];
    snprintf(what, sizeof what, "the %s communicator", row->name);
    snprintf(install, sizeof install, "apt-get install %s", row->runtime);
    snprintf(rebuild, sizeof rebuild, "rebuild ddpbench with %s installed", row->dev);
    struct module_spec m = {.file = row->module,
                            .symbol = row->symbol,
                            .what = what,
                            .install = install,
                            .rebuild = rebuild,
                            .field = "mpi"};
    return module_load(&m, e);
}

json_t *comm_factory_env_mpi(const struct spec *s)
{
    struct err e;
    if (strcmp(s->backend, "mpi") != 0)
        return NULL;
    const struct comm_mpi_module *mod = comm_factory_mpi_module(s->mpi, &e);
    return mod ? mod->env() : json_pack("{s:s, s:s}", "implementation", s->mpi, "error", e.msg);
}

/* The TCP backend's busy-polling: automatic, except where the communication thread runs
 * beside backward (training strategies that overlap), where a spinning communication
 * thread would take the CPU from the computation it is meant to hide behind (measured:
 * resnet18, 2 pinned ranks, ddp: 121 to 154 images/s without spinning against 112 to 115
 * with 200 us of busy-polling). */
static int comm_factory_spin_us(const struct spec *s)
{
    if (s->workload != SPEC_WORKLOAD_TRAIN)
        return 0;
    const struct vocab_strategy *st = vocab_strategy(
        vocab_find(VOCAB_STRATEGY, s->train.strategy));
    return st && st->overlaps_backward ? -1 : 0;
}

/* The first step for a mesh of world_size ranks in which this one is rank, its store
 * keys and handshake under ns ("" = the run's world mesh): comm_factory_begin's for the
 * world, comm_create_group's for a group, so both read the spec the same way. */
static enum comm_factory_backend comm_factory_kind(const char *backend)
{
    if (strcmp(backend, "nccl") == 0)
        return COMM_FACTORY_NCCL;
    return strcmp(backend, "mpi") == 0 ? COMM_FACTORY_MPI : COMM_FACTORY_TCP;
}

static struct comm_factory *comm_factory_open(const struct spec *s,
                                              const struct rendezvous_env *env,
                                              const atomic_bool *abort_flag, int rank,
                                              int world_size, const char *ns, struct err *e)
{
    if (comm_backend_check(s->backend, e) < 0)
        return NULL;
    struct comm_factory *f = calloc(1, sizeof *f);
    if (!f) {
        err_set(e, ERR_NOMEM, NULL, "backend %s: out of memory", s->backend);
        return NULL;
    }
    *f = (struct comm_factory){.backend = comm_factory_kind(s->backend),
                               .rank = rank,
                               .world_size = world_size,
                               .timeout_ms = env->timeout_ms,
                               .abort_flag = abort_flag};
    /* only the collective benchmark forces an algorithm (the spec allows it nowhere else) */
    if (s->workload == SPEC_WORKLOAD_COLLECTIVE)
        snprintf(f->algorithm, sizeof f->algorithm, "%s", s->coll.algorithm);
    f->time_ops = s->workload == SPEC_WORKLOAD_COLLECTIVE;
    if (f->backend == COMM_FACTORY_MPI) { /* a missing module fails before the join */
        f->mpi = comm_factory_mpi_module(s->mpi, e);
        f->n_mpi_params = s->n_mpi_params;
        memcpy(f->mpi_params, s->mpi_params, sizeof f->mpi_params);
        if (!f->mpi) {
            free(f);
            return NULL;
        }
    }
    if (f->backend == COMM_FACTORY_TCP) {
        struct comm_tcp_config cfg = {.rank = rank,
                                      .world_size = world_size,
                                      .listen_host = env->host,
                                      .timeout_ms = env->timeout_ms,
                                      .abort_flag = abort_flag,
                                      .algorithm = f->algorithm[0] ? f->algorithm : NULL,
                                      .secret = env->secret,
                                      .spin_us = comm_factory_spin_us(s),
                                      .ns = ns,
                                      .transport = s->transport[0] ? s->transport : NULL};
        f->listener = comm_tcp_listen(&cfg, e);
        if (!f->listener) {
            free(f);
            return NULL;
        }
    }
    return f;
}

struct comm_factory *comm_factory_begin(const struct spec *s, const struct rendezvous_env *env,
                                        const atomic_bool *abort_flag, struct err *e)
{
    return comm_factory_open(s, env, abort_flag, env->rank, env->world_size, "", e);
}

/* The rank's GPU is device 0 of what CUDA_VISIBLE_DEVICES (set by the daemon) lets it
 * see; the workload computes on the legacy default stream (NULL), which the communicator
 * fences its operations against. */
static struct comm *comm_factory_nccl(const struct comm_factory *f, struct store_client *store,
                                      struct err *e)
{
    const struct comm_nccl_module *nccl = comm_factory_nccl_module(e);
    if (!nccl)
        return NULL;
    struct comm_nccl_config cfg = {.rank = f->rank,
                                   .world_size = f->world_size,
                                   .timeout_ms = f->timeout_ms,
                                   .abort_flag = f->abort_flag,
                                   .device = 0,
                                   .compute_stream = NULL,
                                   .algorithm = f->algorithm[0] ? f->algorithm : "auto",
                                   .tag = "0",
                                   .time_ops = f->time_ops};
    return nccl->create(&cfg, store, e);
}

/* MPI's ranks are the launcher's: they must be the ones the launch environment says, or
 * the run's reports and failures would name the wrong ranks. ranks: a group's world ranks
 * (NULL: the world). */
static struct comm *comm_factory_mpi(const struct comm_factory *f, const int *ranks, int n,
                                     struct err *e)
{
    struct comm_mpi_param params[SPEC_MAX_MPI_PARAMS];
    for (int i = 0; i < f->n_mpi_params; i++)
        params[i] = (struct comm_mpi_param){f->mpi_params[i].key, f->mpi_params[i].value};
    struct comm_mpi_config cfg = {.timeout_ms = f->timeout_ms,
                                  .abort_flag = f->abort_flag,
                                  .ranks = ranks,
                                  .n_ranks = n,
                                  .params = params,
                                  .n_params = f->n_mpi_params};
    struct comm *c = f->mpi->create(&cfg, e);
    if (!c)
        return NULL;
    if (c->rank != f->rank || c->world_size != f->world_size) {
        err_set(e, ERR_INVALID, "launcher",
                "mpi: %s says rank %d of %d, the launch environment rank %d of %d (was the "
                "rank started by the %s launcher?)",
                f->mpi->implementation, c->rank, c->world_size, f->rank, f->world_size,
                f->mpi->implementation);
        comm_destroy(c);
        return NULL;
    }
    if (f->algorithm[0] && strcmp(f->algorithm, "auto") != 0) {
        err_set(e, ERR_INVALID, "algorithm",
                "backend mpi uses MPI's own algorithms: algorithm \"%s\" cannot be forced "
                "(use auto, or steer MPI through mpi_mca)",
                f->algorithm);
        comm_destroy(c);
        return NULL;
    }
    return c;
}

struct comm *comm_factory_finish(struct comm_factory *f, struct store_client *store,
                                 const int *node_of, struct err *e)
{
    struct comm *c = NULL;
    if (f->backend == COMM_FACTORY_TCP) {
        if (node_of && comm_tcp_set_nodes(f->listener, node_of, e) < 0) {
            comm_factory_discard(f);
            return NULL;
        }
        c = comm_tcp_connect_store(f->listener, store, e); /* takes the listener */
        f->listener = NULL;
    } else if (f->backend == COMM_FACTORY_MPI) {
        c = comm_factory_mpi(f, NULL, 0, e);
    } else {
        c = comm_factory_nccl(f, store, e);
    }
    comm_factory_discard(f);
    return c;
}

void comm_factory_discard(struct comm_factory *f)
{
    if (!f)
        return;
    comm_tcp_discard(f->listener);
    free(f);
}

struct comm *comm_create_from_spec(const struct spec *s, const struct rendezvous_env *env,
                                   const atomic_bool *abort_flag, struct store_client *store,
                                   struct err *e)
{
    struct comm_factory *f = comm_factory_begin(s, env, abort_flag, e);
    return f ? comm_factory_finish(f, store, NULL, e) : NULL;
}

/* The checks of comm_create_group's ranks; *me: env->rank's index in them. */
static int comm_group_check(const struct rendezvous_env *env, const int *ranks, int n, int *me,
                            struct err *e)
{
    *me = -1;
    if (!ranks || n < 1 || n > env->world_size)
        return err_set(e, ERR_INVALID, "ranks", "group: %d ranks, want 1..%d", ranks ? n : 0,
                       env->world_size);
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= env->world_size)
            return err_set(e, ERR_INVALID, "ranks", "group: rank %d outside 0..%d", ranks[i],
                           env->world_size - 1);
        if (i > 0 && ranks[i] <= ranks[i - 1])
            return err_set(e, ERR_INVALID, "ranks",
                           "group: ranks not strictly ascending (%d after %d)", ranks[i],
                           ranks[i - 1]);
        if (ranks[i] == env->rank)
            *me = i;
    }
    if (*me < 0)
        return err_set(e, ERR_INVALID, "ranks", "group: rank %d is not a member", env->rank);
    return 0;
}

struct comm *comm_create_group(const struct spec *s, const struct rendezvous_env *env,
                               const atomic_bool *abort_flag, struct store_client *store,
                               const int *ranks, int n, const char *ns, const int *node_of,
                               struct err *e)
{
    int me;
    if (comm_group_check(env, ranks, n, &me, e) < 0)
        return NULL;
    /* "" would be the world mesh's keys; the rest of ns (length, bytes) tcp checks */
    if (!ns || !ns[0]) {
        err_set(e, ERR_INVALID, "ns", "group: namespace empty (the world mesh's)");
        return NULL;
    }
    /* nccl would need its own communicator split; no pipeline runs on it yet */
    if (strcmp(s->backend, "tcp") != 0 && strcmp(s->backend, "mpi") != 0) {
        err_set(e, ERR_INVALID, "backend",
                "group: backend \"%.16s\" has no groups (tcp and mpi only)", s->backend);
        return NULL;
    }
    struct comm_factory *f = comm_factory_open(s, env, abort_flag, me, n, ns, e);
    if (!f)
        return NULL;
    if (f->backend != COMM_FACTORY_MPI) {
        int sub[SPEC_MAX_WORLD];
        for (int i = 0; node_of && i < n; i++)
            sub[i] = node_of[ranks[i]];
        return comm_factory_finish(f, store, node_of ? sub : NULL, e); /* takes f */
    }
    /* mpi: the members' communicator out of the world's (MPI_Comm_create_group) */
    struct comm *c = comm_factory_mpi(f, ranks, n, e);
    comm_factory_discard(f);
    return c;
}
