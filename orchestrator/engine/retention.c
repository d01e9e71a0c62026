/*
 * retention — see retention.h. The task's round picks the runs due and
 * returns one item; the rest of this file is what the item does on a worker: for each
 * run, in one transaction that holds the run's row (a retry waits), remove
 * $FERRY_HOME/runs/RUN and set logs_removed_at (store_run_logs_remove). A
 * daemon killed midway leaves the transaction rolled back and the run due:
 * the next round removes what is left and marks it.
 */
#include "engine/retention.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "store/store.h"
#include "lib/util.h"

struct retention_work {
	struct work w;
	char *home;
	double days;
	int64_t *ids;
	int n;
};

/* store_run_logs_remove's callback, inside the run's transaction. */
static void remove_files(int64_t id, void *arg)
{
	const char *home = arg;

	if (run_dir_remove(home, id) < 0)
		flog_warn("retention: run %lld: %s", (long long)id, ferry_error_last());
}

static void retention_run(struct work *w, PGconn *conn)
{
	struct retention_work *r = (struct retention_work *)w;
	int removed = 0, rc;

	/* nothing was changed yet: an unreachable database leaves the runs due for a later round */
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		return;
	for (int i = 0; i < r->n; i++) {
		if ((rc = store_run_logs_remove(conn, r->ids[i], r->days, remove_files, r->home)) < 0) {
			flog_error("retention: run %lld: %s", (long long)r->ids[i], ferry_error_last());
			break;
		}
		removed += rc;
	}
	if (removed > 0)
		flog_info("retention: removed the logs of %d run%s finished more than %g day%s ago", removed,
			  removed == 1 ? "" : "s", r->days, r->days == 1 ? "" : "s");
}

/* An item removing the logs of runs ids[0..n) (taken) below home, each only if still due after days. */
static struct work *retention_work_new(const char *home, double days, int64_t *ids, int n)
{
	struct retention_work *r = xcalloc(1, sizeof(*r));

	r->w.run = retention_run;
	r->home = xstrdup(home);
	r->days = days;
	r->ids = ids;
	r->n = n;
	return &r->w;
}

static void retention_work_free(struct work *w)
{
	struct retention_work *r = (struct retention_work *)w;

	if (r == NULL)
		return;
	free(r->home);
	free(r->ids);
	free(r);
}

/* FERRY_RETENTION_DAYS: a bounded batch of the runs whose logs are due, as one item. */
static struct work *retention_round(struct task_ctx *c, void *state)
{
	int64_t *ids = NULL;
	int n = 0;

	(void)state;
	if (c->retention_days <= 0)
		return NULL;
	if (store_runs_retention_due(&ids, &n, c->conn, c->retention_days, RETENTION_BATCH) < 0) {
		flog_error("runs due for retention: %s", ferry_error_last());
		return NULL;
	}
	if (n == 0) {
		free(ids);
		return NULL;
	}
	return retention_work_new(c->home, c->retention_days, ids, n);
}

static int64_t every_retention_period(const struct task_ctx *c)
{
	return c->retention_period_ms;
}

const struct task retention_task = {
	.name = "retention",
	.flags = TASK_LEADER | TASK_NO_DEV | TASK_POOL,
	.period = every_retention_period,
	.start_round = retention_round,
	.free = retention_work_free,
};

double retention_days_env(void)
{
	const char *v = getenv("FERRY_RETENTION_DAYS");
	char *end = NULL;
	double d;

	if (v == NULL || *v == '\0')
		return 0;
	errno = 0;
	d = strtod(v, &end);
	if (errno != 0 || end == v || *end != '\0' || !isfinite(d) || d < 0) {
		ferry_error_set("FERRY_RETENTION_DAYS \"%s\" must be a number of days >= 0 (0: keep logs "
				"forever; 0.5: twelve hours), e.g. FERRY_RETENTION_DAYS=30", v);
		return -1;
	}
	return d;
}
