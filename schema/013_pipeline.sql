-- 013_pipeline: pipeline parallelism's figures of a step (spec pipeline > 1; report.h
-- struct report_step). stage is the rank's stage (rank = replica * pipeline + stage),
-- p2p_ms the time in point-to-point sends and receives of activations and their gradients,
-- p2p_bytes what the rank sent that way, bubble_ms the step's idle time (the pipeline's
-- bubble plus the p2p overhead). NULL for every step of a run without a pipeline, and for
-- every row stored before this migration: no pipeline is not a stage or a bubble of 0.

ALTER TABLE steps ADD COLUMN stage INTEGER;
ALTER TABLE steps ADD COLUMN p2p_ms REAL;
ALTER TABLE steps ADD COLUMN p2p_bytes INTEGER;
ALTER TABLE steps ADD COLUMN bubble_ms REAL;
