/*
 * api_schedules — /api/v1/schedules (orchestrator/schedule/schedules.md): list,
 * create, show (with the next fire times, the notes on those a DST change
 * moves, and the tick history), edit, pause/resume (PATCH paused) and
 * delete. A schedule of a workflow's schedule: is that workflow's: it may
 * be paused, resumed and deleted here, but its timing is edited in the
 * YAML (registering the workflow again would undo an edit made here).
 */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_priv.h"
#include "lib/cron.h"
#include "schedule/schedules.h"
#include "store/store.h"
#include "store/store_schedules.h"
#include "schedule/triggers.h"
#include "schedule/gitsrc.h"
#include "lib/envsecret.h"
#include "lib/util.h"

/* Ticks GET /schedules/{id} shows unless ?limit says otherwise. */
#define TICKS_DEFAULT 50
#define TICKS_MAX 1000
#define NEXT_SHOWN 10

static const char *const gaps[] = {"shift", "skip", NULL};
static const char *const overlaps[] = {"first", "last", NULL};
static const char *const concurrencies[] = {"allow", "forbid", "replace", NULL};
static const char *const catchups[] = {"all", "latest", "none", NULL};

static int one_of(const char *v, const char *const *valid)
{
	for (; *valid; valid++)
		if (strcmp(v, *valid) == 0)
			return 1;
	return 0;
}

/* An optional string field replacing *dst (a copy) when present; -1 with a 400 when mistyped or not valid. */
static int take_word(char **dst, struct reply *r, json_t *body, const char *name, const char *const *valid)
{
	const char *v = NULL;

	if (opt_string(&v, r, body, name) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if (valid && !one_of(v, valid)) {
		reply_not_one_of(r, name, v, valid);
		return -1;
	}
	free(*dst);
	*dst = xstrdup(v);
	return 0;
}

/*
 * The fields of body over r (a new schedule's defaults, or the stored
 * one): each checked; -1 with a 400 naming the first bad one. *timing
 * set when a field that decides the fire times was given.
 */
static int read_fields(struct sched_row *r, struct reply *rep, json_t *body, int *timing, PGconn *db)
{
	json_t *v;
	int paused = r->paused;
	char *was_cron = xstrdup(r->cron ? r->cron : ""), *was_tz = xstrdup(r->timezone ? r->timezone : "");
	char *was_gap = xstrdup(r->gap ? r->gap : ""), *was_ov = xstrdup(r->overlap ? r->overlap : "");
	int rc = -1;

	if (take_word(&r->cron, rep, body, "cron", NULL) < 0 || take_word(&r->timezone, rep, body, "timezone", NULL) < 0 ||
	    take_word(&r->gap, rep, body, "gap", gaps) < 0 || take_word(&r->overlap, rep, body, "overlap", overlaps) < 0 ||
	    take_word(&r->concurrency, rep, body, "concurrency", concurrencies) < 0 ||
	    take_word(&r->catchup, rep, body, "catchup", catchups) < 0 || take_word(&r->name, rep, body, "name", NULL) < 0 ||
	    (json_object_get(body, "paused") && opt_bool(&paused, rep, body, "paused") < 0)) /* absent: as it was */
		goto out;
	r->paused = paused;
	if (r->cron == NULL) {
		reply_error(rep, 400, "invalid_field", "cron", "field \"cron\" (e.g. \"0 3 * * *\" or @daily) is required",
			    NULL);
		goto out;
	}
	{
		struct cron *c = NULL;
		if (cron_parse(&c, r->cron, NULL) < 0) {
			reply_error(rep, 400, "invalid_field", "cron", ferry_error_last(), NULL);
			goto out;
		}
		cron_free(c);
	}
	if (cron_zone_check(r->timezone) < 0) {
		reply_error(rep, 400, "invalid_field", "timezone", ferry_error_last(), NULL);
		goto out;
	}
	if (r->name && !cfg_name_ok(r->name)) {
		reply_error(rep, 400, "invalid_field", "name",
			    "field \"name\" must be 1-63 of a-z, 0-9, _, . and -, starting with a letter or digit", NULL);
		goto out;
	}
	if ((v = json_object_get(body, "max_catchup")) != NULL) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000) {
			reply_error(rep, 400, "invalid_field", "max_catchup",
				    "field \"max_catchup\" must be a whole number from 0 to 1000", NULL);
			goto out;
		}
		r->max_catchup = (int)json_integer_value(v);
	}
	if ((v = json_object_get(body, "params")) != NULL) {
		json_t *spec = NULL, *resolved = NULL;
		int error;
		if (!json_is_object(v)) {
			reply_error(rep, 400, "invalid_field", "params", "field \"params\" must be an object", NULL);
			goto out;
		}
		/* the workflow's newest version must take them (a later version may not: the tick says so) */
		if ((error = store_workflow_spec(&spec, NULL, db, r->workflow)) == FERRY_OK &&
		    (error = cfg_params_resolve(&resolved, spec, v)) < 0) {
			reply_error(rep, 400, "invalid_field", "params", ferry_error_last(), NULL);
			json_decref(spec);
			goto out;
		}
		json_decref(spec), json_decref(resolved);
		if (error < 0 && error != FERRY_ENOTFOUND) {
			reply_store_error(rep, error);
			goto out;
		}
		json_decref(r->params);
		r->params = json_deep_copy(v);
	}
	*timing = strcmp(was_cron, r->cron) != 0 || strcmp(was_tz, r->timezone) != 0 ||
		  strcmp(was_gap, r->gap) != 0 || strcmp(was_ov, r->overlap) != 0;
	rc = 0;
out:
	free(was_cron), free(was_tz), free(was_gap), free(was_ov);
	return rc;
}

static json_t *timing_of(const struct sched_row *s)
{
	return json_pack("{s:s,s:s,s:s,s:s}", "cron", s->cron, "timezone", s->timezone, "gap", s->gap, "overlap",
			 s->overlap);
}

/* The schedule as shown: its row, the next fire times and the ticks. */
static int schedule_reply(struct reply *r, PGconn *db, int64_t id, unsigned status, int limit, int64_t before)
{
	struct sched_row s;
	json_t *out, *ticks = NULL, *timing, *next;
	int error;

	if ((error = store_sched_get(&s, db, id)) < 0 || (error = store_sched_ticks(&ticks, db, id, limit, before)) < 0) {
		sched_row_dispose(&s);
		reply_store_error(r, error);
		return error;
	}
	out = sched_row_json(&s);
	timing = timing_of(&s);
	next = s.next_at > 0 ? schedules_next(timing, s.next_at - 1, NEXT_SHOWN) : json_array();
	json_object_set_new(out, "next", next ? next : json_array());
	json_object_set_new(out, "ticks", ticks);
	reply_json(r, status, json_dumps(out, JSON_COMPACT));
	json_decref(out), json_decref(timing);
	sched_row_dispose(&s);
	return FERRY_OK;
}

static int64_t next_from_now(const struct sched_row *s)
{
	json_t *t = timing_of(s);
	int64_t next = schedules_next_at(t, (int64_t)time(NULL));

	json_decref(t);
	return next < 0 ? 0 : next;
}

void api_schedules_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error;

	(void)a, (void)q;
	if ((error = store_sched_list(&json, db)) < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

void api_schedule_create(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q), *spec = NULL;
	struct sched_row s;
	const char *wf = NULL;
	char *actor = NULL;
	int64_t id = 0;
	int timing = 0, error;

	(void)a;
	memset(&s, 0, sizeof(s));
	if (body == NULL)
		return;
	if (opt_string(&wf, r, body, "workflow") < 0)
		goto out;
	if (wf == NULL) {
		reply_error(r, 400, "invalid_field", "workflow", "field \"workflow\" (a registered workflow's name) is required",
			    NULL);
		goto out;
	}
	if ((error = store_workflow_spec(&spec, NULL, db, wf)) < 0) {
		if (error == FERRY_ENOTFOUND)
			reply_error(r, 400, "invalid_field", "workflow", ferry_error_last(), NULL);
		else
			reply_store_error(r, error);
		goto out;
	}
	s.workflow = xstrdup(wf);
	s.source = xstrdup("api");
	s.name = NULL; /* unless given: api-ID */
	s.timezone = xstrdup("UTC");
	s.gap = xstrdup("shift");
	s.overlap = xstrdup("first");
	s.concurrency = xstrdup("allow");
	s.catchup = xstrdup("all");
	s.max_catchup = 10;
	s.params = json_object();
	if (read_fields(&s, r, body, &timing, db) < 0)
		goto out;
	s.next_at = next_from_now(&s);
	actor = actor_of(q);
	if ((error = store_sched_create(&id, db, &s, actor)) < 0) {
		if (error == FERRY_ECONFLICT)
			reply_error(r, 409, "conflict", "name", ferry_error_last(), NULL);
		else
			reply_store_error(r, error);
		goto out;
	}
	flog_info("schedule %lld (%s, \"%s\" %s) created by %s", (long long)id, s.workflow, s.cron, s.timezone, actor);
	schedule_reply(r, db, id, 201, TICKS_DEFAULT, 0);
out:
	sched_row_dispose(&s);
	json_decref(spec), json_decref(body);
	free(actor);
}

void api_schedule_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *lim = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "limit");
	const char *bef = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "before");
	int64_t limit = TICKS_DEFAULT, before = 0;

	(void)a;
	if (lim && (parse_int64(lim, &limit) < 0 || limit < 0 || limit > TICKS_MAX)) {
		reply_error(r, 400, "invalid_field", "limit", "limit must be a whole number from 0 to 1000", NULL);
		return;
	}
	if (bef && (parse_int64(bef, &before) < 0 || before <= 0)) {
		reply_error(r, 400, "invalid_field", "before", "before must be a time in unix seconds", NULL);
		return;
	}
	schedule_reply(r, db, q->id, 200, (int)limit, before);
}

void api_schedule_patch(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q);
	struct sched_row s;
	char *actor = NULL;
	int timing = 0, was_paused, error;

	(void)a;
	memset(&s, 0, sizeof(s));
	if (body == NULL)
		return;
	if ((error = store_sched_get(&s, db, q->id)) < 0) {
		reply_store_error(r, error);
		goto out;
	}
	was_paused = s.paused;
	if (strcmp(s.source, "workflow") == 0) {
		const char *k;
		json_t *v;
		json_object_foreach(body, k, v) {
			if (strcmp(k, "paused") != 0) {
				char *msg = xasprintf("schedule %lld comes from workflow %s's schedule:, so only "
						      "\"paused\" is changed here; edit %s in its YAML and register it",
						      (long long)s.id, s.workflow, k);
				reply_error(r, 409, "conflict", k, msg, NULL);
				free(msg);
				goto out;
			}
		}
	}
	if (read_fields(&s, r, body, &timing, db) < 0)
		goto out;
	/*
	 * A new timing starts from now. A resume needs nothing: while paused,
	 * the leader kept accounting for the ticks (skipped, "paused"), so
	 * next_at is the first tick after the pause and none is caught up.
	 */
	if (timing)
		s.next_at = next_from_now(&s);
	actor = actor_of(q);
	if ((error = store_sched_update(db, &s, timing, actor)) < 0) {
		reply_store_error(r, error);
		goto out;
	}
	flog_info("schedule %lld (%s/%s) %s by %s", (long long)s.id, s.workflow, s.name,
		  was_paused != s.paused ? (s.paused ? "paused" : "resumed") : "changed", actor);
	schedule_reply(r, db, s.id, 200, TICKS_DEFAULT, 0);
out:
	sched_row_dispose(&s);
	json_decref(body);
	free(actor);
}

void api_schedule_delete(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *actor = actor_of(q);
	int error;

	(void)a;
	if ((error = store_sched_delete(db, q->id, actor)) < 0) {
		reply_store_error(r, error);
	} else {
		flog_info("schedule %lld deleted by %s", (long long)q->id, actor);
		reply_json(r, 200, xasprintf("{\"id\":%lld,\"deleted\":true}", (long long)q->id));
	}
	free(actor);
}

/* The secret POST /hooks/git checks signatures with: FERRY_GIT_WEBHOOK_SECRET, else the file. */
static char *webhook_secret(const struct api *a)
{
	const char *env = envsecret_get("FERRY_GIT_WEBHOOK_SECRET");
	char *text = NULL, *path;
	size_t n = 0;

	if (env && *env)
		return xstrdup(env);
	if (a->home == NULL)
		return NULL;
	path = xasprintf("%s/git-webhook-secret", a->home);
	if (file_read(&text, &n, path) < 0)
		text = NULL;
	free(path);
	while (text && n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		text[--n] = '\0';
	if (text && n == 0) {
		free(text);
		text = NULL;
	}
	return text;
}

/*
 * POST /hooks/git: a push webhook (GitHub's and Gitea's shape: ref, after,
 * repository.{clone_url,ssh_url,git_url,url,html_url}), signed with
 * HMAC-SHA256 of the body under the configured secret in
 * X-Hub-Signature-256. No bearer token: the signature is the credential,
 * checked before anything else is read; a bad one is a 401 and starts
 * nothing. The triggers watching that repository and branch are looked
 * at now; the commit is the key, so a redelivery starts nothing.
 */
void api_hook_git(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *sig = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Hub-Signature-256");
	static const char *const url_keys[] = {"clone_url", "ssh_url", "git_url", "url", "html_url", "path"};
	char *secret = webhook_secret(a);
	json_t *body = NULL, *urls = NULL, *out = NULL, *repo;
	const char *ref, *after;
	int error;

	if (secret == NULL) {
		reply_error(r, 403, "not_configured", NULL,
			    "git webhooks are off: set FERRY_GIT_WEBHOOK_SECRET (or $FERRY_HOME/git-webhook-secret)", NULL);
		goto out;
	}
	if (!gitsrc_signature_ok(secret, q->body ? q->body : "", q->len, sig)) {
		flog_warn("POST /hooks/git: %s signature; nothing started", sig ? "a bad" : "no");
		reply_error(r, 401, "bad_signature", "X-Hub-Signature-256",
			    "the X-Hub-Signature-256 header is not the HMAC-SHA256 of the body under the webhook secret",
			    NULL);
		goto out;
	}
	if ((body = json_loadb(q->body ? q->body : "", q->len, 0, NULL)) == NULL || !json_is_object(body)) {
		reply_error(r, 400, "invalid_body", NULL, "the body must be a JSON push event", NULL);
		goto out;
	}
	ref = json_string_value(json_object_get(body, "ref"));
	after = json_string_value(json_object_get(body, "after"));
	repo = json_object_get(body, "repository");
	if (ref == NULL || after == NULL || !json_is_object(repo)) {
		reply_error(r, 400, "invalid_field", ref == NULL ? "ref" : after == NULL ? "after" : "repository",
			    "a push event has \"ref\", \"after\" (the commit) and \"repository\"", NULL);
		goto out;
	}
	if (strspn(after, "0") == strlen(after)) { /* a deleted branch: nothing to run */
		reply_json(r, 200, xstrdup("{\"started\":[],\"duplicates\":[],\"skipped\":[],\"matched\":0}"));
		goto out;
	}
	urls = json_array();
	for (size_t i = 0; i < sizeof(url_keys) / sizeof(url_keys[0]); i++)
		if (json_is_string(json_object_get(repo, url_keys[i])))
			json_array_append(urls, json_object_get(repo, url_keys[i]));
	if ((error = triggers_git_push(&out, db, a->home ? a->home : ".ferry", urls, ref, after)) < 0) {
		reply_store_error(r, error);
		goto out;
	}
	flog_info("POST /hooks/git: %s %.12s: %zu started, %zu duplicate", ref, after,
		  json_array_size(json_object_get(out, "started")), json_array_size(json_object_get(out, "duplicates")));
	reply_json(r, json_array_size(json_object_get(out, "started")) > 0 ? 202 : 200, json_dumps(out, JSON_COMPACT));
out:
	free(secret);
	json_decref(body), json_decref(urls), json_decref(out);
}

/* GET /triggers: the data and git triggers, whether each has its baseline, and their newest fires. */
void api_triggers_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error;

	(void)a, (void)q;
	if ((error = store_triggers_list(&json, db, 20)) < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

/*
 * PATCH /triggers/{id} {"paused": bool}: a paused trigger starts nothing;
 * what changes meanwhile is not lost — resumed, its next look compares
 * with the state of its last fire and starts one run for it all.
 */
void api_trigger_patch(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q);
	char *json = NULL, *actor = NULL;
	int paused = -1, error;

	(void)a;
	if (body == NULL)
		return;
	if (json_object_get(body, "paused") && opt_bool(&paused, r, body, "paused") < 0)
		goto out;
	if (paused < 0) {
		reply_error(r, 400, "invalid_field", "paused", "field \"paused\" (true or false) is required", NULL);
		goto out;
	}
	actor = actor_of(q);
	if ((error = store_trigger_pause(&json, db, q->id, paused, actor)) < 0) {
		reply_store_error(r, error);
		goto out;
	}
	flog_info("trigger %lld %s by %s", (long long)q->id, paused ? "paused" : "resumed", actor);
	reply_json(r, 200, json);
out:
	free(actor);
	json_decref(body);
}
