/*
 * cron — cron expressions and their next fire times in an IANA time zone,
 * with an explicit policy for the local times a DST change skips or
 * repeats. The design note (grammar, DST policy, what is not supported)
 * is at the top of cron.c.
 *
 * A parsed expression is immutable and may be shared by threads; every
 * cron_next call opens its own ICU calendar, so API threads and the engine
 * loop may call it at once.
 */
#ifndef FERRY_CRON_H
#define FERRY_CRON_H

#include <stddef.h>
#include <stdint.h>

/* A parsed expression; immutable after parse, shareable across threads. */
struct cron;

/* A local time that does not exist (clocks go forward): fire after the gap, or not at all. */
enum cron_gap { CRON_GAP_SHIFT, CRON_GAP_SKIP };
/* A local time that happens twice (clocks go back): fire on its first or its second occurrence. */
enum cron_overlap { CRON_OVERLAP_FIRST, CRON_OVERLAP_LAST };

/* Longest expression and zone name accepted. */
#define CRON_EXPR_MAX 256
#define CRON_ZONE_MAX 64

/*
 * Parses a 5-field POSIX cron "min hour dom mon dow", or 6 fields with
 * seconds first ("sec min hour dom mon dow", for tests and sub-minute
 * schedules), or @yearly @annually @monthly @weekly @daily @midnight
 * @hourly. Fields: *, N, A-B, * /S (without the space), A-B/S, N/S (from N
 * every S), lists a,b,c; month names JAN-DEC and day names SUN-SAT
 * (case-insensitive), dow 0-7 (7 = Sunday).
 * POSIX day rule: when both dom and dow are restricted (neither starts with
 * "*"), a day matches if EITHER matches; otherwise only the restricted one
 * counts. No L, W, #, ? (rejected with a clear message).
 * Returns 0 with *out the caller's (cron_free), or FERRY_EINVALID with
 * ferry_error_last() naming the field and the rule broken, e.g.
 * `cron "0 25 * * *": field 2 (hour): 25 is out of range 0-23`, and *col
 * (if col != NULL) the 1-based column of the offending token in expr.
 */
int cron_parse(struct cron **out, const char *expr, int *col);
/* Frees c; NULL is fine. */
void cron_free(struct cron *c);

/* FERRY_OK if zone is a known IANA zone id ("UTC", "Europe/Berlin"), else FERRY_EINVALID with a message. */
int cron_zone_check(const char *zone);

struct cron_fire {
	int64_t at;       /* the UTC instant it fires, unix seconds */
	int64_t wall;     /* the local wall time the expression named, as "unix seconds if the zone were UTC" */
	int gap;          /* 1: that wall time did not exist (DST gap); at is the first valid instant after the gap */
	int overlap;      /* 1: that wall time happened twice (DST overlap); at is the first or last per policy */
	int skipped;      /* under CRON_GAP_SKIP: wall times passed over since `after` because a gap ate them */
	char note[160];   /* "" or a sentence for people: "02:30 does not exist in Europe/Berlin on
			     2027-03-28 (clocks go forward): fires at 03:00 GMT+2" / "01:30 happens
			     twice in America/New_York on 2027-11-07: fires once, on the first (EDT)" /
			     "skipped 02:30 on 2027-03-28: it does not exist in Europe/Berlin (clocks go
			     forward)" */
};

/*
 * The first fire strictly after `after` (unix seconds, years 1900-9000).
 * FERRY_ENOTFOUND when none within 5 years ("0 0 30 2 *"); FERRY_EINVALID
 * for an unknown zone or `after` out of range. Semantics: walk matching
 * LOCAL wall times in order; map each to UTC: a wall time in a gap fires at
 * the first instant after the gap (SHIFT) or not at all (SKIP); a wall time
 * in an overlap fires once, at its first (FIRST) or second (LAST)
 * occurrence; a candidate whose UTC instant is <= after is passed over (so
 * after a fall-back, wall times already fired on the first pass are not
 * fired again, and several gap wall times shifted to the same instant fire
 * once).
 */
int cron_next(struct cron_fire *out, const struct cron *c, const char *zone, enum cron_gap gap,
	      enum cron_overlap overlap, int64_t after);

/*
 * The next n fires after `after` (each strictly after the one before) into
 * out[0..n-1], with one calendar for them all (for "the next 10 fire
 * times"). Returns how many were found (fewer than n when the 5-year
 * horizon ends first, counted from each fire), or a negative error as
 * cron_next.
 */
int cron_next_n(struct cron_fire *out, size_t n, const struct cron *c, const char *zone,
		enum cron_gap gap, enum cron_overlap overlap, int64_t after);

#endif
