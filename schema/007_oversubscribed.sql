-- 007_oversubscribed: runs.oversubscribed marks a run that shared CPUs: while it ran,
-- the node's active CPU slots exceeded its CPUs (ddpbenchd --cpu-slots above the CPU
-- count), so its ranks were not all pinned to CPUs of their own. Results keep such runs
-- apart from clean ones, as they keep emulated GPU runs apart (daemon/results.c).
ALTER TABLE runs ADD COLUMN oversubscribed INTEGER NOT NULL DEFAULT 0
    CHECK (oversubscribed IN (0, 1));
