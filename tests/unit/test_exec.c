/* Unit tests of the local executor: real processes, real files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/proc.h"
#include "lib/util.h"

static char home[] = "/tmp/ferry-unit-exec.XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(home) ? 0 : -1;
}

static int teardown(void **state)
{
	char *cmd = xasprintf("rm -rf %s", home);
	(void)state;
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", home);
	free(cmd);
	return 0;
}

/* Starts `sh -c SCRIPT` as step NAME, attempt 1. */
static void start(struct exec_job *job, const char *name, const char *script, const char *env_k,
		  const char *env_v)
{
	struct exec_spec c;
	json_t *spec;

	memset(&c, 0, sizeof(c));
	c.step_id = 1;
	c.run_id = 7;
	c.attempt = 1;
	c.name = name;
	c.home = home;
	spec = json_pack("{s:[s,s,s], s:{}}", "command", "sh", "-c", script, "env");
	if (env_k)
		json_object_set_new(json_object_get(spec, "env"), env_k, json_string(env_v));
	exec_spec_from_json(&c, spec, &exec_local);
	assert_int_equal(exec_local_start(job, &c), 0);
	json_decref(spec);
}

/* How many live (not zombie) processes are in process group pgid. */
static int live_in_group(pid_t pgid)
{
	char cmd[160], buf[32] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "ps -e -o pgid=,stat= | awk '$1 == %d && $2 !~ /^Z/' | wc -l", (int)pgid);
	p = popen(cmd, "r");
	if (p == NULL)
		return -1;
	if (fgets(buf, sizeof(buf), p) == NULL)
		buf[0] = '\0';
	pclose(p);
	return (int)strtol(buf, NULL, 10);
}

static int file_write_empty(const char *path)
{
	FILE *f = fopen(path, "w");
	return f ? fclose(f) : -1;
}

static void wait_job(struct exec_job *job)
{
	int st;
	assert_int_equal(waitpid(job->pid, &st, 0), job->pid);
}

static void test_exec__exit_code_and_log(void **state)
{
	struct exec_job job;
	int code, sig;
	char *log = NULL, *path;

	(void)state;
	start(&job, "exitcode", "echo \"step=$FERRY_STEP run=$FERRY_RUN_ID attempt=$FERRY_ATTEMPT v=$V\"; echo err >&2; exit 3",
	      "V", "42");
	wait_job(&job);
	assert_int_equal(exec_read_status(job.dir, &code, &sig), 1);
	assert_int_equal(code, 3);
	assert_int_equal(sig, 0);
	path = xasprintf("%s/log", job.dir);
	assert_int_equal(file_read(&log, NULL, path), 0);
	assert_string_equal(log, "step=exitcode run=7 attempt=1 v=42\nerr\n");
	free(log);
	free(path);
	exec_job_dispose(&job);
}

static void test_exec__output_dir_exists(void **state)
{
	struct exec_job job;
	int code, sig;
	char *path, *txt = NULL;

	(void)state;
	start(&job, "outdir", "echo hi > \"$FERRY_OUTPUT_DIR/a.txt\"", NULL, NULL);
	wait_job(&job);
	assert_int_equal(exec_read_status(job.dir, &code, &sig), 1);
	assert_int_equal(code, 0);
	path = xasprintf("%s/out/a.txt", job.dir);
	assert_int_equal(file_read(&txt, NULL, path), 0);
	assert_string_equal(txt, "hi\n");
	free(txt);
	free(path);
	exec_job_dispose(&job);
}

static void test_exec__secrets_hidden(void **state)
{
	struct exec_job job;
	int code, sig;

	(void)state;
	setenv("FERRY_API_TOKEN", "secret", 1);
	setenv("FERRY_LISTEN", "127.0.0.1:1", 1);
	setenv("FERRY_TEST_KEPT", "no", 1);
	setenv("OTHER_KEPT", "yes", 1);
	/* the daemon's FERRY_* settings are not the job's; anything else is */
	start(&job, "secret", "test -z \"$FERRY_API_TOKEN$FERRY_LISTEN$FERRY_TEST_KEPT\" && test \"$OTHER_KEPT\" = yes "
			      "&& test -n \"$FERRY_OUTPUT_DIR\"", NULL, NULL);
	unsetenv("FERRY_API_TOKEN");
	unsetenv("FERRY_LISTEN");
	unsetenv("FERRY_TEST_KEPT");
	unsetenv("OTHER_KEPT");
	wait_job(&job);
	assert_int_equal(exec_read_status(job.dir, &code, &sig), 1);
	assert_int_equal(code, 0);
	exec_job_dispose(&job);
}

static void test_exec__signal_kills_group(void **state)
{
	struct exec_job job;
	int code, sig;

	(void)state;
	/* a grandchild in the same group must die too */
	start(&job, "group", "sleep 30 & sleep 30; wait", NULL, NULL);
	usleep(200 * 1000);
	assert_true(exec_pid_alive(job.pid, job.pid_start));
	exec_signal(&job, SIGTERM);
	wait_job(&job);
	assert_int_equal(exec_read_status(job.dir, &code, &sig), 1);
	assert_int_equal(sig, SIGTERM);
	for (int i = 0; i < 50 && live_in_group(job.pid) > 0; i++)
		usleep(20 * 1000);
	assert_int_equal(live_in_group(job.pid), 0); /* the background sleep died too */
	assert_false(exec_pid_alive(job.pid, job.pid_start));
	exec_job_dispose(&job);
}

static void test_exec__missing_command(void **state)
{
	struct exec_job job;
	struct exec_spec c;
	json_t *spec;
	int code, sig;

	(void)state;
	memset(&c, 0, sizeof(c));
	c.step_id = 2;
	c.run_id = 7;
	c.attempt = 1;
	c.name = "nocmd";
	c.home = home;
	spec = json_pack("{s:[s], s:{}}", "command", "/nonexistent/binary", "env");
	exec_spec_from_json(&c, spec, &exec_local);
	assert_int_equal(exec_local_start(&job, &c), 0);
	json_decref(spec);
	wait_job(&job);
	assert_int_equal(exec_read_status(job.dir, &code, &sig), 1);
	assert_int_equal(code, 127);
	exec_job_dispose(&job);
}

/* docker: image: host refused at start; an engine that does not answer fails the attempt with a reason */
static void test_exec__docker_refusals(void **state)
{
	struct exec_job job;
	struct exec_status st = {0};
	struct exec_spec c;
	json_t *spec;
	int pst;

	(void)state;
	memset(&c, 0, sizeof(c));
	c.step_id = 3;
	c.run_id = 7;
	c.attempt = 1;
	c.name = "indocker";
	c.home = home;
	spec = json_pack("{s:[s], s:{}, s:s}", "command", "true", "env", "image", "host");
	exec_spec_from_json(&c, spec, &exec_docker);
	assert_int_equal(exec_docker.start(&job, &c, EXEC_ONESHOT, &st), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "cannot run image: host"));
	exec_job_dispose(&job);
	json_object_set_new(spec, "image", json_string("ferry-base"));
	exec_spec_from_json(&c, spec, &exec_docker);
	setenv("FERRY_DOCKER_HOST", "tcp://127.0.0.1:2375", 1);
	assert_int_equal(exec_docker.start(&job, &c, EXEC_ONESHOT, &st), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "must be unix:///PATH"));
	exec_job_dispose(&job);
	setenv("FERRY_DOCKER_HOST", "unix:///nonexistent/docker.sock", 1);
	assert_int_equal(exec_docker.start(&job, &c, EXEC_ONESHOT, &st), 0);
	assert_string_equal(json_string_value(json_object_get(job.handle, "container")) + 14, "-7-indocker-1");
	assert_int_equal(waitpid(job.pid, &pst, 0), job.pid);
	assert_int_equal(exec_docker.poll(&job, &st), 1);
	assert_int_equal(st.exit_code, 125);
	assert_non_null(strstr(st.reason, "did not answer"));
	assert_non_null(strstr(st.reason, "unix:///nonexistent/docker.sock"));
	unsetenv("FERRY_DOCKER_HOST");
	exec_status_dispose(&st);
	exec_job_dispose(&job);
	json_decref(spec);
}

static void test_exec__pid_start_identifies_process(void **state)
{
	int64_t me = exec_pid_start(getpid());

	(void)state;
	assert_true(me > 0);
	assert_true(exec_pid_alive(getpid(), me));
	assert_false(exec_pid_alive(getpid(), me + 1)); /* same pid, other start: a reused pid */
	assert_false(exec_pid_alive(0, 0));
}

/* A status file's "pid PID START" line, as every reader takes it; anything else is not one. */
static void test_exec__status_pid_line(void **state)
{
	pid_t pid = 7;
	int64_t start = 9;

	(void)state;
	assert_int_equal(exec_status_pid("pid 4242 123456", &pid, &start), 1);
	assert_int_equal(pid, 4242);
	assert_int_equal(start, 123456);
	pid = 7, start = 9;
	/* not a pid line, or one a job could have scribbled: left as they were */
	const char *bad[] = {"pid", "pid 12", "pid 0 5", "pid -3 5", "pid x 5", "pid 12 y", "pid 99999999999 1",
			     "exit 0", "pids 12 5", "pid  12 5", ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(exec_status_pid(bad[i], &pid, &start), 0);
	assert_int_equal(pid, 7);
	assert_int_equal(start, 9);
}

static void test_exec__no_status_file(void **state)
{
	int code, sig;

	(void)state;
	assert_int_equal(exec_read_status("/nonexistent", &code, &sig), 0);
	assert_int_equal(code, -1);
}

/* ---- the executor table --------------------------------------------- */

static int fake_start(struct exec_job *job, const struct exec_spec *c, enum exec_mode mode,
		      struct exec_status *st)
{
	(void)job, (void)c, (void)mode, (void)st;
	return FERRY_ERROR;
}

static void test_exec__type_table(void **state)
{
	static const struct exec_type fake = {.name = "fake", .start = fake_start};
	static const struct exec_type dup = {.name = "local", .start = fake_start};
	char *names;

	(void)state;
	assert_ptr_equal(exec_type_find("local"), &exec_local);
	assert_ptr_equal(exec_type_find("noop"), &exec_noop);
	assert_ptr_equal(exec_type_find("podman"), &exec_podman);
	assert_null(exec_type_find("kubernetes"));
	assert_null(exec_type_find(NULL));
	assert_int_equal(exec_type_register(&fake), 0);
	assert_ptr_equal(exec_type_find("fake"), &fake);
	assert_int_equal(exec_type_register(&dup), FERRY_ECONFLICT);
	assert_ptr_equal(exec_type_find("local"), &exec_local);
	names = exec_type_names();
	assert_string_equal(names, "local, noop, podman, docker, slurm, fake");
	assert_ptr_equal(exec_type_find("slurm"), &exec_slurm);
	assert_true((exec_slurm.flags & EXF_IMAGES) != 0);
	free(names);
	/* every built-in row has what the engine calls unconditionally */
	assert_non_null(exec_local.start);
	assert_non_null(exec_local.poll);
	assert_non_null(exec_local.adopt);
	assert_non_null(exec_noop.start);
}

static void test_exec__noop_ends_at_start(void **state)
{
	struct exec_job job;
	struct exec_status st;
	struct exec_spec c;

	(void)state;
	memset(&c, 0, sizeof(c));
	c.step_id = 3, c.run_id = 7, c.attempt = 1, c.name = "n", c.home = home;
	assert_int_equal(exec_noop.start(&job, &c, EXEC_ONESHOT, &st), 1);
	assert_int_equal(st.exit_code, 0);
	assert_int_equal(job.step_id, 3);
	assert_true(exec_noop.flags & EXF_NO_SLOTS);
}

/* A job whose handle was never recorded is found through DIR/status, running and then ended. */
static void test_exec__adopt_from_directory(void **state)
{
	struct exec_job job, adopted;
	struct exec_status st;
	char *stop;
	int i;

	(void)state;
	stop = xasprintf("%s/adopt-stop", home);
	start(&job, "adoptme", "while [ ! -e \"$STOP\" ]; do sleep 0.05; done; exit 4", "STOP", stop);
	memset(&adopted, 0, sizeof(adopted));
	adopted.type = &exec_local;
	adopted.dir = xstrdup(job.dir);
	for (i = 0; i < 100 && exec_local.adopt(&adopted, &st) != 1; i++)
		usleep(10 * 1000); /* the supervisor writes its pid to DIR/status right after the fork */
	assert_int_equal(exec_local.adopt(&adopted, &st), 1);
	assert_int_equal(adopted.pid, job.pid);
	assert_int_equal(adopted.pid_start, job.pid_start);
	assert_int_equal(json_integer_value(json_object_get(adopted.handle, "pid")), job.pid);
	assert_int_equal(exec_local.poll(&adopted, &st), 0); /* not our child: polled through /proc */
	assert_int_equal(file_write_empty(stop), 0);
	wait_job(&job);
	assert_int_equal(exec_local.poll(&adopted, &st), 1);
	assert_int_equal(st.exit_code, 4);
	exec_status_dispose(&st);
	/* adopting it again after the end: the status, not a lost job */
	assert_int_equal(exec_local.adopt(&adopted, &st), 0);
	assert_int_equal(st.exit_code, 4);
	exec_job_dispose(&adopted);
	exec_job_dispose(&job);
	free(stop);
}

/* No handle and no pid file: no trace (the job never started). */
static void test_exec__adopt_without_trace(void **state)
{
	struct exec_job job;
	struct exec_status st;

	(void)state;
	memset(&job, 0, sizeof(job));
	job.dir = xasprintf("%s/never-started", home);
	assert_int_equal(exec_local.adopt(&job, &st), FERRY_ENOTFOUND);
	exec_job_dispose(&job);
}

/* exec_capture is bounded: a child that neither writes nor ends is killed at its timeout. */
static void test_exec__capture_bounded(void **state)
{
	char *const quiet[] = {"sleep", "30", NULL};
	char *const talk[] = {"sh", "-c", "echo hello; echo world", NULL};
	char *out = NULL;
	int64_t t0 = clock_mono_ms();

	(void)state;
	assert_int_equal(exec_capture(quiet, &out, 300), FERRY_ERROR);
	assert_true(clock_mono_ms() - t0 < 3000);
	assert_non_null(strstr(ferry_error_last(), "did not finish within 300 ms"));
	free(out);
	assert_int_equal(exec_capture(talk, &out, 5000), 0);
	assert_string_equal(out, "hello\nworld\n");
	free(out);
}

/* sample() sums the job's processes: CPU burnt and bytes written show. */
static void test_exec__sample_counts_io_and_cpu(void **state)
{
	struct exec_job job;
	struct exec_sample sm;
	int i;

	(void)state;
	start(&job, "sample", "head -c 4000000 /dev/zero > \"$FERRY_OUTPUT_DIR/z\"; "
			      "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 5", NULL, NULL);
	for (i = 0; i < 200; i++) {
		assert_int_equal(exec_local.sample(&job, &sm), 0);
		if (sm.wchar >= 4000000 && sm.cpu_ms >= 100)
			break;
		usleep(50 * 1000);
	}
	assert_true(sm.wchar >= 4000000);
	assert_true(sm.cpu_ms >= 100);
	assert_false(sm.have_gpu);
	exec_signal(&job, SIGKILL);
	wait_job(&job);
	exec_job_dispose(&job);
}

/* Writes text to DIR/log of a job under home (made for the test) and returns its last line. */
static char *last_line_of(const char *text, size_t len)
{
	struct exec_job job;
	char *path;
	FILE *f;
	char *line;

	memset(&job, 0, sizeof(job));
	job.type = &exec_local;
	job.dir = xasprintf("%s/lastline", home);
	mkdir(job.dir, 0755);
	path = xasprintf("%s/log", job.dir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
	line = exec_log_last_line(&job);
	free(path);
	exec_job_dispose(&job);
	return line;
}

static void test_exec__log_last_line(void **state)
{
	char big[4000], *line, *reason;
	struct exec_job none;

	(void)state;
	line = last_line_of("one\ntwo  \r\n\n  \n", 15);
	assert_string_equal(line, "two");
	free(line);
	line = last_line_of("", 0);
	assert_null(line);
	/* a long last line is cut at EXEC_LINE_MAX, never inside a UTF-8 character */
	memset(big, 'x', sizeof(big));
	memcpy(big + 199, "\xc3\xa9", 2);
	big[sizeof(big) - 1] = '\n';
	line = last_line_of(big, sizeof(big));
	assert_int_equal(strlen(line), 199 + 3);
	assert_string_equal(line + 199, "...");
	free(line);
	/* no log: the bare exit code */
	memset(&none, 0, sizeof(none));
	none.type = &exec_noop;
	reason = exec_exit_reason(&none, 2);
	assert_string_equal(reason, "exit code 2");
	free(reason);
}

/*
 * exec_user_give changes only what differs: a directory with another mode
 * gets the one asked; one that has it already is left unwritten (its ctime
 * unchanged: a chmod to the same mode wrote the inode on every hop of a
 * chain, for directories made ahead). No job user here: the mode alone.
 */
static void test_exec__give_changes_only_what_differs(void **state)
{
	(void)state;
	char *dir = xasprintf("%s/give", home);
	struct stat a, b;

	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(exec_user_give(dir, 0700), 0);
	assert_int_equal(stat(dir, &a), 0);
	assert_int_equal(a.st_mode & 07777, 0700);
	usleep(30 * 1000); /* past the file system's clock tick: a write would show in the ctime */
	assert_int_equal(exec_user_give(dir, 0700), 0);
	assert_int_equal(stat(dir, &b), 0);
	assert_int_equal(b.st_mode & 07777, 0700);
	assert_true(a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exec__exit_code_and_log),
		cmocka_unit_test(test_exec__output_dir_exists),
		cmocka_unit_test(test_exec__secrets_hidden),
		cmocka_unit_test(test_exec__signal_kills_group),
		cmocka_unit_test(test_exec__missing_command),
		cmocka_unit_test(test_exec__pid_start_identifies_process),
		cmocka_unit_test(test_exec__no_status_file),
		cmocka_unit_test(test_exec__type_table),
		cmocka_unit_test(test_exec__docker_refusals),
		cmocka_unit_test(test_exec__noop_ends_at_start),
		cmocka_unit_test(test_exec__adopt_from_directory),
		cmocka_unit_test(test_exec__adopt_without_trace),
		cmocka_unit_test(test_exec__sample_counts_io_and_cpu),
		cmocka_unit_test(test_exec__capture_bounded),
		cmocka_unit_test(test_exec__log_last_line),
		cmocka_unit_test(test_exec__status_pid_line),
		cmocka_unit_test(test_exec__give_changes_only_what_differs),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
