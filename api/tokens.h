/*
 * tokens — who a bearer token is. Two kinds are accepted: the daemon's own
 * token (FERRY_API_TOKEN or $FERRY_HOME/api-token), which is the built-in
 * `admin`, and the named tokens of `ferryd token create`
 * (db/migrations/0008_api_tokens.sql), known by their sha256 only.
 *
 * Coherence: a reloader thread with its own connection (application_name
 * ferryd-api-tokens) LISTENs on ferry_tokens, which every change of the
 * token table notifies at commit (migration 0024), reads the live named
 * tokens when told (and every 30 s, and after a reconnect) and swaps the
 * table in: a created token works, and a revoked one stops working, on
 * every daemon as soon as the notification arrives (milliseconds). While
 * the database cannot be read the last table read stays in force (the
 * daemon's own token always works); before the first read only the
 * daemon's own token is accepted.
 *
 * The request path never waits on the database: the daemon's token is
 * compared in constant time without any lock; any other token is hashed
 * and looked up (binary search) under a mutex held for the lookup alone.
 */
#ifndef FERRY_API_TOKENS_H
#define FERRY_API_TOKENS_H

#include <stddef.h>

#include "store/store.h"

/* What a token may do, in increasing order. */
enum token_role {
	ROLE_VIEWER = 1,   /* GET and HEAD only */
	ROLE_OPERATOR = 2, /* also start, stop, retry, continue and delete runs, register workflows */
	ROLE_DEPLOYER = 3, /* also what serves: model aliases, deployments (traffic, promote, rollback, scale,
	                    * extend, stop, start, delete), predictions; a run's register alias and deploy */
	ROLE_ADMIN = 4,    /* everything: also schedules, triggers, secrets */
};

/* A token's name, as recorded as the actor of what it does, at most 63 bytes. */
#define TOKEN_NAME_MAX 64

struct tokens;

/*
 * A table that accepts own_token (the built-in admin). With conninfo not
 * NULL, starts the reloader thread (it reconnects by itself; 0 even when
 * the database is down). *out is the caller's: tokens_free.
 */
int tokens_new(struct tokens **out, const char *own_token, const char *conninfo);

/* Stops the reloader and frees everything; accepts NULL. */
void tokens_free(struct tokens *t);

/*
 * Who the Authorization header (Bearer TOKEN) is: 1 with *role and name set
 * (own: 1 for the daemon's own token), 0 when the header is missing or the
 * token unknown or revoked.
 */
int tokens_check(struct tokens *t, const char *header, enum token_role *role, char name[TOKEN_NAME_MAX],
		 int *own);

/* Replaces the named tokens by v (n entries, hashes as in store_token_live); tests and the reloader. */
void tokens_set(struct tokens *t, const struct store_token *v, int n);

/* The role named s (viewer, operator, admin), or 0. */
enum token_role token_role_parse(const char *s);
/* The name of role. */
const char *token_role_name(enum token_role role);

#endif
