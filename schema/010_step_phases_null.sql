-- 010_step_phases_null: a step's phases may be NULL. A framework engine (issue 16) cannot
-- observe every phase ddpbench's own worker times (TensorFlow's fused step has no separate
-- forward and backward); storing 0 would read as "took no time", so what an engine does not
-- observe is NULL and served null; bytes_sent too (a framework's collectives do not say what
-- they put on the wire). step_ms stays NOT NULL: every engine times its step.
-- SQLite drops NOT NULL only by rebuilding the table (as 006 did for epochs); every row is
-- copied as it is. Columns are those of 002 in order.

CREATE TABLE steps_new (
    run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rank            INTEGER NOT NULL,
    repeat          INTEGER NOT NULL,
    epoch           INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    warmup          INTEGER NOT NULL,
    samples         INTEGER NOT NULL,
    loss            REAL NOT NULL,
    data_ms         REAL,
    forward_ms      REAL,
    backward_ms     REAL,
    comm_ms         REAL,
    comm_exposed_ms REAL,
    optimizer_ms    REAL,
    step_ms         REAL NOT NULL,
    bytes_sent      INTEGER,
    PRIMARY KEY (run_id, repeat, step, rank)
) WITHOUT ROWID;
INSERT INTO steps_new SELECT run_id, rank, repeat, epoch, step, warmup, samples, loss, data_ms,
    forward_ms, backward_ms, comm_ms, comm_exposed_ms, optimizer_ms, step_ms, bytes_sent
    FROM steps;
DROP TABLE steps;
ALTER TABLE steps_new RENAME TO steps;
