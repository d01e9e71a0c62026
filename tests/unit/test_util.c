/* Unit tests of util: number parsing, directories, files, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/util.h"

static void test_util__parse_int64(void **state)
{
	int64_t v = 0;

	(void)state;
	assert_int_equal(parse_int64("42", &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(parse_int64("-7", &v), 0);
	assert_int_equal(v, -7);
	assert_int_equal(parse_int64("", &v), FERRY_EINVALID);
	assert_int_equal(parse_int64("12x", &v), FERRY_EINVALID);
	assert_int_equal(parse_int64("99999999999999999999", &v), FERRY_EINVALID);
	assert_int_equal(parse_int64(NULL, &v), FERRY_EINVALID);
}

/* An error wrapped in a new one keeps its text (the message is formatted through a copy). */
static void test_util__error_wraps_the_last(void **state)
{
	(void)state;
	ferry_error_set("duration \"%s\": missing unit", "5");
	ferry_error_set("hang period: %s", ferry_error_last());
	assert_string_equal(ferry_error_last(), "hang period: duration \"5\": missing unit");
}

static void test_util__mkdir_p_and_file_read(void **state)
{
	char base[] = "/tmp/ferry-unit-util.XXXXXX", *deep, *file, *buf = NULL, *cmd;
	size_t len = 0;
	struct stat st;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(base));
	deep = xasprintf("%s/a/b/c", base);
	assert_int_equal(mkdir_p(deep, 0755), 0);
	assert_int_equal(mkdir_p(deep, 0755), 0); /* idempotent */
	assert_int_equal(stat(deep, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	{
		/* beside an existing parent, with trailing slashes, relative, modes, and a file in the way */
		char *side = xasprintf("%s/a/b/d//e/", base), *rel = xasprintf("%s/r", base), *cwd = getcwd(NULL, 0);
		char *x = xasprintf("%s/a/b/c/x/y", base);
		assert_int_equal(mkdir_p(side, 0700), 0);
		assert_int_equal(stat(side, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_mode & 0777, 0700);
		assert_int_equal(chdir(base), 0);
		assert_int_equal(mkdir_p("r/s/t", 0), 0);
		assert_int_equal(chdir(cwd), 0);
		free(side);
		side = xasprintf("%s/s/t", rel);
		assert_int_equal(stat(side, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_mode & 0777, 0755 & ~umask(umask(0)));
		free(rel);
		rel = xasprintf("%s/a/b/c/x", base);
		f = fopen(rel, "w");
		assert_non_null(f);
		fclose(f);
		assert_int_equal(mkdir_p(x, 0755), FERRY_ERROR);
		assert_non_null(strstr(ferry_error_last(), "Not a directory"));
		free(x), free(side), free(rel), free(cwd);
	}
	file = xasprintf("%s/x", deep);
	f = fopen(file, "w");
	assert_non_null(f);
	fputs("hello\nworld", f);
	fclose(f);
	assert_int_equal(file_read(&buf, &len, file), 0);
	assert_int_equal(len, 11);
	assert_string_equal(buf, "hello\nworld");
	free(buf);
	assert_int_equal(file_read(&buf, &len, "/nonexistent/file"), FERRY_ENOTFOUND);
	assert_non_null(strstr(ferry_error_last(), "/nonexistent/file"));
	cmd = xasprintf("rm -rf %s", base);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(file);
	free(deep);
}

static void test_util__error_buffer(void **state)
{
	(void)state;
	ferry_error_set("step %s failed: %d", "train", 3);
	assert_string_equal(ferry_error_last(), "step train failed: 3");
	ferry_error_clear();
	assert_string_equal(ferry_error_last(), "");
}

static void test_util__xasprintf(void **state)
{
	char *s = xasprintf("%s-%05d", "run", 42);

	(void)state;
	assert_string_equal(s, "run-00042");
	free(s);
}

/* xstrndup stops at the string's end: a bound longer than the string reads no further (ASan saw
 * Slurm's 35-byte error copied with a bound of 300, exec_slurm.c's refused) */
static void test_util__xstrndup_stops_at_the_end(void **state)
{
	char *heap = xstrdup("short"), *a = xstrndup(heap, 300), *b = xstrndup("abcdef", 3);

	(void)state;
	assert_string_equal(a, "short");
	assert_string_equal(b, "abc");
	free(heap), free(a), free(b);
}

static void test_util__hex_encode(void **state)
{
	const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
	char out[2 * sizeof(bytes) + 1];

	(void)state;
	memset(out, 'x', sizeof(out));
	hex_encode(out, bytes, sizeof(bytes));
	assert_string_equal(out, "000fa5ff");
	hex_encode(out, bytes, 0);
	assert_string_equal(out, "");
}

static void test_util__sha256_hex(void **state)
{
	char out[65];

	(void)state;
	sha256_hex(out, "abc", 3); /* FIPS 180-2, appendix B.1 */
	assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha256_hex(out, "", 0);
	assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static int nice_seen = -100;

static int read_nice(void *arg)
{
	errno = 0;
	nice_seen = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
	if (arg) {
		ferry_error_set("failed on purpose: %s", (const char *)arg);
		return FERRY_EINVALID;
	}
	return 7;
}

/* run_niced: fn at nice +10 on its own thread; this thread keeps its value; the error comes back. */
static void expect_lexical(const char *in, const char *want)
{
	char *got = path_lexical(in);
	if (want == NULL) {
		assert_null(got);
		return;
	}
	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void test_util__path_lexical(void **state)
{
	(void)state;
	expect_lexical("/", "/");
	expect_lexical("/a/b/../c/", "/a/c");
	expect_lexical("//a//./b", "/a/b");
	expect_lexical("/a/..", "/");
	expect_lexical("/../../etc/passwd", "/etc/passwd");
	expect_lexical("/srv/wd/../../../../../../etc/passwd", "/etc/passwd");
	expect_lexical("/a/b/c/../../d/./e/..", "/a/d");
	expect_lexical("/a/...", "/a/...");
	expect_lexical("/a/..b/.c", "/a/..b/.c");
	expect_lexical("relative/path", NULL);
	expect_lexical("", NULL);
	assert_true(path_within_lexical("/srv/wd/m.pkl", "/srv/wd"));
	assert_true(path_within_lexical("/srv/wd", "/srv/wd/"));
	assert_true(path_within_lexical("/srv/x/../wd/a", "/srv/wd"));
	assert_false(path_within_lexical("/srv/wd/../wd2/a", "/srv/wd"));
	assert_false(path_within_lexical("/srv/wdx", "/srv/wd"));
	assert_false(path_within_lexical("/srv/wd/../../etc/passwd", "/srv/wd"));
	assert_true(path_within_lexical("/anything", "/"));
	assert_false(path_within_lexical("/srv/wd/a", NULL));
	assert_false(path_within_lexical("wd/a", "/srv"));
}

static void test_util__run_niced(void **state)
{
	int base = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));

	(void)state;
	assert_int_equal(run_niced(read_nice, NULL), 7);
	assert_int_equal(nice_seen, base + 10 > 19 ? 19 : base + 10);
	assert_int_equal(getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)), base);
	ferry_error_clear();
	assert_int_equal(run_niced(read_nice, "x"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "failed on purpose: x");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_util__parse_int64),
		cmocka_unit_test(test_util__mkdir_p_and_file_read),
		cmocka_unit_test(test_util__error_buffer),
		cmocka_unit_test(test_util__xasprintf),
		cmocka_unit_test(test_util__xstrndup_stops_at_the_end),
		cmocka_unit_test(test_util__error_wraps_the_last),
		cmocka_unit_test(test_util__hex_encode),
		cmocka_unit_test(test_util__sha256_hex),
		cmocka_unit_test(test_util__run_niced),
		cmocka_unit_test(test_util__path_lexical),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
