-- 005_ids_never_reused: experiments and runs get AUTOINCREMENT ids, so an id freed by
-- DELETE is never handed out again (a stale link, script or compare URL must not point
-- at other data). SQLite adds AUTOINCREMENT only by rebuilding a table; the rebuild
-- follows SQLite's documented procedure (db_migrate runs every migration with foreign
-- keys off and checks them before it commits). Columns are those of 001-004 in order.
-- Ids freed before this migration above the highest one kept cannot be known; from here
-- on sqlite_sequence remembers the highest id ever given.

CREATE TABLE experiments_new (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT NOT NULL,
    workload      TEXT NOT NULL,
    spec          TEXT NOT NULL,                 -- normalized submitted spec
    status        TEXT NOT NULL CHECK (status IN
                    ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    n_runs        INTEGER NOT NULL CHECK (n_runs >= 1),
    created_at    REAL NOT NULL,
    started_at    REAL,
    finished_at   REAL,
    runs_finished INTEGER NOT NULL DEFAULT 0,
    summary       TEXT
);
INSERT INTO experiments_new (id, name, workload, spec, status, n_runs, created_at, started_at,
                             finished_at, runs_finished, summary)
    SELECT id, name, workload, spec, status, n_runs, created_at, started_at, finished_at,
           runs_finished, summary FROM experiments;
DROP TABLE experiments;
ALTER TABLE experiments_new RENAME TO experiments;
CREATE INDEX experiments_created ON experiments (created_at);

CREATE TABLE runs_new (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id INTEGER NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    point         INTEGER NOT NULL,            -- index of the sweep point
    params        TEXT NOT NULL,               -- the swept values of this point
    spec          TEXT NOT NULL,               -- resolved spec the workers ran
    world_size    INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN
                    ('queued', 'starting', 'running', 'succeeded', 'failed', 'cancelled',
                     'interrupted')),
    progress      REAL NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    started_at    REAL,
    finished_at   REAL,
    error         TEXT,
    error_rank    INTEGER,
    emulated      INTEGER NOT NULL DEFAULT 0 CHECK (emulated IN (0, 1)),
    UNIQUE (experiment_id, point)
);
INSERT INTO runs_new (id, experiment_id, point, params, spec, world_size, status, progress,
                      created_at, started_at, finished_at, error, error_rank, emulated)
    SELECT id, experiment_id, point, params, spec, world_size, status, progress, created_at,
           started_at, finished_at, error, error_rank, emulated FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_status ON runs (status, id);
CREATE INDEX runs_experiment ON runs (experiment_id, point);
