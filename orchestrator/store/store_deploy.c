/*
 * store_deploy — see store_deploy.h.
 */
#include "store/store_deploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/deploy.h"
#include "store/store_priv.h"
#include "lib/util.h"

#define I64(buf, v) (snprintf((buf), sizeof(buf), "%lld", (long long)(v)), (buf))

int store_deploy_ensure(PGconn *conn, const char *name, const char *model, int port_hint, int auto_stop_s,
			int64_t run_id, const char *actor, int64_t *id, int *port, int *created)
{
	char p[16], as[16], run[32];
	const char *params[6] = {name, model, I64(p, port_hint), auto_stop_s > 0 ? I64(as, auto_stop_s) : NULL,
				 run_id > 0 ? I64(run, run_id) : NULL, actor};
	PGresult *res = NULL;
	int error;

	/* the insert loses to a concurrent one by name; the select then finds it */
	if ((error = store_q(&res, conn,
			     "WITH ins AS (INSERT INTO deployments (name, model, port, auto_stop_s, run_id, actor) "
			     "             VALUES ($1, $2, $3::int, $4::int, $5::bigint, $6) "
			     "             ON CONFLICT (name) DO NOTHING RETURNING id, port, model), "
			     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "       SELECT id, $6, 'created', jsonb_build_object('model', $2::text, 'port', port) FROM ins) "
			     "SELECT id, port, model, true FROM ins "
			     "UNION ALL SELECT id, port, model, false FROM deployments WHERE name = $1 "
			     "AND NOT EXISTS (SELECT 1 FROM ins)",
			     6, params)) < 0)
		return error;
	if (PQntuples(res) != 1) {
		PQclear(res);
		ferry_error_set("deployment %s: not created", name);
		return FERRY_EDB;
	}
	if (strcmp(PQgetvalue(res, 0, 2), model) != 0) {
		ferry_error_set("deployment %s serves model %s, not %s: name another deployment (deployment: NAME)",
				name, PQgetvalue(res, 0, 2), model);
		PQclear(res);
		return FERRY_ECONFLICT;
	}
	parse_int64(PQgetvalue(res, 0, 0), id);
	*port = (int)strtol(PQgetvalue(res, 0, 1), NULL, 10);
	*created = PQgetvalue(res, 0, 3)[0] == 't';
	PQclear(res);
	return FERRY_OK;
}

int store_deploy_version_add(PGconn *conn, int64_t dep, const char *version, const char *artifact,
			     int replicas, const json_t *serve, int64_t run_id, const char *step, int *ord,
			     char **state)
{
	char d[32], r[16], run[32];
	char *sj = json_dumps(serve, JSON_COMPACT);
	const char *params[7] = {I64(d, dep), version, artifact, I64(r, replicas), sj,
				 run_id > 0 ? I64(run, run_id) : NULL, step};
	PGresult *res = NULL;
	int error;

	*state = NULL;
	error = store_q(&res, conn,
			"WITH ins AS (INSERT INTO deployment_versions (deployment_id, version, ord, artifact, replicas, "
			"             serve, run_id, step) "
			"  SELECT $1::bigint, $2, coalesce(max(ord), 0) + 1, $3, $4::int, $5::jsonb, $6::bigint, $7 "
			"  FROM deployment_versions WHERE deployment_id = $1::bigint "
			"  ON CONFLICT (deployment_id, version) DO NOTHING RETURNING ord, state) "
			"SELECT ord, state FROM ins UNION ALL "
			"SELECT ord, state FROM deployment_versions WHERE deployment_id = $1::bigint AND version = $2 "
			"AND NOT EXISTS (SELECT 1 FROM ins)",
			7, params);
	free(sj);
	if (error < 0)
		return error;
	if (PQntuples(res) != 1) {
		PQclear(res);
		ferry_error_set("version %s: not added", version);
		return FERRY_EDB;
	}
	*ord = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
	*state = xstrdup(PQgetvalue(res, 0, 1));
	PQclear(res);
	return FERRY_OK;
}

/*
 * A replica's row, its health and its removal: written only with their
 * event, through store_deploy_replica_change (nothing reads the row
 * without the event that says why).
 */
static int replica_put(PGconn *conn, int64_t dep, const char *version, int idx, int port, const json_t *handle,
		       int generation, const char *health, const char *error_text)
{
	char d[32], i[16], p[16], g[16];
	char *hj = handle ? json_dumps(handle, JSON_COMPACT) : NULL;
	const char *params[8] = {I64(d, dep), version, I64(i, idx), I64(p, port), hj, I64(g, generation), health,
				 error_text};
	int error = store_q(NULL, conn,
			    "INSERT INTO deployment_replicas (deployment_id, version, idx, port, executor, handle, "
			    "  generation, health, last_error) "
			    "VALUES ($1::bigint, $2, $3::int, $4::int, 'local', $5::jsonb, $6::int, $7, $8) "
			    "ON CONFLICT (deployment_id, version, idx) DO UPDATE SET port = EXCLUDED.port, "
			    "  handle = EXCLUDED.handle, generation = EXCLUDED.generation, health = EXCLUDED.health, "
			    "  last_error = EXCLUDED.last_error, updated_at = now()",
			    8, params);
	free(hj);
	return error;
}

static int replica_health(PGconn *conn, int64_t dep, const char *version, int idx, const char *health,
			  const char *error_text, int restarted, int64_t backoff_ms)
{
	char d[32], i[16], r[16], b[32];
	const char *params[7] = {I64(d, dep), version, I64(i, idx), health, error_text, I64(r, restarted),
				 I64(b, backoff_ms)};

	return store_q(NULL, conn,
		       "UPDATE deployment_replicas SET health = $4, last_error = coalesce($5, last_error), "
		       "  restarts = restarts + $6::int, "
		       "  next_start = CASE WHEN $7::bigint > 0 THEN now() + $7::bigint * interval '1 millisecond' "
		       "                    ELSE next_start END, updated_at = now() "
		       "WHERE deployment_id = $1::bigint AND version = $2 AND idx = $3::int",
		       7, params);
}

static int replica_delete(PGconn *conn, int64_t dep, const char *version, int idx)
{
	char d[32], i[16];
	const char *params[3] = {I64(d, dep), version, I64(i, idx)};

	return store_q(NULL, conn,
		       "DELETE FROM deployment_replicas WHERE deployment_id = $1::bigint AND version = $2 AND idx = $3::int",
		       3, params);
}

int store_deploy_version_drop(PGconn *conn, int64_t dep, const char *version, const char *actor,
			      const char *reason)
{
	char d[32];
	const char *params[4] = {I64(d, dep), version, actor, reason};

	return store_q(NULL, conn,
		       "WITH del AS (DELETE FROM deployment_versions WHERE deployment_id = $1::bigint AND version = $2 "
		       "             AND state = 'starting' RETURNING version) "
		       "INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
		       "SELECT $1::bigint, $3, 'version-failed', jsonb_build_object('version', version, 'reason', $4::text) "
		       "FROM del",
		       4, params);
}

int store_deploy_event(PGconn *conn, int64_t dep, const char *actor, const char *kind, const json_t *detail)
{
	char d[32];
	char *dj = detail ? json_dumps(detail, JSON_COMPACT) : NULL;
	const char *params[4] = {I64(d, dep), actor, kind, dj};
	int error = store_q(NULL, conn,
			    "INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			    "VALUES ($1::bigint, $2, $3, $4::jsonb)",
			    4, params);

	free(dj);
	return error;
}

/* OK when res (cleared here) has the one row a change of deployment dep returns, else FERRY_ENOTFOUND. */
static int one_row(PGresult *res, int64_t dep)
{
	int n = PQntuples(res);

	PQclear(res);
	if (n == 1)
		return FERRY_OK;
	ferry_error_set("deployment %lld not found", (long long)dep);
	return FERRY_ENOTFOUND;
}

static void rollback(PGconn *conn)
{
	store_q(NULL, conn, "ROLLBACK", 0, NULL);
}

int store_deploy_tx(PGconn *conn, const char *cmd)
{
	return store_tx(conn, cmd);
}

int store_deploy_version_said(PGconn *conn, int64_t dep, const char *version, enum deploy_said said,
			      const char *actor, const char *kind, const json_t *detail)
{
	static const char *const names[] = {[DEPLOY_SAID_NONE] = NULL, [DEPLOY_SAID_SERVED] = "served",
					    [DEPLOY_SAID_UNSERVED] = "unserved"};
	char d[32];
	char *dj = detail ? json_dumps(detail, JSON_COMPACT) : NULL;
	const char *params[6] = {I64(d, dep), version, names[said], actor, kind, dj};
	int error = store_q(NULL, conn,
			    "WITH u AS (UPDATE deployment_versions SET health_said = $3 "
			    "  WHERE deployment_id = $1::bigint AND version = $2 AND health_said IS DISTINCT FROM $3 "
			    "  RETURNING 1) "
			    "INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			    "SELECT $1::bigint, $4, $5, coalesce($6::jsonb, '{}'::jsonb) FROM u WHERE $5::text IS NOT NULL",
			    6, params);

	free(dj);
	return error;
}

int store_deploy_replica_change(PGconn *conn, const struct store_replica_change *c, const char *actor,
				const char *kind, const json_t *detail)
{
	/* inside a caller's transaction: part of it (its COMMIT is the caller's) */
	int own = PQtransactionStatus(conn) == PQTRANS_IDLE;
	int error = own ? store_q(NULL, conn, "BEGIN", 0, NULL) : FERRY_OK;

	if (error < 0)
		return error;
	if (c->write == REPLICA_DELETE)
		error = replica_delete(conn, c->dep, c->version, c->idx);
	else if (c->write == REPLICA_PUT)
		error = replica_put(conn, c->dep, c->version, c->idx, c->port, c->handle, c->generation, c->health, NULL);
	if (error >= 0 && c->write != REPLICA_DELETE)
		error = replica_health(conn, c->dep, c->version, c->idx, c->health, c->error, c->restarted,
				       c->backoff_ms);
	if (error < 0 || (kind && (error = store_deploy_event(conn, c->dep, actor, kind, detail)) < 0) ||
	    (own && (error = store_q(NULL, conn, "COMMIT", 0, NULL)) < 0)) {
		if (own)
			rollback(conn);
	}
	return error;
}

/*
 * "production" follows the weights just written, in the same transaction
 * (db/functions/registry.sql ferry_deployment_alias_sync): every change of
 * a deployment's weights ends with this, so the registry never names a
 * version that does not serve.
 */
static int alias_follows(PGconn *conn, const char *dep, const char *actor)
{
	const char *p[2] = {dep, actor};

	return store_q(NULL, conn, "SELECT ferry_deployment_alias_sync($1::bigint, $2)", 2, p);
}

int store_deploy_shift(PGconn *conn, int64_t dep, const char *version, int traffic, int auto_stop_s,
		       const char *actor, const char *why, json_t **weights)
{
	char d[32], w[16], as[16];
	const char *p1[1] = {I64(d, dep)};
	PGresult *res = NULL;
	int cur[DEPLOY_MAX_VERSIONS], out[DEPLOY_MAX_VERSIONS + 1], n = 0, self = -1, error;
	/* inside a caller's transaction: part of it (its COMMIT, or ROLLBACK on an error, is the caller's) */
	int own = PQtransactionStatus(conn) == PQTRANS_IDLE;
	char *names[DEPLOY_MAX_VERSIONS];
	json_t *before = json_object(), *after = json_object(), *detail;

	*weights = NULL;
	if (own && (error = store_q(NULL, conn, "BEGIN", 0, NULL)) < 0)
		goto fail;
	/* the deployment's row locks its weights against a concurrent change */
	if ((error = store_q(NULL, conn, "SELECT 1 FROM deployments WHERE id = $1::bigint FOR UPDATE", 1, p1)) < 0)
		goto fail;
	if ((error = store_q(&res, conn,
			     "SELECT version, weight FROM deployment_versions WHERE deployment_id = $1::bigint "
			     "AND state = 'serving' ORDER BY ord",
			     1, p1)) < 0)
		goto fail;
	for (int i = 0; i < PQntuples(res) && n < DEPLOY_MAX_VERSIONS - 1; i++) {
		names[n] = xstrdup(PQgetvalue(res, i, 0));
		cur[n] = (int)strtol(PQgetvalue(res, i, 1), NULL, 10);
		json_object_set_new(before, names[n], json_integer(cur[n]));
		if (strcmp(names[n], version) == 0)
			self = n;
		n++;
	}
	PQclear(res);
	res = NULL;
	if (self >= 0) {
		deploy_weights_set(cur, (size_t)n, (size_t)self, traffic, out);
	} else {
		deploy_weights_add(cur, (size_t)n, traffic, out);
		names[n++] = xstrdup(version);
	}
	for (int i = 0; i < n; i++) {
		const char *p2[3] = {d, names[i], I64(w, out[i])};
		if ((error = store_q(NULL, conn,
				     "UPDATE deployment_versions SET weight = $3::int, state = 'serving' "
				     "WHERE deployment_id = $1::bigint AND version = $2",
				     3, p2)) < 0)
			goto fail;
		json_object_set_new(after, names[i], json_integer(out[i]));
	}
	if (auto_stop_s >= 0) {
		const char *p3[2] = {d, auto_stop_s > 0 ? I64(as, auto_stop_s) : NULL};
		if ((error = store_q(NULL, conn,
				     "UPDATE deployments SET auto_stop_s = $2::int, warned_at = NULL, updated_at = now(), "
				     "  deadline = CASE WHEN $2::int IS NULL THEN NULL "
				     "                  ELSE now() + $2::int * interval '1 second' END "
				     "WHERE id = $1::bigint",
				     2, p3)) < 0)
			goto fail;
	}
	detail = json_pack("{s:s, s:O, s:O, s:s}", "version", version, "before", before, "after", after, "why", why);
	error = store_deploy_event(conn, dep, actor, "traffic", detail);
	json_decref(detail);
	if (error < 0 || (error = alias_follows(conn, d, actor)) < 0 ||
	    (own && (error = store_q(NULL, conn, "COMMIT", 0, NULL)) < 0))
		goto fail;
	*weights = json_incref(after);
	goto out;
fail:
	if (own)
		rollback(conn);
out:
	for (int i = 0; i < n; i++)
		free(names[i]);
	json_decref(before);
	json_decref(after);
	return error;
}

/* The deployments' rows (only_id > 0: that one's) as one JSON aggregate; *out the caller's. */
static int deploy_rows(PGconn *conn, int64_t only_id, json_t **out)
{
	char d[32];
	const char *params[1] = {only_id > 0 ? I64(d, only_id) : NULL};
	PGresult *res = NULL;
	json_error_t je;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT coalesce(jsonb_agg(jsonb_build_object("
			     "  'id', d.id, 'name', d.name, 'model', d.model, 'port', d.port, "
			     "  'state', d.state, 'auto_stop_s', d.auto_stop_s, 'retire_after_s', d.retire_after_s, "
			     "  'deadline', d.deadline, 'created_at', d.created_at, 'run_id', d.run_id, "
			     "  'match_version', d.match_version, 'match_header', d.match_header, 'match_value', d.match_value, "
			     "  'versions', (SELECT coalesce(jsonb_agg(jsonb_build_object("
			     "     'version', v.version, 'ord', v.ord, 'weight', v.weight, 'replicas', v.replicas, "
			     "     'state', v.state, 'artifact', v.artifact, 'serve', v.serve, 'load_test', v.load_test, "
			     "     'run_id', v.run_id, 'step', v.step, 'zero_since', v.zero_since, "
			     "     'health_said', v.health_said, "
			     "     'replica_list', (SELECT coalesce(jsonb_agg(jsonb_build_object("
			     "        'idx', r.idx, 'port', r.port, 'health', r.health, 'restarts', r.restarts, "
			     "        'generation', r.generation, 'handle', r.handle, 'last_error', r.last_error, "
			     "        'next_start_in_ms', greatest(0, (extract(epoch FROM r.next_start - now()) * 1000)::bigint)"
			     "        ) ORDER BY r.idx), '[]') FROM deployment_replicas r "
			     "        WHERE r.deployment_id = v.deployment_id AND r.version = v.version)"
			     "     ) ORDER BY v.ord), '[]') FROM deployment_versions v WHERE v.deployment_id = d.id)"
			     ") ORDER BY d.id), '[]')::text FROM deployments d WHERE $1::bigint IS NULL OR d.id = $1::bigint",
			     1, params)) < 0)
		return error;
	*out = json_loads(PQgetvalue(res, 0, 0), 0, &je);
	PQclear(res);
	if (*out == NULL) {
		ferry_error_set("deployments: bad JSON from the database: %s", je.text);
		return FERRY_EDB;
	}
	return FERRY_OK;
}

int store_deployments_list(struct deployment **out, size_t *n, PGconn *conn)
{
	json_t *rows = NULL;
	int error;

	*out = NULL;
	*n = 0;
	if ((error = deploy_rows(conn, 0, &rows)) < 0)
		return error;
	error = deployments_from_json(out, n, rows);
	json_decref(rows);
	return error;
}

int store_deployment_get(struct deployment **out, PGconn *conn, int64_t id)
{
	json_t *rows = NULL;
	int error;

	*out = NULL;
	if ((error = deploy_rows(conn, id, &rows)) < 0)
		return error;
	if (json_array_size(rows) == 0) {
		ferry_error_set("deployment %lld not found", (long long)id);
		error = FERRY_ENOTFOUND;
	} else {
		error = deployment_from_json(out, json_array_get(rows, 0));
	}
	json_decref(rows);
	return error;
}

int store_deploy_events(PGconn *conn, int64_t dep, int limit, json_t **out)
{
	char d[32], l[16];
	const char *params[2] = {I64(d, dep), I64(l, limit)};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'at', at, 'actor', actor, "
			     "  'kind', kind, 'detail', detail) ORDER BY id), '[]')::text FROM "
			     "(SELECT * FROM deployment_events WHERE deployment_id = $1::bigint ORDER BY id DESC "
			     " LIMIT $2::int) e",
			     2, params)) < 0)
		return error;
	*out = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	PQclear(res);
	return *out ? FERRY_OK : FERRY_EDB;
}

int store_deploy_health_history(PGconn *conn, int64_t dep, int64_t since, json_t **out)
{
	char d[32], t[32];
	const char *params[2] = {I64(d, dep), I64(t, since)};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn, "SELECT ferry_replica_health($1::bigint, to_timestamp($2::bigint))", 2,
			     params)) < 0)
		return error;
	*out = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	PQclear(res);
	return *out ? FERRY_OK : FERRY_EDB;
}

int store_deploy_due(PGconn *conn, const char *actor, int64_t **ids, int *n, struct deploy_warning **warned,
		     size_t *nwarned)
{
	const char *params[1] = {actor};
	PGresult *res = NULL;
	int error;

	*ids = NULL;
	*n = 0;
	*warned = NULL;
	*nwarned = 0;
	/* the warning, once per deadline: warned_at is cleared whenever the deadline moves;
	 * it comes first, so a round that finds a deadline passed has warned too */
	{
		char lead[32];
		const char *p2[2] = {actor, I64(lead, deploy_warn_lead_s())};
		if ((error = store_q(&res, conn,
				     "WITH w AS (UPDATE deployments SET warned_at = now() "
				     "  WHERE state = 'running' AND deadline IS NOT NULL AND warned_at IS NULL "
				     "    AND deadline - $2::int * interval '1 second' <= now() RETURNING id, name, deadline), "
				     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
				     "  SELECT id, $1, 'auto-stop-warning', jsonb_build_object('deadline', deadline) FROM w) "
				     "SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'deployment', name, "
				     "  'deadline', deadline)), '[]')::text FROM w",
				     2, p2)) < 0)
			return error;
		json_t *w = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
		PQclear(res);
		res = NULL;
		error = deploy_warnings_from_json(warned, nwarned, w);
		json_decref(w);
		if (error < 0)
			return error;
	}
	if ((error = store_q(&res, conn,
			     "WITH due AS (UPDATE deployments d SET state = 'stopped', updated_at = now() "
			     "  WHERE state = 'running' AND deadline IS NOT NULL AND deadline <= now() "
			     /* a rollout under way (a version starting, for at most 15 minutes) is not cut off */
			     "    AND NOT EXISTS (SELECT FROM deployment_versions v WHERE v.deployment_id = d.id "
			     "      AND v.state = 'starting' AND v.created_at > now() - interval '15 minutes') "
			     "  RETURNING id, deadline), "
			     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "  SELECT id, $1, 'auto-stopped', jsonb_build_object('deadline', deadline) FROM due) "
			     "SELECT id FROM due ORDER BY id",
			     1, params)) < 0)
		return error;
	*n = PQntuples(res);
	*ids = xcalloc((size_t)*n + 1, sizeof(int64_t));
	for (int i = 0; i < *n; i++)
		parse_int64(PQgetvalue(res, i, 0), &(*ids)[i]);
	PQclear(res);
	return FERRY_OK;
}

int store_deploy_weights(PGconn *conn, int64_t dep, const json_t *want, const char *actor, const char *kind,
			 json_t **after)
{
	char d[32], w[16];
	const char *p1[1] = {I64(d, dep)};
	PGresult *res = NULL;
	int cur[DEPLOY_MAX_VERSIONS], out[DEPLOY_MAX_VERSIONS], n = 0, error, sum = 0;
	char *names[DEPLOY_MAX_VERSIONS];
	json_t *before = json_object(), *now = json_object(), *detail, *v, *rollback_want = NULL;
	const char *k;

	*after = NULL;
	if ((error = store_q(NULL, conn, "BEGIN", 0, NULL)) < 0)
		goto fail;
	if ((error = store_q(&res, conn, "SELECT state FROM deployments WHERE id = $1::bigint FOR UPDATE", 1, p1)) < 0)
		goto fail;
	if (PQntuples(res) == 0) {
		ferry_error_set("deployment %lld not found", (long long)dep);
		error = FERRY_ENOTFOUND;
		goto fail;
	}
	PQclear(res);
	res = NULL;
	if (strcmp(kind, "rollback") != 0) {
		/* traffic for a retired version brings it back: serving again, its replicas start (reconcile) */
		json_object_foreach((json_t *)want, k, v) {
			const char *p3[3] = {d, k, actor};
			if (json_integer_value(v) <= 0)
				continue;
			if ((error = store_q(NULL, conn,
					     "WITH u AS (UPDATE deployment_versions SET state = 'serving' "
					     "  WHERE deployment_id = $1::bigint AND version = $2 AND state = 'retired' "
					     "  RETURNING version) "
					     "INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
					     "SELECT $1::bigint, $3, 'version-restored', jsonb_build_object('version', version) FROM u",
					     3, p3)) < 0)
				goto fail;
		}
	}
	if ((error = store_q(&res, conn,
			     "SELECT version, weight FROM deployment_versions WHERE deployment_id = $1::bigint "
			     "AND state = 'serving' ORDER BY ord",
			     1, p1)) < 0)
		goto fail;
	for (int i = 0; i < PQntuples(res) && n < DEPLOY_MAX_VERSIONS; i++) {
		names[n] = xstrdup(PQgetvalue(res, i, 0));
		cur[n] = (int)strtol(PQgetvalue(res, i, 1), NULL, 10);
		json_object_set_new(before, names[n], json_integer(cur[n]));
		n++;
	}
	PQclear(res);
	res = NULL;
	if (strcmp(kind, "rollback") == 0) {
		/* the weights before: a version added since had none then (0) */
		json_t *full = json_deep_copy(want);
		for (int i = 0; i < n; i++)
			if (!json_object_get(full, names[i]))
				json_object_set_new(full, names[i], json_integer(0));
		void *tmp;
		json_object_foreach_safe(full, tmp, k, v)
			if (!json_object_get(before, k))
				json_object_del(full, k); /* retired since: it stays at 0 */
		want = rollback_want = full;
	}
	json_object_foreach((json_t *)want, k, v) {
		if (!json_object_get(before, k)) {
			ferry_error_set("traffic: version %s does not serve in this deployment", k);
			error = FERRY_EINVALID;
			goto fail;
		}
		sum += (int)json_integer_value(v);
	}
	if (json_object_size(want) == 1 && rollback_want == NULL) {
		json_object_foreach((json_t *)want, k, v)
			for (int i = 0; i < n; i++)
				if (strcmp(names[i], k) == 0)
					deploy_weights_set(cur, (size_t)n, (size_t)i, (int)json_integer_value(v), out);
	} else {
		if (json_object_size(want) != (size_t)n || sum != 100) {
			ferry_error_set("traffic: give one version's share, or every serving version's with a sum "
					"of 100 (these sum to %d over %zu of %d versions)", sum, json_object_size(want), n);
			error = FERRY_EINVALID;
			goto fail;
		}
		for (int i = 0; i < n; i++)
			out[i] = (int)json_integer_value(json_object_get(want, names[i]));
	}
	for (int i = 0; i < n; i++) {
		const char *p2[3] = {d, names[i], I64(w, out[i])};
		if ((error = store_q(NULL, conn,
				     "UPDATE deployment_versions SET weight = $3::int "
				     "WHERE deployment_id = $1::bigint AND version = $2",
				     3, p2)) < 0)
			goto fail;
		json_object_set_new(now, names[i], json_integer(out[i]));
	}
	detail = json_pack("{s:O, s:O}", "before", before, "after", now);
	error = store_deploy_event(conn, dep, actor, kind, detail);
	json_decref(detail);
	if (error < 0 || (error = alias_follows(conn, d, actor)) < 0 ||
	    (error = store_q(NULL, conn, "COMMIT", 0, NULL)) < 0)
		goto fail;
	*after = json_incref(now);
	goto out;
fail:
	if (res)
		PQclear(res);
	rollback(conn);
out:
	for (int i = 0; i < n; i++)
		free(names[i]);
	json_decref(before);
	json_decref(now);
	json_decref(rollback_want);
	return error;
}

int store_deploy_ports_taken(PGconn *conn, int **ports, size_t *n)
{
	PGresult *res = NULL;
	int error;

	*ports = NULL, *n = 0;
	if ((error = store_q(&res, conn,
			     "SELECT port FROM deployments WHERE port > 0 "
			     "UNION SELECT port FROM deployment_replicas WHERE port > 0 ORDER BY 1",
			     0, NULL)) < 0)
		return error;
	if (PQntuples(res) > 0) {
		*ports = xcalloc((size_t)PQntuples(res), sizeof(**ports));
		for (int i = 0; i < PQntuples(res); i++)
			(*ports)[i] = (int)strtol(PQgetvalue(res, i, 0), NULL, 10);
		*n = (size_t)PQntuples(res);
	}
	PQclear(res);
	return FERRY_OK;
}

int store_deploy_last_weights(PGconn *conn, int64_t dep, json_t **before)
{
	char d[32];
	const char *params[1] = {I64(d, dep)};
	PGresult *res = NULL;
	int error;

	*before = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT detail->'before' FROM deployment_events WHERE deployment_id = $1::bigint "
			     "AND kind IN ('traffic', 'promote') AND detail ? 'before' ORDER BY id DESC LIMIT 1",
			     1, params)) < 0)
		return error;
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		*before = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	PQclear(res);
	if (*before != NULL && json_object_size(*before) == 0) { /* before the first version: nothing */
		json_decref(*before);
		*before = NULL;
	}
	if (*before == NULL) {
		ferry_error_set("nothing to roll back: no earlier traffic split was recorded");
		return FERRY_ECONFLICT;
	}
	return FERRY_OK;
}

int store_deploy_set_state(PGconn *conn, int64_t dep, const char *state, const char *actor)
{
	char d[32];
	const char *params[3] = {I64(d, dep), state, actor};
	PGresult *res = NULL;
	int error;

	if ((error = store_q(&res, conn,
			     "WITH u AS (UPDATE deployments SET state = $2, updated_at = now(), warned_at = NULL, "
			     "  deadline = CASE WHEN $2 = 'running' AND auto_stop_s IS NOT NULL "
			     "                  THEN now() + auto_stop_s * interval '1 second' ELSE deadline END "
			     "  WHERE id = $1::bigint RETURNING id, deadline), "
			     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "  SELECT id, $3, CASE WHEN $2 = 'running' THEN 'started' ELSE 'stopped' END, "
			     "         jsonb_build_object('deadline', deadline) FROM u) "
			     "SELECT 1 FROM u",
			     3, params)) < 0)
		return error;
	return one_row(res, dep);
}

int store_deploy_wake(PGconn *conn, int64_t dep, const char *actor, const char *why, int *started)
{
	char d[32];
	const char *params[3] = {I64(d, dep), actor, why};
	PGresult *res = NULL;
	int error;

	*started = 0;
	if ((error = store_q(&res, conn,
			     "WITH u AS (UPDATE deployments SET state = 'running', updated_at = now(), warned_at = NULL, "
			     "  deadline = CASE WHEN auto_stop_s IS NOT NULL "
			     "                  THEN now() + auto_stop_s * interval '1 second' ELSE deadline END "
			     "  WHERE id = $1::bigint AND state = 'stopped' RETURNING id, deadline), "
			     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "  SELECT id, $2, 'started', jsonb_build_object('deadline', deadline, 'why', $3::text) FROM u) "
			     "SELECT 1 FROM u",
			     3, params)) < 0)
		return error;
	*started = PQntuples(res) == 1;
	PQclear(res);
	return FERRY_OK;
}

int store_deploy_auto_stop(PGconn *conn, int64_t dep, int secs, int extend, const char *actor)
{
	char d[32], s[16], e[16];
	const char *params[4] = {I64(d, dep), secs > 0 ? I64(s, secs) : NULL, I64(e, extend), actor};
	PGresult *res = NULL;
	int error;

	/*
	 * extend: the deadline moves by secs from where it is (or from now), or
	 * with secs 0 ("never") goes, auto-stop with it; else auto-stop is reset.
	 * Each is an event with its actor.
	 */
	if ((error = store_q(&res, conn,
			     "WITH u AS (UPDATE deployments SET updated_at = now(), warned_at = NULL, "
			     "  auto_stop_s = CASE WHEN $3::int = 1 AND $2::int IS NOT NULL THEN auto_stop_s ELSE $2::int END, "
			     "  deadline = CASE WHEN $2::int IS NULL THEN NULL "
			     "                  WHEN $3::int = 1 THEN greatest(coalesce(deadline, now()), now()) + $2::int * interval '1 second' "
			     "                  ELSE now() + $2::int * interval '1 second' END "
			     "  WHERE id = $1::bigint RETURNING id, deadline), "
			     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "  SELECT id, $4, CASE WHEN $3::int = 1 THEN 'extended' ELSE 'auto-stop' END, "
			     "         jsonb_build_object('deadline', deadline, 'seconds', $2::int) FROM u) "
			     "SELECT 1 FROM u",
			     4, params)) < 0)
		return error;
	return one_row(res, dep);
}

int store_deploy_delete(PGconn *conn, int64_t dep)
{
	char d[32];
	const char *params[1] = {I64(d, dep)};
	PGresult *res = NULL;
	int error;

	if ((error = store_q(&res, conn, "DELETE FROM deployments WHERE id = $1::bigint RETURNING id", 1, params)) < 0)
		return error;
	return one_row(res, dep);
}

int store_deploy_version_load_test(PGconn *conn, int64_t dep, const char *version, const json_t *result)
{
	char d[32];
	char *rj = json_dumps(result, JSON_COMPACT);
	const char *params[3] = {I64(d, dep), version, rj};
	int error = store_q(NULL, conn,
			    "UPDATE deployment_versions SET load_test = $3::jsonb "
			    "WHERE deployment_id = $1::bigint AND version = $2",
			    3, params);

	free(rj);
	return error;
}

int store_deploy_version_retire(PGconn *conn, int64_t dep, const char *version, const char *actor,
				const json_t *detail)
{
	char d[32];
	char *dj = detail ? json_dumps(detail, JSON_COMPACT) : NULL;
	const char *params[4] = {I64(d, dep), version, actor, dj};
	int error = store_q(NULL, conn,
			    "WITH u AS (UPDATE deployment_versions SET state = 'retired', weight = 0 "
			    "  WHERE deployment_id = $1::bigint AND version = $2 RETURNING version) "
			    "INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			    "SELECT $1::bigint, $3, 'version-retired', "
			    "       coalesce($4::jsonb, '{}'::jsonb) || jsonb_build_object('version', version) FROM u",
			    4, params);

	free(dj);
	return error;
}

int store_deploy_set_replicas(PGconn *conn, int64_t dep, const char *version, int n, const int *ports,
			      const char *actor)
{
	char d[32], nn[16], idx[16], pt[16];
	const char *p1[4] = {I64(d, dep), version, I64(nn, n), actor};
	PGresult *res = NULL;
	int error, have;

	if ((error = store_q(NULL, conn, "BEGIN", 0, NULL)) < 0)
		return error;
	if ((error = store_q(&res, conn,
			     "WITH u AS (UPDATE deployment_versions SET replicas = $3::int "
			     "  WHERE deployment_id = $1::bigint AND version = $2 AND state = 'serving' RETURNING 1), "
			     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "  SELECT $1::bigint, $4, 'replicas', jsonb_build_object('version', $2::text, 'replicas', $3::int) FROM u) "
			     "SELECT (SELECT count(*) FROM u), (SELECT coalesce(max(idx), 0) FROM deployment_replicas "
			     "  WHERE deployment_id = $1::bigint AND version = $2)",
			     4, p1)) < 0)
		goto fail;
	if (strcmp(PQgetvalue(res, 0, 0), "1") != 0) {
		ferry_error_set("replicas: version %s does not serve in this deployment", version);
		error = FERRY_EINVALID;
		goto fail;
	}
	have = (int)strtol(PQgetvalue(res, 0, 1), NULL, 10);
	PQclear(res);
	res = NULL;
	for (int i = have + 1, k = 0; i <= n; i++, k++) {
		const char *p2[4] = {d, version, I64(idx, i), I64(pt, ports[k])};
		if ((error = store_q(NULL, conn,
				     "INSERT INTO deployment_replicas (deployment_id, version, idx, port, executor, health, generation) "
				     "VALUES ($1::bigint, $2, $3::int, $4::int, 'local', 'stopped', 0) "
				     "ON CONFLICT DO NOTHING",
				     4, p2)) < 0)
			goto fail;
	}
	return store_q(NULL, conn, "COMMIT", 0, NULL) < 0 ? (rollback(conn), FERRY_EDB) : FERRY_OK;
fail:
	if (res)
		PQclear(res);
	rollback(conn);
	return error;
}

json_t *store_step_outputs(PGconn *conn, int64_t step_id)
{
	char d[32];
	const char *params[1] = {I64(d, step_id)};
	PGresult *res = NULL;
	json_t *out = NULL;

	if (store_q(&res, conn, "SELECT outputs::text FROM steps WHERE id = $1::bigint", 1, params) < 0)
		return NULL;
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		out = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	PQclear(res);
	return out;
}

int store_deploy_retire_due(PGconn *conn, const char *actor, int *n)
{
	const char *p[1] = {actor};
	PGresult *res = NULL;
	int error;

	*n = 0;
	/*
	 * A serving version at 0% for longer than its deployment's retire_after_s,
	 * while another version takes the traffic (the last one with weight is
	 * never retired by time): retired, an event each, in one statement.
	 */
	if ((error = store_q(&res, conn,
			     "WITH due AS (SELECT dv.deployment_id, dv.version, d.retire_after_s FROM deployment_versions dv "
			     "  JOIN deployments d ON d.id = dv.deployment_id "
			     "  WHERE dv.state = 'serving' AND dv.weight = 0 AND d.retire_after_s IS NOT NULL "
			     "  AND dv.version IS DISTINCT FROM d.match_version "
			     "  AND dv.zero_since < now() - d.retire_after_s * interval '1 second' "
			     "  AND EXISTS (SELECT 1 FROM deployment_versions o WHERE o.deployment_id = dv.deployment_id "
			     "              AND o.state = 'serving' AND o.weight > 0) "
			     "  FOR UPDATE OF dv), "
			     "u AS (UPDATE deployment_versions v SET state = 'retired' FROM due "
			     "  WHERE v.deployment_id = due.deployment_id AND v.version = due.version "
			     "  RETURNING v.deployment_id, v.version, due.retire_after_s) "
			     "INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "SELECT deployment_id, $1, 'version-retired', jsonb_build_object('version', version, "
			     "  'why', format('at 0%% for more than retire_after (%s s): drained, its replicas stop', "
			     "  retire_after_s)) FROM u RETURNING deployment_id",
			     1, p)) < 0)
		return error;
	*n = PQntuples(res);
	PQclear(res);
	return FERRY_OK;
}

int store_deploy_retire_after(PGconn *conn, int64_t dep, int secs, const char *actor)
{
	char d[32], s[16];
	const char *p[3] = {I64(d, dep), secs > 0 ? I64(s, secs) : NULL, actor};
	PGresult *res = NULL;
	int error;

	if ((error = store_q(&res, conn,
			     "WITH u AS (UPDATE deployments SET retire_after_s = $2::int, updated_at = now() "
			     "  WHERE id = $1::bigint AND retire_after_s IS DISTINCT FROM $2::int RETURNING id), "
			     "ev AS (INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "  SELECT id, $3, 'retire-after', jsonb_build_object('seconds', $2::int) FROM u) "
			     "SELECT 1 FROM deployments WHERE id = $1::bigint",
			     3, p)) < 0)
		return error;
	return one_row(res, dep);
}
