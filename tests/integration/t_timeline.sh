# A run's timeline (GET /runs/{id}/timeline, db/functions/timeline.sql):
# one row per step in file order, each attempt its own bar (a retried step
# two), a fan-out's items collapsed into its one row with counts by state,
# a person's turn at a gate as a waiting bar, open while it waits.

test_timeline_rows_bars_and_fanout() {
	start_daemon a
	id=$(submit "$(wf tl <<'Y'
name: tl
steps:
  - name: prep
    command: [sh, -c, 'echo prep']
  - name: flaky
    needs: [prep]
    retry: {limit: 1, backoff: 100ms, max_backoff: 100ms}
    command: [sh, -c, 'test "$FERRY_ATTEMPT" -ge 2']
  - name: fan
    needs: [prep]
    foreach: {range: 30}
    command: [sh, -c, 'echo item']
  - name: approve
    kind: gate
    needs: [flaky, fan]
Y
)")
	wait_step "$id" approve waiting 60
	api GET "/api/v1/runs/$id/timeline"
	assert_eq "$CODE" 200 "GET timeline"
	assert_eq "$(echo "$BODY" | json '[r["step"] for r in j["rows"]]')" '["prep", "flaky", "fan", "approve"]' \
		"one row per step in file order, the fan-out's 30 items not among them"
	assert_eq "$(echo "$BODY" | json '[(b["attempt"], b["state"]) for r in j["rows"] if r["step"] == "flaky" for b in r["bars"] if b["kind"] == "attempt"]')" \
		'[[1, "failed"], [2, "succeeded"]]' "the retried step: two attempt bars, failed then succeeded"
	assert_eq "$(echo "$BODY" | json '[b["to"] is not None and b["from"] <= b["to"] for r in j["rows"] for b in r["bars"] if b["kind"] != "waiting"]' | grep -c false)" 0 \
		"every finished bar ends after it starts"
	assert_eq "$(echo "$BODY" | json '[b for r in j["rows"] if r["step"] == "flaky" for b in r["bars"] if b["kind"] == "queued"][-1]["to"] == [b for r in j["rows"] if r["step"] == "flaky" for b in r["bars"] if b["attempt"] == 2 and b["kind"] == "attempt"][0]["from"]')" \
		true "the retry's wait (its backoff) ends where its attempt starts"
	fan=$(echo "$BODY" | json '[r for r in j["rows"] if r["step"] == "fan"][0]')
	assert_eq "$(echo "$fan" | json '[j["items"]["total"], j["items"]["states"]]')" '[30, {"succeeded": 30}]' \
		"the fan-out row says its items, by state"
	assert_eq "$(echo "$fan" | json '[b["kind"] for b in j["bars"] if b["kind"] != "queued"]')" '["attempt", "items"]' \
		"… its expansion and one bar for all its items"
	assert_eq "$(echo "$BODY" | json '[(b["kind"], b["state"], b["to"]) for r in j["rows"] if r["step"] == "approve" for b in r["bars"]]')" \
		'[["waiting", "waiting", null]]' "the gate: one open waiting bar"
	api POST "/api/v1/runs/$id/steps/approve/continue" '{}'
	assert_eq "$CODE" 200 "continue the gate"
	wait_run "$id" succeeded
	api GET "/api/v1/runs/$id/timeline"
	assert_eq "$(echo "$BODY" | json '[(b["kind"], b["state"], b["to"] is not None) for r in j["rows"] if r["step"] == "approve" for b in r["bars"]]')" \
		'[["waiting", "succeeded", true]]' "… closed once continued"
	api GET /api/v1/runs/999999/timeline
	assert_eq "$CODE" 404 "a run that does not exist"
	assert_eq "$(echo "$BODY" | json 'j["error"]["code"]')" not_found "… a JSON error"
}
