/*
 * reconcile — see reconcile.h.
 */
#include "deploy/reconcile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "plan/deploy.h"
#include "deploy/haproxy.h"
#include "deploy/hap_log.h"
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
		} else if (hap_log_start(dir) < 0) {
			/* the traffic still flows; only the live percentiles are missing */
			flog_warn("%s", ferry_error_last());
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
static int replica_check(PGconn *conn, const char *home, const char *actor, const struct deployment *d,
			 const struct deploy_version *v, const struct deploy_replica *rep)
{
	const char *health = deploy_health_name(rep->health);
	int stopped = rep->health == DEPLOY_H_STOPPED;
	long st = 0;

	if (rep->handle && replica_alive(rep->handle)) {
		int ok = replica_http("GET", rep->port, "/v2/health/ready", NULL, HEALTH_TIMEOUT_MS, &st, NULL) == 0 &&
			 st == 200;
		enum deploy_health now = ok ? DEPLOY_H_HEALTHY : DEPLOY_H_UNHEALTHY;
		if (rep->health != now) {
			json_t *det = json_pack("{s:s, s:i, s:s, s:s}", "version", v->version, "replica", rep->idx, "from",
						health, "to", deploy_health_name(now));
			store_deploy_replica_health(conn, d->id, v->version, rep->idx, deploy_health_name(now),
						    ok ? NULL : "not ready (GET /v2/health/ready)", 0, 0);
			store_deploy_event(conn, d->id, actor, ok ? "replica-healthy" : "replica-unhealthy", det);
			json_decref(det);
			flog_info("deployment %s: %s replica %d is %s", d->name, v->version, rep->idx,
				  deploy_health_name(now));
		}
		return ok;
	}
	/* gone: restart it once its backoff passed */
	if (rep->next_start_in_ms > 0)
		return 0;
	{
		json_t *nh = NULL, *det;
		struct replica_spec s = {
			.home = home, .deployment = d->name, .ord = v->ord, .idx = rep->idx,
			.generation = rep->generation + 1, .port = rep->port, .model = d->model,
			.version = v->version, .artifact = v->artifact,
			/* serve is what the deploy step kept for restarts: passed on as it is */
			.serve = json_object_get(v->serve, "command"),
			.env = json_object_get(v->serve, "env"),
			.workdir = json_string_value(json_object_get(v->serve, "workdir")),
			.placement = json_object_get(v->serve, "placement"),
		};
		if (replica_start(&s, &nh) < 0) {
			char *err = xstrdup(ferry_error_last());
			store_deploy_replica_health(conn, d->id, v->version, rep->idx, "unhealthy", err, 1,
						    backoff_ms(rep->restarts));
			flog_error("deployment %s: restarting %s replica %d: %s", d->name, v->version, rep->idx, err);
			free(err);
			return 0;
		}
		store_deploy_replica_put(conn, d->id, v->version, rep->idx, rep->port, nh, s.generation, "starting", NULL);
		store_deploy_replica_health(conn, d->id, v->version, rep->idx, "starting",
					    stopped ? NULL : "its process had exited", stopped ? 0 : 1,
					    backoff_ms(rep->restarts + 1));
		det = json_pack("{s:s, s:i, s:i, s:i}", "version", v->version, "replica", rep->idx, "port", rep->port,
				"generation", s.generation);
		store_deploy_event(conn, d->id, actor, stopped ? "replica-started" : "replica-restarted", det);
		json_decref(det);
		flog_info("deployment %s: %s replica %d %s on port %d", d->name, v->version, rep->idx,
			  stopped ? "started" : "restarted", rep->port);
		json_decref(nh);
		return 0; /* healthy at a later round, once it answers */
	}
}

/*
 * Stops the live replicas of deployment d (every version when all, else
 * the retired ones), with an event each.
 */
static void replicas_stop_all(PGconn *conn, const char *actor, const struct deployment *d, int all)
{
	for (size_t i = 0; i < d->nversions; i++) {
		const struct deploy_version *v = &d->versions[i];
		if (!all && v->state != DEPLOY_V_RETIRED)
			continue;
		/*
		 * a version starting belongs to its deploy step, which starts a
		 * stopped deployment again when it is done: stopping its replicas
		 * here killed a rollout that an auto-stop reached first ("exited
		 * before it was ready", seen under load)
		 */
		if (v->state == DEPLOY_V_STARTING)
			continue;
		for (size_t j = 0; j < v->nreplicas; j++) {
			const struct deploy_replica *rep = &v->replicas[j];
			if (rep->health == DEPLOY_H_STOPPED && !(rep->handle && replica_alive(rep->handle)))
				continue;
			if (rep->handle)
				replica_stop(rep->handle, STOP_GRACE_MS);
			store_deploy_replica_health(conn, d->id, v->version, rep->idx, "stopped", NULL, 0, 0);
			{
				json_t *det = json_pack("{s:s, s:i}", "version", v->version, "replica", rep->idx);
				store_deploy_event(conn, d->id, actor, "replica-stopped", det);
				json_decref(det);
			}
		}
	}
}

/* Stops replica rep (past its version's count) and forgets it, with an event. */
static void replica_remove(PGconn *conn, const char *actor, const struct deployment *d,
			   const struct deploy_version *v, const struct deploy_replica *rep)
{
	json_t *det = json_pack("{s:s, s:i}", "version", v->version, "replica", rep->idx);

	if (rep->handle)
		replica_stop(rep->handle, STOP_GRACE_MS);
	store_deploy_replica_delete(conn, d->id, v->version, rep->idx);
	store_deploy_event(conn, d->id, actor, "replica-removed", det);
	json_decref(det);
	flog_info("deployment %s: %s replica %d removed (scaled down)", d->name, v->version, rep->idx);
}

/* The deployment id whose frontend is called name among list[0..n-1], or 0. */
static int64_t dep_of(const struct deployment *list, size_t n, const char *name)
{
	for (size_t i = 0; name && i < n; i++)
		if (strcmp(list[i].name, name) == 0)
			return list[i].id;
	return 0;
}

/* Whether version v of deployment d serves: its replicas are checked and get traffic. */
static int serves(const struct deployment *d, const struct deploy_version *v)
{
	return d->state == DEPLOY_RUNNING && v->state == DEPLOY_V_SERVING;
}

/* Whether rep is past its serving version's count (scaled down): it goes once HAProxy left it. */
static int scaled_away(const struct deployment *d, const struct deploy_version *v, const struct deploy_replica *rep)
{
	return serves(d, v) && rep->idx > v->want_replicas;
}

/*
 * The auto-stop warnings also go to FERRY_NOTIFY_WEBHOOK when it is set, as
 * {"event":"deployment.auto_stop_warning","deployment","id","deadline"}:
 * best effort (WEBHOOK_TRIES tries, then logged), since the event stays.
 */
static void warn_webhook(const struct deploy_warning *warned, size_t n)
{
	const char *url = getenv("FERRY_NOTIFY_WEBHOOK");

	for (size_t i = 0; i < n; i++) {
		const struct deploy_warning *w = &warned[i];
		json_t *body, *ans = NULL;
		flog_info("deployment %s: auto-stop at %s", w->deployment, w->deadline ? w->deadline : "(null)");
		if (url == NULL || *url == '\0')
			continue;
		body = json_pack("{s:s, s:s, s:I, s:s?}", "event", "deployment.auto_stop_warning", "deployment",
				 w->deployment, "id", (json_int_t)w->id, "deadline", w->deadline);
		if (webhook_post(&ans, url, body, WEBHOOK_TRIES) < 0)
			flog_warn("deployment %s: the auto-stop warning did not reach %s: %s", w->deployment, url,
				  ferry_error_last());
		json_decref(ans);
		json_decref(body);
	}
}

int reconcile_now(PGconn *conn, const char *home, const char *actor)
{
	struct deployment *list = NULL;
	struct deploy_warning *warned = NULL;
	json_t *changes = json_array(), *c;
	struct hap_frontend *fe = NULL;
	struct hap_server *sv = NULL, *absv = NULL;
	char **names = NULL;
	unsigned char *ok = NULL; /* each replica's health this round, the replicas of list in order */
	size_t i, j, k, n = 0, nwarned = 0, nfe = 0, nsv = 0, nab = 0, nnames = 0, cap = 0, off;
	int64_t *due = NULL;
	int ndue = 0, error;

	pthread_mutex_lock(&lock);
	if ((error = store_deploy_due(conn, actor, &due, &ndue, &warned, &nwarned)) < 0)
		goto out;
	{
		/* versions at 0% past retire_after retire now: their replicas stop in this round */
		int nret = 0;
		if ((error = store_deploy_retire_due(conn, actor, &nret)) < 0)
			goto out;
		if (nret > 0)
			flog_info("deployments: %d version%s at 0%% past retire_after retired", nret, nret == 1 ? "" : "s");
	}
	warn_webhook(warned, nwarned);
	for (int x = 0; x < ndue; x++)
		flog_info("deployment %lld: auto-stop deadline reached, stopping", (long long)due[x]);
	if ((error = store_deployments_list(&list, &n, conn)) < 0)
		goto out;
	for (i = 0; i < n; i++)
		for (j = 0; j < list[i].nversions; j++)
			cap += list[i].versions[j].nreplicas;
	ok = xcalloc(cap + 1, 1);
	/* replicas first: health decides weights */
	off = 0;
	for (i = 0; i < n; i++) {
		const struct deployment *d = &list[i];
		for (j = 0; j < d->nversions; off += d->versions[j++].nreplicas) {
			const struct deploy_version *v = &d->versions[j];
			int healthy = 0, was = 0;
			if (!serves(d, v))
				continue;
			for (k = 0; k < v->nreplicas; k++)
				was += v->replicas[k].health == DEPLOY_H_HEALTHY;
			for (k = 0; k < v->nreplicas; k++) {
				if (scaled_away(d, v, &v->replicas[k]))
					continue;
				ok[off + k] = (unsigned char)replica_check(conn, home, actor, d, v, &v->replicas[k]);
				healthy += ok[off + k];
			}
			/* a version without a healthy replica gets no traffic; the event says when and until when */
			if ((healthy == 0) != (was == 0) && v->weight > 0) {
				json_t *det = json_pack("{s:s, s:i, s:I}", "version", v->version, "healthy", healthy,
							"weight", (json_int_t)v->weight);
				store_deploy_event(conn, d->id, actor,
						   healthy == 0 ? "version-no-healthy-replica" : "version-healthy-again", det);
				json_decref(det);
				if (healthy == 0)
					flog_warn("deployment %s: version %s has no healthy replica: it gets no traffic until one is",
						  d->name, v->version);
			}
		}
	}
	fe = xcalloc(n + 1, sizeof(*fe));
	sv = xcalloc(cap + 1, sizeof(*sv));
	absv = xcalloc(cap + 1, sizeof(*absv));
	names = xcalloc(cap + 1, sizeof(*names));
	/* one frontend per running deployment, each replica of a serving version a server */
	off = 0;
	for (i = 0; i < n; i++) {
		const struct deployment *d = &list[i];
		int running = d->state == DEPLOY_RUNNING;
		if (running) {
			fe[nfe].name = d->name;
			fe[nfe].port = d->port;
			fe[nfe].servers = sv + nsv;
		}
		for (j = 0; j < d->nversions; off += d->versions[j++].nreplicas) {
			const struct deploy_version *v = &d->versions[j];
			int healthy = 0;
			if (!serves(d, v))
				continue;
			for (k = 0; k < v->nreplicas; k++)
				healthy += ok[off + k]; /* 0 for those scaled away */
			for (k = 0; k < v->nreplicas; k++) {
				const struct deploy_replica *rep = &v->replicas[k];
				if (scaled_away(d, v, rep))
					continue;
				names[nnames] = xasprintf("v%d-r%d", v->ord, rep->idx);
				sv[nsv].name = names[nnames++];
				sv[nsv].addr = "127.0.0.1";
				sv[nsv].port = rep->port;
				sv[nsv].weight = ok[off + k] ? deploy_server_weight(v->weight, healthy) : 0;
				/* an A/B test's version: its healthy replicas also take the requests that match */
				if (running && ok[off + k] && d->match_version && strcmp(d->match_version, v->version) == 0) {
					if (fe[nfe].nab == 0)
						fe[nfe].ab_servers = absv + nab;
					absv[nab] = sv[nsv];
					absv[nab++].weight = 1;
					fe[nfe].nab++;
				}
				nsv++;
				fe[nfe].nservers++;
			}
		}
		/* the header routes only while the tested version has a healthy replica to route to */
		if (running && fe[nfe].nab > 0) {
			fe[nfe].match_header = d->match_header;
			fe[nfe].match_value = d->match_value;
		}
		nfe += running;
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
		int64_t dep = dep_of(list, n, json_string_value(json_object_get(c, "frontend")));
		if (dep > 0)
			store_deploy_event(conn, dep, actor, "haproxy", c);
	}
	/* replicas scaled away: HAProxy no longer sends them requests */
	for (i = 0; i < n; i++)
		for (j = 0; j < list[i].nversions; j++)
			for (k = 0; k < list[i].versions[j].nreplicas; k++)
				if (scaled_away(&list[i], &list[i].versions[j], &list[i].versions[j].replicas[k]))
					replica_remove(conn, actor, &list[i], &list[i].versions[j],
						       &list[i].versions[j].replicas[k]);
	/* stopped deployments: HAProxy no longer sends them requests; their replicas go */
	for (i = 0; i < n; i++)
		replicas_stop_all(conn, actor, &list[i], list[i].state == DEPLOY_STOPPED);
out:
	pthread_mutex_unlock(&lock);
	for (i = 0; i < nnames; i++)
		free(names[i]);
	free(names), free(sv), free(absv), free(fe), free(due), free(ok);
	deployments_free(list, n);
	deploy_warnings_free(warned, nwarned);
	json_decref(changes);
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
