# Helpers for the integration tests (sourced by run.sh).

PORT_BASE=$((20000 + $$ % 20000))
PORT_NEXT=0

# run_one NAME: a fresh FERRY_HOME, database and port, then the test.
run_one() {
	local t=$1
	export FERRY_HOME="$SUITE/$t"
	mkdir -p "$FERRY_HOME"
	local db="t_$(echo "$t" | tr -c 'a-z0-9_\n' '_')"
	psql "$PG_CONN" -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1
	psql "$PG_CONN" -qAtc "CREATE DATABASE $db" >/dev/null || { echo "cannot create database $db"; return 1; }
	export FERRY_DATABASE_URL="${PG_CONN/dbname=ferry/dbname=$db}"
	export FERRY_API_TOKEN="test-token-$(date +%s%N)"
	export FERRY_LEASE_MS=2000 FERRY_POLL_MS=200 FERRY_KILL_GRACE_MS=1000 FERRY_SHUTDOWN_GRACE_MS=2000
	new_port
	set -e
	"$t"
	set +e
	stop_daemons
	# a sanitizer report in any daemon log fails the test (SANITIZE builds)
	if grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$FERRY_HOME"/ferryd-*.log 2>/dev/null; then
		grep -hE -A30 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$FERRY_HOME"/ferryd-*.log | head -60
		return 1
	fi
}

new_port() {
	PORT_NEXT=$((PORT_NEXT + 1))
	export FERRY_PORT=$((PORT_BASE + PORT_NEXT + RANDOM % 500))
	export FERRY_LISTEN="127.0.0.1:$FERRY_PORT" FERRY_URL="http://127.0.0.1:$FERRY_PORT"
}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

assert_eq() { # actual expected message
	[ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
}

assert_match() { # text regex message
	echo "$1" | grep -Eq -- "$2" || fail "$3: '$1' does not match /$2/"
}

sql() {
	psql "$FERRY_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 -c "$1"
}

# start_daemon NAME [extra env assignments…]: ferryd in the background, ready.
start_daemon() {
	local name=${1:-a}; shift || true
	env "$@" "${FERRYD:-ferryd}" --log-level debug >"$FERRY_HOME/ferryd-$name.log" 2>&1 &
	echo $! >"$FERRY_HOME/daemon.$name.pid"
	for _ in $(seq 1 100); do
		curl -fsS "$FERRY_URL/healthz" >/dev/null 2>&1 && return 0
		kill -0 "$(cat "$FERRY_HOME/daemon.$name.pid")" 2>/dev/null || { cat "$FERRY_HOME/ferryd-$name.log"; fail "ferryd $name exited"; }
		sleep 0.1
	done
	fail "ferryd $name did not answer /healthz"
}

daemon_pid() { cat "$FERRY_HOME/daemon.${1:-a}.pid"; }

stop_daemon() { # NAME [SIGNAL]
	local pid; pid=$(daemon_pid "$1")
	kill -"${2:-TERM}" "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$FERRY_HOME/daemon.$1.pid"
}

stop_daemons() {
	local f
	for f in "$FERRY_HOME"/daemon.*.pid; do
		[ -f "$f" ] || continue
		local n=${f##*/daemon.}; stop_daemon "${n%.pid}"
	done
}

# api METHOD PATH [JSON]: sets CODE and BODY.
api() {
	local out
	out=$(curl -sS -X "$1" -H "Authorization: Bearer $FERRY_API_TOKEN" -H 'Content-Type: application/json' \
		-H 'X-Ferry-Actor: tester' ${3:+--data-binary "$3"} -w '\n%{http_code}' "$FERRY_URL$2")
	CODE=${out##*$'\n'}
	BODY=${out%$'\n'*}
}

# wait_run ID STATE [SECONDS]
wait_run() {
	local s
	for _ in $(seq 1 $((${3:-30} * 10))); do
		s=$(sql "SELECT state FROM runs WHERE id = $1")
		[ "$s" = "$2" ] && return 0
		case "$s" in succeeded|failed|stopped) [ "$s" != "$2" ] && break ;; esac
		sleep 0.1
	done
	sql "SELECT name, state, attempts, reason FROM steps WHERE run_id = $1 ORDER BY idx" >&2
	fail "run $1 is '$s', expected '$2'"
}

# wait_step RUN STEP STATE [SECONDS]
wait_step() {
	for _ in $(seq 1 $((${4:-30} * 10))); do
		[ "$(sql "SELECT state FROM steps WHERE run_id = $1 AND name = '$2'")" = "$3" ] && return 0
		sleep 0.1
	done
	fail "step $2 of run $1 never reached $3 (is $(sql "SELECT state FROM steps WHERE run_id = $1 AND name = '$2'"))"
}

step_col() { # RUN STEP COLUMN
	sql "SELECT $3 FROM steps WHERE run_id = $1 AND name = '$2'"
}

# writes a workflow file: wf NAME <<YAML
wf() {
	cat >"$FERRY_HOME/$1.yaml"
	echo "$FERRY_HOME/$1.yaml"
}

# submit FILE [PARAMS_JSON]: POST /runs with the file's YAML; prints the run id.
submit() {
	local body
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read(), "filename": sys.argv[1].rsplit("/",1)[-1], "params": json.loads(sys.argv[2])}))' "$1" "${2:-{\}}")
	api POST /api/v1/runs "$body"
	[ "$CODE" = 201 ] || fail "POST /runs answered $CODE: $BODY"
	echo "$BODY" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

# json EXPR: evaluates a Python expression over the JSON on stdin (bound to j).
json() {
	python3 -c 'import json,sys; j=json.load(sys.stdin); r=eval(sys.argv[1]); print(r if not isinstance(r,(dict,list,bool)) and r is not None else json.dumps(r))' "$1"
}

# start_daemon_at NAME PORT [env…]: a second daemon on another port.
start_daemon_at() {
	local name=$1 port=$2; shift 2
	local saved=$FERRY_URL
	FERRY_URL="http://127.0.0.1:$port" FERRY_LISTEN="127.0.0.1:$port" start_daemon "$name" FERRY_LISTEN="127.0.0.1:$port" "$@"
	FERRY_URL=$saved
}
