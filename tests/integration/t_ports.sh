# Ports: FERRY_LISTEN=…:0 binds a free port, the daemon publishes the address
# it got (log line and address file), the CLI finds it there, and daemons
# sharing a FERRY_HOME keep their own files.

# wait_file PATH: until PATH exists and is not empty (10 s).
wait_file() {
	for _ in $(seq 1 100); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	fail "$1 never appeared"
}

test_port_zero_published_and_found_by_the_cli() {
	# the default address file, as a user gets it: $FERRY_HOME/ferryd.url
	env -u FERRY_ADDRESS_FILE ferryd >"$FERRY_HOME/ferryd-a.log" 2>&1 &
	echo $! >"$FERRY_HOME/daemon.a.pid"
	wait_file "$FERRY_HOME/ferryd.url"
	url=$(cat "$FERRY_HOME/ferryd.url")
	assert_match "$url" '^http://127\.0\.0\.1:[0-9]+$' "the published URL"
	port=${url##*:}
	[ "$port" -gt 0 ] || fail "port 0 published"
	assert_eq "$(wc -l <"$FERRY_HOME/ferryd.url")" 1 "one line"
	grep -q "listening on $url\$" "$FERRY_HOME/ferryd-a.log" || fail "the log does not say $url"
	ls "$FERRY_HOME"/ferryd.url.*.tmp 2>/dev/null && fail "a temporary file left behind"
	for _ in $(seq 1 100); do curl -fsS "$url/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
	assert_eq "$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")" 200 "readyz at the published address"

	# the CLI: FERRY_URL unset, so the address file
	id=$(env -u FERRY_URL ferry submit "$ROOT/workflows/hello.yaml" | head -1)
	assert_match "$id" '^[0-9]+$' "submitted through the published address"
	env -u FERRY_URL ferry watch "$id" >/dev/null || fail "ferry watch through the published address"
	# FERRY_URL still wins over the file
	err=$(FERRY_URL=http://127.0.0.1:1 ferry list 2>&1) && fail "FERRY_URL was not used"
	assert_match "$err" 'cannot reach ferryd at http://127.0.0.1:1 .*address from FERRY_URL' "FERRY_URL first"

	# a clean exit takes the file away; the CLI then says where it looked
	stop_daemon a TERM
	[ ! -e "$FERRY_HOME/ferryd.url" ] || fail "the address file outlived the daemon"
	echo "http://127.0.0.1:1" >"$FERRY_HOME/stale.url"
	err=$(env -u FERRY_URL FERRY_ADDRESS_FILE="$FERRY_HOME/stale.url" ferry list 2>&1) && fail "a stale address answered"
	assert_match "$err" "cannot reach ferryd at http://127.0.0.1:1 .*address from $FERRY_HOME/stale.url" "a stale file is named"
	echo "not a url" >"$FERRY_HOME/ferryd.url"
	err=$(env -u FERRY_URL ferry list 2>&1) && fail "a garbled address file was used"
	assert_match "$err" "ferryd.url does not hold ferryd's URL" "a garbled file is named"
}

# Daemons of one FERRY_HOME: each its own port and file; and a daemon never
# removes an address file another one has written since.
test_daemons_sharing_a_home_keep_their_addresses() {
	start_daemon a
	start_another b
	start_another c
	ua=$(daemon_url a) ub=$(daemon_url b) uc=$(daemon_url c)
	[ "$ua" != "$ub" ] && [ "$ub" != "$uc" ] && [ "$ua" != "$uc" ] || fail "two daemons on one address: $ua $ub $uc"
	for u in "$ua" "$ub" "$uc"; do
		assert_eq "$(curl -s -o /dev/null -w '%{http_code}' "$u/readyz")" 200 "readyz at $u"
	done
	assert_eq "$FERRY_URL" "$ua" "FERRY_URL stays with the first daemon"
	stop_daemon b TERM
	[ ! -e "$FERRY_HOME/ferryd-b.url" ] || fail "b's file outlived b"
	[ -s "$FERRY_HOME/ferryd-a.url" ] && [ -s "$FERRY_HOME/ferryd-c.url" ] || fail "b took another's file"

	# d and e write the same file: the last one's address stays until it exits
	spawn_daemon d FERRY_ADDRESS_FILE="$FERRY_HOME/shared.url"
	wait_file "$FERRY_HOME/shared.url"
	ud=$(cat "$FERRY_HOME/shared.url")
	spawn_daemon e FERRY_ADDRESS_FILE="$FERRY_HOME/shared.url"
	for _ in $(seq 1 100); do [ "$(cat "$FERRY_HOME/shared.url")" != "$ud" ] && break; sleep 0.1; done
	ue=$(cat "$FERRY_HOME/shared.url")
	[ "$ue" != "$ud" ] || fail "e did not publish"
	stop_daemon d TERM
	assert_eq "$(cat "$FERRY_HOME/shared.url")" "$ue" "d left e's address alone"
	stop_daemon e TERM
	[ ! -e "$FERRY_HOME/shared.url" ] || fail "e's file outlived e"
}

# A port in use is refused at once, naming the address.
test_listen_on_a_taken_port_fails() {
	start_daemon a
	set +e
	FERRY_LISTEN="127.0.0.1:$FERRY_PORT" FERRY_ADDRESS_FILE="$FERRY_HOME/x.url" timeout 20 ferryd >"$FERRY_HOME/taken.log" 2>&1
	rc=$?
	set -e
	assert_eq "$rc" 1 "exit status"
	assert_match "$(cat "$FERRY_HOME/taken.log")" "cannot listen on 127.0.0.1:$FERRY_PORT" "says why"
	[ ! -e "$FERRY_HOME/x.url" ] || fail "an address published by a daemon that could not listen"
}
