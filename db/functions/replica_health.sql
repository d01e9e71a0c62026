-- A deployment's replicas' health over time (GET /deployments/{id}/traffic's
-- "replicas"): what the console draws as a strip a replica beside the
-- traffic charts, from the deployment's events (durable, the same on every
-- daemon, unlike the proxy's log).
--
-- ferry_replica_health: one entry per replica that has a row now or had an
-- event since p_since, in version then index order:
--   {"version", "replica", "health": its row's health now (null: its row is
--    gone, a version retired or rolled back), "before": the health it had
--    when the window opened (the "from" of its first change when that was
--    a health check's; null: not known, nothing is drawn before it),
--    "changes": [[unix_s, health], …] oldest first}
-- Each event says what the replica became: started, restarted or replaced
-- → starting; healthy, unhealthy; stopped or removed → stopped. A replica
-- with no change in the window had its health now all along (every change
-- writes an event: deploy/reconcile.c). Reads the deployment's events since
-- p_since only (the index on deployment_id, id; the console asks for the
-- last hour).
CREATE OR REPLACE FUNCTION ferry_replica_health(p_dep bigint, p_since timestamptz) RETURNS json
LANGUAGE sql STABLE AS $$
	WITH ev AS (
		SELECT e.id, e.at, e.detail->>'version' AS version, (e.detail->>'replica')::int AS replica,
		       e.detail->>'from' AS from_health,
		       CASE e.kind WHEN 'replica-healthy' THEN 'healthy' WHEN 'replica-unhealthy' THEN 'unhealthy'
		                   WHEN 'replica-stopped' THEN 'stopped' WHEN 'replica-removed' THEN 'stopped'
		                   WHEN 'replica-started' THEN 'starting' WHEN 'replica-restarted' THEN 'starting'
		                   WHEN 'replica-replaced' THEN 'starting' END AS health -- placed: no health of its own
		FROM deployment_events e
		WHERE e.deployment_id = p_dep AND e.at >= p_since AND e.kind LIKE 'replica-%'
		  AND e.detail ? 'version' AND jsonb_typeof(e.detail->'replica') = 'number'
	), seq AS (
		SELECT ev.*, lag(health) OVER (PARTITION BY version, replica ORDER BY id) AS prev
		FROM ev WHERE health IS NOT NULL
	), per AS (
		-- a change is one that changes it: two writers may both record a replica's first health
		-- (the deploy step and a keeper's round that checked it meanwhile)
		SELECT version, replica, (array_agg(from_health ORDER BY id))[1] AS before,
		       json_agg(json_build_array(round(extract(epoch FROM at)::numeric, 3), health) ORDER BY id) AS changes
		FROM seq WHERE health IS DISTINCT FROM prev GROUP BY version, replica
	), now_rows AS (
		SELECT version, idx, health FROM deployment_replicas WHERE deployment_id = p_dep
	)
	SELECT coalesce(json_agg(json_build_object(
		'version', coalesce(p.version, n.version), 'replica', coalesce(p.replica, n.idx),
		'health', n.health, 'before', CASE WHEN p.version IS NULL THEN n.health ELSE p.before END,
		'changes', coalesce(p.changes, '[]'::json))
		ORDER BY coalesce(p.version, n.version), coalesce(p.replica, n.idx)), '[]'::json)
	FROM per p FULL JOIN now_rows n ON n.version = p.version AND n.idx = p.replica
$$;
