# Queues and admission (issue 30) on the local executor: a host declared
# with 2 CPUs and 2 GPU ids (FERRY_CPUS, FERRY_GPUS: a declared list, no
# device is simulated) admits a step only when its request fits, gives each
# GPU step its own GPUs (CUDA_VISIBLE_DEVICES), refuses at submit what no
# host can ever fit, orders by queue and priority, holds a queue's
# max_running, and keeps what a dead daemon's attempts hold until they end.

# gpu_wf NAME N [SLEEP]: N steps each asking for 1 GPU, each writing "GPU START END" (ns) to its out/trace
gpu_wf() {
	local name=$1 n=$2 sl=${3:-1}
	{
		echo "name: $name"
		echo "steps:"
		for i in $(seq 1 "$n"); do
			echo "  - name: g$i"
			echo "    resources: {gpus: 1}"
			echo "    command: [sh, -c, 's=\$(date +%s%N); sleep $sl; echo \"\$CUDA_VISIBLE_DEVICES \$s \$(date +%s%N)\" > \"\$FERRY_OUTPUT_DIR/trace\"']"
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
	# Slurm admits its own: a Slurm step's request is not this fleet's to refuse
	id=$(submit "$(wf fits <<'Y'
name: fits
steps:
  - {name: two, command: ["true"], resources: {gpus: 2, cpus: 2}}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT array_to_string(gpu_ids, ',') FROM attempts")" "0,1" "a request that fits runs, with both GPUs"
}
