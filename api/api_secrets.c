/*
 * api_secrets — the routes of step secrets: GET /secrets lists names (who
 * set each, when), PUT /secrets/{name} {"value": "…"} sets one, DELETE
 * removes one. A value goes in and never comes out: no route, log line,
 * event or error repeats it; the request body that held it is zeroed
 * with the request (api.c). Roles are the route table's (api.c).
 */
#include "api/api_priv.h"

#include <stdlib.h>
#include <string.h>

#include "lib/seal.h"
#include "lib/util.h"
#include "store/store.h"

/* o as compact JSON text; o is taken. */
static char *dump_taken(json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT);

	json_decref(o);
	return s;
}

void api_secrets_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *list = NULL;
	int error;

	(void)a, (void)q;
	if ((error = store_secret_list(&list, db)) < 0) {
		reply_store_error(r, error);
		return;
	}
	reply_json(r, 200, dump_taken(json_pack("{s:o}", "secrets", list)));
}

void api_secret_put(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q), *v;
	const unsigned char *key;
	char *actor = NULL;
	int error;

	if (body == NULL)
		return;
	v = json_object_get(body, "value");
	if (!json_is_string(v)) {
		reply_error(r, 400, "invalid_field", "value", "field \"value\" (a string) is required", NULL);
		goto out;
	}
	if (!store_secret_name_ok(q->caps[0])) {
		reply_error(r, 400, "invalid_field", "name",
			    "a secret's name is an environment name: letters, digits and _, not starting with a "
			    "digit or FERRY_", NULL);
		goto out;
	}
	if ((key = seal_key_of(a->home ? a->home : ".ferry", 1)) == NULL) {
		reply_error(r, 500, "internal", NULL, ferry_error_last(), NULL);
		goto out;
	}
	actor = actor_of(q);
	error = store_secret_set(db, key, q->caps[0], json_string_value(v), json_string_length(v), actor);
	if (error == FERRY_EINVALID) {
		reply_error(r, 400, "invalid_field", "value", ferry_error_last(), NULL);
		goto out;
	}
	if (error < 0) {
		reply_store_error(r, error);
		goto out;
	}
	flog_info("secret %s set by %s", q->caps[0], actor);
	reply_json(r, 200, dump_taken(json_pack("{s:s, s:s}", "name", q->caps[0], "updated_by", actor)));
out:
	if (json_is_string(v))
		explicit_bzero((char *)json_string_value(v), json_string_length(v));
	free(actor);
	json_decref(body);
}

void api_secret_delete(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *actor = actor_of(q);
	int error;

	(void)a;
	if ((error = store_secret_delete(db, q->caps[0], actor)) < 0)
		reply_store_error(r, error);
	else {
		flog_info("secret %s removed by %s", q->caps[0], actor);
		reply_json(r, 200, dump_taken(json_pack("{s:s, s:b}", "name", q->caps[0], "removed", 1)));
	}
	free(actor);
}
