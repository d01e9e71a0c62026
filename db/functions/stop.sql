-- Stopping a run (POST /runs/{id}/stop, ferry stop).
--
-- ferry_stop stops a run for p_actor: steps not started yet stop at once;
-- running ones are killed by their owners (NOTIFY ferry_stop), after which
-- ferry_finish moves the run from stopping to stopped — or, when it has
-- steps under finally:, to running them (then stopped). Returns the run's
-- new state: stopping, stopped, or running (its finally steps run).
CREATE OR REPLACE FUNCTION ferry_stop(p_run bigint, p_actor text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_state text;
	v_body text;
	v_closed bigint[];
	v_children boolean;
	v_ready int;
BEGIN
	-- the run's queued steps first, in the claim's order of locks (step_queue, then steps, then
	-- runs): a claim that holds one of them finishes before this goes on. Locked after the steps
	-- (as the delete below did alone), a claim of the same step deadlocked with it
	PERFORM 1 FROM step_queue q JOIN steps s ON s.id = q.step_id
	WHERE s.run_id = p_run AND s.state = 'ready' ORDER BY q.step_id FOR UPDATE OF q;
	SELECT state, body_state INTO v_state, v_body FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	IF v_state = 'stopping' THEN
		RETURN v_state;
	END IF;
	IF v_state NOT IN ('pending', 'running') THEN
		RAISE EXCEPTION 'run % is already %', p_run, v_state USING ERRCODE = '55000';
	END IF;
	-- the run is stopping: its running jobs are killed by their owners; what
	-- is not started stops now, but for the finally steps, which run once
	-- the rest is terminal (stopping the run again stops them too)
	UPDATE runs SET state = 'stopping', reason = 'stopped by ' || p_actor WHERE id = p_run;
	WITH u AS (
		UPDATE steps SET state = 'stopped', finished_at = now(), not_before = NULL,
		       reason = 'run stopped by ' || p_actor
		WHERE run_id = p_run AND state IN ('blocked', 'ready', 'waiting')
		  AND (v_body IS NOT NULL OR spec ->> 'finally' IS DISTINCT FROM 'true')
		RETURNING id, name, parent_id
	), dq AS (
		DELETE FROM step_queue q USING u WHERE q.step_id = u.id
	), dw AS (
		DELETE FROM step_waits w USING u WHERE w.step_id = u.id
	), ev AS (
		-- a fan-out's children stop with it, one event for them all (the run.stop)
		INSERT INTO events (run_id, step, actor, kind)
		SELECT p_run, u.name, p_actor, 'step.stopped' FROM u WHERE u.parent_id IS NULL
	)
	SELECT array_agg(p_run) FILTER (WHERE u.parent_id IS NULL), bool_or(u.parent_id IS NOT NULL)
	INTO v_closed, v_children FROM u;
	INSERT INTO events (run_id, actor, kind) VALUES (p_run, p_actor, 'run.stop');
	v_ready := 0;
	IF v_closed IS NOT NULL THEN
		-- the run finishes (stopped) here when nothing runs, or releases its finally steps
		v_ready := ferry_release(p_actor, NULL, NULL, v_closed);
	END IF;
	IF v_children THEN
		-- fan-outs whose children all stopped end here; those with children still running, when they end
		v_ready := v_ready + ferry_fanout_recount(p_actor, p_run);
	END IF;
	IF v_ready > 0 THEN
		PERFORM pg_notify('ferry_ready', '');
	END IF;
	SELECT state INTO v_state FROM runs WHERE id = p_run;
	IF v_state = 'stopping' THEN
		PERFORM pg_notify('ferry_stop', p_run::text);
	END IF;
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
