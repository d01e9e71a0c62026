# REST first slice: auth, errors, validation, nothing half-written.

test_api_auth_and_routes() {
	start_daemon a
	code=$(curl -s -o /dev/null -w '%{http_code}' "$FERRY_URL/healthz")
	assert_eq "$code" 200 "healthz without token"
	code=$(curl -s -o /tmp/ferry-body.$$ -w '%{http_code}' "$FERRY_URL/api/v1/runs")
	assert_eq "$code" 401 "no token"
	assert_match "$(cat /tmp/ferry-body.$$)" '"code":"unauthorized"' "401 body"
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer wrong" "$FERRY_URL/api/v1/runs")
	assert_eq "$code" 401 "wrong token"
	rm -f /tmp/ferry-body.$$
	api GET /api/v1/nope
	assert_eq "$CODE" 404 "unknown route"
	api DELETE /api/v1/runs
	assert_eq "$CODE" 405 "wrong method"
	allow=$(curl -s -D - -o /dev/null -X DELETE -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs" | tr -d '\r' | sed -n 's/^Allow: //Ip')
	assert_eq "$allow" "GET, HEAD, POST" "Allow header"
	api GET /api/v1/runs/999
	assert_eq "$CODE" 404 "unknown run"
	api GET /api/v1/runs/abc
	assert_eq "$CODE" 404 "non-numeric run id"
	code=$(curl -s -o /dev/null -w '%{http_code}' "$FERRY_URL/readyz")
	assert_eq "$code" 200 "readyz"
	# the API binds to loopback only
	grep -q "listening on http://127.0.0.1:" "$FERRY_HOME/ferryd-a.log" || fail "not on loopback"
}

test_api_bad_requests() {
	start_daemon a
	api POST /api/v1/runs '{"yaml": '
	assert_eq "$CODE" 400 "malformed JSON"
	assert_match "$BODY" 'malformed JSON at line 1' "position named"
	api POST /api/v1/runs '{"yaml": 42}'
	assert_eq "$CODE" 400 "wrong type"
	assert_match "$BODY" '"field":"yaml"' "field named"
	api POST /api/v1/runs '{}'
	assert_eq "$CODE" 400 "neither yaml nor workflow"
	api POST /api/v1/runs '{"workflow": "nope"}'
	assert_eq "$CODE" 404 "unregistered workflow"
	api POST /api/v1/runs '{"yaml": "name: x\nsteps:\n  - {name: a, command: [true]}\n", "params": [1]}'
	assert_eq "$CODE" 400 "params not an object"
	assert_match "$BODY" '"field":"params"' "params field"
	api POST /api/v1/runs '{"yaml": "name: x\nsteps:\n  - {name: a, command: [true]}\n", "params": {"ghost": "1"}}'
	assert_eq "$CODE" 400 "unknown param"
	assert_match "$BODY" 'ghost' "param named"
	api POST /api/v1/runs '{"yaml": "name: x\nsteps:\n  - {name: a, command: [true]}\n", "workdir": "relative/dir"}'
	assert_eq "$CODE" 400 "relative workdir"
	big=$(head -c 1100000 /dev/zero | tr '\0' 'a')
	printf '{"yaml":"%s"}' "$big" > "$FERRY_HOME/big.json"
	code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $FERRY_API_TOKEN" --data-binary @"$FERRY_HOME/big.json" "$FERRY_URL/api/v1/runs")
	assert_eq "$code" 413 "body over 1 MiB"
	assert_eq "$(sql "SELECT count(*) FROM runs") $(sql "SELECT count(*) FROM workflows")" "0 0" "nothing stored"
}

test_malformed_workflow_stores_nothing() {
	start_daemon a
	f=$(wf bad <<'Y'
name: bad
steps:
  - name: a
    command: [sh, -c, "echo {{params.missing}}"]
  - name: b
    needs: [a, ghost]
    timeout: 30
    command: [true]
  - name: c
    needs: [d]
    command: [true]
  - name: d
    needs: [c]
    command: [true]
Y
)
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read(), "filename": "bad.yaml"}))' "$f")
	api POST /api/v1/runs "$body"
	assert_eq "$CODE" 400 "rejected"
	assert_match "$BODY" '"code":"invalid_workflow"' "code"
	details=$(echo "$BODY" | json '"\n".join(j["error"]["details"])')
	echo "$details"
	assert_match "$details" '^bad.yaml:4:[0-9]+: .*missing' "undeclared param with line:col"
	assert_match "$details" 'bad.yaml:6:[0-9]+: .*ghost' "unknown need with line:col"
	assert_match "$details" 'bad.yaml:7:[0-9]+: .*unit' "duration without unit"
	assert_match "$details" 'cycle: ' "cycle named"
	assert_eq "$(sql "SELECT count(*) FROM runs") $(sql "SELECT count(*) FROM workflows") $(sql "SELECT count(*) FROM steps")" "0 0 0" "nothing stored"
}

test_registered_workflow_by_name() {
	start_daemon a
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read(), "filename": "hello.yaml"}))' "$ROOT/workflows/hello.yaml")
	api POST /api/v1/workflows "$body"
	assert_eq "$CODE" 201 "registered"
	hash=$(echo "$BODY" | json 'j["hash"]')
	api POST /api/v1/workflows "$body"
	assert_eq "$(echo "$BODY" | json 'j["created"]')" false "same content stored once"
	assert_eq "$(sql "SELECT count(*) FROM workflows")" 1 "one version"
	api POST /api/v1/runs '{"workflow": "hello", "params": {"who": "by-name"}}'
	assert_eq "$CODE" 201 "run by name"
	id=$(echo "$BODY" | json 'j["id"]')
	assert_eq "$(echo "$BODY" | json 'j["workflow_hash"]')" "$hash" "run records the hash"
	wait_run "$id" succeeded 30
	api GET "/api/v1/runs?state=succeeded&workflow=hello&limit=1"
	assert_eq "$(echo "$BODY" | json 'j["runs"][0]["id"]')" "$id" "list filter"
}

test_list_pagination() {
	start_daemon a
	for i in 1 2 3 4 5; do
		api POST /api/v1/runs '{"yaml": "name: p\nsteps:\n  - {name: a, command: [true]}\n"}'
	done
	api GET "/api/v1/runs?limit=2"
	assert_eq "$(echo "$BODY" | json '[r["id"] for r in j["runs"]]')" "[5, 4]" "first page newest first"
	cur=$(echo "$BODY" | json 'j["next_cursor"]')
	api GET "/api/v1/runs?limit=2&cursor=$cur"
	assert_eq "$(echo "$BODY" | json '[r["id"] for r in j["runs"]]')" "[3, 2]" "second page"
	api GET "/api/v1/runs?limit=0"
	assert_eq "$CODE" 400 "bad limit"
}

test_api_input_edges() {
	start_daemon a
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
	long="$(printf 'a%.0s' $(seq 1 63))é"
	code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $FERRY_API_TOKEN" -H "X-Ferry-Actor: $long" \
		-d '{"from":"join"}' "$FERRY_URL/api/v1/runs/$id/retry")
	assert_eq "$code" 200 "a long UTF-8 actor is cut between characters"
	assert_eq "$(sql "SELECT actor FROM events WHERE run_id = $id AND kind = 'run.retry'")" "admin (as $(printf 'a%.0s' $(seq 1 63)))" \
		"the name beside admin cut at 63 bytes, before the é"
	api POST /api/v1/runs '{"yaml": "name: x\nsteps:\n  - {name: a, command: [true]}\n", "workdir": "/bin/sh"}'
	assert_eq "$CODE" 400 "a file is no workdir"
	api GET "/api/v1/runs/+$id"
	assert_eq "$CODE" 404 "run ids are digits"
	api GET "/api/v1/runs?state=%ff"
	assert_eq "$CODE" 400 "invalid UTF-8 in a query value"
	assert_match "$BODY" '"field":"state"' "the field is named"
	api GET "/api/v1/runs/$id/steps/%ff/logs"
	assert_eq "$CODE" 400 "invalid UTF-8 in the path"
}

test_follow_streams_end_with_client_and_daemon() {
	start_daemon a
	f=$(wf quiet <<'Y'
name: quiet
steps:
  - {name: silent, command: [sleep, "60"]}
Y
)
	id=$(submit "$f")
	wait_step "$id" silent running 10
	pid=$(daemon_pid a)
	before=$(ls /proc/$pid/task | wc -l)
	for i in 1 2 3 4 5; do
		curl -sN -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id/steps/silent/logs?follow=1" >/dev/null &
		echo $! >> "$FERRY_HOME/curls"
	done
	sleep 1
	kill $(cat "$FERRY_HOME/curls")
	for _ in $(seq 1 15); do
		sleep 0.1
		[ "$(ls /proc/$pid/task | wc -l)" -le "$((before + 1))" ] && break
	done
	after=$(ls /proc/$pid/task | wc -l)
	echo "threads before $before, after abandoned follows $after"
	[ "$after" -le "$((before + 1))" ] || fail "abandoned follow streams keep $((after - before)) threads"
	curl -sN -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id/steps/silent/logs?follow=1" >/dev/null &
	sleep 0.5
	start=$(date +%s)
	stop_daemon a TERM    # grace 2 s; an open follow must not hold the daemon
	took=$(( $(date +%s) - start ))
	echo "stopped in ${took}s"
	[ "$took" -le 6 ] || fail "an open log stream held shutdown for ${took}s"
}
