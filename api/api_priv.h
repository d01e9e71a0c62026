/*
 * api_priv — what the handler files of the API (api.c, api_models.c, api_cache.c)
 * share: the request being served, the reply a handler fills, and the
 * helpers that build JSON replies and read JSON bodies (api_reply.c). Not
 * for use outside api/.
 */
#ifndef FERRY_API_PRIV_H
#define FERRY_API_PRIV_H

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "api/api_conns.h"
#include "plan/config.h"
#include "api/tokens.h"

struct req {
	char *body;
	size_t len;
	int too_big;
	int64_t started_us;

	/* what the handler needs, set by the fast phase (dispatch) */
	struct MHD_Connection *conn;
	const struct api_route *rt;
	char *url;         /* the request's path, for the trace (FERRY_API_TRACE only), or NULL */
	char caps[3][128]; /* the {x} segments of the path, in order */
	int64_t id;        /* the {id} segment (a positive integer) when the pattern has one */
	int head;          /* a HEAD served by the GET route: no body goes out */
	enum token_role role;        /* of the bearer token (routes that take one) */
	char token_name[TOKEN_NAME_MAX]; /* "admin" for the daemon's own token */
	int own_token;               /* the daemon's own token (FERRY_API_TOKEN, $FERRY_HOME/api-token) */
	struct req *next; /* in the database workers' queue */

	/* the reply a database worker prepared; queued when MHD calls again */
	struct MHD_Response *resp;
	unsigned status;
};

struct reply {
	unsigned status;
	char *body; /* JSON text (or content_type), owned */
	struct MHD_Response *resp; /* or a response made by the handler (a log file, a stream) */
	const char *allow;
	char allow_buf[64];
	const char *content_type; /* NULL: application/json */
	int replayed;             /* an idempotent start answered from its key */
};

/*
 * FERRY_API_TRACE=FILE: each answer as one JSON line appended to FILE
 * (method, url, route, status, content type and the JSON body), for the
 * integration suite's check of every answer against api/openapi.json
 * (tests/api/validate.py). Off (trace_fd -1) unless set. api_trace.c
 */
void api_trace_open(struct api *a);
void api_trace(const struct api *a, const struct req *q, const char *method, const char *url,
	       const struct reply *r);


/* The API server (api.h): shared by api.c and the handler files that keep state (api_logs.c). */
struct api {
	struct MHD_Daemon *mhd;
	atomic_int stopping; /* set before MHD_stop_daemon: log streams end */
	struct tokens *tokens; /* who a bearer token is (tokens.h) */
	char *conninfo;
	char *home; /* FERRY_HOME, or NULL */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nconns, free_top;
	PGconn **free_list; /* free slots: a connection, or NULL until one is needed */
	struct health *health; /* the daemon's flags (readyz, metrics); may be NULL */
	char url[80];          /* where clients on this machine reach the API */
	struct runcache *cache; /* finished runs' JSON; NULL when turned off */
	int trace_fd;           /* FERRY_API_TRACE: one JSON line an answer (api_trace.c), or -1 */
	struct api_streams *ui;      /* the run streams and the DAG cache (api_stream.c) */
	struct api_conns conns;      /* connections waiting for their headers, bounded (api_conns.h) */

	/* log streams waiting for their file to grow: parked (suspended) until the next tick */
	pthread_mutex_t park_mu;
	struct MHD_Connection **parked;
	int nparked, parked_cap;
	pthread_t ticker;
	int ticker_started;
	int wake[2]; /* api_stop writes to wake[1] to end the ticker */

	/* requests that need the database: suspended, queued, served by db workers */
	pthread_mutex_t q_mu;
	pthread_cond_t q_cv;
	struct req *q_head, *q_tail;
	int q_closed; /* api_stop: no more requests queued; workers drain and end */
	pthread_t *db_workers;
	int ndb_workers;
};

/* A free pooled connection now, or NULL (never waits); api_pool_put gives it back. */
PGconn *api_pool_try_get(struct api *a);
void api_pool_put(struct api *a, PGconn *c);

/*
 * Step logs (api_logs.c): the route's handler, the ticker thread that
 * resumes parked log streams every PARK_MS, and the resumption of all of
 * them (api_stop).
 */
void api_step_logs(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* GET /runs/{id}/steps/{step}/outputs/{file}: a file of the step's output directory, from its host. */
void api_step_output(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_deployment_logs(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* api_monitor.c: GET /runs/{id}/steps/{step}/monitor */
void api_step_monitor(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* api_deploy.c */
void api_deployments_list(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* /metrics' per-version live figures from the proxy's log (nothing on a daemon without HAProxy). */
void api_deploy_metrics(PGconn *db, char **buf, size_t *len, size_t *cap);
void api_deployment_get(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_deployment_traffic(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_deployment_patch(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_deployment_delete(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_deployment_predict(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* api_schedules.c */
void api_schedules_list(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_schedule_create(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_schedule_get(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_schedule_patch(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_schedule_delete(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_hook_git(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_triggers_list(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_trigger_patch(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* A run id in a path or cursor: digits only, positive; -1 otherwise. */
int api_parse_id(int64_t *out, const char *s);

/* api_runs.c: runs and workflows. */
void api_runs_list(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_runs_create(struct api *a, struct reply *r, PGconn *db, struct req *q);
int api_run_cached(struct api *a, struct reply *r, struct req *q);
void api_run_get(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_run_delete(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_run_stop(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_run_retry(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_audit(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* api_secrets.c */
void api_secrets_list(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_secret_put(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_secret_delete(struct api *a, struct reply *r, PGconn *db, struct req *q);
/* api_queues.c: list, read (running and waiting with why), create, change, delete ({name} in q->caps[0]) */
void api_queues_list(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_queue_get(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_queue_create(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_queue_patch(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_queue_delete(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_run_events(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_step_continue(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_step_reject(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_workflows_list(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_hosts_list(struct api *a, struct reply *r, PGconn *db, struct req *q);

/*
 * Forwarding (api_forward.c): when host (where what the request asks for
 * lives: an attempt's host) is another host of the fleet and the request
 * was not forwarded to us already, answers r through that host's API at
 * path_query (its status, body and log headers streamed back, X-Ferry-Host
 * naming it), or 503 naming the host when no daemon of it is up (unless
 * have_here: a copy is readable here, served here then) or it does not
 * answer; returns 1 then. 0: serve it here. what ("the log of step X
 * attempt N") is for the messages.
 */
int api_forward(struct api *a, struct reply *r, PGconn *db, struct req *q, const char *host, const char *path_query,
		const char *what, int have_here);
/* s percent-encoded for a path segment (unreserved characters kept); the caller's. */
char *api_path_escape(const char *s);
/* Suspends conn until the log ticker's next round (api_logs.c); 0 when the API is stopping. */
int api_logs_park(struct api *a, struct MHD_Connection *conn);
/* Whether the client closed its side of the connection (sock: its socket; api_logs.c). */
int api_client_gone(int sock);
void api_workflow_register(struct api *a, struct reply *r, PGconn *db, struct req *q);

/*
 * api_stream.c: GET /runs/{id}/stream (Server-Sent Events) and GET
 * /runs/{id}/dag.svg. api_stream_start makes a->ui and its poller thread
 * (FERRY_UI_STREAMS: at most that many streams, default 64); api_stream_stop
 * ends every stream and the poller (before MHD_stop_daemon); api_stream_free
 * (after it) frees what is left. Both accept a->ui NULL.
 */
void api_run_stream(struct api *a, struct reply *r, PGconn *db, struct req *q);
/*
 * One of the FERRY_UI_STREAMS slots for another long-lived answer (a
 * followed log, api_logs.c): 0, or -1 with r answered 503
 * too_many_streams. Given back with api_stream_slot_release.
 */
int api_stream_slot_take(struct api *a, struct reply *r);
void api_stream_slot_release(struct api *a);
/* Streams open now (run events and followed logs) and the most allowed (FERRY_UI_STREAMS); 0 and 0 without the console. */
void api_stream_counts(struct api *a, int *open, int *max);
void api_runs_stream(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_run_dag_svg(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_step_get(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_step_items(struct api *a, struct reply *r, PGconn *db, struct req *q);
void api_run_timeline(struct api *a, struct reply *r, PGconn *db, struct req *q);
int api_stream_start(struct api *a);
void api_stream_stop(struct api *a);
void api_stream_free(struct api *a);
void *api_logs_ticker(void *arg);
void api_logs_unpark_all(struct api *a);
/*
 * Resumes conn now if it is parked (1), so an answer that another thread
 * feeds (a forwarded one) goes on as soon as it has bytes, not at the
 * ticker's next round; 0 when it is not parked.
 */
int api_logs_unpark(struct api *a, struct MHD_Connection *conn);

/*
 * A route's handler, on a database worker: fills r from q. db is a pooled
 * connection, or NULL for a ROUTE_DB_OPTIONAL route when none could be had
 * and for a ROUTE_OWN_DB route (which takes its own, with its own bounds).
 */
typedef void api_handler(struct api *a, struct reply *r, PGconn *db, struct req *q);

/*
 * A route's fast phase, on the MHD worker, before any database work; it must
 * not wait. 1 when r (or r->resp) is the answer, 0 to go on to the handler.
 */
typedef int api_fast(struct api *a, struct reply *r, struct req *q);

enum route_flags {
	ROUTE_DB_OPTIONAL = 1 << 1, /* answers without the database when none is free */
	ROUTE_OWN_DB = 1 << 2,      /* the handler takes (and bounds) its own connection */
};

/*
 * Who may call a route, declared on its row: no token at all (ROUTE_PUBLIC:
 * health, readiness, metrics, the OpenAPI document, the console's files,
 * the git hook that checks its own HMAC), or a bearer token of this role or
 * above (enum token_role: viewer, operator, admin). 0 is no declaration:
 * api_start refuses such a table, and tests/unit/test_api.c and
 * t_roles.sh walk every row.
 */
#define ROUTE_PUBLIC (-1)

/*
 * The routing table: one row per method and path pattern ({x} is one path
 * segment; {id} a positive integer). HEAD is served wherever GET is; a path
 * whose pattern has no row for the method is answered 405 with an Allow
 * header listing the methods the path takes. Ends with a NULL pattern.
 */
struct api_route {
	const char *method;   /* GET, POST, PUT, PATCH or DELETE */
	const char *pattern;  /* "/api/v1/runs/{id}" */
	int role;             /* ROUTE_PUBLIC, or the least enum token_role that may call it */
	unsigned flags;       /* enum route_flags */
	api_fast *fast;       /* NULL: none */
	api_handler *handler; /* NULL: the fast phase always answers */
	/*
	 * What a request may carry, space-separated: the query parameters
	 * ("state workflow limit") and the fields of the JSON body ("from
	 * no_cache"); NULL: none. Anything else is a 400 naming it, so a
	 * misspelt name is never silently ignored (query: checked in dispatch
	 * for the /api/v1 routes; body: by body_object).
	 */
	const char *query;
	const char *fields;
};
extern const struct api_route api_routes[];

/* 0, or FERRY_ERROR naming the first row of table that declares no role (api_start refuses it). */
int api_routes_check(const struct api_route *table);

/*
 * Finds in table (api_routes) the route of method (HEAD finds GET) and url,
 * copying its {x} segments into caps. NULL when there is none, with allow
 * set to the methods the path takes ("GET, HEAD, PATCH"; "" when no
 * pattern matches it: 404, else 405).
 */
const struct api_route *api_route_find(const struct api_route *table, const char *method, const char *url,
				       char caps[3][128], char *allow, size_t allow_len);

/* Sets r to status with body (JSON text, taken over). */
void reply_json(struct reply *r, unsigned status, char *body);
/* Sets r to a JSON error {"error":{code,message,field?,details?}}. */
void reply_error(struct reply *r, unsigned status, const char *code, const char *field,
		 const char *message, const cfg_errors *details);
/* Maps a store error (FERRY_ENOTFOUND → 404, ECONFLICT → 409, …) onto r. */
void reply_store_error(struct reply *r, int error);
/* Whether s[0..n) is well-formed UTF-8. */
int utf8_valid(const char *s, size_t n);
/*
 * Who did it, recorded as the actor: the named token's name, or for the
 * daemon's own token "admin", "admin (as NAME)" with a printable
 * X-Ferry-Actor of at most 63 bytes sent from this machine. The caller
 * frees it.
 */
char *actor_of(const struct req *q);
/*
 * The request body as a JSON object (empty body: {}), or NULL with a 400 in
 * r: malformed, not an object, or a field that q's route does not take
 * (unknown_field, naming it and listing the route's fields).
 */
json_t *body_object(struct reply *r, const struct req *q);
/*
 * Where name is in list (space-separated, as api_route's query and fields):
 * 1 for the first word, …; 0 when it is not there (or list is NULL).
 */
int name_listed(const char *list, const char *name);
/*
 * A 400 unknown_field naming name, a query parameter or (body) a body field,
 * and listing the valid ones in list (api_route's query or fields).
 */
void reply_unknown(struct reply *r, const char *what, const char *name, const char *list);
/* A 400 invalid_field: parameter name's value is not one of valid (NULL-terminated), which it lists. */
void reply_not_one_of(struct reply *r, const char *name, const char *value, const char *const *valid);
/*
 * 0 when every query parameter of q is one its route takes (api_route's
 * query), each once; else -1 with a 400 in r naming the first that is not.
 */
int query_check(struct reply *r, const struct req *q);
/* Optional string / boolean fields; -1 with a 400 naming the field when mistyped. */
int opt_string(const char **out, struct reply *r, json_t *body, const char *field);
int opt_bool(int *out, struct reply *r, json_t *body, const char *field);

/* The registry's routes (api_models.c): the {name}, {version} and {alias} segments are in q->caps. */
api_handler api_models_list, api_model_get, api_model_versions, api_model_version, api_model_alias_put;
/* description, tags, archived (PATCH); an alias removed (DELETE) */
api_handler api_model_patch, api_model_version_patch, api_model_alias_delete;
/* a version registered from a path on this machine, outside a pipeline (POST …/versions) */
api_handler api_model_register;
/*
 * GET /models/{name}/versions/{version}/artifact[?path=P]: a file
 * artifact's bytes; a directory's manifest (JSON: format, files[] with
 * path, sha256, bytes), or with ?path= the bytes of the manifest's file P.
 */
api_handler api_model_artifact;
api_handler api_blob_get;

/* GET /ui, /ui/, /ui/{file} (api_ui.c): the console's files, from memory, without a token. */
int api_ui_fast(struct api *a, struct reply *r, struct req *q);

/* GET /cache (api_cache.c): {"entries":[…],"stats":{…}} of the host in ?host= or of every host. */
api_handler api_cache_get;

#endif
