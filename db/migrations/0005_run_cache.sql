-- The API keeps the JSON of finished runs in memory (api/runcache.c). A
-- finished run changes only when its row changes (a retry moves it back to
-- pending) or goes away; then this trigger tells every daemon which run to
-- forget: NOTIFY ferry_run, payload the run id, sent at commit. Runs that are
-- not finished are never cached, so their updates (the hot path of the
-- engine) send nothing.
CREATE FUNCTION ferry_run_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('ferry_run', OLD.id::text);
	RETURN NULL;
END;
$$;

CREATE TRIGGER runs_finished_changed
	AFTER UPDATE OR DELETE ON runs
	FOR EACH ROW
	WHEN (OLD.state IN ('succeeded', 'failed', 'stopped'))
	EXECUTE FUNCTION ferry_run_changed();
