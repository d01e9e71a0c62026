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
		INSERT INTO step_queue (step_id, run_id, dev) SELECT u.id, u.run_id, u.dev FROM u
	)
	SELECT count(*), max(u.item_index) INTO v_n, v_last FROM u;
	UPDATE fanouts SET active = active + v_n,
	       next_index = CASE WHEN v_n > 0 THEN v_last + 1 ELSE total END
	WHERE step_id = p_parent;
	RETURN v_n;
END;
$$;

-- ferry_fanout_progress: for each parent p_parents[i], p_closed[i] of its
-- children became terminal, p_ok[i] of them succeeded: its counters move
-- (once per batch, whatever its size), the next children are released
-- (not while the run is stopping), and a parent all of whose children are
-- terminal ends: succeeded when at least min_success of the items did,
-- failed otherwise, stopped in a stopping run; what follows is
-- ferry_release's. Returns how many steps were enqueued.
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
	FOR r IN SELECT f.step_id, x.n, x.ok, ru.state AS run_state
	         FROM unnest(p_parents, p_closed, p_ok) AS x(id, n, ok)
	         JOIN fanouts f ON f.step_id = x.id JOIN runs ru ON ru.id = f.run_id
	         ORDER BY f.step_id FOR UPDATE OF f
	LOOP
		UPDATE fanouts SET done = done + r.n, succeeded = succeeded + r.ok, active = greatest(active - r.n, 0)
		WHERE step_id = r.step_id;
		IF r.run_state <> 'stopping' THEN
			v_ready := v_ready + ferry_fanout_release(r.step_id);
		END IF;
	END LOOP;
	WITH d AS (
		SELECT f.* FROM fanouts f WHERE f.step_id = ANY (p_parents) AND f.done >= f.total
	), u AS (
		UPDATE steps s SET
		       state = CASE WHEN ru.state = 'stopping' THEN 'stopped'
		                    WHEN d.succeeded >= ceil(d.min_success * d.total - 1e-9) THEN 'succeeded'
		                    ELSE 'failed' END,
		       reason = d.succeeded || ' of ' || d.total || ' items succeeded'
		                || CASE WHEN d.min_success < 1
		                        THEN ' (min_success ' || round((d.min_success * 100)::numeric, 2)::float8 || '%)'
		                        ELSE '' END,
		       outputs = jsonb_build_object('items', d.total, 'succeeded', d.succeeded),
		       finished_at = now()
		FROM d, runs ru
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
