-- The run object of the API (GET /runs/{id}, ferry get -o json).
--
-- ferry_run_json: the run, its steps in file order, each with the names it
-- needs, its attempts, metrics, gate results and whether it came from cache;
-- "waiting": the names of the steps that wait for a person (gate and label
-- steps in state waiting, each continued with POST .../steps/{step}/continue),
-- so a run that cannot go on by itself is told from one that is busy while
-- its state stays what the engine says (running). "origin": what started it
-- (a schedule's nominal time, the files or commit of a trigger), or null.
-- A fan-out's children are not listed: its step says "items" (how many,
-- done, succeeded, failed, active; GET …/steps/{step}/items pages them).
-- Steps say their "when" condition, "needs_any" and whether they are
-- "finally" steps; "body_state" how the other steps ended once the
-- finally steps were released. "logs_removed_at": when
-- retention removed the run's logs and attempt directories (else null).
CREATE OR REPLACE FUNCTION ferry_run_json(p_run bigint) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
	RETURN (SELECT json_build_object(
		'id', r.id, 'workflow', r.workflow_name, 'workflow_hash', r.workflow_hash,
		'state', r.state, 'trigger', r.trigger, 'dev', r.trigger = 'dev', 'actor', r.actor, 'params', r.params, 'origin', r.origin,
		'reason', r.reason, 'metrics', r.metrics, 'no_cache', r.no_cache,
		'waiting', (SELECT coalesce(json_agg(w.name ORDER BY w.idx), '[]')
		            FROM steps w WHERE w.run_id = r.id AND w.state = 'waiting' AND w.parent_id IS NULL),
		'created_at', ferry_ts(r.created_at),
		'started_at', ferry_ts(r.started_at), 'finished_at', ferry_ts(r.finished_at),
		'logs_removed_at', ferry_ts(r.logs_removed_at), 'body_state', r.body_state,
		'steps', coalesce((
			SELECT json_agg(json_build_object(
				'name', s.name, 'kind', s.kind, 'state', s.state,
				'needs', (SELECT coalesce(json_agg(n.name ORDER BY n.idx), '[]')
				          FROM step_deps d JOIN steps n ON n.id = d.needs_id WHERE d.step_id = s.id),
				'attempts', s.attempts, 'exit_code', s.exit_code, 'reason', s.reason,
				'outputs', s.outputs, 'metrics', s.metrics, 'gate', s.gate,
				'cached', s.cached_from IS NOT NULL, 'cached_from', s.cached_from,
				'not_before', ferry_ts(s.not_before),
				'when', s.spec ->> 'when', 'finally', coalesce(s.spec ->> 'finally' = 'true', false),
				'items', (SELECT json_build_object('total', f.total, 'done', f.done, 'succeeded', f.succeeded,
				                                   'failed', f.done - f.succeeded, 'active', f.active,
				                                   'max_parallel', f.max_parallel, 'min_success', f.min_success)
				          FROM fanouts f WHERE f.step_id = s.id),
				'needs_any', (SELECT coalesce(json_agg(n.name ORDER BY n.idx), '[]')
				              FROM step_deps d JOIN steps n ON n.id = d.needs_id
				              WHERE d.step_id = s.id AND d.if_any),
				'started_at', ferry_ts(s.started_at), 'finished_at', ferry_ts(s.finished_at),
				'attempt_list', (SELECT coalesce(json_agg(json_build_object(
					'attempt', a.attempt, 'state', a.state, 'exit_code', a.exit_code,
					'signal', a.signal, 'reason', a.reason, 'owner', a.owner, 'host', a.host,
					'started_at', ferry_ts(a.started_at), 'finished_at', ferry_ts(a.finished_at),
					'log', a.dir || '/log') ORDER BY a.attempt), '[]')
				  FROM attempts a WHERE a.step_id = s.id)
			) ORDER BY s.idx) FROM steps s WHERE s.run_id = r.id AND s.parent_id IS NULL), '[]'))
	FROM runs r WHERE r.id = p_run);
END;
$$;
