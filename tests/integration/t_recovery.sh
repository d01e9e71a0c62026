# Crash safety: kill -9 of the daemon, restart, two daemons on one database.
# The concurrent migrations need an empty database, not run.sh's migrated template:
# fresh-db: test_concurrent_migrations

test_kill9_restart_readopts() {
	start_daemon a
	f=$(wf crash <<'Y'
name: crash
steps:
  - {name: work, command: [sh, -c, 'echo start >> "$FERRY_CHECKPOINT_DIR/calls"; sleep 4; echo done >> "$FERRY_CHECKPOINT_DIR/calls"']}
  - {name: after, needs: [work], command: [sh, -c, 'echo after >> "$FERRY_CHECKPOINT_DIR/calls"']}
Y
)
	id=$(submit "$f")
	wait_step "$id" work running 10
	sleep 0.3
	stop_daemon a KILL
	sleep 0.5
	start_daemon a
	wait_run "$id" succeeded 30
	assert_eq "$(tr '\n' ' ' < "$FERRY_HOME/runs/$id/work/checkpoint/calls")" "start done " "work ran once, to completion"
	assert_eq "$(step_col "$id" work attempts)" 1 "no second attempt"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'attempt.adopted'")" 1 "adoption recorded"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'step.succeeded' AND step = 'work'")" 1 "completed once"
}

test_kill9_job_finished_while_down() {
	start_daemon a
	# the job ends when the test says: while no daemon watches it, whatever the machine's speed
	f=$(wf crash2 <<Y
name: crash2
steps:
  - {name: quick, command: [sh, -c, 'while [ ! -e "$FERRY_HOME/go" ]; do sleep 0.05; done; echo ran >> "\$FERRY_CHECKPOINT_DIR/calls"']}
  - {name: after, needs: [quick], command: [sh, -c, 'true']}
Y
)
	id=$(submit "$f")
	wait_step "$id" quick running 10
	stop_daemon a KILL
	touch "$FERRY_HOME/go"
	for _ in $(seq 1 100); do [ -s "$FERRY_HOME/runs/$id/quick/checkpoint/calls" ] && break; sleep 0.1; done
	[ -s "$FERRY_HOME/runs/$id/quick/checkpoint/calls" ] || fail "the job did not finish while the daemon was down"
	sleep 0.2 # its status written after its last line
	start_daemon a
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/quick/checkpoint/calls" | wc -l)" 1 "quick ran once"
	assert_eq "$(step_col "$id" quick attempts)" 1 "no second attempt"
}

test_lost_job_is_retried() {
	start_daemon a
	f=$(wf lost <<'Y'
name: lost
steps:
  - {name: victim, command: [sh, -c, 'if [ "$FERRY_ATTEMPT" = 1 ]; then sleep 30; fi; echo ok']}
Y
)
	id=$(submit "$f")
	wait_step "$id" victim running 10
	sleep 0.3
	stop_daemon a KILL
	# the whole job dies with the machine, so to speak: kill its process group
	pid=$(sql "SELECT handle->>'pid' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")
	kill -9 -- -"$pid"
	start_daemon a
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT string_agg(a.state, ',' ORDER BY a.attempt) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")" "lost,succeeded" "lost then retried"
	assert_match "$(sql "SELECT a.reason FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND attempt = 1")" "daemon restarted" "lost reason"
}

test_two_daemons_share_work() {
	start_daemon a FERRY_MAX_JOBS=6
	start_another b FERRY_MAX_JOBS=6
	{
		echo "name: wide"
		echo "steps:"
		echo "  - {name: root, command: [sh, -c, 'true']}"
		for i in $(seq 1 30); do
			echo "  - {name: s$i, needs: [root], command: [sh, -c, 'echo s$i >> \"\$SHARED/wide\"; sleep 0.3']}"
		done
	} > "$FERRY_HOME/wide.yaml"
	id=$(submit "$FERRY_HOME/wide.yaml")
	id2=$(submit "$FERRY_HOME/wide.yaml")
	wait_run "$id" succeeded 60
	wait_run "$id2" succeeded 60
	lines=$(wc -l < "$FERRY_HOME/shared/wide")
	uniq=$(sort -u "$FERRY_HOME/shared/wide" | wc -l)
	assert_eq "$lines" 60 "each of 2x30 steps ran exactly once"
	assert_eq "$uniq" 30 "distinct step names"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id IN ($id, $id2)")" 62 "one attempt per step"
	owners=$(sql "SELECT count(DISTINCT owner) FROM attempts")
	echo "owners: $owners"
	assert_eq "$owners" 2 "both daemons ran steps"
}

test_sigterm_hands_over() {
	start_daemon a FERRY_SHUTDOWN_GRACE_MS=500
	f=$(wf handover <<'Y'
name: handover
steps:
  - {name: long, command: [sh, -c, 'sleep 5; echo finished >> "$FERRY_CHECKPOINT_DIR/calls"']}
Y
)
	id=$(submit "$f")
	wait_step "$id" long running 10
	stop_daemon a TERM     # grace is 0.5 s: the job outlives it
	grep -q "handing 1 running job over" "$FERRY_HOME/ferryd-a.log" || fail "no hand-over logged"
	start_daemon a
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/long/checkpoint/calls")" finished "ran once"
	assert_eq "$(step_col "$id" long attempts)" 1 "same attempt"
}

test_concurrent_migrations() {
	# two daemons start at the same moment on an empty database
	spawn_daemon a
	spawn_daemon b
	await_daemon a
	await_daemon b
	assert_eq "$(sql "SELECT count(*) = count(DISTINCT name) AND count(*) > 0 FROM schema_migrations")" t "each migration once"
	assert_eq "$(grep -c 'applied migration' "$FERRY_HOME"/ferryd-*.log | awk -F: '{s+=$2} END {print s}')" "$(sql "SELECT count(*) FROM schema_migrations")" "applied once in total"
}

# A local job's supervisor killed (kill -9) while the job runs: the attempt fails saying so, and
# what is left of the job is killed with it — a job that ran on after its attempt was called failed
# would run beside its retry, on the same directories (it wrote "end" 3 s later).
test_supervisor_killed_takes_its_job_with_it() {
	local id shim
	start_daemon a
	mkdir -m 1777 "$FERRY_HOME/t"
	id=$(submit "$(wf shk <<Y
name: shk
steps:
  - {name: s, command: [sh, -c, 'echo start >>$FERRY_HOME/t/trace; sleep 3; echo end >>$FERRY_HOME/t/trace']}
Y
)")
	wait_step "$id" s running 10
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/t/trace" ] && break; sleep 0.1; done
	shim=$(pgrep -f "ferry-shim -u .* $FERRY_HOME/runs/$id/s/1/log" | head -1)
	[ -n "$shim" ] || fail "no supervisor found for the job"
	kill -9 "$shim"
	wait_run "$id" failed 10
	assert_match "$(step_col "$id" s reason)" "the job's supervisor was killed before it could record the exit status" "the reason"
	assert_match "$(cat "$FERRY_HOME/ferryd-a.log")" "run $id step s attempt 1: its supervisor is gone: what was left of its job was killed" "the log says so"
	# until nothing of its process group (the supervisor's pid) is left: at once when it was killed,
	# after the job's own end (and its "end" line) when it ran on
	for _ in $(seq 1 100); do [ -z "$(pgrep -g "$shim")" ] && break; sleep 0.1; done
	[ -z "$(pgrep -g "$shim")" ] || fail "the job's processes still run: $(pgrep -a -g "$shim")"
	assert_eq "$(cat "$FERRY_HOME/t/trace")" start "the job did not run on"
}
