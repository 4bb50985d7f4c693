/* main: ddpbench-worker, one process per rank (docs/design.md §2). One path for every
 * backend and device: read the launch environment and the resolved spec, report hello and
 * env, join the run through the store, build the communicator the spec names
 * (comm/comm_factory.h), run the workload, pass the final barrier, report done.
 *
 * Decision: a worker is a batch program, so every failure goes through one fail-fast
 * path (WORKER_FAIL_IF): record the failure in the store (so other ranks can tell who
 * failed first), emit an error event naming the operation and the peer, print
 * "rank R: file:line: message (hint)" on stderr and exit 1 without a clean shutdown of
 * the communicator: peers must see this rank's connections drop, not a goodbye.
 * An elastic training run (spec elastic, worker/elastic.h) is the exception for failures
 * of the communicator: the training regroups with the next generation instead, and so
 * does the final barrier; a replacement rank (DDPB_ELASTIC_JOIN=1) skips the launch's
 * join and enters the generation the daemon names for it. */
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <jansson.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/log.h"
#include "common/net.h"
#include "common/report.h"
#include "common/spec.h"
#include "ddpb_config.h"
#include "worker/comm/comm.h"
#include "worker/comm/comm_factory.h"
#include "worker/data/mount_stats.h"
#include "worker/device_check.h"
#include "worker/elastic.h"
#include "worker/gpu_modules.h"
#include "worker/heartbeat.h"
#include "worker/store/rendezvous.h"
#include "worker/store/store_client.h"
#include "worker/train_module.h"
#include "worker/workload_collective.h"
#include "worker/workload_train.h"

/* Raised by SIGTERM/SIGINT. A static because a signal handler can reach nothing else;
 * everything else gets a pointer to it. */
static atomic_bool worker_abort_flag;

/* How long a rank waits for the failure records of ranks that timed out at about the
 * same time as it did, to name the one that was stuck first. */
#define WORKER_BLAME_WAIT_MS 2000

struct worker {
    struct rendezvous_env env;
    bool env_ok;
    struct report_writer w;
    struct spec spec;
    struct store_client *store;  /* owned */
    struct comm *comm;           /* owned */
    struct comm *stage_comm;     /* owned: a pipeline run's stage replicas, else NULL */
    int node_of[SPEC_MAX_WORLD]; /* the node of each rank (rendezvous_nodes) */
    struct heartbeat hb;         /* liveness for the daemon, once hello is out */
    long long memory_limit_mib;  /* RLIMIT_AS set from DDPB_MEMORY_LIMIT_MIB; 0: none */
    /* the process's CPUs ("0-1"), read once pinned and before libgomp loads: OpenMP then
     * binds the main thread to the first of them (rendezvous_pin_cpus), so a later
     * sched_getaffinity would give that one CPU, not the rank's */
    char affinity[1024];
    /* An elastic run (spec elastic): el owns the communicator from the join on (comm is
     * then NULL; worker_comm gives the current generation's). */
    bool elastic;
    struct elastic el;
    struct err e;
};

/* The communicator of the rank's current generation (elastic), else its only one. */
static struct comm *worker_comm(const struct worker *wk)
{
    return wk->elastic ? wk->el.comm : wk->comm;
}

static const char *worker_hint(enum err_code code)
{
    switch (code) {
    case ERR_PEER: return "another rank failed or was killed; its own error says why";
    case ERR_TIMEOUT:
        return "a rank is stuck, slow or missing; check the other ranks or raise the spec's "
               "comm_timeout_s";
    case ERR_INVALID: return "check the launch environment and the spec";
    case ERR_UNAUTHORIZED:
        return "the run is not registered in the store or DDPB_SECRET is wrong";
    case ERR_ABORTED: return "the worker was asked to stop";
    case ERR_NOMEM: return "not enough memory for the requested message sizes";
    case ERR_PROTOCOL: return "a peer or the store does not speak this version's protocol";
    case ERR_IO: return "a system call failed";
    case ERR_TOO_LARGE: return "an input is over its size limit";
    default: return "see the message";
    }
}

/* Rewrites the blame to the rank that failed first, when the failure records say the
 * blamed peer only failed because of another rank. */
static int worker_follow_blame(struct worker *wk, int peer)
{
    if (!wk->store || peer < 0)
        return peer;
    char why[600];
    /* ERR_PEER: the peer's connection dropped, so it has exited and its record (written
     * before exit) is there already; a timeout may race with the peer's own timeout. */
    int wait_ms = wk->e.code == ERR_TIMEOUT ? WORKER_BLAME_WAIT_MS : 0;
    int origin = rendezvous_origin(wk->store, wk->env.rank, peer, wk->env.world_size, wait_ms,
                                   why, sizeof why);
    if (origin != peer && why[0]) {
        char msg[sizeof wk->e.msg];
        snprintf(msg, sizeof msg, "%s (%s)", wk->e.msg, why);
        memcpy(wk->e.msg, msg, sizeof msg);
    }
    return origin;
}

/* A failure for want of memory under the rank's limit names the limit, so that the run's
 * error says why (the daemon set it from the spec's estimate: daemon/monitor.c). */
static void worker_name_memory_limit(struct worker *wk)
{
    if (wk->memory_limit_mib <= 0)
        return;
    if (wk->e.code != ERR_NOMEM && !strstr(wk->e.msg, "memory") &&
        !strstr(wk->e.msg, "Cannot allocate") && !strstr(wk->e.msg, "temporarily unavailable"))
        return;
    char msg[sizeof wk->e.msg];
    snprintf(msg, sizeof msg, "%s (memory limit %lld MiB: the spec's estimate and a margin)",
             wk->e.msg, wk->memory_limit_mib);
    memcpy(wk->e.msg, msg, sizeof msg);
}

/* DDPB_MEMORY_LIMIT_MIB: limits this rank's address space (RLIMIT_AS), with malloc held
 * to two arenas so that the address space follows what is used (each thread's arena
 * would reserve 64 MiB). Not under a sanitizer, which reserves terabytes of shadow. */
static void worker_limit_memory(struct worker *wk)
{
    const char *v = getenv("DDPB_MEMORY_LIMIT_MIB");
    long long mib = v ? strtoll(v, NULL, 10) : 0;
    if (mib <= 0)
        return;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    log_info("memory limit %lld MiB not applied: a sanitizer build", mib);
#else
    mallopt(M_ARENA_MAX, 2);
    struct rlimit rl = {.rlim_cur = (rlim_t)mib << 20, .rlim_max = (rlim_t)mib << 20};
    if (setrlimit(RLIMIT_AS, &rl) < 0) {
        log_warn("memory limit %lld MiB: setrlimit: %s", mib, strerror(errno));
        return;
    }
    wk->memory_limit_mib = mib;
    log_info("memory limit %lld MiB (RLIMIT_AS)", mib);
#endif
}

__attribute__((noreturn)) static void worker_fail(struct worker *wk, const char *file, int line)
{
    worker_name_memory_limit(wk);
    const char *base = strrchr(file, '/');
    char where[128];
    snprintf(where, sizeof where, "%s:%d", base ? base + 1 : file, line);
    const char *op = NULL;
    int peer = -1;
    const struct comm *c = worker_comm(wk);
    if (c && c->error_op[0]) {
        op = c->error_op;
        peer = c->error_peer;
        if (wk->elastic && peer >= 0 && peer < wk->el.cur.n) /* the group's rank: a slot */
            peer = wk->el.cur.members[peer];
    }
    if (wk->store)
        rendezvous_record_failure(wk->store, wk->env.rank, peer, wk->e.msg);
    peer = worker_follow_blame(wk, peer);
    struct err ignored;
    report_emit_error(&wk->w, &wk->e, where, op, peer, &ignored);
    char rank[16] = "?";
    if (wk->env_ok)
        snprintf(rank, sizeof rank, "%d", wk->env.rank);
    fprintf(stderr, "rank %s: %s: %s (%s)\n", rank, where, wk->e.msg, worker_hint(wk->e.code));
    exit(1);
}

#define WORKER_FAIL_IF(wk, cond)                                                               \
    do {                                                                                       \
        if (cond)                                                                              \
            worker_fail((wk), __FILE__, __LINE__);                                             \
    } while (0)

/* comm.h on_stuck (ctx: the worker): an operation of a backend that cannot be left (MPI's
 * blocking collectives) overran the timeout, seen by the backend's watchdog thread while
 * another thread sits in the call: report it naming the operation and end the process
 * without the store record or a clean exit (both would wait on the stuck thread). */
static void worker_on_stuck(struct comm *c, const struct err *e, void *ctx)
{
    struct worker *wk = ctx;
    struct err ignored;
    report_emit_error(&wk->w, e, "mpi watchdog", c->error_op, -1, &ignored);
    fprintf(stderr, "rank %d: %s (%s)\n", wk->env.rank, e->msg, worker_hint(e->code));
    _exit(1);
}

static void worker_on_signal(int sig)
{
    atomic_store(&worker_abort_flag, true);
}

static void worker_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = worker_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a closed socket or report pipe is an error, not a death */
}

/* The report pipe is fd 3 when the daemon opened it, else stdout (a worker run by hand).
 * A rank of another launcher (DDPB_REPORT set) reports over its channel instead, and its
 * fd 3, if open, is the launcher's (mpirun's I/O forwarding), never written to. */
static int worker_report_fd(void)
{
    if (!getenv("DDPB_REPORT") && fcntl(3, F_GETFD) >= 0) {
        fcntl(3, F_SETFD, FD_CLOEXEC);
        return 3;
    }
    return STDOUT_FILENO;
}

/* A rank of another launcher writes its stdout and stderr to its own log, where the
 * daemon serves every rank's log from (mpirun or srun would interleave them into one).
 * DDPB_LOG_DIR is the leader's run directory: on another node without a shared file
 * system it does not exist, and the rank keeps the launcher's stdout and stderr, which
 * mpirun forwards to the run's launcher.log on the leader. */
static int worker_open_log(const struct worker *wk, struct err *e)
{
    if (!wk->env.log_dir[0])
        return 0;
    char path[600];
    snprintf(path, sizeof path, "%s/rank%d.log", wk->env.log_dir, wk->env.rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {
        fprintf(stderr, "rank %d: no %s on this node: its log stays in the launcher's\n",
                wk->env.rank, wk->env.log_dir);
        return 0;
    }
    if (fd < 0)
        return err_errno(e, "DDPB_LOG_DIR: open %s", path);
    fflush(stdout);
    fflush(stderr);
    int rc = dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0 ? -1 : 0;
    close(fd);
    return rc < 0 ? err_errno(e, "DDPB_LOG_DIR: dup2 %s", path) : 0;
}

/* The report channel of a rank the daemon did not fork (DDPB_REPORT): a connection to
 * the daemon whose first line proves the rank belongs to the run (its secret), then the
 * lines fd 3 would carry (common/report.h). The socket is owned by the writer for the
 * life of the process: the kernel closes it at exit, which the daemon reads as the end. */
static int worker_open_channel(struct worker *wk, struct err *e)
{
    char host[256];
    int port;
    if (!wk->env.report[0])
        return 0;
    if (net_split_hostport(wk->env.report, host, sizeof host, &port, false, e) < 0)
        return err_prefix(e, "DDPB_REPORT");
    int fd = net_connect(host, port, wk->env.timeout_ms, true, &worker_abort_flag, e);
    if (fd < 0)
        return err_prefix(e, "report channel %s", wk->env.report);
    char hostname[256] = "";
    gethostname(hostname, sizeof hostname - 1);
    json_t *hello = json_pack("{s:{s:s, s:i, s:s, s:i, s:s}}", "channel", "run", wk->env.run,
                              "rank", wk->env.rank, "secret", wk->env.secret, "pid",
                              (int)getpid(), "host", hostname);
    char *line = hello ? json_dumps(hello, JSON_COMPACT) : NULL;
    json_decref(hello);
    int rc = line ? 0 : err_set(e, ERR_NOMEM, NULL, "report channel: out of memory");
    if (rc == 0 && (net_send_all(fd, line, strlen(line), -1, NULL, e) < 0 ||
                    net_send_all(fd, "\n", 1, -1, NULL, e) < 0))
        rc = err_prefix(e, "report channel %s", wk->env.report);
    free(line);
    if (rc < 0) {
        close(fd);
        return -1;
    }
    wk->w.fd = fd;
    return 0;
}

/* Reads the resolved spec the daemon wrote to path into wk->spec. */
static int worker_read_spec(struct worker *wk, const char *path, struct err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_errno(e, "spec file %s", path);
    char *text = malloc(SPEC_MAX_BODY + 1);
    size_t len = text ? fread(text, 1, SPEC_MAX_BODY + 1, f) : 0;
    int rc = 0;
    if (!text)
        rc = err_set(e, ERR_NOMEM, NULL, "spec file %s: out of memory", path);
    else if (ferror(f))
        rc = err_errno(e, "spec file %s: read", path);
    else if (len > SPEC_MAX_BODY)
        rc = err_set(e, ERR_TOO_LARGE, NULL, "spec file %s is over %u bytes", path,
                     SPEC_MAX_BODY);
    fclose(f);
    json_t *norm = rc == 0 ? spec_parse(text, len, e) : NULL;
    free(text);
    if (rc == 0 && !norm)
        return err_prefix(e, "spec file %s", path);
    if (rc == 0 && spec_from_json(norm, &wk->spec, e) < 0)
        rc = err_prefix(e, "spec file %s", path);
    json_decref(norm);
    return rc;
}

static int worker_check_spec(const struct worker *wk, struct err *e)
{
    const struct spec *s = &wk->spec;
    if (s->world_size != wk->env.world_size)
        return err_set(e, ERR_INVALID, "world_size",
                       "the spec says world_size %d but DDPB_WORLD_SIZE is %d", s->world_size,
                       wk->env.world_size);
    if (worker_device_check(s, e) < 0) /* device_check.h: what this build can run */
        return -1;
    /* the survivors' communicator is a group of the world's (comm_create_group) */
    if (s->elastic.on && strcmp(s->backend, "tcp") != 0)
        return err_set(e, ERR_INVALID, "elastic",
                       "elastic: backend %s cannot regroup the survivors; use tcp", s->backend);
    if (s->workload != SPEC_WORKLOAD_COLLECTIVE && s->workload != SPEC_WORKLOAD_TRAIN)
        return err_set(e, ERR_INVALID, "workload", "workload %d not supported", s->workload);
    return 0;
}

/* The spec's comm_timeout_s bounds the join, every store request and every
 * communication operation; DDPB_TIMEOUT_MS, when set, overrides it (tests use short
 * timeouts). */
static void worker_apply_timeout(struct worker *wk)
{
    if (!getenv("DDPB_TIMEOUT_MS") && wk->spec.comm_timeout_s > 0)
        wk->env.timeout_ms = wk->spec.comm_timeout_s * 1000;
}

static void worker_cpu_model(char *out, size_t outlen)
{
    snprintf(out, outlen, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        colon++;
        while (*colon == ' ' || *colon == '\t')
            colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(out, outlen, "%s", colon);
        break;
    }
    fclose(f);
}

/* The OpenMP placement a rank's threads run under (rendezvous_pin_cpus sets it for a
 * pinned rank, else the user's or none): each variable that is set (the env event takes
 * no null). */
static void worker_env_add_omp(json_t *env)
{
    static const char *const vars[][2] = {{"omp_places", "OMP_PLACES"},
                                          {"omp_proc_bind", "OMP_PROC_BIND"},
                                          {"omp_wait_policy", "OMP_WAIT_POLICY"}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i][1]);
        if (v)
            json_object_set_new(env, vars[i][0], json_string(v));
    }
}

/* The rank's CPUs into wk->affinity (see there). */
static void worker_read_affinity(struct worker *wk)
{
    cpu_set_t set;
    wk->affinity[0] = '\0';
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        rendezvous_cpus_format(&set, wk->affinity, sizeof wk->affinity);
}

/* Owned object of the versions and machine facts the env event carries. */
static json_t *worker_env_object(const struct worker *wk)
{
    struct utsname u;
    char kernel[400] = "unknown", cpu[256], host[256] = "unknown";
    const char *affinity = wk->affinity;
    if (uname(&u) == 0)
        snprintf(kernel, sizeof kernel, "%s %s %s", u.sysname, u.release, u.machine);
    worker_cpu_model(cpu, sizeof cpu);
    gethostname(host, sizeof host - 1);
    json_t *env = json_pack(
        "{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:i}", "ddpbench_version", DDPB_VERSION,
        "compiler", DDPB_COMPILER, "kernel", kernel, "cpu_model", cpu, "cpus_online",
        (json_int_t)sysconf(_SC_NPROCESSORS_ONLN), "glibc", gnu_get_libc_version(), "jansson",
        jansson_version_str(), "hostname", host, "affinity", affinity, "pid", (int)getpid());
    if (env)
        worker_env_add_omp(env);
    return env;
}

/* The storage layer the rank's reads go through (dataset.storage_layer resolved): its
 * mount when the daemon gave one, else the C loader's own emulation, or none. */
static const char *worker_storage_layer(const struct worker *wk)
{
    enum spec_storage_layer l = spec_storage_layer_of(&wk->spec.train.dataset);
    if (getenv(DATA_MOUNT_ENV) && getenv(DATA_MOUNT_ENV)[0])
        return spec_storage_layer_name(SPEC_STORAGE_MOUNT);
    return spec_storage_layer_name(l == SPEC_STORAGE_NONE ? l : SPEC_STORAGE_IN_PROCESS);
}

/* A CPU training run's ISA levels and convolution algorithms (workload_train.h). */
static void worker_env_add_cpu(json_t *env, const struct train_outcome *out)
{
    json_object_set_new(env, "cpu_isa", json_string(out->cpu_isa));
    json_object_set_new(env, "onednn_isa", json_string(out->onednn_isa));
    json_t *algos = json_object();
    for (int i = 0; i < out->nconv_algos; i++)
        json_object_set_new(algos, out->conv_algos[i].name,
                            json_integer(out->conv_algos[i].layers));
    json_object_set_new(env, "conv_algos", algos);
}

/* After a training run (out, sent again at its end: the daemon keeps the last env event
 * of a rank): a GPU run's "gpu_peak_mem_bytes", a bf16 CPU run's "bf16_path" (which path
 * ran) and a CPU run's ISA and algorithms (worker_env_add_cpu). out NULL: the first env. */
static int worker_emit_env_after(struct worker *wk, const struct train_outcome *out,
                                 struct err *e)
{
    json_t *env = worker_env_object(wk);
    if (!env)
        return err_set(e, ERR_NOMEM, NULL, "env report: cannot build the object");
    if (out && out->device_peak_bytes >= 0)
        json_object_set_new(env, "gpu_peak_mem_bytes",
                            json_integer((json_int_t)out->device_peak_bytes));
    if (out && out->bf16_path)
        json_object_set_new(env, "bf16_path", json_string(out->bf16_path));
    if (out && out->cpu_isa)
        worker_env_add_cpu(env, out);
    if (wk->spec.workload == SPEC_WORKLOAD_TRAIN)
        json_object_set_new(env, "storage_layer", json_string(worker_storage_layer(wk)));
    json_t *mpi = comm_factory_env_mpi(&wk->spec); /* backend mpi: library, transport */
    if (mpi)
        json_object_set_new(env, "mpi", mpi);
    const struct comm *c = worker_comm(wk);
    if (c && c->transport[0]) /* what transport "auto" came to */
        json_object_set_new(env, "transport", json_string(c->transport));
    if (strcmp(wk->spec.device, "cuda") == 0) /* GPU, NVML sample, NCCL version, emulated */
        gpu_modules_env_add(env);
    return report_emit(&wk->w, REPORT_ENV, json_pack("{s:o}", "env", env), e);
}

static int worker_emit_env(struct worker *wk, struct err *e)
{
    return worker_emit_env_after(wk, NULL, e);
}

/* Dies with the daemon, and does not start at all when it is already gone. */
static void worker_tie_to_parent(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        exit(1);
}

static void worker_start(struct worker *wk)
{
    memset(wk, 0, sizeof *wk);
    log_set_tag("worker r?");
    net_raise_nofile(); /* one socket per peer: a large world needs more than 1024 fds */
    report_writer_init(&wk->w, worker_report_fd(), 0);
    WORKER_FAIL_IF(wk, rendezvous_env_read(&wk->env, &wk->e) < 0);
    wk->env_ok = true;
    WORKER_FAIL_IF(wk, worker_open_log(wk, &wk->e) < 0);
    WORKER_FAIL_IF(wk, worker_open_channel(wk, &wk->e) < 0);
    char tag[32];
    snprintf(tag, sizeof tag, "worker r%d", wk->env.rank);
    log_set_tag(tag);
    wk->w.rank = wk->env.rank;
}

/* The collective benchmark's buffers: device memory on device "cuda" (the GPU modules,
 * gpu_modules.h, which the device check loaded), host memory (NULL) otherwise. */
static const struct collective_mem *worker_collective_mem(struct worker *wk,
                                                          struct collective_mem *mem)
{
    if (strcmp(wk->spec.device, "cuda") != 0)
        return NULL;
    WORKER_FAIL_IF(wk, gpu_modules_collective_mem(mem, &wk->e) < 0);
    return mem;
}

/* A pipeline run's second communicator: the ranks holding this rank's stage, one per
 * replica (rank = replica * pipeline + stage), which exchange that stage's gradients. */
static int worker_stage_comm(struct worker *wk, struct err *e)
{
    int P = wk->spec.train.pipeline;
    if (wk->spec.workload != SPEC_WORKLOAD_TRAIN || P <= 1)
        return 0;
    int stage = wk->env.rank % P, n = wk->env.world_size / P, ranks[SPEC_MAX_WORLD];
    for (int d = 0; d < n; d++)
        ranks[d] = d * P + stage;
    char ns[32];
    snprintf(ns, sizeof ns, "pp/s%d/", stage);
    wk->stage_comm = comm_create_group(&wk->spec, &wk->env, &worker_abort_flag, wk->store,
                                       ranks, n, ns, wk->node_of, e);
    if (!wk->stage_comm)
        return err_prefix(e, "stage %d's communicator", stage);
    wk->stage_comm->note = &wk->hb.note;
    wk->stage_comm->on_stuck = worker_on_stuck;
    wk->stage_comm->on_stuck_ctx = wk;
    return 0;
}

/* An elastic rank that is not a member of the generation published (elastic.h): it
 * reported "left"; it ends without done, status 0. */
__attribute__((noreturn)) static void worker_leave(struct worker *wk)
{
    log_info("elastic: this slot left the run at generation %d", wk->el.cur.gen);
    heartbeat_stop(&wk->hb);
    elastic_rank_cleanup(&wk->el);
    store_client_destroy(wk->store);
    exit(0);
}

static void worker_run_workload(struct worker *wk)
{
    if (wk->spec.workload == SPEC_WORKLOAD_TRAIN) {
        heartbeat_set_phase(&wk->hb, "training");
        struct train_outcome out;
        const struct train_module *train = train_module_load(&wk->e); /* the check loaded it */
        WORKER_FAIL_IF(wk, !train);
        int rc = train->run(&wk->spec, worker_comm(wk), wk->stage_comm, &wk->w, &wk->hb,
                            wk->elastic ? &wk->el : NULL, &out, &wk->e);
        if (rc < 0 && wk->elastic && wk->el.left) /* not in the run's generation: done */
            worker_leave(wk);
        WORKER_FAIL_IF(wk, rc < 0);
        /* a GPU run's peak memory, a CPU run's ISA and algorithms go out with the env */
        if (out.device_peak_bytes >= 0 || out.bf16_path || out.cpu_isa)
            WORKER_FAIL_IF(wk, worker_emit_env_after(wk, &out, &wk->e) < 0);
    } else {
        heartbeat_set_phase(&wk->hb, "collective benchmark");
        struct collective_mem mem;
        const struct collective_mem *hooks = worker_collective_mem(wk, &mem);
        WORKER_FAIL_IF(wk, workload_collective_run_mem(&wk->spec, wk->comm, wk->store, &wk->w,
                                                       hooks, &wk->e) < 0);
    }
}

/* The hooks every communicator of the rank gets (elastic.h: each generation's too). */
static struct elastic_comm_hooks worker_hooks(struct worker *wk)
{
    return (struct elastic_comm_hooks){
        .note = &wk->hb.note, .on_stuck = worker_on_stuck, .on_stuck_ctx = wk};
}

/* The launch's join and world communicator (generation 0 of an elastic run). */
static void worker_join_world(struct worker *wk)
{
    /* the backend's first step comes before the join (tcp opens its data port, so it is
     * up and drops strays while the other ranks arrive); on failure the exit frees it */
    struct comm_factory *setup = comm_factory_begin(&wk->spec, &wk->env, &worker_abort_flag,
                                                    &wk->e);
    WORKER_FAIL_IF(wk, !setup);
    wk->store = rendezvous_join(&wk->env, &worker_abort_flag, &wk->e);
    WORKER_FAIL_IF(wk, !wk->store);
    WORKER_FAIL_IF(wk, rendezvous_nodes(wk->store, &wk->env, wk->node_of, &wk->e) < 0);
    heartbeat_set_phase(&wk->hb, "connecting to peers");
    wk->comm = comm_factory_finish(setup, wk->store, wk->node_of, &wk->e);
    WORKER_FAIL_IF(wk, !wk->comm);
    wk->comm->note = &wk->hb.note; /* what the workload waits in goes out with each beat */
    wk->comm->on_stuck = worker_on_stuck;
    wk->comm->on_stuck_ctx = wk;
    log_info("joined: %d ranks, %s communicator up", wk->env.world_size, wk->comm->backend);
    if (!wk->elastic)
        return;
    struct elastic_comm_hooks hooks = worker_hooks(wk);
    elastic_rank_init(&wk->el, &wk->spec, &wk->env, &worker_abort_flag, wk->store, wk->node_of,
                      &wk->w, &hooks, wk->comm);
    wk->comm = NULL; /* the elastic state owns it now */
}

/* A replacement of an elastic run (DDPB_ELASTIC_JOIN=1, elastic.h): no part in
 * generation 0's join; it connects to the store, publishes its node, and enters the
 * generation the daemon names for its slot. */
static void worker_join_elastic(struct worker *wk)
{
    wk->store = store_client_connect(wk->env.store, wk->env.run, wk->env.secret, wk->env.rank,
                                     wk->env.timeout_ms, &worker_abort_flag, &wk->e);
    WORKER_FAIL_IF(wk, !wk->store);
    store_client_set_io_timeout(wk->store, wk->env.timeout_ms);
    char key[48], node[16];
    snprintf(key, sizeof key, "node/%d", wk->env.rank);
    snprintf(node, sizeof node, "%d", wk->env.node_rank);
    WORKER_FAIL_IF(wk, store_client_set_str(wk->store, key, node, &wk->e) < 0);
    WORKER_FAIL_IF(wk, rendezvous_nodes(wk->store, &wk->env, wk->node_of, &wk->e) < 0);
    struct elastic_comm_hooks hooks = worker_hooks(wk);
    elastic_rank_init(&wk->el, &wk->spec, &wk->env, &worker_abort_flag, wk->store, wk->node_of,
                      &wk->w, &hooks, NULL);
    heartbeat_set_phase(&wk->hb, "elastic: waiting to join");
    WORKER_FAIL_IF(wk, elastic_join(&wk->el, &wk->e) < 0);
    if (wk->el.left)
        worker_leave(wk);
    log_info("joined generation %d as rank %d of %d", wk->el.cur.gen, wk->el.comm->rank,
             wk->el.comm->world_size);
}

/* Every rank leaves together (see main); an elastic rank whose generation loses a member
 * in the barrier goes on to the next generation and passes that one's. */
static void worker_final_barrier(struct worker *wk)
{
    heartbeat_set_phase(&wk->hb, "final barrier");
    for (;;) {
        if (comm_barrier(worker_comm(wk), &wk->e) == 0)
            return;
        WORKER_FAIL_IF(wk, !wk->elastic || !elastic_recoverable(&wk->e));
        WORKER_FAIL_IF(wk, elastic_next(&wk->el, true, &wk->e) < 0);
        if (wk->el.left)
            worker_leave(wk);
    }
}

int main(void)
{
    worker_tie_to_parent();
    worker_signals();
    struct worker wk;
    worker_start(&wk);
    if (wk.env.cpus[0])
        WORKER_FAIL_IF(&wk, rendezvous_pin_cpus(wk.env.cpus, &wk.e) < 0);
    worker_read_affinity(&wk);
    WORKER_FAIL_IF(&wk, worker_read_spec(&wk, wk.env.spec_path, &wk.e) < 0);
    WORKER_FAIL_IF(&wk, worker_check_spec(&wk, &wk.e) < 0);
    worker_apply_timeout(&wk);
    wk.elastic = wk.spec.elastic.on && wk.spec.workload == SPEC_WORKLOAD_TRAIN;
    const char *join = getenv("DDPB_ELASTIC_JOIN");
    bool replacement = wk.elastic && join && strcmp(join, "1") == 0;
    WORKER_FAIL_IF(&wk, report_emit_hello(&wk.w, wk.env.world_size, &wk.e) < 0);
    WORKER_FAIL_IF(&wk, heartbeat_start(&wk.hb, &wk.w, 1000, &wk.e) < 0);
    WORKER_FAIL_IF(&wk, worker_emit_env(&wk, &wk.e) < 0);
    heartbeat_set_phase(&wk.hb, "rendezvous");
    if (replacement)
        worker_join_elastic(&wk);
    else
        worker_join_world(&wk);
    /* again: MPI's transport, or the host backend's shared memory, is known by now */
    if (strcmp(wk.spec.backend, "mpi") == 0 || worker_comm(&wk)->transport[0])
        WORKER_FAIL_IF(&wk, worker_emit_env(&wk, &wk.e) < 0);
    WORKER_FAIL_IF(&wk, worker_stage_comm(&wk, &wk.e) < 0);
    worker_limit_memory(&wk);
    worker_run_workload(&wk);
    /* Every rank leaves together, whatever the backend: a rank that exits while a peer
     * still finishes the last operation can reset a connection that holds the peer's
     * last bytes (a close with unread data sends RST; NCCL's proxies and the store have
     * sockets too), which the peer reports as this rank failing. */
    worker_final_barrier(&wk);
    heartbeat_stop(&wk.hb); /* done is the last line this rank writes */
    WORKER_FAIL_IF(&wk, report_emit_done(&wk.w, &wk.e) < 0);
    comm_destroy(wk.stage_comm);
    comm_destroy(wk.comm);
    if (wk.elastic)
        elastic_rank_cleanup(&wk.el);
    store_client_destroy(wk.store);
    return 0;
}
