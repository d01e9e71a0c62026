/*
 * api_deploy — the deployments' routes: GET /deployments, GET
 * /deployments/{id} (versions, weights, replicas with their health, the
 * auto-stop deadline, the last events and what HAProxy applies), PATCH
 * /deployments/{id} (traffic, auto_stop, extend, and the actions stop,
 * start, promote and rollback), DELETE /deployments/{id} and POST
 * /deployments/{id}/predict, which forwards a request through the front
 * address (the online prediction test). A change is written to the
 * database with its event and actor first, then applied (reconcile.c) before
 * the answer, so a client that gets 200 sees HAProxy with the new weights;
 * were applying to fail, the leader's reconcile round repairs it from the
 * database. Bad input is a 400 naming the field and changes nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_priv.h"
#include "plan/deploy.h"
#include "deploy/hap_log.h"
#include "deploy/reconcile.h"
#include "deploy/replicas.h"
#include "store/store.h"
#include "store/store_deploy.h"
#include "lib/metrics.h"
#include "lib/util.h"

#define EVENTS_SHOWN 50

static void reply_list(struct reply *r, int error, json_t *j)
{
	if (error < 0) {
		reply_store_error(r, error);
		return;
	}
	reply_json(r, 200, json_dumps(j, JSON_COMPACT));
}

/*
 * The proxy's per-request log over the last LIVE_WINDOW_S seconds, per
 * version (hap_log.h): {"VERSION": {"requests", "synthetic", "rps", "error_rate",
 * "p50_ms", "p90_ms", "p99_ms"}, …, "window_s"}; a version with no request
 * in the window is absent. Empty on a daemon that does not run HAProxy.
 */
#define LIVE_WINDOW_S 60
static json_t *live_json(const struct deployment *d)
{
	json_t *live = json_object();

	json_object_set_new(live, "window_s", json_integer(LIVE_WINDOW_S));
	for (size_t i = 0; i < d->nversions; i++) {
		struct hap_live l;
		if (hap_log_window(d->name, d->versions[i].ord, LIVE_WINDOW_S, &l) < 0)
			continue;
		json_object_set_new(live, d->versions[i].version,
				    json_pack("{s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "requests", (json_int_t)l.requests,
					      "synthetic", (json_int_t)l.synthetic, "rps", (double)l.requests / l.seconds,
					      "error_rate",
					      (double)l.errors_5xx / (double)l.requests, "p50_ms", l.p50_ms, "p90_ms",
					      l.p90_ms, "p99_ms", l.p99_ms));
	}
	return live;
}

void api_deployments_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct deployment *list = NULL;
	json_t *j = json_array();
	size_t n = 0;
	int error = store_deployments_list(&list, &n, db);

	(void)a, (void)q;
	for (size_t i = 0; error == 0 && i < n; i++) {
		json_t *one = deployment_to_json(&list[i], replica_address());
		json_object_set_new(one, "live", live_json(&list[i]));
		json_array_append_new(j, one);
	}
	reply_list(r, error, j);
	json_decref(j);
	deployments_free(list, n);
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void label(char *out, size_t cap, const char *v)
{
	size_t o = 0;

	for (; *v && o + 3 < cap; v++) {
		if (*v == '\\' || *v == '"' || *v == '\n')
			out[o++] = '\\';
		out[o++] = *v == '\n' ? 'n' : *v;
	}
	out[o] = '\0';
}

/*
 * /metrics' per-version live figures (the proxy's log over the last
 * LIVE_WINDOW_S seconds, as GET /deployments/{id} has them): requests and
 * the synthetic ones among them, 5xx, and the request time at p50/p90/p99
 * (a summary's quantiles, in seconds). Only versions with requests in the
 * window, on the daemon that runs HAProxy.
 */
void api_deploy_metrics(PGconn *db, char **buf, size_t *len, size_t *cap)
{
	struct deployment *list = NULL;
	size_t n = 0;
	int head = 0;

	if (store_deployments_list(&list, &n, db) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < list[i].nversions; k++) {
			struct hap_live l;
			char dn[160], vn[160];
			if (hap_log_window(list[i].name, list[i].versions[k].ord, LIVE_WINDOW_S, &l) < 0)
				continue;
			if (!head++)
				metrics_appendf(buf, len, cap,
						"# HELP ferry_deployment_requests Requests through the proxy to a version "
						"in the last %d s (its log).\n# TYPE ferry_deployment_requests gauge\n"
						"# HELP ferry_deployment_synthetic_requests Of those, a canary's own "
						"(X-Ferry-Synthetic).\n# TYPE ferry_deployment_synthetic_requests gauge\n"
						"# HELP ferry_deployment_errors_5xx Of those, answered 5xx.\n"
						"# TYPE ferry_deployment_errors_5xx gauge\n"
						"# HELP ferry_deployment_request_seconds Request time through the proxy "
						"over the last %d s.\n# TYPE ferry_deployment_request_seconds summary\n",
						LIVE_WINDOW_S, LIVE_WINDOW_S);
			label(dn, sizeof(dn), list[i].name);
			label(vn, sizeof(vn), list[i].versions[k].version);
			metrics_appendf(buf, len, cap,
					"ferry_deployment_requests{deployment=\"%s\",version=\"%s\"} %lld\n"
					"ferry_deployment_synthetic_requests{deployment=\"%s\",version=\"%s\"} %lld\n"
					"ferry_deployment_errors_5xx{deployment=\"%s\",version=\"%s\"} %lld\n"
					"ferry_deployment_request_seconds{deployment=\"%s\",version=\"%s\",quantile=\"0.5\"} %.6f\n"
					"ferry_deployment_request_seconds{deployment=\"%s\",version=\"%s\",quantile=\"0.9\"} %.6f\n"
					"ferry_deployment_request_seconds{deployment=\"%s\",version=\"%s\",quantile=\"0.99\"} %.6f\n",
					dn, vn, (long long)l.requests, dn, vn, (long long)l.synthetic, dn, vn,
					(long long)l.errors_5xx, dn, vn, l.p50_ms / 1000, dn, vn, l.p90_ms / 1000, dn, vn,
					l.p99_ms / 1000);
		}
	deployments_free(list, n);
}

/* d as GET answers it: with its events and the live figures of its versions. */
static json_t *one_json(PGconn *db, const struct deployment *d)
{
	json_t *j = deployment_to_json(d, replica_address()), *ev = NULL;

	if (store_deploy_events(db, d->id, EVENTS_SHOWN, &ev) == 0)
		json_object_set_new(j, "events", ev);
	json_object_set_new(j, "live", live_json(d));
	return j;
}

/*
 * GET /deployments/{id}/traffic?since=UNIX_S: each version's traffic over
 * time for the console's charts, from the proxy's log (hap_log_history):
 * {"bucket_s": 10, "now": UNIX_S, "versions": {"VERSION": [[t_s,
 * requests, errors_5xx, synthetic, p50_ms, p99_ms], …]}}, the buckets that
 * start at or after since (default: the last hour), oldest first, a bucket
 * without requests left out. Only on the daemon that runs HAProxy (the
 * log is read there); elsewhere every list is empty, as "live" is. And
 * "replicas": each replica's health over the last hour, from the
 * deployment's events (store_deploy_health_history), on any daemon.
 */
void api_deployment_traffic(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	enum { CAP = HAP_LOG_HISTORY_S / HAP_LOG_BUCKET_S };
	const char *since_s = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "since");
	int64_t now = (int64_t)time(NULL), since = now - HAP_LOG_HISTORY_S;
	struct deployment *dep = NULL;
	struct hap_point *pts;
	json_t *versions, *health = NULL, *j;
	int error;

	(void)a;
	if (since_s && (parse_int64(since_s, &since) < 0 || since < 0)) {
		reply_error(r, 400, "invalid_field", "since", "since must be a time in seconds since the epoch", NULL);
		return;
	}
	if ((error = store_deployment_get(&dep, db, q->id)) < 0) {
		reply_store_error(r, error);
		return;
	}
	pts = xmalloc(CAP * sizeof(*pts));
	versions = json_object();
	for (size_t i = 0; i < dep->nversions; i++) {
		int n = hap_log_history(dep->name, dep->versions[i].ord, since, pts, CAP);
		json_t *rows = json_array();
		for (int k = 0; k < n; k++)
			json_array_append_new(rows, json_pack("[I,I,I,I,f,f]", (json_int_t)pts[k].t, (json_int_t)pts[k].requests,
							      (json_int_t)pts[k].errors_5xx, (json_int_t)pts[k].synthetic,
							      pts[k].p50_ms, pts[k].p99_ms));
		json_object_set_new(versions, dep->versions[i].version, rows);
	}
	free(pts);
	/* the replicas' health over the hour whatever since is (a handful of rows, from the events) */
	if ((error = store_deploy_health_history(db, dep->id, now - HAP_LOG_HISTORY_S, &health)) < 0) {
		json_decref(versions);
		deployment_free(dep);
		reply_store_error(r, error);
		return;
	}
	deployment_free(dep);
	j = json_pack("{s:i,s:I,s:o,s:o}", "bucket_s", HAP_LOG_BUCKET_S, "now", (json_int_t)now, "versions", versions,
		      "replicas", health);
	reply_json(r, 200, json_dumps(j, JSON_COMPACT));
	json_decref(j);
}

/* One deployment with its events, as GET answers. */
static int one(json_t **out, PGconn *db, int64_t id)
{
	struct deployment *d = NULL;
	int error;

	*out = NULL;
	if ((error = store_deployment_get(&d, db, id)) < 0)
		return error;
	*out = one_json(db, d);
	deployment_free(d);
	return FERRY_OK;
}

/*
 * Traffic per version from HAProxy's counters ("show stat"): requests and
 * 5xx answers since HAProxy started, and the mean response and total times
 * over its last 1,024 requests, summed (times weighted by requests) over the
 * version's servers (named vORD-rN). Counters, not rates: a client reads
 * twice and divides by at_ms's difference for requests/s and the error rate
 * of the interval. HAProxy keeps means, not percentiles: p99 is what the
 * load test and the canary's probe measured (their events).
 * {"at_ms", "versions": {VERSION: {requests, errors_5xx, rtime_ms,
 * ttime_ms}}}, or {} when HAProxy does not answer.
 */
static json_t *version_stats(const char *home, const struct deployment *d)
{
	json_t *st = NULL, *out = json_object(), *vs = json_object(), *s;
	size_t i, k;

	if (reconcile_haproxy_stats(home, &st) < 0) {
		json_decref(st);
		json_decref(vs);
		return out;
	}
	for (k = 0; k < d->nversions; k++) {
		char prefix[32];
		json_int_t req = 0, err = 0;
		double rt = 0, tt = 0;
		const char *ver = d->versions[k].version;

		snprintf(prefix, sizeof(prefix), "v%d-", d->versions[k].ord);
		json_array_foreach(st, i, s) {
			const char *fe = json_string_value(json_object_get(s, "frontend"));
			const char *sv = json_string_value(json_object_get(s, "server"));
			json_int_t n = json_integer_value(json_object_get(s, "requests"));
			if (fe == NULL || sv == NULL || strcmp(fe, d->name) != 0 || strncmp(sv, prefix, strlen(prefix)) != 0)
				continue;
			req += n;
			err += json_integer_value(json_object_get(s, "hrsp_5xx"));
			rt += (double)json_integer_value(json_object_get(s, "rtime_ms")) * (double)n;
			tt += (double)json_integer_value(json_object_get(s, "ttime_ms")) * (double)n;
		}
		json_object_set_new(vs, ver, json_pack("{s:I, s:I, s:f, s:f}", "requests", req, "errors_5xx", err,
							"rtime_ms", req ? rt / (double)req : 0.0, "ttime_ms",
							req ? tt / (double)req : 0.0));
	}
	json_object_set_new(out, "at_ms", json_integer(clock_wall_ms()));
	json_object_set_new(out, "versions", vs);
	json_decref(st);
	return out;
}

void api_deployment_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct deployment *dep = NULL;
	json_t *d = NULL, *hs = NULL, *mine = json_array(), *s;
	int error = store_deployment_get(&dep, db, q->id);
	size_t i;

	if (error == 0)
		d = one_json(db, dep);
	/* what HAProxy applies for it, beside what the database wants */
	if (error == 0 && a->home && reconcile_haproxy_read(a->home, &hs) == 0) {
		json_array_foreach(hs, i, s) {
			const char *fe = json_string_value(json_object_get(s, "frontend"));
			if (fe && strcmp(fe, dep->name) == 0)
				json_array_append(mine, s);
		}
	}
	if (d)
		json_object_set(d, "haproxy", mine);
	if (d && a->home)
		json_object_set_new(d, "stats", version_stats(a->home, dep));
	json_decref(mine);
	json_decref(hs);
	reply_list(r, error, d);
	json_decref(d);
	deployment_free(dep);
}

static const char *const actions[] = {"stop", "start", "promote", "rollback", "retire", NULL};

/*
 * retire VERSION: its traffic goes to the others first (refused when it
 * has all of it), then it retires (its replicas stop in the next round).
 */
static int retire_version(PGconn *db, int64_t dep, const char *version, const char *actor, json_t **after)
{
	json_t *want = json_pack("{s:i}", version, 0), *det = json_pack("{s:s}", "why", "retired by hand");
	struct deployment *d = NULL;
	const struct deploy_version *v;
	int error;

	if ((error = store_deployment_get(&d, db, dep)) < 0)
		goto out;
	if ((v = deployment_version(d, version)) == NULL || v->state != DEPLOY_V_SERVING) {
		ferry_error_set("retire: version %s does not serve in deployment %s", version, d->name);
		error = FERRY_EINVALID;
		goto out;
	}
	if (v->weight == 100) {
		ferry_error_set("retire: version %s takes all of deployment %s's traffic: give it to another version "
				"first (ferry deployments promote)", version, d->name);
		error = FERRY_ECONFLICT;
		goto out;
	}
	if (v->weight > 0 && (error = store_deploy_weights(db, dep, want, actor, "traffic", after)) < 0)
		goto out;
	error = store_deploy_version_retire(db, dep, version, actor, det);
out:
	deployment_free(d);
	json_decref(want), json_decref(det);
	return error;
}

/* The traffic field: {"VERSION": pct, …} with every value checked. */
static int check_traffic(struct reply *r, json_t *t)
{
	const char *k;
	json_t *v;
	int x;

	if (!json_is_object(t) || json_object_size(t) == 0) {
		reply_error(r, 400, "invalid_field", "traffic",
			    "field \"traffic\" must be an object of version → percentage, e.g. {\"0.0.2\": 20}", NULL);
		return -1;
	}
	json_object_foreach(t, k, v) {
		char *field = xasprintf("traffic.%s", k);
		if (!json_is_integer(v) || deploy_check_traffic(v, field, &x) < 0) {
			reply_error(r, 400, "invalid_field", "traffic",
				    json_is_integer(v) ? ferry_error_last() : "traffic: each value is an integer percentage 0-100",
				    NULL);
			free(field);
			return -1;
		}
		free(field);
	}
	return 0;
}

/* The replicas field: {"VERSION": n, …}, each 1–5. */
static int check_replicas(struct reply *r, json_t *t)
{
	const char *k;
	json_t *v;
	int x;

	if (!json_is_object(t) || json_object_size(t) == 0) {
		reply_error(r, 400, "invalid_field", "replicas",
			    "field \"replicas\" must be an object of version → replica count, e.g. {\"0.0.2\": 3}", NULL);
		return -1;
	}
	json_object_foreach(t, k, v)
		if (!json_is_integer(v) || deploy_check_replicas(v, "replicas", &x) < 0) {
			reply_error(r, 400, "invalid_field", "replicas",
				    json_is_integer(v) ? ferry_error_last() : "replicas: each value is an integer from 1 to 5",
				    NULL);
			return -1;
		}
	return 0;
}

void api_deployment_patch(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q), *traffic, *after = NULL, *d = NULL, *want = NULL;
	const char *action = NULL, *version = NULL;
	char *actor = NULL;
	int error = 0, as_secs = -1, extend_secs = -1, retire_secs = -1, k;

	if (body == NULL)
		return;
	traffic = json_object_get(body, "traffic");
	if (opt_string(&action, r, body, "action") < 0 || opt_string(&version, r, body, "version") < 0)
		goto out;
	if (action) {
		for (k = 0; actions[k] && strcmp(actions[k], action) != 0; k++)
			;
		if (actions[k] == NULL) {
			reply_not_one_of(r, "action", action, actions);
			goto out;
		}
	}
	if (traffic && check_traffic(r, traffic) < 0)
		goto out;
	if (json_object_get(body, "replicas") && check_replicas(r, json_object_get(body, "replicas")) < 0)
		goto out;
	if (json_object_get(body, "auto_stop") &&
	    deploy_check_auto_stop(json_object_get(body, "auto_stop"), "auto_stop", &as_secs) < 0) {
		reply_error(r, 400, "invalid_field", "auto_stop", ferry_error_last(), NULL);
		goto out;
	}
	if (json_object_get(body, "extend") &&
	    deploy_check_auto_stop(json_object_get(body, "extend"), "extend", &extend_secs) < 0) {
		reply_error(r, 400, "invalid_field", "extend", ferry_error_last(), NULL);
		goto out;
	}
	if (action && (strcmp(action, "promote") == 0 || strcmp(action, "retire") == 0) && version == NULL) {
		reply_error(r, 400, "missing_field", "version",
			    strcmp(action, "promote") == 0
				    ? "field \"version\" is required with action promote: the version that gets 100%"
				    : "field \"version\" is required with action retire: the version that retires",
			    NULL);
		goto out;
	}
	if (json_object_get(body, "retire_after") &&
	    deploy_check_retire_after(json_object_get(body, "retire_after"), "retire_after", &retire_secs) < 0) {
		reply_error(r, 400, "invalid_field", "retire_after", ferry_error_last(), NULL);
		goto out;
	}
	if (!traffic && !action && as_secs < 0 && extend_secs < 0 && retire_secs < 0 && !json_object_get(body, "replicas")) {
		reply_error(r, 400, "missing_field", "traffic",
			    "nothing to change: give traffic, replicas, auto_stop, extend, retire_after or action (stop, "
			    "start, promote, rollback, retire)",
			    NULL);
		goto out;
	}
	actor = actor_of(q);
	if (traffic)
		error = store_deploy_weights(db, q->id, traffic, actor, "traffic", &after);
	if (error == 0 && action && strcmp(action, "promote") == 0) {
		want = json_pack("{s:i}", version, 100);
		json_decref(after);
		/* the promoted version is production now: the alias moves with the weights (store_deploy.c) */
		error = store_deploy_weights(db, q->id, want, actor, "promote", &after);
	}
	if (error == 0 && action && strcmp(action, "rollback") == 0) {
		if ((error = store_deploy_last_weights(db, q->id, &want)) == 0) {
			json_decref(after);
			error = store_deploy_weights(db, q->id, want, actor, "rollback", &after);
		}
	}
	if (error == 0 && json_object_get(body, "replicas")) {
		const char *ver;
		json_t *n;
		json_object_foreach(json_object_get(body, "replicas"), ver, n) {
			int ports[DEPLOY_MAX_REPLICAS] = {0}, count = (int)json_integer_value(n);
			/* the new replicas' ports (at most count of them); the count itself is checked by the store */
			if (count >= 1 && count <= DEPLOY_MAX_REPLICAS && (error = replica_free_ports(db, ports, count)) < 0) {
				if (error != FERRY_EDB)
					error = FERRY_ECONFLICT; /* 409: the range is full, the message says so */
				break;
			}
			if ((error = store_deploy_set_replicas(db, q->id, ver, (int)json_integer_value(n), ports, actor)) < 0)
				break;
		}
	}
	if (error == 0 && action && strcmp(action, "retire") == 0) {
		json_decref(after);
		after = NULL;
		error = retire_version(db, q->id, version, actor, &after);
	}
	if (error == 0 && retire_secs >= 0)
		error = store_deploy_retire_after(db, q->id, retire_secs, actor);
	if (error == 0 && as_secs >= 0)
		error = store_deploy_auto_stop(db, q->id, as_secs, 0, actor);
	if (error == 0 && extend_secs >= 0) /* 0: "never", an extend without end */
		error = store_deploy_auto_stop(db, q->id, extend_secs, 1, actor);
	if (error == 0 && action && (strcmp(action, "stop") == 0 || strcmp(action, "start") == 0))
		error = store_deploy_set_state(db, q->id, strcmp(action, "stop") == 0 ? "stopped" : "running", actor);
	if (error == FERRY_EINVALID) {
		reply_error(r, 400, "invalid_field",
			    traffic ? "traffic" : json_object_get(body, "replicas") ? "replicas"
			    : action && strcmp(action, "rollback") == 0 ? "action" : "version",
			    ferry_error_last(), NULL);
		goto out;
	}
	if (error < 0) {
		reply_store_error(r, error);
		goto out;
	}
	/* applied before the answer; the leader's rounds repair it from the database otherwise */
	if (a->home && reconcile_request(db, a->home, actor, 0) < 0)
		flog_warn("deployment %lld: applying the change: %s", (long long)q->id, ferry_error_last());
	error = one(&d, db, q->id);
	reply_list(r, error, d);
out:
	free(actor);
	json_decref(after);
	json_decref(want);
	json_decref(d);
	json_decref(body);
}

void api_deployment_delete(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *actor = actor_of(q);
	int error;

	/* stopped first (HAProxy drops its frontend, its replicas are stopped), then forgotten */
	if ((error = store_deploy_set_state(db, q->id, "stopped", actor)) == 0 && a->home)
		reconcile_request(db, a->home, actor, 0);
	if (error == 0)
		error = store_deploy_delete(db, q->id);
	if (error == 0 && a->home)
		reconcile_request(db, a->home, actor, 0);
	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, xasprintf("{\"deleted\":%lld}", (long long)q->id));
	free(actor);
}

void api_deployment_predict(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct deployment *d = NULL;
	json_t *ans;
	char *path, *text, *resp = NULL;
	long st = 0;
	int error;

	(void)a;
	if (q->body == NULL || q->len == 0 || (ans = json_loadb(q->body, q->len, 0, NULL)) == NULL) {
		reply_error(r, 400, "invalid_body", NULL,
			    "the body must be an inference request (Open Inference Protocol v2 JSON)", NULL);
		return;
	}
	json_decref(ans);
	if ((error = store_deployment_get(&d, db, q->id)) < 0) {
		reply_store_error(r, error);
		return;
	}
	if (d->state != DEPLOY_RUNNING) {
		reply_error(r, 409, "conflict", NULL, "the deployment is stopped: start it first", NULL);
		deployment_free(d);
		return;
	}
	path = xasprintf("/v2/models/%s/infer", d->model);
	text = xstrndup(q->body, q->len);
	if (replica_http("POST", NULL, d->port, path, text, 10000, &st, &resp) < 0) {
		reply_error(r, 502, "bad_gateway", NULL, ferry_error_last(), NULL);
	} else {
		json_t *j = resp ? json_loads(resp, 0, NULL) : NULL;
		json_t *out = json_pack("{s:i, s:o}", "status", (int)st, "response", j ? j : json_string(resp ? resp : ""));
		reply_json(r, 200, json_dumps(out, JSON_COMPACT));
		json_decref(out);
	}
	free(path), free(text), free(resp);
	deployment_free(d);
}
