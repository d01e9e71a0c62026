-- A run's timeline (GET /runs/{id}/timeline): what the console draws as a
-- Gantt chart, small whatever the run's size.
--
-- ferry_run_timeline: the run's times ("now" too, the end of what still
-- runs) and one row per step in file order (a fan-out's items are not
-- rows: its one row says "items", their counts by state and the span from
-- the first item's start to the last one's end). Each row has "bars", in
-- time order, each {kind, attempt, state, from, to (null: not over)}:
--   attempt  one per attempt (a retried step has one per try), its state;
--   queued   before an attempt, from when it could start to its start:
--            the latest of the run's creation, its needs' ends, the
--            previous attempt's end (backoff included) and the latest
--            run retry before it; for a ready step, since it entered the
--            queue (step_queue.since), open. Derived: the exact moment a
--            past attempt was queued is not kept. Only when it is before
--            the start;
--   waiting  a person's turn (a label, an approval, a gate): from its
--            latest step.waiting event to when it went on (open while it
--            waits), its state the step's;
--   items    a fan-out's items, first start to last end, state the step's.
-- Only the latest 20 attempts of a step are bars ("attempts_left_out" says
-- how many earlier ones are not). NULL when there is no such run.
CREATE OR REPLACE FUNCTION ferry_run_timeline(p_run bigint) RETURNS json
LANGUAGE sql STABLE AS $$
	WITH r AS (
		SELECT * FROM runs WHERE id = p_run
	), retries AS (
		SELECT e.at FROM events e WHERE e.run_id = p_run AND e.kind = 'run.retry'
	), waited AS (
		SELECT e.step, max(e.at) AS at FROM events e
		WHERE e.run_id = p_run AND e.kind = 'step.waiting' GROUP BY e.step
	), s AS (
		SELECT s.*, (SELECT max(n.finished_at) FROM step_deps d JOIN steps n ON n.id = d.needs_id
		             WHERE d.step_id = s.id) AS needs_done
		FROM steps s WHERE s.run_id = p_run AND s.parent_id IS NULL
	), a AS (
		SELECT a.step_id, a.attempt, a.state, a.started_at, a.finished_at,
		       greatest((SELECT r.created_at FROM r), s.needs_done,
		                lag(a.finished_at) OVER (PARTITION BY a.step_id ORDER BY a.attempt),
		                (SELECT max(rt.at) FROM retries rt WHERE rt.at <= a.started_at)) AS ready_at,
		       row_number() OVER (PARTITION BY a.step_id ORDER BY a.attempt DESC) AS latest
		FROM s JOIN attempts a ON a.step_id = s.id
	), bars AS (
		SELECT a.step_id, a.started_at AS at, 1 AS ord, 'attempt' AS kind, a.attempt, a.state,
		       a.started_at AS t_from, a.finished_at AS t_to
		FROM a WHERE a.latest <= 20
		UNION ALL
		SELECT a.step_id, a.ready_at, 0, 'queued', a.attempt, 'ready', a.ready_at, a.started_at
		FROM a WHERE a.latest <= 20 AND a.ready_at < a.started_at
		UNION ALL
		SELECT q.step_id, q.since, 0, 'queued', s.attempts + 1, 'ready', q.since, NULL
		FROM step_queue q JOIN s ON s.id = q.step_id
		UNION ALL
		-- since it last began to wait (its step.waiting event) to when it went on
		SELECT s.id, w.at, 2, 'waiting', NULL, s.state, w.at,
		       CASE WHEN s.state <> 'waiting' THEN
		            coalesce((SELECT min(a.started_at) FROM attempts a WHERE a.step_id = s.id AND a.started_at > w.at),
		                     greatest(s.finished_at, w.at), w.at) END
		FROM s JOIN waited w ON w.step = s.name
		UNION ALL
		SELECT s.id, i.t_from, 1, 'items', NULL, s.state, i.t_from, i.t_to
		FROM s JOIN fanouts f ON f.step_id = s.id
		CROSS JOIN LATERAL (
			SELECT min(c.started_at) AS t_from,
			       CASE WHEN bool_and(c.finished_at IS NOT NULL) THEN max(c.finished_at) END AS t_to
			FROM steps c WHERE c.parent_id = s.id) i
		WHERE i.t_from IS NOT NULL
	), per AS ( -- each step's bars and attempts, gathered once (not a scan of all the run's per step)
		SELECT b.step_id, json_agg(json_build_object(
			'kind', b.kind, 'attempt', b.attempt, 'state', b.state,
			'from', ferry_ts(b.t_from), 'to', ferry_ts(b.t_to)) ORDER BY b.at, b.ord) AS bars
		FROM bars b GROUP BY b.step_id
	), tries AS (
		SELECT a.step_id, count(*) AS n FROM a GROUP BY a.step_id
	)
	SELECT json_build_object(
		'run', r.id, 'state', r.state, 'created_at', ferry_ts(r.created_at),
		'started_at', ferry_ts(r.started_at), 'finished_at', ferry_ts(r.finished_at), 'now', ferry_ts(now()),
		'rows', coalesce((SELECT json_agg(json_build_object(
			'step', s.name, 'kind', s.kind, 'state', s.state,
			'attempts_left_out', greatest(0, coalesce(tries.n, 0) - 20),
			'items', (SELECT json_build_object('total', f.total, 'done', f.done, 'succeeded', f.succeeded,
			                                   'failed', f.done - f.succeeded, 'active', f.active,
			                                   'states', (SELECT coalesce(json_object_agg(c.state, c.n), '{}')
			                                              FROM (SELECT c.state, count(*) AS n FROM steps c
			                                                    WHERE c.parent_id = s.id GROUP BY c.state) c))
			          FROM fanouts f WHERE f.step_id = s.id),
			'bars', coalesce(per.bars, '[]')
		) ORDER BY s.idx) FROM s LEFT JOIN per ON per.step_id = s.id LEFT JOIN tries ON tries.step_id = s.id), '[]'))
	FROM r
$$;
