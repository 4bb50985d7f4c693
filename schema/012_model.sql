-- 012_model: the performance model's inputs and fits (issue 18, docs/model.md).
-- run_grads: per repeat, when each gradient became final in rank 0's backward (report
-- "grads": [[bytes, ready_ns], ...] in the order backward finishes them, medians over the
-- repeat's steps), the input of the step simulation.
-- fits: one latency-bandwidth fit T = alpha + beta * bytes per (backend, device, op,
-- algorithm, world size, nodes, network profile) of a collective experiment, stored once
-- the experiment has finished so every prediction can name the fit it used. A fit is
-- never updated: a new model version stores new rows beside the old ones.

CREATE TABLE run_grads (
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    repeat      INTEGER NOT NULL,
    steps       INTEGER NOT NULL,
    backward_ns INTEGER NOT NULL,
    tensors     TEXT NOT NULL,
    PRIMARY KEY (run_id, repeat)
) WITHOUT ROWID;

CREATE TABLE fits (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id    INTEGER NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    model_version    INTEGER NOT NULL,
    backend          TEXT NOT NULL,
    device           TEXT NOT NULL,
    op               TEXT NOT NULL,
    algorithm        TEXT NOT NULL,
    world_size       INTEGER NOT NULL,
    nodes            INTEGER NOT NULL,
    network_profile  TEXT NOT NULL,            -- '' = the host network
    alpha_s          REAL NOT NULL,
    beta_s_per_byte  REAL NOT NULL,
    gamma_s_per_byte REAL,                     -- NULL: the data does not separate it
    r2               REAL NOT NULL,
    worst_resid      REAL NOT NULL,
    points           INTEGER NOT NULL,
    min_bytes        INTEGER NOT NULL,
    max_bytes        INTEGER NOT NULL,
    created_at       REAL NOT NULL,
    UNIQUE (experiment_id, model_version, backend, device, op, algorithm, world_size, nodes,
            network_profile)
);
