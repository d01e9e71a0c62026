/*
 * Unit tests for the pieces of step secrets: lib/seal (values sealed at
 * rest, bound to their names, a key file of the daemon's own) and
 * exec/logmask (values masked in a job's output as it is written, also
 * when split over writes, through a real pipe from a real child).
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
#include <sys/wait.h>
#include <unistd.h>

#include "exec/logmask.h"
#include "lib/seal.h"
#include "lib/util.h"

/* What m makes of the pieces (each fed on its own), as a string. */
static char *masked(struct logmask *m, const char *const *pieces, size_t n)
{
	char path[] = "/tmp/ferry-logmask-XXXXXX";
	int fd = mkstemp(path);
	char *out = NULL;

	assert_true(fd >= 0);
	for (size_t i = 0; i < n; i++)
		logmask_feed(m, fd, pieces[i], strlen(pieces[i]));
	logmask_flush(m, fd);
	close(fd);
	assert_int_equal(file_read(&out, NULL, path), 0);
	unlink(path);
	return out;
}

static void test_logmask__values_masked_whole_and_split(void **state)
{
	json_t *sec = json_pack("{s:s, s:s}", "API_KEY", "sk-live-12345", "DB_PASS", "hunter22");
	struct logmask *m = logmask_new(sec);
	const char *text = "key=sk-live-12345 pass hunter22, not sk-live-1234 nor hunter2!\n";
	const char *want = "key=*** pass ***, not sk-live-1234 nor hunter2!\n";
	char *out;

	(void)state;
	assert_non_null(m);
	out = masked(m, (const char *const[]){text}, 1);
	assert_string_equal(out, want);
	free(out);
	/* split at every position: the same */
	for (size_t cut = 1; cut < strlen(text); cut++) {
		char *a = xstrndup(text, cut);
		out = masked(m, (const char *const[]){a, text + cut}, 2);
		if (strcmp(out, want) != 0)
			fail_msg("cut at %zu: %s", cut, out);
		free(out), free(a);
	}
	/* one byte at a time */
	{
		char one[200][2];
		const char *p[200];
		size_t n = strlen(text);
		for (size_t i = 0; i < n; i++)
			one[i][0] = text[i], one[i][1] = '\0', p[i] = one[i];
		out = masked(m, p, n);
		assert_string_equal(out, want);
		free(out);
	}
	/* a prefix at the very end is written at the end, unmasked (it is not the value) */
	out = masked(m, (const char *const[]){"tail sk-live-12"}, 1);
	assert_string_equal(out, "tail sk-live-12");
	free(out);
	logmask_free(m);
	json_decref(sec);
}

static void test_logmask__overlaps_lines_and_nothing(void **state)
{
	/* one value inside another: the longer wins where it is whole, the shorter elsewhere */
	json_t *sec = json_pack("{s:s, s:s, s:s}", "A", "abcdef", "B", "cdef", "PEM",
				"-----BEGIN KEY-----\r\nMIIEvQIBADAN\n-----END KEY-----");
	struct logmask *m = logmask_new(sec);
	char *out;

	(void)state;
	out = masked(m, (const char *const[]){"abcdef cdef abcde"}, 1);
	assert_string_equal(out, "*** *** abcde");
	free(out);
	/* each line of a multi-line value, alone too */
	out = masked(m, (const char *const[]){"got MIIEvQIBADAN here"}, 1);
	assert_string_equal(out, "got *** here");
	free(out);
	logmask_free(m);
	json_decref(sec);
	assert_null(logmask_new(NULL));
	sec = json_object();
	assert_null(logmask_new(sec));
	json_decref(sec);
}

/* The shim's masker (bin/ferry-shim: the values from its environment) masks as the daemon's did. */
static void test_logmask__from_values_as_from_secrets(void **state)
{
	const char *values[] = {"abcdef", NULL, "-----BEGIN KEY-----\r\nMIIEvQIBADAN\n-----END KEY-----", "cdef"};
	struct logmask *m = logmask_new_values(values, 4);
	char *out;

	(void)state;
	assert_non_null(m);
	out = masked(m, (const char *const[]){"abcdef cdef abcde got MIIEvQIBADAN here"}, 1);
	assert_string_equal(out, "*** *** abcde got *** here");
	free(out);
	logmask_free(m);
	assert_null(logmask_new_values(values, 0));
	assert_null(logmask_new_values((const char *const[]){NULL, ""}, 2));
}

/* A real child writes the value in pieces with pauses; the pump masks it and returns its status. */
static void test_logmask__pump_from_a_child(void **state)
{
	json_t *sec = json_pack("{s:s}", "TOKEN", "s3cr3t-t0ken");
	struct logmask *m = logmask_new(sec);
	char path[] = "/tmp/ferry-logmask-XXXXXX";
	int fds[2], out = mkstemp(path), st;
	char *log = NULL;
	pid_t pid;

	(void)state;
	assert_true(out >= 0);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		(void)!write(fds[1], "start s3cr", 10);
		usleep(300000);
		(void)!write(fds[1], "3t-t0ken end\n", 13);
		/* a grandchild that keeps the pipe open does not hold the pump past the linger */
		if (fork() == 0) {
			sleep(30);
			_exit(0);
		}
		_exit(7);
	}
	close(fds[1]);
	int64_t t0 = clock_mono_ms();
	st = logmask_pump(m, fds[0], out, pid);
	assert_true(clock_mono_ms() - t0 < 5000);
	close(out);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 7);
	assert_int_equal(file_read(&log, NULL, path), 0);
	assert_string_equal(log, "start *** end\n");
	free(log);
	unlink(path);
	logmask_free(m);
	json_decref(sec);
}

static void test_seal__round_trip_bound_to_name_and_key(void **state)
{
	char dir[] = "/tmp/ferry-seal-XXXXXX", *path, *open = NULL;
	unsigned char key[SEAL_KEY_LEN], again[SEAL_KEY_LEN], *s = NULL;
	size_t len = 0, n = 0;
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(dir));
	path = xasprintf("%s/secrets.key", dir);
	assert_int_equal(seal_key_load(key, path, 0), FERRY_ENOTFOUND);
	assert_int_equal(seal_key_load(key, path, 1), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(seal_key_load(again, path, 1), 0); /* made once, then read */
	assert_memory_equal(key, again, SEAL_KEY_LEN);

	assert_int_equal(seal_value(&s, &len, key, "DB_PASS", "hunter22", 8), 0);
	assert_int_equal(len, SEAL_NONCE_LEN + 8 + SEAL_TAG_LEN);
	assert_null(memmem(s, len, "hunter22", 8));
	assert_int_equal(seal_open(&open, &n, key, "DB_PASS", s, len), 0);
	assert_string_equal(open, "hunter22");
	free(open);
	/* under another name, altered, or with another key: it does not open */
	assert_int_equal(seal_open(&open, &n, key, "OTHER", s, len), FERRY_EINVALID);
	s[len - 1] ^= 1;
	assert_int_equal(seal_open(&open, &n, key, "DB_PASS", s, len), FERRY_EINVALID);
	s[len - 1] ^= 1;
	again[0] ^= 1;
	assert_int_equal(seal_open(&open, &n, again, "DB_PASS", s, len), FERRY_EINVALID);
	assert_int_equal(seal_open(&open, &n, key, "DB_PASS", s, 10), FERRY_EINVALID);
	free(s);

	/* a key others can read is refused */
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(seal_key_load(key, path, 0), FERRY_ERROR);
	assert_non_null(strstr(ferry_error_last(), "mode 0600"));
	unlink(path);
	rmdir(dir);
	free(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_logmask__values_masked_whole_and_split),
		cmocka_unit_test(test_logmask__overlaps_lines_and_nothing),
		cmocka_unit_test(test_logmask__from_values_as_from_secrets),
		cmocka_unit_test(test_logmask__pump_from_a_child),
		cmocka_unit_test(test_seal__round_trip_bound_to_name_and_key),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
