#!/usr/bin/env bash
# Executor benchmark, slurm: a one-step workflow (`true` as a Slurm batch
# job through slurmrestd) submitted N times, one after another, beside the
# runtime alone: `sbatch --wait --wrap true`, N times, in the same run.
# Prints one JSON line:
#   {"bench":"executor","executor":"slurm","start_p50_ms":…,"start_p99_ms":…,"raw_p50_ms":…,"overhead_ratio":…}
# start: a run's created_at to its finished_at (the database's clock: POST
# /runs to the run recorded succeeded); raw: sbatch --wait's wall time;
# overhead_ratio = start_p50 / raw_p50. Slurm's own scheduling and
# sbatch's polling dominate both. Starts the embedded PostgreSQL, a
# one-node Slurm (deploy/slurm.sh, ports FERRY_SLURM_PORT_BASE, default
# 16817) and bin/ferryd in a private directory, and stops all of them.
# Environment: BENCH_RUNS (default 10), BENCH_KEEP=1 keeps the directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUNS=${BENCH_RUNS:-10}
TOKEN=bench-slurm-token-0123456789

die() {
	echo "bench executor slurm: $*" >&2
	exit 1
}

[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"
DIR=$(mktemp -d /tmp/ferry-bench-slurm.XXXXXX)
chmod 755 "$DIR"
export FERRY_HOME=$DIR
unset FERRY_DATABASE_URL FERRY_URL
daemon=""

cleanup() {
	local rc=$?
	if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
		kill -TERM "$daemon" 2>/dev/null || true
		for _ in $(seq 1 300); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	"$ROOT/deploy/slurm.sh" stop "$DIR/slurm" >/dev/null 2>&1 || true
	"$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	[ $rc -eq 0 ] || { [ -f "$DIR/ferryd.log" ] && tail -20 "$DIR/ferryd.log" >&2; } || true
	if [ -n "${BENCH_KEEP:-}" ]; then echo "bench executor slurm: kept $DIR" >&2; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

conninfo=$(bin/ferryd db start 2>"$DIR/pg-start.log") || { cat "$DIR/pg-start.log" >&2; die "cannot start PostgreSQL"; }
deploy/slurm.sh start "$DIR/slurm" >"$DIR/slurm.env" 2>&1 || { cat "$DIR/slurm.env" >&2; die "cannot start Slurm"; }
eval "$(grep -E '^(SLURM_CONF|FERRY_SLURM_URL|FERRY_SLURM_USER|FERRY_SLURM_TOKEN)=' "$DIR/slurm.env" | sed 's/^/export /')"

FERRY_DATABASE_URL=$conninfo FERRY_LISTEN=127.0.0.1:0 FERRY_ADDRESS_FILE="$DIR/ferryd.url" FERRY_API_TOKEN=$TOKEN \
	FERRY_LOG_LEVEL=warn bin/ferryd >"$DIR/ferryd.log" 2>&1 &
daemon=$!
URL=""
for _ in $(seq 1 200); do
	[ -z "$URL" ] && [ -s "$DIR/ferryd.url" ] && URL=$(head -1 "$DIR/ferryd.url")
	[ -n "$URL" ] && curl -fsS -m 2 "$URL/readyz" >/dev/null 2>&1 && break
	kill -0 "$daemon" 2>/dev/null || die "ferryd exited at start"
	sleep 0.05
done
[ -n "$URL" ] || die "ferryd is not ready"

cat >"$DIR/one.json" <<'J'
{"yaml": "name: bench-slurm\nsteps:\n  - {name: a, executor: slurm, command: [\"true\"]}\n"}
J
psql_q() { psql "$conninfo" -qAtc "$1"; }
for i in $(seq 1 "$RUNS"); do
	id=$(curl -sS -m 10 -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
		--data-binary @"$DIR/one.json" "$URL/api/v1/runs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	state=""
	for _ in $(seq 1 600); do
		state=$(psql_q "SELECT state FROM runs WHERE id = $id")
		case $state in succeeded) break ;; failed|stopped) die "run $id $state" ;; esac
		sleep 0.05
	done
	[ "$state" = succeeded ] || die "run $id did not finish"
done
read -r p50 p99 < <(psql_q "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY v), percentile_cont(0.99) WITHIN GROUP (ORDER BY v)
	FROM (SELECT extract(epoch FROM finished_at - created_at) * 1000 FROM runs) x(v)" | tr '|' ' ')

: >"$DIR/raw.ms"
mkdir -p "$DIR/raw"
for i in $(seq 1 "$RUNS"); do
	t0=$(date +%s%N)
	sbatch --wait --quiet --chdir="$DIR/raw" --output=/dev/null --wrap true >/dev/null || die "sbatch --wait failed"
	echo $((($(date +%s%N) - t0) / 1000000)) >>"$DIR/raw.ms"
done
raw=$(sort -n "$DIR/raw.ms" | python3 -c 'import sys, statistics; print(statistics.median(float(l) for l in sys.stdin))')
python3 - "$p50" "$p99" "$raw" <<'PY'
import json, sys
p50, p99, raw = (float(a) for a in sys.argv[1:])
print(json.dumps({"bench": "executor", "executor": "slurm", "start_p50_ms": round(p50, 1),
                  "start_p99_ms": round(p99, 1), "raw_p50_ms": round(raw, 1),
                  "overhead_ratio": round(p50 / raw, 3) if raw > 0 else None}, separators=(",", ":")))
PY
