/* tcp_config: how a TCP communicator is configured (struct comm_tcp_config, tcp.h's
 * comm_tcp_listen takes it) and the longest mesh namespace.
 *
 * Decision: apart from tcp.h so that the backend's shared state (tcp_engine.h, whose
 * struct comm_tcp holds the namespace) needs only this and not tcp.c's entry points:
 * tcp.c uses the engine, and the engine's header must not lead back to tcp.c. */
#ifndef DDPB_COMM_TCP_CONFIG_H
#define DDPB_COMM_TCP_CONFIG_H

#include <stdatomic.h>

/* Longest namespace (comm_tcp_config.ns), in bytes. */
#define COMM_TCP_NS_MAX 64

struct comm_tcp_config {
    int rank, world_size;
    const char *listen_host;       /* borrowed; address peers reach this rank at */
    int timeout_ms;                /* setup and every operation; > 0 */
    const atomic_bool *abort_flag; /* borrowed, may be NULL; must outlive the comm */
    const char *algorithm;         /* default algorithm of operations that have it:
                                      "auto" (by size), "ring", "rd", "hd", "direct",
                                      "tree", "hier"; NULL = "auto" */
    const char *secret;            /* the run secret (only its hash travels); NULL = "" */
    int spin_us;                   /* poll without sleeping before poll(2) sleeps: 0 = automatic
                          (200 us when world_size <= online CPUs, else 50 us; yielding
                          the CPU between polls unless this process is pinned, tcp.c),
                          > 0 = busy for that many microseconds, < 0 = never */
    int sockbuf_bytes;     /* SO_SNDBUF/SO_RCVBUF: 0 = the backend's default, > 0 = this,
                          < 0 = the kernel's autotuning */
    int ring_chunk_bytes;  /* ring allreduce: bytes per rank per block; 0 = automatic */
    const char *ns;        /* the mesh's namespace (borrowed, copied): its store keys are
                             "<ns>tcp/addr/<rank>" and its handshake accepts only ranks
                             of the same ns; printable, no spaces, at most COMM_TCP_NS_MAX
                             bytes. NULL or "" = the run's world mesh ("tcp/addr/<rank>") */
    const char *transport; /* "auto" (NULL): shared memory among the ranks of each node
                              (shm.h) beside the TCP mesh; every operation over it when
                              all ranks share one node, hier's intra-node steps when they
                              do not; "shm": the same, but ranks on two nodes are an
                              error; "tcp": TCP only */
    const char *shm_dir;   /* where shared-memory segments live (borrowed, copied);
                              NULL: env DDPB_SHM_DIR, else /dev/shm */
    size_t shm_slot_bytes; /* shared memory: bytes a collective moves per step; 0: default */
};

#endif
