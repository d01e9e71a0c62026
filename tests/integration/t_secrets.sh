# Step secrets (issue 24, item 6): `ferryd secret set` / PUT /secrets/{name}
# seal a value; a step that lists it under `secrets:` gets it in its
# environment; the value never shows in the log (masked as it is written,
# also when printed in pieces), the API, events, `ferry get` or the
# database; submit refuses a secret that is not set, at its step's line.
# Before this, a credential could only go through `env:`, which the spec,
# the API and `ferry get` carried in the clear.

SECRET_VALUE='hf_Zq8xV3-secret-value-9'

test_secrets_in_the_job_masked_everywhere_else() {
	start_daemon a
	# the job compares what it got with the value's hash (the value itself is nowhere in the workflow)
	id_wf=$(wf sec <<Y
name: sec
steps:
  - name: use
    command: [bash, -c, 'test "\$(printf %s "\$HF_TOKEN" | sha256sum)" = "\$EXPECT  -" && echo "same value"; echo "whole: \$HF_TOKEN"; printf "split: %s" "\${HF_TOKEN:0:7}"; sleep 0.4; printf "%s end\\n" "\${HF_TOKEN:7}"; echo "prefix: \${HF_TOKEN:0:10}"; echo "\$HF_TOKEN" > "\$FERRY_OUTPUT_DIR/copy"']
    env: {EXPECT: "$(printf %s "$SECRET_VALUE" | sha256sum | cut -d' ' -f1)"}
    secrets: [HF_TOKEN]
Y
)
	# not set yet: refused at submit, at the step, the run not made
	body=$(jq -n --rawfile yaml "$id_wf" '{yaml: $yaml, filename: "sec.yaml"}')
	api POST /api/v1/runs "$body"
	assert_eq "$CODE" 400 "a secret not set: $BODY"
	assert_match "$BODY" 'sec.yaml:3:5: step \\"use\\": secret HF_TOKEN is not set' "file:line:col and the rule"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 0 "no run made"

	# set from stdin by ferryd (the daemon's own user): the key file is made 0600
	printf '%s\n' "$SECRET_VALUE" | ferryd secret set HF_TOKEN 2>"$FERRY_HOME/set.err" || fail "ferryd secret set: $(cat "$FERRY_HOME/set.err")"
	assert_eq "$(stat -c %a "$FERRY_HOME/secrets.key")" 600 "the key file"
	ferryd secret list >"$FERRY_HOME/list.out"
	assert_match "$(cat "$FERRY_HOME/list.out")" 'HF_TOKEN +admin' "listed by name"
	! grep -q "$SECRET_VALUE" "$FERRY_HOME/list.out" "$FERRY_HOME/set.err" || fail "ferryd printed the value"
	# sealed at rest: the bytes in the database are not the value
	assert_eq "$(sql "SELECT position(convert_to('$SECRET_VALUE', 'UTF8') IN sealed) FROM secrets WHERE name = 'HF_TOKEN'")" 0 "sealed"

	id=$(submit "$id_wf")
	wait_run "$id" succeeded 30
	dir=$(sql "SELECT a.dir FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'use'")
	log=$(cat "$dir/log")
	assert_match "$log" 'same value' "the job got the value"
	assert_match "$log" 'whole: \*\*\*' "masked whole"
	assert_match "$log" 'split: \*\*\* end' "masked when written in two pieces 0.4 s apart"
	assert_match "$log" 'prefix: hf_Zq8xV3-' "a part of it is not the value"
	case $log in *"$SECRET_VALUE"*) fail "the value is in the log: $log" ;; esac
	# the job's own file holds it (its output is its own), nothing Ferry shows does
	api GET "/api/v1/runs/$id/steps/use/logs"
	case $BODY in *"$SECRET_VALUE"*) fail "the value in the API's log" ;; esac
	local what
	for what in "/api/v1/runs/$id" "/api/v1/runs/$id/steps/use" "/api/v1/runs/$id/events" /api/v1/secrets /api/v1/audit; do
		api GET "$what"
		assert_eq "$CODE" 200 "GET $what"
		case $BODY in *"$SECRET_VALUE"*) fail "the value in GET $what" ;; esac
	done
	out=$(ferry get "$id" 2>&1)
	case $out in *"$SECRET_VALUE"*) fail "the value in ferry get" ;; esac
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND spec::text LIKE '%$SECRET_VALUE%'")" 0 "not in the spec"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND detail::text LIKE '%$SECRET_VALUE%'")" 0 "not in events"
	! grep -q "$SECRET_VALUE" "$FERRY_HOME"/ferryd-*.log || fail "the value in ferryd's log"
	# who set it is audited, by name
	api GET "/api/v1/audit?object=secret"
	assert_eq "$(echo "$BODY" | json '[(a["actor"], a["action"], a["detail"]["name"]) for a in j["audit"]]')" \
		'[["admin", "set", "HF_TOKEN"]]' "the audit trail"
}

# Roles: viewers list names, only an admin sets or removes; a bad name or a
# short value is a 400 naming the field; a removed secret fails the step
# that names it when it starts, saying which.
test_secrets_roles_and_removal() {
	ferryd token create sec-op --role operator >"$FERRY_HOME/token.op" 2>/dev/null
	ferryd token create sec-view --role viewer >"$FERRY_HOME/token.view" 2>/dev/null
	start_daemon a
	FERRY_API_TOKEN=$(cat "$FERRY_HOME/token.op") api PUT /api/v1/secrets/DB_PASS '{"value": "hunter2hunter2"}'
	assert_eq "$CODE" 403 "an operator cannot set a secret: $BODY"
	api PUT /api/v1/secrets/DB_PASS '{"value": "hunter2hunter2"}'
	assert_eq "$CODE" 200 "an admin sets it: $BODY"
	case $BODY in *hunter2*) fail "the answer repeats the value" ;; esac
	api PUT /api/v1/secrets/FERRY_X '{"value": "hunter2hunter2"}'
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" name "a FERRY_ name: $BODY"
	api PUT /api/v1/secrets/SHORT '{"value": "abc"}'
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" value "a value too short to mask: $BODY"
	FERRY_API_TOKEN=$(cat "$FERRY_HOME/token.view") api GET /api/v1/secrets
	assert_eq "$(echo "$BODY" | json '[s["name"] for s in j["secrets"]]')" '["DB_PASS"]' "a viewer lists names"
	FERRY_API_TOKEN=$(cat "$FERRY_HOME/token.view") ferry secrets list >"$FERRY_HOME/cli.out"
	assert_match "$(cat "$FERRY_HOME/cli.out")" 'DB_PASS +admin' "ferry secrets list"
	echo "other-value-1" | FERRY_API_TOKEN=$(cat "$FERRY_HOME/token.op") ferry secrets set API_KEY 2>"$FERRY_HOME/cli.err" &&
		fail "an operator's ferry secrets set succeeded"
	assert_match "$(cat "$FERRY_HOME/cli.err")" 'needs a token with role admin' "the CLI says why"
	echo "other-value-1" | ferry secrets set API_KEY >/dev/null || fail "ferry secrets set as admin"

	# ferry validate asks the daemon whether the named secrets are set (names only)
	f=$(wf val <<'Y'
name: val
steps:
  - {name: a, command: ["true"], secrets: [API_KEY]}
  - {name: b, command: ["true"], secrets: [NOPE]}
Y
)
	rc=0; ferry validate "$f" >/dev/null 2>"$FERRY_HOME/val.err" || rc=$?
	assert_eq "$rc" 2 "validate refuses a secret not set"
	assert_match "$(cat "$FERRY_HOME/val.err")" "val.yaml:4:5: step \"b\": secret NOPE is not set on the daemon" "at its step"
	! grep -q API_KEY "$FERRY_HOME/val.err" || fail "API_KEY is set: $(cat "$FERRY_HOME/val.err")"
	# no daemon to ask: valid, with a warning that they were not checked
	FERRY_URL=http://127.0.0.1:9 ferry validate "$f" >/dev/null 2>"$FERRY_HOME/val.err" || fail "validate without a daemon"
	assert_match "$(cat "$FERRY_HOME/val.err")" "warning: the secrets its steps name were not checked" "says so"

	# b names DB_PASS and waits behind a; DB_PASS removed meanwhile: b fails to start, saying so
	id=$(submit "$(wf rm <<'Y'
name: rm
steps:
  - {name: a, command: [sleep, "2"]}
  - {name: b, needs: [a], command: [sh, -c, 'echo "$DB_PASS"'], secrets: [DB_PASS, API_KEY]}
Y
)")
	FERRY_API_TOKEN=$(cat "$FERRY_HOME/token.op") api DELETE /api/v1/secrets/DB_PASS
	assert_eq "$CODE" 403 "an operator cannot remove it"
	ferry secrets rm DB_PASS >/dev/null || fail "ferry secrets rm"
	wait_run "$id" failed 30
	assert_match "$(step_col "$id" b reason)" 'cannot start: secret DB_PASS is not set' "the step says which"
	api DELETE /api/v1/secrets/DB_PASS
	assert_eq "$CODE" 404 "removed already"
	api GET "/api/v1/audit?object=secret"
	assert_eq "$(echo "$BODY" | json '[(a["action"], a["detail"]["name"]) for a in j["audit"]]')" \
		'[["removed", "DB_PASS"], ["set", "API_KEY"], ["set", "DB_PASS"]]' "set and removed, newest first"
}
