/*
 * store_monitor — see store_monitor.h. Every statement is parameterised;
 * the JSON fields go in as text and come out as jsonb built by
 * PostgreSQL, so nothing is assembled by hand.
 */
#include "store/store_monitor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

static char *dump(const json_t *v)
{
	return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

int store_monitor_put(PGconn *conn, const struct store_monitor_row *f)
{
	char step[32], run[32], att[16];
	char *config = dump(f->config), *samples = dump(f->samples), *gpus = dump(f->gpus),
	     *series = dump(f->series), *watch = dump(f->watch), *evidence = dump(f->evidence);
	const char *params[12] = {step, att, run, f->state, f->why, f->phase, config, samples, gpus,
				  series, watch, evidence};
	int error;

	snprintf(step, sizeof(step), "%lld", (long long)f->step_id);
	snprintf(run, sizeof(run), "%lld", (long long)f->run_id);
	snprintf(att, sizeof(att), "%d", f->attempt);
	error = store_q(NULL, conn,
			"INSERT INTO attempt_monitor AS m (step_id, attempt, run_id, state, why, phase, config, "
			"  samples, gpus, series, watch, evidence) "
			"VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, coalesce($8::jsonb, '[]'), $9::jsonb, $10::jsonb, "
			"        $11::jsonb, $12::jsonb) "
			"ON CONFLICT (step_id, attempt) DO UPDATE SET state = excluded.state, why = excluded.why, "
			"  phase = excluded.phase, config = coalesce($7::jsonb, m.config), "
			"  samples = coalesce($8::jsonb, m.samples), gpus = coalesce($9::jsonb, m.gpus), "
			"  series = coalesce($10::jsonb, m.series), watch = coalesce($11::jsonb, m.watch), "
			"  evidence = coalesce($12::jsonb, m.evidence), updated_at = now()",
			12, params);
	free(config), free(samples), free(gpus), free(series), free(watch), free(evidence);
	return error;
}

int store_monitor_event(PGconn *conn, int64_t run_id, const char *step, int attempt, const char *actor,
			const char *kind, const json_t *detail)
{
	char run[32], att[16];
	char *d = dump(detail);
	const char *params[6] = {run, step, att, actor, kind, d};
	int error;

	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	snprintf(att, sizeof(att), "%d", attempt);
	error = store_q(NULL, conn,
			"INSERT INTO events (run_id, step, attempt, actor, kind, detail) "
			"VALUES ($1, $2, $3, $4, $5, $6::jsonb)", 6, params);
	free(d);
	return error;
}

int store_monitor_put_event(PGconn *conn, const struct store_monitor_row *f, const char *step, const char *actor,
			    const char *kind, const json_t *detail)
{
	int own = PQtransactionStatus(conn) == PQTRANS_IDLE;
	int error = own ? store_q(NULL, conn, "BEGIN", 0, NULL) : FERRY_OK;

	if (error < 0)
		return error;
	if ((error = store_monitor_put(conn, f)) < 0 ||
	    (error = store_monitor_event(conn, f->run_id, step, f->attempt, actor, kind, detail)) < 0 ||
	    (own && (error = store_q(NULL, conn, "COMMIT", 0, NULL)) < 0)) {
		if (own)
			store_q(NULL, conn, "ROLLBACK", 0, NULL);
	}
	return error;
}

int store_monitor_restarts(int *n, PGconn *conn, int64_t step_id, int attempt, const char *prefix)
{
	char step[32], att[16];
	const char *params[3] = {step, att, prefix};
	PGresult *res = NULL;
	int error;

	*n = 0;
	snprintf(step, sizeof(step), "%lld", (long long)step_id);
	snprintf(att, sizeof(att), "%d", attempt);
	/* the attempts before this one, newest first, up to the first that ended otherwise */
	if ((error = store_q(&res, conn,
			     "SELECT count(*) FROM (SELECT attempt, bool_and(starts_with(coalesce(reason, ''), $3)) "
			     "  OVER (ORDER BY attempt DESC) AS run_of "
			     "  FROM attempts WHERE step_id = $1 AND attempt < $2) a WHERE run_of",
			     3, params)) < 0)
		return error;
	*n = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return FERRY_OK;
}

static int load_json(json_t **out, PGresult *res, const char *what)
{
	json_error_t je;

	*out = json_loads(PQgetvalue(res, 0, 0), 0, &je);
	PQclear(res);
	if (*out == NULL) {
		ferry_error_set("%s: %s", what, je.text);
		return FERRY_EDB;
	}
	return FERRY_OK;
}

int store_monitor_get(json_t **out, PGconn *conn, int64_t run_id, const char *step, int attempt)
{
	char run[32], att[16];
	const char *params[3] = {run, step, att};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	snprintf(att, sizeof(att), "%d", attempt);
	if ((error = store_q(&res, conn,
			     "SELECT json_build_object('run', s.run_id, 'step', s.name, 'step_state', s.state, "
			     "  'attempt', coalesce(m.attempt, CASE WHEN $3::int > 0 THEN $3::int ELSE s.attempts END), "
			     "  'state', coalesce(m.state, 'none'), 'why', coalesce(m.why, "
			     "     'the monitor has not watched this attempt (not a job, or not started)'), "
			     "  'phase', m.phase, 'config', m.config, 'samples', coalesce(m.samples, '[]'), "
			     "  'gpus', m.gpus, 'series', m.series, 'watch', m.watch, 'evidence', m.evidence, "
			     "  'started_at', ferry_ts(m.started_at), 'updated_at', ferry_ts(m.updated_at), "
			     "  'events', (SELECT coalesce(json_agg(json_build_object('at', ferry_ts(e.at), "
			     "       'attempt', e.attempt, 'kind', e.kind, 'detail', e.detail) ORDER BY e.id), '[]') "
			     "     FROM events e WHERE e.run_id = s.run_id AND e.step = s.name "
			     "       AND e.kind LIKE 'monitor.%') )::text "
			     "FROM steps s LEFT JOIN attempt_monitor m ON m.step_id = s.id AND m.attempt = "
			     "  (SELECT max(attempt) FROM attempt_monitor x WHERE x.step_id = s.id "
			     "     AND ($3::int <= 0 OR x.attempt = $3::int)) "
			     "WHERE s.run_id = $1 AND s.name = $2", 3, params)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		PQclear(res);
		ferry_error_set("run %lld has no step %s", (long long)run_id, step);
		return FERRY_ENOTFOUND;
	}
	return load_json(out, res, "monitor");
}

int store_monitor_states(json_t **out, PGconn *conn, int64_t run_id)
{
	char run[32];
	const char *params[1] = {run};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	if ((error = store_q(&res, conn,
			     "SELECT coalesce(json_object_agg(s.name, json_build_object('attempt', m.attempt, "
			     "  'state', m.state, 'why', m.why)), '{}')::text "
			     "FROM steps s JOIN LATERAL (SELECT * FROM attempt_monitor x WHERE x.step_id = s.id "
			     "  ORDER BY x.attempt DESC LIMIT 1) m ON true WHERE s.run_id = $1", 1, params)) < 0)
		return error;
	return load_json(out, res, "monitor states");
}
