/*
 * api_priv — what the handler files of the API (api.c, api_models.c, api_cache.c)
 * share: the request being served, the reply a handler fills, and the
 * helpers that build JSON replies and read JSON bodies. Not for use outside
 * api/.
 */
#ifndef FERRY_API_PRIV_H
#define FERRY_API_PRIV_H

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "config.h"

struct req {
	char *body;
	size_t len;
	int too_big;
	int64_t started_us;

	/* what the database phase needs, set by the fast phase (dispatch) */
	struct MHD_Connection *conn;
	const struct api_route *rt;
	char caps[2][128];
	int64_t id;
	int head, post;
	struct req *next; /* in the database workers' queue */

	/* the reply a database worker prepared; queued when MHD calls again */
	struct MHD_Response *resp;
	unsigned status;
};

struct reply {
	unsigned status;
	char *body; /* JSON text (or content_type), owned */
	const char *allow;
	char allow_buf[48];
	const char *content_type; /* NULL: application/json */
	int replayed;             /* an idempotent start answered from its key */
};

/* Sets r to status with body (JSON text, taken over). */
void reply_json(struct reply *r, unsigned status, char *body);
/* Sets r to a JSON error {"error":{code,message,field?,details?}}. */
void reply_error(struct reply *r, unsigned status, const char *code, const char *field,
		 const char *message, const cfg_errors *details);
/* Maps a store error (FERRY_ENOTFOUND → 404, ECONFLICT → 409, …) onto r. */
void reply_store_error(struct reply *r, int error);
/* Whether s[0..n) is well-formed UTF-8. */
int utf8_valid(const char *s, size_t n);
/* A printable actor name from X-Ferry-Actor, or "api"; the caller frees it. */
char *actor_of(struct MHD_Connection *conn);
/* The request body as a JSON object (empty body: {}), or NULL with a 400 in r. */
json_t *body_object(struct reply *r, const struct req *q);
/* Optional string / boolean fields; -1 with a 400 naming the field when mistyped. */
int opt_string(const char **out, struct reply *r, json_t *body, const char *field);
int opt_bool(int *out, struct reply *r, json_t *body, const char *field);

/* The registry's routes (api_models.c). */
void api_models_list(struct reply *r, PGconn *db);
void api_model_get(struct reply *r, PGconn *db, const char *name);
void api_model_versions(struct reply *r, PGconn *db, const char *name);
void api_model_version(struct reply *r, PGconn *db, const char *name, const char *version);
void api_model_alias_put(struct reply *r, PGconn *db, struct MHD_Connection *conn, const struct req *q,
			 const char *name, const char *alias);

/* GET /cache (api_cache.c): {"entries":[…],"stats":{…}} of the host in ?host= or of every host. */
void api_cache_get(struct reply *r, PGconn *db, struct MHD_Connection *conn);

#endif
