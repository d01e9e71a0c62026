/*
 * store_notify — the statements of the completion webhook (notify.h): the
 * runs due for a post, and how a post went.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_runs_to_notify(json_t **out, PGconn *conn, int limit)
{
	char lim[16];
	const char *params[1] = {lim};
	PGresult *res = NULL;
	json_error_t jerr;
	int error;

	*out = NULL;
	snprintf(lim, sizeof(lim), "%d", limit);
	/* runs that ended long before notifications were on are not posted */
	if ((error = store_q(NULL, conn,
			     "UPDATE runs SET notified_at = now(), notify_error = 'not posted: it ended more than "
			     "a day before completion notifications were on' "
			     "WHERE notified_at IS NULL AND finished_at < now() - interval '1 day'", 0, NULL)) < 0)
		return error;
	if ((error = store_q(&res, conn,
			     "SELECT coalesce(json_agg(json_build_object('run', id, 'workflow', workflow_name, "
			     "  'state', state, 'trigger', trigger, 'reason', reason, "
			     "  'finished_at', ferry_ts(finished_at)) ORDER BY finished_at), '[]') "
			     "FROM (SELECT * FROM runs WHERE notified_at IS NULL AND finished_at IS NOT NULL "
			     "      AND (notify_next IS NULL OR notify_next <= now()) "
			     "      ORDER BY finished_at LIMIT $1::int) r", 1, params)) < 0)
		return error;
	*out = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
	PQclear(res);
	if (*out == NULL) {
		ferry_error_set("runs to notify: %s", jerr.text);
		return FERRY_EDB;
	}
	return FERRY_OK;
}

int store_run_notified(PGconn *conn, int64_t run, const char *failure)
{
	char id[32];
	const char *params[2] = {id, failure};

	snprintf(id, sizeof(id), "%lld", (long long)run);
	if (failure == NULL)
		return store_q(NULL, conn, "UPDATE runs SET notified_at = now(), notify_error = NULL WHERE id = $1",
			       1, params);
	return store_q(NULL, conn,
		       "UPDATE runs SET notify_attempts = notify_attempts + 1, notify_error = $2, "
		       "       notify_next = now() + (notify_attempts + 1) * interval '10 seconds', "
		       "       notified_at = CASE WHEN notify_attempts + 1 >= 5 THEN now() END "
		       "WHERE id = $1", 2, params);
}
