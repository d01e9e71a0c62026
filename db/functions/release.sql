-- What follows steps closing, shared by ferry_finish, ferry_continue and
-- ferry_expire_waits.
--
-- ferry_release: the successors of succeeded steps lose a pending
-- dependency and, at zero, become ready (enqueued) or, for steps that wait
-- for a person (steps.waits: a gate), waiting, with a deadline when they
-- have a timeout; the descendants of failed or stopped steps are skipped;
-- each run loses one open step per closed step (p_closed holds one run id
-- per closed step) and finishes at zero. Returns how many steps were
-- enqueued.
CREATE OR REPLACE FUNCTION ferry_release(p_actor text, p_ok bigint[], p_failed bigint[], p_closed bigint[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_ready int := 0;
BEGIN
	IF p_ok IS NOT NULL THEN
		WITH d AS (
			SELECT e.step_id, count(*)::int AS n FROM step_deps e
			WHERE e.needs_id = ANY (p_ok) GROUP BY e.step_id
		), u AS (
			UPDATE steps s SET deps_pending = s.deps_pending - d.n,
			       state = CASE WHEN s.deps_pending - d.n > 0 THEN s.state
			                    WHEN s.waits THEN 'waiting' ELSE 'ready' END,
			       started_at = CASE WHEN s.deps_pending - d.n = 0 AND s.waits THEN now()
			                         ELSE s.started_at END
			FROM d WHERE s.id = d.step_id AND s.state = 'blocked'
			RETURNING s.id, s.run_id, s.dev, s.state, s.name, s.timeout_ms, s.spec ->> 'on_timeout' AS on_timeout
		), q AS (
			INSERT INTO step_queue (step_id, run_id, dev)
			SELECT u.id, u.run_id, u.dev FROM u WHERE u.state = 'ready'
			RETURNING 1
		), w AS (
			INSERT INTO events (run_id, step, actor, kind)
			SELECT u.run_id, u.name, p_actor, 'step.waiting' FROM u WHERE u.state = 'waiting'
		), dl AS (
			INSERT INTO step_waits (step_id, run_id, deadline, on_timeout)
			SELECT u.id, u.run_id, now() + u.timeout_ms * interval '1 millisecond',
			       coalesce(u.on_timeout, 'fail')
			FROM u WHERE u.state = 'waiting' AND u.timeout_ms > 0
			ON CONFLICT (step_id) DO UPDATE SET deadline = excluded.deadline
		)
		SELECT count(*) INTO v_ready FROM q;
	END IF;

	IF p_failed IS NOT NULL THEN
		WITH RECURSIVE down (id) AS (
			SELECT e.step_id FROM step_deps e WHERE e.needs_id = ANY (p_failed)
			UNION
			SELECT e.step_id FROM step_deps e JOIN down ON e.needs_id = down.id
		), u AS (
			UPDATE steps s SET state = 'skipped', reason = 'upstream step did not succeed', finished_at = now()
			FROM down WHERE s.id = down.id AND s.state = 'blocked'
			RETURNING s.run_id, s.name
		), ev AS (
			INSERT INTO events (run_id, step, actor, kind) SELECT u.run_id, u.name, p_actor, 'step.skipped' FROM u
		)
		SELECT p_closed || array_agg(u.run_id) INTO p_closed FROM u;
	END IF;

	-- runs lose one open step per step closed; at zero they finish
	IF p_closed IS NOT NULL THEN
		WITH c AS (
			SELECT x AS run_id, count(*)::int AS n FROM unnest(p_closed) AS x GROUP BY x
		), done AS (
			UPDATE runs r SET open_steps = r.open_steps - c.n,
			       state = CASE
			               WHEN r.open_steps - c.n > 0 OR r.state NOT IN ('pending', 'running', 'stopping') THEN r.state
			               WHEN r.state = 'stopping' THEN 'stopped'
			               WHEN EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.id AND x.state = 'failed') THEN 'failed'
			               WHEN EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.id AND x.state = 'stopped') THEN 'stopped'
			               ELSE 'succeeded' END,
			       finished_at = CASE WHEN r.open_steps - c.n > 0 THEN r.finished_at ELSE now() END
			FROM c WHERE r.id = c.run_id
			RETURNING r.id, r.state, r.open_steps
		)
		INSERT INTO events (run_id, actor, kind)
		SELECT done.id, p_actor, 'run.' || done.state FROM done WHERE done.open_steps = 0;
	END IF;

	RETURN v_ready;
END;
$$;
