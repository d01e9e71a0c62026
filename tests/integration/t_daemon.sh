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

# A home too long for a socket's path gets its cluster's socket in a short directory under /tmp
# (store/db.c); `ferryd db stop` removes it (each such cluster left an empty /tmp/ferry-pg-* behind).
test_db_stop_removes_its_short_socket_directory() {
	local pg="$FERRY_HOME/a-home-whose-path-is-too-long-for-a-unix-socket-path-in-it-to-fit-in-sun_path" url dir
	url=$(FERRY_HOME="$pg" ferryd db start 2>"$FERRY_HOME/start.log") || fail "no cluster: $(cat "$FERRY_HOME/start.log")"
	dir=$(printf '%s\n' "$url" | sed -n 's/.*host=\([^ ]*\).*/\1/p')
	assert_match "$dir" '^/tmp/ferry-pg-[0-9a-f]+$' "the socket's short directory: $url"
	[ -S "$dir/.s.PGSQL.5432" ] || [ -n "$(ls -A "$dir")" ] || fail "no socket in $dir"
	FERRY_HOME="$pg" ferryd db stop >/dev/null 2>&1 || fail "ferryd db stop failed"
	[ ! -e "$dir" ] || fail "$dir left behind: $(ls -A "$dir")"
}
