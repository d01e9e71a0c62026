/*
 * Unit tests for orchestrator/lib/envsecret: the daemon's secrets taken
 * out of its environment block. The test runs itself again with secrets
 * in its real initial environment (what /proc/self/environ shows; setenv
 * would only add heap strings), then scrubs and reads /proc/self/environ.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/envsecret.h"
#include "lib/util.h"

/* Whether /proc/self/environ (the block a job could read of the daemon) holds needle. */
static int environ_block_has(const char *needle)
{
	char buf[65536];
	FILE *f = fopen("/proc/self/environ", "r");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	for (size_t i = 0; i + strlen(needle) <= n; i++)
		if (memcmp(buf + i, needle, strlen(needle)) == 0)
			return 1;
	return 0;
}

static void test_envsecret__scrubbed_from_the_block_and_kept(void **state)
{
	(void)state;
	assert_true(environ_block_has("unit-api-s3cret"));
	assert_true(environ_block_has("pg-s3cret"));
	assert_string_equal(envsecret_get("FERRY_API_TOKEN"), "unit-api-s3cret"); /* before: getenv */

	assert_int_equal(envsecret_scrub(), 3);
	assert_false(environ_block_has("unit-api-s3cret"));
	assert_false(environ_block_has("hook-s3cret"));
	assert_false(environ_block_has("pg-s3cret"));
	assert_true(environ_block_has("ENVSECRET_KEEP=plain")); /* only the secrets go */

	assert_null(getenv("FERRY_API_TOKEN"));
	assert_null(getenv("FERRY_GIT_WEBHOOK_SECRET"));
	assert_string_equal(envsecret_get("FERRY_API_TOKEN"), "unit-api-s3cret");
	assert_string_equal(envsecret_get("FERRY_GIT_WEBHOOK_SECRET"), "hook-s3cret");
	assert_null(envsecret_get("FERRY_SLURM_TOKEN")); /* never set */
	/* libpq reads PGPASSWORD itself: back as a heap string, outside the block */
	assert_string_equal(getenv("PGPASSWORD"), "pg-s3cret");
	assert_string_equal(envsecret_get("ENVSECRET_KEEP"), "plain"); /* not a secret: getenv */
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_envsecret__scrubbed_from_the_block_and_kept),
	};

	if (getenv("ENVSECRET_KEEP") == NULL) {
		extern char **environ;
		char *envp[64] = {"FERRY_API_TOKEN=unit-api-s3cret", "FERRY_GIT_WEBHOOK_SECRET=hook-s3cret",
				  "PGPASSWORD=pg-s3cret", "ENVSECRET_KEEP=plain"};
		int n = 4;
		/* the sanitizers' and cmocka's settings travel along */
		for (char **e = environ; *e && n < 63; e++)
			if (strncmp(*e, "ASAN_", 5) == 0 || strncmp(*e, "LSAN_", 5) == 0 ||
			    strncmp(*e, "UBSAN_", 6) == 0 || strncmp(*e, "CMOCKA_", 7) == 0)
				envp[n++] = *e;
		envp[n] = NULL;
		(void)argc;
		execve("/proc/self/exe", argv, envp);
		perror("execve");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
