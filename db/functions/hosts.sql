-- Hosts: what GET /hosts answers, from the daemons' heartbeats (daemons,
-- migration 0029). A host is every daemon that named it; its state is
-- "up" while one of them heartbeat within its lease, "down" when all
-- stopped cleanly, else "lost" (the last one died or was cut off). Its
-- capacity, labels and address are those its newest daemon wrote; its
-- running jobs are the running attempts recorded with its name, its
-- replicas the live deployment replicas whose handle names it, and what
-- those ask for in all (their deploy steps' resources: placement's room).
-- The live model-server replicas on p_host (their handle names it, not
-- stopped), each with what its deploy step's resources ask for: placement's
-- room (ferry_hosts), the engine's admission less them (store_hosts.c's
-- heartbeat), why a step waits (queue_views.sql) and preemption
-- (preempt.sql) all read them here.
CREATE OR REPLACE FUNCTION ferry_host_replicas(p_host text)
RETURNS TABLE (deployment text, version text, cpus real, memory_mb bigint, gpus int)
LANGUAGE sql STABLE AS $$
	SELECT dp.name, r.version,
	       coalesce((v.serve #>> '{placement,resources,cpus}')::real, 0),
	       coalesce((v.serve #>> '{placement,resources,memory_mb}')::bigint, 0),
	       coalesce((v.serve #>> '{placement,resources,gpus}')::int, 0)
	FROM deployment_replicas r
	JOIN deployment_versions v ON v.deployment_id = r.deployment_id AND v.version = r.version
	JOIN deployments dp ON dp.id = r.deployment_id
	WHERE r.handle ->> 'host' = p_host AND r.health <> 'stopped';
$$;

CREATE OR REPLACE FUNCTION ferry_hosts() RETURNS jsonb
LANGUAGE sql STABLE AS $$
	WITH d AS (
		SELECT *, stopped_at IS NULL AND last_seen + lease_ms * interval '1 millisecond' > now() AS live,
		       row_number() OVER (PARTITION BY host ORDER BY last_seen DESC) AS newest
		FROM daemons
	), h AS (
		SELECT host,
		       CASE WHEN bool_or(live) THEN 'up'
		            WHEN bool_or(newest = 1 AND stopped_at IS NOT NULL) THEN 'down'
		            ELSE 'lost' END AS state,
		       count(*) FILTER (WHERE live) AS daemons,
		       max(last_seen) AS last_seen, min(started_at) FILTER (WHERE live) AS up_since
		FROM d GROUP BY host
	)
	SELECT jsonb_build_object('hosts', coalesce(jsonb_agg(jsonb_build_object(
		'name', h.host, 'state', h.state, 'daemons', h.daemons,
		'address', n.address, 'last_seen', ferry_ts(h.last_seen), 'up_since', ferry_ts(h.up_since),
		'lease_ms', n.lease_ms, 'owner', n.owner,
		'cpus', n.capacity -> 'cpus', 'memory_bytes', n.capacity -> 'memory_bytes',
		'gpus', coalesce(n.capacity -> 'gpus', '[]'), 'resources', coalesce(n.capacity -> 'resources', '{}'),
		'labels', n.labels,
		'running_jobs', (SELECT count(*) FROM attempts a WHERE a.state = 'running' AND a.host = h.host),
		'replicas', (SELECT count(*) FROM deployment_replicas r
		             WHERE r.handle ->> 'host' = h.host AND r.health <> 'stopped'),
		'replicas_hold', (SELECT jsonb_build_object('cpus', coalesce(sum(x.cpus), 0),
		                                            'memory_mb', coalesce(sum(x.memory_mb), 0),
		                                            'gpus', coalesce(sum(x.gpus), 0))
		                  FROM ferry_host_replicas(h.host) x))
		ORDER BY h.host), '[]'))
	FROM h JOIN d n ON n.host = h.host AND n.newest = 1;
$$;
