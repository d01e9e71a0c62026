-- Core state machine: workflows (one row per content hash), runs, steps with
-- their dependency edges, attempts (one row per execution, fenced by number),
-- and the append-only event log.

CREATE TABLE workflows (
	hash        text PRIMARY KEY,
	name        text NOT NULL,
	yaml        text NOT NULL,
	spec        jsonb NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflows_name ON workflows (name, created_at DESC);

CREATE TABLE runs (
	id             bigserial PRIMARY KEY,
	workflow_hash  text NOT NULL REFERENCES workflows (hash),
	workflow_name  text NOT NULL,
	state          text NOT NULL DEFAULT 'pending' CHECK (state IN
	               ('pending', 'running', 'stopping', 'succeeded', 'failed', 'stopped')),
	params         jsonb NOT NULL DEFAULT '{}',
	trigger        text NOT NULL CHECK (trigger IN ('api', 'cli', 'dev', 'schedule', 'data', 'bench')),
	actor          text NOT NULL,
	workdir        text,
	open_steps     int NOT NULL DEFAULT 0,  -- steps blocked, ready, running or waiting
	reason         text,
	created_at     timestamptz NOT NULL DEFAULT now(),
	started_at     timestamptz,
	finished_at    timestamptz
);
CREATE INDEX runs_open ON runs (id) WHERE state IN ('pending', 'running', 'stopping');
CREATE INDEX runs_workflow ON runs (workflow_name, id DESC);

CREATE TABLE steps (
	id              bigserial PRIMARY KEY,
	run_id          bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	name            text NOT NULL,
	idx             int NOT NULL,
	kind            text NOT NULL,
	state           text NOT NULL CHECK (state IN ('blocked', 'ready', 'running', 'waiting',
	                'succeeded', 'failed', 'skipped', 'stopped')),
	deps_pending    int NOT NULL,
	attempts        int NOT NULL DEFAULT 0,  -- number of the latest attempt
	tries           int NOT NULL DEFAULT 0,  -- attempts since the run was last (re)started
	retry_limit     int NOT NULL DEFAULT 0,
	backoff_ms      bigint NOT NULL DEFAULT 1000,
	max_backoff_ms  bigint NOT NULL DEFAULT 300000,
	timeout_ms      bigint NOT NULL DEFAULT 0,
	spec            jsonb NOT NULL,          -- resolved command, env, workdir
	outputs         jsonb,                   -- what the step produced (a gate: its payload)
	dev             boolean NOT NULL DEFAULT false, -- claimed only by its `ferry dev`
	not_before      timestamptz,
	exit_code       int,
	reason          text,
	started_at      timestamptz,
	finished_at     timestamptz,
	UNIQUE (run_id, name)
) WITH (fillfactor = 60);
-- No index covers steps.state, so the many state changes of a step stay
-- heap-only (HOT) updates; ready steps are found through step_queue instead.

-- The ready steps, one row each, in claim order: a row exists exactly while
-- its step is 'ready' (inserted by whatever makes a step ready, deleted by the
-- claim or a stop).
CREATE TABLE step_queue (
	step_id     bigint PRIMARY KEY REFERENCES steps (id) ON DELETE CASCADE,
	run_id      bigint NOT NULL,
	dev         boolean NOT NULL,
	not_before  timestamptz
);

CREATE TABLE step_deps (
	needs_id  bigint NOT NULL REFERENCES steps (id) ON DELETE CASCADE,
	step_id   bigint NOT NULL REFERENCES steps (id) ON DELETE CASCADE,
	PRIMARY KEY (needs_id, step_id)
);
CREATE INDEX step_deps_step ON step_deps (step_id);

CREATE TABLE attempts (
	step_id      bigint NOT NULL REFERENCES steps (id) ON DELETE CASCADE,
	attempt      int NOT NULL,
	state        text NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'stopped', 'lost')),
	owner        text NOT NULL,
	host         text NOT NULL,
	lease_until  timestamptz NOT NULL,
	pid          int,
	pid_start    bigint,
	dir          text,
	exit_code    int,
	signal       int,
	reason       text,
	started_at   timestamptz NOT NULL DEFAULT now(),
	finished_at  timestamptz,
	PRIMARY KEY (step_id, attempt)
);
CREATE INDEX attempts_running ON attempts (lease_until) WHERE state = 'running';

CREATE TABLE events (
	id       bigserial PRIMARY KEY,
	run_id   bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	step     text,
	attempt  int,
	at       timestamptz NOT NULL DEFAULT now(),
	actor    text NOT NULL,
	kind     text NOT NULL,
	detail   jsonb
);
CREATE INDEX events_run ON events (run_id, id);

-- Claims up to p_limit ready steps (of one run when p_run is not NULL) for
-- p_owner: one statement, SKIP LOCKED, opening an attempt row for each with a
-- lease, moving pending runs to running, and logging the transitions.
CREATE FUNCTION ferry_claim(p_owner text, p_host text, p_limit int, p_lease_ms bigint, p_run bigint)
RETURNS TABLE (step_id bigint, run_id bigint, name text, attempt int, kind text,
               timeout_ms bigint, spec jsonb, workdir text)
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
	SELECT u.id, u.run_id, u.name, u.attempts, u.kind, u.timeout_ms, u.spec, runs.workdir
	FROM u JOIN runs ON runs.id = u.run_id
	ORDER BY u.id;
END;
$$;

-- What follows steps closing, shared by ferry_finish and ferry_continue: the
-- successors of succeeded steps lose a pending dependency and, at zero,
-- become ready (enqueued) or, for gates, waiting; the descendants of failed
-- or stopped steps are skipped; each run loses one open step per closed
-- step (p_closed holds one run id per closed step) and finishes at zero.
-- Returns how many steps were enqueued.
CREATE FUNCTION ferry_release(p_actor text, p_ok bigint[], p_failed bigint[], p_closed bigint[])
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
			                    WHEN s.kind = 'gate' THEN 'waiting' ELSE 'ready' END
			FROM d WHERE s.id = d.step_id AND s.state = 'blocked'
			RETURNING s.id, s.run_id, s.dev, s.state, s.name
		), q AS (
			INSERT INTO step_queue (step_id, run_id, dev)
			SELECT u.id, u.run_id, u.dev FROM u WHERE u.state = 'ready'
			RETURNING 1
		), w AS (
			INSERT INTO events (run_id, step, actor, kind)
			SELECT u.run_id, u.name, p_actor, 'step.waiting' FROM u WHERE u.state = 'waiting'
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

-- Closes a batch of attempts in one transaction: each attempt is fenced on its
-- number and on still running; its step becomes succeeded, ready again (retry
-- with exponential backoff, equal jitter, capped), failed or stopped; the
-- successors of succeeded steps lose one pending dependency and become ready
-- at zero; the descendants of failed steps are skipped; runs with no open
-- step left finish. One NOTIFY at most. Outcomes: succeeded, failed, stopped,
-- lost (the owner vanished: re-dispatched without counting as a try).
-- Returns how many steps became ready now and the earliest retry time.
CREATE FUNCTION ferry_finish(p_owner text, p_step bigint[], p_attempt int[], p_outcome text[],
                             p_exit int[], p_signal int[], p_reason text[])
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
		SELECT * FROM unnest(p_step, p_attempt, p_outcome, p_exit, p_signal, p_reason)
		       AS t(step_id, attempt, outcome, exit_code, signal, reason)
	), a AS (
		UPDATE attempts a SET state = CASE WHEN inp.outcome IN ('succeeded', 'stopped', 'lost')
		                                   THEN inp.outcome ELSE 'failed' END,
		       exit_code = inp.exit_code, signal = inp.signal, reason = inp.reason, finished_at = now()
		FROM inp
		WHERE a.step_id = inp.step_id AND a.attempt = inp.attempt AND a.state = 'running'
		RETURNING a.step_id, a.attempt, inp.outcome, inp.exit_code, inp.reason
	), s AS (
		UPDATE steps s SET
		       state = CASE
		               WHEN a.outcome = 'succeeded' THEN 'succeeded'
		               WHEN r.state = 'stopping' OR a.outcome = 'stopped' THEN 'stopped'
		               WHEN a.outcome = 'lost' OR s.tries <= s.retry_limit THEN 'ready'
		               ELSE 'failed' END,
		       tries = CASE WHEN a.outcome = 'lost' THEN s.tries - 1 ELSE s.tries END,
		       not_before = CASE
		               WHEN a.outcome IN ('succeeded', 'stopped', 'lost') OR r.state = 'stopping'
		                    OR s.tries > s.retry_limit THEN NULL
		               ELSE now() + least(s.max_backoff_ms::float8,
		                                  s.backoff_ms * power(2, s.tries - 1))
		                            * (0.5 + random() * 0.5) * interval '1 millisecond' END,
		       exit_code = a.exit_code, reason = a.reason,
		       finished_at = now()
		FROM a, runs r
		WHERE s.id = a.step_id AND s.attempts = a.attempt AND s.state = 'running' AND r.id = s.run_id
		RETURNING s.id, s.run_id, s.dev, s.name, s.state, s.not_before, a.attempt, a.reason, a.exit_code
	), q AS (
		INSERT INTO step_queue (step_id, run_id, dev, not_before)
		SELECT s.id, s.run_id, s.dev, s.not_before FROM s WHERE s.state = 'ready'
	), e AS (
		INSERT INTO events (run_id, step, attempt, actor, kind, detail)
		SELECT s.run_id, s.name, s.attempt, p_owner,
		       CASE WHEN s.state = 'ready' THEN 'step.retrying' ELSE 'step.' || s.state END,
		       jsonb_strip_nulls(jsonb_build_object('exit_code', s.exit_code, 'reason', s.reason,
		                                            'not_before', s.not_before))
		FROM s
	)
	SELECT array_agg(s.id) FILTER (WHERE s.state = 'succeeded'),
	       array_agg(s.id) FILTER (WHERE s.state IN ('failed', 'stopped')),
	       array_agg(s.run_id) FILTER (WHERE s.state <> 'ready'),
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

-- ISO-8601 UTC with milliseconds, the one timestamp format of the API.
CREATE FUNCTION ferry_ts(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- The run object of the API: the run, its steps in file order, each with the
-- names it needs and its attempts.
CREATE FUNCTION ferry_run_json(p_run bigint) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
	-- PL/pgSQL so the plan is cached per connection: this serves GET /runs/{id}
	RETURN (SELECT json_build_object(
		'id', r.id, 'workflow', r.workflow_name, 'workflow_hash', r.workflow_hash,
		'state', r.state, 'trigger', r.trigger, 'actor', r.actor, 'params', r.params,
		'reason', r.reason, 'created_at', ferry_ts(r.created_at),
		'started_at', ferry_ts(r.started_at), 'finished_at', ferry_ts(r.finished_at),
		'steps', coalesce((
			SELECT json_agg(json_build_object(
				'name', s.name, 'kind', s.kind, 'state', s.state,
				'needs', (SELECT coalesce(json_agg(n.name ORDER BY n.idx), '[]')
				          FROM step_deps d JOIN steps n ON n.id = d.needs_id WHERE d.step_id = s.id),
				'attempts', s.attempts, 'exit_code', s.exit_code, 'reason', s.reason,
				'outputs', s.outputs,
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

-- Stops a run for p_actor: steps not started yet stop at once; running ones
-- are killed by their owners (NOTIFY ferry_stop), after which ferry_finish
-- moves the run from stopping to stopped. Returns the run's new state.
CREATE FUNCTION ferry_stop(p_run bigint, p_actor text) RETURNS text
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

-- Retries a finished run for p_actor. Without p_from: the failed, stopped
-- and skipped steps run again (a failed or stopped run only). With p_from:
-- that step, everything downstream of it, and whatever did not succeed.
-- Earlier attempts stay; the retry budget of re-run steps starts afresh.
CREATE FUNCTION ferry_retry(p_run bigint, p_from text, p_actor text) RETURNS text
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
	       deps_pending = (SELECT count(*) FROM step_deps d WHERE d.step_id = s.id AND d.needs_id = ANY (v_set))
	WHERE s.id = ANY (v_set);
	WITH u AS (
		UPDATE steps SET state = CASE WHEN kind = 'gate' THEN 'waiting' ELSE 'ready' END
		WHERE id = ANY (v_set) AND deps_pending = 0
		RETURNING id, run_id, dev, state
	)
	INSERT INTO step_queue (step_id, run_id, dev) SELECT u.id, u.run_id, u.dev FROM u WHERE u.state = 'ready';
	UPDATE runs SET state = 'pending', finished_at = NULL, reason = NULL,
	       open_steps = open_steps + coalesce(array_length(v_set, 1), 0)
	WHERE id = p_run;
	INSERT INTO events (run_id, actor, kind, detail)
	VALUES (p_run, p_actor, 'run.retry', jsonb_strip_nulls(jsonb_build_object('from', p_from,
	        'steps', (SELECT jsonb_agg(name ORDER BY idx) FROM steps WHERE id = ANY (v_set)))));
	PERFORM pg_notify('ferry_ready', '');
	RETURN 'pending';
END;
$$;

-- The tables of the state machine grow and churn fast; their plans (cached
-- per connection inside the functions above) are only as good as their
-- statistics, so analyze them early and often rather than at 10% growth.
ALTER TABLE steps SET (autovacuum_analyze_threshold = 500, autovacuum_analyze_scale_factor = 0.05,
                       autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.05);
ALTER TABLE step_queue SET (autovacuum_analyze_threshold = 500, autovacuum_analyze_scale_factor = 0.05,
                            autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.05);
ALTER TABLE step_deps SET (autovacuum_analyze_threshold = 500, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE attempts SET (autovacuum_analyze_threshold = 500, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE runs SET (autovacuum_analyze_threshold = 200, autovacuum_analyze_scale_factor = 0.05);

-- A person continues a waiting step (a gate), optionally with a payload that
-- becomes the step's output; the step succeeds and its successors move on.
CREATE FUNCTION ferry_continue(p_run bigint, p_step text, p_actor text, p_data jsonb) RETURNS text
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
	UPDATE steps SET state = 'succeeded', outputs = p_data, started_at = coalesce(started_at, now()),
	       finished_at = now(), reason = 'continued by ' || p_actor
	WHERE id = v_id;
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

-- POST /runs with an Idempotency-Key: the same key and body give the same
-- run; the same key with another body is a conflict.
CREATE TABLE idempotency_keys (
	key         text PRIMARY KEY,
	body_hash   text NOT NULL,
	run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	created_at  timestamptz NOT NULL DEFAULT now()
);
