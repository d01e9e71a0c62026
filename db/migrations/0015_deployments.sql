-- Deployments (issue 12): the desired state of each served model, which the
-- leader's reconcile task (orchestrator/reconcile.c) makes HAProxy and the
-- replicas match. PostgreSQL is the only source of truth: HAProxy's config,
-- its server-state file and the replica processes are derived from these
-- rows, so a crash of any of them is repaired from here.
--
-- A deployment serves one model at a stable front address (127.0.0.1:port,
-- an HAProxy frontend). It holds versions, each with a traffic weight in
-- percent (the weights of its versions sum to 100 while it serves) and 1–5
-- replicas of its model server. auto_stop_s NULL: never; deadline: when the
-- leader stops it (exactly once: the row is updated under the condition
-- that it is still due). stopped deployments keep their versions, weights
-- and replica counts so `start` brings them back.
CREATE TABLE deployments (
	id           bigserial PRIMARY KEY,
	name         text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
	model        text NOT NULL,
	port         int NOT NULL UNIQUE CHECK (port BETWEEN 1 AND 65535),
	state        text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'stopped')),
	auto_stop_s  int CHECK (auto_stop_s IS NULL OR auto_stop_s > 0),
	deadline     timestamptz,
	warned_at    timestamptz,       -- the 10-minute warning went out for this deadline
	run_id       bigint,            -- the run whose deploy step created it (a plain number)
	actor        text NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deployments_due ON deployments (deadline) WHERE state = 'running' AND deadline IS NOT NULL;

-- One version of the model in a deployment. serve: how its replicas run
-- {"command":[…], "env":{…}, "executor":…, "sample":{…}} with the artifact's
-- path; state: starting (replicas coming up, no traffic yet), serving, or
-- retired (kept for rollback with weight 0 and no replicas running).
CREATE TABLE deployment_versions (
	deployment_id bigint NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
	version       text NOT NULL,
	ord           int NOT NULL,                 -- 1, 2, … in the order versions were added
	artifact      text NOT NULL,
	weight        int NOT NULL DEFAULT 0 CHECK (weight BETWEEN 0 AND 100),
	replicas      int NOT NULL CHECK (replicas BETWEEN 1 AND 5),
	state         text NOT NULL DEFAULT 'starting' CHECK (state IN ('starting', 'serving', 'retired')),
	serve         jsonb NOT NULL,
	load_test     jsonb,                        -- the load-test gate's results
	run_id        bigint,
	step          text,
	created_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (deployment_id, version),
	UNIQUE (deployment_id, ord)
);

-- One replica (a model-server process) of a version: its port and the
-- executor's handle (as an attempt's), its health and restarts.
CREATE TABLE deployment_replicas (
	deployment_id bigint NOT NULL,
	version       text NOT NULL,
	idx           int NOT NULL CHECK (idx BETWEEN 1 AND 5),
	port          int NOT NULL,
	executor      text NOT NULL,
	handle        jsonb,
	generation    int NOT NULL DEFAULT 1,       -- starts so far (restarts + 1)
	health        text NOT NULL DEFAULT 'starting' CHECK (health IN ('starting', 'healthy', 'unhealthy', 'stopped')),
	restarts      int NOT NULL DEFAULT 0,
	next_start    timestamptz,                  -- backoff: not restarted before
	last_error    text,
	updated_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (deployment_id, version, idx),
	FOREIGN KEY (deployment_id, version) REFERENCES deployment_versions (deployment_id, version) ON DELETE CASCADE
);

-- Every change to a deployment, by whom: the API's, the deploy step's, and
-- each difference the reconcile task repaired.
CREATE TABLE deployment_events (
	id            bigserial PRIMARY KEY,
	deployment_id bigint NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
	at            timestamptz NOT NULL DEFAULT now(),
	actor         text NOT NULL,
	kind          text NOT NULL,
	detail        jsonb
);
CREATE INDEX deployment_events_of ON deployment_events (deployment_id, id);
