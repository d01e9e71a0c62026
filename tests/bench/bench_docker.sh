#!/usr/bin/env bash
# bench_docker: the docker executor's added cost for a trivial step, beside
# the container runtime alone in the same run. Prints one JSON line:
#   {"bench":"executor","executor":"docker","start_p50_ms":…,"start_p99_ms":…,
#    "raw_p50_ms":…,"overhead_ratio":…}
# start: a one-step run (executor: docker, image: ferry-base, command true)
# from its creation to its end as the database records them (runs.created_at
# → runs.finished_at), runs one after another; raw: `docker run --rm
# --network none ferry-base true` (network none as Ferry's default), timed
# around the client. RUNS (default 20) of each, taken in turn. dockerd is started through
# deploy/dockerd.sh and stopped after when this script started it.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUNS=${RUNS:-20}
DOCKER=${DOCKER:-/usr/bin/docker}
WORK=$(mktemp -d /tmp/ferry-bench-docker.XXXXXX)
chmod 755 "$WORK"
started=""
daemon=""

cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	FERRY_HOME="$WORK/pg" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	[ -n "$started" ] && "$ROOT/deploy/dockerd.sh" stop >/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

out=$("$ROOT/deploy/dockerd.sh" start 2>&1) || { echo "$out" >&2; exit 1; }
case $out in *"started pid"*) started=1 ;; esac
[ -x "$DOCKER" ] || { echo "bench_docker: $DOCKER is missing (apt-get install docker.io)" >&2; exit 1; }

# percentile P of the numbers on stdin (nearest rank)
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p/100+0.999); if (i<1) i=1; print a[i]}'; }


PG=$(FERRY_HOME="$WORK/pg" "$ROOT/bin/ferryd" db start 2>"$WORK/pg.log") || { cat "$WORK/pg.log" >&2; exit 1; }
export FERRY_HOME="$WORK/home" FERRY_DATABASE_URL=$PG FERRY_LISTEN=127.0.0.1:0
export FERRY_API_TOKEN=bench FERRY_ADDRESS_FILE="$WORK/url" FERRY_LOG_LEVEL=warn
mkdir -p "$FERRY_HOME"
"$ROOT/bin/ferryd" >"$WORK/ferryd.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do [ -s "$WORK/url" ] && curl -fsS -m 2 "$(cat "$WORK/url")/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
URL=$(cat "$WORK/url")
body='{"yaml":"name: trivial\nsteps:\n  - {name: s, executor: docker, image: ferry-base, command: [\"true\"]}\n"}'
sql() { psql "$PG" -qAt -c "$1"; }
"$DOCKER" run --rm --network none ferry-base true # warm the image's layers
# one of each in turn, so both see the same load on a shared machine
raw=()
for i in $(seq 0 "$RUNS"); do
	if [ "$i" -gt 0 ]; then
		t0=$(date +%s%N)
		"$DOCKER" run --rm --network none ferry-base true
		raw+=($((($(date +%s%N) - t0) / 1000)))
	fi
	id=$(curl -fsS -H "Authorization: Bearer bench" -H 'Content-Type: application/json' \
		--data-binary "$body" "$URL/api/v1/runs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	# the figures are the database's timestamps: poll gently, so the poller takes no CPU from the run
	for _ in $(seq 1 300); do
		sleep 0.1
		s=$(sql "SELECT state FROM runs WHERE id = $id")
		case $s in succeeded) break ;; failed|stopped) echo "bench_docker: run $id $s; see $WORK" >&2; trap - EXIT; exit 1 ;; esac
	done
	[ "$i" = 0 ] && first=$id # the first warms the daemon's connections
done
mapfile -t ferry < <(sql "SELECT (extract(epoch FROM finished_at - created_at) * 1e6)::bigint FROM runs WHERE id > $first ORDER BY id")

p50=$(printf '%s\n' "${ferry[@]}" | pct 50)
p99=$(printf '%s\n' "${ferry[@]}" | pct 99)
r50=$(printf '%s\n' "${raw[@]}" | pct 50)
awk -v a="$p50" -v b="$p99" -v r="$r50" -v n="$RUNS" 'BEGIN {
	printf "{\"bench\":\"executor\",\"executor\":\"docker\",\"runs\":%d,\"start_p50_ms\":%.1f,\"start_p99_ms\":%.1f,\"raw_p50_ms\":%.1f,\"overhead_ratio\":%.2f}\n",
		n, a / 1000, b / 1000, r / 1000, a / r }'
