-- 001_init: experiments, their runs (one per sweep point), per-rank process records,
-- collective benchmark results and the environment each rank reported.
-- Timestamps are Unix seconds (REAL); JSON columns hold jansson-encoded objects.
-- Append-only: later changes go in new NNN_name.sql files (applied by user_version).

CREATE TABLE experiments (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    workload    TEXT NOT NULL,
    spec        TEXT NOT NULL,                 -- normalized submitted spec
    status      TEXT NOT NULL CHECK (status IN
                  ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    n_runs      INTEGER NOT NULL CHECK (n_runs >= 1),
    created_at  REAL NOT NULL,
    started_at  REAL,
    finished_at REAL
);
CREATE INDEX experiments_created ON experiments (created_at);

CREATE TABLE runs (
    id            INTEGER PRIMARY KEY,
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
    UNIQUE (experiment_id, point)
);
CREATE INDEX runs_status ON runs (status, id);

CREATE TABLE run_ranks (
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rank        INTEGER NOT NULL,
    node        TEXT NOT NULL,                 -- the ddpbenchd node that spawned it
    host        TEXT,                          -- hostname the worker reported
    pid         INTEGER,
    cpus        TEXT,                          -- CPU list it was pinned to
    status      TEXT NOT NULL CHECK (status IN
                  ('starting', 'running', 'done', 'failed', 'killed')),
    exit_code   INTEGER,
    signal      INTEGER,
    error       TEXT,
    started_at  REAL,
    finished_at REAL,
    PRIMARY KEY (run_id, rank)
);

CREATE TABLE collectives (
    run_id         INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    repeat         INTEGER NOT NULL,
    op             TEXT NOT NULL,
    dtype          TEXT NOT NULL,
    redop          TEXT NOT NULL,
    algorithm      TEXT NOT NULL,
    inplace        INTEGER NOT NULL,
    bytes          INTEGER NOT NULL,
    count          INTEGER NOT NULL,
    iters          INTEGER NOT NULL,
    time_us_min    REAL NOT NULL,
    time_us_median REAL NOT NULL,
    time_us_p95    REAL NOT NULL,
    time_us_mean   REAL NOT NULL,
    time_us_max    REAL NOT NULL,
    algbw_gbs      REAL NOT NULL,
    busbw_gbs      REAL NOT NULL,
    wrong          INTEGER NOT NULL,
    PRIMARY KEY (run_id, repeat, op, inplace, bytes)
);

CREATE TABLE run_env (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rank   INTEGER NOT NULL,
    env    TEXT NOT NULL,
    PRIMARY KEY (run_id, rank)
);
