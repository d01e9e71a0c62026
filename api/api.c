/*
 * api — see api.h. Each request is handled on one of libmicrohttpd's pool
 * threads: the body is gathered (up to 1 MiB, else 413), the route is
 * matched, the token checked, and a pooled database connection used for the
 * length of one store call. Every error is JSON with a machine code, a
 * message that says what to do, and the offending field when there is one.
 */
#include "api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db.h"
#include "store.h"
#include "util.h"

#define MAX_BODY (1024 * 1024)

struct api {
	struct MHD_Daemon *mhd;
	char *token;
	char *conninfo;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	PGconn **conns;
	int nconns, free_top;
	PGconn **free_list;
};

struct req {
	char *body;
	size_t len;
	int too_big;
};

struct reply {
	unsigned status;
	char *body; /* JSON text, owned */
	const char *allow;
};

/* ---- connection pool ---- */

static PGconn *pool_get(struct api *a)
{
	PGconn *c;
	struct timespec ts;

	pthread_mutex_lock(&a->mu);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	while (a->free_top == 0) {
		if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&a->mu);
			return NULL;
		}
	}
	c = a->free_list[--a->free_top];
	pthread_mutex_unlock(&a->mu);
	if (PQstatus(c) != CONNECTION_OK) {
		PQreset(c);
		if (PQstatus(c) == CONNECTION_OK) {
			PGresult *r = PQexec(c, "SET TIME ZONE 'UTC'");
			PQclear(r);
		}
	}
	return c;
}

static void pool_put(struct api *a, PGconn *c)
{
	pthread_mutex_lock(&a->mu);
	a->free_list[a->free_top++] = c;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

/* ---- replies ---- */

static void reply_json(struct reply *r, unsigned status, char *body)
{
	r->status = status;
	r->body = body;
}

static void reply_error(struct reply *r, unsigned status, const char *code, const char *field,
			const char *message, const cfg_errors *details)
{
	json_t *err = json_pack("{s:s, s:s}", "code", code, "message", message), *root;

	if (field)
		json_object_set_new(err, "field", json_string(field));
	if (details && details->len > 0) {
		json_t *arr = json_array();
		for (size_t i = 0; i < details->len; i++)
			json_array_append_new(arr, json_string(details->items[i]));
		json_object_set_new(err, "details", arr);
	}
	root = json_pack("{s:o}", "error", err);
	r->status = status;
	r->body = json_dumps(root, JSON_COMPACT);
	json_decref(root);
}

/* Maps a store error onto a reply. */
static void reply_store_error(struct reply *r, int error)
{
	switch (error) {
	case FERRY_ENOTFOUND:
		reply_error(r, 404, "not_found", NULL, ferry_error_last(), NULL);
		break;
	case FERRY_ECONFLICT:
		reply_error(r, 409, "conflict", NULL, ferry_error_last(), NULL);
		break;
	case FERRY_EINVALID:
		reply_error(r, 400, "invalid", NULL, ferry_error_last(), NULL);
		break;
	case FERRY_EDB:
		reply_error(r, 503, "database_unavailable", NULL, ferry_error_last(), NULL);
		break;
	default:
		reply_error(r, 500, "internal", NULL, ferry_error_last(), NULL);
	}
}

/* ---- helpers ---- */

static int token_ok(const struct api *a, const char *header)
{
	const char *given;
	size_t n, m;
	unsigned char diff = 0;

	if (header == NULL || strncmp(header, "Bearer ", 7) != 0)
		return 0;
	given = header + 7;
	n = strlen(given);
	m = strlen(a->token);
	diff = (unsigned char)(n != m);
	for (size_t i = 0; i < m; i++)
		diff |= (unsigned char)(a->token[i] ^ (i < n ? given[i] : 0));
	return diff == 0;
}

/* A printable actor name from X-Ferry-Actor, or "api". */
static char *actor_of(struct MHD_Connection *conn)
{
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Ferry-Actor");
	size_t n;

	if (h == NULL || *h == '\0')
		return xstrdup("api");
	n = strnlen(h, 64);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)h[i] < 0x20 || h[i] == 0x7f)
			return xstrdup("api");
	return xstrndup(h, n);
}

/* Parses the request body as a JSON object, or replies 400. */
static json_t *body_object(struct reply *r, const struct req *q)
{
	json_error_t jerr;
	json_t *body;

	if (q->len == 0)
		return json_object();
	body = json_loadb(q->body, q->len, 0, &jerr);
	if (body == NULL) {
		char msg[300];
		snprintf(msg, sizeof(msg), "malformed JSON at line %d column %d (byte %d): %s",
			 jerr.line, jerr.column, jerr.position, jerr.text);
		reply_error(r, 400, "malformed_json", NULL, msg, NULL);
		return NULL;
	}
	if (!json_is_object(body)) {
		json_decref(body);
		reply_error(r, 400, "invalid", NULL, "the request body must be a JSON object", NULL);
		return NULL;
	}
	return body;
}

/* Fetches an optional string field; replies 400 naming it when mistyped. */
static int opt_string(const char **out, struct reply *r, json_t *body, const char *field)
{
	json_t *v = json_object_get(body, field);
	char msg[160];

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_string(v)) {
		snprintf(msg, sizeof(msg), "field \"%s\" must be a string", field);
		reply_error(r, 400, "invalid_field", field, msg, NULL);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

static int parse_id(int64_t *out, const char *s)
{
	return parse_int64(s, out) == 0 && *out > 0 ? 0 : -1;
}

/* ---- handlers ---- */

static void run_reply(struct reply *r, PGconn *db, int64_t id, unsigned status)
{
	char *json = NULL;
	int error = store_run_json(&json, db, id);

	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, status, json);
}

static void h_runs_create(struct reply *r, PGconn *db, struct MHD_Connection *conn, const struct req *q)
{
	struct store_run_new rn;
	cfg_errors errs = {0};
	json_t *body = body_object(r, q), *params;
	const char *trigger = NULL;
	char *actor = NULL;
	int64_t id;
	int error;

	if (body == NULL)
		return;
	memset(&rn, 0, sizeof(rn));
	if (opt_string(&rn.yaml, r, body, "yaml") < 0 || opt_string(&rn.workflow, r, body, "workflow") < 0 ||
	    opt_string(&rn.filename, r, body, "filename") < 0 || opt_string(&rn.workdir, r, body, "workdir") < 0 ||
	    opt_string(&trigger, r, body, "trigger") < 0)
		goto out;
	if ((rn.yaml == NULL) == (rn.workflow == NULL)) {
		reply_error(r, 400, "invalid_field", rn.yaml ? "workflow" : "yaml",
			    "give exactly one of \"yaml\" (the workflow text) or \"workflow\" (a registered name)", NULL);
		goto out;
	}
	params = json_object_get(body, "params");
	if (params && !json_is_null(params) && !json_is_object(params)) {
		reply_error(r, 400, "invalid_field", "params", "field \"params\" must be an object of name: value", NULL);
		goto out;
	}
	if (rn.workdir && (rn.workdir[0] != '/' || strstr(rn.workdir, "/../") || access(rn.workdir, X_OK) < 0)) {
		reply_error(r, 400, "invalid_field", "workdir", "field \"workdir\" must be an existing absolute directory", NULL);
		goto out;
	}
	if (trigger && strcmp(trigger, "api") != 0 && strcmp(trigger, "cli") != 0) {
		reply_error(r, 400, "invalid_field", "trigger", "field \"trigger\" must be \"api\" or \"cli\"", NULL);
		goto out;
	}
	rn.yaml_len = rn.yaml ? json_string_length(json_object_get(body, "yaml")) : 0;
	rn.params = params && json_is_object(params) ? params : NULL;
	rn.trigger = trigger ? trigger : "api";
	actor = actor_of(conn);
	rn.actor = actor;
	if (rn.filename == NULL)
		rn.filename = "<inline>";
	error = store_run_create(&id, db, &rn, &errs);
	if (error == FERRY_EINVALID && errs.len > 0)
		reply_error(r, 400, "invalid_workflow", "yaml", ferry_error_last(), &errs);
	else if (error == FERRY_EINVALID)
		reply_error(r, 400, "invalid_field", "params", ferry_error_last(), NULL);
	else if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 201);
out:
	cfg_errors_dispose(&errs);
	free(actor);
	json_decref(body);
}

static void h_runs_list(struct reply *r, PGconn *db, struct MHD_Connection *conn)
{
	const char *state = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "state");
	const char *wf = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "workflow");
	const char *trig = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "trigger");
	const char *lim = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
	const char *cur = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cursor");
	int64_t limit = 50, before = 0;
	char *json = NULL;
	int error;

	if (lim && (parse_int64(lim, &limit) < 0 || limit < 1)) {
		reply_error(r, 400, "invalid_field", "limit", "limit must be a positive integer", NULL);
		return;
	}
	if (limit > 500)
		limit = 500;
	if (cur && parse_id(&before, cur) < 0) {
		reply_error(r, 400, "invalid_field", "cursor", "cursor must be a next_cursor value", NULL);
		return;
	}
	error = store_runs_list(&json, db, state, wf, trig, (int)limit, before);
	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

static void h_run_stop(struct reply *r, PGconn *db, struct MHD_Connection *conn, int64_t id)
{
	char *actor = actor_of(conn), *state = NULL;
	int error = store_run_stop(&state, db, id, actor);

	if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 200);
	free(state);
	free(actor);
}

static void h_run_retry(struct reply *r, PGconn *db, struct MHD_Connection *conn,
			const struct req *q, int64_t id)
{
	json_t *body = body_object(r, q);
	const char *from = NULL;
	char *actor = NULL;
	int error;

	if (body == NULL)
		return;
	if (opt_string(&from, r, body, "from") < 0)
		goto out;
	actor = actor_of(conn);
	error = store_run_retry(db, id, from, actor);
	if (error < 0)
		reply_store_error(r, error);
	else
		run_reply(r, db, id, 200);
out:
	free(actor);
	json_decref(body);
}

static void h_workflow_register(struct reply *r, PGconn *db, const struct req *q)
{
	json_t *body = body_object(r, q);
	const char *yaml = NULL, *filename = NULL;
	cfg_errors errs = {0};
	char *json = NULL;
	int error;

	if (body == NULL)
		return;
	if (opt_string(&yaml, r, body, "yaml") < 0 || opt_string(&filename, r, body, "filename") < 0)
		goto out;
	if (yaml == NULL) {
		reply_error(r, 400, "invalid_field", "yaml", "field \"yaml\" (the workflow text) is required", NULL);
		goto out;
	}
	error = store_workflow_register(&json, db, yaml, json_string_length(json_object_get(body, "yaml")),
					filename ? filename : "<inline>", &errs);
	if (error == FERRY_EINVALID)
		reply_error(r, 400, "invalid_workflow", "yaml", ferry_error_last(), &errs);
	else if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 201, json);
out:
	cfg_errors_dispose(&errs);
	json_decref(body);
}

/* ---- routing ---- */

enum route {
	R_NONE, R_HEALTH, R_READY, R_RUNS, R_RUN, R_RUN_STOP, R_RUN_RETRY, R_WORKFLOWS
};

/* Matches url; *id gets the run id segment. Returns the route and its methods. */
static enum route route_of(const char *url, const char **allow, const char **id_seg, char *idbuf, size_t idlen)
{
	const char *p;
	size_t n;

	*id_seg = NULL;
	if (strcmp(url, "/healthz") == 0)
		return *allow = "GET", R_HEALTH;
	if (strcmp(url, "/readyz") == 0)
		return *allow = "GET", R_READY;
	if (strncmp(url, "/api/v1/", 8) != 0)
		return R_NONE;
	p = url + 8;
	if (strcmp(p, "runs") == 0)
		return *allow = "GET, POST", R_RUNS;
	if (strcmp(p, "workflows") == 0)
		return *allow = "POST", R_WORKFLOWS;
	if (strncmp(p, "runs/", 5) != 0)
		return R_NONE;
	p += 5;
	n = strcspn(p, "/");
	if (n == 0 || n >= idlen)
		return R_NONE;
	memcpy(idbuf, p, n);
	idbuf[n] = '\0';
	*id_seg = idbuf;
	p += n;
	if (*p == '\0')
		return *allow = "GET", R_RUN;
	if (strcmp(p, "/stop") == 0)
		return *allow = "POST", R_RUN_STOP;
	if (strcmp(p, "/retry") == 0)
		return *allow = "POST", R_RUN_RETRY;
	return R_NONE;
}

static int method_allowed(const char *allow, const char *method)
{
	size_t n = strlen(method);
	for (const char *p = allow; (p = strstr(p, method)) != NULL; p += n)
		if ((p == allow || p[-1] == ' ') && (p[n] == '\0' || p[n] == ','))
			return 1;
	return 0;
}

static void dispatch(struct api *a, struct reply *r, struct MHD_Connection *conn,
		     const char *url, const char *method, const struct req *q)
{
	const char *allow = NULL, *id_seg;
	char idbuf[32];
	enum route rt = route_of(url, &allow, &id_seg, idbuf, sizeof(idbuf));
	PGconn *db = NULL;
	int64_t id = 0;

	if (rt == R_NONE) {
		reply_error(r, 404, "not_found", NULL, "no such route; see GET /api/v1/openapi.json", NULL);
		return;
	}
	if (!method_allowed(allow, method)) {
		char msg[96];
		snprintf(msg, sizeof(msg), "method %s not allowed here; allowed: %s", method, allow);
		reply_error(r, 405, "method_not_allowed", NULL, msg, NULL);
		r->allow = allow;
		return;
	}
	if (rt == R_HEALTH) {
		reply_json(r, 200, xstrdup("{\"status\":\"ok\"}"));
		return;
	}
	if (rt != R_READY && !token_ok(a, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"))) {
		reply_error(r, 401, "unauthorized", NULL,
			    "missing or wrong bearer token (send Authorization: Bearer TOKEN; "
			    "the token is FERRY_API_TOKEN or $FERRY_HOME/api-token)", NULL);
		return;
	}
	if (id_seg && parse_id(&id, id_seg) < 0) {
		reply_error(r, 404, "not_found", "id", "run ids are positive integers", NULL);
		return;
	}
	if (q->too_big) {
		reply_error(r, 413, "too_large", NULL, "request body over 1 MiB", NULL);
		return;
	}
	db = pool_get(a);
	if (db == NULL) {
		reply_error(r, 503, "busy", NULL, "no database connection free; retry shortly", NULL);
		return;
	}
	switch (rt) {
	case R_READY:
		if (store_ping(db) < 0)
			reply_error(r, 503, "database_unavailable", NULL, ferry_error_last(), NULL);
		else
			reply_json(r, 200, xstrdup("{\"status\":\"ready\"}"));
		break;
	case R_RUNS:
		if (strcmp(method, "POST") == 0)
			h_runs_create(r, db, conn, q);
		else
			h_runs_list(r, db, conn);
		break;
	case R_RUN:
		run_reply(r, db, id, 200);
		break;
	case R_RUN_STOP:
		h_run_stop(r, db, conn, id);
		break;
	case R_RUN_RETRY:
		h_run_retry(r, db, conn, q, id);
		break;
	case R_WORKFLOWS:
		h_workflow_register(r, db, q);
		break;
	default:
		reply_error(r, 404, "not_found", NULL, "no such route", NULL);
	}
	pool_put(a, db);
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
		q = xcalloc(1, sizeof(*q));
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
	dispatch(a, &r, conn, url, method, q);
	if (r.body == NULL)
		reply_error(&r, 500, "internal", NULL, "no reply", NULL);
	resp = MHD_create_response_from_buffer(strlen(r.body), r.body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	if (r.allow)
		MHD_add_response_header(resp, "Allow", r.allow);
	ret = MHD_queue_response(conn, r.status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct req *q = *con_cls;

	(void)cls, (void)conn, (void)toe;
	if (q) {
		free(q->body);
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

int api_start(struct api **out, const struct api_opts *o)
{
	struct api *a = xcalloc(1, sizeof(*a));
	struct sockaddr_storage ss;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
	int family;

	*out = NULL;
	if ((family = parse_listen(&ss, o->listen)) < 0)
		goto fail;
	if (family == AF_INET6)
		flags |= MHD_USE_IPv6;
	a->token = xstrdup(o->token);
	a->conninfo = xstrdup(o->conninfo);
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->nconns = o->db_conns > 0 ? o->db_conns : 4;
	a->conns = xcalloc((size_t)a->nconns, sizeof(PGconn *));
	a->free_list = xcalloc((size_t)a->nconns, sizeof(PGconn *));
	for (int i = 0; i < a->nconns; i++) {
		PGresult *res;
		if (db_connect(&a->conns[i], o->conninfo) < 0)
			goto fail;
		res = PQexec(a->conns[i], "SET TIME ZONE 'UTC'");
		PQclear(res);
		a->free_list[a->free_top++] = a->conns[i];
	}
	a->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, a,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(o->threads > 0 ? o->threads : 4),
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
				  MHD_OPTION_END);
	if (a->mhd == NULL) {
		ferry_error_set("cannot listen on %s: %s", o->listen, strerror(errno));
		goto fail;
	}
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
	if (a->mhd)
		MHD_stop_daemon(a->mhd);
	for (int i = 0; a->conns && i < a->nconns; i++)
		if (a->conns[i])
			PQfinish(a->conns[i]);
	free(a->conns);
	free(a->free_list);
	free(a->token);
	free(a->conninfo);
	if (a->nconns) {
		pthread_mutex_destroy(&a->mu);
		pthread_cond_destroy(&a->cv);
	}
	free(a);
}

int api_token_load(char **out, const char *home)
{
	const char *env = getenv("FERRY_API_TOKEN");
	char *path = NULL, *buf = NULL, *tmp = NULL;
	unsigned char raw[24];
	char hex[49];
	int fd = -1, error = FERRY_ERROR;

	*out = NULL;
	if (env && *env) {
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
