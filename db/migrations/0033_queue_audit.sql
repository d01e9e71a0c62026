-- Queues are made, changed and deleted by admins through the API (GET, POST,
-- PATCH, DELETE /api/v1/queues; db/functions/queue_views.sql): each change is
-- recorded in the audit trail in the same statement, as secrets' are.
ALTER TABLE audit DROP CONSTRAINT audit_object_check;
ALTER TABLE audit ADD CONSTRAINT audit_object_check
	CHECK (object IN ('run', 'schedule', 'trigger', 'secret', 'queue'));
