/* Unit tests of datacache: the content fingerprint of files and directory trees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/metrics.h"
#include "lib/fingerprint.h"
#include "lib/util.h"

static void put(const char *dir, const char *rel, const char *text)
{
	char *path = xasprintf("%s/%s", dir, rel);
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	free(path);
}

static void mk(const char *dir, const char *rel)
{
	char *path = xasprintf("%s/%s", dir, rel);

	assert_int_equal(mkdir_p(path, 0755), 0);
	free(path);
}

static void rm_rf(const char *dir)
{
	char *cmd = xasprintf("rm -rf '%s'", dir);

	assert_int_equal(system(cmd), 0);
	free(cmd);
}

static char *fp_of(const char *dir)
{
	char out[65];

	assert_int_equal(fingerprint_path(out, dir), FERRY_OK);
	assert_int_equal(strlen(out), 64);
	for (int i = 0; i < 64; i++)
		assert_true((out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'f'));
	return xstrdup(out);
}

static void test_datacache__file_is_sha256_of_bytes(void **state)
{
	char base[] = "/tmp/ferry-unit-dc.XXXXXX", out[65];

	(void)state;
	assert_non_null(mkdtemp(base));
	put(base, "abc.txt", "abc");
	char *path = xasprintf("%s/abc.txt", base);
	assert_int_equal(fingerprint_path(out, path), FERRY_OK);
	assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	free(path);
	path = xasprintf("%s/missing", base);
	assert_int_equal(fingerprint_path(out, path), FERRY_ENOTFOUND);
	free(path);
	rm_rf(base);
}

/* The same tree created in opposite orders: readdir order does not matter. */
static void test_datacache__tree_independent_of_readdir_order(void **state)
{
	char a[] = "/tmp/ferry-unit-dca.XXXXXX", b[] = "/tmp/ferry-unit-dcb.XXXXXX";
	static const char *const names[] = {"z.csv", "a.csv", "m/n.csv", "m/a.bin", "b-c", "b/c", ".hidden"};
	const int n = (int)(sizeof(names) / sizeof(names[0]));
	char *fa, *fb;

	(void)state;
	assert_non_null(mkdtemp(a));
	assert_non_null(mkdtemp(b));
	mk(a, "m"), mk(a, "b"), mk(b, "b"), mk(b, "m");
	for (int i = 0; i < n; i++)
		put(a, names[i], names[i]);
	for (int i = n - 1; i >= 0; i--)
		put(b, names[i], names[i]);
	fa = fp_of(a);
	fb = fp_of(b);
	assert_string_equal(fa, fb);
	free(fb);
	fb = fp_of(a);
	assert_string_equal(fa, fb); /* deterministic */
	free(fa), free(fb);
	rm_rf(a), rm_rf(b);
}

static void test_datacache__tree_changes_with_content_names_and_shape(void **state)
{
	char d[] = "/tmp/ferry-unit-dcc.XXXXXX";
	char *f0, *f1, *f2, *f3, *f4, *f5;

	(void)state;
	assert_non_null(mkdtemp(d));
	mk(d, "sub");
	put(d, "sub/x.csv", "1,2\n");
	put(d, "y.csv", "3,4\n");
	f0 = fp_of(d);
	put(d, "sub/x.csv", "1,3\n"); /* same size, other bytes */
	f1 = fp_of(d);
	assert_string_not_equal(f0, f1);
	put(d, "sub/x.csv", "1,2\n"); /* back: the same fingerprint */
	f2 = fp_of(d);
	assert_string_equal(f0, f2);
	{ /* a name */
		char *from = xasprintf("%s/y.csv", d), *to = xasprintf("%s/w.csv", d);
		assert_int_equal(rename(from, to), 0);
		free(from), free(to);
	}
	f3 = fp_of(d);
	assert_string_not_equal(f0, f3);
	mk(d, "empty"); /* an empty directory is part of the shape */
	f4 = fp_of(d);
	assert_string_not_equal(f3, f4);
	put(d, "sub/x.csv", ""); /* content moving between files: "" + "1,2\n" vs … */
	put(d, "w.csv", "1,2\n3,4\n");
	f5 = fp_of(d);
	assert_string_not_equal(f4, f5);
	free(f0), free(f1), free(f2), free(f3), free(f4), free(f5);
	rm_rf(d);
}

/* Links are not followed: what they point at does not count, their target text does. */
static void test_datacache__links_not_followed(void **state)
{
	char d[] = "/tmp/ferry-unit-dcl.XXXXXX", o[] = "/tmp/ferry-unit-dco.XXXXXX";
	char *target = NULL, *link = NULL, *f0, *f1, *f2;

	(void)state;
	assert_non_null(mkdtemp(d));
	assert_non_null(mkdtemp(o));
	put(o, "secret", "v1");
	put(d, "data", "x");
	target = xasprintf("%s/secret", o);
	link = xasprintf("%s/leak", d);
	assert_int_equal(symlink(target, link), 0);
	f0 = fp_of(d);
	put(o, "secret", "v2 longer");
	f1 = fp_of(d);
	assert_string_equal(f0, f1);
	unlink(link);
	assert_int_equal(symlink("data", link), 0);
	f2 = fp_of(d);
	assert_string_not_equal(f0, f2);
	free(f0), free(f1), free(f2), free(target), free(link);
	rm_rf(d), rm_rf(o);
}

/*
 * The stat memo: an unchanged tree is not read again; a write is seen even
 * when size and mtime are put back (ctime moves); a tree written just now
 * is never remembered (its timestamps may not show a write that follows).
 */
static void test_datacache__memo_reads_unchanged_trees_once(void **state)
{
	char tmpl[] = "/tmp/ferry-dc-memo-XXXXXX", *dir = mkdtemp(tmpl), *path;
	char *a, *b, *c, *d;
	uint64_t reads, hits;
	struct stat st;
	struct timespec times[2];
	FILE *f;

	(void)state;
	assert_non_null(dir);
	mk(dir, "sub");
	put(dir, "x.csv", "1,2,3\n");
	put(dir, "sub/y.csv", "4,5,6\n");
	sleep(3); /* past the racy window */

	reads = metrics_get(M_FP_READS), hits = metrics_get(M_FP_MEMO_HITS);
	a = fp_of(dir);
	assert_int_equal(metrics_get(M_FP_READS), reads + 1);
	b = fp_of(dir);
	assert_string_equal(a, b);
	assert_int_equal(metrics_get(M_FP_READS), reads + 1);
	assert_int_equal(metrics_get(M_FP_MEMO_HITS), hits + 1);

	/* same size, mtime put back: only ctime tells */
	path = xasprintf("%s/sub/y.csv", dir);
	assert_int_equal(stat(path, &st), 0);
	f = fopen(path, "r+");
	assert_non_null(f);
	fputs("7,8,9\n", f);
	fclose(f);
	times[0] = st.st_atim;
	times[1] = st.st_mtim;
	assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
	c = fp_of(dir);
	assert_string_not_equal(a, c);
	assert_int_equal(metrics_get(M_FP_READS), reads + 2);
	/* just written: read again, not remembered */
	d = fp_of(dir);
	assert_string_equal(c, d);
	assert_int_equal(metrics_get(M_FP_READS), reads + 3);

	free(a), free(b), free(c), free(d), free(path);
	rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_datacache__file_is_sha256_of_bytes),
		cmocka_unit_test(test_datacache__tree_independent_of_readdir_order),
		cmocka_unit_test(test_datacache__tree_changes_with_content_names_and_shape),
		cmocka_unit_test(test_datacache__links_not_followed),
		cmocka_unit_test(test_datacache__memo_reads_unchanged_trees_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
