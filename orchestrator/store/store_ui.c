/*
 * store_ui — see store_ui.h. One parameterised statement each.
 */
#include "store/store_ui.h"

#include <stdio.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_run_marker(struct store_run_marker *out, PGconn *conn, int64_t id)
{
	char run[32];
	const char *params[1] = {run};
	PGresult *res = NULL;
	int error;

	memset(out, 0, sizeof(*out));
	snprintf(run, sizeof(run), "%lld", (long long)id);
	error = store_q(&res, conn,
			"SELECT r.state, r.open_steps, "
			"       coalesce((SELECT max(e.id) FROM events e WHERE e.run_id = r.id), 0), "
			"       r.workflow_hash "
			"FROM runs r WHERE r.id = $1",
			1, params);
	if (error < 0)
		return error;
	if (PQntuples(res) != 1) {
		PQclear(res);
		ferry_error_set("run %lld not found", (long long)id);
		return FERRY_ENOTFOUND;
	}
	snprintf(out->state, sizeof(out->state), "%s", PQgetvalue(res, 0, 0));
	parse_int64(PQgetvalue(res, 0, 1), &out->open_steps);
	parse_int64(PQgetvalue(res, 0, 2), &out->last_event);
	if (strlen(PQgetvalue(res, 0, 3)) >= sizeof(out->workflow_hash)) {
		PQclear(res);
		ferry_error_set("run %lld: workflow hash longer than %zu bytes", (long long)id,
				sizeof(out->workflow_hash) - 1);
		return FERRY_EDB;
	}
	snprintf(out->workflow_hash, sizeof(out->workflow_hash), "%s", PQgetvalue(res, 0, 3));
	PQclear(res);
	return FERRY_OK;
}

int store_step_spec(char **json, PGconn *conn, int64_t id, const char *step)
{
	char run[32];
	const char *params[2] = {run, step};
	PGresult *res = NULL;
	int error;

	*json = NULL;
	snprintf(run, sizeof(run), "%lld", (long long)id);
	/*
	 * The spec as the job got it, less the values of env keys that name a
	 * credential (…_KEY, …_TOKEN, …_SECRET, PASSWORD, PASSWD, CREDENTIAL):
	 * viewers read this, and the console shows it.
	 */
	error = store_q(&res, conn,
			"SELECT json_build_object('run', s.run_id, 'name', s.name, 'kind', s.kind, "
			"  'state', s.state, 'spec', CASE WHEN jsonb_typeof(s.spec -> 'env') = 'object' "
			"    THEN jsonb_set(s.spec, '{env}', coalesce((SELECT jsonb_object_agg(k, CASE "
			"      WHEN k ~* '(^|_)(KEY|TOKEN|SECRET)$|PASSWORD|PASSWD|CREDENTIAL' "
			"      THEN '\"[redacted]\"'::jsonb ELSE v END) FROM jsonb_each(s.spec -> 'env') e(k, v)), '{}')) "
			"    ELSE s.spec END) "
			"FROM steps s WHERE s.run_id = $1 AND s.name = $2",
			2, params);
	if (error < 0)
		return error;
	if (PQntuples(res) != 1) {
		PQclear(res);
		ferry_error_set("run %lld has no step \"%s\"", (long long)id, step);
		return FERRY_ENOTFOUND;
	}
	*json = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_events_marker(int64_t *last, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*last = 0;
	/* max(id) is the primary key index's last entry: one probe whatever the table's size */
	if ((error = store_q(&res, conn, "SELECT coalesce(max(id), 0) FROM events", 0, NULL)) < 0)
		return error;
	parse_int64(PQgetvalue(res, 0, 0), last);
	PQclear(res);
	return FERRY_OK;
}
