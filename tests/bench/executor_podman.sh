#!/usr/bin/env bash
# Executor benchmark (podman): what Ferry adds to a trivial container step.
#
# Starts the embedded PostgreSQL and a real bin/ferryd in a private
# FERRY_HOME under /tmp (127.0.0.1 only) with deploy/podman.sh's image, then
# alternates, BENCH_RUNS times (default 20, after one warm-up of each):
#   ferry  a one-step run `{executor: podman, image: ferry-base, command:
#          [true]}` submitted through the API, timed from the run's creation
#          to the step's finish (the database's clocks: claim, the shim, podman
#          run, its exit seen and recorded);
#   raw    `podman run --rm ferry-base true`, timed around the command;
#   same   `podman run --log-driver passthrough --network none --name N
#          ferry-base true` (the shim's way: no attach copy, the removal
#          after, untimed), timed around the command.
# Prints one JSON line:
#   {"bench":"executor","executor":"podman","start_p50_ms":…,"start_p99_ms":…,
#    "raw_p50_ms":…,"raw_p99_ms":…,"overhead_ratio":…,"same_flags_p50_ms":…,
#    "vs_same_flags":…,"claim_p50_ms":…,"runs":…}
# overhead_ratio is start_p50 over raw_p50 (target ≤ 1.15); vs_same_flags
# is start_p50 over same_flags_p50: the orchestrator's own share, of which
# claim_p50_ms is the run's creation to the step's start. Everything it
# started is stopped, its containers removed and its directory deleted
# (BENCH_KEEP=1 keeps the directory).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUNS=${BENCH_RUNS:-20}
TOKEN=bench-executor-token-0123456789
IMAGE=ferry-base

die() {
	echo "bench executor podman: $*" >&2
	exit 1
}

[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"
deploy/podman.sh >/dev/null || die "deploy/podman.sh failed"

DIR=$(mktemp -d /tmp/ferry-bench-podman.XXXXXX)
chmod 755 "$DIR" # the embedded PostgreSQL runs as 'postgres' when we are root
export FERRY_HOME=$DIR
unset FERRY_DATABASE_URL FERRY_URL
daemon=""

cleanup() {
	local rc=$?
	if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
		kill -TERM "$daemon" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	podman ps -aq --filter "label=ferry.home=$DIR" | xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
	"$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	if [ $rc -ne 0 ] && [ -f "$DIR/ferryd.log" ]; then
		echo "bench executor podman: ferryd log (tail):" >&2
		tail -20 "$DIR/ferryd.log" >&2
	fi
	if [ -n "${BENCH_KEEP:-}" ]; then
		echo "bench executor podman: kept $DIR" >&2
	else
		rm -rf "$DIR"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

conninfo=$(bin/ferryd db start 2>"$DIR/pg-start.log") || { cat "$DIR/pg-start.log" >&2; die "cannot start PostgreSQL"; }
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

sql() { psql "$conninfo" -qAt -v ON_ERROR_STOP=1 -c "$1"; }

cat >"$DIR/run.json" <<J
{"yaml": "name: bench-podman\nsteps:\n  - {name: t, executor: podman, image: $IMAGE, command: [\"true\"]}\n"}
J

# ferry_once: one run through the daemon, waited for
ferry_once() {
	local id state=""
	id=$(curl -sS -m 10 -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
		--data-binary @"$DIR/run.json" "$URL/api/v1/runs" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])') || die "cannot submit"
	for _ in $(seq 1 1500); do
		state=$(sql "SELECT state FROM runs WHERE id = $id")
		case $state in succeeded) return 0 ;; failed|stopped) die "run $id $state: $(sql "SELECT reason FROM steps WHERE run_id = $id")" ;; esac
		sleep 0.02
	done
	die "run $id did not finish in 30 s"
}

# raw_once: the runtime alone; appends its milliseconds to raw.ms
raw_once() {
	local t0 t1
	t0=$(date +%s%N)
	podman run --rm "$IMAGE" true >/dev/null || die "podman run --rm $IMAGE true failed"
	t1=$(date +%s%N)
	echo $(( (t1 - t0) / 1000 )) >>"$DIR/raw.us"
}

# same_once: the runtime as the shim runs it; appends its microseconds to same.us
same_once() {
	local t0 t1 name=ferry-bench-same-$$-$1
	t0=$(date +%s%N)
	podman run --log-driver passthrough --network none --name "$name" "$IMAGE" true >/dev/null ||
		die "podman run $IMAGE true failed"
	t1=$(date +%s%N)
	podman rm -f "$name" >/dev/null
	echo $(( (t1 - t0) / 1000 )) >>"$DIR/same.us"
}

ferry_once
raw_once
same_once 0
: >"$DIR/raw.us"
: >"$DIR/same.us"
first=$(( $(sql "SELECT coalesce(max(id), 0) FROM runs") + 1 ))
for i in $(seq 1 "$RUNS"); do
	ferry_once
	raw_once
	same_once "$i"
done

sql "SELECT extract(epoch FROM s.finished_at - r.created_at) * 1000 FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.id >= $first" >"$DIR/ferry.ms"
sql "SELECT extract(epoch FROM s.started_at - r.created_at) * 1000 FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.id >= $first" >"$DIR/claim.ms"
python3 - "$DIR/ferry.ms" "$DIR/raw.us" "$DIR/same.us" "$DIR/claim.ms" <<'PY'
import json, sys

def pct(v, p):
    v = sorted(v)
    k = (len(v) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)

ferry = [float(x) for x in open(sys.argv[1]).read().split()]
raw = [int(x) / 1000.0 for x in open(sys.argv[2]).read().split()]
same = [int(x) / 1000.0 for x in open(sys.argv[3]).read().split()]
claim = [float(x) for x in open(sys.argv[4]).read().split()]
f50, r50, s50 = pct(ferry, 0.5), pct(raw, 0.5), pct(same, 0.5)
print(json.dumps({"bench": "executor", "executor": "podman",
                  "start_p50_ms": round(f50, 1), "start_p99_ms": round(pct(ferry, 0.99), 1),
                  "raw_p50_ms": round(r50, 1), "raw_p99_ms": round(pct(raw, 0.99), 1),
                  "overhead_ratio": round(f50 / r50, 2), "same_flags_p50_ms": round(s50, 1),
                  "vs_same_flags": round(f50 / s50, 2), "claim_p50_ms": round(pct(claim, 0.5), 1),
                  "runs": len(ferry)},
                 separators=(",", ":")))
PY
