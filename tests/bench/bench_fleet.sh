#!/usr/bin/env bash
# bench_fleet: two hosts of a fleet on this machine — two ferryd, each with
# its own FERRY_HOME (no shared disk) and FERRY_HOST, one PostgreSQL — and
# what it costs to read from one what the other holds (issue 29). Prints
# one JSON line:
#   {"bench":"fleet","hosts":2,"replace_s":…,"failed_requests_during_host_loss":…,
#    "log_forward_p50_ms":…,"log_forward_p99_ms":…,"log_direct_p99_ms":…,
#    "log_requests":N,"artifact_mb":…,"artifact_fetch_mb_per_s":…,"artifact_local_mb_per_s":…}
#
#  - log_forward_*: a step run on host A wrote a log of LOG_LINES lines;
#    LOG_REQUESTS GETs of a 4 KiB range of it (offset moving through the
#    log) through host B's API, which forwards each to A's
#    (api_forward.c), timed by curl (time_total); log_direct_p99_ms: the
#    same GETs of A's API, for comparison.
#  - artifact_*: a model of ARTIFACT_MB MB of random bytes registered on
#    A, downloaded through B's API: B fetches the blob from A by its
#    sha256, checks it and keeps it (store_blobs.c), then sends it;
#    artifact_fetch_mb_per_s is that first download's rate, the second
#    (from B's own store) artifact_local_mb_per_s.
#  - replace_s, failed_requests_during_host_loss: a deployment of 2
#    replicas made by a deploy step on B (A's one job slot held, so the
#    step runs there), served through HAProxy on A (the leader); a client
#    POSTs through the front every 20 ms; B's daemon and its replicas are
#    killed (the host lost): replace_s is from the kill until the front
#    answers again from the replicas A started in their place, and
#    failed_requests_during_host_loss counts the requests that failed
#    meanwhile (the lease, FERRY_LEASE_MS, bounds the detection).
# Everything it started is stopped at the end and its directory removed;
# BENCH_KEEP=1 keeps it (logs).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
LOG_LINES=${LOG_LINES:-200000}
LOG_REQUESTS=${LOG_REQUESTS:-200}
ARTIFACT_MB=${ARTIFACT_MB:-64}
TOKEN=bench-fleet-token-0123456789

die() {
	echo "bench fleet: $*" >&2
	exit 1
}

[ -x bin/ferryd ] || die "bin/ferryd is missing; run make first"
WORK=$(mktemp -d /tmp/ferry-bench-fleet.XXXXXX)
chmod 755 "$WORK" # the embedded PostgreSQL runs as 'postgres' when we are root
unset FERRY_DATABASE_URL FERRY_URL FERRY_HOME
AUTH="Authorization: Bearer $TOKEN"
declare -A PID URL

cleanup() {
	local rc=$? h
	for h in "${!PID[@]}"; do
		kill -TERM "${PID[$h]}" 2>/dev/null || true
	done
	for h in "${!PID[@]}"; do
		for _ in $(seq 1 100); do kill -0 "${PID[$h]}" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "${PID[$h]}" 2>/dev/null || true
		wait "${PID[$h]}" 2>/dev/null || true
	done
	FERRY_HOME="$WORK/pg" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1 || true
	if [ $rc -ne 0 ]; then
		for h in "${!PID[@]}"; do
			echo "bench fleet: ferryd $h log (tail):" >&2
			tail -10 "$WORK/$h/ferryd.log" >&2 || true
		done
	fi
	if [ -n "${BENCH_KEEP:-}" ]; then
		echo "bench fleet: kept $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PG=$(FERRY_HOME="$WORK/pg" bin/ferryd db start 2>"$WORK/pg.log") || { cat "$WORK/pg.log" >&2; die "cannot start PostgreSQL"; }

# start_host NAME [VAR=VALUE…]: a daemon with its own home, host name NAME, on a free port
start_host() {
	local h=$1 u=""
	shift
	mkdir -p "$WORK/$h"
	env "$@" FERRY_HOME="$WORK/$h" FERRY_HOST="$h" "FERRY_DATABASE_URL=$PG" FERRY_LISTEN=127.0.0.1:0 \
		FERRY_ADDRESS_FILE="$WORK/$h/ferryd.url" "FERRY_API_TOKEN=$TOKEN" "FERRY_LOG_LEVEL=${BENCH_LOG_LEVEL:-info}" \
		bin/ferryd >>"$WORK/$h/ferryd.log" 2>&1 &
	PID[$h]=$!
	for _ in $(seq 1 200); do
		[ -z "$u" ] && [ -s "$WORK/$h/ferryd.url" ] && u=$(head -1 "$WORK/$h/ferryd.url")
		[ -n "$u" ] && curl -fsS -m 2 "$u/readyz" >/dev/null 2>&1 && break
		kill -0 "${PID[$h]}" 2>/dev/null || die "ferryd $h exited at start"
		sleep 0.05
	done
	[ -n "$u" ] && curl -fsS -m 2 "$u/readyz" >/dev/null 2>&1 || die "ferryd $h is not ready"
	URL[$h]=$u
}

# api HOST METHOD PATH [JSON]: prints the body; fails on anything but 2xx
api() {
	curl -fsS -m 60 -X "$2" -H "$AUTH" -H 'Content-Type: application/json' ${4:+--data-binary "$4"} "${URL[$1]}$3" ||
		die "$2 $3 on $1 failed"
}

# run_on HOST YAML: submits on HOST, waits for the run to succeed, prints its id
run_on() {
	local id state
	id=$(api "$1" POST /api/v1/runs "$(jq -n --arg yaml "$2" '{yaml: $yaml}')" | jq -r .id)
	for _ in $(seq 1 1200); do
		state=$(api "$1" GET "/api/v1/runs/$id" | jq -r .state)
		[ "$state" = succeeded ] && { echo "$id"; return; }
		case $state in failed | stopped) die "run $id $state" ;; esac
		sleep 0.1
	done
	die "run $id did not end"
}

# A alone runs the steps: their log and model are on A's disk only; one
# job at a time (a held slot sends the deploy step to B later)
start_host host-a FERRY_MAX_JOBS=1
log_run=$(run_on host-a "name: talk
steps:
  - {name: s, command: [seq, '1', '$LOG_LINES']}")
model_run=$(run_on host-a "name: big
steps:
  - {name: train, kind: train, command: [sh, -c, 'head -c $((ARTIFACT_MB * 1048576)) /dev/urandom >\"\$FERRY_OUTPUT_DIR/model.bin\"']}
  - {name: register, kind: register, needs: [train], model: big}")
# A's one slot held from here on, before B starts: the deploy step below runs on B
hold=$(api host-a POST /api/v1/runs "$(jq -n '{yaml: "name: hold\nsteps:\n  - {name: s, command: [sleep, \"600\"]}"}')" | jq -r .id)
for _ in $(seq 1 300); do
	[ "$(api host-a GET "/api/v1/runs/$hold" | jq -r '.steps[0].state')" = running ] && break
	sleep 0.1
done
start_host host-b
[ ! -e "$WORK/host-b/runs/$log_run" ] || die "host-b has the run's directory: nothing would be forwarded"

# p50 and p99 (ms) of LOG_REQUESTS range GETs of the log through HOST
log_times() {
	local size step i
	size=$(stat -c %s "$WORK/host-a/runs/$log_run/s/1/log")
	step=$(((size - 4096) / LOG_REQUESTS))
	for i in $(seq 0 $((LOG_REQUESTS - 1))); do
		curl -fsS -m 30 -o /dev/null -w '%{time_total}\n' -H "$AUTH" \
			"${URL[$1]}/api/v1/runs/$log_run/steps/s/logs?offset=$((i * step))&length=4096" || die "log GET on $1"
	done | sort -g | awk '{v[NR] = $1 * 1000} END {
		p50 = v[int((NR - 1) * 0.50) + 1]; p99 = v[int((NR - 1) * 0.99) + 1]; printf "%.2f %.2f\n", p50, p99 }'
}
read -r fwd50 fwd99 < <(log_times host-b)
read -r _ direct99 < <(log_times host-a)

# the first download through B fetches the blob from A; the second is B's own
t1=$(curl -fsS -m 300 -o "$WORK/got1" -w '%{time_total}' -H "$AUTH" "${URL[host-b]}/api/v1/models/big/versions/0.0.1/artifact") ||
	die "the first download through host-b failed"
t2=$(curl -fsS -m 300 -o "$WORK/got2" -w '%{time_total}' -H "$AUTH" "${URL[host-b]}/api/v1/models/big/versions/0.0.1/artifact") ||
	die "the second download through host-b failed"
sha=$(api host-a GET /api/v1/models/big/versions/0.0.1 | jq -r .artifact.sha256)
[ "$(sha256sum <"$WORK/got1" | cut -d' ' -f1)" = "$sha" ] || die "the download through host-b does not hash to $sha"
grep -q "blob ${sha:0:12}…: .* fetched from" "$WORK/host-b/ferryd.log" || die "host-b did not fetch the blob from host-a"

# a host lost under a deployment: its replicas replaced on the leader (A)
cat >"$WORK/serve.py" <<'PY'
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def do_GET(self): self.reply()
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0))); self.reply()
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["FERRY_PORT"])), H).serve_forever()
PY
echo '{"inputs": []}' >"$WORK/sample.json"
run_on host-a "name: dep
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo w >\"\$FERRY_OUTPUT_DIR/model.bin\"']}
  - {name: register, kind: register, needs: [train], model: small}
  - {name: deploy, kind: deploy, needs: [register], model: small, serve: [/usr/bin/python3, $WORK/serve.py], sample: $WORK/sample.json, traffic: 100, replicas: 2}" >/dev/null
[ "$(api host-a GET /api/v1/hosts | jq -r '[.hosts[] | select(.name == "host-b") | .replicas][0]')" = 2 ] ||
	die "the deployment's replicas are not on host-b"
front=$(api host-a GET /api/v1/deployments/1 | jq -r 'select(.name == "small") | .port')
[ -n "$front" ] || die "no deployment small"
# the client: a POST every 20 ms; each result "SECONDS.NANOS ok|fail" (-m 1: a request that hangs is a failure)
( while :; do
	if curl -fsS -m 1 -o /dev/null -X POST -d '{}' "http://127.0.0.1:$front/" 2>/dev/null; then r=ok; else r=fail; fi
	echo "$(date +%s.%N) $r"
	sleep 0.02
done ) >"$WORK/client.log" 2>/dev/null &
CLIENT=$!
sleep 2
kill_t=$(date +%s.%N)
kill -KILL "${PID[host-b]}"
unset 'PID[host-b]'
for f in "$WORK"/host-b/deployments/*/runs/*/*/*/status; do
	p=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$f" | tail -n 1)
	[ -n "$p" ] && { kill -KILL -- "-$p" 2>/dev/null || true; }
done
# until the front answered for 2 s again after failing (at most 120 s)
for _ in $(seq 1 1200); do
	back=$(awk -v k="$kill_t" '$1 > k && $2 == "fail" {f = $1} END {printf "%.3f\n", f}' "$WORK/client.log")
	last=$(tail -1 "$WORK/client.log" | cut -d' ' -f1)
	[ "$back" != 0.000 ] && awk -v b="$back" -v l="$last" 'BEGIN {exit !(l - b > 2)}' && break
	sleep 0.1
done
kill "$CLIENT" 2>/dev/null || true
wait "$CLIENT" 2>/dev/null || true
read -r replace_s failed < <(awk -v k="$kill_t" '$1 > k && $2 == "fail" {n++; last = $1} END {
	if (n == 0) print "0 0"; else printf "%.1f %d\n", last - k, n }' "$WORK/client.log")
[ "$(api host-a GET /api/v1/hosts | jq -r '[.hosts[] | select(.name == "host-a") | .replicas][0]')" = 2 ] ||
	die "the replicas were not replaced on host-a"

jq -cn --argjson f50 "$fwd50" --argjson f99 "$fwd99" --argjson d99 "$direct99" --argjson n "$LOG_REQUESTS" \
	--argjson mb "$ARTIFACT_MB" --argjson t1 "$t1" --argjson t2 "$t2" \
	--argjson rs "$replace_s" --argjson failed "$failed" \
	'{bench: "fleet", hosts: 2, replace_s: $rs, failed_requests_during_host_loss: $failed,
	  log_forward_p50_ms: $f50, log_forward_p99_ms: $f99, log_direct_p99_ms: $d99, log_requests: $n,
	  artifact_mb: $mb, artifact_fetch_mb_per_s: (($mb / $t1) * 10 | round / 10),
	  artifact_local_mb_per_s: (($mb / $t2) * 10 | round / 10)}'
