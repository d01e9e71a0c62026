#!/usr/bin/env bash
# bench_fleet: hosts of a fleet on this machine — ferryd each with its own
# FERRY_HOME (no shared disk), FERRY_HOST and address, one PostgreSQL — what
# it costs to read from one what another holds, and how a deployment
# rides out a host's loss (issue 29). Prints
# one JSON line:
#   {"bench":"fleet","hosts":3,"replace_s":…,"failed_requests_during_host_loss":…,
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
#  - replace_s, failed_requests_during_host_loss: a third host (host-c)
#    joins; a deployment of 3 replicas is placed one on each host (each
#    listening on its host's address: 127.0.0.1, .2, .3); a client POSTs
#    through A's front every 20 ms; C's daemon and its replica are killed
#    (the host lost): replace_s is from the kill until the replacement
#    placed on another host is healthy (the lease, FERRY_LEASE_MS, bounds
#    the detection), failed_requests_during_host_loss the client's
#    requests that failed meanwhile (HAProxy sends one that a dead replica
#    refuses to another: with the replicas spread, none should).
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
	# what outlives a daemon by design (its jobs, its replicas, its HAProxy), the killed host's too:
	# left running after the bench, $WORK gone (a `sleep 600` job, three replicas, six HAProxies)
	local f p
	for f in "$WORK"/*/runs/*/*/*/status "$WORK"/*/deployments/*/runs/*/*/*/status; do
		[ -f "$f" ] || continue
		p=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$f" | tail -n 1)
		[ -n "$p" ] && { kill -KILL -- "-$p" 2>/dev/null || true; }
	done
	pkill -KILL -f "haproxy .*$WORK/" 2>/dev/null || true
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
# of its own address (host-a 127.0.0.1, host-b .2, host-c .3)
start_host() {
	local h=$1 u="" ip
	shift
	case $h in host-b) ip=127.0.0.2 ;; host-c) ip=127.0.0.3 ;; *) ip=127.0.0.1 ;; esac
	mkdir -p "$WORK/$h"
	env FERRY_LISTEN="$ip:0" "$@" FERRY_HOME="$WORK/$h" FERRY_HOST="$h" "FERRY_DATABASE_URL=$PG" \
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

# a host lost under a deployment: its replica replaced on another host
start_host host-c
cat >"$WORK/serve.py" <<'PY'
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def do_GET(self): self.reply()
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0))); self.reply()
http.server.ThreadingHTTPServer((os.environ["FERRY_BIND_ADDR"], int(os.environ["FERRY_PORT"])), H).serve_forever()
PY
echo '{"inputs": []}' >"$WORK/sample.json"
run_on host-a "name: dep
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo w >\"\$FERRY_OUTPUT_DIR/model.bin\"']}
  - {name: register, kind: register, needs: [train], model: small}
  - {name: deploy, kind: deploy, needs: [register], model: small, serve: [/usr/bin/python3, $WORK/serve.py], sample: $WORK/sample.json, traffic: 100, replicas: 3}" >/dev/null
[ "$(api host-a GET /api/v1/hosts | jq -r '[.hosts[] | select(.replicas == 1) | .name] | sort | join(",")')" = host-a,host-b,host-c ] ||
	die "the deployment's replicas are not one on each host: $(api host-a GET /api/v1/hosts | jq -c '[.hosts[] | {name, replicas}]')"
dep=$(api host-a GET /api/v1/deployments | jq -r '.[] | select(.name == "small") | .id')
[ -n "$dep" ] || die "no deployment small"
front=$(api host-a GET "/api/v1/deployments/$dep" | jq -r .port)
# the slot host-c runs, and when every replica is healthy again
idx=$(api host-a GET "/api/v1/deployments/$dep" | jq -r '.versions[0].replica_list[] | select(.handle.host == "host-c") | .idx')
healthy_elsewhere() {
	api host-a GET "/api/v1/deployments/$dep" | jq -e --argjson i "$idx" \
		'.versions[0].replica_list[] | select(.idx == $i and .handle.host != "host-c" and .health == "healthy")' >/dev/null
}
# the client: a POST every 20 ms; each result "SECONDS.NANOS ok|fail" (-m 1: a request that hangs is a failure)
( while :; do
	if curl -fsS -m 1 -o /dev/null -X POST -d '{}' "http://127.0.0.1:$front/" 2>/dev/null; then r=ok; else r=fail; fi
	echo "$(date +%s.%N) $r"
	sleep 0.02
done ) >"$WORK/client.log" 2>/dev/null &
CLIENT=$!
sleep 2
kill_t=$(date +%s.%N)
kill -KILL "${PID[host-c]}"
{ wait "${PID[host-c]}"; } 2>/dev/null || true
unset 'PID[host-c]'
for f in "$WORK"/host-c/deployments/*/runs/*/*/*/status; do
	p=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$f" | tail -n 1)
	[ -n "$p" ] && { kill -KILL -- "-$p" 2>/dev/null || true; }
done
# until the replacement is healthy on another host (at most 120 s)
done_t=""
for _ in $(seq 1 1200); do
	healthy_elsewhere && { done_t=$(date +%s.%N); break; }
	sleep 0.1
done
[ -n "$done_t" ] || die "host-c's replica was not replaced within 120 s"
sleep 1
kill "$CLIENT" 2>/dev/null || true
wait "$CLIENT" 2>/dev/null || true
replace_s=$(awk -v k="$kill_t" -v d="$done_t" 'BEGIN {printf "%.1f\n", d - k}')
failed=$(awk -v k="$kill_t" '$1 > k && $2 == "fail" {n++} END {print n + 0}' "$WORK/client.log")

jq -cn --argjson f50 "$fwd50" --argjson f99 "$fwd99" --argjson d99 "$direct99" --argjson n "$LOG_REQUESTS" \
	--argjson mb "$ARTIFACT_MB" --argjson t1 "$t1" --argjson t2 "$t2" \
	--argjson rs "$replace_s" --argjson failed "$failed" \
	'{bench: "fleet", hosts: 3, replace_s: $rs, failed_requests_during_host_loss: $failed,
	  log_forward_p50_ms: $f50, log_forward_p99_ms: $f99, log_direct_p99_ms: $d99, log_requests: $n,
	  artifact_mb: $mb, artifact_fetch_mb_per_s: (($mb / $t1) * 10 | round / 10),
	  artifact_local_mb_per_s: (($mb / $t2) * 10 | round / 10)}'
