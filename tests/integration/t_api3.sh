# API, third part: the cache of finished runs behind GET /runs/{id}
# (api/runcache.c), never stale after a retry, whether the retry came through
# this daemon, the CLI or the database itself (NOTIFY ferry_run), and not
# while its listener connection is down; HEAD, answered like GET without a
# body; followed logs that do not hold the API's workers.

# cache_metric NAME: the value of ferry_api_run_cache_NAME in /metrics.
cache_metric() {
	curl -fsS "$FERRY_URL/metrics" | sed -n "s/^ferry_api_run_cache_$1 //p"
}

# run_state ID: the state GET /runs/ID answers (through the cache when it holds it).
run_state() {
	api GET "/api/v1/runs/$1"
	[ "$CODE" = 200 ] || fail "GET /runs/$1 answered $CODE: $BODY"
	echo "$BODY" | json 'j["state"]'
}

# wait_cache_enabled: the listener has its LISTEN in place (at most 10 s).
wait_cache_enabled() {
	for _ in $(seq 1 100); do
		[ "$(cache_metric enabled)" = 1 ] && return 0
		sleep 0.1
	done
	fail "the run cache never got its listener connected"
}

# A workflow whose one step fails at once until $FERRY_HOME/ok exists, then
# succeeds after 2 s (so a retried run is seen unfinished for a while).
cache_wf() {
	wf flip <<Y
name: flip
steps:
  - {name: a, command: [sh, -c, 'test -e $FERRY_HOME/ok && sleep 2']}
Y
}

test_run_cache_retry_not_stale() {
	start_daemon a
	wait_cache_enabled
	id=$(submit "$(cache_wf)")
	wait_run "$id" failed 30
	hits0=$(cache_metric hits_total)
	assert_eq "$(run_state "$id")" failed "first read"
	assert_eq "$(run_state "$id")" failed "second read"
	hits1=$(cache_metric hits_total)
	[ "$hits1" -gt "$hits0" ] || fail "the second read was not a cache hit ($hits0 -> $hits1)"
	[ "$(cache_metric entries)" -ge 1 ] || fail "nothing cached"

	# POST retry: the very next GET shows the retried run
	touch "$FERRY_HOME/ok"
	api POST "/api/v1/runs/$id/retry" '{}'
	assert_eq "$CODE" 200 "retry"
	s=$(run_state "$id")
	[ "$s" != failed ] || fail "GET right after POST retry still says failed (stale cache)"
	wait_run "$id" succeeded 30
	assert_eq "$(run_state "$id")" succeeded "after the retry"
	assert_eq "$(run_state "$id")" succeeded "cached again"

	# ferry retry --from (the CLI): same
	ferry retry "$id" --from a >/dev/null || fail "ferry retry --from a"
	s=$(run_state "$id")
	[ "$s" != succeeded ] || fail "GET right after ferry retry still says succeeded (stale cache)"
	wait_run "$id" succeeded 30
	assert_eq "$(run_state "$id")" succeeded "after the CLI retry"
	assert_eq "$(run_state "$id")" succeeded "cached again"

	# a retry this daemon did not see (another replica, psql): NOTIFY ferry_run drops it
	sql "SELECT ferry_retry($id, 'a', 'elsewhere', false)" >/dev/null
	for _ in $(seq 1 20); do
		s=$(run_state "$id")
		[ "$s" != succeeded ] && break
		sleep 0.1
	done
	[ "$s" != succeeded ] || fail "a retry committed in the database was not seen in 2 s (stale cache)"
	wait_run "$id" succeeded 30
	[ "$(cache_metric invalidations_total)" -ge 3 ] || fail "invalidations not counted"

	# running runs are never cached (the step runs until told to end, so the
	# run is still running when read, however slow the machine)
	f=$(wf slow <<Y
name: slow
steps:
  - {name: s, command: [sh, -c, "while [ ! -e '$FERRY_HOME/go' ]; do sleep 0.1; done"]}
Y
)
	id2=$(submit "$f")
	wait_run "$id2" running 10
	assert_eq "$(run_state "$id2")" running "a running run"
	assert_eq "$(run_state "$id2")" running "a running run, read again"
	touch "$FERRY_HOME/go"
	wait_run "$id2" succeeded 30
	assert_eq "$(run_state "$id2")" succeeded "read after it finished"
}

test_run_cache_listener_reconnect() {
	start_daemon a
	wait_cache_enabled
	touch "$FERRY_HOME/ok"
	id=$(submit "$(cache_wf)")
	wait_run "$id" succeeded 30
	assert_eq "$(run_state "$id")" succeeded "first read"
	assert_eq "$(run_state "$id")" succeeded "second read (cached)"
	flushes0=$(cache_metric flushes_total)

	# kill the listener's connection, then retry in the database at once:
	# the notification has nowhere to go, so the cache must have been dropped
	n=$(sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'ferryd-run-cache' AND datname = current_database()")
	assert_eq "$n" 1 "one listener connection terminated"
	sql "SELECT ferry_retry($id, 'a', 'elsewhere', false)" >/dev/null
	for _ in $(seq 1 20); do
		s=$(run_state "$id")
		[ "$s" != succeeded ] && break
		sleep 0.1
	done
	[ "$s" != succeeded ] || fail "stale JSON served after the listener connection was killed"
	wait_run "$id" succeeded 30
	[ "$(cache_metric flushes_total)" -gt "$flushes0" ] || fail "the cache was not flushed on disconnect"
	grep -q "run cache: listener connection lost" "$FERRY_HOME/ferryd-a.log" || fail "no log line about the lost listener"

	# it reconnects by itself, and caching (and invalidation) work again
	wait_cache_enabled
	hits0=$(cache_metric hits_total)
	assert_eq "$(run_state "$id")" succeeded "read after reconnecting"
	assert_eq "$(run_state "$id")" succeeded "read again"
	[ "$(cache_metric hits_total)" -gt "$hits0" ] || fail "no cache hits after the reconnect"
	sql "SELECT ferry_retry($id, 'a', 'elsewhere', false)" >/dev/null
	for _ in $(seq 1 20); do
		s=$(run_state "$id")
		[ "$s" != succeeded ] && break
		sleep 0.1
	done
	[ "$s" != succeeded ] || fail "stale JSON served after the listener reconnected"
	wait_run "$id" succeeded 30
}

test_run_cache_off() {
	start_daemon a FERRY_API_RUN_CACHE_MB=0
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
	assert_eq "$(run_state "$id")" succeeded "read"
	[ -z "$(cache_metric hits_total)" ] || fail "cache metrics with the cache off"
	! sql "SELECT 1 FROM pg_stat_activity WHERE application_name = 'ferryd-run-cache' AND datname = current_database()" | grep -q 1 ||
		fail "a listener connection with the cache off"
}

test_api_head() {
	start_daemon a
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
	for path in "/api/v1/runs/$id" "/api/v1/runs/$id" /api/v1/runs /api/v1/workflows "/api/v1/runs/$id/events"; do
		curl -sS -o "$FERRY_HOME/get.body" -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL$path"
		out=$(curl -sS -I -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL$path" | tr -d '\r')
		assert_match "$out" '^HTTP/1.1 200' "HEAD $path status"
		assert_match "$out" '^Content-Type: application/json' "HEAD $path type"
		len=$(echo "$out" | sed -n 's/^Content-Length: //Ip')
		assert_eq "$len" "$(wc -c <"$FERRY_HOME/get.body")" "HEAD $path length of the GET body"
	done
	# no body goes out: the next reply on the same connection parses cleanly
	out=$(curl -sS -I -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id" \
		-H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/healthz" | tr -d '\r' | grep -c '^HTTP/1.1 200')
	assert_eq "$out" 2 "two HEADs on one connection"
	code=$(curl -s -o /dev/null -w '%{http_code}' -I "$FERRY_URL/healthz")
	assert_eq "$code" 200 "HEAD healthz"
	code=$(curl -s -o /dev/null -w '%{http_code}' -I "$FERRY_URL/api/v1/runs/$id")
	assert_eq "$code" 401 "HEAD needs the token like GET"
	code=$(curl -s -o /dev/null -w '%{http_code}' -I -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/999999")
	assert_eq "$code" 404 "HEAD of an unknown run"
	hdr=$(curl -sS -I -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id/steps/greet/logs?follow=1" | tr -d '\r')
	assert_match "$hdr" '^HTTP/1.1 200' "HEAD of a log (follow ignored)"
	# HEAD where only POST is routed: 405, and Allow lists HEAD only with GET
	hdr=$(curl -sS -I -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id/retry" | tr -d '\r')
	assert_match "$hdr" '^HTTP/1.1 405' "HEAD of a POST route"
	assert_eq "$(echo "$hdr" | sed -n 's/^Allow: //Ip')" POST "Allow of a POST route"
	hdr=$(curl -sS -D - -o /dev/null -X DELETE -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id/events" | tr -d '\r')
	assert_match "$hdr" '^HTTP/1.1 405' "DELETE of a GET route"
	assert_eq "$(echo "$hdr" | sed -n 's/^Allow: //Ip')" "GET, HEAD" "Allow of a GET route"
	hdr=$(curl -sS -D - -o /dev/null -X PUT -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id" | tr -d '\r')
	assert_match "$hdr" '^HTTP/1.1 405' "PUT of a run"
	assert_eq "$(echo "$hdr" | sed -n 's/^Allow: //Ip')" "GET, HEAD, DELETE" "Allow of a run (DELETE /runs/{id} deletes a finished run)"
}

# Followed logs park their connections instead of holding an API worker: with
# more streams open than workers, other requests are still answered at once.
test_follow_streams_leave_workers_free() {
	start_daemon a
	f=$(wf quiet <<Y
name: quiet
steps:
  - {name: q, command: [sh, -c, 'while [ ! -e "$FERRY_HOME/go" ]; do sleep 0.1; done; echo done']}
Y
)
	id=$(submit "$f")
	wait_step "$id" q running 10
	pids=()
	for i in $(seq 1 12); do
		curl -sS -N --max-time 120 -H "Authorization: Bearer $FERRY_API_TOKEN" \
			"$FERRY_URL/api/v1/runs/$id/steps/q/logs?follow=1" >"$FERRY_HOME/follow.$i" &
		pids+=($!)
	done
	# the 12 follows connected (the daemon counts them), then 20 GETs are
	# answered while the step cannot end: a worker held by a follow would
	# leave a GET unanswered until the test ends the step, which it does
	# only after the GETs (a timed bound here failed on loaded machines)
	for _ in $(seq 1 300); do
		n=$(curl -sS -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/metrics" |
			sed -n 's/^ferry_api_streams_open \([0-9]*\).*/\1/p')
		[ "$n" = 12 ] && break
		sleep 0.1
	done
	assert_eq "$n" 12 "follow streams open (ferry_api_streams_open)"
	for i in $(seq 1 20); do
		out=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $FERRY_API_TOKEN" "$FERRY_URL/api/v1/runs/$id")
		assert_eq "$out" 200 "GET $i while 12 logs are followed"
	done
	assert_eq "$(step_col "$id" q state)" running "the step still runs: the GETs did not wait for it"
	touch "$FERRY_HOME/go"
	for p in "${pids[@]}"; do wait "$p" || fail "a follow stream failed"; done
	for i in $(seq 1 12); do
		assert_eq "$(cat "$FERRY_HOME/follow.$i")" done "stream $i got the whole log"
	done
}
