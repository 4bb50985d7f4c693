/* tcp: the TCP communicator (tcp.h): mesh setup with verified handshakes, the entry
 * points comm.c calls, goodbye and teardown. The data path is tcp_engine.c (moving
 * bytes) and tcp_algo.c (what to move where).
 *
 * Decisions:
 * - Setup connects up and accepts down, so the mesh forms in any start order; every
 *   connection is verified by a handshake and strays on the port are dropped.
 * - The mesh's namespace enters the handshake through the hash, not as a field of its
 *   own: the hello keeps its 24 bytes and version, the world mesh (ns "") hashes as
 *   before, and a rank of another mesh of the run (same secret, maybe the same world
 *   size and rank numbers) cannot pass for one of this mesh.
 * - After a failed operation the byte streams are out of step, so the communicator
 *   refuses further operations with the first error.
 * - Sockets get TCP_NODELAY (latency of small messages) and, unless told otherwise,
 *   the socket buffer sizes measured best on loopback (tests/bench/RESULTS.md). */
#include "worker/comm/tcp.h"

#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "worker/comm/shm.h"
#include "worker/comm/tcp_algo.h"
#include "worker/comm/tcp_engine.h"
#include "worker/store/store_client.h"

#define TCP_MAGIC 0x54504444u /* "DDPT" little-endian */
#define TCP_VERSION 2
#define TCP_KIND_HELLO 1
#define TCP_KIND_ACK 2
#define TCP_HELLO_LEN 24
#define TCP_MAX_PENDING 64
#define TCP_HANDSHAKE_MS 5000
#define TCP_SPIN_US_DEFAULT 200 /* poll budget when every rank can have a CPU */
#define TCP_YIELD_US_DEFAULT 50 /* poll budget when ranks outnumber the CPUs */
#define TCP_SOCKBUF_DEFAULT 0   /* 0: leave the kernel's autotuning alone */
/* Ring allreduce blocks: world_size chunks of this many bytes (measured on loopback,
 * tests/bench/RESULTS.md): small enough to stay in a core's L2 between being reduced,
 * forwarded and overwritten; larger when ranks share CPUs, where every wake-up costs a
 * context switch. */
#define TCP_RING_CHUNK_OWN_CPU (512u << 10)
#define TCP_RING_CHUNK_SHARED (2u << 20)

static const struct comm_ops tcp_ops;

static uint64_t tcp_hash_mesh(const char *secret, const char *ns)
{
    /* FNV-1a over a domain tag, the secret and, for a namespaced mesh, a NUL and the
     * namespace: keeps ranks of different runs, of other meshes of this run, and stray
     * clients out of a mesh; it is a guard against mix-ups, not cryptography. The NUL
     * cannot occur in either string, so no (secret, ns) pair hashes the bytes of
     * another; an empty ns adds nothing, so the world mesh's hash is the one ranks have
     * always sent. */
    static const char tag[] = "ddpbench-tcp-mesh";
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof tag; i++)
        h = (h ^ (uint8_t)tag[i]) * 0x100000001b3ull;
    for (const char *p = secret; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    if (ns[0]) {
        h = (h ^ 0u) * 0x100000001b3ull;
        for (const char *p = ns; *p; p++)
            h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    }
    return h;
}

/* ---- handshake --------------------------------------------------------------- */

static void tcp_put_le(uint8_t *p, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* u32 magic | u16 version | u16 kind | u32 sender rank | u32 world size | u64 hash */
static void tcp_hello_encode(const struct comm_tcp *t, int kind, uint8_t out[TCP_HELLO_LEN])
{
    tcp_put_le(out, TCP_MAGIC, 4);
    tcp_put_le(out + 4, TCP_VERSION, 2);
    tcp_put_le(out + 6, (uint64_t)kind, 2);
    tcp_put_le(out + 8, (uint64_t)t->base.rank, 4);
    tcp_put_le(out + 12, (uint64_t)t->base.world_size, 4);
    tcp_put_le(out + 16, t->secret_hash, 8);
}

/* Checks a peer's hello/ack; returns the sender rank or -1 with the reason in why. */
static int tcp_hello_check(const struct comm_tcp *t, const uint8_t in[TCP_HELLO_LEN], int kind,
                           char *why, size_t whylen)
{
    struct buf_reader r;
    buf_reader_init(&r, in, TCP_HELLO_LEN);
    uint32_t magic = 0, rank = 0, world = 0;
    uint16_t version = 0, k = 0;
    uint64_t hash = 0;
    buf_get_u32(&r, &magic);
    buf_get_u16(&r, &version);
    buf_get_u16(&r, &k);
    buf_get_u32(&r, &rank);
    buf_get_u32(&r, &world);
    buf_get_u64(&r, &hash);
    if (magic != TCP_MAGIC)
        snprintf(why, whylen, "not a ddpbench peer (bad magic)");
    else if (version != TCP_VERSION)
        snprintf(why, whylen, "protocol version %u, want %u", version, TCP_VERSION);
    else if (k != kind)
        snprintf(why, whylen, "unexpected handshake kind %u", k);
    else if (world != (uint32_t)t->base.world_size)
        snprintf(why, whylen, "world size %u, want %d", world, t->base.world_size);
    else if (hash != t->secret_hash)
        snprintf(why, whylen, "wrong run secret, or a rank of another mesh (this one is %s)",
                 t->ns[0] ? t->ns : "the world mesh");
    else if (rank >= world || rank == (uint32_t)t->base.rank)
        snprintf(why, whylen, "bad sender rank %u", rank);
    else
        return (int)rank;
    return -1;
}

/* ---- setup ------------------------------------------------------------------- */

static void tcp_free(struct comm_tcp *t)
{
    if (t->lfd >= 0)
        close(t->lfd);
    if (t->peers) {
        for (int i = 0; i < t->base.world_size; i++)
            if (t->peers[i].fd >= 0)
                close(t->peers[i].fd);
    }
    free(t->peers);
    free(t->pfds);
    free(t->pfd_peer);
    free(t->reading);
    free(t->pfd_index);
    free(t->seg);
    free(t->scratch);
    free(t->lanes);
    free(t->pieces);
    free(t->local);
    free(t->leaders);
    shm_group_free(t->shm);
    free(t);
}

void comm_tcp_discard(struct comm_tcp *t)
{
    if (t)
        tcp_free(t);
}

static int tcp_transport_parse(const char *name, enum tcp_transport *out)
{
    if (!name || strcmp(name, "auto") == 0)
        *out = TCP_TRANSPORT_AUTO;
    else if (strcmp(name, "shm") == 0)
        *out = TCP_TRANSPORT_SHM;
    else if (strcmp(name, "tcp") == 0)
        *out = TCP_TRANSPORT_TCP;
    else
        return -1;
    return 0;
}

static int tcp_config_check(const struct comm_tcp_config *cfg, enum comm_algorithm *alg,
                            enum tcp_transport *transport, struct err *e)
{
    if (cfg->world_size < 1)
        return err_set(e, ERR_INVALID, "world_size", "tcp: world_size %d < 1", cfg->world_size);
    if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return err_set(e, ERR_INVALID, "rank", "tcp: rank %d outside 0..%d", cfg->rank,
                       cfg->world_size - 1);
    if (cfg->timeout_ms <= 0)
        return err_set(e, ERR_INVALID, "timeout_ms", "tcp: timeout_ms must be > 0");
    if (!cfg->listen_host || !cfg->listen_host[0] || strlen(cfg->listen_host) >= 256)
        return err_set(e, ERR_INVALID, "listen_host", "tcp: listen host empty or too long");
    /* the namespace goes into store keys and error messages: keep it short and legible */
    const char *ns = cfg->ns ? cfg->ns : "";
    size_t nslen = strnlen(ns, COMM_TCP_NS_MAX + 1);
    if (nslen > COMM_TCP_NS_MAX)
        return err_set(e, ERR_INVALID, "ns", "tcp: namespace '%.16s...' longer than %d bytes",
                       ns, COMM_TCP_NS_MAX);
    for (size_t i = 0; i < nslen; i++)
        if (!isgraph((unsigned char)ns[i]))
            return err_set(e, ERR_INVALID, "ns",
                           "tcp: namespace has byte 0x%02x at %zu (printable, no spaces)",
                           (unsigned char)ns[i], i);
    const char *name = cfg->algorithm ? cfg->algorithm : "auto";
    if (comm_algorithm_parse(name, alg) < 0)
        return err_set(
            e, ERR_INVALID, "algorithm",
            "tcp: unknown algorithm '%.32s' (auto, ring, rd, hd, direct, tree, hier)", name);
    if (tcp_transport_parse(cfg->transport, transport) < 0)
        return err_set(e, ERR_INVALID, "transport",
                       "tcp: unknown transport '%.16s' (auto, shm, tcp)", cfg->transport);
    if (*transport == TCP_TRANSPORT_SHM && *alg != COMM_ALG_AUTO && *alg != COMM_ALG_HIER)
        return err_set(
            e, ERR_INVALID, "transport",
            "tcp: transport shm has its own algorithms; algorithm '%s' runs over TCP "
            "(use transport auto or tcp, or algorithm auto)",
            name);
    if (cfg->shm_dir && strlen(cfg->shm_dir) >= sizeof((struct comm_tcp *)0)->shm_dir)
        return err_set(e, ERR_INVALID, "shm_dir", "tcp: shm_dir longer than %zu bytes",
                       sizeof((struct comm_tcp *)0)->shm_dir - 1);
    return 0;
}

/* Whether this process is pinned: its affinity leaves out some online CPUs (the daemon
 * pins each rank to slots of its own). */
static bool tcp_pinned(long online)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) < 0)
        return false;
    return CPU_COUNT(&set) < online;
}

/* Automatic polling before poll(2) sleeps: 200 us when every rank can have a CPU of its
 * own, 50 us when the ranks outnumber the CPUs. Between those polls the rank yields the
 * CPU (sched_yield) unless it is pinned: an unpinned rank may share its CPU with the rank
 * it waits for, since the scheduler starts a child beside its parent and pulls a rank
 * woken by a message beside the waker; spinning there without yielding made the peer
 * wait out the whole budget before it could answer, so an 8-byte allreduce of 2 unpinned
 * ranks took 425 us instead of 6 until the scheduler spread them apart (measured:
 * tests/bench/RESULTS.md, "8-byte latency"). A pinned rank spins without yielding:
 * yielding would hand its CPU to whatever else runs there. Returns whether the automatic
 * policy found the ranks outnumbering the CPUs. */
static bool tcp_spin_policy(struct comm_tcp *t, const struct comm_tcp_config *cfg)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    t->spin_yield = false;
    if (cfg->spin_us != 0) {
        t->spin_us = cfg->spin_us > 0 ? cfg->spin_us : 0;
    } else if (cpus >= cfg->world_size) {
        t->spin_us = TCP_SPIN_US_DEFAULT;
        t->spin_yield = !tcp_pinned(cpus);
    } else {
        t->spin_us = TCP_YIELD_US_DEFAULT;
        t->spin_yield = true;
        return true;
    }
    return false;
}

/* The node of rank r in node_of (NULL: every rank on node 0). */
static int tcp_node(const int *node_of, int r)
{
    return node_of ? node_of[r] : 0;
}

/* Fills t's hierarchical groups from node_of (see tcp_engine.h). Quadratic in the
 * world size, once per communicator. */
static void tcp_nodes_group(struct comm_tcp *t, const int *node_of)
{
    int n = t->base.world_size, me = t->base.rank, mine = tcp_node(node_of, me);
    t->nlocal = t->nleaders = 0;
    t->local_me = t->leader_me = -1;
    for (int r = 0; r < n; r++) {
        int node = tcp_node(node_of, r);
        if (node == mine) {
            if (r == me)
                t->local_me = t->nlocal;
            t->local[t->nlocal++] = r;
        }
        bool first = true;
        for (int q = 0; q < r && first; q++)
            first = tcp_node(node_of, q) != node;
        if (first) {
            if (r == me)
                t->leader_me = t->nleaders;
            t->leaders[t->nleaders++] = r;
        }
    }
}

int comm_tcp_set_nodes(struct comm_tcp *t, const int *node_of, struct err *e)
{
    for (int r = 0; r < t->base.world_size; r++)
        if (node_of[r] < 0)
            return err_set(e, ERR_INVALID, "node", "tcp: rank %d has node %d (want >= 0)", r,
                           node_of[r]);
    tcp_nodes_group(t, node_of);
    return 0;
}

static struct comm_tcp *tcp_alloc(int n)
{
    struct comm_tcp *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->lfd = -1;
    t->base.world_size = n;
    t->peers = calloc((size_t)n, sizeof *t->peers);
    if (t->peers)
        for (int i = 0; i < n; i++)
            t->peers[i].fd = -1;
    t->pfds = calloc((size_t)n, sizeof *t->pfds);
    t->pfd_peer = calloc((size_t)n, sizeof *t->pfd_peer);
    t->reading = calloc((size_t)n, sizeof *t->reading);
    t->pfd_index = calloc((size_t)n, sizeof *t->pfd_index);
    t->seg = malloc(TCP_SEG_BYTES);
    t->base.buffer_bytes = TCP_SEG_BYTES;
    t->local = calloc((size_t)n, sizeof *t->local);
    t->leaders = calloc((size_t)n, sizeof *t->leaders);
    if (!t->peers || !t->pfds || !t->pfd_peer || !t->reading || !t->pfd_index || !t->seg ||
        !t->local || !t->leaders) {
        tcp_free(t);
        return NULL;
    }
    return t;
}

struct comm_tcp *comm_tcp_listen(const struct comm_tcp_config *cfg, struct err *e)
{
    enum comm_algorithm alg = COMM_ALG_AUTO;
    enum tcp_transport transport = TCP_TRANSPORT_AUTO;
    if (tcp_config_check(cfg, &alg, &transport, e) < 0)
        return NULL;
    int n = cfg->world_size;
    struct comm_tcp *t = tcp_alloc(n);
    if (!t) {
        err_set(e, ERR_NOMEM, NULL, "tcp: out of memory for %d peers", n);
        return NULL;
    }
    t->base.ops = &tcp_ops;
    t->base.backend = "tcp";
    t->base.rank = cfg->rank;
    t->base.timeout_ms = cfg->timeout_ms;
    t->base.abort_flag = cfg->abort_flag;
    atomic_init(&t->base.stop, false);
    t->base.error_peer = -1;
    t->algorithm = alg;
    t->transport = transport;
    snprintf(t->shm_dir, sizeof t->shm_dir, "%s", cfg->shm_dir ? cfg->shm_dir : "");
    t->shm_slot_bytes = cfg->shm_slot_bytes;
    tcp_nodes_group(t, NULL);
    bool crowded = tcp_spin_policy(t, cfg);
    size_t chunk = cfg->ring_chunk_bytes > 0 ? (size_t)cfg->ring_chunk_bytes
                   : crowded                 ? TCP_RING_CHUNK_SHARED
                                             : TCP_RING_CHUNK_OWN_CPU;
    t->ring_block = (size_t)n * chunk;
    t->sockbuf = cfg->sockbuf_bytes != 0 ? cfg->sockbuf_bytes : TCP_SOCKBUF_DEFAULT;
    snprintf(t->host, sizeof t->host, "%s", cfg->listen_host);
    snprintf(t->ns, sizeof t->ns, "%s", cfg->ns ? cfg->ns : "");
    t->secret_hash = tcp_hash_mesh(cfg->secret ? cfg->secret : "", t->ns);
    int backlog = n + TCP_MAX_PENDING < 4096 ? n + TCP_MAX_PENDING : 4096;
    t->lfd = net_listen(t->host, 0, backlog, e);
    if (t->lfd < 0) {
        tcp_free(t);
        err_prefix(e, "tcp: listen on %s", cfg->listen_host);
        return NULL;
    }
    int port = net_local_port(t->lfd);
    if (strchr(t->host, ':'))
        snprintf(t->addr, sizeof t->addr, "[%s]:%d", t->host, port);
    else
        snprintf(t->addr, sizeof t->addr, "%s:%d", t->host, port);
    return t;
}

const char *comm_tcp_address(const struct comm_tcp *t)
{
    return t->addr;
}

void comm_tcp_polling(const struct comm_tcp *t, int *spin_us, bool *yields, size_t *ring_block)
{
    *spin_us = t->spin_us;
    *yields = t->spin_yield;
    *ring_block = t->ring_block;
}

/* Connects to rank j and sends the hello; the ack is read after accepting. */
static int tcp_connect_peer(struct comm_tcp *t, int j, const char *addr, int64_t deadline,
                            struct err *e)
{
    char host[256];
    int port;
    if (!addr || net_split_hostport(addr, host, sizeof host, &port, false, e) < 0)
        return tcp_fail(t, e, ERR_INVALID, "setup", j, "bad address for rank %d: '%s'", j,
                        addr ? addr : "(null)");
    int left = clock_ms_left(deadline);
    int fd = net_connect(host, port, left > 0 ? left : 1, true, t->base.abort_flag, e);
    if (fd < 0)
        return tcp_fail(t, e, e ? e->code : ERR_IO, "setup", j, "connect to rank %d at %s: %s",
                        j, addr, e ? e->msg : "failed");
    t->peers[j].fd = fd;
    uint8_t hello[TCP_HELLO_LEN];
    tcp_hello_encode(t, TCP_KIND_HELLO, hello);
    if (net_send_all(fd, hello, sizeof hello, deadline, t->base.abort_flag, e) < 0)
        return tcp_fail(t, e, e ? e->code : ERR_IO, "setup", j, "hello to rank %d: %s", j,
                        e ? e->msg : "failed");
    return 0;
}

static int tcp_recv_ack(struct comm_tcp *t, int j, int64_t deadline, struct err *e)
{
    uint8_t ack[TCP_HELLO_LEN];
    if (net_recv_all(t->peers[j].fd, ack, sizeof ack, deadline, t->base.abort_flag, e) < 0) {
        if (e && e->code == ERR_PEER)
            return tcp_fail(t, e, ERR_PEER, "setup", j,
                            "rank %d closed the connection during the handshake (different "
                            "run secret, world size or mesh namespace?)",
                            j);
        return tcp_fail(t, e, e ? e->code : ERR_IO, "setup", j,
                        "waiting for the handshake of rank %d: %s", j, e ? e->msg : "failed");
    }
    char why[160];
    int sender = tcp_hello_check(t, ack, TCP_KIND_ACK, why, sizeof why);
    if (sender != j)
        return tcp_fail(t, e, ERR_PROTOCOL, "setup", j, "rank %d's address answered: %s", j,
                        sender < 0 ? why : "another rank");
    return 0;
}

/* A connection accepted but not yet identified. */
struct tcp_pending {
    int fd;
    size_t got;
    int64_t deadline;
    uint8_t hello[TCP_HELLO_LEN];
};

static void tcp_pending_drop(struct tcp_pending *p, int *np, int i, const char *why)
{
    log_warn("tcp setup: dropping a connection on the peer port: %s", why);
    close(p[i].fd);
    p[i] = p[*np - 1];
    (*np)--;
}

static int tcp_missing_lower(const struct comm_tcp *t, char *out, size_t outlen)
{
    int missing = 0;
    size_t off = 0;
    out[0] = '\0';
    for (int j = 0; j < t->base.rank; j++) {
        if (t->peers[j].fd >= 0)
            continue;
        missing++;
        if (off + 16 < outlen)
            off += (size_t)snprintf(out + off, outlen - off, "%s%d", off ? ", " : "", j);
    }
    return missing;
}

/* Reads a pending connection's hello; when complete and valid, the connection becomes
 * the sender's peer link and gets an ack. Returns 1 when the entry was consumed. */
static int tcp_pending_read(struct comm_tcp *t, struct tcp_pending *p, int *np, int i,
                            int64_t deadline)
{
    ssize_t r = recv(p[i].fd, p[i].hello + p[i].got, TCP_HELLO_LEN - p[i].got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (r <= 0) {
        tcp_pending_drop(p, np, i, "closed before its handshake");
        return 1;
    }
    p[i].got += (size_t)r;
    if (p[i].got < TCP_HELLO_LEN)
        return 0;
    char why[160];
    int j = tcp_hello_check(t, p[i].hello, TCP_KIND_HELLO, why, sizeof why);
    if (j > t->base.rank) {
        snprintf(why, sizeof why, "rank %d connected to a lower rank", j);
        j = -1;
    } else if (j >= 0 && t->peers[j].fd >= 0) {
        snprintf(why, sizeof why, "rank %d connected twice", j);
        j = -1;
    }
    if (j < 0) {
        tcp_pending_drop(p, np, i, why);
        return 1;
    }
    uint8_t ack[TCP_HELLO_LEN];
    tcp_hello_encode(t, TCP_KIND_ACK, ack);
    struct err ignored;
    if (net_send_all(p[i].fd, ack, sizeof ack, deadline, t->base.abort_flag, &ignored) < 0) {
        tcp_pending_drop(p, np, i, "could not answer its handshake");
        return 1;
    }
    t->peers[j].fd = p[i].fd;
    p[i] = p[*np - 1];
    (*np)--;
    return 1;
}

static void tcp_pending_accept(struct comm_tcp *t, struct tcp_pending *p, int *np)
{
    int fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    if (*np == TCP_MAX_PENDING) {
        log_warn("tcp setup: too many unidentified connections, dropping one");
        close(fd);
        return;
    }
    net_set_nodelay(fd);
    p[*np] = (struct tcp_pending){.fd = fd, .deadline = clock_mono_ms() + TCP_HANDSHAKE_MS};
    (*np)++;
}

/* Polls the listening socket and the unidentified connections together, so a stray
 * client that connects and stays silent cannot hold up the real peers. */
static int tcp_accept_step(struct comm_tcp *t, struct tcp_pending *p, int *np, int64_t deadline)
{
    struct pollfd pfd[TCP_MAX_PENDING + 1];
    pfd[0] = (struct pollfd){.fd = t->lfd, .events = POLLIN};
    for (int i = 0; i < *np; i++)
        pfd[i + 1] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
    int left = clock_ms_left(deadline);
    int slice = left > NET_ABORT_POLL_MS ? NET_ABORT_POLL_MS : left;
    int n = *np;
    if (poll(pfd, (nfds_t)n + 1, slice) < 0 && errno != EINTR)
        return -1;
    /* walk backwards: dropping entry i moves the last one into its place */
    for (int i = n - 1; i >= 0; i--) {
        if (pfd[i + 1].revents)
            tcp_pending_read(t, p, np, i, deadline);
        else if (clock_mono_ms() > p[i].deadline)
            tcp_pending_drop(p, np, i, "no handshake in time");
    }
    if (pfd[0].revents & POLLIN)
        tcp_pending_accept(t, p, np);
    return 0;
}

static int tcp_accept_lower(struct comm_tcp *t, int64_t deadline, struct err *e)
{
    struct tcp_pending p[TCP_MAX_PENDING];
    int np = 0, rc = 0;
    char missing[256];
    while (tcp_missing_lower(t, missing, sizeof missing) > 0) {
        if (tcp_aborted(t)) {
            rc = tcp_fail(t, e, ERR_ABORTED, "setup", -1, "aborted");
            break;
        }
        if (clock_ms_left(deadline) == 0) {
            rc = tcp_fail(t, e, ERR_TIMEOUT, "setup", -1,
                          "timed out after %d ms waiting for rank(s) %s to connect",
                          t->base.timeout_ms, missing);
            break;
        }
        if (tcp_accept_step(t, p, &np, deadline) < 0) {
            err_errno(e, "poll");
            rc = tcp_fail(t, e, ERR_IO, "setup", -1, "%s", e ? e->msg : "poll failed");
            break;
        }
    }
    for (int i = 0; i < np; i++)
        close(p[i].fd);
    return rc;
}

/* Socket buffers: a size asked for replaces the kernel's autotuning (best effort: the
 * kernel caps it at net.core.[rw]mem_max). */
static void tcp_tune_socket(const struct comm_tcp *t, int fd)
{
    if (t->sockbuf <= 0)
        return;
    int v = t->sockbuf;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v) < 0)
        log_debug("tcp: socket buffers of %d bytes refused: %s", v, strerror(errno));
}

/* The nodes' names for a message: rank r's node differs from rank 0's. */
static int tcp_other_node_rank(const struct comm_tcp *t)
{
    return t->nleaders > 1 ? t->leaders[1] : -1;
}

/* The records of shm.h's setup, all-gathered over the mesh (every rank takes part, one
 * whose node holds it alone with an empty record); the attach and a barrier follow, so no
 * rank closes its segment's file before every peer has mapped it. */
static int tcp_shm_exchange(struct comm_tcp *t, struct shm_group *g,
                            const uint8_t mine[SHM_RECORD_BYTES], struct err *e)
{
    int n = t->base.world_size;
    uint8_t *all = calloc((size_t)n + (size_t)t->nlocal, SHM_RECORD_BYTES);
    if (!all)
        return err_set(e, ERR_NOMEM, NULL, "tcp setup: out of memory");
    uint8_t *local = all + (size_t)n * SHM_RECORD_BYTES;
    struct comm_args ag = {.op = COMM_OP_ALL_GATHER,
                           .send = mine,
                           .recv = all,
                           .count = SHM_RECORD_BYTES / 4,
                           .dtype = COMM_INT32,
                           .algorithm = COMM_ALG_DIRECT};
    int rc = tcp_algo_run(t, &ag, e);
    for (int i = 0; rc == 0 && i < t->nlocal; i++)
        memcpy(local + (size_t)i * SHM_RECORD_BYTES,
               all + (size_t)t->local[i] * SHM_RECORD_BYTES, SHM_RECORD_BYTES);
    if (rc == 0 && g)
        rc = shm_group_attach(g, local, e);
    free(all);
    struct comm_args b = {.op = COMM_OP_BARRIER, .algorithm = COMM_ALG_AUTO};
    if (rc == 0)
        rc = tcp_algo_run(t, &b, e);
    return rc;
}

/* Builds the shared memory of this rank's node (transport auto or shm) once the mesh is
 * up, and says what the communicator uses (comm.h transport). */
static int tcp_shm_setup(struct comm_tcp *t, struct err *e)
{
    int n = t->base.world_size;
    snprintf(t->base.transport, sizeof t->base.transport, "tcp");
    if (t->transport == TCP_TRANSPORT_TCP || n == 1)
        return 0;
    if (t->transport == TCP_TRANSPORT_SHM && t->nleaders > 1)
        return err_set(e, ERR_INVALID, "transport",
                       "transport shm: the ranks are on %d nodes (rank %d is not on rank 0's); "
                       "shared memory needs every rank on one node (use transport auto or tcp)",
                       t->nleaders, tcp_other_node_rank(t));
    uint8_t mine[SHM_RECORD_BYTES] = {0};
    struct shm_group *g = NULL;
    if (t->nlocal > 1) {
        struct shm_config cfg = {.me = t->local_me,
                                 .n = t->nlocal,
                                 .ranks = t->local,
                                 .timeout_ms = t->base.timeout_ms,
                                 .abort_flag = t->base.abort_flag,
                                 .stop = &t->base.stop,
                                 .spin_us = t->spin_us,
                                 .spin_yield = t->spin_yield,
                                 .dir = t->shm_dir[0] ? t->shm_dir : NULL,
                                 .slot_bytes = t->shm_slot_bytes};
        if (!(g = shm_group_open(&cfg, mine, e)))
            return -1;
    }
    if (tcp_shm_exchange(t, g, mine, e) < 0) {
        shm_group_free(g);
        return -1;
    }
    shm_group_seal(g);
    t->shm = g;
    t->shm_all = g && t->nlocal == n;
    if (g)
        t->base.buffer_bytes += shm_group_bytes(g);
    /* the mesh's transport, alike on every rank (a rank alone on its node has no group) */
    if (t->nleaders < n)
        snprintf(t->base.transport, sizeof t->base.transport, "%s",
                 t->nleaders == 1 ? "shm" : "shm+tcp");
    t->base.bytes_sent = 0; /* the setup's records are not the run's traffic */
    t->base.last_algorithm[0] = '\0';
    return 0;
}

struct comm *comm_tcp_connect(struct comm_tcp *t, const char *const *peer_addrs, struct err *e)
{
    int n = t->base.world_size, r = t->base.rank;
    int64_t deadline = clock_mono_ms() + t->base.timeout_ms;
    /* Connect up, accept down, then read the acks: nobody waits on a peer that is itself
     * waiting, so the mesh forms in any start order. */
    for (int j = r + 1; j < n; j++)
        if (tcp_connect_peer(t, j, peer_addrs[j], deadline, e) < 0)
            goto fail;
    if (tcp_accept_lower(t, deadline, e) < 0)
        goto fail;
    for (int j = r + 1; j < n; j++)
        if (tcp_recv_ack(t, j, deadline, e) < 0)
            goto fail;
    for (int j = 0; j < n; j++) {
        if (j != r && net_set_nonblock(t->peers[j].fd, true) < 0) {
            err_errno(e, "tcp setup: fcntl");
            goto fail;
        }
        if (j != r)
            tcp_tune_socket(t, t->peers[j].fd);
    }
    close(t->lfd); /* the mesh is complete: later clients are refused */
    t->lfd = -1;
    if (tcp_shm_setup(t, e) < 0)
        goto fail;
    t->base.error_op[0] = '\0';
    t->base.error_peer = -1;
    return &t->base;
fail:
    tcp_free(t);
    return NULL;
}

struct comm *comm_tcp_connect_store(struct comm_tcp *t, struct store_client *store,
                                    struct err *e)
{
    int n = t->base.world_size, r = t->base.rank;
    int64_t deadline = clock_mono_ms() + t->base.timeout_ms;
    char key[COMM_TCP_NS_MAX + 32];
    snprintf(key, sizeof key, "%stcp/addr/%d", t->ns, r);
    char **vals = calloc((size_t)n, sizeof *vals);
    if (!vals) {
        comm_tcp_discard(t);
        err_set(e, ERR_NOMEM, NULL, "tcp setup: out of memory");
        return NULL;
    }
    int rc = store_client_set_str(store, key, t->addr, e);
    if (rc < 0)
        err_prefix(e, "tcp setup: publishing this rank's address");
    for (int j = 0; j < n && rc == 0; j++) {
        if (j == r)
            continue;
        snprintf(key, sizeof key, "%stcp/addr/%d", t->ns, j);
        size_t len;
        int left = clock_ms_left(deadline);
        rc = store_client_get(store, key, left > 0 ? left : 1, &vals[j], &len, e);
        if (rc < 0)
            err_prefix(e, "tcp setup: address of rank %d", j);
    }
    struct comm *c = NULL;
    if (rc == 0) {
        vals[r] = t->addr;
        c = comm_tcp_connect(t, (const char *const *)vals, e);
        vals[r] = NULL;
    } else {
        comm_tcp_discard(t);
    }
    for (int j = 0; j < n; j++)
        free(vals[j]);
    free(vals);
    return c;
}

struct comm *comm_tcp_create(const struct comm_tcp_config *cfg, struct store_client *store,
                             struct err *e)
{
    struct comm_tcp *t = comm_tcp_listen(cfg, e);
    return t ? comm_tcp_connect_store(t, store, e) : NULL;
}

/* ---- entry points ---------------------------------------------------------------- */

/* Every operation: refuse on a broken communicator, reset the blame, run the plan. */
static int tcp_op(struct comm *c, const struct comm_args *a, struct err *e)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    const char *name = comm_op_name(a->op);
    if (t->broken) {
        snprintf(c->error_op, sizeof c->error_op, "%s", name);
        return err_set(e, t->first_err.code, NULL, "%s: communicator unusable after: %s", name,
                       t->first_err.msg);
    }
    c->error_op[0] = '\0';
    c->error_peer = -1;
    return tcp_algo_run(t, a, e);
}

void comm_tcp_drop_connections(struct comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    for (int p = 0; p < c->world_size; p++) {
        if (t->peers[p].fd >= 0)
            close(t->peers[p].fd);
        t->peers[p].fd = -1;
    }
    if (!t->broken) {
        t->broken = true;
        err_set(&t->first_err, ERR_ABORTED, NULL, "connections dropped");
    }
}

/* Says goodbye on every link so peers still in an operation know this end of stream
 * is a clean exit, then closes. */
static void tcp_destroy(struct comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    const uint8_t bye = TCP_BYE;
    for (int p = 0; p < c->world_size; p++) {
        if (t->peers[p].fd >= 0 && !t->broken) {
            ssize_t w = send(t->peers[p].fd, &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w;
        }
    }
    tcp_free(t);
}

static const struct comm_ops tcp_ops = {
    .allreduce = tcp_op,
    .reduce_scatter = tcp_op,
    .all_gather = tcp_op,
    .broadcast = tcp_op,
    .send = tcp_op,
    .recv = tcp_op,
    .sendrecv = tcp_op,
    .barrier = tcp_op,
    .destroy = tcp_destroy,
};
