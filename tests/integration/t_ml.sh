# ML steps through a real daemon: outputs passed by reference, checkpoints
# kept across attempts, the step result cache, label steps (counting,
# webhook, continue with a payload, timeouts).

# count FILE: lines in FILE (0 when it does not exist)
count() { [ -f "$1" ] && wc -l <"$1" | tr -d ' ' || echo 0; }

test_outputs_by_reference() {
	start_daemon a
	f=$(wf refs <<'Y'
name: refs
steps:
  - name: make
    command: [sh, -c, 'echo weights >"$FERRY_OUTPUT_DIR/model.pkl"; echo "{\"n\": 3, \"tag\": \"v1\"}" >"$FERRY_OUTPUT_DIR/outputs.json"']
  - name: use
    needs: [make]
    command: [sh, -c, 'cat "$1"; echo "n=$2 tag=$3"', x, "{{steps.make.outputs.model}}", "{{ steps.make.outputs.n }}", "{{steps.make.outputs.tag}}"]
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	api GET "/api/v1/runs/$id"
	model=$(echo "$BODY" | json '[s for s in j["steps"] if s["name"]=="make"][0]["outputs"]["model"]')
	assert_eq "$model" "$FERRY_HOME/runs/$id/make/1/out/model.pkl" "a file in FERRY_OUTPUT_DIR is an output"
	assert_eq "$(echo "$BODY" | json '[s for s in j["steps"] if s["name"]=="make"][0]["outputs"]["n"]')" 3 "outputs.json"
	api GET "/api/v1/runs/$id/steps/use/logs"
	assert_eq "$(printf "%s" "$BODY" | tr '\n' ' ')" "weights n=3 tag=v1 " "rendered references"
}

# A "{{" that never closes is text, kept once beside a reference rendered in
# the same field (it was written twice: "x/{{a" became "x/x/{{a"). The
# parser refuses one in the YAML; a param's value brings it in.
test_unclosed_braces_beside_a_reference_kept_once() {
	start_daemon a
	f=$(wf braces <<'Y'
name: braces
params:
  p: {default: x}
steps:
  - name: make
    command: [sh, -c, 'echo "{\"tag\": \"v1\"}" >"$FERRY_OUTPUT_DIR/outputs.json"']
  - name: use
    needs: [make]
    command: [sh, -c, 'echo "$1 $TAG"', x, "{{steps.make.outputs.tag}}/{{params.p}}"]
    env: {TAG: "{{steps.make.outputs.tag}}-{{params.p}}"}
Y
)
	id=$(submit "$f" '{"p": "x/{{a"}')
	wait_run "$id" succeeded 20
	api GET "/api/v1/runs/$id/steps/use/logs"
	assert_eq "${BODY%$'\n'}" "v1/x/{{a v1-x/{{a" "the reference rendered, the value's braces once (argv and env)"
}

test_missing_output_fails_for_good() {
	start_daemon a
	f=$(wf missing <<'Y'
name: missing
steps:
  - {name: make, command: [true]}
  - name: use
    needs: [make]
    retry: {limit: 3, backoff: 100ms}
    command: [echo, "{{steps.make.outputs.model}}"]
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" use attempts)" 1 "not retried: the reference cannot resolve"
	assert_match "$(step_col "$id" use reason)" 'step make has no output "model"' "reason names it"
}

test_checkpoint_survives_retry() {
	start_daemon a
	f=$(wf ckpt <<'Y'
name: ckpt
steps:
  - name: train
    kind: train
    retry: {limit: 1, backoff: 100ms}
    command:
      - sh
      - -c
      - |
        if [ -f "$FERRY_CHECKPOINT_DIR/epoch" ]; then
          echo "resuming from epoch $(cat "$FERRY_CHECKPOINT_DIR/epoch")"; echo w >"$FERRY_OUTPUT_DIR/model.bin"
        else
          echo 3 >"$FERRY_CHECKPOINT_DIR/epoch"; echo "crashed after epoch 3"; exit 1
        fi
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(step_col "$id" train attempts)" 2 "one retry"
	api GET "/api/v1/runs/$id/steps/train/logs?attempt=2"
	assert_eq "$(printf %s "$BODY" | head -1)" "resuming from epoch 3" "the retry found the checkpoint"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/train/checkpoint/epoch")" 3 "one directory for all attempts"
}

test_step_cache_hit_and_no_cache() {
	start_daemon a
	export COUNTER="$FERRY_HOME/shared/counter"
	f=$(wf cached <<Y
name: cached
params:
  lr: {default: "0.1"}
steps:
  - name: prep
    command: [sh, -c, 'echo data >"\$FERRY_OUTPUT_DIR/data.csv"']
  - name: train
    kind: train
    needs: [prep]
    cache: true
    command: [sh, -c, 'echo run >>$COUNTER; cat "\$1" >"\$FERRY_OUTPUT_DIR/model.bin"; echo "{\"accuracy\": 0.5}" >"\$FERRY_OUTPUT_DIR/metrics.json"', x, "{{steps.prep.outputs.data}}", "{{params.lr}}"]
  - name: after
    needs: [train]
    command: [cat, "{{steps.train.outputs.model}}"]
Y
)
	id1=$(submit "$f")
	wait_run "$id1" succeeded 20
	assert_eq "$(count "$COUNTER")" 1 "first run trains"
	id2=$(submit "$f")
	wait_run "$id2" succeeded 20
	assert_eq "$(count "$COUNTER")" 1 "second run: train comes from cache (prep's output path differs, its content does not)"
	api GET "/api/v1/runs/$id2"
	train=$(echo "$BODY" | json '[s for s in j["steps"] if s["name"]=="train"][0]')
	assert_eq "$(echo "$train" | json 'j["cached"]')" true "the run view says so"
	assert_eq "$(echo "$train" | json 'j["cached_from"]["run"]')" "$id1" "and where from"
	assert_eq "$(echo "$train" | json 'j["outputs"]["model"]')" "$FERRY_HOME/runs/$id1/train/1/out/model.bin" "with that attempt's outputs"
	assert_eq "$(echo "$BODY" | json 'j["metrics"]["train"]["accuracy"]')" 0.5 "and metrics"
	api GET "/api/v1/runs/$id2/steps/after/logs"
	assert_eq "$(printf %s "$BODY" | head -1)" data "downstream reads the cached artifact"
	# another param value: another key
	id3=$(submit "$f" '{"lr": "0.2"}')
	wait_run "$id3" succeeded 20
	assert_eq "$(count "$COUNTER")" 2 "a changed param misses"
	# retry --from train: from cache, unless no_cache
	api POST "/api/v1/runs/$id2/retry" '{"from": "train"}'
	assert_eq "$CODE" 200 "retry"
	wait_run "$id2" succeeded 20
	assert_eq "$(count "$COUNTER")" 2 "retry --from takes the cache"
	ferry retry "$id2" --from train --no-cache >/dev/null
	wait_run "$id2" succeeded 20
	assert_eq "$(count "$COUNTER")" 3 "retry --no-cache runs it"
	assert_eq "$(step_col "$id2" train 'cached_from IS NULL')" t "not from cache"
	ferry retry "$id2" --from train >/dev/null
	wait_run "$id2" succeeded 20
	assert_match "$(ferry get "$id2")" "train +succeeded .*from cache \\(run $id2\\)" "ferry get says where from"
	id4=$(ferry submit "$f" --no-cache)
	wait_run "$id4" succeeded 20
	assert_eq "$(count "$COUNTER")" 4 "submit --no-cache runs it"
	api POST "/api/v1/runs/$id2/retry" '{"from": "train", "no_cache": "yes"}'
	assert_eq "$CODE" 400 "no_cache must be a boolean"
	assert_match "$BODY" '"no_cache"' "names the field"
	# cache: false (the default) never hits
	assert_eq "$(sql "SELECT count(*) FROM step_cache WHERE step = 'prep'")" 0 "uncached steps are not kept"
}

# A dataset of 5 items, 2 labelled.
make_dataset() {
	mkdir -p "$1/sub"
	for i in 1 2 3; do echo "img $i" >"$1/img$i.txt"; done
	echo x >"$1/sub/img4.txt"; echo y >"$1/sub/img5.txt"; echo hidden >"$1/.hidden"
	printf 'file,label\nimg1.txt,7\nsub/img4.txt,3\n' >"$1/labels.csv"
}

test_label_waits_and_continues() {
	start_daemon a
	make_dataset "$FERRY_HOME/ds"
	f=$(wf label <<Y
name: labelled
steps:
  - name: label
    kind: label
    dataset: $FERRY_HOME/ds
  - name: train
    kind: train
    needs: [label]
    command: [echo, "labels at {{steps.label.outputs.labels}} by {{steps.label.outputs.by}}"]
Y
)
	id=$(submit "$f")
	wait_step "$id" label waiting 10
	api GET "/api/v1/runs/$id"
	out=$(echo "$BODY" | json '[s for s in j["steps"] if s["name"]=="label"][0]["outputs"]')
	assert_eq "$(echo "$out" | json 'j["items"]')" 5 "items: files less hidden ones and the labels file"
	assert_eq "$(echo "$out" | json 'j["unlabelled"]')" 3 "unlabelled"
	assert_eq "$(echo "$out" | json 'j["dataset"]')" "$FERRY_HOME/ds" "dataset"
	api GET "/api/v1/runs/$id/steps/label/logs"
	assert_match "$BODY" "3 of 5 items" "the log tells the person what to do"
	assert_eq "$(step_col "$id" train state)" blocked "train waits"
	api POST "/api/v1/runs/$id/steps/label/continue" '{"data": {"labels": "/data/full.csv", "by": "ann"}}'
	assert_eq "$CODE" 200 "continue"
	wait_run "$id" succeeded 20
	api GET "/api/v1/runs/$id/steps/train/logs"
	assert_eq "$(printf %s "$BODY" | head -1)" "labels at /data/full.csv by ann" "the payload is the step's output"
	assert_eq "$(step_col "$id" label "outputs->>'items'")" 5 "merged over the task"
	assert_eq "$(sql "SELECT actor FROM events WHERE run_id = $id AND kind = 'step.continued'")" "admin (as tester)" "who continued it"
	api POST "/api/v1/runs/$id/steps/label/continue" '{}'
	assert_eq "$CODE" 409 "continue twice"
}

# start_hook: a labelling service on a free port (HOOK_PORT) that answers the
# first POST with 500 and later ones with {"task_id": 42}; bodies go to
# $FERRY_HOME/posts.
start_hook() {
	cat >"$FERRY_HOME/hook.py" <<'P'
import http.server, json, os, sys
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global n
        n += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        open(sys.argv[2], "ab").write(self.path.encode() + b" " + body + b"\n")
        code = 500 if n == 1 else 200
        self.send_response(code); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(json.dumps({"task_id": 42}).encode())
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)  # a free port, written where the test reads it
open(sys.argv[1] + ".tmp", "w").write("%d\n" % s.server_address[1])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
P
	rm -f "$FERRY_HOME/hook.port"
	python3 "$FERRY_HOME/hook.py" "$FERRY_HOME/hook.port" "$FERRY_HOME/posts" &
	echo $! >"$FERRY_HOME/daemon.hook.pid"
	for _ in $(seq 1 50); do
		if [ -s "$FERRY_HOME/hook.port" ]; then
			HOOK_PORT=$(cat "$FERRY_HOME/hook.port")
			curl -s -o /dev/null "http://127.0.0.1:$HOOK_PORT/" && return 0
		fi
		sleep 0.1
	done
	fail "the labelling service did not start"
}

test_label_webhook_retried() {
	start_daemon a
	make_dataset "$FERRY_HOME/ds"
	start_hook
	hport=$HOOK_PORT
	f=$(wf hook <<Y
name: hooked
steps:
  - name: label
    kind: label
    dataset: $FERRY_HOME/ds
    webhook: http://127.0.0.1:$hport/tasks
Y
)
	id=$(submit "$f")
	wait_step "$id" label waiting 20
	assert_eq "$(count "$FERRY_HOME/posts")" 2 "a 500 is retried"
	post=$(tail -1 "$FERRY_HOME/posts" | cut -d' ' -f2-)
	assert_eq "$(tail -1 "$FERRY_HOME/posts" | cut -d' ' -f1)" /tasks "to the workflow's URL"
	assert_eq "$(echo "$post" | json 'j["unlabelled"]')" 3 "the task"
	assert_eq "$(echo "$post" | json 'j["continue"]')" "/api/v1/runs/$id/steps/label/continue" "how to continue it"
	assert_eq "$(step_col "$id" label "outputs->'task'->>'task_id'")" 42 "the hook's answer is kept"
}

# FERRY_LABEL_WEBHOOK: the daemon's labelling service for label steps that name none
test_label_webhook_from_config() {
	start_hook
	hport=$HOOK_PORT
	start_daemon a FERRY_LABEL_WEBHOOK="http://127.0.0.1:$hport/default"
	make_dataset "$FERRY_HOME/ds"
	f=$(wf hook <<Y
name: hooked
steps:
  - {name: label, kind: label, dataset: $FERRY_HOME/ds}
  - {name: own, kind: label, dataset: $FERRY_HOME/ds, webhook: "http://127.0.0.1:$hport/own", needs: [label]}
Y
)
	id=$(submit "$f")
	wait_step "$id" label waiting 20
	assert_eq "$(tail -1 "$FERRY_HOME/posts" | cut -d' ' -f1)" /default "posted to the configured URL"
	api POST "/api/v1/runs/$id/steps/label/continue" '{}'
	wait_step "$id" own waiting 20
	assert_eq "$(tail -1 "$FERRY_HOME/posts" | cut -d' ' -f1)" /own "a workflow's webhook wins"
	stop_daemon a
	set +e
	FERRY_LABEL_WEBHOOK=ftp://x ferryd >"$FERRY_HOME/bad.log" 2>&1
	rc=$?
	set -e
	[ "$rc" != 0 ] || fail "a bad FERRY_LABEL_WEBHOOK is refused"
	assert_match "$(cat "$FERRY_HOME/bad.log")" 'FERRY_LABEL_WEBHOOK "ftp://x" must be an http:// or https:// URL' "and says why"
}

test_label_timeout() {
	start_daemon a
	make_dataset "$FERRY_HOME/ds"
	f=$(wf lt <<Y
name: lt
steps:
  - {name: soft, kind: label, dataset: $FERRY_HOME/ds, timeout: 1s, on_timeout: continue}
  - {name: hard, kind: label, dataset: $FERRY_HOME/ds, timeout: 1s}
  - {name: after_soft, needs: [soft], command: [true]}
  - {name: after_hard, needs: [hard], command: [true]}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" soft state)" succeeded "on_timeout: continue"
	assert_eq "$(step_col "$id" soft "outputs->>'timed_out'")" true "says it timed out"
	assert_eq "$(step_col "$id" after_soft state)" succeeded "and the run goes on"
	assert_eq "$(step_col "$id" hard state)" failed "on_timeout: fail (the default)"
	assert_match "$(step_col "$id" hard reason)" "no one continued it within 1 s" "reason"
	assert_eq "$(step_col "$id" after_hard state)" skipped "downstream skipped"
}

test_metric_gates() {
	start_daemon a
	f=$(wf gates <<'Y'
name: gates
params:
  acc: {default: "0.95"}
steps:
  - name: evaluate
    kind: evaluate
    retry: {limit: 2, backoff: 100ms}
    command: [sh, -c, 'echo "{\"accuracy\": {{params.acc}}, \"f1\": 0.9, \"rmse\": 2.5, \"epochs\": 7}" >"$FERRY_OUTPUT_DIR/metrics.json"']
    gate: {accuracy: ">= 0.9", rmse: "< 3.5"}
  - {name: ship, needs: [evaluate], command: [true]}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 20
	api GET "/api/v1/runs/$id"
	assert_eq "$(echo "$BODY" | json 'j["metrics"]["evaluate"]["epochs"]')" 7.0 "other numeric metrics are kept"
	ev=$(echo "$BODY" | json '[s for s in j["steps"] if s["name"]=="evaluate"][0]')
	assert_eq "$(echo "$ev" | json '[g["passed"] for g in j["gate"]]')" "[true, true]" "gate results stored"
	out=$(ferry get "$id")
	assert_match "$out" "evaluate +accuracy=0.95 f1=0.9 rmse=2.5 epochs=7" "ferry get shows metrics, known ones first"
	assert_match "$out" "accuracy 0.95 >= 0.9" "and gate results"
	id=$(submit "$f" '{"acc": "0.82"}')
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" evaluate reason)" "gate failed: accuracy 0.82 < 0.9" "the reason shows the numbers"
	assert_eq "$(step_col "$id" evaluate attempts)" 1 "a failed gate is not retried"
	assert_eq "$(step_col "$id" ship state)" skipped "what depends on it is skipped"
	assert_eq "$(step_col "$id" evaluate "metrics->>'accuracy'")" 0.82 "metrics kept on the failed step"
}

test_malformed_metrics_fail_the_step() {
	start_daemon a
	f=$(wf badm <<'Y'
name: badm
params:
  m: {default: "{}"}
steps:
  - name: evaluate
    kind: evaluate
    retry: {limit: 2, backoff: 100ms}
    command: [sh, -c, 'printf "%s" "$1" >"$FERRY_OUTPUT_DIR/metrics.json"', x, "{{params.m}}"]
    gate: {accuracy: ">= 0.5"}
  - {name: ship, needs: [evaluate], command: [true]}
Y
)
	id=$(submit "$f" '{"m": "{\"accuracy\": 1.7}"}')
	wait_run "$id" failed 20
	assert_eq "$(step_col "$id" evaluate reason)" 'metrics.json: "accuracy" is 1.7; accuracy is between 0 and 1' "range"
	assert_eq "$(step_col "$id" evaluate attempts)" 1 "not retried"
	assert_eq "$(step_col "$id" ship state)" skipped "nothing downstream runs"
	id=$(submit "$f" '{"m": "{\"accuracy\": 0.9,"}')
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" evaluate reason)" '^metrics.json: invalid JSON at line 1' "invalid JSON"
	id=$(submit "$f" '{"m": "{\"f1\": 0.9}"}')
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" evaluate reason)" 'accuracy missing from metrics.json' "a gated metric must be there"
	assert_eq "$(sql "SELECT count(*) FROM runs WHERE metrics IS NOT NULL AND id = $id")" 1 "what was valid is kept"
}

test_gate_first_step_and_gate_timeout() {
	start_daemon a
	f=$(wf g1 <<'Y'
name: g1
steps:
  - {name: approve, kind: gate, timeout: 1s, on_timeout: continue}
  - {name: ship, needs: [approve], command: [true]}
Y
)
	id=$(submit "$f")
	assert_eq "$(sql "SELECT state FROM runs WHERE id = $id")" running "a run that starts at a gate is running, not pending"
	wait_run "$id" succeeded 20
	assert_eq "$(step_col "$id" approve "outputs->>'timed_out'")" true "the gate's timeout continued it"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'step.timed_out'")" 1 "event"
}

# A labelling service that never answers holds one worker, once: on 058d658
# each label step's webhook took a worker for 3 x 5 s, and four of them
# delayed an unrelated register step by 30 s. Now a call has an 8 s budget
# for all its tries, and the pool runs one call per service at a time
# (workers.h lanes): the register finishes while the calls wait their turn.
test_label_webhook_silent_holds_one_worker() {
	python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(64)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
conns = []
while True:
    c, _ = s.accept(); conns.append(c)  # accepted, never answered
' "$FERRY_HOME/silent.port" &
	echo $! >"$FERRY_HOME/daemon.silent.pid"
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/silent.port" ] && break; sleep 0.1; done
	start_daemon a
	make_dataset "$FERRY_HOME/ds"
	f=$(wf silent <<Y
name: silent
steps:
$(for i in 1 2 3 4; do printf '  - {name: l%d, kind: label, dataset: %s, webhook: "http://127.0.0.1:%s/t%d"}\n' "$i" "$FERRY_HOME/ds" "$(cat "$FERRY_HOME/silent.port")" "$i"; done)
Y
)
	id=$(submit "$f")
	sleep 1 # the label steps are on the workers
	g=$(wf reg <<'Y'
name: reg
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo w >"$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: quiet}
Y
)
	start=$SECONDS
	id2=$(submit "$g")
	wait_run "$id2" succeeded 20
	took=$((SECONDS - start))
	echo "register beside four silent webhooks: ${took}s"
	[ "$took" -le 6 ] || fail "the register waited ${took}s behind the webhooks"
	# and each call gave up within its budget, one at a time: the first fails by about 8 s
	sql_until "(SELECT count(*) FROM steps WHERE run_id = $id AND state = 'failed') >= 1" 12 ||
		fail "no call ended within its budget"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND state = 'failed'")" 1 "one at a time"
	assert_match "$(sql "SELECT string_agg(coalesce(reason, ''), ' | ') FROM steps WHERE run_id = $id AND state = 'failed'")" \
		"budget is spent|timed out|Timeout" "a call ends within its budget"
	kill "$(cat "$FERRY_HOME/daemon.silent.pid")" # the calls still queued fail at once: a quick stop
}
