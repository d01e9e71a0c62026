# Bounded waits on the database: a daemon started while PostgreSQL is
# unreachable, starting up or recovering waits for it (API up, /readyz 503)
# instead of exiting; /readyz answers within a few seconds whatever the
# network does. The suite's PostgreSQL listens on a unix socket only, so the
# daemons here reach it through a TCP relay the test controls.

# start_relay MODE: a TCP relay on a free port (RELAY_PORT) to the suite's
# PostgreSQL socket. Its mode is read from $FERRY_HOME/relay.mode every
# 50 ms: up (forwards), down (closes every connection and accepts only to
# close: like a port nobody listens on, at once), freeze (forwards nothing
# and answers nothing, connections stay open: like a network that drops
# packets). RELAY_URL is the conninfo of this test's database through it.
start_relay() {
	local sockdir
	sockdir=$(echo "$PG_CONN" | sed -n 's/.*host=\([^ ]*\).*/\1/p')
	echo "$1" >"$FERRY_HOME/relay.mode"
	cat >"$FERRY_HOME/relay.py" <<'PY'
import os, selectors, socket, sys, time
port_file, target, mode_file = sys.argv[1:4]
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))  # a free port, written where the test reads it
lsock.listen(64)
open(port_file + ".tmp", "w").write("%d\n" % lsock.getsockname()[1])
os.rename(port_file + ".tmp", port_file)
sel = selectors.DefaultSelector()
sel.register(lsock, selectors.EVENT_READ)
peer = {}   # socket -> the other end, for forwarded pairs
held = []   # clients accepted while frozen, not yet connected upstream
mode = None

def close_pair(s):
    for x in (s, peer.get(s)):
        if x is None:
            continue
        peer.pop(x, None)
        try: sel.unregister(x)
        except (KeyError, ValueError): pass
        x.close()

def pair(c):
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(target)
    except OSError:
        c.close(); u.close(); return
    peer[c], peer[u] = u, c
    if mode == "up":
        sel.register(c, selectors.EVENT_READ); sel.register(u, selectors.EVENT_READ)

def set_mode(m):
    global mode, held
    if m == mode:
        return
    if m == "down":
        for s in list(peer):
            close_pair(s)
        for c in held:
            c.close()
        held = []
    elif m == "freeze":
        for s in peer:
            try: sel.unregister(s)
            except (KeyError, ValueError): pass
    elif m == "up":
        mode = m
        for s in peer:
            try: sel.register(s, selectors.EVENT_READ)
            except KeyError: pass
        for c in held:
            pair(c)
        held = []
    mode = m

while True:
    try:
        set_mode(open(mode_file).read().strip())
    except OSError:
        pass
    for key, _ in sel.select(timeout=0.05):
        s = key.fileobj
        if s is lsock:
            c, _ = lsock.accept()
            if mode == "down":
                c.close()
            elif mode == "freeze":
                held.append(c)
            else:
                pair(c)
            continue
        if s not in peer:
            continue
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data:
            close_pair(s)
            continue
        try:
            peer[s].sendall(data)
        except OSError:
            close_pair(s)
PY
	rm -f "$FERRY_HOME/relay.port"
	python3 "$FERRY_HOME/relay.py" "$FERRY_HOME/relay.port" "$sockdir/.s.PGSQL.5432" "$FERRY_HOME/relay.mode" &
	echo $! >"$FERRY_HOME/daemon.relay.pid"
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/relay.port" ] && break; sleep 0.1; done
	[ -s "$FERRY_HOME/relay.port" ] || fail "the relay did not start"
	RELAY_PORT=$(cat "$FERRY_HOME/relay.port")
	RELAY_URL="host=127.0.0.1 port=$RELAY_PORT dbname=$(echo "$FERRY_DATABASE_URL" | sed -n 's/.*dbname=\([^ ]*\).*/\1/p') user=ferry sslmode=disable passfile=$(echo "$FERRY_DATABASE_URL" | sed -n 's/.*passfile=\([^ ]*\).*/\1/p')"
}

relay_mode() { echo "$1" >"$FERRY_HOME/relay.mode"; sleep 0.2; }

# readyz: sets CODE and SECS (how long /readyz took), never waiting past 15 s.
readyz() {
	local out
	out=$(curl -s -o "$FERRY_HOME/readyz.body" -m 15 -w '%{http_code} %{time_total}' "$FERRY_URL/readyz")
	CODE=${out% *}
	SECS=${out#* }
}

test_ferryd_waits_for_an_unreachable_database() {
	start_relay down
	spawn_daemon a FERRY_DATABASE_URL="$RELAY_URL"
	await_daemon a healthz
	use_daemon a
	readyz
	assert_eq "$CODE" 503 "readyz while the database is unreachable"
	assert_match "$(cat "$FERRY_HOME/readyz.body")" '"code":"not_ready".*waiting for the database' "and why"
	sleep 2
	kill -0 "$(daemon_pid a)" || fail "ferryd exited instead of waiting"
	assert_eq "$(curl -s -o /dev/null -w '%{http_code}' "$FERRY_URL/healthz")" 200 "healthz while waiting"
	api GET /api/v1/runs
	assert_eq "$CODE" 503 "the API says the database is unavailable"
	assert_match "$BODY" '"code":"database_unavailable"' "with its code"
	grep -q 'database not ready (attempt 2): .*; retrying in' "$FERRY_HOME/ferryd-a.log" || fail "attempts not logged"
	assert_match "$(curl -s "$FERRY_URL/metrics")" 'ferry_engine_running 0' "metrics while waiting"

	relay_mode up
	await_daemon a   # readyz: the next attempt (at most 5 s away) gets through
	grep -q 'database reached after [0-9]* attempts' "$FERRY_HOME/ferryd-a.log" || fail "no 'reached' line"
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
	assert_match "$(curl -s "$FERRY_URL/metrics")" 'ferry_engine_running 1' "metrics once running"
	# attempts came with backoff: never more than one a few hundred ms apart
	n=$(grep -c 'database not ready (attempt' "$FERRY_HOME/ferryd-a.log")
	[ "$n" -ge 2 ] && [ "$n" -le 6 ] || fail "$n attempts logged in about 3 s"
}

test_readyz_bounded_when_the_database_goes_away() {
	start_relay up
	start_daemon a FERRY_DATABASE_URL="$RELAY_URL"
	readyz
	assert_eq "$CODE" 200 "readyz through the relay"
	# a network that drops everything: connections hang, nothing is refused
	relay_mode freeze
	for i in 1 2 3; do
		readyz
		assert_eq "$CODE" 503 "readyz $i with the database silent"
		awk -v s="$SECS" 'BEGIN { exit !(s < 5) }' || fail "readyz $i took ${SECS}s with the database silent"
	done
	# the port closed: refused at once
	relay_mode down
	readyz
	assert_eq "$CODE" 503 "readyz with the database gone"
	awk -v s="$SECS" 'BEGIN { exit !(s < 2) }' || fail "readyz took ${SECS}s with the port closed"
	assert_match "$(cat "$FERRY_HOME/readyz.body")" '"code":"database_unavailable"' "and why"
	kill -0 "$(daemon_pid a)" || fail "ferryd exited"
	relay_mode up
	for _ in $(seq 1 50); do readyz; [ "$CODE" = 200 ] && break; sleep 0.2; done
	assert_eq "$CODE" 200 "readyz once the database is back"
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 30
}

# An embedded cluster that is starting up (or recovering) is waited for,
# never started a second time; one whose pid file names a live postmaster
# likewise; a stale pid file does not stop the start.
test_embedded_cluster_starting_up_is_waited_for() {
	local home="$FERRY_HOME/e" ci sockdir
	ci=$(FERRY_HOME="$home" ferryd db start 2>/dev/null)
	FERRY_HOME="$home" ferryd db stop
	sockdir=$(echo "$ci" | sed -n 's/.*host=\([^ ]*\).*/\1/p')
	# a postmaster in start-up or crash recovery: every connection is told
	# "the database system is starting up" (SQLSTATE 57P03; PQping: REJECT)
	cat >"$FERRY_HOME/starting.py" <<'PY'
import os, socket, struct, sys, threading
path = sys.argv[1]
if os.path.exists(path):
    os.unlink(path)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(16)
def serve(c):
    try:
        c.settimeout(5)
        n = struct.unpack("!I", c.recv(4))[0]
        c.recv(n - 4)
        f = b"SFATAL\0VFATAL\0C57P03\0Mthe database system is starting up\0\0"
        c.sendall(b"E" + struct.pack("!I", len(f) + 4) + f)
    except OSError:
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
	python3 "$FERRY_HOME/starting.py" "$sockdir/.s.PGSQL.5432" &
	echo $! >"$FERRY_HOME/daemon.starting.pid"
	for _ in $(seq 1 50); do [ -S "$sockdir/.s.PGSQL.5432" ] && break; sleep 0.1; done
	spawn_daemon a FERRY_HOME="$home" FERRY_DATABASE_URL=
	await_daemon a healthz
	use_daemon a
	# the daemon's first look at the database may come late on a loaded
	# machine: wait for its verdict (never a 200: nothing answers yes)
	for _ in $(seq 1 150); do
		readyz
		[ "$CODE" = 200 ] && break
		grep -q 'not accepting connections yet' "$FERRY_HOME/readyz.body" && break
		sleep 0.2
	done
	assert_eq "$CODE" 503 "readyz while PostgreSQL starts up"
	assert_match "$(cat "$FERRY_HOME/readyz.body")" 'not accepting connections yet' "and why"
	kill -0 "$(daemon_pid a)" || fail "ferryd exited"
	! grep -q 'starting embedded PostgreSQL' "$FERRY_HOME/ferryd-a.log" || fail "pg_ctl start ran against a live postmaster"

	# a postmaster alive but not answering yet: its pid in postmaster.pid, written before the
	# "starting" one goes (between the two, a daemon that saw neither started the cluster: seen
	# once on a loaded machine, readyz then said ready)
	cp /bin/sleep "$FERRY_HOME/postgres"
	"$FERRY_HOME/postgres" 60 &
	fake=$!
	echo $fake >"$FERRY_HOME/daemon.fakepm.pid"
	printf '%s\n%s\n' "$fake" "$home/pg/data" >"$home/pg/data/postmaster.pid"
	stop_daemon starting
	rm -f "$sockdir/.s.PGSQL.5432"
	for _ in $(seq 1 150); do
		readyz
		grep -q "postmaster $fake) is running but not answering" "$FERRY_HOME/readyz.body" && break
		sleep 0.2
	done
	assert_match "$(cat "$FERRY_HOME/readyz.body")" "postmaster $fake\\) is running but not answering" "readyz names the live postmaster"
	! grep -q 'starting embedded PostgreSQL' "$FERRY_HOME/ferryd-a.log" || fail "pg_ctl start ran while a postmaster lived"

	# it dies, leaving its pid file: stale, so the cluster is started
	stop_daemon fakepm KILL
	await_daemon a
	grep -q 'starting embedded PostgreSQL' "$FERRY_HOME/ferryd-a.log" || fail "the cluster was not started"
	id=$(FERRY_DATABASE_URL="$ci" submit "$ROOT/workflows/hello.yaml")
	for _ in $(seq 1 300); do
		s=$(psql "$ci" -qAtc "SELECT state FROM runs WHERE id = $id")
		[ "$s" = succeeded ] && break
		sleep 0.1
	done
	assert_eq "$s" succeeded "a run on the embedded cluster"
	stop_daemon a
	FERRY_HOME="$home" ferryd db stop
}

# statement_timeout (FERRY_DB_STATEMENT_TIMEOUT_MS) ends a query that waits
# on a lock: the API answers 503 instead of hanging with it.
test_statement_timeout_bounds_queries() {
	set +e
	FERRY_DB_STATEMENT_TIMEOUT_MS=soon ferryd >"$FERRY_HOME/bad.log" 2>&1
	rc=$?
	set -e
	assert_eq "$rc" 2 "a malformed FERRY_DB_STATEMENT_TIMEOUT_MS is a usage error"
	assert_match "$(cat "$FERRY_HOME/bad.log")" 'FERRY_DB_STATEMENT_TIMEOUT_MS "soon" must be a number of milliseconds' "and says so"

	start_daemon a FERRY_DB_STATEMENT_TIMEOUT_MS=1000
	api GET /api/v1/runs
	assert_eq "$CODE" 200 "runs before the lock"
	psql "$FERRY_DATABASE_URL" -qAt -c "BEGIN; LOCK TABLE runs IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(5); COMMIT" >/dev/null &
	locker=$!
	for _ in $(seq 1 50); do
		[ "$(sql "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'runs' AND l.mode = 'AccessExclusiveLock' AND l.granted")" = 1 ] && break
		sleep 0.1
	done
	start=$(date +%s.%N)
	api GET /api/v1/runs
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	assert_eq "$CODE" 503 "a query stuck behind the lock"
	assert_match "$BODY" 'statement timeout' "ended by the statement timeout"
	awk -v s="$secs" 'BEGIN { exit !(s < 3) }' || fail "took ${secs}s with a 1 s statement timeout"
	wait "$locker"
	api GET /api/v1/runs
	assert_eq "$CODE" 200 "runs after the lock"
	kill -0 "$(daemon_pid a)" || fail "ferryd exited"
}

# A claim that fails with the connection still up (here: its function gone, as after a bad upgrade;
# a deadlock or a statement timeout alike) is tried again at the poll period, not at once: the
# engine's loop spun on it, thousands of errors a second in the log and a core busy. When the
# function is back, the waiting run goes on.
test_failed_claim_is_retried_at_the_poll_period() {
	start_daemon a FERRY_POLL_MS=500
	sql "ALTER FUNCTION ferry_claim(text, text, int, bigint, bigint, bigint, jsonb) RENAME TO ferry_claim_gone" >/dev/null
	id=$(submit "$(wf one <<'Y'
name: one
steps:
  - {name: a, command: ["true"]}
Y
)")
	sleep 3
	local n
	n=$(grep -c 'claiming ready steps' "$FERRY_HOME/ferryd-a.log" || true)
	[ "$n" -ge 1 ] || fail "the failed claim was not logged"
	[ "$n" -le 12 ] || fail "$n failed claims in 3 s: retried at once, not at the poll period"
	sql "ALTER FUNCTION ferry_claim_gone(text, text, int, bigint, bigint, bigint, jsonb) RENAME TO ferry_claim" >/dev/null
	wait_run "$id" succeeded 20
}
