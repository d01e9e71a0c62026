# Helpers for the integration tests (sourced by run.sh).
#
# Ports: nothing here picks one. Every daemon listens on 127.0.0.1:0 (the
# kernel gives it a free port) and publishes the address it got in its own
# address file, $FERRY_HOME/ferryd-NAME.url (FERRY_ADDRESS_FILE: daemons of
# one test share FERRY_HOME); the harness reads it from there. Helper
# servers in tests (webhooks, relays) bind port 0 and write theirs to a file
# the same way.

# run_one NAME: a fresh FERRY_HOME and database, then the test. The
# database is a copy of TEST_DB_TEMPLATE when that is set (run.sh's
# ferry_template: migrated once per suite), else an empty one.
run_one() {
	local t=$1
	export FERRY_HOME="$SUITE/$t"
	mkdir -p "$FERRY_HOME"
	# where a test's jobs leave what the test counts: jobs run as ferry-job (exec_user.c)
	# and cannot write the test's own files; SHARED reaches them through the daemon's environment
	mkdir -m 1777 "$FERRY_HOME/shared"
	export SHARED="$FERRY_HOME/shared"
	local db="t_$(echo "$t" | tr -c 'a-z0-9_\n' '_')"
	# (on the suite's kept connection to the cluster's own database, as `sql` does: two psql
	# processes a test cost ~30 ms of CPU)
	FERRY_DATABASE_URL=$PG_CONN sql "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1
	FERRY_DATABASE_URL=$PG_CONN sql "CREATE DATABASE $db${TEST_DB_TEMPLATE:+ TEMPLATE $TEST_DB_TEMPLATE}" >/dev/null ||
		{ echo "cannot create database $db"; return 1; }
	unset TEST_DB_TEMPLATE
	export FERRY_DATABASE_URL="${PG_CONN/dbname=ferry/dbname=$db}"
	export FERRY_API_TOKEN="test-token-${EPOCHREALTIME/./}"
	export FERRY_LEASE_MS=2000 FERRY_POLL_MS=200 FERRY_KILL_GRACE_MS=1000 FERRY_SHUTDOWN_GRACE_MS=2000
	export FERRY_LISTEN=127.0.0.1:0
	# until a daemon of this test starts, FERRY_URL leads nowhere (never to one on the default port)
	export FERRY_URL=http://127.0.0.1:1
	unset FERRY_PORT FERRY_ADDRESS_FILE
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

# digits_copy [FOLDS]: workflows/digits.yaml and its scripts copied to $FERRY_HOME/wf (the
# checkout is not written), its load test's p99 bound relaxed for a busy machine (where the
# executor is under test, not latency) and each candidate's cross-validation cut to FOLDS folds
# (default 2: the example's 5 cost the suite's CPU, which is what bounds make test, for a
# selection no such test looks at; the model trained on the whole split is the same); prints the
# copy's path
digits_copy() {
	local folds=${1:-2}
	mkdir -p "$FERRY_HOME/wf"
	cp -r "$ROOT/workflows/digits" "$FERRY_HOME/wf/"
	rm -rf "$FERRY_HOME/wf/digits/__pycache__"
	sed -e 's/p99_ms: "< 500"/p99_ms: "< 10000"/' \
		-e "s|--incoming, digits/data/incoming\]|--incoming, digits/data/incoming, --folds, \"$folds\"]|" \
		"$ROOT/workflows/digits.yaml" >"$FERRY_HOME/wf/digits.yaml"
	grep -q 'p99_ms: "< 10000"' "$FERRY_HOME/wf/digits.yaml" || fail "the example's load-test bound was not found"
	grep -q -- "--folds, \"$folds\"]" "$FERRY_HOME/wf/digits.yaml" || fail "the example's train command was not found"
	echo "$FERRY_HOME/wf/digits.yaml"
}

# stop_deployments HOME: what deploy steps left running under HOME — each
# replica's supervisor (it leads its process group) and HAProxy — killed;
# run.sh calls it after every test, passed or failed
stop_deployments() {
	local f p
	for f in "$1"/deployments/*/runs/*/*/*/status; do
		[ -f "$f" ] || continue
		p=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$f" | tail -n 1)
		[ -n "$p" ] && { kill -KILL -- "-$p" 2>/dev/null || true; }
	done
	# replicas in containers: their home is their deployment's directory
	for f in "$1"/deployments/*/runs/.podman; do
		[ -f "$f" ] && podman ps -aq --filter "label=ferry.home=${f%/runs/.podman}" | xargs -r podman rm -f -t 0 >/dev/null 2>&1
	done
	# each may find nothing to kill: || true, so a caller under set -e goes on
	[ -s "$1/haproxy/haproxy.pid" ] && { kill -KILL "$(cat "$1/haproxy/haproxy.pid")" 2>/dev/null || true; }
	pkill -KILL -f "haproxy .*$1/haproxy" 2>/dev/null || true
	return 0
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

# suite_call KIND FIELD…: a request to suite_calls.c (run.sh starts it); its
# answer's status to $CALL_STATUS (an HTTP code for http), stdout to
# $CALL_OUT and stderr to $CALL_ERR (-1 and a message when the answer was
# not one); 1 when no server could be reached, nothing sent (the caller
# runs the command instead)
suite_call() {
	local out head fd kind=$1 lens= f LC_ALL=C # ${#…} and offsets in bytes
	[ -n "${SUITE_CALLS_PORT:-}" ] && { exec {fd}<>"/dev/tcp/127.0.0.1/$SUITE_CALLS_PORT"; } 2>/dev/null || return 1
	shift
	for f in "$@"; do lens+=" ${#f}"; done
	{ printf '%s\n%s%s\n' "$SUITE_CALLS_TOKEN" "$kind" "$lens"; printf '%s' "$@"; } >&"$fd"
	IFS= read -r -d '' out <&"$fd" || true
	exec {fd}<&-
	head=${out%%$'\n'*}
	case $head in
	[0-9]*' '[0-9]*) ;;
	*) CALL_STATUS=-1 CALL_OUT= CALL_ERR="suite_calls: no answer to a $kind call"$'\n'; return 0 ;;
	esac
	out=${out#*$'\n'}
	CALL_STATUS=${head%% *}
	CALL_OUT=${out:0:${head#* }}
	CALL_ERR=${out:${head#* }}
}

# sql QUERY: psql -qAt -c QUERY on the test's database: its output, errors
# and status. Under run.sh one process runs every call on a connection it
# keeps per database (suite_call); otherwise a psql each call. A test that
# needs a session of its own (SET, a lock held across statements) runs psql.
sql() {
	local CALL_STATUS CALL_OUT CALL_ERR
	if ! suite_call sql "$FERRY_DATABASE_URL" "$1"; then
		psql "$FERRY_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 -c "$1"
		return
	fi
	printf '%s' "$CALL_OUT"
	[ -z "$CALL_ERR" ] || printf '%s' "$CALL_ERR" >&2
	[ "$CALL_STATUS" -ge 0 ] || CALL_STATUS=2
	return "$CALL_STATUS"
}

# spawn_daemon NAME [env assignments…]: ferryd NAME in the background, not
# waited for; its options are FERRYD_ARGS (default --log-level debug).
spawn_daemon() {
	local name=${1:-a}; shift || true
	rm -f "$FERRY_HOME/ferryd-$name.url"
	# shellcheck disable=SC2086
	# each answer traced (api_trace.c) where the suite checks them all at its end (run.sh)
	env FERRY_ADDRESS_FILE="$FERRY_HOME/ferryd-$name.url" \
		FERRY_API_TRACE="${API_TRACE_DIR:-$FERRY_HOME}/${FERRY_HOME##*/}.jsonl" "$@" \
		"${FERRYD:-ferryd}" ${FERRYD_ARGS:---log-level debug} \
		>"$FERRY_HOME/ferryd-$name.log" 2>&1 &
	echo $! >"$FERRY_HOME/daemon.$name.pid"
}

# daemon_url NAME: prints the URL daemon NAME published (waiting up to 10 s for it).
daemon_url() {
	local name=${1:-a} i
	for ((i = 0; i < 100; i++)); do
		[ -s "$FERRY_HOME/ferryd-$name.url" ] && { head -1 "$FERRY_HOME/ferryd-$name.url"; return 0; }
		kill -0 "$(daemon_pid "$name")" 2>/dev/null || break
		sleep 0.1
	done
	return 1
}

# ready_at URL: whether a GET of URL answers 200 (through suite_call under run.sh, else curl)
ready_at() {
	local CALL_STATUS CALL_OUT CALL_ERR
	if suite_call http GET "$1" "" ""; then
		[ "$CALL_STATUS" = 200 ]
		return
	fi
	curl -fsS -m 5 "$1" >/dev/null 2>&1
}

# await_daemon NAME [ENDPOINT]: waits until daemon NAME answers 200 on
# ENDPOINT: readyz (the default: migrated, engine running) or healthz (the API alone).
await_daemon() {
	local name=${1:-a} what=${2:-readyz} url
	url=$(daemon_url "$name") || { cat "$FERRY_HOME/ferryd-$name.log"; fail "ferryd $name published no address"; }
	# a wait, not a bound: on a loaded machine a daemon that starts its
	# embedded PostgreSQL and migrates may take tens of seconds
	local until=$((SECONDS + 60))
	while [ "$SECONDS" -lt "$until" ]; do
		ready_at "$url/$what" && return 0
		kill -0 "$(daemon_pid "$name")" 2>/dev/null || { cat "$FERRY_HOME/ferryd-$name.log"; fail "ferryd $name exited"; }
		sleep 0.1
	done
	tail -20 "$FERRY_HOME/ferryd-$name.log" >&2
	fail "ferryd $name did not answer /$what within 60 s"
}

# use_daemon NAME: FERRY_URL and FERRY_PORT (curl, the CLI, api) lead to daemon NAME.
use_daemon() {
	local url
	url=$(daemon_url "$1") || fail "ferryd $1 published no address"
	export FERRY_URL=$url FERRY_PORT=${url##*:}
}

# start_daemon NAME [env assignments…]: ferryd in the background, ready, and
# the daemon FERRY_URL leads to.
start_daemon() {
	local name=${1:-a}; shift || true
	spawn_daemon "$name" "$@"
	await_daemon "$name"
	use_daemon "$name"
}

# start_another NAME [env assignments…]: one more daemon, ready; FERRY_URL
# stays where it was (daemon_url NAME tells where NAME listens).
start_another() {
	local name=$1; shift
	spawn_daemon "$name" "$@"
	await_daemon "$name"
}

daemon_pid() { local p; { read -r p || [ -n "$p" ]; } <"$FERRY_HOME/daemon.${1:-a}.pid" && printf '%s\n' "$p"; }

stop_daemon() { # NAME [SIGNAL]
	local pid i; pid=$(daemon_pid "$1")
	kill -"${2:-TERM}" "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
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
	local out CALL_STATUS CALL_OUT CALL_ERR body=${3-}
	# under run.sh one process makes every request (suite_call): a curl costs ~7 ms of CPU
	# (a body @FILE is curl's: the file's bytes)
	if [ "$body" = "${body#@}" ] && suite_call http "$1" "$FERRY_URL$2" "$FERRY_API_TOKEN" "$body"; then
		[ "$CALL_STATUS" -ge 0 ] || CALL_STATUS=0
		printf -v CODE '%03d' "$CALL_STATUS"
		BODY=$CALL_OUT
		[ -z "$CALL_ERR" ] || printf '%s' "$CALL_ERR" >&2
		return 0
	fi
	out=$(curl -sS -X "$1" -H "Authorization: Bearer $FERRY_API_TOKEN" -H 'Content-Type: application/json' \
		-H 'X-Ferry-Actor: tester' ${3:+--data-binary "$3"} -w '\n%{http_code}' "$FERRY_URL$2")
	CODE=${out##*$'\n'}
	BODY=${out%$'\n'*}
}

# sql_until CONDITION SECONDS: waits until the SQL boolean CONDITION holds;
# 1 when SECONDS pass first. One psql polls it every 0.1 s inside the
# database: a psql process for each poll costs about 50 ms of CPU here, and
# four lanes of tests waiting that way kept both cores busy. While the
# database cannot be reached (a test that restarts it) or CONDITION fails
# (its table not made yet), it tries again every 0.1 s.
sql_until() {
	local end=$((SECONDS + $2)) err
	while :; do
		err=$(psql "$FERRY_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 -c "DO \$w\$
			DECLARE d timestamptz := clock_timestamp() + interval '$((end - SECONDS)) s';
			BEGIN LOOP
				EXIT WHEN ($1);
				IF clock_timestamp() >= d THEN RAISE EXCEPTION 'sql_until: time is up'; END IF;
				PERFORM pg_sleep(0.1);
			END LOOP; END \$w\$" 2>&1 >/dev/null) && return 0
		case $err in *'sql_until: time is up'*) return 1 ;; esac
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.1
	done
}

# logged PATTERN FILE [SECONDS]: waits (default 5 s) until FILE has a line
# matching PATTERN (grep's basic syntax); 1 when it never does. For what a
# daemon logs just after the effect a test saw (a container removed, then
# "removed container …" written).
logged() {
	local end=$((SECONDS + ${3:-5}))
	until grep -q -- "$1" "$2" 2>/dev/null; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.1
	done
}

# wait_run ID STATE [SECONDS]: fails at once when the run ends in another state
wait_run() {
	local s
	sql_until "(SELECT state = '$2' OR state IN ('succeeded', 'failed', 'stopped') FROM runs WHERE id = $1)" "${3:-30}" ||
		true # (under the tests' set -e a bare failure would end the test before it says why)
	s=$(sql "SELECT state FROM runs WHERE id = $1")
	[ "$s" = "$2" ] && return 0
	sql "SELECT name, state, attempts, reason FROM steps WHERE run_id = $1 ORDER BY idx" >&2
	fail "run $1 is '$s', expected '$2'"
}

# wait_step RUN STEP STATE [SECONDS]
wait_step() {
	sql_until "(SELECT state FROM steps WHERE run_id = $1 AND name = '$2') = '$3'" "${4:-30}" ||
		fail "step $2 of run $1 never reached $3 (is $(sql "SELECT state FROM steps WHERE run_id = $1 AND name = '$2'"))"
}

step_col() { # RUN STEP COLUMN
	sql "SELECT $3 FROM steps WHERE run_id = $1 AND name = '$2'"
}

best_item() { # RUN STEP: the name of the item a sweep with select: kept (train[3])
	sql "SELECT outputs->'best'->>'name' FROM steps WHERE run_id = $1 AND name = '$2'"
}

# writes a workflow file: wf NAME <<YAML
wf() {
	cat >"$FERRY_HOME/$1.yaml"
	echo "$FERRY_HOME/$1.yaml"
}

# json_str TEXT: TEXT as a JSON string, when it is plain printable ASCII
# with newlines and tabs and at most 16 KB (bash's replacements grow with
# the square of the length); else status 1 and nothing printed
json_str() {
	local s=$1 LC_ALL=C plain=$' -~\n\t\r'
	[ ${#s} -le 16384 ] || return 1
	# shellcheck disable=SC2254
	case $s in *[!$plain]*) return 1 ;; esac # (unquoted: a range)
	s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/\\r}
	printf '"%s"' "$s"
}

# submit FILE [PARAMS_JSON]: POST /runs with the file's YAML; prints the run id.
# The body is made here for a small plain file (a jq costs ~25 ms of CPU,
# and the suite submits hundreds of runs), by jq otherwise.
submit() {
	local body yaml= y f
	[ -r "$1" ] || fail "submit: cannot read $1"
	IFS= read -r -d '' yaml <"$1" || true
	if y=$(json_str "$yaml") && f=$(json_str "${1##*/}"); then
		body="{\"yaml\":$y,\"filename\":$f,\"params\":${2:-{\}}}"
	else
		body=$(jq -n --rawfile yaml "$1" --arg filename "${1##*/}" --argjson params "${2:-{\}}" \
			'{yaml: $yaml, filename: $filename, params: $params}') || fail "submit: cannot read $1 or params ${2:-}"
	fi
	api POST /api/v1/runs "$body"
	[ "$CODE" = 201 ] || fail "POST /runs answered $CODE: $BODY"
	echo "$BODY" | json 'j["id"]'
}

# json EXPR: evaluates a Python expression over the JSON on stdin (bound to
# j) and prints the result (dicts, lists, booleans and None as JSON); fails
# with Python's error. Under run.sh one Python serves every call
# (json_eval.py, reached through bash's /dev/tcp: no process started);
# otherwise a python3 each call.
json() {
	local in= out fd LC_ALL=C # ${#…} in bytes
	if [ -z "${JSON_EVAL_PORT:-}" ] || ! { exec {fd}<>"/dev/tcp/127.0.0.1/$JSON_EVAL_PORT"; } 2>/dev/null; then
		python3 -c 'import json,sys; j=json.load(sys.stdin); r=eval(sys.argv[1]); print(r if not isinstance(r,(dict,list,bool)) and r is not None else json.dumps(r))' "$1"
		return
	fi
	IFS= read -r -d '' in || true
	printf '%s\n%d %d\n%s%s' "$JSON_EVAL_TOKEN" "${#1}" "${#in}" "$1" "$in" >&"$fd"
	IFS= read -r -d '' out <&"$fd" || true
	exec {fd}<&-
	case $out in
	0$'\n'*) printf '%s' "${out#0$'\n'}" ;;
	*) printf '%s' "${out#1$'\n'}" >&2; return 1 ;;
	esac
}

# pg_stop_under DIR: every PostgreSQL whose data directory is under DIR (a
# cluster a test started and left running) stopped at once, SIGQUIT, and
# waited for (5 s at most). Killed with SIGKILL instead (the runner's
# pkill -9 of what a test left), a postmaster leaves its dynamic shared
# memory in /dev/shm for good: nothing removes it once its data directory
# is gone (run.sh counts what the suite left there).
pg_stop_under() {
	local f pid pids=() i
	while IFS= read -r f; do
		pid=$(head -1 "$f" 2>/dev/null)
		[ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null && pids+=("$pid")
	done < <(find "$1" -maxdepth 6 -name postmaster.pid 2>/dev/null)
	[ ${#pids[@]} -gt 0 ] || return 0
	# each waited for (kill -0 of several fails as soon as one is gone)
	for ((i = 0; i < 100; i++)); do
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && break; pid=; done
		[ -z "${pid:-}" ] && return 0
		sleep 0.05
	done
}

# pg_stop_now HOME: the suite's embedded PostgreSQL under HOME stopped at once
# (SIGQUIT: an immediate shutdown, no checkpoint: its data is thrown away
# next). `ferryd db stop` shuts down cleanly, and the checkpoint of the
# suite's ~270 databases took 12 s at the end of every make test.
pg_stop_now() {
	local f pid i
	f=$(find "$1" -maxdepth 4 -name postmaster.pid 2>/dev/null | head -1)
	pid=$([ -n "$f" ] && head -1 "$f")
	if [ -z "$pid" ] || ! kill -QUIT "$pid" 2>/dev/null; then
		FERRY_HOME="$1" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1
		return
	fi
	for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
	FERRY_HOME="$1" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1
}
