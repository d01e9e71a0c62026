/*
 * watchpoints — training-health rules over the metrics a job writes. A job
 * may append JSON lines to $FERRY_METRICS_FILE ({"step": 100, "loss":
 * 0.31}); one struct watch per attempt follows that file, keeps each
 * metric's series (downsampled, bounded) and applies the step's `watch:`
 * rules to every value read: NaN or Inf, "not decreasing over N steps",
 * comparisons with a constant or with K times the running min, max or
 * first value. A rule fires at most once per attempt; the caller (the
 * monitor) takes what fired and acts. No database, no threads: the caller
 * serialises the calls on one watch.
 */
#ifndef FERRY_WATCHPOINTS_H
#define FERRY_WATCHPOINTS_H

#include <jansson.h>
#include <stdint.h>

/* Bounds per attempt. */
#define WP_MAX_METRICS 64          /* series kept; values of further metrics are counted, not kept */
#define WP_MAX_POINTS 512          /* points of one series in watch_series_json */
#define WP_MAX_RULES 128           /* rules of one watch spec, all metrics together */
#define WP_RULE_MAX 128            /* bytes of one rule's text */
#define WP_LINE_MAX (64 * 1024)    /* a longer line is skipped whole */
#define WP_READ_MAX (1024 * 1024)  /* bytes read by one watch_follow */
#define WP_STEPS_MAX 1000000000000LL /* N of "over N steps" */

enum wp_action { WP_NOTIFY, WP_FAIL, WP_RESTART };

enum wp_kind {
	WP_NAN_OR_INF,     /* nan_or_inf */
	WP_NOT_DECREASING, /* not decreasing over N steps */
	WP_NOT_INCREASING, /* not increasing over N steps */
	WP_COMPARE,        /* OP NUMBER */
	WP_COMPARE_REF,    /* OP K * min|max|first */
};

enum wp_op { WP_GT, WP_GE, WP_LT, WP_LE };
enum wp_ref { WP_REF_MIN, WP_REF_MAX, WP_REF_FIRST };

/* One parsed rule; only the fields of its kind mean anything. */
struct wp_rule {
	enum wp_kind kind;
	enum wp_op op;     /* WP_COMPARE, WP_COMPARE_REF */
	enum wp_ref ref;   /* WP_COMPARE_REF */
	double value;      /* the constant (WP_COMPARE) or K (WP_COMPARE_REF); finite */
	int64_t steps;     /* N of WP_NOT_DECREASING / WP_NOT_INCREASING, 1..WP_STEPS_MAX */
};

/*
 * Parses one rule's text (blanks allowed around and between the parts):
 *   nan_or_inf | not decreasing over N steps | not increasing over N steps |
 *   OP NUMBER | OP K * min|max|first        (OP one of > >= < <=)
 * Returns 0 with *out filled (out may be NULL: validation only), or
 * FERRY_EINVALID with a message like
 *   watch rule "not decreasing 500 steps": expected "over" after "not decreasing"
 */
int wp_rule_parse(const char *text, struct wp_rule *out);

/* "notify", "fail", "restart" → WP_*; -1 for anything else (NULL too). */
int wp_action_parse(const char *name);
/* The name wp_action_parse reads ("notify" for an unknown value). */
const char *wp_action_name(enum wp_action a);

/* One attempt's follower: its rules, series, file offset and counters. */
struct watch;

/*
 * Makes a watch for spec, the step's normalized `watch:` object
 *   {"loss":[{"rule":"nan_or_inf","action":"notify"}, …], "accuracy":[…]}
 * (a bare string item counts as {"rule": it, "action": "notify"}). spec
 * may be NULL or {}: the watch then only keeps series. The watched metrics
 * have their series from the start, so noise metrics cannot crowd them out
 * of the WP_MAX_METRICS. *out is the caller's (watch_free). Returns 0, or
 * FERRY_EINVALID with a message naming the metric and rule.
 */
int watch_new(struct watch **out, const json_t *spec);
void watch_free(struct watch *w);

/*
 * Reads what was appended to path since the last call: complete lines only
 * (a partial last line waits for its newline), at most WP_READ_MAX bytes
 * per call (the rest next call); a line over WP_LINE_MAX bytes is skipped
 * whole. A missing file is not an error (nothing yet); a file that shrank
 * below the offset, or was replaced by another, is read again from 0 (and
 * counted in "restarts", with a log line). Each line is a JSON object;
 * numbers (and NaN, Infinity, -Infinity as Python writes them, and the
 * strings "nan", "inf", "-inf") are metric values, "step" is the x axis
 * (the line's ordinal when absent); other fields are ignored; a malformed
 * line is counted and skipped. Returns how many rules fired in this call,
 * or a negative FERRY_E* when the file cannot be read (not a regular file,
 * an IO error) with the message set.
 */
int watch_follow(struct watch *w, const char *path);

/*
 * As watch_follow, for when the job has ended and will write no more: a
 * last line without its newline is taken as complete.
 */
int watch_follow_end(struct watch *w, const char *path);

/*
 * Feeds len bytes of lines as if read from the file (a last line without
 * newline counts as a line; the offset is not moved): the fuzzer's and the
 * tests' way in. Returns how many rules fired.
 */
int watch_feed(struct watch *w, const char *data, size_t len);

/*
 * The rules that fired and were not yet taken, oldest first; taking marks
 * them taken. The strings are owned by w and valid until watch_free; value
 * may be NaN or ±Inf.
 */
struct wp_fired {
	const char *metric, *rule, *message;
	enum wp_action action;
	double value;
	int64_t step;
};
int watch_take_fired(struct watch *w, struct wp_fired *out); /* 1 with *out filled, 0 when none left */

/*
 * New JSON (the caller's):
 * series:  {"loss":{"points":[[step,value],…],"stride":N,"min":…,"min_step":…,
 *           "max":…,"max_step":…,"first":…,"first_step":…,"last":…,"last_step":…,
 *           "count":N}, …}
 *          points hold every stride-th value and always end with the newest,
 *          at most WP_MAX_POINTS; non-finite values are null (JSON has no
 *          NaN); min/max/first over the finite values (null when none).
 * results: [{"metric","rule","action","state":"ok"|"fired","step","value","message"}]
 *          (step, value, message null while ok)
 * stats:   {"lines":N,"malformed":N,"skipped_long":N,"ignored_metrics":N,"offset":N,
 *           "restarts":N,"metrics":N}
 *          ignored_metrics counts values of metrics beyond the WP_MAX_METRICS
 *          (and of names that are not metric names: 1-64 of letters, digits,
 *          _ . - / :); restarts counts truncations and replacements.
 */
json_t *watch_series_json(const struct watch *w);
/* The lines read so far (the "lines" of the stats): the job's progress marks for the hang rule's cadence. */
int64_t watch_lines(const struct watch *w);
/* The mtime (ns) of the regular file the last watch_follow read (opened without following links), or -1. */
int64_t watch_mtime_ns(const struct watch *w);
json_t *watch_results_json(const struct watch *w);
json_t *watch_stats_json(const struct watch *w);

#endif
