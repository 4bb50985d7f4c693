-- 018_precision_steps: issue 33's step figures of precision and clipping (common/report.h).
-- grad_norm: the global L2 norm of the averaged gradients before clipping (runs with
-- clip_grad_norm > 0); loss_scale: the scale an fp16 step's backward ran with; skipped: 1
-- when fp16 skipped the step's update (a non-finite gradient). NULL where they do not apply
-- (skipped too: a run without loss scaling never skips).

ALTER TABLE steps ADD COLUMN grad_norm REAL;
ALTER TABLE steps ADD COLUMN loss_scale REAL;
ALTER TABLE steps ADD COLUMN skipped INTEGER;
