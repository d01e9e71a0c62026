/*
 * Unit tests that keep README.md's workflow reference true: every step kind
 * of the kind table and every key of the config's key list has its row, no
 * row names a kind or key that does not exist, and the README links nothing
 * outside the repository. Run from the repository's root (make test does).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/config.h"
#include "plan/kind.h"
#include "lib/util.h"

/* Every key a step may have (plan/config.c: the generic ones, then each kind's table). */
static const char *key_at(size_t k)
{
	return cfg_step_key_at(k);
}

static char *readme;

/* The text of the "### Workflow reference" section (a copy the caller frees). */
static char *reference(void)
{
	const char *start = strstr(readme, "\n### Workflow reference\n"), *end;

	assert_non_null(start);
	end = strstr(start + 1, "\n### ");
	assert_non_null(end);
	return xstrndup(start, (size_t)(end - start));
}

/* Whether some table row of text starts with "| `word` |". */
static int has_row(const char *text, const char *word)
{
	char *row = xasprintf("\n| `%s` |", word);
	int found = strstr(text, row) != NULL;

	free(row);
	return found;
}

static int setup(void **state)
{
	(void)state;
	return file_read(&readme, NULL, "README.md") == FERRY_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(readme);
	return 0;
}

static void test_readme__every_kind_has_its_row(void **state)
{
	char *ref = reference();

	(void)state;
	for (size_t i = 0; step_kinds[i]; i++)
		if (!has_row(ref, step_kinds[i]->name))
			fail_msg("README's workflow reference has no row for kind %s", step_kinds[i]->name);
	free(ref);
}

static void test_readme__every_key_has_its_row(void **state)
{
	char *ref = reference();

	(void)state;
	for (size_t k = 0; key_at(k) != NULL; k++)
		if (!has_row(ref, key_at(k)))
			fail_msg("README's workflow reference has no row for key %s", key_at(k));
	free(ref);
}

/* Every row's first cell is a known kind or key: nothing documented that does not exist. */
static void test_readme__no_row_for_what_does_not_exist(void **state)
{
	char *ref = reference();
	const char *p = ref;

	(void)state;
	while ((p = strstr(p, "\n| `")) != NULL) {
		const char *name = p + 4, *end = strchr(name, '`');
		char *word;
		int known = 0;

		assert_non_null(end);
		word = xstrndup(name, (size_t)(end - name));
		known = step_kind_find(word) != NULL;
		for (size_t k = 0; key_at(k) != NULL && !known; k++)
			known = strcmp(key_at(k), word) == 0;
		if (!known)
			fail_msg("README's workflow reference has a row for \"%s\", which is no kind or key", word);
		free(word);
		p = end;
	}
	free(ref);
}

static void test_readme__no_link_outside_the_repository(void **state)
{
	(void)state;
	assert_null(strstr(readme, "](http"));
	assert_null(strstr(readme, "../shared"));
	assert_null(strstr(readme, "](../"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_readme__every_kind_has_its_row),
		cmocka_unit_test(test_readme__every_key_has_its_row),
		cmocka_unit_test(test_readme__no_row_for_what_does_not_exist),
		cmocka_unit_test(test_readme__no_link_outside_the_repository),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
