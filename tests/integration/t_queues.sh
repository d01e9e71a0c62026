# Queues and admission (issue 30) on the local executor: a host declared
# with 2 CPUs and 2 GPU ids (FERRY_CPUS, FERRY_GPUS: a declared list, no
# device is simulated) admits a step only when its request fits, gives each
# GPU step its own GPUs (CUDA_VISIBLE_DEVICES), refuses at submit what no
# host can ever fit, orders by queue and priority, holds a queue's
# max_running, and keeps what a dead daemon's attempts hold until they end.

# gpu_wf NAME N [SLEEP] [RESOURCES]: N steps each asking for RESOURCES (1 GPU), each writing
# "GPU START END" (ns) to its out/trace; SLEEP "go" waits for the file $FERRY_HOME/go instead
gpu_wf() {
	local name=$1 n=$2 sl=${3:-1} res=${4:-"gpus: 1"} wait
	wait="sleep $sl"
	[ "$sl" = go ] && wait="while [ ! -e $FERRY_HOME/go ]; do sleep 0.05; done; sleep 0.3"
	{
		echo "name: $name"
		echo "steps:"
		for i in $(seq 1 "$n"); do
			echo "  - name: g$i"
			echo "    resources: {$res}"
			echo "    command: [sh, -c, 's=\$(date +%s%N); $wait; echo \"\$CUDA_VISIBLE_DEVICES \$s \$(date +%s%N)\" > \"\$FERRY_OUTPUT_DIR/trace\"']"
		done
	} | wf "$name"
}

# traces ID: "GPU START END" of each step of run ID, one a line
traces() {
	cat "$FERRY_HOME/runs/$1"/*/1/out/trace
}

# at_once: the most intervals of "GPU START END" lines (stdin) open at one instant, and whether two
# open together ever shared a GPU ("shared") — "MAX ok|shared"
at_once() {
	python3 -c '
import sys
iv = [l.split() for l in sys.stdin if l.strip()]
iv = [(g, int(s), int(e)) for g, s, e in iv]
most, shared = 0, False
for g, s, e in iv:
    open_ = [x for x in iv if x[1] <= s < x[2]]
    most = max(most, len(open_))
    gs = [x[0] for x in open_]
    if len(gs) != len(set(gs)):
        shared = True
print(most, "shared" if shared else "ok")'
}

test_queues_gpus_given_two_at_a_time() {
	FERRY_GPUS=0,1 FERRY_CPUS=2 start_daemon a
	id=$(submit "$(gpu_wf six 6)")
	wait_run "$id" succeeded 60
	assert_eq "$(traces "$id" | wc -l)" 6 "every step ran"
	assert_eq "$(traces "$id" | at_once)" "2 ok" "at most 2 at a time, never two on one GPU"
	assert_eq "$(traces "$id" | awk '{print $1}' | sort -u | tr '\n' ' ')" "0 1 " "each saw exactly one of the host's GPUs"
	assert_eq "$(sql "SELECT count(*) FROM attempts WHERE cardinality(gpu_ids) = 1")" 6 "each attempt recorded its GPU"
	assert_eq "$(sql "SELECT count(*) FROM attempts WHERE state = 'running'")" 0 "none held after the run"
}

# submit_refused FILE: POST /runs of FILE; CODE and BODY set, the status must be 400
submit_refused() {
	local body
	body=$(jq -n --rawfile yaml "$1" --arg filename "${1##*/}" '{yaml: $yaml, filename: $filename}')
	api POST /api/v1/runs "$body"
	assert_eq "$CODE" 400 "refused at submit: $BODY"
}

test_queues_refused_at_submit_with_the_numbers() {
	FERRY_GPUS=0,1 FERRY_CPUS=2 FERRY_HOST=gpu-a start_daemon a
	sql_until "(SELECT count(*) = 1 FROM daemons WHERE capacity ? 'admits')" 10 || fail "the host's row"
	submit_refused "$(wf three <<'Y'
name: three
steps:
  - {name: small, command: ["true"], resources: {gpus: 1}}
  - {name: big, needs: [small], command: ["true"], resources: {gpus: 3}}
Y
)"
	assert_match "$BODY" 'three.yaml:4:5: step \\"big\\": resources ask for 3 GPUs and no host of the fleet that is up can ever give that \(gpu-a has 2 GPUs, 2 CPUs' \
		"file:line:col, the request and what each host has"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 0 "no run made"
	submit_refused "$(wf cpus <<'Y'
name: cpus
steps:
  - {name: wide, command: ["true"], resources: {cpus: 8}}
Y
)"
	assert_match "$BODY" 'resources ask for 0 GPUs, 8 CPUs and no host|resources ask for 8 CPUs and no host' "CPUs counted too"
	submit_refused "$(wf noq <<'Y'
name: noq
queue: nightly
steps:
  - {name: a, command: ["true"]}
Y
)"
	assert_match "$BODY" 'step \\"a\\": queue nightly does not exist \(queues: default\); an admin creates it with `ferry queues create nightly`' \
		"the workflow's queue names one that does not exist"
	# Slurm admits its own: a Slurm step's request is not this fleet's to refuse, nor to reserve
	id=$(submit "$(wf onslurm <<'Y'
name: onslurm
steps:
  - {name: big, executor: slurm, command: ["true"], resources: {gpus: 4}}
Y
)")
	wait_run "$id" failed 30 # no Slurm here: it cannot start, but it was admitted
	assert_eq "$(sql "SELECT coalesce(array_to_string(gpu_ids, ','), 'none') FROM attempts")" none "no GPU of this host reserved for it"
	sql "DELETE FROM attempts" >/dev/null
	id=$(submit "$(wf fits <<'Y'
name: fits
steps:
  - {name: two, command: ["true"], resources: {gpus: 2, cpus: 2}}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT array_to_string(gpu_ids, ',') FROM attempts")" "0,1" "a request that fits runs, with both GPUs"
}

# A high-priority run submitted behind 20 queued low-priority runs starts
# next: through its queue's priority and, in one queue, through its own.
test_queues_priority_run_starts_next() {
	start_daemon a FERRY_CPUS=1 FERRY_DEFAULT_CPUS=1
	sql "INSERT INTO queues (name, priority) VALUES ('urgent', 100)" >/dev/null
	id0=$(submit "$(wf hold <<Y
name: hold
steps:
  - {name: s, command: [sh, -c, 'while [ ! -e $FERRY_HOME/go ]; do sleep 0.05; done']}
Y
)")
	wait_step "$id0" s running 10
	f=$(wf low <<'Y'
name: low
steps:
  - {name: s, command: [sh, -c, 'sleep 0.1']}
Y
)
	for _ in $(seq 1 20); do submit "$f" >/dev/null; done
	hi=$(submit "$(wf high <<'Y'
name: high
queue: urgent
steps:
  - {name: s, command: [sh, -c, 'sleep 0.1']}
Y
)")
	mid=$(submit "$(wf mid <<'Y'
name: mid
priority: 5
steps:
  - {name: s, command: [sh, -c, 'sleep 0.1']}
Y
)")
	assert_eq "$(sql "SELECT count(*) FROM step_queue")" 22 "22 steps wait behind the one that holds the only CPU"
	touch "$FERRY_HOME/go"
	wait_run "$hi" succeeded 30
	wait_run "$mid" succeeded 30
	order=$(sql "SELECT string_agg(s.run_id::text, ' ' ORDER BY a.started_at, a.step_id) FROM attempts a JOIN steps s ON s.id = a.step_id")
	assert_eq "$(echo "$order" | cut -d' ' -f1-3)" "$id0 $hi $mid" \
		"the urgent queue's run next, then the priority 5 run, before any of the 20 (order: $order)"
	assert_eq "$(sql "SELECT queue FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $hi")" urgent "its attempt counted in its queue"
	sql_until "(SELECT count(*) = 23 FROM runs WHERE state = 'succeeded')" 60 || fail "the 20 low-priority runs end too"
	# one at a time: the host declared 1 CPU and every step asked for 1 (FERRY_DEFAULT_CPUS)
	assert_eq "$(sql "SELECT count(*) FROM attempts a, attempts b WHERE a.step_id < b.step_id AND a.started_at < b.finished_at AND b.started_at < a.finished_at")" 0 "no two ran at once"
}

# A queue's max_running holds over the fleet, and holds no other queue back.
test_queues_max_running_holds() {
	start_daemon a FERRY_CPUS=8
	sql "INSERT INTO queues (name, max_running) VALUES ('one', 1)" >/dev/null
	f=$(wf inone <<'Y'
name: inone
queue: one
steps:
  - {name: s, command: [sh, -c, 's=$(date +%s%N); sleep 0.7; echo "x $s $(date +%s%N)" > "$FERRY_OUTPUT_DIR/trace"']}
Y
)
	ids=""
	for _ in 1 2 3 4; do ids="$ids $(submit "$f")"; done
	other=$(submit "$(gpu_wf free 3 0.7 "cpus: 1")")
	for id in $ids $other; do wait_run "$id" succeeded 60; done
	assert_eq "$(for id in $ids; do traces "$id"; done | at_once)" "1 ok" "queue one's runs one at a time"
	# the default queue's three ran together meanwhile, each with its own trace (no GPU: an empty id)
	assert_eq "$(traces "$other" | awk '{print "g", $(NF-1), $NF}' | at_once | cut -d' ' -f1)" 3 "the default queue's steps ran at once"
}

# kill -9 of the daemon: the attempts it leaves running keep their GPUs
# (the claim counts the attempt rows, not the daemon's memory), nothing is
# given twice, and a GPU whose job died with the daemon is released when
# the attempt is found lost, then given to its retry.
test_queues_kill9_keeps_and_releases_gpus() {
	start_daemon a FERRY_GPUS=0,1 FERRY_CPUS=4
	id=$(submit "$(gpu_wf three 3 go)")
	sql_until "(SELECT count(*) = 2 FROM attempts WHERE state = 'running')" 20 || fail "two GPU steps start"
	assert_eq "$(sql "SELECT count(*) FROM step_queue")" 1 "the third waits for a GPU"
	stop_daemon a KILL
	start_daemon a FERRY_GPUS=0,1 FERRY_CPUS=4
	sleep 1
	assert_eq "$(sql "SELECT count(*) FROM step_queue")" 1 "after the restart the third still waits: both GPUs held by the adopted attempts"
	assert_eq "$(sql "SELECT string_agg(array_to_string(gpu_ids, ','), ' ' ORDER BY gpu_ids) FROM attempts WHERE state = 'running'")" "0 1" "held as before"
	touch "$FERRY_HOME/go"
	wait_run "$id" succeeded 30
	assert_eq "$(traces "$id" | at_once)" "2 ok" "never more than 2 at once, never a GPU twice"

	# the job dies with the daemon: its attempt is lost, its GPU released and given to the retry
	id=$(submit "$(wf lostgpu <<'Y'
name: lostgpu
steps:
  - name: v
    resources: {gpus: 2}
    retry: {limit: 1, backoff: 1s}
    command: [sh, -c, 'echo "$CUDA_VISIBLE_DEVICES" > "$FERRY_OUTPUT_DIR/gpus"; if [ "$FERRY_ATTEMPT" = 1 ]; then sleep 30; fi']
Y
)")
	wait_step "$id" v running 10
	sleep 0.3
	stop_daemon a KILL
	pid=$(sql "SELECT handle->>'pid' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")
	kill -9 -- -"$pid"
	start_daemon a FERRY_GPUS=0,1 FERRY_CPUS=4
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT string_agg(a.state || ':' || array_to_string(a.gpu_ids, ','), ' ' ORDER BY a.attempt) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")" \
		"lost:0,1 succeeded:0,1" "the lost attempt's GPUs given to its retry"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/v/2/out/gpus")" "0,1" "the retry saw both"
}

# A step that does not fit is passed over and a smaller one behind it starts
# (backfill), until it has waited past FERRY_QUEUE_STARVE_S: then its room
# is kept, nothing behind it starts, and it goes first when room frees.
test_queues_backfill_then_starving_step_keeps_its_room() {
	start_daemon a FERRY_GPUS=0,1 FERRY_CPUS=8 FERRY_QUEUE_STARVE_S=3
	one() { # NAME PRIORITY GPUS COMMAND
		wf "$1" <<Y
name: $1
priority: $2
steps:
  - {name: s, resources: {gpus: $3}, command: [sh, -c, '$4']}
Y
	}
	hold=$(submit "$(one hold 0 1 "while [ ! -e $FERRY_HOME/go ]; do sleep 0.05; done")")
	wait_step "$hold" s running 10
	big=$(submit "$(one big 10 2 true)")
	small=$(submit "$(one small 0 1 true)")
	wait_run "$small" succeeded 10
	assert_eq "$(step_col "$big" s state)" ready "the 2-GPU step still waits: 1 of 2 is free (the small one went around it)"
	sleep 3.5 # the big one is starving now
	late=$(submit "$(one late 0 1 true)")
	sleep 2
	assert_eq "$(step_col "$late" s state)" ready "a starving step keeps its room: the free GPU is not given to one behind it"
	touch "$FERRY_HOME/go"
	wait_run "$big" succeeded 20
	wait_run "$late" succeeded 20
	assert_eq "$(sql "SELECT string_agg(r.workflow_name, ' ' ORDER BY a.started_at) FROM attempts a JOIN steps s ON s.id = a.step_id JOIN runs r ON r.id = s.run_id")" \
		"hold small big late" "the order of the starts"
	assert_eq "$(sql "SELECT array_to_string(gpu_ids, ',') FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $big")" "0,1" "both GPUs to the big one"
}

# A fan-out's items ask what their fan-out's spec says: 4 items of 1 GPU on 2 GPUs, two at a time.
test_queues_foreach_items_ask_their_fanouts_request() {
	start_daemon a FERRY_GPUS=0,1 FERRY_CPUS=8
	id=$(submit "$(wf fan <<'Y'
name: fan
steps:
  - name: g
    foreach: {range: 4}
    resources: {gpus: 1}
    command: [sh, -c, 's=$(date +%s%N); sleep 0.5; echo "$CUDA_VISIBLE_DEVICES $s $(date +%s%N)" > "$FERRY_OUTPUT_DIR/trace"']
Y
)")
	wait_run "$id" succeeded 60
	assert_eq "$(cat "$FERRY_HOME/runs/$id"/g*/1/out/trace | wc -l)" 4 "every item ran"
	assert_eq "$(cat "$FERRY_HOME/runs/$id"/g*/1/out/trace | at_once)" "2 ok" "two at a time, each its own GPU"
}

# gang: true — a fan-out's items start all at once or not at all: 3 items of
# 1 GPU wait while only 2 GPUs are free (a lone 1-GPU step goes around
# them), and start together once 3 are.
test_queues_gang_starts_together_or_waits() {
	start_daemon a FERRY_GPUS=0,1,2,3 FERRY_CPUS=8
	hold=$(submit "$(wf hold <<Y
name: hold
steps:
  - {name: s, resources: {gpus: 2}, command: [sh, -c, 'while [ ! -e $FERRY_HOME/go ]; do sleep 0.05; done']}
Y
)")
	wait_step "$hold" s running 10
	gang=$(submit "$(wf gang <<'Y'
name: gang
steps:
  - name: g
    foreach: {range: 3}
    gang: true
    resources: {gpus: 1}
    command: [sh, -c, 's=$(date +%s%N); sleep 0.5; echo "$CUDA_VISIBLE_DEVICES $s $(date +%s%N)" > "$FERRY_OUTPUT_DIR/trace"']
Y
)")
	sql_until "(SELECT count(*) = 3 FROM step_queue WHERE gang IS NOT NULL)" 10 || fail "the gang's items are ready"
	solo=$(submit "$(wf solo <<'Y'
name: solo
steps:
  - {name: s, resources: {gpus: 1}, command: ["true"]}
Y
)")
	wait_run "$solo" succeeded 10
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $gang AND s.parent_id IS NOT NULL")" 0 \
		"no item of the gang started on 2 free GPUs (the lone step went around it)"
	touch "$FERRY_HOME/go"
	wait_run "$gang" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$gang"/g*/1/out/trace | at_once)" "3 ok" "the 3 ran at once, each on its own GPU"
	assert_eq "$(sql "SELECT count(DISTINCT a.started_at) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $gang AND s.parent_id IS NOT NULL")" 1 \
		"started by one claim (one transaction's time)"
}

# Memory is admitted like CPUs: two steps that each ask for 60% of the host's memory run one at a time.
test_queues_memory_admits_one_at_a_time() {
	start_daemon a FERRY_CPUS=8
	local mi
	# 60% of what the daemon detected (MemTotal, or a cgroup's memory.max where less)
	sql_until "(SELECT count(*) = 1 FROM daemons WHERE capacity ? 'admits')" 10 || fail "the host's row"
	mi=$(sql "SELECT floor((capacity ->> 'memory_bytes')::bigint * 0.6 / 1048576)::bigint FROM daemons")
	id=$(submit "$(gpu_wf mem 2 0.5 "memory: ${mi}Mi")")
	wait_run "$id" succeeded 30
	assert_eq "$(traces "$id" | awk '{print "m", $(NF-1), $NF}' | at_once | cut -d' ' -f1)" 1 "one at a time"
	assert_eq "$(sql "SELECT DISTINCT memory_mb FROM attempts")" "$mi" "each attempt held its memory"
}

# A named resource of the host (FERRY_RESOURCES=license=2) is admitted like a GPU count: five steps
# that each ask for one license run at most two at a time; a request for more than any host offers,
# or for a name no host offers, is refused at submit with the numbers.
test_queues_named_resource_admits_by_count() {
	start_daemon a FERRY_CPUS=8 FERRY_RESOURCES=license=2 FERRY_HOST=lic-a
	sql_until "(SELECT count(*) = 1 FROM daemons WHERE capacity ? 'admits')" 10 || fail "the host's row"
	id=$(submit "$(gpu_wf lic 5 0.4 "license: 1")")
	wait_run "$id" succeeded 60
	assert_eq "$(traces "$id" | awk '{print "l", $(NF-1), $NF}' | at_once | cut -d' ' -f1)" 2 "two at a time"
	assert_eq "$(sql "SELECT count(*) FROM attempts WHERE named = '{\"license\": 1}'")" 5 "each attempt held its license"
	gang=$(submit "$(wf lgang <<'Y'
name: lgang
steps:
  - {name: g, foreach: {range: 2}, gang: true, command: ["true"], resources: {license: 1}}
Y
)")
	wait_run "$gang" succeeded 30
	assert_eq "$(sql "SELECT count(*), count(DISTINCT a.started_at) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $gang AND s.parent_id IS NOT NULL AND a.named = '{\"license\": 1}'")" "2|1" \
		"a gang of two took both licenses in one claim"
	submit_refused "$(wf many <<'Y'
name: many
steps:
  - {name: three, command: ["true"], resources: {license: 3}}
Y
)"
	assert_match "$BODY" 'many.yaml:3:5: step \\"three\\": resources ask for license 3 and no host of the fleet that is up can ever give that \(lic-a has 8 CPUs, [0-9]+ MiB, license 2\)' \
		"the request and what the host offers"
	submit_refused "$(wf typo <<'Y'
name: typo
steps:
  - {name: one, command: ["true"], resources: {licence: 1}}
Y
)"
	assert_match "$BODY" 'resources ask for licence 1 and no host .*license 2' "a name no host offers: the names there are shown"
	assert_eq "$(sql "SELECT count(*) FROM runs")" 2 "no run made for either"
}

# Shared GPUs (gpus: {count: 1, shared: true}): with 2 GPUs taking 2 shared requests each
# (FERRY_GPU_SHARES=2), four shared steps run at once, two on each GPU; a step that wants a GPU
# of its own waits until one is free of them, and no GPU is ever both shared and its own.
test_queues_shared_gpus_and_one_of_its_own() {
	start_daemon a FERRY_CPUS=8 FERRY_GPUS=0,1 FERRY_GPU_SHARES=2
	shared=$(submit "$(gpu_wf shared 4 go "gpus: {count: 1, shared: true}")")
	sql_until "(SELECT count(*) = 4 FROM attempts WHERE state = 'running' AND gpu_shared)" 30 ||
		fail "four shared steps running at once: $(sql "SELECT count(*) FROM attempts WHERE state = 'running'")"
	assert_eq "$(sql "SELECT string_agg(g || ':' || n, ' ' ORDER BY g) FROM (SELECT g, count(*) AS n FROM attempts, unnest(gpu_ids) g WHERE state = 'running' GROUP BY g) x")" \
		"0:2 1:2" "two on each GPU"
	own=$(submit "$(gpu_wf own 1 0.2 "gpus: 1")")
	sleep 1.5
	assert_eq "$(sql "SELECT state FROM steps WHERE run_id = $own")" ready "the step of its own waits for a free GPU"
	touch "$FERRY_HOME/go"
	wait_run "$shared" succeeded 30
	wait_run "$own" succeeded 30
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $own AND NOT a.gpu_shared AND cardinality(a.gpu_ids) = 1")" 1 \
		"it ran on a GPU of its own"
	{ traces "$shared"; traces "$own"; } | python3 -c '
import sys
iv = [l.split() for l in sys.stdin if l.strip()]
own = iv[-1]
for g, s, e in iv[:-1]:
    if g == own[0] and int(s) < int(own[2]) and int(own[1]) < int(e):
        sys.exit("GPU %s shared while it was its own" % g)' || fail "a GPU both shared and its own"
}

# preemption (issue 30, item 5): on a host of 2 CPUs, a job of 2 CPUs that is
# not preemptible keeps them from a higher-priority step; one that says
# preemptible: true is stopped once that step has waited
# FERRY_PREEMPT_AFTER_S, the event names who took its room, the step runs,
# and the stopped one starts again (its try not counted) from its checkpoint
test_queues_preemptible_step_gives_way_and_resumes() {
	start_daemon a FERRY_CPUS=2 FERRY_PREEMPT_AFTER_S=1
	for p in false true; do
		wf "low-$p" >/dev/null <<Y
name: low-$p
priority: -5
steps:
  - name: s
    preemptible: $p
    resources: {cpus: 2}
    command: [sh, -c, 'echo "attempt \$FERRY_ATTEMPT" >>"\$FERRY_CHECKPOINT_DIR/progress"; trap "exit 143" TERM; while [ ! -e $FERRY_HOME/go-$p ]; do sleep 0.05; done']
Y
	done
	high=$(wf high <<'Y'
name: high
priority: 5
steps:
  - {name: s, resources: {cpus: 2}, command: [sh, -c, 'echo ran']}
Y
)
	# not preemptible: the high step waits past the bound, nothing is stopped
	hold=$(submit "$FERRY_HOME/low-false.yaml")
	wait_step "$hold" s running 20
	id=$(submit "$high")
	sleep 4 # two preempt rounds past FERRY_PREEMPT_AFTER_S
	assert_eq "$(step_col "$id" s state)" ready "the high step waits for a job that is not preemptible"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE kind = 'step.preempted'")" 0 "nothing preempted"
	touch "$FERRY_HOME/go-false"
	wait_run "$id" succeeded 30
	wait_run "$hold" succeeded 30
	# preemptible: stopped for the high step, which runs; then it starts again and ends
	low=$(submit "$FERRY_HOME/low-true.yaml")
	wait_step "$low" s running 20
	id=$(submit "$high")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT detail->>'by' FROM events WHERE run_id = $low AND kind = 'step.preempted'")" "run $id/s" \
		"the event names the step that took the room"
	assert_eq "$(sql "SELECT preempted_by FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $low AND a.attempt = 1")" "run $id/s" "its attempt says so"
	wait_step "$low" s running 30
	assert_eq "$(step_col "$low" s attempts)" 2 "started again"
	assert_eq "$(step_col "$low" s tries)" 1 "the preempted try is not counted"
	touch "$FERRY_HOME/go-true"
	wait_run "$low" succeeded 30
	assert_eq "$(tr '\n' ' ' <"$FERRY_HOME/runs/$low/s/checkpoint/progress")" "attempt 1 attempt 2 " \
		"both attempts wrote to one checkpoint directory"
	# its order: the low step ran, gave way, the high one ran, the low one again
	assert_eq "$(sql "SELECT string_agg(s.run_id || '/' || a.attempt, ' ' ORDER BY a.started_at) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id IN ($low, $id)")" \
		"$low/1 $id/1 $low/2" "who ran when"
}

# preemption across queues, for a GPU: a declared host of one GPU
# (FERRY_GPUS=0), a preemptible training of a lower-priority queue holds
# it; a step of the default queue asking for it takes it once it has
# waited, and sees exactly that GPU
test_queues_preempted_for_a_gpu_of_a_higher_queue() {
	start_daemon a FERRY_GPUS=0 FERRY_PREEMPT_AFTER_S=1
	sql "INSERT INTO queues (name, priority) VALUES ('nightly', -10)" >/dev/null
	low=$(submit "$(wf nightly <<Y
name: nightly
queue: nightly
steps:
  - {name: train, preemptible: true, resources: {gpus: 1}, command: [sh, -c, 'trap "exit 143" TERM; while [ ! -e $FERRY_HOME/go ]; do sleep 0.05; done']}
Y
)")
	wait_step "$low" train running 20
	id=$(submit "$(wf adhoc <<'Y'
name: adhoc
steps:
  - {name: eval, resources: {gpus: 1}, command: [sh, -c, 'echo "gpu $CUDA_VISIBLE_DEVICES"']}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(ferry logs "$id" eval | tail -1)" "gpu 0" "the GPU the preempted step held"
	assert_eq "$(sql "SELECT detail->>'by' || ' ' || (detail->>'queue') FROM events WHERE run_id = $low AND kind = 'step.preempted'")" \
		"run $id/eval default" "a queue of higher priority took it"
	wait_step "$low" train running 30
	touch "$FERRY_HOME/go"
	wait_run "$low" succeeded 30
	assert_eq "$(step_col "$low" train attempts)/$(step_col "$low" train tries)" 2/1 "started again, one try counted"
}

# preemption of a fan-out's items: two preemptible items of 1 CPU each on a
# host of 2 give way together to a step asking for both CPUs (their
# fan-out's preemptible: true), then run again and the fan-out succeeds
test_queues_preemptible_fanout_items_give_way_together() {
	start_daemon a FERRY_CPUS=2 FERRY_PREEMPT_AFTER_S=1
	low=$(submit "$(wf items <<Y
name: items
priority: -1
steps:
  - {name: each, foreach: {range: 2}, preemptible: true, resources: {cpus: 1}, command: [sh, -c, 'trap "exit 143" TERM; while [ ! -e $FERRY_HOME/go ]; do sleep 0.05; done']}
Y
)")
	sql_until "(SELECT count(*) FROM attempts WHERE state = 'running') = 2" 30 || fail "the two items did not start"
	id=$(submit "$(wf wide <<'Y'
name: wide
steps:
  - {name: s, resources: {cpus: 2}, command: [sh, -c, 'echo ran']}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $low AND kind = 'step.preempted' AND detail->>'by' = 'run $id/s'")" 2 \
		"both items gave way (one would not have been enough)"
	touch "$FERRY_HOME/go"
	wait_run "$low" succeeded 30
	assert_eq "$(sql "SELECT string_agg(attempts || '/' || tries, ' ' ORDER BY item_index) FROM steps WHERE run_id = $low AND parent_id IS NOT NULL")" \
		"2/1 2/1" "each item started again, its preempted try not counted"
}
