/*
 * store_workflows — registered workflow versions: reading a name's newest
 * version, writing one, listing them. What a version's schedule: and
 * triggers: become is synced above the store (schedule/workflows.c), in
 * the transaction store_workflow_write holds for it.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_workflow_latest(json_t **spec, char **hash, char **yaml, char **workdir, PGconn *conn,
			  const char *name)
{
	const char *params[1] = {name};
	PGresult *res = NULL;
	json_error_t jerr;
	int error;

	if ((error = store_q(&res, conn,
		             "SELECT hash, yaml, spec, workdir FROM workflows WHERE name = $1 "
		             "ORDER BY created_at DESC LIMIT 1", 1, params)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		PQclear(res);
		ferry_error_set("workflow \"%s\" is not registered (ferry workflow register FILE, or "
				"POST /api/v1/workflows, first; or send its YAML)", name);
		return FERRY_ENOTFOUND;
	}
	*hash = xstrdup(PQgetvalue(res, 0, 0));
	*yaml = xstrdup(PQgetvalue(res, 0, 1));
	*spec = json_loads(PQgetvalue(res, 0, 2), 0, &jerr);
	*workdir = store_dupval(res, 0, 3);
	PQclear(res);
	return *spec ? FERRY_OK : FERRY_ERROR;
}

int store_workflow_spec(json_t **spec, char **workdir, PGconn *conn, const char *name)
{
	char *hash = NULL, *yaml = NULL, *wd = NULL;
	int error;

	*spec = NULL;
	if ((error = store_workflow_latest(spec, &hash, &yaml, &wd, conn, name)) == FERRY_OK && workdir)
		*workdir = wd;
	else
		free(wd);
	free(hash), free(yaml);
	return error;
}

int store_workflow_write(char **out, PGconn *conn, const char *hash, const json_t *spec, const char *yaml,
			 size_t len, const char *workdir, int (*then)(PGconn *conn, void *arg), void *arg)
{
	char *spec_txt = NULL, *y = NULL;
	PGresult *res = NULL;
	int error;

	*out = NULL;
	spec_txt = json_dumps(spec, JSON_COMPACT);
	y = xstrndup(yaml, len);
	/* the version and what its schedule: and triggers: become, together */
	if ((error = store_tx(conn, "BEGIN")) < 0)
		goto out;
	{
		/* xmax = 0 tells a row just inserted from one the conflict updated */
		const char *p[5] = {hash, json_string_value(json_object_get(spec, "name")), y, spec_txt,
				    workdir};
		error = store_q(&res, conn,
			        "WITH i AS (INSERT INTO workflows (hash, name, yaml, spec, workdir) "
			        "           VALUES ($1, $2, $3, $4, $5) "
			        "           ON CONFLICT (hash) DO UPDATE SET workdir = EXCLUDED.workdir, "
			        "                                            created_at = now() "
			        "           RETURNING xmax = 0 AS inserted) "
			        "SELECT json_build_object('name', $2::text, 'hash', $1::text, "
			        "       'created', (SELECT inserted FROM i), 'workdir', $5::text, "
			        "       'steps', jsonb_array_length($4::jsonb -> 'steps'))",
			        5, p);
	}
	if (error == FERRY_OK && then)
		error = then(conn, arg);
	if (error == FERRY_OK)
		error = store_tx(conn, "COMMIT");
	if (error == FERRY_OK) {
		*out = xstrdup(PQgetvalue(res, 0, 0));
	} else {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", ferry_error_last());
		store_tx(conn, "ROLLBACK");
		ferry_error_set("%s", msg);
	}
out:
	PQclear(res);
	free(spec_txt);
	free(y);
	return error;
}

int store_workflows_list(char **out, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
		             "SELECT json_build_object('workflows', coalesce(json_agg(json_build_object("
		             "  'name', name, 'hash', hash, 'steps', jsonb_array_length(spec -> 'steps'), "
		             "  'description', spec -> 'description', 'params', coalesce(spec -> 'params', '{}'), "
		             "  'workdir', workdir, 'created_at', ferry_ts(created_at)) ORDER BY created_at DESC), "
		             "  '[]')) FROM workflows",
		             0, NULL)) < 0)
		return error;
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}
