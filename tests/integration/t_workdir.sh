# Where a run's commands run (issue 10 item 9): a workflow registered with
# `ferry workflow register FILE` runs in FILE's directory when submitted by
# name, from the CLI or POST /runs, whatever the submitter's cwd; an explicit
# "workdir" wins; a command naming a relative file that is not there is
# refused at submit (400 / exit 2, naming the path and workdir:), with no run.

# wd_project DIR: a workflow file whose step runs ./train.py from its directory;
# the script writes where it ran to its output.
wd_project() {
	mkdir -p "$1"
	cat >"$1/train.py" <<'PY'
import os
open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "cwd"), "w").write(os.getcwd())
print("trained in", os.getcwd())
PY
	cat >"$1/wd.yaml" <<'YAML'
name: wd
steps:
  - name: train
    command: [python3, train.py]
YAML
}

# wd_cwd RUN: the directory the run's train step ran in.
wd_cwd() {
	cat "$(sql "SELECT a.dir FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = 'train'")/out/cwd"
}

test_workdir_registered_runs_there() {
	start_daemon a
	proj="$FERRY_HOME/proj" other="$FERRY_HOME/elsewhere"
	wd_project "$proj"
	mkdir -p "$other"
	out=$(cd "$FERRY_HOME" && ferry workflow register proj/wd.yaml) || fail "register: $out"
	assert_match "$out" "^wd [0-9a-f]{12} $proj " "register prints name, hash, workdir"
	assert_eq "$(sql "SELECT workdir FROM workflows WHERE name = 'wd'")" "$proj" "workdir recorded"
	api GET /api/v1/workflows
	assert_eq "$(echo "$BODY" | json 'j["workflows"][0]["workdir"]')" "$proj" "GET /workflows lists it"
	assert_match "$(ferry workflow list)" "wd .*$proj" "ferry workflow list shows it"

	# by name from the CLI, from another directory
	id=$(cd "$other" && ferry submit --workflow wd | head -1)
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT workdir FROM runs WHERE id = $id")" "$proj" "CLI run records the workdir"
	assert_eq "$(wd_cwd "$id")" "$proj" "CLI run ran in the registered directory"

	# by name through the API
	api POST /api/v1/runs '{"workflow": "wd"}'
	assert_eq "$CODE" 201 "POST /runs by name: $BODY"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" succeeded 30
	assert_eq "$(wd_cwd "$id")" "$proj" "API run ran in the registered directory"

	# an explicit workdir wins
	proj2="$FERRY_HOME/proj2"
	wd_project "$proj2"
	api POST /api/v1/runs "{\"workflow\": \"wd\", \"workdir\": \"$proj2\"}"
	assert_eq "$CODE" 201 "POST /runs with workdir: $BODY"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" succeeded 30
	assert_eq "$(wd_cwd "$id")" "$proj2" "the request's workdir wins"

	# the same file registered from another directory moves its runs there
	cp "$proj/wd.yaml" "$proj2/wd.yaml"
	out=$(ferry workflow register "$proj2/wd.yaml" -o json)
	assert_eq "$(echo "$out" | json 'j["created"]')" false "same content: the same version"
	assert_eq "$(sql "SELECT count(*) || ' ' || min(workdir) FROM workflows")" "1 $proj2" "re-registered"
	id=$(cd "$other" && ferry submit --workflow wd | head -1)
	wait_run "$id" succeeded 30
	assert_eq "$(wd_cwd "$id")" "$proj2" "runs follow the re-registration"
}

test_workdir_missing_file_refused_at_submit() {
	start_daemon a
	proj="$FERRY_HOME/proj" empty="$FERRY_HOME/empty"
	wd_project "$proj"
	mkdir -p "$empty"
	# registered without a directory (a bare POST /workflows): no working directory at all
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$proj/wd.yaml")
	api POST /api/v1/workflows "$body"
	assert_eq "$CODE" 201 "registered without workdir"
	api POST /api/v1/runs '{"workflow": "wd"}'
	assert_eq "$CODE" 400 "no working directory: $BODY"
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" workdir "field"
	msg=$(echo "$BODY" | json 'j["error"]["message"]')
	assert_match "$msg" 'train\.py' "names the file"
	assert_match "$msg" 'no working directory' "says why"
	assert_match "$msg" 'workdir' "says what to set"

	# an explicit workdir without the script
	api POST /api/v1/runs "{\"workflow\": \"wd\", \"workdir\": \"$empty\"}"
	assert_eq "$CODE" 400 "missing script: $BODY"
	msg=$(echo "$BODY" | json 'j["error"]["message"]')
	assert_match "$msg" "train\.py not found in $empty" "names the path"
	assert_match "$msg" "workdir:" "points at workdir:"

	# inline YAML through the CLI: the file's directory lacks the script
	cp "$proj/wd.yaml" "$empty/wd.yaml"
	rc=0
	out=$(cd "$FERRY_HOME" && ferry submit "$empty/wd.yaml" 2>&1) || rc=$?
	assert_eq "$rc" 2 "ferry submit exit status ($out)"
	assert_match "$out" "train\.py not found in $empty" "CLI names the path"
	assert_match "$out" "workdir:" "CLI points at workdir:"

	# a step workdir: that does not have it
	mkdir -p "$proj/sub"
	printf 'name: wd2\nsteps:\n  - {name: train, command: [python3, train.py], workdir: sub}\n' >"$proj/wd2.yaml"
	out=$(ferry submit "$proj/wd2.yaml" 2>&1) && fail "submitted: $out"
	assert_match "$out" "train\.py not found in $proj/sub \(the step's workdir: sub\)" "step workdir named"

	api GET /api/v1/runs
	assert_eq "$(echo "$BODY" | json 'len(j["runs"])')" 0 "no run created"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 0 "no run row"

	# and the good one still goes through
	api POST /api/v1/runs "{\"workflow\": \"wd\", \"workdir\": \"$proj\"}"
	assert_eq "$CODE" 201 "with the script there: $BODY"
}

test_workdir_register_input_edges() {
	start_daemon a
	body=$(python3 -c 'import json; print(json.dumps({"yaml": "name: e\nsteps:\n  - {name: a, command: [true]}\n", "workdir": "relative/dir"}))')
	api POST /api/v1/workflows "$body"
	assert_eq "$CODE" 400 "relative workdir"
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" workdir "field"
	body=$(python3 -c 'import json; print(json.dumps({"yaml": "name: e\nsteps:\n  - {name: a, command: [true]}\n", "workdir": "/nonexistent/ferry"}))')
	api POST /api/v1/workflows "$body"
	assert_eq "$CODE" 400 "missing workdir"
	ferry workflow register "$FERRY_HOME/nope.yaml" >/dev/null 2>&1 && fail "registered a missing file"
	rc=0
	ferry workflow frob >/dev/null 2>&1 || rc=$?
	assert_eq "$rc" 2 "unknown subcommand"
	# a registered directory removed since: refused at submit, naming it
	mkdir -p "$FERRY_HOME/gone"
	printf 'name: g\nsteps:\n  - {name: a, command: [true]}\n' >"$FERRY_HOME/gone/g.yaml"
	ferry workflow register "$FERRY_HOME/gone/g.yaml" >/dev/null
	rm -r "$FERRY_HOME/gone"
	api POST /api/v1/runs '{"workflow": "g"}'
	assert_eq "$CODE" 400 "gone directory: $BODY"
	assert_match "$(echo "$BODY" | json 'j["error"]["message"]')" "$FERRY_HOME/gone" "names it"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 0 "no run"
}
