/*
 * Unit tests of the Python frames of hung-job evidence
 * (orchestrator/monitor/pystack.c): gdb's output as captured from a real
 * CPython 3.11 (a thread blocked on an Event, the main thread asleep) and
 * from a spinning one holding the GIL, parsed into each thread's blocked
 * function and line; a gdb without CPython's extension is said so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "monitor/pystack.h"

static const char blocked[] =
	"[New LWP 20455]\n"
	"[Thread debugging using libthread_db enabled]\n"
	"Using host libthread_db library \"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
	"0x00007f39632ad545 in __GI___clock_nanosleep (clock_id=clock_id@entry=1, flags=flags@entry=1, "
	"req=req@entry=0x7fff1f7653a0, rem=rem@entry=0x0) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:48\n"
	"48\t../sysdeps/unix/sysv/linux/clock_nanosleep.c: No such file or directory.\n"
	"\n"
	"Thread 2 (Thread 0x7f3962f226c0 (LWP 20455) \"python3\"):\n"
	"Traceback (most recent call first):\n"
	"  File \"/usr/lib/python3.11/threading.py\", line 320, in wait\n"
	"    waiter.acquire()\n"
	"  File \"/usr/lib/python3.11/threading.py\", line 622, in wait\n"
	"    signaled = self._cond.wait(timeout)\n"
	"  File \"/tmp/blk.py\", line 3, in inner_wait\n"
	"    ev.wait()\n"
	"  File \"/tmp/blk.py\", line 5, in worker\n"
	"    inner_wait(threading.Event())\n"
	"  File \"/usr/lib/python3.11/threading.py\", line 975, in run\n"
	"    self._target(*self._args, **self._kwargs)\n"
	"\n"
	"Thread 1 (Thread 0x7f39631dd2c0 (LWP 20453) \"python3\"):\n"
	"Traceback (most recent call first):\n"
	"  <built-in method sleep of module object at remote 0x7f396312f3d0>\n"
	"  File \"/tmp/blk.py\", line 9, in main_loop\n"
	"    time.sleep(100)\n"
	"  File \"/tmp/blk.py\", line 10, in <module>\n"
	"    main_loop()\n"
	"$1 = 0\n"
	"$2 = 0x7f39631dd2c0\n"
	"[Inferior 1 (process 20453) detached]\n";

static const char spinning[] =
	"Thread 1 (Thread 0x7f0aa1b1d740 (LWP 31337) \"python3\"):\n"
	"Traceback (most recent call first):\n"
	"  File \"/home/u/train.py\", line 12, in wait_for_peer\n"
	"    while not flag:\n"
	"  File \"/home/u/train.py\", line 20, in <module>\n"
	"    wait_for_peer()\n"
	"$1 = 1\n"
	"$2 = 0x7f0aa1b1d740\n";

static void test_pystack__blocked_threads(void **state)
{
	char *why = NULL;
	json_t *r = pystack_parse(blocked, &why), *t;
	const char *stack;

	(void)state;
	assert_non_null(r);
	assert_null(why);
	t = json_object_get(r, "threads");
	assert_int_equal(json_array_size(t), 2);
	/* each thread's innermost frame outside the standard library */
	assert_int_equal(json_integer_value(json_object_get(json_array_get(t, 0), "lwp")), 20455);
	assert_string_equal(json_string_value(json_object_get(json_array_get(t, 0), "where")),
			    "inner_wait (/tmp/blk.py:3)");
	assert_string_equal(json_string_value(json_object_get(json_array_get(t, 1), "where")),
			    "main_loop (/tmp/blk.py:9)");
	assert_null(json_object_get(json_array_get(t, 0), "pthread"));
	/* the tracebacks, without gdb's chatter */
	stack = json_string_value(json_object_get(r, "stack"));
	assert_non_null(strstr(stack, "Thread 2 (Thread 0x7f3962f226c0 (LWP 20455)"));
	assert_non_null(strstr(stack, "    time.sleep(100)\n"));
	assert_null(strstr(stack, "libthread_db"));
	assert_null(strstr(stack, "$1 ="));
	assert_string_equal(json_string_value(json_object_get(r, "gil")),
			    "not held: every thread released it (waiting on IO, a lock or a sleep)");
	assert_true(json_is_null(json_object_get(r, "gil_lwp")));
	json_decref(r);
}

static void test_pystack__spinning_holds_the_gil(void **state)
{
	char *why = NULL;
	json_t *r = pystack_parse(spinning, &why);

	(void)state;
	assert_non_null(r);
	assert_string_equal(json_string_value(json_object_get(r, "gil")), "held by LWP 31337");
	assert_int_equal(json_integer_value(json_object_get(r, "gil_lwp")), 31337);
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(r, "threads"), 0),
								  "where")), "wait_for_peer (/home/u/train.py:12)");
	json_decref(r);
}

static void test_pystack__no_frames(void **state)
{
	char *why = NULL;

	(void)state;
	assert_null(pystack_parse("Undefined command: \"py-bt\".  Try \"help\".\n", &why));
	assert_string_equal(why, "gdb has no py-bt: CPython's gdb extension is not installed (Debian: python3-dbg)");
	free(why);
	why = NULL;
	assert_null(pystack_parse("", &why));
	assert_non_null(strstr(why, "no Python frame"));
	free(why);
	/* this test binary is no interpreter */
	assert_int_equal(pystack_is_python(getpid()), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pystack__blocked_threads),
		cmocka_unit_test(test_pystack__spinning_holds_the_gil),
		cmocka_unit_test(test_pystack__no_frames),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
