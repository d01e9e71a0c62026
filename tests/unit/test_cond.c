/*
 * Unit tests for the `when:` condition language (plan/cond.c): the
 * grammar and its errors with columns, the references it finds, and
 * evaluation over a table of values — numbers, strings, booleans, null,
 * absent outputs and an absent production version — with short-circuits
 * and the explanation of what was looked up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg_test.h"
#include "plan/cond.h"

/* The values the lookup knows, by the reference's text; "noprod" in it: no production. */
static json_t *table;
static int lookups;

static int lookup(json_t **val, char **why, const struct cond_ref *ref, void *arg)
{
	json_t *v = json_object_get(table, ref->text);

	(void)arg;
	lookups++;
	if (ref->kind == CREF_PRODUCTION && json_object_get(table, "noprod") != NULL) {
		*why = xstrdup("no production version of digits");
		return 1;
	}
	if (v == NULL) {
		*why = xasprintf("not written by step %s", ref->step ? ref->step : "?");
		return 1;
	}
	*val = json_incref(v);
	return 0;
}

/* 1 holds, 0 does not, -1 an error (message in ferry_error_last) */
static int run(const char *text)
{
	struct cond *c = NULL;
	bool holds = false;
	char *explain = NULL;
	int rc;

	if (cond_parse(&c, text) < 0) {
		fail_msg("%s: %s", text, ferry_error_last());
		return -2;
	}
	rc = cond_eval(c, lookup, NULL, &holds, &explain);
	free(explain);
	cond_free(c);
	return rc < 0 ? -1 : holds;
}

static void expect_parse_error(const char *text, const char *want)
{
	struct cond *c = NULL;

	if (cond_parse(&c, text) == 0) {
		cond_free(c);
		fail_msg("%s parsed", text);
	}
	if (strstr(ferry_error_last(), want) == NULL)
		fail_msg("%s: \"%s\" does not say \"%s\"", text, ferry_error_last(), want);
}

static void test_cond__parse_errors_say_where(void **state)
{
	(void)state;
	expect_parse_error("", "empty");
	expect_parse_error("params.x = 1", "at column 10: \"=\" is not an operator; compare with \"==\"");
	expect_parse_error("(params.x >= 1", "at column 15: expected \")\" to close the \"(\" at column 1");
	expect_parse_error("1 < 2 < 3", "do not chain");
	expect_parse_error("steps.a.output.x > 1", "steps.STEP.outputs.KEY");
	expect_parse_error("steps.a.metrics > 1", "steps.STEP.metrics.KEY");
	expect_parse_error("steps.a.metrics[x] > 1", "expected a quoted key after \"metrics[\"");
	expect_parse_error("'open", "not closed");
	expect_parse_error("paramz.x", "expected a value");
	expect_parse_error("params.x >= 1 2", "at column 15: expected an operator");
	expect_parse_error("1e999 > 1", "out of range");
	expect_parse_error("{{ params.x > 1", "expected \"}}\"");
	expect_parse_error("2x > 1", "runs into a name");
	{
		char deep[200];
		memset(deep, '(', 40);
		snprintf(deep + 40, sizeof(deep) - 40, "1");
		expect_parse_error(deep, "nested more than");
	}
	{
		char *big = xmalloc(COND_MAX_LEN + 10);
		memset(big, '1', COND_MAX_LEN + 8);
		big[COND_MAX_LEN + 8] = '\0';
		expect_parse_error(big, "at most");
		free(big);
	}
}

static void test_cond__references(void **state)
{
	struct cond *c = NULL;
	const struct cond_ref *r;

	(void)state;
	assert_int_equal(cond_parse(&c, "{{ steps.eval-1.x.metrics.f1 }} >= production.f1 + 0.01 and "
				     "params.deploy == true or steps.b.outputs[\"val/loss\"] < 1"), 0);
	assert_int_equal(cond_nrefs(c), 4);
	r = cond_ref_at(c, 0);
	assert_int_equal(r->kind, CREF_METRIC);
	assert_string_equal(r->step, "eval-1.x");
	assert_string_equal(r->key, "f1");
	assert_int_equal(r->col, 4);
	r = cond_ref_at(c, 1);
	assert_int_equal(r->kind, CREF_PRODUCTION);
	assert_string_equal(r->key, "f1");
	r = cond_ref_at(c, 2);
	assert_int_equal(r->kind, CREF_PARAM);
	assert_string_equal(r->key, "deploy");
	r = cond_ref_at(c, 3);
	assert_int_equal(r->kind, CREF_OUTPUT);
	assert_string_equal(r->step, "b");
	assert_string_equal(r->key, "val/loss");
	assert_null(cond_ref_at(c, 4));
	cond_free(c);
}

static void test_cond__evaluates(void **state)
{
	(void)state;
	table = json_pack("{s:f,s:f,s:b,s:s,s:s,s:s,s:n,s:i,s:[i]}", "steps.e.metrics.f1", 0.91,
			  "production.f1", 0.93, "params.deploy", 1, "params.mode", "fast", "params.n", "12",
			  "params.flag", "false", "steps.a.outputs.none", "params.zero", 0, "steps.a.outputs.list", 1);
	assert_int_equal(run("steps.e.metrics.f1 >= production.f1"), 0);
	assert_int_equal(run("{{steps.e.metrics.f1}} >= production.f1 - 0.05"), 1);
	assert_int_equal(run("steps.e.metrics.f1 > 90%"), 1);
	assert_int_equal(run("params.deploy == true"), 1);
	assert_int_equal(run("params.deploy"), 1);
	assert_int_equal(run("not params.deploy"), 0);
	assert_int_equal(run("!params.deploy || params.mode == 'fast'"), 1);
	assert_int_equal(run("params.mode != \"fast\""), 0);
	assert_int_equal(run("params.mode < 'slow'"), 1);
	assert_int_equal(run("params.n > 9"), 1);           /* a string that is a number, as one */
	assert_int_equal(run("params.n * 2 == 24"), 1);
	assert_int_equal(run("-params.n < -(3 + 4) * 1"), 1);
	assert_int_equal(run("params.flag == false"), 1);   /* "false" as a boolean */
	assert_int_equal(run("params.flag"), 0);
	assert_int_equal(run("steps.a.outputs.none == null"), 1);
	assert_int_equal(run("steps.a.outputs.none != null"), 0);
	assert_int_equal(run("steps.a.outputs.none"), 0);
	assert_int_equal(run("params.zero"), 0);
	assert_int_equal(run("1 and 2 and (3 or 0)"), 1);
	/* errors: named, never guessed */
	assert_int_equal(run("params.mode >= 3"), -1);
	assert_non_null(strstr(ferry_error_last(), "cannot compare \"fast\" (a string) >= 3 (a number)"));
	assert_int_equal(run("steps.missing.outputs.k == 1"), -1);
	assert_non_null(strstr(ferry_error_last(), "steps.missing.outputs.k: not written by step missing"));
	assert_int_equal(run("params.mode"), -1);
	assert_non_null(strstr(ferry_error_last(), "not a condition"));
	assert_int_equal(run("params.n / params.zero > 1"), -1);
	assert_non_null(strstr(ferry_error_last(), "division by zero"));
	assert_int_equal(run("steps.a.outputs.none > 1"), -1);
	assert_int_equal(run("params.deploy > false"), -1);
	assert_int_equal(run("steps.a.outputs.list == steps.a.outputs.list"), 1);
	/* short circuit: the right side is not looked up */
	lookups = 0;
	assert_int_equal(run("params.zero == 1 and steps.missing.outputs.k == 1"), 0);
	assert_int_equal(lookups, 1);
	assert_int_equal(run("params.zero == 0 or steps.missing.outputs.k == 1"), 1);
	/* no production version: comparisons with it hold, as the gates' do, and == null says so */
	json_object_set_new(table, "noprod", json_true());
	assert_int_equal(run("steps.e.metrics.f1 >= production.f1"), 1);
	assert_int_equal(run("steps.e.metrics.f1 < production.f1 + 0.01"), 1);
	assert_int_equal(run("production.f1 == null"), 1);
	assert_int_equal(run("production.f1 != null && steps.e.metrics.f1 >= production.f1"), 0);
	assert_int_equal(run("production.f1"), 0);
	json_decref(table);
}

static void test_cond__explains(void **state)
{
	struct cond *c = NULL;
	bool holds = true;
	char *explain = NULL;

	(void)state;
	table = json_pack("{s:f,s:f}", "steps.e.metrics.f1", 0.91, "production.f1", 0.93);
	assert_int_equal(cond_parse(&c, "steps.e.metrics.f1 >= production.f1"), 0);
	assert_int_equal(cond_eval(c, lookup, NULL, &holds, &explain), 0);
	assert_false(holds);
	assert_string_equal(explain, "steps.e.metrics.f1 = 0.91, production.f1 = 0.93");
	free(explain);
	cond_free(c);
	json_object_set_new(table, "noprod", json_true());
	assert_int_equal(cond_parse(&c, "steps.e.metrics.f1 >= production.f1"), 0);
	assert_int_equal(cond_eval(c, lookup, NULL, &holds, &explain), 0);
	assert_true(holds);
	assert_string_equal(explain, "steps.e.metrics.f1 = 0.91, production.f1 = none (no production version of digits)");
	free(explain);
	cond_free(c);
	json_decref(table);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cond__parse_errors_say_where),
		cmocka_unit_test(test_cond__references),
		cmocka_unit_test(test_cond__evaluates),
		cmocka_unit_test(test_cond__explains),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
