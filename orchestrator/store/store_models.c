/*
 * store_models — the model registry's SQL: registering a version (one call
 * of ferry_model_register, db/migrations/0003_registry.sql), moving aliases,
 * and the JSON the API shows for models, versions and their history. Like
 * the rest of the store, every statement is parameterised and the JSON is
 * built by PostgreSQL. Aliases have one shape wherever a model is shown
 * (GET /models, /models/{name}): {"production": "0.0.2", …}, alias to
 * version; a version shows the aliases pointing at it as a list of names
 * (ferry_model_version_json). Who moved an alias, and when, is in the
 * model's events.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

/* The single JSON value of res, or FERRY_ENOTFOUND with msg when it is NULL. */
static int json_result(char **out, PGresult *res, const char *what, const char *name)
{
	int error = FERRY_OK;

	if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
		ferry_error_set("%s \"%s\" not found", what, name);
		error = FERRY_ENOTFOUND;
	} else {
		*out = xstrdup(PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	return error;
}

int store_model_register(char **version, int *created, json_t **version_json, PGconn *conn,
			 const struct store_model_reg *m)
{
	char bytes[32], run[32];
	char *metrics = m->metrics ? json_dumps(m->metrics, JSON_COMPACT) : NULL;
	char *params = m->params ? json_dumps(m->params, JSON_COMPACT) : NULL;
	char *aliases = json_dumps(m->aliases ? m->aliases : json_array(), JSON_COMPACT | JSON_ENCODE_ANY);
	const char *p[15] = {m->model, m->bump, m->sha256, m->kind, bytes, m->path, m->name, m->source,
			     metrics, params, m->run_id > 0 ? run : NULL, m->step, m->data_fingerprint,
			     aliases, m->actor};
	PGresult *res = NULL;
	char *edited = NULL;
	/* with a description or tags: the version and its edit are one transaction */
	int edit = m->description != NULL || m->tags != NULL, error;

	*version = NULL;
	*created = 0;
	*version_json = NULL;
	snprintf(bytes, sizeof(bytes), "%lld", (long long)m->bytes);
	snprintf(run, sizeof(run), "%lld", (long long)m->run_id);
	if (edit && (error = store_tx(conn, "BEGIN")) < 0)
		goto out;
	error = store_q(&res, conn,
			"SELECT version, created, version_json FROM ferry_model_register($1, $2, $3, $4, $5::bigint, "
			"$6, $7, $8, $9::jsonb, $10::jsonb, $11::bigint, $12, $13, "
			"ARRAY(SELECT jsonb_array_elements_text($14::jsonb)), $15)",
			15, p);
	if (error < 0)
		goto out;
	*version = xstrdup(PQgetvalue(res, 0, 0));
	*created = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	if (edit) {
		if ((error = store_model_edit(&edited, conn, m->model, *version, m->description, m->tags, -1,
					      m->actor)) < 0 ||
		    (error = store_tx(conn, "COMMIT")) < 0)
			goto out;
		*version_json = json_loads(edited, 0, NULL);
	} else {
		*version_json = json_loads(PQgetvalue(res, 0, 2), 0, NULL);
	}
out:
	if (error < 0) {
		if (edit)
			store_tx(conn, "ROLLBACK");
		free(*version);
		*version = NULL;
	}
	PQclear(res);
	free(metrics), free(params), free(aliases), free(edited);
	return error;
}

int store_model_alias_get(char **version, json_t **metrics, PGconn *conn, const char *model,
			  const char *alias)
{
	const char *p[2] = {model, alias};
	PGresult *res = NULL;
	int error;

	*version = NULL;
	*metrics = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT v.version, v.metrics FROM model_aliases a "
			     "JOIN models m ON m.id = a.model_id JOIN model_versions v ON v.id = a.version_id "
			     "WHERE m.name = $1 AND a.alias = $2", 2, p)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		PQclear(res);
		ferry_error_set("model \"%s\" has no version with alias \"%s\"", model, alias);
		return FERRY_ENOTFOUND;
	}
	*version = xstrdup(PQgetvalue(res, 0, 0));
	*metrics = PQgetisnull(res, 0, 1) ? json_object() : json_loads(PQgetvalue(res, 0, 1), 0, NULL);
	PQclear(res);
	return FERRY_OK;
}

int store_models_list(char **out, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT json_build_object('models', coalesce(json_agg(json_build_object("
			     "  'name', m.name, "
			     "  'versions', (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id), "
			     "  'latest', (SELECT v.version FROM model_versions v WHERE v.model_id = m.id "
			     "             ORDER BY v.major DESC, v.minor DESC, v.patch DESC LIMIT 1), "
			     "  'aliases', (SELECT coalesce(json_object_agg(a.alias, v.version ORDER BY a.alias), '{}') "
			     "              FROM model_aliases a JOIN model_versions v ON v.id = a.version_id "
			     "              WHERE a.model_id = m.id), "
			     "  'description', m.description, 'tags', m.tags, "
			     "  'created_at', ferry_ts(m.created_at), 'updated_at', ferry_ts(m.updated_at)"
			     ") ORDER BY m.name), '[]')) FROM models m", 0, NULL)) < 0)
		return error;
	return json_result(out, res, "models", "");
}

int store_model_get(char **out, PGconn *conn, const char *name)
{
	const char *p[1] = {name};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT json_build_object('name', m.name, "
			     "  'versions', (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id), "
			     "  'latest', (SELECT v.version FROM model_versions v WHERE v.model_id = m.id "
			     "             ORDER BY v.major DESC, v.minor DESC, v.patch DESC LIMIT 1), "
			     "  'aliases', (SELECT coalesce(json_object_agg(a.alias, v.version ORDER BY a.alias), '{}') "
			     "              FROM model_aliases a JOIN model_versions v ON v.id = a.version_id "
			     "              WHERE a.model_id = m.id), "
			     "  'events', (SELECT coalesce(json_agg(json_build_object('id', e.id, 'at', ferry_ts(e.at), "
			     "                 'actor', e.actor, 'kind', e.kind, 'version', e.version, 'alias', e.alias, "
			     "                 'detail', e.detail) ORDER BY e.id), '[]') "
			     "             FROM model_events e WHERE e.model_id = m.id), "
			     "  'description', m.description, 'tags', m.tags, "
			     "  'created_at', ferry_ts(m.created_at), 'updated_at', ferry_ts(m.updated_at)) "
			     "FROM models m WHERE m.name = $1", 1, p)) < 0)
		return error;
	return json_result(out, res, "model", name);
}

int store_model_versions(char **out, PGconn *conn, const char *name, const json_t *tags)
{
	char *tj = tags ? json_dumps(tags, JSON_COMPACT) : NULL;
	const char *p[2] = {name, tj};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	/* tags: only the versions that have each of these (tags @> filter) */
	error = store_q(&res, conn,
			"SELECT json_build_object('model', m.name, 'versions', "
			"  (SELECT coalesce(json_agg(ferry_model_version_json(v.id) "
			"                   ORDER BY v.major DESC, v.minor DESC, v.patch DESC), '[]') "
			"   FROM model_versions v WHERE v.model_id = m.id AND ($2::jsonb IS NULL OR v.tags @> $2::jsonb))) "
			"FROM models m WHERE m.name = $1", 2, p);
	free(tj);
	if (error < 0)
		return error;
	return json_result(out, res, "model", name);
}

int store_model_version(char **out, PGconn *conn, const char *name, const char *version)
{
	const char *p[2] = {name, version};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	/* a version string, or an alias naming one */
	if ((error = store_q(&res, conn,
			     "SELECT ferry_model_version_json(coalesce("
			     "  (SELECT v.id FROM model_versions v WHERE v.model_id = m.id AND v.version = $2), "
			     "  (SELECT a.version_id FROM model_aliases a WHERE a.model_id = m.id AND a.alias = $2))), "
			     "  m.id "
			     "FROM models m WHERE m.name = $1", 2, p)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		PQclear(res);
		ferry_error_set("model \"%s\" not found", name);
		return FERRY_ENOTFOUND;
	}
	if (PQgetisnull(res, 0, 0)) {
		PQclear(res);
		ferry_error_set("model \"%s\" has no version or alias \"%s\"", name, version);
		return FERRY_ENOTFOUND;
	}
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_model_alias_set(char **out, PGconn *conn, const char *name, const char *alias,
			  const char *version, const char *actor)
{
	const char *p[4] = {name, alias, version, actor};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn, "SELECT ferry_model_alias_set($1, $2, $3, $4)", 4, p)) < 0)
		return error;
	return json_result(out, res, "model", name);
}

int store_alias_bound(char **deployment, PGconn *conn, const char *model, const char *alias)
{
	const char *p[2] = {model, alias};
	PGresult *res = NULL;
	int error = store_q(&res, conn, "SELECT ferry_alias_bound($1, $2)", 2, p);

	*deployment = NULL;
	if (error < 0)
		return error;
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		*deployment = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_model_alias_delete(char **out, PGconn *conn, const char *name, const char *alias, const char *actor)
{
	const char *p[3] = {name, alias, actor};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn, "SELECT ferry_model_alias_delete($1, $2, $3)", 3, p)) < 0)
		return error;
	return json_result(out, res, "model", name);
}

int store_model_edit(char **out, PGconn *conn, const char *name, const char *version, const char *description,
		     const json_t *tags, int archived, const char *actor)
{
	char *tj = tags ? json_dumps(tags, JSON_COMPACT) : NULL;
	const char *p[6] = {name, version, description, tj, archived < 0 ? NULL : archived ? "true" : "false", actor};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	error = store_q(&res, conn, "SELECT ferry_model_edit($1, $2, $3, $4::jsonb, $5::boolean, $6)", 6, p);
	free(tj);
	if (error < 0)
		return error;
	return json_result(out, res, "model", name);
}
