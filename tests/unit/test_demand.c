/*
 * Unit tests of a job's CPU demand (orchestrator/monitor/demand.c): a
 * /proc tree of our own for the arithmetic (threads that come, go, or
 * are too many), then real processes — a spinning one is at ~100 % and a
 * sleeping one at ~0 % however busy this machine is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "monitor/demand.h"
#include "lib/util.h"

static char root[64];

#define MS(x) ((int64_t)(x) * 1000000)

static void put(int pid, int tid, long long run, long long wait)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d", root, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%d/task", root, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%d/task/%d", root, pid, tid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%d/task/%d/schedstat", root, pid, tid);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%lld %lld 42\n", run, wait);
	fclose(f);
}

/* the thread's stat as the kernel writes it, with a comm that holds ") " */
static void put_state(int pid, int tid, char state)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d/task/%d/stat", root, pid, tid);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%d (py) thr) %c 1 %d %d 0 -1 4194560 0\n", tid, state, pid, pid);
	fclose(f);
}

static void gone(int pid, int tid)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%d/task/%d/schedstat", root, pid, tid);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%d/task/%d/stat", root, pid, tid);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%d/task/%d", root, pid, tid);
	rmdir(path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/ferry-demand.XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	return system(cmd);
}

/* The busiest thread's (run + wait) over the interval; new threads wait a look; gone ones are forgotten. */
static void test_demand__arithmetic(void **state)
{
	static struct demand d;
	int pids[] = {100, 200};

	(void)state;
	demand_init(&d);
	put(100, 100, 5000000000LL, 0);
	put(100, 101, 1000000000LL, 1000000000LL);
	put(200, 200, 0, 0);
	assert_true(demand_look(&d, root, pids, 2, MS(1000)) < 0); /* the first look: nothing to compare */
	/* 1 s later: thread 100 ran 0.3 s, waited 0.65 s (a spinner getting a third of a core); 101 ran 0.1 s */
	put(100, 100, 5300000000LL, 650000000LL);
	put(100, 101, 1100000000LL, 1000000000LL);
	put(200, 200, 0, 0);
	assert_float_equal(demand_look(&d, root, pids, 2, MS(2000)), 95.0, 0.01);
	/* 100 gone; a new thread 102 (no interval yet); 101 and 200 asleep */
	gone(100, 100);
	put(100, 102, 900000000LL, 0);
	assert_float_equal(demand_look(&d, root, pids, 2, MS(3000)), 0.0, 0.01);
	/* 102 judged now; skew over 100 % is clamped */
	put(100, 102, 2000000000LL, 100000000LL);
	assert_float_equal(demand_look(&d, root, pids, 2, MS(4000)), 100.0, 0.01);
	/* no process readable: -1 */
	int none[] = {999};
	assert_true(demand_look(&d, root, none, 1, MS(5000)) < 0);
}

/*
 * A thread whose figure did not move: asleep (0 %), unless it was runnable
 * at both looks — then it never ran in between, so it never slept: it
 * waited the whole interval (100 %). Runnable now but asleep at the
 * previous look, it woke somewhere in between: its figure says 0 until the
 * wait ends.
 */
static void test_demand__waiting_whole_interval(void **state)
{
	static struct demand d;
	int pid = 400;

	(void)state;
	demand_init(&d);
	put(pid, 400, 7000000LL, 20000LL);
	put_state(pid, 400, 'R');
	put(pid, 401, 3000000LL, 0);
	put_state(pid, 401, 'S');
	assert_true(demand_look(&d, root, &pid, 1, MS(1000)) < 0);
	/* 400 held off the CPU (a quota, or nice 19 beside a spinner): R, unmoved */
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(1500)), 100.0, 0.01);
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(2000)), 100.0, 0.01);
	/* it ran 1 ms and the wait it ended is counted: over 100 %, clamped */
	put(pid, 400, 8000000LL, 2000020000LL);
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(3000)), 100.0, 0.01);
	/* asleep now (S), unmoved: 0; 401 woke (S, then R), unmoved: still 0 */
	put_state(pid, 400, 'S');
	put_state(pid, 401, 'R');
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(4000)), 0.0, 0.01);
	/* no stat to read ('?'): the figure alone, 0 — at that look and at the next, runnable again */
	char path[256];
	snprintf(path, sizeof(path), "%s/%d/task/%d/stat", root, pid, 400);
	unlink(path);
	gone(pid, 401);
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(5000)), 0.0, 0.01);
	put_state(pid, 400, 'R');
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(6000)), 0.0, 0.01);
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(7000)), 100.0, 0.01);
}

/* More threads than DEMAND_THREADS: the first ones are followed, none overflows. */
static void test_demand__bounded(void **state)
{
	static struct demand d;
	int pid = 300;

	(void)state;
	demand_init(&d);
	for (int t = 0; t < DEMAND_THREADS + 20; t++)
		put(pid, 1000 + t, 0, 0);
	assert_true(demand_look(&d, root, &pid, 1, MS(1000)) < 0);
	assert_int_equal(d.n, DEMAND_THREADS);
	assert_float_equal(demand_look(&d, root, &pid, 1, MS(2000)), 0.0, 0.01);
}

static pid_t child(int spin)
{
	pid_t p = fork();

	if (p == 0) {
		/* gone with this test, whatever its assertions do */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (spin)
			for (volatile unsigned long i = 0;; i++)
				;
		pause();
		_exit(0);
	}
	assert_true(p > 0);
	return p;
}

/*
 * Real processes: a spinning one asks for a whole core, with two more
 * spinning beside it on this machine's cores; a paused one asks for none.
 * schedstat counts a wait when it ends (the thread runs again), so a look
 * taken while the thread waits misses that wait and the next look has it:
 * each 500 ms look is ≥ 70 % on a loaded machine, the whole 1.5 s ≥ 92 %.
 * Each look reads its own clock (now_ns -1).
 */
static void test_demand__real_processes(void **state)
{
	static struct demand ds, dz, dall;
	pid_t spin = child(1), other1 = child(1), other2 = child(1), idle = child(0);
	int sp = spin, ip = idle, low = 0;
	double a = -1, b = -1, all;

	(void)state;
	usleep(200000); /* the paused one has paused */
	demand_init(&ds);
	demand_init(&dz);
	demand_init(&dall);
	demand_look(&ds, "/proc", &sp, 1, -1);
	demand_look(&dz, "/proc", &ip, 1, -1);
	demand_look(&dall, "/proc", &sp, 1, -1);
	for (int i = 0; i < 3; i++) {
		usleep(500000);
		a = demand_look(&ds, "/proc", &sp, 1, -1);
		b = demand_look(&dz, "/proc", &ip, 1, -1);
		print_message("look %d: spinning %.1f %%, paused %.1f %%\n", i, a, b);
		low += a < 70 || !(b >= 0 && b <= 5);
	}
	all = demand_look(&dall, "/proc", &sp, 1, -1);
	print_message("over the three: spinning %.1f %%\n", all);
	kill(spin, SIGKILL), kill(other1, SIGKILL), kill(other2, SIGKILL), kill(idle, SIGKILL);
	waitpid(spin, NULL, 0), waitpid(other1, NULL, 0), waitpid(other2, NULL, 0), waitpid(idle, NULL, 0);
	assert_int_equal(low, 0);
	assert_true(all >= 92);
}

/*
 * A cgroup of our own whose CPU quota is 1 ms a second (v1's cpu
 * controller, or v2's cpu.max): dir gets its path; 0 when it is made, -1
 * where this machine lets us make none (not root, no cpu controller).
 */
static int quota_cgroup(char *dir, size_t size)
{
	char f[320];
	FILE *w;

	snprintf(dir, size, "/sys/fs/cgroup/cpu/ferry-demand-%d", (int)getpid());
	if (mkdir(dir, 0755) == 0) {
		snprintf(f, sizeof(f), "%s/cpu.cfs_period_us", dir);
		if ((w = fopen(f, "w")) != NULL && fprintf(w, "1000000\n") > 0 && fclose(w) == 0) {
			snprintf(f, sizeof(f), "%s/cpu.cfs_quota_us", dir);
			if ((w = fopen(f, "w")) != NULL && fprintf(w, "1000\n") > 0 && fclose(w) == 0)
				return 0;
		}
		rmdir(dir);
		return -1;
	}
	snprintf(dir, size, "/sys/fs/cgroup/ferry-demand-%d", (int)getpid());
	if ((w = fopen("/sys/fs/cgroup/cgroup.subtree_control", "w")) != NULL) {
		fprintf(w, "+cpu\n");
		fclose(w);
	}
	if (mkdir(dir, 0755) != 0)
		return -1;
	snprintf(f, sizeof(f), "%s/cpu.max", dir);
	if ((w = fopen(f, "w")) != NULL && fprintf(w, "1000 1000000\n") > 0 && fclose(w) == 0)
		return 0;
	rmdir(dir);
	return -1;
}

/*
 * A spinning thread held off the CPU for whole looks: in a cgroup with a
 * quota of 1 ms a second it runs 1 ms and waits 999, runnable all along.
 * Its schedstat does not move between most 300 ms looks (the old reading
 * was 0 %, an idle job's), yet it asks for the CPU the whole time: each
 * look reads ≥ 90 %. A paused process in the same cgroup reads 0 %.
 */
static void test_demand__held_off_by_a_quota(void **state)
{
	static struct demand ds, dz;
	char dir[128], procs[160];
	pid_t spin, idle;
	int sp, ip, low = 0;

	(void)state;
	if (quota_cgroup(dir, sizeof(dir)) < 0) {
		print_message("no cgroup with a CPU quota can be made here (%s): skipped\n", dir);
		skip();
	}
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	spin = child(1), idle = child(0);
	sp = spin, ip = idle;
	for (int i = 0; i < 2; i++) {
		FILE *w = fopen(procs, "w");
		assert_non_null(w);
		fprintf(w, "%d\n", i == 0 ? spin : idle);
		assert_int_equal(fclose(w), 0);
	}
	usleep(1200000); /* the spinner has used this period's millisecond */
	demand_init(&ds);
	demand_init(&dz);
	demand_look(&ds, "/proc", &sp, 1, -1);
	demand_look(&dz, "/proc", &ip, 1, -1);
	for (int i = 0; i < 6; i++) {
		double a, b;
		usleep(300000);
		a = demand_look(&ds, "/proc", &sp, 1, -1);
		b = demand_look(&dz, "/proc", &ip, 1, -1);
		print_message("look %d: spinning under the quota %.1f %%, paused %.1f %%\n", i, a, b);
		low += a < 90 || !(b >= 0 && b <= 5);
	}
	kill(spin, SIGKILL), kill(idle, SIGKILL);
	waitpid(spin, NULL, 0), waitpid(idle, NULL, 0);
	for (int k = 0; k < 50 && rmdir(dir) != 0; k++)
		usleep(20000);
	assert_int_equal(low, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_demand__arithmetic),
		cmocka_unit_test(test_demand__waiting_whole_interval),
		cmocka_unit_test(test_demand__bounded),
		cmocka_unit_test(test_demand__real_processes),
		cmocka_unit_test(test_demand__held_off_by_a_quota),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
