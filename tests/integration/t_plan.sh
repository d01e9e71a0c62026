# Runs as the planner makes them (orchestrator/plan/plan.c) and the store writes
# them: the step flags and initial states in the rows, {{run.id}} rendered
# with the id of the runs row, and one run for concurrent requests that
# share an Idempotency-Key.

test_plan_rows_written() {
	start_daemon a
	f=$(wf rows <<'Y'
name: rows
params:
  tag: {default: t0}
steps:
  - {name: approve, kind: gate}
  - {name: stage, kind: cache, needs: [approve], dataset: /nonexistent/data}
  - {name: use, needs: [stage], command: [echo, "{{run.id}}-{{params.tag}}"]}
Y
)
	id=$(submit "$f" '{"tag": "t1"}')
	assert_eq "$(sql "SELECT state, started_at IS NOT NULL FROM runs WHERE id = $id")" "running|t" "a gate first: running at once"
	assert_eq "$(sql "SELECT string_agg(name || ':' || state || ':' || waits || ':' || restage || ':' || deps_pending, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" \
		"approve:waiting:true:false:0 stage:blocked:false:true:1 use:blocked:false:false:1" "states and flags"
	assert_eq "$(step_col "$id" use "spec->>'command'")" "[\"echo\", \"$id-t1\"]" "{{run.id}} is the run's id"
	assert_eq "$(step_col "$id" use "spec->'ancestors'")" '["stage", "approve"]' "below a staging step: handed its ancestors"
	assert_eq "$(step_col "$id" approve "spec ? 'ancestors'")" f "a gate is never handed ancestors"
	assert_eq "$(sql "SELECT count(*) FROM step_deps d JOIN steps s ON s.id = d.step_id WHERE s.run_id = $id")" 2 "edges"
	assert_eq "$(sql "SELECT open_steps FROM runs WHERE id = $id")" 3 "open steps"
	api POST "/api/v1/runs/$id/stop"
	wait_run "$id" stopped 20
}

test_idempotent_start_concurrent() {
	start_daemon a
	# eight threads post the same key at the same moment; a run of 300 steps
	# takes long enough to write that the requests overlap
	python3 - "$FERRY_URL" "$FERRY_API_TOKEN" >"$FERRY_HOME/answers" <<'P'
import json, sys, threading, urllib.error, urllib.request
url, token = sys.argv[1], sys.argv[2]
body = json.dumps({"yaml": "name: idem\nsteps:\n" + "".join(
    "  - {name: s%d, command: [true]}\n" % i for i in range(300))}).encode()
start, out = threading.Barrier(8), [None] * 8
def post(i):
    req = urllib.request.Request(url + "/api/v1/runs", data=body, method="POST", headers={
        "Authorization": "Bearer " + token, "Idempotency-Key": "same"})
    start.wait()
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            out[i] = "%d %s" % (r.status, json.load(r)["id"])
    except urllib.error.HTTPError as e:
        out[i] = "%d %s" % (e.code, e.read().decode())
ts = [threading.Thread(target=post, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
print("\n".join(out))
P
	first=$(head -1 "$FERRY_HOME/answers")
	assert_match "$first" '^201 [0-9]+$' "created"
	assert_eq "$(sort -u "$FERRY_HOME/answers")" "$first" "every request answers 201 with the same run"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 1 "one run"
	assert_eq "$(sql "SELECT run_id FROM idempotency_keys WHERE key = 'same'")" "${first#201 }" "the key names it"
	api POST "/api/v1/runs/${first#201 }/stop"
}
