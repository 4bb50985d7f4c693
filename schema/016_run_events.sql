-- 016_run_events: what the daemon did to a run besides running it (issue 32).
-- run_events: one row per thing that happened, in order (seq): for type 'fault', an
-- injection ('inject'), its undoing ('restore'), or a fault the run ended before
-- ('not_injected', detail says why), with the rank or node it targeted and the run's
-- steps done at that moment. Other parts of issue 32 (elastic generations) add types.
-- run_faults: each fault of the run's spec (its index in "faults") and its outcome:
-- injected, when and at which step, when it was undone, or why it was not.

CREATE TABLE run_events (
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    happened_at REAL NOT NULL,
    type        TEXT NOT NULL,
    action      TEXT NOT NULL,
    fault       INTEGER,
    kind        TEXT,
    rank        INTEGER,
    node        INTEGER,
    step        INTEGER,
    detail      TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TABLE run_faults (
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    fault       INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    rank        INTEGER,
    node        INTEGER,
    at_step     INTEGER,
    at_s        REAL,
    duration_s  REAL,
    injected    INTEGER NOT NULL DEFAULT 0,
    injected_at REAL,
    step        INTEGER,
    restored_at REAL,
    note        TEXT,
    PRIMARY KEY (run_id, fault)
) WITHOUT ROWID;
