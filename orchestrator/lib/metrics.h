/*
 * metrics — process-wide counters and latency histograms, updated lock-free
 * from any thread (C11 atomics) and rendered in the Prometheus text format
 * by GET /metrics.
 */
#ifndef FERRY_METRICS_H
#define FERRY_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metric_counter {
	M_STEPS_DISPATCHED,  /* steps claimed and started */
	M_STEPS_FINISHED,    /* attempts closed */
	M_DB_ERRORS,         /* failed database calls (engine and API) */
	M_API_REQUESTS,
	M_FP_MEMO_HITS,      /* dataset fingerprints answered from the stat memo (no bytes read) */
	M_FP_READS,          /* dataset fingerprints computed by reading every byte */
	M_API_CONNS_CUT,     /* API connections shut down: headers too slow, or too many waiting (api_conns.h) */
	M_DB_RETRIES,        /* statements run again after PostgreSQL aborted them for a deadlock or serialization conflict */
	M_COUNTERS
};

enum metric_histogram {
	H_CLAIM,       /* one claim statement (dispatch latency) */
	H_FINISH,      /* one batch of completions */
	H_API_REQUEST, /* one API request */
	H_HISTOGRAMS
};

void metrics_add(enum metric_counter c, uint64_t n);
/* The counter's value now. */
uint64_t metrics_get(enum metric_counter c);
void metrics_observe(enum metric_histogram h, double seconds);

/*
 * Periodic tasks: a slot per task name (registered once, from the engine's
 * thread), counted each time the task runs: ferry_periodic_runs_total{task}.
 */
int metrics_task_slot(const char *name);
void metrics_task_ran(int slot);

/*
 * Gauges someone else renders (the job monitor's, per running attempt):
 * text in the exposition format, replaced whole on each call, appended by
 * metrics_render. NULL clears it.
 */
void metrics_set_gauges(const char *text);

/* Appends the exposition of every metric to *buf (realloc'd, NUL-terminated). */
void metrics_render(char **buf, size_t *len, size_t *cap);

/* Appends printf output to *buf (the same growing buffer). */
void metrics_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
