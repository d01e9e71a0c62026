/* Unit tests of the API module: every routed path and method is in the OpenAPI document. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <string.h>

#include "api.h"

/* Splits "GET, POST" in place: ends the word at m, returns the next one or NULL. */
static char *next_word(char *m)
{
	char *p = m + strcspn(m, ", ");
	if (*p == '\0')
		return NULL;
	*p++ = '\0';
	while (*p == ',' || *p == ' ')
		p++;
	return *p ? p : NULL;
}

static void test_api__every_route_in_openapi(void **state)
{
	json_error_t jerr;
	json_t *doc = json_loads(api_openapi_json, 0, &jerr), *paths;
	int n = 0;

	(void)state;
	assert_non_null(doc);
	paths = json_object_get(doc, "paths");
	assert_non_null(paths);
	for (const struct api_route *r = api_routes; r->pattern; r++, n++) {
		json_t *item = json_object_get(paths, r->pattern);
		char methods[32], *m, *next;

		if (item == NULL)
			fail_msg("route %s is not in openapi.json", r->pattern);
		snprintf(methods, sizeof(methods), "%s", r->methods);
		for (m = methods; m && *m; m = next) {
			char lower[8];
			size_t i;

			next = next_word(m);
			for (i = 0; m[i] && i < sizeof(lower) - 1; i++)
				lower[i] = (char)tolower((unsigned char)m[i]);
			lower[i] = '\0';
			if (json_object_get(item, lower) == NULL)
				fail_msg("%s %s is not in openapi.json", m, r->pattern);
		}
	}
	/* and nothing documented that is not routed */
	assert_int_equal(json_object_size(paths), n);
	json_decref(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api__every_route_in_openapi),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
