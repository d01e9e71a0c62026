# Hosts (issue 29, item 1): every daemon writes what its host offers with
# a heartbeat; GET /hosts and `ferry hosts` show the fleet. Two "hosts" on
# this machine are two daemons with their own FERRY_HOST on one database.

# hold_slot: a run whose one step sleeps, running; prints its id (with
# FERRY_MAX_JOBS=1 it holds the daemon's only slot, so the next step goes
# to another host)
hold_slot() {
	local id
	id=$(submit "$(wf hold <<'Y'
name: hold
steps:
  - {name: s, command: [sleep, "120"]}
Y
)")
	wait_step "$id" s running 20
	echo "$id"
}

# serve_py: $FERRY_HOME/serve.py, a model server that answers every POST
# with its model file's text, and $FERRY_HOME/sample.json
serve_py() {
	cat >"$FERRY_HOME/serve.py" <<'PY'
import http.server, json, os
model = open(os.environ["FERRY_MODEL_PATH"]).read().strip()
print("serving", model, flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, body):
        b = json.dumps(body).encode(); self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self): self.reply({})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0))); self.reply({"model": model})
http.server.ThreadingHTTPServer((os.environ.get("FERRY_BIND_ADDR", "127.0.0.1"), int(os.environ["FERRY_PORT"])), H).serve_forever()
PY
	echo '{"inputs": []}' >"$FERRY_HOME/sample.json"
}

# two hosts up with what they declared; a job counted on the host that runs it;
# kill -9 of one: lost after its lease; a clean stop: down; back: up again
test_hosts_registered_lost_and_back() {
	start_daemon a FERRY_HOST=host-a FERRY_GPUS=0,1 FERRY_RESOURCES=license=2 FERRY_HOST_LABELS="gpu=true,zone=eu-1"
	start_another b FERRY_HOST=host-b FERRY_GPUS=none
	local i
	for i in $(seq 1 50); do
		api GET /api/v1/hosts
		[ "$(echo "$BODY" | json '" ".join(h["name"] + "=" + h["state"] for h in j["hosts"])')" = "host-a=up host-b=up" ] && break
		sleep 0.1
	done
	assert_eq "$(echo "$BODY" | json '" ".join(h["name"] + "=" + h["state"] for h in j["hosts"])')" "host-a=up host-b=up" "both up"
	assert_eq "$(echo "$BODY" | json '[h["gpus"] for h in j["hosts"] if h["name"] == "host-a"][0]')" '[{"index": 0}, {"index": 1}]' "host-a's declared GPUs"
	assert_eq "$(echo "$BODY" | json '[[h["labels"], h["resources"]] for h in j["hosts"] if h["name"] == "host-a"][0]')" \
		'[{"gpu": "true", "zone": "eu-1"}, {"license": 2}]' "its labels and resources"
	assert_eq "$(echo "$BODY" | json '[len(h["gpus"]) for h in j["hosts"] if h["name"] == "host-b"][0]')" 0 "FERRY_GPUS=none"
	assert_eq "$(echo "$BODY" | json 'all(h["cpus"] >= 1 and h["memory_bytes"] > 0 and h["address"].startswith("http://127.0.0.1:") for h in j["hosts"])')" true \
		"CPUs, memory and the address each detected"
	# a job runs on one of them: counted there
	id=$(submit "$(wf hold <<'Y'
name: hold
steps:
  - {name: s, command: [sleep, "30"]}
Y
)")
	wait_step "$id" s running 20
	ran=$(sql "SELECT a.host FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")
	api GET /api/v1/hosts
	assert_eq "$(echo "$BODY" | json "[h['running_jobs'] for h in j['hosts'] if h['name'] == '$ran'][0]")" 1 "the running job on $ran"
	api GET "/api/v1/runs/$id"
	assert_eq "$(echo "$BODY" | json 'j["steps"][0]["attempt_list"][0]["host"]')" "$ran" "the run's JSON names the attempt's host"
	ferry stop "$id" >/dev/null
	out=$(ferry hosts)
	echo "$out"
	assert_match "$out" 'host-a +up .* 2 +[01] +0 +http://127\.0\.0\.1:[0-9]+ +gpu=true,zone=eu-1' "ferry hosts: host-a's line"
	# kill -9 of b: up until its lease (2 s) passes, then lost
	stop_daemon b KILL
	for i in $(seq 1 60); do
		api GET /api/v1/hosts
		[ "$(echo "$BODY" | json '[h["state"] for h in j["hosts"] if h["name"] == "host-b"][0]')" = lost ] && break
		sleep 0.1
	done
	assert_eq "$(echo "$BODY" | json '[h["state"] for h in j["hosts"] if h["name"] == "host-b"][0]')" lost "host-b lost after its lease"
	assert_eq "$(echo "$BODY" | json '[h["daemons"] for h in j["hosts"] if h["name"] == "host-b"][0]')" 0 "no daemon up on it"
	# back: up again (a new daemon row for the same host)
	start_another b FERRY_HOST=host-b
	for i in $(seq 1 50); do
		api GET /api/v1/hosts
		[ "$(echo "$BODY" | json '[h["state"] for h in j["hosts"] if h["name"] == "host-b"][0]')" = up ] && break
		sleep 0.1
	done
	assert_eq "$(echo "$BODY" | json '[h["state"] for h in j["hosts"] if h["name"] == "host-b"][0]')" up "host-b back"
	# a clean stop: down at once, not lost
	stop_daemon b
	api GET /api/v1/hosts
	assert_eq "$(echo "$BODY" | json '[h["state"] for h in j["hosts"] if h["name"] == "host-b"][0]')" down "a clean stop: down"
	assert_eq "$(sql "SELECT count(*) FROM daemons WHERE host = 'host-b'")" 2 "one row per daemon"
}

# a setting that does not parse stops the start with the reason; the name must be a host name
test_hosts_bad_settings_refused() {
	spawn_daemon a FERRY_HOST_LABELS=gpu
	for _ in $(seq 1 100); do kill -0 "$(daemon_pid a)" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$(daemon_pid a)" 2>/dev/null || fail "ferryd started with FERRY_HOST_LABELS=gpu"
	assert_match "$(cat "$FERRY_HOME/ferryd-a.log")" 'FERRY_HOST_LABELS: "gpu" is not NAME=VALUE' "the reason"
	spawn_daemon a "FERRY_HOST=bad host"
	for _ in $(seq 1 100); do kill -0 "$(daemon_pid a)" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$(daemon_pid a)" 2>/dev/null || fail "ferryd started with FERRY_HOST='bad host'"
	assert_match "$(cat "$FERRY_HOME/ferryd-a.log")" 'FERRY_HOST "bad host": a host name' "the reason"
	spawn_daemon a FERRY_GPUS=0,x
	for _ in $(seq 1 100); do kill -0 "$(daemon_pid a)" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$(daemon_pid a)" 2>/dev/null || fail "ferryd started with FERRY_GPUS=0,x"
	assert_match "$(cat "$FERRY_HOME/ferryd-a.log")" 'FERRY_GPUS: "x" is neither' "the reason"
}

# logs from anywhere (issue 29, item 4): a step that ran on host A (its own
# FERRY_HOME: no shared disk) has its log served by host B's API — whole, a
# range, followed to its end — through A's API; with A's daemon gone, B
# answers 503 naming host-a. A log that is on B's own disk is served there.
test_hosts_log_served_by_another_host() {
	# a lease long enough that host-a is still "up" (down, not lost) when it is asked right after its kill:
	# with the suite's 2 s, a loaded machine let it lapse first and the copy on this disk was served (cc16)
	start_daemon a FERRY_HOST=host-a FERRY_LEASE_MS=10000
	id=$(submit "$(wf talk <<'Y'
name: talk
steps:
  - {name: s, foreach: [1], command: [sh, -c, 'for i in 1 2 3; do echo "line $i"; sleep 0.3; done; sleep 2; echo end']}
Y
)")
	wait_step "$id" 's[0]' running 20
	mkdir -p "$FERRY_HOME/b"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	local b; b=$(daemon_url b)
	[ ! -e "$FERRY_HOME/b/runs/$id" ] || fail "host-b has the run's directory: nothing would be forwarded"
	# followed from host-b while it runs on host-a, to its end
	out=$(curl -sS -m 30 -H "Authorization: Bearer $FERRY_API_TOKEN" -D "$FERRY_HOME/h.txt" \
		"$b/api/v1/runs/$id/steps/s%5B0%5D/logs?follow=1")
	assert_eq "$(echo "$out" | tr '\n' '|')" "line 1|line 2|line 3|end|" "followed through host-b"
	assert_match "$(cat "$FERRY_HOME/h.txt")" 'X-Ferry-Host: host-a' "it says where it came from"
	assert_match "$(cat "$FERRY_HOME/h.txt")" 'X-Ferry-Attempt: 1' "which attempt"
	wait_run "$id" succeeded 20
	# whole, and a range
	FERRY_URL=$b api GET "/api/v1/runs/$id/steps/s%5B0%5D/logs"
	assert_eq "$CODE" 200 "whole: $BODY"
	assert_eq "$(echo "$BODY" | grep -c '^line ')" 3 "the whole log"
	FERRY_URL=$b api GET "/api/v1/runs/$id/steps/s%5B0%5D/logs?offset=7&length=6"
	assert_eq "$BODY" "line 2" "a range"
	# the CLI does not care where it ran
	assert_match "$(FERRY_URL=$b ferry logs "$id" 's[0]')" 'line 3' "ferry logs through host-b"
	assert_eq "$(FERRY_URL=$b ferry logs "$id" 's[0]' --host | head -1)" "==> s[0] (attempt 1, host host-a) <==" "--host names where it ran"
	assert_match "$(FERRY_URL=$b ferry logs "$id" --host | grep '^==>' | head -1)" '^==> .* \(attempt 1, host host-a\) <==$' "… for every step too"
	# host-a's daemon killed: its API does not answer, 503 naming it
	stop_daemon a KILL
	FERRY_URL=$b api GET "/api/v1/runs/$id/steps/s%5B0%5D/logs"
	assert_eq "$CODE" 503 "host-a down: $BODY"
	assert_match "$BODY" 'host-a' "the answer names the host"
	# lost (its lease passed), its disk elsewhere: 503 saying so; its disk readable here: served here
	mv "$FERRY_HOME/runs" "$FERRY_HOME/runs.away"
	for _ in $(seq 1 300); do # its 10 s lease
		FERRY_URL=$b api GET "/api/v1/runs/$id/steps/s%5B0%5D/logs"
		[[ "$BODY" == *"which is lost"* ]] && break
		sleep 0.1
	done
	assert_eq "$CODE" 503 "host-a lost: $BODY"
	assert_match "$BODY" 'on host host-a, which is lost \(last seen ' "saying so"
	mv "$FERRY_HOME/runs.away" "$FERRY_HOME/runs"
	FERRY_URL=$b api GET "/api/v1/runs/$id/steps/s%5B0%5D/logs"
	assert_eq "$CODE $(echo "$BODY" | grep -c '^end$')" "200 1" "a copy on this machine's disk, served here"
}

# artifacts from anywhere (issue 29, item 5): a model registered on host A
# (its own FERRY_HOME: no shared disk) is downloaded through host B's API,
# which fetches the blob from A by its sha256, checks the hash, keeps it
# and records itself as a holder; bytes that do not hash to their name are
# refused and not kept; a deploy step that runs on B starts its replica
# from the blob it fetched from A.
test_hosts_model_from_another_host() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
	trap 'stop_daemons; stop_deployments "$FERRY_HOME"; stop_deployments "$FERRY_HOME/b"' EXIT
	# one job at a time on A: a job that holds it leaves the deploy to B; blobs
	# copied only on demand here (test_hosts_blobs_kept_on_two_hosts copies ahead)
	export FERRY_ARTIFACT_COPIES=1
	start_daemon a FERRY_HOST=host-a FERRY_MAX_JOBS=1
	serve_py
	reg=$(wf reg <<'Y'
name: reg
params:
  w: {default: "A"}
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights {{params.w}}" >"$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m}
Y
)
	wait_run "$(submit "$reg")" succeeded 30
	wait_run "$(submit "$reg" '{"w": "B"}')" succeeded 30
	dep=$(wf dep <<Y
name: dep
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights C" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m}
  - {name: deploy, kind: deploy, needs: [register], model: m, approve: true, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, traffic: 100}
Y
)
	did=$(submit "$dep")
	wait_step "$did" deploy waiting 30
	hold=$(hold_slot) || fail "no run holds host-a's one slot"
	for v in 0.0.1 0.0.2 0.0.3; do
		assert_eq "$(sql "SELECT string_agg(host, ',') FROM blob_holders WHERE sha256 = (SELECT artifact FROM model_versions WHERE version = '$v')")" host-a "$v held by host-a"
	done
	mkdir -p "$FERRY_HOME/b"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	local b; b=$(daemon_url b)
	# downloaded through B: fetched from A, its hash checked, kept, B a holder
	sha1=$(sql "SELECT artifact FROM model_versions WHERE version = '0.0.1'")
	[ ! -e "$FERRY_HOME/b/artifacts/sha256/${sha1:0:2}/$sha1" ] || fail "B has the blob before it asked for it"
	out=$(FERRY_URL=$b ferry models download m 0.0.1 "$FERRY_HOME/got1" 2>&1) || fail "download through B: $out"
	assert_eq "$(cat "$FERRY_HOME/got1/model.bin")" "weights A" "the bytes registered on A"
	assert_eq "$(sha256sum <"$FERRY_HOME/b/artifacts/sha256/${sha1:0:2}/$sha1" | cut -d' ' -f1)" "$sha1" "B keeps the blob under its name"
	assert_eq "$(sql "SELECT string_agg(host, ',' ORDER BY host) FROM blob_holders WHERE sha256 = '$sha1'")" host-a,host-b "B recorded as a holder"
	logged "blob ${sha1:0:12}…: 10 bytes fetched from http://127.0.0.1:" "$FERRY_HOME/ferryd-b.log" || fail "B's log does not say it fetched the blob"
	# A's copy of 0.0.2 damaged: B refuses what A sends, keeps nothing, says why
	sha2=$(sql "SELECT artifact FROM model_versions WHERE version = '0.0.2'")
	chmod u+w "$FERRY_HOME/artifacts/sha256/${sha2:0:2}/$sha2"
	echo "weights X" >"$FERRY_HOME/artifacts/sha256/${sha2:0:2}/$sha2"
	FERRY_URL=$b api GET /api/v1/models/m/versions/0.0.2/artifact
	assert_eq "$CODE" 503 "damaged on A: $BODY"
	assert_match "$BODY" "sent bytes whose sha256 is [0-9a-f]{64}, not $sha2: refused" "the hash named"
	[ ! -e "$FERRY_HOME/b/artifacts/sha256/${sha2:0:2}/$sha2" ] || fail "B kept bytes that do not hash to their name"
	assert_eq "$(sql "SELECT count(*) FROM blob_holders WHERE sha256 = '$sha2' AND host = 'host-b'")" 0 "B not a holder of it"
	# a name that is not a sha256 is a 400 (test_roles walks the route with every role)
	FERRY_URL=$b api GET /api/v1/blobs/nothex
	assert_eq "$CODE" 400 "a bad name: $BODY"
	# the deploy runs on B (A's one slot is taken): its replica serves the blob B fetched from A
	api POST "/api/v1/runs/$did/steps/deploy/continue" '{}'
	assert_eq "$CODE" 200 "approve: $BODY"
	wait_run "$did" succeeded 60
	assert_eq "$(sql "SELECT a.host FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $did AND s.name = 'deploy' ORDER BY a.attempt DESC LIMIT 1")" host-b "the deploy ran on B"
	sha3=$(sql "SELECT artifact FROM model_versions WHERE version = '0.0.3'")
	[ -e "$FERRY_HOME/b/artifacts/sha256/${sha3:0:2}/$sha3" ] || fail "B did not fetch 0.0.3 for its replica"
	port=$(sql "SELECT port FROM deployment_replicas ORDER BY idx LIMIT 1")
	assert_eq "$(curl -sS -m 10 -X POST -d '{}' "http://127.0.0.1:$port/")" '{"model": "weights C"}' "the replica on B serves the model registered on A"
	# its log, on B's disk, through A's API (forwarded to B's)
	out=$(curl -sS -m 20 -H "Authorization: Bearer $FERRY_API_TOKEN" -D "$FERRY_HOME/h.txt" "$FERRY_URL/api/v1/deployments/1/logs")
	assert_match "$out" 'serving weights C' "the replica's log through host-a"
	assert_match "$(cat "$FERRY_HOME/h.txt")" 'X-Ferry-Host: host-b' "forwarded to the host that runs it"
	ferry stop "$hold" >/dev/null
}

# blobs registered before the database said who holds them (migration
# 0031) are recorded at the daemon's start — a directory's files too — so
# another host can fetch them from here
test_hosts_blobs_announced_at_start() {
	start_daemon a FERRY_HOST=host-a
	id=$(submit "$(wf tree <<'Y'
name: tree
steps:
  - {name: train, kind: train, command: [sh, -c, 'mkdir -p "$FERRY_OUTPUT_DIR/m"; echo one >"$FERRY_OUTPUT_DIR/m/a"; echo two >"$FERRY_OUTPUT_DIR/m/b"; echo "{\"model\": \"$FERRY_OUTPUT_DIR/m\"}" >"$FERRY_OUTPUT_DIR/outputs.json"']}
  - {name: register, kind: register, needs: [train], model: t}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT kind FROM artifacts")" tree "a directory registered"
	assert_eq "$(sql "SELECT count(*) FROM blob_holders WHERE host = 'host-a'")" 3 "its manifest and two files held by host-a"
	stop_daemon a
	sql "DELETE FROM blob_holders" >/dev/null
	start_daemon a FERRY_HOST=host-a
	logged "recorded 3 blobs of this host's store as held here" "$FERRY_HOME/ferryd-a.log" 10 ||
		fail "the blobs were not recorded at start"
	assert_eq "$(sql "SELECT count(*) FROM blob_holders WHERE host = 'host-a'")" 3 "recorded again"
}

# FERRY_ARTIFACT_COPIES (default 2): a blob registered on A is copied to
# one more host ahead of need — one, not every other host — and when A is
# lost, another host takes a copy from B, so two live hosts hold it again
test_hosts_blobs_kept_on_two_hosts() {
	start_daemon a FERRY_HOST=host-a
	wait_run "$(submit "$(wf reg <<'Y'
name: reg
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo weights >"$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m}
Y
)")" succeeded 30
	sha=$(sql "SELECT artifact FROM model_versions")
	holders() { sql "SELECT string_agg(host, ',' ORDER BY host) FROM blob_holders WHERE sha256 = '$sha'"; }
	assert_eq "$(holders)" host-a "held where it was registered"
	mkdir -p "$FERRY_HOME/b" "$FERRY_HOME/c"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	sql_until "(SELECT count(*) FROM blob_holders WHERE sha256 = '$sha') = 2" 20 || fail "not copied to host-b: $(holders)"
	assert_eq "$(holders)" host-a,host-b "copied to the second host"
	assert_eq "$(cat "$FERRY_HOME/b/artifacts/sha256/${sha:0:2}/$sha")" weights "the bytes on host-b"
	logged "copies: blob ${sha:0:12}… now also kept on this host" "$FERRY_HOME/ferryd-b.log" || fail "host-b's log does not say so"
	# a third host: two copies are enough
	start_another c FERRY_HOST=host-c FERRY_HOME="$FERRY_HOME/c"
	# two rounds of its copies task (the first at its start, then every 5 s): it chose to take none
	local c n=0; c=$(daemon_url c)
	for _ in $(seq 1 150); do
		n=$(curl -sS -m 5 "$c/metrics" | sed -n 's/^ferry_periodic_runs_total{task="copies"} \([0-9]*\).*/\1/p')
		[ "${n:-0}" -ge 2 ] && break
		sleep 0.1
	done
	[ "${n:-0}" -ge 2 ] || fail "host-c's copies task did not run twice (runs: ${n:-none})"
	assert_eq "$(holders)" host-a,host-b "no third copy"
	# host-a lost: host-c takes a copy from host-b
	stop_daemon a KILL
	sql_until "(SELECT count(*) FROM blob_holders WHERE sha256 = '$sha') = 3" 30 || fail "no new copy after host-a was lost: $(holders)"
	assert_eq "$(holders)" host-a,host-b,host-c "host-c took a copy"
	logged "fetched from $(daemon_url b)" "$FERRY_HOME/ferryd-c.log" || fail "host-c did not fetch it from host-b"
}

# step outputs between hosts (issue 29, item 5): a train step runs on A, the
# evaluate step below it on B (no shared directory: each its own
# FERRY_HOME). B fetches the model file from A's API, checks its sha256,
# keeps it in its own directory for that attempt and renders
# {{steps.train.outputs.model}} as that path; the output route serves the
# file with its hash through any host; with A down, a step on B that needs
# A's file fails saying where the file is.
test_hosts_outputs_travel_between_hosts() {
	# one job at a time on A: a job that holds it leaves the evaluate to B
	start_daemon a FERRY_HOST=host-a FERRY_MAX_JOBS=1
	f=$(wf te <<'Y'
name: te
steps:
  - {name: train, kind: train, command: [sh, -c, 'printf "weights 42" >"$FERRY_OUTPUT_DIR/model.bin"; echo "{\"rows\": 3}" >"$FERRY_OUTPUT_DIR/outputs.json"']}
  - {name: ok, kind: gate, needs: [train]}
  - name: evaluate
    kind: evaluate
    needs: [ok]
    command: [sh, -c, 'echo "{{steps.train.outputs.model}}" >"$FERRY_OUTPUT_DIR/path.txt"; cat "{{steps.train.outputs.model}}" >"$FERRY_OUTPUT_DIR/seen.txt" && echo "{\"accuracy\": 1, \"rows\": {{steps.train.outputs.rows}}}" >"$FERRY_OUTPUT_DIR/metrics.json"']
Y
)
	id=$(submit "$f")
	wait_step "$id" ok waiting 30
	hold=$(hold_slot) || fail "no run holds host-a's one slot"
	mkdir -p "$FERRY_HOME/b"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	local b; b=$(daemon_url b)
	api POST "/api/v1/runs/$id/steps/ok/continue" '{}'
	assert_eq "$CODE" 200 "continue: $BODY"
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT a.host FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'evaluate'")" host-b "the evaluate ran on B"
	local here="$FERRY_HOME/b/runs/$id/evaluate/1/out"
	assert_eq "$(cat "$here/path.txt")" "$FERRY_HOME/b/runs/$id/train/1/out/model.bin" "the template named B's copy"
	assert_eq "$(cat "$here/seen.txt")" "weights 42" "the job read A's bytes on B"
	assert_eq "$(step_col "$id" evaluate "(metrics->>'rows')::float::int")" 3 "a value output (outputs.json) needs no file"
	sha=$(printf "weights 42" | sha256sum | cut -d' ' -f1)
	logged "output model.bin of step train attempt 1 fetched from host host-a: 10 bytes, sha256 ${sha:0:12}" \
		"$FERRY_HOME/ferryd-b.log" || fail "B's log does not say it fetched the file"
	# the route: through B (forwarded to A) with the hash; bad names refused
	curl -sS -m 20 -D "$FERRY_HOME/h.txt" -o "$FERRY_HOME/got.bin" -H "Authorization: Bearer $FERRY_API_TOKEN" \
		"$b/api/v1/runs/$id/steps/train/outputs/model.bin" || fail "GET the output through B"
	assert_eq "$(cat "$FERRY_HOME/got.bin")" "weights 42" "the output's bytes through B"
	assert_match "$(tr -d '\r' <"$FERRY_HOME/h.txt")" "X-Ferry-Sha256: $sha" "its sha256 said"
	assert_match "$(tr -d '\r' <"$FERRY_HOME/h.txt")" "X-Ferry-Host: host-a" "served by the host that ran it"
	FERRY_URL=$b api GET "/api/v1/runs/$id/steps/train/outputs/..%2Fout%2Fmodel.bin"
	assert_eq "$CODE" 404 "a path for a file name matches no route: $BODY"
	FERRY_URL=$b api GET "/api/v1/runs/$id/steps/train/outputs/..."
	assert_eq "$CODE" 400 "a dot name: $BODY"
	assert_match "$BODY" '"file"' "the field named"
	FERRY_URL=$b api GET "/api/v1/runs/$id/steps/train/outputs/nothing.bin"
	assert_eq "$CODE" 404 "a file it did not leave: $BODY"
	# host-a down: a new run's evaluate on B cannot get the file, and says where it is
	ferry stop "$hold" >/dev/null
	stop_daemon b
	id2=$(submit "$f")
	wait_step "$id2" ok waiting 30
	stop_daemon a KILL
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	b=$(daemon_url b)
	FERRY_URL=$b api POST "/api/v1/runs/$id2/steps/ok/continue" '{}'
	wait_run "$id2" failed 60
	reason=$(step_col "$id2" evaluate reason)
	assert_match "$reason" "^output model.bin of step train \(attempt 1" "the reason names the file: $reason"
	assert_match "$reason" "host-a" "and its host"
}

# Replicas across hosts (issue 29, item 2): a replica is kept by the host
# its handle names — the one daemon there that holds the host's lock checks
# it and restarts it; the leader never judges another host's replica by a
# pid, weighs it by its recorded health at its host's address, and when its
# host is lost starts a replacement on its own host, on a port of its own;
# the lost host, back, stops the old ones (fenced out).
test_hosts_replicas_kept_by_their_host_replaced_when_lost() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
	trap 'stop_daemons; stop_deployments "$FERRY_HOME"; stop_deployments "$FERRY_HOME/b"' EXIT
	start_daemon a FERRY_HOST=host-a FERRY_MAX_JOBS=1
	serve_py
	hold=$(hold_slot) || fail "no run holds host-a's one slot"
	mkdir -p "$FERRY_HOME/b"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	dep=$(wf dep <<Y
name: dep
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights F" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m}
  - {name: deploy, kind: deploy, needs: [register], model: m, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, traffic: 100, replicas: 2}
Y
)
	did=$(submit "$dep")
	wait_run "$did" succeeded 90
	assert_eq "$(sql "SELECT a.host FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $did AND s.name = 'deploy' ORDER BY a.attempt DESC LIMIT 1")" host-b "the deploy ran on B"
	# placed across the hosts: one on each (the step, on B, placed one on A; A's daemon started it)
	assert_eq "$(sql "SELECT string_agg(handle->>'host', ',' ORDER BY handle->>'host') FROM deployment_replicas")" host-a,host-b "one replica on each host"
	assert_match "$(ferry logs "$did" deploy)" "replica [12] placed on host host-a: its daemon starts it" "the step's log says where"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind = 'replica-placed' AND detail->>'host' = 'host-a' AND detail ? 'replica'")" 1 \
		"… and so does an event (the deployment's history)"
	logged "keeping the replicas of host host-b" "$FERRY_HOME/ferryd-b.log" 10 || fail "B's daemon does not keep its host's replicas"
	front=$(sql "SELECT port FROM deployments")
	local out i rb
	for i in $(seq 1 100); do
		out=$(curl -sS -m 5 -X POST -d '{}' "http://127.0.0.1:$front/" 2>/dev/null) && [ -n "$out" ] && break
		sleep 0.1
	done
	assert_match "$out" '"model": "weights F"' "the front (HAProxy on the leader, A) serves"
	rb=$(sql "SELECT idx FROM deployment_replicas WHERE handle->>'host' = 'host-b'")
	# B's replica dies: B's keeper restarts it, on B; the leader (A) does not touch it
	owner_b=$(sql "SELECT owner FROM daemons WHERE host = 'host-b' AND stopped_at IS NULL ORDER BY last_seen DESC LIMIT 1")
	pid1=$(sql "SELECT handle->>'pid' FROM deployment_replicas WHERE idx = $rb")
	kill -KILL -- "-$pid1" 2>/dev/null || kill -KILL "$pid1"
	sql_until "(SELECT generation FROM deployment_replicas WHERE idx = $rb) = 2" 30 || fail "B's replica was not restarted"
	assert_eq "$(sql "SELECT handle->>'host' FROM deployment_replicas WHERE idx = $rb")" host-b "restarted on its host"
	assert_eq "$(sql "SELECT actor FROM deployment_events WHERE kind = 'replica-restarted' ORDER BY id DESC LIMIT 1")" "$owner_b" "by B's daemon, not the leader"
	# host B is lost: its daemon killed, its replica cut off (stopped: it runs on but answers nothing,
	# as behind a partition); the leader replaces it on A, on a new port (a replica of a lost host
	# that still answers its health check is left alone: only its daemon is gone)
	old_port=$(sql "SELECT port FROM deployment_replicas WHERE idx = $rb")
	old_pid=$(sql "SELECT handle->>'pid' FROM deployment_replicas WHERE idx = $rb")
	# the model is kept on two hosts (FERRY_ARTIFACT_COPIES): A has its copy before B goes
	sql_until "(SELECT count(*) FROM blob_holders WHERE sha256 = (SELECT artifact FROM model_versions LIMIT 1)) >= 2" 60 ||
		fail "the model is not on two hosts"
	stop_daemon b KILL
	kill -STOP -- "-$old_pid"
	sql_until "(SELECT count(*) FROM deployment_replicas WHERE handle->>'host' = 'host-a') = 2" 60 ||
		fail "B's replica was not replaced on A: $(sql "SELECT idx, handle->>'host', health, last_error FROM deployment_replicas")"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind = 'replica-replaced' AND detail->>'lost_host' = 'host-b'")" 1 "one replacement, naming the lost host"
	[ "$(sql "SELECT port FROM deployment_replicas WHERE idx = $rb")" != "$old_port" ] || fail "the replacement kept the lost replica's port"
	for i in $(seq 1 300); do
		out=$(curl -sS -m 5 -X POST -d '{}' "http://127.0.0.1:$front/" 2>/dev/null) && case $out in *'"model"'*) break ;; esac
		sleep 0.1
	done
	assert_match "$out" '"model": "weights F"' "the front serves"
	kill -0 "$old_pid" 2>/dev/null || fail "B's replica $old_pid should still run while B is away"
	# B back (the partition over): its keeper fences its old replica (its row names the replacement); nothing started twice
	kill -CONT -- "-$old_pid"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	for i in $(seq 1 200); do kill -0 "$old_pid" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$old_pid" 2>/dev/null || fail "B's old replica $old_pid still runs after B came back"
	logged "runs here although no deployment's replica is it any more (its replica was replaced on another host" \
		"$FERRY_HOME/ferryd-b.log" 5 || fail "B's log does not say why it stopped it"
	sleep 5 # two more rounds of B's keeper and of the leader
	assert_eq "$(sql "SELECT string_agg(handle->>'host', ',' ORDER BY idx) FROM deployment_replicas")" host-a,host-a "the replicas stay on A"
	# the step's start on B, A's placed start, B's restart, the replacement: and no start after B came back
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind IN ('replica-started', 'replica-restarted', 'replica-replaced')")" 4 "no start after B came back"
	ferry stop "$hold" >/dev/null
}

# three hosts, each at its own address (127.0.0.1, .2, .3): a deployment's
# three replicas go one to each, listening on their host's address, and
# every host serves the front at its address; kill -9 of a host's daemon
# and of its replica: the replica is replaced on another host after the
# lease, and a client of another host's front sees no more than the
# health-check interval of failures; kill -9 of the leader's daemon: the
# other fronts serve on; the hosts' return brings no duplicate, and every
# host's HAProxy ends equal to the database
test_hosts_three_replicas_spread_and_replaced() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
	trap 'kill "$client" 2>/dev/null; stop_daemons; stop_deployments "$FERRY_HOME"; stop_deployments "$FERRY_HOME/b"; stop_deployments "$FERRY_HOME/c"' EXIT
	local client=0 h ip port out i want
	start_daemon a FERRY_HOST=host-a FERRY_LEASE_MS=3000
	serve_py
	mkdir -p "$FERRY_HOME/b" "$FERRY_HOME/c"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b" FERRY_LISTEN=127.0.0.2:0 FERRY_LEASE_MS=3000 FERRY_HOST_LABELS=gpu=true
	start_another c FERRY_HOST=host-c FERRY_HOME="$FERRY_HOME/c" FERRY_LISTEN=127.0.0.3:0 FERRY_LEASE_MS=3000
	dep=$(wf dep3 <<Y
name: dep3
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights T" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m3}
  - {name: deploy, kind: deploy, needs: [register], model: m3, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, traffic: 100, replicas: 3}
Y
)
	did=$(submit "$dep")
	wait_run "$did" succeeded 120
	assert_eq "$(sql "SELECT string_agg(handle->>'host', ',' ORDER BY handle->>'host') FROM deployment_replicas")" \
		host-a,host-b,host-c "one replica on each host"
	# each listens on its host's address (FERRY_BIND_ADDR)
	for h in a:127.0.0.1 b:127.0.0.2 c:127.0.0.3; do
		ip=${h#*:}
		port=$(sql "SELECT port FROM deployment_replicas WHERE handle->>'host' = 'host-${h%%:*}'")
		out=$(curl -sS -m 5 -X POST -d '{}' "http://$ip:$port/") || fail "host-${h%%:*}'s replica does not answer at $ip:$port"
		assert_match "$out" '"model": "weights T"' "host-${h%%:*}'s replica at $ip:$port"
	done
	front=$(sql "SELECT port FROM deployments")
	sql_until "(SELECT count(*) FROM deployment_replicas WHERE health = 'healthy') = 3" 30 || fail "not every replica is healthy"
	# every host's front, at its address, routes to the three hosts' replicas
	hosts_agree_with_db 3
	for ip in 127.0.0.1 127.0.0.2 127.0.0.3; do
		out=$(curl -sS -m 5 -X POST -d '{}' "http://$ip:$front/") || fail "no front at $ip:$front"
		assert_match "$out" '"model": "weights T"' "the front at $ip"
	done
	# a client of B's front, one request every 50 ms, each failure's time written down
	(
		while :; do
			if ! curl -fsS -m 5 -X POST -d '{}' "http://127.0.0.2:$front/" >/dev/null 2>&1; then date +%s.%N >>"$FERRY_HOME/failed"; fi
			date +%s.%N >>"$FERRY_HOME/sent"
			sleep 0.05
		done
	) &
	client=$!
	sleep 1
	# host C goes: its daemon and its replica killed
	sql_until "(SELECT count(*) FROM blob_holders WHERE sha256 = (SELECT artifact FROM model_versions LIMIT 1)) >= 2" 60 ||
		fail "the model is not on two hosts"
	rc_idx=$(sql "SELECT idx FROM deployment_replicas WHERE handle->>'host' = 'host-c'")
	rc_pid=$(sql "SELECT handle->>'pid' FROM deployment_replicas WHERE idx = $rc_idx")
	t0=$(date +%s)
	stop_daemon c KILL
	kill -KILL -- "-$rc_pid" 2>/dev/null || kill -KILL "$rc_pid"
	sql_until "(SELECT handle->>'host' IN ('host-a', 'host-b') AND health = 'healthy' FROM deployment_replicas WHERE idx = $rc_idx)" 90 ||
		fail "C's replica was not replaced: $(sql "SELECT idx, handle, health, last_error FROM deployment_replicas")"
	echo "# replaced on another host $(( $(date +%s) - t0 )) s after the kill (lease 3 s)"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind IN ('replica-replaced', 'replica-placed') AND detail->>'lost_host' = 'host-c'")" 1 \
		"one replacement, naming the lost host"
	# the leader (A) goes: B's front serves on, another daemon leads
	stop_daemon a KILL
	sleep 8 # two leases and more: the leadership moves, and B's front is used all along
	kill "$client" 2>/dev/null; wait "$client" 2>/dev/null || true
	local sent failed
	sent=$(wc -l <"$FERRY_HOME/sent"); failed=$(cat "$FERRY_HOME/failed" 2>/dev/null | wc -l)
	echo "# $failed of $sent requests through B's front failed while C, then the leader, were lost"
	# HAProxy sends a request its replica refuses to another one (retry-on conn-failure, redispatch):
	# the failures fit in the health-check interval (2 s of one request every 50 ms, 40)
	[ "$failed" -le 40 ] || fail "$failed requests failed: $(head -5 "$FERRY_HOME/failed")"
	# A and C back: nothing started twice, the replacement stays where it is
	start_daemon a FERRY_HOST=host-a FERRY_LEASE_MS=3000
	start_another c FERRY_HOST=host-c FERRY_HOME="$FERRY_HOME/c" FERRY_LISTEN=127.0.0.3:0 FERRY_LEASE_MS=3000
	sleep 5 # rounds of every keeper and of the leader
	assert_eq "$(sql "SELECT count(*) FROM deployment_replicas")" 3 "three replicas"
	assert_eq "$(sql "SELECT count(*) FROM deployment_replicas WHERE handle->>'host' = 'host-c'")" 0 "none on C after its return"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind IN ('replica-started', 'replica-restarted', 'replica-replaced') AND at > now() - interval '5 seconds'")" 0 "no start after A and C came back"
	hosts_agree_with_db 3
	# scaled up through a follower (B): the new replica is placed by the leader on the host with
	# the fewest (C, back with none), started by C's daemon, and every host's front serves it
	FERRY_URL=$(daemon_url b) api PATCH /api/v1/deployments/1 '{"replicas": {"0.0.1": 4}}'
	assert_eq "$CODE" 200 "scale up through B: $BODY"
	sql_until "(SELECT handle->>'host' = 'host-c' AND health = 'healthy' FROM deployment_replicas WHERE idx = 4)" 60 ||
		fail "replica 4 is not healthy on C: $(sql "SELECT idx, handle, health, last_error FROM deployment_replicas")"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind = 'replica-placed' AND detail->>'host' = 'host-c' AND (detail->>'replica')::int = 4")" 1 "placed on C by the leader"
	hosts_agree_with_db 4
	# placement.hosts: only the hosts with the labels; none with them: the step fails saying so, nothing started
	for want in true h100; do
		wf "gpu-$want" >/dev/null <<Y
name: gpu-$want
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights G" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m3}
  - {name: deploy, kind: deploy, needs: [register], model: m3, deployment: gpu, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, replicas: 2, placement: {hosts: {gpu: "$want"}}}
Y
	done
	wait_run "$(submit "$FERRY_HOME/gpu-true.yaml")" succeeded 60
	assert_eq "$(sql "SELECT string_agg(r.handle->>'host', ',') FROM deployment_replicas r JOIN deployments d ON d.id = r.deployment_id WHERE d.name = 'gpu'")" \
		host-b,host-b "both on the one host labelled gpu=true"
	id=$(submit "$FERRY_HOME/gpu-h100.yaml")
	wait_run "$id" failed 60
	api GET "/api/v1/runs/$id"
	assert_match "$BODY" 'no host that is up has the labels placement.hosts asks for \(\{\\"gpu\\":\\"h100\\"\}; 3 up\)' "why no host fits"
}

# hosts_agree_with_db N: every host's HAProxy (GET /deployments/1 through
# each daemon: what its HAProxy runs) serves exactly the database's N
# healthy replicas of deployment 1, each at its host's address and port
hosts_agree_with_db() {
	local want name url got i
	want=$(sql "SELECT string_agg(CASE r.handle->>'host' WHEN 'host-a' THEN '127.0.0.1' WHEN 'host-b' THEN '127.0.0.2' ELSE '127.0.0.3' END || ':' || r.port, ' ' ORDER BY 1)
		FROM deployment_replicas r WHERE r.deployment_id = 1 AND r.health = 'healthy'")
	[ "$(echo "$want" | wc -w)" = "$1" ] || fail "the database has not $1 healthy replicas: $want"
	for name in a b c; do
		url=$(daemon_url "$name") || fail "no daemon $name"
		for i in $(seq 1 100); do
			FERRY_URL=$url api GET /api/v1/deployments/1
			got=$(echo "$BODY" | json '" ".join(sorted(s["addr"] + ":" + str(s["port"]) for s in j["haproxy"] if s["weight"] > 0))' 2>/dev/null)
			[ "$got" = "$(echo "$want" | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//')" ] && break
			sleep 0.2
		done
		[ "$i" -lt 100 ] || fail "host $name's HAProxy serves '$got', the database says '$want'"
	done
}

# two_hosts_by_cpus CPUS_A CPUS_B: host-a and host-b (its home $FERRY_HOME/b) declaring those CPUs,
# leases of 3 s, serve_py written, both up; their daemons and replicas stopped when the test ends
two_hosts_by_cpus() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
	trap 'stop_daemons; stop_deployments "$FERRY_HOME"; stop_deployments "$FERRY_HOME/b"' EXIT
	start_daemon a FERRY_HOST=host-a FERRY_CPUS="$1" FERRY_LEASE_MS=3000
	serve_py
	mkdir -p "$FERRY_HOME/b"
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b" FERRY_CPUS="$2" FERRY_LEASE_MS=3000
	sql_until "(SELECT count(*) FROM daemons WHERE stopped_at IS NULL) = 2" 20 || fail "both hosts are not up"
}

# placement by room (issue 29 item 2's "capacity"), and admission less the
# replicas (issue 30): host-a declares 2 CPUs, host-b 8; four replicas
# asking 2 CPUs each go one to A (then full) and three to B, where spread
# alone would put two on each; a fifth deployment asking 3 CPUs a replica
# fits nowhere and its step says each host's free CPUs; a job asking 4
# CPUs waits while the replicas hold them (its why names the deployment)
# and runs once they stop
test_hosts_replicas_placed_by_room_jobs_admitted_beside() {
	two_hosts_by_cpus 2 8
	for d in big:4:2 huge:1:3; do
		IFS=: read -r name n cpus <<<"$d"
		wf "dep-$name" >/dev/null <<Y
name: dep-$name
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights R" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m-$name}
  - {name: deploy, kind: deploy, needs: [register], model: m-$name, deployment: $name, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, traffic: 100, replicas: $n, resources: {cpus: $cpus}}
Y
	done
	did=$(submit "$FERRY_HOME/dep-big.yaml")
	wait_run "$did" succeeded 120
	assert_eq "$(sql "SELECT string_agg(handle->>'host', ',' ORDER BY handle->>'host') FROM deployment_replicas")" \
		host-a,host-b,host-b,host-b "one replica on A (2 CPUs), three on B (8)"
	api GET /api/v1/hosts
	assert_eq "$(echo "$BODY" | json "[(h['name'], h['replicas_hold']['cpus']) for h in j['hosts']]")" \
		'[["host-a", 2], ["host-b", 6]]' "GET /hosts: what the replicas hold"
	# no host has 3 CPUs free beside its replicas: the step fails with the numbers, nothing started
	id=$(submit "$FERRY_HOME/dep-huge.yaml")
	wait_run "$id" failed 60
	api GET "/api/v1/runs/$id"
	assert_match "$BODY" 'no host that is up has room for a replica asking for 3 CPUs beside the replicas it runs \(free: host-a: 0 of 2 CPUs; host-b: 2 of 8 CPUs\)' \
		"why the replica fits nowhere"
	assert_eq "$(sql "SELECT count(*) FROM deployment_replicas r JOIN deployments d ON d.id = r.deployment_id WHERE d.name = 'huge' AND r.handle->>'pid' IS NOT NULL")" 0 "no replica of it started"
	# a job asking 4 CPUs fits B (8) but not beside its replicas (2 free): it waits, and says why. Each
	# engine learns what its host's replicas hold with its host's heartbeat: one after the replicas' rows
	sql_until "(SELECT min(last_seen) FROM daemons WHERE stopped_at IS NULL) > (SELECT max(updated_at) FROM deployment_replicas)" 30 ||
		fail "the hosts did not heartbeat after the replicas started"
	job=$(submit "$(wf four <<'Y'
name: four
steps:
  - {name: wide, command: [sh, -c, "echo ran"], resources: {cpus: 4}}
Y
)")
	sleep 2 # claims of both hosts (each claim reads the room less the replicas)
	assert_eq "$(step_col "$job" wide state)" ready "the 4-CPU job waits"
	api GET /api/v1/queues/default
	why=$(echo "$BODY" | json "[w['why'] for w in j['waiting'] if w['run'] == $job][0]")
	assert_match "$why" 'needs 4 CPUs.*0 of 2 free on host-a, held by deployment big 0.0.1 \(replicas\).*2 of 8 free on host-b, held by deployment big 0.0.1 \(replicas\)' "why it waits"
	# the deployment stops: its replicas' CPUs are free again at the hosts' next heartbeat, and the job runs
	api PATCH /api/v1/deployments/1 '{"action": "stop"}'
	assert_eq "$CODE" 200 "stop the deployment: $BODY"
	wait_run "$job" succeeded 30
}

# A lost host's replica that fits nowhere else (each host declares 2 CPUs,
# each replica asks 2): unhealthy with the placement's why, and one
# replica-unhealthy event saying it (its health over time is read from the
# events), not one each round. Before, only its row said so: no event.
test_hosts_replica_placed_nowhere_says_so_once() {
	local did rb pid n0 i
	two_hosts_by_cpus 2 2
	trap 'kill -CONT -- "-${pid:-0}" 2>/dev/null; stop_daemons; stop_deployments "$FERRY_HOME"; stop_deployments "$FERRY_HOME/b"' EXIT
	did=$(submit "$(wf dep <<Y
name: dep
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights N" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m}
  - {name: deploy, kind: deploy, needs: [register], model: m, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, traffic: 100, replicas: 2, resources: {cpus: 2}}
Y
)")
	wait_run "$did" succeeded 90
	assert_eq "$(sql "SELECT string_agg(handle->>'host', ',' ORDER BY handle->>'host') FROM deployment_replicas")" host-a,host-b "one replica on each host"
	rb=$(sql "SELECT idx FROM deployment_replicas WHERE handle->>'host' = 'host-b'")
	pid=$(sql "SELECT handle->>'pid' FROM deployment_replicas WHERE idx = $rb")
	# host B is lost (its daemon killed, its replica answering nothing): A has no room for it
	stop_daemon b KILL
	kill -STOP -- "-$pid"
	sql_until "EXISTS (SELECT FROM deployment_events WHERE kind = 'replica-unhealthy' AND (detail->>'replica')::int = $rb)" 60 ||
		fail "no replica-unhealthy event: $(sql "SELECT string_agg(kind, ' ' ORDER BY id) FROM deployment_events") / $(sql "SELECT health || ': ' || coalesce(last_error, '') FROM deployment_replicas WHERE idx = $rb")"
	assert_match "$(sql "SELECT detail->>'error' FROM deployment_events WHERE kind = 'replica-unhealthy' AND (detail->>'replica')::int = $rb")" \
		'no host that is up has room for a replica asking for 2 CPUs' "the event says why"
	assert_match "$(sql "SELECT health || ': ' || last_error FROM deployment_replicas WHERE idx = $rb")" '^unhealthy: no host that is up has room' "so does its row"
	# two more rounds that find no room (each logs it): no more events
	n0=$(grep -c "replica $rb not placed" "$FERRY_HOME/ferryd-a.log" || true)
	for i in $(seq 1 100); do
		[ "$(grep -c "replica $rb not placed" "$FERRY_HOME/ferryd-a.log" || true)" -ge $((n0 + 2)) ] && break
		sleep 0.2
	done
	[ "$i" -lt 100 ] || fail "no two more rounds tried to place replica $rb"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind = 'replica-unhealthy' AND (detail->>'replica')::int = $rb")" 1 "one event, not one each round"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind IN ('replica-started', 'replica-replaced', 'replica-placed') AND (detail->>'replica')::int = $rb AND detail->>'host' = 'host-a'")" 0 "not started on A"
	kill -CONT -- "-$pid"
}

# every replica is placed before any starts: without gang, one that fits
# nowhere fails the step with nothing started; with gang: true the step
# waits for room for all of them (issue 30 item 4) and starts them once
# another deployment's replicas free it
test_hosts_gang_replicas_wait_for_room_for_all() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
	trap 'stop_daemons; stop_deployments "$FERRY_HOME"' EXIT
	start_daemon a FERRY_HOST=host-a FERRY_CPUS=4 FERRY_LEASE_MS=3000
	serve_py
	for d in big:1:3: pair:2:1: gang:2:1:true; do
		IFS=: read -r name n cpus gang <<<"$d"
		wf "dep-$name" >/dev/null <<Y
name: dep-$name
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights G" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m-$name}
  - {name: deploy, kind: deploy, needs: [register], model: m-$name, deployment: $name, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, traffic: 100, replicas: $n, resources: {cpus: $cpus}${gang:+, gang: $gang}}
Y
	done
	wait_run "$(submit "$FERRY_HOME/dep-big.yaml")" succeeded 60
	# 1 CPU free: two replicas of one CPU do not fit; without gang the step fails at once, nothing started
	id=$(submit "$FERRY_HOME/dep-pair.yaml")
	wait_run "$id" failed 60
	assert_match "$(step_col "$id" deploy reason)" 'replica 2 of 2: no host that is up has room for a replica asking for 1 CPU beside the replicas it runs \(free: host-a: 0 of 4 CPUs\)' "why"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events e JOIN deployments d ON d.id = e.deployment_id WHERE d.name = 'pair' AND e.kind = 'replica-started'")" 0 "no replica of pair started"
	# with gang: true the step waits, saying why, and starts none
	id=$(submit "$FERRY_HOME/dep-gang.yaml")
	wait_step "$id" deploy running 60
	for _ in $(seq 1 300); do ferry logs "$id" deploy 2>/dev/null | grep -q "gang: waiting for room for all 2 replicas at once" && break; sleep 0.2; done
	assert_match "$(ferry logs "$id" deploy)" 'gang: waiting for room for all 2 replicas at once: replica 2 of 2: no host' "the step says what it waits for"
	sleep 3 # a poll more: still nothing started
	assert_eq "$(step_col "$id" deploy state)" running "the gang waits"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events e JOIN deployments d ON d.id = e.deployment_id WHERE d.name = 'gang' AND e.kind = 'replica-started'")" 0 "none started while it waits"
	# big stops: its 3 CPUs free, both replicas start together
	api PATCH "/api/v1/deployments/$(sql "SELECT id FROM deployments WHERE name = 'big'")" '{"action": "stop"}'
	assert_eq "$CODE" 200 "stop big: $BODY"
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT count(*) FROM deployment_replicas r JOIN deployments d ON d.id = r.deployment_id WHERE d.name = 'gang' AND r.health = 'healthy'")" 2 "both replicas of the gang serve"
	assert_match "$(ferry logs "$id" deploy)" 'gang: room for all 2 replicas: placing them' "said when it went on"
}

# In a fleet no host makes a run's step directories ahead (engine/dirs_ahead.c): any host may claim
# the next step, and every host that had claimed one of the run's steps made them all, left empty
# where the steps ran elsewhere. A host alone again (the other stopped) makes them ahead as before.
test_hosts_no_step_dirs_ahead_in_a_fleet() {
	local id y
	start_daemon a FERRY_HOST=host-a
	start_another b FERRY_HOST=host-b FERRY_HOME="$FERRY_HOME/b"
	y=$(wf fleet-ahead <<'Y'
name: fleet-ahead
steps:
  - {name: a, command: [sh, -c, 'sleep 2']}
  - {name: b, needs: [a], command: ["true"]}
  - {name: c, needs: [b], command: ["true"]}
Y
)
	id=$(submit "$y")
	wait_step "$id" a running 20
	sleep 1 # a claim's directories ahead are made at once, on the worker pool
	for h in "$FERRY_HOME" "$FERRY_HOME/b"; do
		[ ! -e "$h/runs/$id/c" ] || fail "step c's directory was made ahead in $h, with two hosts live"
	done
	wait_run "$id" succeeded 30
	stop_daemon b TERM # a clean stop: host-b is no longer live
	id=$(submit "$y")
	wait_step "$id" a running 20
	for _ in $(seq 1 50); do [ -d "$FERRY_HOME/runs/$id/c/1/out" ] && break; sleep 0.1; done
	[ -d "$FERRY_HOME/runs/$id/c/1/out" ] || fail "host-a alone made no step directories ahead"
	wait_run "$id" succeeded 30
}
