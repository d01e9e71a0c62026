/* Unit tests of the console's embedded files (api_ui): the generated table, lookups, ETags and If-None-Match. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_ui.h"
#include "lib/util.h"

/* The table carries each file of ui/ byte for byte, with its content type. */
static void test_api_ui__table_matches_files(void **state)
{
	const char *files[][2] = {
		{"index.html", "text/html; charset=utf-8"},
		{"app.js", "text/javascript; charset=utf-8"},
		{"style.css", "text/css; charset=utf-8"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		const struct ui_asset *u = ui_asset_find(files[i][0]);
		char *path = xasprintf("ui/%s", files[i][0]), *buf = NULL;
		size_t len = 0;

		assert_non_null(u);
		assert_string_equal(u->content_type, files[i][1]);
		assert_int_equal(file_read(&buf, &len, path), 0);
		assert_int_equal(u->len, len);
		assert_memory_equal(u->data, buf, len);
		/* "\"" + 32 hex digits + "\"" */
		assert_int_equal(strlen(u->etag), 34);
		assert_int_equal(u->etag[0], '"');
		assert_int_equal(u->etag[33], '"');
		assert_int_equal(strspn(u->etag + 1, "0123456789abcdef"), 32);
		free(buf), free(path);
	}
	/* distinct files, distinct tags */
	assert_string_not_equal(ui_asset_find("app.js")->etag, ui_asset_find("style.css")->etag);
}

static void test_api_ui__find(void **state)
{
	(void)state;
	assert_ptr_equal(ui_asset_find(NULL), ui_asset_find("index.html"));
	assert_ptr_equal(ui_asset_find(""), ui_asset_find("index.html"));
	assert_null(ui_asset_find("nothing.js"));
	assert_null(ui_asset_find("../api/api.c"));
	assert_null(ui_asset_find("APP.JS"));
	assert_null(ui_asset_find("app.js "));
	assert_null(ui_asset_find("app"));
}

static void test_api_ui__if_none_match(void **state)
{
	const char *tag = "\"0123456789abcdef0123456789abcdef\"";

	(void)state;
	assert_false(ui_etag_matches(NULL, tag));
	assert_false(ui_etag_matches("", tag));
	assert_true(ui_etag_matches(tag, tag));
	assert_true(ui_etag_matches("*", tag));
	assert_true(ui_etag_matches(" W/\"0123456789abcdef0123456789abcdef\" ", tag));
	assert_true(ui_etag_matches("\"x\", \"0123456789abcdef0123456789abcdef\"", tag));
	assert_true(ui_etag_matches("\"x\",\"0123456789abcdef0123456789abcdef\",\"y\"", tag));
	assert_false(ui_etag_matches("\"0123456789abcdef0123456789abcdee\"", tag));
	assert_false(ui_etag_matches("\"0123456789abcdef0123456789abcdef", tag)); /* no closing quote */
	assert_false(ui_etag_matches("0123456789abcdef0123456789abcdef", tag));   /* unquoted */
	assert_false(ui_etag_matches("\"x\", *y", tag));
	assert_false(ui_etag_matches(",,, ,", tag));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api_ui__table_matches_files),
		cmocka_unit_test(test_api_ui__find),
		cmocka_unit_test(test_api_ui__if_none_match),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
