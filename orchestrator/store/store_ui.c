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
			"FROM steps p0, LATERAL (SELECT p0.id, p0.run_id, p0.name, p0.kind, p0.state, "
			/* a fan-out's child: its parent's spec with its item over it, as the claim hands it */
			"    CASE WHEN p0.parent_id IS NULL THEN p0.spec ELSE (SELECT (x.spec - 'foreach' - 'max_parallel' "
			"      - 'min_success') || p0.spec FROM steps x WHERE x.id = p0.parent_id) END AS spec) s "
			"WHERE p0.run_id = $1 AND p0.name = $2",
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

int store_step_items(char **json, PGconn *conn, int64_t id, const char *step, int64_t offset, int limit,
		     const char *state)
{
	char run[32], off[32], lim[16];
	const char *params[5] = {run, step, off, lim, state};
	PGresult *res = NULL;
	int error;

	*json = NULL;
	snprintf(run, sizeof(run), "%lld", (long long)id);
	snprintf(off, sizeof(off), "%lld", (long long)offset);
	snprintf(lim, sizeof(lim), "%d", limit);
	error = store_q(&res, conn,
			"SELECT p.id IS NOT NULL, f.step_id IS NOT NULL, json_build_object("
			"  'run', p.run_id, 'step', p.name, 'total', f.total, 'done', f.done, 'succeeded', f.succeeded, "
			"  'failed', f.done - f.succeeded, 'active', f.active, 'offset', $3::int, "
			"  'items', coalesce((SELECT json_agg(json_build_object('index', c.item_index, 'name', c.name, "
			"      'state', c.state, 'attempts', c.attempts, 'item', c.spec -> 'item', 'reason', c.reason, "
			"      'exit_code', c.exit_code, 'outputs', c.outputs, 'cached', c.cached_from IS NOT NULL, "
			"      'started_at', ferry_ts(c.started_at), 'finished_at', ferry_ts(c.finished_at)) "
			"      ORDER BY c.item_index) "
			"    FROM (SELECT * FROM steps c WHERE c.parent_id = p.id AND ($5::text IS NULL OR c.state = $5) "
			"          ORDER BY c.item_index OFFSET $3 LIMIT $4) c), '[]')) "
			"FROM (SELECT 1) one LEFT JOIN steps p ON p.run_id = $1 AND p.name = $2 AND p.parent_id IS NULL "
			"LEFT JOIN fanouts f ON f.step_id = p.id",
			5, params);
	if (error < 0)
		return error;
	if (PQgetvalue(res, 0, 0)[0] != 't' || PQgetvalue(res, 0, 1)[0] != 't') {
		int found = PQgetvalue(res, 0, 0)[0] == 't';
		PQclear(res);
		if (found)
			ferry_error_set("step \"%s\" of run %lld has no items (it has no foreach:, or has not started)",
					step, (long long)id);
		else
			ferry_error_set("run %lld has no step \"%s\"", (long long)id, step);
		return FERRY_ENOTFOUND;
	}
	*json = xstrdup(PQgetvalue(res, 0, 2));
	PQclear(res);
	return FERRY_OK;
}

int store_run_timeline(char **json, PGconn *conn, int64_t id)
{
	char run[32];
	const char *params[1] = {run};
	PGresult *res = NULL;
	int error;

	*json = NULL;
	snprintf(run, sizeof(run), "%lld", (long long)id);
	if ((error = store_q(&res, conn, "SELECT ferry_run_timeline($1::bigint)", 1, params)) < 0)
		return error;
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
		PQclear(res);
		ferry_error_set("run %lld not found", (long long)id);
		return FERRY_ENOTFOUND;
	}
	*json = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}
