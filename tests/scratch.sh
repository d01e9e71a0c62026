# scratch.sh — sourced by the suites' runners (tests/integration/run.sh,
# tests/browser/run.sh): scratch_dir prints the folder a suite makes its
# own directory in (its PostgreSQL cluster, each test's FERRY_HOME, the
# jobs' files).
#
# TEST_TMPDIR when set; else /dev/shm when it is a writable tmpfs with at
# least 6 GiB free and as much memory available; else /tmp. Why a tmpfs:
# the suite creates files by the hundred thousand (every step's attempt
# makes its directories, log and status file; every test a database), and
# on a disk whose new inodes are slow that is the suite's time, not the
# code under test: on one 2-core machine a file or directory created under
# /tmp took 0.2-1.8 ms (under /dev/shm 0.04), and the same 28 integration
# tests ran in 35-42 s under /tmp, 24-28 s under /dev/shm. What the tests
# check does not depend on it: a daemon or PostgreSQL killed (-9) loses
# nothing a disk would have kept (the tmpfs outlives the process). A
# container runtime's /dev/shm (64 MiB by default) is too small and is
# passed over. The suite's peak use of it: see tests/integration/run.sh.
scratch_dir() {
	local d=/dev/shm free_kb mem_kb need_kb=$((6 << 20))
	if [ -n "${TEST_TMPDIR:-}" ]; then
		printf '%s\n' "$TEST_TMPDIR"
		return
	fi
	if [ "$(stat -f -c %T "$d" 2>/dev/null)" = tmpfs ] && [ -w "$d" ] && [ -x "$d" ]; then
		free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR == 2 { print $4 }')
		mem_kb=$(awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo 2>/dev/null)
		if [ "${free_kb:-0}" -ge "$need_kb" ] && [ "${mem_kb:-0}" -ge "$need_kb" ]; then
			printf '%s\n' "$d"
			return
		fi
	fi
	printf '%s\n' /tmp
}
