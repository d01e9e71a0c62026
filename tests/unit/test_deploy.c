/*
 * Unit tests of deploy.c: sharing traffic when a version is added or set,
 * HAProxy weights per replica, and the validation of what users ask for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "plan/deploy.h"
#include "lib/util.h"

static int sum(const int *w, size_t n)
{
	int s = 0;
	for (size_t i = 0; i < n; i++)
		s += w[i];
	return s;
}

static void test_deploy__weights_add(void **state)
{
	int out[8];
	int one[] = {100}, two[] = {80, 20}, thirds[] = {34, 33, 33}, none[] = {0, 0};

	(void)state;
	deploy_weights_add(NULL, 0, 20, out); /* the first version gets everything */
	assert_int_equal(out[0], 100);
	deploy_weights_add(none, 2, 30, out); /* nothing serving: the new one takes all */
	assert_int_equal(out[2], 100);
	assert_int_equal(out[0] + out[1], 0);
	deploy_weights_add(one, 1, 20, out);
	assert_int_equal(out[0], 80);
	assert_int_equal(out[1], 20);
	deploy_weights_add(two, 2, 50, out); /* 50 shared 80:20 → 40:10 */
	assert_int_equal(out[0], 40);
	assert_int_equal(out[1], 10);
	assert_int_equal(out[2], 50);
	deploy_weights_add(thirds, 3, 10, out); /* 90 shared 34:33:33 → 30.6, 29.7, 29.7 → 31, 30, 29 or so */
	assert_int_equal(sum(out, 4), 100);
	assert_int_equal(out[3], 10);
	assert_true(out[0] >= out[1] && out[1] >= 29 && out[2] >= 29);
	deploy_weights_add(one, 1, 100, out);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 100);
}

static void test_deploy__weights_set(void **state)
{
	int out[8];
	int three[] = {50, 30, 20}, lone[] = {100, 0};

	(void)state;
	deploy_weights_set(three, 3, 2, 60, out); /* 40 shared 50:30 → 25:15 */
	assert_int_equal(out[0], 25);
	assert_int_equal(out[1], 15);
	assert_int_equal(out[2], 60);
	deploy_weights_set(three, 3, 0, 100, out);
	assert_int_equal(out[0], 100);
	assert_int_equal(out[1] + out[2], 0);
	deploy_weights_set(lone, 2, 0, 70, out); /* the other had nothing: it takes the rest */
	assert_int_equal(out[0], 70);
	assert_int_equal(out[1], 30);
	deploy_weights_set(lone, 1, 0, 40, out); /* a single version always has 100 */
	assert_int_equal(out[0], 100);
}

static void test_deploy__server_weight(void **state)
{
	(void)state;
	assert_int_equal(deploy_server_weight(0, 3), 0);
	assert_int_equal(deploy_server_weight(50, 0), 0);
	assert_int_equal(deploy_server_weight(100, 1), DEPLOY_HAP_SCALE);
	assert_true(deploy_server_weight(100, 1) <= 256);
	/* 80% on two replicas against 20% on one: 100+100 against 50, the 80/20 split */
	assert_int_equal(2 * deploy_server_weight(80, 2), 4 * deploy_server_weight(20, 1));
	assert_int_equal(deploy_server_weight(1, 5), 1); /* never 0 while it has traffic */
}

static void test_deploy__checks(void **state)
{
	json_t *v;
	int x;

	(void)state;
	v = json_integer(20);
	assert_int_equal(deploy_check_traffic(v, "traffic", &x), 0);
	assert_int_equal(x, 20);
	json_decref(v);
	v = json_integer(101);
	assert_int_equal(deploy_check_traffic(v, "traffic", &x), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "traffic: 101 is out of range"));
	json_decref(v);
	v = json_string("x");
	assert_int_equal(deploy_check_replicas(v, "replicas", &x), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "replicas: must be the number of replicas, an integer from 1 to 5"));
	json_decref(v);
	v = json_integer(6);
	assert_int_equal(deploy_check_replicas(v, "replicas", &x), FERRY_EINVALID);
	json_decref(v);

	unsetenv("FERRY_TEST_AUTO_STOP_UNIT_S");
	v = json_string("4h");
	assert_int_equal(deploy_check_auto_stop(v, "auto_stop", &x), 0);
	assert_int_equal(x, 4 * 3600);
	json_decref(v);
	v = json_string("never");
	assert_int_equal(deploy_check_auto_stop(v, "auto_stop", &x), 0);
	assert_int_equal(x, 0);
	json_decref(v);
	v = json_string("25h");
	assert_int_equal(deploy_check_auto_stop(v, "auto_stop", &x), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "auto_stop: 25 hours is out of range"));
	json_decref(v);
	v = json_string("90m");
	assert_int_equal(deploy_check_auto_stop(v, "auto_stop", &x), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "auto_stop: must be a whole number of hours"));
	json_decref(v);
	v = json_integer(2);
	assert_int_equal(deploy_check_auto_stop(v, "auto_stop", &x), 0);
	assert_int_equal(x, 7200);
	json_decref(v);

	assert_int_equal(deploy_check_name("digits-prod.v2", "name"), 0);
	assert_int_equal(deploy_check_name("-x", "name"), FERRY_EINVALID);
	assert_int_equal(deploy_check_name("a b", "name"), FERRY_EINVALID);
	assert_int_equal(deploy_check_name("", "name"), FERRY_EINVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deploy__weights_add),
		cmocka_unit_test(test_deploy__weights_set),
		cmocka_unit_test(test_deploy__server_weight),
		cmocka_unit_test(test_deploy__checks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
