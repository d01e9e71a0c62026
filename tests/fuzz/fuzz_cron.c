/*
 * libFuzzer target for orchestrator/cron: the bytes are a cron expression.
 * A rejected one must say where (a column inside the text, a message that
 * starts with "cron "); an accepted one is walked forward a few fires in
 * UTC and in Europe/Berlin from just before each 2027 DST change, under the
 * gap and overlap policies the input's length picks, and every fire must
 * be later than the one before, must match cron_next_n's list, and in UTC
 * must be its own wall time. The bytes are also tried as a zone name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "lib/cron.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIRES 4

/* Walks FIRES fires from after; aborts (a finding) when they go backwards or disagree. */
static void walk(const struct cron *c, const char *zone, enum cron_gap gap, enum cron_overlap ov,
		 int64_t after)
{
	struct cron_fire one, list[FIRES];
	int64_t t = after;
	int n = cron_next_n(list, FIRES, c, zone, gap, ov, after);

	if (n < 0 || n > FIRES)
		abort();
	for (int i = 0; i < FIRES; i++) {
		int rc = cron_next(&one, c, zone, gap, ov, t);

		if (rc == FERRY_ENOTFOUND)
			break;
		if (rc != 0 || one.at <= t || i >= n || one.at != list[i].at || one.wall != list[i].wall)
			abort();
		if (strcmp(zone, "UTC") == 0 && (one.at != one.wall || one.gap || one.overlap))
			abort();
		if (one.gap && gap == CRON_GAP_SKIP)
			abort();
		t = one.at;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *expr = xstrndup((const char *)data, size);
	struct cron *c = NULL;
	enum cron_gap gap = size % 2 ? CRON_GAP_SKIP : CRON_GAP_SHIFT;
	enum cron_overlap ov = size % 4 >= 2 ? CRON_OVERLAP_LAST : CRON_OVERLAP_FIRST;
	int col = -1, rc;

	rc = cron_parse(&c, expr, &col);
	if (rc == 0) {
		if (c == NULL)
			abort();
		walk(c, "UTC", gap, ov, 1806105600);           /* 2027-03-27T00:00:00Z */
		walk(c, "Europe/Berlin", gap, ov, 1806192000); /* 2027-03-28T00:00:00Z */
		walk(c, "Europe/Berlin", gap, ov, 1824942000); /* 2027-10-31T00:20:00Z */
	} else {
		if (rc != FERRY_EINVALID || c != NULL || col < 1 || (size_t)col > strlen(expr) + 1 ||
		    strncmp(ferry_error_last(), "cron ", 5) != 0)
			abort();
	}
	cron_free(c);
	(void)cron_zone_check(expr);
	free(expr);
	return 0;
}
