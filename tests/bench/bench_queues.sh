#!/usr/bin/env bash
# bench_queues: admission through a host declared with SLOTS CPUs, every
# step asking for one (FERRY_CPUS=SLOTS, FERRY_DEFAULT_CPUS=1): JOBS short
# local jobs (`sleep JOB_S`), each with a random priority (-5…5), all ready
# at once (one run of JOBS independent steps). Prints one JSON line:
#   {"bench":"queues","jobs":…,"slots":…,"job_ms":…,"utilization":…,"command_busy":…,
#    "priority_inversions":…,"admit_p50_ms":…,"admit_p99_ms":…,
#    "gap_p50_ms":…,"gap_p99_ms":…,"makespan_s":…}
#
# utilization: the attempts' running time (started_at → finished_at, as the
# database records them: a slot is held from its claim to its release) over
# SLOTS × the makespan (first start → last end). command_busy: the commands'
# own time (JOBS × JOB_S) over the same, the rest being each job's start and
# end and the call between two. Under TMPDIR (default /tmp).
# priority_inversions: pairs where a lower-priority step started before a
# higher-priority one (all were ready from the start, all ask the same).
# admit_*: the claim statement's time (ferry_claim: admission included), from
# the daemon's debug lines "claimed N steps in U us" with N > 0 (of a claim
# made in one call with the finish of the jobs that ended, ferry_finish_claim:
# the claim's part, timed in the database).
# gap_*: how long a slot stood idle between one attempt's end and the next
# start, as the database stamps them (0 where the next was claimed in the
# transaction that closed the first, ferry_finish_claim: one time stamps both;
# the fork after the claim is not in it).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
JOBS=${QUEUE_JOBS:-1000}
SLOTS=${QUEUE_SLOTS:-2}
JOB_S=${QUEUE_JOB_S:-0.1}
# QUEUE_SLOTS_BY=max_jobs: the slots are FERRY_MAX_JOBS and nothing asks for a CPU (what the
# engine did before admission), QUEUE_PRIORITIES=0: no priority key (a baseline for older code)
BY=${QUEUE_SLOTS_BY:-cpus}
PRIOS=${QUEUE_PRIORITIES:-1}
TOKEN=bench-queues-token-0123456789
AUTH="Authorization: Bearer $TOKEN"

die() {
	echo "bench queues: $*" >&2
	exit 1
}

[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ferry-bench-queues.XXXXXX")
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
		echo "bench queues: ferryd log (tail):" >&2
		grep -v 'claimed 0 steps' "$WORK/ferryd.log" | tail -20 >&2
	fi
	[ -n "${BENCH_KEEP:-}" ] && echo "bench queues: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PG=$(FERRY_HOME="$WORK/pg" bin/ferryd db start 2>"$WORK/pg.log") || { cat "$WORK/pg.log" >&2; die "cannot start PostgreSQL"; }
psql "$PG" -qAtc "CREATE DATABASE bench_queues" >/dev/null
DBURL="${PG/dbname=ferry/dbname=bench_queues}"
sql() { psql "$DBURL" -qAt -c "$1"; }
# BENCH_PG_STATEMENTS=N: the cluster restarts with pg_stat_statements (nested statements and
# planning tracked) and the N costliest statements are printed to stderr at the end
if [ -n "${BENCH_PG_STATEMENTS:-}" ]; then
	psql "$PG" -qAtc "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null
	FERRY_HOME="$WORK/pg" bin/ferryd db stop >/dev/null 2>&1
	PG=$(FERRY_HOME="$WORK/pg" bin/ferryd db start 2>>"$WORK/pg.log") || die "cannot restart PostgreSQL"
	sql "CREATE EXTENSION pg_stat_statements" >/dev/null
	psql "$PG" -qAt -c "ALTER SYSTEM SET pg_stat_statements.track = 'all'" \
		-c "ALTER SYSTEM SET pg_stat_statements.track_planning = on" -c "SELECT pg_reload_conf()" >/dev/null
fi

env FERRY_DATABASE_URL="$DBURL" FERRY_LISTEN=127.0.0.1:0 FERRY_ADDRESS_FILE="$WORK/ferryd.url" \
	FERRY_API_TOKEN=$TOKEN FERRY_LOG_LEVEL=debug \
	$(if [ "$BY" = max_jobs ]; then echo "FERRY_MAX_JOBS=$SLOTS"; else echo "FERRY_CPUS=$SLOTS FERRY_DEFAULT_CPUS=1"; fi) \
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

python3 - "$JOBS" "$JOB_S" "$PRIOS" >"$WORK/q.yaml" <<'PY'
import random, sys
n, s, prios = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
r = random.Random(30)
print("name: q\nsteps:")
for i in range(n):
    p = r.randint(-5, 5)
    print(f"  - {{name: j{i}, " + (f"priority: {p}, " if prios else "") + f"command: [sleep, '{s}']}}")
PY
# the run's id read by grep, not by a python3 started as the jobs start (one through a version
# manager's shim took 270 ms of CPU, a slot idle that long on 2 cores, inside the makespan)
body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$WORK/q.yaml")
id=$(curl -fsS -m 60 -X POST -H "$AUTH" -H 'Content-Type: application/json' --data-binary "$body" \
	"$URL/api/v1/runs" | grep -o '^{"id" *: *[0-9]*' | grep -o '[0-9]*$')
[ -n "$id" ] || die "the run was not created"
# one session waits for the run's end, committing at each turn (so it holds no snapshot back from
# vacuum): a psql started every half second (a backend's fork, its SCRAM login, cold catalogs: 8 ms
# of server time each) disturbed the claims measured here on 2 cores (admit p99 11 ms, now 7-9 ms)
st=$(psql "$DBURL" -qAt -v ON_ERROR_STOP=1 -c "
DO \$\$ BEGIN
	FOR i IN 1 .. $((JOBS * 2 + 600)) LOOP
		EXIT WHEN (SELECT state FROM runs WHERE id = $id) IN ('succeeded', 'failed', 'stopped');
		PERFORM pg_sleep(0.5);
		COMMIT;
	END LOOP;
END \$\$" -c "SELECT state FROM runs WHERE id = $id")
[ "$st" = succeeded ] || die "the run did not end (state $st)"

read -r util inversions gap50 gap99 makespan < <(sql "
WITH pr AS (SELECT coalesce((s.spec ->> 'priority')::int, 0) AS priority, a.started_at AS st, a.finished_at AS fin
            FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id),
     span AS (SELECT min(st) AS t0, max(fin) AS t1 FROM pr),
     gaps AS (SELECT extract(epoch FROM st - lag) * 1000 AS g FROM (
                SELECT st, (SELECT max(p2.fin) FROM pr p2 WHERE p2.fin <= p1.st) AS lag FROM pr p1) x
              WHERE lag IS NOT NULL)
SELECT round((SELECT sum(extract(epoch FROM fin - st)) FROM pr) /
             ($SLOTS * (SELECT extract(epoch FROM t1 - t0) FROM span))::numeric, 4),
       (SELECT count(*) FROM pr x, pr y WHERE x.priority < y.priority AND x.st < y.st),
       (SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY g)::numeric, 2) FROM gaps),
       (SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY g)::numeric, 2) FROM gaps),
       (SELECT round(extract(epoch FROM t1 - t0)::numeric, 3) FROM span)
" | tr '|' ' ')
read -r a50 a99 < <(grep -o 'claimed [1-9][0-9]* steps in [0-9]* us' "$WORK/ferryd.log" | awk '{print $5}' | sort -n |
	awk '{v[NR] = $1} END { if (NR == 0) { print "null null"; exit } i50 = int(NR * 0.5); i99 = int(NR * 0.99);
		if (i50 < 1) i50 = 1; if (i99 < 1) i99 = 1; printf "%.2f %.2f\n", v[i50] / 1000, v[i99] / 1000 }')
if [ -n "${BENCH_PG_STATEMENTS:-}" ]; then
	psql "$DBURL" -q -c "SELECT calls, round((total_exec_time / greatest(calls, 1))::numeric, 3) AS exec_ms,
	       round((total_plan_time / greatest(calls, 1))::numeric, 3) AS plan_ms, plans,
	       regexp_replace(left(query, 100), '\s+', ' ', 'g') AS query
	FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT ${BENCH_PG_STATEMENTS}" >&2
fi
job_ms=$(python3 -c "print(int(float('$JOB_S') * 1000))")
# the commands' own time (JOBS x JOB_S) over the slots' time: what is left is each job's start,
# its end noticed and the call that closes it and claims the next
cmd_busy=$(python3 -c "print(f'{$JOBS * float(\"$JOB_S\") / ($SLOTS * float(\"$makespan\")):.4f}')")
printf '{"bench":"queues","jobs":%d,"slots":%d,"job_ms":%d,"utilization":%s,"command_busy":%s,"priority_inversions":%d,"admit_p50_ms":%s,"admit_p99_ms":%s,"gap_p50_ms":%s,"gap_p99_ms":%s,"makespan_s":%s}\n' \
	"$JOBS" "$SLOTS" "$job_ms" "$util" "$cmd_busy" "$inversions" "$a50" "$a99" "$gap50" "$gap99" "$makespan"
