/*
 * durations — lengths of time as people write them ("30s", "1h30m"): see
 * durations.h. Pure: no state, no allocation; the message of a bad one
 * quotes it clipped like the config's other messages.
 */
#include "lib/durations.h"

#include <string.h>

#include "lib/util.h"

#define QMAX 60 /* bytes of the value quoted in a message, as the config's */
#define QBUF (4 * QMAX + 16)

int duration_parse(const char *s, int64_t *out_ms)
{
	static const struct { const char *name; int64_t ms; } units[] = {
		{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
	};
	char qs[QBUF], qu[QBUF];
	const char *p, *u;
	int64_t total = 0, num, mult;
	size_t k;

	s = s ? s : "";
	quote_clip(qs, sizeof(qs), s, strlen(s), QMAX);
	if (*s == '\0' || *s < '0' || *s > '9') {
		ferry_error_set("duration %s: expected a number and a unit, e.g. 30s, 5m, 2h", qs);
		return FERRY_EINVALID;
	}
	for (p = s; *p != '\0'; total += num * mult) {
		for (num = 0; *p >= '0' && *p <= '9'; p++) {
			if (num > (INT64_MAX - (*p - '0')) / 10)
				goto overflow;
			num = num * 10 + (*p - '0');
		}
		for (u = p; (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'); p++)
			;
		if (p == u) {
			ferry_error_set(*p == '\0' ? "duration %s: missing unit (use e.g. 30s, 5m, 2h)"
				       : "duration %s: use whole numbers with units, e.g. 90s or 1h30m",
				       qs);
			return FERRY_EINVALID;
		}
		for (mult = 0, k = 0; k < sizeof(units) / sizeof(units[0]); k++)
			if (strlen(units[k].name) == (size_t)(p - u) &&
			    memcmp(u, units[k].name, (size_t)(p - u)) == 0)
				mult = units[k].ms;
		if (mult == 0) {
			ferry_error_set("duration %s: unknown unit %s (use ms, s, m, h or d)", qs,
					quote_clip(qu, sizeof(qu), u, (size_t)(p - u), QMAX));
			return FERRY_EINVALID;
		}
		if (num > INT64_MAX / mult || total > INT64_MAX - num * mult)
			goto overflow;
	}
	if (total <= 0) {
		ferry_error_set("duration %s must be greater than zero", qs);
		return FERRY_EINVALID;
	}
	*out_ms = total;
	return FERRY_OK;
overflow:
	ferry_error_set("duration %s is too large", qs);
	return FERRY_EINVALID;
}
