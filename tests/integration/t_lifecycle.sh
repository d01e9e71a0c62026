# The daemon's own lifecycle (issue 10, item 7): a bad setting exits before
# PostgreSQL is touched; an embedded PostgreSQL that ferryd started is
# stopped when it exits (SIGTERM or a start-up error) unless --keep-db or it
# was running already; `ferryd db status` says what runs where. Each test
# has a FERRY_HOME of its own without FERRY_DATABASE_URL, so ferryd uses
# (and may start) its own embedded cluster.

# own_home: FERRY_HOME becomes a fresh directory of its own, with no
# FERRY_DATABASE_URL; whatever happens, its daemons and its PostgreSQL are
# stopped when the test ends (the trap runs when the test's subshell exits).
own_home() {
	unset FERRY_DATABASE_URL
	export FERRY_HOME="$FERRY_HOME/own"
	mkdir -p "$FERRY_HOME" && chmod 755 "$FERRY_HOME"
	# shellcheck disable=SC2064
	trap "stop_daemons; FERRY_HOME='$FERRY_HOME' ferryd db stop >/dev/null 2>&1" EXIT
}

# pg_procs HOME: the postmasters running on HOME's data directory (their pids).
pg_procs() {
	pgrep -f "postgres -D $1/pg/data" || true
}

# assert_pg_stopped HOME WHAT: no postmaster on HOME, and `ferryd db status` exits 3.
assert_pg_stopped() {
	local rc
	for _ in $(seq 1 50); do [ -z "$(pg_procs "$1")" ] && break; sleep 0.1; done
	[ -z "$(pg_procs "$1")" ] || fail "$2: a postmaster still runs on $1/pg/data ($(pg_procs "$1"))"
	set +e
	FERRY_HOME="$1" ferryd db status >"$1/status.out" 2>&1; rc=$?
	set -e
	assert_eq "$rc" 3 "$2: ferryd db status exit code ($(cat "$1/status.out"))"
}

# assert_pg_running HOME WHAT: `ferryd db status` exits 0 and names the postmaster's pid.
assert_pg_running() {
	local out pid
	out=$(FERRY_HOME="$1" ferryd db status) || fail "$2: ferryd db status says it is not running"
	pid=$(head -1 "$1/pg/data/postmaster.pid")
	assert_match "$out" "running \\(postmaster pid $pid" "$2: db status names the postmaster"
	[ -n "$(pg_procs "$1")" ] || fail "$2: no postmaster process on $1/pg/data"
}

# SIGTERM stops the PostgreSQL that ferryd started; while it runs,
# `ferryd db status` names the data directory, the postmaster and the daemon
test_lifecycle_sigterm_stops_the_postgres_it_started() {
	own_home
	start_daemon a
	out=$(ferryd db status) || fail "db status while the daemon runs: $out"
	pid=$(head -1 "$FERRY_HOME/pg/data/postmaster.pid")
	assert_match "$out" "data directory +$FERRY_HOME/pg/data \\(initialised\\)" "db status names the data directory"
	assert_match "$out" "running \\(postmaster pid $pid" "db status names the postmaster's pid"
	assert_match "$out" "accepting connections" "and that it accepts connections"
	assert_match "$out" "ferryd pid $(daemon_pid a) on $FERRY_URL" "db status names the daemon using it"
	assert_match "$(ferryd db status -o json | json 'j["pid"]')" "^$pid\$" "db status -o json: pid"
	stop_daemon a
	grep -q 'stopping the embedded PostgreSQL that ferryd started' "$FERRY_HOME/ferryd-a.log" || fail "not logged"
	assert_pg_stopped "$FERRY_HOME" "after SIGTERM"
}

# --keep-db leaves it running; so does a second daemon that did not start it,
# and the first one leaves it to the second, which still uses it
test_lifecycle_keep_db_and_other_sessions() {
	own_home
	FERRYD_ARGS="--log-level debug --keep-db" start_daemon a
	stop_daemon a
	assert_pg_running "$FERRY_HOME" "after --keep-db"
	grep -q 'leaving the embedded PostgreSQL running (--keep-db)' "$FERRY_HOME/ferryd-a.log" || fail "not logged"
	FERRY_HOME="$FERRY_HOME" ferryd db stop

	start_daemon a
	start_another b
	stop_daemon a
	assert_pg_running "$FERRY_HOME" "while another daemon uses it"
	grep -q 'leaving the embedded PostgreSQL running: [0-9]* other session' "$FERRY_HOME/ferryd-a.log" ||
		fail "a did not say why it left PostgreSQL running"
	stop_daemon b
	assert_pg_running "$FERRY_HOME" "b did not start it"
}

# a PostgreSQL running before ferryd started is left running
test_lifecycle_leaves_a_running_postgres() {
	own_home
	ferryd db start >/dev/null
	start_daemon a
	stop_daemon a
	assert_pg_running "$FERRY_HOME" "after the daemon exits"
	ferryd db stop
	assert_pg_stopped "$FERRY_HOME" "ferryd db stop"
}

# a start-up error after PostgreSQL was started (a migration that fails)
# stops it too
test_lifecycle_startup_error_stops_postgres() {
	own_home
	ci=$(ferryd db start)
	# a table the first migration creates, not recorded: the migration fails
	psql "$ci" -qAt -c "CREATE TABLE workflows (x int)" >/dev/null
	ferryd db stop
	set +e
	timeout 60 ferryd >"$FERRY_HOME/start.log" 2>&1; rc=$?
	set -e
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$FERRY_HOME/start.log"; fail "ferryd exit code $rc"; }
	assert_match "$(cat "$FERRY_HOME/start.log")" 'migration 0001_core failed' "says why"
	assert_pg_stopped "$FERRY_HOME" "after the failed start"
}

# bad settings exit non-zero, say what is wrong, and neither make nor start
# a cluster: a busy port, a malformed listen address, a token that cannot
# be sent, a FERRY_HOME that cannot be made, an unknown executor
test_lifecycle_config_errors_touch_no_postgres() {
	own_home
	python3 -c 'import socket,sys,time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1])); __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)' "$FERRY_HOME/busy.port" &
	echo $! >"$FERRY_HOME/daemon.busy.pid"
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/busy.port" ] && break; sleep 0.1; done
	port=$(cat "$FERRY_HOME/busy.port")
	: >"$FERRY_HOME/afile"
	check() { # NAME EXPECTED-MESSAGE [env assignments…]
		local name=$1 msg=$2 rc home; shift 2
		home="$FERRY_HOME/$name"
		set +e
		env FERRY_HOME="$home" "$@" timeout 30 ferryd >"$FERRY_HOME/$name.log" 2>&1; rc=$?
		set -e
		[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$FERRY_HOME/$name.log"; fail "$name: exit code $rc"; }
		assert_match "$(cat "$FERRY_HOME/$name.log")" "$msg" "$name: the message"
		[ ! -e "$home/pg" ] || { FERRY_HOME="$home" ferryd db stop; fail "$name: $home/pg was made"; }
		[ -z "$(pg_procs "$home")" ] || fail "$name: a PostgreSQL was started"
	}
	check busy "cannot listen on 127.0.0.1:$port: Address already in use" FERRY_LISTEN="127.0.0.1:$port"
	check listen 'FERRY_LISTEN "nowhere": expected IP:PORT' FERRY_LISTEN=nowhere
	check token 'FERRY_API_TOKEN contains a blank or control character' FERRY_API_TOKEN="two words"
	check home 'FERRY_HOME' FERRY_HOME="$FERRY_HOME/afile/home"
	check executor 'FERRY_EXECUTOR "nope" is not an executor \(known: local' FERRY_EXECUTOR=nope
}

# The embedded PostgreSQL killed under a running daemon (kill -9, the OOM killer: its postmaster.pid
# left, its process gone) is started again by the daemon, which recovers from its WAL: readyz comes
# back, a run under way finishes with each step once, and the daemon stops it at exit as before.
test_lifecycle_embedded_postgres_killed_comes_back() {
	local id pid st
	own_home
	start_daemon a
	id=$(submit "$(wf killed <<'Y'
name: killed
steps:
  - {name: one, command: [sh, -c, "sleep 2"]}
  - {name: two, needs: [one], command: ["true"]}
Y
)")
	pid=$(head -1 "$FERRY_HOME/pg/data/postmaster.pid")
	kill -9 "$pid"
	for _ in $(seq 1 150); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$FERRY_URL/readyz")" = 200 ] &&
			[ "$(head -1 "$FERRY_HOME/pg/data/postmaster.pid" 2>/dev/null)" != "$pid" ] && break
		sleep 0.2
	done
	assert_eq "$(curl -s -o /dev/null -w '%{http_code}' "$FERRY_URL/readyz")" 200 "readyz once it is back"
	assert_match "$(cat "$FERRY_HOME/ferryd-a.log")" "the embedded PostgreSQL died \\(postmaster $pid is gone" "the log says why"
	for _ in $(seq 1 150); do
		api GET "/api/v1/runs/$id"
		st=$(printf '%s' "$BODY" | json 'j["state"]')
		[ "$st" = succeeded ] && break
		sleep 0.2
	done
	assert_eq "$st" succeeded "the run under way finished"
	assert_eq "$(printf '%s' "$BODY" | json '" ".join("%s=%s" % (s["name"], s["attempts"]) for s in j["steps"])')" \
		"one=1 two=1" "each step once"
	stop_daemon a
	assert_pg_stopped "$FERRY_HOME" "the daemon stops the PostgreSQL it started again"
}
