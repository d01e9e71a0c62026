# The engine's seams: the executor table (a type registered only in the test
# build runs a workflow), no job run twice when the daemon dies between the
# fork and the handle's record or after a failed record (fault injection
# through bin/ferryd-test), and one leader among replicas.

# a step whose work is counted: one line per run of its command, in
# $FERRY_HOME/shared/work.count.RUN
counted_wf() {
	wf counted <<'Y'
name: counted
steps:
  - {name: work, command: [sh, -c, 'echo "attempt $FERRY_ATTEMPT" >> "$SHARED/work.count.$FERRY_RUN_ID"; sleep 2']}
  - {name: after, needs: [work], command: [sh, -c, 'true']}
Y
}

# waits until daemon NAME has exited (killed by an injected fault)
wait_daemon_dead() { # NAME [SECONDS, default 10]
	local pid; pid=$(daemon_pid "$1")
	for _ in $(seq 1 $((${2:-10} * 10))); do kill -0 "$pid" 2>/dev/null || { rm -f "$FERRY_HOME/daemon.$1.pid"; return 0; }; sleep 0.1; done
	fail "daemon $1 did not die at the injected fault"
}

# submit FILE while the daemon may die before it answers: prints the run id from the database
submit_racing() {
	local body
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$1")
	api POST /api/v1/runs "$body" || true
	for _ in $(seq 1 50); do
		id=$(sql "SELECT max(id) FROM runs")
		[ -n "$id" ] && { echo "$id"; return 0; }
		sleep 0.1
	done
	fail "no run was created"
}

assert_ran_once() { # RUN
	wait_run "$1" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/shared/work.count.$1")" "attempt 1" "the step's work ran exactly once"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = 'work'")" 1 "one attempt"
	assert_match "$(sql "SELECT executor || ' ' || (handle->>'pid') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = 'work'")" '^local [0-9]+$' "the handle was recorded by the adopter"
}

test_fault_killed_after_fork_job_runs_once() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:started
	id=$(submit_racing "$(counted_wf)")
	wait_daemon_dead a
	assert_eq "$(sql "SELECT coalesce(handle::text, 'none') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'work'")" none "killed before the handle was recorded"
	grep -Eq '^pid [0-9]+ [0-9]+$' "$FERRY_HOME/runs/$id/work/1/status" || fail "the supervisor wrote no pid to its status file"
	start_daemon a
	assert_ran_once "$id"
	# running still, or (its 2 s over before the restart on a loaded machine) ended: found in its directory
	grep -Eq "re-adopted local job \(found in its directory\)|finished while its owner .* was gone \(found in its directory\)" \
		"$FERRY_HOME/ferryd-a.log" || fail "not adopted from the attempt directory"
}

# the same, but the job ends before a daemon is back: it is closed from its
# directory, and the handle found there is recorded (it was left empty)
test_fault_killed_after_fork_job_ended_meanwhile() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:started
	id=$(submit_racing "$(counted_wf)")
	wait_daemon_dead a
	for _ in $(seq 1 100); do grep -q '^exit ' "$FERRY_HOME/runs/$id/work/1/status" 2>/dev/null && break; sleep 0.1; done
	grep -q '^exit 0$' "$FERRY_HOME/runs/$id/work/1/status" || fail "the job did not end on its own"
	start_daemon a
	assert_ran_once "$id"
	grep -q "finished while its owner .* was gone (found in its directory)" "$FERRY_HOME/ferryd-a.log" ||
		fail "not closed from the attempt directory"
}

test_fault_killed_after_failed_record_job_runs_once() {
	FERRYD=ferryd-test start_daemon a "FERRY_FAULT=fail:record kill:record-failed"
	id=$(submit_racing "$(counted_wf)")
	wait_daemon_dead a
	grep -q 'fault injected: failing "record"' "$FERRY_HOME/ferryd-a.log" || fail "the record did not fail"
	start_daemon a
	assert_ran_once "$id"
}

# Late records (engine.c): a local job that ends within LATE_RECORD_MS has its
# start (executor, handle, directory) recorded by the statement that closes
# it, not by one of its own; one that runs longer has it written on its own
# while it runs. Here every record written on its own kills the daemon: the
# two short steps never needed one, the long one did, and a daemon started
# again finds its job in its directory.
test_late_record_rides_with_the_finish() {
	FERRYD=ferryd-test start_daemon a "FERRY_FAULT=fail:record kill:record-failed"
	id=$(submit "$(wf late <<'Y'
name: late
steps:
  - {name: a, command: ['true']}
  - {name: b, needs: [a], command: ['true']}
  - {name: slow, needs: [b], command: [sh, -c, 'echo "ran $FERRY_ATTEMPT" >> "$SHARED/late.$FERRY_RUN_ID"; sleep 2']}
Y
)")
	wait_daemon_dead a
	for s in a b; do
		assert_match "$(sql "SELECT a.executor || ' ' || (a.handle->>'pid') || ' ' || a.dir || ' ' || a.state FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = '$s'")" \
			"^local [0-9]+ $FERRY_HOME/runs/$id/$s/1 succeeded\$" "step $s: its start recorded with its end"
	done
	assert_eq "$(step_col "$id" slow state)" running "the long step's own record was the daemon's end"
	assert_eq "$(sql "SELECT coalesce(a.handle::text, 'none') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'slow'")" none "not written"
	start_daemon a
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/shared/late.$id")" "ran 1" "the long step ran once, found in its directory"
	assert_match "$(sql "SELECT a.handle->>'pid' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'slow'")" '^[0-9]+$' "its handle recorded by the adopter"
}

test_fault_failed_record_is_retried() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=fail:record FERRY_FAULT_TIMES=3
	id=$(submit "$(counted_wf)")
	wait_step "$id" work running 10
	for _ in $(seq 1 30); do
		h=$(sql "SELECT coalesce(handle->>'pid', '') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'work'")
		[ -n "$h" ] && break
		sleep 0.1
	done
	[ -n "$h" ] || fail "the handle was never recorded after the failed records"
	assert_eq "$(grep -c 'fault injected: failing "record"' "$FERRY_HOME/ferryd-a.log")" 3 "three failed records"
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/shared/work.count.$id")" "attempt 1" "ran once"
}

test_test_executor_type_runs_a_workflow() {
	FERRYD=ferryd-test start_daemon a FERRY_EXECUTOR=test
	f=$(wf chain <<'Y'
name: chain
steps:
  - {name: one, command: [sh, -c, 'echo 1 > "$FERRY_OUTPUT_DIR/n"']}
  - {name: two, needs: [one], command: [sh, -c, 'cat "{{steps.one.outputs.n}}"']}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(sql "SELECT string_agg(DISTINCT a.executor, ',') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")" test "attempts record the test executor"
	assert_eq "$(grep -c "^start run=$id " "$FERRY_HOME/test-executor.log")" 2 "started through the table"
	assert_eq "$(grep -c "^end run=$id " "$FERRY_HOME/test-executor.log")" 2 "ended through the table"
	# ferryd itself does not know the test type
	FERRY_EXECUTOR=test ferryd >"$FERRY_HOME/unknown.log" 2>&1 && fail "ferryd accepted the test-only executor"
	grep -q 'FERRY_EXECUTOR "test" is not an executor (known: local, noop' "$FERRY_HOME/unknown.log" || fail "no clear error: $(cat "$FERRY_HOME/unknown.log")"
}

# leads NAME: 1 when daemon NAME leads; reaps NAME: how often its reaper (a leader-only task) ran
leads() { curl -fsS "$(daemon_url "$1")/metrics" | awk '$1 == "ferry_leader" {print $2}'; }
reaps() { curl -fsS "$(daemon_url "$1")/metrics" | awk '$1 == "ferry_periodic_runs_total{task=\"reap\"}" {print $2}'; }

test_leader_elected_and_replaced() {
	local names=(a b c)
	start_daemon a
	start_another b
	start_another c
	sleep 1.5
	local leader=-1 n=0 before=() after=()
	for i in 0 1 2; do
		[ "$(leads "${names[$i]}")" = 1 ] && { leader=$i; n=$((n + 1)); }
		before[$i]=$(reaps "${names[$i]}")
	done
	assert_eq "$n" 1 "exactly one leader"
	api GET /readyz
	assert_match "$BODY" '"leader":(true|false)' "/readyz says whether this replica leads"
	sleep 2.5 # the reaper runs every lease/2 = 1 s
	for i in 0 1 2; do after[$i]=$(reaps "${names[$i]}"); done
	for i in 0 1 2; do
		if [ "$i" = "$leader" ]; then
			[ "${after[$i]:-0}" -gt "${before[$i]:-0}" ] || fail "the leader's reaper did not run"
		else
			assert_eq "${after[$i]:-0}" "${before[$i]:-0}" "a follower's reaper ran"
		fi
	done
	stop_daemon "${names[$leader]}" KILL
	# another leads within one lease (2 s here)
	local t0=$SECONDS new=-1
	for _ in $(seq 1 30); do
		n=0
		for i in 0 1 2; do
			[ "$i" = "$leader" ] && continue
			[ "$(leads "${names[$i]}")" = 1 ] && { new=$i; n=$((n + 1)); }
		done
		[ "$n" -ge 1 ] && break
		sleep 0.1
	done
	assert_eq "$n" 1 "exactly one new leader"
	[ $((SECONDS - t0)) -le 3 ] || fail "the new leader took $((SECONDS - t0)) s"
	local other=$((3 - leader - new)) b2 o2
	b2=$(reaps "${names[$new]}")
	o2=$(reaps "${names[$other]}")
	sleep 2.5
	[ "$(reaps "${names[$new]}")" -gt "${b2:-0}" ] || fail "the new leader's reaper did not run"
	assert_eq "$(reaps "${names[$other]}")" "${o2:-0}" "the remaining follower's reaper ran"
	grep -q "elected leader" "$FERRY_HOME/ferryd-${names[$new]}.log" || fail "no election logged"
}

# Slow work the daemon does itself (here a label step whose labelling service
# answers only when the test lets it) runs on the worker pool: another run's
# chain of steps is dispatched and finishes meanwhile.
test_slow_daemon_work_does_not_stop_dispatch() {
	start_daemon a
	mkdir -p "$FERRY_HOME/ds" && echo x >"$FERRY_HOME/ds/a.txt"
	cat >"$FERRY_HOME/slow.py" <<'P'
import http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        open(sys.argv[1] + ".got", "w").write("1")
        while not __import__("os").path.exists(sys.argv[1] + ".release"):
            time.sleep(0.05)
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(json.dumps({"task_id": 7}).encode())
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_address[1])); __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
P
	python3 "$FERRY_HOME/slow.py" "$FERRY_HOME/slow.port" &
	echo $! >"$FERRY_HOME/daemon.slowhook.pid"
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/slow.port" ] && break; sleep 0.1; done
	hport=$(cat "$FERRY_HOME/slow.port")
	slow=$(submit "$(wf slow <<Y
name: slow
steps:
  - {name: label, kind: label, dataset: $FERRY_HOME/ds, webhook: "http://127.0.0.1:$hport/tasks"}
Y
)")
	for _ in $(seq 1 50); do [ -e "$FERRY_HOME/slow.port.got" ] && break; sleep 0.1; done
	[ -e "$FERRY_HOME/slow.port.got" ] || fail "the labelling service was never called"
	chain=$(submit "$(wf chain <<'Y'
name: chain
steps:
  - {name: s1, command: [true]}
  - {name: s2, needs: [s1], command: [true]}
  - {name: s3, needs: [s2], command: [true]}
  - {name: s4, needs: [s3], command: [true]}
  - {name: s5, needs: [s4], command: [true]}
Y
)")
	wait_run "$chain" succeeded 60
	assert_eq "$(step_col "$slow" label state)" running "the label step is still posting its task"
	touch "$FERRY_HOME/slow.port.release"
	wait_step "$slow" label waiting 30
	assert_eq "$(step_col "$slow" label "outputs->'task'->>'task_id'")" 7 "its result came back through the done queue"
}

# A register step's work (copying and hashing an artifact) runs on the
# worker pool: another run's chain is dispatched and finishes meanwhile.
# bin/ferryd-test holds the registration at its start until the test
# releases it, so it lasts as long as the chain needs on any machine (it
# was a 1 GiB copy, which a loaded machine finished first or not in 60 s).
test_slow_register_does_not_stop_dispatch() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=hold:registering
	big=$(submit "$(wf big <<'Y'
name: big
steps:
  - {name: train, kind: train, command: [sh, -c, 'head -c 67108864 /dev/zero > "$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: big}
Y
)")
	wait_step "$big" register running 30
	logged 'fault injected: holding at "registering"' "$FERRY_HOME/ferryd-a.log" 30 ||
		fail "the registration did not start"
	chain=$(submit "$(wf chain <<'Y'
name: chain
steps:
  - {name: s1, command: [true]}
  - {name: s2, needs: [s1], command: [true]}
  - {name: s3, needs: [s2], command: [true]}
  - {name: s4, needs: [s3], command: [true]}
  - {name: s5, needs: [s4], command: [true]}
Y
)")
	wait_run "$chain" succeeded 60
	assert_eq "$(step_col "$big" register state)" running "the registration is still in progress"
	touch "$FERRY_HOME/fault.release"
	wait_run "$big" succeeded 60
	assert_eq "$(sql "SELECT count(*) FROM runs r, steps s WHERE s.run_id = $big AND s.name = 'register' AND r.id = $chain AND r.finished_at < s.finished_at")" 1 "the chain finished first"
	assert_match "$(sql "SELECT version FROM model_versions v JOIN models m ON m.id = v.model_id WHERE m.name = 'big'")" '^0\.0\.1$' "registered"
}

# a daemon killed while a foreach step writes its children (one batch of
# 2,000 of 2,100 written): the next claim writes the rest, no child twice, none missing
test_fault_killed_mid_expansion_children_exactly_once() {
	# the noop executor: what is checked is the children written, not their jobs
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:expanding FERRY_EXECUTOR=noop
	f=$(wf fanout <<'Y'
name: fanout
steps:
  - {name: each, foreach: {range: 2100}, command: [noop]}
Y
)
	id=$(submit_racing "$f")
	wait_daemon_dead a
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" 2000 "killed after one batch"
	start_daemon a FERRY_EXECUTOR=noop
	wait_run "$id" succeeded 90
	assert_eq "$(sql "SELECT count(*), count(DISTINCT item_index), min(item_index), max(item_index) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" "2100|2100|0|2099" "every item once"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.parent_id IS NOT NULL")" 2100 "each item ran once"
	assert_eq "$(step_col "$id" each attempts)" 2 "the step was claimed again and finished its list"
}

# a stop while a foreach step writes its children (ferryd-test sleeps 3 s
# after the first batch of 2,000): the run ends stopped, and none of its
# items is left blocked — not those written before the stop, nor after
test_fault_stop_mid_expansion_leaves_no_item_blocked() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=sleep:expanding FERRY_EXECUTOR=noop
	f=$(wf fanstop <<'Y'
name: fanstop
steps:
  - {name: each, foreach: {range: 3000}, command: [noop]}
Y
)
	id=$(submit "$f")
	sql_until "(SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL) >= 2000" 20 ||
		fail "the first batch was not written"
	"$ROOT/bin/ferry" stop "$id" >/dev/null || fail "stop"
	wait_run "$id" stopped 30
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" 3000 "the expansion finished writing"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL AND state IN ('blocked', 'ready', 'running')")" 0 "no item left open"
	assert_eq "$(step_col "$id" each state)" stopped "the fan-out stopped"
}

# Every SIGCHLD the daemon gets is lost (fault injection): a job's end is still seen, by the look
# at every job every 200 ms (a make test's run had a one-line job "running" for 20 s, its end
# never looked at: the jobs that are the daemon's children were looked at only on a SIGCHLD)
# a batch of results closed on a worker's connection (a fan-out's, 64 or more) that fails comes
# back to the queue, and the loop writes the next batch itself (ferryd-test fails every batch on
# the pool): before, every batch went to the pool again and the run never ended
test_fault_finish_on_the_pool_fails_the_loop_writes_it() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=fail:finish-pool FERRY_FAULT_TIMES=1000000 FERRY_EXECUTOR=noop
	id=$(submit "$(wf poolfail <<'Y'
name: poolfail
steps:
  - {name: each, foreach: {range: 600}, command: [noop]}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT count(*), count(*) FILTER (WHERE a.state = 'succeeded') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.parent_id IS NOT NULL")" "600|600" "each item ran once, and succeeded"
	grep -q 'fault injected: closing results on the pool failed' "$FERRY_HOME/ferryd-a.log" || fail "no batch went to the pool: the fault was not there"
}

# a batch closed on the loop with the claim that follows (ferry_finish_claim)
# whose call fails: the results are kept and written again with the next
# claim; nothing is lost or run twice
test_fault_finish_claim_fails_results_kept() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=fail:finish-claim FERRY_FAULT_TIMES=2 FERRY_POLL_MS=200
	id=$(submit "$(wf fcfail <<'Y'
name: fcfail
steps:
  - {name: a, command: [sh, -c, 'echo a']}
  - {name: b, needs: [a], command: [sh, -c, 'echo b']}
  - {name: c, needs: [b], command: [sh, -c, 'echo c']}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT string_agg(s.name || ':' || s.attempts || ':' || s.state, ',' ORDER BY s.name) FROM steps s WHERE s.run_id = $id")" \
		"a:1:succeeded,b:1:succeeded,c:1:succeeded" "each step once, each succeeded"
	assert_eq "$(grep -c 'fault injected: closing results with a claim failed' "$FERRY_HOME/ferryd-a.log")" 2 "the call failed twice"
}

# the daemon dies right after a call that closed a's attempt and claimed b
# committed, before b's job started: the daemon back, b's attempt (no job,
# no handle) is lost and b runs once, in a new attempt that counts no try
test_fault_killed_after_finish_claim_committed() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:claimed
	id=$(submit "$(wf fckill <<'Y'
name: fckill
steps:
  - {name: a, command: [sh, -c, 'echo a']}
  - {name: b, needs: [a], command: [sh, -c, 'echo b']}
Y
)")
	wait_daemon_dead a
	assert_eq "$(sql "SELECT s.state || ' ' || a.state || ' ' || coalesce(a.handle::text, 'none') FROM steps s JOIN attempts a ON a.step_id = s.id WHERE s.run_id = $id AND s.name = 'b'")" \
		"running running none" "b claimed in a's closing call, its job not started"
	assert_eq "$(step_col "$id" a state)" succeeded "a closed in the same call"
	start_daemon a
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT count(*) FILTER (WHERE a.state = 'succeeded') || '/' || count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'b'")" \
		"1/2" "one attempt lost, one ran"
	assert_eq "$(step_col "$id" b tries)" 1 "the lost attempt counted no try"
}

test_fault_lost_sigchld_job_end_still_seen() {
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=fail:sigchld FERRY_FAULT_TIMES=1000000
	id=$(submit "$(wf lost <<'Y'
name: lost
steps:
  - {name: a, command: [sh, -c, 'echo one']}
  - {name: b, needs: [a], command: [sh, -c, 'echo two']}
Y
)")
	wait_run "$id" succeeded 15
	grep -q 'fault injected: failing "sigchld"' "$FERRY_HOME/ferryd-a.log" || fail "no SIGCHLD was dropped: the fault was not there"
}

# killed_after_monitor_write POINT STATE KIND: a sleeping job's monitor writes its row in STATE and
# a KIND event; the daemon kills itself right after (fault point POINT): both are there
killed_after_monitor_write() {
	FERRYD=ferryd-test start_daemon a FERRY_HANG="$MON_FAST" FERRY_FAULT="kill:$1"
	id=$(submit "$(one_step rowev 'echo started; exec sleep 1000')")
	wait_daemon_dead a 60
	assert_eq "$(sql "SELECT m.state FROM attempt_monitor m JOIN steps s ON s.id = m.step_id WHERE s.run_id = $id")" "$2" "the row's state written"
	assert_eq "$(mon_events "$id" train "$3")" 1 "with its event"
}

# A hung verdict and its event are one transaction: a daemon killed right after writing them (fault
# point monitor-hung-written) leaves both; written one after the other, the row said hung and no
# event (nor its alert) ever came. Not in the monitor group: nothing here is timed but the wait.
test_fault_killed_after_hung_verdict_leaves_its_event() {
	killed_after_monitor_write monitor-hung-written hung monitor.hung
}

# The same for a suspicion: its event and the row's state are one transaction (the event was
# written first, and a daemon killed between them left "monitor.suspected" beside a row saying alive).
test_fault_killed_after_suspicion_leaves_row_and_event() {
	killed_after_monitor_write monitor-suspected-written suspected monitor.suspected
}
