-- Hosts (issue 29): each daemon registers what its machine offers and
-- heartbeats it; GET /hosts and `ferry hosts` read them, and placement and
-- admission (issues 29, 30) will read the capacity.
--
-- daemons: one row per daemon process (owner "host/pid/start", as attempts
-- name it), written by its `host` task every lease/3: the host's name
-- (FERRY_HOST, else the machine's), the address other daemons reach it at
-- (FERRY_PUBLIC_URL, else its listen address), the capacity it detected
-- ({"cpus", "memory_bytes", "gpus": [{"index", "uuid", "memory_mb"}],
-- "resources": {NAME: N}}), its labels (FERRY_HOST_LABELS) and its lease.
-- stopped_at is set by a clean shutdown. A host is up while one of its
-- daemons has heartbeat within its lease, down when its newest stopped
-- cleanly, else lost (ferry_hosts()). Rows a day old and dead are pruned
-- by the leader.
CREATE TABLE daemons (
	owner       text PRIMARY KEY,
	host        text NOT NULL,
	address     text,
	capacity    jsonb NOT NULL DEFAULT '{}',
	labels      jsonb NOT NULL DEFAULT '{}',
	lease_ms    int NOT NULL CHECK (lease_ms > 0),
	started_at  timestamptz NOT NULL DEFAULT now(),
	last_seen   timestamptz NOT NULL DEFAULT now(),
	stopped_at  timestamptz
);
CREATE INDEX daemons_host ON daemons (host, last_seen DESC);
