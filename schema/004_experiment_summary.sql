-- 004_experiment_summary: what an experiment's runs cover (models, ops, backends,
-- strategies, world sizes: the distinct values over its runs' resolved specs), kept with
-- the experiment so the list endpoint shows them without reading every run of every
-- listed experiment. daemon/db.c fills it for new experiments with the same expression.

ALTER TABLE experiments ADD COLUMN summary TEXT;

UPDATE experiments SET summary = json_object(
    'models', json((SELECT json_group_array(v) FROM (SELECT DISTINCT json_extract(r.spec, '$.model') AS v
        FROM runs r WHERE r.experiment_id = experiments.id AND v IS NOT NULL ORDER BY v))),
    'ops', json((SELECT json_group_array(v) FROM (SELECT DISTINCT json_extract(r.spec, '$.op') AS v
        FROM runs r WHERE r.experiment_id = experiments.id AND v IS NOT NULL ORDER BY v))),
    'backends', json((SELECT json_group_array(v) FROM (SELECT DISTINCT json_extract(r.spec, '$.backend') AS v
        FROM runs r WHERE r.experiment_id = experiments.id AND v IS NOT NULL ORDER BY v))),
    'strategies', json((SELECT json_group_array(v) FROM (SELECT DISTINCT json_extract(r.spec, '$.strategy') AS v
        FROM runs r WHERE r.experiment_id = experiments.id AND v IS NOT NULL ORDER BY v))),
    'world_sizes', json((SELECT json_group_array(v) FROM (SELECT DISTINCT r.world_size AS v
        FROM runs r WHERE r.experiment_id = experiments.id ORDER BY v))));
