-- ML steps: what a step produced (outputs, metrics, gate results), steps
-- finished from the step result cache, label and gate steps waiting for a
-- person with a deadline, and runs that bypass the cache.

ALTER TABLE runs ADD COLUMN metrics jsonb,                          -- {"STEP": {metric: value}}
                 ADD COLUMN no_cache boolean NOT NULL DEFAULT false; -- no step comes from cache
ALTER TABLE steps ADD COLUMN metrics jsonb,      -- metrics.json of the step
                  ADD COLUMN gate jsonb,         -- gate results: [{metric, op, threshold, value, passed}]
                  ADD COLUMN cached_from jsonb;  -- {"run","step","attempt"} when it came from cache

-- Step result cache: the key hashes a step's definition, resolved params,
-- input artifacts (by content) and image; a succeeded attempt is kept here.
CREATE TABLE step_cache (
	key          text PRIMARY KEY,
	run_id       bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	step         text NOT NULL,
	attempt      int NOT NULL,
	outputs      jsonb,
	metrics      jsonb,
	gate         jsonb,
	hits         bigint NOT NULL DEFAULT 0,
	created_at   timestamptz NOT NULL DEFAULT now(),
	last_hit_at  timestamptz
);
CREATE INDEX step_cache_run ON step_cache (run_id);

-- Waiting steps (label, gate) with a timeout: one row while they wait.
CREATE TABLE step_waits (
	step_id     bigint PRIMARY KEY REFERENCES steps (id) ON DELETE CASCADE,
	run_id      bigint NOT NULL,
	deadline    timestamptz NOT NULL,
	on_timeout  text NOT NULL CHECK (on_timeout IN ('fail', 'continue'))
);
CREATE INDEX step_waits_deadline ON step_waits (deadline);

-- ferry_claim now also hands out, for steps whose spec lists "ancestors",
-- the succeeded ancestors' kinds, outputs and metrics and the run's context.
DROP FUNCTION ferry_claim(text, text, int, bigint, bigint);
CREATE FUNCTION ferry_claim(p_owner text, p_host text, p_limit int, p_lease_ms bigint, p_run bigint)
RETURNS TABLE (step_id bigint, run_id bigint, name text, attempt int, kind text,
               timeout_ms bigint, spec jsonb, workdir text, inputs jsonb, run jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
	RETURN QUERY
	WITH c AS (
		SELECT q.step_id AS id FROM step_queue q
		WHERE (q.not_before IS NULL OR q.not_before <= now())
		  AND q.dev = (p_run IS NOT NULL) AND (p_run IS NULL OR q.run_id = p_run)
		ORDER BY q.step_id LIMIT p_limit
		FOR UPDATE SKIP LOCKED
	), dq AS (
		DELETE FROM step_queue q USING c WHERE q.step_id = c.id
	), u AS (
		UPDATE steps s SET state = 'running', attempts = s.attempts + 1, tries = s.tries + 1,
		       started_at = now(), finished_at = NULL, not_before = NULL, exit_code = NULL, reason = NULL
		FROM c WHERE s.id = c.id AND s.state = 'ready'
		RETURNING s.id, s.run_id, s.name, s.attempts, s.kind, s.timeout_ms, s.spec
	), a AS (
		INSERT INTO attempts (step_id, attempt, state, owner, host, lease_until)
		SELECT u.id, u.attempts, 'running', p_owner, p_host, now() + p_lease_ms * interval '1 millisecond' FROM u
	), r AS (
		UPDATE runs SET state = 'running', started_at = coalesce(runs.started_at, now())
		WHERE runs.id IN (SELECT u.run_id FROM u) AND runs.state = 'pending'
	), e AS (
		INSERT INTO events (run_id, step, attempt, actor, kind)
		SELECT u.run_id, u.name, u.attempts, p_owner, 'step.running' FROM u
	)
	SELECT u.id, u.run_id, u.name, u.attempts, u.kind, u.timeout_ms, u.spec, runs.workdir,
	       CASE WHEN u.spec ? 'ancestors' THEN coalesce((
	           SELECT jsonb_object_agg(x.name, jsonb_build_object('kind', x.kind, 'outputs', x.outputs,
	                                                               'metrics', x.metrics))
	           FROM steps x
	           WHERE x.run_id = u.run_id AND x.state = 'succeeded'
	             AND x.name IN (SELECT jsonb_array_elements_text(u.spec -> 'ancestors'))), '{}') END,
	       CASE WHEN u.spec ? 'ancestors' THEN jsonb_build_object('params', runs.params,
	           'workflow', runs.workflow_name, 'workflow_hash', runs.workflow_hash,
	           'no_cache', runs.no_cache) END
	FROM u JOIN runs ON runs.id = u.run_id
	ORDER BY u.id;
END;
$$;

-- As in 0001, and a gate step that starts waiting gets its deadline.
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
			                    WHEN s.kind = 'gate' THEN 'waiting' ELSE 'ready' END,
			       started_at = CASE WHEN s.deps_pending - d.n = 0 AND s.kind = 'gate' THEN now()
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

-- As in 0001, plus what a step produced: outputs, metrics (also merged into
-- the run's), gate results, the step-cache key of a job worth caching and,
-- for a step finished from cache, where from. Outcome 'waiting' (a label
-- step that opened its task) leaves the step waiting for a person, with a
-- deadline when it has a timeout. p_final: a failure retrying cannot fix
-- (a failed gate, a malformed metrics.json): no retry.
DROP FUNCTION ferry_finish(text, bigint[], int[], text[], int[], int[], text[]);
CREATE FUNCTION ferry_finish(p_owner text, p_step bigint[], p_attempt int[], p_outcome text[],
                             p_exit int[], p_signal int[], p_reason text[], p_final boolean[],
                             p_outputs jsonb[], p_metrics jsonb[], p_gate jsonb[],
                             p_cache_key text[], p_cached_from jsonb[])
RETURNS TABLE (ready_now int, next_retry timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	v_ok bigint[];
	v_failed bigint[];
	v_closed bigint[];
	v_retry timestamptz;
	v_ready int := 0;
	v_n int;
BEGIN
	WITH inp AS (
		SELECT * FROM unnest(p_step, p_attempt, p_outcome, p_exit, p_signal, p_reason, p_final,
		                     p_outputs, p_metrics, p_gate, p_cache_key, p_cached_from)
		       AS t(step_id, attempt, outcome, exit_code, signal, reason, final,
		            outputs, metrics, gate, cache_key, cached_from)
	), a AS (
		UPDATE attempts a SET state = CASE WHEN inp.outcome IN ('succeeded', 'stopped', 'lost') THEN inp.outcome
		                                   WHEN inp.outcome = 'waiting' THEN 'succeeded' ELSE 'failed' END,
		       exit_code = inp.exit_code, signal = inp.signal, reason = inp.reason, finished_at = now()
		FROM inp
		WHERE a.step_id = inp.step_id AND a.attempt = inp.attempt AND a.state = 'running'
		RETURNING a.step_id, a.attempt, inp.outcome, inp.exit_code, inp.reason, inp.final,
		          inp.outputs, inp.metrics, inp.gate, inp.cache_key, inp.cached_from
	), s AS (
		UPDATE steps s SET
		       state = CASE
		               WHEN a.outcome = 'succeeded' THEN 'succeeded'
		               WHEN r.state = 'stopping' OR a.outcome = 'stopped' THEN 'stopped'
		               WHEN a.outcome = 'waiting' THEN 'waiting'
		               WHEN a.outcome = 'lost' OR (NOT coalesce(a.final, false) AND s.tries <= s.retry_limit) THEN 'ready'
		               ELSE 'failed' END,
		       tries = CASE WHEN a.outcome = 'lost' THEN s.tries - 1 ELSE s.tries END,
		       not_before = CASE
		               WHEN a.outcome IN ('succeeded', 'stopped', 'lost', 'waiting') OR r.state = 'stopping'
		                    OR coalesce(a.final, false) OR s.tries > s.retry_limit THEN NULL
		               ELSE now() + least(s.max_backoff_ms::float8,
		                                  s.backoff_ms * power(2, s.tries - 1))
		                            * (0.5 + random() * 0.5) * interval '1 millisecond' END,
		       exit_code = a.exit_code, reason = a.reason,
		       outputs = a.outputs, metrics = a.metrics, gate = a.gate, cached_from = a.cached_from,
		       finished_at = CASE WHEN a.outcome = 'waiting' AND r.state <> 'stopping' THEN NULL ELSE now() END
		FROM a, runs r
		WHERE s.id = a.step_id AND s.attempts = a.attempt AND s.state = 'running' AND r.id = s.run_id
		RETURNING s.id, s.run_id, s.dev, s.name, s.state, s.not_before, s.timeout_ms, s.spec ->> 'on_timeout' AS on_timeout,
		          a.attempt, a.reason, a.exit_code, a.outputs, a.metrics, a.gate, a.cache_key, a.cached_from
	), q AS (
		INSERT INTO step_queue (step_id, run_id, dev, not_before)
		SELECT s.id, s.run_id, s.dev, s.not_before FROM s WHERE s.state = 'ready'
	), w AS (
		INSERT INTO step_waits (step_id, run_id, deadline, on_timeout)
		SELECT s.id, s.run_id, now() + s.timeout_ms * interval '1 millisecond', coalesce(s.on_timeout, 'fail')
		FROM s WHERE s.state = 'waiting' AND s.timeout_ms > 0
		ON CONFLICT (step_id) DO UPDATE SET deadline = excluded.deadline
	), sc AS (
		INSERT INTO step_cache (key, run_id, step, attempt, outputs, metrics, gate)
		SELECT s.cache_key, s.run_id, s.name, s.attempt, s.outputs, s.metrics, s.gate
		FROM s WHERE s.state = 'succeeded' AND s.cache_key IS NOT NULL AND s.cached_from IS NULL
		ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, step = excluded.step,
		       attempt = excluded.attempt, outputs = excluded.outputs, metrics = excluded.metrics,
		       gate = excluded.gate, created_at = now()
	), rm AS (
		UPDATE runs r SET metrics = coalesce(r.metrics, '{}'::jsonb) || m.obj
		FROM (SELECT s.run_id, jsonb_object_agg(s.name, s.metrics) AS obj FROM s
		      WHERE s.metrics IS NOT NULL GROUP BY s.run_id) m
		WHERE r.id = m.run_id
	), e AS (
		INSERT INTO events (run_id, step, attempt, actor, kind, detail)
		SELECT s.run_id, s.name, s.attempt, p_owner,
		       CASE WHEN s.state = 'ready' THEN 'step.retrying' ELSE 'step.' || s.state END,
		       jsonb_strip_nulls(jsonb_build_object('exit_code', s.exit_code, 'reason', s.reason,
		                                            'not_before', s.not_before, 'cached_from', s.cached_from,
		                                            'outputs', CASE WHEN s.state = 'waiting' THEN s.outputs END))
		FROM s
	)
	SELECT array_agg(s.id) FILTER (WHERE s.state = 'succeeded'),
	       array_agg(s.id) FILTER (WHERE s.state IN ('failed', 'stopped')),
	       array_agg(s.run_id) FILTER (WHERE s.state NOT IN ('ready', 'waiting')),
	       min(s.not_before),
	       count(*) FILTER (WHERE s.state = 'ready' AND s.not_before IS NULL)
	INTO v_ok, v_failed, v_closed, v_retry, v_n
	FROM s;
	v_ready := coalesce(v_n, 0);

	v_ready := v_ready + ferry_release(p_owner, v_ok, v_failed, v_closed);

	IF v_ready > 0 THEN
		PERFORM pg_notify('ferry_ready', '');
	END IF;
	RETURN QUERY SELECT v_ready, v_retry;
END;
$$;

-- Waiting steps whose deadline passed: on_timeout continue succeeds them
-- (outputs say timed_out), fail fails them; their runs move on.
CREATE FUNCTION ferry_expire_waits(p_actor text) RETURNS int
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

-- As in 0001; a label step's payload is merged over the task it opened, and
-- its deadline goes.
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

-- As in 0001, with p_no_cache: the re-run steps do not come from cache.
-- What re-run steps produced before is cleared.
DROP FUNCTION ferry_retry(bigint, text, text);
CREATE FUNCTION ferry_retry(p_run bigint, p_from text, p_actor text, p_no_cache boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_state text;
	v_from bigint;
	v_set bigint[];
BEGIN
	SELECT state INTO v_state FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	IF p_from IS NULL AND v_state NOT IN ('failed', 'stopped') THEN
		RAISE EXCEPTION 'run % is %: only a failed or stopped run can be retried (use --from STEP to re-run a succeeded one)', p_run, v_state
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
		SELECT e.step_id FROM step_deps e JOIN down ON e.needs_id = down.id
	)
	SELECT array_agg(id) INTO v_set FROM (
		SELECT id FROM down
		UNION
		SELECT id FROM steps WHERE run_id = p_run AND state IN ('failed', 'stopped', 'skipped')
	) x;
	UPDATE steps s SET state = 'blocked', tries = 0, not_before = NULL, exit_code = NULL,
	       reason = NULL, started_at = NULL, finished_at = NULL,
	       outputs = NULL, metrics = NULL, gate = NULL, cached_from = NULL,
	       deps_pending = (SELECT count(*) FROM step_deps d WHERE d.step_id = s.id AND d.needs_id = ANY (v_set))
	WHERE s.id = ANY (v_set);
	WITH u AS (
		UPDATE steps SET state = CASE WHEN kind = 'gate' THEN 'waiting' ELSE 'ready' END,
		       started_at = CASE WHEN kind = 'gate' THEN now() END
		WHERE id = ANY (v_set) AND deps_pending = 0
		RETURNING id, run_id, dev, state, timeout_ms, spec ->> 'on_timeout' AS on_timeout
	), q AS (
		INSERT INTO step_queue (step_id, run_id, dev) SELECT u.id, u.run_id, u.dev FROM u WHERE u.state = 'ready'
	)
	INSERT INTO step_waits (step_id, run_id, deadline, on_timeout)
	SELECT u.id, u.run_id, now() + u.timeout_ms * interval '1 millisecond', coalesce(u.on_timeout, 'fail')
	FROM u WHERE u.state = 'waiting' AND u.timeout_ms > 0
	ON CONFLICT (step_id) DO UPDATE SET deadline = excluded.deadline;
	UPDATE runs SET state = 'pending', finished_at = NULL, reason = NULL, no_cache = p_no_cache,
	       metrics = (SELECT jsonb_object_agg(name, metrics) FROM steps
	                  WHERE run_id = p_run AND metrics IS NOT NULL),
	       open_steps = open_steps + coalesce(array_length(v_set, 1), 0)
	WHERE id = p_run;
	INSERT INTO events (run_id, actor, kind, detail)
	VALUES (p_run, p_actor, 'run.retry', jsonb_strip_nulls(jsonb_build_object('from', p_from,
	        'no_cache', CASE WHEN p_no_cache THEN true END,
	        'steps', (SELECT jsonb_agg(name ORDER BY idx) FROM steps WHERE id = ANY (v_set)))));
	PERFORM pg_notify('ferry_ready', '');
	RETURN 'pending';
END;
$$;

-- The run object of the API, as in 0001, plus metrics, gate results and
-- which steps came from cache.
CREATE OR REPLACE FUNCTION ferry_run_json(p_run bigint) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
	RETURN (SELECT json_build_object(
		'id', r.id, 'workflow', r.workflow_name, 'workflow_hash', r.workflow_hash,
		'state', r.state, 'trigger', r.trigger, 'actor', r.actor, 'params', r.params,
		'reason', r.reason, 'metrics', r.metrics, 'no_cache', r.no_cache,
		'created_at', ferry_ts(r.created_at),
		'started_at', ferry_ts(r.started_at), 'finished_at', ferry_ts(r.finished_at),
		'steps', coalesce((
			SELECT json_agg(json_build_object(
				'name', s.name, 'kind', s.kind, 'state', s.state,
				'needs', (SELECT coalesce(json_agg(n.name ORDER BY n.idx), '[]')
				          FROM step_deps d JOIN steps n ON n.id = d.needs_id WHERE d.step_id = s.id),
				'attempts', s.attempts, 'exit_code', s.exit_code, 'reason', s.reason,
				'outputs', s.outputs, 'metrics', s.metrics, 'gate', s.gate,
				'cached', s.cached_from IS NOT NULL, 'cached_from', s.cached_from,
				'not_before', ferry_ts(s.not_before),
				'started_at', ferry_ts(s.started_at), 'finished_at', ferry_ts(s.finished_at),
				'attempt_list', (SELECT coalesce(json_agg(json_build_object(
					'attempt', a.attempt, 'state', a.state, 'exit_code', a.exit_code,
					'signal', a.signal, 'reason', a.reason, 'owner', a.owner,
					'started_at', ferry_ts(a.started_at), 'finished_at', ferry_ts(a.finished_at),
					'log', a.dir || '/log') ORDER BY a.attempt), '[]')
				  FROM attempts a WHERE a.step_id = s.id)
			) ORDER BY s.idx) FROM steps s WHERE s.run_id = r.id), '[]'))
	FROM runs r WHERE r.id = p_run);
END;
$$;
