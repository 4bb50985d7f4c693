-- 023_pipe_batch: the whole batch's timing beside a pipeline's layer profile (report "pipe",
-- report.h struct report_pipe; docs/model.md "Pipelines"). Rank 0 times the whole model on
-- the whole batch (batch samples) as it times it on one micro-batch: the sums over layers
-- of each layer's median of three passes. With the profile's own sums they say what a
-- micro-batch costs against the batch it is cut from: a layer's fixed cost per call does
-- not shrink with its samples (resnet18 on this project's CPU: 2 samples take 0.7 of 8
-- samples' time, not 0.25). NULL: a run from before it, whose stages are predicted at the
-- batch's time over the micro-batches, as before.

ALTER TABLE run_pipe ADD COLUMN batch INTEGER CHECK (batch IS NULL OR batch >= 1);
ALTER TABLE run_pipe ADD COLUMN batch_forward_ns INTEGER;
ALTER TABLE run_pipe ADD COLUMN batch_backward_ns INTEGER;
