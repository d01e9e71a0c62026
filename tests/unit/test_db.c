/*
 * Unit tests of the SQL compiled into the binary (db/gen-sql.sh): the
 * function files keep to their rule (db/functions/README.md) — each opens
 * with a comment, defines functions only and only with CREATE OR REPLACE,
 * compares no step kind's name — and every function a migration ever
 * created has its current definition in exactly one function file.
 * (Applying them needs PostgreSQL: tests/integration/t_functions.sh.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "store/db.h"

#define CREATE_FN "CREATE OR REPLACE FUNCTION "

/* Copies the identifier at p into out (size n). */
static void ident_at(char *out, size_t n, const char *p)
{
	size_t k = 0;

	while ((isalnum((unsigned char)p[k]) || p[k] == '_') && k + 1 < n)
		k++;
	snprintf(out, n, "%.*s", (int)k, p);
}

/* How many function files define name (a CREATE OR REPLACE FUNCTION name( line each). */
static int definitions(const char *name)
{
	char line[160];
	int n = 0;

	snprintf(line, sizeof(line), "\n" CREATE_FN "%s(", name);
	for (int f = 0; f < db_functions_len; f++) {
		const char *p = db_functions[f].sql;
		while ((p = strstr(p, line)) != NULL) {
			n++;
			p++;
		}
	}
	return n;
}

static void test_db__function_files_keep_the_rule(void **state)
{
	(void)state;
	assert_true(db_functions_len > 0);
	for (int f = 0; f < db_functions_len; f++) {
		const char *name = db_functions[f].name, *sql = db_functions[f].sql;
		int fns = 0;

		assert_non_null(name);
		for (int g = 0; g < f; g++)
			assert_string_not_equal(db_functions[g].name, name);
		if (strncmp(sql, "-- ", 3) != 0)
			fail_msg("db/functions/%s.sql does not open with a comment on its concern", name);
		/* statements start in the first column; bodies are indented */
		for (const char *l = sql; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
			static const char *const banned[] = {"DROP", "ALTER", "INSERT", "UPDATE", "DELETE",
							     "GRANT", "SELECT", "DO "};
			if (strncmp(l, "CREATE", 6) == 0) {
				if (strncmp(l, CREATE_FN, strlen(CREATE_FN)) != 0)
					fail_msg("db/functions/%s.sql: \"%.40s\": only CREATE OR REPLACE FUNCTION "
						 "belongs here (tables, triggers and DROPs go in a migration)", name, l);
				fns++;
			}
			for (size_t b = 0; b < sizeof(banned) / sizeof(banned[0]); b++)
				if (strncmp(l, banned[b], strlen(banned[b])) == 0)
					fail_msg("db/functions/%s.sql: \"%.40s\": a statement that is not a function "
						 "definition (it would run again each time the file changes)", name, l);
		}
		if (fns == 0)
			fail_msg("db/functions/%s.sql defines no function", name);
	}
}

/* Whether the literal that ends a "kind = '" at p names an event kind
 * ('run.retry', 'step.waiting': always a dot), not a step kind (never one). */
static int event_kind_at(const char *p)
{
	const char *end = strchr(p, '\'');
	const char *dot = strchr(p, '.');

	return end && dot && dot < end;
}

static void test_db__no_kind_names_in_functions(void **state)
{
	static const char *const cmp[] = {"kind = '", "kind <> '", "kind != '", "kind IN (", "kind NOT IN ("};

	(void)state;
	for (int f = 0; f < db_functions_len; f++)
		for (size_t c = 0; c < sizeof(cmp) / sizeof(cmp[0]); c++)
			for (const char *p = strstr(db_functions[f].sql, cmp[c]); p; p = strstr(p + 1, cmp[c]))
				if (cmp[c][strlen(cmp[c]) - 1] != '\'' || !event_kind_at(p + strlen(cmp[c])))
					fail_msg("db/functions/%s.sql compares a kind (\"%s…\"): use the step's flags "
						 "(steps.waits, steps.restage)", db_functions[f].name, cmp[c]);
}

/* Every function any migration created is defined in one file, and no file defines one twice. */
static void test_db__one_definition_each(void **state)
{
	int seen = 0;

	(void)state;
	for (int m = 0; m < db_migrations_len; m++) {
		const char *p = db_migrations[m].sql;
		while ((p = strstr(p, "FUNCTION ")) != NULL) {
			const char *start = p;
			char name[96];
			p += 9;
			if (!(start >= db_migrations[m].sql + 7 && strncmp(start - 7, "CREATE ", 7) == 0) &&
			    !(start >= db_migrations[m].sql + 18 && strncmp(start - 18, "CREATE OR REPLACE ", 18) == 0))
				continue;
			ident_at(name, sizeof(name), p);
			if (definitions(name) != 1)
				fail_msg("%s (created in db/migrations/%s.sql) is defined in %d function files, not 1",
					 name, db_migrations[m].name, definitions(name));
			seen++;
		}
	}
	assert_true(seen >= 18);
	for (int f = 0; f < db_functions_len; f++) {
		const char *p = db_functions[f].sql;
		while ((p = strstr(p, CREATE_FN)) != NULL) {
			char name[96];
			p += strlen(CREATE_FN);
			ident_at(name, sizeof(name), p);
			if (definitions(name) != 1)
				fail_msg("%s is defined %d times in db/functions", name, definitions(name));
		}
	}
	assert_int_equal(definitions("ferry_finish"), 1);
	assert_int_equal(definitions("ferry_retry"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_db__function_files_keep_the_rule),
		cmocka_unit_test(test_db__no_kind_names_in_functions),
		cmocka_unit_test(test_db__one_definition_each),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
