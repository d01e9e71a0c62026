/*
 * api_models — the model registry's routes: GET /models, GET /models/{name},
 * GET /models/{name}/versions, GET /models/{name}/versions/{version} (a
 * version number or an alias) and PUT /models/{name}/aliases/{alias}
 * ({"version":"0.0.2"}), which moves the alias and records who did it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_priv.h"
#include "store.h"
#include "util.h"

/* Replies with the JSON text a store call produced, or with its error. */
static void reply_store(struct reply *r, int error, char *json)
{
	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

void api_models_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_models_list(&json, db);

	(void)a, (void)q;
	reply_store(r, error, json);
}

void api_model_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_model_get(&json, db, q->caps[0]);

	(void)a;
	reply_store(r, error, json);
}

void api_model_versions(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_model_versions(&json, db, q->caps[0]);

	(void)a;
	reply_store(r, error, json);
}

void api_model_version(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_model_version(&json, db, q->caps[0], q->caps[1]);

	(void)a;
	reply_store(r, error, json);
}

void api_model_alias_put(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q);
	const char *name = q->caps[0], *alias = q->caps[1], *version = NULL;
	char *actor = NULL, *json = NULL;
	int error;

	(void)a;
	if (body == NULL)
		return;
	if (opt_string(&version, r, body, "version") < 0)
		goto out;
	if (version == NULL) {
		reply_error(r, 400, "missing_field", "version",
			    "field \"version\" is required: the version the alias should point at, e.g. {\"version\":\"0.0.2\"}",
			    NULL);
		goto out;
	}
	actor = actor_of(q);
	error = store_model_alias_set(&json, db, name, alias, version, actor);
	if (error == FERRY_EINVALID)
		reply_error(r, 400, "invalid_field", "alias", ferry_error_last(), NULL);
	else
		reply_store(r, error, json);
out:
	free(actor);
	json_decref(body);
}
