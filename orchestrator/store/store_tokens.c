/*
 * store_tokens — the SQL of named API tokens (db/migrations/0008_api_tokens.sql):
 * create, list and revoke them (`ferryd token`), and the live ones with
 * their hashes for the API's table (api/tokens.c). Only a token's sha256 is
 * ever stored or read; the token itself never reaches the database.
 */
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_token_create(PGconn *conn, const char *name, const char *role, const char *hash)
{
	const char *p[3] = {name, role, hash};
	PGresult *res = NULL;
	int error;

	error = store_q(&res, conn,
			"INSERT INTO api_tokens (name, role, hash) VALUES ($1, $2, $3) "
			"ON CONFLICT (name) DO NOTHING RETURNING 1",
			3, p);
	if (error < 0)
		return error;
	if (PQntuples(res) == 0) {
		ferry_error_set("a token named \"%s\" exists (revoked tokens keep their names); choose another name",
				name);
		error = FERRY_ECONFLICT;
	}
	PQclear(res);
	return error;
}

/* Fills *out from res: name, role, hash, created_at, revoked_at (NULL or empty columns: NULL). */
static int tokens_from(struct store_token **out, int *n, PGresult *res)
{
	int rows = PQntuples(res);
	struct store_token *v = xcalloc(rows > 0 ? (size_t)rows : 1, sizeof(*v));

	for (int i = 0; i < rows; i++) {
		char **f[5] = {&v[i].name, &v[i].role, &v[i].hash, &v[i].created_at, &v[i].revoked_at};
		for (int j = 0; j < 5; j++)
			if (!PQgetisnull(res, i, j))
				*f[j] = xstrdup(PQgetvalue(res, i, j));
	}
	PQclear(res);
	*out = v;
	*n = rows;
	return FERRY_OK;
}

int store_token_list(struct store_token **out, int *n, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	*n = 0;
	error = store_q(&res, conn,
			"SELECT name, role, NULL, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
			"to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') "
			"FROM api_tokens ORDER BY name",
			0, NULL);
	if (error < 0)
		return error;
	return tokens_from(out, n, res);
}

int store_token_live(struct store_token **out, int *n, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	*n = 0;
	error = store_q(&res, conn,
			"SELECT name, role, hash, NULL, NULL FROM api_tokens WHERE revoked_at IS NULL ORDER BY hash", 0,
			NULL);
	if (error < 0)
		return error;
	return tokens_from(out, n, res);
}

int store_token_revoke(PGconn *conn, const char *name)
{
	const char *p[1] = {name};
	PGresult *res = NULL;
	int error;

	error = store_q(&res, conn,
			"WITH u AS (UPDATE api_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL "
			"RETURNING 1) SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM api_tokens WHERE name = $1)",
			1, p);
	if (error < 0)
		return error;
	if (strcmp(PQgetvalue(res, 0, 1), "0") == 0) {
		ferry_error_set("no token named \"%s\" (see ferryd token list)", name);
		error = FERRY_ENOTFOUND;
	} else if (strcmp(PQgetvalue(res, 0, 0), "0") == 0) {
		ferry_error_set("token \"%s\" was already revoked", name);
		error = FERRY_ECONFLICT;
	}
	PQclear(res);
	return error;
}

int store_run_submitter(PGconn *conn, int64_t run_id, char **who, char **role)
{
	char id[24];
	const char *p[1] = {id};
	PGresult *res = NULL;
	int error;

	*who = *role = NULL;
	snprintf(id, sizeof(id), "%lld", (long long)run_id);
	/*
	 * A schedule's run acts for who set the schedule up last, a trigger's
	 * for who registered its workflow last; `ferry dev` and the benchmark
	 * hold the database itself. The built-in admin token (also "admin (as
	 * NAME)") is admin; a named token its role while it is not revoked.
	 */
	error = store_q(&res, conn,
			"WITH r AS (SELECT actor, trigger FROM runs WHERE id = $1), "
			"src AS (SELECT r.actor, r.trigger, CASE "
			"  WHEN r.actor LIKE 'schedule:%' THEN (SELECT coalesce(s.updated_by, s.created_by) "
			"    FROM schedules s WHERE 'schedule:' || s.workflow || '/' || s.name = r.actor) "
			"  WHEN r.actor LIKE 'trigger:%' THEN (SELECT t.updated_by FROM triggers t "
			"    WHERE 'trigger:' || t.workflow || '/' || t.name = r.actor) "
			"  ELSE r.actor END AS who FROM r) "
			"SELECT coalesce(src.who, src.actor), CASE "
			"  WHEN src.trigger IN ('dev', 'bench') THEN 'admin' "
			"  WHEN src.who = 'admin' OR src.who LIKE 'admin (as %' THEN 'admin' "
			"  ELSE coalesce((SELECT role FROM api_tokens WHERE name = src.who AND revoked_at IS NULL), "
			"                'none') END FROM src",
			1, p);
	if (error < 0)
		return error;
	if (PQntuples(res) != 1) {
		PQclear(res);
		ferry_error_set("run %s not found", id);
		return FERRY_ENOTFOUND;
	}
	*who = xstrdup(PQgetvalue(res, 0, 0));
	*role = xstrdup(PQgetvalue(res, 0, 1));
	PQclear(res);
	return FERRY_OK;
}

void store_tokens_free(struct store_token *v, int n)
{
	for (int i = 0; v && i < n; i++) {
		free(v[i].name), free(v[i].role), free(v[i].hash);
		free(v[i].created_at), free(v[i].revoked_at);
	}
	free(v);
}
