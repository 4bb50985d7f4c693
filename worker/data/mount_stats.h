/* mount_stats: what a rank reading through its storage mount (DDPB_STORAGE_MOUNT, the
 * daemon's per-rank ddpbench-fs, daemon/storage_mount.h) learns of its reads: the mount's
 * virtual stats file, one JSON line {"requests":N,"bytes":N,"wait_ns":N,"read_ns":N}.
 *
 * Decision: the mount counts, not the reader, so every reader of the rank (the C loader's
 * threads, a framework's worker processes) is counted once, by the same code that caps
 * it; the stats file itself is never capped or counted, so reading it each step costs a
 * request to the mount and nothing against the profile. */
#ifndef DDPB_DATA_MOUNT_STATS_H
#define DDPB_DATA_MOUNT_STATS_H

#include "common/err.h"
#include "worker/data/storage.h"

#define DATA_MOUNT_ENV "DDPB_STORAGE_MOUNT"
#define DATA_MOUNT_STATS_FILE ".ddpbench-fs-stats"

/* The rank's mount (DDPB_STORAGE_MOUNT), NULL when it reads no mount. Borrowed. */
const char *data_mount_dir(void);
/* Parses one stats line into *out. ERR_PROTOCOL when it is not the object above. */
int data_mount_stats_parse(const char *text, struct data_storage_stats *out, struct err *e);
/* Reads mnt's stats file into *out. ERR_IO naming the file when it cannot be read. */
int data_mount_stats_read(const char *mnt, struct data_storage_stats *out, struct err *e);

#endif
