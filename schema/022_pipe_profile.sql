-- 022_pipe_profile: a pipeline run's input to the model of its step (issue 35,
-- docs/model.md "Pipelines"; report "pipe", report.h struct report_pipe). Per repeat, rank
-- 0's one-rank profile of every layer on one micro-batch (layers: [[forward_ns,
-- backward_ns, param_bytes], ...] each the median of three timed passes), the cut
-- the run used (cuts: [[first_layer, bytes], ...] per stage after the first, bytes the
-- activation of one micro-batch crossing into it), the micro-batch's samples and the bytes
-- of a weight tied across the first and last stage (0: none).

CREATE TABLE run_pipe (
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    repeat      INTEGER NOT NULL,
    stages      INTEGER NOT NULL,
    micro_batch INTEGER NOT NULL,
    tied_bytes  INTEGER NOT NULL,
    layers      TEXT NOT NULL,
    cuts        TEXT NOT NULL,
    PRIMARY KEY (run_id, repeat)
) WITHOUT ROWID;
