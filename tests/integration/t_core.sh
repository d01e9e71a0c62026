# Core engine: the state machine end to end through a real daemon.

test_hello_succeeds() {
	start_daemon a
	id=$(submit "$ROOT/workflows/hello.yaml" '{"who":"tests"}')
	wait_run "$id" succeeded 30
	assert_eq "$(step_col "$id" flaky attempts)" 2 "flaky step attempts"
	assert_eq "$(sql "SELECT string_agg(a.state, ',' ORDER BY a.attempt) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'flaky'")" "failed,succeeded" "flaky attempt states"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND state = 'succeeded'")" 4 "succeeded steps"
	# fan-in: join started only after both branches finished
	assert_eq "$(sql "SELECT (SELECT started_at FROM steps WHERE run_id = $id AND name = 'join') >= (SELECT max(finished_at) FROM steps WHERE run_id = $id AND name IN ('count','flaky'))")" t "join after its needs"
	grep -q "hello, tests" "$FERRY_HOME/runs/$id/greet/1/log" || fail "greet log lacks the parameter"
	grep -q "hello, tests" "$FERRY_HOME/runs/$id/greet/1/out/greeting" || fail "FERRY_OUTPUT_DIR not used"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'run.created' AND actor = 'admin (as tester)'")" 1 "creation event with actor"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'run.succeeded'")" 1 "run event"
	api GET "/api/v1/runs/$id"
	assert_eq "$CODE" 200 "GET run"
	assert_eq "$(echo "$BODY" | json '[s["name"] for s in j["steps"]]')" '["greet", "count", "flaky", "join"]' "steps in file order"
	assert_eq "$(echo "$BODY" | json 'j["steps"][2]["attempts"]')" 2 "attempts in API"
	assert_eq "$(echo "$BODY" | json 'j["params"]["who"]')" tests "params in API"
}

test_failure_skips_downstream() {
	start_daemon a
	f=$(wf fail <<'Y'
name: failing
steps:
  - {name: a, command: [sh, -c, "echo a"]}
  - {name: b, needs: [a], command: [sh, -c, "echo boom >&2; exit 7"]}
  - {name: c, needs: [b], command: [sh, -c, "echo never"]}
  - {name: d, needs: [c], command: [sh, -c, "echo never"]}
  - {name: side, needs: [a], command: [sh, -c, "sleep 0.5; echo independent"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" b state)" failed "b"
	assert_eq "$(step_col "$id" b exit_code)" 7 "b exit code"
	assert_eq "$(step_col "$id" b reason)" "exit code 7: boom" "b reason: the last line it printed"
	assert_eq "$(step_col "$id" c state)" skipped "c"
	assert_eq "$(step_col "$id" d state)" skipped "d (transitively)"
	assert_eq "$(step_col "$id" side state)" succeeded "independent branch still runs"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name IN ('c','d')")" 0 "skipped steps never ran"
}

test_retry_backoff() {
	start_daemon a
	f=$(wf backoff <<'Y'
name: backoff
steps:
  - name: flaky
    retry: {limit: 3, backoff: 1s, max_backoff: 1500ms}
    command: [sh, -c, 'test "$FERRY_ATTEMPT" -ge 4']
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	assert_eq "$(step_col "$id" flaky attempts)" 4 "attempts"
	# gap between attempts: backoff 1s, 2s (capped 1.5s), 1.5s with jitter in [0.5, 1] of that
	gaps=$(sql "SELECT string_agg(round(extract(epoch FROM b.started_at - a.finished_at)::numeric, 2)::text, ' ' ORDER BY a.attempt) FROM attempts a JOIN attempts b ON b.step_id = a.step_id AND b.attempt = a.attempt + 1 JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")
	echo "gaps: $gaps"
	set -- $gaps
	awk -v g="$1" 'BEGIN { exit !(g >= 0.45 && g <= 2.0) }' || fail "first gap $1 not within backoff 1s (jitter 0.5–1)"
	awk -v g="$2" 'BEGIN { exit !(g >= 0.7 && g <= 2.5) }' || fail "second gap $2 not within 1.5s cap (jitter 0.5–1)"
	awk -v g="$3" 'BEGIN { exit !(g >= 0.7 && g <= 2.5) }' || fail "third gap $3 not within 1.5s cap"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'step.retrying'")" 3 "retry events"
}

# The run's metrics are its steps' merged (name -> metrics.json), a fan-out's items' kept to
# themselves; a retry of an item and of a step, asking a queue and CPUs, is queued again with them
# (ferry_finish writes each only for a batch that has one)
test_run_metrics_merged_and_retries_requeued() {
	FERRY_CPUS=4 start_daemon a
	f=$(wf merged <<'Y'
name: merged
steps:
  - name: a
    command: [sh, -c, 'echo "{\"acc\": 0.5}" >"$FERRY_OUTPUT_DIR/metrics.json"']
  - name: b
    resources: {cpus: 2}
    retry: {limit: 1, backoff: 100ms}
    command: [sh, -c, 'test "$FERRY_ATTEMPT" -ge 2 && echo "{\"f1\": 0.75}" >"$FERRY_OUTPUT_DIR/metrics.json"']
  - name: fan
    needs: [a]
    foreach: {range: 3}
    retry: {limit: 1, backoff: 100ms}
    resources: {cpus: 2}
    command: [sh, -c, 'test "$FERRY_ITEM_INDEX" != 1 -o "$FERRY_ATTEMPT" -ge 2 && echo "{\"item\": $FERRY_ITEM_INDEX}" >"$FERRY_OUTPUT_DIR/metrics.json"']
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT metrics FROM runs WHERE id = $id")" '{"a": {"acc": 0.5}, "b": {"f1": 0.75}}' "the steps' metrics, not the items'"
	assert_eq "$(step_col "$id" b attempts)" 2 "b retried"
	assert_eq "$(sql "SELECT string_agg(a.cpus::text, ',' ORDER BY a.attempt) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'b'")" "2,2" "b's retry asked its CPUs again"
	assert_eq "$(sql "SELECT string_agg(c.attempts || ':' || (c.metrics->>'item')::float::int, ',' ORDER BY c.item_index) FROM steps c JOIN steps p ON p.id = c.parent_id WHERE p.run_id = $id AND p.name = 'fan'")" "1:0,2:1,1:2" "the item retried, with its metrics"
	assert_eq "$(sql "SELECT string_agg(a.cpus::text, ',' ORDER BY a.attempt) FROM attempts a JOIN steps c ON c.id = a.step_id JOIN steps p ON p.id = c.parent_id WHERE p.run_id = $id AND c.item_index = 1")" "2,2" "the item's retry asked its fan-out's CPUs"
}

# A command that is a script without a #! line runs under /bin/sh, as a shell (and execvp) would
# run it, named by its path or found in the job's PATH; and a step's env: replaces what the job
# would inherit (PATH, HOME), once: before, both were in the environment and the command's search
# read the inherited PATH (a musl-built shim ran no sh at all: exit 126); Ferry's own variables
# (where the outputs go) are not the step's to replace
test_script_without_shebang_runs_under_sh() {
	start_daemon a
	mkdir -p "$FERRY_HOME/proj"
	printf 'echo "ran by sh: $1 $(basename "$0")"\n' >"$FERRY_HOME/proj/noshebang"
	chmod 755 "$FERRY_HOME/proj/noshebang"
	f=$(wf noshebang <<Y
name: noshebang
steps:
  - {name: bypath, command: ["$FERRY_HOME/proj/noshebang", one]}
  - {name: bysearch, env: {PATH: "/usr/bin:/bin:$FERRY_HOME/proj"}, command: [noshebang, two]}
  - name: sees
    env: {PATH: "/usr/bin:/bin:$FERRY_HOME/proj", HOME: /nonexistent-home, FERRY_OUTPUT_DIR: /nonexistent-out}
    command: [env]
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	grep -q "ran by sh: one noshebang" "$FERRY_HOME/runs/$id/bypath/1/log" || fail "by its path: $(cat "$FERRY_HOME/runs/$id/bypath/1/log")"
	grep -q "ran by sh: two noshebang" "$FERRY_HOME/runs/$id/bysearch/1/log" || fail "found in PATH: $(cat "$FERRY_HOME/runs/$id/bysearch/1/log")"
	# env(1) prints the environment as the job got it (a shell would tidy it up)
	assert_eq "$(grep -e '^PATH=' -e '^HOME=' -e '^FERRY_OUTPUT_DIR=' "$FERRY_HOME/runs/$id/sees/1/log" | sort)" "FERRY_OUTPUT_DIR=$FERRY_HOME/runs/$id/sees/1/out
HOME=/nonexistent-home
PATH=/usr/bin:/bin:$FERRY_HOME/proj" "the step's env:, each variable once; Ferry's own not replaced"
}

test_retry_limit_exhausted() {
	start_daemon a
	f=$(wf exhaust <<'Y'
name: exhaust
steps:
  - {name: never, retry: {limit: 1, backoff: 100ms}, command: [sh, -c, "exit 1"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" never attempts)" 2 "one try plus one retry"
}

test_timeout() {
	start_daemon a
	f=$(wf timeout <<'Y'
name: slow
steps:
  - {name: sleepy, timeout: 1s, command: [sh, -c, "echo $$ > pid; exec sleep 30"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 15
	assert_match "$(step_col "$id" sleepy reason)" "timed out" "reason"
	dur=$(sql "SELECT extract(epoch FROM finished_at - started_at) FROM steps WHERE run_id = $id")
	awk -v d="$dur" 'BEGIN { exit !(d >= 0.9 && d < 8) }' || fail "took $dur s to time out"
	pid=$(cat "$FERRY_HOME/runs/$id/sleepy/1/pid")
	kill -0 "$pid" 2>/dev/null && fail "the timed-out job (pid $pid) still runs"
	true
}

test_stop_run() {
	start_daemon a
	f=$(wf stop <<'Y'
name: stoppable
steps:
  - {name: long, command: [sh, -c, "echo $$ > pid; sleep 60"]}
  - {name: after, needs: [long], command: [sh, -c, "echo never"]}
Y
)
	id=$(submit "$f")
	wait_step "$id" long running 10
	for _ in $(seq 1 30); do [ -s "$FERRY_HOME/runs/$id/long/1/pid" ] && break; sleep 0.1; done
	pid=$(cat "$FERRY_HOME/runs/$id/long/1/pid")
	api POST "/api/v1/runs/$id/stop"
	assert_eq "$CODE" 200 "stop answered"
	wait_run "$id" stopped 10
	assert_eq "$(step_col "$id" long state)" stopped "running step"
	assert_eq "$(step_col "$id" after state)" stopped "blocked step"
	sleep 0.2
	kill -0 "$pid" 2>/dev/null && fail "the job (pid $pid) was not killed"
	assert_eq "$(sql "SELECT actor FROM events WHERE run_id = $id AND kind = 'run.stop'")" "admin (as tester)" "stop actor"
	api POST "/api/v1/runs/$id/stop"
	assert_eq "$CODE" 409 "stopping a stopped run"
	assert_match "$BODY" '"code":"conflict"' "conflict body"
}

# A stop and a finish lock the same rows in opposite orders (the stop: its
# run, then the run's open steps; a finish: the steps it releases, then
# their run). Here a transaction holds the blocked step as a finish would,
# waits for the stop to hold the run, then writes the run: PostgreSQL
# breaks the deadlock by aborting the stop's statement, which must be run
# again, not answered as a 500 (CI stop 44: test_tokens_default_is_admin).
test_stop_run_deadlocked_with_a_finish() {
	start_daemon a
	f=$(wf stopdl <<'Y'
name: stop-deadlock
steps:
  - {name: long, command: [sleep, "60"]}
  - {name: after, needs: [long], command: [sh, -c, "echo never"]}
Y
)
	id=$(submit "$f")
	wait_step "$id" long running 10
	sid=$(sql "SELECT id FROM steps WHERE run_id = $id AND name = 'after'")
	# the finisher looks for the deadlock only after 20 s: the stop, which waits first, is the one
	# PostgreSQL aborts, however late a loaded machine runs its check (the rule: deadlock_timeout)
	psql "$FERRY_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 >"$FERRY_HOME/finisher.out" 2>&1 <<SQL &
SET deadlock_timeout = '20s';
BEGIN;
SELECT 1 FROM steps WHERE id = $sid FOR UPDATE;
\\! touch "$FERRY_HOME/locked"
DO \$w\$ DECLARE d timestamptz := clock_timestamp() + interval '60 s'; BEGIN
	LOOP
		EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity
		                  WHERE wait_event_type = 'Lock' AND query LIKE '%ferry_stop%');
		IF clock_timestamp() >= d THEN RAISE EXCEPTION 'the stop never waited for the step'; END IF;
		PERFORM pg_sleep(0.02);
		PERFORM pg_stat_clear_snapshot(); -- a transaction sees one snapshot of the activity otherwise
	END LOOP;
END \$w\$;
UPDATE runs SET reason = reason WHERE id = $id;
COMMIT;
SQL
	finisher=$!
	for _ in $(seq 1 300); do [ -e "$FERRY_HOME/locked" ] && break; sleep 0.1; done
	[ -e "$FERRY_HOME/locked" ] || fail "the finisher's transaction never held the step: $(cat "$FERRY_HOME/finisher.out")"
	api POST "/api/v1/runs/$id/stop"
	wait "$finisher" || true
	assert_eq "$CODE" 200 "a stop that PostgreSQL aborted for a deadlock goes again ($BODY)"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'run.stop'")" 1 "one run.stop event"
	wait_run "$id" stopped 20
	assert_match "$(curl -s "$FERRY_URL/metrics")" 'ferry_db_retries_total [1-9]' "the retry is counted"
}

test_retry_failed_run() {
	start_daemon a TEST_HOME="$FERRY_HOME"
	f=$(wf rf <<'Y'
name: retry-failed
steps:
  - {name: prep, command: [sh, -c, "echo prep >> $TEST_HOME/shared/calls"]}
  - {name: fragile, needs: [prep], command: [sh, -c, "echo fragile >> $TEST_HOME/shared/calls; test -f $TEST_HOME/fixed"]}
  - {name: finish, needs: [fragile], command: [sh, -c, "echo finish >> $TEST_HOME/shared/calls"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" finish state)" skipped "finish skipped"
	touch "$FERRY_HOME/fixed"
	api POST "/api/v1/runs/$id/retry" '{}'
	assert_eq "$CODE" 200 "retry a failed run"
	wait_run "$id" succeeded 20
	assert_eq "$(step_col "$id" prep attempts)" 1 "prep not re-run"
	assert_eq "$(step_col "$id" fragile attempts)" 2 "fragile re-run"
	assert_eq "$(tr '\n' ' ' < "$FERRY_HOME/shared/calls")" "prep fragile fragile finish " "calls"
	assert_eq "$(sql "SELECT actor FROM events WHERE run_id = $id AND kind = 'run.retry'")" "admin (as tester)" "retry actor"
}

test_retry_from_step() {
	start_daemon a
	f=$(wf from <<'Y'
name: from
steps:
  - {name: one, command: [sh, -c, "true"]}
  - {name: two, needs: [one], command: [sh, -c, "true"]}
  - {name: three, needs: [two], command: [sh, -c, "true"]}
  - {name: other, needs: [one], command: [sh, -c, "true"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	api POST "/api/v1/runs/$id/retry" '{}'
	assert_eq "$CODE" 409 "plain retry of a succeeded run"
	api POST "/api/v1/runs/$id/retry" '{"from":"nope"}'
	assert_eq "$CODE" 404 "retry from unknown step"
	api POST "/api/v1/runs/$id/retry" '{"from":"two"}'
	assert_eq "$CODE" 200 "retry --from"
	wait_run "$id" succeeded 20
	assert_eq "$(sql "SELECT string_agg(name || '=' || attempts, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" "one=1 two=2 three=2 other=1" "only two and downstream re-ran"
}

# A chain's hops are one claim each: the engine's own ferry_finish notifies ferry_ready, and that
# notification (it comes with the finish's answer, after which the engine claims anyway) was
# honoured with a second claim that found nothing, for about one step in ten (18 of 200 in
# bench_dispatch --chain). The claims are the daemon's own count (/metrics); the polling
# fallback is put out of the way.
test_chain_claims_once_per_step() {
	local y="$FERRY_HOME/chain.yaml" c0 d0 c1 d1
	start_daemon a FERRY_POLL_MS=600000
	{
		echo "name: chain-claims"
		echo "steps:"
		echo "  - {name: s0, command: [\"true\"]}"
		for i in $(seq 1 39); do echo "  - {name: s$i, needs: [s$((i - 1))], command: [\"true\"]}"; done
	} >"$y"
	claims_now() {
		local m; m=$(curl -sS "$FERRY_URL/metrics")
		echo "$(echo "$m" | sed -n 's/^ferry_dispatch_claim_seconds_count //p') $(echo "$m" | sed -n 's/^ferry_steps_dispatched_total //p')"
	}
	# the daemon's own first claim (at its start) may come after it says it is ready (cc60: 42)
	for _ in $(seq 1 50); do
		read -r c0 d0 < <(claims_now)
		[ "${c0:-0}" -ge 1 ] && break
		sleep 0.1
	done
	id=$(submit "$y")
	wait_run "$id" succeeded 60
	read -r c1 d1 < <(claims_now)
	assert_eq "$((d1 - d0))" 40 "steps dispatched"
	# one claim a step, and one after the last step's end (its job freed room) that finds nothing
	assert_eq "$((c1 - c0))" 41 "claims for 40 steps"
}

# A step's end and the claim of the step it made ready are one transaction
# (ferry_finish_claim): the events they log share their xmin. Each was its
# own transaction, a commit and a round trip more per step of a chain.
test_chain_finish_and_next_claim_one_transaction() {
	local y="$FERRY_HOME/chain3.yaml" id pairs
	start_daemon a FERRY_POLL_MS=600000
	printf '%s\n' "name: chain-tx" "steps:" '  - {name: s0, command: ["true"]}' \
		'  - {name: s1, needs: [s0], command: ["true"]}' '  - {name: s2, needs: [s1], command: ["true"]}' >"$y"
	id=$(submit "$y")
	wait_run "$id" succeeded 30
	# per hop: whether s(k)'s step.succeeded and s(k+1)'s step.running were written by one transaction
	pairs=$(sql "SELECT string_agg((d.xmin = r.xmin)::text, ',' ORDER BY d.step)
	             FROM events d JOIN events r ON r.run_id = d.run_id AND r.kind = 'step.running'
	                  AND r.step = 's' || (substr(d.step, 2)::int + 1)
	             WHERE d.run_id = $id AND d.kind = 'step.succeeded'")
	assert_eq "$pairs" "true,true" "s0's end with s1's claim, s1's end with s2's"
}

test_job_killing_its_group_fails_not_loops() {
	start_daemon a FERRY_JOB_USER=
	f=$(wf selfkill <<'Y'
name: selfkill
steps:
  - {name: rogue, retry: {limit: 1, backoff: 100ms}, command: [sh, -c, "kill -9 0"]}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" rogue attempts)" 2 "counted as tries, retried within its limit"
	# as ferry-job the job cannot signal its root supervisor, which records the kill
	assert_eq "$(step_col "$id" rogue reason)" "killed by signal 9 (Killed)" "reason, under the job user"
	# jobs as the daemon's own user (a daemon not run as root; here FERRY_JOB_USER=root) can take
	# their supervisor with them: still a failed try with a reason, never a loop
	stop_daemon a
	start_daemon b FERRY_JOB_USER=root
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" rogue attempts)" 2 "counted as tries, retried within its limit"
	assert_match "$(step_col "$id" rogue reason)" "supervisor was killed" "reason"
}

# A run of 1,000 steps or more has the step tables' statistics taken again
# before it commits (store_run_write): the planner then knows that most of
# the steps are blocked. Before, the first release of a 5,000-step fan-out
# was planned from statistics that said none were (3.7 s instead of 0.12 s,
# make bench's scale line). The root sleeps, so nothing of the run moves
# while the statistics are read.
test_large_run_creation_refreshes_statistics() {
	start_daemon a
	{
		echo "name: wide"
		echo "steps:"
		echo "  - {name: root, command: [sleep, '30']}"
		for i in $(seq 1 1000); do echo "  - {name: w$i, needs: [root], command: ['true']}"; done
	} >"$FERRY_HOME/wide.yaml"
	id=$(submit "$FERRY_HOME/wide.yaml")
	freq=$(sql "SELECT f FROM pg_stats s, unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS m(v, f)
		WHERE s.tablename = 'steps' AND s.attname = 'state' AND m.v = 'blocked'")
	[ -n "$freq" ] || fail "no statistics of steps.state say blocked: $(sql "SELECT most_common_vals, most_common_freqs FROM pg_stats WHERE tablename = 'steps' AND attname = 'state'")"
	python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.9 else 1)" "$freq" || fail "blocked is $freq of steps in the statistics"
	api POST "/api/v1/runs/$id/stop"
	wait_run "$id" stopped 30
}

# bench_dispatch stopped by a signal stops what it started, as its early exits do: its daemon and
# its PostgreSQL, and removes its home (a Ctrl-C left a postmaster running, with its shared memory
# and its files, until someone noticed).
test_bench_stopped_by_a_signal_leaves_nothing() {
	local b= f tmp=$FERRY_HOME/bench pid rc=0
	for f in "$ROOT"/build/*/tests/bench_dispatch; do [ -x "$f" ] && { b=$f; break; }; done
	[ -n "$b" ] || fail "no bench_dispatch built (make test builds it)"
	mkdir -p "$tmp"
	(cd "$ROOT" && TMPDIR=$tmp exec "$b" --foreach 100000 --executor noop) >"$FERRY_HOME/bench.out" 2>&1 &
	pid=$!
	# its daemon up (its address file): the cluster and the daemon both run
	for _ in $(seq 1 300); do compgen -G "$tmp/ferry-bench.*/ferryd.url" >/dev/null && break; sleep 0.1; done
	compgen -G "$tmp/ferry-bench.*/ferryd.url" >/dev/null || fail "the bench's daemon never started: $(cat "$FERRY_HOME/bench.out")"
	[ "$(pgrep -f "postgres -D $tmp/" | wc -l)" -ge 1 ] || fail "no PostgreSQL of the bench's runs"
	kill -TERM "$pid"
	wait "$pid" || rc=$?
	assert_eq "$rc" 143 "ended as TERM ends a program"
	assert_match "$(cat "$FERRY_HOME/bench.out")" "bench: Terminated: stopping its daemon and its cluster" "it says so"
	assert_eq "$(pgrep -f "$tmp/" | wc -l)" 0 "nothing of it runs: $(pgrep -af "$tmp/")"
	assert_eq "$(ls -A "$tmp")" "" "its home removed"
}
