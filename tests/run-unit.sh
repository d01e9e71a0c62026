#!/usr/bin/env bash
# Runs each unit-test binary and prints one closing line: N passed, N failed.
set -u
passed=0 failed=0
for t in "$@"; do
	out=$("$t" 2>&1); rc=$?
	echo "$out" | grep -E '^\[  (PASSED|FAILED) \]|^\[  FAILED  \]' >/dev/null
	p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	f=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
	if [ $rc -ne 0 ]; then
		echo "$out"
		[ -z "$f" ] && failed=$((failed + 1))
	fi
	echo "unit: $(basename "$t"): ${p:-0} passed, ${f:-0} failed"
done
echo "unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
