# Housekeeping a real installation needs: deleting a finished run (DELETE
# /runs/{id}, ferry delete) with its rows and files while the model versions
# it registered stay; retention of old runs' logs (FERRY_RETENTION_DAYS, the
# leader's `retention` task); and `ferry models download`, which rebuilds an
# artifact from the registry with every file's sha256 checked.

# hk_token NAME ROLE: creates a named token, prints it
hk_token() {
	ferryd token create "$1" --role "$2" 2>/dev/null
}

test_delete_finished_run() {
	start_daemon a
	f=$(wf reg <<'Y'
name: reg
steps:
  - name: train
    kind: train
    command: [sh, -c, 'echo weights >"$FERRY_OUTPUT_DIR/model.bin"; echo trained']
  - {name: register, kind: register, needs: [train], model: m}
Y
)
	busy=$(wf busy <<'Y'
name: busy
steps:
  - {name: s, command: [sleep, "30"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	[ -d "$FERRY_HOME/runs/$id/train" ] || fail "the run's attempt directories are there to begin with"
	blob=$(step_col "$id" register "outputs->>'artifact'")
	api GET "/api/v1/runs/$id"
	api GET "/api/v1/runs/$id"
	assert_eq "$CODE" 200 "the finished run is read (and kept in the run cache)"

	viewer=$(hk_token watcher viewer)
	# the API is told of it at once (NOTIFY ferry_tokens); the loop bounds the wait
	for _ in $(seq 1 30); do
		FERRY_API_TOKEN=$viewer api GET /api/v1/runs
		[ "$CODE" = 200 ] && break
		sleep 0.1
	done
	assert_eq "$CODE" 200 "the viewer's token is known within 3 s"
	FERRY_API_TOKEN=$viewer api DELETE "/api/v1/runs/$id"
	assert_eq "$CODE" 403 "a viewer cannot delete a run"

	b=$(submit "$busy")
	wait_step "$b" s running 10
	api DELETE "/api/v1/runs/$b"
	assert_eq "$CODE" 409 "a running run is not deleted"
	assert_eq "$(echo "$BODY" | json 'j["error"]["code"]')" conflict "the error code"
	assert_match "$(echo "$BODY" | json 'j["error"]["message"]')" "run $b is running.*stop it first" "the message says what to do"
	if out=$(ferry delete "$b" 2>&1); then fail "ferry delete of a running run succeeded"; fi
	assert_match "$out" "stop it first" "ferry delete says so too"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $b")" 1 "the running run keeps its rows"

	api DELETE /api/v1/runs/999999
	assert_eq "$CODE" 404 "an unknown run"
	assert_match "$(echo "$BODY" | json 'j["error"]["message"]')" "run 999999 not found" "the 404 names the run"

	api DELETE "/api/v1/runs/$id"
	assert_eq "$CODE" 200 "a finished run is deleted: $BODY"
	assert_eq "$(echo "$BODY" | json 'j["files_removed"]')" true "its files went too"
	api GET "/api/v1/runs/$id"
	assert_eq "$CODE" 404 "the deleted run is gone (not served from the run cache)"
	api GET "/api/v1/runs/$id/events"
	assert_eq "$CODE" 404 "its events are gone"
	[ -e "$FERRY_HOME/runs/$id" ] && fail "its directory $FERRY_HOME/runs/$id is still there"
	for t in steps events step_cache cache_sessions idempotency_keys; do
		assert_eq "$(sql "SELECT count(*) FROM $t WHERE run_id = $id")" 0 "no rows of the run left in $t"
	done
	assert_eq "$(sql "SELECT count(*) FROM attempts a LEFT JOIN steps s ON s.id = a.step_id WHERE s.id IS NULL")" 0 "no attempts left behind"
	api GET /api/v1/models/m/versions/0.0.1
	assert_eq "$CODE" 200 "the version the run registered stays"
	assert_eq "$(echo "$BODY" | json 'j["lineage"]["run"]')" "$id" "its lineage still names the run"
	[ -f "$blob" ] || fail "the registered artifact's blob stays"
	api DELETE "/api/v1/runs/$id"
	assert_eq "$CODE" 404 "deleting twice"

	ferry stop "$b" >/dev/null
	wait_run "$b" stopped 20
	out=$(ferry delete "$b") || fail "ferry delete of a stopped run: $out"
	assert_eq "$out" "run $b deleted" "ferry delete says what it did"
	assert_eq "$(sql "SELECT count(*) FROM runs WHERE id = $b")" 0 "the stopped run is gone"
	# its steps, their attempts and queue entries with it (migration 0037's statement triggers)
	assert_eq "$(sql "SELECT (SELECT count(*) FROM steps s WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = s.run_id))
	                       + (SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.id = a.step_id))
	                       + (SELECT count(*) FROM step_queue q WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.id = q.step_id))")" 0 \
		"no step, attempt or queue entry of a deleted run left"
	[ -e "$FERRY_HOME/runs/$b" ] && fail "the stopped run's directory is still there"
	ferry delete --help | grep -q "ferry delete RUN" || fail "ferry delete --help"
	kill -0 "$(daemon_pid a)" || fail "ferryd died"
}

test_retention_removes_old_logs() {
	# a bad setting stops the daemon at once (bounded: a daemon that ignored it would run on)
	rc=0
	FERRY_RETENTION_DAYS=soon timeout 10 ferryd >"$FERRY_HOME/bad.log" 2>&1 || rc=$?
	assert_eq "$rc" 2 "FERRY_RETENTION_DAYS must be a number"
	assert_match "$(cat "$FERRY_HOME/bad.log")" "FERRY_RETENTION_DAYS" "the error names the setting"

	start_daemon a FERRY_RETENTION_DAYS=1 FERRY_RETENTION_PERIOD_MS=300
	f=$(wf hi <<'Y'
name: hi
steps:
  - {name: greet, command: [sh, -c, 'echo hello from greet']}
Y
)
	old=$(submit "$f")
	recent=$(submit "$f")
	wait_run "$old" succeeded 20
	wait_run "$recent" succeeded 20
	assert_eq "$(ferry logs "$old" greet)" "hello from greet" "the log is there before"
	sql "UPDATE runs SET finished_at = now() - interval '2 days' WHERE id = $old" >/dev/null
	sql_until "(SELECT logs_removed_at IS NOT NULL FROM runs WHERE id = $old)" 10 || true
	[ -n "$(sql "SELECT logs_removed_at FROM runs WHERE id = $old")" ] || fail "retention never marked the old run"
	[ -e "$FERRY_HOME/runs/$old" ] && fail "the old run's directory is still there"
	[ -d "$FERRY_HOME/runs/$recent/greet" ] || fail "the recent run's directory was removed"
	assert_eq "$(sql "SELECT logs_removed_at IS NULL FROM runs WHERE id = $recent")" t "the recent run is not marked"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $old")" 1 "the old run's rows stay"

	api GET "/api/v1/runs/$old"
	assert_eq "$CODE" 200 "the old run is still there"
	assert_match "$(echo "$BODY" | json 'j["logs_removed_at"]')" '^20[0-9-]+T' "the API shows when its logs went"
	assert_eq "$(echo "$BODY" | json 'j["steps"][0]["state"]')" succeeded "with its steps"
	api GET "/api/v1/runs/$old/steps/greet/logs"
	assert_eq "$CODE" 410 "a removed log is gone, not empty"
	today=$(date -u +%Y-%m-%d)
	if out=$(ferry logs "$old" greet 2>&1); then fail "ferry logs of a removed log succeeded: $out"; fi
	assert_match "$out" "logs of run $old were removed by retention on $today" "ferry logs says why"
	if out=$(ferry logs "$old" 2>&1); then fail "ferry logs RUN of removed logs succeeded: $out"; fi
	assert_match "$out" "logs of run $old were removed by retention" "ferry logs RUN says why"
	assert_match "$(ferry get "$old")" "Logs: +removed by retention" "ferry get shows it"
	assert_eq "$(ferry logs "$recent" greet)" "hello from greet" "the recent run's log stays"
	assert_match "$(curl -s "$FERRY_URL/metrics")" 'ferry_periodic_runs_total\{task="retention"\} [1-9]' "the task runs"
}

# the sha256 of a file
hk_sha() { sha256sum "$1" | cut -d' ' -f1; }

test_models_download() {
	start_daemon a
	src="$FERRY_HOME/src"
	mkdir -p "$src/model/variables/deep"
	echo graph >"$src/model/saved_model.pb"
	head -c 300000 /dev/urandom >"$src/model/variables/deep/v.data"
	: >"$src/model/empty"
	head -c 1000 /dev/urandom >"$src/single.bin"
	f=$(wf dl <<Y
name: dl
steps:
  - name: train
    kind: train
    command: [sh, -c, 'cp -r $src/model "\$FERRY_OUTPUT_DIR/model"']
  - {name: register, kind: register, needs: [train], model: tree}
  - name: one
    kind: train
    command: [sh, -c, 'cp $src/single.bin "\$FERRY_OUTPUT_DIR/model.bin"']
  - {name: register1, kind: register, needs: [one], model: single}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(step_col "$id" register "outputs->>'kind'")" tree "a directory artifact"

	out=$(ferry models download tree 0.0.1 "$FERRY_HOME/got") || fail "download of a tree: $out"
	assert_match "$out" "3 files.*sha256 verified" "it says what it wrote"
	diff -r "$src/model" "$FERRY_HOME/got" || fail "the downloaded tree differs from the original"
	cmp "$src/model/variables/deep/v.data" "$FERRY_HOME/got/variables/deep/v.data" || fail "a file differs"

	out=$(ferry models download single 0.0.1 "$FERRY_HOME/one") || fail "download of a file: $out"
	cmp "$src/single.bin" "$FERRY_HOME/one/model.bin" || fail "the downloaded file differs"

	# a DIR that is not empty needs --force
	rc=0
	out=$(ferry models download tree 0.0.1 "$FERRY_HOME/got" 2>&1) || rc=$?
	assert_eq "$rc" 2 "a non-empty DIR is refused"
	assert_match "$out" "not empty.*--force" "and says how to go on"
	echo stale >"$FERRY_HOME/got/saved_model.pb"
	ferry models download tree 0.0.1 "$FERRY_HOME/got" --force >/dev/null || fail "--force"
	cmp "$src/model/saved_model.pb" "$FERRY_HOME/got/saved_model.pb" || fail "--force rewrote the file"

	# the API serves only what the manifest lists, from the store
	for p in ../../../api-token %2Fetc%2Fpasswd variables/../saved_model.pb ./saved_model.pb variables/ ""; do
		api GET "/api/v1/models/tree/versions/0.0.1/artifact?path=$p"
		assert_eq "$CODE" 400 "path '$p' is refused"
	done
	api GET "/api/v1/models/tree/versions/0.0.1/artifact?path=nope"
	assert_eq "$CODE" 404 "a path the manifest does not list"
	api GET "/api/v1/models/single/versions/0.0.1/artifact?path=x"
	assert_eq "$CODE" 400 "a single file has no paths"
	api GET "/api/v1/models/tree/versions/0.0.1/artifact?path=variables/deep/v.data"
	assert_eq "$CODE" 200 "a listed file"
	api GET /api/v1/models/nope/versions/0.0.1/artifact
	assert_eq "$CODE" 404 "an unknown model"

	# a blob whose bytes changed is caught and nothing is written
	blob=$(step_col "$id" register1 "outputs->>'artifact'")
	chmod u+w "$blob"
	echo tampered >"$blob"
	rc=0
	out=$(ferry models download single 0.0.1 "$FERRY_HOME/bad" 2>&1) || rc=$?
	assert_eq "$rc" 1 "a changed blob fails the download"
	assert_match "$out" "sha256" "the hash check says so"
	assert_eq "$(find "$FERRY_HOME/bad" -type f | wc -l)" 0 "nothing written"

	# a manifest that names a path outside DIR is refused before anything is written
	store="$FERRY_HOME/artifacts/sha256"
	fsha=$(hk_sha "$src/single.bin")
	printf '{"files":[{"bytes":1000,"path":"ok.bin","sha256":"%s"},{"bytes":1000,"path":"../evil","sha256":"%s"}],"format":"ferry-tree-1"}' \
		"$fsha" "$fsha" >"$FERRY_HOME/evil.json"
	msha=$(hk_sha "$FERRY_HOME/evil.json")
	mkdir -p "$store/${msha:0:2}"
	cp "$FERRY_HOME/evil.json" "$store/${msha:0:2}/$msha"
	sql "INSERT INTO artifacts (sha256, kind, bytes, path) VALUES ('$msha', 'tree', 2000, '$store/${msha:0:2}/$msha');
	     INSERT INTO model_versions (model_id, major, minor, patch, artifact, artifact_name, actor)
	     SELECT id, 9, 0, 0, '$msha', 'evil', 'test' FROM models WHERE name = 'tree'" >/dev/null
	mkdir -p "$FERRY_HOME/trap"
	rc=0
	out=$(ferry models download tree 9.0.0 "$FERRY_HOME/trap/in" 2>&1) || rc=$?
	assert_eq "$rc" 1 "a manifest with '..' is refused"
	assert_match "$out" "\.\./evil.*refusing" "the message names the path"
	[ -e "$FERRY_HOME/trap/evil" ] && fail "a file was written outside DIR"
	[ -e "$FERRY_HOME/trap/in/ok.bin" ] && fail "the safe file was written before the check"
	true
}
