# The slurm executor against a real one-node Slurm (munged, slurmctld,
# slurmd, slurmrestd) started through deploy/slurm.sh. Its ports are fixed
# (one cluster per machine), so these tests are one group (run.sh): the
# group's lane starts the cluster once under $SUITE/group-slurm
# (SLURM_GROUP_DIR) and stops it after the last test; each test's slurm_up
# starts whatever of it is not running (a test before may have stopped
# slurmctld on purpose) and its slurm_down cancels the jobs it left. A test
# run without the group (SLURM_GROUP_DIR unset) starts its own cluster
# under its FERRY_HOME and stops it when it ends, passed or failed.
# group: slurm

group_setup_slurm() {
	export SLURM_GROUP_DIR="$SUITE/group-slurm"
	"$ROOT/deploy/slurm.sh" start "$SLURM_GROUP_DIR"
}
group_teardown_slurm() { "$ROOT/deploy/slurm.sh" stop "$SUITE/group-slurm"; }

# slurm_up: Slurm for this test (the group's, else its own); the daemon's settings exported
slurm_up() {
	export FERRY_SLURM_DIR="${SLURM_GROUP_DIR:-$FERRY_HOME/slurm}"
	trap slurm_down EXIT
	"$ROOT/deploy/slurm.sh" start "$FERRY_SLURM_DIR" >"$FERRY_HOME/slurm-up.log" 2>&1 || {
		cat "$FERRY_HOME/slurm-up.log"; tail -20 "$FERRY_SLURM_DIR"/log/*.log 2>/dev/null
		fail "cannot start Slurm with deploy/slurm.sh (packages: make deps)"; }
	eval "$(grep -E '^(SLURM_CONF|FERRY_SLURM_URL|FERRY_SLURM_USER|FERRY_SLURM_TOKEN)=' "$FERRY_HOME/slurm-up.log" | sed 's/^/export /')"
	[ -n "${FERRY_SLURM_TOKEN:-}" ] || fail "deploy/slurm.sh printed no token"
	export FERRY_SLURM_POLL_MS=300
}

slurm_down() {
	[ -n "${FERRY_SLURM_DIR:-}" ] || return 0
	if [ "$FERRY_SLURM_DIR" = "${SLURM_GROUP_DIR:-}" ]; then
		# the group's cluster stays up for the next test: this test's jobs go, and are gone
		# before the next test starts (it may assert that no job is left)
		SLURM_CONF="$FERRY_SLURM_DIR/etc/slurm.conf" scancel --quiet --full --user=root 2>/dev/null
		for _ in $(seq 1 100); do [ -z "$(SLURM_CONF="$FERRY_SLURM_DIR/etc/slurm.conf" squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
		return 0
	fi
	"$ROOT/deploy/slurm.sh" stop "$FERRY_SLURM_DIR" >/dev/null 2>&1
	return 0
}

# slurm_jobs: the ids of Slurm's pending or running jobs, one a line
slurm_jobs() { squeue -h -o %i 2>/dev/null; }
# the jobs still in Slurm's queue once it had up to 10 s to let go of those that ended: an
# attempt ends when its batch script wrote its exit, and Slurm lists the job a moment longer
# (completing) — under load past the test's look ("no Slurm job left: expected '', got '3'")
slurm_jobs_left() {
	local j
	for _ in $(seq 1 100); do
		j=$(slurm_jobs)
		[ -z "$j" ] && return 0
		sleep 0.1
	done
	echo "$j $(squeue -h -o '%i:%T' 2>/dev/null | tr '\n' ' ')"
}

attempt_col() { # RUN STEP COLUMN: of its attempts, oldest first
	sql "SELECT string_agg($3, ',' ORDER BY a.attempt) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = '$2'"
}

# hello on slurm: run it, check each step ran as a Slurm job with its output
hello_on_slurm() { # WORKFLOW_FILE
	id=$(submit "$1" '{"who":"slurm"}')
	wait_run "$id" succeeded 90
	assert_eq "$(cat "$FERRY_HOME/runs/$id/greet/1/out/greeting")" "hello, slurm" "greet's output"
	assert_match "$(cat "$FERRY_HOME/runs/$id/count/1/log")" "tick 3" "the job's log is in the attempt's log"
	assert_eq "$(attempt_col "$id" flaky "a.executor")" "slurm,slurm" "flaky ran twice on slurm"
	assert_match "$(attempt_col "$id" flaky "a.reason")" "exit code 3: attempt 1: simulated failure" "attempt 1's reason from its log"
	assert_match "$(attempt_col "$id" greet "(a.handle->>'job_id')")" '^[0-9]+$' "the handle holds the Slurm job id"
	grep -Eq '^slurm [0-9]+$' "$FERRY_HOME/runs/$id/join/1/status" || fail "the batch script recorded no job id"
	grep -q '^exit 0$' "$FERRY_HOME/runs/$id/join/1/status" || fail "the batch script recorded no exit"
}

test_slurm_hello_rest() {
	slurm_up
	start_daemon a FERRY_EXECUTOR=slurm
	hello_on_slurm "$ROOT/workflows/hello.yaml"
	assert_eq "$(attempt_col "$id" greet "a.handle->>'via'")" rest "through slurmrestd"
	# the job carries its run, step and attempt
	jid=$(attempt_col "$id" greet "(a.handle->>'job_id')")
	assert_match "$(scontrol show job -o "$jid")" "JobName=ferry-$id-greet-1 .*Comment=$FERRY_HOME/runs/$id/greet/1" "name and comment"
	assert_eq "$(slurm_jobs_left)" "" "no Slurm job left"
}

test_slurm_hello_cli() {
	slurm_up
	start_daemon a FERRY_EXECUTOR=slurm
	f=$(wf hello_cli < <(sed 's/^  - name: \(.*\)$/  - name: \1\n    executor: slurm\n    slurm: {via: cli}/' "$ROOT/workflows/hello.yaml"))
	hello_on_slurm "$f"
	assert_eq "$(attempt_col "$id" greet "a.handle->>'via'")" cli "through sbatch"
	assert_eq "$(slurm_jobs_left)" "" "no Slurm job left"
}

# a stopped run leaves no Slurm job behind (both ways of talking to Slurm)
test_slurm_stop_leaves_no_job() {
	slurm_up
	start_daemon a
	f=$(wf stop <<'Y'
name: stop
steps:
  - {name: rest, executor: slurm, command: [sh, -c, 'echo started; sleep 300']}
  - {name: cli, executor: slurm, slurm: {via: cli}, command: [sh, -c, 'echo started; sleep 300']}
Y
)
	id=$(submit "$f")
	for _ in $(seq 1 100); do [ "$(slurm_jobs | wc -l)" = 2 ] && break; sleep 0.1; done
	assert_eq "$(slurm_jobs | wc -l)" 2 "two Slurm jobs run"
	wait_step "$id" rest running 10
	api POST "/api/v1/runs/$id/stop" '{}'
	wait_run "$id" stopped 30
	assert_eq "$(slurm_jobs_left)" "" "no Slurm job left after stop"
	assert_eq "$(step_col "$id" rest state)" stopped "rest step stopped"
	assert_eq "$(step_col "$id" cli state)" stopped "cli step stopped"
}

# timeout: Ferry cancels the Slurm job; retry: a failed attempt is a new job
test_slurm_timeout_and_retry() {
	slurm_up
	start_daemon a
	f=$(wf tr <<'Y'
name: tr
steps:
  - {name: slow, executor: slurm, timeout: 2s, command: [sh, -c, 'sleep 60']}
  - name: again
    executor: slurm
    retry: {limit: 2, backoff: 1s}
    command: [sh, -c, 'echo "try $FERRY_ATTEMPT" >>"$FERRY_HOME/shared/again.count"; [ "$FERRY_ATTEMPT" -ge 3 ]']
    env: {FERRY_HOME: "{{ run.id }}"}
Y
)
	# FERRY_HOME is the daemon's: the job gets it from its env
	sed -i "s|FERRY_HOME: \"{{ run.id }}\"|FERRY_HOME: \"$FERRY_HOME\"|" "$f"
	id=$(submit "$f")
	wait_step "$id" slow failed 40
	assert_match "$(attempt_col "$id" slow a.reason)" "timed out after 2000 ms" "timeout reason"
	wait_step "$id" again succeeded 60
	assert_eq "$(tr '\n' ' ' <"$FERRY_HOME/shared/again.count")" "try 1 try 2 try 3 " "three tries"
	assert_eq "$(attempt_col "$id" again "(a.handle->>'job_id' IS NOT NULL)::text")" "true,true,true" "three Slurm jobs"
	assert_eq "$(slurm_jobs_left)" "" "the timed-out job was cancelled"
}

# a job over its memory is killed by Slurm and reported as such; a job
# within it runs (deploy/slurm.sh: jobacct_gather's OverMemoryKill, polled
# every second, as the cluster has no task/cgroup)
test_slurm_memory_limit_reported_as_oom() {
	slurm_up
	start_daemon a
	f=$(wf oom <<'Y'
name: oom
steps:
  - name: hog
    executor: slurm
    resources: {memory: 64Mi}
    command: [/usr/bin/python3, -c, 'import time; b = [bytearray(16 << 20) for _ in range(16)]; time.sleep(20); print("survived")']
  - name: fits
    executor: slurm
    slurm: {via: cli}
    resources: {memory: 64Mi}
    command: [/usr/bin/python3, -c, 'b = bytearray(8 << 20); print("fits")']
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 60
	assert_eq "$(step_col "$id" hog reason)" "out of memory (limit 64 MiB)" "the memory-limit kill"
	assert_eq "$(step_col "$id" fits state)" succeeded "a job within its limit"
	grep -q survived "$FERRY_HOME/runs/$id/hog/1/log" && fail "the hog finished"
	assert_eq "$(slurm_jobs_left)" "" "no Slurm job left"
}

# the digits pipeline's train and evaluate steps as Slurm jobs
# The example pipeline end to end on Slurm. Its deploy step's load test judges
# p99 latency (< 500 ms at 16 clients), which the other lanes of this suite
# push past on 2 cores: the pipeline runs from a copy with that bound at 10 s
# (the load test itself still runs and is judged), not alone after the lanes.
test_slurm_digits_train() {
	/usr/bin/python3 -c 'import sklearn' 2>/dev/null || fail "python3-sklearn is not installed (make deps)"
	slurm_up
	start_daemon a FERRY_EXECUTOR=slurm
	f=$(digits_copy) || fail "cannot copy the digits example"
	id=$(ferry submit "$f")
	wait_step "$id" label waiting 20
	ferry continue "$id" label --data '{"reviewed_by": "ana"}' >/dev/null
	wait_run "$id" succeeded 180
	best=$(best_item "$id" train)
	assert_eq "$(attempt_col "$id" "$best" a.executor)" slurm "train's candidates ran on slurm"
	model=$(step_col "$id" "$best" "outputs->>'model'")
	[ -s "$model" ] || fail "train wrote no model ($model)"
	[ -n "$(step_col "$id" evaluate "metrics->>'accuracy'")" ] || fail "evaluate reported no accuracy"
	assert_match "$(dep_json | json '[e["kind"] for e in j["events"]]')" 'load-test' "its load test ran"
}

# a step whose work is counted, on Slurm
slurm_counted_wf() { # [SECONDS the work sleeps: 4]
	wf counted <<Y
name: counted
steps:
  - {name: work, executor: slurm, command: [sh, -c, 'echo "attempt \$FERRY_ATTEMPT" >> "$FERRY_HOME/shared/work.count"; sleep ${1:-4}']}
  - {name: after, needs: [work], command: [sh, -c, 'true']}
Y
}

slurm_ran_once() { # RUN
	wait_run "$1" succeeded 60
	assert_eq "$(cat "$FERRY_HOME/shared/work.count")" "attempt 1" "the step's work ran exactly once"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = 'work'")" 1 "one attempt"
	assert_match "$(attempt_col "$1" work "a.executor || ' ' || (a.handle->>'job_id')")" '^slurm [0-9]+$' "the job id recorded"
	assert_eq "$(slurm_jobs_left)" "" "no Slurm job left"
}

# killed right after the submit, before the handle was recorded
test_slurm_daemon_killed_after_start() {
	slurm_up
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:started
	id=$(submit_racing "$(slurm_counted_wf)")
	wait_daemon_dead a
	assert_eq "$(attempt_col "$id" work "coalesce(a.handle::text, 'none')")" none "killed before the handle was recorded"
	start_daemon a
	slurm_ran_once "$id"
	# found in its directory, running still or (on a loaded machine, its 4 s over before the restart) ended
	grep -Eq "re-adopted slurm job \(found in its directory\)|finished while its owner .* was gone \(found in its directory\)" \
		"$FERRY_HOME/ferryd-a.log" || fail "not adopted from the attempt directory"
}

# killed right after the submit, and the job over before the restart: the
# restarted daemon finds it ended in its directory and records its handle
# with the job id the script wrote (it was recorded without one)
test_slurm_daemon_killed_after_start_job_ended_meanwhile() {
	slurm_up
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:started
	id=$(submit_racing "$(slurm_counted_wf)")
	wait_daemon_dead a
	local st="$FERRY_HOME/runs/$id/work/1/status"
	for _ in $(seq 1 150); do grep -q '^exit ' "$st" 2>/dev/null && break; sleep 0.1; done
	grep -q '^exit ' "$st" || fail "the job did not end within 15 s"
	start_daemon a
	slurm_ran_once "$id"
	grep -q "finished while its owner .* was gone (found in its directory)" "$FERRY_HOME/ferryd-a.log" ||
		fail "not found ended in the attempt directory"
}

# a plain kill -9 while the Slurm job runs: the restarted daemon follows it by its recorded id
test_slurm_daemon_kill9_while_running() {
	slurm_up
	start_daemon a
	id=$(submit "$(slurm_counted_wf 15)") # still running when the restarted daemon looks (4 s ended first under load)
	wait_step "$id" work running 10
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/shared/work.count" ] && break; sleep 0.1; done
	stop_daemon a KILL
	start_daemon a
	slurm_ran_once "$id"
	grep -q "re-adopted slurm job from" "$FERRY_HOME/ferryd-a.log" || fail "not re-adopted"
}

# slurmctld down for longer than a poll period while a step runs: the step
# waits, and finishes correctly once it is back (rest and cli)
test_slurm_slurmctld_outage() {
	slurm_up
	start_daemon a
	f=$(wf outage <<'Y'
name: outage
steps:
  - {name: rest, executor: slurm, command: [sh, -c, 'sleep 5; echo done-rest']}
  - {name: cli, executor: slurm, slurm: {via: cli}, command: [sh, -c, 'sleep 5; echo done-cli']}
  - {name: late, needs: [rest, cli], executor: slurm, command: [sh, -c, 'echo late']}
Y
)
	id=$(submit "$f")
	for _ in $(seq 1 100); do [ "$(slurm_jobs | wc -l)" = 2 ] && break; sleep 0.1; done
	assert_eq "$(slurm_jobs | wc -l)" 2 "two Slurm jobs run"
	# running, not pending: their scripts wrote their job ids
	for s in rest cli; do
		for _ in $(seq 1 100); do grep -q '^slurm ' "$FERRY_HOME/runs/$id/$s/1/status" 2>/dev/null && break; sleep 0.1; done
		grep -q '^slurm ' "$FERRY_HOME/runs/$id/$s/1/status" || fail "the $s job did not start"
	done
	kill "$(cat "$FERRY_SLURM_DIR/run/slurmctld.pid")"
	for _ in $(seq 1 50); do kill -0 "$(cat "$FERRY_SLURM_DIR/run/slurmctld.pid")" 2>/dev/null || break; sleep 0.1; done
	# the jobs end while slurmctld is away: their script's record ends them; the
	# next step cannot be submitted until slurmctld is back
	sleep 8
	assert_eq "$(step_col "$id" rest state)" succeeded "rest ended from its status file"
	assert_eq "$(step_col "$id" cli state)" succeeded "cli ended from its status file"
	assert_eq "$(sql "SELECT state FROM runs WHERE id = $id")" running "the run waits, not failed"
	"$ROOT/deploy/slurm.sh" start "$FERRY_SLURM_DIR" >/dev/null
	wait_run "$id" succeeded 60
	assert_match "$(cat "$FERRY_HOME/runs/$id/late/1/log")" late "late ran after slurmctld came back"
	grep -q "Slurm did not answer" "$FERRY_HOME/ferryd-a.log" || fail "the outage was not noticed"
}

# slurmrestd down while a step is being submitted and runs: the step waits
test_slurm_slurmrestd_outage() {
	slurm_up
	kill "$(cat "$FERRY_SLURM_DIR/run/slurmrestd.pid")"
	sleep 0.5
	start_daemon a
	id=$(submit "$(slurm_counted_wf)")
	wait_step "$id" work running 10
	# the engine's loop is not held up meanwhile: a local run goes through
	f=$(wf quick <<'Y'
name: quick
steps:
  - {name: q, command: [sh, -c, 'echo quick']}
Y
)
	q=$(submit "$f")
	wait_run "$q" succeeded 5
	sleep 2
	assert_eq "$(step_col "$id" work state)" running "still waiting for slurmrestd"
	[ ! -s "$FERRY_HOME/shared/work.count" ] || fail "ran although never submitted"
	"$ROOT/deploy/slurm.sh" start "$FERRY_SLURM_DIR" >/dev/null
	wait_run "$id" succeeded 60
	assert_eq "$(cat "$FERRY_HOME/shared/work.count")" "attempt 1" "the step's work ran exactly once"
	# submitted after the handle was recorded: the job id is in the script's status line
	grep -Eq '^slurm [0-9]+$' "$FERRY_HOME/runs/$id/work/1/status" || fail "no Slurm job id in the status file"
	assert_eq "$(slurm_jobs_left)" "" "no Slurm job left"
}

# What Slurm refuses for good (a partition it does not have) fails the
# attempt with Slurm's message, both ways of talking to it; before, a REST
# answer 500 counted as an outage and the step stayed running forever.
test_slurm_permanent_error_fails_the_step() {
	slurm_up
	start_daemon a
	f=$(wf nosuch <<'Y'
name: nosuch
steps:
  - {name: rest, executor: slurm, slurm: {partition: nosuch}, command: [sh, -c, 'echo never']}
  - {name: cli, executor: slurm, slurm: {partition: nosuch, via: cli}, command: [sh, -c, 'echo never']}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	assert_match "$(step_col "$id" rest reason)" 'Slurm refused the job: .*[Ii]nvalid partition' "rest: Slurm's message"
	assert_match "$(step_col "$id" cli reason)" 'Slurm refused the job: .*[Ii]nvalid partition' "cli: Slurm's message"
	assert_eq "$(slurm_jobs_left)" "" "no Slurm job"
}

# Slurm away while a step is submitted: the step's reason says it waits for
# Slurm (and why), the reason goes once it is submitted, and with
# slurm.submit_timeout the attempt fails when Slurm stays away that long.
test_slurm_waiting_reason_and_submit_timeout() {
	slurm_up
	kill "$(cat "$FERRY_SLURM_DIR/run/slurmrestd.pid")"
	sleep 0.5
	start_daemon a
	f=$(wf waits <<'Y'
name: waits
steps:
  - {name: patient, executor: slurm, command: [sh, -c, 'echo patient']}
  - {name: bounded, executor: slurm, slurm: {submit_timeout: 3s}, command: [sh, -c, 'echo bounded']}
Y
)
	id=$(submit "$f")
	wait_step "$id" bounded failed 20
	assert_match "$(step_col "$id" bounded reason)" 'Slurm did not answer for 3 s \(slurm.submit_timeout\): .*' "bounded: failed after its bound"
	assert_match "$(step_col "$id" patient reason)" '^waiting for Slurm: ' "patient: says what it waits for"
	assert_match "$(ferry get "$id")" 'waiting for Slurm: ' "shown by ferry get"
	"$ROOT/deploy/slurm.sh" start "$FERRY_SLURM_DIR" >/dev/null
	wait_step "$id" patient succeeded 60
	assert_eq "$(step_col "$id" patient "coalesce(reason, '')")" "" "the reason went with the wait"
}

# image: other than host on slurm: the batch script runs the command in
# `podman run` with the attempt's directories mounted at their own paths
test_slurm_image_runs_in_podman() {
	command -v podman >/dev/null || fail "podman is not installed (make deps)"
	if [ -x "$ROOT/deploy/podman.sh" ]; then
		"$ROOT/deploy/podman.sh" >"$FERRY_HOME/podman-setup.log" 2>&1 || { cat "$FERRY_HOME/podman-setup.log"; fail "deploy/podman.sh failed"; }
	fi
	# a small image of our own (no registry here): busybox-static's applets
	local img=localhost/ferry-slurm-test:$$ root="$FERRY_HOME/rootfs"
	mkdir -p "$root/bin" "$root/tmp"
	cp /bin/busybox "$root/bin/busybox"
	for a in sh cat echo ls true; do ln -sf busybox "$root/bin/$a"; done
	tar -C "$root" -cf "$FERRY_HOME/rootfs.tar" .
	podman import -q "$FERRY_HOME/rootfs.tar" "$img" >/dev/null || fail "podman import failed"
	trap 'podman rmi -f "'"$img"'" >/dev/null 2>&1; slurm_down' EXIT
	podman run --rm "$img" true || fail "podman cannot run a container here (deploy/podman.sh sets up what it needs)"
	slurm_up
	trap 'podman rmi -f "'"$img"'" >/dev/null 2>&1; slurm_down' EXIT
	start_daemon a
	f=$(wf img <<Y
name: img
steps:
  - name: boxed
    executor: slurm
    image: $img
    env: {GREETING: hi}
    command: [sh, -c, 'echo "\$GREETING from \$FERRY_STEP" > "\$FERRY_OUTPUT_DIR/x"; if [ -e /usr/bin/python3 ]; then echo host; else echo image; fi']
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 90
	assert_eq "$(cat "$FERRY_HOME/runs/$id/boxed/1/out/x")" "hi from boxed" "the output directory is mounted, the env passed"
	assert_match "$(cat "$FERRY_HOME/runs/$id/boxed/1/log")" '^image$' "ran in the image, not on the host"
	assert_eq "$(podman ps -a -q --filter name=ferry-slurm-)" "" "no container left"
}
