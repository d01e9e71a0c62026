/*
 * gate — metrics.json and gates. A job's metrics.json must be an
 * object of finite numbers, the known classification and regression metrics
 * within their ranges; a gate is a list of comparisons, each against a fixed
 * threshold or against the same metric of the model's production version
 * (plus or minus an offset). Evaluating a gate gives one result per
 * comparison and, when any fails, a reason that shows the numbers:
 * "gate failed: accuracy 0.82 < 0.9". Numbers are printed in the shortest
 * form that reads back the same.
 */
#include "plan/gate.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define QMAX 60            /* bytes of a user value quoted in a message */
#define QBUF (4 * QMAX + 16)
#define NUMBUF GATE_NUMBUF
#define MAX_METRIC_NAME 64
#define METRIC_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-/:"

/* The metrics Ferry knows, with their ranges (hi is INFINITY when open). */
static const struct known_metric {
	const char *name;
	double lo, hi;
} known_metrics[] = {
	{"accuracy", 0, 1}, {"precision", 0, 1}, {"recall", 0, 1}, {"f1", 0, 1},
	{"mae", 0, INFINITY}, {"mse", 0, INFINITY}, {"rmse", 0, INFINITY},
};

/* Comparison operators; two-character ones first so that ">=" is not ">". */
static const struct gate_op {
	const char *op, *negated;
} gate_ops[] = {
	{">=", "<"}, {"<=", ">"}, {"==", "!="}, {"!=", "=="}, {">", "<="}, {"<", ">="},
};

#define OPS_LIST ">=, >, <=, <, ==, !="

/* ---- helpers ---------------------------------------------------------- */

/* s (n bytes) quoted for a message, clipped at QMAX bytes (util's quote_clip). */
static const char *quote(char buf[QBUF], const char *s, size_t n)
{
	return quote_clip(buf, QBUF, s, n, QMAX);
}

const char *gate_num(char buf[GATE_NUMBUF], double v)
{
	/* plain digits between 0.0001 and 1e15: 50 reads "50", not the "5e+01" %.1g gives */
	bool plain = fabs(v) >= 1e-4 && fabs(v) < 1e15;
	int prec;

	for (prec = 1; prec <= 17; prec++) {
		snprintf(buf, NUMBUF, "%.*g", prec, v);
		if (strtod(buf, NULL) == v && !(plain && strchr(buf, 'e') != NULL))
			break;
	}
	return buf;
}

static const struct known_metric *known_metric(const char *name)
{
	size_t i;

	for (i = 0; i < NELEM(known_metrics); i++)
		if (strcmp(name, known_metrics[i].name) == 0)
			return &known_metrics[i];
	return NULL;
}

/* "accuracy is between 0 and 1" or "mae is 0 or more". */
static char *range_text(const struct known_metric *m)
{
	char lo[NUMBUF], hi[NUMBUF];

	if (isinf(m->hi))
		return xasprintf("%s is %s or more", m->name, gate_num(lo, m->lo));
	return xasprintf("%s is between %s and %s", m->name, gate_num(lo, m->lo),
			 gate_num(hi, m->hi));
}

static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "a list";
	case JSON_STRING:
		return "a string";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		return "null";
	default:
		return "a number";
	}
}

static const struct gate_op *find_op(const char *op)
{
	size_t i;

	for (i = 0; op != NULL && i < NELEM(gate_ops); i++)
		if (strcmp(op, gate_ops[i].op) == 0)
			return &gate_ops[i];
	return NULL;
}

bool metrics_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	return n > 0 && n <= MAX_METRIC_NAME && strspn(name, METRIC_CHARS) == n;
}

/* ---- metrics.json ----------------------------------------------------- */

int metrics_parse(json_t **out, const char *text, size_t len)
{
	const struct known_metric *km;
	json_error_t jerr;
	json_t *doc = NULL, *res = NULL, *v;
	const char *key;
	char qk[QBUF], num[NUMBUF], *range = NULL;
	size_t i;
	int error = FERRY_EINVALID;

	*out = NULL;
	if (text == NULL)
		len = 0;
	if (len > METRICS_MAX_BYTES) {
		ferry_error_set("metrics.json: the file is %zu bytes; metrics are limited to %d bytes",
				len, METRICS_MAX_BYTES);
		goto out;
	}
	for (i = 0; i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' ||
				text[i] == '\n'); i++)
		;
	if (i == len) {
		ferry_error_set("metrics.json: the file is empty; write a JSON object of numbers, "
				"e.g. {\"accuracy\": 0.93}");
		goto out;
	}
	doc = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES |
			 JSON_DECODE_INT_AS_REAL, &jerr);
	if (doc == NULL) {
		ferry_error_set("metrics.json: invalid JSON at line %d, column %d: %s", jerr.line,
				jerr.column, jerr.text);
		goto out;
	}
	if (!json_is_object(doc)) {
		ferry_error_set("metrics.json: expected a JSON object of numbers, e.g. "
				"{\"accuracy\": 0.93}, not %s", json_kind(doc));
		goto out;
	}
	res = json_object();
	json_object_foreach(doc, key, v) {
		double d = json_is_number(v) ? json_number_value(v) : NAN;

		quote(qk, key, strlen(key));
		if (!json_is_number(v)) {
			ferry_error_set("metrics.json: %s is %s; metrics must be numbers", qk,
					json_kind(v));
			goto out;
		}
		if (!isfinite(d)) {
			ferry_error_set("metrics.json: %s is not a finite number", qk);
			goto out;
		}
		km = known_metric(key);
		if (km != NULL && (d < km->lo || d > km->hi)) {
			range = range_text(km);
			ferry_error_set("metrics.json: %s is %s; %s", qk, gate_num(num, d), range);
			goto out;
		}
		json_object_set_new(res, key, json_real(d));
	}
	*out = res;
	res = NULL;
	error = FERRY_OK;
out:
	free(range);
	json_decref(res);
	json_decref(doc);
	return error;
}

/* ---- gate comparisons ------------------------------------------------- */

static const char *skip_blanks(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	return p;
}

/*
 * Reads a decimal number at *p ([+-]digits[.digits][e[+-]digits], no inf,
 * nan or hex) and moves *p past it. False when there is none.
 */
static bool read_number(const char **p, bool sign_ok, double *out)
{
	const char *s = *p, *e = s;
	size_t digits = 0;
	char buf[64];

	if (sign_ok && (*e == '+' || *e == '-'))
		e++;
	for (; *e >= '0' && *e <= '9'; e++)
		digits++;
	if (*e == '.')
		for (e++; *e >= '0' && *e <= '9'; e++)
			digits++;
	if (digits == 0)
		return false;
	if (*e == 'e' || *e == 'E') {
		const char *x = e + 1;
		if (*x == '+' || *x == '-')
			x++;
		if (*x >= '0' && *x <= '9') {
			while (*x >= '0' && *x <= '9')
				x++;
			e = x;
		}
	}
	if ((size_t)(e - s) >= sizeof(buf))
		return false;
	memcpy(buf, s, (size_t)(e - s));
	buf[e - s] = '\0';
	*out = strtod(buf, NULL);
	*p = e;
	return true;
}

/* "expected a number, …" for the grammar flags allow. */
static const char *expected_text(unsigned flags)
{
	if (flags & GATE_EXPR_FACTOR)
		return flags & GATE_EXPR_PERCENT ?
			"expected a number (N or N%), production, or production + N / "
			"production - N / production * F" :
			"expected a number, production, or production + N / production - N / "
			"production * F";
	return flags & GATE_EXPR_PERCENT ?
		"expected a number (N or N%), production, or production + N / production - N" :
		"expected a number, production, or production + N / production - N";
}

/* Reads a number, then a % when flags allow it (the number becomes a fraction). */
static bool read_amount(const char **p, bool sign_ok, unsigned flags, double *out, int *percent)
{
	if (!read_number(p, sign_ok, out))
		return false;
	if ((flags & GATE_EXPR_PERCENT) && **p == '%') {
		*out /= 100;
		*percent = 1;
		(*p)++;
	}
	return true;
}

int gate_expr_parse(struct gate_expr *out, const char *what, const char *expr, unsigned flags)
{
	const struct gate_op *op = NULL;
	const char *p;
	char qe[QBUF], num[NUMBUF];
	size_t i;

	memset(out, 0, sizeof(*out));
	out->factor = 1;
	if (expr == NULL)
		expr = "";
	quote(qe, expr, strlen(expr));
	p = skip_blanks(expr);
	for (i = 0; i < NELEM(gate_ops) && op == NULL; i++)
		if (strncmp(p, gate_ops[i].op, strlen(gate_ops[i].op)) == 0)
			op = &gate_ops[i];
	if (op == NULL) {
		ferry_error_set("%s %s: no comparison; write OP VALUE with OP one of "
				OPS_LIST " (e.g. \">= 0.9\" or \">= production\")", what, qe);
		return FERRY_EINVALID;
	}
	out->op = op->op;
	out->negated = op->negated;
	p = skip_blanks(p + strlen(op->op));
	if (strncmp(p, "production", 10) == 0) {
		out->production = 1;
		p = skip_blanks(p + 10);
		if (*p == '+' || *p == '-') {
			bool minus = *p == '-';
			p = skip_blanks(p + 1);
			if (!read_amount(&p, false, flags, &out->offset, &out->percent))
				p = "?"; /* reported below */
			out->offset = minus ? -out->offset : out->offset;
		} else if (*p == '*' && (flags & GATE_EXPR_FACTOR)) {
			p = skip_blanks(p + 1);
			if (!read_number(&p, false, &out->factor))
				p = "?";
		}
	} else if (!read_amount(&p, true, flags, &out->value, &out->percent)) {
		p = "?";
	}
	if (*skip_blanks(p) != '\0') {
		ferry_error_set("%s %s: %s after \"%s\"", what, qe, expected_text(flags), op->op);
		return FERRY_EINVALID;
	}
	if (!isfinite(out->value) || !isfinite(out->offset) || !isfinite(out->factor)) {
		ferry_error_set("%s %s: the number is too large", what, qe);
		return FERRY_EINVALID;
	}
	if (out->factor <= 0) {
		ferry_error_set("%s %s: the factor %s must be more than 0", what, qe,
				gate_num(num, out->factor));
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

int gate_parse(json_t **out, const char *metric, const char *expr)
{
	const struct known_metric *km;
	struct gate_expr e;
	char qm[QBUF], qe[QBUF], num[NUMBUF], *what = NULL, *range = NULL;
	int error = FERRY_EINVALID;

	*out = NULL;
	if (!metrics_name_ok(metric)) {
		ferry_error_set("gate metric name %s is not valid; use 1-%d letters, digits, "
				"_ . - / or :", quote(qm, metric ? metric : "", metric ? strlen(metric) : 0),
				MAX_METRIC_NAME);
		goto out;
	}
	what = xasprintf("gate %s", metric);
	if ((error = gate_expr_parse(&e, what, expr, 0)) < 0)
		goto out;
	error = FERRY_EINVALID;
	quote(qe, expr, strlen(expr)); /* not NULL: gate_expr_parse refused it */
	km = known_metric(metric);
	if (km != NULL && !e.production && (e.value < km->lo || e.value > km->hi)) {
		range = range_text(km);
		ferry_error_set("gate %s %s: %s is out of range; %s", metric, qe, gate_num(num, e.value),
				range);
		goto out;
	}
	if (km != NULL && e.production && fabs(e.offset) > km->hi - km->lo) {
		range = range_text(km);
		ferry_error_set("gate %s %s: the offset %s is larger than the whole range; %s",
				metric, qe, gate_num(num, e.offset), range);
		goto out;
	}
	if (e.production)
		*out = json_pack("{s:s,s:s,s:b,s:f}", "metric", metric, "op", e.op,
				 "production", 1, "offset", e.offset);
	else
		*out = json_pack("{s:s,s:s,s:f}", "metric", metric, "op", e.op, "value", e.value);
	error = FERRY_OK;
out:
	free(range);
	free(what);
	return error;
}

/* ---- evaluation ------------------------------------------------------- */

bool gate_compare(double v, const char *op, double t)
{
	if (strcmp(op, ">=") == 0)
		return v >= t;
	if (strcmp(op, ">") == 0)
		return v > t;
	if (strcmp(op, "<=") == 0)
		return v <= t;
	if (strcmp(op, "<") == 0)
		return v < t;
	if (strcmp(op, "==") == 0)
		return v == t;
	return v != t;
}

double gate_threshold(double production, double offset, double factor)
{
	char buf[NUMBUF];

	if (offset == 0 && factor == 1)
		return production;
	snprintf(buf, sizeof(buf), "%.12g", production * factor + offset);
	return strtod(buf, NULL);
}

/* Checks that item is a gate_parse item; fills its parts. */
static bool item_ok(const json_t *item, const char **metric, const struct gate_op **op,
		    bool *production, double *value)
{
	const json_t *v;

	if (!json_is_object(item))
		return false;
	*metric = json_string_value(json_object_get(item, "metric"));
	*op = find_op(json_string_value(json_object_get(item, "op")));
	*production = json_is_true(json_object_get(item, "production"));
	v = json_object_get(item, *production ? "offset" : "value");
	if (*production && v == NULL)
		*value = 0;
	else if (json_is_number(v))
		*value = json_number_value(v);
	else
		return false;
	return *metric != NULL && *op != NULL && isfinite(*value);
}

/* Appends "; " and the failure text of one comparison to *reason. */
static void add_failure(char **reason, const char *text)
{
	char *r = *reason ? xasprintf("%s; %s", *reason, text) : xasprintf("gate failed: %s", text);

	free(*reason);
	*reason = r;
}

/*
 * Evaluates one comparison (metric OP value, or OP production + value) into
 * the result object r. Returns NULL when it passes, else the failure text
 * (the caller frees it).
 */
static char *eval_item(json_t *r, const char *metric, const struct gate_op *op, bool prod,
		       double value, const json_t *metrics, const json_t *production,
		       const char *label)
{
	const json_t *mv = metrics ? json_object_get(metrics, metric) : NULL;
	const json_t *pv = production ? json_object_get(production, metric) : NULL;
	char nv[NUMBUF], nt[NUMBUF], np[NUMBUF], no[NUMBUF], *text = NULL, *sfx = NULL;
	double v, t = value;

	if (prod) {
		text = label ? xasprintf("production %s", label) : xstrdup("production");
		json_object_set_new(r, "against", json_string(text));
		json_object_set_new(r, "production", json_is_number(pv) ?
				    json_real(json_number_value(pv)) : json_null());
		json_object_set_new(r, "offset", json_real(value));
	}
	if (!json_is_number(mv)) {
		free(text);
		text = xasprintf("%s missing from metrics.json", metric);
		json_object_set_new(r, "note", json_string(text));
		return text;
	}
	v = json_number_value(mv);
	json_object_set_new(r, "value", json_real(v));
	if (prod && production == NULL) {
		json_object_set_new(r, "note", json_string("no production version yet"));
		free(text);
		return NULL;
	}
	if (prod && !json_is_number(pv)) {
		sfx = xasprintf("%s missing from the metrics of %s; not compared", metric, text);
		json_object_set_new(r, "note", json_string(sfx));
		free(sfx);
		free(text);
		return NULL;
	}
	free(text);
	if (prod)
		t = gate_threshold(json_number_value(pv), value, 1);
	json_object_set_new(r, "threshold", json_real(t));
	if (gate_compare(v, op->op, t))
		return NULL;
	if (!prod)
		return xasprintf("%s %s %s %s", metric, gate_num(nv, v), op->negated, gate_num(nt, t));
	sfx = label ? xasprintf(" (%s)", label) : xstrdup("");
	if (value == 0)
		text = xasprintf("%s %s %s production %s%s", metric, gate_num(nv, v), op->negated,
				 gate_num(np, json_number_value(pv)), sfx);
	else
		text = xasprintf("%s %s %s production %s %c %s = %s%s", metric, gate_num(nv, v),
				 op->negated, gate_num(np, json_number_value(pv)),
				 value < 0 ? '-' : '+', gate_num(no, fabs(value)), gate_num(nt, t), sfx);
	free(sfx);
	return text;
}

int gate_eval(json_t **results, char **reason, const json_t *gate, const json_t *metrics,
	      const json_t *production, const char *prod_label)
{
	const struct gate_op *op;
	const char *metric;
	json_t *res = NULL, *r;
	char *text;
	double value;
	bool prod, failed = false;
	size_t i;
	int error = FERRY_EINVALID;

	*results = NULL;
	*reason = NULL;
	if (prod_label != NULL && *prod_label == '\0')
		prod_label = NULL;
	if (!json_is_array(gate) || (metrics != NULL && !json_is_object(metrics)) ||
	    (production != NULL && !json_is_object(production))) {
		ferry_error_set("gate: the gate must be a list and the metrics objects");
		goto out;
	}
	res = json_array();
	for (i = 0; i < json_array_size(gate); i++) {
		if (!item_ok(json_array_get(gate, i), &metric, &op, &prod, &value)) {
			ferry_error_set("gate item %zu is malformed (want metric, op and value, or "
					"production and offset)", i + 1);
			goto out;
		}
		r = json_pack("{s:s,s:s,s:n,s:n,s:b}", "metric", metric, "op", op->op,
			      "threshold", "value", "passed", 1);
		json_array_append_new(res, r);
		text = eval_item(r, metric, op, prod, value, metrics, production, prod_label);
		if (text == NULL)
			continue;
		json_object_set_new(r, "passed", json_false());
		add_failure(reason, text);
		free(text);
		failed = true;
	}
	*results = res;
	res = NULL;
	error = failed ? 0 : 1;
out:
	if (error < 0) {
		free(*reason);
		*reason = NULL;
	}
	json_decref(res);
	return error;
}
