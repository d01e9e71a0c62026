/*
 * Unit tests for orchestrator/cron: a table of expressions with known next
 * fire times (month ends, leap years, the day-of-month/day-of-week rule,
 * steps, ranges, lists, names, macros, seconds), the DST transitions of
 * 2027 in Europe/Berlin, America/New_York and Australia/Lord_Howe under
 * both gap and both overlap policies (single fires and every fire in a
 * window), parse errors with their messages and columns, zone checks, and
 * concurrent use from several threads.
 *
 * The expected instants are not derived from this code. The transitions
 * are zdump's (tzdata on this machine), `zdump -v ZONE | grep 2027`:
 *
 *   Europe/Berlin  Sun Mar 28 00:59:59 2027 UT = 01:59:59 CET  gmtoff=3600
 *   Europe/Berlin  Sun Mar 28 01:00:00 2027 UT = 03:00:00 CEST gmtoff=7200
 *     -> local 02:00-02:59:59 does not exist; first instant after: 01:00Z.
 *   Europe/Berlin  Sun Oct 31 00:59:59 2027 UT = 02:59:59 CEST gmtoff=7200
 *   Europe/Berlin  Sun Oct 31 01:00:00 2027 UT = 02:00:00 CET  gmtoff=3600
 *     -> local 02:00-02:59:59 twice: first 00:00-00:59Z, second 01:00-01:59Z.
 *   America/New_York  Sun Mar 14 06:59:59 2027 UT = 01:59:59 EST gmtoff=-18000
 *   America/New_York  Sun Mar 14 07:00:00 2027 UT = 03:00:00 EDT gmtoff=-14400
 *     -> local 02:00-02:59:59 does not exist; first instant after: 07:00Z.
 *   America/New_York  Sun Nov  7 05:59:59 2027 UT = 01:59:59 EDT gmtoff=-14400
 *   America/New_York  Sun Nov  7 06:00:00 2027 UT = 01:00:00 EST gmtoff=-18000
 *     -> local 01:00-01:59:59 twice: first 05:00-05:59Z, second 06:00-06:59Z.
 *   Australia/Lord_Howe  Sat Apr  3 14:59:59 2027 UT = Apr 4 01:59:59 +11   gmtoff=39600
 *   Australia/Lord_Howe  Sat Apr  3 15:00:00 2027 UT = Apr 4 01:30:00 +1030 gmtoff=37800
 *     -> local 01:30-01:59:59 twice: first 14:30-14:59Z (+11), second 15:00-15:29Z (+10:30).
 *   Australia/Lord_Howe  Sat Oct  2 15:29:59 2027 UT = Oct 3 01:59:59 +1030 gmtoff=37800
 *   Australia/Lord_Howe  Sat Oct  2 15:30:00 2027 UT = Oct 3 02:30:00 +11   gmtoff=39600
 *     -> local 02:00-02:29:59 does not exist; first instant after: 15:30Z.
 *
 * Weekdays were checked with Python's datetime: 2027-01-01 is a Friday,
 * 2027-01-04 and 2027-01-11 Mondays, 2027-01-13 a Wednesday; the Mondays on
 * the 1st/11th/21st/31st of 2027 are Jan 11, Feb 1, Mar 1, May 31, Jun 21,
 * Oct 11, Nov 1; 2100 is not a leap year, 2104 is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"
#include "lib/cron.h"

/* "2027-03-28T01:00:00Z" -> unix seconds, through libc (not the module under test). */
static int64_t iso(const char *s)
{
	struct tm tm;
	char *end;

	memset(&tm, 0, sizeof(tm));
	end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
	assert_non_null(end);
	assert_int_equal(*end, '\0');
	return (int64_t)timegm(&tm);
}

static void iso_of(char *buf, size_t cap, int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* One fire as "2027-03-28T01:00:00Z wall 02:00 gap" (wall: the local time named; flags). */
static void describe(char *buf, size_t cap, const struct cron_fire *f)
{
	char at[32], extra[32] = "";
	time_t w = (time_t)f->wall;
	struct tm tm;

	iso_of(at, sizeof(at), f->at);
	gmtime_r(&w, &tm);
	if (f->skipped > 0)
		snprintf(extra, sizeof(extra), " skipped %d", f->skipped);
	snprintf(buf, cap, "%s wall %02d:%02d%s%s%s", at, tm.tm_hour, tm.tm_min, f->gap ? " gap" : "",
		 f->overlap ? " overlap" : "", extra);
}

static struct cron *parse_ok(const char *expr)
{
	struct cron *c = NULL;
	int col = -1;

	if (cron_parse(&c, expr, &col) != 0)
		fail_msg("cron_parse(\"%s\"): %s", expr, ferry_error_last());
	assert_non_null(c);
	return c;
}

#define SHIFT CRON_GAP_SHIFT
#define SKIP CRON_GAP_SKIP
#define FIRST CRON_OVERLAP_FIRST
#define LAST CRON_OVERLAP_LAST

static const struct next_case {
	const char *expr, *zone;
	enum cron_gap gap;
	enum cron_overlap overlap;
	const char *after, *want; /* want: describe() of the fire */
} next_cases[] = {
	/* month ends: the 31st skips 30-day months */
	{"0 0 31 * *", "UTC", SHIFT, FIRST, "2027-04-01T00:00:00Z", "2027-05-31T00:00:00Z wall 00:00"},
	{"0 0 31 * *", "UTC", SHIFT, FIRST, "2027-05-31T00:00:00Z", "2027-07-31T00:00:00Z wall 00:00"},
	{"0 0 31 * *", "UTC", SHIFT, FIRST, "2027-01-31T00:00:00Z", "2027-03-31T00:00:00Z wall 00:00"},
	/* leap years: 29 Feb; 2100 is not a leap year */
	{"0 0 29 2 *", "UTC", SHIFT, FIRST, "2024-03-01T00:00:00Z", "2028-02-29T00:00:00Z wall 00:00"},
	{"0 0 29 2 *", "UTC", SHIFT, FIRST, "2027-06-15T12:00:00Z", "2028-02-29T00:00:00Z wall 00:00"},
	{"0 0 29 2 *", "UTC", SHIFT, FIRST, "2099-03-01T00:00:00Z", "2104-02-29T00:00:00Z wall 00:00"},
	{"0 0 28 2 *", "UTC", SHIFT, FIRST, "2027-02-28T00:00:00Z", "2028-02-28T00:00:00Z wall 00:00"},
	/* day of month OR day of week when both are restricted */
	{"0 12 13 * FRI", "UTC", SHIFT, FIRST, "2027-01-01T12:00:00Z", "2027-01-08T12:00:00Z wall 12:00"},
	{"0 12 13 * FRI", "UTC", SHIFT, FIRST, "2027-01-08T12:00:00Z", "2027-01-13T12:00:00Z wall 12:00"},
	/* day of week only (day of month "*") */
	{"30 8 * * MON-FRI", "UTC", SHIFT, FIRST, "2027-01-01T09:00:00Z", "2027-01-04T08:30:00Z wall 08:30"},
	{"0 9 * * 7", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-01-03T09:00:00Z wall 09:00"},
	{"0 9 * * sun", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-01-03T09:00:00Z wall 09:00"},
	{"0 9 * * 5-7", "UTC", SHIFT, FIRST, "2027-01-03T09:00:00Z", "2027-01-08T09:00:00Z wall 09:00"},
	/* day of month only (day of week "*") */
	{"0 6 15 * *", "UTC", SHIFT, FIRST, "2027-01-15T06:00:00Z", "2027-02-15T06:00:00Z wall 06:00"},
	/* "*" step in day of month counts as unrestricted (as cronie): both must match */
	{"0 0 */10 * MON", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-01-11T00:00:00Z wall 00:00"},
	{"0 0 */10 * MON", "UTC", SHIFT, FIRST, "2027-03-01T00:00:00Z", "2027-05-31T00:00:00Z wall 00:00"},
	/* steps, ranges, lists */
	{"*/15 * * * *", "UTC", SHIFT, FIRST, "2027-06-01T10:07:00Z", "2027-06-01T10:15:00Z wall 10:15"},
	{"5-20/5 * * * *", "UTC", SHIFT, FIRST, "2027-06-01T10:20:00Z", "2027-06-01T11:05:00Z wall 11:05"},
	{"10/20 * * * *", "UTC", SHIFT, FIRST, "2027-06-01T10:51:00Z", "2027-06-01T11:10:00Z wall 11:10"},
	{"1,2,59 * * * *", "UTC", SHIFT, FIRST, "2027-06-01T10:02:00Z", "2027-06-01T10:59:00Z wall 10:59"},
	{"0 22-23,1 * * *", "UTC", SHIFT, FIRST, "2027-06-01T23:00:00Z", "2027-06-02T01:00:00Z wall 01:00"},
	{"0 0 1 */3 *", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-04-01T00:00:00Z wall 00:00"},
	/* names, any case */
	{"0 0 1 JAN,jul *", "UTC", SHIFT, FIRST, "2027-02-01T00:00:00Z", "2027-07-01T00:00:00Z wall 00:00"},
	{"0 0 1 Mar-May/2 *", "UTC", SHIFT, FIRST, "2027-03-01T00:00:00Z", "2027-05-01T00:00:00Z wall 00:00"},
	/* macros */
	{"@yearly", "UTC", SHIFT, FIRST, "2027-06-01T00:00:00Z", "2028-01-01T00:00:00Z wall 00:00"},
	{"@annually", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z wall 00:00"},
	{"@monthly", "UTC", SHIFT, FIRST, "2027-12-15T00:00:00Z", "2028-01-01T00:00:00Z wall 00:00"},
	{"@weekly", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-01-03T00:00:00Z wall 00:00"},
	{"@daily", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z wall 00:00"},
	{"@midnight", "UTC", SHIFT, FIRST, "2027-01-01T23:59:59Z", "2027-01-02T00:00:00Z wall 00:00"},
	{"@HOURLY", "UTC", SHIFT, FIRST, "2027-01-01T10:00:00Z", "2027-01-01T11:00:00Z wall 11:00"},
	/* six fields, seconds first */
	{"*/10 * * * * *", "UTC", SHIFT, FIRST, "2027-01-01T10:00:05Z", "2027-01-01T10:00:10Z wall 10:00"},
	{"30 59 23 31 12 *", "UTC", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-12-31T23:59:30Z wall 23:59"},
	/* a zone without DST changes in 2027: the offset only */
	{"0 9 * * *", "Asia/Tokyo", SHIFT, FIRST, "2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z wall 09:00"},

	/* Europe/Berlin, spring forward 2027-03-28: 02:00-02:59 local does not exist */
	{"30 2 * * *", "Europe/Berlin", SHIFT, FIRST, "2027-03-27T02:00:00Z", "2027-03-28T01:00:00Z wall 02:30 gap"},
	{"30 2 * * *", "Europe/Berlin", SKIP, FIRST, "2027-03-27T02:00:00Z", "2027-03-29T00:30:00Z wall 02:30 skipped 1"},
	{"30 2 * * *", "Europe/Berlin", SHIFT, FIRST, "2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z wall 02:30"},
	{"0 2 * * *", "Europe/Berlin", SHIFT, LAST, "2027-03-27T12:00:00Z", "2027-03-28T01:00:00Z wall 02:00 gap"},
	{"30 1 * * *", "Europe/Berlin", SKIP, FIRST, "2027-03-27T12:00:00Z", "2027-03-28T00:30:00Z wall 01:30"},
	{"0 3 * * *", "Europe/Berlin", SKIP, FIRST, "2027-03-27T12:00:00Z", "2027-03-28T01:00:00Z wall 03:00"},
	/* Europe/Berlin, fall back 2027-10-31: 02:00-02:59 local twice */
	{"30 2 * * *", "Europe/Berlin", SHIFT, FIRST, "2027-10-30T12:00:00Z", "2027-10-31T00:30:00Z wall 02:30 overlap"},
	{"30 2 * * *", "Europe/Berlin", SHIFT, LAST, "2027-10-30T12:00:00Z", "2027-10-31T01:30:00Z wall 02:30 overlap"},
	{"30 2 * * *", "Europe/Berlin", SHIFT, FIRST, "2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z wall 02:30"},
	/* from inside the first pass: LAST still has the second occurrence ahead, FIRST has fired */
	{"30 2 * * *", "Europe/Berlin", SHIFT, LAST, "2027-10-31T00:40:00Z", "2027-10-31T01:30:00Z wall 02:30 overlap"},
	{"30 2 * * *", "Europe/Berlin", SHIFT, FIRST, "2027-10-31T00:40:00Z", "2027-11-01T01:30:00Z wall 02:30"},
	{"30 2 * * *", "Europe/Berlin", SHIFT, LAST, "2027-10-31T01:30:00Z", "2027-11-01T01:30:00Z wall 02:30"},

	/* America/New_York, spring forward 2027-03-14: 02:00-02:59 local does not exist */
	{"30 2 * * *", "America/New_York", SHIFT, FIRST, "2027-03-13T12:00:00Z", "2027-03-14T07:00:00Z wall 02:30 gap"},
	{"30 2 * * *", "America/New_York", SKIP, FIRST, "2027-03-13T12:00:00Z", "2027-03-15T06:30:00Z wall 02:30 skipped 1"},
	{"30 1 * * *", "America/New_York", SHIFT, FIRST, "2027-03-13T12:00:00Z", "2027-03-14T06:30:00Z wall 01:30"},
	/* America/New_York, fall back 2027-11-07: 01:00-01:59 local twice */
	{"30 1 * * *", "America/New_York", SHIFT, FIRST, "2027-11-06T12:00:00Z", "2027-11-07T05:30:00Z wall 01:30 overlap"},
	{"30 1 * * *", "America/New_York", SKIP, LAST, "2027-11-06T12:00:00Z", "2027-11-07T06:30:00Z wall 01:30 overlap"},
	{"30 1 * * *", "America/New_York", SHIFT, LAST, "2027-11-07T05:45:00Z", "2027-11-07T06:30:00Z wall 01:30 overlap"},
	{"30 1 * * *", "America/New_York", SHIFT, FIRST, "2027-11-07T05:45:00Z", "2027-11-08T06:30:00Z wall 01:30"},
	{"30 0 * * *", "America/New_York", SHIFT, LAST, "2027-11-06T12:00:00Z", "2027-11-07T04:30:00Z wall 00:30"},

	/* Australia/Lord_Howe, DST ends 2027-04-04: 01:30-01:59 local twice (30-minute shift) */
	{"45 1 * * *", "Australia/Lord_Howe", SHIFT, FIRST, "2027-04-03T00:00:00Z", "2027-04-03T14:45:00Z wall 01:45 overlap"},
	{"45 1 * * *", "Australia/Lord_Howe", SHIFT, LAST, "2027-04-03T00:00:00Z", "2027-04-03T15:15:00Z wall 01:45 overlap"},
	{"15 1 * * *", "Australia/Lord_Howe", SHIFT, LAST, "2027-04-03T00:00:00Z", "2027-04-03T14:15:00Z wall 01:15"},
	/* Australia/Lord_Howe, DST starts 2027-10-03: 02:00-02:29 local does not exist */
	{"15 2 * * *", "Australia/Lord_Howe", SHIFT, FIRST, "2027-10-02T00:00:00Z", "2027-10-02T15:30:00Z wall 02:15 gap"},
	{"15 2 * * *", "Australia/Lord_Howe", SKIP, FIRST, "2027-10-02T00:00:00Z", "2027-10-03T15:15:00Z wall 02:15 skipped 1"},
	{"45 2 * * *", "Australia/Lord_Howe", SKIP, FIRST, "2027-10-02T00:00:00Z", "2027-10-02T15:45:00Z wall 02:45"},
};

static void test_cron__next_table(void **state)
{
	char got[96], a[32];
	int failed = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(next_cases) / sizeof(next_cases[0]); i++) {
		const struct next_case *k = &next_cases[i];
		struct cron *c = parse_ok(k->expr);
		struct cron_fire f;
		int rc = cron_next(&f, c, k->zone, k->gap, k->overlap, iso(k->after));

		if (rc != 0) {
			printf("FAIL %s in %s after %s: rc %d: %s\n", k->expr, k->zone, k->after, rc,
			       ferry_error_last());
			failed++;
		} else {
			describe(got, sizeof(got), &f);
			if (strcmp(got, k->want) != 0) {
				iso_of(a, sizeof(a), iso(k->after));
				printf("FAIL %s in %s (%s, %s) after %s:\n  got  %s\n  want %s\n", k->expr,
				       k->zone, k->gap == SKIP ? "skip" : "shift",
				       k->overlap == LAST ? "last" : "first", a, got, k->want);
				failed++;
			}
		}
		cron_free(c);
	}
	assert_int_equal(failed, 0);
}

/* Every fire of expr after `after` up to and including `until`, each described, joined by "\n". */
static void window(char *buf, size_t cap, const char *expr, const char *zone, enum cron_gap gap,
		   enum cron_overlap overlap, const char *after, const char *until)
{
	struct cron *c = parse_ok(expr);
	int64_t t = iso(after), end = iso(until);
	struct cron_fire f;
	char one[96];
	size_t o = 0;

	buf[0] = '\0';
	for (int n = 0; n < 100; n++) {
		assert_int_equal(cron_next(&f, c, zone, gap, overlap, t), 0);
		assert_true(f.at > t);
		if (f.at > end)
			break;
		describe(one, sizeof(one), &f);
		o += (size_t)snprintf(buf + o, cap - o, "%s%s", o == 0 ? "" : "\n", one);
		assert_true(o < cap);
		t = f.at;
	}
	cron_free(c);
}

static const struct window_case {
	const char *expr, *zone;
	enum cron_gap gap;
	enum cron_overlap overlap;
	const char *after, *until, *want;
} window_cases[] = {
	/* Berlin spring: 01:50 CET to 04:00 CEST. Shifted 02:00..02:45 fire once at 03:00 CEST (01:00Z). */
	{"*/15 * * * *", "Europe/Berlin", SHIFT, FIRST, "2027-03-27T23:50:00Z", "2027-03-28T02:00:00Z",
	 "2027-03-28T00:00:00Z wall 01:00\n2027-03-28T00:15:00Z wall 01:15\n"
	 "2027-03-28T00:30:00Z wall 01:30\n2027-03-28T00:45:00Z wall 01:45\n"
	 "2027-03-28T01:00:00Z wall 02:00 gap\n2027-03-28T01:15:00Z wall 03:15\n"
	 "2027-03-28T01:30:00Z wall 03:30\n2027-03-28T01:45:00Z wall 03:45\n"
	 "2027-03-28T02:00:00Z wall 04:00"},
	{"*/15 * * * *", "Europe/Berlin", SKIP, FIRST, "2027-03-27T23:50:00Z", "2027-03-28T02:00:00Z",
	 "2027-03-28T00:00:00Z wall 01:00\n2027-03-28T00:15:00Z wall 01:15\n"
	 "2027-03-28T00:30:00Z wall 01:30\n2027-03-28T00:45:00Z wall 01:45\n"
	 "2027-03-28T01:00:00Z wall 03:00 skipped 4\n2027-03-28T01:15:00Z wall 03:15\n"
	 "2027-03-28T01:30:00Z wall 03:30\n2027-03-28T01:45:00Z wall 03:45\n"
	 "2027-03-28T02:00:00Z wall 04:00"},
	/* Berlin fall: 01:50 CEST to 03:00 CET. FIRST: the CEST pass; LAST: the CET pass. */
	{"*/15 * * * *", "Europe/Berlin", SHIFT, FIRST, "2027-10-30T23:50:00Z", "2027-10-31T02:00:00Z",
	 "2027-10-31T00:00:00Z wall 02:00 overlap\n2027-10-31T00:15:00Z wall 02:15 overlap\n"
	 "2027-10-31T00:30:00Z wall 02:30 overlap\n2027-10-31T00:45:00Z wall 02:45 overlap\n"
	 "2027-10-31T02:00:00Z wall 03:00"},
	{"*/15 * * * *", "Europe/Berlin", SHIFT, LAST, "2027-10-30T23:50:00Z", "2027-10-31T02:00:00Z",
	 "2027-10-31T01:00:00Z wall 02:00 overlap\n2027-10-31T01:15:00Z wall 02:15 overlap\n"
	 "2027-10-31T01:30:00Z wall 02:30 overlap\n2027-10-31T01:45:00Z wall 02:45 overlap\n"
	 "2027-10-31T02:00:00Z wall 03:00"},
	/* New York spring: 01:50 EST to 04:00 EDT */
	{"*/15 * * * *", "America/New_York", SHIFT, FIRST, "2027-03-14T06:50:00Z", "2027-03-14T08:00:00Z",
	 "2027-03-14T07:00:00Z wall 02:00 gap\n2027-03-14T07:15:00Z wall 03:15\n"
	 "2027-03-14T07:30:00Z wall 03:30\n2027-03-14T07:45:00Z wall 03:45\n"
	 "2027-03-14T08:00:00Z wall 04:00"},
	{"*/15 * * * *", "America/New_York", SKIP, LAST, "2027-03-14T06:50:00Z", "2027-03-14T08:00:00Z",
	 "2027-03-14T07:00:00Z wall 03:00 skipped 4\n2027-03-14T07:15:00Z wall 03:15\n"
	 "2027-03-14T07:30:00Z wall 03:30\n2027-03-14T07:45:00Z wall 03:45\n"
	 "2027-03-14T08:00:00Z wall 04:00"},
	/* New York fall: 00:50 EDT to 02:00 EST */
	{"*/15 * * * *", "America/New_York", SHIFT, FIRST, "2027-11-07T04:50:00Z", "2027-11-07T07:00:00Z",
	 "2027-11-07T05:00:00Z wall 01:00 overlap\n2027-11-07T05:15:00Z wall 01:15 overlap\n"
	 "2027-11-07T05:30:00Z wall 01:30 overlap\n2027-11-07T05:45:00Z wall 01:45 overlap\n"
	 "2027-11-07T07:00:00Z wall 02:00"},
	{"*/15 * * * *", "America/New_York", SHIFT, LAST, "2027-11-07T04:50:00Z", "2027-11-07T07:00:00Z",
	 "2027-11-07T06:00:00Z wall 01:00 overlap\n2027-11-07T06:15:00Z wall 01:15 overlap\n"
	 "2027-11-07T06:30:00Z wall 01:30 overlap\n2027-11-07T06:45:00Z wall 01:45 overlap\n"
	 "2027-11-07T07:00:00Z wall 02:00"},
	/* Lord Howe, DST ends: 01:20 +11 to 02:15 +10:30 */
	{"*/15 * * * *", "Australia/Lord_Howe", SHIFT, FIRST, "2027-04-03T14:20:00Z", "2027-04-03T15:45:00Z",
	 "2027-04-03T14:30:00Z wall 01:30 overlap\n2027-04-03T14:45:00Z wall 01:45 overlap\n"
	 "2027-04-03T15:30:00Z wall 02:00\n2027-04-03T15:45:00Z wall 02:15"},
	{"*/15 * * * *", "Australia/Lord_Howe", SHIFT, LAST, "2027-04-03T14:20:00Z", "2027-04-03T15:45:00Z",
	 "2027-04-03T15:00:00Z wall 01:30 overlap\n2027-04-03T15:15:00Z wall 01:45 overlap\n"
	 "2027-04-03T15:30:00Z wall 02:00\n2027-04-03T15:45:00Z wall 02:15"},
	/* Lord Howe, DST starts: 01:40 +10:30 to 03:00 +11 */
	{"*/15 * * * *", "Australia/Lord_Howe", SHIFT, FIRST, "2027-10-02T15:10:00Z", "2027-10-02T16:00:00Z",
	 "2027-10-02T15:15:00Z wall 01:45\n2027-10-02T15:30:00Z wall 02:00 gap\n"
	 "2027-10-02T15:45:00Z wall 02:45\n2027-10-02T16:00:00Z wall 03:00"},
	{"*/15 * * * *", "Australia/Lord_Howe", SKIP, FIRST, "2027-10-02T15:10:00Z", "2027-10-02T16:00:00Z",
	 "2027-10-02T15:15:00Z wall 01:45\n2027-10-02T15:30:00Z wall 02:30 skipped 2\n"
	 "2027-10-02T15:45:00Z wall 02:45\n2027-10-02T16:00:00Z wall 03:00"},
	/* hourly across a fall-back: each wall hour once */
	{"0 * * * *", "America/New_York", SHIFT, FIRST, "2027-11-07T03:30:00Z", "2027-11-07T08:00:00Z",
	 "2027-11-07T04:00:00Z wall 00:00\n2027-11-07T05:00:00Z wall 01:00 overlap\n"
	 "2027-11-07T07:00:00Z wall 02:00\n2027-11-07T08:00:00Z wall 03:00"},
	{"0 * * * *", "America/New_York", SHIFT, LAST, "2027-11-07T03:30:00Z", "2027-11-07T08:00:00Z",
	 "2027-11-07T04:00:00Z wall 00:00\n2027-11-07T06:00:00Z wall 01:00 overlap\n"
	 "2027-11-07T07:00:00Z wall 02:00\n2027-11-07T08:00:00Z wall 03:00"},
	{"0 * * * *", "Europe/Berlin", SHIFT, FIRST, "2027-10-30T22:30:00Z", "2027-10-31T03:00:00Z",
	 "2027-10-30T23:00:00Z wall 01:00\n2027-10-31T00:00:00Z wall 02:00 overlap\n"
	 "2027-10-31T02:00:00Z wall 03:00\n2027-10-31T03:00:00Z wall 04:00"},
	{"0 * * * *", "Europe/Berlin", SHIFT, LAST, "2027-10-30T22:30:00Z", "2027-10-31T03:00:00Z",
	 "2027-10-30T23:00:00Z wall 01:00\n2027-10-31T01:00:00Z wall 02:00 overlap\n"
	 "2027-10-31T02:00:00Z wall 03:00\n2027-10-31T03:00:00Z wall 04:00"},
	/* half past every hour across a spring-forward */
	{"30 * * * *", "Europe/Berlin", SHIFT, FIRST, "2027-03-28T00:00:00Z", "2027-03-28T02:00:00Z",
	 "2027-03-28T00:30:00Z wall 01:30\n2027-03-28T01:00:00Z wall 02:30 gap\n"
	 "2027-03-28T01:30:00Z wall 03:30"},
	{"30 * * * *", "Europe/Berlin", SKIP, FIRST, "2027-03-28T00:00:00Z", "2027-03-28T02:00:00Z",
	 "2027-03-28T00:30:00Z wall 01:30\n2027-03-28T01:30:00Z wall 03:30 skipped 1"},
};

static void test_cron__dst_windows(void **state)
{
	char got[2048];
	int failed = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(window_cases) / sizeof(window_cases[0]); i++) {
		const struct window_case *k = &window_cases[i];

		window(got, sizeof(got), k->expr, k->zone, k->gap, k->overlap, k->after, k->until);
		if (strcmp(got, k->want) != 0) {
			printf("FAIL window %zu: %s in %s (%s, %s) after %s until %s:\n--- got\n%s\n--- want\n%s\n",
			       i, k->expr, k->zone, k->gap == SKIP ? "skip" : "shift",
			       k->overlap == LAST ? "last" : "first", k->after, k->until, got, k->want);
			failed++;
		}
	}
	assert_int_equal(failed, 0);
}

static void expect_note(const char *expr, const char *zone, enum cron_gap gap,
			enum cron_overlap overlap, const char *after, const char *want)
{
	struct cron *c = parse_ok(expr);
	struct cron_fire f;

	assert_int_equal(cron_next(&f, c, zone, gap, overlap, iso(after)), 0);
	assert_string_equal(f.note, want);
	cron_free(c);
}

static void test_cron__notes(void **state)
{
	(void)state;
	expect_note("30 2 * * *", "Europe/Berlin", SHIFT, FIRST, "2027-03-27T12:00:00Z",
		    "02:30 does not exist in Europe/Berlin on 2027-03-28 (clocks go forward): "
		    "fires at 03:00 GMT+2");
	expect_note("30 2 * * *", "America/New_York", SHIFT, FIRST, "2027-03-13T12:00:00Z",
		    "02:30 does not exist in America/New_York on 2027-03-14 (clocks go forward): "
		    "fires at 03:00 EDT");
	expect_note("30 1 * * *", "America/New_York", SHIFT, FIRST, "2027-11-06T12:00:00Z",
		    "01:30 happens twice in America/New_York on 2027-11-07: fires once, on the first (EDT)");
	expect_note("30 1 * * *", "America/New_York", SHIFT, LAST, "2027-11-06T12:00:00Z",
		    "01:30 happens twice in America/New_York on 2027-11-07: fires once, on the second (EST)");
	expect_note("30 2 * * *", "Europe/Berlin", SKIP, FIRST, "2027-03-27T12:00:00Z",
		    "skipped 02:30 on 2027-03-28: it does not exist in Europe/Berlin (clocks go forward)");
	expect_note("*/15 * * * *", "Europe/Berlin", SKIP, FIRST, "2027-03-28T00:50:00Z",
		    "skipped 4 times from 02:00 to 02:45 on 2027-03-28: they do not exist in "
		    "Europe/Berlin (clocks go forward)");
	expect_note("30 2 * * *", "Europe/Berlin", SHIFT, FIRST, "2027-06-01T12:00:00Z", "");
}

static void test_cron__next_n(void **state)
{
	struct cron *c = parse_ok("30 2 * * *");
	struct cron_fire f[10];
	char a[32];
	int n;

	(void)state;
	n = cron_next_n(f, 10, c, "Europe/Berlin", SHIFT, FIRST, iso("2027-03-24T12:00:00Z"));
	assert_int_equal(n, 10);
	/* Mar 25-27 at 02:30 CET (01:30Z), Mar 28 shifted to 01:00Z, then 02:30 CEST (00:30Z) */
	iso_of(a, sizeof(a), f[0].at);
	assert_string_equal(a, "2027-03-25T01:30:00Z");
	iso_of(a, sizeof(a), f[3].at);
	assert_string_equal(a, "2027-03-28T01:00:00Z");
	assert_int_equal(f[3].gap, 1);
	assert_true(strstr(f[3].note, "does not exist") != NULL);
	iso_of(a, sizeof(a), f[9].at);
	assert_string_equal(a, "2027-04-03T00:30:00Z");
	for (int i = 1; i < n; i++) {
		assert_true(f[i].at > f[i - 1].at);
		if (i != 3)
			assert_string_equal(f[i].note, "");
	}
	cron_free(c);

	/*
	 * The horizon (five years from each fire) ends the list: 29 February
	 * every four years from 2028 to 2096, then 2104 is eight years on
	 * (2100 is no leap year): 18 fires.
	 */
	c = parse_ok("0 0 29 2 *");
	n = cron_next_n(f, 10, c, "UTC", SHIFT, FIRST, iso("2027-01-01T00:00:00Z"));
	assert_int_equal(n, 10);
	iso_of(a, sizeof(a), f[0].at);
	assert_string_equal(a, "2028-02-29T00:00:00Z");
	iso_of(a, sizeof(a), f[9].at);
	assert_string_equal(a, "2064-02-29T00:00:00Z");
	{
		struct cron_fire many[40];

		n = cron_next_n(many, 40, c, "UTC", SHIFT, FIRST, iso("2027-01-01T00:00:00Z"));
		assert_int_equal(n, 18);
		iso_of(a, sizeof(a), many[17].at);
		assert_string_equal(a, "2096-02-29T00:00:00Z");
	}
	cron_free(c);
}

static void test_cron__not_found(void **state)
{
	struct cron *c;
	struct cron_fire f;

	(void)state;
	c = parse_ok("0 0 30 2 *");
	assert_int_equal(cron_next(&f, c, "UTC", SHIFT, FIRST, iso("2027-01-01T00:00:00Z")),
			 FERRY_ENOTFOUND);
	assert_string_equal(ferry_error_last(), "cron: no fire time within 5 years");
	assert_int_equal(cron_next_n(&f, 1, c, "Europe/Berlin", SHIFT, FIRST, 0), 0);
	cron_free(c);
	c = parse_ok("0 0 31 4,6,9,11 *");
	assert_int_equal(cron_next(&f, c, "Europe/Berlin", SHIFT, FIRST, iso("2027-01-01T00:00:00Z")),
			 FERRY_ENOTFOUND);
	cron_free(c);
	/* out of the supported years */
	c = parse_ok("@daily");
	assert_int_equal(cron_next(&f, c, "UTC", SHIFT, FIRST, INT64_MAX), FERRY_EINVALID);
	assert_int_equal(cron_next(&f, c, "UTC", SHIFT, FIRST, INT64_MIN), FERRY_EINVALID);
	cron_free(c);
}

static void test_cron__zones(void **state)
{
	struct cron *c = parse_ok("@daily");
	struct cron_fire f;

	(void)state;
	assert_int_equal(cron_zone_check("UTC"), 0);
	assert_int_equal(cron_zone_check("Europe/Berlin"), 0);
	assert_int_equal(cron_zone_check("Australia/Lord_Howe"), 0);
	assert_int_equal(cron_zone_check("US/Eastern"), 0); /* an IANA link */
	assert_int_equal(cron_zone_check("Europe/Berln"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(),
			    "unknown time zone \"Europe/Berln\": use an IANA zone id such as \"UTC\" "
			    "or \"Europe/Berlin\" (names are case-sensitive)");
	/* ICU would open each of these as GMT without a word */
	assert_int_equal(cron_zone_check("europe/berlin"), FERRY_EINVALID);
	assert_int_equal(cron_zone_check("Etc/Unknown"), FERRY_EINVALID);
	assert_int_equal(cron_zone_check("GMT+05:00"), FERRY_EINVALID);
	assert_int_equal(cron_zone_check(""), FERRY_EINVALID);
	assert_int_equal(cron_zone_check(NULL), FERRY_EINVALID);
	assert_int_equal(cron_zone_check("Europe/Berlin "), FERRY_EINVALID);
	assert_int_equal(cron_zone_check("Europe/\xc3\xa9"), FERRY_EINVALID);
	assert_int_equal(cron_zone_check("A/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
			 FERRY_EINVALID);
	assert_int_equal(cron_next(&f, c, "Mars/Olympus", SHIFT, FIRST, 0), FERRY_EINVALID);
	assert_true(strstr(ferry_error_last(), "unknown time zone \"Mars/Olympus\"") != NULL);
	cron_free(c);
}

static const struct bad_case {
	const char *expr, *want; /* want: the whole message */
	int col;
} bad_cases[] = {
	{"0 25 * * *", "cron \"0 25 * * *\": field 2 (hour): 25 is out of range 0-23", 3},
	{"60 * * * *", "cron \"60 * * * *\": field 1 (minute): 60 is out of range 0-59", 1},
	{"* * 0 * *", "cron \"* * 0 * *\": field 3 (day of month): 0 is out of range 1-31", 5},
	{"* * 32 * *", "cron \"* * 32 * *\": field 3 (day of month): 32 is out of range 1-31", 5},
	{"* * * 13 *", "cron \"* * * 13 *\": field 4 (month): 13 is out of range 1-12", 7},
	{"* * * * 8", "cron \"* * * * 8\": field 5 (day of week): 8 is out of range 0-7", 9},
	{"60 * * * * *", "cron \"60 * * * * *\": field 1 (second): 60 is out of range 0-59", 1},
	{"0 0-99 * * *", "cron \"0 0-99 * * *\": field 2 (hour): 99 is out of range 0-23", 5},
	{"* * * *", "cron \"* * * *\": 4 fields: want 5 (minute hour day-of-month month day-of-week) "
		    "or 6 (second first)", 8},
	{"* * * * * * *", "cron \"* * * * * * *\": more than 6 fields: want 5 (minute hour "
			  "day-of-month month day-of-week) or 6 (second first)", 13},
	{"", "cron \"\": empty: want 5 fields (minute hour day-of-month month day-of-week), 6 "
	     "(second first) or a macro such as @daily", 1},
	{"5-2 * * * *", "cron \"5-2 * * * *\": field 1 (minute): range 5-2 goes backwards (write the "
			"low end first; ranges do not wrap)", 1},
	{"0 0 * * FRI-MON", "cron \"0 0 * * FRI-MON\": field 5 (day of week): range 5-1 goes "
			    "backwards (write the low end first; ranges do not wrap)", 9},
	{"*/0 * * * *", "cron \"*/0 * * * *\": field 1 (minute): step 0: a step must be 1 or more", 3},
	{"*/60 * * * *", "cron \"*/60 * * * *\": field 1 (minute): step 60 is larger than the "
			 "field's range 0-59", 3},
	{"*/ * * * *", "cron \"*/ * * * *\": field 1 (minute): a step after \"/\" must be a number", 3},
	{"0 0 L * *", "cron \"0 0 L * *\": field 3 (day of month): \"L\" is not supported "
		      "(Quartz's L, W, # and ? are not cron: list the days instead)", 5},
	{"0 0 15W * *", "cron \"0 0 15W * *\": field 3 (day of month): \"15W\" is not supported "
			"(Quartz's L, W, # and ? are not cron: list the days instead)", 5},
	{"0 0 * * 5L", "cron \"0 0 * * 5L\": field 5 (day of week): \"5L\" is not supported "
		       "(Quartz's L, W, # and ? are not cron: list the days instead)", 9},
	{"0 0 * * 5#3", "cron \"0 0 * * 5#3\": field 5 (day of week): \"#\" is not supported "
			"(Quartz's L, W, # and ? are not cron: list the days instead)", 10},
	{"0 0 ? * MON", "cron \"0 0 ? * MON\": field 3 (day of month): \"?\" is not supported "
			"(Quartz's L, W, # and ? are not cron: list the days instead)", 5},
	{"0 0 * FOO *", "cron \"0 0 * FOO *\": field 4 (month): \"FOO\" is not a month name "
			"(use JAN-DEC)", 7},
	{"0 0 * * JAN", "cron \"0 0 * * JAN\": field 5 (day of week): \"JAN\" is not a day of week "
			"name (use SUN-SAT)", 9},
	{"0 0 * * MONDAY", "cron \"0 0 * * MONDAY\": field 5 (day of week): \"MONDAY\" is not a day "
			   "of week name (use SUN-SAT)", 9},
	{"MON * * * *", "cron \"MON * * * *\": field 1 (minute): \"MON\" is not a number", 1},
	{"1,,2 * * * *", "cron \"1,,2 * * * *\": field 1 (minute): an empty list element", 3},
	{"1, * * * *", "cron \"1, * * * *\": field 1 (minute): an empty list element", 3},
	{"*/5x * * * *", "cron \"*/5x * * * *\": field 1 (minute): unexpected \"x\" after the range", 4},
	{"1-/2 * * * *", "cron \"1-/2 * * * *\": field 1 (minute): unexpected \"/\": want a number", 3},
	{"0 0 1 1- *", "cron \"0 0 1 1- *\": field 4 (month): a number is missing", 9},
	{"@fortnightly", "cron \"@fortnightly\": unknown macro \"@fortnightly\": want @yearly, "
			 "@annually, @monthly, @weekly, @daily, @midnight or @hourly", 1},
	{"@daily 5", "cron \"@daily 5\": unexpected text after the macro @daily", 8},
	{"0\n0 * * *", "cron \"0\\x0a0 * * *\": a control character (a cron expression is one line)", 2},
};

static void test_cron__parse_errors(void **state)
{
	int failed = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *k = &bad_cases[i];
		struct cron *c = (struct cron *)&failed;
		int col = -1, rc = cron_parse(&c, k->expr, &col);

		if (rc != FERRY_EINVALID || c != NULL || col != k->col ||
		    strcmp(ferry_error_last(), k->want) != 0) {
			printf("FAIL parse \"%s\": rc %d, col %d (want %d)\n  got  %s\n  want %s\n",
			       k->expr, rc, col, k->col, ferry_error_last(), k->want);
			failed++;
		}
		cron_free(c == (struct cron *)&failed ? NULL : c);
	}
	assert_int_equal(failed, 0);
}

static void test_cron__parse_limits(void **state)
{
	char long_expr[CRON_EXPR_MAX + 10];
	struct cron *c = NULL;
	int col = 0;

	(void)state;
	/* just at the limit: a long but valid list */
	memset(long_expr, ' ', sizeof(long_expr));
	memcpy(long_expr, "0 0 * * *", 9);
	long_expr[CRON_EXPR_MAX] = '\0';
	assert_int_equal(cron_parse(&c, long_expr, &col), 0);
	cron_free(c);
	long_expr[CRON_EXPR_MAX] = ' ';
	long_expr[CRON_EXPR_MAX + 1] = '\0';
	assert_int_equal(cron_parse(&c, long_expr, &col), FERRY_EINVALID);
	assert_null(c);
	assert_int_equal(col, CRON_EXPR_MAX + 1);
	assert_true(strstr(ferry_error_last(), "longer than 256 characters") != NULL);
	/* NULL col is fine; surrounding whitespace and tabs are fine */
	assert_int_equal(cron_parse(&c, "0 25 * * *", NULL), FERRY_EINVALID);
	assert_int_equal(cron_parse(&c, "\t 0  0 *\t* *  ", NULL), 0);
	cron_free(c);
	assert_int_equal(cron_parse(&c, "  @daily  ", NULL), 0);
	cron_free(c);
	cron_free(NULL);
}

/* Several threads computing fires at once, each checked against the single-threaded answer. */
struct thread_arg {
	const struct cron *c;
	int64_t want;
	int bad;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;
	struct cron_fire f;

	for (int i = 0; i < 300; i++)
		if (cron_next(&f, a->c, "Europe/Berlin", SHIFT, LAST,
			      iso("2027-10-31T00:40:00Z")) != 0 || f.at != a->want)
			a->bad++;
	return NULL;
}

static void test_cron__threads(void **state)
{
	struct cron *c = parse_ok("30 2 * * *");
	struct thread_arg args[4];
	pthread_t th[4];

	(void)state;
	for (int i = 0; i < 4; i++) {
		args[i] = (struct thread_arg){c, iso("2027-10-31T01:30:00Z"), 0};
		assert_int_equal(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(args[i].bad, 0);
	}
	cron_free(c);
}

/* Not a pass/fail bound on speed (machines differ), but a guard against a walk that goes per minute. */
static void test_cron__speed(void **state)
{
	static const char *const exprs[] = {"*/15 * * * *", "0 3 * * MON-FRI", "0 0 29 2 *", "0 0 1 1 *"};
	struct cron_fire f[1000];
	int64_t t0, t1;
	int n;

	(void)state;
	for (size_t i = 0; i < sizeof(exprs) / sizeof(exprs[0]); i++) {
		struct cron *c = parse_ok(exprs[i]);

		t0 = clock_mono_us();
		for (int k = 0; k < 200; k++)
			assert_int_equal(cron_next(&f[0], c, "Europe/Berlin", SHIFT, FIRST,
						   iso("2027-01-01T00:00:00Z") + k * 3607), 0);
		t1 = clock_mono_us();
		n = cron_next_n(f, 1000, c, "Europe/Berlin", SHIFT, FIRST, iso("2027-01-01T00:00:00Z"));
		printf("cron speed: %-16s cron_next %.1f us/call (with ICU open); cron_next_n %.1f us/fire "
		       "(%d fires)\n", exprs[i], (double)(t1 - t0) / 200,
		       (double)(clock_mono_us() - t1) / (n > 0 ? n : 1), n);
		assert_true(t1 - t0 < 200 * 5000); /* 5 ms a call would mean a per-minute walk */
		cron_free(c);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cron__next_table),
		cmocka_unit_test(test_cron__dst_windows),
		cmocka_unit_test(test_cron__notes),
		cmocka_unit_test(test_cron__next_n),
		cmocka_unit_test(test_cron__not_found),
		cmocka_unit_test(test_cron__zones),
		cmocka_unit_test(test_cron__parse_errors),
		cmocka_unit_test(test_cron__parse_limits),
		cmocka_unit_test(test_cron__threads),
		cmocka_unit_test(test_cron__speed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
