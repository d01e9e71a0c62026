# Files a job leaves are hostile input (lib/jobfile.h). A job can put a FIFO
# where Ferry reads metrics.json, outputs.json, its status or its log; a
# link to a secret; a sparse file of 200 MB. Each must fail that step with
# a clear reason (or be refused to the API caller), never hang the engine
# or an API worker, never be read through a link, and never be read whole
# before its limit is checked. Each test failed on 058d658: the FIFO ones
# with the engine or the API workers blocked in open(), the link ones by
# reading the link's target, the sparse one by reading 200 MB.

# a secret outside every run: what a link from a job's directory points at
jobfiles_secret() {
	printf 'root:$6$s3cr3t-hash:19000::::::\n' >"$FERRY_HOME/shadow"
	chmod 600 "$FERRY_HOME/shadow"
	echo "$FERRY_HOME/shadow"
}

# a run of one quick step, to show the engine still dispatches
quick_run() {
	submit "$(wf quick <<'Y'
name: quick
steps:
  - {name: s, command: [sh, -c, 'echo quick']}
Y
)"
}

test_jobfile_fifo_metrics_and_outputs_fail_the_step_not_the_engine() {
	start_daemon a
	f=$(wf fifos <<'Y'
name: fifos
steps:
  - {name: metrics, command: [sh, -c, 'mkfifo "$FERRY_OUTPUT_DIR/metrics.json"']}
  - {name: outputs, command: [sh, -c, 'mkfifo "$FERRY_OUTPUT_DIR/outputs.json"']}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" metrics reason)" "out/metrics.json is a FIFO; Ferry reads only regular files" "metrics"
	assert_eq "$(step_col "$id" outputs reason)" "out/outputs.json is a FIFO; Ferry reads only regular files" "outputs"
	assert_eq "$(step_col "$id" metrics attempts)" 1 "refused for good: no retry"
	q=$(quick_run)
	wait_run "$q" succeeded 30
}

test_jobfile_sparse_metrics_refused_unread() {
	start_daemon a
	f=$(wf sparse <<'Y'
name: sparse
steps:
  - {name: s, command: [sh, -c, 'truncate -s 200M "$FERRY_OUTPUT_DIR/metrics.json"']}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	# refused before reading: the daemon never held the 200 MB
	hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$(daemon_pid a)/status")
	[ "$hwm" -lt 102400 ] || fail "ferryd's peak memory is $hwm kB: the file was read"
	assert_eq "$(step_col "$id" s reason)" "out/metrics.json is 209715200 bytes; the limit is 1048576 bytes" "refused from its size"
}

test_jobfile_links_not_followed() {
	start_daemon a
	secret=$(jobfiles_secret)
	echo '{"accuracy": 0.99}' >"$FERRY_HOME/elsewhere.json"
	f=$(wf links <<Y
name: links
steps:
  - {name: metrics, command: [sh, -c, 'ln -s $FERRY_HOME/elsewhere.json "\$FERRY_OUTPUT_DIR/metrics.json"']}
  - {name: outdir, command: [sh, -c, 'rmdir "\$FERRY_OUTPUT_DIR" && ln -s $(dirname "$secret") "\$FERRY_OUTPUT_DIR"']}
  - {name: loglink, command: [sh, -c, 'echo the job ran; ln -sf $secret "\$FERRY_ATTEMPT_DIR/log"; exit 3']}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	assert_match "$(step_col "$id" metrics reason)" "^out/metrics.json is a symbolic link" "metrics.json through a link"
	assert_match "$(step_col "$id" outdir reason)" "^out \\(FERRY_OUTPUT_DIR\\) is not a directory" "out/ replaced by a link"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND outputs::text LIKE '%shadow%'")" 0 "no file behind the link became an output"
	# the failed step's reason is the log's last line: never the secret's
	assert_eq "$(step_col "$id" loglink reason)" "exit code 3" "the reason"
	api GET "/api/v1/runs/$id/steps/loglink/logs"
	assert_eq "$CODE" 409 "the log behind a link: $BODY"
	assert_match "$BODY" '"log_unreadable"' "the code"
	case $BODY in *s3cr3t*) fail "the secret was served: $BODY" ;; esac
	api GET "/api/v1/runs/$id/steps/loglink/logs?follow=1"
	assert_eq "$CODE" 409 "followed"
	case $(sql "SELECT string_agg(coalesce(reason, ''), ' ') FROM steps WHERE run_id = $id") in
	*s3cr3t*) fail "a secret in a reason" ;;
	esac
}

# A FIFO in place of the log held every API worker in open(); with the
# status file a FIFO the engine's read of it hung. Both answered now.
test_jobfile_fifo_log_and_status_hang_nothing() {
	start_daemon a
	f=$(wf fifolog <<'Y'
name: fifolog
steps:
  - {name: log, command: [sh, -c, 'rm "$FERRY_ATTEMPT_DIR/log" && mkfifo "$FERRY_ATTEMPT_DIR/log" && touch "$FERRY_ATTEMPT_DIR/ready" && sleep 300']}
  - {name: status, command: [sh, -c, 'rm "$FERRY_ATTEMPT_DIR/status" && mkfifo "$FERRY_ATTEMPT_DIR/status"']}
Y
)
	id=$(submit "$f")
	for _ in $(seq 1 100); do
		[ -e "$FERRY_HOME/runs/$id/log/1/ready" ] && break
		sleep 0.1
	done
	[ -e "$FERRY_HOME/runs/$id/log/1/ready" ] || fail "the step never made its FIFO"
	# more requests than the API has database workers, all at once
	local pids=()
	for i in 1 2 3 4 5 6; do
		curl -s -o /dev/null -m 10 -w '%{http_code}\n' -H "Authorization: Bearer $FERRY_API_TOKEN" \
			"$FERRY_URL/api/v1/runs/$id/steps/log/logs" >"$FERRY_HOME/code.$i" &
		pids+=($!)
	done
	wait "${pids[@]}"
	for i in 1 2 3 4 5 6; do
		assert_eq "$(cat "$FERRY_HOME/code.$i")" 409 "request $i answered at once"
	done
	api GET /api/v1/runs
	assert_eq "$CODE" 200 "the API serves"
	# the status step ended; the engine read its FIFO without waiting and dispatches on
	wait_step "$id" status failed 30
	q=$(quick_run)
	wait_run "$q" succeeded 30
	api POST "/api/v1/runs/$id/stop"
	wait_run "$id" stopped 30
}
