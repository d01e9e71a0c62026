-- Secrets a step names under `secrets:` (issue 24): each value sealed with
-- AES-256-GCM under the key in $FERRY_HOME/secrets.key (lib/seal.h), its
-- name the associated data. Nothing in the database reads in the clear.
CREATE TABLE secrets (
	name text PRIMARY KEY CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$' AND name !~ '^FERRY_'),
	sealed bytea NOT NULL,
	updated_by text NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
);

-- who set or removed a secret, and when (never its value): the audit trail
ALTER TABLE audit DROP CONSTRAINT audit_object_check;
ALTER TABLE audit ADD CONSTRAINT audit_object_check CHECK (object IN ('run', 'schedule', 'trigger', 'secret'));
