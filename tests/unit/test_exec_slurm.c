/*
 * Unit tests of the slurm executor without a Slurm: the request it builds
 * (batch script, environment, resources), that a Slurm that cannot be
 * reached delays a job without blocking or failing it, that a stop before
 * Slurm had the job ends it, and adoption from the script's status file.
 * The real Slurm is tests/integration/t_slurm.sh's.
 */
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
#include <unistd.h>

#include "exec/exec.h"
#include "exec/exec_slurm.h"
#include "lib/util.h"

static char home[] = "/tmp/ferry-unit-slurm.XXXXXX";

static int setup(void **state)
{
	(void)state;
	/* port 1 on loopback: connection refused, the outage that is known to have sent nothing */
	setenv("FERRY_SLURM_URL", "http://127.0.0.1:1", 1);
	setenv("FERRY_SLURM_TOKEN", "t0ken", 1);
	setenv("FERRY_SLURM_POLL_MS", "50", 1);
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

/* A step's resolved spec and what the executor is given of it. */
struct claim {
	struct exec_spec s;
	json_t *spec;
};

static void claim(struct claim *c, const char *name, int attempt)
{
	memset(c, 0, sizeof(*c));
	c->s.step_id = 3;
	c->s.run_id = 9;
	c->s.attempt = attempt;
	c->s.name = name;
	c->s.timeout_ms = 90000;
	c->s.home = home;
	c->spec = json_pack("{s:[s,s,s], s:{s:s}, s:{s:f, s:i, s:i}, s:{s:s, s:s}, s:s}", "command", "sh",
			    "-c", "echo 'it''s' $GREETING", "env", "GREETING", "hi", "resources", "cpus", 1.5,
			    "memory_mb", 100, "gpus", 1, "slurm", "via", "rest", "partition", "debug", "image",
			    "host");
	exec_spec_from_json(&c->s, c->spec, &exec_slurm);
}

static json_t *saved_request(const struct exec_job *job)
{
	char *p = xasprintf("%s/slurm.json", job->dir);
	json_t *j = json_load_file(p, 0, NULL);

	free(p);
	assert_non_null(j);
	return j;
}

static void test_exec_slurm__request_and_outage(void **state)
{
	struct claim c;
	struct exec_job job;
	struct exec_status st = {.exit_code = -1};
	json_t *saved, *req;
	char *script = NULL, *p;
	int64_t t0;

	(void)state;
	claim(&c, "train", 1);
	t0 = clock_mono_ms();
	assert_int_equal(exec_slurm.start(&job, &c.s, EXEC_ONESHOT, &st), 0);
	assert_true(clock_mono_ms() - t0 < 1000); /* refused at once: no wait */
	assert_string_equal(json_string_value(json_object_get(job.handle, "name")), "ferry-9-train-1");
	assert_null(json_object_get(job.handle, "job_id")); /* not submitted yet */

	saved = saved_request(&job);
	assert_string_equal(json_string_value(json_object_get(saved, "via")), "rest");
	req = json_object_get(json_object_get(saved, "request"), "job");
	assert_int_equal(json_integer_value(json_object_get(req, "cpus_per_task")), 2);
	assert_int_equal(json_integer_value(json_object_get(req, "memory_per_node")), 100);
	assert_int_equal(json_integer_value(json_object_get(req, "time_limit")), 2); /* 90 s, rounded up */
	assert_string_equal(json_string_value(json_object_get(req, "gres")), "gpu:1");
	assert_string_equal(json_string_value(json_object_get(req, "partition")), "debug");
	assert_string_equal(json_string_value(json_object_get(req, "comment")), job.dir);
	p = xasprintf("%s/log", job.dir);
	assert_string_equal(json_string_value(json_object_get(req, "standard_output")), p);
	free(p);
	/* the job's environment: Ferry's and the step's, not the daemon's */
	req = json_object_get(req, "environment");
	assert_string_equal(json_string_value(json_object_get(req, "GREETING")), "hi");
	assert_string_equal(json_string_value(json_object_get(req, "FERRY_STEP")), "train");
	assert_string_equal(json_string_value(json_object_get(req, "FERRY_ATTEMPT")), "1");
	assert_non_null(json_object_get(req, "PATH"));
	assert_null(json_object_get(req, "FERRY_SLURM_TOKEN"));
	assert_null(json_object_get(req, "HOME"));
	json_decref(saved);

	p = xasprintf("%s/job.sh", job.dir);
	assert_int_equal(file_read(&script, NULL, p), 0);
	free(p);
	assert_non_null(strstr(script, "'sh' '-c' 'echo '\\''it'\\'''\\''s'\\'' $GREETING'"));
	assert_non_null(strstr(script, "printf 'exit %d\\n' \"$rc\" >>\"$status\""));
	free(script);

	/* Slurm away: the job waits; each poll returns at once */
	for (int i = 0; i < 5; i++) {
		t0 = clock_mono_ms();
		assert_int_equal(exec_slurm.poll(&job, &st), 0);
		assert_true(clock_mono_ms() - t0 < 200);
		usleep(60 * 1000);
	}
	/* stopped before Slurm had it: nothing to cancel, it ends */
	exec_slurm.signal(&job, SIGTERM);
	for (int i = 0; i < 50 && exec_slurm.poll(&job, &st) == 0; i++)
		usleep(20 * 1000);
	assert_int_equal(st.signal, SIGTERM);
	exec_status_dispose(&st);
	exec_slurm.cleanup(&job);
	exec_job_dispose(&job);
	json_decref(c.spec);
}

static void test_exec_slurm__adopt_from_status_file(void **state)
{
	struct claim c;
	struct exec_job job, again;
	struct exec_status st = {.exit_code = -1};
	char *p;
	FILE *f;

	(void)state;
	claim(&c, "eval", 2);
	assert_int_equal(exec_slurm.start(&job, &c.s, EXEC_ONESHOT, &st), 0);
	/* the batch script ran and recorded its job id and exit */
	p = xasprintf("%s/status", job.dir);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs("slurm 41\nexit 3\n", f);
	fclose(f);
	free(p);

	/* a restarted daemon with no recorded handle */
	memset(&again, 0, sizeof(again));
	again.type = &exec_slurm;
	again.step_id = job.step_id;
	again.attempt = job.attempt;
	again.dir = xstrdup(job.dir);
	assert_int_equal(exec_slurm.adopt(&again, &st), 0);
	assert_int_equal(st.exit_code, 3);
	exec_status_dispose(&st);
	exec_job_dispose(&again);

	/* the first daemon's view, its state gone (a job's state is its own now, not shared
	 * with another job of the attempt): the status file ends it too */
	exec_slurm.dispose(&job);
	assert_int_equal(exec_slurm.poll(&job, &st), 1);
	assert_int_equal(st.exit_code, 3);
	exec_status_dispose(&st);
	exec_slurm.cleanup(&job);
	exec_job_dispose(&job);

	/* nothing left behind: never started */
	memset(&again, 0, sizeof(again));
	again.type = &exec_slurm;
	again.step_id = 99;
	again.attempt = 1;
	again.dir = xasprintf("%s/runs/9/none/1", home);
	assert_int_equal(exec_slurm.adopt(&again, &st), FERRY_ENOTFOUND);
	exec_job_dispose(&again);
	json_decref(c.spec);
}

static void test_exec_slurm__no_token(void **state)
{
	struct claim c;
	struct exec_job job;
	struct exec_status st = {.exit_code = -1};

	(void)state;
	unsetenv("FERRY_SLURM_TOKEN");
	claim(&c, "tok", 1);
	assert_int_equal(exec_slurm.start(&job, &c.s, EXEC_ONESHOT, &st), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "FERRY_SLURM_TOKEN"));
	exec_job_dispose(&job);
	json_decref(c.spec);
	setenv("FERRY_SLURM_TOKEN", "t0ken", 1);
}

/* sstat's line, as a real Slurm 22.05 with jobacct_gather/linux printed it */
static void test_exec_slurm__parse_sstat(void **state)
{
	struct exec_sample s;

	(void)state;
	assert_int_equal(exec_slurm_parse_sstat("cpu=00:00:02,energy=0,fs/disk=52451011,mem=4936K,pages=1,"
						 "vmem=8112K|energy=0,fs/disk=52428896\n", &s), 0);
	assert_int_equal(s.cpu_ms, 2000);
	assert_int_equal(s.rchar, 52451011);
	assert_int_equal(s.wchar, 52428896);
	assert_int_equal(s.read_bytes, -1);
	assert_int_equal(exec_slurm_parse_sstat("cpu=1-02:03:04,fs/disk=7|fs/disk=8", &s), 0);
	assert_int_equal(s.cpu_ms, ((26 * 60 + 3) * 60 + 4) * 1000LL);
	assert_int_equal(exec_slurm_parse_sstat("cpu=01:02.500,fs/disk=0|", &s), 0);
	assert_int_equal(s.cpu_ms, 62500);
	assert_int_equal(s.wchar, 0);
	/* not sstat's answer: an error, or fields missing */
	assert_int_equal(exec_slurm_parse_sstat("sstat: error: couldn't get steps for job 999", &s), -1);
	assert_int_equal(exec_slurm_parse_sstat("energy=0,fs/disk=1|fs/disk=2", &s), -1);
	assert_int_equal(exec_slurm_parse_sstat("cpu=xx,fs/disk=1|fs/disk=2", &s), -1);
}

/*
 * sample() runs sstat as a child and answers from its last output; the
 * sstat here is a fake script on PATH (a unit test has no Slurm): it
 * records its arguments and prints a line.
 */
static void test_exec_slurm__sample_through_sstat(void **state)
{
	struct claim c;
	struct exec_job job;
	struct exec_status st = {.exit_code = -1};
	struct exec_sample s;
	char *bin = xasprintf("%s/bin", home), *fake = xasprintf("%s/sstat", bin), *args = xasprintf("%s/args", home);
	char *path = xasprintf("%s:%s", bin, getenv("PATH")), *old = xstrdup(getenv("PATH")), *text = NULL, *p;
	FILE *f;
	int rc = FERRY_ENOTFOUND;

	(void)state;
	assert_int_equal(mkdir(bin, 0755), 0);
	f = fopen(fake, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\necho \"$@\" >%s\necho 'cpu=00:00:05,fs/disk=100|fs/disk=200'\n", args);
	fclose(f);
	chmod(fake, 0755);
	setenv("PATH", path, 1);

	claim(&c, "sam", 1);
	assert_int_equal(exec_slurm.start(&job, &c.s, EXEC_ONESHOT, &st), 0);
	/* no job id yet: nothing to ask */
	assert_int_equal(exec_slurm.sample(&job, &s), FERRY_ENOTFOUND);
	/* the script ran and recorded its job id: adopted, the job is Slurm's 77 */
	p = xasprintf("%s/status", job.dir);
	f = fopen(p, "w");
	fputs("slurm 77\n", f);
	fclose(f);
	free(p);
	exec_slurm.cleanup(&job);
	exec_job_dispose(&job);
	memset(&job, 0, sizeof(job));
	job.type = &exec_slurm, job.step_id = 3, job.attempt = 1;
	job.dir = xasprintf("%s/runs/9/sam/1", home);
	assert_int_equal(exec_slurm.adopt(&job, &st), 1);
	for (int i = 0; i < 100 && (rc = exec_slurm.sample(&job, &s)) != 0; i++)
		usleep(20 * 1000);
	assert_int_equal(rc, 0);
	assert_int_equal(s.cpu_ms, 5000);
	assert_int_equal(s.rchar, 100);
	assert_int_equal(s.wchar, 200);
	assert_int_equal(file_read(&text, NULL, args), 0);
	assert_non_null(strstr(text, "-j 77.batch"));
	free(text);

	exec_slurm.cleanup(&job);
	exec_job_dispose(&job);
	json_decref(c.spec);
	setenv("PATH", old, 1);
	free(bin), free(fake), free(args), free(path), free(old);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exec_slurm__request_and_outage),
		cmocka_unit_test(test_exec_slurm__adopt_from_status_file),
		cmocka_unit_test(test_exec_slurm__no_token),
		cmocka_unit_test(test_exec_slurm__parse_sstat),
		cmocka_unit_test(test_exec_slurm__sample_through_sstat),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
