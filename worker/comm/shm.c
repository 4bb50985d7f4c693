/* shm: the shared-memory transport's segments, setup, waiting and failure (shm.h); the
 * operations are shm_algo.c.
 *
 * Decisions:
 * - Creation and privacy. Each member creates its own segment as an unnamed file:
 *   open(dir, O_TMPFILE | O_RDWR, 0600) on the tmpfs at DDPB_SHM_DIR (the daemon's
 *   shm_dir) or /dev/shm, memfd_create where the default directory refuses O_TMPFILE.
 *   Its peers open it as /proc/<pid>/fd/<fd>, which the kernel allows only to processes
 *   that may inspect the owner (same user, ptrace read access) and only while the owner
 *   holds the descriptor; the file's mode 0600 bars other users even then. A record
 *   (pid, fd, size, a random nonce also written in the segment, the machine's boot id and
 *   the pid namespace) travels over the TCP mesh; a peer checks the nonce after mapping,
 *   so a descriptor number that was reused cannot hand it the wrong file. Once every
 *   member has mapped every segment (a barrier) the owner closes its descriptor.
 * - Clean-up. The files never have a name, so a rank killed at any point leaves nothing
 *   in /dev/shm: the kernel frees a file with its last mapping. No daemon sweep is needed
 *   and none could race a live run.
 * - Size. A segment holds its counters, two collective slots (slot_bytes each, double
 *   buffered so members one step apart do not wait for each other) and one
 *   point-to-point ring per peer. posix_fallocate reserves it all at creation, so a tmpfs
 *   without room fails setup with the size it needed instead of raising SIGBUS on a page
 *   touched later.
 * - Waiting. A waiter polls its condition for spin_us (yielding between polls when the
 *   communicator's spin policy says the ranks share CPUs), then sleeps on a futex: its
 *   own doorbell, after saying it sleeps. A poster stores its counter and rings the
 *   doorbell of each member that says it sleeps (a futex wake costs a system call, so
 *   one that nobody needs is skipped). Sequentially consistent stores and loads on both
 *   sides (shm_post) make it impossible for the waiter to miss the post and the poster
 *   to miss the sleeper. One doorbell per
 *   member lets a waiter sleep on several conditions at once (sendrecv).
 * - Failure. A sleeper wakes every 10 ms to check the abort flag, the communicator's
 *   stop and every peer process (pidfd, else kill(2)); a dead peer fails the wait at
 *   once, naming it; a live one that does not move fails it after the timeout, naming
 *   the member waited on.
 * - Members that are threads of one process (the unit tests) use the owner's mapping
 *   instead of one of their own, so ThreadSanitizer sees one address per counter and
 *   checks the memory ordering; a count in the segment says when the last one unmaps. */
#include "worker/comm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "worker/comm/shm_internal.h"

#define SHM_MAGIC 0x4d48534250444444ull /* "DDDPBSHM" */
#define SHM_REC_MAGIC 0x52485344u       /* "DSHR" */
/* Measured (tests/bench/RESULTS.md, issue 30): best or within 5% of the best from 256 KiB
 * up at 2 ranks; 128 KiB loses 10-50%, 1-2 MiB lose 10-20% at 1-4 MiB messages. */
#define SHM_SLOT_DEFAULT (512u << 10)
#define SHM_FIFO_DEFAULT (256u << 10)
#define SHM_FIFO_MIN (16u << 10)
#define SHM_FIFO_NODE (2u << 20) /* a member's rings together, beyond 8 ranks */
#define SHM_SLEEP_SLICE_MS 10
#define SHM_DIR_DEFAULT "/dev/shm"

struct shm_record {
    uint32_t magic;
    int32_t pid, fd, member;
    uint64_t bytes, nonce, addr, machine, pidns;
};
_Static_assert(sizeof(struct shm_record) <= SHM_RECORD_BYTES, "record too large");

static size_t shm_round(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

static int shm_config_check(const struct shm_config *cfg, struct err *e)
{
    if (cfg->n < 1 || cfg->me < 0 || cfg->me >= cfg->n || !cfg->ranks)
        return err_set(e, ERR_INVALID, NULL, "shm: member %d of %d", cfg->me, cfg->n);
    if (cfg->timeout_ms <= 0)
        return err_set(e, ERR_INVALID, NULL, "shm: timeout %d ms (want > 0)", cfg->timeout_ms);
    size_t f = cfg->fifo_bytes;
    if (f && (f < 4096 || (f & (f - 1))))
        return err_set(e, ERR_INVALID, NULL,
                       "shm: ring of %zu bytes (want a power of 2 >= 4096)", f);
    if (cfg->slot_bytes && (cfg->slot_bytes < 4096 || cfg->slot_bytes % SHM_LINE))
        return err_set(e, ERR_INVALID, NULL,
                       "shm: slot of %zu bytes (want >= 4096, whole lines)", cfg->slot_bytes);
    return 0;
}

/* A hash of the kernel's boot id: members with different ones are on different machines. */
static uint64_t shm_machine_id(void)
{
    char id[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(id, sizeof id, f))
            id[0] = '\0';
        fclose(f);
    }
    uint64_t h = 1469598103934665603ull;
    for (const char *p = id; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

static uint64_t shm_pidns_id(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void shm_layout(struct shm_group *g)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    g->pairs_off = shm_round(sizeof(struct shm_head), SHM_LINE);
    g->slots_off = shm_round(g->pairs_off + (size_t)g->n * sizeof(struct shm_pair), pg);
    g->fifos_off = g->slots_off + 2 * g->slot_bytes;
    g->seg_bytes = shm_round(g->fifos_off + (size_t)g->n * g->fifo_bytes, pg);
}

/* A node's rings take n * n of them: SHM_FIFO_DEFAULT up to 8 ranks, then halved as the
 * ranks double (16 KiB at least), so 64 ranks hold 128 MiB of rings, not 1 GiB. */
static size_t shm_fifo_default(int n)
{
    size_t f = SHM_FIFO_DEFAULT;
    while (f > SHM_FIFO_MIN && f * (size_t)n > SHM_FIFO_NODE)
        f /= 2;
    return f;
}

static struct shm_group *shm_alloc(const struct shm_config *cfg)
{
    struct shm_group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    int n = cfg->n;
    g->me = cfg->me;
    g->n = n;
    g->fd = -1;
    g->ranks = calloc((size_t)n, sizeof *g->ranks);
    g->seg = calloc((size_t)n, sizeof *g->seg);
    g->own_map = calloc((size_t)n, sizeof *g->own_map);
    g->pid = calloc((size_t)n, sizeof *g->pid);
    g->pidfd = calloc((size_t)n, sizeof *g->pidfd);
    g->src = calloc((size_t)n, sizeof *g->src);
    if (!g->ranks || !g->seg || !g->own_map || !g->pid || !g->pidfd || !g->src) {
        shm_group_free(g);
        return NULL;
    }
    for (int j = 0; j < n; j++)
        g->pidfd[j] = -1;
    memcpy(g->ranks, cfg->ranks, (size_t)n * sizeof *g->ranks);
    g->timeout_ms = cfg->timeout_ms;
    g->abort_flag = cfg->abort_flag;
    g->stop = cfg->stop;
    g->spin_us = cfg->spin_us > 0 ? cfg->spin_us : 0;
    g->spin_yield = cfg->spin_yield;
    g->slot_bytes = cfg->slot_bytes ? cfg->slot_bytes : SHM_SLOT_DEFAULT;
    g->fifo_bytes = cfg->fifo_bytes ? cfg->fifo_bytes : shm_fifo_default(n);
    shm_layout(g);
    return g;
}

/* The unnamed file of this member's segment in dir; -1 with e set. */
static int shm_create_file(const char *dir, bool dir_default, struct err *e)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    int why = errno;
    if (dir_default && (why == EOPNOTSUPP || why == EISDIR || why == EINVAL || why == ENOENT)) {
        fd = memfd_create("ddpbench-shm", MFD_CLOEXEC);
        if (fd >= 0)
            return fd;
        why = errno;
    }
    return err_set(e, ERR_IO, "transport", "transport shm: cannot create a segment in %s: %s",
                   dir, strerror(why));
}

/* Reserves the whole segment: a full tmpfs fails here, not with SIGBUS later. */
static int shm_reserve(struct shm_group *g, const char *dir, struct err *e)
{
    int rc = posix_fallocate(g->fd, 0, (off_t)g->seg_bytes);
    if (rc == EOPNOTSUPP || rc == EINVAL)
        rc = ftruncate(g->fd, (off_t)g->seg_bytes) < 0 ? errno : 0;
    if (rc == 0)
        return 0;
    return err_set(e, rc == ENOSPC ? ERR_UNAVAILABLE : ERR_IO, "transport",
                   "transport shm: %s has no room for this rank's %zu-byte segment (%zu bytes "
                   "for the %d ranks of this node; %zu per collective slot, %zu per peer "
                   "ring): %s",
                   dir, g->seg_bytes, g->seg_bytes * (size_t)g->n, g->n, g->slot_bytes,
                   g->fifo_bytes, strerror(rc));
}

static void shm_head_init(struct shm_group *g, uint64_t nonce)
{
    struct shm_head *h = shm_head_of(g, g->me);
    h->magic = SHM_MAGIC;
    h->nonce = nonce;
    h->member = g->me;
    h->n = g->n;
    h->bytes = g->seg_bytes;
    atomic_init(&h->in, 0);
    atomic_init(&h->out, 0);
    atomic_init(&h->bell, 0);
    atomic_init(&h->sleeping, 0);
    atomic_init(&h->users, 1);
}

struct shm_group *shm_group_open(const struct shm_config *cfg, uint8_t record[SHM_RECORD_BYTES],
                                 struct err *e)
{
    if (shm_config_check(cfg, e) < 0)
        return NULL;
    struct shm_group *g = shm_alloc(cfg);
    if (!g) {
        err_set(e, ERR_NOMEM, NULL, "shm: out of memory for %d members", cfg->n);
        return NULL;
    }
    const char *env = getenv("DDPB_SHM_DIR");
    const char *dir = cfg->dir && cfg->dir[0] ? cfg->dir
                      : env && env[0]         ? env
                                              : SHM_DIR_DEFAULT;
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)clock_mono_ns() ^ ((uint64_t)getpid() << 32);
    g->fd = shm_create_file(dir, strcmp(dir, SHM_DIR_DEFAULT) == 0, e);
    if (g->fd < 0 || shm_reserve(g, dir, e) < 0)
        goto fail;
    void *p = mmap(NULL, g->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
    if (p == MAP_FAILED) {
        err_errno(e, "transport shm: mapping this rank's %zu-byte segment", g->seg_bytes);
        goto fail;
    }
    g->seg[g->me] = p;
    g->own_map[g->me] = true;
    g->pid[g->me] = getpid();
    shm_head_init(g, nonce);
    struct shm_record r = {.magic = SHM_REC_MAGIC,
                           .pid = (int32_t)getpid(),
                           .fd = g->fd,
                           .member = g->me,
                           .bytes = g->seg_bytes,
                           .nonce = nonce,
                           .addr = (uint64_t)(uintptr_t)p,
                           .machine = shm_machine_id(),
                           .pidns = shm_pidns_id()};
    memset(record, 0, SHM_RECORD_BYTES);
    memcpy(record, &r, sizeof r);
    return g;
fail:
    shm_group_free(g);
    return NULL;
}

/* Maps member j's segment through /proc/<pid>/fd/<fd> and checks it is the one r names. */
static int shm_map_peer(struct shm_group *g, int j, const struct shm_record *r, struct err *e)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)r->pid, (int)r->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return err_set(e, ERR_IO, "transport",
                       "transport shm: cannot open rank %d's segment as %s: %s (the ranks of a "
                       "node must run as one user in one pid namespace; or use transport tcp)",
                       g->ranks[j], path, strerror(errno));
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == r->bytes && r->bytes == g->seg_bytes)
        p = mmap(NULL, g->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return err_set(e, ERR_IO, "transport",
                       "transport shm: rank %d's segment %s is not the %zu bytes it announced",
                       g->ranks[j], path, g->seg_bytes);
    g->seg[j] = p;
    g->own_map[j] = true;
    return 0;
}

/* A pidfd for member j's process, or -1 (then kill(2) checks it). */
static int shm_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd >= 0 ? (int)fd : -1;
#else
    (void)pid;
    return -1;
#endif
}

static int shm_attach_one(struct shm_group *g, int j, const struct shm_record *r,
                          uint64_t machine, uint64_t pidns, struct err *e)
{
    if (r->magic != SHM_REC_MAGIC || r->member != j || r->bytes != g->seg_bytes)
        return err_set(e, ERR_PROTOCOL, "transport",
                       "transport shm: rank %d sent a malformed segment record", g->ranks[j]);
    if (r->machine != machine || r->pidns != pidns)
        return err_set(
            e, ERR_INVALID, "transport",
            "transport shm: rank %d is on another machine or pid namespace than rank "
            "%d; shared memory needs every rank of the group on one node",
            g->ranks[j], g->ranks[g->me]);
    g->pid[j] = (pid_t)r->pid;
    if (j == g->me)
        return 0;
    if (r->pid == getpid()) { /* a thread of this process: share the owner's mapping */
        g->seg[j] = (uint8_t *)(uintptr_t)r->addr;
        atomic_fetch_add(&shm_head_of(g, j)->users, 1);
    } else {
        if (shm_map_peer(g, j, r, e) < 0)
            return -1;
        g->pidfd[j] = shm_pidfd(g->pid[j]);
    }
    const struct shm_head *h = shm_head_of(g, j);
    if (h->magic != SHM_MAGIC || h->nonce != r->nonce || h->member != j || h->n != g->n)
        return err_set(e, ERR_PROTOCOL, "transport",
                       "transport shm: rank %d's segment does not match its record",
                       g->ranks[j]);
    return 0;
}

int shm_group_attach(struct shm_group *g, const uint8_t *records, struct err *e)
{
    uint64_t machine = shm_machine_id(), pidns = shm_pidns_id();
    for (int j = 0; j < g->n; j++) {
        struct shm_record r;
        memcpy(&r, records + (size_t)j * SHM_RECORD_BYTES, sizeof r);
        if (shm_attach_one(g, j, &r, machine, pidns, e) < 0)
            return -1;
    }
    return 0;
}

void shm_group_seal(struct shm_group *g)
{
    if (g && g->fd >= 0) {
        close(g->fd);
        g->fd = -1;
    }
}

size_t shm_group_bytes(const struct shm_group *g)
{
    return g->seg_bytes * (size_t)g->n;
}

/* Drops this member's use of segment j: its own mapping, or a use of the owner's. */
static void shm_unmap(struct shm_group *g, int j)
{
    if (!g->seg[j])
        return;
    bool shared = j == g->me || !g->own_map[j];
    if (!shared || atomic_fetch_sub(&shm_head_of(g, j)->users, 1) == 1)
        munmap(g->seg[j], g->seg_bytes);
    g->seg[j] = NULL;
}

void shm_group_free(struct shm_group *g)
{
    if (!g)
        return;
    for (int j = 0; g->seg && j < g->n; j++)
        if (j != g->me)
            shm_unmap(g, j);
    if (g->seg)
        shm_unmap(g, g->me);
    for (int j = 0; g->pidfd && j < g->n; j++)
        if (g->pidfd[j] >= 0)
            close(g->pidfd[j]);
    if (g->fd >= 0)
        close(g->fd);
    free(g->ranks);
    free(g->seg);
    free(g->own_map);
    free(g->pid);
    free(g->pidfd);
    free(g->src);
    free(g);
}

/* ---- posting and waiting ------------------------------------------------------------ */

static long shm_futex(atomic_uint *addr, int op, unsigned val, const struct timespec *ts)
{
    return syscall(SYS_futex, (unsigned *)(void *)addr, op, val, ts, NULL, 0);
}

/* The post and the sleeper's flag are sequentially consistent, as are the loads of the
 * conditions a waiter re-checks after raising its flag (shm_sleep): in their single total
 * order either the waiter's re-check follows the post and sees it, or the poster's check
 * of the flag follows the raise and rings. (Fences would do on their own, but
 * ThreadSanitizer does not model them; on x86 the seq_cst loads are plain loads.) */
void shm_post(struct shm_group *g, atomic_uint *p, unsigned v)
{
    atomic_store_explicit(p, v, memory_order_seq_cst);
    for (int j = 0; j < g->n; j++) {
        if (j == g->me)
            continue;
        struct shm_head *h = shm_head_of(g, j);
        if (atomic_load_explicit(&h->sleeping, memory_order_seq_cst)) {
            atomic_fetch_add_explicit(&h->bell, 1, memory_order_relaxed);
            shm_futex(&h->bell, FUTEX_WAKE, INT_MAX, NULL);
        }
    }
}

static inline void shm_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static bool shm_stopped(const struct shm_group *g)
{
    return (g->abort_flag && atomic_load_explicit(g->abort_flag, memory_order_relaxed)) ||
           (g->stop && atomic_load_explicit(g->stop, memory_order_relaxed));
}

/* The first member whose process has exited, or -1. */
static int shm_dead_member(const struct shm_group *g)
{
    pid_t self = getpid();
    for (int j = 0; j < g->n; j++) {
        if (j == g->me || g->pid[j] == self || g->pid[j] <= 0)
            continue;
        if (g->pidfd[j] >= 0) {
            struct pollfd p = {.fd = g->pidfd[j], .events = POLLIN};
            if (poll(&p, 1, 0) == 1)
                return j;
        } else if (kill(g->pid[j], 0) < 0 && errno == ESRCH) {
            return j;
        }
    }
    return -1;
}

/* Breaks g (peers are out of step now) blaming member (-1: none), once e says why.
 * Returns -1. */
static int shm_fail(struct shm_group *g, int *blame, int member)
{
    g->broken = true;
    *blame = member;
    return -1;
}

/* Why the wait cannot go on (abort, stop, a dead member), or 0 to go on. */
static int shm_wait_check(struct shm_group *g, int *blame, struct err *e)
{
    if (shm_stopped(g)) {
        err_set(e, ERR_ABORTED, NULL, "aborted");
        return shm_fail(g, blame, -1);
    }
    int dead = shm_dead_member(g);
    if (dead < 0)
        return 0;
    err_set(e, ERR_PEER, NULL, "rank %d (pid %d) exited", g->ranks[dead], (int)g->pid[dead]);
    return shm_fail(g, blame, dead);
}

/* Polls ready for the spin budget. 1: it holds; 0: budget spent; -1: abort. */
static int shm_spin(struct shm_group *g, shm_ready_fn ready, const void *ctx, int *blame,
                    struct err *e)
{
    int64_t end = clock_mono_ns() + (int64_t)g->spin_us * 1000;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (ready(g, ctx))
                return 1;
            shm_relax();
        }
        if (shm_stopped(g)) {
            err_set(e, ERR_ABORTED, NULL, "aborted");
            return shm_fail(g, blame, -1);
        }
        if (clock_mono_ns() >= end)
            return 0;
        if (g->spin_yield)
            sched_yield();
    }
}

/* Sleeps on this member's doorbell until rung or ms pass, unless ready already holds. */
static void shm_sleep(struct shm_group *g, shm_ready_fn ready, const void *ctx, int ms)
{
    struct shm_head *h = shm_head_of(g, g->me);
    unsigned bell = atomic_load_explicit(&h->bell, memory_order_relaxed);
    atomic_store_explicit(&h->sleeping, 1, memory_order_seq_cst);
    if (!ready(g, ctx)) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        shm_futex(&h->bell, FUTEX_WAIT, bell, &ts);
    }
    atomic_store_explicit(&h->sleeping, 0, memory_order_relaxed);
}

int shm_wait(struct shm_group *g, shm_ready_fn ready, const void *ctx, int peer, int *blame,
             struct err *e)
{
    if (ready(g, ctx))
        return 0;
    int64_t deadline = clock_mono_ms() + g->timeout_ms;
    if (g->spin_us > 0) {
        int rc = shm_spin(g, ready, ctx, blame, e);
        if (rc != 0)
            return rc > 0 ? 0 : -1;
    }
    for (;;) {
        int left = clock_ms_left(deadline);
        shm_sleep(g, ready, ctx,
                  left < SHM_SLEEP_SLICE_MS ? (left > 0 ? left : 1) : SHM_SLEEP_SLICE_MS);
        if (ready(g, ctx))
            return 0;
        if (shm_wait_check(g, blame, e) < 0)
            return -1;
        if (clock_ms_left(deadline) <= 0) {
            err_set(e, ERR_TIMEOUT, NULL, "no progress from rank %d for %d ms",
                    peer >= 0 ? g->ranks[peer] : -1, g->timeout_ms);
            return shm_fail(g, blame, peer);
        }
    }
}

struct shm_count_wait {
    const atomic_uint *p;
    unsigned target;
};

static bool shm_count_ready(const struct shm_group *g, const void *ctx)
{
    (void)g;
    const struct shm_count_wait *w = ctx;
    return shm_reached(atomic_load_explicit(w->p, memory_order_seq_cst), w->target);
}

int shm_wait_count(struct shm_group *g, const atomic_uint *p, unsigned target, int peer,
                   int *blame, struct err *e)
{
    struct shm_count_wait w = {p, target};
    return shm_wait(g, shm_count_ready, &w, peer, blame, e);
}
