#!/usr/bin/env bash
# bench_schedules: how late 1,000 schedules that all fire every minute fire,
# and whether any occasion fires twice or not at all. Prints one JSON line:
#   {"bench":"schedules","schedules":1000,"minutes":…,"fires":…,
#    "fire_late_p50_ms":…,"fire_late_p99_ms":…,"fire_late_max_ms":…,
#    "duplicates":…,"missed":…}
#
# Starts the embedded PostgreSQL (durable commits) and a real bin/ferryd with
# the noop executor (the job ends as it starts: what is measured is the
# firing, not the jobs), registers a one-step workflow, creates SCHEDULES
# schedules through the API ("* * * * *", UTC), and lets MINUTES minute
# boundaries pass. Lateness is the tick's commit time (schedule_ticks.at,
# written in the transaction that creates the run) minus its nominal time.
# duplicates: runs beyond one per fired tick plus refused second tries
# (schedule_ticks.duplicates); missed: the minute boundaries between each
# schedule's creation and the end with no tick on record.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
N=${SCHEDULES:-1000}
MINUTES=${MINUTES:-3}
TOKEN=bench-schedules-token-0123456789
AUTH="Authorization: Bearer $TOKEN"

die() {
	echo "bench schedules: $*" >&2
	exit 1
}

[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"
WORK=$(mktemp -d /tmp/ferry-bench-schedules.XXXXXX)
chmod 755 "$WORK" # the embedded PostgreSQL runs as 'postgres' when we are root
export FERRY_HOME="$WORK/home"
mkdir -p "$FERRY_HOME"
unset FERRY_DATABASE_URL FERRY_URL
daemon=""

cleanup() {
	local rc=$?
	if [ -n "$daemon" ]; then
		kill -TERM "$daemon" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon" 2>/dev/null || true
	fi
	FERRY_HOME="$WORK/pg" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	if [ $rc -ne 0 ] && [ -f "$WORK/ferryd.log" ]; then
		echo "bench schedules: ferryd log (tail):" >&2
		tail -20 "$WORK/ferryd.log" >&2
	fi
	[ -n "${BENCH_KEEP:-}" ] && echo "bench schedules: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PG=$(FERRY_HOME="$WORK/pg" bin/ferryd db start 2>"$WORK/pg.log") || { cat "$WORK/pg.log" >&2; die "cannot start PostgreSQL"; }
psql "$PG" -qAtc "CREATE DATABASE bench_sched" >/dev/null
DBURL="${PG/dbname=ferry/dbname=bench_sched}"
sql() { psql "$DBURL" -qAt -c "$1"; }

env FERRY_DATABASE_URL="$DBURL" FERRY_LISTEN=127.0.0.1:0 FERRY_ADDRESS_FILE="$WORK/ferryd.url" \
	FERRY_API_TOKEN=$TOKEN FERRY_EXECUTOR=noop FERRY_LOG_LEVEL=${BENCH_LOG_LEVEL:-warn} \
	bin/ferryd >"$WORK/ferryd.log" 2>&1 &
daemon=$!
URL=""
for _ in $(seq 1 200); do
	[ -z "$URL" ] && [ -s "$WORK/ferryd.url" ] && URL=$(head -1 "$WORK/ferryd.url")
	[ -n "$URL" ] && curl -fsS -m 2 "$URL/readyz" >/dev/null 2>&1 && break
	kill -0 "$daemon" 2>/dev/null || die "ferryd exited at start"
	sleep 0.05
done
[ -n "$URL" ] || die "ferryd is not ready"

api() { curl -fsS -m 30 -X "$1" -H "$AUTH" -H 'Content-Type: application/json' ${3:+--data-binary "$3"} "$URL$2"; }

printf 'name: tick\nsteps:\n  - name: s\n    command: [noop]\n' >"$WORK/tick.yaml"
api POST /api/v1/workflows "$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$WORK/tick.yaml")" >/dev/null

# the schedules, created through the API (in a few parallel streams)
streams=()
for s in 0 1 2 3; do
	(
		for i in $(seq "$s" 4 $((N - 1))); do
			api POST /api/v1/schedules "{\"workflow\":\"tick\",\"name\":\"s$i\",\"cron\":\"* * * * *\"}" >/dev/null
		done
	) &
	streams+=($!)
done
wait "${streams[@]}"
[ "$(sql "SELECT count(*) FROM schedules")" = "$N" ] || die "not all $N schedules were created"
created=$(sql "SELECT floor(extract(epoch FROM max(created_at)))::bigint FROM schedules")

# MINUTES minute boundaries, then a few seconds for the last one's fires
start=$(date +%s)
end=$(( (start / 60 + MINUTES) * 60 + 20 ))
sleep $(( end - start ))
last_boundary=$(( (end / 60) * 60 ))

read -r fires p50 p99 pmax dup_runs dup_tries missed < <(sql "
WITH t AS (SELECT * FROM schedule_ticks WHERE nominal_at <= to_timestamp($last_boundary)),
     f AS (SELECT extract(epoch FROM at - nominal_at) * 1000 AS late FROM t WHERE outcome = 'fired'),
     per AS (SELECT t.schedule_id, t.nominal_at, (SELECT count(*) FROM runs r WHERE r.id = t.run_id) AS n FROM t)
SELECT (SELECT count(*) FROM f),
       (SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY late))::bigint FROM f),
       (SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY late))::bigint FROM f),
       (SELECT round(max(late))::bigint FROM f),
       (SELECT count(*) FROM runs WHERE schedule_id IS NOT NULL) - (SELECT count(*) FROM schedule_ticks WHERE outcome = 'fired'),
       (SELECT coalesce(sum(duplicates), 0) FROM schedule_ticks),
       (SELECT count(*) FROM schedules s CROSS JOIN generate_series(
            to_timestamp((floor(extract(epoch FROM s.created_at)) / 60 + 1)::bigint * 60),
            to_timestamp($last_boundary), interval '1 minute') g(m)
        WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.schedule_id = s.id AND t.nominal_at = g.m))
" | tr '|' ' ')
skipped=$(sql "SELECT count(*) FROM schedule_ticks WHERE outcome = 'skipped'")
[ "$skipped" = 0 ] || echo "bench schedules: $skipped ticks skipped: $(sql "SELECT DISTINCT reason FROM schedule_ticks WHERE outcome = 'skipped' LIMIT 3")" >&2
printf '{"bench":"schedules","schedules":%d,"minutes":%d,"fires":%d,"fire_late_p50_ms":%s,"fire_late_p99_ms":%s,"fire_late_max_ms":%s,"duplicates":%d,"missed":%d}\n' \
	"$N" "$MINUTES" "$fires" "$p50" "$p99" "$pmax" $((dup_runs + dup_tries)) "$missed"
