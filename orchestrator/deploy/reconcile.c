/*
 * reconcile — see reconcile.h. A round observes (each replica's process,
 * and the health check of the serving ones), decides with no I/O
 * (reconcile_plan.c) and applies: health and (re)starts, HAProxy, then
 * the replicas HAProxy has left are removed or stopped.
 */
#include "deploy/reconcile.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan/deploy.h"
#include "deploy/fleet.h"
#include "deploy/haproxy.h"
#include "deploy/hap_log.h"
#include "deploy/reconcile_plan.h"
#include "deploy/replicas.h"
#include "exec/exec.h"
#include "store/store_deploy.h"
#include "store/store.h"
#include "store/store_reconcile.h"
#include "lib/util.h"
#include "lib/webhook.h"
#include "store/workers.h"

#define HEALTH_TIMEOUT_MS 800
#define NOT_READY "not ready (GET /v2/health/ready)" /* an unhealthy replica's error when its check said so */
#define STOP_GRACE_MS 5000
#define BACKOFF_MAX_MS 30000
#define FENCE_MIN_AGE_S 30 /* a replica's row is written right after its start: older with none is stale */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int leading; /* this process holds the leader lock (reconcile_set_leading) */
/* this process keeps its host's replicas: it holds the host's lock (the replicas task, store_host_keeper) */
static atomic_int keeper;
/*
 * the replicas task has run here: until it has (and in a dev session, where
 * it never runs) the leader's round judges this host's replicas itself
 */
static atomic_int keep_known;
enum { SCOPE_LEADER, SCOPE_HOST };
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
		} else if (hap_set_front(hap, replica_address()), hap_log_start(dir) < 0) {
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

/* The host a replica's handle names when it is not this one (me), else NULL. */
static const char *other_host(const json_t *handle, const char *me)
{
	const char *h = json_string_value(json_object_get(handle, "host"));

	return h && strcmp(h, me) != 0 ? h : NULL;
}

/* What the round writes of replica rep of version v (a store_deploy_replica_change), the rest as given. */
static struct store_replica_change change_of(enum store_replica_write write, const struct deployment *d,
					     const struct deploy_version *v, const struct deploy_replica *rep)
{
	return (struct store_replica_change){.write = write, .dep = d->id, .version = v->version, .idx = rep->idx};
}

/* RC_HEALTH: a live replica's health changed (the round's check said so). */
static void apply_health(PGconn *conn, const char *actor, const struct deployment *d, const struct deploy_version *v,
			 const struct deploy_replica *rep, enum deploy_health now)
{
	int ok = now == DEPLOY_H_HEALTHY;
	json_t *det = json_pack("{s:s, s:i, s:s, s:s}", "version", v->version, "replica", rep->idx, "from",
				deploy_health_name(rep->health), "to", deploy_health_name(now));
	struct store_replica_change c = change_of(REPLICA_HEALTH, d, v, rep);

	c.health = deploy_health_name(now);
	c.error = ok ? NULL : NOT_READY;
	store_deploy_replica_change(conn, &c, actor, ok ? "replica-healthy" : "replica-unhealthy", det);
	json_decref(det);
	flog_info("deployment %s: %s replica %d is %s", d->name, v->version, rep->idx, deploy_health_name(now));
}

/*
 * A (re)start that failed, or a replica that fits on no host (restarted
 * 0: no try was made): unhealthy until the next try (after its
 * backoff), and an event when that is a change (its health over time is
 * read from the events: DEPLOY.md), not one each try. A replica its health
 * check had already called unhealthy (a server that stopped answering,
 * then died; or one killed between the round's look at its process and
 * its check) gets the event too, once: the first why that is not the
 * check's, the one the user needs.
 */
static void start_failed(PGconn *conn, const char *actor, const struct deployment *d, const struct deploy_version *v,
			 const struct deploy_replica *rep, const char *why, int restarted)
{
	struct store_replica_change c = change_of(REPLICA_HEALTH, d, v, rep);
	int told = rep->health != DEPLOY_H_UNHEALTHY || (rep->last_error && strcmp(rep->last_error, NOT_READY) == 0);
	json_t *det = told ? json_pack("{s:s, s:i, s:s, s:s, s:s}", "version", v->version, "replica", rep->idx, "from",
				       deploy_health_name(rep->health), "to", "unhealthy", "error", why)
			   : NULL;

	c.health = "unhealthy", c.error = why, c.restarted = restarted, c.backoff_ms = backoff_ms(rep->restarts);
	store_deploy_replica_change(conn, &c, actor, told ? "replica-unhealthy" : NULL, det);
	json_decref(det);
}

/*
 * A replica that needs a host (never started: a scale-up; or its host is
 * lost) is placed (fleet.c): 1 when that is another host — its row then
 * names that host, whose daemon starts it (fleet_placed) —, 0 when it is
 * this one (or the hosts could not be read), -1 when no host fits (the
 * row says why; later rounds try again).
 */
static int place_elsewhere(PGconn *conn, json_t *hosts, const char *actor, const struct deployment *d,
			   const struct deploy_version *v, const struct deploy_replica *rep, const char *me,
			   const char *lost)
{
	char where[256];
	json_t *h, *det;

	if (hosts == NULL)
		return 0;
	if (fleet_place(hosts, d->id, v->ord, v, v->serve, where, sizeof(where)) < 0) {
		/* no host fits (its labels, GPUs, none up): it waits, the next rounds try again */
		char *err = xstrdup(ferry_error_last());
		start_failed(conn, actor, d, v, rep, err, 0);
		flog_warn("deployment %s: %s replica %d not placed: %s", d->name, v->version, rep->idx, err);
		free(err);
		return -1;
	}
	if (strcmp(where, me) == 0)
		return 0;
	h = fleet_placed_handle(where);
	det = json_pack("{s:s, s:i, s:s, s:s?}", "version", v->version, "replica", rep->idx, "host", where, "lost_host",
			lost);
	{
		struct store_replica_change c = change_of(REPLICA_PUT, d, v, rep);
		c.port = rep->port, c.handle = h, c.generation = rep->generation, c.health = "starting";
		store_deploy_replica_change(conn, &c, actor, "replica-placed", det);
	}
	json_decref(h);
	json_decref(det);
	flog_info("deployment %s: %s replica %d placed on host %s%s%s", d->name, v->version, rep->idx, where,
		  lost ? ": its host is lost: " : "", lost ? lost : "");
	return 1;
}

/*
 * RC_START: a serving replica whose process is gone (or never started),
 * its backoff passed, or one placed on this host (fleet_placed), starts
 * here — or, when it needs a host (never started, or its host is lost),
 * where placement puts it (hosts: the fleet; NULL on a keeper's round,
 * which only starts its own host's).
 */
static void apply_start(PGconn *conn, json_t *hosts, const char *home, const char *actor,
			const struct deployment *d, const struct deploy_version *v, const struct deploy_replica *rep)
{
	int stopped = rep->health == DEPLOY_H_STOPPED, placed = fleet_placed(rep->handle);
	json_t *nh = NULL, *det;
	char me[256];
	const char *lost, *event;
	struct replica_spec s = {
		.home = home, .deployment = d->name, .ord = v->ord, .idx = rep->idx,
		.generation = rep->generation + 1, .port = rep->port, .model = d->model,
		.version = v->version, .artifact = v->artifact,
		/* serve is what the deploy step kept for restarts: passed on as it is */
		.serve = json_object_get(v->serve, "command"),
		.env = json_object_get(v->serve, "env"),
		.workdir = json_string_value(json_object_get(v->serve, "workdir")),
		.placement = json_object_get(v->serve, "placement"), .conn = conn,
	};

	ferry_host_name(me, sizeof(me));
	lost = other_host(rep->handle, me);
	if ((rep->handle == NULL || lost) && place_elsewhere(conn, hosts, actor, d, v, rep, me, lost) != 0)
		return;
	/*
	 * a replacement (its host lost) or a placed one: a port of its own
	 * here (the old one may still hold its port on its host, which may be
	 * this machine too; a placement's port is the placer's guess)
	 */
	if ((lost || placed) && (s.port = replica_free_port(conn)) == 0) {
		start_failed(conn, actor, d, v, rep, "no free port for a replacement", 1);
		return;
	}
	/*
	 * its own port, which another program took meanwhile (while the deployment was stopped, across a
	 * reboot): a port of its own elsewhere, not starts that cannot bind, restarted for ever
	 */
	if (!lost && !placed && !replica_port_free(s.port)) {
		int was = s.port;
		if ((s.port = replica_free_port(conn)) == 0) {
			start_failed(conn, actor, d, v, rep, "its port is held by another program, and no other is free", 1);
			return;
		}
		flog_warn("deployment %s: %s replica %d: its port %d is held by another program: it starts on port %d",
			  d->name, v->version, rep->idx, was, s.port);
	}
	if (replica_start(&s, &nh) < 0) {
		char *err = xstrdup(ferry_error_last());
		start_failed(conn, actor, d, v, rep, err, 1);
		flog_error("deployment %s: %s %s replica %d: %s", d->name, placed ? "starting" : "restarting",
			   v->version, rep->idx, err);
		free(err);
		return;
	}
	event = lost ? "replica-replaced" : stopped || placed ? "replica-started" : "replica-restarted";
	det = json_pack("{s:s, s:i, s:i, s:i, s:s, s:s?}", "version", v->version, "replica", rep->idx, "port", s.port,
			"generation", s.generation, "host", me, "lost_host", lost);
	{
		struct store_replica_change c = change_of(REPLICA_PUT, d, v, rep);
		char *why = lost ? xasprintf("its host %s was lost", lost) : NULL;
		int first = stopped || placed, rc;
		c.port = s.port, c.handle = nh, c.generation = s.generation, c.health = "starting";
		c.error = lost ? why : first ? NULL : "its process had exited";
		c.restarted = first ? 0 : 1;
		c.backoff_ms = first ? 0 : backoff_ms(rep->restarts + 1);
		rc = store_deploy_replica_change(conn, &c, actor, event, det);
		free(why);
		json_decref(det);
		if (rc < 0) {
			/* not recorded: not left running untracked either (the next round starts it again) */
			flog_error("deployment %s: recording %s replica %d: %s; stopping the process started",
				   d->name, v->version, rep->idx, ferry_error_last());
			replica_stop(nh, STOP_GRACE_MS);
			json_decref(nh);
			return;
		}
	}
	EXEC_FAULT("replica-written"); /* tests/fault: a window right after the writes */
	if (lost)
		flog_warn("deployment %s: %s replica %d replaced here on port %d: its host %s is lost", d->name,
			  v->version, rep->idx, s.port, lost);
	else
		flog_info("deployment %s: %s replica %d %s on port %d", d->name, v->version, rep->idx,
			  stopped || placed ? "started" : "restarted", s.port);
	json_decref(nh);
}

/*
 * RC_VERSION_*: a version with a share has no healthy replica (it gets no
 * traffic), or has one again, with its event; or what is said of it changes
 * without one (RC_VERSION_SAID). What is said and the event are one
 * statement: the next round judges against what was said.
 */
static void apply_version(PGconn *conn, const char *actor, const struct deployment *d, const struct deploy_version *v,
			  const struct rc_action *a)
{
	const char *kind = a->what == RC_VERSION_UNSERVED ? "version-no-healthy-replica"
			   : a->what == RC_VERSION_SERVED ? "version-healthy-again" : NULL;
	json_t *det = kind ? json_pack("{s:s, s:i, s:I}", "version", v->version, "healthy", a->healthy, "weight",
				       (json_int_t)v->weight)
			   : NULL;

	if (store_deploy_version_said(conn, d->id, v->version, a->said, actor, kind, det) < 0)
		flog_warn("deployment %s: recording what version %s's health is: %s", d->name, v->version,
			  ferry_error_last());
	else if (a->what == RC_VERSION_UNSERVED)
		flog_warn("deployment %s: version %s has no healthy replica: it gets no traffic until one is",
			  d->name, v->version);
	json_decref(det);
}

/* RC_STOP: a replica of a stopped deployment or a retired version stops, with an event. */
static void apply_stop(PGconn *conn, const char *actor, const struct deployment *d, const struct deploy_version *v,
		       const struct deploy_replica *rep)
{
	json_t *det = json_pack("{s:s, s:i}", "version", v->version, "replica", rep->idx);
	struct store_replica_change c = change_of(REPLICA_HEALTH, d, v, rep);
	char me[256];

	ferry_host_name(me, sizeof(me));
	/* one of a lost host's: not a process here (its keeper fences it if that host comes back) */
	if (rep->handle && other_host(rep->handle, me) == NULL)
		replica_stop(rep->handle, STOP_GRACE_MS);
	c.health = "stopped";
	store_deploy_replica_change(conn, &c, actor, "replica-stopped", det);
	json_decref(det);
}

/* RC_REMOVE: a replica past its version's count stops and is forgotten, with an event. */
static void apply_remove(PGconn *conn, const char *actor, const struct deployment *d,
			 const struct deploy_version *v, const struct deploy_replica *rep)
{
	json_t *det = json_pack("{s:s, s:i}", "version", v->version, "replica", rep->idx);
	struct store_replica_change c = change_of(REPLICA_DELETE, d, v, rep);
	char me[256];

	ferry_host_name(me, sizeof(me));
	if (rep->handle && other_host(rep->handle, me) == NULL)
		replica_stop(rep->handle, STOP_GRACE_MS);
	store_deploy_replica_change(conn, &c, actor, "replica-removed", det);
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

/*
 * What this round sees of each replica (parallel to the list's replicas):
 * whether its process lives, and for the live replicas of serving
 * versions within their count, whether it answers its health check
 * (HEALTH_TIMEOUT_MS each). A replica whose handle names another host
 * (me is this one) is never judged by a pid here: while that host is
 * not lost it is remote (its row's health holds; HAProxy reaches it at
 * the host's address), and once its host is lost it is not alive, so
 * the plan starts a replacement here.
 */
static struct rc_seen *observe(const struct deployment *list, size_t n, const json_t *hosts, const char *me,
			       int scope)
{
	size_t i, j, k, off = 0, total = 0;
	struct rc_seen *seen;
	int keep = atomic_load(&keeper) || !atomic_load(&keep_known);

	for (i = 0; i < n; i++)
		for (j = 0; j < list[i].nversions; j++)
			total += list[i].versions[j].nreplicas;
	seen = xcalloc(total + 1, sizeof(*seen));
	for (i = 0; i < n; i++)
		for (j = 0; j < list[i].nversions; off += list[i].versions[j++].nreplicas) {
			const struct deploy_version *v = &list[i].versions[j];
			for (k = 0; k < v->nreplicas; k++) {
				const struct deploy_replica *rep = &v->replicas[k];
				struct rc_seen *sn = &seen[off + k];
				long st = 0;
				const char *other = other_host(rep->handle, me);
				sn->addr = fleet_ip(hosts, other);
				if (other) {
					const char *state =
						json_string_value(json_object_get(json_object_get(hosts, other), "state"));
					/* its host's keeper looks after it, unless that host is lost (the leader replaces it) */
					if (scope == SCOPE_HOST || hosts == NULL || (state && strcmp(state, "lost") != 0))
						sn->remote = 1;
					/*
					 * … and still not while the replica answers its health
					 * check there: only its daemon is gone (killed, cut off
					 * from the database), it serves on, and its keeper
					 * takes it up again when it is back
					 */
					else if (!fleet_placed(rep->handle) && rc_serves(&list[i], v) &&
						 replica_http("GET", sn->addr, rep->port, "/v2/health/ready", NULL,
							      HEALTH_TIMEOUT_MS, &st, NULL) == 0 && st == 200)
						sn->remote = 1;
					continue;
				}
				/*
				 * this host's: judged by its pid and health check only by the
				 * daemon that keeps this host's replicas; never started: the
				 * leader's to start
				 */
				if ((rep->handle && !keep) || (rep->handle == NULL && scope == SCOPE_HOST)) {
					sn->remote = 1;
					continue;
				}
				sn->alive = rep->handle && replica_alive(rep->handle);
				if (sn->alive && rc_serves(&list[i], v) && !rc_scaled_away(&list[i], v, rep))
					sn->ready = replica_http("GET", NULL, rep->port, "/v2/health/ready", NULL,
								 HEALTH_TIMEOUT_MS, &st, NULL) == 0 && st == 200;
			}
		}
	return seen;
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

/*
 * This host's stale replicas stopped (replica_fence): those no row names —
 * a lost host's, replaced elsewhere while it was away. Only by the keeper.
 */
static void fence(PGconn *conn, const char *home, const char *me)
{
	struct deployment *list = NULL;
	char **keep = NULL, **slots = NULL;
	size_t n = 0, nkeep = 0, nslots = 0, total = 0;
	int undirected = 0; /* handles of this host without a "dir": their process cannot be told apart */

	/* the rows as they are now: this round's starts and replacements written */
	if (store_deployments_list(&list, &n, conn) < 0) {
		flog_warn("replicas: no fencing this round: %s", ferry_error_last());
		return;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < list[i].nversions; j++)
			total += list[i].versions[j].nreplicas;
	keep = xcalloc(total + 1, sizeof(*keep));
	slots = xcalloc(total + 1, sizeof(*slots));
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < list[i].nversions; j++)
			for (size_t k = 0; k < list[i].versions[j].nreplicas; k++) {
				const struct deploy_replica *rep = &list[i].versions[j].replicas[k];
				const char *dir = json_string_value(json_object_get(rep->handle, "dir"));
				if (rep->handle == NULL)
					continue;
				/*
				 * a slot taken over by another host: a process of it here is
				 * stale at once (one of this host that the rows read at the
				 * round's start do not name yet may have just started)
				 */
				if (other_host(rep->handle, me))
					slots[nslots++] = xasprintf("%s/runs/%d/r%d", list[i].name, list[i].versions[j].ord,
								    rep->idx);
				else if (dir)
					keep[nkeep++] = (char *)dir;
				else if (!fleet_placed(rep->handle)) /* a placement here: no process yet */
					undirected = 1;
			}
	replica_fence(home, keep, nkeep, slots, nslots, undirected ? INT_MAX : FENCE_MIN_AGE_S, STOP_GRACE_MS);
	for (size_t i = 0; i < nslots; i++)
		free(slots[i]);
	free(slots);
	free(keep);
	deployments_free(list, n);
}

/* The index in seen of list[a->dep].versions[a->ver].replicas[a->rep]. */
static size_t seen_at(const struct deployment *list, const struct rc_action *a)
{
	size_t off = 0;

	for (size_t i = 0; i <= a->dep; i++)
		for (size_t j = 0; j < list[i].nversions && (i < a->dep || j < a->ver); j++)
			off += list[i].versions[j].nreplicas;
	return off + a->rep;
}

/*
 * This host's HAProxy made to serve the plan's frontends (one HAProxy a
 * host, run by the daemon that keeps the host's replicas: every host
 * serves every deployment's front at its address). Its changes become
 * "haproxy" events when record (the leader's round; a keeper's are only
 * logged, or each host would repeat them).
 */
static int apply_haproxy(PGconn *conn, const char *home, const char *actor, const struct deployment *list, size_t n,
			 const struct rc_plan *plan, int record)
{
	json_t *changes = json_array(), *c;
	size_t i;
	int error = FERRY_OK;

	if (hap_for(home) == NULL) {
		json_decref(changes);
		return FERRY_ERROR;
	}
	/* nothing deployed and no HAProxy running: nothing to start */
	if (plan->nfe > 0 || hap_running(hap)) {
		if ((error = hap_apply(hap, plan->fe, plan->nfe, changes)) < 0)
			flog_error("HAProxy: %s", ferry_error_last());
	}
	json_array_foreach(changes, i, c) {
		int64_t dep = dep_of(list, n, json_string_value(json_object_get(c, "frontend")));
		if (dep > 0 && record) {
			store_deploy_event(conn, dep, actor, "haproxy", c);
		} else if (dep > 0) {
			char *t = json_dumps(c, JSON_COMPACT);
			flog_debug("HAProxy of this host: %s", t ? t : "?");
			free(t);
		}
	}
	json_decref(changes);
	return error;
}

/*
 * A keeper's round (SCOPE_HOST): the replicas whose handle names this
 * host — observed, restarted, stopped and removed as the plan says — and
 * nothing else: no HAProxy, no auto-stop, no events about versions (the
 * leader's round does those, from the health written here).
 */
static int host_round(PGconn *conn, const char *home, const char *actor)
{
	struct deployment *list = NULL;
	struct rc_seen *seen = NULL;
	struct rc_plan plan = {0};
	json_t *hosts = NULL;
	char me[256];
	size_t i, n = 0;
	int error;

	pthread_mutex_lock(&lock);
	if ((error = store_deployments_list(&list, &n, conn)) < 0)
		goto out;
	ferry_host_name(me, sizeof(me));
	/* where the other hosts' replicas are reached (this host's front serves them too) */
	hosts = fleet_hosts(conn);
	seen = observe(list, n, hosts, me, SCOPE_HOST);
	reconcile_plan(&plan, list, n, seen);
	for (i = 0; i < plan.nactions; i++) {
		const struct rc_action *a = &plan.actions[i];
		const struct deployment *d = &list[a->dep];
		const struct deploy_version *v = &d->versions[a->ver];
		/* (a version's health is the leader's to say) */
		if (a->what == RC_VERSION_UNSERVED || a->what == RC_VERSION_SERVED || a->what == RC_VERSION_SAID ||
		    seen[seen_at(list, a)].remote)
			continue;
		if (a->what == RC_HEALTH)
			apply_health(conn, actor, d, v, &v->replicas[a->rep], a->health);
		else if (a->what == RC_START)
			apply_start(conn, NULL, home, actor, d, v, &v->replicas[a->rep]);
	}
	/* this host's front, then what HAProxy no longer sends requests to goes */
	apply_haproxy(conn, home, actor, list, n, &plan, 0);
	for (i = 0; i < plan.nactions; i++) {
		const struct rc_action *a = &plan.actions[i];
		const struct deployment *d = &list[a->dep];
		const struct deploy_version *v = &d->versions[a->ver];
		if (seen[seen_at(list, a)].remote)
			continue;
		if (a->what == RC_REMOVE)
			apply_remove(conn, actor, d, v, &v->replicas[a->rep]);
		else if (a->what == RC_STOP)
			apply_stop(conn, actor, d, v, &v->replicas[a->rep]);
	}
	fence(conn, home, me);
out:
	pthread_mutex_unlock(&lock);
	rc_plan_free(&plan);
	free(seen);
	deployments_free(list, n);
	json_decref(hosts);
	return error;
}

int reconcile_now(PGconn *conn, const char *home, const char *actor)
{
	struct deployment *list = NULL;
	struct deploy_warning *warned = NULL;
	struct rc_seen *seen = NULL;
	struct rc_plan plan = {0};
	json_t *hosts = NULL;
	char me[256];
	size_t i, n = 0, nwarned = 0;
	int64_t *due = NULL, asked = 0;
	int ndue = 0, error;

	pthread_mutex_lock(&lock);
	/* the asks this round answers: every one made before it read the rows */
	if ((error = store_reconcile_requested(conn, &asked)) < 0)
		goto out;
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
	/* observe, decide (reconcile_plan.c: no I/O), apply */
	ferry_host_name(me, sizeof(me));
	if ((hosts = fleet_hosts(conn)) == NULL)
		flog_warn("reconcile: no host is taken for lost this round: %s", ferry_error_last());
	seen = observe(list, n, hosts, me, SCOPE_LEADER);
	reconcile_plan(&plan, list, n, seen);
	for (i = 0; i < plan.nactions; i++) {
		const struct rc_action *a = &plan.actions[i];
		const struct deployment *d = &list[a->dep];
		const struct deploy_version *v = &d->versions[a->ver];
		if (a->what == RC_VERSION_UNSERVED || a->what == RC_VERSION_SERVED || a->what == RC_VERSION_SAID)
			apply_version(conn, actor, d, v, a);
		else if (seen[seen_at(list, a)].remote)
			continue; /* its host's keeper's */
		else if (a->what == RC_HEALTH)
			apply_health(conn, actor, d, v, &v->replicas[a->rep], a->health);
		else if (a->what == RC_START)
			apply_start(conn, hosts, home, actor, d, v, &v->replicas[a->rep]);
	}
	/*
	 * this host's front, when this daemon keeps the host (the keeper of
	 * another daemon here runs it otherwise; each host's keeper runs its own)
	 */
	if ((atomic_load(&keeper) || !atomic_load(&keep_known)) &&
	    (error = apply_haproxy(conn, home, actor, list, n, &plan, 1)) < 0 && hap == NULL)
		goto out;
	/* HAProxy no longer sends them requests: replicas scaled away go, stopped ones stop */
	for (i = 0; i < plan.nactions; i++) {
		const struct rc_action *a = &plan.actions[i];
		const struct deployment *d = &list[a->dep];
		const struct deploy_version *v = &d->versions[a->ver];
		if ((a->what == RC_REMOVE || a->what == RC_STOP) && seen[seen_at(list, a)].remote)
			continue; /* its host's keeper stops it (after this HAProxy change) */
		if (a->what == RC_REMOVE)
			apply_remove(conn, actor, d, v, &v->replicas[a->rep]);
		else if (a->what == RC_STOP)
			apply_stop(conn, actor, d, v, &v->replicas[a->rep]);
	}
	if (atomic_load(&keeper))
		fence(conn, home, me);
	if (store_reconcile_done(conn, asked) < 0)
		flog_warn("reconcile: recording the round: %s", ferry_error_last());
out:
	pthread_mutex_unlock(&lock);
	rc_plan_free(&plan);
	free(seen);
	free(due);
	deployments_free(list, n);
	deploy_warnings_free(warned, nwarned);
	json_decref(hosts);
	return error;
}

void reconcile_set_leading(int how)
{
	atomic_store(&leading, how);
}

int reconcile_request(PGconn *conn, const char *home, const char *actor, int flags)
{
	int64_t ticket = 0, until = clock_mono_ms() + RECONCILE_WAIT_MS, pause_ms = 10;
	int done = 0, leader = 0, error;

	/* the leader's own deploy step; or a leader with no worker pool, whose task never runs a round */
	if (((flags & RECONCILE_MAY_RUN) && atomic_load(&leading)) || atomic_load(&leading) == RECONCILE_LEADS_NO_POOL)
		return reconcile_now(conn, home, actor);
	if ((error = store_reconcile_request(conn, &ticket)) < 0)
		return error;
	for (;;) {
		if ((error = store_reconcile_check(conn, ticket, &done, &leader)) < 0)
			return error;
		if (done && (flags & RECONCILE_MAY_RUN) && atomic_load(&keeper))
			/*
			 * a follower's deploy step: the leader's front has the change;
			 * this host's too before the step goes on (its canary judges
			 * this host's front), not a round later
			 */
			return host_round(conn, home, actor);
		if (done)
			return FERRY_OK;
		if (!leader && (flags & RECONCILE_MAY_RUN)) {
			/* nobody leads (a dev session on its own): the round runs here */
			flog_info("reconcile: no leader is up; this process runs the round");
			return reconcile_now(conn, home, actor);
		}
		if (!leader) {
			flog_warn("reconcile: no leader is up; the change is written and the next leader applies it");
			return FERRY_OK;
		}
		if (clock_mono_ms() >= until) {
			ferry_error_set("the leader ran no reconcile round within %d s; the change is written and its "
					"next round applies it", RECONCILE_WAIT_MS / 1000);
			return FERRY_ERROR;
		}
		{
			struct timespec ts = {0, (long)pause_ms * 1000000L};
			nanosleep(&ts, NULL);
		}
		if (pause_ms < 100)
			pause_ms *= 2;
	}
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

/* A bad FERRY_DEPLOY_PORTS stops the start, saying why (the replicas' ports come from it). */
static int reconcile_open(void **state, struct task_ctx *c)
{
	(void)state, (void)c;
	return replica_ports_check();
}

/* ---- every daemon's keeper task: its host's replicas ------------------------------ */

static struct work *keep_round(struct task_ctx *c, void *state);

const struct task replicas_task = {
	.name = "replicas",
	.flags = TASK_NO_DEV | TASK_POOL,
	.period = every_reconcile,
	.start_round = keep_round,
	.free = reconcile_work_free,
};

static void keep_run(struct work *w, PGconn *conn)
{
	struct rec_work *r = (struct rec_work *)w;

	if (conn != NULL && host_round(conn, r->home, r->actor) < 0)
		flog_warn("replicas: %s", ferry_error_last());
}

/*
 * On the loop: this daemon takes (or keeps) its host's lock on the engine's
 * connection — one daemon per host keeps its replicas — then, when it
 * keeps them and does not lead (the leader's round covers its own host),
 * a round on the pool.
 */
static struct work *keep_round(struct task_ctx *c, void *state)
{
	int held = 0;
	struct work *w;

	(void)state;
	/*
	 * a daemon with no worker pool (FERRY_WORKERS=0) runs no keeper round:
	 * it never takes the host's lock, and as a leader it judges its own
	 * host's replicas itself (keep_known stays 0)
	 */
	if (c->workers == NULL)
		return NULL;
	if (store_host_keeper(c->conn, c->host, &held) < 0)
		held = 0;
	atomic_store(&keep_known, 1);
	if (atomic_exchange(&keeper, held) != held)
		flog_info("%s the replicas of host %s", held ? "keeping" : "no longer keeping", c->host);
	if (!held || atomic_load(&leading))
		return NULL;
	w = reconcile_work_new(c->home, c->owner);
	w->run = keep_run;
	return w;
}

const struct task reconcile_task = {
	.name = "reconcile",
	.open = reconcile_open,
	.flags = TASK_LEADER | TASK_NO_DEV | TASK_POOL,
	.period = every_reconcile,
	.start_round = reconcile_round,
	.free = reconcile_work_free,
};
