/* Unit tests of the content-addressed blob store (lib/blobs.c): names, puts, and a fetch refused. */
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

#include "lib/blobs.h"
#include "lib/util.h"

#define ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" /* sha256("abc") */

static void test_blobs__hex_of_a_store_path(void **state)
{
	char hex[65];

	(void)state;
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/ba/" ABC), 1);
	assert_string_equal(hex, ABC);
	/* any host's store: the name is what counts */
	assert_int_equal(blobs_hex_of(hex, "/elsewhere/x/sha256/ba/" ABC), 1);
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/bb/" ABC), 0);       /* not its folder */
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha1/ba/" ABC), 0);         /* not sha256/ */
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/ba/" ABC "0"), 0);   /* 65 digits */
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/BA/BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"), 0);
	assert_int_equal(blobs_hex_of(hex, "/runs/1/train/1/model.bin"), 0);
	assert_int_equal(blobs_hex_of(hex, ""), 0);
	assert_int_equal(blobs_hex_of(hex, NULL), 0);
	assert_int_equal(blobs_is_hex(ABC), 1);
	assert_int_equal(blobs_is_hex("../../etc/passwd"), 0);
}

static void test_blobs__put_once_read_only(void **state)
{
	char tmpl[] = "/tmp/test_blobs.XXXXXX", hex[65], hex2[65], *home = mkdtemp(tmpl), *path = NULL, *path2 = NULL;
	char *want, *src, *text = NULL;
	int64_t bytes = 0;
	struct stat st;
	FILE *f;

	(void)state;
	assert_non_null(home);
	assert_int_equal(blobs_put_bytes(hex, &path, home, "abc", 3), FERRY_OK);
	assert_string_equal(hex, ABC);
	want = blobs_path(home, ABC);
	assert_string_equal(path, want);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0444);
	/* the same bytes from a file: the same blob, stored once */
	src = xasprintf("%s/src", home);
	f = fopen(src, "w");
	fputs("abc", f);
	fclose(f);
	assert_int_equal(blobs_put_file(hex2, &bytes, &path2, home, src), FERRY_OK);
	assert_string_equal(hex2, ABC);
	assert_int_equal(bytes, 3);
	assert_string_equal(path2, want);
	assert_int_equal(file_read(&text, NULL, path2), FERRY_OK);
	assert_string_equal(text, "abc");
	free(text), free(src), free(want), free(path), free(path2);
	text = xasprintf("rm -rf %s", home);
	assert_int_equal(system(text), 0);
	free(text);
}

/* a host that cannot be reached: an error naming it, nothing left in the store */
static void test_blobs__fetch_unreachable_keeps_nothing(void **state)
{
	char tmpl[] = "/tmp/test_blobs.XXXXXX", *home = mkdtemp(tmpl), *path, *cmd;
	int64_t bytes = 1;

	(void)state;
	assert_non_null(home);
	/* port 1 on loopback: refused at once */
	assert_int_equal(blobs_fetch(home, ABC, "http://127.0.0.1:1/api/v1/blobs/" ABC, "t", &bytes), FERRY_ERROR);
	assert_non_null(strstr(ferry_error_last(), "http://127.0.0.1:1/api/v1/blobs/"));
	assert_int_equal(bytes, 0);
	path = blobs_path(home, ABC);
	assert_int_not_equal(access(path, F_OK), 0);
	assert_int_equal(blobs_fetch(home, "../x", "http://127.0.0.1:1/", "t", &bytes), FERRY_EINVALID);
	cmd = xasprintf("test -z \"$(ls -A %s/artifacts/tmp 2>/dev/null)\" && rm -rf %s", home, home);
	assert_int_equal(system(cmd), 0); /* no temporary file left */
	free(cmd), free(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blobs__hex_of_a_store_path),
		cmocka_unit_test(test_blobs__put_once_read_only),
		cmocka_unit_test(test_blobs__fetch_unreachable_keeps_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
