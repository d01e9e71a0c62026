# scratch.sh — sourced by the suites' runners (tests/integration/run.sh,
# tests/browser/run.sh): the directory a suite keeps its files in (its
# PostgreSQL cluster, each test's FERRY_HOME, the jobs' directories), in
# memory when it can be.
#
#   scratch_make PREFIX GIB   prints a new directory /tmp/PREFIX.XXXXXX, with a
#                             tmpfs of at most GIB GiB mounted on it when the
#                             suite runs as root, MemAvailable is at least
#                             GIB GiB, KEEP is unset and TEST_TMPFS is not 0;
#                             else the plain directory on /tmp's disk
#   scratch_drop DIR          removes it: unmounts its tmpfs (lazily when a
#                             process still holds a file), else removes its
#                             files in the background
#
# Why: the suite creates files by the hundred thousand (each attempt its
# directories, log and status file; each test a database of some 10 MB),
# and where a disk's new inodes are slow that is the suite's time, not the
# code's. On the 2-core development machine (ext4 without a journal, its
# inode allocator skipping recently freed inodes) a file or directory made
# under /tmp took 0.2-1.8 ms, 0.04 ms on a tmpfs, and the same 28
# integration tests took 35-42 s against 24-28 s. The paths stay /tmp's
# (not /dev/shm's: a container mounts its own /dev/shm over what it is
# given there), and what the tests check does not depend on the medium: a
# daemon or PostgreSQL killed with -9 loses nothing a disk would have kept.
# A clean-clone make test peaked at 4.5 GB (the integration suite's test
# databases, kept to the end for a failure's inspection).
#
# A tmpfs outlives a runner killed with -9: its name records its owner
# (ferry-scratch:PID:STARTTIME, the runner's) and scratch_make unmounts
# the ones whose owner is gone.

scratch_owner() { # PID: "PID STARTTIME" (field 22 of /proc/PID/stat), so a reused pid is not taken for it
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	set -- "$1" $stat
	echo "$1 ${21}"
}

scratch_reap() {
	local src mnt fs rest owner
	while read -r src mnt fs rest; do
		case $src in ferry-scratch:*) ;; *) continue ;; esac
		[ "$fs" = tmpfs ] || continue
		case $mnt in /tmp/ferry-*) ;; *) continue ;; esac
		owner=${src#ferry-scratch:}
		[ "$(scratch_owner "${owner%%:*}" | tr ' ' :)" = "$owner" ] && continue
		umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
		rmdir "$mnt" 2>/dev/null
	done </proc/mounts
}

scratch_make() {
	local dir mem_kb
	dir=$(mktemp -d "/tmp/$1.XXXXXX") || return 1
	# 755 beneath the tmpfs too: a container whose root is the host's (podman's
	# --rootfs /:O) sees this directory, not what is mounted on it, on its way
	# to the paths it is given
	chmod 755 "$dir"
	mem_kb=$(awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo 2>/dev/null)
	if [ -z "${KEEP:-}" ] && [ "${TEST_TMPFS:-1}" != 0 ] && [ "$(id -u)" = 0 ] &&
		[ "${mem_kb:-0}" -ge $(($2 << 20)) ]; then
		scratch_reap
		# the owner in the mount's name, there from the moment it is mounted: a
		# runner starting beside this one (make test starts two) never takes
		# it for a dead one's
		mount -t tmpfs -o "size=${2}g,mode=755" "ferry-scratch:$(scratch_owner "$$" | tr ' ' :)" "$dir" 2>/dev/null

	fi
	echo "$dir"
}

scratch_drop() {
	local dir=$1
	if awk -v d="$dir" '$2 == d && $1 ~ /^ferry-scratch:/ { found = 1 } END { exit !found }' /proc/mounts; then
		umount "$dir" 2>/dev/null || umount -l "$dir"
		rmdir "$dir" 2>/dev/null
	elif mv "$dir" "$dir.removing" 2>/dev/null; then
		(setsid rm -rf "$dir.removing" </dev/null >/dev/null 2>&1 &)
	else
		rm -rf "$dir"
	fi
}
