/*
 * api_runs — the routes of runs and workflows: create (YAML, a registered
 * workflow or one from git), list (filters, a cursor), get (from the run
 * cache when the run is finished: api_run_cached answers on the MHD worker
 * without the database), stop, retry, delete, events, continue a waiting
 * step; register and list workflows. Each handler checks its input, calls
 * the runs service or the store, and answers JSON (api_reply.c).
 */
#include "api/api_priv.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/runcache.h"
#include "api/tokens.h"
#include "exec/exec.h"
#include "lib/states.h"
#include "lib/util.h"
#include "runs/runs.h"
#include "schedule/gitsrc.h"
#include "schedule/triggers.h"
#include "schedule/workflows.h"
#include "store/store.h"

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, X_OK) == 0;
}

/* Whether the run JSON text is of a finished run (one the run cache may keep). */
static int run_finished(const char *json)
{
	json_t *root = json_loads(json, 0, NULL);
	const char *state = json_string_value(json_object_get(root, "state"));
	int done = state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
			     strcmp(state, "stopped") == 0);

	json_decref(root);
	return done;
}

/*
 * GET /runs/{id} past the cache: the epoch is read before the fetch, so the
 * JSON of a run that a retry changed meanwhile is not kept (runcache.h).
 */
void api_run_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	uint64_t epoch = a->cache ? runcache_epoch(a->cache) : 0;
	int64_t id = q->id;
	char *json = NULL;
	int error = store_run_json(&json, db, id);

	if (error < 0) {
		reply_store_error(r, error);
		return;
	}
	if (a->cache && run_finished(json))
		runcache_put(a->cache, id, json, strlen(json), epoch);
	reply_json(r, 200, json);
}

/* A run this daemon just changed: forget it now rather than when the notification comes. */
static void run_changed(struct api *a, int64_t id)
{
	if (a->cache)
		runcache_invalidate(a->cache, id);
}

static void run_reply(struct reply *r, PGconn *db, int64_t id, unsigned status)
{
	char *json = NULL;
	int error = store_run_json(&json, db, id);

	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, status, json);
}

/*
 * A run's working directory from the API: an existing absolute directory,
 * inside FERRY_ALLOWED_ROOTS when set, that the job user can enter (its
 * jobs run there). 0 when it will do; otherwise the 400 is answered.
 */
static int workdir_ok(struct reply *r, const char *wd)
{
	char *real;
	int ok;

	if (wd[0] != '/' || strstr(wd, "/../") || !is_dir(wd)) {
		reply_error(r, 400, "invalid_field", "workdir", "field \"workdir\" must be an existing absolute directory", NULL);
		return -1;
	}
	real = realpath(wd, NULL);
	ok = real && exec_user_may_read(real, "workdir", NULL, NULL);
	if (!ok)
		reply_error(r, 400, "invalid_field", "workdir", real ? ferry_error_last() : "field \"workdir\" cannot be resolved", NULL);
	free(real);
	return ok ? 0 : -1;
}

/*
 * Whether a run may come from repository repo: one FERRY_GIT_REPOS names
 * (URL or path prefixes, separated by blanks or commas, matched at a '/'),
 * when it is set; a local path also only one the job user could read (and
 * inside FERRY_ALLOWED_ROOTS). 0, or -1 with the 400 answered.
 */
static int repo_ok(struct reply *r, const char *repo)
{
	const char *list = getenv("FERRY_GIT_REPOS");

	if (list && *list) {
		char *copy = xstrdup(list), *save = NULL;
		int ok = 0;
		for (char *e = strtok_r(copy, " ,\t\n", &save); e && !ok; e = strtok_r(NULL, " ,\t\n", &save)) {
			size_t n = strlen(e);
			ok = strncmp(repo, e, n) == 0 && (repo[n] == '\0' || repo[n] == '/' || e[n - 1] == '/');
		}
		free(copy);
		if (!ok) {
			reply_error(r, 400, "invalid_field", "repo",
				    "field \"repo\" names a repository FERRY_GIT_REPOS does not allow", NULL);
			return -1;
		}
	}
	if (repo[0] == '/') {
		char *real = realpath(repo, NULL);
		int ok = real && exec_user_may_read(real, "repo", NULL, NULL);
		if (!ok)
			reply_error(r, 400, "invalid_field", "repo", real ? ferry_error_last() : "field \"repo\" does not exist", NULL);
		free(real);
		if (!ok)
			return -1;
	}
	return 0;
}

void api_runs_create(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct MHD_Connection *conn = q->conn;
	struct runs_new rn;
	cfg_errors errs = {0};
	json_t *body = body_object(r, q), *params;
	const char *trigger = NULL, *bad_field = NULL, *repo = NULL, *ref = NULL, *path = NULL;
	char *actor = NULL, idem_hash[65] = "";
	int64_t id;
	int error;

	if (body == NULL)
		return;
	memset(&rn, 0, sizeof(rn));
	if (opt_string(&rn.yaml, r, body, "yaml") < 0 || opt_string(&rn.workflow, r, body, "workflow") < 0 ||
	    opt_string(&rn.filename, r, body, "filename") < 0 || opt_string(&rn.workdir, r, body, "workdir") < 0 ||
	    opt_string(&trigger, r, body, "trigger") < 0 || opt_bool(&rn.no_cache, r, body, "no_cache") < 0 ||
	    opt_string(&repo, r, body, "repo") < 0 || opt_string(&ref, r, body, "ref") < 0 ||
	    opt_string(&path, r, body, "path") < 0)
		goto out;
	if ((rn.yaml != NULL) + (rn.workflow != NULL) + (repo != NULL) != 1) {
		reply_error(r, 400, "invalid_field", rn.yaml ? "workflow" : "yaml",
			    "give exactly one of \"yaml\" (the workflow text), \"workflow\" (a registered name) or "
			    "\"repo\" (a git repository, with \"path\" and \"ref\")", NULL);
		goto out;
	}
	if (repo && (path == NULL || rn.workdir)) {
		reply_error(r, 400, "invalid_field", path ? "workdir" : "path",
			    path ? "a run from \"repo\" runs in a checkout of its commit: no \"workdir\""
				 : "field \"path\" (the workflow file in the repository) is required with \"repo\"",
			    NULL);
		goto out;
	}
	if (repo && !gitsrc_is_url(repo) && repo[0] != '/') {
		reply_error(r, 400, "invalid_field", "repo", "field \"repo\" must be a URL or an absolute path", NULL);
		goto out;
	}
	if (repo && repo_ok(r, repo) < 0)
		goto out;
	if ((ref || path) && repo == NULL) {
		reply_error(r, 400, "invalid_field", ref ? "ref" : "path", "\"ref\" and \"path\" go with \"repo\"", NULL);
		goto out;
	}
	params = json_object_get(body, "params");
	if (params && !json_is_null(params) && !json_is_object(params)) {
		reply_error(r, 400, "invalid_field", "params", "field \"params\" must be an object of name: value", NULL);
		goto out;
	}
	if (rn.workdir && workdir_ok(r, rn.workdir) < 0)
		goto out;
	if (trigger && strcmp(trigger, "api") != 0 && strcmp(trigger, "cli") != 0) {
		reply_error(r, 400, "invalid_field", "trigger", "field \"trigger\" must be \"api\" or \"cli\"", NULL);
		goto out;
	}
	rn.yaml_len = rn.yaml ? json_string_length(json_object_get(body, "yaml")) : 0;
	rn.params = params && json_is_object(params) ? params : NULL;
	rn.trigger = trigger ? trigger : "api";
	actor = actor_of(q);
	rn.actor = actor;
	rn.idem_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
	if (rn.idem_key) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned int mdlen = 0;
		if (strlen(rn.idem_key) == 0 || strlen(rn.idem_key) > 255) {
			reply_error(r, 400, "invalid_field", "Idempotency-Key", "Idempotency-Key must be 1 to 255 characters", NULL);
			goto out;
		}
		EVP_Digest(q->body ? q->body : "", q->len, md, &mdlen, EVP_sha256(), NULL);
		for (unsigned int i = 0; i < mdlen && i < 32; i++)
			snprintf(idem_hash + 2 * i, 3, "%02x", md[i]);
		rn.idem_hash = idem_hash;
	}
	if (rn.filename == NULL)
		rn.filename = "<inline>";
	rn.bad_field = &bad_field;
	if (repo) {
		char *home = a->home ? xstrdup(a->home) : xstrdup(".ferry");
		error = triggers_submit_from_git(&id, db, home, repo, ref ? ref : "HEAD", path, &rn, &errs);
		free(home);
	} else {
		error = runs_create(&id, db, &rn, &errs);
	}
	if (error == FERRY_EINVALID && errs.len > 0)
		reply_error(r, 400, "invalid_workflow", "yaml", ferry_error_last(), &errs);
	else if (error == FERRY_EINVALID)
		reply_error(r, 400, "invalid_field", bad_field ? bad_field : "params", ferry_error_last(), NULL);
	else if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 201);
	r->replayed = error == 1;
out:
	cfg_errors_dispose(&errs);
	free(actor);
	json_decref(body);
}

#define RUNS_LIMIT_MAX 500 /* the most runs one page of GET /runs holds */

/* The values of runs.trigger (its CHECK in db/migrations/0001_core.sql). */
static const char *const run_triggers[] = {"api", "cli", "dev", "schedule", "data", "git", "bench", NULL};

/*
 * GET /runs: every filter is checked, so a misspelt state or trigger is a
 * 400 listing the valid values rather than an empty page that looks like
 * "no such runs".
 */
void api_runs_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct MHD_Connection *conn = q->conn;
	const char *state = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "state");
	const char *wf = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "workflow");
	const char *trig = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "trigger");
	const char *not_trig = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "exclude_trigger");
	const char *lim = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
	const char *cur = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cursor");
	int64_t limit = 50, before = 0;
	char *json = NULL;
	int error;

	(void)a;
	/* waiting: running runs with a step waiting for a person (what `ferry list` shows as waiting) */
	if (state && run_state_parse(state) < 0 && strcmp(state, "waiting") != 0) {
		const char *names[RUN_STATE_COUNT + 2];
		for (int i = 0; i < RUN_STATE_COUNT; i++)
			names[i] = run_state_name((enum run_state)i);
		names[RUN_STATE_COUNT] = "waiting";
		names[RUN_STATE_COUNT + 1] = NULL;
		reply_not_one_of(r, "state", state, names);
		return;
	}
	for (int f = 0; f < 2; f++) {
		const char *v = f ? not_trig : trig;
		int i;
		if (v == NULL)
			continue;
		for (i = 0; run_triggers[i] && strcmp(run_triggers[i], v) != 0; i++)
			;
		if (run_triggers[i] == NULL) {
			reply_not_one_of(r, f ? "exclude_trigger" : "trigger", v, run_triggers);
			return;
		}
	}
	if (wf && !cfg_name_ok(wf)) {
		reply_error(r, 400, "invalid_field", "workflow", "workflow must be a workflow name: 1-63 of a-z, "
			    "0-9, _, . and -, starting with a letter or digit", NULL);
		return;
	}
	if (lim && (parse_int64(lim, &limit) < 0 || limit < 1)) {
		reply_error(r, 400, "invalid_field", "limit", "limit must be a positive integer", NULL);
		return;
	}
	if (limit > RUNS_LIMIT_MAX) {
		/* not clamped: a client that asked for more would take a short page for all there is */
		char msg[120];
		snprintf(msg, sizeof(msg), "limit must be at most %d; page with cursor (the next_cursor "
			 "of a page) for more", RUNS_LIMIT_MAX);
		reply_error(r, 400, "invalid_field", "limit", msg, NULL);
		return;
	}
	if (cur && api_parse_id(&before, cur) < 0) {
		reply_error(r, 400, "invalid_field", "cursor", "cursor must be a next_cursor value", NULL);
		return;
	}
	error = store_runs_list(&json, db, state, wf, trig, not_trig, (int)limit, before);
	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

void api_run_stop(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	int64_t id = q->id;
	json_t *body = body_object(r, q); /* none, or {}: it takes no fields */
	char *actor = NULL, *state = NULL;
	int error;

	if (body == NULL)
		return;
	json_decref(body);
	actor = actor_of(q);
	error = store_run_stop(&state, db, id, actor);
	run_changed(a, id);
	if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 200);
	free(state);
	free(actor);
}

void api_run_retry(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	int64_t id = q->id;
	json_t *body = body_object(r, q), *params;
	const char *from = NULL;
	char *actor = NULL;
	int error, no_cache = 0;

	if (body == NULL)
		return;
	if (opt_string(&from, r, body, "from") < 0 || opt_bool(&no_cache, r, body, "no_cache") < 0)
		goto out;
	params = json_object_get(body, "params");
	if (params != NULL && (!json_is_object(params) || json_object_size(params) == 0)) {
		reply_error(r, 400, "invalid_field", "params", "params must be an object of name: value (at least one)",
			    NULL);
		goto out;
	}
	actor = actor_of(q);
	/* new params: the run planned again with them, the steps they change run again (runs.c) */
	error = runs_retry(db, id, from, actor, no_cache, params);
	run_changed(a, id);
	if (error == FERRY_EINVALID && params != NULL)
		reply_error(r, 400, "invalid_field", "params", ferry_error_last(), NULL);
	else if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 200);
out:
	free(actor);
	json_decref(body);
}

/*
 * DELETE /runs/{id}: a finished run's rows go in one transaction
 * (store_run_delete), then, after the commit, its directory
 * $FERRY_HOME/runs/ID (made from the id alone). The run cache forgets it
 * here and through the trigger's NOTIFY on every other daemon.
 */
void api_run_delete(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	int64_t id = q->id;
	char *actor = actor_of(q);
	int error = store_run_delete(db, id, actor), files = 1;

	if (error < 0) {
		reply_store_error(r, error);
		free(actor);
		return;
	}
	run_changed(a, id);
	if (a->home && run_dir_remove(a->home, id) < 0) {
		flog_warn("run %lld deleted by %s; its files: %s", (long long)id, actor, ferry_error_last());
		files = 0;
	} else {
		flog_info("run %lld deleted by %s", (long long)id, actor);
	}
	reply_json(r, 200, xasprintf("{\"id\":%lld,\"deleted\":true,\"files_removed\":%s}", (long long)id,
				     files ? "true" : "false"));
	free(actor);
}

/*
 * POST /workflows: {"yaml", "filename"?, "workdir"?}. workdir is where the
 * workflow's files are (ferry workflow register sends the file's
 * directory): runs of it by name run there.
 */
void api_workflow_register(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q);
	const char *yaml = NULL, *filename = NULL, *workdir = NULL;
	cfg_errors errs = {0};
	char *json = NULL, *actor = NULL;
	int error;

	(void)a;
	if (body == NULL)
		return;
	if (opt_string(&yaml, r, body, "yaml") < 0 || opt_string(&filename, r, body, "filename") < 0 ||
	    opt_string(&workdir, r, body, "workdir") < 0)
		goto out;
	if (yaml == NULL) {
		reply_error(r, 400, "invalid_field", "yaml", "field \"yaml\" (the workflow text) is required", NULL);
		goto out;
	}
	if (workdir && workdir_ok(r, workdir) < 0)
		goto out;
	actor = actor_of(q);
	error = workflows_register(&json, db, yaml, json_string_length(json_object_get(body, "yaml")),
				   filename ? filename : "<inline>", workdir, actor, &errs);
	if (error == FERRY_EINVALID)
		reply_error(r, 400, "invalid_workflow", "yaml", ferry_error_last(), &errs);
	else if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 201, json);
out:
	cfg_errors_dispose(&errs);
	free(actor);
	json_decref(body);
}

/*
 * GET /audit?object=run|schedule|trigger|secret|queue&object_id=N&before=ID&limit=N:
 * who did what to runs, schedules, triggers, secrets and queues, newest
 * first, the tombstones of deleted runs among them (store_audit_list).
 */
void api_audit(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	static const char *const objects[] = {"run", "schedule", "trigger", "secret", "queue", NULL};
	const char *object = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "object");
	const char *oid = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "object_id");
	const char *before = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "before");
	const char *limit = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "limit");
	int64_t object_id = 0, before_id = 0, lim = 100;
	char *json = NULL;
	int error, known = object == NULL;

	(void)a;
	for (int i = 0; object && objects[i]; i++)
		known |= strcmp(object, objects[i]) == 0;
	if (!known) {
		reply_error(r, 400, "invalid_field", "object", "object must be run, schedule, trigger, secret or queue", NULL);
		return;
	}
	if (oid && (parse_int64(oid, &object_id) < 0 || object_id <= 0)) {
		reply_error(r, 400, "invalid_field", "object_id", "object_id must be a positive integer", NULL);
		return;
	}
	if (before && (parse_int64(before, &before_id) < 0 || before_id <= 0)) {
		reply_error(r, 400, "invalid_field", "before", "before must be an audit entry id", NULL);
		return;
	}
	if (limit && (parse_int64(limit, &lim) < 0 || lim < 1 || lim > 500)) {
		reply_error(r, 400, "invalid_field", "limit", "limit must be an integer from 1 to 500", NULL);
		return;
	}
	if ((error = store_audit_list(&json, db, object, object_id, before_id, (int)lim)) < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

void api_run_events(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *after = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "after");
	int64_t after_id = 0;
	char *json = NULL;
	int error;

	(void)a;
	if (after && (parse_int64(after, &after_id) < 0 || after_id < 0)) {
		reply_error(r, 400, "invalid_field", "after", "after must be an event id", NULL);
		return;
	}
	if ((error = store_run_events(&json, db, q->id, after_id)) < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

void api_step_continue(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	int64_t id = q->id;
	const char *step = q->caps[1];
	json_t *body = body_object(r, q), *data;
	char *actor = NULL, *data_txt = NULL;
	int error;

	if (body == NULL)
		return;
	data = json_object_get(body, "data");
	if (data && !json_is_null(data))
		data_txt = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
	actor = actor_of(q);
	error = store_step_continue(db, id, step, actor, data_txt);
	run_changed(a, id);
	if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 200);
	free(data_txt);
	free(actor);
	json_decref(body);
}

/* POST /runs/{id}/steps/{step}/reject {"reason": "…"}: the waiting step fails with the reason. */
void api_step_reject(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	int64_t id = q->id;
	const char *step = q->caps[1];
	json_t *body = body_object(r, q), *reason;
	char *actor = NULL;
	int error;

	if (body == NULL)
		return;
	reason = json_object_get(body, "reason");
	if (reason != NULL && !json_is_null(reason) && (!json_is_string(reason) || json_string_length(reason) > 2000)) {
		reply_error(r, 400, "invalid_field", "reason", "reason must be a string of at most 2,000 characters", NULL);
		json_decref(body);
		return;
	}
	actor = actor_of(q);
	error = store_step_reject(db, id, step, actor, json_string_value(reason));
	run_changed(a, id);
	if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 200);
	free(actor);
	json_decref(body);
}

void api_workflows_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_workflows_list(&json, db);

	(void)a, (void)q;
	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

/* GET /hosts: the fleet's hosts from the daemons' heartbeats (store_hosts.c). */
void api_hosts_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_hosts_list(&json, db);

	(void)a, (void)q;
	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

/* ---- GET /runs/{id} from the run cache ---- */

/* Frees a cached run's reference once MHD is done with its reply. */
static void cached_release(void *cls)
{
	runcache_json_release(cls);
}

/* GET /runs/{id} from the run cache, on the MHD worker; 0 on a miss (the handler reads the database). */
int api_run_cached(struct api *a, struct reply *r, struct req *q)
{
	const struct runcache_json *j = a->cache ? runcache_get(a->cache, q->id) : NULL;
	struct MHD_Response *resp;

	if (j == NULL)
		return 0;
	resp = MHD_create_response_from_buffer_with_free_callback_cls(j->len, (void *)j->data, cached_release,
								      (void *)j);
	if (resp == NULL) {
		runcache_json_release(j);
		return 0;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	r->status = 200;
	r->resp = resp;
	return 1;
}
