# The rest of the API: events, logs (with follow), gates, idempotency, metrics, OpenAPI.

test_events_audit_trail() {
	start_daemon a
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
	api GET "/api/v1/runs/$id/events"
	assert_eq "$CODE" 200 "events"
	kinds=$(echo "$BODY" | json '" ".join(e["kind"] for e in j["events"] if e["step"] in (None, "flaky"))')
	assert_eq "$kinds" "run.created step.running step.retrying step.running step.succeeded run.succeeded" "flaky's story"
	assert_eq "$(echo "$BODY" | json 'j["events"][0]["actor"]')" "admin (as tester)" "creator"
	last=$(echo "$BODY" | json 'j["events"][-2]["id"]')
	api GET "/api/v1/runs/$id/events?after=$last"
	assert_eq "$(echo "$BODY" | json 'len(j["events"])')" 1 "after"
	api GET "/api/v1/runs/999/events"
	assert_eq "$CODE" 404 "unknown run"
}

test_logs_and_follow() {
	start_daemon a
	f=$(wf logs <<'Y'
name: logs
steps:
  - {name: talk, command: [sh, -c, 'for i in 1 2 3 4 5; do echo "line $i"; sleep 0.3; done']}
Y
)
	id=$(submit "$f")
	wait_step "$id" talk running 10
	# follow a live step: the stream ends by itself when the attempt does
	out=$(curl -sS -N --max-time 20 -H "Authorization: Bearer $FERRY_API_TOKEN" \
		"$FERRY_URL/api/v1/runs/$id/steps/talk/logs?follow=1")
	assert_eq "$(echo "$out" | tr '\n' ' ')" "line 1 line 2 line 3 line 4 line 5 " "followed to the end"
	api GET "/api/v1/runs/$id/steps/talk/logs?offset=7"
	assert_eq "$(echo "$BODY" | head -1)" "line 2" "offset"
	# a range: offset and length, the whole size in X-Ferry-Log-Size (how the console pages back)
	hdrs=$(curl -s -D - -o "$FERRY_HOME/range.txt" -H "Authorization: Bearer $FERRY_API_TOKEN" \
		"$FERRY_URL/api/v1/runs/$id/steps/talk/logs?offset=7&length=14" | tr -d '\r')
	assert_eq "$(cat "$FERRY_HOME/range.txt" | tr '\n' ' ')" "line 2 line 3 " "offset 7, length 14"
	assert_eq "$(echo "$hdrs" | sed -n 's/^Content-Length: //Ip')" 14 "the range's length"
	assert_eq "$(echo "$hdrs" | sed -n 's/^X-Ferry-Log-Size: //Ip')" 35 "the whole log's size"
	n=$(curl -s -o "$FERRY_HOME/range.txt" -w '%{size_download}' -H "Authorization: Bearer $FERRY_API_TOKEN" \
		"$FERRY_URL/api/v1/runs/$id/steps/talk/logs?offset=28&length=1000")
	assert_eq "$n $(cat "$FERRY_HOME/range.txt")" "7 line 5" "a length past the end stops at the end"
	api GET "/api/v1/runs/$id/steps/talk/logs?length=-1"
	assert_eq "$CODE" 400 "a negative length"
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" length "the field named"
	api GET "/api/v1/runs/$id/steps/talk/logs?length=5&follow=1"
	assert_eq "$CODE" 400 "length with follow"
	hdr=$(curl -s -D - -o /dev/null -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id/steps/talk/logs" | tr -d '\r' | sed -n 's/^X-Ferry-Attempt: //Ip')
	assert_eq "$hdr" 1 "attempt header"
	# following a finished attempt returns the whole log and ends
	out=$(curl -sS --max-time 5 -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id/steps/talk/logs?follow=1")
	assert_eq "$(echo "$out" | wc -l)" 5 "finished attempt"
	api GET "/api/v1/runs/$id/steps/nope/logs"
	assert_eq "$CODE" 404 "unknown step"
	api GET "/api/v1/runs/$id/steps/talk/logs?attempt=9"
	assert_eq "$CODE" 404 "unknown attempt"
	api GET "/api/v1/runs/$id/steps/..%2F..%2Fetc/logs"
	assert_eq "$CODE" 404 "no path from the URL reaches the file system"
}

test_gate_continue() {
	start_daemon a
	f=$(wf gate <<'Y'
name: gated
steps:
  - {name: prep, command: [true]}
  - {name: approve, kind: gate, needs: [prep]}
  - {name: ship, needs: [approve], command: [true]}
Y
)
	id=$(submit "$f")
	wait_step "$id" approve waiting 10
	assert_eq "$(step_col "$id" ship state)" blocked "waits behind the gate"
	api POST "/api/v1/runs/$id/steps/prep/continue" '{}'
	assert_eq "$CODE" 409 "continue a step that is not waiting"
	assert_match "$BODY" 'succeeded, not waiting' "message names the state"
	api POST "/api/v1/runs/$id/steps/approve/continue" '{"data": {"labels": "s3://bucket/labels.csv"}}'
	assert_eq "$CODE" 200 "continued"
	wait_run "$id" succeeded 10
	assert_eq "$(sql "SELECT outputs->>'labels' FROM steps WHERE run_id = $id AND name = 'approve'")" "s3://bucket/labels.csv" "payload is the output"
	assert_eq "$(sql "SELECT actor FROM events WHERE run_id = $id AND kind = 'step.continued'")" "admin (as tester)" "actor recorded"
	api POST "/api/v1/runs/$id/steps/approve/continue" '{}'
	assert_eq "$CODE" 409 "twice"
}

test_idempotent_start() {
	start_daemon a
	body='{"yaml": "name: idem\nsteps:\n  - {name: a, command: [true]}\n"}'
	out1=$(curl -sS -X POST -H "Authorization: Bearer $FERRY_API_TOKEN" -H 'Idempotency-Key: k-1' --data-binary "$body" "$FERRY_URL/api/v1/runs")
	out2=$(curl -sS -D "$FERRY_HOME/h2" -X POST -H "Authorization: Bearer $FERRY_API_TOKEN" -H 'Idempotency-Key: k-1' --data-binary "$body" "$FERRY_URL/api/v1/runs")
	assert_eq "$(echo "$out1" | json 'j["id"]')" "$(echo "$out2" | json 'j["id"]')" "same run"
	grep -qi '^Idempotent-Replayed: true' "$FERRY_HOME/h2" || fail "replay header"
	code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $FERRY_API_TOKEN" -H 'Idempotency-Key: k-1' \
		--data-binary '{"yaml": "name: other\nsteps:\n  - {name: b, command: [true]}\n"}' "$FERRY_URL/api/v1/runs")
	assert_eq "$code" 409 "same key, other body"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 1 "one run"
}

test_metrics_and_openapi() {
	start_daemon a
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
	m=$(curl -sS "$FERRY_URL/metrics")
	assert_match "$m" '^ferry_steps_dispatched_total [1-9]' "steps dispatched"
	assert_match "$m" 'ferry_runs\{state="succeeded"\} 1' "runs by state"
	assert_match "$m" 'ferry_api_request_duration_seconds_count [1-9]' "request histogram"
	assert_match "$m" 'ferry_dispatch_claim_seconds_bucket\{le="\+Inf"\} [1-9]' "claim histogram"
	doc=$(curl -sS "$FERRY_URL/api/v1/openapi.json")
	assert_eq "$(echo "$doc" | json 'j["openapi"]')" "3.0.3" "OpenAPI 3"
	# Prometheus' own linter on the live exposition: every family with HELP and TYPE, names and
	# units as it wants them (before: ferry_open_steps, ferry_queue_depth, ferry_runs had no HELP)
	command -v promtool >/dev/null || fail "promtool is not installed (make deps: prometheus)"
	out=$(curl -sS "$FERRY_URL/metrics" | promtool check metrics 2>&1) || fail "promtool check metrics: $out"
	assert_eq "$out" "" "promtool finds nothing to say"
}
