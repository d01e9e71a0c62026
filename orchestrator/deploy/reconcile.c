/*
 * reconcile — see reconcile.h.
 */
#include "deploy/reconcile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "plan/deploy.h"
#include "deploy/haproxy.h"
#include "deploy/replicas.h"
#include "store/store_deploy.h"
#include "lib/util.h"
#include "lib/webhook.h"
#include "store/workers.h"

#define HEALTH_TIMEOUT_MS 800
#define STOP_GRACE_MS 5000
#define BACKOFF_MAX_MS 30000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* the HAProxy of the last home reconciled (one home per daemon) */
static struct hap *hap;
static char *hap_home;

static struct hap *hap_for(const char *home)
{
	if (hap && hap_home && strcmp(hap_home, home) == 0)
		return hap;
	hap_close(hap);
	hap = NULL;
	free(hap_home);
	hap_home = xstrdup(home);
	{
		char *dir = xasprintf("%s/haproxy", home);
		if (hap_open(&hap, dir) < 0) {
			flog_error("HAProxy in %s: %s", dir, ferry_error_last());
			hap = NULL;
		}
		free(dir);
	}
	return hap;
}

static int64_t backoff_ms(int restarts)
{
	int64_t ms = 1000;

	for (int i = 0; i < restarts && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

/* Checks (and when it died, restarts) replica rep of version v of deployment d; 1 when healthy. */
static int replica_check(PGconn *conn, const char *home, const char *actor, const json_t *d, const json_t *v,
			 const json_t *rep)
{
	int64_t dep = json_integer_value(json_object_get(d, "id"));
	const char *name = json_string_value(json_object_get(d, "name"));
	const char *version = json_string_value(json_object_get(v, "version"));
	const char *health = json_string_value(json_object_get(rep, "health"));
	const json_t *handle = json_object_get(rep, "handle");
	int idx = (int)json_integer_value(json_object_get(rep, "idx"));
	int port = (int)json_integer_value(json_object_get(rep, "port"));
	int restarts = (int)json_integer_value(json_object_get(rep, "restarts"));
	long st = 0;

	if (handle && replica_alive(handle)) {
		int ok = replica_http("GET", port, "/v2/health/ready", NULL, HEALTH_TIMEOUT_MS, &st, NULL) == 0 &&
			 st == 200;
		const char *now = ok ? "healthy" : "unhealthy";
		if (strcmp(health, now) != 0) {
			json_t *det = json_pack("{s:s, s:i, s:s, s:s}", "version", version, "replica", idx, "from",
						health, "to", now);
			store_deploy_replica_health(conn, dep, version, idx, now,
						    ok ? NULL : "not ready (GET /v2/health/ready)", 0, 0);
			store_deploy_event(conn, dep, actor, ok ? "replica-healthy" : "replica-unhealthy", det);
			json_decref(det);
			flog_info("deployment %s: %s replica %d is %s", name, version, idx, now);
		}
		return ok;
	}
	/* gone: restart it once its backoff passed */
	if (json_integer_value(json_object_get(rep, "next_start_in_ms")) > 0)
		return 0;
	{
		json_t *nh = NULL, *det;
		struct replica_spec s = {
			.home = home, .deployment = name, .ord = (int)json_integer_value(json_object_get(v, "ord")),
			.idx = idx, .generation = (int)json_integer_value(json_object_get(rep, "generation")) + 1,
			.port = port, .model = json_string_value(json_object_get(d, "model")), .version = version,
			.artifact = json_string_value(json_object_get(v, "artifact")),
			.serve = json_object_get(json_object_get(v, "serve"), "command"),
			.env = json_object_get(json_object_get(v, "serve"), "env"),
			.workdir = json_string_value(json_object_get(json_object_get(v, "serve"), "workdir")),
			.placement = json_object_get(json_object_get(v, "serve"), "placement"),
		};
		if (replica_start(&s, &nh) < 0) {
			char *err = xstrdup(ferry_error_last());
			store_deploy_replica_health(conn, dep, version, idx, "unhealthy", err, 1, backoff_ms(restarts));
			flog_error("deployment %s: restarting %s replica %d: %s", name, version, idx, err);
			free(err);
			return 0;
		}
		store_deploy_replica_put(conn, dep, version, idx, port, nh, s.generation, "starting", NULL);
		store_deploy_replica_health(conn, dep, version, idx, "starting",
					    strcmp(health, "stopped") == 0 ? NULL : "its process had exited",
					    strcmp(health, "stopped") == 0 ? 0 : 1, backoff_ms(restarts + 1));
		det = json_pack("{s:s, s:i, s:i, s:i}", "version", version, "replica", idx, "port", port,
				"generation", s.generation);
		store_deploy_event(conn, dep, actor, strcmp(health, "stopped") == 0 ? "replica-started"
										    : "replica-restarted", det);
		json_decref(det);
		flog_info("deployment %s: %s replica %d %s on port %d", name, version, idx,
			  strcmp(health, "stopped") == 0 ? "started" : "restarted", port);
		json_decref(nh);
		return 0; /* healthy at a later round, once it answers */
	}
}

/*
 * Stops the live replicas of deployment d (every version when all, else
 * the retired ones), with an event each.
 */
static void replicas_stop_all(PGconn *conn, const char *actor, const json_t *d, int all)
{
	int64_t dep = json_integer_value(json_object_get(d, "id"));
	const json_t *v, *rep;
	size_t i, j;

	json_array_foreach(json_object_get(d, "versions"), i, v) {
		if (!all && strcmp(json_string_value(json_object_get(v, "state")), "retired") != 0)
			continue;
		json_array_foreach(json_object_get(v, "replica_list"), j, rep) {
			const json_t *h = json_object_get(rep, "handle");
			const char *version = json_string_value(json_object_get(v, "version"));
			int idx = (int)json_integer_value(json_object_get(rep, "idx"));
			if (strcmp(json_string_value(json_object_get(rep, "health")), "stopped") == 0 &&
			    !(h && replica_alive(h)))
				continue;
			if (h)
				replica_stop(h, STOP_GRACE_MS);
			store_deploy_replica_health(conn, dep, version, idx, "stopped", NULL, 0, 0);
			{
				json_t *det = json_pack("{s:s, s:i}", "version", version, "replica", idx);
				store_deploy_event(conn, dep, actor, "replica-stopped", det);
				json_decref(det);
			}
		}
	}
}

/* Stops replica rep (past its version's count) and forgets it, with an event. */
static void replica_remove(PGconn *conn, const char *actor, const json_t *d, const json_t *v, const json_t *rep)
{
	int64_t dep = json_integer_value(json_object_get(d, "id"));
	const char *version = json_string_value(json_object_get(v, "version"));
	int idx = (int)json_integer_value(json_object_get(rep, "idx"));
	const json_t *h = json_object_get(rep, "handle");
	json_t *det = json_pack("{s:s, s:i}", "version", version, "replica", idx);

	if (h)
		replica_stop(h, STOP_GRACE_MS);
	store_deploy_replica_delete(conn, dep, version, idx);
	store_deploy_event(conn, dep, actor, "replica-removed", det);
	json_decref(det);
	flog_info("deployment %s: %s replica %d removed (scaled down)", json_string_value(json_object_get(d, "name")),
		  version, idx);
}

/* The deployment id whose frontend is called name in list, or 0. */
static int64_t dep_of(const json_t *list, const char *name)
{
	const json_t *d;
	size_t i;

	json_array_foreach(list, i, d)
		if (name && strcmp(json_string_value(json_object_get(d, "name")), name) == 0)
			return json_integer_value(json_object_get(d, "id"));
	return 0;
}

/*
 * The auto-stop warnings also go to FERRY_NOTIFY_WEBHOOK when it is set, as
 * {"event":"deployment.auto_stop_warning","deployment","id","deadline"}:
 * best effort (WEBHOOK_TRIES tries, then logged), since the event stays.
 */
static void warn_webhook(const json_t *warned)
{
	const char *url = getenv("FERRY_NOTIFY_WEBHOOK");
	const json_t *w;
	size_t i;

	json_array_foreach(warned, i, w) {
		json_t *body, *ans = NULL;
		flog_info("deployment %s: auto-stop at %s", json_string_value(json_object_get(w, "deployment")),
			  json_string_value(json_object_get(w, "deadline")));
		if (url == NULL || *url == '\0')
			continue;
		body = json_pack("{s:s, s:O, s:O, s:O}", "event", "deployment.auto_stop_warning", "deployment",
				 json_object_get(w, "deployment"), "id", json_object_get(w, "id"), "deadline",
				 json_object_get(w, "deadline"));
		if (webhook_post(&ans, url, body, WEBHOOK_TRIES) < 0)
			flog_warn("deployment %s: the auto-stop warning did not reach %s: %s",
				  json_string_value(json_object_get(w, "deployment")), url, ferry_error_last());
		json_decref(ans);
		json_decref(body);
	}
}

int reconcile_now(PGconn *conn, const char *home, const char *actor)
{
	json_t *list = NULL, *changes = json_array(), *d, *v, *rep, *c, *warned = NULL;
	struct hap_frontend *fe = NULL;
	struct hap_server *sv = NULL;
	char **names = NULL;
	size_t i, j, k, nfe = 0, nsv = 0, nnames = 0, cap = 0;
	int64_t *due = NULL;
	int ndue = 0, error;

	pthread_mutex_lock(&lock);
	if ((error = store_deploy_due(conn, actor, &due, &ndue, &warned)) < 0)
		goto out;
	warn_webhook(warned);
	for (int x = 0; x < ndue; x++)
		flog_info("deployment %lld: auto-stop deadline reached, stopping", (long long)due[x]);
	if ((error = store_deploy_list(conn, 0, &list)) < 0)
		goto out;
	/* replicas first: health decides weights */
	json_array_foreach(list, i, d) {
		if (strcmp(json_string_value(json_object_get(d, "state")), "running") != 0)
			continue;
		json_array_foreach(json_object_get(d, "versions"), j, v) {
			int healthy = 0, was = 0;
			if (strcmp(json_string_value(json_object_get(v, "state")), "serving") != 0)
				continue;
			json_array_foreach(json_object_get(v, "replica_list"), k, rep)
				was += strcmp(json_string_value(json_object_get(rep, "health")), "healthy") == 0;
			json_array_foreach(json_object_get(v, "replica_list"), k, rep) {
				int ok;
				/* scaled down: the replicas past the count go, once HAProxy left them (below) */
				if (json_integer_value(json_object_get(rep, "idx")) > json_integer_value(json_object_get(v, "replicas"))) {
					json_object_set_new(rep, "removed", json_true());
					continue;
				}
				ok = replica_check(conn, home, actor, d, v, rep);
				json_object_set_new(rep, "ok", json_boolean(ok));
				healthy += ok;
			}
			json_object_set_new(v, "healthy", json_integer(healthy));
			/* a version without a healthy replica gets no traffic; the event says when and until when */
			if ((healthy == 0) != (was == 0) && json_integer_value(json_object_get(v, "weight")) > 0) {
				json_t *det = json_pack("{s:s, s:i, s:I}", "version", json_string_value(json_object_get(v, "version")),
							"healthy", healthy, "weight", json_integer_value(json_object_get(v, "weight")));
				store_deploy_event(conn, json_integer_value(json_object_get(d, "id")), actor,
						   healthy == 0 ? "version-no-healthy-replica" : "version-healthy-again", det);
				json_decref(det);
				if (healthy == 0)
					flog_warn("deployment %s: version %s has no healthy replica: it gets no traffic until one is",
						  json_string_value(json_object_get(d, "name")),
						  json_string_value(json_object_get(v, "version")));
			}
			cap += json_array_size(json_object_get(v, "replica_list"));
		}
	}
	fe = xcalloc(json_array_size(list) + 1, sizeof(*fe));
	sv = xcalloc(cap + 1, sizeof(*sv));
	names = xcalloc(cap + 1, sizeof(*names));
	json_array_foreach(list, i, d) {
		if (strcmp(json_string_value(json_object_get(d, "state")), "running") != 0)
			continue;
		fe[nfe].name = json_string_value(json_object_get(d, "name"));
		fe[nfe].port = (int)json_integer_value(json_object_get(d, "port"));
		fe[nfe].servers = sv + nsv;
		json_array_foreach(json_object_get(d, "versions"), j, v) {
			int pct = (int)json_integer_value(json_object_get(v, "weight"));
			int healthy = (int)json_integer_value(json_object_get(v, "healthy"));
			if (strcmp(json_string_value(json_object_get(v, "state")), "serving") != 0)
				continue;
			json_array_foreach(json_object_get(v, "replica_list"), k, rep) {
				if (json_is_true(json_object_get(rep, "removed")))
					continue;
				names[nnames] = xasprintf("v%lld-r%lld", (long long)json_integer_value(json_object_get(v, "ord")),
							  (long long)json_integer_value(json_object_get(rep, "idx")));
				sv[nsv].name = names[nnames++];
				sv[nsv].addr = "127.0.0.1";
				sv[nsv].port = (int)json_integer_value(json_object_get(rep, "port"));
				sv[nsv].weight = json_is_true(json_object_get(rep, "ok")) ? deploy_server_weight(pct, healthy) : 0;
				nsv++;
				fe[nfe].nservers++;
			}
		}
		nfe++;
	}
	if (hap_for(home) == NULL) {
		error = FERRY_ERROR;
		goto out;
	}
	/* nothing deployed and no HAProxy running: nothing to start */
	if (nfe > 0 || hap_running(hap)) {
		if ((error = hap_apply(hap, fe, nfe, changes)) < 0)
			flog_error("HAProxy: %s", ferry_error_last());
	}
	json_array_foreach(changes, i, c) {
		int64_t dep = dep_of(list, json_string_value(json_object_get(c, "frontend")));
		if (dep > 0)
			store_deploy_event(conn, dep, actor, "haproxy", c);
	}
	/* replicas scaled away: HAProxy no longer sends them requests */
	json_array_foreach(list, i, d)
		json_array_foreach(json_object_get(d, "versions"), j, v)
			json_array_foreach(json_object_get(v, "replica_list"), k, rep)
				if (json_is_true(json_object_get(rep, "removed")))
					replica_remove(conn, actor, d, v, rep);
	/* stopped deployments: HAProxy no longer sends them requests; their replicas go */
	json_array_foreach(list, i, d)
		replicas_stop_all(conn, actor, d, strcmp(json_string_value(json_object_get(d, "state")), "stopped") == 0);
out:
	pthread_mutex_unlock(&lock);
	for (i = 0; i < nnames; i++)
		free(names[i]);
	free(names), free(sv), free(fe), free(due);
	json_decref(list);
	json_decref(changes);
	json_decref(warned);
	return error;
}

int reconcile_haproxy_read(const char *home, json_t **out)
{
	int error = FERRY_ENOTFOUND;

	*out = NULL;
	pthread_mutex_lock(&lock);
	if (hap_for(home))
		error = hap_read(hap, out);
	pthread_mutex_unlock(&lock);
	return error;
}

int reconcile_haproxy_stats(const char *home, json_t **out)
{
	int error = FERRY_ENOTFOUND;

	*out = NULL;
	pthread_mutex_lock(&lock);
	if (hap_for(home))
		error = hap_stats(hap, out);
	pthread_mutex_unlock(&lock);
	return error;
}

void reconcile_haproxy_stop(const char *home)
{
	pthread_mutex_lock(&lock);
	if (hap_for(home))
		hap_stop(hap);
	pthread_mutex_unlock(&lock);
}

/* ---- the leader task's work item ------------------------------------------------ */

struct rec_work {
	struct work w;
	char *home, *actor;
};

static void rec_run(struct work *w, PGconn *conn)
{
	struct rec_work *r = (struct rec_work *)w;

	if (conn != NULL && reconcile_now(conn, r->home, r->actor) < 0)
		flog_warn("reconcile: %s", ferry_error_last());
}

static struct work *reconcile_work_new(const char *home, const char *actor)
{
	struct rec_work *r = xcalloc(1, sizeof(*r));

	r->w.run = rec_run;
	r->home = xstrdup(home);
	r->actor = xstrdup(actor);
	return &r->w;
}

static void reconcile_work_free(struct work *w)
{
	struct rec_work *r = (struct rec_work *)w;

	if (r) {
		free(r->home), free(r->actor);
		free(r);
	}
}

static struct work *reconcile_round(struct task_ctx *c, void *state)
{
	(void)state;
	return c->workers ? reconcile_work_new(c->home, c->owner) : NULL;
}

static int64_t every_reconcile(const struct task_ctx *c)
{
	(void)c;
	return RECONCILE_EVERY_MS;
}

const struct task reconcile_task = {
	.name = "reconcile",
	.flags = TASK_LEADER | TASK_NO_DEV | TASK_POOL,
	.period = every_reconcile,
	.start_round = reconcile_round,
	.free = reconcile_work_free,
};
