-- Data cache sessions (the `cache` step kind, steps/datacache.c): hits,
-- commits, pins and LRU eviction of staged datasets, per host. Tables and
-- the trigger that calls ferry_cache_release in
-- db/migrations/0004_datacache.sql.
--
-- ferry_cache_hit: the entry is marked used and pinned by the (run, step)
-- session in one statement, so an eviction running beside it either sees
-- the session or loses the race for the row lock. Returns the session id
-- and the path, or no row when the entry is not there (then: a miss,
-- counted by the caller in cache_stats: store_cache_miss).
CREATE OR REPLACE FUNCTION ferry_cache_hit(p_host text, p_key text, p_run bigint, p_step bigint, p_attempt int)
RETURNS TABLE (session uuid, path text, bytes bigint)
LANGUAGE plpgsql AS $$
DECLARE
	v_path text;
	v_bytes bigint;
BEGIN
	UPDATE cache_entries e SET hits = e.hits + 1, last_used_at = now()
	WHERE e.host = p_host AND e.key = p_key
	RETURNING e.path, e.bytes INTO v_path, v_bytes;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	INSERT INTO cache_stats AS s (host, hits) VALUES (p_host, 1)
	ON CONFLICT (host) DO UPDATE SET hits = s.hits + 1;
	RETURN QUERY SELECT ferry_cache_open(p_host, p_key, p_run, p_step, p_attempt, true), v_path, v_bytes;
END;
$$;

-- Opens (or re-opens, for a retried run) the session of (run, step) on an
-- entry; released at once when the run already finished.
CREATE OR REPLACE FUNCTION ferry_cache_open(p_host text, p_key text, p_run bigint, p_step bigint, p_attempt int,
                                 p_hit boolean)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
	v_id uuid;
BEGIN
	INSERT INTO cache_sessions AS c (run_id, step_id, attempt, host, key, hit, released_at)
	SELECT p_run, p_step, p_attempt, p_host, p_key, p_hit,
	       CASE WHEN r.state IN ('succeeded', 'failed', 'stopped') THEN now() END
	FROM runs r WHERE r.id = p_run
	ON CONFLICT (run_id, step_id) DO UPDATE
	SET attempt = excluded.attempt, host = excluded.host, key = excluded.key, hit = excluded.hit,
	    opened_at = now(), released_at = excluded.released_at
	RETURNING c.id INTO v_id;
	IF v_id IS NULL THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	RETURN v_id;
END;
$$;

-- A staged entry is complete (its directory renamed into place): recorded,
-- counted, and pinned by the (run, step) session. When another daemon on the
-- host committed the same key first, its row stays and is used.
CREATE OR REPLACE FUNCTION ferry_cache_commit(p_host text, p_key text, p_fingerprint text, p_path text,
                                   p_dataset text, p_command jsonb, p_bytes bigint,
                                   p_run bigint, p_step bigint, p_attempt int)
RETURNS uuid
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO cache_entries AS e (host, key, fingerprint, path, dataset, command, bytes)
	VALUES (p_host, p_key, p_fingerprint, p_path, p_dataset, p_command, p_bytes)
	ON CONFLICT (host, key) DO UPDATE SET last_used_at = now();
	INSERT INTO cache_stats AS s (host, staged_bytes) VALUES (p_host, p_bytes)
	ON CONFLICT (host) DO UPDATE SET staged_bytes = s.staged_bytes + excluded.staged_bytes;
	RETURN ferry_cache_open(p_host, p_key, p_run, p_step, p_attempt, false);
END;
$$;

-- Makes room for p_bytes more on host under a cap of p_cap bytes: deletes
-- least-recently-used entries that no open session pins, until the entries
-- (less p_key, which is being replaced) fit. Returns the paths whose
-- directories the caller must now remove. Entries another transaction holds
-- are skipped, never waited for.
CREATE OR REPLACE FUNCTION ferry_cache_evict(p_host text, p_key text, p_bytes bigint, p_cap bigint)
RETURNS TABLE (key text, path text, bytes bigint)
LANGUAGE plpgsql AS $$
DECLARE
	v_total bigint;
	v_row record;
BEGIN
	SELECT coalesce(sum(e.bytes), 0) INTO v_total FROM cache_entries e
	WHERE e.host = p_host AND e.key <> p_key;
	FOR v_row IN
		SELECT e.key, e.path, e.bytes FROM cache_entries e
		WHERE e.host = p_host AND e.key <> p_key
		  AND NOT EXISTS (SELECT 1 FROM cache_sessions c
		                  WHERE c.host = e.host AND c.key = e.key AND c.released_at IS NULL)
		ORDER BY e.last_used_at, e.key
		FOR UPDATE SKIP LOCKED
	LOOP
		EXIT WHEN v_total + p_bytes <= p_cap;
		DELETE FROM cache_entries e WHERE e.host = p_host AND e.key = v_row.key;
		v_total := v_total - v_row.bytes;
		INSERT INTO cache_stats AS s (host, evictions, evicted_bytes) VALUES (p_host, 1, v_row.bytes)
		ON CONFLICT (host) DO UPDATE SET evictions = s.evictions + 1,
		                                 evicted_bytes = s.evicted_bytes + excluded.evicted_bytes;
		key := v_row.key;
		path := v_row.path;
		bytes := v_row.bytes;
		RETURN NEXT;
	END LOOP;
END;
$$;

-- Sessions end with their run: one statement when a run enters a finished
-- state (never on the engine's other updates of runs — the WHEN clause is
-- evaluated without calling anything). The entries they used count as used
-- now, for the LRU order.
CREATE OR REPLACE FUNCTION ferry_cache_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	WITH r AS (
		UPDATE cache_sessions SET released_at = now()
		WHERE run_id = NEW.id AND released_at IS NULL
		RETURNING host, key
	)
	UPDATE cache_entries e SET last_used_at = now()
	FROM r WHERE e.host = r.host AND e.key = r.key;
	RETURN NULL;
END;
$$;
