# Daemon behaviour: reload, JSON logs, database restarts.

test_sighup_reload_and_json_logs() {
	FERRYD_ARGS="--log-format json" start_daemon a
	echo "log_level = debug" > "$FERRY_HOME/ferryd.conf"
	kill -HUP "$(daemon_pid a)"
	for _ in $(seq 1 50); do grep -q reloaded "$FERRY_HOME/ferryd-a.log" && break; sleep 0.1; done
	grep -q '"msg":"reloaded .*log_level = debug"' "$FERRY_HOME/ferryd-a.log" || fail "no reload logged"
	# every line is a JSON object with ts, level, msg
	python3 - "$FERRY_HOME/ferryd-a.log" <<'PY' || fail "log is not JSON lines"
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    assert {"ts", "level", "msg"} <= set(o), o
PY
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
	grep -q '"level":"debug"' "$FERRY_HOME/ferryd-a.log" || fail "debug level not in effect after reload"
}

# The database it restarts is a cluster of its own (the suite's serves the other lanes).
test_database_restart_mid_run() {
	local pg="$FERRY_HOME/own"
	FERRY_DATABASE_URL=$(FERRY_HOME="$pg" ferryd db start 2>"$FERRY_HOME/own-start.log") ||
		{ cat "$FERRY_HOME/own-start.log"; fail "cannot start a cluster of its own"; }
	export FERRY_DATABASE_URL
	start_daemon a
	f=$(wf dbr <<'Y'
name: dbrestart
steps:
  - {name: one, command: [sh, -c, "sleep 1.5"]}
  - {name: two, needs: [one], command: [sh, -c, "sleep 0.5"]}
  - {name: three, needs: [two], command: [true]}
Y
)
	id=$(submit "$f")
	wait_step "$id" one running 10
	FERRY_HOME="$pg" ferryd db stop
	code=$(curl -s -o /dev/null -w '%{http_code}' "$FERRY_URL/readyz")
	assert_eq "$code" 503 "readyz while the database is down"
	sleep 2   # step one finishes while the database is down
	FERRY_HOME="$pg" ferryd db start >/dev/null
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT string_agg(name || '=' || attempts, ' ' ORDER BY idx) FROM steps WHERE run_id = $id")" "one=1 two=1 three=1" "each step once"
	grep -q "database connection restored" "$FERRY_HOME/ferryd-a.log" || fail "no reconnect logged"
	code=$(curl -s -o /dev/null -w '%{http_code}' "$FERRY_URL/readyz")
	assert_eq "$code" 200 "readyz after the restart"
	stop_daemons
	FERRY_HOME="$pg" ferryd db stop
}
