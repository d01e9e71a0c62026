# A job is not the daemon (orchestrator/exec/exec_user.c). Run as root,
# ferryd runs jobs as the unprivileged ferry-job user; its own secrets are
# scrubbed from its environment and it is not dumpable; its embedded
# PostgreSQL asks for a password (scram-sha-256) kept in a 0600 file; the
# parts of $FERRY_HOME a job has no business in are closed to it. On
# 058d658 a step that walked up its process tree printed the daemon's API
# token, and one that ran psql against the embedded cluster's socket made
# itself an admin token (initdb -A trust, jobs run as root).

# the process-tree walk of finding 1: every ancestor's environment, as the job sees it
isolation_walk_wf() {
	wf walk <<'Y'
name: walk
steps:
  - name: s
    command:
      - sh
      - -c
      - |
        echo "user=$(id -un) uid=$(id -u)"
        p=$$
        while [ "$p" -gt 1 ]; do
          if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -E 'it-api-s3cret|it-hook-s3cret'; then echo "LEAK from $p"; fi
          p=$(awk '{print $4}' /proc/$p/stat)
        done
        cat "$FERRY_ATTEMPT_DIR/../../../../api-token" 2>/dev/null && echo "LEAK api-token"
        ls "$FERRY_ATTEMPT_DIR/../../.." 2>/dev/null && echo "LEAK runs listed"
        touch "$FERRY_ATTEMPT_DIR/../../../../planted" 2>/dev/null && echo "LEAK home written"
        echo out > "$FERRY_OUTPUT_DIR/mine" && echo "own output written"
        echo done
Y
}

test_isolation_job_runs_as_ferry_job_and_finds_no_secret() {
	start_daemon a FERRY_JOB_USER= FERRY_API_TOKEN=it-api-s3cret FERRY_GIT_WEBHOOK_SECRET=it-hook-s3cret
	FERRY_API_TOKEN=it-api-s3cret
	id=$(submit "$(isolation_walk_wf)")
	wait_run "$id" succeeded 30
	log=$(cat "$FERRY_HOME/runs/$id/s/1/log")
	assert_match "$log" "user=ferry-job uid=$(id -u ferry-job)" "the job runs as ferry-job"
	assert_match "$log" "own output written" "the job writes its own attempt directory"
	case $log in *LEAK*) fail "the job reached what is the daemon's: $log" ;; esac
	# scrubbed, not only hidden: root reads ferryd's environment block and finds neither
	if tr '\0' '\n' <"/proc/$(daemon_pid a)/environ" | grep -E 'it-api-s3cret|it-hook-s3cret'; then
		fail "ferryd's /proc environ still holds a secret"
	fi
	assert_eq "$(awk '/^Uid:/ {print $2}' "/proc/$(daemon_pid a)/status")" 0 "ferryd itself stays root"
	[ ! -e "$FERRY_HOME/planted" ] || fail "the job wrote into FERRY_HOME"
	assert_eq "$(stat -c '%a %U' "$FERRY_HOME" "$FERRY_HOME/runs" "$FERRY_HOME/artifacts" | paste -sd,)" \
		"711 root,711 root,700 root" "home, runs/ and artifacts/ modes"
	assert_eq "$(stat -c '%a %U' "$FERRY_HOME/runs/$id/s/1" "$FERRY_HOME/runs/$id/s/1/out" | paste -sd,)" \
		"700 ferry-job,711 ferry-job" "the attempt directory is the job's"
	# the token still works for the API (the daemon kept it)
	api GET /api/v1/runs/$id
	assert_eq "$CODE" 200 "the scrubbed token still authenticates"
}

# runs/ is marked a top of unrelated trees (chattr +T) where the file system keeps the flag
# (ext2/3/4): each run's directories go to a block group of their own (ferryd.c runs_spread). On
# a disk's file system, not the suite's tmpfs (which refuses the flag); skipped where that one
# refuses it too.
test_isolation_runs_is_a_top_directory() {
	local h attrs
	h=$(mktemp -d /var/tmp/ferry-topdir.XXXXXX) && chmod 711 "$h"
	TOPDIR_HOME=$h # a global: the trap runs when the test's shell exits, after the locals are gone
	trap 'stop_daemons; rm -rf "$TOPDIR_HOME"' EXIT
	mkdir "$h/probe" "$h/home"
	if ! chattr +T "$h/probe" 2>/dev/null; then
		echo "# skipped: $(stat -f -c %T "$h") keeps no top-directory flag"
		return 0
	fi
	start_daemon a FERRY_HOME="$h/home"
	attrs=$(lsattr -d "$h/home/runs")
	assert_match "${attrs%% *}" T "runs/ is a top directory: $attrs"
	FERRY_HOME="$h/home" wait_run "$(submit "$ROOT/workflows/hello.yaml")" succeeded 30
}

# A run's step directories are made ahead of the steps' claims, on the worker pool
# (engine/dirs_ahead.c: on this ext4 each inode was ~0.27 ms of a chain's hop), exactly as a
# claim makes them: while the first step runs, the later steps' attempt directories, out/ and
# checkpoint/ are there, the job user's, with the claim's modes; each step then runs in them.
test_isolation_step_dirs_made_ahead_as_the_claim_makes_them() {
	start_daemon a FERRY_JOB_USER=
	local id d i
	id=$(submit "$(wf ahead <<'Y'
name: ahead
steps:
  - {name: a, command: [sh, -c, 'sleep 3']}
  - {name: b, needs: [a], command: [sh, -c, 'echo b >"$FERRY_OUTPUT_DIR/x"; echo ck >"$FERRY_CHECKPOINT_DIR/c"']}
  - {name: c, needs: [b], command: [sh, -c, 'echo c']}
Y
)")
	wait_step "$id" a running 20
	d="$FERRY_HOME/runs/$id"
	for i in $(seq 1 50); do [ -d "$d/c/checkpoint" ] && break; sleep 0.1; done
	assert_eq "$(step_col "$id" b attempts):$(step_col "$id" c attempts)" 0:0 "neither b nor c claimed yet"
	assert_eq "$(stat -c '%a %U' "$d/b" "$d/b/1" "$d/b/1/out" "$d/b/checkpoint" "$d/c/1" "$d/c/1/out" "$d/c/checkpoint" | paste -sd,)" \
		"711 root,700 ferry-job,711 ferry-job,700 ferry-job,700 ferry-job,711 ferry-job,700 ferry-job" "made ahead, as a claim makes them"
	assert_eq "$(stat -c '%a %U %s' "$d/c/1/log" "$d/c/1/status" | paste -sd,)" "644 ferry-job 0,644 ferry-job 0" \
		"its log and status: empty, the job user's like the directory"
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$d/b/1/out/x"):$(cat "$d/b/checkpoint/c")" b:ck "b wrote its output and checkpoint there"
	assert_eq "$(cat "$d/c/1/log")" c "c ran in its directory"
	assert_match "$(tr '\n' ' ' <"$d/c/1/status")" '^pid [0-9]+ [0-9]+ exit 0' "… its status written over the empty one"
}

test_isolation_job_user_settings() {
	# a user that does not exist: refused at start, with the way out
	spawn_daemon a FERRY_JOB_USER=nosuch-user
	for _ in $(seq 1 50); do kill -0 "$(daemon_pid a)" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$(daemon_pid a)" 2>/dev/null || fail "ferryd started with FERRY_JOB_USER=nosuch-user"
	assert_match "$(cat "$FERRY_HOME/ferryd-a.log")" "there is no user 'nosuch-user' to run jobs as" "the error names the user"
	# a home the job user cannot reach: refused at start, naming the directory
	mkdir -m 700 "$FERRY_HOME/closed"
	spawn_daemon b FERRY_JOB_USER= FERRY_HOME="$FERRY_HOME/closed/h"
	for _ in $(seq 1 50); do kill -0 "$(daemon_pid b)" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$(daemon_pid b)" 2>/dev/null || fail "ferryd started in a home ferry-job cannot reach"
	assert_match "$(cat "$FERRY_HOME/ferryd-b.log")" "the job user ferry-job cannot enter $FERRY_HOME/closed .mode 0700, owner uid 0.: jobs could not reach" "says which directory"
	# a shared directory as the home: refused, its mode untouched (ferryd makes a home 0711)
	before=$(stat -c %a /tmp)
	spawn_daemon d FERRY_JOB_USER= FERRY_HOME=/tmp
	for _ in $(seq 1 50); do kill -0 "$(daemon_pid d)" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$(daemon_pid d)" 2>/dev/null || fail "ferryd started with FERRY_HOME=/tmp"
	assert_match "$(cat "$FERRY_HOME/ferryd-d.log")" "must be a directory of Ferry's own, not a shared one like /tmp" "says why"
	assert_eq "$(stat -c %a /tmp)" "$before" "/tmp keeps its mode"
	# root, explicitly: jobs run as root, and the log says what that costs
	start_daemon c FERRY_JOB_USER=root
	id=$(submit "$(wf who <<'Y'
name: who
steps:
  - {name: s, command: [sh, -c, 'id -un']}
Y
)")
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/s/1/log")" root "FERRY_JOB_USER=root runs jobs as root"
	assert_match "$(cat "$FERRY_HOME/ferryd-c.log")" "FERRY_JOB_USER=root: jobs run as root" "with a warning"
}

# A local job's supervisor (its shim) is bin/ferry-shim, spawned: not a fork
# of the daemon, which copied the daemon's page tables for every job (1-3 ms
# each at 20-50 MB, on the engine loop). It runs as root with the job's
# environment, which the workflow chooses: it is static, so no dynamic
# loader obeys an LD_PRELOAD there. Where ferry-shim is missing beside
# ferryd, the daemon says so and forks as before.
test_isolation_supervisor_is_the_static_shim() {
	local probe=$FERRY_HOME/preload
	mkdir -m 755 "$probe"
	mkdir -m 1777 "$probe/out"
	cat >"$probe/p.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void probe(void)
{
	char exe[512] = "";
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *f = fopen(getenv("PROBE_OUT"), "a");
	if (n > 0)
		exe[n] = 0;
	if (f) {
		fprintf(f, "%s uid=%d\n", exe, (int)getuid());
		fclose(f);
	}
}
C
	cc -shared -fPIC -o "$probe/p.so" "$probe/p.c" || fail "cannot build the preload probe"
	start_daemon a FERRY_JOB_USER=
	id=$(submit "$(sed "s|@DIR@|$probe|g" <<'Y' | wf shim
name: shim
steps:
  - name: s
    env: {LD_PRELOAD: @DIR@/p.so, PROBE_OUT: @DIR@/out/loaded}
    command: [sh, -c, 'echo "parent: $(tr "\0" " " </proc/$PPID/cmdline)"; echo "user: $(id -un)"']
Y
)")
	wait_run "$id" succeeded 30
	log=$(cat "$FERRY_HOME/runs/$id/s/1/log")
	assert_match "$log" "parent: ferry-shim -u $(id -u ferry-job) -g $(id -g ferry-job) .*-- $FERRY_HOME/runs/$id/s/1/log " \
		"the job's parent is ferry-shim, told the job user and the attempt's files"
	assert_match "$log" "user: ferry-job" "the job runs as the job user"
	assert_match "$(cat "$probe/out/loaded")" "uid=$(id -u ferry-job)" "the preload reached the job's own programs"
	if grep -E "uid=0|ferry-shim" "$probe/out/loaded"; then
		fail "LD_PRELOAD ran code as root, in the shim"
	fi
	stop_daemon a
	# ferryd alone, without ferry-shim beside it: a fork of the daemon supervises
	mkdir "$FERRY_HOME/alone"
	cp "$(command -v ferryd)" "$FERRY_HOME/alone/ferryd"
	FERRYD="$FERRY_HOME/alone/ferryd" start_daemon b FERRY_JOB_USER=
	assert_match "$(cat "$FERRY_HOME/ferryd-b.log")" "alone/ferry-shim is missing: each local job's supervisor is a fork of this process" \
		"the daemon says the shim is missing"
	id=$(submit "$FERRY_HOME/shim.yaml")
	wait_run "$id" succeeded 30
	assert_match "$(cat "$FERRY_HOME/runs/$id/s/1/log")" "parent: $FERRY_HOME/alone/ferryd " "the fork's command line is ferryd's"
}

# the spare supervisors of daemon NAME: pids of `ferry-shim --spare` whose parent it is, one a line
spares_of() {
	local d; d=$(daemon_pid "$1")
	ps -eo pid=,ppid=,args= | awk -v d="$d" '$2 == d && $3 == "ferry-shim" && $4 == "--spare" {print $1}'
}

# whether process PID runs (a zombie, left to an init that reaps late, does not)
running_pid() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }

# waits until daemon NAME has a spare (its first local job starts cold, and the keeper starts one)
await_spare() {
	for _ in $(seq 1 50); do [ -n "$(spares_of "$1")" ] && return 0; sleep 0.1; done
	fail "daemon $1 keeps no spare supervisor"
}

# A local job's supervisor is started ahead of the job (exec_spare.c): the
# job gets the spare that waited, told its arguments and environment then,
# and sees what a cold start shows (the same parent command line, its env:
# and secrets, masked in its log); a spare that died idle is no loss (the
# job starts cold); a stopped or killed daemon leaves no spare behind; and a
# request cut short runs nothing.
test_isolation_spare_supervisor_runs_the_job() {
	local spare id pid
	start_daemon a FERRY_JOB_USER=
	printf 'hunter2-spare\n' | ferryd secret set SPARE_TOKEN 2>/dev/null || fail "ferryd secret set"
	id=$(submit "$(wf warmup <<'Y'
name: warmup
steps:
  - {name: s, command: ['true']}
Y
)")
	wait_run "$id" succeeded 30
	await_spare a
	assert_eq "$(spares_of a | wc -l)" 1 "one spare is kept"
	spare=$(spares_of a)
	id=$(submit "$(wf spare <<'Y'
name: spare
steps:
  - name: s
    env: {GREETING: hello}
    secrets: [SPARE_TOKEN]
    command: [sh, -c, 'echo "ppid $PPID"; echo "parent: $(tr "\0" " " </proc/$PPID/cmdline)"; echo "greeting $GREETING"; echo "token $SPARE_TOKEN"; id -un']
Y
)")
	wait_run "$id" succeeded 30
	log=$(cat "$FERRY_HOME/runs/$id/s/1/log")
	assert_match "$log" "ppid $spare\b" "the job's supervisor is the spare that waited"
	assert_eq "$(sql "SELECT a.handle->>'pid' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")" "$spare" \
		"the handle names the spare"
	assert_match "$log" "parent: ferry-shim -u $(id -u ferry-job) -g $(id -g ferry-job) .*-m SPARE_TOKEN -- $FERRY_HOME/runs/$id/s/1/log " \
		"the spare shows the job's arguments, as a cold start does"
	assert_match "$log" "greeting hello" "the step's env: reached the job"
	assert_match "$log" "token \*\*\*" "the secret reached the job, masked in its log"
	if grep -q hunter2-spare "$FERRY_HOME/runs/$id/s/1/log"; then fail "the secret's value is in the log"; fi
	assert_match "$log" "ferry-job" "the job runs as the job user"

	# a spare killed while it waits: the next job starts cold, and a new spare is kept
	await_spare a
	spare=$(spares_of a)
	kill -9 "$spare"
	id=$(submit "$FERRY_HOME/spare.yaml")
	wait_run "$id" succeeded 30
	pid=$(sql "SELECT a.handle->>'pid' FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id")
	[ "$pid" != "$spare" ] || fail "the killed spare was handed the job"
	await_spare a

	# a clean stop leaves no spare (it is reaped, not left to init)
	spare=$(spares_of a)
	stop_daemon a
	kill -0 "$spare" 2>/dev/null && fail "the spare outlived its daemon's stop (or was left to init, a zombie)"
	# a daemon killed: its spare reads end-of-file and exits
	start_daemon a FERRY_JOB_USER=
	id=$(submit "$FERRY_HOME/warmup.yaml")
	wait_run "$id" succeeded 30
	await_spare a
	spare=$(spares_of a)
	stop_daemon a KILL
	for _ in $(seq 1 50); do running_pid "$spare" || break; sleep 0.1; done
	running_pid "$spare" && fail "the spare outlived its daemon's kill -9"

	# a request cut short (the daemon died writing it): nothing runs
	printf '%010d\n6\0ferry-shim\0--\0%s\0%s\0/\0touch\0' 500 "$FERRY_HOME/cut.log" "$FERRY_HOME/cut.status" |
		timeout 5 ferry-shim --spare "$(printf '%4095s' '')"
	assert_eq "$?" 0 "a spare told half a job exits"
	[ -e "$FERRY_HOME/cut.status" ] && fail "a spare told half a job started it"
	return 0
}

# the embedded cluster (no FERRY_DATABASE_URL): password only, and out of a job's reach
test_isolation_embedded_postgres_wants_a_password() {
	local home="$FERRY_HOME/e" sock
	spawn_daemon a FERRY_JOB_USER= FERRY_HOME="$home" FERRY_DATABASE_URL=
	await_daemon a
	use_daemon a
	sock=$(FERRY_HOME="$home" FERRY_DATABASE_URL= ferryd db status -o json | jq -r .socket_dir)
	# the test's own queries (wait_run) go to the embedded cluster too
	FERRY_DATABASE_URL=$(FERRY_HOME="$home" FERRY_DATABASE_URL= ferryd db status -o json | jq -r .conninfo)
	assert_match "$FERRY_DATABASE_URL" "passfile=$home/pgpass" "the conninfo names the passfile, not the password"
	[ -S "$sock/.s.PGSQL.5432" ] || fail "no socket in $sock"
	assert_eq "$(stat -c '%a %U' "$home/pgpass" "$home/pg" | paste -sd,)" "600 root,700 postgres" "pgpass and pg/ modes"
	grep -v '^#' "$home/pg/data/pg_hba.conf" | grep -qw trust && fail "pg_hba.conf still trusts: $(cat "$home/pg/data/pg_hba.conf")"
	# without the password even root is refused; with the passfile it is let in
	if psql -w "host=$sock dbname=ferry user=ferry" -qAtc 'select 1' 2>"$FERRY_HOME/psql.err"; then
		fail "psql without a password was let in"
	fi
	assert_match "$(cat "$FERRY_HOME/psql.err")" "password" "refused for want of a password"
	assert_eq "$(psql -w "host=$sock dbname=ferry user=ferry passfile=$home/pgpass" -qAtc 'select 1')" 1 "the passfile lets the daemon in"
	# finding 1's step: psql at the socket to mint a token. As ferry-job it cannot reach it.
	id=$(submit "$(wf mint <<Y
name: mint
steps:
  - name: s
    command: [sh, -c, 'psql -w "host=$sock dbname=ferry user=ferry" -c "insert into api_tokens (name) values (1)" 2>&1; cat "$home/pgpass" 2>&1; echo end']
Y
)")
	wait_run "$id" succeeded 30
	log=$(cat "$home/runs/$id/s/1/log")
	assert_match "$log" "Permission denied" "the socket is out of the job's reach"
	case $log in *'*:*:*:ferry:'*) fail "the job read the password file: $log" ;; esac
	stop_daemon a
	FERRY_HOME="$home" ferryd db stop
	# a restart reuses the password; the cluster starts and is reached again
	start_daemon a FERRY_HOME="$home" FERRY_DATABASE_URL=
	stop_daemon a
	FERRY_HOME="$home" ferryd db stop
}

# Finding 4 and the roots: Ferry reads for a run only what its jobs could
# read, and, with FERRY_ALLOWED_ROOTS, only below those roots. On 058d658
# {"yaml": <register artifact: etc/shadow>, "workdir": "/"} registered the
# host's shadow file and a viewer downloaded it.
test_isolation_reads_only_what_jobs_could() {
	start_daemon a FERRY_JOB_USER=
	api POST /api/v1/runs "$(jq -n '{yaml: "name: esc\nsteps:\n  - {name: register, kind: register, model: esc, artifact: etc/shadow}\n", workdir: "/"}')"
	assert_eq "$CODE" 201 "workdir / is a directory ferry-job can enter: $BODY"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" failed 30
	assert_match "$(step_col "$id" register reason)" "artifact /etc/shadow cannot be read by the job user ferry-job" "refused, saying why"
	assert_eq "$(sql "SELECT count(*) FROM model_versions")" 0 "nothing registered"
	# a deploy step's sample (and canary requests) the daemon reads and sends
	# to the run's own replica: /etc/shadow was read as root and sent
	f=$(wf shadow <<'Y'
name: shadow
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo weights > "$FERRY_OUTPUT_DIR/model.pkl"']}
  - {name: register, kind: register, needs: [train], model: shadowed}
  - {name: deploy, kind: deploy, needs: [register], model: shadowed, serve: [/bin/true], sample: /etc/shadow}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" register state)" succeeded "registered"
	assert_match "$(step_col "$id" deploy reason)" "sample /etc/shadow cannot be read by the job user ferry-job" "the sample refused, saying why"
	# one that is not there, where the job user cannot look (a root-owned 0700 directory): the same answer
	mkdir -m 700 "${FERRY_HOME%/}.closed"
	sed -i "s|sample: /etc/shadow|sample: ${FERRY_HOME%/}.closed/no-such-file|" "$f"
	id=$(submit "$f")
	wait_run "$id" failed 30
	rmdir "${FERRY_HOME%/}.closed"
	assert_match "$(step_col "$id" deploy reason)" "sample ${FERRY_HOME%/}.closed/no-such-file cannot be read by the job user ferry-job" \
		"nothing said of what is in there"
	assert_eq "$(sql "SELECT count(*) FROM deployment_versions")" 0 "nothing deployed"
	stop_daemon a
	# with roots: a workdir, a step's workdir and a dataset outside them are refused
	mkdir -p "$FERRY_HOME/allowed/data"
	echo x >"$FERRY_HOME/allowed/data/a.txt"
	start_daemon b FERRY_JOB_USER= FERRY_ALLOWED_ROOTS="$FERRY_HOME/allowed"
	api POST /api/v1/runs "$(jq -n '{yaml: "name: w\nsteps:\n  - {name: s, command: [true]}\n", workdir: "/tmp"}')"
	assert_eq "$CODE" 400 "a workdir outside the roots"
	assert_match "$BODY" 'workdir /tmp lies outside FERRY_ALLOWED_ROOTS.*"field":"workdir"' "names the field and the roots"
	api POST /api/v1/runs "$(jq -n --arg wd "$FERRY_HOME/allowed" '{yaml: "name: w\nsteps:\n  - {name: in, command: [cat, data/a.txt]}\n  - {name: out, workdir: /etc, command: [true]}\n  - {name: ds, kind: cache, dataset: /etc}\n", workdir: $wd}')"
	assert_eq "$CODE" 201 "a workdir inside: $BODY"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" in state)" succeeded "a step inside the roots runs"
	assert_match "$(step_col "$id" out reason)" "workdir /etc lies outside FERRY_ALLOWED_ROOTS" "a step's workdir outside"
	assert_match "$(step_col "$id" ds reason)" "dataset /etc lies outside FERRY_ALLOWED_ROOTS" "a dataset outside"
	# a root that does not exist stops the daemon at start, naming it
	spawn_daemon c FERRY_ALLOWED_ROOTS=/no/such/root
	for _ in $(seq 1 50); do kill -0 "$(daemon_pid c)" 2>/dev/null || break; sleep 0.1; done
	assert_match "$(cat "$FERRY_HOME/ferryd-c.log")" "FERRY_ALLOWED_ROOTS: /no/such/root is not an existing absolute directory" "a bad root"
}
