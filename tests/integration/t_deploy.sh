# Deployments (issue 12) with real HAProxy and real model servers
# (workflows/digits/serve.py): the deploy step, the traffic split through
# the front address, weights changed through the API, a version that never
# gets ready, a killed replica, auto-stop, and HAProxy agreeing with the
# database after a daemon kill -9 and an HAProxy reload. Each test stops the
# replicas and HAProxy of its FERRY_HOME when it ends, passed or failed.

# deploy_down: daemons first, then every replica (their supervisors lead
# their process groups) and this home's HAProxy
deploy_down() {
	stop_daemons
	for f in "$FERRY_HOME"/deployments/*/runs/*/*/*/status; do
		[ -f "$f" ] || continue
		p=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$f" | tail -n 1)
		[ -n "$p" ] && kill -KILL -- "-$p" 2>/dev/null
	done
	[ -s "$FERRY_HOME/haproxy/haproxy.pid" ] && kill -KILL "$(cat "$FERRY_HOME/haproxy/haproxy.pid")" 2>/dev/null
	pkill -KILL -f "haproxy .*$FERRY_HOME/haproxy" 2>/dev/null
	true
}

deploy_up() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
	trap deploy_down EXIT
}

# the pipeline: train (C from params) → register digits → deploy
deploy_wf() { # TRAFFIC [EXTRA_DEPLOY_KEYS]
	wf "dep$1" <<Y
name: dep
params:
  C: {default: "10"}
steps:
  - name: train
    kind: train
    command: [/usr/bin/python3, $ROOT/workflows/digits/train.py, --folds, "2", --C, "{{params.C}}"]
  - name: register
    kind: register
    needs: [train]
    model: digits
  - name: deploy
    kind: deploy
    needs: [register]
    model: digits
    serve: [/usr/bin/python3, $ROOT/workflows/digits/serve.py]
    sample: $ROOT/workflows/digits/sample.json
    traffic: $1
${2:-}
Y
}

dep_json() { api GET /api/v1/deployments/1; [ "$CODE" = 200 ] || fail "GET /deployments/1: $CODE $BODY"; echo "$BODY"; }
front_port() { dep_json | json 'j["port"]'; }

# count_versions N: sends N predictions through the front; prints "VERSION COUNT" lines and failures
count_versions() {
	python3 - "$(front_port)" "$1" "$ROOT/workflows/digits/sample.json" <<'PY'
import collections, http.client, json, sys
port, n, sample = int(sys.argv[1]), int(sys.argv[2]), open(sys.argv[3]).read()
seen, failed = collections.Counter(), 0
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
for _ in range(n):
    try:
        c.request("POST", "/v2/models/digits/infer", sample, {"Content-Type": "application/json"})
        r = c.getresponse(); body = r.read()
        if r.status != 200: failed += 1; continue
        seen[json.loads(body).get("model_version", "?")] += 1
    except Exception:
        failed += 1; c.close(); c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
for v, k in sorted(seen.items()): print(v, k)
print("failed", failed)
PY
}

# haproxy_vs_db: HAProxy's servers and weights (GET …/deployments/1 "haproxy") equal what the database implies
haproxy_vs_db() {
	dep_json | python3 -c '
import json, sys
d = json.load(sys.stdin)
want = {}
for v in d["versions"]:
    if v["state"] != "serving": continue
    healthy = [r for r in v["replica_list"] if r["health"] == "healthy"]
    for r in v["replica_list"]:
        share = 250 * v["weight"] // 100
        w = 0 if r["health"] != "healthy" or v["weight"] == 0 else max(1, (share + len(healthy) // 2) // len(healthy))
        want["v%d-r%d" % (v["ord"], r["idx"])] = (r["port"], w)
got = {s["server"]: (s["port"], s["weight"]) for s in d.get("haproxy", []) if s["frontend"] == d["name"]}
if want != got:
    print("database:", sorted(want.items()), "haproxy:", sorted(got.items()))
    sys.exit(1)
'
}

test_deploy_first_version_then_split_80_20() {
	deploy_up
	start_daemon a
	id=$(submit "$(deploy_wf 20)")
	wait_run "$id" succeeded 120
	assert_match "$(step_col "$id" deploy reason)" "digits 0.0.1 serves 100% of deployment digits" "the first version gets everything"
	out=$(count_versions 50)
	assert_match "$out" "^0.0.1 50" "the first version served every request"
	id2=$(submit "$(deploy_wf 20)" '{"C": "5"}')
	wait_run "$id2" succeeded 120
	assert_match "$(step_col "$id2" deploy reason)" "digits 0.0.2 serves 20% of deployment digits" "the second version at 20%"
	out=$(count_versions 2000)
	echo "$out"
	assert_match "$out" "failed 0" "no failed request"
	v1=$(echo "$out" | awk '$1 == "0.0.1" {print $2}'); v2=$(echo "$out" | awk '$1 == "0.0.2" {print $2}')
	python3 -c "import sys; a, b = $v1, $v2; p = 100.0 * b / (a + b); sys.exit(0 if abs(p - 20) <= 3 else 1)" ||
		fail "the split is $v1/$v2, not within 3 points of 80/20"
	haproxy_vs_db || fail "HAProxy differs from the database"
	# a version at 0% gets exactly nothing
	api PATCH /api/v1/deployments/1 '{"traffic": {"0.0.2": 0}}'
	assert_eq "$CODE" 200 "PATCH traffic: $BODY"
	out=$(count_versions 500)
	assert_eq "$(echo "$out" | awk '$1 == "0.0.2" {print $2}')" "" "the 0% version got requests: $out"
	assert_match "$out" "^0.0.1 500" "all to version 0.0.1"
	# the change is an event with its actor
	assert_match "$(dep_json | json '[e for e in j["events"] if e["kind"] == "traffic"][-1]["actor"]')" tester "the actor"
}
