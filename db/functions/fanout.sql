-- Fan-outs: a foreach step's children (migration 0028). The step is
-- claimed like any; its claim writes the children (blocked, in batches,
-- steps/foreach.c) and finishes with outcome expanded (ferry_finish makes
-- its fanouts row and calls ferry_fanout_progress); from then on the step
-- is running until every child is terminal. Children are claimed, retried
-- and finished like steps; ferry_finish hands ferry_fanout_progress how
-- many of each parent's children closed in its batch.

-- ferry_fanout_release: the next blocked children of fan-out p_parent, in
-- item order, become ready (enqueued) up to its max_parallel (every one
-- without); the caller holds the fanouts row. Returns how many.
CREATE OR REPLACE FUNCTION ferry_fanout_release(p_parent bigint) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	f fanouts%ROWTYPE;
	v_free int;
	v_n int := 0;
	v_last int;
BEGIN
	SELECT * INTO f FROM fanouts WHERE step_id = p_parent;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	v_free := CASE WHEN f.max_parallel = 0 THEN f.total ELSE f.max_parallel - f.active END;
	IF v_free <= 0 OR f.next_index >= f.total THEN
		RETURN 0;
	END IF;
	WITH c AS (
		SELECT id, item_index FROM steps
		WHERE parent_id = p_parent AND item_index >= f.next_index AND state = 'blocked'
		ORDER BY item_index LIMIT v_free
	), u AS (
		UPDATE steps s SET state = 'ready' FROM c WHERE s.id = c.id
		RETURNING s.id, s.run_id, s.dev, c.item_index
	), q AS (
		-- an item asks what its fan-out's spec says
		INSERT INTO step_queue (step_id, run_id, dev, queue, priority, cpus, memory_mb, gpus, named, gpu_shared, gang)
		SELECT u.id, u.run_id, u.dev, ferry_req_queue(p.spec), ferry_req_priority(p.spec), ferry_req_cpus(p.spec),
		       ferry_req_memory_mb(p.spec), ferry_req_gpus(p.spec), ferry_req_named(p.spec), ferry_req_gpu_shared(p.spec),
		       CASE WHEN p.spec ->> 'gang' = 'true' THEN p.id END
		FROM u, steps p WHERE p.id = p_parent
	)
	SELECT count(*), max(u.item_index) INTO v_n, v_last FROM u;
	UPDATE fanouts SET active = active + v_n,
	       next_index = CASE WHEN v_n > 0 THEN v_last + 1 ELSE total END
	WHERE step_id = p_parent;
	RETURN v_n;
END;
$$;

-- ferry_fanout_stop_when: a sweep's early stop. When one of fan-out
-- p_parent's succeeded items reported a metric meeting p_rule
-- ({"metric", "op", "value"}, the config's), the items not released yet
-- (index >= p_next) are skipped, saying which item met it, and nothing
-- more is released; the running ones finish. The caller holds the fanouts
-- row. Returns how many were skipped (0 when the rule does not hold yet).
CREATE OR REPLACE FUNCTION ferry_fanout_stop_when(p_parent bigint, p_rule jsonb, p_next int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_metric text := p_rule ->> 'metric';
	v_op text := p_rule ->> 'op';
	v_value float8 := (p_rule ->> 'value')::float8;
	v_hit record;
	v_n int;
BEGIN
	SELECT c.name, (c.metrics ->> v_metric)::float8 AS v INTO v_hit
	FROM steps c
	WHERE c.parent_id = p_parent AND c.state = 'succeeded' AND jsonb_typeof(c.metrics -> v_metric) = 'number'
	  AND CASE v_op WHEN '>=' THEN (c.metrics ->> v_metric)::float8 >= v_value
	                WHEN '>' THEN (c.metrics ->> v_metric)::float8 > v_value
	                WHEN '<=' THEN (c.metrics ->> v_metric)::float8 <= v_value
	                WHEN '<' THEN (c.metrics ->> v_metric)::float8 < v_value
	                WHEN '==' THEN (c.metrics ->> v_metric)::float8 = v_value
	                ELSE (c.metrics ->> v_metric)::float8 <> v_value END
	ORDER BY c.item_index LIMIT 1;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	WITH sk AS (
		UPDATE steps SET state = 'skipped', finished_at = now(),
		       reason = 'stop_when ' || v_metric || ' ' || v_op || ' ' || v_value || ' held for ' || v_hit.name
		                || ' (' || v_metric || ' ' || v_hit.v || ')'
		WHERE parent_id = p_parent AND item_index >= p_next AND state = 'blocked'
		RETURNING 1
	)
	SELECT count(*) INTO v_n FROM sk;
	UPDATE fanouts SET done = done + v_n, next_index = total WHERE step_id = p_parent;
	RETURN v_n;
END;
$$;

-- ferry_fanout_progress: for each parent p_parents[i], p_closed[i] of its
-- children became terminal, p_ok[i] of them succeeded: its counters move
-- (once per batch, whatever its size), the next children are released
-- (not while the run is stopping), and a parent all of whose children are
-- terminal ends: succeeded when at least min_success of the items did,
-- failed otherwise, stopped in a stopping run; a sweep with select:
-- keeps its best item (by the metric its items reported in metrics.json,
-- the lowest item first on a tie) and the leaderboard (the first 1,000)
-- in its outputs, its metrics the best's, and fails when no item
-- reported the metric; what follows is ferry_release's. Returns how many steps were enqueued.
CREATE OR REPLACE FUNCTION ferry_fanout_progress(p_actor text, p_parents bigint[], p_closed int[], p_ok int[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	r record;
	v_ready int := 0;
	v_ok bigint[];
	v_failed bigint[];
	v_closed bigint[];
BEGIN
	FOR r IN SELECT f.step_id, x.n, x.ok, ru.state AS run_state, f.next_index, f.total,
	                p.spec -> 'sweep' -> 'stop_when' AS stop_when
	         FROM unnest(p_parents, p_closed, p_ok) AS x(id, n, ok)
	         JOIN fanouts f ON f.step_id = x.id JOIN runs ru ON ru.id = f.run_id JOIN steps p ON p.id = f.step_id
	         ORDER BY f.step_id FOR UPDATE OF f
	LOOP
		UPDATE fanouts SET done = done + r.n, succeeded = succeeded + r.ok, active = greatest(active - r.n, 0)
		WHERE step_id = r.step_id;
		IF r.stop_when IS NOT NULL AND r.ok > 0 AND r.next_index < r.total THEN
			PERFORM ferry_fanout_stop_when(r.step_id, r.stop_when, r.next_index);
		END IF;
		IF r.run_state <> 'stopping' THEN
			v_ready := v_ready + ferry_fanout_release(r.step_id);
		END IF;
	END LOOP;
	WITH d AS (
		SELECT f.*, p.spec -> 'select' ->> 'metric' AS metric, coalesce(p.spec -> 'select' ->> 'goal', 'max') AS goal,
		       -- the items a sweep's stop_when left unstarted (skipped): not counted against min_success
		       CASE WHEN p.spec -> 'sweep' -> 'stop_when' IS NULL THEN 0
		            ELSE (SELECT count(*) FROM steps c WHERE c.parent_id = f.step_id AND c.state = 'skipped') END AS skipped
		FROM fanouts f JOIN steps p ON p.id = f.step_id
		WHERE f.step_id = ANY (p_parents) AND f.done >= f.total
	), ranked AS (
		-- a sweep with select: its succeeded items that reported the metric, best first (the leaderboard)
		SELECT d.step_id, c.item_index, c.name, c.spec -> 'item' AS item, c.outputs, c.metrics,
		       (c.metrics ->> d.metric)::float8 AS value,
		       row_number() OVER (PARTITION BY d.step_id ORDER BY
		           CASE WHEN d.goal = 'min' THEN (c.metrics ->> d.metric)::float8
		                ELSE -(c.metrics ->> d.metric)::float8 END, c.item_index) AS rank
		FROM d JOIN steps c ON c.parent_id = d.step_id
		WHERE d.metric IS NOT NULL AND c.state = 'succeeded' AND jsonb_typeof(c.metrics -> d.metric) = 'number'
	), sel AS (
		SELECT rk.step_id,
		       (SELECT jsonb_build_object('index', b.item_index, 'name', b.name, 'item', b.item, 'outputs', b.outputs,
		                                  'metrics', b.metrics)
		        FROM ranked b WHERE b.step_id = rk.step_id AND b.rank = 1) AS best,
		       jsonb_agg(jsonb_build_object('rank', rk.rank, 'index', rk.item_index, 'item', rk.item, 'value', rk.value)
		                 ORDER BY rk.rank) FILTER (WHERE rk.rank <= 1000) AS leaderboard
		FROM ranked rk GROUP BY rk.step_id
	), u AS (
		UPDATE steps s SET
		       state = CASE WHEN ru.state = 'stopping' THEN 'stopped'
		                    WHEN d.succeeded < ceil(d.min_success * (d.total - d.skipped) - 1e-9) THEN 'failed'
		                    WHEN d.metric IS NOT NULL AND sel.best IS NULL THEN 'failed'
		                    ELSE 'succeeded' END,
		       reason = d.succeeded || ' of ' || d.total || ' items succeeded'
		                || CASE WHEN d.skipped > 0 THEN ', ' || d.skipped || ' not started (stop_when)' ELSE '' END
		                || CASE WHEN d.min_success < 1
		                        THEN ' (min_success ' || round((d.min_success * 100)::numeric, 2)::float8 || '%)'
		                        ELSE '' END
		                || CASE WHEN d.metric IS NULL THEN ''
		                        WHEN sel.best IS NULL THEN '; no item reported the number ' || d.metric || ' to select by'
		                        ELSE '; best: ' || (sel.best ->> 'name') || ' with ' || d.metric || ' '
		                             || (sel.best -> 'metrics' ->> d.metric) || ' (' || d.goal || ')' END,
		       outputs = jsonb_build_object('items', d.total, 'succeeded', d.succeeded)
		                 || CASE WHEN sel.best IS NULL THEN '{}'::jsonb
		                         ELSE jsonb_build_object('best', sel.best, 'leaderboard', sel.leaderboard) END,
		       metrics = CASE WHEN sel.best IS NULL THEN s.metrics ELSE sel.best -> 'metrics' END,
		       finished_at = now()
		FROM d LEFT JOIN sel ON sel.step_id = d.step_id, runs ru
		WHERE s.id = d.step_id AND s.state = 'running' AND ru.id = s.run_id
		RETURNING s.id, s.run_id, s.name, s.state, s.reason
	), ev AS (
		INSERT INTO events (run_id, step, actor, kind, detail)
		SELECT u.run_id, u.name, p_actor, 'step.' || u.state, jsonb_build_object('reason', u.reason) FROM u
	)
	SELECT array_agg(u.id) FILTER (WHERE u.state = 'succeeded'),
	       array_agg(u.id) FILTER (WHERE u.state IN ('failed', 'stopped')),
	       array_agg(u.run_id)
	INTO v_ok, v_failed, v_closed FROM u;
	IF v_closed IS NOT NULL THEN
		v_ready := v_ready + ferry_release(p_actor, v_ok, v_failed, v_closed);
	END IF;
	RETURN v_ready;
END;
$$;

-- ferry_fanout_recount: the counters of run p_run's fan-outs counted from
-- their children again (after a stop changed many at once), then their
-- progress (ferry_fanout_progress with nothing new). Returns how many
-- steps were enqueued.
CREATE OR REPLACE FUNCTION ferry_fanout_recount(p_actor text, p_run bigint) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	v_parents bigint[];
	v_zero int[];
BEGIN
	WITH c AS (
		SELECT f.step_id,
		       count(*) FILTER (WHERE s.state IN ('succeeded', 'failed', 'skipped', 'stopped')) AS done,
		       count(*) FILTER (WHERE s.state = 'succeeded') AS ok,
		       count(*) FILTER (WHERE s.state IN ('ready', 'running')) AS active
		FROM fanouts f JOIN steps s ON s.parent_id = f.step_id
		WHERE f.run_id = p_run GROUP BY f.step_id
	)
	UPDATE fanouts f SET done = c.done, succeeded = c.ok, active = c.active FROM c WHERE f.step_id = c.step_id;
	SELECT array_agg(step_id), array_agg(0) INTO v_parents, v_zero FROM fanouts WHERE run_id = p_run;
	IF v_parents IS NULL THEN
		RETURN 0;
	END IF;
	RETURN ferry_fanout_progress(p_actor, v_parents, v_zero, v_zero);
END;
$$;
