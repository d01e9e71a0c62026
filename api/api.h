/*
 * api — the REST server: libmicrohttpd (a pool of epoll workers), bearer-token
 * auth (the daemon's own token, compared in constant time, is `admin`; named
 * tokens with roles from `ferryd token create`: tokens.h), JSON in and out (jansson), a bounded pool of
 * PostgreSQL connections, and JSON errors {"error":{"code","message",…}}.
 */
#ifndef FERRY_API_H
#define FERRY_API_H

#include <stddef.h>

struct health;

struct api_opts {
	const char *listen;   /* "127.0.0.1:8080", "[::1]:8080"; port 0: a free one (api_url says which) */
	const char *token;    /* the daemon's own bearer token: the built-in admin */
	const char *conninfo; /* database */
	const char *home;     /* FERRY_HOME: DELETE /runs/{id} removes runs/ID below it; NULL: no files */
	int db_conns;         /* pooled database connections (the bound on concurrent queries) */
	size_t cache_entries; /* finished runs kept in memory (runcache.h); 0: no cache */
	size_t cache_bytes;   /* and their JSON bytes at most */
	int workers;          /* MHD epoll workers; 0: one per two cores (at least 1, at most 8) */
	struct health *health; /* the daemon's flags for /readyz and /metrics (outlives the API); NULL: none */
};

struct api;

/* The OpenAPI 3 document served at /api/v1/openapi.json. */
extern const char api_openapi_json[];

/*
 * Binds and starts serving; *out is the caller's (api_stop). The database
 * is not needed yet: each pooled connection is made when first used, and
 * /readyz answers 503 until it answers.
 */
int api_start(struct api **out, const struct api_opts *opts);

/*
 * The address the API was bound to, as clients on this machine reach it:
 * "http://127.0.0.1:43117" (a wildcard address becomes loopback; IPv6 in
 * brackets). Owned by a.
 */
const char *api_url(const struct api *a);
void api_stop(struct api *a);

/*
 * Resolves the API token: FERRY_API_TOKEN (FERRY_EINVALID when it holds a
 * blank or control character), else $home/api-token, created with a fresh
 * random token (mode 0600) when missing. *out is the caller's.
 */
int api_token_load(char **out, const char *home);

#endif
