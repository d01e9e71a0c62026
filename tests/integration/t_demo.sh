# make demo's script (deploy/demo.sh) as a new user meets it: run twice in
# a row in one checkout, on a port the system picks (FERRY_LISTEN port 0,
# as its own message suggests when 8080 is taken). Each run succeeds,
# prints the address it really listens on, narrates the versions it made
# (what the registry then says, not numbers written into the script), stops
# everything it started, and leaves the checkout's git status as it was.
# (make demo itself is deps + build + this script; here its data trigger
# waits 1 s of quiet instead of 5 s, DEMO_QUIET=1s, and its load test holds
# p99 < 10 s instead of 500 ms beside the other lanes, DEMO_P99_MS=10000, and
# each candidate is cross-validated on 2 folds, not 5, DEMO_FOLDS=2.)

# the version the line after the narration "== ferry models get digits
# production   (still V: …)" prints, and V; the demo's output in $1
demo_production_told_and_shown() {
	sed -n 's/.*ferry models get digits production *(still \([0-9.]*\):.*/\1/p' "$1" | tail -1
	awk '/ferry models get digits production *\(still/ {f = 1; next} f && /^Version:/ {print $2; exit}' "$1"
}

# the checkout's changes to tracked files, and new files where the demo
# once wrote (workflows/, deploy/) or could (the top level): other lanes
# run beside this test, but none of them writes into the checkout either
demo_git_status() {
	git -C "$ROOT" status --porcelain --untracked-files=no
	git -C "$ROOT" status --porcelain --untracked-files=all -- workflows deploy | grep '^??'
	git -C "$ROOT" status --porcelain --untracked-files=normal | grep '^?? [^/]*$'
	true
}

test_demo_twice_on_port_0_leaves_the_checkout_clean() {
	local before after out i told shown url
	before=$(demo_git_status)
	for i in 1 2; do
		out="$FERRY_HOME/demo.$i.out"
		DEMO_QUIET=1s DEMO_P99_MS=10000 DEMO_FOLDS=2 FERRY_DEMO_HOME="$FERRY_HOME/demo" FERRY_LISTEN=127.0.0.1:0 "$ROOT/deploy/demo.sh" >"$out" 2>&1 ||
			{ tail -40 "$out"; fail "demo run $i failed"; }
		grep -q "== demo finished" "$out" || { tail -20 "$out"; fail "demo run $i did not finish"; }
		grep -q "the data trigger waits for 1 s of quiet" "$out" || fail "demo run $i: DEMO_QUIET not taken"
		grep -q "the deploy's load test holds p99 < 10000 ms (DEMO_P99_MS)" "$out" || fail "demo run $i: DEMO_P99_MS not taken"
		grep -q "each candidate is cross-validated on 2 folds (DEMO_FOLDS)" "$out" || fail "demo run $i: DEMO_FOLDS not taken"
		url=$(sed -n 's/.*the web console: open \(http[^ ]*\)\/ui\/.*/\1/p' "$out")
		case "$url" in
		http://127.0.0.1:[1-9]*) ;;
		*) fail "demo run $i told the console at \"$url\", not the port it listens on" ;;
		esac
		{ read -r told; read -r shown; } < <(demo_production_told_and_shown "$out")
		[ -n "$told" ] || { tail -40 "$out"; fail "demo run $i: no narration of the production version"; }
		assert_eq "$told" "$shown" "demo run $i narrates the production version the registry shows"
		# everything it started is stopped: no daemon answers at its address, its PostgreSQL is down
		if curl -fsS -m 2 "$url/healthz" >/dev/null 2>&1; then fail "demo run $i left ferryd running at $url"; fi
		if FERRY_HOME="$FERRY_HOME/demo" "$ROOT/bin/ferryd" db status >/dev/null 2>&1; then
			fail "demo run $i left its PostgreSQL running"
		fi
		if [ -s "$FERRY_HOME/demo/haproxy/haproxy.pid" ] && kill -0 "$(cat "$FERRY_HOME/demo/haproxy/haproxy.pid")" 2>/dev/null; then
			fail "demo run $i left HAProxy running"
		fi
	done
	after=$(demo_git_status)
	assert_eq "$after" "$before" "git status after two demos"
	# the second run started afresh: its runs are numbered from 1 again
	grep -q "== run 1: ferry submit" "$FERRY_HOME/demo.2.out" || fail "the second demo did not start from a fresh home"
}
