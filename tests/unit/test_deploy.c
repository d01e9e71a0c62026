/*
 * Unit tests of deploy.c: sharing traffic when a version is added or set,
 * HAProxy weights per replica, and the validation of what users ask for;
 * and of store_deploy.c's pure part: a deployment's rows (the JSON
 * aggregate) parsed into structs and rendered back as the API shows them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "plan/deploy.h"
#include "store/store_deploy.h"
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

/* Two deployments as the store's query gives them (jsonb: keys by length, then bytes). */
static const char rows[] =
	"[{\"id\":7,\"url\":\"http://127.0.0.1:40001\",\"name\":\"digits\",\"port\":40001,\"model\":\"digits\","
	"\"state\":\"running\",\"run_id\":12,\"deadline\":\"2030-01-01T10:00:00.5+00:00\",\"versions\":["
	"{\"ord\":1,\"step\":\"deploy\",\"serve\":{\"env\":{},\"command\":[\"serve.sh\"],\"workdir\":\"/w\","
	"\"placement\":{\"image\":null,\"executor\":\"local\",\"resources\":null}},\"state\":\"serving\",\"run_id\":12,"
	"\"weight\":80,\"version\":\"0.0.1\",\"artifact\":\"/a/1\",\"replicas\":1,\"load_test\":{\"levels\":[]},\"zero_since\":null,"
	"\"replica_list\":[{\"idx\":1,\"port\":40100,\"handle\":{\"pid\":42,\"start\":99,\"executor\":\"local\"},"
	"\"health\":\"healthy\",\"restarts\":0,\"generation\":1,\"last_error\":null,\"next_start_in_ms\":0},"
	"{\"idx\":2,\"port\":40101,\"handle\":null,\"health\":\"stopped\",\"restarts\":3,\"generation\":0,"
	"\"last_error\":\"its process had exited\",\"next_start_in_ms\":1500}]},"
	"{\"ord\":2,\"step\":null,\"serve\":{\"command\":[\"serve.sh\"]},\"state\":\"retired\",\"run_id\":null,"
	"\"weight\":0,\"version\":\"0.0.2\",\"artifact\":\"/a/2\",\"replicas\":2,\"load_test\":null,\"zero_since\":null,\"replica_list\":[]}],"
	"\"created_at\":\"2029-12-31T10:00:00+00:00\",\"auto_stop_s\":3600,\"retire_after_s\":3600,\"match\":null},"
	"{\"id\":8,\"url\":\"http://127.0.0.1:40002\",\"name\":\"other\",\"port\":40002,\"model\":\"m\","
	"\"state\":\"stopped\",\"run_id\":null,\"deadline\":null,\"versions\":[],"
	"\"created_at\":\"2029-12-31T11:00:00+00:00\",\"auto_stop_s\":null,\"retire_after_s\":null,\"match\":null}]";

static void test_deploy__from_json(void **state)
{
	json_t *j = json_loads(rows, 0, NULL);
	struct deployment *list = NULL;
	const struct deploy_version *v;
	size_t n = 0;

	(void)state;
	assert_non_null(j);
	assert_int_equal(deployments_from_json(&list, &n, j), 0);
	assert_int_equal(n, 2);
	assert_int_equal(list[0].id, 7);
	assert_string_equal(list[0].name, "digits");
	assert_int_equal(list[0].port, 40001);
	assert_int_equal(list[0].state, DEPLOY_RUNNING);
	assert_int_equal(list[0].auto_stop_s, 3600);
	assert_int_equal(list[0].run_id, 12);
	assert_string_equal(list[0].deadline, "2030-01-01T10:00:00.5+00:00");
	assert_int_equal(list[0].nversions, 2);
	v = &list[0].versions[0];
	assert_string_equal(v->version, "0.0.1");
	assert_int_equal(v->ord, 1);
	assert_int_equal(v->weight, 80);
	assert_int_equal(v->want_replicas, 1);
	assert_int_equal(v->state, DEPLOY_V_SERVING);
	assert_string_equal(json_string_value(json_array_get(json_object_get(v->serve, "command"), 0)), "serve.sh");
	assert_int_equal(v->nreplicas, 2);
	assert_int_equal(v->replicas[0].health, DEPLOY_H_HEALTHY);
	assert_int_equal(json_integer_value(json_object_get(v->replicas[0].handle, "pid")), 42);
	assert_null(v->replicas[0].last_error);
	assert_null(v->replicas[1].handle); /* null: never started */
	assert_int_equal(v->replicas[1].health, DEPLOY_H_STOPPED);
	assert_int_equal(v->replicas[1].restarts, 3);
	assert_int_equal(v->replicas[1].next_start_in_ms, 1500);
	assert_string_equal(v->replicas[1].last_error, "its process had exited");
	v = deployment_version(&list[0], "0.0.2");
	assert_non_null(v);
	assert_int_equal(v->state, DEPLOY_V_RETIRED);
	assert_null(v->step);
	assert_null(v->load_test);
	assert_int_equal(v->run_id, 0);
	assert_int_equal(v->nreplicas, 0);
	assert_null(deployment_version(&list[0], "0.0.3"));
	assert_int_equal(list[1].state, DEPLOY_STOPPED);
	assert_int_equal(list[1].auto_stop_s, 0);
	assert_null(list[1].deadline);
	assert_int_equal(list[1].nversions, 0);
	deployments_free(list, n);
	json_decref(j);
	deployments_free(NULL, 0);
	deployment_free(NULL);
}

/* What the API answers is what the rows said, field for field and in the same order. */
static void test_deploy__to_json_round_trip(void **state)
{
	json_t *j = json_loads(rows, 0, NULL), *out = json_array();
	struct deployment *list = NULL;
	char *a, *b;
	size_t n = 0;

	(void)state;
	assert_int_equal(deployments_from_json(&list, &n, j), 0);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(out, deployment_to_json(&list[i], NULL));
	a = json_dumps(j, JSON_COMPACT);
	b = json_dumps(out, JSON_COMPACT);
	assert_string_equal(b, a);
	free(a), free(b);
	deployments_free(list, n);
	json_decref(out);
	json_decref(j);
}

/* A row that is not what the store writes fails, naming the field, and leaks nothing. */
static void test_deploy__from_json_bad(void **state)
{
	static const char *const bad[][2] = {
		{"{\"name\":\"x\",\"model\":\"m\",\"port\":1,\"state\":\"running\"}", "deployment.id is not an integer"},
		{"{\"id\":1,\"name\":\"x\",\"model\":\"m\",\"port\":1,\"state\":\"paused\"}", "deployment.state"},
		{"{\"id\":1,\"name\":\"x\",\"model\":\"m\",\"port\":1,\"state\":\"running\",\"versions\":{}}",
		 "deployment.versions is not an array"},
		{"{\"id\":1,\"name\":\"x\",\"model\":\"m\",\"port\":1,\"state\":\"running\",\"versions\":[{\"version\":\"v\","
		 "\"ord\":1,\"weight\":0,\"replicas\":1,\"state\":\"serving\",\"artifact\":\"a\",\"replica_list\":"
		 "[{\"idx\":1,\"port\":2,\"health\":\"healthy\",\"restarts\":0}]}]}", "replica.generation is not an integer"},
	};
	struct deployment *d = (struct deployment *)1;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *j = json_loads(bad[i][0], 0, NULL);
		assert_non_null(j);
		assert_int_equal(deployment_from_json(&d, j), FERRY_EDB);
		assert_null(d);
		assert_non_null(strstr(ferry_error_last(), bad[i][1]));
		json_decref(j);
	}
}

/* Placement: spread first, then the least loaded, labels and GPUs respected, and why none fits. */
static void test_deploy__place(void **state)
{
	json_t *gpu = json_pack("{s:s}", "gpu", "true"), *lab_a = json_pack("{s:s, s:s}", "gpu", "true", "zone", "a"),
	       *lab_b = json_pack("{s:s}", "zone", "b");
	struct deploy_host h[] = {
		{.name = "c", .up = 1, .labels = lab_b, .gpus = 0, .replicas = 0},
		{.name = "a", .up = 1, .labels = lab_a, .gpus = 1, .replicas = 2},
		{.name = "b", .up = 1, .labels = NULL, .gpus = 0, .replicas = 0},
	};
	int placed[3] = {0};
	const struct deploy_req one_gpu = {.gpus = 1}, two_gpus = {.gpus = 2};

	(void)state;
	/* three replicas of one version: one on each host, the least loaded first, ties by name */
	for (int r = 0; r < 3; r++) {
		int i = deploy_place(h, 3, NULL, NULL, NULL);
		assert_true(i >= 0);
		placed[i]++;
		h[i].same++, h[i].replicas++;
		if (r == 0)
			assert_string_equal(h[i].name, "b"); /* b and c have 0 replicas: b by name */
	}
	assert_int_equal(placed[0] + placed[1] + placed[2], 3);
	assert_true(placed[0] == 1 && placed[1] == 1 && placed[2] == 1);
	/* a fourth: every host has one of the version; the least loaded in all (b or c with 1, not a with 3) */
	assert_string_equal(h[deploy_place(h, 3, NULL, NULL, NULL)].name, "b");
	/* … of those equal, the placer's own host first */
	assert_string_equal(h[deploy_place(h, 3, NULL, NULL, "c")].name, "c");
	assert_string_equal(h[deploy_place(h, 3, NULL, NULL, "a")].name, "b"); /* a has more in all: not preferred */
	/* labels: only a has gpu=true */
	assert_string_equal(h[deploy_place(h, 3, gpu, NULL, NULL)].name, "a");
	assert_string_equal(h[deploy_place(h, 3, gpu, &one_gpu, NULL)].name, "a");
	/* too few GPUs, said with the numbers */
	assert_int_equal(deploy_place(h, 3, gpu, &two_gpus, NULL), FERRY_ENOTFOUND);
	assert_non_null(strstr(ferry_error_last(), "no host with the labels that is up has room for a replica asking for "
						   "2 GPUs beside the replicas it runs (free: a: 1 of 1 GPUs)"));
	/* a lost host takes nothing: its replicas go elsewhere */
	h[1].up = 0;
	assert_int_equal(deploy_place(h, 3, gpu, NULL, NULL), FERRY_ENOTFOUND);
	assert_non_null(strstr(ferry_error_last(), "no host that is up has the labels placement.hosts asks for ({\"gpu\":\"true\"}; 2 up)"));
	assert_string_equal(h[deploy_place(h, 3, lab_b, NULL, NULL)].name, "c");
	h[0].up = h[2].up = 0;
	assert_int_equal(deploy_place(h, 3, NULL, NULL, NULL), FERRY_ENOTFOUND);
	assert_non_null(strstr(ferry_error_last(), "no host is up"));
	assert_int_equal(deploy_place(NULL, 0, NULL, NULL, NULL), FERRY_ENOTFOUND);
	json_decref(gpu), json_decref(lab_a), json_decref(lab_b);
}

/* Placement's room: what a host's replicas ask for already counts; a host whose CPUs or memory are not known bounds nothing. */
static void test_deploy__place_room(void **state)
{
	struct deploy_host h[] = {
		{.name = "a", .up = 1, .cpus = 4, .memory_mb = 8192, .gpus = 1, .replicas = 1, .held_cpus = 3,
		 .held_memory_mb = 1024, .held_gpus = 1},
		{.name = "b", .up = 1, .cpus = 2, .memory_mb = 4096, .replicas = 3, .held_cpus = 0.5,
		 .held_memory_mb = 3584},
		{.name = "c", .up = 1, .cpus = 0, .memory_mb = 0, .replicas = 5}, /* capacity not known */
	};
	const struct deploy_req cpu2 = {.cpus = 2}, cpu1 = {.cpus = 1}, mem1g = {.memory_mb = 1024},
				gpu1 = {.gpus = 1}, half = {.cpus = 0.5, .memory_mb = 512};

	(void)state;
	/* a asks 3 of its 4 CPUs: 2 more fit only on b (1.5 free: no) … or c (not known: no bound) */
	assert_string_equal(h[deploy_place(h, 3, NULL, &cpu2, NULL)].name, "c");
	/* one CPU fits on a (1 free) and b (1.5 free): a, the least loaded */
	assert_string_equal(h[deploy_place(h, 3, NULL, &cpu1, NULL)].name, "a");
	/* 1 GiB: b has 512 MiB free; a and c take it, a the least loaded */
	assert_string_equal(h[deploy_place(h, 3, NULL, &mem1g, NULL)].name, "a");
	/* exactly what b has free fits (no rounding away of the last half CPU or MiB) */
	h[0].up = h[2].up = 0;
	assert_string_equal(h[deploy_place(h, 3, NULL, &half, NULL)].name, "b");
	/* a's one GPU is its replica's: none left for another, and the message gives the numbers */
	h[0].up = 1;
	assert_int_equal(deploy_place(h, 3, NULL, &gpu1, NULL), FERRY_ENOTFOUND);
	assert_non_null(strstr(ferry_error_last(), "no host that is up has room for a replica asking for 1 GPU beside "
						   "the replicas it runs (free: a: 0 of 1 GPUs; b: 0 of 0 GPUs)"));
	assert_int_equal(deploy_place(h, 3, NULL, &cpu2, NULL), FERRY_ENOTFOUND);
	assert_non_null(strstr(ferry_error_last(), "asking for 2 CPUs beside the replicas it runs (free: a: 1 of 4 CPUs; "
						   "b: 1.5 of 2 CPUs)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deploy__weights_add),
		cmocka_unit_test(test_deploy__place),
		cmocka_unit_test(test_deploy__place_room),
		cmocka_unit_test(test_deploy__weights_set),
		cmocka_unit_test(test_deploy__server_weight),
		cmocka_unit_test(test_deploy__checks),
		cmocka_unit_test(test_deploy__from_json),
		cmocka_unit_test(test_deploy__to_json_round_trip),
		cmocka_unit_test(test_deploy__from_json_bad),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
