-- 019_single_process: the processes a run starts (issue 33). NULL: world_size, a process
-- per rank; 1 for a single-process strategy (mirrored, dp: common/vocab.h single_process),
-- whose world_size replicas share one process (common/spec.h spec_processes). A run is
-- running once every process said hello; world_size stays the replicas, which results
-- count as ranks.
ALTER TABLE runs ADD COLUMN processes INTEGER;
