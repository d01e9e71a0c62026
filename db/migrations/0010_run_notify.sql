-- The completion webhook (FERRY_NOTIFY_WEBHOOK, orchestrator/notify.c): a
-- run is notified once it finished. notify_next is when a failed post is
-- tried again; after five failed rounds notified_at is set with the error.
-- Runs finished before this migration count as notified.
ALTER TABLE runs ADD COLUMN notified_at timestamptz, ADD COLUMN notify_attempts int NOT NULL DEFAULT 0,
	ADD COLUMN notify_next timestamptz, ADD COLUMN notify_error text;
UPDATE runs SET notified_at = finished_at WHERE finished_at IS NOT NULL;
CREATE INDEX runs_notify_due ON runs (finished_at) WHERE notified_at IS NULL;
