/*
 * api_queues — /api/v1/queues (issue 30): the queues steps wait in, each
 * with its priority and quotas over the fleet. Viewers list them (with
 * what each holds and how many steps wait) and read one: its running
 * attempts and its waiting steps in the claim's order, each saying what it
 * waits for (db/functions/queue_views.sql). Admins create, change and
 * delete them; each change is in the audit trail with its actor. The
 * fields are checked by store_queue_fields: a bad value is a 400 naming
 * it and changes nothing.
 */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_priv.h"
#include "engine/host.h"
#include "store/store_queues.h"
#include "lib/util.h"

void api_queues_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error;

	(void)a, (void)q;
	if ((error = store_queue_list(&json, db)) < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

void api_queue_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *lim = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "limit");
	json_t *none = json_object(), *admission;
	int64_t limit = QUEUE_WAITING_DEFAULT;
	char *json = NULL;
	int error;

	(void)a;
	if (lim && (parse_int64(lim, &limit) < 0 || limit < 1 || limit > QUEUE_WAITING_MAX)) {
		reply_error(r, 400, "invalid_field", "limit", "limit must be a whole number from 1 to 500", NULL);
		json_decref(none);
		return;
	}
	/* what this daemon's claim would read beside a host's room: FERRY_DEFAULT_CPUS, FERRY_QUEUE_STARVE_S */
	admission = host_admission(none);
	if ((error = store_queue_detail(&json, db, q->caps[0], (int)limit, admission)) < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
	json_decref(admission), json_decref(none);
}

/* A 400 naming the field store_queue_fields refused (none: the body as a whole). */
static void reply_fields(struct reply *r, const char *field)
{
	reply_error(r, 400, field ? "invalid_field" : "invalid", field, ferry_error_last(), NULL);
}

void api_queue_create(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q), *fields = NULL;
	const char *field = NULL;
	char *actor = NULL, *json = NULL;
	int error;

	(void)a;
	if (body == NULL)
		return;
	if (store_queue_fields(&fields, &field, body, 1) < 0) {
		reply_fields(r, field);
		goto out;
	}
	actor = actor_of(q);
	if ((error = store_queue_create(&json, db, fields, actor)) < 0) {
		if (error == FERRY_ECONFLICT)
			reply_error(r, 409, "conflict", "name", ferry_error_last(), NULL);
		else
			reply_store_error(r, error);
		goto out;
	}
	flog_info("queue %s created by %s", json_string_value(json_object_get(fields, "name")), actor);
	reply_json(r, 201, json);
out:
	free(actor);
	json_decref(fields), json_decref(body);
}

void api_queue_patch(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q), *fields = NULL;
	const char *field = NULL;
	char *actor = NULL, *json = NULL;
	int error;

	(void)a;
	if (body == NULL)
		return;
	if (store_queue_fields(&fields, &field, body, 0) < 0) {
		reply_fields(r, field);
		goto out;
	}
	actor = actor_of(q);
	if ((error = store_queue_update(&json, db, q->caps[0], fields, actor)) < 0) {
		reply_store_error(r, error);
		goto out;
	}
	flog_info("queue %s changed by %s", q->caps[0], actor);
	reply_json(r, 200, json);
out:
	free(actor);
	json_decref(fields), json_decref(body);
}

void api_queue_delete(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *actor = actor_of(q), *json = NULL;
	int error;

	(void)a;
	if ((error = store_queue_delete(&json, db, q->caps[0], actor)) < 0) {
		reply_store_error(r, error);
	} else {
		flog_info("queue %s deleted by %s", q->caps[0], actor);
		reply_json(r, 200, json);
	}
	free(actor);
}
