# Dev mode (`ferry dev run`): --only/--from reuse the results of the steps
# they skip from an earlier run, the session's lease on its run, and the
# embedded PostgreSQL it starts. test_dev_run_whole_and_subsets and
# test_dev_run_failure_exit_code are in t_cli.sh.

# --only/--from take the outputs of the steps they skip from an earlier run
# (--reuse RUN, or the newest one in which they succeeded), and say so
test_dev_run_reuses_upstream_outputs() {
	f=$(wf reuse <<'Y'
name: reuse
steps:
  - name: prepare
    command: [sh, -c, 'echo "data of run $FERRY_RUN_ID" >"$FERRY_OUTPUT_DIR/data"; echo "{\"rows\": 42}" >"$FERRY_OUTPUT_DIR/metrics.json"']
  - name: train
    needs: [prepare]
    command: [sh, -c, 'cat "$1"; echo "model from $1" >"$FERRY_OUTPUT_DIR/model"', x, "{{steps.prepare.outputs.data}}"]
  - name: evaluate
    needs: [train]
    command: [sh, -c, 'cat "$1"', x, "{{steps.train.outputs.model}}"]
Y
)
	set +e
	out=$(ferry dev run "$f" --only train 2>&1); rc=$?
	set -e
	assert_eq "$rc" 2 "nothing to reuse yet"
	assert_match "$out" 'no earlier run of workflow "reuse" in which prepare succeeded' "says why"
	assert_match "$out" "ferry dev run $f --to prepare" "shows the command that makes one"

	out=$(ferry dev run "$f" --to prepare)
	first=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	ferry dev run "$f" --to prepare >/dev/null # a newer one: --reuse picks the older
	out=$(ferry dev run "$f" --only train --reuse "$first")
	echo "$out"
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_match "$(echo "$out" | head -1)" "^run $id \\(dev\\) of .*reusing the results of run $first" "the first line says where inputs come from"
	assert_match "$out" "prepare +reused from run $first" "progress"
	assert_match "$out" "train +\\| data of run $first" "train read the earlier run's output"
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" \
		"prepare=succeeded train=succeeded evaluate=skipped" "--only train --reuse"
	assert_eq "$(sql "SELECT detail->'reused_from'->>'run' FROM events WHERE run_id = $id AND kind = 'step.reused' AND step = 'prepare'")" "$first" "where from, in the events"
	assert_eq "$(sql "SELECT (metrics->'prepare'->>'rows')::numeric = 42 FROM runs WHERE id = $id")" t "the reused metrics are the run's"

	out=$(ferry dev run "$f" --from evaluate)
	echo "$out"
	id2=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_match "$(echo "$out" | head -1)" "reusing the results of run $id" "the newest run in which prepare and train succeeded"
	assert_match "$out" "evaluate +\\| model from $FERRY_HOME/runs/$first/prepare/1/out/data" "evaluate read the earlier model"
	assert_eq "$(sql "SELECT state FROM runs WHERE id = $id2")" succeeded "--from evaluate"

	set +e
	out=$(ferry dev run "$f" --from evaluate --reuse "$first" 2>&1); rc=$?
	set -e
	assert_eq "$rc" 2 "train never succeeded in that run"
	assert_match "$out" "run $first is not a run of workflow \"reuse\" in which prepare, train succeeded" "--reuse of a run without them"
}

# --only reuses only results made from the same inputs: a prepare made with
# rows=3 is not taken for a run with rows=100 (before: silently reused), the
# error names the params that differ; --reuse-anyway takes it, marked so
test_dev_run_reuse_needs_the_same_params() {
	f=$(wf rows <<'Y'
name: rows
params:
  rows: {default: "3"}
steps:
  - name: prepare
    command: [sh, -c, 'echo "$FERRY_PARAM_ROWS rows" >"$FERRY_OUTPUT_DIR/data"']
  - name: train
    needs: [prepare]
    command: [sh, -c, 'cat "$1"', x, "{{steps.prepare.outputs.data}}"]
Y
)
	ferry dev run "$f" --to prepare -p rows=3 >/dev/null || fail "prepare with rows=3"
	first=$(sql "SELECT max(id) FROM runs")
	set +e
	out=$(ferry dev run "$f" --only train -p rows=100 2>&1); rc=$?
	set -e
	assert_eq "$rc" 2 "refused: $out"
	assert_match "$out" "run $first ran prepare with other inputs than this run's \(params rows=3 there, rows=100 here\)" "names the params"
	assert_match "$out" "ferry dev run $f --to prepare" "how to make them"
	assert_match "$out" "--reuse-anyway" "and the way past it"
	# the same params: reused
	out=$(ferry dev run "$f" --only train -p rows=3)
	assert_match "$out" "train +\| 3 rows" "same params: reused"
	# anyway: reused, and the reason says so
	out=$(ferry dev run "$f" --only train -p rows=100 --reuse-anyway)
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_match "$out" "train +\| 3 rows" "reused anyway"
	assert_match "$(step_col "$id" prepare reason)" "reused from run [0-9]+ \(made from other inputs: --reuse-anyway\)" "marked"
	assert_eq "$(sql "SELECT detail->'reused_from'->>'same_inputs' FROM events WHERE run_id = $id AND kind = 'step.reused'")" false "in its event"
	# made with rows=100, it is what --only takes next
	ferry dev run "$f" --to prepare -p rows=100 >/dev/null || fail "prepare with rows=100"
	out=$(ferry dev run "$f" --only train -p rows=100)
	assert_match "$out" "train +\| 100 rows" "the matching run"
}

# the digits example debugged one step at a time: --only train and --from
# evaluate take the label and the model of an earlier run
test_dev_run_digits_reuse() {
	[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sklearn' 2>/dev/null || fail "python3-sklearn is not installed (make deps)"
	start_daemon a
	# a copy whose load test allows a loaded machine's p99 (digits_copy): the example's 500 ms failed the deploy in CI
	f=$(digits_copy) || fail "cannot copy the digits example"
	id=$(ferry submit "$f")
	wait_step "$id" label waiting 20
	ferry continue "$id" label --data '{"reviewed_by": "ana"}' >/dev/null
	wait_run "$id" succeeded 240
	model=$(step_col "$id" train "outputs->'best'->'outputs'->>'model'")

	out=$(ferry dev run "$f" --only train --reuse "$id")
	echo "$out"
	only=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_match "$(echo "$out" | head -1)" "reusing the results of run $id" "first line"
	assert_match "$out" "label +reused from run $id" "progress"
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $only AND parent_id IS NULL")" \
		"label=succeeded train=succeeded evaluate=skipped register=skipped deploy=skipped" "--only train --reuse"
	assert_match "$(ferry get "$only")" "reused from run $id" "ferry get says where label came from"

	out=$(ferry dev run "$f" --from evaluate)
	echo "$out"
	from=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_match "$(echo "$out" | head -1)" "reusing the results of run $only" "the newest run where label and train succeeded"
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $from AND parent_id IS NULL")" \
		"label=succeeded train=succeeded evaluate=succeeded register=succeeded deploy=succeeded" "--from evaluate"
	assert_eq "$(step_col "$from" train "outputs->'best'->'outputs'->>'model'")" \
		"$(step_col "$only" train "outputs->'best'->'outputs'->>'model'")" "the model reused"
	assert_match "$(sql "SELECT spec::text FROM steps WHERE run_id = $from AND name = 'evaluate'")" "steps.train.best.outputs.model" "evaluate reads train's best output"
	assert_eq "$(sql "SELECT artifact FROM model_versions v JOIN runs r ON r.id = v.run_id WHERE r.id = $from")" \
		"$(sha256sum "$(step_col "$only" train "outputs->'best'->'outputs'->>'model'")" | cut -d' ' -f1)" "what register took is the reused best model"
	[ -n "$(step_col "$from" evaluate "metrics->>'accuracy'")" ] || fail "evaluate scored the reused model"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $from AND s.name IN ('label', 'train')")" 0 "nothing above evaluate ran"
	echo "model of run $id: $model"
}

# a `ferry dev run` killed with -9 holds a lease on its run: when it
# expires, the daemon's leader stops the run ("dev session ended") and
# its jobs are killed, instead of the run staying running forever
test_dev_run_killed_session_ends() {
	start_daemon a
	f=$(wf devkill <<'Y'
name: devkill
steps:
  - name: long
    command: [sh, -c, 'echo $$ >"$FERRY_OUTPUT_DIR/../../pid"; sleep 300']
  - {name: after, needs: [long], command: [true]}
Y
)
	ferry dev run "$f" >"$FERRY_HOME/dev.out" 2>&1 &
	dev=$!
	for _ in $(seq 1 100); do [ -s "$FERRY_HOME/runs/1/long/pid" ] && break; sleep 0.1; done
	[ -s "$FERRY_HOME/runs/1/long/pid" ] || { cat "$FERRY_HOME/dev.out"; fail "the dev run's step never started"; }
	job=$(cat "$FERRY_HOME/runs/1/long/pid")
	assert_eq "$(sql "SELECT dev_lease_until > now() FROM runs WHERE id = 1")" t "the session holds a lease"
	# dev runs are left out of ferry list (before: they crowded it), shown with --dev or --trigger dev
	case "$(ferry list 2>&1)" in *devkill*) fail "ferry list shows a dev run" ;; esac
	assert_match "$(ferry list --dev)" "devkill +running +dev" "ferry list --dev marks the run dev"
	assert_match "$(ferry list --trigger dev)" "devkill +running +dev" "ferry list --trigger dev"
	case "$(ferry list --trigger cli 2>&1)" in *devkill*) fail "--trigger cli shows a dev run" ;; esac
	ferry list --trigger nosuch >/dev/null 2>&1 && fail "an unknown trigger is accepted"
	api GET "/api/v1/runs?exclude_trigger=nosuch"
	assert_eq "$CODE" 400 "exclude_trigger is checked: $BODY"
	sleep 2.5 # longer than one lease: the session renews it while it lives
	assert_eq "$(sql "SELECT state FROM runs WHERE id = 1")" running "a live session keeps its run"
	kill -9 "$dev"
	wait "$dev" 2>/dev/null || true
	start=$(date +%s%N)
	wait_run 1 stopped 6
	ms=$(( ($(date +%s%N) - start) / 1000000 ))
	echo "stopped ${ms} ms after the kill"
	[ "$ms" -le 5000 ] || fail "stopped ${ms} ms after the kill (lease 2000 ms)"
	assert_eq "$(sql "SELECT reason FROM runs WHERE id = 1")" "dev session ended" "run reason"
	assert_eq "$(sql "SELECT string_agg(name || '=' || state || ':' || coalesce(reason, ''), ' ' ORDER BY idx) FROM steps WHERE run_id = 1")" \
		"long=stopped:dev session ended after=stopped:dev session ended" "steps: the running one killed"
	for _ in $(seq 1 30); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$job" 2>/dev/null && fail "the dev run's job $job still runs"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = 1 AND kind = 'run.dev_session_ended'")" 1 "event"
}

# the embedded PostgreSQL that `ferry dev` started is stopped when it
# exits; one that was running already is left running
test_dev_run_stops_the_postgres_it_started() {
	unset FERRY_DATABASE_URL
	export FERRY_HOME="$FERRY_HOME/emb"
	mkdir -p "$FERRY_HOME" && chmod 755 "$FERRY_HOME"
	pidfile="$FERRY_HOME/pg/data/postmaster.pid"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" --only greet 2>&1) || { echo "$out"; fail "dev run on the embedded database"; }
	assert_match "$out" 'run 1 \(dev\)' "ran on the embedded cluster"
	[ -f "$FERRY_HOME/pg/data/PG_VERSION" ] || fail "no embedded cluster was made"
	[ ! -f "$pidfile" ] || fail "the PostgreSQL ferry dev started still runs"

	ferryd db start >/dev/null
	[ -f "$pidfile" ] || fail "ferryd db start"
	out=$(ferry dev run "$ROOT/workflows/hello.yaml" --only greet 2>&1) || { echo "$out"; ferryd db stop; fail "second dev run"; }
	assert_match "$out" 'run 2 \(dev\)' "the same cluster"
	[ -f "$pidfile" ] || fail "a PostgreSQL that was already running was stopped"
	ferryd db stop >/dev/null
}

# a reused cache step: the dev run opens its own session on the staged
# entry (pinned while it runs) and the step below reads the staged data
test_dev_run_reuses_cache_session() {
	mkdir -p "$FERRY_HOME/data"
	echo "x,y" >"$FERRY_HOME/data/a.csv"
	f=$(wf dcdev <<'Y'
name: dcdev
steps:
  - name: stage
    kind: cache
    dataset: data
  - name: use
    needs: [stage]
    command: [sh, -c, 'cat "$FERRY_CACHE_DIR/a.csv"; echo "session=$FERRY_CACHE_SESSION"']
Y
)
	out=$(ferry dev run "$f")
	first=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	out=$(ferry dev run "$f" --only use)
	echo "$out"
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_match "$out" "stage +reused from run $first" "the cache step is reused"
	s=$(sql "SELECT id FROM cache_sessions WHERE run_id = $id")
	[ -n "$s" ] || fail "no cache session for the dev run"
	assert_match "$out" "use +\| x,y" "reads the staged data"
	assert_match "$out" "use +\| session=$s" "the dev run's own session"
	assert_eq "$(sql "SELECT released_at IS NOT NULL FROM cache_sessions WHERE run_id = $id")" t "released when the run ended"
}

# `ferry dev step RUN STEP` runs a failed step of a daemon's run again here:
# the same rendered command, FERRY_* values, params and upstream outputs,
# the same exit code, in a fresh directory; `-- COMMAND` runs in its place
# with the same environment; the run itself does not change
test_dev_step_reproduces_a_failed_step() {
	start_daemon a
	f=$(wf dstep <<'Y'
name: dstep
params:
  lr: {default: "0.5"}
steps:
  - name: prepare
    command: [sh, -c, 'echo "rows of run $FERRY_RUN_ID" >"$FERRY_OUTPUT_DIR/data"']
  - name: train
    needs: [prepare]
    env: {SEED: "7"}
    command: [sh, -c, 'env | grep -E "^(FERRY_|SEED=)" | grep -vE "^FERRY_(OUTPUT_DIR|ATTEMPT_DIR|CHECKPOINT_DIR|HEARTBEAT|PHASE|METRICS_FILE)=" | sort >"$FERRY_OUTPUT_DIR/env"; cat "$1"; echo "lr {{params.lr}}"; echo "diverged" >&2; exit 3', x, "{{steps.prepare.outputs.data}}"]
Y
)
	id=$(ferry submit "$f" -p lr=0.25)
	wait_run "$id" failed 20
	before=$(sql "SELECT string_agg(s.name || ':' || s.state || ':' || s.attempts, ' ' ORDER BY s.idx) || ' ' || (SELECT count(*) FROM events WHERE run_id = $id) FROM steps s WHERE s.run_id = $id")
	orig_env=$(cat "$FERRY_HOME/runs/$id/train/1/out/env")
	assert_match "$orig_env" "FERRY_PARAM_LR=0.25" "the step wrote its environment"
	assert_eq "$(echo "$orig_env" | grep -c '^FERRY_URL=')" 0 "the daemon's settings are not the job's"

	set +e
	out=$(ferry dev step "$id" train 2>&1); rc=$?
	set -e
	echo "$out"
	assert_eq "$rc" 3 "the step's exit code"
	assert_match "$out" "run $id step train \\(failed, attempt 1: exit code 3: diverged\\)" "how it went before"
	assert_match "$out" "rows of run $id" "read the run's upstream output"
	assert_match "$out" "lr 0.25" "the run's params"
	dir=$(echo "$out" | sed -n 's/.* again in \(.*\)$/\1/p')
	assert_eq "$dir" "$FERRY_HOME/dev/run-$id/train/1" "a fresh attempt directory"
	assert_eq "$(cat "$dir/out/env")" "$orig_env" "the same FERRY_* values and env"
	assert_match "$(cat "$dir/log")" "diverged" "the log is kept in the new directory"

	out=$(ferry dev step "$id" train -- sh -c 'env' 2>&1)
	assert_eq "$(echo "$out" | grep -E '^(FERRY_|SEED=)' | grep -vE '^FERRY_(OUTPUT_DIR|ATTEMPT_DIR|CHECKPOINT_DIR|HEARTBEAT|PHASE|METRICS_FILE)=' | sort)" \
		"$orig_env" "-- sh -c env: the same FERRY_* values"
	assert_match "$out" "FERRY_OUTPUT_DIR=$FERRY_HOME/dev/run-$id/train/2/out" "its own output directory"
	echo 'input' | ferry dev step "$id" train -- sh -c 'read x; echo "got $x"' 2>&1 | grep -q "got input" || fail "the command gets this terminal's stdin"

	after=$(sql "SELECT string_agg(s.name || ':' || s.state || ':' || s.attempts, ' ' ORDER BY s.idx) || ' ' || (SELECT count(*) FROM events WHERE run_id = $id) FROM steps s WHERE s.run_id = $id")
	assert_eq "$after" "$before" "the run is unchanged"

	set +e
	out=$(ferry dev step "$id" nope 2>&1); rc=$?
	set -e
	assert_eq "$rc" 2 "an unknown step"
	assert_match "$out" "run $id has no step \"nope\"" "says so"
}

# `ferry dev run --step` driven from a script: it pauses before each step
# showing its rendered command, environment and inputs; "r" runs it, "s"
# takes its results from the earlier run, "h" opens a shell in its working
# directory with its environment (fed the following lines), "q" stops the
# run. --break STEP pauses before the named step only.
test_dev_run_step_through() {
	f=$(wf stepper <<'Y'
name: stepper
steps:
  - name: prepare
    command: [sh, -c, 'echo "rows of run $FERRY_RUN_ID" >"$FERRY_OUTPUT_DIR/data"']
  - name: train
    needs: [prepare]
    env: {SEED: "7"}
    command: [sh, -c, 'cat "$1" >"$FERRY_OUTPUT_DIR/model"', x, "{{steps.prepare.outputs.data}}"]
  - name: evaluate
    needs: [train]
    command: [sh, -c, 'cat "$1"', x, "{{steps.train.outputs.model}}"]
Y
)
	first=$(ferry dev run "$f" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(sql "SELECT state FROM runs WHERE id = $first")" succeeded "a run to reuse"

	set +e
	out=$(printf 'r\ns\nh\necho "in the shell: $FERRY_STEP $FERRY_ATTEMPT $(pwd)"\nexit\nq\n' |
		SHELL=/bin/bash timeout 60 ferry dev run "$f" --step 2>&1); rc=$?
	set -e
	echo "$out"
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$rc" 1 "quit: the run is stopped"
	assert_match "$out" "── before prepare" "paused before the first step"
	assert_match "$out" "command  sh -c 'cat \"\\\$1\" >\"\\\$FERRY_OUTPUT_DIR/model\"' x $FERRY_HOME/runs/$id/prepare/1/out/data" "train's rendered command"
	assert_match "$out" "env      SEED=7" "its environment"
	assert_match "$out" "input    steps.prepare.outputs.data = $FERRY_HOME/runs/$id/prepare/1/out/data" "the upstream output it reads"
	assert_match "$out" "skipped train: its results are run $first's" "skip"
	assert_match "$out" "in the shell: evaluate 1 $(dirname "$f")" "the shell: the step's environment and working directory"
	assert_eq "$(sql "SELECT string_agg(name || '=' || state || ':' || coalesce(reason, ''), ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" \
		"prepare=succeeded: train=succeeded:reused from run $first evaluate=stopped:run stopped by ${USER:-dev}" "ran, skipped, quit"
	assert_eq "$(step_col "$id" train "outputs->>'model'")" "$(step_col "$first" train "outputs->>'model'")" "the skipped step's outputs are the earlier run's"

	out=$(printf 'r\n' | timeout 60 ferry dev run "$f" --break evaluate 2>&1) || { echo "$out"; fail "--break evaluate"; }
	echo "$out"
	id=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(echo "$out" | grep -c '── before')" 1 "paused once"
	assert_match "$out" "── before evaluate" "before the named step"
	assert_match "$out" "evaluate +\\| rows of run $id" "then ran it"

	set +e
	out=$(ferry dev run "$f" --break trian 2>&1); rc=$?
	set -e
	assert_eq "$rc" 2 "a --break that names no step"
	assert_match "$out" "--break trian: .* has no step of that name \\(steps: prepare train evaluate\\)" "says which exist"
}
