-- The audit trail of what has no events of its own, and what outlives a
-- deleted run: who did what to which object, when. Written in the same
-- statement as the change it records (store_audit.c), so neither exists
-- without the other; listed to viewers by GET /api/v1/audit.
CREATE TABLE audit (
	id         bigserial PRIMARY KEY,
	at         timestamptz NOT NULL DEFAULT now(),
	actor      text NOT NULL,
	object     text NOT NULL CHECK (object IN ('run', 'schedule', 'trigger')),
	object_id  bigint NOT NULL,
	action     text NOT NULL,
	detail     jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_object ON audit (object, object_id, id);

-- who changed a schedule last (created_by says who made it)
ALTER TABLE schedules ADD COLUMN updated_by text;
