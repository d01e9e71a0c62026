# The ferry CLI against a real daemon, and ferry dev in-process.

test_cli_validate() {
	out=$(ferry validate "$ROOT/workflows/hello.yaml")
	assert_match "$out" 'ok' "valid file"
	f=$(wf broken <<'Y'
name: broken
steps:
  - name: a
    kind: teleport
    command: [true]
  - name: a
    command: [true]
Y
)
	set +e
	err=$(ferry validate "$f" 2>&1 >/dev/null); rc=$?
	set -e
	assert_eq "$rc" 2 "exit status"
	assert_match "$err" 'broken.yaml:4:[0-9]+: .*teleport' "unknown kind with position"
	assert_match "$err" 'broken.yaml:6:[0-9]+: .*"a"' "duplicate name with position"
}

test_cli_submit_get_list() {
	start_daemon a
	id=$(ferry submit "$ROOT/workflows/hello.yaml" -p who=cli | head -1)
	assert_match "$id" '^[0-9]+$' "id alone on the first line"
	set +e
	ferry watch "$id" > "$FERRY_HOME/watch.out"; rc=$?
	set -e
	assert_eq "$rc" 0 "watch exit status"
	assert_match "$(tail -1 "$FERRY_HOME/watch.out")" "succeeded" "watch final line"
	json=$(ferry get "$id" -o json)
	assert_eq "$(echo "$json" | json '{"id","state","steps","workflow"} <= set(j) and j["state"]')" succeeded "get -o json"
	assert_eq "$(echo "$json" | json '[[s["name"], s["state"], s["attempts"]] for s in j["steps"]][2]')" '["flaky", "succeeded", 2]' "steps with attempts"
	assert_eq "$(echo "$json" | json 'j["trigger"]')" cli "trigger"
	ferry list | grep -Eq "^$id +hello +succeeded" || fail "list row"
	sid=$(ferry submit "$ROOT/workflows/hello.yaml" -o json | json 'j["id"]')
	assert_match "$sid" '^[0-9]+$' "submit -o json has id"
	set +e
	ferry submit "$ROOT/workflows/hello.yaml" -p nope=1 >/dev/null 2>&1; rc=$?
	set -e
	assert_eq "$rc" 2 "unknown param is a usage error"
}

test_cli_stop_retry_exit_codes() {
	start_daemon a TEST_HOME="$FERRY_HOME"
	f=$(wf cli <<'Y'
name: cli-fail
steps:
  - {name: gate, command: [sh, -c, 'test -f "$TEST_HOME/ok"']}
  - {name: after, needs: [gate], command: [true]}
Y
)
	set +e
	ferry submit "$f" --watch >/dev/null; rc=$?
	set -e
	assert_eq "$rc" 1 "failed run exits 1"
	id=$(ferry list -o json | json 'j["runs"][0]["id"]')
	touch "$FERRY_HOME/ok"
	ferry retry "$id" >/dev/null
	set +e
	ferry watch "$id" >/dev/null; rc=$?
	set -e
	assert_eq "$rc" 0 "retried run succeeds"
	f2=$(wf long <<'Y'
name: long
steps:
  - {name: sleep, command: [sleep, "60"]}
Y
)
	id2=$(ferry submit "$f2" | head -1)
	wait_step "$id2" sleep running 10
	ferry stop "$id2" >/dev/null
	set +e
	ferry watch "$id2" >/dev/null; rc=$?
	ferry stop "$id2" >/dev/null 2>&1; rc2=$?
	ferry get 999999 >/dev/null 2>&1; rc3=$?
	ferry get nope >/dev/null 2>&1; rc4=$?
	set -e
	assert_eq "$rc" 1 "stopped run exits 1"
	assert_eq "$rc2" 1 "stopping a stopped run is an error"
	assert_eq "$rc3" 1 "unknown run"
	assert_eq "$rc4" 2 "malformed run id"
}

test_cli_unreachable_daemon() {
	# on a port bound and not listening, held while the CLI runs: nothing can
	# answer there (port 1 once did, in a full suite: "Connection reset")
	set +e
	err=$(python3 -c 'import os, socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0))
p = subprocess.run(["ferry", "list"], env=dict(os.environ, FERRY_URL="http://127.0.0.1:%d" % s.getsockname()[1]),
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
sys.stdout.write(p.stdout); sys.exit(p.returncode)'); rc=$?
	set -e
	assert_eq "$rc" 1 "exit status"
	assert_match "$err" 'cannot reach ferryd' "message"
}

test_dev_run_whole_and_subsets() {
	unset FERRY_DATABASE_URL
	export FERRY_DATABASE_URL="${PG_CONN/dbname=ferry/dbname=t_test_dev_run_whole_and_subsets}"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" -p who=dev --retries)
	echo "$out"
	assert_match "$out" 'greet +\| hello, dev' "streams step logs"
	assert_match "$out" 'flaky +running' "transitions"
	assert_match "$out" 'flaky +\| attempt 1: simulated failure' "first attempt's log"
	assert_match "$out" 'flaky +\| attempt 2: ok' "second attempt's log"
	assert_match "$(echo "$out" | tail -1)" 'succeeded' "final line"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" --only greet)
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" "greet=succeeded count=skipped flaky=skipped join=skipped" "--only"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" --to count)
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	to=$id
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" "greet=succeeded count=succeeded flaky=skipped join=skipped" "--to"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" --from flaky --retries)
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" "greet=succeeded count=succeeded flaky=succeeded join=succeeded" "--from"
	assert_eq "$(sql "SELECT string_agg(name || ': ' || reason, ', ' ORDER BY idx) FROM steps WHERE run_id = $id AND attempts = 0")" \
		"greet: reused from run $to, count: reused from run $to" "--from reuses the steps above it from the newest run where they succeeded"
	set +e
	ferry dev run "$ROOT/workflows/hello.yaml" --only nosuch >/dev/null 2>&1; rc=$?
	set -e
	assert_eq "$rc" 2 "unknown step"
}

test_dev_run_failure_exit_code() {
	f=$(wf devfail <<'Y'
name: devfail
steps:
  - {name: boom, command: [sh, -c, "echo about to fail; exit 4"]}
Y
)
	set +e
	out=$(ferry dev run "$f"); rc=$?
	set -e
	assert_eq "$rc" 1 "failed run"
	assert_match "$out" 'boom +\| about to fail' "log streamed"
	assert_match "$out" 'exit code 4' "reason shown"
}

# A dev run fails fast: hello's flaky step (retry: limit 2) fails its first
# attempt and the run fails, said at the start; --retries keeps the retries
# (test_dev_run_whole_and_subsets). Before, a dev run waited through each
# failing step's retries and backoffs.
test_dev_run_fails_fast_unless_retries() {
	set +e
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" 2>&1); rc=$?
	set -e
	assert_eq "$rc" 1 "the flaky step fails the dev run"
	assert_match "$out" 'a dev run fails fast: the retry: of 1 step is not applied \(--retries applies it\)' "said at the start"
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(step_col "$id" flaky attempts)" 1 "one attempt"
	assert_eq "$(step_col "$id" flaky state)" failed "failed, not retrying"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" --retries) || fail "with --retries: $out"
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(step_col "$id" flaky attempts)" 2 "--retries: retried once, as the workflow says"
	case $out in *"fails fast"*) fail "--retries: no fail-fast line" ;; esac
}
# candidate tests for t_cli.sh (ferry logs / ferry continue)

test_cli_logs() {
	start_daemon a
	id=$(ferry submit "$ROOT/workflows/hello.yaml" -p who=logs | head -1)
	# follow everything while it runs, in step order, with retries
	ferry logs "$id" -f > "$FERRY_HOME/follow.out" 2>"$FERRY_HOME/follow.err"
	cat "$FERRY_HOME/follow.out"; echo ---; cat "$FERRY_HOME/follow.err"; echo ---
	wait_run "$id" succeeded
	hdrs=$(grep '^==>' "$FERRY_HOME/follow.out" | tr '\n' '|')
	assert_eq "$hdrs" "==> greet (attempt 1) <==|==> count (attempt 1) <==|==> flaky (attempt 1) <==|==> flaky (attempt 2) <==|==> join (attempt 1) <==|" "follow headers"
	grep -q 'hello, logs' "$FERRY_HOME/follow.out" || fail "greet log"
	grep -q 'tick 3' "$FERRY_HOME/follow.out" || fail "count log"
	grep -q 'attempt 1: simulated failure' "$FERRY_HOME/follow.out" || fail "flaky attempt 1"
	out=$(ferry logs "$id")
	echo "$out"
	assert_eq "$(echo "$out" | grep '^==>' | tr '\n' '|')" "==> greet (attempt 1) <==|==> count (attempt 1) <==|==> flaky (attempt 2) <==|==> join (attempt 1) <==|" "latest attempts"
	assert_eq "$(ferry logs "$id" flaky)" "attempt 2: ok" "one step, latest"
	assert_eq "$(ferry logs "$id" flaky --attempt 1)" "attempt 1: simulated failure" "--attempt"
	assert_eq "$(ferry logs "$id" count -f | tr '\n' ' ')" "tick 1 tick 2 tick 3 " "follow finished attempt"
	set +e
	ferry logs "$id" ghost 2>"$FERRY_HOME/err"; rc=$?
	assert_eq "$rc" 1 "unknown step"
	cat "$FERRY_HOME/err"
	ferry logs 9999 2>/dev/null; rc=$?
	assert_eq "$rc" 1 "unknown run"
	ferry logs "$id" flaky --attempt 7 2>/dev/null; rc=$?
	assert_eq "$rc" 1 "unknown attempt"
	ferry logs "$id" --attempt 1 2>/dev/null; rc=$?
	assert_eq "$rc" 2 "--attempt without STEP"
	ferry logs x 2>/dev/null; rc=$?
	assert_eq "$rc" 2 "bad run id"
	ferry logs 1 a b 2>/dev/null; rc=$?
	assert_eq "$rc" 2 "too many operands"
	set -e
	ferry logs --help | grep -q 'ferry logs 12 train -f' || fail "help example"
	ferry --help | grep -q '^  logs ' || fail "listed in ferry --help"
}

test_cli_logs_follow_live() {
	start_daemon a
	# the job writes its lines, then waits for the test before its last, partial one
	f=$(wf live <<Y
name: live
steps:
  - name: slow
    command: [sh, -c, 'for i in 1 2 3 4 5; do echo "line \$i"; sleep 0.4; done; while [ ! -e "$FERRY_HOME/go" ]; do sleep 0.1; done; printf tail']
Y
)
	id=$(ferry submit "$f" | head -1)
	# lines must show up while the job still runs
	( ferry logs "$id" slow -f | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done ) > "$FERRY_HOME/live.out" 2>"$FERRY_HOME/live.err" &
	p=$!
	wait_step "$id" slow running
	for _ in $(seq 1 300); do [ "$(wc -l < "$FERRY_HOME/live.out")" -ge 1 ] && break; sleep 0.1; done
	n=$(wc -l < "$FERRY_HOME/live.out")
	[ "$n" -ge 1 ] || { cat "$FERRY_HOME/live.err"; fail "nothing streamed while running ($n)"; }
	[ "$(step_col "$id" slow state)" = running ] || fail "step ended too soon"
	touch "$FERRY_HOME/go"
	wait $p
	cat "$FERRY_HOME/live.out"
	assert_eq "$(ferry logs "$id" slow -f | tail -c 4)" "tail" "last partial line"
	assert_eq "$(grep -c line "$FERRY_HOME/live.out")" 5 "every line once"
}

test_cli_continue() {
	start_daemon a
	f=$(wf gated <<'Y'
name: gated
steps:
  - name: approve
    kind: gate
  - name: after
    needs: [approve]
    command: [sh, -c, 'echo after']
Y
)
	id=$(ferry submit "$f" | head -1)
	wait_step "$id" approve waiting
	set +e
	ferry continue "$id" approve --data '{"ok": tru' 2>"$FERRY_HOME/err"; rc=$?
	assert_eq "$rc" 2 "invalid --data"
	cat "$FERRY_HOME/err"
	ferry continue "$id" 2>/dev/null; rc=$?
	assert_eq "$rc" 2 "missing STEP"
	ferry continue "$id" after 2>"$FERRY_HOME/err"; rc=$?
	assert_eq "$rc" 1 "not waiting"
	cat "$FERRY_HOME/err"
	assert_match "$(cat "$FERRY_HOME/err")" 'blocked' "names the state"
	ferry continue "$id" ghost 2>/dev/null; rc=$?
	assert_eq "$rc" 1 "unknown step"
	set -e
	# logs -f of a run waiting on a gate waits, then follows
	ferry logs "$id" -f > "$FERRY_HOME/f.out" 2>"$FERRY_HOME/f.err" &
	p=$!
	sleep 0.6
	out=$(ferry continue "$id" approve --data '{"ok": true, "by": "ana"}')
	assert_eq "$out" "run $id step approve continued" "continue output"
	wait_run "$id" succeeded
	wait $p
	cat "$FERRY_HOME/f.out" "$FERRY_HOME/f.err"
	assert_eq "$(cat "$FERRY_HOME/f.out" | tr '\n' '|')" "==> after (attempt 1) <==|after|" "follow after gate"
	grep -q "ferry continue $id approve" "$FERRY_HOME/f.err" || fail "hint"
	set +e
	ferry continue "$id" approve 2>"$FERRY_HOME/err"; rc=$?
	set -e
	assert_eq "$rc" 1 "already continued"
	cat "$FERRY_HOME/err"
	api GET "/api/v1/runs/$id/events"
	echo "$BODY" | json '[e for e in j["events"] if e["kind"].startswith("step.cont")]'
	ferry continue --help | grep -q -- '--data' || fail "help"
}

test_cli_logs_reconnect() {
	start_daemon a
	f=$(wf recon <<'Y'
name: recon
steps:
  - name: ticks
    command: [sh, -c, 'for i in $(seq 1 16); do echo "tick $i"; sleep 0.5; done']
Y
)
	id=$(ferry submit "$f" | head -1)
	wait_step "$id" ticks running
	# the restarted daemon gets another port: the CLI finds it in the address file
	env -u FERRY_URL FERRY_ADDRESS_FILE="$FERRY_HOME/ferryd-a.url" \
		ferry logs "$id" ticks -f > "$FERRY_HOME/r.out" 2>"$FERRY_HOME/r.err" &
	p=$!
	# the follower streams before the daemon goes away
	for _ in $(seq 1 50); do grep -q tick "$FERRY_HOME/r.out" 2>/dev/null && break; sleep 0.1; done
	grep -q tick "$FERRY_HOME/r.out" || fail "logs -f streamed nothing before the kill"
	stop_daemon a KILL
	sleep 2
	start_daemon a
	wait $p; rc=$?
	cat "$FERRY_HOME/r.err"
	assert_eq "$rc" 0 "exit"
	assert_eq "$(grep -c tick "$FERRY_HOME/r.out")" 16 "every line"
	assert_eq "$(sort -u "$FERRY_HOME/r.out" | wc -l)" 16 "no line twice"
	assert_eq "$(tail -1 "$FERRY_HOME/r.out")" "tick 16" "to the end"
}

test_cli_events() {
	start_daemon a
	id=$(ferry submit "$ROOT/workflows/hello.yaml" -p who=ev | head -1)
	wait_run "$id" succeeded 30
	out=$(ferry events "$id")
	assert_match "$(echo "$out" | head -1)" '^ID +AT +ACTOR +EVENT +STEP +DETAIL' "a table"
	echo "$out" | grep -Eq ' run\.(created|succeeded|finished)| step\.' || fail "transitions listed: $out"
	n=$(ferry events "$id" -o json | json 'len(j["events"])')
	[ "$n" -ge 3 ] || fail "events in JSON: $n"
	last=$(ferry events "$id" -o json | json 'j["events"][-1]["id"]')
	assert_eq "$(ferry events "$id" --after "$last" -o json | json 'len(j["events"])')" 0 "--after skips what was seen"
	set +e
	ferry events 999999 >/dev/null 2>&1; rc=$?
	ferry events "$id" --after x >/dev/null 2>&1; rc2=$?
	set -e
	assert_eq "$rc" 1 "no such run"
	assert_eq "$rc2" 2 "a bad --after is a usage error"
	# one readable line an event: the detail as KEY=VALUE, the reason first, a long one cut (before:
	# the raw JSON, 4 KB a line for a step that failed with a long message)
	f=$(wf longfail <<'Y'
name: longfail
steps:
  - {name: a, command: [sh, -c, 'python3 -c "print(\"x\" * 3000)"; exit 3']}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	out=$(ferry events "$id")
	assert_match "$out" 'step\.failed +a #1 +reason="exit code 3: x+…' "the reason first, quoted, cut"
	assert_match "$out" 'run\.created' "every event"
	echo "$out" | awk 'length($0) > 250 { exit 1 }' || fail "a line longer than 250 characters: $out"
	assert_eq "$(ferry events "$id" -o json | json 'len([e["detail"].get("reason", "") for e in j["events"] if e["kind"] == "step.failed"][0]) > 150')" true "-o json has it whole"
}

# ferry retry -p: a changed param reruns the steps it changes (and what is
# below them), the others keep their results; the run records the params
# and the event says what changed. Before, a retry could not change params.
test_cli_retry_with_changed_params() {
	start_daemon a
	f=$(wf rp <<'Y'
name: rp
params:
  rows: {type: integer, default: 3}
  tag: {default: a}
steps:
  - {name: fixed, command: [sh, -c, 'echo fixed']}
  - {name: prepare, needs: [fixed], command: [sh, -c, 'echo "rows $FERRY_PARAM_ROWS"']}
  - {name: train, needs: [prepare], command: [sh, -c, 'echo trained']}
  - {name: side, needs: [fixed], command: [sh, -c, 'echo "tag $FERRY_PARAM_TAG"']}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	out=$(ferry retry "$id" -p rows=100) || fail "ferry retry -p: $out"
	wait_run "$id" succeeded 30
	assert_eq "$(ferry logs "$id" prepare)" "rows 100" "prepare ran with the new value"
	# every param is in each job's environment: every step's definition changed, all ran again
	assert_eq "$(sql "SELECT string_agg(name || '=' || attempts, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" \
		"fixed=2 prepare=2 train=2 side=2" "every step ran again with the new params"
	assert_eq "$(sql "SELECT params->>'rows' FROM runs WHERE id = $id")" 100 "the run records it"
	assert_eq "$(sql "SELECT detail->'params'->'rows'->>'from' || '->' || (detail->'params'->'rows'->>'to') FROM events WHERE run_id = $id AND kind = 'run.retry'")" "3->100" "the event says what changed"
	# --from: that step and below with the new value, the steps above keep theirs, listed as kept
	ferry retry "$id" --from prepare -p rows=7 >/dev/null || fail "ferry retry --from -p"
	wait_run "$id" succeeded 30
	assert_eq "$(ferry logs "$id" prepare)" "rows 7" "prepare ran with 7"
	assert_eq "$(sql "SELECT string_agg(name || '=' || attempts, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" \
		"fixed=2 prepare=3 train=3 side=2" "--from prepare: prepare and train"
	assert_eq "$(sql "SELECT detail->'kept' FROM events WHERE run_id = $id AND kind = 'run.retry' ORDER BY id DESC LIMIT 1")" \
		'["fixed", "side"]' "the steps that kept results made with the old params"
	# checked as at submit; unchanged or unknown params are refused, naming params
	api POST "/api/v1/runs/$id/retry" '{"params": {"rows": "many"}}'
	assert_eq "$CODE" 400 "a bad value: $BODY"
	assert_match "$(echo "$BODY" | json 'j["error"]["message"]')" 'parameter "rows" must be an integer' "the rule"
	api POST "/api/v1/runs/$id/retry" '{"params": {"nosuch": "1"}}'
	assert_eq "$CODE" 400 "an unknown param"
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" params "names the field"
	api POST "/api/v1/runs/$id/retry" '{"params": {"rows": 7}}'
	assert_eq "$CODE" 400 "nothing changes: $BODY"
	assert_eq "$(sql "SELECT state FROM runs WHERE id = $id")" succeeded "nothing ran"
}
