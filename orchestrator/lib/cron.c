/*
 * cron — see cron.h. A schedule names LOCAL wall times; this module turns
 * them into UTC instants, exactly once per wall time, whatever the DST
 * changes do.
 *
 * Grammar. "min hour dom mon dow", or six fields with seconds first, or a
 * macro (@yearly = @annually "0 0 1 1 *", @monthly "0 0 1 * *", @weekly
 * "0 0 * * 0", @daily = @midnight "0 0 * * *", @hourly "0 * * * *").
 * A field is a comma list of elements; an element is "*", N, A-B, or one
 * of those with "/S" (N/S means N, N+S, ... up to the field's maximum).
 * Month names JAN-DEC and day names SUN-SAT, any case, may stand for
 * numbers; day of week 7 is Sunday like 0. Ranges must go upwards
 * ("FRI-MON" is an error, not a wrap). Day rule as POSIX and cronie: when
 * day of month and day of week are both restricted (neither field starts
 * with "*"), a day matches if either matches; otherwise the restricted one
 * alone decides. Not supported, rejected with a message: Quartz's L, W, #
 * and ?, years, @reboot, named time zones inside the expression (the zone
 * is a separate setting), and ranges that wrap.
 *
 * DST policy, and why. Argo's CronWorkflow and Temporal document that a
 * schedule near a DST change may run zero, one or two times, because they
 * step through UTC (or the local clock) and compare. Here the loop walks the
 * matching local wall times in order and maps each to one UTC instant
 * through ICU's calendar (never a hand-read tz file): a wall time in a gap
 * (02:30 on a spring-forward night) fires at the first instant after the
 * gap (gap shift, the default: the job still runs that day) or not at all
 * (gap skip); a wall time in an overlap (01:30 on a fall-back night) fires
 * once, at its first occurrence (overlap first, the default) or its second
 * (last). A candidate whose instant is not after the previous fire is
 * passed over, so gap wall times shifted onto one instant fire once, and
 * after a fall-back the wall times that fired on the first pass do not fire
 * again. The mapping is monotonic in the wall time, so the first candidate
 * whose instant is later than `after` is the answer: the walk starts at
 * the wall time of `after`, or earlier when a fall-back within two days
 * makes an earlier wall time happen (again) later.
 *
 * Speed. The walk skips by field as cronie and robfig/cron do (next
 * matching month, then day, hour, minute, second, with bit masks), so
 * "0 0 29 2 *" costs a few dozen steps, not five years of minutes; each
 * candidate costs two ICU conversions (first and last occurrence), and
 * one ICU calendar is opened per call, so nothing is shared between
 * threads.
 */
#include "lib/cron.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/ucal.h>
#include <unicode/ustring.h>

#include "lib/util.h"

struct cron {
	uint64_t sec, min; /* bit i: second / minute i matches */
	uint32_t hour;     /* bits 0-23 */
	uint32_t dom;      /* bits 1-31 */
	uint16_t mon;      /* bits 1-12 */
	uint8_t dow;       /* bits 0-6, 0 = Sunday */
	uint8_t dom_star, dow_star;
};

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
					  "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static const struct field_info {
	const char *name;
	int lo, hi;
	const char *const *names; /* names[i] stands for lo + i */
	int nnames;
} fields[F_COUNT] = {
	{"second", 0, 59, NULL, 0},
	{"minute", 0, 59, NULL, 0},
	{"hour", 0, 23, NULL, 0},
	{"day of month", 1, 31, NULL, 0},
	{"month", 1, 12, month_names, 12},
	{"day of week", 0, 7, day_names, 7},
};

static const struct {
	const char *name, *expr;
} macros[] = {
	{"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"},  {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
};

/* What a parse is working on, for its messages. */
struct parse_ctx {
	const char *expr;  /* the whole expression, as given */
	int fieldno;       /* 1-based position of the field in expr */
	int fi;            /* F_* */
	int *col;
};

/* Sets the message `cron "EXPR": field N (NAME): MSG` and *col; returns FERRY_EINVALID. */
static int field_error(const struct parse_ctx *p, const char *at, const char *fmt, ...)
	FERRY_PRINTF(3, 4);
static int field_error(const struct parse_ctx *p, const char *at, const char *fmt, ...)
{
	char q[4 * 80 + 16], msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	quote_clip(q, sizeof(q), p->expr, strlen(p->expr), 80);
	ferry_error_set("cron %s: field %d (%s): %s", q, p->fieldno, fields[p->fi].name, msg);
	if (p->col != NULL)
		*p->col = (int)(at - p->expr) + 1;
	return FERRY_EINVALID;
}

/* An error about the whole expression (no field). */
static int expr_error(const char *expr, int *col, int at, const char *fmt, ...) FERRY_PRINTF(4, 5);
static int expr_error(const char *expr, int *col, int at, const char *fmt, ...)
{
	char q[4 * 80 + 16], msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	quote_clip(q, sizeof(q), expr, strlen(expr), 80);
	ferry_error_set("cron %s: %s", q, msg);
	if (col != NULL)
		*col = at;
	return FERRY_EINVALID;
}

static int is_alpha(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static int is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static char lower(char ch)
{
	return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
}

/* The message for Quartz-only syntax, so people know what to write instead. */
#define QUARTZ_HINT "Quartz's L, W, # and ? are not cron: list the days instead"

/*
 * Reads one value (a number or, where the field has them, a name) at *s,
 * before end; advances *s. The value is range-checked by the caller.
 */
static int read_value(int *out, const char **s, const char *end, const struct parse_ctx *p)
{
	const struct field_info *f = &fields[p->fi];
	const char *start = *s, *q = *s;
	int v = 0;

	if (q < end && is_digit(*q)) {
		while (q < end && is_digit(*q)) {
			if (v <= 9999)
				v = v * 10 + (*q - '0');
			q++;
		}
		if (q < end && (*q == 'L' || *q == 'W' || *q == 'l' || *q == 'w'))
			return field_error(p, start, "\"%.*s\" is not supported (" QUARTZ_HINT ")",
					   (int)(q + 1 - start), start);
		*out = v;
		*s = q;
		return 0;
	}
	if (q < end && is_alpha(*q)) {
		while (q < end && is_alpha(*q))
			q++;
		for (int i = 0; i < f->nnames && q - start == 3; i++)
			if (lower(start[0]) == f->names[i][0] && lower(start[1]) == f->names[i][1] &&
			    lower(start[2]) == f->names[i][2]) {
				*out = f->lo + i;
				*s = q;
				return 0;
			}
		if ((q - start == 1 && (lower(*start) == 'l' || lower(*start) == 'w')) ||
		    (q - start == 2 && lower(start[0]) == 'l' && lower(start[1]) == 'w'))
			return field_error(p, start, "\"%.*s\" is not supported (" QUARTZ_HINT ")",
					   (int)(q - start), start);
		if (f->names == NULL)
			return field_error(p, start, "\"%.*s\" is not a number", (int)(q - start), start);
		return field_error(p, start, "\"%.*s\" is not a %s name (use %s)", (int)(q - start), start,
				   f->name, p->fi == F_MON ? "JAN-DEC" : "SUN-SAT");
	}
	if (q < end && (*q == '?' || *q == '#'))
		return field_error(p, q, "\"%c\" is not supported (" QUARTZ_HINT ")", *q);
	if (q == end)
		return field_error(p, q, "a number is missing");
	return field_error(p, q, "unexpected \"%c\": want a number%s", *q,
			   f->names != NULL ? " or a name" : "");
}

static int check_range(int v, const char *at, const struct parse_ctx *p)
{
	const struct field_info *f = &fields[p->fi];

	if (v < f->lo || v > f->hi)
		return field_error(p, at, "%d is out of range %d-%d", v, f->lo, f->hi);
	return 0;
}

/*
 * Parses one element "*", "N", "A-B", each optionally "/S", in [s, end)
 * into the bits of *mask.
 */
static int parse_element(uint64_t *mask, const char *s, const char *end, const struct parse_ctx *p)
{
	const struct field_info *f = &fields[p->fi];
	const char *q = s, *at;
	int lo, hi, step = 1, rc, ranged = 0;

	if (q == end)
		return field_error(p, q, "an empty list element");
	if (*q == '*') {
		lo = f->lo;
		hi = f->hi == 7 ? 6 : f->hi;
		q++;
		ranged = 1;
	} else {
		at = q;
		if ((rc = read_value(&lo, &q, end, p)) < 0)
			return rc;
		if ((rc = check_range(lo, at, p)) < 0)
			return rc;
		hi = lo;
		if (q < end && *q == '-') {
			q++;
			at = q;
			if ((rc = read_value(&hi, &q, end, p)) < 0)
				return rc;
			if ((rc = check_range(hi, at, p)) < 0)
				return rc;
			if (hi < lo)
				return field_error(p, s, "range %d-%d goes backwards (write the low end first; "
						   "ranges do not wrap)", lo, hi);
			ranged = 1;
		}
	}
	if (q < end && *q == '/') {
		q++;
		at = q;
		if (q == end || !is_digit(*q))
			return field_error(p, at, "a step after \"/\" must be a number");
		step = 0;
		while (q < end && is_digit(*q)) {
			if (step <= 9999)
				step = step * 10 + (*q - '0');
			q++;
		}
		if (step == 0)
			return field_error(p, at, "step 0: a step must be 1 or more");
		if (step > f->hi)
			return field_error(p, at, "step %d is larger than the field's range %d-%d", step,
					   f->lo, f->hi);
		if (!ranged) /* N/S: from N to the end of the field (7/S: Sunday alone) */
			hi = lo > 6 && f->hi == 7 ? lo : (f->hi == 7 ? 6 : f->hi);
	}
	if (q < end) {
		if (*q == '#' || *q == '?' || *q == 'L' || *q == 'W')
			return field_error(p, q, "\"%c\" is not supported (" QUARTZ_HINT ")", *q);
		return field_error(p, q, "unexpected \"%c\" after the %s", *q, ranged ? "range" : "value");
	}
	for (int v = lo; v <= hi; v += step)
		*mask |= (uint64_t)1 << (p->fi == F_DOW && v == 7 ? 0 : v);
	return 0;
}

/* Parses one whole field [s, end) (a comma list) into *mask. */
static int parse_field(uint64_t *mask, const char *s, const char *end, const struct parse_ctx *p)
{
	const char *e;
	int rc;

	*mask = 0;
	for (;;) {
		e = memchr(s, ',', (size_t)(end - s));
		if (e == NULL)
			e = end;
		if ((rc = parse_element(mask, s, e, p)) < 0)
			return rc;
		if (e == end)
			return 0;
		s = e + 1;
	}
}

static int is_space(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* Parses the fields of text (expr itself, or a macro's expansion); errors quote expr. */
static int parse_fields(struct cron *c, const char *expr, const char *text, int *col)
{
	const char *start[F_COUNT + 1], *end[F_COUNT + 1], *s = text;
	struct parse_ctx p = {expr, 0, 0, col};
	uint64_t mask;
	int n = 0, first, rc;

	while (*s != '\0') {
		while (is_space(*s))
			s++;
		if (*s == '\0')
			break;
		if (n == F_COUNT)
			return expr_error(expr, col, (int)(s - expr) + 1,
					  "more than 6 fields: want 5 (minute hour day-of-month month "
					  "day-of-week) or 6 (second first)");
		start[n] = s;
		while (*s != '\0' && !is_space(*s))
			s++;
		end[n++] = s;
	}
	if (n == 0)
		return expr_error(expr, col, 1, "empty: want 5 fields (minute hour day-of-month month "
				  "day-of-week), 6 (second first) or a macro such as @daily");
	if (n < 5)
		return expr_error(expr, col, (int)strlen(expr) + 1,
				  "%d field%s: want 5 (minute hour day-of-month month day-of-week) "
				  "or 6 (second first)", n, n == 1 ? "" : "s");
	first = n == 6 ? F_SEC : F_MIN;
	c->sec = 1; /* five fields: at second 0 */
	for (int i = 0; i < n; i++) {
		p.fieldno = i + 1;
		p.fi = first + i;
		if ((rc = parse_field(&mask, start[i], end[i], &p)) < 0)
			return rc;
		switch (p.fi) {
		case F_SEC: c->sec = mask; break;
		case F_MIN: c->min = mask; break;
		case F_HOUR: c->hour = (uint32_t)mask; break;
		case F_DOM: c->dom = (uint32_t)mask; c->dom_star = start[i][0] == '*'; break;
		case F_MON: c->mon = (uint16_t)mask; break;
		case F_DOW: c->dow = (uint8_t)mask; c->dow_star = start[i][0] == '*'; break;
		}
	}
	return 0;
}

int cron_parse(struct cron **out, const char *expr, int *col)
{
	struct cron *c = NULL;
	const char *s, *text;
	size_t len;
	int rc;

	*out = NULL;
	if (col != NULL)
		*col = 0;
	if (expr == NULL)
		return expr_error("", col, 1, "no expression");
	len = strnlen(expr, CRON_EXPR_MAX + 1);
	if (len > CRON_EXPR_MAX)
		return expr_error(expr, col, CRON_EXPR_MAX + 1, "longer than %d characters", CRON_EXPR_MAX);
	for (s = expr; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 && *s != '\t')
			return expr_error(expr, col, (int)(s - expr) + 1,
					  "a control character (a cron expression is one line)");
	text = expr;
	for (s = expr; is_space(*s); s++)
		;
	if (*s == '@') {
		const char *e = s;
		size_t n;

		while (*e != '\0' && !is_space(*e))
			e++;
		n = (size_t)(e - s);
		text = NULL;
		for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
			if (strlen(macros[i].name) == n && strncasecmp(macros[i].name, s, n) == 0)
				text = macros[i].expr;
		if (text == NULL)
			return expr_error(expr, col, (int)(s - expr) + 1,
					  "unknown macro \"%.*s\": want @yearly, @annually, @monthly, "
					  "@weekly, @daily, @midnight or @hourly", (int)(n > 40 ? 40 : n), s);
		while (is_space(*e))
			e++;
		if (*e != '\0')
			return expr_error(expr, col, (int)(e - expr) + 1,
					  "unexpected text after the macro %.*s", (int)n, s);
	}
	c = xcalloc(1, sizeof(*c));
	if ((rc = parse_fields(c, expr, text, col)) < 0) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void cron_free(struct cron *c)
{
	free(c);
}

/* ---- civil time: days since 1970-01-01 from a proleptic Gregorian date and back (H. Hinnant) ---- */

struct civil {
	int y, mo, d, h, mi, s;
};

static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = (int)(yoe + era * 400 + (*m <= 2));
}

static int64_t floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static void civil_of(struct civil *t, int64_t wall)
{
	int64_t days = floor_div(wall, 86400), sod = wall - days * 86400;

	civil_from_days(days, &t->y, &t->mo, &t->d);
	t->h = (int)(sod / 3600);
	t->mi = (int)(sod / 60 % 60);
	t->s = (int)(sod % 60);
}

static int64_t wall_of(const struct civil *t)
{
	return days_from_civil(t->y, t->mo, t->d) * 86400 + t->h * 3600 + t->mi * 60 + t->s;
}

static int days_in_month(int y, int m)
{
	static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

	if (m == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))
		return 29;
	return dim[m - 1];
}

/* The lowest set bit of mask at or above from, no higher than hi; -1 when none. */
static int next_bit(uint64_t mask, int from, int hi)
{
	uint64_t m;

	if (from > hi)
		return -1;
	m = mask >> from << from;
	if (hi < 63)
		m &= ((uint64_t)1 << (hi + 1)) - 1;
	return m == 0 ? -1 : __builtin_ctzll(m);
}

static int day_matches(const struct cron *c, int y, int m, int d)
{
	int dow = (int)((days_from_civil(y, m, d) % 7 + 11) % 7); /* 1970-01-01 was a Thursday (4) */
	int dom_ok = (c->dom >> d) & 1, dow_ok = (c->dow >> dow) & 1;

	if (c->dom_star || c->dow_star)
		return dom_ok && dow_ok;
	return dom_ok || dow_ok;
}

/*
 * The first wall time >= from that the expression matches, into *out;
 * FERRY_ENOTFOUND when it would be after limit. Skips by field: a month
 * that does not match moves to the next month, a day to the next day, and
 * so on down, so the work is a few steps per field, not per second.
 */
static int wall_next(int64_t *out, const struct cron *c, int64_t from, int64_t limit)
{
	struct civil t;
	int64_t w = from;
	int v, dim;

	for (;;) {
		if (w > limit)
			return FERRY_ENOTFOUND;
		civil_of(&t, w);
		v = next_bit(c->mon, t.mo, 12);
		if (v < 0) { /* next year, first matching month */
			t.y++;
			t.mo = 1;
			t.d = 1;
			t.h = t.mi = t.s = 0;
			w = wall_of(&t);
			continue;
		}
		if (v != t.mo) {
			t.mo = v;
			t.d = 1;
			t.h = t.mi = t.s = 0;
			w = wall_of(&t);
			continue;
		}
		dim = days_in_month(t.y, t.mo);
		for (v = t.d; v <= dim && !day_matches(c, t.y, t.mo, v); v++)
			;
		if (v > dim) { /* next month */
			t.d = 1;
			t.h = t.mi = t.s = 0;
			w = wall_of(&t) + (int64_t)dim * 86400;
			continue;
		}
		if (v != t.d) {
			t.d = v;
			t.h = t.mi = t.s = 0;
		}
		v = next_bit(c->hour, t.h, 23);
		if (v < 0) { /* next day */
			t.h = t.mi = t.s = 0;
			w = wall_of(&t) + 86400;
			continue;
		}
		if (v != t.h) {
			t.h = v;
			t.mi = t.s = 0;
		}
		v = next_bit(c->min, t.mi, 59);
		if (v < 0) { /* next hour */
			t.mi = t.s = 0;
			w = wall_of(&t) + 3600;
			continue;
		}
		if (v != t.mi) {
			t.mi = v;
			t.s = 0;
		}
		v = next_bit(c->sec, t.s, 59);
		if (v < 0) { /* next minute */
			t.s = 0;
			w = wall_of(&t) + 60;
			continue;
		}
		t.s = v;
		w = wall_of(&t);
		if (w > limit)
			return FERRY_ENOTFOUND;
		*out = w;
		return 0;
	}
}

/* ---- time zones, through ICU ---- */

/* 1900-01-01 and 9000-01-01 UTC: the instants cron_next accepts. */
#define AFTER_MIN (-2208988800LL)
#define AFTER_MAX (221845392000LL)
/* How far ahead a fire is looked for: five years of wall time. */
#define HORIZON (5LL * 366 * 86400)
/* Candidates one call may look at before it gives up (a bound, never reached in practice). */
#define MAX_CANDIDATES 1000000

static int zone_uchars(UChar *buf, size_t cap, const char *zone)
{
	size_t n;

	if (zone == NULL || zone[0] == '\0') {
		ferry_error_set("no time zone: use an IANA zone id such as \"UTC\" or \"Europe/Berlin\"");
		return FERRY_EINVALID;
	}
	n = strnlen(zone, CRON_ZONE_MAX + 1);
	/* zone ids are printable ASCII: anything else is no zone (and no UChar conversion surprise) */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)zone[i] <= 0x20 || (unsigned char)zone[i] >= 0x7f) {
			n = CRON_ZONE_MAX + 1;
			break;
		}
	if (n > CRON_ZONE_MAX || n + 1 > cap) {
		char q[4 * 64 + 16];

		ferry_error_set("unknown time zone %s: use an IANA zone id such as \"UTC\" or "
				"\"Europe/Berlin\"", quote_clip(q, sizeof(q), zone, strlen(zone), 64));
		return FERRY_EINVALID;
	}
	u_charsToUChars(zone, buf, (int32_t)n);
	buf[n] = 0;
	return 0;
}

int cron_zone_check(const char *zone)
{
	UChar id[CRON_ZONE_MAX + 1], canon[128];
	UErrorCode st = U_ZERO_ERROR;
	UBool sys = 0;
	int rc;

	if ((rc = zone_uchars(id, sizeof(id) / sizeof(id[0]), zone)) < 0)
		return rc;
	/*
	 * ucal_open takes any name and silently falls back to "Etc/Unknown"
	 * (GMT): only a name ICU knows as a system zone is a zone.
	 */
	ucal_getCanonicalTimeZoneID(id, -1, canon, (int32_t)(sizeof(canon) / sizeof(canon[0])), &sys,
				    &st);
	if (U_FAILURE(st) || !sys) {
		char q[4 * 64 + 16];

		ferry_error_set("unknown time zone %s: use an IANA zone id such as \"UTC\" or "
				"\"Europe/Berlin\" (names are case-sensitive)",
				quote_clip(q, sizeof(q), zone, strlen(zone), 64));
		return FERRY_EINVALID;
	}
	return 0;
}

/* A calendar for zone, the caller's (ucal_close). */
static int cal_open(UCalendar **out, const char *zone)
{
	UChar id[CRON_ZONE_MAX + 1];
	UErrorCode st = U_ZERO_ERROR;
	UCalendar *cal;
	int rc;

	*out = NULL;
	if ((rc = cron_zone_check(zone)) < 0)
		return rc;
	if ((rc = zone_uchars(id, sizeof(id) / sizeof(id[0]), zone)) < 0)
		return rc;
	cal = ucal_open(id, -1, "en_US", UCAL_GREGORIAN, &st);
	if (U_FAILURE(st)) {
		ferry_error_set("time zone \"%s\": ICU calendar: %s", zone, u_errorName(st));
		ucal_close(cal);
		return FERRY_ERROR;
	}
	/* a wall time in a gap maps to the first instant after it; cron_next decides whether to fire */
	ucal_setAttribute(cal, UCAL_SKIPPED_WALL_TIME, UCAL_WALLTIME_NEXT_VALID);
	*out = cal;
	return 0;
}

/* The zone's UTC offset at instant t, in seconds. */
static int64_t offset_at(UCalendar *cal, int64_t t, UErrorCode *st)
{
	ucal_setMillis(cal, (UDate)t * 1000.0, st);
	return ((int64_t)ucal_get(cal, UCAL_ZONE_OFFSET, st) + ucal_get(cal, UCAL_DST_OFFSET, st)) / 1000;
}

/* The instant of wall time w, the first or last occurrence (which) if repeated; after a gap if skipped. */
static int64_t instant_of(UCalendar *cal, int64_t w, UCalendarWallTimeOption which, UErrorCode *st)
{
	struct civil t;
	UDate ms;

	civil_of(&t, w);
	ucal_setAttribute(cal, UCAL_REPEATED_WALL_TIME, which);
	ucal_clear(cal);
	ucal_setDateTime(cal, t.y, t.mo - 1, t.d, t.h, t.mi, t.s, st);
	ms = ucal_getMillis(cal, st);
	return floor_div((int64_t)ms, 1000);
}

/* "02:30" or "02:30:15" for wall time w. */
static void fmt_clock(char *buf, size_t cap, int64_t w)
{
	struct civil t;

	civil_of(&t, w);
	if (t.s == 0)
		snprintf(buf, cap, "%02d:%02d", t.h, t.mi);
	else
		snprintf(buf, cap, "%02d:%02d:%02d", t.h, t.mi, t.s);
}

static void fmt_date(char *buf, size_t cap, int64_t w)
{
	struct civil t;

	civil_of(&t, w);
	snprintf(buf, cap, "%04d-%02d-%02d", t.y, t.mo, t.d);
}

/* The zone's short name at instant t ("EDT", or ICU's "GMT+2" where English has none). */
static void fmt_abbrev(char *buf, size_t cap, UCalendar *cal, int64_t t)
{
	UErrorCode st = U_ZERO_ERROR;
	UChar name[32];
	int32_t n, dst;

	ucal_setMillis(cal, (UDate)t * 1000.0, &st);
	dst = ucal_get(cal, UCAL_DST_OFFSET, &st);
	n = ucal_getTimeZoneDisplayName(cal, dst != 0 ? UCAL_SHORT_DST : UCAL_SHORT_STANDARD, "en_US",
					name, (int32_t)(sizeof(name) / sizeof(name[0])), &st);
	if (U_FAILURE(st) || n <= 0 || (size_t)n >= cap || n >= (int32_t)(sizeof(name) / sizeof(name[0]))) {
		snprintf(buf, cap, "local time");
		return;
	}
	name[n] = 0;
	u_austrncpy(buf, name, (int32_t)cap - 1);
	buf[n] = '\0';
}

/*
 * The next fire after `after` with cal open on zone. The walk starts at
 * the lowest wall time that can still happen after `after`: the wall time
 * of `after` itself, or lower if a fall-back in the next two days repeats
 * earlier wall times (only a LAST policy fires those, but the walk passes
 * over the rest cheaply).
 */
static int next_one(struct cron_fire *out, const struct cron *c, UCalendar *cal, const char *zone,
		    enum cron_gap gap, enum cron_overlap overlap, int64_t after)
{
	UErrorCode st = U_ZERO_ERROR;
	int64_t wa, start, w, t, t1, t2, at, first_skip = 0, last_skip = 0, limit;
	int skipped = 0, in_gap, in_overlap;
	char clock[16], clock2[16], date[16], abbr[32];

	memset(out, 0, sizeof(*out));
	if (after < AFTER_MIN || after > AFTER_MAX) {
		ferry_error_set("cron: %lld is outside the years 1900-9000", (long long)after);
		return FERRY_EINVALID;
	}
	wa = after + offset_at(cal, after, &st);
	start = wa;
	t = after;
	for (int i = 0; i < 4 && U_SUCCESS(st); i++) {
		UDate next;

		ucal_setMillis(cal, (UDate)t * 1000.0, &st);
		if (!ucal_getTimeZoneTransitionDate(cal, UCAL_TZ_TRANSITION_NEXT, &next, &st) ||
		    U_FAILURE(st))
			break;
		t = floor_div((int64_t)next, 1000);
		if (t > after + 2 * 86400 || t <= after)
			break;
		w = t + offset_at(cal, t, &st);
		if (w < start)
			start = w;
	}
	if (U_FAILURE(st)) {
		ferry_error_set("cron: time zone \"%s\": ICU: %s", zone, u_errorName(st));
		return FERRY_ERROR;
	}
	limit = wa + HORIZON;
	w = start;
	for (int n = 0; n < MAX_CANDIDATES; n++) {
		if (wall_next(&w, c, w, limit) < 0) {
			ferry_error_set("cron: no fire time within 5 years");
			return FERRY_ENOTFOUND;
		}
		t1 = instant_of(cal, w, UCAL_WALLTIME_FIRST, &st);
		in_gap = U_SUCCESS(st) && t1 + offset_at(cal, t1, &st) != w;
		t2 = in_gap ? t1 : instant_of(cal, w, UCAL_WALLTIME_LAST, &st);
		if (U_FAILURE(st)) {
			ferry_error_set("cron: time zone \"%s\": ICU: %s", zone, u_errorName(st));
			return FERRY_ERROR;
		}
		in_overlap = t2 != t1;
		if (in_gap && gap == CRON_GAP_SKIP) {
			if (w > wa) {
				if (skipped++ == 0)
					first_skip = w;
				last_skip = w;
			}
			w++;
			continue;
		}
		at = overlap == CRON_OVERLAP_LAST ? t2 : t1;
		if (at <= after) {
			w++;
			continue;
		}
		out->at = at;
		out->wall = w;
		out->gap = in_gap;
		out->overlap = in_overlap;
		out->skipped = skipped;
		fmt_clock(clock, sizeof(clock), w);
		fmt_date(date, sizeof(date), w);
		if (in_gap) {
			fmt_clock(clock2, sizeof(clock2), at + offset_at(cal, at, &st));
			fmt_abbrev(abbr, sizeof(abbr), cal, at);
			snprintf(out->note, sizeof(out->note),
				 "%s does not exist in %s on %s (clocks go forward): fires at %s %s", clock,
				 zone, date, clock2, abbr);
		} else if (in_overlap) {
			fmt_abbrev(abbr, sizeof(abbr), cal, at);
			snprintf(out->note, sizeof(out->note),
				 "%s happens twice in %s on %s: fires once, on the %s (%s)", clock, zone, date,
				 overlap == CRON_OVERLAP_LAST ? "second" : "first", abbr);
		} else if (skipped == 1) {
			fmt_clock(clock, sizeof(clock), first_skip);
			fmt_date(date, sizeof(date), first_skip);
			snprintf(out->note, sizeof(out->note),
				 "skipped %s on %s: it does not exist in %s (clocks go forward)", clock, date,
				 zone);
		} else if (skipped > 1) {
			fmt_clock(clock, sizeof(clock), first_skip);
			fmt_clock(clock2, sizeof(clock2), last_skip);
			fmt_date(date, sizeof(date), first_skip);
			snprintf(out->note, sizeof(out->note),
				 "skipped %d times from %s to %s on %s: they do not exist in %s (clocks go "
				 "forward)", skipped, clock, clock2, date, zone);
		}
		return 0;
	}
	ferry_error_set("cron: gave up after %d candidate times", MAX_CANDIDATES);
	return FERRY_ERROR;
}

int cron_next_n(struct cron_fire *out, size_t n, const struct cron *c, const char *zone,
		enum cron_gap gap, enum cron_overlap overlap, int64_t after)
{
	UCalendar *cal = NULL;
	size_t k = 0;
	int rc;

	if ((rc = cal_open(&cal, zone)) < 0)
		return rc;
	for (; k < n && k < INT32_MAX; k++) {
		rc = next_one(&out[k], c, cal, zone, gap, overlap, k == 0 ? after : out[k - 1].at);
		if (rc < 0)
			break;
	}
	ucal_close(cal);
	if (rc == FERRY_ENOTFOUND || rc == 0 || k > 0)
		return (int)k;
	return rc;
}

int cron_next(struct cron_fire *out, const struct cron *c, const char *zone, enum cron_gap gap,
	      enum cron_overlap overlap, int64_t after)
{
	UCalendar *cal = NULL;
	int rc;

	if ((rc = cal_open(&cal, zone)) < 0)
		return rc;
	rc = next_one(out, c, cal, zone, gap, overlap, after);
	ucal_close(cal);
	return rc;
}
