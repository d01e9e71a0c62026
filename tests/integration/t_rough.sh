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
