/*
 * Unit tests for config's parameters (config_params.c): declarations and
 * defaults, and the values a run is submitted with (resolved, converted,
 * refused). Templates rendered into commands: test_template.c.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cfg_test.h"

static json_t *params_spec(void)
{
	return parse_ok("name: x\n"
			"params:\n"
			"  who: world\n"
			"  lr: {default: 0.01}\n"
			"  n: {description: required}\n"
			"steps: [{name: a, command: a}]\n");
}

static void test_config__params_resolve_defaults(void **state)
{
	json_t *spec = params_spec(), *given = json_pack("{s:i}", "n", 7), *out = NULL;
	char *dump;

	(void)state;
	assert_int_equal(cfg_params_resolve(&out, spec, given), 0);
	dump = json_dumps(out, JSON_COMPACT);
	assert_string_equal(dump, "{\"who\":\"world\",\"lr\":\"0.01\",\"n\":\"7\"}");
	free(dump);
	json_decref(out);
	json_decref(given);
	json_decref(spec);
}

static void test_config__params_resolve_unknown_and_missing(void **state)
{
	json_t *spec = params_spec(), *given, *out = NULL;

	(void)state;
	given = json_pack("{s:i,s:s}", "n", 1, "x", "y");
	assert_int_equal(cfg_params_resolve(&out, spec, given), FERRY_EINVALID);
	assert_null(out);
	assert_string_equal(ferry_error_last(), "unknown parameter \"x\"; declared: who, lr, n");
	json_decref(given);

	assert_int_equal(cfg_params_resolve(&out, spec, NULL), FERRY_EINVALID);
	assert_null(out);
	assert_string_equal(ferry_error_last(), "parameter \"n\" has no default and was not given "
						"a value");

	given = json_pack("{s:[]}", "n");
	assert_int_equal(cfg_params_resolve(&out, spec, given), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "parameter \"n\" must be a string, number or boolean");
	json_decref(given);
	json_decref(spec);
}

static void test_config__params_resolve_conversion(void **state)
{
	json_t *spec = params_spec(), *given, *out = NULL;
	char *dump;

	(void)state;
	given = json_pack("{s:f,s:b,s:f}", "n", 1.0, "who", 1, "lr", 0.5);
	assert_int_equal(cfg_params_resolve(&out, spec, given), 0);
	dump = json_dumps(out, JSON_COMPACT);
	assert_string_equal(dump, "{\"who\":\"true\",\"lr\":\"0.5\",\"n\":\"1.0\"}");
	free(dump);
	json_decref(out);
	json_decref(given);

	given = json_pack("{s:f,s:I,s:f}", "n", 0.1, "who", (json_int_t)-12345678901LL, "lr", 1e-7);
	assert_int_equal(cfg_params_resolve(&out, spec, given), 0);
	assert_string_equal(json_string_value(json_object_get(out, "n")), "0.1");
	assert_string_equal(json_string_value(json_object_get(out, "who")), "-12345678901");
	assert_string_equal(json_string_value(json_object_get(out, "lr")), "1e-07");
	json_decref(out);
	json_decref(given);
	json_decref(spec);
}

static void test_config__param_declarations(void **state)
{
	json_t *spec, *p;
	char *dump;

	(void)state;
	spec = parse_ok("name: x\n"
			"params:\n"
			"  epochs: {type: integer, default: 3, min: 1, max: 100}\n"
			"  lr: {type: number, default: 0.01, min: 0}\n"
			"  mode: {type: enum, values: [fast, slow], default: fast}\n"
			"  size: {values: [s, m]}\n"
			"  tag: {pattern: '[a-z][a-z0-9-]*', default: v1}\n"
			"  dry: {type: boolean, default: false}\n"
			"steps: [{name: a, command: a}]\n");
	p = json_object_get(spec, "params");
	dump = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(dump,
			    "{\"dry\":{\"default\":\"false\",\"type\":\"boolean\"},"
			    "\"epochs\":{\"default\":\"3\",\"max\":100,\"min\":1,\"type\":\"integer\"},"
			    "\"lr\":{\"default\":\"0.01\",\"min\":0,\"type\":\"number\"},"
			    "\"mode\":{\"default\":\"fast\",\"type\":\"enum\",\"values\":[\"fast\",\"slow\"]},"
			    "\"size\":{\"type\":\"enum\",\"values\":[\"s\",\"m\"]},"
			    "\"tag\":{\"default\":\"v1\",\"pattern\":\"[a-z][a-z0-9-]*\"}}");
	free(dump);
	json_decref(spec);

	expect_errors("name: x\n"
		      "params:\n"
		      "  a: {type: float}\n"
		      "  b: {type: enum}\n"
		      "  c: {type: integer, values: [1, 2]}\n"
		      "  d: {pattern: '(', default: x}\n"
		      "  e: {type: integer, pattern: '[0-9]+'}\n"
		      "  f: {min: 1}\n"
		      "  g: {type: number, min: one}\n"
		      "  h: {type: integer, min: 5, max: 1}\n"
		      "steps: [{name: s, command: s}]\n",
		      "w.yaml:3:13: parameter \"a\" has unknown type \"float\"; use string, integer, "
		      "number, boolean or enum",
		      "w.yaml:4:13: parameter \"b\" is an enum without values; list them: values: [a, b]",
		      "w.yaml:5:30: values of parameter \"c\" need type: enum, not type: integer",
		      "w.yaml:6:16: pattern of parameter \"d\" is not a valid POSIX extended regular "
		      "expression: Unmatched ( or \\(",
		      "w.yaml:7:31: pattern of parameter \"e\" is only for type: string, not type: integer",
		      "w.yaml:8:12: min of parameter \"f\" is only for type: integer or number; add one",
		      "w.yaml:9:26: min of parameter \"g\" must be a number, not \"one\"",
		      "w.yaml:10:35: parameter \"h\" has max below min; swap them",
		      NULL);
}

static void test_config__param_defaults_satisfy_declaration(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "params:\n"
		      "  n: {type: integer, default: ten}\n"
		      "  m: {type: integer, default: 0, min: 1}\n"
		      "  e: {values: [a, b], default: c}\n"
		      "  t: {pattern: '[a-z]+', default: 'a b'}\n"
		      "  b: {type: boolean, default: yes}\n"
		      "steps: [{name: s, command: s}]\n",
		      "w.yaml:3:31: default of parameter \"n\" must be an integer, not \"ten\"; "
		      "change the default or the declaration",
		      "w.yaml:4:31: default of parameter \"m\" must be at least 1 (min), not 0; "
		      "change the default or the declaration",
		      "w.yaml:5:32: default of parameter \"e\" must be one of a, b, not \"c\"; "
		      "change the default or the declaration",
		      "w.yaml:6:35: default of parameter \"t\" must match the pattern [a-z]+ (the "
		      "whole value), not \"a b\"; change the default or the declaration",
		      "w.yaml:7:31: default of parameter \"b\" must be true or false, not \"yes\"; "
		      "change the default or the declaration",
		      NULL);
}

static void test_config__params_resolve_typed(void **state)
{
	json_t *spec, *given, *out = NULL;

	(void)state;
	spec = parse_ok("name: x\n"
			"params:\n"
			"  epochs: {type: integer, default: 3, min: 1, max: 100}\n"
			"  lr: {type: number, default: 0.5, max: 1}\n"
			"  mode: {values: [fast, slow], default: fast}\n"
			"  tag: {pattern: '[a-z]+', default: v}\n"
			"steps: [{name: a, command: a}]\n");
	given = json_pack("{s:i,s:s,s:s,s:s}", "epochs", 100, "lr", "1e-3", "mode", "slow", "tag", "abc");
	assert_int_equal(cfg_params_resolve(&out, spec, given), 0);
	json_decref(out);
	json_decref(given);

	given = json_pack("{s:s}", "epochs", "3.5");
	assert_int_equal(cfg_params_resolve(&out, spec, given), FERRY_EINVALID);
	assert_null(out);
	assert_string_equal(ferry_error_last(), "parameter \"epochs\" must be an integer, not \"3.5\"");
	json_decref(given);
	given = json_pack("{s:i}", "epochs", 101);
	assert_int_equal(cfg_params_resolve(&out, spec, given), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "parameter \"epochs\" must be at most 100 (max), not 101");
	json_decref(given);
	given = json_pack("{s:f}", "lr", 1.5);
	assert_int_equal(cfg_params_resolve(&out, spec, given), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "parameter \"lr\" must be at most 1 (max), not 1.5");
	json_decref(given);
	given = json_pack("{s:s}", "mode", "medium");
	assert_int_equal(cfg_params_resolve(&out, spec, given), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(),
			    "parameter \"mode\" must be one of fast, slow, not \"medium\"");
	json_decref(given);
	given = json_pack("{s:s}", "tag", "abc; rm -rf /");
	assert_int_equal(cfg_params_resolve(&out, spec, given), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "parameter \"tag\" must match the pattern [a-z]+ "
						"(the whole value), not \"abc; rm -rf /\"");
	json_decref(given);
	json_decref(spec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config__params_resolve_defaults),
		cmocka_unit_test(test_config__params_resolve_unknown_and_missing),
		cmocka_unit_test(test_config__params_resolve_conversion),
		cmocka_unit_test(test_config__param_declarations),
		cmocka_unit_test(test_config__param_defaults_satisfy_declaration),
		cmocka_unit_test(test_config__params_resolve_typed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
