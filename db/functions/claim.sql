-- Claiming work: the dispatcher's one statement that turns ready steps into
-- running attempts.
--
-- ferry_claim claims up to p_limit ready steps (of one run when p_run is not
-- NULL: a `ferry dev` run) for p_owner: one statement, SKIP LOCKED, opening
-- an attempt row for each with a lease, moving pending runs to running, and
-- logging the transitions. For steps whose spec lists "ancestors" it also
-- hands out the succeeded ancestors' kinds, outputs and metrics and the
-- run's context (params, workflow, no_cache, body_state). A fan-out's child
-- is handed its parent's spec with its item over it (fanout.sql), less
-- what was the parent's alone: its list, its limits, its when: (judged
-- once, before the fan-out).
--
-- Admission (issue 30; orchestrator/engine/README.md "Admission"): the
-- candidates are read queue by queue (step_queue_order: each queue's
-- steps by priority then age, locked SKIP LOCKED), then taken in the
-- order: a starving step first (waited past p_capacity.starve_s), the
-- queue's priority, fair share between queues of equal priority (the
-- queue with fewer running, counting what this claim took, goes next),
-- the step's priority, its age. A step is taken when it fits: its queue's
-- quotas (max_running, max_gpus, max_cpus over the fleet's running
-- attempts) and this host's free CPUs, memory and GPUs (p_capacity less
-- what this host's running attempts hold). One that does not fit is
-- passed over (a smaller one behind it may start: backfill), unless it is
-- starving: then nothing behind it in the order starts (its room is kept
-- for it). GPUs are given by id, never two attempts one GPU; the attempt
-- row records them (gpu_ids), so a restarted daemon and the next claim
-- see them held until the attempt ends. p_capacity NULL: no admission
-- (a Slurm daemon: Slurm admits). Claims that count the same host or a
-- quota'd queue are serialised by advisory locks: two never give the
-- same GPU or pass the same quota.

-- p_step (not NULL) claims that step only: `ferry dev run --step` lets one
-- step at a time go after the person said "run" (migration 0013 dropped the
-- five-argument form; 0032 the six-argument one).
CREATE OR REPLACE FUNCTION ferry_claim(p_owner text, p_host text, p_limit int, p_lease_ms bigint, p_run bigint,
                                       p_step bigint, p_capacity jsonb)
RETURNS TABLE (step_id bigint, run_id bigint, name text, attempt int, kind text,
               timeout_ms bigint, spec jsonb, workdir text, inputs jsonb, run jsonb, gpus text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	-- what this claim takes, one element per step: its id, queue, the CPUs and memory reserved, its GPUs
	v_ids bigint[] := '{}';
	v_queues text[] := '{}';
	v_cpus_of real[] := '{}';
	v_mem_of bigint[] := '{}';
	v_gpus_of text[] := '{}';      -- "0,1" (ids have no comma: FERRY_GPUS splits on it), NULL for none
	v_free_gpus text[];
	v_free_cpus real;
	v_free_mem bigint;
	v_default_cpus real := coalesce((p_capacity ->> 'default_cpus')::real, 0);
	v_starve interval := make_interval(secs => coalesce((p_capacity ->> 'starve_s')::double precision, 600));
	v_quota jsonb := '{}';         -- queue -> {"running", "gpus", "cpus"} over the fleet
	v_q jsonb;
	v_cpus real;
	v_gids text[];
	v_quotas boolean;
	r record;
BEGIN
	IF p_capacity IS NOT NULL THEN
		PERFORM pg_advisory_xact_lock(hashtext('ferry_claim_host'), hashtext(p_host));
		SELECT (p_capacity ->> 'cpus')::real - coalesce(sum(a.cpus), 0),
		       coalesce((p_capacity ->> 'memory_mb')::bigint, 0) - coalesce(sum(a.memory_mb), 0),
		       ARRAY(SELECT g FROM jsonb_array_elements_text(coalesce(p_capacity -> 'gpus', '[]')) g
		             EXCEPT SELECT unnest(a2.gpu_ids) FROM attempts a2 WHERE a2.state = 'running' AND a2.host = p_host)
		INTO v_free_cpus, v_free_mem, v_free_gpus
		FROM attempts a WHERE a.state = 'running' AND a.host = p_host;
		-- the ids in the host's order ("0" before "1")
		v_free_gpus := ARRAY(SELECT g FROM jsonb_array_elements_text(coalesce(p_capacity -> 'gpus', '[]'))
		                     WITH ORDINALITY AS x(g, i) WHERE g = ANY (v_free_gpus) ORDER BY i);
	END IF;
	FOR r IN
		WITH cand AS (
			SELECT c.*, qu.priority AS qprio, qu.max_running, qu.max_gpus, qu.max_cpus,
			       row_number() OVER (PARTITION BY c.queue ORDER BY c.priority DESC, c.step_id) AS rank
			FROM queues qu CROSS JOIN LATERAL (
				SELECT q.step_id, q.queue, q.priority, q.cpus, q.memory_mb, q.gpus, q.since FROM step_queue q
				WHERE q.queue = qu.name
				  AND (q.not_before IS NULL OR q.not_before <= now())
				  AND q.dev = (p_run IS NOT NULL) AND (p_run IS NULL OR q.run_id = p_run)
				  AND (p_step IS NULL OR q.step_id = p_step)
				ORDER BY q.priority DESC, q.step_id LIMIT p_limit + 64
				FOR UPDATE OF q SKIP LOCKED) c
		), running AS (
			SELECT a.queue, count(*) AS n FROM attempts a
			WHERE a.state = 'running' AND a.queue IN (SELECT DISTINCT queue FROM cand) GROUP BY a.queue
		)
		SELECT cand.*, cand.since < now() - v_starve AS starving
		FROM cand LEFT JOIN running ON running.queue = cand.queue
		ORDER BY cand.since < now() - v_starve DESC, cand.qprio DESC, coalesce(running.n, 0) + cand.rank,
		         cand.priority DESC, cand.step_id
	LOOP
		EXIT WHEN cardinality(v_ids) >= p_limit;
		v_cpus := coalesce(r.cpus, v_default_cpus);
		v_quotas := r.max_running IS NOT NULL OR r.max_gpus IS NOT NULL OR r.max_cpus IS NOT NULL;
		IF v_quotas AND NOT v_quota ? r.queue THEN
			-- the queue's use over the fleet, read under its lock (two hosts never pass one quota)
			PERFORM pg_advisory_xact_lock(hashtext('ferry_claim_queue'), hashtext(r.queue));
			SELECT jsonb_build_object('running', count(*), 'gpus', coalesce(sum(cardinality(a.gpu_ids)), 0),
			                          'cpus', coalesce(sum(a.cpus), 0))
			INTO v_q FROM attempts a WHERE a.state = 'running' AND a.queue = r.queue;
			v_quota := v_quota || jsonb_build_object(r.queue, v_q);
		END IF;
		v_q := v_quota -> r.queue;
		IF (v_quotas AND ((r.max_running IS NOT NULL AND (v_q ->> 'running')::int + 1 > r.max_running)
		                  OR (r.max_gpus IS NOT NULL AND (v_q ->> 'gpus')::int + r.gpus > r.max_gpus)
		                  OR (r.max_cpus IS NOT NULL AND (v_q ->> 'cpus')::real + v_cpus > r.max_cpus)))
		   OR (p_capacity IS NOT NULL AND (v_cpus > v_free_cpus + 1e-6
		                                   OR (r.memory_mb > 0 AND r.memory_mb > v_free_mem)
		                                   OR r.gpus > cardinality(v_free_gpus))) THEN
			-- does not fit now; a starving step keeps its room: nothing after it starts
			EXIT WHEN r.starving;
			CONTINUE;
		END IF;
		v_gids := NULL;
		IF p_capacity IS NOT NULL THEN
			v_free_cpus := v_free_cpus - v_cpus;
			v_free_mem := v_free_mem - r.memory_mb;
			IF r.gpus > 0 THEN
				v_gids := v_free_gpus[1:r.gpus];
				v_free_gpus := v_free_gpus[r.gpus + 1:];
			END IF;
		END IF;
		IF v_quotas THEN
			v_quota := jsonb_set(v_quota, ARRAY[r.queue], jsonb_build_object(
				'running', (v_q ->> 'running')::int + 1, 'gpus', (v_q ->> 'gpus')::int + r.gpus,
				'cpus', (v_q ->> 'cpus')::real + v_cpus));
		END IF;
		v_ids := v_ids || r.step_id;
		v_queues := v_queues || r.queue;
		v_cpus_of := v_cpus_of || CASE WHEN p_capacity IS NULL THEN 0 ELSE v_cpus END;
		v_mem_of := v_mem_of || CASE WHEN p_capacity IS NULL THEN 0 ELSE r.memory_mb END;
		v_gpus_of := v_gpus_of || array_to_string(v_gids, ',');
	END LOOP;
	IF cardinality(v_ids) = 0 THEN
		RETURN;
	END IF;

	RETURN QUERY
	WITH c AS (
		SELECT * FROM unnest(v_ids, v_queues, v_cpus_of, v_mem_of, v_gpus_of) AS t(id, queue, cpus, memory_mb, gpus)
	), dq AS (
		DELETE FROM step_queue q USING c WHERE q.step_id = c.id
	), u AS (
		UPDATE steps s SET state = 'running', attempts = s.attempts + 1, tries = s.tries + 1,
		       started_at = now(), finished_at = NULL, not_before = NULL, exit_code = NULL, reason = NULL
		FROM c WHERE s.id = c.id AND s.state = 'ready'
		RETURNING s.id, s.run_id, s.name, s.attempts, s.kind, s.timeout_ms, s.spec, s.parent_id
	), a AS (
		INSERT INTO attempts (step_id, attempt, state, owner, host, lease_until, queue, cpus, memory_mb, gpu_ids)
		SELECT u.id, u.attempts, 'running', p_owner, p_host, now() + p_lease_ms * interval '1 millisecond',
		       c.queue, c.cpus, c.memory_mb, string_to_array(nullif(c.gpus, ''), ',')
		FROM u JOIN c ON c.id = u.id
	), r AS (
		UPDATE runs SET state = 'running', started_at = coalesce(runs.started_at, now())
		WHERE runs.id IN (SELECT u.run_id FROM u) AND runs.state = 'pending'
	), e AS (
		-- a fan-out's items do not log each start (their fan-out's step tells how many run)
		INSERT INTO events (run_id, step, attempt, actor, kind)
		SELECT u.run_id, u.name, u.attempts, p_owner, 'step.running' FROM u WHERE u.parent_id IS NULL
	)
	SELECT u.id, u.run_id, u.name, u.attempts, u.kind, u.timeout_ms, m.spec, runs.workdir,
	       CASE WHEN m.spec ? 'ancestors' THEN coalesce((
	           SELECT jsonb_object_agg(x.name, jsonb_build_object('kind', x.kind, 'metrics', x.metrics,
	               'best', x.outputs -> 'best',
	               -- a fan-out's outputs: its items' outputs, in item order (null for an item that failed);
	               -- not for another fan-out's items, each of which would read the whole list again
	               'outputs', CASE WHEN x.spec ? 'foreach' AND u.parent_id IS NULL THEN (
	                   SELECT jsonb_agg(c.outputs ORDER BY c.item_index) FROM steps c WHERE c.parent_id = x.id)
	                   WHEN x.spec ? 'foreach' THEN NULL
	                   ELSE x.outputs END))
	           -- the ancestors by (run_id, name) = ANY (names): an index lookup each, whatever the
	           -- run's size (a semi-join with the names scanned the run's steps, per claimed step)
	           FROM steps x
	           WHERE x.run_id = u.run_id AND x.name = ANY (ARRAY(SELECT jsonb_array_elements_text(m.spec -> 'ancestors')))
	             AND x.state = 'succeeded' AND x.parent_id IS NULL), '{}') END,
	       CASE WHEN m.spec ? 'ancestors' THEN jsonb_build_object('params', runs.params,
	           'workflow', runs.workflow_name, 'workflow_hash', runs.workflow_hash,
	           'no_cache', runs.no_cache, 'dev', runs.trigger = 'dev', 'body_state', runs.body_state) END,
	       nullif(c.gpus, '')
	FROM u JOIN c ON c.id = u.id JOIN runs ON runs.id = u.run_id
	LEFT JOIN steps p ON p.id = u.parent_id,
	-- a fan-out's child: its parent's spec with its own item over it
	LATERAL (SELECT CASE WHEN u.parent_id IS NULL THEN u.spec
	                     ELSE (p.spec - 'foreach' - 'max_parallel' - 'min_success' - 'sweep' - 'select' - 'when'
	                           - 'when_model') || u.spec END AS spec) m
	ORDER BY u.id;
END;
$$;
