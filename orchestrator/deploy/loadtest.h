/*
 * loadtest — the load-test gate of a `deploy` step: before traffic moves
 * to a new version, its replicas get the step's `sample` request at a
 * few concurrency levels, and the latency, throughput, error rate and
 * replica memory of each level are judged against thresholds written
 * like metric gates ("p99_ms": "< 50", "error_rate": "< 0.1%",
 * "p99_ms": "<= production * 1.2").
 *
 * loadtest_run blocks for the test's duration (bounded: per request and
 * per test), so it runs on a worker thread (workers.h), never on the
 * engine loop. It starts no thread of its own. The judge and the check
 * are pure functions over jansson values.
 */
#ifndef FERRY_LOADTEST_H
#define FERRY_LOADTEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Defaults and bounds of struct loadtest_opts. */
#define LOADTEST_REQUESTS 200          /* per level */
#define LOADTEST_TIMEOUT_MS 5000       /* per request */
#define LOADTEST_MAX_MS 120000         /* the whole test */
#define LOADTEST_MAX_LEVELS 16
#define LOADTEST_MAX_CONCURRENCY 256
#define LOADTEST_MAX_REQUESTS 100000   /* per level */

struct loadtest_opts {
	const char *const *urls; /* the new version's replicas' infer URLs; requests round-robin over them */
	size_t nurls;
	const char *body;        /* the `sample` request (JSON), POSTed as application/json */
	const int *levels;       /* concurrency levels, run in this order; {1,2,4,8,16} when NULL */
	size_t nlevels;
	int requests;            /* per level; LOADTEST_REQUESTS when 0 */
	int64_t timeout_ms;      /* per request; LOADTEST_TIMEOUT_MS when 0 */
	const pid_t *pids;       /* replica processes whose memory (RSS, with their descendants) is sampled; may be NULL */
	size_t npids;
	int64_t max_ms;          /* the whole test; LOADTEST_MAX_MS when 0. Requests not done by then count as errors */
};

/*
 * Runs every level in turn, each with exactly `concurrency` requests in
 * flight (keep-alive connections, libcurl multi) until `requests` are
 * done. *result (the caller's) is
 *   {"levels":[{"concurrency":1,"requests":200,"errors":0,"error_rate":0.0,
 *               "p50_ms":…,"p90_ms":…,"p99_ms":…,"max_ms":…,"throughput_rps":…,
 *               "memory_mb":…|null,"duration_ms":…,"first_error":"…"?}, …],
 *    "replicas":2,"started_at":"2026-11-24T05:40:00.123Z","duration_ms":…}
 * An error is a transport failure, a timeout, an HTTP status >= 400, or a
 * request not sent before max_ms. Latencies (p50 … max, nearest-rank) are
 * those of the successful requests (null when none succeeded); throughput
 * is successful requests per second of the level; memory_mb is the largest
 * sum of the replicas' RSS seen during the level (null when no pid was
 * given or none could be read).
 *
 * Returns 0 — errors of the requests are results, not failures — or
 * FERRY_EINVALID for bad options, FERRY_ERROR when libcurl cannot be set
 * up (message set, *result NULL). curl_global_init must have been called.
 */
int loadtest_run(const struct loadtest_opts *o, json_t **result);

/*
 * Judges result (loadtest_run's) against thresholds, an object of
 * metric -> comparison, or metric -> list of comparisons:
 *   {"p99_ms":["< 50","<= production * 1.2"],"error_rate":"< 0.1%","throughput_rps":">= 100"}
 * Comparisons are metric gates' (gate_expr_parse) plus "production * F";
 * error_rate is a fraction and may be written with % ("0.1%" is 0.001).
 * "production …" compares with the same level (same concurrency) of
 * production, the production version's load-test result; such items pass
 * with a note when production is NULL or lacks that level.
 *
 * Every comparison must hold at every level. *verdicts (the caller's) has
 * one object per comparison, naming the worst level (the failing one
 * furthest past its threshold, else the one closest to it):
 *   {"metric","op","threshold","level","value","passed","note"?}
 * plus "against":"production","production":N,"factor","offset" for
 * comparisons against production. Returns 1 when all pass (*reason NULL),
 * 0 when any fails with *reason (the caller frees it) like
 *   "load test failed: p99_ms 73.2 > 50 at concurrency 16; error_rate 2.0% >= 0.1% at concurrency 8"
 * or FERRY_EINVALID on malformed thresholds or result (message names the
 * key; nothing returned).
 */
int loadtest_judge(json_t **verdicts, char **reason, const json_t *thresholds,
		   const json_t *result, const json_t *production);

/*
 * Validates thresholds for the workflow config: keys among p50_ms p90_ms
 * p99_ms max_ms error_rate throughput_rps memory_mb, each a comparison or
 * a non-empty list of them, fixed values in range (error_rate 0–100%,
 * the rest 0 or more). FERRY_EINVALID with a message naming the key.
 */
int loadtest_thresholds_check(const json_t *thresholds);

#endif
