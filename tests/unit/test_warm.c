/*
 * Unit tests for which commands a warm Python server can start
 * (exec/exec_warm.c warm_entry): the interpreter found on the job's PATH
 * or named by path, through links, then a script, -m or -c, -u before
 * them; anything else starts cold with the reason.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "exec/exec.h"
#include "lib/util.h"

static char dir[64];

static int entry(const char *path, const char *python, const char **why, ...)
{
	char *argv[8];
	va_list ap;
	int n = 0;

	va_start(ap, why);
	while (n < 7 && (argv[n] = va_arg(ap, char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	*why = NULL;
	return warm_entry(argv, path, dir, python, why);
}

static int setup(void **state)
{
	char *p;
	FILE *f;

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_warm.XXXXXX");
	assert_non_null(mkdtemp(dir));
	/* bin/py: an executable standing for the interpreter, bin/py3 a link to it, bin/other another */
	p = xasprintf("%s/bin", dir);
	assert_int_equal(mkdir(p, 0755), 0);
	free(p);
	for (int i = 0; i < 2; i++) {
		p = xasprintf("%s/bin/%s", dir, i ? "other" : "py");
		f = fopen(p, "w");
		assert_non_null(f);
		fputs("#!/bin/sh\n", f);
		fclose(f);
		assert_int_equal(chmod(p, 0755), 0);
		free(p);
	}
	p = xasprintf("%s/bin/py3", dir);
	assert_int_equal(symlink("py", p), 0);
	free(p);
	p = xasprintf("%s/train.py", dir);
	f = fopen(p, "w");
	assert_non_null(f);
	fclose(f);
	free(p);
	return 0;
}

static int teardown(void **state)
{
	char *cmd = xasprintf("rm -rf %s", dir);

	(void)state;
	assert_int_equal(system(cmd), 0);
	free(cmd);
	return 0;
}

static void test_warm__entry_points(void **state)
{
	char *path = xasprintf("/nonexistent:%s/bin", dir), *py = xasprintf("%s/bin/py", dir);
	char *abs = xasprintf("%s/train.py", dir);
	const char *why;

	(void)state;
	assert_int_equal(entry(path, py, &why, "py", "train.py", "--C", "1", NULL), 0);
	assert_int_equal(entry(path, py, &why, "py3", "train.py", NULL), 0);      /* a link to it */
	assert_int_equal(entry(path, py, &why, py, abs, NULL), 0);                 /* by path */
	assert_int_equal(entry(path, py, &why, "py", "-u", "train.py", NULL), 0);
	assert_int_equal(entry(path, py, &why, "py", "-m", "pkg.main", "x", NULL), 0);
	assert_int_equal(entry(path, py, &why, "py", "-u", "-c", "print(1)", NULL), 0);
	free(path), free(py), free(abs);
}

static void test_warm__cold_with_a_reason(void **state)
{
	char *path = xasprintf("%s/bin", dir), *py = xasprintf("%s/bin/py", dir);
	const char *why;

	(void)state;
	assert_int_equal(entry(path, py, &why, "other", "train.py", NULL), -1);
	assert_non_null(strstr(why, "does not start the warm interpreter"));
	assert_int_equal(entry("/nonexistent", py, &why, "py", "train.py", NULL), -1); /* not on PATH */
	assert_int_equal(entry(path, py, &why, "py", "-X", "dev", "train.py", NULL), -1);
	assert_non_null(strstr(why, "not other interpreter options"));
	assert_int_equal(entry(path, py, &why, "py", NULL), -1);                /* an interactive interpreter */
	assert_int_equal(entry(path, py, &why, "py", "-m", NULL), -1);
	assert_non_null(strstr(why, "needs an argument"));
	assert_int_equal(entry(path, py, &why, "py", "missing.py", NULL), -1);  /* Python says why, cold */
	assert_non_null(strstr(why, "not a file"));
	assert_int_equal(entry(path, py, &why, "py", "bin", NULL), -1);         /* a directory */
	free(path), free(py);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warm__entry_points),
		cmocka_unit_test(test_warm__cold_with_a_reason),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
