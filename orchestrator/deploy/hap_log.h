/*
 * hap_log — what each request through HAProxy took, per version, live.
 *
 * HAProxy sends one line per request ("FRONTEND SERVER STATUS TA_MS {MARK}", the
 * template's log-format, `format raw`) as a datagram to a unix socket in
 * its directory; a thread of the daemon that runs HAProxy reads them and
 * keeps, per frontend and version (the server name's vORD), the last
 * HAP_LOG_SLOTS seconds as one slot a second: requests, 5xx answers,
 * those marked synthetic (a canary's own, X-Ferry-Synthetic) and a
 * log-linear histogram of the times (1 ms steps to 100 ms, then 5% steps),
 * from which a window's p50/p90/p99 come; and, for charts, an hour of
 * 10-second buckets (hap_log_history). Sending costs the request path a
 * sendto() on a datagram socket that never blocks HAProxy (a full buffer
 * drops lines, counted), where HAProxy's own stats keep only a mean per
 * server (hap_stats). Thread-safe; the request path is HAProxy's, never
 * this code's.
 */
#ifndef FERRY_HAP_LOG_H
#define FERRY_HAP_LOG_H

#include <stdint.h>

#define HAP_LOG_SLOTS 120 /* seconds of history kept per version */

/* A window's figures for one version. */
struct hap_live {
	int64_t requests, errors_5xx;
	int64_t synthetic; /* of requests, those marked X-Ferry-Synthetic (a canary's own) */
	double p50_ms, p90_ms, p99_ms; /* -1 when no request */
	double seconds;                /* the window's length */
};

/*
 * Starts reading the log socket DIR/log.sock (made anew; the template
 * names it) on a thread of its own; again for the same dir does nothing.
 * 0, or negative with the error set.
 */
int hap_log_start(const char *dir);

/* Stops the thread and removes the socket (daemon exit). */
void hap_log_stop(void);

/*
 * The last secs seconds (1..HAP_LOG_SLOTS, the current second included)
 * of version ord of frontend: *out filled; 0, or FERRY_ENOTFOUND when no
 * request of it was seen in that window or no log is read here.
 */
int hap_log_window(const char *frontend, int ord, int secs, struct hap_live *out);

/*
 * Traffic over time: the last HAP_LOG_HISTORY_S seconds of a version in
 * buckets of HAP_LOG_BUCKET_S, each closed (its figures taken from the
 * second slots above, percentiles exact to the histogram's 5%) once its
 * last second is over. A bucket without a request is not kept.
 */
#define HAP_LOG_BUCKET_S 10
#define HAP_LOG_HISTORY_S 3600

struct hap_point {
	int64_t t; /* the bucket's first second (unix) */
	int64_t requests, errors_5xx, synthetic;
	double p50_ms, p99_ms;
};

/*
 * The closed buckets of version ord of frontend that start at or after
 * unix second since, oldest first, into out (cap of them; the newest kept
 * when more): how many, 0 when none or no log is read here.
 */
int hap_log_history(const char *frontend, int ord, int64_t since, struct hap_point *out, int cap);

/* For the unit test: the history as of unix second now_s (hap_log_history reads the clock). */
int hap_log_history_at(const char *frontend, int ord, int64_t since, int64_t now_s, struct hap_point *out, int cap);

/* Lines read and lines that did not parse, since the start (the unit test reads them; not in /metrics yet). */
void hap_log_counts(uint64_t *lines, uint64_t *bad);

/* For the unit test: feeds one line as if HAProxy had sent it at unix second now_s. */
void hap_log_feed(const char *line, int64_t now_s);

#endif
