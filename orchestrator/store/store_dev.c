/*
 * store_dev — what `ferry dev run --step` asks of the database: which step
 * of its run the engine would claim next, and a step skipped by the person
 * at the keyboard, which takes its results from an earlier run. A skip goes
 * through the state machine like any attempt (claimed for the session's
 * owner, finished as succeeded with the earlier run's outputs, metrics and
 * gate, reason "reused from run N"), so the steps below it become ready
 * exactly as they would after a run.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_dev_next(int64_t *step_id, char **name, PGconn *conn, int64_t run_id)
{
	char run[32];
	const char *params[1] = {run};
	PGresult *res = NULL;
	int error;

	*step_id = 0;
	*name = NULL;
	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	/* ferry_claim's order: the lowest step id of the run's queue that is due */
	error = store_q(&res, conn,
			"SELECT q.step_id, s.name FROM step_queue q JOIN steps s ON s.id = q.step_id "
			"WHERE q.run_id = $1::bigint AND (q.not_before IS NULL OR q.not_before <= now()) "
			"ORDER BY q.step_id LIMIT 1", 1, params);
	if (error < 0)
		return error;
	if (PQntuples(res) == 1) {
		parse_int64(PQgetvalue(res, 0, 0), step_id);
		*name = xstrdup(PQgetvalue(res, 0, 1));
	}
	PQclear(res);
	return FERRY_OK;
}

int store_dev_skip(int64_t *from_run, PGconn *conn, const char *owner, const char *host, int64_t run_id,
		   int64_t step_id, int64_t reuse_run, int64_t lease_ms)
{
	char run[32], step[32], want[32];
	const char *params[3] = {run, step, reuse_run > 0 ? want : NULL};
	struct store_claim *c = NULL;
	struct store_result r;
	PGresult *res = NULL;
	json_t *outputs = NULL, *metrics = NULL, *gate = NULL;
	char *reason = NULL, *name = NULL;
	int n = 0, ready = 0, error;
	int64_t next = 0;

	*from_run = 0;
	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	snprintf(step, sizeof(step), "%lld", (long long)step_id);
	snprintf(want, sizeof(want), "%lld", (long long)reuse_run);
	error = store_q(&res, conn,
			"SELECT src.run_id, src.outputs, src.metrics, src.gate, d.name "
			"FROM steps d JOIN runs r ON r.id = d.run_id "
			"LEFT JOIN LATERAL (SELECT s.run_id, s.outputs, s.metrics, s.gate FROM steps s "
			"                   JOIN runs o ON o.id = s.run_id "
			"                   WHERE o.workflow_name = r.workflow_name AND o.id <> r.id "
			"                     AND s.name = d.name AND s.state = 'succeeded' "
			"                     AND ($3::bigint IS NULL OR o.id = $3::bigint) "
			"                   ORDER BY o.id DESC LIMIT 1) src ON true "
			"WHERE d.id = $2::bigint AND d.run_id = $1::bigint", 3, params);
	if (error < 0)
		return error;
	if (PQntuples(res) != 1) {
		PQclear(res);
		ferry_error_set("run %lld has no step %lld", (long long)run_id, (long long)step_id);
		return FERRY_ENOTFOUND;
	}
	name = xstrdup(PQgetvalue(res, 0, 4));
	if (PQgetisnull(res, 0, 0)) {
		if (reuse_run > 0)
			ferry_error_set("step %s did not succeed in run %lld, so it cannot be skipped with "
					"its results; run it", name, (long long)reuse_run);
		else
			ferry_error_set("step %s never succeeded in an earlier run of this workflow, so "
					"there are no results to skip it with; run it", name);
		error = FERRY_ENOTFOUND;
		goto out;
	}
	parse_int64(PQgetvalue(res, 0, 0), from_run);
	outputs = PQgetisnull(res, 0, 1) ? NULL : json_loads(PQgetvalue(res, 0, 1), JSON_DECODE_ANY, NULL);
	metrics = PQgetisnull(res, 0, 2) ? NULL : json_loads(PQgetvalue(res, 0, 2), JSON_DECODE_ANY, NULL);
	gate = PQgetisnull(res, 0, 3) ? NULL : json_loads(PQgetvalue(res, 0, 3), JSON_DECODE_ANY, NULL);
	if ((error = store_claim(&c, &n, conn, owner, host, 1, lease_ms, run_id, step_id, NULL)) < 0)
		goto out;
	if (n != 1) {
		ferry_error_set("step %s is no longer ready", name);
		error = FERRY_ECONFLICT;
		goto out;
	}
	reason = xasprintf("reused from run %lld", (long long)*from_run);
	memset(&r, 0, sizeof(r));
	r.step_id = step_id;
	r.attempt = c[0].attempt;
	r.outcome = OUTCOME_SUCCEEDED;
	r.exit_code = -1;
	r.reason = reason;
	r.outputs = outputs;
	r.metrics = metrics;
	r.gate = gate;
	error = store_finish(conn, owner, &r, 1, &ready, &next);
out:
	PQclear(res);
	store_claims_free(c, n);
	json_decref(outputs);
	json_decref(metrics);
	json_decref(gate);
	free(reason);
	free(name);
	return error;
}
