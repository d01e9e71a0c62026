# The state machine's functions (db/functions): applied after the migrations
# with CREATE OR REPLACE, recorded by sha256 in schema_functions, re-applied
# when a file's text differs from what the database last got (and after a
# migration ran), never rewritten by a plain restart; steps carry their
# kind's flags (steps.waits, steps.restage) and the functions act on those.
# Those that watch a fresh database get every file start from an empty
# database, not run.sh's migrated template:
# fresh-db: test_functions_applied_once_and_when_changed test_functions_two_daemons_apply_once

# the function files of this checkout, and the sha256 of one
fn_files() { ls "$ROOT"/db/functions/*.sql | wc -l | tr -d ' '; }
fn_sha() { sha256sum "$ROOT/db/functions/$1.sql" | cut -d' ' -f1; }

# ts_of: what ferry_ts makes of a fixed time
ts_of() { sql "SELECT ferry_ts('2020-01-02 03:04:05.678+00')"; }

test_functions_applied_once_and_when_changed() {
	start_daemon a
	assert_match "$(cat "$FERRY_HOME/ferryd-a.log")" 'applied function files: cascade claim continue' "a fresh database gets every file"
	assert_eq "$(sql "SELECT count(*) FROM schema_functions")" "$(fn_files)" "one row per file"
	for f in "$ROOT"/db/functions/*.sql; do
		n=$(basename "$f" .sql)
		assert_eq "$(sql "SELECT sha256 FROM schema_functions WHERE name = '$n'")" "$(fn_sha "$n")" "sha256 of $n.sql"
	done
	for p in ferry_claim ferry_release ferry_finish ferry_finish_claim ferry_retry ferry_stop ferry_continue ferry_expire_waits \
		ferry_ts ferry_run_json ferry_unblock ferry_release_skipped ferry_model_version_json ferry_model_alias_set ferry_model_register \
		ferry_cache_hit ferry_cache_open ferry_cache_commit ferry_cache_evict ferry_cache_release ferry_run_changed; do
		assert_eq "$(sql "SELECT count(*) FROM pg_proc WHERE proname = '$p'")" 1 "one $p"
	done
	assert_eq "$(sql "SELECT pg_get_functiondef('ferry_release'::regproc) LIKE '%ferry_unblock%'")" t "the current ferry_release is the file's"
	assert_eq "$(ts_of)" "2020-01-02T03:04:05.678Z" "ferry_ts works"
	stamps=$(sql "SELECT string_agg(name || '@' || applied_at, ',' ORDER BY name) FROM schema_functions")

	# a plain restart rewrites nothing, even a function changed behind its back
	sql "CREATE OR REPLACE FUNCTION ferry_ts(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT 'tampered'::text \$\$" >/dev/null
	stop_daemon a
	start_daemon b
	grep -q 'applied function files' "$FERRY_HOME/ferryd-b.log" && fail "a restart applied function files"
	assert_eq "$(ts_of)" tampered "the recorded hash matches: not re-applied"
	assert_eq "$(sql "SELECT string_agg(name || '@' || applied_at, ',' ORDER BY name) FROM schema_functions")" "$stamps" "nothing recorded"

	# a file whose recorded hash differs (as after an upgrade) is applied again, alone
	sql "UPDATE schema_functions SET sha256 = 'from-an-older-binary' WHERE name = 'ts'" >/dev/null
	stop_daemon b
	start_daemon c
	assert_match "$(grep 'applied function files' "$FERRY_HOME/ferryd-c.log")" 'applied function files: ts$' "only ts.sql applied"
	assert_eq "$(ts_of)" "2020-01-02T03:04:05.678Z" "the file's ferry_ts is back"
	assert_eq "$(sql "SELECT sha256 FROM schema_functions WHERE name = 'ts'")" "$(fn_sha ts)" "its hash recorded"
	assert_eq "$(sql "SELECT count(*) FROM schema_functions WHERE name <> 'ts' AND applied_at = (SELECT applied_at FROM schema_functions WHERE name = 'ts')")" 0 "the others untouched"

	# a file not recorded yet (a new one) is applied
	sql "DELETE FROM schema_functions WHERE name = 'stop'" >/dev/null
	stop_daemon c
	start_daemon d
	assert_match "$(grep 'applied function files' "$FERRY_HOME/ferryd-d.log")" 'applied function files: stop$' "the new file applied"
	assert_eq "$(sql "SELECT count(*) FROM schema_functions")" "$(fn_files)" "recorded again"
	assert_eq "$(sql "SELECT count(*) FROM pg_proc WHERE proname = 'ferry_finish'")" 1 "still one ferry_finish"
	assert_eq "$(sql "SELECT count(*) FROM pg_proc WHERE proname = 'ferry_retry'")" 1 "and one ferry_retry"
}

test_functions_two_daemons_apply_once() {
	# two daemons at once: one applies, the other waits on the lock and finds nothing to do
	spawn_daemon a
	spawn_daemon b
	await_daemon a
	await_daemon b
	assert_eq "$(sql "SELECT count(*) FROM schema_functions")" "$(fn_files)" "one row per file"
	assert_eq "$(cat "$FERRY_HOME"/ferryd-*.log | grep -c 'applied function files')" 1 "applied by one daemon"
}

test_functions_failed_file_rolls_back() {
	start_daemon a
	stop_daemon a
	# ts.sql and stop.sql are due; stop.sql cannot apply (ferry_stop now
	# returns int: a signature change that needed a DROP in a migration)
	sql "UPDATE schema_functions SET sha256 = 'x' WHERE name IN ('ts', 'stop')" >/dev/null
	sql "CREATE OR REPLACE FUNCTION ferry_ts(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT 'old'::text \$\$" >/dev/null
	sql "DROP FUNCTION ferry_stop(bigint, text)" >/dev/null
	sql "CREATE FUNCTION ferry_stop(p_run bigint, p_actor text) RETURNS int LANGUAGE sql AS \$\$ SELECT 1 \$\$" >/dev/null
	ferryd --log-level info >"$FERRY_HOME/ferryd-broken.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do
		grep -q 'db/functions/stop.sql failed' "$FERRY_HOME/ferryd-broken.log" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	assert_match "$(cat "$FERRY_HOME/ferryd-broken.log")" 'db/functions/stop.sql failed: .*cannot change return type' "the log names the file and why"
	curl -fsS "$FERRY_URL/healthz" >/dev/null 2>&1 && fail "the daemon serves with a function file that failed"
	assert_eq "$(ts_of)" old "one transaction: ts.sql rolled back with stop.sql"
	assert_eq "$(sql "SELECT sha256 FROM schema_functions WHERE name = 'ts'")" x "nothing recorded"
}

test_functions_step_flags() {
	start_daemon a
	f=$(wf flags <<'Y'
name: flags
steps:
  - {name: prep, command: [true]}
  - {name: approve, kind: gate, needs: [prep]}
  - {name: ship, needs: [approve], command: [true]}
Y
)
	id=$(submit "$f")
	wait_step "$id" approve waiting 10
	assert_eq "$(sql "SELECT string_agg(name || ':' || waits::int || restage::int, ',' ORDER BY idx) FROM steps WHERE run_id = $id")" \
		"prep:00,approve:10,ship:00" "the gate waits; nothing restages"
	api POST "/api/v1/runs/$id/steps/approve/continue" '{}'
	wait_run "$id" succeeded 10
	# a retry from the gate: it waits again at once (deps met), then from prep: after prep
	api POST "/api/v1/runs/$id/retry" '{"from": "approve"}'
	assert_eq "$CODE" 200 "retry from the gate"
	wait_step "$id" approve waiting 10
	assert_eq "$(step_col "$id" prep attempts)" 1 "prep not re-run"
	api POST "/api/v1/runs/$id/steps/approve/continue" '{}'
	wait_run "$id" succeeded 10
	api POST "/api/v1/runs/$id/retry" '{"from": "prep"}'
	wait_step "$id" approve waiting 10
	assert_eq "$(step_col "$id" prep attempts)" 2 "prep re-ran before the gate waited"
	api POST "/api/v1/runs/$id/steps/approve/continue" '{}'
	wait_run "$id" succeeded 10

	# a cache step restages; one that merely needs it does not
	W="$FERRY_HOME/work"
	mkdir -p "$W/data"
	echo hi >"$W/data/f.txt"
	g=$(wf staged <<'Y'
name: staged
steps:
  - {name: stage, kind: cache, dataset: data/f.txt}
  - {name: use, needs: [stage], command: [sh, -c, 'cat "$FERRY_CACHE_DIR/f.txt"']}
Y
)
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read(), "workdir": sys.argv[2]}))' "$g" "$W")
	api POST /api/v1/runs "$body"
	assert_eq "$CODE" 201 "cache run"
	id2=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id2" succeeded 20
	assert_eq "$(sql "SELECT string_agg(name || ':' || waits::int || restage::int, ',' ORDER BY idx) FROM steps WHERE run_id = $id2")" \
		"stage:01,use:00" "the cache step restages"
	api POST "/api/v1/runs/$id2/retry" '{"from": "use"}'
	wait_run "$id2" succeeded 20
	assert_eq "$(step_col "$id2" stage attempts)" 2 "retrying the step below re-ran the cache step"
}

test_functions_flags_backfilled_by_migration() {
	start_daemon a
	f=$(wf old <<'Y'
name: old
steps:
  - {name: prep, command: [true]}
  - {name: approve, kind: gate, needs: [prep]}
Y
)
	id=$(submit "$f")
	wait_run "$id" running 10
	wait_step "$id" approve waiting 10
	stop_daemon a
	# the database as a binary before 0006 left it: no flags, 0006 not recorded
	sql "ALTER TABLE steps DROP COLUMN waits, DROP COLUMN restage" >/dev/null
	sql "DELETE FROM schema_migrations WHERE name = '0006_step_flags'" >/dev/null
	start_daemon b
	assert_match "$(cat "$FERRY_HOME/ferryd-b.log")" 'applied migration 0006_step_flags' "0006 applied"
	assert_match "$(grep 'applied function files' "$FERRY_HOME/ferryd-b.log")" 'claim continue' "and every function file after a migration"
	assert_eq "$(step_col "$id" approve waits)" t "the gate's flag backfilled from its kind"
	assert_eq "$(step_col "$id" prep waits)" f "the other's not"
	api POST "/api/v1/runs/$id/retry" '{"from": "prep"}'
	assert_eq "$CODE" 409 "the run is still running"
	api POST "/api/v1/runs/$id/steps/approve/continue" '{}'
	wait_run "$id" succeeded 10
	api POST "/api/v1/runs/$id/retry" '{"from": "prep"}'
	wait_step "$id" approve waiting 10
}

# A stop and a claim of the same queued step, at once: the claim locks the step's queue row, then
# its steps row; ferry_stop locked the run, then the steps row, then the queue row — the other
# order, and PostgreSQL killed one of them ("deadlock detected", seen when a chain of 210 steps
# was stopped). Here a session does what the claim does, in its order, holding the queue row
# while the stop starts; both must end without an error and the step be stopped.
test_functions_stop_and_claim_lock_in_one_order() {
	start_daemon a FERRY_MAX_JOBS=1
	id=$(submit "$(wf two <<'Y'
name: two
steps:
  - {name: hold, command: [sleep, "30"]}
  - {name: queued, command: ["true"]}
Y
)")
	wait_step "$id" hold running
	sql_until "(SELECT count(*) = 1 FROM step_queue q JOIN steps s ON s.id = q.step_id WHERE s.run_id = $id AND s.name = 'queued')" 10 ||
		fail "the second step never waited in the queue"
	local sid
	sid=$(sql "SELECT id FROM steps WHERE run_id = $id AND name = 'queued'")
	# the claim's order: the queue row (held 2 s), then the steps row
	psql "$FERRY_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 >"$FERRY_HOME/claim.out" 2>&1 <<SQL &
BEGIN;
SELECT step_id FROM step_queue WHERE step_id = $sid FOR UPDATE;
SELECT pg_sleep(2);
UPDATE steps SET tries = tries WHERE id = $sid;
COMMIT;
SQL
	local claimer=$!
	sleep 0.7
	out=$(sql "SELECT ferry_stop($id, 'tester')" 2>&1) || fail "the stop failed: $out"
	wait "$claimer" || fail "the claim's session failed: $(cat "$FERRY_HOME/claim.out")"
	assert_eq "$out" stopping "the run stops (its first step is killed)"
	assert_eq "$(sql "SELECT state FROM steps WHERE id = $sid")" stopped "the queued step stopped"
	assert_eq "$(sql "SELECT count(*) FROM step_queue WHERE step_id = $sid")" 0 "and left the queue"
}

# ferry_claim finds its rows by their keys whatever the statistics said when its session made its
# plans: made while the tables were small (a fresh database, a quiet queue), its generic plans
# read the whole of steps for the claimed step and the whole of step_queue for its entry and for
# the gangs, at every claim of that session until an ANALYZE replaced them (bench_dispatch
# --chain: one scan of steps a hop). One session claims twice: its first claim makes the plans;
# its second must read neither table through.
test_functions_claim_plans_find_rows_by_key() {
	start_daemon a FERRY_MAX_JOBS=1
	id=$(submit "$(wf queued <<'Y'
name: queued
steps:
  - {name: hold, command: [sleep, "30"]}
  - {name: q1, command: ["true"]}
  - {name: q2, command: ["true"]}
  - {name: q3, command: ["true"]}
Y
)")
	wait_step "$id" hold running
	sql_until "(SELECT count(*) = 3 FROM step_queue WHERE run_id = $id)" 10 || fail "the three steps never waited in the queue"
	out=$(psql "$FERRY_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 2>&1 <<SQL
SELECT name FROM ferry_claim('tester', 'elsewhere', 1, 60000, NULL, NULL, NULL);
BEGIN;
SELECT name FROM ferry_claim('tester', 'elsewhere', 1, 60000, NULL, NULL, NULL);
SELECT relname || ' ' || seq_scan FROM pg_stat_xact_user_tables WHERE relname IN ('steps', 'step_queue') ORDER BY 1;
COMMIT;
SQL
) || fail "the claims failed: $out"
	assert_eq "$(echo "$out" | tr '\n' ' ')" "q1 q2 step_queue 0 steps 0 " "two claims, the second reading no table through"
}

# A function that turns sequential scans off turns JIT off too: with enable_seqscan off, a scan
# left without an index costs 1e10, over jit_above_cost, and its cached plan was compiled at every
# execution (the claim's probe of queues, a table of a handful of rows without an index for it:
# 18 ms a claim where the rest took 0.1 ms).
test_functions_seqscan_off_means_jit_off() {
	local fns
	fns=$(sql "SELECT count(*) FILTER (WHERE 'enable_seqscan=off' = ANY (proconfig)) || ' ' ||
	            coalesce(string_agg(proname, ',' ORDER BY proname) FILTER (WHERE 'enable_seqscan=off' = ANY (proconfig)
	                                                          AND NOT 'jit=off' = ANY (proconfig)), '')
	           FROM pg_proc WHERE proname LIKE 'ferry%'")
	[ "${fns%% *}" -ge 3 ] || fail "expected the claim's and the finish's functions to turn sequential scans off: $fns"
	assert_eq "${fns#* }" "" "functions with sequential scans off and JIT on"
}

# ferry_replica_health (GET /deployments/{id}/traffic's "replicas"): each
# replica's changes in the window from the deployment's events; one with
# none there had its health now all along; one whose row is gone has no
# health now; the health before the window is the first change's "from";
# a health recorded twice in a row (two writers) is one change
test_functions_replica_health_over_time() {
	start_daemon a
	local dep
	dep=$(sql "INSERT INTO deployments (name, model, port, actor) VALUES ('rh', 'm', 1, 't') RETURNING id")
	sql "INSERT INTO deployment_versions (deployment_id, version, ord, artifact, replicas, serve) VALUES
		($dep, '0.0.1', 1, 'a', 1, '[]'), ($dep, '0.0.2', 2, 'b', 1, '[]');
	     INSERT INTO deployment_replicas (deployment_id, version, idx, port, executor, health) VALUES
		($dep, '0.0.1', 1, 2, 'local', 'healthy'), ($dep, '0.0.2', 1, 3, 'local', 'unhealthy');
	     INSERT INTO deployment_events (deployment_id, at, actor, kind, detail) VALUES
		($dep, now() - interval '2 hours', 't', 'replica-started', '{\"version\": \"0.0.1\", \"replica\": 1}'),
		($dep, now() - interval '2 hours', 't', 'replica-healthy', '{\"version\": \"0.0.1\", \"replica\": 1, \"from\": \"starting\"}'),
		($dep, now() - interval '30 minutes', 't', 'replica-healthy', '{\"version\": \"0.0.2\", \"replica\": 1, \"from\": \"starting\"}'),
		($dep, now() - interval '29 minutes', 't', 'replica-healthy', '{\"version\": \"0.0.2\", \"replica\": 1, \"from\": \"starting\"}'),
		($dep, now() - interval '10 minutes', 't', 'replica-unhealthy', '{\"version\": \"0.0.2\", \"replica\": 1, \"from\": \"healthy\"}'),
		($dep, now() - interval '20 minutes', 't', 'replica-restarted', '{\"version\": \"0.0.9\", \"replica\": 2}'),
		($dep, now() - interval '5 minutes', 't', 'replica-removed', '{\"version\": \"0.0.9\", \"replica\": 2}'),
		($dep, now() - interval '5 minutes', 't', 'replica-healthy', '{\"version\": \"0.0.2\"}'),
		($dep, now() - interval '5 minutes', 't', 'canary-step', '{\"version\": \"0.0.2\", \"replica\": 1}')" >/dev/null
	out=$(sql "SELECT ferry_replica_health($dep, now() - interval '1 hour')")
	assert_eq "$(echo "$out" | json '[(r["version"], r["replica"], r["health"], r["before"], [h for t, h in r["changes"]]) for r in j]')" \
		'[["0.0.1", 1, "healthy", "healthy", []], ["0.0.2", 1, "unhealthy", "starting", ["healthy", "unhealthy"]], ["0.0.9", 2, null, null, ["starting", "stopped"]]]' \
		"each replica's health over the hour"
	assert_eq "$(echo "$out" | json 'round(j[1]["changes"][1][0] - j[1]["changes"][0][0])')" 1200 "the changes' times (20 minutes apart)"
	assert_eq "$(sql "SELECT ferry_replica_health(-1, now())::text")" "[]" "no such deployment: none"
}
