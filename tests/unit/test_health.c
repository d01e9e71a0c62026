/* Unit tests of the health flags behind /readyz and /metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/health.h"

static void test_health__not_ready_until_running(void **state)
{
	struct health h;
	char why[128];

	(void)state;
	health_init(&h);
	assert_int_equal(health_ready(&h, why, sizeof(why)), 0);
	assert_non_null(strstr(why, "database has not been reached"));
	health_waiting(&h, "waiting for the database (attempt %d): %s", 3, "connection refused");
	assert_int_equal(health_ready(&h, why, sizeof(why)), 0);
	assert_string_equal(why, "waiting for the database (attempt 3): connection refused");
	health_set_running(&h, 1);
	assert_int_equal(health_ready(&h, why, sizeof(why)), 1);
	health_set_running(&h, 0); /* shutting down */
	assert_int_equal(health_ready(&h, why, sizeof(why)), 0);
	assert_string_equal(why, "the engine is not running");
	health_dispose(&h);
}

static void test_health__metrics(void **state)
{
	struct health h;
	char *buf = NULL;
	size_t len = 0, cap = 0;

	(void)state;
	health_init(&h);
	health_waiting(&h, "x");
	health_waiting(&h, "y");
	health_set_running(&h, 1);
	health_render(&h, &buf, &len, &cap);
	assert_non_null(strstr(buf, "\nferry_engine_running 1\n"));
	assert_non_null(strstr(buf, "\nferry_db_start_attempts_total 2\n"));
	assert_null(strstr(buf, "ferry_leader")); /* no election: no line */
	free(buf);
	buf = NULL;
	len = cap = 0;
	health_set_leader(&h, 1);
	health_render(&h, &buf, &len, &cap);
	assert_non_null(strstr(buf, "\nferry_leader 1\n"));
	free(buf);
	health_dispose(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_health__not_ready_until_running),
		cmocka_unit_test(test_health__metrics),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
