/* rendezvous: see rendezvous.h. Environment parsing, CPU lists, the join barrier, the
 * node map and failure records. The only store keys written here are "join/rank/<r>",
 * "node/<r>", the "join" barrier's keys and "fail/<r>". */
#include "worker/store/rendezvous.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/net.h"
#include "common/spec.h"

/* Copies variable `name` into out. A missing variable is an error when required, else
 * out gets def. */
static int rendezvous_env_str(const char *name, char *out, size_t outlen, bool required,
                              const char *def, struct err *e)
{
    const char *v = getenv(name);
    if (!v) {
        if (required)
            return err_set(e, ERR_INVALID, name,
                           "%s is not set (the daemon sets it when it launches a worker)",
                           name);
        v = def;
    }
    if (strlen(v) >= outlen)
        return err_set(e, ERR_INVALID, name, "%s is too long (at most %zu bytes)", name,
                       outlen - 1);
    memcpy(out, v, strlen(v) + 1);
    return 0;
}

static int rendezvous_parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int rendezvous_env_int(const char *name, long min, long max, bool required, long def,
                              int *out, struct err *e)
{
    const char *v = getenv(name);
    long x = def;
    if (!v && required)
        return err_set(e, ERR_INVALID, name,
                       "%s is not set (the daemon sets it when it launches a worker)", name);
    if (v && rendezvous_parse_int(v, min, max, &x) < 0)
        return err_set(e, ERR_INVALID, name, "%s='%.64s' is not an integer in %ld..%ld", name,
                       v, min, max);
    *out = (int)x;
    return 0;
}

static const struct rendezvous_launcher_vars rendezvous_launchers[] = {
    {"ddpbench", {"DDPB_RANK", NULL}, {"DDPB_LOCAL_RANK", NULL}, {NULL, NULL}},
    {"mpirun",
     {"OMPI_COMM_WORLD_RANK", "PMI_RANK"},
     {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"},
     {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}},
    {"srun", {"SLURM_PROCID", NULL}, {"SLURM_LOCALID", NULL}, {"SLURM_STEP_NUM_TASKS", NULL}},
};

/* The variables of DDPB_LAUNCHER's launcher. */
static const struct rendezvous_launcher_vars *rendezvous_launcher(struct err *e)
{
    const char *name = getenv("DDPB_LAUNCHER");
    if (!name || !name[0])
        name = "ddpbench";
    for (size_t i = 0; i < sizeof rendezvous_launchers / sizeof rendezvous_launchers[0]; i++)
        if (strcmp(rendezvous_launchers[i].launcher, name) == 0)
            return &rendezvous_launchers[i];
    err_set(e, ERR_INVALID, "DDPB_LAUNCHER",
            "DDPB_LAUNCHER='%.32s': want ddpbench, mpirun or srun", name);
    return NULL;
}

/* The first of the pair that is set; NULL when neither (or the pair is empty). */
static const char *rendezvous_pick(const char *const pair[2])
{
    for (int i = 0; i < 2; i++)
        if (pair[i] && getenv(pair[i]))
            return pair[i];
    return NULL;
}

/* An index in 0..max from the launcher's pair of variables; its absence names the first. */
static int rendezvous_env_index(const struct rendezvous_launcher_vars *lv,
                                const char *const pair[2], long max, int *out, struct err *e)
{
    const char *name = rendezvous_pick(pair);
    if (!name)
        return err_set(e, ERR_INVALID, pair[0],
                       "%s is not set (launcher %s sets it when it starts a rank)", pair[0],
                       lv->launcher);
    return rendezvous_env_int(name, 0, max, true, 0, out, e);
}

/* Under mpirun or srun: the launcher's rank count is the run's. */
static int rendezvous_env_size_check(const struct rendezvous_launcher_vars *lv, int world_size,
                                     struct err *e)
{
    const char *name = rendezvous_pick(lv->size);
    int n;
    if (!name)
        return 0;
    if (rendezvous_env_int(name, 1, SPEC_MAX_WORLD, true, 0, &n, e) < 0)
        return -1;
    if (n != world_size)
        return err_set(e, ERR_INVALID, name,
                       "%s=%d but DDPB_WORLD_SIZE is %d: launcher %s started another number of "
                       "ranks than the run has",
                       name, n, world_size, lv->launcher);
    return 0;
}

/* Entry `rank` of a ';'-separated map such as DDPB_CPU_MAP into cpus ("" when absent or
 * short): what the launcher's one environment says of each of its ranks. */
static void rendezvous_env_map_entry(const char *var, int rank, char *cpus, size_t cap)
{
    const char *map = getenv(var);
    for (int i = 0; map && i < rank; i++) {
        map = strchr(map, ';');
        map = map ? map + 1 : NULL;
    }
    if (!map)
        return;
    size_t len = strcspn(map, ";");
    if (len < cap)
        snprintf(cpus, cap, "%.*s", (int)len, map);
}

/* A rank of another launcher may run on any node its launcher reached, while DDPB_HOST
 * is the leader's (the launcher's environment): it listens on the address of its own
 * interface towards the store (the leader's), which every peer can reach as well. */
static int rendezvous_env_own_host(struct rendezvous_env *out, struct err *e)
{
    char host[256];
    int port;
    if (net_split_hostport(out->store, host, sizeof host, &port, false, e) < 0 ||
        net_route_addr(host, port, out->host, sizeof out->host, e) < 0)
        return err_prefix(e, "DDPB_STORE");
    return 0;
}

int rendezvous_env_read(struct rendezvous_env *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    const struct rendezvous_launcher_vars *lv = rendezvous_launcher(e);
    if (!lv)
        return -1;
    char host[256];
    int port;
    cpu_set_t set;
    if (rendezvous_env_str("DDPB_RUN", out->run, sizeof out->run, true, NULL, e) < 0 ||
        rendezvous_env_int("DDPB_WORLD_SIZE", 1, SPEC_MAX_WORLD, true, 0, &out->world_size, e) <
            0 ||
        rendezvous_env_index(lv, lv->rank, out->world_size - 1, &out->rank, e) < 0 ||
        rendezvous_env_index(lv, lv->local, SPEC_MAX_WORLD - 1, &out->local_rank, e) < 0 ||
        rendezvous_env_size_check(lv, out->world_size, e) < 0 ||
        rendezvous_env_str("DDPB_STORE", out->store, sizeof out->store, true, NULL, e) < 0 ||
        rendezvous_env_str("DDPB_SECRET", out->secret, sizeof out->secret, true, NULL, e) < 0 ||
        rendezvous_env_str("DDPB_SPEC", out->spec_path, sizeof out->spec_path, true, NULL, e) <
            0 ||
        rendezvous_env_str("DDPB_HOST", out->host, sizeof out->host, false,
                           RENDEZVOUS_DEFAULT_HOST, e) < 0 ||
        rendezvous_env_str("DDPB_CPUS", out->cpus, sizeof out->cpus, false, "", e) < 0 ||
        rendezvous_env_int("DDPB_NODE_RANK", 0, SPEC_MAX_WORLD - 1, false, 0, &out->node_rank,
                           e) < 0 ||
        rendezvous_env_str("DDPB_NODE_NAME", out->node_name, sizeof out->node_name, false, "",
                           e) < 0 ||
        rendezvous_env_int("DDPB_TIMEOUT_MS", 1, 86400000, false, RENDEZVOUS_DEFAULT_TIMEOUT_MS,
                           &out->timeout_ms, e) < 0 ||
        rendezvous_env_str("DDPB_REPORT", out->report, sizeof out->report, false, "", e) < 0 ||
        rendezvous_env_str("DDPB_LOG_DIR", out->log_dir, sizeof out->log_dir, false, "", e) < 0)
        return -1;
    if (!out->cpus[0])
        rendezvous_env_map_entry("DDPB_CPU_MAP", out->rank, out->cpus, sizeof out->cpus);
    char node[16] = "";
    rendezvous_env_map_entry("DDPB_NODE_MAP", out->rank, node, sizeof node);
    long node_rank;
    if (node[0] && !getenv("DDPB_NODE_RANK")) {
        if (rendezvous_parse_int(node, 0, SPEC_MAX_WORLD - 1, &node_rank) < 0)
            return err_set(e, ERR_INVALID, "DDPB_NODE_MAP",
                           "DDPB_NODE_MAP: rank %d's entry '%s' is not a node index", out->rank,
                           node);
        out->node_rank = (int)node_rank;
    }
    if (!out->node_name[0] && gethostname(out->node_name, sizeof out->node_name - 1) < 0)
        snprintf(out->node_name, sizeof out->node_name, "localhost");
    if (!out->run[0])
        return err_set(e, ERR_INVALID, "DDPB_RUN", "DDPB_RUN is empty");
    if (!out->spec_path[0])
        return err_set(e, ERR_INVALID, "DDPB_SPEC", "DDPB_SPEC is empty");
    if (!out->host[0])
        return err_set(e, ERR_INVALID, "DDPB_HOST", "DDPB_HOST is empty");
    if (net_split_hostport(out->store, host, sizeof host, &port, false, e) < 0)
        return err_set(e, ERR_INVALID, "DDPB_STORE", "DDPB_STORE='%.64s': want host:port",
                       out->store);
    if (out->cpus[0] && rendezvous_cpus_parse(out->cpus, &set, e) < 0) {
        if (e)
            snprintf(e->field, sizeof e->field, "DDPB_CPUS");
        return err_prefix(e, "DDPB_CPUS");
    }
    if (strcmp(lv->launcher, "ddpbench") != 0 && rendezvous_env_own_host(out, e) < 0)
        return -1;
    return 0;
}

/* One item of a CPU list: "n" or "a-b". */
static int rendezvous_cpus_item(const char *item, size_t len, cpu_set_t *set)
{
    char tmp[32];
    if (len == 0 || len >= sizeof tmp)
        return -1;
    memcpy(tmp, item, len);
    tmp[len] = '\0';
    char *dash = strchr(tmp, '-');
    long lo, hi;
    if (dash)
        *dash = '\0';
    if (rendezvous_parse_int(tmp, 0, CPU_SETSIZE - 1, &lo) < 0)
        return -1;
    hi = lo;
    if (dash && rendezvous_parse_int(dash + 1, lo, CPU_SETSIZE - 1, &hi) < 0)
        return -1;
    /* strtol accepts signs and spaces; a CPU list has digits only */
    for (size_t i = 0; i < len; i++)
        if (!(item[i] >= '0' && item[i] <= '9') && item[i] != '-')
            return -1;
    for (long c = lo; c <= hi; c++)
        CPU_SET((size_t)c, set);
    return 0;
}

int rendezvous_cpus_parse(const char *list, cpu_set_t *set, struct err *e)
{
    CPU_ZERO(set);
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (rendezvous_cpus_item(p, len, set) < 0)
            return err_set(e, ERR_INVALID, "cpus",
                           "bad CPU list '%.64s' at '%.*s': want items like 3 or 0-7 "
                           "separated by commas, CPUs below %d",
                           list, (int)(len > 32 ? 32 : len), p, CPU_SETSIZE);
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

void rendezvous_cpus_format(const cpu_set_t *set, char *out, size_t outlen)
{
    size_t off = 0;
    out[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET((size_t)c, set))
            continue;
        int end = c;
        while (end + 1 < CPU_SETSIZE && CPU_ISSET((size_t)end + 1, set))
            end++;
        int n = end == c ? snprintf(out + off, outlen - off, "%s%d", off ? "," : "", c)
                         : snprintf(out + off, outlen - off, "%s%d-%d", off ? "," : "", c, end);
        if (n < 0 || (size_t)n >= outlen - off)
            return; /* truncated: snprintf left a terminated prefix */
        off += (size_t)n;
        c = end;
    }
}

bool rendezvous_omp_places(const cpu_set_t *set, char *out, size_t outlen)
{
    size_t off = 0;
    out[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET((size_t)c, set))
            continue;
        int n = snprintf(out + off, outlen - off, "%s{%d}", off ? "," : "", c);
        if (n < 0 || (size_t)n >= outlen - off)
            return false;
        off += (size_t)n;
    }
    return true;
}

int rendezvous_pin_cpus(const char *list, struct err *e)
{
    cpu_set_t set;
    if (rendezvous_cpus_parse(list, &set, e) < 0)
        return -1;
    if (sched_setaffinity(0, sizeof set, &set) < 0)
        return err_errno(e, "pin to CPUs %.64s (DDPB_CPUS): sched_setaffinity", list);
    if (getenv("OMP_PLACES") || getenv("OMP_PROC_BIND") || getenv("GOMP_CPU_AFFINITY"))
        return 0; /* the user's placement wins */
    char places[4096];
    if (!rendezvous_omp_places(&set, places, sizeof places))
        return 0; /* over a thousand CPUs: left unbound rather than half-listed */
    if (setenv("OMP_PLACES", places, 1) < 0 || setenv("OMP_PROC_BIND", "close", 1) < 0)
        return err_errno(e, "OMP_PLACES for CPUs %.64s", list);
    return 0;
}

/* Lists the ranks whose "join/rank/<r>" key is missing; returns how many. */
static int rendezvous_missing(struct store_client *c, int world, char *out, size_t outlen,
                              struct err *e)
{
    int missing = 0;
    size_t off = 0;
    out[0] = '\0';
    for (int r = 0; r < world; r++) {
        char key[48];
        snprintf(key, sizeof key, "join/rank/%d", r);
        const char *keys[1] = {key};
        int all = 0;
        if (store_client_check(c, keys, 1, &all, e) < 0)
            return -1;
        if (all)
            continue;
        missing++;
        if (off + 24 < outlen)
            off += (size_t)snprintf(out + off, outlen - off, "%s%d", off ? ", " : "", r);
        else if (off + 5 < outlen && out[off - 1] != '.')
            off += (size_t)snprintf(out + off, outlen - off, ", ...");
    }
    return missing;
}

static int rendezvous_join_barrier(struct store_client *c, const struct rendezvous_env *env,
                                   struct err *e)
{
    char key[48], me[300];
    snprintf(key, sizeof key, "node/%d", env->rank);
    snprintf(me, sizeof me, "%d", env->node_rank);
    if (store_client_set_str(c, key, me, e) < 0)
        return err_prefix(e, "join");
    snprintf(key, sizeof key, "join/rank/%d", env->rank);
    snprintf(me, sizeof me, "%.255s pid %ld", env->node_name[0] ? env->node_name : "?",
             (long)getpid());
    if (store_client_set_str(c, key, me, e) < 0)
        return err_prefix(e, "join");
    if (store_client_barrier(c, "join", env->world_size, env->timeout_ms, e) == 0)
        return 0;
    if (e && e->code != ERR_TIMEOUT)
        return err_prefix(e, "join");
    char missing[200];
    struct err e2;
    int n = rendezvous_missing(c, env->world_size, missing, sizeof missing, &e2);
    if (n <= 0)
        return err_prefix(e, "join");
    return err_set(e, ERR_TIMEOUT, NULL,
                   "join: timed out after %d ms: rank(s) %s never joined (%d of %d missing)",
                   env->timeout_ms, missing, n, env->world_size);
}

struct store_client *rendezvous_join(const struct rendezvous_env *env,
                                     const atomic_bool *abort_flag, struct err *e)
{
    struct store_client *c = store_client_connect(env->store, env->run, env->secret, env->rank,
                                                  env->timeout_ms, abort_flag, e);
    if (!c) {
        err_prefix(e, "join");
        return NULL;
    }
    store_client_set_io_timeout(c, env->timeout_ms);
    if (rendezvous_join_barrier(c, env, e) < 0) {
        store_client_destroy(c);
        return NULL;
    }
    return c;
}

/* One item of DDPB_EMULATE_NODES: a block size 1..world. */
static int rendezvous_block(const char *s, size_t len, int world, long *out)
{
    char tmp[16];
    if (len == 0 || len >= sizeof tmp)
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (tmp[i] < '0' || tmp[i] > '9')
            return -1;
    return rendezvous_parse_int(tmp, 1, world, out);
}

static int rendezvous_emulate_bad(const char *value, int world, struct err *e)
{
    return err_set(e, ERR_INVALID, "DDPB_EMULATE_NODES",
                   "DDPB_EMULATE_NODES='%.64s': want ranks per node (\"2\") or each node's "
                   "ranks (\"3,1,2\", adding up to the world size %d)",
                   value, world);
}

int rendezvous_nodes_emulate(const char *value, int world, int *node_of, struct err *e)
{
    long k;
    if (!strchr(value, ',')) {
        if (rendezvous_block(value, strlen(value), world, &k) < 0)
            return rendezvous_emulate_bad(value, world, e);
        for (int r = 0; r < world; r++)
            node_of[r] = r / (int)k;
        return 0;
    }
    int rank = 0, node = 0;
    for (const char *p = value;; node++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (rendezvous_block(p, len, world, &k) < 0 || rank + k > world)
            return rendezvous_emulate_bad(value, world, e);
        for (long i = 0; i < k; i++)
            node_of[rank++] = node;
        if (!comma)
            break;
        p = comma + 1;
    }
    return rank == world ? 0 : rendezvous_emulate_bad(value, world, e);
}

int rendezvous_nodes(struct store_client *c, const struct rendezvous_env *env, int *node_of,
                     struct err *e)
{
    const char *emulate = getenv("DDPB_EMULATE_NODES");
    if (emulate && emulate[0])
        return rendezvous_nodes_emulate(emulate, env->world_size, node_of, e);
    for (int r = 0; r < env->world_size; r++) {
        char key[48], *val = NULL;
        size_t len;
        long node;
        snprintf(key, sizeof key, "node/%d", r);
        if (store_client_get(c, key, env->timeout_ms, &val, &len, e) < 0)
            return err_prefix(e, "node map: node of rank %d", r);
        int bad = rendezvous_parse_int(val, 0, SPEC_MAX_WORLD - 1, &node);
        free(val);
        if (bad < 0)
            return err_set(e, ERR_PROTOCOL, NULL, "node map: rank %d published a bad node", r);
        node_of[r] = (int)node;
    }
    return 0;
}

void rendezvous_record_failure(struct store_client *c, int rank, int peer, const char *msg)
{
    char key[48], val[512];
    struct err ignored;
    snprintf(key, sizeof key, "fail/%d", rank);
    snprintf(val, sizeof val, "%d %s", peer, msg);
    store_client_set_str(c, key, val, &ignored);
}

/* Reads rank p's failure record: 1 with *blamed and msg filled, 0 when there is none. */
static int rendezvous_read_failure(struct store_client *c, int p, int64_t deadline, int *blamed,
                                   char *msg, size_t msglen)
{
    char key[48], *val = NULL;
    size_t len;
    struct err ignored;
    snprintf(key, sizeof key, "fail/%d", p);
    if (store_client_get(c, key, clock_ms_left(deadline), &val, &len, &ignored) < 0)
        return 0;
    char *sp = strchr(val, ' ');
    long b = -1;
    if (sp)
        *sp = '\0';
    if (!sp || rendezvous_parse_int(val, -1, SPEC_MAX_WORLD - 1, &b) < 0)
        b = -1;
    snprintf(msg, msglen, "%s", sp ? sp + 1 : "");
    free(val);
    *blamed = (int)b;
    return 1;
}

int rendezvous_origin(struct store_client *c, int self, int peer, int world_size, int wait_ms,
                      char *why, size_t whylen)
{
    int64_t deadline = clock_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    int origin = peer;
    size_t off = 0;
    why[0] = '\0';
    for (int hop = 0; hop < world_size && origin >= 0 && origin < world_size; hop++) {
        int blamed;
        char msg[400];
        if (!rendezvous_read_failure(c, origin, deadline, &blamed, msg, sizeof msg))
            break;
        if (off < whylen)
            off += (size_t)snprintf(why + off, whylen - off, "%srank %d failed: %s",
                                    off ? "; " : "", origin, msg);
        if (blamed < 0 || blamed >= world_size || blamed == self || blamed == peer ||
            blamed == origin)
            break;
        origin = blamed;
    }
    return origin;
}
