-- Reconcile on the leader only (issue 29, item 3): a daemon that changed
-- what should serve (the API, a deploy step) and is not the leader asks
-- for a round instead of running one — it bumps `requested` and NOTIFYs
-- ferry_reconcile, the leader starts a round at once, and records in
-- `done` the `requested` it read when that round began: the asker's
-- ticket is applied once done >= ticket. One row.
CREATE TABLE reconcile_rounds (
	one        boolean PRIMARY KEY DEFAULT true CHECK (one),
	requested  bigint NOT NULL DEFAULT 0,
	done       bigint NOT NULL DEFAULT 0,
	done_at    timestamptz
);
INSERT INTO reconcile_rounds DEFAULT VALUES;
