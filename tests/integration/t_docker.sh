# The docker executor against a real dockerd (started through
# deploy/dockerd.sh, stopped after the test when the test started it): the
# hello workflow in containers, stop and timeout leave no container, the
# memory limit's kill reported as such, network: none and cpus: 1 enforced,
# a stale container of the same name is no conflict, and a daemon killed
# mid-step (before or after the handle's record, and with the container's
# supervisor gone too) leaves a run that finishes with its work run once.
#
# The digits train step runs in ferry-python (deploy/dockerd.sh python-image:
# the host's python3-sklearn stack, ~200 MB, kept once built).
#
# One group (run.sh): the tests share the machine's dockerd and its socket.
# The group's lane starts dockerd once (group_setup_docker) and stops it
# after the last test when it started it; docker_up in each test then finds
# it running and leaves it running.
# group: docker

# (stopped only when this group started it: a dockerd that answered already is someone else's)
group_setup_docker() {
	local out
	out=$("$ROOT/deploy/dockerd.sh" start 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	case $out in *"started pid"*) touch "$SUITE/group-docker.started" ;; esac
}
group_teardown_docker() {
	[ -f "$SUITE/group-docker.started" ] || return 0
	"$ROOT/deploy/dockerd.sh" stop
	rm -f "$SUITE/group-docker.started"
}

DOCKER_SOCK=${FERRY_DOCKER_HOST:-unix:///var/run/docker.sock}
DOCKER_SOCK=${DOCKER_SOCK#unix://}

# dk METHOD PATH [JSON]: the Engine API; sets DK_CODE and DK_BODY.
dk() {
	local out
	out=$(curl -sS -m 20 --unix-socket "$DOCKER_SOCK" -X "$1" -H 'Content-Type: application/json' \
		${3:+--data-binary "$3"} -w '\n%{http_code}' "http://d/v1.41$2")
	DK_CODE=${out##*$'\n'}
	DK_BODY=${out%$'\n'*}
}

# the containers labelled with this test's FERRY_HOME, one name a line
dk_ours() {
	local home filt
	home=$(realpath "$FERRY_HOME")
	filt=$(python3 -c 'import json,sys,urllib.parse; print(urllib.parse.quote(json.dumps({"label": ["ferry.home=" + sys.argv[1]]})))' "$home")
	dk GET "/containers/json?all=1&filters=$filt"
	[ "$DK_CODE" = 200 ] || fail "listing containers: $DK_CODE $DK_BODY"
	echo "$DK_BODY" | python3 -c 'import json,sys; [print(c["Names"][0].lstrip("/")) for c in json.load(sys.stdin)]'
}

docker_down() {
	local c
	set +e
	stop_daemons
	for c in $(dk_ours 2>/dev/null); do dk DELETE "/containers/$c?force=1"; done
	[ -n "${DOCKERD_STARTED:-}" ] && "$ROOT/deploy/dockerd.sh" stop
}

# docker_up: dockerd and ferry-base through deploy/dockerd.sh; undone when the test's subshell exits
docker_up() {
	local out
	out=$("$ROOT/deploy/dockerd.sh" start 2>&1) || fail "deploy/dockerd.sh: $out"
	echo "$out"
	case $out in *"started pid"*) DOCKERD_STARTED=1 ;; esac
	trap docker_down EXIT
}

assert_no_container() { # WHAT
	local left=""
	for _ in $(seq 1 50); do
		left=$(dk_ours)
		[ -z "$left" ] && return 0
		sleep 0.1
	done
	fail "$1: containers left: $left"
}

# wait_container: prints the name of this test's container once one runs
wait_container() {
	local c end=$((SECONDS + 60)) # a container's start through podman's service took past 10 s on a loaded machine
	while [ "$SECONDS" -lt "$end" ]; do
		c=$(dk_ours | head -1)
		[ -n "$c" ] && { dk GET "/containers/$c/json"; echo "$DK_BODY" | grep -q '"Running":true' && { echo "$c"; return 0; }; }
		sleep 0.1
	done
	fail "no container of this test started within 60 s"
}

# hello_on_docker: workflows/hello.yaml with every step on executor docker, image ferry-base, as $FERRY_HOME/hello.yaml
hello_on_docker() {
	python3 - "$ROOT/workflows/hello.yaml" "$FERRY_HOME/hello.yaml" <<'PY'
import sys, yaml
w = yaml.safe_load(open(sys.argv[1]))
for s in w["steps"]:
    s["executor"] = "docker"
    s["image"] = "ferry-base"
yaml.safe_dump(w, open(sys.argv[2], "w"), sort_keys=False)
PY
}

test_docker_hello_workflow() {
	docker_up
	hello_on_docker
	start_daemon a
	id=$(submit "$FERRY_HOME/hello.yaml" '{"who":"docker"}')
	wait_run "$id" succeeded 60
	assert_eq "$(cat "$FERRY_HOME/runs/$id/greet/1/out/greeting")" "hello, docker" "the output written inside the container"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/count/1/log")" $'tick 1\ntick 2\ntick 3' "the log, decoded from the stream"
	assert_eq "$(step_col "$id" flaky attempts)" 2 "flaky retried once"
	assert_match "$(cat "$FERRY_HOME/runs/$id/flaky/1/log")" 'attempt 1: simulated failure' "stderr in the log"
	assert_eq "$(sql "SELECT string_agg(DISTINCT a.executor, ',') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")" docker "every attempt ran on docker"
	assert_match "$(sql "SELECT handle->>'container' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'greet'")" "^ferry-[0-9a-f]{8}-$id-greet-1\$" "the handle names the container"
	assert_match "$(sql "SELECT a.reason FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'flaky' AND a.attempt = 1")" 'exit code 3' "the failed try's exit code"
	assert_no_container "after the run"
}

# submits digits.yaml's train step alone, on docker in ferry-python, from a
# copy of workflows/ (the project directory is bound at the same path:
# nothing is written into the checkout); prints the run id
submit_digits_train() {
	mkdir -p "$FERRY_HOME/proj"
	cp -r "$ROOT/workflows/digits" "$FERRY_HOME/proj/"
	python3 - "$ROOT/workflows/digits.yaml" "$FERRY_HOME/proj/train.yaml" <<'PY'
import sys, yaml
w = yaml.safe_load(open(sys.argv[1]))
train = next(s for s in w["steps"] if s["name"] == "train")
train.pop("needs")
train.pop("warm")  # a warm server runs on the host: refused beside a container executor
# one training (C=10, gamma=0.05), not the example's sweep: the step's own log and outputs
for k in ("sweep", "max_parallel"):
    train.pop(k)
train["command"] = [a.replace("{{item.", "{{params.") for a in train["command"]]
w["params"]["C"]["default"], w["params"]["gamma"]["default"] = "10", "0.05"
train.update({"executor": "docker", "image": "ferry-python", "resources": {"cpus": 1, "memory": "1Gi"}})
w["steps"] = [train]
yaml.safe_dump(w, open(sys.argv[2], "w"), sort_keys=False)
PY
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read(), "workdir": sys.argv[2]}))' "$FERRY_HOME/proj/train.yaml" "$FERRY_HOME/proj")
	api POST /api/v1/runs "$body"
	assert_eq "$CODE" 201 "POST /runs: $BODY"
	echo "$BODY" | json 'j["id"]'
}

test_docker_digits_train_step() {
	local out
	docker_up
	out=$("$ROOT/deploy/dockerd.sh" python-image 2>&1) || fail "deploy/dockerd.sh python-image: $out"
	start_daemon a
	id=$(submit_digits_train)
	wait_run "$id" succeeded 120
	[ -s "$FERRY_HOME/runs/$id/train/1/out/model.pkl" ] || fail "no model.pkl: $(cat "$FERRY_HOME/runs/$id/train/1/log")"
	assert_match "$(cat "$FERRY_HOME/runs/$id/train/1/out/metrics.json")" '"cv_accuracy"|accuracy' "metrics written"
	assert_match "$(cat "$FERRY_HOME/runs/$id/train/1/log")" 'digits: [0-9]+ training images' "the step's log"
	assert_eq "$(sql "SELECT a.executor FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")" docker "ran on docker"
	assert_no_container "after the run"
}

# a step reads an upstream step's output (another attempt's directory) and
# cannot write into it: the runs are bound read-only, its own directories writable
test_docker_upstream_outputs_readable() {
	docker_up
	start_daemon a
	id=$(submit "$(wf chain <<'Y'
name: chain
steps:
  - {name: one, executor: docker, image: ferry-base, command: [sh, -c, 'echo 1 > "$FERRY_OUTPUT_DIR/n"']}
  - {name: two, needs: [one], executor: docker, image: ferry-base, command: [sh, -c, 'cat "{{steps.one.outputs.n}}"; echo 2 > "{{steps.one.outputs.n}}" || echo refused; echo ok > "$FERRY_CHECKPOINT_DIR/ck"']}
Y
)")
	wait_run "$id" succeeded 30
	log="$FERRY_HOME/runs/$id/two/1/log"
	# stdout and stderr are two streams: the refusal may be logged before the "1"
	grep -qx 1 "$log" || fail "read the upstream output: $(cat "$log")"
	grep -q 'Read-only file system' "$log" || fail "writing the upstream output was not refused: $(cat "$log")"
	grep -qx refused "$log" || fail "could not change it: $(cat "$log")" # stdout and stderr are two streams: their order in the log is not fixed
	assert_eq "$(cat "$FERRY_HOME/runs/$id/one/1/out/n")" 1 "the upstream output unchanged"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/two/checkpoint/ck")" ok "the checkpoint directory writable"
}

test_docker_image_host_refused() {
	docker_up
	start_daemon a
	id=$(submit "$(wf onhost <<'Y'
name: onhost
steps:
  - {name: s, executor: docker, command: [sh, -c, 'true']}
Y
)")
	wait_run "$id" failed 30
	assert_match "$(step_col "$id" s reason)" 'executor docker cannot run image: host.*executor: podman' "a clear refusal"
}

test_docker_stop_leaves_no_container() {
	docker_up
	start_daemon a
	id=$(submit "$(wf long <<'Y'
name: long
steps:
  - {name: s, executor: docker, image: ferry-base, command: [sh, -c, 'echo started; sleep 300']}
Y
)")
	wait_step "$id" s running 30
	c=$(wait_container)
	t0=$SECONDS
	api POST "/api/v1/runs/$id/stop"
	wait_run "$id" stopped 20
	# the job would sleep 300 s: stopped within a minute used the grace (1 s)
	# and the kill (how fast a stop is belongs to the bench, not here)
	[ $((SECONDS - t0)) -le 60 ] || fail "stopping took $((SECONDS - t0)) s"
	assert_no_container "after the stop"
	dk GET "/containers/$c/json"
	assert_eq "$DK_CODE" 404 "container $c removed"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/s/1/log")" started "the log stays after the container is gone"
}

test_docker_timeout() {
	docker_up
	start_daemon a
	id=$(submit "$(wf slow <<'Y'
name: slow
steps:
  - {name: s, executor: docker, image: ferry-base, timeout: 2s, command: [sh, -c, 'sleep 300']}
Y
)")
	wait_run "$id" failed 30
	assert_match "$(step_col "$id" s reason)" 'timed out after 2000 ms' "the timeout's reason"
	assert_no_container "after the timeout"
}

test_docker_memory_limit_reported_as_oom() {
	docker_up
	start_daemon a
	id=$(submit "$(wf hog <<'Y'
name: hog
steps:
  - name: s
    executor: docker
    image: ferry-base
    resources: {memory: 64Mi}
    command: [sh, -c, 'echo filling; exec dd if=/dev/zero of=/dev/null bs=256M count=1']
Y
)")
	wait_run "$id" failed 60
	assert_eq "$(step_col "$id" s reason)" "out of memory (limit 64 MiB)" "the OOM kill named as such"
	assert_eq "$(sql "SELECT a.exit_code FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")" 137 "killed (SIGKILL)"
	grep -q 'records in' "$FERRY_HOME/runs/$id/s/1/log" && fail "dd finished within its memory limit"
	assert_no_container "after the OOM kill"
}

test_docker_network_none_cannot_reach_host_loopback() {
	docker_up
	python3 -c '
import http.server, socketserver, sys
s = socketserver.TCPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()' "$FERRY_HOME/port" >/dev/null 2>&1 &
	trap "kill $! 2>/dev/null; docker_down" EXIT
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/port" ] && break; sleep 0.1; done
	port=$(cat "$FERRY_HOME/port")
	# busybox's wget crashes when a connection fails: nc and an HTTP request by hand
	start_daemon a
	id=$(submit "$(wf net <<Y
name: net
steps:
  - {name: none, executor: docker, image: ferry-base, command: [sh, -c, 'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 127.0.0.1 $port 2>/dev/null | grep -q ^HTTP/ && echo REACHED || echo UNREACHABLE']}
  - {name: dflt, executor: docker, image: ferry-base, network: none, command: [sh, -c, 'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 127.0.0.1 $port 2>/dev/null | grep -q ^HTTP/ && echo REACHED || echo UNREACHABLE']}
  - {name: host, executor: docker, image: ferry-base, network: host, command: [sh, -c, 'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 127.0.0.1 $port 2>/dev/null | grep -q ^HTTP/ && echo REACHED || echo UNREACHABLE']}
Y
)")
	wait_run "$id" succeeded 60
	assert_eq "$(cat "$FERRY_HOME/runs/$id/none/1/log")" UNREACHABLE "no network by default"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/dflt/1/log")" UNREACHABLE "network: none"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/host/1/log")" REACHED "network: host reaches it (the probe works)"
}

test_docker_cpus_enforced() {
	docker_up
	start_daemon a
	id=$(submit "$(wf cpu <<'Y'
name: cpu
steps:
  - name: s
    executor: docker
    image: ferry-base
    resources: {cpus: 1}
    command: [sh, -c, 'if [ -f /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.max; else echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"; fi; while [ ! -e "$FERRY_CHECKPOINT_DIR/go" ]; do sleep 0.1; done']
Y
)")
	c=$(wait_container)
	dk GET "/containers/$c/json"
	assert_eq "$(echo "$DK_BODY" | json 'j["HostConfig"]["NanoCpus"]')" 1000000000 "NanoCpus"
	docker_release "$id" s
	wait_run "$id" succeeded 30
	# the container's own cgroup: a quota of one period per period (cgroup v1 or v2)
	assert_match "$(cat "$FERRY_HOME/runs/$id/s/1/log")" '^(100000 100000)$' "the cgroup's CPU quota"
}

# a stale container with the name the next attempt gets (a crashed earlier try) is no conflict
test_docker_stale_container_no_conflict() {
	docker_up
	home=$(realpath "$FERRY_HOME")
	name="ferry-$(printf %s "$home" | sha256sum | cut -c1-8)-1-s-1"
	dk POST "/containers/create?name=$name" '{"Image":"ferry-base","Cmd":["sleep","300"],"Labels":{"ferry.home":"'"$home"'"}}'
	assert_eq "$DK_CODE" 201 "the stale container was made: $DK_BODY"
	dk POST "/containers/$name/start"
	start_daemon a
	id=$(submit "$(wf one <<'Y'
name: one
steps:
  - {name: s, executor: docker, image: ferry-base, command: [sh, -c, 'echo fresh']}
Y
)")
	assert_eq "$id" 1 "the run id the stale name was made for"
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/s/1/log")" fresh "the new attempt ran"
	assert_no_container "after the run"
}

# a stopped container of a finished attempt (its removal failed) is removed
# after a job ends; one whose attempt recorded no end stays (adoption's)
test_docker_leftover_of_finished_attempt_removed() {
	docker_up
	home=$(realpath "$FERRY_HOME")
	for c in "left-s:s" "left-other:other"; do
		dk POST "/containers/create?name=ferry-test-${c%%:*}" '{"Image":"ferry-base","Cmd":["true"],"HostConfig":{"NetworkMode":"none"},"Labels":{"ferry.home":"'"$home"'","ferry.run":"1","ferry.step":"'"${c##*:}"'","ferry.attempt":"1"}}'
		assert_eq "$DK_CODE" 201 "made ferry-test-${c%%:*}: $DK_BODY"
		dk POST "/containers/ferry-test-${c%%:*}/start"
		dk POST "/containers/ferry-test-${c%%:*}/wait"
	done
	start_daemon a
	# first ends first: its end's sweep sees s without an end (the leftover stays); s's own end
	# must bring a sweep soon, not a minute later (CI: a sweep while s ran, the next after the test)
	id=$(submit "$(wf one <<'Y'
name: one
steps:
  - {name: first, executor: docker, image: ferry-base, command: [sh, -c, 'true']}
  - {name: s, needs: [first], executor: docker, image: ferry-base, command: [sh, -c, 'true']}
Y
)")
	assert_eq "$id" 1 "the run the leftovers are labelled with"
	wait_run "$id" succeeded 60
	end=$((SECONDS + 40)) # the strays task ticks every 10 s beside the ticks of SIGCHLD
	while dk GET /containers/ferry-test-left-s/json; [ "$DK_CODE" != 404 ] && [ $SECONDS -lt $end ]; do sleep 0.2; done
	assert_eq "$DK_CODE" 404 "the leftover of the finished attempt removed"
	logged "removed container .* of run 1 step s attempt 1: its end was recorded" "$FERRY_HOME/ferryd-a.log" || fail "not logged"
	dk GET /containers/ferry-test-left-other/json
	assert_eq "$DK_CODE" 200 "a container whose attempt recorded no end stays"
}

# the counted step of t_seams.sh in a container: its work counted in the checkpoint directory (mounted)
# The work runs until the test lets it go (docker_release): a kill "mid-step"
# is mid-step however slow the machine (a sleep of 3, then 10, then 15 s
# was over before a loaded machine's restarted daemon looked)
docker_counted_wf() {
	wf dcounted <<Y
name: dcounted
steps:
  - {name: work, executor: docker, image: ferry-base, command: [sh, -c, 'echo "attempt \$FERRY_ATTEMPT" >> "\$FERRY_CHECKPOINT_DIR/work.count"; echo begin; while [ ! -e "\$FERRY_CHECKPOINT_DIR/go" ]; do sleep 0.1; done; echo end']}
  - {name: after, needs: [work], executor: docker, image: ferry-base, command: [sh, -c, 'true']}
Y
}

# wait_handle RUN: until the work step's container is recorded in its attempt
# and its supervisor in the status file (what a kill mid-step needs done)
wait_handle() {
	for _ in $(seq 1 100); do
		[ -n "$(sql "SELECT handle->>'container' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = 'work'")" ] &&
			[ -n "$(supervisor_pid "$1" 2>/dev/null)" ] && return 0
		sleep 0.1
	done
	fail "the work step's handle was not recorded"
}

docker_release() { # RUN STEP: the step's work goes on (its checkpoint directory's go)
	mkdir -p "$FERRY_HOME/runs/$1/$2/checkpoint"
	touch "$FERRY_HOME/runs/$1/$2/checkpoint/go"
}

docker_ran_once() { # RUN
	docker_release "$1" work
	wait_run "$1" succeeded 60
	assert_eq "$(cat "$FERRY_HOME/runs/$1/work/checkpoint/work.count")" "attempt 1" "the step's work ran exactly once"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = 'work'")" 1 "one attempt"
	assert_eq "$(cat "$FERRY_HOME/runs/$1/work/1/log")" $'begin\nend' "the whole log, once"
	assert_no_container "after the run"
}

test_docker_daemon_killed_after_start_runs_once() {
	docker_up
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:started
	id=$(submit_racing "$(docker_counted_wf)")
	wait_daemon_dead a
	assert_eq "$(sql "SELECT coalesce(handle::text, 'none') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'work'")" none "killed before the handle was recorded"
	start_daemon a
	docker_ran_once "$id"
	grep -Eq "re-adopted docker job \(found in its directory\)" \
		"$FERRY_HOME/ferryd-a.log" || fail "not adopted from the attempt directory"
	assert_match "$(sql "SELECT handle->>'container' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'work'")" '^ferry-' "the adopter recorded the handle"
}

test_docker_daemon_kill9_mid_step_runs_once() {
	docker_up
	start_daemon a
	id=$(submit "$(docker_counted_wf)")
	wait_container >/dev/null
	wait_handle "$id"
	stop_daemon a KILL
	start_daemon a
	docker_ran_once "$id"
	grep -q "re-adopted docker job from" "$FERRY_HOME/ferryd-a.log" || fail "not re-adopted"
}

# the pid of the supervisor the status file names last
supervisor_pid() { awk '$1 == "pid" {p = $2} END {print p}' "$FERRY_HOME/runs/$1/work/1/status"; }

# the daemon and the container's supervisor both killed: the container is
# followed again; then the daemon killed again while that follower runs
test_docker_supervisor_killed_container_followed_again() {
	docker_up
	start_daemon a
	id=$(submit "$(docker_counted_wf)")
	wait_container >/dev/null
	wait_handle "$id"
	stop_daemon a KILL
	shim=$(supervisor_pid "$id")
	[ -n "$shim" ] || fail "no supervisor pid in the status file"
	kill -9 "$shim"
	start_daemon a
	# the restarted daemon's first recovery round (5 s here alone; more on a loaded machine)
	local end=$((SECONDS + 30))
	while [ "$SECONDS" -lt "$end" ] && [ "$(supervisor_pid "$id")" = "$shim" ]; do sleep 0.1; done
	follower=$(supervisor_pid "$id")
	[ "$follower" != "$shim" ] || fail "no new supervisor follows the container"
	stop_daemon a KILL
	start_daemon a
	docker_ran_once "$id"
	assert_eq "$(grep -c '^pid ' "$FERRY_HOME/runs/$id/work/1/status")" 2 "one follower, not one per adoption"
}

# the supervisor killed while its daemon runs: a new one follows the container
test_docker_supervisor_killed_under_running_daemon() {
	docker_up
	start_daemon a
	id=$(submit "$(docker_counted_wf)")
	wait_container >/dev/null
	wait_handle "$id"
	kill -9 "$(supervisor_pid "$id")"
	docker_ran_once "$id"
}

# The same, but the container ends before the daemon looks at it again (the daemon's thread held
# where it finds the supervisor gone, tests/fault, until the container is seen ended): its last
# lines, which the killed supervisor had not copied, still reach the log — a new supervisor follows
# the ended container once. Before, its end was taken from an inspection and the log ended where
# the supervisor died (cc51: "begin" without "end", the container quicker than the daemon).
test_docker_supervisor_killed_container_ends_first() {
	local c end=$((SECONDS + 30))
	docker_up
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=hold:docker-shim-gone
	id=$(submit "$(docker_counted_wf)")
	c=$(wait_container)
	wait_handle "$id"
	kill -9 "$(supervisor_pid "$id")"
	docker_release "$id" work
	# held where it found the supervisor gone, while the container ends
	until grep -q 'fault injected: holding at "docker-shim-gone"' "$FERRY_HOME/ferryd-a.log" &&
		dk GET "/containers/$c/json" && echo "$DK_BODY" | grep -q '"Running":false'; do
		[ "$SECONDS" -lt "$end" ] || fail "not held at the fault point with the container ended: $DK_BODY"
		sleep 0.1
	done
	touch "$FERRY_HOME/fault.release"
	docker_ran_once "$id"
}

# The same executor, unchanged, against `podman system service` (the Docker
# Engine API v1.41 of Podman) on a socket of its own: the hello workflow,
# a kill -9 of the daemon mid-step, a stop, a stale container of the name,
# a memory limit's kill, the digits train step. Podman runs with private
# storage under FERRY_HOME and its own containers.conf (runc: crun fails on
# this hybrid cgroup layout; nofile within the hard limit), and is stopped
# after the test. Podman 4.3 here never sets OOMKilled: the memory kill is
# told from the kernel's log.
# stops the podman service of the test and removes its storage (podman bind-mounts its overlay directory)
podman_service_down() {
	local pid
	pid=$(cat "$PODMAN_DIR/pid" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null
	for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null
	umount "$PODMAN_DIR/root/overlay" 2>/dev/null
	rm -rf "$PODMAN_DIR"
}

test_docker_api_on_podman_service() {
	command -v podman >/dev/null || fail "podman is not installed (apt-get install podman runc)"
	local pd n
	pd=$(mktemp -d /tmp/ferry-pd.XXXXXX) # podman wants a short runroot
	n=$(ulimit -Hn)
	printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=32768:32768"]\n[engine]\nruntime = "runc"\n' "$n" "$n" >"$pd/containers.conf"
	export FERRY_DOCKER_HOST="unix://$pd/api.sock" DOCKER_SOCK="$pd/api.sock"
	# started in its own directory: the conmon of each container it runs works in the service's,
	# and creates "oom" there on an out-of-memory kill (it left one in the repository's root);
	# TMPDIR its own too: the images imported (deploy/dockerd.sh) went through a copy it never
	# removed, /var/tmp/api_load.tarNNN (256 MB a suite, 6 GB in /var/tmp after a day of runs)
	mkdir "$pd/tmp"
	CONTAINERS_CONF="$pd/containers.conf" TMPDIR="$pd/tmp" setsid env -C "$pd" podman --root "$pd/root" --runroot "$pd/run" \
		system service --time=0 "$FERRY_DOCKER_HOST" >"$pd/service.log" 2>&1 &
	echo $! >"$pd/pid"
	PODMAN_DIR=$pd
	trap 'docker_down; podman_service_down' EXIT
	for _ in $(seq 1 100); do curl -fsS -m 1 --unix-socket "$DOCKER_SOCK" http://d/_ping >/dev/null 2>&1 && break; sleep 0.1; done
	curl -fsS -m 1 --unix-socket "$DOCKER_SOCK" http://d/_ping >/dev/null || { cat "$pd/service.log"; fail "podman system service did not answer"; }
	# deploy/dockerd.sh finds an engine answering on the socket and only builds ferry-base there
	out=$("$ROOT/deploy/dockerd.sh" start 2>&1) || fail "deploy/dockerd.sh: $out"
	assert_match "$out" 'already running' "no dockerd started beside podman"
	dk GET /version
	assert_match "$DK_BODY" '"Podman Engine"|[Pp]odman' "the API is podman's"
	hello_on_docker
	start_daemon a
	id=$(submit "$FERRY_HOME/hello.yaml" '{"who":"podman"}')
	wait_run "$id" succeeded 60
	assert_eq "$(cat "$FERRY_HOME/runs/$id/greet/1/out/greeting")" "hello, podman" "the output written inside the container"
	assert_eq "$(step_col "$id" flaky attempts)" 2 "flaky retried once"
	assert_no_container "after the hello run"
	id=$(submit "$(docker_counted_wf)")
	wait_container >/dev/null
	wait_handle "$id"
	stop_daemon a KILL
	start_daemon a
	docker_ran_once "$id"
	id=$(submit "$(wf long <<'Y'
name: long
steps:
  - {name: s, executor: docker, image: ferry-base, command: [sh, -c, 'sleep 300']}
Y
)")
	wait_container >/dev/null
	api POST "/api/v1/runs/$id/stop"
	wait_run "$id" stopped 20
	assert_no_container "after the stop"
	# a stale container named as the next run's attempt (podman refuses a taken name with a 500)
	local name
	name="ferry-$(printf %s "$(realpath "$FERRY_HOME")" | sha256sum | cut -c1-8)-$((id + 1))-s-1"
	dk POST "/containers/create?name=$name" '{"Image":"ferry-base","Cmd":["sleep","300"]}'
	assert_eq "$DK_CODE" 201 "the stale container was made: $DK_BODY"
	id=$(submit "$(wf one <<'Y'
name: one
steps:
  - {name: s, executor: docker, image: ferry-base, command: [sh, -c, 'echo fresh']}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/s/1/log")" fresh "the new attempt ran in place of the stale container"
	dk GET "/containers/$name/json"
	assert_eq "$DK_CODE" 404 "the stale container is gone"
	# podman leaves OOMKilled false: the kernel's record of the kill says it
	id=$(submit "$(wf hog <<'Y'
name: hog
steps:
  - {name: s, executor: docker, image: ferry-base, resources: {memory: 64Mi}, command: [sh, -c, 'exec dd if=/dev/zero of=/dev/null bs=256M count=1']}
Y
)")
	wait_run "$id" failed 60
	assert_eq "$(step_col "$id" s reason)" "out of memory (limit 64 MiB)" "the OOM kill named as such on podman"
	assert_no_container "after the OOM kill"
	# conmon's record of it went to the service's directory, not the runner's (the repository's root)
	if [ -n "$(find "$PWD" -maxdepth 1 -name oom -newer "$pd/containers.conf" 2>/dev/null)" ]; then
		fail "conmon left 'oom' in $PWD"
	fi
	# the digits train step, in ferry-python built into podman's storage
	out=$("$ROOT/deploy/dockerd.sh" python-image 2>&1) || fail "deploy/dockerd.sh python-image: $out"
	id=$(submit_digits_train)
	wait_run "$id" succeeded 120
	[ -s "$FERRY_HOME/runs/$id/train/1/out/model.pkl" ] || fail "no model.pkl: $(cat "$FERRY_HOME/runs/$id/train/1/log")"
	assert_no_container "after the train step"
	# the images imported above left no copy in /var/tmp (the service's TMPDIR is its directory)
	if [ -n "$(find /var/tmp -maxdepth 1 -name 'api_load.tar*' -newer "$pd/containers.conf" 2>/dev/null)" ]; then
		fail "podman left its copies of the imported images in /var/tmp"
	fi
}

# dockerd behind engine_holdopen.py in MODE (hold, error-once): the daemons started after it
# talk to the proxy; it records what it did to FERRY_HOME/held, and stops with the test
engine_proxy_up() { # MODE
	docker_up
	local sock=$FERRY_HOME/proxy.sock
	python3 "$ROOT/tests/integration/engine_holdopen.py" "$sock" "$DOCKER_SOCK" "$FERRY_HOME/held" "$1" \
		>"$FERRY_HOME/proxy.log" 2>&1 &
	ENGINE_PROXY=$!
	trap 'kill $ENGINE_PROXY 2>/dev/null; docker_down' EXIT
	for _ in $(seq 1 50); do [ -S "$sock" ] && break; sleep 0.1; done
	export FERRY_DOCKER_HOST="unix://$sock"
}

# An engine that keeps a finished container's log stream open (podman's
# service has, podman#6627 and #11461), here a real dockerd behind a proxy
# that withholds the stream's end: the shim sees the container ended while
# its stream stayed silent, reads the rest of the log whole, and the run
# ends with its whole log, not never.
test_docker_log_stream_left_open_after_exit() {
	engine_proxy_up hold
	start_daemon a
	id=$(submit "$(wf quick <<'Y'
name: quick
steps:
  - {name: fast, executor: docker, image: ferry-base, command: [sh, -c, 'echo one; echo two']}
  - {name: slow, executor: docker, image: ferry-base, command: [sh, -c, 'echo a; sleep 4; echo b; sleep 1; echo c']}
Y
)")
	wait_run "$id" succeeded 60
	assert_match "$(cat "$FERRY_HOME/held")" '/containers/ferry-.*-fast-1/logs' "the proxy held the fast step's stream open"
	assert_match "$(cat "$FERRY_HOME/held")" '/containers/ferry-.*-slow-1/logs' "and the slow step's"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/fast/1/log")" $'one\ntwo' "the fast step's whole log, once"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/slow/1/log")" $'a\nb\nc' "the slow step's whole log, once (a silence while it ran ended nothing)"
	assert_no_container "after the run"
}

# An engine that answers a log request 200 and then an error as the body
# (podman's service, as a container ends while its log is asked: "failed to
# obtain logs … read /proc/PID/cgroup: no such process"), here a real
# dockerd behind a proxy that answers the first followed log so: the shim
# takes no such answer for the job's log (it wrote that error into the log,
# '":"no such process",…', seen in test_docker_api_on_podman_service) and
# asks again; the step's log is its own, whole.
test_docker_log_answered_with_an_error() {
	engine_proxy_up error-once
	start_daemon a
	id=$(submit "$(wf fresh <<'Y'
name: fresh
steps:
  - {name: s, executor: docker, image: ferry-base, command: [sh, -c, 'echo fresh; echo again']}
Y
)")
	wait_run "$id" succeeded 60
	assert_match "$(cat "$FERRY_HOME/held")" '^error /.*containers/ferry-.*-s-1/logs' "the proxy answered the log with an error"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/s/1/log")" $'fresh\nagain' "the step's own log, whole, once"
	assert_no_container "after the run"
}

# a container that still runs although its attempt is over (reaped as lost
# by another replica while its daemon was away) is killed and removed when
# the daemon is back; the step's next attempt runs in a new container
test_docker_orphan_of_finished_attempt_removed() {
	docker_up
	start_daemon a
	f=$(wf orphan <<'Y'
name: orphan
steps:
  - name: work
    executor: docker
    image: ferry-base
    command: [sh, -c, 'if [ "$FERRY_ATTEMPT" = 1 ]; then sleep 300; fi; echo "attempt $FERRY_ATTEMPT done"']
Y
)
	id=$(submit "$f")
	first=$(wait_container)
	stop_daemon a KILL
	sql "SELECT * FROM ferry_finish('other-replica', ARRAY[(SELECT id FROM steps WHERE run_id = $id AND name = 'work')], ARRAY[1], ARRAY['lost'], ARRAY[NULL::int], ARRAY[NULL::int], ARRAY['owner lost'], ARRAY[false], ARRAY[NULL::jsonb], ARRAY[NULL::jsonb], ARRAY[NULL::jsonb], ARRAY[NULL::text], ARRAY[NULL::jsonb])" >/dev/null
	dk GET "/containers/$first/json"
	echo "$DK_BODY" | grep -q '"Running":true' || fail "the container of attempt 1 should still run"
	start_daemon a
	wait_run "$id" succeeded 60
	assert_match "$(cat "$FERRY_HOME/runs/$id/work/2/log")" "attempt 2 done" "attempt 2 ran"
	for _ in $(seq 1 300); do dk GET "/containers/$first/json"; [ "$DK_CODE" = 404 ] && break; sleep 0.1; done
	assert_eq "$DK_CODE" 404 "the orphan container is gone"
	logged "removed container .*: run $id step work attempt 1 is no longer running" "$FERRY_HOME/ferryd-a.log" || fail "no log line for the orphan"
	assert_no_container "at the end"
}
