-- Finishing attempts: the engine's one call that closes a batch of
-- attempts and moves their steps and runs on.
--
-- ferry_finish closes the batch in one transaction: each attempt is fenced
-- on its number and on still running; its step becomes succeeded, ready
-- again (retry with exponential backoff, equal jitter, capped), waiting,
-- failed or stopped; what follows is ferry_release's. One NOTIFY at most.
-- Outcomes: succeeded, failed, stopped, lost (the owner vanished:
-- re-dispatched without counting as a try), waiting (a label step that
-- opened its task: the step waits for a person, with a deadline when it
-- has a timeout), restart (the job monitor killed a hung job to run it
-- again: the attempt failed, the step is ready at once without counting
-- a try; monitor.c caps the restarts), skipped (the step's when: did not
-- hold or its gate failed with on_fail: skip: the step is skipped, and so
-- is what follows it, ferry_release_skipped), expanded (a foreach step
-- wrote its children: it runs on through them, fanout.sql). p_final: a failure retrying cannot fix (a failed gate, a
-- malformed metrics.json): no retry. Also records what a step produced:
-- outputs, metrics (merged into the run's too), gate results, the
-- step-cache key of a job worth caching and, for a step finished from
-- cache, where from, and, for an attempt that ended before its start was
-- recorded on its own (a short local job: engine.c, "late records"), that
-- record (p_executor, p_handle, p_dir; NULL where written already).
-- Returns how many steps became ready now and the earliest retry time.

CREATE OR REPLACE FUNCTION ferry_finish(p_owner text, p_step bigint[], p_attempt int[], p_outcome text[],
                             p_exit int[], p_signal int[], p_reason text[], p_final boolean[],
                             p_outputs jsonb[], p_metrics jsonb[], p_gate jsonb[],
                             p_cache_key text[], p_cached_from jsonb[], p_executor text[] DEFAULT NULL,
                             p_handle jsonb[] DEFAULT NULL, p_dir text[] DEFAULT NULL)
RETURNS TABLE (ready_now int, next_retry timestamptz)
-- no sequential scans: every row it touches is found by a key, and the step tables' statistics
-- mislead a generic plan (a fan-out's items share one parent_id, so an equality on it looks like
-- the whole table; attempts was small when the plan was made). With them, each batch of a
-- fan-out read the whole of steps (the stopped fan-out's late items) and of attempts. No JIT: a
-- scan left without an index would cost 1e10 so, and be compiled at every execution (ferry_claim).
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
	v_ok bigint[];
	v_failed bigint[];
	v_closed bigint[];
	v_skipped bigint[];
	v_parents bigint[];
	v_pn int[];
	v_pok int[];
	v_expanded bigint[];
	v_waits bigint[];
	v_cache bigint[];
	v_stopped bigint[];
	v_requeue bigint[];
	v_metrics bigint[];
	v_retry timestamptz;
	v_ready int := 0;
	v_n int;
BEGIN
	WITH inp AS (
		SELECT * FROM unnest(p_step, p_attempt, p_outcome, p_exit, p_signal, p_reason, p_final,
		                     p_outputs, p_metrics, p_gate, p_cache_key, p_cached_from, p_executor, p_handle, p_dir)
		       AS t(step_id, attempt, outcome, exit_code, signal, reason, final,
		            outputs, metrics, gate, cache_key, cached_from, executor, handle, dir)
	), a AS (
		UPDATE attempts a SET state = CASE WHEN inp.outcome IN ('succeeded', 'stopped', 'lost') THEN inp.outcome
		                                   WHEN inp.outcome IN ('waiting', 'skipped', 'expanded') THEN 'succeeded'
		                                   ELSE 'failed' END,
		       exit_code = inp.exit_code, signal = inp.signal, reason = inp.reason, finished_at = now(),
		       executor = coalesce(inp.executor, a.executor), handle = coalesce(inp.handle, a.handle),
		       dir = coalesce(inp.dir, a.dir)
		FROM inp
		WHERE a.step_id = inp.step_id AND a.attempt = inp.attempt AND a.state = 'running'
		RETURNING a.step_id, a.attempt, inp.outcome, inp.exit_code, inp.reason, inp.final,
		          inp.outputs, inp.metrics, inp.gate, inp.cache_key, inp.cached_from
	), s AS (
		UPDATE steps s SET
		       state = CASE
		               WHEN a.outcome = 'succeeded' THEN 'succeeded'
		               WHEN r.state = 'stopping' OR a.outcome = 'stopped' THEN 'stopped'
		               WHEN a.outcome = 'skipped' THEN 'skipped'
		               WHEN a.outcome = 'expanded' THEN 'running'
		               WHEN a.outcome = 'waiting' THEN 'waiting'
		               WHEN a.outcome IN ('lost', 'restart') OR (NOT coalesce(a.final, false) AND s.tries <= s.retry_limit) THEN 'ready'
		               ELSE 'failed' END,
		       tries = CASE WHEN a.outcome IN ('lost', 'restart') THEN s.tries - 1 ELSE s.tries END,
		       not_before = CASE
		               WHEN a.outcome IN ('succeeded', 'stopped', 'lost', 'waiting', 'restart', 'skipped', 'expanded')
		                    OR r.state = 'stopping'
		                    OR coalesce(a.final, false) OR s.tries > s.retry_limit THEN NULL
		               ELSE now() + least(s.max_backoff_ms::float8,
		                                  s.backoff_ms * power(2, s.tries - 1))
		                            * (0.5 + random() * 0.5) * interval '1 millisecond' END,
		       exit_code = a.exit_code, reason = a.reason,
		       outputs = a.outputs, metrics = a.metrics, gate = a.gate, cached_from = a.cached_from,
		       finished_at = CASE WHEN a.outcome IN ('waiting', 'expanded') AND r.state <> 'stopping' THEN NULL
		                          ELSE now() END
		FROM a, runs r
		WHERE s.id = a.step_id AND s.attempts = a.attempt AND s.state = 'running' AND r.id = s.run_id
		RETURNING s.id, s.run_id, s.dev, s.name, s.state, s.not_before, s.timeout_ms,
		          a.attempt, a.reason, a.exit_code, a.outputs, a.metrics, a.gate, a.cache_key, a.cached_from,
		          s.parent_id, a.outcome = 'expanded' AND s.state = 'running' AS expanded
	), closed_children AS (
		SELECT s.parent_id AS p, count(*)::int AS n, (count(*) FILTER (WHERE s.state = 'succeeded'))::int AS ok
		FROM s WHERE s.parent_id IS NOT NULL AND s.state IN ('succeeded', 'failed', 'skipped', 'stopped')
		GROUP BY s.parent_id
	), e AS (
		INSERT INTO events (run_id, step, attempt, actor, kind, detail)
		SELECT s.run_id, s.name, s.attempt, p_owner,
		       CASE WHEN s.state = 'ready' THEN 'step.retrying' WHEN s.expanded THEN 'step.expanded'
		            ELSE 'step.' || s.state END,
		       jsonb_strip_nulls(jsonb_build_object('exit_code', s.exit_code, 'reason', s.reason,
		                                            'not_before', s.not_before, 'cached_from', s.cached_from,
		                                            'outputs', CASE WHEN s.state = 'waiting' THEN s.outputs END))
		FROM s WHERE s.parent_id IS NULL OR s.state <> 'succeeded' -- an item's success: its fan-out counts it
	)
	-- children (parent_id) close into their fan-out's counters, not into the run's open steps
	SELECT array_agg(s.id) FILTER (WHERE s.state = 'succeeded' AND s.parent_id IS NULL),
	       array_agg(s.id) FILTER (WHERE s.state IN ('failed', 'stopped') AND s.parent_id IS NULL),
	       array_agg(s.run_id) FILTER (WHERE s.state NOT IN ('ready', 'waiting', 'running') AND s.parent_id IS NULL),
	       array_agg(s.id) FILTER (WHERE s.state = 'skipped' AND s.parent_id IS NULL),
	       min(s.not_before),
	       count(*) FILTER (WHERE s.state = 'ready' AND s.not_before IS NULL),
	       (SELECT array_agg(g.p ORDER BY g.p) FROM closed_children g),
	       (SELECT array_agg(g.n ORDER BY g.p) FROM closed_children g),
	       (SELECT array_agg(g.ok ORDER BY g.p) FROM closed_children g),
	       array_agg(s.id) FILTER (WHERE s.expanded),
	       array_agg(s.id) FILTER (WHERE s.state = 'waiting' AND s.timeout_ms > 0),
	       array_agg(s.id) FILTER (WHERE s.state = 'succeeded' AND s.cache_key IS NOT NULL AND s.cached_from IS NULL),
	       array_agg(s.id) FILTER (WHERE s.state = 'stopped'),
	       array_agg(s.id) FILTER (WHERE s.state = 'ready'),
	       -- a fan-out's children keep their metrics to themselves: the run's row is not written per item
	       array_agg(s.id) FILTER (WHERE s.metrics IS NOT NULL AND s.parent_id IS NULL)
	INTO v_ok, v_failed, v_closed, v_skipped, v_retry, v_n, v_parents, v_pn, v_pok, v_expanded,
	     v_waits, v_cache, v_stopped, v_requeue, v_metrics
	FROM s;

	-- what only some batches need, each its own statement when they do (as parts of the one above,
	-- each cost its setup in every batch: a chain's finish 0.69 -> 0.55 ms without them; the retries'
	-- queue entries and the run's metrics, and in ferry_release the runs' states: 0.485 -> 0.437 ms)
	IF v_requeue IS NOT NULL THEN
		-- a retry goes back to the queue, asking what its spec (its fan-out parent's for an item) asks
		INSERT INTO step_queue (step_id, run_id, dev, not_before, queue, priority, cpus, memory_mb, gpus, named, gpu_shared)
		SELECT st.id, st.run_id, st.dev, st.not_before, ferry_req_queue(coalesce(p.spec, st.spec)), ferry_req_priority(coalesce(p.spec, st.spec)), ferry_req_cpus(coalesce(p.spec, st.spec)), ferry_req_memory_mb(coalesce(p.spec, st.spec)), ferry_req_gpus(coalesce(p.spec, st.spec)), ferry_req_named(coalesce(p.spec, st.spec)), ferry_req_gpu_shared(coalesce(p.spec, st.spec))
		FROM steps st LEFT JOIN steps p ON p.id = st.parent_id WHERE st.id = ANY (v_requeue);
	END IF;
	IF v_metrics IS NOT NULL THEN
		-- the steps' metrics merged into their run's
		UPDATE runs r SET metrics = coalesce(r.metrics, '{}'::jsonb) || m.obj
		FROM (SELECT s.run_id, jsonb_object_agg(s.name, s.metrics) AS obj FROM steps s
		      WHERE s.id = ANY (v_metrics) GROUP BY s.run_id) m
		WHERE r.id = m.run_id;
	END IF;
	IF v_waits IS NOT NULL THEN
		-- a label or gate step that waits for a person, with a deadline
		INSERT INTO step_waits (step_id, run_id, deadline, on_timeout)
		SELECT s.id, s.run_id, now() + s.timeout_ms * interval '1 millisecond', coalesce(s.spec ->> 'on_timeout', 'fail')
		FROM steps s WHERE s.id = ANY (v_waits)
		ON CONFLICT (step_id) DO UPDATE SET deadline = excluded.deadline;
	END IF;
	IF v_cache IS NOT NULL THEN
		-- one entry a key: two steps of one definition may finish in one batch
		INSERT INTO step_cache (key, run_id, step, attempt, outputs, metrics, gate)
		SELECT DISTINCT ON (k.key) k.key, s.run_id, s.name, s.attempts, s.outputs, s.metrics, s.gate
		FROM unnest(p_step, p_cache_key) AS k(id, key) JOIN steps s ON s.id = k.id
		WHERE s.id = ANY (v_cache) AND k.key IS NOT NULL
		ORDER BY k.key, s.id
		ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, step = excluded.step,
		       attempt = excluded.attempt, outputs = excluded.outputs, metrics = excluded.metrics,
		       gate = excluded.gate, created_at = now();
	END IF;
	IF v_expanded IS NOT NULL THEN
		-- an expanded fan-out: its counters, from its children as they are (a retry keeps those that succeeded)
		INSERT INTO fanouts (step_id, run_id, total, max_parallel, min_success, done, succeeded)
		SELECT s.id, s.run_id, (s.outputs ->> 'items')::int, coalesce((s.spec ->> 'max_parallel')::int, 0),
		       coalesce((s.spec ->> 'min_success')::float8, 1),
		       (SELECT count(*) FROM steps c WHERE c.parent_id = s.id AND c.item_index < (s.outputs ->> 'items')::int
		        AND c.state IN ('succeeded', 'failed', 'skipped', 'stopped')),
		       (SELECT count(*) FROM steps c WHERE c.parent_id = s.id AND c.item_index < (s.outputs ->> 'items')::int
		        AND c.state = 'succeeded')
		FROM steps s WHERE s.id = ANY (v_expanded)
		ON CONFLICT (step_id) DO UPDATE SET total = excluded.total, max_parallel = excluded.max_parallel,
		       min_success = excluded.min_success, done = excluded.done, succeeded = excluded.succeeded,
		       next_index = 0, active = 0;
		-- items past the end of a list that got shorter (a retry from above): no longer the fan-out's
		DELETE FROM steps c USING steps s WHERE s.id = ANY (v_expanded) AND c.parent_id = s.id
		AND c.item_index >= (s.outputs ->> 'items')::int;
	END IF;
	IF v_stopped IS NOT NULL THEN
		-- a fan-out stopped while its items were being written: those written after the stop stop too
		-- (its items looked up by the stopped fan-outs' ids: as a join, the plan read every item of
		-- the table for each batch of finished items, stopped or not)
		UPDATE steps c SET state = 'stopped', finished_at = now(), reason = 'run stopped'
		WHERE c.parent_id = ANY (v_stopped) AND c.state = 'blocked';
	END IF;
	IF v_expanded IS NOT NULL THEN
		-- the fan-outs just written start: their first children are released (or, all done already, they end)
		v_parents := coalesce(v_parents, '{}') || v_expanded;
		v_pn := coalesce(v_pn, '{}') || array_fill(0, ARRAY[cardinality(v_expanded)]);
		v_pok := coalesce(v_pok, '{}') || array_fill(0, ARRAY[cardinality(v_expanded)]);
	END IF;
	v_ready := coalesce(v_n, 0);

	v_ready := v_ready + ferry_release(p_owner, v_ok, v_failed, v_closed);
	IF v_skipped IS NOT NULL THEN
		v_ready := v_ready + ferry_release_skipped(p_owner, v_skipped);
	END IF;
	IF v_parents IS NOT NULL THEN
		v_ready := v_ready + ferry_fanout_progress(p_owner, v_parents, v_pn, v_pok);
	END IF;

	IF v_ready > 0 THEN
		PERFORM pg_notify('ferry_ready', '');
	END IF;
	RETURN QUERY SELECT v_ready, v_retry;
END;
$$;

-- The engine's turn after jobs ended: ferry_finish, then ferry_claim for
-- the same owner, in one transaction and one round trip (a chain of short
-- steps paid a commit and a round trip more per step when the two were
-- separate; bench_dispatch --chain). p_limit 0: no claim. p_always: claim
-- even when the finish made nothing ready (a job's end freed room for a
-- step that waited for it); else only when it did. One row per claimed
-- step (ferry_claim's columns; the first three NULL), then one row whose
-- step_id is NULL: the finish's ready_now and next_retry and the claim's
-- time in microseconds (NULL when no claim was made). A claim that fails
-- takes the finish back with it: the engine keeps the results and writes
-- them again.
CREATE OR REPLACE FUNCTION ferry_finish_claim(p_owner text, p_step bigint[], p_attempt int[], p_outcome text[],
                             p_exit int[], p_signal int[], p_reason text[], p_final boolean[],
                             p_outputs jsonb[], p_metrics jsonb[], p_gate jsonb[],
                             p_cache_key text[], p_cached_from jsonb[],
                             p_host text, p_limit int, p_lease_ms bigint, p_run bigint, p_claim_step bigint,
                             p_capacity jsonb, p_always boolean, p_executor text[] DEFAULT NULL,
                             p_handle jsonb[] DEFAULT NULL, p_dir text[] DEFAULT NULL)
RETURNS TABLE (ready_now int, next_retry timestamptz, claim_us bigint, step_id bigint, run_id bigint, name text, attempt int,
               kind text, timeout_ms bigint, spec jsonb, workdir text, inputs jsonb, run jsonb, gpus text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
	v_ready int;
	v_retry timestamptz;
	v_t0 timestamptz;
	v_us bigint;
BEGIN
	SELECT f.ready_now, f.next_retry INTO v_ready, v_retry
	FROM ferry_finish(p_owner, p_step, p_attempt, p_outcome, p_exit, p_signal, p_reason, p_final,
	                  p_outputs, p_metrics, p_gate, p_cache_key, p_cached_from, p_executor, p_handle, p_dir) f;
	IF p_limit > 0 AND (p_always OR v_ready > 0) THEN
		v_t0 := clock_timestamp();
		RETURN QUERY SELECT NULL::int, NULL::timestamptz, NULL::bigint, c.step_id, c.run_id, c.name, c.attempt, c.kind, c.timeout_ms,
		                    c.spec, c.workdir, c.inputs, c.run, c.gpus
		             FROM ferry_claim(p_owner, p_host, p_limit, p_lease_ms, p_run, p_claim_step, p_capacity) c;
		v_us := (extract(epoch FROM clock_timestamp() - v_t0) * 1e6)::bigint;
	END IF;
	RETURN QUERY SELECT v_ready, v_retry, v_us, NULL::bigint, NULL::bigint, NULL::text, NULL::int, NULL::text,
	                    NULL::bigint, NULL::jsonb, NULL::text, NULL::jsonb, NULL::jsonb, NULL::text;
END;
$$;
