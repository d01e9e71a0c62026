# Data cache sessions (the `cache` step kind, steps/datacache.c): a dataset
# staged once per content fingerprint, hits that copy nothing, sessions that
# pin entries until their run ends, LRU eviction under a cap, statistics in
# the API and /metrics, paths that may not leave the run's directory.

# dc_submit DIR FILE [PARAMS_JSON]: POST /runs with the file's YAML and workdir DIR; prints the id.
dc_submit() {
	local body
	body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[2]).read(), "filename": "wf.yaml", "workdir": sys.argv[1], "params": json.loads(sys.argv[3])}))' "$1" "$2" "${3:-{\}}")
	api POST /api/v1/runs "$body"
	[ "$CODE" = 201 ] || fail "POST /runs answered $CODE: $BODY"
	echo "$BODY" | json 'j["id"]'
}

# dc_out RUN STEP KEY: an output of a step
dc_out() {
	api GET "/api/v1/runs/$1"
	echo "$BODY" | json "[s for s in j['steps'] if s['name']=='$2'][0]['outputs']['$3']"
}

dc_count() { [ -f "$1" ] && wc -l <"$1" | tr -d ' ' || echo 0; }

test_datacache_miss_then_hit() {
	export COUNTER="$FERRY_HOME/shared/trained"
	start_daemon a
	W="$FERRY_HOME/work"
	mkdir -p "$W/data/sub"
	echo "x,y" >"$W/data/a.csv"
	echo "1,2" >"$W/data/sub/b.csv"
	f=$(wf dc <<'Y'
name: dc
steps:
  - name: stage
    kind: cache
    dataset: data
  - name: use
    needs: [stage]
    command: [sh, -c, 'cat "$FERRY_CACHE_DIR/a.csv" "$FERRY_CACHE_DIR/sub/b.csv"; echo "session=$FERRY_CACHE_SESSION"']
  - name: train
    kind: train
    needs: [stage]
    cache: true
    command: [sh, -c, 'echo run >>"$COUNTER"; cp "$FERRY_CACHE_DIR/a.csv" "$FERRY_OUTPUT_DIR/model.bin"']
Y
)
	id1=$(dc_submit "$W" "$f")
	wait_run "$id1" succeeded 20
	assert_eq "$(dc_out "$id1" stage hit)" false "first run: a miss"
	dir=$(dc_out "$id1" stage cache_dir)
	fp=$(dc_out "$id1" stage fingerprint)
	s1=$(dc_out "$id1" stage session)
	assert_eq "$dir" "$FERRY_HOME/cache/entries/$fp" "the entry is keyed by the fingerprint"
	assert_eq "$(cat "$dir/sub/b.csv")" "1,2" "the tree is copied"
	assert_eq "$(dc_out "$id1" stage bytes)" 8 "bytes of the files"
	api GET "/api/v1/runs/$id1/steps/use/logs"
	assert_eq "$(printf %s "$BODY" | tr '\n' ' ')" "x,y 1,2 session=$s1 " "a downstream step reads FERRY_CACHE_DIR and FERRY_CACHE_SESSION"
	ino1=$(stat -c %i:%Y "$dir/a.csv")
	assert_eq "$(dc_count "$COUNTER")" 1 "trained once"

	id2=$(dc_submit "$W" "$f")
	wait_run "$id2" succeeded 20
	assert_eq "$(dc_out "$id2" stage hit)" true "unchanged data: a hit"
	assert_eq "$(dc_out "$id2" stage cache_dir)" "$dir" "the same entry"
	assert_eq "$(stat -c %i:%Y "$dir/a.csv")" "$ino1" "not copied again (same inode and mtime)"
	s2=$(dc_out "$id2" stage session)
	[ "$s2" != "$s1" ] || fail "each run has its own session"
	api GET "/api/v1/runs/$id2/steps/stage/logs"
	assert_match "$BODY" "cache hit" "the step's log says so"
	assert_eq "$(dc_count "$COUNTER")" 1 "the downstream cache: true train step hits the step cache"
	assert_eq "$(step_col "$id2" train "cached_from->>'run'")" "$id1" "from the first run"

	# statistics: in the API and /metrics, the same from the database
	api GET /api/v1/cache
	assert_eq "$CODE" 200 "GET /cache"
	assert_eq "$(echo "$BODY" | json 'j["stats"]["hits"]')" 1 "one hit"
	assert_eq "$(echo "$BODY" | json 'j["stats"]["misses"]')" 1 "one miss"
	assert_eq "$(echo "$BODY" | json 'j["stats"]["entries"]')" 1 "one entry"
	assert_eq "$(echo "$BODY" | json 'j["stats"]["staged_bytes"]')" 8 "staged once"
	assert_eq "$(echo "$BODY" | json 'j["entries"][0]["fingerprint"]')" "$fp" "entry fingerprint"
	assert_eq "$(echo "$BODY" | json 'j["entries"][0]["hits"]')" 1 "entry hits"
	assert_eq "$(echo "$BODY" | json 'j["entries"][0]["sessions"]')" "[]" "no open session: both runs ended"
	assert_match "$(echo "$BODY" | json 'j["entries"][0]["last_used_at"]')" '^20[0-9]{2}-' "last_used_at"
	m=$(curl -fsS "$FERRY_URL/metrics")
	assert_match "$m" '^ferry_cache_hits_total 1$' "hits in /metrics"
	assert_match "$m" '^ferry_cache_misses_total 1$' "misses in /metrics"
	assert_match "$m" '^ferry_cache_bytes 8$' "bytes in /metrics"
	assert_match "$m" '^ferry_cache_open_sessions 0$' "sessions in /metrics"
	out=$(ferry cache)
	assert_match "$out" "^HOST +FINGERPRINT +SIZE +HITS" "ferry cache: a table"
	assert_match "$out" " ${fp:0:12} +8 B +1 " "the entry"
	assert_match "$out" '1 entry, 8 B; 1 hits, 1 misses \(hit ratio 0.50\); 0 evictions; 0 open sessions' "the totals"
	assert_eq "$(ferry cache -o json | json 'j["stats"]["misses"]')" 1 "ferry cache -o json"
	assert_eq "$(ferry cache --host nosuchhost -o json | json 'j["entries"]')" "[]" "--host narrows it"

	# changed data: another fingerprint, a miss, and the train step runs again
	echo "3,4" >>"$W/data/sub/b.csv"
	id3=$(dc_submit "$W" "$f")
	wait_run "$id3" succeeded 20
	assert_eq "$(dc_out "$id3" stage hit)" false "changed data misses"
	[ "$(dc_out "$id3" stage fingerprint)" != "$fp" ] || fail "changed data, same fingerprint"
	assert_eq "$(dc_count "$COUNTER")" 2 "and trains again"
	# a renamed file changes it too
	mv "$W/data/a.csv" "$W/data/c.csv"
	id4=$(dc_submit "$W" "$f")
	wait_run "$id4" failed 20
	assert_eq "$(dc_out "$id4" stage hit)" false "renamed file misses"
	api GET /api/v1/cache
	assert_eq "$(echo "$BODY" | json 'j["stats"]["misses"]')" 3 "three misses"
}

test_datacache_preprocess_runs_once() {
	export PREP="$FERRY_HOME/shared/prep-runs"
	start_daemon a
	W="$FERRY_HOME/work"
	mkdir -p "$W/raw"
	printf 'b\na\n' >"$W/raw/items.txt"
	f=$(wf prep <<'Y'
name: prep
params:
  src: {default: raw}
steps:
  - name: stage
    kind: cache
    dataset: "{{params.src}}"
    command: [sh, -c, 'echo run >>"$PREP"; sort "$FERRY_DATASET/items.txt" >"$FERRY_CACHE_DIR/sorted.txt"']
  - name: use
    needs: [stage]
    command: [sh, -c, 'cat "$FERRY_CACHE_DIR/sorted.txt"']
Y
)
	id1=$(dc_submit "$W" "$f")
	wait_run "$id1" succeeded 20
	assert_eq "$(dc_count "$PREP")" 1 "the command ran"
	api GET "/api/v1/runs/$id1/steps/use/logs"
	assert_eq "$(printf %s "$BODY" | tr '\n' ' ')" "a b " "downstream sees the preprocessed entry"
	dir=$(dc_out "$id1" stage cache_dir)
	[ "$(basename "$dir")" != "$(dc_out "$id1" stage fingerprint)" ] || fail "a preprocessed entry is keyed by fingerprint and command"
	[ -z "$(ls -A "$FERRY_HOME/cache/tmp")" ] || fail "nothing left in tmp/: $(ls "$FERRY_HOME/cache/tmp")"
	id2=$(dc_submit "$W" "$f")
	wait_run "$id2" succeeded 20
	assert_eq "$(dc_count "$PREP")" 1 "a hit does not preprocess again"
	assert_eq "$(dc_out "$id2" stage hit)" true "hit"
	# the dataset path is rendered from params
	mkdir -p "$W/raw2" && printf 'z\ny\n' >"$W/raw2/items.txt"
	id3=$(dc_submit "$W" "$f" '{"src": "raw2"}')
	wait_run "$id3" succeeded 20
	assert_eq "$(dc_count "$PREP")" 2 "other data: preprocessed"
}

test_datacache_session_released_when_run_ends() {
	export GO="$FERRY_HOME/go"
	start_daemon a
	W="$FERRY_HOME/work"
	mkdir -p "$W/data"
	echo hello >"$W/data/f.txt"
	f=$(wf hold <<'Y'
name: hold
steps:
  - name: stage
    kind: cache
    dataset: data/f.txt
  - name: hold
    needs: [stage]
    command: [sh, -c, 'while [ ! -f "$GO" ]; do sleep 0.1; done; cat "$FERRY_CACHE_DIR/f.txt"']
Y
)
	id=$(dc_submit "$W" "$f")
	wait_step "$id" hold running 20
	session=$(dc_out "$id" stage session)
	assert_eq "$(sql "SELECT released_at IS NULL FROM cache_sessions WHERE id = '$session'")" t "open while the run runs"
	api GET /api/v1/cache
	assert_eq "$(echo "$BODY" | json 'j["entries"][0]["sessions"][0]["id"]')" "$session" "GET /cache shows the session"
	assert_eq "$(echo "$BODY" | json 'j["entries"][0]["sessions"][0]["step"]')" stage "and its step"
	assert_eq "$(echo "$BODY" | json 'j["stats"]["open_sessions"]')" 1 "one open"
	touch "$GO"
	wait_run "$id" succeeded 20
	assert_eq "$(sql "SELECT released_at IS NOT NULL FROM cache_sessions WHERE id = '$session'")" t "released when the run ends"
	api GET /api/v1/cache
	assert_eq "$(echo "$BODY" | json 'j["stats"]["open_sessions"]')" 0 "none open"
	# a stopped run releases too; its retry opens the session again (same id)
	rm -f "$GO"
	id2=$(dc_submit "$W" "$f")
	wait_step "$id2" hold running 20
	s2=$(dc_out "$id2" stage session)
	api POST "/api/v1/runs/$id2/stop"
	wait_run "$id2" stopped 20
	assert_eq "$(sql "SELECT released_at IS NOT NULL FROM cache_sessions WHERE id = '$s2'")" t "released when stopped"
	touch "$GO"
	# the entry goes away meanwhile (as an eviction would, the session being released)
	rm -rf "$(dc_out "$id2" stage cache_dir)"
	api POST "/api/v1/runs/$id2/retry"
	assert_eq "$CODE" 200 "retry"
	wait_run "$id2" succeeded 20
	assert_eq "$(step_col "$id2" stage attempts)" 2 "the retry re-ran the cache step above the stopped one"
	assert_eq "$(dc_out "$id2" stage hit)" false "and staged the data again"
	api GET "/api/v1/runs/$id2/steps/hold/logs"
	assert_eq "$(printf %s "$BODY" | tr -d "\n")" hello "the retried step reads it"
	assert_eq "$(sql "SELECT count(*) FROM cache_sessions WHERE run_id = $id2")" 1 "one session per (run, step)"
	assert_eq "$(sql "SELECT id FROM cache_sessions WHERE run_id = $id2")" "$s2" "re-opened under the same id"
	assert_eq "$(sql "SELECT released_at IS NOT NULL FROM cache_sessions WHERE run_id = $id2")" t "and released again"
}

test_datacache_lru_eviction() {
	export GO="$FERRY_HOME/go"
	start_daemon a FERRY_CACHE_MAX_MB=1
	W="$FERRY_HOME/work"
	for d in A B C D; do mkdir -p "$W/$d"; head -c 400000 /dev/urandom >"$W/$d/blob"; done
	mkdir -p "$W/big" && head -c 1200000 /dev/urandom >"$W/big/blob"
	f=$(wf lru <<'Y'
name: lru
params:
  d: {default: A}
  hold: {default: "0"}
steps:
  - name: stage
    kind: cache
    dataset: "{{params.d}}"
  - name: use
    needs: [stage]
    command: [sh, -c, 'if [ "$1" = 1 ]; then while [ ! -f "$GO" ]; do sleep 0.1; done; fi; wc -c <"$FERRY_CACHE_DIR/blob"', x, "{{params.hold}}"]
Y
)
	# A stays in use (its run waits); B is staged and released; C needs room
	idA=$(dc_submit "$W" "$f" '{"d": "A", "hold": "1"}')
	wait_step "$idA" use running 20
	dirA=$(dc_out "$idA" stage cache_dir)
	idB=$(dc_submit "$W" "$f" '{"d": "B"}')
	wait_run "$idB" succeeded 20
	dirB=$(dc_out "$idB" stage cache_dir)
	idC=$(dc_submit "$W" "$f" '{"d": "C"}')
	wait_run "$idC" succeeded 20
	dirC=$(dc_out "$idC" stage cache_dir)
	[ -d "$dirA" ] || fail "the entry in use (older) was evicted"
	[ ! -e "$dirB" ] || fail "the least recently used unused entry was kept"
	[ -d "$dirC" ] || fail "the new entry is there"
	api GET /api/v1/cache
	assert_eq "$(echo "$BODY" | json 'j["stats"]["evictions"]')" 1 "one eviction"
	assert_eq "$(echo "$BODY" | json 'j["stats"]["entries"]')" 2 "two entries"
	assert_eq "$(echo "$BODY" | json 'j["stats"]["bytes"]')" 800000 "within the cap"
	assert_match "$(curl -fsS "$FERRY_URL/metrics")" '^ferry_cache_evictions_total 1$' "/metrics"
	# A is released now; C was used after A was staged, so D evicts A (the oldest unused)
	touch "$GO"
	wait_run "$idA" succeeded 20
	sql "UPDATE cache_entries SET last_used_at = now() - interval '1 hour' WHERE path = '$dirA'" >/dev/null
	idD=$(dc_submit "$W" "$f" '{"d": "D"}')
	wait_run "$idD" succeeded 20
	[ ! -e "$dirA" ] || fail "A, now unused and least recently used, was kept"
	[ -d "$dirC" ] || fail "C was evicted before A"
	# B again: a miss, staged anew
	idB2=$(dc_submit "$W" "$f" '{"d": "B"}')
	wait_run "$idB2" succeeded 20
	assert_eq "$(dc_out "$idB2" stage hit)" false "an evicted entry misses"
	# bigger than the whole cache: fails for good, says what to do
	idG=$(dc_submit "$W" "$f" '{"d": "big"}')
	wait_run "$idG" failed 20
	assert_match "$(step_col "$idG" stage reason)" 'more than the whole data cache \(FERRY_CACHE_MAX_MB=1\): raise FERRY_CACHE_MAX_MB' "reason"
	assert_eq "$(ls "$FERRY_HOME/cache/entries" | wc -l)" 2 "nothing of it kept"
}

test_datacache_rejects_paths_outside() {
	start_daemon a
	W="$FERRY_HOME/work"
	mkdir -p "$W/ok" "$FERRY_HOME/outside"
	echo secret >"$FERRY_HOME/outside/s.txt"
	ln -s "$FERRY_HOME/outside" "$W/escape"
	echo fine >"$W/ok/f.txt"
	f=$(wf bad <<'Y'
name: bad
params:
  d: {default: ok}
steps:
  - name: stage
    kind: cache
    retry: {limit: 2, backoff: 100ms}
    dataset: "{{params.d}}"
Y
)
	id=$(dc_submit "$W" "$f" '{"d": "../outside"}')
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" stage reason)" "leaves the run's working directory" "\"..\" is refused"
	assert_eq "$(step_col "$id" stage attempts)" 1 "for good (no retry)"
	id=$(dc_submit "$W" "$f" '{"d": "escape"}')
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" stage reason)" "resolves to .*outside the run's working directory" "a link out is refused"
	id=$(dc_submit "$W" "$f" '{"d": "nope"}')
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" stage reason)" "dataset .*/nope does not exist" "missing"
	# a link inside the dataset that points out of it
	ln -s "$FERRY_HOME/outside/s.txt" "$W/ok/leak"
	id=$(dc_submit "$W" "$f")
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" stage reason)" "ok/leak is a symbolic link to .*, outside the dataset" "a link out of the dataset"
	[ -z "$(ls -A "$FERRY_HOME/cache/tmp" 2>/dev/null)" ] || fail "the partial copy was removed"
	# a link that stays inside is kept as a link
	rm "$W/ok/leak" && ln -s f.txt "$W/ok/alias"
	id=$(dc_submit "$W" "$f")
	wait_run "$id" succeeded 20
	dir=$(dc_out "$id" stage cache_dir)
	assert_eq "$(readlink "$dir/alias")" f.txt "an inside link is copied as a link"
	# no workdir: a relative dataset cannot be resolved
	id=$(submit "$f")
	wait_run "$id" failed 20
	assert_match "$(step_col "$id" stage reason)" "the run has no working directory" "no workdir"
}

# metric NAME: the value of an unlabelled counter in GET /metrics
dc_metric() {
	curl -fsS "$FERRY_URL/metrics" | awk -v n="$1" '$1 == n {print $2}'
}

# A hit on unchanged data reads no byte of it: the fingerprint comes from the
# stat memo. Data changed within the racy window (2 s) of a run is read in
# full and not remembered. (Its mtime is set a minute ahead, so the first two
# runs find it racy however slow this machine is; then a minute back, and
# the change of its ctime is waited out.)
test_datacache_hit_reads_metadata_only() {
	start_daemon a
	W="$FERRY_HOME/work"
	mkdir -p "$W/data"
	echo "1,2,3" >"$W/data/a.csv"
	touch -d "+1 minute" "$W/data/a.csv"
	f=$(wf dcm <<'Y'
name: dcm
steps:
  - {name: stage, kind: cache, dataset: data}
Y
)
	id=$(dc_submit "$W" "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(dc_metric ferry_fingerprint_reads_total)" 1 "data written just now: read in full"
	id=$(dc_submit "$W" "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(dc_metric ferry_fingerprint_reads_total)" 2 "and not remembered while it may still change"
	touch -d "-1 minute" "$W/data/a.csv"
	sleep 2.5 # the data (its ctime, set by touch) is now older than the racy window
	id=$(dc_submit "$W" "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(dc_metric ferry_fingerprint_reads_total)" 3 "read once more, now remembered"
	id=$(dc_submit "$W" "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(dc_out "$id" stage hit)" true "a hit"
	assert_eq "$(dc_metric ferry_fingerprint_reads_total)" 3 "without reading the data"
	assert_eq "$(dc_metric ferry_fingerprint_memo_hits_total)" 1 "the memo answered"
	echo "4,5,6" >"$W/data/a.csv"
	id=$(dc_submit "$W" "$f")
	wait_run "$id" succeeded 20
	assert_eq "$(dc_out "$id" stage hit)" false "changed data is seen"
	assert_eq "$(dc_metric ferry_fingerprint_reads_total)" 4 "and read"
}
