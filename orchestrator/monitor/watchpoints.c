/*
 * watchpoints — training-health rules over the metrics file a job writes
 * ($FERRY_METRICS_FILE, JSON lines such as {"step": 100, "loss": 0.31}).
 *
 * One struct watch per attempt. watch_follow() reads what the job appended
 * since the last call, from the saved offset: complete lines only, at most
 * WP_READ_MAX bytes a call, a line over WP_LINE_MAX skipped whole (its
 * tail too, however many calls that takes). A file that is not there yet
 * is no error; one that shrank below the offset or was replaced (another
 * inode) is read again from the start. Each line is a flat JSON object of
 * numbers; Python's json.dumps writes bare NaN, Infinity and -Infinity,
 * which jansson refuses, so those tokens are rewritten outside strings to
 * the strings "nan", "inf" and "-inf" before parsing, and such strings are
 * read as the non-finite numbers they name. Anything else in a line is
 * ignored; a line that is not a JSON object is counted and skipped.
 *
 * Every value read is checked against its metric's rules, which see the
 * running min, max and first value (finite values only, kept as scalars
 * with their steps), so no rule depends on the downsampling. A rule fires
 * once (latched) and keeps the step, value and a message that shows the
 * numbers. The series kept for charts holds the values whose ordinal is a
 * multiple of the stride: when WP_MAX_POINTS - 1 are held, every other one
 * is dropped and the stride doubles, so a series covers the whole run at a
 * resolution that halves as it grows; the newest value is always added at
 * the end when it is not on that grid. At most WP_MAX_METRICS series;
 * watched metrics get theirs first.
 */
#include "monitor/watchpoints.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/gate.h"
#include "lib/util.h"

#define QMAX 60            /* bytes of a user text quoted in a message */
#define QBUF (4 * QMAX + 16)
#define GRID_MAX (WP_MAX_POINTS - 1) /* one slot left for the newest value */
#define STEP_LIMIT 1e18    /* |step| beyond this is not a step: differences stay in int64 */

#define EXPECTED_ANY "expected nan_or_inf, \"not decreasing over N steps\", " \
	"\"not increasing over N steps\", \"OP NUMBER\" or \"OP K * min|max|first\" " \
	"(OP one of >, >=, <, <=)"

static const char *const op_text[] = {">", ">=", "<", "<="};
static const char *const ref_text[] = {"min", "max", "first"};

struct point {
	int64_t step;
	double value;
};

struct series {
	char *name;
	struct point *pts; /* values whose ordinal is a multiple of stride */
	size_t n, cap;
	int64_t stride, count;
	bool watched;      /* has rules: the others skip the rule loop */
	bool have;         /* a finite value was seen: min, max, first mean something */
	bool last_on_grid; /* the newest value is pts[n - 1] */
	double min, max, first, last;
	int64_t min_step, max_step, first_step, last_step;
};

struct wrule {
	char *metric, *text, *message;
	size_t series;
	struct wp_rule r;
	enum wp_action action;
	bool fired, taken;
	uint64_t seq; /* order of firing, for watch_take_fired */
	int64_t step;
	double value;
};

struct watch {
	struct wrule *rules;
	size_t nrules;
	struct series series[WP_MAX_METRICS];
	size_t nseries;
	uint64_t seq;
	int64_t offset;
	bool skipping; /* inside a line over WP_LINE_MAX: drop up to its newline */
	bool have_file;
	int64_t mtime_ns; /* of the file the last follow read, -1 when it found none */
	dev_t dev;
	ino_t ino;
	int64_t lines, malformed, skipped_long, ignored, restarts;
};

/* ---- helpers ---------------------------------------------------------- */

/* s (n bytes) quoted for a message, clipped at QMAX bytes (util's quote_clip). */
static const char *quote(char buf[QBUF], const char *s, size_t n)
{
	return quote_clip(buf, QBUF, s, n, QMAX);
}

/* A number for a message: NaN, Inf, -Inf, or the shortest text that reads back. */
static const char *num(char buf[GATE_NUMBUF], double v)
{
	if (isnan(v))
		return "NaN";
	if (isinf(v))
		return v > 0 ? "Inf" : "-Inf";
	return gate_num(buf, v);
}

/*
 * A value for the monitor document: a number, or NaN, Infinity, -Infinity as
 * those strings (JSON has no such numbers) — what the watchpoint events say
 * too (monitor.c), so the document and the events agree.
 */
static json_t *json_num(double v)
{
	if (isnan(v))
		return json_string("NaN");
	if (isinf(v))
		return json_string(v > 0 ? "Infinity" : "-Infinity");
	return json_real(v);
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

static const char *skip_blank(const char *p)
{
	while (is_blank(*p))
		p++;
	return p;
}

/* Length of the word at p: up to the next blank or the end. */
static size_t word_len(const char *p)
{
	size_t n = 0;

	while (p[n] != '\0' && !is_blank(p[n]))
		n++;
	return n;
}

static bool word_is(const char *p, size_t n, const char *w)
{
	return strlen(w) == n && strncmp(p, w, n) == 0;
}

/* `not "WORD"` for the word at p, or `but the rule ends there`. */
static const char *found(char buf[QBUF + 8], const char *p, size_t n)
{
	char q[QBUF];

	if (n == 0)
		snprintf(buf, QBUF + 8, "but the rule ends there");
	else
		snprintf(buf, QBUF + 8, "not %s", quote(q, p, n));
	return buf;
}

/* ---- rules ------------------------------------------------------------ */

static bool compare(double v, enum wp_op op, double t)
{
	switch (op) {
	case WP_GT:
		return v > t;
	case WP_GE:
		return v >= t;
	case WP_LT:
		return v < t;
	case WP_LE:
		return v <= t;
	}
	return false;
}

/* 0 when only blanks are left at p; else FERRY_EINVALID naming what follows `after`. */
static int expect_end(const char *what, const char *q, const char *p, const char *after)
{
	char qw[QBUF];

	if (*p == '\0')
		return 0;
	ferry_error_set("%s %s: unexpected %s after %s; expected the end of the rule", what, q,
			quote(qw, p, strlen(p)), after);
	return FERRY_EINVALID;
}

/* "decreasing over N steps" (p is after "not"). */
static int parse_not(struct wp_rule *r, const char *what, const char *q, const char *p)
{
	char f[QBUF + 8], *digits = NULL, after[64];
	const char *dir;
	size_t n = word_len(p);
	int64_t steps = 0;
	int error = FERRY_EINVALID;

	if (word_is(p, n, "decreasing")) {
		r->kind = WP_NOT_DECREASING;
		dir = "not decreasing";
	} else if (word_is(p, n, "increasing")) {
		r->kind = WP_NOT_INCREASING;
		dir = "not increasing";
	} else {
		ferry_error_set("%s %s: expected \"decreasing\" or \"increasing\" after \"not\", %s",
				what, q, found(f, p, n));
		goto out;
	}
	p = skip_blank(p + n);
	n = word_len(p);
	if (!word_is(p, n, "over")) {
		ferry_error_set("%s %s: expected \"over\" after \"%s\", %s", what, q, dir,
				found(f, p, n));
		goto out;
	}
	p = skip_blank(p + n);
	n = word_len(p);
	digits = xstrndup(p, n);
	if (n == 0 || digits[0] < '0' || digits[0] > '9' || parse_int64(digits, &steps) < 0 ||
	    steps < 1 || steps > WP_STEPS_MAX) {
		ferry_error_set("%s %s: expected a whole number of steps from 1 to %lld after "
				"\"over\", %s", what, q, (long long)WP_STEPS_MAX, found(f, p, n));
		goto out;
	}
	p = skip_blank(p + n);
	n = word_len(p);
	if (!word_is(p, n, "steps") && !word_is(p, n, "step")) {
		ferry_error_set("%s %s: expected \"steps\" after %lld, %s", what, q, (long long)steps,
				found(f, p, n));
		goto out;
	}
	snprintf(after, sizeof(after), "\"%.*s\"", (int)n, p);
	if ((error = expect_end(what, q, skip_blank(p + n), after)) < 0)
		goto out;
	r->steps = steps;
	error = 0;
out:
	free(digits);
	return error;
}

/* "OP NUMBER" or "OP K * min|max|first" (p at the operator). */
static int parse_compare(struct wp_rule *r, const char *what, const char *q, const char *p)
{
	char f[QBUF + 8], qo[QBUF], after[GATE_NUMBUF + 8];
	size_t n, oplen = 0;
	char *e;
	double v;

	/* the whole run of operator characters, so that "==", "=>", ">>" are named as such */
	while (p[oplen] != '\0' && strchr("<>=!", p[oplen]) != NULL)
		oplen++;
	if (word_is(p, oplen, ">"))
		r->op = WP_GT;
	else if (word_is(p, oplen, ">="))
		r->op = WP_GE;
	else if (word_is(p, oplen, "<"))
		r->op = WP_LT;
	else if (word_is(p, oplen, "<="))
		r->op = WP_LE;
	else {
		ferry_error_set("%s %s: %s is not a watch operator; expected one of >, >=, <, <=",
				what, q, quote(qo, p, oplen));
		return FERRY_EINVALID;
	}
	p += oplen;
	p = skip_blank(p);
	n = word_len(p);
	if (*p == '\0' || strchr("+-.0123456789", *p) == NULL) {
		ferry_error_set("%s %s: expected a number after \"%s\", %s", what, q, op_text[r->op],
				found(f, p, n));
		return FERRY_EINVALID;
	}
	v = strtod(p, &e);
	if (e == p || !isfinite(v)) {
		ferry_error_set("%s %s: expected a %snumber after \"%s\", %s", what, q,
				e == p ? "" : "finite ", op_text[r->op], found(f, p, n));
		return FERRY_EINVALID;
	}
	r->value = v;
	/* the number as written (clipped), not as read back */
	snprintf(after, sizeof(after), "%.*s", (int)(e - p < GATE_NUMBUF ? e - p : GATE_NUMBUF), p);
	p = skip_blank(e);
	if (*p == '\0') {
		r->kind = WP_COMPARE;
		return 0;
	}
	if (*p != '*') {
		ferry_error_set("%s %s: expected the end of the rule or \"* min\", \"* max\" or "
				"\"* first\" after %s, %s", what, q, after, found(f, p, word_len(p)));
		return FERRY_EINVALID;
	}
	p = skip_blank(p + 1);
	n = word_len(p);
	for (size_t i = 0; i < sizeof(ref_text) / sizeof(ref_text[0]); i++) {
		if (word_is(p, n, ref_text[i])) {
			r->kind = WP_COMPARE_REF;
			r->ref = (enum wp_ref)i;
			return expect_end(what, q, skip_blank(p + n), ref_text[i]);
		}
	}
	ferry_error_set("%s %s: expected min, max or first after \"*\", %s", what, q,
			found(f, p, n));
	return FERRY_EINVALID;
}

/* wp_rule_parse with the message starting with what ("watch rule", "watch loss rule"). */
static int rule_parse(const char *what, const char *text, struct wp_rule *out)
{
	struct wp_rule r;
	char q[QBUF], f[QBUF + 8];
	const char *p;
	size_t len, n;
	int error;

	memset(&r, 0, sizeof(r));
	if (text == NULL)
		text = "";
	len = strlen(text);
	quote(q, text, len);
	if (len > WP_RULE_MAX) {
		ferry_error_set("%s %s: the rule is %zu bytes; a rule is at most %d", what, q, len,
				WP_RULE_MAX);
		return FERRY_EINVALID;
	}
	p = skip_blank(text);
	n = word_len(p);
	if (*p == '>' || *p == '<' || *p == '=' || *p == '!') {
		error = parse_compare(&r, what, q, p);
	} else if (word_is(p, n, "nan_or_inf")) {
		r.kind = WP_NAN_OR_INF;
		error = expect_end(what, q, skip_blank(p + n), "nan_or_inf");
	} else if (word_is(p, n, "not")) {
		error = parse_not(&r, what, q, skip_blank(p + n));
	} else {
		ferry_error_set("%s %s: %s, %s", what, q, EXPECTED_ANY, found(f, p, n));
		error = FERRY_EINVALID;
	}
	if (error == 0 && out != NULL)
		*out = r;
	return error;
}

int wp_rule_parse(const char *text, struct wp_rule *out)
{
	return rule_parse("watch rule", text, out);
}

int wp_action_parse(const char *name)
{
	if (name == NULL)
		return -1;
	if (strcmp(name, "notify") == 0)
		return WP_NOTIFY;
	if (strcmp(name, "fail") == 0)
		return WP_FAIL;
	if (strcmp(name, "restart") == 0)
		return WP_RESTART;
	return -1;
}

const char *wp_action_name(enum wp_action a)
{
	switch (a) {
	case WP_FAIL:
		return "fail";
	case WP_RESTART:
		return "restart";
	case WP_NOTIFY:
		break;
	}
	return "notify";
}

/* ---- series ----------------------------------------------------------- */

static struct series *series_find(struct watch *w, const char *name)
{
	for (size_t i = 0; i < w->nseries; i++)
		if (strcmp(w->series[i].name, name) == 0)
			return &w->series[i];
	return NULL;
}

/* A new empty series, or NULL when WP_MAX_METRICS are kept already. */
static struct series *series_add(struct watch *w, const char *name)
{
	struct series *s;

	if (w->nseries == WP_MAX_METRICS)
		return NULL;
	s = &w->series[w->nseries++];
	memset(s, 0, sizeof(*s));
	s->name = xstrdup(name);
	s->stride = 1;
	return s;
}

/* Adds one value after the rules have seen it: running figures, then the grid. */
static void series_push(struct series *s, int64_t step, double v)
{
	int64_t ordinal = s->count++;
	bool on_grid;

	if (isfinite(v)) {
		if (!s->have) {
			s->have = true;
			s->min = s->max = s->first = v;
			s->min_step = s->max_step = s->first_step = step;
		} else if (v < s->min) {
			s->min = v;
			s->min_step = step;
		} else if (v > s->max) {
			s->max = v;
			s->max_step = step;
		}
	}
	s->last = v;
	s->last_step = step;
	on_grid = ordinal % s->stride == 0;
	if (on_grid && s->n == GRID_MAX) {
		/* keep the points at even ordinals of the new stride: the grid stays regular */
		size_t k = 0;

		for (size_t i = 0; i < s->n; i += 2)
			s->pts[k++] = s->pts[i];
		s->n = k;
		s->stride *= 2;
		on_grid = ordinal % s->stride == 0;
	}
	if (on_grid) {
		if (s->n == s->cap) {
			s->cap = s->cap ? 2 * s->cap : 16;
			if (s->cap > GRID_MAX)
				s->cap = GRID_MAX;
			s->pts = xrealloc(s->pts, s->cap * sizeof(*s->pts));
		}
		s->pts[s->n].step = step;
		s->pts[s->n].value = v;
		s->n++;
	}
	s->last_on_grid = on_grid;
}

/* ---- evaluation ------------------------------------------------------- */

/*
 * Whether rule r fires for value v at step, given the series before v;
 * when it does, returns its message (the caller's).
 */
static char *rule_check(const struct wrule *r, const struct series *s, int64_t step, double v)
{
	char a[GATE_NUMBUF], b[GATE_NUMBUF], c[GATE_NUMBUF];
	const struct wp_rule *p = &r->r;
	double ref;
	int64_t ref_step;

	switch (p->kind) {
	case WP_NAN_OR_INF:
		if (isfinite(v))
			return NULL;
		return xasprintf("%s is %s at step %lld", r->metric, num(a, v), (long long)step);
	case WP_COMPARE:
		if (!compare(v, p->op, p->value))
			return NULL;
		return xasprintf("%s = %s at step %lld %s %s", r->metric, num(a, v), (long long)step,
				 op_text[p->op], num(b, p->value));
	case WP_COMPARE_REF:
		if (!s->have)
			return NULL;
		ref = p->ref == WP_REF_MIN ? s->min : p->ref == WP_REF_MAX ? s->max : s->first;
		ref_step = p->ref == WP_REF_MIN ? s->min_step :
			   p->ref == WP_REF_MAX ? s->max_step : s->first_step;
		if (!compare(v, p->op, p->value * ref))
			return NULL;
		return xasprintf("%s = %s at step %lld %s %s * %s (%s %s at step %lld)", r->metric,
				 num(a, v), (long long)step, op_text[p->op], num(b, p->value),
				 ref_text[p->ref], ref_text[p->ref], num(c, ref), (long long)ref_step);
	case WP_NOT_DECREASING:
	case WP_NOT_INCREASING:
		if (!s->have)
			return NULL;
		ref = p->kind == WP_NOT_DECREASING ? s->min : s->max;
		ref_step = p->kind == WP_NOT_DECREASING ? s->min_step : s->max_step;
		/* a new best is progress; NaN is not */
		if (isfinite(v) && (p->kind == WP_NOT_DECREASING ? v < ref : v > ref))
			return NULL;
		if (step - ref_step < p->steps)
			return NULL;
		return xasprintf("%s did not %s over %lld steps (best %s at step %lld, now %s at "
				 "step %lld)", r->metric,
				 p->kind == WP_NOT_DECREASING ? "decrease" : "increase",
				 (long long)p->steps, num(a, ref), (long long)ref_step, num(b, v),
				 (long long)step);
	}
	return NULL;
}

/* Checks value v of series si against its rules that have not fired; returns how many fire. */
static int rules_eval(struct watch *w, size_t si, int64_t step, double v)
{
	int fired = 0;

	if (!w->series[si].watched)
		return 0;
	for (size_t i = 0; i < w->nrules; i++) {
		struct wrule *r = &w->rules[i];
		char *msg;

		if (r->series != si || r->fired)
			continue;
		if ((msg = rule_check(r, &w->series[si], step, v)) == NULL)
			continue;
		r->fired = true;
		r->seq = w->seq++;
		r->step = step;
		r->value = v;
		r->message = msg;
		fired++;
		flog_info("watch: %s %s: %s (%s)", r->metric, r->text, msg, wp_action_name(r->action));
	}
	return fired;
}

/* ---- lines ------------------------------------------------------------ */

/*
 * Copies n bytes of s with Python's bare NaN, Infinity and -Infinity
 * outside strings replaced by "nan", "inf" and "-inf" (quoted), so that
 * jansson reads the line. Any other text is copied as it is: what was not
 * JSON stays not JSON. The result (at most 2n bytes) is the caller's.
 */
static char *rewrite_nonfinite(const char *s, size_t n, size_t *outlen)
{
	static const struct {
		const char *from, *to;
	} tok[] = {{"NaN", "\"nan\""}, {"Infinity", "\"inf\""}, {"-Infinity", "\"-inf\""}};
	char *o = xmalloc(2 * n + 1);
	size_t i = 0, k = 0;
	bool in_str = false;

	while (i < n) {
		size_t j;

		if (in_str) {
			if (s[i] == '\\' && i + 1 < n)
				o[k++] = s[i++];
			else if (s[i] == '"')
				in_str = false;
			o[k++] = s[i++];
			continue;
		}
		for (j = 0; j < sizeof(tok) / sizeof(tok[0]); j++) {
			size_t fl = strlen(tok[j].from);

			if (n - i >= fl && memcmp(s + i, tok[j].from, fl) == 0) {
				memcpy(o + k, tok[j].to, strlen(tok[j].to));
				k += strlen(tok[j].to);
				i += fl;
				break;
			}
		}
		if (j < sizeof(tok) / sizeof(tok[0]))
			continue;
		if (s[i] == '"')
			in_str = true;
		o[k++] = s[i++];
	}
	o[k] = '\0';
	*outlen = k;
	return o;
}

/* The number v holds: a JSON number, or a string naming NaN or an infinity. */
static bool value_of(const json_t *v, double *out)
{
	static const struct {
		const char *name;
		double value;
	} names[] = {{"nan", NAN}, {"-nan", NAN}, {"+nan", NAN}, {"inf", INFINITY},
		     {"+inf", INFINITY}, {"infinity", INFINITY}, {"+infinity", INFINITY},
		     {"-inf", -INFINITY}, {"-infinity", -INFINITY}};
	const char *s;

	if (json_is_number(v)) {
		*out = json_number_value(v);
		return true;
	}
	if ((s = json_string_value(v)) == NULL)
		return false;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcasecmp(s, names[i].name) == 0) {
			*out = names[i].value;
			return true;
		}
	}
	return false;
}

/* Reads one complete line (without its newline); returns how many rules fired. */
static int line_process(struct watch *w, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *doc = NULL, *v;
	const char *key;
	char *text;
	size_t tlen, i;
	int64_t step;
	double d;
	int fired = 0;

	for (i = 0; i < len && is_blank(line[i]); i++)
		;
	if (i == len)
		return 0; /* blank lines are not lines */
	w->lines++;
	text = rewrite_nonfinite(line, len, &tlen);
	doc = json_loadb(text, tlen, JSON_DECODE_INT_AS_REAL, &jerr);
	free(text);
	if (!json_is_object(doc)) {
		w->malformed++;
		goto out;
	}
	step = w->lines;
	if (value_of(json_object_get(doc, "step"), &d) && fabs(d) < STEP_LIMIT)
		step = (int64_t)d;
	json_object_foreach(doc, key, v) {
		struct series *s;

		if (strcmp(key, "step") == 0 || !value_of(v, &d))
			continue;
		s = series_find(w, key);
		if (s == NULL && metrics_name_ok(key))
			s = series_add(w, key);
		if (s == NULL) {
			w->ignored++;
			continue;
		}
		fired += rules_eval(w, (size_t)(s - w->series), step, d);
		series_push(s, step, d);
	}
out:
	json_decref(doc);
	return fired;
}

int watch_feed(struct watch *w, const char *data, size_t len)
{
	size_t pos = 0;
	int fired = 0;

	while (pos < len) {
		const char *nl = memchr(data + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (data + pos)) : len - pos;

		if (n > WP_LINE_MAX)
			w->skipped_long++;
		else
			fired += line_process(w, data + pos, n);
		pos += n + 1;
	}
	return fired;
}

/* ---- the file --------------------------------------------------------- */

static int follow(struct watch *w, const char *path, bool end)
{
	struct stat st;
	char *buf = NULL;
	const char *why = NULL;
	size_t have = 0, pos = 0, rest;
	int fd = -1, fired = 0, error = 0;

	if (path == NULL)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW); /* the job's file (lib/jobfile.h) */
	w->mtime_ns = -1;
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* the job has written nothing yet, or removed it */
		ferry_error_set("metrics file %s: %s", path, strerror(errno));
		return FERRY_ERROR;
	}
	if (fstat(fd, &st) < 0) {
		ferry_error_set("metrics file %s: %s", path, strerror(errno));
		error = FERRY_ERROR;
		goto out;
	}
	/* a FIFO or device could block or never end; O_NONBLOCK kept the open from waiting */
	if (!S_ISREG(st.st_mode)) {
		ferry_error_set("metrics file %s: not a regular file", path);
		error = FERRY_ERROR;
		goto out;
	}
	if (w->have_file && (st.st_dev != w->dev || st.st_ino != w->ino))
		why = "was replaced";
	else if (st.st_size < w->offset)
		why = "shrank below what was read";
	if (why != NULL) {
		flog_warn("watch: metrics file %s %s (offset %lld, size %lld); reading it again "
			  "from the start", path, why, (long long)w->offset, (long long)st.st_size);
		w->offset = 0;
		w->skipping = false;
		w->restarts++;
	}
	w->have_file = true;
	w->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	w->dev = st.st_dev;
	w->ino = st.st_ino;

	buf = xmalloc(WP_READ_MAX);
	while (have < WP_READ_MAX) {
		ssize_t r = pread(fd, buf + have, WP_READ_MAX - have, (off_t)(w->offset + (int64_t)have));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ferry_error_set("metrics file %s: %s", path, strerror(errno));
			error = FERRY_ERROR;
			goto out;
		}
		if (r == 0)
			break;
		have += (size_t)r;
	}
	if (w->skipping) {
		const char *nl = memchr(buf, '\n', have);

		if (nl == NULL) {
			pos = have;
			goto done;
		}
		pos = (size_t)(nl - buf) + 1;
		w->skipping = false;
	}
	while (pos < have) {
		const char *nl = memchr(buf + pos, '\n', have - pos);
		size_t n;

		if (nl == NULL)
			break;
		n = (size_t)(nl - (buf + pos));
		if (n > WP_LINE_MAX)
			w->skipped_long++;
		else
			fired += line_process(w, buf + pos, n);
		pos += n + 1;
	}
	rest = have - pos;
	if (rest > WP_LINE_MAX) {
		/* no newline in more than a line's worth: drop it now, and its tail as it comes */
		w->skipped_long++;
		w->skipping = true;
		pos = have;
	} else if (end && rest > 0 && have < WP_READ_MAX) {
		fired += line_process(w, buf + pos, rest);
		pos = have;
	}
done:
	w->offset += (int64_t)pos;
	error = fired;
out:
	free(buf);
	close(fd);
	return error;
}

int watch_follow(struct watch *w, const char *path)
{
	return follow(w, path, false);
}

int watch_follow_end(struct watch *w, const char *path)
{
	return follow(w, path, true);
}

/* ---- the watch -------------------------------------------------------- */

/* Adds rule i of metric's list (a string, or {"rule","action"}) as series si's. */
static int rule_add(struct watch *w, const char *metric, size_t i, const json_t *item, size_t si)
{
	struct wrule *r = &w->rules[w->nrules];
	const char *text = json_string_value(item), *action = NULL;
	char qa[QBUF], *what = NULL;
	int a = WP_NOTIFY, error = FERRY_EINVALID;

	if (json_is_object(item)) {
		text = json_string_value(json_object_get(item, "rule"));
		action = json_string_value(json_object_get(item, "action"));
		if (json_object_get(item, "action") != NULL && action == NULL)
			action = "";
	}
	if (text == NULL) {
		ferry_error_set("watch %s[%zu]: expected a rule, or {\"rule\": \"...\", \"action\": "
				"\"notify|fail|restart\"}", metric, i);
		goto out;
	}
	if (action != NULL && (a = wp_action_parse(action)) < 0) {
		ferry_error_set("watch %s[%zu]: action %s is not one of notify, fail, restart",
				metric, i, quote(qa, action, strlen(action)));
		goto out;
	}
	what = xasprintf("watch %s rule", metric);
	if ((error = rule_parse(what, text, &r->r)) < 0)
		goto out;
	r->metric = xstrdup(metric);
	r->text = xstrdup(text);
	r->action = (enum wp_action)a;
	r->series = si;
	w->series[si].watched = true;
	w->nrules++;
out:
	free(what);
	return error;
}

int watch_new(struct watch **out, const json_t *spec)
{
	struct watch *w = xcalloc(1, sizeof(*w));
	const char *key;
	const json_t *list, *item;
	char qk[QBUF];
	size_t total = 0, i;
	int error = FERRY_EINVALID;

	*out = NULL;
	w->mtime_ns = -1;
	if (spec != NULL && !json_is_object(spec)) {
		ferry_error_set("watch: expected an object of metric: [rules]");
		goto out;
	}
	if (json_object_size(spec) > WP_MAX_METRICS) {
		ferry_error_set("watch: %zu metrics are watched; at most %d", json_object_size(spec),
				WP_MAX_METRICS);
		goto out;
	}
	json_object_foreach((json_t *)spec, key, list) {
		if (!metrics_name_ok(key) || strcmp(key, "step") == 0) {
			ferry_error_set("watch: metric name %s is not valid; use 1-64 letters, digits, "
					"_ . - / or :, other than step", quote(qk, key, strlen(key)));
			goto out;
		}
		if (!json_is_array(list) && !json_is_string(list)) {
			ferry_error_set("watch %s: expected a list of rules", key);
			goto out;
		}
		total += json_is_array(list) ? json_array_size(list) : 1;
	}
	if (total > WP_MAX_RULES) {
		ferry_error_set("watch: %zu rules; at most %d", total, WP_MAX_RULES);
		goto out;
	}
	w->rules = xcalloc(total ? total : 1, sizeof(*w->rules));
	json_object_foreach((json_t *)spec, key, list) {
		size_t si = (size_t)(series_add(w, key) - w->series);

		if (json_is_string(list)) {
			if ((error = rule_add(w, key, 0, list, si)) < 0)
				goto out;
			continue;
		}
		json_array_foreach(list, i, item) {
			if ((error = rule_add(w, key, i, item, si)) < 0)
				goto out;
		}
	}
	*out = w;
	w = NULL;
	error = 0;
out:
	watch_free(w);
	return error;
}

void watch_free(struct watch *w)
{
	if (w == NULL)
		return;
	for (size_t i = 0; i < w->nrules; i++) {
		free(w->rules[i].metric);
		free(w->rules[i].text);
		free(w->rules[i].message);
	}
	free(w->rules);
	for (size_t i = 0; i < w->nseries; i++) {
		free(w->series[i].name);
		free(w->series[i].pts);
	}
	free(w);
}

int watch_take_fired(struct watch *w, struct wp_fired *out)
{
	struct wrule *best = NULL;

	for (size_t i = 0; i < w->nrules; i++) {
		struct wrule *r = &w->rules[i];

		if (r->fired && !r->taken && (best == NULL || r->seq < best->seq))
			best = r;
	}
	if (best == NULL)
		return 0;
	best->taken = true;
	out->metric = best->metric;
	out->rule = best->text;
	out->message = best->message;
	out->action = best->action;
	out->value = best->value;
	out->step = best->step;
	return 1;
}

/* ---- JSON ------------------------------------------------------------- */

static json_t *point_json(int64_t step, double v)
{
	json_t *p = json_array();

	json_array_append_new(p, json_integer(step));
	json_array_append_new(p, json_num(v));
	return p;
}

json_t *watch_series_json(const struct watch *w)
{
	json_t *all = json_object();

	for (size_t i = 0; i < w->nseries; i++) {
		const struct series *s = &w->series[i];
		json_t *pts = json_array();

		for (size_t k = 0; k < s->n; k++)
			json_array_append_new(pts, point_json(s->pts[k].step, s->pts[k].value));
		if (s->count > 0 && !s->last_on_grid)
			json_array_append_new(pts, point_json(s->last_step, s->last));
		json_object_set_new(all, s->name, json_pack(
			"{s:o,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I}",
			"points", pts, "stride", (json_int_t)s->stride,
			"min", s->have ? json_num(s->min) : json_null(),
			"min_step", s->have ? json_integer(s->min_step) : json_null(),
			"max", s->have ? json_num(s->max) : json_null(),
			"max_step", s->have ? json_integer(s->max_step) : json_null(),
			"first", s->have ? json_num(s->first) : json_null(),
			"first_step", s->have ? json_integer(s->first_step) : json_null(),
			"last", s->count ? json_num(s->last) : json_null(),
			"last_step", s->count ? json_integer(s->last_step) : json_null(),
			"count", (json_int_t)s->count));
	}
	return all;
}

json_t *watch_results_json(const struct watch *w)
{
	json_t *all = json_array();

	for (size_t i = 0; i < w->nrules; i++) {
		const struct wrule *r = &w->rules[i];

		json_array_append_new(all, json_pack(
			"{s:s,s:s,s:s,s:s,s:o,s:o,s:o}", "metric", r->metric, "rule", r->text,
			"action", wp_action_name(r->action), "state", r->fired ? "fired" : "ok",
			"step", r->fired ? json_integer(r->step) : json_null(),
			"value", r->fired ? json_num(r->value) : json_null(),
			"message", r->fired ? json_string(r->message) : json_null()));
	}
	return all;
}

int64_t watch_lines(const struct watch *w)
{
	return w ? w->lines : 0;
}

int64_t watch_mtime_ns(const struct watch *w)
{
	return w ? w->mtime_ns : -1;
}

json_t *watch_stats_json(const struct watch *w)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "lines", (json_int_t)w->lines,
			 "malformed", (json_int_t)w->malformed, "skipped_long",
			 (json_int_t)w->skipped_long, "ignored_metrics", (json_int_t)w->ignored,
			 "offset", (json_int_t)w->offset, "restarts", (json_int_t)w->restarts,
			 "metrics", (json_int_t)w->nseries);
}
