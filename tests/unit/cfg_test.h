/*
 * cfg_test — what the config unit tests (test_config.c,
 * test_config_params.c, test_template.c) share: parsing a workflow as
 * "w.yaml", and asserting it valid or rejected with exactly the errors
 * listed.
 */
#ifndef FERRY_CFG_TEST_H
#define FERRY_CFG_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "plan/config.h"

/* Parses yaml as "w.yaml"; returns the code, *out and errs as produced. */
static inline int parse(const char *yaml, json_t **out, cfg_errors *errs)
{
	char hash[65];

	memset(errs, 0, sizeof(*errs));
	return cfg_workflow_parse(out, hash, yaml, strlen(yaml), "w.yaml", errs);
}

/* Asserts that yaml is rejected with exactly the errors listed (NULL-ended). */
static inline void expect_errors(const char *yaml, ...)
{
	const char *want[32];
	json_t *spec = NULL;
	cfg_errors errs;
	size_t n = 0, i;
	bool same;
	va_list ap;
	int rc = parse(yaml, &spec, &errs);

	va_start(ap, yaml);
	while (n < 32 && (want[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	same = n == errs.len;
	for (i = 0; same && i < n; i++)
		same = strcmp(want[i], errs.items[i]) == 0;
	for (i = 0; !same && i < errs.len; i++) /* show what came back on failure */
		print_message("  got: %s\n", errs.items[i]);
	assert_int_equal(rc, FERRY_EINVALID);
	assert_null(spec);
	for (i = 0; i < n && i < errs.len; i++)
		assert_string_equal(errs.items[i], want[i]);
	assert_int_equal(errs.len, n);
	cfg_errors_dispose(&errs);
}

/* Parses yaml that must be valid and returns its spec. */
static inline json_t *parse_ok(const char *yaml)
{
	json_t *spec = NULL;
	cfg_errors errs;
	int rc = parse(yaml, &spec, &errs);

	for (size_t k = 0; k < errs.len; k++)
		print_message("  unexpected: %s\n", errs.items[k]);
	assert_int_equal(rc, 0);
	assert_int_equal(errs.len, 0);
	assert_non_null(spec);
	cfg_errors_dispose(&errs);
	return spec;
}

/* Step i of a parsed spec, and a key of an object as an integer or a string (asserted). */
static inline json_t *step_at(json_t *spec, size_t i)
{
	json_t *st = json_array_get(json_object_get(spec, "steps"), i);

	assert_non_null(st);
	return st;
}

static inline json_int_t int_at(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	assert_true(json_is_integer(v));
	return json_integer_value(v);
}

static inline const char *str_at(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	assert_true(json_is_string(v));
	return json_string_value(v);
}

#endif
