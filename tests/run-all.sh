#!/usr/bin/env bash
# make test: the unit tests (each binary given, in parallel), then the
# integration suite with the browser suite (tests/browser: its own
# PostgreSQL and daemon) beside it, its output printed after. The unit
# binaries do not overlap the lanes: test_haproxy's reload bound fails on a
# machine that busy. The last line is the total for all three: "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
out=$(mktemp) bout=$(mktemp) uout=$(mktemp)
bpid= upid=
trap '[ -n "$bpid$upid" ] && kill $bpid $upid 2>/dev/null; rm -f "$out" "$bout" "$uout"' EXIT
tests/run-unit.sh "$@" >"$uout" 2>&1 </dev/null
cat "$uout"
unit=$(grep -E '^unit: [0-9]+ passed, [0-9]+ failed$' "$uout" | tail -1)
# the console in headless Chromium (about 90 s), in the background
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
