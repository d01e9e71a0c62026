/*
 * store_deploy_json — the deployments as structs (store_deploy.h): the
 * names of their states, parsing the JSON aggregate store_deploy.c's
 * queries return into them (one round trip for a deployment with its
 * versions and replicas) and writing them back as the API's JSON. Pure:
 * no database here, so the parsing is tested without one.
 */
#include "store/store_deploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

static const char *const state_names[] = {[DEPLOY_RUNNING] = "running", [DEPLOY_STOPPED] = "stopped", NULL};
static const char *const vstate_names[] = {[DEPLOY_V_STARTING] = "starting", [DEPLOY_V_SERVING] = "serving",
					   [DEPLOY_V_RETIRED] = "retired", NULL};
static const char *const health_names[] = {[DEPLOY_H_STARTING] = "starting", [DEPLOY_H_HEALTHY] = "healthy",
					   [DEPLOY_H_UNHEALTHY] = "unhealthy", [DEPLOY_H_STOPPED] = "stopped", NULL};

const char *deploy_state_name(enum deploy_state s)
{
	return state_names[s];
}

const char *deploy_version_state_name(enum deploy_version_state s)
{
	return vstate_names[s];
}

const char *deploy_health_name(enum deploy_health h)
{
	return health_names[h];
}

static void replica_dispose(struct deploy_replica *r)
{
	json_decref(r->handle);
	free(r->last_error);
}

static void version_dispose(struct deploy_version *v)
{
	for (size_t i = 0; i < v->nreplicas; i++)
		replica_dispose(&v->replicas[i]);
	free(v->replicas);
	free(v->version), free(v->artifact), free(v->step), free(v->zero_since);
	json_decref(v->serve);
	json_decref(v->load_test);
}

void deployment_dispose(struct deployment *d)
{
	if (d == NULL)
		return;
	for (size_t i = 0; i < d->nversions; i++)
		version_dispose(&d->versions[i]);
	free(d->versions);
	free(d->name), free(d->model), free(d->deadline), free(d->created_at);
	free(d->match_version), free(d->match_header), free(d->match_value);
	memset(d, 0, sizeof(*d));
}

void deployment_free(struct deployment *d)
{
	deployment_dispose(d);
	free(d);
}

void deployments_free(struct deployment *list, size_t n)
{
	if (list == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		deployment_dispose(&list[i]);
	free(list);
}

/*
 * Field readers of the JSON aggregate: FERRY_EDB naming the field when it
 * is missing or of another type; nullable ones take null (and absence) as
 * NULL or 0.
 */
static int bad_field(const char *what, const char *key, const char *want)
{
	ferry_error_set("deployments: bad row from the database: %s.%s is not %s", what, key, want);
	return FERRY_EDB;
}

static int field_str(char **out, const json_t *o, const char *what, const char *key, int nullable)
{
	const json_t *v = json_object_get(o, key);

	*out = NULL;
	if (nullable && (v == NULL || json_is_null(v)))
		return FERRY_OK;
	if (!json_is_string(v))
		return bad_field(what, key, "a string");
	*out = xstrdup(json_string_value(v));
	return FERRY_OK;
}

static int field_i64(int64_t *out, const json_t *o, const char *what, const char *key, int nullable)
{
	const json_t *v = json_object_get(o, key);

	*out = 0;
	if (nullable && (v == NULL || json_is_null(v)))
		return FERRY_OK;
	if (!json_is_integer(v))
		return bad_field(what, key, "an integer");
	*out = json_integer_value(v);
	return FERRY_OK;
}

static int field_int(int *out, const json_t *o, const char *what, const char *key, int nullable)
{
	int64_t x = 0;
	int error = field_i64(&x, o, what, key, nullable);

	*out = (int)x;
	return error;
}

/* The JSON at key, shared (NULL when absent or null). */
static json_t *field_json(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return v == NULL || json_is_null(v) ? NULL : json_incref(v);
}

/* key's value, one of names (NULL-terminated): its index in *out. */
static int field_enum(int *out, const json_t *o, const char *what, const char *key, const char *const *names)
{
	const char *s = json_string_value(json_object_get(o, key));

	for (int i = 0; s && names[i]; i++)
		if (strcmp(names[i], s) == 0) {
			*out = i;
			return FERRY_OK;
		}
	return bad_field(what, key, "a known state");
}

static int replica_from_json(struct deploy_replica *r, const json_t *j)
{
	int h = 0, error;

	if ((error = field_int(&r->idx, j, "replica", "idx", 0)) < 0 ||
	    (error = field_int(&r->port, j, "replica", "port", 0)) < 0 ||
	    (error = field_enum(&h, j, "replica", "health", health_names)) < 0 ||
	    (error = field_int(&r->restarts, j, "replica", "restarts", 0)) < 0 ||
	    (error = field_int(&r->generation, j, "replica", "generation", 0)) < 0 ||
	    (error = field_str(&r->last_error, j, "replica", "last_error", 1)) < 0 ||
	    (error = field_i64(&r->next_start_in_ms, j, "replica", "next_start_in_ms", 1)) < 0)
		return error;
	r->health = (enum deploy_health)h;
	r->handle = field_json(j, "handle");
	return FERRY_OK;
}

static int version_from_json(struct deploy_version *v, const json_t *j)
{
	const json_t *reps = json_object_get(j, "replica_list"), *x;
	int st = 0, error;
	size_t i;

	if ((error = field_str(&v->version, j, "version", "version", 0)) < 0 ||
	    (error = field_int(&v->ord, j, "version", "ord", 0)) < 0 ||
	    (error = field_int(&v->weight, j, "version", "weight", 0)) < 0 ||
	    (error = field_int(&v->want_replicas, j, "version", "replicas", 0)) < 0 ||
	    (error = field_enum(&st, j, "version", "state", vstate_names)) < 0 ||
	    (error = field_str(&v->artifact, j, "version", "artifact", 0)) < 0 ||
	    (error = field_i64(&v->run_id, j, "version", "run_id", 1)) < 0 ||
	    (error = field_str(&v->step, j, "version", "step", 1)) < 0 ||
	    (error = field_str(&v->zero_since, j, "version", "zero_since", 1)) < 0)
		return error;
	v->state = (enum deploy_version_state)st;
	{
		const char *said = json_string_value(json_object_get(j, "health_said"));
		v->said = said == NULL ? DEPLOY_SAID_NONE
			  : strcmp(said, "unserved") == 0 ? DEPLOY_SAID_UNSERVED : DEPLOY_SAID_SERVED;
	}
	v->serve = field_json(j, "serve");
	v->load_test = field_json(j, "load_test");
	if (reps != NULL && !json_is_array(reps))
		return bad_field("version", "replica_list", "an array");
	v->replicas = xcalloc(json_array_size(reps) + 1, sizeof(*v->replicas));
	json_array_foreach(reps, i, x) {
		v->nreplicas++;
		if ((error = replica_from_json(&v->replicas[i], x)) < 0)
			return error;
	}
	return FERRY_OK;
}

/* Fills d (zeroed) from j; on error d holds what was parsed (deployment_dispose). */
static int deployment_fill(struct deployment *d, const json_t *j)
{
	const json_t *vs = json_object_get(j, "versions"), *x;
	int st = 0, error;
	size_t i;

	if (!json_is_object(j))
		return bad_field("deployment", "*", "an object");
	if ((error = field_i64(&d->id, j, "deployment", "id", 0)) < 0 ||
	    (error = field_str(&d->name, j, "deployment", "name", 0)) < 0 ||
	    (error = field_str(&d->model, j, "deployment", "model", 0)) < 0 ||
	    (error = field_int(&d->port, j, "deployment", "port", 0)) < 0 ||
	    (error = field_enum(&st, j, "deployment", "state", state_names)) < 0 ||
	    (error = field_int(&d->auto_stop_s, j, "deployment", "auto_stop_s", 1)) < 0 ||
	    (error = field_int(&d->retire_after_s, j, "deployment", "retire_after_s", 1)) < 0 ||
	    (error = field_str(&d->deadline, j, "deployment", "deadline", 1)) < 0 ||
	    (error = field_str(&d->created_at, j, "deployment", "created_at", 1)) < 0 ||
	    (error = field_i64(&d->run_id, j, "deployment", "run_id", 1)) < 0 ||
	    (error = field_str(&d->match_version, j, "deployment", "match_version", 1)) < 0 ||
	    (error = field_str(&d->match_header, j, "deployment", "match_header", 1)) < 0 ||
	    (error = field_str(&d->match_value, j, "deployment", "match_value", 1)) < 0)
		return error;
	d->state = (enum deploy_state)st;
	if (vs != NULL && !json_is_array(vs))
		return bad_field("deployment", "versions", "an array");
	d->versions = xcalloc(json_array_size(vs) + 1, sizeof(*d->versions));
	json_array_foreach(vs, i, x) {
		d->nversions++;
		if ((error = version_from_json(&d->versions[i], x)) < 0)
			return error;
	}
	return FERRY_OK;
}

int deployment_from_json(struct deployment **out, const json_t *j)
{
	struct deployment *d = xcalloc(1, sizeof(*d));
	int error;

	*out = NULL;
	if ((error = deployment_fill(d, j)) < 0) {
		deployment_free(d);
		return error;
	}
	*out = d;
	return FERRY_OK;
}

int deployments_from_json(struct deployment **out, size_t *n, const json_t *j)
{
	struct deployment *list;
	const json_t *x;
	size_t i, k = 0;
	int error = FERRY_OK;

	*out = NULL;
	*n = 0;
	if (!json_is_array(j))
		return bad_field("deployments", "*", "an array");
	list = xcalloc(json_array_size(j) + 1, sizeof(*list));
	json_array_foreach(j, i, x) {
		k++;
		if ((error = deployment_fill(&list[i], x)) < 0) {
			deployments_free(list, k);
			return error;
		}
	}
	*out = list;
	*n = k;
	return FERRY_OK;
}

/* s as a JSON string, or null */
static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *json_or_null(json_t *j)
{
	return j ? json_incref(j) : json_null();
}

static json_t *i64_or_null(int64_t x)
{
	return x ? json_integer(x) : json_null();
}

static json_t *replica_to_json(const struct deploy_replica *r)
{
	json_t *o = json_object();

	json_object_set_new(o, "idx", json_integer(r->idx));
	json_object_set_new(o, "port", json_integer(r->port));
	json_object_set_new(o, "handle", json_or_null(r->handle));
	json_object_set_new(o, "health", json_string(deploy_health_name(r->health)));
	json_object_set_new(o, "restarts", json_integer(r->restarts));
	json_object_set_new(o, "generation", json_integer(r->generation));
	json_object_set_new(o, "last_error", str_or_null(r->last_error));
	json_object_set_new(o, "next_start_in_ms", json_integer(r->next_start_in_ms));
	return o;
}

static json_t *version_to_json(const struct deploy_version *v)
{
	json_t *o = json_object(), *reps = json_array();

	for (size_t i = 0; i < v->nreplicas; i++)
		json_array_append_new(reps, replica_to_json(&v->replicas[i]));
	json_object_set_new(o, "ord", json_integer(v->ord));
	json_object_set_new(o, "step", str_or_null(v->step));
	json_object_set_new(o, "serve", json_or_null(v->serve));
	json_object_set_new(o, "state", json_string(deploy_version_state_name(v->state)));
	json_object_set_new(o, "run_id", i64_or_null(v->run_id));
	json_object_set_new(o, "weight", json_integer(v->weight));
	json_object_set_new(o, "version", json_string(v->version));
	json_object_set_new(o, "artifact", json_string(v->artifact));
	json_object_set_new(o, "replicas", json_integer(v->want_replicas));
	json_object_set_new(o, "load_test", json_or_null(v->load_test));
	json_object_set_new(o, "zero_since", str_or_null(v->zero_since));
	json_object_set_new(o, "replica_list", reps);
	return o;
}

json_t *deployment_to_json(const struct deployment *d, const char *front)
{
	json_t *o = json_object(), *vs = json_array();

	for (size_t i = 0; i < d->nversions; i++)
		json_array_append_new(vs, version_to_json(&d->versions[i]));
	/* jsonb's order (by key length, then bytes): what the API answered when it passed the rows on */
	json_object_set_new(o, "id", json_integer(d->id));
	/* the front on the host that answers (each host serves every front at its address) */
	json_object_set_new(o, "url", json_sprintf("http://%s:%d", front ? front : "127.0.0.1", d->port));
	json_object_set_new(o, "name", json_string(d->name));
	json_object_set_new(o, "port", json_integer(d->port));
	json_object_set_new(o, "model", json_string(d->model));
	json_object_set_new(o, "state", json_string(deploy_state_name(d->state)));
	json_object_set_new(o, "run_id", i64_or_null(d->run_id));
	json_object_set_new(o, "deadline", str_or_null(d->deadline));
	json_object_set_new(o, "versions", vs);
	json_object_set_new(o, "created_at", str_or_null(d->created_at));
	json_object_set_new(o, "auto_stop_s", d->auto_stop_s ? json_integer(d->auto_stop_s) : json_null());
	json_object_set_new(o, "retire_after_s", d->retire_after_s ? json_integer(d->retire_after_s) : json_null());
	/* an A/B test's routing: {version, header, value}, or null */
	json_object_set_new(o, "match", d->match_version ? json_pack("{s:s, s:s, s:o}", "version", d->match_version,
								   "header", d->match_header, "value",
								   str_or_null(d->match_value))
						 : json_null());
	return o;
}

const struct deploy_version *deployment_version(const struct deployment *d, const char *version)
{
	for (size_t i = 0; d && version && i < d->nversions; i++)
		if (strcmp(d->versions[i].version, version) == 0)
			return &d->versions[i];
	return NULL;
}

/* ---- the auto-stop warnings -------------------------------------------------- */

void deploy_warnings_free(struct deploy_warning *w, size_t n)
{
	if (w == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(w[i].deployment), free(w[i].deadline);
	free(w);
}

/* The warnings of the JSON aggregate [{"id","deployment","deadline"}] (store_deploy_due's). */
int deploy_warnings_from_json(struct deploy_warning **out, size_t *n, const json_t *j)
{
	const json_t *x;
	size_t i;
	int error = FERRY_OK;

	*out = xcalloc(json_array_size(j) + 1, sizeof(**out));
	*n = 0;
	json_array_foreach(j, i, x) {
		struct deploy_warning *w = &(*out)[i];
		(*n)++;
		if ((error = field_i64(&w->id, x, "warning", "id", 0)) < 0 ||
		    (error = field_str(&w->deployment, x, "warning", "deployment", 0)) < 0 ||
		    (error = field_str(&w->deadline, x, "warning", "deadline", 1)) < 0)
			break;
	}
	if (error < 0) {
		deploy_warnings_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return error;
}
