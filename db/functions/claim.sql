-- Claiming work: the dispatcher's one statement that turns ready steps into
-- running attempts.
--
-- ferry_claim claims up to p_limit ready steps (of one run when p_run is not
-- NULL: a `ferry dev` run) for p_owner: one statement, SKIP LOCKED, opening
-- an attempt row for each with a lease, moving pending runs to running, and
-- logging the transitions. For steps whose spec lists "ancestors" it also
-- hands out the succeeded ancestors' kinds, outputs and metrics and the
-- run's context (params, workflow, no_cache, body_state). A fan-out's child
-- is handed its parent's spec with its item over it (fanout.sql), less
-- what was the parent's alone: its list, its limits, its when: (judged
-- once, before the fan-out).

-- p_step (not NULL) claims that step only: `ferry dev run --step` lets one
-- step at a time go after the person said "run" (migration 0013 dropped the
-- five-argument form).
CREATE OR REPLACE FUNCTION ferry_claim(p_owner text, p_host text, p_limit int, p_lease_ms bigint, p_run bigint,
                                       p_step bigint)
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
		  AND (p_step IS NULL OR q.step_id = p_step)
		ORDER BY q.step_id LIMIT p_limit
		FOR UPDATE SKIP LOCKED
	), dq AS (
		DELETE FROM step_queue q USING c WHERE q.step_id = c.id
	), u AS (
		UPDATE steps s SET state = 'running', attempts = s.attempts + 1, tries = s.tries + 1,
		       started_at = now(), finished_at = NULL, not_before = NULL, exit_code = NULL, reason = NULL
		FROM c WHERE s.id = c.id AND s.state = 'ready'
		RETURNING s.id, s.run_id, s.name, s.attempts, s.kind, s.timeout_ms, s.spec, s.parent_id
	), a AS (
		INSERT INTO attempts (step_id, attempt, state, owner, host, lease_until)
		SELECT u.id, u.attempts, 'running', p_owner, p_host, now() + p_lease_ms * interval '1 millisecond' FROM u
	), r AS (
		UPDATE runs SET state = 'running', started_at = coalesce(runs.started_at, now())
		WHERE runs.id IN (SELECT u.run_id FROM u) AND runs.state = 'pending'
	), e AS (
		-- a fan-out's items do not log each start (their fan-out's step tells how many run)
		INSERT INTO events (run_id, step, attempt, actor, kind)
		SELECT u.run_id, u.name, u.attempts, p_owner, 'step.running' FROM u WHERE u.parent_id IS NULL
	)
	SELECT u.id, u.run_id, u.name, u.attempts, u.kind, u.timeout_ms, m.spec, runs.workdir,
	       CASE WHEN m.spec ? 'ancestors' THEN coalesce((
	           SELECT jsonb_object_agg(x.name, jsonb_build_object('kind', x.kind, 'metrics', x.metrics,
	               'best', x.outputs -> 'best',
	               -- a fan-out's outputs: its items' outputs, in item order (null for an item that failed);
	               -- not for another fan-out's items, each of which would read the whole list again
	               'outputs', CASE WHEN x.spec ? 'foreach' AND u.parent_id IS NULL THEN (
	                   SELECT jsonb_agg(c.outputs ORDER BY c.item_index) FROM steps c WHERE c.parent_id = x.id)
	                   WHEN x.spec ? 'foreach' THEN NULL
	                   ELSE x.outputs END))
	           -- the ancestors by (run_id, name) = ANY (names): an index lookup each, whatever the
	           -- run's size (a semi-join with the names scanned the run's steps, per claimed step)
	           FROM steps x
	           WHERE x.run_id = u.run_id AND x.name = ANY (ARRAY(SELECT jsonb_array_elements_text(m.spec -> 'ancestors')))
	             AND x.state = 'succeeded' AND x.parent_id IS NULL), '{}') END,
	       CASE WHEN m.spec ? 'ancestors' THEN jsonb_build_object('params', runs.params,
	           'workflow', runs.workflow_name, 'workflow_hash', runs.workflow_hash,
	           'no_cache', runs.no_cache, 'dev', runs.trigger = 'dev', 'body_state', runs.body_state) END
	FROM u JOIN runs ON runs.id = u.run_id
	LEFT JOIN steps p ON p.id = u.parent_id,
	-- a fan-out's child: its parent's spec with its own item over it
	LATERAL (SELECT CASE WHEN u.parent_id IS NULL THEN u.spec
	                     ELSE (p.spec - 'foreach' - 'max_parallel' - 'min_success' - 'sweep' - 'select' - 'when'
	                           - 'when_model') || u.spec END AS spec) m
	ORDER BY u.id;
END;
$$;
