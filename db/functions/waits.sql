-- Deadlines of waiting steps (steps.timeout_ms on a gate or label step).
--
-- ferry_expire_waits: waiting steps whose deadline passed: on_timeout
-- continue succeeds them (outputs say timed_out), fail fails them; their
-- runs move on.
CREATE OR REPLACE FUNCTION ferry_expire_waits(p_actor text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_ok bigint[];
	v_failed bigint[];
	v_closed bigint[];
	v_ready int;
BEGIN
	WITH due AS (
		SELECT w.step_id, w.on_timeout FROM step_waits w WHERE w.deadline <= now()
		ORDER BY w.deadline LIMIT 100
		FOR UPDATE SKIP LOCKED
	), del AS (
		DELETE FROM step_waits w USING due WHERE w.step_id = due.step_id
	), u AS (
		UPDATE steps s SET
		       state = CASE WHEN due.on_timeout = 'continue' THEN 'succeeded' ELSE 'failed' END,
		       outputs = CASE WHEN due.on_timeout = 'continue'
		                      THEN CASE WHEN jsonb_typeof(s.outputs) = 'object' THEN s.outputs ELSE '{}' END
		                           || '{"timed_out": true}'::jsonb
		                      ELSE s.outputs END,
		       reason = 'no one continued it within ' || (s.timeout_ms / 1000) || ' s (on_timeout: ' || due.on_timeout || ')',
		       finished_at = now()
		FROM due WHERE s.id = due.step_id AND s.state = 'waiting'
		RETURNING s.id, s.run_id, s.name, s.state, s.reason
	), ev AS (
		INSERT INTO events (run_id, step, actor, kind, detail)
		SELECT u.run_id, u.name, p_actor, 'step.timed_out',
		       jsonb_build_object('state', u.state, 'reason', u.reason) FROM u
	)
	SELECT array_agg(u.id) FILTER (WHERE u.state = 'succeeded'),
	       array_agg(u.id) FILTER (WHERE u.state = 'failed'),
	       array_agg(u.run_id)
	INTO v_ok, v_failed, v_closed FROM u;
	IF v_closed IS NULL THEN
		RETURN 0;
	END IF;
	v_ready := ferry_release(p_actor, v_ok, v_failed, v_closed);
	IF v_ready > 0 THEN
		PERFORM pg_notify('ferry_ready', '');
	END IF;
	RETURN v_ready;
END;
$$;
