-- Schedules and triggers (issue 14, orchestrator/schedules.md): what starts
-- runs without a person. The guarantee is one run per occasion: each
-- occasion (a schedule's nominal fire time, a data change, a git commit) is
-- a row under a unique key, inserted in the transaction that creates its
-- run, so two leaders, a replayed webhook or a restart in the middle of a
-- fire can only find the key taken. Every occasion has its row, fired or
-- not: a tick that was skipped says why.

ALTER TABLE runs DROP CONSTRAINT runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check
	CHECK (trigger IN ('api', 'cli', 'dev', 'schedule', 'data', 'git', 'bench'));
-- What started the run, for people: {"schedule":…,"nominal":…} / the files / the commit.
ALTER TABLE runs ADD COLUMN origin jsonb;
ALTER TABLE runs ADD COLUMN schedule_id bigint;
ALTER TABLE runs ADD COLUMN trigger_id bigint;
-- forbid/replace and the coalescing of data changes ask "is a run of mine still going?"
CREATE INDEX runs_schedule_open ON runs (schedule_id)
	WHERE schedule_id IS NOT NULL AND state IN ('pending', 'running', 'stopping');
CREATE INDEX runs_trigger_open ON runs (trigger_id)
	WHERE trigger_id IS NOT NULL AND state IN ('pending', 'running', 'stopping');

CREATE TABLE schedules (
	id           bigserial PRIMARY KEY,
	workflow     text NOT NULL,
	name         text NOT NULL,
	source       text NOT NULL CHECK (source IN ('workflow', 'api')),
	cron         text NOT NULL,
	timezone     text NOT NULL DEFAULT 'UTC',
	gap          text NOT NULL DEFAULT 'shift' CHECK (gap IN ('shift', 'skip')),
	overlap      text NOT NULL DEFAULT 'first' CHECK (overlap IN ('first', 'last')),
	concurrency  text NOT NULL DEFAULT 'allow' CHECK (concurrency IN ('allow', 'forbid', 'replace')),
	catchup      text NOT NULL DEFAULT 'all' CHECK (catchup IN ('all', 'latest', 'none')),
	max_catchup  int NOT NULL DEFAULT 10 CHECK (max_catchup >= 0),
	params       jsonb NOT NULL DEFAULT '{}',
	paused       boolean NOT NULL DEFAULT false,
	-- the next nominal fire time not yet accounted for (NULL: it never fires
	-- again); every tick before it has its row in schedule_ticks
	next_at      timestamptz,
	created_by   text NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	updated_at   timestamptz NOT NULL DEFAULT now(),
	UNIQUE (workflow, name)
);
-- paused ones too: their ticks are accounted for (skipped, "paused") as they come
CREATE INDEX schedules_due ON schedules (next_at) WHERE next_at IS NOT NULL;

-- One row per occasion of a schedule: its key is (schedule, nominal time).
CREATE TABLE schedule_ticks (
	schedule_id  bigint NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
	nominal_at   timestamptz NOT NULL,
	outcome      text NOT NULL CHECK (outcome IN ('fired', 'skipped')),
	reason       text,             -- why skipped; "caught up" for a late fire
	run_id       bigint REFERENCES runs (id) ON DELETE SET NULL,
	at           timestamptz NOT NULL DEFAULT clock_timestamp(),
	duplicates   int NOT NULL DEFAULT 0, -- later tries at this occasion, refused by the key
	PRIMARY KEY (schedule_id, nominal_at)
);

-- Data and git triggers of registered workflows.
CREATE TABLE triggers (
	id          bigserial PRIMARY KEY,
	workflow    text NOT NULL,
	name        text NOT NULL,
	kind        text NOT NULL CHECK (kind IN ('data', 'git')),
	spec        jsonb NOT NULL,    -- data: {path, quiet_ms, ignore}; git: {repo, branch, path}
	paused      boolean NOT NULL DEFAULT false,
	-- what the last fire covered: data: {"fingerprint", "files": {path: [size, mtime_ns, sha256]}};
	-- git: {"commit"}; written with the fire's run
	state       jsonb,
	-- since when it watches (registered, or its path/repo/branch changed):
	-- files written after this are new even if its first look comes later
	since       timestamptz NOT NULL DEFAULT now(),
	created_at  timestamptz NOT NULL DEFAULT now(),
	updated_at  timestamptz NOT NULL DEFAULT now(),
	UNIQUE (workflow, name)
);

-- One row per occasion of a trigger: (trigger, key) where key is the data
-- fingerprint of what the run covers, or the commit id.
CREATE TABLE trigger_fires (
	trigger_id  bigint NOT NULL REFERENCES triggers (id) ON DELETE CASCADE,
	key         text NOT NULL,
	outcome     text NOT NULL CHECK (outcome IN ('fired', 'skipped')),
	reason      text,
	run_id      bigint REFERENCES runs (id) ON DELETE SET NULL,
	detail      jsonb,             -- the files added/changed/removed, the commit
	via         text NOT NULL,     -- poll, webhook
	at          timestamptz NOT NULL DEFAULT clock_timestamp(),
	duplicates  int NOT NULL DEFAULT 0,
	PRIMARY KEY (trigger_id, key)
);
CREATE INDEX trigger_fires_at ON trigger_fires (trigger_id, at DESC);
