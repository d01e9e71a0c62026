/*
 * metrics — see metrics.h. Histograms have fixed buckets from 0.5 ms to 10 s;
 * sums are kept in microseconds so they stay integers.
 */
#include "lib/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

static const double buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
				 0.25, 0.5, 1, 2.5, 10};
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

static _Atomic uint64_t counters[M_COUNTERS];
static struct {
	_Atomic uint64_t le[NBUCKETS];
	_Atomic uint64_t count;
	_Atomic uint64_t sum_us;
} histograms[H_HISTOGRAMS];

static const struct {
	const char *name, *help;
} counter_info[M_COUNTERS] = {
	{"ferry_steps_dispatched_total", "Steps claimed and started by this daemon."},
	{"ferry_attempts_finished_total", "Attempts this daemon closed."},
	{"ferry_db_errors_total", "Failed database calls."},
	{"ferry_api_requests_total", "API requests served."},
	{"ferry_fingerprint_memo_hits_total", "Dataset fingerprints known from unchanged file metadata (no bytes read)."},
	{"ferry_fingerprint_reads_total", "Dataset fingerprints computed by reading every byte."},
	{"ferry_api_connections_cut_total", "API connections shut down before their request's headers came: past the header deadline, or the longest waiting when too many waited."},
	{"ferry_db_retries_total", "Statements run again after PostgreSQL broke a deadlock or a serialization conflict by aborting them."},
}, histogram_info[H_HISTOGRAMS] = {
	{"ferry_dispatch_claim_seconds", "Duration of one claim of ready steps."},
	{"ferry_dispatch_finish_seconds", "Duration of closing one batch of attempts."},
	{"ferry_api_request_duration_seconds", "Duration of API requests."},
};

/* Periodic tasks by name (their table is the engine's). */
#define MAX_TASKS 16
static const char *task_names[MAX_TASKS];
static _Atomic uint64_t task_runs[MAX_TASKS];
static _Atomic int ntasks;

int metrics_task_slot(const char *name)
{
	int n = atomic_load(&ntasks);

	for (int i = 0; i < n; i++)
		if (strcmp(task_names[i], name) == 0)
			return i;
	if (n == MAX_TASKS)
		return -1;
	task_names[n] = name;
	atomic_store(&ntasks, n + 1);
	return n;
}

void metrics_task_ran(int slot)
{
	if (slot >= 0 && slot < MAX_TASKS)
		atomic_fetch_add_explicit(&task_runs[slot], 1, memory_order_relaxed);
}

uint64_t metrics_get(enum metric_counter c)
{
	return atomic_load_explicit(&counters[c], memory_order_relaxed);
}

void metrics_add(enum metric_counter c, uint64_t n)
{
	atomic_fetch_add_explicit(&counters[c], n, memory_order_relaxed);
}

void metrics_observe(enum metric_histogram h, double seconds)
{
	for (size_t i = 0; i < NBUCKETS; i++)
		if (seconds <= buckets[i])
			atomic_fetch_add_explicit(&histograms[h].le[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&histograms[h].count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&histograms[h].sum_us, (uint64_t)(seconds * 1e6), memory_order_relaxed);
}

void metrics_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
		va_end(ap);
		if (n >= 0 && *buf && (size_t)n < *cap - *len) {
			*len += (size_t)n;
			return;
		}
		*cap = (*cap + (size_t)(n > 0 ? n : 0) + 1) * 2;
		*buf = xrealloc(*buf, *cap);
		(*buf)[*len] = '\0';
	}
}

static pthread_mutex_t gauges_lock = PTHREAD_MUTEX_INITIALIZER;
static char *gauges;

void metrics_set_gauges(const char *text)
{
	char *copy = text ? xstrdup(text) : NULL, *old;

	pthread_mutex_lock(&gauges_lock);
	old = gauges;
	gauges = copy;
	pthread_mutex_unlock(&gauges_lock);
	free(old);
}

void metrics_render(char **buf, size_t *len, size_t *cap)
{
	for (int c = 0; c < M_COUNTERS; c++)
		metrics_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n",
				counter_info[c].name, counter_info[c].help, counter_info[c].name,
				counter_info[c].name,
				(unsigned long long)atomic_load_explicit(&counters[c], memory_order_relaxed));
	if (atomic_load(&ntasks) > 0)
		metrics_appendf(buf, len, cap, "# HELP ferry_periodic_runs_total Runs of each periodic task "
				"on this replica.\n# TYPE ferry_periodic_runs_total counter\n");
	for (int i = 0; i < atomic_load(&ntasks); i++)
		metrics_appendf(buf, len, cap, "ferry_periodic_runs_total{task=\"%s\"} %llu\n", task_names[i],
				(unsigned long long)atomic_load(&task_runs[i]));
	for (int h = 0; h < H_HISTOGRAMS; h++) {
		const char *name = histogram_info[h].name;
		metrics_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s histogram\n", name,
				histogram_info[h].help, name);
		for (size_t i = 0; i < NBUCKETS; i++)
			metrics_appendf(buf, len, cap, "%s_bucket{le=\"%g\"} %llu\n", name, buckets[i],
					(unsigned long long)atomic_load(&histograms[h].le[i]));
		metrics_appendf(buf, len, cap, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n",
				name, (unsigned long long)atomic_load(&histograms[h].count), name,
				(double)atomic_load(&histograms[h].sum_us) / 1e6, name,
				(unsigned long long)atomic_load(&histograms[h].count));
	}
	pthread_mutex_lock(&gauges_lock);
	if (gauges)
		metrics_appendf(buf, len, cap, "%s", gauges);
	pthread_mutex_unlock(&gauges_lock);
}
