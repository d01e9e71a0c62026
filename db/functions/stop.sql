-- Stopping a run (POST /runs/{id}/stop, ferry stop).
--
-- ferry_stop stops a run for p_actor: steps not started yet stop at once;
-- running ones are killed by their owners (NOTIFY ferry_stop), after which
-- ferry_finish moves the run from stopping to stopped. Returns the run's
-- new state.
CREATE OR REPLACE FUNCTION ferry_stop(p_run bigint, p_actor text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_state text;
	v_n int;
BEGIN
	SELECT state INTO v_state FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	IF v_state = 'stopping' THEN
		RETURN v_state;
	END IF;
	IF v_state NOT IN ('pending', 'running') THEN
		RAISE EXCEPTION 'run % is already %', p_run, v_state USING ERRCODE = '55000';
	END IF;
	WITH u AS (
		UPDATE steps SET state = 'stopped', finished_at = now(), not_before = NULL,
		       reason = 'run stopped by ' || p_actor
		WHERE run_id = p_run AND state IN ('blocked', 'ready', 'waiting')
		RETURNING id, name
	), dq AS (
		DELETE FROM step_queue q USING u WHERE q.step_id = u.id
	), ev AS (
		INSERT INTO events (run_id, step, actor, kind) SELECT p_run, u.name, p_actor, 'step.stopped' FROM u
	)
	SELECT count(*) INTO v_n FROM u;
	UPDATE runs SET open_steps = open_steps - v_n WHERE id = p_run;
	IF EXISTS (SELECT 1 FROM steps WHERE run_id = p_run AND state = 'running') THEN
		v_state := 'stopping';
		UPDATE runs SET state = v_state, reason = 'stopped by ' || p_actor WHERE id = p_run;
		PERFORM pg_notify('ferry_stop', p_run::text);
	ELSE
		v_state := 'stopped';
		UPDATE runs SET state = v_state, reason = 'stopped by ' || p_actor, finished_at = now()
		WHERE id = p_run;
	END IF;
	INSERT INTO events (run_id, actor, kind) VALUES (p_run, p_actor, 'run.stop');
	RETURN v_state;
END;
$$;

-- ferry_dev_expire stops, for p_actor (the leader), every unfinished dev run
-- whose session's lease (runs.dev_lease_until, renewed by its `ferry dev`
-- process) expired: its `ferry dev` died. Steps not started stop at once;
-- running ones are killed by whoever holds their jobs now (NOTIFY
-- ferry_stop). The run's and those steps' reason is "dev session ended".
-- Returns how many runs it stopped.
CREATE OR REPLACE FUNCTION ferry_dev_expire(p_actor text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_run bigint;
	v_n int := 0;
BEGIN
	FOR v_run IN SELECT id FROM runs
	             WHERE dev_lease_until < now() AND state IN ('pending', 'running')
	             ORDER BY id FOR UPDATE SKIP LOCKED
	LOOP
		PERFORM ferry_stop(v_run, p_actor);
		UPDATE runs SET reason = 'dev session ended', dev_lease_until = NULL WHERE id = v_run;
		UPDATE steps SET reason = 'dev session ended'
		WHERE run_id = v_run AND state = 'stopped' AND reason = 'run stopped by ' || p_actor;
		INSERT INTO events (run_id, actor, kind, detail)
		VALUES (v_run, p_actor, 'run.dev_session_ended', jsonb_build_object('reason', 'dev session ended'));
		v_n := v_n + 1;
	END LOOP;
	RETURN v_n;
END;
$$;
