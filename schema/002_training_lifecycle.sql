-- 002_training_lifecycle: per-rank training steps and per-epoch figures (the step-time
-- breakdown and accuracy curves), a stored count of each experiment's finished runs (a
-- list of experiments with thousands of runs must not count them per request), and
-- indexes the API's queries use.

CREATE TABLE steps (
    run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rank            INTEGER NOT NULL,
    repeat          INTEGER NOT NULL,
    epoch           INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    warmup          INTEGER NOT NULL,
    samples         INTEGER NOT NULL,
    loss            REAL NOT NULL,
    data_ms         REAL NOT NULL,
    forward_ms      REAL NOT NULL,
    backward_ms     REAL NOT NULL,
    comm_ms         REAL NOT NULL,
    comm_exposed_ms REAL NOT NULL,
    optimizer_ms    REAL NOT NULL,
    step_ms         REAL NOT NULL,
    bytes_sent      INTEGER NOT NULL,
    PRIMARY KEY (run_id, repeat, step, rank)
) WITHOUT ROWID;

CREATE TABLE epochs (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    repeat     INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    samples    INTEGER NOT NULL,
    train_loss REAL NOT NULL,
    train_acc  REAL NOT NULL,
    test_loss  REAL,
    test_acc   REAL,
    time_s     REAL NOT NULL,
    PRIMARY KEY (run_id, repeat, epoch)
) WITHOUT ROWID;

CREATE INDEX runs_experiment ON runs (experiment_id, point);

ALTER TABLE experiments ADD COLUMN runs_finished INTEGER NOT NULL DEFAULT 0;
UPDATE experiments SET runs_finished = (SELECT count(*) FROM runs r WHERE
    r.experiment_id = experiments.id AND r.status IN
    ('succeeded', 'failed', 'cancelled', 'interrupted'));
