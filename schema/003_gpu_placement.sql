-- 003_gpu_placement: where a device "cuda" run ran. runs.emulated is 1 when several ranks
-- shared one GPU (spec emulate_multi_rank, daemon/gpu_slots.h): such figures measure NCCL's
-- socket or multi-rank-per-GPU path, not one GPU per rank, so results keep them apart.
-- run_ranks.gpu is the node's GPU index a rank was given (CUDA_VISIBLE_DEVICES); NULL for
-- CPU runs.

ALTER TABLE runs ADD COLUMN emulated INTEGER NOT NULL DEFAULT 0 CHECK (emulated IN (0, 1));
ALTER TABLE run_ranks ADD COLUMN gpu INTEGER;
