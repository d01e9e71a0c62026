/*
 * Unit tests for orchestrator/deploy/hap_log: the proxy's per-request lines
 * turned into per-version windows — counts, 5xx, percentiles within the
 * histogram's 5% (or 1 ms), seconds that age out, lines that do not parse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <time.h>

#include "deploy/hap_log.h"
#include "lib/util.h"

static void feed_ms(const char *front, int ord, int status, double ms, int64_t at)
{
	char line[128];

	snprintf(line, sizeof(line), "%s v%d-r1 %d %.0f", front, ord, status, ms);
	hap_log_feed(line, at);
}

static void test_hap_log__percentiles_and_windows(void **state)
{
	int64_t now = (int64_t)time(NULL);
	struct hap_live l;
	uint64_t lines, bad;

	(void)state;
	/* 1,000 requests of version 1 now: 1..1000 ms; version 2 of the same frontend: 10 of 5xx */
	for (int i = 1; i <= 1000; i++)
		feed_ms("digits", 1, 200, i, now);
	for (int i = 0; i < 10; i++)
		feed_ms("digits", 2, i < 3 ? 503 : 200, 20, now);
	assert_int_equal(hap_log_window("digits", 1, 1, &l), 0);
	assert_int_equal(l.requests, 1000);
	assert_int_equal(l.errors_5xx, 0);
	/* the exact ones are 500, 900, 990 ms: within 5% */
	assert_true(l.p50_ms > 475 && l.p50_ms < 525);
	assert_true(l.p90_ms > 855 && l.p90_ms < 945);
	assert_true(l.p99_ms > 940 && l.p99_ms < 1040);
	assert_int_equal(hap_log_window("digits", 2, 1, &l), 0);
	assert_int_equal(l.requests, 10);
	assert_int_equal(l.errors_5xx, 3);
	assert_true(l.p50_ms >= 20 && l.p50_ms < 21); /* 1 ms steps below 100 ms */
	/* what came 30 s ago is in a 60 s window, not in a 10 s one */
	feed_ms("old", 1, 200, 5, now - 30);
	assert_int_equal(hap_log_window("old", 1, 10, &l), FERRY_ENOTFOUND);
	assert_int_equal(hap_log_window("old", 1, 60, &l), 0);
	assert_int_equal(l.requests, 1);
	/* a slot from a lap ago counts for nothing (its second is another) */
	feed_ms("lap", 1, 200, 5, now - HAP_LOG_SLOTS);
	assert_int_equal(hap_log_window("lap", 1, HAP_LOG_SLOTS, &l), FERRY_ENOTFOUND);
	/* unknown frontend or version; lines that do not parse are counted, not kept */
	assert_int_equal(hap_log_window("digits", 9, 60, &l), FERRY_ENOTFOUND);
	hap_log_counts(&lines, &bad);
	hap_log_feed("digits <NOSRV> 503 0", now);
	hap_log_feed("garbage", now);
	{
		uint64_t lines2, bad2;
		hap_log_counts(&lines2, &bad2);
		assert_int_equal(lines2 - lines, 2);
		assert_int_equal(bad2 - bad, 2);
	}
}

/* a canary's own requests (the captured X-Ferry-Synthetic, HAProxy's %hr) are counted apart */
static void test_hap_log__synthetic_requests_counted_apart(void **state)
{
	int64_t now = (int64_t)time(NULL);
	struct hap_live l;

	(void)state;
	hap_log_feed("syn v1-r0 200 3 {}", now);         /* a user's */
	hap_log_feed("syn v1-r0 200 4 {canary}", now);   /* the step's own */
	hap_log_feed("syn v1-r1 500 5 {canary}", now);
	hap_log_feed("syn v1-r1 200 6", now);            /* a template without the capture */
	hap_log_feed("syn v1-r1 200 6 {-}", now);
	assert_int_equal(hap_log_window("syn", 1, 1, &l), 0);
	assert_int_equal(l.requests, 5);
	assert_int_equal(l.synthetic, 2);
	assert_int_equal(l.errors_5xx, 1);
}

/* The history: 10-second buckets closed once over, exact figures, empty ones left out, the newest kept */
static void test_hap_log__history_buckets(void **state)
{
	int64_t t0 = ((int64_t)time(NULL) / HAP_LOG_BUCKET_S) * HAP_LOG_BUCKET_S - 1000;
	struct hap_point p[8];

	(void)state;
	/* bucket t0: 10 requests of 10 ms (2 of them 5xx); t0 + 10: none; t0 + 20: 4 of 300 ms, one a canary's */
	for (int i = 0; i < 10; i++)
		feed_ms("hist", 1, i < 2 ? 500 : 200, 10, t0 + i);
	for (int i = 0; i < 3; i++)
		feed_ms("hist", 1, 200, 300, t0 + 20 + i);
	hap_log_feed("hist v1-r1 200 300 {yes}", t0 + 25);
	/* as of t0 + 29 the bucket of t0 + 20 is still open: only the first is closed */
	assert_int_equal(hap_log_history_at("hist", 1, 0, t0 + 29, p, 8), 1);
	assert_int_equal(p[0].t, t0);
	assert_int_equal(p[0].requests, 10);
	assert_int_equal(p[0].errors_5xx, 2);
	assert_true(p[0].p50_ms >= 10 && p[0].p50_ms < 11);
	/* as of t0 + 40: both, oldest first, the empty bucket between them left out */
	assert_int_equal(hap_log_history_at("hist", 1, 0, t0 + 40, p, 8), 2);
	assert_int_equal(p[1].t, t0 + 20);
	assert_int_equal(p[1].requests, 4);
	assert_int_equal(p[1].synthetic, 1);
	assert_true(p[1].p99_ms > 285 && p[1].p99_ms < 315);
	/* since: what starts at or after it; cap: the newest */
	assert_int_equal(hap_log_history_at("hist", 1, t0 + 1, t0 + 40, p, 8), 1);
	assert_int_equal(p[0].t, t0 + 20);
	assert_int_equal(hap_log_history_at("hist", 1, 0, t0 + 40, p, 1), 1);
	assert_int_equal(p[0].t, t0 + 20);
	/* an hour later they are gone; another version or frontend has none */
	assert_int_equal(hap_log_history_at("hist", 1, 0, t0 + HAP_LOG_HISTORY_S + 30, p, 8), 0);
	assert_int_equal(hap_log_history_at("hist", 2, 0, t0 + 40, p, 8), 0);
	assert_int_equal(hap_log_history_at("nope", 1, 0, t0 + 40, p, 8), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hap_log__percentiles_and_windows),
		cmocka_unit_test(test_hap_log__history_buckets),
		cmocka_unit_test(test_hap_log__synthetic_requests_counted_apart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
