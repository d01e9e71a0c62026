-- Preemption (issue 30, item 5; engine/preempt.c runs it every 2 s on
-- each daemon that admits by its host's room).
--
-- ferry_preempt(p_owner, p_host, p_after, p_default_cpus) does nothing
-- unless p_owner runs a preemptible job on p_host. Then it looks at the
-- first ready step in the claim's order (its queue's priority, its own,
-- its age; not a gang's item, not one asking for named resources or a
-- shared GPU, not one of a queue deleted since it was queued) once it
-- has waited p_after. When it does not fit the room
-- p_host has free now, but would fit the host's capacity, it chooses
-- running attempts of p_owner on p_host whose step says preemptible: true
-- and ranks lower — a queue of lower priority, or the same queue and a
-- lower step priority — the lowest and the newest first, until what they
-- hold frees enough; none when they would not. Each chosen attempt is
-- marked (attempts.preempted_by) and gets a step.preempted event naming
-- the step it makes room for; the caller stops its job with the restart
-- outcome (ferry_finish: ready again at once, the try not counted), so it
-- starts again later and resumes from FERRY_CHECKPOINT_DIR. The step they
-- make room for keeps it (step_queue.keeps_room: it counts as starving),
-- so a smaller step behind it — a victim's own retry — cannot backfill
-- the room one victim frees while another is still ending. What marked
-- attempts hold counts as free, so a step never stops more than it needs
-- while their jobs end.
CREATE OR REPLACE FUNCTION ferry_preempt(p_owner text, p_host text, p_after interval, p_default_cpus real)
RETURNS TABLE (step_id bigint, attempt int, reason text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	v_cap jsonb;
	v_cpus real;
	v_mem bigint;
	v_gpus int;
	v_free_cpus real;
	v_free_mem bigint;
	v_free_gpus int;
	b record;
	v record;
	v_ids bigint[] := '{}';
	v_atts int[] := '{}';
	v_by text;
BEGIN
	-- the usual answer, cheaply: no preemptible job of this daemon runs here
	IF NOT EXISTS (SELECT 1 FROM attempts a JOIN steps s ON s.id = a.step_id LEFT JOIN steps p ON p.id = s.parent_id
	               WHERE a.state = 'running' AND a.host = p_host AND a.owner = p_owner AND a.preempted_by IS NULL
	                 AND coalesce(s.spec ->> 'preemptible', p.spec ->> 'preemptible') = 'true') THEN
		RETURN;
	END IF;
	SELECT d.capacity INTO v_cap FROM daemons d
	WHERE d.host = p_host AND d.stopped_at IS NULL ORDER BY d.last_seen DESC LIMIT 1;
	IF v_cap IS NULL OR (v_cap ->> 'admits') = 'false' THEN
		RETURN;
	END IF;
	v_cpus := coalesce((v_cap ->> 'cpus')::real, 0);
	v_mem := coalesce((v_cap ->> 'memory_bytes')::bigint / 1048576, 0);
	v_gpus := CASE WHEN jsonb_typeof(v_cap -> 'gpus') = 'array' THEN jsonb_array_length(v_cap -> 'gpus') ELSE 0 END;
	-- free: the capacity less the running attempts not being preempted and the host's replicas
	SELECT v_cpus - coalesce(sum(a.cpus) FILTER (WHERE a.preempted_by IS NULL), 0),
	       v_mem - coalesce(sum(a.memory_mb) FILTER (WHERE a.preempted_by IS NULL), 0)
	INTO v_free_cpus, v_free_mem
	FROM attempts a WHERE a.state = 'running' AND a.host = p_host;
	-- GPUs by id: one shared by several attempts is held once
	SELECT v_gpus - count(DISTINCT g) INTO v_free_gpus
	FROM attempts a, unnest(a.gpu_ids) g
	WHERE a.state = 'running' AND a.host = p_host AND a.preempted_by IS NULL;
	SELECT v_free_cpus - coalesce(sum(hr.cpus), 0), v_free_mem - coalesce(sum(hr.memory_mb), 0)
	INTO v_free_cpus, v_free_mem
	FROM ferry_host_replicas(p_host) hr;

	-- the step at the head of the claim's order: each queue's first by its index (step_queue_order),
	-- never the whole queue sorted (a fan-out may have queued 100,000)
	SELECT q.step_id, q.run_id, s.name, q.queue, qu.priority AS qprio, q.priority, q.since,
	       coalesce(q.cpus, p_default_cpus) AS cpus, coalesce(q.memory_mb, 0) AS mem, q.gpus,
	       qu.max_running, q.named, q.gpu_shared, q.gang
	INTO b
	FROM queues qu
	CROSS JOIN LATERAL (SELECT * FROM step_queue q1
	                    WHERE q1.queue = qu.name AND NOT q1.dev AND (q1.not_before IS NULL OR q1.not_before <= now())
	                    ORDER BY q1.priority DESC, q1.step_id LIMIT 1) q
	JOIN steps s ON s.id = q.step_id
	ORDER BY qu.priority DESC, q.priority DESC, q.step_id LIMIT 1;
	IF NOT FOUND OR b.since > now() - p_after OR b.gang IS NOT NULL OR b.named IS NOT NULL OR b.gpu_shared THEN
		RETURN;
	END IF;
	-- it fits now (the next claim takes it), or it never can here: nothing to stop for it
	IF b.cpus <= v_free_cpus + 1e-6 AND (b.mem = 0 OR b.mem <= v_free_mem) AND b.gpus <= v_free_gpus THEN
		RETURN;
	END IF;
	IF b.cpus > v_cpus + 1e-6 OR (b.mem > 0 AND b.mem > v_mem) OR b.gpus > v_gpus THEN
		RETURN;
	END IF;
	-- its queue's max_running holds it back: room on this host would not start it
	IF b.max_running IS NOT NULL AND (SELECT count(*) FROM attempts a
	                                  WHERE a.state = 'running' AND a.queue = b.queue) >= b.max_running THEN
		RETURN;
	END IF;

	FOR v IN
		SELECT a.step_id, a.attempt, coalesce(a.cpus, 0) AS cpus, coalesce(a.memory_mb, 0) AS mem,
		       -- a shared GPU may stay held by its other sharers: counted as freeing none
		       CASE WHEN a.gpu_shared THEN 0 ELSE coalesce(cardinality(a.gpu_ids), 0) END AS gpus
		FROM attempts a JOIN steps s ON s.id = a.step_id LEFT JOIN steps p ON p.id = s.parent_id
		LEFT JOIN queues qa ON qa.name = a.queue
		WHERE a.state = 'running' AND a.host = p_host AND a.owner = p_owner AND a.preempted_by IS NULL
		  AND coalesce(s.spec ->> 'preemptible', p.spec ->> 'preemptible') = 'true'
		  AND (coalesce(qa.priority, 0) < b.qprio
		       OR (a.queue = b.queue
		           AND coalesce((coalesce(s.spec ->> 'priority', p.spec ->> 'priority'))::int, 0) < b.priority))
		ORDER BY coalesce(qa.priority, 0), coalesce((coalesce(s.spec ->> 'priority', p.spec ->> 'priority'))::int, 0),
		         a.started_at DESC, a.step_id
	LOOP
		EXIT WHEN b.cpus <= v_free_cpus + 1e-6 AND (b.mem = 0 OR b.mem <= v_free_mem) AND b.gpus <= v_free_gpus;
		v_ids := v_ids || v.step_id;
		v_atts := v_atts || v.attempt;
		v_free_cpus := v_free_cpus + v.cpus;
		v_free_mem := v_free_mem + v.mem;
		v_free_gpus := v_free_gpus + v.gpus;
	END LOOP;
	IF cardinality(v_ids) = 0
	   OR NOT (b.cpus <= v_free_cpus + 1e-6 AND (b.mem = 0 OR b.mem <= v_free_mem) AND b.gpus <= v_free_gpus) THEN
		RETURN;
	END IF;

	v_by := 'run ' || b.run_id || '/' || b.name;
	-- the room the victims free as they end is its: it counts as starving until it starts
	UPDATE step_queue SET keeps_room = true WHERE step_queue.step_id = b.step_id;
	UPDATE attempts a SET preempted_by = v_by
	FROM unnest(v_ids, v_atts) AS x(id, att) WHERE a.step_id = x.id AND a.attempt = x.att AND a.state = 'running';
	INSERT INTO events (run_id, step, attempt, actor, kind, detail)
	SELECT s.run_id, s.name, x.att, p_owner, 'step.preempted',
	       jsonb_build_object('by', v_by, 'queue', b.queue, 'priority', b.priority, 'host', p_host)
	FROM unnest(v_ids, v_atts) AS x(id, att) JOIN steps s ON s.id = x.id;
	RETURN QUERY
	SELECT x.id, x.att, 'preempted: its room on ' || p_host || ' went to ' || v_by || ' (queue ' || b.queue ||
	       ', priority ' || b.priority || '); it starts again from its checkpoint'
	FROM unnest(v_ids, v_atts) AS x(id, att);
END;
$$;
