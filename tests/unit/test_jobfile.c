/*
 * Unit tests for orchestrator/lib/jobfile: real files a hostile job could
 * leave in its directory — a FIFO nobody writes (the open and the read
 * must not wait), links to a secret and to /dev/zero, a link in place of a
 * directory on the way, a 200 MB sparse file, a directory, a file at the
 * limit and one byte over, `..` — each opened through jobfile_open/read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/jobfile.h"
#include "lib/util.h"

static char root[] = "/tmp/ferry-jobfile-XXXXXX";
static char secret[] = "/tmp/ferry-jobfile-secret-XXXXXX";

static char *at(const char *rel)
{
	return xasprintf("%s/%s", root, rel);
}

static void put(const char *rel, const char *text)
{
	char *p = at(rel);
	FILE *f = fopen(p, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	free(p);
}

static int setup(void **state)
{
	char *p;
	int fd;

	(void)state;
	if (mkdtemp(root) == NULL || (fd = mkstemp(secret)) < 0)
		return -1;
	if (write(fd, "root:$6$hash:19000::::::\n", 25) != 25)
		return -1;
	close(fd);
	p = at("out");
	mkdir(p, 0755);
	free(p);
	return 0;
}

static int teardown(void **state)
{
	char *cmd = xasprintf("rm -rf '%s' '%s'", root, secret);

	(void)state;
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	free(cmd);
	return 0;
}

static void test_jobfile__regular_read_whole(void **state)
{
	char *text;
	size_t len;

	(void)state;
	put("out/metrics.json", "{\"accuracy\": 0.93}\n");
	assert_int_equal(jobfile_read(&text, &len, root, "out/metrics.json", 1024), FERRY_OK);
	assert_string_equal(text, "{\"accuracy\": 0.93}\n");
	assert_int_equal(len, 19);
	free(text);
	/* exactly at the limit is read; one byte over is refused before reading */
	assert_int_equal(jobfile_read(&text, &len, root, "out/metrics.json", 19), FERRY_OK);
	free(text);
	assert_int_equal(jobfile_read(&text, &len, root, "out/metrics.json", 18), FERRY_EINVALID);
	assert_null(text);
	assert_string_equal(ferry_error_last(), "out/metrics.json is 19 bytes; the limit is 18 bytes");
	/* empty */
	put("out/empty", "");
	assert_int_equal(jobfile_read(&text, &len, root, "out/empty", 10), FERRY_OK);
	assert_int_equal(len, 0);
	assert_string_equal(text, "");
	free(text);
}

static void test_jobfile__missing(void **state)
{
	char *text;

	(void)state;
	assert_int_equal(jobfile_read(&text, NULL, root, "out/none.json", 10), FERRY_ENOTFOUND);
	assert_int_equal(jobfile_read(&text, NULL, root, "nodir/none.json", 10), FERRY_ENOTFOUND);
	assert_int_equal(jobfile_read(&text, NULL, "/nonexistent-ferry-root", "x", 10), FERRY_ENOTFOUND);
}

/* A FIFO with no writer: a plain open() would wait for ever; here it is refused at once. */
static void test_jobfile__fifo_refused_without_waiting(void **state)
{
	char *p = at("out/outputs.json"), *text;
	int64_t t0;

	(void)state;
	assert_int_equal(mkfifo(p, 0644), 0);
	alarm(10); /* a wait would end the test here, not hang the suite */
	t0 = clock_mono_ms();
	assert_int_equal(jobfile_read(&text, NULL, root, "out/outputs.json", 1 << 20), FERRY_EINVALID);
	alarm(0);
	assert_true(clock_mono_ms() - t0 < 5000);
	assert_string_equal(ferry_error_last(), "out/outputs.json is a FIFO; Ferry reads only regular files");
	assert_int_equal(jobfile_open(root, "out/outputs.json", NULL), FERRY_EINVALID);
	unlink(p);
	free(p);
}

/* Links: to a secret, to /dev/zero, to a regular file beside it; none followed, the target never named. */
static void test_jobfile__links_not_followed(void **state)
{
	char *p = at("log"), *q = at("out/zero"), *r = at("out/alias"), *text;

	(void)state;
	assert_int_equal(symlink(secret, p), 0);
	assert_int_equal(jobfile_read(&text, NULL, root, "log", 1 << 20), FERRY_EINVALID);
	assert_null(strstr(ferry_error_last(), secret));
	assert_null(strstr(ferry_error_last(), "root:"));
	assert_non_null(strstr(ferry_error_last(), "log is a symbolic link"));
	assert_int_equal(symlink("/dev/zero", q), 0);
	assert_int_equal(jobfile_read(&text, NULL, root, "out/zero", 1 << 20), FERRY_EINVALID);
	put("out/real", "x");
	assert_int_equal(symlink("real", r), 0);
	assert_int_equal(jobfile_read(&text, NULL, root, "out/alias", 10), FERRY_EINVALID);
	unlink(p), unlink(q), unlink(r);
	free(p), free(q), free(r);
}

/* The job replaced a directory on the way by a link (out -> /etc): refused, not read through. */
static void test_jobfile__link_in_a_parent_refused(void **state)
{
	char *p = at("linked"), *text, *dir = xstrdup(secret), *slash = strrchr(dir, '/');

	(void)state;
	*slash = '\0';
	assert_int_equal(symlink(dir, p), 0);
	assert_int_equal(jobfile_read(&text, NULL, root, strrchr(secret, '/') + 1, 1 << 20), FERRY_ENOTFOUND);
	{
		char *rel = xasprintf("linked%s", strrchr(secret, '/'));
		assert_int_equal(jobfile_read(&text, NULL, root, rel, 1 << 20), FERRY_EINVALID);
		assert_null(strstr(ferry_error_last(), "root:"));
		free(rel);
	}
	assert_int_equal(jobfile_read(&text, NULL, root, "../etc/passwd", 1 << 20), FERRY_EINVALID);
	assert_int_equal(jobfile_read(&text, NULL, root, "/etc/passwd", 1 << 20), FERRY_EINVALID);
	assert_int_equal(jobfile_read(&text, NULL, root, "", 1 << 20), FERRY_EINVALID);
	unlink(p);
	free(p), free(dir);
}

/* A 200 MB sparse file is refused from its size, with no memory spent on it. */
static void test_jobfile__sparse_file_refused_before_reading(void **state)
{
	char *p = at("out/metrics.big"), *text;
	int fd;

	(void)state;
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 200 << 20), 0);
	close(fd);
	assert_int_equal(jobfile_read(&text, NULL, root, "out/metrics.big", 1 << 20), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "out/metrics.big is 209715200 bytes; the limit is 1048576 bytes");
	unlink(p);
	free(p);
}

static void test_jobfile__directory_refused(void **state)
{
	char *text;

	(void)state;
	assert_int_equal(jobfile_read(&text, NULL, root, "out", 10), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "out is a directory; Ferry reads only regular files");
}

/* Appending: made when missing, appended to; a FIFO or a link in its place is refused at once, nothing written. */
static void test_jobfile__append_never_through_a_link_or_fifo(void **state)
{
	char *log = at("alog"), *text, *before;
	size_t len;
	int fd;

	(void)state;
	fd = jobfile_append(root, "alog");
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "one\n", 4), 4);
	close(fd);
	fd = jobfile_append(root, "alog");
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "two\n", 4), 4);
	close(fd);
	assert_int_equal(jobfile_read(&text, &len, root, "alog", 100), FERRY_OK);
	assert_string_equal(text, "one\ntwo\n");
	free(text);
	unlink(log);
	/* a link to a file outside: refused, the file unchanged */
	assert_int_equal(jobfile_read(&before, &len, "/", secret + 1, 1 << 20), FERRY_OK);
	assert_int_equal(symlink(secret, log), 0);
	assert_int_equal(jobfile_append(root, "alog"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "alog is a symbolic link"));
	assert_int_equal(jobfile_read(&text, &len, "/", secret + 1, 1 << 20), FERRY_OK);
	assert_string_equal(text, before);
	free(text), free(before);
	unlink(log);
	/* a FIFO nobody reads: a plain open for writing would wait for ever */
	assert_int_equal(mkfifo(log, 0644), 0);
	alarm(10);
	assert_true(jobfile_append(root, "alog") < 0);
	alarm(0);
	unlink(log);
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jobfile__regular_read_whole),
		cmocka_unit_test(test_jobfile__missing),
		cmocka_unit_test(test_jobfile__fifo_refused_without_waiting),
		cmocka_unit_test(test_jobfile__links_not_followed),
		cmocka_unit_test(test_jobfile__link_in_a_parent_refused),
		cmocka_unit_test(test_jobfile__sparse_file_refused_before_reading),
		cmocka_unit_test(test_jobfile__directory_refused),
		cmocka_unit_test(test_jobfile__append_never_through_a_link_or_fifo),
	};
	int failed = cmocka_run_group_tests_name("openat2", tests, setup, teardown);

	/* the same files through the walk of a kernel without openat2 */
	jobfile_walk_only = 1;
	memcpy(root + strlen(root) - 6, "XXXXXX", 6);
	memcpy(secret + strlen(secret) - 6, "XXXXXX", 6);
	return failed + cmocka_run_group_tests_name("component walk", tests, setup, teardown);
}
