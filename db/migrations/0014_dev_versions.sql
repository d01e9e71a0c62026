-- A version registered by a `ferry dev run` is marked dev: it is listed and
-- can be fetched, but never takes an alias (so it is never the production
-- version a `>= production` gate compares against).
ALTER TABLE model_versions ADD COLUMN dev boolean NOT NULL DEFAULT false;
UPDATE model_versions v SET dev = true FROM runs r WHERE r.id = v.run_id AND r.trigger = 'dev';
