-- A person continues a waiting step (POST /runs/{id}/steps/{step}/continue,
-- ferry continue).
--
-- ferry_continue: the step (a gate, or a label step) succeeds, optionally
-- with a payload that becomes its output (a label step's is merged over
-- the task it opened); its deadline goes and its successors move on.
-- A step that waits for an approval before it does its work (a deploy
-- step with approve: true; its outputs say "resume_on_continue") becomes
-- ready again instead, with the payload as its "approved" output for its
-- next claim; the payload's deploy settings are checked here, so a bad
-- value is refused (22023, a 400 naming the field) and nothing changes.
CREATE OR REPLACE FUNCTION ferry_continue(p_run bigint, p_step text, p_actor text, p_data jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_id bigint;
	v_state text;
	v_outputs jsonb;
	v_ready int;
BEGIN
	PERFORM 1 FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	SELECT id, state, outputs INTO v_id, v_state, v_outputs FROM steps WHERE run_id = p_run AND name = p_step FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % has no step "%"', p_run, p_step USING ERRCODE = 'P0002';
	END IF;
	IF v_state <> 'waiting' THEN
		RAISE EXCEPTION 'step "%" of run % is %, not waiting: only a waiting step can be continued', p_step, p_run, v_state
		USING ERRCODE = '55000';
	END IF;
	IF v_state = 'waiting' AND coalesce((v_outputs ->> 'resume_on_continue')::boolean, false) THEN
		IF p_data IS NOT NULL AND jsonb_typeof(p_data) <> 'object' THEN
			RAISE EXCEPTION 'the approval of step "%" takes an object: {"traffic": 0-100, "replicas": 1-5, "auto_stop": "1h"-"24h" or "never"}', p_step
			USING ERRCODE = '22023';
		END IF;
		IF p_data ? 'traffic' AND NOT (jsonb_typeof(p_data -> 'traffic') = 'number'
		       AND (p_data ->> 'traffic') ~ '^[0-9]+$' AND (p_data ->> 'traffic')::int BETWEEN 0 AND 100) THEN
			RAISE EXCEPTION 'traffic: % is not an integer from 0 to 100 (the percentage the new version gets)', p_data -> 'traffic'
			USING ERRCODE = '22023';
		END IF;
		IF p_data ? 'replicas' AND NOT (jsonb_typeof(p_data -> 'replicas') = 'number'
		       AND (p_data ->> 'replicas') ~ '^[0-9]+$' AND (p_data ->> 'replicas')::int BETWEEN 1 AND 5) THEN
			RAISE EXCEPTION 'replicas: % is not an integer from 1 to 5', p_data -> 'replicas'
			USING ERRCODE = '22023';
		END IF;
		IF p_data ? 'auto_stop' AND NOT ((p_data ->> 'auto_stop') ~ '^([1-9]|1[0-9]|2[0-4])h$'
		       OR (p_data ->> 'auto_stop') = 'never') THEN
			RAISE EXCEPTION 'auto_stop: % is not 1h to 24h (whole hours) or "never"', p_data -> 'auto_stop'
			USING ERRCODE = '22023';
		END IF;
		UPDATE steps SET state = 'ready', not_before = NULL,
		       outputs = (v_outputs - 'resume_on_continue') || jsonb_build_object('approved', coalesce(p_data, '{}'::jsonb),
		                 'approved_by', p_actor),
		       reason = 'approved by ' || p_actor
		WHERE id = v_id;
		DELETE FROM step_waits WHERE step_id = v_id;
		INSERT INTO step_queue (step_id, run_id, dev, queue, priority, cpus, memory_mb, gpus, named, gpu_shared)
		SELECT id, run_id, dev, ferry_req_queue(spec), ferry_req_priority(spec), ferry_req_cpus(spec), ferry_req_memory_mb(spec), ferry_req_gpus(spec), ferry_req_named(spec), ferry_req_gpu_shared(spec) FROM steps WHERE id = v_id;
		INSERT INTO events (run_id, step, actor, kind, detail)
		VALUES (p_run, p_step, p_actor, 'step.approved', jsonb_strip_nulls(jsonb_build_object('data', p_data)));
		PERFORM pg_notify('ferry_ready', '');
		RETURN 'ready';
	END IF;
	UPDATE steps SET state = 'succeeded',
	       outputs = CASE WHEN jsonb_typeof(outputs) = 'object' AND jsonb_typeof(p_data) = 'object'
	                      THEN outputs || p_data
	                      WHEN p_data IS NULL THEN outputs ELSE p_data END,
	       started_at = coalesce(started_at, now()),
	       finished_at = now(), reason = 'continued by ' || p_actor
	WHERE id = v_id;
	DELETE FROM step_waits WHERE step_id = v_id;
	INSERT INTO events (run_id, step, actor, kind, detail)
	VALUES (p_run, p_step, p_actor, 'step.continued', jsonb_strip_nulls(jsonb_build_object('data', p_data)));
	UPDATE runs SET state = 'running', started_at = coalesce(started_at, now()) WHERE id = p_run AND state = 'pending';
	v_ready := ferry_release(p_actor, ARRAY[v_id], NULL, ARRAY[p_run]);
	IF v_ready > 0 THEN
		PERFORM pg_notify('ferry_ready', '');
	END IF;
	RETURN 'succeeded';
END;
$$;

-- ferry_reject: a person says no to a waiting step (POST
-- /runs/{id}/steps/{step}/reject, ferry reject): it fails with the reason
-- ("rejected by ACTOR: REASON"), final (not retried), a step.rejected event
-- with the reason, and its run moves on as after any failure (the steps
-- below it are skipped; the run fails unless something else decides).
CREATE OR REPLACE FUNCTION ferry_reject(p_run bigint, p_step text, p_actor text, p_reason text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_id bigint;
	v_state text;
	v_ready int;
	v_reason text;
BEGIN
	PERFORM 1 FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	SELECT id, state INTO v_id, v_state FROM steps WHERE run_id = p_run AND name = p_step FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % has no step "%"', p_run, p_step USING ERRCODE = 'P0002';
	END IF;
	IF v_state <> 'waiting' THEN
		RAISE EXCEPTION 'step "%" of run % is %, not waiting: only a waiting step can be rejected', p_step, p_run, v_state
		USING ERRCODE = '55000';
	END IF;
	v_reason := 'rejected by ' || p_actor || coalesce(': ' || nullif(btrim(p_reason), ''), '');
	UPDATE steps SET state = 'failed', reason = v_reason, started_at = coalesce(started_at, now()),
	       finished_at = now()
	WHERE id = v_id;
	DELETE FROM step_waits WHERE step_id = v_id;
	INSERT INTO events (run_id, step, actor, kind, detail)
	VALUES (p_run, p_step, p_actor, 'step.rejected', jsonb_build_object('reason', v_reason));
	UPDATE runs SET state = 'running', started_at = coalesce(started_at, now()) WHERE id = p_run AND state = 'pending';
	v_ready := ferry_release(p_actor, NULL, ARRAY[v_id], ARRAY[p_run]);
	IF v_ready > 0 THEN
		PERFORM pg_notify('ferry_ready', '');
	END IF;
	RETURN 'failed';
END;
$$;
