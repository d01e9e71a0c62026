-- A `ferry dev` session holds a lease on its run: the process renews
-- dev_lease_until while it lives; when the lease expires (the process was
-- killed, the terminal closed) the leader stops the run with the reason
-- "dev session ended" (ferry_dev_expire in db/functions/stop.sql).
-- NULL for every run not made by a dev session.
ALTER TABLE runs ADD COLUMN dev_lease_until timestamptz;
CREATE INDEX runs_dev_lease ON runs (dev_lease_until) WHERE dev_lease_until IS NOT NULL;
