-- What follows steps closing, shared by ferry_finish, ferry_continue,
-- ferry_expire_waits and ferry_stop.
--
-- ferry_unblock: steps p_steps lose p_n pending dependencies each and, at
-- zero, become ready (enqueued) or, for steps that wait for a person
-- (steps.waits: a gate), waiting, with a deadline when they have a
-- timeout. Returns how many steps were enqueued.
CREATE OR REPLACE FUNCTION ferry_unblock(p_actor text, p_steps bigint[], p_n int[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_ready int := 0;
	v_waiting bigint[];
BEGIN
	WITH d AS (
		SELECT * FROM unnest(p_steps, p_n) AS t(step_id, n)
	), u AS (
		UPDATE steps s SET deps_pending = s.deps_pending - d.n,
		       state = CASE WHEN s.deps_pending - d.n > 0 THEN s.state
		                    WHEN s.waits THEN 'waiting' ELSE 'ready' END,
		       started_at = CASE WHEN s.deps_pending - d.n = 0 AND s.waits THEN now()
		                         ELSE s.started_at END
		FROM d WHERE s.id = d.step_id AND s.state = 'blocked'
		RETURNING s.id, s.run_id, s.dev, s.state, CASE WHEN s.state = 'ready' THEN s.spec END AS qspec
	), q AS (
		INSERT INTO step_queue (step_id, run_id, dev, queue, priority, cpus, memory_mb, gpus, named, gpu_shared)
		SELECT u.id, u.run_id, u.dev, ferry_req_queue(u.qspec), ferry_req_priority(u.qspec), ferry_req_cpus(u.qspec), ferry_req_memory_mb(u.qspec), ferry_req_gpus(u.qspec), ferry_req_named(u.qspec), ferry_req_gpu_shared(u.qspec) FROM u WHERE u.state = 'ready'
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM q), array_agg(u.id ORDER BY u.id) FILTER (WHERE u.state = 'waiting')
	INTO v_ready, v_waiting FROM u;
	-- steps that wait for a person (a label step, a gate): their own statements, as only some
	-- batches have them (as parts of the one above, they cost their setup in every batch)
	IF v_waiting IS NOT NULL THEN
		INSERT INTO events (run_id, step, actor, kind)
		SELECT s.run_id, s.name, p_actor, 'step.waiting' FROM steps s WHERE s.id = ANY (v_waiting) ORDER BY s.id;
		INSERT INTO step_waits (step_id, run_id, deadline, on_timeout)
		SELECT s.id, s.run_id, now() + s.timeout_ms * interval '1 millisecond',
		       coalesce(s.spec ->> 'on_timeout', 'fail')
		FROM steps s WHERE s.id = ANY (v_waiting) AND s.timeout_ms > 0
		ON CONFLICT (step_id) DO UPDATE SET deadline = excluded.deadline;
	END IF;
	RETURN v_ready;
END;
$$;

-- ferry_release: the successors of succeeded steps (p_ok) lose a pending
-- dependency (ferry_unblock); the descendants of failed or stopped steps
-- are skipped; each run loses one open step per closed step (p_closed
-- holds one run id per closed step). A run whose other steps are all
-- terminal and that has steps under finally: releases them (it is running
-- again while they run, a stopped one too, and its body_state says how
-- the rest went); at zero open steps it finishes — in its body_state when
-- it had finally steps (failed instead of succeeded when one of them with
-- fail_run: true failed). Returns how many steps were enqueued.
CREATE OR REPLACE FUNCTION ferry_release(p_actor text, p_ok bigint[], p_failed bigint[], p_closed bigint[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_ready int := 0;
	v_steps bigint[];
	v_n int[];
	v_fin bigint[];
	v_turn bigint[];
BEGIN
	IF p_ok IS NOT NULL THEN
		SELECT array_agg(d.step_id), array_agg(d.n) INTO v_steps, v_n
		FROM (SELECT e.step_id, count(*)::int AS n FROM step_deps e
		      WHERE e.needs_id = ANY (p_ok) GROUP BY e.step_id) d;
		IF v_steps IS NOT NULL THEN
			v_ready := ferry_unblock(p_actor, v_steps, v_n);
		END IF;
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

	-- runs lose one open step per step closed; with only finally steps left
	-- they release them; at zero they finish (a fan-out's items that failed
	-- decided its own state, not the run's). Two statements: the count, in
	-- every batch, then the states of the runs it brought to their finally
	-- steps or to zero, in few (as one, every batch paid the setup of the
	-- states' five lookups and of their events)
	IF p_closed IS NOT NULL THEN
		WITH c AS (
			SELECT x AS run_id, count(*)::int AS n FROM unnest(p_closed) AS x GROUP BY x
		), done AS (
			UPDATE runs r SET open_steps = r.open_steps - c.n FROM c WHERE r.id = c.run_id
			RETURNING r.id, r.open_steps <= 0
			          OR (r.body_state IS NULL AND r.final_steps > 0 AND r.open_steps = r.final_steps
			              AND r.state IN ('pending', 'running', 'stopping')) AS turns
		)
		SELECT array_agg(done.id ORDER BY done.id) FILTER (WHERE done.turns) INTO v_turn FROM done;
	END IF;
	IF v_turn IS NOT NULL THEN
		WITH o AS (
			SELECT r.id, r.body_state IS NULL AND r.final_steps > 0 AND r.open_steps = r.final_steps
			       AND r.state IN ('pending', 'running', 'stopping') AS enters
			FROM runs r WHERE r.id = ANY (v_turn)
		), done AS (
			UPDATE runs r SET
			       body_state = CASE WHEN NOT o.enters THEN r.body_state
			                         WHEN r.state = 'stopping' THEN 'stopped'
			                         WHEN EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.id AND x.state = 'failed' AND x.parent_id IS NULL) THEN 'failed'
			                         WHEN EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.id AND x.state = 'stopped' AND x.parent_id IS NULL) THEN 'stopped'
			                         ELSE 'succeeded' END,
			       state = CASE
			               WHEN r.state NOT IN ('pending', 'running', 'stopping') THEN r.state
			               WHEN o.enters THEN 'running'
			               WHEN r.open_steps > 0 THEN r.state
			               WHEN r.state = 'stopping' THEN 'stopped'
			               WHEN r.body_state = 'succeeded' AND EXISTS (
			                    SELECT 1 FROM steps x WHERE x.run_id = r.id AND x.state = 'failed'
			                    AND x.spec ->> 'fail_run' = 'true') THEN 'failed'
			               WHEN r.body_state IS NOT NULL THEN r.body_state
			               WHEN EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.id AND x.state = 'failed' AND x.parent_id IS NULL) THEN 'failed'
			               WHEN EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.id AND x.state = 'stopped' AND x.parent_id IS NULL) THEN 'stopped'
			               ELSE 'succeeded' END,
			       finished_at = CASE WHEN r.open_steps > 0 THEN r.finished_at ELSE now() END
			FROM o WHERE r.id = o.id
			RETURNING r.id, r.state, r.open_steps, r.body_state, o.enters
		), ev AS (
			INSERT INTO events (run_id, actor, kind, detail)
			SELECT done.id, p_actor, CASE WHEN done.enters THEN 'run.finally' ELSE 'run.' || done.state END,
			       CASE WHEN done.enters THEN jsonb_build_object('body_state', done.body_state) END
			FROM done WHERE done.open_steps = 0 OR done.enters
		)
		SELECT array_agg(done.id) FILTER (WHERE done.enters) INTO v_fin FROM done;
		IF v_fin IS NOT NULL THEN
			SELECT array_agg(s.id), array_agg(1) INTO v_steps, v_n FROM steps s
			WHERE s.run_id = ANY (v_fin) AND s.state = 'blocked' AND s.spec ->> 'finally' = 'true';
			IF v_steps IS NOT NULL THEN
				v_ready := v_ready + ferry_unblock(p_actor, v_steps, v_n);
			END IF;
		END IF;
	END IF;

	RETURN v_ready;
END;
$$;

-- ferry_release_skipped: what follows steps that were skipped on purpose
-- (their when: did not hold, or their gate failed with on_fail: skip):
-- the steps that need one of them are skipped too ("upstream step X was
-- skipped"), and so on down, except along needs with if: any, which count
-- a skipped step as done (ferry_unblock). The runs lose the open steps
-- skipped here (ferry_release). Returns how many steps were enqueued.
CREATE OR REPLACE FUNCTION ferry_release_skipped(p_actor text, p_skipped bigint[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_ready int := 0;
	v_closed bigint[];
	v_next bigint[];
	v_steps bigint[];
	v_n int[];
BEGIN
	WHILE p_skipped IS NOT NULL LOOP
		-- first the steps that need a skipped one without if: any: they cannot run
		WITH d AS (
			SELECT DISTINCT ON (e.step_id) e.step_id, n.name AS upstream
			FROM step_deps e JOIN steps n ON n.id = e.needs_id
			WHERE e.needs_id = ANY (p_skipped) AND NOT e.if_any
			ORDER BY e.step_id, n.idx
		), u AS (
			UPDATE steps s SET state = 'skipped', finished_at = now(),
			       reason = 'upstream step ' || d.upstream || ' was skipped'
			FROM d WHERE s.id = d.step_id AND s.state = 'blocked'
			RETURNING s.id, s.run_id, s.name, s.reason
		), ev AS (
			INSERT INTO events (run_id, step, actor, kind, detail)
			SELECT u.run_id, u.name, p_actor, 'step.skipped', jsonb_build_object('reason', u.reason) FROM u
		)
		SELECT array_agg(u.id), v_closed || array_agg(u.run_id) INTO v_next, v_closed FROM u;
		-- then those that take a skipped one as done
		SELECT array_agg(d.step_id), array_agg(d.n) INTO v_steps, v_n
		FROM (SELECT e.step_id, count(*)::int AS n FROM step_deps e
		      WHERE e.needs_id = ANY (p_skipped) AND e.if_any GROUP BY e.step_id) d;
		IF v_steps IS NOT NULL THEN
			v_ready := v_ready + ferry_unblock(p_actor, v_steps, v_n);
		END IF;
		p_skipped := v_next;
	END LOOP;
	IF v_closed IS NOT NULL THEN
		v_ready := v_ready + ferry_release(p_actor, NULL, NULL, v_closed);
	END IF;
	RETURN v_ready;
END;
$$;
