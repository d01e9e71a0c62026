#!/usr/bin/env bash
# Browser suite: the console (/ui/) in real headless Chromium (Debian's
# chromium, driven by playwright-core from tests/browser/node_modules: make
# deps installs both) against a real ferryd and PostgreSQL, started here as
# tests/integration does (the embedded cluster, a fresh database and
# FERRY_HOME, a daemon on a free port). Screenshots go to build/browser/.
# Usage: run.sh [FILE.test.mjs…]. Closing line: "browser: N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ROOT PATH="$ROOT/bin:$PATH"
. "$ROOT/tests/scratch.sh"
SUITE=$(scratch_make ferry-browser 2) || exit 1 # on a tmpfs when it can be (tests/scratch.sh)
chmod 755 "$SUITE"
export SUITE

cleanup() {
	for f in "$SUITE"/*/daemon.*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	# what a deploy step left running (replicas, HAProxy): killed once the daemon is gone
	declare -F stop_deployments >/dev/null && stop_deployments "$SUITE/console"
	if declare -F pg_stop_now >/dev/null; then pg_stop_now "$SUITE/pg"; else FERRY_HOME="$SUITE/pg" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1; fi
	[ -n "${KEEP:-}" ] || scratch_drop "$SUITE"
}
trap cleanup EXIT

if [ ! -x /usr/bin/chromium ] || [ ! -d "$ROOT/tests/browser/node_modules/playwright-core" ]; then
	echo "browser: chromium or playwright-core missing (run make deps)"
	echo "browser: 0 passed, 1 failed"
	exit 1
fi

PG_CONN=$(FERRY_HOME="$SUITE/pg" "$ROOT/bin/ferryd" db start 2>"$SUITE/pg-start.log") || {
	cat "$SUITE/pg-start.log"; echo "browser: cannot start PostgreSQL"; echo "browser: 0 passed, 1 failed"; exit 1; }
export PG_CONN
. "$ROOT/tests/integration/lib.sh"

# one daemon for the whole suite, set up as run_one sets up a test
export FERRY_HOME="$SUITE/console"
mkdir -p "$FERRY_HOME"
psql "$PG_CONN" -qAtc "CREATE DATABASE t_console" >/dev/null || { echo "browser: 0 passed, 1 failed"; exit 1; }
export FERRY_DATABASE_URL="${PG_CONN/dbname=ferry/dbname=t_console}"
export FERRY_API_TOKEN="browser-token-$(date +%s%N)"
export FERRY_LEASE_MS=2000 FERRY_POLL_MS=200 FERRY_KILL_GRACE_MS=1000 FERRY_SHUTDOWN_GRACE_MS=2000
export FERRY_LISTEN=127.0.0.1:0
unset FERRY_PORT FERRY_ADDRESS_FILE
( start_daemon a ) || { tail -20 "$FERRY_HOME/ferryd-a.log"; echo "browser: 0 passed, 1 failed"; exit 1; }
use_daemon a
export FERRY_SHOTS="$ROOT/build/browser"
mkdir -p "$FERRY_SHOTS"

# each *.test.mjs (or those named: run.sh pages.test.mjs) runs in its own
# node and browser against this daemon, under a bound: a hung browser never
# hangs the suite. Each prints "browser: N passed, N failed"; the sum is the last line.
rc=0 total_p=0 total_f=0
cd "$ROOT/tests/browser"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(*.test.mjs)
for f in "${files[@]}"; do
	echo "# $f"
	timeout -k 5 240 node "$f" | tee "$SUITE/out.txt"
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
	line=$(grep -E '^browser: [0-9]+ passed, [0-9]+ failed$' "$SUITE/out.txt" | tail -1)
	if [ -z "$line" ]; then
		total_f=$((total_f + 1))
		echo "# $f ended without its summary line"
		continue
	fi
	p=${line#browser: }; p=${p%% *}
	fl=${line#*passed, }; fl=${fl%% *}
	total_p=$((total_p + p)) total_f=$((total_f + fl))
done
cd "$ROOT"
[ $rc -eq 0 ] || { echo "    # --- ferryd-a.log (tail)"; tail -15 "$FERRY_HOME/ferryd-a.log" | sed 's/^/    # /'; }
stop_daemons
if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$FERRY_HOME"/ferryd-*.log 2>/dev/null; then
	grep -hE -A30 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$FERRY_HOME"/ferryd-*.log | head -60
	echo "browser: sanitizer report in ferryd's log"
	total_f=$((total_f + 1)) rc=1
fi
echo "browser: $total_p passed, $total_f failed"
exit $rc
