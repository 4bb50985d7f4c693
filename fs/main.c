/* main: ddpbench-fs, the emulated storage as a FUSE mount (fs.h). The daemon starts one
 * per rank of a run whose data go through a mount (dataset.storage_layer) and the rank
 * reads the dataset at --mount instead of its directory.
 *
 *   ddpbench-fs --source DIR --mount MNT --storage NAME [--read-mbps X]
 *               [--read-latency-ms Y] [--read-concurrency N] [--cold] [--ready-fd FD]
 *               [--die-with-parent]
 *
 * --storage names a profile (common/vocab.h: local, nfs, blob, custom); the --read-*
 * figures replace the profile's (custom starts from no caps). Always in the foreground
 * and multithreaded; "ready\n" on --ready-fd once the mount is live; SIGTERM, SIGINT or
 * SIGHUP unmount (lazily, as root: a reader still inside gets ENOTCONN, not a hang) and
 * exit 0. --die-with-parent asks the kernel for SIGTERM when the parent (the thread that
 * forked us) dies, so a killed daemon leaves no server behind.
 *
 * Exit status: 0 unmounted on a signal; 1 the loop failed; 2 a bad command line (the
 * message names the option); 3 the mount failed: a source that is not a directory, a
 * missing mount point, no usable fuse device, or libfuse's own refusal, named on stderr.
 *
 * Decision: the checks libfuse would make with a vaguer message (the device, the mount
 * point) are made here first, so the daemon can show the cause as it is. The mount is
 * read-only ("ro"), default_permissions (the kernel checks the source's modes), subtype
 * ddpbench-fs (fuse.ddpbench-fs in /proc/self/mounts, which is how the daemon finds
 * stale ones), max_read 1 MiB. Without allow_other only the mounting user reads it: the
 * daemon and its ranks run as one user. As non-root libfuse mounts through the setuid
 * fusermount3 (package fuse3) and /dev/fuse must be readable and writable by that
 * user. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/vocab.h"
#include "fs/fs.h"

#define FS_EXIT_LOOP 1
#define FS_EXIT_USAGE 2
#define FS_EXIT_MOUNT 3
#define FS_FUSE_DEVICE "/dev/fuse"

struct fs_args {
    const char *source, *mount, *storage;
    struct data_storage_profile p;
    bool have_mbps, have_latency, have_concurrency;
    double mbps, latency_ms;
    long concurrency;
    int ready_fd; /* -1 when none */
    bool die_with_parent;
};

static const char fs_usage[] =
    "usage: ddpbench-fs --source DIR --mount MNT --storage NAME [--read-mbps X]\n"
    "                   [--read-latency-ms Y] [--read-concurrency N] [--cold]\n"
    "                   [--ready-fd FD] [--die-with-parent]\n"
    "A read-only FUSE pass-through of DIR at MNT whose opens and reads pay the storage\n"
    "profile NAME (local, nfs, blob, custom); the --read-* figures replace the profile's.\n"
    "The virtual file MNT/" FS_STATS_NAME " holds the request and byte counts.\n"
    "Exit status: 0 unmounted on SIGTERM/SIGINT, 2 bad arguments, 3 the mount failed.\n";

/* "ddpbench-fs: " + the message + tail + newline on stderr; -1. */
__attribute__((format(printf, 2, 0))) static int fs_say(const char *tail, const char *fmt,
                                                           va_list ap)
{
    fputs("ddpbench-fs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "%s\n", tail);
    return -1;
}

__attribute__((format(printf, 1, 2))) static int fs_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fs_say(" (--help for usage)", fmt, ap);
    va_end(ap);
    return -1;
}

__attribute__((format(printf, 1, 2))) static int fs_mount_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fs_say("", fmt, ap);
    va_end(ap);
    return -1;
}

static int fs_parse_double(const char *opt, const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return fs_usage_error("%s: \"%s\" is not a finite number >= 0", opt, s);
    *out = v;
    return 0;
}

static int fs_parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return fs_usage_error("%s: \"%s\" is not an integer in [%ld, %ld]", opt, s, lo, hi);
    *out = v;
    return 0;
}

/* The profile named by --storage with the --read-* figures over it. */
static int fs_args_profile(struct fs_args *a)
{
    const struct vocab_storage *v = vocab_storage(vocab_find(VOCAB_STORAGE, a->storage));
    if (!v) {
        char names[64];
        return fs_usage_error("--storage: unknown profile \"%s\" (%s, custom)", a->storage,
                              vocab_storage_join_named(", ", names, sizeof names));
    }
    a->p = (struct data_storage_profile){0};
    snprintf(a->p.name, sizeof a->p.name, "%s", v->name);
    if (!v->custom) {
        a->p.read_mbps = v->read_mbps;
        a->p.latency_ms = v->latency_ms;
        a->p.concurrency = v->concurrency;
    }
    if (a->have_mbps)
        a->p.read_mbps = a->mbps;
    if (a->have_latency)
        a->p.latency_ms = a->latency_ms;
    if (a->have_concurrency)
        a->p.concurrency = (int)a->concurrency;
    return 0;
}

enum { FS_OPT_SOURCE = 256, FS_OPT_MOUNT, FS_OPT_STORAGE, FS_OPT_MBPS, FS_OPT_LATENCY,
       FS_OPT_CONCURRENCY, FS_OPT_COLD, FS_OPT_READY_FD, FS_OPT_DIE, FS_OPT_HELP };

static int fs_parse_one(struct fs_args *a, int c, const char *arg)
{
    long v = 0;
    switch (c) {
    case FS_OPT_SOURCE:
        a->source = arg;
        return 0;
    case FS_OPT_MOUNT:
        a->mount = arg;
        return 0;
    case FS_OPT_STORAGE:
        a->storage = arg;
        return 0;
    case FS_OPT_MBPS:
        a->have_mbps = true;
        return fs_parse_double("--read-mbps", arg, &a->mbps);
    case FS_OPT_LATENCY:
        a->have_latency = true;
        return fs_parse_double("--read-latency-ms", arg, &a->latency_ms);
    case FS_OPT_CONCURRENCY:
        a->have_concurrency = true;
        return fs_parse_long("--read-concurrency", arg, 0, DATA_STORAGE_MAX_CONCURRENCY,
                             &a->concurrency);
    case FS_OPT_COLD:
        a->p.cold = true;
        return 0;
    case FS_OPT_READY_FD:
        if (fs_parse_long("--ready-fd", arg, 0, 1 << 20, &v) < 0)
            return -1;
        if (fcntl((int)v, F_GETFD) < 0)
            return fs_usage_error("--ready-fd: %ld is not an open descriptor", v);
        a->ready_fd = (int)v;
        return 0;
    case FS_OPT_DIE:
        a->die_with_parent = true;
        return 0;
    default:
        return fs_usage_error("bad arguments");
    }
}

/* 0 parsed, 1 --help printed, -1 a usage error (printed). */
static int fs_parse(int argc, char **argv, struct fs_args *a)
{
    static const struct option opts[] = {
        {"source", required_argument, NULL, FS_OPT_SOURCE},
        {"mount", required_argument, NULL, FS_OPT_MOUNT},
        {"storage", required_argument, NULL, FS_OPT_STORAGE},
        {"read-mbps", required_argument, NULL, FS_OPT_MBPS},
        {"read-latency-ms", required_argument, NULL, FS_OPT_LATENCY},
        {"read-concurrency", required_argument, NULL, FS_OPT_CONCURRENCY},
        {"cold", no_argument, NULL, FS_OPT_COLD},
        {"ready-fd", required_argument, NULL, FS_OPT_READY_FD},
        {"die-with-parent", no_argument, NULL, FS_OPT_DIE},
        {"help", no_argument, NULL, FS_OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    *a = (struct fs_args){.ready_fd = -1};
    bool cold = false;
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, "", opts, NULL);
        if (c == -1)
            break;
        if (c == FS_OPT_HELP) {
            fputs(fs_usage, stdout);
            return 1;
        }
        if (c == '?')
            return fs_usage_error("unknown option or missing value: %s", argv[optind - 1]);
        if (fs_parse_one(a, c, optarg) < 0)
            return -1;
        cold = cold || c == FS_OPT_COLD;
    }
    if (optind < argc)
        return fs_usage_error("unexpected argument \"%s\"", argv[optind]);
    if (!a->source || !*a->source)
        return fs_usage_error("--source DIR is required");
    if (!a->mount || !*a->mount)
        return fs_usage_error("--mount MNT is required");
    if (!a->storage)
        return fs_usage_error("--storage NAME is required");
    if (fs_args_profile(a) < 0)
        return -1;
    a->p.cold = cold;
    return 0;
}

/* The causes named before libfuse tries: the source, the mount point, the device. Opens
 * the source (O_PATH) into *src_fd, which the caller closes. */
static int fs_precheck(const struct fs_args *a, int *src_fd)
{
    *src_fd = open(a->source, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*src_fd < 0)
        return fs_mount_error("--source %s: %s", a->source, strerror(errno));
    struct stat sb;
    if (stat(a->mount, &sb) < 0)
        return fs_mount_error("--mount %s: %s", a->mount, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return fs_mount_error("--mount %s: %s", a->mount, strerror(ENOTDIR));
    int dev = open(FS_FUSE_DEVICE, O_RDWR | O_CLOEXEC);
    if (dev < 0)
        return fs_mount_error("%s: %s (the FUSE device; modprobe fuse, or give the user "
                              "access)",
                              FS_FUSE_DEVICE, strerror(errno));
    close(dev);
    return 0;
}

/* PR_SET_PDEATHSIG, and a parent already gone before it took effect. */
static int fs_die_with_parent(void)
{
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
        return fs_mount_error("--die-with-parent: prctl: %s", strerror(errno));
    if (getppid() != parent)
        return fs_mount_error("--die-with-parent: the parent is gone");
    return 0;
}

static void fs_say_ready(int fd)
{
    if (fd < 0)
        return;
    static const char msg[] = "ready\n";
    ssize_t n;
    do
        n = write(fd, msg, sizeof msg - 1);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)(sizeof msg - 1))
        fprintf(stderr, "ddpbench-fs: --ready-fd %d: %s\n", fd,
                n < 0 ? strerror(errno) : "short write");
    close(fd);
}

/* Enough threads that every request slot can be busy while others queue on it. */
static int fs_loop(struct fuse *f, const struct data_storage_profile *p)
{
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    if (!cfg)
        return fuse_loop_mt(f, NULL);
    unsigned threads = p->concurrency > 0 ? (unsigned)p->concurrency + 16 : 64;
    fuse_loop_cfg_set_max_threads(cfg, threads);
    fuse_loop_cfg_set_idle_threads(cfg, threads < 32 ? threads : 32);
    int rc = fuse_loop_mt(f, cfg);
    fuse_loop_cfg_destroy(cfg);
    return rc;
}

/* Mounts, serves until a signal, unmounts. The exit status. */
static int fs_serve(const struct fs_args *a, struct fs_state *s)
{
    char opts[512];
    snprintf(opts, sizeof opts,
             "ro,default_permissions,subtype=ddpbench-fs,fsname=%s,max_read=%d",
             a->source, FS_MAX_READ);
    if (strchr(a->source, ','))
        snprintf(opts, sizeof opts, "ro,default_permissions,subtype=ddpbench-fs,max_read=%d",
                 FS_MAX_READ);
    char *argv[] = {"ddpbench-fs", "-o", opts, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    struct fuse *f = fuse_new(&args, fs_passthrough_ops(), sizeof *fs_passthrough_ops(), s);
    if (!f) {
        fuse_opt_free_args(&args);
        fs_mount_error("fuse_new failed (libfuse's message above)");
        return FS_EXIT_MOUNT;
    }
    struct fuse_session *se = fuse_get_session(f);
    int status = FS_EXIT_MOUNT;
    /* libfuse leaves an ignored signal ignored, and a shell starts a background job with
     * SIGINT ignored: the contract is that both signals unmount */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    if (fuse_set_signal_handlers(se) != 0) {
        fs_mount_error("cannot install the signal handlers");
    } else if (fuse_mount(f, a->mount) != 0) {
        fs_mount_error("mounting %s at %s failed (libfuse's message above)", a->source,
                       a->mount);
        fuse_remove_signal_handlers(se);
    } else {
        fs_say_ready(a->ready_fd);
        /* libfuse: 0 when unmounted from outside, the signal's number on one, -errno */
        int rc = fs_loop(f, &a->p);
        status = rc >= 0 ? 0 : FS_EXIT_LOOP;
        if (status)
            fs_mount_error("the FUSE loop failed: %s", strerror(-rc));
        fuse_remove_signal_handlers(se);
        fuse_unmount(f);
    }
    fuse_destroy(f);
    fuse_opt_free_args(&args);
    return status;
}

int main(int argc, char **argv)
{
    struct fs_args a;
    int rc = fs_parse(argc, argv, &a);
    if (rc != 0)
        return rc > 0 ? 0 : FS_EXIT_USAGE;
    struct data_storage *st = NULL;
    struct err e;
    if (data_storage_create(&a.p, &st, &e) < 0) {
        fprintf(stderr, "ddpbench-fs: %s\n", e.msg);
        return FS_EXIT_USAGE;
    }
    int src_fd = -1, status = FS_EXIT_MOUNT;
    if (a.die_with_parent && fs_die_with_parent() < 0)
        status = FS_EXIT_MOUNT;
    else if (fs_precheck(&a, &src_fd) == 0) {
        struct fs_state s = {.src_fd = src_fd, .st = st, .mu = PTHREAD_MUTEX_INITIALIZER};
        status = fs_serve(&a, &s);
        fs_close_all(&s);
    }
    if (src_fd >= 0)
        close(src_fd);
    data_storage_destroy(st);
    return status;
}
