-- 014_data_pipeline: the data pipeline's figures of a step (report.h struct report_step):
-- loader_cpu_ms is the CPU time the rank's loader threads spent filling batches during the
-- step (decode, augment, copy; summed over the threads, so it can exceed step_ms), and
-- read_bytes the bytes the rank's file-backed dataset read from storage during it. NULL
-- where the engine does not say (the framework engines) and for every row stored before
-- this migration: an unmeasured loader is not a loader that cost nothing.

ALTER TABLE steps ADD COLUMN loader_cpu_ms REAL;
ALTER TABLE steps ADD COLUMN read_bytes INTEGER;
