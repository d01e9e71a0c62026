-- The engine's hottest child rows cascade by statement, not by foreign key.
--
-- A row-level foreign key checks every insert: attempts.step_id (one a
-- claimed step), step_queue.step_id (one a step made ready), steps.run_id
-- and steps.parent_id (one each a fan-out item written) each ran a
-- statement that locks the referenced row FOR KEY SHARE (a write of its
-- header, WAL included): 400,000 of them for a 100,000-item fan-out, the
-- costliest part of its per-item work. Paired in one sitting (a slow
-- machine; before, after, three times each): bench_dispatch --foreach
-- 100000 --executor noop expands in 4.44 / 4.77 / 4.85 → 3.03 / 2.79 /
-- 2.94 s and runs 5,247 / 4,202 / 4,983 → 5,141 / 5,805 / 6,459 items a
-- second; --executor noop --runs 200 --width 48 dispatches 4,668 / 4,647 /
-- 4,194 → 5,265 / 5,010 / 4,835 steps a second; deleting that 100,000-item
-- run (DELETE FROM runs) takes 9.0 → 4.0 s.
--
-- What those keys guarded still holds, by construction: every such row is
-- written by the engine's functions from a row they hold — an attempt and a
-- queue entry from the UPDATE of their step that returned it (a concurrent
-- delete of that step makes the UPDATE return nothing, so nothing is
-- inserted), a fan-out's items by the claim of their running parent, whose
-- run cannot be deleted while it runs (store_housekeep deletes finished runs
-- only). Their ON DELETE CASCADE is kept by two statement triggers: a
-- deleted run takes its steps, a deleted step its attempts, its queue entry
-- and its items (a fan-out's), each in one statement for the whole batch
-- (the foreign keys deleted row by row); their functions' current text is
-- db/functions/cascade.sql. The other tables that reference steps and runs
-- keep their foreign keys. t_housekeep and t_branching look for rows left
-- behind.
ALTER TABLE attempts DROP CONSTRAINT attempts_step_id_fkey;
ALTER TABLE step_queue DROP CONSTRAINT step_queue_step_id_fkey;
ALTER TABLE steps DROP CONSTRAINT steps_parent_id_fkey;
ALTER TABLE steps DROP CONSTRAINT steps_run_id_fkey;

CREATE FUNCTION ferry_runs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM steps s USING gone g WHERE s.run_id = g.id;
	RETURN NULL;
END;
$$;

-- (a delete of no row fires a statement trigger too: its own deletes below
-- would fire it again without end)
CREATE FUNCTION ferry_steps_deleted() RETURNS trigger
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

CREATE TRIGGER runs_deleted_steps AFTER DELETE ON runs REFERENCING OLD TABLE AS gone
	FOR EACH STATEMENT EXECUTE FUNCTION ferry_runs_deleted();
CREATE TRIGGER steps_deleted_rows AFTER DELETE ON steps REFERENCING OLD TABLE AS gone
	FOR EACH STATEMENT EXECUTE FUNCTION ferry_steps_deleted();
