/*
 * Unit tests for orchestrator/gpu: the two nvidia-smi CSV parsers over
 * RECORDED outputs of an 8-GPU and a 1-GPU machine
 * (tests/unit/data/nvidia-smi/), and the sampler end to end through its
 * child process. CI has no GPU, so the program the sampler runs is a TEST
 * DOUBLE: tests/unit/data/nvidia-smi/fake-nvidia-smi, a shell script that
 * prints the recorded outputs according to its arguments, pointed to by
 * FERRY_NVIDIA_SMI (it can also hang, fail, and log its calls). Run from
 * the repository root, as `make unit` does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "monitor/gpu.h"
#include "lib/util.h"

#define DATA "tests/unit/data/nvidia-smi"

/* the sampler under test, freed (its child killed and reaped) by teardown even when a test fails */
static struct gpu_sampler *sampler;
static char smi_log[64];

static int teardown(void **state)
{
	(void)state;
	gpu_sampler_free(sampler);
	sampler = NULL;
	if (smi_log[0])
		unlink(smi_log);
	smi_log[0] = '\0';
	unsetenv("FAKE_SMI_MACHINE");
	unsetenv("FAKE_SMI_SLEEP");
	unsetenv("FAKE_SMI_FAIL");
	unsetenv("FAKE_SMI_LOG");
	unsetenv("FERRY_NVIDIA_SMI");
	return 0;
}

static char *read_data(const char *name)
{
	char *path = xasprintf("%s/%s", DATA, name), *text = NULL;

	assert_int_equal(file_read(&text, NULL, path), 0);
	free(path);
	return text;
}

/* Points FERRY_NVIDIA_SMI at the test double (an absolute path) and logs its calls. */
static void use_fake(const char *machine)
{
	char real[PATH_MAX];
	int fd;

	assert_non_null(realpath(DATA "/fake-nvidia-smi", real));
	setenv("FERRY_NVIDIA_SMI", real, 1);
	setenv("FAKE_SMI_MACHINE", machine, 1);
	snprintf(smi_log, sizeof(smi_log), "/tmp/test_gpu.log.XXXXXX");
	assert_true((fd = mkstemp(smi_log)) >= 0);
	close(fd);
	setenv("FAKE_SMI_LOG", smi_log, 1);
}

/* Lines the test double logged (one per call). */
static int smi_calls(void)
{
	char *text = NULL;
	int n = 0;

	assert_int_equal(file_read(&text, NULL, smi_log), 0);
	for (char *p = text; *p; p++)
		n += *p == '\n';
	free(text);
	return n;
}

/*
 * Polls (period period_ms) every 5 ms until done says so or bound_ms pass;
 * asserts that no single poll took 250 ms (it never waits for the child:
 * a hung one is killed at 300 ms; 50 ms failed while a clean-clone run
 * loaded the machine — a fork is slow then). Returns whether done came true.
 */
static int poll_until(int (*done)(void), int64_t period_ms, int64_t bound_ms)
{
	int64_t until = clock_mono_ms() + bound_ms;

	while (clock_mono_ms() < until) {
		int64_t t0 = clock_mono_ms();
		gpu_sampler_poll(sampler, t0, period_ms);
		assert_true(clock_mono_ms() - t0 < 250);
		if (done())
			return 1;
		usleep(5000);
	}
	return 0;
}

static int have_readings(void)
{
	return gpu_sampler_readings_at(sampler) != 0;
}

static int idle(void)
{
	return !gpu_sampler_busy(sampler);
}

static void test_gpu__parse_8gpu(void **state)
{
	char *q = read_data("8gpu-query.csv"), *a = read_data("8gpu-apps.csv");
	struct gpu_reading *g = NULL;
	struct gpu_proc *p = NULL;
	int n = -1, np = -1;

	(void)state;
	assert_int_equal(gpu_parse_query(q, &g, &n), 0);
	assert_int_equal(n, 8);
	assert_int_equal(g[0].index, 0);
	assert_string_equal(g[0].uuid, "GPU-5c6a3f0e-8d2b-4a7e-9f1c-2b3d4e5f6a70");
	assert_true(g[0].util == 97.0);
	assert_int_equal(g[0].mem_used_mb, 71234);
	assert_int_equal(g[0].mem_total_mb, 81559);
	assert_int_equal(g[6].index, 6);
	assert_true(g[6].util == 12.0);
	assert_true(g[7].util == -1); /* [N/A] */
	assert_int_equal(g[7].mem_used_mb, 18944);
	assert_int_equal(gpu_parse_apps(a, &p, &np), 0);
	assert_int_equal(np, 6);
	assert_int_equal(p[0].pid, 41872);
	assert_string_equal(p[3].uuid, "GPU-77aa88bb-3333-4c9a-9d3e-fedcba987654");
	assert_int_equal(p[4].mem_mb, 20136);
	assert_int_equal(p[5].pid, 52011);
	assert_int_equal(p[5].mem_mb, -1);
	free(g), free(p), free(q), free(a);
}

static void test_gpu__parse_1gpu_na(void **state)
{
	char *q = read_data("1gpu-query.csv"), *a = read_data("1gpu-apps.csv");
	struct gpu_reading *g = NULL;
	struct gpu_proc *p = (struct gpu_proc *)&p;
	int n = -1, np = -1;

	(void)state;
	assert_int_equal(gpu_parse_query(q, &g, &n), 0);
	assert_int_equal(n, 1);
	assert_true(g[0].util == -1);        /* [Not Supported] */
	assert_int_equal(g[0].mem_used_mb, -1); /* [N/A] */
	assert_int_equal(g[0].mem_total_mb, 24576);
	assert_int_equal(gpu_parse_apps(a, &p, &np), 0);
	assert_int_equal(np, 0);
	assert_null(p);
	/* older drivers write this even with noheader; CRLF and blank lines too */
	assert_int_equal(gpu_parse_apps("No running processes found\r\n\n", &p, &np), 0);
	assert_int_equal(np, 0);
	assert_int_equal(gpu_parse_apps("\n 77, GPU-1, 5\r\n", &p, &np), 0);
	assert_int_equal(np, 1);
	assert_int_equal(p[0].pid, 77);
	assert_string_equal(p[0].uuid, "GPU-1");
	free(g), free(p), free(q), free(a);
}

static void expect_bad_query(const char *csv, const char *want)
{
	struct gpu_reading *g = (struct gpu_reading *)&g;
	int n = -1;

	assert_int_equal(gpu_parse_query(csv, &g, &n), FERRY_EINVALID);
	assert_null(g);
	assert_int_equal(n, 0);
	assert_string_equal(ferry_error_last(), want);
}

static void test_gpu__parse_invalid(void **state)
{
	struct gpu_proc *p = (struct gpu_proc *)&p;
	char *big;
	int n = -1;

	(void)state;
	expect_bad_query("0, GPU-a, 97, 71234\n",
			 "nvidia-smi line 1: 4 fields, expected 5 (index, uuid, utilization.gpu, memory.used, "
			 "memory.total)");
	expect_bad_query("0, GPU-a, 97, 1, 2\n\nx, GPU-b, 1, 1, 2\n",
			 "nvidia-smi line 3: index \"x\" is not a GPU index");
	expect_bad_query("0, GPU-a, 197, 1, 2\n",
			 "nvidia-smi line 1: utilization.gpu \"197\" is not a percentage");
	expect_bad_query("0, GPU-a, 9 %, 1, 2\n",
			 "nvidia-smi line 1: utilization.gpu \"9 %\" is not a percentage");
	expect_bad_query("0, GPU-a, 9, 1 MiB, 2\n",
			 "nvidia-smi line 1: memory \"1 MiB\", \"2\" is not a number of MiB");
	expect_bad_query("0, GPU a, 9, 1, 2\n", "nvidia-smi line 1: uuid \"GPU a\" is not a GPU UUID");
	/* the real tool's complaint when the driver is gone is not a reading */
	expect_bad_query("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
			 "nvidia-smi line 1: 1 fields, expected 5 (index, uuid, utilization.gpu, memory.used, "
			 "memory.total)");
	big = xcalloc(1, 700);
	memset(big, '1', 699);
	expect_bad_query(big, "nvidia-smi line 1: longer than 512 bytes");
	free(big);
	assert_int_equal(gpu_parse_apps("12, GPU-a, 5\n-3, GPU-a, 5\n", &p, &n), FERRY_EINVALID);
	assert_null(p);
	assert_string_equal(ferry_error_last(), "nvidia-smi line 2: pid \"-3\" is not a process id");
	assert_int_equal(gpu_parse_apps("12, GPU-a\n", &p, &n), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(),
			    "nvidia-smi line 1: 2 fields, expected 3 (pid, gpu_uuid, used_memory)");
}

/* The sampler through the test double: readings, the job mapping, one run per period. */
static void test_gpu__sampler_8gpu(void **state)
{
	int train[] = {999999, 41874, 41872, 41875, 41873}, other[] = {52011}, none[] = {123};
	double util = -5;
	int64_t mem = -5, t;
	json_t *per = NULL, *snap;

	(void)state;
	use_fake("8gpu");
	sampler = gpu_sampler_new();
	assert_true(gpu_sampler_available(sampler));
	assert_int_equal(gpu_for_job(sampler, train, 5, 1, NULL, &util, &mem, &per), 0); /* no readings yet */
	assert_null(gpu_snapshot(sampler));
	assert_true(poll_until(have_readings, 60000, 10000));
	assert_string_equal(gpu_sampler_error(sampler), "");

	/* by pid: the 4-GPU training job */
	assert_int_equal(gpu_for_job(sampler, train, 5, 0, NULL, &util, &mem, &per), 1);
	assert_true(util == (97.0 + 95 + 98 + 96) / 4);
	assert_int_equal(mem, 71234 + 71180 + 70992 + 71301);
	assert_int_equal(json_array_size(per), 4);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(per, 2), "index")), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(per, 0), "uuid")),
			    "GPU-5c6a3f0e-8d2b-4a7e-9f1c-2b3d4e5f6a70");
	assert_true(json_real_value(json_object_get(json_array_get(per, 3), "util")) == 96.0);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(per, 3), "mem_total_mb")), 81559);
	json_decref(per);
	/* by pid, one GPU without a utilization: the mean of the other, the memory of both */
	assert_int_equal(gpu_for_job(sampler, other, 1, 2, "0,1", &util, &mem, &per), 1);
	assert_true(util == 12.0);
	assert_int_equal(mem, 20480 + 18944);
	assert_int_equal(json_array_size(per), 2);
	assert_true(json_is_null(json_object_get(json_array_get(per, 1), "util")));
	json_decref(per);
	/* no pid matches: by the visible list, indexes, then UUIDs and a unique prefix */
	assert_int_equal(gpu_for_job(sampler, none, 1, 2, "4,5", &util, &mem, NULL), 1);
	assert_true(util == 0.0);
	assert_int_equal(mem, 8);
	assert_int_equal(gpu_for_job(sampler, none, 1, 2, "GPU-deadbeef, GPU-feedface-6666-4fcd-ce61-99aabbccddee",
				     &util, &mem, NULL),
			 1);
	assert_true(util == 6.0);
	assert_int_equal(mem, 4 + 20480);
	/* no list: every GPU (the N/A one left out of the mean) */
	assert_int_equal(gpu_for_job(sampler, NULL, 0, 1, NULL, &util, &mem, NULL), 1);
	assert_true(util == (97.0 + 95 + 98 + 96 + 0 + 0 + 12) / 7);
	/* no GPU asked for and none used; an empty list; a list naming nothing */
	util = -5, mem = -5;
	assert_int_equal(gpu_for_job(sampler, none, 1, 0, NULL, &util, &mem, &per), 0);
	assert_null(per);
	assert_int_equal(gpu_for_job(sampler, none, 1, 1, "", &util, &mem, NULL), 0);
	assert_int_equal(gpu_for_job(sampler, none, 1, 1, "9,GPU-nothing", &util, &mem, NULL), 0);
	assert_true(util == -5 && mem == -5);

	snap = gpu_snapshot(sampler);
	assert_non_null(snap);
	assert_int_equal(json_array_size(json_object_get(snap, "gpus")), 8);
	assert_int_equal(json_array_size(json_object_get(snap, "apps")), 6);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(snap, "apps"), 1), "pid")),
			 41873);
	assert_true(json_is_null(json_object_get(json_array_get(json_object_get(snap, "apps"), 5), "mem_mb")));
	assert_true(json_integer_value(json_object_get(snap, "at_ms")) > 1700000000000LL);
	json_decref(snap);

	/* one run (two calls: the GPUs, the apps) per period, however often polled */
	assert_true(poll_until(idle, 60000, 2000));
	for (int i = 0; i < 20; i++) {
		gpu_sampler_poll(sampler, clock_mono_ms(), 60000);
		usleep(5000);
	}
	assert_int_equal(smi_calls(), 2);
	/* a period later, the next */
	t = clock_mono_ms() + 60000;
	gpu_sampler_poll(sampler, t, 60000);
	assert_true(gpu_sampler_busy(sampler));
	for (int i = 0; i < 2000 && gpu_sampler_busy(sampler); i++) {
		usleep(5000);
		gpu_sampler_poll(sampler, t + 1, 60000);
	}
	assert_false(gpu_sampler_busy(sampler));
	assert_int_equal(smi_calls(), 4);
	assert_int_equal(gpu_sampler_readings_at(sampler), t + 1);
}

static void test_gpu__sampler_1gpu(void **state)
{
	double util = -5;
	int64_t mem = -5;
	json_t *per = (json_t *)&per, *snap;

	(void)state;
	use_fake("1gpu");
	sampler = gpu_sampler_new();
	assert_true(poll_until(have_readings, 1000, 10000));
	/* the GPU is there but reports no utilization: not a GPU reading for the monitor */
	assert_int_equal(gpu_for_job(sampler, NULL, 0, 1, NULL, &util, &mem, &per), 0);
	assert_null(per);
	assert_true(util == -5);
	snap = gpu_snapshot(sampler);
	assert_int_equal(json_array_size(json_object_get(snap, "gpus")), 1);
	assert_true(json_is_null(json_object_get(json_array_get(json_object_get(snap, "gpus"), 0), "util")));
	assert_int_equal(json_integer_value(
				 json_object_get(json_array_get(json_object_get(snap, "gpus"), 0), "mem_total_mb")),
			 24576);
	assert_int_equal(json_array_size(json_object_get(snap, "apps")), 0);
	json_decref(snap);
}

/* The pid the test double logged first (its shell's), or 0. */
static pid_t first_logged_pid(void)
{
	char *text = NULL;
	int64_t v = 0;

	if (file_read(&text, NULL, smi_log) == 0) {
		text[strcspn(text, " ")] = '\0';
		if (parse_int64(text, &v) < 0)
			v = 0;
	}
	free(text);
	return (pid_t)v;
}

/* Whether pid is gone (or a zombie: dead, its parent not yet told). */
static int gone(pid_t pid)
{
	char path[64], *text = NULL, *p;
	int dead;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (file_read(&text, NULL, path) < 0)
		return 1;
	p = strrchr(text, ')');
	dead = p && (p[2] == 'Z' || p[2] == 'X');
	free(text);
	return dead;
}

/* A hung nvidia-smi: killed after the timeout, poll never waiting, the old readings dropped. */
static void test_gpu__sampler_hang_killed(void **state)
{
	int64_t t0, took;
	pid_t fake;

	(void)state;
	use_fake("8gpu");
	sampler = gpu_sampler_new();
	/* the first run under the default timeout: the double itself took past 300 ms on a loaded machine */
	assert_true(poll_until(have_readings, 100, 10000));
	/* the run in progress over (a long period: no next run starts meanwhile); a wait, not a bound */
	assert_true(poll_until(idle, 60000, 10000));
	gpu_sampler_set_timeout(sampler, 300);
	unlink(smi_log);
	setenv("FAKE_SMI_SLEEP", "30", 1); /* the next run hangs */
	usleep(100 * 1000); /* a period passed: the next poll starts the run that hangs */
	t0 = clock_mono_ms();
	/*
	 * bounds that tell the behaviour apart, not how fast a loaded machine
	 * is: a poll that waited for the run would take its 300 ms timeout,
	 * and a sampler that never killed it would wait for its 30 s sleep
	 * (took < 1000 failed in a clean-clone run's load)
	 */
	while (gpu_sampler_readings_at(sampler) != 0 && clock_mono_ms() - t0 < 10000) {
		int64_t p0 = clock_mono_ms();
		gpu_sampler_poll(sampler, p0, 100);
		assert_true(clock_mono_ms() - p0 < 250);
		usleep(5000);
	}
	took = clock_mono_ms() - t0;
	assert_int_equal(gpu_sampler_readings_at(sampler), 0);
	assert_string_equal(gpu_sampler_error(sampler), "no answer within 300 ms; killed");
	assert_true(took >= 300 && took < 10000);
	/* the hanging double (and its sleep) went with its process group */
	fake = first_logged_pid();
	assert_true(fake > 0);
	for (int i = 0; i < 200 && !gone(fake); i++)
		usleep(10000);
	assert_true(gone(fake));
}

static void test_gpu__sampler_fails(void **state)
{
	(void)state;
	use_fake("8gpu");
	setenv("FAKE_SMI_FAIL", "1", 1);
	sampler = gpu_sampler_new();
	gpu_sampler_poll(sampler, clock_mono_ms(), 60000);
	assert_true(gpu_sampler_busy(sampler));
	assert_true(poll_until(idle, 60000, 10000));
	assert_int_equal(gpu_sampler_readings_at(sampler), 0);
	assert_string_equal(gpu_sampler_error(sampler),
			    "exit code 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
			    "driver. Make sure that the latest NVIDIA driver is installed and running.");
}

/* No program: the sampler is off and every call is a no-op. */
static void test_gpu__absent(void **state)
{
	char *path = xstrdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	double util = -5;
	int64_t mem = -5;

	(void)state;
	setenv("FERRY_NVIDIA_SMI", "/nonexistent/nvidia-smi", 1);
	sampler = gpu_sampler_new();
	assert_false(gpu_sampler_available(sampler));
	gpu_sampler_poll(sampler, clock_mono_ms(), 0);
	assert_false(gpu_sampler_busy(sampler));
	assert_int_equal(gpu_for_job(sampler, NULL, 0, 1, NULL, &util, &mem, NULL), 0);
	assert_null(gpu_snapshot(sampler));
	gpu_sampler_free(sampler);
	/* unset, and none on PATH */
	unsetenv("FERRY_NVIDIA_SMI");
	setenv("PATH", "/nonexistent-dir", 1);
	sampler = gpu_sampler_new();
	setenv("PATH", path, 1);
	free(path);
	assert_false(gpu_sampler_available(sampler));
	/* set empty: off on purpose */
	gpu_sampler_free(sampler);
	setenv("FERRY_NVIDIA_SMI", "", 1);
	sampler = gpu_sampler_new();
	assert_false(gpu_sampler_available(sampler));
	gpu_sampler_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu__parse_8gpu),
		cmocka_unit_test(test_gpu__parse_1gpu_na),
		cmocka_unit_test(test_gpu__parse_invalid),
		cmocka_unit_test_teardown(test_gpu__sampler_8gpu, teardown),
		cmocka_unit_test_teardown(test_gpu__sampler_1gpu, teardown),
		cmocka_unit_test_teardown(test_gpu__sampler_hang_killed, teardown),
		cmocka_unit_test_teardown(test_gpu__sampler_fails, teardown),
		cmocka_unit_test_teardown(test_gpu__absent, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
