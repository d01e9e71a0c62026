/*
 * Unit tests for orchestrator/gate: metrics.json validation, gate comparisons
 * parsed into their normalised items, and gate evaluation against fixed
 * thresholds and the production version (with and without one).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "plan/gate.h"

/* Compact JSON with reals at 15 digits, so that 0.93 reads 0.93 (the caller frees). */
static char *dump(const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(15));

	assert_non_null(s);
	return s;
}

/* Asserts that metrics_parse rejects text with exactly message want. */
static void expect_bad_metrics(const char *text, const char *want)
{
	json_t *out = (json_t *)&out;

	assert_int_equal(metrics_parse(&out, text, strlen(text)), FERRY_EINVALID);
	assert_null(out);
	assert_string_equal(ferry_error_last(), want);
}

static void test_metrics__parse_valid(void **state)
{
	const char *text = "{\"accuracy\": 0.93, \"f1\": 1, \"rmse\": 0, \"loss\": -2.5e-3,\n"
			   " \"epochs\": 12}";
	json_t *out = NULL;
	char *s;

	(void)state;
	assert_int_equal(metrics_parse(&out, text, strlen(text)), 0);
	s = dump(out);
	assert_string_equal(s, "{\"accuracy\":0.93,\"f1\":1.0,\"rmse\":0.0,\"loss\":-0.0025,"
			       "\"epochs\":12.0}");
	assert_true(json_is_real(json_object_get(out, "epochs")));
	free(s);
	json_decref(out);
	/* not NUL-terminated: only len bytes count */
	assert_int_equal(metrics_parse(&out, "{\"mae\": 3}garbage", 10), 0);
	assert_true(json_real_value(json_object_get(out, "mae")) == 3.0);
	json_decref(out);
	assert_int_equal(metrics_parse(&out, " {}\n", 4), 0);
	assert_int_equal(json_object_size(out), 0);
	json_decref(out);
}

static void test_metrics__parse_invalid(void **state)
{
	json_t *out = NULL;
	char *big;

	(void)state;
	expect_bad_metrics("{\"accuracy\": 1.7}",
			   "metrics.json: \"accuracy\" is 1.7; accuracy is between 0 and 1");
	expect_bad_metrics("{\"recall\": -0.1}",
			   "metrics.json: \"recall\" is -0.1; recall is between 0 and 1");
	expect_bad_metrics("{\"f1\": 0.5, \"mse\": -4}",
			   "metrics.json: \"mse\" is -4; mse is 0 or more");
	expect_bad_metrics("{\"accuracy\": \"0.9\"}",
			   "metrics.json: \"accuracy\" is a string; metrics must be numbers");
	expect_bad_metrics("{\"loss\": null}",
			   "metrics.json: \"loss\" is null; metrics must be numbers");
	expect_bad_metrics("{\"a\": [1]}", "metrics.json: \"a\" is a list; metrics must be numbers");
	expect_bad_metrics("{\"ok\": true}",
			   "metrics.json: \"ok\" is a boolean; metrics must be numbers");
	expect_bad_metrics("{\"accuracy\": NaN}",
			   "metrics.json: invalid JSON at line 1, column 16: invalid token near 'NaN'");
	expect_bad_metrics("{\"accuracy\": 0.9,\n \"f1\": }",
			   "metrics.json: invalid JSON at line 2, column 8: unexpected token near '}'");
	expect_bad_metrics("{\"a\": 1e999}",
			   "metrics.json: invalid JSON at line 1, column 11: real number overflow "
			   "near '1e999'");
	expect_bad_metrics("{\"a\": 1, \"a\": 2}",
			   "metrics.json: invalid JSON at line 1, column 12: duplicate object key "
			   "near '\"a\"'");
	expect_bad_metrics("[0.9]", "metrics.json: expected a JSON object of numbers, e.g. "
			   "{\"accuracy\": 0.93}, not a list");
	expect_bad_metrics("0.9", "metrics.json: expected a JSON object of numbers, e.g. "
			   "{\"accuracy\": 0.93}, not a number");
	expect_bad_metrics("", "metrics.json: the file is empty; write a JSON object of numbers, "
			   "e.g. {\"accuracy\": 0.93}");
	expect_bad_metrics(" \n\t", "metrics.json: the file is empty; write a JSON object of "
			   "numbers, e.g. {\"accuracy\": 0.93}");
	/* a hostile key is quoted, escaped and clipped */
	expect_bad_metrics("{\"a\\\"b\\n\": \"x\"}",
			   "metrics.json: \"a\\\"b\\x0a\" is a string; metrics must be numbers");
	assert_int_equal(metrics_parse(&out, NULL, 5), FERRY_EINVALID);
	big = malloc(METRICS_MAX_BYTES + 2);
	memset(big, ' ', METRICS_MAX_BYTES + 1);
	big[0] = '{';
	assert_int_equal(metrics_parse(&out, big, METRICS_MAX_BYTES + 1), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "metrics.json: the file is 1048577 bytes; metrics "
			    "are limited to 1048576 bytes");
	free(big);
}

/* Parses metric: expr and returns the item as compact JSON (the caller frees). */
static char *gate_item(const char *metric, const char *expr)
{
	json_t *out = NULL;
	char *s;

	assert_int_equal(gate_parse(&out, metric, expr), 0);
	s = dump(out);
	json_decref(out);
	return s;
}

static void expect_gate_item(const char *metric, const char *expr, const char *want)
{
	char *s = gate_item(metric, expr);

	assert_string_equal(s, want);
	free(s);
}

static void expect_bad_gate(const char *metric, const char *expr, const char *want)
{
	json_t *out = (json_t *)&out;

	assert_int_equal(gate_parse(&out, metric, expr), FERRY_EINVALID);
	assert_null(out);
	assert_string_equal(ferry_error_last(), want);
}

static void test_metrics__gate_parse(void **state)
{
	(void)state;
	expect_gate_item("accuracy", ">= 0.9", "{\"metric\":\"accuracy\",\"op\":\">=\",\"value\":0.9}");
	expect_gate_item("rmse", "<3.5", "{\"metric\":\"rmse\",\"op\":\"<\",\"value\":3.5}");
	expect_gate_item("loss", "  !=  -1e-2 ", "{\"metric\":\"loss\",\"op\":\"!=\",\"value\":-0.01}");
	expect_gate_item("f1", "> .5", "{\"metric\":\"f1\",\"op\":\">\",\"value\":0.5}");
	expect_gate_item("recall", "==1", "{\"metric\":\"recall\",\"op\":\"==\",\"value\":1.0}");
	expect_gate_item("precision", "<= 1.", "{\"metric\":\"precision\",\"op\":\"<=\",\"value\":1.0}");
	expect_gate_item("f1", ">= production",
			 "{\"metric\":\"f1\",\"op\":\">=\",\"production\":true,\"offset\":0.0}");
	expect_gate_item("accuracy", ">=production+0.01",
			 "{\"metric\":\"accuracy\",\"op\":\">=\",\"production\":true,\"offset\":0.01}");
	expect_gate_item("mae", "\t<= production - 0.5\n",
			 "{\"metric\":\"mae\",\"op\":\"<=\",\"production\":true,\"offset\":-0.5}");
	expect_gate_item("val/loss", "< 7", "{\"metric\":\"val/loss\",\"op\":\"<\",\"value\":7.0}");
}

static void test_metrics__gate_parse_invalid(void **state)
{
	(void)state;
	expect_bad_gate("accuracy", "0.9",
			"gate accuracy \"0.9\": no comparison; write OP VALUE with OP one of "
			">=, >, <=, <, ==, != (e.g. \">= 0.9\" or \">= production\")");
	expect_bad_gate("accuracy", "=> 0.9",
			"gate accuracy \"=> 0.9\": no comparison; write OP VALUE with OP one of "
			">=, >, <=, <, ==, != (e.g. \">= 0.9\" or \">= production\")");
	expect_bad_gate("accuracy", ">= high",
			"gate accuracy \">= high\": expected a number, production, or "
			"production + N / production - N after \">=\"");
	expect_bad_gate("accuracy", ">=", "gate accuracy \">=\": expected a number, production, or "
			"production + N / production - N after \">=\"");
	expect_bad_gate("f1", ">= production +", "gate f1 \">= production +\": expected a number, "
			"production, or production + N / production - N after \">=\"");
	expect_bad_gate("f1", ">= production * 2", "gate f1 \">= production * 2\": expected a "
			"number, production, or production + N / production - N after \">=\"");
	expect_bad_gate("f1", ">= productions", "gate f1 \">= productions\": expected a number, "
			"production, or production + N / production - N after \">=\"");
	expect_bad_gate("f1", ">= production + -1", "gate f1 \">= production + -1\": expected a "
			"number, production, or production + N / production - N after \">=\"");
	expect_bad_gate("loss", "< nan", "gate loss \"< nan\": expected a number, production, or "
			"production + N / production - N after \"<\"");
	expect_bad_gate("loss", "< 0x10", "gate loss \"< 0x10\": expected a number, production, or "
			"production + N / production - N after \"<\"");
	expect_bad_gate("loss", "< 1e999", "gate loss \"< 1e999\": the number is too large");
	expect_bad_gate("accuracy", ">= 1.5",
			"gate accuracy \">= 1.5\": 1.5 is out of range; accuracy is between 0 and 1");
	expect_bad_gate("rmse", "< -3", "gate rmse \"< -3\": -3 is out of range; rmse is 0 or more");
	expect_bad_gate("f1", ">= production + 2", "gate f1 \">= production + 2\": the offset 2 is "
			"larger than the whole range; f1 is between 0 and 1");
	expect_bad_gate("", ">= 1", "gate metric name \"\" is not valid; use 1-64 letters, digits, "
			"_ . - / or :");
	expect_bad_gate("a b", ">= 1", "gate metric name \"a b\" is not valid; use 1-64 letters, "
			"digits, _ . - / or :");
	expect_bad_gate(NULL, ">= 1", "gate metric name \"\" is not valid; use 1-64 letters, digits, "
			"_ . - / or :");
}

/* Builds a gate from "metric", "expr" pairs (NULL-ended). */
static json_t *make_gate(const char *metric, ...)
{
	json_t *gate = json_array(), *item;
	const char *m = metric;
	va_list ap;

	va_start(ap, metric);
	while (m != NULL) {
		const char *expr = va_arg(ap, const char *);
		assert_int_equal(gate_parse(&item, m, expr), 0);
		json_array_append_new(gate, item);
		m = va_arg(ap, const char *);
	}
	va_end(ap);
	return gate;
}

static void test_metrics__gate_eval_pass_and_fail(void **state)
{
	json_t *gate = make_gate("accuracy", ">= 0.9", "rmse", "< 3.5", NULL);
	json_t *metrics = json_pack("{s:f,s:f}", "accuracy", 0.93, "rmse", 1.25), *res = NULL;
	char *reason = (char *)"x", *s;

	(void)state;
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, NULL, NULL), 1);
	assert_null(reason);
	s = dump(res);
	assert_string_equal(s, "[{\"metric\":\"accuracy\",\"op\":\">=\",\"threshold\":0.9,"
			       "\"value\":0.93,\"passed\":true},"
			       "{\"metric\":\"rmse\",\"op\":\"<\",\"threshold\":3.5,\"value\":1.25,"
			       "\"passed\":true}]");
	free(s);
	json_decref(res);

	json_object_set_new(metrics, "accuracy", json_real(0.82));
	json_object_set_new(metrics, "rmse", json_real(3.5));
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, NULL, NULL), 0);
	assert_string_equal(reason, "gate failed: accuracy 0.82 < 0.9; rmse 3.5 >= 3.5");
	assert_true(json_is_false(json_object_get(json_array_get(res, 0), "passed")));
	assert_true(json_is_false(json_object_get(json_array_get(res, 1), "passed")));
	free(reason);
	json_decref(res);

	/* an empty gate passes */
	json_array_clear(gate);
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, NULL, NULL), 1);
	assert_int_equal(json_array_size(res), 0);
	json_decref(res);
	json_decref(gate);
	json_decref(metrics);
}

static void test_metrics__gate_eval_missing_metric(void **state)
{
	json_t *gate = make_gate("accuracy", ">= 0.9", "f1", ">= production", NULL);
	json_t *metrics = json_pack("{s:f}", "loss", 0.1), *res = NULL;
	char *reason = NULL, *s;

	(void)state;
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, NULL, "digits 0.0.2"), 0);
	assert_string_equal(reason, "gate failed: accuracy missing from metrics.json; "
			    "f1 missing from metrics.json");
	s = dump(json_array_get(res, 0));
	assert_string_equal(s, "{\"metric\":\"accuracy\",\"op\":\">=\",\"threshold\":null,"
			       "\"value\":null,\"passed\":false,"
			       "\"note\":\"accuracy missing from metrics.json\"}");
	free(s);
	free(reason);
	json_decref(res);
	/* no metrics.json at all */
	assert_int_equal(gate_eval(&res, &reason, gate, NULL, NULL, NULL), 0);
	assert_string_equal(reason, "gate failed: accuracy missing from metrics.json; "
			    "f1 missing from metrics.json");
	free(reason);
	json_decref(res);
	json_decref(gate);
	json_decref(metrics);
}

static void test_metrics__gate_eval_production(void **state)
{
	json_t *gate = make_gate("f1", ">= production", "accuracy", ">= production + 0.01",
				 "mae", "<= production - 0.5", NULL);
	json_t *metrics = json_pack("{s:f,s:f,s:f}", "f1", 0.91, "accuracy", 0.94, "mae", 2.0);
	json_t *prod = json_pack("{s:f,s:f,s:f}", "f1", 0.93, "accuracy", 0.93, "mae", 2.25);
	json_t *res = NULL;
	char *reason = NULL, *s;

	(void)state;
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, prod, "digits 0.0.2"), 0);
	/* 0.93 + 0.01 is 0.94 exactly as written, so accuracy 0.94 passes */
	assert_true(json_real_value(json_object_get(json_array_get(res, 1), "threshold")) == 0.94);
	assert_string_equal(reason, "gate failed: f1 0.91 < production 0.93 (digits 0.0.2); "
			    "mae 2 > production 2.25 - 0.5 = 1.75 (digits 0.0.2)");
	s = dump(res);
	assert_string_equal(s,
		"[{\"metric\":\"f1\",\"op\":\">=\",\"threshold\":0.93,\"value\":0.91,\"passed\":false,"
		"\"against\":\"production digits 0.0.2\",\"production\":0.93,\"offset\":0.0},"
		"{\"metric\":\"accuracy\",\"op\":\">=\",\"threshold\":0.94,\"value\":0.94,"
		"\"passed\":true,\"against\":\"production digits 0.0.2\",\"production\":0.93,"
		"\"offset\":0.01},"
		"{\"metric\":\"mae\",\"op\":\"<=\",\"threshold\":1.75,\"value\":2.0,\"passed\":false,"
		"\"against\":\"production digits 0.0.2\",\"production\":2.25,\"offset\":-0.5}]");
	free(s);
	free(reason);
	json_decref(res);

	/* offset that makes it fail, and no label */
	json_object_set_new(metrics, "f1", json_real(0.95));
	json_object_set_new(metrics, "accuracy", json_real(0.935));
	json_object_set_new(metrics, "mae", json_real(1.5));
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, prod, NULL), 0);
	assert_string_equal(reason, "gate failed: accuracy 0.935 < production 0.93 + 0.01 = 0.94");
	free(reason);
	json_decref(res);
	json_decref(gate);
	json_decref(metrics);
	json_decref(prod);
}

static void test_metrics__gate_eval_no_production(void **state)
{
	json_t *gate = make_gate("f1", ">= production + 0.01", "accuracy", ">= 0.5", NULL);
	json_t *metrics = json_pack("{s:f,s:f}", "f1", 0.2, "accuracy", 0.6);
	json_t *prod = json_pack("{s:f}", "accuracy", 0.9), *res = NULL;
	char *reason = NULL, *s;

	(void)state;
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, NULL, NULL), 1);
	assert_null(reason);
	s = dump(json_array_get(res, 0));
	assert_string_equal(s, "{\"metric\":\"f1\",\"op\":\">=\",\"threshold\":null,\"value\":0.2,"
			       "\"passed\":true,\"against\":\"production\",\"production\":null,"
			       "\"offset\":0.01,\"note\":\"no production version yet\"}");
	free(s);
	json_decref(res);
	/* the production version lacks f1: passes with a note */
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, prod, "digits 0.0.1"), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(res, 0), "note")),
			    "f1 missing from the metrics of production digits 0.0.1; not compared");
	json_decref(res);
	json_decref(gate);
	json_decref(metrics);
	json_decref(prod);
}

static void test_metrics__gate_eval_malformed(void **state)
{
	json_t *metrics = json_object(), *res = (json_t *)&res;
	json_t *gate = json_pack("[{s:s,s:s,s:f}]", "metric", "a", "op", "=>", "value", 1.0);
	char *reason = NULL;

	(void)state;
	assert_int_equal(gate_eval(&res, &reason, gate, metrics, NULL, NULL), FERRY_EINVALID);
	assert_null(res);
	assert_null(reason);
	assert_string_equal(ferry_error_last(), "gate item 1 is malformed (want metric, op and "
			    "value, or production and offset)");
	assert_int_equal(gate_eval(&res, &reason, metrics, metrics, NULL, NULL), FERRY_EINVALID);
	assert_int_equal(gate_eval(&res, &reason, gate, gate, NULL, NULL), FERRY_EINVALID);
	json_decref(gate);
	json_decref(metrics);
}

/* gate_expr_parse with the load-test gate's extensions: factors and percentages. */
static void test_metrics__gate_expr_extensions(void **state)
{
	const unsigned all = GATE_EXPR_FACTOR | GATE_EXPR_PERCENT;
	struct gate_expr e;

	(void)state;
	assert_int_equal(gate_expr_parse(&e, "load_test p99_ms", "<= production * 1.2", all), 0);
	assert_string_equal(e.op, "<=");
	assert_string_equal(e.negated, ">");
	assert_true(e.production);
	assert_true(e.factor == 1.2 && e.offset == 0 && !e.percent);
	assert_int_equal(gate_expr_parse(&e, "x", " <0.1% ", all), 0);
	assert_true(e.value == 0.001 && e.percent && !e.production && e.factor == 1);
	assert_int_equal(gate_expr_parse(&e, "x", ">= production - 0.5%", all), 0);
	assert_true(e.offset == -0.005 && e.percent);
	assert_int_equal(gate_expr_parse(&e, "x", "< 50", all), 0);
	assert_true(e.value == 50 && !e.percent);
	assert_true(gate_threshold(40, 0, 1.2) == 48);
	assert_true(gate_threshold(0.93, 0.01, 1) == 0.94);
	assert_true(gate_compare(48, "<=", 48) && !gate_compare(48.5, "<=", 48));
	{
		char b[GATE_NUMBUF];
		/* round numbers read as written, not as %.1g's exponent form */
		assert_string_equal(gate_num(b, 50), "50");
		assert_string_equal(gate_num(b, 1200), "1200");
		assert_string_equal(gate_num(b, 0.001), "0.001");
		assert_string_equal(gate_num(b, 73.2), "73.2");
		assert_string_equal(gate_num(b, 1e20), "1e+20");
		assert_string_equal(gate_num(b, 2e-6), "2e-06");
	}

	/* without the flags, the metric gates' grammar: no factor, no % */
	assert_int_equal(gate_expr_parse(&e, "gate f1", ">= production * 2", 0), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "gate f1 \">= production * 2\": expected a number, "
			    "production, or production + N / production - N after \">=\"");
	assert_int_equal(gate_expr_parse(&e, "gate f1", ">= 90%", GATE_EXPR_FACTOR), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "gate f1 \">= 90%\": expected a number, production, "
			    "or production + N / production - N / production * F after \">=\"");
	expect_bad_gate("accuracy", ">= 90%", "gate accuracy \">= 90%\": expected a number, "
			"production, or production + N / production - N after \">=\"");

	assert_int_equal(gate_expr_parse(&e, "load_test p99_ms", "<= production * 0", all),
			 FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "load_test p99_ms \"<= production * 0\": the factor "
			    "0 must be more than 0");
	assert_int_equal(gate_expr_parse(&e, "load_test p99_ms", "<= production * -1", all),
			 FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "load_test p99_ms \"<= production * -1\": expected "
			    "a number (N or N%), production, or production + N / production - N / "
			    "production * F after \"<=\"");
	assert_int_equal(gate_expr_parse(&e, "x", "< 1%%", all), FERRY_EINVALID);
	assert_int_equal(gate_expr_parse(&e, "x", "<= production * 2%", all), FERRY_EINVALID);
	assert_int_equal(gate_expr_parse(&e, "x", "< %", all), FERRY_EINVALID);
	assert_int_equal(gate_expr_parse(&e, "x", NULL, all), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "x \"\": no comparison; write OP VALUE with OP one "
			    "of >=, >, <=, <, ==, != (e.g. \">= 0.9\" or \">= production\")");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics__parse_valid),
		cmocka_unit_test(test_metrics__parse_invalid),
		cmocka_unit_test(test_metrics__gate_parse),
		cmocka_unit_test(test_metrics__gate_parse_invalid),
		cmocka_unit_test(test_metrics__gate_eval_pass_and_fail),
		cmocka_unit_test(test_metrics__gate_eval_missing_metric),
		cmocka_unit_test(test_metrics__gate_eval_production),
		cmocka_unit_test(test_metrics__gate_eval_no_production),
		cmocka_unit_test(test_metrics__gate_eval_malformed),
		cmocka_unit_test(test_metrics__gate_expr_extensions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
