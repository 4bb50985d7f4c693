/* shm: the shared-memory transport of the host backend (tcp.h) between the ranks of one
 * node. A group is the ranks of one node; every operation of comm.h runs over it with
 * member indices for peers. tcp.c builds the group beside its TCP mesh (the mesh carries
 * the setup's records and barrier) and chooses, per operation, shm or TCP.
 *
 * Decisions (the why of each is in shm.c's opening comment):
 * - Segments have no name: each member creates an unnamed tmpfs file, open(dir,
 *   O_TMPFILE), mode 0600, in DDPB_SHM_DIR or /dev/shm, and its peers open it through
 *   /proc/<pid>/fd/<fd> (same user, same pid namespace), then the owner closes it.
 *   Nothing ever appears in /dev/shm, so nothing is left there whatever kills a rank.
 * - Sized up front with posix_fallocate: a full tmpfs is an error naming the size,
 *   never a SIGBUS later.
 * - Waiting: spin (the communicator's spin policy), then futex on the waiter's own
 *   doorbell, which a poster rings only when the waiter says it sleeps.
 *
 * Setup is three steps because the records travel over another transport:
 * shm_group_open (create this member's segment, fill its record), the caller all-gathers
 * the records, shm_group_attach (map every member's segment), the caller runs a barrier,
 * shm_group_seal (close this member's file: every peer holds a mapping now). */
#ifndef DDPB_COMM_SHM_H
#define DDPB_COMM_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/comm/comm.h"

#define SHM_RECORD_BYTES 64 /* what a member tells its peers about its segment */

struct shm_config {
    int me, n;                     /* this member's index and the group's size (n >= 1) */
    const int *ranks;              /* n communicator ranks of the members, for messages
                                      (borrowed, copied) */
    int timeout_ms;                /* a wait fails when nothing moved for this long; > 0 */
    const atomic_bool *abort_flag; /* borrowed, may be NULL; must outlive the group */
    const atomic_bool *stop;       /* borrowed, may be NULL (the communicator's stop) */
    int spin_us;                   /* busy-wait this long before sleeping; 0: sleep at once */
    bool spin_yield;               /* sched_yield between the busy polls */
    const char *dir;               /* where segments live; NULL: env DDPB_SHM_DIR, else
                                      /dev/shm */
    size_t slot_bytes;             /* bytes a collective moves per step; 0: the default */
    size_t fifo_bytes;             /* point-to-point ring per peer; 0: the default */
};

struct shm_group;

/* Creates this member's segment and fills record. Owned group (shm_group_free) or NULL
 * with e set (ERR_IO naming the directory and the bytes needed when it has no room). */
struct shm_group *shm_group_open(const struct shm_config *cfg, uint8_t record[SHM_RECORD_BYTES],
                                 struct err *e);
/* Maps every member's segment from records (n records in member order; this member's own
 * is checked too). ERR_INVALID field "transport" when a member is on another machine or
 * pid namespace; ERR_IO when its segment cannot be opened. */
int shm_group_attach(struct shm_group *g, const uint8_t *records, struct err *e);
/* Closes this member's file once every member has attached. */
void shm_group_seal(struct shm_group *g);
/* Unmaps and frees. NULL is a no-op. */
void shm_group_free(struct shm_group *g);
/* Bytes of shared memory the group maps (every member's segment), for the memory report. */
size_t shm_group_bytes(const struct shm_group *g);

/* Runs a (already checked by comm.c; peers, broadcast's root: member indices) among the
 * members. root >= 0 with an allreduce: only member root gets the result (the others'
 * recv is left as it was), hier's reduce to the node leader. Returns 0, or -1 with e set
 * ("<what went wrong>", without the operation's name) and *blame the member blamed (-1:
 * none). After a failure the group is unusable (peers are out of step). */
int shm_group_run(struct shm_group *g, const struct comm_args *a, int root, int *blame,
                  struct err *e);

#endif
