-- Data cache sessions (the `cache` step kind, steps/datacache.c). A cache
-- step stages a dataset into a node-local directory keyed by its content
-- fingerprint; the directory lives on one host, so every row here is per
-- host. The files are the daemon's; these tables are the index, the pins
-- and the statistics that every daemon (and every restart) agrees on.

-- One complete staged copy: $FERRY_CACHE_ROOT/entries/KEY on host. KEY is
-- the fingerprint of the dataset, or sha256 of it with the preprocessing
-- command (a command's output differs from a raw copy).
CREATE TABLE cache_entries (
	host         text NOT NULL,
	key          text NOT NULL,
	fingerprint  text NOT NULL,
	path         text NOT NULL,
	dataset      text NOT NULL,          -- where it was staged from (first time)
	command      jsonb,                  -- the preprocessing command, or NULL: a copy
	bytes        bigint NOT NULL,
	hits         bigint NOT NULL DEFAULT 0,
	created_at   timestamptz NOT NULL DEFAULT now(),
	last_used_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (host, key)
);
CREATE INDEX cache_entries_lru ON cache_entries (host, last_used_at);

-- A (run, cache step) using an entry. Open (released_at NULL) pins the
-- entry against eviction. Released when the run finishes (trigger below);
-- a retried run re-opens it when its cache step runs again (same id).
CREATE TABLE cache_sessions (
	id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	step_id     bigint NOT NULL,
	attempt     int NOT NULL,
	host        text NOT NULL,
	key         text NOT NULL,
	hit         boolean NOT NULL,
	opened_at   timestamptz NOT NULL DEFAULT now(),
	released_at timestamptz,
	UNIQUE (run_id, step_id)
);
CREATE INDEX cache_sessions_open ON cache_sessions (host, key) WHERE released_at IS NULL;

-- Counters per host: lookups that found a complete entry, lookups that did
-- not, entries evicted to make room, bytes staged (copied or produced).
CREATE TABLE cache_stats (
	host          text PRIMARY KEY,
	hits          bigint NOT NULL DEFAULT 0,
	misses        bigint NOT NULL DEFAULT 0,
	evictions     bigint NOT NULL DEFAULT 0,
	evicted_bytes bigint NOT NULL DEFAULT 0,
	staged_bytes  bigint NOT NULL DEFAULT 0
);

-- A hit: the entry is marked used and pinned by the (run, step) session in
-- one statement, so an eviction running beside it either sees the session
-- or loses the race for the row lock. Returns the session id and the path,
-- or no row when the entry is not there (then: a miss, counted by the
-- caller through ferry_cache_miss).
CREATE FUNCTION ferry_cache_hit(p_host text, p_key text, p_run bigint, p_step bigint, p_attempt int)
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
CREATE FUNCTION ferry_cache_open(p_host text, p_key text, p_run bigint, p_step bigint, p_attempt int,
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
CREATE FUNCTION ferry_cache_commit(p_host text, p_key text, p_fingerprint text, p_path text,
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
CREATE FUNCTION ferry_cache_evict(p_host text, p_key text, p_bytes bigint, p_cap bigint)
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
CREATE FUNCTION ferry_cache_release() RETURNS trigger
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

CREATE TRIGGER runs_finished_release_cache
	AFTER UPDATE OF state ON runs
	FOR EACH ROW
	WHEN (NEW.state IN ('succeeded', 'failed', 'stopped')
	      AND OLD.state NOT IN ('succeeded', 'failed', 'stopped'))
	EXECUTE FUNCTION ferry_cache_release();

-- ferry_retry as in 0002, but a retried step below a `cache` step gets that
-- cache step re-run first: the entry it staged may have been evicted since
-- the run ended (its session was released), and the retried run needs a
-- session of its own pinning it.
CREATE OR REPLACE FUNCTION ferry_retry(p_run bigint, p_from text, p_actor text, p_no_cache boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	v_state text;
	v_from bigint;
	v_set bigint[];
BEGIN
	SELECT state INTO v_state FROM runs WHERE id = p_run FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'P0002';
	END IF;
	IF p_from IS NULL AND v_state NOT IN ('failed', 'stopped') THEN
		RAISE EXCEPTION 'run % is %: only a failed or stopped run can be retried (use --from STEP to re-run a succeeded one)', p_run, v_state
		USING ERRCODE = '55000';
	END IF;
	IF v_state NOT IN ('succeeded', 'failed', 'stopped') THEN
		RAISE EXCEPTION 'run % is still %: stop it or wait for it to finish', p_run, v_state
		USING ERRCODE = '55000';
	END IF;
	IF p_from IS NOT NULL THEN
		SELECT id INTO v_from FROM steps WHERE run_id = p_run AND name = p_from;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'run % has no step "%"', p_run, p_from USING ERRCODE = 'P0002';
		END IF;
	END IF;
	WITH RECURSIVE down (id) AS (
		SELECT v_from WHERE v_from IS NOT NULL
		UNION
		SELECT e.step_id FROM step_deps e JOIN down ON e.needs_id = down.id
	)
	SELECT array_agg(id) INTO v_set FROM (
		SELECT id FROM down
		UNION
		SELECT id FROM steps WHERE run_id = p_run AND state IN ('failed', 'stopped', 'skipped')
	) x;
	-- 0004: the cache steps above the retried steps run again with them, so
	-- the retried run re-opens its sessions (a hit when the entry is still
	-- there; staged again when it was evicted after the run ended)
	WITH RECURSIVE up (id) AS (
		SELECT unnest(v_set)
		UNION
		SELECT d.needs_id FROM step_deps d JOIN up ON d.step_id = up.id
	)
	SELECT array_agg(id) INTO v_set FROM (
		SELECT unnest(v_set) AS id
		UNION
		SELECT s.id FROM up JOIN steps s ON s.id = up.id WHERE s.kind = 'cache' AND s.state = 'succeeded'
	) x;
	UPDATE steps s SET state = 'blocked', tries = 0, not_before = NULL, exit_code = NULL,
	       reason = NULL, started_at = NULL, finished_at = NULL,
	       outputs = NULL, metrics = NULL, gate = NULL, cached_from = NULL,
	       deps_pending = (SELECT count(*) FROM step_deps d WHERE d.step_id = s.id AND d.needs_id = ANY (v_set))
	WHERE s.id = ANY (v_set);
	WITH u AS (
		UPDATE steps SET state = CASE WHEN kind = 'gate' THEN 'waiting' ELSE 'ready' END,
		       started_at = CASE WHEN kind = 'gate' THEN now() END
		WHERE id = ANY (v_set) AND deps_pending = 0
		RETURNING id, run_id, dev, state, timeout_ms, spec ->> 'on_timeout' AS on_timeout
	), q AS (
		INSERT INTO step_queue (step_id, run_id, dev) SELECT u.id, u.run_id, u.dev FROM u WHERE u.state = 'ready'
	)
	INSERT INTO step_waits (step_id, run_id, deadline, on_timeout)
	SELECT u.id, u.run_id, now() + u.timeout_ms * interval '1 millisecond', coalesce(u.on_timeout, 'fail')
	FROM u WHERE u.state = 'waiting' AND u.timeout_ms > 0
	ON CONFLICT (step_id) DO UPDATE SET deadline = excluded.deadline;
	UPDATE runs SET state = 'pending', finished_at = NULL, reason = NULL, no_cache = p_no_cache,
	       metrics = (SELECT jsonb_object_agg(name, metrics) FROM steps
	                  WHERE run_id = p_run AND metrics IS NOT NULL),
	       open_steps = open_steps + coalesce(array_length(v_set, 1), 0)
	WHERE id = p_run;
	INSERT INTO events (run_id, actor, kind, detail)
	VALUES (p_run, p_actor, 'run.retry', jsonb_strip_nulls(jsonb_build_object('from', p_from,
	        'no_cache', CASE WHEN p_no_cache THEN true END,
	        'steps', (SELECT jsonb_agg(name ORDER BY idx) FROM steps WHERE id = ANY (v_set)))));
	PERFORM pg_notify('ferry_ready', '');
	RETURN 'pending';
END;
$$;
