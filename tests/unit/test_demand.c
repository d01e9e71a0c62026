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

static void gone(int pid, int tid)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%d/task/%d/schedstat", root, pid, tid);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_demand__arithmetic),
		cmocka_unit_test(test_demand__bounded),
		cmocka_unit_test(test_demand__real_processes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
