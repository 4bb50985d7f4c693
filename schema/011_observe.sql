-- 011_observe: what each rank held and used, and a bounded trace of its steps (issue 17).
-- Bytes and figures an engine cannot tell are NULL (report.h: -1 on the wire, left out).
-- A usage row is one window of steps (an epoch, or what is left of a repeat).
-- A trace row is one traced step (or collective iteration) of one rank: its spans and
-- collectives as the worker sent them (JSON text, CLOCK_MONOTONIC ns of the rank's node)
-- and the rank's CLOCK_REALTIME offset, from which GET /v1/runs/{id}/trace builds the
-- timeline.

CREATE TABLE rank_memory (
    run_id            INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rank              INTEGER NOT NULL,
    repeat            INTEGER NOT NULL,
    params_bytes      INTEGER,
    buffers_bytes     INTEGER,
    grads_bytes       INTEGER,
    optimizer_bytes   INTEGER,
    comm_bytes        INTEGER,
    activations_bytes INTEGER,
    peak_rss_bytes    INTEGER NOT NULL,
    device_peak_bytes INTEGER,
    PRIMARY KEY (run_id, repeat, rank)
) WITHOUT ROWID;

CREATE TABLE rank_usage (
    run_id           INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rank             INTEGER NOT NULL,
    repeat           INTEGER NOT NULL,
    epoch            INTEGER NOT NULL,
    steps            INTEGER NOT NULL,
    wall_s           REAL NOT NULL,
    user_s           REAL NOT NULL,
    sys_s            REAL NOT NULL,
    voluntary_cs     INTEGER NOT NULL,
    involuntary_cs   INTEGER NOT NULL,
    rss_bytes        INTEGER,
    gpu_util_pct     REAL,
    gpu_mem_util_pct REAL,
    gpu_power_w      REAL,
    PRIMARY KEY (run_id, repeat, epoch, rank)
) WITHOUT ROWID;

CREATE TABLE trace_steps (
    run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rank            INTEGER NOT NULL,
    repeat          INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    clock_offset_ns INTEGER NOT NULL,
    spans           TEXT NOT NULL,
    ops             TEXT NOT NULL,
    PRIMARY KEY (run_id, repeat, step, rank)
) WITHOUT ROWID;
