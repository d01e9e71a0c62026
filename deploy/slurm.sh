#!/usr/bin/env bash
# deploy/slurm.sh — a one-node Slurm on localhost for Ferry's `slurm`
# executor (and its tests): munged, slurmctld, slurmd and slurmrestd, with
# every file (config, keys, state, logs, pid files) under one directory the
# caller owns.
#
#   deploy/slurm.sh [start] [DIR]   start what is not running yet (idempotent);
#                                   prints the settings ferryd needs
#   deploy/slurm.sh stop [DIR]      stop all of it (idempotent)
#   deploy/slurm.sh env [DIR]       print the settings again (a fresh token)
#
# DIR: the argument, else $FERRY_SLURM_DIR, else /var/tmp/ferry-slurm.
# Ports: FERRY_SLURM_PORT_BASE (default 16817): slurmctld BASE, slurmd
# BASE+1, slurmrestd BASE+3 on 127.0.0.1. One slurmctld per port per
# machine: a second cluster needs another base.
#
# Needs (Debian 12, as root): slurm-wlm slurmrestd slurm-wlm-jwt-plugin
# munge (make deps). Jobs run as root (SlurmUser=root): this is a test and
# single-machine set-up, not a hardened cluster. slurmrestd runs as the
# unprivileged user FERRY_SLURM_RESTD_USER (default: slurm, else nobody)
# with SLURM_JWT=daemon: requests carry X-SLURM-USER-NAME and
# X-SLURM-USER-TOKEN, a token from `scontrol token username=root`.
set -euo pipefail

cmd=start
case "${1:-}" in start|stop|env|status) cmd=$1; shift ;; esac
DIR=${1:-${FERRY_SLURM_DIR:-/var/tmp/ferry-slurm}}
BASE=${FERRY_SLURM_PORT_BASE:-16817}
CTLD_PORT=$BASE SLURMD_PORT=$((BASE + 1)) REST_PORT=$((BASE + 3))
RUSER=${FERRY_SLURM_RESTD_USER:-}
if [ -z "$RUSER" ]; then
	if id slurm >/dev/null 2>&1; then RUSER=slurm; else RUSER=nobody; fi
fi
CONF=$DIR/etc/slurm.conf
export SLURM_CONF=$CONF

die() { echo "slurm.sh: $*" >&2; exit 1; }

# running PID: alive and not a zombie (an init that does not reap leaves those)
running() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# alive NAME: whether the daemon whose pid is in DIR/run/NAME.pid runs
alive() {
	local f=$DIR/run/$1.pid
	[ -s "$f" ] && running "$(cat "$f")"
}

# stop_one NAME: SIGTERM, up to 5 s, then SIGKILL
stop_one() {
	local f=$DIR/run/$1.pid pid
	[ -s "$f" ] || return 0
	pid=$(cat "$f")
	if running "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do running "$pid" || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		for _ in $(seq 1 20); do running "$pid" || break; sleep 0.1; done
		echo "stopped $1 (pid $pid)"
	fi
	rm -f "$f"
}

print_env() {
	local token
	token=$(scontrol token username=root lifespan=86400 2>/dev/null | sed -n 's/^SLURM_JWT=//p') || true
	cat <<E
SLURM_CONF=$CONF
FERRY_SLURM_URL=http://127.0.0.1:$REST_PORT
FERRY_SLURM_USER=root
FERRY_SLURM_TOKEN=$token
# a fresh token: SLURM_CONF=$CONF scontrol token username=root lifespan=SECONDS
# stop: $0 stop $DIR
E
}

if [ "$cmd" = stop ]; then
	# jobs first (they would be requeued on the next start), then the daemons
	if alive slurmctld; then
		scancel --quiet --full --user=root 2>/dev/null || scancel --quiet --user=root 2>/dev/null || true
	fi
	for d in slurmrestd slurmd slurmctld munged; do stop_one "$d"; done
	# a job step whose end never reached slurmd (slurmctld was away) keeps its
	# slurmstepd waiting; ours write to this cluster's slurmd log
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
		if ls -l "$p/fd" 2>/dev/null | grep -qF "$DIR/log/slurmd.log"; then
			kill -KILL "${p#/proc/}" 2>/dev/null && echo "stopped slurmstepd (pid ${p#/proc/})"
		fi
	done
	exit 0
fi
if [ "$cmd" = env ]; then print_env; exit 0; fi
if [ "$cmd" = status ]; then
	for d in munged slurmctld slurmd slurmrestd; do
		if alive "$d"; then echo "$d running (pid $(cat "$DIR/run/$d.pid"))"; else echo "$d stopped"; fi
	done
	exit 0
fi

[ "$(id -u)" = 0 ] || die "run as root (munged runs as munge, slurmd must start jobs as their users)"
for b in munged slurmctld slurmd slurmrestd scontrol; do
	command -v "$b" >/dev/null 2>&1 || die "$b not found: apt-get install slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge (make deps)"
done
mkdir -p "$DIR"/{etc,run,log,state,spool,munge}
chmod 755 "$DIR" "$DIR"/etc "$DIR"/run "$DIR"/log

# munge: its own key and socket under DIR, run as the munge user
chown munge: "$DIR/munge"
chmod 700 "$DIR/munge"
if [ ! -s "$DIR/munge/munge.key" ]; then
	dd if=/dev/urandom bs=1 count=1024 of="$DIR/munge/munge.key" status=none
fi
chown munge: "$DIR/munge/munge.key"
chmod 400 "$DIR/munge/munge.key"
mkdir -p "$DIR/munge-sock"
chown munge: "$DIR/munge-sock"
chmod 755 "$DIR/munge-sock"
# the JWT key slurmctld signs tokens with (readable by SlurmUser only)
if [ ! -s "$DIR/etc/jwt.key" ]; then
	dd if=/dev/urandom bs=32 count=1 of="$DIR/etc/jwt.key" status=none
fi
chmod 600 "$DIR/etc/jwt.key"

cat >"$CONF.new" <<C
# written by deploy/slurm.sh: a one-node cluster on localhost
ClusterName=ferry
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge-sock/munge.socket
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/etc/jwt.key
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# a job that asks for no memory gets 500 MB a CPU (the example pipeline's scikit-learn steps peak above 100 MB)
DefMemPerCPU=500
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/state/slurmctld.pid
SlurmdPidFile=$DIR/spool/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=300
KillWait=5
MessageTimeout=5
SlurmctldTimeout=30
SlurmdTimeout=300
InactiveLimit=0
Waittime=0
GresTypes=gpu
NodeName=localhost CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
C
if ! cmp -s "$CONF.new" "$CONF" 2>/dev/null; then
	mv "$CONF.new" "$CONF"
	chmod 644 "$CONF"
else
	rm -f "$CONF.new"
fi

# wait_for WHAT TEST…: up to 10 s
wait_for() {
	local what=$1; shift
	for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	die "$what did not come up (logs in $DIR/log)"
}

if ! alive munged; then
	# --force: the socket's parent directories (/tmp) are world-writable with the sticky bit
	runuser -u munge -- munged --force --key-file="$DIR/munge/munge.key" \
		--socket="$DIR/munge-sock/munge.socket" --pid-file="$DIR/munge/munged.pid" \
		--seed-file="$DIR/munge/munge.seed" --log-file="$DIR/munge/munged.log"
	wait_for munged test -s "$DIR/munge/munged.pid"
	cp "$DIR/munge/munged.pid" "$DIR/run/munged.pid"
	echo "started munged (pid $(cat "$DIR/run/munged.pid"))"
fi
if ! alive slurmctld; then
	setsid slurmctld -D -i -f "$CONF" >>"$DIR/log/slurmctld.out" 2>&1 </dev/null &
	echo $! >"$DIR/run/slurmctld.pid"
	wait_for slurmctld scontrol ping
	echo "started slurmctld (pid $(cat "$DIR/run/slurmctld.pid"), port $CTLD_PORT)"
fi
if ! alive slurmd; then
	setsid slurmd -D -N localhost -f "$CONF" >>"$DIR/log/slurmd.out" 2>&1 </dev/null &
	echo $! >"$DIR/run/slurmd.pid"
	node_up() { sinfo -h -n localhost -o %T | grep -Eq '^(idle|mixed|allocated)'; }
	wait_for slurmd node_up
	echo "started slurmd (pid $(cat "$DIR/run/slurmd.pid"), port $SLURMD_PORT)"
fi
if ! alive slurmrestd; then
	# setpriv execs slurmrestd (runuser would stay as its parent and outlive it)
	SLURM_JWT=daemon setsid setpriv --reuid="$RUSER" --regid="$(id -g "$RUSER")" --init-groups -- \
		slurmrestd -f "$CONF" -a rest_auth/jwt -s openapi/v0.0.38 "127.0.0.1:$REST_PORT" \
		>>"$DIR/log/slurmrestd.log" 2>&1 </dev/null &
	echo $! >"$DIR/run/slurmrestd.pid"
	wait_for slurmrestd curl -s -o /dev/null "http://127.0.0.1:$REST_PORT/"
	echo "started slurmrestd as $RUSER (pid $(cat "$DIR/run/slurmrestd.pid"), http://127.0.0.1:$REST_PORT)"
fi
print_env
