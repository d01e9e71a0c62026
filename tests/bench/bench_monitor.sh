#!/usr/bin/env bash
# bench_monitor: what the job monitor costs and how fast it catches a hang.
# Prints one JSON line:
#   {"bench":"monitor","sampler_cpu_pct_per_32_jobs":…,"sampler_cpu_pct_per_32_jobs_1s":…,
#    "detect_s_default":…,"detect_s_test":…,"detect_s_default_metrics":…,"detect_s_spin_contended":…}
#
# Starts the embedded PostgreSQL and a real bin/ferryd in a private directory
# under /tmp, three times:
#  - sampler cost: 32 local jobs (`sleep`, each its own process group) run
#    for WINDOW seconds under a daemon with the monitor sampling every second
#    (period=1s, window=8s: 15 times the default rate), then under one with
#    FERRY_MONITOR=off; the daemon's CPU time (utime+stime from /proc) over
#    the same window is read in both, and the difference is the monitor's.
#    sampler_cpu_pct_per_32_jobs_1s is that difference as a percentage of one
#    core; sampler_cpu_pct_per_32_jobs scales it to the default sampling
#    interval (15 s: an eighth of the 2 min window). The issue's target: 0.5.
#  - detect_s_test: a job that writes for 3 s (past the 2 s warm-up) and then
#    sleeps, under the integration tests' configuration (period=1s,periods=3,
#    window=3s,confirm=2s,warmup=2s): seconds from its last write to the
#    monitor.hung event.
#  - detect_s_default: the same job under the default rule (period 30 s, 4
#    periods, window 2 min, confirm 1 min) with warmup=0, so the bench need
#    not first wait out the 5-minute warm-up: the figure is a hang's
#    detection after the warm-up (about 3 min 15 s; the issue asks for 5).
#    DETECT_DEFAULT=0 skips it (it takes that long).
#  - detect_s_default_metrics: a job that writes a metrics line every 2 s
#    for 30 s and then sleeps, under the default rule as shipped (warm-up
#    included: a learned cadence ends it): seconds from its last line to
#    monitor.hung. The issue's target: 60.
#  - detect_s_spin_contended: a job that writes for 3 s and then spins
#    (no IO, 100 % runnable) while two other processes spin beside it, each
#    in its own session, under the test configuration: seconds from its last
#    write to monitor.hung (judged on its threads' demand, monitor.md).
# DETECT=0 measures the sampler's cost alone. Everything it started is stopped at the end. BENCH_KEEP=1 keeps the directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
WINDOW=${WINDOW:-30}
JOBS=${JOBS:-32}
TOKEN=bench-monitor-token-0123456789
AUTH="Authorization: Bearer $TOKEN"

die() {
	echo "bench monitor: $*" >&2
	exit 1
}

[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"
WORK=$(mktemp -d /tmp/ferry-bench-monitor.XXXXXX)
chmod 755 "$WORK" # the embedded PostgreSQL runs as 'postgres' when we are root
export FERRY_HOME="$WORK/home"
mkdir -p "$FERRY_HOME"
unset FERRY_DATABASE_URL FERRY_URL FERRY_HANG FERRY_MONITOR
daemon=""
URL=""

stop_daemon() {
	if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
		kill -TERM "$daemon" 2>/dev/null || true
		for _ in $(seq 1 300); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	daemon=""
	URL=""
	# jobs a killed daemon left: each leads its process group
	for f in "$FERRY_HOME"/runs/*/*/*/status; do
		[ -f "$f" ] || continue
		p=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$f" | tail -n 1)
		[ -z "$p" ] || kill -KILL -- "-$p" 2>/dev/null || true
	done
}

cleanup() {
	local rc=$?
	stop_daemon
	pkill -f "$WORK/compete.py" 2>/dev/null || true
	FERRY_HOME="$WORK/pg" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	if [ $rc -ne 0 ] && [ -f "$WORK/ferryd.log" ]; then
		echo "bench monitor: ferryd log (tail):" >&2
		tail -20 "$WORK/ferryd.log" >&2
	fi
	if [ -n "${BENCH_KEEP:-}" ]; then
		echo "bench monitor: kept $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PG=$(FERRY_HOME="$WORK/pg" bin/ferryd db start 2>"$WORK/pg.log") || { cat "$WORK/pg.log" >&2; die "cannot start PostgreSQL"; }
DB=0

# start_daemon ENV…: a daemon on a fresh database, ready (called in subshells: the name is unique by itself)
start_daemon() {
	DB=$(date +%s%N)
	psql "$PG" -qAtc "CREATE DATABASE bench_$DB" >/dev/null
	rm -f "$WORK/ferryd.url"
	env FERRY_DATABASE_URL="${PG/dbname=ferry/dbname=bench_$DB}" FERRY_LISTEN=127.0.0.1:0 \
		FERRY_ADDRESS_FILE="$WORK/ferryd.url" FERRY_API_TOKEN=$TOKEN FERRY_MAX_JOBS=64 \
		FERRY_LOG_LEVEL=${BENCH_LOG_LEVEL:-warn} "$@" bin/ferryd >"$WORK/ferryd.log" 2>&1 &
	daemon=$!
	for _ in $(seq 1 200); do
		[ -z "$URL" ] && [ -s "$WORK/ferryd.url" ] && URL=$(head -1 "$WORK/ferryd.url")
		[ -n "$URL" ] && curl -fsS -m 2 "$URL/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$daemon" 2>/dev/null || die "ferryd exited at start"
		sleep 0.05
	done
	die "ferryd is not ready"
}

api() {
	curl -fsS -m 30 -X "$1" -H "$AUTH" -H 'Content-Type: application/json' ${3:+--data-binary "$3"} "$URL$2"
}

submit() { # FILE → run id
	api POST /api/v1/runs "$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$1")" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

sql() { psql "${PG/dbname=ferry/dbname=bench_$DB}" -qAt -c "$1"; }

cpu_ticks() { # PID → utime+stime in clock ticks
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# ---- sampler cost ----------------------------------------------------------
{
	echo "name: fleet"
	echo "steps:"
	for i in $(seq 1 "$JOBS"); do
		printf '  - name: j%d\n    command: [sleep, "600"]\n' "$i"
	done
} >"$WORK/fleet.yaml"

# fleet_cpu ENV…: the daemon's CPU ticks over WINDOW seconds with the fleet running
fleet_cpu() {
	local id t0 t1
	start_daemon "$@"
	id=$(submit "$WORK/fleet.yaml")
	for _ in $(seq 1 300); do
		[ "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND state = 'running'")" = "$JOBS" ] && break
		sleep 0.1
	done
	sleep 2 # settled: every job started, every first look taken
	t0=$(cpu_ticks "$daemon")
	sleep "$WINDOW"
	t1=$(cpu_ticks "$daemon")
	api POST "/api/v1/runs/$id/stop" >/dev/null
	stop_daemon
	echo $((t1 - t0))
}

HZ=$(getconf CLK_TCK)
on=$(fleet_cpu FERRY_HANG="period=1s,window=8s")
off=$(fleet_cpu FERRY_MONITOR=off)
read -r pct_1s pct_default < <(python3 -c "
import sys
on, off, hz, win = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
d = max(0, on - off) / hz / win * 100   # percent of one core, sampling every 1 s
print('%.3f %.4f' % (d, d / 15))        # the default samples every 15 s
" "$on" "$off" "$HZ" "$WINDOW")

# ---- detection ----------------------------------------------------------------
# the job runs as its own user (FERRY_JOB_USER): the marks go where it may write
mkdir -p "$WORK/marks"
chmod 1777 "$WORK/marks"
cat >"$WORK/hang.py" <<'PY'
import os, sys, time
# sleep, spin: writes for 3 s, notes when it stopped, then sleeps or spins
# metrics: a metrics line every 2 s for 30 s, notes the last, then sleeps
if sys.argv[2] == "metrics":
    out = open(os.environ["FERRY_METRICS_FILE"], "a")
    for i in range(15):
        out.write('{"step": %d, "loss": %f}\n' % (i, 1.0 / (i + 1)))
        out.flush()
        last = time.time()
        time.sleep(2)
else:
    end = time.time() + 3
    with open(os.environ["FERRY_OUTPUT_DIR"] + "/w", "ab", buffering=0) as f:
        while time.time() < end:
            f.write(b"x" * 100)
            time.sleep(0.1)
        last = time.time()
open(sys.argv[1], "w").write("%.3f" % last)
while sys.argv[2] == "spin":
    pass
time.sleep(100000)
PY

# detect MODE ENV…: seconds from the job's last write (or metrics line) to its monitor.hung event
detect() {
	local id mode=$1 mark
	shift
	start_daemon "$@"
	mark="$WORK/marks/last-write.$DB"
	printf 'name: hang\nsteps:\n  - name: train\n    kind: train\n    command: [python3, %s, %s, %s]\n' \
		"$WORK/hang.py" "$mark" "$mode" >"$WORK/hang.yaml"
	id=$(submit "$WORK/hang.yaml")
	for _ in $(seq 1 6000); do
		[ "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'monitor.hung'")" -gt 0 ] && break
		sleep 0.1
	done
	at=$(sql "SELECT extract(epoch FROM at) FROM events WHERE run_id = $id AND kind = 'monitor.hung'")
	[ -n "$at" ] || die "no hang detected ($mode)"
	api POST "/api/v1/runs/$id/stop" >/dev/null
	stop_daemon
	python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) - float(open(sys.argv[2]).read())))" "$at" "$mark"
}

if [ "${DETECT:-1}" = 0 ]; then # the sampler's cost alone
	printf '{"bench":"monitor","jobs":%d,"window_s":%d,"sampler_cpu_pct_per_32_jobs":%s,"sampler_cpu_pct_per_32_jobs_1s":%s}\n' \
		"$JOBS" "$WINDOW" "$pct_default" "$pct_1s"
	exit 0
fi
TEST_RULE="period=1s,periods=3,window=3s,confirm=2s,warmup=2s"
test_s=$(detect sleep FERRY_HANG="$TEST_RULE")
# two competitors, each in its own session (an autogroup of its own, as other users' work)
printf 'while True:\n    pass\n' >"$WORK/compete.py"
setsid python3 "$WORK/compete.py" </dev/null >/dev/null 2>&1 &
c1=$!
setsid python3 "$WORK/compete.py" </dev/null >/dev/null 2>&1 &
c2=$!
spin_s=$(detect spin FERRY_HANG="$TEST_RULE")
kill "$c1" "$c2" 2>/dev/null || true
metrics_s=$(detect metrics)
if [ "${DETECT_DEFAULT:-1}" = 1 ]; then
	default_s=$(detect sleep FERRY_HANG="warmup=0")
else
	default_s=null
fi

printf '{"bench":"monitor","jobs":%d,"window_s":%d,"sampler_cpu_pct_per_32_jobs":%s,"sampler_cpu_pct_per_32_jobs_1s":%s,"detect_s_default":%s,"detect_s_test":%s,"detect_s_default_metrics":%s,"detect_s_spin_contended":%s}\n' \
	"$JOBS" "$WINDOW" "$pct_default" "$pct_1s" "$default_s" "$test_s" "$metrics_s" "$spin_s"
