/*
 * Unit tests of what a queue request may set (store_queues.h): names as
 * the table's CHECK allows them, each field's range, null clearing a
 * quota, the first bad field named whatever the body's order, and a
 * change that changes nothing refused. (The SQL itself runs against
 * PostgreSQL: tests/integration/t_queues_api.sh.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "store/store_queues.h"
#include "lib/util.h"

/*
 * store_queue_fields of the JSON text body: FERRY_OK or the error, *field
 * the field it names (copied: it may be a key of the body, freed here).
 */
static int fields_of(const char *body, int creating, const char **field, json_t **out)
{
	static char name[64];
	json_t *b = json_loads(body, 0, NULL);
	int error;

	assert_non_null(b);
	error = store_queue_fields(out, field, b, creating);
	if (*field) {
		snprintf(name, sizeof(name), "%s", *field);
		*field = name;
	}
	json_decref(b);
	return error;
}

/* The field a bad body is refused for ("" when it names none). */
static const char *refused_for(const char *body, int creating)
{
	const char *field = NULL;
	json_t *out = NULL;

	assert_int_equal(fields_of(body, creating, &field, &out), FERRY_EINVALID);
	assert_null(out);
	assert_true(strlen(ferry_error_last()) > 0);
	return field ? field : "";
}

static void test_queues__names(void **state)
{
	char longest[64], too_long[65];

	(void)state;
	memset(longest, 'a', 63);
	longest[63] = '\0';
	memset(too_long, 'a', 64);
	too_long[64] = '\0';
	assert_true(store_queue_name_ok("default"));
	assert_true(store_queue_name_ok("gpu-a100.night_1"));
	assert_true(store_queue_name_ok("0day"));
	assert_true(store_queue_name_ok(longest));
	assert_false(store_queue_name_ok(too_long));
	assert_false(store_queue_name_ok(""));
	assert_false(store_queue_name_ok(NULL));
	assert_false(store_queue_name_ok("Night"));
	assert_false(store_queue_name_ok("-night"));
	assert_false(store_queue_name_ok("_night"));
	assert_false(store_queue_name_ok("night queue"));
	assert_false(store_queue_name_ok("night/1"));
	assert_false(store_queue_name_ok("nuit\xc3\xa9"));
}

static void test_queues__create_takes_what_is_given(void **state)
{
	const char *field = "x";
	json_t *out = NULL;

	(void)state;
	assert_int_equal(fields_of("{\"name\": \"nightly\", \"priority\": -1000, \"max_running\": 1, \"max_gpus\": 0, "
				   "\"max_cpus\": 0.5, \"description\": \"night\"}", 1, &field, &out), FERRY_OK);
	assert_null(field);
	assert_string_equal(json_string_value(json_object_get(out, "name")), "nightly");
	assert_int_equal(json_integer_value(json_object_get(out, "priority")), -1000);
	assert_int_equal(json_integer_value(json_object_get(out, "max_gpus")), 0);
	assert_true(json_number_value(json_object_get(out, "max_cpus")) == 0.5);
	json_decref(out);
	/* only the name: the rest is the table's defaults */
	assert_int_equal(fields_of("{\"name\": \"n\"}", 1, &field, &out), FERRY_OK);
	assert_int_equal(json_object_size(out), 1);
	json_decref(out);
	/* null: no quota, no description */
	assert_int_equal(fields_of("{\"name\": \"n\", \"max_running\": null, \"max_gpus\": null, \"max_cpus\": null, "
				   "\"description\": null}", 1, &field, &out), FERRY_OK);
	assert_true(json_is_null(json_object_get(out, "max_gpus")));
	json_decref(out);
	assert_int_equal(fields_of("{\"name\": \"n\", \"max_cpus\": 8, \"priority\": 1000}", 1, &field, &out), FERRY_OK);
	json_decref(out);
}

static void test_queues__each_bad_value_named(void **state)
{
	(void)state;
	assert_string_equal(refused_for("{}", 1), "name");
	assert_string_equal(refused_for("{\"priority\": 1}", 1), "name");
	assert_string_equal(refused_for("{\"name\": \"Bad\"}", 1), "name");
	assert_string_equal(refused_for("{\"name\": 5}", 1), "name");
	assert_string_equal(refused_for("{\"name\": \"n\", \"priority\": 1001}", 1), "priority");
	assert_string_equal(refused_for("{\"name\": \"n\", \"priority\": -1001}", 1), "priority");
	assert_string_equal(refused_for("{\"name\": \"n\", \"priority\": 1.0}", 1), "priority");
	assert_string_equal(refused_for("{\"name\": \"n\", \"priority\": \"1\"}", 1), "priority");
	assert_string_equal(refused_for("{\"name\": \"n\", \"priority\": null}", 1), "priority");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_running\": 0}", 1), "max_running");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_running\": true}", 1), "max_running");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_running\": 10000000}", 1), "max_running");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_gpus\": -1}", 1), "max_gpus");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_gpus\": 1.5}", 1), "max_gpus");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_cpus\": 0}", 1), "max_cpus");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_cpus\": -2}", 1), "max_cpus");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_cpus\": \"2\"}", 1), "max_cpus");
	assert_string_equal(refused_for("{\"name\": \"n\", \"max_cpus\": 1e9}", 1), "max_cpus");
	assert_string_equal(refused_for("{\"name\": \"n\", \"description\": 5}", 1), "description");
	assert_string_equal(refused_for("{\"name\": \"n\", \"colour\": \"red\"}", 1), "colour");
	{
		/* a NUL would cut the text the database gets */
		json_t *b = json_pack("{s:s, s:s#}", "name", "n", "description", "a\0b", (int)3), *out = NULL;
		const char *field = NULL;
		assert_int_equal(store_queue_fields(&out, &field, b, 1), FERRY_EINVALID);
		assert_string_equal(field, "description");
		json_decref(b);
	}
	/* the first bad one in the fields' order, not the body's */
	assert_string_equal(refused_for("{\"max_cpus\": 0, \"name\": \"n\", \"priority\": 5000}", 1), "priority");
}

static void test_queues__a_change(void **state)
{
	const char *field = NULL;
	json_t *out = NULL;

	(void)state;
	assert_int_equal(fields_of("{\"max_gpus\": null, \"priority\": 3}", 0, &field, &out), FERRY_OK);
	assert_int_equal(json_object_size(out), 2);
	assert_true(json_is_null(json_object_get(out, "max_gpus")));
	json_decref(out);
	assert_string_equal(refused_for("{}", 0), "");
	assert_string_equal(refused_for("{\"name\": \"other\"}", 0), "name");
	assert_string_equal(refused_for("{\"priority\": null}", 0), "priority");
	assert_string_equal(refused_for("[]", 0), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_queues__names),
		cmocka_unit_test(test_queues__create_takes_what_is_given),
		cmocka_unit_test(test_queues__each_bad_value_named),
		cmocka_unit_test(test_queues__a_change),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
