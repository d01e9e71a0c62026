/*
 * store_queues — see store_queues.h. The views and the removal are the
 * functions of db/functions/queue_views.sql; a creation and a change are
 * one statement each with their audit row (as a secret's: neither without
 * the other). The fields travel as one JSON parameter, checked by
 * store_queue_fields first: what reaches the table always passes its
 * CHECKs.
 */
#include "store/store_queues.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

#define PRIORITY_MAX 1000
#define RUNNING_MAX 1000000
#define GPUS_MAX 100000
#define CPUS_MAX 1000000.0
#define DESCRIPTION_MAX 1024

int store_queue_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > 63 || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '_' ||
		      name[i] == '.' || name[i] == '-'))
			return 0;
	return 1;
}

/* A whole number from lo to hi (not 2.0, not true); null allowed when nullable. */
static int whole(const json_t *v, json_int_t lo, json_int_t hi, int nullable)
{
	if (json_is_null(v))
		return nullable;
	return json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi;
}

/* One field of body checked; 0, or FERRY_EINVALID with the message set. */
static int check_field(const char *key, const json_t *v, int creating)
{
	if (strcmp(key, "name") == 0) {
		if (!creating) {
			ferry_error_set("a queue's name is not changed: create one of the new name and delete this one");
			return FERRY_EINVALID;
		}
		if (!json_is_string(v) || !store_queue_name_ok(json_string_value(v))) {
			ferry_error_set("field \"name\" must be 1-63 of a-z, 0-9, _, . and -, starting with a letter or digit");
			return FERRY_EINVALID;
		}
	} else if (strcmp(key, "priority") == 0) {
		if (!whole(v, -PRIORITY_MAX, PRIORITY_MAX, 0)) {
			ferry_error_set("field \"priority\" must be a whole number from -%d to %d (higher is admitted first)",
					PRIORITY_MAX, PRIORITY_MAX);
			return FERRY_EINVALID;
		}
	} else if (strcmp(key, "max_running") == 0) {
		if (!whole(v, 1, RUNNING_MAX, 1)) {
			ferry_error_set("field \"max_running\" must be a whole number from 1 to %d, or null for no limit",
					RUNNING_MAX);
			return FERRY_EINVALID;
		}
	} else if (strcmp(key, "max_gpus") == 0) {
		if (!whole(v, 0, GPUS_MAX, 1)) {
			ferry_error_set("field \"max_gpus\" must be a whole number from 0 to %d, or null for no limit",
					GPUS_MAX);
			return FERRY_EINVALID;
		}
	} else if (strcmp(key, "max_cpus") == 0) {
		if (!json_is_null(v) &&
		    !(json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) <= CPUS_MAX &&
		      isfinite(json_number_value(v)))) {
			ferry_error_set("field \"max_cpus\" must be a number of CPUs > 0 (such as 8 or 2.5), or null for "
					"no limit");
			return FERRY_EINVALID;
		}
	} else if (strcmp(key, "description") == 0) {
		if (!json_is_null(v) && !(json_is_string(v) && json_string_length(v) <= DESCRIPTION_MAX &&
					  strlen(json_string_value(v)) == json_string_length(v))) {
			ferry_error_set("field \"description\" must be a string of at most %d bytes, without NUL",
					DESCRIPTION_MAX);
			return FERRY_EINVALID;
		}
	} else {
		ferry_error_set("unknown field \"%.64s\"; a queue has name, priority, max_running, max_gpus, max_cpus "
				"and description", key);
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

int store_queue_fields(json_t **out, const char **field, const json_t *body, int creating)
{
	static const char *const order[] = {"name", "priority", "max_running", "max_gpus", "max_cpus", "description"};
	const char *key;
	json_t *v;

	*out = NULL;
	*field = NULL;
	if (!json_is_object(body)) {
		ferry_error_set("the request body must be a JSON object");
		return FERRY_EINVALID;
	}
	/* the known fields in a fixed order, so the first bad one named does not depend on the body's order */
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		if ((v = json_object_get(body, order[i])) != NULL && check_field(order[i], v, creating) < 0) {
			*field = order[i];
			return FERRY_EINVALID;
		}
	json_object_foreach((json_t *)body, key, v)
		if (check_field(key, v, creating) < 0) {
			*field = key;
			return FERRY_EINVALID;
		}
	if (creating && json_object_get(body, "name") == NULL) {
		*field = "name";
		ferry_error_set("field \"name\" (the queue's name, such as nightly) is required");
		return FERRY_EINVALID;
	}
	if (!creating && json_object_size(body) == 0) {
		ferry_error_set("nothing to change: give priority, max_running, max_gpus, max_cpus or description");
		return FERRY_EINVALID;
	}
	*out = json_deep_copy(body);
	return FERRY_OK;
}

/* The one text value of a statement's single row, the caller's. */
static int one_text(char **out, PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn, sql, n, params)) < 0)
		return error;
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
		PQclear(res);
		ferry_error_set("the queue's answer is missing");
		return FERRY_ERROR;
	}
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_queue_list(char **out, PGconn *conn)
{
	return one_text(out, conn, "SELECT ferry_queues()::text", 0, NULL);
}

int store_queue_detail(char **out, PGconn *conn, const char *name, int limit, const json_t *admission)
{
	char lim[16], *adm = admission ? json_dumps(admission, JSON_COMPACT) : NULL;
	const char *p[3] = {name, lim, adm ? adm : "{}"};
	int error;

	snprintf(lim, sizeof(lim), "%d", limit);
	error = one_text(out, conn, "SELECT ferry_queue_detail($1, $2::int, $3::jsonb)::text", 3, p);
	free(adm);
	return error;
}

/* The settings of a queue row as the audit trail records them (before or after a change). */
#define SETTINGS(t)                                                                                                   \
	"jsonb_build_object('priority', " t ".priority, 'max_running', " t ".max_running, 'max_gpus', " t               \
	".max_gpus, 'max_cpus', " t ".max_cpus, 'description', " t ".description)"

/* The number of rows a statement returned, or its error. */
static int rows_of(int *n, PGconn *conn, const char *sql, int np, const char *const *params)
{
	PGresult *res = NULL;
	int error = store_q(&res, conn, sql, np, params);

	*n = 0;
	if (error < 0)
		return error;
	*n = PQntuples(res);
	PQclear(res);
	return FERRY_OK;
}

int store_queue_create(char **out, PGconn *conn, const json_t *fields, const char *actor)
{
	char *f = json_dumps(fields, JSON_COMPACT);
	const char *name = json_string_value(json_object_get(fields, "name"));
	const char *p[2] = {f, actor};
	int error, n = 0;

	*out = NULL;
	/* the queue and its audit row in one statement; one that exists is left as it is */
	error = rows_of(&n, conn,
			"WITH f AS (SELECT $1::jsonb AS j), "
			"q AS (INSERT INTO queues (name, priority, max_running, max_gpus, max_cpus, description) "
			"  SELECT j ->> 'name', coalesce((j ->> 'priority')::int, 0), (j ->> 'max_running')::int, "
			"    (j ->> 'max_gpus')::int, (j ->> 'max_cpus')::real, coalesce(j ->> 'description', '') FROM f "
			"  ON CONFLICT (name) DO NOTHING RETURNING *) "
			"INSERT INTO audit (actor, object, object_id, action, detail) "
			"SELECT $2, 'queue', 0, 'created', jsonb_build_object('name', q.name, 'after', " SETTINGS("q") ") "
			"FROM q RETURNING 1",
			2, p);
	free(f);
	if (error < 0)
		return error;
	if (n == 0) {
		ferry_error_set("queue %s exists; change it with `ferry queues set %s` (PATCH /api/v1/queues/%s)", name,
				name, name);
		return FERRY_ECONFLICT;
	}
	{
		const char *q[1] = {name};
		return one_text(out, conn, "SELECT ferry_queue_json($1)::text", 1, q);
	}
}

int store_queue_update(char **out, PGconn *conn, const char *name, const json_t *fields, const char *actor)
{
	char *f = json_dumps(fields, JSON_COMPACT);
	const char *p[3] = {name, f, actor};
	int error, n = 0;

	*out = NULL;
	/*
	 * Only the fields given change ("max_gpus": null clears that quota); the
	 * row is locked while it is read, so before is what this change replaced.
	 */
	error = rows_of(&n, conn,
			"WITH o AS (SELECT * FROM queues WHERE name = $1 FOR UPDATE), "
			"q AS (UPDATE queues u SET "
			"  priority = CASE WHEN $2::jsonb ? 'priority' THEN ($2::jsonb ->> 'priority')::int ELSE u.priority END, "
			"  max_running = CASE WHEN $2::jsonb ? 'max_running' THEN ($2::jsonb ->> 'max_running')::int "
			"    ELSE u.max_running END, "
			"  max_gpus = CASE WHEN $2::jsonb ? 'max_gpus' THEN ($2::jsonb ->> 'max_gpus')::int ELSE u.max_gpus END, "
			"  max_cpus = CASE WHEN $2::jsonb ? 'max_cpus' THEN ($2::jsonb ->> 'max_cpus')::real ELSE u.max_cpus END, "
			"  description = CASE WHEN $2::jsonb ? 'description' THEN coalesce($2::jsonb ->> 'description', '') "
			"    ELSE u.description END, "
			"  updated_at = now() "
			"  FROM o WHERE u.name = o.name RETURNING u.*) "
			"INSERT INTO audit (actor, object, object_id, action, detail) "
			"SELECT $3, 'queue', 0, 'changed', jsonb_build_object('name', q.name, 'before', " SETTINGS("o") ", "
			"  'after', " SETTINGS("q") ") "
			"FROM q JOIN o ON o.name = q.name RETURNING 1",
			3, p);
	free(f);
	if (error < 0)
		return error;
	if (n == 0) {
		ferry_error_set("no queue named \"%.64s\"; ferry queues lists them", name);
		return FERRY_ENOTFOUND;
	}
	{
		const char *q[1] = {name};
		return one_text(out, conn, "SELECT ferry_queue_json($1)::text", 1, q);
	}
}

int store_queue_delete(char **out, PGconn *conn, const char *name, const char *actor)
{
	const char *p[2] = {name, actor};

	return one_text(out, conn, "SELECT ferry_queue_delete($1, $2)::text", 2, p);
}

int store_preempt(struct store_victim **out, int *n, PGconn *conn, const char *owner, const char *host,
		  double after_s, double default_cpus)
{
	char after[32], cpus[32];
	const char *params[4] = {owner, host, after, cpus};
	PGresult *res = NULL;
	int error, rows;

	*out = NULL;
	*n = 0;
	snprintf(after, sizeof(after), "%.3f seconds", after_s);
	snprintf(cpus, sizeof(cpus), "%g", default_cpus);
	if ((error = store_q(&res, conn, "SELECT step_id, attempt, reason FROM ferry_preempt($1, $2, $3::interval, $4)",
			     4, params)) < 0)
		return error;
	rows = PQntuples(res);
	if (rows > 0) {
		*out = xcalloc((size_t)rows, sizeof(**out));
		for (int i = 0; i < rows; i++) {
			(*out)[i].step_id = store_intval(res, i, 0);
			(*out)[i].attempt = (int)store_intval(res, i, 1);
			(*out)[i].reason = store_dupval(res, i, 2);
		}
	}
	*n = rows;
	PQclear(res);
	return FERRY_OK;
}

void store_victims_free(struct store_victim *v, int n)
{
	for (int i = 0; v && i < n; i++)
		free(v[i].reason);
	free(v);
}
