/* launcher: see launcher.h. */
#include "daemon/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define LAUNCH_ENV_EXTRA (22 + LAUNCH_MAX_GPU_ENV + LAUNCH_MAX_EXTRA_ENV)

/* Owned NULL-terminated environment: the daemon's own minus DDPB_* (but
 * DDPB_EMULATE_NODES, launcher.h) and CUDA_VISIBLE_DEVICES, plus the rank's. Strings in `own`
 * are owned by the caller's array too (freed by launcher_env_free). */
struct launch_env {
    char **vars;
    size_t n, own_from; /* vars[own_from..n) were allocated here */
};

static int launcher_env_add(struct launch_env *env, const char *key, const char *value)
{
    size_t len = strlen(key) + strlen(value) + 2;
    char *s = malloc(len);
    if (!s)
        return -1;
    snprintf(s, len, "%s=%s", key, value);
    env->vars[env->n++] = s;
    return 0;
}

static void launcher_env_free(struct launch_env *env)
{
    if (!env->vars)
        return;
    for (size_t i = env->own_from; i < env->n; i++)
        free(env->vars[i]);
    free(env->vars);
}

/* A framework engine's rank (launch_rank.engine). */
static bool launcher_is_framework(const struct launch_rank *lr)
{
    return lr->engine && strcmp(lr->engine, "ddpbench") != 0;
}

/* The variables a framework reads to find its peers: set by the launcher and the
 * bootstrap only, never inherited from the daemon's own environment. */
static bool launcher_is_framework_var(const char *kv)
{
    static const char *const names[] = {"RANK=",
                                        "WORLD_SIZE=",
                                        "LOCAL_RANK=",
                                        "LOCAL_WORLD_SIZE=",
                                        "MASTER_ADDR=",
                                        "MASTER_PORT=",
                                        "TF_CONFIG=",
                                        "HOROVOD_",
                                        NULL};
    for (int i = 0; names[i]; i++)
        if (strncmp(kv, names[i], strlen(names[i])) == 0)
            return true;
    return false;
}

static int launcher_env_build(const struct launch_rank *lr, struct launch_env *env,
                              struct err *e)
{
    size_t count = 0;
    while (environ[count])
        count++;
    env->vars = calloc(count + LAUNCH_ENV_EXTRA + 1, sizeof *env->vars);
    env->n = 0;
    if (!env->vars)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    for (size_t i = 0; i < count; i++) {
        bool emulate = strncmp(environ[i], "DDPB_EMULATE_NODES=", 19) == 0;
        if ((strncmp(environ[i], "DDPB_", 5) == 0 && !emulate) ||
            strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) == 0 ||
            strncmp(environ[i], "NCCL_HOSTID=", 12) == 0 ||
            strncmp(environ[i], "NCCL_MULTI_RANK_GPU_ENABLE=", 27) == 0 ||
            (launcher_is_framework(lr) && launcher_is_framework_var(environ[i])))
            continue;
        env->vars[env->n++] = environ[i];
    }
    env->own_from = env->n;
    char num[4][24];
    snprintf(num[0], sizeof num[0], "%d", lr->rank);
    snprintf(num[1], sizeof num[1], "%d", lr->world_size);
    snprintf(num[2], sizeof num[2], "%d", lr->local_rank);
    snprintf(num[3], sizeof num[3], "%d", lr->node_rank);
    bool one_rank = !lr->argv; /* else the run's launcher: it numbers the ranks */
    int rc = launcher_env_add(env, "DDPB_RUN", lr->run) |
             launcher_env_add(env, "DDPB_WORLD_SIZE", num[1]) |
             launcher_env_add(env, "DDPB_STORE", lr->store_addr) |
             launcher_env_add(env, "DDPB_SECRET", lr->secret) |
             launcher_env_add(env, "DDPB_SPEC", lr->spec_path) |
             launcher_env_add(env, "DDPB_HOST", lr->peer_host);
    if (one_rank)
        rc |= launcher_env_add(env, "DDPB_RANK", num[0]) |
              launcher_env_add(env, "DDPB_LOCAL_RANK", num[2]) |
              launcher_env_add(env, "DDPB_NODE_RANK", num[3]);
    if (lr->cpus && one_rank)
        rc |= launcher_env_add(env, "DDPB_CPUS", lr->cpus);
    if (lr->node_name)
        rc |= launcher_env_add(env, "DDPB_NODE_NAME", lr->node_name);
    if (lr->shm_dir && lr->shm_dir[0]) /* a run's launcher passes it on to its ranks */
        rc |= launcher_env_add(env, "DDPB_SHM_DIR", lr->shm_dir);
    if (lr->data_dirs && lr->data_dirs[0])
        rc |= launcher_env_add(env, "DDPB_DATA_DIRS", lr->data_dirs);
    if (lr->memory_limit_mib > 0) {
        char mib[24];
        snprintf(mib, sizeof mib, "%lld", (long long)lr->memory_limit_mib);
        rc |= launcher_env_add(env, "DDPB_MEMORY_LIMIT_MIB", mib);
    }
    if (launcher_is_framework(lr))
        rc |= launcher_env_add(env, "DDPB_ENGINE", lr->engine) |
              launcher_env_add(env, "DDPB_ENGINES_DIR", lr->engines_dir) |
              launcher_env_add(env, "WORLD_SIZE", num[1]) |
              launcher_env_add(env, "PYTHONUNBUFFERED", "1");
    if (launcher_is_framework(lr) && one_rank)
        rc |= launcher_env_add(env, "RANK", num[0]) |
              launcher_env_add(env, "LOCAL_RANK", num[2]);
    if (launcher_is_framework(lr) && lr->script)
        rc |= launcher_env_add(env, "DDPB_SCRIPT", lr->script);
    if (lr->ngpu_env < 0 || lr->ngpu_env > LAUNCH_MAX_GPU_ENV)
        return err_set(e, ERR_INVALID, NULL, "launch: %d GPU environment entries",
                       lr->ngpu_env);
    if (lr->nextra_env < 0 || lr->nextra_env > LAUNCH_MAX_EXTRA_ENV)
        return err_set(e, ERR_INVALID, NULL, "launch: %d extra environment entries",
                       lr->nextra_env);
    for (int i = 0; i < lr->nextra_env && rc == 0; i++) {
        char key[64];
        const char *eq = strchr(lr->extra_env[i], '=');
        if (!eq || (size_t)(eq - lr->extra_env[i]) >= sizeof key)
            return err_set(e, ERR_INVALID, NULL, "launch: bad environment entry %.64s",
                           lr->extra_env[i]);
        snprintf(key, sizeof key, "%.*s", (int)(eq - lr->extra_env[i]), lr->extra_env[i]);
        rc |= launcher_env_add(env, key, eq + 1);
    }
    for (int i = 0; i < lr->ngpu_env && rc == 0; i++) {
        /* the daemon's own NCCL_HOSTID / NCCL_MULTI_RANK_GPU_ENABLE are dropped above */
        char key[64];
        const char *eq = strchr(lr->gpu_env[i], '=');
        if (!eq || (size_t)(eq - lr->gpu_env[i]) >= sizeof key)
            return err_set(e, ERR_INVALID, NULL, "launch: bad GPU environment entry %s",
                           lr->gpu_env[i]);
        snprintf(key, sizeof key, "%.*s", (int)(eq - lr->gpu_env[i]), lr->gpu_env[i]);
        rc |= launcher_env_add(env, key, eq + 1);
    }
    if (rc)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    return 0;
}

static int launcher_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

void launcher_spawn_setup(posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr, int logfd,
                          int fd3)
{
    /* dup2 clears close-on-exec on the targets; closefrom drops everything else. */
    posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(fa, logfd, 1);
    posix_spawn_file_actions_adddup2(fa, logfd, 2);
    if (fd3 >= 0)
        posix_spawn_file_actions_adddup2(fa, fd3, 3);
    posix_spawn_file_actions_addclosefrom_np(fa, fd3 >= 0 ? 4 : 3);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(attr, &none);
    posix_spawnattr_setsigdefault(attr, &all);
    posix_spawnattr_setpgroup(attr, 0);
    posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                       POSIX_SPAWN_SETSIGDEF);
}

void launcher_log_tail(const char *path, char *out, size_t cap)
{
    char buf[2048];
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    const char *last = strrchr(buf, '\n');
    snprintf(out, cap, "%s", last ? last + 1 : buf);
}

int launcher_spawn(const struct launch_rank *lr, struct launched *out, struct err *e)
{
    int pfd[2] = {-1, -1}, logfd = -1, rc = -1;
    struct launch_env env = {0};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);

    if (launcher_env_build(lr, &env, e) < 0)
        goto out;
    if (!lr->argv && pipe2(pfd, O_CLOEXEC) < 0) {
        err_errno(e, "rank %d: report pipe", lr->rank);
        goto out;
    }
    logfd = open(lr->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0) {
        err_errno(e, "rank %d: open log %s", lr->rank, lr->log_path);
        goto out;
    }
    launcher_spawn_setup(&fa, &attr, logfd, pfd[1]);
    char boot[PATH_MAX];
    char *argv_rank[3] = {(char *)lr->worker_path, NULL, NULL};
    char *const *argv = lr->argv ? lr->argv : argv_rank;
    if (launcher_is_framework(lr) && !lr->argv) {
        snprintf(boot, sizeof boot, "%s/ddpb_launch.py", lr->engines_dir);
        argv_rank[0] = (char *)lr->python;
        argv_rank[1] = boot;
    }
    pid_t pid;
    /* a run's launcher is a program name (mpirun.openmpi, srun): found on PATH */
    int src = lr->argv ? posix_spawnp(&pid, argv[0], &fa, &attr, argv, env.vars)
                       : posix_spawn(&pid, argv[0], &fa, &attr, argv, env.vars);
    if (src != 0) {
        errno = src;
        if (lr->argv)
            err_errno(e, "cannot start %s", argv[0]);
        else
            err_errno(e, "rank %d: cannot start %s %s", lr->rank,
                      launcher_is_framework(lr) ? "the engines' interpreter" : "worker",
                      argv[0]);
        goto out;
    }
    int pidfd = launcher_pidfd_open(pid);
    if (pidfd < 0) {
        err_errno(e, "rank %d: pidfd_open", lr->rank);
        launcher_signal(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        goto out;
    }
    if (pfd[0] >= 0)
        fcntl(pfd[0], F_SETFL, fcntl(pfd[0], F_GETFL) | O_NONBLOCK);
    out->pid = pid;
    out->report_fd = pfd[0];
    out->pidfd = pidfd;
    pfd[0] = -1;
    rc = 0;
out:
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    if (logfd >= 0)
        close(logfd);
    launcher_env_free(&env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return rc;
}

void launcher_signal(pid_t pid, int sig)
{
    if (pid <= 0)
        return;
    if (kill(-pid, sig) < 0 && errno == ESRCH)
        kill(pid, sig);
}

/* A rank's group outlives it when the rank leaves processes behind: a PyTorch DataLoader's
 * forkserver and workers, multiprocessing's resource tracker. Orphaned, the workers poll a
 * queue nobody reads (their parent is the forkserver, which is still there, so they never
 * see the rank go) and take CPU from every run after; a CI run once held dozens. The
 * group id stays the rank's pid while any member lives (Linux does not hand out a pid in
 * use as a group id), so after the reap kill(-pgid) reaches only what the rank left. */
void launcher_end_group(pid_t pgid)
{
    if (pgid > 0)
        kill(-pgid, SIGKILL);
}

long launcher_proc_read(pid_t pid, const char *name, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    FILE *f = pid > 0 ? fopen(path, "re") : NULL;
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (long)n;
}

bool launcher_is_stopped(pid_t pid)
{
    char line[512];
    if (launcher_proc_read(pid, "stat", line, sizeof line) < 0)
        return false;
    /* "pid (comm) S ...": comm may hold spaces and ')', so the state follows the last ')' */
    const char *close_paren = strrchr(line, ')');
    if (!close_paren || close_paren[1] != ' ')
        return false;
    return close_paren[2] == 'T' || close_paren[2] == 't';
}

/* True when /proc/pid/environ holds the NUL-terminated entry want. */
static bool launcher_environ_has(pid_t pid, const char *want)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    char entry[512];
    size_t n = 0;
    bool found = false;
    int c;
    while (!found && (c = fgetc(f)) != EOF) {
        if (c != '\0') {
            if (n < sizeof entry - 1)
                entry[n++] = (char)c;
            continue;
        }
        entry[n] = '\0';
        found = strcmp(entry, want) == 0;
        n = 0;
    }
    fclose(f);
    return found;
}

bool launcher_is_run_process(pid_t pid, const char *run)
{
    char want[128];
    snprintf(want, sizeof want, "DDPB_RUN=%s", run);
    return pid > 0 && launcher_environ_has(pid, want);
}

int launcher_kill_orphan(pid_t pid, const char *run, int rank)
{
    char want_run[128], want_rank[64];
    snprintf(want_run, sizeof want_run, "DDPB_RUN=%s", run);
    snprintf(want_rank, sizeof want_rank, "DDPB_RANK=%d", rank);
    /* a rank of another launcher has no DDPB_RANK: its launcher's name stands for it */
    if (pid <= 0 || !launcher_environ_has(pid, want_run) ||
        !(launcher_environ_has(pid, want_rank) ||
          launcher_environ_has(pid, "DDPB_LAUNCHER=mpirun") ||
          launcher_environ_has(pid, "DDPB_LAUNCHER=srun")))
        return 0;
    launcher_signal(pid, SIGKILL);
    return 1;
}
