# The queues' management surface (issue 30): GET, POST, PATCH, DELETE
# /api/v1/queues and `ferry queues`, each change in the audit trail, a
# bad value a 400 naming its field that changes nothing, an admin's
# alone; and "why is my job not running?": GET /queues/{name} (ferry
# queues show) says of each waiting step what it waits for — its retry
# backoff, its queue's quota, the GPUs each host has free and who holds
# them — from the same facts the claim admits by (db/functions/queue_views.sql).

# qa_bad METHOD PATH BODY FIELD: a 400 naming FIELD
qa_bad() {
	api "$1" "$2" "$3"
	assert_eq "$CODE" 400 "$1 $2 $3: $BODY"
	assert_eq "$(echo "$BODY" | json 'j["error"].get("field")')" "$4" "$1 $3 names the field: $BODY"
}

# qa_why QUEUE RUN STEP: GET /queues/QUEUE (CODE and BODY set); WHY the why of RUN/STEP in it
qa_why() {
	api GET "/api/v1/queues/$1"
	assert_eq "$CODE" 200 "GET /queues/$1: $BODY"
	WHY=$(echo "$BODY" | json "[w['why'] for w in j['waiting'] if w['run'] == $2 and w['step'] == '$3'][0]")
}

# qa_whys QUEUE [ADMISSION]: ferry_queue_detail's waiting steps, "POSITION STEP: WHY" a line
qa_whys() {
	sql "SELECT string_agg((w ->> 'position') || ' ' || (w ->> 'step') || ': ' || (w ->> 'why'), E'\n'
	                       ORDER BY (w ->> 'position')::int)
	     FROM jsonb_array_elements(ferry_queue_detail('$1', 50, '${2:-{\}}') -> 'waiting') w"
}

# qa_ready RUN STEP: waits until the step waits in a queue (ready, not claimed)
qa_ready() {
	sql_until "(SELECT count(*) = 1 FROM step_queue q JOIN steps s ON s.id = q.step_id
	            WHERE s.run_id = $1 AND s.name = '$2')" 30 || fail "step $2 of run $1 never waited in a queue"
}

test_queues_api_crud_audited_and_checked() {
	start_daemon a
	api GET /api/v1/queues
	assert_eq "$CODE" 200 "list: $BODY"
	assert_eq "$(echo "$BODY" | json '[q["name"] for q in j["queues"]]')" '["default"]' "default is there from the start"

	api POST /api/v1/queues '{"name": "nightly", "priority": -10, "max_running": 2, "max_gpus": 4, "max_cpus": 8.5, "description": "night jobs"}'
	assert_eq "$CODE" 201 "created: $BODY"
	assert_eq "$(echo "$BODY" | json '[j[k] for k in ("name", "priority", "max_running", "max_gpus", "max_cpus", "description", "running", "waiting", "gpus_held")]')" \
		'["nightly", -10, 2, 4, 8.5, "night jobs", 0, 0, 0]' "what was asked, nothing held"
	api POST /api/v1/queues '{"name": "nightly"}'
	assert_eq "$CODE" 409 "twice: $BODY"
	assert_match "$BODY" 'queue nightly exists; change it with `ferry queues set nightly`' "says how to change it"
	api POST /api/v1/queues '{"name": "gpu"}'
	assert_eq "$CODE" 201 "defaults: $BODY"
	assert_eq "$(echo "$BODY" | json '[j["priority"], j["max_running"], j["max_gpus"], j["max_cpus"], j["description"]]')" \
		'[0, null, null, null, ""]' "no quotas by default"

	# each bad value: a 400 naming the field, nothing made or changed
	qa_bad POST /api/v1/queues '{"name": "Night!"}' name
	qa_bad POST /api/v1/queues '{"priority": 1}' name
	qa_bad POST /api/v1/queues '{"name": "x", "priority": 1001}' priority
	qa_bad POST /api/v1/queues '{"name": "x", "priority": "high"}' priority
	qa_bad POST /api/v1/queues '{"name": "x", "max_running": 0}' max_running
	qa_bad POST /api/v1/queues '{"name": "x", "max_running": 1.5}' max_running
	qa_bad POST /api/v1/queues '{"name": "x", "max_gpus": -1}' max_gpus
	qa_bad POST /api/v1/queues '{"name": "x", "max_cpus": 0}' max_cpus
	qa_bad POST /api/v1/queues '{"name": "x", "max_cpus": "8"}' max_cpus
	qa_bad POST /api/v1/queues '{"name": "x", "description": 5}' description
	qa_bad POST /api/v1/queues '{"name": "x", "colour": "red"}' colour
	qa_bad PATCH /api/v1/queues/nightly '{"priority": 5, "max_gpus": -1}' max_gpus
	qa_bad PATCH /api/v1/queues/nightly '{"priority": null}' priority
	qa_bad PATCH /api/v1/queues/nightly '{"name": "other"}' name
	api PATCH /api/v1/queues/nightly '{}'
	assert_eq "$CODE" 400 "nothing to change: $BODY"
	assert_eq "$(sql "SELECT count(*) FROM queues")" 3 "no queue made by a bad request"
	assert_eq "$(sql "SELECT priority FROM queues WHERE name = 'nightly'")" -10 "nor changed"
	api GET '/api/v1/queues/nightly?limit=0'
	assert_eq "$CODE" 400 "limit 0"
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" limit "names limit"

	# a change: what is given, null clears a quota
	api PATCH /api/v1/queues/nightly '{"priority": 5, "max_gpus": null, "description": "night and weekend"}'
	assert_eq "$CODE" 200 "changed: $BODY"
	assert_eq "$(echo "$BODY" | json '[j["priority"], j["max_running"], j["max_gpus"], j["max_cpus"], j["description"]]')" \
		'[5, 2, null, 8.5, "night and weekend"]' "only the fields given"
	api GET /api/v1/queues
	assert_eq "$(echo "$BODY" | json '[q["name"] for q in j["queues"]]')" '["nightly", "default", "gpu"]' "highest priority first"
	api PATCH /api/v1/queues/nosuch '{"priority": 1}'
	assert_eq "$CODE" 404 "no such queue: $BODY"
	api GET /api/v1/queues/nosuch
	assert_eq "$CODE" 404 "no such queue to show: $BODY"
	api DELETE /api/v1/queues/nosuch
	assert_eq "$CODE" 404 "no such queue to delete: $BODY"

	# default stays; the others go
	api DELETE /api/v1/queues/default
	assert_eq "$CODE" 409 "default: $BODY"
	assert_match "$BODY" 'queue default cannot be deleted' "says why"
	api DELETE /api/v1/queues/gpu
	assert_eq "$CODE" 200 "deleted: $BODY"
	assert_eq "$(sql "SELECT count(*) FROM queues WHERE name = 'gpu'")" 0 "gone"

	# who did what, in the audit trail (the api helper is the admin token as tester)
	api GET '/api/v1/audit?object=queue'
	assert_eq "$CODE" 200 "audit: $BODY"
	assert_eq "$(echo "$BODY" | json '[(e["action"], e["detail"]["name"], e["actor"]) for e in j["audit"]]')" \
		'[["deleted", "gpu", "admin (as tester)"], ["changed", "nightly", "admin (as tester)"], ["created", "gpu", "admin (as tester)"], ["created", "nightly", "admin (as tester)"]]' \
		"each change once, newest first"
	assert_eq "$(echo "$BODY" | json '[e for e in j["audit"] if e["action"] == "changed"][0]["detail"]["before"]["max_gpus"]')" 4 "before"
	assert_eq "$(echo "$BODY" | json '[e for e in j["audit"] if e["action"] == "changed"][0]["detail"]["after"]["priority"]')" 5 "after"
	assert_eq "$(echo "$BODY" | json '[e for e in j["audit"] if e["action"] == "deleted"][0]["detail"]["before"]["priority"]')" 0 "what it was"
}

test_queues_api_viewer_reads_admin_changes() {
	viewer=$(ferryd token create qa-viewer --role viewer 2>/dev/null) || fail "viewer token"
	operator=$(ferryd token create qa-operator --role operator 2>/dev/null) || fail "operator token"
	start_daemon a
	FERRY_API_TOKEN=$viewer api GET /api/v1/queues
	assert_eq "$CODE" 200 "a viewer lists: $BODY"
	FERRY_API_TOKEN=$viewer api GET /api/v1/queues/default
	assert_eq "$CODE" 200 "a viewer reads one: $BODY"
	FERRY_API_TOKEN=$viewer api POST /api/v1/queues '{"name": "mine"}'
	assert_eq "$CODE" 403 "a viewer may not create: $BODY"
	assert_match "$BODY" 'needs a token with role admin or above' "names the role"
	FERRY_API_TOKEN=$operator api POST /api/v1/queues '{"name": "mine"}'
	assert_eq "$CODE" 403 "nor an operator: $BODY"
	FERRY_API_TOKEN=$operator api PATCH /api/v1/queues/default '{"priority": 1000}'
	assert_eq "$CODE" 403 "nor change one: $BODY"
	FERRY_API_TOKEN=$operator api DELETE /api/v1/queues/default
	assert_eq "$CODE" 403 "nor delete one: $BODY"
	assert_eq "$(sql "SELECT count(*) || ' ' || max(priority) FROM queues")" "1 0" "nothing changed"
	out=$(FERRY_API_TOKEN=$viewer ferry queues create mine 2>&1) && fail "ferry queues create as a viewer: $out"
	assert_match "$out" 'needs a token with role admin' "the CLI says why"
	FERRY_API_TOKEN=$viewer ferry queues >/dev/null || fail "ferry queues as a viewer"
}

test_queues_api_cli() {
	start_daemon a
	out=$(ferry queues create nightly --priority -10 --max-running 1 --max-gpus 2 --max-cpus 1.5 --description 'night jobs') ||
		fail "create: $out"
	assert_match "$out" 'queue nightly created' "said"
	assert_match "$out" 'nightly +-10 +running<=1 gpus<=2 cpus<=1.5 +0 +0 +0 +night jobs' "its line"
	out=$(ferry queues)
	assert_match "$(echo "$out" | head -1)" '^NAME +PRIORITY +QUOTAS +RUNNING +WAITING +GPUS-HELD' "the header"
	assert_match "$out" 'default +0 +- +0 +0 +0 +where a step that names no queue waits' "default, no quotas"
	out=$(ferry queues set nightly --max-gpus none --no-max-cpus --priority 3) || fail "set: $out"
	assert_match "$out" 'nightly +3 +running<=1 +0' "quotas cleared, one kept"
	assert_eq "$(ferry queues show nightly -o json | json '[j["queue"]["max_gpus"], j["queue"]["max_cpus"], j["queue"]["max_running"], j["running"], j["waiting"]]')" \
		'[null, null, 1, [], []]' "show -o json"
	out=$(ferry queues show nightly)
	assert_match "$out" 'Running: none' "nothing runs"
	assert_match "$out" 'Waiting: none' "nothing waits"
	assert_eq "$(ferry queues -o json | json '[q["name"] for q in j["queues"]]')" '["nightly", "default"]' "-o json"

	# usage errors: exit 2, nothing sent
	ferry queues set nightly >/dev/null 2>&1 && fail "set with nothing to change"
	ferry queues set nightly >/dev/null 2>&1 || assert_eq "$?" 2 "set with nothing: exit 2"
	out=$(ferry queues set nightly --max-running lots 2>&1) && fail "a bad number"
	assert_match "$out" "max-running takes a whole number or none, not 'lots'" "says what it takes"
	ferry queues create Bad >/dev/null 2>&1 || assert_eq "$?" 2 "a bad name: the server's 400, exit 2"
	ferry queues frobnicate >/dev/null 2>&1 || assert_eq "$?" 2 "unknown subcommand"
	ferry queues show >/dev/null 2>&1 || assert_eq "$?" 2 "show needs NAME"
	ferry queues --help | grep -q 'ferry queues show NAME' || fail "help"
	ferry --help | grep -q '^  queues ' || fail "listed in ferry --help"

	out=$(ferry queues delete nightly) || fail "delete: $out"
	assert_eq "$out" "queue nightly deleted" "said"
	out=$(ferry queues delete default 2>&1) && fail "deleted default"
	assert_match "$out" 'queue default cannot be deleted' "refused"
	out=$(ferry audit --object queue)
	assert_match "$out" 'queue nightly +deleted' "ferry audit shows it by name"
	assert_eq "$(ferry audit --object queue -o json | json '[e["action"] for e in j["audit"]]')" \
		'["deleted", "changed", "created"]' "every change"
}

# One GPU (FERRY_GPUS=0): a run's step holds it; another run's GPU step
# waits, and says for what and who holds it.
test_queues_api_why_a_gpu_step_waits() {
	FERRY_GPUS=0 FERRY_CPUS=2 FERRY_HOST=gpu-a start_daemon a
	sql_until "(SELECT count(*) = 1 FROM daemons WHERE capacity ? 'admits')" 10 || fail "the host's row"
	id1=$(submit "$(wf hold <<'Y'
name: hold
steps:
  - {name: hold, command: [sleep, "60"], resources: {gpus: 1}}
Y
)")
	wait_step "$id1" hold running
	id2=$(submit "$(wf train <<'Y'
name: train
steps:
  - {name: prep, command: ["true"]}
  - {name: train, needs: [prep], command: ["true"], resources: {gpus: 1}}
Y
)")
	qa_ready "$id2" train
	qa_why default "$id2" train
	assert_eq "$WHY" "needs 1 GPU; 0 of 1 free on gpu-a, held by run $id1/hold" "the API says why"
	assert_eq "$(echo "$BODY" | json '[(w["position"], w["request"]["gpus"]) for w in j["waiting"]]')" '[[1, 1]]' "first in line, asks 1 GPU"
	assert_eq "$(echo "$BODY" | json '[(r["run"], r["step"], r["host"], r["gpu_ids"]) for r in j["running"]]')" \
		"[[$id1, \"hold\", \"gpu-a\", [\"0\"]]]" "who runs, where, on which GPU"
	assert_eq "$(echo "$BODY" | json '[j["queue"]["running"], j["queue"]["waiting"], j["queue"]["gpus_held"]]')" '[1, 1, 1]' "the queue's figures"
	out=$(ferry queues show default)
	assert_match "$out" "$id1/hold +gpu-a +0 " "the running list: host and GPU"
	assert_match "$out" "1 +$id2/train +1 GPU +[0-9:]+ +needs 1 GPU; 0 of 1 free on gpu-a, held by run $id1/hold" "the waiting list: position, needs, why"
	assert_match "$(ferry queues)" 'default +0 +- +1 +1 +1 ' "ferry queues counts them"
	# the GPU freed, the step starts
	api POST "/api/v1/runs/$id1/stop"
	wait_run "$id2" succeeded 30
	api GET /api/v1/queues/default
	assert_eq "$(echo "$BODY" | json '[len(j["running"]), len(j["waiting"])]')" '[0, 0]' "nothing held, nothing waits"
}

# A named resource (FERRY_RESOURCES=license=1): a run's step holds the license; another run's
# step that asks for it waits, and says for which name, how many are free and who holds it.
test_queues_api_why_a_license_step_waits() {
	start_daemon a FERRY_CPUS=4 FERRY_RESOURCES=license=1 FERRY_HOST=lic-a
	sql_until "(SELECT count(*) = 1 FROM daemons WHERE capacity ? 'admits')" 10 || fail "the host's row"
	id1=$(submit "$(wf hold <<'Y'
name: hold
steps:
  - {name: hold, command: [sleep, "60"], resources: {license: 1}}
Y
)")
	wait_step "$id1" hold running
	id2=$(submit "$(wf solve <<'Y'
name: solve
steps:
  - {name: solve, command: ["true"], resources: {license: 1}}
Y
)")
	qa_ready "$id2" solve
	qa_why default "$id2" solve
	assert_eq "$WHY" "needs license 1; 0 of 1 free on lic-a, held by run $id1/hold" "the API says why"
	assert_eq "$(echo "$BODY" | json '[w["request"]["named"] for w in j["waiting"]]')" '[{"license": 1}]' "what it asks"
	assert_eq "$(sql "SELECT state FROM steps WHERE run_id = $id2")" ready "still waiting for it"
}

# A queue at its max_running: the second run's step says so, and the queue
# cannot be deleted while it waits there.
test_queues_api_why_a_queue_quota_holds() {
	FERRY_CPUS=2 start_daemon a
	ferry queues create solo --max-running 1 >/dev/null || fail "create solo"
	id1=$(submit "$(wf solo1 <<'Y'
name: solo1
queue: solo
steps:
  - {name: first, command: [sleep, "60"]}
Y
)")
	wait_step "$id1" first running
	id2=$(submit "$(wf solo2 <<'Y'
name: solo2
steps:
  - {name: second, queue: solo, command: ["true"]}
Y
)")
	qa_ready "$id2" second
	qa_why solo "$id2" second
	assert_eq "$WHY" "queue solo is at max_running 1: run $id1/first runs" "the quota, and who holds it"
	out=$(ferry queues show solo)
	assert_match "$out" "1 +$id2/second +- +[0-9:]+ +queue solo is at max_running 1: run $id1/first runs" "ferry queues show"
	assert_match "$(ferry queues)" 'solo +0 +running<=1 +1 +1 +0' "its line"
	api DELETE /api/v1/queues/solo
	assert_eq "$CODE" 409 "steps wait in it: $BODY"
	assert_match "$BODY" 'queue solo has 1 waiting step' "says how many"
	assert_eq "$(sql "SELECT count(*) FROM queues WHERE name = 'solo'")" 1 "kept"
	# a higher max_running lets it start at the next claim
	out=$(ferry queues set solo --max-running 2) || fail "set: $out"
	wait_run "$id2" succeeded 30
	api POST "/api/v1/runs/$id1/stop"
	wait_run "$id1" stopped 30
	api DELETE /api/v1/queues/solo
	assert_eq "$CODE" 200 "none waits: deleted ($BODY)"
}

# A failed step waiting for its retry says until when.
test_queues_api_why_a_retry_waits() {
	start_daemon a
	id=$(submit "$(wf flaky <<'Y'
name: flaky
steps:
  - {name: flaky, command: ["false"], retry: {limit: 1, backoff: 10m, max_backoff: 10m}}
Y
)")
	sql_until "(SELECT tries = 1 FROM steps WHERE run_id = $id AND name = 'flaky') AND
	           EXISTS (SELECT 1 FROM step_queue WHERE run_id = $id AND not_before > now())" 30 || fail "never waited for its retry"
	qa_why default "$id" flaky
	assert_match "$WHY" '^retrying after [0-9]{2}:[0-9]{2}:[0-9]{2} UTC \(backoff\)$' "until when"
	assert_eq "$(echo "$BODY" | json 'j["queue"]["retrying"]')" 1 "counted as retrying"
	api POST "/api/v1/runs/$id/stop"
	wait_run "$id" stopped 30
}

# The walk itself, on rows made by hand (no daemon runs: nothing claims
# them): two hosts, each reason the claim would give, in its order.
test_queues_api_why_the_walk_reads_the_claim() {
	sql "INSERT INTO queues (name, max_running) VALUES ('nightly', 1);
	     INSERT INTO workflows (hash, name, yaml, spec) VALUES ('h', 'w', '', '{}');
	     INSERT INTO daemons (owner, host, capacity, lease_ms) VALUES
	       ('a/1/1', 'host-a', '{\"cpus\": 2, \"memory_bytes\": 2147483648, \"gpus\": [{\"index\": 0}, {\"index\": 1}], \"admits\": true}', 600000),
	       ('b/1/1', 'host-b', '{\"cpus\": 4, \"memory_bytes\": 4294967296, \"gpus\": [], \"admits\": true}', 600000),
	       ('c/1/1', 'host-c', '{\"cpus\": 64, \"gpus\": [{\"index\": 0}], \"admits\": true}', 600000);
	     UPDATE daemons SET stopped_at = now() WHERE host = 'host-c';
	     INSERT INTO runs (id, workflow_hash, workflow_name, state, trigger, actor) VALUES
	       (40, 'h', 'w', 'running', 'api', 't'), (41, 'h', 'w', 'running', 'api', 't'),
	       (42, 'h', 'w', 'running', 'api', 't'), (43, 'h', 'w', 'running', 'api', 't');
	     INSERT INTO steps (id, run_id, name, idx, kind, state, deps_pending, spec) VALUES
	       (1, 41, 'train', 0, 'run', 'running', 0, '{}'), (2, 42, 'g3', 0, 'run', 'running', 0, '{}'),
	       (3, 40, 'n1', 0, 'run', 'running', 0, '{\"queue\": \"nightly\"}'),
	       (4, 43, 'gpu1', 0, 'run', 'ready', 0, '{\"resources\": {\"gpus\": 1}}'),
	       (5, 43, 'cpu1', 1, 'run', 'ready', 0, '{\"resources\": {\"cpus\": 1}}'),
	       (6, 43, 'n2', 2, 'run', 'ready', 0, '{\"queue\": \"nightly\"}'),
	       (7, 43, 'big', 3, 'run', 'ready', 0, '{\"resources\": {\"cpus\": 4}}'),
	       (8, 43, 'mem', 4, 'run', 'ready', 0, '{\"resources\": {\"memory_mb\": 5000}}'),
	       (9, 43, 'cpu3', 5, 'run', 'ready', 0, '{\"resources\": {\"cpus\": 1}}'),
	       (10, 43, 'retry', 6, 'run', 'ready', 0, '{}');
	     INSERT INTO attempts (step_id, attempt, state, owner, host, lease_until, queue, cpus, memory_mb, gpu_ids) VALUES
	       (1, 1, 'running', 'a/1/1', 'host-a', now() + interval '1 h', 'default', 0, 0, '{0}'),
	       (2, 1, 'running', 'a/1/1', 'host-a', now() + interval '1 h', 'default', 0.5, 100, '{1}'),
	       (3, 1, 'running', 'b/1/1', 'host-b', now() + interval '1 h', 'nightly', 0, 0, NULL);
	     INSERT INTO step_queue (step_id, run_id, dev, not_before, queue, priority, cpus, memory_mb, gpus)
	     SELECT q.step_id, q.run_id, false, q.not_before, ferry_req_queue(s.spec), ferry_req_priority(s.spec),
	            ferry_req_cpus(s.spec), ferry_req_memory_mb(s.spec), ferry_req_gpus(s.spec)
	     FROM (VALUES (4, 43, NULL::timestamptz), (5, 43, NULL), (6, 43, NULL), (7, 43, NULL),
	                  (8, 43, NULL), (9, 43, NULL), (10, 43, '2030-01-01 14:02:11+00')) q(step_id, run_id, not_before)
	     JOIN steps s ON s.id = q.step_id;" >/dev/null
	assert_eq "$(qa_whys default)" "1 gpu1: needs 1 GPU; 0 of 2 free on host-a, held by run 41/train and run 42/g3; 0 of 0 free on host-b
2 cpu1: fits host-a now: next claim
3 big: fits host-b now: next claim
4 mem: needs 5000 MiB of memory; 1948 of 2048 MiB free on host-a, held by run 42/g3; 4096 of 4096 MiB free on host-b
5 cpu3: behind 2 steps ahead of it in the order
6 retry: retrying after 14:02:11 UTC (backoff)" "each reason, in the claim's order (host-c stopped: not counted)"
	assert_eq "$(qa_whys nightly)" "1 n2: queue nightly is at max_running 1: run 40/n1 runs" "the quota"
	# a starving step that fits nowhere keeps its room: nothing after it starts
	sql "UPDATE step_queue SET since = now() - interval '1 hour' WHERE step_id = 4" >/dev/null
	assert_match "$(qa_whys default)" '2 cpu1: behind run 43/gpu1, which has waited past the starvation limit and keeps its room' "starving"
	assert_match "$(qa_whys default '{"starve_s": 7200}')" '2 cpu1: fits host-a now' "not starving under a longer limit"
	# GPUs free on one host, CPUs on another: never both on one
	sql "UPDATE attempts SET state = 'succeeded' WHERE step_id IN (1, 2);
	     UPDATE step_queue SET gpus = 1, cpus = 3 WHERE step_id = 4" >/dev/null
	assert_match "$(qa_whys default)" '1 gpu1: needs 1 GPU, 3 CPUs on one host; host-a has 2 of 2 GPUs, 2 of 2 CPUs free; host-b has 0 of 0 GPUs, 4 of 4 CPUs free' "mixed"
	# no daemon up
	sql "UPDATE daemons SET stopped_at = now()" >/dev/null
	assert_match "$(qa_whys default)" '2 cpu1: no daemon that admits work is up' "no host"
	assert_eq "$(sql "SELECT ferry_queue_detail('default', 2) -> 'waiting' ->> 1 IS NOT NULL AND ferry_queue_detail('default', 2) -> 'waiting' ->> 2 IS NULL")" t "at most p_limit"
}
