#!/usr/bin/env bash
# deploy/dockerd.sh — a Docker engine for `executor: docker` on a machine
# with no init system (Debian's docker.io: /usr/sbin/dockerd), and the small
# local image `ferry-base` (busybox-static; no registry is needed).
#
#   deploy/dockerd.sh [start]   start dockerd unless its socket answers, build ferry-base if missing
#   deploy/dockerd.sh python-image   also build ferry-python (busybox + the host's python3 and
#                               python3-sklearn stack, ~200 MB: the digits pipeline's steps) if missing
#   deploy/dockerd.sh stop      stop the dockerd this script started (its pidfile)
#   deploy/dockerd.sh status    0 when the socket answers /_ping
#
# Idempotent: a dockerd that already answers on the socket is used as it is
# (and never stopped by `stop`, which only stops the pid in this script's
# pidfile). The last line of `start` says "dockerd: started pid N" or
# "dockerd: already running"; the test harness stops it afterwards only in
# the first case.
#
# Settings (environment):
#   FERRY_DOCKER_HOST  unix:///var/run/docker.sock   the socket (ferryd reads the same variable)
#   DOCKERD_ROOT       /var/lib/ferry-docker         data root (images, containers)
#   DOCKERD_EXEC_ROOT  /var/run/ferry-docker         exec root; its log and the pid this
#                                                    script started are beside it (.log, .started.pid)
#   FERRY_BASE_IMAGE   ferry-base                    the image built from busybox-static
set -euo pipefail

HOST=${FERRY_DOCKER_HOST:-unix:///var/run/docker.sock}
SOCK=${HOST#unix://}
ROOT=${DOCKERD_ROOT:-/var/lib/ferry-docker}
EXEC_ROOT=${DOCKERD_EXEC_ROOT:-/var/run/ferry-docker}
PIDFILE=$EXEC_ROOT/dockerd.pid   # dockerd's own
OURS=$EXEC_ROOT.started.pid      # the dockerd this script started (what stop stops)
LOG=$EXEC_ROOT.log
IMAGE=${FERRY_BASE_IMAGE:-ferry-base}
BUSYBOX=${BUSYBOX:-/bin/busybox}

ping() { curl -fsS -m 2 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; }

die() { echo "dockerd.sh: $*" >&2; exit 1; }

case $HOST in unix://*) ;; *) die "FERRY_DOCKER_HOST must be unix:///PATH (got $HOST)" ;; esac

do_stop() {
	local pid
	[ -s "$OURS" ] || { echo "dockerd: not started by this script (no $OURS)"; return 0; }
	pid=$(cat "$OURS")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid" 2>/dev/null || true; }
		echo "dockerd: stopped pid $pid"
	else
		echo "dockerd: pid $pid was not running"
	fi
	rm -f "$OURS"
}

# ferry-base: busybox-static and its applet links, nothing else (about 2 MB).
build_image() {
	local tmp
	[ -x "$BUSYBOX" ] || die "$BUSYBOX is missing: apt-get install busybox-static"
	tmp=$(mktemp -d)
	mkdir -p "$tmp/rootfs/bin" "$tmp/rootfs/tmp" "$tmp/rootfs/etc" "$tmp/rootfs/proc" \
		"$tmp/rootfs/sys" "$tmp/rootfs/dev"
	cp "$BUSYBOX" "$tmp/rootfs/bin/busybox"
	for a in $("$BUSYBOX" --list); do
		[ "$a" = busybox ] || ln -s busybox "$tmp/rootfs/bin/$a"
	done
	chmod 1777 "$tmp/rootfs/tmp"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$tmp/rootfs/etc/passwd"
	echo 'root:x:0:' >"$tmp/rootfs/etc/group"
	tar -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
	# the Engine API itself (POST /images/create?fromSrc=-): no client binary needed
	curl -fsS -m 120 --unix-socket "$SOCK" -X POST -H 'Content-Type: application/x-tar' \
		--data-binary @"$tmp/rootfs.tar" \
		"http://d/v1.41/images/create?fromSrc=-&repo=$IMAGE&tag=latest&changes=ENV%20PATH%3D%2Fbin&changes=CMD%20%5B%22sh%22%5D" \
		>"$tmp/out" || { rm -rf "$tmp"; die "importing $IMAGE failed"; }
	rm -rf "$tmp"
	echo "dockerd: built image $IMAGE from $BUSYBOX"
}

# ferry-python: ferry-base plus the host's python3 with numpy, scipy, scikit-learn
# and joblib and the shared libraries they load (ldd), dereferenced (about
# 200 MB; a second to import). No registry, no pip: what python3-sklearn put here.
build_python_image() {
	local py pylib tmp dp=/usr/lib/python3/dist-packages
	py=$(readlink -f /usr/bin/python3) || die "/usr/bin/python3 is missing: apt-get install python3"
	pylib=/usr/lib/$(basename "$py")
	[ -d "$dp/sklearn" ] || die "$dp/sklearn is missing: apt-get install python3-sklearn"
	tmp=$(mktemp -d)
	mkdir -p "$tmp/r/bin" "$tmp/r/tmp" "$tmp/r/etc" "$tmp/r/lib64" "$tmp/r/usr/bin"
	ln -s usr/lib "$tmp/r/lib"
	cp "$BUSYBOX" "$tmp/r/bin/busybox"
	for a in $("$BUSYBOX" --list); do [ "$a" = busybox ] || ln -s busybox "$tmp/r/bin/$a"; done
	chmod 1777 "$tmp/r/tmp"
	ln -s "$(basename "$py")" "$tmp/r/usr/bin/python3"
	cp -L /lib64/ld-linux-x86-64.so.2 "$tmp/r/lib64/"
	local paths=("$py" "$pylib" "$dp/sklearn" "$dp/numpy" "$dp/scipy" "$dp/joblib" "$dp/threadpoolctl.py")
	{ find "${paths[@]}" -name '*.so*' -type f; echo "$py"; } | xargs ldd 2>/dev/null |
		awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sed 's|^/lib/|/usr/lib/|' | sort -u >"$tmp/libs"
	tar -cf "$tmp/py.tar" -C "$tmp/r" . --exclude=__pycache__ -C / "${paths[@]#/}"
	# the libraries by the names the loader looks for (alternatives' symlinks resolved)
	tar -rhf "$tmp/py.tar" -C / $(sed 's|^/||' "$tmp/libs")
	curl -fsS -m 600 --unix-socket "$SOCK" -X POST -H 'Content-Type: application/x-tar' \
		--data-binary @"$tmp/py.tar" \
		"http://d/v1.41/images/create?fromSrc=-&repo=ferry-python&tag=latest&changes=ENV%20PATH%3D%2Fusr%2Fbin%3A%2Fbin" \
		>"$tmp/out" || { rm -rf "$tmp"; die "importing ferry-python failed"; }
	rm -rf "$tmp"
	echo "dockerd: built image ferry-python from the host's $(basename "$py") and python3-sklearn"
}

do_start() {
	local started=""
	if ! ping; then
		[ -x /usr/sbin/dockerd ] || die "/usr/sbin/dockerd is missing: apt-get install docker.io"
		mkdir -p "$ROOT" "$EXEC_ROOT" "$(dirname "$SOCK")"
		if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
			# one still starting or stopping: give it a moment
			for _ in $(seq 1 100); do ping && break; kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.1; done
		fi
		if ping; then
			echo "dockerd: already running on $SOCK"
			curl -fsS -m 10 --unix-socket "$SOCK" "http://d/v1.41/images/$IMAGE/json" >/dev/null 2>&1 || build_image
			return 0
		fi
		if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
			die "dockerd pid $(cat "$PIDFILE") runs but $SOCK does not answer; see $LOG"
		fi
		rm -f "$SOCK"
		# setsid: it outlives the shell that started it, and a ^C there
		setsid /usr/sbin/dockerd --host "$HOST" --data-root "$ROOT" --exec-root "$EXEC_ROOT" \
			--pidfile "$PIDFILE" >>"$LOG" 2>&1 </dev/null &
		for _ in $(seq 1 300); do
			ping && break
			kill -0 $! 2>/dev/null || { tail -20 "$LOG" >&2; die "dockerd exited; see $LOG"; }
			sleep 0.1
		done
		ping || { tail -20 "$LOG" >&2; die "dockerd did not answer on $SOCK within 30 s; see $LOG"; }
		started=$!
		echo "$started" >"$OURS"
	fi
	curl -fsS -m 10 --unix-socket "$SOCK" "http://d/v1.41/images/$IMAGE/json" >/dev/null 2>&1 || build_image
	if [ -n "$started" ]; then
		echo "dockerd: data root $ROOT, log $LOG, socket $SOCK; stop it with: $0 stop"
		echo "dockerd: started pid $started"
	else
		echo "dockerd: already running on $SOCK"
	fi
}

case ${1:-start} in
start) do_start ;;
python-image)
	do_start
	curl -fsS -m 10 --unix-socket "$SOCK" "http://d/v1.41/images/ferry-python/json" >/dev/null 2>&1 || build_python_image
	;;
stop) do_stop ;;
status) ping && echo "dockerd: answers on $SOCK" || { echo "dockerd: no answer on $SOCK"; exit 3; } ;;
*) die "usage: $0 [start|python-image|stop|status]" ;;
esac
