-- A person continues a waiting step (POST /runs/{id}/steps/{step}/continue,
-- ferry continue).
--
-- ferry_continue: the step (a gate, or a label step) succeeds, optionally
-- with a payload that becomes its output (a label step's is merged over
-- the task it opened); its deadline goes and its successors move on.
CREATE OR REPLACE FUNCTION ferry_continue(p_run bigint, p_step text, p_actor text, p_data jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_id bigint;
	v_state text;
	v_ready int;
BEGIN
	PERFORM 1 FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	SELECT id, state INTO v_id, v_state FROM steps WHERE run_id = p_run AND name = p_step FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % has no step "%"', p_run, p_step USING ERRCODE = 'P0002';
	END IF;
	IF v_state <> 'waiting' THEN
		RAISE EXCEPTION 'step "%" of run % is %, not waiting: only a waiting step can be continued', p_step, p_run, v_state
		USING ERRCODE = '55000';
	END IF;
	UPDATE steps SET state = 'succeeded',
	       outputs = CASE WHEN jsonb_typeof(outputs) = 'object' AND jsonb_typeof(p_data) = 'object'
	                      THEN outputs || p_data
	                      WHEN p_data IS NULL THEN outputs ELSE p_data END,
	       started_at = coalesce(started_at, now()),
	       finished_at = now(), reason = 'continued by ' || p_actor
	WHERE id = v_id;
	DELETE FROM step_waits WHERE step_id = v_id;
	INSERT INTO events (run_id, step, actor, kind, detail)
	VALUES (p_run, p_step, p_actor, 'step.continued', jsonb_strip_nulls(jsonb_build_object('data', p_data)));
	UPDATE runs SET state = 'running', started_at = coalesce(started_at, now()) WHERE id = p_run AND state = 'pending';
	v_ready := ferry_release(p_actor, ARRAY[v_id], NULL, ARRAY[p_run]);
	IF v_ready > 0 THEN
		PERFORM pg_notify('ferry_ready', '');
	END IF;
	RETURN 'succeeded';
END;
$$;
