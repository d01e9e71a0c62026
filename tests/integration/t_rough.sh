# Rough edges a new user hits (issue 10): failure reasons, waiting steps.

# A step that exits non-zero says why: the last line its command printed.
test_failure_reason_says_why() {
	start_daemon a
	f=$(wf typo <<'Y'
name: typo
steps:
  - {name: train, command: [sh, -c, "echo starting; pyhton3 x"]}
  - {name: quiet, command: [sh, -c, "exit 3"]}
  - {name: noisy, command: [sh, -c, "printf 'a\\033[31mred\\033[0m\\tz\\n\\n\\n'; exit 5"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 20
	api GET "/api/v1/runs/$id"
	reason=$(echo "$BODY" | json '[s for s in j["steps"] if s["name"]=="train"][0]["reason"]')
	assert_match "$reason" '^exit code 127: .*pyhton3.*not found$' "API step reason"
	assert_eq "$(echo "$BODY" | json '[s for s in j["steps"] if s["name"]=="train"][0]["attempt_list"][0]["reason"]')" "$reason" "API attempt reason"
	assert_eq "$(step_col "$id" quiet reason)" "exit code 3" "a silent step keeps the bare exit code"
	assert_eq "$(step_col "$id" noisy reason)" "exit code 5: ared z" "control characters and blank lines dropped"
	out=$(ferry get "$id")
	echo "$out"
	assert_match "$out" 'train .*exit code 127: .*pyhton3.*not found' "ferry get"
}

# A run waiting for a person says so everywhere, with the command that continues it.
test_waiting_step_shows_continue() {
	start_daemon a
	f=$(wf gated <<'Y'
name: gated
steps:
  - {name: prep, command: [sh, -c, 'echo prep']}
  - {name: approve, kind: gate, needs: [prep]}
  - {name: after, needs: [approve], command: [sh, -c, 'echo after']}
Y
)
	ferry submit "$f" --watch > "$FERRY_HOME/watch.out" 2>&1 &
	wp=$!
	id=
	for _ in $(seq 1 100); do
		# (|| true: the background shell may not have made the file yet, and a failed head
		# under the test's set -e ended the test there, with no word: cc3)
		id=$(head -1 "$FERRY_HOME/watch.out" 2>/dev/null || true)
		[ -n "$id" ] && break
		sleep 0.1
	done
	assert_match "$id" '^[0-9]+$' "submit --watch prints the id first"
	wait_step "$id" approve waiting
	# the API: state stays running, "waiting" names the steps
	api GET "/api/v1/runs/$id"
	assert_eq "$(echo "$BODY" | json 'j["state"]')" running "API state unchanged"
	assert_eq "$(echo "$BODY" | json 'j["waiting"]')" '["approve"]' "API run: waiting steps"
	api GET "/api/v1/runs?limit=5"
	assert_eq "$(echo "$BODY" | json '[r["waiting"] for r in j["runs"] if r["id"]=='"$id"'][0]')" '["approve"]' "API list: waiting steps"
	# ferry list and ferry get
	ferry list | grep -Eq "^$id +gated +waiting" || { ferry list; fail "list shows waiting"; }
	# and filters on it: waiting is a running run with a step waiting for a person
	assert_eq "$(ferry list --state waiting | awk 'NR > 1 { print $1 }')" "$id" "ferry list --state waiting"
	api GET "/api/v1/runs?state=waiting"
	assert_eq "$(echo "$BODY" | json '[r["id"] for r in j["runs"]]')" "[$id]" "API ?state=waiting"
	out=$(ferry get "$id")
	echo "$out"
	assert_match "$out" 'State: .*waiting' "get: run state"
	assert_match "$out" "approve +waiting .*ferry continue $id approve" "get: continue command"
	# ferry watch (line mode) and submit --watch
	timeout 3 ferry watch "$id" > "$FERRY_HOME/watch2.out" 2>&1 || true
	cat "$FERRY_HOME/watch2.out"
	grep -Eq "approve +waiting .*ferry continue $id approve" "$FERRY_HOME/watch2.out" || fail "watch: continue command"
	grep -Eq "approve +waiting .*ferry continue $id approve" "$FERRY_HOME/watch.out" || { cat "$FERRY_HOME/watch.out"; fail "submit --watch: continue command"; }
	# ferry logs on the gate
	set +e
	ferry logs "$id" approve > "$FERRY_HOME/logs.out" 2> "$FERRY_HOME/logs.err"; rc=$?
	set -e
	cat "$FERRY_HOME/logs.err"
	assert_match "$(cat "$FERRY_HOME/logs.err")" "waiting for a person.*ferry continue $id approve" "logs: waiting, and how to continue"
	if grep -q 'not started' "$FERRY_HOME/logs.err"; then fail "logs still says not started"; fi
	ferry continue "$id" approve >/dev/null
	wait $wp || fail "submit --watch ends 0 once the run succeeded"
	wait_run "$id" succeeded
	api GET "/api/v1/runs/$id"
	assert_eq "$(echo "$BODY" | json 'j["waiting"]')" '[]' "nothing waiting any more"
	ferry list | grep -Eq "^$id +gated +succeeded" || fail "list after"
	assert_eq "$(ferry list --state waiting | awk 'NR > 1 { print $1 }')" "" "no longer waiting"
}

# A label step shows its labelling task next to the continue command.
test_waiting_label_shows_task() {
	start_daemon a
	mkdir -p "$FERRY_HOME/ds"
	echo a >"$FERRY_HOME/ds/one.txt"
	echo b >"$FERRY_HOME/ds/two.txt"
	f=$(wf lab <<Y
name: lab
steps:
  - {name: label, kind: label, dataset: $FERRY_HOME/ds}
Y
)
	id=$(submit "$f")
	wait_step "$id" label waiting 10
	out=$(ferry get "$id")
	echo "$out"
	assert_match "$out" "label +waiting .*labelling task: 2 of 2 items in $FERRY_HOME/ds have no label.*ferry continue $id label" "get: task and command"
	ferry list | grep -Eq "^$id +lab +waiting" || fail "list shows waiting"
}

# A waiting gate said no to (ferry reject): the step fails with the reason
# and who said it, not retried, an event with the reason; the run fails and
# the steps below are skipped. Before, a gate could only be continued or
# left to time out. Rejecting a step that is not waiting is a 409.
test_gate_rejected_with_a_reason() {
	start_daemon a
	f=$(wf rej <<'Y'
name: rej
steps:
  - {name: approve, kind: gate}
  - {name: after, needs: [approve], command: [sh, -c, 'echo never']}
Y
)
	id=$(submit "$f")
	wait_step "$id" approve waiting 20
	out=$(ferry reject "$id" approve --reason 'f1 dropped on the new data') || fail "ferry reject: $out"
	assert_eq "$out" "run $id step approve rejected" "said"
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" approve reason)" '^rejected by admin \(as [a-z]+\): f1 dropped on the new data$' "the reason and who"
	assert_eq "$(step_col "$id" after state)" skipped "the step below skipped"
	assert_match "$(sql "SELECT detail->>'reason' FROM events WHERE run_id = $id AND kind = 'step.rejected'")" \
		'f1 dropped on the new data$' "an event"
	api POST "/api/v1/runs/$id/steps/approve/reject" '{}'
	assert_eq "$CODE" 409 "not waiting any more: $BODY"
	api POST "/api/v1/runs/$id/steps/approve/reject" '{"reason": 3}'
	assert_eq "$CODE" 400 "a reason that is not text: $BODY"
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" reason "names the field"
}
