# The completion webhook (FERRY_NOTIFY_WEBHOOK): every run that ends is
# posted once, by the leader alone, retried when the receiver fails.

# start_receiver: a receiver on a free port that answers its first POST with
# 500 and the others with 200; bodies go to $FERRY_HOME/posts. Prints its URL.
start_receiver() {
	cat >"$FERRY_HOME/recv.py" <<'P'
import http.server, os, sys
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global n
        n += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if n > 1:
            open(sys.argv[1], "ab").write(body + b"\n")
        self.send_response(500 if n == 1 else 200); self.end_headers()
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[2] + ".tmp", "w").write(str(s.server_address[1])); os.rename(sys.argv[2] + ".tmp", sys.argv[2])
s.serve_forever()
P
	python3 "$FERRY_HOME/recv.py" "$FERRY_HOME/posts" "$FERRY_HOME/recv.port" >/dev/null 2>&1 &
	echo $! >"$FERRY_HOME/daemon.recv.pid"
	for _ in $(seq 1 50); do [ -s "$FERRY_HOME/recv.port" ] && break; sleep 0.1; done
	echo "http://127.0.0.1:$(cat "$FERRY_HOME/recv.port")/done"
}

test_notify_each_run_once_by_the_leader() {
	url=$(start_receiver)
	start_daemon a FERRY_NOTIFY_WEBHOOK="$url"
	start_another b FERRY_NOTIFY_WEBHOOK="$url"
	start_another c FERRY_NOTIFY_WEBHOOK="$url"
	ok=$(submit "$(wf ok <<'Y'
name: ok
steps:
  - {name: a, command: [true]}
Y
)")
	bad=$(submit "$(wf bad <<'Y'
name: bad
steps:
  - {name: a, command: [sh, -c, 'exit 3']}
Y
)")
	wait_run "$ok" succeeded 20
	wait_run "$bad" failed 20
	sql_until "NOT EXISTS (SELECT FROM runs WHERE notified_at IS NULL)" 5 || true
	assert_eq "$(sql "SELECT count(*) FROM runs WHERE notified_at IS NULL")" 0 "every run notified"
	sleep 2 # nothing more may come
	assert_eq "$(wc -l <"$FERRY_HOME/posts")" 2 "one post per run (the first try's 500 retried), by one replica"
	assert_eq "$(grep -h "\"run\": *$ok[,}]" "$FERRY_HOME/posts" | json 'j["state"]')" succeeded "the succeeded run"
	post=$(grep -h "\"run\": *$bad[,}]" "$FERRY_HOME/posts")
	assert_eq "$(echo "$post" | json 'j["state"]')" failed "the failed run"
	assert_eq "$(echo "$post" | json 'j["workflow"]')" bad "its workflow"
	assert_match "$(echo "$post" | json 'j["link"]')" "^http://127\.0\.0\.1:[0-9]+/api/v1/runs/$bad$" "a link to it"
	assert_eq "$(sql "SELECT coalesce(notify_error, '') FROM runs WHERE id = $bad")" "" "no error kept"
}

test_notify_off_by_default() {
	start_daemon a
	id=$(submit "$(wf ok <<'Y'
name: ok
steps:
  - {name: a, command: [true]}
Y
)")
	wait_run "$id" succeeded 20
	sleep 1.5
	assert_eq "$(sql "SELECT count(*) FROM runs WHERE notified_at IS NOT NULL")" 0 "nothing posted, nothing marked"
}
