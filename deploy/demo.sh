#!/usr/bin/env bash
# make demo: start the embedded PostgreSQL and ferryd, run the example
# pipeline through the daemon with the CLI, show the result, then stop both.
set -euo pipefail
cd "$(dirname "$0")/.."
export FERRY_HOME=${FERRY_HOME:-$PWD/.ferry}
export FERRY_LISTEN=${FERRY_LISTEN:-127.0.0.1:8080}
export FERRY_URL=${FERRY_URL:-http://$FERRY_LISTEN}
mkdir -p "$FERRY_HOME"
if [ "$(id -u)" = 0 ]; then
	# the embedded PostgreSQL runs as 'postgres' and must be able to reach FERRY_HOME
	if ! runuser -u postgres -- test -x "$FERRY_HOME" 2>/dev/null; then
		chmod o+x "$FERRY_HOME" 2>/dev/null || true
	fi
	if ! runuser -u postgres -- test -x "$FERRY_HOME" 2>/dev/null; then
		alt=/var/tmp/ferry-demo
		echo "demo: the postgres user cannot enter $FERRY_HOME (a parent directory is private); using $alt"
		export FERRY_HOME=$alt
		mkdir -p "$FERRY_HOME"
		chmod 755 "$FERRY_HOME"
	fi
fi

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if curl -fsS "$FERRY_URL/healthz" >/dev/null 2>&1; then
	echo "demo: something already answers on $FERRY_URL; stop it or set FERRY_LISTEN" >&2
	exit 1
fi

say "starting ferryd (state in $FERRY_HOME, log in $FERRY_HOME/ferryd.log)"
bin/ferryd >"$FERRY_HOME/ferryd.log" 2>&1 &
pid=$!
cleanup() {
	say "stopping ferryd and the embedded PostgreSQL"
	kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	bin/ferryd db stop || true
}
trap cleanup EXIT
for _ in $(seq 1 300); do
	curl -fsS "$FERRY_URL/healthz" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$FERRY_HOME/ferryd.log"; exit 1; }
	sleep 0.1
done
grep -E 'PostgreSQL|listening' "$FERRY_HOME/ferryd.log" || true

say "ferry validate workflows/hello.yaml"
bin/ferry validate workflows/hello.yaml

say "ferry submit workflows/hello.yaml -p who=demo --watch"
out=$(mktemp)
set +e
bin/ferry submit workflows/hello.yaml -p who=demo --watch | tee "$out"
rc=${PIPESTATUS[0]}
set -e
id=$(head -1 "$out"); rm -f "$out"

say "ferry get $id"
bin/ferry get "$id"

say "ferry list"
bin/ferry list --limit 5

say "logs of the retried step (attempt 1 failed on purpose, attempt 2 succeeded)"
for f in "$FERRY_HOME"/runs/"$id"/flaky/*/log; do echo "--- $f"; cat "$f"; done

if [ "$rc" -ne 0 ]; then
	echo "demo: run $id did not succeed" >&2
	exit 1
fi
say "demo finished: run $id succeeded. Try: bin/ferryd & then bin/ferry dev run workflows/hello.yaml"
