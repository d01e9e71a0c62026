/*
 * Unit tests for plan/foreach.c: a fan-out's list from JSON or lines, its
 * limits and errors; min_success as written; a sweep's grid (every
 * combination, the last name fastest) and random draws (the same for the
 * same seed, inside their ranges), and their errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg_test.h"
#include "plan/foreach.h"

static void test_foreach__lists(void **state)
{
	json_t *items = NULL;
	char *big;

	(void)state;
	assert_int_equal(foreach_parse_text(&items, " [1, \"a\", {\"k\": 2}] ", 20, "x"), 0);
	assert_int_equal(json_array_size(items), 3);
	json_decref(items);
	assert_int_equal(foreach_parse_text(&items, "a\n\n  b  \r\nc", 11, "x"), 0);
	assert_string_equal(json_string_value(json_array_get(items, 1)), "b");
	assert_int_equal(json_array_size(items), 3);
	json_decref(items);
	assert_int_equal(foreach_parse_text(&items, "[1, 2", 5, "steps.a.outputs.l"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "steps.a.outputs.l: not a JSON list"));
	assert_int_equal(foreach_parse_text(&items, "[]", 2, "x"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "empty"));
	assert_int_equal(foreach_parse_text(&items, " \n ", 3, "x"), FERRY_EINVALID);
	assert_int_equal(foreach_parse_text(&items, "[1, null]", 9, "x"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "item 1 is null"));
	assert_int_equal(foreach_parse_text(&items, "a\n\xff\xfe\n", 5, "x"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "item 2 (a line) is not UTF-8"));
	/* 100,001 lines: one too many */
	big = xmalloc(2 * (FOREACH_MAX_ITEMS + 1) + 1);
	for (int i = 0; i <= FOREACH_MAX_ITEMS; i++)
		big[2 * i] = 'x', big[2 * i + 1] = '\n';
	assert_int_equal(foreach_parse_text(&items, big, 2 * (FOREACH_MAX_ITEMS + 1), "x"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "at most 100000"));
	assert_int_equal(foreach_parse_text(&items, big, 2 * FOREACH_MAX_ITEMS, "x"), 0);
	assert_int_equal(json_array_size(items), FOREACH_MAX_ITEMS);
	json_decref(items);
	free(big);
	/* values: a list, a string holding one, nothing else */
	{
		json_t *v = json_pack("s", "[\"p\", \"q\"]"), *n = json_integer(3);
		assert_int_equal(foreach_items(&items, v, "params.l"), 0);
		assert_int_equal(json_array_size(items), 2);
		json_decref(items);
		assert_int_equal(foreach_items(&items, n, "params.l"), FERRY_EINVALID);
		assert_non_null(strstr(ferry_error_last(), "not a number"));
		json_decref(v);
		json_decref(n);
	}
	items = foreach_range(3);
	assert_int_equal(json_integer_value(json_array_get(items, 2)), 2);
	json_decref(items);
}

static void test_foreach__min_success(void **state)
{
	(void)state;
	assert_true(fabs(foreach_min_success("95%") - 0.95) < 1e-12);
	assert_true(fabs(foreach_min_success("0.5") - 0.5) < 1e-12);
	assert_true(foreach_min_success("1") == 1);
	assert_true(foreach_min_success("0") < 0);
	assert_true(foreach_min_success("101%") < 0);
	assert_true(foreach_min_success("95 %") < 0);
	assert_true(foreach_min_success("half") < 0);
}

static void test_foreach__sweeps(void **state)
{
	json_t *sweep, *items = NULL, *again = NULL, *it;
	size_t i;

	(void)state;
	sweep = json_loads("{\"grid\": {\"C\": [1, 10, 100], \"gamma\": [0.01, 0.1]}}", 0, NULL);
	assert_int_equal(sweep_items(&items, sweep), 0);
	assert_int_equal(json_array_size(items), 6);
	/* the last name varies fastest */
	assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 0), "C")), 1);
	assert_true(json_real_value(json_object_get(json_array_get(items, 1), "gamma")) == 0.1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 5), "C")), 100);
	json_decref(items);
	json_decref(sweep);

	sweep = json_loads("{\"random\": {\"n\": 50, \"seed\": 7, \"params\": {\"C\": {\"log_uniform\": [0.1, 100]}, "
			   "\"k\": [\"rbf\", \"linear\"], \"d\": {\"int\": [2, 4]}, \"u\": {\"uniform\": [0, 1]}}}}", 0, NULL);
	assert_int_equal(sweep_items(&items, sweep), 0);
	assert_int_equal(sweep_items(&again, sweep), 0);
	assert_true(json_equal(items, again)); /* the same seed, the same draws */
	json_array_foreach(items, i, it) {
		double c = json_number_value(json_object_get(it, "C"));
		json_int_t d = json_integer_value(json_object_get(it, "d"));
		const char *k = json_string_value(json_object_get(it, "k"));
		assert_true(c >= 0.1 && c <= 100);
		assert_true(d >= 2 && d <= 4);
		assert_true(strcmp(k, "rbf") == 0 || strcmp(k, "linear") == 0);
	}
	json_decref(items);
	json_decref(again);
	json_decref(sweep);

	sweep = json_loads("{\"random\": {\"n\": 3, \"seed\": 1, \"params\": {\"C\": {\"log_uniform\": [0, 1]}}}}", 0, NULL);
	assert_int_equal(sweep_items(&items, sweep), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "sweep param C: log_uniform [0, 1] must have LOW <= HIGH and LOW above 0"));
	json_decref(sweep);
	sweep = json_loads("{\"grid\": {\"C\": []}}", 0, NULL);
	assert_int_equal(sweep_items(&items, sweep), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "sweep grid C: a non-empty list"));
	json_decref(sweep);
	sweep = json_loads("{\"grid\": {\"a\": [1,2,3,4,5,6,7,8,9,10], \"b\": [1,2,3,4,5,6,7,8,9,10], "
			   "\"c\": [1,2,3,4,5,6,7,8,9,10], \"d\": [1,2,3,4,5,6,7,8,9,10], \"e\": [1,2,3,4,5,6,7,8,9,10, 11]}}",
			   0, NULL);
	assert_int_equal(sweep_items(&items, sweep), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "more than 100000 combinations"));
	json_decref(sweep);
}

/* sweep_param_values of in, which it takes (the tests' values are made in the call) */
static int pv(json_t **out, json_t *in, const char *what)
{
	int rc = sweep_param_values(out, in, what);

	json_decref(in);
	return rc;
}

/* a grid dimension from a param: a JSON list or one value, numbers as numbers; anything else refused, saying what */
static void test_foreach__sweep_params(void **state)
{
	json_t *v = NULL, *sweep, *params, *out = NULL, *items = NULL;
	char *txt;

	(void)state;
	assert_int_equal(pv(&v, json_string(" [1, 10, \"rbf\"] "), "p"), 0);
	txt = json_dumps(v, JSON_COMPACT);
	assert_string_equal(txt, "[1,10,\"rbf\"]");
	free(txt);
	json_decref(v);
	assert_int_equal(pv(&v, json_string("0.05"), "p"), 0);
	assert_true(json_is_real(json_array_get(v, 0)) && json_real_value(json_array_get(v, 0)) == 0.05);
	json_decref(v);
	assert_int_equal(pv(&v, json_string("10"), "p"), 0);
	assert_int_equal(json_integer_value(json_array_get(v, 0)), 10);
	json_decref(v);
	assert_int_equal(pv(&v, json_string(" rbf "), "p"), 0);
	assert_string_equal(json_string_value(json_array_get(v, 0)), "rbf");
	json_decref(v);
	assert_int_equal(pv(&v, json_string("1e400"), "p"), 0); /* not finite: text */
	assert_true(json_is_string(json_array_get(v, 0)));
	json_decref(v);
	assert_int_equal(pv(&v, json_integer(3), "p"), 0);
	assert_int_equal(json_array_size(v), 1);
	json_decref(v);

	assert_int_equal(pv(&v, json_string("  "), "sweep grid C: params.C"), FERRY_EINVALID);
	assert_null(v);
	assert_string_equal(ferry_error_last(), "sweep grid C: params.C: empty; give one value (10) or a JSON list ([1, 10])");
	assert_int_equal(pv(&v, json_string("[]"), "p"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "p: the list is empty"));
	assert_int_equal(pv(&v, json_string("[1, 2"), "p"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "p: not a JSON list"));
	assert_int_equal(pv(&v, json_string("[1, null]"), "p"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "p: value 1 is null"));
	assert_int_equal(pv(&v, json_string("[[1]]"), "p"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "p: value 0 is a list"));
	assert_int_equal(pv(&v, json_pack("{}"), "p"), FERRY_EINVALID);

	/* resolved against a run's params: the grid's reference replaced, the literal list kept */
	sweep = json_loads("{\"grid\": {\"C\": \"{{params.C}}\", \"gamma\": [0.01, 0.05]}, \"stop_when\": {}}", 0, NULL);
	params = json_pack("{s:s}", "C", "[1, 10]");
	assert_int_equal(sweep_resolve(&out, sweep, params), 0);
	assert_int_equal(sweep_items(&items, out), 0);
	assert_int_equal(json_array_size(items), 4);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 3), "C")), 10);
	assert_non_null(json_object_get(out, "stop_when"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(sweep, "grid"), "C")), "{{params.C}}"); /* not changed */
	json_decref(items);
	json_decref(out);
	json_object_set_new(params, "C", json_string("7"));
	assert_int_equal(sweep_resolve(&out, sweep, params), 0);
	assert_int_equal(sweep_items(&items, out), 0);
	assert_int_equal(json_array_size(items), 2);
	json_decref(items);
	json_decref(out);
	json_object_del(params, "C");
	assert_int_equal(sweep_resolve(&out, sweep, params), FERRY_EINVALID);
	assert_null(out);
	assert_string_equal(ferry_error_last(), "sweep grid C: params.C has no value");
	json_decref(sweep);
	sweep = json_loads("{\"grid\": {\"C\": \"x {{params.C}}\"}}", 0, NULL);
	assert_int_equal(sweep_resolve(&out, sweep, params), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "sweep grid C: a list of values or \"{{params.NAME}}\", not \"x {{params.C}}\"");
	json_decref(sweep);
	json_decref(params);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_foreach__lists),
		cmocka_unit_test(test_foreach__min_success),
		cmocka_unit_test(test_foreach__sweeps),
		cmocka_unit_test(test_foreach__sweep_params),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
