/*
 * Unit tests for orchestrator/evidence, on real processes: a `sleep 1000`
 * (state S, its stack in clock_nanosleep) and a child spinning in C (state
 * R), through the real eu-stack and gdb (and a PATH holding only gdb, or a
 * broken eu-stack, for the fallback); a pid that does not exist; the log
 * tail of a real file; the summary's bound; the item through a real worker
 * pool; and a stack collection cut by a tiny timeout. Every child is
 * killed and reaped by the teardown, also when a test fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monitor/evidence.h"
#include "lib/util.h"
#include "store/workers.h"

extern char **environ;

static pid_t kids[4];
static int nkids;
static char tmpdir[64];
static char *saved_path;

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < nkids; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	nkids = 0;
	if (saved_path) {
		setenv("PATH", saved_path, 1);
		free(saved_path);
		saved_path = NULL;
	}
	if (tmpdir[0]) {
		char *cmd = xasprintf("rm -rf '%s'", tmpdir);
		(void)!system(cmd);
		free(cmd);
		tmpdir[0] = '\0';
	}
	return 0;
}

/* /proc/PID/stat's state letter, 0 when gone. */
static char state_of(pid_t pid)
{
	char path[64], *text = NULL, *p;
	char st = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (file_read(&text, NULL, path) < 0)
		return 0;
	if ((p = strrchr(text, ')')) != NULL && p[1] == ' ')
		st = p[2];
	free(text);
	return st;
}

static int comm_is(pid_t pid, const char *want)
{
	char path[64], *text = NULL;
	int same;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	if (file_read(&text, NULL, path) < 0)
		return 0;
	text[strcspn(text, "\n")] = '\0';
	same = strcmp(text, want) == 0;
	free(text);
	return same;
}

/* A real `sleep 1000`, once it sleeps (state S after exec). */
static pid_t start_sleep(void)
{
	char *argv[] = {"sleep", "1000", NULL};
	pid_t pid;

	assert_int_equal(posix_spawnp(&pid, "sleep", NULL, NULL, argv, environ), 0);
	kids[nkids++] = pid;
	for (int i = 0; i < 300 && !(comm_is(pid, "sleep") && state_of(pid) == 'S'); i++)
		usleep(10000);
	assert_true(comm_is(pid, "sleep"));
	assert_int_equal(state_of(pid), 'S');
	return pid;
}

/*
 * The sleeper runs on, not left stopped: never T or t, and back in S within
 * a second (a SIGCONT restarts its nanosleep, so it is R a moment, longer
 * when the machine is busy).
 */
static void assert_sleeps_on(pid_t pid)
{
	char st;

	for (int i = 0; i < 100 && (st = state_of(pid)) != 'S'; i++) {
		assert_true(st != 'T' && st != 't');
		usleep(10000);
	}
	assert_int_equal(state_of(pid), 'S');
}

/*
 * A child that is almost always in uninterruptible sleep (D): a vfork
 * parent waits there until its child exits, 300 ms at a time. A stop
 * sent to it stays pending until the wait ends, and only then stops it.
 */
static pid_t start_vforker(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		for (;;) {
			pid_t c = vfork();
			if (c == 0) {
				usleep(300000);
				_exit(0);
			}
			if (c > 0)
				waitpid(c, NULL, 0);
		}
	}
	kids[nkids++] = pid;
	for (int i = 0; i < 300 && state_of(pid) != 'D'; i++)
		usleep(10000);
	assert_int_equal(state_of(pid), 'D');
	return pid;
}

/* A child spinning in C: always running or runnable (R). */
static pid_t start_spinner(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		volatile unsigned long n = 0;
		for (;;)
			n++;
	}
	kids[nkids++] = pid;
	return pid;
}

static const json_t *proc_at(const json_t *ev, size_t i)
{
	return json_array_get(json_object_get(ev, "processes"), i);
}

static const char *str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static void test_evidence__sleep_and_spinner(void **state)
{
	pid_t sl = start_sleep(), sp = start_spinner();
	int pids[] = {sl, sp, 2147483647};
	const json_t *e;
	json_t *ev;
	char *sum, *want;

	(void)state;
	ev = evidence_collect(pids, 3, NULL, 10, 10000);
	assert_string_equal(str(ev, "collector"), "eu-stack");
	assert_int_equal(json_array_size(json_object_get(ev, "processes")), 3);
	assert_int_equal(json_array_size(json_object_get(ev, "log_tail")), 0);
	assert_non_null(strstr(str(ev, "at"), "T"));
	assert_int_equal(strlen(str(ev, "at")), 24); /* 2026-11-24T08:30:00.123Z */

	e = proc_at(ev, 0);
	assert_int_equal(json_integer_value(json_object_get(e, "pid")), sl);
	assert_int_equal(json_integer_value(json_object_get(e, "ppid")), getpid());
	assert_string_equal(str(e, "comm"), "sleep");
	assert_string_equal(str(e, "cmdline"), "sleep 1000");
	assert_string_equal(str(e, "state"), "S");
	assert_int_equal(json_integer_value(json_object_get(e, "threads")), 1);
	assert_int_equal(json_integer_value(json_object_get(e, "threads_running")), 0);
	assert_non_null(str(e, "stack"));
	assert_non_null(strstr(str(e, "stack"), "nanosleep"));
	assert_null(json_object_get(e, "stack_error"));

	e = proc_at(ev, 1);
	assert_int_equal(json_integer_value(json_object_get(e, "pid")), sp);
	assert_string_equal(str(e, "state"), "R");
	assert_int_equal(json_integer_value(json_object_get(e, "threads_running")), 1);
	assert_null(str(e, "wchan")); /* running: no wait channel */
	assert_non_null(strstr(str(e, "stack"), "#0 "));

	e = proc_at(ev, 2);
	assert_string_equal(str(e, "error"), "process 2147483647 does not exist");
	assert_true(json_is_null(json_object_get(e, "stack")));

	/* the attach left neither stopped */
	usleep(50000);
	assert_sleeps_on(sl);
	assert_int_equal(state_of(sp), 'R');

	sum = evidence_summary(ev);
	want = xasprintf("pid %d (sleep) S wchan=", (int)sl);
	assert_memory_equal(sum, want, strlen(want));
	assert_non_null(strstr(sum, ": #0 clock_nanosleep"));
	assert_non_null(strstr(sum, " #1 "));
	free(want);
	want = xasprintf("\npid 2147483647: process 2147483647 does not exist");
	assert_non_null(strstr(sum, want));
	assert_null(strchr(strstr(sum, want) + 1, '\n')); /* the last line */
	free(want);
	free(sum);
	json_decref(ev);
}

/* PATH set to a directory with sh and the named tools of /usr/bin; eu-stack may be a fake (its script). */
static void path_with(const char *const *tools, const char *fake_eu_stack)
{
	char *p;

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_evidence.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	p = xasprintf("%s/sh", tmpdir);
	assert_int_equal(symlink("/bin/sh", p), 0);
	free(p);
	for (; *tools; tools++) {
		char *src = xasprintf("/usr/bin/%s", *tools), *dst = xasprintf("%s/%s", tmpdir, *tools);
		assert_int_equal(symlink(src, dst), 0);
		free(src), free(dst);
	}
	if (fake_eu_stack) {
		FILE *f;
		p = xasprintf("%s/eu-stack", tmpdir);
		assert_non_null(f = fopen(p, "w"));
		fputs(fake_eu_stack, f);
		fclose(f);
		assert_int_equal(chmod(p, 0755), 0);
		free(p);
	}
	saved_path = xstrdup(getenv("PATH"));
	setenv("PATH", tmpdir, 1);
}

static void test_evidence__gdb_fallback(void **state)
{
	static const char *const gdb_only[] = {"gdb", NULL};
	pid_t sl = start_sleep();
	int pids[] = {sl};
	const json_t *e;
	json_t *ev;
	char *sum;

	(void)state;
	/* a TEST DOUBLE of eu-stack that fails as the real one does without ptrace rights */
	path_with(gdb_only, "#!/bin/sh\necho \"eu-stack: dwfl_linux_proc_attach pid $2: Operation not permitted\"\nexit 1\n");
	ev = evidence_collect(pids, 1, NULL, 0, 20000);
	assert_string_equal(str(ev, "collector"), "eu-stack");
	e = proc_at(ev, 0);
	assert_string_equal(str(e, "collector"), "gdb");
	assert_non_null(strstr(str(e, "stack"), "nanosleep"));
	sum = evidence_summary(ev);
	/* gdb's "#0  0x… in clock_nanosleep () from …" or "#0  __GI___clock_nanosleep (…) at …" */
	assert_non_null(strstr(sum, "nanosleep"));
	assert_non_null(strstr(sum, ": #0 "));
	free(sum);
	json_decref(ev);
	assert_sleeps_on(sl);
}

static void test_evidence__no_collector(void **state)
{
	static const char *const none[] = {NULL};
	pid_t sl = start_sleep();
	int pids[] = {sl};
	json_t *ev;
	char *sum, *want;

	(void)state;
	path_with(none, NULL);
	ev = evidence_collect(pids, 1, NULL, 0, 5000);
	assert_string_equal(str(ev, "collector"), "none");
	assert_true(json_is_null(json_object_get(proc_at(ev, 0), "stack")));
	assert_string_equal(str(proc_at(ev, 0), "stack_error"), "neither eu-stack (elfutils) nor gdb is installed");
	assert_string_equal(str(proc_at(ev, 0), "state"), "S");
	sum = evidence_summary(ev);
	want = xasprintf("pid %d (sleep) S wchan=", (int)sl);
	assert_memory_equal(sum, want, strlen(want));
	assert_non_null(strstr(sum, ": no stack (neither eu-stack (elfutils) nor gdb is installed)"));
	free(want), free(sum);
	json_decref(ev);
}

/* The tiny budget: eu-stack is killed at once, gdb gets nothing left; the process runs on. */
static void test_evidence__timeout_bound(void **state)
{
	pid_t sl = start_sleep();
	int pids[300];
	int64_t t0, took;
	const json_t *e;
	json_t *ev;

	(void)state;
	for (int i = 0; i < 300; i++)
		pids[i] = sl;
	t0 = clock_mono_ms();
	ev = evidence_collect(pids, 1, NULL, 0, 1);
	took = clock_mono_ms() - t0;
	e = proc_at(ev, 0);
	assert_true(json_is_null(json_object_get(e, "stack")));
	assert_string_equal(str(e, "stack_error"), "eu-stack did not finish within 1 ms");
	assert_true(took < 500);
	json_decref(ev);
	assert_sleeps_on(sl);
	for (int i = 0; i < 20; i++) {
		char st = state_of(sl);

		assert_true(st != 'T' && st != 't');
		usleep(5000);
	}

	/* 300 processes: 16 stacks tried, 256 listed, the rest counted */
	ev = evidence_collect(pids, 300, NULL, 0, 1);
	assert_int_equal(json_array_size(json_object_get(ev, "processes")), EVIDENCE_MAX_PROCS);
	assert_int_equal(json_integer_value(json_object_get(ev, "processes_omitted")), 300 - EVIDENCE_MAX_PROCS);
	assert_non_null(json_object_get(proc_at(ev, 15), "stack_error"));
	assert_null(json_object_get(proc_at(ev, 16), "stack_error")); /* not tried */
	assert_true(json_is_null(json_object_get(proc_at(ev, 16), "stack")));
	assert_non_null(strchr("RS", str(proc_at(ev, 255), "state")[0])); /* read, and not stopped */
	json_decref(ev);
	assert_sleeps_on(sl);
}

/*
 * A collector killed with its stop still pending: the fake eu-stack stops
 * the process (as PTRACE_ATTACH's SIGSTOP does) while the process cannot
 * take the signal yet (in D, a vfork's wait), and hangs; past the budget
 * it is killed, the process looked at (not stopped: its state is D), and
 * the stop would take it later, for good. The SIGCONT sent when a
 * collector is killed discards it: the process is never seen stopped.
 * (Before, make test's unit phase saw such a process 'T' after the
 * collectors of 300 listed; this is that race made certain.)
 */
static void test_evidence__pending_stop_discarded(void **state)
{
	static const char *const none[] = {"sleep", NULL};
	pid_t vf = start_vforker();
	int pids[] = {vf};
	json_t *ev;

	(void)state;
	path_with(none, "#!/bin/sh\nkill -STOP \"$2\"\nexec sleep 30\n");
	ev = evidence_collect(pids, 1, NULL, 0, 100);
	assert_string_equal(str(proc_at(ev, 0), "stack_error"), "eu-stack did not finish within 100 ms");
	json_decref(ev);
	/* past the vfork's wait (300 ms) and more: it goes on forking, never stopped */
	for (int i = 0; i < 80; i++) {
		char st = state_of(vf);
		assert_true(st != 'T' && st != 't');
		usleep(10000);
	}
}

/*
 * A collector killed between its attach and its detach can leave the
 * process stopped: a TEST DOUBLE of eu-stack stops it (as a ptrace attach
 * does) and hangs; past the budget it is killed and the process continued.
 */
static void test_evidence__left_stopped_continued(void **state)
{
	static const char *const none[] = {"sleep", NULL};
	pid_t sl = start_sleep();
	int pids[] = {sl};
	int64_t t0 = clock_mono_ms();
	json_t *ev;

	(void)state;
	path_with(none, "#!/bin/sh\nkill -STOP \"$2\"\nexec sleep 30\n");
	ev = evidence_collect(pids, 1, NULL, 0, 300);
	assert_true(clock_mono_ms() - t0 < 1500);
	assert_string_equal(str(proc_at(ev, 0), "stack_error"), "eu-stack did not finish within 300 ms");
	/* continued: it runs a moment (SIGCONT restarts its nanosleep), then sleeps again */
	assert_sleeps_on(sl);
	json_decref(ev);
}

/* Writes a log: over 64 KiB of old lines, then escapes, blanks, CRs and the last lines. */
static char *write_log(void)
{
	char *path = xstrdup("/tmp/test_evidence.log.XXXXXX");
	FILE *f;
	int fd;

	assert_true((fd = mkstemp(path)) >= 0);
	assert_non_null(f = fdopen(fd, "w"));
	for (int i = 0; i < 3000; i++)
		fprintf(f, "epoch 1 step %d loss 0.%04d\n", i, 9999 - i);
	fputs("\x1b[31mRuntimeError\x1b[0m: NCCL watchdog\ttimeout\r\n", f);
	fputs("\n\n   \n", f);
	fputs("step 3001 waiting for rank 3\n", f);
	fputs("last line without newline", f);
	fclose(f);
	return path;
}

static void test_evidence__log_tail(void **state)
{
	char *log = write_log();
	json_t *ev, *tail;

	(void)state;
	ev = evidence_collect(NULL, 0, log, 3, 1000);
	tail = json_object_get(ev, "log_tail");
	assert_int_equal(json_array_size(tail), 3);
	assert_string_equal(json_string_value(json_array_get(tail, 0)), "RuntimeError: NCCL watchdog timeout");
	assert_string_equal(json_string_value(json_array_get(tail, 1)), "step 3001 waiting for rank 3");
	assert_string_equal(json_string_value(json_array_get(tail, 2)), "last line without newline");
	assert_null(json_object_get(ev, "log_error"));
	assert_int_equal(json_array_size(json_object_get(ev, "processes")), 0);
	json_decref(ev);
	/* more lines asked than the bound: 200, all from the last 64 KiB, whole lines */
	ev = evidence_collect(NULL, 0, log, 100000, 1000);
	tail = json_object_get(ev, "log_tail");
	assert_int_equal(json_array_size(tail), EVIDENCE_LOG_LINES_MAX);
	assert_string_equal(json_string_value(json_array_get(tail, 0)), "epoch 1 step 2803 loss 0.7196");
	json_decref(ev);
	unlink(log);
	free(log);
	ev = evidence_collect(NULL, 0, "/nonexistent/log", 5, 1000);
	assert_int_equal(json_array_size(json_object_get(ev, "log_tail")), 0);
	assert_string_equal(str(ev, "log_error"), "cannot read the log /nonexistent/log: No such file or directory");
	json_decref(ev);
}

static void test_evidence__summary_bounded(void **state)
{
	json_t *ev = json_pack("{s:[]}", "processes"), *procs = json_object_get(ev, "processes");
	char *sum;

	(void)state;
	for (int i = 0; i < 100; i++)
		json_array_append_new(
			procs,
			json_pack("{s:i,s:s,s:s,s:s,s:s}", "pid", 1000 + i, "comm", "python3", "state", "S", "wchan",
				  "futex_wait_queue", "stack",
				  "Thread 2 (Thread 0x7f (LWP 12)):\n"
				  "#0  0x00007f1a2b3c4d5e in __futex_abstimed_wait_common () from /lib/libc.so.6\n"
				  "#1  0x00007f1a2b3c4d60 in pthread_cond_wait () from /lib/libc.so.6\n"
				  "#2  c10d::ProcessGroupNCCL::WorkNCCL::wait (this=0x1) at ProcessGroupNCCL.cpp:10\n"
				  "#3  0x1 in main ()\n"
				  "Thread 1 (Thread 0x7e (LWP 11)):\n#0  other ()\n"));
	sum = evidence_summary(ev);
	assert_true(strlen(sum) <= EVIDENCE_SUMMARY_MAX);
	assert_true(strlen(sum) > EVIDENCE_SUMMARY_MAX - 200);
	assert_memory_equal(sum,
			    "pid 1000 (python3) S wchan=futex_wait_queue: #0 __futex_abstimed_wait_common "
			    "#1 pthread_cond_wait #2 c10d::ProcessGroupNCCL::WorkNCCL::wait\n"
			    "pid 1001 (python3) S",
			    strlen("pid 1000 (python3) S wchan=futex_wait_queue: #0 __futex_abstimed_wait_common "
				   "#1 pthread_cond_wait #2 c10d::ProcessGroupNCCL::WorkNCCL::wait\n"
				   "pid 1001 (python3) S"));
	assert_non_null(strstr(sum, " more processes"));
	assert_null(strstr(sum, "other"));
	free(sum);
	json_decref(ev);
	ev = json_pack("{s:[]}", "processes");
	sum = evidence_summary(ev);
	assert_string_equal(sum, "");
	free(sum);
	json_decref(ev);
}

/* The item through a real worker pool (no database: the item needs none). */
static void test_evidence__worker_item(void **state)
{
	pid_t sl = start_sleep();
	int pids[] = {sl}, wake[2];
	struct workers *pool = NULL;
	struct evidence_work *item;
	struct work *done = NULL;
	char *log = write_log();
	int64_t until;

	(void)state;
	assert_int_equal(pipe(wake), 0);
	assert_int_equal(workers_new(&pool, 1, "host=/nonexistent-socket-dir dbname=none connect_timeout=1",
				     wake[1]),
			 0);
	item = evidence_work_new(pids, 1, log, 2, 10000);
	pids[0] = -1; /* the item copied its inputs */
	workers_submit(pool, &item->w);
	until = clock_mono_ms() + 30000;
	while (done == NULL && clock_mono_ms() < until) {
		struct pollfd p = {.fd = wake[0], .events = POLLIN};
		char b;
		if (poll(&p, 1, 1000) > 0)
			(void)!read(wake[0], &b, 1);
		done = workers_take(pool);
	}
	assert_ptr_equal(done, &item->w);
	assert_null(done->next);
	assert_int_equal(json_integer_value(json_object_get(proc_at(item->ev, 0), "pid")), sl);
	assert_non_null(strstr(str(proc_at(item->ev, 0), "stack"), "nanosleep"));
	assert_string_equal(json_string_value(json_array_get(json_object_get(item->ev, "log_tail"), 1)),
			    "last line without newline");
	evidence_work_free(item);
	workers_free(pool, NULL);
	close(wake[0]), close(wake[1]);
	unlink(log);
	free(log);
	evidence_work_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_evidence__sleep_and_spinner, teardown),
		cmocka_unit_test_teardown(test_evidence__gdb_fallback, teardown),
		cmocka_unit_test_teardown(test_evidence__no_collector, teardown),
		cmocka_unit_test_teardown(test_evidence__timeout_bound, teardown),
		cmocka_unit_test_teardown(test_evidence__left_stopped_continued, teardown),
		cmocka_unit_test_teardown(test_evidence__pending_stop_discarded, teardown),
		cmocka_unit_test_teardown(test_evidence__log_tail, teardown),
		cmocka_unit_test_teardown(test_evidence__summary_bounded, teardown),
		cmocka_unit_test_teardown(test_evidence__worker_item, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
