-- Invalidation of the API's cache of finished runs (api/runcache.c). The
-- trigger that calls it is in db/migrations/0005_run_cache.sql.
--
-- ferry_run_changed: a finished run changes only when its row changes (a
-- retry moves it back to pending) or goes away; then this tells every
-- daemon which run to forget: NOTIFY ferry_run, payload the run id, sent at
-- commit. Runs that are not finished are never cached, so their updates
-- (the hot path of the engine) send nothing.
CREATE OR REPLACE FUNCTION ferry_run_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('ferry_run', OLD.id::text);
	RETURN NULL;
END;
$$;
