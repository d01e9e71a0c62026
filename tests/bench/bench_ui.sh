#!/usr/bin/env bash
# bench_ui: the web console on a 2,000-step workflow. Prints one JSON line:
#   {"bench":"ui","steps":2000,"run_page_ms":…,"run_page_cached_ms":…,
#    "log_line_to_screen_ms":…,"step_detail_ms":…,"foreach_items":100000,
#    "foreach_run_page_ms":…,"foreach_expand_ms":…, …}
# (foreach_*: a run whose one step fans out over 100,000 items, one running
# at a time: its submit until every item is written, and its page until the
# fan-out's node is drawn with its state)
# (medians over the tries; each *_max_ms the worst; the definitions are in
# bench_ui.mjs, which drives headless Chromium: /usr/bin/chromium and
# playwright-core from tests/browser/node_modules), then the server side:
# submit_ms (POST /runs with the YAML), run_json_ms and run_json_bytes
# (GET /runs/{id} of a run just submitted), run_json_done_bytes (of the
# finished run), stream_first_event_ms and stream_event_bytes (the SSE
# stream's first event; the console refuses events over 4 MiB), dag_svg_ms
# and dag_svg_cached_ms (laid out, then from the daemon's cache), and
# run_to_success_ms (the 2,000 `true` steps of one run through the local
# executor, alone on the daemon).
#
# Starts the embedded PostgreSQL and a real bin/ferryd, and submits for each
# of TRIES tries (default 3) a variant of the same shape (40 layers of 50;
# a step needs the same one of the layer before and, when odd, another; the
# variants differ by name, so each is a new workflow version whose dag.svg
# is laid out afresh) twice: the first run's page is run_page_ms (layout not
# cached: bench_ui.mjs checks X-Ferry-Dag-Cache: miss), the second's
# run_page_cached_ms (hit). The first step of every run waits for a file,
# so the runs stay running (the page follows their stream); at the end the
# last try's first run is let go, alone, to success, and its page is where
# step_detail_ms is taken. big_log_tail_ms: a finished step's 200 MB log,
# from the click on its row until its last line is on screen (the console
# fetches the tail only). log_line_to_screen_ms: a step printing its clock
# every 200 ms, its log followed by the page (null when the page shows no
# line live). curves_ms: a finished train step's 100,000 metric lines (2
# metrics), from the click on its row until both curves are drawn (the
# monitor keeps 512 points a series: what is drawn is bounded whatever was
# written); bundle_bytes: the console's assets a page loads, uPlot included.
# compare_ms: #/compare of 5 finished runs whose train steps each wrote
# 5,000 lines of 2 metrics, from the navigation until both charts have
# their 5 series drawn (compare_max_ms the worst of 3 fresh pages).
# BENCH_LAYERS: another size (50 steps a layer); BENCH_PROFILE=1:
# where the page's time goes, on stderr; BENCH_KEEP=1 keeps the directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
LAYERS=${BENCH_LAYERS:-40} WIDTH=50 # BENCH_LAYERS: another size, to see how the figures grow
STEPS=$((LAYERS * WIDTH))
TRIES=${TRIES:-3}
TOKEN=bench-ui-token-0123456789abcdef
AUTH="Authorization: Bearer $TOKEN"

die() {
	echo "bench ui: $*" >&2
	exit 1
}

[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"
[ -x /usr/bin/chromium ] && [ -d tests/browser/node_modules/playwright-core ] ||
	die "chromium or playwright-core missing (make deps)"
WORK=$(mktemp -d /tmp/ferry-bench-ui.XXXXXX)
chmod 755 "$WORK" # the embedded PostgreSQL runs as 'postgres' when we are root
export FERRY_HOME="$WORK/home"
mkdir -p "$FERRY_HOME"
unset FERRY_DATABASE_URL FERRY_URL
daemon=""

cleanup() {
	local rc=$?
	touch "$WORK/go" 2>/dev/null || true
	if [ -n "$daemon" ]; then
		kill -TERM "$daemon" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon" 2>/dev/null || true
	fi
	FERRY_HOME="$WORK/pg" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	if [ $rc -ne 0 ] && [ -f "$WORK/ferryd.log" ]; then
		echo "bench ui: ferryd log (tail):" >&2
		tail -20 "$WORK/ferryd.log" >&2
	fi
	[ -n "${BENCH_KEEP:-}" ] && echo "bench ui: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PG=$(FERRY_HOME="$WORK/pg" bin/ferryd db start 2>"$WORK/pg.log") || { cat "$WORK/pg.log" >&2; die "cannot start PostgreSQL"; }
psql "$PG" -qAtc "CREATE DATABASE bench_ui" >/dev/null
DBURL="${PG/dbname=ferry/dbname=bench_ui}"

env FERRY_DATABASE_URL="$DBURL" FERRY_LISTEN=127.0.0.1:0 FERRY_ADDRESS_FILE="$WORK/ferryd.url" \
	FERRY_API_TOKEN=$TOKEN FERRY_EXECUTOR=local FERRY_LOG_LEVEL=${BENCH_LOG_LEVEL:-warn} \
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

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
median() { sort -n | awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : "null"}'; }

# The workflow of try $1: s00_00 waits for $WORK/go; the rest of layer 0
# needs it; a step of layer l needs step i and (for odd i) step (7i+3)%50 of layer l-1.
workflow() {
	echo "name: ui-bench-$1"
	echo "steps:"
	echo "  - name: s00_00"
	echo "    command: [sh, -c, 'while [ ! -e $WORK/go ]; do sleep 0.1; done']"
	for i in $(seq 1 $((WIDTH - 1))); do
		printf '  - name: s00_%02d\n    needs: [s00_00]\n    command: ["true"]\n' "$i"
	done
	for l in $(seq 1 $((LAYERS - 1))); do
		for i in $(seq 0 $((WIDTH - 1))); do
			if [ $((i % 2)) = 1 ] && [ $(((7 * i + 3) % WIDTH)) != "$i" ]; then
				printf '  - name: s%02d_%02d\n    needs: [s%02d_%02d, s%02d_%02d]\n    command: ["true"]\n' \
					"$l" "$i" $((l - 1)) "$i" $((l - 1)) $(((7 * i + 3) % WIDTH))
			else
				printf '  - name: s%02d_%02d\n    needs: [s%02d_%02d]\n    command: ["true"]\n' "$l" "$i" $((l - 1)) "$i"
			fi
		done
	done
}

# POST /runs with the YAML of file $1; prints the run id
submit() {
	python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$1" >"$WORK/body.json"
	curl -fsS -m 60 -X POST -H "$AUTH" -H 'Content-Type: application/json' --data-binary @"$WORK/body.json" \
		"$URL/api/v1/runs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

get() { curl -fsS -m 60 -H "$AUTH" -o "$2" "$URL/api/v1$1"; }
# succeeded ID WHAT: waits (2 min at most) until run ID is over; it must have succeeded
succeeded() {
	local state=""
	for _ in $(seq 1 600); do
		get "/runs/$1" "$WORK/wait.json"
		state=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"])' "$WORK/wait.json")
		case $state in succeeded | failed | stopped) break ;; esac
		sleep 0.2
	done
	[ "$state" = succeeded ] || die "$2 (run $1) ended $state"
}
stop() { curl -fsS -m 30 -X POST -H "$AUTH" "$URL/api/v1/runs/$1/stop" >/dev/null; }

# the runs: per try, the first and the second run of one workflow version
first=() second=() submit_ms=() json_ms=() svg_ms=() svg_cached_ms=() event_ms=()
for t in $(seq 1 "$TRIES"); do
	workflow "$t" >"$WORK/wf$t.yaml"
	[ "$(grep -c '^  - name:' "$WORK/wf$t.yaml")" = $STEPS ] || die "the workflow has not $STEPS steps"
	t0=$(date +%s%N)
	a=$(submit "$WORK/wf$t.yaml") || die "the $STEPS-step workflow was refused"
	submit_ms+=("$(ms_since "$t0")")
	b=$(submit "$WORK/wf$t.yaml")
	first+=("$a") second+=("$b")
	# the server side of a run page, on a version of its own (the browser's first runs must lay theirs out)
	workflow "server-$t" >"$WORK/server$t.yaml"
	c=$(submit "$WORK/server$t.yaml")
	t0=$(date +%s%N)
	get "/runs/$c" "$WORK/run.json"
	json_ms+=("$(ms_since "$t0")")
	t0=$(date +%s%N)
	# the stream's first event (the run's JSON on one data line): its size
	python3 - "$URL/api/v1/runs/$c/stream" "$TOKEN" >"$WORK/event.len" <<-'PY'
		import sys, urllib.request
		req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
		with urllib.request.urlopen(req, timeout=30) as r:
		    for line in r:
		        if line.startswith(b"data: "):
		            print(len(line) - 7)
		            break
	PY
	event_ms+=("$(ms_since "$t0")")
	t0=$(date +%s%N)
	get "/runs/$c/dag.svg" "$WORK/dag.svg"
	svg_ms+=("$(ms_since "$t0")")
	t0=$(date +%s%N)
	get "/runs/$c/dag.svg" "$WORK/dag.svg"
	svg_cached_ms+=("$(ms_since "$t0")")
	stop "$c"
done
json_bytes=$(stat -c %s "$WORK/run.json")
event_bytes=$(cat "$WORK/event.len")
[ "$(grep -c 'class="node step"' "$WORK/dag.svg")" = $STEPS ] || die "dag.svg has not $STEPS nodes"

# a step that prints its own clock (ms since the epoch) every 200 ms for 15 s
printf '%s\n' "name: ui-bench-log" "steps:" "  - name: ticker" \
	"    command: [sh, -c, 'for i in \$(seq 1 75); do echo \"tick \$(date +%s%3N)\"; sleep 0.2; done']" >"$WORK/log.yaml"

# browser VAR=VALUE… PHASE: bench_ui.mjs's PHASE, its JSON on stdout
browser() {
	(cd tests/browser && env FERRY_URL="$URL" FERRY_API_TOKEN=$TOKEN BENCH_STEPS=$STEPS "${@:1:$#-1}" \
		timeout -k 5 300 node ../bench/bench_ui.mjs "${@: -1}")
}
runs_csv() { local IFS=,; echo "$*"; }
pages=$(browser BENCH_FIRST="$(runs_csv "${first[@]}")" BENCH_SECOND="$(runs_csv "${second[@]}")" \
	BENCH_LOG_YAML="$WORK/log.yaml" pages) || die "bench_ui.mjs pages failed"

# a fan-out of FANOUT items (BENCH_FANOUT_ITEMS, default 100,000), one running at a time and
# waiting for $WORK/go: its expansion (submit to every item written), then its page
FANOUT=${BENCH_FANOUT_ITEMS:-100000}
printf '%s\n' "name: ui-bench-fanout" "steps:" "  - name: items" "    foreach: {range: $FANOUT}" "    max_parallel: 1" \
	"    command: [sh, -c, 'while [ ! -e $WORK/go ]; do sleep 0.1; done']" >"$WORK/fanout.yaml"
t0=$(date +%s%N)
fan=$(submit "$WORK/fanout.yaml") || die "the fan-out was refused"
for _ in $(seq 1 600); do
	get "/runs/$fan" "$WORK/fan.json"
	total=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["steps"][0]; print((s.get("items") or {}).get("total", 0))' "$WORK/fan.json")
	[ "$total" = "$FANOUT" ] && break
	sleep 0.1
done
[ "$total" = "$FANOUT" ] || die "the fan-out has $total of $FANOUT items after 60 s"
expand_ms=$(ms_since "$t0")
fanpage=$(browser BENCH_FANOUT="$fan" BENCH_FANOUT_ITEMS="$FANOUT" fanout) || die "bench_ui.mjs fanout failed"
stop "$fan"

# the 2,000 steps run, alone: the last try's first run, to success
last=${first[-1]}
for id in "${first[@]}" "${second[@]}"; do [ "$id" = "$last" ] || stop "$id"; done
touch "$WORK/go"
t0=$(date +%s%N)
state=""
for _ in $(seq 1 1800); do
	get "/runs/$last" "$WORK/run.json"
	state=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"])' "$WORK/run.json")
	case $state in succeeded | failed | stopped) break ;; esac
	sleep 0.2
done
[ "$state" = succeeded ] || die "run $last ended $state"
run_ms=$(ms_since "$t0")
done_bytes=$(stat -c %s "$WORK/run.json")
detail=$(browser BENCH_DETAIL="$last" detail) || die "bench_ui.mjs detail failed"

# a finished step with a 200 MB log: its tail on screen after a click
BIGLOG=209715200
printf '%s\n' "name: ui-bench-biglog" "steps:" "  - name: big" \
	"    command: [sh, -c, 'yes \"the quick brown fox jumps over the lazy dog 0123456789\" | head -c $BIGLOG; echo; echo the-very-last-line']" >"$WORK/biglog.yaml"
big=$(submit "$WORK/biglog.yaml") || die "the big-log run was refused"
succeeded "$big" "the big-log run"
biglog=$(browser BENCH_BIGLOG="$big" BENCH_BIGLOG_BYTES=$BIGLOG biglog) || die "bench_ui.mjs biglog failed"

# a finished train step that wrote 100,000 lines of 2 metrics: its training curves on screen after a click
CURVES=100000
printf '%s\n' "name: ui-bench-curves" "steps:" "  - name: train" "    kind: train" \
	"    command: [python3, -c, 'import os; f = open(os.environ[\"FERRY_METRICS_FILE\"], \"a\"); f.writelines(\"{\\\"step\\\": %d, \\\"loss\\\": %f, \\\"accuracy\\\": %f}\\n\" % (i, 1.0 / (i + 1), 1 - 1.0 / (i + 1)) for i in range($CURVES))']" \
	"    hang: {period: 300ms}" >"$WORK/curves.yaml"
cur=$(submit "$WORK/curves.yaml") || die "the curves run was refused"
succeeded "$cur" "the curves run"
curves=$(browser BENCH_CURVES="$cur" BENCH_CURVES_POINTS=$CURVES curves) || die "bench_ui.mjs curves failed"

# 5 runs of one workflow (a param changes the curve), each a train step writing 5,000 lines of 2
# metrics, then waiting a second (the monitor follows the file while the job runs, every hang period)
COMPARE_POINTS=5000
printf '%s\n' "name: ui-bench-compare" "params:" "  k: {type: number, default: 1}" "steps:" "  - name: train" "    kind: train" \
	"    command: [python3, -c, 'import os, time; k = float(os.environ[\"FERRY_PARAM_K\"]); f = open(os.environ[\"FERRY_METRICS_FILE\"], \"a\"); f.writelines(\"{\\\"step\\\": %d, \\\"loss\\\": %f, \\\"accuracy\\\": %f}\\n\" % (i, k / (i + 1), 1 - k / (i + k)) for i in range($COMPARE_POINTS)); f.close(); time.sleep(1)']" \
	"    hang: {period: 300ms}" >"$WORK/compare.yaml"
cmp=()
for k in 1 2 3 4 5; do
	python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read(), "params": {"k": int(sys.argv[2])}}))' \
		"$WORK/compare.yaml" "$k" >"$WORK/body.json"
	id=$(curl -fsS -m 60 -X POST -H "$AUTH" -H 'Content-Type: application/json' --data-binary @"$WORK/body.json" \
		"$URL/api/v1/runs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') || die "a compare run was refused"
	cmp+=("$id")
done
for id in "${cmp[@]}"; do
	succeeded "$id" "a compare run"
done
compare=$(browser BENCH_COMPARE="$(runs_csv "${cmp[@]}")" BENCH_COMPARE_POINTS=$COMPARE_POINTS compare) || die "bench_ui.mjs compare failed"

med() { printf '%s\n' "$@" | median; }
printf '{"bench":"ui","steps":%d,%s,%s,%s,%s,%s,%s,"foreach_expand_ms":%s,"submit_ms":%s,"run_json_ms":%s,"run_json_bytes":%s,"run_json_done_bytes":%s,"stream_first_event_ms":%s,"stream_event_bytes":%s,"dag_svg_ms":%s,"dag_svg_cached_ms":%s,"run_to_success_ms":%s}\n' \
	"$STEPS" "$(echo "$pages" | tail -1 | sed 's/^{//; s/}$//')" "$(echo "$detail" | tail -1 | sed 's/^{//; s/}$//')" \
	"$(echo "$fanpage" | tail -1 | sed 's/^{//; s/}$//')" "$(echo "$biglog" | tail -1 | sed 's/^{//; s/}$//')" \
	"$(echo "$curves" | tail -1 | sed 's/^{//; s/}$//')" "$(echo "$compare" | tail -1 | sed 's/^{//; s/}$//')" "$expand_ms" "$(med "${submit_ms[@]}")" "$(med "${json_ms[@]}")" "$json_bytes" "$done_bytes" "$(med "${event_ms[@]}")" \
	"$event_bytes" "$(med "${svg_ms[@]}")" "$(med "${svg_cached_ms[@]}")" "$run_ms"
