-- Fan-outs (issue 28): a step with foreach: runs one child step per item
-- of a list known only when it starts.
--
-- steps.parent_id, steps.item_index: a child is a step row like any (claimed,
-- retried, cached, killed like one), of its parent's run, named
-- "PARENT[INDEX]", its spec only {"item", "item_index"} (the claim merges
-- its parent's); children do not count in runs.open_steps: the parent
-- stands for them, running until every child is terminal.
--
-- fanouts: one row per expanded foreach step, its counters kept per batch
-- of finished children (ferry_finish groups them), so a fan-in over
-- 100,000 children updates neither the run's row nor the parent's per
-- child: total items, the next item not yet released (max_parallel),
-- children released and not terminal (active), terminal (done) and
-- succeeded.
ALTER TABLE steps ADD COLUMN parent_id bigint REFERENCES steps (id) ON DELETE CASCADE;
ALTER TABLE steps ADD COLUMN item_index int;
CREATE UNIQUE INDEX steps_items ON steps (parent_id, item_index) WHERE parent_id IS NOT NULL;

CREATE TABLE fanouts (
	step_id       bigint PRIMARY KEY REFERENCES steps (id) ON DELETE CASCADE,
	run_id        bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	total         int NOT NULL,
	next_index    int NOT NULL DEFAULT 0,
	active        int NOT NULL DEFAULT 0,
	done          int NOT NULL DEFAULT 0,
	succeeded     int NOT NULL DEFAULT 0,
	max_parallel  int NOT NULL DEFAULT 0,   -- 0: no limit
	min_success   float8 NOT NULL DEFAULT 1 -- the fraction of items that must succeed
) WITH (fillfactor = 50);
CREATE INDEX fanouts_run ON fanouts (run_id);
