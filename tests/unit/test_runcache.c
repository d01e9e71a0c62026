/* Unit tests of the run cache: hits, the epoch guard, bounds, references, on/off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/runcache.h"

static struct runcache *new_enabled(size_t entries, size_t bytes)
{
	struct runcache *c = NULL;

	assert_int_equal(runcache_new(&c, entries, bytes), 0);
	runcache_enable(c, 1);
	return c;
}

static void put(struct runcache *c, int64_t id, const char *json)
{
	assert_int_equal(runcache_put(c, id, json, strlen(json), runcache_epoch(c)), 1);
}

static void assert_cached(struct runcache *c, int64_t id, const char *json)
{
	const struct runcache_json *j = runcache_get(c, id);

	if (json == NULL) {
		assert_null(j);
		return;
	}
	assert_non_null(j);
	assert_int_equal(j->len, strlen(json));
	assert_string_equal(j->data, json);
	runcache_json_release(j);
}

static void test_runcache__get_put_invalidate(void **state)
{
	struct runcache *c = new_enabled(16, 1 << 20);

	(void)state;
	assert_cached(c, 1, NULL);
	put(c, 1, "{\"id\":1}");
	put(c, 2, "{\"id\":2}");
	assert_cached(c, 1, "{\"id\":1}");
	put(c, 1, "{\"id\":1,\"v\":2}"); /* replaces */
	assert_cached(c, 1, "{\"id\":1,\"v\":2}");
	runcache_invalidate(c, 1);
	assert_cached(c, 1, NULL);
	assert_cached(c, 2, "{\"id\":2}");
	runcache_invalidate(c, 99); /* absent: fine */
	runcache_free(c);
	runcache_free(NULL);
}

/* A reader that read the epoch before an invalidation may not insert what it fetched. */
static void test_runcache__epoch_guard(void **state)
{
	struct runcache *c = new_enabled(16, 1 << 20);
	uint64_t before = runcache_epoch(c);

	(void)state;
	runcache_invalidate(c, 7); /* a retry of run 7 was notified meanwhile */
	assert_int_equal(runcache_put(c, 7, "{}", 2, before), 0);
	assert_cached(c, 7, NULL);
	before = runcache_epoch(c);
	runcache_enable(c, 0); /* the listener disconnected and came back */
	runcache_enable(c, 1);
	assert_int_equal(runcache_put(c, 7, "{}", 2, before), 0);
	assert_int_equal(runcache_put(c, 7, "{}", 2, runcache_epoch(c)), 1);
	runcache_free(c);
}

static void test_runcache__disabled_holds_nothing(void **state)
{
	struct runcache *c = NULL;
	struct runcache_stats st;

	(void)state;
	assert_int_equal(runcache_new(&c, 16, 1 << 20), 0);
	assert_int_equal(runcache_put(c, 1, "{}", 2, runcache_epoch(c)), 0); /* starts disabled */
	runcache_enable(c, 1);
	put(c, 1, "{}");
	runcache_enable(c, 0); /* flushes */
	assert_cached(c, 1, NULL);
	assert_int_equal(runcache_put(c, 1, "{}", 2, runcache_epoch(c)), 0);
	runcache_stats(c, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(st.flushes, 1);
	assert_int_equal(st.enabled, 0);
	runcache_free(c);
}

static void test_runcache__bounds_evict_least_recent(void **state)
{
	struct runcache *c = new_enabled(3, 1 << 20);
	const struct runcache_json *j;
	struct runcache_stats st;
	static char big[200000];

	(void)state;
	put(c, 1, "a");
	put(c, 2, "b");
	put(c, 3, "c");
	assert_cached(c, 1, "a"); /* 1 is now the most recent: 2 goes first */
	put(c, 4, "d");
	assert_cached(c, 2, NULL);
	assert_cached(c, 1, "a");
	assert_cached(c, 3, "c");
	assert_cached(c, 4, "d");
	runcache_stats(c, &st);
	assert_int_equal(st.entries, 3);
	assert_int_equal(st.evictions, 1);
	runcache_free(c);

	/* bytes: 1 MiB budget, entries up to 128 KiB; bigger ones are not kept */
	c = new_enabled(1000, 1 << 20);
	memset(big, 'x', sizeof(big));
	assert_int_equal(runcache_put(c, 1, big, sizeof(big), runcache_epoch(c)), 0);
	for (int64_t id = 1; id <= 20; id++)
		assert_int_equal(runcache_put(c, id, big, 100000, runcache_epoch(c)), 1);
	runcache_stats(c, &st);
	assert_true(st.bytes <= (1 << 20));
	assert_int_equal(st.entries, 10);
	assert_cached(c, 10, NULL);
	j = runcache_get(c, 20);
	assert_non_null(j);
	runcache_json_release(j);
	runcache_free(c);
}

/* A reference taken before the entry goes stays readable until released. */
static void test_runcache__reference_outlives_entry(void **state)
{
	struct runcache *c = new_enabled(16, 1 << 20);
	const struct runcache_json *j;

	(void)state;
	put(c, 1, "{\"state\":\"succeeded\"}");
	j = runcache_get(c, 1);
	assert_non_null(j);
	runcache_invalidate(c, 1);
	runcache_enable(c, 0);
	assert_string_equal(j->data, "{\"state\":\"succeeded\"}");
	runcache_free(c);
	assert_string_equal(j->data, "{\"state\":\"succeeded\"}");
	runcache_json_release(j);
}

struct hammer {
	struct runcache *c;
	int seed;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	char json[64];

	for (int i = 0; i < 20000; i++) {
		int64_t id = (h->seed * 7919 + i) % 50;
		const struct runcache_json *j;
		snprintf(json, sizeof(json), "{\"id\":%lld}", (long long)id);
		if (i % 3 == 0)
			runcache_put(h->c, id, json, strlen(json), runcache_epoch(h->c));
		else if (i % 97 == 0)
			runcache_invalidate(h->c, id);
		else if ((j = runcache_get(h->c, id)) != NULL) {
			if (strcmp(j->data, json) != 0)
				fail_msg("run %lld holds %s", (long long)id, j->data);
			runcache_json_release(j);
		}
	}
	return NULL;
}

static void test_runcache__threads(void **state)
{
	struct runcache *c = new_enabled(20, 1 << 20);
	struct hammer h[4];
	pthread_t t[4];

	(void)state;
	for (int i = 0; i < 4; i++) {
		h[i].c = c;
		h[i].seed = i;
		pthread_create(&t[i], NULL, hammer_main, &h[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	runcache_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runcache__get_put_invalidate),
		cmocka_unit_test(test_runcache__epoch_guard),
		cmocka_unit_test(test_runcache__disabled_holds_nothing),
		cmocka_unit_test(test_runcache__bounds_evict_least_recent),
		cmocka_unit_test(test_runcache__reference_outlives_entry),
		cmocka_unit_test(test_runcache__threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
