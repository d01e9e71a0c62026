/*
 * fault — linked only into bin/ferryd-test, the daemon the crash tests run
 * (never into ferryd). It sets exec_fault_hook from FERRY_FAULT, a list of
 * ACTION:POINT words separated by spaces or commas:
 *   kill:POINT  the daemon kills itself (SIGKILL) when the engine reaches POINT
 *   fail:POINT  the engine's action at POINT fails (FERRY_FAULT_TIMES times, default 1)
 *   sleep:POINT the daemon's thread that reaches POINT sleeps 3 s there (a window for the test)
 *   hold:POINT  the thread that reaches POINT waits there until the file
 *               $FERRY_HOME/fault.release exists (at most 5 min): work
 *               that lasts exactly as long as the test wants, however slow
 *               the machine
 * The points are "started" (a job was forked, its handle not yet recorded),
 * "record" (recording handles: fail makes it fail), "sigchld" (fail: the
 * engine drops a SIGCHLD unlooked-at), "record-failed"
 * (right after a failed record), "docker-shim-gone" (a docker job's supervisor
 * found dead, its end not recorded), "expanding" (a foreach step's children
 * are being written: one batch is, the next is not), "registering" (a
 * register step's work, on a worker thread), "finish-pool" (a batch of
 * results being closed on a worker's connection: fail makes it fail),
 * "finish-claim" (a batch closed on the loop with the claim that follows,
 * ferry_finish_claim: fail makes the call fail) and "claimed" (that call
 * committed steps claimed in it, their jobs not started yet) and "replica-written" (the
 * reconcile round or a deploy step wrote a replica's start, its row and its event),
 * "monitor-hung-written" (the monitor wrote a hung verdict and its event),
 * "monitor-suspected-written" (… a suspicion or its clearing, the row's state and its event) and
 * "ab-ended" (a deploy step's A/B test passed: its routing's end written, the winner's 100% not yet). It also registers the "test" executor
 * type: the local executor with each hook call appended to
 * $FERRY_HOME/test-executor.log, so a test sees the engine go through the
 * table and nothing else.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "lib/util.h"

static int fail_left = -1;

/* Whether FERRY_FAULT holds the word action:point. */
static int has(const char *action, const char *point)
{
	const char *f = getenv("FERRY_FAULT");
	size_t na = strlen(action), np = strlen(point);

	for (const char *p = f; p && *p;) {
		size_t n = strcspn(p, " ,");
		if (n == na + 1 + np && strncmp(p, action, na) == 0 && p[na] == ':' &&
		    strncmp(p + na + 1, point, np) == 0)
			return 1;
		p += n;
		p += strspn(p, " ,");
	}
	return 0;
}

static int fault_hook(const char *point)
{
	if (has("sleep", point)) {
		/* a window for the test to act in (a stop while a fan-out is being written); a worker's thread sleeps */
		flog_warn("fault injected: sleeping 3 s at \"%s\"", point);
		sleep(3);
	}
	if (has("hold", point)) {
		const char *home = getenv("FERRY_HOME");
		char *release = xasprintf("%s/fault.release", home ? home : ".");
		flog_warn("fault injected: holding at \"%s\" until %s exists", point, release);
		for (int i = 0; i < 3000 && access(release, F_OK) != 0; i++)
			usleep(100000);
		free(release);
	}
	if (has("kill", point)) {
		flog_warn("fault injected: killing the daemon at \"%s\"", point);
		kill(getpid(), SIGKILL);
	}
	if (has("fail", point)) {
		if (fail_left < 0) {
			int64_t n = 1;
			if (getenv("FERRY_FAULT_TIMES"))
				parse_int64(getenv("FERRY_FAULT_TIMES"), &n);
			fail_left = (int)n;
		}
		if (fail_left > 0) {
			fail_left--;
			flog_warn("fault injected: failing \"%s\"", point);
			return 1;
		}
	}
	return 0;
}

/* ---- the test executor type --------------------------------------------- */

static struct exec_type exec_test;

static void note(const char *what, const struct exec_job *job)
{
	const char *home = getenv("FERRY_HOME");
	char *path = xasprintf("%s/test-executor.log", home ? home : ".");
	FILE *f = fopen(path, "a");

	if (f) {
		fprintf(f, "%s run=%lld step=%s attempt=%d\n", what, (long long)job->run_id,
			job->name ? job->name : "?", job->attempt);
		fclose(f);
	}
	free(path);
}

static int t_start(struct exec_job *job, const struct exec_spec *s, enum exec_mode mode,
		   struct exec_status *st)
{
	int rc = exec_local.start(job, s, mode, st);
	if (rc == 0)
		job->type = &exec_test;
	note(rc == 0 ? "start" : "start-failed", job);
	return rc;
}

static int t_poll(struct exec_job *job, struct exec_status *st)
{
	int rc = exec_local.poll(job, st);
	if (rc == 1)
		note("end", job);
	return rc;
}

static void t_signal(const struct exec_job *job, int sig)
{
	note(sig == SIGKILL ? "kill" : "term", job);
	exec_local.signal(job, sig);
}

static int t_adopt(struct exec_job *job, struct exec_status *st)
{
	int rc = exec_local.adopt(job, st);
	note(rc == 1 ? "adopt" : "adopt-ended", job);
	return rc;
}

/* exec_test: a copy of the local row with the hooks above, filled at start-up. */
__attribute__((constructor)) static void fault_init(void)
{
	exec_fault_hook = fault_hook;
	exec_test = exec_local;
	exec_test.name = "test";
	exec_test.start = t_start;
	exec_test.poll = t_poll;
	exec_test.signal = t_signal;
	exec_test.adopt = t_adopt;
	exec_type_register(&exec_test);
}
