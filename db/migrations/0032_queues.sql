-- Queues and admission (issue 30): a ready step is claimed only by a host
-- that can fit its request now, in the order of its queue's priority, its
-- own priority and its age (db/functions/claim.sql; DESIGN in
-- orchestrator/engine/README.md "Admission").
--
-- queues: named, with a priority (higher first) and optional quotas over
-- the whole fleet's running attempts of the queue. 'default' always exists.
CREATE TABLE queues (
	name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
	priority    int NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
	max_running int CHECK (max_running > 0),
	max_gpus    int CHECK (max_gpus >= 0),
	max_cpus    real CHECK (max_cpus > 0),
	description text NOT NULL DEFAULT '',
	created_at  timestamptz NOT NULL DEFAULT now(),
	updated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO queues (name, description) VALUES ('default', 'where a step that names no queue waits');

-- What a ready step asks for, copied from its spec when it enters the queue
-- (the ferry_req_* functions of db/functions/queues.sql): its queue,
-- priority, and request (cpus NULL: not stated, the claiming daemon's
-- default applies). A Slurm step asks for nothing here: Slurm admits it.
ALTER TABLE step_queue
	ADD COLUMN queue     text NOT NULL DEFAULT 'default',
	ADD COLUMN priority  int NOT NULL DEFAULT 0,
	ADD COLUMN cpus      real,
	ADD COLUMN memory_mb bigint NOT NULL DEFAULT 0,
	ADD COLUMN gpus      int NOT NULL DEFAULT 0,
	ADD COLUMN since     timestamptz NOT NULL DEFAULT now(),
	-- a fan-out's item whose fan-out says gang: true (its id), at its first start: claimed with
	-- all its fellows in one claim or not at all
	ADD COLUMN gang      bigint;
CREATE INDEX step_queue_gang ON step_queue (gang) WHERE gang IS NOT NULL;
CREATE INDEX step_queue_order ON step_queue (queue, priority DESC, step_id);

-- What a running attempt holds: its queue, the CPUs and memory reserved for
-- it on its host, and the GPUs given to it (ids as the host lists them).
-- Released by the attempt's end (its state leaves 'running'), fenced with it.
ALTER TABLE attempts
	ADD COLUMN queue     text,
	ADD COLUMN cpus      real NOT NULL DEFAULT 0,
	ADD COLUMN memory_mb bigint NOT NULL DEFAULT 0,
	ADD COLUMN gpu_ids   text[];
CREATE INDEX attempts_running_host ON attempts (host) WHERE state = 'running';

-- the claim takes the admission's inputs (this daemon's capacity); its rows carry the GPUs given
DROP FUNCTION IF EXISTS ferry_claim(text, text, int, bigint, bigint, bigint);

