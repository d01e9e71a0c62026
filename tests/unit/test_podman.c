/*
 * Unit tests of the podman executor's pieces that need no container
 * runtime: container names, the podman command line a step becomes, and
 * resource samples read from a cgroup tree (a fake one in a temporary
 * directory, laid out as cgroup v1, v2 and the hybrid layout). Real
 * containers are tests/integration/t_podman.sh's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/exec_podman.h"
#include "lib/util.h"

static char tmp[] = "/tmp/ferry-unit-podman.XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
	char *cmd = xasprintf("rm -rf %s", tmp);
	(void)state;
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", tmp);
	free(cmd);
	return 0;
}

static void put(const char *rel, const char *text)
{
	char *path = xasprintf("%s/%s", tmp, rel), *dir = xstrdup(path);
	FILE *f;

	*strrchr(dir, '/') = '\0';
	assert_int_equal(mkdir_p(dir, 0755), 0);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	free(path);
	free(dir);
}

/* The index of s in argv, or -1. */
static int find(char **argv, const char *s)
{
	for (int i = 0; argv[i]; i++)
		if (strcmp(argv[i], s) == 0)
			return i;
	return -1;
}

/* Whether argv holds the pair OPT VALUE. */
static int has_pair(char **argv, const char *opt, const char *value)
{
	for (int i = 0; argv[i] && argv[i + 1]; i++)
		if (strcmp(argv[i], opt) == 0 && strcmp(argv[i + 1], value) == 0)
			return 1;
	return 0;
}

static int count(char **argv, const char *s)
{
	int n = 0;

	for (int i = 0; argv[i]; i++)
		n += strcmp(argv[i], s) == 0;
	return n;
}

static void test_podman__name(void **state)
{
	char *a = exec_podman_name("/srv/ferry", 42, "train", 3);
	char *b = exec_podman_name("/srv/other", 42, "train", 3);
	char *c = exec_podman_name("/srv/ferry", 42, "train", 4);
	char hash[65];

	(void)state;
	sha256_hex(hash, "/srv/ferry", strlen("/srv/ferry"));
	assert_int_equal(strncmp(a, "ferry-", 6), 0);
	assert_int_equal(strncmp(a + 6, hash, 8), 0);
	assert_string_equal(a + 14, "-42-train-3");
	assert_string_not_equal(a, b); /* another home, another name */
	assert_string_not_equal(a, c); /* another attempt: never a name conflict */
	free(a), free(b), free(c);
}

/* Step "fit" of run 5, attempt 2, with spec's fields, under tmp. */
static struct exec_spec claim(json_t *spec)
{
	struct exec_spec c;

	memset(&c, 0, sizeof(c));
	c.step_id = 9;
	c.run_id = 5;
	c.attempt = 2;
	c.name = "fit";
	c.home = tmp;
	exec_spec_from_json(&c, spec, &exec_podman);
	return c;
}

static void test_podman__argv_image_limits_env(void **state)
{
	char **argv = NULL, **envp = NULL, *dir = xasprintf("%s/runs/5/fit/2", tmp), *name, *v;
	json_t *spec = json_pack("{s:[s,s,s], s:{s:s, s:s}, s:s, s:{s:f, s:i, s:i}, s:n}", "command",
				 "sh", "-c", "echo secret-free", "env", "GREETING", "hello", "PATH",
				 "/opt/bin", "image", "ferry-base", "resources", "cpus", 1.5, "memory_mb",
				 512, "gpus", 2, "network");
	struct exec_spec c = claim(spec);
	int n;

	(void)state;
	assert_int_equal(mkdir_p(dir, 0755), 0);
	setenv("FERRY_API_TOKEN", "daemon-secret", 1);
	assert_int_equal(exec_podman_argv(&argv, &envp, &c, tmp, dir), 0);
	name = exec_podman_name(tmp, 5, "fit", 2);
	assert_true(has_pair(argv, "--name", name));
	assert_true(find(argv, "run") > 0);
	assert_true(find(argv, "--replace") > 0);
	assert_true(has_pair(argv, "--label", "ferry.run=5"));
	assert_true(has_pair(argv, "--label", "ferry.step=fit"));
	assert_true(has_pair(argv, "--label", "ferry.attempt=2"));
	v = xasprintf("ferry.home=%s", tmp);
	assert_true(has_pair(argv, "--label", v));
	free(v);
	assert_true(has_pair(argv, "--log-driver", "passthrough"));
	assert_true(has_pair(argv, "--network", "none")); /* the default */
	assert_true(has_pair(argv, "--cpus", "1.5"));
	assert_true(has_pair(argv, "--memory", "512m"));
	assert_true(has_pair(argv, "--memory-swap", "512m")); /* no swap: the limit is real */
	assert_true(has_pair(argv, "--device", "nvidia.com/gpu=0"));
	assert_true(has_pair(argv, "--device", "nvidia.com/gpu=1"));
	assert_int_equal(count(argv, "--device"), 2);
	v = xasprintf("/ferry/%s", name);
	assert_true(has_pair(argv, "--cgroup-parent", v));
	free(v);
	/* the attempt directory mounted at its own path, and the working directory (the same: once) */
	v = xasprintf("%s:%s", dir, dir);
	assert_true(has_pair(argv, "-v", v));
	assert_int_equal(count(argv, v), 1);
	free(v);
	assert_true(has_pair(argv, "-w", dir));
	/* the variables by name, their values in podman's environment; PATH inline */
	assert_true(has_pair(argv, "--env", "GREETING"));
	assert_true(has_pair(argv, "--env", "FERRY_OUTPUT_DIR"));
	assert_true(has_pair(argv, "--env", "PATH=/opt/bin"));
	assert_int_equal(find(argv, "--rootfs"), -1);
	assert_true(find(envp, "GREETING=hello") >= 0);
	assert_true(find(envp, "FERRY_STEP=fit") >= 0);
	for (int i = 0; envp[i]; i++)
		assert_null(strstr(envp[i], "daemon-secret")); /* the daemon's settings are not the job's */
	for (int i = 0; argv[i]; i++)
		assert_null(strstr(argv[i], "hello")); /* no value in argv (ps shows it) */
	/* the image, then the command, last */
	for (n = 0; argv[n]; n++)
		;
	assert_string_equal(argv[n - 4], "ferry-base");
	assert_string_equal(argv[n - 3], "sh");
	assert_string_equal(argv[n - 1], "echo secret-free");
	unsetenv("FERRY_API_TOKEN");
	exec_podman_vec_free(argv);
	exec_podman_vec_free(envp);
	json_decref(spec);
	free(name);
	free(dir);
}

static void test_podman__argv_host_network_mounts(void **state)
{
	char **argv = NULL, **envp = NULL, *dir = xasprintf("%s/runs/5/fit/2", tmp);
	char *wd = xasprintf("%s/repo", tmp), *sub = xasprintf("%s/repo/src", tmp), *v;
	json_t *spec = json_pack("{s:[s], s:{}, s:s, s:n, s:s, s:s}", "command", "true", "env", "image",
				 "host", "resources", "network", "host", "workdir", "src");
	struct exec_spec c = claim(spec);
	int n;

	(void)state;
	assert_int_equal(mkdir_p(dir, 0755), 0);
	assert_int_equal(mkdir_p(sub, 0755), 0);
	c.run_workdir = wd;
	assert_int_equal(exec_podman_argv(&argv, &envp, &c, tmp, dir), 0);
	assert_true(has_pair(argv, "--network", "host"));
	assert_int_equal(find(argv, "--cpus"), -1);
	assert_int_equal(find(argv, "--memory"), -1);
	for (n = 0; argv[n]; n++)
		;
	assert_string_equal(argv[n - 3], "--rootfs"); /* image: host: the host's root, as an overlay */
	assert_string_equal(argv[n - 2], "/:O");
	assert_string_equal(argv[n - 1], "true");
	/* the run's workdir is mounted read-only; the step's below it is inside that mount */
	v = xasprintf("%s:%s:ro", wd, wd);
	assert_true(has_pair(argv, "-v", v));
	free(v);
	v = xasprintf("%s:%s", sub, sub);
	assert_int_equal(find(argv, v), -1);
	free(v);
	assert_true(has_pair(argv, "-w", sub));
	exec_podman_vec_free(argv);
	exec_podman_vec_free(envp);
	json_decref(spec);
	free(dir), free(wd), free(sub);
}

static void test_podman__argv_needs_a_command(void **state)
{
	char **argv = NULL, **envp = NULL, *dir = xasprintf("%s/runs/5/fit/2", tmp);
	json_t *spec = json_pack("{s:[], s:{}}", "command", "env");
	struct exec_spec c = claim(spec);

	(void)state;
	assert_int_equal(exec_podman_argv(&argv, &envp, &c, tmp, dir), FERRY_EINVALID);
	assert_null(argv);
	json_decref(spec);
	free(dir);
}

static void test_podman__cgroup_v1(void **state)
{
	struct exec_sample s;
	int cpu = -1;
	char *root = xasprintf("%s/v1", tmp), *procs = xasprintf("%d\n", (int)getpid());

	(void)state;
	put("v1/cpuacct/ferry/c1/cpuacct.usage", "2500000000\n");
	put("v1/blkio/ferry/c1/blkio.throttle.io_service_bytes_recursive",
	    "8:0 Read 4096\n8:0 Write 1024\n8:0 Sync 0\n8:0 Total 5120\n8:16 Read 100\n8:16 Write 0\nTotal 5220\n");
	put("v1/pids/ferry/c1/libpod-abc/cgroup.procs", procs);
	put("v1/pids/ferry/c1/cgroup.procs", "");
	assert_int_equal(exec_podman_cgroup_sample(root, "ferry/c1", &s, &cpu), 0);
	assert_int_equal(cpu, 1);
	assert_int_equal(s.cpu_ms, 2500);
	assert_int_equal(s.read_bytes, 4196);
	assert_int_equal(s.write_bytes, 1024);
	assert_true(s.rchar > 0); /* this process, found in a sub-cgroup */
	assert_int_equal(exec_podman_cgroup_sample(root, "ferry/none", &s, NULL), FERRY_ENOTFOUND);
	free(root), free(procs);
}

static void test_podman__cgroup_v2_and_hybrid(void **state)
{
	struct exec_sample s;
	int cpu = -1;
	char *v2 = xasprintf("%s/v2", tmp), *hy = xasprintf("%s/hybrid", tmp);

	(void)state;
	put("v2/ferry/c2/cpu.stat", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n");
	put("v2/ferry/c2/io.stat", "8:0 rbytes=300 wbytes=200 rios=3 wios=2\n8:16 rbytes=1 wbytes=2 rios=1 wios=1\n");
	put("v2/ferry/c2/cgroup.procs", "");
	assert_int_equal(exec_podman_cgroup_sample(v2, "ferry/c2", &s, NULL), 0);
	assert_int_equal(s.cpu_ms, 1500);
	assert_int_equal(s.read_bytes, 301);
	assert_int_equal(s.write_bytes, 202);
	/* hybrid: CPU from v1 cpuacct when there, else from unified/ */
	put("hybrid/unified/ferry/c3/cpu.stat", "usage_usec 7000\n");
	put("hybrid/blkio/ferry/c3/blkio.throttle.io_service_bytes_recursive", "Total 0\n");
	assert_int_equal(exec_podman_cgroup_sample(hy, "ferry/c3", &s, NULL), 0);
	assert_int_equal(s.cpu_ms, 7);
	assert_int_equal(s.read_bytes, 0);
	/* IO but no CPU file: found, but the CPU time is said not read (docker then asks its engine) */
	put("hybrid/blkio/ferry/c4/blkio.throttle.io_service_bytes_recursive", "8:0 Read 5\n");
	assert_int_equal(exec_podman_cgroup_sample(hy, "ferry/c4", &s, &cpu), 0);
	assert_int_equal(cpu, 0);
	free(v2), free(hy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_podman__name),
		cmocka_unit_test(test_podman__argv_image_limits_env),
		cmocka_unit_test(test_podman__argv_host_network_mounts),
		cmocka_unit_test(test_podman__argv_needs_a_command),
		cmocka_unit_test(test_podman__cgroup_v1),
		cmocka_unit_test(test_podman__cgroup_v2_and_hybrid),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
