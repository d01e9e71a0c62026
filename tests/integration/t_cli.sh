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
	start_daemon a FERRY_HOME_TEST="$FERRY_HOME"
	f=$(wf cli <<'Y'
name: cli-fail
steps:
  - {name: gate, command: [sh, -c, 'test -f "$FERRY_HOME_TEST/ok"']}
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
	set +e
	err=$(FERRY_URL=http://127.0.0.1:1 ferry list 2>&1); rc=$?
	set -e
	assert_eq "$rc" 1 "exit status"
	assert_match "$err" 'cannot reach ferryd' "message"
}

test_dev_run_whole_and_subsets() {
	unset FERRY_DATABASE_URL
	export FERRY_DATABASE_URL="${PG_CONN/dbname=ferry/dbname=t_test_dev_run_whole_and_subsets}"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" -p who=dev)
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
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" "greet=succeeded count=succeeded flaky=skipped join=skipped" "--to"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" --from flaky)
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" "greet=skipped count=skipped flaky=succeeded join=succeeded" "--from"
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
