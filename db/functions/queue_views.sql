-- Queue views: what GET /api/v1/queues and GET /api/v1/queues/{name}
-- answer, and the removal of a queue (DELETE /api/v1/queues/{name}). The
-- admission itself is ferry_claim (claim.sql); ferry_queue_detail explains
-- it without claiming anything. It reads the facts the claim reads: each
-- queue's quotas over the fleet's running attempts, and each host that is up
-- (its newest live daemon's capacity) less what the running attempts on it
-- hold and what its model-server replicas ask for (the engine's claim is
-- given that room: host_admission_now). It walks the ready steps of every queue in the claim's order
-- (starving first, queue priority, fair share, step priority, age; a step
-- in its retry backoff is no candidate) as one claim by every host would,
-- the first host by name that fits a step taking it, and a starving step
-- that fits nowhere keeping its room (nothing after it starts). Each
-- waiting step of the queue is given the first reason that applies: its
-- retry backoff; its queue's quota; no daemon up; its GPUs, CPUs or memory
-- on every host that is up (free of total, and who holds them); else it
-- starts at the next claim, or waits behind the steps the walk started
-- before it. A reading of now, not a promise: each host claims for itself,
-- in its own rounds.

-- "2", "0.5", "1.25": a number of CPUs as the sentences write it
CREATE OR REPLACE FUNCTION ferry_queue_num(x double precision) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT regexp_replace(regexp_replace(to_char(round(x::numeric, 2), 'FM999999990.00'), '0+$', ''), '[.]$', '')
$$;

-- "run 41/train", "run 41/train and run 42/g3", "run 1/a, run 2/b, run 3/c, run 4/d and 2 more"; '' for none
CREATE OR REPLACE FUNCTION ferry_queue_who(who text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN coalesce(cardinality(who), 0) = 0 THEN ''
	            WHEN cardinality(who) = 1 THEN who[1]
	            WHEN cardinality(who) <= 4 THEN array_to_string(who[1:cardinality(who) - 1], ', ') || ' and ' ||
	                                           who[cardinality(who)]
	            ELSE array_to_string(who[1:4], ', ') || ' and ' || (cardinality(who) - 4) || ' more' END
$$;

-- what a request asks for: "1 GPU", "2 GPUs, 0.5 CPUs, 512 MiB"; "nothing"
CREATE OR REPLACE FUNCTION ferry_queue_need(p_gpus int, p_cpus double precision, p_memory_mb bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT coalesce(nullif(concat_ws(', ',
		CASE WHEN p_gpus > 0 THEN p_gpus || ' GPU' || CASE WHEN p_gpus = 1 THEN '' ELSE 's' END END,
		CASE WHEN p_cpus > 0 THEN ferry_queue_num(p_cpus) || ' CPU' || CASE WHEN p_cpus = 1 THEN '' ELSE 's' END END,
		CASE WHEN p_memory_mb > 0 THEN p_memory_mb || ' MiB' END), ''), 'nothing')
$$;

-- One queue as GET /queues lists it: its settings and live figures (its
-- running attempts over the fleet and what they hold, its waiting steps and
-- how many of those are in a retry backoff); NULL when there is no such queue.
CREATE OR REPLACE FUNCTION ferry_queue_json(p_name text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
	SELECT jsonb_build_object('name', q.name, 'priority', q.priority, 'max_running', q.max_running,
	                          'max_gpus', q.max_gpus, 'max_cpus', q.max_cpus, 'description', q.description,
	                          'created_at', ferry_ts(q.created_at), 'updated_at', ferry_ts(q.updated_at),
	                          'running', a.n, 'gpus_held', a.gpus, 'cpus_held', a.cpus, 'memory_mb_held', a.mem,
	                          'waiting', w.n, 'retrying', w.backoff)
	FROM queues q,
	LATERAL (SELECT count(*) AS n, coalesce(sum(cardinality(x.gpu_ids)), 0) AS gpus,
	                coalesce(sum(x.cpus), 0) AS cpus, coalesce(sum(x.memory_mb), 0) AS mem
	         FROM attempts x WHERE x.state = 'running' AND x.queue = q.name) a,
	LATERAL (SELECT count(*) AS n, count(*) FILTER (WHERE s.not_before > now()) AS backoff
	         FROM step_queue s WHERE s.queue = q.name AND NOT s.dev) w
	WHERE q.name = p_name
$$;

-- GET /queues: {"queues": [...]}, the highest priority first, then by name
CREATE OR REPLACE FUNCTION ferry_queues() RETURNS jsonb
LANGUAGE sql STABLE AS $$
	SELECT jsonb_build_object('queues', coalesce(jsonb_agg(ferry_queue_json(q.name) ORDER BY q.priority DESC, q.name),
	                                             '[]'))
	FROM queues q
$$;

-- Why a step whose queue lets it start fits no host that is up now (p_hosts:
-- ferry_queue_detail's list, every one admitting by its room): the first of
-- its GPUs, CPUs and memory that no host has free, with each host's free of
-- total and who holds them; else (each is free somewhere, never all on one
-- host) what each host has free of what it asks.
CREATE OR REPLACE FUNCTION ferry_queue_room(p_hosts jsonb, p_gpus int, p_cpus double precision, p_memory_mb bigint)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
	WITH h AS (
		SELECT e ->> 'name' AS name, (e ->> 'gpus')::int AS gpus, greatest((e ->> 'free_gpus')::int, 0) AS free_gpus,
		       e ->> 'by_gpus' AS by_gpus, (e ->> 'cpus')::float8 AS cpus,
		       greatest((e ->> 'free_cpus')::float8, 0) AS free_cpus, e ->> 'by_cpus' AS by_cpus,
		       (e ->> 'memory_mb')::bigint AS mem, greatest((e ->> 'free_memory_mb')::bigint, 0) AS free_mem,
		       e ->> 'by_memory' AS by_mem, i
		FROM jsonb_array_elements(p_hosts) WITH ORDINALITY AS x(e, i)
	), short AS (
		SELECT p_gpus > 0 AND bool_and(h.free_gpus < p_gpus) AS gpus,
		       p_cpus > 0 AND bool_and(h.free_cpus + 1e-6 < p_cpus) AS cpus,
		       p_memory_mb > 0 AND bool_and(h.free_mem < p_memory_mb) AS mem
		FROM h
	)
	SELECT CASE
		WHEN short.gpus THEN 'needs ' || ferry_queue_need(p_gpus, 0, 0) || '; ' || (
			SELECT string_agg(h.free_gpus || ' of ' || h.gpus || ' free on ' || h.name ||
			                  CASE WHEN h.by_gpus <> '' THEN ', held by ' || h.by_gpus ELSE '' END, '; ' ORDER BY h.i)
			FROM h)
		WHEN short.cpus THEN 'needs ' || ferry_queue_need(0, p_cpus, 0) || '; ' || (
			SELECT string_agg(ferry_queue_num(h.free_cpus) || ' of ' || ferry_queue_num(h.cpus) || ' free on ' || h.name ||
			                  CASE WHEN h.by_cpus <> '' THEN ', held by ' || h.by_cpus ELSE '' END, '; ' ORDER BY h.i)
			FROM h)
		WHEN short.mem THEN 'needs ' || ferry_queue_need(0, 0, p_memory_mb) || ' of memory; ' || (
			SELECT string_agg(CASE WHEN h.mem <= 0 THEN h.name || ' does not say its memory'
			                       ELSE h.free_mem || ' of ' || h.mem || ' MiB free on ' || h.name ||
			                            CASE WHEN h.by_mem <> '' THEN ', held by ' || h.by_mem ELSE '' END END,
			                  '; ' ORDER BY h.i)
			FROM h)
		ELSE 'needs ' || ferry_queue_need(p_gpus, p_cpus, p_memory_mb) || ' on one host; ' || (
			SELECT string_agg(h.name || ' has ' || concat_ws(', ',
			                      CASE WHEN p_gpus > 0 THEN h.free_gpus || ' of ' || h.gpus || ' GPUs' END,
			                      CASE WHEN p_cpus > 0 THEN ferry_queue_num(h.free_cpus) || ' of ' ||
			                                                ferry_queue_num(h.cpus) || ' CPUs' END,
			                      CASE WHEN p_memory_mb > 0 THEN h.free_mem || ' of ' || h.mem || ' MiB' END) ||
			                  ' free', '; ' ORDER BY h.i)
			FROM h) END
	FROM short
$$;

-- Why a step asking for named resources p_named ({NAME: count}, the hosts'
-- FERRY_RESOURCES) fits no host that is up now: the first name no host has
-- enough of free, with each host's free of total and who holds them; NULL
-- when each is free somewhere (ferry_queue_room says the rest).
CREATE OR REPLACE FUNCTION ferry_queue_named_room(p_hosts jsonb, p_named jsonb)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
	SELECT 'needs ' || n.key || ' ' || n.value || '; ' || (
		SELECT string_agg(greatest(coalesce((e -> 'free_resources' ->> n.key)::bigint, 0), 0) || ' of ' ||
		                  coalesce((e -> 'resources' ->> n.key)::bigint, 0) || ' free on ' || (e ->> 'name') ||
		                  CASE WHEN coalesce(e ->> 'by_named', '') <> '' THEN ', held by ' || (e ->> 'by_named') ELSE '' END,
		                  '; ' ORDER BY i)
		FROM jsonb_array_elements(p_hosts) WITH ORDINALITY AS x(e, i))
	FROM jsonb_each_text(p_named) n
	WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_hosts) e
	                  WHERE coalesce((e -> 'free_resources' ->> n.key)::bigint, 0) >= n.value::bigint)
	ORDER BY n.key LIMIT 1
$$;

-- Which quota of queue p_queue a step asking p_gpus and p_cpus would pass
-- with p_use ({"running", "gpus", "cpus"}: what the queue's running
-- attempts hold), as a sentence naming who holds it (p_by: {"running",
-- "gpus", "cpus"}, ferry_queue_who texts); NULL when it passes none.
CREATE OR REPLACE FUNCTION ferry_queue_over(p_queue text, p_max_running int, p_max_gpus int, p_max_cpus real,
                                            p_use jsonb, p_gpus int, p_cpus double precision, p_by jsonb)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE
		WHEN p_max_running IS NOT NULL AND run + 1 > p_max_running THEN
			'queue ' || p_queue || ' is at max_running ' || p_max_running || ': ' ||
			coalesce(nullif(p_by ->> 'running', ''), run || ' attempts') || CASE WHEN run = 1 THEN ' runs' ELSE ' run' END
		WHEN p_max_gpus IS NOT NULL AND gpus + p_gpus > p_max_gpus THEN
			CASE WHEN gpus = 0 THEN 'queue ' || p_queue || ' allows ' || p_max_gpus || ' GPU' ||
			                        CASE WHEN p_max_gpus = 1 THEN '' ELSE 's' END || ' at once (max_gpus); it needs ' || p_gpus
			     ELSE 'queue ' || p_queue || ' is at max_gpus ' || p_max_gpus || ': ' || gpus || ' held by ' ||
			          coalesce(nullif(p_by ->> 'gpus', ''), 'its running attempts') || ', needs ' || p_gpus END
		WHEN p_max_cpus IS NOT NULL AND cpus + p_cpus > p_max_cpus THEN
			CASE WHEN cpus = 0 THEN 'queue ' || p_queue || ' allows ' || ferry_queue_num(p_max_cpus) ||
			                        ' CPUs at once (max_cpus); it needs ' || ferry_queue_num(p_cpus)
			     ELSE 'queue ' || p_queue || ' is at max_cpus ' || ferry_queue_num(p_max_cpus) || ': ' ||
			          ferry_queue_num(cpus) || ' held by ' || coalesce(nullif(p_by ->> 'cpus', ''), 'its running attempts') ||
			          ', needs ' || ferry_queue_num(p_cpus) END
		END
	FROM (SELECT coalesce((p_use ->> 'running')::int, 0) AS run, coalesce((p_use ->> 'gpus')::int, 0) AS gpus,
	             coalesce((p_use ->> 'cpus')::float8, 0) AS cpus) u
$$;

-- GET /queues/{name}: {"queue": ferry_queue_json, "running": the queue's
-- running attempts (run, step, host, gpu_ids, cpus, memory_mb, since),
-- "waiting": its waiting steps in the claim's order (those in a retry
-- backoff last), at most p_limit, each with its position, run, step,
-- workflow, priority, since, request {cpus, memory_mb, gpus} and why}.
-- p_admission: what the claim's p_capacity says beside a host's room
-- ("default_cpus": a request that states no CPUs, "starve_s": the
-- starvation limit), as this daemon has them. P0002 when there is no such queue.
CREATE OR REPLACE FUNCTION ferry_queue_detail(p_name text, p_limit int, p_admission jsonb DEFAULT '{}')
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
	v_queue jsonb := ferry_queue_json(p_name);
	v_starve interval := make_interval(secs => coalesce((p_admission ->> 'starve_s')::double precision, 600));
	v_default_cpus double precision := coalesce((p_admission ->> 'default_cpus')::double precision, 0);
	v_hosts jsonb;             -- the hosts that are up, by name, as ferry_queue_room reads them
	h_name text[];             -- the same, as arrays for the walk
	h_admits boolean[];
	h_cpus double precision[]; -- what is free now
	h_mem bigint[];
	h_gpus int[];
	h_named jsonb[];           -- named resources (FERRY_RESOURCES) free: {NAME: count}
	h_shareable int[];         -- GPUs shared by fewer than gpu_shares attempts (a shared request's room)
	s_cpus double precision[]; -- what the walk left free
	s_mem bigint[];
	s_gpus int[];
	s_named jsonb[];
	v_shares int := greatest(coalesce((p_admission ->> 'gpu_shares')::int, 4), 1);
	v_use jsonb;               -- queue -> {"running", "gpus", "cpus"} held by its running attempts
	v_sim jsonb;               -- the same with what the walk started
	v_by jsonb;                -- who holds this queue's quota: {"running", "gpus", "cpus"}
	v_running jsonb;
	v_waiting jsonb := '[]';
	v_started int := 0;        -- steps the walk started so far
	v_blocker text;            -- a starving step that fits nowhere: nothing after it starts
	v_pos int := 0;
	v_fit int;
	v_take int;
	v_cpus double precision;
	v_over text;
	v_why text;
	v_s jsonb;
	r record;
BEGIN
	IF v_queue IS NULL THEN
		RAISE EXCEPTION 'no queue named "%"; ferry queues lists them', left(p_name, 64) USING ERRCODE = 'P0002';
	END IF;
	-- each host that is up: its newest live daemon's capacity less what its running attempts and its
	-- model-server replicas hold
	SELECT coalesce(jsonb_agg(jsonb_build_object('name', h.host, 'admits', h.admits,
	                                             'gpus', cardinality(h.ids), 'free_gpus', h.free_gpus,
	                                             'by_gpus', h.by_gpus, 'cpus', h.cpus, 'free_cpus', h.cpus - h.held_cpus,
	                                             'by_cpus', h.by_cpus, 'memory_mb', h.mem,
	                                             'free_memory_mb', h.mem - h.held_mem, 'by_memory', h.by_mem,
	                                             'resources', h.res, 'free_resources', h.free_res, 'by_named', h.by_named)
	                          ORDER BY h.host), '[]'),
	       coalesce(array_agg(h.host ORDER BY h.host), '{}'), coalesce(array_agg(h.admits ORDER BY h.host), '{}'),
	       coalesce(array_agg(h.cpus - h.held_cpus ORDER BY h.host), '{}'),
	       coalesce(array_agg(h.mem - h.held_mem ORDER BY h.host), '{}'),
	       coalesce(array_agg(h.free_gpus ORDER BY h.host), '{}'),
	       coalesce(array_agg(h.free_res ORDER BY h.host), '{}'),
	       coalesce(array_agg(h.shareable ORDER BY h.host), '{}')
	INTO v_hosts, h_name, h_admits, h_cpus, h_mem, h_gpus, h_named, h_shareable
	FROM (
		SELECT d.host, coalesce((d.capacity ->> 'admits')::boolean, true) AS admits,
		       coalesce((d.capacity ->> 'cpus')::double precision, 0) AS cpus,
		       coalesce((d.capacity ->> 'memory_bytes')::bigint / 1048576, 0) AS mem,
		       g.ids, cardinality(ARRAY(SELECT unnest(g.ids) EXCEPT SELECT unnest(a.gpu_ids)
		                                FROM attempts a WHERE a.state = 'running' AND a.host = d.host)) AS free_gpus,
		       x.held_cpus + y.cpus AS held_cpus, x.held_mem + y.mem AS held_mem, x.by_gpus,
		       ferry_queue_who(coalesce(x.cpu_who, '{}') || coalesce(y.cpu_who, '{}')) AS by_cpus,
		       ferry_queue_who(coalesce(x.mem_who, '{}') || coalesce(y.mem_who, '{}')) AS by_mem, x.by_named,
		       coalesce(d.capacity -> 'resources', '{}') AS res,
		       ferry_named_take(coalesce(d.capacity -> 'resources', '{}'), coalesce((
		           SELECT jsonb_object_agg(k.key, k.n) FROM (
		               SELECT e.key, sum(e.value::bigint) AS n FROM attempts a, jsonb_each_text(a.named) e
		               WHERE a.state = 'running' AND a.host = d.host AND a.named IS NOT NULL GROUP BY e.key) k), '{}'), 1)
		           AS free_res,
		       (SELECT count(*) FROM (SELECT g2 FROM attempts a, unnest(a.gpu_ids) g2
		                             WHERE a.state = 'running' AND a.host = d.host AND a.gpu_shared
		                             GROUP BY g2 HAVING count(*) < v_shares) sh)::int AS shareable
		FROM (SELECT DISTINCT ON (host) host, capacity FROM daemons
		      WHERE stopped_at IS NULL AND last_seen + lease_ms * interval '1 millisecond' > now()
		      ORDER BY host, last_seen DESC) d,
		LATERAL (SELECT coalesce(array_agg(e ->> 'index'), '{}') AS ids
		         FROM jsonb_array_elements(CASE WHEN jsonb_typeof(d.capacity -> 'gpus') = 'array'
		                                        THEN d.capacity -> 'gpus' ELSE '[]' END) e) g,
		LATERAL (SELECT coalesce(sum(a.cpus), 0) AS held_cpus, coalesce(sum(a.memory_mb), 0) AS held_mem,
		                ferry_queue_who(array_agg('run ' || s.run_id || '/' || s.name ORDER BY a.started_at, a.step_id)
		                                FILTER (WHERE cardinality(a.gpu_ids) > 0)) AS by_gpus,
		                array_agg('run ' || s.run_id || '/' || s.name ORDER BY a.started_at, a.step_id)
		                         FILTER (WHERE a.cpus > 0) AS cpu_who,
		                array_agg('run ' || s.run_id || '/' || s.name ORDER BY a.started_at, a.step_id)
		                         FILTER (WHERE a.memory_mb > 0) AS mem_who,
		                ferry_queue_who(array_agg('run ' || s.run_id || '/' || s.name ORDER BY a.started_at, a.step_id)
		                                FILTER (WHERE a.named IS NOT NULL)) AS by_named
		         FROM attempts a JOIN steps s ON s.id = a.step_id
		         WHERE a.state = 'running' AND a.host = d.host) x,
		-- its live model-server replicas: what their deploy steps' resources ask for (the engine admits less it)
		LATERAL (SELECT coalesce(sum(rr.cpus), 0) AS cpus, coalesce(sum(rr.memory_mb), 0) AS mem,
		                array_agg(DISTINCT rr.who) FILTER (WHERE rr.cpus > 0) AS cpu_who,
		                array_agg(DISTINCT rr.who) FILTER (WHERE rr.memory_mb > 0) AS mem_who
		         FROM (SELECT hr.cpus, hr.memory_mb,
		                      'deployment ' || hr.deployment || ' ' || hr.version || ' (replicas)' AS who
		               FROM ferry_host_replicas(d.host) hr) rr) y
	) h;
	s_cpus := h_cpus;
	s_mem := h_mem;
	s_gpus := h_gpus;
	s_named := h_named;

	-- what each queue's running attempts hold (its quotas count them over the fleet)
	SELECT coalesce(jsonb_object_agg(u.queue, jsonb_build_object('running', u.n, 'gpus', u.gpus, 'cpus', u.cpus)), '{}')
	INTO v_use
	FROM (SELECT a.queue, count(*) AS n, coalesce(sum(cardinality(a.gpu_ids)), 0) AS gpus, coalesce(sum(a.cpus), 0) AS cpus
	      FROM attempts a WHERE a.state = 'running' AND a.queue IS NOT NULL GROUP BY a.queue) u;
	v_sim := v_use;

	SELECT coalesce(jsonb_agg(jsonb_build_object('run', s.run_id, 'step', s.name, 'attempt', a.attempt,
	                                             'workflow', ru.workflow_name, 'host', a.host,
	                                             'gpu_ids', to_jsonb(coalesce(a.gpu_ids, '{}')), 'cpus', a.cpus,
	                                             'memory_mb', a.memory_mb, 'since', ferry_ts(a.started_at))
	                          ORDER BY a.started_at, a.step_id), '[]'),
	       jsonb_build_object(
	           'running', ferry_queue_who(array_agg('run ' || s.run_id || '/' || s.name ORDER BY a.started_at, a.step_id)),
	           'gpus', ferry_queue_who(array_agg('run ' || s.run_id || '/' || s.name ORDER BY a.started_at, a.step_id)
	                                   FILTER (WHERE cardinality(a.gpu_ids) > 0)),
	           'cpus', ferry_queue_who(array_agg('run ' || s.run_id || '/' || s.name ORDER BY a.started_at, a.step_id)
	                                   FILTER (WHERE a.cpus > 0)))
	INTO v_running, v_by
	FROM attempts a JOIN steps s ON s.id = a.step_id JOIN runs ru ON ru.id = s.run_id
	WHERE a.state = 'running' AND a.queue = p_name;

	-- the walk: every queue's ready steps in the claim's order (another queue's deeper than the claim
	-- ever reads in one round are left out), those in a retry backoff after them
	FOR r IN
		WITH w AS (
			SELECT q.step_id, q.run_id, q.queue, q.priority, q.cpus, q.memory_mb, q.gpus, q.since, q.not_before,
			       q.named, q.gpu_shared, q.keeps_room,
			       coalesce(q.not_before > now(), false) AS backoff,
			       qu.priority AS qprio, qu.max_running, qu.max_gpus, qu.max_cpus,
			       row_number() OVER (PARTITION BY q.queue, coalesce(q.not_before > now(), false)
			                          ORDER BY q.priority DESC, q.step_id) AS rank
			FROM step_queue q JOIN queues qu ON qu.name = q.queue
			WHERE NOT q.dev
		)
		SELECT w.*, st.name AS step, ru.workflow_name AS workflow,
		       (w.since < now() - v_starve OR w.keeps_room) AS starving -- as the claim counts it
		FROM w JOIN steps st ON st.id = w.step_id JOIN runs ru ON ru.id = w.run_id
		WHERE w.queue = p_name OR (NOT w.backoff AND w.rank <= 1000)
		ORDER BY w.backoff, CASE WHEN w.backoff THEN w.not_before END, (w.since < now() - v_starve OR w.keeps_room) DESC,
		         w.qprio DESC,
		         coalesce((v_use -> w.queue ->> 'running')::int, 0) + w.rank, w.priority DESC, w.step_id
	LOOP
		EXIT WHEN v_pos >= p_limit;
		v_cpus := coalesce(r.cpus, v_default_cpus);
		IF r.backoff THEN
			IF r.queue = p_name THEN
				v_why := 'retrying after ' || to_char(r.not_before AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC (backoff)';
			END IF;
		ELSE
			-- the first host (by name) it fits now, and the first it fits in what the walk left
			v_fit := NULL;
			v_take := NULL;
			FOR i IN 1 .. cardinality(h_name) LOOP
				-- (a shared GPU request may also go to a GPU others share; the walk does not count its share)
				IF v_fit IS NULL AND (NOT h_admits[i] OR (v_cpus <= h_cpus[i] + 1e-6 AND
				                                          (r.memory_mb <= 0 OR r.memory_mb <= h_mem[i]) AND
				                                          r.gpus <= h_gpus[i] + CASE WHEN r.gpu_shared THEN h_shareable[i] ELSE 0 END AND
				                                          (r.named IS NULL OR ferry_named_fit(r.named, 1, h_named[i])))) THEN
					v_fit := i;
				END IF;
				IF v_take IS NULL AND (NOT h_admits[i] OR (v_cpus <= s_cpus[i] + 1e-6 AND
				                                           (r.memory_mb <= 0 OR r.memory_mb <= s_mem[i]) AND
				                                           r.gpus <= s_gpus[i] + CASE WHEN r.gpu_shared THEN h_shareable[i] ELSE 0 END AND
				                                           (r.named IS NULL OR ferry_named_fit(r.named, 1, s_named[i])))) THEN
					v_take := i;
				END IF;
			END LOOP;
			v_s := coalesce(v_sim -> r.queue, '{}');
			IF v_blocker IS NOT NULL OR ferry_queue_over(r.queue, r.max_running, r.max_gpus, r.max_cpus, v_s, r.gpus, v_cpus, '{}') IS NOT NULL THEN
				v_take := NULL;
			END IF;
			IF r.queue = p_name THEN
				v_over := ferry_queue_over(r.queue, r.max_running, r.max_gpus, r.max_cpus, coalesce(v_use -> r.queue, '{}'),
				                           r.gpus, v_cpus, v_by);
				v_why := CASE
					WHEN v_over IS NOT NULL THEN v_over
					WHEN cardinality(h_name) = 0 THEN 'no daemon that admits work is up'
					WHEN v_fit IS NULL THEN coalesce(CASE WHEN r.named IS NOT NULL THEN ferry_queue_named_room(v_hosts, r.named) END,
					                                 ferry_queue_room(v_hosts, r.gpus, v_cpus, r.memory_mb))
					WHEN v_take IS NOT NULL THEN 'fits ' || h_name[v_take] || ' now: next claim'
					WHEN v_blocker IS NOT NULL THEN 'behind ' || v_blocker || ', which has waited past the starvation ' ||
					                                'limit and keeps its room: nothing after it starts until it fits'
					ELSE 'behind ' || v_started || ' step' || CASE WHEN v_started = 1 THEN '' ELSE 's' END ||
					     ' ahead of it in the order' END;
			END IF;
			IF v_take IS NOT NULL THEN
				v_started := v_started + 1;
				IF h_admits[v_take] THEN
					s_cpus[v_take] := s_cpus[v_take] - v_cpus;
					s_mem[v_take] := s_mem[v_take] - r.memory_mb;
					IF NOT r.gpu_shared THEN
						s_gpus[v_take] := s_gpus[v_take] - r.gpus;
					END IF;
					IF r.named IS NOT NULL THEN
						s_named[v_take] := ferry_named_take(s_named[v_take], r.named, 1);
					END IF;
				END IF;
				v_sim := v_sim || jsonb_build_object(r.queue, jsonb_build_object(
					'running', coalesce((v_s ->> 'running')::int, 0) + 1,
					'gpus', coalesce((v_s ->> 'gpus')::int, 0) + r.gpus,
					'cpus', coalesce((v_s ->> 'cpus')::double precision, 0) + v_cpus));
			ELSIF r.starving AND v_blocker IS NULL THEN
				v_blocker := 'run ' || r.run_id || '/' || r.step;
			END IF;
		END IF;
		IF r.queue = p_name THEN
			v_pos := v_pos + 1;
			v_waiting := v_waiting || jsonb_build_array(jsonb_build_object(
				'position', v_pos, 'run', r.run_id, 'step', r.step, 'workflow', r.workflow, 'priority', r.priority,
				'since', ferry_ts(r.since), 'not_before', ferry_ts(r.not_before),
				'request', jsonb_build_object('cpus', v_cpus, 'memory_mb', r.memory_mb, 'gpus', r.gpus)
				           || CASE WHEN r.gpu_shared THEN '{"gpus_shared": true}'::jsonb ELSE '{}'::jsonb END
				           || CASE WHEN r.named IS NOT NULL THEN jsonb_build_object('named', r.named) ELSE '{}'::jsonb END,
				'why', v_why));
		END IF;
	END LOOP;
	RETURN jsonb_build_object('queue', v_queue, 'running', v_running, 'waiting', v_waiting);
END;
$$;

-- DELETE /queues/{name}: removes queue p_name, recording what it was in the
-- audit trail under p_actor; refused (55000) for 'default' and for a queue
-- steps wait in (they would wait for a queue that is gone: no claim reads
-- them). step_queue is locked against new rows while it is counted: a step
-- entering the queue in between (its trigger saw the queue) would be lost
-- there. P0002 when there is no such queue.
CREATE OR REPLACE FUNCTION ferry_queue_delete(p_name text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
	v_q queues;
	v_n bigint;
BEGIN
	IF p_name = 'default' THEN
		RAISE EXCEPTION 'queue default cannot be deleted: a step that names no queue waits there' USING ERRCODE = '55000';
	END IF;
	PERFORM set_config('lock_timeout', '5s', true);
	LOCK TABLE step_queue IN SHARE MODE;
	SELECT * INTO v_q FROM queues WHERE name = p_name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no queue named "%"; ferry queues lists them', left(p_name, 64) USING ERRCODE = 'P0002';
	END IF;
	SELECT count(*) INTO v_n FROM step_queue WHERE queue = p_name;
	IF v_n > 0 THEN
		RAISE EXCEPTION 'queue % has % waiting step%: it can be deleted once none waits (ferry queues show % lists them)',
			p_name, v_n, CASE WHEN v_n = 1 THEN '' ELSE 's' END, p_name USING ERRCODE = '55000';
	END IF;
	DELETE FROM queues WHERE name = p_name;
	INSERT INTO audit (actor, object, object_id, action, detail)
	VALUES (p_actor, 'queue', 0, 'deleted', jsonb_build_object('name', p_name, 'before', jsonb_build_object(
		'priority', v_q.priority, 'max_running', v_q.max_running, 'max_gpus', v_q.max_gpus,
		'max_cpus', v_q.max_cpus, 'description', v_q.description)));
	RETURN jsonb_build_object('name', p_name, 'deleted', true);
END;
$$;
