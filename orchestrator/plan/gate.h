/*
 * gate — the metrics a train or evaluate step reports and the gates that
 * judge them: a metrics.json validated into an object of numbers, and a
 * step's gate (comparisons against fixed thresholds or the model's
 * production version) parsed — by the workflow config, hence here below
 * it — and evaluated — by the job kinds (steps/kind_job.c) when the job
 * is done. Pure functions over jansson values: no database, no files.
 *
 * Not to be confused with metrics.h (the daemon's Prometheus counters).
 */
#ifndef FERRY_GATE_H
#define FERRY_GATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Largest metrics.json accepted, in bytes. */
#define METRICS_MAX_BYTES (1024 * 1024)

/*
 * Validates the text of a metrics.json (len bytes, need not be
 * NUL-terminated): a JSON object whose values are finite numbers, with the
 * known metrics in range (accuracy, precision, recall, f1 in [0,1]; mae,
 * mse, rmse >= 0). On success *out is a new object name -> real (the
 * caller's); otherwise returns FERRY_EINVALID, *out is NULL and
 * ferry_error_last() says what is wrong, starting with "metrics.json: ".
 */
int metrics_parse(json_t **out, const char *text, size_t len);

/* Whether name can be gated on: 1-64 of letters, digits, _ . - / and :. */
bool metrics_name_ok(const char *name);

/*
 * Parses the comparison of one gate entry, `metric: expr`, where expr is
 * "OP VALUE", "OP production", "OP production + N" or "OP production - N"
 * (blanks anywhere between the parts; OP one of >= > <= < == !=). Fixed
 * thresholds of known metrics must be in the metric's range. *out is a new
 * item, the caller's:
 *   {"metric":"accuracy","op":">=","value":0.9}
 *   {"metric":"f1","op":">=","production":true,"offset":0.01}   (offset 0 when none)
 * On a bad entry returns FERRY_EINVALID with a message naming the metric.
 */
int gate_parse(json_t **out, const char *metric, const char *expr);

/* What gate_expr_parse accepts beyond gate_parse's grammar. */
enum {
	GATE_EXPR_FACTOR = 1 << 0,  /* "OP production * F" with F > 0 */
	GATE_EXPR_PERCENT = 1 << 1, /* a number or offset ending in %, read as a fraction: "0.1%" is 0.001 */
};

/* One comparison: "OP VALUE" or "OP production" [+ N | - N | * F]. */
struct gate_expr {
	const char *op;      /* ">=", ">", "<=", "<", "==" or "!=" (static) */
	const char *negated; /* the operator that says it failed: "<" for ">=" (static) */
	int production;      /* compared with the production version's value */
	int percent;         /* the number was written with % */
	double value;        /* the fixed threshold (0 against production) */
	double offset;       /* production + offset (0 when none) */
	double factor;       /* production * factor (1 when none) */
};

/*
 * The parser under gate_parse, for other users of the same comparisons
 * (the load-test gate, loadtest.h): parses expr into *out, with flags
 * (GATE_EXPR_*) allowing more than gate_parse does. No range checks: those
 * belong to the caller, who knows the quantity. On a bad expression returns
 * FERRY_EINVALID with a message that starts with what and the quoted expr,
 * e.g. `load_test p99_ms "< fast": expected a number, …`.
 */
int gate_expr_parse(struct gate_expr *out, const char *what, const char *expr, unsigned flags);

/* Whether v OP t holds, for op one of gate_expr's. */
bool gate_compare(double v, const char *op, double t);

/*
 * production * factor + offset, rounded to 12 significant digits so that
 * 0.93 + 0.01 is the 0.94 a person wrote, not 0.9400000000000001.
 */
double gate_threshold(double production, double offset, double factor);

/* Writes the shortest %g text of v that reads back as v into buf; returns buf. */
#define GATE_NUMBUF 32
const char *gate_num(char buf[GATE_NUMBUF], double v);

/*
 * Evaluates every item of gate (an array of gate_parse items) against
 * metrics (an object of numbers). production is the metrics object of the
 * model's production version, or NULL when there is none; prod_label names
 * that version in messages ("digits 0.0.2"; may be NULL).
 *
 * *results (the caller's) is an array, one object per item:
 *   {"metric","op","threshold":N|null,"value":N|null,"passed":bool}
 * plus, for items against production, "against":"production digits 0.0.2",
 * "production":N|null and "offset":N, and "note" where there is something
 * to say ("no production version yet", "accuracy missing from metrics.json").
 * Comparisons against production pass when there is no production version,
 * or when it has no such metric; a metric missing from metrics fails.
 *
 * Returns 1 when every item passes (*reason NULL), 0 when any fails, with
 * *reason (the caller frees it) like
 *   "gate failed: accuracy 0.82 < 0.9; f1 0.91 < production 0.93 (digits 0.0.2)"
 * or a negative FERRY_E* code when gate or metrics are malformed (nothing
 * returned).
 */
int gate_eval(json_t **results, char **reason, const json_t *gate, const json_t *metrics,
	      const json_t *production, const char *prod_label);

#endif
