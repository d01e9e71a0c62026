-- Artifacts from any host (issue 29, item 5): which hosts hold which blob
-- of the content-addressed store ($FERRY_HOME/artifacts/sha256/…, one per
-- host: the fleet shares this database, not a disk). A host that stores a
-- blob (a register step, POST /models/{name}/versions) or fetches one it
-- lacked from a holder (GET /api/v1/blobs/{sha256} on that host's API,
-- the hash checked) records itself here; readers ask a live holder.
CREATE TABLE blob_holders (
	sha256  text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
	host    text NOT NULL,
	since   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (sha256, host)
);
