/*
 * store_priv — what the store's files (store.c, store_claim.c,
 * store_runs.c, store_workflows.c, store_models.c, …) share: one
 * parameterised statement with SQLSTATEs mapped onto the error enum, the
 * readers of a result's columns and the array-literal builder.
 * Not for use outside the store module.
 */
#ifndef FERRY_STORE_PRIV_H
#define FERRY_STORE_PRIV_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Runs sql with n text params (NULL entries are SQL NULL). On success *out
 * (when out is not NULL) holds the result, the caller's to PQclear; on
 * failure returns FERRY_ENOTFOUND (P0002), FERRY_ECONFLICT (55000),
 * FERRY_EINVALID (22xxx) or FERRY_EDB, with the message set.
 */
int store_q(PGresult **out, PGconn *conn, const char *sql, int n, const char *const *params);
/*
 * As store_q, sql prepared once a connection under name (unique per sql) and
 * executed by name: no parse and, once PostgreSQL settles on a generic plan,
 * no planning at each call. For the statements the engine makes per step.
 */
int store_qp(PGresult **out, PGconn *conn, const char *name, const char *sql, int n, const char *const *params);
/* A statement without params or result: BEGIN, COMMIT, SAVEPOINT x, NOTIFY …; as store_q. */
int store_tx(PGconn *conn, const char *cmd);

/* ---- reading a result's columns ---- */

/* The text of a column, the caller's; NULL when SQL NULL. */
char *store_dupval(PGresult *res, int row, int col);
/* An integer column; 0 when SQL NULL. */
int64_t store_intval(PGresult *res, int row, int col);
/* A JSON column, the caller's: NULL when SQL NULL (or, which cannot happen, not JSON). */
json_t *store_jsonval(PGresult *res, int row, int col);

/* ---- a text builder for array literals ({"a","b"}) ---- */

struct sbuf {
	char *p;
	size_t len, cap;
};
void sbuf_add(struct sbuf *b, const char *s, size_t n);
void sbuf_str(struct sbuf *b, const char *s);
void sbuf_int(struct sbuf *b, int64_t v);
/* Appends one element of a text array literal: quoted, or NULL. */
void sbuf_elem(struct sbuf *b, const char *s);
/* "{" before element 0, "," before the others. */
void sbuf_sep(struct sbuf *b, int i);
/* Closes the literal of n elements ("{}" when none); returns its text (b->p, the caller's). */
const char *sbuf_close(struct sbuf *b, int n);
/* Appends a JSON value (or NULL) as an element of a text array literal. */
void sbuf_json(struct sbuf *b, const json_t *v);

/* ---- store_deploy_json.c ---- */

struct deploy_warning;
/* The warnings of the JSON aggregate [{"id","deployment","deadline"}]; *out and *n the caller's. */
int deploy_warnings_from_json(struct deploy_warning **out, size_t *n, const json_t *j);

#endif
