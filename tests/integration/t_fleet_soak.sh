# A fleet under chaos (issue 29): three hosts on a PostgreSQL of the
# test's own (so it can be restarted without touching the suite's), a live
# deployment with a replica on each, a client through a host's front all
# along; then rounds of kill -9 of a random daemon (restarted a moment
# later) and restarts of PostgreSQL. The replicas and the fronts outlive
# their daemons, so no request may fail; at the end the replicas are
# still one per host, nothing was replaced or started twice, and every
# host's HAProxy serves exactly what the database says.
# SOAK_ROUNDS sets the rounds (default 4); SOAK_SEED replays a run's choices.

# soak_pg start|stop: the test's own embedded PostgreSQL ($FERRY_HOME/pg)
soak_pg() {
	if [ "$1" = start ]; then
		FERRY_HOME="$FERRY_HOME/pg" ferryd db start 2>>"$FERRY_HOME/pg.log"
	else
		FERRY_HOME="$FERRY_HOME/pg" ferryd db stop >>"$FERRY_HOME/pg.log" 2>&1 || true
	fi
}

# soak_start NAME: host-NAME's daemon, at 127.0.0.N, on the test's PostgreSQL
soak_start() {
	local n
	case $1 in a) n=1 ;; b) n=2 ;; *) n=3 ;; esac
	mkdir -p "$FERRY_HOME/$1"
	# the killed daemon's log kept beside (a failure's story spans its lives)
	[ -f "$FERRY_HOME/ferryd-$1.log" ] && mv "$FERRY_HOME/ferryd-$1.log" "$FERRY_HOME/ferryd-$1.log.$(date +%s%N)"
	start_another "$1" FERRY_HOST="host-$1" FERRY_HOME="$FERRY_HOME/$1" FERRY_LISTEN="127.0.0.$n:0" \
		FERRY_LEASE_MS=3000 FERRY_DATABASE_URL="$SOAK_DB"
}

test_fleet_soak_kills_and_postgres_restarts() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (make deps)"
	local rounds=${SOAK_ROUNDS:-4} seed=${SOAK_SEED:-$RANDOM} r victim out i
	# runs when the test's shell exits, after this function's locals are gone: the client's pid is
	# a global (as a local, set -u stopped the trap at its first word, and the test's PostgreSQL
	# was left to the runner's kill -9, its shared memory with it)
	SOAK_CLIENT=
	trap '[ -z "$SOAK_CLIENT" ] || kill "$SOAK_CLIENT" 2>/dev/null || true; stop_daemons; for h in a b c; do stop_deployments "$FERRY_HOME/$h"; done; soak_pg stop' EXIT
	echo "# SOAK_SEED=$seed SOAK_ROUNDS=$rounds"
	RANDOM=$seed
	SOAK_DB=$(soak_pg start) || fail "the test's PostgreSQL did not start: $(tail -5 "$FERRY_HOME/pg.log")"
	export FERRY_DATABASE_URL=$SOAK_DB # sql() asks it too
	soak_start a
	soak_start b
	soak_start c
	use_daemon a
	serve_py # t_hosts.sh's model server (on FERRY_BIND_ADDR), and its sample
	dep=$(wf soak <<Y
name: soak
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo "weights S" >"\$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: ms}
  - {name: deploy, kind: deploy, needs: [register], model: ms, serve: [/usr/bin/python3, $FERRY_HOME/serve.py], sample: $FERRY_HOME/sample.json, traffic: 100, replicas: 3}
Y
)
	wait_run "$(submit "$dep")" succeeded 120
	assert_eq "$(sql "SELECT string_agg(handle->>'host', ',' ORDER BY handle->>'host') FROM deployment_replicas")" \
		host-a,host-b,host-c "one replica on each host"
	sql_until "(SELECT count(*) FROM deployment_replicas WHERE health = 'healthy') = 3" 30 || fail "not every replica is healthy"
	front=$(sql "SELECT port FROM deployments")
	# every host's front up (a host's keeper applies the rows within a round of the deploy)
	hosts_agree_with_db 3
	before=$(sql "SELECT string_agg(idx || '=' || (handle->>'host') || ':' || port || '/' || generation, ' ' ORDER BY idx) FROM deployment_replicas")
	starts=$(sql "SELECT count(*) FROM deployment_events WHERE kind IN ('replica-started', 'replica-restarted', 'replica-replaced', 'replica-placed')")
	# a client of B's front all along (its HAProxy outlives B's daemon)
	(
		while :; do
			if ! curl -fsS -m 5 -X POST -d '{}' "http://127.0.0.2:$front/" >/dev/null 2>&1; then date +%s.%N >>"$FERRY_HOME/failed"; fi
			echo >>"$FERRY_HOME/sent"
			sleep 0.05
		done
	) &
	SOAK_CLIENT=$!
	for r in $(seq 1 "$rounds"); do
		case $((RANDOM % 3)) in 0) victim=a ;; 1) victim=b ;; *) victim=c ;; esac
		echo "# round $r: kill -9 of host-$victim's daemon ($(date +%T.%N))"
		stop_daemon "$victim" KILL
		sleep 2 # less than a lease: it comes back before anyone may call it lost
		soak_start "$victim"
		if [ $((r % 2)) = 0 ]; then
			echo "# round $r: PostgreSQL restarted ($(date +%T.%N))"
			soak_pg stop
			sleep 2
			soak_pg start >/dev/null || fail "the test's PostgreSQL did not start again"
		fi
		sleep 3
	done
	# settled: every daemon answers ready again
	for h in a b c; do await_daemon "$h"; done
	sleep 6 # two leases: every heartbeat is fresh, every keeper has had rounds
	kill "$SOAK_CLIENT" 2>/dev/null; wait "$SOAK_CLIENT" 2>/dev/null || true
	local sent failed
	sent=$(wc -l <"$FERRY_HOME/sent"); failed=$(cat "$FERRY_HOME/failed" 2>/dev/null | wc -l)
	echo "# $failed of $sent requests through B's front failed"
	[ "$failed" = 0 ] || fail "$failed requests failed (the replicas and fronts outlive their daemons and the database): $(head -3 "$FERRY_HOME/failed")"
	assert_eq "$(sql "SELECT string_agg(idx || '=' || (handle->>'host') || ':' || port || '/' || generation, ' ' ORDER BY idx) FROM deployment_replicas")" \
		"$before" "the same replicas, where they were (no host was lost for a lease)"
	assert_eq "$(sql "SELECT count(*) FROM deployment_events WHERE kind IN ('replica-started', 'replica-restarted', 'replica-replaced', 'replica-placed')")" \
		"$starts" "nothing started, replaced or placed again"
	sql_until "(SELECT count(*) FROM deployment_replicas WHERE health = 'healthy') = 3" 30 || fail "not every replica is healthy at the end"
	hosts_agree_with_db 3
	for ip in 127.0.0.1 127.0.0.2 127.0.0.3; do
		out=$(curl -sS -m 5 -X POST -d '{}' "http://$ip:$front/") || fail "no front at $ip:$front"
		assert_match "$out" '"model": "weights S"' "the front at $ip"
	done
}
