/*
 * demand — how much CPU a job's threads ask for, not how much they get.
 *
 * The CPU share (CPU time over wall time) of a thread spinning forever
 * falls and swings when other work competes for the cores: beside two
 * other busy processes on 2 cores it got 37–86 % a sample, so a hang rule
 * judging the share never saw it flat. Its demand does not: the kernel's
 * per-thread scheduler statistics (/proc/PID/task/TID/schedstat: time on a
 * CPU and time waiting in a run queue, in ns) add up to the wall time for
 * a thread that is always runnable, whatever share it gets.
 *
 * demand_look gives the busiest thread's runnable time over the interval
 * since the previous look, in percent of it: ~100 for a spinning thread on
 * any machine, ~0 for one asleep in a deadlock, in between (and varying)
 * for work that sleeps on IO or a timer. The kernel adds a wait to
 * run_delay when it ends (the thread runs again): a look taken while the
 * thread waits misses that wait and the next look has it, so single looks
 * of a spinning thread on a crowded machine read 85–100 % and their sum is
 * exact. A wait may span whole looks (a spinner at nice 19 beside a busy
 * one got no turn for 1.5 s; a CPU quota of 1 ms a second holds its
 * thread off 999 ms): such a thread's figure does not move, and it read
 * 0 %, an idle job's figure. Its state tells them apart: a thread
 * runnable (R in its stat) at both looks whose figure did not move never
 * ran in between, so it cannot have slept — it waited the whole interval,
 * 100 %. No state outside struct demand; proc_root is "/proc" (tests give
 * a tree of their own).
 */
#ifndef FERRY_DEMAND_H
#define FERRY_DEMAND_H

#include <stdint.h>

#define DEMAND_THREADS 512 /* threads followed per job; more are not judged */

struct demand {
	int n;
	struct demand_thread {
		int tid;
		int64_t ns;    /* on a CPU + waiting for one, since the thread started */
		int64_t at_ns; /* when that was read (monotonic) */
		char state;    /* its state letter then (R: running or runnable), '?' unread */
	} t[DEMAND_THREADS];
};

void demand_init(struct demand *d);

/*
 * One look at every thread of pids: the busiest thread's demand in percent
 * (0–100) since the previous look, or -1 when there is none to compare with
 * (the first look, no thread seen in both, or no schedstat: a kernel
 * without CONFIG_SCHED_INFO). now_ns is the time of the look (monotonic,
 * tests give their own), or < 0: each thread's file is timed as it is read
 * — a caller's earlier timestamp would count the time the reader was
 * descheduled as time the threads did not run (a spinning thread measured
 * at 83 % on a loaded machine).
 */
double demand_look(struct demand *d, const char *proc_root, const int *pids, int npids, int64_t now_ns);

#endif
