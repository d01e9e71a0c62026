-- Queues: what a ready step asks for, read from its spec once, when it
-- enters step_queue (the claim orders and admits by these columns, never
-- by the spec): its queue ("queue", else 'default'), its priority
-- ("priority", else 0) and its request ("resources": cpus, memory_mb,
-- gpus). A fan-out's child asks what its parent's spec says. A step whose
-- executor admits its own jobs ("admit": false in its resources: Slurm)
-- asks for nothing here.
-- A queue deleted since the step was submitted is still claimed from, at
-- priority 0 and without quotas (ferry_claim_candidates).
CREATE OR REPLACE FUNCTION ferry_step_queue_request() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	v_spec jsonb;
	v_res jsonb;
BEGIN
	SELECT CASE WHEN s.parent_id IS NULL THEN s.spec ELSE p.spec END INTO v_spec
	FROM steps s LEFT JOIN steps p ON p.id = s.parent_id WHERE s.id = NEW.step_id;
	NEW.queue := coalesce(v_spec ->> 'queue', 'default');
	NEW.priority := coalesce((v_spec ->> 'priority')::int, 0);
	v_res := v_spec -> 'resources';
	IF jsonb_typeof(v_res) = 'object' AND coalesce(v_res ->> 'admit', '') = 'false' THEN
		NEW.cpus := 0; -- its executor's scheduler admits it (Slurm; steps/keys_job.c)
	ELSIF jsonb_typeof(v_res) = 'object' THEN
		NEW.cpus := (v_res ->> 'cpus')::real;
		NEW.memory_mb := coalesce((v_res ->> 'memory_mb')::bigint, 0);
		NEW.gpus := coalesce((v_res ->> 'gpus')::int, 0);
	END IF;
	RETURN NEW;
END;
$$;
