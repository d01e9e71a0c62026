#!/usr/bin/env bash
# Runs each unit-test binary and prints one closing line: N passed, N failed.
# The binaries run at once, UNIT_JOBS at a time (default: twice the CPU
# count: most of them wait on HAProxy, processes and sockets, not the CPU —
# on 2 cores 4 at a time took 17–19 s, 2 at a time 24–26 s);
# each one's output is kept apart and printed in the order given (the
# split one's long test first).
#
# A binary whose one long test would be the whole run's critical path is
# run twice at once, that test alone and the others (SPLIT: the binary's
# name, then the test's cmocka filter; the binary takes --only and --skip).
set -u
SPLIT=("test_haproxy" "*random_changes")
passed=0 failed=0
tmp=$(mktemp -d /tmp/ferry-unit.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
jobs=()
for t in "$@"; do # the long test first
	[ "$(basename "$t")" = "${SPLIT[0]}" ] && jobs+=("$t --only ${SPLIT[1]}")
done
for t in "$@"; do
	if [ "$(basename "$t")" = "${SPLIT[0]}" ]; then
		jobs+=("$t --skip ${SPLIT[1]}")
	else
		jobs+=("$t")
	fi
done
i=0
for t in "${jobs[@]}"; do
	printf '%s\0%s\0' "$i" "$t"
	i=$((i + 1))
done | xargs -0 -r -n 2 -P "${UNIT_JOBS:-$((2 * $(nproc)))}" sh -c 'set -f; $2 >"$0/$1.out" 2>&1; echo $? >"$0/$1.rc"' "$tmp"
set -- "${jobs[@]}"
i=0
for t in "$@"; do
	out=$(cat "$tmp/$i.out" 2>/dev/null); rc=$(cat "$tmp/$i.rc" 2>/dev/null || echo 1)
	i=$((i + 1))
	# a binary may run several groups (cmocka prints a summary for each): their sums
	p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s += $1} END {if (NR) print s}')
	f=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s += $1} END {if (NR) print s}')
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
	if [ "$rc" -ne 0 ]; then
		echo "$out"
		[ -z "$f" ] && failed=$((failed + 1))
	fi
	echo "unit: $(basename "$t"): ${p:-0} passed, ${f:-0} failed"
done
echo "unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
