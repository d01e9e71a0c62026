-- What a deleted run or step takes with it (migration 0037's statement
-- triggers, in place of row-level foreign keys whose check on each insert
-- cost a fan-out's items the most): a run its steps; a step its attempts,
-- its queue entry and its items (a fan-out's). One statement for each
-- deleting statement's whole batch.
CREATE OR REPLACE FUNCTION ferry_runs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM steps s USING gone g WHERE s.run_id = g.id;
	RETURN NULL;
END;
$$;

-- (a delete of no row fires a statement trigger too: its own deletes below
-- would fire it again without end)
CREATE OR REPLACE FUNCTION ferry_steps_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM gone LIMIT 1;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	DELETE FROM attempts a USING gone g WHERE a.step_id = g.id;
	DELETE FROM step_queue q USING gone g WHERE q.step_id = g.id;
	DELETE FROM steps s USING gone g WHERE s.parent_id = g.id;
	RETURN NULL;
END;
$$;
