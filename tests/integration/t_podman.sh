# The podman executor (orchestrator/exec/exec_podman.c) against the real Podman:
# hello and the digits pipeline in containers (busybox image ferry-base and
# image: host), stop, timeout, retry, the memory-limit kill, network and CPU
# isolation, a daemon killed mid-step, and the sweep of leftover containers.
# Each test sets Podman up with deploy/podman.sh and removes every container
# of its FERRY_HOME when it ends, even on failure.
# One group (run.sh): the memory-limit, CPU and timing checks run one at a
# time, not beside each other on this 2-core machine.
# group: podman

# podman_up: the configuration and image (idempotent), and the cleanup trap.
podman_up() {
	command -v podman >/dev/null || fail "podman is not installed (make deps; deploy/podman.sh)"
	"$ROOT/deploy/podman.sh" || fail "deploy/podman.sh failed"
	trap podman_down EXIT
}

# podman_down: daemons first (they start no more containers), then this home's containers.
podman_down() {
	stop_daemons
	podman ps -aq --filter "label=ferry.home=$FERRY_HOME" | xargs -r podman rm -f -t 0 >/dev/null 2>&1
	for d in /sys/fs/cgroup/*/ferry/ferry-* /sys/fs/cgroup/ferry/ferry-*; do
		[ -d "$d" ] && [ "$(podman_home_of_cgroup "$d")" = mine ] && rmdir "$d" 2>/dev/null
	done
	true
}

# our containers' cgroups are named after the hash of FERRY_HOME
podman_home_of_cgroup() {
	local h; h=$(printf %s "$FERRY_HOME" | sha256sum | cut -c1-8)
	case "${1##*/}" in "ferry-$h-"*) echo mine ;; *) echo other ;; esac
}

# containers of this home (optionally of run $1), one name a line
podman_ours() {
	podman ps -a --filter "label=ferry.home=$FERRY_HOME" ${1:+--filter "label=ferry.run=$1"} --format '{{.Names}}'
}

# waits until no container of run $1 is left (10 s)
podman_wait_none() {
	for _ in $(seq 1 100); do
		[ -z "$(podman_ours "$1")" ] && return 0
		sleep 0.1
	done
	fail "containers of run $1 left behind: $(podman_ours "$1" | tr '\n' ' ')"
}

# a workflow file from F with `image: IMAGE` added to every step
with_image() { # FILE IMAGE NAME
	sed "s/^  - name: \(.*\)$/  - name: \1\n    image: $2/" "$1" >"$FERRY_HOME/$3.yaml"
	echo "$FERRY_HOME/$3.yaml"
}

attempts_of() { # RUN STEP: "executor container" of each attempt
	sql "SELECT string_agg(a.executor || ' ' || coalesce(a.handle->>'container', '-'), ',' ORDER BY a.attempt) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = '$2'"
}

test_podman_hello_busybox_and_host() {
	podman_up
	start_daemon a FERRY_EXECUTOR=podman FERRY_JOB_USER=
	# the busybox image: every step of hello, the retried one too
	id=$(submit "$(with_image "$ROOT/workflows/hello.yaml" ferry-base hello-busybox)" '{"who":"podman"}')
	wait_run "$id" succeeded 60
	assert_eq "$(step_col "$id" flaky attempts)" 2 "flaky retried once"
	assert_eq "$(sql "SELECT string_agg(a.state, ',' ORDER BY a.attempt) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'flaky'")" "failed,succeeded" "flaky attempts"
	assert_match "$(attempts_of "$id" flaky)" "^podman ferry-[0-9a-f]{8}-$id-flaky-1,podman ferry-[0-9a-f]{8}-$id-flaky-2$" "named after run, step and attempt"
	assert_eq "$(step_col "$id" flaky reason)" "" "succeeded"
	grep -q "attempt 1: simulated failure" "$FERRY_HOME/runs/$id/flaky/1/log" || fail "the failed attempt's log (stderr) is not in DIR/log"
	grep -q "hello, podman" "$FERRY_HOME/runs/$id/greet/1/out/greeting" || fail "FERRY_OUTPUT_DIR is not mounted"
	grep -q "hello, podman" "$FERRY_HOME/runs/$id/greet/1/log" || fail "greet's log"
	assert_eq "$(grep -c tick "$FERRY_HOME/runs/$id/count/1/log")" 3 "count's log"
	grep -Eq '^exit 0$' "$FERRY_HOME/runs/$id/greet/1/status" || fail "the supervisor recorded no exit"
	podman_wait_none "$id"
	# image: host (the default): the host's root filesystem, here the workflow as it is
	id2=$(submit "$ROOT/workflows/hello.yaml" '{"who":"host"}')
	wait_run "$id2" succeeded 60
	grep -q "hello, host" "$FERRY_HOME/runs/$id2/greet/1/out/greeting" || fail "image: host: output"
	assert_match "$(attempts_of "$id2" join)" "^podman ferry-" "image: host runs on podman too"
	podman_wait_none "$id2"
	# a container sees only what it is given: an isolated filesystem, the job's environment
	f=$(wf env <<'Y'
name: env
steps:
  - name: look
    image: ferry-base
    env: {GREETING: hi there}
    command: [sh, -c, 'echo "$GREETING|$FERRY_STEP|${FERRY_API_TOKEN:-none}|${FERRY_DATABASE_URL:-none}|$(pwd)" > "$FERRY_OUTPUT_DIR/env"; test ! -e /usr/bin/python3']
Y
)
	id3=$(submit "$f")
	wait_run "$id3" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id3/look/1/out/env")" "hi there|look|none|none|$FERRY_HOME/runs/$id3/look/1" "environment and working directory"
	# as the job user (ferryd is root here), the workflow's directory mounted read-only
	mkdir -m 777 "$FERRY_HOME/wd" # writable by anyone on the host: only the mount can refuse
	api POST /api/v1/runs "$(jq -n --arg wd "$FERRY_HOME/wd" --rawfile yaml "$(wf mounts <<'Y'
name: mounts
steps:
  - name: m
    image: ferry-base
    command: [sh, -c, 'id -u > "$FERRY_OUTPUT_DIR/uid"; if touch ./planted 2>/dev/null; then echo writable; else echo read-only; fi > "$FERRY_OUTPUT_DIR/wd"; pwd >> "$FERRY_OUTPUT_DIR/wd"']
Y
)" '{yaml: $yaml, workdir: $wd}')"
	assert_eq "$CODE" 201 "submitted with a workdir: $BODY"
	id5=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id5" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id5/m/1/out/uid")" "$(id -u ferry-job)" "the container runs as ferry-job"
	assert_eq "$(cat "$FERRY_HOME/runs/$id5/m/1/out/wd" | paste -sd' ')" "read-only $FERRY_HOME/wd" "the workdir is read-only"
	[ ! -e "$FERRY_HOME/wd/planted" ] || fail "the container wrote into the workdir"
	# an image that is not here fails the step with podman's word for it (no registry is tried)
	id4=$(submit "$(wf missing <<'Y'
name: missing
steps:
  - {name: m, image: ferry-no-such-image, command: [true]}
Y
)")
	wait_run "$id4" failed 30
	assert_match "$(step_col "$id4" m reason)" "^exit code 125: .*image not known" "a missing image"
	podman_wait_none "$id4"
}

# an upstream step's outputs, named by path ({{steps.X.outputs.Y}}), are
# readable in the next step's container and not writable; the checkpoint
# is. With a busybox image (nothing of the host's inside) and with image:
# host, whose overlay of the host's / does not show a FERRY_HOME on another
# file system (the suite's, on a tmpfs, is one): the runs are mounted.
test_podman_upstream_outputs_readable() {
	local img id log
	podman_up
	start_daemon a FERRY_EXECUTOR=podman FERRY_JOB_USER=
	for img in ferry-base host; do
		id=$(submit "$(wf "chain-$img" <<Y
name: chain
steps:
  - {name: one, image: $img, command: [sh, -c, 'echo 1 > "\$FERRY_OUTPUT_DIR/n"']}
  - {name: two, needs: [one], image: $img, command: [sh, -c, 'cat "{{steps.one.outputs.n}}"; echo 2 > "{{steps.one.outputs.n}}" || echo refused; echo ok > "\$FERRY_CHECKPOINT_DIR/ck"']}
Y
)")
		wait_run "$id" succeeded 60
		log="$FERRY_HOME/runs/$id/two/1/log"
		grep -qx 1 "$log" || fail "$img: read the upstream output: $(cat "$log")"
		grep -q 'Read-only file system' "$log" || fail "$img: writing the upstream output was not refused: $(cat "$log")"
		grep -qx refused "$log" || fail "$img: could not change it: $(cat "$log")"
		assert_eq "$(cat "$FERRY_HOME/runs/$id/one/1/out/n")" 1 "$img: the upstream output unchanged"
		assert_eq "$(cat "$FERRY_HOME/runs/$id/two/checkpoint/ck")" ok "$img: the checkpoint directory writable"
		podman_wait_none "$id"
	done
}

test_podman_digits_on_host_image() {
	[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sklearn' 2>/dev/null || fail "python3-sklearn is not installed (make deps)"
	podman_up
	start_daemon a FERRY_EXECUTOR=podman
	f=$(digits_copy) || fail "cannot copy the digits example"
	id=$(ferry submit "$f")
	wait_step "$id" label waiting 20
	ferry continue "$id" label --data '{"reviewed_by": "ana"}' >/dev/null
	wait_run "$id" succeeded 360
	best=$(best_item "$id" train)
	assert_match "$(attempts_of "$id" "$best")" "^podman ferry-" "train's candidates ran in containers"
	assert_match "$(attempts_of "$id" evaluate)" "^podman ferry-" "evaluate ran in a container"
	model=$(step_col "$id" "$best" "outputs->>'model'")
	[ -s "$model" ] || fail "the model file $model is not there"
	acc=$(step_col "$id" evaluate "metrics->>'accuracy'")
	awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }' || fail "accuracy $acc"
	echo "digits on podman (image: host): accuracy $acc"
	# the train step alone again, as a developer does, reusing the label
	out=$(ferry dev run "$f" --only train --reuse "$id")
	only=$(echo "$out" | sed -n 's/^run \([0-9]*\) (dev).*/\1/p')
	assert_eq "$(sql "SELECT string_agg(name || '=' || state, ' ' ORDER BY idx) FROM steps WHERE run_id = $only AND parent_id IS NULL")" \
		"label=succeeded train=succeeded evaluate=skipped register=skipped deploy=skipped" "--only train"
	podman_wait_none "$id"
}

test_podman_stop_leaves_no_container() {
	podman_up
	start_daemon a
	f=$(wf stop <<'Y'
name: stoppable
steps:
  - {name: long, executor: podman, image: ferry-base, command: [sh, -c, "echo started; sleep 300"]}
  - {name: after, needs: [long], command: [sh, -c, "echo never"]}
Y
)
	id=$(submit "$f")
	wait_step "$id" long running 10
	for _ in $(seq 1 100); do grep -q started "$FERRY_HOME/runs/$id/long/1/log" 2>/dev/null && break; sleep 0.1; done
	assert_eq "$(podman ps --filter "label=ferry.run=$id" --filter "label=ferry.home=$FERRY_HOME" --format '{{.Labels}}' | grep -c 'ferry.step:long')" 1 "the container runs, labelled"
	t0=$(date +%s%N)
	api POST "/api/v1/runs/$id/stop"
	assert_eq "$CODE" 200 "stop answered"
	wait_run "$id" stopped 10
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	echo "stopped in $ms ms"
	# the job would sleep 300 s: a stop that ends it within a minute used the
	# grace and the kill (how fast a stop is belongs to the bench, not here)
	[ "$ms" -le 60000 ] || fail "stop took $ms ms (grace 1000 ms; the job sleeps 300 s)"
	assert_eq "$(step_col "$id" long state)" stopped "the step"
	podman_wait_none "$id"
	grep -q started "$FERRY_HOME/runs/$id/long/1/log" || fail "the log went with the container"
}

# a stop that comes while podman run is still creating the container (a
# podman slowed down by 1.5 s, as on a loaded machine): the kill is retried
# until it lands (a long grace, so no SIGKILL rescues it)
test_podman_stop_right_after_start() {
	podman_up
	real=$(command -v podman)
	printf '#!/bin/sh\n[ "$3" = run ] && sleep 1.5\nexec %s "$@"\n' "$real" >"$FERRY_HOME/slow-podman"
	chmod +x "$FERRY_HOME/slow-podman"
	start_daemon a FERRY_KILL_GRACE_MS=60000 FERRY_PODMAN="$FERRY_HOME/slow-podman"
	f=$(wf early <<'Y'
name: early
steps:
  - {name: long, executor: podman, image: ferry-base, command: [sh, -c, "sleep 120; echo finished"]}
Y
)
	id=$(submit "$f")
	wait_step "$id" long running 10
	api POST "/api/v1/runs/$id/stop"
	assert_eq "$CODE" 200 "stop answered"
	# the TERM, not the KILL 60 s later (the grace), ends it; a loaded make test's podman took 10 s
	wait_run "$id" stopped 50
	podman_wait_none "$id"
	grep -q finished "$FERRY_HOME/runs/$id/long/1/log" && fail "the job ran to its end"
	true
}

test_podman_timeout_and_retry() {
	podman_up
	start_daemon a
	f=$(wf slow <<'Y'
name: slow
steps:
  - name: sleepy
    executor: podman
    image: ferry-base
    timeout: 1s
    retry: {limit: 1, backoff: 100ms}
    command: [sh, -c, 'echo "try $FERRY_ATTEMPT" >> "$FERRY_CHECKPOINT_DIR/tries"; exec sleep 30']
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" sleepy attempts)" 2 "retried once after the timeout"
	assert_match "$(step_col "$id" sleepy reason)" "timed out" "reason"
	assert_eq "$(tr '\n' ' ' <"$FERRY_HOME/runs/$id/sleepy/checkpoint/tries")" "try 1 try 2 " "each attempt ran once, checkpoint dir shared"
	dur=$(sql "SELECT extract(epoch FROM max(a.finished_at - a.started_at)) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")
	# timed out (its own sleep is 30 s): podman's kill and clean-up were seen taking 6.4 s on a loaded machine
	awk -v d="$dur" 'BEGIN { exit !(d >= 0.9 && d < 15) }' || fail "an attempt took $dur s to time out"
	podman_wait_none "$id"
}

test_podman_memory_limit_reported_as_oom() {
	podman_up
	start_daemon a
	f=$(wf oom <<'Y'
name: oom
steps:
  - name: hog
    executor: podman
    resources: {memory: 64Mi}
    command: [/usr/bin/python3, -c, 'b = b"x" * (256 << 20); print("survived")']
  - name: fits
    executor: podman
    resources: {memory: 64Mi}
    command: [/usr/bin/python3, -c, 'b = b"x" * (16 << 20); print("fits")']
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 60
	assert_eq "$(step_col "$id" hog reason)" "out of memory (limit 64 MiB)" "the memory-limit kill"
	assert_eq "$(step_col "$id" hog exit_code)" 137 "its exit code"
	assert_eq "$(step_col "$id" fits state)" succeeded "a job within its limit"
	podman_wait_none "$id"
}

test_podman_network_none_and_host() {
	podman_up
	mkdir -p "$FERRY_HOME/www" && echo pong >"$FERRY_HOME/www/ping"
	python3 -c '
import http.server, os, sys, functools
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[2])
s = http.server.HTTPServer(("127.0.0.1", 0), h)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_address[1])); os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()' "$FERRY_HOME/www.port" "$FERRY_HOME/www" >/dev/null 2>&1 &
	echo $! >"$FERRY_HOME/daemon.www.pid"
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/www.port" ] && break; sleep 0.1; done
	port=$(cat "$FERRY_HOME/www.port")
	[ "$(curl -s "http://127.0.0.1:$port/ping")" = pong ] || fail "the host's listener does not answer"
	start_daemon a
	f=$(wf net <<Y
name: net
steps:
  - name: isolated
    executor: podman
    image: ferry-base
    command: [sh, -c, 'if printf "GET /ping HTTP/1.0\\r\\n\\r\\n" | nc -w 3 127.0.0.1 $port | grep -q pong; then echo reached; else echo blocked; fi > "\$FERRY_OUTPUT_DIR/r"']
  - name: hostnet
    executor: podman
    image: ferry-base
    network: host
    command: [sh, -c, 'if printf "GET /ping HTTP/1.0\\r\\n\\r\\n" | nc -w 3 127.0.0.1 $port | grep -q pong; then echo reached; else echo blocked; fi > "\$FERRY_OUTPUT_DIR/r"']
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/isolated/1/out/r")" blocked "network: none (the default) cannot reach the host's loopback"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/hostnet/1/out/r")" reached "network: host can"
	grep -Eiq "can't connect|refused|unreachable" "$FERRY_HOME/runs/$id/isolated/1/log" || fail "no connection error in the isolated step's log: $(cat "$FERRY_HOME/runs/$id/isolated/1/log")"
}

test_podman_cpus_enforced() {
	podman_up
	start_daemon a
	# two busy loops for 2 s under cpus: 1 get at most ~2 s of CPU between them
	f=$(wf cpu <<'Y'
name: cpu
steps:
  - name: busy
    executor: podman
    image: ferry-base
    resources: {cpus: 1}
    command:
      - sh
      - -c
      - |
        if [ -r /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.max; else echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"; fi > "$FERRY_OUTPUT_DIR/quota"
        for i in 1 2; do timeout 2 sh -c 'while :; do :; done' & done; wait
        if [ -r /sys/fs/cgroup/cpu.stat ]; then sed -n 's/^usage_usec //p' /sys/fs/cgroup/cpu.stat; else echo $(( $(cat /sys/fs/cgroup/cpuacct/cpuacct.usage) / 1000 )); fi > "$FERRY_OUTPUT_DIR/usec"
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/busy/1/out/quota")" "100000 100000" "the cgroup's CPU quota is one CPU"
	usec=$(cat "$FERRY_HOME/runs/$id/busy/1/out/usec")
	echo "two busy loops for 2 s used $usec us of CPU"
	[ "$usec" -le 2600000 ] || fail "cpus: 1 not enforced: $usec us of CPU in 2 s"
}

# the counted step: one line per run of its command, in the checkpoint dir (mounted)
podman_counted_wf() { # [SECONDS the work takes: 3]
	wf counted <<Y
name: counted
steps:
  - {name: work, executor: podman, image: ferry-base, command: [sh, -c, 'echo "attempt \$FERRY_ATTEMPT" >> "\$FERRY_CHECKPOINT_DIR/work.count"; sleep ${1:-3}; echo done']}
  - {name: after, needs: [work], command: [sh, -c, 'true']}
Y
}

podman_assert_ran_once() { # RUN
	wait_run "$1" succeeded 40
	assert_eq "$(cat "$FERRY_HOME/runs/$1/work/checkpoint/work.count")" "attempt 1" "the step's work ran exactly once"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $1 AND s.name = 'work'")" 1 "one attempt"
	assert_match "$(attempts_of "$1" work)" "^podman ferry-[0-9a-f]{8}-$1-work-1$" "the handle names the container"
	grep -q '^done$' "$FERRY_HOME/runs/$1/work/1/log" || fail "the log lacks the job's last line"
	podman_wait_none "$1"
}

test_podman_daemon_killed_after_start() {
	podman_up
	FERRYD=ferryd-test start_daemon a FERRY_FAULT=kill:started
	id=$(submit_racing "$(podman_counted_wf)")
	wait_daemon_dead a
	assert_eq "$(sql "SELECT coalesce(handle::text, 'none') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.name = 'work'")" none "killed before the handle was recorded"
	start_daemon a
	podman_assert_ran_once "$id"
	# running still, or (its 3 s over before the restart on a loaded machine) ended: found in its directory
	grep -Eq "re-adopted podman job \(found in its directory\)|finished while its owner .* was gone \(found in its directory\)" \
		"$FERRY_HOME/ferryd-a.log" || fail "not adopted from the attempt directory"
}

test_podman_daemon_kill9_mid_step() {
	podman_up
	start_daemon a
	# long enough to still run when a restarted daemon adopts it on a loaded machine (3 s was not)
	id=$(submit "$(podman_counted_wf 10)")
	wait_step "$id" work running 10
	for _ in $(seq 1 100); do [ -s "$FERRY_HOME/runs/$id/work/checkpoint/work.count" ] && break; sleep 0.1; done
	stop_daemon a KILL
	[ -n "$(podman_ours "$id")" ] || fail "the container went with the daemon"
	start_daemon a
	podman_assert_ran_once "$id"
	grep -q "re-adopted podman job from" "$FERRY_HOME/ferryd-a.log" || fail "not re-adopted"
}

# the daemon and the container's supervisor both die: the next daemon finds
# the container by name and follows it to its end
test_podman_supervisor_killed_container_followed() {
	podman_up
	start_daemon a
	id=$(submit "$(podman_counted_wf)")
	wait_step "$id" work running 10
	for _ in $(seq 1 100); do [ -s "$FERRY_HOME/runs/$id/work/checkpoint/work.count" ] && break; sleep 0.1; done
	shim=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$FERRY_HOME/runs/$id/work/1/status")
	[ -n "$shim" ] || fail "no supervisor pid in the status file"
	stop_daemon a KILL
	kill -9 "$shim"
	start_daemon a
	podman_assert_ran_once "$id"
	assert_eq "$(grep -c '^pid ' "$FERRY_HOME/runs/$id/work/1/status")" 2 "a new supervisor appended its pid"
}

# the same, with the follower's first `podman wait` failing (podman's
# storage busy under load, or the sweep removing the container after it
# recorded its end): the follower asks again instead of writing "gone",
# which called the attempt lost and ran its work a second time
test_podman_follower_asks_again_when_wait_fails() {
	podman_up
	local real; real=$(command -v podman)
	cat >"$FERRY_HOME/flaky-podman" <<P
#!/bin/sh
# podman, but "wait" fails once while \$FERRY_HOME/podman.flaky exists
if [ "\$1" = wait ] && [ -e "$FERRY_HOME/podman.flaky" ]; then
	rm -f "$FERRY_HOME/podman.flaky"
	echo "Error: flaky podman" >&2
	exit 125
fi
exec "$real" "\$@"
P
	chmod +x "$FERRY_HOME/flaky-podman"
	start_daemon a FERRY_PODMAN="$FERRY_HOME/flaky-podman"
	id=$(submit "$(podman_counted_wf 8)")
	wait_step "$id" work running 10
	for _ in $(seq 1 100); do [ -s "$FERRY_HOME/runs/$id/work/checkpoint/work.count" ] && break; sleep 0.1; done
	shim=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$FERRY_HOME/runs/$id/work/1/status")
	[ -n "$shim" ] || fail "no supervisor pid in the status file"
	stop_daemon a KILL
	kill -9 "$shim"
	touch "$FERRY_HOME/podman.flaky"
	start_daemon a FERRY_PODMAN="$FERRY_HOME/flaky-podman"
	podman_assert_ran_once "$id"
	[ ! -e "$FERRY_HOME/podman.flaky" ] || fail "the follower never ran podman wait"
	! grep -q '^gone$' "$FERRY_HOME/runs/$id/work/1/status" || fail "the follower wrote gone"
}

# the same, with podman not answering "container exists" in time when the
# next daemon asks (a loaded machine): the attempt is not called lost and
# retried on that — its container still runs, and a retry ran its work a
# second time — but asked again at the next recovery round, then followed
test_podman_adopt_asks_again_when_podman_is_slow() {
	podman_up
	local real; real=$(command -v podman)
	cat >"$FERRY_HOME/slow-podman" <<P
#!/bin/sh
# podman, but "container exists" hangs while \$FERRY_HOME/podman.slow exists
if [ "\$1 \$2" = "container exists" ] && [ -e "$FERRY_HOME/podman.slow" ]; then
	echo asked >>"$FERRY_HOME/podman.asked"
	sleep 30
fi
exec "$real" "\$@"
P
	chmod +x "$FERRY_HOME/slow-podman"
	start_daemon a FERRY_PODMAN="$FERRY_HOME/slow-podman"
	id=$(submit "$(podman_counted_wf 8)")
	wait_step "$id" work running 10
	for _ in $(seq 1 100); do [ -s "$FERRY_HOME/runs/$id/work/checkpoint/work.count" ] && break; sleep 0.1; done
	shim=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$FERRY_HOME/runs/$id/work/1/status")
	[ -n "$shim" ] || fail "no supervisor pid in the status file"
	stop_daemon a KILL
	kill -9 "$shim"
	touch "$FERRY_HOME/podman.slow"
	start_daemon a FERRY_PODMAN="$FERRY_HOME/slow-podman"
	logged "could not be asked (podman container exists .* did not answer within" "$FERRY_HOME/ferryd-a.log" 30 ||
		fail "the slow podman was not reported"
	rm -f "$FERRY_HOME/podman.slow"
	podman_assert_ran_once "$id"
	grep -q "re-adopted podman job" "$FERRY_HOME/ferryd-a.log" || fail "not adopted at the next round"
}

# a container left behind by a crash (exited, its supervisor gone) is swept
test_podman_sweeps_leftover_containers() {
	podman_up
	h=$(printf %s "$FERRY_HOME" | sha256sum | cut -c1-8)
	mkdir -p "$FERRY_HOME/runs/99/old/1"
	echo "pid 999999 1" >"$FERRY_HOME/runs/99/old/1/status"
	podman run --name "ferry-$h-99-old-1" --label ferry.run=99 --label "ferry.home=$FERRY_HOME" \
		--label "ferry.dir=$FERRY_HOME/runs/99/old/1" ferry-base sh -c 'exit 3' || true
	podman run -d --name "ferry-$h-98-live-1" --label ferry.run=98 --label "ferry.home=$FERRY_HOME" \
		--label "ferry.dir=$FERRY_HOME/runs/98/live/1" ferry-base sleep 60 >/dev/null
	start_daemon a
	id=$(submit "$(wf one <<'Y'
name: one
steps:
  - {name: one, executor: podman, image: ferry-base, command: [true]}
Y
)")
	wait_run "$id" succeeded 30
	for _ in $(seq 1 150); do [ -z "$(podman_ours 99)" ] && break; sleep 0.1; done
	[ -z "$(podman_ours 99)" ] || fail "the leftover container was not swept"
	# its supervisor died before it ended: the container was the only record of
	# its end, written into its status before the removal (an adoption reads it)
	assert_eq "$(cat "$FERRY_HOME/runs/99/old/1/status")" "$(printf 'pid 999999 1\nexit 3')" "the end kept in its status"
	sleep 1
	assert_eq "$(podman inspect --format '{{.State.Status}}' "ferry-$h-98-live-1")" running "a running container is left to adoption"
}

# a container that still runs although its attempt is over (reaped as lost
# by another replica while its daemon was away) is killed and removed when
# the daemon is back; the step's next attempt runs in a new container
test_podman_orphan_of_finished_attempt_removed() {
	podman_up
	start_daemon a
	f=$(wf orphan <<'Y'
name: orphan
steps:
  - name: work
    executor: podman
    image: ferry-base
    command: [sh, -c, 'if [ "$FERRY_ATTEMPT" = 1 ]; then sleep 300; fi; echo "attempt $FERRY_ATTEMPT done"']
Y
)
	id=$(submit "$f")
	wait_step "$id" work running 10
	for _ in $(seq 1 100); do [ -n "$(podman ps -q --filter "label=ferry.run=$id" --filter status=running)" ] && break; sleep 0.1; done
	first=$(podman_ours "$id")
	[ -n "$first" ] || fail "no container for attempt 1"
	stop_daemon a KILL
	# another replica declares the attempt lost (what its reaper does)
	sql "SELECT * FROM ferry_finish('other-replica', ARRAY[(SELECT id FROM steps WHERE run_id = $id AND name = 'work')], ARRAY[1], ARRAY['lost'], ARRAY[NULL::int], ARRAY[NULL::int], ARRAY['owner lost'], ARRAY[false], ARRAY[NULL::jsonb], ARRAY[NULL::jsonb], ARRAY[NULL::jsonb], ARRAY[NULL::text], ARRAY[NULL::jsonb])" >/dev/null
	[ "$(podman inspect --format '{{.State.Status}}' "$first")" = running ] || fail "the container of attempt 1 should still run"
	start_daemon a
	wait_run "$id" succeeded 60
	assert_match "$(cat "$FERRY_HOME/runs/$id/work/2/log")" "attempt 2 done" "attempt 2 ran"
	for _ in $(seq 1 300); do podman container exists "$first" || break; sleep 0.1; done
	podman container exists "$first" && fail "the orphan container $first still exists"
	logged "removed container $first: run $id step work attempt 1 is no longer running" "$FERRY_HOME/ferryd-a.log" || fail "no log line for the orphan"
	podman_wait_none "$id"
}

# A container step's secret: in the container's environment (reached by
# name through podman's, never its argv), masked in DIR/log by the shim
# (the container writes into a pipe when the step has secrets).
test_podman_secret_in_the_container_masked_in_its_log() {
	podman_up
	start_daemon a FERRY_EXECUTOR=podman FERRY_JOB_USER=
	api PUT /api/v1/secrets/MODEL_TOKEN '{"value": "podman-s3cret-v4lue"}'
	assert_eq "$CODE" 200 "set: $BODY"
	id=$(submit "$(wf psec <<'Y'
name: psec
steps:
  - name: use
    image: ferry-base
    command: [sh, -c, 'test "$MODEL_TOKEN" = podman-s3cret-v4lue && echo same; echo "token: $MODEL_TOKEN"; echo "$MODEL_TOKEN" >&2']
    secrets: [MODEL_TOKEN]
Y
)")
	wait_run "$id" succeeded 60
	log=$(cat "$FERRY_HOME/runs/$id/use/1/log")
	assert_match "$log" 'same' "the container got the value"
	assert_match "$log" 'token: \*\*\*' "masked on stdout"
	assert_eq "$(grep -cx '\*\*\*' "$FERRY_HOME/runs/$id/use/1/log")" 1 "masked on stderr"
	case $log in *podman-s3cret-v4lue*) fail "the value is in the log: $log" ;; esac
	podman_wait_none "$id"
}
