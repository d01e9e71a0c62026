-- Retrying a finished run (POST /runs/{id}/retry, ferry retry).
--
-- ferry_retry retries a finished run for p_actor. Without p_from: the
-- failed, stopped and skipped steps run again (a failed or stopped run
-- only). With p_from: that step, everything downstream of it, and whatever
-- did not succeed. The steps that stage data for the retried ones
-- (steps.restage: cache steps) run again with them: the entry they staged
-- may have been evicted since the run ended (its session was released),
-- and the retried run needs a session of its own pinning it. Earlier
-- attempts stay; what re-run steps produced before is cleared; their retry
-- budget starts afresh; with p_no_cache they do not come from the step
-- cache. The steps under finally: run again after them, whatever they
-- did before.
--
-- With p_params (the run's params, some changed) and p_specs ({"STEP":
-- spec} planned with them, runs.c): without p_from, every step whose spec
-- changes runs again too, with everything downstream of it — and as every
-- param is in each job's environment, that is every step of a job; with
-- p_from, only what p_from retries, with the new specs, the steps above
-- keeping results made with the old params (the event lists them as
-- "kept"). The run's params are replaced and the event says which changed
-- (from, to). A succeeded run may be retried so; params equal to the
-- run's are an error (22023).
CREATE OR REPLACE FUNCTION ferry_retry(p_run bigint, p_from text, p_actor text, p_no_cache boolean,
                                       p_params jsonb DEFAULT NULL, p_specs jsonb DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_state text;
	v_from bigint;
	v_set bigint[];
	v_down bigint[];
	v_changed bigint[];
	v_kept bigint[];
	v_old jsonb;
	v_diff jsonb;
BEGIN
	SELECT state INTO v_state FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	IF p_specs IS NOT NULL THEN
		SELECT array_agg(id) INTO v_changed FROM steps
		WHERE run_id = p_run AND p_specs ? name AND spec IS DISTINCT FROM (p_specs -> name);
		IF p_from IS NOT NULL THEN
			v_kept := v_changed; -- those outside what p_from retries, found below
			v_changed := NULL;
		END IF;
		SELECT params INTO v_old FROM runs WHERE id = p_run;
		SELECT jsonb_object_agg(k, jsonb_build_object('from', v_old -> k, 'to', p_params -> k)) INTO v_diff
		FROM (SELECT jsonb_object_keys(p_params) AS k) x WHERE (v_old -> k) IS DISTINCT FROM (p_params -> k);
		IF v_diff IS NULL THEN
			RAISE EXCEPTION 'params: they are the run''s already; retry without them' USING ERRCODE = '22023';
		END IF;
		IF v_changed IS NULL AND v_state = 'succeeded' AND p_from IS NULL THEN
			RAISE EXCEPTION 'params: no step of run % reads what changed (%), so nothing would run again', p_run,
			      (SELECT string_agg(k, ', ') FROM jsonb_object_keys(v_diff) k) USING ERRCODE = '22023';
		END IF;
	END IF;
	IF p_from IS NULL AND v_changed IS NULL AND v_state NOT IN ('failed', 'stopped') THEN
		RAISE EXCEPTION 'run % is %: only a failed or stopped run can be retried; to re-run a succeeded one, retry it from a step ("from")', p_run, v_state
		USING ERRCODE = '55000';
	END IF;
	IF v_state NOT IN ('succeeded', 'failed', 'stopped') THEN
		RAISE EXCEPTION 'run % is still %: stop it or wait for it to finish', p_run, v_state
		USING ERRCODE = '55000';
	END IF;
	IF p_from IS NOT NULL THEN
		SELECT id INTO v_from FROM steps WHERE run_id = p_run AND name = p_from;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'run % has no step "%"', p_run, p_from USING ERRCODE = 'P0002';
		END IF;
	END IF;
	WITH RECURSIVE down (id) AS (
		SELECT v_from WHERE v_from IS NOT NULL
		UNION
		SELECT unnest(v_changed)
		UNION
		SELECT e.step_id FROM step_deps e JOIN down ON e.needs_id = down.id
	)
	SELECT array_agg(id) INTO v_down FROM down;
	-- a fan-out run again from above, or with changed params, starts afresh — every item runs
	-- again (its list may be another: its next expansion rewrites the items and drops those past
	-- the new end), each in an attempt of its own, never in an old one's directory; one that only
	-- failed keeps the items that succeeded (its failed ones are retried below)
	DELETE FROM fanouts WHERE step_id = ANY (v_down);
	SELECT array_agg(id) INTO v_set FROM (
		SELECT unnest(v_down) AS id
		UNION
		SELECT c.id FROM steps c WHERE c.parent_id = ANY (v_down)
		UNION
		SELECT id FROM steps WHERE run_id = p_run AND state IN ('failed', 'stopped', 'skipped')
		UNION -- the finally steps run again after whatever runs again
		SELECT id FROM steps WHERE run_id = p_run AND spec ->> 'finally' = 'true'
	) x;
	-- the steps above the retried ones that stage data for them (restage)
	-- run again with them, so the retried run re-opens its cache sessions (a
	-- hit when the entry is still there; staged again when it was evicted
	-- after the run ended)
	WITH RECURSIVE up (id) AS (
		SELECT unnest(v_set)
		UNION
		SELECT d.needs_id FROM step_deps d JOIN up ON d.step_id = up.id
	)
	SELECT array_agg(id) INTO v_set FROM (
		SELECT unnest(v_set) AS id
		UNION
		SELECT s.id FROM up JOIN steps s ON s.id = up.id WHERE s.restage AND s.state = 'succeeded'
	) x;
	IF p_specs IS NOT NULL THEN
		UPDATE steps SET spec = p_specs -> name WHERE id = ANY (v_set) AND p_specs ? name;
		UPDATE runs SET params = p_params WHERE id = p_run;
	END IF;
	UPDATE steps s SET state = 'blocked', tries = 0, not_before = NULL, exit_code = NULL,
	       reason = NULL, started_at = NULL, finished_at = NULL,
	       outputs = NULL, metrics = NULL, gate = NULL, cached_from = NULL,
	       deps_pending = (SELECT count(*) FROM step_deps d WHERE d.step_id = s.id AND d.needs_id = ANY (v_set))
	                      + CASE WHEN s.spec ->> 'finally' = 'true' THEN 1 ELSE 0 END
	WHERE s.id = ANY (v_set);
	WITH u AS (
		UPDATE steps SET state = CASE WHEN waits THEN 'waiting' ELSE 'ready' END,
		       started_at = CASE WHEN waits THEN now() END
		WHERE id = ANY (v_set) AND deps_pending = 0 AND parent_id IS NULL -- children: their fan-out releases them
		RETURNING id, run_id, dev, state, timeout_ms, spec ->> 'on_timeout' AS on_timeout,
		          CASE WHEN state = 'ready' THEN spec END AS qspec
	), q AS (
		INSERT INTO step_queue (step_id, run_id, dev, queue, priority, cpus, memory_mb, gpus, named, gpu_shared)
		SELECT u.id, u.run_id, u.dev, ferry_req_queue(u.qspec), ferry_req_priority(u.qspec), ferry_req_cpus(u.qspec), ferry_req_memory_mb(u.qspec), ferry_req_gpus(u.qspec), ferry_req_named(u.qspec), ferry_req_gpu_shared(u.qspec) FROM u WHERE u.state = 'ready'
	)
	INSERT INTO step_waits (step_id, run_id, deadline, on_timeout)
	SELECT u.id, u.run_id, now() + u.timeout_ms * interval '1 millisecond', coalesce(u.on_timeout, 'fail')
	FROM u WHERE u.state = 'waiting' AND u.timeout_ms > 0
	ON CONFLICT (step_id) DO UPDATE SET deadline = excluded.deadline;
	UPDATE runs SET state = 'pending', finished_at = NULL, reason = NULL, no_cache = p_no_cache, body_state = NULL,
	       metrics = (SELECT jsonb_object_agg(name, metrics) FROM steps
	                  WHERE run_id = p_run AND metrics IS NOT NULL AND parent_id IS NULL),
	       open_steps = open_steps + (SELECT count(*) FROM steps WHERE id = ANY (v_set) AND parent_id IS NULL)
	WHERE id = p_run;
	INSERT INTO events (run_id, actor, kind, detail)
	VALUES (p_run, p_actor, 'run.retry', jsonb_strip_nulls(jsonb_build_object('from', p_from,
	        'no_cache', CASE WHEN p_no_cache THEN true END, 'params', v_diff,
	        'kept', (SELECT jsonb_agg(name ORDER BY idx) FROM steps
	                 WHERE id = ANY (v_kept) AND NOT id = ANY (coalesce(v_set, '{}'::bigint[]))),
	        'steps', (SELECT jsonb_agg(name ORDER BY idx) FROM steps WHERE id = ANY (v_set) AND parent_id IS NULL),
	        'items', (SELECT NULLIF(count(*), 0) FROM steps WHERE id = ANY (v_set) AND parent_id IS NOT NULL))));
	PERFORM pg_notify('ferry_ready', '');
	RETURN 'pending';
END;
$$;
