# One API, strict and consistent: a misspelt body field or query parameter
# is a 400 naming it (never silently ignored), a filter value that is not one
# of its kind is a 400 listing the valid ones, limit above its cap is a 400
# saying the cap (not a page cut short), aliases have one shape on every
# model object, and the API's messages name its own fields, not CLI flags.

# err_field / err_code / err_msg: the parts of the JSON error in BODY.
err_field() { echo "$BODY" | json 'j["error"].get("field")'; }
err_code() { echo "$BODY" | json 'j["error"]["code"]'; }
err_msg() { echo "$BODY" | json 'j["error"]["message"]'; }

# a run that fails at once (for retry and stop)
strict_failed_run() {
	local id
	id=$(submit "$(wf sf <<'Y'
name: sf
steps:
  - {name: a, command: [sh, -c, 'exit 1']}
Y
)")
	wait_run "$id" failed 20
	echo "$id"
}

test_strict_unknown_body_fields() {
	start_daemon a
	id=$(strict_failed_run)

	api POST "/api/v1/runs/$id/retry" '{"frm": "a"}'
	assert_eq "$CODE" 400 "retry with a misspelt field"
	assert_eq "$(err_code)" unknown_field "its code"
	assert_eq "$(err_field)" frm "the field named"
	assert_match "$(err_msg)" 'unknown field "frm"; valid fields: from, no_cache' "the valid fields listed"
	assert_eq "$(sql "SELECT state FROM runs WHERE id = $id")" failed "nothing was retried"

	api POST "/api/v1/runs/$id/stop" '{"force": true}'
	assert_eq "$CODE" 400 "stop takes no fields"
	assert_eq "$(err_field)" force "stop: the field named"
	assert_match "$(err_msg)" 'takes no fields' "stop: says it takes none"
	api POST "/api/v1/runs/$id/stop" '{}'
	assert_eq "$CODE" 409 "stop with {} goes through (a finished run: 409)"

	api POST /api/v1/runs '{"yaml": "name: x\nsteps:\n  - {name: a, command: [\"true\"]}\n", "param": {"a": 1}}'
	assert_eq "$CODE" 400 "POST /runs with param for params"
	assert_eq "$(err_field)" param "POST /runs: the field named"
	assert_match "$(err_msg)" 'valid fields: yaml, workflow, filename, params, workdir, trigger, no_cache' "POST /runs: listed"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 1 "no run started"

	api POST /api/v1/workflows '{"yaml": "name: x\nsteps:\n  - {name: a, command: [\"true\"]}\n", "name": "x"}'
	assert_eq "$CODE" 400 "register a workflow with an extra field"
	assert_eq "$(err_field)" name "workflows: the field named"

	api POST "/api/v1/runs/$id/steps/a/continue" '{"date": 1}'
	assert_eq "$CODE" 400 "continue with date for data"
	assert_eq "$(err_field)" date "continue: the field named"

	api PUT /api/v1/models/m/aliases/production '{"version": "0.0.1", "force": true}'
	assert_eq "$CODE" 400 "alias PUT with an extra field"
	assert_eq "$(err_field)" force "alias: the field named"
	assert_match "$(err_msg)" 'valid fields: version' "alias: listed"
}

test_strict_query_values() {
	start_daemon a
	id=$(strict_failed_run)

	api GET "/api/v1/runs?state=zzz"
	assert_eq "$CODE" 400 "an unknown state"
	assert_eq "$(err_field)" state "state named"
	assert_match "$(err_msg)" 'pending, running, stopping, succeeded, failed, stopped' "the states listed"
	api GET "/api/v1/runs?state=failed"
	assert_eq "$CODE" 200 "a known state"
	assert_eq "$(echo "$BODY" | json '[r["id"] for r in j["runs"]]')" "[$id]" "filtered"

	api GET "/api/v1/runs?trigger=cron"
	assert_eq "$CODE" 400 "an unknown trigger"
	assert_eq "$(err_field)" trigger "trigger named"
	assert_match "$(err_msg)" 'api, cli, dev, schedule, data, git, bench' "the triggers listed"
	api GET "/api/v1/runs?workflow="
	assert_eq "$CODE" 400 "an empty workflow"
	assert_eq "$(err_field)" workflow "workflow named"
	api GET "/api/v1/runs?limit=ten"
	assert_eq "$CODE" 400 "a limit that is no integer"
	assert_eq "$(err_field)" limit "limit named"
	api GET "/api/v1/runs?limit=1&limit=2"
	assert_eq "$CODE" 400 "a parameter given twice"
	assert_eq "$(err_field)" limit "the repeated one named"

	api GET "/api/v1/runs?stat=failed"
	assert_eq "$CODE" 400 "an unknown query parameter"
	assert_eq "$(err_code)" unknown_field "its code"
	assert_eq "$(err_field)" stat "the parameter named"
	assert_match "$(err_msg)" 'valid query parameters: state, workflow, trigger, exclude_trigger, limit, cursor' "the valid ones listed"
	api GET "/api/v1/runs/$id?verbose=1"
	assert_eq "$CODE" 400 "GET /runs/{id} takes none (also when answered from the cache)"
	assert_eq "$(err_field)" verbose "named"
	api GET "/api/v1/runs/$id/events?after=-1"
	assert_eq "$CODE" 400 "a negative after"
	assert_eq "$(err_field)" after "after named"
	api GET "/api/v1/runs/$id/events?since=3"
	assert_eq "$(err_field)" since "events: an unknown parameter named"
	api GET "/api/v1/runs/$id/steps/a/logs?follow=yes"
	assert_eq "$CODE" 400 "follow=yes"
	assert_eq "$(err_field)" follow "follow named"
	api GET "/api/v1/models?name=m"
	assert_eq "$CODE" 400 "models take no query parameters"
	assert_eq "$(err_field)" name "models: named"
	api GET "/api/v1/cache?hots=x"
	assert_eq "$(err_field)" hots "cache: named"

	# what the CLI sends is still taken
	out=$(ferry list --state failed --workflow sf --limit 5 2>&1) || fail "ferry list: $out"
	assert_match "$out" "$id" "ferry list"
	ferry events "$id" >/dev/null 2>&1 || fail "ferry events"
	ferry logs "$id" a >/dev/null 2>&1 || fail "ferry logs"
}

test_strict_limit_cap() {
	start_daemon a
	api GET "/api/v1/runs?limit=500"
	assert_eq "$CODE" 200 "the cap itself"
	api GET "/api/v1/runs?limit=501"
	assert_eq "$CODE" 400 "over the cap: not cut to 500"
	assert_eq "$(err_field)" limit "limit named"
	assert_match "$(err_msg)" 'at most 500' "the cap said"
	out=$(ferry list --limit 501 2>&1) && fail "ferry list --limit 501 succeeded: $out"
	assert_match "$out" '1 to 500' "the CLI says the cap"
}

test_strict_alias_shape() {
	start_daemon a
	f=$(wf sa <<'Y'
name: sa
steps:
  - name: train
    command: [sh, -c, 'echo x >"$FERRY_OUTPUT_DIR/model.bin"']
  - {name: register, kind: register, needs: [train], model: m, alias: [production, staging]}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	api GET /api/v1/models
	assert_eq "$(echo "$BODY" | json 'sorted(j["models"][0]["aliases"].items())')" '[["production", "0.0.1"], ["staging", "0.0.1"]]' \
		"list: alias to version"
	api GET /api/v1/models/m
	assert_eq "$CODE" 200 "GET the model"
	assert_eq "$(echo "$BODY" | json 'sorted(j["aliases"].items())')" '[["production", "0.0.1"], ["staging", "0.0.1"]]' \
		"one model: the same shape (it was a list of objects)"
	api GET /api/v1/models/m/versions
	assert_eq "$(echo "$BODY" | json 'j["versions"][0]["aliases"]')" '["production", "staging"]' "a version: the names"
	api GET /api/v1/models/m/versions/production
	assert_eq "$(echo "$BODY" | json 'j["aliases"]')" '["production", "staging"]' "one version: the names"
	out=$(ferry models list 2>&1) || fail "ferry models list: $out"
	assert_match "$out" 'production→0\.0\.1' "ferry models list prints the aliases"
	out=$(ferry models versions m 2>&1) || fail "ferry models versions: $out"
	assert_match "$out" 'production' "ferry models versions prints them"
}

test_strict_messages_name_api_fields() {
	start_daemon a
	f=$(wf sm <<'Y'
name: sm
params:
  n: {type: integer}
steps:
  - {name: a, command: [sh, -c, 'exit 0']}
Y
)
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$f")
	api POST /api/v1/runs "$body"
	assert_eq "$CODE" 400 "a param without default, not given"
	assert_eq "$(err_field)" params "params named"
	case "$(err_msg)" in *-p*) fail "the API's message names a CLI flag: $(err_msg)" ;; esac

	id=$(submit "$f" '{"n": 1}')
	wait_run "$id" succeeded 20
	api POST "/api/v1/runs/$id/retry" '{}'
	assert_eq "$CODE" 409 "a succeeded run is not retried without from"
	assert_match "$(err_msg)" '"from"' "the API's field named"
	case "$(err_msg)" in *--from*) fail "the API's message names a CLI flag: $(err_msg)" ;; esac
	out=$(ferry retry "$id" 2>&1) && fail "ferry retry of a succeeded run succeeded"
	assert_match "$out" '--from STEP' "the CLI says its own flag"
	out=$(ferry submit "$f" 2>&1) && fail "ferry submit without n succeeded"
	assert_match "$out" '-p NAME=VALUE' "the CLI says its own flag for params"
}
