#!/usr/bin/env bash
# Integration suite: one real PostgreSQL (ferryd's embedded cluster) for the
# whole run, a fresh database, FERRY_HOME and port per test, real ferryd
# processes, real jobs, real HTTP. Every test is a function test_* in a
# tests/integration/t_*.sh file; run one with: tests/integration/run.sh NAME…
# Closing line: "integration: N passed, N failed" (tests/run-all.sh adds the total).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ROOT PATH="$ROOT/bin:$PATH"
SUITE=$(mktemp -d /tmp/ferry-it.XXXXXX)
chmod 755 "$SUITE"
export SUITE

cleanup() {
	for f in "$SUITE"/*/daemon.*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	FERRY_HOME="$SUITE/pg" "$ROOT/bin/ferryd" db stop >/dev/null 2>&1
	pkill -9 -f "$SUITE/" 2>/dev/null
	[ -n "${KEEP:-}" ] || rm -rf "$SUITE"
}
trap cleanup EXIT

PG_CONN=$(FERRY_HOME="$SUITE/pg" "$ROOT/bin/ferryd" db start 2>"$SUITE/pg-start.log") || {
	cat "$SUITE/pg-start.log"; echo "integration: cannot start PostgreSQL"; echo "integration: 0 passed, 1 failed"; exit 1; }
export PG_CONN

. "$ROOT/tests/integration/lib.sh"
for f in "$ROOT"/tests/integration/t_*.sh; do . "$f"; done

tests=("$@")
[ ${#tests[@]} -gt 0 ] || mapfile -t tests < <(declare -F | awk '{print $3}' | grep '^test_' | sort)

passed=0 failed=0 n=0 failed_names=()
for t in "${tests[@]}"; do
	n=$((n + 1))
	start=$(date +%s.%N)
	( run_one "$t" ) > "$SUITE/$t.out" 2>&1
	rc=$?
	stop_deployments "$SUITE/$t"
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		printf 'ok %d - %s (%.1fs)\n' "$n" "$t" "$secs"
	else
		failed=$((failed + 1)); failed_names+=("$t")
		printf 'not ok %d - %s (%.1fs)\n' "$n" "$t" "$secs"
		sed 's/^/    # /' "$SUITE/$t.out" | tail -40
		for l in "$SUITE/$t"/ferryd*.log; do
			[ -f "$l" ] && { echo "    # --- $(basename "$l") (tail)"; tail -15 "$l" | sed 's/^/    # /'; }
		done
	fi
done
[ $failed -eq 0 ] || echo "integration: failed: ${failed_names[*]}"
echo "integration: $passed passed, $failed failed"
[ $failed -eq 0 ]
