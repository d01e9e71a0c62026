# make install, and the installed daemon run as its systemd unit says
# without systemd (the README's "Installing"): as the unprivileged user
# ferry, the unit's environment, SIGTERM to stop.

test_install_and_run_as_the_unit_says() {
	local root="$FERRY_HOME/root" state="$FERRY_HOME/state" unit exec user pid url rc
	make -C "$ROOT" -s install DESTDIR="$root" PREFIX=/usr/local >"$FERRY_HOME/install.log" 2>&1 ||
		{ cat "$FERRY_HOME/install.log"; fail "make install"; }
	unit="$root/usr/local/lib/systemd/system/ferryd.service"
	for f in usr/local/bin/ferryd usr/local/bin/ferry usr/local/bin/ferry-shim usr/local/share/man/man8/ferryd.8.gz \
		usr/local/share/man/man1/ferry.1.gz usr/local/share/doc/ferry/README.md; do
		[ -s "$root/$f" ] || fail "make install left out $f"
	done
	[ -s "$unit" ] || fail "no unit"
	assert_eq "$(sed -n 's/^User=//p' "$unit")" ferry "the unit runs as ferry"
	assert_eq "$(sed -n 's/^ExecStart=//p' "$unit")" "/usr/local/bin/ferryd --log-format json" "ExecStart names the installed binary"
	zcat "$root/usr/local/share/man/man8/ferryd.8.gz" | grep -q '^\.TH FERRYD "8"' || fail "ferryd.8 is not a manual page"
	zcat "$root/usr/local/share/man/man8/ferryd.8.gz" | grep -q '^\.SH SYNOPSIS' || fail "ferryd.8 has no synopsis"
	zcat "$root/usr/local/share/man/man1/ferry.1.gz" | grep -q '^\.TH FERRY "1"' || fail "ferry.1 is not a manual page"
	# the unit's user (install-user.sh, what make install runs as root), a state directory of this test's
	"$ROOT/deploy/install-user.sh" ferry "$state" >/dev/null || fail "install-user.sh"
	exec=$(sed -n 's/^ExecStart=//p' "$unit" | sed "s|^/usr/local|$root/usr/local|")
	user=$(sed -n 's/^User=//p' "$unit")
	# the unit's Environment= lines, FERRY_HOME and FERRY_LISTEN this test's
	# shellcheck disable=SC2046
	# setpriv execs: the pid is ferryd's own (runuser would stay between, and die of the SIGTERM itself)
	setpriv --reuid="$user" --regid="$user" --init-groups -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		$(sed -n 's/^Environment=//p' "$unit" | grep -v -e '^FERRY_HOME=' -e '^FERRY_LISTEN=') \
		FERRY_HOME="$state" FERRY_LISTEN=127.0.0.1:0 $exec >"$FERRY_HOME/unit.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 300); do
		[ -s "$state/ferryd.url" ] && curl -fsS -m 2 "$(head -1 "$state/ferryd.url")/readyz" >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || { cat "$FERRY_HOME/unit.log"; fail "the installed ferryd exited"; }
		sleep 0.1
	done
	url=$(head -1 "$state/ferryd.url")
	assert_eq "$(stat -c %U "$state/api-token")" ferry "its files are ferry's"
	f=$(wf who <<'Y'
name: who
steps:
  - {name: who, command: [sh, -c, 'id -un']}
Y
)
	chmod 644 "$f"
	FERRY_URL=$url FERRY_API_TOKEN=$(cat "$state/api-token") "$root/usr/local/bin/ferry" submit "$f" --watch \
		>"$FERRY_HOME/submit.out" 2>&1 || { cat "$FERRY_HOME/submit.out"; tail -20 "$FERRY_HOME/unit.log"; fail "a run on the installed daemon"; }
	assert_eq "$(cat "$state"/runs/1/who/1/log)" ferry "its job ran as ferry (not root)"
	grep -q '"level":"info"' "$FERRY_HOME/unit.log" || fail "not the unit's --log-format json"
	kill -TERM "$pid"
	rc=0; wait "$pid" || rc=$?
	assert_eq "$rc" 0 "SIGTERM stops it cleanly"
	rc=0; FERRY_HOME="$state" "$root/usr/local/bin/ferryd" db status >/dev/null 2>&1 || rc=$?
	assert_eq "$rc" 3 "its embedded PostgreSQL stopped with it"
}
