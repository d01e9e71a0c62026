/*
 * Unit tests of states: each name table round-trips, and the C tables and
 * the SQL compiled into the binary agree — the CHECK constraints of
 * runs.state, steps.state and attempts.state (the last one each table got
 * in db/migrations) hold exactly the names of the C tables, and every state
 * or outcome literal that db/functions compares or assigns is in them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"
#include "lib/states.h"
#include "store/store_deploy.h"

#define MAX_NAMES 32

struct names {
	int n;
	char v[MAX_NAMES][32];
};

/* One table as the tests see it: its names through the public functions. */
struct table {
	const char *what;
	int count;
	const char *(*name)(int);
	int (*parse)(const char *);
};

static const char *run_name(int v) { return run_state_name((enum run_state)v); }
static const char *step_name(int v) { return step_state_name((enum step_state)v); }
static const char *attempt_name(int v) { return attempt_state_name((enum attempt_state)v); }
static const char *outcome_name(int v) { return attempt_outcome_name((enum attempt_outcome)v); }

static const struct table tables[] = {
	{"run", RUN_STATE_COUNT, run_name, run_state_parse},
	{"step", STEP_STATE_COUNT, step_name, step_state_parse},
	{"attempt", ATTEMPT_STATE_COUNT, attempt_name, attempt_state_parse},
	{"outcome", ATTEMPT_OUTCOME_COUNT, outcome_name, attempt_outcome_parse},
};

static int ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* Reads 'a', 'b', … at p into out (appending); returns how many were read. */
static int read_literals(const char *p, struct names *out)
{
	int got = 0;

	for (;;) {
		const char *end;
		while (isspace((unsigned char)*p) || *p == ',' || *p == '(')
			p++;
		if (*p != '\'')
			return got;
		end = strchr(p + 1, '\'');
		assert_non_null(end);
		assert_true(out->n < MAX_NAMES);
		assert_true(end - p - 1 < 32);
		snprintf(out->v[out->n], sizeof(out->v[0]), "%.*s", (int)(end - p - 1), p + 1);
		out->n++;
		got++;
		p = end + 1;
	}
}

/*
 * The names in the last `CHECK (state IN (…))` that the migrations give
 * table: a CHECK belongs to the table of the CREATE TABLE or ALTER TABLE
 * before it.
 */
static void check_names(struct names *out, const char *table)
{
	memset(out, 0, sizeof(*out));
	for (int m = 0; m < db_migrations_len; m++) {
		const char *sql = db_migrations[m].sql, *p = sql;
		char current[64] = "";

		while (*p) {
			if (strncmp(p, "CREATE TABLE ", 13) == 0 || strncmp(p, "ALTER TABLE ", 12) == 0) {
				const char *t = p + (p[0] == 'C' ? 13 : 12);
				if (strncmp(t, "IF NOT EXISTS ", 14) == 0)
					t += 14;
				size_t n = 0;
				while (ident_char(t[n]) && n + 1 < sizeof(current))
					n++;
				snprintf(current, sizeof(current), "%.*s", (int)n, t);
			} else if (strncmp(p, "CHECK (state IN", 15) == 0 && strcmp(current, table) == 0) {
				memset(out, 0, sizeof(*out));
				read_literals(p + 15, out);
			}
			p++;
		}
	}
}

static int contains(const struct names *ns, const char *name)
{
	for (int i = 0; i < ns->n; i++)
		if (strcmp(ns->v[i], name) == 0)
			return 1;
	return 0;
}

static void test_states__round_trip(void **state)
{
	(void)state;
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
		const struct table *tb = &tables[t];
		for (int v = 0; v < tb->count; v++) {
			const char *name = tb->name(v);
			assert_non_null(name);
			assert_int_equal(tb->parse(name), v);
			for (int w = 0; w < v; w++)
				assert_string_not_equal(tb->name(w), name);
		}
		assert_null(tb->name(tb->count));
		assert_null(tb->name(-1));
		assert_int_equal(tb->parse("nonsense"), -1);
		assert_int_equal(tb->parse(""), -1);
		assert_int_equal(tb->parse(NULL), -1);
		assert_int_equal(tb->parse("Running"), -1); /* exact, as stored */
	}
	assert_string_equal(run_state_name(RUN_STOPPING), "stopping");
	assert_string_equal(step_state_name(STEP_WAITING), "waiting");
	assert_string_equal(attempt_state_name(ATTEMPT_LOST), "lost");
	assert_string_equal(attempt_outcome_name(OUTCOME_WAITING), "waiting");
	assert_int_equal(attempt_outcome_parse("running"), -1); /* a state, not an outcome */
}

static void test_states__predicates(void **state)
{
	int finished = 0, open = 0;

	(void)state;
	for (int v = 0; v < RUN_STATE_COUNT; v++)
		finished += run_state_finished((enum run_state)v);
	assert_int_equal(finished, 3);
	assert_true(run_state_finished(RUN_STOPPED));
	assert_false(run_state_finished(RUN_STOPPING));
	for (int v = 0; v < STEP_STATE_COUNT; v++)
		open += step_state_open((enum step_state)v);
	assert_int_equal(open, 4);
	assert_true(step_state_open(STEP_WAITING));
	assert_false(step_state_open(STEP_SKIPPED));
}

/* The CHECK constraint of table holds exactly the names of tb. */
static void assert_check_matches(const char *table, const struct table *tb)
{
	struct names ns;

	check_names(&ns, table);
	if (ns.n == 0)
		fail_msg("no CHECK (state IN (…)) for table %s in db/migrations", table);
	for (int v = 0; v < tb->count; v++)
		if (!contains(&ns, tb->name(v)))
			fail_msg("%s state \"%s\" is not in the CHECK of %s.state", tb->what, tb->name(v), table);
	for (int i = 0; i < ns.n; i++)
		if (tb->parse(ns.v[i]) < 0)
			fail_msg("%s.state allows \"%s\", which states.c does not name", table, ns.v[i]);
}

static void test_states__match_sql_checks(void **state)
{
	(void)state;
	assert_check_matches("runs", &tables[0]);
	assert_check_matches("steps", &tables[1]);
	assert_check_matches("attempts", &tables[2]);
}

/* Whether s names a deployment version's state (store_deploy.h: starting, serving, retired). */
static int deploy_version_state_known(const char *s)
{
	for (int k = DEPLOY_V_STARTING; k <= DEPLOY_V_RETIRED; k++)
		if (strcmp(deploy_version_state_name((enum deploy_version_state)k), s) == 0)
			return 1;
	return 0;
}

/*
 * Every literal that db/functions compares a state or outcome column with
 * (x.state = 'a', state <> 'a', state IN ('a', 'b'), outcome IN (…)) is a
 * name of a C table (a run's, step's, attempt's or deployment version's); and every outcome appears in ferry_finish's file.
 */
static void test_states__functions_use_known_names(void **state)
{
	int seen_state = 0, seen_outcome = 0;

	(void)state;
	for (int f = 0; f < db_functions_len; f++) {
		const char *sql = db_functions[f].sql;
		for (const char *p = sql; *p; p++) {
			int is_outcome = strncmp(p, "outcome", 7) == 0;
			int is_state = strncmp(p, "state", 5) == 0;
			const char *q;
			struct names ns = {0};

			/* r.state, v_state, outcome; not 'state' (a JSON key) or a longer word */
			if ((!is_state && !is_outcome) || (p > sql && (isalnum((unsigned char)p[-1]) || p[-1] == '\'')))
				continue;
			q = p + (is_state ? 5 : 7);
			if (ident_char(*q))
				continue;
			while (*q == ' ')
				q++;
			if (strncmp(q, "NOT IN", 6) == 0)
				q += 6;
			else if (strncmp(q, "IN", 2) == 0 || strncmp(q, "<>", 2) == 0)
				q += 2;
			else if (*q == '=')
				q += 1;
			else
				continue;
			read_literals(q, &ns);
			for (int i = 0; i < ns.n; i++) {
				if (is_outcome) {
					if (attempt_outcome_parse(ns.v[i]) < 0)
						fail_msg("db/functions/%s.sql compares outcome with \"%s\", not an outcome",
							 db_functions[f].name, ns.v[i]);
					seen_outcome++;
				} else {
					if (run_state_parse(ns.v[i]) < 0 && step_state_parse(ns.v[i]) < 0 &&
					    attempt_state_parse(ns.v[i]) < 0 && !deploy_version_state_known(ns.v[i]))
						fail_msg("db/functions/%s.sql compares a state with \"%s\", not a state",
							 db_functions[f].name, ns.v[i]);
					seen_state++;
				}
			}
		}
	}
	assert_true(seen_state > 20); /* the scan found the comparisons */
	assert_true(seen_outcome >= 4);
	for (int f = 0; f < db_functions_len; f++) {
		if (strcmp(db_functions[f].name, "finish") != 0)
			continue;
		for (int v = 0; v < ATTEMPT_OUTCOME_COUNT; v++) {
			char lit[40];
			snprintf(lit, sizeof(lit), "'%s'", attempt_outcome_name((enum attempt_outcome)v));
			if (strstr(db_functions[f].sql, lit) == NULL)
				fail_msg("outcome %s is not in db/functions/finish.sql", lit);
		}
		return;
	}
	fail_msg("no db/functions/finish.sql compiled in");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_states__round_trip),
		cmocka_unit_test(test_states__predicates),
		cmocka_unit_test(test_states__match_sql_checks),
		cmocka_unit_test(test_states__functions_use_known_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
