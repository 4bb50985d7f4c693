-- 021_calibrations: what co-located ranks cost each other's compute (issue 35,
-- docs/model.md "Co-location and contention"), measured by a calibration experiment (a
-- train spec with calibrate true: k ranks placed and pinned as a k-rank run, exchanging
-- nothing) and stored once when it has finished, per node and (model, batch_size, threads,
-- device, dataset). curve: [{"k", "steps", "forward", "forward_lo", "forward_hi",
-- "backward"..., "optimizer"...}] in ascending k, each the median phase at k over the
-- median at k = 1 with a 95 % interval. switch_us: one context switch on the node (a
-- pipe ping-pong between two processes pinned to one CPU); quantum_ms: the scheduler's
-- time slice. A calibration is never updated: a later one of the same key is stored
-- beside it and predictions use the latest.

CREATE TABLE calibrations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id INTEGER NOT NULL,            -- kept when the experiment is deleted
    model_version INTEGER NOT NULL,
    node          TEXT NOT NULL,               -- rank 0's hostname
    model         TEXT NOT NULL,
    batch_size    INTEGER NOT NULL,
    threads       INTEGER NOT NULL,
    device        TEXT NOT NULL,
    dataset       TEXT NOT NULL,               -- the spec's dataset.name
    pinned        INTEGER NOT NULL,            -- every rank had a CPU of its own up to cores
    cpus          INTEGER NOT NULL,
    switch_us     REAL NOT NULL,
    quantum_ms    REAL NOT NULL,
    curve         TEXT NOT NULL,
    created_at    REAL NOT NULL,
    UNIQUE (experiment_id, model_version)
);
CREATE INDEX calibrations_key ON calibrations (node, model, batch_size, threads, device,
                                               dataset);
