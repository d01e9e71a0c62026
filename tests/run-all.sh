#!/usr/bin/env bash
# make test: the unit tests (each binary given), the integration suite, and
# the browser suite (tests/browser) beside it (its own PostgreSQL and daemon;
# its output is printed after the integration suite's); the last line is the
# total for all three: "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
out=$(mktemp) bout=$(mktemp)
bpid=
trap '[ -n "$bpid" ] && kill "$bpid" 2>/dev/null; rm -f "$out" "$bout"' EXIT
tests/run-unit.sh "$@" | tee "$out"
unit=$(grep -E '^unit: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
# the console in headless Chromium (about 10 s), in the background
tests/browser/run.sh >"$bout" 2>&1 </dev/null &
bpid=$!
tests/integration/run.sh | tee "$out"
integ=$(grep -E '^integration: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
wait "$bpid"
bpid=
cat "$bout"
browser=$(grep -E '^browser: [0-9]+ passed, [0-9]+ failed$' "$bout" | tail -1)
p=0 f=0
for line in "$unit" "$integ" "$browser"; do
	if [ -z "$line" ]; then f=$((f + 1)); continue; fi   # a suite that did not report failed
	set -- $line
	p=$((p + $2)); f=$((f + $4))
done
echo "$p passed, $f failed"
[ "$f" -eq 0 ]
