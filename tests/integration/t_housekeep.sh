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
	sleep 1.5 # the API reads the tokens every second
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
	[ -e "$FERRY_HOME/runs/$b" ] && fail "the stopped run's directory is still there"
	ferry delete --help | grep -q "ferry delete RUN" || fail "ferry delete --help"
	kill -0 "$(daemon_pid a)" || fail "ferryd died"
}
