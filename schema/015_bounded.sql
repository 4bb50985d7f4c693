-- 015_bounded: an experiment's version, and the trace rows a run's cap dropped (issue 31).
--
-- experiments.version changes whenever anything the report or the fit reads of the
-- experiment changes: its own row, its runs, and every row stored for a run. Triggers
-- bump it, so no writer can forget to (the API caches reports and fits by it). Trace rows
-- and fits are left out: no report reads the trace, and a fit is derived from the rows
-- (storing one must not invalidate what it was computed for).
-- runs.trace_dropped counts the trace rows ingest refused past the run's cap.

ALTER TABLE experiments ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN trace_dropped INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER experiments_version_self AFTER UPDATE ON experiments
WHEN NEW.version = OLD.version
BEGIN
    UPDATE experiments SET version = version + 1 WHERE id = NEW.id;
END;

CREATE TRIGGER experiments_version_run_insert AFTER INSERT ON runs
BEGIN
    UPDATE experiments SET version = version + 1 WHERE id = NEW.experiment_id;
END;

CREATE TRIGGER experiments_version_run_update AFTER UPDATE ON runs
WHEN NEW.trace_dropped = OLD.trace_dropped
BEGIN
    UPDATE experiments SET version = version + 1 WHERE id = NEW.experiment_id;
END;

CREATE TRIGGER experiments_version_run_ranks_insert AFTER INSERT ON run_ranks
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_run_ranks_update AFTER UPDATE ON run_ranks
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_collectives_insert AFTER INSERT ON collectives
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_collectives_update AFTER UPDATE ON collectives
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_run_env_insert AFTER INSERT ON run_env
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_run_env_update AFTER UPDATE ON run_env
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_steps_insert AFTER INSERT ON steps
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_steps_update AFTER UPDATE ON steps
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_epochs_insert AFTER INSERT ON epochs
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_epochs_update AFTER UPDATE ON epochs
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_rank_memory_insert AFTER INSERT ON rank_memory
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_rank_memory_update AFTER UPDATE ON rank_memory
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_rank_usage_insert AFTER INSERT ON rank_usage
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_rank_usage_update AFTER UPDATE ON rank_usage
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_run_grads_insert AFTER INSERT ON run_grads
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;

CREATE TRIGGER experiments_version_run_grads_update AFTER UPDATE ON run_grads
BEGIN
    UPDATE experiments SET version = version + 1
    WHERE id = (SELECT experiment_id FROM runs WHERE id = NEW.run_id);
END;
