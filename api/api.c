/*
 * api — see api.h. A pool of libmicrohttpd epoll workers (one per core)
 * serves every connection: the body is gathered (up to 1 MiB, else 413),
 * the route is found in api_routes by method and path (one row, and one
 * handler, per method: GET, POST, PUT, PATCH, DELETE; a path known under
 * other methods is answered 405 with Allow), the token checked, and one of a
 * bounded pool of database connections used for the length of a store
 * call; a pooled connection is made when first needed and made again when
 * lost, so the API answers (503 for what needs the database) before the
 * database ever did. /readyz is bounded on the client's clock (a free slot,
 * a connection, SELECT 1: about 3 s in all) so a silent network cannot
 * hold it. The MHD workers never wait: a request that needs the database is
 * suspended and queued for one of the database workers (one per pooled
 * connection), which prepares the response and resumes it; a followed log
 * with nothing new suspends its connection ("parks" it) and a ticker thread
 * resumes it 100 ms later. So a slow query or fsync never holds up the
 * requests answered from memory, and a flood of reads runs on at most one
 * MHD worker per core, leaving CPU to the engine and PostgreSQL.
 * GET /runs/{id} of a finished run is answered from the run cache
 * (runcache.h) without a database connection. HEAD is answered wherever GET
 * is, with the GET reply (MHD leaves the body out). Every error is JSON with
 * a machine code, a message that says what to do, and the offending field
 * when there is one.
 */
#include "api/api.h"
#include "api/api_priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "store/db.h"
#include "exec/exec.h"
#include "schedule/gitsrc.h"
#include "engine/health.h"
#include "lib/metrics.h"
#include "api/runcache.h"
#include "lib/states.h"
#include "runs/runs.h"
#include "store/store.h"
#include "api/tokens.h"
#include "schedule/triggers.h"
#include "schedule/workflows.h"
#include "lib/envsecret.h"
#include "lib/util.h"

#define MAX_BODY (1024 * 1024)
#define POOL_WAIT_MS 10000 /* a request waits this long for a free database connection */
#define READY_MS 3000      /* /readyz answers within about this, database or not */


/* ---- connection pool ---- */

static void pool_drop(struct api *a, PGconn *c);

/*
 * The pool holds nconns slots; a slot's connection is made when a request
 * first needs it (so the API serves, and says the database is not there,
 * before it ever was), and made again when it was lost. A request waits up
 * to wait_ms for a free slot (FERRY_ERROR: busy), then up to connect_ms
 * (-1: db_connect's own bound) to connect it (FERRY_EDB). *out is put back
 * with api_pool_put, or dropped with pool_drop when it must not be used again.
 */
static int pool_get(PGconn **out, struct api *a, int64_t wait_ms, int64_t connect_ms)
{
	PGconn *c;
	struct timespec ts;
	int error;

	*out = NULL;
	pthread_mutex_lock(&a->mu);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(wait_ms / 1000);
	ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (a->free_top == 0) {
		if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&a->mu);
			ferry_error_set("no database connection free; retry shortly");
			return FERRY_ERROR;
		}
	}
	c = a->free_list[--a->free_top];
	pthread_mutex_unlock(&a->mu);
	if (c && PQstatus(c) == CONNECTION_OK) {
		*out = c;
		return FERRY_OK;
	}
	if (c)
		PQfinish(c);
	c = NULL;
	if ((error = db_connect_ex(&c, a->conninfo, connect_ms, 0)) < 0) {
		pool_drop(a, NULL);
		return error;
	}
	*out = c;
	return FERRY_OK;
}

/* A free, connected connection at once, or NULL: for work that may skip a turn (log streams). */
PGconn *api_pool_try_get(struct api *a)
{
	PGconn *c = NULL;
	int got = 0;

	pthread_mutex_lock(&a->mu);
	if (a->free_top > 0) {
		c = a->free_list[--a->free_top];
		got = 1;
	}
	pthread_mutex_unlock(&a->mu);
	if (got && (c == NULL || PQstatus(c) != CONNECTION_OK)) {
		api_pool_put(a, c);
		return NULL;
	}
	return c;
}

/* Gives a slot back (c may be NULL: an empty slot). */
void api_pool_put(struct api *a, PGconn *c)
{
	pthread_mutex_lock(&a->mu);
	a->free_list[a->free_top++] = c;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

/* Gives a slot back empty, closing c: a connection in an unknown state (a query that timed out). */
static void pool_drop(struct api *a, PGconn *c)
{
	if (c)
		PQfinish(c);
	api_pool_put(a, NULL);
}

/* A run id: digits only, positive. */
int api_parse_id(int64_t *out, const char *s)
{
	if (s == NULL || strspn(s, "0123456789") != strlen(s))
		return -1;
	return parse_int64(s, out) == 0 && *out > 0 ? 0 : -1;
}

static void h_metrics(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;

	(void)q;
	metrics_render(&buf, &len, &cap);
	if (a->cache) {
		struct runcache_stats st;
		runcache_stats(a->cache, &st);
		metrics_appendf(&buf, &len, &cap,
				"# HELP ferry_api_run_cache_hits_total GET /runs/{id} answered from the cache of finished runs.\n"
				"# TYPE ferry_api_run_cache_hits_total counter\nferry_api_run_cache_hits_total %llu\n"
				"# HELP ferry_api_run_cache_misses_total GET /runs/{id} that read the database.\n"
				"# TYPE ferry_api_run_cache_misses_total counter\nferry_api_run_cache_misses_total %llu\n"
				"# HELP ferry_api_run_cache_invalidations_total Finished runs dropped because they changed.\n"
				"# TYPE ferry_api_run_cache_invalidations_total counter\n"
				"ferry_api_run_cache_invalidations_total %llu\n"
				"# HELP ferry_api_run_cache_flushes_total Times the cache was emptied (listener connection lost).\n"
				"# TYPE ferry_api_run_cache_flushes_total counter\nferry_api_run_cache_flushes_total %llu\n"
				"# HELP ferry_api_run_cache_entries Finished runs in the cache.\n"
				"# TYPE ferry_api_run_cache_entries gauge\nferry_api_run_cache_entries %zu\n"
				"# HELP ferry_api_run_cache_bytes JSON bytes in the cache.\n"
				"# TYPE ferry_api_run_cache_bytes gauge\nferry_api_run_cache_bytes %zu\n"
				"# HELP ferry_api_run_cache_enabled 1 while the cache listens for changes and may serve.\n"
				"# TYPE ferry_api_run_cache_enabled gauge\nferry_api_run_cache_enabled %d\n",
				(unsigned long long)st.hits, (unsigned long long)st.misses,
				(unsigned long long)st.invalidations, (unsigned long long)st.flushes, st.entries,
				st.bytes, st.enabled);
	}
	{
		int open, max;
		api_stream_counts(a, &open, &max);
		metrics_appendf(&buf, &len, &cap,
				"# HELP ferry_api_streams_open Streams open now: run events and followed logs.\n"
				"# TYPE ferry_api_streams_open gauge\nferry_api_streams_open %d\n"
				"# HELP ferry_api_streams_max The most streams this daemon serves at once (FERRY_UI_STREAMS).\n"
				"# TYPE ferry_api_streams_max gauge\nferry_api_streams_max %d\n",
				open, max);
	}
	if (a->health)
		health_render(a->health, &buf, &len, &cap);
	warm_metrics(&buf, &len, &cap);
	if (db == NULL || store_metrics(&buf, &len, &cap, db) < 0)
		metrics_appendf(&buf, &len, &cap, "# database unavailable: %s\n", ferry_error_last());
	else
		api_deploy_metrics(db, &buf, &len, &cap);
	r->status = 200;
	r->body = buf;
	r->content_type = "text/plain; version=0.0.4";
}

/* ---- routing ---- */

/* GET /healthz: the process answers (nothing else is looked at). */
static int f_health(struct api *a, struct reply *r, struct req *q)
{
	(void)a, (void)q;
	reply_json(r, 200, xstrdup("{\"status\":\"ok\"}"));
	return 1;
}

static int f_openapi(struct api *a, struct reply *r, struct req *q)
{
	(void)a, (void)q;
	reply_json(r, 200, xstrdup(api_openapi_json));
	return 1;
}

/*
 * GET /api/v1/whoami: the bearer token's name and role, so a client (the
 * console) can say who acts and offer only what the role may do; the
 * routes check the role all the same. Answered in the fast phase, from the
 * token check alone; the handler is there for the table's rule that a
 * route with a token has one, and answers the same.
 */
static void whoami_reply(struct reply *r, struct req *q)
{
	json_t *o = json_pack("{s:s, s:s, s:b, s:b, s:b}", "name", q->token_name, "role", token_role_name(q->role),
			      "can_act", q->role >= ROLE_OPERATOR, "can_deploy", q->role >= ROLE_DEPLOYER,
			      "can_admin", q->role >= ROLE_ADMIN);

	reply_json(r, 200, json_dumps(o, JSON_COMPACT));
	json_decref(o);
}

static int f_whoami(struct api *a, struct reply *r, struct req *q)
{
	(void)a;
	whoami_reply(r, q);
	return 1;
}

static void h_whoami(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	(void)a, (void)db;
	whoami_reply(r, q);
}

/* GET /readyz, fast: 503 at once while the daemon is not ready itself (waiting for the database at start). */
static int f_ready(struct api *a, struct reply *r, struct req *q)
{
	char why[512];

	(void)q;
	if (a->health == NULL || health_ready(a->health, why, sizeof(why)))
		return 0;
	reply_error(r, 503, "not_ready", NULL, why, NULL);
	return 1;
}

/*
 * GET /readyz: the database answers SELECT 1, all within about READY_MS
 * whatever the network does (a free slot, a connection, the answer, each
 * bounded); a connection that did not answer is dropped, not pooled.
 */
static void h_ready(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	int64_t deadline = clock_mono_ms() + READY_MS;
	int error;

	(void)q;
	if (f_ready(a, r, q))
		return;
	if ((error = pool_get(&db, a, READY_MS / 3, READY_MS / 3)) < 0) {
		reply_error(r, 503, error == FERRY_EDB ? "database_unavailable" : "busy", NULL, ferry_error_last(), NULL);
		return;
	}
	if (db_ping(db, deadline - clock_mono_ms() > READY_MS / 3 ? deadline - clock_mono_ms() : READY_MS / 3) < 0) {
		reply_error(r, 503, "database_unavailable", NULL, ferry_error_last(), NULL);
		pool_drop(a, db);
		return;
	}
	api_pool_put(a, db);
	if (a->health && atomic_load(&a->health->leader) >= 0)
		reply_json(r, 200, xasprintf("{\"status\":\"ready\",\"leader\":%s}",
					     atomic_load(&a->health->leader) ? "true" : "false"));
	else
		reply_json(r, 200, xstrdup("{\"status\":\"ready\"}"));
}

#define PUBLIC ROUTE_PUBLIC
#define VIEWER ROLE_VIEWER
#define OPERATOR ROLE_OPERATOR
#define DEPLOYER ROLE_DEPLOYER
#define ADMIN ROLE_ADMIN

/*
 * Every route, with the least role that may call it: a viewer reads; an
 * operator runs workflows (submits, stops, retries, continues, deletes a
 * run, registers a workflow); a deployer changes what serves (model
 * aliases, deployments and their traffic, predictions through the API); an
 * admin changes what runs by itself and what jobs are given (schedules,
 * triggers, secrets, queues; anyone lists secrets' names, never a value,
 * and the queues with why each waiting step waits).
 * The OpenAPI document lists each route with its role as x-ferry-role
 * (tests/unit/test_api.c checks).
 */
const struct api_route api_routes[] = {
	{"GET", "/healthz", PUBLIC, 0, f_health, NULL, NULL, NULL},
	{"GET", "/readyz", PUBLIC, ROUTE_OWN_DB, f_ready, h_ready, NULL, NULL},
	{"GET", "/metrics", PUBLIC, ROUTE_DB_OPTIONAL, NULL, h_metrics, NULL, NULL},
	{"GET", "/api/v1/openapi.json", PUBLIC, 0, f_openapi, NULL, NULL, NULL},
	{"GET", "/api/v1/whoami", VIEWER, 0, f_whoami, h_whoami, NULL, NULL},
	{"GET", "/ui", PUBLIC, 0, api_ui_fast, NULL, NULL, NULL},
	{"GET", "/ui/", PUBLIC, 0, api_ui_fast, NULL, NULL, NULL},
	{"GET", "/ui/{file}", PUBLIC, 0, api_ui_fast, NULL, NULL, NULL},
	{"GET", "/api/v1/runs", VIEWER, 0, NULL, api_runs_list, "state workflow trigger exclude_trigger limit cursor", NULL},
	{"POST", "/api/v1/runs", OPERATOR, 0, NULL, api_runs_create, NULL,
	 "yaml workflow filename params workdir trigger no_cache repo ref path"},
	{"GET", "/api/v1/runs/stream", VIEWER, 0, NULL, api_runs_stream, NULL, NULL}, /* before /runs/{id} */
	{"GET", "/api/v1/runs/{id}", VIEWER, 0, api_run_cached, api_run_get, NULL, NULL},
	{"DELETE", "/api/v1/runs/{id}", OPERATOR, 0, NULL, api_run_delete, NULL, NULL},
	{"POST", "/api/v1/runs/{id}/stop", OPERATOR, 0, NULL, api_run_stop, NULL, NULL},
	{"POST", "/api/v1/runs/{id}/retry", OPERATOR, 0, NULL, api_run_retry, NULL, "from no_cache params"},
	{"GET", "/api/v1/runs/{id}/events", VIEWER, 0, NULL, api_run_events, "after", NULL},
	{"GET", "/api/v1/runs/{id}/stream", VIEWER, 0, NULL, api_run_stream, NULL, NULL},
	{"GET", "/api/v1/runs/{id}/dag.svg", VIEWER, 0, NULL, api_run_dag_svg, NULL, NULL},
	{"GET", "/api/v1/runs/{id}/timeline", VIEWER, 0, NULL, api_run_timeline, NULL, NULL},
	{"GET", "/api/v1/runs/{id}/steps/{step}", VIEWER, 0, NULL, api_step_get, NULL, NULL},
	{"GET", "/api/v1/runs/{id}/steps/{step}/logs", VIEWER, 0, NULL, api_step_logs, "attempt offset length follow", NULL},
	{"GET", "/api/v1/runs/{id}/steps/{step}/outputs/{file}", VIEWER, 0, NULL, api_step_output, "attempt", NULL},
	{"GET", "/api/v1/runs/{id}/steps/{step}/monitor", VIEWER, 0, NULL, api_step_monitor, "attempt", NULL},
	{"GET", "/api/v1/runs/{id}/steps/{step}/items", VIEWER, 0, NULL, api_step_items, "offset limit state", NULL},
	{"POST", "/api/v1/runs/{id}/steps/{step}/continue", OPERATOR, 0, NULL, api_step_continue, NULL, "data"},
	{"POST", "/api/v1/runs/{id}/steps/{step}/reject", OPERATOR, 0, NULL, api_step_reject, NULL, "reason"},
	{"GET", "/api/v1/workflows", VIEWER, 0, NULL, api_workflows_list, NULL, NULL},
	{"GET", "/api/v1/hosts", VIEWER, 0, NULL, api_hosts_list, NULL, NULL},
	{"POST", "/api/v1/workflows", OPERATOR, 0, NULL, api_workflow_register, NULL, "yaml filename workdir"},
	{"GET", "/api/v1/models", VIEWER, 0, NULL, api_models_list, NULL, NULL},
	{"GET", "/api/v1/models/{name}", VIEWER, 0, NULL, api_model_get, NULL, NULL},
	{"PATCH", "/api/v1/models/{name}", DEPLOYER, 0, NULL, api_model_patch, NULL, "description tags"},
	{"GET", "/api/v1/models/{name}/versions", VIEWER, 0, NULL, api_model_versions, "tag", NULL},
	{"POST", "/api/v1/models/{name}/versions", DEPLOYER, 0, NULL, api_model_register, NULL,
	 "path alias version metrics params description tags"},
	{"PATCH", "/api/v1/models/{name}/versions/{version}", DEPLOYER, 0, NULL, api_model_version_patch, NULL,
	 "description tags archived"},
	{"GET", "/api/v1/models/{name}/versions/{version}", VIEWER, 0, NULL, api_model_version, NULL, NULL},
	{"GET", "/api/v1/models/{name}/versions/{version}/artifact", VIEWER, 0, NULL, api_model_artifact, "path", NULL},
	{"PUT", "/api/v1/models/{name}/aliases/{alias}", DEPLOYER, 0, NULL, api_model_alias_put, NULL,
	 "version"},
	{"DELETE", "/api/v1/models/{name}/aliases/{alias}", DEPLOYER, 0, NULL, api_model_alias_delete, NULL, NULL},
	{"GET", "/api/v1/blobs/{sha256}", VIEWER, 0, NULL, api_blob_get, NULL, NULL},
	{"GET", "/api/v1/cache", VIEWER, 0, NULL, api_cache_get, "host", NULL},
	{"GET", "/api/v1/deployments", VIEWER, 0, NULL, api_deployments_list, NULL, NULL},
	{"GET", "/api/v1/deployments/{id}", VIEWER, 0, NULL, api_deployment_get, NULL, NULL},
	{"PATCH", "/api/v1/deployments/{id}", DEPLOYER, 0, NULL, api_deployment_patch, NULL,
	 "traffic replicas action version auto_stop extend retire_after"},
	{"DELETE", "/api/v1/deployments/{id}", DEPLOYER, 0, NULL, api_deployment_delete, NULL, NULL},
	{"GET", "/api/v1/deployments/{id}/traffic", VIEWER, 0, NULL, api_deployment_traffic, "since", NULL},
	{"GET", "/api/v1/deployments/{id}/logs", VIEWER, 0, NULL, api_deployment_logs, "version replica offset length follow", NULL},
	{"POST", "/api/v1/deployments/{id}/predict", DEPLOYER, 0, NULL, api_deployment_predict, NULL,
	 "id inputs outputs parameters"},
	{"POST", "/api/v1/hooks/git", PUBLIC, 0, NULL, api_hook_git, NULL, NULL},
	{"GET", "/api/v1/schedules", VIEWER, 0, NULL, api_schedules_list, NULL, NULL},
	{"POST", "/api/v1/schedules", ADMIN, 0, NULL, api_schedule_create, NULL,
	 "workflow name cron timezone gap overlap concurrency catchup max_catchup params paused"},
	{"GET", "/api/v1/schedules/{id}", VIEWER, 0, NULL, api_schedule_get, "limit before", NULL},
	{"PATCH", "/api/v1/schedules/{id}", ADMIN, 0, NULL, api_schedule_patch, NULL,
	 "name cron timezone gap overlap concurrency catchup max_catchup params paused"},
	{"DELETE", "/api/v1/schedules/{id}", ADMIN, 0, NULL, api_schedule_delete, NULL, NULL},
	{"GET", "/api/v1/triggers", VIEWER, 0, NULL, api_triggers_list, NULL, NULL},
	{"GET", "/api/v1/audit", VIEWER, 0, NULL, api_audit, "object object_id before limit", NULL},
	{"PATCH", "/api/v1/triggers/{id}", ADMIN, 0, NULL, api_trigger_patch, NULL, "paused"},
	{"GET", "/api/v1/secrets", VIEWER, 0, NULL, api_secrets_list, NULL, NULL},
	{"PUT", "/api/v1/secrets/{name}", ADMIN, 0, NULL, api_secret_put, NULL, "value"},
	{"DELETE", "/api/v1/secrets/{name}", ADMIN, 0, NULL, api_secret_delete, NULL, NULL},
	{"GET", "/api/v1/queues", VIEWER, 0, NULL, api_queues_list, NULL, NULL},
	{"POST", "/api/v1/queues", ADMIN, 0, NULL, api_queue_create, NULL,
	 "name priority max_running max_gpus max_cpus description"},
	{"GET", "/api/v1/queues/{name}", VIEWER, 0, NULL, api_queue_get, "limit", NULL},
	{"PATCH", "/api/v1/queues/{name}", ADMIN, 0, NULL, api_queue_patch, NULL,
	 "priority max_running max_gpus max_cpus description"},
	{"DELETE", "/api/v1/queues/{name}", ADMIN, 0, NULL, api_queue_delete, NULL, NULL},
	{NULL, NULL, 0, 0, NULL, NULL, NULL, NULL},
};

#undef PUBLIC
#undef VIEWER
#undef OPERATOR
#undef DEPLOYER
#undef ADMIN

/*
 * Matches url against pattern; up to three {x} segments are copied into
 * caps[0..2] (each < 128 bytes). 1 on a match.
 */
static int route_match(const char *pattern, const char *url, char caps[3][128])
{
	int ncap = 0;

	while (*pattern && *url) {
		if (*pattern == '{') {
			size_t n = strcspn(url, "/");
			if (n == 0 || n >= 128 || ncap >= 3)
				return 0;
			memcpy(caps[ncap], url, n);
			caps[ncap++][n] = '\0';
			url += n;
			pattern = strchr(pattern, '}') + 1;
			continue;
		}
		if (*pattern++ != *url++)
			return 0;
	}
	return *pattern == '\0' && *url == '\0';
}

/* Appends method to the Allow list in out (once; HEAD right after GET). */
static void allow_add(char *out, size_t n, const char *method)
{
	size_t len = strlen(out), m = strlen(method);

	for (const char *p = out; (p = strstr(p, method)) != NULL; p += m)
		if ((p == out || p[-1] == ' ') && (p[m] == '\0' || p[m] == ','))
			return; /* listed already */
	snprintf(out + len, n - len, "%s%s%s", len ? ", " : "", method, strcmp(method, "GET") == 0 ? ", HEAD" : "");
}

const struct api_route *api_route_find(const struct api_route *table, const char *method, const char *url,
				       char caps[3][128], char *allow, size_t allow_len)
{
	const char *want = strcmp(method, "HEAD") == 0 ? "GET" : method;
	char scratch[3][128];

	allow[0] = '\0';
	for (const struct api_route *rt = table; rt->pattern; rt++) {
		if (!route_match(rt->pattern, url, scratch))
			continue;
		if (strcmp(rt->method, want) == 0) {
			memcpy(caps, scratch, sizeof(scratch));
			return rt;
		}
		allow_add(allow, allow_len, rt->method);
	}
	return NULL;
}

/* MHD iterator: leaves in *cls the name of the first query argument that is not UTF-8. */
static enum MHD_Result find_bad_utf8(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	const char **bad = cls;

	(void)kind;
	if (!utf8_valid(key, strlen(key)) || (value && !utf8_valid(value, strlen(value)))) {
		*bad = utf8_valid(key, strlen(key)) ? key : "query";
		return MHD_NO;
	}
	return MHD_YES;
}


/*
 * The fast phase of a request, on the MHD worker: routing by method and
 * path, token, ids, limits, UTF-8, and the route's fast phase (health, the
 * OpenAPI document, a cached run). Returns 1 when r is the answer, 0 when q
 * is set up for its handler on a database worker (db_phase).
 */
static int dispatch(struct api *a, struct reply *r, struct MHD_Connection *conn, const char *url,
		    const char *method, struct req *q)
{
	const struct api_route *rt;
	char (*caps)[128] = q->caps;

	rt = api_route_find(api_routes, method, url, caps, r->allow_buf, sizeof(r->allow_buf));
	if (rt == NULL && r->allow_buf[0] == '\0') {
		reply_error(r, 404, "not_found", NULL, "no such route; see GET /api/v1/openapi.json", NULL);
		return 1;
	}
	if (rt == NULL) {
		char msg[160];
		snprintf(msg, sizeof(msg), "method %.32s not allowed here; allowed: %s", method, r->allow_buf);
		reply_error(r, 405, "method_not_allowed", NULL, msg, NULL);
		r->allow = r->allow_buf;
		return 1;
	}
	q->conn = conn;
	q->rt = rt;
	if (a->trace_fd >= 0 && q->url == NULL)
		q->url = xstrdup(url);
	q->head = strcmp(method, "HEAD") == 0;
	if (rt->handler == NULL)
		return rt->fast(a, r, q); /* answered from memory alone, before any check (health) */
	if (rt->role != ROUTE_PUBLIC &&
	    !tokens_check(a->tokens, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"), &q->role,
			  q->token_name, &q->own_token)) {
		reply_error(r, 401, "unauthorized", NULL,
			    "missing, wrong or revoked bearer token (send Authorization: Bearer TOKEN; the token is "
			    "FERRY_API_TOKEN or $FERRY_HOME/api-token, or one made by ferryd token create)", NULL);
		return 1;
	}
	if (rt->role != ROUTE_PUBLIC && (int)q->role < rt->role) {
		char msg[200];
		snprintf(msg, sizeof(msg), "token \"%s\" has role %s; %s %s needs a token with role %s or above",
			 q->token_name, token_role_name(q->role), rt->method, rt->pattern,
			 token_role_name((enum token_role)rt->role));
		reply_error(r, 403, "forbidden", NULL, msg, NULL);
		return 1;
	}
	if (strstr(rt->pattern, "{id}") && api_parse_id(&q->id, caps[0]) < 0) {
		reply_error(r, 404, "not_found", "id", "run ids are positive integers", NULL);
		return 1;
	}
	if (q->too_big) {
		reply_error(r, 413, "too_large", NULL, "request body over 1 MiB", NULL);
		return 1;
	}
	{
		const char *bad = NULL;
		if (!utf8_valid(url, strlen(url)))
			bad = "path";
		else
			MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, find_bad_utf8, &bad);
		if (bad == NULL) {
			const char *k = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
			if (k && !utf8_valid(k, strlen(k)))
				bad = "Idempotency-Key";
		}
		if (bad) {
			char msg[160];
			snprintf(msg, sizeof(msg), "%s is not valid UTF-8", bad);
			reply_error(r, 400, "invalid_field", bad, msg, NULL);
			return 1;
		}
	}
	if (rt->role != ROUTE_PUBLIC && query_check(r, q) < 0)
		return 1;
	return rt->fast ? rt->fast(a, r, q) : 0;
}

/*
 * The database phase, on a database worker: the handler of q's route with
 * one pooled connection (or none, as its flags say); r holds the answer.
 */
static void db_phase(struct api *a, struct reply *r, struct req *q)
{
	const struct api_route *rt = q->rt;
	PGconn *db = NULL;
	int optional = (rt->flags & ROUTE_DB_OPTIONAL) != 0, error;

	/* what can answer without the database does not wait long for it (a scrape of /metrics) */
	if (!(rt->flags & ROUTE_OWN_DB) &&
	    (error = pool_get(&db, a, optional ? READY_MS / 3 : POOL_WAIT_MS, optional ? READY_MS / 3 : -1)) < 0 &&
	    !optional) {
		reply_error(r, 503, error == FERRY_EDB ? "database_unavailable" : "busy", NULL, ferry_error_last(), NULL);
		return;
	}
	rt->handler(a, r, db, q);
	if (db)
		api_pool_put(a, db);
}

/* The response for a reply built by a handler (r->body or r->resp is taken over). */
static struct MHD_Response *reply_response(struct reply *r)
{
	struct MHD_Response *resp;

	if (r->resp) {
		resp = r->resp;
		r->resp = NULL;
		return resp;
	}
	if (r->body == NULL)
		reply_error(r, 500, "internal", NULL, "no reply", NULL);
	resp = MHD_create_response_from_buffer(strlen(r->body), r->body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "application/json");
	if (r->allow)
		MHD_add_response_header(resp, "Allow", r->allow);
	if (r->replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	return resp;
}

/*
 * Hands q to the database workers: the connection is suspended until a
 * worker has its response ready and resumes it. 0 when the API is stopping.
 */
static int db_enqueue(struct api *a, struct req *q)
{
	pthread_mutex_lock(&a->q_mu);
	if (a->q_closed) {
		pthread_mutex_unlock(&a->q_mu);
		return 0;
	}
	MHD_suspend_connection(q->conn);
	q->next = NULL;
	if (a->q_tail)
		a->q_tail->next = q;
	else
		a->q_head = q;
	a->q_tail = q;
	pthread_cond_signal(&a->q_cv);
	pthread_mutex_unlock(&a->q_mu);
	return 1;
}

/* A database worker: serves queued requests until api_stop closes the queue and it is empty. */
static void *db_worker_main(void *arg)
{
	struct api *a = arg;

	for (;;) {
		struct reply r = {0};
		struct req *q;

		pthread_mutex_lock(&a->q_mu);
		while (a->q_head == NULL && !a->q_closed)
			pthread_cond_wait(&a->q_cv, &a->q_mu);
		q = a->q_head;
		if (q == NULL) {
			pthread_mutex_unlock(&a->q_mu);
			return NULL;
		}
		a->q_head = q->next;
		if (a->q_head == NULL)
			a->q_tail = NULL;
		pthread_mutex_unlock(&a->q_mu);

		db_phase(a, &r, q);
		api_trace(a, q, q->rt->method, q->url, &r);
		q->resp = reply_response(&r);
		q->status = r.status;
		MHD_resume_connection(q->conn); /* MHD calls on_request again, which queues q->resp */
	}
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *data_size, void **con_cls)
{
	struct api *a = cls;
	struct req *q = *con_cls;
	struct reply r = {0};
	struct MHD_Response *resp;
	enum MHD_Result ret;

	(void)version;
	if (q == NULL) {
		/* the headers are in: the connection no longer counts as waiting for them (api_conns.h) */
		api_conns_headers_in(&a->conns, conn);
		q = xcalloc(1, sizeof(*q));
		q->started_us = clock_mono_us();
		*con_cls = q;
		return MHD_YES;
	}
	if (*data_size > 0) {
		if (!q->too_big && q->len + *data_size <= MAX_BODY) {
			q->body = xrealloc(q->body, q->len + *data_size + 1);
			memcpy(q->body + q->len, data, *data_size);
			q->len += *data_size;
			q->body[q->len] = '\0';
		} else {
			q->too_big = 1;
		}
		*data_size = 0;
		return MHD_YES;
	}
	if (q->resp) {
		/* back from a database worker */
		resp = q->resp;
		q->resp = NULL;
		r.status = q->status;
	} else {
		if (dispatch(a, &r, conn, url, method, q) == 0) {
			if (db_enqueue(a, q))
				return MHD_YES;
			reply_error(&r, 503, "shutting_down", NULL,
				    "ferryd is shutting down; retry against another replica or later", NULL);
		}
		api_trace(a, q, method, url, &r);
		resp = reply_response(&r);
	}
	ret = MHD_queue_response(conn, r.status, resp);
	MHD_destroy_response(resp);
	metrics_add(M_API_REQUESTS, 1);
	metrics_observe(H_API_REQUEST, (double)(clock_mono_us() - q->started_us) / 1e6);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct api *a = cls;
	struct req *q = *con_cls;

	(void)toe;
	/* keep-alive: it waits for the next request's headers, bounded again */
	api_conns_request_done(&a->conns, conn);
	if (q) {
		if (q->resp)
			MHD_destroy_response(q->resp);
		if (q->body) /* a body may hold a secret's value (PUT /secrets/{name}) */
			explicit_bzero(q->body, q->len);
		free(q->body);
		free(q->url);
		free(q);
		*con_cls = NULL;
	}
}

static int parse_listen(struct sockaddr_storage *ss, const char *listen)
{
	char host[128];
	const char *colon;
	int64_t port;

	memset(ss, 0, sizeof(*ss));
	if (listen[0] == '[') {
		const char *end = strchr(listen, ']');
		if (end == NULL || end[1] != ':' || (size_t)(end - listen - 1) >= sizeof(host))
			goto bad;
		memcpy(host, listen + 1, (size_t)(end - listen - 1));
		host[end - listen - 1] = '\0';
		colon = end + 1;
	} else {
		colon = strrchr(listen, ':');
		if (colon == NULL || (size_t)(colon - listen) >= sizeof(host))
			goto bad;
		memcpy(host, listen, (size_t)(colon - listen));
		host[colon - listen] = '\0';
	}
	if (parse_int64(colon + 1, &port) < 0 || port < 0 || port > 65535)
		goto bad;
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
		return AF_INET6;
	}
bad:
	ferry_error_set("FERRY_LISTEN \"%s\": expected IP:PORT such as 127.0.0.1:8080 or [::1]:8080", listen);
	return -1;
}

/* The URL of the address mhd listens on (the port the kernel chose for port 0). */
static int bound_url(char *out, size_t n, struct MHD_Daemon *mhd)
{
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_LISTEN_FD);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[INET6_ADDRSTRLEN];

	if (di == NULL || getsockname(di->listen_fd, (struct sockaddr *)&ss, &len) < 0) {
		ferry_error_set("cannot read the address the API listens on: %s", di ? strerror(errno) : "no socket");
		return FERRY_ERROR;
	}
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr))
			s6->sin6_addr = in6addr_loopback;
		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		snprintf(out, n, "http://[%s]:%u", host, (unsigned)ntohs(s6->sin6_port));
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		if (s4->sin_addr.s_addr == htonl(INADDR_ANY))
			s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
		snprintf(out, n, "http://%s:%u", host, (unsigned)ntohs(s4->sin_port));
	}
	return FERRY_OK;
}

const char *api_url(const struct api *a)
{
	return a->url;
}

/* 0, or FERRY_ERROR naming the first row of table that declares no role. */
int api_routes_check(const struct api_route *table)
{
	for (const struct api_route *rt = table; rt->pattern; rt++)
		if (rt->role != ROUTE_PUBLIC && (rt->role < ROLE_VIEWER || rt->role > ROLE_ADMIN)) {
			ferry_error_set("route %s %s declares no role (ROUTE_PUBLIC, or the least token role "
					"that may call it)", rt->method, rt->pattern);
			return FERRY_ERROR;
		}
	return FERRY_OK;
}

int api_start(struct api **out, const struct api_opts *o)
{
	struct api *a;

	if (api_routes_check(api_routes) < 0)
		return FERRY_ERROR;
	a = xcalloc(1, sizeof(*a));
	struct sockaddr_storage ss;
	/*
	 * A few epoll workers serve every connection; nothing in a request waits
	 * long (a followed log parks its connection instead), and a flood of
	 * reads does not take the CPUs from the engine and PostgreSQL.
	 */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
	unsigned workers;
	long ncpu;
	int family, error;

	*out = NULL;
	a->wake[0] = a->wake[1] = -1;
	api_trace_open(a);
	{
		/* FERRY_API_HEADER_TIMEOUT_MS: how long a connection may take to send its request's headers */
		int64_t ms = 10000;
		const char *v = getenv("FERRY_API_HEADER_TIMEOUT_MS");
		if (v && (parse_int64(v, &ms) < 0 || ms < 100 || ms > 600000)) {
			ferry_error_set("FERRY_API_HEADER_TIMEOUT_MS must be a number of milliseconds from 100 to 600000");
			free(a);
			return FERRY_EINVALID;
		}
		api_conns_init(&a->conns, ms, 30000);
	}
	pthread_mutex_init(&a->park_mu, NULL);
	pthread_mutex_init(&a->q_mu, NULL);
	pthread_cond_init(&a->q_cv, NULL);
	if ((family = parse_listen(&ss, o->listen)) < 0)
		goto fail;
	if (family == AF_INET6)
		flags |= MHD_USE_IPv6;
	a->conninfo = xstrdup(o->conninfo);
	/* resolved once: run directories are removed below it whatever the working directory */
	a->home = o->home ? realpath(o->home, NULL) : NULL;
	if (o->home && a->home == NULL)
		a->home = xstrdup(o->home);
	if (tokens_new(&a->tokens, o->token, o->conninfo) < 0)
		goto fail;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->nconns = o->db_conns > 0 ? o->db_conns : 4;
	/* empty slots: each is connected when a request first needs it */
	a->free_list = xcalloc((size_t)a->nconns, sizeof(PGconn *));
	a->free_top = a->nconns;
	a->health = o->health;
	if (o->cache_entries > 0 && o->cache_bytes > 0) {
		runcache_new(&a->cache, o->cache_entries, o->cache_bytes);
		if (runcache_listen_start(a->cache, o->conninfo) < 0)
			goto fail;
	}
	if (pipe2(a->wake, O_CLOEXEC) < 0) {
		ferry_error_set("pipe: %s", strerror(errno));
		goto fail;
	}
	if (api_stream_start(a) < 0)
		goto fail;
	if ((error = pthread_create(&a->ticker, NULL, api_logs_ticker, a)) != 0) {
		ferry_error_set("cannot start a thread: %s", strerror(error));
		goto fail;
	}
	a->ticker_started = 1;
	/* one database worker per pooled connection: none ever waits for one */
	a->db_workers = xcalloc((size_t)a->nconns, sizeof(pthread_t));
	for (; a->ndb_workers < a->nconns; a->ndb_workers++)
		if ((error = pthread_create(&a->db_workers[a->ndb_workers], NULL, db_worker_main, a)) != 0) {
			ferry_error_set("cannot start a thread: %s", strerror(error));
			goto fail;
		}
	/*
	 * The MHD workers only parse, route, send and answer from memory, and
	 * never wait: one per two cores is plenty (one serves ~45k cached
	 * reads/s here) and leaves the other cores to the engine, PostgreSQL
	 * and the jobs. On 2 cores one worker kept GET p99 at 6-7 ms beside a
	 * pipeline load where two gave 8-11 ms (make bench).
	 */
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	workers = o->workers > 0 ? (unsigned)o->workers : (unsigned)(ncpu < 4 ? 1 : ncpu / 2 > 8 ? 8 : ncpu / 2);
	a->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, a,
				  MHD_OPTION_THREAD_POOL_SIZE, workers,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)512,
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)256,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
				  MHD_OPTION_NOTIFY_CONNECTION, api_conns_notify, &a->conns,
				  MHD_OPTION_END);
	if (a->mhd == NULL) {
		ferry_error_set("cannot listen on %s: %s", o->listen, strerror(errno));
		goto fail;
	}
	if (bound_url(a->url, sizeof(a->url), a->mhd) < 0)
		goto fail;
	*out = a;
	return FERRY_OK;
fail:
	api_stop(a);
	return FERRY_ERROR;
}

void api_stop(struct api *a)
{
	if (a == NULL)
		return;
	/* no connection may stay suspended into MHD_stop_daemon: stop parking, resume them all */
	pthread_mutex_lock(&a->park_mu);
	a->stopping = 1;
	pthread_mutex_unlock(&a->park_mu);
	if (a->ticker_started) {
		(void)!write(a->wake[1], "s", 1);
		pthread_join(a->ticker, NULL);
	}
	api_logs_unpark_all(a);
	api_stream_stop(a); /* the run streams end, their connections resumed */
	/* the database workers answer what is queued, resume those connections, and end */
	pthread_mutex_lock(&a->q_mu);
	a->q_closed = 1;
	pthread_cond_broadcast(&a->q_cv);
	pthread_mutex_unlock(&a->q_mu);
	for (int i = 0; i < a->ndb_workers; i++)
		pthread_join(a->db_workers[i], NULL);
	free(a->db_workers);
	if (a->mhd)
		MHD_stop_daemon(a->mhd);
	api_stream_free(a);
	pthread_mutex_destroy(&a->q_mu);
	pthread_cond_destroy(&a->q_cv);
	if (a->wake[0] >= 0)
		close(a->wake[0]);
	if (a->wake[1] >= 0)
		close(a->wake[1]);
	free(a->parked);
	pthread_mutex_destroy(&a->park_mu);
	api_conns_dispose(&a->conns); /* MHD has stopped: every connection was closed and freed */
	runcache_free(a->cache);
	/* every slot is back: the workers and MHD have stopped */
	for (int i = 0; a->free_list && i < a->free_top; i++)
		if (a->free_list[i])
			PQfinish(a->free_list[i]);
	free(a->free_list);
	tokens_free(a->tokens);
	free(a->conninfo);
	free(a->home);
	if (a->nconns) {
		pthread_mutex_destroy(&a->mu);
		pthread_cond_destroy(&a->cv);
	}
	free(a);
}

int api_token_load(char **out, const char *home)
{
	const char *env = envsecret_get("FERRY_API_TOKEN");
	char *path = NULL, *buf = NULL, *tmp = NULL;
	unsigned char raw[24];
	char hex[49];
	int fd = -1, error = FERRY_ERROR;

	*out = NULL;
	if (env && *env) {
		/* it travels in an Authorization header: a blank or control character could never match */
		for (const unsigned char *p = (const unsigned char *)env; *p; p++)
			if (*p <= ' ' || *p == 0x7f) {
				ferry_error_set("FERRY_API_TOKEN contains a blank or control character; use printable "
						"characters only (or unset it to have one generated into %s/api-token)", home);
				return FERRY_EINVALID;
			}
		*out = xstrdup(env);
		return FERRY_OK;
	}
	path = xasprintf("%s/api-token", home);
	if (file_read(&buf, NULL, path) == FERRY_OK) {
		buf[strcspn(buf, " \t\r\n")] = '\0';
		if (strlen(buf) >= 16) {
			*out = buf;
			buf = NULL;
			error = FERRY_OK;
			goto out;
		}
	}
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		ferry_error_set("getrandom: %s", strerror(errno));
		goto out;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	tmp = xasprintf("%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, hex, 48) != 48 || write(fd, "\n", 1) != 1 || rename(tmp, path) < 0) {
		ferry_error_set("cannot write %s: %s", path, strerror(errno));
		goto out;
	}
	*out = xstrdup(hex);
	error = FERRY_OK;
out:
	if (fd >= 0)
		close(fd);
	free(path), free(buf), free(tmp);
	return error;
}
