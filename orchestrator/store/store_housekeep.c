/*
 * store_housekeep — the statements of housekeeping: deleting a finished
 * run with its rows (DELETE /runs/{id}, ferry delete) and the retention of
 * old runs' logs (FERRY_RETENTION_DAYS, the leader's `retention` task).
 * The files themselves are removed by the callers (api.c, retention.c),
 * never from a path a user gave: $FERRY_HOME/runs/RUN, by the run's id.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

#define FINISHED "('succeeded', 'failed', 'stopped')"

int store_run_delete(PGconn *conn, int64_t id, const char *actor)
{
	char idbuf[32];
	const char *params[2] = {idbuf, actor};
	PGresult *res = NULL;
	int error;

	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	/*
	 * One statement, so one transaction: the cascade takes every row of the
	 * run or none, and the tombstone in the audit trail (who deleted what,
	 * when) is written with it. The outer SELECT sees the row as it was
	 * before the DELETE (same snapshot): its state says why nothing was
	 * deleted.
	 */
	if ((error = store_q(&res, conn,
			     "WITH d AS (DELETE FROM runs WHERE id = $1 AND state IN " FINISHED " RETURNING *), "
			     "a AS (INSERT INTO audit (actor, object, object_id, action, detail) "
			     "  SELECT $2, 'run', d.id, 'deleted', jsonb_build_object('workflow', d.workflow_name, "
			     "    'state', d.state, 'started_by', d.actor, 'trigger', d.trigger, 'params', d.params, "
			     "    'reason', d.reason, 'created_at', d.created_at, 'finished_at', d.finished_at) FROM d) "
			     "SELECT (SELECT count(*) FROM d), (SELECT state FROM runs WHERE id = $1)",
			     2, params)) < 0)
		return error;
	if (strcmp(PQgetvalue(res, 0, 0), "0") != 0) {
		error = FERRY_OK;
	} else if (PQgetisnull(res, 0, 1)) {
		ferry_error_set("run %lld not found", (long long)id);
		error = FERRY_ENOTFOUND;
	} else {
		ferry_error_set("run %lld is %s; only a finished run can be deleted: stop it first "
				"(ferry stop %lld, or POST /api/v1/runs/%lld/stop), then delete it",
				(long long)id, PQgetvalue(res, 0, 1), (long long)id, (long long)id);
		error = FERRY_ECONFLICT;
	}
	PQclear(res);
	return error;
}

/* The condition of a run whose logs retention removes; $1 is the days. */
#define RETENTION_DUE                                                                     \
	"state IN " FINISHED " AND finished_at < now() - $1::float8 * interval '1 day' " \
	"AND (logs_removed_at IS NULL OR logs_removed_at < finished_at)"

int store_runs_retention_due(int64_t **ids, int *n, PGconn *conn, double days, int limit)
{
	char d[64], lim[16];
	const char *params[2] = {d, lim};
	PGresult *res = NULL;
	int error;

	*ids = NULL;
	*n = 0;
	snprintf(d, sizeof(d), "%.9f", days);
	snprintf(lim, sizeof(lim), "%d", limit);
	if ((error = store_q(&res, conn,
			     "SELECT id FROM runs WHERE " RETENTION_DUE " ORDER BY finished_at LIMIT $2::int",
			     2, params)) < 0)
		return error;
	*n = PQntuples(res);
	*ids = xcalloc((size_t)*n + 1, sizeof(**ids));
	for (int i = 0; i < *n; i++)
		parse_int64(PQgetvalue(res, i, 0), &(*ids)[i]);
	PQclear(res);
	return FERRY_OK;
}

int store_run_logs_remove(PGconn *conn, int64_t id, double days, void (*rm)(int64_t id, void *arg),
			  void *arg)
{
	char idbuf[32], d[64];
	const char *params[2] = {d, idbuf};
	PGresult *res = NULL;
	int error, due;

	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	snprintf(d, sizeof(d), "%.9f", days);
	if ((error = store_q(NULL, conn, "BEGIN", 0, NULL)) < 0)
		return error;
	/* the row lock keeps a retry (ferry_retry updates the row) from starting attempts meanwhile */
	if ((error = store_q(&res, conn, "SELECT 1 FROM runs WHERE id = $2 AND " RETENTION_DUE " FOR UPDATE",
			     2, params)) < 0)
		goto fail;
	due = PQntuples(res) > 0;
	PQclear(res);
	if (due) {
		rm(id, arg);
		if ((error = store_q(NULL, conn, "UPDATE runs SET logs_removed_at = now() WHERE id = $1", 1,
				     params + 1)) < 0)
			goto fail;
	}
	if ((error = store_q(NULL, conn, "COMMIT", 0, NULL)) < 0)
		return error;
	return due;
fail:
	{
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", ferry_error_last());
		store_q(NULL, conn, "ROLLBACK", 0, NULL);
		ferry_error_set("%s", msg);
	}
	return error;
}

int store_run_logs_removed(char **at, PGconn *conn, int64_t id)
{
	char idbuf[32];
	const char *params[1] = {idbuf};
	PGresult *res = NULL;
	int error;

	*at = NULL;
	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	if ((error = store_q(&res, conn, "SELECT ferry_ts(logs_removed_at) FROM runs WHERE id = $1", 1, params)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		ferry_error_set("run %lld not found", (long long)id);
		error = FERRY_ENOTFOUND;
	} else if (!PQgetisnull(res, 0, 0)) {
		*at = xstrdup(PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	return error;
}
