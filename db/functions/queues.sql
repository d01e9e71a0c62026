-- Queues: what a ready step asks for, read from its spec once, when it
-- enters step_queue (the claim orders and admits by these columns, never
-- by the spec): its queue ("queue", else 'default'), its priority
-- ("priority", else 0) and its request ("resources": cpus, memory_mb,
-- gpus). A fan-out's child asks what its parent's spec says. A step whose
-- executor admits its own jobs ("admit": false in its resources: Slurm)
-- asks for nothing here.
-- A queue deleted since the step was submitted is still claimed from, at
-- priority 0 and without quotas (ferry_claim_candidates).
-- Each is one expression over the step's spec (its fan-out parent's for an
-- item), inlined by the planner where it is called: the step_queue inserts
-- of release.sql, finish.sql, retry.sql, continue.sql, fanout.sql and
-- store_runs.c (a row trigger cost 35 us a queued step).
CREATE OR REPLACE FUNCTION ferry_req_queue(p_spec jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(p_spec ->> 'queue', 'default') $$;

CREATE OR REPLACE FUNCTION ferry_req_priority(p_spec jsonb) RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce((p_spec ->> 'priority')::int, 0) $$;

-- NULL: not stated (the claiming daemon's FERRY_DEFAULT_CPUS applies); 0 where the executor admits it
CREATE OR REPLACE FUNCTION ferry_req_cpus(p_spec jsonb) RETURNS real
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN p_spec #>> '{resources,admit}' = 'false' THEN 0 ELSE (p_spec #>> '{resources,cpus}')::real END
$$;

CREATE OR REPLACE FUNCTION ferry_req_memory_mb(p_spec jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN p_spec #>> '{resources,admit}' = 'false' THEN 0
	            ELSE coalesce((p_spec #>> '{resources,memory_mb}')::bigint, 0) END
$$;

CREATE OR REPLACE FUNCTION ferry_req_gpus(p_spec jsonb) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN p_spec #>> '{resources,admit}' = 'false' THEN 0
	            ELSE coalesce((p_spec #>> '{resources,gpus}')::int, 0) END
$$;

-- {NAME: count} of the host's named resources the step asks for (FERRY_RESOURCES), NULL for none
CREATE OR REPLACE FUNCTION ferry_req_named(p_spec jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN p_spec #>> '{resources,admit}' = 'false' THEN NULL ELSE p_spec #> '{resources,named}' END
$$;

-- whether its GPUs may be shared with other shared requests (gpus: {count: 1, shared: true})
CREATE OR REPLACE FUNCTION ferry_req_gpu_shared(p_spec jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
	SELECT coalesce(p_spec #>> '{resources,gpus_shared}' = 'true', false)
$$;
