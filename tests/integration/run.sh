#!/usr/bin/env bash
# Integration suite: one real PostgreSQL (ferryd's embedded cluster) for the
# whole run, a fresh database, FERRY_HOME and port per test, real ferryd
# processes, real jobs, real HTTP. Every test is a function test_* in a
# tests/integration/t_*.sh file; run one with: tests/integration/run.sh NAME…
# Closing line: "integration: N passed, N failed" (tests/run-all.sh adds the total).
#
# Lanes: the tests run in TEST_LANES lanes at once (default 5; TEST_LANES=1
# is the old serial run). Five on two cores: most of a test's time is
# waiting (a daemon's poll, a replica's health check, a timer) and four
# lanes used half the CPU; with six the deploy group (serial, in one lane)
# slowed to the whole suite's length (it is two groups now, deploy and
# deploy2, each with its own FERRY_DEPLOY_PORTS). Clean-clone make test: 4 lanes 469 s,
# 5 lanes 423 s, 6 lanes 414 and 471 s. Each test has its own database, FERRY_HOME and
# ports (daemons listen on port 0), so most tests can run beside any other.
# Each test's database is a copy of ferry_template, a database migrated once
# at suite start (CREATE DATABASE t_x TEMPLATE ferry_template): its daemons
# find every migration and function file recorded and apply nothing.
#
# Groups: a test that needs something machine-wide (dockerd's socket, the
# Slurm cluster's fixed ports, podman's cgroups) or that is timing-sensitive
# belongs to a group; a group's tests run one after another, in name order,
# in one lane (beside the other lanes). Declared in the t_*.sh files, as
# comment lines:
#   # group: NAME                 every test of this file is in group NAME
#   # group NAME: test_a test_b   these tests are in group NAME (over the file's)
#   # fresh-db: test_a test_b     these tests get an empty database, not the template
# The lane that runs group NAME calls group_setup_NAME before its first test
# and group_teardown_NAME after its last, when a t_*.sh defines them (a
# setup that fails fails the group's tests); what setup exports reaches the
# group's tests (e.g. dockerd and Slurm start once per group, not per test).
# Group "solo" is special: its tests run after every lane has finished,
# alone (a test that stops the suite's PostgreSQL).
#
# Order: the groups start first, longest first, then the other tests,
# longest first, each lane taking the next from one queue. Durations come
# from tests/integration/durations (NAME SECONDS a line; a test not in it
# counts 5 s); TEST_DURATIONS_OUT=FILE writes this run's, in that format.
# Results print as tests end ("ok N - NAME (Xs)", N in the order they end);
# a failed test prints its lane, the tail of its output and of its daemons'
# logs. Before the closing line: each group's and each lane's time.
# Two checks count as tests of their own: every answer the daemons gave
# against api/openapi.json (test_api_answers_match_openapi_json), and no
# PostgreSQL shared memory left in /dev/shm by a cluster a test started
# (test_no_postgres_shared_memory_left; after each test the runner stops,
# with SIGQUIT, any cluster left under its home before it kills the rest).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ROOT PATH="$ROOT/bin:$PATH"
. "$ROOT/tests/scratch.sh"
SUITE=$(scratch_make ferry-it 8) || exit 1 # on a tmpfs when it can be (tests/scratch.sh says why)
chmod 755 "$SUITE"
export SUITE
# python3 is Debian's (make deps installs it, with python3-sklearn), ahead of
# a version manager's shim earlier in PATH: pyenv's costs about 150 ms of CPU
# a start here (Debian's 30 ms), and the tests and their jobs start hundreds
if [ -x /usr/bin/python3 ]; then
	mkdir -p "$SUITE/bin"
	ln -s /usr/bin/python3 "$SUITE/bin/python3"
	PATH="$ROOT/bin:$SUITE/bin:${PATH#"$ROOT/bin:"}"
fi
# psql likewise: Debian's /usr/bin/psql is postgresql-common's Perl wrapper
# (about 30 ms of CPU a start here, the binary itself 6 ms), and the tests'
# `sql` starts psql some 1,800 times a run
for p in /usr/lib/postgresql/*/bin/psql; do
	[ -x "$p" ] || continue
	mkdir -p "$SUITE/bin"
	ln -sf "$p" "$SUITE/bin/psql"
	case ":$PATH:" in *":$SUITE/bin:"*) ;; *) PATH="$ROOT/bin:$SUITE/bin:${PATH#"$ROOT/bin:"}" ;; esac
done
# Jobs run as ferry-job (orchestrator/exec/exec_user.c) and many run the
# repository's own scripts. A checkout that user cannot read (under a 0700
# home) would fail those for a reason that is not theirs: then this run's
# jobs are root's (FERRY_JOB_USER=root), said here; the tests of the
# isolation itself ask for ferry-job by name (FERRY_JOB_USER=) and use no
# file of the checkout.
if [ "$(id -u)" = 0 ] && getent passwd ferry-job >/dev/null &&
	! runuser -u ferry-job -- test -r "$ROOT/workflows/digits/train.py" 2>/dev/null; then
	echo "integration: ferry-job cannot read $ROOT (a directory above it is closed to that user): jobs run as root in this run, but for the isolation tests"
	export FERRY_JOB_USER=root
fi
# HAProxy hands each request's log line to ferryd as a datagram
# (orchestrator/deploy/hap_log.c), and the kernel queues at most
# net.unix.max_dgram_qlen of them: 10 unless set, 512 where systemd sets it
# (a Debian host). With 10, a daemon held up for a second on a loaded run
# loses lines (cc68, cc70: 195 and 198 of 200 requests counted). Raised to
# systemd's 512 for the run, as root, and put back after.
QLEN_WAS=
if [ "$(id -u)" = 0 ] && q=$(cat /proc/sys/net/unix/max_dgram_qlen 2>/dev/null) && [ "$q" -lt 512 ] &&
	echo 512 2>/dev/null >/proc/sys/net/unix/max_dgram_qlen; then
	QLEN_WAS=$q
fi
# A sanitized build (make SANITIZE=…) forks and lays graphs out many times
# slower: the DAG picture's layout deadline (dag_svg.c, 10 s) is raised so a
# 2,000-step picture is not called too big for the build's sake.
if ldd "$ROOT/bin/ferryd" 2>/dev/null | grep -q libasan; then
	export FERRY_DAG_RENDER_TIMEOUT_MS=60000
fi
LANES=${TEST_LANES:-5}
LANE_PIDS=()

# All the files share one shell: a helper defined in two of them is the last
# one read everywhere (t_docker's podman_down was t_podman's, and the podman
# service of test_docker_api_on_podman_service outlived every run). Refused.
dups=$(grep -ho '^[A-Za-z_][A-Za-z_0-9]*()' "$ROOT"/tests/integration/lib.sh "$ROOT"/tests/integration/t_*.sh | sort | uniq -d)
if [ -n "$dups" ]; then
	for d in $dups; do echo "integration: ${d%()} is defined in $(grep -l "^${d%()}()" "$ROOT"/tests/integration/lib.sh "$ROOT"/tests/integration/t_*.sh | xargs -n1 basename | paste -sd' ')"; done
	echo "integration: 0 passed, 1 failed"
	exit 1
fi
. "$ROOT/tests/integration/lib.sh"
for f in "$ROOT"/tests/integration/t_*.sh; do . "$f"; done

cleanup() {
	local f g
	[ ${#LANE_PIDS[@]} -eq 0 ] || kill "${LANE_PIDS[@]}" 2>/dev/null
	for f in "$SUITE"/*/daemon.*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	# groups a lane set up and did not tear down (interrupted)
	for f in "$SUITE"/group.*.up; do
		[ -f "$f" ] || continue
		g=${f#"$SUITE"/group.}; g=${g%.up}
		declare -F "group_teardown_$g" >/dev/null && "group_teardown_$g" >/dev/null 2>&1
	done
	pg_stop_now "$SUITE/pg"
	pkill -9 -f "$SUITE/" 2>/dev/null
	[ -z "$QLEN_WAS" ] || echo "$QLEN_WAS" 2>/dev/null >/proc/sys/net/unix/max_dgram_qlen
	# the suite's files (some 4 GB of test databases and homes): its tmpfs
	# unmounted, or on a disk removed in the background (make test does not
	# wait for the disk: it did, ~10 s)
	[ -n "${KEEP:-}" ] || scratch_drop "$SUITE"
}
trap cleanup EXIT

PG_CONN=$(FERRY_HOME="$SUITE/pg" "$ROOT/bin/ferryd" db start 2>"$SUITE/pg-start.log") || {
	cat "$SUITE/pg-start.log"; echo "integration: cannot start PostgreSQL"; echo "integration: 0 passed, 1 failed"; exit 1; }
export PG_CONN
# autovacuum visits each database every naptime: ferryd's 1 s (one
# database in production) forks a worker every 1/N s for the suite's N test
# databases. 60 idle databases here: the postmaster's children used 132
# ticks of CPU in 20 s at 1 s, 14 at 10 s
psql "$PG_CONN" -qAtc "ALTER SYSTEM SET autovacuum_naptime = '10s'" >/dev/null &&
	psql "$PG_CONN" -qAtc "SELECT pg_reload_conf()" >/dev/null
# The suite's cluster (and no other) keeps the role's password as a SCRAM verifier of one
# iteration, not PostgreSQL's 4,096: every connection pays them twice (libpq and the
# backend), about 7 of the 11 ms of CPU a connection costs here, and the suite's daemons,
# psql calls and CREATE DATABASEs open some thousands. The password, the passfile and the
# scram-sha-256 rule are the ones ferryd set (orchestrator/store/db.c); what a test checks
# of them is unchanged. TEST_SCRAM_ITERATIONS=4096 measures against the default.
if v=$(python3 - "$SUITE/pg/pgpass" "${TEST_SCRAM_ITERATIONS:-1}" <<'PY'
import base64, hashlib, hmac, os, sys
pw = open(sys.argv[1]).read().strip().rsplit(":", 1)[1].encode()
it, salt = int(sys.argv[2]), os.urandom(16)
salted = hashlib.pbkdf2_hmac("sha256", pw, salt, it)
key = lambda name: hmac.new(salted, name, hashlib.sha256).digest()
b64 = lambda b: base64.b64encode(b).decode()
print(f"SCRAM-SHA-256${it}:{b64(salt)}${b64(hashlib.sha256(key(b'Client Key')).digest())}:{b64(key(b'Server Key'))}")
PY
); then
	psql "$PG_CONN" -qAtc "ALTER ROLE ferry PASSWORD '$v'" >/dev/null
fi

# the template: migrated once (ferryd token list migrates, then lists), then
# closed to connections (CREATE DATABASE … TEMPLATE needs it unused)
mkdir -p "$SUITE/template"
if ! { psql "$PG_CONN" -qAtc "CREATE DATABASE ferry_template" >/dev/null &&
	FERRY_HOME="$SUITE/template" FERRY_DATABASE_URL="${PG_CONN/dbname=ferry/dbname=ferry_template}" \
		"$ROOT/bin/ferryd" token list >"$SUITE/template.log" 2>&1 &&
	psql "$PG_CONN" -qAtc "ALTER DATABASE ferry_template WITH ALLOW_CONNECTIONS false" >/dev/null; }; then
	cat "$SUITE/template.log" 2>/dev/null
	echo "integration: cannot migrate the template database"; echo "integration: 0 passed, 1 failed"; exit 1
fi

# `json EXPR` (lib.sh) evaluated by one Python for the whole run (json_eval.py)
python3 "$ROOT/tests/integration/json_eval.py" "$SUITE/json_eval" 2>"$SUITE/json_eval.log" &
disown # (cleanup kills it)
for _ in $(seq 1 100); do [ -s "$SUITE/json_eval" ] && break; sleep 0.1; done
if read -r JSON_EVAL_PORT JSON_EVAL_TOKEN <"$SUITE/json_eval" 2>/dev/null; then
	export JSON_EVAL_PORT JSON_EVAL_TOKEN
fi

# `sql QUERY` and `api METHOD PATH [BODY]` (lib.sh) served by one process: a connection kept per
# database, a request per call (suite_calls.c, made by make test and make integration; without it,
# a psql or a curl each call)
for f in "$ROOT"/build/*/tests/suite_calls; do
	[ -x "$f" ] || continue
	"$f" "$SUITE/suite_calls" 2>"$SUITE/suite_calls.log" &
	disown # (cleanup kills it)
	for _ in $(seq 1 100); do [ -s "$SUITE/suite_calls" ] && break; sleep 0.1; done
	if read -r SUITE_CALLS_PORT SUITE_CALLS_TOKEN <"$SUITE/suite_calls" 2>/dev/null; then
		export SUITE_CALLS_PORT SUITE_CALLS_TOKEN
	fi
	break
done

# the declarations: GROUP_OF[test], FRESH_DB[test]
declare -A GROUP_OF=() FRESH_DB=() DUR=()
for f in "$ROOT"/tests/integration/t_*.sh; do
	file_group=$(sed -n 's/^# group: *\([a-z0-9_]*\) *$/\1/p' "$f" | head -1)
	if [ -n "$file_group" ]; then
		for t in $(sed -n 's/^\(test_[A-Za-z0-9_]*\) *() *{.*/\1/p' "$f"); do GROUP_OF[$t]=$file_group; done
	fi
	while read -r g names; do
		for t in $names; do GROUP_OF[$t]=$g; done
	done < <(sed -n 's/^# group \([a-z0-9_]*\): *\(.*\)$/\1 \2/p' "$f")
	for t in $(sed -n 's/^# fresh-db: *//p' "$f"); do FRESH_DB[$t]=1; done
done
if [ -f "$ROOT/tests/integration/durations" ]; then
	while read -r t s; do [ -n "$t" ] && DUR[$t]=$s; done <"$ROOT/tests/integration/durations"
fi
dur() { echo "${DUR[$1]:-5}"; }

tests=("$@")
[ ${#tests[@]} -gt 0 ] || mapfile -t tests < <(declare -F | awk '{print $3}' | grep '^test_' | sort)
for t in "${tests[@]}"; do
	declare -F "$t" >/dev/null || { echo "integration: no test named $t"; echo "integration: 0 passed, 1 failed"; exit 1; }
done

# the queue: one line a job, "group NAME" or "test NAME", groups first
declare -A GROUP_TESTS=() GROUP_SECS=()
loose=() solo=()
for t in "${tests[@]}"; do
	g=${GROUP_OF[$t]:-}
	if [ -z "$g" ]; then loose+=("$t")
	elif [ "$g" = solo ]; then solo+=("$t")
	else
		GROUP_TESTS[$g]="${GROUP_TESTS[$g]:-}${GROUP_TESTS[$g]:+ }$t"
		GROUP_SECS[$g]=$(awk -v a="${GROUP_SECS[$g]:-0}" -v b="$(dur "$t")" 'BEGIN { print a + b }')
	fi
done
{
	for g in "${!GROUP_TESTS[@]}"; do echo "${GROUP_SECS[$g]} group $g"; done | sort -k1,1gr
	for t in "${loose[@]}"; do echo "$(dur "$t") test $t"; done | sort -k1,1gr
} | cut -d' ' -f2- >"$SUITE/queue"
echo 0 >"$SUITE/queue.pos"
echo 0 >"$SUITE/count"
: >"$SUITE/results"

# next_job: prints the next line of the queue (fails when it is empty)
next_job() {
	local i line=()
	{
		flock 9
		read -r i <"$SUITE/queue.pos"
		mapfile -t -s "$i" -n 1 line <"$SUITE/queue"
		echo $((i + 1)) >"$SUITE/queue.pos"
	} 9>>"$SUITE/queue.lock"
	[ -n "${line[0]:-}" ] && echo "${line[0]}"
}

# report NAME RC SECS LANE: one result, printed whole (under the print lock)
report() {
	local t=$1 rc=$2 secs=$3 lane=$4 n l
	{
		flock 9
		read -r n <"$SUITE/count"
		n=$((n + 1))
		echo $n >"$SUITE/count"
		echo "$rc $t $secs $lane" >>"$SUITE/results"
		if [ "$rc" -eq 0 ]; then
			printf 'ok %d - %s (%.1fs)\n' "$n" "$t" "$secs"
		else
			printf 'not ok %d - %s (%.1fs)\n' "$n" "$t" "$secs"
			echo "    # $t ran in lane $lane"
			sed 's/^/    # /' "$SUITE/$t.out" | tail -40
			# the jobs that had not ended: what their supervisor last wrote (pid, container, no exit yet)
			find "$SUITE/$t" -maxdepth 8 -path '*/runs/*/*/*/status' 2>/dev/null | head -200 | while read -r f; do
				grep -q '^exit ' "$f" || { echo "    # --- unfinished ${f#"$SUITE/$t/"}:"; head -5 "$f" | sed 's/^/    #   /'; }
			done | head -30
			for l in "$SUITE/$t"/ferryd*.log; do
				# the engine's idle polls ("claimed 0 steps") say nothing: what happened before them does
				[ -f "$l" ] && {
					echo "    # --- $(basename "$l") (tail, idle polls left out: $(grep -ac 'claimed 0 steps' "$l"), the last at $(grep -a 'claimed 0 steps' "$l" | tail -1 | cut -d' ' -f1))"
					grep -av 'claimed 0 steps' "$l" | tail -25 | cut -c1-300 | sed 's/^/    # /'
				}
			done
		fi
	} 9>>"$SUITE/print.lock"
}

# the clock in microseconds, and the seconds since such a reading ("12.3"): bash's own
# EPOCHREALTIME, not a date and an awk process each (a test's run used five)
now() { echo "${EPOCHREALTIME/./}"; }
since() {
	local d=$((${EPOCHREALTIME/./} - $1))
	printf '%d.%d' $((d / 1000000)) $((d / 100000 % 10))
}

# kill_jobs_of HOME: the jobs a test's runs left running (a failed test
# that never stopped its run): the processes whose environment has a
# FERRY_ATTEMPT_DIR under HOME, with their process groups. Their command
# lines name nothing of the test, so pkill -f missed them. (Not FERRY_HOME:
# a Slurm daemon or container engine a test restarted carries that, and
# the next tests of its group use it.)
SUITE_PGID=$(ps -o pgid= -p $$ | tr -d ' ')
kill_jobs_of() {
	local f p g mine=$SUITE_PGID
	for f in $(grep -lzE "^FERRY_ATTEMPT_DIR=$1/" /proc/[0-9]*/environ 2>/dev/null); do
		p=${f#/proc/}; p=${p%/environ}
		g=$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ')
		[ -n "$g" ] && [ "$g" != "$mine" ] && kill -9 -- "-$g" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
}

# TEST_CPU=1: each test's CPU time (its processes and all they start, not
# PostgreSQL's backends), from a cgroup v1 cpuacct group of its own, and at
# the end the tests that took the most: where the suite's time goes on a
# machine whose cores are the limit. Off (or without cpuacct): nothing.
CPU_CG=
if [ -n "${TEST_CPU:-}" ] && [ -w /sys/fs/cgroup/cpuacct ]; then
	CPU_CG=/sys/fs/cgroup/cpuacct/ferry-it.$$
	mkdir -p "$CPU_CG" || CPU_CG=
fi

# run_test NAME LANE
run_test() {
	local t=$1 start rc f tmpl=ferry_template cg=
	[ -z "${FRESH_DB[$t]:-}" ] || tmpl=
	[ -z "$CPU_CG" ] || { cg=$CPU_CG/$t; mkdir -p "$cg" 2>/dev/null || cg=; }
	start=$(now)
	( [ -z "$cg" ] || echo "$BASHPID" >"$cg/cgroup.procs"; TEST_DB_TEMPLATE=$tmpl run_one "$t" ) >"$SUITE/$t.out" 2>&1
	rc=$?
	# what a failed test left running (its daemons, its jobs, its deployments)
	# goes now, not at the end of the suite: the other lanes need the CPU
	for f in "$SUITE/$t"/daemon.*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	stop_deployments "$SUITE/$t"
	kill_jobs_of "$SUITE/$t"
	pg_stop_under "$SUITE/$t" # before the kill -9 below, which leaves a cluster's shared memory behind
	pkill -9 -f "$SUITE/$t/" 2>/dev/null
	[ -z "$cg" ] || echo "$t $(($(cat "$cg/cpuacct.usage") / 1000000))" >>"$SUITE/cpu"
	report "$t" "$rc" "$(since "$start")" "$2"
	# a passed test's home goes now (some hold GBs), unless KEEP
	[ "$rc" -ne 0 ] || [ -n "${KEEP:-}" ] || rm -rf "${SUITE:?}/$t"
}

# run_group NAME LANE: setup, its tests in order, teardown
run_group() {
	local g=$1 lane=$2 start t rc=0
	start=$(now)
	if declare -F "group_setup_$g" >/dev/null; then
		touch "$SUITE/group.$g.up"
		"group_setup_$g" >"$SUITE/group.$g.setup.log" 2>&1 || rc=$?
	fi
	for t in ${GROUP_TESTS[$g]}; do
		if [ "$rc" -ne 0 ]; then
			{ echo "group $g: group_setup_$g failed ($rc):"; cat "$SUITE/group.$g.setup.log"; } >"$SUITE/$t.out"
			report "$t" 1 0 "$lane"
		else
			run_test "$t" "$lane"
		fi
	done
	if declare -F "group_teardown_$g" >/dev/null; then
		"group_teardown_$g" >"$SUITE/group.$g.teardown.log" 2>&1
		rm -f "$SUITE/group.$g.up"
	fi
	echo "group $g $(since "$start") $lane" >>"$SUITE/times"
}

# lane N: jobs from the queue until it is empty
lane() {
	local lane=$1 job start busy=0
	while job=$(next_job); do
		start=$(now)
		case $job in
			group\ *) ( run_group "${job#group }" "$lane" ) ;;   # what its setup exports stays in it
			test\ *) run_test "${job#test }" "$lane" ;;
		esac
		busy=$((busy + ${EPOCHREALTIME/./} - start))
	done
	echo "lane $lane $((busy / 1000000)).$((busy / 100000 % 10))" >>"$SUITE/times"
}

# the daemons' traces of their answers (lib.sh's spawn_daemon), kept past each test's directory
export API_TRACE_DIR="$SUITE/api-trace"
mkdir -p "$API_TRACE_DIR"
chmod 777 "$API_TRACE_DIR" # a daemon run as another user (t_install.sh's ferry) traces here too

suite_start=$(now)
touch "$SUITE/started" # what /dev/shm gains after this is the suite's (test_no_postgres_shared_memory_left)
[ "$LANES" -ge 1 ] 2>/dev/null || LANES=1
for i in $(seq 1 "$LANES"); do
	lane "$i" &
	LANE_PIDS+=($!)
done
wait "${LANE_PIDS[@]}"
LANE_PIDS=()

# every answer the suite's daemons gave (FERRY_API_TRACE, lib.sh) against api/openapi.json: the
# route and status documented, the JSON body valid for its schema (tests/api/validate.py); counted
# as one more test, failed on any violation. The lanes' answers are checked while the solo tests
# run (one Python on one core, some seconds), the solo tests' after them.
validate_traces() { # LOG TRACE…
	local log=$1; shift
	/usr/bin/python3 "$ROOT/tests/api/validate.py" "$ROOT/api/openapi.json" "$@" >"$log" 2>&1
}
traces=("$API_TRACE_DIR"/*.jsonl)
vpid=
if [ -e "${traces[0]}" ]; then
	validate_traces "$SUITE/openapi.log" "${traces[@]}" &
	vpid=$!
fi
if [ ${#solo[@]} -gt 0 ]; then
	start=$(now)
	for t in "${solo[@]}"; do run_test "$t" solo; done
	echo "group solo $(since "$start") solo" >>"$SUITE/times"
fi
vrc=0 vlogs=()
if [ -n "$vpid" ]; then
	wait "$vpid" || vrc=1
	vlogs+=("$SUITE/openapi.log")
fi
later=()
for f in "$API_TRACE_DIR"/*.jsonl; do
	[ -e "$f" ] || continue
	case " ${traces[*]} " in *" $f "*) ;; *) later+=("$f") ;; esac
done
if [ ${#later[@]} -gt 0 ]; then
	validate_traces "$SUITE/openapi.solo.log" "${later[@]}" || vrc=1
	vlogs+=("$SUITE/openapi.solo.log")
fi
if [ ${#vlogs[@]} -gt 0 ]; then
	if [ "$vrc" -eq 0 ]; then
		echo "0 test_api_answers_match_openapi_json 0" >>"$SUITE/results"
		for f in "${vlogs[@]}"; do tail -1 "$f"; done
	else
		echo "1 test_api_answers_match_openapi_json 0" >>"$SUITE/results"
		echo "not ok - test_api_answers_match_openapi_json"
		for f in "${vlogs[@]}"; do sed 's/^/    # /' "$f"; done
	fi
fi

# PostgreSQL's dynamic shared memory (/dev/shm/PostgreSQL.N) made while the suite ran that no
# process maps any more: a cluster some test started was killed with SIGKILL (nothing removes
# its segments once its data directory is gone; each full run left 1.1 MB). One more test,
# after the suite's own cluster stopped (its segments go with it; a pinned one may be mapped
# by no process while it runs).
sessions=$(psql "$PG_CONN" -qAtc "SELECT sum(sessions) FROM pg_stat_database" 2>/dev/null || echo '?')
pg_stop_now "$SUITE/pg"
leaked=()
for f in $(find /dev/shm -maxdepth 1 -name 'PostgreSQL.*' -newer "$SUITE/started" 2>/dev/null); do
	grep -qsF "$f" /proc/[0-9]*/maps 2>/dev/null || leaked+=("$f")
done
if [ ${#leaked[@]} -eq 0 ]; then
	echo "0 test_no_postgres_shared_memory_left 0" >>"$SUITE/results"
else
	echo "1 test_no_postgres_shared_memory_left 0" >>"$SUITE/results"
	echo "not ok - test_no_postgres_shared_memory_left"
	echo "    # left in /dev/shm, mapped by no process (a postmaster killed with SIGKILL): ${leaked[*]}"
fi

passed=$(awk '$1 == 0' "$SUITE/results" | wc -l)
failed=$(awk '$1 != 0' "$SUITE/results" | wc -l)
failed_names=$(awk '$1 != 0 { printf "%s%s", sep, $2; sep = " " }' "$SUITE/results")
if [ -n "${TEST_DURATIONS_OUT:-}" ]; then
	awk '{ print $2, $3 }' "$SUITE/results" | sort >"$TEST_DURATIONS_OUT"
fi
if [ -f "$SUITE/times" ]; then
	sort -k1,1 -k3,3gr "$SUITE/times" | while read -r kind name secs lane; do
		case $kind in
			group) echo "integration: group $name: ${secs}s (lane $lane)" ;;
			lane) echo "integration: lane $name: ${secs}s busy" ;;
		esac
	done
fi
if [ -n "$CPU_CG" ] && [ -f "$SUITE/cpu" ]; then
	echo "integration: CPU of the tests' own processes: $(awk '{ s += $2 } END { printf "%.1f", s / 1000 }' "$SUITE/cpu") s; the most:"
	sort -k2,2nr "$SUITE/cpu" | head -"${TEST_CPU_TOP:-30}" | awk '{ printf "integration:   %7.1f s  %s\n", $2 / 1000, $1 }'
	for d in "$CPU_CG"/*/; do rmdir "$d" 2>/dev/null; done
	rmdir "$CPU_CG" 2>/dev/null
fi
echo "integration: $LANES lanes, $(since "$suite_start")s, $sessions connections to PostgreSQL"
[ "$failed" -eq 0 ] || echo "integration: failed: $failed_names"
echo "integration: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
