-- 016_elastic: elastic runs (the spec's "elastic", issue 32; daemon/elastic.h).
-- generations: one row per generation of a run, the launch's (0) included: its world size,
-- its members and joiners (JSON arrays of slots), why it was formed, when the daemon
-- published it (unix seconds), when a member of it first saw it fail (detected_at), when
-- it ran its first step (resumed_at) with the commit it restored (commit_step), the steps
-- redone since (lost_steps) and the regroup's duration; lost_at is when the daemon saw the
-- slot end whose loss formed it (NULL for the launch's and growth's).
-- steps: the generation a step ran in and its world size (NULL for runs that are not
-- elastic), and when the daemon stored it (at, unix seconds), which the throughput before,
-- during and after a fault and the dashboard's time axis read.

CREATE TABLE generations (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    gen          INTEGER NOT NULL,
    world        INTEGER NOT NULL,
    members      TEXT NOT NULL,
    joiners      TEXT NOT NULL,
    reason       TEXT NOT NULL,
    published_at REAL NOT NULL,
    lost_at      REAL,
    detected_at  REAL,
    resumed_at   REAL,
    regroup_ms   REAL,
    commit_step  INTEGER,
    lost_steps   INTEGER,
    PRIMARY KEY (run_id, gen)
) WITHOUT ROWID;

ALTER TABLE steps ADD COLUMN generation INTEGER;
ALTER TABLE steps ADD COLUMN world INTEGER;
ALTER TABLE steps ADD COLUMN at REAL;
