-- Step-kind flags stored with the step, so the state machine (db/functions)
-- decides by what a step does, never by its kind's name (orchestrator/kind.h
-- is the one table of kinds; store_run_create copies its flags here):
--   waits    the step enters `waiting` instead of `ready` when its
--            dependencies are met and is never claimed (SKF_WAITS: a gate)
--   restage  the step stages data for the steps below it and runs again
--            when one of them is retried (SKF_STAGES: a cache step)
-- Adding the columns with a constant default rewrites nothing; the backfill
-- below touches only the rows it changes.

ALTER TABLE steps ADD COLUMN waits boolean NOT NULL DEFAULT false,
                  ADD COLUMN restage boolean NOT NULL DEFAULT false;

-- The one place a kind name appears in SQL: the steps of existing runs get
-- the flags their kinds had when this migration was written.
UPDATE steps SET waits = (kind = 'gate'), restage = (kind = 'cache')
WHERE kind IN ('gate', 'cache');
