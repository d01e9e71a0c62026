-- Housekeeping a real installation needs (DELETE /runs/{id}, retention).
--
-- logs_removed_at: when the retention task (FERRY_RETENTION_DAYS, a leader
-- task in orchestrator/engine.c) removed the run's attempt directories and
-- logs under $FERRY_HOME/runs/RUN; the run's rows stay. A run retried and
-- finished again after that is due again (logs_removed_at < finished_at).
ALTER TABLE runs ADD COLUMN logs_removed_at timestamptz;
CREATE INDEX runs_retention ON runs (finished_at)
	WHERE state IN ('succeeded', 'failed', 'stopped') AND logs_removed_at IS NULL;

-- A registered model version outlives the run that made it: deleting the run
-- must neither delete the version nor forget which run it came from, so the
-- lineage's run id becomes a plain number (run ids come from a sequence and
-- are never reused) instead of a foreign key that ON DELETE SET NULL cleared.
DO $$
DECLARE
	c text;
BEGIN
	FOR c IN SELECT conname FROM pg_constraint
		 WHERE conrelid = 'model_versions'::regclass AND contype = 'f'
		   AND confrelid = 'runs'::regclass
	LOOP
		EXECUTE format('ALTER TABLE model_versions DROP CONSTRAINT %I', c);
	END LOOP;
END;
$$;
