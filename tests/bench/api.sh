#!/usr/bin/env bash
# API benchmark: GET /api/v1/runs/{id} under wrk while pipelines run beside it.
#
# Starts the embedded PostgreSQL and a real bin/ferryd in a private
# FERRY_HOME under /tmp (127.0.0.1 only), runs workflows/hello.yaml to the
# end, then, while a background loop submits a small three-step workflow
# through the API every 50 ms (at most LOAD_MAX runs or LOAD_SECS seconds),
# runs `wrk -t2 -c32 -d10s --latency` against that run's GET. Prints one
# JSON line:
#   {"bench":"api","requests_per_sec":…,"p50_ms":…,"p99_ms":…,"errors":…,"background_runs":…,"load1":…}
# errors counts wrk's socket errors (connect, read, write, timeout) and its
# non-2xx/3xx answers; background_runs the runs the loop started (201s)
# while wrk ran; load1 the machine's 1-minute load average when wrk ended
# (on 2 cores, anything much above 3 means other work shared the CPUs). A
# finished run is served from the daemon's run cache (api/runcache.h). Everything it started is stopped and its directory removed.
# Environment: BENCH_DURATION (wrk -d, default 10s), BENCH_KEEP=1 keeps the
# directory (logs), BENCH_LOG_LEVEL (ferryd, default warn).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

DURATION=${BENCH_DURATION:-10s}
LOAD_MAX=400
LOAD_SECS=60
TOKEN=bench-api-token-0123456789

die() {
	echo "bench api: $*" >&2
	exit 1
}

command -v wrk >/dev/null || die "wrk is not installed (make deps installs it: apt-get install wrk)"
[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"

DIR=$(mktemp -d /tmp/ferry-bench-api.XXXXXX)
chmod 755 "$DIR" # the embedded PostgreSQL runs as 'postgres' when we are root
export FERRY_HOME=$DIR
unset FERRY_DATABASE_URL FERRY_URL
daemon=""
load=""

cleanup() {
	local rc=$?
	touch "$DIR/stop-load"
	[ -z "$load" ] || { kill "$load" 2>/dev/null; wait "$load" 2>/dev/null; } || true
	if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
		kill -TERM "$daemon" 2>/dev/null || true
		for _ in $(seq 1 300); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	"$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	if [ $rc -ne 0 ] && [ -f "$DIR/ferryd.log" ]; then
		echo "bench api: ferryd log (tail):" >&2
		tail -20 "$DIR/ferryd.log" >&2
	fi
	if [ -n "${BENCH_KEEP:-}" ]; then
		echo "bench api: kept $DIR" >&2
	else
		rm -rf "$DIR"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

conninfo=$(bin/ferryd db start 2>"$DIR/pg-start.log") || { cat "$DIR/pg-start.log" >&2; die "cannot start PostgreSQL"; }
AUTH="Authorization: Bearer $TOKEN"

# a free port: ferryd binds port 0 and publishes the address it got
FERRY_DATABASE_URL=$conninfo FERRY_LISTEN=127.0.0.1:0 FERRY_ADDRESS_FILE="$DIR/ferryd.url" FERRY_API_TOKEN=$TOKEN \
	FERRY_LOG_LEVEL=${BENCH_LOG_LEVEL:-warn} bin/ferryd >"$DIR/ferryd.log" 2>&1 &
daemon=$!
URL=""
for _ in $(seq 1 200); do
	[ -z "$URL" ] && [ -s "$DIR/ferryd.url" ] && URL=$(head -1 "$DIR/ferryd.url")
	[ -n "$URL" ] && curl -fsS -m 2 "$URL/readyz" >/dev/null 2>&1 && break
	kill -0 "$daemon" 2>/dev/null || die "ferryd exited at start"
	sleep 0.05
done
[ -n "$URL" ] && curl -fsS -m 2 "$URL/readyz" >/dev/null 2>&1 || die "ferryd is not ready (address: ${URL:-none})"

# post_run FILE: POST /runs with the JSON body in FILE; prints the new run id.
post_run() {
	curl -sS -m 10 -X POST -H "$AUTH" -H 'Content-Type: application/json' \
		--data-binary @"$1" "$URL/api/v1/runs" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}

python3 - "$ROOT/workflows/hello.yaml" >"$DIR/hello.json" <<'PY'
import json, os, sys
print(json.dumps({"yaml": open(sys.argv[1]).read(), "filename": "hello.yaml",
                  "workdir": os.path.dirname(sys.argv[1])}))
PY
id=$(post_run "$DIR/hello.json") || die "cannot submit workflows/hello.yaml"
state=""
for _ in $(seq 1 600); do
	state=$(curl -fsS -m 5 -H "$AUTH" "$URL/api/v1/runs/$id" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])') || state=""
	case $state in succeeded) break ;; failed|stopped) die "run $id of hello.yaml $state" ;; esac
	sleep 0.1
done
[ "$state" = succeeded ] || die "run $id of hello.yaml did not finish in 60 s (state '$state')"

# The pipeline load: a small workflow submitted every 50 ms, bounded.
cat >"$DIR/bg.json" <<'J'
{"yaml": "name: bench-bg\nsteps:\n  - {name: a, command: [\"true\"]}\n  - {name: b, needs: [a], command: [\"true\"]}\n  - {name: c, needs: [a], command: [\"true\"]}\n"}
J
run_load() {
	local n=0 end=$((SECONDS + LOAD_SECS)) code
	while [ $n -lt $LOAD_MAX ] && [ $SECONDS -lt $end ] && [ ! -e "$DIR/stop-load" ]; do
		code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -X POST -H "$AUTH" \
			-H 'Content-Type: application/json' --data-binary @"$DIR/bg.json" \
			"$URL/api/v1/runs") || code=000
		[ "$code" != 201 ] || echo "$code" >>"$DIR/bg.started"
		n=$((n + 1))
		sleep 0.05
	done
}
: >"$DIR/bg.started"
run_load &
load=$!
sleep 0.3

wrk -t2 -c32 -d"$DURATION" --latency -H "$AUTH" "$URL/api/v1/runs/$id" >"$DIR/wrk.out" 2>&1 ||
	{ cat "$DIR/wrk.out" >&2; die "wrk failed"; }
touch "$DIR/stop-load"
wait "$load" 2>/dev/null || true
load=""
kill -0 "$daemon" 2>/dev/null || die "ferryd died under load"

load1=$(cut -d' ' -f1 /proc/loadavg)
python3 - "$DIR/wrk.out" "$(wc -l <"$DIR/bg.started")" "$load1" <<'PY'
import json, re, sys

text = open(sys.argv[1]).read()
UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}

def ms(pct):
    """The pct% line of wrk's latency distribution, in milliseconds."""
    m = re.search(r"^\s*%s%%\s+([0-9.]+)(us|ms|s|m|h)\s*$" % pct, text, re.M)
    if m is None:
        sys.exit("bench api: no %s%% latency in wrk's output:\n%s" % (pct, text))
    return float(m.group(1)) * UNITS[m.group(2)]

rps = re.search(r"^Requests/sec:\s+([0-9.]+)", text, re.M)
if rps is None:
    sys.exit("bench api: no Requests/sec in wrk's output:\n" + text)
errors = 0
sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
if sock:
    errors += sum(int(g) for g in sock.groups())
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
if non2xx:
    errors += int(non2xx.group(1))
print(json.dumps({"bench": "api", "requests_per_sec": round(float(rps.group(1))),
                  "p50_ms": round(ms(50), 3), "p99_ms": round(ms(99), 3),
                  "errors": errors, "background_runs": int(sys.argv[2]),
                  "load1": float(sys.argv[3])},
                 separators=(",", ":")))
PY
