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
-- order: a starving step first (waited past p_capacity.starve_s, or one
-- others were preempted for: step_queue.keeps_room, preempt.sql), the
-- queue's priority, fair share between queues of equal priority (the
-- queue with fewer running, counting what this claim took, goes next),
-- the step's priority, its age. A step is taken when it fits: its queue's
-- quotas (max_running, max_gpus, max_cpus over the fleet's running
-- attempts) and this host's free CPUs, memory and GPUs (p_capacity less
-- what this host's running attempts hold). One that does not fit is
-- passed over (a smaller one behind it may start: backfill), unless it is
-- starving: then nothing behind it in the order starts (its room is kept
-- for it). Named resources (p_capacity.resources, FERRY_RESOURCES) are
-- counted like GPUs. GPUs are given by id, never two attempts one GPU
-- unless both share (gpu_shared: at most p_capacity.gpu_shares on one, the
-- one shared by fewest first, a free one only when none has room); the attempt
-- row records them (gpu_ids), so a restarted daemon and the next claim
-- see them held until the attempt ends. p_capacity NULL: no admission
-- (a Slurm daemon: Slurm admits). Claims that count the same host or a
-- quota'd queue are serialised by advisory locks: two never give the
-- same GPU or pass the same quota. A gang (a fan-out with gang: true, its
-- items' step_queue.gang) is considered before the other candidates and
-- taken whole, when all its items are ready and fit together, or not at
-- all.

-- The ready steps a claim may take, in the claim's order, each with what it
-- asks for and the running sums of the requests up to it (over all, and
-- within its queue): the queues that have ready steps (a skip over the
-- step_queue_order index, so a queue deleted since its steps were queued
-- still counts, at priority 0), then at most p_limit of each queue,
-- locked SKIP LOCKED.
CREATE OR REPLACE FUNCTION ferry_claim_candidates(p_limit int, p_run bigint, p_step bigint, p_starve interval,
                                                  p_default_cpus real)
RETURNS TABLE (pos bigint, step_id bigint, queue text, cpus real, memory_mb bigint, gpus int, starving boolean,
               max_running int, max_gpus int, max_cpus real, cum_cpus real, cum_mem numeric, cum_gpus bigint,
               q_n bigint, q_gpus bigint, q_cpus real, named jsonb, gpu_shared boolean)
-- each queue's steps read in the order of step_queue_order, never all of them sorted: the queue is
-- transient and its statistics often say a handful of rows where a fan-out has made 100,000.
-- PL/pgSQL, not SQL: its plan is made once a session (a SQL function's is made at every call: 1 ms),
-- and generic (plan_cache_mode): left to choose, PostgreSQL may plan it afresh at every call for its
-- parameters, as costly as running it (a session calling only the claim, 1,000 waiting: 1.9 ms a
-- claim, 0.86 ms generic; the daemon's own sessions had settled on generic plans already).
LANGUAGE plpgsql SET enable_bitmapscan = off SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
	RETURN QUERY
	WITH RECURSIVE qs AS (
		(SELECT q.queue FROM step_queue q ORDER BY q.queue LIMIT 1)
		UNION ALL
		SELECT (SELECT q.queue FROM step_queue q WHERE q.queue > qs.queue ORDER BY q.queue LIMIT 1)
		FROM qs WHERE qs.queue IS NOT NULL
	), cand AS (
		SELECT c.*, coalesce(c.cpus, p_default_cpus) AS want, coalesce(qu.priority, 0) AS qprio,
		       qu.max_running, qu.max_gpus, qu.max_cpus,
		       (c.since < now() - p_starve OR c.keeps_room) AS starve, -- keeps_room: preempt.sql
		       row_number() OVER (PARTITION BY c.queue ORDER BY c.priority DESC, c.step_id) AS rank
		FROM qs LEFT JOIN queues qu ON qu.name = qs.queue
		CROSS JOIN LATERAL (
			SELECT q.step_id, q.queue, q.priority, q.cpus, q.memory_mb, q.gpus, q.since, q.named, q.gpu_shared,
			       q.keeps_room
			FROM step_queue q
			WHERE q.queue = qs.queue
			  AND (q.not_before IS NULL OR q.not_before <= now())
			  AND q.dev = (p_run IS NOT NULL) AND (p_run IS NULL OR q.run_id = p_run)
			  AND (p_step IS NULL OR q.step_id = p_step)
			  AND (q.gang IS NULL OR p_run IS NOT NULL OR p_step IS NOT NULL) -- a gang is claimed whole (ferry_claim)
			ORDER BY q.priority DESC, q.step_id LIMIT p_limit
			FOR UPDATE OF q SKIP LOCKED) c
		WHERE qs.queue IS NOT NULL
	), running AS (
		-- fair share between queues of equal priority: the one with fewer running goes next
		SELECT a.queue, count(*) AS n FROM attempts a
		WHERE a.state = 'running' AND a.queue IN (SELECT DISTINCT cand.queue FROM cand) GROUP BY a.queue
	)
	SELECT row_number() OVER w, cand.step_id, cand.queue, cand.want, cand.memory_mb, cand.gpus, cand.starve,
	       cand.max_running, cand.max_gpus, cand.max_cpus,
	       sum(cand.want) OVER w, sum(cand.memory_mb) OVER w, sum(cand.gpus) OVER w,
	       count(*) OVER wq, sum(cand.gpus) OVER wq, sum(cand.want) OVER wq, cand.named, cand.gpu_shared
	FROM cand LEFT JOIN running ON running.queue = cand.queue
	WINDOW w AS (ORDER BY cand.starve DESC, cand.qprio DESC, coalesce(running.n, 0) + cand.rank,
	             cand.priority DESC, cand.step_id ROWS UNBOUNDED PRECEDING),
	       wq AS (PARTITION BY cand.queue ORDER BY cand.starve DESC, cand.qprio DESC,
	              coalesce(running.n, 0) + cand.rank, cand.priority DESC, cand.step_id ROWS UNBOUNDED PRECEDING)
	ORDER BY 1;
END;
$$;

-- Whether p_times of request p_req ({NAME: count}) fit p_free (a name it lacks offers none).
CREATE OR REPLACE FUNCTION ferry_named_fit(p_req jsonb, p_times int, p_free jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
	SELECT NOT EXISTS (SELECT 1 FROM jsonb_each_text(p_req) e
	                   WHERE coalesce((p_free ->> e.key)::bigint, 0) < e.value::bigint * p_times)
$$;

-- p_free less p_times of request p_req.
CREATE OR REPLACE FUNCTION ferry_named_take(p_free jsonb, p_req jsonb, p_times int) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
	SELECT p_free || coalesce(jsonb_object_agg(e.key, coalesce((p_free ->> e.key)::bigint, 0) - e.value::bigint * p_times), '{}')
	FROM jsonb_each_text(p_req) e
$$;

-- p_step (not NULL) claims that step only: `ferry dev run --step` lets one
-- step at a time go after the person said "run" (migration 0013 dropped the
-- five-argument form; 0032 the six-argument one).
--
-- How: the candidates' longest prefix in the order that fits as a whole
-- (the running sums against the free room and the quotas) is taken in one
-- statement, its GPUs sliced from the free ones by those sums; a loop runs
-- only for what comes after a step that does not fit (backfill), one step
-- at a time. Most claims (nothing asked, or room for all) are the one
-- statement.
CREATE OR REPLACE FUNCTION ferry_claim(p_owner text, p_host text, p_limit int, p_lease_ms bigint, p_run bigint,
                                       p_step bigint, p_capacity jsonb)
RETURNS TABLE (step_id bigint, run_id bigint, name text, attempt int, kind text,
               timeout_ms bigint, spec jsonb, workdir text, inputs jsonb, run jsonb, gpus text)
-- generic plans, made once a session, as ferry_claim_candidates's, and no sequential scans: made
-- when the tables were small (a fresh cluster, a quiet queue), a plan scanned the whole of steps
-- for the claimed step's row and the whole of step_queue for its entry and for the gangs, at every
-- claim until an ANALYZE replaced it (bench_dispatch --chain: one scan of steps a hop, longer as
-- the steps table grew). And no JIT: a scan that has no index (queues, a handful of rows) costs
-- 1e10 with sequential scans off, over jit_above_cost, and its plan was compiled at every
-- execution (18 ms a claim, where 0.1 ms is the rest)
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
	-- what this claim takes, one element per step: its id, queue, the CPUs and memory reserved, its GPUs
	v_ids bigint[];
	v_queues text[];
	v_cpus_of real[];
	v_mem_of bigint[];
	v_gpus_of text[];              -- "0,1" (ids have no comma: FERRY_GPUS splits on it), NULL for none
	v_named_of jsonb[];            -- the named resources it holds, NULL for none
	v_shared_of boolean[];         -- its GPUs are shared
	-- the candidates after the prefix, in order (the backfill's input)
	c_ids bigint[];
	c_queues text[];
	c_cpus real[];
	c_mem bigint[];
	c_gpus int[];
	c_starving boolean[];
	c_maxr int[];
	c_maxg int[];
	c_maxc real[];
	c_named jsonb[];
	c_shared boolean[];
	v_free_gpus text[] := '{}';    -- GPUs no running attempt holds, in the host's order
	v_share jsonb := '{}';         -- GPUs held by attempts that share them only: id -> how many share it
	v_max_share int := greatest(coalesce((p_capacity ->> 'gpu_shares')::int, 4), 1);
	v_free_named jsonb := '{}';    -- the host's named resources (FERRY_RESOURCES) less what running attempts hold
	v_n int;
	v_free_cpus real := 0;
	v_free_mem bigint := 0;
	v_default_cpus real := coalesce((p_capacity ->> 'default_cpus')::real, 0);
	v_starve interval := make_interval(secs => coalesce((p_capacity ->> 'starve_s')::double precision, 600));
	v_quota jsonb := '{}';         -- quota'd queue -> {"running", "gpus", "cpus"} over the fleet
	v_q jsonb;
	v_qn text;
	v_gids text[];
	v_used_gpus int;
	v_fit boolean;
	-- gangs (a fan-out with gang: true): admitted whole before the other candidates, or not at all
	v_limit int := p_limit;
	g_ids bigint[] := '{}';
	g_queues text[] := '{}';
	g_cpus real[] := '{}';
	g_mem bigint[] := '{}';
	g_gpus text[] := '{}';
	g_named jsonb[] := '{}';
	g record;
	m record;
	v_quotas boolean;
	v_gangs boolean;
BEGIN
	IF p_capacity IS NOT NULL THEN
		PERFORM pg_advisory_xact_lock(hashtext('ferry_claim_host'), hashtext(p_host));
		SELECT (p_capacity ->> 'cpus')::real - coalesce(sum(a.cpus), 0),
		       coalesce((p_capacity ->> 'memory_mb')::bigint, 0) - coalesce(sum(a.memory_mb), 0),
		       ARRAY(SELECT g FROM jsonb_array_elements_text(coalesce(p_capacity -> 'gpus', '[]'))
		                 WITH ORDINALITY AS x(g, i)
		             WHERE g <> ALL (SELECT unnest(a2.gpu_ids) FROM attempts a2
		                             WHERE a2.state = 'running' AND a2.host = p_host AND a2.gpu_ids IS NOT NULL)
		             ORDER BY i),
		       (SELECT coalesce(jsonb_object_agg(x.g, x.n), '{}')
		        FROM (SELECT g, count(*) AS n FROM attempts a3, unnest(a3.gpu_ids) g
		              WHERE a3.state = 'running' AND a3.host = p_host AND a3.gpu_shared GROUP BY g) x)
		INTO v_free_cpus, v_free_mem, v_free_gpus, v_share
		FROM attempts a WHERE a.state = 'running' AND a.host = p_host;
		IF p_capacity ? 'resources' THEN
			SELECT coalesce(jsonb_object_agg(r.key, r.value::bigint - coalesce(u.n, 0)), '{}') INTO v_free_named
			FROM jsonb_each_text(p_capacity -> 'resources') r
			LEFT JOIN (SELECT e.key, sum(e.value::bigint) AS n FROM attempts a, jsonb_each_text(a.named) e
			           WHERE a.state = 'running' AND a.host = p_host AND a.named IS NOT NULL GROUP BY e.key) u
			       ON u.key = r.key;
		END IF;
	END IF;
	-- whether any queue has a quota and any gang waits: one probe for the two loops below, which
	-- most claims skip (each loop's query cost a statement's setup at every claim)
	SELECT EXISTS (SELECT 1 FROM queues qu
	               WHERE qu.max_running IS NOT NULL OR qu.max_gpus IS NOT NULL OR qu.max_cpus IS NOT NULL),
	       p_run IS NULL AND p_step IS NULL AND EXISTS (SELECT 1 FROM step_queue q WHERE q.gang IS NOT NULL AND NOT q.dev)
	INTO v_quotas, v_gangs;
	-- the quota'd queues' use over the fleet, read under their locks (two hosts never pass one quota)
	IF v_quotas THEN
		FOR v_qn IN SELECT qu.name FROM queues qu
		            WHERE qu.max_running IS NOT NULL OR qu.max_gpus IS NOT NULL OR qu.max_cpus IS NOT NULL ORDER BY qu.name LOOP
			PERFORM pg_advisory_xact_lock(hashtext('ferry_claim_queue'), hashtext(v_qn));
			SELECT jsonb_build_object('running', count(*), 'gpus', coalesce(sum(cardinality(a.gpu_ids)), 0),
			                          'cpus', coalesce(sum(a.cpus), 0))
			INTO v_q FROM attempts a WHERE a.state = 'running' AND a.queue = v_qn;
			v_quota := v_quota || jsonb_build_object(v_qn, v_q);
		END LOOP;
	END IF;

	-- each gang whose members are all ready (its first start: a retried member comes back alone,
	-- without its gang) and that fits as a whole, in the order it became ready
	IF v_gangs THEN
		FOR g IN SELECT q.gang, min(q.step_id) AS first FROM step_queue q
		         WHERE q.gang IS NOT NULL AND NOT q.dev GROUP BY q.gang ORDER BY 2 LOOP
			SELECT count(*) AS n, sum(coalesce(x.cpus, v_default_cpus)) AS cpus, sum(x.memory_mb) AS mem,
			       sum(x.gpus) AS gpus, min(x.queue) AS queue, array_agg(x.step_id ORDER BY x.step_id) AS ids,
			       array_agg(coalesce(x.cpus, v_default_cpus) ORDER BY x.step_id) AS cpu_of,
			       array_agg(x.memory_mb ORDER BY x.step_id) AS mem_of, array_agg(x.gpus ORDER BY x.step_id) AS gpu_of,
			       (SELECT f.total FROM fanouts f WHERE f.step_id = g.gang) AS total,
			       (array_agg(x.named))[1] AS named,
			       (SELECT row_to_json(qu)::jsonb FROM queues qu WHERE qu.name = min(x.queue)) AS qrow
			INTO m
			FROM (SELECT q.* FROM step_queue q
			      WHERE q.gang = g.gang AND (q.not_before IS NULL OR q.not_before <= now())
			      ORDER BY q.step_id FOR UPDATE SKIP LOCKED) x;
			CONTINUE WHEN m.n < m.total OR m.n > v_limit;
			v_q := v_quota -> m.queue;
			CONTINUE WHEN v_q IS NOT NULL AND (
				(m.qrow ->> 'max_running' IS NOT NULL AND (v_q ->> 'running')::int + m.n > (m.qrow ->> 'max_running')::int)
				OR (m.qrow ->> 'max_gpus' IS NOT NULL AND (v_q ->> 'gpus')::int + m.gpus > (m.qrow ->> 'max_gpus')::int)
				OR (m.qrow ->> 'max_cpus' IS NOT NULL AND (v_q ->> 'cpus')::real + m.cpus > (m.qrow ->> 'max_cpus')::real + 1e-6));
			-- (a gang's items ask alike, their fan-out's request; shared GPUs are given to a gang as its own)
			CONTINUE WHEN p_capacity IS NOT NULL AND (m.cpus > v_free_cpus + 1e-6
			                                          OR (m.mem > 0 AND m.mem > v_free_mem)
			                                          OR m.gpus > cardinality(v_free_gpus)
			                                          OR (m.named IS NOT NULL AND NOT ferry_named_fit(m.named, m.n::int, v_free_named)));
			FOR i IN 1 .. m.n LOOP
				g_ids := g_ids || m.ids[i];
				g_queues := g_queues || m.queue;
				g_cpus := g_cpus || CASE WHEN p_capacity IS NULL THEN 0 ELSE m.cpu_of[i] END;
				g_mem := g_mem || CASE WHEN p_capacity IS NULL THEN 0 ELSE m.mem_of[i] END;
				g_named := g_named || CASE WHEN p_capacity IS NULL THEN NULL ELSE m.named END;
				IF p_capacity IS NOT NULL AND m.gpu_of[i] > 0 THEN
					g_gpus := g_gpus || array_to_string(v_free_gpus[1 : m.gpu_of[i]], ',');
					v_free_gpus := v_free_gpus[m.gpu_of[i] + 1 :];
				ELSE
					g_gpus := g_gpus || NULL::text;
				END IF;
			END LOOP;
			IF p_capacity IS NOT NULL THEN
				v_free_cpus := v_free_cpus - m.cpus;
				v_free_mem := v_free_mem - m.mem;
				IF m.named IS NOT NULL THEN
					v_free_named := ferry_named_take(v_free_named, m.named, m.n::int);
				END IF;
			END IF;
			IF v_q IS NOT NULL THEN
				v_quota := jsonb_set(v_quota, ARRAY[m.queue], jsonb_build_object(
					'running', (v_q ->> 'running')::int + m.n, 'gpus', (v_q ->> 'gpus')::int + m.gpus,
					'cpus', (v_q ->> 'cpus')::real + m.cpus));
			END IF;
			v_limit := v_limit - m.n;
		END LOOP;
	END IF;

	-- the prefix that fits as a whole, and the candidates after it
	WITH c AS (
		SELECT c.*, (p_capacity IS NULL OR (c.cum_cpus <= v_free_cpus + 1e-6
		                                    AND (c.cum_mem = 0 OR c.cum_mem <= v_free_mem)
		                                    AND c.cum_gpus <= cardinality(v_free_gpus)))
		            AND (c.max_running IS NULL OR (v_quota -> c.queue ->> 'running')::int + c.q_n <= c.max_running)
		            AND (c.max_gpus IS NULL OR (v_quota -> c.queue ->> 'gpus')::int + c.q_gpus <= c.max_gpus)
		            AND (c.max_cpus IS NULL OR (v_quota -> c.queue ->> 'cpus')::real + c.q_cpus <= c.max_cpus + 1e-6)
		            -- named resources and shared GPUs are taken one step at a time, in the loop below
		            AND (p_capacity IS NULL OR (c.named IS NULL AND NOT c.gpu_shared))
		            AS fits
		FROM ferry_claim_candidates(v_limit, p_run, p_step, v_starve, v_default_cpus) c
	), k AS (
		SELECT least(coalesce(min(c.pos) FILTER (WHERE NOT c.fits) - 1, v_limit), v_limit) AS k FROM c
	)
	SELECT array_agg(c.step_id) FILTER (WHERE c.pos <= k.k),
	       array_agg(c.queue) FILTER (WHERE c.pos <= k.k),
	       array_agg(CASE WHEN p_capacity IS NULL THEN 0 ELSE c.cpus END) FILTER (WHERE c.pos <= k.k),
	       array_agg(CASE WHEN p_capacity IS NULL THEN 0 ELSE c.memory_mb END) FILTER (WHERE c.pos <= k.k),
	       array_agg(CASE WHEN p_capacity IS NOT NULL AND c.gpus > 0
	                      THEN array_to_string(v_free_gpus[c.cum_gpus - c.gpus + 1 : c.cum_gpus], ',') END
	                ) FILTER (WHERE c.pos <= k.k),
	       array_agg(c.step_id) FILTER (WHERE c.pos > k.k),
	       array_agg(c.queue) FILTER (WHERE c.pos > k.k),
	       array_agg(c.cpus) FILTER (WHERE c.pos > k.k),
	       array_agg(c.memory_mb) FILTER (WHERE c.pos > k.k),
	       array_agg(c.gpus) FILTER (WHERE c.pos > k.k),
	       array_agg(c.starving) FILTER (WHERE c.pos > k.k),
	       array_agg(c.max_running) FILTER (WHERE c.pos > k.k),
	       array_agg(c.max_gpus) FILTER (WHERE c.pos > k.k),
	       array_agg(c.max_cpus) FILTER (WHERE c.pos > k.k),
	       array_agg(c.named) FILTER (WHERE c.pos > k.k),
	       array_agg(c.gpu_shared) FILTER (WHERE c.pos > k.k)
	INTO v_ids, v_queues, v_cpus_of, v_mem_of, v_gpus_of,
	     c_ids, c_queues, c_cpus, c_mem, c_gpus, c_starving, c_maxr, c_maxg, c_maxc, c_named, c_shared
	-- the aggregates take the rows in c's order (the candidates' pos): no sort of their own
	FROM (SELECT c.* FROM c ORDER BY c.pos) c, k GROUP BY k.k;
	v_ids := coalesce(v_ids, '{}');
	v_queues := coalesce(v_queues, '{}');
	v_cpus_of := coalesce(v_cpus_of, '{}');
	v_mem_of := coalesce(v_mem_of, '{}');
	v_gpus_of := coalesce(v_gpus_of, '{}');
	v_named_of := array_fill(NULL::jsonb, ARRAY[cardinality(v_ids)]);
	v_shared_of := array_fill(false, ARRAY[cardinality(v_ids)]);

	-- backfill: from the first step after the prefix, each that fits what is left (one that does not
	-- fit and is starving keeps its room: nothing after it starts)
	IF cardinality(c_ids) > 0 AND cardinality(v_ids) < v_limit THEN
		IF p_capacity IS NOT NULL THEN
			v_used_gpus := 0;
			FOR i IN 1 .. cardinality(v_ids) LOOP
				v_free_cpus := v_free_cpus - v_cpus_of[i];
				v_free_mem := v_free_mem - v_mem_of[i];
				v_used_gpus := v_used_gpus + coalesce(cardinality(string_to_array(v_gpus_of[i], ',')), 0);
			END LOOP;
			v_free_gpus := v_free_gpus[v_used_gpus + 1 :];
			-- the common case of a full host (every slot taken, the rest asking as much): the smallest
			-- request after the prefix does not fit what is left, so none does, and nothing loops
			IF (SELECT min(x) FROM unnest(c_cpus) x) > v_free_cpus + 1e-6
			   OR ((SELECT min(x) FROM unnest(c_gpus) x) > cardinality(v_free_gpus) AND NOT true = ANY (c_shared))
			   OR (SELECT min(x) FROM unnest(c_mem) x) > greatest(v_free_mem, 0) THEN
				c_ids := '{}';
			END IF;
		END IF;
		IF v_quota <> '{}' THEN
			FOR i IN 1 .. cardinality(v_ids) LOOP
				IF v_quota ? v_queues[i] THEN
					v_q := v_quota -> v_queues[i];
					v_quota := jsonb_set(v_quota, ARRAY[v_queues[i]], jsonb_build_object(
						'running', (v_q ->> 'running')::int + 1,
						'gpus', (v_q ->> 'gpus')::int + coalesce(cardinality(string_to_array(v_gpus_of[i], ',')), 0),
						'cpus', (v_q ->> 'cpus')::real + v_cpus_of[i]));
				END IF;
			END LOOP;
		END IF;
		FOR i IN 1 .. coalesce(cardinality(c_ids), 0) LOOP
			EXIT WHEN cardinality(v_ids) >= v_limit;
			v_q := v_quota -> c_queues[i];
			v_fit := (v_q IS NULL OR ((c_maxr[i] IS NULL OR (v_q ->> 'running')::int + 1 <= c_maxr[i])
			                          AND (c_maxg[i] IS NULL OR (v_q ->> 'gpus')::int + c_gpus[i] <= c_maxg[i])
			                          AND (c_maxc[i] IS NULL OR (v_q ->> 'cpus')::real + c_cpus[i] <= c_maxc[i] + 1e-6)))
			         AND (p_capacity IS NULL OR (c_cpus[i] <= v_free_cpus + 1e-6
			                                     AND (c_mem[i] = 0 OR c_mem[i] <= v_free_mem)
			                                     AND (c_named[i] IS NULL OR ferry_named_fit(c_named[i], 1, v_free_named))
			                                     AND c_gpus[i] <= cardinality(v_free_gpus) + CASE WHEN c_shared[i] THEN
			                                         (SELECT count(*) FROM jsonb_each_text(v_share) x
			                                          WHERE x.value::int < v_max_share)::int ELSE 0 END));
			IF NOT v_fit THEN
				EXIT WHEN c_starving[i];
				CONTINUE;
			END IF;
			v_gids := NULL;
			IF p_capacity IS NOT NULL THEN
				v_free_cpus := v_free_cpus - c_cpus[i];
				v_free_mem := v_free_mem - c_mem[i];
				IF c_gpus[i] > 0 AND c_shared[i] THEN
					-- shared: the GPUs shared by fewest first, then free ones (a free GPU is kept
					-- whole for a request of its own while a shared one has room)
					v_gids := ARRAY(SELECT x.key FROM jsonb_each_text(v_share) x WHERE x.value::int < v_max_share
					                ORDER BY x.value::int, x.key LIMIT c_gpus[i]);
					v_n := c_gpus[i] - cardinality(v_gids);
					IF v_n > 0 THEN
						v_gids := v_gids || v_free_gpus[1 : v_n];
						v_free_gpus := v_free_gpus[v_n + 1 :];
					END IF;
					FOR j IN 1 .. cardinality(v_gids) LOOP
						v_share := jsonb_set(v_share, ARRAY[v_gids[j]],
						                     to_jsonb(coalesce((v_share ->> v_gids[j])::int, 0) + 1));
					END LOOP;
				ELSIF c_gpus[i] > 0 THEN
					v_gids := v_free_gpus[1 : c_gpus[i]];
					v_free_gpus := v_free_gpus[c_gpus[i] + 1 :];
				END IF;
				IF c_named[i] IS NOT NULL THEN
					v_free_named := ferry_named_take(v_free_named, c_named[i], 1);
				END IF;
			END IF;
			IF v_q IS NOT NULL THEN
				v_quota := jsonb_set(v_quota, ARRAY[c_queues[i]], jsonb_build_object(
					'running', (v_q ->> 'running')::int + 1, 'gpus', (v_q ->> 'gpus')::int + c_gpus[i],
					'cpus', (v_q ->> 'cpus')::real + c_cpus[i]));
			END IF;
			v_ids := v_ids || c_ids[i];
			v_queues := v_queues || c_queues[i];
			v_cpus_of := v_cpus_of || CASE WHEN p_capacity IS NULL THEN 0 ELSE c_cpus[i] END;
			v_mem_of := v_mem_of || CASE WHEN p_capacity IS NULL THEN 0 ELSE c_mem[i] END;
			v_gpus_of := v_gpus_of || array_to_string(v_gids, ',');
			v_named_of := v_named_of || CASE WHEN p_capacity IS NULL THEN NULL ELSE c_named[i] END;
			v_shared_of := v_shared_of || (p_capacity IS NOT NULL AND c_shared[i] AND v_gids IS NOT NULL);
		END LOOP;
	END IF;
	v_ids := g_ids || v_ids;
	v_queues := g_queues || v_queues;
	v_cpus_of := g_cpus || v_cpus_of;
	v_mem_of := g_mem || v_mem_of;
	v_gpus_of := g_gpus || v_gpus_of;
	v_named_of := g_named || v_named_of;
	v_shared_of := array_fill(false, ARRAY[cardinality(g_ids)]) || v_shared_of;
	IF cardinality(v_ids) = 0 THEN
		RETURN;
	END IF;

	RETURN QUERY
	WITH c AS (
		SELECT * FROM unnest(v_ids, v_queues, v_cpus_of, v_mem_of, v_gpus_of, v_named_of, v_shared_of)
		              AS t(id, queue, cpus, memory_mb, gpus, named, gpu_shared)
	), dq AS (
		DELETE FROM step_queue q USING c WHERE q.step_id = c.id
	), u AS (
		UPDATE steps s SET state = 'running', attempts = s.attempts + 1, tries = s.tries + 1,
		       started_at = now(), finished_at = NULL, not_before = NULL, exit_code = NULL, reason = NULL
		FROM c WHERE s.id = c.id AND s.state = 'ready'
		RETURNING s.id, s.run_id, s.name, s.attempts, s.kind, s.timeout_ms, s.spec, s.parent_id
	), a AS (
		INSERT INTO attempts (step_id, attempt, state, owner, host, lease_until, queue, cpus, memory_mb, gpu_ids,
		                      named, gpu_shared)
		SELECT u.id, u.attempts, 'running', p_owner, p_host, now() + p_lease_ms * interval '1 millisecond',
		       c.queue, c.cpus, c.memory_mb, string_to_array(nullif(c.gpus, ''), ','), c.named, c.gpu_shared
		FROM u JOIN c ON c.id = u.id
	), r AS (
		UPDATE runs SET state = 'running', started_at = coalesce(runs.started_at, now())
		WHERE runs.id IN (SELECT u.run_id FROM u) AND runs.state = 'pending'
	), e AS (
		-- a fan-out's items do not log each start (their fan-out's step tells how many run)
		INSERT INTO events (run_id, step, attempt, actor, kind)
		SELECT u.run_id, u.name, u.attempts, p_owner, 'step.running' FROM u WHERE u.parent_id IS NULL
	), pt AS (
		-- a fan-out's child is handed its parent's spec with its own item over it, less what was the
		-- parent's alone: its list, its limits, its when: (judged once, before the fan-out); the
		-- parent's is trimmed once for all its items claimed here, not once an item
		SELECT p.id, p.spec - ARRAY['foreach', 'max_parallel', 'min_success', 'sweep', 'select', 'when',
		                            'when_model'] AS spec
		FROM steps p WHERE p.id IN (SELECT u.parent_id FROM u)
	), cl AS (
		SELECT u.*, CASE WHEN u.parent_id IS NULL THEN u.spec ELSE pt.spec || u.spec END AS mspec
		FROM u LEFT JOIN pt ON pt.id = u.parent_id
	), anc AS (
		-- the succeeded ancestors' kinds, outputs and metrics, read once for each list of names (a
		-- fan-out's items share their parent's: 256 items of a batch read them once, not 256 times)
		SELECT w.run_id, w.names, w.item, coalesce((
		           SELECT jsonb_object_agg(x.name, jsonb_build_object('kind', x.kind, 'metrics', x.metrics,
		               'best', x.outputs -> 'best',
		               -- a fan-out's outputs: its items' outputs, in item order (null for an item that
		               -- failed); not for another fan-out's items, each of which would read the whole list again
		               'outputs', CASE WHEN x.spec ? 'foreach' AND NOT w.item THEN (
		                   SELECT jsonb_agg(c.outputs ORDER BY c.item_index) FROM steps c WHERE c.parent_id = x.id)
		                   WHEN x.spec ? 'foreach' THEN NULL
		                   ELSE x.outputs END))
		           -- the ancestors by (run_id, name) = ANY (names): an index lookup each, whatever the
		           -- run's size (a semi-join with the names scanned the run's steps, per claimed step)
		           FROM steps x
		           WHERE x.run_id = w.run_id AND x.name = ANY (ARRAY(SELECT jsonb_array_elements_text(w.names)))
		             AND x.state = 'succeeded' AND x.parent_id IS NULL), '{}') AS inputs
		FROM (SELECT DISTINCT cl.run_id, cl.mspec -> 'ancestors' AS names, cl.parent_id IS NOT NULL AS item
		      FROM cl WHERE cl.mspec ? 'ancestors') w
	)
	SELECT cl.id, cl.run_id, cl.name, cl.attempts, cl.kind, cl.timeout_ms, cl.mspec, runs.workdir, anc.inputs,
	       CASE WHEN cl.mspec ? 'ancestors' THEN jsonb_build_object('params', runs.params,
	           'workflow', runs.workflow_name, 'workflow_hash', runs.workflow_hash,
	           'no_cache', runs.no_cache, 'dev', runs.trigger = 'dev', 'body_state', runs.body_state) END,
	       nullif(c.gpus, '')
	FROM cl JOIN c ON c.id = cl.id JOIN runs ON runs.id = cl.run_id
	LEFT JOIN anc ON anc.run_id = cl.run_id AND anc.names = cl.mspec -> 'ancestors'
	             AND anc.item = (cl.parent_id IS NOT NULL)
	ORDER BY cl.id;
END;
$$;

-- Where the jobs of claimed attempts run, recorded once they started
-- (store_attempts_started): each attempt's executor, handle and directory,
-- fenced on its owner and on still running. A function for its plan: sent
-- as a statement, the join of five arrays was planned at every start (0.17
-- ms of a 0.26 ms statement, bench_queues with BENCH_PG_STATEMENTS).
CREATE OR REPLACE FUNCTION ferry_started(p_owner text, p_step bigint[], p_attempt int[], p_executor text[],
                                         p_handle jsonb[], p_dir text[])
RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
	UPDATE attempts a SET executor = coalesce(t.executor, a.executor),
	       handle = coalesce(t.handle, a.handle), dir = coalesce(t.dir, a.dir)
	FROM unnest(p_step, p_attempt, p_executor, p_handle, p_dir) AS t(step_id, attempt, executor, handle, dir)
	WHERE a.step_id = t.step_id AND a.attempt = t.attempt AND a.owner = p_owner AND a.state = 'running';
END;
$$;
